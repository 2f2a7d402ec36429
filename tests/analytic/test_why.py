"""analytic.why: each term's part of a change of S, from the time split, and the sentence chosen by it."""

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnotes.analytic import cost, why
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, QWEN3_0_6B, QWEN3_30B_A3B
from specnotes.validate import BadArgument

H100 = "H100-SXM"
EN = cost.expected_tokens(0.8, 4)


def split(target, draft, batch, k, context, **knobs):
    return cost.breakdown(target, draft, H100, batch, k, context, **knobs)


@settings(max_examples=40, deadline=None)
@given(b0=st.sampled_from([1, 4, 32]), b1=st.sampled_from([64, 512]), context=st.sampled_from([0, 2048, 16384]),
       draft_context=st.sampled_from([None, 0, 256]), k=st.integers(1, 6))
def test_the_parts_sum_to_the_change_of_ln_s(b0, b1, context, draft_context, k):
    before = split(LLAMA_3_8B, LLAMA_3_2_1B, b0, k, context, draft_context=draft_context)
    after = split(LLAMA_3_8B, LLAMA_3_2_1B, b1, k, context, draft_context=draft_context)
    n0, n1 = cost.expected_tokens(0.8, k), cost.expected_tokens(0.6, k)
    parts = why.parts(before, after, (n0, n1))
    assert sum(parts.values()) == pytest.approx(math.log(before.speedup(n0) / after.speedup(n1)), abs=1e-12)
    assert parts["acceptance"] == pytest.approx(-math.log(n1 / n0))
    assert sum(why.excess(after).values()) == pytest.approx(after.seconds("iteration") / after.decode.total - 1)


def scaled(b: cost.Breakdown, by: float) -> cost.Breakdown:
    """Every pass ``by`` times as long, term by term."""
    each = lambda p: dataclasses.replace(p, seconds={t: s * by for t, s in p.seconds.items()})
    return dataclasses.replace(b, decode=each(b.decode), drafts=tuple(map(each, b.drafts)), verify=each(b.verify))


def test_a_change_of_scale_moves_no_part_and_s_barely_moves():
    b = split(LLAMA_3_8B, LLAMA_3_2_1B, 64, 4, 1024)
    assert all(abs(v) < 1e-12 for v in why.parts(b, scaled(b, 0.5), EN).values())
    assert why.describe_why(b, scaled(b, 0.5), EN).startswith("S barely moves")


def test_chapter_4s_fall_is_the_verify_pass_turning_compute_bound():
    text = why.describe_why(split(LLAMA_3_8B, LLAMA_3_2_1B, 1, 4, 0), split(LLAMA_3_8B, LLAMA_3_2_1B, 256, 4, 0), EN)
    assert text.startswith("S falls from 2.03 at B = 1 to 0.67 at B = 256, crossing 1, mostly because the verify "
                           "pass's matmul FLOPs take more decode steps") and "compute-bound at B = 256" in text


def test_the_draft_kv_probe_changes_the_sentence():
    """Issue 44: with the draft's KV removed (draft_context=0) a sentence that blames it must change. At L = 8192
    (Chapter 5) and for Chapter 10's Qwen3-30B-A3B at L = 1024, the draft's KV reads drive the fall; without them,
    something else moves S."""
    for target, draft, k, alpha, ctx, b0, b1 in ((LLAMA_3_8B, LLAMA_3_2_1B, 4, 0.8, 8192, 1, 64),
                                                  (QWEN3_30B_A3B, QWEN3_0_6B, 3, 0.7, 1024, 32, 4096)):
        en = cost.expected_tokens(alpha, k)
        said = {dc: why.describe_why(split(target, draft, b0, k, ctx, draft_context=dc),
                                     split(target, draft, b1, k, ctx, draft_context=dc), en) for dc in (None, 0)}
        assert "the draft's KV reads take more decode steps" in said[None], said[None]
        assert "draft's KV" not in said[0] and said[0] != said[None], said[0]


def test_a_term_both_passes_pay_alike_lifts_s_by_lengthening_the_decode_step():
    """At B = 256 from L = 0 to 8192 (Chapter 5's turn): the verify pass's FLOPs are fewer decode steps, since the
    target's KV reads make the decode step 19× as long; those reads have no excess of their own."""
    before, after = split(LLAMA_3_8B, LLAMA_3_2_1B, 256, 4, 0), split(LLAMA_3_8B, LLAMA_3_2_1B, 256, 4, 8192)
    assert abs(why.parts(before, after, EN)["target KV"]) < 0.01
    text = why.describe_why(before, after, EN, labels=("at L = 0", "at L = 8192"))
    assert "S rises from 0.67 at L = 0 to 1.56 at L = 8192, crossing 1" in text
    assert "The decode step itself takes 19.3× as long at L = 8192, mostly from the target's KV reads" in text


def test_describe_why_rejects_bad_input_by_name():
    b = split(LLAMA_3_8B, LLAMA_3_2_1B, 1, 4, 0)
    with pytest.raises(BadArgument, match=r"tokens \(E\[N\]\) must be a number > 0"):
        why.describe_why(b, b, 0)
    with pytest.raises(BadArgument, match=r"tokens must be E\[N\], or \(E\[N\] before, E\[N\] after\)"):
        why.describe_why(b, b, (1.0, 2.0, 3.0))
    with pytest.raises(BadArgument, match=r"close must be a number in \[0, 1\]"):
        why.describe_why(b, b, EN, close=2)
