"""Where speculation pays: the batch ranges with S(B) > 1 (``paying_batches``, ``batch_ranges``), the crossover
batch B* (``crossover_batch``) and the best k at a batch (``best_k``)."""

from __future__ import annotations

import math

from specnotes import validate
from specnotes.analytic.cost.acceptance import expected_tokens
from specnotes.analytic.cost.drafters import Draft
from specnotes.analytic.cost.iteration import _speedup, batch_speedup
from specnotes.analytic.cost.memory import max_batch
from specnotes.analytic.cost.roofline import _engine
from specnotes.analytic.cost.shapes import ModelShape


def _pays(target, draft, accel, k, alpha, context, model: dict, threshold: float = 1.0):
    """S(B) > threshold as a function of B alone, with every other argument checked once."""
    model = dict(model)
    context = validate.integer("context", context, low=0)
    draft_context = model.pop("draft_context", None)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    k, en = validate.integer("k", k, low=0), expected_tokens(alpha, k)
    eng = _engine(accel, **model)
    return lambda b: _speedup(target, draft, eng, b, k, en, context, draft_ctx) > threshold


def _grid(limit: int, per_octave: int = 4) -> list[int]:
    return sorted({min(limit, round(2 ** (i / per_octave))) for i in range(per_octave * math.ceil(math.log2(limit))
                                                                         + 1)} | {1, limit})


def _edge(pays, lo: int, hi: int) -> int:
    """The last b in [lo, hi) with pays(b) == pays(lo), given pays(lo) != pays(hi): bisection."""
    side = pays(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) == side else (lo, mid)
    return lo


def paying_batches(target: ModelShape, draft: Draft, accel, k: int, alpha: float, context: int = 0,
                   limit: int | None = None, threshold: float = 1.0, **model) -> list[tuple[int, int]]:
    """The batch ranges [first, last] (inclusive) where S(B) > 1 (or > ``threshold``), for B from 1 to ``limit``.

    ``limit`` defaults to ``max_batch`` (the largest batch that fits in memory; tp and draft_context
    from ``model`` count) or 65,536 on an accelerator without a memory size. A range can be empty,
    start above 1 (self-speculation at long context) or run up to the limit. ``model``: the keyword
    arguments of ``batch_speedup`` (dtype, overhead, draft_overhead, overlap, draft_context, tp, ...).
    ``batch_ranges`` finds the ranges.
    """
    if limit is None:
        fits = max_batch(target, draft, accel, context, k=k, tp=model.get("tp", 1),
                         draft_context=model.get("draft_context"))
        limit = fits if fits is not None else 1 << 16
        if limit < 1:
            return []
    limit = validate.integer("limit", limit, low=1)
    threshold = validate.number("threshold", threshold, low=0)
    return batch_ranges(_pays(target, draft, accel, k, alpha, context, model, threshold), limit)


def batch_ranges(pays, limit: int) -> list[tuple[int, int]]:
    """The ranges [first, last] of B in 1..``limit`` where ``pays(B)`` is true.

    ``pays`` is evaluated on a grid of 4 points per doubling of B and each change is bisected to the
    exact batch; a range narrower than the grid's step could be missed (the model's S(B) is a ratio of
    piecewise-linear functions of B and crosses a threshold at most a few times; tests compare with a
    full scan).
    """
    limit = validate.integer("limit", limit, low=1)
    grid = _grid(limit)
    ranges, start = [], 1 if pays(1) else None
    previous = 1
    for b in grid[1:]:
        now = pays(b)
        if now != (start is not None):
            edge = _edge(pays, previous, b)
            if start is None:
                start = edge + 1
            else:
                ranges.append((start, edge))
                start = None
        previous = b
    if start is not None:
        ranges.append((start, limit))
    return ranges


def crossover_batch(target: ModelShape, draft: Draft, accel, k: int, alpha: float, context: int = 0,
                    dtype: str | None = None, max_batch: int = 1 << 16, **model) -> int | None:
    """B*: the first batch past which speculation never pays again (S ≤ 1 from B* up to ``max_batch``).

    1 if it never pays; None if it still pays at ``max_batch``. Where S(B) falls with B (weights
    dominate the bytes) this is the smallest B with S(B) ≤ 1; at long context S can also *rise* with B,
    and then B* is where the last paying range ends. Memory capacity is not applied here: compare with
    ``cost.max_batch`` (``paying_batches`` applies it).
    """
    max_batch = validate.integer("max_batch", max_batch, low=1)
    ranges = paying_batches(target, draft, accel, k, alpha, context, limit=max_batch, dtype=dtype, **model)
    if not ranges:
        return 1
    last = ranges[-1][1]
    return None if last >= max_batch else last + 1


def best_k(target: ModelShape, draft: Draft, accel, batch: int, alpha: float, context: int = 0,
           k_max: int = 16, **model) -> int:
    """The k in 0..k_max that maximizes S(B) at this batch (0: do not speculate)."""
    k_max = validate.integer("k_max", k_max, low=0)
    return max(range(k_max + 1), key=lambda k: batch_speedup(target, draft, accel, batch, k, alpha, context, **model))
