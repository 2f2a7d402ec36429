"""Explorers of the speedup model S(B): pure functions of ``specnotes.analytic.cost`` plus two thin layers.

- ``speedup_curve`` / ``fits_batch`` / ``explorer_grid``: the numbers, computed from ``cost`` only
  (tested point by point against ``cost.batch_speedup``, ``cost.crossover_batch``, ``cost.max_batch``).
- ``altair_explorer``: a Vega-Lite chart over the precomputed grid whose sliders filter it in the
  browser, so it stays interactive on the static website with no kernel. Batches that do not fit in
  the accelerator's memory are drawn grey.
- ``ipywidgets_explorer``: the live version for Jupyter and Colab, evaluating the model on every change
  (any k, α, context, overlap; not just the grid's).

Both offer two models: the **idealized** per-kernel roofline (``overlap="kernel"``, no overhead: the
book's default) and the model **calibrated** to an engine, ``calibrate.calibration(accelerator, CALIBRATION)``:
the per-pass overheads and overlap mode fitted to SpecDecode-Bench's vLLM 0.10.1 measurements on one
H100 (Chapter 6). A calibration describes an engine on a GPU, so the calibrated curve exists only for an
accelerator that has one (``calibrated_accelerators``); elsewhere the explorers say so.
``model=`` / ``**model`` here, and ``model_kwargs`` in the live explorer, take any other keyword
arguments of the time functions (``overlap``, ``overhead``, ``draft_overhead``, ...).
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import replace

from specnotes import validate
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B
from specnotes.record import calibrate

TARGETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B)}
DRAFT = LLAMA_3_2_1B
# 1 .. 4096 sequences, about two points per doubling
BATCHES = sorted({round(2 ** (i / 2)) for i in range(25)})
# The static grid, coarsened to stay under 1 MB of JSON per page (Chapter 5 says what was cut):
# k up to 6 (the live explorer goes to 16), α in steps of 10 %, and six contexts chosen for Chapter 5's
# story on an H100 (8B + 1B, k = 4, α = 0.8): B* grows with L (0, 512), the crossover is gone by 1024 and
# from there the memory limit ends the curve (2048, 8192, 32768).
GRID_K = tuple(range(1, 7))
GRID_ALPHA_PCT = (50, 60, 70, 80, 90)
GRID_CONTEXT = (0, 512, 1024, 2048, 8192, 32768)
OVERLAP_LABELS = {"kernel": "per kernel", "pass": "per pass", "none": "no overlap"}
# The engine calibration the explorers offer beside the idealized model (Chapter 6 fits it), and how the
# menus name the two models. In the static grid a row's "cal" is one of MODELS' keys.
CALIBRATION = "specdecode_bench"
IDEALIZED = "idealized"
MODELS = {IDEALIZED: "idealized: per-kernel roofline, no overhead",
          CALIBRATION: "calibrated: vLLM 0.10.1 on an H100 (SpecDecode-Bench, Chapter 6)"}


def calibrated_accelerators(source: str = CALIBRATION) -> list[str]:
    """The accelerators with a stored calibration fitted to ``source`` (``calibrate.calibration`` works for them)."""
    return [acc for acc, sources in calibrate.calibrations().items() if source in sources]


def _shapes(target: cost.ModelShape, draft, accel, dtype: str):
    dtype = hardware.usable_dtype(accel, dtype)
    return target.in_dtype(dtype), draft.in_dtype(dtype) if isinstance(draft, cost.ModelShape) else draft, dtype


def speedup_curve(target: cost.ModelShape, draft: cost.ModelShape, accel, k: int, alpha: float, context: int = 0,
                  dtype: str = "bf16", batches=BATCHES, **model) -> tuple[list[int], list[float], int | None]:
    """(batches, S(B) at each, B*) for one setting; the dtype also sets the bytes per weight and KV entry.
    ``model``: keyword arguments of ``cost.batch_speedup`` (overlap, overhead, draft_overhead, ...).
    B* is ``cost.crossover_batch`` (no memory limit: compare with ``fits_batch``)."""
    accel = hardware.accelerator(accel)
    target, draft, dtype = _shapes(target, draft, accel, dtype)
    speedups = [cost.batch_speedup(target, draft, accel, b, k, alpha, context, dtype, **model) for b in batches]
    return list(batches), speedups, cost.crossover_batch(target, draft, accel, k, alpha, context, dtype, **model)


def fits_batch(target: cost.ModelShape, draft: cost.ModelShape, accel, k: int, context: int = 0,
               dtype: str = "bf16", tp: int = 1) -> int | None:
    """The largest batch whose weights and both KV caches fit (``cost.max_batch``), in ``dtype``."""
    accel = hardware.accelerator(accel)
    target, draft, _ = _shapes(target, draft, accel, dtype)
    return cost.max_batch(target, draft, accel, context, k=k, tp=tp)


def _target_model(model: dict) -> dict:
    return {key: v for key, v in model.items() if key != "draft_context"}  # the target has no draft cache


def _crossover(pays: Callable[[int], bool], batches: list[int]) -> int | None:
    """``cost.crossover_batch`` over ``batches[0]..batches[-1]``: the first batch past the last paying one
    (None if the last batch pays, 1 if none does), the paying edge bisected between grid points."""
    last = batches[-1]
    if pays(last):
        return None
    paying = [b for b in batches if pays(b)]
    if not paying:
        return 1
    lo = paying[-1]
    hi = next(b for b in batches if b > lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return hi


def _grid_rows(target, draft, accel, k, alphas_pct, context, batches, model) -> list[dict]:
    """One row per α for one (accelerator, target, k, context): the pass times do not depend on α, so
    they are computed once per batch and shared (S = E[N]·T_decode / T_iter, as ``cost.batch_speedup``)."""
    target, draft, dtype = _shapes(target, draft, accel, "bf16")
    times: dict[int, tuple[float, float]] = {}

    def t(b: int) -> tuple[float, float]:
        if b not in times:
            times[b] = (cost.pass_time(target, accel, b, 1, context, dtype, **_target_model(model)),
                        cost.iteration_time(target, draft, accel, b, k, context, dtype, **model))
        return times[b]

    rows = []
    for a in alphas_pct:
        en = cost.expected_tokens(a / 100, k)
        speedups = [en * t(b)[0] / t(b)[1] for b in batches]
        bstar = _crossover(lambda b, en=en: en * t(b)[0] / t(b)[1] > 1, list(batches))
        rows.append({"a": a, "S": [round(s, 2) for s in speedups], "bstar": bstar})
    return rows


# The static page's rows: every accelerator but the GeForce cards, which keep the chart under its page budget
# (tests/pages/test_widgets.py); the ipywidgets explorer and the advisor take every row of the table.
EXPLORER_ACCELERATORS = tuple(name for name in hardware.ACCELERATORS if not name.startswith("RTX-"))


def explorer_grid(accelerators=EXPLORER_ACCELERATORS, targets=tuple(TARGETS), ks=GRID_K,
                  alphas_pct=GRID_ALPHA_PCT, contexts=GRID_CONTEXT, batches=BATCHES,
                  model: Callable[[str], dict] | dict | None = None, calibration: str | None = CALIBRATION,
                  ) -> list[dict]:
    """One row per setting: {cal, acc, tgt, k, a (α in %), ctx, S: [S(B) for B in batches] (2 decimals),
    bstar, mb}, bf16 (fp16 on the T4). ``bstar``: ``cost.crossover_batch`` with ``max_batch`` = the
    largest of ``batches`` (None: still pays there); ``mb``: the largest batch that fits in memory
    (``cost.max_batch``; None where the table has no memory size). Where not even the weights fit
    (``mb`` = 0: Llama-3-70B on one 80 GB GPU) ``S`` is empty: no curve describes a server there.

    ``model``: the time functions' keyword arguments, or a function of the accelerator's name returning
    them; default: the idealized per-kernel roofline (``cal`` = "idealized"; "model" when ``model`` is
    given). ``calibration``: a published source whose stored calibration adds a second set of rows
    (``cal`` = the source) for every accelerator in ``accelerators`` that has one; None: none."""
    batches = validate.integers("batches", batches, low=1)
    rows = _model_rows(IDEALIZED if model is None else "model", accelerators, targets, ks, alphas_pct, contexts,
                       batches, model)
    if calibration is not None:
        calibrated = [acc for acc in accelerators if acc in calibrated_accelerators(calibration)]
        rows += _model_rows(calibration, calibrated, targets, ks, alphas_pct, contexts, batches,
                            lambda acc: calibrate.calibration(acc, calibration))
    return rows


def _model_rows(label, accelerators, targets, ks, alphas_pct, contexts, batches, model) -> list[dict]:
    rows = []
    for acc, tgt, k, ctx in itertools.product(accelerators, targets, ks, contexts):
        accel = hardware.accelerator(acc)
        kwargs = model(acc) if callable(model) else dict(model or {})
        mb = fits_batch(TARGETS[tgt], DRAFT, accel, k, ctx)
        for row in _grid_rows(TARGETS[tgt], DRAFT, accel, k, alphas_pct, ctx, batches, kwargs):
            rows.append({"cal": label, "acc": acc, "tgt": tgt, "k": k, "a": row["a"], "ctx": ctx,
                         "S": [] if mb == 0 else row["S"], "bstar": row["bstar"], "mb": mb})
    return rows


def _param(alt, name, value, options, label):
    """A slider when the options are evenly spaced numbers, a menu otherwise."""
    if all(isinstance(v, int | float) for v in options) and len(options) > 1:
        steps = {b - a for a, b in zip(options, options[1:], strict=False)}
        if len(steps) == 1:
            return alt.param(name=name, value=value, bind=alt.binding_range(
                min=min(options), max=max(options), step=steps.pop(), name=label))
    return alt.param(name=name, value=value, bind=alt.binding_select(options=options, name=label))


def altair_explorer(rows: list[dict], batches=BATCHES, initial: dict | None = None):
    """Vega-Lite chart of S(B) with B* marked; sliders and menus filter ``rows`` in the browser.

    The filter leaves one row; its S array is flattened, numbered, and each number looked up in
    ``batches`` (so B is not repeated in every row of the page's data). Batches past the row's memory
    limit ``mb`` are drawn grey and dashed, over a grey band labelled with the limit. Rows of more than
    one model (``cal``: idealized, calibrated) get a model menu; where the chosen model has no row for the
    chosen accelerator (no calibration on that GPU) the chart says so instead of drawing a curve."""
    import altair as alt

    init = {"cal": IDEALIZED, "acc": "H100-SXM", "tgt": LLAMA_3_8B.name, "k": 4, "a": 80, "ctx": 0, **(initial or {})}
    keys = [key for key in init if key != "cal" or len({r.get("cal") for r in rows}) > 1]
    options = {key: sorted({r[key] for r in rows}, key=lambda v: (isinstance(v, str), v)) for key in keys}
    params = {
        "acc": alt.param(name="accelerator", value=init["acc"],
                         bind=alt.binding_select(options=options["acc"], name="accelerator ")),
        "tgt": alt.param(name="target", value=init["tgt"],
                         bind=alt.binding_radio(options=options["tgt"], name="target (draft: Llama-3.2-1B) ")),
        "k": _param(alt, "k", init["k"], options["k"], "k, draft tokens "),
        "a": _param(alt, "alpha", init["a"], options["a"], "α, acceptance rate (%) "),
        "ctx": alt.param(name="context", value=init["ctx"],
                         bind=alt.binding_select(options=options["ctx"], name="context L (tokens) ")),
    }
    if "cal" in keys:
        models = sorted(options["cal"], key=lambda m: m != IDEALIZED)
        params["cal"] = alt.param(name="model", value=init["cal"], bind=alt.binding_radio(
            options=models, labels=[MODELS.get(m, m) for m in models], name="model "))
    b_max = max(batches)
    x_scale = alt.Scale(type="log", base=2, domain=[min(batches), b_max])
    chosen = alt.Chart().transform_filter(
        " && ".join(f"datum.{key} == {p.name}" for key, p in params.items()))
    points = chosen.transform_flatten(["S"]).transform_window(i="row_number()").transform_lookup(
        lookup="i", from_=alt.LookupData(alt.Data(values=[{"i": i + 1, "B": b} for i, b in enumerate(batches)]),
                                         key="i", fields=["B"]),
    ).transform_calculate(fits="datum.mb == null || datum.B <= datum.mb")
    x = alt.X("B:Q", scale=x_scale, title="batch size B (sequences)", axis=alt.Axis(labelOverlap="greedy"))
    y = alt.Y("S:Q", title="speedup S(B), model", scale=alt.Scale(zero=True))
    tooltip = [alt.Tooltip("B:Q"), alt.Tooltip("S:Q", format=".2f"), alt.Tooltip("fits:N", title="fits in memory")]
    beyond = points.mark_line(color="gray", strokeDash=[4, 3], strokeWidth=1.5).encode(x=x, y=y)
    fitting = points.transform_filter("datum.fits").mark_line(point=True).encode(x=x, y=y, tooltip=tooltip)
    no_gain = alt.Chart(alt.Data(values=[{"y": 1}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    full = chosen.transform_filter(f"datum.mb != null && datum.mb < {b_max}").transform_calculate(
        start="max(datum.mb, 0.5)", end=str(b_max),
        label="'does not fit in memory: max batch ' + datum.mb")
    band = full.mark_rect(color="gray", opacity=0.18, clip=True).encode(x=alt.X("start:Q", scale=x_scale), x2="end:Q")
    band_text = full.mark_text(align="right", baseline="top", dx=-4, dy=4, color="dimgray").encode(
        x=alt.X("end:Q", scale=x_scale), y=alt.value(0), text="label:N")
    crossover = chosen.transform_filter("datum.bstar != null")
    bstar_rule = crossover.mark_rule(color="firebrick", strokeWidth=2).encode(x=alt.X("bstar:Q", scale=x_scale))
    bstar_text = crossover.mark_text(align="left", dx=4, dy=-120, color="firebrick").encode(
        x=alt.X("bstar:Q", scale=x_scale), text=alt.Text("label:N")).transform_calculate(
        label="'B* = ' + datum.bstar + (datum.mb != null && datum.bstar > datum.mb ? ' (does not fit)' : '')")
    layers = [band, band_text, beyond, fitting, no_gain, bstar_rule, bstar_text]
    if "cal" in params:  # a model with no rows for this accelerator: say so where the curve would be
        for m in options["cal"]:
            accs = sorted({r["acc"] for r in rows if r["cal"] == m})
            if set(accs) != set(options["acc"]):
                layers.append(alt.Chart(alt.Data(values=[{}])).transform_filter(
                    f"model == '{m}' && indexof({accs}, accelerator) < 0").transform_calculate(
                    label=f"'no calibration for ' + accelerator + ':\\nthe {m} fit (Chapter 6)\\nis for "
                          f"{', '.join(accs)} only'"  # three short lines: they fit a phone
                ).mark_text(color="firebrick", fontSize=13, lineBreak="\n").encode(
                    x=alt.value({"expr": "width / 2"}), y=alt.value(150), text="label:N"))
    # data at the top level: the layers that use the grid share one copy of it
    # as wide as the page's column ("container"): on a phone too, with the title on two short lines
    return alt.layer(*layers, data=alt.Data(values=rows)).add_params(*params.values()).properties(
        width="container", height=320,
        title=["Speculative decoding: speedup vs batch size", "(model per the menu; grey: does not fit)"])


def model_kwargs(values: dict) -> dict:
    """The live explorer's control values -> keyword arguments of the time functions: the chosen overlap
    for the idealized model, or the stored calibration of the chosen accelerator (its overheads and its
    own overlap mode; ValueError, naming the calibrated accelerators, where it has none)."""
    if values.get("calibration", IDEALIZED) == IDEALIZED:
        return {"overlap": values["overlap"]}
    return calibrate.calibration(values["accel"], values["calibration"])


def ipywidgets_explorer(initial: dict | None = None):
    """Live explorer for a kernel: every control re-evaluates ``speedup_curve`` and ``fits_batch``.
    ``initial``: starting values by control name (accel, dtype, target, calibration, overlap, k, alpha,
    context). Returns the widget box; ``box.redraw()`` redraws, ``box.last`` holds the last (batches,
    speedups, bstar) and ``box.fits`` the largest batch that fits for that setting. With a calibration
    chosen, the overlap menu is disabled: the calibration brings its own."""
    import ipywidgets as w

    from specnotes.pages import plots

    style = {"description_width": "initial"}
    controls = {
        "accel": w.Dropdown(options=list(hardware.ACCELERATORS), value="H100-SXM", description="accelerator",
                            style=style),
        "dtype": w.Dropdown(options=["bf16", "fp8"], value="bf16", description="dtype", style=style),
        "target": w.Dropdown(options=list(TARGETS), value=LLAMA_3_8B.name, description="target", style=style),
        "calibration": w.Dropdown(options=[(label, key) for key, label in MODELS.items()], value=IDEALIZED,
                                  description="model", style=style, layout=w.Layout(width="max-content")),
        "overlap": w.Dropdown(options=[(label, key) for key, label in OVERLAP_LABELS.items()], value="kernel",
                              description="roofline", style=style),
        "k": w.IntSlider(value=4, min=1, max=16, description="k", style=style),
        "alpha": w.FloatSlider(value=0.8, min=0.0, max=1.0, step=0.01, description="α", style=style),
        "context": w.IntSlider(value=0, min=0, max=131072, step=1024, description="context L", style=style),
    }
    for name, value in (initial or {}).items():
        validate.choice("initial control", name, controls)
        controls[name].value = value
    view = w.HTML()  # the plot as an <img> with alt text (an Output widget's image has none on the website)
    rows = (["accel", "dtype", "target"], ["calibration", "overlap"], ["k", "alpha", "context"])
    box = w.VBox([w.HBox([controls[name] for name in row]) for row in rows] + [view])

    def redraw(*_):
        c = {name: ctl.value for name, ctl in controls.items()}
        target = TARGETS[c["target"]]
        controls["overlap"].disabled = c["calibration"] != IDEALIZED
        try:
            box.last = speedup_curve(target, DRAFT, c["accel"], c["k"], c["alpha"], c["context"], c["dtype"],
                                     **model_kwargs(c))
            box.fits = fits_batch(target, DRAFT, c["accel"], c["k"], c["context"], c["dtype"])
        except ValueError as err:  # fp8 on a GPU without fp8; a calibration this GPU does not have
            box.last = box.fits = None
            view.value = f"<pre>{html.escape(str(err))}</pre>"
            return
        batches, speedups, bstar = box.last
        how = (OVERLAP_LABELS[c["overlap"]] if c["calibration"] == IDEALIZED
               else f"calibrated ({c['calibration']}, Chapter 6)")
        fig, ax = plots.figure()
        plots.speedup_vs_batch(ax, [(f"{c['target']} + {DRAFT.name}, k={c['k']}, α={c['alpha']:.2f}",
                                     batches, speedups, "model")], bstar=bstar, max_batch=box.fits,
                               title=f"{c['accel']}, {c['dtype']}, L={c['context']}, {how}: "
                                     f"max batch that fits {box.fits}")
        ends = ("stays above 1 at every batch" if bstar is None else "is below 1 at every batch" if bstar == 1
                else f"falls to 1 at B* = {bstar}")
        view.value = plots.image_html(fig, (
            f"Plot of the modelled speedup S(B) against batch size for {c['target']} with a {DRAFT.name} draft on "
            f"{c['accel']} in {c['dtype']}, k = {c['k']}, α = {c['alpha']:.2f}, L = {c['context']}, {how}: "
            f"S(B) {ends}; the largest batch that fits in memory is {box.fits}."))

    for ctl in controls.values():
        ctl.observe(redraw, names="value")
    box.controls, box.redraw = controls, redraw
    redraw()
    return box


# ---------------------------------------------------------------------------------------------- experts (Chapter 10)
# The experts explorer: Qwen3-30B-A3B's layers, attention and vocabulary with N experts of its width (768), m per
# token, drafted by Qwen3-0.6B, beside the dense model of the same active size (``moe.dense_twin``: the same
# layers with one MLP of width m·768). N = m is that dense model (every expert runs for every token).
EXPERT_BASE = cost.QWEN3_30B_A3B
EXPERT_DRAFT = cost.QWEN3_0_6B
GRID_EXPERTS = (8, 16, 32, 64, 128, 256)
GRID_PER_TOKEN = (1, 2, 4, 8)
GRID_EXPERT_K = (1, 2, 3, 4)
EXPERT_ACCELERATORS = ("H100-SXM", "H200", "A100-80GB")
EXPERT_CONTEXT = 1024
EXPERT_BATCHES = tuple(2**i for i in range(13))  # 1 .. 4096


def experts_shape(n_experts: int, per_token: int, base: cost.MoEShape = EXPERT_BASE) -> cost.MoEShape:
    """``base`` with ``n_experts`` experts of its width, ``per_token`` of them per token."""
    return replace(base, n_experts=n_experts, experts_per_token=per_token,
                   name=f"{base.name} layers, {n_experts} experts, {per_token} per token")


def experts_knobs(acc: str) -> dict:
    """The calibration the experts explorer's third curve uses on ``acc``: the record's SGLang MoE engines
    (``calibrate.lookup``: fitted on this GPU, else their family's knobs), with the kept term, their experts' GEMM
    at 1/(1 + expert_slowdown) of the peak."""
    return calibrate.lookup(acc, "sglang", moe=True)[1]


def experts_grid(accelerators=EXPERT_ACCELERATORS, experts=GRID_EXPERTS, per_token=GRID_PER_TOKEN, ks=GRID_EXPERT_K,
                 alphas_pct=GRID_ALPHA_PCT[1:], context: int = EXPERT_CONTEXT, batches=EXPERT_BATCHES) -> list[dict]:
    """One row per (accelerator, N, m ≤ N, k, α): {acc, n, m, ln = log2 N, lm = log2 m (what the menus set),
    k, a, S: the MoE target's S(B), D: its dense twin's, C: the MoE target's with the record's SGLang MoE
    calibration (``experts_knobs``), mb: the largest batch the MoE target and draft fit in (``cost.max_batch``)},
    bf16, at ``context`` tokens, S rounded to 2 decimals. S and D are the idealized model. N and m are powers of 2."""
    from specnotes.analytic import moe  # the dense twin

    batches = validate.integers("batches", batches, low=1)
    for name, values in (("experts", experts), ("per_token", per_token)):
        if any(v < 1 or v & (v - 1) for v in validate.integers(name, values, low=1)):
            raise validate.BadArgument(f"{name} must be powers of 2 (the menus set their log2); got {values}")
    rows = []
    for acc, n, m, k in itertools.product(accelerators, experts, per_token, ks):
        if m > n:
            continue
        accel = hardware.accelerator(acc)
        target = experts_shape(n, m)
        twin = moe.dense_twin(target)
        mb = cost.max_batch(target, EXPERT_DRAFT, accel, context, k=k)
        sparse = _grid_rows(target, EXPERT_DRAFT, accel, k, alphas_pct, context, batches, {})
        dense = _grid_rows(twin, EXPERT_DRAFT, accel, k, alphas_pct, context, batches, {})
        fitted = _grid_rows(target, EXPERT_DRAFT, accel, k, alphas_pct, context, batches, experts_knobs(acc))
        for s, d, c in zip(sparse, dense, fitted, strict=True):
            rows.append({"acc": acc, "n": n, "m": m, "ln": round(math.log2(n)), "lm": round(math.log2(m)), "k": k,
                         "a": s["a"], "S": s["S"], "D": d["S"], "C": c["S"], "mb": mb})
    return rows


def altair_experts_explorer(rows: list[dict], batches=EXPERT_BATCHES, initial: dict | None = None):
    """Vega-Lite chart of S(B) for the MoE target (N experts, m per token) and its dense twin, idealized, and the
    MoE target with the record's SGLang MoE calibration (the kept term: its experts' GEMM below peak); menus for N
    and m (their values, not their log2), sliders for k and α and a menu for the GPU filter ``rows``
    (``experts_grid``) in the browser, no kernel needed. The MoE curves are drawn where they fit in memory."""
    import altair as alt

    init = {"acc": "H100-SXM", "ln": 7, "lm": 3, "k": 3, "a": 70, **(initial or {})}
    options = {key: sorted({r[key] for r in rows}) for key in init}
    params = {
        "acc": alt.param(name="gpu", value=init["acc"], bind=alt.binding_select(options=options["acc"], name="GPU ")),
        "ln": alt.param(name="log2_experts", value=init["ln"], bind=alt.binding_select(
            options=options["ln"], labels=[f"{2**v:,}" for v in options["ln"]], name="experts per layer, N ")),
        "lm": alt.param(name="log2_per_token", value=init["lm"], bind=alt.binding_select(
            options=options["lm"], labels=[f"{2**v:,}" for v in options["lm"]], name="experts per token, m ")),
        "k": _param(alt, "k", init["k"], options["k"], "k, draft tokens "),
        "a": _param(alt, "alpha", init["a"], options["a"], "α, acceptance rate (%) "),
    }
    x_scale = alt.Scale(type="log", base=2, domain=[min(batches), max(batches)])
    chosen = alt.Chart().transform_filter(" && ".join(f"datum.{key} == {p.name}" for key, p in params.items()))
    points = chosen.transform_flatten(["S", "D", "C"]).transform_window(i="row_number()").transform_lookup(
        lookup="i", from_=alt.LookupData(alt.Data(values=[{"i": i + 1, "B": b} for i, b in enumerate(batches)]),
                                         key="i", fields=["B"]),
    ).transform_calculate(fits="datum.mb == null || datum.B <= datum.mb")
    ticks = [b for b in batches if math.log(b, 4) == round(math.log(b, 4))]  # 1, 4, 16, ...: no two run together
    x = alt.X("B:Q", scale=x_scale, title="batch size B (sequences)",
              axis=alt.Axis(values=ticks, format=",", labelOverlap=True))
    names = ["MoE target (N experts, m per token)", "dense twin (same active size)",
             "MoE target, the record's SGLang MoE fit"]
    series = alt.Color("series:N", title=None, scale=alt.Scale(domain=names, range=["firebrick", "steelblue",
                                                                                   "darkorange"]))
    literal = json.dumps  # a Vega string literal: double quotes, so an apostrophe ("record's") stays inside it
    sparse = points.transform_filter("datum.fits").transform_calculate(
        series=literal(names[0])).mark_line(point=True).encode(
        x=x, y=alt.Y("S:Q", title="speedup S(B), model", scale=alt.Scale(zero=True)), color=series,
        tooltip=[alt.Tooltip("B:Q"), alt.Tooltip("S:Q", format=".2f", title="S, MoE")])
    dense = points.transform_calculate(series=literal(names[1])).mark_line(
        point=True, strokeDash=[5, 3]).encode(x=x, y="D:Q", color=series,
                                              tooltip=[alt.Tooltip("B:Q"), alt.Tooltip("D:Q", format=".2f",
                                                                                          title="S, dense twin")])
    fitted = points.transform_filter("datum.fits").transform_calculate(series=literal(names[2])).mark_line(
        point=True, strokeDash=[2, 2]).encode(x=x, y="C:Q", color=series, tooltip=[
            alt.Tooltip("B:Q"), alt.Tooltip("C:Q", format=".2f", title="S, fitted")])
    no_gain = alt.Chart(alt.Data(values=[{"y": 1}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    layers = alt.layer(sparse, dense, fitted, no_gain, data=alt.Data(values=rows))
    return layers.add_params(*params.values()).properties(
        width="container", height=300, title=alt.Title(  # short lines: the column is 358 px on a phone
            [f"{EXPERT_BASE.name}'s layers, S(B)", "with N experts, m per token"],
            subtitle=[f"{EXPERT_DRAFT.name} draft, L = {EXPERT_CONTEXT}: idealized,",
                      "and the fit to the published MoE series;", "MoE curves stop where they no longer fit"])
    ).configure_legend(orient="bottom", columns=1)
