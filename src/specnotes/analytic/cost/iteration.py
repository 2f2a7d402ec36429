"""One speculative iteration's time and the speedup it buys: the draft passes (``draft_time``), T_iter = T_draft
+ T_verify (``iteration_time``) and S(B) for a chain (``batch_speedup``) or a tree with a published mean
(``tree_speedup``); ``speedup_from_times`` for times however obtained."""

from __future__ import annotations

from specnotes import validate
from specnotes.analytic.cost.acceptance import expected_tokens
from specnotes.analytic.cost.drafters import Draft, draft_passes, levels
from specnotes.analytic.cost.kernels import _check_pass
from specnotes.analytic.cost.roofline import _Engine, _engine
from specnotes.analytic.cost.shapes import ModelShape


def _draft_seconds(draft: Draft, eng: _Engine, batch: int, k: int, context: int, target: ModelShape | None,
                   widths=None) -> float:
    return sum(eng.pass_seconds(p) for p in draft_passes(draft, batch, k, context, eng.tp, target, widths,
                                                         eng.dtype))


def draft_time(draft: Draft, accel, batch: int, k: int, context: int = 0, dtype: str | None = None,
               overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
               target: ModelShape | None = None, draft_overhead: float | None = None,
               layer_overhead: float = 0.0, widths=None, expert_slowdown: float = 0.0) -> float:
    """Time to draft k tokens per sequence for B sequences whose draft-side KV holds ``context`` tokens
    (``draft_passes``; ``widths``: a tree's tokens per sequence at each level).

    Each draft pass pays ``draft_overhead`` where given (as in a calibration), else ``overhead``, and
    ``layer_overhead`` for each decoder layer it runs; an early exit needs the ``target``.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    return _draft_seconds(draft, eng, batch, k, context, target, widths)


def iteration_time(target: ModelShape, draft: Draft, accel, batch: int, k: int, context: int = 0,
                   dtype: str | None = None, overhead: float = 0.0, draft_overhead: float | None = None,
                   overlap: str = "kernel", draft_context: int | None = None, tp: int = 1,
                   allreduce_latency: float = 0.0, layer_overhead: float = 0.0, widths=None,
                   expert_slowdown: float = 0.0) -> float:
    """T_iter = T_draft(k tokens) + T_target(B, k + 1 tokens).

    ``draft_overhead`` (per draft pass) defaults to ``overhead``; ``draft_context``, the draft's own KV
    length (a StreamingLLM window, say), defaults to ``context``; ``widths``: a tree's tokens per
    sequence at each draft level (then k is the number of tree tokens verified).
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    return _iteration_seconds(target, draft, eng, batch, k, context, draft_ctx, widths)


def _iteration_seconds(target, draft, eng: _Engine, batch, k, context, draft_context, widths=None) -> float:
    verify = eng.seconds(target, batch, k + 1, context, eng.overhead, eng.dtype)
    return _draft_seconds(draft, eng, batch, k, draft_context, target, widths) + verify


def speedup_from_times(alpha: float, k: int, t_decode: float, t_draft_step: float, t_verify: float) -> float:
    """S = E[N]·T_decode / (k·T_draft_step + T_verify), for times however obtained (modelled or measured)."""
    t_decode = validate.number("t_decode", t_decode, low=0)
    t_draft_step = validate.number("t_draft_step", t_draft_step, low=0)
    t_verify = validate.number("t_verify", t_verify, low=0, low_open=True)
    return expected_tokens(alpha, k) * t_decode / (k * t_draft_step + t_verify)


def batch_speedup(target: ModelShape, draft: Draft, accel, batch: int, k: int, alpha: float, context: int = 0,
                  dtype: str | None = None, overhead: float = 0.0, draft_overhead: float | None = None,
                  overlap: str = "kernel", draft_context: int | None = None, tp: int = 1,
                  allreduce_latency: float = 0.0, layer_overhead: float = 0.0, expert_slowdown: float = 0.0) -> float:
    """S(B) = E[N]·T_target(B, 1) / (T_draft(B, k) + T_target(B, k + 1)). k = 0 gives 1.

    ``overhead``: seconds added to every target pass; ``draft_overhead`` to every draft pass (default:
    ``overhead``); ``layer_overhead``: seconds per decoder layer of every pass; ``overlap``: "kernel" |
    "pass" | "none"; ``draft_context``: the draft's KV length (default: ``context``); ``tp``:
    tensor-parallel devices; ``allreduce_latency``: seconds per all-reduce; ``expert_slowdown``: a MoE's expert
    GEMM at 1/(1 + expert_slowdown) of the peak.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    en = expected_tokens(alpha, k)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    return _speedup(target, draft, eng, batch, k, en, context, draft_ctx)


def tree_speedup(target: ModelShape, draft: Draft, accel, batch: int, widths, verified: int, tokens: float,
                 context: int = 0, dtype: str | None = None, draft_context: int | None = None, **knobs) -> float:
    """S of tree (or chain) speculation with a published mean: the draft's levels (``widths``: tokens per
    sequence at each level, the first usually 1), one target pass over the ``verified`` tree tokens plus the
    bonus position, ``tokens`` per iteration on average (no i.i.d. α for a tree).

    S = tokens · T_target(B, 1) / (Σ_levels T_draft + T_target(B, verified + 1)). A chain of k is
    ``widths=(1,)*k, verified=k``: then this is ``batch_speedup`` at the α whose E[N] is ``tokens``.
    ``knobs``: the time functions' keyword arguments (overlap, overheads, tp, ...).
    """
    batch, _, context, _ = _check_pass(batch, 1, context)
    widths = levels(0, widths)
    verified = validate.integer("verified", verified, low=len(widths))
    tokens = validate.number("tokens", tokens, low=1, high=verified + 1)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, **knobs)
    plain = eng.seconds(target, batch, 1, context, eng.overhead, eng.dtype)
    return tokens * plain / _iteration_seconds(target, draft, eng, batch, verified, context, draft_ctx, widths)


def _speedup(target, draft, eng: _Engine, batch, k, en, context, draft_context) -> float:
    plain = eng.seconds(target, batch, 1, context, eng.overhead, eng.dtype)
    return en * plain / _iteration_seconds(target, draft, eng, batch, k, context, draft_context)
