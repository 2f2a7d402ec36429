"""Chapter 5's model terms (specnotes.analytic.context) against hand computations from the published shapes."""

import math
from dataclasses import replace

import pytest

from specnotes.analytic import context as cx
from specnotes.analytic import cost
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, NGRAM, EarlyExit

H100 = "H100-SXM"
BW, PEAK = 3.35e12, 989e12  # H100 SXM datasheet
RIDGE = PEAK / BW  # 295.2 FLOP/byte
# Llama-3-8B by hand: per layer 2·4096² (q, o) + 2·4096·1024 (k, v) + 3·4096·14336 (gated MLP)
P_8B = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 4096 * 128256  # 7,504,658,432
P_1B = 16 * (2 * 2048**2 + 2 * 2048 * 512 + 3 * 2048 * 8192) + 2048 * 128256
KV_8B = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, 2 bytes: 131,072 bytes per token
KV_1B = 2 * 16 * 8 * 64 * 2  # 32,768
EN = (1 - 0.8**5) / (1 - 0.8)  # E[N] at α = 0.8, k = 4


def test_hand_constants_are_the_presets():
    assert (P_8B, P_1B, KV_8B, KV_1B) == (LLAMA_3_8B.params, LLAMA_3_2_1B.params, LLAMA_3_8B.kv_bytes_per_token,
                                          LLAMA_3_2_1B.kv_bytes_per_token)


def test_attention_intensity_is_g_times_n_in_16_bit():
    # per layer, sequence and cached token: 4·128·32·5 FLOPs for 5 queries, 2·8·128·2 bytes of K and V
    assert cx.attention_intensity(LLAMA_3_8B, 5) == 4 * 128 * 32 * 5 / (2 * 8 * 128 * 2) == 20
    assert cx.attention_intensity(LLAMA_3_8B, 1) == 4  # decode: g
    assert cx.attention_intensity(replace(LLAMA_3_8B, kv_bytes=1), 5) == 40  # fp8 KV: half the bytes
    assert cx.attention_intensity(replace(LLAMA_3_8B, n_kv_heads=32), 5) == 5  # no GQA: n
    # the cost model's attention kernel tends to it at long context, at any batch
    for batch in (1, 64):
        exact = cost.attention_cost(LLAMA_3_8B, batch, 5, 1 << 20).intensity
        assert exact == pytest.approx(20, rel=1e-4)


def test_kv_context_weights_equal_kv():
    assert cx.kv_context(LLAMA_3_8B, 1) == 2 * P_8B / KV_8B == 114_512
    assert cx.kv_context(LLAMA_3_8B, 256) == pytest.approx(447.3, abs=0.05)
    # at L_kv the attention kernel reads as many bytes as the matmuls (up to the k+1 new entries)
    b, ell = 128, 894
    assert cx.kv_context(LLAMA_3_8B, b) == pytest.approx(ell, abs=1)
    assert cost.attention_cost(LLAMA_3_8B, b, 1, ell).bytes == pytest.approx(2 * P_8B, rel=2e-3)


def test_compute_boundaries_and_the_triple_point():
    bc = cx.compute_batch(LLAMA_3_8B, H100, 5)
    lc = cx.compute_context(LLAMA_3_8B, H100, 5)
    assert bc == pytest.approx(RIDGE * 2 / (2 * 5))  # 59.0
    assert lc == pytest.approx(2 * P_8B * 5 / (RIDGE * KV_8B))  # 1939
    assert round(bc) == 59 and round(lc) == 1939
    # the three boundaries meet: the hyperbola passes through (B_c, L_c)
    assert cx.kv_context(LLAMA_3_8B, 59) * 59 == pytest.approx(bc * lc, rel=1e-12)


@pytest.mark.parametrize("batch, context, expected", [
    (1, 0, "weights"), (1, 200_000, "KV cache"), (512, 0, "compute"), (512, 4096, "KV cache"), (32, 1024, "weights"),
])
def test_regime_by_hand(batch, context, expected):
    n = 5
    terms = {"weights": 2 * P_8B / BW, "KV cache": batch * KV_8B * (context + n) / BW,
             "compute": 2 * P_8B * batch * n / PEAK}
    assert cx.pass_terms(LLAMA_3_8B, H100, batch, n, context) == pytest.approx(terms)
    assert max(terms, key=terms.get) == expected == cx.regime(LLAMA_3_8B, H100, batch, n, context)


