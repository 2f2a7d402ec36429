"""Curves against the other swept quantities: context length (``time_vs_context``, ``ratio_vs_context``, Chapter 5),
the drafted tokens k (``speedup_vs_k``, Chapter 3) and the tokens per weight read (``ratio_vs_tokens``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specnotes.pages.plots.style import (
    MARKERS,
    MEASURED,
    MODEL,
    PALETTE,
    _axes,
    _curve,
    _legend,
    _plain_log_ticks,
    _time_unit,
    _title,
    house_style,
)

# ----------------------------------------------------------------------------------------------
# against context length (Chapter 5)


def _context_curves(ax, curves, scale: float = 1.0):
    """Draw (label, contexts, values, "measured" | "model") curves: model lines, measured markers; a
    measured curve and a model curve with the same label share a colour."""
    colors: dict[str, str] = {}
    for label, contexts, values, kind in curves:
        if kind not in ("model", "measured"):
            raise ValueError(f"curve kind must be 'model' or 'measured', got {kind!r}")
        if len(contexts) != len(values) or not len(contexts):
            raise ValueError(f"{label}: {len(contexts)} contexts but {len(values)} values")
        color = colors.setdefault(label, PALETTE[len(colors) % len(PALETTE)])
        style = MODEL if kind == "model" else {**MEASURED, "marker": MARKERS[(len(colors) - 1) % len(MARKERS)]}
        ax.plot(list(contexts), [v / scale for v in values], color=color, label=f"{kind}: {label}", **style)


def time_vs_context(ax=None, curves: Sequence = (), *, title: str | None = None, source: str | None = None):
    """Log-log time against context length L. curves: ``(label, contexts, seconds, "measured" | "model")``;
    a measured and a model curve with the same label share a colour. Returns the Axes."""
    if not curves:
        raise ValueError("time_vs_context needs at least one curve")
    scale, unit = _time_unit(max(max(c[2]) for c in curves))
    with house_style():
        ax = _axes(ax)
        _context_curves(ax, curves, scale)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_xlabel("Context length L (cached tokens per sequence)")
        ax.set_ylabel(f"Time ({unit})")
        _title(ax, title or "Time against context length")
        _legend(ax, source, loc="best")
    return ax


def ratio_vs_context(ax=None, curves: Sequence = (), *, ylabel: str = "Verify / decode time (×)",
                     title: str | None = None, source: str | None = None):
    """A ratio (verify/decode time, say) against context length L, log2 x axis, 1 marked. curves:
    ``(label, contexts, ratios, "measured" | "model")``. Returns the Axes."""
    if not curves:
        raise ValueError("ratio_vs_context needs at least one curve")
    with house_style():
        ax = _axes(ax)
        _context_curves(ax, curves)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="1 (verify costs a decode)")
        ax.set_xscale("log", base=2)
        _plain_log_ticks(ax)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Context length L (cached tokens per sequence)")
        ax.set_ylabel(ylabel)
        _title(ax, title or "Verify pass over decode pass against context length")
        _legend(ax, source, loc="best")
    return ax


# ----------------------------------------------------------------------------------------------
# speedup vs k


def speedup_vs_k(ax=None, curves: Sequence = (), *, best: bool = False, title: str | None = None,
                 source: str | None = None):
    """Speedup of speculative decoding against k, the drafted tokens per iteration, with S = 1 marked.

    curves: ``(label, ks, speedups, "model" | "measured")``, for a measured curve optionally a fifth
        element ``(lows, highs)``, the spread of each point (drawn as error bars). Model curves are
        lines, measured ones markers. best: mark each model curve's highest point with a star.
    Returns the Axes.
    """
    if not curves:
        raise ValueError("speedup_vs_k needs at least one curve")
    with house_style():
        ax = _axes(ax)
        for i, (label, ks, speedups, kind, *spread) in enumerate(curves):
            ks, speedups = list(ks), [float(v) for v in speedups]
            if len(ks) != len(speedups):
                raise ValueError(f"{label}: {len(ks)} values of k but {len(speedups)} speedups")
            errors = None
            if spread and kind == "measured":
                lows, highs = spread[0]
                errors = [[s - lo for s, lo in zip(speedups, lows, strict=True)],
                          [hi - s for s, hi in zip(speedups, highs, strict=True)]]
            color = _curve(ax, i, label, ks, speedups, kind, errors, capsize=4)
            if best and kind == "model":
                top = int(np.argmax(speedups))
                ax.plot([ks[top]], [speedups[top]], color=color, marker="*", markersize=14, linestyle="none")
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="S = 1 (no gain)")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Draft tokens per iteration, k")
        ax.set_ylabel("Speedup S (× plain decoding)")
        _title(ax, title or "Speculative decoding speedup vs k")
        _legend(ax, source, loc="best")
    return ax


# ----------------------------------------------------------------------------------------------
# verify vs decode


def ratio_vs_tokens(ax=None, curves: Sequence = (), *, k: int, title: str | None = None, source: str | None = None):
    """Time of a pass relative to a plain decode pass, against the tokens per weight read (log2 x axis),
    with 1 (free) and k + 1 (fully compute-bound verify) marked.

    curves: ``(label, tokens, ratios, "model" | "measured")``; curves of the same label stem share a
        colour in the order given (a model line, then its measured markers).
    Returns the Axes.
    """
    if not curves:
        raise ValueError("ratio_vs_tokens needs at least one curve")
    with house_style():
        ax = _axes(ax)
        for i, (label, tokens, ratios, kind) in enumerate(curves):
            if kind not in ("model", "measured"):
                raise ValueError(f"curve kind must be 'model' or 'measured', got {kind!r}")
            if len(tokens) != len(ratios):
                raise ValueError(f"{label}: {len(tokens)} x values but {len(ratios)} ratios")
            color = PALETTE[(i // 2) % len(PALETTE)]
            style = MODEL if kind == "model" else {**MEASURED, "marker": MARKERS[(i // 2) % len(MARKERS)]}
            ax.plot(list(tokens), list(ratios), color=color, label=f"{kind}: {label}", **style)
        ax.axhline(1, color="0.4", linestyle="--", linewidth=1, label="1: as cheap as a decode pass")
        ax.axhline(k + 1, color="0.4", linestyle=":", linewidth=1, label=f"k + 1 = {k + 1}: verify fully compute-bound")
        ax.set_xscale("log", base=2)
        _plain_log_ticks(ax)
        ax.set_xlabel("Tokens per weight read in the pass (B(k+1) or B+k)")
        ax.set_ylabel("Pass time / decode pass time (×)")
        _title(ax, title or "What verifying costs, relative to decoding")
        _legend(ax, source, loc="best")
    return ax
