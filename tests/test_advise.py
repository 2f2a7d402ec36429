"""python -m specnotes.advise: its numbers are the book's functions', its errors name the flag."""

import json
import math
import subprocess
import sys

import pytest

from specnotes import advise, cost, validate
from specnotes.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B

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


def test_done_when_json_equals_the_books_functions(done_when_json):
    # the H100's one stored calibration was fitted to vLLM with an EAGLE-3 head: "auto" does not apply it to a
    # separate draft model, and the report is the idealized model's, saying so
    r = done_when_json
    args = (LLAMA_3_8B, LLAMA_3_2_1B, H100)
    assert r["schema"] == "specnotes.advise/1"
    assert r["deployment"]["calibration"] is None and r["deployment"]["model"] == {"tp": 1}
    note = r["deployment"]["calibration_note"]
    assert note.startswith("auto: H100-SXM's calibration 'specdecode_bench' was fitted to another setup")
    assert "drafter 'model' here, 'eagle3-head' in the fit" in note and "idealized roofline" in note
    assert r["warnings"] == []
    assert r["max_batch"] == cost.max_batch(*args, 2048, k=4)
    assert r["paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048)]
    assert r["idealized_paying_batches"] == r["paying_batches"]
    assert r["deployment"]["expected_tokens"] == cost.expected_tokens(0.7, 4)
    batches = [row["batch"] for row in r["rows"]]
    assert {1, 2, 4, 8, 16, 32, 64, 128, 256, 512} <= set(batches) and r["max_batch"] in batches
    for row in r["rows"]:
        b = row["batch"]
        assert row["speedup"] == row["idealized_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048)
        assert row["best_k"] == cost.best_k(*args, b, 0.7, 2048)
        assert row["best_speedup"] == cost.batch_speedup(*args, b, row["best_k"], 0.7, 2048)
        assert row["iteration_ms"] == pytest.approx(1e3 * cost.iteration_time(*args, b, 4, 2048), rel=1e-12)
        assert row["plain_ms"] == pytest.approx(1e3 * cost.pass_time(LLAMA_3_8B, H100, b, 1, 2048), rel=1e-12)
        assert row["fits"] == (b <= r["max_batch"])
    for b, s in r["curve"]:
        assert s == cost.batch_speedup(*args, b, 4, 0.7, 2048)
    assert r["curve"][-1][0] == r["max_batch"]  # the curve stops at the memory limit
    assert r["recommendation"].startswith(f"Turn it on at every batch that fits (1–{r['max_batch']})")


def test_done_when_with_the_calibration_named_equals_the_books_functions(done_when_calibrated):
    # named, the calibration applies whatever the setup, with a warning that it was fitted to another one
    r = done_when_calibrated
    args = (LLAMA_3_8B, LLAMA_3_2_1B, H100)
    knobs = cost.calibration(H100, "specdecode_bench")
    assert r["deployment"]["calibration"] == "specdecode_bench" and r["deployment"]["model"] == {**knobs, "tp": 1}
    assert r["warnings"] == ["`--calibration specdecode_bench` was fitted to another setup (drafter 'model' here, "
                             "'eagle3-head' in the fit): its overheads may not hold for this one (auto would not "
                             "apply it)"]
    assert r["warnings"][0] in advise.render(r)
    assert r["paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048, **knobs)]
    assert r["idealized_paying_batches"] == [list(x) for x in cost.paying_batches(*args, 4, 0.7, 2048)]
    for row in r["rows"]:
        b = row["batch"]
        assert row["speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048, **knobs)
        assert row["idealized_speedup"] == cost.batch_speedup(*args, b, 4, 0.7, 2048)
        assert row["best_k"] == cost.best_k(*args, b, 0.7, 2048, **knobs)
        assert row["iteration_ms"] == pytest.approx(1e3 * cost.iteration_time(*args, b, 4, 2048, **knobs), rel=1e-12)
        assert row["plain_ms"] == pytest.approx(1e3 * cost.pass_time(LLAMA_3_8B, H100, b, 1, 2048, overlap="none",
                                                                     overhead=knobs["overhead"]), rel=1e-12)


def test_done_when_numbers_by_hand(done_when_json, done_when_calibrated):
    # memory: 80 GB − weights (8B untied: P + embedding; 1B tied: P) over (128 KiB + 32 KiB)·(L + k + 1) a sequence
    weights = 2 * (LLAMA_3_8B.params + 4096 * 128256) + 2 * LLAMA_3_2_1B.params
    assert done_when_json["weights_per_gpu"] == weights
    assert done_when_json["max_batch"] == math.floor((80e9 - weights) / ((131072 + 32768) * (2048 + 5)))
    # B = 1, idealized: every kernel memory-bound, so each pass is its bytes over the bandwidth
    kv_t, kv_d, L = 131072, 32768, 2048
    decode = 2 * LLAMA_3_8B.params + kv_t * (L + 1)
    drafts = [2 * LLAMA_3_2_1B.params + kv_d * (L + i + 1) for i in range(4)]
    verify = 2 * LLAMA_3_8B.params + kv_t * (L + 5)
    en = 1 + 0.7 + 0.7**2 + 0.7**3 + 0.7**4
    first = done_when_json["rows"][0]
    assert first["speedup"] == pytest.approx(en * decode / (sum(drafts) + verify), rel=1e-9)
    assert done_when_calibrated["rows"][0]["idealized_speedup"] == pytest.approx(first["speedup"], rel=1e-12)
    # calibrated (overlap "none": memory time + compute time, plus t0 per target pass and t0' per draft pass);
    # attention FLOPs 4·d_head·n_heads·n_layers per (query, key) pair; a new token also sees itself
    t0, t0d = cost.calibration(H100, "specdecode_bench")["overhead"], cost.calibration(H100, "specdecode_bench")[
        "draft_overhead"]
    g_t, g_d = 4 * 128 * 32 * 32, 4 * 64 * 32 * 16
    flops_decode = 2 * LLAMA_3_8B.params + g_t * (L + 1)
    flops_verify = 2 * LLAMA_3_8B.params * 5 + g_t * (5 * L + 15)
    flops_drafts = [2 * LLAMA_3_2_1B.params + g_d * (L + i + 1) for i in range(4)]
    t = lambda nbytes, flops: nbytes / BW + flops / PEAK
    plain = t(decode, flops_decode) + t0
    iteration = sum(t(b, f) + t0d for b, f in zip(drafts, flops_drafts, strict=True)) + t(verify, flops_verify) + t0
    assert done_when_calibrated["rows"][0]["speedup"] == pytest.approx(en * plain / iteration, rel=1e-9)
    assert first["roofs"] == {p: {"matmul": "memory", "attention": "memory"} for p in ("decode", "verify", "draft")}
    # B = 64: the verify matmuls have 64·5 = 320 tokens per weight read > ridge 295: compute-bound; decode not
    row64 = next(r for r in done_when_json["rows"] if r["batch"] == 64)
    assert row64["roofs"]["verify"]["matmul"] == "compute" and row64["roofs"]["decode"]["matmul"] == "memory"
    # B = 512 > 295: decode matmuls compute-bound too; attention AI ≈ n_heads/n_kv = 4 stays memory-bound
    row512 = next(r for r in done_when_json["rows"] if r["batch"] == 512)
    assert row512["roofs"]["decode"] == {"matmul": "compute", "attention": "memory"}
    assert PEAK / BW == pytest.approx(done_when_json["deployment"]["gpu"]["ridge"])


def _cells(text, header_start="| B "):
    lines = text.splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith(header_start)).strip("|").split("|")]
    return header, lambda b: dict(zip(header, [c.strip() for c in next(x for x in lines if x.startswith(f"| {b} "))
                                               .strip("|").split("|")], strict=True))


def test_done_when_text_report_shows_the_same_numbers(done_when_text, done_when_json, done_when_calibrated):
    text, r = done_when_text, done_when_json
    header, cells_at = _cells(text)
    assert header[:4] == ["B", "S (k = 4)", "best k", "S (best k)"] and header[-1] == "fits"  # idealized: one S
    for row in r["rows"]:
        cells = cells_at(row["batch"])
        assert cells["S (k = 4)"] == f"{row['speedup']:.2f}"
        assert cells["best k"] == (str(row["best_k"]) if row["best_k"] else "0 (off)")
        assert cells["S (best k)"] == f"{row['best_speedup']:.2f}" and cells["fits"] == ("yes" if row["fits"] else "no")
    assert f"at most B = {r['max_batch']} sequences fit" in text
    assert r["recommendation"] in text and r["quote"] in text and r["deployment"]["calibration_note"] in text
    for item, value in r["checklist"]:
        assert item in text and value in text
    assert "How to quote this speedup" in text
    # calibrated, the table has the idealized S beside the calibrated one
    header, cells_at = _cells(advise.render(done_when_calibrated))
    assert header[:5] == ["B", "S (k = 4)", "S idealized", "best k", "S (best k)"]
    for row in done_when_calibrated["rows"]:
        cells = cells_at(row["batch"])
        assert cells["S (k = 4)"] == f"{row['speedup']:.2f}"
        assert cells["S idealized"] == f"{row['idealized_speedup']:.2f}"


def test_report_matches_direct_calls_with_best_k_tp_and_calibration():
    lookup = {("H100-SXM", "hand-made"): {"overhead": 2e-3, "draft_overhead": 5e-4, "overlap": "none"}}
    calib = lambda accel, name: lookup[(accel, name)]
    r = advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--tp", "4", "--batch",
                    "1-256", "--context", "1024", "--alpha", "0.8", "--k", "best", "--calibration", "hand-made"],
                   calibration_lookup=calib)
    model = {"overhead": 2e-3, "draft_overhead": 5e-4, "overlap": "none", "tp": 4}
    args = (LLAMA_3_70B, LLAMA_3_2_1B, H100)
    assert r["deployment"]["model"] == model and r["deployment"]["calibration"] == "hand-made"
    for row in r["rows"]:
        k = cost.best_k(*args, row["batch"], 0.8, 1024, **model)
        assert row["k"] == row["best_k"] == k
        assert row["speedup"] == cost.batch_speedup(*args, row["batch"], k, 0.8, 1024, **model)
    # "best": S > 1 somewhere in k = 1..16 — by a full scan up to the memory limit (k = 16's reservation)
    limit = cost.max_batch(*args, 1024, k=16, tp=4)
    assert r["max_batch"] == limit
    scan = [b for b in range(1, limit + 1, 7)
            if max(cost.batch_speedup(*args, b, k, 0.8, 1024, **model) for k in range(1, 17)) > 1]
    inside = lambda b: any(lo <= b <= hi for lo, hi in r["paying_batches"])
    assert all(inside(b) for b in scan) and not any(inside(b) for b in range(1, limit + 1, 7) if b not in scan)
    # an explicit flag wins over the calibration
    r2 = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                     "--calibration", "hand-made", "--overhead", "1"], calibration_lookup=calib)
    assert r2["deployment"]["model"]["overhead"] == 1e-3 and r2["deployment"]["model"]["overlap"] == "none"


