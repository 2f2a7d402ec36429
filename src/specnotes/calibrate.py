"""Calibrations: the cost model's engine knobs, fitted to the published record and judged out of sample
(Chapter 6).

The idealized model (``cost``, per-kernel roofline, no overhead) gets the shape of S(B) roughly right and
its level wrong. A real engine adds fixed costs to every pass and every layer (launches, the small kernels
each layer runs, scheduling, the Python between draft steps), and does not hide a GEMM's math under its
weight reads at the sizes decode runs. A *calibration* is the set of ``cost`` keyword arguments that
describes one engine (name and version) on one GPU.

1. ``record()``: every published series of S against the batch (or the requests a closed loop keeps in
   flight, ``LOADS``) that the model can represent, as ``Case`` s (shapes, accelerator, batch, k or tree,
   acceptance, context, tp, engine), and the series it cannot represent with every rule each fails
   (``SKIP_KINDS``, ``skip_summary``). The rules: ``_load_rule`` (a batch, or a closed loop's requests in
   flight; not an open loop, a per-rank count or a throughput counting prompt tokens), ``shape`` and
   ``SHAPE_ALIASES``, ``_draft`` (``UNPRICED_DRAFTERS`` says which it cannot price), ``point_draft`` (each
   point's own k or tree), ``assumed_gpu`` (an "H100" without its form factor priced as the SXM part, marked
   ``gpu_assumed``). Each point takes its own published acceptance length where it has one. Where a source
   publishes no acceptance, the series is *anchored*: its acceptance is the one that makes the model
   reproduce the series' smallest batch, and that point is not scored (a user who measured S at one batch
   asks the model about the others). MoE targets' engines are families of their own (``MOE_APART``).
2. ``VARIANTS``: the model variants (idealized; the first, 2-knob calibration as it was stored; candidate
   terms), each a set of engine knobs fitted *jointly over every series of an engine* by
   ``fit_engines``: least squares on log S, one set of knobs per (engine, version, GPU), shrunk toward the
   engine family's and then toward the pooled knobs of every engine (so an engine seen on two points
   borrows from the rest, and an engine never seen gets the pooled knobs).
3. ``cross_validate``: leave one series out, and leave one source out; per variant the median
   |log(predicted/measured)|, the signed bias, the verdict agreement on S > 1 and the worst point.
   ``python -m specnotes.calibrate --cv`` prints it.
4. The advisor's bands (issue 34): ``batch_band``, the held-out errors of the points predicted from their
   acceptance alone as a function of the batch (``Band``: the central share of the nearest errors in log B,
   widened to the sources' spread, centred on the model's S; ``BAND_BUILDS``), judged per batch bucket on
   sources it was not built from (``band_table``, ``verdict_of``) and per family (``family_table``);
   ``anchor_band``, predictions of one batch of a series from another (``anchor_pairs``, ``anchor_table``);
   ``judge_band``, issue 34's goals. ``term_search``: candidate costs that grow with the batch or that only a
   MoE layer pays, kept only by the rule ``keeps``.
5. ``write_calibrations``: the chosen variant fitted to the whole record, stored in
   ``data/calibrations.json`` with each engine's identity, what it was fitted to, and the cross-validated
   error and the advisor's bands; ``cost.calibration(accelerator, name)`` reads it.

``fit`` (one set of knobs to a handful of points, every overlap mode tried) stays: it is how a reader
calibrates their own engine in Chapter 6, Problem 3.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import numpy as np

from specnotes import cost, published, validate
from specnotes.hardware import ACCELERATORS, Accelerator

KNOBS = ("overhead", "draft_overhead", "allreduce_latency", "layer_overhead")  # what a stored calibration holds
FIT_KNOBS = ("overhead", "draft_overhead", "allreduce_latency")  # what ``fit`` fits

# Shapes of the models the published record uses (config.json of each on the Hugging Face hub): every preset of
# the cost model (``cost.PRESETS``, the mixtures of experts included) and two the record adds.
LLAMA_31_8B = cost.LLAMA_3_1_8B  # same architecture as Llama-3-8B
LLAMA_2_7B = cost.ModelShape(32, 4096, 32, 32, 11008, 32000, name="Llama-2-7B-32K")  # multi-head KV
TINYLLAMA = cost.ModelShape(22, 2048, 32, 4, 5632, 32000, name="TinyLlama-1.1B")
QWEN3_8B = cost.QWEN3_8B
# EAGLE-3's draft for Llama-3.1-8B: one Llama decoder layer whose QKV reads [embedding; feature], an fc from
# the three fused target features, and a 32k-token draft LM head (vLLM's llama_eagle3.py; cost.EagleHead).
EAGLE3_LLAMA31_8B = cost.EAGLE3_LLAMA_3_1_8B
EAGLE3_QWEN3_8B = cost.EAGLE3_QWEN3_8B
SHAPES = {**cost.PRESETS, **{s.name: s for s in (LLAMA_2_7B, TINYLLAMA)}}
# Names the record uses for a model whose config has exactly a known shape's fields (layers, widths, heads, KV
# heads, MLP, vocabulary): the same matmuls and the same cache, so the same costs. Each with why.
SHAPE_ALIASES = {
    "Llama-2-7B-chat": ("Llama-2-7B-32K", "meta-llama/Llama-2-7b-chat-hf: 32 layers, 4096 wide, 32 heads and "
                                          "32 KV heads, MLP 11008, 32,000 tokens, as Llama-2-7B-32K"),
    "Vicuna-7B-v1.3": ("Llama-2-7B-32K", "lmsys/vicuna-7b-v1.3, a LLaMA-7B fine-tune: the same fields"),
    "Llama-3.3-70B": ("Llama-3.1-70B", "the Llama 3.1 70B architecture and config"),
}
EAGLE3_HEADS = {LLAMA_31_8B.name: EAGLE3_LLAMA31_8B, QWEN3_8B.name: EAGLE3_QWEN3_8B,
                cost.LLAMA_3_1_70B.name: cost.EAGLE3_LLAMA_3_1_70B, cost.QWEN3_32B.name: cost.EAGLE3_QWEN3_32B}

# The calibration the book stored before the cross-validation (issue 24): two knobs fitted to the four points
# of SpecDecode-Bench Fig. 1(c), with EAGLE heads priced as one-layer models; ``VARIANTS`` keeps it as it was.
FIRST_CALIBRATION = {"overlap": "none", "overhead": 0.00321, "draft_overhead": 0.0005259}
ALLREDUCE_LATENCY = 10e-6  # vLLM's custom all-reduce, small messages, H100 (interconnect.json)


def shape(name) -> cost.ModelShape:
    """The cost model's shape for a target or draft the record names: a preset, one of the record's own
    (``SHAPES``), or an alias of one (``SHAPE_ALIASES``: the same config fields, priced the same, named as the
    record names it). Anything else: an ``Unpriceable`` of kind "shape"."""
    if name in SHAPES:
        return SHAPES[name]
    if name in SHAPE_ALIASES:
        return replace(SHAPES[SHAPE_ALIASES[name][0]], name=name)
    raise Unpriceable("shape", f"no shape for {name!r} (not a preset of the cost model, nor one of the record's "
                               "own, calibrate.SHAPES and SHAPE_ALIASES)")


class Unpriceable(validate.BadArgument):
    """Why the cost model cannot price a published series, with ``kind``: the rule it fails (``SKIP_KINDS``)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = validate.choice("kind", kind, SKIP_KINDS)


# Why a series stays out of the record, as the record summary counts them.
SKIP_KINDS = {
    "no GPU": "the GPU is not published",
    "GPU not in the table": "the GPU is not in hardware.ACCELERATORS",
    "parallel layout": "how the model is split over its GPUs is not published or not modelled",
    "shape": "the target has no shape in the cost model",
    "drafter": "the drafter has no shape in the cost model",
    "n-gram": "an n-gram drafter drafts only where the prompt matches",
    "drafted tokens": "the number of drafted tokens or the tree's shape is not published",
    "acceptance": "no acceptance is published and no other batch of the series can anchor it",
    "context": "the context is only bounded below",
    "not a decode speedup": "the speedup is against an arrival rate, or counts the prompts' tokens",
    "not a speedup": "the series is not a speedup against the batch",
}


# ---------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One published point as the model sees it, with the measured speedup.

    A chain drafts ``k`` tokens at acceptance ``alpha``; ``tokens`` (mean tokens per iteration, bonus
    included) replaces α where a source publishes that instead, and a tree drafts ``widths[i]`` tokens per
    sequence at level i and verifies ``k`` of them. The record adds where the point comes from (``source``,
    ``series``), the engine that measured it (``engine``, ``version``) and whether its acceptance is
    ``anchored`` to the series' smallest batch (then ``alpha`` and ``tokens`` are None). ``load``: "batch" where
    the source fixed the batch, "concurrency" where a closed loop kept ``batch`` requests in flight (``LOADS``).
    ``gpu_assumed``: what the record assumed of a GPU the source named without its form factor (None: the GPU
    is as published)."""

    label: str
    target: cost.ModelShape
    draft: cost.Draft
    accel: str | Accelerator
    batch: int
    k: int
    alpha: float | None
    context: int
    draft_context: int | None
    tp: int
    measured: float
    tokens: float | None = None
    widths: tuple[int, ...] | None = None
    source: str = ""
    series: str = ""
    engine: str = ""
    version: str | None = None
    anchored: bool = False
    load: str = "batch"
    gpu_assumed: str | None = None

    def ratio(self, **knobs) -> float:
        """T_plain / T_iter: S per token of E[N] (``speedup`` = E[N] · ratio)."""
        widths = self.widths or (1,) * self.k
        return cost.tree_speedup(self.target, self.draft, self.accel, self.batch, widths, self.k, 1.0,
                                 self.context, draft_context=self.draft_context, tp=self.tp, **knobs)

    def expected(self) -> float:
        """E[N]: the published tokens per iteration, or the one α gives."""
        if self.tokens is not None:
            return self.tokens
        if self.alpha is None:
            raise validate.BadArgument(f"{self.series} {self.label}: its acceptance is anchored; use "
                                       "calibrate.predict, which takes it from the series' smallest batch")
        return cost.expected_tokens(self.alpha, self.k)

    def speedup(self, **knobs) -> float:
        if self.widths is None and self.tokens is None and self.alpha is not None:
            return cost.batch_speedup(self.target, self.draft, self.accel, self.batch, self.k, self.alpha,
                                      self.context, draft_context=self.draft_context, tp=self.tp, **knobs)
        return self.expected() * self.ratio(**knobs)

    @property
    def key(self) -> tuple[str, str | None, str]:
        """The calibration's identity: engine, version, GPU."""
        return self.engine, self.version, getattr(self.accel, "name", self.accel)

    @property
    def moe(self) -> bool:
        """Whether the target is a mixture of experts (``cost.MoEShape``)."""
        return isinstance(self.target, cost.MoEShape)


def magicdec_alpha(context: int) -> float:
    """MagicDec's published acceptance rate (Llama-3.1-8B self-speculation, StreamingLLM budget 512) at
    ``context`` tokens, interpolated linearly between the table's columns (24,000 has no column)."""
    table = published.load("magicdec")["acceptance_llama31_budget512"]
    xs, ys = table.column("context"), table.column("alpha")
    context = validate.number("context", context, low=xs[0], high=xs[-1])
    return float(np.interp(context, xs, ys))


def dense_layer_of(target: cost.ModelShape) -> cost.ModelShape:
    """The dense decoder of ``target``'s width: a MoE's attention with one MLP of its config's
    ``intermediate_size`` (``d_ff``), as the EAGLE-3 heads trained for MoE targets are built (SpecForge's
    configs/qwen3-30B-eagle3.json, commit d1be954: a Llama layer, hidden 2048, 32 heads, 4 KV heads, head_dim 128,
    intermediate 6144, the target's ``intermediate_size``). A dense target is returned as it is."""
    if not isinstance(target, cost.MoEShape):
        return target
    if target.mla:
        raise Unpriceable("drafter", f"an EAGLE head for {target.name}, whose attention is latent (MLA), is not "
                                     "in the record: its layer's shape is not known")
    return cost.ModelShape(target.n_layers, target.d_model, target.n_heads, target.n_kv_heads, target.d_ff,
                           target.vocab, target.weight_bytes, target.kv_bytes, target.name, target.compute,
                           target.tied_embeddings, target.head_dim)


# The drafters of the record the cost model cannot price, and why.
UNPRICED_DRAFTERS = {
    "medusa": "Medusa heads: cost.Heads prices k heads with their own weights, but one head (a d×d residual block "
              "and its own d×V LM head) is not a decoder layer, so not a ModelShape",
    "dspark": "the DSpark speculator (a block drafter conditioned on target features): its architecture is not in "
              "the record",
    "eagle2-head": None,  # EAGLE-2 runs EAGLE-1's head in a dynamic tree: priced as eagle-head (below)
}


def _draft(setup: dict, target: cost.ModelShape):
    """The cost model's drafter for a published setup, or an ``Unpriceable`` saying why there is none.

    ``self-speculation``: the target itself; ``draft-model``: the named shape; ``eagle3-head``: the published
    EAGLE-3 head of the target where the record knows it (``EAGLE3_HEADS``), else ``cost.eagle3_head`` over the
    target's dense layer (``dense_layer_of``); ``eagle-head`` and ``eagle2-head`` (EAGLE-1's head, which EAGLE-2
    runs in a dynamic tree): ``cost.eagle_head``; ``mtp``: ``cost.mtp_head``, one more layer of the target's own
    kind; ``ngram``: ``cost.NGRAM``. Medusa and DSpark: ``UNPRICED_DRAFTERS``."""
    kind = setup.get("drafter")
    if kind == "self-speculation":
        return target
    if kind == "eagle3-head":
        return EAGLE3_HEADS.get(target.name) or cost.eagle3_head(dense_layer_of(target))
    if kind in ("eagle-head", "eagle2-head"):
        return cost.eagle_head(dense_layer_of(target))
    if kind == "mtp":
        return cost.mtp_head(target)
    if kind == "draft-model" and (setup.get("draft") in SHAPES or setup.get("draft") in SHAPE_ALIASES):
        return shape(setup["draft"])
    if kind == "ngram":
        return cost.NGRAM
    if UNPRICED_DRAFTERS.get(kind):
        raise Unpriceable("drafter", f"no draft shape for {UNPRICED_DRAFTERS[kind]}")
    raise Unpriceable("drafter", f"no draft shape for drafter {kind!r} (draft {setup.get('draft')!r}) on "
                                 f"{target.name}")


# Per-point columns of a SGLang-style draft tree: its depth, the candidates kept per level, and the tokens one
# verify pass scores per sequence (the root included, so k = num_draft_tokens − 1).
TREE_COLUMNS = ("num_steps", "topk", "num_draft_tokens")


def _widths(setup: dict) -> tuple[int, ...] | None:
    if (setup.get("verification") or ("tree" if setup.get("tree") else "chain")) != "tree":
        return None
    depth, branching = setup.get("tree_depth"), setup.get("tree_branching")
    if not isinstance(depth, int) or not isinstance(branching, int):
        raise Unpriceable("drafted tokens", "a tree whose depth and branching are not published")
    return (1,) + (branching,) * (depth - 1)


def point_draft(setup: dict, point: dict) -> tuple[int, tuple[int, ...] | None]:
    """(k, tree widths or None) of one published point: from its SGLang tree columns (``TREE_COLUMNS``: topk 1
    is a chain of num_steps tokens, whatever num_draft_tokens says, as SGLang runs it; topk > 1 a tree of levels
    (1, topk, ..., topk) whose verify pass scores num_draft_tokens − 1 drafted tokens), else its ``k`` column,
    else the setup's k and tree."""
    if all(c in point for c in TREE_COLUMNS):
        steps, topk, verified = (validate.integer(c, point[c], low=1) for c in TREE_COLUMNS)
        if topk == 1:  # SGLang sets num_draft_tokens = num_steps + 1 for a chain, whatever was asked
            return steps, None
        return verified - 1, (1,) + (topk,) * (steps - 1)
    widths = _widths(setup)
    k = point.get("k", setup.get("k"))
    if not isinstance(k, int) or isinstance(k, bool):
        raise Unpriceable("drafted tokens", "the number of drafted tokens (or the tree's shape) is not published")
    return k, widths


