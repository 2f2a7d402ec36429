"""advise.plot draws the report: the band its verdicts use at every batch, the reader's measured points, a legend
in the report's own words, short title lines, axes that hold the band, and the legend clear of the data."""

import re

import matplotlib
import pytest

matplotlib.use("Agg")

from specnotes import advise  # noqa: E402
from specnotes.pages import plots  # noqa: E402

SHIPPED = str(advise.llama_server_record("shipped"))
H100 = ["--gpu", "H100-SXM"]
CASES = {
    "an α range": ["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm", "--engine-version",
                   "0.10.1", "--batch", "1-256", "--context", "1024", "--alpha", "0.6-0.8", "--k", "3"],
    "the best k": ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", *H100, "--tp", "4", "--batch", "1-512",
                   "--context", "4096", "--alpha", "0.8", "--k", "best", "--engine", "vllm"],
    "past memory": ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", *H100, "--batch", "1-512", "--context",
                    "8192", "--alpha", "0.7", "--k", "4", "--engine", "vllm"],
    "a record, two held back": ["--from-record", SHIPPED, "--record-batches", "1,2", "--batch", "1-8"],
    "--measured": ["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm", "--engine-version",
                   "0.10.1", "--batch", "1-256", "--context", "1024", "--mean-accepted", "2.3@3", "--measured",
                   "1:1.1,16:1.5"],
    "a tree": ["--target", "Qwen3-8B", "--drafter", "eagle3", *H100, "--tree", "1,4,4", "--verified", "21",
               "--mean-accepted", "2.92", "--batch", "1-128", "--context", "300", "--engine", "sglang",
               "--engine-version", "0.5.9"],
    "one batch": ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", *H100, "--batch", "32", "--context", "1024",
                  "--alpha", "0.7", "--k", "4"],
    "knobs by hand": ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", *H100, "--batch", "1-512", "--context",
                      "8192", "--alpha", "0.9", "--overhead-ms", "0"],
}


@pytest.fixture(scope="module", params=list(CASES))
def drawn(request):
    report = advise.run(CASES[request.param])
    ax = advise.plot(report)
    ax.figure.canvas.draw()
    yield report, ax
    matplotlib.pyplot.close(ax.figure)


def _band_edges(ax) -> dict[float, tuple[float, float]]:
    """{B: (low, high)} of the band the axes shade (fill_between's polygon: the low edge out, the high edge back)."""
    polys = [c for c in ax.collections if c.get_label().startswith("band")]
    if not polys:
        return {}
    edges: dict[float, list[float]] = {}
    for x, y in polys[0].get_paths()[0].vertices:
        edges.setdefault(round(float(x), 9), []).append(float(y))
    return {x: (min(ys), max(ys)) for x, ys in edges.items()}


def test_the_plotted_band_is_the_reports_band_at_every_batch(drawn):
    report, ax = drawn
    edges = _band_edges(ax)
    if report["deployment"]["band"] is None:
        assert edges == {} and report["curve_band"] is None
        return
    lo, hi = report["deployment"]["batch"]
    checked = 0
    for r in report["rows"]:
        if not (r["fits"] and r["batch"] <= report["curve"][-1][0]):
            continue
        assert edges[r["batch"]] == pytest.approx(tuple(r["band"]), rel=1e-9), r["batch"]  # the verdict's band
        checked += 1
    assert checked >= min(3, len([r for r in report["rows"] if r["fits"]]))
    centre = {x: y for x, y in zip(*ax.get_lines()[0].get_data(), strict=True)}
    for r in report["rows"]:
        if r["fits"] and r["batch"] in centre:
            assert centre[r["batch"]] == pytest.approx(r["speedup"], rel=1e-9)  # the table's S


def test_an_alpha_range_is_drawn_as_its_ends():
    # issue 47: the table's band at B = 1 was 0.75–1.92 with --alpha 0.6-0.8; --plot drew α = 0.7's, 0.87–1.65
    base = CASES["an α range"]
    wide = advise.run(base)
    middle = advise.run(base[:base.index("--alpha")] + ["--alpha", "0.7", "--k", "3"])
    edges = _band_edges(advise.plot(wide))
    assert edges[1] == pytest.approx(tuple(wide["rows"][0]["band"]))
    assert edges[1][0] < middle["rows"][0]["band"][0] and edges[1][1] > middle["rows"][0]["band"][1]


def _report_words(report) -> str:
    return advise.render(report).replace("**", "").replace("\u00a0", " ").lower()


