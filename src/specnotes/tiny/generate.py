"""Batched decoding: plain autoregressive, and speculative (draft k, verify once, roll back).

One speculative iteration, for every sequence of the batch at once:

1. the drafter proposes k tokens per sequence (a draft model: k passes of one token);
2. the target runs one pass over k+1 positions per sequence: its pending token and the k drafts;
3. ``speculative_sample`` keeps each sequence's accepted drafts and adds one token;
4. both KV caches roll back, per sequence, to what was accepted.

Each sequence accepts a different number of drafts, so the batch becomes ragged: the KV cache
keeps one length per sequence and the model masks per sequence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specnotes import validate
from specnotes.measure.timing import sync
from specnotes.sampling.exact import logits_to_probs, sample_from, speculative_sample
from specnotes.tiny.drafters import DraftModelDrafter
from specnotes.tiny.model import Transformer, decode, encode, prefill


@dataclass
class GenerationStats:
    """What one generation call did. ``accepted[i, b]``: drafts of sequence b accepted at
    iteration i (-1 once the sequence had all its tokens); plain decoding has k = 0."""

    k: int
    temperature: float
    batch: int
    accepted: torch.Tensor = field(repr=False)  # [iterations, B] int64
    target_passes: int = 0  # including the prefill pass
    draft_passes: int = 0  # including the prefill pass
    wall_time_s: float = 0.0
    new_tokens: int = 0  # kept tokens, all sequences together
    proposed: torch.Tensor | None = field(default=None, repr=False)  # [iterations, B] drafts proposed (default: k)

    @property
    def drafts_proposed(self) -> torch.Tensor:
        """[iterations, B]: drafts proposed per iteration (k, unless the drafter proposed fewer)."""
        return torch.full_like(self.accepted, self.k) if self.proposed is None else self.proposed

    @property
    def iterations(self) -> int:
        return self.accepted.shape[0]

    @property
    def active(self) -> torch.Tensor:
        return self.accepted >= 0

    @property
    def tokens_per_iteration(self) -> torch.Tensor:
        """[iterations, B]: tokens each sequence gained per iteration (0 once done)."""
        return torch.where(self.active, self.accepted + 1, 0)

    @property
    def histogram(self) -> torch.Tensor:
        """counts[n-1] = how many (sequence, iteration) pairs yielded n tokens, n = 1..k+1."""
        return torch.bincount(self.accepted[self.active], minlength=self.k + 1)[: self.k + 1]

    @property
    def mean_tokens_per_iteration(self) -> float:
        """E[N] measured: tokens gained per sequence per iteration."""
        return float(self.tokens_per_iteration[self.active].double().mean()) if self.active.any() else 0.0

    @property
    def alpha(self) -> float:
        """Achieved acceptance rate: accepted drafts / drafts that were checked. A draft after the
        first rejection is never checked; under i.i.d. acceptance this estimates alpha."""
        accepted = self.accepted[self.active]
        rejections = (accepted < self.drafts_proposed[self.active]).sum()
        total = accepted.sum() + rejections
        return float(accepted.sum() / total) if total else float("nan")

    @property
    def drafts_checked(self) -> int:
        """Drafts the target checked: the accepted ones and each iteration's first rejection (``alpha``'s
        denominator)."""
        accepted = self.accepted[self.active]
        return int(accepted.sum() + (accepted < self.drafts_proposed[self.active]).sum())

    @property
    def alpha_by_position(self) -> list[float]:
        """Acceptance rate of draft i (i = 1..k) among the drafts that were checked at that position,
        i.e. P(draft i accepted | drafts 1..i-1 accepted). Constant (= alpha) under i.i.d. acceptance;
        nan where no draft reached position i."""
        accepted = self.accepted[self.active]
        proposed = self.drafts_proposed[self.active]
        rates = []
        for i in range(self.k):
            reached = int(((accepted >= i) & (proposed > i)).sum())
            rates.append(int((accepted >= i + 1).sum()) / reached if reached else float("nan"))
        return rates

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s else float("nan")

    def summary(self) -> dict:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "batch": self.batch,
            "iterations": self.iterations,
            "alpha": self.alpha,
            "mean_tokens_per_iteration": self.mean_tokens_per_iteration,
            "histogram": self.histogram.tolist(),
            "target_passes": self.target_passes,
            "draft_passes": self.draft_passes,
            "wall_time_s": self.wall_time_s,
            "tokens_per_second": self.tokens_per_second,
        }


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, max_new_tokens] int64: the new tokens only
    stats: GenerationStats

    @property
    def texts(self) -> list[str]:
        return [decode(row) for row in self.tokens]


def as_prompt_list(prompts, model: Transformer, new_positions: int) -> list[torch.Tensor]:
    """Prompts (a text, a list of texts or of token-id sequences, a [B, n] tensor) as 1-D int64
    tensors, checked: integer ids in [0, vocab), none empty, and each still fits the model's context
    after ``new_positions`` more tokens."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if isinstance(prompts, torch.Tensor):
        prompts = list(prompts) if prompts.dim() == 2 else [prompts]
    try:
        out = [encode(p) if isinstance(p, str) else torch.as_tensor(p).cpu() for p in prompts]
    except (TypeError, ValueError, RuntimeError) as error:
        raise validate.BadArgumentType(f"prompts must be texts or sequences of token ids: {error}") from None
    if not out:
        raise validate.BadArgument("prompts must hold at least one prompt")
    vocab, context = model.config.vocab_size, model.config.max_seq_len
    for i, p in enumerate(out):
        if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool or p.dim() != 1:
            raise validate.BadArgumentType(f"prompts[{i}] must be a text or a 1-D sequence of integer token ids, "
                                           f"got a {p.dtype} tensor of shape {tuple(p.shape)}")
        if len(p) == 0 or p.min() < 0 or p.max() >= vocab:
            raise validate.BadArgument(f"prompts[{i}] must be a non-empty sequence of token ids in [0, {vocab}), "
                                       f"got {p.tolist()[:8]}{'...' if len(p) > 8 else ''}")
        if len(p) + new_positions > context:
            raise validate.BadArgument(f"prompts[{i}] has {len(p)} tokens: with {new_positions} more positions "
                                       f"(max_new_tokens, speculation) it passes the model's {context}-token context")
    return [p.to(torch.int64) for p in out]




