import dataclasses

import pytest
import torch

from specnotes import measure
from specnotes.analytic import cost, hardware
from specnotes.measure import stack
from specnotes.measure.stack import build_stack, forward, pass_inputs, stack_shape

TINY = stack_shape(2, 64, 4, 2, 128, name="tiny")



def test_stack_shape_has_no_lm_head():
    assert TINY.params == 2 * TINY.layer_params + 64  # vocab = 1: a 64-parameter "head"


def test_ragged_batch_equals_uniform_batches_per_group():
    st = build_stack(TINY, dtype=torch.float32)
    b, k, ctx = 4, 3, 5
    x, caches, groups = pass_inputs(st, b, k + 1, ctx, speculating=1)
    assert groups == [(0, 1, k + 1), (1, 4, 1)]
    assert x.shape == (1 * (k + 1) + 3, 64)
    ragged = forward(st, x.clone(), [tuple(t.clone() for t in c) for c in caches], ctx, groups)
    # the speculating sequence alone, then the decoding ones alone, on the same caches
    spec = forward(st, x[: k + 1].clone(), [tuple(t[:1].clone() for t in c) for c in caches], ctx, [(0, 1, k + 1)])
    dec = forward(st, x[k + 1:].clone(), [tuple(t[1:].clone() for t in c) for c in caches], ctx, [(0, 3, 1)])
    torch.testing.assert_close(ragged, torch.cat([spec, dec]))


def test_verify_pass_equals_token_by_token_decode():
    # Causality: verifying n tokens in one pass gives what n one-token passes give.
    st = build_stack(TINY, dtype=torch.float32)
    b, n, ctx = 2, 4, 6
    x, caches, groups = pass_inputs(st, b, n, ctx)
    one_pass = forward(st, x.clone(), [tuple(t.clone() for t in c) for c in caches], ctx, groups)
    rows = x.view(b, n, -1)
    steps = []
    for i in range(n):
        steps.append(forward(st, rows[:, i].clone(), caches, ctx + i, [(0, b, 1)]))
    torch.testing.assert_close(one_pass.view(b, n, -1), torch.stack(steps, dim=1), rtol=1e-4, atol=1e-4)


def test_stack_time_record_carries_the_cost_model_in_the_stacks_dtype():
    st = build_stack(TINY, dtype=torch.float32)
    assert st.shape.weight_bytes == 4 and st.shape.compute == "fp32"  # the bytes this stack really reads
    r = stack.stack_time(st, 3, 5, context=8, warmup=1, repeats=3)
    c = cost.forward_cost(TINY.in_dtype("fp32"), 3, 5, 8)
    assert r.extra["flops"] == c.flops and r.extra["bytes"] == c.bytes and r.extra["tokens"] == 15
    mixed = stack.stack_time(st, 3, 5, context=8, speculating=1, warmup=1, repeats=3)
    assert mixed.extra["tokens"] == 3 + 4  # B + k: the source note's batch
    assert r.median_s > 0 and r.params["speculating"] == 3


def test_bad_input():
    st = build_stack(TINY, dtype=torch.float32)
    with pytest.raises(ValueError, match="speculating must be"):
        stack.groups_for(3, 5, speculating=4)
    with pytest.raises(ValueError, match="batch must be"):
        stack.stack_time(st, 0, 1)


def test_sizes_cpu_are_a_real_stack_and_the_draft_is_smaller():
    s = stack.stack_sizes("cpu")
    assert s.target.weight_bytes_total > 64 * 2**20  # larger than a CPU's last-level cache
    assert 4 < s.target.params / s.draft.params < 16


@pytest.mark.parametrize("heads, kv_heads, n, context", [(8, 2, 5, 7), (8, 2, 1, 9), (4, 4, 3, 6), (6, 1, 2, 0)])
def test_grouped_attention_is_sdpa_with_gqa(heads, kv_heads, n, context):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, heads, n, 16, generator=gen)
    keys, values = (torch.randn(3, kv_heads, context + n, 16, generator=gen) for _ in range(2))
    mask = stack.causal_mask(n, context, "cpu")
    expected = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                                enable_gqa=heads != kv_heads)
    torch.testing.assert_close(stack.grouped_attention(q, keys, values, mask), expected)


def test_stack_overhead_is_a_floor_below_a_real_pass(one_thread):
    # the floor of TINY's layers and kernels, against a pass of the same layer count reading 30 MB of weights
    t0 = stack.stack_overhead(TINY, "cpu", "fp32", context=4, repeats=20)
    real = build_stack(stack_shape(2, 512, 8, 2, 2048, name="real"), dtype=torch.float32)
    assert 0 < t0 < stack.stack_time(real, 2, 3, 4, warmup=1, repeats=5).fastest_s


