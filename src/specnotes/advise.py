"""``python -m specnotes.advise``: does speculative decoding pay for my deployment?

    python -m specnotes.advise --target Llama-3-8B --draft Llama-3.2-1B --gpu H100-SXM \\
        --batch 1-512 --context 2048 --alpha 0.7

prints a one-page report from the book's cost model (``specnotes.cost``): S at the given batch(es), the
batch ranges where speculation pays (``cost.paying_batches``), the best k per batch (``cost.best_k``),
the memory limit (``cost.max_batch``), which roof each pass's kernels sit under, a recommendation in
plain words, and the book's "how to quote a speedup" checklist filled in. The same report is a page
of the book (``book/advisor.ipynb``): ``advise`` computes it, ``render`` writes it (Markdown that
reads as plain text in a terminal), ``plot`` draws S(B); the CLI and the page call the same three.

Models: ``--target``/``--draft`` take a preset (``cost.PRESETS``) or the path of a Hugging Face
``config.json`` (read offline); ``--target-shape``/``--draft-shape`` take
``n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab``. The drafter kind (``--drafter``) maps to a drafter
of the cost model:

- ``model``: a separate draft model, ``--draft``: a ``ModelShape``, k sequential one-token passes.
- ``early-exit``: the target's first ``--exit-layer`` layers and its LM head: ``cost.EarlyExit``.
- ``ngram``: prompt lookup, no weights: ``cost.NGRAM``; it costs only ``--draft-overhead`` per lookup.
- ``eagle``: an EAGLE-like head, one decoder layer of the target's width that reads the target's
  features and the LM head: a one-layer ``ModelShape`` draft of the target's shape, run k times (each
  pass reads the layer *and* the d_model × vocab LM head). Its memory counts an LM head of its own,
  a slight overestimate where the head shares the target's.

GPU: ``--gpu`` (a row of ``hardware.ACCELERATORS``), or ``--bandwidth GB/s --peak TFLOP/s
[--memory GB] [--link GB/s]`` for one that is not in the table (these also override a row's values).
Acceptance: ``--alpha``, or ``--mean-accepted M`` (tokens per iteration including the bonus token, as
Spec-Bench reports it) measured at ``--k``, or ``M@K`` when ``--k best``; converted by
``cost.implied_alpha``. A calibration is one more set of keyword arguments for the time functions,
``cost.calibration(gpu, NAME)``, fitted to published measurements (Chapter 6): ``--calibration auto``
(the default) uses the GPU's stored calibration only where the setup it was fitted to (its
``fitted_to`` series in the published record: GPU, drafter kind, target shape, tp, and dtype where
recorded) matches the request, and the idealized roofline otherwise; the report says which, and why
(``calibration_note``). ``none`` asks for the idealized roofline; a NAME applies that calibration
whatever the setup, with a warning where it was fitted to another one; ``list`` lists them (``--json``:
as JSON). With a calibration the report also shows the idealized model beside it. ``--overhead``,
``--draft-overhead`` (ms per pass) and ``--overlap`` set or override its values.

``--json`` prints the report as JSON (schema ``specnotes.advise/1``)::

    {"schema": "specnotes.advise/1",
     "deployment": {"target": {"name", "params", "shape": [6 ints], "weight_bytes", "kv_bytes", "compute"},
                    "draft": {"kind": "model"|"early-exit"|"ngram"|"eagle", "name", "maps_to", "params"},
                    "gpu": {"name", "bandwidth" (B/s), "peak" (FLOP/s), "memory" (B), "ridge", "source"},
                    "dtype", "math_dtype", "weight_bits", "tp", "batch": [lo, hi], "context", "draft_context",
                    "alpha", "alpha_from", "k": int | "best", "expected_tokens" (at k, or null),
                    "calibration": name | null, "calibration_about": what it was fitted to | null,
                    "calibration_note": which model the report uses, and why,
                    "model": {keyword arguments of the time functions}},
     "max_batch": int | null,          # cost.max_batch; null: the GPU has no memory size
     "limit": int,                     # the largest batch considered: max_batch, or 65536
     "weights_per_gpu": bytes,         # target + draft weights on each GPU (> memory: nothing fits)
     "rows": [{"batch", "fits", "k", "speedup", "best_k", "best_speedup", "idealized_speedup", "c",
               "plain_ms", "iteration_ms", "plain_tokens_per_s", "spec_tokens_per_s",
               "roofs": {"decode"|"verify"|"draft": {"matmul"|"attention"|"heads": "memory"|"compute"}}}],
     "paying_batches": [[first, last], ...],   # cost.paying_batches (union over k = 1..16 for "best")
     "best_k_paying_batches": [[first, last], ...],  # the same for "best" k (the union over k = 1..16)
     "idealized_paying_batches": [[first, last], ...],  # the same without the calibration
     "crossover_batch": int | null,    # first B past the last paying range; null: pays up to the limit
     "curve": [[B, S], ...],           # S(B) up to the memory limit, for the plot
     "warnings": [str, ...],           # a named calibration fitted to another setup; no batch asked for fits
     "recommendation": str, "checklist": [[item, value], ...], "quote": str}

``--calibration list --json`` prints ``{"schema": "specnotes.advise/1/calibrations", "calibrations":
[{"gpu", "name", "about", "fitted_setup", "knobs"}, ...]}``.

``--plot FILE.png`` draws S(B) with the paying range shaded (``specnotes.plots``); the file's folder must
exist and its suffix be a format matplotlib writes (checked before anything is computed). ``--tp``
must split every model on the GPUs evenly (``tp_choices``: it divides the query heads, and divides
the KV heads or is a multiple of them). Bad input is an argparse error naming the flag and its allowed
values (exit status 2). Imports no torch.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from specnotes import cost, hardware, validate
from specnotes.cost import ModelShape

SCHEMA = "specnotes.advise/1"
DRAFTERS = ("model", "early-exit", "ngram", "eagle")
K_MAX = 16  # "best" searches k = 1..K_MAX (cost.best_k's default)
NO_MEMORY_LIMIT = 1 << 16
OVERLAPS = cost.OVERLAPS


@dataclass(frozen=True)
class Deployment:
    """Everything the report depends on, checked. ``model``: keyword arguments of the time functions."""

    target: ModelShape
    draft: cost.Draft
    drafter: str
    draft_name: str
    accel: hardware.Accelerator
    dtype: str
    math_dtype: str
    batch: tuple[int, int]
    context: int
    alpha: float
    alpha_from: str
    k: int | None  # None: the best k at each batch
    weight_bits: int | None = None
    tp: int = 1
    draft_context: int | None = None
    calibration: str | None = None
    calibration_about: str | None = None
    model: dict = field(default_factory=dict)
    calibration_note: str = ""  # which model the report uses, and why
    warnings: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------- inputs


def shape_from_text(text: str, name: str = "") -> ModelShape:
    """``"n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab"`` → a ModelShape."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 6 or not all(p.isdigit() for p in parts):
        raise validate.BadArgument("shape must be six positive integers n_layers,d_model,n_heads,n_kv_heads,d_ff,"
                                   f"vocab; got {text!r}")
    return ModelShape(*map(int, parts), name=name or f"shape {text}")