def test_calibrations_auto_none_named_and_listed(capsys):
    assert advise.main(["--calibration", "list"]) == 0
    listed = capsys.readouterr().out
    assert "H100-SXM" in listed and "specdecode_bench" in listed and "Fig. 1(c)" in listed
    assert advise.main(["--calibration", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["calibrations"]
    h100 = next(c for c in listed if c["gpu"] == H100)
    assert h100["name"] == "specdecode_bench" and h100["knobs"] == cost.calibration(H100, "specdecode_bench")
    assert h100["fitted_setup"]["drafter"] == "eagle3-head" and h100["fitted_setup"]["tp"] == 1
    none = advise.run(DONE_WHEN + ["--calibration", "none"])
    assert none["deployment"]["calibration"] is None and none["deployment"]["model"] == {"tp": 1}
    assert none["rows"] == advise.run(DONE_WHEN)["rows"]  # auto: the H100's calibration does not fit a draft model
    b_star = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                         "--calibration", "specdecode_bench"])
    assert b_star["recommendation"].startswith(f"Turn it on below B = {b_star['crossover_batch']}, off above")
    assert "Calibrated with 'specdecode_bench' (below); the idealized roofline would have S > 1 for B in 1–159." \
        in b_star["recommendation"]  # Chapter 4's B* = 160
    t4 = advise.run(["--target", "Llama-3.2-1B", "--drafter", "ngram", "--gpu", "T4", "--alpha", "0.5"])
    assert t4["deployment"]["calibration"] is None  # no calibration for a T4: the idealized model
    assert t4["deployment"]["calibration_note"] == "auto: no stored calibration for T4: the idealized roofline"
    with pytest.raises(SystemExit) as exit_:
        advise.main(DONE_WHEN + ["--calibration", "specdecode-bench"])
    assert exit_.value.code == 2
    assert ("--calibration 'specdecode-bench' does not exist for H100-SXM; calibrated: H100-SXM: specdecode_bench"
            in capsys.readouterr().err)


