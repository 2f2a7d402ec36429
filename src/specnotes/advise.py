"""``python -m specnotes.advise``: does speculative decoding pay for my deployment?

    python -m specnotes.advise --target Llama-3.1-8B --drafter eagle3 --gpu H100-SXM --engine vllm \\
        --engine-version 0.10.1 --batch 1-256 --context 1024 --mean-accepted 2.3@3

prints a one-page report from the book's cost model (``specnotes.cost``): S at the given batch(es) with a
band from its cross-validated error, the batch ranges where speculation pays, is uncertain, or loses, the best k
per batch (``cost.best_k``), the memory limit (``cost.max_batch``), which roof each pass's kernels sit
under, what the calibration extrapolates past, a recommendation in plain words, and the book's "how to
quote a speedup" checklist filled in. The same report is a page of the book (``book/advisor.ipynb``):
``advise`` computes it, ``render`` writes it (Markdown that reads as plain text in a terminal), ``plot``
draws S(B); the CLI and the page call the same three.

Models: ``--target``/``--draft`` take a preset (``cost.PRESETS``: Llama-3(.1)-8B/70B, Llama-3.2-1B,
Qwen3-8B/32B/0.6B/1.7B; the shipped pair as llama-server runs it, specnotes-target and specnotes-draft; and the
mixtures of experts ``cost.MOE_PRESETS``: Mixtral-8x7B, Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-20b/120b,
DeepSeek-V3, Llama-4-Scout, Qwen2-57B-A14B) or the path of a Hugging Face ``config.json`` (read offline;
``moe.shape_from_config`` reads its MoE and MLA fields). Names match without regard to case or punctuation, a
unique prefix is taken, and an unknown name gets the nearest suggested (so do ``--gpu``, ``--drafter`` and
``--dtype``);
``--target-shape``/``--draft-shape`` take ``n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab``. The drafter
kind (``--drafter``) maps to a drafter of the cost model:

- ``model``: a separate draft model, ``--draft``: a ``ModelShape``, k sequential one-token passes.
- ``early-exit``: the target's first ``--exit-layer`` layers and its LM head: ``cost.EarlyExit``.
- ``ngram``: prompt lookup, no weights: ``cost.NGRAM``; it costs only the draft overhead per lookup.
- ``eagle``: an EAGLE(-1) head, ``cost.eagle_head``: an fc from 2·d_model and one decoder layer of the
  target's width, drafting with the target's full LM head.
- ``eagle3``: an EAGLE-3 head, ``cost.eagle3_head``: an fc from the three fused target features, one decoder
  layer whose QKV reads [embedding; feature], and its own LM head over ``--draft-vocab`` tokens (32,000 for
  the published heads).
- ``mtp``: the target's multi-token-prediction module, ``cost.mtp_head``: one more layer of the target's own
  kind (MoE and MLA for DeepSeek-V3), an fc from 2·d_model, the target's LM head; one pass at k = 1.

A head's first draft pass runs over the k + 1 tokens the verify pass scored, as vLLM and SGLang run it.
``--tree W1,W2,...`` drafts a tree instead of a chain: level i runs Wi tokens per sequence (the first
usually 1), and one verify pass scores ``--verified`` tree tokens (default: the sum of the widths); a tree
has no i.i.d. α, so it takes ``--mean-accepted M`` (tokens per iteration, bonus included) and no ``--k``.

GPU: ``--gpu`` (a row of ``hardware.ACCELERATORS``), or ``--bandwidth GB/s --peak TFLOP/s [--memory GB]
[--link GB/s]`` for one that is not in the table (these also override a row's values). Acceptance:
``--alpha``, a range ``--alpha LO-HI`` (S at the middle, the band spans both ends), or ``--mean-accepted M``
(tokens per iteration including the bonus token, as Spec-Bench reports it) measured at ``--k K``, or ``M@K``,
which also sets k = K unless ``--k`` says otherwise; converted by ``cost.implied_alpha``. Without ``--k`` a
chain drafts k = 4 and the report says so; ``--mean-accepted`` without the k it was measured at is refused.
``--context`` is required (a llama-server record gives it): the KV reads it sets can change the answer.

The engine: a calibration is the cost model's engine knobs (a time per decoder layer of every pass, per
draft pass, ...) fitted to the published record for one engine (name and version) on one GPU and
cross-validated (``specnotes.calibrate``, Chapter 6). ``--calibration auto`` (the default) takes the
calibration of ``--engine`` (and ``--engine-version``) on the GPU; where the record has that engine only at
another version, on another GPU, or not at all, it says so and uses the nearest (the engine's other
version, its knobs from other GPUs, or the knobs pooled over every engine); without ``--engine`` it uses
the pooled knobs and says so. ``none`` asks for the idealized roofline, ``pooled`` for the pooled knobs, a
NAME for one stored calibration of the GPU; ``list`` lists them (``--json``: as JSON). The report names
everything the request extrapolates past: batches, context, GPU, engine, drafter, target, tp and weight
dtype the calibration was not fitted on. ``--overhead-ms``, ``--draft-overhead-ms``,
``--layer-overhead-us`` and ``--overlap`` set or override knobs (then the model has no cross-validated
band).

The band: the cross-validated error of the model in use, as a function of the batch
(``calibrate.Band``, Chapter 6): leaving one source out, the held-out points of the published record that
were predicted from their published acceptance alone (as the advisor predicts from ``--alpha`` /
``--mean-accepted``); at each B, the central 90% of the errors log(predicted / measured) of the 20 such points
nearest in log B, widened to the spread between the sources' typical errors (``calibrate.BAND_BUILDS``: a
deployment the record has not seen is a new source). The report's S is the model's S, moved to the band's
edge where the band excludes it; a stored band of the first build (centred on the nearest errors' median)
still works, and then the model's own S is beside it. How often the band, built without a source, covered
that source's points is stored per batch bucket (``calibrate.band_table``) and quoted. "pays" where the whole
band lies above S = 1, "loses" where it lies below, "uncertain: measure it" where it straddles 1
(``calibrate.verdict_of``), with the commands that measure it; "*" where the request lies past what the
calibration was fitted on or past the batches the band was built from. A batch that does not fit in memory
gets no verdict, and the recommendation and the batches to measure stay within the batches asked for.
A mixture-of-experts target gets its engine's MoE calibration (``calibrate.MOE_APART``), or says it has none.

Anchored on the reader's own measurement: ``--measured B:S[,B:S...]`` (S measured on the engine, TPOT off over
on, at batch B; needs ``--k``) and ``--from-record FILE`` (a record of ``python -m specnotes.bench
serve-speedup`` or ``python -m specnotes.engine measure``: its S per concurrency, the median over its pairs,
and what it says of the deployment: k, target and draft, a CPU's measured roofs, the context, the acceptance
specnotes measured; ``--record-batches`` anchors on some of its batches and shows the others held back). The
model's S(B) is scaled by the measured level (the geometric mean of measured over modelled S; without α, the α
that level implies), and its band is the anchored one (``calibrate.anchor_band``): the held-out errors of
predicting one batch of a published series from another, as a function of log2(B / the nearest measured B). A
record that disagrees with the flags (model, draft, k, GPU) is refused, naming both; a measured batch that does
not fit in memory, or an S above k + 1, is refused.

``--json`` prints the report as JSON (schema ``specnotes.advise/3``; every quantity with a unit says it)::

    {"schema": "specnotes.advise/3",
     "argv": the command line's inputs (no --json, --plot) | null,
     "deployment": {"target": {"name", "params", "shape": [6 ints], "weight_bytes", "kv_bytes", "compute"},
                    "draft": {"kind": "model"|"early-exit"|"ngram"|"eagle"|"eagle3", "name", "maps_to",
                              "params"},
                    "gpu": {"name", "bandwidth_GB_per_s", "peak_TFLOP_per_s", "memory_GB", "ridge_FLOP_per_byte",
                            "source"},
                    "dtype", "math_dtype", "weight_bits", "tp", "batch": [lo, hi], "context_tokens",
                    "draft_context_tokens", "alpha", "alpha_from", "k": int | "best", "k_from",
                    "tree": [widths] | null, "verified": int | null, "expected_tokens" (at k, or null),
                    "engine", "engine_version", "calibration": name | null, "calibration_about": what it was
                    fitted to | null, "calibration_note": which model the report uses, and why,
                    "engine_knobs": {"overlap", "overhead_ms", "draft_overhead_ms", "layer_overhead_us",
                                     "allreduce_latency_us"},
                    "band": {"variant", "regime", "nominal", "points", "errors", "sources", "batches": [lo, hi],
                             "held_out": [{"bucket", "points", "covered", "coverage", "decisive", ...}]} | null,
                    "anchor": {"source", "measured": [[B, S], ...], "held_back": [[B, S], ...], "level",
                               "model_at_measured": [S, ...], "quartiles": {B: [q1, q3]}} | null,
                    "extrapolations": [str, ...],
                    "fitted_batch_max": the largest batch the calibration was fitted on | null,
                    "provenance": a note on where the calibration's data come from ("" if none)},
     "max_batch": int | null,          # cost.max_batch; null: the GPU has no memory size
     "limit": int,                     # the largest batch considered: max_batch, or 65536
     "weights_per_gpu_GB": float,      # target + draft weights on each GPU (> memory: nothing fits)
     "rows": [{"batch", "fits", "k", "speedup" (the band's centre: the model's S, moved into the band where the
               band excludes it), "model_speedup" (the model's own),
               "band": [lo, hi] | null, "verdict": "pays"|"uncertain"|"loses" | null, "extrapolated",
               "best_k" (0: leave it off), "best_speedup",
               "idealized_speedup", "c", "plain_ms", "iteration_ms", "plain_tokens_per_s", "spec_tokens_per_s",
               "roofs": {"decode"|"verify"|"draft": {"matmul"|"attention"|"heads"|"lm head": "memory"|"compute"}},
               "measured": S measured here | null, "measured_role": "anchor"|"held back" | null}],
     "paying_batches": [[first, last], ...],   # the model's S > 1 (for "best": the union over k = 1..16)
     "verdict_batches": {"pays": [[first, last], ...], "uncertain": [...], "loses": [...]} | null,
     "verdict_extrapolated": bool,     # the request lies past the calibration's fit: the verdicts extrapolate
     "best_k_paying_batches": [[first, last], ...],  # the same for "best" k (the union over k = 1..16)
     "idealized_paying_batches": [[first, last], ...],  # the same without the calibration
     "crossover_batch": int | null,    # first B past the model's last paying range; null: pays up to the limit
     "curve": [[B, S, low, centre, high], ...],  # the model's S(B) up to the memory limit and the band's factors
     "warnings": [str, ...],           # a calibration applied past its fit; no batch asked for fits
     "verdict_line": str, "band_line": str,  # the report's first words: the verdicts, then S and its band
     "recommendation": str,
     "measure": {"batches": [B, ...], "commands": [str, ...]},  # where the band is uncertain: how to measure it
     "checklist": [[item, value], ...], "quote": str}

``--calibration list --json`` prints ``{"schema": "specnotes.advise/2/calibrations", "calibrations":
[{"gpu", "name", "engine", "version", "fitted_to", "knobs"}, ...]}``.

``--plot FILE.png`` draws S(B) with the paying range shaded (``specnotes.plots``); the file's folder must
exist and its suffix be a format matplotlib writes (checked before anything is computed). ``--tp``
must split every model on the GPUs evenly (``tp_choices``: it divides the query heads, and divides
the KV heads or is a multiple of them). Bad input is an argparse error naming the flag and its allowed
values (exit status 2). Imports no torch.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from specnotes import cost, hardware, moe, validate
from specnotes.cost import ModelShape

SCHEMA = "specnotes.advise/3"
DRAFTERS = ("model", "early-exit", "ngram", "eagle", "eagle3", "mtp")
K_MAX = 16  # "best" searches k = 1..K_MAX (cost.best_k's default)
K_DEFAULT = 4  # a chain's k when --k is not given (the report says so)
NO_MEMORY_LIMIT = 1 << 16
OVERLAPS = cost.OVERLAPS
ENGINES = ("vllm", "sglang", "magicdec")  # engines of the published record (any other name gets pooled knobs)


@dataclass(frozen=True)
class Deployment:
    """Everything the report depends on, checked. ``model``: keyword arguments of the time functions
    (seconds); ``band``: the model's cross-validated error as a function of B (``calibrate.Band``), or None."""

    target: ModelShape
    draft: cost.Draft
    drafter: str
    draft_name: str
    accel: hardware.Accelerator
    dtype: str
    math_dtype: str
    batch: tuple[int, int]
    context: int
    alpha: float | None
    alpha_from: str
    k: int | None  # None: the best k at each batch (a tree: the tree tokens verified)
    weight_bits: int | None = None
    tp: int = 1
    draft_context: int | None = None
    calibration: str | None = None
    calibration_about: str | None = None
    model: dict = field(default_factory=dict)
    calibration_note: str = ""  # which model the report uses, and why
    warnings: tuple[str, ...] = ()
    k_from: str = "given"
    tree: tuple[int, ...] | None = None
    tokens: float | None = None  # a tree's mean tokens per iteration
    engine: str | None = None
    engine_version: str | None = None
    band: object | None = None  # calibrate.Band: the held-out errors the band at each B comes from
    extrapolations: tuple[str, ...] = ()
    fitted_batch: int | None = None  # the largest batch the calibration in use was fitted on
    band_about: dict | None = None  # how the band was built and how often it covered held-out points
    provenance: str = ""  # a note on where the calibration's data come from
    anchor: Anchor | None = None  # the reader's measurement the model's level is anchored on
    alpha_span: tuple[float, float] | None = None  # --alpha LO-HI: S is at the middle, the band spans both ends


