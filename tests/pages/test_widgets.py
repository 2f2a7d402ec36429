import json

import pytest

from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B
from specnotes.pages import widgets
from specnotes.record import calibrate

SMALL = {"accelerators": ("H100-SXM", "T4"), "ks": (1, 4), "alphas_pct": (60, 90), "contexts": (0, 512, 8192)}


@pytest.fixture(scope="module")
def grid():
    return widgets.explorer_grid(**SMALL)


def knobs(row):
    return {} if row["cal"] == widgets.IDEALIZED else calibrate.calibration(row["acc"], row["cal"])


def expected_row(row, **model):
    accel = hardware.accelerator(row["acc"])
    dtype = "fp16" if row["acc"] == "T4" else "bf16"
    target = widgets.TARGETS[row["tgt"]].in_dtype(dtype)
    draft = LLAMA_3_2_1B.in_dtype(dtype)
    alpha, k, ctx = row["a"] / 100, row["k"], row["ctx"]
    return {"S": [cost.batch_speedup(target, draft, accel, b, k, alpha, ctx, dtype, **model) for b in widgets.BATCHES],
            "bstar": cost.crossover_batch(target, draft, accel, k, alpha, ctx, dtype, max_batch=4096, **model),
            "mb": cost.max_batch(target, draft, accel, ctx, k=k)}


def test_grid_matches_the_cost_model_point_by_point(grid):
    # accelerators × targets × k × α × context, idealized; then the H100 again, calibrated (the T4 has none)
    assert len(grid) == 2 * 2 * 2 * 2 * 3 + 1 * 2 * 2 * 2 * 3
    assert {(r["cal"], r["acc"]) for r in grid} == {("idealized", "H100-SXM"), ("idealized", "T4"),
                                                    ("specdecode_bench", "H100-SXM")}
    for row in grid:
        expected = expected_row(row, **knobs(row))
        assert (row["bstar"], row["mb"]) == (expected["bstar"], expected["mb"])
        if row["mb"] == 0:  # the weights alone do not fit: no curve
            assert row["S"] == []
        else:
            assert row["S"] == pytest.approx(expected["S"], abs=5e-3)  # 2 decimals on the page
    assert any(r["mb"] == 0 for r in grid) and any(r["S"] for r in grid)
    assert None in {r["bstar"] for r in grid}  # pays to the end of the grid somewhere


def test_grid_says_never_pays():
    rows = widgets.explorer_grid(accelerators=("L4",), targets=(LLAMA_3_8B.name,), ks=(2,), alphas_pct=(0, 50),
                                 contexts=(0,))
    assert [r["bstar"] for r in rows] == [1, expected_row(rows[1])["bstar"]]  # α = 0: one token per iteration


def test_grid_takes_a_model_per_accelerator():
    # any keyword arguments of the time functions, per accelerator
    overheads = {"H100-SXM": 2e-3, "L4": 5e-3}
    rows = widgets.explorer_grid(accelerators=("H100-SXM", "L4"), targets=(LLAMA_3_8B.name,), ks=(3,),
                                 alphas_pct=(70,), contexts=(1024,),
                                 model=lambda acc: {"overhead": overheads[acc], "overlap": "none"}, calibration=None)
    assert [r["cal"] for r in rows] == ["model", "model"]
    for row in rows:
        expected = expected_row(row, overhead=overheads[row["acc"]], overlap="none")
        assert row["S"] == pytest.approx(expected["S"], abs=5e-3) and row["bstar"] == expected["bstar"]
    default = widgets.explorer_grid(accelerators=("H100-SXM",), targets=(LLAMA_3_8B.name,), ks=(3,),
                                    alphas_pct=(70,), contexts=(1024,), calibration=None)
    assert default[0]["S"] != rows[0]["S"] and default[0]["cal"] == "idealized"


def test_calibrated_rows_are_the_stored_calibration_and_differ_from_the_idealized():
    assert widgets.calibrated_accelerators() == ["H100-SXM"]  # SpecDecode-Bench: one H100
    rows = widgets.explorer_grid(accelerators=("H100-SXM", "L4"), targets=(LLAMA_3_8B.name,), ks=(4,),
                                 alphas_pct=(80,), contexts=(0,))
    assert [(r["acc"], r["cal"]) for r in rows] == [("H100-SXM", "idealized"), ("L4", "idealized"),
                                                    ("H100-SXM", "specdecode_bench")]  # no calibration on the L4
    ideal, _, cal = rows
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    assert knobs["layer_overhead"] > 0 and knobs["draft_overhead"] > 0  # the fitted per-layer and per-draft costs
    assert cal["S"] == pytest.approx(expected_row(cal, **knobs)["S"], abs=5e-3)
    assert cal["bstar"] == expected_row(cal, **knobs)["bstar"] != ideal["bstar"]
    # Chapter 4: the calibrated curve falls earlier (B = 64) but crosses 1 later than the idealized one
    at64 = widgets.BATCHES.index(64)
    assert cal["S"][at64] < ideal["S"][at64] and cal["bstar"] > ideal["bstar"]
    assert widgets.explorer_grid(accelerators=("L4",), targets=(LLAMA_3_8B.name,), ks=(4,), alphas_pct=(80,),
                                 contexts=(0,), calibration="specdecode_bench")[0]["cal"] == "idealized"


