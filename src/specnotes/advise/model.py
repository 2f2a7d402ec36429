"""The cost model evaluated for a Deployment: S at a batch and k, the best k, the memory limit, the batches
where S > 1, the band's factors and verdicts, which roof each kernel sits under, and one report row per batch."""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import replace

from specnotes.advise.base import K_MAX, Deployment
from specnotes.advise.calibration import _calibrate
from specnotes.analytic import cost, hardware


def anchor_distance(batches, batch: int) -> float:
    """log2(batch / the measured batch nearest to it in log B): how far an anchored prediction reaches
    (negative: below the measurement)."""
    d = [math.log2(batch / b) for b in batches]
    return min(d, key=abs)


def _accepted(fn, model: dict) -> dict:
    """The part of ``model`` that ``fn`` takes."""
    names = inspect.signature(fn).parameters
    return {key: value for key, value in model.items() if key in names}


def _model(dep: Deployment) -> dict:
    """Keyword arguments for cost.batch_speedup and friends (tp and the draft's KV window included)."""
    model = dict(dep.model)
    model.setdefault("tp", dep.tp)
    if dep.draft_context is not None:
        model.setdefault("draft_context", dep.draft_context)
    return model


def expected_tokens(dep: Deployment, k: int) -> float:
    """E[N] at k: 1 + the first k per-position survivals where they were given, else the i.i.d. formula at α."""
    if dep.survivals is not None:
        return 1 + sum(dep.survivals[:k])
    return cost.expected_tokens(dep.alpha, k)


def speedup(dep: Deployment, batch: int, k: int) -> float:
    if dep.survivals is not None:  # per-position acceptance: E[N] = 1 + the first k survivals (Chapter 11)
        if not k:
            return 1.0
        return cost.tree_speedup(dep.target, dep.draft, dep.accel, batch, (1,) * k, k, 1 + sum(dep.survivals[:k]),
                                 dep.context, **_model(dep))
    if dep.tree:
        return cost.tree_speedup(dep.target, dep.draft, dep.accel, batch, dep.tree, dep.k, dep.tokens, dep.context,
                                 **_model(dep))
    return cost.batch_speedup(dep.target, dep.draft, dep.accel, batch, k, dep.alpha, dep.context, **_model(dep))


def best_k(dep: Deployment, batch: int) -> int:
    """The model's best k at ``batch`` (``cost.best_k``: 0 where no k gives S > 1); a tree: its own."""
    if dep.tree:
        return dep.k
    if dep.survivals is not None:
        return max(range(len(dep.survivals) + 1), key=lambda k: speedup(dep, batch, k))
    return cost.best_k(dep.target, dep.draft, dep.accel, batch, dep.alpha, dep.context, k_max=K_MAX, **_model(dep))


def k_on(dep: Deployment, batch: int) -> int:
    """The k a row's S, band and verdict are for: the k in use, or with "best" the best k of 1..K_MAX (what
    speculating would give, even where the model says to leave it off)."""
    if dep.k:
        return dep.k
    top = len(dep.survivals) if dep.survivals is not None else K_MAX
    return max(range(1, top + 1), key=lambda k: speedup(dep, batch, k))


def memory_limit(dep: Deployment) -> int | None:
    """``cost.max_batch`` with the k in use (K_MAX for "best": the larger KV reservation)."""
    return cost.max_batch(dep.target, dep.draft, dep.accel, dep.context, k=dep.k or K_MAX, tp=dep.tp,
                          draft_context=dep.draft_context)


def weights_per_gpu(dep: Deployment) -> float:
    """Bytes of weights on each GPU, as ``memory_limit`` counts them (``cost.weights_per_device``)."""
    return cost.weights_per_device(dep.target, dep.draft, k=dep.k or K_MAX, tp=dep.tp)


def _merge(ranges) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def paying(dep: Deployment, limit: int, threshold: float = 1.0) -> list[tuple[int, int]]:
    """The batch ranges up to ``limit`` where S > ``threshold`` (``cost.paying_batches``); for "best" k the
    union over k = 1..K_MAX (S > threshold with the best k exactly where some k gives it); a tree by
    ``cost.batch_ranges`` on its S(B)."""
    if dep.tree:
        return cost.batch_ranges(lambda b: speedup(dep, b, dep.k) > threshold, limit)
    ks = [dep.k] if dep.k else range(1, (len(dep.survivals) if dep.survivals is not None else K_MAX) + 1)
    if dep.survivals is not None:
        return _merge(r for k in ks for r in cost.batch_ranges(lambda b, k=k: speedup(dep, b, k) > threshold, limit))
    return _merge(r for k in ks for r in cost.paying_batches(dep.target, dep.draft, dep.accel, k, dep.alpha,
                                                             dep.context, limit=limit, threshold=threshold,
                                                             **_model(dep)))


