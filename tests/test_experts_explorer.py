"""Chapter 10's experts explorer: its grid is the cost model point by point, N = m is the dense twin, the MoE curve
turns non-monotonic where the chapter says, and the chart binds every slider to its filter within the page budget."""

import json

import pytest

from specnotes import cost, moe, widgets
from specnotes.validate import BadArgument


@pytest.fixture(scope="module")
def rows():
    return widgets.experts_grid(accelerators=("H100-SXM", "H200"), experts=(8, 128), per_token=(1, 8), ks=(1, 3),
                                alphas_pct=(70, 90))


def test_rows_are_the_cost_model(rows):
    r = next(r for r in rows if (r["acc"], r["n"], r["m"], r["k"], r["a"]) == ("H200", 128, 8, 3, 70))
    target = widgets.experts_shape(128, 8)
    assert target.params == cost.QWEN3_30B_A3B.params  # N = 128, m = 8: Qwen3-30B-A3B itself
    for i, b in enumerate(widgets.EXPERT_BATCHES):
        ctx = widgets.EXPERT_CONTEXT
        assert r["S"][i] == pytest.approx(cost.batch_speedup(target, widgets.EXPERT_DRAFT, "H200", b, 3, 0.7, ctx),
                                          abs=0.005)
        assert r["D"][i] == pytest.approx(cost.batch_speedup(moe.dense_twin(target), widgets.EXPERT_DRAFT, "H200", b,
                                                             3, 0.7, ctx), abs=0.005)
    assert r["mb"] == cost.max_batch(target, widgets.EXPERT_DRAFT, "H200", widgets.EXPERT_CONTEXT, k=3)
    assert (r["ln"], r["lm"]) == (7, 3)
    assert not any(row["m"] > row["n"] for row in rows)


def test_n_equal_m_is_the_dense_twin_and_sparse_experts_rise_first(rows):
    for r in rows:
        if r["n"] == r["m"]:
            assert r["S"] == pytest.approx(r["D"], abs=0.02)  # only the router differs
    sparse = next(r for r in rows if (r["acc"], r["n"], r["m"], r["k"], r["a"]) == ("H100-SXM", 128, 8, 3, 70))
    assert max(sparse["S"]) > 1.5 * sparse["S"][0]  # rises before it falls
    assert all(b <= a + 1e-9 for a, b in zip(sparse["D"], sparse["D"][1:], strict=False))  # the twin only falls


def test_experts_must_be_powers_of_two():
    with pytest.raises(BadArgument, match="powers of 2"):
        widgets.experts_grid(experts=(6,))


def test_the_chart_binds_every_slider_and_fits_the_page():
    full = widgets.experts_grid()
    spec = widgets.altair_experts_explorer(full).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"gpu", "log2_experts", "log2_per_token", "k", "alpha"}
    assert params["log2_experts"]["bind"]["input"] == "range" and params["log2_per_token"]["bind"]["input"] == "range"
    text = json.dumps(spec)
    for name in params:
        assert f"== {name}" in text
    assert "datum.B <= datum.mb" in text
    assert len(widgets.altair_experts_explorer(full).to_html()) < 600_000
    # as wide as the column, and no title line longer than a phone's column holds at Vega's title size
    assert spec["width"] == "container"
    lines = [*spec["title"]["text"], *spec["title"]["subtitle"]]
    assert max(len(line) for line in lines) <= 45, lines
    assert spec["config"]["legend"] == {"orient": "bottom", "columns": 1}  # one entry a line: each fits a phone
