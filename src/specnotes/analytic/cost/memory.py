"""What fits in memory: the weights on each device (``weights_per_device``) and the largest batch whose weights and
KV caches fit (``max_batch``)."""

from __future__ import annotations

import math

from specnotes import validate
from specnotes.analytic.cost.drafters import Draft, EagleHead, Heads, SinglePass
from specnotes.analytic.cost.kernels import _kv_token_per_device
from specnotes.analytic.cost.shapes import ModelShape
from specnotes.analytic.hardware import accelerator


def _draft_memory(draft: Draft, tp: int, k: int) -> tuple[float, float]:
    """(weight bytes, KV bytes per cached token) a draft adds on each of tp devices; Medusa keeps one
    head per drafted position (at least one)."""
    if isinstance(draft, ModelShape):
        return draft.memory_bytes / tp, _kv_token_per_device(draft, tp)
    if isinstance(draft, SinglePass):
        return draft.shape.params * draft.shape.weight_bytes / tp, 0.0
    if isinstance(draft, Heads):
        return max(k, 1) * draft.shape.params * draft.shape.weight_bytes / tp, 0.0
    if isinstance(draft, EagleHead):  # it shares the target's token embedding
        return draft.params * draft.layer.weight_bytes / tp, _kv_token_per_device(draft.layer, tp)
    return 0.0, 0.0  # an early exit shares the target's weights and KV; n-gram has none


def weights_per_device(target: ModelShape, draft: Draft | None, *, k: int = 0, tp: int = 1) -> float:
    """Bytes of weights on each of ``tp`` devices: the target's and the draft's (a draft equal to the target,
    self-speculation, runs the target's own weights and adds none)."""
    draft_weights = 0.0 if draft is None or draft == target else _draft_memory(draft, tp, k)[0]
    return target.memory_bytes / tp + draft_weights


def max_batch(target: ModelShape, draft: Draft | None, accel, context: int, *, k: int = 0, tp: int = 1,
              draft_context: int | None = None, reserve: float = 0.0) -> int | None:
    """The largest batch whose weights plus both KV caches fit on each of ``tp`` devices.

    Memory per device: (target + draft weights)/tp + B·(KV_target(L + k + 1) + KV_draft(L_draft + k + 1))/tp
    + ``reserve`` (bytes you keep for activations and the runtime; 0 by default) ≤ the accelerator's
    memory. 0 if the weights alone do not fit; None if the accelerator has no memory size. A draft equal
    to the target (self-speculation) adds no weights, and no cache unless ``draft_context`` is shorter than
    ``context`` (a StreamingLLM window kept beside the full cache).
    """
    accel = accelerator(accel)
    context = validate.integer("context", context, low=0)
    k = validate.integer("k", k, low=0)
    tp = validate.integer("tp", tp, low=1)
    reserve = validate.number("reserve", reserve, low=0)
    if not accel.memory:
        return None
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    draft_kv = _draft_memory(draft, tp, k)[1] if draft is not None else 0.0
    if draft == target and draft_ctx >= context:  # self-speculation with its full context reads the target's
        draft_kv = 0.0  # own cache (the same keys and values); a window keeps a small cache of its own
    kv_token = _kv_token_per_device(target, tp)
    per_seq = kv_token * (context + k + 1) + draft_kv * (draft_ctx + k + 1)
    free = accel.memory - weights_per_device(target, draft, k=k, tp=tp) - reserve
    return max(0, math.floor(free / per_seq))