# ---------------------------------------------------------------------------------------------- inputs


def shape_from_text(text: str, name: str = "") -> ModelShape:
    """``"n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab"`` → a ModelShape."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 6 or not all(p.isdigit() for p in parts):
        raise validate.BadArgument("shape must be six positive integers n_layers,d_model,n_heads,n_kv_heads,d_ff,"
                                   f"vocab; got {text!r}")
    return ModelShape(*map(int, parts), name=name or f"shape {text}")


def shape_from_config(path) -> ModelShape:
    """A Hugging Face ``config.json`` (read offline) → a ModelShape, or a ``cost.MoEShape`` for a mixture of
    experts: ``moe.shape_from_config`` reads the fields. Its name: the config's ``_name_or_path``, else the
    folder's."""
    config = json.loads(Path(path).read_text())
    return moe.shape_from_config(config, name=str(config.get("_name_or_path") or Path(path).resolve().parent.name))


def _flat(text) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def match_name(arg: str, value: str, choices, what: str = "one of") -> str:
    """``value`` as one of ``choices``, matched without regard to case or punctuation ("h200" → "H200",
    "llama-3.1-8b" → "Llama-3.1-8B"); a prefix of exactly one choice is that choice. Otherwise a BadArgument
    naming the nearest choices first ("did you mean ...?") and then all of them."""
    import difflib

    choices = list(choices)
    if value in choices:
        return value
    flat = {_flat(c): c for c in choices}
    if _flat(value) in flat:
        return flat[_flat(value)]
    starts = [c for f, c in flat.items() if _flat(value) and f.startswith(_flat(value))]
    if len(starts) == 1:
        return starts[0]
    near = starts or [flat[f] for f in difflib.get_close_matches(_flat(value), list(flat), n=3, cutoff=0.6)]
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise validate.BadArgument(f"{arg} {value!r} is not {what} the table knows: {hint}It knows "
                               f"{', '.join(choices)}")


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
    known = {**cost.PRESETS, **_shipped_shapes()}
    if value in known:
        return known[value]
    if value is not None and str(value).endswith(".json"):
        if not Path(value).is_file():
            raise validate.BadArgument(f"{name} must be a preset or a config.json that exists; {value!r} does not")
        try:
            return shape_from_config(value)
        except (validate.BadArgument, json.JSONDecodeError) as err:
            raise validate.BadArgument(f"{name}: {err}") from None
    if value is None:
        raise validate.BadArgument(f"{name} is required: a preset ({', '.join(known)}), the path of a Hugging Face "
                                   f"config.json, or --{name}-shape")
    try:
        return known[match_name(name, value, known, "a preset")]
    except validate.BadArgument as err:
        raise validate.BadArgument(f"{err}; or give the path of a Hugging Face config.json") from None


MAX_BATCH = 1 << 16  # the largest batch a report considers (NO_MEMORY_LIMIT)
MAX_CONTEXT = 10_000_000  # tokens: past the longest context window any model publishes (10M, Llama 4 Scout)


def batch_range(text) -> tuple[int, int]:
    """``"64"`` → (64, 64); ``"1-512"`` → (1, 512); at most ``MAX_BATCH``."""
    lo, sep, hi = str(text).partition("-")
    if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
        raise validate.BadArgument(f"batch must be a positive integer or a range LO-HI such as 1-512; got {text!r}")
    lo = validate.integer("batch", int(lo), low=1, high=MAX_BATCH)
    hi = validate.integer("batch", int(hi), low=lo, high=MAX_BATCH) if sep else lo
    return lo, hi

def k_value(text) -> int | None:
    """``"best"`` → None (the best k at each batch), else an integer in 1..64."""
    if str(text).strip().lower() == "best":
        return None
    if not str(text).strip().isdigit():
        raise validate.BadArgument(f"k must be an integer in [1, 64] or 'best'; got {text!r}")
    return validate.integer("k", int(text), low=1, high=64)


def alpha_value(alpha, mean_accepted, k: int | None, k_given: bool = True) -> tuple[float, str]:
    """(α, how it was obtained) from ``alpha``, or from ``mean_accepted`` ("M" measured at k, or "M@K").

    A mean accepted length depends on the k it was measured at: "M" needs ``k`` given (``k_given``), and
    with ``--k best`` only "M@K" says it."""
    if alpha is not None and mean_accepted is not None:
        raise validate.BadArgument("alpha or mean_accepted: give one of them, not both")
    if alpha is None and mean_accepted is None:
        raise validate.BadArgument("alpha or mean_accepted: give the acceptance rate α (--alpha 0.7), a range if you "
                                   "do not know it yet (--alpha 0.5-0.8: the report spans it), or a mean accepted "
                                   f"length at its k (--mean-accepted 2.3@3). {MEASURE_ALPHA}")
    if alpha is not None:
        lo_hi = alpha_range(alpha)
        if lo_hi[0] != lo_hi[1]:
            return sum(lo_hi) / 2, (f"a range {lo_hi[0]:g}–{lo_hi[1]:g}: S at the middle, the band spans both ends "
                                    f"({MEASURE_ALPHA_SHORT})")
        return lo_hi[0], "given"
    text, _, at = str(mean_accepted).partition("@")
    measured_k = k if not at else validate.integer("mean_accepted", int(at) if at.strip().isdigit() else at, low=1)
    if measured_k is None or not (at or k_given):
        raise validate.BadArgument("mean_accepted needs the k it was measured at: give --k K, or M@K (a mean "
                                   "accepted length of 2.3 tokens means α = 0.61 at k = 2 but 0.44 at k = 4)")
    try:
        mean = float(text)
    except ValueError:
        raise validate.BadArgumentType(f"mean_accepted must be a number M or M@K, got {mean_accepted!r}") from None
    if not 1 <= mean <= measured_k + 1:
        raise validate.BadArgument(f"mean_accepted must be in [1, {measured_k + 1}] (tokens per iteration with "
                                   f"the bonus token, at k = {measured_k}); got {mean:g}")
    alpha = cost.implied_alpha(mean, measured_k)
    return alpha, f"from a mean accepted length of {mean:g} tokens at k = {measured_k}, by the inverse of E[N]"


MEASURE_ALPHA = ("Measure α on your traffic: Chapter 3 measures a pair's, and python -m specnotes.bench serve records "
                 "the engine's acceptance where the engine reports it.")
MEASURE_ALPHA_SHORT = "measure α: Chapter 3, or the acceptance bench serve records"


def alpha_range(value) -> tuple[float, float]:
    """``0.7`` or ``"0.7"`` → (0.7, 0.7); ``"0.5-0.8"`` → (0.5, 0.8): α in [0, 1], low ≤ high."""
    if isinstance(value, tuple):
        lo, hi = value
    else:
        lo, sep, hi = str(value).partition("-")
        hi = hi if sep else lo
    try:
        lo, hi = float(lo), float(hi)
    except ValueError:
        raise validate.BadArgument(f"alpha must be a number in [0, 1] or a range LO-HI such as 0.5-0.8; got "
                                   f"{value!r}") from None
    lo, hi = validate.probability("alpha", lo), validate.probability("alpha", hi)
    if lo > hi:
        raise validate.BadArgument(f"alpha range must run from low to high, such as 0.5-0.8; got {value!r}")
    return lo, hi


