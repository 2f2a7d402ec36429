"""specnotes.pages.thesis: the intro's S(B)-by-GPU figure is the cost model's, on the published setup."""


import pytest

from specnotes import validate
from specnotes.analytic import cost, hardware
from specnotes.pages import thesis
from specnotes.record import calibrate, published


@pytest.fixture(scope="module")
def data():
    return thesis.thesis()


def test_batch_grid():
    assert thesis.batch_grid(1) == [1]
    grid = thesis.batch_grid(644)
    assert grid[0] == 1 and grid[-1] == 644 and grid == sorted(set(grid))
    assert all(b2 / b1 <= 2 ** (1 / 8) + 0.5 for b1, b2 in zip(grid[8:], grid[9:], strict=False))  # dense enough
    with pytest.raises(validate.BadArgument, match="limit"):
        thesis.batch_grid(0)


def test_idealized_curves_are_the_cost_model_up_to_what_fits(data):
    case = calibrate.cases(thesis.SOURCE, thesis.SERIES)[0]
    assert [c.accelerator for c in data.curves if c.model == "idealized"] == list(thesis.GPUS)
    for c in data.curves:
        fits = cost.max_batch(case.target, case.draft, c.accelerator, case.context, k=case.k, tp=case.tp)
        assert c.max_batch == fits and c.batches[-1] == fits and c.batches[0] == 1
        knobs = calibrate.calibration(c.accelerator, thesis.SOURCE) if c.model == "calibrated" else {}
        for b, s in list(zip(c.batches, c.speedups, strict=True))[::7]:
            assert s == pytest.approx(cost.batch_speedup(case.target, case.draft, c.accelerator, b, case.k, case.alpha,
                                                         case.context, **knobs))

        def s_at(b, c=c, knobs=knobs):
            return cost.batch_speedup(case.target, case.draft, c.accelerator, b, case.k, case.alpha, case.context,
                                      **knobs)

        if c.crossover is None:  # pays at every batch that fits
            assert all(s > 1 for s in c.speedups)
        else:  # S(B*) <= 1 < S(B* - 1), and no paying batch above B* up to what fits
            assert s_at(c.crossover) <= 1 < s_at(c.crossover - 1)
            assert all(s <= 1 for b, s in zip(c.batches, c.speedups, strict=True) if b >= c.crossover)


def test_calibrated_curve_where_a_calibration_is_stored(data):
    stored = {a for a, sources in calibrate.calibrations().items() if thesis.SOURCE in sources}
    calibrated = [c for c in data.curves if c.model == "calibrated"]
    assert {c.accelerator for c in calibrated} == stored & set(thesis.GPUS)
    assert calibrated, "the published setup's GPU has a calibration: the figure shows it"
    for c in calibrated:
        fitted = [x for x in calibrate.record().cases if x.key == ("vllm", "0.10.1", c.accelerator)]
        assert c.fitted_up_to == max(x.batch for x in fitted)  # the largest batch the engine's fit saw


def test_published_points_are_the_series(data):
    series = published.load(thesis.SOURCE)[thesis.SERIES]
    (points,) = data.published
    assert points.accelerator == series.setup["accelerator"]
    assert list(points.batches) == series.column("batch") and list(points.speedups) == series.column("speedup")
    assert "SpecDecode-Bench" in points.label and "vLLM" in points.label
    assert thesis.thesis(accelerators=("A100-80GB",)).published == ()  # not measured there: no points


def test_the_setup_is_named(data):
    case = calibrate.cases(thesis.SOURCE, thesis.SERIES)[0]
    assert data.setup == (f"{case.target.name} + EAGLE-3 head for {case.target.name}, k = {case.k}, "
                          f"α = {case.alpha:.2f}, L = {case.context} tokens")
    assert case.draft.name == f"EAGLE-3 head ({case.target.name})"
    assert data.curve("A100-80GB").accelerator == "A100-80GB"
    with pytest.raises(validate.BadArgument, match="no calibrated curve for L4"):
        data.curve("L4", "calibrated")