def test_pass_cost_one_formula_for_uniform_and_mixed_batches():
    # every sequence verifying k + 1 = 5 is the plain forward pass of 5 new tokens; one verifying is B + k tokens
    assert stack.pass_cost(TINY, 4, 5, 8) == cost.forward_cost(TINY, 4, 5, 8)
    assert stack.pass_cost(TINY, 4, 5, 8, speculating=1).tokens == 4 + 4
    assert stack.pass_cost(TINY, 4, 1, 8, speculating=1) == cost.forward_cost(TINY, 4, 1, 8)


def fake_pass(times_ms):
    """A ``time_pass`` returning a record whose one sample is times_ms[(kind, B)] milliseconds."""
    def time_pass(st, batch, new_tokens, context, speculating):
        kind = ("draft" if st.shape.name == "draft" else "mixed" if speculating == 1 and batch > 1
                else "verify" if new_tokens > 1 else "decode")
        t = times_ms[kind](batch) / 1e3
        return measure.Record.from_timing("stack_pass", {"batch": batch, "new_tokens": new_tokens}, measure.Timing([t]),
                                          "cpu", "fp32")
    return time_pass


def test_speedup_sweep_doubles_until_s_falls_below_one():
    # decode 10 ms flat, draft 1 ms, verify 10 ms until B(k+1) = 20 tokens then linear in tokens: with alpha = 0.8,
    # S = 3.3616·10 / (4 + verify): 2.40 (B <= 4), 1.40 (B = 8: verify 20), 0.76 (B = 16: verify 40)
    times = {"decode": lambda b: 10.0, "draft": lambda b: 1.0, "verify": lambda b: 10.0 * max(1, 5 * b / 20),
             "mixed": lambda b: 10.0}
    target, draft = build_stack(TINY, dtype=torch.float32), build_stack(stack_shape(1, 32, 2, 1, 64, name="draft"))
    sizes = dataclasses.replace(stack.stack_sizes("cpu"), min_last=2, limit=64, sweep_budget_s=None)
    sweep = stack.speedup_sweep(target, draft, 4, 0.8, 8, sizes, progress=False, time_pass=fake_pass(times))
    assert sweep.batches == [1, 2, 4, 8, 16] and sweep.stop == "done"
    assert [round(sweep.speedup(b), 2) for b in sweep.batches] == [2.4, 2.4, 2.4, 1.4, 0.76]
    assert sorted(sweep.records["mixed"]) == [2, 4, 8, 16] and sweep.time("verify", 16) == pytest.approx(0.040)


def test_speedup_sweep_goes_on_while_s_is_within_the_noise_of_one():
    # S = 3.3616·10 / (4 + verify): verify 31.39 ms at B = 16 gives S = 0.95, within 10% of 1, so the sweep
    # doubles once more; 52.03 ms at B = 32 gives S = 0.60, clearly below 1: done
    verify = {1: 10.0, 2: 10.0, 4: 10.0, 8: 20.0, 16: 31.385, 32: 52.03}
    times = {"decode": lambda b: 10.0, "draft": lambda b: 1.0, "verify": verify.__getitem__, "mixed": lambda b: 10.0}
    target, draft = build_stack(TINY, dtype=torch.float32), build_stack(stack_shape(1, 32, 2, 1, 64, name="draft"))
    sizes = dataclasses.replace(stack.stack_sizes("cpu"), min_last=2, limit=64, sweep_budget_s=None)
    sweep = stack.speedup_sweep(target, draft, 4, 0.8, 8, sizes, progress=False, time_pass=fake_pass(times))
    assert round(sweep.speedup(16), 2) == 0.95 and round(sweep.speedup(32), 2) == 0.60
    assert sweep.batches[-1] == 32 and sweep.stop == "done"
    assert sweep.why_stopped.startswith("S fell below 0.90")
    # the same sweep capped at B = 16 ends on the limit, and says so in words
    capped = stack.speedup_sweep(target, draft, 4, 0.8, 8, dataclasses.replace(sizes, limit=16), progress=False,
                                 time_pass=fake_pass(times))
    assert capped.stop == "limit" and capped.why_stopped == "it reached the largest batch that fits in memory, B = 16"


