"""The sentences of Chapters 1, 2 and 4 on their sweeps, chosen by the numbers measured: where speculation paid
and stopped (:class:`Crossing`), why measured and modelled S part, what the draft and the verify pass cost, up to
which batch verifying is free, where GEMMs of few rows ran slow and how well the per-M efficiency predicts them,
the amortization of one weight read, the knee, and whether a weight fits in the cache."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from specnotes import validate
from specnotes.measure.checks.inputs import _batches, _positive
from specnotes.measure.checks.tolerances import NOISE, THRESHOLD
from specnotes.measure.checks.verdicts import Verdict
from specnotes.measure.checks.wording import moved_by


def _b_list(batches: Sequence[int]) -> str:
    return f"B = {batches[0]}" if len(batches) == 1 else f"B = {batches[0]} to {batches[-1]}"


@dataclass(frozen=True)
class Crossing:
    """Where speculation paid in a measured sweep, with a margin for noise: ``paid``, the batches with
    S > 1 + noise; ``even``, the batches after the last paid one with S within noise of 1 (about
    break-even: the sweep cannot tell which side of 1 they are on); ``stopped_at``, the last batch, once
    the sweep saw S below 1 - noise there (``stop == "done"``)."""

    batches: list[int]
    speedups: list[float]
    stop: str
    paid: list[int]
    stopped_at: int | None
    model_bstar: int | None
    sentence: str
    even: list[int] = field(default_factory=list)
    noise: float = NOISE

    @property
    def measured_bstar(self) -> int | None:
        """The first batch measured after the last one that paid beyond the noise (the first batch if
        none did; None if the sweep ended before S fell clearly below 1): B* lies between the batch
        before it and it, or is it."""
        if self.stop != "done":
            return None
        later = [b for b in self.batches if not self.paid or b > self.paid[-1]]
        return later[0]

    @property
    def marks(self) -> list[tuple[str, int]]:
        """The measured side of an S(B) plot's vertical marks, as ``(label, batch)`` for
        ``plots.speedup_vs_batch``: the first batch about break-even, and where S was clearly below 1."""
        marks = [(f"measured: S within {self.noise:.0%} of 1 at B", self.even[0])] if self.even else []
        if self.stopped_at is not None:
            marks.append((f"measured: S below {1 - self.noise:.2f} at B", self.stopped_at))
        return marks


def describe_crossing(batches: Sequence[int], speedups: Sequence[float], stop: str, model_bstar: int | None, *,
                      ridge: float, critical_batch: float, k: int, noise: float = NOISE) -> Crossing:
    """Where speculation paid on this device and where it stopped, or why it never did, in numbers, with
    a margin of ``noise`` either side of S = 1: a sweep that ended with ``stop == "done"`` saw S below
    1 - noise at its last batch. ``model_bstar``: the model's B* on this device's roofs (None: it still
    pays at the model's limit); ``ridge`` (FLOP/byte) and ``critical_batch`` (tokens per weight read) of
    this device's roofs."""
    batches = _batches(batches, ("speedups", speedups))
    speedups = _positive("speedups", speedups)
    stop = validate.choice("stop", stop, ("done", "budget", "limit"))
    noise = validate.number("noise", noise, low=0, high=1, high_open=True)
    if stop == "done" and speedups[-1] >= 1 - noise:
        raise validate.BadArgument(f"the sweep says S fell below 1 - {noise:g}, but S = {speedups[-1]:.3g} at "
                                   f"B = {batches[-1]}")
    s = dict(zip(batches, speedups, strict=True))
    paid = [b for b in batches if s[b] > 1 + noise]
    even = [b for b in batches if abs(s[b] - 1) <= noise and (not paid or b > paid[-1])]
    model = "beyond any batch that fits" if model_bstar is None else f"at B = {model_bstar}"
    b0 = batches[0]
    first = f"S = {s[b0]:.2f} already at B = {b0}" + (f", within the {noise:.0%} noise of break-even"
                                                       if abs(s[b0] - 1) <= noise else "")
    never = (f"{first}. This device's ridge is {ridge:.2g} FLOP/byte, a critical batch of {critical_batch:.2g} tokens "
             f"per weight read. So even at B = {b0} the verify pass's {b0 * (k + 1)} tokens are past it: verification "
             f"is never free.")
    if critical_batch > b0 * (k + 1):
        never = (f"{first}, although the verify pass's {b0 * (k + 1)} tokens are under this device's critical batch "
                 f"of {critical_batch:.2g}. The passes' fixed costs, not the roofs, decide at this size.")
    last, why = batches[-1], {"budget": "its time budget ran out",
                                 "limit": "the next batch would not fit in memory"}.get(stop)
    stopped = None if why else last
    bstar = f" The model with this device's roofs puts the crossover {model}."
    if not paid:
        where = "here" if stopped else f"up to B = {last}, where the sweep stopped because {why}"
        return Crossing(batches, speedups, stop, paid, stopped, model_bstar,
                        f"Speculation never paid {where}. {never}{bstar}", even, noise)
    best, top = max(paid, key=s.__getitem__), paid[-1]
    where = (f"up to B = {top}" if paid == batches[:len(paid)] else
             f"at B = {', '.join(map(str, paid[:-1]))} and {top}" if len(paid) > 1 else f"at B = {top}")
    values = f"S = {s[best]:.2f} at B = {best}" + (f" and {s[top]:.2f} at B = {top}" if top != best else "")
    about = ""
    if even:
        items = [f"{b} (S = {s[b]:.2f})" for b in even]
        listed = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
        about = f" It was about break-even, within the {noise:.0%} noise, at B = {listed}."
    if stopped:
        end = f" It stopped paying by B = {last}, with S = {s[last]:.2f}."
    elif last == top:
        end = f" It still paid at B = {last}, where the sweep stopped because {why}: no crossover measured."
    elif last in even:
        end = f" The sweep stopped there, because {why}, before S fell clearly below 1."
    else:
        end = f" S was {s[last]:.2f} at B = {last}, where the sweep stopped because {why}."
    sentence = f"Speculation paid {where} here: {values}.{about}{end}{bstar}"
    return Crossing(batches, speedups, stop, paid, stopped, model_bstar, sentence, even, noise)


def describe_model_gap(batch: int, k: int, measured_s: float, modelled_s: float,
                       passes: dict[str, tuple[float, float]], *, noise: float = NOISE) -> str:
    """Why measured and modelled S part at ``batch``, attributed by the numbers. ``passes`` maps "decode",
    "verify" and "draft" (one draft step) to (measured, modelled) seconds. S = E[N]·decode / (k·draft +
    verify), so a plain decode slower than modelled raises the measured S, and an iteration slower than
    modelled lowers it: the sentence names whichever moved S more, and within the iteration the pass that
    moved it most."""
    batch = validate.integer("batch", batch, low=1)
    k = validate.integer("k", k, low=1)
    measured_s = validate.number("measured_s", measured_s, low=0, low_open=True)
    modelled_s = validate.number("modelled_s", modelled_s, low=0, low_open=True)
    if set(passes) != {"decode", "verify", "draft"}:
        raise validate.BadArgument(f"passes must hold decode, verify and draft times, got {sorted(passes)}")
    t = {kind: (validate.number(f"{kind} measured", m, low=0, low_open=True),
                validate.number(f"{kind} modelled", p, low=0, low_open=True)) for kind, (m, p) in passes.items()}
    excess = {kind: m / p for kind, (m, p) in t.items()}
    iteration = (k * t["draft"][0] + t["verify"][0]) / (k * t["draft"][1] + t["verify"][1])
    numbers = ", ".join(f"{kind} {1e3 * t[kind][0]:.3g} ms against {1e3 * t[kind][1]:.3g} ms modelled"
                        for kind in ("decode", "verify", "draft"))
    if abs(measured_s / modelled_s - 1) <= noise:
        return (f"At B = {batch} the measured S ({measured_s:.2f}) is the model's ({modelled_s:.2f}) within "
                f"{noise:.0%}: the roofline with this device's roofs prices these passes. Measured against modelled: "
                f"{numbers}.")
    direction = "above" if measured_s > modelled_s else "below"
    decode_moved, iteration_moved = math.log(excess["decode"]), -math.log(iteration)
    if abs(decode_moved) >= abs(iteration_moved):
        slow = excess["decode"] > 1
        why = (f"plain decoding ran {excess['decode']:.2f}× its modelled time. "
               + (f"A GEMM of {batch} rows runs below both roofs on this device's library path, which the roofline, "
                  "an upper bound on speed, does not know" if slow else
                  "It beat the roofs the copy and the square GEMM measured, which a small kernel can"))
    else:
        share = {kind: (k if kind == "draft" else 1) * t[kind][1] * (excess[kind] - 1) for kind in ("verify", "draft")}
        kind = max(share, key=lambda x: abs(share[x]))
        slow = excess[kind] > 1
        they = "They" if kind == "draft" else "It"
        why = (f"the {'draft steps' if kind == 'draft' else 'verify pass'} ran {excess[kind]:.2f}× the modelled "
               f"time. " + (f"{they} ran below both roofs on this device's library path, which the roofline, an upper "
                            "bound on speed, does not know" if slow else
                            f"{they} ran faster than the roofs the copy and the square GEMM measured, which a small "
                            "kernel can"))
    return (f"At B = {batch} the measured S ({measured_s:.2f}) is {direction} the model's ({modelled_s:.2f}) "
            f"because {why}. Measured against modelled: {numbers}.")


def describe_draft_cost(measured_c: float, param_ratio: float, model_c: float, *, draft_cached: bool,
                        noise: float = NOISE) -> str:
    """The sentence about the draft's cost c (draft step / target decode step, at B = 1) next to the
    ratio of parameter counts and the model's c (which adds each stack's per-pass floor).
    ``draft_cached``: the draft's weights fit in the last-level cache (``devices.fits_in_cache``)."""
    measured_c = validate.number("measured_c", measured_c, low=0, low_open=True)
    param_ratio = validate.number("param_ratio", param_ratio, low=0, low_open=True)
    model_c = validate.number("model_c", model_c, low=0, low_open=True)
    numbers = f"measured c = {measured_c:.3f} at B = 1, parameter ratio {param_ratio:.3f}, model {model_c:.3f}"
    if measured_c > param_ratio * (1 + noise):
        why = ("the per-pass floor, which the model includes, is" if model_c > param_ratio * (1 + noise)
               else "fixed costs beyond the floor the model includes are")
        return (f"The draft costs more than its parameter count says: {numbers}. A small model runs as many "
                f"kernels per layer as a large one, so {why} a larger share of its time. That is Chapter 1's "
                f"overhead floor; in production it is why drafts run under CUDA graphs.")
    if measured_c < param_ratio / (1 + noise):
        why = ("Its weights fit in the last-level cache and stay there between passes, so it streams them faster "
               "than the target streams its own from memory" if draft_cached else
               "Its weights do not fit in the cache, so the reason is one the roofline does not capture")
        return f"The draft costs less than its parameter count says: {numbers}. {why}."
    return (f"The draft costs what its parameter count says, within {noise:.0%}: {numbers}. Both passes are "
            f"memory-bound and read their weights at the same bandwidth.")


def _first_above(batches: Sequence[int], measured: Sequence[float], noise: float) -> int | None:
    """Index of the first batch whose measured verify/decode is more than ``noise`` above 1."""
    return next((i for i, m in enumerate(measured) if m > 1 + noise), None)


def describe_verify(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                    critical_batch: float, k: int, decode_excess: float, verify_excess: float,
                    noise: float = NOISE) -> str:
    """How verify/decode moved across the sweep and why, attributed by the numbers: where the verify
    pass's B(k+1) tokens sit against this device's critical batch, where the measured ratio first rose
    past the noise, and, where the measurement does not move as the model does, what the first batch's
    passes show (``decode_excess``/``verify_excess``: measured/modelled time of each pass there). The
    rise compared is the one :func:`grows` tests: from the batch where the measured ratio was lowest
    (before the last) to the last batch, for the measurement and the model alike."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    k = validate.integer("k", k, low=1)
    b0, b1, t0, t1 = batches[0], batches[-1], batches[0] * (k + 1), batches[-1] * (k + 1)
    m0, m1, p0, p1 = measured[0], measured[-1], modelled[0], modelled[-1]
    moved = (f"Verifying k + 1 = {k + 1} tokens for every sequence cost {m0:.2f}× a decode pass at B = {b0} and "
             f"{m1:.2f}× at B = {b1}, against {p0:.2f}× and {p1:.2f}× in the model.")
    if t0 < critical_batch <= t1:
        where = (f"At B = {b0} the verify pass's {t0} tokens per weight read are under this device's critical "
                 f"batch of {critical_batch:.3g}, and at B = {b1} its {t1} are past it.")
    elif critical_batch > t1:
        where = (f"Up to B = {b1} the verify pass's {t1} tokens per weight read stay under this device's critical "
                 f"batch of {critical_batch:.3g}.")
    else:
        where = (f"The verify pass's {t0} tokens per weight read are past this device's critical batch of "
                 f"{critical_batch:.2g} already at B = {b0}, so it is compute-bound at every batch measured.")
    first = _first_above(batches, measured, noise)
    if first is not None and batches[first] * (k + 1) < critical_batch:
        where += (f" But the measured ratio already rose past {1 + noise:.2f}× at B = {batches[first]}, where the "
                  f"model says {modelled[first]:.2f}×: {batches[first] * (k + 1)} tokens, under the critical batch.")
    lo = min(range(len(batches) - 1), key=measured.__getitem__) if len(batches) > 1 else 0
    seen, model = measured[-1] / measured[lo], modelled[-1] / modelled[lo]
    rise = (f"From B = {batches[lo]}, where it measured lowest, to B = {b1} the measured ratio {moved_by(seen)} and "
            f"the model's {moved_by(model)}.")
    passes = f"At B = {b0} decode took {decode_excess:.2f}× its modelled time and verify {verify_excess:.2f}×."
    small_passes = (f"Small passes run below the compute roof, the smallest furthest, which pulls the ratio towards 1 "
                    f"at small B. {passes}")
    unmodelled = f"A cost the model lacks shows here. {passes}"
    if model > 1 + noise and seen > 1 + noise:
        why = f"The ratio climbs towards k + 1. {rise}"
        if seen > model * (1 + noise) and decode_excess > verify_excess * (1 + noise):
            why += f" The measured ratio climbs further because of how small passes run. {small_passes}"
    elif seen > 1 + noise:
        why = (f"The measured ratio climbs although the model's barely moves. {rise} "
               + (small_passes if decode_excess > verify_excess * (1 + noise) else unmodelled))
    elif model > 1 + noise or seen < 1 / (1 + noise):
        why = (f"The measured ratio does not move as the model's does. {rise} "
               + (f"The math library runs the GEMMs of more rows on a slower path here. {passes}"
                  if verify_excess > decode_excess * (1 + noise) else unmodelled))
    else:
        why = "Neither ratio moves by more than the noise."
    return f"{moved} {where} {why}"


def describe_free_batch(critical_batch: float, k: int, batches: Sequence[int] = (), measured: Sequence[float] = (),
                        modelled: Sequence[float] = (), *, noise: float = NOISE) -> str:
    """Up to which batch the roofline on this device's measured roofs says verifying k drafts per
    sequence is free (the largest B with B(k + 1) tokens per weight read within the critical batch), and
    what the measured verify/decode ratios (``measured``, with the model's ``modelled``, per-pass floor
    included, at ``batches``) say about it: where the measured ratio first rose more than ``noise``
    above 1."""
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    k = validate.integer("k", k, low=1)
    free = math.floor(critical_batch / (k + 1))
    if free >= 1:
        model = (f"The roofline on this device's measured roofs says verification is free up to B = {free}: there "
                 f"B(k+1) = {k + 1}B tokens per weight read are within a critical batch of {critical_batch:.3g}.")
    else:
        model = (f"The roofline on this device's measured roofs says verification is never free: the critical "
                 f"batch is {critical_batch:.2g} tokens per weight read, and B(k+1) = {k + 1} tokens are past it "
                 f"already at B = 1.")
    if not len(batches):
        return model
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    i = _first_above(batches, measured, noise)
    if i is None:
        return (f"{model} Measured, verify cost within {noise:.0%} of a decode pass up to B = {batches[-1]}, where the "
                f"model, per-pass floor included, says {modelled[-1]:.2f}×.")
    b, m, p = batches[i], measured[i], modelled[i]
    cost_text = f"Measured, verification already cost {m:.2f}× a decode pass at B = {b}, at {b * (k + 1)} tokens"
    if free < 1:
        return f"{model} {cost_text}."
    if b > free:
        return (f"{model} Measured, the ratio first rose more than {noise:.0%} above 1 at B = {b}, to {m:.2f}×: past "
                f"that range.")
    if m > p * (1 + noise):
        return (f"{model} {cost_text}, where the model, per-pass floor included, says {p:.2f}×. Small GEMMs run "
                f"below both roofs, since the roofline is an upper bound on speed. Here a verify pass of "
                f"{b * (k + 1)} rows per weight ran further below them than a decode pass of {b}.")
    return f"{model} {cost_text}, as the model, per-pass floor included, says: {p:.2f}×."


def _runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive True values."""
    runs, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i - 1))
            start = None
    return runs