def test_summary_follows_the_numbers():
    def curve(accel, model="idealized", crossover=None, end=1.04, fitted_up_to=None):
        return thesis.Curve(accel, model, (1, 128, 644), (2.0, 1.4, end), crossover, 644, fitted_up_to)

    data = thesis.Thesis("setup", (curve("H100-SXM"), curve("A100-80GB", crossover=113, end=0.85),
                                   curve("H100-SXM", "calibrated", fitted_up_to=128, end=1.13)),
                         (thesis.Points("bench", "H100-SXM", (1, 128), (1.71, 1.30)),), "published: bench")
    text = thesis.summary(data)
    assert text.startswith("In the idealized model S(B) falls to 1 at B* = 113 on the A100-80GB. It is still 1.04 on "
                           "the H100-SXM when memory is full at B = 644.")
    assert text.endswith("The published H100-SXM points fall from 1.71 at B = 1 to 1.30 at B = 128.")
    assert len(text.split(". ")) == 3  # short: where the curves cross or end, and the published points
    assert thesis.why_one_crosses(data) == ""  # the A100 has another peak than the H100: no same-FLOP/s pair


def test_why_one_crosses_names_the_same_flops_and_the_lower_ridge():
    def curve(accel, crossover=None):
        return thesis.Curve(accel, "idealized", (1, 128, 644), (2.0, 1.4, 0.9 if crossover else 1.02), crossover, 644)

    data = thesis.Thesis("setup", (curve("H100-SXM"), curve("H200", crossover=166)), (), "published")
    h100, h200 = hardware.accelerator("H100-SXM"), hardware.accelerator("H200")
    assert h100.peak_flops["bf16"] == h200.peak_flops["bf16"] and h200.mem_bandwidth > h100.mem_bandwidth
    why = thesis.why_one_crosses(data)
    assert why.startswith(f"With the H100-SXM's FLOP/s and {h200.mem_bandwidth / h100.mem_bandwidth:.2f}× its "
                          "bandwidth, the H200 has a lower ridge")
    assert f"({h200.ridge():.0f} against {h100.ridge():.0f} FLOP/byte)" in why
    assert why.endswith("So S(B) ends at 0.90, not 1.02.") and max(len(x.split()) for x in why.split(". ")) <= 25
    both = thesis.Thesis("setup", (curve("H100-SXM", 300), curve("H200", 166)), (), "published")
    assert thesis.why_one_crosses(both) == ""  # both cross: nothing to explain


@pytest.mark.parametrize("accelerators, message", [(("H100",), "accelerator"), ((), "at least one GPU")])
def test_thesis_rejects_bad_accelerators(accelerators, message):
    with pytest.raises(validate.BadArgument, match=message):
        thesis.thesis(accelerators=accelerators)


def test_thesis_says_when_the_setup_does_not_fit(monkeypatch):
    monkeypatch.setattr(thesis.cost, "max_batch", lambda *a, **k: 0)
    with pytest.raises(validate.BadArgument, match="do not fit on H100-SXM"):
        thesis.thesis(accelerators=("H100-SXM",))


def test_the_figure_reads_on_a_phone_and_its_curves_show_apart(data):
    # issue 47: "S(B) on 4 GPUs" read as tp = 4, the four solid curves overlapped up to B ≈ 40, ticks at 7 px
    import matplotlib

    matplotlib.use("Agg")
    from specnotes.pages import plots

    ax = thesis.figure(data)
    found = plots.legibility(ax.figure)
    assert found["phone_px"] >= plots.MIN_RENDERED_PX["desktop"] and found["desktop_px"] >= 9
    title = ax.get_title()
    assert "one GPU of each" in title and "4 GPUs" not in title and "tp" not in title
    ideal = [line for line in ax.get_lines() if line.get_linestyle() == "-" and line.get_marker() not in ("None", "|")]
    assert len({line.get_marker() for line in ideal}) == len(thesis.GPUS)
    # where they coincide (B < 32), each curve's markers sit at batches no other curve's do
    marked = [{line.get_xdata()[i] for i in line.get_markevery() if line.get_xdata()[i] < 32} for line in ideal]
    assert all(m for m in marked) and all(not (a & b) for i, a in enumerate(marked) for b in marked[i + 1:])