def test_auto_applies_a_calibration_only_to_the_setup_it_was_fitted_to():
    # the audit's case: on an A100 the one calibration is MagicDec's 8-GPU self-speculation; a 1B draft on one
    # GPU gets the idealized model (B* = 83), as with --calibration none, not "leave it off"
    a100 = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", "A100-80GB", "--alpha", "0.8"]
    auto, none = advise.run(a100), advise.run(a100 + ["--calibration", "none"])
    assert auto["deployment"]["calibration"] is None and auto["rows"] == none["rows"]
    assert auto["recommendation"].startswith("Turn it on below B = 83, off above")
    assert cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, "A100-80GB", 4, 0.8) == 83
    assert ("drafter 'model' here, 'self-speculation' in the fit; tp 1 here, 8 in the fit"
            in auto["deployment"]["calibration_note"])
    forced = advise.run(a100 + ["--calibration", "magicdec"])
    assert forced["recommendation"].startswith("Leave k = 4 off") and "tp 1 here, 8 in the fit" in forced["warnings"][0]
    # MagicDec's own setup (the target drafting itself with a 512-token window, tp = 8) gets it
    own = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3-8B", "--draft-context", "512", "--gpu",
                      "A100-80GB", "--tp", "8", "--context", "32000", "--alpha", "0.8", "--k", "3", "--batch", "64"])
    assert own["deployment"]["calibration"] == "magicdec" and own["warnings"] == []
    assert own["deployment"]["model"] == {**cost.calibration("A100-80GB", "magicdec"), "tp": 8, "draft_context": 512}
    # and SpecDecode-Bench's (an EAGLE head for an 8B Llama on one H100) gets the H100's, whose numbers it uses
    eagle = advise.run(["--target", "Llama-3-8B", "--drafter", "eagle", "--gpu", H100, "--context", "720", "--alpha",
                        "0.6", "--k", "3", "--batch", "1-128"])
    knobs = cost.calibration(H100, "specdecode_bench")
    assert eagle["deployment"]["calibration"] == "specdecode_bench"
    assert eagle["deployment"]["calibration_note"].startswith("auto: H100-SXM's calibration 'specdecode_bench', "
                                                              "fitted to this setup")
    head = advise.drafter("eagle", LLAMA_3_8B, None, None)[0]
    assert eagle["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, head, H100, 1, 3, 0.6, 720, **knobs)
    # a change of tp, target or GPU values is another setup
    for extra in (["--tp", "2"], ["--bandwidth", "3000"]):
        other = advise.run(["--target", "Llama-3-8B", "--drafter", "eagle", "--gpu", H100, "--alpha", "0.6"] + extra)
        assert other["deployment"]["calibration"] is None, extra
    big = advise.run(["--target", "Llama-3-70B", "--drafter", "eagle", "--gpu", H100, "--tp", "4", "--alpha", "0.6"])
    assert "target 'Llama-3-70B' here, 'Llama-3.1-8B' in the fit" in big["deployment"]["calibration_note"]


def test_best_k_mode_turns_speculation_off_where_no_k_pays():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.6",
                    "--k", "best", "--batch", "1-4096", "--calibration", "none"])
    off = [row for row in r["rows"] if row["best_k"] == 0]
    assert off and all(row["k"] == 0 and row["speedup"] == 1.0 and row["c"] > 0 for row in off)
    assert all(row["iteration_ms"] == pytest.approx(row["plain_ms"]) for row in off)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in advise.render(r).splitlines()
             if line.startswith(f"| {off[0]['batch']} ")]
    assert cells[0][1:3] == ["0 (off)", "1.00"]  # columns B, best k, S
    assert min(row["batch"] for row in off) > r["paying_batches"][-1][1]


