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

Depends on matplotlib and numpy only; roofs can be :class:`specnotes.hardware.Accelerator` rows or
measured ``(bandwidth, flops)`` pairs such as :func:`specnotes.measure.measured_roofline` returns.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullFormatter

# Okabe-Ito: distinguishable with every common form of colour blindness, and in greyscale by marker.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h"]
MEASURED = {"linestyle": "none", "markersize": 7, "markeredgecolor": "white", "markeredgewidth": 0.8}
MODEL = {"linestyle": "-", "linewidth": 2.0, "alpha": 0.9}
MEASURED_ROOF = {"linestyle": "--", "linewidth": 2.0}

# Where the website shows a figure: its content column, in CSS px, at a 1280-px window and on a 390-px phone
# (measured in chromium; tests/test_browser.py measures every figure again). A figure wider than the column is
# scaled down to fit, so text of s points in a figure w inches wide renders at s·column/(72·w) px there.
COLUMN_PX = {"desktop": 672, "phone": 342}
MIN_RENDERED_PX = {"desktop": 9.0, "phone": 7.0}  # the smallest text a reader can read, in CSS px
MIN_FONT = 10.0  # points: no text in a figure is smaller
WIDTH = 6.4  # inches: MIN_FONT on it renders at 10·342/(72·6.4) = 7.4 px on the phone, 14.6 px at 1280 px
DPI = 110  # 6.4 in = 704 px: about the desktop column, so a figure is shown near its natural size there
MAX_COLUMNS = 2  # panels side by side in one figure: a third column leaves no room for a MIN_FONT legend
# The PNG text chunk where a figure's smallest text is recorded, in the PNG's own pixels (pt · dpi / 72)
FONT_RECORD = "specnotes.min_font_px"

STYLE = {
    "figure.figsize": (WIDTH, 4.4),
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "font.size": MIN_FONT,
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 10.5,
    "xtick.labelsize": MIN_FONT,
    "ytick.labelsize": MIN_FONT,
    "figure.titlesize": 12,
    "figure.titleweight": "bold",
    "axes.grid": True,
    "axes.grid.which": "both",
    "grid.alpha": 0.25,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": plt.cycler(color=PALETTE),
    "legend.frameon": False,
    "legend.fontsize": MIN_FONT,
    "legend.title_fontsize": MIN_FONT,
    "lines.linewidth": 2.0,
}


@contextlib.contextmanager
def house_style():
    """``with house_style(): ...``: the book's rcParams inside the block only.

    Whether pyplot is interactive is not style: a notebook's inline backend switches it on when the
    kernel's first figure is made, and if that happens inside the block it must stay on after it,
    or no later figure of the notebook is shown."""
    with plt.rc_context(STYLE):
        yield
        interactive = plt.isinteractive()
    plt.interactive(interactive)


def figure(panels: int = 1, *, ncols: int = 1, height: float | None = None, **subplots):
    """A new figure in the house style, ``WIDTH`` inches wide: ``(fig, ax)`` for one panel, ``(fig, axes)`` (a
    list, row by row) for several. ``panels`` fill ``ncols`` columns (at most ``MAX_COLUMNS``; 1: stacked, how
    a phone reads best); a grid cell left over is hidden. height: inches in all (default 4.4 for one panel,
    3.6 per row of several). ``subplots``: keyword arguments of ``plt.subplots`` (sharex, sharey, ...); the
    layout is "constrained": labels and legends outside the axes shrink the axes, not widen the figure (so
    call no ``fig.tight_layout()``).
    More panels than read well in one figure (a grid of 6 or 8): make several figures, one cell each."""
    if not (isinstance(panels, int) and panels >= 1) or not (isinstance(ncols, int) and 1 <= ncols <= MAX_COLUMNS):
        raise ValueError(f"need panels >= 1 and 1 <= ncols <= {MAX_COLUMNS} (split more panels into several "
                         f"figures); got panels={panels!r}, ncols={ncols!r}")
    ncols = min(ncols, panels)
    nrows = math.ceil(panels / ncols)
    if height is None:
        height = 4.4 if panels == 1 else 3.6 * nrows
    with house_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, height), squeeze=False,
                                 **{"layout": "constrained", **subplots})
    axes = list(axes.flat)
    for ax in axes[panels:]:
        ax.set_visible(False)
    return (fig, axes[0]) if panels == 1 else (fig, axes[:panels])


def shared_legend(fig, axes):
    """One legend under all of ``fig``'s panels, for a grid whose panels would each repeat it (a legend under one
    narrow panel would also squeeze its column): the first of ``axes``' legends (an Axes or a list of them),
    moved under the figure; the others removed, and the height their legends added to the figure given back.
    Returns the figure's legend."""
    axes = [axes] if not isinstance(axes, Sequence) else list(axes)
    legends = [ax.get_legend() for ax in axes]
    if not axes or legends[0] is None:
        raise ValueError("shared_legend: the (first) axes has no legend to share (draw it with its legend first)")
    leg = legends[0]
    handles, labels = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
    title = leg.get_title().get_text() or None
    root = fig.get_figure(root=True)
    for other in legends:
        if other is not None:
            root.set_figheight(root.get_figheight() - getattr(other, "specnotes_added_height", 0.0))
            other.remove()
    ncol = _legend_columns(labels)
    with house_style():
        shared = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, title=title, frameon=False)
    if title:
        shared.get_title().set_color("0.35")
    if isinstance(root.get_layout_engine(), ConstrainedLayoutEngine):  # its lines add to the figure's height
        root.set_figheight(root.get_figheight() + 0.22 * (math.ceil(len(labels) / ncol) + bool(title)) + 0.1)
    return shared


# ----------------------------------------------------------------------------------------------
# legibility: the smallest text of a figure, at the width the website shows it


