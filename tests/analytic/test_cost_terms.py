"""The model's newer terms against hand computations: per-kernel overlap, tensor parallelism, memory
capacity, drafter kinds, weight-only quantization and paying ranges (bad input: tests/test_bad_input.py)."""

import math
from dataclasses import replace

import pytest

from specnotes.analytic import cost
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, EarlyExit, Heads, Kernel, ModelShape, PassCost, SinglePass
from specnotes.record import calibrate

H100 = "H100-SXM"
BW, PEAK = 3.35e12, 989e12  # H100 SXM datasheet: bytes/s, dense bf16 FLOP/s


def test_overlap_modes_on_two_kernels_by_hand():
    # matmul: 1 GFLOP... compute-bound kernel; attention: memory-bound kernel
    mm, attn = Kernel("matmul", 989e9, 3.35e9 / 10), Kernel("attention", 989e9 / 10, 3.35e9)
    c = PassCost(mm.flops + attn.flops, mm.bytes + attn.bytes, 1, (mm, attn))
    # per kernel: max(0.1 ms, 1 ms) + max(1 ms, 0.1 ms) = 2 ms
    assert cost.roofline_time(c, H100, overlap="kernel") == pytest.approx(2e-3)
    # one max over the pass: memory 1.1 ms, compute 1.1 ms
    assert cost.roofline_time(c, H100, overlap="pass") == pytest.approx(1.1e-3)
    # no overlap: 1.1 + 1.1 ms
    assert cost.roofline_time(c, H100, overlap="none") == pytest.approx(2.2e-3)
    assert cost.roofline_time(c, H100, overlap="kernel", overhead=1e-4) == pytest.approx(2.1e-3)


def test_per_kernel_verify_over_decode_at_long_context_by_hand():
    # Issue #12/#10: B = 256, L = 1024, k = 4 on an H100. Per kernel the verify pass's matmul FLOPs
    # (compute-bound at 1280 tokens) cannot hide under attention's KV reads.
    P, kv = LLAMA_3_8B.params, LLAMA_3_8B.kv_bytes_per_token
    B, L, k = 256, 1024, 4
    g = 4 * 128 * 32 * 32  # attention FLOPs per (query, key) pair: 4·d_head·n_heads·n_layers

    def t(n, kernel_max):
        mm_flops, mm_bytes = 2 * P * B * n, 2 * P
        at_flops, at_bytes = g * B * (n * L + n * (n + 1) / 2), B * kv * (L + n)
        if kernel_max:
            return max(mm_bytes / BW, mm_flops / PEAK) + max(at_bytes / BW, at_flops / PEAK)
        return max((mm_bytes + at_bytes) / BW, (mm_flops + at_flops) / PEAK)

    for overlap, kernel_max, expected in (("kernel", True, 2.02), ("pass", False, 1.36)):
        ratio = (cost.roofline_time(cost.verify_cost(LLAMA_3_8B, B, k, L), H100, overlap=overlap)
                 / cost.roofline_time(cost.decode_cost(LLAMA_3_8B, B, L), H100, overlap=overlap))
        assert ratio == pytest.approx(t(k + 1, kernel_max) / t(1, kernel_max), rel=1e-9)
        assert ratio == pytest.approx(expected, abs=0.01)


def test_tensor_parallel_pass_by_hand():
    # tp = 8: each device reads 1/8 of the weights and 1 of the 8 KV heads; 2 all-reduces per layer,
    # each moving 2·7/8 of B·n·d_model·2 bytes per device over half of NVLink's 900 GB/s.
    B, n, L, tp = 4, 1, 4096, 8
    c = cost.forward_cost(LLAMA_3_8B, B, n, L, tp=tp)
    kv_per_device = LLAMA_3_8B.kv_bytes_per_token / 8 * B * (L + n)
    assert c.bytes == pytest.approx(LLAMA_3_8B.weight_bytes_total / 8 + kv_per_device)
    link = 64 * 2 * 7 / 8 * B * n * 4096 * 2
    assert c.link_bytes == pytest.approx(link)
    memory_s = c.bytes / BW  # every kernel memory-bound at B = 4
    assert cost.roofline_time(c, H100) == pytest.approx(memory_s + link / 450e9)
    assert cost.roofline_time(c, H100, allreduce_latency=5e-6) == pytest.approx(memory_s + link / 450e9 + 64 * 5e-6)
    # more devices than KV heads: each keeps one head (replicated)
    wide = cost.attention_cost(LLAMA_3_8B, B, n, L, tp=16)
    assert wide.bytes == pytest.approx(LLAMA_3_8B.kv_bytes_per_token / 8 * B * (L + n))
    with pytest.raises(ValueError, match="A10G has no link bandwidth"):
        cost.roofline_time(cost.decode_cost(LLAMA_3_8B, 1, tp=2), "A10G")


