"""The joint fit (``fit_engines``): a variant's engine knobs fitted by least squares on log S over every series of
an engine at once, one set of knobs per (engine, version, GPU), shrunk toward the engine family's and then toward
the pooled knobs of every engine (``SHRINK``); ``EngineFit`` holds them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specnotes.record.calibrate.admission import record
from specnotes.record.calibrate.features import Features
from specnotes.record.calibrate.variants import LINEAR, VARIANTS, Variant, _knee_of, _knobs_of

ALLREDUCE_LATENCY = 10e-6  # vLLM's custom all-reduce, small messages, H100 (interconnect.json)


SHRINK = 0.1  # weight of the pull toward the family's and the pooled knobs (log-knob units)
LOG_RANGE = (-30.0, 4.6)  # a knob's log is kept in here: under 100 (seconds, or a roof's time over its own)


_INIT = {"overhead": 1e-3, "draft_overhead": 5e-4, "layer_overhead": 3e-5, "token_overhead": 2e-6,
         "seq_overhead": 5e-6, "spec_token_overhead": 2e-6, "moe_layer_overhead": 2e-5, "expert_overhead": 2e-7,
         "compute_slowdown": 0.5, "expert_slowdown": 0.5, "attention_slowdown": 0.5, "link_slowdown": 0.5,
         "moe_token_overhead": 1e-7}


@dataclass(frozen=True)
class EngineFit:
    """A variant fitted to a set of cases: log-knobs pooled over every engine, and the deviations of each
    engine family and each (engine, version, GPU) from them. ``knobs(key)`` gives the ``cost`` keyword
    arguments for an engine, with how they were found (its own fit, its family's, or the pooled ones)."""

    variant: Variant
    knee: float
    pooled: dict
    families: dict
    keys: dict
    sse: float
    n: int
    tile: int | None = None  # the GEMM row tile the fit chose (``Variant.tiles``), None: exact rows

    def log_knobs(self, key) -> tuple[dict, str]:
        engine = key[0]
        if key in self.keys:
            how = "fitted to this engine on this GPU"
        elif engine in self.families:
            how = f"{engine} fitted on other versions or GPUs"
        else:
            how = "no fit for this engine: pooled over every engine"
        fam, own = self.families.get(engine, {}), self.keys.get(key, {})
        return {j: self.pooled[j] + fam.get(j, 0.0) + own.get(j, 0.0) for j in self.pooled}, how

    def knobs(self, key) -> tuple[dict, str]:
        if self.variant.stored is not None:
            return dict(self.variant.stored), "as stored"
        if not self.variant.free:
            return {}, "no engine knobs"
        logs, how = self.log_knobs(key)
        x = {j: math.exp(min(max(v, LOG_RANGE[0]), LOG_RANGE[1])) for j, v in logs.items()}
        if self.variant.free:
            x["allreduce_latency"] = ALLREDUCE_LATENCY
        knobs = _knobs_of(self.variant, self.knee, x)
        if self.tile:
            knobs["gemm_tile"] = self.tile
        return knobs, how


def _x(fit_: EngineFit, cases_) -> np.ndarray:
    """[cases, LINEAR] knob values for each case's engine."""
    rows = []
    for c in cases_:
        knobs = fit_.knobs(c.key)[0]
        rows.append([knobs.get(j, 0.0) for j in LINEAR])
    return np.array(rows)


def _lm(residual, theta, iterations: int = 100):
    """Levenberg-Marquardt on residual(θ) -> (r, J); deterministic."""
    r, jac = residual(theta)
    f, lam = r @ r, 1e-3
    for _ in range(iterations):
        g, h = jac.T @ r, jac.T @ jac
        for _ in range(30):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            r2, jac2 = residual(theta + step)
            f2 = r2 @ r2
            if np.isfinite(f2) and f2 <= f:
                break
            lam *= 4
        else:
            return theta, f
        done = f - f2 <= 1e-7 * (1 + f)
        theta, r, jac, f, lam = theta + step, r2, jac2, f2, max(lam / 4, 1e-12)
        if done:
            break
    return theta, f


def fit_engines(variant: str | Variant, cases_=None, train=None, features: Features | None = None,
                shrink: float = SHRINK) -> EngineFit:
    """Fit a variant's engine knobs to ``cases_`` (default: the whole record; ``train``: the indices used):
    least squares on log S over the scored points, every series of an engine at once, plus
    ``shrink``·(deviation)² for each family's and each engine's log-knobs away from the pooled ones."""
    v = VARIANTS[variant] if isinstance(variant, str) else variant
    if features is None:
        rec = record() if cases_ is None else None
        features = Features(rec.cases if rec else cases_, v.heads)
    cs = features.cases
    train = np.arange(features.n) if train is None else np.asarray(train)
    scored = train[np.array([not (cs[i].anchored and features.anchor[i] == i) for i in train], bool)]
    if v.stored is not None or not v.free:
        knobs = dict(v.stored or {})
        return EngineFit(v, 1.0 if knobs.get("overlap") == "none" else math.inf, {}, {}, {}, 0.0, len(scored))
    held = fit_engines(v.held, features=features, train=train, shrink=shrink) if v.held else None
    keys = sorted({cs[i].key for i in train}, key=str)
    families = sorted({k[0] for k in keys})
    free = [j for j in v.free if not held or j not in held.variant.free]
    m = len(free)
    layout = [("pooled", None)] + [("family", f) for f in families] + [("key", k) for k in keys]
    member = np.zeros((features.n, len(layout)))
    for col, (kind, what) in enumerate(layout):
        for i, c in enumerate(cs):
            member[i, col] = (kind == "pooled" or (kind == "family" and c.engine == what)
                              or (kind == "key" and c.key == what))
    cols = [LINEAR.index(j) for j in free]
    penalty = np.sqrt(shrink) * np.repeat([0.0] + [1.0] * (len(layout) - 1), m)
    measured = np.log(features.measured[scored])
    member_scored = member[scored][:, :, None]

    fixed = _x(held, cs) if held else np.zeros((features.n, len(LINEAR)))  # the held variant's knobs

    def unpack(theta):
        logs = member @ theta.reshape(len(layout), m)  # [cases, free]
        x = fixed.copy()
        x[:, cols] = np.exp(np.clip(logs, *LOG_RANGE))
        x[:, LINEAR.index("allreduce_latency")] = ALLREDUCE_LATENCY
        return x

    best = None
    knees = [(held.knee, held.tile)] if held else [(p, t) for p in _knee_of(v) for t in (v.tiles or (None,))]
    for knee, tile in knees:
        def residual(theta, knee=knee, tile=tile):
            x = unpack(theta)
            r = np.log(features.predict(knee, x, tile)[scored]) - measured
            g = features.gradient(knee, x, tile)[scored][:, cols] * x[scored][:, cols]  # d/d log x
            jac = (member_scored * g[:, None, :]).reshape(len(scored), -1)
            return np.concatenate([r, penalty * theta]), np.vstack([jac, np.diag(penalty)])

        theta0 = np.zeros(len(layout) * m)
        for j, name in enumerate(free):
            theta0[j] = math.log(_INIT[name])
        if best is not None:  # the next knee starts where the last one ended
            theta0 = best[1].copy()
        theta, sse = _lm(residual, theta0)
        if best is None or sse < best[2]:
            best = (knee, theta, sse, tile)
    knee, theta, sse, tile = best
    t = theta.reshape(len(layout), m)
    pick = lambda row: {name: float(t[row, j]) for j, name in enumerate(free)}
    fit_ = EngineFit(v, knee, pick(0), {f: pick(1 + i) for i, f in enumerate(families)},
                     {k: pick(1 + len(families) + i) for i, k in enumerate(keys)}, float(sse), len(scored), tile)
    return _merged(held, fit_) if held else fit_


def _merged(held: EngineFit, extra: EngineFit) -> EngineFit:
    """One fit of both: the held variant's log-knobs and the ones fitted after them, per pool, family and key."""
    both = lambda a, b: {**a, **b}
    keys = set(held.keys) | set(extra.keys)
    families = set(held.families) | set(extra.families)
    return EngineFit(extra.variant, held.knee, both(held.pooled, extra.pooled),
                     {f: both(held.families.get(f, {}), extra.families.get(f, {})) for f in families},
                     {k: both(held.keys.get(k, {}), extra.keys.get(k, {})) for k in keys}, extra.sse, extra.n,
                     held.tile)


def fit_predict(fit_: EngineFit, features: Features, idx=None) -> np.ndarray:
    """The fitted variant's S for the cases ``idx`` of ``features`` (every case by default)."""
    s = features.predict(fit_.knee, _x(fit_, features.cases), fit_.tile)
    return s if idx is None else s[idx]