def text_sizes(fig) -> list[tuple[float, str]]:
    """(size in points, text) of every piece of text ``fig`` draws, read by drawing it with a renderer that
    records its text and paints nothing (tick labels, legends, annotations: what a reader sees)."""
    from matplotlib.backends.backend_agg import RendererAgg

    width, height = fig.get_size_inches() * fig.dpi
    renderer = RendererAgg(max(1, int(width)), max(1, int(height)), fig.dpi)
    drawn: list[tuple[float, str]] = []

    def draw_text(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if s.strip() and gc.get_alpha() != 0:
            # mathtext draws a super- or subscript at 0.7 of the size (matplotlib's SHRINK_FACTOR)
            script = ismath and any(c in s for c in "^_")
            drawn.append((float(prop.get_size_in_points()) * (0.7 if script else 1.0), s))

    renderer.draw_text = draw_text
    renderer.draw_tex = draw_text
    for name in ("draw_path", "draw_markers", "draw_path_collection", "draw_quad_mesh", "draw_image",
                 "draw_gouraud_triangles"):
        setattr(renderer, name, lambda *args, **kwargs: None)
    fig.draw(renderer)
    return drawn


def natural_width_px(fig, dpi: float | None = None) -> float:
    """The width in pixels of ``fig`` saved as the notebooks save it (``bbox_inches="tight"``, the default pad)."""
    dpi = fig.dpi if dpi is None else dpi
    fig.draw_without_rendering()  # as savefig does first: the layout engine places everything
    return (fig.get_tightbbox().width + 2 * plt.rcParams["savefig.pad_inches"]) * dpi


def rendered_px(font_px: float, natural_px: float, shown_px: float) -> float:
    """How tall text of ``font_px`` image pixels renders, in CSS px, in an image ``natural_px`` wide shown
    ``shown_px`` wide."""
    return font_px * shown_px / natural_px


def legibility(fig) -> dict:
    """The smallest text of ``fig`` and what it renders at on the website: {"font_pt", "text", "natural_px",
    "desktop_px", "phone_px", "legible"}; shown at min(natural width, ``COLUMN_PX``) on each screen."""
    sizes = text_sizes(fig)
    if not sizes:
        raise ValueError("the figure draws no text: it needs a title and axis labels")
    font_pt, text = min(sizes)
    natural = natural_width_px(fig)
    font_px = font_pt * fig.dpi / 72
    out = {"font_pt": font_pt, "text": text, "natural_px": natural}
    for screen, column in COLUMN_PX.items():
        out[f"{screen}_px"] = rendered_px(font_px, natural, min(natural, column))
    out["legible"] = all(out[f"{screen}_px"] >= limit for screen, limit in MIN_RENDERED_PX.items())
    return out


def check_legible(fig) -> dict:
    """``legibility(fig)``, or ValueError naming the smallest text and what it renders at."""
    found = legibility(fig)
    if not found["legible"]:
        raise ValueError(
            f"{found['text']!r} ({found['font_pt']:g} pt in a figure {found['natural_px']:.0f} px wide) renders at "
            f"{found['desktop_px']:.1f} px at 1280 px and {found['phone_px']:.1f} px on a phone; the least is "
            f"{MIN_RENDERED_PX['desktop']:g} and {MIN_RENDERED_PX['phone']:g}: make the figure with plots.figure() "
            f"(WIDTH = {WIDTH} in) and no text under MIN_FONT = {MIN_FONT:g} pt")
    return found


def font_record(fig, dpi: float | None = None) -> dict[str, str]:
    """PNG text chunks for ``fig`` saved at ``dpi``: its smallest text, in the PNG's pixels (``FONT_RECORD``),
    in points, and what it says (for the browser test's messages)."""
    dpi = fig.dpi if dpi is None else dpi
    sizes = text_sizes(fig)
    if not sizes:
        return {}
    font_pt, text = min(sizes)
    return {FONT_RECORD: f"{font_pt * dpi / 72:.3f}", "specnotes.min_font_pt": f"{font_pt:g}",
            "specnotes.min_font_text": text[:80].encode("latin-1", "replace").decode("latin-1")}


def figure_png(fig, dpi: float | None = None) -> bytes:
    """``fig`` as the PNG a notebook shows (tight bounding box, at the figure's dpi), with ``font_record``."""
    import io

    dpi = fig.dpi if dpi is None else dpi
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor=fig.get_facecolor(),
                edgecolor=fig.get_edgecolor(), metadata=font_record(fig, dpi))
    return buffer.getvalue()


def _publish(fig):
    """Show ``fig`` in a notebook as IPython would, as a PNG that records its smallest text."""
    import base64

    from IPython.display import publish_display_data

    if not fig.axes and not fig.lines:  # as IPython: nothing for an empty figure
        return
    publish_display_data({"image/png": base64.b64encode(figure_png(fig)).decode("ascii"), "text/plain": repr(fig)})


def _show_figures_with_font_record() -> bool:
    """In a Jupyter kernel with the inline backend: display every matplotlib figure through ``_publish``.
    The IPython display formatter runs before the inline backend's PNG formatter, and the inline backend's
    set-up (when the kernel's first figure is made) leaves it alone, so the order of imports does not matter."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter") or "inline" not in plt.get_backend():
        return False
    from matplotlib.figure import Figure

    shell.display_formatter.ipython_display_formatter.for_type(Figure, _publish)
    return True


_show_figures_with_font_record()


def _tick(value: float, pos=None) -> str:
    """A log axis' tick label as a plain number (64, 4,096, 128k, 0.1), not 2^6: no superscript to shrink."""
    if value >= 16384 and value % 1024 == 0:
        return f"{value / 1024:g}k"
    if value >= 1 and value == int(value):
        return f"{value:,.0f}"
    return f"{value:g}"