def test_speedup_sweep_stops_at_its_budget_and_says_so():
    now = [0.0]

    def slow(b):  # each pass costs the fake clock 0.5 s per sequence
        now[0] += 0.5 * b
        return 10.0

    times = {"decode": slow, "draft": lambda b: 1.0, "verify": lambda b: 10.0, "mixed": lambda b: 10.0}
    target, draft = build_stack(TINY, dtype=torch.float32), build_stack(stack_shape(1, 32, 2, 1, 64, name="draft"))
    sizes = dataclasses.replace(stack.stack_sizes("cpu"), min_last=2, limit=64, sweep_budget_s=5.0)
    sweep = stack.speedup_sweep(target, draft, 4, 0.8, 8, sizes, progress=False, time_pass=fake_pass(times),
                                timer=lambda: now[0])
    # spent 0.5, 1.5 after B = 1, 2 (last 1.0): 1.5 + 2 <= 5 -> B = 4 (3.5 spent, last 2.0): 3.5 + 4 > 5: stop
    assert sweep.batches == [1, 2, 4] and sweep.stop == "budget" and sweep.why_stopped == "the time budget ran out"


def test_speedup_sweep_on_real_tiny_stacks():
    target, draft = build_stack(TINY, dtype=torch.float32), build_stack(stack_shape(1, 32, 2, 1, 64, name="draft"),
                                                                      dtype=torch.float32)
    sizes = stack.StackSizes(TINY, TINY, context=4, k=2, warmup=1, repeats=3, budget_s=0.5, min_last=2, limit=4,
                             sweep_budget_s=30, min_s=0.01)
    sweep = stack.speedup_sweep(target, draft, 2, 0.8, 4, sizes, progress=False)
    assert sweep.batches[:2] == [1, 2] and all(sweep.speedup(b) > 0 for b in sweep.batches)
    assert set(sweep.records) == set(stack.PASSES)


def test_stack_model_time_with_and_without_the_floor():
    accel = hardware.Accelerator("x", {"bf16": 1e12}, 1e10, 0.0, "test")
    model = stack.StackModel(TINY, TINY, accel, t0_target=1e-3, t0_draft=5e-4, k=4, alpha=0.8, context=0)
    # decode at B = 1: TINY's 2 x (2·64² + 2·64·32 + 3·64·128) + 64 = 73,792 bf16 weights = 147,584 bytes,
    # plus K and V of one token in 2 layers (2·2·2·16·2 = 256 bytes) at 10 GB/s
    assert model.time("decode", 1, floor=False) == pytest.approx(147_840 / 1e10, rel=1e-3)
    assert model.time("decode", 1) == pytest.approx(147_840 / 1e10 + 1e-3, rel=1e-3)
    assert model.time("draft", 1) - model.time("draft", 1, floor=False) == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="kind"):
        model.time("prefill", 1)


def test_stack_model_floor_is_bounded_by_a_real_pass():
    accel = hardware.Accelerator("x", {"bf16": 1e12}, 1e10, 0.0, "test")
    model = stack.StackModel(TINY, TINY, accel, t0_target=0.060, t0_draft=1e-5, k=4, alpha=0.8, context=0)
    # a decode pass measured at 2 ms (roofline 14.8 µs: 147,840 bytes at 10 GB/s) leaves at most 1.985 ms of floor;
    # the draft's 10 µs floor is below what its pass leaves and stays
    times = {"decode": lambda b: 2.0, "draft": lambda b: 1.0, "verify": lambda b: 3.0, "mixed": lambda b: 3.0}
    target, draft = build_stack(TINY), build_stack(stack_shape(2, 64, 4, 2, 128, name="draft"))
    sizes = dataclasses.replace(stack.stack_sizes("cpu"), min_last=1, limit=1, sweep_budget_s=None)
    sweep = stack.speedup_sweep(target, draft, 4, 0.8, 0, sizes, progress=False, time_pass=fake_pass(times))
    bounded = model.bounded_by(sweep)
    assert bounded.t0_target == pytest.approx(0.002 - 147_840 / 1e10) and bounded.t0_draft == 1e-5


def test_stack_model_on_a_better_roof_predicts_faster_passes():
    accel = hardware.Accelerator("x", {"bf16": 1e12}, 1e10, 0.0, "test")
    model = stack.StackModel(TINY, TINY, accel, t0_target=1e-3, t0_draft=5e-4, k=4, alpha=0.8, context=0)
    faster = model.with_roof(measure.MeasuredRoof(2e10, 2e12, dtype="bf16"))
    assert faster.time("decode", 1, floor=False) == pytest.approx(model.time("decode", 1, floor=False) / 2)
    assert (faster.t0_target, faster.t0_draft, faster.k) == (model.t0_target, model.t0_draft, model.k)


