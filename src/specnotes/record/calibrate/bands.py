"""The advisor's bands (issue 34): ``batch_band``, the held-out errors as a function of the batch (``Band``,
``BAND_BUILDS``), judged per batch bucket on sources it was not built from (``held_out_band``, ``band_table``,
``verdict_of``) and per family (``FAMILIES``, ``family_table``); ``anchor_band``, predictions of one batch of a
series from another (``anchor_pairs``, ``anchor_table``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from specnotes import validate
from specnotes.record.calibrate.admission import Record
from specnotes.record.calibrate.crossval import REGIMES, CrossValidation, cross_validate, regime_mask
from specnotes.record.calibrate.variants import CHOSEN

ADVISOR_REGIME = "acceptance only"  # the advisor predicts from --alpha / --mean-accepted unless it is anchored
NOMINAL = 0.90  # the central share of held-out errors a band spans
BUCKETS = ((1, 1), (2, 8), (9, 64), (65, None))  # the batch buckets coverage is reported in (None: no upper end)
DISTANCES = ((1, 2), (2, 8), (8, None))  # how far, as a factor on B either way, an anchored prediction reaches


def min_points(nominal: float = NOMINAL) -> int:
    """The fewest errors whose quantiles may set a band: with n errors the tail quantile (1 − nominal)/2 is an
    order statistic inside the sample only when n·tail ≥ 1 (20 points for 90%, 40 for 95%); below that it is
    the most extreme error, or past it."""
    tail = (1 - validate.number("nominal", nominal, low=0, high=1, low_open=True, high_open=True)) / 2
    return math.ceil(round(1 / tail, 9))


def bucket_label(lo: int, hi: int | None) -> str:
    """"B = 1", "B = 2–8", "B > 64": how a batch bucket is named."""
    return f"B = {lo}" if lo == hi else f"B > {lo - 1}" if hi is None else f"B = {lo}–{hi}"


def in_bucket(batch, lo: int, hi: int | None) -> np.ndarray:
    batch = np.asarray(batch)
    return (batch >= lo) & (batch <= (np.inf if hi is None else hi))


@dataclass(frozen=True)
class Band:
    """Held-out errors e = log(predicted / measured), each at a coordinate ``at`` (log2 of its batch; for an
    anchored prediction, log2 of its batch over the measured one), and the source each came from.

    ``quantiles(x)``: (low, centre, high) in log error. The band spans the central ``nominal`` share of the
    ``points`` errors nearest to x (every error tied with the last one included; all of them when there are
    fewer). With ``between``, it spans at least the sources' spread too: each source's typical error (its
    median, its offset) differs from the others', and a new deployment is a new source, so the band reaches from
    the lowest offset plus the low tail of every error's spread about its own source's offset, to the highest
    offset plus the high tail (``BAND_BUILDS``). That spread is pooled over every error, not the nearest: the
    nearest come from two or three sources with a few points each, and their tails would step with B.
    ``centre``: "model", the model's own S (an error of 0, moved to the nearest edge if the band excludes it),
    or "nearest", the nearest errors' median.
    ``factors(x)``: (low, centre, high) multipliers on the model's S, exp(−high), exp(−centre), exp(−low): the
    measured S lay within model·low to model·high for that share of the held-out points."""

    at: tuple[float, ...]
    errors: tuple[float, ...]
    sources: tuple[str, ...]
    nominal: float = NOMINAL
    points: int = 20
    between: bool = False
    centre: str = "nearest"

    def __post_init__(self):
        if not len(self.at) == len(self.errors) == len(self.sources) or not self.errors:
            raise validate.BadArgument("a band needs one coordinate and one source per error, and at least one error")
        validate.choice("centre", self.centre, ("model", "nearest"))

    def nearest(self, x: float) -> np.ndarray:
        """Indices of the ``points`` errors nearest to ``x`` (ties at the cut included)."""
        d = np.abs(np.asarray(self.at) - float(x))
        if len(d) <= self.points:
            return np.arange(len(d))
        cut = np.sort(d)[self.points - 1]
        return np.flatnonzero(d <= cut + 1e-9)

    def offsets(self) -> dict:
        """{source: the median of its errors}: where each source's errors sit."""
        e, s = np.asarray(self.errors), np.asarray(self.sources)
        return {str(src): float(np.median(e[s == src])) for src in dict.fromkeys(self.sources)}

    def quantiles(self, x: float) -> tuple[float, float, float]:
        near = self.nearest(x)
        e = np.asarray(self.errors)[near]
        tail = (1 - self.nominal) / 2
        low, high = float(np.quantile(e, tail)), float(np.quantile(e, 1 - tail))
        if self.between:
            off = self.offsets()
            within = np.asarray(self.errors) - np.array([off[s] for s in self.sources])
            low = min(low, min(off.values()) + float(np.quantile(within, tail)))
            high = max(high, max(off.values()) + float(np.quantile(within, 1 - tail)))
        mid = float(np.median(e)) if self.centre == "nearest" else 0.0
        return low, min(max(mid, low), high), high

    def factors(self, x: float) -> tuple[float, float, float]:
        low, mid, high = self.quantiles(x)
        return math.exp(-high), math.exp(-mid), math.exp(-low)

    def span(self) -> tuple[float, float]:
        """The coordinates the errors cover: past them the band is the nearest errors' (an extrapolation)."""
        return min(self.at), max(self.at)

    def without(self, source: str) -> Band:
        keep = [i for i, s in enumerate(self.sources) if s != source]
        return replace(self, at=tuple(self.at[i] for i in keep), errors=tuple(self.errors[i] for i in keep),
                       sources=tuple(self.sources[i] for i in keep))

    def to_json(self) -> dict:
        return {"nominal": self.nominal, "points": self.points, "between": self.between, "centre": self.centre,
                "at": [round(x, 4) for x in self.at], "errors": [round(e, 4) for e in self.errors],
                "sources": list(self.sources)}

    @classmethod
    def from_json(cls, doc: dict) -> Band:
        return cls(tuple(doc["at"]), tuple(doc["errors"]), tuple(doc["sources"]), doc["nominal"], doc["points"],
                   doc.get("between", False), doc.get("centre", "nearest"))