class _PlainLogFormatter(LogFormatter):
    """Labels the ticks matplotlib's log formatter would label, as plain numbers (``_tick``)."""

    def __call__(self, x, pos=None):
        return _tick(x) if super().__call__(x, pos) else ""


def _plain_log_ticks(ax):
    """Plain-number tick labels on every log axis of ``ax``."""
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            base = axis.get_transform().base
            axis.set_major_formatter(_PlainLogFormatter(base))
            axis.set_minor_formatter(_PlainLogFormatter(base, labelOnlyBase=False))


def _title(ax, text: str, **kwargs):
    """The axes' title, broken into lines that fit over the axes (matplotlib's own wrapping measures the whole
    figure, so titles of side-by-side panels would run into each other)."""
    import textwrap

    size = kwargs.get("fontsize", plt.rcParams["axes.titlesize"])
    size = size if isinstance(size, int | float) else MIN_FONT * 1.2
    width_in = ax.get_position().width * ax.get_figure(root=True).get_figwidth()
    chars = max(12, int(width_in * 72 / (0.62 * size)))  # a bold character is about 0.62 em wide
    lines = [textwrap.fill(line, chars) for line in str(text).split("\n")]
    return ax.set_title("\n".join(lines), **kwargs)


def _axes(ax):
    if ax is None:
        _, ax = figure()
    return ax


def _flops_unit(max_flops: float) -> tuple[float, str]:
    # TFLOP/s is the top unit: datasheets quote even a B200 as "2250 TFLOP/s"
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if max_flops >= scale:
            return scale, unit
    return 1.0, "FLOP/s"


