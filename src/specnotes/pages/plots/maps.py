"""The speedup S(B, L) over batch size and context length as a heatmap, with S = 1, memory and the regimes' boundaries
(``speedup_map``, Chapter 5)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specnotes.pages.plots.style import MIN_FONT, _axes, _legend, _plain_log_ticks, _title, house_style


def _log_edges(values: Sequence[float]) -> np.ndarray:
    """Cell edges for a log axis: geometric midpoints, the outer edges mirrored."""
    v = np.asarray(values, dtype=float)
    if len(v) == 1:
        return np.array([v[0] / 2 ** 0.5, v[0] * 2 ** 0.5])
    mid = np.sqrt(v[:-1] * v[1:])
    return np.concatenate([[v[0] ** 2 / mid[0]], mid, [v[-1] ** 2 / mid[-1]]])


def speedup_map(ax=None, batches: Sequence[int] = (), contexts: Sequence[int] = (), speedup=(), *,
                max_batch: Sequence[int | None] | None = None, boundaries: dict | None = None,
                labels: Sequence[tuple[str, float, float]] = (), vmin: float = 0.25, vmax: float = 4.0,
                colorbar: bool = True, legend: bool = True, title: str | None = None, source: str | None = None):
    """Heatmap of the speedup S(B, L) (model), log2 axes, diverging at S = 1: blue pays, red costs.

    speedup: rows per context, columns per batch (``speedup[i][j]`` at ``contexts[i]``, ``batches[j]``).
    max_batch: the largest batch that fits at each context (``cost.max_batch``); batches beyond it are
        hatched grey ("does not fit"). None entries: no limit.
    boundaries: ``{"A | B": (batches, contexts)}`` polylines (``context.regime_boundaries``), drawn dashed.
    labels: ``(text, B, L)`` notes written on the map (the regimes' names, say).
    The black line is the S = 1 contour. Colours saturate at ``vmin`` and ``vmax``. The legend sits under
    the axes (``legend=False`` leaves it out, e.g. on the second of two panels). Returns the Axes.
    """
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    s = np.asarray(speedup, dtype=float)
    if s.ndim != 2 or s.shape != (len(contexts), len(batches)) or s.size == 0:
        raise ValueError(f"speedup must be {len(contexts)} rows (contexts) × {len(batches)} columns (batches), "
                         f"got shape {s.shape}")
    if min(batches) < 1 or min(contexts) < 1:
        raise ValueError("batches and contexts must be >= 1 on log axes (L = 0 has no place on a log scale)")
    if max_batch is not None and len(max_batch) != len(contexts):
        raise ValueError(f"max_batch has {len(max_batch)} entries for {len(contexts)} contexts")
    if not 0 < vmin < 1 < vmax:
        raise ValueError(f"need 0 < vmin < 1 < vmax, got {vmin}, {vmax}")
    bx, ly = _log_edges(batches), _log_edges(contexts)
    with house_style():
        ax = _axes(ax)
        mesh = ax.pcolormesh(bx, ly, s, cmap="RdBu", norm=TwoSlopeNorm(1.0, vmin, vmax), shading="flat")
        handles = []
        if s.min() < 1 < s.max():
            ax.contour(np.asarray(batches, float), np.asarray(contexts, float), s, levels=[1.0], colors="black",
                       linewidths=2)
            handles.append(Line2D([], [], color="black", linewidth=2, label="model: S = 1 (break-even)"))
        if max_batch is not None and any(m is not None and m < batches[-1] for m in max_batch):
            limit = [bx[-1] if m is None else min(max(m + 0.5, bx[0]), bx[-1]) for m in max_batch]
            edges = np.repeat(ly, 2)[1:-1]
            ax.fill_betweenx(edges, np.repeat(limit, 2), bx[-1], facecolor="0.55", alpha=0.85, hatch="//",
                             edgecolor="0.3", linewidth=0)
            handles.append(Patch(facecolor="0.55", hatch="//", edgecolor="0.3",
                                 label="model: does not fit in memory (weights + both KV caches)"))
        for i, (name, (xs, ys)) in enumerate((boundaries or {}).items()):
            style = ("--", ":", "-.")[i % 3]
            ax.plot(xs, ys, color="0.1", linestyle=style, linewidth=1.4)
            handles.append(Line2D([], [], color="0.1", linestyle=style, linewidth=1.4,
                                  label=f"model: regime boundary, {name}"))
        for text, b, ell in labels:
            ax.annotate(text, (b, ell), ha="center", va="center", fontsize=MIN_FONT, fontweight="bold", color="0.1",
                        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.7, "edgecolor": "none"})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        _plain_log_ticks(ax)
        ax.set_xlim(bx[0], bx[-1])
        ax.set_ylim(ly[0], ly[-1])
        ax.grid(False)
        ax.set_xlabel("Batch size B (sequences)")
        ax.set_ylabel("Context length L (tokens)")
        _title(ax, title or "Speculative decoding speedup S(B, L), roofline model")
        if colorbar:
            bar = ax.figure.colorbar(mesh, ax=ax, extend="both")
            bar.set_label("S(B, L), model (× plain decoding)")
        if handles and legend:
            _legend(ax, source, handles=handles, below=True)
    return ax