def test_regime_boundaries_lie_on_the_boundaries():
    lines = cx.regime_boundaries(LLAMA_3_8B, H100, 5, (1, 4096), (64, 131072))
    assert set(lines) == {"weights | KV cache", "weights | compute", "KV cache | compute"}
    bs, ls = lines["weights | KV cache"]
    inside = [(b, ell) for b, ell in zip(bs, ls, strict=True) if 64 < ell < 131072]
    assert inside and all(b * ell == pytest.approx(2 * P_8B / KV_8B) for b, ell in inside)
    assert max(bs) == pytest.approx(RIDGE / 5)  # stops at B_c
    assert lines["weights | compute"][0] == [pytest.approx(RIDGE / 5)] * 2
    assert lines["KV cache | compute"][1] == [pytest.approx(1939.4, abs=0.1)] * 2
    # a window above L_c holds no compute boundary along L
    assert "KV cache | compute" not in cx.regime_boundaries(LLAMA_3_8B, H100, 5, (1, 4096), (4096, 131072))


def test_draft_kv_ratio_by_hand():
    assert cx.draft_kv_ratio(LLAMA_3_8B, LLAMA_3_2_1B, 4, 8192) == 4 * KV_1B / KV_8B == 1.0
    assert cx.draft_kv_ratio(LLAMA_3_8B, LLAMA_3_2_1B, 4, 8192, 512) == 4 * KV_1B * 512 / (KV_8B * 8192)
    assert cx.draft_kv_ratio(LLAMA_3_8B, NGRAM, 4, 8192) == 0
    assert cx.draft_kv_ratio(LLAMA_3_8B, EarlyExit(8), 4, 8192) == 4 * 8 / 32  # its 8 layers of the target's cache
    assert cx.draft_kv_ratio(LLAMA_3_8B, LLAMA_3_8B, 3, 32768, 512) == 3 * 512 / 32768  # MagicDec-style


LONG = 1 << 25  # 33.5M tokens: the KV reads dwarf the weights and the FLOPs at any batch


@pytest.mark.parametrize("draft, window, rho", [
    (LLAMA_3_2_1B, None, 4 * KV_1B / KV_8B),  # 1: the full-context 1B draft reads a quarter of the KV, 4 times
    (LLAMA_3_2_1B, 512, 4 * KV_1B * 512 / (KV_8B * LONG)),
    (NGRAM, None, 0.0),
    (LLAMA_3_8B, None, 4.0),  # self-speculation with the full cache
    (LLAMA_3_8B, 512, 4 * 512 / LONG),
])
def test_kv_bound_speedup_is_the_long_context_limit(draft, window, rho):
    limit = cx.kv_bound_speedup(LLAMA_3_8B, draft, 4, 0.8, LONG, window)
    assert limit == pytest.approx(EN / (1 + rho))
    full = cost.batch_speedup(LLAMA_3_8B, draft, H100, 4, 4, 0.8, LONG, draft_context=window)
    assert full == pytest.approx(limit, rel=0.01)
    assert (limit > 1) == (rho < EN - 1)  # the draft-KV condition


def l_inf_by_hand(draft_params, draft_kv, window=None):
    a, a_q = 2 * P_8B / RIDGE, 2 * draft_params / RIDGE
    fixed = (5 - EN) * a + 4 * a_q
    if window is None:
        return fixed / ((EN - 1) * KV_8B - 4 * draft_kv)
    return (fixed + 4 * window * draft_kv) / ((EN - 1) * KV_8B)


def flips(l_inf, draft, window):
    """crossover_batch changes from a B* (1 if it never pays) below L_∞ to None (pays up to 65,536) above it."""
    def b_star(ell):
        return cost.crossover_batch(LLAMA_3_8B, draft, H100, 4, 0.8, ell,
                                    draft_context=None if window is None else min(ell, window))
    below, above = b_star(int(0.9 * l_inf)), b_star(int(1.1 * l_inf))
    return below is not None and above is None


WRONG_L_INF = {  # deliberately wrong derivations the flip test must reject
    "forgets the draft's KV": lambda: l_inf_by_hand(P_1B, 0),
    "forgets the draft's weights": lambda: l_inf_by_hand(0, KV_1B),
    "forgets verification's FLOPs": lambda: 4 * 2 * P_1B / RIDGE / ((EN - 1) * KV_8B - 4 * KV_1B),
}


@pytest.mark.parametrize("draft, window, params, kv", [
    (LLAMA_3_2_1B, None, P_1B, KV_1B), (LLAMA_3_2_1B, 512, P_1B, KV_1B), (NGRAM, None, 0, 0),
    (LLAMA_3_8B, 512, P_8B, KV_8B),
])
def test_pays_at_every_batch_context(draft, window, params, kv):
    l_inf = cx.pays_at_every_batch_context(LLAMA_3_8B, draft, H100, 4, 0.8, window)
    assert l_inf == pytest.approx(l_inf_by_hand(params, kv, window))
    assert flips(l_inf, draft, window)