def _time_unit(max_s: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if max_s >= scale:
            return scale, unit
    return 1e-9, "ns"


LEGEND_INSIDE = 4  # legend entries that may sit on the axes ("best"); more, or a long one, go under the axes


def _legend_columns(labels: Sequence[str]) -> int:
    """1 or 2: as many columns as fit the house width at MIN_FONT (a character is about 0.55 em wide)."""
    longest = max((len(line) for label in labels for line in str(label).split("\n")), default=0)
    return 2 if len(labels) > 2 and longest * 0.55 * MIN_FONT + 40 <= WIDTH * 72 / 2 else 1


def _legend(ax, source: str | None, *, below: bool = False, **kwargs):
    """The legend; ``source`` (where the measurements came from) becomes its title, so it is never
    cropped and sits next to the ``measured:`` entries it qualifies. ``below`` (or a "best" legend with more
    than ``LEGEND_INSIDE`` entries or one over 40 characters): under the axes, where it covers no data, in as
    many columns as fit the house width."""
    handles, labels = kwargs.pop("handles", None), kwargs.pop("labels", None)
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    elif labels is None:
        labels = [h.get_label() for h in handles]
    crowded = len(labels) > LEGEND_INSIDE or max((len(label) for label in labels), default=0) > 40
    if below or (kwargs.get("loc", "best") == "best" and crowded):
        from matplotlib.transforms import ScaledTranslation

        # under the tick labels and the x label: 0.3 in, and 0.2 in per line of the label
        drop = 0.3 + 0.2 * (ax.get_xlabel().count("\n") + 1) if ax.get_xlabel() else 0.35
        kwargs.update(loc="upper center", bbox_to_anchor=(0.5, 0), ncol=_legend_columns(labels),
                      bbox_transform=ax.transAxes + ScaledTranslation(0, -drop, ax.figure.dpi_scale_trans))
    # a light backing box: in a crowded plot the legend stays readable wherever "best" puts it
    leg = ax.legend(handles, labels, title=source, frameon=True, framealpha=0.85, edgecolor="none", **kwargs)
    root = ax.get_figure(root=True)
    if "bbox_transform" in kwargs and isinstance(root.get_layout_engine(), ConstrainedLayoutEngine):
        # a constrained figure would shrink the axes to make room: the legend's lines add to its height instead
        lines = math.ceil(len(labels) / kwargs["ncol"]) + bool(source) + sum(str(lb).count("\n") for lb in labels)
        leg.specnotes_added_height = 0.22 * lines + 0.1  # shared_legend gives it back
        root.set_figheight(root.get_figheight() + leg.specnotes_added_height)
    if source:
        leg.get_title().set_fontsize(MIN_FONT)
        leg.get_title().set_color("0.35")
    return leg


def _point_colors(n: int, first: int) -> list:
    """Up to 6 points: palette colours after the roofs'; more (a sweep): a sequential colormap, so the
    order of the points (e.g. growing B) reads from the colour."""
    if n <= 6:
        return [PALETTE[(first + j) % len(PALETTE)] for j in range(n)]
    cmap = plt.get_cmap("viridis")
    return [cmap(j / max(1, n - 1) * 0.9) for j in range(n)]


# ----------------------------------------------------------------------------------------------
# roofline


def _is_accelerator(obj) -> bool:
    return hasattr(obj, "peak_flops") and hasattr(obj, "mem_bandwidth")


def _pair(obj) -> tuple[float, float] | None:
    """A measured roof as (bandwidth, flops): a MeasuredRoof or a plain 2-sequence of numbers."""
    if hasattr(obj, "bandwidth") and hasattr(obj, "flops"):
        return float(obj.bandwidth), float(obj.flops)
    if isinstance(obj, Sequence) and not isinstance(obj, str) and len(obj) == 2:
        bw, flops = obj
        return float(bw), float(flops)
    return None


def _roof(spec, dtype: str) -> tuple[str, float, float, bool]:
    """Normalize one roof to (label, peak FLOP/s, bandwidth bytes/s, measured?)."""
    if isinstance(spec, str):  # a row name of the accelerator table, e.g. "H100-SXM"
        from specnotes.hardware import accelerator

        spec = accelerator(spec)
    if _is_accelerator(spec):
        return f"{spec.name} ({dtype}, datasheet)", spec.peak(dtype), spec.mem_bandwidth, False
    pair = _pair(spec) if not (isinstance(spec, tuple) and spec and isinstance(spec[0], str)) else None
    if pair is not None:
        return "this device (copy + GEMM)", pair[1], pair[0], True
    if isinstance(spec, Sequence) and not isinstance(spec, str) and spec and isinstance(spec[0], str):
        label, *rest = spec
        if len(rest) == 1 and _is_accelerator(rest[0]):
            return label, rest[0].peak(dtype), rest[0].mem_bandwidth, False
        if len(rest) == 1 and _pair(rest[0]) is not None:
            bw, flops = _pair(rest[0])
            return label, flops, bw, True
        if len(rest) in (2, 3):  # (label, flops_per_s, bytes_per_s[, "measured" | "model"])
            kind = rest[2] if len(rest) == 3 else "model"
            if kind not in ("measured", "model"):
                raise ValueError(f"roof kind must be 'measured' or 'model', got {kind!r}")
            return label, float(rest[0]), float(rest[1]), kind == "measured"
    raise ValueError(
        "a roof is an Accelerator, a measured (bandwidth, flops) pair / MeasuredRoof, (label, Accelerator), "
        f"(label, (bandwidth, flops)) or (label, flops_per_s, bytes_per_s[, 'measured'|'model']); got {spec!r}"
    )


def _point(spec) -> tuple[str, float, float]:
    """Normalize one measured point to (label, intensity FLOP/byte, FLOP/s)."""
    extra = getattr(spec, "extra", None)
    if isinstance(extra, dict) and "intensity" in extra and "flops_per_s" in extra:
        params = getattr(spec, "params", {}) or {}
        label = f"B={params['batch']}" if "batch" in params else spec.name
        return label, float(extra["intensity"]), float(extra["flops_per_s"])
    if isinstance(spec, Sequence) and len(spec) == 3:
        label, ai, flops = spec
        return str(label), float(ai), float(flops)
    raise ValueError(f"a point is (label, intensity, flops_per_s) or a measure.Record; got {spec!r}")


def roofline(ax=None, *, roofs=(), points=(), dtype: str = "bf16", title: str | None = None,
             xlim: tuple[float, float] | None = None, annotate_points: bool | str = "auto",
             source: str | None = None):
    """Log-log roofline: x = arithmetic intensity (FLOP/byte), y = attainable FLOP/s (auto-scaled unit).

    roofs: each draws ``min(peak, AI * bandwidth)`` with its ridge marked. Accepted forms:
        an ``Accelerator`` or its name in ``hardware.ACCELERATORS`` (datasheet: solid line, ``model:`` in
        the legend; peak for ``dtype``); a measured ``(bandwidth, flops)`` pair or ``MeasuredRoof`` (dashed,
        ``measured roof:``); labelled ``(label, Accelerator)``, ``(label, (bandwidth, flops))`` or
        ``(label, flops_per_s, bytes_per_s[, "measured" | "model"])``.
    points: measured points, markers: ``(label, intensity, flops_per_s)`` or ``measure.Record``\\ s from
        :func:`specnotes.measure.matmul_sweep` (labelled ``B=...``).
    annotate_points: write each point's label beside it (``"auto"``: when there are at most 6; more are a sweep,
        one legend entry, its first and last point named).
    source: where the measurements came from (device, dtype), shown as the legend's title.
    Returns the Axes.
    """
    roofs = [_roof(r, dtype) for r in roofs]
    points = [_point(p) for p in points]
    if not roofs and not points:
        raise ValueError("roofline needs at least one roof or one point")
    with house_style():
        ax = _axes(ax)
        ridges = [peak / bw for _, peak, bw, _ in roofs]
        ais = [ai for _, ai, _ in points]
        if xlim is None:
            lo = min(ridges + ais) / 20
            hi = max(ridges + ais) * 10
            xlim = (10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi)))
        ymax = max([peak for _, peak, _, _ in roofs] + [f for _, _, f in points])
        scale, unit = _flops_unit(ymax)
        x = np.logspace(math.log10(xlim[0]), math.log10(xlim[1]), 400)
        ylo = []
        for i, (label, peak, bw, measured) in enumerate(roofs):
            color = PALETTE[i % len(PALETTE)]
            style = MEASURED_ROOF if measured else MODEL
            kind = "measured roof" if measured else "model"
            y = np.minimum(peak, x * bw) / scale
            ylo.append(y[0])
            ax.plot(x, y, color=color, label=f"{kind}: {label}", **style)
            ridge = peak / bw
            ax.plot([ridge], [peak / scale], marker="D", markersize=6, color=color, markerfacecolor="white",
                    linestyle="none")
            ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, peak / scale), xytext=(-6, 6), ha="right",
                        textcoords="offset points", fontsize=MIN_FONT, color=color)
        colors = _point_colors(len(points), len(roofs))
        sweep = len(points) > 6  # one legend entry for the sweep, its ends named on the plot
        if annotate_points == "auto":
            annotate_points = len(points) <= 6
        for j, (label, ai, flops) in enumerate(points):
            entry = f"measured: {points[0][0]} to {points[-1][0]} (dark to light)" if sweep else f"measured: {label}"
            ax.plot([ai], [flops / scale], marker="o" if sweep else MARKERS[j % len(MARKERS)], color=colors[j],
                    label=entry if j == 0 or not sweep else "_nolegend_", **MEASURED)
            ylo.append(flops / scale)
            if annotate_points or (sweep and j in (0, len(points) - 1)):
                ax.annotate(label, (ai, flops / scale), xytext=(5, -10), textcoords="offset points",
                            fontsize=MIN_FONT)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_xlim(*xlim)
        ax.set_ylim(min(ylo) / 3, ymax / scale * 3)
        ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
        ax.set_ylabel(f"Attainable performance ({unit})")
        _title(ax, title or f"Roofline ({dtype}): min(peak, intensity × bandwidth)")
        _legend(ax, source, loc="best")
    return ax


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
        (:class:`specnotes.thesis.Curve`). One colour per GPU, its name written where its curve ends (read
        on a phone too, where a long legend is not); idealized solid, calibrated dashed.
    points: published measurements, objects with ``label``, ``accelerator``, ``batches``, ``speedups``
        (:class:`specnotes.thesis.Points`), markers in their GPU's colour.
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
              "model: idealized, one colour per GPU (named where its curve ends)"]
    with house_style():
        ax = _axes(ax)
        ax.axhspan(0, 1, color="0.5", alpha=0.08, linewidth=0)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        crossings, named = 0, set()
        for c in sorted(curves, key=lambda c: c.model != "idealized"):  # names go on the idealized curves
            color, batches, speedups = colors[c.accelerator], list(c.batches), list(c.speedups)
            if c.model == "idealized":
                ax.plot(batches, speedups, color=color, **MODEL)
            else:
                fit = c.fitted_up_to if c.fitted_up_to is not None else batches[-1]
                inside = [i for i, b in enumerate(batches) if b <= fit]
                ax.plot([batches[i] for i in inside], [speedups[i] for i in inside], color=color,
                        **{**MODEL, "linestyle": "--"})
                text = f"model: calibrated to the published points (fitted on B ≤ {fit})"
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
        for j, p in enumerate(points):
            (line,) = ax.plot(list(p.batches), list(p.speedups), color=colors[p.accelerator],
                              marker=MARKERS[(j + 1) % len(MARKERS)], **MEASURED)
            handles.append(line)
            labels.append(f"measured: {p.label}, {p.accelerator}")
        handles += [Line2D([], [], color="0.3", marker="o", markerfacecolor="white", markeredgewidth=2,
                           linestyle="none"),
                    Line2D([], [], color="0.3", marker="|", markersize=14, markeredgewidth=2.5, linestyle="none")]
        labels += ["model: B*, where S falls to 1 for good", "model: memory full (the largest batch that fits)"]
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlim(0.8, max(c.batches[-1] for c in curves) * 2.6)  # room for the names
        ax.set_ylim(0, top)
        ax.set_xlabel("Batch size B (sequences decoding together)")
        ax.set_ylabel("Speedup S(B) (× plain decoding)")
        _title(ax, title or "Speculative decoding speedup vs batch size, by GPU")
        _legend(ax, source, handles=handles, labels=labels, below=True)
    return ax