def band_of(dep: Deployment):
    """The band in use: the anchored one where the model is anchored on a measurement, else the batch band
    (None: knobs set by hand)."""
    return dep.anchor.band if dep.anchor else dep.band


def factors(dep: Deployment, batch: int) -> tuple[float, float, float]:
    """(low, centre, high) multipliers on the model's S at ``batch``: the batch band's at log2 B; anchored, the
    level times the anchored band's at log2(B / the nearest measured B); (1, 1, 1), or the level, without a
    band."""
    if dep.anchor is None:
        return (1.0, 1.0, 1.0) if dep.band is None else _band_factors(dep.band, math.log2(batch))
    level = dep.anchor.level
    if dep.anchor.band is None:
        return level, level, level
    x = anchor_distance([b for b, _ in dep.anchor.measured], batch)
    return tuple(level * f for f in _band_factors(dep.anchor.band, x))


@functools.lru_cache(maxsize=4096)
def _band_factors(band, x: float) -> tuple[float, float, float]:
    return band.factors(x)


def end_speedups(dep: Deployment, batch: int, k: int) -> tuple[float, float]:
    """The model's S at ``batch`` at the low and the high end of an α range (both the same without one)."""
    if dep.alpha_span is None:
        s = speedup(dep, batch, k)
        return s, s
    return tuple(speedup(replace(dep, alpha=a), batch, k) for a in dep.alpha_span)


def best_speedup(dep: Deployment, batch: int) -> float:
    """The model's S at ``batch`` with the k in use, or the best speculating k's (``k_on``) where k is "best"."""
    return speedup(dep, batch, k_on(dep, batch))


def measured_at(dep: Deployment, batch: int) -> tuple[float, float] | None:
    """The reader's measurement at ``batch`` (anchored on or held back) as (low, high): a record's quartiles over
    its pairs where it kept them, else the measured S twice; None where ``batch`` was not measured."""
    if dep.anchor is None:
        return None
    measured = dict(dep.anchor.measured + dep.anchor.held_back)
    if batch not in measured:
        return None
    q = dep.anchor.quartiles.get(batch)
    return (float(q[0]), float(q[1])) if q else (measured[batch], measured[batch])


def verdict_batches(dep: Deployment, limit: int) -> dict | None:
    """Where the band lies above 1 ("pays"), straddles it ("uncertain") or lies below it ("loses"), as batch
    ranges up to ``limit`` (``calibrate.verdict_of`` at every batch); None without a band. At a batch the reader
    measured, the measurement decides, not the band (``measured_at``: a record's quartiles, or the one S): it
    pays where the measurement's low end is above 1, loses where its high end is below 1."""
    if band_of(dep) is None or limit < 1:
        return None

    def edges(b):
        m = measured_at(dep, b)
        if m is not None:
            return m
        s_low, s_high = end_speedups(dep, b, k_on(dep, b))
        low, _, high = factors(dep, b)
        return s_low * low, s_high * high

    sure = cost.batch_ranges(lambda b: edges(b)[0] > 1, limit)
    maybe = cost.batch_ranges(lambda b: edges(b)[1] >= 1, limit)
    return {"pays": [list(r) for r in sure], "uncertain": [list(r) for r in _subtract(maybe, sure)],
            "loses": [list(r) for r in _subtract([(1, limit)], maybe)]}


def _subtract(ranges, cut) -> list[tuple[int, int]]:
    """The batches of ``ranges`` not in ``cut`` (both lists of inclusive ranges)."""
    out = []
    for lo, hi in ranges:
        start = lo
        for a, b in cut:
            if b < start or a > hi:
                continue
            if a > start:
                out.append((start, a - 1))
            start = max(start, b + 1)
        if start <= hi:
            out.append((start, hi))
    return out


def band_batches(dep: Deployment) -> tuple[int, int] | None:
    """The batches the band's held-out errors came from (past them, the band is their nearest's); anchored,
    the batches the anchored errors reach from the nearest measured batch."""
    band = band_of(dep)
    if band is None:
        return None
    lo, hi = band.span()
    if dep.anchor is None:
        return round(2**lo), round(2**hi)
    batches = [b for b, _ in dep.anchor.measured]
    return max(1, math.floor(min(batches) * 2**lo)), math.ceil(max(batches) * 2**hi)


def extrapolated(dep: Deployment, batch: int) -> bool:
    """Whether the verdict at ``batch`` extrapolates: the request lies past the calibration's fit (GPU, engine,
    drafter, target, context, tp, weights), or this batch lies past the largest batch it was fitted on or
    past the batches the band was built from."""
    past_batch = [x for x in dep.extrapolations if x.startswith("batches above")]
    span = band_batches(dep)
    return (len(dep.extrapolations) > len(past_batch) or bool(dep.fitted_batch and batch > dep.fitted_batch)
            or bool(span and not span[0] <= batch <= span[1]))


