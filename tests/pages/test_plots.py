"""specnotes.pages.plots: figures exist, with titles, units and measured-vs-model legends."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from specnotes.pages import plots  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


class FakeAccel:  # the duck type of hardware.Accelerator
    name = "FAKE-GPU"
    peak_flops = {"bf16": 1000e12, "fp16": 1000e12}
    mem_bandwidth = 4e12

    def peak(self, dtype="bf16"):
        return self.peak_flops[dtype]


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_roofline_with_accelerator_and_measured_pair():
    ax = plots.roofline(roofs=[FakeAccel(), ("CPU", (17e9, 9e9))],
                        points=[("B=1", 1.0, 0.9e12), ("B=64", 60.0, 50e12)], title="A roofline")
    assert ax.get_title() == "A roofline"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "FLOP/byte" in ax.get_xlabel()
    assert "TFLOP/s" in ax.get_ylabel()  # 1 PFLOP/s peak -> TFLOP/s scale
    labels = legend_texts(ax)
    assert "model: FAKE-GPU (bf16, datasheet)" in labels
    assert "measured roof: CPU" in labels
    assert "measured: B=1" in labels and "measured: B=64" in labels
    ridge_notes = [t.get_text() for t in ax.texts if t.get_text().startswith("ridge")]
    assert "ridge 250 FLOP/B" in ridge_notes  # 1e15 / 4e12


def test_roofline_roof_is_min_of_peak_and_bandwidth():
    ax = plots.roofline(roofs=[("toy", 100e9, 10e9)], xlim=(0.1, 1000))
    line = ax.get_lines()[0]
    y = line.get_ydata()
    assert y[0] == pytest.approx(0.1 * 10, rel=1e-6)  # GFLOP/s: AI 0.1 x 10 GB/s = 1 GFLOP/s
    assert y[-1] == pytest.approx(100)
    assert "GFLOP/s" in ax.get_ylabel()


def test_roofline_accepts_real_accelerator_and_measured_roof():
    hardware = pytest.importorskip("specnotes.analytic.hardware")
    measure = pytest.importorskip("specnotes.measure")
    roof = measure.MeasuredRoof(20e9, 50e9)
    ax = plots.roofline(roofs=[hardware.accelerator("H100-SXM"), "L4", roof], dtype="bf16")
    labels = legend_texts(ax)
    assert any(t.startswith("model: H100-SXM") for t in labels)
    assert any(t.startswith("model: L4") for t in labels)
    assert any(t.startswith("measured roof:") for t in labels)


def test_roofline_takes_records_as_points():
    measure = pytest.importorskip("specnotes.measure")
    rec = measure.Record.from_timing("matmul", {"batch": 8}, measure.Timing([1e-3]), "cpu", "bf16",
                                     {"intensity": 7.9, "flops_per_s": 3e10})
    ax = plots.roofline(roofs=[(1e10, 5e10)], points=[rec])
    assert "measured: B=8" in legend_texts(ax)


@pytest.mark.parametrize("bad", [("label",), ("a", "b", "c", "d", "e"), "H100", ("x", 1.0, 2.0, "guess")])
def test_roofline_rejects_bad_roofs(bad):
    with pytest.raises(ValueError):
        plots.roofline(roofs=[bad])


def test_roofline_needs_something():
    with pytest.raises(ValueError):
        plots.roofline()


def test_time_vs_batch_measured_model_and_knee():
    batches = [1, 2, 4, 8, 16, 32, 64]
    measured = [max(1e-2, 1e-2 * b / 8) * (1.03 if i % 2 else 0.98) for i, b in enumerate(batches)]
    predicted = [max(1e-2, 1e-2 * b / 8) for b in batches]
    fig, ax = plt.subplots()
    out = plots.time_vs_batch(ax, batches, measured, predicted, source="test host")
    assert out is ax
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_title() and "(ms)" in ax.get_ylabel() and "Batch size" in ax.get_xlabel()
    labels = legend_texts(ax)
    assert "measured: step time" in labels and "measured: time per token" in labels
    assert "model: step time (roofline)" in labels and "model: time per token (roofline)" in labels
    knees = [t for t in labels if t.startswith("measured knee")]
    assert len(knees) == 1
    knee = float(knees[0].split("≈")[1])
    assert 4 <= knee <= 16
    assert ax.get_legend().get_title().get_text() == "test host"


def test_time_vs_batch_without_model_or_knee_creates_axes():
    ax = plots.time_vs_batch(None, [1, 2, 4], [1e-4, 1e-4, 1.1e-4], knee=None, per_token=False)
    assert legend_texts(ax) == ["measured: step time"]
    assert "(µs)" in ax.get_ylabel()


def test_time_vs_batch_rejects_mismatch():
    with pytest.raises(ValueError):
        plots.time_vs_batch(None, [1, 2, 4], [1.0, 2.0])
    with pytest.raises(ValueError):
        plots.time_vs_batch(None, [1, 2], [1.0, 2.0], [1.0])


def test_house_style_is_scoped():
    before = plt.rcParams["axes.spines.top"]
    with plots.house_style():
        assert plt.rcParams["axes.spines.top"] is False
    assert plt.rcParams["axes.spines.top"] == before


def test_time_vs_batch_accepts_pandas_series():
    import pandas as pd

    frame = pd.DataFrame({"measured": [1.0, 1.1, 2.0, 4.0], "model": [1.0, 1.0, 2.0, 4.0]}, index=[1, 2, 4, 8])
    ax = plots.time_vs_batch(None, frame.index, frame["measured"], frame["model"])
    assert any("model" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(ax.figure)


def test_speedup_vs_k_model_lines_with_best_stars_and_measured_spread():
    ax = plots.speedup_vs_k(curves=[("α = 0.8", [1, 2, 3], [1.5, 1.9, 1.7], "model"),
                                    ("wall clock", [1, 2, 3], [1.1, 1.3, 1.2], "measured", ([1.0, 1.2, 1.0],
                                                                                             [1.2, 1.5, 1.3]))],
                            best=True, title="S vs k", source="CPU, fp32")
    assert ax.get_title() == "S vs k" and "k" in ax.get_xlabel() and "×" in ax.get_ylabel()
    labels = legend_texts(ax)
    assert set(labels) == {"model: α = 0.8", "measured: wall clock", "S = 1 (no gain)"}
    stars = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [2]  # the model's best k
    (bars,) = [c for c in ax.collections if c.get_segments()]  # the error bars: the measured spread
    assert [tuple(seg[:, 1]) for seg in bars.get_segments()] == [(1.0, 1.2), (1.2, 1.5), (1.0, 1.3)]


def test_bars_measured_filled_model_hollow():
    ax = plots.bars(categories=["a", "b"], series=[("p", [0.5, 0.5], "model"), ("draws", [0.4, 0.6], "measured")],
                    xlabel="token", ylabel="probability", title="t")
    assert legend_texts(ax) == ["model: p", "measured: draws"]
    model, measured = ax.containers
    assert all(r.get_facecolor()[3] == 0 for r in model) and all(r.get_facecolor()[3] == 1 for r in measured)
    assert [r.get_height() for r in measured] == [0.4, 0.6]


@pytest.mark.parametrize("call", [
    lambda: plots.speedup_vs_k(curves=[("x", [1, 2], [1.0], "model")]),
    lambda: plots.speedup_vs_k(curves=[("x", [1], [1.0], "guess")]),
    lambda: plots.bars(categories=["a"], series=[("x", [1, 2], "model")], xlabel="", ylabel="", title=""),
])
def test_new_plots_reject_bad_series(call):
    with pytest.raises(ValueError):
        call()


def test_house_style_keeps_interactive_mode_switched_on_inside():
    # the inline backend switches interactive mode on with the kernel's first figure; rc_context alone
    # would switch it off again on exit, and no later figure of the notebook would be shown
    was = plt.isinteractive()
    try:
        plt.ioff()
        with plots.house_style():
            plt.ion()
        assert plt.isinteractive()
    finally:
        plt.interactive(was)


def test_speedup_map_draws_contour_memory_and_boundaries():
    batches, contexts = [1, 4, 16, 64], [128, 1024, 8192]
    speedup = [[2.0, 1.5, 0.9, 0.6], [2.0, 1.8, 1.4, 1.1], [2.0, 2.0, 1.9, 1.8]]
    bounds = {"weights | KV cache": ([1, 16], [8192, 512]), "weights | compute": ([16, 16], [128, 512])}
    ax = plots.speedup_map(None, batches, contexts, speedup, max_batch=[None, 40, 3], boundaries=bounds,
                           labels=[("KV-bound", 4, 8192)], title="A map", source="model")
    assert ax.get_title() == "A map"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "Batch size B" in ax.get_xlabel() and "Context length L (tokens)" in ax.get_ylabel()
    labels = legend_texts(ax)
    assert labels == ["model: S = 1 (break-even)", "model: does not fit in memory (weights + both KV caches)",
                      "model: regime boundary, weights | KV cache", "model: regime boundary, weights | compute"]
    colorbar = ax.figure.axes[-1]
    assert "S(B, L), model" in colorbar.get_ylabel()
    assert [t.get_text() for t in ax.texts] == ["KV-bound"]
    # the hatched region starts just past each context's limit: none at L = 128, B > 40 at 1024, B > 3 at 8192
    (shade,) = [c for c in ax.collections if c.get_hatch() == "//"]
    xs = shade.get_paths()[0].vertices[:, 0]
    assert min(xs) == pytest.approx(3.5)


def test_speedup_map_leaves_out_what_is_not_there():
    ax = plots.speedup_map(None, [1, 2], [64, 128], [[2.0, 1.9], [2.0, 2.0]], max_batch=[None, None])
    assert ax.get_legend() is None  # no S = 1 crossing, nothing that does not fit, no boundaries


@pytest.mark.parametrize("kwargs, message", [
    ({"speedup": [[1.0, 2.0]]}, "must be 2 rows"),
    ({"contexts": [0, 64]}, "L = 0 has no place"),
    ({"max_batch": [1]}, "max_batch has 1 entries"),
    ({"vmin": 1.5}, "vmin < 1 < vmax"),
])
def test_speedup_map_rejects_bad_input(kwargs, message):
    args = {"batches": [1, 2], "contexts": [64, 128], "speedup": [[2.0, 1.0], [0.5, 1.2]], **kwargs}
    with pytest.raises(ValueError, match=message):
        plots.speedup_map(None, **args)


def test_speedup_vs_batch_shades_what_does_not_fit():
    ax = plots.speedup_vs_batch(None, [("m", [1, 2, 4, 8], [2.0, 1.8, 1.5, 1.2], "model")], max_batch=3)
    assert "model: does not fit in memory (B > 3)" in legend_texts(ax)
    (span,) = [p for p in ax.patches]
    assert span.get_x() == pytest.approx(3) and span.get_x() + span.get_width() == pytest.approx(8)
    ax = plots.speedup_vs_batch(None, [("m", [1, 2], [2.0, 1.8], "model")], max_batch=64)
    assert not ax.patches  # everything fits: nothing shaded


def test_time_and_ratio_vs_context():
    ctx = [256, 1024, 4096]
    ax = plots.time_vs_context(None, [("B=1, n=1", ctx, [1e-3, 2e-3, 6e-3], "measured"),
                                      ("B=1, n=1", ctx, [0.8e-3, 2.1e-3, 7e-3], "model")],
                               title="t(L)", source="here")
    assert ax.get_title() == "t(L)" and "(ms)" in ax.get_ylabel() and "Context length L" in ax.get_xlabel()
    assert legend_texts(ax) == ["measured: B=1, n=1", "model: B=1, n=1"]
    lines = ax.get_lines()
    assert lines[0].get_color() == lines[1].get_color()  # same setting, same colour
    assert ax.get_legend().get_title().get_text() == "here"
    ax = plots.ratio_vs_context(None, [("stack", ctx, [2.5, 1.8, 1.2], "measured")])
    assert "measured: stack" in legend_texts(ax) and ax.get_ylim()[0] == 0
    with pytest.raises(ValueError, match="kind must be"):
        plots.ratio_vs_context(None, [("x", ctx, [1, 2, 3], "guess")])
    with pytest.raises(ValueError, match="3 contexts but 2 values"):
        plots.time_vs_context(None, [("x", ctx, [1, 2], "model")])
    with pytest.raises(ValueError, match="at least one curve"):
        plots.time_vs_context(None, [])


def test_ratio_vs_tokens_pairs_model_and_measured_and_marks_1_and_k_plus_1():
    ax = plots.ratio_vs_tokens(None, [("all speculate", [5, 10, 20], [1.0, 1.0, 2.0], "model"),
                                      ("all speculate", [5, 10, 20], [1.1, 1.2, 2.1], "measured")],
                               k=4, source="test host")
    labels = legend_texts(ax)
    assert labels[:2] == ["model: all speculate", "measured: all speculate"]
    assert "k + 1 = 5: verify fully compute-bound" in labels and ax.get_xscale() == "log"
    model_line, measured_line = ax.get_lines()[:2]
    assert model_line.get_color() == measured_line.get_color() and measured_line.get_linestyle() == "None"
    assert ax.get_title() and "(×)" in ax.get_ylabel() and "Tokens per weight read" in ax.get_xlabel()


@pytest.mark.parametrize("curves", [[], [("x", [1, 2], [1.0], "model")], [("x", [1], [1.0], "guess")]])
def test_ratio_vs_tokens_rejects_bad_curves(curves):
    with pytest.raises(ValueError):
        plots.ratio_vs_tokens(None, curves, k=4)


def test_predicted_vs_measured_marks_the_diagonal_the_band_and_s_equals_1():
    ax = plots.predicted_vs_measured(groups=[("source A", [1.2, 0.8, 2.0], [1.3, 1.1, 1.9]),
                                             ("source B", [1.5], [1.4])], band=(0.75, 1.25), source="held out")
    labels = legend_texts(ax)
    assert labels[:2] == ["measured: source A", "measured: source B"]
    assert "model = measured" in labels and "model: its interval (×0.75–×1.25)" in labels
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "published" in ax.get_xlabel() and "held out" in ax.get_ylabel() and ax.get_title()
    a, b = ax.lines[0], ax.lines[1]
    assert list(a.get_xdata()) == [1.2, 0.8, 2.0] and list(a.get_ydata()) == [1.3, 1.1, 1.9]
    assert a.get_color() != b.get_color() and a.get_marker() != b.get_marker()
    lo, hi = ax.get_xlim()
    assert lo < 0.8 and hi > 2.0 and ax.get_ylim() == (lo, hi)  # square: the diagonal is at 45 degrees
    for bad in ([("x", [1.0, 2.0], [1.0])], [("x", [0.0], [1.0])], []):
        with pytest.raises(ValueError):
            plots.predicted_vs_measured(groups=bad)


# ---- the intro's figure: S(B) by GPU -------------------------------------------------------------

def _curve(accel, model="idealized", batches=(1, 4, 16, 64), speedups=(2.0, 1.8, 1.2, 0.8), crossover=32,
           max_batch=64, fitted_up_to=None):
    from specnotes.pages.thesis import Curve

    return Curve(accel, model, tuple(batches), tuple(speedups), crossover, max_batch, fitted_up_to)


def test_speedup_by_gpu_one_colour_per_gpu_crossover_and_memory_marked():
    from specnotes.pages.thesis import Points

    curves = [_curve("GPU-A"), _curve("GPU-A", "calibrated", speedups=(1.7, 1.6, 1.3, 1.1), crossover=None,
                                      fitted_up_to=16),
              _curve("GPU-B", batches=(1, 2, 4, 8), speedups=(2.0, 2.0, 2.0, 2.0), crossover=None, max_batch=8)]
    points = [Points("bench, engine 1.0", "GPU-A", (1, 16), (1.7, 1.5))]
    ax = plots.speedup_by_gpu(None, curves, points, title="t", source="published: bench")
    assert legend_texts(ax) == [
        "S = 1: below it, speculation slows decoding",
        "model: idealized, a colour and a marker per GPU",
        "model: calibrated to the published points (B ≤ 16)", "model: calibrated, extrapolated past B = 16",
        "measured: bench, engine 1.0, GPU-A", "model: B*, where S falls to 1 for good",
        "model: memory full (the largest batch)"]
    assert ax.get_legend().get_title().get_text() == "published: bench"
    # each GPU named once, in its colour, where its idealized curve ends; B* on S = 1 in the GPU's colour
    texts = {t.get_text(): t for t in ax.texts}
    assert sorted(texts) == ["B* = 32", "GPU-A", "GPU-B"]
    assert texts["GPU-A"].xy == (64, 0.8) and texts["GPU-B"].xy == (8, 2.0)
    assert texts["GPU-A"].get_color() != texts["GPU-B"].get_color()
    assert texts["B* = 32"].get_color() == texts["GPU-A"].get_color()
    lines = ax.get_lines()
    (measured,) = [line for line in lines if line.get_marker() == "X"]
    assert measured.get_color() == texts["GPU-A"].get_color()  # published points on their GPU's colour
    dashed = [line for line in lines if line.get_linestyle() == "--" and line.get_color() == measured.get_color()]
    dotted = [line for line in lines if line.get_linestyle() == ":"]
    assert [list(d.get_xdata()) for d in dashed] == [[1, 4, 16]] and list(dotted[0].get_xdata()) == [16, 64]  # joined
    (star,) = [line for line in lines if line.get_marker() == "o"]
    # each GPU's idealized curve has a marker of its own, staggered where the curves coincide
    ideal = [line for line in lines if line.get_linestyle() == "-" and line.get_marker() not in ("None", "|")]
    assert len(ideal) == 2 and ideal[0].get_marker() != ideal[1].get_marker()
    assert list(star.get_xdata()) == [32] and list(star.get_ydata()) == [1.0]
    # each curve ends with a bar at its last batch (memory full)
    ends = sorted((line.get_xdata()[0], line.get_ydata()[0]) for line in lines if line.get_marker() == "|")
    assert ends == [(8, 2.0), (64, 0.8), (64, 1.1)]
    assert ax.get_xscale() == "log" and "Batch size B" in ax.get_xlabel() and "S(B)" in ax.get_ylabel()


@pytest.mark.parametrize("curves, points, message", [
    ([], [], "at least one curve"),
    ([_curve("A", model="fitted")], [], "'idealized' or 'calibrated'"),
    ([_curve("A", batches=(1, 2))], [], "2 batches but 4 speedups"),
])
def test_speedup_by_gpu_rejects_bad_curves(curves, points, message):
    with pytest.raises(ValueError, match=message):
        plots.speedup_by_gpu(None, curves, points)


def test_thesis_figure_draws_the_published_setup():
    thesis = pytest.importorskip("specnotes.pages.thesis")
    data = thesis.thesis()
    ax = thesis.figure(data)
    labels = legend_texts(ax)
    assert any(t.startswith("measured: ") and t.endswith("H100-SXM") for t in labels)
    assert set(thesis.GPUS) <= {t.get_text() for t in ax.texts}  # every GPU named on its curve
    target = data.setup.split(" + ")[0]
    assert data.setup.split(",")[0].replace(f" head for {target}", " head") in ax.get_title()  # the target named once


# ---- Chapter 2's timeline --------------------------------------------------------------------------

def test_iteration_rows_put_drafts_then_verify_against_expected_decode_steps():
    plain, spec = plots.iteration_rows("model", 4, 3.36, 10e-3, 2e-3, 12e-3)
    assert plain[0] == "model: plain decoding,\nE[N] = 3.36 steps" and plain[2] == "model"
    assert [n for n, _ in plain[1]] == ["decode"] * 4
    assert [s for _, s in plain[1]] == pytest.approx([10e-3] * 3 + [3.6e-3])  # the last step a fraction
    assert spec[1] == [("draft", 2e-3)] * 4 + [("verify", 12e-3)]
    (_, whole, _), _ = plots.iteration_rows("measured", 2, 3.0, 1.0, 0.1, 1.0)
    assert len(whole) == 3  # E[N] = 3 exactly: no zero-width fraction


@pytest.mark.parametrize("args", [("guess", 4, 3.0, 1, 1, 1), ("model", 0, 3.0, 1, 1, 1), ("model", 4, 0.0, 1, 1, 1),
                                  ("model", 4, 3.0, 1, 0, 1)])
def test_iteration_rows_reject_bad_input(args):
    with pytest.raises(ValueError):
        plots.iteration_rows(*args)


def test_iteration_timeline_bars_to_scale_with_speedup():
    rows = (plots.iteration_rows("model", 4, 3.36, 10e-3, 1e-3, 11e-3)
            + plots.iteration_rows("measured", 4, 3.36, 20e-3, 5e-3, 60e-3))
    ax = plots.iteration_timeline(None, rows, title="B = 1", source="test host")
    assert ax.get_title() == "B = 1" and "(ms)" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == [r[0] for r in reversed(rows)]
    bars = ax.collections
    assert len(bars) == 4 + 5 + 4 + 5  # one rectangle per pass
    # to scale: the measured verify bar is 60 ms wide, the model's 11 ms; the top row is the first one
    widths = [b.get_paths()[0].get_extents().width for b in bars]
    assert widths[8] == pytest.approx(11) and widths[17] == pytest.approx(60)
    assert bars[0].get_paths()[0].get_extents().y0 > bars[-1].get_paths()[0].get_extents().y0
    # hatched model bars, filled measured ones
    assert bars[0].get_hatch() == "///" and not bars[-1].get_hatch()
    speedups = [t.get_text() for t in ax.texts]
    assert speedups == [f"S = {33.6 / 15:.2f}×", f"S = {67.2 / 80:.2f}×"]
    assert ax.get_legend().get_title().get_text() == "test host"
    assert plots.iteration_timeline(None, rows, legend=False).get_legend() is None


@pytest.mark.parametrize("rows, message", [
    ([], "at least one row"),
    ([("x", [], "model")], "at least one pass"),
    ([("x", [("prefill", 1.0)], "model")], "a pass is one of"),
    ([("x", [("decode", 0.0)], "model")], "decode pass of 0.0"),
    ([("x", [("decode", 1.0)], "guess")], "kind must be"),
])
def test_iteration_timeline_rejects_bad_rows(rows, message):
    with pytest.raises(ValueError, match=message):
        plots.iteration_timeline(None, rows)


# ----------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------- Chapter 9's cache


class Block:  # the duck type of kvcache.BlockView
    def __init__(self, states, published=None, hit=False):
        self.states, self.published, self.hit = tuple(states), published, hit

    @property
    def stale(self):
        return self.published is not None and any(s != "verified" for s in self.states)


class View:  # the duck type of kvcache.CacheView
    def __init__(self, blocks, block_size=4, stage="committed"):
        self.blocks, self.block_size, self.stage = blocks, block_size, stage
        self.verified, self.known, self.written = 7, 8, 9


VIEW = View([Block(["verified"] * 4, "aaaa0000", hit=True),
             Block(["verified"] * 3 + ["pending over a rejected draft"], "bbbb1111"),
             Block(["rejected", "free", "free", "free"])])


def test_paged_cache_draws_every_slot_in_its_state_and_names_the_published_blocks():
    ax = plots.paged_cache(view=VIEW, title="a cache", flag={"aaaa0000": "served to B"})
    assert ax.get_title() == "a cache" and "slot (4 per block); #hash: published" in ax.get_xlabel()
    cells = [p for p in ax.patches if p.get_facecolor()[3] > 0 and p.get_width() == 1]
    assert len(cells) == 12  # 3 blocks of 4 slots
    colors = {matplotlib.colors.to_hex(p.get_facecolor()) for p in cells}
    assert colors == {plots.SLOT_COLORS[s].lower() for s in ("verified", "pending", "rejected", "free")}
    assert sum(p.get_hatch() == "xx" for p in cells) == 1  # the pending slot that holds a rejected draft
    labels = {t.get_text(): matplotlib.colors.to_hex(t.get_color()) for t in ax.texts}
    assert labels["#bbbb\nnot all\nverified!"] == "#d55e00"  # a stale block, in dark orange
    assert labels["#aaaa"] == "#d55e00" and "#aaaa: served to B" in ax.get_xlabel()  # a flagged one, and its note
    assert [t.get_text() for t in ax.get_yticklabels()] == ["block 0 (hit)", "block 1", "block 2"]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {plots.SLOT_LABELS[s] for s in
                                                                    ("verified", "pending over a rejected draft",
                                                                     "rejected", "free")}


def test_paged_cache_rejects_views_it_cannot_draw():
    with pytest.raises(ValueError, match="at least one block"):
        plots.paged_cache(view=View([]))
    with pytest.raises(ValueError, match="block 0 has 3 slots"):
        plots.paged_cache(view=View([Block(["verified"] * 3)]))
    with pytest.raises(ValueError, match="unknown slot state 'maybe'"):
        plots.paged_cache(view=View([Block(["maybe"] * 4)]))


def test_cache_story_lays_out_rows_of_panels_with_one_legend():
    fig = plots.cache_story([[(VIEW, "one"), (VIEW, "two", {"aaaa0000": "x"})], [(VIEW, "three")]], title="story",
                            row_titles=["eager", "rule"], notes=["diverges", "equal"])
    titles = [ax.get_title() for ax in fig.get_axes() if ax.get_visible()]
    assert titles == ["one", "two", "three"]
    assert len(fig.legends) == 1
    assert "block served by a prefix-cache hit" in [t.get_text() for t in fig.legends[0].texts]
    assert [sub.get_suptitle() for sub in fig.subfigs] == ["eager", "rule"] and fig.get_suptitle() == "story"
    with pytest.raises(ValueError, match="at least one row"):
        plots.cache_story([], title="x")


def test_recompute_vs_hit_rate_draws_measured_ends_and_the_linear_model():
    ax = plots.recompute_vs_hit_rate(rules=[("keep", 2.0), ("drop", 3.5)], no_cache_ms=10.0, gap=("drop", "keep"),
                                     source="CPU")
    lines = {line.get_label(): line for line in ax.get_lines()}
    model = lines["model: drop, linear in the hit rate"]
    assert model.get_ydata()[0] == pytest.approx(10.0) and model.get_ydata()[-1] == pytest.approx(3.5)
    assert list(lines["measured: keep, every request hits"].get_ydata()) == [2.0]
    assert list(lines["measured: no prefix caching"].get_xdata()) == [0.0]
    assert any(t.get_text() == "recompute per hit: +1.50 ms" for t in ax.texts)
    assert "(ms)" in ax.get_ylabel() and "hit" in ax.get_xlabel()
    with pytest.raises(ValueError, match="gap must name two of the rules"):
        plots.recompute_vs_hit_rate(rules=[("keep", 2.0)], no_cache_ms=10.0, gap=("drop", "keep"))
    with pytest.raises(ValueError, match="finite and positive"):
        plots.recompute_vs_hit_rate(rules=[("keep", -2.0)], no_cache_ms=10.0)


def test_cache_story_stacks_a_rows_panels_at_the_house_width():
    fig = plots.cache_story([[(VIEW, "one"), (VIEW, "two"), (VIEW, "three")]], title="story")
    assert fig.get_size_inches()[0] == plots.WIDTH
    no_hit = plots.cache_story([[(_view(), "one")]], title="no hit")  # no block served by a hit: no legend entry
    assert "block served by a prefix-cache hit" not in [t.get_text() for t in no_hit.legends[0].texts]
    visible = [ax for ax in fig.get_axes() if ax.get_visible()]
    lefts = {round(ax.get_position().x0, 3) for ax in visible}
    assert len(visible) == 3 and len(lefts) == 1  # one column
    two = plots.cache_story([[(VIEW, "one"), (VIEW, "two"), (VIEW, "three")]], title="story", columns=2)
    spare = two.get_axes()[3]  # the empty cell of a one-row story holds the legend
    assert not spare.axison and spare.get_legend() is not None and not two.legends
    with pytest.raises(ValueError, match="columns: 1 to 2"):
        plots.cache_story([[(VIEW, "one")]], title="x", columns=4)


# ---- legible where it is shown ------------------------------------------------------------------


def test_figure_is_the_house_width_and_refuses_a_third_column():
    fig, ax = plots.figure()
    assert tuple(fig.get_size_inches()) == (plots.WIDTH, 4.4) and fig.dpi == plots.DPI
    fig, axes = plots.figure(3, ncols=2, sharey=True)
    assert len(axes) == 3 and fig.get_size_inches()[1] == pytest.approx(7.2)  # two rows of 3.6 in
    assert [ax.get_visible() for ax in fig.get_axes()] == [True, True, True, False]
    for bad in ({"panels": 0}, {"panels": 6, "ncols": 3}, {"panels": 2.0}):
        with pytest.raises(ValueError, match="split more panels"):
            plots.figure(**bad)


def test_text_sizes_are_what_is_drawn_with_scripts_at_their_drawn_size():
    fig, ax = plt.subplots()
    ax.set_title("title", fontsize=14)
    ax.text(0.5, 0.5, "$x^2$", fontsize=12)
    ax.text(0.5, 0.2, "   ", fontsize=3)  # draws nothing
    ax.text(0.5, 0.1, "hidden", fontsize=2).set_visible(False)
    ax.tick_params(labelsize=11)
    sizes = dict((t, s) for s, t in plots.text_sizes(fig))
    assert sizes["title"] == 14 and sizes["$x^2$"] == pytest.approx(12 * 0.7)  # the superscript's size
    assert "hidden" not in sizes and min(sizes.values()) == pytest.approx(8.4)
    assert all(s == 11 for t, s in sizes.items() if t not in ("title", "$x^2$"))  # the tick labels


def test_legibility_is_the_smallest_text_at_the_width_the_website_shows_it():
    fig, ax = plots.figure()
    plots.speedup_vs_batch(ax, [("a", [1, 2, 4], [2.0, 1.5, 0.9], "model")], bstar=3, title="t")
    found = plots.check_legible(fig)
    assert found["font_pt"] == plots.MIN_FONT and found["natural_px"] <= plots.WIDTH * plots.DPI * 1.05
    shown = min(found["natural_px"], plots.COLUMN_PX["phone"])
    assert found["phone_px"] == pytest.approx(plots.MIN_FONT * plots.DPI / 72 * shown / found["natural_px"])
    assert found["phone_px"] >= plots.MIN_RENDERED_PX["phone"] and found["desktop_px"] >= 9
    # the same plot 13 inches wide, as Chapter 4's 2x2 grid was: its text is the same size in points, but
    # the page shrinks the figure to the column, and the text with it
    wide, ax = plt.subplots(figsize=(13, 9.5), dpi=110)
    plots.speedup_vs_batch(ax, [("a", [1, 2, 4], [2.0, 1.5, 0.9], "model")], bstar=3, title="t")
    found = plots.legibility(wide)
    assert not found["legible"] and found["phone_px"] < 5
    with pytest.raises(ValueError, match=r"renders at .* px on a phone"):
        plots.check_legible(wide)
    # and a figure of the house width whose text is smaller than MIN_FONT
    small, ax = plots.figure()
    ax.set_title("t")
    ax.legend(handles=[plt.Line2D([], [], label="tiny")], fontsize=6)
    assert plots.legibility(small)["text"] == "tiny" and not plots.legibility(small)["legible"]


def test_figure_png_records_its_smallest_text_for_the_browser_test():
    import io

    from PIL import Image

    fig, ax = plots.figure()
    plots.speedup_vs_k(ax, [("a", [1, 2, 3], [1.2, 1.4, 1.3], "model")], title="t")
    text = Image.open(io.BytesIO(plots.figure_png(fig))).text
    assert float(text[plots.FONT_RECORD]) == pytest.approx(plots.MIN_FONT * plots.DPI / 72, abs=1e-3)
    assert float(text["specnotes.min_font_pt"]) == plots.MIN_FONT
    html = plots.image_html(plt.subplots()[0], "a plot of nothing at all, for the test")
    assert html.startswith('<img alt="a plot of nothing')


def _view(blocks=3):
    return View([Block(["verified"] * 16, f"{j:08x}") for j in range(blocks - 1)]
                + [Block(["verified"] * 12 + ["draft"] * 4)], block_size=16)


def _thesis_curves():
    from specnotes.pages.thesis import Points

    return ([_curve("H100-SXM", batches=(1, 8, 64, 512), speedups=(2.0, 2.0, 1.4, 0.7), crossover=300, max_batch=512),
             _curve("H100-SXM", "calibrated", batches=(1, 8, 64, 512), speedups=(1.6, 1.5, 1.1, 0.6), crossover=90,
                    fitted_up_to=64),
             _curve("L4", batches=(1, 8, 64), speedups=(2.1, 1.9, 1.0), crossover=64, max_batch=64)],
            [Points("SpecDecode-Bench, vLLM 0.10.1", "H100-SXM", (1, 16, 64), (1.7, 1.5, 1.2))])


B, S = [1, 2, 4, 8, 16, 32, 64, 128, 256], [2.0, 2.0, 1.9, 1.8, 1.6, 1.3, 1.0, 0.8, 0.7]
LEGIBLE = {  # every plot, drawn on plots.figure() as a chapter draws it, with labels as long as the chapters'
    "roofline": lambda ax: plots.roofline(ax, roofs=["H100-SXM", ("this device: copy bandwidth, GEMM peak",
                                                                   (2e10, 8e10))],
                                          points=[(f"B={b}", b, b * 1e9) for b in B], source="a host, float32"),
    "time_vs_batch": lambda ax: plots.time_vs_batch(ax, B, [1e-3 * max(1, b / 16) for b in B],
                                                    [0.9e-3 * max(1, b / 16) for b in B], source="a host, float32"),
    "speedup_vs_batch": lambda ax: plots.speedup_vs_batch(ax, [
        ("roofline, this device's measured roofs, α=0.8", B, S, "model"),
        ("layer stacks on this device, α=0.8", B, [s * 0.9 for s in S], "measured"),
        ("the same model, its GEMMs at the measured per-M efficiency", B, [s * 0.95 for s in S], "model")],
        bstar=[("measured B*", 60), ("model B*", 64)], max_batch=128, source="a host, float32"),
    "speedup_by_gpu": lambda ax: plots.speedup_by_gpu(ax, *_thesis_curves(), source="published: SpecDecode-Bench"),
    "speedup_map": lambda ax: plots.speedup_map(
        ax, [1, 4, 16, 64, 256], [256, 1024, 4096, 16384, 65536],
        [[2.0, 1.8, 1.2, 0.8, 0.6], [2.0, 1.9, 1.4, 1.0, 0.8], [2.1, 2.0, 1.7, 1.3, 1.1], [2.2, 2.1, 1.9, 1.6, 1.4],
         [2.2, 2.2, 2.1, 1.9, 1.7]], max_batch=[256, 256, 128, 32, 8],
        boundaries={"weights | KV cache": ([1, 256], [8000, 300])}, labels=[("weights", 4, 512)]),
    "time_vs_context": lambda ax: plots.time_vs_context(ax, [
        ("B=4, 5 queries per sequence", [256, 1024, 4096], [1e-4, 3e-4, 1e-3], "measured"),
        ("B=4, 5 queries per sequence", [256, 1024, 4096], [0.9e-4, 2.8e-4, 1.1e-3], "model")], source="a host"),
    "ratio_vs_context": lambda ax: plots.ratio_vs_context(ax, [
        ("target layer, B=4, k+1=5", [256, 1024, 4096], [2.0, 1.6, 1.2], "measured"),
        ("roofline with this device's measured roofs", [256, 1024, 4096], [1.9, 1.5, 1.1], "model")], source="a host"),
    "speedup_vs_k": lambda ax: plots.speedup_vs_k(
        ax, [(f"α = {a}", range(8), [1 + a * k / 8 for k in range(8)], "model") for a in (0.6, 0.7, 0.8, 0.9)],
        best=True),
    "bars": lambda ax: plots.bars(ax, list("abcdefghijkl"), [("target p", [0.1] * 12, "model"),
                                                            ("draft q", [0.08] * 12, "model"),
                                                            ("speculative sampling, 20,000 draws", [0.09] * 12,
                                                             "measured")],
                                  xlabel="next byte", ylabel="probability", title="t"),
    "ratio_vs_tokens": lambda ax: plots.ratio_vs_tokens(ax, [
        ("all speculate, B(k+1) tokens", [5, 10, 20, 40], [1.0, 1.1, 1.5, 2.5], "model"),
        ("all speculate, B(k+1) tokens", [5, 10, 20, 40], [1.05, 1.2, 1.6, 2.4], "measured")], k=4, source="host"),
    "predicted_vs_measured": lambda ax: plots.predicted_vs_measured(
        ax, [("SpecDecode-Bench", [1.2, 1.5, 2.0], [1.1, 1.6, 1.9]), ("MagicDec", [0.8, 1.3], [0.9, 1.2])],
        band=(0.8, 1.25), source="published"),
    "iteration_timeline": lambda ax: plots.iteration_timeline(
        ax, plots.iteration_rows("model", 4, 3.36, 10e-3, 1e-3, 11e-3)
        + plots.iteration_rows("measured", 4, 3.36, 20e-3, 5e-3, 60e-3), source="a host, float32"),
    "recompute_vs_hit_rate": lambda ax: plots.recompute_vs_hit_rate(
        ax, [("keep (wrong)", 2.0), ("drop (the rule)", 3.5), ("lookahead key (right)", 2.1)], no_cache_ms=10.0,
        gap=("drop (the rule)", "keep (wrong)"), source="measured here (cpu, float32, fastest of 7)"),
    "paged_cache": lambda ax: plots.paged_cache(ax, _view(), flag={"00000001": "holds A's rejected draft"},
                                                source="shipped pair"),
}


@pytest.mark.parametrize("name", LEGIBLE)
def test_every_plot_on_a_house_figure_is_legible_on_a_phone(name):
    fig, ax = plots.figure()
    LEGIBLE[name](ax)
    plots.check_legible(fig)


def test_a_cache_story_of_four_panels_is_legible():
    fig = plots.cache_story([[(_view(), "A, iteration 1: the verify\npass writes k + 1 = 5 slots"),
                              (_view(4), "B is admitted:\nit hits the stale block", {"00000002": "holds A's draft"})]],
                            title="eager policy: publish a block once every slot is written",
                            notes=["B's output diverges from decoding without a cache"], source="shipped pair")
    plots.check_legible(fig)


def test_shared_legend_moves_one_panels_legend_under_the_grid():
    fig, axes = plots.figure(4, ncols=2)
    height = fig.get_figheight()
    curves = [("a, a label long enough to go under the axes", [1, 2, 4], [2.0, 1.5, 0.9], "model")]
    for i, ax in enumerate(axes):
        plots.speedup_vs_batch(ax, curves, title=f"panel {i}")
    assert fig.get_figheight() > height  # each legend under its axes made room for itself
    legend = plots.shared_legend(fig, axes)
    assert all(ax.get_legend() is None for ax in axes) and fig.legends == [legend]
    # ... gave it back, and the one legend under the grid takes room for its own lines (2, one column)
    assert fig.get_figheight() == pytest.approx(height + 0.22 * 2 + 0.1)
    assert "model: a, a label long enough to go under the axes" in [t.get_text() for t in legend.get_texts()]
    plots.check_legible(fig)
    with pytest.raises(ValueError, match="no legend to share"):
        plots.shared_legend(fig, axes[0])


def test_split_by_batch_stacks_every_term_in_decode_steps_with_the_s_equals_1_line():
    from specnotes.analytic import cost

    bds = [cost.breakdown(cost.QWEN3_30B_A3B, cost.QWEN3_0_6B, "H100-SXM", b, 3, 1024) for b in (1, 16, 256)]
    fig, ax = plots.figure()
    plots.split_by_batch(ax, bds, title="Qwen3-30B-A3B + Qwen3-0.6B, k = 3", tokens=cost.expected_tokens(0.7, 3))
    labels = legend_texts(ax)
    assert labels[-1].startswith("E[N] = 2.53") and all(x.startswith("model: ") for x in labels[:-1])
    assert "model: draft KV" in labels and "model: all-reduce" not in labels  # only the terms that appear
    tops = [sum(p.get_height() for c in ax.containers for p in [c[i]]) for i in range(3)]
    assert tops == pytest.approx([1 / b.ratio for b in bds])  # each bar: T_iter / T_decode
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "16", "256"]
    assert plots.check_legible(fig)["legible"]  # at the book's width and on a 390-px phone


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": ["a"], "splits": []}, "one split per label"),
    ({"labels": ["a"], "splits": [{"weights": 1.0}]}, "not terms"),
    ({"labels": ["a"], "splits": [{"fixed": -1.0}]}, "at least 0"),
    ({"labels": ["a"], "splits": [{"fixed": 1.0}], "seconds": False}, "ylabel"),
])
def test_time_split_rejects_bad_splits(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plots.time_split(title="t", xlabel="pass", **kwargs)
    with pytest.raises(ValueError, match="at least one"):
        plots.split_by_batch(breakdowns=[], title="t")
