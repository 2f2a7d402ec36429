"""``advise``: the report as a JSON-ready dict (its schema is in the package's docstring): the rows, the
S(B) curve, the batch ranges, and the deployment described."""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import replace

from specnotes.advise.base import NO_MEMORY_LIMIT, SCHEMA, Deployment
from specnotes.advise.model import (
    band_batches,
    band_of,
    best_speedup,
    end_speedups,
    expected_tokens,
    factors,
    k_on,
    memory_limit,
    paying,
    row,
    speedup,
    verdict_batches,
    weights_per_gpu,
)
from specnotes.advise.words import (
    band_line,
    checklist,
    measure_batches,
    measure_commands,
    quote,
    recommendation,
    verdict_line,
)
from specnotes.analytic import cost
from specnotes.analytic.cost import ModelShape


def report_batches(lo: int, hi: int, edges=()) -> list[int]:
    """The batches a report lists: the ends, the powers of two between, and any edge inside."""
    powers = {2**i for i in range(int(math.log2(hi)) + 1) if lo <= 2**i <= hi}
    return sorted(powers | {lo, hi} | {b for b in edges if b is not None and lo <= b <= hi})


def curve_batches(lo: int, hi: int, per_octave: int = 8) -> list[int]:
    steps = max(1, math.ceil(per_octave * math.log2(hi / lo))) if hi > lo else 0
    return sorted({round(lo * (hi / lo) ** (i / steps)) for i in range(steps + 1)} if steps else {lo})


def _progress(items, progress, desc):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, file=sys.stderr, leave=False, disable=None if progress is None else not progress)


def advise(dep: Deployment, progress: bool | None = False, argv: list[str] | None = None) -> dict:
    """The report as a JSON-ready dict (schema in the module docstring). ``progress``: a tqdm bar on
    stderr (None: only where stderr is a terminal). With a calibration, the idealized model (no engine
    costs, per-kernel overlap) is evaluated beside it: ``idealized_speedup`` per row, ``idealized_paying_batches``."""
    fits = memory_limit(dep)
    limit = NO_MEMORY_LIMIT if fits is None else fits
    ranges = paying(dep, limit) if limit >= 1 else []
    any_k = paying(replace(dep, k=None), limit) if dep.k and not dep.tree and limit >= 1 else ranges
    ideal = replace(dep, calibration=None, calibration_about=None, model={}) if dep.calibration else dep
    ideal_ranges = paying(ideal, limit) if dep.calibration and limit >= 1 else ranges
    crossover = None if ranges and ranges[-1][1] >= limit else (ranges[-1][1] + 1 if ranges else 1)
    lo, hi = dep.batch
    edges = [r[0] for r in ranges] + [r[1] for r in ranges] + [crossover, fits]
    if dep.anchor:
        edges += [b for b, _ in dep.anchor.measured + dep.anchor.held_back]
    rows = [row(dep, b, fits) for b in _progress(report_batches(lo, hi, edges), progress, "batches")]
    fixed = replace(dep, accel=_instant(dep.accel)) if dep.calibration else None
    for r in rows:
        r["idealized_speedup"] = speedup(ideal, r["batch"], r["k"]) if dep.calibration else r["model_speedup"]
        r["fixed_cost_speedup"] = speedup(fixed, r["batch"], r["k"]) if fixed else None
    top = min(hi, limit) if lo < hi else min(limit, max(4 * hi, 1024))
    curve_lo = lo if lo < hi else 1
    # the curve passes through every row's batch, so the figure's band can be read at each (curve_band)
    on_curve = sorted(set(curve_batches(curve_lo, top)) | {r["batch"] for r in rows if curve_lo <= r["batch"] <= top}) \
        if top >= curve_lo else []
    curve = [[b, best_speedup(dep, b), *factors(dep, b)] for b in _progress(on_curve, progress, "S(B) curve")]
    warnings = list(dep.warnings) + anchor_warnings(dep)
    if fits and lo > fits:  # (fits = 0: the recommendation says why nothing fits)
        asked = f"B = {lo}" if lo == hi else f"B = {lo}–{hi}"
        warnings.append(f"none of the batches asked for ({asked}) fit in memory: at most B = {fits} sequences fit "
                        f"(weights + both KV caches at L = {dep.context}); the rows below are past the limit")
    report = {"schema": SCHEMA, "argv": shlex.join(_inputs(argv)) if argv else None, "deployment": describe(dep),
              "max_batch": fits, "limit": limit,
              "weights_per_gpu_GB": weights_per_gpu(dep) / 1e9, "rows": rows,
              "paying_batches": [list(r) for r in ranges], "verdict_batches": verdict_batches(dep, limit),
              "verdict_extrapolated": bool(dep.extrapolations),
              "best_k_paying_batches": [list(r) for r in any_k],
              "idealized_paying_batches": [list(r) for r in ideal_ranges], "crossover_batch": crossover,
              "curve": curve, "curve_band": curve_band(dep, curve), "warnings": warnings}
    report["verdict_line"] = verdict_line(report)
    report["band_line"] = band_line(report)
    report["recommendation"] = recommendation(report)
    report["measure"] = {"batches": measure_batches(report), "commands": measure_commands(report)}
    report["checklist"] = checklist(report)
    report["quote"] = quote(report)
    return report