def shape_from_config(path) -> ModelShape:
    """A Hugging Face ``config.json`` (read offline) → a ModelShape. ``num_key_value_heads`` defaults to
    the number of attention heads, ``tie_word_embeddings`` to false (Llama's default)."""
    config = json.loads(Path(path).read_text())
    keys = {"n_layers": "num_hidden_layers", "d_model": "hidden_size", "n_heads": "num_attention_heads",
            "d_ff": "intermediate_size", "vocab": "vocab_size"}
    missing = [key for key in keys.values() if key not in config]
    if missing:
        raise validate.BadArgument(f"{path} lacks {', '.join(missing)}: not a decoder config.json the model knows")
    if any(key in config for key in ("num_local_experts", "num_experts", "n_routed_experts")):
        raise validate.BadArgument(f"{path} is a mixture-of-experts model: the cost model has dense MLPs only")
    values = {name: config[key] for name, key in keys.items()}
    values["n_kv_heads"] = config.get("num_key_value_heads") or values["n_heads"]
    head_dim = config.get("head_dim")
    if head_dim and head_dim * values["n_heads"] != values["d_model"]:
        raise validate.BadArgument(f"{path} has head_dim={head_dim} ≠ hidden_size/num_attention_heads: the cost "
                                   "model assumes d_head = d_model / n_heads")
    name = config.get("_name_or_path") or Path(path).resolve().parent.name
    return ModelShape(**values, name=str(name).rsplit("/", 1)[-1],
                      tied_embeddings=bool(config.get("tie_word_embeddings", False)))


def model_shape(name: str, value, shape_text: str | None = None) -> ModelShape:
    """A preset name, a config.json path, or (``shape_text``) six integers; ``name`` is the argument's."""
    if shape_text is not None:
        if value is not None:
            raise validate.BadArgument(f"{name} and {name}_shape exclude each other: give one of them")
        try:
            return shape_from_text(shape_text)
        except validate.BadArgument as err:
            raise validate.BadArgument(f"{name}_shape: {err}") from None
    if isinstance(value, ModelShape):
        return value
    if value in cost.PRESETS:
        return cost.PRESETS[value]
    if value is not None and str(value).endswith(".json"):
        if not Path(value).is_file():
            raise validate.BadArgument(f"{name} must be a preset or a config.json that exists; {value!r} does not")
        try:
            return shape_from_config(value)
        except (validate.BadArgument, json.JSONDecodeError) as err:
            raise validate.BadArgument(f"{name}: {err}") from None
    raise validate.BadArgument(f"{name} must be one of {', '.join(map(repr, cost.PRESETS))} or the path of a "
                               f"Hugging Face config.json; got {value!r}")


def batch_range(text) -> tuple[int, int]:
    """``"64"`` → (64, 64); ``"1-512"`` → (1, 512)."""
    lo, sep, hi = str(text).partition("-")
    if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
        raise validate.BadArgument(f"batch must be a positive integer or a range LO-HI such as 1-512; got {text!r}")
    lo = validate.integer("batch", int(lo), low=1)
    hi = validate.integer("batch", int(hi), low=lo) if sep else lo
    return lo, hi


def k_value(text) -> int | None:
    """``"best"`` → None (the best k at each batch), else an integer in 1..64."""
    if str(text).strip().lower() == "best":
        return None
    if not str(text).strip().isdigit():
        raise validate.BadArgument(f"k must be an integer in [1, 64] or 'best'; got {text!r}")
    return validate.integer("k", int(text), low=1, high=64)


def alpha_value(alpha, mean_accepted, k: int | None) -> tuple[float, str]:
    """(α, how it was obtained) from ``alpha``, or from ``mean_accepted`` ("M" at k, or "M@K")."""
    if (alpha is None) == (mean_accepted is None):
        raise validate.BadArgument("alpha or mean_accepted: give one of them (not both)")
    if alpha is not None:
        return validate.probability("alpha", alpha), "given"
    text, _, at = str(mean_accepted).partition("@")
    measured_k = k if not at else validate.integer("mean_accepted", int(at) if at.strip().isdigit() else at, low=1)
    if measured_k is None:
        raise validate.BadArgument("mean_accepted needs the k it was measured at: give --k K, or M@K with --k best")
    try:
        mean = float(text)
    except ValueError:
        raise validate.BadArgumentType(f"mean_accepted must be a number M or M@K, got {mean_accepted!r}") from None
    if not 1 <= mean <= measured_k + 1:
        raise validate.BadArgument(f"mean_accepted must be in [1, {measured_k + 1}] (tokens per iteration with "
                                   f"the bonus token, at k = {measured_k}); got {mean:g}")
    alpha = cost.implied_alpha(mean, measured_k)
    return alpha, f"from a mean accepted length of {mean:g} tokens at k = {measured_k} (inverse of E[N])"


def gpu(name=None, bandwidth=None, peak=None, memory=None, link=None, dtype: str = "bf16") -> hardware.Accelerator:
    """A row of the accelerator table, or one built (or overridden) from GB/s, TFLOP/s and GB."""
    if name is not None and name not in hardware.ACCELERATORS:
        raise validate.BadArgument(f"gpu must be one of {', '.join(hardware.ACCELERATORS)}; got {name!r} "
                                   "(or give bandwidth and peak for one that is not in the table)")
    if name is None and (bandwidth is None or peak is None):
        raise validate.BadArgument("gpu: give a GPU from the table, or both bandwidth (GB/s) and peak (TFLOP/s)")
    given = {"bandwidth": bandwidth, "peak": peak, "memory": memory, "link": link}
    for arg, value in given.items():
        if value is not None:
            validate.number(arg, value, low=0, low_open=True)
    if name is not None and not any(v is not None for v in given.values()):
        return hardware.ACCELERATORS[name]
    base = hardware.ACCELERATORS[name] if name else hardware.Accelerator("custom GPU", {}, 0.0, 0.0, "")
    peaks = dict(base.peak_flops)
    if peak is not None:
        peaks[dtype] = peak * 1e12
    said = ", ".join(f"--{arg} {value:g}" for arg, value in given.items() if value is not None)
    return replace(base, name=f"{name} (modified)" if name else "custom GPU", peak_flops=peaks,
                   mem_bandwidth=bandwidth * 1e9 if bandwidth is not None else base.mem_bandwidth,
                   memory=memory * 1e9 if memory is not None else base.memory,
                   link_bandwidth=link * 1e9 if link is not None else base.link_bandwidth,
                   source=f"{base.source + '; ' if base.source else ''}given on the command line: {said}")


def drafter(kind: str, target: ModelShape, draft: ModelShape | None, exit_layer) -> tuple[cost.Draft, str]:
    """(the cost model's drafter, its name) for a drafter kind."""
    validate.choice("drafter", kind, DRAFTERS)
    if kind != "model" and draft is not None:
        raise validate.BadArgument(f"draft: a separate draft model goes with drafter 'model', not {kind!r}")
    if kind != "early-exit" and exit_layer is not None:
        raise validate.BadArgument(f"exit_layer goes with drafter 'early-exit', not {kind!r}")
    if kind == "model":
        if draft is None:
            raise validate.BadArgument("draft is required with drafter 'model' (a preset, a config.json or a shape)")
        if draft.vocab != target.vocab:
            raise validate.BadArgument(f"draft: its vocabulary ({draft.vocab}) must be the target's ({target.vocab})")
        return draft, draft.name
    if kind == "early-exit":
        if exit_layer is None:
            raise validate.BadArgument(f"exit_layer is required with drafter 'early-exit' (1..{target.n_layers - 1})")
        layers = validate.integer("exit_layer", exit_layer, low=1, high=target.n_layers - 1)
        return cost.EarlyExit(layers), f"early exit after layer {layers} of {target.n_layers} ({target.name})"
    if kind == "ngram":
        return cost.NGRAM, "n-gram / prompt lookup (no weights)"
    head = replace(target, n_layers=1, tied_embeddings=True, name=f"EAGLE-like head (1 layer of {target.name})")
    return head, head.name


def known_calibrations() -> dict[str, dict[str, str]]:
    """{accelerator: {source: what it was fitted to}} for every stored calibration (``specnotes.calibrate``)."""
    from specnotes import calibrate

    return {accel: {source: f"{record['fitted_to']['why']}; rms error of log S {record['rms_log']:.3g}"
                    for source, record in sources.items()}
            for accel, sources in calibrate.calibrations().items()}


