"""Chapter 3's wall clock: what sets the measured draft cost c (:func:`describe_overhead_c`), and whether a
prediction of the wall-clock speedup agrees with the one measured (:func:`wall_clock_agrees`) and why not
(:func:`describe_wall_clock`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from specnotes import validate
from specnotes.measure.checks.inputs import _batches, _positive
from specnotes.measure.checks.tolerances import NOISE
from specnotes.measure.checks.verdicts import Verdict


def describe_overhead_c(measured_c: float, param_ratio: float, *, overhead: float = 2.0, noise: float = NOISE) -> str:
    """Chapter 3's sentence on the measured draft cost c (one draft step over one target step, fastest samples)
    beside the ratio of parameter counts, the c that reading weights alone would give. The words claim shares
    of c: "overhead, not the bytes, sets c" that the bytes explain at most half of it (c at least ``overhead``
    = 2 times the ratio); "the bytes set most of c" that they explain more than half, the overhead adding
    over ``noise``; "equal within the noise" that c is within ``noise`` of the ratio either way."""
    measured_c = validate.number("measured_c", measured_c, low=0, low_open=True)
    param_ratio = validate.number("param_ratio", param_ratio, low=0, low_open=True)
    numbers = f"c = {measured_c:.2f}, against the parameter ratio {param_ratio:.3f}"
    if measured_c >= overhead * param_ratio:
        return (f"So {numbers}: per-pass overhead, not the bytes, sets c ({measured_c / param_ratio:.1f}× what "
                "reading the weights would give). With c this large, Leviathan's formula caps the gain well below "
                "E[N],")
    if measured_c > param_ratio * (1 + noise):
        extra = measured_c / param_ratio - 1
        return (f"So {numbers}: the bytes set most of c and per-pass overhead adds {extra:.0%} to it. Even so, "
                "Leviathan's formula caps the gain below E[N],")
    if measured_c >= param_ratio / (1 + noise):
        return (f"So {numbers}, equal within the {noise:.0%} noise: on this device both passes cost what their "
                "weights cost to read. Leviathan's formula still caps the gain below E[N],")
    return (f"So {numbers}: the draft ran faster than its share of the bytes, its weights staying in a cache "
            "between passes. Leviathan's formula still caps the gain below E[N],")


def wall_clock_agrees(name: str, ks: Sequence[int], median: Sequence[float], low: Sequence[float],
                      high: Sequence[float], predicted: Sequence[float], *, noise: float = NOISE) -> Verdict:
    """Whether a prediction of the wall-clock speedup (``predicted`` at each k: from the pass times, or
    Leviathan's formula) agrees with the speedup measured over paired runs (``median`` and its ``low``-``high``
    range): it does where the prediction lies in the measured range widened by ``noise`` either side. Chapter 3's
    wall clock adds what no prediction sees (the loop around the passes), so the sentence says which way the
    prediction missed, and by how much, where it did."""
    ks = _batches(ks, ("median", median), ("low", low), ("high", high), ("predicted", predicted))
    median, low, high, predicted = (_positive(n, v) for n, v in
                                    (("median", median), ("low", low), ("high", high), ("predicted", predicted)))
    claim = f"{name} predict the wall-clock speedup"
    off = {k: (p / (h * (1 + noise)) if p > h * (1 + noise) else p * (1 + noise) / lo if p < lo / (1 + noise) else 1.0)
           for k, p, lo, h in zip(ks, predicted, low, high, strict=True)}
    numbers = {"worst k": max(ks, key=lambda k: abs(math.log(off[k]))), "noise": noise}
    if all(v == 1.0 for v in off.values()):
        return Verdict(claim, True, True, f"{name[0].upper()}{name[1:]} predicted the wall-clock speedup at every k, "
                       f"within the measured range and the {noise:.0%} noise.", numbers)
    k = numbers["worst k"]
    i = ks.index(k)
    missed = [kk for kk in ks if off[kk] != 1.0]
    which = "above" if off[k] > 1 else "below"
    return Verdict(claim, False, True, f"{name[0].upper()}{name[1:]} predicted {predicted[i]:.2f}× at k = {k}, "
                   f"{which} the {low[i]:.2f}–{high[i]:.2f}× the wall clock measured (median {median[i]:.2f}×), "
                   f"beyond the {noise:.0%} noise. It missed so at {len(missed)} of the {len(ks)} values of k", numbers)


def describe_wall_clock(verdict: Verdict, ks: Sequence[int], predicted: Sequence[float], median: Sequence[float],
                        unmodelled_ms: Sequence[float], plain_extra_ms: float) -> str:
    """:func:`wall_clock_agrees`'s sentence and, where the prediction missed, the measured cost that explains
    it: the loop around the passes per iteration (``unmodelled_ms`` at each k) when the prediction was too
    high, plain decoding's own loop per token beyond its pass (``plain_extra_ms``) when it was too low."""
    if verdict.ok:
        return verdict.sentence
    k = verdict.numbers["worst k"]
    i = list(ks).index(k)
    if predicted[i] > median[i]:
        return (f"{verdict.sentence}. The loop around the passes took {unmodelled_ms[i]:.2f} ms per iteration at "
                f"k = {k}: sampling, cache rollback and bookkeeping, which no prediction from pass times sees.")
    return (f"{verdict.sentence}. Plain decoding paid {plain_extra_ms:.2f} ms per token for its own loop beyond its "
            "pass. That made the baseline slower than its passes say, and the measured speedup larger.")
