"""Where the slots stand, counted without a cache: what each speculative iteration leaves in a sequence's
target cache (:func:`verify_trace`), and what a full-prefix hit reuses and recomputes (:func:`prefix_hit`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specnotes import validate


def verify_trace(prompt_length: int, accepted, k: int, block_size: int) -> list[dict]:
    """What each speculative iteration of one sequence leaves in its target cache, from its accepted
    counts (a column of ``GenerationStats.accepted``; -1 once done). Per iteration: the verified length
    before, the slots the verify pass wrote (``written``: verified + k + 1), the verified length after
    (+ 1 + accepted), the token ids known (verified + 1: the pending token has no keys yet), and whether
    the pending token's slot holds a rejected draft's keys (``stale``) at the last slot of a block: the
    block a "written" policy publishes with a rejected draft inside."""
    validate.integer("prompt_length", prompt_length, low=1)
    validate.integer("k", k, low=1)
    validate.integer("block_size", block_size, low=1)
    if isinstance(accepted, torch.Tensor):
        accepted = accepted.flatten().tolist() if not accepted.is_floating_point() else accepted.flatten()
    try:
        accepted = list(accepted)
    except TypeError:
        raise validate.BadArgumentType(f"accepted must be a sequence of accepted counts, got {accepted!r}") from None
    # each iteration accepts 0..k drafts; -1 marks a sequence that is done (a GenerationStats.accepted column)
    accepted = [validate.integer(f"accepted[{i}]", a, low=-1, high=k) for i, a in enumerate(accepted)]
    rows, verified = [], prompt_length - 1
    for i, a in enumerate(accepted):
        if a < 0:
            break
        written, after = verified + k + 1, verified + 1 + a
        rows.append({"iteration": i, "verified before": verified, "accepted": a, "written": written,
                     "verified after": after, "tokens known": after + 1, "stale": a < k,
                     "stale at a block end": a < k and after % block_size == block_size - 1})
        verified = after
    return rows


@dataclass(frozen=True)
class PrefixHit:
    """A hit on a prompt whose every block is cached, counted in tokens (``prefix_hit``)."""

    servable: int  # the prompt minus its last token (always computed) and the drafter's lag
    blocks: int  # whole blocks in the servable tokens: what is hashed, published and found
    reused: int
    recomputed: int  # the block the drop rule gives back


def prefix_hit(prompt_tokens: int, block_size: int, lag: int = 1, drop: bool = True) -> PrefixHit:
    """What a full-prefix hit reuses and recomputes, by ``PrefixCache.hit_blocks``'s rules: the last prompt
    token is always computed, a drafter ``lag`` tokens behind holds that many fewer, only whole blocks hit,
    and with ``drop`` (and a lag) the last hit block is given back and recomputed."""
    prompt_tokens = validate.integer("prompt_tokens", prompt_tokens, low=1)
    block_size = validate.integer("block_size", block_size, low=1)
    lag = validate.integer("lag", lag, low=0)
    servable = max(0, prompt_tokens - 1 - lag)
    blocks = servable // block_size
    dropped = 1 if drop and lag and blocks else 0
    return PrefixHit(servable, blocks, (blocks - dropped) * block_size, dropped * block_size)