# ----------------------------------------------------------------------------------------------
# S(B, L): the speedup over batch size and context length (Chapter 5)


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


def _kind(kind: str) -> str:
    if kind not in ("model", "measured"):
        raise ValueError(f"a series' kind must be 'model' or 'measured', got {kind!r}")
    return kind


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
            ks, speedups, color = list(ks), [float(v) for v in speedups], PALETTE[i % len(PALETTE)]
            if len(ks) != len(speedups):
                raise ValueError(f"{label}: {len(ks)} values of k but {len(speedups)} speedups")
            if _kind(kind) == "model":
                ax.plot(ks, speedups, color=color, label=f"model: {label}", **MODEL)
                if best:
                    top = int(np.argmax(speedups))
                    ax.plot([ks[top]], [speedups[top]], color=color, marker="*", markersize=14, linestyle="none")
            elif spread:
                lows, highs = spread[0]
                errors = [[s - lo for s, lo in zip(speedups, lows, strict=True)],
                          [hi - s for s, hi in zip(speedups, highs, strict=True)]]
                ax.errorbar(ks, speedups, yerr=errors, color=color, marker=MARKERS[i % len(MARKERS)], capsize=4,
                            label=f"measured: {label}", **MEASURED)
            else:
                ax.plot(ks, speedups, color=color, marker=MARKERS[i % len(MARKERS)], label=f"measured: {label}",
                        **MEASURED)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="S = 1 (no gain)")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Draft tokens per iteration, k")
        ax.set_ylabel("Speedup S (× plain decoding)")
        _title(ax, title or "Speculative decoding speedup vs k")
        _legend(ax, source, loc="best")
    return ax


# ----------------------------------------------------------------------------------------------
# distributions as grouped bars


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
# one speculative iteration on a timeline (Chapter 2)

PASS_COLORS = {"draft": PALETTE[1], "verify": PALETTE[0], "decode": PALETTE[2]}
PASS_NAMES = {"draft": "draft step: one draft pass, 1 token per sequence",
              "verify": "verify pass: the target over k + 1 tokens per sequence",
              "decode": "decode step: the target over 1 token per sequence"}


def iteration_rows(kind: str, k: int, tokens: float, t_decode: float, t_draft: float, t_verify: float) -> list:
    """The two rows of :func:`iteration_timeline` for one source of times (``kind``: "model" | "measured"):
    plain decoding, ``tokens`` decode steps (E[N]; a fractional last step is drawn as a fraction), and one
    speculative iteration, ``k`` draft steps then the verify pass, which yields ``tokens`` on average."""
    _kind(kind)
    if k < 1 or tokens <= 0 or min(t_decode, t_draft, t_verify) <= 0:
        raise ValueError(f"need k >= 1, tokens > 0 and positive times; got k={k}, tokens={tokens}, "
                         f"times {t_decode}, {t_draft}, {t_verify}")
    whole, part = int(tokens), tokens - int(tokens)
    plain = [("decode", t_decode)] * whole + ([("decode", part * t_decode)] if part > 1e-9 else [])
    spec = [("draft", t_draft)] * k + [("verify", t_verify)]
    return [(f"{kind}: plain decoding,\nE[N] = {tokens:.2f} steps", plain, kind),
            (f"{kind}: speculative,\n{k} drafts + verify", spec, kind)]


