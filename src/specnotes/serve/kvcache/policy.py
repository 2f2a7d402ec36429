"""How a prefix cache publishes blocks and serves hits (:class:`Policy`; the right one is ``RIGHT``), and the
policies Chapter 9 compares (``POLICIES``). What speculation adds, and what ``Policy`` chooses:

- *Publication.* A verify pass writes k+1 slots and then rolls back the rejected ones, and the sequence's
  token count runs one ahead of its verified keys (the pending token, whose slot may still hold a
  rejected draft's keys). ``publish="verified"`` publishes a block only when every slot holds keys and
  values of a verified token; ``"written"`` publishes it once all its slots have been written, by any
  pass, and token ids exist for them — which publishes a rejected draft's keys under the committed
  tokens' hash. Without speculation the two rules agree.
- *Drafters whose state lags.* An EAGLE/MTP-style drafter's state at slot i depends on token i+1 (it runs
  one token ahead; ``LookaheadDrafter`` reproduces that alignment with the shipped draft model). Block
  j's hash does not cover token (j+1)·B, so a hit cannot vouch for the drafter's last slot of a block
  by its hash alone. ``on_hit="lookahead"`` keys the drafter's blocks by the following token as well
  (vLLM RFC #50438): the key names everything the state depends on, so every hit is exact.
  ``"drop"`` serves drafter block j only if the request that wrote it also wrote the target block j+1
  the hit reuses (then its token (j+1)·B is the new request's), and so always gives back the last hit
  block, which has no successor in the hit: exact for any sharing pattern. ``"drop-last"`` gives back
  the last hit block only (our model of vLLM's ``drop_eagle_block``): exact while one writer's blocks
  follow each other, not when requests branch at a block boundary (request A writes block j and goes
  on with one token, B shares block j, goes on with another and writes block j+1; a request hitting
  both gets A's drafter state in the last slot of block j). ``"keep"`` reuses the last block anyway.
  On an attention-only model a wrong drafter state changes the drafts, never the output: the target
  verifies every token. On a hybrid model whose dropped block also holds target state (a Mamba/GDN
  layer's recurrent state), skipping the drop changes outputs (vLLM #43559, PR #48375).
"""

from __future__ import annotations

from dataclasses import dataclass

from specnotes import validate

ON_HIT = ("drop", "lookahead", "drop-last", "keep")


@dataclass(frozen=True)
class Policy:
    """How a prefix cache publishes blocks and serves hits. The right policy is ``Policy()``.

    publish: ``"verified"`` (every slot holds a verified token's keys) or ``"written"`` (every slot was
        written by some pass: wrong under speculation).
    on_hit: for a drafter whose state runs one token ahead: ``"drop"`` every hit block whose drafter
        state was written by another request than the target block after it (the last one included),
        ``"lookahead"`` (key its blocks by the following token too), ``"drop-last"`` (the last hit block
        only: wrong when requests branch at a block boundary) or ``"keep"`` it (wrong).
    chain: hash each block together with its whole prefix (right) or alone (wrong: a block of equal
        tokens after a different prefix would be reused).
    """

    publish: str = "verified"
    on_hit: str = "drop"
    chain: bool = True

    def __post_init__(self):
        validate.choice("publish", self.publish, ("verified", "written"))
        validate.choice("on_hit", self.on_hit, ON_HIT)
        validate.choice("chain", self.chain, (True, False))

    @property
    def name(self) -> str:
        wrong = [w for w, on in (("publishes written slots", self.publish == "written"),
                                 ("keeps a lagging drafter's last block", self.on_hit == "keep"),
                                 ("drops only a lagging drafter's last block", self.on_hit == "drop-last"),
                                 ("unchained hashes", not self.chain)) if on]
        return "wrong: " + ", ".join(wrong) if wrong else f"right ({self.on_hit})"


RIGHT = Policy()
POLICIES = {
    "verified + drop": RIGHT,
    "verified + lookahead hash": Policy(on_hit="lookahead"),
    "written (eager publication)": Policy(publish="written"),
    "keep the lagging last block": Policy(on_hit="keep"),
    "drop the last block only (old rule)": Policy(on_hit="drop-last"),
    "unchained hashes": Policy(chain=False),
}