def test_tp_splits_the_heads_evenly_or_replicates_kv_heads():
    assert advise.tp_choices(LLAMA_3_8B) == [1, 2, 4, 8, 16, 32]  # 32 query heads, 8 KV heads
    assert advise.tp_choices(LLAMA_3_70B) == [1, 2, 4, 8, 16, 32, 64]
    assert advise.tp_choices(cost.ModelShape(2, 768, 12, 12, 3072, 1000)) == [1, 2, 3, 4, 6, 12]
    # 70B alone (n-gram lookup) takes tp = 64; with the 1B draft (32 query heads) on the same GPUs, 32 at most
    ngram = ["--target", "Llama-3-70B", "--drafter", "ngram", "--gpu", H100, "--alpha", "0.6", "--tp", "64"]
    r = advise.run(ngram)
    # tp = 64 > 8 KV heads: each GPU keeps one KV head (replicated), as cost.max_batch prices it
    assert r["max_batch"] == cost.max_batch(LLAMA_3_70B, cost.NGRAM, H100, 0, k=4, tp=64)
    with pytest.raises(validate.BadArgument, match=r"--tp must be one of 1, 2, 4, 8, 16, 32 here \(Llama-3-70B: 64 "
                       r"query heads, 8 KV heads; Llama-3.2-1B: 32 query heads, 8 KV heads\)"):
        advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.6",
                    "--tp", "64"])


