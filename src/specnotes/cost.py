"""The analytic cost model of speculative decoding (DESIGN.md §2).

One forward pass over ``batch`` sequences, each adding ``new_tokens`` tokens after
``context`` cached ones, costs

- FLOPs: 2·P·B·n for the matmuls (P = matmul parameters, LM head included) plus attention,
  4·d_head·n_heads per (query, key) pair per layer (QKᵀ and AV);
- bytes: w·P for the weights (read once per pass, whatever B and n are), B·KV(L) to read each
  sequence's cache, and B·n·KV(1) to write the new entries.

Dropped, because they are small next to these at the shapes the book uses: activations
(B·n·d_model per layer), the embedding gather, norms, rotary embeddings and softmax FLOPs.

The roofline time of a pass is max(bytes/BW, FLOPs/peak) + t0: perfect overlap of memory and
compute inside a pass, and a fixed per-pass overhead t0 (launches, framework). Passes that run
one after another (the k draft steps, then verify) add.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specnotes import validate
from specnotes.hardware import DTYPE_BYTES, Accelerator, accelerator


@dataclass(frozen=True)
class ModelShape:
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    weight_bytes: float = 2
    kv_bytes: float = 2
    name: str = ""

    def __post_init__(self):
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("d_model must be a multiple of n_heads, and n_heads of n_kv_heads")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def layer_params(self) -> int:
        attention = 2 * self.d_model * self.d_model + 2 * self.d_model * self.n_kv_heads * self.d_head
        mlp = 3 * self.d_model * self.d_ff  # gated (SwiGLU): gate, up, down
        return attention + mlp

    @property
    def params(self) -> int:
        """Matmul parameters: every layer's projections plus the LM head (not the embedding gather)."""
        return self.n_layers * self.layer_params + self.d_model * self.vocab

    @property
    def weight_bytes_total(self) -> float:
        return self.weight_bytes * self.params

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token in every layer."""
        return 2 * self.n_layers * self.n_kv_heads * self.d_head * self.kv_bytes

    def in_dtype(self, dtype: str) -> ModelShape:
        """The same model with weights and KV cache stored in ``dtype``."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
        return replace(self, weight_bytes=DTYPE_BYTES[dtype], kv_bytes=DTYPE_BYTES[dtype])


# Published shapes (config.json of each model on the Hugging Face hub).
LLAMA_3_8B = ModelShape(32, 4096, 32, 8, 14336, 128256, name="Llama-3-8B")
LLAMA_3_70B = ModelShape(80, 8192, 64, 8, 28672, 128256, name="Llama-3-70B")
LLAMA_3_2_1B = ModelShape(16, 2048, 32, 8, 8192, 128256, name="Llama-3.2-1B")
PRESETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_2_1B)}


@dataclass(frozen=True)
class PassCost:
    flops: float
    bytes: float
    tokens: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def __add__(self, other: PassCost) -> PassCost:
        return PassCost(self.flops + other.flops, self.bytes + other.bytes, self.tokens + other.tokens)


def _check_int(name: str, value, low: int) -> None:
    if int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_pass(batch, new_tokens, context) -> None:
    _check_int("batch", batch, 1)
    _check_int("new_tokens", new_tokens, 1)
    _check_int("context", context, 0)


def matmul_cost(shape: ModelShape, batch: int, new_tokens: int) -> PassCost:
    """Projections and LM head: every weight read once, 2 FLOPs per weight per token."""
    _check_pass(batch, new_tokens, 0)
    tokens = batch * new_tokens
    return PassCost(2 * shape.params * tokens, shape.weight_bytes_total, tokens)


def gemm_cost(batch: int, d_in: int, d_out: int, weight_bytes: float = 2, act_bytes: float | None = None) -> PassCost:
    """y = x·W with x [batch, d_in], W [d_in, d_out]: 2·B·d_in·d_out FLOPs; W read once, x read, y written.

    AI = 2·B·d_in·d_out / (w·d_in·d_out + a·B·(d_in + d_out)) → 2B/w while B ≪ d_in, d_out.
    """
    _check_int("batch", batch, 1)
    _check_int("d_in", d_in, 1)
    _check_int("d_out", d_out, 1)
    act_bytes = weight_bytes if act_bytes is None else act_bytes
    nbytes = weight_bytes * d_in * d_out + act_bytes * batch * (d_in + d_out)
    return PassCost(2 * batch * d_in * d_out, nbytes, batch)


