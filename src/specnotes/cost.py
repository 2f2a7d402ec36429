"""The analytic cost model of speculative decoding (DESIGN.md §2).

One forward pass over ``batch`` sequences, each adding ``new_tokens`` tokens after ``context``
cached ones, runs two kinds of kernel (per layer; every layer is the same, so we add them up):

- the matmuls (projections and LM head): 2·P·B·n FLOPs, the weights w·P read once per pass;
- attention over the KV cache: 4·d_head·n_heads FLOPs per (query, key) pair and layer (QKᵀ and AV),
  each sequence's cache read once, B·KV(L), and the new entries written, B·n·KV(1).

Dropped, because they are small next to these at the shapes the book uses: activations
(B·n·d_model per layer and matmul), the embedding gather, norms, rotary embeddings, and the
logits/softmax (``logits_cost`` prices those separately; Chapter 5 says when they matter).

Time of a pass (``roofline_time``), with ``overlap``:

- ``"kernel"`` (default): the sum over kernels of max(bytes/BW, FLOPs/peak). Each kernel overlaps
  its own memory traffic and math, but kernels run one after another, so attention's KV reads cannot
  hide the matmuls' FLOPs. This is the idealized bound the chapters teach. Because every matmul has
  the same intensity (2·B·n/w), summing per matmul equals one max over all of them: the matmuls and
  the attention are the two kernels that matter.
- ``"pass"``: one max over the whole pass (perfect overlap across kernels; the book's first model).
- ``"none"``: memory time plus compute time, no overlap at all.

plus the engine's fixed costs: ``overhead`` per target pass, ``draft_overhead`` per draft pass and
``layer_overhead`` per decoder layer of every pass (launches, the small kernels a layer runs, attention
outside a piecewise CUDA graph). The idealized model has none; a calibration (``calibration``, fitted
and cross-validated in Chapter 6, ``specnotes.calibrate``) supplies them. With tensor parallelism ``tp``, each
device holds 1/tp of the weights, the query heads and the KV heads (KV heads are replicated when
there are fewer than tp), and every layer ends its attention and its MLP with an all-reduce of the
activations, which never overlaps with compute. Passes that run one after another add. An
all-reduce costs its bytes at the datasheet link bandwidth plus ``allreduce_latency`` per call. That
latency is 0 unless you pass one: it belongs to the collective library and its algorithm (NCCL rings
and trees, vLLM's custom all-reduce) more than to the GPU, and no datasheet gives it, so the idealized
model leaves it out and a calibration supplies a measured value (Chapter 6; ``interconnect.json``).

A draft is one of five kinds (``draft_time``, ``draft_passes``): a draft *model* (a ``ModelShape``: k
sequential passes of one token), ``EarlyExit(layers)`` (the target's first layers and its head, k
passes), ``SinglePass(shape)`` (one pass of one set of weights over k positions: block/parallel
drafters, intensity B·k), ``Heads(shape)`` (k heads with their own weights, one position each: Medusa,
intensity B per head), ``EagleHead`` (an EAGLE head: fc, decoder layer, its own LM head; its first pass
runs every verified token) and ``NGRAM`` (no weights: prompt lookup). A tree drafts ``widths[i]`` tokens
per sequence at level i and verifies its tree tokens in one target pass (``tree_speedup``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from importlib import resources

from specnotes import validate
from specnotes.hardware import ACCELERATORS, DTYPE_BYTES, Accelerator, accelerator, usable_dtype

OVERLAPS = ("kernel", "pass", "none")
ACT_BYTES = 2  # activations moved by an all-reduce: bf16


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer. ``weight_bytes`` and ``kv_bytes`` are bytes per weight and per
    cached K/V element; ``compute`` is the dtype the matmuls run in (its peak is used), so weight-only
    quantization is ``weight_bytes=0.5, compute="bf16"`` (see ``weight_only``)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    weight_bytes: float = 2
    kv_bytes: float = 2
    name: str = ""
    compute: str = "bf16"
    tied_embeddings: bool = False
    head_dim: int | None = None  # None: d_model / n_heads (Llama); Qwen3-32B and Qwen3-0.6B set their own

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab"):
            validate.integer(name, getattr(self, name), low=1)
        validate.number("weight_bytes", self.weight_bytes, low=0, low_open=True)
        validate.number("kv_bytes", self.kv_bytes, low=0, low_open=True)
        validate.choice("compute", self.compute, DTYPE_BYTES)
        if self.head_dim is not None:
            validate.integer("head_dim", self.head_dim, low=1)
        if (self.head_dim is None and self.d_model % self.n_heads) or self.n_heads % self.n_kv_heads:
            raise validate.BadArgument("d_model must be a multiple of n_heads (or give head_dim), and n_heads of "
                                       "n_kv_heads")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @cached_property
    def layer_params(self) -> int:
        """Q and O (d_model × n_heads·d_head each), K and V (d_model × n_kv_heads·d_head each), gated MLP."""
        attention = 2 * self.d_model * self.n_heads * self.d_head + 2 * self.d_model * self.n_kv_heads * self.d_head
        mlp = 3 * self.d_model * self.d_ff  # gated (SwiGLU): gate, up, down
        return attention + mlp

    @cached_property
    def params(self) -> int:
        """Matmul parameters: every layer's projections plus the LM head (not the embedding gather)."""
        return self.n_layers * self.layer_params + self.d_model * self.vocab

    @cached_property
    def weight_bytes_total(self) -> float:
        return self.weight_bytes * self.params

    @cached_property
    def memory_bytes(self) -> float:
        """Bytes the weights occupy: the matmul weights plus an untied embedding table."""
        embedding = 0 if self.tied_embeddings else self.d_model * self.vocab
        return self.weight_bytes * (self.params + embedding)

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token in every layer."""
        return 2 * self.n_layers * self.n_kv_heads * self.d_head * self.kv_bytes

    def in_dtype(self, dtype: str) -> ModelShape:
        """The same model with weights, KV cache and math in ``dtype``."""
        validate.choice("dtype", dtype, DTYPE_BYTES)
        return replace(self, weight_bytes=DTYPE_BYTES[dtype], kv_bytes=DTYPE_BYTES[dtype], compute=dtype)

    def weight_only(self, bits: int) -> ModelShape:
        """Weight-only quantization: ``bits``-bit weights, dequantized on the fly, math and KV unchanged."""
        validate.integer("bits", bits, low=1, high=16)
        return replace(self, weight_bytes=bits / 8, name=f"{self.name} (w{bits})" if self.name else "")


# Published shapes (config.json of each model on the Hugging Face hub: num_hidden_layers, hidden_size,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings, head_dim).
LLAMA_3_8B = ModelShape(32, 4096, 32, 8, 14336, 128256, name="Llama-3-8B")
LLAMA_3_70B = ModelShape(80, 8192, 64, 8, 28672, 128256, name="Llama-3-70B")
LLAMA_3_2_1B = ModelShape(16, 2048, 32, 8, 8192, 128256, name="Llama-3.2-1B", tied_embeddings=True)
LLAMA_3_1_8B = replace(LLAMA_3_8B, name="Llama-3.1-8B")  # the Llama 3 architecture; the long-context RoPE
LLAMA_3_1_70B = replace(LLAMA_3_70B, name="Llama-3.1-70B")  # scaling changes no matmul or cache size
QWEN3_8B = ModelShape(36, 4096, 32, 8, 12288, 151936, name="Qwen3-8B")
QWEN3_32B = ModelShape(64, 5120, 64, 8, 25600, 151936, name="Qwen3-32B", head_dim=128)  # 64 × 128 ≠ 5120
QWEN3_0_6B = ModelShape(28, 1024, 16, 8, 3072, 151936, name="Qwen3-0.6B", tied_embeddings=True, head_dim=128)
QWEN3_1_7B = ModelShape(28, 2048, 16, 8, 6144, 151936, name="Qwen3-1.7B", tied_embeddings=True, head_dim=128)
PRESETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_2_1B, LLAMA_3_1_8B, LLAMA_3_1_70B, QWEN3_8B,
                               QWEN3_32B, QWEN3_0_6B, QWEN3_1_7B)}


# ---------------------------------------------------------------------------------------------- costs


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
    if isinstance(shape, MoEShape):  # FLOPs of the active experts, bytes of the distinct experts touched
        read = shape.weight_bytes * shape.touched_params(tokens)
        return Kernel("matmul", 2 * shape.active_params * tokens / tp, read / tp)
    return Kernel("matmul", 2 * shape.params * tokens / tp, shape.weight_bytes_total / tp)


def _attention(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> Kernel:
    flops = _pair_flops(shape) * (shape.n_heads / tp) * shape.n_layers * attended_pairs(new_tokens, context) * batch
    return Kernel("attention", flops, batch * _kv_token_per_device(shape, tp) * (context + new_tokens))


def _allreduce(shape: ModelShape, tokens: int, tp: int) -> Kernel:
    calls = 2 * shape.n_layers
    return Kernel("all-reduce", 0.0, 0.0, calls * 2 * (tp - 1) / tp * tokens * shape.d_model * ACT_BYTES, calls)


def _forward(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> tuple[Kernel, ...]:
    """The kernels of one pass on one of tp devices (arguments already checked)."""
    tokens = batch * new_tokens
    kernels = (_matmul(shape, tokens, tp), _attention(shape, batch, new_tokens, context, tp))
    return kernels + (_allreduce(shape, tokens, tp),) if tp > 1 else kernels


def _as_cost(kernels: tuple[Kernel, ...], tokens: int, compute: str | None, layers: int = 0) -> PassCost:
    return PassCost(sum(k.flops for k in kernels), sum(k.bytes for k in kernels), tokens, kernels, compute, layers)


def matmul_cost(shape: ModelShape, batch: int, new_tokens: int, tp: int = 1) -> PassCost:
    """Projections and LM head, per device: every weight read once, 2 FLOPs per weight per token."""
    batch, new_tokens, _, tp = _check_pass(batch, new_tokens, 0, tp)
    return _as_cost((_matmul(shape, batch * new_tokens, tp),), batch * new_tokens, shape.compute)


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
    kernels = [_matmul(shape, tokens, 1)]
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


# ---------------------------------------------------------------------------------------------- time


def _math_dtype(accel: Accelerator, dtype: str | None, compute: str | None) -> str:
    """The dtype whose peak a pass runs at: the shape's own (``compute``; bf16 falls back to fp16 where
    there is no bf16 peak, the T4), or an explicit ``dtype``, which must agree with it and exist here."""
    if dtype is None:
        return usable_dtype(accel, compute or "bf16")
    validate.choice("dtype", dtype, DTYPE_BYTES)
    if compute is not None and dtype != compute and usable_dtype(accel, compute) != dtype:
        raise validate.BadArgument(f"dtype={dtype!r} disagrees with the model's math dtype {compute!r}; "
                                   f"use shape.in_dtype({dtype!r}) (or leave dtype out)")
    accel.peak(dtype)  # raises, naming the dtypes this accelerator has
    return dtype


def _seconds(kernels, accel: Accelerator, peak: float, overlap: str, latency: float) -> float:
    """Roofline seconds of a pass's kernels (no overhead); the all-reduces never overlap."""
    memory = [k.bytes / accel.mem_bandwidth for k in kernels if k.flops or k.bytes]
    compute = [k.flops / peak for k in kernels if k.flops or k.bytes]
    if overlap == "kernel":
        t = sum(map(max, memory, compute))
    elif overlap == "pass":
        t = max(sum(memory), sum(compute))
    else:
        t = sum(memory) + sum(compute)
    calls = sum(k.calls for k in kernels)
    if calls:
        if not accel.link_bandwidth:
            raise validate.BadArgument(f"{accel.name} has no link bandwidth in the table: tp > 1 needs one")
        t += sum(k.link_bytes for k in kernels) / (accel.link_bandwidth / 2) + calls * latency
    return t