def test_run_raises_instead_of_exiting():
    with pytest.raises(validate.BadArgument, match="unrecognized arguments: 1.75"):
        advise.run(DONE_WHEN + ["1.75"])


def test_unknown_calibration_is_named():
    with pytest.raises(validate.BadArgument, match="--calibration 'nope' does not exist for H100-SXM"):
        advise.run(DONE_WHEN + ["--calibration", "nope"], calibration_lookup=lambda a, n: {}["x"])


def test_drafter_kinds_map_to_the_cost_models():
    base = ["--target", "Llama-3-8B", "--gpu", H100, "--batch", "8", "--alpha", "0.6", "--calibration", "none"]
    eagle = advise.from_args(advise.parser().parse_args(base + ["--drafter", "eagle"]))
    head = eagle.draft
    assert (head.n_layers, head.d_model, head.n_kv_heads, head.d_ff, head.vocab) == (1, 4096, 8, 14336, 128256)
    assert head.params == LLAMA_3_8B.layer_params + 4096 * 128256  # one layer and the LM head, read each pass
    early = advise.from_args(advise.parser().parse_args(base + ["--drafter", "early-exit", "--exit-layer", "8"]))
    assert early.draft == cost.EarlyExit(8)
    r = advise.advise(early)
    assert r["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, cost.EarlyExit(8), H100, 8, 4, 0.6)
    ngram = advise.run(base + ["--drafter", "ngram", "--draft-overhead", "0.05"])
    assert ngram["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, cost.NGRAM, H100, 8, 4, 0.6,
                                                             draft_overhead=5e-5)
    assert ngram["rows"][0]["roofs"]["draft"] == {}
    assert ngram["max_batch"] == cost.max_batch(LLAMA_3_8B, cost.NGRAM, H100, 0, k=4)


def test_mean_accepted_length_is_converted_by_the_inverse():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--mean-accepted", "2.28"])
    assert cost.expected_tokens(r["deployment"]["alpha"], 4) == pytest.approx(2.28, rel=1e-12)
    best = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--k", "best",
                       "--mean-accepted", "3@2"])
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
                           "--gpu", H100, "--alpha", "0.7", "--calibration", "none"])
    assert by_shape["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, 0.7)
    with pytest.raises(ValueError, match="--target-shape: shape must be six positive integers"):
        advise.run(["--target-shape", "32,4096", "--drafter", "ngram", "--gpu", H100, "--alpha", "0.7"])
    r = advise.run(["--target", str(path), "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7",
                    "--calibration", "none"])
    assert r["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, 0.7)
    (tmp_path / "moe.json").write_text(json.dumps({**config, "num_local_experts": 8}))
    with pytest.raises(ValueError, match="mixture-of-experts"):
        advise.shape_from_config(tmp_path / "moe.json")
    (tmp_path / "gemma.json").write_text(json.dumps({**config, "head_dim": 256}))
    with pytest.raises(ValueError, match="head_dim=256"):
        advise.shape_from_config(tmp_path / "gemma.json")


def test_a_gpu_not_in_the_table():
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--bandwidth", "3350", "--peak", "989",
                    "--memory", "80", "--alpha", "0.8", "--batch", "1-64"])
    same = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8",
                       "--batch", "1-64", "--calibration", "none"])
    assert [x["speedup"] for x in r["rows"]] == [x["speedup"] for x in same["rows"]]
    assert r["max_batch"] == same["max_batch"] and r["deployment"]["gpu"]["name"] == "custom GPU"
    nomem = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--bandwidth", "3350", "--peak", "989",
                        "--alpha", "0.8"])
    assert nomem["max_batch"] is None and nomem["limit"] == advise.NO_MEMORY_LIMIT