def attended_pairs(new_tokens: int, context: int) -> int:
    """(query, key) pairs per sequence: new token i sees the context and new tokens 0..i."""
    return new_tokens * context + new_tokens * (new_tokens + 1) // 2


def attention_cost(shape: ModelShape, batch: int, new_tokens: int, context: int = 0) -> PassCost:
    """Attention over the KV cache: reads each sequence's cache once, writes the new entries."""
    _check_pass(batch, new_tokens, context)
    flops = 4 * shape.d_head * shape.n_heads * shape.n_layers * attended_pairs(new_tokens, context)
    kv = shape.kv_bytes_per_token * (context + new_tokens)
    return PassCost(batch * flops, batch * kv, batch * new_tokens)


def forward_cost(shape: ModelShape, batch: int, new_tokens: int, context: int = 0) -> PassCost:
    attn = attention_cost(shape, batch, new_tokens, context)
    return matmul_cost(shape, batch, new_tokens) + replace(attn, tokens=0)


def decode_cost(shape: ModelShape, batch: int, context: int = 0) -> PassCost:
    return forward_cost(shape, batch, 1, context)


def verify_cost(shape: ModelShape, batch: int, k: int, context: int = 0) -> PassCost:
    """One target pass scoring k drafted tokens plus the bonus position: n = k + 1."""
    _check_int("k", k, 0)
    return forward_cost(shape, batch, k + 1, context)


def mixed_verify_cost(shape: ModelShape, batch: int, k: int, speculating: int = 1, context: int = 0) -> PassCost:
    """A batch where only ``speculating`` of the ``batch`` sequences verify k drafts.

    Tokens per weight read: B + speculating·k. With one speculating sequence this is the
    source note's "B + k"; with all of them it is B(k + 1).
    """
    _check_int("k", k, 0)
    _check_int("speculating", speculating, 0)
    if speculating > batch:
        raise ValueError(f"speculating must be in [0, batch={batch}], got {speculating}")
    tokens = batch + speculating * k
    cost = PassCost(2 * shape.params * tokens, shape.weight_bytes_total, tokens)
    if speculating:
        cost += replace(attention_cost(shape, speculating, k + 1, context), tokens=0)
    if batch > speculating:
        cost += replace(attention_cost(shape, batch - speculating, 1, context), tokens=0)
    return cost


def _check_dtype(accel: Accelerator, dtype: str) -> None:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    accel.peak(dtype)


def roofline_time(cost: PassCost, accel: Accelerator | str, dtype: str = "bf16", overhead: float = 0.0) -> float:
    """max(bytes / bandwidth, FLOPs / peak) + overhead, in seconds."""
    accel = accelerator(accel)
    _check_dtype(accel, dtype)
    if overhead < 0:
        raise ValueError(f"overhead must be >= 0 seconds, got {overhead}")
    return max(cost.bytes / accel.mem_bandwidth, cost.flops / accel.peak(dtype)) + overhead


def decode_summary(shape: ModelShape, accel, batch: int, context: int = 0, dtype: str = "bf16") -> dict:
    """One row of a decode-step table: intensity, step time, per-token time, tokens/s, which roof binds."""
    accel = accelerator(accel)
    c = decode_cost(shape, batch, context)
    t = roofline_time(c, accel, dtype)
    return {"B": batch, "AI (FLOP/byte)": c.intensity, "step ms": 1e3 * t, "ms per token": 1e3 * t / batch,
            "tokens/s": batch / t, "bound": "memory" if c.intensity < accel.ridge(dtype) else "compute"}


def expected_tokens(alpha: float, k: int) -> float:
    """E[N] = (1 - α^(k+1)) / (1 - α): tokens per iteration with i.i.d. acceptance (Leviathan Eq. 1)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    _check_int("k", k, 0)
    if alpha == 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_pmf(alpha: float, k: int) -> list[float]:
    """P(N = n) for n = 1..k+1: tokens one iteration yields under i.i.d. acceptance (chapter 3).

    N = n ≤ k means n-1 acceptances then a rejection, α^(n-1)(1-α); N = k+1 means all k accepted,
    α^k. The mean is ``expected_tokens(alpha, k)``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    _check_int("k", k, 0)
    return [alpha ** (n - 1) * (1 - alpha) for n in range(1, k + 1)] + [alpha**k]