def _listing(known: dict) -> str:
    return "; ".join(f"{accel}: {', '.join(sources)}" for accel, sources in known.items()) or "none"


# A published setup's drafter → the advisor's kind; "self-speculation" is a draft model that is the target
# itself (``--draft`` the same shape as ``--target``, usually with ``--draft-context``).
PUBLISHED_DRAFTERS = {"draft-model": "model", "self-speculation": "self-speculation", "eagle-head": "eagle",
                      "eagle2-head": "eagle", "eagle3-head": "eagle", "ngram": "ngram", "early-exit": "early-exit"}


def _dims(shape: ModelShape) -> list[int]:
    return [shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads, shape.d_ff, shape.vocab]


def fitted_setup(accel_name: str | None, name: str) -> dict | None:
    """The setup a stored calibration was fitted to (its ``fitted_to`` source and series, looked up in the
    published record), or None for one that is not stored."""
    from specnotes import calibrate, published

    record = calibrate.calibrations().get(accel_name, {}).get(name)
    if record is None:
        return None
    setup = published.load(record["fitted_to"]["source"])[record["fitted_to"]["series"]].setup
    shape = calibrate.SHAPES.get(setup["target"])
    return {"accelerator": setup["accelerator"], "target": setup["target"], "shape": shape and _dims(shape),
            "drafter": setup["drafter"], "kind": PUBLISHED_DRAFTERS.get(setup["drafter"], setup["drafter"]),
            "tp": int(setup.get("tp", 1)), "dtype": setup.get("dtype"), "engine": setup.get("engine")}


def setup_request(accel: hardware.Accelerator, kind: str, target: ModelShape, draft, tp: int, dtype: str) -> dict:
    """The request in the terms of ``fitted_setup``: a draft model of the target's shape is self-speculation."""
    own = kind == "model" and isinstance(draft, ModelShape) and _dims(draft) == _dims(target)
    return {"accelerator": accel.name, "kind": "self-speculation" if own else kind, "target": target.name,
            "shape": _dims(target), "tp": tp, "dtype": dtype}


def setup_differences(fitted: dict, request: dict) -> list[str]:
    """What differs between a calibration's fitted setup and the request: the GPU, the drafter kind, the
    target's shape and tp, and the dtype where the fit records one."""
    out = [f"GPU {request['accelerator']!r} here, {fitted['accelerator']!r} in the fit"
           if request["accelerator"] != fitted["accelerator"] else "",
           f"drafter {request['kind']!r} here, {fitted['drafter']!r} in the fit"
           if request["kind"] != fitted["kind"] else "",
           f"target {request['target']!r} here, {fitted['target']!r} in the fit"
           if request["shape"] != fitted["shape"] else "",
           f"tp {request['tp']} here, {fitted['tp']} in the fit" if request["tp"] != fitted["tp"] else "",
           f"dtype {request['dtype']!r} here, {fitted['dtype']!r} in the fit"
           if fitted["dtype"] is not None and request["dtype"] != fitted["dtype"] else ""]
    return [line for line in out if line]


def _compared(fitted: dict) -> str:
    return "GPU, drafter, target, tp" + (" and dtype agree" if fitted["dtype"] else " agree; the fit records no dtype")


def resolve_calibration(accel_name: str | None, name: str | None = "auto", lookup=None,
                        request: dict | None = None) -> tuple[str | None, dict, str | None, str, list[str]]:
    """(name, keyword arguments for the time functions, what it was fitted to, which model the report uses
    and why, warnings) for a calibration name and a request (``setup_request``).

    "auto": the GPU's stored calibration whose fitted setup matches the request (``setup_differences``
    empty), else none: the idealized model; "none": the idealized model; a name: ``lookup(accel_name,
    name)`` (``cost.calibration`` by default; a test passes its own), applied as asked, with a warning
    where its fitted setup differs from the request.
    """
    name = "auto" if name is None else name
    if name == "none":
        return None, {}, None, "`--calibration none`: the idealized roofline", []
    known = known_calibrations()
    stored = known.get(accel_name, {})
    fitted = {source: fitted_setup(accel_name, source) for source in stored}
    differ = {source: setup_differences(setup, request) if request else [] for source, setup in fitted.items()}
    if name == "auto":
        if lookup is not None or not stored:
            note = f"auto: no stored calibration for {accel_name or 'a GPU not in the table'}: the idealized roofline"
            return None, {}, None, note, []
        matching = [source for source, diffs in differ.items() if not diffs]
        if len(matching) > 1:
            raise validate.BadArgument(f"calibration: {accel_name} has several for this setup ({', '.join(matching)}): "
                                       "choose one, or none for the idealized model")
        if not matching:
            why = " and ".join(f"{source!r} was fitted to another setup ({'; '.join(diffs)})"
                               for source, diffs in differ.items())
            return None, {}, None, (f"auto: {accel_name}'s calibration {why}, so the report uses the idealized "
                                    f"roofline (`--calibration {' or '.join(stored)}` applies it anyway)"), []
        name = matching[0]
        chosen = f"auto: {accel_name}'s calibration {name!r}"
    else:
        chosen = f"`--calibration {name}`"
    try:
        kwargs = dict((lookup or cost.calibration)(accel_name, name))
    except (KeyError, ValueError):
        raise validate.BadArgument(f"calibration {name!r} does not exist for {accel_name}; calibrated: "
                                   f"{_listing(known)} (or auto, none)") from None
    if name not in fitted:
        return name, kwargs, None, f"{chosen}: as given (no fitted setup is recorded for it)", []
    if differ[name]:
        warning = (f"`--calibration {name}` was fitted to another setup ({'; '.join(differ[name])}): its overheads "
                   "may not hold for this one (auto would not apply it)")
        return name, kwargs, stored[name], f"{chosen}: applied as asked, to a setup it was not fitted to", [warning]
    return name, kwargs, stored[name], f"{chosen}, fitted to this setup ({_compared(fitted[name])})", []


def tp_choices(shape: ModelShape) -> list[int]:
    """The tensor-parallel degrees that split ``shape`` evenly: tp divides the query heads, and divides the
    KV heads or is a multiple of them (each KV head then kept on tp / n_kv_heads GPUs, as ``cost`` prices it)."""
    return [t for t in range(1, shape.n_heads + 1)
            if shape.n_heads % t == 0 and (shape.n_kv_heads % t == 0 or t % shape.n_kv_heads == 0)]


def tp_check(tp: int, shapes: list[ModelShape]) -> int:
    """``tp`` if it splits every model that runs on the GPUs (the target, a draft model or head) evenly."""
    heads = [(s.n_heads, s.n_kv_heads) for s in shapes]
    shapes = [s for i, s in enumerate(shapes) if heads[i] not in heads[:i]]  # one model per head count
    allowed = sorted(set.intersection(*(set(tp_choices(s)) for s in shapes)))
    if tp not in allowed:
        listed = "; ".join(f"{s.name}: {s.n_heads} query heads, {s.n_kv_heads} KV heads" for s in shapes)
        raise validate.BadArgument(f"tp must be one of {', '.join(map(str, allowed))} here ({listed}): tp must "
                                   "divide the query heads, and divide the KV heads or be a multiple of them "
                                   f"(each KV head is then replicated); got {tp}")
    return tp


