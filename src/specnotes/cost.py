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

plus a fixed per-pass ``overhead`` t0 (launches, framework). With tensor parallelism ``tp``, each
device holds 1/tp of the weights, the query heads and the KV heads (KV heads are replicated when
there are fewer than tp), and every layer ends its attention and its MLP with an all-reduce of the
activations, which never overlaps with compute. Passes that run one after another add. An
all-reduce costs its bytes at the datasheet link bandwidth plus ``allreduce_latency`` per call. That
latency is 0 unless you pass one: it belongs to the collective library and its algorithm (NCCL rings
and trees, vLLM's custom all-reduce) more than to the GPU, and no datasheet gives it, so the idealized
model leaves it out and a calibration supplies a measured value (Chapter 6; ``interconnect.json``).

A draft is one of four kinds (``draft_time``): a draft *model* (a ``ModelShape``: k sequential
passes of one token), ``EarlyExit(layers)`` (the target's first layers and its head, k passes),
``SinglePass(shape)`` (one pass of one set of weights over k positions: block/parallel drafters,
intensity B·k), ``Heads(shape)`` (k heads with their own weights, one position each: Medusa,
intensity B per head) and ``NGRAM`` (no weights: prompt lookup).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

from specnotes import validate
from specnotes.hardware import DTYPE_BYTES, Accelerator, accelerator, usable_dtype

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

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab"):
            validate.integer(name, getattr(self, name), low=1)
        validate.number("weight_bytes", self.weight_bytes, low=0, low_open=True)
        validate.number("kv_bytes", self.kv_bytes, low=0, low_open=True)
        validate.choice("compute", self.compute, DTYPE_BYTES)
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise validate.BadArgument("d_model must be a multiple of n_heads, and n_heads of n_kv_heads")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @cached_property
    def layer_params(self) -> int:
        attention = 2 * self.d_model * self.d_model + 2 * self.d_model * self.n_kv_heads * self.d_head
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


# Published shapes (config.json of each model on the Hugging Face hub).
LLAMA_3_8B = ModelShape(32, 4096, 32, 8, 14336, 128256, name="Llama-3-8B")
LLAMA_3_70B = ModelShape(80, 8192, 64, 8, 28672, 128256, name="Llama-3-70B")
LLAMA_3_2_1B = ModelShape(16, 2048, 32, 8, 8192, 128256, name="Llama-3.2-1B", tied_embeddings=True)
PRESETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_2_1B)}


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
                        self.parts + other.parts, self.compute or other.compute)


def _check_pass(batch, new_tokens, context, tp=1) -> tuple[int, int, int, int]:
    return (validate.integer("batch", batch, low=1), validate.integer("new_tokens", new_tokens, low=1),
            validate.integer("context", context, low=0), validate.integer("tp", tp, low=1))


def _kv_token_per_device(shape: ModelShape, tp: int) -> float:
    """KV bytes per token on one of tp devices: KV heads split over the devices; with fewer heads than
    devices each device keeps one (replicated)."""
    return shape.kv_bytes_per_token * math.ceil(shape.n_kv_heads / tp) / shape.n_kv_heads


def _matmul(shape: ModelShape, tokens: int, tp: int) -> Kernel:
    return Kernel("matmul", 2 * shape.params * tokens / tp, shape.weight_bytes_total / tp)


def _attention(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> Kernel:
    flops = 4 * shape.d_head * (shape.n_heads / tp) * shape.n_layers * attended_pairs(new_tokens, context) * batch
    return Kernel("attention", flops, batch * _kv_token_per_device(shape, tp) * (context + new_tokens))


def _allreduce(shape: ModelShape, tokens: int, tp: int) -> Kernel:
    calls = 2 * shape.n_layers
    return Kernel("all-reduce", 0.0, 0.0, calls * 2 * (tp - 1) / tp * tokens * shape.d_model * ACT_BYTES, calls)


def _forward(shape: ModelShape, batch: int, new_tokens: int, context: int, tp: int) -> tuple[Kernel, ...]:
    """The kernels of one pass on one of tp devices (arguments already checked)."""
    tokens = batch * new_tokens
    kernels = (_matmul(shape, tokens, tp), _attention(shape, batch, new_tokens, context, tp))
    return kernels + (_allreduce(shape, tokens, tp),) if tp > 1 else kernels


def _as_cost(kernels: tuple[Kernel, ...], tokens: int, compute: str | None) -> PassCost:
    return PassCost(sum(k.flops for k in kernels), sum(k.bytes for k in kernels), tokens, kernels, compute)


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
    return _as_cost(_forward(shape, batch, new_tokens, context, tp), batch * new_tokens, shape.compute)


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
                  draft_overhead: float | None = None) -> float:
    """Seconds for one pass: the kernels' roofline times combined per ``overlap`` (see the module
    docstring), plus the all-reduces (link bytes at half the datasheet link bandwidth, which counts
    both directions, plus ``allreduce_latency`` per call), plus ``overhead``.

    ``draft_overhead`` is checked and otherwise unused (one pass of the target pays ``overhead``), so that a
    calibration, ``**cost.calibration(...)``, can be passed to every time function alike."""
    accel = accelerator(accel)
    peak = accel.peak(_math_dtype(accel, dtype, cost.compute))
    overhead = validate.number("overhead", overhead, low=0)
    overlap = validate.choice("overlap", overlap, OVERLAPS)
    latency = validate.number("allreduce_latency", allreduce_latency, low=0)
    if draft_overhead is not None:
        validate.number("draft_overhead", draft_overhead, low=0)
    return _seconds(cost.parts, accel, peak, overlap, latency) + overhead


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

    def seconds(self, shape: ModelShape, batch: int, new_tokens: int, context: int, overhead: float,
                dtype: str | None = None) -> float:
        peak = self.accel.peak(_math_dtype(self.accel, dtype, shape.compute))
        kernels = _forward(shape, batch, new_tokens, context, self.tp)
        return _seconds(kernels, self.accel, peak, self.overlap, self.latency) + overhead