def tree_value(text, verified=None) -> tuple[tuple[int, ...], int]:
    """``"1,4,4"`` → the tree's tokens per sequence at each draft level, and the tree tokens verified per
    sequence (``verified``, default the sum of the widths)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise validate.BadArgument(f"tree must be the tokens per sequence at each draft level, positive integers "
                                   f"such as 1,4,4; got {text!r}")
    widths = tuple(int(p) for p in parts)
    verified = sum(widths) if verified is None else validate.integer("verified", verified, low=len(widths))
    return widths, verified


def gpu(name=None, bandwidth=None, peak=None, memory=None, link=None, dtype: str = "bf16") -> hardware.Accelerator:
    """A row of the accelerator table, or one built (or overridden) from GB/s, TFLOP/s and GB."""
    if name is not None:
        try:
            name = match_name("gpu", name, hardware.ACCELERATORS, "a GPU")
        except validate.BadArgument as err:
            raise validate.BadArgument(f"{err}; or give --bandwidth and --peak for one that is not in the table") \
                from None
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

def drafter(kind: str, target: ModelShape, draft: ModelShape | None, exit_layer,
            draft_vocab: int | None = None) -> tuple[cost.Draft, str]:
    """(the cost model's drafter, its name) for a drafter kind."""
    kind = match_name("drafter", kind, DRAFTERS, "a drafter")
    if kind != "model" and draft is not None:
        raise validate.BadArgument(f"draft: a separate draft model goes with drafter 'model', not {kind!r}")
    if kind != "early-exit" and exit_layer is not None:
        raise validate.BadArgument(f"exit_layer goes with drafter 'early-exit', not {kind!r}")
    if kind != "eagle3" and draft_vocab is not None:
        raise validate.BadArgument(f"draft_vocab goes with drafter 'eagle3' (its reduced vocabulary), not {kind!r}")
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
    if kind == "eagle":
        head = cost.eagle_head(target)
        return head, head.name
    if kind == "mtp":
        head = cost.mtp_head(target)
        return head, head.name
    vocab = validate.integer("draft_vocab", 32000 if draft_vocab is None else draft_vocab, low=1, high=target.vocab)
    head = cost.eagle3_head(target, vocab, name=f"EAGLE-3 head for {target.name}, {vocab:,}-token vocabulary")
    return head, head.name


# ---------------------------------------------------------------------------------------------- the engine


def _calibrate():
    from specnotes import calibrate  # numpy and the published record: only when a report needs them

    return calibrate


# The published record's drafter names → the advisor's kinds; "self-speculation" is a draft model that is the
# target itself (``--draft`` the same shape as ``--target``, usually with ``--draft-context``).
PUBLISHED_DRAFTERS = {"draft-model": "model", "self-speculation": "self-speculation", "eagle-head": "eagle",
                      "eagle3-head": "eagle3", "ngram": "ngram", "early-exit": "early-exit"}


@dataclass(frozen=True)
class Request:
    """What the report is asked about, in the terms of a calibration's ``fitted_to``."""

    gpu: str | None
    engine: str | None
    engine_version: str | None
    kind: str
    target: str
    tp: int
    weight_bytes: float
    batch: tuple[int, int]
    context: int
    tree: bool
    moe: bool = False  # the target is a mixture of experts: its engines are calibrated as families of their own


def request_of(accel, gpu_name, engine, version, kind, target: ModelShape, draft, tp, batch, context,
               tree) -> Request:
    own = kind == "model" and isinstance(draft, ModelShape) and draft.n_layers == target.n_layers and \
        draft.d_model == target.d_model
    return Request(gpu_name, engine, version, "self-speculation" if own else kind, target.name, tp,
                   target.weight_bytes, batch, context, tree, isinstance(target, cost.MoEShape))


def extrapolations(fitted: dict, req: Request, gpus: list[str]) -> list[str]:
    """What the request asks beyond what the calibration was fitted on (``fitted``: its ``fitted_to``)."""
    out = []
    lo, hi = fitted["batch"]
    if req.batch[1] > hi:
        out.append(f"batches above B = {hi}: it was fitted on B = {_ranges_text([[lo, hi]])}")
    c_lo, c_hi = fitted["context"]
    if not c_lo <= req.context <= c_hi:
        out.append(f"context L = {req.context}: it was fitted on L = {_ranges_text([[c_lo, c_hi]])}")
    if req.gpu is None:
        out.append(f"a GPU not in the table: it was fitted on {', '.join(gpus)}")
    elif req.gpu not in gpus:
        out.append(f"the {req.gpu}: it was fitted on {', '.join(gpus)}")
    kinds = {PUBLISHED_DRAFTERS.get(d, d) for d in fitted["drafters"]}
    if req.kind not in kinds:
        out.append(f"drafter {req.kind!r}: it was fitted on {', '.join(sorted(kinds))}")
    if req.target not in fitted["targets"]:
        out.append(f"target {req.target}: it was fitted on {', '.join(fitted['targets'])}")
    if req.tp not in fitted["tp"]:
        out.append(f"tp = {req.tp}: it was fitted on tp = {', '.join(map(str, fitted['tp']))}")
    if req.weight_bytes not in fitted["weight_bytes"]:
        bits = ", ".join(f"{8 * w:g}-bit" for w in fitted["weight_bytes"])
        out.append(f"{8 * req.weight_bytes:g}-bit weights: it was fitted on {bits} weights (the weight reads move)")
    if req.tree and not fitted["trees"]:
        out.append("a draft tree: it was fitted on chains only")
    return out


@dataclass(frozen=True)
class Resolved:
    """A calibration resolved for a request: its name (None: the idealized model), the time functions'
    keyword arguments, what it was fitted to, the sentence saying which and why, warnings, what the request
    extrapolates past, and the band of its cross-validated error (``calibrate.Band``: a function of B)."""

    name: str | None
    knobs: dict
    about: str | None
    note: str
    warnings: tuple[str, ...]
    extrapolations: tuple[str, ...]
    band: object | None  # calibrate.Band
    fitted_batch: int | None = None
    band_about: dict | None = None
    provenance: str = ""  # where the calibration's data come from, when the record doubts it (a note)


def _gpus_of(stored: dict, engine: str | None) -> list[str]:
    """The GPUs the record has calibrations of ``engine`` on (None: any engine)."""
    return sorted({a for a, names in stored.items() if a in hardware.ACCELERATORS for n, r in names.items()
                   if "alias_of" not in r and (engine is None or _calibrate()._versions_of(engine, [n]))})


def resolve_calibration(gpu_name: str | None, name: str | None, req: Request, lookup=None) -> Resolved:
    """The calibration a report uses. ``name``: "auto" (the engine's on this GPU, else the nearest the record
    has, saying which), "none" (the idealized roofline), "pooled" (the knobs pooled over every engine), or a
    stored name of the GPU (``lookup(gpu, name)``: ``cost.calibration`` by default; a test passes its own)."""
    name = "auto" if name is None else name
    stored = _calibrate().stored()
    chosen, about = stored_band(stored, stored["model"]["variant"])
    if name == "none":
        return Resolved(None, {}, None, "`--calibration none`: the idealized roofline (no engine costs)", (), (),
                        *stored_band(stored, "idealized")[:1], None, stored_band(stored, "idealized")[1])
    if gpu_name is None and name not in ("auto", "pooled"):
        raise validate.BadArgument(f"calibration {name!r}: a calibration belongs to a GPU of the table, and this one "
                                   "is given by --bandwidth/--peak; use --gpu, or --calibration auto, pooled or none")
    if lookup is not None and name != "auto":
        try:
            knobs = dict(lookup(gpu_name, name))
        except (KeyError, ValueError):
            raise validate.BadArgument(f"calibration {name!r} does not exist for {gpu_name}") from None
        return Resolved(name, knobs, None, f"`--calibration {name}`: as given (not cross-validated)", (), (), None)
    pooled = stored["pooled"]
    if name == "pooled" or (name == "auto" and (req.engine is None or gpu_name is None)):
        why = ("`--calibration pooled`" if name == "pooled" else
               "auto: the GPU is not in the table, so it has no calibration of its own" if gpu_name is None else
               "auto: the engine is not given (`--engine`)")
        note = (f"{why}: the engine knobs pooled over every engine in the published record "
                f"({', '.join(sorted(stored['families']))})")
        gone = extrapolations(pooled["fitted_to"], req, _gpus_of(stored, None))
        engine = ["the engine: the pooled knobs are no engine's own"] if name == "auto" else []
        return Resolved("pooled", dict(pooled["knobs"]), "pooled over every engine in the record", note, (),
                        tuple(engine + gone), chosen, pooled["fitted_to"]["batch"][1], about)
    if gpu_name is None:
        raise validate.BadArgument(f"calibration {name!r}: a calibration belongs to a GPU of the table, and this one "
                                   "is given by --bandwidth/--peak; use --gpu, or --calibration auto, pooled or none")
    here = {n: r for n, r in stored.get(gpu_name, {}).items()}
    if name == "auto":
        found, knobs, how = _calibrate().lookup(gpu_name, req.engine, req.engine_version, moe=req.moe)
        moe_family = f"{req.engine}{_calibrate().MOE_SUFFIX}"
        family = (moe_family if req.moe and moe_family in stored["families"] else
                  req.engine if req.engine in stored["families"] else None)
        record = here[found] if found else stored["families"][family] if family else pooled
        gone = extrapolations(record["fitted_to"], req, [gpu_name])  # another GPU: the engine's sentence says so
        exact = found is not None and not any(s in how for s in ("not to", "not given", "dense targets' knobs"))
        engine = [] if exact else [f"the engine: {how}"]
        label = found or (f"{family} (fitted on other GPUs)" if family else "pooled")
        doubt = gpu_doubt_text(record["fitted_to"])
        how, _, sources = how.partition(" (from ")
        if sources:  # where the knobs come from is a note, not part of the Model line
            sources, _, rest = sources.partition(")")
            how += rest
        note = f"auto: {how}" + ("; this setup is inside what it was fitted on" if exact and not gone else "")
        said = ([f"The knobs come from these sources of the published record: {sources}."] if sources else []) + (
            [_doubt_note(doubt)] if doubt else [])
        return Resolved(label, dict(knobs), how, note, (), tuple(engine + gone), chosen,
                        record["fitted_to"]["batch"][1], about, " ".join(said).rstrip("."))
    names = [n for n in here if "alias_of" not in here[n]] + [n for n in here if "alias_of" in here[n]]
    if name not in here:
        where = "; ".join(f"{a}: {', '.join(n)}" for a, n in
                          ((a, list(v)) for a, v in stored.items() if a in hardware.ACCELERATORS)) or "none"
        raise validate.BadArgument(f"calibration {name!r} is not stored for {gpu_name} (it has "
                                   f"{', '.join(names) or 'none'}; stored: {where}); or auto, pooled, none")
    record = here[here[name]["alias_of"]] if "alias_of" in here[name] else here[name]
    gone = extrapolations(record["fitted_to"], req, [gpu_name])
    label = f"{record['engine']} {record['version'] or '(version not published)'} on {gpu_name}"
    engine = [] if req.engine and calibrate_name_matches(name, record, req) else [
        f"the engine: `--calibration {name}` is {label}" + (f", asked for {req.engine} {req.engine_version or ''}"
                                                            .rstrip() if req.engine else "")]
    warnings = ((f"`--calibration {name}` ({label}) applied past what it was fitted on: {'; '.join(engine + gone)}",)
                if engine + gone else ())
    doubt = gpu_doubt_text(record["fitted_to"])
    return Resolved(name, cost.calibration(gpu_name, name), label, f"`--calibration {name}`: {label}", warnings,
                    tuple(engine + gone), chosen, record["fitted_to"]["batch"][1], about, _doubt_note(doubt))


def stored_band(stored: dict, variant: str, kind: str = "batch") -> tuple:
    """(``calibrate.Band``, how it was built and how it did held out) of a stored variant: ``kind`` "batch" (the
    band as a function of B, from the acceptance-only held-out errors) or "anchor" (of an anchored prediction,
    as a function of log2(B / measured B)); (None, None) where none is stored."""
    rec = stored["cross_validation"].get("bands", {}).get(variant)
    if rec is None:
        return None, None
    band = _calibrate().Band.from_json(rec[kind])
    held = rec["held_out" if kind == "batch" else "anchor_held_out"]
    return band, {"variant": variant, "regime": rec["regime"] if kind == "batch" else "anchored",
                  "nominal": band.nominal, "points": band.points, "errors": len(band.errors),
                  "sources": len(set(band.sources)), "held_out": held, "between": band.between,
                  "centre": band.centre}


def _doubt_note(doubt: str) -> str:
    return f"The calibration's data hold points whose GPU the record doubts: {doubt}" if doubt else ""


def gpu_doubt_text(fitted: dict) -> str:
    """The record's doubt about which GPU measured what a calibration was fitted to, in one clause ("" if none)."""
    whys = sorted({line.split(": ", 1)[-1] for line in fitted.get("gpu_doubt", [])})
    return "; ".join(whys)


def calibrate_name_matches(name: str, record: dict, req: Request) -> bool:
    engine = str(req.engine or "").lower()
    return record["engine"].lower().startswith(engine) and (req.engine_version in (None, record["version"]))


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


@dataclass(frozen=True)
class Anchor:
    """The reader's own measurement the model is anchored on: the (B, S) points used (``measured``), where
    they came from (``source``: "--measured" or a record's path), the ``level`` (measured over modelled S,
    the geometric mean over the points), the anchored band (``calibrate.Band`` over log2(B / measured B)) and
    how it did held out, points of a record held back for comparison, and a record's per-batch quartiles."""

    measured: tuple[tuple[int, float], ...]
    source: str
    level: float
    band: object | None = None
    about: dict | None = None
    held_back: tuple[tuple[int, float], ...] = ()
    quartiles: dict = field(default_factory=dict)
    model_at: tuple[float, ...] = ()  # the model's S at each measured batch, before the level


def measured_points(text) -> tuple[tuple[int, float], ...]:
    """``"1:1.42,8:1.30"`` (or [(1, 1.42), (8, 1.30)]) → ((1, 1.42), (8, 1.3)): batches ≥ 1, each once, and
    speedups > 0."""
    if isinstance(text, str):
        pairs = []
        for part in [p.strip() for p in text.split(",") if p.strip()]:
            b, sep, v = part.partition(":")
            if not sep or not b.strip().isdigit() or not _is_float(v):
                raise validate.BadArgument(f"measured must be B:S pairs such as 1:1.42,8:1.30 (a batch, a colon, the "
                                           f"speedup measured there); got {part!r}")
            pairs.append((int(b), float(v)))
    else:
        pairs = [(b, v) for b, v in text]
    if not pairs:
        raise validate.BadArgument("measured must hold at least one B:S pair, such as 8:1.30")
    out = []
    for b, v in pairs:
        b = validate.integer("measured batch", b, low=1, high=NO_MEMORY_LIMIT)
        v = validate.number(f"measured speedup at B = {b}", v, low=0, low_open=True)
        out.append((b, v))
    batches = [b for b, _ in out]
    if len(set(batches)) != len(batches):
        raise validate.BadArgument(f"measured names a batch twice ({', '.join(map(str, batches))}): one S per batch")
    return tuple(sorted(out))


def anchor_distance(batches, batch: int) -> float:
    """log2(batch / the measured batch nearest to it in log B): how far an anchored prediction reaches
    (negative: below the measurement)."""
    d = [math.log2(batch / b) for b in batches]
    return min(d, key=abs)


def anchored(dep: Deployment, points, source: str, variant: str | None, held_back=(), quartiles=None) -> Deployment:
    """The deployment anchored on measured (B, S) points: the level is exp(mean log(measured / model)) over
    them; without a given α, the α whose E[N] best explains them (the level is then 1 unless that E[N] is
    past [1, k + 1]). The band is the stored anchored band of ``variant`` (None: knobs by hand). A point
    past the memory limit, or with S above what k drafts can give (k + 1 tokens per step), is refused."""
    fits = memory_limit(dep)
    most = (len(dep.tree) if dep.tree else dep.k) + 1
    for b, v in points:
        if fits is not None and b > fits:
            raise validate.BadArgument(f"measured B = {b} does not fit in memory here: at most B = {fits} sequences "
                                       f"(weights + both KV caches at L = {dep.context}); check --context, --gpu, "
                                       "--tp and --memory")
        if v > most:
            raise validate.BadArgument(f"measured S = {v:g} at B = {b} is above {most}, the most tokens per step "
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
               alpha_note: str | None = None) -> Deployment:
    """Check every input once and build the Deployment. Errors name the argument (the CLI's flag with
    dashes for underscores): a ``validate.BadArgument``. ``overhead``, ``draft_overhead``: ms;
    ``layer_overhead``: µs; ``k`` None: k = 4 for a chain (the report says it was not given).

    ``measured``: S measured on the reader's engine, "B:S[,B:S...]" or [(B, S), ...], from ``measured_from``
    (a record's ``held_back`` points and per-batch ``quartiles`` travel along): the model's S(B) is anchored to
    their level (``anchored``), and α, if not given, is the one that level implies."""
    drafter_kind = match_name("drafter", drafter_kind, DRAFTERS, "a drafter")
    target_shape_ = model_shape("target", target, target_shape)
    draft_shape_ = None if draft is None and draft_shape is None else model_shape("draft", draft, draft_shape)
    dtype = match_name("dtype", dtype, hardware.DTYPE_BYTES, "a dtype")
    accel = gpu(gpu_name, bandwidth, peak, memory, link, dtype)
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
        weight_bits = validate.integer("weight_bits", weight_bits, low=1, high=16)
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
    widths, tokens = None, None
    span = alpha_range(alpha) if alpha is not None and tree is None else None
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
                     res.warnings, k_from, widths, tokens, engine, engine_version, band, res.extrapolations,
                     res.fitted_batch, res.band_about if band else None, res.provenance,
                     alpha_span=span if span and span[0] != span[1] else None)
    if measured is None:
        return dep
    variant = res.band_about["variant"] if res.band_about else None
    return anchored(dep, measured_points(measured), measured_from, variant if band else None, held_back,
                    quartiles or {})


def _is_float(text) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------------------------- the model


def _accepted(fn, model: dict) -> dict:
    """The part of ``model`` that ``fn`` takes."""
    names = inspect.signature(fn).parameters
    return {key: value for key, value in model.items() if key in names}


def _model(dep: Deployment) -> dict:
    """Keyword arguments for cost.batch_speedup and friends (tp and the draft's KV window included)."""
    model = dict(dep.model)
    model.setdefault("tp", dep.tp)
    if dep.draft_context is not None:
        model.setdefault("draft_context", dep.draft_context)
    return model


def speedup(dep: Deployment, batch: int, k: int) -> float:
    if dep.tree:
        return cost.tree_speedup(dep.target, dep.draft, dep.accel, batch, dep.tree, dep.k, dep.tokens, dep.context,
                                 **_model(dep))
    return cost.batch_speedup(dep.target, dep.draft, dep.accel, batch, k, dep.alpha, dep.context, **_model(dep))


def best_k(dep: Deployment, batch: int) -> int:
    """The model's best k at ``batch`` (``cost.best_k``: 0 where no k gives S > 1); a tree: its own."""
    if dep.tree:
        return dep.k
    return cost.best_k(dep.target, dep.draft, dep.accel, batch, dep.alpha, dep.context, k_max=K_MAX, **_model(dep))