def deployment(target=None, draft=None, *, target_shape=None, draft_shape=None, drafter_kind: str = "model",
               exit_layer=None, gpu_name=None, bandwidth=None, peak=None, memory=None, link=None,
               dtype: str = "bf16", weight_bits=None, tp=1, batch="1", context=0, draft_context=None,
               alpha=None, mean_accepted=None, k="4", calibration="auto", overhead=None, draft_overhead=None,
               overlap=None, calibration_lookup=None) -> Deployment:
    """Check every input once and build the Deployment. Errors name the argument (the CLI's flag with
    dashes for underscores): a ``validate.BadArgument``."""
    target_shape_ = model_shape("target", target, target_shape)
    draft_shape_ = None if draft is None and draft_shape is None else model_shape("draft", draft, draft_shape)
    validate.choice("dtype", dtype, hardware.DTYPE_BYTES)
    accel = gpu(gpu_name, bandwidth, peak, memory, link, dtype)
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
        weight_bits = validate.integer("weight_bits", weight_bits, low=1, high=16)
        target_shape_ = target_shape_.weight_only(weight_bits)
        draft_shape_ = draft_shape_.weight_only(weight_bits) if draft_shape_ is not None else None
    the_draft, draft_name = drafter(drafter_kind, target_shape_, draft_shape_, exit_layer)
    tp_check(tp, [target_shape_] + ([the_draft] if isinstance(the_draft, ModelShape) else []))
    lo_hi = batch_range(batch)
    context = validate.integer("context", context, low=0)
    if draft_context is not None:
        draft_context = validate.integer("draft_context", draft_context, low=0)
    k = k_value(k)
    alpha, alpha_from = alpha_value(alpha, mean_accepted, k)
    request = setup_request(accel, drafter_kind, target_shape_, draft_shape_, tp, math_dtype)
    calibration, model, about, note, warnings = resolve_calibration(gpu_name, calibration, calibration_lookup,
                                                                    request)
    if overhead is not None:
        model["overhead"] = validate.number("overhead", overhead, low=0) / 1e3
    if draft_overhead is not None:
        model["draft_overhead"] = validate.number("draft_overhead", draft_overhead, low=0) / 1e3
    if overlap is not None:
        model["overlap"] = validate.choice("overlap", overlap, OVERLAPS)
    return Deployment(target_shape_, the_draft, drafter_kind, draft_name, accel, dtype, math_dtype, lo_hi, context,
                      alpha, alpha_from, k, weight_bits, tp, draft_context, calibration, about, model, note,
                      tuple(warnings))


# ---------------------------------------------------------------------------------------------- the model


def _model(dep: Deployment) -> dict:
    """Keyword arguments for cost.batch_speedup and friends (tp and the draft's KV window included)."""
    model = dict(dep.model)
    model.setdefault("tp", dep.tp)
    if dep.draft_context is not None:
        model.setdefault("draft_context", dep.draft_context)
    return model


def _accepted(fn, model: dict) -> dict:
    """The part of ``model`` that ``fn`` takes."""
    names = inspect.signature(fn).parameters
    return {key: value for key, value in model.items() if key in names}


def speedup(dep: Deployment, batch: int, k: int) -> float:
    return cost.batch_speedup(dep.target, dep.draft, dep.accel, batch, k, dep.alpha, dep.context, **_model(dep))


def best_k(dep: Deployment, batch: int) -> int:
    return cost.best_k(dep.target, dep.draft, dep.accel, batch, dep.alpha, dep.context, k_max=K_MAX, **_model(dep))


def memory_limit(dep: Deployment) -> int | None:
    """``cost.max_batch`` with the k in use (K_MAX for "best": the larger KV reservation)."""
    return cost.max_batch(dep.target, dep.draft, dep.accel, dep.context, k=dep.k or K_MAX, tp=dep.tp,
                          draft_context=dep.draft_context)


def weights_per_gpu(dep: Deployment) -> float:
    """Bytes of weights on each GPU, as ``memory_limit`` counts them (``cost.weights_per_device``)."""
    return cost.weights_per_device(dep.target, dep.draft, k=dep.k or K_MAX, tp=dep.tp)


def paying(dep: Deployment, limit: int) -> list[tuple[int, int]]:
    """``cost.paying_batches`` up to ``limit``; for "best" k the union over k = 1..K_MAX (S > 1 with the
    best k exactly where some k gives S > 1)."""
    ks = [dep.k] if dep.k else range(1, K_MAX + 1)
    ranges = sorted(r for k in ks for r in cost.paying_batches(dep.target, dep.draft, dep.accel, k, dep.alpha,
                                                               dep.context, limit=limit, **_model(dep)))
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def kernel_roofs(kernels, accel: hardware.Accelerator, math_dtype: str) -> dict[str, str]:
    """"memory" or "compute" for each kernel: which of bytes/BW and FLOPs/peak is larger (the all-reduces,
    which run on the links, are left out)."""
    peak = accel.peak(math_dtype)
    return {k.name: "compute" if k.flops / peak > k.bytes / accel.mem_bandwidth else "memory"
            for k in kernels if k.flops or k.bytes}


def draft_kernels(dep: Deployment, batch: int, k: int) -> tuple:
    """The kernels of one draft pass (one of k for a draft model or an early exit; the only one for a
    single-pass drafter or heads); none for a drafter without weights."""
    draft, ctx = dep.draft, dep.context if dep.draft_context is None else dep.draft_context
    if isinstance(draft, cost.EarlyExit):
        draft = cost.early_exit_shape(dep.target, draft.layers)
    if isinstance(draft, ModelShape):
        return cost.forward_cost(draft, batch, 1, ctx, dep.tp).kernels
    if isinstance(draft, cost.SinglePass):
        return cost.forward_cost(draft.shape, batch, k, ctx, dep.tp).kernels
    if isinstance(draft, cost.Heads):
        head = cost.matmul_cost(draft.shape, batch, 1, dep.tp).kernels[0]
        return (cost.Kernel("heads", k * head.flops, k * head.bytes),)
    return ()


def roofs(dep: Deployment, batch: int, k: int) -> dict[str, dict[str, str]]:
    """Which roof each kernel of the decode, verify and draft passes sits under at this batch."""
    passes = {"decode": cost.decode_cost(dep.target, batch, dep.context, dep.tp).kernels,
              "verify": cost.verify_cost(dep.target, batch, k, dep.context, dep.tp).kernels,
              "draft": draft_kernels(dep, batch, k)}
    return {name: kernel_roofs(kernels, dep.accel, dep.math_dtype) for name, kernels in passes.items()}


def row(dep: Deployment, batch: int, limit: int | None) -> dict:
    """One batch: S with the k in use (with "best", the best k, 0 = off and S = 1), the best k and its S,
    times, c, throughput, and the roofs (c and the roofs at k = 1 when k = 0: what drafting would cost)."""
    model = _model(dep)
    best = best_k(dep, batch)
    k = dep.k or best
    drafted = max(k, 1)
    plain = cost.pass_time(dep.target, dep.accel, batch, 1, dep.context, **_accepted(cost.pass_time, model))
    iteration = cost.iteration_time(dep.target, dep.draft, dep.accel, batch, k, dep.context, **model)
    draft_model = {**_accepted(cost.draft_time, model), "overhead": model.get("draft_overhead",
                                                                              model.get("overhead", 0.0))}
    draft_ctx = dep.context if dep.draft_context is None else dep.draft_context
    drafting = cost.draft_time(dep.draft, dep.accel, batch, drafted, draft_ctx, target=dep.target, **draft_model)
    return {"batch": batch, "fits": limit is None or batch <= limit, "k": k, "speedup": speedup(dep, batch, k),
            "best_k": best, "best_speedup": speedup(dep, batch, best), "c": drafting / (drafted * plain),
            "plain_ms": 1e3 * plain, "iteration_ms": 1e3 * iteration, "plain_tokens_per_s": batch / plain,
            "spec_tokens_per_s": batch * cost.expected_tokens(dep.alpha, k) / iteration,
            "roofs": roofs(dep, batch, drafted)}


def report_batches(lo: int, hi: int, edges=()) -> list[int]:
    """The batches a report lists: the ends, the powers of two between, and any edge inside."""
    powers = {2**i for i in range(int(math.log2(hi)) + 1) if lo <= 2**i <= hi}
    return sorted(powers | {lo, hi} | {b for b in edges if b is not None and lo <= b <= hi})


