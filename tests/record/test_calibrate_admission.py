"""Calibrations, the record (calibrate.shapes, points, admission): the published setups read as cases (α from
published tokens per iteration), and what the record admits, each series by a stated rule or kept out with every
rule it fails."""

import dataclasses

import pytest

from specnotes import validate
from specnotes.analytic import cost
from specnotes.record import calibrate, published

FIG1C = ("specdecode_bench", "fig1c_eagle3")


def test_cases_read_the_published_setup():
    cases = calibrate.cases(*FIG1C)
    assert [c.batch for c in cases] == [1, 16, 64, 128]
    c = cases[0]
    assert c.context == round((355 + 1083) / 2)  # middle of the decode: prompt to prompt + output
    assert cost.expected_tokens(c.alpha, 3) == pytest.approx(2.2548, abs=1e-9)
    assert c.draft is calibrate.EAGLE3_LLAMA31_8B and c.target is calibrate.LLAMA_31_8B
    assert (c.accel, c.tp, c.k, c.measured) == ("H100-SXM", 1, 3, 1.712)
    md = calibrate.cases("magicdec", "fig6c_llama31_selfspec_a100", alpha=calibrate.magicdec_alpha)
    assert {(c.tp, c.draft_context, c.draft is c.target) for c in md} == {(8, 512, True)}
    with pytest.raises(validate.BadArgument, match="alpha"):
        calibrate.cases("magicdec", "fig6c_llama31_selfspec_a100")


def test_magicdec_alpha_interpolates_the_table():
    assert calibrate.magicdec_alpha(32000) == pytest.approx(0.81)
    assert calibrate.magicdec_alpha(24000) == pytest.approx((0.82 + 0.81) / 2)  # no 24k column
    with pytest.raises(validate.BadArgument):
        calibrate.magicdec_alpha(200000)


def test_record_holds_every_speedup_series_or_says_why_not():
    rec = calibrate.record()
    modelled = {f"{c.source}/{c.series}" for c in rec.cases}
    for name in published.names():
        for s in published.load(name).series:
            if s.values is None and ("speedup" in s.columns or "latency_sd" in s.columns):
                key = f"{name}/{s.id}"
                assert (key in modelled) != (key in rec.skipped), key
                assert key in modelled or len(rec.skipped[key]) > 20, key
    assert "n-gram" in rec.skipped["specdecode_bench/fig1a_ngramfixed3"]
    # an anchored series is predicted from its smallest batch: that point is not scored, the others are
    eagle1 = [i for i, c in enumerate(rec.cases) if c.series == "table3_sglang_h100_eagle"]
    assert [rec.cases[i].batch for i in eagle1][0] == 2 and all(rec.cases[i].anchored for i in eagle1)
    assert not rec.scored[eagle1[0]] and rec.scored[eagle1[1:]].all()
    assert all(rec.scored[i] for i, c in enumerate(rec.cases) if not c.anchored)
    assert rec.cases[eagle1[0]].key == ("sglang", "0.4.4", "H100-SXM")


@pytest.mark.parametrize("setup,expected", [
    ({"engine": "vLLM", "engine_version": "0.10.1"}, ("vllm", "0.10.1")),
    ({"engine": "SGLang", "engine_version": "0.5.3.post3"}, ("sglang", "0.5.3.post3")),
    ({"engine": "vLLM", "engine_version": None}, ("vllm", None)),
    ({"engine": "vLLM", "engine_version": "the PR's branch (June-July 2024)"}, ("vllm", None)),
    ({"engine": "MagicDec research engine (PyTorch)", "engine_version": None}, ("magicdec", None)),
])
def test_engine_identity(setup, expected):
    assert calibrate.engine_id(setup) == expected
    assert calibrate.calibration_name(*expected) == (f"{expected[0]}-{expected[1]}" if expected[1] else expected[0])


# ---- what the record admits, each by a stated rule (issue 34 follow-up: the new published points)

def _series(columns, points, **setup):
    base = {"target": "Llama-3.1-8B", "drafter": "eagle3-head", "accelerator": "H100-SXM", "tp": 1, "k": 3,
            "engine": "vLLM", "engine_version": "0.10.1", "context": [100, 900], "metric": "output-token throughput"}
    missing = setup.pop("missing", {})
    return published.Series("synthetic", "Fig. 0", "S", {"url": "https://example.org"}, "read", None,
                            {**base, **setup}, missing, (), tuple(columns), tuple(points))


