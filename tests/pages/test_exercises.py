"""Every checker against its reference answer and its typical wrong answers; the reference answers
against values derived by hand (each comment says how)."""

import json
import math
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from specnotes.analytic import cost
from specnotes.pages import exercises
from specnotes.serve import serving

ROOT = Path(__file__).resolve().parents[2]
GB, TB, T = 1e9, 1e12, 1e12

# matmul parameters by hand: layers · (q,o 2d² + k,v 2·d·d_kv + gated MLP 3·d·d_ff) + LM head d·V
P_70B = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 8192 * 128256
P_8B = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 4096 * 128256
P_1B = 16 * (2 * 2048**2 + 2 * 2048 * 512 + 3 * 2048 * 8192) + 2048 * 128256
H100_BW, H100_PEAK, H200_BW = 3.35 * TB, 989 * T, 4.8 * TB  # datasheets (hardware.py cites them)
NVLINK_H200 = 900 * GB  # H200 SXM NVLink, both directions


def early(problem_id: str) -> bool:
    """A problem of Chapters 1 to 4 (ch10's ids also start with "ch1")."""
    return problem_id.split(".")[0] in {"ch1", "ch2", "ch3", "ch4"}


def en(alpha, k):  # 1 + α + ... + α^k
    return sum(alpha**i for i in range(k + 1))


def memory_bound_best_k(alpha, c, k_max=10):
    return max(range(1, k_max + 1), key=lambda k: en(alpha, k) / (1 + k * c))


def roofline_best_k(batch, alpha, bw, peak, k_max=10):
    # L = 0: each pass is max(weight read, matmul FLOPs); attention over a few new tokens is negligible
    t = lambda p, n: max(2 * p / bw, 2 * p * batch * n / peak)
    return max(range(1, k_max + 1), key=lambda k: en(alpha, k) * t(P_8B, 1) / (k * t(P_1B, 1) + t(P_8B, k + 1)))


def tp2_pass(params, layers, d_model, tokens, bw, peak, link):
    # one of two devices: half the weight bytes (2P/2) and half the FLOPs (2P·tokens/2), plus two
    # all-reduces per layer of the [tokens, d_model] bf16 activations, each sending 2(tp−1)/tp = 1 message
    # at half the datasheet link bandwidth (which counts both directions); attention at L = 0 is negligible
    return max(params / bw, params * tokens / peak) + 2 * layers * tokens * d_model * 2 / (link / 2)


def alpha_by_roots(mean, k):
    coeffs = [1.0] * (k + 1)
    coeffs[-1] -= mean  # α^k + ... + α + (1 − E[N]) = 0
    roots = np.roots(coeffs)
    return next(r.real for r in roots if abs(r.imag) < 1e-12 and 0 <= r.real <= 1)