@torch.inference_mode()
def generate(
    model: Transformer,
    prompts,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Generation:
    """Plain batched autoregressive decoding: one target pass per new token."""
    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens, low=0)
    temperature = validate.number("temperature", temperature, low=0)
    prompts = as_prompt_list(prompts, model, max_new_tokens)
    device = model.lm_head.weight.device
    sync(device)
    start = time.perf_counter()
    capacity = max(len(p) for p in prompts) + max_new_tokens
    cache, last, passes = prefill(model, prompts, capacity)
    out = []
    for _ in range(max_new_tokens):
        logits = model(last[:, None], cache)[:, 0]
        last = sample_from(logits_to_probs(logits, temperature), generator, validate=False)
        out.append(last)
    B = len(prompts)
    tokens = torch.stack(out, 1) if out else torch.zeros(B, 0, dtype=torch.int64, device=device)
    sync(device)
    stats = GenerationStats(
        k=0,
        temperature=temperature,
        batch=B,
        accepted=torch.zeros(max_new_tokens, B, dtype=torch.int64),
        target_passes=passes + max_new_tokens,
        wall_time_s=time.perf_counter() - start,
        new_tokens=B * max_new_tokens,
    )
    return Generation(tokens.cpu(), stats)


@torch.inference_mode()
def speculative_generate(
    target: Transformer,
    drafter,
    prompts,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    sampler=speculative_sample,
) -> Generation:
    """Batched speculative decoding. ``drafter``: a draft ``Transformer`` or a drafter object
    (see ``specnotes.tiny.drafters``). Returns the first ``max_new_tokens`` tokens of each sequence."""
    k = validate.integer("k", k, low=1)
    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens, low=0)
    temperature = validate.number("temperature", temperature, low=0)
    if isinstance(drafter, Transformer):
        if drafter.config.vocab_size != target.config.vocab_size:
            raise validate.BadArgument(f"drafter and target must share a vocabulary, got {drafter.config.vocab_size} "
                                       f"and {target.config.vocab_size} tokens")
        drafter = DraftModelDrafter(drafter)
    if not all(callable(getattr(drafter, name, None)) for name in ("start", "propose", "commit")):
        raise validate.BadArgumentType(f"drafter must be a Transformer or have start, propose and commit methods "
                                       f"(see specnotes.tiny.drafters), got {type(drafter).__name__}")
    # the last iteration may overshoot max_new_tokens by k, and then verify k+1 more positions
    extra = max_new_tokens + 2 * (k + 1)
    prompts = as_prompt_list(prompts, target, extra)
    device = target.lm_head.weight.device
    B = len(prompts)
    rows = torch.arange(B, device=device)
    sync(device)
    start = time.perf_counter()
    capacity = max(len(p) for p in prompts) + extra
    cache, last, target_passes = prefill(target, prompts, capacity)
    draft_passes_before = getattr(drafter, "passes", 0)
    drafter.start(prompts, capacity)
    out = torch.full((B, max_new_tokens + k + 1), -1, dtype=torch.int64, device=device)
    produced = torch.zeros(B, dtype=torch.int64, device=device)
    accepted_log, proposed_log = [], []
    while (produced < max_new_tokens).any():
        active = produced < max_new_tokens
        draft_tokens, draft_probs = drafter.propose(k, temperature, generator)
        verify_input = torch.cat([last[:, None], draft_tokens], 1)
        before = cache.lengths.clone()
        target_probs = logits_to_probs(target(verify_input, cache), temperature)
        target_passes += 1
        tokens, num_accepted = sampler(draft_tokens, draft_probs.float(), target_probs, generator=generator)
        proposed = getattr(drafter, "proposed", None)
        if proposed is not None:
            tokens, num_accepted = keep_proposed(tokens, num_accepted, proposed)
            proposed_log.append(torch.where(active, proposed, -1).cpu())
        # keep the pending token and the accepted drafts; finished sequences keep nothing
        cache.rollback(torch.where(active, before + 1 + num_accepted, before))
        drafter.commit(tokens, num_accepted, active)
        gained = append_emitted(out, produced, tokens, num_accepted, active)
        last = torch.where(active, tokens[rows, num_accepted], last)
        produced += gained
        accepted_log.append(torch.where(active, num_accepted, -1).cpu())
    sync(device)
    stats = GenerationStats(
        k=k,
        temperature=temperature,
        batch=B,
        accepted=torch.stack(accepted_log) if accepted_log else torch.zeros(0, B, dtype=torch.int64),
        target_passes=target_passes,
        draft_passes=getattr(drafter, "passes", 0) - draft_passes_before,
        wall_time_s=time.perf_counter() - start,
        new_tokens=B * max_new_tokens,
        proposed=torch.stack(proposed_log) if proposed_log else None,
    )
    return Generation(out[:, :max_new_tokens].cpu(), stats)


