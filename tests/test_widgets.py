import json

import pytest

from specnotes import cost, hardware, widgets
from specnotes.cost import LLAMA_3_2_1B, LLAMA_3_8B

SMALL = {"accelerators": ("H100-SXM", "T4"), "ks": (1, 4), "alphas_pct": (60, 90), "contexts": (0, 8192)}


@pytest.fixture(scope="module")
def grid():
    return widgets.explorer_grid(**SMALL)


def test_grid_matches_the_cost_model_point_by_point(grid):
    assert len(grid) == 2 * 2 * 2 * 2 * 2  # accelerators × targets × k × α × context
    for row in grid:
        accel = hardware.accelerator(row["acc"])
        dtype = "fp16" if row["acc"] == "T4" else "bf16"
        target = widgets.TARGETS[row["tgt"]].in_dtype(dtype)
        draft = LLAMA_3_2_1B.in_dtype(dtype)
        expected = [cost.batch_speedup(target, draft, accel, b, row["k"], row["a"] / 100, row["ctx"], dtype)
                    for b in widgets.BATCHES]
        assert row["S"] == pytest.approx(expected, abs=5e-4)
        assert row["bstar"] == cost.crossover_batch(target, draft, accel, row["k"], row["a"] / 100, row["ctx"], dtype)


def test_the_grid_shows_the_books_claims(grid):
    h100 = {(r["tgt"], r["k"], r["a"], r["ctx"]): r for r in grid if r["acc"] == "H100-SXM"}
    row = h100[(LLAMA_3_8B.name, 4, 90, 0)]
    assert row["S"][0] > 2 > 1 > row["S"][-1]  # pays at B = 1, costs at B = 4096
    assert row["bstar"] is not None and 32 < row["bstar"] < 512



def test_altair_explorer_binds_every_control_to_the_filter(grid):
    spec = widgets.altair_explorer(grid).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"accelerator", "target", "k", "alpha", "context"}
    assert all("bind" in p for p in params.values())
    assert params["k"]["bind"]["input"] == "range" and params["alpha"]["bind"]["step"] == 5
    text = json.dumps(spec)
    for name in params:
        assert f"== {name}" in text  # each control filters the data
    grids = [d for d in spec.get("datasets", {}).values() if d and "S" in d[0]]
    grids += [spec["data"]["values"]] if "values" in spec.get("data", {}) else []
    assert len(grids) == 1 and len(grids[0]) == len(grid)  # one copy of the grid on the page
    initial = {r["acc"] for r in grid}
    assert params["accelerator"]["value"] in initial


def test_ipywidgets_explorer_recomputes_on_change():
    box = widgets.ipywidgets_explorer()
    batches, before, _ = box.last
    box.controls["alpha"].value = 0.5
    _, after, _ = box.last
    assert after[0] < before[0]  # lower acceptance, lower speedup at B = 1
    box.controls["accel"].value = "A100-80GB"
    box.controls["dtype"].value = "fp8"  # the A100 has no fp8: said, not plotted
    assert box.last is None


def test_speedup_vs_batch_plot():
    import matplotlib

    matplotlib.use("Agg")
    from specnotes import plots

    ax = plots.speedup_vs_batch(None, [("m", [1, 2, 4], [2.0, 1.5, 0.9], "model"),
                                       ("x", [1, 2, 4], [1.8, 1.2, 0.8], "measured")], bstar=3)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "model: m" in labels and "measured: x" in labels and "B* = 3" in labels
    with pytest.raises(ValueError, match="kind must be"):
        plots.speedup_vs_batch(None, [("m", [1], [1.0], "guess")])