def k_on(dep: Deployment, batch: int) -> int:
    """The k a row's S, band and verdict are for: the k in use, or with "best" the best k of 1..K_MAX (what
    speculating would give, even where the model says to leave it off)."""
    if dep.k:
        return dep.k
    return max(range(1, K_MAX + 1), key=lambda k: speedup(dep, batch, k))


def memory_limit(dep: Deployment) -> int | None:
    """``cost.max_batch`` with the k in use (K_MAX for "best": the larger KV reservation)."""
    return cost.max_batch(dep.target, dep.draft, dep.accel, dep.context, k=dep.k or K_MAX, tp=dep.tp,
                          draft_context=dep.draft_context)


def weights_per_gpu(dep: Deployment) -> float:
    """Bytes of weights on each GPU, as ``memory_limit`` counts them (``cost.weights_per_device``)."""
    return cost.weights_per_device(dep.target, dep.draft, k=dep.k or K_MAX, tp=dep.tp)


def _merge(ranges) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def paying(dep: Deployment, limit: int, threshold: float = 1.0) -> list[tuple[int, int]]:
    """The batch ranges up to ``limit`` where S > ``threshold`` (``cost.paying_batches``); for "best" k the
    union over k = 1..K_MAX (S > threshold with the best k exactly where some k gives it); a tree by
    ``cost.batch_ranges`` on its S(B)."""
    if dep.tree:
        return cost.batch_ranges(lambda b: speedup(dep, b, dep.k) > threshold, limit)
    ks = [dep.k] if dep.k else range(1, K_MAX + 1)
    return _merge(r for k in ks for r in cost.paying_batches(dep.target, dep.draft, dep.accel, k, dep.alpha,
                                                             dep.context, limit=limit, threshold=threshold,
                                                             **_model(dep)))


def band_of(dep: Deployment):
    """The band in use: the anchored one where the model is anchored on a measurement, else the batch band
    (None: knobs set by hand)."""
    return dep.anchor.band if dep.anchor else dep.band


def factors(dep: Deployment, batch: int) -> tuple[float, float, float]:
    """(low, centre, high) multipliers on the model's S at ``batch``: the batch band's at log2 B; anchored, the
    level times the anchored band's at log2(B / the nearest measured B); (1, 1, 1), or the level, without a
    band."""
    if dep.anchor is None:
        return (1.0, 1.0, 1.0) if dep.band is None else _band_factors(dep.band, math.log2(batch))
    level = dep.anchor.level
    if dep.anchor.band is None:
        return level, level, level
    x = anchor_distance([b for b, _ in dep.anchor.measured], batch)
    return tuple(level * f for f in _band_factors(dep.anchor.band, x))


@functools.lru_cache(maxsize=4096)
def _band_factors(band, x: float) -> tuple[float, float, float]:
    return band.factors(x)


def end_speedups(dep: Deployment, batch: int, k: int) -> tuple[float, float]:
    """The model's S at ``batch`` at the low and the high end of an α range (both the same without one)."""
    if dep.alpha_span is None:
        s = speedup(dep, batch, k)
        return s, s
    return tuple(speedup(replace(dep, alpha=a), batch, k) for a in dep.alpha_span)


def best_speedup(dep: Deployment, batch: int) -> float:
    """The model's S at ``batch`` with the k in use, or the best speculating k's (``k_on``) where k is "best"."""
    return speedup(dep, batch, k_on(dep, batch))


def verdict_batches(dep: Deployment, limit: int) -> dict | None:
    """Where the band lies above 1 ("pays"), straddles it ("uncertain") or lies below it ("loses"), as batch
    ranges up to ``limit`` (``calibrate.verdict_of`` at every batch); None without a band."""
    if band_of(dep) is None or limit < 1:
        return None
    sure = cost.batch_ranges(lambda b: end_speedups(dep, b, k_on(dep, b))[0] * factors(dep, b)[0] > 1, limit)
    maybe = cost.batch_ranges(lambda b: end_speedups(dep, b, k_on(dep, b))[1] * factors(dep, b)[2] >= 1, limit)
    return {"pays": [list(r) for r in sure], "uncertain": [list(r) for r in _subtract(maybe, sure)],
            "loses": [list(r) for r in _subtract([(1, limit)], maybe)]}


def _subtract(ranges, cut) -> list[tuple[int, int]]:
    """The batches of ``ranges`` not in ``cut`` (both lists of inclusive ranges)."""
    out = []
    for lo, hi in ranges:
        start = lo
        for a, b in cut:
            if b < start or a > hi:
                continue
            if a > start:
                out.append((start, a - 1))
            start = max(start, b + 1)
        if start <= hi:
            out.append((start, hi))
    return out


def band_batches(dep: Deployment) -> tuple[int, int] | None:
    """The batches the band's held-out errors came from (past them, the band is their nearest's); anchored,
    the batches the anchored errors reach from the nearest measured batch."""
    band = band_of(dep)
    if band is None:
        return None
    lo, hi = band.span()
    if dep.anchor is None:
        return round(2**lo), round(2**hi)
    batches = [b for b, _ in dep.anchor.measured]
    return max(1, math.floor(min(batches) * 2**lo)), math.ceil(max(batches) * 2**hi)


def extrapolated(dep: Deployment, batch: int) -> bool:
    """Whether the verdict at ``batch`` extrapolates: the request lies past the calibration's fit (GPU, engine,
    drafter, target, context, tp, weights), or this batch lies past the largest batch it was fitted on or
    past the batches the band was built from."""
    past_batch = [x for x in dep.extrapolations if x.startswith("batches above")]
    span = band_batches(dep)
    return (len(dep.extrapolations) > len(past_batch) or bool(dep.fitted_batch and batch > dep.fitted_batch)
            or bool(span and not span[0] <= batch <= span[1]))


def kernel_roofs(kernels, accel: hardware.Accelerator, math_dtype: str) -> dict[str, str]:
    """"memory" or "compute" for each kernel: which of bytes/BW and FLOPs/peak is larger (the all-reduces,
    which run on the links, are left out)."""
    peak = accel.peak(math_dtype)
    return {k.name: "compute" if k.flops / peak > k.bytes / accel.mem_bandwidth else "memory"
            for k in kernels if k.flops or k.bytes}


def draft_kernels(dep: Deployment, batch: int, k: int) -> tuple:
    """The kernels of one draft pass (the first of k for a draft model, an early exit or an EAGLE head; the
    only one for a single-pass drafter or heads); none for a drafter without weights."""
    ctx = dep.context if dep.draft_context is None else dep.draft_context
    passes = cost.draft_passes(dep.draft, batch, k, ctx, dep.tp, dep.target, dep.tree)
    return passes[0].kernels if passes else ()


def roofs(dep: Deployment, batch: int, k: int) -> dict[str, dict[str, str]]:
    """Which roof each kernel of the decode, verify and draft passes sits under at this batch."""
    passes = {"decode": cost.decode_cost(dep.target, batch, dep.context, dep.tp).kernels,
              "verify": cost.verify_cost(dep.target, batch, k, dep.context, dep.tp).kernels,
              "draft": draft_kernels(dep, batch, k)}
    return {name: kernel_roofs(kernels, dep.accel, dep.math_dtype) for name, kernels in passes.items()}


def row(dep: Deployment, batch: int, limit: int | None) -> dict:
    """One batch: S with the k in use (with "best", the best speculating k, ``k_on``): the central estimate
    (``speedup``: the model's S times the band's centre factor), the model's own (``model_speedup``), the band
    and its verdict; the model's best k (0: leave it off) and its S (central), times, c, throughput (the
    model's), and the roofs. A tree: its k is the tree tokens verified."""
    model = _model(dep)
    best = best_k(dep, batch)
    k = dep.k or k_on(dep, batch)
    drafted = k
    plain = cost.pass_time(dep.target, dep.accel, batch, 1, dep.context, **_accepted(cost.pass_time, model))
    draft_ctx = dep.context if dep.draft_context is None else dep.draft_context
    draft_model = {**_accepted(cost.draft_time, model), "overhead": model.get("draft_overhead",
                                                                              model.get("overhead", 0.0))}
    if dep.tree:
        drafting = cost.draft_time(dep.draft, dep.accel, batch, k, draft_ctx, target=dep.target, widths=dep.tree,
                                   **draft_model)
        iteration = cost.iteration_time(dep.target, dep.draft, dep.accel, batch, k, dep.context, widths=dep.tree,
                                        **model)
        levels, tokens = len(dep.tree), dep.tokens
    else:
        drafting = cost.draft_time(dep.draft, dep.accel, batch, drafted, draft_ctx, target=dep.target, **draft_model)
        iteration = cost.iteration_time(dep.target, dep.draft, dep.accel, batch, k, dep.context, **model)
        levels, tokens = drafted, cost.expected_tokens(dep.alpha, k)
    s = speedup(dep, batch, k)
    low, centre, high = factors(dep, batch)
    s_low, s_high = end_speedups(dep, batch, k)
    band = [s_low * low, s_high * high] if band_of(dep) else None
    measured = dict(dep.anchor.measured + dep.anchor.held_back) if dep.anchor else {}
    return {"batch": batch, "fits": limit is None or batch <= limit, "k": k, "speedup": s * centre,
            "model_speedup": s, "band": band,
            "verdict": _calibrate().verdict_of(*band) if band else None, "extrapolated": extrapolated(dep, batch),
            "best_k": best, "best_speedup": speedup(dep, batch, best) * centre if best else 1.0,
            "c": drafting / (levels * plain), "plain_ms": 1e3 * plain, "iteration_ms": 1e3 * iteration,
            "plain_tokens_per_s": batch / plain, "spec_tokens_per_s": batch * tokens / iteration,
            "roofs": roofs(dep, batch, drafted), "measured": measured.get(batch),
            "measured_role": None if batch not in measured else "anchor" if batch in dict(dep.anchor.measured)
            else "held back"}


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


def advise(dep: Deployment, progress: bool | None = False, argv: list[str] | None = None) -> dict:
    """The report as a JSON-ready dict (schema in the module docstring). ``progress``: a tqdm bar on
    stderr (None: only where stderr is a terminal). With a calibration, the idealized model (no engine
    costs, per-kernel overlap) is evaluated beside it: ``idealized_speedup`` per row, ``idealized_paying_batches``."""
    fits = memory_limit(dep)
    limit = NO_MEMORY_LIMIT if fits is None else fits
    ranges = paying(dep, limit) if limit >= 1 else []
    any_k = paying(replace(dep, k=None), limit) if dep.k and not dep.tree and limit >= 1 else ranges
    ideal = replace(dep, calibration=None, calibration_about=None, model={}) if dep.calibration else dep
    ideal_ranges = paying(ideal, limit) if dep.calibration and limit >= 1 else ranges
    crossover = None if ranges and ranges[-1][1] >= limit else (ranges[-1][1] + 1 if ranges else 1)
    lo, hi = dep.batch
    edges = [r[0] for r in ranges] + [r[1] for r in ranges] + [crossover, fits]
    if dep.anchor:
        edges += [b for b, _ in dep.anchor.measured + dep.anchor.held_back]
    rows = [row(dep, b, fits) for b in _progress(report_batches(lo, hi, edges), progress, "batches")]
    for r in rows:
        r["idealized_speedup"] = speedup(ideal, r["batch"], r["k"]) if dep.calibration else r["model_speedup"]
    top = min(hi, limit) if lo < hi else min(limit, max(4 * hi, 1024))
    curve_lo = lo if lo < hi else 1
    curve = [[b, best_speedup(dep, b), *factors(dep, b)]
             for b in _progress(curve_batches(curve_lo, top) if top >= curve_lo else [], progress, "S(B) curve")]
    warnings = list(dep.warnings) + anchor_warnings(dep)
    if fits and lo > fits:  # (fits = 0: the recommendation says why nothing fits)
        asked = f"B = {lo}" if lo == hi else f"B = {lo}–{hi}"
        warnings.append(f"none of the batches asked for ({asked}) fit in memory: at most B = {fits} sequences fit "
                        f"(weights + both KV caches at L = {dep.context}); the rows below are past the limit")
    report = {"schema": SCHEMA, "argv": shlex.join(_inputs(argv)) if argv else None, "deployment": describe(dep),
              "max_batch": fits, "limit": limit,
              "weights_per_gpu_GB": weights_per_gpu(dep) / 1e9, "rows": rows,
              "paying_batches": [list(r) for r in ranges], "verdict_batches": verdict_batches(dep, limit),
              "verdict_extrapolated": bool(dep.extrapolations),
              "best_k_paying_batches": [list(r) for r in any_k],
              "idealized_paying_batches": [list(r) for r in ideal_ranges], "crossover_batch": crossover,
              "curve": curve, "warnings": warnings}
    report["verdict_line"] = verdict_line(report)
    report["band_line"] = band_line(report)
    report["recommendation"] = recommendation(report)
    report["measure"] = {"batches": measure_batches(report), "commands": measure_commands(report)}
    report["checklist"] = checklist(report)
    report["quote"] = quote(report)
    return report


def _inputs(argv: list[str]) -> list[str]:
    """A command line without the flags that only choose the output (--json, --plot FILE)."""
    out, skip = [], False
    for a in argv:
        if skip or a == "--json":
            skip = False
            continue
        if a == "--plot":
            skip = True
            continue
        if not a.startswith("--plot="):
            out.append(a)
    return out


