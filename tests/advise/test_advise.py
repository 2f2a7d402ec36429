"""python -m specnotes.advise: its numbers are the book's functions', its errors name the flag."""

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specnotes import advise, validate
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B
from specnotes.record import calibrate

H100 = "H100-SXM"
DONE_WHEN = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--batch", "1-512",
             "--context", "2048", "--alpha", "0.7"]
BW, PEAK = 3.35e12, 989e12  # H100 SXM datasheet


def cli(*args):
    return subprocess.run([sys.executable, "-m", "specnotes.advise", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def done_when_json():
    out = cli(*DONE_WHEN, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def done_when_text():
    out = cli(*DONE_WHEN)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def done_when_calibrated():
    return advise.run(DONE_WHEN + ["--calibration", "specdecode_bench"])


def _pooled():
    from specnotes.record import calibrate

    return calibrate.stored()["pooled"]["knobs"]


def _stored_band(variant=None, kind="batch"):
    from specnotes.record import calibrate

    stored = calibrate.stored()
    return calibrate.Band.from_json(stored["cross_validation"]["bands"][variant or stored["model"]["variant"]][kind])


def test_done_when_json_equals_the_books_functions(done_when_json):
    # no --engine: the knobs pooled over every engine of the published record, said in the note and listed as an
    # extrapolation (they are no engine's own); the numbers are cost's with those knobs
    r = done_when_json
    args = (LLAMA_3_8B, LLAMA_3_2_1B, H100)
    knobs = _pooled()
    assert r["schema"] == "specnotes.advise/3"
    assert r["deployment"]["calibration"] == "pooled"
    assert r["deployment"]["calibration_note"].startswith("auto: the engine is not given (`--engine`)")
    assert r["deployment"]["extrapolations"][0] == "the engine: the pooled knobs are no engine's own"
    assert r["deployment"]["k"] == 4 and r["deployment"]["k_from"] == "k = 4: the default (--k not given)"
    assert r["warnings"] == []
    assert r["max_batch"] == cost.max_batch(*args, 2048, k=4)
    assert r["paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048, **knobs)]
    assert r["idealized_paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048)]
    assert r["deployment"]["expected_tokens"] == cost.expected_tokens(0.7, 4)
    band = _stored_band()
    batches = [row["batch"] for row in r["rows"]]
    assert {1, 2, 4, 8, 16, 32, 64, 128} <= set(batches) and r["max_batch"] in batches
    for row in r["rows"]:
        b = row["batch"]
        assert row["model_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048, **knobs)
        assert row["idealized_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048)
        low, centre, high = band.factors(math.log2(b))
        assert row["speedup"] == pytest.approx(row["model_speedup"] * centre, rel=1e-12)
        assert row["band"] == pytest.approx([row["model_speedup"] * low, row["model_speedup"] * high], rel=1e-12)
        assert row["band"][0] <= row["speedup"] <= row["band"][1]  # never outside its own band
        assert row["best_k"] == cost.best_k(*args, b, 0.7, 2048, **knobs)
        assert row["iteration_ms"] == pytest.approx(1e3 * cost.iteration_time(*args, b, 4, 2048, **knobs), rel=1e-12)
        assert row["plain_ms"] == pytest.approx(1e3 * cost.pass_time(LLAMA_3_8B, H100, b, 1, 2048, **knobs),
                                                rel=1e-12)
        assert row["fits"] == (b <= r["max_batch"])
    for b, s, *factors in r["curve"]:
        assert s == cost.batch_speedup(*args, b, 4, 0.7, 2048, **knobs)
        assert factors == pytest.approx(list(band.factors(math.log2(b))))
    assert r["curve"][-1][0] == r["max_batch"]  # the curve stops at the memory limit


def test_done_when_with_the_calibration_named_equals_the_books_functions(done_when_calibrated):
    # named, the calibration applies whatever the setup, with a warning naming what it was not fitted on
    r = done_when_calibrated
    args = (LLAMA_3_8B, LLAMA_3_2_1B, H100)
    knobs = calibrate.calibration(H100, "specdecode_bench")
    assert r["deployment"]["calibration"] == "specdecode_bench"
    assert r["deployment"]["engine_knobs"] == advise.engine_knobs(knobs)
    assert r["warnings"][0].startswith("`--calibration specdecode_bench` (vLLM 0.10.1 on H100-SXM) applied past what "
                                       "it was fitted on")
    assert "drafter 'model': it was fitted on eagle, eagle3" in r["warnings"][0]
    assert r["warnings"][0] in advise.render(r)
    assert r["paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048, **knobs)]
    for row in r["rows"]:
        b = row["batch"]
        assert row["model_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048, **knobs)
        assert row["idealized_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048)


def test_done_when_numbers_by_hand(done_when_json, done_when_calibrated):
    # memory: 80 GB − weights (8B untied: P + embedding; 1B tied: P) over (128 KiB + 32 KiB)·(L + k + 1) a sequence
    weights = 2 * (LLAMA_3_8B.params + 4096 * 128256) + 2 * LLAMA_3_2_1B.params
    assert done_when_json["weights_per_gpu_GB"] == weights / 1e9
    assert done_when_json["max_batch"] == math.floor((80e9 - weights) / ((131072 + 32768) * (2048 + 5)))
    # B = 1, idealized: every kernel memory-bound, so each pass is its bytes over the bandwidth
    kv_t, kv_d, L = 131072, 32768, 2048
    decode = 2 * LLAMA_3_8B.params + kv_t * (L + 1)
    drafts = [2 * LLAMA_3_2_1B.params + kv_d * (L + i + 1) for i in range(4)]
    verify = 2 * LLAMA_3_8B.params + kv_t * (L + 5)
    en = 1 + 0.7 + 0.7**2 + 0.7**3 + 0.7**4
    first = done_when_json["rows"][0]
    assert first["idealized_speedup"] == pytest.approx(en * decode / (sum(drafts) + verify), rel=1e-9)
    # calibrated (overlap "none": memory time + compute time, plus t_layer per decoder layer of every pass and
    # t_draft per draft pass); attention FLOPs 4·d_head·n_heads·n_layers per (query, key) pair
    knobs = calibrate.calibration(H100, "specdecode_bench")
    tl, td, lat = knobs["layer_overhead"], knobs["draft_overhead"], knobs["overhead"]
    g_t, g_d = 4 * 128 * 32 * 32, 4 * 64 * 32 * 16
    flops_decode = 2 * LLAMA_3_8B.params + g_t * (L + 1)
    flops_verify = 2 * LLAMA_3_8B.params * 5 + g_t * (5 * L + 15)
    flops_drafts = [2 * LLAMA_3_2_1B.params + g_d * (L + i + 1) for i in range(4)]
    t = lambda nbytes, flops: nbytes / BW + flops / PEAK
    plain = t(decode, flops_decode) + 32 * tl + lat
    iteration = (sum(t(b, f) + td + 16 * tl for b, f in zip(drafts, flops_drafts, strict=True))
                 + t(verify, flops_verify) + 32 * tl + lat)
    assert done_when_calibrated["rows"][0]["model_speedup"] == pytest.approx(en * plain / iteration, rel=1e-9)
    assert first["roofs"] == {p: {"matmul": "memory", "attention": "memory"} for p in ("decode", "verify", "draft")}
    # B = 64: the verify matmuls have 64·5 = 320 tokens per weight read > ridge 295: compute-bound; decode not
    row64 = next(r for r in done_when_json["rows"] if r["batch"] == 64)
    assert row64["roofs"]["verify"]["matmul"] == "compute" and row64["roofs"]["decode"]["matmul"] == "memory"
    assert PEAK / BW == pytest.approx(done_when_json["deployment"]["gpu"]["ridge_FLOP_per_byte"])


def _cells(text, header_start="| B "):
    lines = text.splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith(header_start)).strip("|").split("|")]
    return header, lambda b: dict(zip(header, [c.strip() for c in next(x for x in lines if x.startswith(f"| {b} "))
                                               .strip("|").split("|")], strict=True))


def test_done_when_text_report_shows_the_same_numbers(done_when_text, done_when_json):
    r = done_when_json
    assert done_when_text.rstrip("\n") == advise.wrap(advise.render(r))  # the CLI prints the page's report
    assert max(len(line) for line in done_when_text.splitlines()) <= 100  # a 100-column terminal
    text = advise.render(r)
    assert text.splitlines()[2].startswith(f"**{r['verdict_line']}**")  # the verdict first, then the band
    header, cells_at = _cells(text)
    # key columns only, a phone's width; the model's own S only where the band moved S off it
    assert header == ["B", "verdict", "S", "band"] + (["model"] if advise._model_column(r) else [])
    assert "S (k = 4): the model's S, moved to the band's edge where the band excludes it" in text
    assert "widened to the spread between sources" in text  # the band as calibrate.BAND_BUILD builds it
    for row in r["rows"]:
        cells = cells_at(row["batch"])
        assert cells["S"] == f"{row['speedup']:.2f}" and cells.get("model", cells["S"]) == f"{row['model_speedup']:.2f}"
        assert cells["band"] == f"{row['band'][0]:.2f}–{row['band'][1]:.2f}"
        assert cells["verdict"] == (row["verdict"] + ("*" if row["extrapolated"] else "") if row["fits"] else "—")
    header, detail_at = _cells(text.split("**The model's terms per batch.**")[1])
    assert header == ["B", "best k", "S (best k)", "S idealized", "tokens/s off → on", "roofs d · v · dr"]
    for row in r["rows"]:
        cells = detail_at(row["batch"])
        assert cells["S idealized"] == f"{row['idealized_speedup']:.2f}"
        assert cells["best k"] == (str(row["best_k"]) if row["best_k"] else "0 (off)")
    assert f"at most B = {r['max_batch']} sequences fit" in text
    assert r["recommendation"] in text and r["quote"] in text and r["deployment"]["calibration_note"] in text
    for item, value in r["checklist"]:
        assert f"- **{item}**: {value}." in text
    assert "**Extrapolates past its fit**: the engine: the pooled knobs are no engine's own" in text
    # the idealized model: no S idealized column, its own band
    ideal = advise.run(DONE_WHEN + ["--calibration", "none"])
    header, _ = _cells(advise.render(ideal).split("**The model's terms per batch.**")[1])
    assert header == ["B", "best k", "S (best k)", "tokens/s off → on", "roofs d · v · dr"]
    assert ideal["deployment"]["band"]["variant"] == "idealized" != r["deployment"]["band"]["variant"]


def test_report_matches_direct_calls_with_best_k_tp_and_calibration():
    lookup = {("H100-SXM", "hand-made"): {"overhead": 2e-3, "draft_overhead": 5e-4, "overlap": "none"}}
    calib = lambda accel, name: lookup[(accel, name)]
    r = advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--tp", "4", "--batch",
                    "1-256", "--context", "1024", "--alpha", "0.8", "--k", "best", "--calibration", "hand-made"],
                   calibration_lookup=calib)
    model = {"overhead": 2e-3, "draft_overhead": 5e-4, "overlap": "none", "tp": 4}
    args = (LLAMA_3_70B, LLAMA_3_2_1B, H100)
    assert r["deployment"]["calibration"] == "hand-made" and r["deployment"]["band"] is None  # not cross-validated
    assert r["deployment"]["engine_knobs"]["overhead_ms"] == pytest.approx(2.0)
    for row in r["rows"]:
        k = cost.best_k(*args, row["batch"], 0.8, 1024, **model)
        assert row["k"] == row["best_k"] == k and row["verdict"] is None and row["band"] is None
        assert row["speedup"] == row["model_speedup"] == cost.batch_speedup(*args, row["batch"], k, 0.8, 1024,
                                                                            **model)
    # "best": S > 1 somewhere in k = 1..16 — by a full scan up to the memory limit (k = 16's reservation)
    limit = cost.max_batch(*args, 1024, k=16, tp=4)
    assert r["max_batch"] == limit
    scan = [b for b in range(1, limit + 1, 7)
            if max(cost.batch_speedup(*args, b, k, 0.8, 1024, **model) for k in range(1, 17)) > 1]
    inside = lambda b: any(lo <= b <= hi for lo, hi in r["paying_batches"])
    assert all(inside(b) for b in scan) and not any(inside(b) for b in range(1, limit + 1, 7) if b not in scan)


def test_units_are_in_every_knobs_name():
    # --overhead-ms (alias --overhead) is in ms, --layer-overhead-us in µs; the JSON says which in each key
    r = advise.run(DONE_WHEN + ["--overhead-ms", "1", "--draft-overhead", "0.5", "--layer-overhead-us", "20"])
    knobs = r["deployment"]["engine_knobs"]
    assert knobs["overhead_ms"] == pytest.approx(1) and knobs["draft_overhead_ms"] == pytest.approx(0.5)
    assert knobs["layer_overhead_us"] == pytest.approx(20)
    assert r["rows"][0]["plain_ms"] == pytest.approx(1e3 * cost.pass_time(
        LLAMA_3_8B, H100, 1, 1, 2048, overhead=1e-3, layer_overhead=20e-6, overlap=_pooled()["overlap"],
        allreduce_latency=_pooled()["allreduce_latency"]), rel=1e-12)
    assert r["deployment"]["band"] is None  # knobs by hand: no cross-validated error
    assert r["verdict_line"].startswith("No verdict: the engine knobs were set by hand")
    gpu_ = r["deployment"]["gpu"]
    assert set(gpu_) == {"name", "bandwidth_GB_per_s", "peak_TFLOP_per_s", "memory_GB", "ridge_FLOP_per_byte",
                         "source"}
    assert gpu_["bandwidth_GB_per_s"] == 3350 and gpu_["peak_TFLOP_per_s"] == 989 and gpu_["memory_GB"] == 80
    assert "--overhead-ms" in advise.parser().format_help() and "ms added to every target pass" in \
        advise.parser().format_help()


def test_calibrations_auto_none_pooled_named_and_listed(capsys):
    assert advise.main(["--calibration", "list"]) == 0
    listed = capsys.readouterr().out
    assert "H100-SXM" in listed and "vllm-0.10.1" in listed and "sglang-0.5.9" in listed and "pooled" in listed
    assert advise.main(["--calibration", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["calibrations"]
    vllm = next(c for c in listed if c["gpu"] == H100 and c["name"] == "vllm-0.10.1")
    assert vllm["engine"] == "vLLM" and vllm["version"] == "0.10.1" and vllm["knobs"] == calibrate.calibration(H100,
                                                                                                       "vllm-0.10.1")
    assert vllm["fitted_to"]["batch"] == [1, 128] and "eagle3-head" in vllm["fitted_to"]["drafters"]
    none = advise.run(DONE_WHEN + ["--calibration", "none"])
    assert none["deployment"]["calibration"] is None and none["deployment"]["engine_knobs"]["layer_overhead_us"] == 0
    pooled = advise.run(DONE_WHEN + ["--calibration", "pooled"])
    assert pooled["rows"] == advise.run(DONE_WHEN)["rows"]  # auto without --engine: the pooled knobs
    b_star = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                         "--context", "0", "--calibration", "none"])
    assert b_star["crossover_batch"] == 160 and "crossover B* = 160" in advise.render(b_star)  # Chapter 4's B*
    with pytest.raises(SystemExit) as exit_:
        advise.main(DONE_WHEN + ["--calibration", "specdecode-bench"])
    assert exit_.value.code == 2
    assert "--calibration 'specdecode-bench' is not stored for H100-SXM (it has " in capsys.readouterr().err


def test_an_sglang_deployment_never_gets_a_vllm_calibration_silently():
    base = ["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "700", "--alpha", "0.6",
            "--k", "3", "--batch", "1-128"]
    vllm = advise.run(base + ["--engine", "vllm", "--engine-version", "0.10.1"])
    assert vllm["deployment"]["calibration"] == "vllm-0.10.1"
    assert vllm["deployment"]["calibration_note"] == ("auto: fitted to vLLM 0.10.1 on H100-SXM; this setup is inside "
                                                      "what it was fitted on")
    assert vllm["deployment"]["extrapolations"] == []
    head = cost.eagle3_head(cost.LLAMA_3_1_8B)
    assert vllm["rows"][0]["model_speedup"] == cost.batch_speedup(cost.LLAMA_3_1_8B, head, H100, 1, 3, 0.6, 700,
                                                                  **calibrate.calibration(H100, "vllm-0.10.1"))
    sglang = advise.run(base + ["--engine", "sglang", "--engine-version", "0.5.9"])
    assert sglang["deployment"]["calibration"] == "sglang-0.5.9"
    assert sglang["rows"][0]["model_speedup"] != vllm["rows"][0]["model_speedup"]
    other = advise.run(base + ["--engine", "SGLang", "--engine-version", "0.5.3.post3"])
    assert other["deployment"]["calibration"] == "sglang-0.5.9" and "vllm" not in other["deployment"]["calibration"]
    assert other["deployment"]["extrapolations"][0] == ("the engine: fitted to SGLang 0.5.9 on H100-SXM, not to "
                                                        "SGLang 0.5.3.post3")
    # SGLang on a GPU where the record has no SGLang: its knobs from other GPUs, said so; never vLLM's
    l40s = advise.run(base[:4] + ["--gpu", "L40S"] + base[6:] + ["--engine", "sglang"])
    assert l40s["deployment"]["calibration"] == "sglang (fitted on other GPUs)"
    assert "SGLang was fitted on H100-SXM" in l40s["deployment"]["calibration_note"]
    assert "(from" not in l40s["deployment"]["calibration_note"]  # where the knobs come from is a note (issue 39)
    assert l40s["deployment"]["provenance"].startswith("The knobs come from these sources of the published record: ")
    # no engine at all: the pooled knobs, and the note says the engine is missing
    anon = advise.run(base)
    assert anon["deployment"]["calibration"] == "pooled" and "not given" in anon["deployment"]["calibration_note"]
    # an engine the record never saw: pooled, said so
    trt = advise.run(base + ["--engine", "tensorrt-llm"])
    assert trt["deployment"]["calibration"] == "pooled" and "has no tensorrt-llm" in trt["deployment"][
        "calibration_note"]
    # fp8 or 4-bit weights: never "inside what it was fitted on"
    for extra, says in ((["--dtype", "fp8"], "8-bit weights"), (["--weight-bits", "4"], "4-bit weights")):
        q = advise.run(base + ["--engine", "vllm", "--engine-version", "0.10.1"] + extra)
        assert any(line.startswith(says) for line in q["deployment"]["extrapolations"]), extra
        assert "inside what it was fitted on" not in q["deployment"]["calibration_note"]
    # and named explicitly for another engine, the warning says so
    forced = advise.run(base + ["--engine", "sglang", "--calibration", "vllm-0.10.1"])
    assert forced["warnings"] and "the engine: `--calibration vllm-0.10.1` is vLLM 0.10.1 on H100-SXM, asked for " \
        "sglang" in forced["warnings"][0]


def test_extrapolations_name_the_batches_past_the_fit():
    r = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "700", "--alpha",
                    "0.6", "--k", "3", "--batch", "1-512", "--engine", "vllm", "--engine-version", "0.10.1"])
    assert r["deployment"]["extrapolations"] == ["batches above B = 128: it was fitted on B = 1–128"]
    assert "Past B = 128 this extrapolates" in r["recommendation"]
    # #27.17: asked only about B = 1-128, the paying range still runs past the fit: the advice says so
    inside = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "700",
                         "--alpha", "0.6", "--k", "3", "--batch", "1-128", "--engine", "vllm", "--engine-version",
                         "0.10.1"])
    assert inside["deployment"]["extrapolations"] == [] and inside["deployment"]["fitted_batch_max"] == 128
    assert inside["paying_batches"][-1][1] > 128
    # asked only about B = 1-128, the fitted range: nothing asked extrapolates, and the advice does not say it does
    assert "extrapolates" not in inside["recommendation"]
    edge = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "700",
                       "--alpha", "0.6", "--k", "3", "--batch", "1-129", "--engine", "vllm", "--engine-version",
                       "0.10.1"])
    assert "Past B = 128 this extrapolates" in edge["recommendation"]