def test_the_legend_is_made_of_the_reports_terms(drawn):
    report, ax = drawn
    words = _report_words(report)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == advise.figure.legend_terms(report)
    for label in labels:
        for part in label.replace("\u00a0", " ").lower().split(": "):
            assert part in words, (label, part)
    assert not any("correction" in x for x in labels)  # issue 47: "before the band's correction" was no term of it


def test_measured_and_held_back_points_have_their_own_markers(drawn):
    report, ax = drawn
    anchor = report["deployment"]["anchor"]
    marked = {line.get_label(): sorted(zip(*line.get_data(), strict=True)) for line in ax.get_lines()
              if line.get_linestyle() == "None"}
    if anchor is None:
        assert not [x for x in marked if x.startswith("measured")]
        return
    assert marked.get("measured: (a) anchored on") == sorted(map(tuple, anchor["measured"]))
    if anchor["held_back"]:
        assert marked["measured: (h) held back for comparison"] == sorted(map(tuple, anchor["held_back"]))
        markers = {line.get_label(): line.get_marker() for line in ax.get_lines()}
        assert markers["measured: (a) anchored on"] != markers["measured: (h) held back for comparison"]


def test_the_title_is_short_lines_and_keeps_each_value_whole(drawn):
    report, ax = drawn
    lines = ax.get_title().split("\n")
    renderer = ax.figure.canvas.get_renderer()
    assert 2 <= len(lines) <= 3 and ax.title.get_window_extent(renderer).width <= ax.figure.bbox.width, lines
    dep = report["deployment"]
    context = f"L = {dep['context_tokens']}"
    assert any(context in x.replace("\u00a0", " ") for x in lines)  # issue 47: "L =" / "2048" on two lines
    assert not any(re.search(r"(^|\s)(L|×)$", x) for x in lines)


def test_the_axes_hold_the_band_and_the_points(drawn):
    report, ax = drawn
    bottom, top = ax.get_ylim()
    highest = [c[1] * c[3] for c in report["curve"]]
    if report["curve_band"]:
        highest += [b[2] for b in report["curve_band"]]
    anchor = report["deployment"]["anchor"]
    if anchor:
        highest += [s for _, s in anchor["measured"] + anchor["held_back"]]
    assert bottom == 0 and max(highest) < top <= max(1.2, *highest) * 1.1
    left, right = ax.get_xlim()
    xs = [b for b, _ in (anchor["measured"] + anchor["held_back"])] if anchor else []
    assert all(left < x < right for x in xs + [report["deployment"]["batch"][0]])


def test_the_legend_sits_under_the_axes_and_the_text_is_legible(drawn):
    _, ax = drawn
    renderer = ax.figure.canvas.get_renderer()
    legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.y1 < frame.y0  # under the axes: it covers no data
    plots.check_legible(ax.figure)


def test_shaded_verdicts_are_the_reports():
    r = advise.run(CASES["an α range"])
    ax = advise.plot(r)
    spans = [p for p in ax.patches if p.get_label().startswith("pays")]
    lo, hi = r["deployment"]["batch"]
    drawn = [(p.get_x(), p.get_x() + p.get_width()) for p in spans]
    assert drawn == [tuple(x) for x in advise._clip(r["verdict_batches"]["pays"], lo, hi)]
    hand = advise.run(CASES["knobs by hand"])
    labels = [t.get_text() for t in advise.plot(hand).get_legend().get_texts()]
    assert "the model alone: S > 1" in labels and not any(x.startswith("band") for x in labels)


def test_the_time_split_under_s_is_the_models_iteration_at_the_reports_batches():
    # issue 44's engineer: the stacked split beside S(B); each bar is T_iter/T_decode = E[N]/S, the model's own S
    r = advise.run(CASES["an α range"])
    ax = advise.plot(r)
    assert len(ax.figure.axes) == 2
    below = ax.figure.axes[1]
    splits = advise.figure.time_splits(r)
    rows = {row["batch"]: row for row in r["rows"]}
    assert [b for b, _ in splits] == [int(t.get_text().replace(",", "")) for t in below.get_xticklabels()]
    en = r["deployment"]["expected_tokens"]
    for b, split in splits:
        assert sum(split.values()) == pytest.approx(en / rows[b]["model_speedup"], rel=1e-6)
    heights = {}
    for bar in below.patches:
        heights[round(bar.get_x() + bar.get_width() / 2)] = max(heights.get(round(bar.get_x() + bar.get_width() / 2),
                                                                            0), bar.get_y() + bar.get_height())
    assert [round(h, 6) for _, h in sorted(heights.items())] == [round(sum(s.values()), 6) for _, s in splits]
    assert len(advise.plot(r, split=False).figure.axes) == 1