def curve_batches(lo: int, hi: int, per_octave: int = 8) -> list[int]:
    steps = max(1, math.ceil(per_octave * math.log2(hi / lo))) if hi > lo else 0
    return sorted({round(lo * (hi / lo) ** (i / steps)) for i in range(steps + 1)} if steps else {lo})


def _progress(items, progress, desc):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, file=sys.stderr, leave=False, disable=None if progress is None else not progress)


def advise(dep: Deployment, progress: bool | None = False) -> dict:
    """The report as a JSON-ready dict (schema in the module docstring). ``progress``: a tqdm bar on
    stderr (None: only where stderr is a terminal). With a calibration, the idealized model (no overheads,
    per-kernel overlap) is evaluated beside it: ``idealized_speedup`` per row, ``idealized_paying_batches``."""
    fits = memory_limit(dep)
    limit = NO_MEMORY_LIMIT if fits is None else fits
    ranges = paying(dep, limit) if limit >= 1 else []
    any_k = paying(replace(dep, k=None), limit) if dep.k and limit >= 1 else ranges
    ideal = replace(dep, calibration=None, calibration_about=None, model={}) if dep.calibration else dep
    ideal_ranges = paying(ideal, limit) if dep.calibration and limit >= 1 else ranges
    crossover = None if ranges and ranges[-1][1] >= limit else (ranges[-1][1] + 1 if ranges else 1)
    lo, hi = dep.batch
    edges = [r[0] for r in ranges] + [r[1] for r in ranges] + [crossover, fits]
    rows = [row(dep, b, fits) for b in _progress(report_batches(lo, hi, edges), progress, "batches")]
    for r in rows:
        r["idealized_speedup"] = speedup(ideal, r["batch"], r["k"]) if dep.calibration else r["speedup"]
    top = min(hi, limit) if lo < hi else min(limit, max(4 * hi, 1024))
    curve_lo = lo if lo < hi else 1
    curve = [[b, speedup(dep, b, dep.k or best_k(dep, b))]
             for b in _progress(curve_batches(curve_lo, top) if top >= curve_lo else [], progress, "S(B) curve")]
    warnings = list(dep.warnings)
    if fits and lo > fits:  # (fits = 0: the recommendation says why nothing fits)
        asked = f"B = {lo}" if lo == hi else f"B = {lo}–{hi}"
        warnings.append(f"none of the batches asked for ({asked}) fit in memory: at most B = {fits} sequences fit "
                        f"(weights + both KV caches at L = {dep.context}); the rows below are past the limit")
    report = {"schema": SCHEMA, "deployment": describe(dep), "max_batch": fits, "limit": limit,
              "weights_per_gpu": weights_per_gpu(dep), "rows": rows, "paying_batches": [list(r) for r in ranges],
              "best_k_paying_batches": [list(r) for r in any_k],
              "idealized_paying_batches": [list(r) for r in ideal_ranges], "crossover_batch": crossover,
              "curve": curve, "warnings": warnings}
    report["recommendation"] = recommendation(report)
    report["checklist"] = checklist(report)
    report["quote"] = quote(report)
    return report


def describe(dep: Deployment) -> dict:
    t, d = dep.target, dep.draft
    draft_params = (d.params if isinstance(d, ModelShape)
                    else cost.early_exit_shape(t, d.layers).params if isinstance(d, cost.EarlyExit) else 0)
    maps_to = {"model": "ModelShape draft: k one-token passes",
               "early-exit": f"cost.EarlyExit({getattr(d, 'layers', '')})",
               "ngram": "cost.NGRAM: no weights, its overhead only",
               "eagle": "one-layer ModelShape of the target's width with an LM head, k passes"}[dep.drafter]
    return {
        "target": {"name": t.name, "params": t.params, "weight_bytes": t.weight_bytes, "kv_bytes": t.kv_bytes,
                   "compute": t.compute, "shape": [t.n_layers, t.d_model, t.n_heads, t.n_kv_heads, t.d_ff, t.vocab]},
        "draft": {"kind": dep.drafter, "name": dep.draft_name, "maps_to": maps_to, "params": draft_params},
        "gpu": {"name": dep.accel.name, "bandwidth": dep.accel.mem_bandwidth, "peak": dep.accel.peak(dep.math_dtype),
                "memory": dep.accel.memory or None, "ridge": dep.accel.ridge(dep.math_dtype),
                "source": dep.accel.source},
        "dtype": dep.dtype, "math_dtype": dep.math_dtype, "weight_bits": dep.weight_bits, "tp": dep.tp,
        "batch": list(dep.batch), "context": dep.context, "draft_context": dep.draft_context,
        "alpha": dep.alpha, "alpha_from": dep.alpha_from, "k": dep.k if dep.k else "best",
        "expected_tokens": cost.expected_tokens(dep.alpha, dep.k) if dep.k else None,
        "calibration": dep.calibration, "calibration_about": dep.calibration_about,
        "calibration_note": dep.calibration_note, "model": _model(dep),
    }


# ---------------------------------------------------------------------------------------------- words


def where_it_pays(report: dict) -> str:
    ranges, limit, crossover = report["paying_batches"], report["limit"], report["crossover_batch"]
    searched = f"1–{limit}" + ("" if report["max_batch"] is not None else ", no memory limit")
    if report["max_batch"] == 0:
        return "nowhere: not one sequence fits in memory"
    if not ranges:
        return f"S ≤ 1 at every batch ({searched})"
    if len(ranges) == 1 and ranges[0] == [1, limit]:
        return f"S > 1 at every batch that fits ({searched})"
    return f"S > 1 for B in {_ranges_text(ranges)} (of {searched})" + (
        f"; crossover B* = {crossover}" if crossover is not None else "")


def _ranges_text(ranges) -> str:
    return ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in ranges)


def _k_text(report) -> str:
    k = report["deployment"]["k"]
    return "the best k at each batch" if k == "best" else f"k = {k}"


