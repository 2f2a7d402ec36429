"""One published point as the model sees it (``Case``) and a series' points read as cases (``cases``): each
point's own k or tree (``point_draft``) and acceptance, the load (``LOADS``), and the engine that measured it
(``engine_id``; MoE targets' engines are families of their own, ``MOE_APART``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.hardware import Accelerator
from specnotes.record import published
from specnotes.record.calibrate.shapes import Unpriceable, _draft, deployed, shape


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
    base = shape(setup.get("target"))
    target = deployed(base, setup)  # its weight and KV widths as served
    # an MTP module is part of the checkpoint (its format); an EAGLE head or a draft model is its own, in bf16
    draft = _draft(setup, target if setup.get("drafter") in ("mtp", "self-speculation") else base)
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