def test_max_batch_by_hand():
    # 80 GB H100; Llama-3-8B (untied embedding) + Llama-3.2-1B (tied) in bf16; KV per token 128 KiB + 32 KiB
    weights = 2 * (LLAMA_3_8B.params + 4096 * 128256) + 2 * LLAMA_3_2_1B.params
    for L, k in ((1024, 4), (8192, 4), (1024, 0)):
        per_seq = (131072 + 32768) * (L + k + 1)
        assert cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, L, k=k) == math.floor((80e9 - weights) / per_seq)
    assert cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1024, k=4) == 364  # the "about 372"
    assert cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 8192, k=4) == 45  # and "46"
    # tp = 2 halves the weights and KV per device; an n-gram drafter adds nothing
    assert cost.max_batch(LLAMA_3_8B, cost.NGRAM, H100, 8192, tp=2) == math.floor(
        (80e9 - 2 * (LLAMA_3_8B.params + 4096 * 128256) / 2) / (131072 / 2 * 8193))
    # a draft with a short KV window (StreamingLLM) costs its window, not the context
    windowed = cost.max_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 8192, draft_context=256)
    assert windowed == math.floor((80e9 - weights) / (131072 * 8193 + 32768 * 257))
    assert cost.max_batch(cost.LLAMA_3_70B, None, H100, 1024) == 0  # 141 GB of weights: nothing fits
    # Medusa keeps k heads, each with its own weights; a block drafter one set for all k positions
    head = ModelShape(1, 4096, 32, 8, 4096, 128256, name="head")
    target_bytes, per_seq = 2 * (LLAMA_3_8B.params + 4096 * 128256), 131072 * (1024 + 5)
    assert cost.max_batch(LLAMA_3_8B, Heads(head), H100, 1024, k=4) == math.floor(
        (80e9 - target_bytes - 4 * 2 * head.params) / per_seq)
    assert cost.max_batch(LLAMA_3_8B, SinglePass(head), H100, 1024, k=4) == math.floor(
        (80e9 - target_bytes - 2 * head.params) / per_seq)


def test_dtype_is_the_shapes_own():
    # Issue #11: dtype="fp8" on bf16 shapes used to price fp8 math on bf16 bytes (320 vs 160)
    fp8 = cost.crossover_batch(LLAMA_3_8B.in_dtype("fp8"), LLAMA_3_2_1B.in_dtype("fp8"), H100, 4, 0.8)
    assert fp8 == cost.crossover_batch(LLAMA_3_8B.in_dtype("fp8"), LLAMA_3_2_1B.in_dtype("fp8"), H100, 4, 0.8,
                                       dtype="fp8")
    assert fp8 == pytest.approx(160, abs=3)  # fp8 doubles the peak and halves the bytes: B* barely moves
    with pytest.raises(ValueError, match=r"dtype='fp8' disagrees with the model's math dtype 'bf16'"):
        cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, dtype="fp8")
    # the T4 has no bf16 peak: a bf16 shape runs at the fp16 peak (same bytes)
    assert cost.roofline_time(cost.decode_cost(LLAMA_3_8B, 512), "T4") == pytest.approx(
        cost.roofline_time(cost.decode_cost(LLAMA_3_8B.in_dtype("fp16"), 512), "T4"))


@pytest.mark.parametrize("bits", [4, 8])
def test_weight_only_quantization_lowers_the_crossover(bits):
    # bf16 math on w = bits/8 bytes per weight: a matmul's AI is 2B/w, so the critical batch is
    # ridge·w/2 and B* ≈ ridge·(w/2)·(E[N] − k·c)/(k + 1): 2× (8-bit) or 4× (4-bit) lower.
    shape, draft = LLAMA_3_8B.weight_only(bits), LLAMA_3_2_1B.weight_only(bits)
    assert shape.weight_bytes == bits / 8 and shape.compute == "bf16" and shape.kv_bytes == 2
    en, c = cost.expected_tokens(0.8, 4), LLAMA_3_2_1B.params / LLAMA_3_8B.params
    derived = PEAK / BW * (bits / 16) * (en - 4 * c) / 5
    assert cost.crossover_batch(shape, draft, H100, 4, 0.8) == pytest.approx(derived, rel=0.05)