def _instant(accel):
    """The GPU with bandwidth and peak so large that a pass costs only the engine's fixed costs."""
    return replace(accel, mem_bandwidth=1e30, peak_flops={name: 1e40 for name in accel.peak_flops},
                   link_bandwidth=1e30 if accel.link_bandwidth else accel.link_bandwidth)


def curve_band(dep: Deployment, curve: list) -> list[list[float]] | None:
    """The band along the curve, in S, as the rows and their verdicts have it: at each curve batch [B, low, high],
    the model's S at the low end of an α range times the band's low factor, at the high end times its high
    factor (without a range both ends are the one α). None without a band."""
    if band_of(dep) is None:
        return None
    out = []
    for b, _, low, _, high in curve:
        s_low, s_high = end_speedups(dep, b, k_on(dep, b))
        out.append([b, s_low * low, s_high * high])
    return out


def _inputs(argv: list[str]) -> list[str]:
    """A command line without the flags that only choose the output (--json, --plot FILE)."""
    out, skip = [], False
    for a in argv:
        if skip or a == "--json":
            skip = False
            continue
        if a == "--plot":
            skip = True
            continue
        if not a.startswith("--plot="):
            out.append(a)
    return out


def anchor_warnings(dep: Deployment) -> list[str]:
    """A level far outside what the published record's held-out errors span says the model's shape may not be
    the engine's either."""
    if dep.anchor is None or dep.band is None:
        return []
    lo, hi = math.exp(-max(dep.band.errors)), math.exp(-min(dep.band.errors))
    level = dep.anchor.level
    if lo / 1.5 <= level <= hi * 1.5:
        return []
    return [f"your engine runs at ×{level:.2f} the model's level, far outside what the published engines ran at "
            f"(×{lo:.2f}–×{hi:.2f}): its costs are not the model's, so the shape of S(B) may not be either. Measure "
            "at the batches you will run."]


def engine_knobs(model: dict) -> dict:
    """The time functions' knobs with their units in their names: ms per pass, µs per layer and all-reduce; a MoE
    engine's ``expert_slowdown`` (its expert GEMM at 1/(1 + it) of the peak) is a plain number."""
    return {"overlap": model.get("overlap", "kernel"), "overhead_ms": 1e3 * model.get("overhead", 0.0),
            "draft_overhead_ms": 1e3 * model.get("draft_overhead", model.get("overhead", 0.0)),
            "layer_overhead_us": 1e6 * model.get("layer_overhead", 0.0),
            "allreduce_latency_us": 1e6 * model.get("allreduce_latency", 0.0),
            "expert_slowdown": model.get("expert_slowdown", 0.0)}


