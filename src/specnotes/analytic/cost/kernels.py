"""What one pass does, per device: its kernels' FLOPs, HBM bytes and all-reduce link bytes (``Kernel``,
``PassCost``): the matmuls, attention over the KV cache, tensor parallelism's all-reduces, a lone GEMM, the
logits. What they take in seconds is ``roofline``'s."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specnotes import validate
from specnotes.analytic.cost.moe_shapes import MoEShape, _pair_flops, expected_experts
from specnotes.analytic.cost.shapes import ModelShape

ACT_BYTES = 2  # activations moved by an all-reduce: bf16


@dataclass(frozen=True)
class Kernel:
    """One kernel's work: FLOPs, HBM bytes, and bytes over the interconnect (all-reduce) in ``calls`` calls."""

    name: str
    flops: float
    bytes: float
    link_bytes: float = 0.0
    calls: int = 0


@dataclass(frozen=True)
class PassCost:
    """Totals of a pass (``flops``, ``bytes`` of HBM traffic, ``tokens`` processed) and the kernels
    they come from. ``compute``: the dtype its math runs in, if known."""

    flops: float
    bytes: float
    tokens: int
    kernels: tuple[Kernel, ...] = field(default=(), compare=False)
    compute: str | None = None
    layers: int = field(default=0, compare=False)  # decoder layers the pass runs (each pays layer_overhead)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def parts(self) -> tuple[Kernel, ...]:
        return self.kernels or (Kernel("pass", self.flops, self.bytes),)

    @property
    def link_bytes(self) -> float:
        return sum(k.link_bytes for k in self.kernels)

    def __add__(self, other: PassCost) -> PassCost:
        if self.compute and other.compute and self.compute != other.compute:
            raise validate.BadArgument(f"cannot add passes computed in {self.compute} and {other.compute}")
        return PassCost(self.flops + other.flops, self.bytes + other.bytes, self.tokens + other.tokens,
                        self.parts + other.parts, self.compute or other.compute, self.layers + other.layers)


def _check_pass(batch, new_tokens, context, tp=1) -> tuple[int, int, int, int]:
    return (validate.integer("batch", batch, low=1), validate.integer("new_tokens", new_tokens, low=1),
            validate.integer("context", context, low=0), validate.integer("tp", tp, low=1))


def _kv_token_per_device(shape: ModelShape, tp: int) -> float:
    """KV bytes per token on one of tp devices: KV heads split over the devices; with fewer heads than
    devices each device keeps one (replicated). An MLA latent serves every head: each device keeps all of it."""
    if isinstance(shape, MoEShape) and shape.mla:
        return shape.kv_bytes_per_token
    return shape.kv_bytes_per_token * math.ceil(shape.n_kv_heads / tp) / shape.n_kv_heads


def _matmul(shape: ModelShape, tokens: int, tp: int) -> Kernel:
    """Every matmul of a pass as one kernel (``_matmuls`` keeps a MoE's experts apart)."""
    if isinstance(shape, MoEShape):  # FLOPs of the active experts, bytes of the distinct experts touched
        read = shape.weight_bytes * shape.touched_params(tokens)
        return Kernel("matmul", 2 * shape.active_params * tokens / tp, read / tp)
    return Kernel("matmul", 2 * shape.params * tokens / tp, shape.weight_bytes_total / tp)


def _matmuls(shape: ModelShape, tokens: int, tp: int) -> tuple[Kernel, ...]:
    """The matmul kernels of a pass over ``tokens`` tokens: for a dense shape one, "matmul" (every weight read
    once, 2 FLOPs per weight per token); for a MoE two, because they run as different kernels at different
    intensities: "matmul", what every token runs (attention projections, routers, shared experts, dense layers,
    LM head), at 2·T/w FLOPs per byte, and "experts", the grouped GEMM over the E[D](T) distinct experts touched,
    m per token, at 2·T·m/(E[D]·w): the rows each touched expert gets."""
    if not isinstance(shape, MoEShape):
        return (_matmul(shape, tokens, tp),)
    w, e = shape.weight_bytes, shape.expert_params
    touched = shape.moe_layers * expected_experts(shape.n_experts, shape.experts_per_token, tokens)
    return (Kernel("matmul", 2 * shape.always_params * tokens / tp, w * shape.always_params / tp),
            Kernel("experts", 2 * shape.moe_layers * shape.experts_per_token * e * tokens / tp, w * touched * e / tp))


