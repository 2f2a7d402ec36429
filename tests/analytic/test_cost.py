"""The analytic model against values derived by hand (see each comment)."""

import math

import pytest

from specnotes.analytic import cost
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, ModelShape, PassCost

H100 = "H100-SXM"


def test_llama_3_8b_params_by_hand():
    # per layer: q,o 2·4096² + k,v 2·4096·1024 + gated MLP 3·4096·14336 = 218,103,808
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert layer == 218_103_808
    assert LLAMA_3_8B.params == 32 * layer + 4096 * 128256 == 7_504_658_432
    # plus the 525M embedding table, the published 8.03B
    assert LLAMA_3_8B.params + 4096 * 128256 == pytest.approx(8.03e9, rel=1e-3)
    assert LLAMA_3_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_decode_intensity_is_batch_at_zero_context(batch):
    # matmuls: AI = 2PB / (2P + B·KV(1)); KV(1) = 128 KiB ≪ 2P = 15 GB, so AI ≈ B
    # (attention of the new token to itself adds a few FLOPs on top)
    c = cost.decode_cost(LLAMA_3_8B, batch)
    matmul_flops = 2 * LLAMA_3_8B.params * batch
    assert matmul_flops / c.bytes == pytest.approx(batch * 2 * LLAMA_3_8B.params / (
        2 * LLAMA_3_8B.params + batch * LLAMA_3_8B.kv_bytes_per_token), rel=1e-12)
    assert c.intensity == pytest.approx(batch, rel=0.01)


@pytest.mark.parametrize("batch,k", [(1, 4), (16, 4), (32, 7)])
def test_verify_intensity_is_batch_times_k_plus_one(batch, k):
    c = cost.verify_cost(LLAMA_3_8B, batch, k)
    assert c.tokens == batch * (k + 1)
    assert c.intensity == pytest.approx(batch * (k + 1), rel=0.01)


def test_attention_intensity_independent_of_batch():
    # FLOPs/bytes per sequence = (n_heads/n_kv)·(nL + n(n+1)/2)/(L + n) → (k+1)·4 for L ≫ k
    k, L = 4, 32768
    one = cost.attention_cost(LLAMA_3_8B, 1, k + 1, L)
    many = cost.attention_cost(LLAMA_3_8B, 64, k + 1, L)
    assert one.intensity == many.intensity
    n = k + 1
    assert one.intensity == pytest.approx(4 * (n * L + n * (n + 1) / 2) / (L + n), rel=1e-12)
    assert one.intensity == pytest.approx((k + 1) * 32 / 8, rel=1e-3)


def test_attention_flops_by_hand():
    # 1 new token at L = 10: pairs = 10 + 1; FLOPs = 4·d_head·n_heads·layers·pairs
    s = ModelShape(2, 64, 4, 2, 128, 100)
    c = cost.attention_cost(s, 3, 1, 10)
    assert c.flops == 3 * 4 * 16 * 4 * 2 * 11
    assert c.bytes == 3 * (2 * 2 * 2 * 16 * 2) * 11  # B·KV(1)·(L + n)


def test_kv_bytes_do_not_amortize_across_batch_but_do_across_k():
    L = 8192
    per_seq = LLAMA_3_8B.kv_bytes_per_token * L
    d1 = cost.decode_cost(LLAMA_3_8B, 1, L).bytes - LLAMA_3_8B.weight_bytes_total
    d64 = cost.decode_cost(LLAMA_3_8B, 64, L).bytes - LLAMA_3_8B.weight_bytes_total
    assert d64 == pytest.approx(64 * d1)
    v = cost.verify_cost(LLAMA_3_8B, 1, 4, L).bytes - LLAMA_3_8B.weight_bytes_total
    assert v == pytest.approx(d1 + 4 * LLAMA_3_8B.kv_bytes_per_token)  # only 4 more writes
    assert d1 == pytest.approx(per_seq + LLAMA_3_8B.kv_bytes_per_token)


def test_mixed_batch_one_speculating_is_b_plus_k():
    b, k = 32, 4
    one = cost.mixed_verify_cost(LLAMA_3_8B, b, k, speculating=1)
    assert one.tokens == b + k
    assert one.intensity == pytest.approx(b + k, rel=0.01)
    everyone = cost.mixed_verify_cost(LLAMA_3_8B, b, k, speculating=b)
    assert everyone == cost.verify_cost(LLAMA_3_8B, b, k)
    nobody = cost.mixed_verify_cost(LLAMA_3_8B, b, k, speculating=0, context=100)
    assert nobody == cost.decode_cost(LLAMA_3_8B, b, context=100)


def test_roofline_time_by_hand():
    # H100 SXM: 3.35e12 B/s, 989e12 FLOP/s bf16
    memory_bound = PassCost(flops=1e9, bytes=1e9, tokens=1)
    assert cost.roofline_time(memory_bound, H100) == pytest.approx(1e9 / 3.35e12)
    compute_bound = PassCost(flops=1e12, bytes=1e9, tokens=1)
    assert cost.roofline_time(compute_bound, H100) == pytest.approx(1e12 / 989e12)
    assert cost.roofline_time(compute_bound, H100, overhead=5e-6) == pytest.approx(1e12 / 989e12 + 5e-6)


