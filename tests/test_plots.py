"""specnotes.plots: figures exist, with titles, units and measured-vs-model legends."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from specnotes import plots  # noqa: E402


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
    hardware = pytest.importorskip("specnotes.hardware")
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