def recommendation(report: dict) -> str:
    """The advice in plain words, chosen by the numbers."""
    dep, ranges, limit, fits = report["deployment"], report["paying_batches"], report["limit"], report["max_batch"]
    rows = [r for r in report["rows"] if r["fits"]]
    where = f"at every batch that fits (1–{limit})" if fits is not None else f"at every batch up to {limit}"
    if fits == 0 and report["weights_per_gpu"] > dep["gpu"]["memory"]:
        return (f"It does not fit: the weights alone ({_fmt_bytes(report['weights_per_gpu'])} per GPU) exceed the "
                f"{dep['gpu']['name']}'s memory ({_fmt_bytes(dep['gpu']['memory'])}) with tp = {dep['tp']}. "
                "Use more GPUs (`--tp`), fewer weight bits (`--weight-bits`) or a smaller model.")
    if fits == 0:
        return (f"It does not fit: the weights fit ({_fmt_bytes(report['weights_per_gpu'])} of "
                f"{_fmt_bytes(dep['gpu']['memory'])} per GPU with tp = {dep['tp']}), but not one sequence's KV caches "
                f"at L = {dep['context']} beside them. Use a shorter context (`--context`), more GPUs (`--tp`), or a "
                "smaller cache (a draft KV window, `--draft-context`; a smaller `--dtype`).")
    if not ranges:
        best = max(rows, key=lambda r: r["best_speedup"], default=None)
        extra = (f" (the best in your range: {best['best_speedup']:.2f}× at B = {best['batch']} with k = "
                 f"{best['best_k']})" if best else "")
        if report["best_k_paying_batches"]:
            return (f"Leave {_k_text(report)} off: it does not pay at any batch from 1 to {limit}. Another k does: "
                    f"with the best k at each batch (`--k best`) speculation pays for B in "
                    f"{_ranges_text(report['best_k_paying_batches'])}{extra}.")
        return (f"Leave it off: with {_k_text(report)} speculation does not pay at any batch from 1 to {limit}"
                f"{extra}. Raise α (a better-matched draft), or use a cheaper drafter.")
    first, last = ranges[0][0], ranges[-1][1]
    if len(ranges) == 1 and first == 1 and last >= limit:
        advice = f"Turn it on {where}: with {_k_text(report)} it pays throughout."
    elif len(ranges) == 1 and first == 1:
        advice = f"Turn it on below B = {last + 1}, off above (with {_k_text(report)})."
    elif len(ranges) == 1 and last >= limit:
        advice = f"Turn it on above B = {first - 1}, off below (with {_k_text(report)}): it pays only at large batch."
    else:
        advice = f"Turn it on for B in {_ranges_text(ranges)}, off elsewhere (with {_k_text(report)})."
    lo, hi = dep["batch"]
    mine = [r for r in rows if lo <= r["batch"] <= hi]
    if mine:
        a, b = mine[0], mine[-1]
        span = (f"S = {a['speedup']:.2f}× at B = {a['batch']}" if a is b
                else f"S runs from {a['speedup']:.2f}× at B = {a['batch']} to {b['speedup']:.2f}× at B = {b['batch']}")
        advice += f" In your range {span}."
    bests = sorted({r["best_k"] for r in rows})
    if dep["k"] != "best" and len(bests) > 1:
        last = f"{rows[-1]['best_k']}" + (" (off)" if rows[-1]["best_k"] == 0 else "")
        advice += (f" The best k moves from {rows[0]['best_k']} (B = {rows[0]['batch']}) to {last} "
                   f"(B = {rows[-1]['batch']}): choose k by the batch (`--k best`).")
    if _idealized(dep):
        advice += " Idealized model (no per-pass overhead): real engines sit lower, most at small batch."
    if dep["calibration"]:
        ideal = report["idealized_paying_batches"]
        advice += f" Calibrated with {dep['calibration']!r} (below); the idealized roofline " + (
            "agrees on where it pays." if ideal == ranges else
            f"would have S > 1 for B in {_ranges_text(ideal)}." if ideal else "would have S ≤ 1 at every batch.")
    return advice


def _idealized(dep: dict) -> bool:
    return not (dep["model"].get("overhead") or dep["model"].get("draft_overhead") or dep["calibration"])


def _fmt_bytes(x) -> str:
    return f"{x / 1e9:.3g} GB"


def checklist(report: dict) -> list[list[str]]:
    """The rows of book/quoting.md's checklist, filled in for this report."""
    dep, rows = report["deployment"], report["rows"]
    first = rows[0]
    model = dep["model"]
    gpu_ = dep["gpu"]
    k = dep["k"]
    en = dep["expected_tokens"]
    overhead = model.get("overhead", 0.0)
    draft_overhead = model.get("draft_overhead", overhead)
    weights = f"{dep['weight_bits']}-bit weights, " if dep["weight_bits"] else ""
    return [
        ["k", f"{k}" + (f" (E[N] = {en:.2f} tokens per iteration)" if en else f" (searched 1–{K_MAX} per batch)")],
        ["α, and how it was measured", f"{dep['alpha']:.3f}, {dep['alpha_from']}; i.i.d. acceptance"],
        ["B", f"{dep['batch'][0]}–{dep['batch'][1]}" if dep["batch"][0] != dep["batch"][1] else f"{dep['batch'][0]}"],
        ["L", f"{dep['context']} tokens" + (f" (draft KV window {dep['draft_context']})"
                                            if dep["draft_context"] is not None else "")],
        ["c, and the draft", f"{dep['draft']['name']}; c = {first['c']:.3f} at B = {first['batch']} (modelled)"],
        ["device", f"{gpu_['name']} × {dep['tp']}: {gpu_['peak'] / 1e12:.0f} TFLOP/s {dep['math_dtype']}, "
                   f"{gpu_['bandwidth'] / 1e12:.2f} TB/s, ridge {gpu_['ridge']:.0f} FLOP/byte"],
        ["dtype", f"{weights}{dep['math_dtype']} math, KV cache in {dep['math_dtype']}"
                  + (f" ({dep['dtype']} asked; this GPU has no {dep['dtype']} peak)"
                     if dep["dtype"] != dep["math_dtype"] else "")],
        ["temperature", "not modelled: it enters through α (measure α at the temperature you serve)"],
        ["what was timed", "nothing: a modelled TPOT ratio at a fixed batch (= its throughput ratio); no prefill"],
        ["baseline", "the same deployment decoding without speculation (modelled)"],
        ["t0 (overheads, CUDA graphs)", (f"calibration {dep['calibration']!r} (fitted to published measurements; "
                                         "see the recommendation): " if dep["calibration"] else "")
         + f"{1e3 * overhead:.3g} ms per target pass, {1e3 * draft_overhead:.3g} ms per draft pass, "
           f"overlap {model.get('overlap', 'kernel')!r}" + (" (idealized roofline)" if _idealized(dep) else "")],
    ]


def quote(report: dict) -> str:
    """The checklist in one sentence, at the first batch of the report."""
    dep, r = report["deployment"], report["rows"][0]
    model = "the calibrated" if dep["calibration"] else "the idealized" if _idealized(dep) else "the"
    return (f"With {dep['draft']['name']} drafting k = {r['k']} tokens at α = {dep['alpha']:.2f}, "
            f"{dep['target']['name']} on {dep['tp']} × {dep['gpu']['name']} in {dep['math_dtype']} "
            f"at B = {r['batch']}, "
            f"L = {dep['context']} is predicted by {model} roofline model to generate {r['speedup']:.2f}× as many "
            "tokens per second as the same deployment without speculation (temperature and engine not modelled).")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose columns line up in a terminal too."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def _k_cell(k: int) -> str:
    return f"{k}" if k else "0 (off)"


def _roof_text(roofs: dict) -> str:
    return "/".join("M" if v == "memory" else "C" for v in roofs.values()) or "—"