def test_a_custom_gpu_says_why_it_has_no_calibration():
    # the bug: "calibration 'specdecode_bench' does not exist for None"
    argv = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--bandwidth", "3350", "--peak", "989", "--alpha",
            "0.7", "--context", "0", "--calibration", "specdecode_bench"]
    with pytest.raises(validate.BadArgument) as err:
        advise.run(argv)
    assert "None" not in str(err.value)
    assert ("--calibration 'specdecode_bench': a calibration belongs to a GPU of the table, and this one is given by "
            "--bandwidth/--peak; use --gpu, or --calibration auto, pooled or none") == str(err.value)
    # the same with a calibration lookup passed in (the path that said "does not exist for None")
    with pytest.raises(validate.BadArgument) as err:
        advise.run(argv, calibration_lookup=lambda a, n: {}["x"])
    assert "None" not in str(err.value) and "a calibration belongs to a GPU of the table" in str(err.value)
    auto = advise.run(argv[:-2])
    assert auto["deployment"]["calibration"] == "pooled"
    assert "auto: the GPU is not in the table" in auto["deployment"]["calibration_note"]
    assert any(x.startswith("a GPU not in the table") for x in auto["deployment"]["extrapolations"])


def test_best_k_mode_turns_speculation_off_where_no_k_pays():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.6",
                    "--k", "best", "--batch", "1-4096", "--calibration", "none", "--context", "0"])
    args = (LLAMA_3_8B, LLAMA_3_2_1B, H100)
    off = [row for row in r["rows"] if row["best_k"] == 0]
    assert off and all(row["best_speedup"] == 1.0 and row["c"] > 0 for row in off)
    for row in r["rows"]:  # S, its band and verdict: the best k that speculates (what turning it on gives)
        speculating = [cost.batch_speedup(*args, row["batch"], k, 0.6) for k in range(1, 17)]
        assert row["k"] == 1 + int(np.argmax(speculating)) and row["model_speedup"] == max(speculating)
    assert all(row["verdict"] == "loses" for row in off if row["band"][1] < 1)
    cells = [[c.strip() for c in line.strip("|").split("|")]
             for line in advise.render(r).split("**The model's terms per batch.**")[1].splitlines()
             if line.startswith(f"| {off[0]['batch']} ")]
    assert cells[0][1:3] == ["0 (off)", "1.00"]  # columns B, best k, S (best k)
    assert min(row["batch"] for row in off) > r["paying_batches"][-1][1]