def _span(values: Sequence[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"


def describe_slow_gemms(rows: Sequence[int], ratios: Sequence[float], weight_gb_per_s: Sequence[float],
                        copy_gb_per_s: float, *, slow: float = THRESHOLD) -> str:
    """Where a decode-GEMM sweep ran ``slow`` times or more above its roofline time (``ratios``: measured
    over roofline at each row count), in numbers: the rows, how far above, and the bytes of weight it read
    per second against the copy roof, in two sentences. An empty string where no point did."""
    rows = _batches(rows, ("ratios", ratios), ("weight_gb_per_s", weight_gb_per_s))
    ratios, gbs = _positive("ratios", ratios), _positive("weight_gb_per_s", weight_gb_per_s)
    copy_gb_per_s = validate.number("copy_gb_per_s", copy_gb_per_s, low=0, low_open=True)
    runs = _runs([r >= slow for r in ratios])
    if not runs:
        return ""
    a, b = max(runs, key=lambda run: max(ratios[run[0]:run[1] + 1]))
    which = f"{rows[a]} row{'s' * (rows[a] > 1)}" if a == b else f"{rows[a]} to {rows[b]} rows"
    return (f"On this device the GEMM of {which} ran {_span(ratios[a:b + 1], '.1f')}× its roofline time. It read its "
            f"weight at {_span(gbs[a:b + 1], '.1f')} GB/s against the {copy_gb_per_s:.1f} GB/s copy roof: a library "
            f"path for few rows that reaches neither roof.")


def describe_gemm_efficiency(rows: Sequence[int], ratios: Sequence[float], left_out: Sequence[float],
                             weight_gb_per_s: Sequence[float], copy_gb_per_s: float) -> str:
    """Chapter 1's sentence on the per-M efficiency of its decode-GEMM sweep: its range, where it was
    slow (:func:`describe_slow_gemms`), and how well it predicts each point from the others
    (``left_out``: ``GemmEfficiency.leave_one_out``) against the roofline alone. "Within 2× of the roofs at
    every M" claims 1/2 < measured/roofline < 2 at every point; a point at 2× or more is named as slow, one at
    1/2 or less as faster than its roofline time (its weight stayed in a cache)."""
    rows = _batches(rows, ("ratios", ratios), ("left_out", left_out))
    ratios, left_out = _positive("ratios", ratios), _positive("left_out", left_out)
    lo, hi = min(range(len(rows)), key=ratios.__getitem__), max(range(len(rows)), key=ratios.__getitem__)
    text = (f"Measured over its roofline time, the GEMM took {ratios[lo]:.2f}× at M = {rows[lo]} to "
            f"{ratios[hi]:.2f}× at M = {rows[hi]}")
    slow = describe_slow_gemms(rows, ratios, weight_gb_per_s, copy_gb_per_s)
    fast = [m for m, r in zip(rows, ratios, strict=True) if r <= 1 / THRESHOLD]
    beat = (f" At M = {', '.join(map(str, fast))} it ran faster than half its roofline time, which a weight that "
            "stays in the cache allows." if fast else "")
    text += (f". {slow}{beat}" if slow or beat else f": within {THRESHOLD:g}× of the roofs at every M.")
    if len(rows) < 3:
        return text
    loo = math.exp(sum(abs(math.log(p / m)) for p, m in zip(left_out, ratios, strict=True)) / len(rows)) - 1
    roof = math.exp(sum(abs(math.log(m)) for m in ratios) / len(rows)) - 1
    better = ("so the curve, not the roofs, is what predicts a GEMM of another M here" if loo < roof / (1 + NOISE)
              else "no better than the roofs: the efficiency jumps between neighbouring M, so it describes the sweep "
                   "it came from but predicts little between its points")
    return (f"{text} Interpolated from the other points alone, leaving each one out, the efficiency predicts each "
            f"point within {loo:.0%} on average, against {roof:.0%} for the roofline alone: {better}.")


def describe_efficiency_gain(what: str, error_without: float, error_with: float, *, extrapolated: int = 0,
                             noise: float = NOISE) -> str:
    """How much of the model's error on ``what`` the per-M GEMM efficiency explains: ``error_without`` and
    ``error_with`` are the model's typical errors (geometric mean factor minus one, e.g.
    ``probes.geometric_error``) with the roofline alone and with the efficiency. The share explained is
    1 - log(1 + with) / log(1 + without). ``extrapolated``: how many of the passes' row counts lay past the
    GEMM sweep (their efficiency held at its last measured value)."""
    without = validate.number("error_without", error_without, low=0)
    with_ = validate.number("error_with", error_with, low=0)
    numbers = (f"The model's {what} is off by {with_:.0%} on average with the per-M GEMM efficiency, against "
               f"{without:.0%} with the roofline alone.")
    held = (f" {extrapolated} of the passes' row counts lay past the GEMM sweep, where the efficiency is held at its "
            "last measured value." if extrapolated else "")
    if without <= noise:
        return (f"{numbers}{held} The roofline alone was already within the {noise:.0%} noise, so there was no gap "
                "to explain.")
    share = 1 - math.log1p(with_) / math.log1p(without)
    if with_ < without / (1 + noise):
        rest = ("What is left is the passes' other costs: attention, the norms and activations, and the fixed "
                "cost of each kernel beyond the floor." if with_ > noise else "What is left is within the noise.")
        return (f"{numbers}{held} The GEMM library's paths for each number of rows explain {share:.0%} of the gap, "
                f"in log terms. {rest}")
    if with_ <= without * (1 + noise):
        return (f"{numbers}{held} The GEMM efficiency changes it by less than the {noise:.0%} noise, so the gap lies "
                "elsewhere: attention, per-pass costs, or load while the sweep ran.")
    return (f"{numbers}{held} It is worse with it. The decode GEMM measured over one weight does not run like the "
            "stack's own GEMMs here, which have other shapes and some of which fit in the cache, or the load changed "
            "between the two sweeps.")


def describe_speedup_trend(falls: Verdict, batches: Sequence[int], measured_vd: Sequence[float],
                           modelled_vd: Sequence[float], slow_gemms: str = "") -> str:
    """Why S(B) did not fall as the model predicts, where :func:`speedup_falls` found it too flat: verify
    over decode, measured and modelled, at the batches the verdict compared, and the slow GEMM path that
    makes it so where one was measured (``slow_gemms``, :func:`describe_slow_gemms`). An empty string
    where the verdict holds or tested nothing."""
    if falls.ok or not falls.tested:
        return ""
    batches = _batches(batches, ("measured_vd", measured_vd), ("modelled_vd", modelled_vd))
    b0, b1 = falls.numbers["from B"], falls.numbers["to B"]
    i, j = batches.index(b0), batches.index(b1)
    text = (f"S did not fall because the iteration did not grow dearer than plain decoding. Verify cost "
            f"{measured_vd[i]:.2f}× a decode pass at B = {b0} and {measured_vd[j]:.2f}× at B = {b1}, where the model "
            f"has {modelled_vd[i]:.2f}× and {modelled_vd[j]:.2f}×.")
    if slow_gemms:
        return (f"{text} {slow_gemms} A decode pass of B rows pays that path as a verify pass of (k + 1)B rows "
                "does. So verifying k + 1 tokens costs about as many decode passes at every batch, and the "
                "roofline, which knows neither path, cannot predict it.")
    return f"{text} A cost the roofline does not see slows plain decoding as much as verification here."


def describe_amortization(verdict: Verdict, first_batch: int, best_batch: int, fell: float) -> str:
    """Chapter 1's sentences on sharing one weight read, after the model's "a per-token cost that falls like 1/B":
    what the fastest per-token time did from ``first_batch`` to the batch where it was lowest (``best_batch``,
    ``fell`` times lower), judged by :func:`grows`'s ``verdict`` on the same sweep."""
    if best_batch == first_batch:
        return (f"Here the fastest per-token time was lowest at B = {first_batch}: sharing the weight read saved "
                "nothing on this device.")
    at = (f"Here the fastest per-token time {moved_by(1 / fell, digits=1)} from B = {first_batch} to its best batch, "
          f"B = {best_batch}.")
    if not verdict.numbers:
        return at
    n = verdict.numbers
    model = (f"The model on this device's measured roofs predicts {n['model rise']:.1f}× from B = {n['from B']} to "
             f"{n['to B']}, where it measured {n['measured rise']:.1f}×")
    if not verdict.tested:
        return f"{at} {model}: too small a fall to test."
    return f"{at} {model}" + (", enough for the check above." if verdict.ok else ": too flat, as the check above says.")


def describe_knee(knee: float | None, batches: Sequence[int]) -> str:
    """The measured knee of a step-time sweep, or that the step time never rose within it."""
    batches = validate.integers("batches", batches, low=1)
    if knee is None:
        return (f"no measured knee up to B = {max(batches)} (the step time never rose 25% above its flat "
                f"level)")
    return f"a measured knee at B ≈ {validate.number('knee', knee, low=0, low_open=True):.2g}"


def describe_cache(what: str, weight_bytes: float, cache_bytes: float) -> str:
    """Whether ``what`` (a weight of ``weight_bytes``) fits in this device's last-level cache of
    ``cache_bytes`` (``devices.cache_bytes``), and what that means for a measurement over it."""
    weight_bytes = validate.number("weight_bytes", weight_bytes, low=0, low_open=True)
    cache_bytes = validate.number("cache_bytes", cache_bytes, low=0)
    weight, cache = f"{weight_bytes / 2**20:.0f} MiB", f"{cache_bytes / 2**20:.0f} MiB"
    if weight_bytes > cache_bytes:
        return (f"{what} ({weight}) is larger than this device's last-level cache ({cache}), so every pass streams "
                f"it from memory")
    return (f"{what} ({weight}) fits in this device's last-level cache ({cache}, as the system reports it), so "
            f"repeated passes may read it from the cache instead of memory")