def roofline_time(cost: PassCost, accel: Accelerator | str, dtype: str | None = None, overhead: float = 0.0,
                  overlap: str = "kernel", allreduce_latency: float = 0.0,
                  draft_overhead: float | None = None, layer_overhead: float = 0.0) -> float:
    """Seconds for one pass: the kernels' roofline times combined per ``overlap`` (see the module
    docstring), plus the all-reduces (link bytes at half the datasheet link bandwidth, which counts
    both directions, plus ``allreduce_latency`` per call), plus ``overhead``, plus ``layer_overhead`` for
    each decoder layer the pass runs (``cost.layers``: set by ``forward_cost``; 0 for a bare kernel).

    ``draft_overhead`` is checked and otherwise unused (one pass of the target pays ``overhead``), so that a
    calibration, ``**cost.calibration(...)``, can be passed to every time function alike."""
    accel = accelerator(accel)
    peak = accel.peak(_math_dtype(accel, dtype, cost.compute))
    overhead = validate.number("overhead", overhead, low=0)
    overlap = validate.choice("overlap", overlap, OVERLAPS)
    latency = validate.number("allreduce_latency", allreduce_latency, low=0)
    layer = validate.number("layer_overhead", layer_overhead, low=0)
    if draft_overhead is not None:
        validate.number("draft_overhead", draft_overhead, low=0)
    return _seconds(cost.parts, accel, peak, overlap, latency) + overhead + layer * cost.layers


