"""The published record: every file loads, every number carries its provenance, broken records are
rejected, and the values agree with what the sources' own text says (an independent reading)."""

import copy
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from specnotes import validate
from specnotes.analytic import cost, hardware
from specnotes.record import published

FOLDER = resources.files("specnotes").joinpath("data", "published")
BIB = Path(__file__).resolve().parents[2] / "book" / "references.bib"


def raw(name):
    return json.loads(FOLDER.joinpath(f"{name}.json").read_text(encoding="utf-8"))


def test_names_lists_the_shipped_files():
    assert published.names() == sorted(p.name[:-5] for p in FOLDER.iterdir() if p.name.endswith(".json"))
    assert {"specdecode_bench", "magicdec", "vllm_blog_2024", "interconnect", "leviathan2023"} <= set(published.names())


@pytest.mark.parametrize("name", published.names())
def test_every_series_carries_source_and_how_it_was_read(name):
    # checked on the raw JSON, independently of the loader
    doc = raw(name)
    assert doc["name"] == name and doc["reference"] and doc["url"].startswith("http")
    for s in doc["series"]:
        src = s["source"]
        assert src.get("url", "").startswith("http") or (
            src["repo"].count("/") == 1 and src["path"] and re.fullmatch(r"[0-9a-f]{40}", src["commit"])), s["id"]
        assert len(s["how_read"]) >= 20 and s["figure"] and "uncertainty" in s, s["id"]
        assert ("points" in s) != ("values" in s), s["id"]
        for key, value in s["setup"].items():
            assert (value is None) == (key in s["missing"]), (s["id"], key)
    assert published.load(name).name == name


@pytest.mark.parametrize("name", published.names())
def test_every_reference_is_in_the_bibliography(name):
    keys = set(re.findall(r"^@\w+\{([^,]+),", BIB.read_text(encoding="utf-8"), flags=re.M))
    assert set(published.load(name).reference) <= keys


def test_unknown_source_names_the_known_ones():
    with pytest.raises(validate.BadArgument, match="magicdec"):
        published.load("nope")


def _broken():
    """Deliberately wrong records, each of which the loader must reject."""
    def edit(fn):
        doc = raw("magicdec")
        fn(doc)
        return doc
    s0 = lambda d: d["series"][0]  # noqa: E731
    return {
        "no how_read": edit(lambda d: s0(d).pop("how_read")),
        "how_read too short": edit(lambda d: s0(d).update(how_read="by eye")),
        "no source": edit(lambda d: s0(d).update(source={})),
        "short commit": edit(lambda d: s0(d)["source"].update(commit="09cd671")),
        "repo without path": edit(lambda d: s0(d)["source"].pop("path")),
        "null without a reason": edit(lambda d: s0(d)["setup"].update(dataset=None)),
        "reason for a value that is given": edit(lambda d: s0(d)["missing"].update(dataset="?")),
        "unknown accelerator": edit(lambda d: s0(d)["setup"].update(accelerator="A100")),
        "reversed range": edit(lambda d: s0(d)["setup"].update(draft_context=[512, 256])),
        "point with an extra key": edit(lambda d: s0(d)["points"][0].update(extra=1)),
        "point that is not a number": edit(lambda d: s0(d)["points"][0].update(speedup="1.2")),
        "points and values": edit(lambda d: s0(d).update(values={"a": 1.0}, units={"a": "s"})),
        "values without units": edit(lambda d: d["series"].append(
            {**{k: v for k, v in s0(d).items() if k not in ("points", "columns")}, "id": "x", "values": {"a": 1.0}})),
        "duplicate ids": edit(lambda d: d["series"].append(copy.deepcopy(s0(d)))),
        "unknown series key": edit(lambda d: s0(d).update(reed_by="eye")),
        "negative uncertainty": edit(lambda d: s0(d).update(uncertainty=-0.1)),
        "wrong name": edit(lambda d: d.update(name="magic")),
        "empty series": edit(lambda d: d.update(series=[])),
        # the quantization keys and the point columns with a fixed meaning (issue 34, part 4)
        "zero weight bits": edit(lambda d: s0(d)["setup"].update(weight_bits=0)),
        "fractional weight bits": edit(lambda d: s0(d)["setup"].update(weight_bits=4.5)),
        "weight bits as text": edit(lambda d: s0(d)["setup"].update(weight_bits="4")),
        "unknown weight format": edit(lambda d: s0(d)["setup"].update(weight_format="int3-awq")),
        "bits that disagree with the format": edit(lambda d: s0(d)["setup"].update(weight_format="nvfp4",
                                                                                    weight_bits=8)),
        "kv bytes not a cache dtype": edit(lambda d: s0(d)["setup"].update(kv_bytes=3)),
        "moe flag as text": edit(lambda d: s0(d)["setup"].update(moe="yes")),
        "batch that is not whole": edit(lambda d: s0(d)["points"][0].update(batch=2.5)),
        "batch of zero": edit(lambda d: s0(d)["points"][0].update(batch=0)),
        "negative speedup": edit(lambda d: s0(d)["points"][0].update(speedup=-1.2)),
        "acceptance length below 1": edit(lambda d: (s0(d)["columns"].append("mean_acceptance_length"),
                                                     [p.update(mean_acceptance_length=0.8)
                                                      for p in s0(d)["points"]])),
    }