# How the advisor's band is built: "sources" (the one it uses) spans the sources' spread as well as the nearest
# errors' and is centred on the model's own S; "nearest" (issue 34's first band) spans the nearest errors only
# and is centred on their median. Both are judged held out by source (``band_table(..., build=...)``).
BAND_BUILDS = {"sources": {"between": True, "centre": "model"}, "nearest": {"between": False, "centre": "nearest"}}
BAND_BUILD = "sources"


def batch_band(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME, nominal: float = NOMINAL,
               mask=None, build: str = BAND_BUILD) -> Band:
    """The band of ``variant`` as a function of the batch: its held-out errors (leaving one source out) over
    the scored points of ``regime`` (and ``mask``), each at log2 of its batch, built as ``build`` says
    (``BAND_BUILDS``)."""
    validate.choice("build", build, BAND_BUILDS)
    keep = cv.record.scored & regime_mask(cv.record, regime) & (True if mask is None else mask)
    cases_ = [c for c, k in zip(cv.record.cases, keep, strict=True) if k]
    err = cv.errors("source", variant, regime_mask(cv.record, regime) & (True if mask is None else mask))
    return Band(tuple(math.log2(c.batch) for c in cases_), tuple(map(float, err)), tuple(c.source for c in cases_),
                nominal, min_points(nominal), **BAND_BUILDS[build])


def anchor_pairs(cv: CrossValidation, variant: str = CHOSEN) -> list[dict]:
    """Every prediction of one point from another point of the same series at another batch (same k, tree,
    context and acceptance), as a reader who measured S at one batch asks about another: S_i = S_a ·
    r_i / r_a, r = T_plain / T_iter from the fit without the source (leaving one source out). One dict per
    ordered pair: source, series, the measured batch ``anchor``, the batch asked ``batch``, the
    ``error`` log(predicted / measured) and ``at`` = log2(batch / anchor)."""
    rec, ratio, meas = cv.record, cv.ratio["source"][variant], cv.measured
    groups: dict = {}
    for i, c in enumerate(rec.cases):
        groups.setdefault((c.source, c.series, c.k, c.widths, c.context, c.alpha, c.tokens), []).append(i)
    out = []
    for members in groups.values():
        for a in members:
            for i in members:
                ca, ci = rec.cases[a], rec.cases[i]
                if ci.batch == ca.batch:
                    continue
                pred = meas[a] * ratio[i] / ratio[a]
                out.append({"source": ci.source, "series": ci.series, "anchor": ca.batch, "batch": ci.batch,
                            "error": math.log(pred / meas[i]), "at": math.log2(ci.batch / ca.batch)})
    return out