def test_tp_splits_the_heads_evenly_or_replicates_kv_heads():
    assert advise.tp_choices(LLAMA_3_8B) == [1, 2, 4, 8, 16, 32]  # 32 query heads, 8 KV heads
    assert advise.tp_choices(LLAMA_3_70B) == [1, 2, 4, 8, 16, 32, 64]
    assert advise.tp_choices(cost.ModelShape(2, 768, 12, 12, 3072, 1000)) == [1, 2, 3, 4, 6, 12]
    # 70B alone (n-gram lookup) takes tp = 64; with the 1B draft (32 query heads) on the same GPUs, 32 at most
    ngram = ["--target", "Llama-3-70B", "--drafter", "ngram", "--gpu", H100, "--alpha", "0.6", "--tp", "64",
             "--context", "0"]
    r = advise.run(ngram)
    # tp = 64 > 8 KV heads: each GPU keeps one KV head (replicated), as cost.max_batch prices it
    assert r["max_batch"] == cost.max_batch(LLAMA_3_70B, cost.NGRAM, H100, 0, k=4, tp=64)
    with pytest.raises(validate.BadArgument, match=r"--tp must be one of 1, 2, 4, 8, 16, 32 here \(Llama-3-70B: 64 "
                       r"query heads, 8 KV heads; Llama-3.2-1B: 32 query heads, 8 KV heads\)"):
        advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.6",
                    "--tp", "64", "--context", "0"])


def test_run_raises_instead_of_exiting():
    with pytest.raises(validate.BadArgument, match="unrecognized arguments: 1.75"):
        advise.run(DONE_WHEN + ["1.75"])


def test_unknown_calibration_is_named():
    with pytest.raises(validate.BadArgument, match="--calibration 'nope' does not exist for H100-SXM"):
        advise.run(DONE_WHEN + ["--calibration", "nope"], calibration_lookup=lambda a, n: {}["x"])


def test_drafter_kinds_map_to_the_cost_models():
    base = ["--target", "Llama-3-8B", "--gpu", H100, "--batch", "8", "--alpha", "0.6", "--calibration", "none",
            "--context", "0"]
    eagle = advise.from_args(advise.parser().parse_args(base + ["--drafter", "eagle"]))
    head = eagle.draft  # EAGLE-1: fc from 2·d, one layer of the target's width, the target's full LM head
    assert isinstance(head, cost.EagleHead) and (head.fc_inputs, head.wide_qkv) == (2, False)
    assert (head.layer.n_layers, head.layer.d_model, head.layer.n_kv_heads, head.layer.d_ff, head.layer.vocab) == (
        1, 4096, 8, 14336, 128256)
    assert head.params == 2 * 4096 * 4096 + LLAMA_3_8B.layer_params + 4096 * 128256
    # EAGLE-3: fc from the three fused features, QKV over [embedding; feature], a 32k draft LM head
    e3 = advise.from_args(advise.parser().parse_args(base + ["--drafter", "eagle3"])).draft
    assert (e3.fc_inputs, e3.wide_qkv, e3.layer.vocab) == (3, True, 32000)
    assert e3.params == 3 * 4096 * 4096 + LLAMA_3_8B.layer_params + 4096 * (32 + 16) * 128 + 4096 * 32000
    small = advise.from_args(advise.parser().parse_args(base + ["--drafter", "eagle3", "--draft-vocab", "16000"]))
    assert small.draft.layer.vocab == 16000 and small.draft.params == e3.params - 4096 * 16000
    r3 = advise.advise(small)
    assert r3["rows"][0]["model_speedup"] == cost.batch_speedup(LLAMA_3_8B, small.draft, H100, 8, 4, 0.6)
    with pytest.raises(validate.BadArgument, match="--draft-vocab goes with drafter 'eagle3'"):
        advise.run(base + ["--drafter", "eagle", "--draft-vocab", "16000"])
    early = advise.from_args(advise.parser().parse_args(base + ["--drafter", "early-exit", "--exit-layer", "8"]))
    assert early.draft == cost.EarlyExit(8)
    r = advise.advise(early)
    assert r["rows"][0]["model_speedup"] == cost.batch_speedup(LLAMA_3_8B, cost.EarlyExit(8), H100, 8, 4, 0.6)
    ngram = advise.run(base + ["--drafter", "ngram", "--draft-overhead-ms", "0.05"])
    assert ngram["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, cost.NGRAM, H100, 8, 4, 0.6,
                                                             draft_overhead=5e-5)  # knobs by hand: no band
    assert ngram["rows"][0]["roofs"]["draft"] == {}
    assert ngram["max_batch"] == cost.max_batch(LLAMA_3_8B, cost.NGRAM, H100, 0, k=4)


def test_mean_accepted_length_is_converted_at_the_k_it_was_measured_at():
    # the bug: --mean-accepted without --k was silently converted at the default k = 4
    base = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "0", "--mean-accepted",
            "2.28"]
    with pytest.raises(validate.BadArgument, match="--mean-accepted needs the k it was measured at: give --k K"):
        advise.run(base)
    r = advise.run(base + ["--k", "3"])
    assert cost.expected_tokens(r["deployment"]["alpha"], 3) == pytest.approx(2.28, rel=1e-12)
    assert r["deployment"]["alpha_from"].endswith("at k = 3, by the inverse of E[N]")
    at = advise.run(base[:-1] + ["2.28@3"])  # a mean measured at k = 3 runs at k = 3 unless --k says otherwise
    assert at["deployment"]["alpha"] == r["deployment"]["alpha"] and at["deployment"]["k"] == 3
    assert at["deployment"]["k_from"] == "the k --mean-accepted M@K was measured at"
    assert "**k**: 3 (the k --mean-accepted M@K was measured at)" in advise.render(at)
    other = advise.run(base[:-1] + ["2.28@3", "--k", "5"])  # --k says otherwise: α from k = 3, run at k = 5
    assert other["deployment"]["alpha"] == r["deployment"]["alpha"] and other["deployment"]["k"] == 5
    best = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--k", "best",
                       "--mean-accepted", "3@2", "--context", "0"])
    assert best["deployment"]["alpha"] == pytest.approx(1.0, abs=1e-12)  # 3 tokens at k = 2: every draft accepted


@pytest.mark.parametrize("mean,k,alpha", [
    (1.5, 1, 0.5),  # k = 1: E[N] = 1 + α
    (1.75, 2, 0.5),  # k = 2: 1 + α + α²
    (1.0, 4, 0.0), (5.0, 4, 1.0),
    (1 + 0.9 + 0.81 + 0.729, 3, 0.9),
])
def test_implied_alpha_by_hand(mean, k, alpha):
    assert cost.implied_alpha(mean, k) == pytest.approx(alpha, abs=1e-12)


def test_implied_alpha_rejects_impossible_lengths():
    with pytest.raises(ValueError, match=r"tokens_per_iteration must be a number in \[1, 5\]"):
        cost.implied_alpha(5.5, 4)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        cost.implied_alpha(1.0, 0)


