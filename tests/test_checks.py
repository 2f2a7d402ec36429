"""measure.checks on synthetic sweeps of the three kinds of device the book runs on, and on wrong
inputs they must reject.

Each regime is a table of fastest-sample pass times (ms) per batch, as Chapters 2 and 4 measure them,
with the model's values next to them. Every expected verdict below is worked out by hand in the
comments from these tables; none comes from running the checks' own formulas.
"""

import pytest

from specnotes import hardware, stack
from specnotes.measure import checks

E_N = 3.3616  # (1 - 0.8**5) / (1 - 0.8): alpha = 0.8, k = 4
K = 4


def speedups(decode, verify, draft):
    return [E_N * d / (K * q + v) for d, v, q in zip(decode, verify, draft, strict=True)]


# A CPU without bf16 units (ridge 0.8 FLOP/byte): Chapter 4's stored outputs. S = 0.90, 0.87, 0.72, 0.72, 0.68.
NEVER = {
    "batches": [1, 2, 4, 8, 16],
    "decode": [21.989, 35.851, 50.701, 96.052, 179.008],
    "verify": [71.025, 120.825, 203.960, 391.475, 775.139],
    "draft": [2.756, 4.519, 8.018, 14.568, 28.580],
    "model_s": [0.66, 0.64, 0.63, 0.62, 0.62],  # everything compute-bound: flat
    "model_vd": [4.3, 4.6, 4.8, 4.9, 4.95],
    "model_decode": [11.4, 22.0, 43.0, 86.0, 171.0],  # 180 MFLOP per token at 17 GFLOP/s, + 0.81 ms
    "model_verify": [53.8, 106.8, 212.8, 424.8, 848.8],
    "critical_batch": 0.8, "ridge": 0.8, "stop": "done",
}
# A CPU with bf16 matrix units (critical batch 20 tokens): pays, crosses between B = 16 and 32.
# S = 2.09, 1.91, 1.92, 1.50, 1.09, 0.89.
PAYS = {
    "batches": [1, 2, 4, 8, 16, 32],
    "decode": [9.0, 9.3, 9.5, 10.4, 11.9, 18.0],
    "verify": [9.7, 11.2, 11.4, 17.5, 30.0, 58.0],
    "draft": [1.2, 1.3, 1.3, 1.45, 1.7, 2.5],
    "model_s": [2.2, 2.2, 2.19, 1.9, 1.2, 0.75],
    "model_vd": [1.0, 1.0, 1.02, 1.5, 2.6, 3.8],
    "model_decode": [8.0, 8.0, 8.0, 8.0, 8.0, 12.8],
    "model_verify": [8.0, 8.0, 8.0, 16.0, 32.0, 64.0],
    "critical_batch": 20.0, "ridge": 20.0, "stop": "done",
}


def gpu_ms(tokens, weights_ms):
    """A GPU-like pass by hand: a 20 µs floor plus 1.1x the roofline with a 200-token critical batch."""
    return 0.020 + 1.1 * weights_ms * max(1, tokens / 200)


GPU_B = [1, 2, 4, 8, 16, 32, 64, 128]
GPU = {
    "batches": GPU_B,
    "decode": [gpu_ms(b, 0.13) for b in GPU_B],
    "verify": [gpu_ms(5 * b, 0.13) for b in GPU_B],  # B = 64: 320 tokens, past the ridge
    "draft": [gpu_ms(b, 0.0163) for b in GPU_B],
    "model_s": [1.71] * 6 + [1.35, 0.87],
    "model_vd": [1.0] * 6 + [1.52, 2.91],
    "model_decode": [0.150] * 8,
    "model_verify": [0.150] * 6 + [0.228, 0.436],
    "critical_batch": 200.0, "ridge": 200.0, "stop": "done",
}
REGIMES = {"cpu never pays": NEVER, "cpu pays": PAYS, "gpu": GPU}


def measured_s(r):
    return speedups(r["decode"], r["verify"], r["draft"])


def vd(r):
    return [v / d for v, d in zip(r["verify"], r["decode"], strict=True)]


def excess(r):
    return [m / p for m, p in zip(r["decode"], r["model_decode"], strict=True)]


