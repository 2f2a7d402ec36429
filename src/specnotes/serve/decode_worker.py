"""A decode worker: continuous batching with speculation on the shipped model pair (Chapter 8).

Serving is disaggregated here, as in production prefill/decode (PD) splits: ``prefill`` runs a
request's prompt and packs a ``Handoff`` (the target's KV cache, the pending token and the
*drafter's* state); a ``DecodeWorker`` admits handoffs into its running batch, decodes every
admitted request one step at a time with the k a policy picks for that step, and releases each
request when it has all its tokens.

The worker keeps one KV cache per model with a row per slot. Occupied rows are always 0..B-1: a
request joins in row B, and when one leaves, the last row moves into its place. So every pass runs
over ``cache.rows(B)``, a view of exactly the running batch, and costs what a batch of B costs.

The draft model's cache follows lazily. A step with k = 0 does not run the draft; the tokens it
emits wait in the row's history, and the next speculative step feeds the whole backlog to the draft
in its first pass (``DraftModelDrafter`` accepts any number of pending tokens). vLLM's V0 worker
avoided that catch-up instead: a request that had speculation disabled never speculated again.

A handoff without the drafter's state (for the draft model, the prompt; a ``draft_cache`` saves rebuilding
its KV, but only with the prompt it is checked against. SGLang issue #36140: the decode side of a PD split got
``spec_info = None`` and crashed) is refused with ``MissingDrafterState``, or, with
``on_missing="plain"``, admitted to decode without speculation: that row verifies nothing and samples
its token from the target alone, so its output is exactly plain decoding's.

**Isolation.** One request's bad state must never touch another's. ``admit`` checks the drafter state
before it copies anything (``drafter_state_problem``): its type, the model it belongs to (layers, heads,
head size), dtype and device, how many tokens it holds, and that it is *this request's*: a cache's
layer-0 keys are a function of each token and its position alone, so recomputing them for the
request's prompt (one small matmul, no prefill) fingerprints the prefix the cache covers; the prompt
is fingerprinted against the target cache the same way. A bad state is refused with
``InvalidDrafterState``, or, with ``on_missing="plain"``, the request decodes without speculation (k = 0)
and its ``Finished.reason`` says why. Inside ``step``, a row whose bookkeeping breaks the worker's
invariants, or that raises on its own, fails alone (``StepResult.failed`` gives its reason), even when every
running request does; the step is rolled back and rerun without it, so every other request goes on token for
token as if it had never been admitted (greedy). With sampling the rerun starts from the random state the
step began with: after a request admitted last that fails in its first step, the others draw exactly what
they would have drawn without it; otherwise (it fails later, or another row moves into its place) they go on
with a valid sample, not the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specnotes import validate
from specnotes.sampling.exact import logits_to_probs, sample_from, speculative_sample
from specnotes.tiny.drafters import DraftModelDrafter
from specnotes.tiny.generate import prefill as prefill_cache
from specnotes.tiny.model import KVCache, Transformer, apply_rope
from specnotes.tiny.ragged import packed_forward, sample_rows

PACK_BELOW = 0.75  # a step with one k a row runs packed when its real tokens are under this share of the rectangle
# the handoff fields each kind of drafter needs, all of them, to draft
DRAFTER_STATE = {
    "draft_model": ("prompt",),  # the tokens: its KV is rebuilt from them, or a draft_cache checked against them
    "ngram": ("prompt",),  # the tokens it looks n-grams up in
    "eagle": ("hidden",),  # the target's last hidden state, which feature-level drafters extend
}
# fields a drafter uses when they come too: the draft model's own KV of the prefix saves rebuilding it
OPTIONAL_STATE = {"draft_model": ("draft_cache",)}
ON_MISSING = ("refuse", "plain")


class DrafterStateError(ValueError):
    """A handoff's drafter state cannot be used: missing or invalid."""


class MissingDrafterState(DrafterStateError):
    """A handoff reached a speculating decode worker without what its drafter needs."""


class InvalidDrafterState(DrafterStateError):
    """A handoff carries drafter state that is not this request's draft state: wrong type, model, dtype,
    device or length, or the state of another prefix."""


