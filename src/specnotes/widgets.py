"""Explorers of the speedup model S(B): pure functions of ``specnotes.cost`` plus two thin layers.

- ``speedup_curve`` / ``explorer_grid``: the numbers, computed by ``cost.batch_speedup`` and
  ``cost.crossover_batch`` only (tested point by point against them).
- ``altair_explorer``: a Vega-Lite chart over the precomputed grid whose sliders filter it in the
  browser, so it stays interactive on the static website with no kernel.
- ``ipywidgets_explorer``: the live version for Jupyter and Colab, evaluating the model on every change
  (any k, α, context, not just the grid's).
"""

from __future__ import annotations

import itertools

from specnotes import cost, hardware
from specnotes.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B

TARGETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B)}
DRAFT = LLAMA_3_2_1B
# 1 .. 4096 sequences, about two points per doubling
BATCHES = sorted({round(2 ** (i / 2)) for i in range(25)})
GRID_K = tuple(range(1, 9))
GRID_ALPHA_PCT = (50, 60, 70, 80, 90, 95)
GRID_CONTEXT = (0, 8192, 32768)


def speedup_curve(target: cost.ModelShape, draft: cost.ModelShape, accel, k: int, alpha: float, context: int = 0,
                  dtype: str = "bf16", batches=BATCHES) -> tuple[list[int], list[float], int | None]:
    """(batches, S(B) at each, B*) for one setting; the dtype also sets the bytes per weight and KV entry."""
    accel = hardware.accelerator(accel)
    dtype = hardware.usable_dtype(accel, dtype)
    target, draft = target.in_dtype(dtype), draft.in_dtype(dtype)
    speedups = [cost.batch_speedup(target, draft, accel, b, k, alpha, context, dtype) for b in batches]
    return list(batches), speedups, cost.crossover_batch(target, draft, accel, k, alpha, context, dtype)


def explorer_grid(accelerators=tuple(hardware.ACCELERATORS), targets=tuple(TARGETS), ks=GRID_K,
                  alphas_pct=GRID_ALPHA_PCT, contexts=GRID_CONTEXT, batches=BATCHES) -> list[dict]:
    """One row per setting: {acc, tgt, k, a (α in %), ctx, S: [S(B) for B in batches], bstar}, 16-bit weights."""
    rows = []
    for acc, tgt, k, a, ctx in itertools.product(accelerators, targets, ks, alphas_pct, contexts):
        _, s, bstar = speedup_curve(TARGETS[tgt], DRAFT, acc, k, a / 100, ctx, "bf16", batches)
        rows.append({"acc": acc, "tgt": tgt, "k": k, "a": a, "ctx": ctx, "S": [round(x, 3) for x in s],
                     "bstar": bstar})
    return rows


