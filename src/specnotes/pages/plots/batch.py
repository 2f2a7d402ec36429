"""Against batch size B: decode step time and time per token (``time_vs_batch``), the speedup S(B) of one setup
(``speedup_vs_batch``) or of one setup on several GPUs, the intro's figure (``speedup_by_gpu``), and shaded batch
ranges (``shade_batches``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

from specnotes.pages.plots.style import (
    MARKERS,
    MEASURED,
    MIN_FONT,
    MODEL,
    PALETTE,
    _axes,
    _legend,
    _plain_log_ticks,
    _time_unit,
    _title,
    house_style,
)

# ----------------------------------------------------------------------------------------------
# time vs batch


def time_vs_batch(ax=None, batches: Sequence[float] = (), measured_times: Sequence[float] = (),
                  predicted_times: Sequence[float] | None = None, *, knee="auto", per_token: bool = True,
                  title: str | None = None, model_label: str = "roofline", source: str | None = None):
    """Log-log step time and time per token (step / B) vs batch size B.

    Measured values are markers, ``predicted_times`` (optional) lines in the same colours.
    knee: ``"auto"`` marks :func:`specnotes.measure.knee` of the measured step times, a number marks
        that batch, None marks nothing.
    source: where the measurements came from (device, dtype), shown as the legend's title.
    Returns the Axes.
    """
    batches = [float(b) for b in batches]
    measured = [float(t) for t in measured_times]
    if not batches or len(batches) != len(measured):
        raise ValueError(f"need matching, non-empty batches and measured_times ({len(batches)} vs {len(measured)})")
    if any(b <= 0 for b in batches) or any(t <= 0 for t in measured):
        raise ValueError("batches and times must be > 0 for a log-log plot")
    if predicted_times is not None:
        predicted_times = [float(t) for t in predicted_times]
    if predicted_times is not None and len(predicted_times) != len(batches):
        raise ValueError(f"predicted_times has {len(predicted_times)} values for {len(batches)} batches")
    if knee == "auto":
        from specnotes.measure import knee as find_knee

        knee = find_knee(batches, measured) if len(batches) >= 3 else None

    series = [("step time", measured, predicted_times)]
    if per_token:
        series.append(("time per token", [t / b for t, b in zip(measured, batches, strict=True)],
                       None if predicted_times is None
                       else [t / b for t, b in zip(predicted_times, batches, strict=True)]))
    every = [v for _, m, p in series for v in list(m) + list(p or [])]
    scale, unit = _time_unit(max(every))
    with house_style():
        ax = _axes(ax)
        for i, (name, meas, pred) in enumerate(series):
            color = PALETTE[i]
            if pred is not None:
                ax.plot(batches, [v / scale for v in pred], color=color, label=f"model: {name} ({model_label})",
                        **MODEL)
            ax.plot(batches, [v / scale for v in meas], marker=MARKERS[i], color=color,
                    label=f"measured: {name}", **MEASURED)
        if knee is not None:
            ax.axvline(knee, color="0.35", linestyle=":", linewidth=1.5, label=f"measured knee: B ≈ {knee:.3g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        if len(batches) <= 16:
            ax.set_xticks(batches)
            ax.set_xticklabels([f"{b:g}" for b in batches])
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("Batch size B (sequences, 1 new token each)")
        ax.set_ylabel(f"Time ({unit})")
        _title(ax, title or "Decode step time and time per token vs batch size")
        _legend(ax, source, loc="best")
    return ax


# ----------------------------------------------------------------------------------------------
# speedup vs batch


def speedup_vs_batch(ax=None, curves: Sequence = (), *, bstar=None, max_batch: int | None = None,
                     title: str | None = None, source: str | None = None):
    """Speedup S(B) of speculative decoding against batch size (log2 x axis), with S = 1 marked.

    curves: ``(label, batches, speedups, "model" | "measured")``: model curves are lines, measured ones
        markers, in the order given. bstar: a crossover batch to mark (a number), or a list of
        ``(label, batch)``; None entries are skipped (speculation pays over the whole range).
    max_batch: the largest batch that fits in memory (``cost.max_batch``); batches past it are shaded
        grey ("does not fit"). None: no limit drawn.
    Returns the Axes.
    """
    if not curves:
        raise ValueError("speedup_vs_batch needs at least one curve")
    marks = [("B*", bstar)] if bstar is None or isinstance(bstar, int | float) else list(bstar)
    with house_style():
        ax = _axes(ax)
        for i, (label, batches, speedups, kind) in enumerate(curves):
            if kind not in ("model", "measured"):
                raise ValueError(f"curve kind must be 'model' or 'measured', got {kind!r}")
            if len(batches) != len(speedups):
                raise ValueError(f"{label}: {len(batches)} batches but {len(speedups)} speedups")
            style = MODEL if kind == "model" else MEASURED
            dash = {"marker": "_", "markersize": 16, "markeredgewidth": 2.5}  # a model "line" of one point
            marker = {"marker": MARKERS[i % len(MARKERS)]} if kind == "measured" else dash if len(batches) == 1 else {}
            ax.plot(list(batches), list(speedups), color=PALETTE[i % len(PALETTE)], label=f"{kind}: {label}",
                    **style, **marker)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="S = 1 (no gain)")
        for j, (label, b) in enumerate(marks):
            if b is not None:
                ax.axvline(b, color="firebrick", linestyle=":", linewidth=1.5, alpha=0.6 + 0.4 / (j + 1),
                           label=f"{label} = {b:g}")
        left = min(min(batches) for _, batches, _, _ in curves)
        right = max(max(batches) for _, batches, _, _ in curves)
        if max_batch is not None and max_batch < right:
            ax.axvspan(max(max_batch, left), right, color="0.5", alpha=0.25, linewidth=0,
                       label=f"model: does not fit in memory (B > {max_batch})")
        ax.set_xscale("log", base=2)
        _plain_log_ticks(ax)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Batch size B (sequences)")
        ax.set_ylabel("Speedup S(B) (× plain decoding)")
        _title(ax, title or "Speculative decoding speedup vs batch size")
        _legend(ax, source, loc="best")
    return ax


# ----------------------------------------------------------------------------------------------
# S(B) on several GPUs: the book in one figure (the intro)


def speedup_by_gpu(ax=None, curves: Sequence = (), points: Sequence = (), *, title: str | None = None,
                   source: str | None = None):
    """S(B) of one setup on several GPUs: model curves that end where memory is full, B* marked on S = 1.

    curves: objects with ``accelerator``, ``model`` ("idealized" | "calibrated"), ``batches``, ``speedups``,
        ``crossover`` (B*, or None), ``max_batch`` (the last batch that fits; the curve ends there with a
        bar) and ``fitted_up_to`` (calibrated: past this batch the line is dotted, "extrapolated")
        (:class:`specnotes.pages.thesis.Curve`). One colour per GPU, its name written where its curve ends (read
        on a phone too, where a long legend is not); idealized solid, with a marker of its own every two octaves,
        staggered by a quarter octave from the next GPU's, so that curves that coincide (decoding memory-bound on
        every GPU) still show apart; calibrated dashed.
    points: published measurements, objects with ``label``, ``accelerator``, ``batches``, ``speedups``
        (:class:`specnotes.pages.thesis.Points`), markers in their GPU's colour.
    source: where the published points come from, the legend's title. Returns the Axes.
    """
    from matplotlib.lines import Line2D

    if not curves:
        raise ValueError("speedup_by_gpu needs at least one curve")
    colors: dict[str, str] = {}
    for c in curves:
        if c.model not in ("idealized", "calibrated"):
            raise ValueError(f"{c.accelerator}: a curve's model is 'idealized' or 'calibrated', got {c.model!r}")
        if len(c.batches) != len(c.speedups) or not len(c.batches):
            raise ValueError(f"{c.accelerator} {c.model}: {len(c.batches)} batches but {len(c.speedups)} speedups")
        colors.setdefault(c.accelerator, PALETTE[len(colors) % len(PALETTE)])
    for p in points:
        if len(p.batches) != len(p.speedups) or not len(p.batches):
            raise ValueError(f"{p.label}: {len(p.batches)} batches but {len(p.speedups)} speedups")
        colors.setdefault(p.accelerator, PALETTE[len(colors) % len(PALETTE)])
    top = max(max(c.speedups) for c in curves) * 1.12
    grey = {"color": "0.3"}
    handles = [Line2D([], [], color="0.4", linestyle="--", linewidth=1),
               Line2D([], [], **grey, **MODEL)]
    labels = ["S = 1: below it, speculation slows decoding",
              "model: idealized, a colour and a marker per GPU"]
    # where the idealized curves coincide (decoding memory-bound on every GPU) each GPU's markers sit a quarter of
    # an octave from the next GPU's, so that every curve shows there
    order = {a: i for i, a in enumerate(colors)}
    with house_style():
        ax = _axes(ax)
        ax.axhspan(0, 1, color="0.5", alpha=0.08, linewidth=0)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        crossings, named = 0, set()
        for c in sorted(curves, key=lambda c: c.model != "idealized"):  # names go on the idealized curves
            color, batches, speedups = colors[c.accelerator], list(c.batches), list(c.speedups)
            if c.model == "idealized":
                i = order[c.accelerator]
                marks = [j for j, b in enumerate(batches) if abs((math.log2(b) - i / 4) % 2) < 1e-9 or
                         abs((math.log2(b) - i / 4) % 2 - 2) < 1e-9]
                if not marks:  # a grid without those batches: every 16th point, staggered
                    marks = list(range(2 * i, len(batches), 16))
                ax.plot(batches, speedups, color=color, marker=MARKERS[(i + 1) % len(MARKERS)], markevery=marks,
                        markersize=6, markeredgecolor="white", markeredgewidth=0.6, **MODEL)
            else:
                fit = c.fitted_up_to if c.fitted_up_to is not None else batches[-1]
                inside = [i for i, b in enumerate(batches) if b <= fit]
                ax.plot([batches[i] for i in inside], [speedups[i] for i in inside], color=color,
                        **{**MODEL, "linestyle": "--"})
                text = f"model: calibrated to the published points (B ≤ {fit})"
                if text not in labels:
                    handles.append(Line2D([], [], **grey, **{**MODEL, "linestyle": "--"}))
                    labels.append(text)
                if batches[-1] > fit:
                    start = max(i for i, b in enumerate(batches) if b <= fit)
                    ax.plot(batches[start:], speedups[start:], color=color, linestyle=":", linewidth=2.0)
                    text = f"model: calibrated, extrapolated past B = {fit}"
                    if text not in labels:
                        handles.append(Line2D([], [], **grey, linestyle=":", linewidth=2.0))
                        labels.append(text)
            ax.plot([batches[-1]], [speedups[-1]], color=color, marker="|", markersize=16, markeredgewidth=2.5,
                    linestyle="none")
            if c.accelerator not in named:  # the GPU's name where its curve ends: above it near the top
                named.add(c.accelerator)
                high = speedups[-1] > 0.85 * top
                ax.annotate(c.accelerator, (batches[-1], speedups[-1]), xytext=(0, 10) if high else (8, 0),
                            textcoords="offset points", ha="center" if high else "left",
                            va="bottom" if high else "center", fontsize=MIN_FONT, fontweight="bold", color=color)
            if c.crossover is not None and c.crossover <= batches[-1]:
                ax.plot([c.crossover], [1.0], color=color, marker="o", markersize=8, markerfacecolor="white",
                        markeredgewidth=2, linestyle="none")
                ax.annotate(f"B* = {c.crossover:g}", (c.crossover, 1.0), ha="right", fontsize=MIN_FONT,
                            xytext=(-8, -14 - 13 * crossings), textcoords="offset points", color=color,
                            fontweight="bold")
                crossings += 1
        for p in points:
            (line,) = ax.plot(list(p.batches), list(p.speedups), color=colors[p.accelerator],
                              marker="X", **{**MEASURED, "markersize": 8})
            handles.append(line)
            labels.append(f"measured: {p.label}, {p.accelerator}")
        handles += [Line2D([], [], color="0.3", marker="o", markerfacecolor="white", markeredgewidth=2,
                           linestyle="none"),
                    Line2D([], [], color="0.3", marker="|", markersize=14, markeredgewidth=2.5, linestyle="none")]
        labels += ["model: B*, where S falls to 1 for good", "model: memory full (the largest batch)"]
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlim(0.8, max(c.batches[-1] for c in curves) * 2.6)  # room for the names
        ax.set_ylim(0, top)
        ax.set_xlabel("Batch size B (sequences decoding together)")
        ax.set_ylabel("Speedup S(B) (× plain decoding)")
        _title(ax, title or "Speculative decoding speedup vs batch size, by GPU")
        _legend(ax, source, handles=handles, labels=labels, below=True)
    return ax


def shade_batches(ax, ranges: Sequence[tuple[float, float]], label: str, *, color: str = "#009E73",
                  alpha: float = 0.15, source: str | None = None):
    """Shade batch ranges ``[(first, last), ...]`` of a speedup-vs-batch plot (where speculation pays, say,
    or where the batch does not fit in memory), one legend entry for all of them. Returns the Axes."""
    with house_style():
        for i, (first, last) in enumerate(ranges):
            ax.axvspan(first, max(last, first), color=color, alpha=alpha, linewidth=0,
                       label=label if i == 0 else None)
        if ranges:
            _legend(ax, source, loc="best")
    return ax