def test_the_tables_are_the_regimes_they_claim():
    assert [round(s, 2) for s in measured_s(NEVER)] == [0.90, 0.87, 0.72, 0.72, 0.68]
    assert [round(s, 2) for s in measured_s(PAYS)] == [2.09, 1.91, 1.92, 1.5, 1.09, 0.89]
    s = measured_s(GPU)  # B=1: 3.3616 · 0.163 / (4 · 0.0379 + 0.163) = 1.74; B=128: 0.87
    assert round(s[0], 2) == 1.74 and round(s[-1], 2) == 0.87 and min(s[:-1]) > 1


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_speedup_falls_holds_on_every_regime(regime):
    v = checks.speedup_falls(regime["batches"], measured_s(regime), regime["model_s"], regime["stop"])
    assert v.ok, v


def test_speedup_falls_tests_what_each_model_predicts():
    # never pays: the model is flat (0.66 -> 0.62): nothing to test
    v = checks.speedup_falls(NEVER["batches"], measured_s(NEVER), NEVER["model_s"], "done")
    assert not v.tested and v.numbers["model rise"] < 2
    # pays: from B = 1 the model predicts S to fall 2.2 / 0.75 = 2.93x; measured 2.09 / 0.89 = 2.35x >= 2.93**(1/8)
    v = checks.speedup_falls(PAYS["batches"], measured_s(PAYS), PAYS["model_s"], "done")
    assert v.numbers["model rise"] == pytest.approx(2.2 / 0.75) and v.numbers["needed"] == pytest.approx(1.1440, 1e-3)
    # a sweep cut short by its budget shows no fall to test
    v = checks.speedup_falls(PAYS["batches"][:3], measured_s(PAYS)[:3], PAYS["model_s"][:3], "budget")
    assert v.ok and not v.tested


@pytest.mark.parametrize("measured, model", [
    # flat where the model falls 2.4x over the last doubling (1.2 -> 0.5)
    ([0.99, 0.99, 0.99, 0.99, 0.99, 0.99], [2.2, 2.2, 2.19, 1.9, 1.2, 0.5]),
    # never paid, flat near 0.9, where the model falls from 2.19 at B = 4 (the best measured) to 0.5
    ([0.9, 0.92, 0.95, 0.93, 0.91, 0.9], [2.2, 2.2, 2.19, 1.9, 1.2, 0.5]),
])
def test_speedup_falls_rejects_curves_that_do_not_fall(measured, model):
    assert not checks.speedup_falls(list(range(1, len(measured) + 1)), measured, model, "done").ok


def test_a_crossover_claimed_where_there_is_none_is_rejected():
    with pytest.raises(ValueError, match="S fell below 1, but S = 1.2"):
        checks.speedup_falls([1, 2, 4], [2.0, 1.5, 1.2], [2.0, 1.5, 1.2], "done")
    with pytest.raises(ValueError, match="S fell below 1"):
        checks.describe_crossing([1, 2, 4], [2.0, 1.5, 1.2], "done", 4, ridge=20, critical_batch=20, k=4)


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_speedup_bound_holds_on_every_regime(regime):
    v = checks.speedup_bound(regime["batches"], measured_s(regime), regime["model_s"], excess(regime))
    assert v.ok, v


def test_speedup_bound_is_tested_where_the_model_is_clearly_below_one():
    # never pays, B = 16: model 0.62 · slack 1.5 · decode excess 179.0 / 171 = 1.05 -> 0.97 < 1; measured 0.68
    v = checks.speedup_bound(NEVER["batches"], measured_s(NEVER), NEVER["model_s"], excess(NEVER))
    assert v.tested and v.numbers["checked from B"] == 16
    # a speedup of 1.3 where the model allows at most 0.3 · 1.5 · 1.0 = 0.45
    v = checks.speedup_bound([1, 2, 4], [2.0, 1.5, 1.3], [2.0, 1.0, 0.3], [1.0, 1.0, 1.0])
    assert not v.ok and "1.30 at B = 4" in v.sentence
    # the same S where plain decoding ran 3x slower than modelled: 0.3 · 1.5 · 3 = 1.35, nothing to check
    assert not checks.speedup_bound([1, 2, 4], [2.0, 1.5, 1.3], [2.0, 1.0, 0.3], [1.0, 1.0, 3.0]).tested


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_verify_over_decode_grows_on_every_regime(regime):
    v = checks.grows("verify/decode grows", regime["batches"], vd(regime), regime["model_vd"])
    assert v.ok, v