@dataclass(frozen=True)
class Pass:
    """One pass of an iteration as the time model sees it: its kernels (per device), the decoder layers it
    runs (each pays ``layer_overhead``), whether it is a draft pass (pays ``draft_overhead``; a target pass
    pays ``overhead``) and the dtype its math runs in (None: the accelerator's bf16, or fp16 on a T4)."""

    kernels: tuple[Kernel, ...]
    layers: int
    draft: bool
    compute: str | None
    dtype: str | None = None  # an explicit dtype asked for (checked against ``compute``)


@dataclass(frozen=True)
class _Engine:
    """The model's knobs, checked once: what every pass of one speedup calculation shares."""

    accel: Accelerator
    dtype: str | None
    overhead: float
    draft_overhead: float
    overlap: str
    tp: int
    latency: float
    layer: float = 0.0

    def seconds(self, shape: ModelShape, batch: int, new_tokens: int, context: int, overhead: float,
                dtype: str | None = None) -> float:
        peak = self.accel.peak(_math_dtype(self.accel, dtype, shape.compute))
        kernels = _forward(shape, batch, new_tokens, context, self.tp)
        return _seconds(kernels, self.accel, peak, self.overlap, self.latency) + overhead + self.layer * shape.n_layers

    def pass_seconds(self, p: Pass) -> float:
        fixed = self.draft_overhead if p.draft else self.overhead
        if not p.kernels:  # an n-gram lookup: its overhead only
            return fixed
        peak = self.accel.peak(_math_dtype(self.accel, p.dtype, p.compute))
        return _seconds(p.kernels, self.accel, peak, self.overlap, self.latency) + fixed + self.layer * p.layers


def _engine(accel, dtype=None, overhead=0.0, draft_overhead=None, overlap="kernel", tp=1,
            allreduce_latency=0.0, layer_overhead=0.0) -> _Engine:
    overhead = validate.number("overhead", overhead, low=0)
    draft_overhead = overhead if draft_overhead is None else validate.number("draft_overhead", draft_overhead, low=0)
    return _Engine(accelerator(accel), dtype, overhead, draft_overhead, validate.choice("overlap", overlap, OVERLAPS),
                   validate.integer("tp", tp, low=1), validate.number("allreduce_latency", allreduce_latency, low=0),
                   validate.number("layer_overhead", layer_overhead, low=0))


def pass_time(shape: ModelShape, accel, batch: int, new_tokens: int, context: int = 0, dtype: str | None = None,
              overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
              draft_overhead: float | None = None, layer_overhead: float = 0.0) -> float:
    """Seconds for one pass of ``shape`` (B sequences × n new tokens after L cached ones) on tp devices.
    A target pass pays ``overhead`` and ``layer_overhead`` per layer; ``draft_overhead`` is accepted (and
    checked) so a calibration passes whole."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead)
    return eng.seconds(shape, batch, new_tokens, context, eng.overhead, dtype)


def decode_summary(shape: ModelShape, accel, batch: int, context: int = 0, dtype: str | None = None,
                   overhead: float = 0.0, overlap: str = "kernel", draft_overhead: float | None = None,
                   layer_overhead: float = 0.0, allreduce_latency: float = 0.0) -> dict:
    """One row of a decode-step table: intensity, step time, per-token time, tokens/s, which roof binds
    (the roof is the roofline's; ``overhead`` and ``layer_overhead`` add to the step time)."""
    accel = accelerator(accel)
    c = decode_cost(shape, batch, context)
    t = roofline_time(c, accel, dtype, overhead, overlap, allreduce_latency, draft_overhead=draft_overhead,
                      layer_overhead=layer_overhead)
    ridge = accel.ridge(_math_dtype(accel, dtype, shape.compute))
    return {"B": batch, "AI (FLOP/byte)": c.intensity, "step ms": 1e3 * t, "ms per token": 1e3 * t / batch,
            "tokens/s": batch / t, "bound": "memory" if c.intensity < ridge else "compute"}


# ---------------------------------------------------------------------------------------------- acceptance


def expected_tokens(alpha: float, k: int) -> float:
    """E[N] = (1 - α^(k+1)) / (1 - α): tokens per iteration with i.i.d. acceptance (Leviathan Eq. 1)."""
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=0)
    if alpha == 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def implied_alpha(tokens_per_iteration: float, k: int) -> float:
    """The α whose ``expected_tokens(α, k)`` is ``tokens_per_iteration``: the inverse, by bisection.

    ``tokens_per_iteration`` is the mean accepted length per iteration *with* the bonus token
    (Spec-Bench's "mean accepted tokens"), in [1, k + 1]. E[N] = 1 + α + ... + α^k rises strictly with α, so the root
    is unique; 1 ↦ 0 and k + 1 ↦ 1. (The bisection sums the powers: near α = 1 the closed form
    (1 − α^(k+1))/(1 − α) loses digits to cancellation.)
    """
    k = validate.integer("k", k, low=1)
    tokens = validate.number("tokens_per_iteration", tokens_per_iteration, low=1, high=k + 1)
    powers = lambda a: sum(a**i for i in range(k + 1))
    lo, hi = 0.0, 1.0
    for _ in range(64):  # 2^-64: below float precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if powers(mid) < tokens else (lo, mid)
    return lo if tokens - powers(lo) < powers(hi) - tokens else hi


