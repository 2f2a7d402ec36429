"""The book in one figure (the intro): S(B) of one published setup on a few GPUs.

The setup is a published S(B) series (``published.load(source)[series]``, read into model inputs by
``calibrate.cases``): its target, draft, k, α and context. For each GPU the idealized model's S(B) runs
from B = 1 to the largest batch that fits in memory (``cost.max_batch``), with the crossover batch B*
(``cost.crossover_batch``) where there is one below that. Where a calibration of ``source`` is stored
for a GPU (``calibrate.calibrations()``), the calibrated model's S(B) is drawn too, and the batches it was
fitted to (its ``fitted_to`` in ``calibrate.calibrations()``) say where it starts to extrapolate. The published
points are drawn on the GPU they were measured on.

Nothing here is drawn by hand: a new calibration, a new published point or a change to the cost model
changes the figure the next time the intro is executed.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, replace

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.hardware import ACCELERATORS
from specnotes.record import calibrate, published

# The published setup (Chapter 6's headline: Llama-3.1-8B + EAGLE-3, k = 3, one H100, vLLM) and three
# GPUs it was not measured on: a lower ridge that crosses 1 sooner (A100), more bandwidth (H200), and
# less memory (L4).
SOURCE, SERIES = "specdecode_bench", "fig1c_eagle3"
GPUS = ("H100-SXM", "A100-80GB", "H200", "L4")
MODELS = ("idealized", "calibrated")


@dataclass(frozen=True)
class Curve:
    """The model's S(B) on one GPU, from B = 1 to the largest batch that fits."""

    accelerator: str
    model: str  # "idealized" or "calibrated"
    batches: tuple[int, ...]
    speedups: tuple[float, ...]
    crossover: int | None  # B*: S ≤ 1 from here to max_batch; None: pays at every batch that fits
    max_batch: int  # the largest batch whose weights and KV caches fit (the curve ends there)
    fitted_up_to: int | None = None  # calibrated: the largest batch it was fitted to


@dataclass(frozen=True)
class Points:
    """Published speedups measured on one GPU."""

    label: str
    accelerator: str
    batches: tuple[int, ...]
    speedups: tuple[float, ...]


@dataclass(frozen=True)
class Thesis:
    """Everything the intro's figure draws, and the setup it is drawn for."""

    setup: str  # e.g. "Llama-3.1-8B + EAGLE-3 head for Llama-3.1-8B, k = 3, α = 0.62, L = 719 tokens"
    curves: tuple[Curve, ...]
    published: tuple[Points, ...]
    source: str  # where the published points come from (figure, engine)

    def curve(self, accelerator: str, model: str = "idealized") -> Curve:
        for c in self.curves:
            if c.accelerator == accelerator and c.model == model:
                return c
        have = ", ".join(f"{c.accelerator} {c.model}" for c in self.curves)
        raise validate.BadArgument(f"no {model} curve for {accelerator}; there are: {have}")


def batch_grid(limit: int, per_octave: int = 8) -> list[int]:
    """1 to ``limit`` (inclusive), ``per_octave`` batches per doubling, rounded and unique."""
    limit = validate.integer("limit", limit, low=1)
    steps = per_octave * math.ceil(math.log2(limit)) if limit > 1 else 0
    return sorted({min(limit, round(2 ** (i / per_octave))) for i in range(steps + 1)} | {1, limit})


def _curve(case: calibrate.Case, accelerator: str, model: str, knobs: dict, fitted_up_to=None) -> Curve:
    fits = cost.max_batch(case.target, case.draft, accelerator, case.context, k=case.k, tp=case.tp,
                          draft_context=case.draft_context)
    if not fits:
        raise validate.BadArgument(f"{case.target.name} and its draft do not fit on {accelerator} "
                                   f"(max_batch = {fits}): leave it out of accelerators")
    batches = batch_grid(fits)
    speedups = calibrate.curve(replace(case, accel=accelerator), batches, **knobs)
    bstar = cost.crossover_batch(case.target, case.draft, accelerator, case.k, case.alpha, case.context,
                                 max_batch=fits, draft_context=case.draft_context, tp=case.tp, **knobs)
    return Curve(accelerator, model, tuple(batches), tuple(float(s) for s in speedups), bstar, fits, fitted_up_to)