HAND = {
    "ch1.p1a": 1e3 * 2 * P_70B / H200_BW,  # w·P/BW, KV write at L = 0 negligible
    "ch1.p1b": 1e3 * P_70B / H200_BW,
    "ch1.p1c": H200_BW / (2 * P_70B),
    "ch1.p2": 1979 * T / H100_BW * 1 / 2,  # ridge · w/2
    "ch1.p3a": 1e3 * 2 * P_1B / (320 * GB),
    "ch1.p3b": 65 * T / (320 * GB),
    "ch1.p4": 1e-3 * H100_BW / 2 / 1e9,
    "ch2.p1a": math.floor(989 * T / H200_BW / 8),  # 25.76: B = 26 would put 208 tokens past the ridge of 206
    "ch2.p1b": math.floor(312 * T / (2039 * GB) / 8),
    "ch2.p2a": 1e3 * 4 * 2 * P_1B / H100_BW,
    "ch2.p2b": 1e3 * 2 * P_1B / H100_BW,
    "ch3.p1a": alpha_by_roots(2.28, 4),
    "ch3.p1b": alpha_by_roots(2.28, 8),
    "ch3.p2a": 0.8,  # Leviathan Cor. 3.9: k = 1 pays iff c < α
    "ch3.p2b": max(range(1, 65), key=lambda k: en(0.8, k) / (1 + 0.5 * k)),
    "ch4.p1a": 989 / 3.35 * (en(0.8, 4) - 4 * P_1B / P_70B) / 5,
    "ch4.p2a": roofline_best_k(64, 0.8, H100_BW, H100_PEAK),
    "ch4.p2b": memory_bound_best_k(0.8, P_1B / P_8B),
    # two H200s, tp = 2 (the H200 has the H100's compute): 70B has 80 layers of width 8192, the 1B 16 of 2048
    "ch4.p3": en(0.7, 3) * tp2_pass(P_70B, 80, 8192, 96, H200_BW, H100_PEAK, NVLINK_H200) / (
        3 * tp2_pass(P_1B, 16, 2048, 96, H200_BW, H100_PEAK, NVLINK_H200)
        + tp2_pass(P_70B, 80, 8192, 384, H200_BW, H100_PEAK, NVLINK_H200)),
}
CHOICES = {"ch2.p3": "b", "ch3.p3": "a", "ch8.p4": "a", "ch9.p3": "a", "ch9.p4": "a"}


def test_every_problem_of_chapters_1_to_4_has_a_checker():
    chapters = {p.chapter for p in exercises.PROBLEMS.values()}
    assert {"01_roofline_decode", "02_draft_and_verify", "03_acceptance", "04_batch_size"} <= chapters
    by_hand = set(HAND) | {p for p in CHOICES if early(p)} | {"ch4.p1b", "ch1.p1d"}
    assert by_hand == {p for p in exercises.PROBLEMS if early(p)}


