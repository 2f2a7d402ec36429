"""Chapter 10's experts explorer: its grid is the cost model point by point, N = m is the dense twin, the MoE curve
turns non-monotonic where the chapter says, and the chart binds every slider to its filter within the page budget."""

import json

import pytest

from specnotes.analytic import cost, moe
from specnotes.pages import widgets
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
    knobs = widgets.experts_knobs("H200")  # the kept term: the SGLang MoE engines' experts below peak
    assert knobs["expert_slowdown"] > 1
    assert r["C"][0] == pytest.approx(cost.batch_speedup(target, widgets.EXPERT_DRAFT, "H200", 1, 3, 0.7,
                                                         widgets.EXPERT_CONTEXT, **knobs), abs=0.005)
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
    # N and m are menus that show their values, not log2 sliders ("N = 2^ [slider] 7", issue 47)
    for name, labels in (("log2_experts", ["8", "16", "32", "64", "128", "256"]),
                         ("log2_per_token", ["1", "2", "4", "8"])):
        assert params[name]["bind"]["input"] == "select" and params[name]["bind"]["labels"] == labels
    # the batch axis' ticks are powers of 4, so no two labels run together on a phone ("512 1,024", issue 47)
    axis = spec["layer"][0]["encoding"]["x"]["axis"]
    assert axis["values"] == [1, 4, 16, 64, 256, 1024, 4096] and axis["labelOverlap"] is True
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


def _expressions(node):
    """Every Vega expression in a spec: each transform's calculate and filter strings."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("calculate", "filter") and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def _literals_close(expr: str) -> bool:
    """True when every string literal of ``expr`` closes, and one that opens the expression closes only at its end
    (a series name as a literal: "'the record's fit'" ends at "record" and leaves "s fit'" to the parser)."""
    quote, i, ends = None, 0, []
    while i < len(expr):
        ch = expr[i]
        if quote and ch == "\\":
            i += 2
            continue
        if quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
            ends.append(i)
        i += 1
    return quote is None and (expr[:1] not in "'\"" or not expr or ends[0] == len(expr) - 1)


def test_every_vega_expression_closes_its_strings():
    # the site showed "Javascript Error: Unexpected token after expression": the fitted series' name has an
    # apostrophe ("the record's SGLang MoE fit") and was set as a single-quoted literal
    spec = widgets.altair_experts_explorer(widgets.experts_grid(experts=(8, 128), per_token=(1, 8))).to_dict()
    exprs = list(_expressions(spec))
    assert any("record's" in e for e in exprs)
    bad = [e for e in exprs if not _literals_close(e)]
    assert bad == []
    assert not _literals_close("'MoE target, the record's SGLang MoE fit'")  # the check catches the old literal