def tokens_pmf(alpha: float, k: int) -> list[float]:
    """P(N = n) for n = 1..k+1: tokens one iteration yields under i.i.d. acceptance (chapter 3).

    N = n ≤ k means n-1 acceptances then a rejection, α^(n-1)(1-α); N = k+1 means all k accepted,
    α^k. The mean is ``expected_tokens(alpha, k)``.
    """
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=0)
    return [alpha ** (n - 1) * (1 - alpha) for n in range(1, k + 1)] + [alpha**k]


def speedup(alpha: float, k: int, c: float) -> float:
    """Memory-bound walltime improvement E[N] / (1 + k·c) (Leviathan Thm 3.8)."""
    c = validate.number("c (draft step time / target step time)", c, low=0)
    return expected_tokens(alpha, k) / (1 + k * c)


def optimal_k(alpha: float, c: float, k_max: int = 64) -> int:
    """The k in 0..k_max that maximizes ``speedup`` (k = 0 means: do not speculate)."""
    k_max = validate.integer("k_max", k_max, low=0)
    return max(range(k_max + 1), key=lambda k: speedup(alpha, k, c))


# ---------------------------------------------------------------------------------------------- drafters


@dataclass(frozen=True)
class EarlyExit:
    """Self-speculation: the target's first ``layers`` blocks and its LM head draft, one token per pass.
    No weights or KV of its own: it reads the target's (LayerSkip shares that cache)."""

    layers: int

    def __post_init__(self):
        validate.integer("layers", self.layers, low=1)


@dataclass(frozen=True)
class SinglePass:
    """One set of weights applied to all k positions in one pass (block / parallel drafters): AI ≈ B·k."""

    shape: ModelShape


@dataclass(frozen=True)
class Heads:
    """k heads, each with its own weights ``shape`` and one position per sequence, run in one pass
    (Medusa): k times the bytes, AI ≈ B per head."""

    shape: ModelShape


@dataclass(frozen=True)
class NoWeights:
    """A drafter that reads no weights (n-gram / prompt lookup): only its per-lookup overhead."""

    name: str = "n-gram"


@dataclass(frozen=True)
class EagleHead:
    """An EAGLE draft head (Li et al. 2024; EAGLE-3: 2025): ``layer``, decoder layer(s) of the target's
    width whose LM head covers ``layer.vocab`` tokens (EAGLE-3 drafts over a reduced vocabulary: 32,000
    for Llama-3.1-8B, against the target's 128,256), an fc of ``fc_inputs``·d_model → d_model that brings
    the target's features in (EAGLE-1: feature and token embedding, 2; EAGLE-3: low, middle and high
    features, 3), and for EAGLE-3 a QKV projection that reads [embedding; feature], 2·d_model inputs
    (``wide_qkv``).

    It runs the way vLLM's ``EagleProposer.propose`` (and SGLang's draft-extend) runs it: the first draft
    pass puts every token the verify pass scored (depth + 1 per sequence) through the fc and the layer and
    the LM head over the last one; each later pass runs one token per sequence (a tree level: its width)."""

    layer: ModelShape
    fc_inputs: int = 2
    wide_qkv: bool = False

    def __post_init__(self):
        if not isinstance(self.layer, ModelShape):
            raise validate.BadArgumentType(f"layer must be a ModelShape; got {type(self.layer).__name__}")
        validate.integer("fc_inputs", self.fc_inputs, low=0)

    @property
    def name(self) -> str:
        return self.layer.name

    @cached_property
    def body_params(self) -> int:
        """The decoder layer(s) with the wide QKV's extra inputs (not the fc, not the LM head)."""
        s = self.layer
        extra = s.d_model * (s.n_heads + 2 * s.n_kv_heads) * s.d_head if self.wide_qkv else 0
        return s.n_layers * (s.layer_params + extra)

    @cached_property
    def params(self) -> int:
        """Matmul parameters: fc, layer(s) and the draft LM head."""
        return self.fc_inputs * self.layer.d_model**2 + self.body_params + self.layer.d_model * self.layer.vocab


NGRAM = NoWeights()
Draft = ModelShape | EarlyExit | SinglePass | Heads | NoWeights | EagleHead


def eagle3_head(target: ModelShape, draft_vocab: int = 32000, name: str = "") -> EagleHead:
    """An EAGLE-3 head for ``target``: one decoder layer of its width (its heads, KV heads, d_ff), QKV over
    [embedding; feature], an fc from the three fused features, and a ``draft_vocab``-token LM head (the
    published heads use 32,000: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config, draft_vocab_size)."""
    layer = replace(target, n_layers=1, vocab=validate.integer("draft_vocab", draft_vocab, low=1),
                    tied_embeddings=True, name=name or f"EAGLE-3 head ({target.name})")
    return EagleHead(layer, fc_inputs=3, wide_qkv=True)


def eagle_head(target: ModelShape, name: str = "") -> EagleHead:
    """An EAGLE(-1) head for ``target``: an fc from [feature; embedding] (2·d_model) and one decoder layer of
    its width, drafting with the target's own LM head (its full vocabulary, read at every draft step)."""
    layer = replace(target, n_layers=1, tied_embeddings=True, name=name or f"EAGLE head ({target.name})")
    return EagleHead(layer, fc_inputs=2, wide_qkv=False)


# The heads people deploy with the presets: EAGLE-3 heads with a 32k draft vocabulary (yuhuili/EAGLE3-LLaMA3.1-
# Instruct-8B, yuhuili/EAGLE3-LLaMA3.3-Instruct-70B; for Qwen3 the SpecForge-trained heads such as
# Tengyunw/qwen3_8b_eagle3 and AngelSlim/Qwen3-32B_eagle3: fc 3·5120 → 5120, LM head 32000 × 5120 for 32B).
EAGLE3_LLAMA_3_1_8B = eagle3_head(LLAMA_3_1_8B)
EAGLE3_LLAMA_3_1_70B = eagle3_head(LLAMA_3_1_70B)
EAGLE3_QWEN3_8B = eagle3_head(QWEN3_8B)
EAGLE3_QWEN3_32B = eagle3_head(QWEN3_32B)
HEAD_PRESETS = {h.name: h for h in (EAGLE3_LLAMA_3_1_8B, EAGLE3_LLAMA_3_1_70B, EAGLE3_QWEN3_8B, EAGLE3_QWEN3_32B)}


def early_exit_shape(target: ModelShape, layers: int) -> ModelShape:
    """The shape an early exit runs: the target's first ``layers`` blocks plus its LM head."""
    return replace(target, n_layers=validate.integer("layers", layers, low=1, high=target.n_layers - 1),
                   name=f"{target.name} first {layers} layers")


