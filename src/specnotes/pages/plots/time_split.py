"""The time of a pass or an iteration split by term, as stacked bars (``time_split``), and the split of an iteration
against the decode steps it replaces, batch by batch (``split_by_batch``): where a speedup goes (issue 42)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import NullFormatter

from specnotes.analytic.cost.split import TERMS
from specnotes.pages.plots.style import PALETTE, _axes, _legend, _time_unit, _title, house_style

# One colour and one hatch a term, the same in every figure: memory terms blue-green, compute orange-red, links
# purple and black, fixed costs grey; a hatch tells apart the two that share a hue.
TERM_STYLE = {
    "dense weights": {"color": PALETTE[0]},
    "expert weights": {"color": PALETTE[5]},
    "target KV": {"color": PALETTE[2]},
    "draft KV": {"color": PALETTE[2], "hatch": "//"},
    "matmul FLOPs": {"color": PALETTE[1]},
    "attention FLOPs": {"color": PALETTE[4]},
    "all-reduce": {"color": PALETTE[3]},
    "all-to-all": {"color": PALETTE[3], "hatch": ".."},
    "fixed": {"color": "0.6"},
    "host": {"color": "0.35", "hatch": ".."},
}


def time_split(ax=None, labels: Sequence = (), splits: Sequence = (), *, title: str, xlabel: str,
               ylabel: str | None = None, source: str | None = None, reference: tuple[float, str] | None = None,
               seconds: bool = True):
    """Stacked bars, one per label, each split by term (``cost.TERMS``, bottom first, coloured by
    ``TERM_STYLE``): ``splits`` holds one {term: value} per label (``Breakdown.totals(...)``, ``PassSplit.seconds``
    or ``Breakdown.relative()``). ``seconds``: the values are seconds (the axis gets a time unit); else
    ``ylabel`` names their unit. ``reference``: (value, label), a dashed line across the bars. The legend, under the
    axes, names only the terms that appear. Every bar is the model's (``cost.breakdown``). Returns the Axes."""
    labels = [str(x) for x in labels]
    if not labels or len(labels) != len(splits):
        raise ValueError(f"time_split needs one split per label; got {len(labels)} labels and {len(splits)} splits")
    for label, split in zip(labels, splits, strict=True):
        unknown = set(split) - set(TERMS)
        if unknown:
            raise ValueError(f"{label}: not terms of cost.TERMS: {sorted(unknown)}")
        if any(not np.isfinite(v) or v < 0 for v in split.values()):
            raise ValueError(f"{label}: a term's value must be finite and at least 0; got {split}")
    if not seconds and not ylabel:
        raise ValueError("ylabel: name the unit of the values when they are not seconds")
    top = max(sum(s.values()) for s in splits)
    scale, unit = _time_unit(top) if seconds else (1.0, "")
    x = np.arange(len(labels))
    shown = [t for t in TERMS if any(s.get(t, 0) > 0 for s in splits)]
    with house_style():
        ax = _axes(ax)
        bottom, handles = np.zeros(len(labels)), []
        for term in shown:
            values = np.array([s.get(term, 0.0) for s in splits]) / scale
            style = TERM_STYLE[term]
            handles.append(ax.bar(x, values, 0.7, bottom=bottom, color=style["color"], hatch=style.get("hatch"),
                                  edgecolor="white", linewidth=0.6, label=f"model: {term}"))
            bottom += values
        if reference is not None:
            handles.append(ax.axhline(reference[0] / scale, color="0.2", linestyle="--", linewidth=1.2,
                                      label=reference[1]))
        ax.set_xticks(x, labels)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(False, axis="x")
        ax.set_ylabel(f"time ({unit})" if seconds and not ylabel else f"{ylabel} ({unit})" if seconds else ylabel)
        _title(ax, title)
        _legend(ax, source, below=True, handles=handles)
    return ax


def split_by_batch(ax=None, breakdowns: Sequence = (), *, title: str, tokens: float | None = None,
                   source: str | None = None):
    """Each iteration's time in decode steps, split by term, one bar per batch: ``Breakdown.relative()`` of each
    of ``breakdowns`` (one per batch), so a bar's height is T_iter/T_decode = E[N]/S. ``tokens``: the mean tokens
    an iteration yields (E[N]); its dashed line marks S = 1, so a bar under it is a batch where speculation
    pays and a bar over it one where it loses. Returns the Axes."""
    if not breakdowns:
        raise ValueError("split_by_batch needs at least one cost.breakdown")
    reference = None if tokens is None else (float(tokens), f"E[N] = {tokens:.2f}: above it S < 1")
    return time_split(ax, [f"{b.batch:,}" for b in breakdowns], [b.relative() for b in breakdowns], title=title,
                      xlabel="batch size B (sequences)", ylabel="iteration time / decode step", source=source,
                      reference=reference, seconds=False)
