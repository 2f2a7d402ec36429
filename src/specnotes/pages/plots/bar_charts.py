"""Grouped bars, measured filled and modelled hollow: a histogram against the distributions a model predicts (``bars``,
Chapter 3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import NullFormatter

from specnotes.pages.plots.style import PALETTE, _axes, _kind, _legend, _title, house_style


def bars(ax=None, categories: Sequence = (), series: Sequence = (), *, xlabel: str, ylabel: str,
         title: str, source: str | None = None):
    """Grouped bars, one group per category: a histogram against the distributions a model predicts.

    series: ``(label, values, "model" | "measured")``, one value per category; measured bars are
        filled, modelled ones hollow (outlined in their colour). xlabel, ylabel: name the unit.
    Returns the Axes.
    """
    categories = [str(c) for c in categories]
    if not categories or not series:
        raise ValueError("bars needs categories and at least one series")
    width = 0.8 / len(series)
    x = np.arange(len(categories))
    with house_style():
        ax = _axes(ax)
        for j, (label, values, kind) in enumerate(series):
            values = [float(v) for v in values]
            if len(values) != len(categories):
                raise ValueError(f"{label}: {len(values)} values for {len(categories)} categories")
            color = PALETTE[j % len(PALETTE)]
            style = {"color": color} if _kind(kind) == "measured" else {
                "facecolor": "none", "edgecolor": color, "linewidth": 1.5, "hatch": "//"}
            ax.bar(x + (j - (len(series) - 1) / 2) * width, values, width=width, label=f"{kind}: {label}", **style)
        ax.set_xticks(x, categories)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(False, axis="x")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        _title(ax, title)
        _legend(ax, source, loc="best")
    return ax