def _eagle_kernels(head: EagleHead, batch: int, new_tokens: int, context: int, tp: int, first: bool):
    s = head.layer
    tokens = batch * new_tokens
    fc = head.fc_inputs * s.d_model**2 if first else 0
    used, read = _sparse_body(head, tokens) if isinstance(s, MoEShape) else (head.body_params, head.body_params)
    kernels = (Kernel("matmul", 2 * (fc + used) * tokens / tp, s.weight_bytes * (fc + read) / tp),
               Kernel("lm head", 2 * s.d_model * s.vocab * batch / tp, s.weight_bytes * s.d_model * s.vocab / tp),
               _attention(s, batch, new_tokens, context, tp))
    return kernels + (_allreduce(s, tokens, tp),) if tp > 1 else kernels


def levels(k: int, widths=None) -> tuple[int, ...]:
    """Tokens per sequence at each draft level: a chain of k is (1,)·k; a tree gives its ``widths``."""
    if widths is None:
        return (1,) * validate.integer("k", k, low=0)
    widths = tuple(widths)
    if not widths or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths):
        raise validate.BadArgument(f"widths must be a non-empty list of positive integers (tokens per sequence at "
                                   f"each draft level); got {widths!r}")
    return widths


def draft_passes(draft: Draft, batch: int, k: int, context: int, tp: int = 1, target: ModelShape | None = None,
                 widths=None, dtype: str | None = None) -> list[Pass]:
    """The draft passes of one iteration that drafts k tokens per sequence (a chain), or a tree whose level i
    runs ``widths[i]`` tokens per sequence, for B sequences whose draft-side KV holds ``context`` tokens.

    A draft model or an early exit runs one pass per level (the i-th at context L + i); an EAGLE head the
    same, its first pass over depth + 1 tokens (``EagleHead``); a single-pass drafter or Medusa heads one
    pass; an n-gram drafter one pass with no kernels (it costs its overhead once)."""
    if isinstance(draft, EarlyExit):
        if target is None:
            raise validate.BadArgument("an EarlyExit draft needs the target shape (target=...)")
        draft = early_exit_shape(target, draft.layers)
    if not isinstance(draft, Draft):
        raise validate.BadArgumentType(f"draft must be a ModelShape, EarlyExit, SinglePass, Heads, EagleHead or "
                                       f"NoWeights; got {type(draft).__name__}")
    if k == 0 and widths is None:
        return []
    widths = levels(k, widths)
    if isinstance(draft, NoWeights):
        return [Pass((), 0, True, None)]
    if isinstance(draft, SinglePass):
        return [Pass(_forward(draft.shape, batch, k, context, tp), draft.shape.n_layers, True, draft.shape.compute)]
    if isinstance(draft, Heads):
        head = _matmul(draft.shape, batch, tp)
        return [Pass((Kernel("heads", k * head.flops, k * head.bytes),), 0, True, draft.shape.compute)]
    if isinstance(draft, EagleHead):
        first = len(widths) + 1
        return [Pass(_eagle_kernels(draft, batch, first if i == 0 else w, context + i, tp, i == 0),
                     draft.layer.n_layers, True, draft.layer.compute) for i, w in enumerate(widths)]
    return [Pass(_forward(draft, batch, w, context + i, tp), draft.n_layers, True, draft.compute, dtype)
            for i, w in enumerate(widths)]


def target_pass(target: ModelShape, batch: int, new_tokens: int, context: int, tp: int = 1,
                dtype: str | None = None) -> Pass:
    """One target pass (decode: n = 1; verify: n = k + 1, or a tree's tokens + 1) as a ``Pass``."""
    return Pass(_forward(target, batch, new_tokens, context, tp), target.n_layers, False, target.compute, dtype)


def _draft_seconds(draft: Draft, eng: _Engine, batch: int, k: int, context: int, target: ModelShape | None,
                   widths=None) -> float:
    return sum(eng.pass_seconds(p) for p in draft_passes(draft, batch, k, context, eng.tp, target, widths,
                                                         eng.dtype))


