"""The time of every pass split by term (``cost.breakdown``): the terms sum to what the time functions price, for
every overlap mode, tp, MoE, MLA, trees and drafter kind; each regime's dominant term is the one a hand count
gives; ``change`` apportions a change of S between two batches."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnotes.analytic import cost
from specnotes.analytic.cost import DEEPSEEK_V3, GPT_OSS_20B, LLAMA_3_8B, QWEN3_0_6B, QWEN3_30B_A3B
from specnotes.validate import BadArgument

SMALL = cost.ModelShape(2, 512, 8, 2, 1024, 1000, name="small")
DRAFTS = {
    "draft model": QWEN3_0_6B,
    "early exit": cost.EarlyExit(4),  # DeepSeek-V3: after its 3 dense blocks
    "single pass": cost.SinglePass(SMALL),
    "heads": cost.Heads(SMALL),
    "eagle-3": cost.EAGLE3_LLAMA_3_1_8B,
    "mtp (MoE, MLA)": cost.MTP_DEEPSEEK_V3,
    "mtp (MoE)": cost.mtp_head(QWEN3_30B_A3B),
    "n-gram": cost.NGRAM,
}
TARGETS = {"dense": LLAMA_3_8B, "MoE": QWEN3_30B_A3B, "MoE + MLA": DEEPSEEK_V3.in_dtype("fp8"), "gpt-oss": GPT_OSS_20B}
CLOSE = {"rel": 1e-11, "abs": 1e-15}


@st.composite
def setups(draw):
    target = draw(st.sampled_from(sorted(TARGETS)))
    draft = draw(st.sampled_from(sorted(DRAFTS)))
    accel = draw(st.sampled_from(["H100-SXM", "H200", "MI300X"] + ([] if target == "MoE + MLA" else ["A100-80GB"])))
    tree = draw(st.booleans()) and draft not in ("single pass", "heads", "n-gram")
    widths = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))) if tree else None
    k = draw(st.integers(len(widths), len(widths) + 12)) if tree else draw(st.integers(0, 6))
    knobs = {"overlap": draw(st.sampled_from(cost.OVERLAPS)), "tp": draw(st.sampled_from([1, 2, 8])),
             "overhead": draw(st.sampled_from([0.0, 2e-3])), "draft_overhead": draw(st.sampled_from([None, 4e-4])),
             "layer_overhead": draw(st.sampled_from([0.0, 3e-5])),
             "allreduce_latency": draw(st.sampled_from([0.0, 1e-5])),
             "expert_slowdown": draw(st.sampled_from([0.0, 4.0]))}
    return (TARGETS[target], DRAFTS[draft], accel, draw(st.integers(1, 512)), k, draw(st.integers(0, 8192)),
            draw(st.sampled_from([None, 0, 300])), widths, knobs)


@settings(max_examples=300, deadline=None)
@given(setups())
def test_the_terms_sum_to_every_time_function(setup):
    target, draft, accel, batch, k, context, draft_context, widths, knobs = setup
    b = cost.breakdown(target, draft, accel, batch, k, context, draft_context=draft_context, widths=widths, **knobs)
    time = dict(knobs)
    assert b.decode.total == pytest.approx(cost.pass_time(target, accel, batch, 1, context, **time), **CLOSE)
    assert b.verify.total == pytest.approx(cost.pass_time(target, accel, batch, k + 1, context, **time), **CLOSE)
    dctx = context if draft_context is None else draft_context
    assert b.seconds("draft") == pytest.approx(cost.draft_time(draft, accel, batch, k, dctx, target=target,
                                                               widths=widths, **time), **CLOSE)
    assert b.seconds() == pytest.approx(cost.iteration_time(target, draft, accel, batch, k, context,
                                                            draft_context=draft_context, widths=widths, **time),
                                        **CLOSE)
    assert sum(sum(p.seconds.values()) for p in (b.decode, *b.drafts, b.verify)) == pytest.approx(
        b.decode.total + b.seconds(), **CLOSE)
    if widths is None:
        s = cost.batch_speedup(target, draft, accel, batch, k, 0.7, context, draft_context=draft_context, **time)
        assert b.speedup(cost.expected_tokens(0.7, k)) == pytest.approx(s, **CLOSE)
    for p in (b.decode, *b.drafts, b.verify):  # a term never adds more than its own roof's time
        assert all(-1e-18 <= p.seconds[t] <= p.alone[t] * (1 + 1e-12) + 1e-18 for t in cost.TERMS)
        assert all(p.hidden(t) == 0 for t in cost.TERMS) or knobs["overlap"] != "none"
    assert sum(cost.change(b, b).values()) == 0


def test_a_dense_decode_step_at_batch_one_is_its_weights():
    p = cost.pass_breakdown(LLAMA_3_8B, "H100-SXM", 1, 1)
    assert p.dominant == "dense weights" and p.bound("matmul") == "memory"
    assert p.seconds["dense weights"] == pytest.approx(LLAMA_3_8B.weight_bytes_total / 3.35e12)
    assert p.seconds["matmul FLOPs"] == 0 and p.alone["matmul FLOPs"] > 0  # hidden under the reads
    assert p.hidden("matmul FLOPs") == p.alone["matmul FLOPs"]


def test_a_big_verify_pass_is_its_matmul_flops():
    p = cost.pass_breakdown(LLAMA_3_8B, "H100-SXM", 1024, 4)  # 4,096 rows, far past the ridge (~295)
    assert p.dominant == "matmul FLOPs" and p.bound("matmul") == "compute"
    assert p.seconds["dense weights"] == 0


def test_long_context_decode_is_its_kv_and_the_draft_kv_is_the_drafts():
    p = cost.pass_breakdown(LLAMA_3_8B, "H100-SXM", 64, 1, 32768)
    assert p.dominant == "target KV" and p.bound("attention") == "memory"
    b = cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", 256, 3, 1024)
    drafts = b.totals("draft")
    assert drafts["draft KV"] > drafts["dense weights"] and b.totals("verify")["draft KV"] == 0
    # the reviewer's probe (issue 42): 115 kB a token, three draft passes at B = 256, L = 1,024: about 28 ms
    assert QWEN3_0_6B.kv_bytes_per_token == pytest.approx(114_688)
    assert drafts["draft KV"] == pytest.approx(256 * (1025 + 1026 + 1027) * 114_688 / 3.35e12)  # 27.0 ms
    assert b.seconds("draft") == pytest.approx(28e-3, rel=0.01)  # with its weights read three times
    assert b.seconds("draft") > b.verify.total  # the draft costs more than the verify pass
    assert b.totals("decode")["draft KV"] == 0


def test_the_experts_stay_memory_bound_where_the_dense_matmuls_turn_compute_bound():
    # Qwen3-30B-A3B on an H100, verify k = 3 at B = 512: 2,048 tokens, 128 rows for each of the 128 experts
    v = cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", 512, 3, 1024).verify
    experts = {k.name: k for k in v.kernels}["experts"]
    rows = 512 * 4 * 8 / cost.expected_experts(128, 8, 2048)
    assert rows == pytest.approx(128)
    assert v.bound("experts") == "memory" and experts.memory > 2 * experts.compute
    assert v.bound("matmul") == "compute"  # attention projections and LM head at 2,048 rows
    assert v.seconds["expert weights"] == pytest.approx(experts.memory)


def test_mla_attention_turns_compute_bound_at_k_plus_one_queries_on_one_gpu_not_over_eight():
    ds = DEEPSEEK_V3
    one = cost.pass_breakdown(ds, "H200", 32, 4, 32768)
    assert one.bound("attention") == "compute" and one.seconds["attention FLOPs"] > one.seconds["target KV"] == 0
    eight = cost.pass_breakdown(ds, "H200", 32, 4, 32768, tp=8)  # 16 heads a GPU: 121 FLOP/byte < 206
    assert eight.bound("attention") == "memory"


def test_tensor_parallel_links_and_fixed_costs_are_their_own_terms():
    p = cost.pass_breakdown(DEEPSEEK_V3, "H200", 1, 1, 1024, tp=8, allreduce_latency=1e-5, overhead=1e-3,
                            layer_overhead=2e-5)
    assert p.seconds["all-reduce"] == pytest.approx(2 * 61 * 1e-5 + 2 * 61 * 2 * 7 / 8 * 7168 * 2 / (900e9 / 2),
                                                    rel=1e-9)
    assert p.seconds["fixed"] == pytest.approx(1e-3 + 61 * 2e-5)
    assert p.seconds["all-to-all"] == 0
    ngram = cost.breakdown(LLAMA_3_8B, cost.NGRAM, "H100-SXM", 4, 3, draft_overhead=5e-4)
    assert len(ngram.drafts) == 1 and ngram.drafts[0].total == ngram.drafts[0].seconds["fixed"] == 5e-4


def test_pass_and_none_overlaps_split_as_they_price():
    none = cost.pass_breakdown(LLAMA_3_8B, "H100-SXM", 64, 4, 4096, overlap="none")
    assert all(none.seconds[t] == none.alone[t] for t in cost.TERMS)
    whole = cost.pass_breakdown(LLAMA_3_8B, "H100-SXM", 64, 4, 4096, overlap="pass")
    assert whole.seconds["matmul FLOPs"] == whole.seconds["attention FLOPs"] == 0  # the bytes win, over the pass


def test_change_names_the_term_that_moved_s():
    small, big = (cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", b, 3, 1024) for b in (32, 256))
    shares = cost.change(small, big)
    assert sum(shares.values()) == pytest.approx(1 / big.ratio - 1 / small.ratio)
    assert max(shares, key=shares.get) == "draft KV"  # the fall after the peak: the draft's cache
    early = cost.change(cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", 1, 3, 1024), small)
    assert min(early, key=early.get) == "expert weights"  # the rise: decode pays for the experts too
    rising = cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", 256, 3, 1024, draft_context=0)
    assert rising.ratio > big.ratio  # without its own KV the draft costs little


def test_rows_and_json_carry_every_pass():
    b = cost.breakdown(QWEN3_30B_A3B, QWEN3_0_6B, "H100-SXM", 8, 2, 512)
    rows = b.rows()
    assert {r["pass"] for r in rows} == {"decode", "draft 1", "draft 2", "verify"}
    assert sum(r["seconds"] for r in rows) == pytest.approx(b.decode.total + b.seconds())
    doc = b.to_json()
    assert doc["bounds"]["verify"] == {"matmul": "memory", "experts": "memory", "attention": "memory"}
    assert sum(doc["seconds"]["verify"].values()) == pytest.approx(b.verify.total)
    assert sum(doc["relative"].values()) == pytest.approx(1 / b.ratio)  # an iteration in plain decode steps


def test_bad_input_names_the_field():
    b = cost.breakdown(LLAMA_3_8B, QWEN3_0_6B, "H100-SXM", 1, 1)
    with pytest.raises(BadArgument, match="term"):
        b.decode.hidden("weights")
    with pytest.raises(BadArgument, match="kernel"):
        b.decode.bound("experts")
    with pytest.raises(BadArgument, match="part"):
        b.totals("prefill")
    with pytest.raises(BadArgument, match="batch"):
        cost.breakdown(LLAMA_3_8B, QWEN3_0_6B, "H100-SXM", 0, 1)
    with pytest.raises(BadArgument, match="k"):
        cost.breakdown(LLAMA_3_8B, QWEN3_0_6B, "H100-SXM", 1, 1, widths=(1, 2))
    with pytest.raises(BadArgument, match="link bandwidth"):
        cost.breakdown(LLAMA_3_8B, QWEN3_0_6B, replace(cost.accelerator("H100-SXM"), link_bandwidth=None), 1, 1,
                       tp=2)