# How a source set the batch: "batch" (fixed by the benchmark), "concurrency" (a closed loop: C clients, each
# sending its next request when the last completes). A closed loop keeps at most C sequences in the engine; in
# steady state a slot spends part of each request prefilling (and in the queue), so the decode batch averages
# somewhat below C, the more so the longer the prompts and the shorter the answers. Prefill chunks run inside
# the decode steps of both runs, lengthening them alike; the speculative run decodes each request in fewer
# steps, so prefill is a larger share of its time and the measured S understates the decode S by about that
# share. An open loop ("qps") sets an arrival rate: its batch is whatever the engine's speed makes it.
LOADS = ("batch", "concurrency")


def cases(source: str, series: str, alpha=None, context: int | None = None,
          draft_context: int | None = None) -> list[Case]:
    """The points of ``published.load(source)[series]`` as model inputs.

    α: ``alpha`` (a number, or a function of the context) if given, else the point's ``mean_acceptance_length``
    (tokens per iteration, bonus included), else the setup's ``alpha``, else the setup's
    ``tokens_per_iteration`` (as ``tokens``, and as the α whose E[N] it is for a chain). Batch: the ``batch``
    column, else a closed loop's ``concurrency`` (``LOADS``). Context: a ``context`` column if the points have
    one, else ``context``, else the middle of the setup's range (the mean context while decoding, when the range
    runs from prompt to prompt + output). k and the tree per point (``point_draft``). ``draft_context``: the
    draft's own KV length, default the setup's (the top of a range).
    """
    return _cases(source, published.load(source)[series], None, alpha, context, draft_context)


def _cases(source: str, s, setup: dict | None, alpha=None, context: int | None = None,
           draft_context: int | None = None) -> list[Case]:
    """``cases`` of the series ``s`` of ``source``, with ``setup`` in place of its own (None: its own)."""
    setup = s.setup if setup is None else setup
    series = s.id
    target = shape(setup.get("target"))
    draft = _draft(setup, target)
    if draft_context is None and isinstance(setup.get("draft_context"), int | list):
        draft_context = int(s.bounds("draft_context")[1])
    engine, version = engine_id(setup)
    if MOE_APART and isinstance(target, cost.MoEShape):
        engine += MOE_SUFFIX
    load = "batch" if "batch" in s.columns else "concurrency"
    out = []
    for p in s.points:
        k, widths = point_draft(setup, p)
        ctx = int(p["context"]) if "context" in p else context
        if ctx is None:
            lo, hi = s.bounds("context")
            ctx = round((lo + hi) / 2)
        tokens = None
        if alpha is not None:
            a = alpha(ctx) if callable(alpha) else validate.probability("alpha", alpha)
        elif (p.get("mean_acceptance_length") is not None or setup.get("tokens_per_iteration") is not None) and not (
                p.get("mean_acceptance_length") is None and isinstance(setup.get("alpha"), float)):
            tokens = float(p.get("mean_acceptance_length") or setup["tokens_per_iteration"])
            if tokens > k + 1 + 1e-9:
                raise validate.BadArgument(f"{series}: {tokens:g} tokens per iteration from {k} drafted tokens")
            a = cost.implied_alpha(tokens, k) if widths is None else None
        elif isinstance(setup.get("alpha"), float):
            a = setup["alpha"]
        else:
            raise Unpriceable("acceptance", f"{series} publishes neither alpha nor tokens per iteration: pass alpha=")
        label = ", ".join(f"{c}={p[c]:g}" for c in s.columns if c in ("context", "batch", "concurrency", "k",
                                                                        *TREE_COLUMNS))
        out.append(Case(label, target, draft, setup["accelerator"], int(p[load]), k, a, ctx, draft_context,
                        int(setup.get("tp", 1)), float(p["speedup"]), tokens if widths else None, widths, source,
                        series, engine, version, load=load))
    return out


def predict(cases_: list[Case], **knobs) -> list[float]:
    """The model's S for each case with these ``cost`` keyword arguments (overlap, overheads, ...). An anchored
    case takes its acceptance from its group's smallest batch (``anchors``), which must be among ``cases_``."""
    cases_ = list(cases_)
    if not any(c.anchored for c in cases_):
        return [c.speedup(**knobs) for c in cases_]
    ratios = [c.ratio(**knobs) for c in cases_]
    anchor = anchors(cases_)
    return [cases_[a].measured * r / ratios[a] if c.anchored else c.expected() * r
            for c, r, a in zip(cases_, ratios, anchor, strict=True)]


def anchors(cases_: list[Case]) -> list[int]:
    """For each case, the index of the case whose measured S fixes its acceptance: for an anchored case the
    smallest batch of its series at the same k (and tree); for any other case itself."""
    groups: dict = {}
    for i, c in enumerate(cases_):
        if c.anchored:
            groups.setdefault((c.source, c.series, c.k, c.widths), []).append(i)
    out = list(range(len(cases_)))
    for members in groups.values():
        first = min(members, key=lambda i: (cases_[i].batch, i))
        for i in members:
            out[i] = first
    return out


def residuals(cases_: list[Case], **knobs) -> list[float]:
    """model / measured − 1 for each case."""
    return [row["residual"] for row in compare(cases_, **knobs)]


def compare(cases_: list[Case], **knobs) -> list[dict]:
    """One row per case: the point, the measured S, the model's S with these knobs, the residual."""
    return [{"point": c.label, "measured": c.measured, "model": m, "residual": m / c.measured - 1}
            for c, m in zip(cases_, predict(cases_, **knobs), strict=True)]


def vary(cases_: list[Case], **changes) -> list[Case]:
    """The same cases with some inputs changed (``vary(cases, draft_context=None)``: the draft reads the
    whole cache; ``vary(cases, tp=1)``; ``vary(cases, accel=derated("A100-80GB", 0.5))``)."""
    fields_ = {f.name for f in dataclasses.fields(Case)} - {"label", "measured"}
    for name in changes:
        validate.choice("input to vary", name, sorted(fields_))
    return [replace(c, **changes) for c in cases_]


def curve(case: Case, batches, **knobs) -> list[float]:
    """The model's S(B) over ``batches`` for the setup of ``case`` (everything but the batch kept; an
    anchored case needs its E[N]: use ``replace(case, tokens=..., anchored=False)``)."""
    return [replace(case, batch=validate.integer("batch", b, low=1)).speedup(**knobs) for b in batches]


def derated(accel, efficiency: float):
    """``accel`` with every FLOP/s peak multiplied by ``efficiency`` (achieved / datasheet): a what-if
    for GEMMs and attention that run below peak. Not a calibration knob of ``cost``."""
    accel = cost.accelerator(accel)
    efficiency = validate.number("efficiency", efficiency, low=0, high=1, low_open=True)
    return replace(accel, name=f"{accel.name} at {efficiency:.0%} of peak",
                   peak_flops={k: v * efficiency for k, v in accel.peak_flops.items()})


def efficiency_scan(cases_: list[Case], efficiencies, **fit_kwargs) -> list[dict]:
    """Refit ``cases_`` with the accelerator's peaks scaled by each efficiency: how much of a residual a
    compute shortfall explains. One row per efficiency: the knobs fitted and the rms log error."""
    rows = []
    for e in efficiencies:
        f = fit([replace(c, accel=derated(c.accel, e)) for c in cases_], **fit_kwargs)
        rows.append({"efficiency": e, "rms_log": f.rms_log, **f.knobs})
    return rows


def tree_speedup(target: cost.ModelShape, draft, accel, batch: int, depth: int, branching: int,
                 verified: int, tokens: float, context: int = 0, tp: int = 1, overlap: str = "kernel",
                 overhead: float = 0.0, draft_overhead: float | None = None, allreduce_latency: float = 0.0,
                 layer_overhead: float = 0.0) -> float:
    """S of tree speculation: ``depth`` draft levels (the first over 1 token per sequence, the others over
    ``branching`` candidates), then one target pass over the ``verified`` tree tokens plus the bonus
    position, yielding ``tokens`` per iteration on average (published; no i.i.d. α for a tree):
    ``cost.tree_speedup`` with widths (1, branching, ..., branching). A chain is ``branching=1,
    verified=depth``: then this is ``cost.batch_speedup`` at the α with E[N] = tokens.
    """
    depth = validate.integer("depth", depth, low=1)
    branching = validate.integer("branching", branching, low=1)
    return cost.tree_speedup(target, draft, accel, batch, (1,) + (branching,) * (depth - 1), verified, tokens,
                             context, tp=tp, overlap=overlap, overhead=overhead, draft_overhead=draft_overhead,
                             allreduce_latency=allreduce_latency, layer_overhead=layer_overhead)