def speedup(alpha: float, k: int, c: float) -> float:
    """Memory-bound walltime improvement E[N] / (1 + k·c) (Leviathan Thm 3.8)."""
    if c < 0:
        raise ValueError(f"c (draft step time / target step time) must be >= 0, got {c}")
    return expected_tokens(alpha, k) / (1 + k * c)


def optimal_k(alpha: float, c: float, k_max: int = 64) -> int:
    """The k in 0..k_max that maximizes ``speedup`` (k = 0 means: do not speculate)."""
    _check_int("k_max", k_max, 0)
    return max(range(k_max + 1), key=lambda k: speedup(alpha, k, c))


def draft_time(draft: ModelShape, accel, batch: int, k: int, context: int = 0,
               dtype: str = "bf16", overhead: float = 0.0) -> float:
    """k sequential decode passes of an autoregressive draft model, the i-th at context L + i."""
    _check_int("k", k, 0)
    return sum(roofline_time(decode_cost(draft, batch, context + i), accel, dtype, overhead) for i in range(k))


def iteration_time(target: ModelShape, draft: ModelShape, accel, batch: int, k: int, context: int = 0,
                   dtype: str = "bf16", overhead: float = 0.0, draft_overhead: float | None = None) -> float:
    """T_iter = k·T_draft(B) + T_target(B, k + 1 tokens). ``draft_overhead`` defaults to ``overhead``."""
    verify = roofline_time(verify_cost(target, batch, k, context), accel, dtype, overhead)
    draft_t0 = overhead if draft_overhead is None else draft_overhead
    return draft_time(draft, accel, batch, k, context, dtype, draft_t0) + verify


def speedup_from_times(alpha: float, k: int, t_decode: float, t_draft_step: float, t_verify: float) -> float:
    """S = E[N]·T_decode / (k·T_draft_step + T_verify), for times however obtained (modelled or measured)."""
    if min(t_decode, t_draft_step, t_verify) < 0 or t_verify == 0:
        raise ValueError("times must be >= 0 seconds, and the verify time > 0")
    return expected_tokens(alpha, k) * t_decode / (k * t_draft_step + t_verify)


def batch_speedup(target: ModelShape, draft: ModelShape, accel, batch: int, k: int, alpha: float,
                  context: int = 0, dtype: str = "bf16", overhead: float = 0.0,
                  draft_overhead: float | None = None) -> float:
    """S(B) = E[N]·T_target(B, 1) / (k·T_draft(B) + T_target(B, k + 1))."""
    plain = roofline_time(decode_cost(target, batch, context), accel, dtype, overhead)
    spec = iteration_time(target, draft, accel, batch, k, context, dtype, overhead, draft_overhead)
    return expected_tokens(alpha, k) * plain / spec


def crossover_batch(target: ModelShape, draft: ModelShape, accel, k: int, alpha: float, context: int = 0,
                    dtype: str = "bf16", overhead: float = 0.0, max_batch: int = 1 << 16) -> int | None:
    """Smallest B with S(B) <= 1, or None if speculation still pays at max_batch.

    Doubles B until S(B) <= 1, then bisects. This finds the smallest such B because the
    model's S(B) does not rise again with B: the verify pass leaves the bandwidth roof no
    later than the plain decode does (tests/test_cost.py checks it against a full scan).
    """
    _check_int("max_batch", max_batch, 1)
    pays = lambda b: batch_speedup(target, draft, accel, b, k, alpha, context, dtype, overhead) > 1
    if not pays(1):
        return 1
    lo, hi = 1, 2
    while pays(hi):
        if hi >= max_batch:
            return None
        lo, hi = hi, min(2 * hi, max_batch)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return hi


def implied_alpha(tokens_per_iteration: float, k: int) -> float:
    """The α at which ``expected_tokens(α, k)`` equals a measured E[N]: its inverse under i.i.d.
    acceptance (E[N] rises with α), by bisection (to ~1e-8 near α = 1, where E[N] flattens)."""
    k = validate.integer("k", k, low=1)
    target = validate.number("tokens_per_iteration", tokens_per_iteration, 1, k + 1)
    if target == k + 1:  # every draft accepted
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < target else (lo, mid)
    return (lo + hi) / 2