def _attention(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> Kernel:
    flops = _pair_flops(shape) * (shape.n_heads / tp) * shape.n_layers * attended_pairs(new_tokens, context) * batch
    return Kernel("attention", flops, batch * _kv_token_per_device(shape, tp) * (context + new_tokens))


def _allreduce(shape: ModelShape, tokens: int, tp: int) -> Kernel:
    calls = 2 * shape.n_layers
    return Kernel("all-reduce", 0.0, 0.0, calls * 2 * (tp - 1) / tp * tokens * shape.d_model * ACT_BYTES, calls)


def _forward(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> tuple[Kernel, ...]:
    """The kernels of one pass on one of tp devices (arguments already checked)."""
    tokens = batch * new_tokens
    kernels = _matmuls(shape, tokens, tp) + (_attention(shape, batch, new_tokens, context, tp),)
    return kernels + (_allreduce(shape, tokens, tp),) if tp > 1 else kernels


def _as_cost(kernels: tuple[Kernel, ...], tokens: int, compute: str | None, layers: int = 0) -> PassCost:
    return PassCost(sum(k.flops for k in kernels), sum(k.bytes for k in kernels), tokens, kernels, compute, layers)


def matmul_cost(shape: ModelShape, batch: int, new_tokens: int, tp: int = 1) -> PassCost:
    """Projections and LM head, per device: every weight read once, 2 FLOPs per weight per token (a MoE: its
    experts a kernel of their own, ``_matmuls``)."""
    batch, new_tokens, _, tp = _check_pass(batch, new_tokens, 0, tp)
    return _as_cost(_matmuls(shape, batch * new_tokens, tp), batch * new_tokens, shape.compute)


def gemm_cost(batch: int, d_in: int, d_out: int, weight_bytes: float = 2, act_bytes: float | None = None) -> PassCost:
    """y = x·W with x [batch, d_in], W [d_in, d_out]: 2·B·d_in·d_out FLOPs; W read once, x read, y written.

    AI = 2·B·d_in·d_out / (w·d_in·d_out + a·B·(d_in + d_out)) → 2B/w while B ≪ d_in, d_out.
    """
    batch = validate.integer("batch", batch, low=1)
    d_in, d_out = validate.integer("d_in", d_in, low=1), validate.integer("d_out", d_out, low=1)
    weight_bytes = validate.number("weight_bytes", weight_bytes, low=0, low_open=True)
    act_bytes = weight_bytes if act_bytes is None else validate.number("act_bytes", act_bytes, low=0)
    nbytes = weight_bytes * d_in * d_out + act_bytes * batch * (d_in + d_out)
    return PassCost(2 * batch * d_in * d_out, nbytes, batch)


def attended_pairs(new_tokens: int, context: int) -> int:
    """(query, key) pairs per sequence: new token i sees the context and new tokens 0..i."""
    return new_tokens * context + new_tokens * (new_tokens + 1) // 2


def attention_cost(shape: ModelShape, batch: int, new_tokens: int, context: int = 0, tp: int = 1) -> PassCost:
    """Attention over the KV cache, per device: reads each sequence's cache once, writes the new entries."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    return _as_cost((_attention(shape, batch, new_tokens, context, tp),), batch * new_tokens, shape.compute)


def allreduce_cost(shape: ModelShape, batch: int, new_tokens: int, tp: int) -> PassCost:
    """Two all-reduces per layer (after attention, after the MLP) of the [B·n, d_model] activations.

    A ring all-reduce sends and receives 2(tp−1)/tp of the message per device (the nccl-tests "bus
    bandwidth" convention), so its link bytes per device are 2(tp−1)/tp · B·n·d_model·2 per call.
    """
    batch, new_tokens, _, tp = _check_pass(batch, new_tokens, 0, tp)
    return _as_cost((_allreduce(shape, batch * new_tokens, tp),) if tp > 1 else (), 0, shape.compute)


def forward_cost(shape: ModelShape, batch: int, new_tokens: int, context: int = 0, tp: int = 1) -> PassCost:
    """A pass of ``shape`` over B sequences × n new tokens after L cached ones, per device (tp devices)."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    return _as_cost(_forward(shape, batch, new_tokens, context, tp), batch * new_tokens, shape.compute,
                    shape.n_layers)


def decode_cost(shape: ModelShape, batch: int, context: int = 0, tp: int = 1) -> PassCost:
    return forward_cost(shape, batch, 1, context, tp)


def verify_cost(shape: ModelShape, batch: int, k: int, context: int = 0, tp: int = 1) -> PassCost:
    """One target pass scoring k drafted tokens plus the bonus position: n = k + 1."""
    k = validate.integer("k", k, low=0)
    return forward_cost(shape, batch, k + 1, context, tp)


def mixed_verify_cost(shape: ModelShape, batch: int, k: int, speculating: int = 1, context: int = 0) -> PassCost:
    """A batch where only ``speculating`` of the ``batch`` sequences verify k drafts.

    Tokens per weight read: B + speculating·k. With one speculating sequence this is the
    source note's "B + k"; with all of them it is B(k + 1).
    """
    batch = validate.integer("batch", batch, low=1)
    k = validate.integer("k", k, low=0)
    speculating = validate.integer("speculating", speculating, low=0, high=batch)
    context = validate.integer("context", context, low=0)
    tokens = batch + speculating * k
    kernels = list(_matmuls(shape, tokens, 1))
    if speculating:
        kernels.append(_attention(shape, speculating, k + 1, context, 1))
    if batch > speculating:
        kernels.append(_attention(shape, batch - speculating, 1, context, 1))
    return _as_cost(tuple(kernels), tokens, shape.compute)


def logits_cost(shape: ModelShape, batch: int, new_tokens: int, logit_bytes: float = 4) -> PassCost:
    """Sampling's share of a pass: the [B·n, V] logits written by the LM head and read back by the
    softmax and the sampler (2 · logit_bytes per entry), ~5 FLOPs per entry (max, exp, sum, divide,
    compare). Not part of ``forward_cost``: the book drops it and Chapter 5 shows its size."""
    batch, new_tokens, _, _ = _check_pass(batch, new_tokens, 0)
    entries = batch * new_tokens * shape.vocab
    logit_bytes = validate.number("logit_bytes", logit_bytes, low=0, low_open=True)
    return PassCost(5.0 * entries, 2 * logit_bytes * entries, 0,
                    (Kernel("logits", 5.0 * entries, 2 * logit_bytes * entries),), None)