@pytest.mark.parametrize("case", sorted(_broken()))
def test_broken_records_are_rejected(case):
    with pytest.raises(validate.BadArgument, match="published record"):
        published.parse(_broken()[case], "magicdec")


@pytest.mark.parametrize("key,value,says", [
    ("weight_bits", 0, "whole number of bits per weight from 1 to 32"),
    ("weight_bits", 33, "whole number of bits per weight from 1 to 32"),
    ("weight_format", "q4_k_m", "must be one of bf16, fp16, fp8, int8, int4-awq"),
    ("kv_bytes", 1.5, "must be one of 0.5, 1, 2, 4 bytes per cached element"),
    ("accelerator", "GB400", "not a row of hardware.DEVICES"),
])
def test_bad_setup_values_say_the_allowed_range(key, value, says):
    doc = raw("magicdec")
    doc["series"][0]["setup"][key] = value
    with pytest.raises(ValueError, match=says):  # validate.BadArgument is a ValueError
        published.parse(doc, "magicdec")


def test_bad_point_columns_say_what_they_must_be():
    doc = raw("magicdec")
    doc["series"][0]["points"][0]["batch"] = 0.5
    with pytest.raises(ValueError, match=r"point 0: batch must be a whole number >= 1; got 0.5"):
        published.parse(doc, "magicdec")


def test_quantized_deployments_are_expressible():
    # the two 4-bit cases issue 34 names: INT4 AWQ weights, and fp4 weights with an fp8 KV cache
    for fmt, kv, dtype_bytes in (("int4-awq", 2, 0.5), ("nvfp4", 1, 0.5), ("mxfp4", 2, 0.5), ("fp8", 1, 1.0)):
        doc = raw("magicdec")
        doc["series"][0]["setup"].update(weight_format=fmt, weight_bits=published.WEIGHT_FORMATS[fmt], kv_bytes=kv,
                                         accelerator="GB300")
        s = published.parse(doc, "magicdec").series[0]
        assert s.weight_bytes() == dtype_bytes and s.setup["kv_bytes"] == kv
    # weight_bits alone, or the dtype alone, give the bytes per weight; nothing at all gives None
    doc = raw("magicdec")
    doc["series"][0]["setup"]["weight_bits"] = 4
    assert published.parse(doc, "magicdec").series[0].weight_bytes() == 0.5
    assert published.load("gpustack_qwen3_8b_h100").series[0].weight_bytes() == 1.0  # "dtype": "fp8"
    assert published.load("magicdec").series[0].weight_bytes() is None