@pytest.mark.parametrize("argv,says", [
    (["--alpha", "1.5"], "argument --alpha: must be a number in [0.0, 1.0], got 1.5"),
    (["--alpha", "high"], "argument --alpha: must be a number in [0.0, 1.0], got 'high'"),
    (["--gpu", "X100"], "--gpu must be one of T4, L4,"),
    (["--batch", "0-5"], "--batch must be an integer >= 1, got 0"),
    (["--batch", "64-8"], "--batch must be an integer >= 64, got 8"),
    (["--batch", "lots"], "--batch must be a positive integer or a range LO-HI"),
    (["--k", "many"], "--k must be an integer in [1, 64] or 'best'"),
    (["--drafter", "medusa"], "--drafter must be one of 'model', 'early-exit', 'ngram', 'eagle'"),
    (["--dtype", "fp8", "--gpu", "A100-80GB"], "--dtype must be one of 'bf16', 'fp16', 'tf32', 'fp32' on A100-80GB"),
    (["--tp", "2", "--gpu", "A10G"], "--tp > 1 needs the GPU's link bandwidth"),
    (["--tp", "0"], "argument --tp: must be an integer >= 1, got 0"),
    (["--tp", "two"], "argument --tp: must be an integer >= 1, got 'two'"),
    (["--tp", "3"], "--tp must be one of 1, 2, 4, 8, 16, 32 here (Llama-3-8B: 32 query heads, 8 KV heads): tp must "
                    "divide the query heads, and divide the KV heads or be a multiple of them"),
    (["--tp", "1000"], "--tp must be one of 1, 2, 4, 8, 16, 32 here"),
    (["--context", "1k"], "argument --context: must be an integer >= 0, got '1k'"),
    (["--weight-bits", "4.5"], "argument --weight-bits: must be an integer in [1, 16], got 4.5"),
    (["--memory", "0"], "argument --memory: must be a number > 0, got 0"),
    (["--plot", "/nonexistent/x.png"], "--plot must be a file in a folder that exists and is writable; "
                                       "'/nonexistent' does not exist"),
    (["--plot", "x.xyz"], "--plot must end in one of .eps,"),
    (["--plot", "x"], "--plot must end in one of .eps,"),
    (["--context", "-1"], "argument --context: must be an integer >= 0, got -1"),
    (["--mean-accepted", "9"], "--mean-accepted must be in [1, 5]"),
    (["--overlap", "some"], "--overlap must be one of 'kernel', 'pass', 'none'"),
    (["--overhead", "-1"], "argument --overhead: must be a number >= 0, got -1"),
    (["--target-shape", "32,4096,32,8,14336,128256"], "--target and --target-shape exclude each other"),
])
def test_bad_input_names_the_flag_and_exits_2(argv, says, capsys):
    base = {"--target": "Llama-3-8B", "--draft": "Llama-3.2-1B", "--gpu": H100, "--alpha": "0.7"}
    if "--mean-accepted" in argv:
        base.pop("--alpha")
    for flag in argv[::2]:
        base.pop(flag, None)
    args = [x for kv in base.items() for x in kv] + argv
    with pytest.raises(SystemExit) as exit_:
        advise.main(args)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert "usage: python -m specnotes.advise" in err and says in err, err
    assert out == ""  # nothing computed or printed first (--plot is checked before the report)