def append_emitted(out: torch.Tensor, produced: torch.Tensor, tokens: torch.Tensor, num_accepted: torch.Tensor,
                   active: torch.Tensor) -> torch.Tensor:
    """Write what each active sequence emitted this iteration (its accepted drafts and one more token,
    ``tokens`` in ``speculative_sample``'s layout) into ``out`` after its ``produced`` tokens; return
    the tokens each sequence gained [B] (0 where inactive)."""
    gained = torch.where(active, num_accepted + 1, 0)
    steps = torch.arange(tokens.shape[1], device=out.device)
    slots = produced[:, None] + steps
    keep = steps < gained[:, None]
    rows = torch.arange(out.shape[0], device=out.device)[:, None].expand_as(slots)
    out[rows[keep], slots[keep]] = tokens[keep]
    return gained


def keep_proposed(tokens: torch.Tensor, num_accepted: torch.Tensor, proposed: torch.Tensor):
    """For a drafter that proposed only ``proposed[b]`` real drafts (one-hot padding after them): keep at most
    that many. The token at position proposed[b] is a sample of the target's distribution there, whichever
    way it came (a padding draft accepted with probability p(x), or the residual p without x): the bonus
    token a shorter draft would have earned. Later tokens are dropped."""
    kept = torch.minimum(num_accepted, proposed)
    steps = torch.arange(tokens.shape[1], device=tokens.device)
    return torch.where(steps <= kept[:, None], tokens, -1), kept


