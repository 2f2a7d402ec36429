"""``fit``: one set of knobs fitted to a handful of points, every overlap mode tried (``Fit``): how a reader
calibrates their own engine in Chapter 6, Problem 3. ``efficiency_scan`` refits at derated peaks."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from specnotes import validate
from specnotes.analytic import cost
from specnotes.record.calibrate.points import Case
from specnotes.record.calibrate.predictions import compare, derated, predict

FIT_KNOBS = ("overhead", "draft_overhead", "allreduce_latency")  # what ``fit`` fits


def efficiency_scan(cases_: list[Case], efficiencies, **fit_kwargs) -> list[dict]:
    """Refit ``cases_`` with the accelerator's peaks scaled by each efficiency: how much of a residual a
    compute shortfall explains. One row per efficiency: the knobs fitted and the rms log error."""
    rows = []
    for e in efficiencies:
        f = fit([replace(c, accel=derated(c.accel, e)) for c in cases_], **fit_kwargs)
        rows.append({"efficiency": e, "rms_log": f.rms_log, **f.knobs})
    return rows


@dataclass(frozen=True)
class Fit:
    """A fitted calibration: ``knobs`` (pass them to any ``cost`` time function), the fit's quality,
    and the best fit of every overlap mode tried (so a reader sees why this mode)."""

    knobs: dict
    free: tuple[str, ...]
    rms_log: float
    cases: tuple[Case, ...]
    predicted: tuple[float, ...]
    by_overlap: dict

    @property
    def residuals(self) -> list[float]:
        return [m / c.measured - 1 for m, c in zip(self.predicted, self.cases, strict=True)]

    def rows(self) -> list[dict]:
        """One row per point: what was measured, what the calibrated model says, the residual."""
        return compare(list(self.cases), **self.knobs)


def _linear_parts(cases_: list[Case], overlap: str, fixed: dict, names: tuple[str, ...]):
    """Per case: E[N], plain-decode and iteration times at the fixed knobs, and their change per unit
    of each free knob (exact: the knobs add to pass times)."""
    def times(**knobs):
        both = {**fixed, **knobs}
        kw = dict(overlap=overlap, overhead=both.get("overhead", 0.0),
                  allreduce_latency=both.get("allreduce_latency", 0.0))
        plain = np.array([cost.pass_time(c.target, c.accel, c.batch, 1, c.context, tp=c.tp, **kw) for c in cases_])
        it = np.array([cost.iteration_time(c.target, c.draft, c.accel, c.batch, c.k, c.context,
                                           draft_overhead=both.get("draft_overhead", kw["overhead"]),
                                           draft_context=c.draft_context, tp=c.tp, **kw) for c in cases_])
        return plain, it
    zero = {n: 0.0 for n in names}
    plain0, iter0 = times(**zero)
    unit = {n: tuple(t - t0 for t, t0 in zip(times(**{**zero, n: 1.0}), (plain0, iter0), strict=True)) for n in names}
    en = np.array([cost.expected_tokens(c.alpha, c.k) for c in cases_])
    return en, plain0, iter0, unit


def _search(en, plain0, iter0, unit, names, measured, bounds):
    """Grid search of sum((log S_model − log S_measured)²), refined five times around the best."""
    log_measured = np.log(measured)
    lo = np.array([bounds[n][0] for n in names], float)
    hi = np.array([bounds[n][1] for n in names], float)
    steps = {1: 401, 2: 81, 3: 25}[len(names)]
    for _ in range(6):
        axes = [np.linspace(a, b, steps) for a, b in zip(lo, hi, strict=True)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(names))
        plain = plain0[None, :] + sum(grid[:, [i]] * unit[n][0][None, :] for i, n in enumerate(names))
        it = iter0[None, :] + sum(grid[:, [i]] * unit[n][1][None, :] for i, n in enumerate(names))
        sse = ((np.log(en[None, :] * plain / it) - log_measured[None, :]) ** 2).sum(1)
        best = grid[np.argmin(sse)]
        span = (hi - lo) / (steps - 1) * 4
        lo, hi = np.maximum(lo, best - span), np.minimum(hi, best + span)
        lo = np.maximum(lo, [bounds[n][0] for n in names])
    return best, float(sse.min())


def fit(cases_: list[Case], free: tuple[str, ...] = ("overhead", "draft_overhead"), overlaps=cost.OVERLAPS,
        fixed: dict | None = None, bounds: dict | None = None) -> Fit:
    """Fit the ``free`` knobs (1 to 3 of overhead, draft_overhead, allreduce_latency; seconds) to the
    cases' measured S by least squares on log S, for each overlap mode in ``overlaps``; keep the best.

    Knobs that add the same constant to the same passes cannot be told apart: at a fixed tp every pass
    of a full model makes 2·n_layers all-reduces, so ``allreduce_latency`` only moves the per-pass sums
    overhead + 2·n_layers·latency. Fix it from a measurement (``fixed=``) and fit the overheads.

    ``fixed``: knobs held at a given value (a sourced all-reduce latency, say). ``bounds``: (low, high)
    seconds per free knob; default 0 to 20 ms for overheads and 0 to 100 µs for the all-reduce latency.
    """
    cases_ = list(cases_)
    if not cases_:
        raise validate.BadArgument("fit needs at least one case")
    free = tuple(free)
    if not 1 <= len(free) <= 3 or len(set(free)) != len(free):
        raise validate.BadArgument(f"free must name 1 to 3 distinct knobs of {FIT_KNOBS}; got {free}")
    for name in free:
        validate.choice("free knob", name, FIT_KNOBS)
    fixed = dict(fixed or {})
    for name, value in fixed.items():
        validate.choice("fixed knob", name, FIT_KNOBS)
        validate.number(name, value, low=0)
        if name in free:
            raise validate.BadArgument(f"{name} is both free and fixed")
    overlaps = [validate.choice("overlap", o, cost.OVERLAPS) for o in overlaps]
    default = {"overhead": (0.0, 0.02), "draft_overhead": (0.0, 0.02), "allreduce_latency": (0.0, 1e-4)}
    bounds = {**default, **(bounds or {})}
    measured = np.array([c.measured for c in cases_])
    by_overlap = {}
    for overlap in overlaps:
        en, plain0, iter0, unit = _linear_parts(cases_, overlap, fixed, free)
        best, sse = _search(en, plain0, iter0, unit, free, measured, bounds)
        knobs = {"overlap": overlap, **fixed, **{n: float(v) for n, v in zip(free, best, strict=True)}}
        by_overlap[overlap] = {"knobs": knobs, "rms_log": math.sqrt(sse / len(cases_))}
    overlap = min(by_overlap, key=lambda o: by_overlap[o]["rms_log"])
    knobs = by_overlap[overlap]["knobs"]
    return Fit(knobs, free, by_overlap[overlap]["rms_log"], tuple(cases_), tuple(predict(cases_, **knobs)), by_overlap)