def draft_time(draft: Draft, accel, batch: int, k: int, context: int = 0, dtype: str | None = None,
               overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
               target: ModelShape | None = None, draft_overhead: float | None = None,
               layer_overhead: float = 0.0, widths=None) -> float:
    """Time to draft k tokens per sequence for B sequences whose draft-side KV holds ``context`` tokens
    (``draft_passes``; ``widths``: a tree's tokens per sequence at each level).

    Each draft pass pays ``draft_overhead`` where given (as in a calibration), else ``overhead``, and
    ``layer_overhead`` for each decoder layer it runs; an early exit needs the ``target``.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead)
    return _draft_seconds(draft, eng, batch, k, context, target, widths)


def iteration_time(target: ModelShape, draft: Draft, accel, batch: int, k: int, context: int = 0,
                   dtype: str | None = None, overhead: float = 0.0, draft_overhead: float | None = None,
                   overlap: str = "kernel", draft_context: int | None = None, tp: int = 1,
                   allreduce_latency: float = 0.0, layer_overhead: float = 0.0, widths=None) -> float:
    """T_iter = T_draft(k tokens) + T_target(B, k + 1 tokens).

    ``draft_overhead`` (per draft pass) defaults to ``overhead``; ``draft_context``, the draft's own KV
    length (a StreamingLLM window, say), defaults to ``context``; ``widths``: a tree's tokens per
    sequence at each draft level (then k is the number of tree tokens verified).
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead)
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
                  allreduce_latency: float = 0.0, layer_overhead: float = 0.0) -> float:
    """S(B) = E[N]·T_target(B, 1) / (T_draft(B, k) + T_target(B, k + 1)). k = 0 gives 1.

    ``overhead``: seconds added to every target pass; ``draft_overhead`` to every draft pass (default:
    ``overhead``); ``layer_overhead``: seconds per decoder layer of every pass; ``overlap``: "kernel" |
    "pass" | "none"; ``draft_context``: the draft's KV length (default: ``context``); ``tp``:
    tensor-parallel devices; ``allreduce_latency``: seconds per all-reduce.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    en = expected_tokens(alpha, k)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead)
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


# ---------------------------------------------------------------------------------------------- where it pays


def _pays(target, draft, accel, k, alpha, context, model: dict, threshold: float = 1.0):
    """S(B) > threshold as a function of B alone, with every other argument checked once."""
    model = dict(model)
    context = validate.integer("context", context, low=0)
    draft_context = model.pop("draft_context", None)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    k, en = validate.integer("k", k, low=0), expected_tokens(alpha, k)
    eng = _engine(accel, **model)
    return lambda b: _speedup(target, draft, eng, b, k, en, context, draft_ctx) > threshold


def _grid(limit: int, per_octave: int = 4) -> list[int]:
    return sorted({min(limit, round(2 ** (i / per_octave))) for i in range(per_octave * math.ceil(math.log2(limit))
                                                                         + 1)} | {1, limit})


def _edge(pays, lo: int, hi: int) -> int:
    """The last b in [lo, hi) with pays(b) == pays(lo), given pays(lo) != pays(hi): bisection."""
    side = pays(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) == side else (lo, mid)
    return lo


def paying_batches(target: ModelShape, draft: Draft, accel, k: int, alpha: float, context: int = 0,
                   limit: int | None = None, threshold: float = 1.0, **model) -> list[tuple[int, int]]:
    """The batch ranges [first, last] (inclusive) where S(B) > 1 (or > ``threshold``), for B from 1 to ``limit``.

    ``limit`` defaults to ``max_batch`` (the largest batch that fits in memory; tp and draft_context
    from ``model`` count) or 65,536 on an accelerator without a memory size. A range can be empty,
    start above 1 (self-speculation at long context) or run up to the limit. ``model``: the keyword
    arguments of ``batch_speedup`` (dtype, overhead, draft_overhead, overlap, draft_context, tp, ...).
    ``batch_ranges`` finds the ranges.
    """
    if limit is None:
        fits = max_batch(target, draft, accel, context, k=k, tp=model.get("tp", 1),
                         draft_context=model.get("draft_context"))
        limit = fits if fits is not None else 1 << 16
        if limit < 1:
            return []
    limit = validate.integer("limit", limit, low=1)
    threshold = validate.number("threshold", threshold, low=0)
    return batch_ranges(_pays(target, draft, accel, k, alpha, context, model, threshold), limit)


def batch_ranges(pays, limit: int) -> list[tuple[int, int]]:
    """The ranges [first, last] of B in 1..``limit`` where ``pays(B)`` is true.

    ``pays`` is evaluated on a grid of 4 points per doubling of B and each change is bisected to the
    exact batch; a range narrower than the grid's step could be missed (the model's S(B) is a ratio of
    piecewise-linear functions of B and crosses a threshold at most a few times; tests compare with a
    full scan).
    """
    limit = validate.integer("limit", limit, low=1)
    grid = _grid(limit)
    ranges, start = [], 1 if pays(1) else None
    previous = 1
    for b in grid[1:]:
        now = pays(b)
        if now != (start is not None):
            edge = _edge(pays, previous, b)
            if start is None:
                start = edge + 1
            else:
                ranges.append((start, edge))
                start = None
        previous = b
    if start is not None:
        ranges.append((start, limit))
    return ranges


def crossover_batch(target: ModelShape, draft: Draft, accel, k: int, alpha: float, context: int = 0,
                    dtype: str | None = None, max_batch: int = 1 << 16, **model) -> int | None:
    """B*: the first batch past which speculation never pays again (S ≤ 1 from B* up to ``max_batch``).

    1 if it never pays; None if it still pays at ``max_batch``. Where S(B) falls with B (weights
    dominate the bytes) this is the smallest B with S(B) ≤ 1; at long context S can also *rise* with B,
    and then B* is where the last paying range ends. Memory capacity is not applied here: compare with
    ``cost.max_batch`` (``paying_batches`` applies it).
    """
    max_batch = validate.integer("max_batch", max_batch, low=1)
    ranges = paying_batches(target, draft, accel, k, alpha, context, limit=max_batch, dtype=dtype, **model)
    if not ranges:
        return 1
    last = ranges[-1][1]
    return None if last >= max_batch else last + 1


def best_k(target: ModelShape, draft: Draft, accel, batch: int, alpha: float, context: int = 0,
           k_max: int = 16, **model) -> int:
    """The k in 0..k_max that maximizes S(B) at this batch (0: do not speculate)."""
    k_max = validate.integer("k_max", k_max, low=0)
    return max(range(k_max + 1), key=lambda k: batch_speedup(target, draft, accel, batch, k, alpha, context, **model))


# ---------------------------------------------------------------------------------------------- sparse targets
# Chapter 10: mixture-of-experts targets (MoE), latent attention (MLA) and multi-token prediction (MTP).


def expected_experts(n_experts: int, per_token: int, tokens: float) -> float:
    """E[distinct experts] that ``tokens`` tokens touch in one layer, each picking ``per_token`` (m) of
    ``n_experts`` (N) experts, uniformly and independently of the other tokens:

        E[D](T) = N·(1 − (1 − m/N)^T).

    One token misses a given expert with probability C(N−1, m)/C(N, m) = 1 − m/N; T independent tokens all
    miss it with probability (1 − m/N)^T; summing over the N experts (linearity of expectation) gives the
    rest. E[D](1) = m, and E[D] → N once T ≫ N/m. For fixed per-expert rates, routing that is unbalanced
    (Jensen: 1 − (1 − π)^T is concave in π) or positively correlated between tokens touches fewer.
    ``tokens`` may be fractional (an effective count, ``specnotes.moe.effective_tokens``)."""
    n = validate.integer("n_experts", n_experts, low=1)
    m = validate.integer("per_token (experts per token)", per_token, low=1, high=n)
    t = validate.number("tokens", tokens, low=0)
    return n * (1 - (1 - m / n) ** t)


@dataclass(frozen=True, kw_only=True)
class MoEShape(ModelShape):
    """A decoder whose MLPs are mixtures of experts, optionally with multi-head latent attention (MLA).

    Every MoE layer has ``n_experts`` (N) routed experts of width ``expert_d_ff``, of which each token uses
    ``experts_per_token`` (m, not k: k is the draft length), ``shared_experts`` that every token uses (width
    ``shared_d_ff``, default ``expert_d_ff``) and a router (d_model × N). The first ``dense_layers`` layers
    have a dense MLP of width ``d_ff`` instead (DeepSeek's ``first_k_dense_replace``). A pass over T tokens
    runs the FLOPs of the m active experts per token and reads the bytes of the E[D](T) distinct experts
    its tokens touch (``expected_experts``): ``active_params``, ``touched_params``.

    MLA (``kv_lora_rank`` = d_c > 0): the cache holds one latent of d_c + d_rope (``qk_rope_head_dim``)
    values per token and layer, which every head reads. Run absorbed (W_UK folded into the query, W_UV into
    the output, as decode kernels do), attention costs 2·(d_c + d_rope) FLOPs for QKᵀ and 2·d_c for AV per
    head and (query, key) pair, and the projections keep 2 FLOPs per weight per token. ``n_kv_heads`` is
    then unused by the cost model."""

    n_experts: int = 0
    experts_per_token: int = 0
    expert_d_ff: int = 0
    shared_experts: int = 0
    shared_d_ff: int | None = None
    dense_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self):
        super().__post_init__()
        n = validate.integer("n_experts", self.n_experts, low=1)  # "0 experts": a ModelShape, not a MoEShape
        m = validate.integer("experts_per_token", self.experts_per_token, low=1)
        if m > n:
            raise validate.BadArgument(f"experts_per_token (m) must be at most n_experts (N = {n}): a token picks m "
                                       f"distinct experts of the N; got m = {m}")
        validate.integer("expert_d_ff", self.expert_d_ff, low=1)
        validate.integer("shared_experts", self.shared_experts, low=0)
        if self.shared_d_ff is not None:
            validate.integer("shared_d_ff", self.shared_d_ff, low=1)
        validate.integer("dense_layers", self.dense_layers, low=0, high=self.n_layers - 1)
        validate.integer("kv_lora_rank", self.kv_lora_rank, low=0)
        mla = ("qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim")
        for name in mla:
            validate.integer(name, getattr(self, name), low=0)
        if self.kv_lora_rank:
            for name in ("qk_nope_head_dim", "v_head_dim"):
                validate.integer(name, getattr(self, name), low=1)
        elif any(getattr(self, name) for name in mla):
            raise validate.BadArgument(f"{', '.join(mla)} describe latent attention (MLA): they go with "
                                       "kv_lora_rank > 0 (its latent width d_c)")

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.n_layers - self.dense_layers

    @cached_property
    def attention_params(self) -> int:
        """One layer's attention projections: GQA's Q, K, V, O, or MLA's (Q through its low-rank q_lora_rank
        bottleneck when there is one; the joint KV down-projection to d_c + d_rope; its up-projection to
        per-head keys and values; O)."""
        d, h = self.d_model, self.n_heads
        if not self.mla:
            return 2 * d * h * self.d_head + 2 * d * self.n_kv_heads * self.d_head
        q_out = h * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        q = d * self.q_lora_rank + self.q_lora_rank * q_out if self.q_lora_rank else d * q_out
        kv = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * h * (self.qk_nope_head_dim +
                                                                                        self.v_head_dim)
        return q + kv + h * self.v_head_dim * d

    @property
    def expert_params(self) -> int:
        """One routed expert: gated MLP, 3·d_model·expert_d_ff."""
        return 3 * self.d_model * self.expert_d_ff

    @property
    def router_and_shared_params(self) -> int:
        """What one MoE layer runs for every token besides attention: the router (d_model × N) and the shared
        experts."""
        shared = self.shared_experts * 3 * self.d_model * (self.shared_d_ff or self.expert_d_ff)
        return self.d_model * self.n_experts + shared

    @cached_property
    def layer_params(self) -> int:
        """One MoE layer: attention, router, shared experts and all N routed experts."""
        return self.attention_params + self.router_and_shared_params + self.n_experts * self.expert_params

    @cached_property
    def always_params(self) -> int:
        """Matmul parameters every pass reads whatever the routing: attention, dense MLPs, routers, shared
        experts, LM head."""
        return (self.n_layers * self.attention_params + self.dense_layers * 3 * self.d_model * self.d_ff
                + self.moe_layers * self.router_and_shared_params + self.d_model * self.vocab)

    @cached_property
    def params(self) -> int:
        """All matmul parameters (every expert; what the weights occupy, with an untied embedding)."""
        return self.always_params + self.moe_layers * self.n_experts * self.expert_params

    @cached_property
    def active_params(self) -> int:
        """Matmul parameters one token runs: ``always_params`` and m experts per MoE layer."""
        return self.always_params + self.moe_layers * self.experts_per_token * self.expert_params

    def touched_params(self, tokens: float) -> float:
        """Expected matmul parameters a pass over ``tokens`` tokens reads: ``always_params`` and the E[D](T)
        distinct experts of each MoE layer (independent routing, ``expected_experts``)."""
        distinct = expected_experts(self.n_experts, self.experts_per_token, tokens)
        return self.always_params + self.moe_layers * distinct * self.expert_params

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token in every layer; with MLA, the latent: d_c + d_rope values per layer."""
        if self.mla:
            return self.n_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_bytes
        return super().kv_bytes_per_token