def test_the_unbroken_record_parses():
    # the control for the list above: the same record, unedited, is accepted
    assert published.parse(raw("magicdec"), "magicdec").ids() == published.load("magicdec").ids()


# ---- the values against the sources' own words (read independently of the figures)

def test_specdecode_bench_figure_agrees_with_its_text():
    sdb = published.load("specdecode_bench")
    # "By batch size 128, this drops to 1.21x for Llama-3.1-8B on GSM8K" (EAGLE)
    assert sdb["fig1a_eagle"].where(batch=128)[0]["speedup"] == pytest.approx(1.21, abs=0.006)
    # "At batch size 1, EAGLE achieves up to 1.96x speedup on Llama-3-70B"
    best = max(sdb[f"fig1{p}_eagle"].where(batch=1)[0]["speedup"] for p in "efgh" if p != "h")
    assert best == pytest.approx(1.96, abs=0.01)
    # "1.65x -> 1.85x for EAGLE on Qwen3-8B/GSM8K going from chain k=3 to tree k=21"
    assert sdb["fig2a_eagle3_chain_k3"].where(batch=1)[0]["speedup"] == pytest.approx(1.65, abs=0.006)
    assert sdb["fig2a_eagle3_tree_k21"].where(batch=1)[0]["speedup"] == pytest.approx(1.85, abs=0.006)
    # "by batch size 64, the k=21 tree falls below 1x speedup on all workloads"
    assert all(s.where(batch=64)[0]["speedup"] < 1 for s in sdb.series if s.id.endswith("tree_k21"))


def test_specdecode_bench_headline_series():
    s = published.load("specdecode_bench")["fig1c_eagle3"]
    assert s.column("batch") == [1, 16, 64, 128]
    # the by-eye reading (1.70, 1.67, 1.54, 1.29) agrees within the eye's +-0.03
    assert s.column("speedup") == pytest.approx([1.70, 1.67, 1.54, 1.29], abs=0.03)
    assert s.setup["k"] == 3 and s.setup["accelerator"] == "H100-SXM" and s.setup["engine_version"] == "0.10.1"
    # E[N] = 2.2548 at k = 3 is alpha ~ 0.62: (1 - a^4)/(1 - a) by hand at a = 0.62 is 2.2422
    assert cost.expected_tokens(0.62, 3) == pytest.approx(1 + 0.62 + 0.62**2 + 0.62**3)
    assert cost.expected_tokens(0.62, 3) < s.setup["tokens_per_iteration"] < cost.expected_tokens(0.63, 3)


def test_predictor_kv_term_is_the_h100_bandwidth_roofline():
    # the authors' fitted seconds per cached token vs Llama-3-8B's KV bytes (2·32·8·128·2) over the
    # datasheet bandwidth: an independent check that the fit's KV term is memory-bound
    values = published.load("specdecode_bench")["predictor_llama8b_h100"].values
    roofline = (2 * 32 * 8 * 128 * 2) / hardware.accelerator("H100-SXM").mem_bandwidth
    assert values["target_c_kv"] == pytest.approx(roofline, rel=0.005)


def test_magicdec_figure_and_tables():
    md = published.load("magicdec")
    fig = md["fig6c_llama31_selfspec_a100"]
    table = md["table_a100_llama31_selfspec"]
    # at 32k and B = 32 the figure and the table agree (1.22), and at 100k (1.84)
    assert fig.where(context=32000, batch=32)[0]["speedup"] == pytest.approx(1.22, abs=0.005)
    assert fig.where(context=100000, batch=32)[0]["speedup"] == pytest.approx(
        md["table2_a100_llama31_selfspec"].where(context=100000)[0]["speedup"], abs=0.005)
    assert [p["speedup"] for p in table.where(context=32000)] == [1.22, 1.38, 1.47]
    assert [p["k"] for p in table.where(context=32000)] == [3, 3, 4]
    # the blog's claim: the speedup rises with batch size at long context (figure, 16k and up)
    for context in (16000, 24000, 32000, 64000):
        speedups = [p["speedup"] for p in sorted(fig.where(context=context), key=lambda p: p["batch"])]
        assert speedups == sorted(speedups), context
    assert md["acceptance_llama31_budget512"].where(context=32000)[0]["alpha"] == 0.81
    assert fig.setup["tp"] == 8 and fig.bounds("draft_context") == (512, 512)
    assert table.bounds("draft_context") == (256, 512)