def test_grows_rejects_a_flat_ratio_where_the_model_climbs():
    # the model: 1.0 -> 3.8 (needs 3.8**(1/8) = 1.18x); measured 1.0 -> 1.05
    v = checks.grows("verify/decode grows", PAYS["batches"], [1.0, 1.0, 1.02, 1.03, 1.04, 1.05], PAYS["model_vd"])
    assert not v.ok and v.numbers["needed"] == pytest.approx(1.1817, 1e-3)
    # and a ratio that falls where the model climbs 2.5x over the tail; a climb under 2x is not tested
    assert not checks.grows("x", [1, 2, 4, 8], [2.0, 1.5, 1.2, 1.1], [1.0, 1.0, 2.0, 5.0]).ok
    assert not checks.grows("x", [1, 2, 4], [2.0, 1.5, 1.2], [1.0, 1.2, 1.74]).tested


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_within_roofs_holds_on_every_regime(regime):
    passes = regime["decode"] + regime["verify"]
    model = regime["model_decode"] + regime["model_verify"]
    assert checks.within_roofs(passes, model).ok


def test_within_roofs_rejects_a_pass_faster_than_the_roofs():
    v = checks.within_roofs([10.0, 4.0], [10.0, 10.0], ["B=1", "B=2"])  # B = 2 ran 2.5x faster than possible
    assert not v.ok and "B=2 ran 2.5×" in v.sentence
    assert str(v).startswith("no pass beats this device's measured roofs: FAILS.\n    B=2 ran 2.5×")
    assert checks.within_roofs([10.0, 7.0], [10.0, 10.0]).ok  # 1/0.7 = 1.43: a read-only kernel may do that
    assert not checks.within_roofs([10.0, 4.0], [10.0, 10.0], cached=True).tested


def test_crossing_sentences_say_where_it_paid_and_stopped_or_why_never():
    never = checks.describe_crossing(NEVER["batches"], measured_s(NEVER), "done", 1, ridge=0.8, critical_batch=0.8, k=4)
    assert never.paid == [] and never.sentence.startswith("speculation never paid here: S = 0.90 already at B = 1")
    assert "ridge is 0.8 FLOP/byte" in never.sentence and "5 tokens are past it" in never.sentence
    pays = checks.describe_crossing(PAYS["batches"], measured_s(PAYS), "done", 24, ridge=20, critical_batch=20, k=4)
    assert pays.paid == [1, 2, 4, 8, 16] and pays.stopped_at == 32 and pays.measured_bstar == 32
    assert never.measured_bstar == 1
    assert "paid up to B = 16 here (S = 2.09 at B = 1, 1.09 at B = 16)" in pays.sentence
    assert "stopped paying by B = 32 (S = 0.89)" in pays.sentence and "crossover at B = 24" in pays.sentence
    short = checks.describe_crossing([1, 2, 4], [0.92, 0.6, 0.88], "budget", 1, ridge=1, critical_batch=1, k=4)
    assert short.sentence.startswith("speculation never paid up to B = 4, where the sweep stopped (the time budget")
    assert "S = 0.92 already at B = 1" in short.sentence
    cut = checks.describe_crossing([1, 2, 4], [2.0, 1.9, 1.8], "budget", 160, ridge=200, critical_batch=200, k=4)
    assert cut.sentence.startswith("no crossover up to B = 4 on this device (the time budget ran out")
    assert "the model with this device's roofs puts it at B = 160" in cut.sentence and cut.stopped_at is None
    hump = checks.describe_crossing([1, 2, 4, 8], [0.9, 1.2, 0.95, 0.8], "done", 2, ridge=8, critical_batch=16, k=4)
    assert hump.paid == [2] and "paid at B = 2 here (S = 1.20 at B = 2)" in hump.sentence and hump.measured_bstar == 4
    gaps = checks.describe_crossing([1, 2, 4, 8], [0.9, 1.2, 1.3, 0.8], "done", 4, ridge=8, critical_batch=16, k=4)
    assert "paid at B = 2 and 4 here (S = 1.30 at B = 4)" in gaps.sentence
    assert cut.measured_bstar is None