def kernel_roofs(kernels, accel: hardware.Accelerator, math_dtype: str) -> dict[str, str]:
    """"memory" or "compute" for each kernel: which of bytes/BW and FLOPs/peak is larger (the all-reduces,
    which run on the links, are left out)."""
    peak = accel.peak(math_dtype)
    return {k.name: "compute" if k.flops / peak > k.bytes / accel.mem_bandwidth else "memory"
            for k in kernels if k.flops or k.bytes}


def draft_kernels(dep: Deployment, batch: int, k: int) -> tuple:
    """The kernels of one draft pass (the first of k for a draft model, an early exit or an EAGLE head; the
    only one for a single-pass drafter or heads); none for a drafter without weights."""
    ctx = dep.context if dep.draft_context is None else dep.draft_context
    passes = cost.draft_passes(dep.draft, batch, k, ctx, dep.tp, dep.target, dep.tree)
    return passes[0].kernels if passes else ()


def roofs(dep: Deployment, batch: int, k: int) -> dict[str, dict[str, str]]:
    """Which roof each kernel of the decode, verify and draft passes sits under at this batch."""
    passes = {"decode": cost.decode_cost(dep.target, batch, dep.context, dep.tp).kernels,
              "verify": cost.verify_cost(dep.target, batch, k, dep.context, dep.tp).kernels,
              "draft": draft_kernels(dep, batch, k)}
    return {name: kernel_roofs(kernels, dep.accel, dep.math_dtype) for name, kernels in passes.items()}


def row(dep: Deployment, batch: int, limit: int | None) -> dict:
    """One batch: S with the k in use (with "best", the best speculating k, ``k_on``): the central estimate
    (``speedup``: the model's S times the band's centre factor), the model's own (``model_speedup``), the band
    and its verdict; the model's best k (0: leave it off) and its S (central), times, c, throughput (the
    model's), the roofs, and the time split by term (``cost.breakdown``'s ``to_json``: seconds per term of the
    decode step, the draft passes and the verify pass; each pass's kernels' bounds). A tree: its k is the tree
    tokens verified."""
    model = _model(dep)
    best = best_k(dep, batch)
    k = dep.k or k_on(dep, batch)
    drafted = k
    plain = cost.pass_time(dep.target, dep.accel, batch, 1, dep.context, **_accepted(cost.pass_time, model))
    draft_ctx = dep.context if dep.draft_context is None else dep.draft_context
    draft_model = {**_accepted(cost.draft_time, model), "overhead": model.get("draft_overhead",
                                                                              model.get("overhead", 0.0))}
    if dep.tree:
        drafting = cost.draft_time(dep.draft, dep.accel, batch, k, draft_ctx, target=dep.target, widths=dep.tree,
                                   **draft_model)
        iteration = cost.iteration_time(dep.target, dep.draft, dep.accel, batch, k, dep.context, widths=dep.tree,
                                        **model)
        levels, tokens = len(dep.tree), dep.tokens
    else:
        drafting = cost.draft_time(dep.draft, dep.accel, batch, drafted, draft_ctx, target=dep.target, **draft_model)
        iteration = cost.iteration_time(dep.target, dep.draft, dep.accel, batch, k, dep.context, **model)
        levels, tokens = drafted, expected_tokens(dep, k)
    s = speedup(dep, batch, k)
    low, centre, high = factors(dep, batch)
    s_low, s_high = end_speedups(dep, batch, k)
    band = [s_low * low, s_high * high] if band_of(dep) else None
    measured = dict(dep.anchor.measured + dep.anchor.held_back) if dep.anchor else {}
    decided = measured_at(dep, batch) if band else None  # at a measured batch the measurement decides
    return {"batch": batch, "fits": limit is None or batch <= limit, "k": k, "speedup": s * centre,
            "model_speedup": s, "band": band,
            "verdict": _calibrate().verdict_of(*(decided or band)) if band else None,
            "verdict_from": None if not band else "measured" if decided else "band",
            "extrapolated": extrapolated(dep, batch) and not decided,
            "best_k": best, "best_speedup": speedup(dep, batch, best) * centre if best else 1.0,
            "c": drafting / (levels * plain), "plain_ms": 1e3 * plain, "iteration_ms": 1e3 * iteration,
            "plain_tokens_per_s": batch / plain, "spec_tokens_per_s": batch * tokens / iteration,
            "roofs": roofs(dep, batch, drafted),
            "split": cost.breakdown(dep.target, dep.draft, dep.accel, batch, k, dep.context,
                                    widths=dep.tree, **_accepted(cost.breakdown, model)).to_json(),
            "measured": measured.get(batch),
            "measured_role": None if batch not in measured else "anchor" if batch in dict(dep.anchor.measured)
            else "held back"}