@pytest.mark.parametrize("argv,says", [
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7"], "--draft is required with drafter 'model'"),
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7", "--drafter", "early-exit"],
     "--exit-layer is required with drafter 'early-exit' (1..31)"),
    (["--target", "Llama-3-8B", "--gpu", H100, "--alpha", "0.7", "--drafter", "early-exit", "--exit-layer", "32"],
     "--exit-layer must be an integer in [1, 31], got 32"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--alpha", "0.7"], "--gpu: give a GPU from the table"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100],
     "--alpha or --mean-accepted: give one of them"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--k", "best", "--mean-accepted", "2"],
     "--mean-accepted needs the k it was measured at"),
    (["--target", "GPT-5", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7"],
     "--target must be one of 'Llama-3-8B', 'Llama-3-70B', 'Llama-3.2-1B' or the path of a Hugging Face config.json"),
    (["--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7"], "--target is required"),
])
def test_missing_or_inconsistent_input_is_named(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        advise.main(argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("argv,starts", [
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8", "--calibration", "none"],
     "Turn it on below B = 160, off above"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.0"], "Leave it off"),
    (["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8"], "It does not fit"),
    (["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--context", "8192", "--alpha", "0.8"],
     "Turn it on at every batch that fits (1–45)"),
    # self-speculation with a 512-token draft window at L = 32768 (MagicDec): pays only above a batch
    (["--target", "Llama-3-8B", "--draft", "Llama-3-8B", "--gpu", H100, "--memory", "2000", "--context", "32768",
      "--draft-context", "512", "--k", "3", "--alpha", "0.8", "--batch", "1-256"], "Turn it on above B = "),
])
def test_recommendation_is_chosen_by_the_numbers(argv, starts):
    r = advise.run(argv + ["--calibration", "none"] if "--calibration" not in argv else argv)
    assert r["recommendation"].startswith(starts), r["recommendation"]
    if starts.startswith("Turn it on below"):
        assert r["crossover_batch"] == cost.crossover_batch(LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8) == 160
    if starts.startswith("Turn it on above"):
        first = r["paying_batches"][0][0]
        assert cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, H100, first - 1, 3, 0.8, 32768, draft_context=512) <= 1
        assert cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, H100, first, 3, 0.8, 32768, draft_context=512) > 1


def test_leave_it_off_points_to_another_k_that_pays():
    # α = 0.4: k = 4 never pays with a 1B draft on an H100, but k = 1 or 2 does at small batch
    argv = ["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.4", "--batch", "1-64",
            "--calibration", "none"]
    r = advise.run(argv)
    best = advise.run(argv + ["--k", "best"])
    assert r["paying_batches"] == [] and any(row["best_speedup"] > 1 for row in r["rows"])
    assert r["best_k_paying_batches"] == best["paying_batches"] == [[1, 182]]
    first = max(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 182, k, 0.4) for k in range(1, 17))
    after = max(cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 183, k, 0.4) for k in range(1, 17))
    assert first > 1 >= after  # the range's end, by a scan over k
    assert r["recommendation"].startswith("Leave k = 4 off: it does not pay at any batch from 1 to")
    assert "with the best k at each batch (`--k best`) speculation pays for B in 1–182" in r["recommendation"]
    assert "Raise α" not in r["recommendation"]
    nothing = advise.run(argv[:-6] + ["--alpha", "0.0", "--calibration", "none"])
    assert nothing["best_k_paying_batches"] == [] and "Raise α" in nothing["recommendation"]


def test_memory_sentences_tell_weights_from_one_sequences_cache():
    # L = 1,000,000: the weights fit (18.5 GB), one sequence's caches (~164 GB) do not
    long = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7",
                       "--context", "1000000", "--calibration", "none"])
    assert long["max_batch"] == 0 and long["weights_per_gpu"] < 80e9
    text = advise.render(long)
    assert long["recommendation"].startswith("It does not fit: the weights fit (18.5 GB of 80 GB per GPU with tp = 1), "
                                             "but not one sequence's KV caches at L = 1000000 beside them.")
    assert "the weights fit (18.5 GB of 80 GB per GPU), but not one sequence's KV caches at L = 1000000" in text
    assert "weights alone" not in text and "(1–0)" not in text
    assert "**Where it pays**: nowhere: not one sequence fits in memory." in text
    big = advise.run(["--target", "Llama-3-70B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.8"])
    assert big["weights_per_gpu"] == LLAMA_3_70B.memory_bytes + LLAMA_3_2_1B.memory_bytes > 80e9
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
    assert advise.run(argv + ["--batch", "100-2000"])["warnings"] == []  # some of them fit