@pytest.mark.parametrize("wrong", WRONG_L_INF)
def test_the_flip_test_rejects_wrong_derivations(wrong):
    assert not flips(WRONG_L_INF[wrong](), LLAMA_3_2_1B, None)


def test_no_context_is_long_enough_for_an_expensive_draft():
    # self-speculation with the full cache: ρ = k = 4 > E[N] - 1
    assert cx.pays_at_every_batch_context(LLAMA_3_8B, LLAMA_3_8B, H100, 4, 0.8) == math.inf
    assert cx.kv_bound_speedup(LLAMA_3_8B, LLAMA_3_8B, 4, 0.8, 8192) == pytest.approx(EN / 5)


def test_speedup_map_is_the_cost_model_point_by_point():
    m = cx.speedup_map(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, (1, 64, 1024), (256, 8192), draft_window=512,
                       label="x", overlap="pass")
    assert m.label == "x" and m.batches == (1, 64, 1024) and m.contexts == (256, 8192)
    for i, ell in enumerate(m.contexts):
        window = min(ell, 512)
        assert m.speedup[i] == tuple(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, b, 4, 0.8, ell,
                                                        draft_context=window, overlap="pass") for b in m.batches)
        assert m.max_batch[i] == cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, ell, k=4, draft_context=window)
    assert m.fits(1, 0) and not m.fits(1, 2)  # 1,024 sequences of 8,192 tokens do not fit in 80 GB


def test_verdicts():
    assert cx.verdict([], 40) == "never pays"
    assert cx.verdict([(1, 40)], 40) == "pays at every batch that fits (1–40)"
    assert cx.verdict([(1, 159)], 75034) == "pays at B = 1–159"
    assert cx.verdict([(3, 9), (12, 12)], 40) == "pays at B = 3–9, 12"
    assert cx.verdict([], 0) == "does not fit"


def test_memory_verdicts_when_the_crossover_does_not_fit():
    # L4, 24 GB: at L = 256 the crossover (288) lies beyond the 127 sequences that fit
    rows = {r["L"]: r for r in cx.memory_verdicts(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, (0, 256))}
    weights = 2 * (P_8B + 4096 * 128256) + 2 * P_1B  # untied 8B embedding, tied 1B
    assert rows[256]["fits"] == math.floor((24e9 - weights) / ((KV_8B + KV_1B) * (256 + 5))) == 127
    assert rows[256]["B*"] > rows[256]["fits"]
    assert rows[256]["verdict"] == "pays at every batch that fits (1–127)"
    assert rows[0]["verdict"] == f"pays at B = 1–{rows[0]['B*'] - 1}"
    h100 = cx.memory_verdicts(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, (8192,))[0]
    assert (h100["fits"], h100["B*"], h100["verdict"]) == (45, None, "pays at every batch that fits (1–45)")


def test_logits_share_by_hand():
    # B = 1, n = 1: fp32 logits written and read, 2·4·V bytes, against the weights (memory-bound)
    small = cx.logits_share(LLAMA_3_8B, H100, 1, 1)
    assert small == pytest.approx(8 * 128256 / (2 * P_8B + KV_8B), rel=1e-6)
    bound = cx.logits_share_bound(LLAMA_3_8B, H100)
    assert bound == pytest.approx(4 * 128256 * RIDGE / P_8B)  # 2.0 %
    assert cx.logits_share(LLAMA_3_8B, H100, 4096, 5) == pytest.approx(bound, rel=0.02)  # compute-bound
    assert cx.logits_share_bound(LLAMA_3_2_1B, H100) == pytest.approx(4 * 128256 * RIDGE / P_1B)  # 12 %: the draft


def test_throughput_at_memory_limit():
    # L = 32768 on an L4: one sequence fits either way, so the throughput ratio is S(1)
    one = cx.throughput_at_memory_limit(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 32768)
    assert (one["plain batch"], one["speculative batch"]) == (1, 1)
    assert one["ratio"] == pytest.approx(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 1, 4, 0.8, 32768))
    # L = 512 on an L4: the draft's weights and KV halve the batch; tokens/s by hand from the pass times
    r = cx.throughput_at_memory_limit(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 512)
    free = 24e9 - 2 * (P_8B + 4096 * 128256)
    assert r["plain batch"] == math.floor(free / (KV_8B * 513)) == 118
    assert r["speculative batch"] == 64
    plain = 118 / cost.pass_time(LLAMA_3_8B, "L4", 118, 1, 512)
    spec = 64 * EN / cost.iteration_time(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 64, 4, 512)
    assert r["ratio"] == pytest.approx(spec / plain)
    assert r["ratio"] < cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, "L4", 64, 4, 0.8, 512)


