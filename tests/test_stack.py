import pytest
import torch

from specnotes import cost, measure, stack
from specnotes.stack import build_stack, forward, pass_inputs, stack_shape

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


def test_stack_time_record_carries_the_cost_model():
    st = build_stack(TINY, dtype=torch.float32)
    r = measure.stack_time(st, 3, 5, context=8, warmup=1, repeats=3)
    c = cost.forward_cost(TINY, 3, 5, 8)
    assert r.extra["flops"] == c.flops and r.extra["bytes"] == c.bytes and r.extra["tokens"] == 15
    mixed = measure.stack_time(st, 3, 5, context=8, speculating=1, warmup=1, repeats=3)
    assert mixed.extra["tokens"] == 3 + 4  # B + k: the source note's batch
    assert r.median_s > 0 and r.params["speculating"] == 3


def test_bad_input():
    st = build_stack(TINY, dtype=torch.float32)
    with pytest.raises(ValueError, match="speculating must be in"):
        stack.groups_for(3, 5, speculating=4)
    with pytest.raises(ValueError, match="batch must be"):
        measure.stack_time(st, 0, 1)


def test_sizes_cpu_are_a_real_stack_and_the_draft_is_smaller():
    s = measure.stack_sizes("cpu")
    assert s.target.weight_bytes_total > 64 * 2**20  # larger than a CPU's last-level cache
    assert 4 < s.target.params / s.draft.params < 16


def test_stack_overhead_is_a_floor_below_a_real_pass():
    st = build_stack(TINY, dtype=torch.float32)
    t0 = measure.stack_overhead(TINY, "cpu", "fp32", context=4, repeats=5)
    assert 0 < t0 <= min(measure.stack_time(st, 2, 3, 4, warmup=1, repeats=3).samples) * 1.5


@pytest.mark.parametrize("heads, kv_heads, n, context", [(8, 2, 5, 7), (8, 2, 1, 9), (4, 4, 3, 6), (6, 1, 2, 0)])
def test_grouped_attention_is_sdpa_with_gqa(heads, kv_heads, n, context):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, heads, n, 16, generator=gen)
    keys, values = (torch.randn(3, kv_heads, context + n, 16, generator=gen) for _ in range(2))
    mask = stack.causal_mask(n, context, "cpu")
    expected = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                                enable_gqa=heads != kv_heads)
    torch.testing.assert_close(stack.grouped_attention(q, keys, values, mask), expected)