def predictor_pass_time(batch: int, new_tokens: int, context: int) -> float:
    """A target pass as SpecDecode-Bench's own fitted H100 model prices it (simulator ``predictor.py``):
    c_kv·(cached tokens in the batch) + c_compute·(tokens processed) + c_fixed, plus the per-step overhead
    the simulator adds to every engine step. Seconds; B sequences × n new tokens after L cached ones."""
    batch = validate.integer("batch", batch, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    context = validate.integer("context", context, low=0)
    v = published.load("specdecode_bench")["predictor_llama8b_h100"].values
    return (v["target_c_kv"] * batch * context + v["target_c_compute"] * batch * new_tokens + v["target_c_fixed"]
            + v["overhead_constant_per_step"])


# ---------------------------------------------------------------------------------------------- the record

# Where a source gives no context for a series, the same source's context for the same dataset (its
# traces), else this many tokens: chat prompts plus a few hundred tokens of output, the middle of a decode.
DEFAULT_CONTEXT = 512
_VERSION = re.compile(r"\d+(\.\d+)+(\.?post\d+)?")


def engine_id(setup: dict) -> tuple[str, str | None]:
    """(engine family, version) of a published setup: ("vllm", "0.10.1"), ("sglang", "0.5.9"), ("magicdec",
    None). The family is the engine's first word, lower case; the version only where one is published."""
    words = re.findall(r"[A-Za-z][A-Za-z0-9.-]*", str(setup.get("engine") or "unknown"))
    version = setup.get("engine_version")
    version = version if isinstance(version, str) and _VERSION.fullmatch(version) else None
    return words[0].lower() if words else "unknown", version


# An engine serving a mixture of experts runs other kernels in every layer than it does for a dense target (the
# router, the top-k, the token alignment, the grouped expert GEMMs), so its knobs are fitted as an engine family
# of their own ("sglang-moe"), tied to the others only through the pooled knobs. Held out, this beats sharing the
# dense family's knobs on every regime (``moe_apart_table``, Chapter 6).
MOE_APART = True
MOE_SUFFIX = "-moe"


def calibration_name(engine: str, version: str | None) -> str:
    """The name a calibration is stored under: "vllm-0.10.1", or the family alone without a version."""
    return f"{engine}-{version}" if version else engine


@dataclass(frozen=True)
class Record:
    """The published record as the model sees it: ``cases`` (every point of every series it can
    represent), ``skipped`` ({"source/series": why the model cannot represent it}) and ``kinds`` (the rules of
    ``SKIP_KINDS`` each skipped series fails)."""

    cases: tuple[Case, ...]
    skipped: dict
    kinds: dict = dataclasses.field(default_factory=dict)  # {"source/series": [the rules it fails]}

    @property
    def anchor(self) -> np.ndarray:
        return np.array(anchors(list(self.cases)))

    @property
    def scored(self) -> np.ndarray:
        """The points a prediction is judged on: all but the anchors of anchored series."""
        return np.array([not (c.anchored and a == i) for i, (c, a) in enumerate(zip(self.cases, self.anchor,
                                                                                   strict=True))])

    def series(self) -> list[str]:
        return list(dict.fromkeys(f"{c.source}/{c.series}" for c in self.cases))


def _dataset_contexts(source) -> dict:
    """{dataset: middle context} for the series of a source that publish a context range."""
    out = {}
    for s in source.series:
        if isinstance(s.setup.get("context"), list) and s.setup.get("dataset"):
            lo, hi = s.bounds("context")
            out.setdefault(s.setup["dataset"], round((lo + hi) / 2))
    return out


# A GPU a source names without its form factor: the record's older series price a bare "H100" as the SXM part
# (eagle3_2025 "1x H100", vllm_pr16937 "H100", sglang_pr2150 "a single H100"); a series whose accelerator the
# record leaves null only for want of the form factor is priced so too, marked ``gpu_assumed``, and its error
# is reported apart (``FAMILIES``). A series that names no GPU at all stays out.
FORM_FACTORS = {"H100": ("H100-SXM", "H100-PCIe")}
ASSUME_FORM_FACTOR = True
# Targets the cost model cannot price although their config is public, and why.
UNPRICED_TARGETS = {
    "Qwen3.8-27B": "48 of its 64 layers are linear attention (Gated DeltaNet), which the cost model does not "
                   "price: each sequence carries a recurrent state of 48 heads × 128 × 128 values in each such "
                   "layer, about 75 MB in bf16, read and written by every pass (at B = 128, about 10 GB each way, "
                   "beside 54 GB of weights), and a verify pass keeps one state per drafted token to roll back",
}


def assumed_gpu(setup: dict, missing: dict) -> tuple[str, str] | None:
    """(accelerator, what was assumed) for a series whose GPU the source names without its form factor
    (``FORM_FACTORS``: a bare "H100" priced as the SXM part, as the record's older series are), or None."""
    text = f"{setup.get('accelerator_text') or ''} {missing.get('accelerator', '')}"
    if setup.get("accelerator") is not None or "form factor" not in missing.get("accelerator", ""):
        return None
    for family, (chosen, other) in FORM_FACTORS.items():
        if re.search(rf"\b{family}\b", text):
            bw = lambda name: ACCELERATORS[name].mem_bandwidth / 1e12
            return chosen, (f"'{family}' without its form factor, priced as the {chosen} ({bw(chosen):.2f} TB/s; "
                            f"the {other} has {bw(other):.2f} TB/s)")
    return None


def _load_rule(s) -> str:
    """"batch" or "concurrency" (``LOADS``) for a series whose S the model can take as a decode speedup at a
    batch, else an ``Unpriceable``: an open loop (speedups at an arrival rate), a closed loop counted per
    data-parallel rank, or a throughput that counts the prompts' tokens."""
    setup = s.setup
    if "batch" in s.columns:
        return "batch"
    if "concurrency" in s.columns:
        if "per rank" in str(setup.get("concurrency_unit") or ""):
            raise Unpriceable("parallel layout", "requests in flight per data-parallel attention rank, with the "
                                                 "experts spread over the ranks: a layout the cost model does not "
                                                 "split (it knows tensor parallelism only)")
        if re.search(r"\binput\b|\bprompt", str(setup.get("metric") or "")):
            raise Unpriceable("not a decode speedup", "a throughput that counts the prompts' tokens: its ratio "
                                                      "times prefill as much as decode")
        return "concurrency"
    if "qps" in s.columns:
        raise Unpriceable("not a decode speedup", "latencies at an arrival rate (an open loop): the batch is "
                                                  "whatever the engine's speed makes it")
    raise Unpriceable("not a speedup", "not a speedup against the batch size or the requests in flight")


def _said(why: str | None) -> str:
    """" (why)" where the record says more than that a value is not published or stated."""
    plain = re.fullmatch(r"\s*(not (published|stated)\.?)?\s*", why or "")
    return "" if plain else f" ({why})"


def _checks(source, s) -> list:
    """Every rule the series must pass (``SKIP_KINDS``), in order, each a function raising ``Unpriceable``."""
    setup = s.setup

    def target():
        if setup.get("target") in UNPRICED_TARGETS:
            raise Unpriceable("shape", f"no shape for the target {setup['target']!r}: "
                                       f"{UNPRICED_TARGETS[setup['target']]}")
        shape(setup.get("target"))

    def ngram():
        if setup.get("drafter") == "ngram":
            raise Unpriceable("n-gram", "an n-gram drafter proposes only where the prompt matches (vLLM's "
                                        "NgramProposer returns no draft otherwise), so how many tokens each verify "
                                        "pass scores is not published")

    def drafter():
        if setup.get("target") in SHAPES or setup.get("target") in SHAPE_ALIASES:
            _draft(setup, shape(setup["target"]))

    def gpu():
        accel = setup.get("accelerator")
        if accel is None and not (ASSUME_FORM_FACTOR and assumed_gpu(setup, s.missing)):
            raise Unpriceable("no GPU", "the GPU is not published" + _said(s.missing.get("accelerator")))
        if accel is not None and accel not in ACCELERATORS:
            raise Unpriceable("GPU not in the table", f"the GPU {accel!r} is not in hardware.ACCELERATORS")

    def layout():
        if setup.get("tp") is None:
            raise Unpriceable("parallel layout",
                              "the tensor-parallel split is not published" + _said(s.missing.get("tp")))

    def drafted():
        for p in s.points:
            point_draft(setup, p)

    def context():
        if not (isinstance(setup.get("context"), list) or "context" in s.columns) and re.search(
                r">\s*\d+\s*k", s.missing.get("context", "")):
            raise Unpriceable("context", f"its context is only bounded below ({s.missing['context']}): the KV reads "
                                         "need it")

    return [lambda: _load_rule(s), target, ngram, drafter, gpu, layout, drafted, context]


def _series_cases(source, s) -> list[Case]:
    """The cases of one series of the record, or an ``Unpriceable`` naming every rule it fails (its ``kind``: the
    first; ``kinds``: all of them)."""
    setup = s.setup
    failed = []
    for check in _checks(source, s):
        try:
            check()
        except Unpriceable as err:
            failed.append(err)
    if failed:
        err = Unpriceable(failed[0].kind, "; ".join(dict.fromkeys(str(e) for e in failed)))
        err.kinds = list(dict.fromkeys(e.kind for e in failed))
        raise err
    load = _load_rule(s)
    assumed = assumed_gpu(setup, s.missing) if setup.get("accelerator") is None else None
    if isinstance(setup.get("context"), list) or "context" in s.columns:
        context = None
    else:
        context = _dataset_contexts(source).get(setup.get("dataset"), DEFAULT_CONTEXT)
    alpha = magicdec_alpha if (source.name == "magicdec" and setup.get("target") == "Llama-3.1-8B") else None
    per_point = "mean_acceptance_length" in s.columns and all(p.get("mean_acceptance_length") for p in s.points)
    published_acceptance = (alpha is not None or per_point or isinstance(setup.get("alpha"), float)
                            or setup.get("tokens_per_iteration") is not None)
    mark = lambda cs: [replace(c, load=load, accel=assumed[0], gpu_assumed=assumed[1]) if assumed
                       else replace(c, load=load) for c in cs]
    if assumed:
        setup = {**setup, "accelerator": assumed[0]}
    if published_acceptance:
        return mark(_cases(source.name, s, setup, alpha=alpha, context=context))
    out = [replace(c, anchored=True, alpha=None) for c in _cases(source.name, s, setup, alpha=0.5, context=context)]
    groups = {}
    for c in out:
        groups.setdefault((c.k, c.widths), []).append(c)
    out = [c for members in groups.values() if len({m.batch for m in members}) > 1 for c in members]
    if not out:
        err = Unpriceable("acceptance", "no acceptance is published and no two batch sizes share a k, so no point "
                                        "can be predicted from another")
        err.kinds = ["acceptance"]
        raise err
    return mark(out)


def series_cases(source: str | None, series) -> list[Case]:
    """The cases of one published ``series`` of ``source`` (a name of ``published.names()``, or None for a
    series of no recorded source), as ``record`` admits them, or an ``Unpriceable`` naming every rule it fails."""
    from types import SimpleNamespace

    known = published.load(source) if source in published.names() else None
    return _series_cases(SimpleNamespace(name=source or "", series=known.series if known else (series,)), series)


@cache
def record() -> Record:
    """Every series of the published record with S against the batch (or the requests in flight of a closed
    loop, ``LOADS``) that the model can represent (see the module docstring), and the others with the reasons:
    ``skipped`` {series: why}, ``kinds`` {series: the rules it fails, ``SKIP_KINDS``}."""
    out, skipped, kinds = [], {}, {}
    for name in published.names():
        source = published.load(name)
        for s in source.series:
            if s.values is not None or not ({"speedup", "latency_sd"} & set(s.columns)):
                continue  # constants or other measurements, not S
            try:
                out += _series_cases(source, s)
            except Unpriceable as err:
                skipped[f"{name}/{s.id}"] = str(err)
                kinds[f"{name}/{s.id}"] = getattr(err, "kinds", [err.kind])
    return Record(tuple(out), skipped, kinds)


def skip_summary(rec: Record | None = None) -> list[dict]:
    """What keeps series out of the record, one row per rule (``SKIP_KINDS``) that keeps any out: the series and
    points it fails, and how many of them fail it alone (the rule to lift to admit them)."""
    rec = rec or record()
    rows = []
    for kind, what in SKIP_KINDS.items():
        hit = [key for key, ks in rec.kinds.items() if kind in ks]
        if not hit:
            continue
        alone = [key for key in hit if rec.kinds[key] == [kind]]
        npoints = lambda keys: sum(len(published.load(k.split("/")[0])[k.split("/")[1]].points) for k in keys)
        rows.append({"rule": kind, "what": what, "series": len(hit), "points": npoints(hit),
                     "alone series": len(alone), "alone points": npoints(alone), "alone": alone})
    return rows


# ---------------------------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    """A version of the model: how a pass combines its kernels' memory and compute times (``overlap``:
    "kernel", "none", or "knee": (m^p + c^p)^(1/p) per kernel with p fitted), which engine knobs are fitted
    (``free``, seconds), and the drafter's structure (``heads``: "eagle" prices an EAGLE head as
    ``cost.EagleHead``; "one-layer" as the one-layer model the first calibration used). ``stored``: the
    first calibration's knobs as they were, not refitted; ``fitted_on``: the record's source they were fitted
    to, so that its rows say "not held out"."""

    name: str
    what: str
    overlap: str = "none"
    free: tuple[str, ...] = ()
    heads: str = "eagle"
    stored: dict | None = None
    fitted_on: str | None = None  # the record's source a stored variant was fitted to: it is never held out
    tiles: tuple[int, ...] = ()  # GEMM row tiles to try (``Features.base``); () prices every row exactly


VARIANTS = {v.name: v for v in (
    Variant("idealized", "per-kernel roofline, no overhead", "kernel"),
    Variant("first calibration", "2 knobs fitted to the 4 points of SpecDecode-Bench Fig. 1(c), as stored before",
            "none", heads="one-layer", stored=FIRST_CALIBRATION, fitted_on="specdecode_bench"),
    Variant("2 knobs per engine", "no overlap, a fixed time per target and per draft pass, per engine", "none",
            ("overhead", "draft_overhead")),
    Variant("soft knee", "2 knobs per engine and a GEMM knee (m^p + c^p)^(1/p), p fitted", "knee",
            ("overhead", "draft_overhead")),
    Variant("per-token cost", "2 knobs per engine and a time per token each target pass scores", "none",
            ("overhead", "draft_overhead", "token_overhead")),
    Variant("per-layer cost", "no overlap, a time per decoder layer of every pass and per draft pass, per engine",
            "none", ("draft_overhead", "layer_overhead")),
    Variant("per-layer cost, overlapped", "the same with each kernel's memory and compute overlapped", "kernel",
            ("draft_overhead", "layer_overhead")),
    Variant("+ GEMM tiles", "per-layer cost, and each GEMM's math priced in row tiles of 16 to 128 (tile fitted)",
            "none", ("draft_overhead", "layer_overhead"), tiles=(16, 32, 64, 128)),
    Variant("+ per-verified-token cost", "per-layer cost, and a time per drafted token the verify pass scores",
            "none", ("draft_overhead", "layer_overhead", "spec_token_overhead")),
    Variant("+ per-sequence cost", "per-layer cost, and a time per sequence in every pass (scheduling)", "none",
            ("draft_overhead", "layer_overhead", "seq_overhead")),
    Variant("+ per-MoE-layer cost", "per-layer cost, and a time per MoE layer of every pass (router, top-k, "
            "token alignment, grouped-GEMM launches)", "none", ("draft_overhead", "layer_overhead",
                                                                 "moe_layer_overhead")),
    Variant("+ per-expert cost", "per-layer cost, and a time per distinct expert a MoE layer touches (each "
            "touched expert's GEMM runs a few rows padded to its tile)", "none",
            ("draft_overhead", "layer_overhead", "expert_overhead")),
)}
CHOSEN = "per-layer cost"  # the variant the stored calibrations use: the best by leave-one-source-out (--cv)
SHRINK = 0.1  # weight of the pull toward the family's and the pooled knobs (log-knob units)
KNEES = (1.0, 2.0, 4.0, math.inf)  # the p the soft knee may take (1: memory plus compute; inf: the larger)
LINEAR = ("overhead", "draft_overhead", "layer_overhead", "token_overhead", "allreduce_latency", "seq_overhead",
          "spec_token_overhead", "moe_layer_overhead", "expert_overhead")
_INIT = {"overhead": 1e-3, "draft_overhead": 5e-4, "layer_overhead": 3e-5, "token_overhead": 2e-6,
         "seq_overhead": 5e-6, "spec_token_overhead": 2e-6, "moe_layer_overhead": 2e-5, "expert_overhead": 2e-7}
COST_KNOBS = ("overhead", "draft_overhead", "layer_overhead", "allreduce_latency")  # what cost's time functions take
MATMULS = ("matmul", "lm head", "heads")  # the kernels whose rows a GEMM tile rounds up


def as_first_calibration(c: Case) -> Case:
    """The case with an EAGLE head priced as the first calibration priced it: one layer of the target's shape
    with the head's vocabulary, k one-token passes (no fc, no wide QKV, no first pass over k + 1 tokens)."""
    if isinstance(c.draft, cost.EagleHead):
        return replace(c, draft=replace(c.draft.layer, tied_embeddings=False))
    return c