def test_pass_bytes_by_hand():
    # TINY, B = 3 verifying 5 after 8 cached: KV 2 layers x K,V x 3 x 2 kv heads x 13 x 16 x 4 bytes = 19,968;
    # 15 tokens x (QKV 128 + 6·128 + 8·64 = 1,408) + scores 3 x 4 heads x 5 x 13 = 780, at 4 bytes: 87,600
    assert stack.pass_bytes(TINY, 3, 5, 8) == 19_968 + 87_600
    assert stack.pass_bytes(TINY, 3, 5, 8, itemsize=2) == 9_984 + 87_600  # a bf16 cache


def test_the_sweeps_largest_batch_is_what_fits_in_memory(monkeypatch):
    cpu = stack.stack_sizes("cpu")
    # the CPU stack's verify pass: KV 2 x 2 x 4 x 261 x 128 x 4 = 2,138,112 bytes per sequence, activations
    # 5 x (3,072 + 6·5,632 + 8·2,048) x 4 = 1,064,960, scores 16 x 5 x 261 x 4 = 83,520: 3,286,592 per sequence
    per_sequence = 2_138_112 + 1_064_960 + 83_520
    assert stack.pass_bytes(cpu.target, 256, 5, 256) == 256 * per_sequence
    assert stack.sweep_limit(cpu, 256 * per_sequence) == 256 and stack.sweep_limit(cpu, 256 * per_sequence - 1) == 128
    assert stack.sweep_limit(cpu, 0) == 1
    # a quarter of 64 GiB: 17.2e9 / 3.29e6 = 5,228 sequences -> B = 4096, no fixed 256 cap; a quarter of 2 GiB: 128
    monkeypatch.setattr(stack, "memory_bytes", lambda device: 64 * 2**30)
    assert stack.stack_sizes("cpu").limit == 4096
    monkeypatch.setattr(stack, "memory_bytes", lambda device: 2 * 2**30)
    assert stack.stack_sizes("cpu").limit == 128


def test_kv_cache_is_drawn_in_the_stacks_dtype():
    caches = stack.kv_cache(build_stack(TINY, dtype=torch.bfloat16), 2, 3)
    assert len(caches) == 2 and all(t.dtype == torch.bfloat16 and t.shape == (2, 2, 3, 16) for c in caches for t in c)
    assert 0.5 < float(caches[0][0].float().std()) < 1.5


def test_least_time_and_speedup_cap_by_hand():
    # the never-pays CPU's roofs, 21.25 GB/s and 17 GFLOP/s: a verify pass at B = 16 is 80 tokens x 2 x 90,179,584
    # weights, plus attention, 4 x 2048 FLOPs per key per layer (QK and AV) over 257 ... 261 keys for the 5 new
    # tokens of each sequence; every kernel compute-bound, at 1.25 x 17 GFLOP/s. A draft step: 16 tokens x 23,599,104.
    sizes = stack.stack_sizes("cpu")
    accel = hardware.Accelerator("never", {"bf16": 17e9}, 21.25e9, 0.0, "test")
    model = stack.StackModel(sizes.target, sizes.draft, accel, 0.8e-3, 0.3e-3, k=4, alpha=0.8, context=256)
    verify = (80 * 2 * 90_179_584 + 16 * 2 * 4 * 2048 * (257 + 258 + 259 + 260 + 261)) / (1.25 * 17e9)
    draft = 16 * 23_599_104 / (1.25 * 17e9)
    assert model.least_time("verify", 16) == pytest.approx(verify, rel=1e-6)
    assert model.least_time("draft", 16) == pytest.approx(draft, rel=1e-6)
    # E[N] = 3.3616 at alpha = 0.8, k = 4; the measured decode 179.008 ms: cap 0.786
    assert model.speedup_cap(16, 0.179008) == pytest.approx(3.36160 * 0.179008 / (4 * draft + verify), rel=1e-4)
    # at B = 1 on fast compute every pass is memory-bound: 181,411,840 bytes at 1.5 x the bandwidth; cached: compute
    fast = dataclasses.replace(model, accel=hardware.Accelerator("fast", {"bf16": 2e12}, 30e9, 0.0, "test"))
    assert fast.least_time("decode", 1) == pytest.approx(181_411_840 / 45e9, rel=1e-6)
    assert fast.least_time("decode", 1, cache_bytes=2**30) == pytest.approx(184_569_856 / 2.5e12, rel=1e-6)
    assert 184_569_856 == 2 * 90_179_584 + 2 * 4 * 2048 * 257  # one token over 257 keys
    with pytest.raises(ValueError, match="cache_bytes must be a number >= 0"):
        fast.least_time("decode", 1, cache_bytes=-1)