@pytest.mark.parametrize(("setup", "kind"), [
    ({}, None),  # a closed loop: its requests in flight are the decode batch
    ({"metric": "total tokens generated per second with and without"}, None),  # generated tokens: output only
    ({"metric": "total token throughput (input and output tokens per second)"}, "not a decode speedup"),
    ({"metric": "requests per second, prompt tokens included"}, "not a decode speedup"),
    ({"concurrency_unit": "requests per rank (data-parallel attention)"}, "parallel layout"),
])
def test_a_closed_loop_is_a_batch_unless_a_rule_says_otherwise(setup, kind):
    s = _series(("concurrency", "mean_acceptance_length", "speedup"),
                [{"concurrency": 1, "mean_acceptance_length": 2.4, "speedup": 1.9},
                 {"concurrency": 16, "mean_acceptance_length": 2.3, "speedup": 1.5}], **setup)
    if kind is None:
        cases = calibrate.series_cases(None, s)
        assert [(c.batch, c.load) for c in cases] == [(1, "concurrency"), (16, "concurrency")]
        assert [c.expected() for c in cases] == pytest.approx([2.4, 2.3])  # each point's own acceptance
        assert cases[0].alpha == pytest.approx(cost.implied_alpha(2.4, 3))
        assert calibrate.FAMILIES["concurrency"](cases[0]) and not calibrate.FAMILIES["batch"](cases[0])
    else:
        with pytest.raises(calibrate.Unpriceable) as err:
            calibrate.series_cases(None, s)
        assert err.value.kind == kind
    qps = _series(("qps", "latency_sd", "latency_plain"), [{"qps": 1, "latency_sd": 1, "latency_plain": 2}])
    with pytest.raises(calibrate.Unpriceable, match="arrival rate"):
        calibrate.series_cases(None, qps)


def test_each_point_brings_its_own_acceptance_and_tree():
    s = _series(("batch", *calibrate.TREE_COLUMNS, "mean_acceptance_length", "speedup"),
                [{"batch": 1, "num_steps": 3, "topk": 1, "num_draft_tokens": 4, "mean_acceptance_length": 2.2,
                  "speedup": 1.5},
                 {"batch": 1, "num_steps": 4, "topk": 4, "num_draft_tokens": 16, "mean_acceptance_length": 2.9,
                  "speedup": 1.4},
                 {"batch": 8, "num_steps": 2, "topk": 1, "num_draft_tokens": 4, "mean_acceptance_length": 1.8,
                  "speedup": 1.3}], k=None)
    chain, tree, clamped = calibrate.series_cases(None, s)
    assert (chain.k, chain.widths, chain.tokens) == (3, None, None)  # a chain: α from its own E[N]
    assert chain.expected() == pytest.approx(2.2)
    assert (tree.k, tree.widths, tree.tokens) == (15, (1, 4, 4, 4), 2.9)  # verifies num_draft_tokens - 1
    assert (clamped.k, clamped.widths) == (2, None)  # SGLang: a chain of 2 steps verifies 3 tokens, whatever asked
    with pytest.raises(validate.BadArgument, match="tokens per iteration"):
        calibrate.series_cases(None, _series(("batch", "mean_acceptance_length", "speedup"),
                                             [{"batch": 1, "mean_acceptance_length": 4.01, "speedup": 2}]))
    # on the record: SGLang's MoE trees, each point at its own shape and acceptance length
    spec = [c for c in calibrate.record().cases if c.series == "h100x2_tp2_eagle3"]
    rows = published.load("specforge_issue339")["h100x2_tp2_eagle3"].points
    assert [c.expected() for c in spec] == pytest.approx([p["mean_acceptance_length"] for p in rows])


def test_shapes_and_their_aliases():
    for alias, (name, why) in calibrate.SHAPE_ALIASES.items():
        s, of = calibrate.shape(alias), calibrate.SHAPES[name]
        assert s.name == alias and dataclasses.replace(s, name=of.name) == of and len(why) > 20
    assert calibrate.shape("Qwen3-30B-A3B") is cost.QWEN3_30B_A3B and calibrate.shape("Llama-3-8B") is cost.LLAMA_3_8B
    with pytest.raises(calibrate.Unpriceable) as err:
        calibrate.shape("Mistral-7B")
    assert err.value.kind == "shape"
    assert "linear attention" in calibrate.record().skipped["speculators_qwen38_27b_b200/b200_mtp_k2_humaneval"]