def altair_explorer(rows: list[dict], batches=BATCHES, initial: dict | None = None):
    """Vega-Lite chart of S(B) with B* marked; sliders and menus filter ``rows`` in the browser.

    The filter leaves one row; its S array is flattened, numbered, and each number looked up in
    ``batches`` (so B is not repeated in every row of the page's data)."""
    import altair as alt

    init = {"acc": "H100-SXM", "tgt": LLAMA_3_8B.name, "k": 4, "a": 80, "ctx": 0, **(initial or {})}
    options = {key: sorted({r[key] for r in rows}, key=lambda v: (isinstance(v, str), v)) for key in init}
    params = {
        "acc": alt.param(name="accelerator", value=init["acc"],
                         bind=alt.binding_select(options=options["acc"], name="accelerator ")),
        "tgt": alt.param(name="target", value=init["tgt"],
                         bind=alt.binding_radio(options=options["tgt"], name="target (draft: Llama-3.2-1B) ")),
        "k": alt.param(name="k", value=init["k"],
                       bind=alt.binding_range(min=min(options["k"]), max=max(options["k"]), step=1,
                                              name="k, draft tokens ")),
        "a": alt.param(name="alpha", value=init["a"],
                       bind=alt.binding_range(min=min(options["a"]), max=max(options["a"]), step=5,
                                              name="α, acceptance rate (%) ")),
        "ctx": alt.param(name="context", value=init["ctx"],
                         bind=alt.binding_select(options=options["ctx"], name="context L (tokens) ")),
    }
    chosen = alt.Chart().transform_filter(
        " && ".join(f"datum.{key} == {p.name}" for key, p in params.items()))
    curve = chosen.transform_flatten(["S"]).transform_window(i="row_number()").transform_lookup(
        lookup="i", from_=alt.LookupData(alt.Data(values=[{"i": i + 1, "B": b} for i, b in enumerate(batches)]),
                                         key="i", fields=["B"]),
    ).mark_line(point=True).encode(
        x=alt.X("B:Q", scale=alt.Scale(type="log", base=2), title="batch size B (sequences)"),
        y=alt.Y("S:Q", title="speedup S(B), model", scale=alt.Scale(zero=True)),
        tooltip=[alt.Tooltip("B:Q"), alt.Tooltip("S:Q", format=".2f")],
    )
    no_gain = alt.Chart(alt.Data(values=[{"y": 1}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    crossover = chosen.transform_filter("datum.bstar != null")
    bstar_rule = crossover.mark_rule(color="firebrick", strokeWidth=2).encode(x="bstar:Q")
    bstar_text = crossover.mark_text(align="left", dx=4, dy=-120, color="firebrick").encode(
        x="bstar:Q", text=alt.Text("label:N")).transform_calculate(label="'B* = ' + datum.bstar")
    # data at the top level: the three layers that use the grid share one copy of it
    return alt.layer(curve, no_gain, bstar_rule, bstar_text, data=alt.Data(values=rows)).add_params(
        *params.values()).properties(
        width=560, height=320, title="Speculative decoding: speedup vs batch size (roofline model)")


def ipywidgets_explorer():
    """Live explorer for a kernel: every control re-evaluates ``speedup_curve``. Returns the widget box;
    ``box.redraw()`` redraws and ``box.last`` holds the last (batches, speedups, bstar)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    from specnotes import plots

    style = {"description_width": "initial"}
    controls = {
        "accel": w.Dropdown(options=list(hardware.ACCELERATORS), value="H100-SXM", description="accelerator",
                            style=style),
        "dtype": w.Dropdown(options=["bf16", "fp8"], value="bf16", description="dtype", style=style),
        "target": w.Dropdown(options=list(TARGETS), value=LLAMA_3_8B.name, description="target", style=style),
        "k": w.IntSlider(value=4, min=1, max=16, description="k", style=style),
        "alpha": w.FloatSlider(value=0.8, min=0.0, max=1.0, step=0.01, description="α", style=style),
        "context": w.IntSlider(value=0, min=0, max=131072, step=1024, description="context L", style=style),
    }
    out = w.Output()
    box = w.VBox([w.HBox(list(controls.values())[:3]), w.HBox(list(controls.values())[3:]), out])

    def redraw(*_):
        c = {name: ctl.value for name, ctl in controls.items()}
        try:
            box.last = speedup_curve(TARGETS[c["target"]], DRAFT, c["accel"], c["k"], c["alpha"], c["context"],
                                     c["dtype"])
        except ValueError as err:  # e.g. fp8 on a GPU without fp8
            box.last = None
            with out:
                out.clear_output(wait=True)
                print(err)
            return
        batches, speedups, bstar = box.last
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(8, 4.5))
            plots.speedup_vs_batch(ax, [(f"{c['target']} + {DRAFT.name}, k={c['k']}, α={c['alpha']:.2f}",
                                         batches, speedups, "model")], bstar=bstar,
                                   title=f"{c['accel']}, {c['dtype']}, L={c['context']}")
            plt.show()

    for ctl in controls.values():
        ctl.observe(redraw, names="value")
    box.controls, box.redraw = controls, redraw
    redraw()
    return box
