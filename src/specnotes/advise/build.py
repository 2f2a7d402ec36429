"""``deployment``: every input checked once and built into a Deployment, anchored on a measured S(B) where one
is given (``anchored``)."""

from __future__ import annotations

import math
from dataclasses import replace

from specnotes import validate
from specnotes.advise.base import DRAFTERS, K_DEFAULT, OVERLAPS, Anchor, Deployment
from specnotes.advise.calibration import _calibrate, request_of, resolve_calibration, stored_band
from specnotes.advise.inputs import (
    MAX_CONTEXT,
    _is_float,
    accept_by_position,
    alpha_range,
    alpha_value,
    batch_range,
    drafter,
    gpu,
    k_value,
    match_name,
    measured_points,
    model_shape,
    tp_check,
    tree_value,
)
from specnotes.advise.model import memory_limit, speedup
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import ModelShape


def anchored(dep: Deployment, points, source: str, variant: str | None, held_back=(), quartiles=None) -> Deployment:
    """The deployment anchored on measured (B, S) points: the level is exp(mean log(measured / model)) over
    them; without a given α, the α whose E[N] best explains them (the level is then 1 unless that E[N] is
    past [1, k + 1]). The band is the stored anchored band of ``variant`` (None: knobs by hand). A point
    past the memory limit, or with S above what k drafts can give (k + 1 tokens per step), is refused."""
    fits = memory_limit(dep)
    most = (len(dep.tree) if dep.tree else dep.k) + 1
    for b, v in points:
        if fits is not None and b > fits:
            raise validate.BadArgument(f"{source}: B = {b} does not fit in memory here: at most B = {fits} sequences "
                                       f"(weights + both KV caches at L = {dep.context}); check --context, --gpu, "
                                       "--tp and --memory")
        if v > most:
            raise validate.BadArgument(f"{source}: S = {v:g} at B = {b} is above {most}, the most tokens per step "
                                       f"k = {most - 1} drafts can give: is it a speedup (TPOT off over on) at this "
                                       "k?")
    if dep.alpha is None:
        ratios = [speedup(replace(dep, alpha=0.0), b, dep.k) for b, _ in points]  # E[N] = 1 at α = 0
        tokens = math.exp(sum(math.log(v / r) for (_, v), r in zip(points, ratios, strict=True)) / len(points))
        clamped = min(max(tokens, 1.0), float(most))
        alpha = cost.implied_alpha(clamped, dep.k) if not dep.tree else 0.0
        dep = replace(dep, alpha=alpha, alpha_from=f"implied by the measured level, E[N] = {clamped:.2f}: not "
                                                   "measured" + ("" if clamped == tokens else
                                                                 f"; the level needs E[N] = {tokens:.2f}"),
                      tokens=clamped if dep.tree else dep.tokens)
    model = [speedup(dep, b, dep.k) for b, _ in points]
    level = math.exp(sum(math.log(v / m) for (_, v), m in zip(points, model, strict=True)) / len(points))
    band, about = (None, None)
    if variant is not None:
        band, about = stored_band(_calibrate().stored(), variant, "anchor")
    return replace(dep, anchor=Anchor(tuple(points), source, level, band, about, tuple(held_back),
                                      dict(quartiles or {}), tuple(model)))