def anchor_warnings(dep: Deployment) -> list[str]:
    """A level far outside what the published record's held-out errors span says the model's shape may not be
    the engine's either."""
    if dep.anchor is None or dep.band is None:
        return []
    lo, hi = math.exp(-max(dep.band.errors)), math.exp(-min(dep.band.errors))
    level = dep.anchor.level
    if lo / 1.5 <= level <= hi * 1.5:
        return []
    return [f"your engine runs at ×{level:.2f} the model's level, far outside what the published engines ran at "
            f"(×{lo:.2f}–×{hi:.2f}): its costs are not the model's, so the shape of S(B) may not be either. Measure "
            "at the batches you will run."]


def engine_knobs(model: dict) -> dict:
    """The time functions' knobs with their units in their names: ms per pass, µs per layer and all-reduce."""
    return {"overlap": model.get("overlap", "kernel"), "overhead_ms": 1e3 * model.get("overhead", 0.0),
            "draft_overhead_ms": 1e3 * model.get("draft_overhead", model.get("overhead", 0.0)),
            "layer_overhead_us": 1e6 * model.get("layer_overhead", 0.0),
            "allreduce_latency_us": 1e6 * model.get("allreduce_latency", 0.0)}


def band_json(dep: Deployment) -> dict | None:
    """The band as the JSON says it: how it was built, the batches its errors came from, how it did held out."""
    if band_of(dep) is None:
        return None
    about = dep.anchor.about if dep.anchor else dep.band_about
    return {**dict(about), "batches": list(band_batches(dep))}


def anchor_json(dep: Deployment) -> dict | None:
    """The measurement the model is anchored on, as the JSON says it."""
    a = dep.anchor
    if a is None:
        return None
    return {"source": a.source, "measured": [list(p) for p in a.measured], "held_back": [list(p) for p in a.held_back],
            "level": a.level, "model_at_measured": list(a.model_at),
            "quartiles": {str(b): list(q) for b, q in a.quartiles.items()}}


def describe(dep: Deployment) -> dict:
    t, d = dep.target, dep.draft
    draft_params = (d.params if isinstance(d, ModelShape | cost.EagleHead)
                    else cost.early_exit_shape(t, d.layers).params if isinstance(d, cost.EarlyExit) else 0)
    maps_to = {"model": "ModelShape draft: k one-token passes",
               "early-exit": f"cost.EarlyExit({getattr(d, 'layers', '')})",
               "ngram": "cost.NGRAM: no weights, its overhead only",
               "eagle": "cost.eagle_head: fc from 2·d_model, one layer of the target's width, the target's LM head",
               "eagle3": "cost.eagle3_head: fc from 3 fused features, one layer (QKV over 2·d_model), a reduced "
                         "draft LM head",
               "mtp": "cost.mtp_head: one more layer of the target's own kind, fc from 2·d_model, the target's LM "
                      "head"}[dep.drafter] + ("" if not dep.tree else
                                                          f"; a tree of widths {list(dep.tree)}")
    g = dep.accel
    return {
        "target": {"name": t.name, "params": t.params, "weight_bytes": t.weight_bytes, "kv_bytes": t.kv_bytes,
                   "compute": t.compute, "shape": [t.n_layers, t.d_model, t.n_heads, t.n_kv_heads, t.d_ff, t.vocab]},
        "draft": {"kind": dep.drafter, "name": dep.draft_name, "maps_to": maps_to, "params": draft_params},
        "gpu": {"name": g.name, "bandwidth_GB_per_s": g.mem_bandwidth / 1e9,
                "peak_TFLOP_per_s": g.peak(dep.math_dtype) / 1e12, "memory_GB": g.memory / 1e9 if g.memory else None,
                "ridge_FLOP_per_byte": g.ridge(dep.math_dtype), "source": g.source},
        "dtype": dep.dtype, "math_dtype": dep.math_dtype, "weight_bits": dep.weight_bits, "tp": dep.tp,
        "batch": list(dep.batch), "context_tokens": dep.context, "draft_context_tokens": dep.draft_context,
        "alpha": None if dep.tree else dep.alpha, "alpha_from": dep.alpha_from, "k": dep.k if dep.k else "best",
        "k_from": dep.k_from, "tree": list(dep.tree) if dep.tree else None, "verified": dep.k if dep.tree else None,
        "expected_tokens": dep.tokens if dep.tree else cost.expected_tokens(dep.alpha, dep.k) if dep.k else None,
        "engine": dep.engine, "engine_version": dep.engine_version,
        "calibration": dep.calibration, "calibration_about": dep.calibration_about,
        "calibration_note": dep.calibration_note, "engine_knobs": engine_knobs(dep.model),
        "band": band_json(dep), "anchor": anchor_json(dep),
        "extrapolations": list(dep.extrapolations),
        "fitted_batch_max": dep.fitted_batch, "provenance": dep.provenance,
    }




# ---------------------------------------------------------------------------------------------- words


def where_it_pays(report: dict) -> str:
    """Where the model's own S (no band) is above 1, over every batch that fits."""
    ranges, limit, crossover = report["paying_batches"], report["limit"], report["crossover_batch"]
    searched = f"1–{limit}" + ("" if report["max_batch"] is not None else ", no memory limit")
    if report["max_batch"] == 0:
        return "nowhere: not one sequence fits in memory"
    if not ranges:
        return f"S ≤ 1 at every batch ({searched})"
    if len(ranges) == 1 and ranges[0] == [1, limit]:
        return f"S > 1 at every batch that fits ({searched})"
    return f"S > 1 for B = {_ranges_text(ranges)} (of {searched})" + (
        f"; crossover B* = {crossover}" if crossover is not None else "")


def _ranges_text(ranges) -> str:
    return ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in ranges)


def _k_text(report) -> str:
    dep = report["deployment"]
    if dep["tree"]:
        return f"the tree {dep['tree']} ({dep['verified']} tokens verified)"
    return "the best k at each batch" if dep["k"] == "best" else f"k = {dep['k']}"


def _k_short(report) -> str:
    dep = report["deployment"]
    return f"a tree, {dep['verified']} tokens verified" if dep["tree"] else "the best k" if dep["k"] == "best" else \
        f"k = {dep['k']}"


def _clip(ranges, lo: int, hi: int) -> list[list[int]]:
    """The parts of ``ranges`` inside [lo, hi]."""
    return [[max(a, lo), min(b, hi)] for a, b in ranges if b >= lo and a <= hi]




def verdict_line(report: dict) -> str:
    """The report's first words: where the band says speculation pays, is uncertain or loses, over the batches
    asked for (``calibrate.verdict_of`` at each batch); without a band, where the model alone says S > 1."""
    dep, limit = report["deployment"], report["limit"]
    lo, hi = dep["batch"]
    hi = min(hi, limit) if report["max_batch"] else hi
    v = report["verdict_batches"]
    if report["max_batch"] == 0:
        return "Does not fit in memory."
    if lo > hi:
        return f"None of the batches asked for fits in memory: at most B = {report['max_batch']}."
    if v is None:
        ranges = _clip(report["paying_batches"], lo, hi)
        said = f"S > 1 for B = {_ranges_text(ranges)}" if ranges else f"S ≤ 1 for every B from {lo} to {hi}"
        return f"No verdict: the engine knobs were set by hand, so the model is not cross-validated. It says {said}."
    parts = [f"{name} for B = {_ranges_text(_clip(v[name], lo, hi))}" + (": measure it" if name == "uncertain" else "")
             for name in ("pays", "uncertain", "loses") if _clip(v[name], lo, hi)]
    line = "; ".join(parts)
    return line[0].upper() + line[1:] + "."


def band_line(report: dict) -> str:
    """S and its band at the ends of the batches asked for: "At B = 1: S = 1.62×, band 1.45–1.71×; ..."."""
    dep = report["deployment"]
    lo, hi = dep["batch"]
    mine = [r for r in report["rows"] if lo <= r["batch"] <= hi and r["fits"]]
    ends = [r for i, r in enumerate(mine) if i in (0, len(mine) - 1)]
    said = []
    for r in ends:
        s = r["speedup"]
        k = f", k = {r['k']}" if dep["k"] == "best" else ""
        band = f", band {r['band'][0]:.2f}–{r['band'][1]:.2f}×{k}" if r["band"] else k
        said.append(f"at B = {r['batch']}: S = {s:.2f}×{band}" + ("*" if r["extrapolated"] else ""))
    if not said:
        return ""
    text = "; ".join(said)
    return text[0].upper() + text[1:] + "."


def measure_batches(report: dict) -> list[int]:
    """Where to measure: the first and the last uncertain batch among the batches asked for that fit in memory,
    and the uncertain batch nearest their middle in log B, at most three batches; none where every such batch is
    decisive."""
    v = report["verdict_batches"]
    if not v or not v["uncertain"]:
        return []
    lo, hi = asked(report)
    ranges = _clip(v["uncertain"], lo, hi)
    if not ranges:
        return []
    a, b = ranges[0][0], ranges[-1][1]
    middle = math.sqrt(a * b)  # the uncertain batch nearest to it in log B
    nearest = min((min(max(round(middle), x), y) for x, y in ranges), key=lambda n: abs(math.log(n / middle)))
    return sorted({a, nearest, b})


def measure_commands(report: dict) -> list[str]:
    """The commands that measure S(B) on the reader's engine at ``measure_batches`` and anchor the advisor on
    them (``bench serve`` off and on, ``bench serve-speedup``, then ``advise --from-record``)."""
    batches = measure_batches(report)
    if not batches:
        return []
    c = ",".join(map(str, batches))
    serve = f"python -m specnotes.bench serve --url http://HOST:PORT/v1 --model NAME --concurrency {c}"
    return [f"{serve} --label off --out off.json", f"{serve} --label on --out on.json",
            "python -m specnotes.bench serve-speedup --off off.json --on on.json --out s.json",
            f"python -m specnotes.advise {report['argv'] or '...'} --from-record s.json"]


def shell_lines(command: str, width: int = 100) -> list[str]:
    """A shell command broken at spaces with backslashes so that no line is wider than ``width``."""
    lines, line = [], ""
    for word in command.split(" "):
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def band_text(dep: dict) -> str:
    """How the band was built and how it did on sources it was not built from, in two short sentences."""
    about = dep["band"]
    if about is None:
        return "none: the engine knobs were set by hand, so nothing cross-validates them"
    if dep["anchor"] is not None:
        cover = "; ".join(f"{r['coverage']:.0%} of {r['pairs']} reaching {r['distance']}" for r in about["held_out"]
                          if r["pairs"] and not r["distance"].startswith("up to"))
        return (f"anchored: the central {about['nominal']:.0%} of the {about['points']} held-out errors of "
                f"predictions from another batch of the same series, nearest in log(B / measured B), of "
                f"{about['errors']} from {about['sources']} sources. Built without each source, such a band "
                f"covered {cover}")
    regime = ("points predicted from their published acceptance alone, as here" if about["regime"] ==
              "acceptance only" else f"{about['regime']} points")
    lo, hi = about["batches"]
    cover = "; ".join(f"{r['coverage']:.0%} of {r['points']} at {r['bucket']}" for r in about["held_out"]
                      if r["bucket"] not in ("B > 1", "all") and r.get("points"))
    wide = ", widened to the spread between the sources' typical errors" if about.get("between") else ""
    return (f"the central {about['nominal']:.0%} of the {about['points']} held-out errors nearest in B{wide}, of "
            f"{about['errors']} from {about['sources']} sources ({regime}; B = {lo}–{hi}). Built without each "
            f"source, such a band covered {cover}")


def held_back(report: dict) -> list[dict]:
    """For each held-back measured batch of an anchored report: the anchored S and its band, the measured S,
    and where the measurement fell: "inside" the band (its edges included), "above" or "below" it."""
    out = []
    for r in report["rows"]:
        if r["measured_role"] != "held back":
            continue
        low, high = r["band"] if r["band"] else (r["speedup"], r["speedup"])
        where = "below" if r["measured"] < low else "above" if r["measured"] > high else "inside"
        out.append({"batch": r["batch"], "predicted": r["speedup"], "band": [low, high], "measured": r["measured"],
                    "where": where})
    return out


def held_back_text(report: dict) -> str:
    """The held-back comparison in one sentence per batch: "At B = 4 the anchored advisor says 0.62× (band
    0.53–0.88×); the engine measured 0.68×, inside the band." """
    said = []
    for h in held_back(report):
        where = "inside the band" if h["where"] == "inside" else f"{h['where']} the band"
        said.append(f"At B = {h['batch']} the anchored advisor says {h['predicted']:.2f}×, band {h['band'][0]:.2f}–"
                    f"{h['band'][1]:.2f}×; the engine measured {h['measured']:.2f}×, {where}.")
    return " ".join(said)


def anchor_text(dep: dict) -> str:
    """What the model is anchored on: the measured points, the level, and the model's S there before it."""
    a = dep["anchor"]
    said = ", ".join(f"S = {v:.2f} at B = {b}" for b, v in a["measured"])
    model = ", ".join(f"{m:.2f}" for m in a["model_at_measured"])
    held = ("; held back for comparison: " + ", ".join(f"{v:.2f} at B = {b}" for b, v in a["held_back"])
            if a["held_back"] else "")
    return (f"{said} ({a['source']}). The model says {model} there: your engine runs at ×{a['level']:.2f} its "
            f"level, and every S below is scaled by that{held}")


