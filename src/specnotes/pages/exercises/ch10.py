"""Chapter 10's problems (10_sparse_targets): sparse targets, Qwen3-30B-A3B (128 experts, 8 per token) and
DeepSeek-V3's MLA; with the answer functions only they use."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

from specnotes.analytic import cost
from specnotes.pages.exercises.answers import H100, constant
from specnotes.pages.exercises.registry import _M, _P, register


def verify_experts(shape: cost.MoEShape, batch: int, k: int, bonus: bool = True) -> float:
    """Expected distinct experts per layer a verify pass touches: T = B(k + 1) tokens (B·k without the bonus)."""
    return cost.expected_experts(shape.n_experts, shape.experts_per_token, batch * (k + bonus))


def no_collisions(shape: cost.MoEShape, batch: int, k: int) -> float:
    """The slip of counting m experts per token with no two tokens sharing one: min(N, m·T)."""
    return min(shape.n_experts, shape.experts_per_token * batch * (k + 1))


def with_replacement(shape: cost.MoEShape, batch: int, k: int) -> float:
    """The slip of treating a token's m picks as m independent picks of one expert each."""
    n = shape.n_experts
    return n * (1 - (1 - 1 / n) ** (shape.experts_per_token * batch * (k + 1)))


def expert_bytes_ratio(shape: cost.MoEShape, batch: int, k: int) -> float:
    """Routed-expert bytes of a verify pass over those of a decode pass at the same batch: E[D](B(k+1))/E[D](B)."""
    return verify_experts(shape, batch, k) / cost.expected_experts(shape.n_experts, shape.experts_per_token, batch)


def saturating_batch(shape: cost.MoEShape, share: float = 0.95, per_token: bool = True) -> int:
    """The smallest batch whose decode pass touches ``share`` of the experts on average: E[D](B) ≥ share·N.
    ``per_token=False``: the slip of B·m ≥ share·N (no collisions)."""
    n, m = shape.n_experts, shape.experts_per_token
    if not per_token:
        return math.ceil(share * n / m)
    return math.ceil(math.log(1 - share) / math.log(1 - m / n))


def mla_kv_kb(shape: cost.MoEShape, latent: bool = True, rope: bool = True) -> float:
    """KV bytes per token, kB: MLA's latent (d_c + d_rope per layer), or the slips of caching per-head K and V
    (``latent=False``: 2·H·d_head per layer, as GQA with H KV heads) or forgetting the rope part."""
    if not latent:
        return 2 * shape.n_layers * shape.n_heads * shape.qk_nope_head_dim * shape.kv_bytes / 1e3
    return shape.n_layers * (shape.kv_lora_rank + shape.qk_rope_head_dim * rope) * shape.kv_bytes / 1e3


def widest_paying(n_experts: int, per_token: int = 8, k: int = 3, alpha: float = 0.7) -> int:
    """The last batch at which speculation pays (Qwen3-30B-A3B's layers with ``n_experts`` experts, a Qwen3-0.6B
    draft, H100, L = 1024, no memory limit up to 4096): the end of the last paying range (0: none)."""
    shape = replace(cost.QWEN3_30B_A3B, n_experts=n_experts, experts_per_token=per_token)
    ranges = cost.paying_batches(shape, cost.QWEN3_0_6B, H100, k, alpha, 1024, limit=4096)
    return ranges[-1][1] if ranges else 0


for _problem in [
    _P("ch10.p1a", "10_sparse_targets", "distinct experts per layer a verify pass of Qwen3-30B-A3B touches at B = 1, "
       "k = 3", partial(verify_experts, cost.QWEN3_30B_A3B, 1, 3), "experts", rel=0.01,
       mistakes=(_M(partial(no_collisions, cost.QWEN3_30B_A3B, 1, 3), "that assumes no two tokens share an expert: "
                    "each of the other 120 is missed by a token with probability 1 − 8/128, so expect some overlap"),
                 _M(partial(verify_experts, cost.QWEN3_30B_A3B, 1, 3, False), "the verify pass runs k + 1 = 4 "
                    "tokens per sequence: the pending token and the k drafts"),
                 _M(partial(with_replacement, cost.QWEN3_30B_A3B, 1, 3), "a token picks 8 different experts: it "
                    "misses a given one with probability 1 − m/N, not (1 − 1/N)^m"))),
    _P("ch10.p1b", "10_sparse_targets", "routed-expert bytes of that verify pass over a decode pass's, B = 1",
       partial(expert_bytes_ratio, cost.QWEN3_30B_A3B, 1, 3), "×", rel=0.01,
       mistakes=(_M(constant(1.0), "that is a dense target, which reads every weight once whatever the tokens; a MoE "
                    "pass reads the experts its tokens chose"),
                 _M(constant(4.0), "k + 1 would be right only if no two tokens shared an expert"))),
    _P("ch10.p2", "10_sparse_targets", "the smallest batch whose plain decode pass touches 95% of Qwen3-30B-A3B's "
       "experts on average", partial(saturating_batch, cost.QWEN3_30B_A3B), "sequences", rel=0,
       mistakes=(_M(partial(saturating_batch, cost.QWEN3_30B_A3B, per_token=False), "B·m = 0.95·N ignores tokens "
                    "choosing the same experts: solve 1 − (1 − m/N)^B = 0.95"),
                 _M(partial(saturating_batch, cost.QWEN3_30B_A3B, 0.99), "that is 99%: the question asks for 95%"))),
    _P("ch10.p3a", "10_sparse_targets", "DeepSeek-V3's KV cache per token in bf16 (kB)",
       partial(mla_kv_kb, cost.DEEPSEEK_V3), "kB", rel=0.01,
       mistakes=(_M(partial(mla_kv_kb, cost.DEEPSEEK_V3, latent=False), "that caches per-head keys and values: MLA "
                    "caches one latent of d_c + d_rope per token and layer, which every head reads"),
                 _M(partial(mla_kv_kb, cost.DEEPSEEK_V3, rope=False), "the decoupled rotary key (qk_rope_head_dim = "
                    "64) is cached beside the 512-wide latent"))),
    _P("ch10.p3b", "10_sparse_targets", "FLOPs per byte of DeepSeek-V3's absorbed attention in a verify pass with "
       "k = 3, long context", partial(cost.mla_attention_intensity, cost.DEEPSEEK_V3, 4), "FLOP/byte", rel=0.02,
       mistakes=(_M(partial(cost.mla_attention_intensity, cost.DEEPSEEK_V3, 1), "that is one query per sequence, "
                    "a decode pass: the verify pass scores k + 1 = 4 queries against the same latent"),
                 _M(constant(4.0), "about k + 1 is GQA's attention in bf16 with one query head per KV head: under MLA "
                    "all 128 heads read one latent"))),
    _P("ch10.p4", "10_sparse_targets", "which MoE keeps speculation paying to larger batches, with the same active "
       "experts per token?", lambda: "a" if widest_paying(256) > widest_paying(32) else "b",
       choices={
           "a": "a sparser one, with more experts and the same m",
           "b": "a denser one, with fewer experts",
           "c": "neither: only the active parameters matter",
           "d": "one with more shared experts"},
       mistakes=(_M(constant("b"), "with few experts, decode already touches them all at small B and the verify pass "
                    "reaches the compute roof sooner: the paying range ends earlier"),
                 _M(constant("c"), "the active parameters set the FLOPs; the total experts set how many bytes a pass "
                    "reads and when the experts' matmuls turn compute-bound"),
                 _M(constant("d"), "shared experts are read by every pass like dense weights: they amortize as a "
                    "dense MLP does, and turn compute-bound as early"))),
]:
    register(_problem)