def test_draft_cost_sentence_is_chosen_by_the_numbers():
    def c(measured, model, cached=False):
        return checks.describe_draft_cost(measured, 0.125, model, draft_cached=cached)

    assert c(0.1253, 0.13).startswith("The draft costs what its parameter count")  # Chapter 4's stored 0.1253
    assert c(0.20, 0.18).startswith("The draft costs more than")
    assert "the per-pass floor, which the model includes, is a larger" in c(0.20, 0.18)
    assert "fixed costs beyond the floor the model includes are a" in c(0.20, 0.126)
    assert "its weights fit in the last-level cache" in c(0.08, 0.126, cached=True)
    assert "does not capture (its weights do not fit in the cache)" in c(0.08, 0.126)


def test_verify_sentence_attributes_the_climb_correctly():
    # past the ridge from B = 1, the model flat (4.3 -> 4.95) and the measurement climbing (3.23 -> 4.33):
    # decode ran 1.93x its modelled time at B = 1, verify 1.32x, so small passes explain it
    never = checks.describe_verify(NEVER["batches"], vd(NEVER), NEVER["model_vd"], critical_batch=0.8, k=4,
                                   decode_excess=21.989 / 11.4, verify_excess=71.025 / 53.8)
    assert "past this device's critical batch of 0.8 already at B = 1" in never
    assert "small passes run below the compute roof" in never and "decode took 1.93×" in never
    pays = checks.describe_verify(PAYS["batches"], vd(PAYS), PAYS["model_vd"], critical_batch=20, k=4,
                                  decode_excess=1.1, verify_excess=1.2)
    # (58 / 18) / (9.7 / 9.0) = 2.99 measured, 3.8 / 1.0 modelled
    assert "at B = 32 its 160 are past it; the ratio climbs towards k + 1, 2.99× here against 3.80×" in pays
    gpu = checks.describe_verify(GPU_B[:4], vd(GPU)[:4], GPU["model_vd"][:4], critical_batch=200, k=4,
                                 decode_excess=1.1, verify_excess=1.1)
    assert "stay under this device's critical batch of 200; neither ratio moves by more than the noise" in gpu
    # fp32 on a CPU: a 1-row GEMV path makes verify/decode fall from 2.2 to 1.3 while the model climbs
    paths = checks.describe_verify([1, 2, 4, 8], [2.2, 3.07, 1.49, 1.28], [1.0, 1.0, 1.2, 1.74], critical_batch=16,
                                   k=4, decode_excess=1.1, verify_excess=2.4)
    assert "does not move as the model's does: the math library runs the GEMMs of more rows on a slower" in paths


@pytest.mark.parametrize("call", [
    lambda: checks.grows("x", [1, 2], [1.0], [1.0, 2.0]),  # lengths differ
    lambda: checks.grows("x", [2, 1], [1.0, 2.0], [1.0, 2.0]),  # batches must increase
    lambda: checks.within_roofs([1.0, -1.0], [1.0, 1.0]),
    lambda: checks.within_roofs([float("nan")], [1.0]),
    lambda: checks.speedup_falls([1, 2], [1.2, 0.9], [1.2, 0.9], "maybe"),
    lambda: checks.describe_draft_cost(0.0, 0.1, 0.1, draft_cached=False),
])
def test_checks_reject_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------------------------------------- the model's side


def roof(bandwidth, flops):
    return hardware.Accelerator("synthetic", {"bf16": flops}, bandwidth, 0.0, "test")


def cpu_model(accel, t0):
    sizes = stack.stack_sizes("cpu")
    return stack.StackModel(sizes.target, sizes.draft, accel, t0, t0 / 3, k=4, alpha=0.8, context=256)


def test_stack_model_on_each_regimes_roofs_predicts_that_regime():
    # ridge 0.8 FLOP/byte: even B = 1 verifies 5 tokens per weight read, past it: S(1) < 1
    never = cpu_model(roof(21e9, 17e9), 0.8e-3)
    assert never.speedup(1) < 1 and never.crossover() == 1
    # ridge 56: regime 2 puts B* at ridge · (E[N] - k·c) / (k + 1) = 56 · (3.36 - 4 · 0.125) / 5 = 32
    pays = cpu_model(roof(30e9, 56 * 30e9), 0.2e-3)
    assert pays.speedup(1) > 1.5 and 24 <= pays.crossover() <= 40
    # a GPU-like device: ridge 200, a 20 µs floor; the model's B* is in the hundreds
    sizes = stack.stack_sizes("cpu")
    gpu = stack.StackModel(sizes.target, sizes.draft, roof(3e12, 200 * 3e12), 20e-6, 20e-6, 4, 0.8, 256)
    assert 100 <= gpu.crossover() <= 400
    # decode at B = 1 is memory-bound: 2 layers x (2·2048² + 2·2048·512 + 3·2048·5632) + 2048 = 90,179,584
    # bf16 weights = 180,359,168 bytes, plus 257 tokens x 4096 bytes of KV = 181,411,840 bytes, plus the floor
    assert pays.time("decode", 1) == pytest.approx(181_411_840 / 30e9 + 0.2e-3)