def test_shapes_from_hugging_face_config_and_text(tmp_path):
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
              "_name_or_path": "meta-llama/Meta-Llama-3-8B"}  # the published config.json's values
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    shape = advise.shape_from_config(path)
    assert shape.params == LLAMA_3_8B.params and shape.memory_bytes == LLAMA_3_8B.memory_bytes
    assert shape.name == "Meta-Llama-3-8B"
    assert advise.shape_from_text("32,4096,32,8,14336,128256").params == LLAMA_3_8B.params
    by_shape = advise.run(["--target-shape", "32,4096,32,8,14336,128256", "--draft-shape", "16,2048,32,8,8192,128256",
                           "--gpu", H100, "--alpha", "0.7", "--calibration", "none", "--context", "0"])
    assert by_shape["rows"][0]["model_speedup"] == cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, 0.7)
    with pytest.raises(ValueError, match="--target-shape: shape must be six positive integers"):
        advise.run(["--target-shape", "32,4096", "--drafter", "ngram", "--gpu", H100, "--alpha", "0.7",
                    "--context", "0"])
    r = advise.run(["--target", str(path), "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7",
                    "--calibration", "none", "--context", "0"])
    assert r["rows"][0]["model_speedup"] == cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, 0.7)
    (tmp_path / "moe.json").write_text(json.dumps({**config, "num_local_experts": 8}))
    with pytest.raises(ValueError, match="how many experts does a token use"):
        advise.shape_from_config(tmp_path / "moe.json")
    (tmp_path / "moe.json").write_text(json.dumps({**config, "num_local_experts": 8, "num_experts_per_tok": 2}))
    assert advise.shape_from_config(tmp_path / "moe.json").active_params < advise.shape_from_config(path).params * 2
    # a head size of its own (Qwen3-32B: 64 heads of 128 on a 5120-wide stream) is kept, not refused
    qwen = {"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936, "tie_word_embeddings": False,
            "_name_or_path": "Qwen/Qwen3-32B"}  # the published config.json's values
    (tmp_path / "qwen.json").write_text(json.dumps(qwen))
    q = advise.shape_from_config(tmp_path / "qwen.json")
    assert q.d_head == 128 and q.params == cost.QWEN3_32B.params and q.name == "Qwen3-32B"


def test_a_gpu_not_in_the_table():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--bandwidth", "3350", "--peak", "989",
                    "--memory", "80", "--alpha", "0.8", "--batch", "1-64", "--context", "0"])
    same = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                       "--batch", "1-64", "--calibration", "pooled", "--context", "0"])
    assert [x["speedup"] for x in r["rows"]] == [x["speedup"] for x in same["rows"]]
    assert r["max_batch"] == same["max_batch"] and r["deployment"]["gpu"]["name"] == "custom GPU"
    nomem = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--bandwidth", "3350", "--peak", "989",
                        "--alpha", "0.8", "--context", "0"])
    assert nomem["max_batch"] is None and nomem["limit"] == advise.NO_MEMORY_LIMIT


@pytest.mark.parametrize("argv,says", [
    (["--alpha", "1.5"], "argument --alpha: must be a number in [0.0, 1.0], got 1.5"),
    (["--alpha", "high"], "argument --alpha: must be a number in [0, 1] or a range LO-HI such as 0.5-0.8; got 'high'"),
    (["--alpha", "0.8-0.5"], "argument --alpha: range 0.8-0.5 is reversed: give it from low to high, 0.5-0.8"),
    (["--gpu", "X100"], "--gpu 'X100' is not a GPU the table knows: It knows T4, L4,"),
    (["--gpu", "h100"], "--gpu 'h100' is not a GPU the table knows: did you mean H100-SXM or H100-PCIe?"),
    (["--target", "Llama-3-9B"], "--target 'Llama-3-9B' is not a preset the table knows: did you mean Llama-3-8B"),
    (["--batch", "1-1000000000"], "--batch must be an integer in [1, 65536], got 1000000000"),
    (["--batch", "1-1e9"], "--batch must be a positive integer or a range LO-HI such as 1-512; got '1-1e9'"),
    (["--context", "1000000000000"], "argument --context: must be an integer in [0, 10000000], got 1000000000000"),
    (["--plot", "/nonexistent/dir/s.png"], "--plot must be a file in a folder that exists and is writable; "
                                           "'/nonexistent/dir' does not exist"),
    (["--batch", "0-5"], "--batch must be an integer in [1, 65536], got 0"),
    (["--batch", "64-8"], "--batch range 64-8 is reversed: give it from low to high, 8-64"),
    (["--batch", "lots"], "--batch must be a positive integer or a range LO-HI"),
    (["--k", "many"], "--k must be an integer in [1, 64] or 'best'"),
    (["--drafter", "medusa"], "--drafter 'medusa' is not a drafter the table knows: It knows model, early-exit, "
                              "ngram, eagle, eagle3"),
    (["--dtype", "fp8", "--gpu", "A100-80GB"], "--dtype must be one of 'bf16', 'fp16', 'tf32', 'fp32' on A100-80GB"),
    (["--tp", "2", "--gpu", "A10G"], "--tp > 1 needs the GPU's link bandwidth"),
    (["--tp", "0"], "argument --tp: must be an integer >= 1, got 0"),
    (["--tp", "two"], "argument --tp: must be an integer >= 1, got 'two'"),
    (["--tp", "3"], "--tp must be one of 1, 2, 4, 8, 16, 32 here (Llama-3-8B: 32 query heads, 8 KV heads): tp must "
                    "divide the query heads, and divide the KV heads or be a multiple of them"),
    (["--tp", "1000"], "--tp must be one of 1, 2, 4, 8, 16, 32 here"),
    (["--context", "1k"], "argument --context: must be an integer in [0, 10000000], got '1k'"),
    (["--weight-bits", "17"], "argument --weight-bits: must be a number in [1, 16], got 17"),
    (["--memory", "0"], "argument --memory: must be a number > 0, got 0"),
    (["--plot", "/nonexistent/x.png"], "--plot must be a file in a folder that exists and is writable; "
                                       "'/nonexistent' does not exist"),
    (["--plot", "x.xyz"], "--plot must end in one of .eps,"),
    (["--plot", "x"], "--plot must end in one of .eps,"),
    (["--context", "-1"], "argument --context: must be an integer in [0, 10000000], got -1"),
    (["--mean-accepted", "9", "--k", "4"], "--mean-accepted must be in [1, 5]"),
    (["--tree", "1,0,4", "--mean-accepted", "2"], "--tree must be the tokens per sequence at each draft level"),
    (["--tree", "1,4", "--mean-accepted", "2", "--k", "3"], "--k does not apply to a tree"),
    (["--tree", "1,4"], "a tree has no i.i.d. acceptance rate"),
    (["--tree", "1,4", "--mean-accepted", "2", "--verified", "1"], "--verified must be an integer >= 2"),
    (["--verified", "5"], "--verified goes with --tree"),
    (["--overlap", "some"], "--overlap must be one of 'kernel', 'pass', 'none'"),
    (["--overhead", "-1"], "argument --overhead-ms/--overhead: must be a number >= 0, got -1"),
    (["--layer-overhead-us", "-1"], "argument --layer-overhead-us: must be a number >= 0, got -1"),
    (["--target-shape", "32,4096,32,8,14336,128256"], "--target and --target-shape exclude each other"),
])
def test_bad_input_names_the_flag_and_exits_2(argv, says, capsys):
    base = {"--target": "Llama-3-8B", "--draft": "Llama-3.2-1B", "--gpu": H100, "--alpha": "0.7", "--context": "0"}
    if "--mean-accepted" in argv or "--tree" in argv:
        base.pop("--alpha")
    for flag in argv[::2]:
        base.pop(flag, None)
    args = [x for kv in base.items() for x in kv] + argv
    with pytest.raises(SystemExit) as exit_:
        advise.main(args)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert err.startswith("python -m specnotes.advise: error: ") and says in err.splitlines()[0], err  # message first
    assert len(err.splitlines()) == 2 and "--help lists every option" in err  # not the whole usage
    assert out == ""  # nothing computed or printed first (--plot is checked before the report)


@pytest.mark.parametrize("argv,says", [
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7",
      "--context", "0"], "--draft is required with drafter 'model'"),
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7", "--drafter", "early-exit", "--context", "0"],
     "--exit-layer is required with drafter 'early-exit' (1..31)"),
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7", "--drafter", "early-exit", "--exit-layer", "32",
      "--context", "0"],
     "--exit-layer must be an integer in [1, 31], got 32"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--alpha", "0.7",
      "--context", "0"], "--gpu: give a GPU from the table"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "0"],
     "--alpha or --mean-accepted: give the acceptance rate α (--alpha 0.7), a range if you do not know it yet "
     "(--alpha 0.5-0.8: the report spans it), or a mean accepted length at its k (--mean-accepted 2.3@3). Measure α "
     "on your traffic"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--k", "best", "--mean-accepted", "2",
      "--context", "0"],
     "--mean-accepted needs the k it was measured at"),
    (["--target", "GPT-5", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7", "--context", "0"],
     "--target 'GPT-5' is not a preset the table knows: It knows Llama-3-8B, Llama-3-70B, Llama-3.2-1B"),
    (["--target", "Qwen3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7", "--context", "0"],
     "--draft: its vocabulary (128256) must be the target's (151936)"),
    (["--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7", "--context", "0"], "--target is required"),
])
def test_missing_or_inconsistent_input_is_named(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        advise.main(argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8", "--context", "0"],
    ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.0", "--context", "0"],
    ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "8192", "--alpha", "0.8"],
    ["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "720", "--mean-accepted",
     "2.2548", "--k", "3", "--engine", "vllm", "--engine-version", "0.10.1", "--batch", "1-128"],
    # self-speculation with a 512-token draft window at L = 32768 (MagicDec): pays only above a batch
    ["--target", "Llama-3-8B", "--draft", "Llama-3-8B", "--gpu", H100, "--memory", "2000", "--context", "32768",
     "--draft-context", "512", "--k", "3", "--alpha", "0.8", "--batch", "1-256", "--calibration", "none"],
])
def test_recommendation_says_what_the_verdicts_say(argv):
    r = advise.run(argv)
    said, (lo, hi) = r["recommendation"], advise.asked(r)
    v = {name: advise._clip(ranges, lo, hi) for name, ranges in r["verdict_batches"].items()}  # the batches asked
    text = lambda ranges: advise._ranges_text(ranges)
    assert (f"Turn it on for B = {text(v['pays'])}, where the whole band is above 1." in said) == bool(v["pays"])
    assert (f"Leave it off for B = {text(v['loses'])}, where the whole band is below 1." in said) == bool(v["loses"])
    assert (f"For B = {text(v['uncertain'])} the band straddles 1" in said) == bool(v["uncertain"])
    # no range past the batches asked for (issue 34 follow-up: '1-8' asked, '182-65536' advised)
    assert all(a >= lo and b <= hi for a, b in (map(int, m.split("–")) if "–" in m else (int(m),) * 2
                                             for m in re.findall(r"B = ([\d–]+)", said)))
    assert "throughout" not in said  # never "pays throughout" beside an uncertain range (issue 37)
    # the first words: the verdicts over the batches asked for, in order, nothing else
    lo, hi = r["deployment"]["batch"]
    line = r["verdict_line"].lower()
    for name in ("pays", "uncertain", "loses"):
        assert (f"{name} for b = " in line) == bool(advise._clip(v[name], lo, min(hi, r["limit"]))), name
    # every row's verdict is the range's it lies in
    for row in r["rows"]:
        if row["batch"] <= r["limit"]:
            assert any(a <= row["batch"] <= b for a, b in v[row["verdict"]]), row
    if r["measure"]["batches"]:
        assert all(any(a <= b <= z for a, z in v["uncertain"]) for b in r["measure"]["batches"])
        assert r["measure"]["commands"][-1].endswith("--from-record s.json")