def test_plot_shades_the_paying_range(tmp_path):
    out = cli(*DONE_WHEN, "--plot", str(tmp_path / "s.png"))
    assert out.returncode == 0 and (tmp_path / "s.png").stat().st_size > 10_000
    import matplotlib

    matplotlib.use("Agg")
    r = advise.run(["--target", "Llama-3-8B", "--draft", "Llama-3.2-1B", "--gpu", H100, "--batch", "1-512",
                    "--context", "8192", "--alpha", "0.8", "--calibration", "none"])
    ax = advise.plot(r)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "speculation pays (S > 1)" in labels and "does not fit in memory" in labels
    assert any(label.startswith("model: Llama-3-8B + Llama-3.2-1B") for label in labels)
    spans = [p for p in ax.patches if p.get_label() == "speculation pays (S > 1)"]
    assert len(spans) == 1 and spans[0].get_x() == 1 and spans[0].get_width() == 45 - 1


def test_progress_bar_goes_to_stderr(capsys):
    dep = advise.from_args(advise.parser().parse_args(DONE_WHEN))
    advise.advise(dep, progress=True)
    captured = capsys.readouterr()
    assert "S(B) curve" in captured.err and captured.out == ""


def test_json_schema_keys_are_the_documented_ones(done_when_json):
    r = done_when_json
    assert set(r) == {"schema", "deployment", "max_batch", "limit", "weights_per_gpu", "rows", "paying_batches",
                      "best_k_paying_batches", "idealized_paying_batches", "crossover_batch", "curve", "warnings",
                      "recommendation", "checklist", "quote"}
    for key in r:
        assert f'"{key}"' in advise.__doc__, key
    assert set(r["rows"][0]) == {"batch", "fits", "k", "speedup", "best_k", "best_speedup", "idealized_speedup", "c",
                                 "plain_ms", "iteration_ms", "plain_tokens_per_s", "spec_tokens_per_s", "roofs"}
    for key in r["deployment"]:
        assert f'"{key}"' in advise.__doc__, key  # every key is in the documented schema
    assert [item for item, _ in r["checklist"]][:3] == ["k", "α, and how it was measured", "B"]


def test_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from specnotes import advise, exercises\n"
            "r = advise.run('--target Llama-3-8B --draft Llama-3.2-1B --gpu H100-SXM --alpha 0.7'.split())\n"
            "assert exercises.check('ch4.p3', exercises.answer('ch4.p3'))\n"
            "print(advise.render(r)[:20])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_form_runs_the_same_command_line():
    import matplotlib

    matplotlib.use("Agg")
    box = advise.form()
    assert box.last == advise.run(advise.form_argv({n: c.value for n, c in box.controls.items()}))
    # "auto": the H100's calibration was fitted to an EAGLE head, not a draft model: the idealized model
    assert box.last["deployment"]["calibration"] is None
    assert box.last["rows"][0]["speedup"] == cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 4, 0.7, 2048)
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

    root = Path(__file__).resolve().parents[1]
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
    reports = [c for c in cells if c["cell_type"] == "code" and "advise.render(" in "".join(c["source"])]
    assert len(reports) == 5
    for c in reports:
        assert c["metadata"]["mystnb"]["markdown_format"] == "gfm" and "hide-input" in c["metadata"]["tags"]
        assert c["metadata"]["mystnb"]["image"]["alt"].startswith("Plot of ")  # the plot says what it shows
    # the page shows both: reports the calibration does not fit (the idealized model) and one it was fitted to
    calibrations = [re.search(r"calibration'\] (?:is None|== '(\w+)')", "".join(c["source"])) for c in reports]
    assert all(calibrations) and {m.group(1) for m in calibrations} == {None, "specdecode_bench"}