def iteration_timeline(ax=None, rows: Sequence = (), *, legend: bool = True, title: str | None = None,
                       source: str | None = None):
    """Gantt chart of passes to scale: each row ``(label, [(pass, seconds), ...], "model" | "measured")`` is a
    bar of back-to-back passes ("draft", "verify" or "decode"); measured rows filled, model rows hatched.
    A row made of draft and verify passes is labelled with its speedup over the plain-decoding row of the
    same kind above it (plain time / speculative time). Top row first. The legend sits under the axes
    (``legend=False`` leaves it out, e.g. on the first of two panels). Returns the Axes."""
    from matplotlib.patches import Patch

    if not rows:
        raise ValueError("iteration_timeline needs at least one row")
    for label, segments, kind in rows:
        _kind(kind)
        if not segments:
            raise ValueError(f"{label}: a row needs at least one pass")
        for name, seconds in segments:
            if name not in PASS_COLORS:
                raise ValueError(f"{label}: a pass is one of {sorted(PASS_COLORS)}, got {name!r}")
            if not seconds > 0:
                raise ValueError(f"{label}: a {name} pass of {seconds} s")
    scale, unit = _time_unit(max(sum(s for _, s in segments) for _, segments, _ in rows))
    plain: dict[str, float] = {}
    with house_style():
        ax = _axes(ax)
        for i, (_, segments, kind) in enumerate(rows):
            y, start = len(rows) - 1 - i, 0.0
            for name, seconds in segments:
                color = PASS_COLORS[name]
                style = ({"facecolor": color, "edgecolor": "white"} if kind == "measured"
                         else {"facecolor": "white", "edgecolor": color, "hatch": "///"})
                ax.broken_barh([(start / scale, seconds / scale)], (y - 0.32, 0.64), linewidth=1.2, **style)
                start += seconds
            names = {name for name, _ in segments}
            if names == {"decode"}:
                plain[kind] = start
            elif kind in plain and "verify" in names:
                ax.annotate(f"S = {plain[kind] / start:.2f}×", (start / scale, y), xytext=(6, 0),
                            textcoords="offset points", va="center", fontsize=MIN_FONT, fontweight="bold")
        ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.grid(False, axis="y")
        ax.set_xlim(0, max(sum(s for _, s in segments) for _, segments, _ in rows) / scale * 1.18)
        ax.set_xlabel(f"Time ({unit}), to scale")
        _title(ax, title or "One speculative iteration against the decode steps it replaces")
        handles = [Patch(facecolor=PASS_COLORS[n], edgecolor="white", label=PASS_NAMES[n]) for n in PASS_COLORS]
        kinds = {kind for _, _, kind in rows}
        if "model" in kinds:
            handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="///", label="model: hatched"))
        if "measured" in kinds:
            handles.append(Patch(facecolor="0.3", edgecolor="white", label="measured: filled"))
        if legend:
            _legend(ax, source, handles=handles, below=True)
    return ax


# ----------------------------------------------------------------------------------------------
# a figure as an <img> with alt text (widgets: an Output widget's image has no alt on the website)


def image_html(fig, alt: str, dpi: int | None = None) -> str:
    """``fig`` as an HTML ``<img>`` (an inline PNG, ``figure_png``: it records its smallest text) whose alt text
    is ``alt``, scaled to fit its container; closes ``fig``. For an ``ipywidgets.HTML`` that shows a plot:
    stored in the widget state, it keeps its alt text on the website, where an ``Output`` widget's image would
    have none. dpi: the figure's own by default."""
    import base64
    import html

    if not alt or not alt.strip():
        raise ValueError("alt: say what the figure shows (a reader who cannot see it gets this text)")
    png = figure_png(fig, dpi)
    plt.close(fig)
    data = base64.b64encode(png).decode("ascii")
    return (f'<img alt="{html.escape(alt.strip(), quote=True)}" src="data:image/png;base64,{data}" '
            'style="max-width: 100%; height: auto;">')


# ----------------------------------------------------------------------------------------------
# a paged KV cache, slot by slot (Chapter 9)

SLOT_COLORS = {  # Okabe-Ito, as the rest of the book; the pending-over-a-rejected-draft slot is also hatched
    "verified": "#0072B2",
    "draft": "#E69F00",
    "rejected": "#D55E00",
    "pending": "#009E73",
    "pending over a rejected draft": "#009E73",
    "free": "#EEEEEE",
}
SLOT_LABELS = {
    "verified": "verified token's K/V",
    "draft": "draft, awaiting the verdict",
    "rejected": "rejected draft's K/V (stale)",
    "pending": "pending token (K/V not yet computed)",
    "pending over a rejected draft": "pending token's slot, holding a rejected draft's K/V",
    "free": "free (never written)",
}


WRITTEN_EDGE = {"fill": False, "edgecolor": "#CC79A7", "linewidth": 3.0}  # the slots a verify pass just wrote


def _written_slots(view) -> range:
    """The slots the verify pass just wrote, for a view taken right after one (``stage == "verify"``): the pending
    token's, now verified, and the k drafts after it. Empty for any other stage."""
    if getattr(view, "stage", None) != "verify":
        return range(0)
    return range(max(view.verified - 1, 0), view.written)


