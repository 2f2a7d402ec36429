"""What holds on any machine that is not broken: a timer that agrees with itself (:func:`timer_agrees`), and no
pass measured ``LOAD`` times faster than one doing ``WORK_RATIO`` times less work (:func:`more_work_is_slower`).
Both raise :class:`~specnotes.measure.checks.verdicts.Broken`, and a chapter's cell fails with it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from specnotes import validate
from specnotes.measure.checks.inputs import _positive
from specnotes.measure.checks.tolerances import LOAD, WORK_RATIO
from specnotes.measure.checks.verdicts import Broken, Verdict


def timer_agrees(label: str, samples: Sequence[float], median: float | None = None, q1: float | None = None,
                 q3: float | None = None) -> None:
    """Raise :class:`Broken` unless every sample is a finite positive time and the summaries the timer
    reported agree with them: the fastest sample at most the first quartile, the quartiles around the
    median, the median within the samples. ``None`` summaries (a record that did not keep them) pass."""
    values = list(samples)
    for i, s in enumerate(values):
        if not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise Broken(f"{label}: sample {i} is {s!r}, not a positive time: the timer is broken")
    given = {"median": median, "q1": q1, "q3": q3}
    for name, value in given.items():
        if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0):
            raise Broken(f"{label}: its {name} is {value!r}, not a positive time: the timer is broken")
    if not values and median is None:
        raise Broken(f"{label}: no samples and no median: nothing was timed")
    tol = 1e-9
    order = [v for v in (min(values) if values else None, q1, median, q3) if v is not None]
    if any(a > b * (1 + tol) for a, b in zip(order, order[1:], strict=False)):
        raise Broken(f"{label}: fastest {min(values) if values else None}, q1 {q1}, median {median}, q3 {q3} are "
                     f"out of order: the timer disagrees with itself")
    if values and median is not None and median > max(values) * (1 + tol):
        raise Broken(f"{label}: median {median} above every sample (slowest {max(values)}): the timer disagrees "
                     f"with itself")


def more_work_is_slower(labels: Sequence, measured: Sequence[float], modelled: Sequence[float],
                        work: Sequence[tuple[float, float]], *, ratio: float = WORK_RATIO,
                        load: float = LOAD, common_bytes: bool = False) -> Verdict:
    """Raise :class:`Broken` if a pass that does ``ratio`` times the work of another, by every measure,
    measured ``load`` times faster than it or more. By every measure: at least ``ratio`` times its FLOPs and
    its bytes (``work``: (FLOPs, bytes) of each pass, counted by the cost model), and at least ``ratio``
    times its modelled time, floors included (``modelled``), so that no roof measured low, no fixed cost
    per pass, no library path for few rows and no cache makes it cheaper on a working machine.

    Why ``load`` and not the 10% noise of two quiet samples: on a shared 2-core machine another process
    can stall one pass for longer than its whole sampling window. Chapter 4 on an Ice Lake share with a
    load average of 6 measured a draft step at 100 ms at B = 2 and 18 ms at B = 1: 5.4× from load alone.
    More work measured ``load`` (8) times faster than less is ``ratio`` × ``load`` = 32 times off what the
    model says, which no load explains. Closer pairs are not compared. Returns the verdict to print.

    ``common_bytes``: every pass reads one common weight (Chapter 1's one-weight GEMM sweep), so their bytes
    differ only by the activations (about 1.08× from 1 to 128 rows of a 2048-wide GEMM) and no pair is ever
    ``ratio`` times apart in them. Such a pass reads at least the other's bytes whatever its rows; the pairs
    are then compared on FLOPs and modelled time alone."""
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    if not len(measured) == len(modelled) == len(work):
        raise validate.BadArgument(f"measured, modelled and work have {len(measured)}, {len(modelled)} and "
                                   f"{len(work)} values")
    flops = [validate.number(f"work[{i}] FLOPs", w[0], low=0) for i, w in enumerate(work)]
    nbytes = [validate.number(f"work[{i}] bytes", w[1], low=0, low_open=True) for i, w in enumerate(work)]
    load = validate.number("load", load, low=1)
    labels = list(labels) or list(range(len(measured)))
    claim = f"no pass ran {load:g}× faster than one doing {ratio:g}× less work"
    need_bytes = 1.0 if common_bytes else ratio  # over one common weight: at least the other's bytes
    pairs = [(i, j) for i in range(len(measured)) for j in range(len(measured))
             if modelled[j] >= ratio * modelled[i] and flops[j] >= ratio * flops[i]
             and nbytes[j] >= need_bytes * nbytes[i]]
    if not pairs:
        measures = ("FLOPs and modelled time of another (the weight read is common to all)" if common_bytes else
                    "FLOPs, bytes and modelled time of another")
        return Verdict(claim, True, False, f"No pass does {ratio:g}× the {measures}: nothing to compare.",
                       {"pairs": 0})
    i, j = min(pairs, key=lambda p: measured[p[1]] / measured[p[0]])
    seen = measured[j] / measured[i]
    numbers = {"pairs": len(pairs), "least measured ratio": seen, "more": labels[j], "less": labels[i],
               "model ratio": modelled[j] / modelled[i]}
    if seen <= 1 / load:
        raise Broken(f"{labels[j]} ran {1 / seen:.2f}× faster than {labels[i]}, which does at least {ratio:g}× less "
                     f"work (modelled time {modelled[j] / modelled[i]:.1f}× less): no load explains that; the timer "
                     f"or the pass is broken ({numbers})")
    return Verdict(claim, True, True, f"Of {len(pairs)} such pairs the closest was {labels[j]}, which took "
                   f"{seen:.2f}× {labels[i]} (the model: {modelled[j] / modelled[i]:.1f}×).", numbers)
