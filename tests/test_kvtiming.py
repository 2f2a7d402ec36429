"""kvtiming: attention and decode/verify passes over a real KV cache, on tiny shapes."""

import pytest
import torch

from specnotes import cost, kvtiming, stack
from specnotes.stack import stack_shape

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
    # a fake clock-free check: pretend every verify/decode ratio after the first has halved
    seen = iter([False, True])
    monkeypatch.setattr(kvtiming.context, "excess_halved", lambda first, last: next(seen))
    s = sweep(budget_s=60.0, max_kv_bytes=1e9)
    assert s.stopped == "seen" and s.contexts == [8, 16]


def test_context_sizes_on_a_cpu():
    sizes = kvtiming.context_sizes("cpu", "fp32")
    assert sizes.shape.n_layers == 1 and sizes.shape.compute == "fp32" and sizes.shape.weight_bytes == 4
    assert sizes.k == 4 and sizes.budget_s <= 20
