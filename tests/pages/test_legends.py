"""A legend covers no data point: ``plots.clear_legends`` moves one that does under its axes, and ``figure_png``
records how many points any legend still covers (``LEGEND_RECORD``), which tests/test_browser.py reads back."""

import sys
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from site_checks import png_text  # noqa: E402

from specnotes.pages import plots  # noqa: E402


def _crowded():
    """Points everywhere in the axes: any legend inside them covers some."""
    fig, ax = plots.figure()
    x = np.linspace(1, 64, 40)
    for i, y in enumerate(np.linspace(0.2, 2.0, 12)):
        ax.plot(x, np.full_like(x, y), marker="o", linestyle="none", label=f"measured: series {i}" if i < 3 else None)
    ax.axhline(1.0, color="0.4", label="S = 1")
    ax.legend(loc="upper right")
    return fig, ax


def test_a_legend_on_the_data_is_found_and_moved_under_the_axes():
    fig, ax = _crowded()
    assert plots.legend_overlaps(fig)  # it covers points
    assert plots.clear_legends(fig) == 1 and plots.legend_overlaps(fig) == []
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    assert ax.get_legend().get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"measured: series {i}" for i in range(3)] + [
        "S = 1"]  # the same entries


def test_a_legend_in_free_space_stays_and_reference_lines_are_not_data():
    fig, ax = plots.figure()
    ax.plot([1, 2, 4], [2.0, 1.9, 1.8], label="model: S")
    ax.axhline(1.0, color="0.4", label="S = 1")  # runs under any legend: not a data point
    ax.set_ylim(0, 3)
    ax.legend(loc="lower left")
    before = ax.get_legend()
    assert plots.legend_overlaps(fig) == [] and plots.clear_legends(fig) == 0 and ax.get_legend() is before


def test_the_png_records_the_points_under_legends():
    fig, _ = _crowded()
    record = png_text(plots.figure_png(fig))
    assert record[plots.LEGEND_RECORD] == "0"  # moved before saving
    fig, ax = _crowded()
    fig.legend(*ax.get_legend_handles_labels(), loc="center")  # a figure legend on the data: not moved, counted
    ax.get_legend().remove()
    assert int(png_text(plots.figure_png(fig))[plots.LEGEND_RECORD]) > 0