@pytest.mark.parametrize("call, message", [
    (lambda: cx.attention_intensity(LLAMA_3_8B, 0), r"new_tokens must be an integer >= 1"),
    (lambda: cx.kv_context(LLAMA_3_8B, 0), r"batch must be an integer >= 1"),
    (lambda: cx.compute_batch(LLAMA_3_8B, "H1000", 5), r"H1000"),
    (lambda: cx.draft_kv_ratio(LLAMA_3_8B, LLAMA_3_2_1B, 4, 0), r"context must be >= 1"),
    (lambda: cx.draft_kv_ratio(LLAMA_3_8B, LLAMA_3_2_1B, 4, 8192, -1), r"draft_context must be an integer >= 0"),
    (lambda: cx.draft_kv_ratio(LLAMA_3_8B, "1B", 4, 8192), r"draft must be a ModelShape, EarlyExit or NoWeights"),
    (lambda: cx.pays_at_every_batch_context(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 1.5), r"alpha must be a number"),
    (lambda: cx.speedup_map(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, [], [0]), r"batches must hold at least one"),
    (lambda: cx.speedup_map(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, [1], [0], draft_context=5), r"draft_window="),
    (lambda: cx.regime_boundaries(LLAMA_3_8B, H100, 5, (0, 10), (1, 10)), r"batch_range\[0\] must be an integer >= 1"),
    (lambda: cx.logits_share_bound(LLAMA_3_8B, H100, 0), r"logit_bytes must be a number > 0"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------------- checks on measurements


def test_excess_halved_and_verdicts():
    assert cx.excess_halved(3.0, 2.0) and not cx.excess_halved(3.0, 2.01)
    assert not cx.excess_halved(1.0, 0.9)  # nothing above 1 to fall from
    assert cx.fall_verdict([3.0, 2.5, 1.9]) == "halved"
    assert cx.fall_verdict([3.0, 2.5]) == "fell"  # 2.5 < 3.0 / 1.1 = 2.73
    assert cx.fall_verdict([2.0, 2.3]) == "rose"  # 2.3 > 2.0 · 1.1
    assert cx.fall_verdict([2.0]) == "flat"
    # Chapter 5's stored run (issue 27, item 5): 2.125 -> 2.016 with 2.180 on the way is flat within 10%
    assert cx.fall_verdict([2.125, 2.108, 1.978, 1.935, 1.922, 2.180, 2.016, 2.016]) == "flat"
    assert cx.fall_verdict([2.125, 2.016], noise=0.06) == "flat"
    assert cx.fall_verdict([2.125, 2.016], noise=0.0) == "fell"


def test_kv_anchored_ratios_by_hand():
    # 8 sequences of a shape with 16 KiB of KV per token (32 KV heads of 128, K and V, bf16) on a 1 GB/s
    # device: 131 µs per extra token of context, for both passes
    shape = cost.ModelShape(1, 4096, 32, 32, 128, 100)
    assert shape.kv_bytes_per_token == 2 * 32 * 128 * 2
    per_token = 8 * shape.kv_bytes_per_token / 1e9
    dev = cx.hardware.Accelerator("toy", {"bf16": 1e12}, 1e9, 0.0, "test")
    got = cx.kv_anchored_ratios(0.010, 0.030, shape, dev, 8, 256, (256, 512, 1 << 20))
    assert got[0] == pytest.approx(3.0)
    assert got[1] == pytest.approx((0.030 + 256 * per_token) / (0.010 + 256 * per_token))
    assert 1 < got[2] < got[1] and got[2] == pytest.approx(1, abs=1e-3)  # tends to 1: both read the same caches
    with pytest.raises(ValueError, match=r"contexts\[0\] must be an integer >= 256"):
        cx.kv_anchored_ratios(0.01, 0.03, shape, dev, 8, 256, (128,))


def test_verify_batch_is_past_the_ridge():
    # H100: B(k+1) tokens reach the ridge (295) at B = 59; verify costs twice decode near B = 118
    b = cx.verify_batch(LLAMA_3_8B, H100, 4)
    ratio = cost.pass_time(LLAMA_3_8B, H100, b, 5) / cost.pass_time(LLAMA_3_8B, H100, b, 1)
    half = cost.pass_time(LLAMA_3_8B, H100, b // 2, 5) / cost.pass_time(LLAMA_3_8B, H100, b // 2, 1)
    assert b == 128 and ratio >= 2 > half
    assert cx.verify_batch(LLAMA_3_8B, H100, 4, limit=16) == 16
    with pytest.raises(ValueError, match="ratio must be a number > 1"):
        cx.verify_batch(LLAMA_3_8B, H100, 4, ratio=1)