@dataclass
class Handoff:
    """What a prefill worker sends a decode worker for one request.

    ``target_cache``: the target's KV of the prompt but its last token (batch 1); ``last_token``: that
    token, which the first decode step feeds. Drafter state, as ``DRAFTER_STATE`` (needed) and
    ``OPTIONAL_STATE`` (used if present) list per drafter: ``prompt`` (the prompt tokens), ``draft_cache``
    (the draft model's KV of the same prefix) or ``hidden`` (an EAGLE-style drafter's input)."""

    request_id: int
    target_cache: KVCache
    last_token: int
    max_new_tokens: int
    prompt: torch.Tensor | None = None
    draft_cache: KVCache | None = None
    hidden: torch.Tensor | None = None

    @property
    def prompt_length(self) -> int:
        return int(self.target_cache.lengths[0]) + 1


def prefill(target: Transformer, prompt: torch.Tensor, max_new_tokens: int, request_id: int = 0,
            draft: Transformer | None = None, capacity: int | None = None, drafter_state: bool = True) -> Handoff:
    """The prefill side: run ``prompt`` (1-D int64) through the target (and the draft, if given) and pack
    the handoff. ``drafter_state=False`` leaves the drafter's state out, as a broken PD handoff does."""
    prompt = torch.as_tensor(prompt, dtype=torch.int64).flatten().cpu()
    if prompt.numel() == 0:
        raise validate.BadArgument("prompt must hold at least one token")
    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens, low=1)
    capacity = prompt.numel() if capacity is None else validate.integer("capacity", capacity, low=prompt.numel())
    with torch.inference_mode():
        cache, last, _ = prefill_cache(target, [prompt], capacity)
        draft_cache = None
        if draft is not None and drafter_state:
            drafter = DraftModelDrafter(draft)
            drafter.start([prompt], capacity)
            draft_cache = drafter.cache
    return Handoff(request_id, cache, int(last[0]), max_new_tokens, prompt if drafter_state else None, draft_cache)


def drafter_state(handoff: Handoff, drafter: str) -> str | None:
    """The handoff field ``drafter`` loads its state from (an optional field it carries, else the required one),
    or None if a field it needs is missing."""
    validate.choice("drafter", drafter, DRAFTER_STATE)
    if any(getattr(handoff, name) is None for name in DRAFTER_STATE[drafter]):
        return None
    present = [name for name in OPTIONAL_STATE.get(drafter, ()) if getattr(handoff, name) is not None]
    return (present + list(DRAFTER_STATE[drafter]))[0]


def missing_state_message(handoff: Handoff, drafter: str) -> str:
    missing = [name for name in DRAFTER_STATE[drafter] if getattr(handoff, name) is None]
    optional = OPTIONAL_STATE.get(drafter, ())
    carried = [name for name in optional if getattr(handoff, name) is not None]
    return (f"request {handoff.request_id}: the handoff carries no {', '.join(missing)} for the {drafter} drafter "
            f"(it needs: {', '.join(DRAFTER_STATE[drafter])}"
            + (f"; it can also use: {', '.join(optional)}" if optional else "") + ")"
            + (f"; its {', '.join(carried)} cannot be checked against the request without it" if carried else "")
            + ". Send it from the prefill side, or admit the request with on_missing='plain' to decode it without "
            "speculation. (SGLang issue #36140 is this failure: spec_info was None on the decode side of a PD "
            "split.)")


def check_handoff(handoff: Handoff, drafter: str) -> str:
    """The field ``drafter`` loads its state from; ``MissingDrafterState`` if a field it needs is missing."""
    field = drafter_state(handoff, drafter)
    if field is None:
        raise MissingDrafterState(missing_state_message(handoff, drafter))
    return field


# ---------------------------------------------------------------------------------------------- checking a handoff