def test_a_report_that_does_not_fit_says_so_first():
    r = advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                    "--context", "0"])
    assert r["recommendation"].startswith("It does not fit") and r["verdict_line"] == "Does not fit in memory."


def test_self_speculation_with_a_window_pays_only_above_a_batch():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3-8B", "--gpu", H100, "--memory", "2000", "--context",
                    "32768", "--draft-context", "512", "--k", "3", "--alpha", "0.8", "--batch", "1-256",
                    "--calibration", "none"])
    first = r["paying_batches"][0][0]
    assert first > 1
    assert cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, H100, first - 1, 3, 0.8, 32768, draft_context=512) <= 1
    assert cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, H100, first, 3, 0.8, 32768, draft_context=512) > 1


def test_leave_it_off_points_to_another_k_that_pays():
    # α = 0.4: k = 4 never pays with a 1B draft on an H100, but k = 1 or 2 does at small batch
    argv = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "0", "--alpha", "0.4",
            "--batch", "1-64", "--calibration", "none"]
    r = advise.run(argv)
    best = advise.run(argv + ["--k", "best"])
    assert r["paying_batches"] == [] and any(row["best_k"] > 0 for row in r["rows"])
    assert r["best_k_paying_batches"] == best["paying_batches"] == [[1, 182]]
    first = max(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 182, k, 0.4) for k in range(1, 17))
    after = max(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 183, k, 0.4) for k in range(1, 17))
    assert first > 1 >= after  # the range's end, by a scan over k
    assert "Another k does better: with the best k at each batch (`--k best`) the model has S > 1 for B = 1–64." \
        in r["recommendation"]  # of the batches asked for, 1-64
    wide = advise.run(argv[:-4] + ["--batch", "1-512", "--calibration", "none"])
    assert "the model has S > 1 for B = 1–182." in wide["recommendation"]
    assert "Raise α" not in r["recommendation"]
    nothing = advise.run(argv[:-6] + ["--alpha", "0.0", "--calibration", "none"])
    assert nothing["best_k_paying_batches"] == [] and "Raise α" in nothing["recommendation"]


def test_memory_sentences_tell_weights_from_one_sequences_cache():
    # L = 1,000,000: the weights fit (18.5 GB), one sequence's caches (~164 GB) do not
    long = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7",
                       "--context", "1000000", "--calibration", "none"])
    assert long["max_batch"] == 0 and long["weights_per_gpu_GB"] < 80
    text = advise.render(long)
    assert long["recommendation"].startswith("It does not fit: the weights fit (18.5 GB of 80 GB per GPU with tp = 1), "
                                             "but not one sequence's KV caches at L = 1000000 beside them.")
    assert "the weights fit (18.5 GB of 80 GB per GPU), but not one sequence's KV caches at L = 1000000" in text
    assert "weights alone" not in text and "(1–0)" not in text
    assert "**The model alone**: nowhere: not one sequence fits in memory." in text
    big = advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                      "--context", "0"])
    assert big["weights_per_gpu_GB"] == (LLAMA_3_70B.memory_bytes + LLAMA_3_2_1B.memory_bytes) / 1e9 > 80
    assert big["recommendation"].startswith("It does not fit: the weights alone (144 GB per GPU) exceed the H100-SXM's "
                                            "memory (80 GB) with tp = 1.")
    assert "the weights alone (144 GB per GPU) exceed its 80 GB" in advise.render(big)


def test_batches_past_the_memory_limit_are_warned_about():
    argv = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7", "--context", "2048"]
    r = advise.run(argv + ["--batch", "1000-2000"])
    assert r["max_batch"] == 182 and not any(row["fits"] for row in r["rows"] if row["batch"] >= 1000)
    assert r["warnings"] == ["none of the batches asked for (B = 1000–2000) fit in memory: at most B = 182 sequences "
                             "fit (weights + both KV caches at L = 2048); the rows below are past the limit"]
    assert f"**Warning.** {r['warnings'][0]}" in advise.render(r)
    assert r["verdict_line"] == "None of the batches asked for fits in memory: at most B = 182."
    assert advise.run(argv + ["--batch", "100-2000"])["warnings"] == []  # some of them fit


def test_progress_bar_goes_to_stderr(capsys):
    dep = advise.from_args(advise.parser().parse_args(DONE_WHEN))
    advise.advise(dep, progress=True)
    captured = capsys.readouterr()
    assert "S(B) curve" in captured.err and captured.out == ""


def test_json_schema_keys_are_the_documented_ones(done_when_json):
    r = done_when_json
    assert set(r) == {"schema", "argv", "deployment", "max_batch", "limit", "weights_per_gpu_GB", "rows",
                      "paying_batches", "verdict_batches", "verdict_extrapolated", "best_k_paying_batches",
                      "idealized_paying_batches", "crossover_batch", "curve", "curve_band", "warnings", "verdict_line",
                      "band_line",
                      "recommendation", "measure", "checklist", "quote"}
    for key in r:
        assert f'"{key}"' in advise.__doc__, key
    assert set(r["rows"][0]) == {"batch", "fits", "k", "speedup", "model_speedup", "band", "verdict", "verdict_from",
                                 "extrapolated", "best_k", "best_speedup", "idealized_speedup", "fixed_cost_speedup",
                                 "c", "plain_ms", "iteration_ms", "plain_tokens_per_s", "spec_tokens_per_s", "roofs",
                                 "split", "measured", "measured_role"}
    assert r["argv"] == " ".join(DONE_WHEN)  # --json is an output flag, not an input
    for key in r["deployment"]:
        assert f'"{key}"' in advise.__doc__, key  # every key is in the documented schema
    assert [item for item, _ in r["checklist"]][:3] == ["Drafted tokens k", "Acceptance α, and how it was measured",
                                                         "Batch B"]


def test_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from specnotes import advise\nfrom specnotes.pages import exercises\n"
            "r = advise.run('--target Llama-3-8B --draft Llama-3.2-1B --gpu H100-SXM --alpha 0.7 "
            "--context 0'.split())\n"
            "assert exercises.check('ch4.p3', exercises.answer('ch4.p3'))\n"
            "print(advise.render(r)[:20])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_form_runs_the_same_command_line():
    import matplotlib

    matplotlib.use("Agg")
    box = advise.form()
    assert box.last == advise.run(advise.form_argv({n: c.value for n, c in box.controls.items()}))
    # "auto" with no engine: the pooled knobs
    assert box.last["deployment"]["calibration"] == "pooled"
    assert box.last["rows"][0]["model_speedup"] == cost.batch_speedup(cost.LLAMA_3_1_8B, LLAMA_3_2_1B, H100, 1, 4,
                                                                      0.7, 2048, **_pooled())
    box.controls["engine"].value = "sglang"
    assert box.last["deployment"]["calibration"] == "sglang-0.5.9"
    before = box.last["rows"][0]["speedup"]
    box.controls["alpha"].value = 0.5
    assert box.last["rows"][0]["speedup"] < before
    box.controls["drafter"].value = "ngram"
    assert box.controls["draft"].disabled and box.last["deployment"]["draft"]["kind"] == "ngram"
    box.controls["batch"].value = "lots"  # said in the form, not raised
    assert box.last is None
    box.controls["batch"].value = "64"
    box.controls["k"].value = "best"
    assert box.last["rows"][0]["k"] == box.last["rows"][0]["best_k"]


