"""Decoders on a prefix cache: ``generate_cached`` and ``speculative_generate_cached`` are ``generate.generate``
and ``generate.speculative_generate`` on a ``PrefixCache`` that lives across calls. Every exit, an exception
included, gives back the blocks the call held (published ones stay cached). With them the drafter whose state runs
one token ahead (:class:`LookaheadDrafter`), the drafter's first distribution after a hit, the branching requests
the drop-last rule gets wrong, and the time of an admission."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from specnotes import validate
from specnotes.measure.timing import sync
from specnotes.sampling.exact import logits_to_probs, sample_from, speculative_sample
from specnotes.serve.kvcache.prefix import PrefixCache
from specnotes.tiny.drafters import DraftModelDrafter
from specnotes.tiny.generate import Generation, GenerationStats, append_emitted, as_prompt_list
from specnotes.tiny.model import Transformer, prefill


class LookaheadDrafter(DraftModelDrafter):
    """The shipped draft model with an EAGLE/MTP-style cache alignment: slot i holds the state computed
    from token i+1 (an EAGLE head's input at i is the target's feature at i *and* token i+1). We get it
    by feeding the draft model the sequence shifted by one token; rotary positions are relative, so the
    drafts are those of the draft model on the sequence without its first token."""

    lag = 1

    def start(self, prompts: list[torch.Tensor], capacity: int, cache=None):
        if any(len(p) < 2 for p in prompts):
            raise ValueError("a LookaheadDrafter needs prompts of at least 2 tokens")
        super().start([p[1:] for p in prompts], capacity, cache)


def _check_common(prompts, model, max_new_tokens, temperature, cache, extra_positions=0, draft=None):
    validate.integer("max_new_tokens", max_new_tokens, low=0)
    prompts = as_prompt_list(prompts, model, max_new_tokens + extra_positions)
    validate.number("temperature", temperature, low=0)
    if not isinstance(cache, PrefixCache):
        raise validate.BadArgumentType(f"cache must be a specnotes.serve.kvcache.PrefixCache, got {cache!r}")
    cache.check_models(model, draft)
    longest, bs = max(len(p) for p in prompts) + max_new_tokens + extra_positions, cache.block_size
    if longest > cache.target.num_blocks * bs:  # a sequence's blocks must fit the pool, whatever else it holds
        raise validate.BadArgument(
            f"num_blocks must be an integer >= {-(-longest // bs)} for sequences of up to {longest} tokens (the "
            f"longest prompt, max_new_tokens = {max_new_tokens}"
            f"{f' and {extra_positions} positions a speculative step may write' if extra_positions else ''}) in "
            f"blocks of {bs}; this PrefixCache has {cache.target.num_blocks}")
    return prompts


def _release(*caches):
    for kv in caches:
        if kv is not None:
            kv.release()


@torch.inference_mode()
def generate_cached(model: Transformer, prompts, max_new_tokens: int, cache: PrefixCache,
                    temperature: float = 0.0, generator: torch.Generator | None = None) -> Generation:
    """``generate.generate`` on a paged prefix cache: reuse what earlier requests published, publish
    each block as the policy allows, release the blocks at the end (published ones stay cached)."""
    prompts = _check_common(prompts, model, max_new_tokens, temperature, cache)
    device = model.lm_head.weight.device
    sync(device)
    start = time.perf_counter()
    tokens = [p.tolist() for p in prompts]
    kv, _ = cache.admit(tokens)
    try:
        _, last, passes = prefill(model, prompts, kv.capacity, cache=kv)  # only what the prefix cache lacks
        published = [0] * len(prompts)
        out = []
        for _ in range(max_new_tokens):
            logits = model(last[:, None], kv)[:, 0]
            last = sample_from(logits_to_probs(logits, temperature), generator)
            out.append(last)
            for seq, t in zip(tokens, last.tolist(), strict=True):
                seq.append(t)
            cache.publish(kv, tokens, published, None)
    finally:
        kv.release()
    B = len(prompts)
    new = torch.stack(out, 1) if out else torch.zeros(B, 0, dtype=torch.int64, device=device)
    sync(device)
    stats = GenerationStats(k=0, temperature=temperature, batch=B,
                            accepted=torch.zeros(max_new_tokens, B, dtype=torch.int64),
                            target_passes=passes + max_new_tokens, wall_time_s=time.perf_counter() - start,
                            new_tokens=B * max_new_tokens)
    return Generation(new.cpu(), stats)


@torch.inference_mode()
def speculative_generate_cached(target: Transformer, drafter: DraftModelDrafter, prompts, max_new_tokens: int,
                                cache: PrefixCache, k: int = 4, temperature: float = 0.0,
                                generator: torch.Generator | None = None, sampler=speculative_sample,
                                observe=None) -> Generation:
    """``generate.speculative_generate`` on a paged prefix cache shared by the target and the drafter
    (a ``DraftModelDrafter`` or a ``LookaheadDrafter``). After every iteration both caches publish the
    blocks the policy allows; at the end, or on any exception, the sequences release their blocks.

    ``observe``: called as ``observe(stage, iteration, kv, tokens, verified, hits)`` with the target's
    paged cache at three moments, ``"admitted"`` (after the prefill), ``"verify"`` (after a verify pass
    wrote its k + 1 slots, before the verdict: the pending token's slot now holds its keys) and
    ``"committed"`` (after the rollback and publication); ``verified`` counts each sequence's verified
    slots, ``hits`` the tokens its admission reused. A ``Recorder`` keeps what it needs (the cache changes
    after the call returns)."""
    k = validate.integer("k", k, low=1)
    if not isinstance(drafter, DraftModelDrafter):
        raise validate.BadArgumentType(f"drafter must be a DraftModelDrafter, got {type(drafter).__name__}")
    # the last iteration may overshoot max_new_tokens by k, then verify k + 1 more positions
    prompts = _check_common(prompts, target, max_new_tokens, temperature, cache, 2 * (k + 1), drafter.model)
    lag = getattr(drafter, "lag", 0)
    if lag and min(len(p) for p in prompts) < 2:
        raise ValueError("a LookaheadDrafter needs prompts of at least 2 tokens")
    device = target.lm_head.weight.device
    B = len(prompts)
    rows = torch.arange(B, device=device)
    sync(device)
    start = time.perf_counter()
    tokens = [p.tolist() for p in prompts]
    kv, draft_kv = cache.admit(tokens, lag)
    hits = kv.lengths.tolist()
    try:
        _, last, target_passes = prefill(target, prompts, kv.capacity, cache=kv)
        draft_passes_before = drafter.passes
        drafter.start(prompts, kv.capacity, cache=draft_kv)
        if observe:
            observe("admitted", 0, kv, tokens, kv.lengths.tolist(), hits)
        published, draft_published = [0] * B, [0] * B
        out = torch.full((B, max_new_tokens + k + 1), -1, dtype=torch.int64, device=device)
        produced = torch.zeros(B, dtype=torch.int64, device=device)
        accepted_log = []
        while (produced < max_new_tokens).any():
            active = produced < max_new_tokens
            draft_tokens, draft_probs = drafter.propose(k, temperature, generator)
            before = kv.lengths.clone()
            target_probs = logits_to_probs(target(torch.cat([last[:, None], draft_tokens], 1), kv), temperature)
            target_passes += 1
            if observe:  # the pending token's slot now holds its keys: verified, whatever the verdict
                observe("verify", len(accepted_log), kv, tokens, (before + 1).tolist(), hits)
            new, num_accepted = sampler(draft_tokens, draft_probs.float(), target_probs, generator=generator)
            kv.rollback(torch.where(active, before + 1 + num_accepted, before))
            drafter.commit(new, num_accepted, active)
            gained = append_emitted(out, produced, new, num_accepted, active)
            for b in torch.nonzero(active).flatten().tolist():
                tokens[b].extend(new[b, : int(gained[b])].tolist())
            last = torch.where(active, new[rows, num_accepted], last)
            produced += gained
            accepted_log.append(torch.where(active, num_accepted, -1).cpu())
            flags = active.tolist()
            cache.publish(kv, tokens, published, None, flags)
            cache.publish(drafter.cache, tokens, draft_published, lag, flags)
            if observe:
                observe("committed", len(accepted_log) - 1, kv, tokens, kv.lengths.tolist(), hits)
    finally:
        _release(kv, draft_kv)
    sync(device)
    stats = GenerationStats(
        k=k, temperature=temperature, batch=B,
        accepted=torch.stack(accepted_log) if accepted_log else torch.zeros(0, B, dtype=torch.int64),
        target_passes=target_passes, draft_passes=drafter.passes - draft_passes_before,
        wall_time_s=time.perf_counter() - start, new_tokens=B * max_new_tokens,
    )
    return Generation(out[:, :max_new_tokens].cpu(), stats)


@torch.inference_mode()
def first_draft_probs(target: Transformer, drafter: DraftModelDrafter, prompts, cache: PrefixCache,
                      temperature: float = 1.0) -> torch.Tensor:
    """The drafter's distribution for its first draft token of each prompt [B, V], computed on what the
    prefix cache serves (admit, prefill the drafter's rest, propose one token): the drafter's state
    after a hit, laid bare. Nothing is published; the blocks are released."""
    prompts = _check_common(prompts, target, 0, temperature, cache, 1, drafter.model)
    kv, draft_kv = cache.admit([p.tolist() for p in prompts], getattr(drafter, "lag", 0))
    try:
        drafter.start(prompts, kv.capacity, cache=draft_kv)
        return drafter.propose(1, temperature)[1][:, 0]
    finally:
        _release(kv, draft_kv)


def branching_requests(target: Transformer, drafter: DraftModelDrafter, prompt, cache: PrefixCache, block: int,
                       new_tokens: int = 40, k: int = 4) -> list[int]:
    """The sharing pattern that the drop-last-block rule gets wrong, published on ``cache``: request A decodes
    ``prompt`` (publishing its blocks); request B is A's text up to block ``block``, another token in that
    block's first slot, then A's text again, and decodes a few tokens (publishing block ``block``). Returns the
    prompt of a request R that resumes B two tokens past that block: R hits blocks A wrote, then one B wrote."""
    block = validate.integer("block", block, low=1)
    a = as_prompt_list(prompt, target, new_tokens)[0].tolist()
    a += speculative_generate_cached(target, drafter, [a], new_tokens, cache, k=k).tokens[0].tolist()
    bs = cache.block_size
    if len(a) < (block + 1) * bs:
        raise validate.BadArgument(f"the prompt and {new_tokens} new tokens make {len(a)} tokens: too few to branch "
                                   f"at block {block} of {bs} tokens and go one block further")
    b = a[: block * bs] + [(a[block * bs] + 1) % target.config.vocab_size] + a[block * bs + 1: (block + 1) * bs + 4]
    b += speculative_generate_cached(target, drafter, [b], 8, cache, k=k).tokens[0].tolist()
    return b[: (block + 1) * bs + 3]


def time_admission(target: Transformer, drafter: DraftModelDrafter, prompts, cache: PrefixCache, *,
                   warmup: int = 2, repeats: int = 10):
    """``measure.Timing`` of admitting a batch of requests to speculative decoding: the prefix-cache
    lookups, the target's and the drafter's prefill of whatever the cache does not serve (a block the
    drop rule gives back included), then releasing the blocks. The cache and its statistics are left
    as they were."""
    from specnotes.measure import time_fn

    prompts = _check_common(prompts, target, 0, 0.0, cache, draft=drafter.model)
    tokens, lag, saved = [p.tolist() for p in prompts], getattr(drafter, "lag", 0), replace(cache.stats)
    requests = cache.requests

    @torch.inference_mode()
    def admit_once():
        kv, draft_kv = cache.admit(tokens, lag)
        try:
            prefill(target, prompts, kv.capacity, cache=kv)
            drafter.start(prompts, kv.capacity, cache=draft_kv)
        finally:
            _release(kv, draft_kv)

    try:
        timing = time_fn(admit_once, warmup=warmup, repeats=repeats, device=target.lm_head.weight.device)
    finally:
        cache.stats, cache.requests = saved, requests
    return timing