def recommendation(report: dict) -> str:
    """What to do, in short sentences chosen by the numbers: from the band's verdicts where there is a band
    (``verdict_batches``), else from the model's S alone; then the best k, extrapolation and the idealized
    model."""
    dep, ranges, fits = report["deployment"], report["paying_batches"], report["max_batch"]
    rows = [r for r in report["rows"] if r["fits"]]
    gpu_ = dep["gpu"]
    if fits == 0 and report["weights_per_gpu_GB"] > gpu_["memory_GB"]:
        return (f"It does not fit: the weights alone ({report['weights_per_gpu_GB']:.3g} GB per GPU) exceed the "
                f"{gpu_['name']}'s memory ({gpu_['memory_GB']:.3g} GB) with tp = {dep['tp']}. "
                "Use more GPUs (`--tp`), fewer weight bits (`--weight-bits`) or a smaller model.")
    if fits == 0:
        return (f"It does not fit: the weights fit ({report['weights_per_gpu_GB']:.3g} GB of "
                f"{gpu_['memory_GB']:.3g} GB per GPU with tp = {dep['tp']}), but not one sequence's KV caches at "
                f"L = {dep['context_tokens']} beside them. Use a shorter context (`--context`), more GPUs (`--tp`), "
                "or a smaller cache (a draft KV window, `--draft-context`; a smaller `--dtype`).")
    v = report["verdict_batches"]
    lo, hi = asked(report)  # every sentence speaks of the batches asked for that fit in memory
    if lo > hi:
        return f"None of the batches asked for fits in memory: at most B = {fits}. Ask about B = 1–{fits}."
    ranges = _clip(ranges, lo, hi)
    said = []
    if v is not None:
        on, off, unsure = (_clip(v[name], lo, hi) for name in ("pays", "loses", "uncertain"))
        if on:
            said.append(f"Turn it on for B = {_ranges_text(on)}, where the whole band is above 1.")
        if off:
            said.append(f"Leave it off for B = {_ranges_text(off)}, where the whole band is below 1.")
        if unsure:
            said.append(f"For B = {_ranges_text(unsure)} the band straddles 1: measure S there "
                        "(commands below) and anchor the advisor on it.")
    elif ranges:
        said.append(f"The model alone says S > 1 for B = {_ranges_text(ranges)} (of {lo}–{hi}).")
    else:
        said.append(f"The model alone says S ≤ 1 at every batch from {lo} to {hi}.")
    any_k = _clip(report["best_k_paying_batches"], lo, hi)
    if not ranges and any_k and not dep["tree"] and not dep["anchor"]:
        said.append(f"Another k does better: with the best k at each batch (`--k best`) the model has S > 1 for "
                    f"B = {_ranges_text(any_k)}.")
    elif not ranges and not dep["tree"] and dep["k"] != "best" and not dep["anchor"]:
        said.append("Raise α (a better-matched draft), or use a cheaper drafter.")
    rows = [r for r in rows if lo <= r["batch"] <= hi]
    bests = sorted({r["best_k"] for r in rows})
    if dep["k"] != "best" and not dep["tree"] and len(bests) > 1 and rows:
        last_k = f"{rows[-1]['best_k']}" + (" (off)" if rows[-1]["best_k"] == 0 else "")
        said.append(f"The best k moves from {rows[0]['best_k']} at B = {rows[0]['batch']} to {last_k} at "
                    f"B = {rows[-1]['batch']}: choose k by the batch (`--k best`).")
    fitted = dep["fitted_batch_max"]
    if fitted and hi > fitted:
        said.append(f"Past B = {fitted} this extrapolates: the calibration was fitted on batches up to {fitted}.")
    if _idealized(dep):
        said.append("This is the idealized model (no engine costs): engines run slower than it says.")
    elif dep["calibration"]:
        ideal = _clip(report["idealized_paying_batches"], lo, hi)
        said.append("The idealized roofline " + ("agrees on where S > 1." if ideal == ranges else
                    f"would have S > 1 for B = {_ranges_text(ideal)}." if ideal else
                    f"would have S ≤ 1 for every B from {lo} to {hi}."))
    return " ".join(said)


def asked(report: dict) -> tuple[int, int]:
    """The batches asked for that fit in memory: (lo, hi), with lo > hi when none fits."""
    lo, hi = report["deployment"]["batch"]
    return lo, (min(hi, report["limit"]) if report["max_batch"] else hi)


def _idealized(dep: dict) -> bool:
    k = dep["engine_knobs"]
    return not (k["overhead_ms"] or k["draft_overhead_ms"] or k["layer_overhead_us"] or dep["calibration"])


def checklist(report: dict) -> list[list[str]]:
    """The rows of book/quoting.md's checklist, filled in for this report."""
    dep, rows = report["deployment"], report["rows"]
    first = rows[0]
    knobs = dep["engine_knobs"]
    gpu_ = dep["gpu"]
    k = dep["k"]
    en = dep["expected_tokens"]
    weights = f"{dep['weight_bits']}-bit weights, " if dep["weight_bits"] else ""
    k_text = (f"a tree {dep['tree']}, {dep['verified']} tokens verified" if dep["tree"] else f"{k}"
              + ("" if dep["k_from"] == "given" else f" ({dep['k_from']})"))
    return [
        ["Drafted tokens k", k_text + (f", E[N] = {en:.2f} tokens per iteration" if en else
                                       f", searched 1–{K_MAX} per batch")],
        ["Acceptance α, and how it was measured", (f"{dep['alpha']:.3f}, " if dep["alpha"] is not None else "")
         + f"{dep['alpha_from']}" + ("" if dep["tree"] else "; i.i.d. acceptance")],
        ["Batch B", f"{dep['batch'][0]}–{dep['batch'][1]}" if dep["batch"][0] != dep["batch"][1] else
         f"{dep['batch'][0]}"],
        ["Context L", f"{dep['context_tokens']} tokens" + (f" (draft KV window {dep['draft_context_tokens']})"
                                                   if dep["draft_context_tokens"] is not None else "")],
        ["The draft, and c", f"{dep['draft']['name']}; c = {first['c']:.3f} at B = {first['batch']}, modelled"],
        ["Device", f"{gpu_['name']} × {dep['tp']}: {gpu_['peak_TFLOP_per_s']:.0f} TFLOP/s {dep['math_dtype']}, "
                   f"{gpu_['bandwidth_GB_per_s'] / 1e3:.2f} TB/s, ridge {gpu_['ridge_FLOP_per_byte']:.0f} FLOP/byte"],
        ["Dtype", f"{weights}{dep['math_dtype']} math, KV cache in {dep['math_dtype']}"
                  + (f" ({dep['dtype']} asked; this GPU has no {dep['dtype']} peak)"
                     if dep["dtype"] != dep["math_dtype"] else "")],
        ["Temperature", "not modelled: it enters through α, so measure α at the temperature you serve"],
        ["What was timed", "nothing: a modelled TPOT ratio at a fixed batch, equal to its throughput ratio; no "
                           "prefill"],
        ["Baseline", "the same deployment decoding without speculation, modelled"],
        ["Engine (overheads, CUDA graphs)", (f"{dep['calibration']}: " if dep["calibration"] else "")
         + f"{knobs['layer_overhead_us']:.3g} µs per layer of every pass, {knobs['overhead_ms']:.3g} ms per target "
           f"pass, {knobs['draft_overhead_ms']:.3g} ms per draft pass, overlap {knobs['overlap']!r}"
         + (" (idealized roofline)" if _idealized(dep) else "")],
        ["Error", "the band (**Band** above: held-out errors, leaving one source out, Chapter 6)" if dep["band"]
         else "not cross-validated: engine knobs set by hand"],
    ]


def quote(report: dict) -> str:
    """The checklist in one sentence, at the first batch of the report."""
    dep, r = report["deployment"], report["rows"][0]
    model = "the calibrated" if dep["calibration"] else "the idealized" if _idealized(dep) else "the"
    drafting = (f"a tree {dep['tree']} at {dep['expected_tokens']:.2f} tokens per iteration" if dep["tree"]
                else f"k = {r['k']} tokens at α = {dep['alpha']:.2f}")
    band = f", within a band of {r['band'][0]:.2f}–{r['band'][1]:.2f}×," if r["band"] else ""
    return (f"With {dep['draft']['name']} drafting {drafting}, "
            f"{dep['target']['name']} on {dep['tp']} × {dep['gpu']['name']} in {dep['math_dtype']} "
            f"at B = {r['batch']}, L = {dep['context_tokens']} is predicted by {model} roofline model to generate "
            f"{r['speedup']:.2f}×{band} as many tokens per second as without speculation. Temperature is not "
            "modelled.")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose columns line up in a terminal too."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def _k_cell(k: int) -> str:
    return f"{k}" if k else "0 (off)"


def _roof_text(roofs: dict) -> str:
    return "/".join("M" if v == "memory" else "C" for v in roofs.values()) or "—"


def s_note(report: dict) -> str:
    """What the key table's S, band and model columns are, as the band was built (``calibrate.BAND_BUILDS``)."""
    dep = report["deployment"]
    about, k = dep["band"], _k_short(report)
    if dep["anchor"]:
        return (f"S ({k}): the model's S anchored on your measurement, times the median error of the nearest "
                f"held-out anchored predictions; band: where the measured S lay for {about['nominal']:.0%} of them")
    if about.get("centre") == "model":
        said = f"S ({k}): the model's S, moved to the band's edge where the band excludes it"
    else:
        said = f"S ({k}): the central estimate, the model's S times the median error of the nearest held-out points"
    said += f"; band: where the measured S lay for {about['nominal']:.0%} of the nearest held-out points"
    said += ", widened to the spread between sources" if about.get("between") else ""
    return said + ("; model: the model's S alone" if _model_column(report) else "")


def _model_column(report: dict) -> bool:
    """Whether the key table shows the model's own S beside S: only where the two differ somewhere."""
    dep = report["deployment"]
    return bool(dep["band"]) and not dep["anchor"] and any(
        f"{r['speedup']:.2f}" != f"{r['model_speedup']:.2f}" for r in report["rows"])


def key_table(report: dict) -> str:
    """The batches, key columns first (fits a 100-column terminal and a phone): B, the verdict, S (the central
    estimate) and its band, and the model's own S."""
    dep = report["deployment"]
    best = dep["k"] == "best"
    s_name = "S"
    columns = [("B", lambda r: f"{r['batch']}" + ("" if r["fits"] else " (no fit)"))]
    if dep["band"]:  # a batch that does not fit in memory gets no verdict
        columns += [("verdict", lambda r: (r["verdict"] + ("*" if r["extrapolated"] else "")) if r["fits"] else "—"),
                    (s_name, lambda r: f"{r['speedup']:.2f}"),
                    ("band", lambda r: f"{r['band'][0]:.2f}–{r['band'][1]:.2f}")]
        if _model_column(report):  # anchored, the measured column takes its place (the model's S is in the text)
            columns.append(("model", lambda r: f"{r['model_speedup']:.2f}"))
    else:
        columns += [("S, model", lambda r: f"{r['speedup']:.2f}")]
    if best:
        columns.insert(2 if dep["band"] else 1, ("k", lambda r: f"{r['k']}"))
    if dep["anchor"]:
        columns.append(("measured", lambda r: "" if r["measured"] is None else
                        f"{r['measured']:.2f}" + (" (a)" if r["measured_role"] == "anchor" else " (h)")))
    return _table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in report["rows"]])


def detail_table(report: dict) -> str:
    """The model's terms per batch: the best k and its S, the idealized S, tokens per second off and on, the
    roofs of the decode, verify and draft passes."""
    dep = report["deployment"]
    columns = [("B", lambda r: r["batch"])]
    if not dep["tree"]:
        columns += [("best k", lambda r: _k_cell(r["best_k"])), ("S (best k)", lambda r: f"{r['best_speedup']:.2f}")]
    if dep["calibration"]:
        columns += [("S idealized", lambda r: f"{r['idealized_speedup']:.2f}")]
    columns += [("tokens/s off → on", lambda r: f"{r['plain_tokens_per_s']:,.0f} → {r['spec_tokens_per_s']:,.0f}"),
                ("roofs d · v · dr", lambda r: " · ".join(_roof_text(r["roofs"][name])
                                                          for name in ("decode", "verify", "draft")))]
    return _table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in report["rows"]])