def test_advisor_page_is_colab_ready_and_in_the_toc():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    first = lambda path: next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    page, chapter = first(root / "book" / "advisor.ipynb"), first(root / "notebooks" / "01_roofline_decode.ipynb")
    assert page["source"] == chapter["source"] and "hide-output" in page["metadata"]["tags"]  # the install cell
    assert "- file: book/advisor" in (root / "_toc.yml").read_text()
    cells = json.loads((root / "book" / "advisor.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    # only the package and what its widgets extra installs (ipywidgets brings IPython)
    assert set(re.findall(r"^(?:from|import) (\w+)", code, re.M)) <= {"importlib", "subprocess", "sys", "IPython",
                                                                        "specnotes"}
    # each stored report renders as a table on the website: GFM (myst-nb's default, CommonMark, has no tables)
    reports = [c for c in cells if c["cell_type"] == "code" and "advise.render(" in "".join(c["source"])
               and "llama_server_record" not in "".join(c["source"])]
    assert len(reports) == 6
    for c in reports:
        assert c["metadata"]["mystnb"]["markdown_format"] == "gfm" and "hide-input" in c["metadata"]["tags"]
        assert c["metadata"]["mystnb"]["image"]["alt"].startswith("Plot of ")  # the plot says what it shows
    # the page shows both: a report inside its calibration's fit and reports that extrapolate past it
    sources = ["".join(c["source"]) for c in reports]
    assert any("['extrapolations'] == []" in s for s in sources)
    assert sum("extrapolations'])" in s for s in sources) >= 2
    assert all("--engine" in s for s in sources)  # every report says which engine it is about
    # #27.3: the idealized model is no upper bound on S (the calibrated one exceeds it at large B)
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "upper bound" not in text and "sit below it" not in text
    # issue 37: all reports but the first are folded; the form, which the website cannot run, is not on the website,
    # and a Colab link to this page (the repository of _config.yml) stands in its place
    assert ["hide-output" in c["metadata"]["tags"] for c in reports] == [False] + [True] * 5
    form = next(c for c in cells if "advise.form()" in "".join(c["source"]))
    assert "remove-cell" in form["metadata"]["tags"] and "the form below" not in text
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    assert f"https://colab.research.google.com/github/{repo}/blob/{config['repository']['branch']}/book/advisor.ipynb" \
        in text
    # the anchored workflow on the shipped llama-server record, under a label serve.md links to
    assert "(advisor-anchor)=" in text and "--from-record" in text


@pytest.mark.parametrize("target,draft,gpu_,tp", [
    ("Llama-3.1-8B", "Llama-3.2-1B", "RTX-4090", 1),
    ("Llama-3.1-70B", "Llama-3.2-1B", "H100-SXM", 4),
    ("Qwen3-8B", "Qwen3-0.6B", "L40S", 1),
    ("Qwen3-32B", "Qwen3-1.7B", "RTX-3090", 2),
    ("Qwen3-32B", "eagle3", "H100-SXM", 2),
    ("Llama-3.1-70B", "eagle3", "L40S", 4),
])
def test_presets_for_the_models_and_gpus_people_deploy(target, draft, gpu_, tp):
    drafter = ["--drafter", "eagle3"] if draft == "eagle3" else ["--draft", draft]
    r = advise.run(["--target", target, *drafter, "--gpu", gpu_, "--tp", str(tp), "--alpha", "0.7", "--batch", "1-64",
                    "--engine", "vllm", "--context", "0"])
    t = cost.PRESETS[target]
    d = cost.eagle3_head(t) if draft == "eagle3" else cost.PRESETS[draft]
    assert r["deployment"]["gpu"]["name"] == gpu_ and r["deployment"]["target"]["params"] == t.params
    knobs = advise.from_args(advise.parser().parse_args(
        ["--target", target, *drafter, "--gpu", gpu_, "--tp", str(tp), "--alpha", "0.7", "--engine", "vllm",
         "--context", "0"])).model
    assert r["rows"][0]["model_speedup"] == cost.batch_speedup(t, d, gpu_, 1, 4, 0.7, tp=tp, **knobs)
    # every row names its datasheet
    assert r["deployment"]["gpu"]["source"].startswith("http")


def test_tree_drafters_by_level_widths():
    argv = ["--target", "Qwen3-8B", "--drafter", "eagle3", "--gpu", H100, "--tree", "1,4,4", "--verified", "21",
            "--mean-accepted", "2.92", "--batch", "1-128", "--context", "300", "--engine", "sglang",
            "--engine-version", "0.5.9"]
    r = advise.run(argv)
    knobs = calibrate.calibration(H100, "sglang-0.5.9")
    head = cost.eagle3_head(cost.QWEN3_8B)
    assert r["deployment"]["tree"] == [1, 4, 4] and r["deployment"]["verified"] == 21
    assert r["deployment"]["alpha"] is None and r["deployment"]["expected_tokens"] == 2.92
    for row in r["rows"]:
        assert row["k"] == 21
        assert row["model_speedup"] == cost.tree_speedup(cost.QWEN3_8B, head, H100, row["batch"], (1, 4, 4), 21, 2.92,
                                                         300, **knobs)
    # SpecDecode-Bench Fig. 2(a): the 21-token tree loses by B = 64; the report says it does not pay there
    assert r["paying_batches"][0][0] == 1 and r["paying_batches"][-1][1] < 64
    chain = advise.run(argv[:4] + ["--gpu", H100, "--tree", "1,1,1", "--mean-accepted", "2.92"] + argv[10:])
    assert chain["deployment"]["verified"] == 3  # the default: the sum of the widths
    assert chain["rows"][-1]["model_speedup"] > r["rows"][-1]["model_speedup"]
    text = advise.render(r)
    assert "**tree**: [1, 4, 4], 21 verified" in text and "S (a tree, 21 tokens verified)" in text


def test_the_band_is_a_function_of_the_batch():
    r = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "700", "--alpha",
                    "0.6", "--k", "3", "--batch", "1-512", "--engine", "vllm", "--engine-version", "0.10.1"])
    from specnotes.record import calibrate

    band = _stored_band()
    for row in r["rows"]:
        low, centre, high = band.factors(math.log2(row["batch"]))
        s = row["model_speedup"]
        assert row["verdict"] == calibrate.verdict_of(s * low, s * high)
    widths = {round(row["band"][1] / row["band"][0], 6) for row in r["rows"]}
    assert len(widths) > 1  # not one interval for every batch
    v = r["verdict_batches"]
    assert v["pays"][0][0] == 1 and v["uncertain"]  # sure at small batch, uncertain at large
    covered = sorted(x for name in v for x in v[name])
    assert covered[0][0] == 1 and covered[-1][1] == r["limit"]
    assert all(a[1] + 1 == b[0] for a, b in zip(covered, covered[1:], strict=False))  # a partition
    assert "the band straddles 1: measure S there" in r["recommendation"]
    assert r["measure"]["commands"] and "--concurrency" in r["measure"]["commands"][0]


def test_the_stored_band_is_the_cross_validations():
    # the advisor's band comes from the held-out errors (leaving one source out) of the points predicted from
    # their published acceptance alone, and says how it did on sources it was not built from
    from specnotes.record import calibrate

    cv = calibrate.cross_validate()
    stored = calibrate.stored()["cross_validation"]["bands"][calibrate.CHOSEN]
    band = calibrate.batch_band(cv)
    assert _stored_band().factors(3.0) == pytest.approx(band.factors(3.0), abs=1e-3)
    assert stored["held_out"] == [{k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()}
                                  for row in calibrate.band_table(cv)]
    r = advise.run(DONE_WHEN)
    about = r["deployment"]["band"]
    assert about["regime"] == "acceptance only" and about["points"] == calibrate.min_points(about["nominal"])
    assert about["held_out"] == stored["held_out"]
    for row in about["held_out"]:  # the report quotes the held-out coverage per bucket, not the nominal 90%
        if row["bucket"] not in ("B > 1", "all") and row["points"]:
            assert f"{row['coverage']:.0%} of {row['points']} at {row['bucket']}" in advise.render(r)


def test_verdicts_say_where_they_extrapolate():
    inside = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--batch", "1-128",
                         "--context", "720", "--mean-accepted", "2.2548", "--k", "3", "--engine", "vllm",
                         "--engine-version", "0.10.1"])
    assert inside["deployment"]["extrapolations"] == [] and not inside["verdict_extrapolated"]
    assert not any(r["extrapolated"] for r in inside["rows"])
    said = re.compile(r"\| (pays|uncertain|loses)\* ")
    assert not said.search(advise.render(inside))
    past = advise.run(DONE_WHEN)  # a 1B draft model the calibration never saw, with pooled knobs
    assert past["deployment"]["extrapolations"] and past["verdict_extrapolated"]
    assert all(r["extrapolated"] for r in past["rows"])
    assert said.search(advise.render(past))
    # only the batches past the fit, where the batch is all that extrapolates
    big = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--batch", "1-256",
                      "--context", "720", "--mean-accepted", "2.2548", "--k", "3", "--engine", "vllm",
                      "--engine-version", "0.10.1"])
    assert [r["extrapolated"] for r in big["rows"]] == [r["batch"] > 128 for r in big["rows"]]
    # past the batches the band was built from, the band is its nearest errors': extrapolated too
    beyond = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--batch", "1-512",
                         "--context", "720", "--mean-accepted", "2.2548", "--k", "3", "--calibration", "none"])
    top = beyond["deployment"]["band"]["batches"][1]
    assert [r["extrapolated"] for r in beyond["rows"]] == [r["batch"] > top for r in beyond["rows"]]


def test_a_calibration_whose_gpu_is_in_doubt_says_so():
    # eagle3_2025 Table 5: the caption says A100, the text RTX 3090; the record files it under RTX 3090
    r = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", "RTX-3090", "--batch", "1-32",
                    "--context", "512", "--alpha", "0.7", "--k", "2", "--engine", "vllm"])
    note, said = r["deployment"]["calibration_note"], r["deployment"]["provenance"]
    assert "inside what it was fitted on" in note and "the GPU is uncertain" in said and "A100" in said
    assert "uncertain" not in note  # provenance is a note, not inside the Model line (issue 39)
    assert f"**Note.** {said}." in advise.render(r)
    named = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", "RTX-3090", "--batch", "8",
                        "--alpha", "0.7", "--k", "2", "--calibration", "vllm", "--context", "0"])
    assert "the GPU is uncertain" in named["deployment"]["provenance"]
    h100 = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--batch", "1-128",
                       "--context", "720", "--mean-accepted", "2.2548", "--k", "3", "--engine", "vllm",
                       "--engine-version", "0.10.1"])
    assert "uncertain" not in h100["deployment"]["calibration_note"] and not h100["deployment"]["provenance"]


# ---------------------------------------------------------------------------------------------- anchored (issue 34)

EAGLE = ["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "720", "--k", "3",
         "--engine", "vllm", "--engine-version", "0.10.1", "--batch", "1-256"]
SHIPPED = str(advise.llama_server_record("shipped"))


def test_measured_anchors_the_level_and_the_band_reaches_from_the_nearest_batch():
    r = advise.run(EAGLE + ["--alpha", "0.62", "--measured", "1:1.71,16:1.68"])
    anchor = r["deployment"]["anchor"]
    head = cost.eagle3_head(cost.LLAMA_3_1_8B)
    knobs = calibrate.calibration(H100, "vllm-0.10.1")
    model = [cost.batch_speedup(cost.LLAMA_3_1_8B, head, H100, b, 3, 0.62, 720, **knobs) for b in (1, 16)]
    level = math.exp((math.log(1.71 / model[0]) + math.log(1.68 / model[1])) / 2)
    assert anchor["level"] == pytest.approx(level) and anchor["model_at_measured"] == pytest.approx(model)
    assert anchor["measured"] == [[1, 1.71], [16, 1.68]] and anchor["source"] == "--measured"
    band = _stored_band(kind="anchor")
    assert r["deployment"]["band"]["regime"] == "anchored"
    for row in r["rows"]:
        b = row["batch"]
        reach = min((math.log2(b / m) for m in (1, 16)), key=abs)
        low, centre, high = band.factors(reach)
        assert row["speedup"] == pytest.approx(row["model_speedup"] * level * centre)
        assert row["band"] == pytest.approx([row["model_speedup"] * level * low, row["model_speedup"] * level * high])
        assert row["measured"] == {1: 1.71, 16: 1.68}.get(b) and row["measured_role"] == (
            "anchor" if b in (1, 16) else None)
    text = advise.render(r)
    assert "- **Anchored on**: S = 1.71 at B = 1, S = 1.68 at B = 16 (--measured)." in text
    assert f"your engine runs at ×{level:.2f} its level" in text and "1.71 (a)" in text
    # without α, the level a measurement implies sets it (and the level is then 1)
    implied = advise.run(EAGLE + ["--measured", "1:1.71,16:1.68"])
    assert implied["deployment"]["alpha_from"].startswith("implied by the measured level, E[N] = ")
    assert implied["deployment"]["anchor"]["level"] == pytest.approx(1.0)