def test_the_grid_shows_the_books_claims(grid):
    h100 = {(r["tgt"], r["k"], r["a"], r["ctx"]): r for r in grid if (r["acc"], r["cal"]) == ("H100-SXM", "idealized")}
    row = h100[(LLAMA_3_8B.name, 4, 90, 0)]
    assert row["S"][0] > 2 > 1 > row["S"][-1]  # pays at B = 1, costs at B = 4096
    assert row["bstar"] is not None and 32 < row["bstar"] < 512
    # Chapter 5: B* grows with the context, and at 8192 tokens speculation pays up to the largest batch
    # in the grid, of which only the first 45-odd sequences fit in 80 GB
    short, longer = h100[(LLAMA_3_8B.name, 4, 60, 0)], h100[(LLAMA_3_8B.name, 4, 60, 512)]
    assert longer["bstar"] > short["bstar"]
    assert h100[(LLAMA_3_8B.name, 4, 90, 512)]["bstar"] is None  # at α = 0.9 already gone by L = 512
    long = h100[(LLAMA_3_8B.name, 4, 90, 8192)]
    assert long["bstar"] is None and long["S"][-1] > 1 and 40 < long["mb"] < 50
    seventy = h100[(cost.LLAMA_3_70B.name, 4, 90, 0)]
    assert seventy["mb"] == 0 and seventy["S"] == []  # 141 GB of weights on an 80 GB GPU: no curve



def test_altair_explorer_binds_every_control_to_the_filter(grid):
    spec = widgets.altair_explorer(grid).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"accelerator", "target", "k", "alpha", "context", "model"}
    assert params["model"]["bind"]["options"] == ["idealized", "specdecode_bench"]
    assert params["model"]["value"] == "idealized" and "vLLM" in params["model"]["bind"]["labels"][1]
    assert all("bind" in p for p in params.values())
    assert params["k"]["bind"]["input"] == "range" and params["alpha"]["bind"]["step"] == 30
    assert params["context"]["bind"]["options"] == [0, 512, 8192]
    text = json.dumps(spec)
    for name in params:
        assert f"== {name}" in text  # each control filters the data
    grids = [d for d in spec.get("datasets", {}).values() if d and "S" in d[0]]
    grids += [spec["data"]["values"]] if "values" in spec.get("data", {}) else []
    assert len(grids) == 1 and len(grids[0]) == len(grid)  # one copy of the grid on the page
    initial = {r["acc"] for r in grid}
    assert params["accelerator"]["value"] in initial
    assert "datum.B <= datum.mb" in text and "does not fit in memory: max batch" in text  # the memory limit
    # the T4 has no calibration: with the calibrated model chosen the chart says so
    assert "model == 'specdecode_bench' && indexof(['H100-SXM'], accelerator) < 0" in text
    assert "no calibration for" in text


def test_one_model_means_no_model_menu():
    rows = widgets.explorer_grid(accelerators=("H100-SXM",), targets=(LLAMA_3_8B.name,), ks=(4,), alphas_pct=(80,),
                                 contexts=(0,), calibration=None)
    spec = widgets.altair_explorer(rows).to_dict()
    assert "model" not in {p["name"] for p in spec["params"]} and "no calibration" not in json.dumps(spec)


def test_sliders_only_offer_values_the_grid_has():
    # a slider step that lands between grid values would filter every row away: an empty chart
    spec = widgets.altair_explorer(widgets.explorer_grid(accelerators=("H100-SXM",), targets=(LLAMA_3_8B.name,),
                                                         ks=(1, 2, 4), alphas_pct=(60, 80), contexts=(0,))).to_dict()
    params = {p["name"]: p["bind"] for p in spec["params"]}
    assert params["k"]["input"] == "select" and params["k"]["options"] == [1, 2, 4]  # uneven: a menu
    assert (params["alpha"]["input"], params["alpha"]["step"]) == ("range", 20)
    full = {p["name"]: p["bind"] for p in widgets.altair_explorer(
        [{"acc": "H100-SXM", "tgt": LLAMA_3_8B.name, "k": k, "a": a, "ctx": 0, "S": [1.0], "bstar": None, "mb": 9}
         for k in widgets.GRID_K for a in widgets.GRID_ALPHA_PCT]).to_dict()["params"]}
    assert (full["k"]["step"], full["alpha"]["step"]) == (1, 10)