def anchor_band(cv: CrossValidation, variant: str = CHOSEN, nominal: float = NOMINAL, pairs=None) -> Band:
    """The band of an anchored prediction as a function of how far it reaches: the errors of ``anchor_pairs``,
    each at log2(batch asked / batch measured) (negative: below the measured batch)."""
    pairs = anchor_pairs(cv, variant) if pairs is None else pairs
    return Band(tuple(p["at"] for p in pairs), tuple(p["error"] for p in pairs), tuple(p["source"] for p in pairs),
                nominal, min_points(nominal))


def verdict_of(low: float, high: float) -> str:
    """What a band on S says: "pays" when its lower edge is above 1, "loses" when its upper edge is below 1,
    else "uncertain" (measure it)."""
    if not low <= high:
        raise validate.BadArgument(f"a band's low edge must not exceed its high edge; got {low:g} > {high:g}")
    return "pays" if low > 1 else "loses" if high < 1 else "uncertain"


def held_out_band(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME,
                  nominal: float = NOMINAL, build: str = BAND_BUILD) -> dict:
    """The band judged on points it was not built from: for each source, the band built from the other sources'
    held-out errors (``batch_band(...).without(source)``), applied to that source's points. Per point of
    ``regime`` (arrays over ``cases``): the model's held-out S, the band's (low, centre, high) S, the
    measured S, whether the band covered it, and the verdict (``verdict_of``) and whether it was right."""
    full = batch_band(cv, variant, regime, nominal, build=build)
    keep = cv.record.scored & regime_mask(cv.record, regime)
    cases_ = [c for c, k in zip(cv.record.cases, keep, strict=True) if k]
    model, meas = cv.predicted["source"][variant][keep], cv.measured[keep]
    low, centre, high = (np.zeros(len(cases_)) for _ in range(3))
    others = {s: full.without(s) for s in dict.fromkeys(c.source for c in cases_)}
    for i, c in enumerate(cases_):
        f = others[c.source].factors(math.log2(c.batch))
        low[i], centre[i], high[i] = (model[i] * x for x in f)
    verdicts = [verdict_of(lo, hi) for lo, hi in zip(low, high, strict=True)]
    decisive = np.array([v != "uncertain" for v in verdicts])
    right = np.array([(v == "pays") == (m > 1) and v != "uncertain" for v, m in zip(verdicts, meas, strict=True)])
    return {"cases": cases_, "batch": np.array([c.batch for c in cases_]), "model": model, "low": low,
            "moe": np.array([c.moe for c in cases_], bool), "load": np.array([c.load for c in cases_]),
            "gpu_assumed": np.array([c.gpu_assumed is not None for c in cases_], bool),
            "centre": centre, "high": high, "measured": meas, "covered": (low <= meas) & (meas <= high),
            "verdict": verdicts, "decisive": decisive, "right": right}


def _score(h: dict, m) -> dict:
    """One row of the band's held-out score over the points ``m`` of ``held_out_band``'s result."""
    n = int(m.sum())
    if not n:
        return {"points": 0}
    model_err, centre_err = np.log(h["model"][m] / h["measured"][m]), np.log(h["centre"][m] / h["measured"][m])
    dec = int(h["decisive"][m].sum())
    return {"points": n, "covered": int(h["covered"][m].sum()), "coverage": float(h["covered"][m].mean()),
            "decisive": dec, "decisive_share": dec / n, "right": int(h["right"][m].sum()),
            "decisive_right": int(h["right"][m].sum()) / dec if dec else None,
            "model_bias": float(model_err.mean()), "model_median": float(np.median(np.abs(model_err))),
            "centre_bias": float(centre_err.mean()), "centre_median": float(np.median(np.abs(centre_err)))}


def band_table(cv: CrossValidation | None = None, variant: str = CHOSEN, regime: str = ADVISOR_REGIME,
               nominal: float = NOMINAL, build: str = BAND_BUILD) -> list[dict]:
    """The band held out by source (``held_out_band``), one row per batch bucket (``BUCKETS``), then B > 1 and
    every point: points, covered, coverage, decisive verdicts and their share, right ones and their share,
    and the held-out bias and median |log ratio| of the model's S and of the band's central estimate."""
    cv = cv or cross_validate()
    h = held_out_band(cv, variant, regime, nominal, build)
    rows = [{"bucket": bucket_label(lo, hi), **_score(h, in_bucket(h["batch"], lo, hi))} for lo, hi in BUCKETS]
    rows.append({"bucket": "B > 1", **_score(h, h["batch"] > 1)})
    rows.append({"bucket": "all", **_score(h, h["batch"] >= 1)})
    return rows