def self_speculation(B, L=32768):
    # MagicDec-style: the target drafts itself with a 512-token KV window; S(1) < 1, S rises with B
    return cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, H100, B, 3, 0.8, L, draft_context=512)


@pytest.mark.parametrize("setting", [
    dict(target=LLAMA_3_8B, draft=LLAMA_3_2_1B, k=4, alpha=0.8, context=0, model={}),
    dict(target=LLAMA_3_8B, draft=LLAMA_3_2_1B, k=4, alpha=0.8, context=256, model={"overlap": "pass"}),
    dict(target=LLAMA_3_8B, draft=LLAMA_3_2_1B, k=2, alpha=0.6, context=0, model={"overhead": 2e-3}),
    dict(target=LLAMA_3_8B, draft=LLAMA_3_8B, k=3, alpha=0.8, context=32768, model={"draft_context": 512}),
    dict(target=LLAMA_3_8B, draft=cost.NGRAM, k=4, alpha=0.5, context=0, model={"draft_overhead": 1e-3}),
])
def test_paying_batches_match_a_full_scan(setting):
    s = setting
    limit = 1200
    pays = [b for b in range(1, limit + 1)
            if cost.batch_speedup(s["target"], s["draft"], H100, b, s["k"], s["alpha"], s["context"], **s["model"]) > 1]
    ranges, start = [], None
    for b in range(1, limit + 2):
        if b in pays and start is None:
            start = b
        if b not in pays and start is not None:
            ranges.append((start, b - 1))
            start = None
    got = cost.paying_batches(s["target"], s["draft"], H100, s["k"], s["alpha"], s["context"], limit=limit,
                              **s["model"])
    assert got == ranges
    b_star = cost.crossover_batch(s["target"], s["draft"], H100, s["k"], s["alpha"], s["context"], max_batch=limit,
                                  **s["model"])
    assert b_star == (1 if not ranges else None if ranges[-1][1] == limit else ranges[-1][1] + 1)


def test_self_speculation_pays_only_above_a_batch():
    assert self_speculation(1) < 1 < self_speculation(64)
    ranges = cost.paying_batches(LLAMA_3_8B, LLAMA_3_8B, H100, 3, 0.8, 32768, limit=256, draft_context=512)
    assert len(ranges) == 1 and ranges[0][0] > 1 and ranges[0][1] == 256
    assert cost.crossover_batch(LLAMA_3_8B, LLAMA_3_8B, H100, 3, 0.8, 32768, max_batch=256,
                                draft_context=512) is None


def test_paying_batches_stop_at_memory():
    # default limit: what fits in the H100's 80 GB at L = 8192 (45 sequences)
    assert cost.paying_batches(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8, 8192) == [(1, 45)]
    assert cost.paying_batches(cost.LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8, 1024) == []  # does not fit


def test_crossover_is_one_when_speculation_never_pays():
    # α = 0: one token per iteration, and the draft costs time
    assert cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.0) == 1
    assert cost.paying_batches(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.0, limit=512) == []


def test_drafter_kinds_by_hand():
    B, k = 1, 4
    t_decode = cost.pass_time(LLAMA_3_8B, H100, B, 1)
    # n-gram: no weights, only its lookup overhead
    assert cost.draft_time(cost.NGRAM, H100, B, k, overhead=3e-5) == 3e-5
    assert cost.draft_time(cost.NGRAM, H100, B, 0, overhead=3e-5) == 0.0
    # early exit at 8 of 32 layers: k passes over 8 layers plus the LM head, memory-bound at B = 1;
    # pass i (0-based) reads and writes i + 1 tokens of those 8 layers' KV: 1 + 2 + 3 + 4 in all
    exit_weights = 2 * (8 * LLAMA_3_8B.layer_params + 4096 * 128256)
    exit_kv = 8 / 32 * LLAMA_3_8B.kv_bytes_per_token * (1 + 2 + 3 + 4)
    assert cost.draft_time(EarlyExit(8), H100, B, k, target=LLAMA_3_8B) == pytest.approx(
        (k * exit_weights + exit_kv) / BW)
    # a single-pass drafter reads its weights once for k positions; Medusa heads k times
    head = ModelShape(1, 4096, 32, 8, 4096, 128256, name="head")
    single = cost.draft_time(SinglePass(head), H100, B, k)
    medusa = cost.draft_time(Heads(head), H100, B, k)
    assert medusa == pytest.approx(k * 2 * head.params / BW)
    assert single == pytest.approx((2 * head.params + head.kv_bytes_per_token * k) / BW)
    assert medusa / single == pytest.approx(k, rel=0.01)
    # S at B = 1 for an n-gram drafter with no overhead: E[N]·T(B,1)/T(B,k+1) ≈ E[N] (memory-bound)
    s = cost.batch_speedup(LLAMA_3_8B, cost.NGRAM, H100, B, k, 0.5)
    assert s == pytest.approx(cost.expected_tokens(0.5, k) * t_decode / cost.pass_time(LLAMA_3_8B, H100, B, k + 1))
    with pytest.raises(ValueError, match="EarlyExit draft needs the target"):
        cost.draft_time(EarlyExit(8), H100, B, k)
    with pytest.raises(TypeError, match="draft must be a ModelShape"):
        cost.batch_speedup(LLAMA_3_8B, "Llama-3.2-1B", H100, 1, 4, 0.8)