def _pair_flops(shape: ModelShape) -> float:
    """Attention FLOPs per head, (query, key) pair and layer: 4·d_head (QKᵀ and AV); absorbed MLA scores
    d_c + d_rope dimensions and sums d_c: 2·(2·d_c + d_rope)."""
    if isinstance(shape, MoEShape) and shape.mla:
        return 2 * (2 * shape.kv_lora_rank + shape.qk_rope_head_dim)
    return 4 * shape.d_head


def mla_attention_intensity(shape: MoEShape, new_tokens: int = 1) -> float:
    """FLOPs per byte of absorbed MLA attention at long context, for ``new_tokens`` queries per sequence:
    every head reads the same latent, so n·H·2(2d_c + d_rope) / ((d_c + d_rope)·kv_bytes). It grows with
    the queries (a verify pass's k + 1) and the heads, not with the batch."""
    if not isinstance(shape, MoEShape) or not shape.mla:
        raise validate.BadArgumentType("mla_attention_intensity needs a MoEShape with kv_lora_rank > 0 (MLA)")
    n = validate.integer("new_tokens", new_tokens, low=1)
    return n * shape.n_heads * _pair_flops(shape) / ((shape.kv_lora_rank + shape.qk_rope_head_dim) * shape.kv_bytes)


def _sparse_body(head: EagleHead, tokens: int) -> tuple[float, float]:
    """(parameters run per token, parameters read) by the decoder layer(s) of a head whose layer is MoE (an MTP
    module), for a pass over ``tokens`` tokens; its LM head is a kernel of its own."""
    s = head.layer
    extra = head.body_params - s.n_layers * s.layer_params  # EAGLE-3's wide QKV, if any
    lm = s.d_model * s.vocab
    return s.active_params - lm + extra, s.touched_params(tokens) - lm + extra