def render(report: dict) -> str:
    """The report as Markdown that reads as plain text: the CLI prints it, the book's page displays it."""
    dep, rows = report["deployment"], report["rows"]
    t, d, g = dep["target"], dep["draft"], dep["gpu"]
    best, calibrated = dep["k"] == "best", bool(dep["calibration"])
    columns = [("B", lambda r: r["batch"])]
    if best:
        columns += [("best k", lambda r: _k_cell(r["best_k"])), ("S", lambda r: f"{r['best_speedup']:.2f}")]
    else:
        columns += [(f"S (k = {dep['k']})", lambda r: f"{r['speedup']:.2f}")]
    if calibrated:
        columns += [("S idealized", lambda r: f"{r['idealized_speedup']:.2f}")]
    if not best:
        columns += [("best k", lambda r: _k_cell(r["best_k"])), ("S (best k)", lambda r: f"{r['best_speedup']:.2f}")]
    columns += [("tokens/s off → on", lambda r: f"{r['plain_tokens_per_s']:,.0f} → {r['spec_tokens_per_s']:,.0f}"),
                ("roofs: decode · verify · draft", lambda r: " · ".join(_roof_text(r["roofs"][name])
                                                                       for name in ("decode", "verify", "draft"))),
                ("fits", lambda r: "yes" if r["fits"] else "no")]
    table = _table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in rows])
    fits = report["max_batch"]
    weights = _fmt_bytes(report["weights_per_gpu"])
    memory = ("the GPU has no memory size: batches are not limited" if fits is None
              else f"the weights alone ({weights} per GPU) exceed its {_fmt_bytes(g['memory'])}"
              if report["weights_per_gpu"] > g["memory"]
              else f"the weights fit ({weights} of {_fmt_bytes(g['memory'])} per GPU), but not one sequence's KV "
                   f"caches at L = {dep['context']} beside them" if fits == 0
              else f"at most B = {fits} sequences fit (weights + both KV caches at L = {dep['context']}, "
                   f"{_fmt_bytes(g['memory'])} per GPU, tp = {dep['tp']})")
    pays = where_it_pays(report)
    lines = [
        f"**Does speculation pay? {t['name']} with {d['name']} on {g['name']}**",
        "",
        f"**Recommendation.** {report['recommendation']}",
        "",
        *[f"**Warning.** {w}\n" for w in report["warnings"]],
        f"- **Target**: {t['name']}, {t['params'] / 1e9:.2f} B matmul parameters; **draft**: {d['name']} "
        f"({d['kind']}: {d['maps_to']})",
        f"- **GPU**: {g['name']} × {dep['tp']}, {dep['math_dtype']}, ridge {g['ridge']:.0f} FLOP/byte; "
        f"**L** = {dep['context']}; **α** = {dep['alpha']:.3f} ({dep['alpha_from']}); **k**: {dep['k']}"
        + (f"; **calibration**: {dep['calibration']} ({dep['calibration_about'] or 'given'})"
           if dep["calibration"] else ""),
        f"- **Model**: {dep['calibration_note']}.",
        f"- **Where it pays**: {pays}.",
        f"- **Memory**: {memory}.",
        "",
        table,
        "",
        "Roofs: matmul/attention kernels of each pass, M = memory-bound, C = compute-bound (draft: one draft "
        "pass; — = no weights). Tokens/s: the whole batch, speculation off → on"
        + ("; S idealized: the same k without the calibration's overheads." if calibrated else "."),
        "",
        "**How to quote this speedup**",
        "",
        _table(["item", "value"], report["checklist"]),
        "",
        f"> {report['quote']}",
    ]
    return "\n".join(lines)


def plot(report: dict, ax=None, title: str | None = None):
    """S(B) up to the memory limit, the paying range shaded, batches that do not fit greyed out."""
    import matplotlib.pyplot as plt

    from specnotes import plots

    if ax is None:  # outside the house style's rc_context, so that the inline backend shows the figure
        _, ax = plt.subplots(figsize=(8, 4.5))
    dep = report["deployment"]
    curve = report["curve"]
    label = f"{dep['target']['name']} + {dep['draft']['name']}, {_k_text(report)}, α={dep['alpha']:.2f}"
    batches = [b for b, _ in curve] or [1]
    ax = plots.speedup_vs_batch(ax, [(label, batches, [s for _, s in curve] or [float("nan")], "model")],
                                bstar=None if report["crossover_batch"] in (None, 1) else report["crossover_batch"],
                                title=title or f"{dep['gpu']['name']} × {dep['tp']}, {dep['math_dtype']}, "
                                               f"L = {dep['context']}")
    lo, hi = dep["batch"]
    right = hi if lo < hi else max(batches[-1], hi)
    plots.shade_batches(ax, [(a, min(b, right)) for a, b in report["paying_batches"] if a <= right],
                        "speculation pays (S > 1)")
    fits = report["max_batch"]
    if fits is not None and fits < right:
        plots.shade_batches(ax, [(max(fits, 1), right)], "does not fit in memory", color="0.6")
    if lo == hi:
        ax.axvline(lo, color="0.2", linewidth=1, label=f"your batch B = {lo}")
        ax.legend(loc="best")
    return ax


# ---------------------------------------------------------------------------------------------- the page's form


def form_argv(values: dict) -> list[str]:
    """The command line a form's values stand for (the form runs exactly what the CLI would)."""
    argv = ["--target", values["target"], "--drafter", values["drafter"], "--gpu", values["gpu"],
            "--dtype", values["dtype"], "--tp", str(values["tp"]), "--batch", str(values["batch"]).strip(),
            "--context", str(values["context"]), "--alpha", f"{values['alpha']:g}", "--k", str(values["k"])]
    if values["drafter"] == "model":
        argv += ["--draft", values["draft"]]
    if values["drafter"] == "early-exit":
        argv += ["--exit-layer", str(values["exit_layer"])]
    if values.get("calibration") not in (None, "auto"):
        argv += ["--calibration", values["calibration"]]
    return argv