def test_logits_cost_by_hand():
    c = cost.logits_cost(LLAMA_3_8B, 64, 5)
    assert c.bytes == 2 * 4 * 64 * 5 * 128256  # fp32 logits written and read back
    assert c.flops == 5 * 64 * 5 * 128256


def test_best_k_is_the_argmax():
    for b in (1, 64, 512):
        k = cost.best_k(LLAMA_3_8B, LLAMA_3_2_1B, H100, b, 0.8, k_max=10)
        speedups = [cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, b, j, 0.8) for j in range(11)]
        assert speedups[k] == max(speedups)
    assert cost.best_k(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 0.8, k_max=10) > cost.best_k(
        LLAMA_3_8B, LLAMA_3_2_1B, H100, 256, 0.8, k_max=10)


def test_a_calibration_passes_whole_to_every_time_function():
    # calibrate.calibration returns overlap, the overheads and the per-layer cost: every time function takes them
    cal = calibrate.calibration(H100, "specdecode_bench")
    assert {"overlap", "overhead", "draft_overhead", "layer_overhead", "allreduce_latency"} <= set(cal)
    assert cal["layer_overhead"] > 0
    plain = {k: v for k, v in cal.items() if k != "draft_overhead"}
    c = cost.decode_cost(LLAMA_3_8B, 16)
    assert cost.roofline_time(c, H100, **cal) == cost.roofline_time(c, H100, **plain)
    assert cost.pass_time(LLAMA_3_8B, H100, 16, 1, **cal) == cost.pass_time(LLAMA_3_8B, H100, 16, 1, **plain)
    row = cost.decode_summary(LLAMA_3_8B, H100, 16, **cal)
    assert row["step ms"] == pytest.approx(1e3 * cost.pass_time(LLAMA_3_8B, H100, 16, 1, **plain))
    # a draft pass pays draft_overhead, not the target's overhead, and the per-layer cost of its own layers:
    # k passes of the 16-layer 1B at B = 16
    bare = cost.draft_time(LLAMA_3_2_1B, H100, 16, 3, overlap=cal["overlap"])
    assert cost.draft_time(LLAMA_3_2_1B, H100, 16, 3, **cal) == pytest.approx(
        bare + 3 * (cal["draft_overhead"] + 16 * cal["layer_overhead"]))
    # a target pass pays its 32 layers' cost, and so does roofline_time on forward_cost's PassCost
    assert cost.pass_time(LLAMA_3_8B, H100, 16, 1, **cal) == pytest.approx(
        cost.pass_time(LLAMA_3_8B, H100, 16, 1, overlap=cal["overlap"]) + cal["overhead"]
        + 32 * cal["layer_overhead"])
    assert cost.iteration_time(LLAMA_3_8B, LLAMA_3_2_1B, H100, 16, 3, **cal) == pytest.approx(
        cost.draft_time(LLAMA_3_2_1B, H100, 16, 3, **cal) + cost.pass_time(LLAMA_3_8B, H100, 16, 4, **cal))
    with pytest.raises(ValueError, match="draft_overhead"):
        cost.pass_time(LLAMA_3_8B, H100, 16, 1, draft_overhead=-1.0)