def _engine(accel, dtype=None, overhead=0.0, draft_overhead=None, overlap="kernel", tp=1,
            allreduce_latency=0.0) -> _Engine:
    overhead = validate.number("overhead", overhead, low=0)
    draft_overhead = overhead if draft_overhead is None else validate.number("draft_overhead", draft_overhead, low=0)
    return _Engine(accelerator(accel), dtype, overhead, draft_overhead, validate.choice("overlap", overlap, OVERLAPS),
                   validate.integer("tp", tp, low=1), validate.number("allreduce_latency", allreduce_latency, low=0))


def pass_time(shape: ModelShape, accel, batch: int, new_tokens: int, context: int = 0, dtype: str | None = None,
              overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
              draft_overhead: float | None = None) -> float:
    """Seconds for one pass of ``shape`` (B sequences × n new tokens after L cached ones) on tp devices.
    A target pass pays ``overhead``; ``draft_overhead`` is accepted (and checked) so a calibration passes whole."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency)
    return eng.seconds(shape, batch, new_tokens, context, eng.overhead, dtype)


def decode_summary(shape: ModelShape, accel, batch: int, context: int = 0, dtype: str | None = None,
                   overhead: float = 0.0, overlap: str = "kernel", draft_overhead: float | None = None) -> dict:
    """One row of a decode-step table: intensity, step time, per-token time, tokens/s, which roof binds
    (the roof is the roofline's; ``overhead`` adds to the step time)."""
    accel = accelerator(accel)
    c = decode_cost(shape, batch, context)
    t = roofline_time(c, accel, dtype, overhead, overlap, draft_overhead=draft_overhead)
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


NGRAM = NoWeights()
Draft = ModelShape | EarlyExit | SinglePass | Heads | NoWeights


def early_exit_shape(target: ModelShape, layers: int) -> ModelShape:
    """The shape an early exit runs: the target's first ``layers`` blocks plus its LM head."""
    return replace(target, n_layers=validate.integer("layers", layers, low=1, high=target.n_layers - 1),
                   name=f"{target.name} first {layers} layers")


def _draft_seconds(draft: Draft, eng: _Engine, batch: int, k: int, context: int, target: ModelShape | None) -> float:
    if isinstance(draft, EarlyExit):
        if target is None:
            raise validate.BadArgument("an EarlyExit draft needs the target shape (target=...)")
        draft = early_exit_shape(target, draft.layers)
    if not isinstance(draft, Draft):
        raise validate.BadArgumentType(f"draft must be a ModelShape, EarlyExit, SinglePass, Heads or NoWeights; "
                                       f"got {type(draft).__name__}")
    if k == 0:
        return 0.0
    if isinstance(draft, NoWeights):
        return eng.draft_overhead
    if isinstance(draft, SinglePass):
        return eng.seconds(draft.shape, batch, k, context, eng.draft_overhead)
    if isinstance(draft, Heads):
        peak = eng.accel.peak(_math_dtype(eng.accel, None, draft.shape.compute))
        head = _matmul(draft.shape, batch, eng.tp)
        heads = Kernel("heads", k * head.flops, k * head.bytes)
        return _seconds((heads,), eng.accel, peak, eng.overlap, eng.latency) + eng.draft_overhead
    return sum(eng.seconds(draft, batch, 1, context + i, eng.draft_overhead, eng.dtype) for i in range(k))


def draft_time(draft: Draft, accel, batch: int, k: int, context: int = 0, dtype: str | None = None,
               overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
               target: ModelShape | None = None, draft_overhead: float | None = None) -> float:
    """Time to draft k tokens per sequence for B sequences whose draft-side KV holds ``context`` tokens.

    A draft model or an early exit runs k sequential one-token passes, the i-th at context L + i;
    a single-pass drafter or Medusa heads run one pass; an n-gram drafter reads no weights and costs
    its per-pass overhead once. The per-pass overhead is ``draft_overhead`` where given (as in a
    calibration), else ``overhead``; an early exit needs the ``target``.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency)
    return _draft_seconds(draft, eng, batch, k, context, target)


def iteration_time(target: ModelShape, draft: Draft, accel, batch: int, k: int, context: int = 0,
                   dtype: str | None = None, overhead: float = 0.0, draft_overhead: float | None = None,
                   overlap: str = "kernel", draft_context: int | None = None, tp: int = 1,
                   allreduce_latency: float = 0.0) -> float:
    """T_iter = T_draft(k tokens) + T_target(B, k + 1 tokens).

    ``draft_overhead`` (per draft pass) defaults to ``overhead``; ``draft_context``, the draft's own KV
    length (a StreamingLLM window, say), defaults to ``context``.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency)
    return _iteration_seconds(target, draft, eng, batch, k, context, draft_ctx)