def forward_timing(model: Transformer, ids: torch.Tensor, context: int, new_tokens: int, *, warmup: int = 5,
                   repeats: int = 40, exit_layer: int | None = None):
    """Timing of one cached forward of ``new_tokens`` tokens after ``context`` cached ones, batch 1:
    the pass a decode step (n = 1) or a verify step (n = k + 1) runs. The cache is rolled back after
    every call, so each repeat does the same work. ``ids``: at least context + new_tokens token ids.
    ``exit_layer``: time the early exit's pass (its first layers and head) instead."""
    from specnotes.measure import time_fn

    context = validate.integer("context", context, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    if ids.numel() < context + new_tokens:
        raise validate.BadArgument(f"ids must hold at least context + new_tokens = {context + new_tokens} token ids, "
                                   f"got {ids.numel()}")
    ids = ids.reshape(1, -1).to(next(model.parameters()).device)
    cache = model.new_cache(1, context + new_tokens)
    with torch.inference_mode():
        model(ids[:, :context], cache, exit_layer=exit_layer)
    at = torch.tensor([context], device=ids.device)
    new = ids[:, context:context + new_tokens]

    @torch.inference_mode()
    def one_pass():
        model(new, cache, exit_layer=exit_layer)
        cache.rollback(at)

    return time_fn(one_pass, warmup=warmup, repeats=repeats, device=ids.device)


def replay(drafter, prompt, output, k: int = 4) -> GenerationStats:
    """Speculative decoding against a target whose greedy output is already known: ``output`` (1-D token ids)
    is what the target writes after ``prompt``. Each iteration the drafter proposes k tokens; those that
    match ``output`` are accepted, and the next token of ``output`` is the target's own. This is exactly
    what greedy speculative decoding with that target would do, without running it: for drafters that do
    not need the target's logits (n-gram lookup), and for outputs that copy their input (edits, quotes)."""
    k = validate.integer("k", k, low=1)
    prompt = encode(prompt) if isinstance(prompt, str) else torch.as_tensor(prompt, dtype=torch.int64).cpu()
    output = encode(output) if isinstance(output, str) else torch.as_tensor(output, dtype=torch.int64).cpu()
    drafter.start([prompt], len(prompt) + len(output) + k + 1)
    accepted, proposed, done = [], [], 0
    while done < len(output):
        drafts, _ = drafter.propose(k, 0.0)
        limit = int(getattr(drafter, "proposed", torch.tensor([k]))[0])
        truth = output[done: done + k + 1]
        m = min(limit, len(truth) - 1)  # the last token of the output is the target's own, never a draft's
        n = int((drafts[0, :m].cpu() == truth[:m]).long().cumprod(0).sum())
        tokens = torch.full((1, k + 1), -1, dtype=torch.int64)
        tokens[0, : n + 1] = truth[: n + 1]
        drafter.commit(tokens, torch.tensor([n]))
        accepted.append(n)
        proposed.append(limit)
        done += n + 1
    return GenerationStats(k=k, temperature=0.0, batch=1, accepted=torch.tensor(accepted)[:, None],
                           proposed=torch.tensor(proposed)[:, None], new_tokens=len(output))