def test_draft_context_prices_the_drafts_own_cache_by_hand():
    # a 1B draft with a 512-token window at L = 32768, B = 1: k passes, memory-bound, pass i (0-based)
    # reads its weights and i + 512 cached tokens and writes one: (512 + i + 1) tokens of its KV
    k, W, L = 3, 512, 32768
    kv = LLAMA_3_2_1B.kv_bytes_per_token
    weights = LLAMA_3_2_1B.params * LLAMA_3_2_1B.weight_bytes
    by_hand = sum(weights + kv * (W + i + 1) for i in range(k)) / BW
    assert cost.draft_time(LLAMA_3_2_1B, H100, 1, k, context=W) == pytest.approx(by_hand)
    assert cost.iteration_time(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, k, context=L, draft_context=W) == pytest.approx(
        by_hand + cost.pass_time(LLAMA_3_8B, H100, 1, k + 1, L))


def test_a_self_draft_shares_the_targets_weights():
    # MagicDec's self-speculation: no second copy of the 8B weights; a windowed draft keeps its window's cache
    target_bytes, kv, k, L, W = 2 * (LLAMA_3_8B.params + 4096 * 128256), 131072, 3, 32768, 512
    assert cost.max_batch(LLAMA_3_8B, LLAMA_3_8B, H100, L, k=k, draft_context=W) == math.floor(
        (80e9 - target_bytes) / (kv * (L + k + 1) + kv * (W + k + 1)))
    assert cost.weights_per_device(LLAMA_3_8B, LLAMA_3_8B, k=k) == target_bytes  # no second copy
    assert cost.weights_per_device(LLAMA_3_8B, LLAMA_3_2_1B, tp=2) == (target_bytes + 2 * LLAMA_3_2_1B.params) / 2
    # with its full context the draft reads the target's own cache: nothing more than plain decoding
    assert cost.max_batch(LLAMA_3_8B, LLAMA_3_8B, H100, L, k=k) == cost.max_batch(LLAMA_3_8B, None, H100, L, k=k)
    # a distinct draft of the same size is a second model: it pays for its weights
    twin = replace(LLAMA_3_8B, name="another 8B")
    assert cost.max_batch(LLAMA_3_8B, twin, H100, L, k=k, draft_context=W) < cost.max_batch(
        LLAMA_3_8B, LLAMA_3_8B, H100, L, k=k, draft_context=W)


def test_head_dim_shapes_count_q_and_o_at_their_own_width():
    # Qwen3-32B: 64 query heads of 128 (8192 wide) on a 5120 residual stream
    q = cost.QWEN3_32B
    assert q.d_head == 128 and q.n_heads * q.d_head != q.d_model
    assert q.layer_params == 2 * 5120 * 8192 + 2 * 5120 * 8 * 128 + 3 * 5120 * 25600
    assert q.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2
    assert LLAMA_3_8B.layer_params == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # unchanged
    with pytest.raises(ValueError, match="head_dim"):
        cost.ModelShape(2, 100, 3, 1, 10, 10)


def test_eagle_head_memory_and_kv():
    head = cost.EAGLE3_LLAMA_3_1_8B
    w, kv = cost._draft_memory(head, 1, 3)
    assert w == head.params * 2 and kv == head.layer.kv_bytes_per_token
    assert cost.weights_per_device(cost.LLAMA_3_1_8B, head) == cost.LLAMA_3_1_8B.memory_bytes + head.params * 2


def test_tree_speedup_of_a_chain_is_batch_speedup():
    for draft in (cost.EAGLE3_LLAMA_3_1_8B, LLAMA_3_2_1B):
        for b in (1, 64):
            chain = cost.batch_speedup(LLAMA_3_8B, draft, H100, b, 3, 0.7, 500, layer_overhead=5e-5, overlap="none")
            tree = cost.tree_speedup(LLAMA_3_8B, draft, H100, b, (1, 1, 1), 3, cost.expected_tokens(0.7, 3), 500,
                                     layer_overhead=5e-5, overlap="none")
            assert tree == pytest.approx(chain, rel=1e-12)
    # a wider level verifies more and drafts more: slower at the same tokens per iteration
    wide = cost.tree_speedup(LLAMA_3_8B, cost.EAGLE3_LLAMA_3_1_8B, H100, 64, (1, 4, 4), 21, 2.5, 500)
    assert wide < cost.tree_speedup(LLAMA_3_8B, cost.EAGLE3_LLAMA_3_1_8B, H100, 64, (1, 1, 1), 3, 2.5, 500)
    for bad in ((), (1, 0), (1, 2.0)):
        with pytest.raises(ValueError, match="widths"):
            cost.tree_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, bad, 3, 2.0)
    with pytest.raises(ValueError, match="verified"):
        cost.tree_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, (1, 2, 2), 2, 2.0)