def test_the_static_grid_fits_the_page_budget():
    import time

    start = time.perf_counter()
    rows = widgets.explorer_grid()
    elapsed = time.perf_counter() - start
    html = widgets.altair_explorer(rows).to_html()
    assert len(html) < 1_000_000, f"{len(html) / 1e6:.2f} MB of page for the explorer: coarsen the grid"
    assert elapsed < 30, f"the grid took {elapsed:.0f} s"


def test_ipywidgets_explorer_recomputes_on_change():
    box = widgets.ipywidgets_explorer()
    batches, before, _ = box.last
    box.controls["alpha"].value = 0.5
    _, after, _ = box.last
    assert after[0] < before[0]  # lower acceptance, lower speedup at B = 1
    assert box.fits == cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, "H100-SXM", 0, k=4)
    box.controls["context"].value = 8192
    assert box.fits == 45  # Chapter 5: 8B + 1B at 8192 tokens on an 80 GB H100
    per_kernel = box.last[1]
    box.controls["overlap"].value = "pass"
    assert box.last[1] == [cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, "H100-SXM", b, 4, 0.5, 8192, overlap="pass")
                           for b in widgets.BATCHES]
    assert box.last[1] != per_kernel
    box.controls["overlap"].value = "kernel"
    box.controls["calibration"].value = "specdecode_bench"  # the stored calibration, with its own overlap
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    assert box.controls["overlap"].disabled
    assert box.last[1] == [cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, "H100-SXM", b, 4, 0.5, 8192, **knobs)
                           for b in widgets.BATCHES]
    box.controls["accel"].value = "T4"  # no calibration there: said, not plotted
    assert box.last is None and box.fits is None
    box.controls["calibration"].value = "idealized"
    assert not box.controls["overlap"].disabled and box.last is not None
    box.controls["accel"].value = "A100-80GB"
    box.controls["dtype"].value = "fp8"  # the A100 has no fp8: said, not plotted
    assert box.last is None and box.fits is None


def test_ipywidgets_explorer_starts_where_asked():
    box = widgets.ipywidgets_explorer({"context": 8192, "overlap": "none"})
    assert box.controls["context"].value == 8192 and box.fits == 45
    assert box.last[1][0] == pytest.approx(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, "H100-SXM", 1, 4, 0.8, 8192,
                                                              overlap="none"))
    with pytest.raises(ValueError, match="initial control must be one of"):
        widgets.ipywidgets_explorer({"batch": 3})


def test_speedup_vs_batch_plot():
    import matplotlib

    matplotlib.use("Agg")
    from specnotes.pages import plots

    ax = plots.speedup_vs_batch(None, [("m", [1, 2, 4], [2.0, 1.5, 0.9], "model"),
                                       ("x", [1, 2, 4], [1.8, 1.2, 0.8], "measured")], bstar=3)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "model: m" in labels and "measured: x" in labels and "B* = 3" in labels
    with pytest.raises(ValueError, match="kind must be"):
        plots.speedup_vs_batch(None, [("m", [1], [1.0], "guess")])


def test_ipywidgets_explorer_draws_an_image_that_says_what_it_shows():
    import re

    box = widgets.ipywidgets_explorer()
    view = box.children[-1]
    (alt,) = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', view.value)
    bstar = box.last[2]
    assert "Llama-3-8B" in alt and "H100-SXM" in alt and f"B* = {bstar}" in alt
    assert f"fits in memory is {box.fits}" in alt
    box.controls["alpha"].value = 0.0  # E[N] = 1: never pays, said so, not a B*
    (alt,) = re.findall(r'<img alt="([^"]+)"', view.value)
    assert box.last[2] == 1 and "is below 1 at every batch" in alt and "B*" not in alt
    box.controls["dtype"].value = "fp8"
    box.controls["accel"].value = "A100-80GB"  # no fp8 there: the error, as text, and no image
    assert box.last is None and "<img" not in view.value and "<pre>" in view.value


def test_image_html_needs_alt_text_and_closes_the_figure():
    import matplotlib.pyplot as plt

    from specnotes.pages import plots

    fig, _ = plt.subplots()
    out = plots.image_html(fig, 'A "quoted" <plot> of nothing in particular')
    assert out.startswith('<img alt="A &quot;quoted&quot; &lt;plot&gt; of nothing in particular" src="data:image/png')
    assert not plt.fignum_exists(fig.number)
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="alt"):
        plots.image_html(fig, "  ")
    plt.close(fig)