def test_the_model_with_the_gemm_efficiency_predicts_the_sweep_it_came_from():
    """A decode GEMM modelled as its roofline time times the per-M efficiency is the measured GEMM, at every
    M of the sweep; between them it interpolates, and the layer stack's matmuls take the same factor."""
    roof = measure.MeasuredRoof(11.2e9, 45e9, dtype="fp32")
    rows, ms = [1, 2, 4, 8, 16, 64], [5.0, 32.0, 44.0, 63.9, 71.4, 109.0]  # Zen 3's GEMM (issue 25), 2048 -> 8192
    records = [measure.Record("matmul", {"batch": b, "d_in": 2048, "d_out": 8192}, t / 1e3, None, None, [t / 1e3],
                              "cpu", "fp32") for b, t in zip(rows, ms, strict=True)]
    eff = measure.GemmEfficiency.from_sweep(records, roof)
    for r in records:
        predicted = eff(r.params["batch"]) * measure.probes.gemm_roofline(r, roof)
        assert predicted == pytest.approx(r.fastest_s, rel=1e-12)
    assert eff(32) == pytest.approx((eff(16) * eff(64)) ** 0.5)  # halfway in log M: the geometric mean
    assert eff(128) == eff(64) and eff(1) == eff(0.5) and eff.extrapolates(128) and not eff.extrapolates(3)
    assert eff.gb_per_s[0] == pytest.approx(2048 * 8192 * 4 / 5e-3 / 1e9)
    # a stack pass: its matmul kernel takes eff(tokens) x its roofline time, attention and the floor unchanged
    accel = roof.as_accelerator("fp32")
    shape = TINY.in_dtype("fp32")
    model = stack.StackModel(shape, shape, accel, t0_target=1e-3, t0_draft=5e-4, k=4, alpha=0.8, context=8)
    with_e = model.with_efficiency(eff)
    for kind, b, tokens in (("decode", 2, 2), ("verify", 2, 10), ("draft", 4, 4)):
        pass_ = stack.pass_cost(shape, b, 5 if kind == "verify" else 1, 8)
        gemm = next(k for k in pass_.parts if k.name == "matmul")
        gemm_s = max(gemm.bytes / 11.2e9, gemm.flops / 45e9)
        assert with_e.time(kind, b) - model.time(kind, b) == pytest.approx((eff(tokens) - 1) * gemm_s, rel=1e-9)
    times = [with_e.time(kind, 1) for kind in ("decode", "draft", "verify")]
    assert with_e.speedup(1) == pytest.approx(cost.speedup_from_times(0.8, 4, *times))
    assert model.with_efficiency(None) == model


def test_gemm_efficiency_left_out_points_and_their_error_by_hand():
    eff = measure.GemmEfficiency((1, 4, 16), (1.0, 4.0, 2.0))
    # the middle point from its neighbours: halfway in log M between 1 and 2 -> sqrt(2); the ends held
    assert eff.leave_one_out() == pytest.approx([4.0, 2 ** 0.5, 4.0])
    # errors |ln(4)|, |ln(sqrt 2 / 4)|, |ln 2|: mean 1.0397 -> exp - 1 = 1.828
    assert eff.error() == pytest.approx(2.8284 - 1, rel=1e-3)
    assert measure.probes.geometric_error([2.0, 0.5], [1.0, 1.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="increasing"):
        measure.GemmEfficiency((4, 1), (1.0, 1.0))
    with pytest.raises(ValueError, match="ratios"):
        measure.GemmEfficiency((1, 2), (1.0, 0.0))


def test_the_stack_models_breakdown_prices_its_passes_as_it_does():
    """StackModel.breakdown splits the model's own passes: each sums to StackModel.time (no GEMM efficiency)."""
    sizes = stack.stack_sizes("cpu")
    accel = measure.MeasuredRoof(20e9, 400e9, dtype="bf16").as_accelerator()
    model = stack.StackModel(sizes.target, sizes.draft, accel, 2e-4, 1e-4, k=4, alpha=0.8, context=sizes.context)
    for b in (1, 16, 256):
        split = model.breakdown(b)
        assert split.decode.total == pytest.approx(model.time("decode", b))
        assert split.verify.total == pytest.approx(model.time("verify", b))
        assert split.drafts[0].total == pytest.approx(model.time("draft", b)) and len(split.drafts) == 4