def _calibrated(accelerator: str, source: str) -> tuple[dict, int] | None:
    """The stored calibration of ``source`` on this GPU and the largest batch it was fitted to, or None."""
    stored = calibrate.calibrations().get(accelerator, {})
    if source not in stored:
        return None
    record = stored[stored[source].get("alias_of", source)]
    return calibrate.calibration(accelerator, source), record["fitted_to"]["batch"][1]


def thesis(source: str = SOURCE, series: str = SERIES, accelerators=GPUS) -> Thesis:
    """S(B) of the published setup ``source``/``series`` on each of ``accelerators``: the idealized model
    everywhere, the calibrated one where ``source`` has a stored calibration on that GPU, and the
    published points on the GPU they were measured on."""
    accelerators = [validate.choice("accelerator", a, ACCELERATORS) for a in accelerators]
    if not accelerators:
        raise validate.BadArgument("accelerators: name at least one GPU")
    s = published.load(source)[series]
    cases = calibrate.cases(source, series)
    case = cases[0]
    curves = []
    for accel in accelerators:
        curves.append(_curve(case, accel, "idealized", {}))
        calibrated = _calibrated(accel, source)
        if calibrated is not None:
            curves.append(_curve(case, accel, "calibrated", *calibrated))
    name = _short_name(source)
    measured_on = s.setup["accelerator"]
    engine = " ".join(str(s.setup[key]) for key in ("engine", "engine_version") if s.setup.get(key))
    points = ()
    if measured_on in accelerators:
        points = (Points(f"{name}, {engine}" if engine else name, measured_on, tuple(c.batch for c in cases),
                         tuple(c.measured for c in cases)),)
    setup = (f"{case.target.name} + {_draft_name(case.draft)}, k = {case.k}, α = {case.alpha:.2f}, "
             f"L = {case.context} tokens")
    return Thesis(setup, tuple(curves), points, f"published: {name} {s.figure}")


def _draft_name(draft) -> str:
    """A draft's name as prose: "EAGLE-3 head (Llama-3.1-8B)" reads "EAGLE-3 head for Llama-3.1-8B"."""
    name = getattr(draft, "name", type(draft).__name__)
    return re.sub(r"^(.* head) \((.+)\)$", r"\1 for \2", name)


def _short_name(source: str) -> str:
    """A published source's short name: the parenthesised end of its title ("... (SpecDecode-Bench)"),
    else its file name."""
    title = published.load(source).title.strip()
    if title.endswith(")") and "(" in title:
        return title[title.rindex("(") + 1:-1]
    return source

def figure(data: Thesis | None = None, ax=None):
    """Draw ``data`` (default: ``thesis()``) with :func:`specnotes.pages.plots.speedup_by_gpu`; returns the Axes."""
    import matplotlib.pyplot as plt

    from specnotes.pages import plots

    data = thesis() if data is None else data
    if ax is None:  # narrower than the house width: 9 px or more on a 390-px phone (FIGURE_SIZE)
        with plots.house_style():
            _, ax = plt.subplots(figsize=FIGURE_SIZE, layout="constrained")
    return plots.speedup_by_gpu(ax, data.curves, data.published, title=figure_title(data),
                                source=textwrap.fill(data.source, 46))


# The intro's figure carries the book's thesis, so it is read on a phone more than any other: 4.9 inches wide, not
# the house's 6.4, so that its smallest text (MIN_FONT) renders at 9 px or more on a 390-px phone, as at 1280 px.
FIGURE_SIZE = (4.9, 6.6)


def figure_title(data: Thesis) -> str:
    """The figure's title: what it shows, that each curve is one GPU of a kind (not a tensor-parallel group), and
    the setup."""
    kinds = len({c.accelerator for c in data.curves})
    words = "one two three four five six seven eight".split()
    count = words[kinds - 1] if kinds <= len(words) else str(kinds)
    target = data.setup.split(" + ")[0]
    setup = data.setup.replace(f" head for {target}", " head")  # "Llama-3.1-8B + EAGLE-3 head": named once
    return f"The win shrinks as the batch grows:\n{count} kinds of GPU, one GPU of each\n{_two_lines(setup)}"