def test_expected_tokens_by_hand():
    assert cost.expected_tokens(0.0, 4) == 1.0
    assert cost.expected_tokens(1.0, 4) == 5.0
    assert cost.expected_tokens(0.5, 0) == 1.0
    assert cost.expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert cost.expected_tokens(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
    # continuous at α → 1
    assert cost.expected_tokens(1 - 1e-9, 4) == pytest.approx(5.0, rel=1e-6)


def test_speedup_is_leviathan_theorem_3_8():
    # (1 − α^(γ+1)) / ((1 − α)(γc + 1)), e.g. α = 0.75, γ = 7, c = 0.05
    assert cost.speedup(0.75, 7, 0.05) == pytest.approx((1 - 0.75**8) / (0.25 * (7 * 0.05 + 1)))
    assert cost.speedup(0.75, 7, 0.0) == pytest.approx(3.5995483, rel=1e-6)
    assert cost.speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)


def test_optimal_k():
    assert cost.optimal_k(0.0, 0.1) == 0
    k = cost.optimal_k(0.8, 0.05)
    assert cost.speedup(0.8, k, 0.05) >= max(cost.speedup(0.8, j, 0.05) for j in range(30))
    # Leviathan Cor. 3.9: if α > c some γ gives at least (1 + α)/(1 + c)
    assert cost.speedup(0.6, cost.optimal_k(0.6, 0.3), 0.3) >= (1 + 0.6) / (1 + 0.3) - 1e-12


@pytest.mark.parametrize("alpha,k", [(0.6, 3), (0.8, 5), (0.9, 8)])
def test_batch_speedup_memory_bound_limit_is_theorem_3_8(alpha, k):
    t_target = cost.roofline_time(cost.decode_cost(LLAMA_3_8B, 1), H100)
    t_draft = cost.roofline_time(cost.decode_cost(LLAMA_3_2_1B, 1), H100)
    c = t_draft / t_target
    assert c == pytest.approx(LLAMA_3_2_1B.params / LLAMA_3_8B.params, rel=1e-3)
    s = cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, k, alpha)
    assert s == pytest.approx(cost.speedup(alpha, k, c), rel=1e-3)


def test_batch_speedup_falls_to_below_one_at_large_batch():
    s = [cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, b, 4, 0.8) for b in (1, 16, 64, 256, 1024)]
    assert s == sorted(s, reverse=True)
    assert s[0] > 2 and s[-1] < 1


@pytest.mark.parametrize("accel,k,alpha,context", [
    (H100, 4, 0.8, 0), (H100, 2, 0.6, 0), ("A100-80GB", 8, 0.9, 0), ("T4", 4, 0.7, 512), (H100, 4, 0.8, 4096),
])
def test_crossover_batch_matches_full_scan(accel, k, alpha, context):
    dtype = "fp16" if accel == "T4" else "bf16"
    b_star = cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, accel, k, alpha, context, dtype)
    scan = [b for b in range(1, 2049)
            if cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, accel, b, k, alpha, context, dtype) <= 1]
    if scan:
        assert b_star == scan[0]
    else:  # speculation pays over the whole scan: B* is beyond it, or there is none
        assert b_star is None or b_star > 2048


def test_crossover_none_when_speculation_always_pays():
    # a free draft (1 layer, tiny) at α = 1: S(B) → (k+1)·T(B,1)/T(B,k+1) ≥ 1 only while memory-bound,
    # so give it a max_batch below the ridge
    tiny = ModelShape(1, 64, 1, 1, 64, 100)
    assert cost.crossover_batch(LLAMA_3_8B, tiny, H100, 4, 1.0, max_batch=32) is None


def test_in_dtype():
    fp32 = LLAMA_3_8B.in_dtype("fp32")
    assert fp32.weight_bytes_total == 2 * LLAMA_3_8B.weight_bytes_total
    assert math.isclose(cost.decode_cost(fp32, 8).intensity, 4, rel_tol=0.01)  # 2B/w with w = 4


def test_gemm_intensity_by_hand():
    # Llama-3-8B up-projection 4096 → 14336 at B = 16, bf16:
    # 2·16·4096·14336 / (2·4096·14336 + 2·16·(4096 + 14336))
    c = cost.gemm_cost(16, 4096, 14336)
    assert c.intensity == pytest.approx(2 * 16 * 4096 * 14336 / (2 * 4096 * 14336 + 2 * 16 * (4096 + 14336)))
    assert c.intensity == pytest.approx(16, rel=0.01)  # ≈ B in bf16
    assert cost.gemm_cost(16, 4096, 14336, weight_bytes=4).intensity == pytest.approx(8, rel=0.01)  # B/2 in fp32
    assert cost.gemm_cost(16, 4096, 14336, weight_bytes=1, act_bytes=2).intensity == pytest.approx(32, rel=0.01)
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        cost.gemm_cost(0, 4, 4)


