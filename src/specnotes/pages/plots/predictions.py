"""The model against the published record (Chapter 6): predicted against measured speedup (``predicted_vs_measured``)
and the held-out errors against what might explain them (``residual_panels``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from specnotes.pages.plots.style import (
    MARKERS,
    MAX_COLUMNS,
    MEASURED,
    PALETTE,
    _axes,
    _legend,
    _title,
    figure,
    house_style,
    shared_legend,
)

# ----------------------------------------------------------------------------------------------
# the model against the published record (Chapter 6)


def predicted_vs_measured(ax=None, groups: Sequence = (), *, band: tuple[float, float] | None = None,
                          title: str | None = None, source: str | None = None):
    """Predicted against measured speedup, one marker colour and shape per group (a published source), on
    log axes with the diagonal (a perfect prediction) and S = 1 on both axes: points in the upper-left and
    lower-right quadrants are wrong verdicts.

    groups: ``(label, measured, predicted)``; the label names the source (it becomes ``measured: label``:
        every marker is a published measurement placed at the model's held-out prediction).
    band: (low, high) factors: shade predicted ∈ measured·[1/high, 1/low], the interval's width.
    Returns the Axes.
    """
    if not groups:
        raise ValueError("predicted_vs_measured needs at least one group")
    with house_style():
        ax = _axes(ax)
        values = []
        for i, (label, measured, predicted) in enumerate(groups):
            measured, predicted = [float(x) for x in measured], [float(x) for x in predicted]
            if len(measured) != len(predicted):
                raise ValueError(f"{label}: {len(measured)} measured but {len(predicted)} predicted")
            if any(not (x > 0) for x in measured + predicted):
                raise ValueError(f"{label}: speedups must be positive numbers")
            values += measured + predicted
            ax.plot(measured, predicted, color=PALETTE[i % len(PALETTE)], marker=MARKERS[i % len(MARKERS)],
                    label=f"measured: {label}", **{**MEASURED, "markersize": 6})
        lo, hi = min(values) / 1.1, max(values) * 1.1
        line = np.geomspace(lo, hi, 50)
        ax.plot(line, line, color="0.2", linewidth=1, label="model = measured")
        if band is not None:
            ax.fill_between(line, line / band[1], line / band[0], color="0.5", alpha=0.15, linewidth=0,
                            label=f"model: its interval (×{band[0]:.2f}–×{band[1]:.2f})")
        ax.axhline(1, color="0.4", linestyle="--", linewidth=1, label="S = 1 (no gain)")
        ax.axvline(1, color="0.4", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ticks = [t for t in (0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8) if lo <= t <= hi]
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("Measured speedup S (× plain decoding, published)")
        ax.set_ylabel("Predicted speedup S (×, held out)")
        _title(ax, title or "The model against the published record")
        _legend(ax, source, loc="upper left")
    return ax


# ----------------------------------------------------------------------------------------------
# held-out residuals against what might explain them (Chapter 6)


RESIDUAL_PANELS = (("batch", "Batch B (sequences)"), ("verify_rows", "Verify rows B·(k+1) (tokens per pass)"),
                   ("drafted", "Tokens each sequence drafts (k, or the tree's)"), ("engine", "Engine (weight bits)"))


def residual_panels(rows: Sequence[dict], *, panels=RESIDUAL_PANELS, title: str, source: str | None = None,
                    band: Sequence | None = None, band_label: str = "model: its band"):
    """Held-out errors log(predicted / measured) against what might explain them, one panel per quantity:
    numeric ones on a log2 x axis, ``engine`` as categories (with the weight bits), one marker colour and
    shape per published source, zero (an exact prediction) marked. ``rows``: ``calibrate.residual_rows``.
    ``band``: ``(batch, low, median, high)`` errors to draw on the batch panel (the band as a function of
    B: shaded between low and high, the median as a line). Returns the figure."""
    if not rows:
        raise ValueError("residual_panels needs at least one row")
    sources = list(dict.fromkeys(r["source"] for r in rows))
    fig, axes = figure(len(panels), ncols=MAX_COLUMNS, sharey=True)
    axes = [axes] if len(panels) == 1 else axes
    with house_style():
        for i, (ax, (key, label)) in enumerate(zip(axes, panels, strict=True)):
            if key == "engine":
                names = sorted({f"{r['engine']} ({r['weight_bits']}-bit)" for r in rows})
                place = {n: i for i, n in enumerate(names)}
                x = lambda r, place=place: place[f"{r['engine']} ({r['weight_bits']}-bit)"]
            else:
                x = lambda r, key=key: r[key]
            for j, s in enumerate(sources):
                mine = [r for r in rows if r["source"] == s]
                ax.plot([x(r) for r in mine], [r["error"] for r in mine], color=PALETTE[j % len(PALETTE)],
                        marker=MARKERS[j % len(MARKERS)], label=f"measured: {s} ({len(mine)})",
                        **{**MEASURED, "markersize": 6})
            ax.axhline(0, color="0.2", linewidth=1, label="model = measured")
            if band is not None and key == "batch":
                b, lo, mid, hi = (list(col) for col in zip(*band, strict=True))
                ax.fill_between(b, lo, hi, color="0.5", alpha=0.2, linewidth=0, label=band_label)
                ax.plot(b, mid, color="0.3", linestyle="--", linewidth=1.5, label="model: its central estimate")
            if key == "engine":
                ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
                ax.set_xlim(-0.5, len(names) - 0.5)
                ax.grid(False, axis="x")
            else:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xlabel(label)
            if i % MAX_COLUMNS == 0:
                ax.set_ylabel("log(predicted / measured)")
        fig.suptitle(title, fontweight="bold")
        axes[0].legend(title=source)
        shared_legend(fig, axes)
    return fig