def test_vllm_blog_bars_agree_with_its_captions():
    blog = published.load("vllm_blog_2024")
    # the numbers the post states in words, as the book quotes them (copied, so no uncertainty)
    stated = blog["stated"]
    assert stated.uncertainty is None and stated.values == {
        "draft_model_speedup_qps1": 1.5, "ngram_speedup_qps1": 2.8,  # "up to 1.5x", "up to 2.8x"
        "draft_model_slowdown_high_qps": 1.4, "ngram_slowdown_high_qps": 1.8}  # "1.4x slowdown", "1.8x slowdown"
    assert all(f"{v}x" in " ".join(stated.notes) for v in stated.values.values())
    # the bars, read by pixel (±0.05 s), round to within a reading's error of them
    qps1 = blog["fig5_draft_model_sharegpt"].where(qps=1)[0]
    assert qps1["latency_plain"] / qps1["latency_sd"] == pytest.approx(stated.values["draft_model_speedup_qps1"],
                                                                       abs=0.1)
    qps1 = blog["fig6_ngram_cnn"].where(qps=1)[0]
    assert qps1["latency_plain"] / qps1["latency_sd"] == pytest.approx(stated.values["ngram_speedup_qps1"], abs=0.15)
    draft, ngram = blog["fig7_high_qps"].points
    assert draft["latency_sd"] / draft["latency_plain"] == pytest.approx(
        stated.values["draft_model_slowdown_high_qps"], abs=0.05)
    assert ngram["latency_sd"] / ngram["latency_plain"] == pytest.approx(stated.values["ngram_slowdown_high_qps"],
                                                                         abs=0.1)


def test_leviathan_table_3_agrees_with_the_papers_text_and_table_2():
    lev = published.load("leviathan2023")
    alpha = {f"{s.id}.{k}": v for s in lev.series for k, v in s.values.items()}
    assert len(alpha) == 32 and all(0 < v < 1 for v in alpha.values())
    # "the bigram model has an alpha value of 0.2" (EnDe, Section 3.6 and 4.2)
    assert alpha["table3_t5_xxl_ende.bigram_t0"] == 0.20
    # Table 2's alpha column, typed separately: T5-small/base/large on EnDe and CNNDM at temperatures 0 and 1
    table2 = {"ende": {0: (0.75, 0.80, 0.82), 1: (0.62, 0.68, 0.71)},
              "cnndm": {0: (0.65, 0.73, 0.74), 1: (0.53, 0.55, 0.56)}}
    for task, by_temp in table2.items():
        for t, values in by_temp.items():
            got = tuple(alpha[f"table3_t5_xxl_{task}.t5_{size}_t{t}"] for size in ("small", "base", "large"))
            assert got == values, (task, t)
    # "approximation models that are a couple of orders of magnitude smaller ... alpha values between 0.5 and 0.9";
    # unigram and bigram drafts are far below
    models = [v for k, v in alpha.items() if "gram" not in k]
    grams = [v for k, v in alpha.items() if "gram" in k]
    assert all(0.5 <= v <= 0.9 for v in models) and max(grams) < 0.25


def test_interconnect_matches_the_accelerator_table():
    inter = published.load("interconnect")
    for sid, row in (("nvlink_a100", "A100-80GB"), ("nvlink_h100", "H100-SXM")):
        values = inter[sid].values
        assert values["link_bandwidth_total"] == hardware.accelerator(row).link_bandwidth
        assert values["link_bandwidth_per_direction"] * 2 == values["link_bandwidth_total"]
        assert values["link_bandwidth_total"] == values["links"] * 50e9  # 50 GB/s per NVLink 3/4 link