def test_free_batch_and_knee_sentences():
    assert "free up to about B = 59" in checks.describe_free_batch(295, 4)  # an H100: 295 / 5
    never = checks.describe_free_batch(0.8, 4)
    assert never.startswith("verification is never free: the critical batch is 0.8 tokens")
    assert checks.describe_knee(1.6034, [1, 2, 4]) == "a measured knee at B ≈ 1.6"
    assert checks.describe_knee(None, [1, 2, 4, 128]).startswith("no measured knee up to B = 128")
    with pytest.raises(ValueError):
        checks.describe_free_batch(0, 4)


def test_fits_in_cache_reads_the_last_level_cache():
    from specnotes.measure import devices

    llc = devices.llc_bytes() or 32 * 2**20
    assert devices.fits_in_cache(llc, "cpu") and not devices.fits_in_cache(llc + 1, "cpu")


# ---------------------------------------------------------------------------------------------- model gap

MS = 1e-3


def gap(decode, verify, draft, k=4, alpha=0.8):
    """describe_model_gap on (measured, modelled) ms per pass, S computed from them as the chapters do."""
    from specnotes import cost

    en = cost.expected_tokens(alpha, k)
    s = lambda i: en * decode[i] / (k * draft[i] + verify[i])
    passes = {"decode": (decode[0] * MS, decode[1] * MS), "verify": (verify[0] * MS, verify[1] * MS),
              "draft": (draft[0] * MS, draft[1] * MS)}
    return checks.describe_model_gap(64, k, s(0), s(1), passes)


def test_model_gap_blames_a_slow_plain_decode_when_s_is_above_the_model():
    # the stored AMX run at B = 64: decode far slower than modelled, verify as modelled
    text = gap(decode=(20.9, 7.0), verify=(46.2, 45.0), draft=(2.7, 2.6))
    assert "above the model's" in text and "plain decoding ran 2.99×" in text


def test_model_gap_blames_the_pass_that_moved_s():
    # verify twice as slow as modelled, decode as modelled: S below the model, because of verify
    text = gap(decode=(10.0, 10.0), verify=(40.0, 20.0), draft=(1.0, 1.0))
    assert "below the model's" in text and "the verify pass ran 2.00×" in text
    # the draft steps, not verify, are off (k = 4 of them)
    text = gap(decode=(10.0, 10.0), verify=(20.0, 20.0), draft=(3.0, 1.0))
    assert "the draft steps ran 3.00×" in text
    # a decode faster than the roofs lowers S
    text = gap(decode=(5.0, 10.0), verify=(20.0, 20.0), draft=(1.0, 1.0))
    assert "below the model's" in text and "plain decoding ran 0.50×" in text and "beat the roofs" in text


def test_model_gap_within_noise_says_they_agree():
    text = gap(decode=(10.2, 10.0), verify=(20.0, 20.0), draft=(1.0, 1.0))
    assert "within 10%" in text


@pytest.mark.parametrize("wrong", [
    dict(decode=(20.9, 7.0), verify=(46.2, 45.0), draft=(2.7, 2.6)),
])
def test_model_gap_never_blames_a_pass_that_moved_s_the_other_way(wrong):
    # a slow decode raises S: the sentence must not say S is below the model, nor blame verify or the draft
    text = gap(**wrong)
    assert "below" not in text.split("because")[0] and "verify pass ran" not in text and "draft steps ran" not in text


def test_model_gap_rejects_missing_passes():
    with pytest.raises(ValueError, match="passes must hold decode, verify and draft"):
        checks.describe_model_gap(8, 4, 1.2, 1.0, {"decode": (1.0, 1.0)})
