"""Plots in one house style: measured = markers, modelled = lines, units on every axis, text a reader can read.

Introduced in chapter 1 (``01_roofline_decode``); ``speedup_vs_k`` and ``bars`` in chapter 3. Every
function takes an optional ``ax``, draws on it, and returns it (``ax.figure`` is the figure); none
calls ``plt.show()``. Every plot has a title, units on both axes, and a legend whose entries start
with ``measured:`` or ``model:``.

Legible where it is shown: the website shows a figure in its content column, scaled down to fit and never
up (``COLUMN_PX``), so a figure's text shrinks with the figure's width. ``figure()`` makes every figure
``WIDTH`` inches wide with no text under ``MIN_FONT`` points, which renders at ``MIN_RENDERED_PX`` or more
on a 1280-px screen and on a 390-px phone; ``legibility(fig)`` measures a figure against that, and in a
Jupyter kernel every figure's PNG records the size of its smallest text (``FONT_RECORD``), which the
website's browser test reads back (tests/test_browser.py). More panels than fit: split them into figures.

Depends on matplotlib and numpy only; roofs can be :class:`specnotes.analytic.hardware.Accelerator` rows or
measured ``(bandwidth, flops)`` pairs such as :func:`specnotes.measure.measured_roofline` returns.

One module per job: ``style`` (the house style above: colours, ``figure``, legends, ticks, legibility, the PNG
record) and the plots by what they draw, each on ``style`` alone: ``roofs`` (the roofline), ``batch`` (time and S(B)
against batch size, by GPU, shaded ranges), ``maps`` (S(B, L)), ``sweeps`` (against context length, k and tokens per
weight read), ``bar_charts`` (grouped bars), ``timeline`` (one iteration to scale), ``predictions`` (the model
against the published record), ``time_split`` (a pass's time by term, ``cost.breakdown``), ``kv_cache`` (Chapter
9's paged cache and hit rules) and ``positions`` (Chapter 11: acceptance by draft position, policies against B).
The names below are this package's face (``plots.figure``); a new family of plots is
a new module here.
"""

from specnotes.pages.plots.bar_charts import bars
from specnotes.pages.plots.batch import shade_batches, speedup_by_gpu, speedup_vs_batch, time_vs_batch
from specnotes.pages.plots.kv_cache import (
    COINCIDE,
    HIT_LABEL,
    SLOT_COLORS,
    SLOT_LABELS,
    WRITTEN_EDGE,
    WRITTEN_LABEL,
    cache_story,
    paged_cache,
    recompute_vs_hit_rate,
)
from specnotes.pages.plots.maps import speedup_map
from specnotes.pages.plots.positions import acceptance_by_position, policies_vs_batch
from specnotes.pages.plots.predictions import RESIDUAL_PANELS, predicted_vs_measured, residual_panels
from specnotes.pages.plots.roofs import roofline
from specnotes.pages.plots.style import (
    COLUMN_PX,
    DPI,
    FONT_RECORD,
    LEGEND_INSIDE,
    LEGEND_RECORD,
    MARKERS,
    MAX_COLUMNS,
    MEASURED,
    MEASURED_ROOF,
    MIN_FONT,
    MIN_RENDERED_PX,
    MODEL,
    PALETTE,
    STYLE,
    WIDTH,
    check_legible,
    clear_legends,
    figure,
    figure_png,
    font_record,
    house_style,
    image_html,
    legend,
    legend_overlaps,
    legibility,
    natural_width_px,
    plain_log_ticks,
    rendered_px,
    set_title,
    shared_legend,
    text_sizes,
)
from specnotes.pages.plots.sweeps import ratio_vs_context, ratio_vs_tokens, speedup_vs_k, time_vs_context
from specnotes.pages.plots.time_split import TERM_STYLE, split_by_batch, time_split
from specnotes.pages.plots.timeline import PASS_COLORS, PASS_NAMES, iteration_rows, iteration_timeline

__all__ = [
    "acceptance_by_position", "policies_vs_batch",
    "COINCIDE", "COLUMN_PX", "DPI", "FONT_RECORD", "HIT_LABEL", "LEGEND_INSIDE", "LEGEND_RECORD", "MARKERS",
    "MAX_COLUMNS", "MEASURED", "MEASURED_ROOF", "MIN_FONT", "MIN_RENDERED_PX", "MODEL", "PALETTE", "PASS_COLORS",
    "PASS_NAMES", "RESIDUAL_PANELS", "SLOT_COLORS", "SLOT_LABELS", "STYLE", "TERM_STYLE", "WIDTH", "WRITTEN_EDGE",
    "WRITTEN_LABEL", "bars", "cache_story", "check_legible", "clear_legends", "figure", "figure_png", "font_record",
    "house_style", "image_html", "iteration_rows", "iteration_timeline", "legend", "legend_overlaps", "legibility",
    "natural_width_px", "paged_cache", "plain_log_ticks", "predicted_vs_measured", "ratio_vs_context",
    "ratio_vs_tokens", "recompute_vs_hit_rate", "rendered_px", "residual_panels", "roofline", "set_title",
    "shade_batches", "shared_legend", "speedup_by_gpu", "speedup_map", "speedup_vs_batch", "speedup_vs_k",
    "split_by_batch", "text_sizes", "time_split", "time_vs_batch", "time_vs_context",
]