def test_series_accessors_check_their_arguments():
    s = published.load("magicdec")["fig6c_llama31_selfspec_a100"]
    with pytest.raises(validate.BadArgument, match="column"):
        s.column("latency")
    with pytest.raises(validate.BadArgument, match="not a number"):
        s.bounds("dataset")
    with pytest.raises(validate.BadArgument, match="no series"):
        published.load("magicdec")["nope"]


def test_describe_lists_the_provenance_wrapped():
    s = published.load("specdecode_bench")["fig1c_eagle3"]
    text = s.describe(width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    for word in ("figure:", "source:", "how read:", "uncertainty:", "setup:", "missing:", "fb0e242", "0.10.1"):
        assert word in text
    assert "temperature: not stated" in " ".join(text.split())


# ---- the batch sweeps added for the cross-validation (issue 24): each against its source's own sentences

def test_eagle3_tables_agree_with_the_papers_sentences():
    e3 = published.load("eagle3_2025")
    sg1, sg3 = e3["table3_sglang_h100_eagle"], e3["table3_sglang_h100_eagle3"]
    # "EAGLE reduces throughput at batch size of 24": the first batch where EAGLE's speedup drops below 1
    assert next(p["batch"] for p in sg1.points if p["speedup"] < 1) == 24
    # "EAGLE-3 still achieves a 38% throughput improvement at a batch size of 64" (abstract: 1.38x)
    assert sg3.where(batch=64)[0]["speedup"] == 1.38
    assert all(p["speedup"] > 1 for p in sg3.points)
    # "EAGLE shows the maximum throughput improvement at a batch size of 24, while EAGLE-3 shows this at 56":
    # the largest batch still at or above 1.00x (the table itself peaks at B = 2)
    v1, v3 = e3["table5_vllm_rtx3090_eagle"], e3["table5_vllm_rtx3090_eagle3"]
    assert max(p["batch"] for p in v1.points if p["speedup"] >= 1) == 24
    assert max(p["batch"] for p in v3.points if p["speedup"] >= 1) == 56
    assert v1.setup["k"] == 2 and sg1.setup["k"] == 3 and not v1.setup["tree"]
    # Table 5's GPU is disputed inside the paper: both readings are on record
    assert v1.setup["accelerator"] == "RTX-3090" and "A100" in v1.setup["accelerator_text"]


def test_eagle1_table7_and_its_throughput_paragraph():
    e1 = published.load("eagle2024")
    vic, llama = e1["table7_vicuna7b_rtx3090"], e1["table7_llama2chat70b_4xa100"]
    assert vic.column("batch") == llama.column("batch") == [1, 2, 3, 4]
    # "the speedup ratio at bs=4 is higher than at bs=3" (Vicuna 7B), and the 70B row only falls
    assert vic.where(batch=4)[0]["speedup"] > vic.where(batch=3)[0]["speedup"]
    assert llama.column("speedup") == sorted(llama.column("speedup"), reverse=True)
    # SafeAILab/EAGLE issue #5: "tests on 4x A100 40G GPUs, achieving a speedup of 3.01x"
    assert llama.where(batch=1)[0]["speedup"] == 3.01
    # "EAGLE achieves a 2x increase in throughput", each system at its own largest batch (EAGLE one fewer)
    v = e1["table7_throughput"].values
    assert round(v["vicuna7b_throughput_ratio"]) == round(v["llama2chat70b_throughput_ratio"]) == 2
    assert v["vicuna7b_max_batch_vanilla"] - v["vicuna7b_max_batch_eagle"] == 1
    assert v["llama2chat70b_max_batch_vanilla"] - v["llama2chat70b_max_batch_eagle"] == 1


NEW_SWEEPS = ["eagle3_2025", "eagle2024", "gpustack_qwen3_8b_h100", "sglang_pr2150", "vllm_pr16937", "vllm_pr29334"]


@pytest.mark.parametrize("name", NEW_SWEEPS)
def test_computed_speedups_are_the_ratio_of_the_copied_throughputs(name):
    for s in published.load(name).series:
        if "throughput_sd" in s.columns:
            for p in s.points:
                assert p["speedup"] == pytest.approx(p["throughput_sd"] / p["throughput_plain"], abs=5e-4), s.id
        for p in s.points:  # every point is a (deployment, batch or concurrency, S) triple
            assert ("batch" in p) != ("concurrency" in p) and 0.5 < p["speedup"] < 4, s.id
        if s.points:
            assert s.setup["accelerator"] in hardware.ACCELERATORS and s.setup["engine"], s.id


def test_the_new_record_holds_at_least_forty_points_from_six_sources():
    points = {n: sum(len(s.points) for s in published.load(n).series) for n in NEW_SWEEPS}
    assert len(points) >= 6 and all(points.values()) and sum(points.values()) >= 40


def test_stated_and_computed_speedups_agree_to_the_threads_rounding():
    # vLLM PR #16937 prints speedups to two decimals, truncated: 201.69 / 133 = 1.5165 is "1.51x"
    for p in published.load("vllm_pr16937")["h100_bs1_eagle1"].points:
        assert 0 <= p["speedup"] - p["speedup_stated"] < 0.01


# ---- the batch and MoE points added for issues 34 (part 4) and 35 (part 3), each against its source's own words

BATCH_SOURCES = ["angelslim_issue163", "specforge_issue339", "lmsys_mtp_2025", "vllm_blog_gb300_2026",
                 "habana_vllm_fork_pr1264", "specbundle_2025", "trtllm_blog7_ngram", "vllm_pr24243"]
# the names the MoE presets carry in cost.PRESETS (issue 35): an MoE target is recorded under one of them
MOE_PRESETS = {"Mixtral-8x7B", "Qwen3-30B-A3B", "Qwen3-235B-A22B", "gpt-oss-20b", "gpt-oss-120b", "DeepSeek-V3",
               "Llama-4-Scout", "Qwen2-57B-A14B"}


def _load_at_batch(p):
    return p.get("batch", p.get("concurrency"))


@pytest.mark.parametrize("name", BATCH_SOURCES)
def test_batch_sources_compute_speedups_from_their_copied_numbers(name):
    for s in published.load(name).series:
        for p in s.points:
            assert ("batch" in p) != ("concurrency" in p), s.id
            if "throughput_sd" in p:
                assert p["speedup"] == pytest.approx(p["throughput_sd"] / p["throughput_plain"], abs=6e-4), s.id
            if "time_plain_s" in p:
                assert p["speedup"] == pytest.approx(p["time_plain_s"] / p["time_sd_s"], abs=6e-4), s.id
        if s.setup.get("moe"):
            assert s.setup["target"] in MOE_PRESETS, s.id
        else:
            assert s.setup["target"] not in MOE_PRESETS, s.id


def test_the_batch_sources_add_at_least_forty_points_above_batch_one():
    above = {n: sum(_load_at_batch(p) > 1 for s in published.load(n).series for p in s.points) for n in BATCH_SOURCES}
    assert all(above.values()) and sum(above.values()) >= 40
    # and twenty of them from sources that name their GPU (all but SpecBundle)
    assert sum(v for n, v in above.items() if n != "specbundle_2025") >= 20


def test_angelslim_table_speedups_dip_then_rise_with_batch():
    s = published.load("angelslim_issue163")["h100x4_tp4_eagle3_tree"]
    tree = {p["batch"]: p for p in s.points if (p["num_steps"], p["topk"], p["num_draft_tokens"]) == (4, 4, 16)}
    assert sorted(tree) == [1, 4, 8, 32, 64]
    # the issue reports a slowdown up to batch 32 and a gain at 64 (1307.95 vs 1237.84 tok/s)
    assert all(tree[b]["speedup"] < 1 for b in (1, 4, 8, 32)) and tree[64]["speedup"] > 1
    assert all(2.5 < p["mean_acceptance_length"] < 2.6 for p in tree.values())


def test_specforge339_every_eagle3_shape_is_a_slowdown():
    # the title: "Throughput degradation on Qwen3-30B-A3B with EAGLE3"
    s = published.load("specforge_issue339")["h100x2_tp2_eagle3"]
    assert all(p["speedup"] < 1 for p in s.points) and {p["batch"] for p in s.points} == {1, 4}


def test_lmsys_mtp_speedups_agree_with_the_printed_percentages():
    src = published.load("lmsys_mtp_2025")
    case1 = src["case1_16xh200_2_per_rank"]
    # the table prints 81.5 (+59.8%) and 82.0 (+60.8%) against 51.0
    assert [round((p["speedup"] - 1) * 100, 1) for p in case1.points] == [59.8, 60.8]
    assert src["case2_128xh200_128_per_rank"].points[0]["speedup"] == 1.142  # "+14.2%"


def test_gb300_mtp_wins_only_in_the_middle_of_the_sweep():
    # "higher throughput than disabling MTP ... within a certain concurrency range (<=256) ... throughput drops
    # sharply when MTP is enabled under high concurrency"; the prefill-heavy workload loses at 64 and 128
    s = published.load("vllm_blog_gb300_2026")["gb300x2_tp2_nvfp4_mtp1_isl2k_osl64"]
    wins = {p["concurrency"]: p["speedup"] > 1 for p in s.points}
    assert wins == {64: False, 128: False, 192: True, 256: True, 320: False, 384: False}
    assert all(p["tpot_sd_ms"] > p["tpot_plain_ms"] for p in s.points)
    assert s.setup["weight_format"] == "nvfp4" and s.weight_bytes() == 0.5 and s.setup["accelerator"] == "GB300"


def test_habana_stated_speedups_fall_with_batch():
    s = published.load("habana_vllm_fork_pr1264")["gaudi_deepseek_r1_mtp"]
    assert [(p["batch"], p["speedup"]) for p in s.points] == [(4, 1.6), (32, 1.5), (128, 1.35)]
    assert s.uncertainty == 0.05  # rounded as printed


def test_specbundle_points_are_all_at_batch_eight_with_their_targets():
    src = published.load("specbundle_2025")
    assert {p["batch"] for s in src.series for p in s.points} == {8}
    targets = {s.setup["target"] for s in src.series}
    assert targets == {"Llama-3.1-70B", "Qwen3-30B-A3B", "Qwen3-235B-A22B", "Llama-4-Scout"}
    for s in src.series:
        assert len(s.points) == 35 and s.setup["accelerator"] is None  # 7 benchmarks x 5 shapes; no GPU published
        assert {p["dataset_index"] for p in s.points} == set(range(7))


def test_trtllm_ngram_speedups_are_the_stated_percentages():
    s = published.load("trtllm_blog7_ngram")["b200x8_tp8_scout_fp8_ngram_turn2"]
    # "96.13% of speed-up with single batch and 63.99% ... with batch size 4 ... batch size 32 ... 33.06%"
    assert [(p["batch"], p["speedup_pct"]) for p in s.points] == [(1, 96.13), (4, 63.99), (32, 33.06)]
    assert [p["speedup"] for p in s.points] == sorted((p["speedup"] for p in s.points), reverse=True)


def test_minicpm3_speedups_round_to_the_printed_ones():
    s = published.load("vllm_pr24243")["rtx4090_minicpm3_eagle3"]
    printed = {1: 1.71, 10: 1.62}
    for p in s.points:
        assert round(p["speedup"], 2) == printed[p["concurrency"]]
        assert p["drafted_tokens"] == s.setup["k"] * p["draft_proposals"]
        assert round(1 + p["accepted_tokens"] / p["draft_proposals"], 2) == p["mean_acceptance_length"]


# ---- dense targets at B > 1 added for issue 34 (part 4, second round), each against its source's own words

DENSE_SOURCES = ["speculators_qwen38_27b_b200", "vllm_pr4978_medusa"]


@pytest.mark.parametrize("name", DENSE_SOURCES)
def test_dense_sources_compute_speedups_from_their_copied_throughputs(name):
    for s in published.load(name).series:
        assert not s.setup.get("moe"), s.id
        assert s.setup["target"] not in MOE_PRESETS, s.id
        for p in s.points:
            assert "concurrency" in p and "batch" not in p, s.id  # closed-loop streams, not a fixed batch
            assert p["speedup"] == pytest.approx(p["throughput_sd"] / p["throughput_plain"], abs=6e-4), s.id


def test_dense_sources_add_at_least_forty_points_above_one_request():
    above = {n: sum(p["concurrency"] > 1 for s in published.load(n).series for p in s.points) for n in DENSE_SOURCES}
    assert above == {"speculators_qwen38_27b_b200": 28, "vllm_pr4978_medusa": 24} and sum(above.values()) >= 40
    # the Speculators sweeps name their GPU (a B200 row); the Medusa PR's "H100 card" has no form factor
    assert {s.setup["accelerator"] for s in published.load("speculators_qwen38_27b_b200").series} == {"B200"}
    assert {s.setup["accelerator"] for s in published.load("vllm_pr4978_medusa").series} == {None}


def test_speculators_gains_are_the_tutorials_printed_ones():
    src = published.load("speculators_qwen38_27b_b200")
    # the tutorial's "throughput gain" columns, N = 1 ... 128
    printed = {"b200_dspark_k7_humaneval": [2.70, 2.65, 2.63, 2.42, 2.08, 1.59, 1.10, 0.74],
               "b200_dspark_k7_math_reasoning": [3.64, 3.44, 3.28, 3.01, 2.61, 1.99, 1.36, 0.95]}
    for sid, gains in printed.items():
        s = src[sid]
        assert s.column("concurrency") == [1, 2, 4, 8, 16, 32, 64, 128]
        assert s.column("speedup") == pytest.approx(gains, abs=0.006)
    # "(3.36 to 3.45 on HumanEval, 4.49 to 4.67 on math_reasoning)"
    ranges = {"b200_dspark_k7_humaneval": (3.36, 3.45), "b200_dspark_k7_math_reasoning": (4.49, 4.67)}
    for sid, (lo, hi) in ranges.items():
        al = src[sid].column("mean_acceptance_length")
        assert min(al) == pytest.approx(lo, abs=0.005) and max(al) == pytest.approx(hi, abs=0.005)
    for s in src.series:
        al = s.column("mean_acceptance_length")
        # "Acceptance length is flat across the sweep": the GPU runs out of compute, not the drafter
        assert max(al) - min(al) < 0.2 and max(al) < s.setup["k"] + 1, s.id
        for p in s.points:
            accepted = 1 + p["num_accepted_tokens"] / p["num_drafts"]
            assert p["mean_acceptance_length"] == pytest.approx(accepted, abs=1e-4)
        # every sweep's gain shrinks from one request in flight to 128
        assert s.column("speedup")[0] > s.column("speedup")[-1], s.id
    # at 128 in flight DSpark (k = 7) loses on both subsets while MTP (k = 2) still gains
    last = {s.id: s.points[-1]["speedup"] for s in src.series}
    assert last["b200_dspark_k7_humaneval"] < 1 and last["b200_dspark_k7_math_reasoning"] < 1
    assert last["b200_mtp_k2_humaneval"] > 1 and last["b200_mtp_k2_math_reasoning"] > 1


def test_medusa_gains_only_at_small_concurrency():
    # "So for smaller batch sizes, we see improvement in tokens generated per sec."
    for s in published.load("vllm_pr4978_medusa").series:
        by_c = {p["concurrency"]: p["speedup"] for p in s.points}
        assert sorted(by_c) == [1, 2, 4, 8, 16, 32, 64], s.id
        assert all(by_c[c] > 1 for c in (1, 2, 4, 8)) and all(by_c[c] < 1 for c in (32, 64)), s.id