# The families of the record whose held-out error is reported apart: dense and MoE targets, a batch the source
# fixed and the requests in flight of a closed loop (``LOADS``), a GPU named without its form factor.
FAMILIES = {
    "dense": lambda c: not c.moe,
    "MoE": lambda c: c.moe,
    "batch": lambda c: c.load == "batch",
    "concurrency": lambda c: c.load == "concurrency",
    "GPU form factor assumed": lambda c: c.gpu_assumed is not None,
}


def family_mask(rec: Record, family: str) -> np.ndarray:
    """Which cases of ``rec`` belong to ``family`` (``FAMILIES``)."""
    validate.choice("family", family, FAMILIES)
    return np.array([bool(FAMILIES[family](c)) for c in rec.cases], bool)


def family_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> list[dict]:
    """Per family (``FAMILIES``), leaving one source out: the points and sources of the family and of each regime
    (a regime's ``sources`` count only the sources with a scored point in it), the held-out
    median |log ratio| and bias of each regime and of both, the verdict agreement, and over its acceptance-only
    points the band's coverage, decisive share and right verdicts (``held_out_band``). A family with no point
    has only its name and zeros: the record summary (``skip_summary``) says what keeps such points out."""
    cv = cv or cross_validate()
    h = held_out_band(cv, variant)
    in_band = {"dense": ~h["moe"], "MoE": h["moe"], "batch": h["load"] == "batch",
               "concurrency": h["load"] == "concurrency", "GPU form factor assumed": h["gpu_assumed"]}
    rows = []
    for fam in FAMILIES:
        m = family_mask(cv.record, fam)
        row = {"family": fam, "points": int((m & cv.record.scored).sum()),
               "sources": len({c.source for c, k in zip(cv.record.cases, m, strict=True) if k})}
        for regime in REGIMES:
            keep = m & cv.record.scored & regime_mask(cv.record, regime)
            if not keep.any():
                row[regime] = None
                continue
            s = cv.summary("source", variant, m, regime)
            row[regime] = {"points": s["points"], "median": s["median |log ratio|"], "bias": s["bias"],
                           "verdict": s["verdict agreement"],
                           "sources": len({c.source for c, k in zip(cv.record.cases, keep, strict=True) if k})}
        band = _score(h, in_band[fam])
        row["band"] = band if band["points"] else None
        rows.append(row)
    return rows


def anchor_table(cv: CrossValidation | None = None, variant: str = CHOSEN, nominal: float = NOMINAL) -> list[dict]:
    """Anchored predictions held out by source, by how far they reach (``DISTANCES``, the factor between the
    batch asked and the batch measured, either way), and up to 8× above the measured batch: pairs, median
    |log ratio|, bias, and how often the anchored band built without the source covered them."""
    cv = cv or cross_validate()
    pairs = anchor_pairs(cv, variant)
    full = anchor_band(cv, variant, nominal, pairs)
    covered = []
    by_source = {s: full.without(s) for s in dict.fromkeys(full.sources)}
    for p in pairs:
        f = by_source[p["source"]].quantiles(p["at"])
        covered.append(f[0] <= p["error"] <= f[2])
    reach = np.array([abs(p["at"]) for p in pairs])
    err, covered = np.array([p["error"] for p in pairs]), np.array(covered)

    def row(label, m):
        n = int(m.sum())
        return {"distance": label, "pairs": n, "median": float(np.median(np.abs(err[m]))) if n else None,
                "bias": float(err[m].mean()) if n else None, "coverage": float(covered[m].mean()) if n else None}

    rows = [row(f"{lo}–{hi}×" if hi else f"> {lo}×", (reach > math.log2(lo) + 1e-9)
                & (reach <= (math.log2(hi) if hi else np.inf) + 1e-9)) for lo, hi in DISTANCES]
    up = np.array([p["at"] for p in pairs])
    rows.append(row("up to 8× above", (up > 0) & (up <= 3 + 1e-9)))
    return rows


def bias_by_source(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME) -> dict:
    """{source: (e^bias, points)} of ``variant``'s held-out predictions (leaving one source out) over each
    source's scored points of ``regime``: how many times too high the model predicted S there, on average."""
    sources = np.array([c.source for c in cv.record.cases])
    rows = {str(s): cv.summary("source", variant, sources == s, regime)
            for s in dict.fromkeys(sources[cv.record.scored & regime_mask(cv.record, regime)])}
    return {s: (float(np.exp(row["bias"])), row["points"]) for s, row in rows.items()}