def _params(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def memory_text(report: dict) -> str:
    dep, g = report["deployment"], report["deployment"]["gpu"]
    fits = report["max_batch"]
    weights = f"{report['weights_per_gpu_GB']:.3g} GB"
    if fits is None:
        return "the GPU has no memory size: batches are not limited"
    if report["weights_per_gpu_GB"] > g["memory_GB"]:
        return f"the weights alone ({weights} per GPU) exceed its {g['memory_GB']:.3g} GB"
    if fits == 0:
        return (f"the weights fit ({weights} of {g['memory_GB']:.3g} GB per GPU), but not one sequence's KV caches "
                f"at L = {dep['context_tokens']} beside them")
    return (f"at most B = {fits} sequences fit: weights and both KV caches at L = {dep['context_tokens']}, "
            f"{g['memory_GB']:.3g} GB per GPU, tp = {dep['tp']}")


def render(report: dict) -> str:
    """The report as Markdown that reads as plain text (the CLI wraps it at 100 columns, ``wrap``): the verdict
    and the band first, then what to do, where to measure, the table of batches, the deployment, the model's
    terms per batch, the quoting checklist, and notes on where the numbers come from."""
    dep = report["deployment"]
    t, d, g = dep["target"], dep["draft"], dep["gpu"]
    acceptance = (f"**tokens per iteration** = {dep['expected_tokens']:.2f} ({dep['alpha_from']}); **tree**: "
                  f"{dep['tree']}, {dep['verified']} verified" if dep["tree"] else
                  f"**α** = {dep['alpha']:.3f}, {dep['alpha_from']}; **k**: {dep['k']}"
                  + ("" if dep["k_from"] == "given" else f" ({dep['k_from']})"))
    commands = report["measure"]["commands"]
    lines = [
        f"**Does speculation pay? {t['name']} with {d['name']} on {g['name']}**",
        "",
        f"**{report['verdict_line']}** {report['band_line']}".rstrip(),
        "",
        f"**Recommendation.** {report['recommendation']}",
        "",
        *[f"**Warning.** {w}\n" for w in report["warnings"]],
        *(["**Measure it** at B = " + ", ".join(map(str, report["measure"]["batches"])) + ": your engine's address "
           "and model name for HOST:PORT and NAME, off, then on, then S(B), then the advisor anchored on it.", "",
           "```bash", *[x for c in commands for x in shell_lines(c)], "```", ""] if commands else []),
        key_table(report),
        "",
        (s_note(report) + ". * extrapolated past the fit."
         + (" Measured: (a) anchored on, (h) held back for comparison." if dep["anchor"] else "")
         if dep["band"] else "No band: the engine knobs were set by hand."),
        "",
        f"- **Target**: {t['name']}, {_params(t['params'])} matmul parameters; **draft**: {d['name']}, "
        f"priced as {d['maps_to']}",
        f"- **GPU**: {g['name']} × {dep['tp']}, {dep['math_dtype']}, ridge {g['ridge_FLOP_per_byte']:.0f} FLOP/byte; "
        f"**L** = {dep['context_tokens']}; {acceptance}",
        f"- **Model**: {dep['calibration_note']}.",
        f"- **Band**: {band_text(dep)}.",
        *([f"- **Anchored on**: {anchor_text(dep)}."] if dep["anchor"] else []),
        *([f"- **Extrapolates past its fit**: {'; '.join(dep['extrapolations'])}."] if dep["extrapolations"] else []),
        f"- **The model alone**: {where_it_pays(report)}.",
        f"- **Memory**: {memory_text(report)}.",
        "",
        "**The model's terms per batch.** Roofs: matmul/attention kernels of the decode, verify and draft passes "
        "(draft: its first pass; — = no weights), M = memory-bound, C = compute-bound. Tokens/s: the whole batch."
        + (" S idealized: without the engine's costs." if dep["calibration"] else ""),
        "",
        detail_table(report),
        "",
        "**How to quote this speedup**",
        "",
        *[f"- **{item}**: {value}" + ("" if value.endswith(".") else ".") for item, value in report["checklist"]],
        "",
        f"> {report['quote']}",
    ]
    if dep.get("provenance"):
        lines += ["", f"**Note.** {dep['provenance']}."]
    return "\n".join(lines)


def wrap(markdown: str, width: int = 100) -> str:
    """``render``'s Markdown for a terminal: paragraphs, list items and quotes wrapped at ``width`` columns
    (tables and code left as they are)."""
    import textwrap

    out, code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            code = not code
        if code or line.startswith("```") or line.startswith("|") or len(line) <= width:
            out.append(line)
            continue
        first, rest = ("- ", "  ") if line.startswith("- ") else ("> ", "> ") if line.startswith("> ") else ("", "")
        body = line[len(first):]
        out += textwrap.wrap(body, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
    return "\n".join(out)


def plot(report: dict, ax=None, title: str | None = None):
    """S(B) up to the memory limit: the central estimate with its band, the model's own S, where the band
    says it pays shaded, batches that do not fit greyed out. The title names the deployment, the legend
    what each mark is."""

    from specnotes import plots

    if ax is None:
        _, ax = plots.figure()
    dep = report["deployment"]
    curve = report["curve"]
    acceptance = (f"{dep['expected_tokens']:.2f} tokens/iteration" if dep["tree"] else f"α = {dep['alpha']:.2f}")
    drafter = dep["draft"]["name"] if dep["draft"]["kind"] == "model" else dep["draft"]["kind"]
    label = f"{_k_text(report)}, {acceptance}"
    batches = [c[0] for c in curve] or [1]
    model = [c[1] for c in curve] or [float("nan")]
    banded = dep["band"] is not None and bool(curve)
    centre = [c[1] * c[3] for c in curve] if banded else model
    moved = banded and any(abs(a - b) > 1e-9 for a, b in zip(centre, model, strict=True))
    lines = [(f"central estimate ({label})" if moved else label, batches, centre, "model")]
    if moved:
        lines.append(("before the band's correction", batches, model, "model"))
    ax = plots.speedup_vs_batch(ax, lines, bstar=None if report["crossover_batch"] in (None, 1)
                                else report["crossover_batch"],
                                title=title or f"{dep['target']['name']} + {drafter}, {dep['gpu']['name']} × "
                                               f"{dep['tp']}, {dep['math_dtype']}, L = {dep['context_tokens']}")
    if moved:
        ax.get_lines()[1].set_linestyle("--")
    if banded:
        ax.fill_between(batches, [c[1] * c[2] for c in curve], [c[1] * c[4] for c in curve], color="C0",
                        alpha=0.15, linewidth=0, label=f"band: {dep['band']['nominal']:.0%} of held-out errors")
    lo, hi = dep["batch"]
    right = hi if lo < hi else max(batches[-1], hi)
    v = report["verdict_batches"]
    pays = v["pays"] if v else report["paying_batches"]
    plots.shade_batches(ax, [(a, min(b, right)) for a, b in pays if a <= right],
                        "pays (band above 1)" if v else "the model's S > 1")
    fits = report["max_batch"]
    if fits is not None and fits < right:
        plots.shade_batches(ax, [(max(fits, 1), right)], "does not fit in memory", color="0.6")
    if lo == hi:
        ax.axvline(lo, color="0.2", linewidth=1, label=f"your batch B = {lo}")
    ax.legend(loc="lower left")
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
    if values.get("engine") not in (None, "not given"):
        argv += ["--engine", values["engine"]]
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

    values = {"target": "Llama-3.1-8B", "drafter": "model", "draft": "Llama-3.2-1B", "exit_layer": 8,
              "gpu": "H100-SXM", "dtype": "bf16", "tp": 1, "batch": "1-512", "context": 2048, "alpha": 0.7,
              "k": "4", "engine": "not given", "calibration": "auto", **(initial or {})}
    style, wide = {"description_width": "initial"}, w.Layout(width="260px")
    stored = sorted({n for a, names in _calibrate().calibrations().items() for n in names})
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
        "engine": w.Dropdown(options=["not given", *ENGINES], description="engine"),
        "calibration": w.Dropdown(options=["auto", "none", "pooled"] + stored, description="calibration"),
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
         "overhead": "--overhead-ms", "draft_overhead": "--draft-overhead-ms", "overlap": "--overlap",
         "layer_overhead": "--layer-overhead-us", "layers": "--exit-layer", "mean_tokens": "--mean-accepted",
         "plot": "--plot", "engine": "--engine", "engine_version": "--engine-version", "tree": "--tree",
         "verified": "--verified", "draft_vocab": "--draft-vocab", "measured": "--measured",
         "from_record": "--from-record", "record_batches": "--record-batches"}


def _alpha_arg(text) -> str:
    try:
        alpha_range(text)
    except validate.BadArgument as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("alpha ")) from None
    return text


def _batch_list(text) -> list[int]:
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"must be batches B[,B...] such as 1,2; got {text!r}")
    return [int(p) for p in parts]


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


