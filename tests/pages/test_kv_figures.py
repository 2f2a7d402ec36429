"""Chapter 9's cache figures: what a verify pass wrote is drawn, a figure of four panels can be two by two with
labels a reader can read at the book's width, and two rules whose admission times coincide stay visible."""

import matplotlib
import pytest
from test_plots import Block  # the duck type of kvcache.BlockView

from specnotes.pages import plots

matplotlib.use("Agg")

CONTENT_PX = 740  # the book's content column at 1280 px, CSS px
MIN_PX = 9  # the smallest label, in CSS px, at that width


class View:  # the duck type of kvcache.CacheView, right after a verify pass: 2 verified, 1 pending, k = 3 drafts
    def __init__(self, stage="verify"):
        self.block_size, self.stage = 4, stage
        self.verified, self.known, self.written = 3, 3, 6  # the pending token's slot (2) now verified
        self.blocks = (Block(["verified"] * 3 + ["draft"], "aaaa0000"), Block(["draft", "draft", "free", "free"]))


def outlined(ax):
    return [p for p in ax.patches if not p.get_fill() and p.get_width() == 1]


def test_a_verify_view_outlines_the_k_plus_1_slots_the_pass_wrote():
    ax = plots.paged_cache(view=View())
    slots = sorted((p.get_x(), p.get_y()) for p in outlined(ax))
    # slots 2..5: the pending token's (block 0, slot 2, drawn as verified) and the three drafts
    assert slots == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert plots.WRITTEN_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    assert not outlined(plots.paged_cache(view=View("committed")))  # only right after a verify pass


def test_cache_story_wraps_four_panels_two_by_two_and_keeps_its_labels_legible():
    fig = plots.cache_story([[(View(), "one"), (View(), "two"), (View("committed"), "three"), (View(), "four")]],
                            title="story", columns=2)
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    rows = sorted({round(ax.get_position().y0, 3) for ax in axes})
    assert len(axes) == 4 and len(rows) == 2  # two by two
    assert plots.WRITTEN_LABEL in [t.get_text() for t in fig.legends[0].texts]
    width_in = fig.get_size_inches()[0]
    smallest_pt = min(t.get_fontsize() for ax in axes for t in [*ax.texts, ax.xaxis.label, *ax.get_yticklabels()])
    assert smallest_pt / 72 * CONTENT_PX / width_in >= MIN_PX  # shown at the content width, scaled down to it
    three = plots.cache_story([[(View(), "one"), (View(), "two"), (View(), "three")]], title="x", columns=2,
                              source="a source")
    spare = [ax for ax in three.get_axes() if ax.get_visible() and not ax.axison]
    assert len(spare) == 1 and spare[0].get_legend() is not None and not three.legends  # the legend fills the gap
    with pytest.raises(ValueError, match="columns"):
        plots.cache_story([[(View(), "one")]], title="x", columns=0)


def test_recompute_vs_hit_rate_keeps_a_rule_that_lies_on_another_visible():
    ax = plots.recompute_vs_hit_rate(rules=[("lookahead", 1.90), ("keep", 1.91), ("drop", 2.5)], no_cache_ms=10.0)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["model: keep, linear in the hit rate"].get_linestyle() == "--"  # dashed over the other
    assert lines["model: lookahead, linear in the hit rate"].get_linestyle() == "-"
    assert lines["model: drop, linear in the hit rate"].get_linestyle() == "-"  # far from both: drawn plainly
    notes = [t.get_text() for t in ax.texts]
    assert "keep (1.91 ms) lies on\nlookahead (1.90 ms)" in notes