def test_chapter_5_answers_by_hand():
    kv_70b = 2 * 80 * 8 * 128 * 2  # K and V, 80 layers, 8 KV heads of 128, bf16: 327,680 bytes per token
    assert exercises.answer("ch5.p1a") == pytest.approx(2 * P_70B / (32 * kv_70b))
    assert exercises.answer("ch5.p1b") == 2 * (64 // 8) * 5 / 2  # 2·g·n / kv_bytes
    assert exercises.answer("ch5.p2a") == 3 * 512 / 32768  # the draft's cache is the target's, per token
    assert exercises.answer("ch5.p2b") == pytest.approx(en(0.8, 3) / (1 + 3 * 512 / 32768))
    # L4, 24 GB: the 8B's weights (untied embedding) + the 1B's (tied), then 128 + 32 KiB per token of both caches
    weights = 2 * (P_8B + 4096 * 128256) + 2 * P_1B
    assert exercises.answer("ch5.p3a") == math.floor((24e9 - weights) / ((131072 + 32768) * (256 + 5))) == 127
    # speculation at 127 sequences against plain decoding at as many as fit without the draft
    plain_b = math.floor((24e9 - 2 * (P_8B + 4096 * 128256)) / (131072 * 257))
    plain = plain_b / cost.pass_time(cost.LLAMA_3_8B, "L4", plain_b, 1, 256)
    spec = 127 * en(0.8, 4) / cost.iteration_time(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "L4", 127, 4, 256)
    assert exercises.answer("ch5.p3b") == pytest.approx(spec / plain)
    assert exercises.answer("ch5.p3b") < 1 < cost.batch_speedup(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "L4", 127, 4, 0.8,
                                                                256)


def test_chapter_1_problem_1_which_fits_by_hand():
    # the H200's 141 GB: bf16 weights 2·(P + embedding d·V) leave nothing; fp8 halves them, and a 1,024-token
    # sequence's fp8 cache (80 layers · 8 KV heads · 128 · K and V, 1 byte) fits beside them
    bf16, fp8 = 2 * (P_70B + 8192 * 128256), P_70B + 8192 * 128256
    assert bf16 > 141 * GB and fp8 + 1025 * 2 * 80 * 8 * 128 < 141 * GB
    assert exercises.answer("ch1.p1d") == "fp8"
    assert exercises.check("ch1.p1d", "FP8") and not exercises.check("ch1.p1d", "both")
    with pytest.raises(ValueError, match="value must be one of 'neither', 'bf16', 'fp8', 'both'"):
        exercises.check("ch1.p1d", "yes")


def test_chapter_5_speedups_as_the_chapter_glues_them():
    # Problem 2(b): Llama-3-8B drafting itself with a 512-token window, k = 3, α = 0.8, L = 32,768, on an H100.
    # B = 1 is memory-bound throughout: each pass reads the weights (2P) and its cache, the draft's of 512 tokens
    kv, L, W = 2 * 32 * 8 * 128 * 2, 32768, 512
    decode = 2 * P_8B + kv * (L + 1)
    drafts = sum(2 * P_8B + kv * (W + i + 1) for i in range(3))
    assert exercises.answer("ch5.p2d") == pytest.approx(en(0.8, 3) * decode / (drafts + 2 * P_8B + kv * (L + 4)))
    for pid, batch in (("ch5.p2d", 1), ("ch5.p2e", 64)):  # the chapter's glue, p2_s1 and p2_s64
        assert exercises.answer(pid) == cost.batch_speedup(cost.LLAMA_3_8B, cost.LLAMA_3_8B, "H100-SXM", batch, 3, 0.8,
                                                           32768, draft_context=512)
    assert exercises.answer("ch5.p2d") < 1 < exercises.answer("ch5.p2e")  # it pays only above a batch
    # Problem 3: S at the 127 sequences that fit on the L4 (glue p3_s)
    assert exercises.answer("ch5.p3c") == cost.batch_speedup(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "L4",
                                                             exercises.answer("ch5.p3a"), 4, 0.8, 256)
    assert exercises.answer("ch5.p3b") < 1 < exercises.answer("ch5.p3c")
    # Problem 4: the logits' bound 4·V·ridge/P for the 1B draft, in % (the H100's bf16 ridge, 989/3.35)
    assert exercises.answer("ch5.p4b") == pytest.approx(100 * 4 * 128256 * (989 / 3.35) / P_1B, rel=1e-12)
    assert exercises.answer("ch5.p4") < exercises.answer("ch5.p4b")


def test_chapter_6_answers_from_the_data_files_and_the_hints_facts():
    # Problem 1 from the stored calibration and the published setup, read as plain JSON
    data = ROOT / "src" / "specnotes" / "data"
    h100 = json.loads((data / "calibrations.json").read_text())["H100-SXM"]
    knobs = h100[h100["specdecode_bench"]["alias_of"]]["knobs"]
    series = json.loads((data / "published" / "specdecode_bench.json").read_text())["series"]
    tokens = next(x for x in series if x["id"] == "fig1c_eagle3")["setup"]["tokens_per_iteration"]
    # a 32-layer target pass and a one-layer EAGLE-3 draft pass, each at its fixed costs
    t_target = knobs["overhead"] + 32 * knobs["layer_overhead"]
    t_draft = knobs["draft_overhead"] + knobs["layer_overhead"]
    assert exercises.answer("ch6.p1a") == pytest.approx(tokens * t_target / (t_target + 3 * t_draft), rel=1e-12)
    # Problem 2: a shorter draft window can only make the draft cheaper
    assert exercises.answer("ch6.p2a") > exercises.answer("ch6.p2b") > exercises.answer("ch6.p2c")
    # Problem 3's hints state facts about the fit: "none" wins, "pass" fits worst and sits at the 20 ms bound
    fit = exercises.your_engine_fit()
    rms = {mode: v["rms_log"] for mode, v in fit.by_overlap.items()}
    assert fit.knobs["overlap"] == "none" and max(rms, key=rms.get) == "pass"
    assert fit.by_overlap["pass"]["knobs"]["overhead"] == pytest.approx(0.02)
    # Problem 3's t0, fitted as the chapter fits it (glue p3_t0): its own cases, calibrate.fit
    from specnotes.record import calibrate

    head = calibrate.cases("specdecode_bench", "fig1c_eagle3")[0]
    yours = [calibrate.Case(f"batch={b}", head.target, head.draft, "H100-SXM", b, 3, cost.implied_alpha(2.4, 3), 1000,
                            None, 1, s) for b, s in zip((1, 16, 64, 128), (1.90, 1.80, 1.52, 1.20), strict=True)]
    assert exercises.answer("ch6.p3d") == 1e3 * calibrate.fit(yours).knobs["overhead"]
    assert exercises.answer("ch6.p3b") == 1e3 * calibrate.fit(yours).knobs["draft_overhead"]
    assert exercises.answer("ch6.p3d") == 0.0  # the fit puts t0 at its lower bound: the draft passes carry the overhead
    assert str(exercises.check("ch6.p3d", 0.5)) == "not right (ch6.p3d): too high (the answer is in ms)"


def test_chapter_8_answers_by_hand():
    assert exercises.answer("ch8.p1a") == pytest.approx(6 * 300 * 0.020)  # B = λ · N_out · TPOT: 36 requests
    assert exercises.answer("ch8.p1b") == pytest.approx(6 * 300 * 0.012)
    # Problems 2 and 3 from the fitted pool's step times, by scanning B with E[N] summed by hand
    pool = serving.fit_blog_pool()
    n, a, step = pool.requests_tokens, pool.alpha, pool.step

    def capacity(k_of):  # requests/s: B · E[N] / (N_out · T_step), at its best B ≤ 256
        return max(b * en(a, k_of(b)) / (n * step(b, k_of(b))) for b in range(1, 257))

    def best_k(b):  # the largest goodput B · E[N] / T_step over k = 0..6
        return max(range(7), key=lambda k: b * en(a, k) / step(b, k))

    assert exercises.answer("ch8.p2a") == pytest.approx(capacity(lambda b: 0), rel=1e-12)
    assert exercises.answer("ch8.p2b") == pytest.approx(capacity(lambda b: 4), rel=1e-12)
    assert exercises.answer("ch8.p2c") == pytest.approx(capacity(best_k), rel=1e-12)
    # the flag: one past the last batch at which k = 4 beats plain decoding
    flag = 1 + max(b for b in range(1, 257) if en(a, 4) / step(b, 4) > 1 / step(b, 0))
    assert exercises.answer("ch8.p3a") == flag
    assert exercises.answer("ch8.p3b") == pytest.approx(flag / (n * step(flag, 0)), rel=1e-12)


def test_chapter_11_answers_by_hand():
    ridge = cost.accelerator("H100-SXM").ridge("bf16")  # 989.4 TFLOP/s over 3.35 TB/s
    assert exercises.answer("ch11.p1a") == pytest.approx(ridge / 16)
    assert exercises.answer("ch11.p1b") == pytest.approx(ridge / 4)
    assert exercises.answer("ch11.p1c") == 4
    # survivals 0.80, 0.60, 0.45, 0.30: E[N] = 1 + their sum; α_3 = 0.45 / 0.60; i.i.d. at 0.80 over k = 4
    assert exercises.answer("ch11.p2a") == pytest.approx(3.15)
    assert exercises.answer("ch11.p2b") == pytest.approx(0.75)
    iid = (1 - 0.8**5) / 0.2
    assert exercises.answer("ch11.p2c") == pytest.approx(100 * (iid / 3.15 - 1))
    # A: 0.9, 0.8, 0.7; B: 0.3, 0.1, 0.05; 1 + 0.2 S ms. S = 3 (A's three): (2 + 2.4) / 1.6 = 2.75 tokens/ms;
    # S = 4 adds B's 0.3: (2 + 2.7) / 1.8 = 2.61; S = 2: (2 + 1.7) / 1.4 = 2.64
    assert (exercises.answer("ch11.p3a"), exercises.answer("ch11.p3b")) == (3, 0)
    assert exercises.answer("ch11.p3c") == pytest.approx(2.75)
    # one k for both: k = 1 gives (2 + 1.2) / 1.4 = 2.286, the best of k = 0..3
    assert exercises.best_fixed_rate() == pytest.approx(3.2 / 1.4)


def test_chapter_9_answers_by_hand():
    # 1,000 tokens: 998 servable (the last prompt token, the drafter's lag), 62 blocks of 16, one dropped;
    # 1,648-token blocks: none whole; 5,000 tokens: 4,998 servable, 3 whole blocks, one dropped
    assert [exercises.answer(f"ch9.p1{x}") for x in "abcde"] == [61 * 16, 16, 0, 2 * 1648, 1648]
    # Llama-3-70B on an H100: a 1,648-token prefill after 4,096 is compute-bound (2P per token plus attention,
    # 4·layers·d per token pair, over L + n/2 positions on average); a batch-1 decode step reads 2P bytes and
    # the bf16 cache (2 · 80 layers · 8 KV heads · 128 · 2 bytes per token)
    n, L = 1648, 4096
    prefill = (2 * P_70B * n + 4 * 80 * 8192 * n * (L + n / 2)) / H100_PEAK
    decode = (2 * P_70B + L * 2 * 80 * 8 * 128 * 2) / H100_BW
    assert exercises.answer("ch9.p2a") == pytest.approx(prefill / decode, rel=1e-3)
    assert exercises.answer("ch9.p2b") == pytest.approx(100 * prefill / decode / 200, rel=1e-3)


@pytest.mark.parametrize("pid", sorted(HAND))
def test_reference_answers_match_hand_derivations(pid):
    assert exercises.answer(pid) == pytest.approx(HAND[pid], rel=2e-3)


def test_crossover_answer_matches_a_full_scan():
    # the first B with S ≤ 1 (S falls with B at L = 0), scanned batch by batch, on two H100s
    first = next(b for b in range(1, 1000) if cost.batch_speedup(cost.LLAMA_3_70B, cost.LLAMA_3_2_1B, "H100-SXM", b,
                                                                 4, 0.8, tp=2) <= 1)
    assert exercises.answer("ch4.p1b") == first
    # and the problem's premise: the 70B's bf16 weights fit on two H100s, not on one
    assert cost.max_batch(cost.LLAMA_3_70B, cost.LLAMA_3_2_1B, "H100-SXM", 0, k=4) == 0
    assert cost.max_batch(cost.LLAMA_3_70B, cost.LLAMA_3_2_1B, "H100-SXM", 0, k=4, tp=2) > 1000
    assert cost.max_batch(cost.LLAMA_3_70B, cost.LLAMA_3_2_1B, "H200", 0, k=3) == 0  # Problem 3's premise
    assert cost.max_batch(cost.LLAMA_3_70B, cost.LLAMA_3_2_1B, "H200", 0, k=3, tp=2) > 96


@pytest.mark.parametrize("pid", sorted(exercises.PROBLEMS))
def test_checker_says_right_for_the_reference_and_names_each_mistake(pid):
    p = exercises.PROBLEMS[pid]
    ref = p.answer()
    assert exercises.check(pid, ref).right
    assert p.mistakes, f"{pid} lists no typical mistake"
    for mistake in p.mistakes:
        wrong = mistake.value()
        verdict = exercises.check(pid, wrong)
        assert not verdict.right and mistake.hint in verdict.message, (pid, wrong, verdict)


@pytest.mark.parametrize("pid", sorted(CHOICES))
def test_multiple_choice(pid):
    assert exercises.answer(pid) == CHOICES[pid]
    assert exercises.check(pid, CHOICES[pid].upper())  # case does not matter
    with pytest.raises(ValueError, match="value must be one of 'a', 'b', 'c', 'd'"):
        exercises.check(pid, "e")


def test_rounded_answers_pass_and_tolerances_hold():
    assert exercises.check("ch1.p1a", 29.0)  # the folded answer rounds to 29.0 ms
    assert exercises.check("ch2.p1a", 25) and exercises.check("ch2.p1a", 25.76)  # "up to B = 25", or ridge/8 itself
    assert "rounded up" in str(exercises.check("ch2.p1a", 26))  # 26 × 8 = 208 tokens: past the ridge of 206
    assert not exercises.check("ch4.p1b", 194)  # exact: one less than the table
    assert exercises.check("ch4.p2a", 3.0)  # an integral float is the integer


@pytest.mark.parametrize("pid,value,says", [
    ("ch4.p1a", 971, "off by a factor of k + 1: did you use B + k?"),  # the example
    ("ch1.p1a", 0.02896, "off by a factor of 1,000 (too small): check the units (the answer is in ms)"),
    ("ch1.p4", 1.675e9, "off by a factor of 1,000,000,000 (too large)"),
    ("ch4.p3", 1 / 1.2661, "reciprocal"),
    ("ch3.p2a", 1.6, "off by a factor of 2 (too high)"),
    ("ch4.p1b", 190, "off by one (too high)"),
    ("ch4.p3", 1.22, "close, but outside the tolerance (±2%)"),
    ("ch1.p1a", -29, "the answer is positive"),
    ("ch1.p3b", 1000, "too high"),
])
def test_generic_diagnoses(pid, value, says):
    verdict = exercises.check(pid, value)
    assert not verdict and says in str(verdict)


def test_bad_ids_and_values_are_named():
    with pytest.raises(ValueError, match=r"ch4\.p1 has parts: .*ch4\.p1a .*ch4\.p1b"):
        exercises.check("ch4.p1", 195)
    with pytest.raises(ValueError, match="problem must be one of ch1.p1a"):
        exercises.check("ch99.p1", 1)
    with pytest.raises(TypeError, match="value must be a finite number"):
        exercises.check("ch1.p1a", "29 ms")


def test_registry_lists_id_chapter_summary_and_takes_one_entry():
    listed = exercises.problems("04_batch_size")
    assert [pid for pid, _, _ in listed] == ["ch4.p1a", "ch4.p1b", "ch4.p2a", "ch4.p2b", "ch4.p3"]
    assert all(summary for _, _, summary in exercises.problems())
    extra = exercises.Problem("ch5.p1", "05_context_length", "a new chapter's problem (GB)", partial(float, 2.0),
                              "GB", mistakes=(exercises.Mistake(partial(float, 4.0), "K and V are two tensors"),))
    try:
        exercises.register(extra)
        assert exercises.check("ch5.p1", 2.0) and "two tensors" in str(exercises.check("ch5.p1", 4.0))
        with pytest.raises(ValueError, match="already registered"):
            exercises.register(extra)
    finally:
        exercises.PROBLEMS.pop("ch5.p1", None)


@pytest.mark.parametrize("chapter", ["01_roofline_decode", "02_draft_and_verify", "03_acceptance", "04_batch_size",
                                     "05_context_length", "06_published_record", "07_cheaper_drafters",
                                     "08_serving", "09_kv_reuse", "10_sparse_targets", "11_engines_since"])
def test_every_problem_has_a_check_cell_in_its_chapter(chapter):
    cells = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert exercises.problems(chapter)
    for pid, _, _ in exercises.problems(chapter):
        assert f'exercises.check("{pid}"' in code, pid  # the reader's example call
        assert f"`{pid}`" in text, pid  # and the line that tells them how
        choices = exercises.PROBLEMS[pid].choices
        if not choices:  # the hidden cell that ties the glued answer to it
            assert f'exercises.answer("{pid}")' in code, pid
        for letter, statement in choices.items():  # lettered choices: the chapter lists the checker's statements
            assert len(letter) > 1 or f"({letter}) {statement}" in " ".join(text.split()), (pid, letter)


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
def test_every_problem_heading_of_a_chapter_has_a_checker(chapter):
    # the notebook → checker direction: each "**Problem N [...]" has at least one chX.pN* id registered
    import re

    cells = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    numbers = sorted(set(re.findall(r"\*\*Problem (\d+) \[", text)), key=int)
    assert numbers, f"{chapter} has no '**Problem N [' heading"
    ids = [pid for pid, _, _ in exercises.problems(chapter)]
    chapter_number = int(chapter[:2])
    for n in numbers:
        assert any(re.fullmatch(rf"ch{chapter_number}\.p{n}[a-z]?", pid) for pid in ids), (chapter, n)


def test_spec_bench_value_is_chapter_3s():
    # the Spec-Bench leaderboard's SpS row, read as plain JSON (2.28 mean accepted tokens), and the chapter's table
    series = json.loads((ROOT / "src" / "specnotes" / "data" / "published" / "spec_bench.json").read_text())["series"]
    sps = next(x for x in series if x["id"] == "a100_vicuna7b_sps")["values"]["mean_accepted_tokens"]
    assert sps == exercises.SPEC_BENCH_SPS_MEAN_ACCEPTED == 2.28
    cells = json.loads((ROOT / "notebooks" / "03_acceptance.ipynb").read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells)
    assert '"a100_vicuna7b_sps"' in source and 'published.load("spec_bench")' in source
    assert math.isclose(cost.expected_tokens(exercises.answer("ch3.p1a"), 4), exercises.SPEC_BENCH_SPS_MEAN_ACCEPTED)


def test_check_all_counts_and_explains(capsys):
    verdicts = exercises.check_all({"ch4.p1a": 194, "ch4.p1b": 160, "ch2.p3": "b"})
    assert [bool(v) for _, v in verdicts] == [True, False, True]
    out = capsys.readouterr().out
    assert "2 of 3 right" in out and "✗ not right (ch4.p1b): that is the 8B target's B*" in out


def test_onboarding_page_uses_real_ids_and_shows_real_checker_output():
    import re

    text = (ROOT / "book" / "onboarding.md").read_text()
    ids = set(re.findall(r"`(ch\d\.p\d[a-z]?)`", text))
    assert ids <= set(exercises.PROBLEMS)
    chapters_1_to_4 = {p for p in exercises.PROBLEMS if early(p)}
    assert chapters_1_to_4 <= ids  # every problem of Chapters 1-4 is on the route or named as a second pass
    route = text.split("## The route")[1].split("\n\n")[1]  # the table
    on_route = set(re.findall(r"`(ch\d\.p\d[a-z]?)`", route))
    assert {p[2] for p in on_route} == set("12345689")  # and one problem from each later chapter with checkers
    for chapter in {p.split(".")[0] for p in exercises.PROBLEMS}:  # every chapter's checkers are named on the page
        assert f"`{chapter}.*`" in text or any(i.startswith(f"{chapter}.") for i in ids), chapter
    minutes = [tuple(map(int, m)) for m in re.findall(r"^\| (\d+)–(\d+) \|", route, re.M)]
    assert minutes[0][0] == 0 and minutes[-1][1] == 90
    assert all(a[1] == b[0] for a, b in zip(minutes, minutes[1:], strict=False))  # 90 minutes, no gap
    shown = re.findall(r'exercises\.check\("([^"]+)", ([^)]+)\)\s+# (.+?)(?: \.\.\.)?\n', text)
    assert shown
    for pid, value, message in shown:
        assert str(exercises.check(pid, float(value))).startswith(message), (pid, value)
    for pid, value in re.findall(r'"(ch\d\.p\d[a-z]?)": ([\d.]+)', text):  # the lead's example parses
        exercises.check(pid, float(value))