class _Parser(argparse.ArgumentParser):
    """The CLI's parser: an error prints its message first and one line on where the options are, not the
    whole usage (exit status 2, as argparse)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n(python -m specnotes.advise --help lists every option)\n")


class _RaisingParser(argparse.ArgumentParser):
    """For ``run``: a command line that argparse rejects raises BadArgument instead of exiting."""

    def error(self, message):
        raise validate.BadArgument(message)


POSITIVE = validate.cli(validate.number, low=0, low_open=True)  # GB/s, TFLOP/s, GB
TOKENS = validate.cli(validate.integer, low=0)


def parser(cls=None) -> argparse.ArgumentParser:
    cls = cls or _Parser
    p = cls(prog="python -m specnotes.advise",
            description="Does speculative decoding pay for my deployment? A one-page report from the book's cost "
                        "model, with its cross-validated error.",
            epilog="Example: python -m specnotes.advise --target Llama-3.1-8B --drafter eagle3 --gpu H100-SXM "
                   "--engine vllm --batch 1-256 --context 1024 --mean-accepted 2.3 --k 3")
    presets = ", ".join(cost.PRESETS)
    m = p.add_argument_group("models")
    m.add_argument("--target", help=f"preset ({presets}) or a Hugging Face config.json path")
    m.add_argument("--target-shape", help="n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--draft", help="draft model for --drafter model: a preset or a config.json path")
    m.add_argument("--draft-shape", help="the draft as n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--drafter", default="model", help=f"one of {', '.join(DRAFTERS)} (default: model)")
    m.add_argument("--exit-layer", type=validate.cli(validate.integer, low=1),
                   help="early exit: the layer whose output drafts")
    m.add_argument("--draft-vocab", type=validate.cli(validate.integer, low=1),
                   help="eagle3: the head's draft vocabulary, tokens (default 32000, the published heads')")
    m.add_argument("--tree", help="a draft tree: tokens per sequence at each level, such as 1,4,4 (with "
                                  "--mean-accepted, no --k)")
    m.add_argument("--verified", type=validate.cli(validate.integer, low=1),
                   help="a tree's tokens verified per sequence (default: the sum of --tree)")
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
    w.add_argument("--context", type=validate.cli(validate.integer, low=0, high=MAX_CONTEXT),
                   help="context length L your requests decode at, tokens (required; a --from-record of llama-server "
                        "gives it)")
    w.add_argument("--draft-context", type=TOKENS, help="the draft's own KV length (a window), tokens")
    w.add_argument("--alpha", type=_alpha_arg, help="acceptance rate α in [0, 1], or a range LO-HI such as 0.5-0.8 "
                                                    "when you do not know it yet")
    w.add_argument("--mean-accepted", help="mean tokens per iteration (bonus included), measured at --k, or M@K")
    w.add_argument("--k", help=f"draft tokens per iteration, or 'best' (default {K_DEFAULT}, and the report says so)")
    m = p.add_argument_group("your measurement (anchors the model's level on it)")
    m.add_argument("--measured", metavar="B:S[,B:S...]",
                   help="S measured on your engine at batch B (TPOT off over on), such as 1:1.42,8:1.30; needs --k")
    m.add_argument("--from-record", metavar="FILE", help="a record of python -m specnotes.bench serve-speedup or "
                                                          "python -m specnotes.engine measure: its S(B), k, models and "
                                                          "device (a record that disagrees with the flags is refused)")
    m.add_argument("--record-batches", type=_batch_list, metavar="B[,B...]",
                   help="anchor on these of the record's batches only (the others are shown, held back)")
    c = p.add_argument_group("the engine")
    c.add_argument("--engine", help=f"the engine you serve with ({', '.join(ENGINES)} are in the published record; "
                                    "another gets the knobs pooled over them)")
    c.add_argument("--engine-version", help="its version, such as 0.10.1")
    c.add_argument("--calibration", default="auto",
                   help="auto (the engine's calibration on this GPU, or the nearest, saying which; default), none "
                        "(the idealized model), pooled, a stored calibration's name, or list")
    c.add_argument("--overhead-ms", "--overhead", dest="overhead", type=validate.cli(validate.number, low=0),
                   help="ms added to every target pass")
    c.add_argument("--draft-overhead-ms", "--draft-overhead", dest="draft_overhead",
                   type=validate.cli(validate.number, low=0), help="ms added to every draft pass (n-gram: per lookup)")
    c.add_argument("--layer-overhead-us", dest="layer_overhead", type=validate.cli(validate.number, low=0),
                   help="µs added per decoder layer of every pass")
    c.add_argument("--overlap", help=f"one of {', '.join(OVERLAPS)} (default kernel)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the report as JSON (schema in the module docstring)")
    o.add_argument("--plot", metavar="FILE.png", help="also draw S(B) with the paying range shaded")
    return p


# ---------------------------------------------------------------------------------------------- records


def _shipped_shapes() -> dict[str, ModelShape]:
    """The book's shipped pair as llama-server serves them (float32 GGUF): "specnotes-target", "specnotes-draft"
    (data/models.json's configurations; multi-head KV)."""
    from importlib import resources

    card = json.loads(resources.files("specnotes").joinpath("data", "models.json").read_text())
    return {f"specnotes-{w}": _fp32_shape(card[w]["config"], f"specnotes-{w}") for w in ("target", "draft")}


def _record_shape(c: dict, name: str) -> ModelShape:
    """A model's shape as a record writes it (``notes["target_config"]``: n_layers, d_model, n_heads, d_ff,
    vocab_size, and optionally n_kv_heads, weight_bytes, kv_bytes, compute)."""
    try:
        return ModelShape(int(c["n_layers"]), int(c["d_model"]), int(c["n_heads"]),
                          int(c.get("n_kv_heads") or c["n_heads"]), int(c["d_ff"]), int(c["vocab_size"]),
                          weight_bytes=float(c.get("weight_bytes", 4)), kv_bytes=float(c.get("kv_bytes", 4)),
                          compute=c.get("compute", "fp32"), name=name)
    except (KeyError, TypeError, ValueError) as err:
        raise validate.BadArgument(f"from_record: the record's config of {name!r} lacks {err}") from None


def _fp32_shape(c: dict, name: str) -> ModelShape:
    return ModelShape(c["n_layers"], c["d_model"], c["n_heads"], c["n_heads"], c["d_ff"], c["vocab_size"],
                      weight_bytes=4, kv_bytes=4, compute="fp32", name=name)


def _model_name(name) -> str:
    """A model's name as a record writes it, without folders, .gguf and a float-format suffix."""
    stem = Path(str(name)).name
    stem = re.sub(r"\.gguf$", "", stem, flags=re.I)
    return re.sub(r"[-_.](f32|f16|bf16|q\d\w*)$", "", stem, flags=re.I)


def _same_model(asked: str, recorded: str) -> bool:
    """Whether a model asked for (a preset's or config's name) is the one a record names: the asked name, in
    lower case without punctuation, inside the recorded one ("Llama-3.1-8B" is in
    "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")."""
    flat = lambda x: re.sub(r"[^a-z0-9]", "", str(x).lower())
    return flat(asked) in flat(recorded) or flat(recorded) in flat(asked)


def llama_server_record(kind: str = "shipped") -> Path:
    """The book's llama-server record of ``kind`` ("shipped": the shipped pair; "big"), as ``python -m
    specnotes.engine measure --record`` wrote it into data/reference/llama-server."""
    from importlib import resources

    folder = Path(str(resources.files("specnotes").joinpath("data", "reference", "llama-server")))
    found = sorted(folder.glob(f"{validate.choice('kind', kind, ('shipped', 'big'))}-*.json"))
    if not found:
        raise validate.BadArgument(f"no {kind}-*.json in {folder}")
    return found[0]


def _device_name(name) -> str | None:
    """A CPU's name as a record writes it, without trademark marks ("Intel(R) Xeon(R)" → "Intel Xeon")."""
    return None if name is None else re.sub(r"\s+", " ", re.sub(r"\((R|TM)\)", "", str(name), flags=re.I)).strip()


def read_record(path) -> dict:
    """The measurement in a record that ``python -m specnotes.bench serve-speedup`` or ``python -m
    specnotes.engine measure`` wrote (schema specnotes.results/1, section engine_speedup): S per concurrency
    (the median over the record's pairs of the engine's own TPOT ratio where it timed itself, else the
    client's), their quartiles, and what the record says of the deployment: k, the target and draft, the
    device (a CPU's measured roofs), the context and the acceptance specnotes measured."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise validate.BadArgument(f"from_record: cannot read {str(path)!r} as JSON ({type(err).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "specnotes.results/1" or not isinstance(
            doc.get("sections"), dict) or not doc["sections"].get("engine_speedup"):
        raise validate.BadArgument(f"from_record: {str(path)!r} is not an S(B) record (schema specnotes.results/1 with "
                                   "an engine_speedup section, as bench serve-speedup and engine measure write)")
    by: dict[int, list] = {}
    for r in doc["sections"]["engine_speedup"]:
        extra = r.get("extra", {})
        s = extra.get("speedup_engine_tpot", extra.get("speedup"))
        if s is not None:
            by.setdefault(int(r["params"]["concurrency"]), []).append(float(s))
    if not by:
        raise validate.BadArgument(f"from_record: {str(path)!r} holds no speedup")
    prov, notes = doc.get("provenance", {}), doc.get("notes", {})
    build = prov.get("engine_build") or {}
    labels = " ".join(str(x) for x in (prov.get("label"), (notes.get("on") or {}).get("label")) if x)
    k = notes.get("k", build.get("k"))
    if k is None and re.search(r"\bk\s*=\s*(\d+)", labels):
        k = int(re.search(r"\bk\s*=\s*(\d+)", labels).group(1))
    roofs = notes.get("roofs")
    params = doc["sections"]["engine_speedup"][0].get("params", {})
    context = None
    if "llama-server" in str(build.get("engine", "")) and "prompt_chars" in params and "max_tokens" in params:
        context = int(params["prompt_chars"]) + int(params["max_tokens"]) // 2  # one token per byte, mid-decode
    median = lambda xs: sorted(xs)[len(xs) // 2] if len(xs) % 2 else sum(sorted(xs)[len(xs) // 2 - 1:][:2]) / 2
    quart = lambda xs: (sorted(xs)[len(xs) // 4], sorted(xs)[(3 * len(xs)) // 4]) if len(xs) > 1 else (xs[0], xs[0])
    big = notes.get("big_config")
    return {"path": str(path), "speedups": {b: median(v) for b, v in sorted(by.items())},
            "quartiles": {b: quart(v) for b, v in sorted(by.items())}, "pairs": {b: len(v) for b, v in by.items()},
            "k": int(k) if k is not None else None, "model": build.get("model") or prov.get("engine_model"),
            "draft": build.get("draft"),
            "device": _device_name(build.get("cpu") or prov.get("host")) if roofs else None,
            "roofs": roofs, "gpu": build.get("gpu") or prov.get("gpu"), "context": context,
            "alpha": (notes.get("specnotes_acceptance") or {}).get("alpha"), "engine": build.get("engine"),
            "big_config": big, "configs": {w: notes.get(f"{w}_config") for w in ("target", "draft")}}


def record_inputs(rec: dict, given: dict, use=None) -> dict:
    """``deployment`` arguments from a record (``read_record``) merged with the ones given on the command line
    (``given``: deployment's keyword arguments, None where not given): what the record says fills what is not
    given, and a record that disagrees with what is given (the model, the draft, k, the GPU) is refused, saying
    both. ``use``: the batches of the record to anchor on (default: all); the others are held back."""
    out = dict(given)
    where = rec["path"]
    names = {**_shipped_shapes()}
    if rec.get("big_config"):
        c = rec["big_config"]
        names[_model_name(rec["model"])] = _fp32_shape({**c, "vocab_size": c.get("vocab_size", 256)},
                                                       _model_name(rec["model"]))
    for which in ("target", "draft"):
        recorded = rec["model"] if which == "target" else rec["draft"]
        if recorded is None:
            continue
        asked = given.get(which)
        shape_given = given.get(f"{which}_shape") is not None
        if asked is None and not shape_given:
            name = _model_name(recorded)
            config = (rec.get("configs") or {}).get(which)
            if name not in names and config:  # a GGUF pair of the reader's own: the record says its shape
                names[name] = _record_shape(config, name)
            if name not in names:
                raise validate.BadArgument(f"{which}: the record {where} ran {recorded!r}, which is no preset: give "
                                           f"--{which} (a preset or a config.json) or --{which}-shape")
            out[which] = names[name]
        elif asked is not None and not _same_model(getattr(asked, "name", asked), _model_name(recorded)):
            raise validate.BadArgument(f"{which} {getattr(asked, 'name', asked)!r} disagrees with the record {where}, "
                                       f"which ran {recorded!r}: drop --{which} or pass a record of this model")
    if rec["k"] is not None:
        if given.get("k") is not None and str(given["k"]).strip() != str(rec["k"]):
            raise validate.BadArgument(f"k {given['k']} disagrees with the record {where}, which ran k = {rec['k']}: "
                                       "drop --k or pass a record measured at this k")
        out["k"] = str(rec["k"])
    if rec["roofs"]:
        if given.get("gpu_name") is not None:
            roofs = rec["roofs"]
            raise validate.BadArgument(
                f"gpu {given['gpu_name']} disagrees with the record {where}, which was measured on "
                f"{rec['device'] or 'a CPU'} (its roofs: {roofs['bandwidth'] / 1e9:.1f} GB/s, "
                f"{roofs['flops'] / 1e9:.0f} GFLOP/s): drop --gpu (the record's roofs are used) or pass a record "
                "measured on that GPU")
        if given.get("bandwidth") is None and given.get("peak") is None:
            out["bandwidth"], out["peak"] = rec["roofs"]["bandwidth"] / 1e9, rec["roofs"]["flops"] / 1e12
            out["dtype"] = rec["roofs"].get("dtype", "fp32") if given.get("dtype") in (None, "bf16") else given["dtype"]
            out["device_label"] = f"{rec['device'] or 'the recording CPU'} (roofs measured by the record)"
    elif rec["gpu"] and given.get("gpu_name") and not _same_model(given["gpu_name"], rec["gpu"]):
        raise validate.BadArgument(f"gpu {given['gpu_name']} disagrees with the record {where}, which was measured on "
                                   f"{rec['gpu']}: pass --gpu {rec['gpu']} or a record measured on {given['gpu_name']}")
    if given.get("context") is None and rec["context"] is not None:
        out["context"] = rec["context"]
    if given.get("alpha") is None and given.get("mean_accepted") is None and rec["alpha"] is not None:
        out["alpha"] = rec["alpha"]
        out["alpha_note"] = "from the record: specnotes' own decoder on the engine's prompts, at temperature 0"
    use = sorted(rec["speedups"]) if use is None else use
    missing = [b for b in use if b not in rec["speedups"]]
    if missing:
        raise validate.BadArgument(f"record_batches: the record {where} has no B = {', '.join(map(str, missing))}; it "
                                   f"has {', '.join(map(str, rec['speedups']))}")
    points = [(b, rec["speedups"][b]) for b in use]
    out["measured"] = list(points) + [tuple(p) for p in measured_points(given["measured"])] \
        if given.get("measured") else points
    out["held_back"] = tuple((b, s) for b, s in rec["speedups"].items() if b not in use)
    out["quartiles"] = rec["quartiles"]
    out["measured_from"] = f"the record {Path(where).name}"
    return out


def from_args(args: argparse.Namespace, calibration_lookup=None) -> Deployment:
    kwargs = deployment_kwargs(args, calibration_lookup)
    if args.from_record:
        use = None if args.record_batches is None else [int(b) for b in args.record_batches]
        kwargs = record_inputs(read_record(args.from_record), kwargs, use)
    return deployment(**kwargs)


def deployment_kwargs(args: argparse.Namespace, calibration_lookup=None) -> dict:
    """``deployment``'s keyword arguments from the parsed command line."""
    return dict(target=args.target, draft=args.draft, target_shape=args.target_shape, draft_shape=args.draft_shape,
                drafter_kind=args.drafter, exit_layer=args.exit_layer, gpu_name=args.gpu, bandwidth=args.bandwidth,
                peak=args.peak, memory=args.memory, link=args.link, dtype=args.dtype, weight_bits=args.weight_bits,
                tp=args.tp, batch=args.batch, context=args.context, draft_context=args.draft_context,
                alpha=args.alpha, mean_accepted=args.mean_accepted, k=args.k, calibration=args.calibration,
                overhead=args.overhead, draft_overhead=args.draft_overhead, overlap=args.overlap,
                calibration_lookup=calibration_lookup, engine=args.engine, engine_version=args.engine_version,
                layer_overhead=args.layer_overhead, tree=args.tree, verified=args.verified,
                draft_vocab=args.draft_vocab, measured=args.measured)


def run(argv: list[str], calibration_lookup=None, progress: bool | None = False) -> dict:
    """The report for a command line (what the page's presets call): errors are ``validate.BadArgument``
    with the flag's name."""
    args = parser(_RaisingParser).parse_args(argv)
    try:
        return advise(from_args(args, calibration_lookup), progress, argv)
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
    """Every stored calibration: GPU, name, engine and version, what it was fitted to, its knobs; and the
    pooled knobs (any GPU)."""
    stored = _calibrate().stored()
    out = [{"gpu": accel, "name": name, "engine": r["engine"], "version": r["version"], "fitted_to": r["fitted_to"],
            "knobs": cost.calibration(accel, name)}
           for accel, names in stored.items() if accel in hardware.ACCELERATORS
           for name, r in names.items() if "alias_of" not in r]
    out += [{"gpu": accel, "name": name, "engine": None, "version": None, "alias_of": r["alias_of"],
             "knobs": cost.calibration(accel, name)}
            for accel, names in stored.items() if accel in hardware.ACCELERATORS
            for name, r in names.items() if "alias_of" in r]
    return out + [{"gpu": "any", "name": "pooled", "engine": "every engine in the record", "version": None,
                   "fitted_to": stored["pooled"]["fitted_to"], "knobs": stored["pooled"]["knobs"]}]


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.calibration == "list":
        listing = calibration_listing()
        if args.json:
            print(json.dumps({"schema": f"{SCHEMA}/calibrations", "calibrations": listing}, indent=2))
        for c in [] if args.json else listing:
            what = (f"= {c['alias_of']}" if "alias_of" in c else
                    f"{c['engine']} {c['version'] or ''}: B {c['fitted_to']['batch'][0]}–{c['fitted_to']['batch'][1]}, "
                    f"{', '.join(c['fitted_to']['drafters'])}, {', '.join(c['fitted_to']['targets'])}")
            print(f"{c['gpu']:10} {c['name']:18} {what}")
        return 0
    if args.target is None and args.target_shape is None and args.from_record is None:
        p.error(f"--target is required: one of {', '.join(cost.PRESETS)}, a config.json path, or --target-shape")
    try:
        plot_file = plot_path(args.plot) if args.plot else None
        report = advise(from_args(args), progress=None, argv=argv if argv is not None else sys.argv[1:])
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
    print(json.dumps(report, indent=2) if args.json else wrap(render(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