def test_drafters_the_cost_model_prices_and_those_it_cannot():
    moe_head = calibrate._draft({"drafter": "eagle3-head"}, cost.QWEN3_30B_A3B)
    layer = moe_head.layer  # SpecForge's configs/qwen3-30B-eagle3.json: a dense Llama layer of the target's width
    assert not isinstance(layer, cost.MoEShape)
    assert (layer.d_model, layer.n_heads, layer.n_kv_heads, layer.d_head, layer.d_ff, layer.vocab) == (
        2048, 32, 4, 128, 6144, 32000)
    assert calibrate._draft({"drafter": "mtp"}, cost.DEEPSEEK_V3) == cost.mtp_head(cost.DEEPSEEK_V3)
    assert calibrate._draft({"drafter": "eagle2-head"}, cost.LLAMA_3_1_8B) == cost.eagle_head(cost.LLAMA_3_1_8B)
    assert calibrate._draft({"drafter": "eagle3-head"}, cost.LLAMA_3_1_70B) is cost.EAGLE3_LLAMA_3_1_70B
    for kind in ("medusa", "dspark", "lookahead"):
        with pytest.raises(calibrate.Unpriceable) as err:
            calibrate._draft({"drafter": kind}, cost.LLAMA_3_8B)
        assert err.value.kind == "drafter"
    # issue 42: a MoE target with latent attention gets its published head (SpecForge's DeepSeek-V3 config: a
    # dense Llama layer of 56 heads), and an EAGLE 3.1 MLA head keeps the latent
    ds = calibrate._draft({"drafter": "eagle3-head"}, cost.DEEPSEEK_V3).layer
    assert not isinstance(ds, cost.MoEShape) and (ds.n_heads, ds.n_kv_heads, ds.d_ff) == (56, 8, 40960)
    assert calibrate._draft({"drafter": "eagle3.1-mla-head"}, cost.KIMI_K2_5).layer.mla
    with pytest.raises(calibrate.Unpriceable, match="latent attention"):
        calibrate._draft({"drafter": "eagle3.1-mla-head"}, cost.QWEN3_30B_A3B)


@pytest.mark.parametrize(("setup", "missing", "expected"), [
    ({"accelerator": None, "accelerator_text": "'GPU: H100*4'"}, {"accelerator": "without the form factor"},
     "H100-SXM"),
    ({"accelerator": None, "accelerator_text": "'an H100 card'"}, {"accelerator": "the form factor is not stated"},
     "H100-SXM"),
    ({"accelerator": None, "accelerator_text": None}, {"accelerator": "not published"}, None),  # no GPU at all
    ({"accelerator": None, "accelerator_text": "'A100'"}, {"accelerator": "without the form factor"}, None),
    ({"accelerator": "H100-PCIe", "accelerator_text": "'H100'"}, {"accelerator": "form factor"}, None),
])
def test_a_gpu_named_without_its_form_factor(setup, missing, expected):
    found = calibrate.assumed_gpu(setup, missing)
    assert (found and found[0]) == expected
    if expected:
        assert "SXM" in found[1] and "PCIe" in found[1] and "3.35" in found[1]


def test_the_record_says_what_keeps_each_series_out():
    rec = calibrate.record()
    assert set(rec.kinds) == set(rec.skipped)
    assert all(kinds and set(kinds) <= set(calibrate.SKIP_KINDS) for kinds in rec.kinds.values())
    rows = {r["rule"]: r for r in calibrate.skip_summary(rec)}
    assert rows["no GPU"]["series"] == sum("no GPU" in k for k in rec.kinds.values())
    assert "specbundle_2025/qwen3_30b_a3b_specbundle_b8" in {k for k, v in rec.kinds.items() if "no GPU" in v}
    for r in rows.values():
        assert r["alone series"] == len(r["alone"]) <= r["series"] and r["alone points"] <= r["points"]
    assert "no GPU" in calibrate.skip_text(rec).replace("the GPU is not published", "no GPU")
    # the H100 without its form factor: admitted, marked, priced as the SXM part; their engines a MoE family
    assumed = [c for c in rec.cases if c.gpu_assumed]
    assert {c.source for c in assumed} == {"angelslim_issue163", "specforge_issue339"}
    assert {c.accel for c in assumed} == {"H100-SXM"} and all(c.moe for c in assumed)
    assert {c.engine for c in rec.cases if c.moe} == {e + calibrate.MOE_SUFFIX for e in ("sglang", "vllm", "atom")}
    assert {c.engine for c in calibrate.shared_moe(rec).cases} == {c.engine.removesuffix("-moe") for c in rec.cases}
    assert {c.accel for c in calibrate.other_form_factor(rec).cases if c.gpu_assumed} == {"H100-PCIe"}
    # the closed loops: how many, and the rules that keep each out
    loops = [k for k in rec.kinds if "concurrency" in published.load(k.split("/")[0])[k.split("/")[1]].columns]
    said = calibrate.closed_loop_text(rec)
    admitted = {c.series for c in rec.cases if c.load == "concurrency"}
    assert said.startswith(f"None of the {len(loops)} closed-loop series") == (not admitted)
    assert all(kind in said for k in loops for kind in rec.kinds[k])
