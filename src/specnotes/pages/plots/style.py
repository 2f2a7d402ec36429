"""The house style: colours, markers and line styles (``PALETTE``, ``MEASURED``, ``MODEL``), the rcParams
(``STYLE``, ``house_style``), ``figure`` and ``shared_legend``; legibility at the width the website shows a figure
(``legibility``, ``check_legible``) and the PNG that records its smallest text (``figure_png``, ``image_html``,
and the notebook display hook installed on import); and what every plot uses: wrapped titles, legends, plain
tick labels, time and FLOP/s units."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import LogFormatter

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
    """``fig`` as the PNG a notebook shows (tight bounding box, at the figure's dpi), with ``font_record``; a legend
    that covers data points is moved under its axes first (``clear_legends``), and how many points any legend still
    covers is recorded too (``LEGEND_RECORD``: the website's browser test reads it back)."""
    import io

    dpi = fig.dpi if dpi is None else dpi
    clear_legends(fig)
    buffer = io.BytesIO()
    record = {**font_record(fig, dpi), LEGEND_RECORD: str(sum(n for _, n in legend_overlaps(fig)))}
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor=fig.get_facecolor(),
                edgecolor=fig.get_edgecolor(), metadata=record)
    return buffer.getvalue()


# ----------------------------------------------------------------------------------------------
# legends that cover no data


LEGEND_RECORD = "specnotes.legend_overlaps"  # the PNG text chunk: data points under a legend when it was saved


def _data_points(ax):
    """The data points ``ax`` draws, in display pixels: the vertices of its data lines (curves and markers: reference
    lines such as ``axhline`` run in axes coordinates and are left out) and the centres of its scatter points."""
    import numpy as np
    from matplotlib.collections import PathCollection

    points = []
    for line in ax.get_lines():
        if line.get_visible() and line.get_transform() is ax.transData:
            xy = np.asarray(line.get_xydata(), dtype=float)
            if len(xy):
                points.append(line.get_transform().transform(xy))
    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets()):
            points.append(c.get_offset_transform().transform(np.asarray(c.get_offsets(), dtype=float)))
    if not points:
        return np.empty((0, 2))
    xy = np.concatenate(points)
    box = ax.get_window_extent()
    inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
    return xy[inside & np.isfinite(xy).all(axis=1)]


def legend_overlaps(fig) -> list[tuple[object, int]]:
    """(legend, how many data points of the figure's axes it covers) for every legend of ``fig`` that covers one,
    where the figure is drawn (``draw_without_rendering``: a "best" legend is placed then)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    out = []
    for leg in legends:
        if not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer)
        n = 0
        for ax in fig.axes:
            xy = _data_points(ax)
            n += int(((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)).sum())
        if n:
            out.append((leg, n))
    return out


def clear_legends(fig) -> int:
    """Move every axes legend that covers a data point under its axes, in as many columns as fit (``_legend``'s
    ``below``): a legend inside the axes may sit where the data leave room, never on the data. Returns how many it
    moved."""
    moved = 0
    for leg, _ in legend_overlaps(fig):
        ax = next((a for a in fig.axes if a.get_legend() is leg), None)
        if ax is None:
            continue  # a figure legend (shared_legend) already sits outside the axes
        title = leg.get_title().get_text() or None
        handles, labels = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
        leg.remove()
        with house_style():
            _legend(ax, title, below=True, handles=handles, labels=labels)
        moved += 1
    return moved


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


def _kind(kind: str) -> str:
    if kind not in ("model", "measured"):
        raise ValueError(f"a series' kind must be 'model' or 'measured', got {kind!r}")
    return kind


def _curve(ax, i: int, label: str, xs, ys, kind: str, yerr=None, capsize: float = 3) -> str:
    """Series i in the house style: a model's as a line, a measurement's as markers, with error bars when ``yerr``
    is given (symmetric, or [below, above]). Returns its colour."""
    color = PALETTE[i % len(PALETTE)]
    if _kind(kind) == "model":
        ax.plot(xs, ys, color=color, label=f"model: {label}", **MODEL)
    elif yerr is not None:
        ax.errorbar(xs, ys, yerr=yerr, color=color, marker=MARKERS[i % len(MARKERS)], capsize=capsize,
                    label=f"measured: {label}", **MEASURED)
    else:
        ax.plot(xs, ys, color=color, marker=MARKERS[i % len(MARKERS)], label=f"measured: {label}", **MEASURED)
    return color


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


# the helpers above as the face names them, for figures drawn outside this package (the advisor's)
set_title = _title
legend = _legend
plain_log_ticks = _plain_log_ticks
