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

A handoff without the drafter's state (SGLang issue #36140: the decode side of a PD split got
``spec_info = None`` and crashed) is refused with ``MissingDrafterState``, or, with
``on_missing="plain"``, admitted to decode without speculation: that row verifies nothing and samples
its token from the target alone, so its output is exactly plain decoding's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specnotes import validate
from specnotes.drafters import DraftModelDrafter
from specnotes.generate import prefill as prefill_cache
from specnotes.model import KVCache, Transformer
from specnotes.sampling import logits_to_probs, sample_from, speculative_sample

# the handoff fields, any one of which gives each kind of drafter what it needs to draft
DRAFTER_STATE = {
    "draft_model": ("draft_cache", "prompt"),  # its own KV of the prefix, or the tokens to rebuild it
    "ngram": ("prompt",),  # the tokens it looks n-grams up in
    "eagle": ("hidden",),  # the target's last hidden state, which feature-level drafters extend
}
ON_MISSING = ("refuse", "plain")


class MissingDrafterState(ValueError):
    """A handoff reached a speculating decode worker without what its drafter needs."""


@dataclass
class Handoff:
    """What a prefill worker sends a decode worker for one request.

    ``target_cache``: the target's KV of the prompt but its last token (batch 1); ``last_token``: that
    token, which the first decode step feeds. Drafter state, as ``DRAFTER_STATE`` lists per drafter:
    ``prompt`` (the prompt tokens), ``draft_cache`` (the draft model's KV of the same prefix) or
    ``hidden`` (an EAGLE-style drafter's input)."""

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
    """The handoff field that carries what ``drafter`` needs, or None if the handoff has none of them."""
    validate.choice("drafter", drafter, DRAFTER_STATE)
    return next((name for name in DRAFTER_STATE[drafter] if getattr(handoff, name) is not None), None)


def missing_state_message(handoff: Handoff, drafter: str) -> str:
    return (f"request {handoff.request_id}: the handoff carries no state for the {drafter} drafter (it needs one "
            f"of: {', '.join(DRAFTER_STATE[drafter])}). Send it from the prefill side, or admit the request with "
            f"on_missing='plain' to decode it without speculation. (SGLang issue #36140 is this failure: "
            f"spec_info was None on the decode side of a PD split.)")


def check_handoff(handoff: Handoff, drafter: str) -> str:
    """The field that carries ``drafter``'s state; ``MissingDrafterState`` if there is none."""
    field = drafter_state(handoff, drafter)
    if field is None:
        raise MissingDrafterState(missing_state_message(handoff, drafter))
    return field


@dataclass
class Finished:
    request_id: int
    tokens: torch.Tensor  # [max_new_tokens] int64: the new tokens only
    speculated: bool  # False: admitted without drafter state, decoded plainly


@dataclass
class StepResult:
    batch: int
    k: int
    tokens: int  # tokens delivered this step (past a request's budget: not counted)
    drafts_checked: int
    drafts_accepted: int
    finished: list[Finished]


