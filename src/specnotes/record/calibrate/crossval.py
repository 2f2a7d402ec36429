"""Cross-validation (``cross_validate``): leave one series out, and leave one source out; per variant and regime
(``REGIMES``) the median |log(predicted/measured)|, the signed bias, the verdict agreement on S > 1 and the worst
point (``CrossValidation``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from specnotes import validate
from specnotes.record.calibrate.admission import Record, record
from specnotes.record.calibrate.engine_fit import SHRINK, _x, fit_engines, fit_predict
from specnotes.record.calibrate.features import Features
from specnotes.record.calibrate.variants import VARIANTS, priceable

# How a scored point's level is set: "anchored" (its series publishes no acceptance, so the level comes from
# the series' own measured S at its smallest batch) or "acceptance only" (predicted from the published
# acceptance alone, as the advisor predicts); "all" mixes them.
REGIMES = ("acceptance only", "anchored", "all")


@dataclass(frozen=True)
class CrossValidation:
    """Held-out predictions of every variant under each scheme ("series": leave one series out; "source":
    leave one source out): ``predicted[scheme][variant]`` per case of ``record`` (NaN for the anchors, which
    are not predicted), ``how[scheme][variant]`` which knobs each prediction used, and ``rows()``."""

    record: Record
    predicted: dict
    how: dict
    in_sample: dict
    ratio: dict = dataclasses.field(default_factory=dict)  # [scheme][variant]: held-out T_plain / T_iter per case

    @property
    def measured(self) -> np.ndarray:
        return np.array([c.measured for c in self.record.cases])

    def errors(self, scheme: str, variant: str, mask=None) -> np.ndarray:
        """log(predicted / measured) of the scored points (and ``mask``)."""
        keep = self.record.scored if mask is None else self.record.scored & mask
        return np.log(self.predicted[scheme][variant][keep] / self.measured[keep])

    def summary(self, scheme: str, variant: str, mask=None, regime: str = "all") -> dict:
        """One row: the held-out error of ``variant`` over the scored points of ``regime`` (and ``mask``)."""
        keep = self.record.scored & regime_mask(self.record, regime)
        keep = keep if mask is None else keep & mask
        pred, meas = self.predicted[scheme][variant][keep], self.measured[keep]
        err = np.log(pred / meas)
        worst = int(np.argmax(np.abs(err)))
        case = [c for c, k in zip(self.record.cases, keep, strict=True) if k][worst]
        return {"variant": variant, "scheme": scheme, "held out": held_out_label(scheme, variant), "regime": regime,
                "points": int(keep.sum()), "median |log ratio|": float(np.median(np.abs(err))),
                "bias": float(err.mean()), "verdict agreement": float(np.mean((pred > 1) == (meas > 1))),
                "worst": f"{case.source}/{case.series} {case.label}: {pred[worst]:.2f} vs {meas[worst]:.2f}",
                "worst |log ratio|": float(abs(err[worst]))}

    def rows(self, schemes=("source", "series"), regimes=REGIMES) -> list[dict]:
        """One row per scheme, variant and regime (``REGIMES``: the two regimes apart, then their mix)."""
        return [self.summary(s, v, regime=r) for s in schemes for v in self.predicted[s] for r in regimes]

    def best(self, scheme: str = "source") -> str:
        """The variant ``cost`` can price (``priceable``) with the smallest median |log ratio| under ``scheme``
        (ties: the first listed). The candidate batch terms are judged by ``term_search`` instead."""
        return min((v for v in self.predicted[scheme] if priceable(v)),
                   key=lambda v: self.summary(scheme, v)["median |log ratio|"])


def regime_mask(rec: Record, regime: str) -> np.ndarray:
    """Which cases of ``rec`` belong to ``regime`` (``REGIMES``)."""
    validate.choice("regime", regime, REGIMES)
    anchored = np.array([c.anchored for c in rec.cases], bool)
    return {"acceptance only": ~anchored, "anchored": anchored, "all": np.ones(len(anchored), bool)}[regime]


def held_out_label(scheme: str, variant: str) -> str:
    """"one source" / "one series", or "not held out" for a stored variant fitted to a source of the record."""
    validate.choice("scheme", scheme, ("series", "source"))
    if VARIANTS[variant].fitted_on:
        return "not held out"
    return {"series": "one series", "source": "one source"}[scheme]


def _groups(rec: Record, scheme: str) -> np.ndarray:
    validate.choice("scheme", scheme, ("series", "source"))
    return np.array([f"{c.source}/{c.series}" if scheme == "series" else c.source for c in rec.cases])


_CV: dict = {}


def cross_validate(variants: tuple[str, ...] | None = None, schemes: tuple[str, ...] = ("source", "series"),
                   shrink: float = SHRINK, rec: Record | None = None, only=None) -> CrossValidation:
    """Leave one series out and leave one source out, over the whole record (or ``rec``), for every variant
    (default ``VARIANTS``): each held-out point predicted by the variant fitted to the rest. An engine the
    rest has not seen gets its family's knobs, or the pooled ones (``EngineFit.knobs`` says which). The
    first calibration is not refitted: it is judged as it was stored (its own four points included).
    Deterministic; the record's result is kept (about a minute on one core the first time). ``only``: the sources
    (or series) to hold out, each predicted by the fit without it; every other point is left unpredicted (NaN), so
    that a chapter that needs a few sources' held-out predictions (Chapter 10's MoE series) fits only those folds."""
    only = None if only is None else tuple(only)
    key = (variants, tuple(schemes), shrink, only)
    if rec is None and key in _CV:
        return _CV[key]
    result = _cross_validate(variants, tuple(schemes), shrink, rec or record(), only)
    if rec is None:
        _CV[key] = result
    return result


def _cross_validate(variants, schemes, shrink, rec: Record, only=None) -> CrossValidation:
    variants = tuple(VARIANTS) if variants is None else tuple(validate.choice("variant", v, VARIANTS)
                                                                for v in variants)
    feats = {h: Features(rec.cases, h) for h in {VARIANTS[v].heads for v in variants}}
    predicted, how, in_sample, ratio = {}, {}, {}, {}
    for v in variants:
        f = feats[VARIANTS[v].heads]
        if only is None:
            full = fit_engines(v, features=f, shrink=shrink)
            in_sample[v] = fit_predict(full, f)
    for scheme in schemes:
        validate.choice("scheme", scheme, ("series", "source"))
        groups = _groups(rec, scheme)
        predicted[scheme], how[scheme], ratio[scheme] = {}, {}, {}
        for v in variants:
            f = feats[VARIANTS[v].heads]
            out, said = np.full(rec_len := len(rec.cases), np.nan), [""] * rec_len
            r = np.full(rec_len, np.nan)
            for g in dict.fromkeys(groups) if only is None else [g for g in dict.fromkeys(groups) if g in only]:
                test = np.flatnonzero(groups == g)
                fold = fit_engines(v, features=f, train=np.flatnonzero(groups != g), shrink=shrink)
                out[test] = fit_predict(fold, f, test)
                r[test] = f.ratio(fold.knee, _x(fold, f.cases), fold.tile)[test]
                for i in test:
                    said[i] = fold.knobs(rec.cases[i].key)[1]
            out[~rec.scored] = np.nan
            predicted[scheme][v], how[scheme][v], ratio[scheme][v] = out, said, r
    return CrossValidation(rec, predicted, how, in_sample, ratio)
