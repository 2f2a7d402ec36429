"""Timing attention and layer-stack passes over a real KV cache at growing context (Chapter 5).

- ``attention_time`` / ``attention_sweep``: PyTorch's ``scaled_dot_product_attention`` for n queries per
  sequence over a cache of L + n keys, one layer of a shape: the attention call a stack's pass makes.
- ``context_sweep``: a decode (1 token per sequence) and a verify (k + 1) pass of a layer stack
  (``specnotes.measure.stack``) over one shared cache, at L = start, 2·start, ... until the verify/decode ratio
  has fallen halfway to 1 (``context.excess_halved``), the time budget is spent, or the cache would
  outgrow its memory cap. It says which of the three stopped it.

Timing is ``measure.time_fn`` (synchronized, warmed up, median and quartiles); every result is a
``measure.Record`` with the cost model's FLOPs and bytes for the same work in ``extra``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace

import torch

from specnotes import measure, validate
from specnotes.analytic import context, cost
from specnotes.measure import stack
from specnotes.measure.timing import doubling_sweep


@dataclass(frozen=True)
class ContextSizes:
    """Sizes of Chapter 5's measurements for one device.

    shape: the layer stack (``stack.stack_sizes``' target: Chapters 2 and 4 time the same layers);
    k: draft tokens (verify passes have k + 1); start: the first context of the sweep;
    attention_batches, attention_contexts: the attention-only measurement's grid;
    max_batch: the largest batch the batch search (``verify_batch``) tries;
    budget_s: seconds the context sweep may take; max_kv_bytes: the largest cache it builds;
    warmup, repeats, point_s: per timed point, at most ``repeats`` samples and about ``point_s`` seconds
    (never fewer than 3 samples): cheap calls get many samples, so a quiet one is among them;
    threads: CPU threads to measure with (``measure.num_threads``; None: leave as is).
    """

    shape: cost.ModelShape
    k: int
    start: int
    attention_batches: tuple[int, ...]
    attention_contexts: tuple[int, ...]
    max_batch: int
    budget_s: float
    max_kv_bytes: float
    warmup: int
    repeats: int
    point_s: float
    threads: int | None = None


def context_sizes(device=None, dtype=None) -> ContextSizes:
    dev = measure.pick_device() if device is None else torch.device(device)
    dt = measure.default_dtype(dev) if dtype is None else measure.as_dtype(dtype)
    shape = stack.stack_sizes(dev).target.in_dtype(measure.dtype_name(dt))
    if dev.type == "cuda":
        # 4 of Llama-3-8B's layers (the stack of Chapters 2 and 4); the weights and the KV cache read the same
        # bytes at L_kv = 106k / B tokens, ~800 at the batches a GPU's ridge asks for (~128); caches up to 8 GB
        # (half a T4)
        return ContextSizes(shape, k=4, start=256, attention_batches=(1, 64),
                            attention_contexts=(1024, 2048, 4096, 8192, 16384, 32768), max_batch=512,
                            budget_s=60.0, max_kv_bytes=8e9, warmup=5, repeats=20, point_s=1.0)
    # One layer of Chapters 2 and 4's CPU stack (d = 2048, 16 heads sharing 4 KV heads, 94 MB in bf16: three
    # times a 32 MB L3). Weights and cache read the same bytes at L_kv = 23k / B tokens, a few thousand at the
    # batches a CPU's ridge asks for (8-32); a cache of a few hundred MB is several times the weights, and the
    # sweep stays within ~15 s. One thread: on a machine shared with other work, a second thread mostly waits
    # for the first (a parallel region needs both cores at once), which turns sub-millisecond calls into 10 ms.
    one = replace(shape, n_layers=1, name=f"one layer, d={shape.d_model}")
    # Attention alone at B = 1 and 8: a CPU's attention kernel streams a cache several times slower than a copy,
    # so a batch of 8 sequences of 8k tokens (134 MB) already takes tens of milliseconds.
    # Batches up to 32: past that a pass takes long enough on one core that the sweep cannot reach L_kv(B).
    return ContextSizes(one, k=4, start=256, attention_batches=(1, 8), attention_contexts=(512, 2048, 8192),
                        max_batch=32, budget_s=15.0, max_kv_bytes=0.6e9, warmup=2, repeats=30, point_s=0.25, threads=1)


def layer_shape(shape: cost.ModelShape) -> cost.ModelShape:
    """One layer of ``shape``, no LM head: what one attention call works on."""
    name = shape.name if shape.n_layers == 1 else f"{shape.name}, one layer"
    return stack.stack_shape(1, shape.d_model, shape.n_heads, shape.n_kv_heads, shape.d_ff,
                             name=name).in_dtype(shape.compute)


def _noise(size, dtype, device, gen) -> torch.Tensor:
    return torch.empty(size, dtype=dtype).normal_(generator=gen).to(device)


def attention_inputs(shape: cost.ModelShape, batch: int, new_tokens: int, context: int, dtype, device, seed=0):
    """(q, keys, values, mask): n queries per sequence, a cache of L + n keys, the causal mask of the
    n new tokens (None for one), in the layout ``stack.attention`` uses."""
    gen = torch.Generator().manual_seed(seed)
    q = _noise((batch, shape.n_heads, new_tokens, shape.d_head), dtype, device, gen)
    kv_size = (batch, shape.n_kv_heads, context + new_tokens, shape.d_head)
    return (q, _tiled(kv_size, dtype, device, gen), _tiled(kv_size, dtype, device, gen),
            stack.causal_mask(new_tokens, context, device))


def _tiled(size, dtype, device, gen, block: int = 256) -> torch.Tensor:
    """Noise of ``size`` [..., length, d] drawn for ``block`` positions and tiled along the length: the bytes
    are what a pass pays for, and drawing a GB of noise would cost seconds."""
    *lead, length, d = size
    noise = _noise((*lead, min(block, length), d), dtype, device, gen)
    return noise.repeat(*([1] * len(lead)), -(-length // block), 1)[..., :length, :].contiguous()


def attention_time(shape: cost.ModelShape, batch: int, new_tokens: int, context: int, dtype=None, device=None, *,
                   warmup: int = 2, repeats: int = 5, budget_s: float | None = 1.0) -> measure.Record:
    """Time ``scaled_dot_product_attention`` of one layer of ``shape``: ``batch`` sequences, ``new_tokens``
    queries each over ``context`` + ``new_tokens`` cached keys (GQA folded as ``stack.attention`` runs it:
    ``stack.grouped_attention``).
    ``extra``: the cost model's FLOPs and bytes of that attention (``cost.attention_cost`` of one layer),
    and the achieved rates."""
    batch = validate.integer("batch", batch, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    context = validate.integer("context", context, low=0)
    dev = measure.pick_device() if device is None else torch.device(device)
    dt = measure.default_dtype(dev) if dtype is None else measure.as_dtype(dtype)
    one = layer_shape(shape.in_dtype(measure.dtype_name(dt)))
    q, keys, values, mask = attention_inputs(one, batch, new_tokens, context, dt, dev)
    with torch.inference_mode():
        timing = measure.time_fn(lambda: stack.grouped_attention(q, keys, values, mask), warmup=warmup,
                                 repeats=repeats, device=dev, budget_s=budget_s)
    model = cost.attention_cost(one, batch, new_tokens, context)
    t = timing.median
    extra = {"flops": model.flops, "bytes": model.bytes, "intensity": model.intensity, "flops_per_s": model.flops / t,
             "bytes_per_s": model.bytes / t, "gb_per_s": model.bytes / t / 1e9}
    params = {"batch": batch, "new_tokens": new_tokens, "context": context, "heads": one.n_heads,
              "kv_heads": one.n_kv_heads, "d_head": one.d_head}
    return measure.Record.from_timing("attention", params, timing, dev, dt, extra)


def attention_sweep(shape: cost.ModelShape, batches, new_tokens, contexts, dtype=None, device=None,
                    max_kv_bytes: float | None = None, progress: bool = True, **timing) -> list[measure.Record]:
    """``attention_time`` at every (batch, new_tokens, context) whose one-layer cache fits in
    ``max_kv_bytes`` (None: all), with a progress bar."""
    from tqdm.auto import tqdm

    dt = None if dtype is None else measure.as_dtype(dtype)
    one = layer_shape(shape if dt is None else shape.in_dtype(measure.dtype_name(dt)))
    points = [(b, n, ell) for b in validate.integers("batches", batches, low=1)
              for n in validate.integers("new_tokens", new_tokens, low=1)
              for ell in validate.integers("contexts", contexts, low=0)
              if max_kv_bytes is None or b * one.kv_bytes_per_token * (ell + n) <= max_kv_bytes]
    bar = tqdm(points, desc="attention over a KV cache", disable=not progress)
    records = []
    for b, n, ell in bar:
        bar.set_postfix(B=b, n=n, L=ell)
        records.append(attention_time(shape, b, n, ell, dtype, device, **timing))
    return records


@dataclass
class ContextSweep:
    """Decode and verify records of one stack at growing context (samples taken in alternation), and why
    the sweep stopped:
    ``"seen"`` (the ratio fell halfway to 1), ``"budget"`` or ``"memory"``."""

    batch: int
    k: int
    decode: list[measure.Record] = field(default_factory=list)
    verify: list[measure.Record] = field(default_factory=list)
    stopped: str = ""

    @property
    def contexts(self) -> list[int]:
        return [r.params["context"] for r in self.decode]

    def ratios(self) -> list[float]:
        """verify/decode at each context: the median over pairs of samples taken one after the other
        (``paired_ratio``)."""
        return [paired_ratio(d, v) for d, v in zip(self.decode, self.verify, strict=True)]


def paired_ratio(decode: measure.Record, verify: measure.Record) -> float:
    """The median of verify/decode over samples taken in alternation (pair i: decode i, then verify i), so
    that a slow spell of a shared machine slows both sides of a pair, not one pass's whole record."""
    return statistics.median(v / d for d, v in zip(decode.samples, verify.samples, strict=True))


def _pass_records(st: stack.LayerStack, batch: int, k: int, ctx: int, caches, warmup: int, repeats: int,
                  point_s: float | None) -> tuple[measure.Record, measure.Record]:
    """A decode and a verify pass over the same caches, warmed up, then timed in alternation: ``repeats``
    pairs at most, at least 3, about ``point_s`` seconds of them."""
    calls = []
    for n in (1, k + 1):
        x, _, groups = stack.pass_inputs(st, batch, n, 0)  # inputs only: the cache is shared
        calls.append(lambda x=x, groups=groups: stack.forward(st, x, caches, ctx, groups))
    samples: tuple[list[float], list[float]] = ([], [])
    began = time.perf_counter()
    with torch.inference_mode():
        for call in calls:
            measure.time_fn(call, warmup=max(warmup - 1, 0), repeats=1, device=st.device)
        while len(samples[0]) < repeats and (len(samples[0]) < 3 or point_s is None
                                             or time.perf_counter() - began < 2 * point_s):
            for call, out in zip(calls, samples, strict=True):
                out.extend(measure.time_fn(call, warmup=0, repeats=1, device=st.device).samples)
    return tuple(_record(st, batch, n, ctx, measure.Timing(out)) for n, out in zip((1, k + 1), samples, strict=True))


def _record(st: stack.LayerStack, batch: int, new_tokens: int, ctx: int, timing: measure.Timing) -> measure.Record:
    model = cost.forward_cost(st.shape, batch, new_tokens, ctx)
    extra = {"flops": model.flops, "bytes": model.bytes, "tokens": model.tokens, "intensity": model.intensity,
             "gb_per_s": model.bytes / timing.median / 1e9}
    params = {"stack": st.shape.name, "batch": batch, "new_tokens": new_tokens, "context": ctx}
    return measure.Record.from_timing("stack_pass", params, timing, st.device, st.dtype, extra)


def _cache(st: stack.LayerStack, batch: int, length: int, seed: int = 0):
    """Per layer, K and V [batch, n_kv_heads, length, d_head] (``_tiled`` noise)."""
    gen = torch.Generator().manual_seed(seed)
    size = (batch, st.shape.n_kv_heads, length, st.shape.d_head)
    return [tuple(_tiled(size, st.dtype, st.device, gen) for _ in range(2)) for _ in range(st.shape.n_layers)]


def verify_batch(st: stack.LayerStack, k: int, context: int, ratio: float = 2.0, limit: int = 256, *,
                 warmup: int = 2, repeats: int = 5, point_s: float | None = None) -> tuple[int, list]:
    """The smallest power-of-two batch at which a verify pass (k + 1 tokens per sequence) measured at least
    ``ratio`` times a decode pass at ``context`` (``paired_ratio``), doubling B from 1 (``doubling_sweep``);
    the largest power of two up to ``limit`` if none did. Returns (batch, [(B, measured ratio), ...])."""
    k, ctx = validate.integer("k", k, low=1), validate.integer("context", context, low=0)
    ratio = validate.number("ratio", ratio, low=1, low_open=True)
    limit = validate.integer("limit", limit, low=1)
    sweep = doubling_sweep(
        lambda b: paired_ratio(*_pass_records(st, b, k, ctx, _cache(st, b, ctx + k + 1), warmup, repeats, point_s)),
        lambda batches, ratios: ratios[-1] >= ratio, limit=limit)
    return sweep.batches[-1], list(zip(sweep.batches, sweep.results, strict=True))


def context_sweep(st: stack.LayerStack, batch: int, k: int, start: int, *, budget_s: float, max_kv_bytes: float,
                  warmup: int = 2, repeats: int = 5, point_s: float | None = None,
                  progress: bool = True) -> ContextSweep:
    """Decode and verify passes of ``st`` at L = start, 2·start, ... over one cache per L (both passes read
    the same L cached tokens; verify writes k + 1 new entries, decode one), timed in alternation, by
    ``doubling_sweep`` over L. Stops after the first L at which the ratio (``paired_ratio``) has fallen
    halfway to 1 (``context.excess_halved``) with caches that weigh at least as much as the weights
    (L ≥ L_kv(B): before that the mechanism cannot have acted, and a fall is noise), before an L that
    would not fit in ``budget_s``, or before a cache larger than ``max_kv_bytes``. It always measures two
    contexts if the memory cap allows: one ratio says nothing about a fall. ``point_s``: about how long
    each pass's samples may take (at least 3 pairs, at most ``repeats``)."""
    from tqdm.auto import tqdm

    batch, k = validate.integer("batch", batch, low=1), validate.integer("k", k, low=1)
    start = validate.integer("start", start, low=1)
    budget_s = validate.number("budget_s", budget_s, low=0)
    sweep = ContextSweep(batch, k)
    longest = int(max_kv_bytes // (batch * st.shape.kv_bytes_per_token)) - (k + 1)  # the memory cap, in tokens
    if longest < start:
        sweep.stopped = "memory"
        return sweep
    bar = tqdm(desc=f"{st.shape.name}: decode and verify vs L", unit="L", disable=not progress)

    def point(ctx: int) -> float:
        bar.set_postfix(B=batch, L=ctx)
        decode, verify = _pass_records(st, batch, k, ctx, _cache(st, batch, ctx + k + 1), warmup, repeats, point_s)
        sweep.decode.append(decode)
        sweep.verify.append(verify)
        bar.update()
        return paired_ratio(decode, verify)

    def seen(contexts: list[int], ratios: list[float]) -> bool:
        caches_weigh = batch * st.shape.kv_bytes_per_token * contexts[-1] >= st.shape.weight_bytes_total
        return caches_weigh and context.excess_halved(ratios[0], ratios[-1])

    run = doubling_sweep(point, seen, first=start, limit=longest, budget_s=max(budget_s, 1e-9), min_points=2)
    bar.close()
    sweep.stopped = {"done": "seen", "limit": "memory", "budget": "budget"}[run.stop]
    return sweep