def paged_cache(ax=None, view=None, *, title: str | None = None, legend: bool = True, source: str | None = None,
                flag: dict | None = None, fontsize: float = MIN_FONT):
    """One sequence's paged KV cache at one moment: a row per block (block 0 on top), a cell per slot, coloured
    by its state. A block registered in the prefix cache is labelled with its hash, in dark orange when it was
    published holding something other than verified tokens; a block served by a prefix-cache hit is outlined.
    Right after a verify pass (``view.stage == "verify"``) the k + 1 slots the pass wrote are outlined too: the
    pending token's slot, whose K/V the pass computed, and the k drafts.

    view: a ``kvcache.CacheView`` (anything with ``block_size``, ``blocks`` of ``states``, ``published``,
        ``hit`` and ``stale``, ``stage``, ``verified``, ``known`` and ``written``), read from a real cache by
        ``kvcache.Recorder``. flag: {hash: note} for blocks to point out (in dark orange), e.g. the stale block a
        request was served. fontsize: of every label (titles one point more). Returns the Axes.
    """
    flag = flag or {}
    if view is None or not view.blocks:
        raise ValueError("paged_cache needs a CacheView with at least one block")
    bs, n = view.block_size, len(view.blocks)
    label_room = 0.55 * bs  # the hash labels sit inside the axes, right of the slots, so no panel overlaps another
    with house_style():
        ax = _axes(ax)
        for j, block in enumerate(view.blocks):
            if len(block.states) != bs:
                raise ValueError(f"block {j} has {len(block.states)} slots, the view says {bs}")
            for i, state in enumerate(block.states):
                if state not in SLOT_COLORS:
                    raise ValueError(f"unknown slot state {state!r}; known: {', '.join(SLOT_COLORS)}")
                ax.add_patch(plt.Rectangle((i, n - 1 - j), 1, 1, facecolor=SLOT_COLORS[state], edgecolor="white",
                                           linewidth=1.0, hatch="xx" if state.startswith("pending over") else None))
            if block.hit:
                ax.add_patch(plt.Rectangle((0, n - 1 - j), bs, 1, fill=False, edgecolor="black", linewidth=2.2))
            if block.published is not None:
                stale = block.stale or block.published in flag
                label = f"#{block.published[:4]}" + ("\nnot all\nverified!" if block.stale else "")
                ax.text(bs + 0.3, n - 0.5 - j, label, va="center", ha="left", fontsize=fontsize, linespacing=0.95,
                        color="#D55E00" if stale else "0.2", fontweight="bold" if stale else "normal")
        for i in _written_slots(view):
            ax.add_patch(plt.Rectangle((i % bs, n - 1 - i // bs), 1, 1, **WRITTEN_EDGE))
        ax.set_xlim(0, bs + label_room)
        ax.set_ylim(0, n)
        ax.set_yticks([n - 0.5 - j for j in range(n)], [f"block {j}" + (" (hit)" if b.hit else "")
                                                        for j, b in enumerate(view.blocks)], fontsize=fontsize)
        step = max(1, bs // 4)
        ax.set_xticks([i + 0.5 for i in range(0, bs, step)], [str(i) for i in range(0, bs, step)], fontsize=fontsize)
        ax.tick_params(length=0)
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        notes = [f"#{h[:4]}: {note}" for h, note in flag.items()
                 if any(b.published == h for b in view.blocks)]
        ax.set_xlabel("\n".join([f"slot ({bs} per block); #hash: published", f"verified {view.verified} · known "
                                 f"{view.known} · written {view.written}", *notes]), fontsize=fontsize, loc="left")
        _title(ax, title or f"Paged KV cache, {view.stage}", fontsize=fontsize)
        if legend:
            states = [s for s in SLOT_COLORS if any(s in b.states for b in view.blocks)]
            handles = [plt.Rectangle((0, 0), 1, 1, facecolor=SLOT_COLORS[s], edgecolor="0.6",
                                     hatch="xx" if s.startswith("pending over") else None) for s in states]
            labels = [SLOT_LABELS[s] for s in states]
            if _written_slots(view):
                handles.append(plt.Rectangle((0, 0), 1, 1, **WRITTEN_EDGE))
                labels.append(WRITTEN_LABEL)
            leg = ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.3), ncol=1, fontsize=fontsize,
                            frameon=False, title=source)
            if source:
                leg.get_title().set_fontsize(fontsize)
    return ax


WRITTEN_LABEL = "written by this verify pass: the pending token and k drafts"
HIT_LABEL = "block served by a prefix-cache hit"


def cache_story(panels: Sequence, *, title: str, row_titles: Sequence[str] = (), notes: Sequence[str] = (),
                source: str | None = None, columns: int = 1, fontsize: float = MIN_FONT):
    """Rows of ``paged_cache`` panels in one figure at the house width (``WIDTH``): ``panels`` is a list of rows,
    each a list of ``(view, panel title)`` or ``(view, panel title, flag)`` (``paged_cache``'s flag);
    ``row_titles``: what each row is (e.g. the policy); ``notes``: one line under each row (what happened next).
    ``columns``: panels side by side (1: one under another, what a phone reads best; at most ``MAX_COLUMNS``); a
    longer row wraps onto more lines. One legend for every state any panel shows. Many panels (two rows of four,
    say): one figure per row, each its own call, so that every panel stays large. Returns the Figure."""
    rows = [list(r) for r in panels]
    if not rows or not all(rows):
        raise ValueError("cache_story needs at least one row of (view, title) panels")
    if not (isinstance(columns, int) and 1 <= columns <= MAX_COLUMNS):
        raise ValueError(f"columns: 1 to {MAX_COLUMNS} panels side by side, got {columns!r}")
    cols = min(columns, max(len(r) for r in rows))
    lines = [math.ceil(len(r) / cols) for r in rows]
    tallest = max(len(panel[0].blocks) for r in rows for panel in r)
    line_height = 0.3 * tallest + 2.4  # the slots, then the title above and the three-line label below
    heights = [g * line_height + 0.5 * (r < len(row_titles)) + 0.35 * (r < len(notes)) for r, g in enumerate(lines)]
    with house_style():
        fig = plt.figure(figsize=(WIDTH, sum(heights) + 1.9), layout="constrained")
        subfigs = fig.subfigures(len(rows), 1, squeeze=False, height_ratios=heights)[:, 0]
        spare = None  # a one-row story's empty cell, where the legend goes
        for r, (sub, row) in enumerate(zip(subfigs, rows, strict=True)):
            axes = sub.subplots(lines[r], cols, squeeze=False).flatten()
            for c, ax in enumerate(axes):
                if c < len(row):
                    paged_cache(ax, row[c][0], title=row[c][1], legend=False, flag=(row[c][2:] or [None])[0],
                                fontsize=fontsize)
                elif len(rows) == 1 and spare is None:
                    spare = ax
                    ax.axis("off")
                else:
                    ax.set_visible(False)
            if r < len(row_titles):
                sub.suptitle(row_titles[r], fontsize=fontsize + 1, fontweight="bold", x=0.01, ha="left", wrap=True)
            if r < len(notes):
                sub.supxlabel(notes[r], fontsize=fontsize, x=0.01, ha="left", color="0.15")
        views = [panel[0] for r in rows for panel in r]
        seen = [s for s in SLOT_COLORS if any(s in b.states for v in views for b in v.blocks)]
        handles = [plt.Rectangle((0, 0), 1, 1, facecolor=SLOT_COLORS[s], edgecolor="0.6",
                                 hatch="xx" if s.startswith("pending over") else None) for s in seen]
        labels = [SLOT_LABELS[s] for s in seen]
        if any(_written_slots(v) for v in views):
            handles.append(plt.Rectangle((0, 0), 1, 1, **WRITTEN_EDGE))
            labels.append(WRITTEN_LABEL)
        if any(b.hit for v in views for b in v.blocks):
            handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="black", linewidth=2.2))
            labels.append(HIT_LABEL)
        if spare is not None:
            import textwrap

            spare.legend(handles, [textwrap.fill(label, 34) for label in labels], loc="center left", fontsize=fontsize,
                         frameon=False, title=textwrap.fill(source, 40) if source else None, title_fontsize=fontsize)
        else:
            fig.legend(handles, labels, loc="outside lower center", ncol=1, fontsize=fontsize, frameon=False,
                       title=source, title_fontsize=fontsize)
        fig.suptitle(title, wrap=True)
    return fig