def deployment(target=None, draft=None, *, target_shape=None, draft_shape=None, drafter_kind: str = "model",
               exit_layer=None, gpu_name=None, bandwidth=None, peak=None, memory=None, link=None,
               dtype: str = "bf16", weight_bits=None, tp=1, batch="1", context=0, draft_context=None,
               alpha=None, mean_accepted=None, k=None, calibration="auto", overhead=None, draft_overhead=None,
               overlap=None, calibration_lookup=None, engine=None, engine_version=None, layer_overhead=None,
               tree=None, verified=None, draft_vocab=None, measured=None, measured_from: str = "--measured",
               held_back=(), quartiles=None, device_label: str | None = None,
               alpha_note: str | None = None, notes=(), accept_by_position_=None) -> Deployment:
    """Check every input once and build the Deployment. Errors name the argument (the CLI's flag with
    dashes for underscores): a ``validate.BadArgument``. ``overhead``, ``draft_overhead``: ms;
    ``layer_overhead``: µs; ``k`` None: k = 4 for a chain (the report says it was not given).

    ``measured``: S measured on the reader's engine, "B:S[,B:S...]" or [(B, S), ...], from ``measured_from``
    (a record's ``held_back`` points and per-batch ``quartiles`` travel along): the model's S(B) is anchored to
    their level (``anchored``), and α, if not given, is the one that level implies. ``notes``: how names were
    read (a record's); every name read loosely adds its own, and they lead the report's warnings.

    ``accept_by_position_``: per-position acceptance as vLLM logs it, P(N ≥ i + 1) ("0.8,0.7,0.6"), in place of α:
    E[N] at k is 1 + the first k of them (Chapter 11), k is at most their number (default: all of them)."""
    notes = list(notes)
    drafter_kind = match_name("drafter", drafter_kind, DRAFTERS, "a drafter", notes)
    target_shape_ = model_shape("target", target, target_shape, notes)
    draft_shape_ = None if draft is None and draft_shape is None else model_shape("draft", draft, draft_shape, notes)
    dtype = match_name("dtype", dtype, hardware.DTYPE_BYTES, "a dtype", notes)
    accel = gpu(gpu_name, bandwidth, peak, memory, link, dtype, notes)
    if device_label:
        accel = replace(accel, name=device_label)
    try:
        math_dtype = hardware.usable_dtype(accel, dtype)
    except ValueError:
        raise validate.BadArgument(f"dtype must be one of {', '.join(map(repr, accel.peak_flops))} on {accel.name} "
                                   f"(its table row has no {dtype!r} peak); got {dtype!r}") from None
    tp = validate.integer("tp", tp, low=1)
    if tp > 1 and not accel.link_bandwidth:
        raise validate.BadArgument(f"tp > 1 needs the GPU's link bandwidth, which {accel.name} has no value for: "
                                   "give --link GB/s")
    target_shape_ = target_shape_.in_dtype(math_dtype)
    draft_shape_ = draft_shape_.in_dtype(math_dtype) if draft_shape_ is not None else None
    if weight_bits is not None:
        weight_bits = validate.number("weight_bits", weight_bits, low=1, high=16)
        target_shape_ = target_shape_.weight_only(weight_bits)
        draft_shape_ = draft_shape_.weight_only(weight_bits) if draft_shape_ is not None else None
    the_draft, draft_name = drafter(drafter_kind, target_shape_, draft_shape_, exit_layer, draft_vocab)
    shapes = [target_shape_] + ([the_draft] if isinstance(the_draft, ModelShape) else
                                [the_draft.layer] if isinstance(the_draft, cost.EagleHead) else [])
    tp_check(tp, shapes)
    lo_hi = batch_range(batch)
    if context is None:
        raise validate.BadArgument("context is required: the context L your requests decode at, in tokens (prompt "
                                   "plus half the output, on average). The KV reads it sets can change the answer "
                                   "completely; 0 prices the weights alone")
    context = validate.integer("context", context, low=0, high=MAX_CONTEXT)
    if draft_context is not None:
        draft_context = validate.integer("draft_context", draft_context, low=0, high=MAX_CONTEXT)
    widths, tokens, survivals = None, None, None
    if accept_by_position_ is not None:
        if alpha is not None or mean_accepted is not None or tree is not None or measured is not None:
            raise validate.BadArgument("accept_by_position replaces alpha and mean_accepted, and goes without tree and "
                                       "measured: give one of them")
        survivals = accept_by_position(accept_by_position_)
        if k is not None and str(k).strip().lower() != "best":
            validate.integer("k", k_value(k), low=1, high=len(survivals))
        alpha = cost.pooled_alpha(cost.conditional_rates(survivals))
        alpha_note = (f"per position, P(N ≥ i + 1) = {', '.join(f'{x:g}' for x in survivals)} (E[N] at k: 1 + the "
                      f"first k of them; α = {alpha:.3f} is their pooled rate, for what needs one number)")
        k = len(survivals) if k is None else k
    span = alpha_range(alpha) if alpha is not None and tree is None and survivals is None else None
    if tree is not None:
        if k is not None:
            raise validate.BadArgument("k does not apply to a tree: its depth is the number of --tree widths and "
                                       "--verified its tokens scored")
        if alpha is not None or mean_accepted is None or "@" in str(mean_accepted):
            raise validate.BadArgument("a tree has no i.i.d. acceptance rate: give its mean_accepted M (tokens per "
                                       "iteration, bonus included), not alpha or M@K")
        widths, k_ = tree_value(tree, verified)
        tokens = validate.number("mean_accepted", float(mean_accepted) if _is_float(mean_accepted) else
                                 mean_accepted, low=1, high=len(widths) + 1)
        alpha, alpha_from, k_from = 0.0, f"a mean accepted length of {tokens:g} tokens per iteration (a tree)", \
            "the tree"
    else:
        if verified is not None:
            raise validate.BadArgument("verified goes with --tree")
        at = str(mean_accepted).partition("@")[2].strip() if mean_accepted is not None else ""
        k_from_mean = k is None and at.isdigit()
        k = at if k_from_mean else k  # a mean measured at K runs at K unless --k says otherwise
        k_given = k is not None
        k_ = K_DEFAULT if k is None else k_value(k)
        if measured is not None and (not k_given or k_ is None):
            raise validate.BadArgument("measured needs the k your engine ran at: give --k K (not 'best'; a record "
                                       "that says its k gives it)")
        if measured is not None and alpha is None and mean_accepted is None:
            alpha, alpha_from = None, "implied by the measured level"
        else:
            alpha, alpha_from = alpha_value(alpha, mean_accepted, k_, k_given)
            alpha_from = alpha_note or alpha_from
        k_from = ("the k --mean-accepted M@K was measured at" if k_from_mean else "given" if k_given else
                  f"k = {K_DEFAULT}: the default (--k not given)")
    engine = None if engine is None else str(engine).strip().lower() or None
    # the table's name for the GPU asked for (a loose name, "h100-sxm", is matched to "H100-SXM"); None for one
    # given by --bandwidth/--peak, a modified row, or a record's own device
    table_gpu = accel.name if hardware.ACCELERATORS.get(accel.name) is accel else None
    req = request_of(accel, table_gpu, engine, engine_version, drafter_kind, target_shape_, draft_shape_, tp, lo_hi,
                     context, widths is not None)
    res = resolve_calibration(req.gpu, calibration, req, calibration_lookup)
    model = dict(res.knobs)
    band = res.band
    for value, key, scale in ((overhead, "overhead", 1e-3), (draft_overhead, "draft_overhead", 1e-3),
                              (layer_overhead, "layer_overhead", 1e-6)):
        if value is not None:
            model[key] = validate.number(key, value, low=0) * scale
            band = None
    if overlap is not None:
        model["overlap"] = validate.choice("overlap", overlap, OVERLAPS)
        band = None
    dep = Deployment(target_shape_, the_draft, drafter_kind, draft_name, accel, dtype, math_dtype, lo_hi, context,
                     alpha, alpha_from, k_, weight_bits, tp, draft_context, res.name, res.about, model, res.note,
                     (*notes, *res.warnings), k_from, widths, tokens, engine, engine_version, band, res.extrapolations,
                     res.fitted_batch, res.band_about if band else None, res.provenance,
                     alpha_span=span if span and span[0] != span[1] else None, survivals=survivals)
    if measured is None:
        return dep
    variant = res.band_about["variant"] if res.band_about else None
    return anchored(dep, measured_points(measured), measured_from, variant if band else None, held_back,
                    quartiles or {})