@pytest.mark.parametrize("extra,says", [
    (["--measured", "1:1.7"], "--measured needs the k your engine ran at: give --k K"),
    (["--measured", "1:1.7", "--k", "best"], "--measured needs the k your engine ran at"),
    (["--measured", "1-1.7", "--k", "3"], "--measured must be B:S pairs such as 1:1.42,8:1.30"),
    (["--measured", "1:fast", "--k", "3"], "--measured must be B:S pairs"),
    (["--measured", "0:1.2", "--k", "3"], "--measured batch must be an integer in [1, 65536], got 0"),
    (["--measured", "8:0", "--k", "3"], "--measured speedup at B = 8 must be a number > 0, got 0"),
    (["--measured", "8:1.2,8:1.3", "--k", "3"], "--measured names a batch twice"),
    (["--measured", "8:4.5", "--k", "3"], "--measured: S = 4.5 at B = 8 is above 4, the most tokens per step k = 3"),
    (["--measured", "5000:1.1", "--k", "3"], "--measured: B = 5000 does not fit in memory here: at most B = 644"),
])
def test_a_measurement_the_model_cannot_take_is_refused(extra, says, capsys):
    base = ["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "720", "--alpha", "0.6"]
    with pytest.raises(SystemExit) as exit_:
        advise.main(base + extra)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_from_record_takes_the_deployment_from_a_llama_server_record():
    r = advise.run(["--from-record", SHIPPED, "--record-batches", "1,2", "--batch", "1-8"])
    dep = r["deployment"]
    record = json.loads(Path(SHIPPED).read_text())
    assert (dep["target"]["name"], dep["draft"]["name"], dep["k"]) == ("specnotes-target", "specnotes-draft", 4)
    roofs = record["notes"]["roofs"]
    assert dep["gpu"]["bandwidth_GB_per_s"] == pytest.approx(roofs["bandwidth"] / 1e9)
    assert dep["gpu"]["peak_TFLOP_per_s"] == pytest.approx(roofs["flops"] / 1e12) and dep["math_dtype"] == "fp32"
    assert dep["alpha"] == record["notes"]["specnotes_acceptance"]["alpha"]
    assert dep["context_tokens"] == 64 + 128 // 2  # prompt bytes + half the output, one token per byte
    by = {}
    for x in record["sections"]["engine_speedup"]:
        by.setdefault(x["params"]["concurrency"], []).append(x["extra"]["speedup_engine_tpot"])
    median = {b: float(np.median(v)) for b, v in by.items()}
    assert dep["anchor"]["measured"] == [[1, pytest.approx(median[1])], [2, pytest.approx(median[2])]]
    assert dep["anchor"]["held_back"] == [[4, pytest.approx(median[4])], [8, pytest.approx(median[8])]]
    rows = {row["batch"]: row for row in r["rows"]}
    assert rows[4]["measured_role"] == rows[8]["measured_role"] == "held back"
    assert f"{median[4]:.2f} (h)" in advise.render(r) and f"{median[1]:.2f} (a)" in advise.render(r)
    every = advise.run(["--from-record", SHIPPED])
    assert [b for b, _ in every["deployment"]["anchor"]["measured"]] == [1, 2, 4, 8]


@pytest.mark.parametrize("extra,says", [
    (["--k", "3"], "--k 3 disagrees with the record"),
    (["--gpu", H100], "--gpu H100-SXM disagrees with the record"),
    (["--target", "Llama-3.1-8B"], "--target 'Llama-3.1-8B' disagrees with the record"),
    (["--record-batches", "1,3"], "--record-batches: the record"),
])
def test_a_record_that_disagrees_with_the_flags_is_refused(extra, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        advise.main(["--from-record", SHIPPED] + extra)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err, err


def test_a_serve_speedup_record_of_a_gpu_engine(tmp_path):
    # what bench serve-speedup writes: no k, model or GPU beyond the served name and the runs' labels
    rec = {"schema": "specnotes.results/1",
           "provenance": {"engine_model": "meta-llama/Llama-3.1-8B-Instruct", "label": "S(B): on, k=3 over off"},
           "sections": {"engine_speedup": [
               {"name": "engine_speedup", "params": {"concurrency": b, "max_tokens": 256, "prompt_chars": 2000},
                "extra": {"speedup": s, "speedup_q1": s - 0.02, "speedup_q3": s + 0.02}}
               for b, s in ((1, 1.62), (16, 1.55), (64, 1.31))]},
           "notes": {"on": {"label": "on, k=3"}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(rec))
    base = ["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "720", "--alpha", "0.6"]
    r = advise.run(base + ["--from-record", str(path), "--record-batches", "1,16"])
    assert r["deployment"]["k"] == 3 and r["deployment"]["anchor"]["held_back"] == [[64, 1.31]]
    with pytest.raises(validate.BadArgument, match="--target 'Qwen3-8B' disagrees with the record"):
        advise.run(["--target", "Qwen3-8B", "--drafter", "eagle3", "--gpu", H100, "--context", "720", "--alpha",
                    "0.6", "--from-record", str(path)])
    (tmp_path / "other.json").write_text(json.dumps({"schema": "specnotes.results/1", "sections": {}}))
    with pytest.raises(validate.BadArgument, match="is not an S\\(B\\) record"):
        advise.run(base + ["--from-record", str(tmp_path / "other.json")])
    with pytest.raises(validate.BadArgument, match="cannot read"):
        advise.run(base + ["--from-record", str(tmp_path / "missing.json")])


# ---------------------------------------------------------------------------------------------- as a team uses it


def test_an_alpha_range_spans_the_band():
    base = ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "1024", "--batch",
            "1-256", "--engine", "vllm"]
    r = advise.run(base + ["--alpha", "0.5-0.8"])
    dep = r["deployment"]
    assert dep["alpha"] == pytest.approx(0.65) and dep["alpha_from"].startswith("a range 0.5–0.8")
    assert "Chapter 3" in dep["alpha_from"]  # how to measure it
    band = _stored_band()
    knobs = advise.from_args(advise.parser().parse_args(base + ["--alpha", "0.7"])).model
    s = lambda b, a: cost.batch_speedup(cost.LLAMA_3_1_8B, LLAMA_3_2_1B, H100, b, 4, a, 1024, **knobs)
    for row in r["rows"]:
        b = row["batch"]
        low, centre, high = band.factors(math.log2(b))
        assert row["speedup"] == pytest.approx(s(b, 0.65) * centre)
        assert row["band"] == pytest.approx([s(b, 0.5) * low, s(b, 0.8) * high])
    one = advise.run(base + ["--alpha", "0.65"])
    assert all(x["band"][1] - x["band"][0] > y["band"][1] - y["band"][0] for x, y in zip(r["rows"], one["rows"],
                                                                                        strict=True))
    assert advise.alpha_range("0.7") == (0.7, 0.7) and advise.alpha_range("0.5-0.8") == (0.5, 0.8)


def test_names_match_without_regard_to_case_and_suggest_the_nearest():
    canonical = advise.run(["--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", "H200", "--dtype", "bf16",
                            "--alpha", "0.7", "--context", "512"])
    loose = advise.run(["--target", "llama-3.1-8b", "--drafter", "EAGLE3", "--gpu", "h200", "--dtype", "BF16",
                        "--alpha", "0.7", "--context", "512"])
    assert loose["rows"] == canonical["rows"] and loose["deployment"]["gpu"]["name"] == "H200"
    assert advise.match_name("gpu", "h100-sxm", hardware.ACCELERATORS) == "H100-SXM"
    assert advise.match_name("gpu", "mi300", hardware.ACCELERATORS) == "MI300X"  # the one name it starts
    with pytest.raises(validate.BadArgument, match="did you mean H100-SXM or H100-PCIe"):
        advise.match_name("gpu", "H100", hardware.ACCELERATORS)
    with pytest.raises(validate.BadArgument, match="did you mean Qwen3-8B"):
        advise.match_name("target", "Qwen-8B", ["Qwen3-8B", "Qwen3-32B"])
    assert advise.match_name("target", "Qwen3-8", ["Qwen3-8B", "Qwen3-32B"]) == "Qwen3-8B"  # the one it starts


def test_the_context_is_required_and_bounded():
    base = ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7"]
    with pytest.raises(validate.BadArgument, match="--context is required: the context L your requests decode at"):
        advise.run(base)
    with pytest.raises(validate.BadArgument, match=r"must be an integer in \[0, 10000000\]"):
        advise.run(base + ["--context", "20000000"])


@pytest.mark.parametrize("argv", [
    DONE_WHEN,
    ["--target", "Qwen3-8B", "--drafter", "eagle3", "--gpu", H100, "--tree", "1,4,4", "--verified", "21",
     "--mean-accepted", "2.92", "--batch", "1-128", "--context", "300", "--engine", "sglang"],
    ["--target", "Llama-3.1-8B", "--drafter", "ngram", "--gpu", "A100-80GB", "--batch", "1-512", "--context", "512",
     "--mean-accepted", "1.75@4", "--draft-overhead-ms", "0.2", "--engine", "vllm"],
    ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--tp", "4", "--batch", "1-512",
     "--context", "4096", "--alpha", "0.8", "--k", "best", "--engine", "vllm"],
    ["--from-record", SHIPPED, "--record-batches", "1,2", "--batch", "1-8"],
])
def test_the_report_fits_a_terminal_and_its_table_a_phone(argv, capsys):
    assert advise.main(argv) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    r = advise.run(argv)
    key = advise.key_table(r).splitlines()
    assert len(key[0].split("|")) - 2 <= 6 and max(len(line) for line in key) <= 64  # a 390 px phone
    assert advise.render(r).splitlines()[2].startswith(f"**{r['verdict_line']}**")  # the verdict first


def test_a_level_far_from_the_records_is_warned_about_at_its_edges():
    r = advise.run(EAGLE + ["--alpha", "0.62", "--measured", "1:1.71"])
    dep = advise.from_args(advise.parser().parse_args(EAGLE + ["--alpha", "0.62", "--measured", "1:1.71"]))
    lo, hi = math.exp(-max(dep.band.errors)), math.exp(-min(dep.band.errors))
    at = lambda level: advise.anchor_warnings(dataclasses.replace(dep, anchor=dataclasses.replace(dep.anchor,
                                                                                                   level=level)))
    assert at(lo / 1.5) == [] and at(hi * 1.5) == []  # the edges are inside
    assert at(lo / 1.5 * 0.999) and at(hi * 1.5 * 1.001)
    assert "far outside what the published engines ran at" in at(0.1)[0]
    assert r["warnings"] == at(r["deployment"]["anchor"]["level"])


@pytest.mark.parametrize(("measured", "where"), [(0.9, "inside"), (1.2, "inside"), (0.8999, "below"),
                                                  (1.2001, "above"), (1.0, "inside")])
def test_held_back_measurements_are_placed_against_the_band_at_its_edges(measured, where):
    report = {"rows": [{"batch": 4, "measured_role": "held back", "band": [0.9, 1.2], "speedup": 1.05,
                        "measured": measured},
                       {"batch": 1, "measured_role": "anchor", "band": [0.9, 1.2], "speedup": 1.0, "measured": 1.0}]}
    (h,) = advise.held_back(report)
    assert h["where"] == where and h["batch"] == 4
    said = advise.held_back_text(report)
    assert said.endswith("inside the band." if where == "inside" else f"{where} the band.")
    assert f"the engine measured {measured:.2f}×" in said


def test_the_shipped_llama_server_record_anchored_on_two_concurrencies():
    r = advise.run(["--from-record", SHIPPED, "--record-batches", "1,2", "--batch", "1-8"])
    rows = advise.held_back(r)
    assert [h["batch"] for h in rows] == [4, 8]
    for h in rows:
        assert h["where"] == ("inside" if h["band"][0] <= h["measured"] <= h["band"][1] else
                              "above" if h["measured"] > h["band"][1] else "below")


def test_the_advisor_commands_the_page_prints_parse():
    import shlex

    root = Path(__file__).resolve().parents[2]
    cells = json.loads((root / "book" / "advisor.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    said = {line for line in lines if line.startswith("python -m specnotes.advise")}
    assert len(said) >= 3
    for line in said:
        argv = [a for a in shlex.split(line)[3:] if a != "..."]
        if "--help" in argv:
            continue
        args = advise.parser().parse_args(argv)  # every flag exists and parses (exit 2 otherwise)
        assert args is not None, line


def test_a_record_of_a_gguf_pair_of_ones_own_carries_its_shapes(tmp_path):
    # engine measure --target FILE.gguf --draft FILE.gguf may write the models' configs in the notes
    rec = json.loads(Path(SHIPPED).read_text())
    rec["provenance"]["engine_build"]["model"] = "my-target-q8_0.gguf"
    rec["provenance"]["engine_build"]["draft"] = "my-draft-q8_0.gguf"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(validate.BadArgument, match="ran 'my-target-q8_0.gguf', which is no preset: give --target"):
        advise.run(["--from-record", str(path)])
    rec["notes"]["target_config"] = {"n_layers": 4, "d_model": 192, "n_heads": 4, "d_ff": 576, "vocab_size": 256}
    rec["notes"]["draft_config"] = {"n_layers": 2, "d_model": 64, "n_heads": 2, "d_ff": 192, "vocab_size": 256}
    path.write_text(json.dumps(rec))
    r = advise.run(["--from-record", str(path)])
    shipped = advise.run(["--from-record", SHIPPED])
    assert r["deployment"]["target"]["name"] == "my-target" and r["deployment"]["draft"]["name"] == "my-draft"
    assert [x["model_speedup"] for x in r["rows"]] == [x["model_speedup"] for x in shipped["rows"]]


# ---- sentences that must not contradict the request (issue 34 follow-up, step 4)

MOE_REQUEST = ["--target", "qwen3-30b-a3b", "--draft", "Qwen3-0.6B", "--alpha", "0.7", "--k", "3", "--context",
               "1024", "--batch", "1-256"]


@pytest.mark.parametrize("gpu", ["H100-SXM", "h100-sxm", "h100 sxm", "H100SXM"])
def test_a_gpu_in_the_table_is_never_said_not_to_be(gpu):
    r = advise.run(MOE_REQUEST + ["--gpu", gpu])
    said = r["deployment"]["calibration_note"] + " ".join(r["deployment"]["extrapolations"])
    assert "not in the table" not in said and "the engine is not given" in said
    assert r["deployment"]["gpu"]["name"] == "H100-SXM"


@pytest.mark.parametrize(("extra", "in_table"), [
    (["--gpu", "H100-SXM"], True),
    (["--bandwidth", "3350", "--peak", "989"], False),  # a GPU given by its numbers
    (["--gpu", "H100-SXM", "--bandwidth", "3000"], False),  # a row changed on the command line is another GPU
])
def test_not_in_the_table_only_when_it_is_not(extra, in_table):
    r = advise.run(MOE_REQUEST + extra)
    note = r["deployment"]["calibration_note"]
    assert ("the GPU is not in the table" in note) == (not in_table)
    assert any("a GPU not in the table" in x for x in r["deployment"]["extrapolations"]) == (not in_table)


@pytest.mark.parametrize(("target", "engine", "found", "says"), [
    ("Qwen3-30B-A3B", "sglang", "sglang-moe", "fitted to SGLang, MoE targets on H100-SXM"),
    ("Qwen3-30B-A3B", "vllm", "vLLM, MoE", "vLLM, MoE targets was fitted on GB200, MI355X"),
    ("Llama-3.1-8B", "sglang", "sglang-", "fitted to SGLang"),
])
def test_a_moe_target_gets_its_engines_moe_calibration(target, engine, found, says):
    r = advise.run(["--target", target, "--draft", "Qwen3-0.6B" if "Qwen" in target else "Llama-3.2-1B", "--gpu",
                    "H100-SXM", "--alpha", "0.7", "--k", "3", "--context", "1024", "--engine", engine])
    dep = r["deployment"]
    assert (dep["calibration"] or dep["calibration_about"] or "").startswith(found) or found in dep[
        "calibration_note"]
    assert says in dep["calibration_note"]
    assert (dep["calibration"] == "sglang-moe") == (target == "Qwen3-30B-A3B" and engine == "sglang")
    # a dense engine's knobs carried to a MoE target are an extrapolation, and the report lists it
    carried = "dense targets' knobs" in dep["calibration_note"]
    assert not carried or any(x.startswith("the engine:") for x in dep["extrapolations"])


def test_the_recommendation_speaks_of_the_batches_asked_for():
    shipped = ["--from-record", SHIPPED, "--record-batches", "1,2"]
    r = advise.run(shipped + ["--batch", "1-8"])
    assert r["verdict_line"] == "Loses for B = 1–8." and "B = 1–8" in r["recommendation"]
    assert "65536" not in r["recommendation"] and r["measure"]["batches"] == [] and "extrapolates" not in \
        r["recommendation"]
    # asked past the memory limit: every sentence stops there, and the rows past it get no verdict
    moe = advise.run(MOE_REQUEST + ["--gpu", "H100-SXM", "--engine", "sglang"])
    lo, hi = advise.asked(moe)
    assert (lo, hi) == (1, moe["max_batch"]) and moe["max_batch"] < 256
    for b in moe["measure"]["batches"]:  # measured where the band straddles 1, among the batches that fit
        assert lo <= b <= hi and any(a <= b <= z for a, z in moe["verdict_batches"]["uncertain"])
    table = advise.key_table(moe)
    assert "| 256 (no memory) | —" in table.replace("  ", " ").replace("  ", " ")
    nothing = advise.run(MOE_REQUEST[:-1] + ["300-400", "--gpu", "H100-SXM"])
    assert nothing["recommendation"].startswith(f"None of the batches asked for fits in memory: at most B = "
                                                f"{nothing['max_batch']}.")


def test_a_range_of_one_value_is_said_as_one():
    req = advise.Request("H100-SXM", "sglang", None, "model", "Qwen3-30B-A3B", 1, 2, (1, 8), 1024, False, True)
    fitted = {"batch": [1, 4], "context": [512, 512], "drafters": ["eagle3-head"], "targets": ["Qwen3-30B-A3B"],
              "tp": [1], "weight_bytes": [2], "trees": True}
    said = advise.extrapolations(fitted, req, ["H100-SXM"])
    assert said == ["batches above B = 4: it was fitted on B = 1–4", "context L = 1024: it was fitted on L = 512",
                    "drafter 'model': it was fitted on eagle3"]


@pytest.mark.parametrize("target", sorted(cost.MOE_PRESETS))
@pytest.mark.parametrize("drafter", ["eagle3", "mtp"])
def test_every_moe_preset_answers_with_an_eagle3_and_an_mtp_drafter(target, drafter):
    # issue 42: "dense_layers must be an integer in [0, 0], got 3" for DeepSeek-V3 with an EAGLE-3 head
    shape = cost.MOE_PRESETS[target]
    tp = 8 if shape.n_heads % 8 == 0 and (shape.n_kv_heads % 8 == 0 or 8 % shape.n_kv_heads == 0) else 1
    report = advise.run(["--target", target, "--drafter", drafter, "--gpu", "H200", "--k", "3", "--alpha", "0.7",
                         "--context", "1024", "--batch", "1-4", "--tp", str(tp), "--calibration", "none"])
    assert [r["batch"] for r in report["rows"]] == [1, 2, 4]
    head = cost.eagle3_head(shape) if drafter == "eagle3" else cost.mtp_head(shape)
    assert report["rows"][0]["model_speedup"] == pytest.approx(cost.batch_speedup(shape, head, "H200", 1, 3, 0.7,
                                                                                  1024, tp=tp))