def mtp_head(target: ModelShape, name: str = "") -> EagleHead:
    """A multi-token-prediction module (DeepSeek-V3: ``num_nextn_predict_layers`` = 1) as a drafter: one more
    decoder layer of the target's own kind (its attention, and its MoE for a MoE target), an fc ``eh_proj``
    from [embedding; hidden state] (2·d_model inputs), and the target's LM head. It runs as an EAGLE head
    does: with k = 1 one pass (a single-pass drafter), the first over the verified tokens; engines that
    draft k > 1 with one module run it k times, one token per sequence each later pass."""
    extra = {"dense_layers": 0} if isinstance(target, MoEShape) else {}
    layer = replace(target, n_layers=1, tied_embeddings=True, name=name or f"MTP module ({target.name})", **extra)
    return EagleHead(layer, fc_inputs=2, wide_qkv=False)


# Published shapes, from each model's config.json on the Hugging Face hub (tests/test_moe.py holds the fields,
# copied from where they were read, with their sources): num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size (the dense MLP's width; Mixtral's and gpt-oss's is the experts'),
# vocab_size, head_dim, num_experts / n_routed_experts / num_local_experts, num_experts_per_tok,
# moe_intermediate_size, shared experts, first_k_dense_replace, kv_lora_rank, qk_rope_head_dim, ...
MIXTRAL_8X7B = MoEShape(32, 4096, 32, 8, 14336, 32000, name="Mixtral-8x7B", n_experts=8, experts_per_token=2,
                        expert_d_ff=14336)
QWEN3_30B_A3B = MoEShape(48, 2048, 32, 4, 6144, 151936, name="Qwen3-30B-A3B", head_dim=128, n_experts=128,
                         experts_per_token=8, expert_d_ff=768)
QWEN3_235B_A22B = MoEShape(94, 4096, 64, 4, 12288, 151936, name="Qwen3-235B-A22B", head_dim=128, n_experts=128,
                           experts_per_token=8, expert_d_ff=1536)
GPT_OSS_20B = MoEShape(24, 2880, 64, 8, 2880, 201088, name="gpt-oss-20b", head_dim=64, n_experts=32,
                       experts_per_token=4, expert_d_ff=2880)
GPT_OSS_120B = MoEShape(36, 2880, 64, 8, 2880, 201088, name="gpt-oss-120b", head_dim=64, n_experts=128,
                        experts_per_token=4, expert_d_ff=2880)
DEEPSEEK_V3 = MoEShape(61, 7168, 128, 128, 18432, 129280, name="DeepSeek-V3", n_experts=256, experts_per_token=8,
                       expert_d_ff=2048, shared_experts=1, dense_layers=3, kv_lora_rank=512, qk_rope_head_dim=64,
                       q_lora_rank=1536, qk_nope_head_dim=128, v_head_dim=128)
# Llama 4's MoE layers also run one shared expert of the experts' width (transformers' Llama4TextMoe).
LLAMA_4_SCOUT = MoEShape(48, 5120, 40, 8, 16384, 202048, name="Llama-4-Scout", n_experts=16,
                         experts_per_token=1, expert_d_ff=8192, shared_experts=1)
QWEN2_57B_A14B = MoEShape(28, 3584, 28, 4, 18944, 151936, name="Qwen2-57B-A14B", n_experts=64, experts_per_token=8,
                          expert_d_ff=2560, shared_experts=1, shared_d_ff=20480)
MOE_PRESETS = {s.name: s for s in (MIXTRAL_8X7B, QWEN3_30B_A3B, QWEN3_235B_A22B, GPT_OSS_20B, GPT_OSS_120B,
                                   DEEPSEEK_V3, LLAMA_4_SCOUT, QWEN2_57B_A14B)}
PRESETS.update(MOE_PRESETS)
MTP_DEEPSEEK_V3 = mtp_head(DEEPSEEK_V3)  # the one module DeepSeek-V3 ships (num_nextn_predict_layers = 1)


# ---------------------------------------------------------------------------------------------- memory


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


# ---------------------------------------------------------------------------------------------- calibrations


@cache
def _stored() -> dict:
    path = resources.files("specnotes").joinpath("data", "calibrations.json")
    return json.loads(path.read_text(encoding="utf-8"))


def calibrations() -> dict:
    """Every stored calibration: {accelerator: {name: record}} (``specnotes.calibrate`` writes them), each
    record with its knobs, the engine and GPU it describes, what it was fitted to and its cross-validated
    error. A copy."""
    return {k: v for k, v in json.loads(json.dumps(_stored())).items() if k in ACCELERATORS}


def calibration(accelerator_name: str, source: str) -> dict:
    """The keyword arguments of the time functions for the engine calibrated as ``source`` on
    ``accelerator_name`` (``calibrations()`` lists them; Chapter 6 fits them):

        knobs = cost.calibration("H100-SXM", "vllm-0.10.1")
        cost.batch_speedup(target, draft, "H100-SXM", 64, 3, 0.62, 720, **knobs)

    A name is an engine and its version ("vllm-0.10.1", "sglang-0.5.9", ...) or, for the calibrations the
    book fitted first, the published source they came from ("specdecode_bench": vLLM 0.10.1 in SpecDecode-Bench;
    "magicdec"). Returns a new dict (overlap, overhead, draft_overhead, layer_overhead, allreduce_latency)."""
    validate.choice("accelerator_name", accelerator_name, ACCELERATORS)
    stored = calibrations()
    if accelerator_name not in stored:
        raise validate.BadArgument(f"no calibration for {accelerator_name}; calibrated: {', '.join(stored)}")
    names = stored[accelerator_name]
    validate.choice(f"source (calibrated on {accelerator_name})", source, names)
    record = names[source]
    if "alias_of" in record:
        record = names[record["alias_of"]]
    return dict(record["knobs"])