COINCIDE = 0.03  # two rules' lines closer than this share of the axis coincide: the later one is dashed and named


def recompute_vs_hit_rate(ax=None, rules: Sequence = (), *, no_cache_ms: float, gap: tuple[str, str] | None = None,
                          title: str | None = None, source: str | None = None):
    """Admission time per request against the fraction of requests that hit the prefix cache, for each hit rule.

    rules: ``(label, ms per request when every request hits)``, measured; ``no_cache_ms``: ms per request with
        no prefix caching (every request a miss), measured. Both are drawn as markers at hit rates 1 and 0; the
        lines between them are the model: a fraction h of requests hits, so t(h) = h·t_hit + (1 − h)·t_miss.
        The gap between two rules at h is h times the recompute per hit; ``gap``: two labels, (with the
        recompute, without it), whose gap at h = 1 is marked. A rule whose time lies within ``COINCIDE`` of the
        axis of an earlier one's would hide under it: its line is dashed, its marker larger, and a note names both.
        Returns the Axes.
    """
    rules = [(str(label), float(ms)) for label, ms in rules]
    if not rules:
        raise ValueError("recompute_vs_hit_rate needs at least one rule")
    miss = float(no_cache_ms)
    if not (math.isfinite(miss) and miss > 0) or not all(math.isfinite(ms) and ms > 0 for _, ms in rules):
        raise ValueError("admission times must be finite and positive (ms)")
    h = np.linspace(0, 1, 50)
    top = max(miss, *(ms for _, ms in rules))
    with house_style():
        ax = _axes(ax)
        drawn = []
        for i, (label, ms) in enumerate(rules):
            color = PALETTE[i % len(PALETTE)]
            under = [other for other, o_ms in drawn if abs(o_ms - ms) < COINCIDE * top]
            style = {**MODEL, "linestyle": (0, (4, 3))} if under else MODEL  # dashed over a line it coincides with
            ax.plot(h, h * ms + (1 - h) * miss, color=color, label=f"model: {label}, linear in the hit rate", **style)
            ax.plot([1.0], [ms], color=color, marker=MARKERS[i % len(MARKERS)], label=f"measured: {label}, every "
                    "request hits", **{**MEASURED, "markersize": MEASURED["markersize"] + 3 * len(under)})
            if under:
                times = dict(rules)
                ax.annotate(f"{label} ({ms:.2f} ms) lies on\n{' and '.join(f'{o} ({times[o]:.2f} ms)' for o in under)}",
                            xy=(0.55, 0.55 * ms + 0.45 * miss), xytext=(0.03, 0.28 * top), fontsize=MIN_FONT,
                            color="0.2", arrowprops={"arrowstyle": "->", "color": "0.3"})
            drawn.append((label, ms))
        ax.plot([0.0], [miss], color="0.3", marker="s", label="measured: no prefix caching", **MEASURED)
        if gap is not None:
            times = dict(rules)
            if gap[0] not in times or gap[1] not in times:
                raise ValueError(f"gap must name two of the rules {list(times)}, got {gap}")
            hi, lo = times[gap[0]], times[gap[1]]
            ax.annotate("", xy=(1.0, hi), xytext=(1.0, lo), arrowprops={"arrowstyle": "<->", "color": "0.2"})
            ax.text(0.98, min(hi, lo) * 0.6, f"recompute per hit: {hi - lo:+.2f} ms", ha="right", va="top",
                    fontsize=MIN_FONT, color="0.2")  # under the lines, which all end near h = 1
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Fraction of requests that hit the prefix cache")
        ax.set_ylabel("Admission time per request (ms)")
        _title(ax, title or "What the hit rule costs, per request")
        _legend(ax, source, below=True)
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
