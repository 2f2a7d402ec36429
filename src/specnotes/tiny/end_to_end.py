"""The end-to-end speedup of speculative decoding on this device, beside what its pass times predict
(Chapter 3).

Measured: plain and speculative decoding of one prompt (batch 1), for several k, run back to back
``repeats`` times. Each repeat gives one paired ratio S = T_plain / T_speculative (both runs see about
the same load on a shared machine); the headline is their median, the spread their range.

Predicted, from the fastest pass times (contention only ever adds time), with E[N] as measured:

    c = T_d / T_t(1),   S_Leviathan = E[N] / (1 + k c),   S_passes = E[N] T_t(1) / (k T_d + T_t(k+1)),

where T_t(n) is one target pass over n new tokens and T_d one draft step, at the same context.
The wall clock minus the passes an iteration runs is what neither prediction sees: the loop around
them (sampling, cache rollback, bookkeeping).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from specnotes import validate
from specnotes.tiny.generate import forward_timing, generate, speculative_generate
from specnotes.tiny.model import Transformer


def pass_timings(target: Transformer, draft: Transformer, ids: torch.Tensor, context: int, ks: Sequence[int],
                 **timing) -> dict:
    """Timings (``measure.Timing``) of the passes an iteration is made of, batch 1, after ``context``
    cached tokens: ``{"target": {1: ..., k+1: ...}, "draft": {1: ...}}``."""
    ks = validate.integers("ks", ks, low=1)
    target_passes = {n: forward_timing(target, ids, context, n, **timing) for n in sorted({1, *(k + 1 for k in ks)})}
    return {"target": target_passes, "draft": {1: forward_timing(draft, ids, context, 1, **timing)}}


def wall_clock_runs(target: Transformer, draft: Transformer, prompt: str, new_tokens: int, ks: Sequence[int],
                    repeats: int, progress=None) -> dict:
    """Wall-clock seconds of plain decoding and of speculative decoding at each k (greedy), ``repeats``
    times in turn, after one warm-up of each: ``{"plain": [...], k: [...]}``, and under ``"stats"``
    the last run's GenerationStats for each k. ``progress`` wraps the repeats (e.g. tqdm)."""
    ks = validate.integers("ks", ks, low=1)
    repeats = validate.integer("repeats", repeats, low=1)
    generate(target, [prompt], 8)
    for k in ks:
        speculative_generate(target, draft, [prompt], 8, k=k)
    walls = {"plain": [], **{k: [] for k in ks}, "stats": {}}
    for _ in (progress or iter)(range(repeats)):
        walls["plain"].append(generate(target, [prompt], new_tokens).stats.wall_time_s)
        for k in ks:
            stats = speculative_generate(target, draft, [prompt], new_tokens, k=k).stats
            walls[k].append(stats.wall_time_s)
            walls["stats"][k] = stats
    return walls


def verdict(low: float, high: float) -> str:
    """What a measured speedup range says: "faster" (all of it above 1), "slower" (all below 1), or
    "within noise" (it straddles 1)."""
    return "faster" if low > 1 else "slower" if high < 1 else "within noise"


def speedup_rows(passes: dict, walls: dict) -> list[dict]:
    """One row per k: measured α, E[N], iterations; the measured speedup (median of the paired
    ratios, their range, the verdict); the two predictions; the unmodelled time per iteration."""
    fastest = lambda timing: min(timing.samples)  # noqa: E731
    t1, td = fastest(passes["target"][1]), fastest(passes["draft"][1])
    c = td / t1
    rows = []
    for k, stats in walls["stats"].items():
        ratios = [plain / spec for plain, spec in zip(walls["plain"], walls[k], strict=True)]
        tv, en = fastest(passes["target"][k + 1]), stats.mean_tokens_per_iteration
        modelled = k * td + tv  # seconds of passes per iteration
        rows.append({
            "k": k, "α": stats.alpha, "E[N]": en, "iterations": stats.iterations,
            "S measured (median)": statistics.median(ratios), "S low": min(ratios), "S high": max(ratios),
            "measured": verdict(min(ratios), max(ratios)),
            "S Leviathan E[N]/(1+kc)": en / (1 + k * c),
            "S from passes": en * t1 / modelled,
            "unmodelled ms per iteration": 1e3 * (min(walls[k]) / stats.iterations - modelled),
        })
    return rows