@torch.inference_mode()
def first_layer_keys(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """[n_heads, n, d_head]: the keys ``model``'s first layer computes for ``tokens`` at positions 0..n-1. Each
    is a function of one token and its position (no attention has happened yet), so they fingerprint the
    tokens a cache covers without a prefill."""
    block, n = model.blocks[0], tokens.numel()
    x = block.attn_norm(model.tok_emb(tokens.reshape(1, n).to(model.lm_head.weight.device)))
    k = block.wqkv(x).view(1, n, 3, block.n_heads, block.d_head)[:, :, 1].transpose(1, 2)
    cos, sin = model.rope_at(torch.arange(n, device=x.device)[None])
    return apply_rope(k, cos, sin)[0]


def same_keys(held: torch.Tensor, fresh: torch.Tensor) -> bool:
    """Keys agree to rounding: within sqrt(eps), relative to their size, of the dtype or of float32, whichever is
    coarser, since ``apply_rope`` rotates in float32 (3e-4 in float64 and float32, 0.09 in bfloat16). Keys of
    another token differ by about their own size."""
    if held.shape != fresh.shape:
        return False
    tol = max(torch.finfo(fresh.dtype).eps, torch.finfo(torch.float32).eps) ** 0.5
    return bool((held - fresh).abs().max() <= tol * max(1.0, float(fresh.abs().max()))) if fresh.numel() else True


def cache_problem(cache, model: Transformer, name: str) -> str | None:
    """Why ``cache`` cannot hold ``model``'s keys and values for one request (None if it can)."""
    if not isinstance(cache, KVCache):
        return f"{name} must be a specnotes.tiny.model.KVCache, got {type(cache).__name__}"
    c, w = model.config, model.lm_head.weight
    want = (c.n_layers, 1, c.n_heads, c.d_head)
    got = (cache.k.shape[0], cache.k.shape[1], cache.k.shape[2], cache.k.shape[4])
    if got != want:
        return (f"{name} is shaped (layers, batch, heads, head size) = {got}; this worker's model needs {want}: "
                f"it is another model's cache, or more than one request's")
    if cache.k.dtype != w.dtype or cache.k.device != w.device:
        return (f"{name} is {cache.k.dtype} on {cache.k.device}; this worker's model is {w.dtype} on {w.device}")
    if not 0 <= int(cache.lengths[0]) <= cache.capacity:
        return f"{name} claims {int(cache.lengths[0])} tokens in a cache of capacity {cache.capacity}"
    return None


TOKEN_DTYPES = (torch.int64, torch.int32)  # what nn.Embedding accepts as ids


def prompt_problem(prompt, handoff: Handoff, target: Transformer) -> str | None:
    """Why ``prompt`` is not the prompt whose KV ``handoff.target_cache`` holds (None if it is)."""
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 1 or prompt.dtype not in TOKEN_DTYPES:
        kind = f"a {prompt.dtype} tensor of shape {tuple(prompt.shape)}" if isinstance(prompt, torch.Tensor) \
            else type(prompt).__name__
        return f"prompt must be a 1-D torch.int64 or torch.int32 tensor of token ids (what the embedding takes), " \
               f"got {kind}"
    length = handoff.prompt_length
    if prompt.numel() != length:
        return (f"prompt holds {prompt.numel()} tokens; the target cache covers {length - 1}, plus the pending "
                f"token: {length}")
    vocab = target.config.vocab_size
    if int(prompt.min()) < 0 or int(prompt.max()) >= vocab:
        return f"prompt must hold token ids in [0, {vocab}), got ids from {int(prompt.min())} to {int(prompt.max())}"
    if int(prompt[-1]) != handoff.last_token:
        return f"prompt ends in token {int(prompt[-1])}, the handoff's pending token is {handoff.last_token}"
    held = handoff.target_cache.k[0, 0, :, : length - 1]
    if not same_keys(held, first_layer_keys(target, prompt[:-1].cpu()).to(held.dtype)):
        return "prompt is not the prefix the target cache covers (its first-layer keys differ): another request's"
    return None


def draft_cache_problem(handoff: Handoff, draft: Transformer, prompt_ok: bool) -> str | None:
    """Why ``handoff.draft_cache`` is not ``draft``'s KV of this request's prompt (None if it is)."""
    cache = handoff.draft_cache
    problem = cache_problem(cache, draft, "draft_cache")
    if problem:
        return problem
    held, length = int(cache.lengths[0]), handoff.prompt_length - 1
    if held != length:
        return (f"draft_cache holds {held} tokens; the request's prefix has {length} (the prompt minus its pending "
                f"token): {'stale, from a longer sequence' if held > length else 'it is behind'}")
    if not prompt_ok:
        return "draft_cache cannot be checked against an invalid prompt: it may not cover this request's prefix"
    keys = cache.k[0, 0, :, :length]
    if not same_keys(keys, first_layer_keys(draft, handoff.prompt[:-1].cpu()).to(keys.dtype)):
        return ("draft_cache is not this draft model's KV of this request's prompt (its first-layer keys differ): "
                "it covers another prefix, or comes from another model")
    return None


def drafter_state_problem(handoff: Handoff, target: Transformer, draft: Transformer) -> str | None:
    """Why the drafter state a handoff carries cannot be used for its request (None: it can, or there is none).
    Every field present is checked, the prompt against the target cache, the draft cache against the prompt."""
    problems = []
    if handoff.prompt is not None:
        problems.append(prompt_problem(handoff.prompt, handoff, target))
    if handoff.draft_cache is not None:
        problems.append(draft_cache_problem(handoff, draft, handoff.prompt is not None and problems[0] is None))
    problems = [p for p in problems if p]
    return f"request {handoff.request_id}: " + "; ".join(problems) if problems else None


def check_target_state(handoff: Handoff, target: Transformer):
    """BadArgument unless the handoff's target cache and pending token can be this worker's target state."""
    if not isinstance(handoff, Handoff):
        raise validate.BadArgumentType(f"handoff must be a specnotes.serve.decode_worker.Handoff, "
                                       f"got {type(handoff).__name__}")
    problem = cache_problem(handoff.target_cache, target, "target_cache")
    if problem:
        raise validate.BadArgument(f"request {handoff.request_id}: {problem}")
    validate.integer("last_token", handoff.last_token, low=0, high=target.config.vocab_size - 1)
    validate.integer("max_new_tokens", handoff.max_new_tokens, low=1)


@dataclass
class Finished:
    request_id: int
    tokens: torch.Tensor  # [max_new_tokens] int64: the new tokens only
    speculated: bool  # False: admitted without (valid) drafter state, decoded plainly
    reason: str | None = None  # why it did not speculate


@dataclass
class Failed:
    """A request that failed inside a step: the tokens it had, and why. The others went on without it."""

    request_id: int
    tokens: torch.Tensor  # the new tokens delivered before it failed
    reason: str


@dataclass
class StepResult:
    batch: int
    k: int
    tokens: int  # tokens delivered this step (past a request's budget: not counted)
    drafts_checked: int
    drafts_accepted: int
    finished: list[Finished]
    failed: list[Failed] = field(default_factory=list)
    rows: list[tuple[int, int, int]] = field(default_factory=list)  # (request id, drafts verified, accepted)

    @property
    def slots(self) -> int:
        """Draft slots this step verified, every row together (B·k for one k a row)."""
        return sum(r[1] for r in self.rows)


class DecodeWorker:
    """Continuous batching over ``slots`` rows with a draft model (see the module docstring).

    ``capacity``: the most tokens (prompt + new) one request may hold; ``k_max``: the largest k any
    step will use (the verify pass writes k + 1 positions past a request's tokens). ``on_missing``: what
    ``admit`` does with a handoff whose drafter state is missing or invalid, ``"refuse"`` (raise
    ``MissingDrafterState`` / ``InvalidDrafterState``) or ``"plain"`` (decode it with k = 0). ``drafter``: what
    makes the drafter from ``draft`` (default ``DraftModelDrafter``; Chapter 11's ``ParallelDrafter`` keeps the
    same cache and pending tokens, and drafts k tokens in one pass).
    """

    def __init__(self, target: Transformer, draft: Transformer, slots: int, capacity: int, k_max: int = 8,
                 temperature: float = 0.0, generator: torch.Generator | None = None, on_missing: str = "refuse",
                 drafter=DraftModelDrafter):
        self.slots = validate.integer("slots", slots, low=1)
        self.capacity = validate.integer("capacity", capacity, low=2)
        self.k_max = validate.integer("k_max", k_max, low=0)
        self.temperature = validate.number("temperature", temperature, low=0)
        self.on_missing = validate.choice("on_missing", on_missing, ON_MISSING)
        for name, m in (("target", target), ("draft", draft)):
            if m.lm_head.weight.device.type != "cpu":
                raise validate.BadArgument(f"the decode worker keeps its bookkeeping on the CPU: load the {name} "
                                           f"with device='cpu' (it is on {m.lm_head.weight.device})")
        self.target, self.generator = target, generator
        self.drafter = drafter(draft)
        self.wanted: dict[int, int] | None = None  # request id -> k, while a step with one k a row runs
        self.rows_seen: list[tuple[int, int, int]] = []
        room = capacity + k_max + 1  # the verify pass writes k + 1 positions past the tokens
        # a catch-up pass pads every row to the longest backlog: room for twice the tokens
        self.target_cache = target.new_cache(slots, room)
        self.draft_cache = draft.new_cache(slots, 2 * room + k_max)
        self.history = torch.zeros(slots, room, dtype=torch.int64)  # prompt (when known) and new tokens
        self.committed = torch.zeros(slots, dtype=torch.int64)  # tokens in history: prompt + new
        self.first_new = torch.zeros(slots, dtype=torch.int64)  # where the new tokens start
        self.budget = torch.zeros(slots, dtype=torch.int64)
        self.speculates = torch.zeros(slots, dtype=torch.bool)
        self.request_ids: list[int | None] = [None] * slots
        self.reasons: list[str | None] = [None] * slots  # why a row does not speculate
        self.n = 0

    # -------------------------------------------------------------------- joining and leaving

    def admit(self, handoff: Handoff) -> bool:
        """Add a request to the running batch; returns whether it will speculate. A handoff without valid
        drafter state raises ``MissingDrafterState`` / ``InvalidDrafterState`` (``on_missing="refuse"``) or
        decodes plainly; a handoff whose target state is unusable raises ``BadArgument``. Nothing is
        copied before every check has passed."""
        if self.n == self.slots:
            raise RuntimeError(f"all {self.slots} slots are busy: admit a request after one finishes")
        check_target_state(handoff, self.target)
        length = handoff.prompt_length
        if length + handoff.max_new_tokens > self.capacity:
            raise validate.BadArgument(f"request {handoff.request_id} needs {length + handoff.max_new_tokens} "
                                       f"tokens, past the worker's capacity {self.capacity}")
        field_name, reason = drafter_state(handoff, "draft_model"), None
        if field_name is None:
            reason = missing_state_message(handoff, "draft_model")
            if self.on_missing == "refuse":
                raise MissingDrafterState(reason)
        else:
            reason = drafter_state_problem(handoff, self.target, self.drafter.model)
            if reason and self.on_missing == "refuse":
                raise InvalidDrafterState(f"{reason}. Admit it with on_missing='plain' to decode it without "
                                          f"speculation.")
        speculates = reason is None
        row, cached = self.n, length - 1
        self.target_cache.k[:, row, :, :cached] = handoff.target_cache.k[:, 0, :, :cached]
        self.target_cache.v[:, row, :, :cached] = handoff.target_cache.v[:, 0, :, :cached]
        self.target_cache.lengths[row] = cached
        self.draft_cache.lengths[row] = 0
        if speculates:
            self.load_draft_state(row, handoff, field_name)
            self.history[row, :length] = handoff.prompt
        self.history[row, cached] = handoff.last_token
        self.committed[row] = self.first_new[row] = length
        self.budget[row] = handoff.max_new_tokens
        self.speculates[row] = speculates
        self.request_ids[row], self.reasons[row] = handoff.request_id, reason
        self.n += 1
        return speculates

    def load_draft_state(self, row: int, handoff: Handoff, field_name: str):
        cache = handoff.draft_cache
        if field_name == "prompt":  # rebuild the draft's KV here: one draft prefill on the decode side
            drafter = DraftModelDrafter(self.drafter.model)
            with torch.inference_mode():
                drafter.start([handoff.prompt], handoff.prompt_length)
            cache = drafter.cache
        cached = int(cache.lengths[0])
        self.draft_cache.k[:, row, :, :cached] = cache.k[:, 0, :, :cached]
        self.draft_cache.v[:, row, :, :cached] = cache.v[:, 0, :, :cached]
        self.draft_cache.lengths[row] = cached

    def row_state(self) -> tuple:
        return self.committed, self.first_new, self.budget, self.speculates

    def move(self, src: int, dst: int):
        """Row src takes row dst's place (dst has left)."""
        for cache in (self.target_cache, self.draft_cache):
            cached = int(cache.lengths[src])
            cache.k[:, dst, :, :cached] = cache.k[:, src, :, :cached]
            cache.v[:, dst, :, :cached] = cache.v[:, src, :, :cached]
            cache.lengths[dst] = cache.lengths[src]
        self.history[dst, : int(self.committed[src])] = self.history[src, : int(self.committed[src])]
        for state in self.row_state():
            state[dst] = state[src]
        self.request_ids[dst], self.reasons[dst] = self.request_ids[src], self.reasons[src]

    def swap(self, a: int, b: int):
        """Rows a and b trade places, every slot of their caches included (only while finding a culprit)."""
        if a == b:
            return
        pair, flipped = [a, b], [b, a]
        for cache in (self.target_cache, self.draft_cache):
            cache.k[:, pair], cache.v[:, pair] = cache.k[:, flipped].clone(), cache.v[:, flipped].clone()
            cache.lengths[pair] = cache.lengths[flipped].clone()
        for state in (self.history, *self.row_state()):
            state[pair] = state[flipped].clone()
        for names in (self.request_ids, self.reasons):
            names[a], names[b] = names[b], names[a]

    def remove(self, row: int):
        self.n -= 1
        if row != self.n:
            self.move(self.n, row)
        self.request_ids[self.n] = self.reasons[self.n] = None

    def new_tokens(self, row: int, limit: int | None = None) -> torch.Tensor:
        start = int(self.first_new[row])
        end = int(self.committed[row]) if limit is None else start + limit
        return self.history[row, start:end].clone()

    def release_finished(self) -> list[Finished]:
        done = []
        for row in reversed(range(self.n)):  # from the end, so a moved row is never one still to check
            if self.committed[row] - self.first_new[row] >= self.budget[row]:
                done.append(Finished(self.request_ids[row], self.new_tokens(row, int(self.budget[row])),
                                     bool(self.speculates[row]), self.reasons[row]))
                self.remove(row)
        return done[::-1]

    def fail(self, row: int, reason: str) -> Failed:
        failed = Failed(self.request_ids[row], self.new_tokens(row), f"request {self.request_ids[row]}: {reason}")
        self.remove(row)
        return failed

    @property
    def context(self) -> int:
        """The tokens (prompt and new) of the longest running request: what the next step's attention spans."""
        return int(self.committed[: self.n].max()) if self.n else 0

    def reset(self):
        """Drop every running request (their rows are overwritten by the next admissions)."""
        self.n = 0
        self.request_ids = [None] * self.slots
        self.reasons = [None] * self.slots

    def snapshot(self) -> tuple[torch.Tensor, ...]:
        """Where every running request stands; ``restore`` rewinds to it (a step only appends, so
        lowering the lengths undoes it): timing the same step many times at the same context."""
        return self.committed.clone(), self.target_cache.lengths.clone(), self.draft_cache.lengths.clone()

    def restore(self, snapshot: tuple[torch.Tensor, ...]):
        for state, saved in zip((self.committed, self.target_cache.lengths, self.draft_cache.lengths), snapshot,
                                strict=True):
            state.copy_(saved)

    def save(self) -> tuple:
        """``snapshot`` and the random state: a step rerun from here draws what the first run drew."""
        rng = self.generator.get_state() if self.generator is not None else torch.get_rng_state()
        return self.snapshot(), rng

    def load(self, saved: tuple):
        snapshot, rng = saved
        self.restore(snapshot)
        if self.generator is not None:
            self.generator.set_state(rng)
        else:
            torch.set_rng_state(rng)

    # -------------------------------------------------------------------- one step

    @torch.inference_mode()
    def step(self, k) -> StepResult:
        """Decode every running request once: plainly (k = 0) or with k drafts per request; ``k`` may also give
        one k per running row (verification on a budget, Chapter 11): row b verifies its first k[b] drafts, in
        a verify pass packed so that its matmuls run over the Σ(k[b] + 1) real tokens (``tiny.ragged``). A
        request whose state is broken, or that raises on its own, fails alone (``StepResult.failed``); the step
        is rolled back and rerun without it, so a batch of bad requests only (a batch of one included) ends with
        every one failed and none running. An error that no request raises on its own is the worker's: it is
        raised, the step undone."""
        k = self.per_row(k)
        if self.n == 0:
            raise RuntimeError("no request is running: admit one first")
        try:
            return self.run_step(k)
        finally:
            self.wanted = None

    def run_step(self, k: int) -> StepResult:
        failed = [self.fail(row, reason) for row, reason in self.broken_rows()]
        saved = self.save()
        while self.n:
            try:
                B, k_used, delivered, checked, accepted = self.advance(k)
                break
            except Exception:  # a request's failure must not end the batch: find whose it is
                self.load(saved)
                culprits = self.culprits(k, saved)
                if not culprits:  # no request raises it on its own: the worker's own error
                    raise
                failed += [self.fail(row, reason) for row, reason in culprits]
                saved = self.save()
        else:
            return StepResult(0, k, 0, 0, 0, [], failed)
        return StepResult(B, k_used, delivered, checked, accepted, self.release_finished(), failed, self.rows_seen)

    def per_row(self, k) -> int:
        """An int k as it is; one k per running row kept by request id (rows move when one fails) in ``wanted``,
        returning the largest."""
        if not isinstance(k, list | tuple | torch.Tensor):
            return validate.integer("k", k, low=0, high=self.k_max)
        ks = validate.integers("k (one per running row)", list(k.tolist() if isinstance(k, torch.Tensor) else k),
                               low=0, high=self.k_max)
        if len(ks) != self.n:
            raise validate.BadArgument(f"k must give one k per running row: {self.n}, got {len(ks)}")
        self.wanted = dict(zip(self.request_ids[: self.n], ks, strict=True))
        return max(ks)

    def broken_rows(self) -> list[tuple[int, str]]:
        """Rows whose bookkeeping breaks the worker's invariants (the target cache holds every committed token
        but the last; the draft cache no more than that), from the last row down: those ``fail`` removes."""
        n = self.n
        committed, target, draft = self.committed[:n], self.target_cache.lengths[:n], self.draft_cache.lengths[:n]
        broken = []
        for row in reversed(range(n)):
            c, t, d = int(committed[row]), int(target[row]), int(draft[row])
            if t != c - 1:
                broken.append((row, f"its target cache holds {t} tokens, not its {c} committed tokens but the "
                                    f"last"))
            elif not 0 <= d <= c - 1:
                broken.append((row, f"its draft cache holds {d} tokens, more than its {c} committed tokens but "
                                    f"the last"))
            elif c + self.k_max + 1 > self.history.shape[1]:
                broken.append((row, f"it holds {c} tokens, past the worker's capacity {self.capacity}"))
        return broken

    def culprits(self, k: int, saved: tuple) -> list[tuple[int, str]]:
        """The rows that raise when their step runs alone (each moved to row 0 and run as a batch of one, then
        everything put back as ``saved``), from the last row down."""
        found, n = [], self.n
        for row in range(n):
            self.swap(0, row)
            self.n = 1
            try:
                self.advance(k)
            except Exception as error:  # noqa: BLE001 - the reason is what the request raised
                found.append((row, f"{type(error).__name__}: {error}"))
            finally:
                self.n = n
                self.swap(0, row)
                self.load(saved)
        return found[::-1]

    def advance(self, k: int) -> tuple[int, int, int, int, int]:
        """One step over the running batch without releasing anyone: (B, k used, tokens delivered, drafts
        checked, drafts accepted)."""
        B = self.n
        ks = None
        if self.wanted is not None:
            ks = torch.tensor([self.wanted[r] for r in self.request_ids[:B]]) * self.speculates[:B]
            k = int(ks.max())
            if bool((ks[self.speculates[:B]] == k).all()):
                ks = None  # one k for every row that drafts: the plain rectangle
        if k and not self.speculates[:B].any():
            k = 0  # nobody can draft
        before = self.committed[:B] - self.first_new[:B]
        self.rows_seen = []
        checked, accepted = self.speculative_step(k, ks) if k else self.plain_step()
        delivered = int((torch.minimum(self.committed[:B] - self.first_new[:B], self.budget[:B]) - before).sum())
        return B, k, delivered, checked, accepted

    def last_tokens(self, B: int) -> torch.Tensor:
        return self.history[torch.arange(B), self.committed[:B] - 1]

    def plain_step(self) -> tuple[int, int]:
        B = self.n
        view = self.target_cache.rows(B)
        logits = self.target(self.last_tokens(B)[:, None], view)[:, 0]
        self.target_cache.lengths[:B] = view.lengths
        tokens = sample_from(logits_to_probs(logits, self.temperature), self.generator)
        self.history[torch.arange(B), self.committed[:B]] = tokens
        self.committed[:B] += 1
        return 0, 0

    def bind_drafter(self, B: int):
        """Point the drafter at rows 0..B-1; its pending tokens are each row's backlog (tokens its cache
        has not seen). A row that does not speculate gets its last token only: it drafts nonsense cheaply."""
        view = self.draft_cache.rows(B)
        spec = self.speculates[:B]
        backlog = torch.where(spec, self.committed[:B] - view.lengths, 1)
        start = torch.where(spec, view.lengths, self.committed[:B] - 1)
        index = (start[:, None] + torch.arange(int(backlog.max()))).clamp(max=self.history.shape[1] - 1)
        self.drafter.cache = view
        self.drafter.pending = self.history[:B].gather(1, index)
        self.drafter.pending_len = backlog
        self.drafter.rows = self.request_ids[:B]  # which request each row is (a drafter may draft per request)

    def speculative_step(self, k: int, ks: torch.Tensor | None = None) -> tuple[int, int]:
        """k drafts a row, or ``ks[b]`` for row b (k their largest): every row drafts k (a drafter that takes
        ``ks``, the parallel one, drafts only what each row needs), the verify pass runs each row's ks[b] + 1
        tokens, packed, and ``keep_proposed`` keeps at most ks[b] drafts, the token after them a sample of the
        target's (exactly as for a drafter that proposed only ks[b])."""
        B = self.n
        rows, spec = torch.arange(B), self.speculates[:B]
        self.bind_drafter(B)
        # rows of different lengths run packed only when it saves work: padding every row to k costs less than
        # packing's own overhead while most slots are real (sample_rows trims the rows either way)
        packed = ks is not None and int((ks + 1).sum()) < PACK_BELOW * B * (k + 1)
        if packed and getattr(self.drafter, "takes_row_lengths", False):
            drafts, draft_probs = self.drafter.propose(k, self.temperature, self.generator, ks=ks)
        else:
            drafts, draft_probs = self.drafter.propose(k, self.temperature, self.generator)
        view = self.target_cache.rows(B)
        before = view.lengths.clone()
        verify = torch.cat([self.last_tokens(B)[:, None], drafts], 1)
        logits = packed_forward(self.target, verify, view, ks + 1) if packed else self.target(verify, view)
        target_probs = logits_to_probs(logits, self.temperature)
        if ks is None:
            tokens, accepted = speculative_sample(drafts, draft_probs.float(), target_probs, generator=self.generator,
                                                  validate=False)
        else:
            tokens, accepted = sample_rows(drafts, draft_probs.float(), target_probs, ks, self.generator)
        if not spec.all():  # rows without drafter state: their token comes from the target alone
            plain = torch.full_like(tokens, -1)
            plain[:, 0] = sample_from(target_probs[:, 0], self.generator)
            tokens = torch.where(spec[:, None], tokens, plain)
            accepted = torch.where(spec, accepted, 0)
        view.rollback(before + 1 + accepted)
        self.target_cache.lengths[:B] = view.lengths
        self.drafter.commit(tokens, accepted)
        # a row that does not speculate keeps its draft cache as it was (its pending is rebuilt each step)
        self.draft_cache.lengths[:B] = torch.where(spec, self.drafter.cache.lengths, self.draft_cache.lengths[:B])
        gained = accepted + 1
        keep = torch.arange(k + 1) < gained[:, None]
        slots = (self.committed[:B, None] + torch.arange(k + 1)).clamp(max=self.history.shape[1] - 1)
        self.history[rows[:, None].expand_as(slots)[keep], slots[keep]] = tokens[keep]
        self.committed[:B] += gained
        verified = torch.full((B,), k) if ks is None else ks
        checked = torch.where(accepted < verified, accepted + 1, accepted)[spec]
        self.rows_seen = [(self.request_ids[b], int(verified[b]), int(accepted[b])) for b in range(B) if spec[b]]
        return int(checked.sum()), int(accepted[spec].sum())