def test_decode_summary_by_hand():
    one = cost.decode_summary(LLAMA_3_8B, H100, 1)
    assert one["step ms"] == pytest.approx(1e3 * cost.decode_cost(LLAMA_3_8B, 1).bytes / 3.35e12)
    assert one["tokens/s"] == pytest.approx(1e3 / one["step ms"]) and one["bound"] == "memory"
    big = cost.decode_summary(LLAMA_3_8B, H100, 1024)
    assert big["bound"] == "compute"
    # per kernel: the matmuls are compute-bound, attention (KV of the one new token) memory-bound
    matmul_s = 2 * LLAMA_3_8B.params * 1024 / 989e12
    attention_s = 1024 * LLAMA_3_8B.kv_bytes_per_token / 3.35e12
    assert big["step ms"] == pytest.approx(1e3 * (matmul_s + attention_s))


@pytest.mark.parametrize("k,alpha", [(4, 0.8), (2, 0.7), (6, 0.9)])
def test_crossover_matches_the_measurement_free_derivation(k, alpha):
    # Chapter 4's worked example. Between B(k+1) = ridge and B = ridge the draft is memory-bound
    # (k·c decode steps, c = P_draft/P_target) and verify is compute-bound (B(k+1)/ridge decode
    # steps), so S(B) = E[N] / (k·c + B(k+1)/ridge) = 1 at B* = ridge·(E[N] − k·c)/(k + 1).
    ridge = 989e12 / 3.35e12
    c = LLAMA_3_2_1B.params / LLAMA_3_8B.params
    en = cost.expected_tokens(alpha, k)
    derived = ridge * (en - k * c) / (k + 1)
    assert ridge / (k + 1) < derived < ridge  # inside the regime the derivation assumes
    b_star = cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, k, alpha)
    assert b_star == pytest.approx(derived, rel=0.03)
    assert cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, round(derived * 0.9), k, alpha) > 1


def test_tokens_pmf_by_hand():
    # k = 2, α = 0.5: reject first 0.5, accept then reject 0.25, accept both 0.25
    assert cost.tokens_pmf(0.5, 2) == pytest.approx([0.5, 0.25, 0.25])
    assert cost.tokens_pmf(0.0, 3) == [1.0, 0.0, 0.0, 0.0]
    assert cost.tokens_pmf(1.0, 3) == [0.0, 0.0, 0.0, 1.0]
    assert cost.tokens_pmf(0.3, 0) == [1.0]
    for alpha, k in [(0.8, 4), (0.37, 7)]:
        pmf = cost.tokens_pmf(alpha, k)
        assert sum(pmf) == pytest.approx(1.0)
        assert sum(n * p for n, p in enumerate(pmf, 1)) == pytest.approx(cost.expected_tokens(alpha, k))
    with pytest.raises(ValueError):
        cost.tokens_pmf(1.5, 2)
    with pytest.raises(ValueError):
        cost.tokens_pmf(0.5, -1)


def test_speedup_from_times_by_hand():
    # α = 0.8, k = 4: E[N] = 3.3616; 3.3616·10 / (4·1 + 20) = 1.4007
    assert cost.speedup_from_times(0.8, 4, 10.0, 1.0, 20.0) == pytest.approx(3.3616 * 10 / 24)
    with pytest.raises(ValueError, match="t_draft_step must be a number >= 0"):
        cost.speedup_from_times(0.8, 4, 10.0, -1.0, 20.0)
    with pytest.raises(ValueError, match="t_verify must be a number > 0"):
        cost.speedup_from_times(0.8, 4, 10.0, 1.0, 0.0)


def test_draft_overhead_is_charged_per_draft_step():
    base = cost.iteration_time(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, overhead=1e-4)
    more = cost.iteration_time(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, overhead=1e-4, draft_overhead=3e-4)
    assert more - base == pytest.approx(4 * 2e-4)


@pytest.mark.parametrize("en", [1.0, 1.2, 1.5, 1.99, 2.0])
def test_implied_alpha_at_k_1_is_en_minus_one(en):
    # E[N] = 1 + α at k = 1
    assert cost.implied_alpha(en, 1) == pytest.approx(en - 1, abs=1e-12)


@pytest.mark.parametrize("en", [1.0, 1.5, 2.28, 2.9, 3.0])
def test_implied_alpha_at_k_2_solves_the_quadratic(en):
    # E[N] = 1 + α + α² at k = 2: α = (√(4E − 3) − 1) / 2
    assert cost.implied_alpha(en, 2) == pytest.approx((math.sqrt(4 * en - 3) - 1) / 2, abs=1e-9)


def test_implied_alpha_bad_input():
    with pytest.raises(ValueError, match=r"tokens_per_iteration must be a number in \[1, 5\]"):
        cost.implied_alpha(5.5, 4)
    with pytest.raises(ValueError, match=r"k must be an integer >= 1"):
        cost.implied_alpha(1.5, 0)
