"""Chapter 11's plots: acceptance by draft position and policies against B draw what they are given, legibly, and
refuse curves that do not line up."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from specnotes.pages import plots  # noqa: E402


def test_acceptance_by_position_draws_each_curve_legibly():
    ax = plots.acceptance_by_position(curves=[("a", [1, 2, 3], [0.8, 0.5, 0.3], "measured", [0.02, 0.03, 0.05]),
                                              ("b", [1, 2, 3], [0.7, 0.7, 0.7], "model")],
                                      title="t", ylabel="α_i")
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == ["measured: a", "model: b"] and ax.get_ylim()[1] <= 1.1
    plots.check_legible(ax.figure)
    with pytest.raises(ValueError, match="positions"):
        plots.acceptance_by_position(curves=[("a", [1, 2], [0.8], "measured")], title="t", ylabel="y")


def test_policies_vs_batch_draws_medians_with_their_ranges():
    ax = plots.policies_vs_batch(curves=[("budget", [1, 4, 16], [1.5, 1.2, 1.0], [1.4, 1.1, 0.9],
                                          [1.6, 1.3, 1.05])], title="t", ylabel="×")
    assert ax.get_xscale() == "log" and "measured: budget" in ax.get_legend_handles_labels()[1]
    plots.check_legible(ax.figure)
    with pytest.raises(ValueError, match="one entry each"):
        plots.policies_vs_batch(curves=[("x", [1, 2], [1.0], [1.0], [1.0])], title="t", ylabel="×")