class Features:
    """The record's passes as arrays, so that every variant's S is a few numpy operations.

    Every pass of every case (the plain decode pass, and the verify and draft passes of an iteration) is
    ``cost.target_pass`` / ``cost.draft_passes``, the passes ``cost`` itself prices; per kernel, its
    memory and compute seconds at the datasheet roofs; per pass, its link seconds and the pass's share of
    each linear knob (``LINEAR``: 1 for a target or a draft pass, its layers, its tokens, its all-reduces).
    ``times`` adds them up as ``cost`` does (a test compares the two)."""

    def __init__(self, cases_, heads: str = "eagle"):
        self.cases = [(as_first_calibration(c) if heads == "one-layer" else c) for c in cases_]
        mem, comp, kpass, link, lin, pcase, pplain, rows = [], [], [], [], [], [], [], []
        for i, c in enumerate(self.cases):
            accel = cost.accelerator(c.accel)
            widths = c.widths or (1,) * c.k
            dctx = c.context if c.draft_context is None else c.draft_context
            passes = ([cost.target_pass(c.target, c.batch, 1, c.context, c.tp)],
                      [cost.target_pass(c.target, c.batch, c.k + 1, c.context, c.tp)]
                      + cost.draft_passes(c.draft, c.batch, c.k, dctx, c.tp, c.target, widths))
            moe = ([_moe_counts(c.target, c.batch)],
                   [_moe_counts(c.target, c.batch * (c.k + 1))] + _draft_moe_counts(c.draft, c.batch, widths))
            for plain, (group, moe_group) in enumerate(zip(passes[::-1], moe[::-1], strict=True)):
                for p, (moe_layers, experts) in zip(group, moe_group, strict=True):
                    w = _weight_bytes(c, p)
                    n = len(pcase)
                    peak = accel.peak(cost._math_dtype(accel, p.dtype, p.compute)) if p.kernels else 1.0
                    parts = [k for k in p.kernels if k.flops or k.bytes]
                    mem += [k.bytes / accel.mem_bandwidth for k in parts]
                    comp += [k.flops / peak for k in parts]
                    rows += [k.flops * w / (2 * k.bytes) if k.name in MATMULS and k.bytes else 0.0 for k in parts]
                    kpass += [n] * len(parts)
                    links = sum(k.link_bytes for k in p.kernels)
                    link.append(links / (accel.link_bandwidth / 2) if links else 0.0)
                    tokens = c.batch * (1 if plain else c.k + 1)
                    lin.append([0.0 if p.draft else 1.0, 1.0 if p.draft else 0.0, float(p.layers),
                                0.0 if p.draft else float(tokens), float(sum(k.calls for k in p.kernels)),
                                float(c.batch), 0.0 if (p.draft or plain) else float(c.batch * c.k),
                                float(moe_layers), float(experts)])
                    pcase.append(i)
                    pplain.append(bool(plain))
        self.mem, self.comp, self.kpass = np.array(mem), np.array(comp), np.array(kpass)
        self.rows = np.array(rows)
        self.link, self.lin = np.array(link), np.array(lin)
        self.pcase, self.pplain = np.array(pcase), np.array(pplain)
        self.n = len(self.cases)
        self.measured = np.array([c.measured for c in self.cases])
        self.tokens = np.array([np.nan if c.anchored else c.expected() for c in self.cases])
        self.anchor = np.array(anchors(self.cases))
        self.anchored = np.array([c.anchored for c in self.cases])
        # per case: the linear features of its plain pass and of its iteration
        self.lin_plain = self._per_case(self.lin, True)
        self.lin_iter = self._per_case(self.lin, False)
        self._base = {}

    def _per_case(self, values, plain: bool) -> np.ndarray:
        sel = self.pplain == plain
        out = np.zeros((self.n,) + values.shape[1:])
        np.add.at(out, self.pcase[sel], values[sel])
        return out

    def base(self, knee: float, tile: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(T_plain, T_iter) with every linear knob at 0: kernels combined with exponent ``knee`` (1: memory
        plus compute, "none"; inf: the larger, "kernel"), plus the link time. ``tile``: a GEMM computes its
        rows in tiles of this many, so its math costs ceil(M / tile)·tile rows (``gemm_rows``)."""
        if (knee, tile) not in self._base:
            rows = np.where(self.rows > 0, self.rows, 1)
            comp = self.comp * np.where(self.rows > 0, gemm_rows(rows, tile) / rows, 1.0) if tile else self.comp
            big, small = np.maximum(self.mem, comp), np.minimum(self.mem, comp)
            if knee == math.inf:
                per_kernel = big
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    per_kernel = np.where(big > 0, big * (1 + (small / np.where(big > 0, big, 1)) ** knee)
                                          ** (1 / knee), 0.0)
            per_pass = np.bincount(self.kpass, per_kernel, minlength=len(self.pcase)) + self.link
            self._base[(knee, tile)] = (self._per_case(per_pass, True), self._per_case(per_pass, False))
        return self._base[(knee, tile)]

    def times(self, knee: float, x: np.ndarray, tile: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(T_plain, T_iter) per case; ``x`` [cases, LINEAR]: each case's linear knobs in seconds."""
        plain0, iter0 = self.base(knee, tile)
        return plain0 + (self.lin_plain * x).sum(1), iter0 + (self.lin_iter * x).sum(1)

    def ratio(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """T_plain / T_iter per case: S per token of E[N]."""
        plain, it = self.times(knee, x, tile)
        return plain / it

    def predict(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """S per case: E[N]·T_plain/T_iter, an anchored case scaled from its anchor's measured S."""
        plain, it = self.times(knee, x, tile)
        ratio = plain / it
        return np.where(self.anchored, self.measured[self.anchor] * ratio / ratio[self.anchor], self.tokens * ratio)

    def gradient(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """d log S / d x_j per case [cases, LINEAR] (an anchored case: its own minus its anchor's)."""
        plain, it = self.times(knee, x, tile)
        g = self.lin_plain / plain[:, None] - self.lin_iter / it[:, None]
        return np.where(self.anchored[:, None], g - g[self.anchor], g)


def _moe_counts(shape, tokens: int) -> tuple[float, float]:
    """(MoE layers, distinct experts touched summed over them) of a pass of ``shape`` over ``tokens`` tokens:
    (0, 0) for a dense shape; E[D](T) per layer under independent routing (``cost.expected_experts``)."""
    if not isinstance(shape, cost.MoEShape):
        return 0.0, 0.0
    return float(shape.moe_layers), shape.moe_layers * cost.expected_experts(shape.n_experts, shape.experts_per_token,
                                                                             tokens)


def _draft_moe_counts(draft, batch: int, widths) -> list[tuple[float, float]]:
    """``_moe_counts`` of each draft pass (``cost.draft_passes``' order): an EAGLE or MTP head's first pass runs
    every verified token, its later ones a level's width; a draft model a level's width; others are dense."""
    if isinstance(draft, cost.NoWeights):
        return [(0.0, 0.0)]
    if isinstance(draft, cost.EagleHead):
        return [_moe_counts(draft.layer, batch * ((len(widths) + 1) if i == 0 else w)) for i, w in enumerate(widths)]
    if isinstance(draft, cost.ModelShape):
        return [_moe_counts(draft, batch * w) for w in widths]
    return [(0.0, 0.0)] * (1 if isinstance(draft, cost.SinglePass | cost.Heads) else len(widths))


def gemm_rows(rows, tile: int | None):
    """The rows a GEMM of ``rows`` rows computes when its kernel tiles M by ``tile`` (None: exactly ``rows``)."""
    rows = np.asarray(rows, float)
    return rows if not tile else np.ceil(rows / tile) * tile


def _weight_bytes(c: Case, p) -> float:
    """Bytes per weight of the model a pass of case ``c`` runs (the target's, or the draft's)."""
    if not p.draft:
        return c.target.weight_bytes
    d = c.draft
    shape = d.layer if isinstance(d, cost.EagleHead) else getattr(d, "shape", d)
    return getattr(shape, "weight_bytes", c.target.weight_bytes)


def priceable(variant: str) -> bool:
    """Whether ``cost``'s time functions can price a variant: its free knobs are ``cost``'s, it combines a
    kernel's times as ``cost`` does (no soft knee) and prices GEMM rows exactly (no tiles)."""
    v = VARIANTS[variant]
    return set(v.free) <= set(COST_KNOBS) and v.overlap != "knee" and not v.tiles


def _knee_of(v: Variant) -> list[float]:
    return list(KNEES) if v.overlap == "knee" else [1.0 if v.overlap == "none" else math.inf]


def _knobs_of(v: Variant, knee: float, x: dict) -> dict:
    """``cost`` keyword arguments of a variant's fitted linear knobs (the soft knee has no ``cost`` form)."""
    overlap = {1.0: "none", math.inf: "kernel"}.get(knee, f"knee p={knee:g}")
    out = {"overlap": overlap}
    for name in LINEAR:
        if name in COST_KNOBS or name in v.free:  # a term cost has no knob for stays in the CV
            out[name] = float(x.get(name, 0.0))
    return out


# ---------------------------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class EngineFit:
    """A variant fitted to a set of cases: log-knobs pooled over every engine, and the deviations of each
    engine family and each (engine, version, GPU) from them. ``knobs(key)`` gives the ``cost`` keyword
    arguments for an engine, with how they were found (its own fit, its family's, or the pooled ones)."""

    variant: Variant
    knee: float
    pooled: dict
    families: dict
    keys: dict
    sse: float
    n: int
    tile: int | None = None  # the GEMM row tile the fit chose (``Variant.tiles``), None: exact rows

    def log_knobs(self, key) -> tuple[dict, str]:
        engine = key[0]
        if key in self.keys:
            how = "fitted to this engine on this GPU"
        elif engine in self.families:
            how = f"{engine} fitted on other versions or GPUs"
        else:
            how = "no fit for this engine: pooled over every engine"
        fam, own = self.families.get(engine, {}), self.keys.get(key, {})
        return {j: self.pooled[j] + fam.get(j, 0.0) + own.get(j, 0.0) for j in self.pooled}, how

    def knobs(self, key) -> tuple[dict, str]:
        if self.variant.stored is not None:
            return dict(self.variant.stored), "as stored"
        if not self.variant.free:
            return {}, "no engine knobs"
        logs, how = self.log_knobs(key)
        x = {j: math.exp(v) for j, v in logs.items()}
        if self.variant.free:
            x["allreduce_latency"] = ALLREDUCE_LATENCY
        knobs = _knobs_of(self.variant, self.knee, x)
        if self.tile:
            knobs["gemm_tile"] = self.tile
        return knobs, how


def _x(fit_: EngineFit, cases_) -> np.ndarray:
    """[cases, LINEAR] knob values for each case's engine."""
    rows = []
    for c in cases_:
        knobs = fit_.knobs(c.key)[0]
        rows.append([knobs.get(j, 0.0) for j in LINEAR])
    return np.array(rows)


def _lm(residual, theta, iterations: int = 100):
    """Levenberg-Marquardt on residual(θ) -> (r, J); deterministic."""
    r, jac = residual(theta)
    f, lam = r @ r, 1e-3
    for _ in range(iterations):
        g, h = jac.T @ r, jac.T @ jac
        for _ in range(30):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            r2, jac2 = residual(theta + step)
            f2 = r2 @ r2
            if np.isfinite(f2) and f2 <= f:
                break
            lam *= 4
        else:
            return theta, f
        done = f - f2 <= 1e-7 * (1 + f)
        theta, r, jac, f, lam = theta + step, r2, jac2, f2, max(lam / 4, 1e-12)
        if done:
            break
    return theta, f


def fit_engines(variant: str | Variant, cases_=None, train=None, features: Features | None = None,
                shrink: float = SHRINK) -> EngineFit:
    """Fit a variant's engine knobs to ``cases_`` (default: the whole record; ``train``: the indices used):
    least squares on log S over the scored points, every series of an engine at once, plus
    ``shrink``·(deviation)² for each family's and each engine's log-knobs away from the pooled ones."""
    v = VARIANTS[variant] if isinstance(variant, str) else variant
    if features is None:
        rec = record() if cases_ is None else None
        features = Features(rec.cases if rec else cases_, v.heads)
    cs = features.cases
    train = np.arange(features.n) if train is None else np.asarray(train)
    scored = train[np.array([not (cs[i].anchored and features.anchor[i] == i) for i in train], bool)]
    if v.stored is not None or not v.free:
        knobs = dict(v.stored or {})
        return EngineFit(v, 1.0 if knobs.get("overlap") == "none" else math.inf, {}, {}, {}, 0.0, len(scored))
    keys = sorted({cs[i].key for i in train}, key=str)
    families = sorted({k[0] for k in keys})
    free = list(v.free)
    m = len(free)
    layout = [("pooled", None)] + [("family", f) for f in families] + [("key", k) for k in keys]
    member = np.zeros((features.n, len(layout)))
    for col, (kind, what) in enumerate(layout):
        for i, c in enumerate(cs):
            member[i, col] = (kind == "pooled" or (kind == "family" and c.engine == what)
                              or (kind == "key" and c.key == what))
    cols = [LINEAR.index(j) for j in free]
    penalty = np.sqrt(shrink) * np.repeat([0.0] + [1.0] * (len(layout) - 1), m)
    measured = np.log(features.measured[scored])
    member_scored = member[scored][:, :, None]

    def unpack(theta):
        logs = member @ theta.reshape(len(layout), m)  # [cases, free]
        x = np.zeros((features.n, len(LINEAR)))
        x[:, cols] = np.exp(np.clip(logs, -30, 2))
        x[:, LINEAR.index("allreduce_latency")] = ALLREDUCE_LATENCY
        return x

    best = None
    for knee, tile in [(p, t) for p in _knee_of(v) for t in (v.tiles or (None,))]:
        def residual(theta, knee=knee, tile=tile):
            x = unpack(theta)
            r = np.log(features.predict(knee, x, tile)[scored]) - measured
            g = features.gradient(knee, x, tile)[scored][:, cols] * x[scored][:, cols]  # d/d log x
            jac = (member_scored * g[:, None, :]).reshape(len(scored), -1)
            return np.concatenate([r, penalty * theta]), np.vstack([jac, np.diag(penalty)])

        theta0 = np.zeros(len(layout) * m)
        for j, name in enumerate(free):
            theta0[j] = math.log(_INIT[name])
        if best is not None:  # the next knee starts where the last one ended
            theta0 = best[1].copy()
        theta, sse = _lm(residual, theta0)
        if best is None or sse < best[2]:
            best = (knee, theta, sse, tile)
    knee, theta, sse, tile = best
    t = theta.reshape(len(layout), m)
    pick = lambda row: {name: float(t[row, j]) for j, name in enumerate(free)}
    return EngineFit(v, knee, pick(0), {f: pick(1 + i) for i, f in enumerate(families)},
                     {k: pick(1 + len(families) + i) for i, k in enumerate(keys)}, float(sse), len(scored), tile)


def fit_predict(fit_: EngineFit, features: Features, idx=None) -> np.ndarray:
    """The fitted variant's S for the cases ``idx`` of ``features`` (every case by default)."""
    s = features.predict(fit_.knee, _x(fit_, features.cases), fit_.tile)
    return s if idx is None else s[idx]


# ---------------------------------------------------------------------------------------------- cross-validation


# How a scored point's level is set: "anchored" (its series publishes no acceptance, so the level comes from
# the series' own measured S at its smallest batch) or "acceptance only" (predicted from the published
# acceptance alone, as the advisor predicts); "all" mixes them.
REGIMES = ("acceptance only", "anchored", "all")


@dataclass(frozen=True)
class CrossValidation:
    """Held-out predictions of every variant under each scheme ("series": leave one series out; "source":
    leave one source out): ``predicted[scheme][variant]`` per case of ``record`` (NaN for the anchors, which
    are not predicted), ``how[scheme][variant]`` which knobs each prediction used, and ``rows()``."""

    record: Record
    predicted: dict
    how: dict
    in_sample: dict
    ratio: dict = dataclasses.field(default_factory=dict)  # [scheme][variant]: held-out T_plain / T_iter per case

    @property
    def measured(self) -> np.ndarray:
        return np.array([c.measured for c in self.record.cases])

    def errors(self, scheme: str, variant: str, mask=None) -> np.ndarray:
        """log(predicted / measured) of the scored points (and ``mask``)."""
        keep = self.record.scored if mask is None else self.record.scored & mask
        return np.log(self.predicted[scheme][variant][keep] / self.measured[keep])

    def summary(self, scheme: str, variant: str, mask=None, regime: str = "all") -> dict:
        """One row: the held-out error of ``variant`` over the scored points of ``regime`` (and ``mask``)."""
        keep = self.record.scored & regime_mask(self.record, regime)
        keep = keep if mask is None else keep & mask
        pred, meas = self.predicted[scheme][variant][keep], self.measured[keep]
        err = np.log(pred / meas)
        worst = int(np.argmax(np.abs(err)))
        case = [c for c, k in zip(self.record.cases, keep, strict=True) if k][worst]
        return {"variant": variant, "scheme": scheme, "held out": held_out_label(scheme, variant), "regime": regime,
                "points": int(keep.sum()), "median |log ratio|": float(np.median(np.abs(err))),
                "bias": float(err.mean()), "verdict agreement": float(np.mean((pred > 1) == (meas > 1))),
                "worst": f"{case.source}/{case.series} {case.label}: {pred[worst]:.2f} vs {meas[worst]:.2f}",
                "worst |log ratio|": float(abs(err[worst]))}

    def rows(self, schemes=("source", "series"), regimes=REGIMES) -> list[dict]:
        """One row per scheme, variant and regime (``REGIMES``: the two regimes apart, then their mix)."""
        return [self.summary(s, v, regime=r) for s in schemes for v in self.predicted[s] for r in regimes]

    def best(self, scheme: str = "source") -> str:
        """The variant ``cost`` can price (``priceable``) with the smallest median |log ratio| under ``scheme``
        (ties: the first listed). The candidate batch terms are judged by ``term_search`` instead."""
        return min((v for v in self.predicted[scheme] if priceable(v)),
                   key=lambda v: self.summary(scheme, v)["median |log ratio|"])


def regime_mask(rec: Record, regime: str) -> np.ndarray:
    """Which cases of ``rec`` belong to ``regime`` (``REGIMES``)."""
    validate.choice("regime", regime, REGIMES)
    anchored = np.array([c.anchored for c in rec.cases], bool)
    return {"acceptance only": ~anchored, "anchored": anchored, "all": np.ones(len(anchored), bool)}[regime]


def held_out_label(scheme: str, variant: str) -> str:
    """"one source" / "one series", or "not held out" for a stored variant fitted to a source of the record."""
    validate.choice("scheme", scheme, ("series", "source"))
    if VARIANTS[variant].fitted_on:
        return "not held out"
    return {"series": "one series", "source": "one source"}[scheme]


def _groups(rec: Record, scheme: str) -> np.ndarray:
    validate.choice("scheme", scheme, ("series", "source"))
    return np.array([f"{c.source}/{c.series}" if scheme == "series" else c.source for c in rec.cases])


_CV: dict = {}


def cross_validate(variants: tuple[str, ...] | None = None, schemes: tuple[str, ...] = ("source", "series"),
                   shrink: float = SHRINK, rec: Record | None = None) -> CrossValidation:
    """Leave one series out and leave one source out, over the whole record (or ``rec``), for every variant
    (default ``VARIANTS``): each held-out point predicted by the variant fitted to the rest. An engine the
    rest has not seen gets its family's knobs, or the pooled ones (``EngineFit.knobs`` says which). The
    first calibration is not refitted: it is judged as it was stored (its own four points included).
    Deterministic; the record's result is kept (about 15 s on one core the first time)."""
    key = (variants, tuple(schemes), shrink)
    if rec is None and key in _CV:
        return _CV[key]
    result = _cross_validate(variants, tuple(schemes), shrink, rec or record())
    if rec is None:
        _CV[key] = result
    return result


def _cross_validate(variants, schemes, shrink, rec: Record) -> CrossValidation:
    variants = tuple(VARIANTS) if variants is None else tuple(validate.choice("variant", v, VARIANTS)
                                                                for v in variants)
    feats = {h: Features(rec.cases, h) for h in {VARIANTS[v].heads for v in variants}}
    predicted, how, in_sample, ratio = {}, {}, {}, {}
    for v in variants:
        f = feats[VARIANTS[v].heads]
        full = fit_engines(v, features=f, shrink=shrink)
        in_sample[v] = fit_predict(full, f)
    for scheme in schemes:
        validate.choice("scheme", scheme, ("series", "source"))
        groups = _groups(rec, scheme)
        predicted[scheme], how[scheme], ratio[scheme] = {}, {}, {}
        for v in variants:
            f = feats[VARIANTS[v].heads]
            out, said = np.full(rec_len := len(rec.cases), np.nan), [""] * rec_len
            r = np.full(rec_len, np.nan)
            for g in dict.fromkeys(groups):
                test = np.flatnonzero(groups == g)
                fold = fit_engines(v, features=f, train=np.flatnonzero(groups != g), shrink=shrink)
                out[test] = fit_predict(fold, f, test)
                r[test] = f.ratio(fold.knee, _x(fold, f.cases), fold.tile)[test]
                for i in test:
                    said[i] = fold.knobs(rec.cases[i].key)[1]
            out[~rec.scored] = np.nan
            predicted[scheme][v], how[scheme][v], ratio[scheme][v] = out, said, r
    return CrossValidation(rec, predicted, how, in_sample, ratio)


ADVISOR_REGIME = "acceptance only"  # the advisor predicts from --alpha / --mean-accepted unless it is anchored
NOMINAL = 0.90  # the central share of held-out errors a band spans
BUCKETS = ((1, 1), (2, 8), (9, 64), (65, None))  # the batch buckets coverage is reported in (None: no upper end)
DISTANCES = ((1, 2), (2, 8), (8, None))  # how far, as a factor on B either way, an anchored prediction reaches


def min_points(nominal: float = NOMINAL) -> int:
    """The fewest errors whose quantiles may set a band: with n errors the tail quantile (1 − nominal)/2 is an
    order statistic inside the sample only when n·tail ≥ 1 (20 points for 90%, 40 for 95%); below that it is
    the most extreme error, or past it."""
    tail = (1 - validate.number("nominal", nominal, low=0, high=1, low_open=True, high_open=True)) / 2
    return math.ceil(round(1 / tail, 9))


def bucket_label(lo: int, hi: int | None) -> str:
    """"B = 1", "B = 2–8", "B > 64": how a batch bucket is named."""
    return f"B = {lo}" if lo == hi else f"B > {lo - 1}" if hi is None else f"B = {lo}–{hi}"


def in_bucket(batch, lo: int, hi: int | None) -> np.ndarray:
    batch = np.asarray(batch)
    return (batch >= lo) & (batch <= (np.inf if hi is None else hi))


@dataclass(frozen=True)
class Band:
    """Held-out errors e = log(predicted / measured), each at a coordinate ``at`` (log2 of its batch; for an
    anchored prediction, log2 of its batch over the measured one), and the source each came from.

    ``quantiles(x)``: (low, centre, high) in log error. The band spans the central ``nominal`` share of the
    ``points`` errors nearest to x (every error tied with the last one included; all of them when there are
    fewer). With ``between``, it spans at least the sources' spread too: each source's typical error (its
    median, its offset) differs from the others', and a new deployment is a new source, so the band reaches from
    the lowest offset plus the low tail of every error's spread about its own source's offset, to the highest
    offset plus the high tail (``BAND_BUILDS``). That spread is pooled over every error, not the nearest: the
    nearest come from two or three sources with a few points each, and their tails would step with B.
    ``centre``: "model", the model's own S (an error of 0, moved to the nearest edge if the band excludes it),
    or "nearest", the nearest errors' median.
    ``factors(x)``: (low, centre, high) multipliers on the model's S, exp(−high), exp(−centre), exp(−low): the
    measured S lay within model·low to model·high for that share of the held-out points."""

    at: tuple[float, ...]
    errors: tuple[float, ...]
    sources: tuple[str, ...]
    nominal: float = NOMINAL
    points: int = 20
    between: bool = False
    centre: str = "nearest"

    def __post_init__(self):
        if not len(self.at) == len(self.errors) == len(self.sources) or not self.errors:
            raise validate.BadArgument("a band needs one coordinate and one source per error, and at least one error")
        validate.choice("centre", self.centre, ("model", "nearest"))

    def nearest(self, x: float) -> np.ndarray:
        """Indices of the ``points`` errors nearest to ``x`` (ties at the cut included)."""
        d = np.abs(np.asarray(self.at) - float(x))
        if len(d) <= self.points:
            return np.arange(len(d))
        cut = np.sort(d)[self.points - 1]
        return np.flatnonzero(d <= cut + 1e-9)

    def offsets(self) -> dict:
        """{source: the median of its errors}: where each source's errors sit."""
        e, s = np.asarray(self.errors), np.asarray(self.sources)
        return {str(src): float(np.median(e[s == src])) for src in dict.fromkeys(self.sources)}

    def quantiles(self, x: float) -> tuple[float, float, float]:
        near = self.nearest(x)
        e = np.asarray(self.errors)[near]
        tail = (1 - self.nominal) / 2
        low, high = float(np.quantile(e, tail)), float(np.quantile(e, 1 - tail))
        if self.between:
            off = self.offsets()
            within = np.asarray(self.errors) - np.array([off[s] for s in self.sources])
            low = min(low, min(off.values()) + float(np.quantile(within, tail)))
            high = max(high, max(off.values()) + float(np.quantile(within, 1 - tail)))
        mid = float(np.median(e)) if self.centre == "nearest" else 0.0
        return low, min(max(mid, low), high), high

    def factors(self, x: float) -> tuple[float, float, float]:
        low, mid, high = self.quantiles(x)
        return math.exp(-high), math.exp(-mid), math.exp(-low)

    def span(self) -> tuple[float, float]:
        """The coordinates the errors cover: past them the band is the nearest errors' (an extrapolation)."""
        return min(self.at), max(self.at)

    def without(self, source: str) -> Band:
        keep = [i for i, s in enumerate(self.sources) if s != source]
        return replace(self, at=tuple(self.at[i] for i in keep), errors=tuple(self.errors[i] for i in keep),
                       sources=tuple(self.sources[i] for i in keep))

    def to_json(self) -> dict:
        return {"nominal": self.nominal, "points": self.points, "between": self.between, "centre": self.centre,
                "at": [round(x, 4) for x in self.at], "errors": [round(e, 4) for e in self.errors],
                "sources": list(self.sources)}

    @classmethod
    def from_json(cls, doc: dict) -> Band:
        return cls(tuple(doc["at"]), tuple(doc["errors"]), tuple(doc["sources"]), doc["nominal"], doc["points"],
                   doc.get("between", False), doc.get("centre", "nearest"))


# How the advisor's band is built: "sources" (the one it uses) spans the sources' spread as well as the nearest
# errors' and is centred on the model's own S; "nearest" (issue 34's first band) spans the nearest errors only
# and is centred on their median. Both are judged held out by source (``band_table(..., build=...)``).
BAND_BUILDS = {"sources": {"between": True, "centre": "model"}, "nearest": {"between": False, "centre": "nearest"}}
BAND_BUILD = "sources"


def batch_band(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME, nominal: float = NOMINAL,
               mask=None, build: str = BAND_BUILD) -> Band:
    """The band of ``variant`` as a function of the batch: its held-out errors (leaving one source out) over
    the scored points of ``regime`` (and ``mask``), each at log2 of its batch, built as ``build`` says
    (``BAND_BUILDS``)."""
    validate.choice("build", build, BAND_BUILDS)
    keep = cv.record.scored & regime_mask(cv.record, regime) & (True if mask is None else mask)
    cases_ = [c for c, k in zip(cv.record.cases, keep, strict=True) if k]
    err = cv.errors("source", variant, regime_mask(cv.record, regime) & (True if mask is None else mask))
    return Band(tuple(math.log2(c.batch) for c in cases_), tuple(map(float, err)), tuple(c.source for c in cases_),
                nominal, min_points(nominal), **BAND_BUILDS[build])


def anchor_pairs(cv: CrossValidation, variant: str = CHOSEN) -> list[dict]:
    """Every prediction of one point from another point of the same series at another batch (same k, tree,
    context and acceptance), as a reader who measured S at one batch asks about another: S_i = S_a ·
    r_i / r_a, r = T_plain / T_iter from the fit without the source (leaving one source out). One dict per
    ordered pair: source, series, the measured batch ``anchor``, the batch asked ``batch``, the
    ``error`` log(predicted / measured) and ``at`` = log2(batch / anchor)."""
    rec, ratio, meas = cv.record, cv.ratio["source"][variant], cv.measured
    groups: dict = {}
    for i, c in enumerate(rec.cases):
        groups.setdefault((c.source, c.series, c.k, c.widths, c.context, c.alpha, c.tokens), []).append(i)
    out = []
    for members in groups.values():
        for a in members:
            for i in members:
                ca, ci = rec.cases[a], rec.cases[i]
                if ci.batch == ca.batch:
                    continue
                pred = meas[a] * ratio[i] / ratio[a]
                out.append({"source": ci.source, "series": ci.series, "anchor": ca.batch, "batch": ci.batch,
                            "error": math.log(pred / meas[i]), "at": math.log2(ci.batch / ca.batch)})
    return out


def anchor_band(cv: CrossValidation, variant: str = CHOSEN, nominal: float = NOMINAL, pairs=None) -> Band:
    """The band of an anchored prediction as a function of how far it reaches: the errors of ``anchor_pairs``,
    each at log2(batch asked / batch measured) (negative: below the measured batch)."""
    pairs = anchor_pairs(cv, variant) if pairs is None else pairs
    return Band(tuple(p["at"] for p in pairs), tuple(p["error"] for p in pairs), tuple(p["source"] for p in pairs),
                nominal, min_points(nominal))


def verdict_of(low: float, high: float) -> str:
    """What a band on S says: "pays" when its lower edge is above 1, "loses" when its upper edge is below 1,
    else "uncertain" (measure it)."""
    if not low <= high:
        raise validate.BadArgument(f"a band's low edge must not exceed its high edge; got {low:g} > {high:g}")
    return "pays" if low > 1 else "loses" if high < 1 else "uncertain"


def held_out_band(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME,
                  nominal: float = NOMINAL, build: str = BAND_BUILD) -> dict:
    """The band judged on points it was not built from: for each source, the band built from the other sources'
    held-out errors (``batch_band(...).without(source)``), applied to that source's points. Per point of
    ``regime`` (arrays over ``cases``): the model's held-out S, the band's (low, centre, high) S, the
    measured S, whether the band covered it, and the verdict (``verdict_of``) and whether it was right."""
    full = batch_band(cv, variant, regime, nominal, build=build)
    keep = cv.record.scored & regime_mask(cv.record, regime)
    cases_ = [c for c, k in zip(cv.record.cases, keep, strict=True) if k]
    model, meas = cv.predicted["source"][variant][keep], cv.measured[keep]
    low, centre, high = (np.zeros(len(cases_)) for _ in range(3))
    others = {s: full.without(s) for s in dict.fromkeys(c.source for c in cases_)}
    for i, c in enumerate(cases_):
        f = others[c.source].factors(math.log2(c.batch))
        low[i], centre[i], high[i] = (model[i] * x for x in f)
    verdicts = [verdict_of(lo, hi) for lo, hi in zip(low, high, strict=True)]
    decisive = np.array([v != "uncertain" for v in verdicts])
    right = np.array([(v == "pays") == (m > 1) and v != "uncertain" for v, m in zip(verdicts, meas, strict=True)])
    return {"cases": cases_, "batch": np.array([c.batch for c in cases_]), "model": model, "low": low,
            "moe": np.array([c.moe for c in cases_], bool), "load": np.array([c.load for c in cases_]),
            "gpu_assumed": np.array([c.gpu_assumed is not None for c in cases_], bool),
            "centre": centre, "high": high, "measured": meas, "covered": (low <= meas) & (meas <= high),
            "verdict": verdicts, "decisive": decisive, "right": right}


def _score(h: dict, m) -> dict:
    """One row of the band's held-out score over the points ``m`` of ``held_out_band``'s result."""
    n = int(m.sum())
    if not n:
        return {"points": 0}
    model_err, centre_err = np.log(h["model"][m] / h["measured"][m]), np.log(h["centre"][m] / h["measured"][m])
    dec = int(h["decisive"][m].sum())
    return {"points": n, "covered": int(h["covered"][m].sum()), "coverage": float(h["covered"][m].mean()),
            "decisive": dec, "decisive_share": dec / n, "right": int(h["right"][m].sum()),
            "decisive_right": int(h["right"][m].sum()) / dec if dec else None,
            "model_bias": float(model_err.mean()), "model_median": float(np.median(np.abs(model_err))),
            "centre_bias": float(centre_err.mean()), "centre_median": float(np.median(np.abs(centre_err)))}


def band_table(cv: CrossValidation | None = None, variant: str = CHOSEN, regime: str = ADVISOR_REGIME,
               nominal: float = NOMINAL, build: str = BAND_BUILD) -> list[dict]:
    """The band held out by source (``held_out_band``), one row per batch bucket (``BUCKETS``), then B > 1 and
    every point: points, covered, coverage, decisive verdicts and their share, right ones and their share,
    and the held-out bias and median |log ratio| of the model's S and of the band's central estimate."""
    cv = cv or cross_validate()
    h = held_out_band(cv, variant, regime, nominal, build)
    rows = [{"bucket": bucket_label(lo, hi), **_score(h, in_bucket(h["batch"], lo, hi))} for lo, hi in BUCKETS]
    rows.append({"bucket": "B > 1", **_score(h, h["batch"] > 1)})
    rows.append({"bucket": "all", **_score(h, h["batch"] >= 1)})
    return rows


# The families of the record whose held-out error is reported apart: dense and MoE targets, a batch the source
# fixed and the requests in flight of a closed loop (``LOADS``), a GPU named without its form factor.
FAMILIES = {
    "dense": lambda c: not c.moe,
    "MoE": lambda c: c.moe,
    "batch": lambda c: c.load == "batch",
    "concurrency": lambda c: c.load == "concurrency",
    "GPU form factor assumed": lambda c: c.gpu_assumed is not None,
}


def family_mask(rec: Record, family: str) -> np.ndarray:
    """Which cases of ``rec`` belong to ``family`` (``FAMILIES``)."""
    validate.choice("family", family, FAMILIES)
    return np.array([bool(FAMILIES[family](c)) for c in rec.cases], bool)


def family_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> list[dict]:
    """Per family (``FAMILIES``), leaving one source out: the points and sources of each regime, the held-out
    median |log ratio| and bias of each regime and of both, the verdict agreement, and over its acceptance-only
    points the band's coverage, decisive share and right verdicts (``held_out_band``). A family with no point
    has only its name and zeros: the record summary (``skip_summary``) says what keeps such points out."""
    cv = cv or cross_validate()
    h = held_out_band(cv, variant)
    in_band = {"dense": ~h["moe"], "MoE": h["moe"], "batch": h["load"] == "batch",
               "concurrency": h["load"] == "concurrency", "GPU form factor assumed": h["gpu_assumed"]}
    rows = []
    for fam in FAMILIES:
        m = family_mask(cv.record, fam)
        row = {"family": fam, "points": int((m & cv.record.scored).sum()),
               "sources": len({c.source for c, k in zip(cv.record.cases, m, strict=True) if k})}
        for regime in REGIMES:
            keep = m & cv.record.scored & regime_mask(cv.record, regime)
            if not keep.any():
                row[regime] = None
                continue
            s = cv.summary("source", variant, m, regime)
            row[regime] = {"points": s["points"], "median": s["median |log ratio|"], "bias": s["bias"],
                           "verdict": s["verdict agreement"]}
        band = _score(h, in_band[fam])
        row["band"] = band if band["points"] else None
        rows.append(row)
    return rows


def anchor_table(cv: CrossValidation | None = None, variant: str = CHOSEN, nominal: float = NOMINAL) -> list[dict]:
    """Anchored predictions held out by source, by how far they reach (``DISTANCES``, the factor between the
    batch asked and the batch measured, either way), and up to 8× above the measured batch: pairs, median
    |log ratio|, bias, and how often the anchored band built without the source covered them."""
    cv = cv or cross_validate()
    pairs = anchor_pairs(cv, variant)
    full = anchor_band(cv, variant, nominal, pairs)
    covered = []
    by_source = {s: full.without(s) for s in dict.fromkeys(full.sources)}
    for p in pairs:
        f = by_source[p["source"]].quantiles(p["at"])
        covered.append(f[0] <= p["error"] <= f[2])
    reach = np.array([abs(p["at"]) for p in pairs])
    err, covered = np.array([p["error"] for p in pairs]), np.array(covered)

    def row(label, m):
        n = int(m.sum())
        return {"distance": label, "pairs": n, "median": float(np.median(np.abs(err[m]))) if n else None,
                "bias": float(err[m].mean()) if n else None, "coverage": float(covered[m].mean()) if n else None}

    rows = [row(f"{lo}–{hi}×" if hi else f"> {lo}×", (reach > math.log2(lo) + 1e-9)
                & (reach <= (math.log2(hi) if hi else np.inf) + 1e-9)) for lo, hi in DISTANCES]
    up = np.array([p["at"] for p in pairs])
    rows.append(row("up to 8× above", (up > 0) & (up <= 3 + 1e-9)))
    return rows


def bias_by_source(cv: CrossValidation, variant: str = CHOSEN, regime: str = ADVISOR_REGIME) -> dict:
    """{source: (e^bias, points)} of ``variant``'s held-out predictions (leaving one source out) over each
    source's scored points of ``regime``: how many times too high the model predicted S there, on average."""
    sources = np.array([c.source for c in cv.record.cases])
    rows = {str(s): cv.summary("source", variant, sources == s, regime)
            for s in dict.fromkeys(sources[cv.record.scored & regime_mask(cv.record, regime)])}
    return {s: (float(np.exp(row["bias"])), row["points"]) for s, row in rows.items()}


# ---------------------------------------------------------------------------------------------- batch terms

# Issue 34: candidate costs that grow with the batch, each added to the chosen variant and kept only if
# leaving one source out improves the bias at B > 1 without making the median error worse.
BASE = "per-layer cost"
CANDIDATES = {
    "+ GEMM tiles": "a GEMM computes its rows in tiles (16 to 128, fitted): a verify pass of B(k+1) rows pays for "
                    "the whole last tile, so small-M GEMMs run below the roofline",
    "+ per-verified-token cost": "a time for each drafted token the verify pass scores: sampling, the acceptance "
                                 "test, tree masks, KV writes",
    "+ per-sequence cost": "a time per sequence in every pass, draft passes included: the engine's scheduling "
                           "and metadata per request per step",
    "+ per-MoE-layer cost": "a time per MoE layer of every pass: the router, the top-k, the token alignment and the "
                            "grouped GEMMs' launches that a dense layer does not run",
    "+ per-expert cost": "a time per distinct expert each MoE layer touches: a touched expert's GEMM runs its few rows "
                         "padded to a whole tile, so its cost grows with E[D](tokens), as a verify pass's does",
}


def residual_rows(cv: CrossValidation, variant: str = BASE, regime: str = ADVISOR_REGIME) -> list[dict]:
    """One row per held-out point of ``regime`` (leaving one source out): where it comes from, what might
    explain its error (batch B, verify rows B·(k+1) or B·(tree + 1), the tokens a sequence drafts, weight
    bits, engine) and the error log(predicted / measured)."""
    keep = cv.record.scored & regime_mask(cv.record, regime)
    pred = cv.predicted["source"][variant]
    out = []
    for i in np.flatnonzero(keep):
        c = cv.record.cases[i]
        out.append({"source": c.source, "series": c.series, "batch": c.batch, "k": c.k,
                    "verify_rows": c.batch * (c.k + 1), "drafted": sum(c.widths) if c.widths else c.k,
                    "tree": bool(c.widths), "weight_bits": round(8 * c.target.weight_bytes),
                    "engine": calibration_name(c.engine, c.version), "gpu": getattr(c.accel, "name", c.accel),
                    "error": float(np.log(pred[i] / cv.measured[i]))})
    return out


def term_search(cv: CrossValidation | None = None, base: str = BASE, candidates=tuple(CANDIDATES)) -> list[dict]:
    """The base variant and each candidate term, held out by source: over the points predicted from their
    acceptance alone the bias at B = 1 and at B > 1, the median |log ratio| at B > 1 and over every B, the
    bias at B > 1 of each source, and the anchored regime's median; ``kept`` by ``keeps``."""
    cv = cv or cross_validate()
    rows = []
    for v in (base, *candidates):
        acc = residual_rows(cv, v)
        err, batch = np.array([r["error"] for r in acc]), np.array([r["batch"] for r in acc])
        sources = np.array([r["source"] for r in acc])
        big = batch > 1
        rows.append({"variant": v, "what": CANDIDATES.get(v, VARIANTS[v].what),
                     "bias B = 1": float(err[~big].mean()), "bias B > 1": float(err[big].mean()),
                     "median B > 1": float(np.median(np.abs(err[big]))), "median": float(np.median(np.abs(err))),
                     "anchored median": cv.summary("source", v, regime="anchored")["median |log ratio|"],
                     "bias B > 1 by source": {str(s): float(err[big & (sources == s)].mean())
                                              for s in dict.fromkeys(sources[big])}})
    for r in rows[1:]:
        r["kept"] = keeps(rows[0], r)
    rows[0]["kept"] = None
    return rows


def keeps(base: dict, candidate: dict) -> bool:
    """The rule: a term is kept when, leaving one source out, its |bias| at B > 1 is smaller than the base's,
    and neither its median |log ratio| at B > 1 (acceptance only) nor the anchored regime's median is larger."""
    return (abs(candidate["bias B > 1"]) < abs(base["bias B > 1"]) and candidate["median B > 1"] <= base["median B > 1"]
            and candidate["anchored median"] <= base["anchored median"])


def term_text(rows: list[dict]) -> str:
    """``term_search`` as plain text (what ``--cv`` prints): one line per variant, then what the rule keeps."""
    lines = ["candidate batch terms (acceptance only, leaving one source out): kept only if the bias at B > 1 "
             "shrinks and neither median grows",
             f"{'variant':27} {'bias B=1':>8} {'bias B>1':>8} {'med B>1':>7} {'median':>7} {'anch med':>8}  kept  "
             "bias B>1 by source"]
    for r in rows:
        by = ", ".join(f"{s} {b:+.3f}" for s, b in r["bias B > 1 by source"].items())
        kept = "base" if r["kept"] is None else "yes" if r["kept"] else "no"
        lines.append(f"{r['variant']:27} {r['bias B = 1']:+8.3f} {r['bias B > 1']:+8.3f} {r['median B > 1']:7.3f} "
                     f"{r['median']:7.3f} {r['anchored median']:8.3f}  {kept:4}  {by}")
    kept = kept_term(rows)
    lines.append(f"kept: {kept}" if kept else f"kept: none; {rows[0]['variant']} stays")
    return "\n".join(lines)


def kept_term(rows: list[dict]) -> str | None:
    """The kept candidate with the smallest |bias| at B > 1, or None."""
    kept = [r for r in rows[1:] if r["kept"]]
    return min(kept, key=lambda r: abs(r["bias B > 1"]))["variant"] if kept else None


def shown(x: float, against: float, decimals: int = 3, style: str = "f") -> str:
    """``x`` printed with ``decimals`` (style "f", "+f" for a sign, or "%"), with more decimals where fewer would
    print it equal to ``against`` or on its other side: a sentence that says "below 80%" never prints "80%"."""
    def fmt(v, d):
        return f"{v:.{d}%}" if style == "%" else f"{v:+.{d}f}" if style == "+f" else f"{v:.{d}f}"

    def value(text):
        return float(text.rstrip("%")) / (100 if style == "%" else 1)

    for d in range(decimals, decimals + 6):
        text = fmt(x, d)
        shown_, goal = value(text), value(fmt(against, d))
        if x == against or (shown_ != goal and (shown_ < goal) == (x < against)):
            return text
    return fmt(x, decimals + 6)


def shown_pair(a: float, b: float, decimals: int = 3, style: str = "f") -> tuple[str, str]:
    """``a`` and ``b`` printed with as many decimals as it takes to tell them apart (as many as asked if equal)."""
    for d in range(decimals, decimals + 6):
        fa, fb = (f"{v:.{d}%}" if style == "%" else f"{v:+.{d}f}" if style == "+f" else f"{v:.{d}f}" for v in (a, b))
        if fa != fb or a == b:
            return fa, fb
    return fa, fb


def why_not_kept(base: dict, candidate: dict) -> list[str]:
    """The parts of ``keeps`` a candidate fails, in words with its numbers (empty: it is kept)."""
    out = []
    if not abs(candidate["bias B > 1"]) < abs(base["bias B > 1"]):
        a, b = shown_pair(candidate["bias B > 1"], base["bias B > 1"], style="+f")
        out.append(f"its bias at B > 1, {a}, is no smaller than {b}")
    if candidate["median B > 1"] > base["median B > 1"]:
        a, b = shown_pair(candidate["median B > 1"], base["median B > 1"])
        out.append(f"its median at B > 1 grows to {a} from {b}")
    if candidate["anchored median"] > base["anchored median"]:
        a, b = shown_pair(candidate["anchored median"], base["anchored median"])
        out.append(f"the anchored median grows to {a} from {b}")
    return out


def term_story(rows: list[dict]) -> str:
    """What the search for a batch-growing term found (``term_search``), in short sentences: the term kept or
    that none is, then for each candidate that is not kept the first part of the rule it fails."""
    kept = kept_term(rows)
    said = [f"{kept} is kept." if kept else "No term is kept."]
    for r in rows[1:]:
        why = why_not_kept(rows[0], r)
        if why:
            name = r["variant"].removeprefix("+ ")
            said.append(f"{name[0].upper() + name[1:]}: {why[0]}.")
    return " ".join(said)


def _than(a: float, b: float) -> tuple[str, str]:
    """(a as printed, "above b" / "below b" / "equal to b"), printed so that the words are true of them."""
    sa, sb = shown_pair(a, b)
    return sa, f"equal to {sb}" if a == b else f"above {sb}" if a > b else f"below {sb}"


def family_story(rows: list[dict], family: str = "MoE", against: str = "dense") -> str:
    """One family's held-out error beside another's (``family_table``), in two sentences chosen by the numbers:
    the median and bias of the points predicted from their acceptance alone, and the band's coverage of them.
    A family with no such point says so."""
    by = {r["family"]: r for r in rows}
    mine, other = by[family], by[against]
    acc, ref = mine["acceptance only"], other["acceptance only"]
    if acc is None:
        return f"No {family} point is predicted from its published acceptance alone."
    n = f"{acc['points']} {family} point{'s' if acc['points'] != 1 else ''}"
    src = f"{mine['sources']} source{'s' if mine['sources'] != 1 else ''}"
    median, than = _than(acc["median"], ref["median"]) if ref else (f"{acc['median']:.3f}", "")
    first = (f"The {n} from {src}, predicted from their published acceptance alone, are off by a median "
             f"{median} in log terms" + (f", {than} for the {against} points" if ref else "")
             + f"; their bias is {acc['bias']:+.3f}" + (f" ({against}: {ref['bias']:+.3f})" if ref else "") + ".")
    band, ref_band = mine["band"], other["band"]
    second = (f"The band covered {band['covered']} of them ({band['coverage']:.0%}"
              + (f"; {against}: {ref_band['coverage']:.0%}" if ref_band else "") + "), and "
              + (f"{band['right']} of the {band['decisive']} decisive verdicts were right." if band["decisive"]
                 else "gave no decisive verdict."))
    return f"{first} {second}"


def alternative_story(rows: list[dict], choice: str) -> str:
    """Whether the record's ``choice`` (a row group of ``alternative_table``) beats its alternative held out:
    "on every regime", "on none", or on which, by the median |log ratio|."""
    mine = [r for r in rows if r["choice"] == choice]
    if not mine:
        raise validate.BadArgument(f"no rows for {choice!r}; choices: {sorted({r['choice'] for r in rows})}")
    better = [r["regime"] for r in mine if r["median"] < r["other median"]]
    nums = "; ".join(f"{r['regime']} {r['median']:.3f} against {r['other median']:.3f}" for r in mine)
    where = ("on every regime" if len(better) == len(mine) else "on none of the regimes" if not better
             else "on " + " and ".join(better) + " only")
    return f"Held out by source, it predicts better {where} (median |log ratio|: {nums})."


def _coverage_list(rows: list[dict]) -> str:
    said = []
    for r in rows[:len(BUCKETS)]:
        if not r.get("points"):
            continue
        where = r["bucket"].replace("B > ", "above ").replace("B = ", "at B = ")
        said.append(f"{r['covered']} of the {r['points']} {where}" if r["points"] < BAND_GOALS["bucket_points"]
                    else f"{shown(r['coverage'], BAND_GOALS['coverage'], 0, '%')} of the {r['points']} {where}")
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else said[0]


def band_story(rows: list[dict], other: list[dict] | None = None) -> str:
    """How the band did held out by source (``band_table``), per batch bucket, against issue 34's coverage goal
    (``BAND_GOALS``: 80% in every bucket of 10 points or more); with ``other`` (the same table for another
    build, ``BAND_BUILDS``), how that one did in the same buckets."""
    g, n = BAND_GOALS["coverage"], BAND_GOALS["bucket_points"]
    judged = [r for r in rows[:len(BUCKETS)] if r.get("points", 0) >= n]
    short = [r["bucket"] for r in judged if r["coverage"] < g]
    said = f"Held out, the band covered {_coverage_list(rows)}."
    said += (f" That is at least {g:.0%} in every bucket of {n} points or more." if not short else
             f" That is below {g:.0%} at {', '.join(short)}.")
    if other:
        by = {r["bucket"]: r for r in other}
        pairs = [(r, by[r["bucket"]]) for r in rows[:len(BUCKETS)] if r.get("points")]
        less = sum(o["coverage"] < r["coverage"] for r, o in pairs)
        more = sum(o["coverage"] > r["coverage"] for r, o in pairs)
        how = ("less in every bucket" if less == len(pairs) else "never less" if not less else
               f"less in {less} of the {len(pairs)} buckets" + (f" and more in {more}" if more else ""))
        said += f" Built from the nearest errors alone, it covered {_coverage_list(other)}. That is {how}."
    return said


def centre_story(rows: list[dict], other: list[dict]) -> str:
    """The band's central estimate at B > 1 held out (``band_table``) beside another build's (``other``), in one
    sentence of numbers: median |log ratio| and bias of each."""
    mine, theirs = rows[-2], other[-2]
    m1, m2 = shown_pair(mine["centre_median"], theirs["centre_median"])
    b1, b2 = shown_pair(mine["centre_bias"], theirs["centre_bias"], style="+f")
    return (f"At B > 1 the central estimate is off by a median {m1} held out (bias {b1}); centred on the nearest "
            f"errors' median, as first built, it was off by {m2} (bias {b2}).")


def closed_loop_text(rec: Record | None = None) -> str:
    """What became of the closed-loop series (speedups at requests in flight): how many are admitted, and what
    keeps the others out (``Record.kinds``)."""
    rec = rec or record()
    loops = [k for k in rec.kinds if published.load(k.split("/")[0])[k.split("/")[1]].columns
             and "concurrency" in published.load(k.split("/")[0])[k.split("/")[1]].columns]
    admitted = len({(c.source, c.series) for c in rec.cases if c.load == "concurrency"})
    kinds: dict = {}
    for k in loops:
        for kind in rec.kinds[k]:
            kinds[kind] = kinds.get(kind, 0) + 1
    why = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    if not loops:
        return f"{admitted} closed-loop series {'is' if admitted == 1 else 'are'} admitted, and none is kept out."
    if not admitted:
        return (f"None of the {len(loops)} closed-loop series is admitted: each fails another rule. Series per "
                f"rule: {why}.")
    return (f"{admitted} closed-loop series {'is' if admitted == 1 else 'are'} admitted; the other {len(loops)} "
            f"each fail another rule. Series per rule: {why}.")


# ---------------------------------------------------------------------------------------------- goals

# Issue 24's goals for the held-out error, leaving one source out: each row of the table is judged on its own.
GOALS = {"median": 0.10, "bias": 0.05, "verdict": 0.95, "coverage": 0.80}


@dataclass(frozen=True)
class Goals:
    """Issue 24's goals judged on one row of the cross-validation: ``met`` {goal: True/False/None (not
    judged)}, ``ok`` (every judged goal met), ``sentence`` (what the prose may say), ``numbers``."""

    met: dict
    ok: bool
    sentence: str
    numbers: dict
    said: dict = dataclasses.field(default_factory=dict)  # {goal: its number and target, in words}


def judge(row: dict, coverage: float | None = None) -> Goals:
    """Judge a ``CrossValidation.summary`` row (and the band's held-out coverage of the same points, if
    given) against ``GOALS``: median |log ratio| ≤ 0.10, |bias| ≤ 0.05, verdict agreement ≥ 95%, coverage
    ≥ 80%. The sentence names the goals met and those not, with the numbers."""
    for key in ("median |log ratio|", "bias", "verdict agreement", "points"):
        if key not in row:
            raise validate.BadArgument(f"judge needs a summary row with {key!r}; got keys {sorted(row)}")
    numbers = {"median": row["median |log ratio|"], "bias": row["bias"], "verdict": row["verdict agreement"],
               "coverage": coverage}
    met = {"median": numbers["median"] <= GOALS["median"], "bias": abs(numbers["bias"]) <= GOALS["bias"],
           "verdict": numbers["verdict"] >= GOALS["verdict"],
           "coverage": None if coverage is None else coverage >= GOALS["coverage"]}
    bias = numbers["bias"]
    said = {"median": f"median |log ratio| {shown(numbers['median'], GOALS['median'])} "
                      f"(goal ≤ {GOALS['median']:.2f})",
            "bias": f"bias {shown(bias, math.copysign(GOALS['bias'], bias), 3, '+f')} "
                    f"(goal within ±{GOALS['bias']:.2f})",
            "verdict": f"verdict agreement {shown(numbers['verdict'], GOALS['verdict'], 1, '%')} "
                       f"(goal ≥ {GOALS['verdict']:.0%})",
            "coverage": None if coverage is None else
            f"band coverage {shown(coverage, GOALS['coverage'], 0, '%')} (goal ≥ {GOALS['coverage']:.0%})"}
    what = f"{row.get('variant', 'the model')}, {row.get('regime', 'all')} ({row['points']} points)"
    return Goals(met, not any(m is False for m in met.values()), _goal_sentence(what, said, met), numbers)


def _goal_sentence(what: str, said: dict, met: dict) -> str:
    """"what: every goal is met: ...", "what: no goal is met: ...", or "what: met: .... Not met: ...": each goal
    judged (``met`` True or False; None: not judged) said with its number (``said``)."""
    good = [said[g] for g, m in met.items() if m]
    bad = [said[g] for g, m in met.items() if m is False]
    if not bad:
        return f"{what}: every goal is met: " + "; ".join(good) + "."
    if not good:
        return f"{what}: no goal is met: " + "; ".join(bad) + "."
    return f"{what}: met: " + "; ".join(good) + ". Not met: " + "; ".join(bad) + "."


def goals_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> dict:
    """{regime: Goals} for ``variant`` leaving one source out, the held-out coverage of each regime's own band
    (``held_out_band``) included."""
    cv = cv or cross_validate()
    return {r: judge(cv.summary("source", variant, regime=r), float(held_out_band(cv, variant, r)["covered"].mean()))
            for r in REGIMES}


# Issue 34's goals, for the advisor's band held out by source (``band_table``, ``anchor_table``).
BAND_GOALS = {"bias": 0.10, "median": 0.15, "median_all": 0.12, "coverage": 0.80, "bucket_points": 10,
              "right": 0.95, "decisive": 0.70, "anchor_median": 0.08}


def judge_band(rows: list[dict], anchor_rows: list[dict] | None = None, estimate: str = "centre") -> Goals:
    """Judge the band's held-out table (``band_table``; ``anchor_table`` for the anchored goal) against
    ``BAND_GOALS``: for the points with B > 1, |bias| ≤ 0.10 and median |log ratio| ≤ 0.15 and over every
    point median ≤ 0.12, of ``estimate`` ("centre": the band's central estimate, what the advisor reports;
    "model": the model's S alone); coverage ≥ 80% in every batch bucket with at least 10 points; decisive
    verdicts right ≥ 95% with at least 70% of the points decisive; anchored up to 8× above the measured batch,
    median ≤ 0.08. A bound is met when the number is on its side or equal to it."""
    validate.choice("estimate", estimate, ("centre", "model"))
    by = {r["bucket"]: r for r in rows}
    for key in ("B > 1", "all"):
        if key not in by or not by[key].get("points"):
            raise validate.BadArgument(f"judge_band needs band_table rows with points in {key!r}")
    g, e = BAND_GOALS, estimate
    big = [r for r in rows if r["bucket"] not in ("B > 1", "all") and r.get("points", 0) >= g["bucket_points"]]
    worst = min(big, key=lambda r: r["coverage"]) if big else None
    every = by["all"]
    numbers = {"bias": by["B > 1"][f"{e}_bias"], "median": by["B > 1"][f"{e}_median"],
               "median_all": every[f"{e}_median"], "coverage": worst["coverage"] if worst else None,
               "right": every["decisive_right"], "decisive": every["decisive_share"]}
    anchor = {r["distance"]: r for r in anchor_rows or []}.get("up to 8× above")
    numbers["anchor_median"] = anchor["median"] if anchor and anchor["pairs"] else None
    met = {"bias": abs(numbers["bias"]) <= g["bias"], "median": numbers["median"] <= g["median"],
           "median_all": numbers["median_all"] <= g["median_all"],
           "coverage": None if worst is None else numbers["coverage"] >= g["coverage"],
           "right": None if numbers["right"] is None else numbers["right"] >= g["right"],
           "decisive": numbers["decisive"] >= g["decisive"],
           "anchor_median": None if numbers["anchor_median"] is None
           else numbers["anchor_median"] <= g["anchor_median"]}
    said = {"bias": f"bias at B > 1 {shown(numbers['bias'], math.copysign(g['bias'], numbers['bias']), 3, '+f')} "
                    f"(goal within ±{g['bias']:.2f})",
            "median": f"median |log ratio| at B > 1 {shown(numbers['median'], g['median'])} "
                      f"(goal ≤ {g['median']:.2f})",
            "median_all": f"over every B {shown(numbers['median_all'], g['median_all'])} "
                          f"(goal ≤ {g['median_all']:.2f})",
            "coverage": None if worst is None else f"coverage {shown(numbers['coverage'], g['coverage'], 0, '%')} "
                                                    f"in {worst['bucket']}, the lowest of the buckets with "
                                                    f"{g['bucket_points']} points or more (goal ≥ {g['coverage']:.0%})",
            "right": None if numbers["right"] is None else f"{shown(numbers['right'], g['right'], 0, '%')} of "
                                                            f"decisive verdicts right (goal ≥ {g['right']:.0%})",
            "decisive": f"{shown(numbers['decisive'], g['decisive'], 0, '%')} of points decisive "
                        f"(goal ≥ {g['decisive']:.0%})",
            "anchor_median": None if numbers["anchor_median"] is None else
            f"anchored up to 8× above the measured batch, median {shown(numbers['anchor_median'], g['anchor_median'])}"
            f" (goal ≤ {g['anchor_median']:.2f})"}
    what = "the band's central estimate" if e == "centre" else "the model's S"
    return Goals(met, not any(m is False for m in met.values()), _goal_sentence(what, said, met), numbers, said)


def decisive_text(row: dict) -> str:
    """What a ``band_table`` row says of its verdicts, in one sentence: the share of points given a decisive
    verdict, and how many of those were right ("all" only when every one was)."""
    if not row.get("points"):
        raise validate.BadArgument("decisive_text needs a band_table row with points")
    if not row["decisive"]:
        return f"None of the {row['points']} points got a decisive verdict."
    right = ("all of them were right" if row["right"] == row["decisive"] else
             "none of them was right" if row["right"] == 0 else f"{row['right']} of them were right")
    return (f"{row['decisive_share']:.0%} of the {row['points']} points got a decisive verdict ({row['decisive']}), "
            f"and {right}.")


# ---------------------------------------------------------------------------------------------- one fit


@dataclass(frozen=True)
class Fit:
    """A fitted calibration: ``knobs`` (pass them to any ``cost`` time function), the fit's quality,
    and the best fit of every overlap mode tried (so a reader sees why this mode)."""

    knobs: dict
    free: tuple[str, ...]
    rms_log: float
    cases: tuple[Case, ...]
    predicted: tuple[float, ...]
    by_overlap: dict

    @property
    def residuals(self) -> list[float]:
        return [m / c.measured - 1 for m, c in zip(self.predicted, self.cases, strict=True)]

    def rows(self) -> list[dict]:
        """One row per point: what was measured, what the calibrated model says, the residual."""
        return compare(list(self.cases), **self.knobs)


def _linear_parts(cases_: list[Case], overlap: str, fixed: dict, names: tuple[str, ...]):
    """Per case: E[N], plain-decode and iteration times at the fixed knobs, and their change per unit
    of each free knob (exact: the knobs add to pass times)."""
    def times(**knobs):
        both = {**fixed, **knobs}
        kw = dict(overlap=overlap, overhead=both.get("overhead", 0.0),
                  allreduce_latency=both.get("allreduce_latency", 0.0))
        plain = np.array([cost.pass_time(c.target, c.accel, c.batch, 1, c.context, tp=c.tp, **kw) for c in cases_])
        it = np.array([cost.iteration_time(c.target, c.draft, c.accel, c.batch, c.k, c.context,
                                           draft_overhead=both.get("draft_overhead", kw["overhead"]),
                                           draft_context=c.draft_context, tp=c.tp, **kw) for c in cases_])
        return plain, it
    zero = {n: 0.0 for n in names}
    plain0, iter0 = times(**zero)
    unit = {n: tuple(t - t0 for t, t0 in zip(times(**{**zero, n: 1.0}), (plain0, iter0), strict=True)) for n in names}
    en = np.array([cost.expected_tokens(c.alpha, c.k) for c in cases_])
    return en, plain0, iter0, unit


def _search(en, plain0, iter0, unit, names, measured, bounds):
    """Grid search of sum((log S_model − log S_measured)²), refined five times around the best."""
    log_measured = np.log(measured)
    lo = np.array([bounds[n][0] for n in names], float)
    hi = np.array([bounds[n][1] for n in names], float)
    steps = {1: 401, 2: 81, 3: 25}[len(names)]
    for _ in range(6):
        axes = [np.linspace(a, b, steps) for a, b in zip(lo, hi, strict=True)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(names))
        plain = plain0[None, :] + sum(grid[:, [i]] * unit[n][0][None, :] for i, n in enumerate(names))
        it = iter0[None, :] + sum(grid[:, [i]] * unit[n][1][None, :] for i, n in enumerate(names))
        sse = ((np.log(en[None, :] * plain / it) - log_measured[None, :]) ** 2).sum(1)
        best = grid[np.argmin(sse)]
        span = (hi - lo) / (steps - 1) * 4
        lo, hi = np.maximum(lo, best - span), np.minimum(hi, best + span)
        lo = np.maximum(lo, [bounds[n][0] for n in names])
    return best, float(sse.min())


def fit(cases_: list[Case], free: tuple[str, ...] = ("overhead", "draft_overhead"), overlaps=cost.OVERLAPS,
        fixed: dict | None = None, bounds: dict | None = None) -> Fit:
    """Fit the ``free`` knobs (1 to 3 of overhead, draft_overhead, allreduce_latency; seconds) to the
    cases' measured S by least squares on log S, for each overlap mode in ``overlaps``; keep the best.

    Knobs that add the same constant to the same passes cannot be told apart: at a fixed tp every pass
    of a full model makes 2·n_layers all-reduces, so ``allreduce_latency`` only moves the per-pass sums
    overhead + 2·n_layers·latency. Fix it from a measurement (``fixed=``) and fit the overheads.

    ``fixed``: knobs held at a given value (a sourced all-reduce latency, say). ``bounds``: (low, high)
    seconds per free knob; default 0 to 20 ms for overheads and 0 to 100 µs for the all-reduce latency.
    """
    cases_ = list(cases_)
    if not cases_:
        raise validate.BadArgument("fit needs at least one case")
    free = tuple(free)
    if not 1 <= len(free) <= 3 or len(set(free)) != len(free):
        raise validate.BadArgument(f"free must name 1 to 3 distinct knobs of {FIT_KNOBS}; got {free}")
    for name in free:
        validate.choice("free knob", name, FIT_KNOBS)
    fixed = dict(fixed or {})
    for name, value in fixed.items():
        validate.choice("fixed knob", name, FIT_KNOBS)
        validate.number(name, value, low=0)
        if name in free:
            raise validate.BadArgument(f"{name} is both free and fixed")
    overlaps = [validate.choice("overlap", o, cost.OVERLAPS) for o in overlaps]
    default = {"overhead": (0.0, 0.02), "draft_overhead": (0.0, 0.02), "allreduce_latency": (0.0, 1e-4)}
    bounds = {**default, **(bounds or {})}
    measured = np.array([c.measured for c in cases_])
    by_overlap = {}
    for overlap in overlaps:
        en, plain0, iter0, unit = _linear_parts(cases_, overlap, fixed, free)
        best, sse = _search(en, plain0, iter0, unit, free, measured, bounds)
        knobs = {"overlap": overlap, **fixed, **{n: float(v) for n, v in zip(free, best, strict=True)}}
        by_overlap[overlap] = {"knobs": knobs, "rms_log": math.sqrt(sse / len(cases_))}
    overlap = min(by_overlap, key=lambda o: by_overlap[o]["rms_log"])
    knobs = by_overlap[overlap]["knobs"]
    return Fit(knobs, free, by_overlap[overlap]["rms_log"], tuple(cases_), tuple(predict(cases_, **knobs)), by_overlap)


# ---------------------------------------------------------------------------------------------- stored


def drafter_kind(c: Case) -> str:
    """The published record's name for a case's drafter: eagle3-head, eagle-head, self-speculation, ..."""
    d = c.draft
    if isinstance(d, cost.EagleHead):
        return "eagle3-head" if d.fc_inputs == 3 else "eagle-head"
    if d == c.target:
        return "self-speculation"
    return {cost.ModelShape: "draft-model", cost.NoWeights: "ngram", cost.EarlyExit: "early-exit"}.get(
        type(d), type(d).__name__)


def fitted_to(cases_) -> dict:
    """What a set of cases covers: the ranges a calibration fitted to them can be trusted in."""
    cases_ = list(cases_)
    span = lambda values: [min(values), max(values)]
    return {"sources": sorted({c.source for c in cases_}), "series": sorted({c.series for c in cases_}),
            "points": len(cases_), "batch": span([c.batch for c in cases_]),
            "context": span([c.context for c in cases_]), "k": sorted({c.k for c in cases_}),
            "trees": any(c.widths for c in cases_), "targets": sorted({c.target.name for c in cases_}),
            "drafters": sorted({drafter_kind(c) for c in cases_}), "tp": sorted({c.tp for c in cases_}),
            "weight_bytes": sorted({c.target.weight_bytes for c in cases_}), "gpu_doubt": gpu_doubt(cases_)}


def gpu_doubt(cases_) -> list[str]:
    """The published record's doubts about which GPU measured these cases (a series' setup
    ``accelerator_doubt``), one line per series that has one: "source/series: why"."""
    out = []
    for source, series in dict.fromkeys((c.source, c.series) for c in cases_):
        if not source:
            continue
        why = published.load(source)[series].setup.get("accelerator_doubt")
        if why:
            out.append(f"{source}/{series}: {why}")
    return out


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "magicdec": "MagicDec research engine",
                "vllm-moe": "vLLM, MoE targets", "sglang-moe": "SGLang, MoE targets"}
# Calibrations the chapters first called by the published source they came from.
ALIASES = {("H100-SXM", "specdecode_bench"): "vllm-0.10.1"}


def _rounded(knobs: dict) -> dict:
    return {k: (v if isinstance(v, str) else float(f"{v:.4g}")) for k, v in knobs.items()}


ANCHOR_NOMINAL = 0.95  # the anchored band: the central 95% of the 40 nearest pairs (pairs are many and alike)


def band_record(cv: CrossValidation, variant: str = CHOSEN) -> dict:
    """The advisor's bands as stored: the batch band (``batch_band``, acceptance-only errors) and the anchored
    band (``anchor_band``) with their held-out tables (``band_table``, ``anchor_table``)."""
    pairs = anchor_pairs(cv, variant)
    return {"variant": variant, "regime": ADVISOR_REGIME, "batch": batch_band(cv, variant).to_json(),
            "held_out": _rounded_rows(band_table(cv, variant)),
            "anchor": anchor_band(cv, variant, ANCHOR_NOMINAL, pairs).to_json(),
            "anchor_held_out": _rounded_rows(anchor_table(cv, variant, ANCHOR_NOMINAL))}


def _rounded_rows(rows: list[dict]) -> list[dict]:
    return [{k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()} for r in rows]


def _compact_lists(text: str) -> str:
    """Indented JSON with every list of plain values (numbers, strings) on one line."""
    return re.sub(r"\[\n\s*((?:[^\[\]{}\n]+,\n\s*)*[^\[\]{}\n]+)\n\s*\]",
                  lambda m: "[" + " ".join(x.strip() for x in m.group(1).split("\n")) + "]", text)


def write_calibrations(path=None, cv: CrossValidation | None = None) -> dict:
    """Fit the chosen variant (``CHOSEN``) to the whole record and write data/calibrations.json (or ``path``):
    one calibration per (engine, version, GPU) in the record, the families' and the pooled knobs for engines
    the record has not seen, the cross-validation table and the advisor's bands."""
    rec = record()
    cv = cv or cross_validate()
    v = VARIANTS[CHOSEN]
    full = fit_engines(v, features=Features(rec.cases, v.heads))
    doc = {"about": "cost-model knobs per engine and GPU, fitted to the published record and cross-validated: "
                    "specnotes.calibrate (record, VARIANTS, fit_engines, cross_validate); regenerate with "
                    "python -m specnotes.calibrate --write",
           "model": {"variant": v.name, "what": v.what, "overlap": "none", "free": list(v.free),
                     "fixed": {"overhead": 0.0, "allreduce_latency": ALLREDUCE_LATENCY},
                     "fixed_source": "allreduce_latency: ~10 us, vLLM's custom all-reduce for small messages on H100 "
                                     "(interconnect.json, allreduce_h100_vllm_custom)",
                     "shrink": SHRINK,
                     "chosen_by": "smallest median |log ratio| leaving one source out (cross_validation)"},
           "cross_validation": {"rows": [{k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()}
                                         for r in cv.rows()],
                                "bands": {name: band_record(cv, name) for name in ("idealized", CHOSEN)},
                                "skipped": rec.skipped},
           "pooled": {"knobs": _rounded(full.knobs(("", None, ""))[0]), "fitted_to": fitted_to(rec.cases)},
           "families": {f: {"knobs": _rounded(full.knobs((f, None, ""))[0]),
                            "fitted_to": fitted_to(c for c in rec.cases if c.engine == f)} for f in full.families}}
    for key in full.keys:
        engine, version, accel = key
        mine = [c for c in rec.cases if c.key == key]
        doc.setdefault(accel, {})[calibration_name(engine, version)] = {
            "knobs": _rounded(full.knobs(key)[0]), "engine": ENGINE_NAMES.get(engine, engine), "family": engine,
            "version": version,
            "accelerator": accel, "fitted_to": fitted_to(mine),
            "method": f"specnotes.calibrate.fit_engines({v.name!r}): least squares on log S over every series of "
                      "the record, this engine's knobs shrunk toward its family's and the pooled ones"}
    for (accel, alias), name in ALIASES.items():
        if name in doc.get(accel, {}):
            doc[accel][alias] = {"alias_of": name, "why": "the name the chapters first used for this calibration"}
    path = path or resources.files("specnotes").joinpath("data", "calibrations.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_compact_lists(json.dumps(doc, indent=1)) + "\n")
    cost._stored.cache_clear()
    return doc


def stored() -> dict:
    """The whole of data/calibrations.json (a copy): per-GPU calibrations, families, pooled, model, CV."""
    return json.loads(json.dumps(cost._stored()))


def calibrations() -> dict:
    """Every stored calibration: {accelerator: {name: record}} (``cost.calibrations``)."""
    return cost.calibrations()


def calibration(accelerator_name: str, source: str) -> dict:
    """``cost.calibration``: the stored knobs of one engine on one GPU."""
    return cost.calibration(accelerator_name, source)


def _versions_of(engine: str, names) -> list[str]:
    """The stored names that are ``engine`` itself or ``engine``-VERSION (a version starts with a digit): not
    another family whose name starts the same ("sglang-moe" is not a version of "sglang")."""
    return [n for n in names if n == engine or (n.startswith(engine + "-") and n[len(engine) + 1:][:1].isdigit())]


def lookup(accelerator_name: str, engine: str, version: str | None = None,
           moe: bool = False) -> tuple[str | None, dict, str]:
    """The best calibration the record offers an engine on a GPU: (stored name or None, knobs, how it was
    found). In order: this engine and version on this GPU; this engine at another version on this GPU; the
    engine's family knobs (fitted on other GPUs); the pooled knobs of every engine. ``moe``: the target is a
    mixture of experts, whose engines are fitted as families of their own (``MOE_APART``): that family is looked
    up first, and where the record has none, the same engine's dense knobs, saying so."""
    validate.choice("accelerator_name", accelerator_name, ACCELERATORS)
    engine = str(engine).lower()
    doc = stored()
    if moe and MOE_APART and not engine.endswith(MOE_SUFFIX):
        moe_engine = engine + MOE_SUFFIX
        if any(_versions_of(moe_engine, doc.get(accelerator_name, {}))) or moe_engine in doc["families"]:
            return lookup(accelerator_name, moe_engine, version)
        name, knobs, how = lookup(accelerator_name, engine, version)
        return name, knobs, f"{how}; the record has no {ENGINE_NAMES.get(engine, engine)} serving a mixture of " \
                            "experts, so these are its dense targets' knobs"
    here = doc.get(accelerator_name, {})
    name = calibration_name(engine, version)
    label = ENGINE_NAMES.get(engine, engine) + (f" {version}" if version else "")
    if name in here:
        return name, cost.calibration(accelerator_name, name), f"fitted to {label} on {accelerator_name}"
    same = [n for n in _versions_of(engine, here) if "alias_of" not in here[n]]
    if same:  # the newest version the record has on this GPU
        newest = max(same, key=lambda n: [int(x) for x in re.findall(r"\d+", here[n]["version"] or "")])
        fitted = f"{ENGINE_NAMES.get(engine, engine)} {here[newest]['version'] or '(version not published)'}"
        asked = f"not to {label}" if version else "the newest version the record has (--engine-version not given)"
        return newest, cost.calibration(accelerator_name, newest), f"fitted to {fitted} on {accelerator_name}, {asked}"
    if engine in doc["families"]:
        gpus = sorted({g for g in doc["families"][engine]["fitted_to"]["sources"]})
        where = sorted({a for a, names in doc.items() if a in ACCELERATORS and _versions_of(engine, names)})
        return None, dict(doc["families"][engine]["knobs"]), (
            f"{ENGINE_NAMES.get(engine, engine)} was fitted on {', '.join(where)} (from {', '.join(gpus)}), not on "
            f"{accelerator_name}: its knobs are carried over")
    return None, dict(doc["pooled"]["knobs"]), (f"the record has no {label} at all: the knobs pooled over every "
                                                "engine in it")


def band_text(cv: CrossValidation | None = None, variant: str = CHOSEN) -> str:
    """The advisor's bands held out by source, as plain text (what ``--cv`` prints after the table): per batch
    bucket the points, how many the band covered, the decisive verdicts and the right ones, and the bias and
    median |log ratio| of the model's S and of the band's central estimate; then the anchored predictions by
    reach; then the goals judged (``judge_band``)."""
    cv = cv or cross_validate()
    rows, anchors_ = band_table(cv, variant), anchor_table(cv, variant, ANCHOR_NOMINAL)
    band = batch_band(cv, variant)
    lines = [f"the advisor's band ({variant}, {ADVISOR_REGIME}): the central {band.nominal:.0%} of the {band.points} "
             "held-out errors nearest in log B"
             + (", widened to the sources' spread (each source's median error), centred on the model's S"
                if band.between else "") + "; each source judged with the band built from the others",
             f"{'bucket':9} {'points':>6} {'covered':>9} {'decisive':>9} {'right':>7} {'model bias':>10} "
             f"{'median':>7} {'centre bias':>11} {'median':>7}"]
    for r in rows:
        if not r["points"]:
            lines.append(f"{r['bucket']:9} {0:6d}   (no published point)")
            continue
        right = f"{r['right']}/{r['decisive']}"
        lines.append(f"{r['bucket']:9} {r['points']:6d} {r['covered']:4d} {r['coverage']:4.0%} {r['decisive']:4d} "
                     f"{r['decisive_share']:4.0%} {right:>7} {r['model_bias']:+10.3f} {r['model_median']:7.3f} "
                     f"{r['centre_bias']:+11.3f} {r['centre_median']:7.3f}")
    for build in BAND_BUILDS:
        if build == BAND_BUILD:
            continue
        other = band_table(cv, variant, build=build)
        said = ", ".join(f"{r['bucket']} {r['coverage']:.0%}" for r in other[:len(BUCKETS)] if r.get("points"))
        every = other[-1]
        lines.append(f"built as {build!r} instead: covered {said}; {every['decisive_share']:.0%} decisive, "
                     f"{every['right']}/{every['decisive']} right; centre median {every['centre_median']:.3f}, "
                     f"bias at B > 1 {other[-2]['centre_bias']:+.3f}")
    lines += ["", f"anchored on one measured batch ({variant}): pairs of points of one series, the central "
                  f"{ANCHOR_NOMINAL:.0%} of the nearest {min_points(ANCHOR_NOMINAL)} pairs in log(B / measured B)",
              f"{'reach':15} {'pairs':>6} {'median':>7} {'bias':>7} {'covered':>8}"]
    for r in anchors_:
        lines.append(f"{r['distance']:15} {r['pairs']:6d} " + ("   (none)" if not r["pairs"] else
                     f"{r['median']:7.3f} {r['bias']:+7.3f} {r['coverage']:8.0%}"))
    lines += ["", "goals (issue 34): " + judge_band(rows, anchors_).sentence,
              "the model alone: " + judge_band(rows, anchors_, "model").sentence]
    return "\n".join(lines)


def skip_text(rec: Record | None = None) -> str:
    """The record summary as plain text (``skip_summary``): per rule, the series and points it keeps out, and how
    many of them it alone keeps out."""
    rows = skip_summary(rec)
    lines = [f"{'kept out by the rule':22} {'series':>6} {'points':>6}  {'by it alone':>11}  what it says"]
    for r in rows:
        alone = f"{r['alone series']} ({r['alone points']})"
        lines.append(f"{r['rule']:22} {r['series']:6d} {r['points']:6d}  {alone:>11}  {r['what']}")
    return "\n".join(lines)


def family_text(rows: list[dict]) -> str:
    """``family_table`` as plain text (what ``--cv`` prints)."""
    lines = [f"{'family':24} {'sources':>7} {'acceptance only':>23} {'anchored':>23} {'band: covered':>14} "
             f"{'decisive':>9} {'right':>6}",
             f"{'':24} {'':7} {'points median   bias':>23} {'points median   bias':>23}"]
    cell = lambda r: f"{r['points']:6d} {r['median']:6.3f} {r['bias']:+6.3f}" if r else f"{'(none)':>20}"
    for r in rows:
        band = r["band"]
        tail = (f"{band['covered']:5d} {band['coverage']:6.0%} {band['decisive']:4d} {band['decisive_share']:4.0%} "
                f"{band['right']:3d}/{band['decisive']:<3d}" if band else "")
        lines.append(f"{r['family']:24} {r['sources']:7d} {cell(r['acceptance only']):>23} {cell(r['anchored']):>23} "
                     f"{tail}")
    return "\n".join(lines)


def shared_moe(rec: Record) -> Record:
    """``rec`` with the MoE targets' engines back in their dense families (``MOE_APART`` off)."""
    strip = lambda c: replace(c, engine=c.engine.removesuffix(MOE_SUFFIX))
    return Record(tuple(strip(c) for c in rec.cases), rec.skipped, rec.kinds)


def other_form_factor(rec: Record) -> Record:
    """``rec`` with every GPU the record assumed (``FORM_FACTORS``) priced as the other form factor."""
    swap = {chosen: other for chosen, other in FORM_FACTORS.values()}
    return Record(tuple(replace(c, accel=swap[c.accel]) if c.gpu_assumed else c for c in rec.cases), rec.skipped,
                  rec.kinds)


def alternative_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> list[dict]:
    """The record's choices judged held out by source, each against its alternative: MoE engines fitted apart
    (``MOE_APART``) or in their dense families; a bare "H100" priced as the SXM part or the PCIe one (the
    points of the family "GPU form factor assumed", then every point). Per row and regime: median and bias."""
    cv = cv or cross_validate()
    rows = []

    def add(what, other_cv, mask=None):
        for regime in REGIMES:
            keep = cv.record.scored & regime_mask(cv.record, regime) & (True if mask is None else mask)
            if not keep.any():
                continue
            a = cv.summary("source", variant, mask, regime)
            b = other_cv.summary("source", variant, mask, regime)
            rows.append({"choice": what, "regime": regime, "points": a["points"],
                         "median": a["median |log ratio|"], "bias": a["bias"],
                         "other median": b["median |log ratio|"], "other bias": b["bias"]})

    if any(c.moe for c in cv.record.cases):
        add("MoE engines fitted apart (other: with their dense family)",
            cross_validate((variant,), ("source",), rec=shared_moe(cv.record)))
    if any(c.gpu_assumed for c in cv.record.cases):
        other = cross_validate((variant,), ("source",), rec=other_form_factor(cv.record))
        add("'H100' priced as SXM (other: as PCIe), its points", other, family_mask(cv.record,
                                                                                 "GPU form factor assumed"))
        add("'H100' priced as SXM (other: as PCIe), every point", other)
    return rows


def alternative_text(rows: list[dict]) -> str:
    lines = [f"{'choice':58} {'regime':15} {'points':>6} {'median':>7} {'bias':>7} {'other':>7} {'bias':>7}"]
    for r in rows:
        lines.append(f"{r['choice'][:58]:58} {r['regime']:15} {r['points']:6d} {r['median']:7.3f} {r['bias']:+7.3f} "
                     f"{r['other median']:7.3f} {r['other bias']:+7.3f}")
    return "\n".join(lines)


def cv_table(cv: CrossValidation | None = None) -> str:
    """The cross-validation as plain text (what ``--cv`` prints): per scheme and variant, the points predicted
    from their published acceptance alone, the anchored points, and the two mixed; leaving one source out,
    which of issue 24's goals (``GOALS``, ``judge``) each row meets (m: median, b: bias, v: verdict, c:
    coverage of that regime's band; "-" not met). A stored variant fitted to a source of the record is
    marked "not held out"."""
    cv = cv or cross_validate()
    lines = [f"{'variant':28} {'held out':12} {'regime':15} {'points':>6} {'median':>7} {'bias':>7} {'verdict':>8} "
             f"{'goals':>5}  worst point"]
    coverage = {(v, r): float(held_out_band(cv, v, r)["covered"].mean()) for v in cv.predicted.get("source", {})
                for r in REGIMES}
    for r in cv.rows():
        goals = ""
        if r["scheme"] == "source":
            met = judge(r, coverage[(r["variant"], r["regime"])]).met
            goals = "".join(letter if met[g] else "-" for g, letter in zip(GOALS, "mbvc", strict=True))
        lines.append(f"{r['variant']:28} {r['held out']:12} {r['regime']:15} {r['points']:6d} "
                     f"{r['median |log ratio|']:7.3f} {r['bias']:+7.3f} {r['verdict agreement']:8.1%} {goals:>5}  "
                     f"{r['worst']}")
    for name, v in VARIANTS.items():
        if v.fitted_on and name in cv.predicted.get("source", {}):
            n = int((cv.record.scored & np.array([c.source == v.fitted_on for c in cv.record.cases])).sum())
            lines.append(f"\nnot held out: {name}'s knobs were fitted to {v.fitted_on}, the source of {n} of the "
                         f"{int(cv.record.scored.sum())} points; its rows are not out-of-sample.")
    lines.append(f"goals (leaving one source out, per row): median <= {GOALS['median']}, |bias| <= {GOALS['bias']}, "
                 f"verdict >= {GOALS['verdict']:.0%}, band coverage >= {GOALS['coverage']:.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m specnotes.calibrate [--cv] [--write]``: print the stored calibrations; ``--cv`` the
    cross-validation of every variant over the whole record; ``--write`` refits the chosen variant and
    rewrites data/calibrations.json. Anything else exits with status 2."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m specnotes.calibrate",
                                     description="The cost model's engine calibrations and their out-of-sample error.")
    parser.add_argument("--cv", action="store_true", help="cross-validate every variant (leave one series out, "
                                                          "leave one source out) and print the table")
    parser.add_argument("--write", action="store_true", help="refit the chosen variant, rewrite data/calibrations.json")
    args = parser.parse_args(argv)
    cv = cross_validate() if (args.cv or args.write) else None
    if args.cv:
        rec = cv.record
        print(f"The published record: {int(rec.scored.sum())} points predicted ({len(rec.cases)} with the anchors) "
              f"in {len(rec.series())} series of {len({c.source for c in rec.cases})} sources; "
              f"{len(rec.skipped)} series the model cannot represent.\n")
        print(skip_text(rec))
        print()
        print(cv_table(cv))
        best = cv.best("source")
        print(f"\nbest leaving one source out: {best}; stored calibrations use: {CHOSEN}")
        print()
        print(band_text(cv))
        print()
        print(f"by family ({CHOSEN}, leaving one source out; the band over the acceptance-only points)")
        print(family_text(family_table(cv)))
        print()
        print("the record's choices against their alternatives (held out by source)")
        print(alternative_text(alternative_table(cv)))
        print()
        print(term_text(term_search(cv)))
    if args.write:
        write_calibrations(cv=cv)
        print("written to data/calibrations.json")
    if not args.cv:
        for accel, names in cost.calibrations().items():
            for name, r in names.items():
                print(accel, name, r.get("knobs", f"= {r.get('alias_of')}"))
    if not args.write:
        print("not written (--write rewrites data/calibrations.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