def _iteration_seconds(target, draft, eng: _Engine, batch, k, context, draft_context) -> float:
    verify = eng.seconds(target, batch, k + 1, context, eng.overhead, eng.dtype)
    return _draft_seconds(draft, eng, batch, k, draft_context, target) + verify


def speedup_from_times(alpha: float, k: int, t_decode: float, t_draft_step: float, t_verify: float) -> float:
    """S = E[N]·T_decode / (k·T_draft_step + T_verify), for times however obtained (modelled or measured)."""
    t_decode = validate.number("t_decode", t_decode, low=0)
    t_draft_step = validate.number("t_draft_step", t_draft_step, low=0)
    t_verify = validate.number("t_verify", t_verify, low=0, low_open=True)
    return expected_tokens(alpha, k) * t_decode / (k * t_draft_step + t_verify)


def batch_speedup(target: ModelShape, draft: Draft, accel, batch: int, k: int, alpha: float, context: int = 0,
                  dtype: str | None = None, overhead: float = 0.0, draft_overhead: float | None = None,
                  overlap: str = "kernel", draft_context: int | None = None, tp: int = 1,
                  allreduce_latency: float = 0.0) -> float:
    """S(B) = E[N]·T_target(B, 1) / (T_draft(B, k) + T_target(B, k + 1)). k = 0 gives 1.

    ``overhead``: seconds added to every target pass; ``draft_overhead`` to every draft pass (default:
    ``overhead``); ``overlap``: "kernel" | "pass" | "none"; ``draft_context``: the draft's KV length
    (default: ``context``); ``tp``: tensor-parallel devices; ``allreduce_latency``: seconds per all-reduce.
    """
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    en = expected_tokens(alpha, k)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency)
    return _speedup(target, draft, eng, batch, k, en, context, draft_ctx)


def _speedup(target, draft, eng: _Engine, batch, k, en, context, draft_context) -> float:
    plain = eng.seconds(target, batch, 1, context, eng.overhead, eng.dtype)
    return en * plain / _iteration_seconds(target, draft, eng, batch, k, context, draft_context)


# ---------------------------------------------------------------------------------------------- where it pays


def _pays(target, draft, accel, k, alpha, context, model: dict):
    """S(B) > 1 as a function of B alone, with every other argument checked once."""
    model = dict(model)
    context = validate.integer("context", context, low=0)
    draft_context = model.pop("draft_context", None)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    k, en = validate.integer("k", k, low=0), expected_tokens(alpha, k)
    eng = _engine(accel, **model)
    return lambda b: _speedup(target, draft, eng, b, k, en, context, draft_ctx) > 1


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
                   limit: int | None = None, **model) -> list[tuple[int, int]]:
    """The batch ranges [first, last] (inclusive) where S(B) > 1, for B from 1 to ``limit``.

    ``limit`` defaults to ``max_batch`` (the largest batch that fits in memory; tp and draft_context
    from ``model`` count) or 65,536 on an accelerator without a memory size. A range can be empty,
    start above 1 (self-speculation at long context) or run up to the limit. ``model``: the keyword
    arguments of ``batch_speedup`` (dtype, overhead, draft_overhead, overlap, draft_context, tp, ...).

    S is evaluated on a grid of 4 points per doubling of B and each sign change is bisected to the
    exact batch; a paying range narrower than the grid's step could be missed (the model's S(B) is
    a ratio of piecewise-linear functions of B and changes sign at most a few times; tests compare
    with a full scan).
    """
    if limit is None:
        fits = max_batch(target, draft, accel, context, k=k, tp=model.get("tp", 1),
                         draft_context=model.get("draft_context"))
        limit = fits if fits is not None else 1 << 16
        if limit < 1:
            return []
    limit = validate.integer("limit", limit, low=1)
    pays = _pays(target, draft, accel, k, alpha, context, model)
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


def calibration(accelerator_name: str, source: str) -> dict:
    """Engine knobs fitted to a published data set (``specnotes.calibrate.calibration``; Chapter 6)."""
    from specnotes.calibrate import calibration as fitted  # calibrate imports cost: import on call

    return fitted(accelerator_name, source)