def form(initial: dict | None = None):
    """The advisor as an ipywidgets form for Jupyter and Colab: every change re-runs ``run`` on the form's
    command line and shows it, the report and the plot. Returns the box; ``box.controls`` are the
    widgets, ``box.last`` the last report (None after an error), ``box.redraw()`` redraws."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    values = {"target": "Llama-3-8B", "drafter": "model", "draft": "Llama-3.2-1B", "exit_layer": 8,
              "gpu": "H100-SXM", "dtype": "bf16", "tp": 1, "batch": "1-512", "context": 2048, "alpha": 0.7,
              "k": "4", "calibration": "auto", **(initial or {})}
    style, wide = {"description_width": "initial"}, w.Layout(width="260px")
    controls = {
        "target": w.Dropdown(options=list(cost.PRESETS), description="target"),
        "drafter": w.Dropdown(options=list(DRAFTERS), description="drafter"),
        "draft": w.Dropdown(options=list(cost.PRESETS), description="draft model"),
        "exit_layer": w.BoundedIntText(min=1, max=127, description="exit layer"),
        "gpu": w.Dropdown(options=list(hardware.ACCELERATORS), description="GPU"),
        "dtype": w.Dropdown(options=list(hardware.DTYPE_BYTES), description="dtype"),
        "tp": w.Dropdown(options=[1, 2, 4, 8], description="tp"),
        "batch": w.Text(description="batch (B or LO-HI)"),
        "context": w.BoundedIntText(min=0, max=1 << 20, step=1024, description="context L"),
        "alpha": w.FloatSlider(min=0.0, max=1.0, step=0.01, description="α"),
        "k": w.Dropdown(options=["best"] + [str(k) for k in range(1, K_MAX + 1)], description="k"),
        "calibration": w.Dropdown(options=["auto", "none"] + sorted({s for c in known_calibrations().values()
                                                                     for s in c}), description="calibration"),
    }
    for name, control in controls.items():
        control.value = values[name]
        control.style, control.layout = style, wide
    out = w.Output()
    rows = [list(controls.values())[i:i + 4] for i in range(0, len(controls), 4)]
    box = w.VBox([w.HBox(r) for r in rows] + [out])

    def redraw(*_):
        given = {name: control.value for name, control in controls.items()}
        controls["draft"].disabled = given["drafter"] != "model"
        controls["exit_layer"].disabled = given["drafter"] != "early-exit"
        argv = form_argv(given)
        with out:
            out.clear_output(wait=True)
            try:
                box.last = run(argv)
            except validate.BadArgument as err:
                box.last = None
                print(err)
                return
            display(Markdown(f"`python -m specnotes.advise {' '.join(argv)}`\n\n" + render(box.last)))
            plot(box.last)
            plt.show()

    for control in controls.values():
        control.observe(redraw, names="value")
    box.controls, box.redraw, box.last = controls, redraw, None
    redraw()
    return box


# ---------------------------------------------------------------------------------------------- CLI

# deployment() argument → the flag that sets it
FLAGS = {"target": "--target", "target_shape": "--target-shape", "draft": "--draft", "draft_shape": "--draft-shape",
         "drafter": "--drafter", "exit_layer": "--exit-layer", "gpu": "--gpu", "bandwidth": "--bandwidth",
         "peak": "--peak", "memory": "--memory", "link": "--link", "dtype": "--dtype", "weight_bits": "--weight-bits",
         "tp": "--tp", "batch": "--batch", "context": "--context", "draft_context": "--draft-context",
         "alpha": "--alpha", "mean_accepted": "--mean-accepted", "k": "--k", "calibration": "--calibration",
         "overhead": "--overhead", "draft_overhead": "--draft-overhead", "overlap": "--overlap",
         "layers": "--exit-layer", "mean_tokens": "--mean-accepted", "plot": "--plot"}


def flag_message(message: str) -> str:
    """A validate error with argument names replaced by the CLI's flags: "alpha must ..." → "--alpha must ...".
    The first word is mapped, and any later argument name with an underscore (unambiguous in prose)."""
    name, sep, rest = message.partition(" ")
    bare = name.rstrip(":")
    if bare in FLAGS:
        name = FLAGS[bare] + name[len(bare):]
    for arg, flag in FLAGS.items():
        if "_" in arg:
            rest = re.sub(rf"(?<![\w-]){arg}\b", flag, rest)
    return name + sep + rest


class _RaisingParser(argparse.ArgumentParser):
    """For ``run``: a command line that argparse rejects raises BadArgument instead of exiting."""

    def error(self, message):
        raise validate.BadArgument(message)


POSITIVE = validate.cli(validate.number, low=0, low_open=True)  # GB/s, TFLOP/s, GB
TOKENS = validate.cli(validate.integer, low=0)


def parser(cls=argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = cls(prog="python -m specnotes.advise",
                                description="Does speculative decoding pay for my deployment? A one-page report "
                                            "from the book's cost model.",
                                epilog="Example: python -m specnotes.advise --target Llama-3-8B --draft Llama-3.2-1B "
                                       "--gpu H100-SXM --batch 1-512 --context 2048 --alpha 0.7")
    presets = ", ".join(cost.PRESETS)
    m = p.add_argument_group("models")
    m.add_argument("--target", help=f"preset ({presets}) or a Hugging Face config.json path")
    m.add_argument("--target-shape", help="n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--draft", help="draft model for --drafter model: a preset or a config.json path")
    m.add_argument("--draft-shape", help="the draft as n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--drafter", default="model", help=f"one of {', '.join(DRAFTERS)} (default: model)")
    m.add_argument("--exit-layer", type=validate.cli(validate.integer, low=1),
                   help="early exit: the layer whose output drafts")
    h = p.add_argument_group("hardware")
    h.add_argument("--gpu", help=f"one of {', '.join(hardware.ACCELERATORS)}")
    h.add_argument("--bandwidth", type=POSITIVE, help="memory bandwidth, GB/s (a GPU not in the table, or an override)")
    h.add_argument("--peak", type=POSITIVE, help="dense peak of --dtype, TFLOP/s")
    h.add_argument("--memory", type=POSITIVE, help="memory per GPU, GB")
    h.add_argument("--link", type=POSITIVE, help="GPU-to-GPU bandwidth, GB/s, both directions (for --tp)")
    h.add_argument("--dtype", default="bf16", help=f"weights, KV and math: one of {', '.join(hardware.DTYPE_BYTES)}")
    h.add_argument("--weight-bits", type=validate.cli(validate.integer, low=1, high=16),
                   help="weight-only quantization: bits per weight (math stays --dtype)")
    h.add_argument("--tp", type=validate.cli(validate.integer, low=1), default=1,
                   help="tensor-parallel GPUs (default 1): divides the query heads, and divides or is a multiple of "
                        "the KV heads")
    w = p.add_argument_group("workload")
    w.add_argument("--batch", default="1", help="a batch size, or a range such as 1-512 (default 1)")
    w.add_argument("--context", type=TOKENS, default=0, help="context length L, tokens (default 0)")
    w.add_argument("--draft-context", type=TOKENS, help="the draft's own KV length (a window), tokens")
    w.add_argument("--alpha", type=validate.cli(validate.probability), help="acceptance rate α in [0, 1]")
    w.add_argument("--mean-accepted", help="mean tokens per iteration (bonus included) at --k, or M@K")
    w.add_argument("--k", default="4", help="draft tokens per iteration, or 'best' (default 4)")
    c = p.add_argument_group("model of the engine")
    c.add_argument("--calibration", default="auto",
                   help="auto (the GPU's calibration, if it has one; default), none (the idealized model), a "
                        "calibration's name, or list")
    c.add_argument("--overhead", type=validate.cli(validate.number, low=0), help="ms added to every target pass")
    c.add_argument("--draft-overhead", type=validate.cli(validate.number, low=0),
                   help="ms added to every draft pass (n-gram: per lookup)")
    c.add_argument("--overlap", help=f"one of {', '.join(OVERLAPS)} (default kernel)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the report as JSON (schema in the module docstring)")
    o.add_argument("--plot", metavar="FILE.png", help="also draw S(B) with the paying range shaded")
    return p


def from_args(args: argparse.Namespace, calibration_lookup=None) -> Deployment:
    return deployment(args.target, args.draft, target_shape=args.target_shape, draft_shape=args.draft_shape,
                      drafter_kind=args.drafter, exit_layer=args.exit_layer, gpu_name=args.gpu,
                      bandwidth=args.bandwidth, peak=args.peak, memory=args.memory, link=args.link, dtype=args.dtype,
                      weight_bits=args.weight_bits, tp=args.tp, batch=args.batch, context=args.context,
                      draft_context=args.draft_context, alpha=args.alpha, mean_accepted=args.mean_accepted, k=args.k,
                      calibration=args.calibration, overhead=args.overhead, draft_overhead=args.draft_overhead,
                      overlap=args.overlap, calibration_lookup=calibration_lookup)


def run(argv: list[str], calibration_lookup=None, progress: bool | None = False) -> dict:
    """The report for a command line (what the page's presets call): errors are ``validate.BadArgument``
    with the flag's name."""
    args = parser(_RaisingParser).parse_args(argv)
    try:
        return advise(from_args(args, calibration_lookup), progress)
    except validate.BadArgument as err:
        raise type(err)(flag_message(str(err))) from None


def plot_path(text: str) -> Path:
    """A file the plot can be written to: its folder exists and is writable, its suffix a format matplotlib writes."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(text)
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise validate.BadArgument(f"plot must end in one of {', '.join('.' + f for f in formats)} (the formats "
                                   f"matplotlib writes), such as s.png; got {text!r}")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise validate.BadArgument(f"plot must be a file in a folder that exists and is writable; "
                                   f"{str(folder)!r} {'is not writable' if folder.is_dir() else 'does not exist'}")
    return path


def calibration_listing() -> list[dict]:
    """Every stored calibration: GPU, name, what it was fitted to, its fitted setup and its knobs."""
    return [{"gpu": accel, "name": source, "about": about, "fitted_setup": fitted_setup(accel, source),
             "knobs": cost.calibration(accel, source)}
            for accel, sources in known_calibrations().items() for source, about in sources.items()]


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.calibration == "list":
        listing = calibration_listing()
        if args.json:
            print(json.dumps({"schema": f"{SCHEMA}/calibrations", "calibrations": listing}, indent=2))
        for c in [] if args.json else listing:
            print(f"{c['gpu']:10} {c['name']:18} {c['about']}")
        return 0
    if args.target is None and args.target_shape is None:
        p.error(f"--target is required: one of {', '.join(cost.PRESETS)}, a config.json path, or --target-shape")
    try:
        plot_file = plot_path(args.plot) if args.plot else None
        report = advise(from_args(args), progress=None)
    except validate.BadArgument as err:
        p.error(flag_message(str(err)))
    if plot_file:  # drawn before the report is printed: a failure prints nothing but the error
        import matplotlib

        matplotlib.use("Agg")
        try:
            plot(report).figure.savefig(plot_file)
        except (OSError, RuntimeError, ValueError) as err:
            p.error(f"--plot: could not write {str(plot_file)!r}: {err}")
        print(f"plot: {plot_file}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