def _above_one(x: float) -> str:
    """A speedup above 1 printed so that it reads above 1: two decimals, more (up to 6) where two would print 1.00."""
    for digits in range(2, 7):
        if float(f"{x:.{digits}f}") > 1:
            return f"{x:.{digits}f}"
    return f"{x:.6f}"


def _two_lines(setup: str) -> str:
    """The setup as a figure title's last lines: the models, then k, α and L (no line breaks inside a term)."""
    models, sep, rest = setup.partition(", k = ")
    return f"{models}\nk = {rest}" if sep else textwrap.fill(setup, 48)


def _ends(c: Curve) -> str:
    if c.crossover is not None:
        return f"falls to 1 at B* = {c.crossover}"
    return f"is still {_above_one(c.speedups[-1])} when memory is full at B = {c.max_batch}"


def why_one_crosses(data: Thesis) -> str:
    """Why one GPU's idealized S(B) crosses 1 where another's with the same FLOP/s does not: more bandwidth and the
    same peak make a lower ridge, so reading the KV cache, which plain decoding pays for too, takes less time next
    to the verify pass's extra FLOPs. Empty where no such pair is drawn. Its words claim: "the ... FLOP/s" (bf16
    peaks within 1%), "x× its bandwidth" (x > 1), "lower" ridge, and the two curves' last values (below 1, above
    1)."""
    ideal = {c.accelerator: c for c in data.curves if c.model == "idealized"}
    for a, ca in ideal.items():
        for b, cb in ideal.items():
            fa, fb = ACCELERATORS[a], ACCELERATORS[b]
            same_peak = abs(fa.peak_flops["bf16"] / fb.peak_flops["bf16"] - 1) <= 0.01
            if ca.crossover is None or cb.crossover is not None or not same_peak:
                continue
            if fa.mem_bandwidth > fb.mem_bandwidth:
                return (f"With the {b}'s FLOP/s and {fa.mem_bandwidth / fb.mem_bandwidth:.2f}× its bandwidth, the "
                        f"{a} has a lower ridge ({fa.ridge():.0f} against {fb.ridge():.0f} FLOP/byte). Reading the KV "
                        "cache, which plain decoding pays for too, takes less time there next to the verify pass's "
                        f"extra FLOPs. So S(B) ends at {ca.speedups[-1]:.2f}, not {_above_one(cb.speedups[-1])}.")
    return ""


def summary(data: Thesis) -> str:
    """What the figure shows, in two short sentences chosen by its numbers (glued under it in the intro): where
    each idealized curve crosses 1 or ends, and which way the published points go. Why one GPU crosses where
    another does not is :func:`why_one_crosses`, glued on its own; the legend says where the calibrated model
    extrapolates."""
    ideal = [c for c in data.curves if c.model == "idealized"]
    crossing = [c for c in ideal if c.crossover is not None]
    level = [c for c in ideal if c.crossover is None]
    lines = []
    if crossing:
        at = [f"B* = {c.crossover} on the {c.accelerator}" for c in crossing]
        lines.append(f"In the idealized model S(B) falls to 1 at {_listed(at)}.")
    if level:
        ends = [f"{_above_one(c.speedups[-1])} on the {c.accelerator}"
                + (" when memory is full" if i == 0 else "") + f" at B = {c.max_batch}" for i, c in enumerate(level)]
        lines.append(f"{'It' if crossing else 'In the idealized model S(B)'} is still {_listed(ends)}.")
    for p in data.published:
        way = "fall" if p.speedups[-1] < p.speedups[0] else "rise" if p.speedups[-1] > p.speedups[0] else "stay"
        lines.append(f"The published {p.accelerator} points {way} from {p.speedups[0]:.2f} at B = {p.batches[0]} "
                     f"to {p.speedups[-1]:.2f} at B = {p.batches[-1]}.")
    return " ".join(lines)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