class DecodeWorker:
    """Continuous batching over ``slots`` rows with a draft model (see the module docstring).

    ``capacity``: the most tokens (prompt + new) one request may hold; ``k_max``: the largest k any
    step will use (the verify pass writes k + 1 positions past a request's tokens).
    """

    def __init__(self, target: Transformer, draft: Transformer, slots: int, capacity: int, k_max: int = 8,
                 temperature: float = 0.0, generator: torch.Generator | None = None, on_missing: str = "refuse"):
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
        self.drafter = DraftModelDrafter(draft)
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
        self.n = 0

    # -------------------------------------------------------------------- joining and leaving

    def admit(self, handoff: Handoff) -> bool:
        """Add a request to the running batch; returns whether it will speculate. A handoff without the
        drafter's state raises ``MissingDrafterState`` (``on_missing="refuse"``) or decodes plainly."""
        if self.n == self.slots:
            raise RuntimeError(f"all {self.slots} slots are busy: admit a request after one finishes")
        length = handoff.prompt_length
        if length + handoff.max_new_tokens > self.capacity:
            raise validate.BadArgument(f"request {handoff.request_id} needs {length + handoff.max_new_tokens} "
                                       f"tokens, past the worker's capacity {self.capacity}")
        field = drafter_state(handoff, "draft_model")
        if field is None and self.on_missing == "refuse":
            raise MissingDrafterState(missing_state_message(handoff, "draft_model"))
        row, cached = self.n, length - 1
        self.target_cache.k[:, row, :, :cached] = handoff.target_cache.k[:, 0, :, :cached]
        self.target_cache.v[:, row, :, :cached] = handoff.target_cache.v[:, 0, :, :cached]
        self.target_cache.lengths[row] = cached
        self.draft_cache.lengths[row] = 0
        if field is not None:
            self.load_draft_state(row, handoff, field)
        if handoff.prompt is not None:
            self.history[row, :length] = handoff.prompt
        self.history[row, cached] = handoff.last_token
        self.committed[row] = self.first_new[row] = length
        self.budget[row] = handoff.max_new_tokens
        self.speculates[row] = field is not None
        self.request_ids[row] = handoff.request_id
        self.n += 1
        return field is not None

    def load_draft_state(self, row: int, handoff: Handoff, field: str):
        cache = handoff.draft_cache
        if field == "prompt":  # rebuild the draft's KV here: one draft prefill on the decode side
            drafter = DraftModelDrafter(self.drafter.model)
            with torch.inference_mode():
                drafter.start([handoff.prompt], handoff.prompt_length)
            cache = drafter.cache
        cached = int(cache.lengths[0])
        self.draft_cache.k[:, row, :, :cached] = cache.k[:, 0, :, :cached]
        self.draft_cache.v[:, row, :, :cached] = cache.v[:, 0, :, :cached]
        self.draft_cache.lengths[row] = cached

    def move(self, src: int, dst: int):
        """Row src takes row dst's place (dst has left)."""
        for cache in (self.target_cache, self.draft_cache):
            cached = int(cache.lengths[src])
            cache.k[:, dst, :, :cached] = cache.k[:, src, :, :cached]
            cache.v[:, dst, :, :cached] = cache.v[:, src, :, :cached]
            cache.lengths[dst] = cache.lengths[src]
        self.history[dst, : int(self.committed[src])] = self.history[src, : int(self.committed[src])]
        for state in (self.committed, self.first_new, self.budget, self.speculates):
            state[dst] = state[src]
        self.request_ids[dst] = self.request_ids[src]

    def release_finished(self) -> list[Finished]:
        done = []
        for row in reversed(range(self.n)):  # from the end, so a moved row is never one still to check
            if self.committed[row] - self.first_new[row] >= self.budget[row]:
                start = int(self.first_new[row])
                tokens = self.history[row, start: start + int(self.budget[row])].clone()
                done.append(Finished(self.request_ids[row], tokens, bool(self.speculates[row])))
                self.n -= 1
                if row != self.n:
                    self.move(self.n, row)
                self.request_ids[self.n] = None
        return done[::-1]

    @property
    def context(self) -> int:
        """The tokens (prompt and new) of the longest running request: what the next step's attention spans."""
        return int(self.committed[: self.n].max()) if self.n else 0

    def reset(self):
        """Drop every running request (their rows are overwritten by the next admissions)."""
        self.n = 0
        self.request_ids = [None] * self.slots

    def snapshot(self) -> tuple[torch.Tensor, ...]:
        """Where every running request stands; ``restore`` rewinds to it (a step only appends, so
        lowering the lengths undoes it): timing the same step many times at the same context."""
        return self.committed.clone(), self.target_cache.lengths.clone(), self.draft_cache.lengths.clone()

    def restore(self, snapshot: tuple[torch.Tensor, ...]):
        for state, saved in zip((self.committed, self.target_cache.lengths, self.draft_cache.lengths), snapshot,
                                strict=True):
            state.copy_(saved)

    # -------------------------------------------------------------------- one step

    @torch.inference_mode()
    def step(self, k: int) -> StepResult:
        """Decode every running request once: plainly (k = 0) or with k drafts per request."""
        k = validate.integer("k", k, low=0, high=self.k_max)
        B = self.n
        if B == 0:
            raise RuntimeError("no request is running: admit one first")
        if k and not self.speculates[:B].any():
            k = 0  # nobody can draft
        before = self.committed[:B] - self.first_new[:B]
        checked, accepted = self.speculative_step(k) if k else self.plain_step()
        delivered = int((torch.minimum(self.committed[:B] - self.first_new[:B], self.budget[:B]) - before).sum())
        return StepResult(B, k, delivered, checked, accepted, self.release_finished())

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

    def speculative_step(self, k: int) -> tuple[int, int]:
        B = self.n
        rows, spec = torch.arange(B), self.speculates[:B]
        self.bind_drafter(B)
        drafts, draft_probs = self.drafter.propose(k, self.temperature, self.generator)
        view = self.target_cache.rows(B)
        before = view.lengths.clone()
        verify = torch.cat([self.last_tokens(B)[:, None], drafts], 1)
        target_probs = logits_to_probs(self.target(verify, view), self.temperature)
        tokens, accepted = speculative_sample(drafts, draft_probs.float(), target_probs, generator=self.generator,
                                              validate=False)
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
        checked = torch.where(accepted < k, accepted + 1, accepted)[spec]
        return int(checked.sum()), int(accepted[spec].sum())
