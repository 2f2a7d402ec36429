"""kvtiming: attention and decode/verify passes over a real KV cache, on tiny shapes."""

import pytest
import torch

from specnotes.analytic import cost
from specnotes.measure import kvtiming, stack
from specnotes.measure.stack import stack_shape

TINY = stack_shape(2, 64, 4, 2, 128, name="tiny").in_dtype("fp32")


def test_attention_time_carries_the_cost_model(one_thread):
    r = kvtiming.attention_time(TINY, 3, 5, 16, "fp32", "cpu", warmup=1, repeats=3)
    one = kvtiming.layer_shape(TINY)
    assert one.n_layers == 1 and one.compute == "fp32"
    c = cost.attention_cost(one, 3, 5, 16)
    # by hand: 3 sequences × 2 KV heads × 16 dims × 2 (K, V) × 4 bytes × 21 tokens; 4·16·4 FLOPs per pair
    assert r.extra["bytes"] == c.bytes == 3 * 2 * 16 * 2 * 4 * 21
    assert r.extra["flops"] == c.flops == 4 * 16 * 4 * 3 * (5 * 16 + 15)
    assert r.params == {"batch": 3, "new_tokens": 5, "context": 16, "heads": 4, "kv_heads": 2, "d_head": 16}
    assert r.dtype == "fp32" and len(r.samples) == 3


def test_attention_inputs_mask_the_new_tokens():
    q, keys, values, mask = kvtiming.attention_inputs(TINY, 2, 3, 4, torch.float32, "cpu")
    assert q.shape == (2, 4, 3, 16) and keys.shape == values.shape == (2, 2, 7, 16)
    assert mask.tolist()[0] == [True] * 5 + [False, False]  # the first new token sees the 4 cached and itself
    assert kvtiming.attention_inputs(TINY, 2, 1, 4, torch.float32, "cpu")[3] is None


def test_attention_sweep_skips_caches_over_the_cap(one_thread):
    cap = 1 * TINY.kv_bytes_per_token / 2 * (64 + 5)  # one layer: half of the two-layer bytes
    recs = kvtiming.attention_sweep(TINY, (1, 2), (1, 5), (16, 64), "fp32", "cpu", max_kv_bytes=cap, progress=False,
                                    warmup=0, repeats=1)
    assert [(r.params["batch"], r.params["new_tokens"], r.params["context"]) for r in recs] == [
        (1, 1, 16), (1, 1, 64), (1, 5, 16), (1, 5, 64), (2, 1, 16), (2, 5, 16)]


def sweep(**kwargs):
    st = stack.build_stack(TINY, "cpu", torch.float32)
    return kvtiming.context_sweep(st, 2, 3, 8, progress=False, warmup=0, repeats=2, **kwargs)


@pytest.mark.parametrize("kwargs, stopped, contexts", [
    ({"budget_s": 60.0, "max_kv_bytes": 2 * TINY.kv_bytes_per_token * (32 + 4)}, "memory", [8, 16, 32]),
    ({"budget_s": 0.0, "max_kv_bytes": 1e9}, "budget", [8, 16]),  # always two contexts
])
def test_context_sweep_says_why_it_stopped(one_thread, kwargs, stopped, contexts):
    s = sweep(**kwargs)
    if s.stopped == "seen":  # a tiny stack's ratio can halve by chance: then it stops earlier, and says so
        assert s.contexts == contexts[:len(s.contexts)]
        return
    assert s.stopped == stopped and s.contexts == contexts
    assert [r.params["new_tokens"] for r in s.decode] == [1] * len(contexts)
    assert [r.params["new_tokens"] for r in s.verify] == [4] * len(contexts)
    assert s.verify[0].extra["bytes"] == cost.forward_cost(TINY, 2, 4, 8).bytes
    assert len(s.ratios()) == len(contexts) and all(r > 0 for r in s.ratios())


def test_context_sweep_stops_once_it_sees_the_fall(monkeypatch, one_thread):
    # pretend every ratio after the first has halved: the sweep still goes on until the caches (2 sequences ×
    # 512 bytes per token) weigh what the weights do (2 layers of 36,864 fp32 parameters and a 64-parameter
    # head): L = 512
    monkeypatch.setattr(kvtiming.context, "excess_halved", lambda first, last: first != last)
    weights = 4 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 64)
    assert TINY.weight_bytes_total == weights and TINY.kv_bytes_per_token == 512
    s = sweep(budget_s=60.0, max_kv_bytes=1e9)
    assert s.stopped == "seen" and s.contexts == [8, 16, 32, 64, 128, 256, 512]
    assert 2 * 512 * 512 >= weights > 2 * 512 * 256


def test_context_sizes_on_a_cpu():
    sizes = kvtiming.context_sizes("cpu", "fp32")
    assert sizes.shape.n_layers == 1 and sizes.shape.compute == "fp32" and sizes.shape.weight_bytes == 4
    assert sizes.k == 4 and sizes.budget_s <= 20


def test_verify_batch_doubles_until_verify_costs_twice_decode(monkeypatch, one_thread):
    # fake pass times: decode 1 ms whatever B; verify (k+1 tokens) 1 ms up to B = 4, then grows with B
    def fake(st, batch, k, ctx, caches, warmup, repeats, point_s):
        verify = 1e-3 * max(1.0, batch / 4)
        rec = lambda ts: type("R", (), {"samples": ts})()
        return rec([1e-3, 2e-3, 1e-3]), rec([verify, 2 * verify, 9 * verify])

    monkeypatch.setattr(kvtiming, "_pass_records", fake)
    st = stack.build_stack(TINY, "cpu", torch.float32)
    b, tried = kvtiming.verify_batch(st, 3, 8)
    assert b == 8 and tried == [(1, 1.0), (2, 1.0), (4, 1.0), (8, 2.0)]  # median of pairwise ratios
    assert kvtiming.verify_batch(st, 3, 8, limit=4)[0] == 4  # never twice: the limit
    with pytest.raises(ValueError, match="ratio must be a number > 1"):
        kvtiming.verify_batch(st, 3, 8, ratio=1.0)


def test_paired_ratio_is_robust_to_a_slow_spell():
    rec = lambda ts: type("R", (), {"samples": ts})()
    # a slow spell hits pair 3 (both passes 5× slower): the pairs keep their ratio
    assert kvtiming.paired_ratio(rec([1.0, 1.0, 5.0, 1.0]), rec([2.0, 2.0, 10.0, 2.0])) == 2.0
    # and a spike in one pass of one pair is outvoted
    assert kvtiming.paired_ratio(rec([1.0, 5.0, 1.0, 1.0, 1.0]), rec([2.0] * 5)) == 2.0


def test_tiled_noise_repeats_one_block():
    gen = torch.Generator().manual_seed(0)
    t = kvtiming._tiled((2, 3, 600, 4), torch.float32, "cpu", gen, block=256)
    assert t.shape == (2, 3, 600, 4) and t.is_contiguous()
    torch.testing.assert_close(t[:, :, 256:512], t[:, :, :256])
    torch.testing.assert_close(t[:, :, 512:], t[:, :, :88])
    assert t[:, :, :256].std() > 0.5  # noise, not a constant