def band_json(dep: Deployment) -> dict | None:
    """The band as the JSON says it: how it was built, the batches its errors came from, how it did held out."""
    if band_of(dep) is None:
        return None
    about = dep.anchor.about if dep.anchor else dep.band_about
    return {**dict(about), "batches": list(band_batches(dep))}


def anchor_json(dep: Deployment) -> dict | None:
    """The measurement the model is anchored on, as the JSON says it."""
    a = dep.anchor
    if a is None:
        return None
    return {"source": a.source, "measured": [list(p) for p in a.measured], "held_back": [list(p) for p in a.held_back],
            "level": a.level, "model_at_measured": list(a.model_at),
            "quartiles": {str(b): list(q) for b, q in a.quartiles.items()}}


def describe(dep: Deployment) -> dict:
    t, d = dep.target, dep.draft
    draft_params = (d.params if isinstance(d, ModelShape | cost.EagleHead) else d.shape.params
                    if isinstance(d, cost.SinglePass) else cost.early_exit_shape(t, d.layers).params
                    if isinstance(d, cost.EarlyExit) else 0)
    maps_to = {"model": "ModelShape draft: k one-token passes",
               "early-exit": f"cost.EarlyExit({getattr(d, 'layers', '')})",
               "ngram": "cost.NGRAM: no weights, its overhead only",
               "eagle": "cost.eagle_head: fc from 2·d_model, one layer of the target's width, the target's LM head",
               "eagle3": "cost.eagle3_head: fc from 3 fused features, one layer (QKV over 2·d_model), a reduced "
                         "draft LM head",
               "mtp": "cost.mtp_head: one more layer of the target's own kind, fc from 2·d_model, the target's LM "
                      "head",
               "block": "cost.Block: one pass of its weights over k positions for up to k = 16 drafts (DFlash, "
                        "P-EAGLE, PARD)"}[dep.drafter] + ("" if not dep.tree else
                                                          f"; a tree of widths {list(dep.tree)}")
    g = dep.accel
    return {
        "target": {"name": t.name, "params": t.params, "weight_bytes": t.weight_bytes, "kv_bytes": t.kv_bytes,
                   "compute": t.compute, "shape": [t.n_layers, t.d_model, t.n_heads, t.n_kv_heads, t.d_ff, t.vocab]},
        "draft": {"kind": dep.drafter, "name": dep.draft_name, "maps_to": maps_to, "params": draft_params},
        "gpu": {"name": g.name, "bandwidth_GB_per_s": g.mem_bandwidth / 1e9,
                "peak_TFLOP_per_s": g.peak(dep.math_dtype) / 1e12, "memory_GB": g.memory / 1e9 if g.memory else None,
                "ridge_FLOP_per_byte": g.ridge(dep.math_dtype), "source": g.source},
        "dtype": dep.dtype, "math_dtype": dep.math_dtype, "weight_bits": dep.weight_bits, "tp": dep.tp,
        "batch": list(dep.batch), "context_tokens": dep.context, "draft_context_tokens": dep.draft_context,
        "alpha": None if dep.tree else dep.alpha, "alpha_from": dep.alpha_from, "k": dep.k if dep.k else "best",
        "k_from": dep.k_from, "tree": list(dep.tree) if dep.tree else None, "verified": dep.k if dep.tree else None,
        "expected_tokens": dep.tokens if dep.tree else expected_tokens(dep, dep.k) if dep.k else None,
        "accept_by_position": list(dep.survivals) if dep.survivals is not None else None,
        "engine": dep.engine, "engine_version": dep.engine_version,
        "calibration": dep.calibration, "calibration_about": dep.calibration_about,
        "calibration_note": dep.calibration_note, "engine_knobs": engine_knobs(dep.model),
        "band": band_json(dep), "anchor": anchor_json(dep),
        "extrapolations": list(dep.extrapolations),
        "fitted_batch_max": dep.fitted_batch, "provenance": dep.provenance,
    }
