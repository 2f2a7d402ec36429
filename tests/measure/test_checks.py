"""measure.checks on synthetic sweeps of the four kinds of device the book runs on, and on wrong
inputs they must reject.

Each regime is a table of fastest-sample pass times (ms) per batch, as Chapters 2 and 4 measure them,
with the model's values next to them and the least time each pass can take on the regime's roofs
(``least_*``: roofline time on the fastest roofs, memory / 1.5 and compute / 1.25). Every expected
verdict below is worked out by hand in the comments from these tables; none comes from running the
checks' own formulas. Each check also meets a record it must fail.
"""

import pytest

from specnotes.analytic import hardware
from specnotes.measure import checks, stack

E_N = 3.3616  # (1 - 0.8**5) / (1 - 0.8): alpha = 0.8, k = 4
K = 4


def speedups(decode, verify, draft):
    return [E_N * d / (K * q + v) for d, v, q in zip(decode, verify, draft, strict=True)]


# A CPU without bf16 units (ridge 0.8 FLOP/byte: 21.25 GB/s, 17 GFLOP/s): every pass compute-bound from B = 1.
# S = 0.90, 0.87, 0.72, 0.72, 0.68.
NEVER = {
    "batches": [1, 2, 4, 8, 16],
    "decode": [21.989, 35.851, 50.701, 96.052, 179.008],
    "verify": [71.025, 120.825, 203.960, 391.475, 775.139],
    "draft": [2.756, 4.519, 8.018, 14.568, 28.580],
    "model_s": [0.66, 0.64, 0.63, 0.62, 0.62],  # everything compute-bound: flat
    "model_vd": [4.3, 4.6, 4.8, 4.9, 4.95],
    "model_decode": [11.4, 22.0, 43.0, 86.0, 171.0],  # 180 MFLOP per token at 17 GFLOP/s, + 0.81 ms
    "model_verify": [53.8, 106.8, 212.8, 424.8, 848.8],
    # 184.6 MFLOP per token (2 layers, attention over 261 keys) at 1.25 x 17 GFLOP/s: 8.687 ms per token;
    # the draft's 23.6 MFLOP: 1.111 ms per token
    "least_verify": [8.687 * 5 * b for b in [1, 2, 4, 8, 16]],
    "least_draft": [1.111 * b for b in [1, 2, 4, 8, 16]],
    "critical_batch": 0.8, "ridge": 0.8, "stop": "done",
}
# A CPU with native bf16 (critical batch 20 tokens): pays, crosses between B = 16 and 32.
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
    # memory 8.0 / 1.5 = 5.33 ms; compute 0.4 ms per token / 1.25 = 0.32: B(k+1) = 20 tokens -> 6.4 ms, ...
    "least_verify": [5.333, 5.333, 6.4, 12.8, 25.6, 51.2],
    "least_draft": [0.667] * 5 + [1.28],  # 1.0 / 1.5; compute 0.05 ms per token / 1.25 = 1.28 ms at B = 32
    "critical_batch": 20.0, "ridge": 20.0, "stop": "done",
}
# A Xeon with AMX (35.5 GB/s, 2382 GFLOP/s: ridge 67) whose reported last-level cache holds the weights: Chapter
# 4's stored run, which stopped at B = 256, its limit then. S = 1.97, 2.05, 1.87, 1.40, 1.32, 1.16, 1.15, 1.04, 0.93.
AMX_B = [1, 2, 4, 8, 16, 32, 64, 128, 256]
AMX = {
    "batches": AMX_B,
    "decode": [6.312, 6.796, 6.685, 6.991, 8.106, 10.062, 18.476, 28.352, 51.445],
    "verify": [6.550, 6.900, 7.628, 12.021, 15.298, 22.166, 43.524, 74.009, 157.417],
    "draft": [1.062, 1.056, 1.099, 1.190, 1.354, 1.733, 2.617, 4.306, 7.207],
    "model_s": [2.178, 2.175, 2.167, 2.153, 1.921, 1.226, 0.776, 0.749, 0.746],
    "model_vd": [1.0, 1.0, 1.0, 1.001, 1.179, 2.144, 3.693, 3.84, 3.862],  # Chapter 2's model column, same run
    # roofline: (180.4 MB + 1.07 MB of KV per sequence) at 35.5 GB/s, or 184.6 MFLOP per token at 2382 GFLOP/s
    "model_decode": [max((180.4 + 1.07 * b) / 35.5, b * 184.6 / 2382) for b in AMX_B],
    "model_verify": [max((180.4 + 1.07 * b) / 35.5, 5 * b * 184.6 / 2382) for b in AMX_B],
    # cached: no memory roof; 184.6 MFLOP per token at 1.25 x 2382 GFLOP/s = 0.0620 ms, the draft's 23.6: 0.00793
    "least_verify": [0.0620 * 5 * b for b in AMX_B],
    "least_draft": [0.00793 * b for b in AMX_B],
    "critical_batch": 67.0, "ridge": 67.0, "stop": "limit", "cached": True,
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
    # memory 0.13 / 1.5 = 0.0867 ms, compute 0.13 ms per 200 tokens / 1.25; the draft's 0.0163 / 1.5 = 0.0109
    "least_verify": [max(0.0867, 0.13 * 5 * b / 200 / 1.25) for b in GPU_B],
    "least_draft": [0.0109] * 8,
    "critical_batch": 200.0, "ridge": 200.0, "stop": "done",
}
REGIMES = {"cpu never pays": NEVER, "cpu pays near 32": PAYS, "amx, cached": AMX, "gpu": GPU}


def measured_s(r):
    return speedups(r["decode"], r["verify"], r["draft"])


def caps(r):
    return speedups(r["decode"], r["least_verify"], r["least_draft"])


def vd(r):
    return [v / d for v, d in zip(r["verify"], r["decode"], strict=True)]


def test_the_tables_are_the_regimes_they_claim():
    assert [round(s, 2) for s in measured_s(NEVER)] == [0.90, 0.87, 0.72, 0.72, 0.68]
    assert [round(s, 2) for s in measured_s(PAYS)] == [2.09, 1.91, 1.92, 1.5, 1.09, 0.89]
    assert [round(s, 2) for s in measured_s(AMX)] == [1.97, 2.05, 1.87, 1.4, 1.32, 1.16, 1.15, 1.04, 0.93]
    s = measured_s(GPU)  # B=1: 3.3616 · 0.163 / (4 · 0.0379 + 0.163) = 1.74; B=128: 0.87
    assert round(s[0], 2) == 1.74 and round(s[-1], 2) == 0.87 and min(s[:-1]) > 1


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_speedup_falls_holds_on_every_regime(regime):
    assert checks.speedup_falls(regime["batches"], measured_s(regime), regime["model_s"]).ok


def test_speedup_falls_tests_what_each_model_predicts_however_the_sweep_stopped():
    # never pays: the model is flat (0.66 -> 0.62): nothing to test
    v = checks.speedup_falls(NEVER["batches"], measured_s(NEVER), NEVER["model_s"])
    assert not v.tested and v.numbers["model rise"] < 2 and "too little to test" in v.sentence
    # pays: from B = 1 the model predicts S to fall 2.2 / 0.75 = 2.93x; measured 2.09 / 0.89 = 2.35x >= 2.93**(1/8)
    v = checks.speedup_falls(PAYS["batches"], measured_s(PAYS), PAYS["model_s"])
    assert v.numbers["model rise"] == pytest.approx(2.2 / 0.75) and v.numbers["needed"] == pytest.approx(1.1440, 1e-3)
    # the AMX run stopped at its limit with S = 0.93, yet spans a fall: from B = 2 (S = 2.05, the highest) the model
    # falls 2.175 / 0.746 = 2.92x, needs 2.92**(1/8) = 1.143x; measured 2.054 / 0.929 = 2.21x
    v = checks.speedup_falls(AMX["batches"], measured_s(AMX), AMX["model_s"])
    assert v.ok and v.tested and v.numbers["from B"] == 2 and v.numbers["model rise"] == pytest.approx(2.916, 1e-3)
    assert v.numbers["measured rise"] == pytest.approx(2.211, 1e-3)
    assert v.sentence == "From B = 2 to 256 S fell 2.21×; the model has it fall 2.92×, so it must fall at least 1.14×."
    # the GPU: from B = 1 (S = 1.74) the model falls 1.71 / 0.87 = 1.97x, under 2x: not tested
    assert not checks.speedup_falls(GPU["batches"], measured_s(GPU), GPU["model_s"]).tested


@pytest.mark.parametrize("measured, model", [
    # flat where the model falls 2.4x over the last doubling (1.2 -> 0.5)
    ([0.99, 0.99, 0.99, 0.99, 0.99, 0.99], [2.2, 2.2, 2.19, 1.9, 1.2, 0.5]),
    # never paid, flat near 0.9, where the model falls from 2.19 at B = 4 (the best measured) to 0.5
    ([0.9, 0.92, 0.95, 0.93, 0.91, 0.9], [2.2, 2.2, 2.19, 1.9, 1.2, 0.5]),
    # an AMX-like sweep cut short at B = 256 that stayed near 2 where the model falls 2.92x (needs 1.143x,
    # measured 2.05 / 1.9 = 1.08x)
    ([1.97, 2.05, 1.87, 2.0, 1.95, 1.9, 1.92, 1.95, 1.9], AMX["model_s"]),
])
def test_speedup_falls_rejects_curves_that_do_not_fall(measured, model):
    v = checks.speedup_falls([2**i for i in range(len(measured))], measured, model)
    assert v.tested and not v.ok and v.sentence.endswith("too flat.")


@pytest.mark.parametrize("regime", REGIMES.values(), ids=REGIMES)
def test_speedup_bound_holds_on_every_regime(regime):
    v = checks.speedup_bound(regime["batches"], measured_s(regime), caps(regime))
    assert v.ok and v.tested, v


def test_speedup_bound_says_where_the_roofs_rule_out_a_speedup():
    # never pays: caps 3.3616 · decode / (4 · 1.111 B + 43.44 B) = 1.54, 1.26, 0.89, 0.84, 0.79: below 1 from B = 4
    v = checks.speedup_bound(NEVER["batches"], measured_s(NEVER), caps(NEVER))
    assert v.numbers["lowest cap"] == pytest.approx(0.786, 1e-3) and v.numbers["at B"] == 16
    assert "allow less than 1 at B = 4 (at most 0.89) and 8 (at most 0.84) and 16 (at most 0.79), and " \
           "speculation measured below 1 there (S ≤ 0.72)" in v.sentence
    # the AMX run: plain decoding at B = 256 (51.4 ms) is 2.6x its 19.8 ms compute time, so the cap stays at
    # 3.3616 · 51.445 / (4 · 2.03 + 79.36) = 1.98: the roofs cannot rule out a speedup anywhere in that sweep
    v = checks.speedup_bound(AMX["batches"], measured_s(AMX), caps(AMX))
    assert v.numbers["lowest cap"] == pytest.approx(1.976, 1e-3) and "the cap never fell below 1" in v.sentence


def test_speedup_bound_fails_a_speedup_the_roofs_do_not_allow():
    # the never-pays CPU with a verify pass at B = 16 of 560 ms, under its least time of 695 ms (1.55x past the
    # measured peak): S = 3.3616 · 179.008 / (4 · 28.58 + 560) = 0.89 > cap 0.79
    verify = NEVER["verify"][:-1] + [560.0]
    s = speedups(NEVER["decode"], verify, NEVER["draft"])
    v = checks.speedup_bound(NEVER["batches"], s, caps(NEVER))
    assert not v.ok and v.sentence.startswith("S = 0.89 at B = 16, above the 0.79 this device's roofs allow there")
    # a GPU whose S stayed 1.74 at B = 128, where the cap is 3.3616 · 0.163 / (4 · 0.0109 + 0.333) = 1.46
    assert not checks.speedup_bound(GPU["batches"], [1.74] * 8, caps(GPU)).ok


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
    v = checks.within_roofs(passes, model, cached=regime.get("cached", False))
    assert v.ok and v.tested != regime.get("cached", False)


def test_fastest_roofs_by_hand():
    accel = hardware.Accelerator("cpu", {"bf16": 2e12, "fp32": 1e12}, 30e9, 0.0, "test")
    fast = checks.fastest_roofs(accel)
    assert fast.mem_bandwidth == pytest.approx(45e9) and fast.peak_flops == pytest.approx({"bf16": 2.5e12,
                                                                                           "fp32": 1.25e12})
    assert checks.fastest_roofs(accel, cached=True).mem_bandwidth == float("inf") and accel.mem_bandwidth == 30e9


def test_within_roofs_rejects_a_pass_faster_than_the_roofs():
    v = checks.within_roofs([10.0, 4.0], [10.0, 10.0], ["B=1", "B=2"])  # B = 2 ran 2.5x faster than possible
    assert not v.ok and "B=2 ran 2.5×" in v.sentence
    assert str(v).startswith("no pass beats this device's measured roofs: FAILS.\n    B=2 ran 2.5×")
    assert checks.within_roofs([10.0, 7.0], [10.0, 10.0]).ok  # 1/0.7 = 1.43: a read-only kernel may do that
    assert not checks.within_roofs([10.0, 4.0], [10.0, 10.0], cached=True).tested


def test_crossing_sentences_say_where_it_paid_and_stopped_or_why_never():
    never = checks.describe_crossing(NEVER["batches"], measured_s(NEVER), "done", 1, ridge=0.8, critical_batch=0.8, k=4)
    assert never.paid == [] and never.sentence.startswith("Speculation never paid here. S = 0.90 already at B = 1")
    assert "ridge is 0.8 FLOP/byte" in never.sentence and "5 tokens are past it" in never.sentence
    assert ", within the 10% noise of break-even. This device" in never.sentence  # S(1) = 0.901
    # S = 2.09, 1.91, 1.92, 1.50, 1.09, 0.89: paid (> 1.1) up to B = 8, 1.09 at B = 16 is within the noise
    pays = checks.describe_crossing(PAYS["batches"], measured_s(PAYS), "done", 24, ridge=20, critical_batch=20, k=4)
    assert pays.paid == [1, 2, 4, 8] and pays.even == [16] and pays.stopped_at == 32 and pays.measured_bstar == 16
    assert pays.marks == [("measured: S within 10% of 1 at B", 16), ("measured: S below 0.90 at B", 32)]
    assert never.measured_bstar == 1
    assert "paid up to B = 8 here: S = 2.09 at B = 1 and 1.50 at B = 8. It was about break-even, within the 10% " \
           "noise, at B = 16 (S = 1.09). It stopped paying by B = 32, with S = 0.89." in pays.sentence
    assert "crossover at B = 24" in pays.sentence
    short = checks.describe_crossing([1, 2, 4], [0.92, 0.6, 0.88], "budget", 1, ridge=1, critical_batch=1, k=4)
    assert short.sentence.startswith("Speculation never paid up to B = 4, where the sweep stopped because its time "
                                     "budget ran out.")
    assert "S = 0.92 already at B = 1" in short.sentence
    # a GPU sweep cut short while it still paid: where it paid, where it stopped, and that no crossover was seen
    cut = checks.describe_crossing([1, 2, 4], [2.0, 1.9, 1.8], "budget", 160, ridge=200, critical_batch=200, k=4)
    assert cut.sentence == ("Speculation paid up to B = 4 here: S = 2.00 at B = 1 and 1.80 at B = 4. It still paid "
                            "at B = 4, where the sweep stopped because its time budget ran out: no crossover measured. "
                            "The model with this device's roofs puts the crossover at B = 160.")
    assert cut.stopped_at is None
    # cut short below 1 before min_last: paid at B = 2, then S = 0.80 at B = 4
    low = checks.describe_crossing([1, 2, 4], [1.0, 1.3, 0.8], "budget", 2, ridge=8, critical_batch=16, k=4)
    assert "paid at B = 2 here: S = 1.30 at B = 2. S was 0.80 at B = 4, where the sweep stopped because its time" in \
        low.sentence
    hump = checks.describe_crossing([1, 2, 4, 8], [0.9, 1.2, 0.95, 0.8], "done", 2, ridge=8, critical_batch=16, k=4)
    assert hump.paid == [2] and "paid at B = 2 here: S = 1.20 at B = 2." in hump.sentence and hump.measured_bstar == 4
    assert "break-even, within the 10% noise, at B = 4 (S = 0.95)" in hump.sentence
    gaps = checks.describe_crossing([1, 2, 4, 8], [0.9, 1.2, 1.3, 0.8], "done", 4, ridge=8, critical_batch=16, k=4)
    assert "paid at B = 2 and 4 here: S = 1.30 at B = 4." in gaps.sentence
    assert cut.measured_bstar is None


def test_a_crossing_within_the_noise_is_not_called_a_crossing():
    # Chapter 4's stored AMX run: S = 0.992 at B = 128 is within 10% of 1: the sweep may not stop there
    s = [2.16, 2.0, 1.9, 1.7, 1.5, 1.3, 1.26, 0.992]
    batches = [2**i for i in range(8)]
    with pytest.raises(ValueError, match="S fell below 1 - 0.1, but S = 0.992"):
        checks.describe_crossing(batches, s, "done", 43, ridge=65, critical_batch=65, k=4)
    # the next doubling, at 0.6, is clearly below: B = 128 is about break-even, B = 256 stopped paying
    crossing = checks.describe_crossing(batches + [256], s + [0.6], "done", 43, ridge=65, critical_batch=65, k=4)
    assert crossing.paid[-1] == 64 and crossing.even == [128] and crossing.stopped_at == 256
    assert "about break-even, within the 10% noise, at B = 128 (S = 0.99). It stopped paying by B = 256" in \
        crossing.sentence
    # a sweep that ran out of batches at S = 0.95 says where it paid and that it stopped before a crossover
    cut = checks.describe_crossing(batches, s[:-1] + [0.95], "limit", 43, ridge=65, critical_batch=65, k=4)
    assert "paid up to B = 64 here: S = 2.16 at B = 1 and 1.26 at B = 64. It was about break-even, within the 10% " \
           "noise, at B = 128 (S = 0.95). The sweep stopped there, because the next batch would not fit in memory, " \
           "before S fell clearly below 1." in cut.sentence
    assert cut.marks == [("measured: S within 10% of 1 at B", 128)] and cut.measured_bstar is None


def test_every_crossing_sentence_says_where_speculation_paid_or_why_it_never_did():
    # the stored AMX run, stopped at B = 256 by the old cap: it paid up to 64, then sat within the noise of 1
    amx = checks.describe_crossing(AMX["batches"], measured_s(AMX), "limit", 44, ridge=67, critical_batch=67, k=4)
    assert amx.sentence == ("Speculation paid up to B = 64 here: S = 2.05 at B = 2 and 1.15 at B = 64. It was about "
                            "break-even, within the 10% noise, at B = 128 (S = 1.04) and 256 (S = 0.93). The sweep "
                            "stopped there, because the next batch would not fit in memory, before S fell clearly "
                            "below 1. The model with this device's roofs puts the crossover at B = 44.")
    for r, bstar in ((NEVER, 1), (PAYS, 24), (AMX, 44), (GPU, 100)):
        for stop, n in (("budget", 3), (r["stop"], len(r["batches"]))):
            s = measured_s(r)[:n]
            c = checks.describe_crossing(r["batches"][:n], s, stop, bstar, ridge=r["ridge"],
                                         critical_batch=r["critical_batch"], k=4)
            paid = [b for b, x in zip(r["batches"], s, strict=False) if x > 1.1]
            assert c.sentence.startswith("Speculation paid up to" if paid else "Speculation never paid")
            assert c.paid == paid
            why = f"B = {paid[-1]}" if paid else "ridge is" if "ridge is" in c.sentence else "fixed costs"
            assert why in c.sentence


def test_a_crossover_claimed_where_there_is_none_is_rejected():
    with pytest.raises(ValueError, match="S fell below 1 - 0.1, but S = 1.2"):
        checks.describe_crossing([1, 2, 4], [2.0, 1.5, 1.2], "done", 4, ridge=20, critical_batch=20, k=4)


def test_draft_cost_sentence_is_chosen_by_the_numbers():
    def c(measured, model, cached=False):
        return checks.describe_draft_cost(measured, 0.125, model, draft_cached=cached)

    assert c(0.1253, 0.13).startswith("The draft costs what its parameter count")  # Chapter 4's stored 0.1253
    assert c(0.20, 0.18).startswith("The draft costs more than")
    assert "the per-pass floor, which the model includes, is a larger" in c(0.20, 0.18)
    assert "fixed costs beyond the floor the model includes are a" in c(0.20, 0.126)
    assert "Its weights fit in the last-level cache" in c(0.08, 0.126, cached=True)
    assert "Its weights do not fit in the cache, so the reason is one the roofline does not capture" in c(0.08, 0.126)


def test_verify_sentence_attributes_the_climb_correctly():
    # past the ridge from B = 1, the model flat (4.3 -> 4.95) and the measurement climbing (3.23 -> 4.33):
    # decode ran 1.93x its modelled time at B = 1, verify 1.32x, so small passes explain it
    never = checks.describe_verify(NEVER["batches"], vd(NEVER), NEVER["model_vd"], critical_batch=0.8, k=4,
                                   decode_excess=21.989 / 11.4, verify_excess=71.025 / 53.8)
    assert "past this device's critical batch of 0.8 already at B = 1" in never
    assert "Small passes run below the compute roof" in never and "decode took 1.93×" in never
    pays = checks.describe_verify(PAYS["batches"], vd(PAYS), PAYS["model_vd"], critical_batch=20, k=4,
                                  decode_excess=1.1, verify_excess=1.2)
    # lowest measured at B = 1: (58 / 18) / (9.7 / 9.0) = 2.99 measured, 3.8 / 1.0 modelled, as grows() compares
    assert "at B = 32 its 160 are past it" in pays
    assert ("The ratio climbs towards k + 1. From B = 1, where it measured lowest, to B = 32 the measured ratio rose "
            "2.99× and the model's rose 3.80×.") in pays
    rise = checks.grows("x", PAYS["batches"], vd(PAYS), PAYS["model_vd"]).numbers
    assert f"rose {rise['measured rise']:.2f}× and the model's rose {rise['model rise']:.2f}×" in pays
    # 11.2 / 9.3 = 1.20 at B = 2: 10 tokens, under the critical batch of 20, where the model is flat
    assert "already rose past 1.10× at B = 2, where the model says 1.00×: 10 tokens, under the critical batch." in pays
    gpu = checks.describe_verify(GPU_B[:4], vd(GPU)[:4], GPU["model_vd"][:4], critical_batch=200, k=4,
                                 decode_excess=1.1, verify_excess=1.1)
    assert "stay under this device's critical batch of 200. Neither ratio moves by more than the noise." in gpu
    # fp32 on a CPU: a 1-row GEMV path makes verify/decode fall from 2.2 to 1.3 while the model climbs
    paths = checks.describe_verify([1, 2, 4, 8], [2.2, 3.07, 1.49, 1.28], [1.0, 1.0, 1.2, 1.74], critical_batch=16,
                                   k=4, decode_excess=1.1, verify_excess=2.4)
    # from B = 4 (lowest before the last) the measured ratio falls 1.28 / 1.49 = 0.86x while the model climbs 1.45x
    # (it said "rose 0.86×" until the words followed the factor: a ratio that ends 0.86× as high fell 1.16×)
    assert "does not move as the model's does. From B = 4, where it measured lowest, to B = 8 the measured ratio " \
           "fell 1.16× and the model's rose 1.45×. The math library runs the GEMMs of more rows on a slower" in paths


@pytest.mark.parametrize("call", [
    lambda: checks.grows("x", [1, 2], [1.0], [1.0, 2.0]),  # lengths differ
    lambda: checks.grows("x", [2, 1], [1.0, 2.0], [1.0, 2.0]),  # batches must increase
    lambda: checks.within_roofs([1.0, -1.0], [1.0, 1.0]),
    lambda: checks.within_roofs([float("nan")], [1.0]),
    lambda: checks.speedup_falls([1, 2], [1.2, 0.9], [1.2]),  # lengths differ
    lambda: checks.speedup_bound([1, 2], [1.2, 0.9], [1.5, 0.0]),  # a cap must be > 0
    lambda: checks.describe_crossing([1, 2], [1.2, 0.9], "maybe", 4, ridge=1, critical_batch=1, k=4),
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
    assert "says verification is free up to B = 59: " in checks.describe_free_batch(295, 4)  # an H100: 295 / 5
    assert "free up to B = 25: " in checks.describe_free_batch(206.04, 7)  # an H200 at k = 7: 25.76, not 26
    never = checks.describe_free_batch(0.8, 4)
    assert never.startswith("The roofline on this device's measured roofs says verification is never free: the "
                            "critical batch is 0.8 tokens")
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
    from specnotes.analytic import cost

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


# Chapter 2's stored AMX run: critical batch 71.3, k = 4; verify/decode measured and modelled (floor included)
CH2_B = [1, 2, 4, 8, 16]
CH2_VD = [1.051, 0.986, 1.270, 1.567, 1.704]
CH2_MODEL = [1.0, 1.0, 1.0, 1.0, 1.12]


def test_free_batch_sentence_says_what_the_measurement_showed():
    text = checks.describe_free_batch(71.3, 4, CH2_B, CH2_VD, CH2_MODEL)
    # the model: floor(71.3 / 5) = 14; measured: B = 4 is the first ratio above 1.1, inside that range
    assert text.startswith("The roofline on this device's measured roofs says verification is free up to B = 14")
    assert "verification already cost 1.27× a decode pass at B = 4, at 20 tokens, where the model" in text
    assert "says 1.00×. Small GEMMs run below both roofs" in text and "20 rows per weight ran further below" in text
    # a GPU-like sweep that stays within 10% of 1 up to B = 32 (160 tokens, under 200)
    gpu = checks.describe_free_batch(200, 4, [1, 8, 32], [1.0, 1.02, 1.08], [1.0, 1.0, 1.0])
    assert "free up to B = 40" in gpu and "verify cost within 10% of a decode pass up to B = 32" in gpu
    # the first rise past the model's range agrees with it
    late = checks.describe_free_batch(20, 4, [1, 2, 4, 8], [1.0, 1.05, 1.08, 1.68], [1.0, 1.0, 1.0, 1.5])
    assert "free up to B = 4" in late and "first rose more than 10% above 1 at B = 8, to 1.68×: past that range" in late
    # never free (a CPU without bf16 units): the measured cost at B = 1
    never = checks.describe_free_batch(0.8, 4, [1, 2], [3.23, 3.37], [4.3, 4.6])
    assert "never free" in never and "verification already cost 3.23× a decode pass at B = 1, at 5 tokens." in never


@pytest.mark.parametrize("measured", [
    [1.051, 0.986, 1.270, 1.567, 1.704],  # the first rise is at B = 4
    [1.2, 0.986, 1.05, 1.567, 1.704],  # ... at B = 1, not at B = 8
])
def test_free_batch_sentence_names_the_first_batch_past_the_noise(measured):
    first = next(b for b, m in zip(CH2_B, measured, strict=True) if m > 1.1)
    text = checks.describe_free_batch(71.3, 4, CH2_B, measured, CH2_MODEL)
    assert f"a decode pass at B = {first}, at " in text
    assert all(f"a decode pass at B = {b}, at " not in text for b in CH2_B if b != first)


def test_cache_sentence_follows_the_sizes():
    assert checks.describe_cache("the weight", 256 * 2**20, 504 * 2**20).startswith(
        "the weight (256 MiB) fits in this device's last-level cache (504 MiB, as the system reports it)")
    assert checks.describe_cache("the weight", 64 * 2**20, 32 * 2**20) == (
        "the weight (64 MiB) is larger than this device's last-level cache (32 MiB), so every pass streams it from "
        "memory")


# ---------------------------------------------------------------------------------------------- acceptance


def test_estimates_by_hand():
    e = checks.Estimate.of([0.0, 1.0, 1.0, 1.0])  # mean 0.75, s² = (0.5625 + 3 · 0.0625) / 3 = 0.25, s/√4 = 0.25
    assert e.mean == pytest.approx(0.75) and e.error == pytest.approx(0.25)
    r = checks.Estimate.rate(75, 100)  # √(0.75 · 0.25 / 100) = 0.0433
    assert r.mean == 0.75 and r.error == pytest.approx(0.04330, 1e-3)
    a, b = checks.Estimate(0.80, 0.01), checks.Estimate(0.75, 0.01)  # 0.05 apart, 3 · √2 · 0.01 = 0.042
    assert checks.order(a, b) == 1 and checks.order(b, a) == -1
    assert checks.order(checks.Estimate(0.78, 0.01), b) == 0  # 0.03 < 0.042
    with pytest.raises(ValueError):
        checks.Estimate.rate(101, 100)


def test_alpha_sources_sentence():
    # Chapter 3's stored run: generated 0.757 of ~2,500 checked drafts vs scored 0.739 over 2,048 positions
    gen = [checks.Estimate.rate(1893, 2500), checks.Estimate.rate(2237, 2800)]
    scored = [checks.Estimate(0.739, 0.0097), checks.Estimate(0.787, 0.004)]
    text = checks.describe_alpha_sources([0, 1], gen, scored)
    # 0.757 - 0.739 = 0.018 against 3 · √(0.0086² + 0.0097²) = 0.039: within noise, and likewise at temperature 1
    assert text == "scoring held-out text: 0.74 and 0.79; the two estimates agree within sampling noise at both " \
                   "temperatures"
    easier = checks.describe_alpha_sources([0, 1], [checks.Estimate(0.85, 0.005)] * 2, scored)
    assert easier.endswith("generated text, the models' own, was easier to agree on than held-out text at both "
                           "temperatures")
    mixed = checks.describe_alpha_sources([0, 1], [checks.Estimate(0.85, 0.005), gen[1]], scored)
    assert "at temperature 0 generated text" in mixed and "at temperature 1 the two estimates agree" in mixed


def test_range_sentence():
    assert "in the range of the model drafts (0.61 to 0.88)" in checks.describe_against_range(
        checks.Estimate(0.757, 0.009), 0.61, 0.88)
    assert "above" in checks.describe_against_range(checks.Estimate(0.95, 0.01), 0.61, 0.88)
    assert "below" in checks.describe_against_range(checks.Estimate(0.40, 0.01), 0.61, 0.88)
    assert "in the range" in checks.describe_against_range(checks.Estimate(0.59, 0.01), 0.61, 0.88)  # within 3 errors


def test_place_sentences_follow_the_orderings():
    inside_t0, boundary_t0 = checks.Estimate(0.770, 0.011), checks.Estimate(0.642, 0.021)
    inside_t1, boundary_t1 = checks.Estimate(0.778, 0.005), checks.Estimate(0.814, 0.009)
    story = checks.describe_places(inside_t0, boundary_t0, inside_t1, boundary_t1)
    assert story.t0.startswith("At temperature 0 the models agree on the next byte 0.77 of the time inside a word "
                               "but only 0.64 after a space")
    assert story.t1.startswith("At temperature 1 the order flips: 0.78 inside a word against 0.81 after one.")
    assert story.boundary.startswith("On the shipped pair this is what happens at word boundaries: 0.64")
    # the same numbers with the temperature-1 gap inside the noise: no flip, no boundary claim either way
    close = checks.describe_places(inside_t0, boundary_t0, inside_t1, checks.Estimate(0.79, 0.009))
    assert "agree within sampling noise" in close.t1 and "flips" not in close.t1
    flat = checks.describe_places(inside_t0, boundary_t0, inside_t1, checks.Estimate(0.66, 0.02))
    assert "inside a word leads too" in flat.t1 and "within sampling noise (0.64 at temperature 0" in flat.boundary
    level = checks.describe_places(checks.Estimate(0.70, 0.01), checks.Estimate(0.69, 0.02), inside_t1, boundary_t1)
    assert "about as often inside a word (0.70)" in level.t0 and "after a space leads" in level.t1


# Chapter 5's checks on three devices: model and measured verify/decode ratios at growing L
CONTEXTS = [1024, 2048, 4096, 8192]
GPU_LIKE = ([3.6, 2.9, 1.9, 1.3], [3.4, 2.7, 1.9, 1.4])  # ridge ~300, memory-bound attention
CPU_BF16 = ([2.6, 2.0, 1.5, 1.2], [2.7, 2.4, 1.9, 1.7])  # attention slower than the model says: falls less
CPU_LOW_RIDGE = ([3.0, 3.6, 4.2, 4.6], [3.1, 3.9, 4.4, 4.8])  # ridge ~1: attention compute-bound, rises


@pytest.mark.parametrize("model, measured, tested", [(*GPU_LIKE, True), (*CPU_BF16, True), (*CPU_LOW_RIDGE, False)])
def test_ratio_falls_holds_on_every_device(model, measured, tested):
    v = checks.ratio_falls(CONTEXTS, measured, model)
    assert v.ok and v.tested == tested


@pytest.mark.parametrize("model, measured", [
    (GPU_LIKE[0], [3.4, 3.5, 3.6, 3.7]),  # the model says it falls, the measurement rises
    (CPU_BF16[0], [2.7, 2.4, 2.6, 2.8]),
])
def test_ratio_falls_rejects_a_ratio_that_does_not_fall(model, measured):
    v = checks.ratio_falls(CONTEXTS, measured, model)
    assert v.tested and not v.ok and v.sentence.endswith(": flat, within the 10% noise.")


def test_ratio_falls_lets_the_noise_margin_choose_the_sentence():
    # Chapter 5's stored run (issue 27, item 5): 2.125 -> 2.016 with 2.180 on the way, where the model falls
    # 4.58 -> 2.75 (its excess halves: 1.75 <= 3.58 / 2): 2.016 is not below 2.125 / 1.1 = 1.93, so it is flat
    contexts = [256 * 2**i for i in range(8)]
    measured = [2.125, 2.108, 1.978, 1.935, 1.922, 2.180, 2.016, 2.016]
    model = [4.577, 4.488, 4.330, 4.077, 3.729, 3.340, 2.995, 2.746]
    v = checks.ratio_falls(contexts, measured, model)
    assert v.tested and not v.ok and v.numbers["outcome"] == "flat"
    assert v.sentence.endswith("measured 2.12 to 2.02 (1.92 to 2.18 on the way): flat, within the 10% noise.")
    fell = checks.ratio_falls(contexts, measured[:-1] + [1.90], model)  # 1.90 < 1.93: beyond the noise
    assert fell.ok and fell.sentence.endswith(": it fell, by more than the 10% noise.")
    rose = checks.ratio_falls(contexts, measured[:-1] + [2.40], model)  # 2.40 > 2.125 · 1.1
    assert not rose.ok and rose.numbers["outcome"] == "rose" and "it rose" in rose.sentence
    halved = checks.ratio_falls(contexts, measured[:-1] + [1.5], model)
    assert halved.ok and "at least halfway to 1" in halved.sentence
    # where the model's excess does not halve nothing is tested, but the sentence still says what was measured
    untested = checks.ratio_falls(contexts, measured, [3.0] * 8)
    assert not untested.tested and untested.ok and "flat, within the 10% noise. The model's excess" in untested.sentence
    # a model with verify as cheap as decode throughout (a ridge far above B(k+1)) predicts nothing to fall,
    # however its 1.004 -> 1.0001 "halves": Chapter 5 on a loaded Ice Lake measured 2.16 -> 1.92 beside it
    flat_model = checks.ratio_falls(contexts[:3], [2.16, 1.63, 1.92], [1.004, 1.002, 1.0001])
    assert not flat_model.tested and "within the 10% noise of a decode pass from the first context on" in \
        flat_model.sentence


def test_ratio_falls_needs_two_contexts_and_matching_lengths():
    assert not checks.ratio_falls([1024], [3.0], [3.0]).tested
    with pytest.raises(ValueError):
        checks.ratio_falls(CONTEXTS[:2], [1.0, 2.0], [1.0])


@pytest.mark.parametrize("measured, device, says", [
    ([2.13, 2.0, 1.87], "cpu", "On the CPU that recorded this chapter the verify pass fell, but only to 1.87 decode "
                               "passes at L = 131,072"),  # Chapter 5's stored run
    ([3.0, 2.0, 1.5], "cuda", "On the GPU that recorded this chapter the measurement bore it out, the verify pass "
                              "falling to 1.50 decode passes at L = 131,072"),
    ([2.0, 2.1, 2.05], "cpu", "On the CPU that recorded this chapter the verify pass still cost 2.05 decode passes at "
                              "L = 131,072, flat over the contexts swept"),
    ([2.0, 2.1, 2.5], "mps", "On the Apple GPU that recorded this chapter the verify pass rose to 2.50"),
])
def test_context_takeaway_follows_the_outcome_and_the_device(measured, device, says):
    falls = checks.ratio_falls([256, 4096, 131072], measured, [3.0, 2.0, 1.2])
    assert checks.describe_context_measured(falls, device).startswith(says)


def test_shared_cache():
    assert checks.shared_cache(1.8, 1.1, 4).ok  # shared: well under 5 separate reads
    compute_bound = checks.shared_cache(5.3, 4.9, 4)  # ridge ~1: nothing to test
    assert compute_bound.ok and not compute_bound.tested
    v = checks.shared_cache(5.2, 1.1, 4)  # as much as reading the cache 5 times: the cache was not shared
    assert v.tested and not v.ok and "5 separate reads" in v.sentence
    # Chapter 5 glues the clause the verdict chooses
    assert checks.describe_shared_cache(checks.shared_cache(1.8, 1.1, 4)) == (
        "the 5 queries shared one read of the cache, costing less than the 5× of separate reads")
    assert checks.describe_shared_cache(v).endswith("here they did not share it")
    assert checks.describe_shared_cache(compute_bound) == (
        "the model has attention over 5 queries compute-bound on this device (4.90× one query's), so whether they "
        "share one read of the cache is not tested")


def test_attention_time_grows_with_context():
    # grows() on attention times at growing L: the model's 16x rise must show at least 16 ** SHARE
    assert checks.grows("attention grows", CONTEXTS[:3], [1e-4, 3e-4, 2e-3], [1e-4, 4e-4, 1.6e-3], axis="L").ok
    flat = checks.grows("attention grows", CONTEXTS[:2], [1e-4, 0.9e-4], [1e-4, 1.5e-4])  # little predicted
    assert flat.ok and not flat.tested
    assert not checks.grows("attention grows", CONTEXTS[:2], [2e-3, 1e-3], [1e-4, 1.6e-3]).ok


# ---------------------------------------------------------------------------------------------- invariants


def test_timer_agrees_with_itself_or_the_cell_fails():
    checks.timer_agrees("ok", [1.0, 1.2, 1.1], median=1.1, q1=1.05, q3=1.15)
    checks.timer_agrees("fastest only", [2.0])  # a transcription that kept the fastest time
    checks.timer_agrees("median only", [], median=2.0)  # ... or only the median
    for bad in ([1.0, float("nan")], [1.0, -1.0], [0.0], [1.0, float("inf")]):
        with pytest.raises(checks.Broken, match="not a positive time"):
            checks.timer_agrees("x", bad)
    with pytest.raises(checks.Broken, match="disagrees with itself"):
        checks.timer_agrees("median above every sample", [1.0, 1.1], median=1.5)
    with pytest.raises(checks.Broken, match="out of order"):
        checks.timer_agrees("fastest above the median", [2.0], median=1.0)
    with pytest.raises(checks.Broken, match="out of order"):
        checks.timer_agrees("quartiles crossed", [1.0, 2.0, 3.0], median=2.0, q1=2.5, q3=1.5)
    with pytest.raises(checks.Broken, match="nothing was timed"):
        checks.timer_agrees("empty", [])
    assert issubclass(checks.Broken, AssertionError)  # a cell fails on it like on an assert


def test_the_rules_the_prose_states_are_the_constants():
    assert checks.rules() == {"rule_slack": "1.5", "rule_compute": "1.25", "rule_load": "8", "rule_work": "4",
                              "rule_threshold": "2", "rule_share": "1/8", "rule_noise": "10%"}


WORK = [(1e9, 1e8), (4e9, 4e8), (1e9, 1e8)]  # (FLOPs, bytes): the second pass does 4x the first's and the third's


def test_more_work_faster_than_less_is_broken_only_beyond_what_load_explains():
    v = checks.more_work_is_slower(["a", "b", "c"], [1.0, 3.0, 1.1], [1.0, 4.0, 1.0], WORK)
    assert v.ok and v.tested and v.numbers["pairs"] == 2 and v.numbers["least measured ratio"] == pytest.approx(3 / 1.1)
    # more work measured faster, but by less than the 8x another process's load can add to one pass: load, not broken
    assert checks.more_work_is_slower(["a", "b"], [1.0, 0.95], [1.0, 4.0], WORK[:2]).ok
    assert checks.more_work_is_slower(["a", "b"], [1.0, 0.13], [1.0, 4.0], WORK[:2]).ok  # 7.7x: still load
    with pytest.raises(checks.Broken, match="b ran 10.00× faster than a"):
        checks.more_work_is_slower(["a", "b"], [1.0, 0.1], [1.0, 4.0], WORK[:2])
    with pytest.raises(checks.Broken):  # the margin is a parameter: with none, any reversal is broken
        checks.more_work_is_slower(["a", "b"], [1.0, 0.95], [1.0, 4.0], WORK[:2], load=1.0)


@pytest.mark.parametrize("modelled, work", [
    ([1.0, 3.9], WORK[:2]),  # modelled 3.9x: a library path or a stall could reverse it
    ([1.0, 4.0], [(1e9, 1e8), (4e9, 1e8)]),  # 4x the FLOPs over the same bytes: a memory-bound pair
    ([1.0, 4.0], [(1e9, 1e8), (1e9, 4e8)]),  # 4x the bytes, not the FLOPs
])
def test_pairs_that_are_not_4x_apart_by_every_measure_are_not_compared(modelled, work):
    # the second pass measured at a twentieth of the first's time: not compared, it does not surely do more work
    v = checks.more_work_is_slower(["a", "b"], [1.0, 0.05], modelled, work)
    assert v.ok and not v.tested and v.numbers["pairs"] == 0


def test_a_one_weight_sweep_compares_on_flops_and_modelled_time():
    # Chapter 1: one 2048x8192 weight at 1 and 128 rows: 128x the FLOPs, 1.08x the bytes (the weight read is common)
    work = [(2 * 2048 * 8192, 4 * (2048 * 8192 + 2048 + 8192)),
            (2 * 128 * 2048 * 8192, 4 * (2048 * 8192 + 128 * 10240))]
    assert not checks.more_work_is_slower(["B=1", "B=128"], [1.0, 0.05], [1.0, 5.0], work).tested  # by every measure
    v = checks.more_work_is_slower(["B=1", "B=128"], [1.0, 4.0], [1.0, 5.0], work, common_bytes=True)
    assert v.ok and v.tested and v.numbers["pairs"] == 1
    with pytest.raises(checks.Broken, match="B=128 ran 20.00× faster than B=1"):
        checks.more_work_is_slower(["B=1", "B=128"], [1.0, 0.05], [1.0, 5.0], work, common_bytes=True)
    # modelled time still decides: a memory-bound pair (the model 1.9x apart) is not compared, however many FLOPs
    flat = checks.more_work_is_slower(["B=1", "B=128"], [1.0, 0.05], [1.0, 1.9], work, common_bytes=True)
    assert not flat.tested and "the weight read is common" in flat.sentence
    # and a pass that reads less than the other is never "more work"
    less = [(1e9, 1e8), (4e9, 0.9e8)]
    assert not checks.more_work_is_slower(["a", "b"], [1.0, 0.05], [1.0, 4.0], less, common_bytes=True).tested


# ---------------------------------------------------------------------------------------------- GEMM paths

ROWS = [1, 2, 4, 8, 16, 64]
# Zen 3 (issue 25): one 8192x2048 fp32 weight at 11.2 GB/s and 45 GFLOP/s: 67.1 MB, 6.0 ms to read; M = 16 is
# 537 MFLOP, 11.9 ms; M = 64 is 47.7 ms. Measured 5.0, 32.0, 44.0, 63.9, 71.4, 109 ms.
ZEN3_RATIOS = [5.0 / 5.99, 32.0 / 5.99, 44.0 / 5.99, 63.9 / 5.99, 71.4 / 11.93, 109 / 47.7]
ZEN3_GBS = [67.1 / t for t in (5.0, 32.0, 44.0, 63.9, 71.4, 109)]


def test_slow_gemms_are_named_with_their_rows_and_bandwidth():
    text = checks.describe_slow_gemms(ROWS, ZEN3_RATIOS, ZEN3_GBS, 11.2)
    assert text.startswith("On this device the GEMM of 2 to 64 rows ran 2.3–10.7× its roofline time. It read its "
                           "weight at 0.6–2.1 GB/s against the 11.2 GB/s copy roof")
    assert checks.describe_slow_gemms(ROWS, [1.1] * 6, [10.0] * 6, 11.2) == ""
    # two slow runs: the one with the slowest point is named
    two = checks.describe_slow_gemms(ROWS, [2.5, 1.0, 1.0, 4.0, 3.0, 1.0], [5.0] * 6, 11.2)
    assert "GEMM of 8 to 16 rows ran 3.0–4.0×" in two
    assert "GEMM of 1 row ran" in checks.describe_slow_gemms([1, 2], [3.0, 1.0], [4.0, 12.0], 11.2)


def test_gemm_efficiency_sentence_follows_the_numbers():
    from specnotes.measure.probes import GemmEfficiency

    eff = GemmEfficiency(tuple(ROWS), tuple(ZEN3_RATIOS), "zen 3", tuple(ZEN3_GBS))
    text = checks.describe_gemm_efficiency(ROWS, ZEN3_RATIOS, eff.leave_one_out(), ZEN3_GBS, 11.2)
    assert text.startswith("Measured over its roofline time, the GEMM took 0.83× at M = 1 to 10.67× at M = 8. On "
                           "this device the GEMM of 2 to 64 rows ran")
    assert f"within {eff.error():.0%} on average, against {eff.error([1.0] * 6):.0%} for the roofline alone" in text
    assert "the curve, not the roofs" in text  # 100% against 345%
    # a sweep that jumps between neighbours: the left-out points are no better than the roofs
    jumpy = [1.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    left_out = GemmEfficiency(tuple(ROWS), tuple(jumpy)).leave_one_out()
    assert "predicts little between its points" in checks.describe_gemm_efficiency(ROWS, jumpy, left_out, [5.0] * 6, 11)
    assert "within 2× of the roofs at every M" in checks.describe_gemm_efficiency(ROWS, [1.2] * 6, [1.2] * 6,
                                                                                  [9.0] * 6, 11.2)


@pytest.mark.parametrize("without, with_, says", [
    (0.74, 0.28, "explain 55% of the gap"),  # Zen 3's S(B): 1 - ln 1.28 / ln 1.74 = 0.554
    (0.50, 0.48, "changes it by less than the 10% noise"),
    (0.30, 0.60, "worse with it"),
    (0.05, 0.04, "already within the 10% noise"),
    (0.74, 0.05, "What is left is within the noise"),
])
def test_efficiency_gain_sentence_is_chosen_by_the_errors(without, with_, says):
    text = checks.describe_efficiency_gain("S(B)", without, with_)
    assert says in text and text.startswith(f"The model's S(B) is off by {with_:.0%} on average")
    assert "past the GEMM sweep" in checks.describe_efficiency_gain("S(B)", without, with_, extrapolated=2)


def test_speedup_trend_explains_a_fall_that_did_not_show():
    # Zen 3: S = 0.528, 1.073, 1.001, 1.286; the model 1.687, 1.553, 1.120, 0.725
    batches, s, model = [1, 2, 4, 8], [0.528, 1.073, 1.001, 1.286], [1.687, 1.553, 1.120, 0.725]
    falls = checks.speedup_falls(batches, s, model)
    assert falls.tested and not falls.ok
    slow = checks.describe_slow_gemms(ROWS, ZEN3_RATIOS, ZEN3_GBS, 11.2)
    text = checks.describe_speedup_trend(falls, batches, [5.32, 1.81, 2.32, 1.77], [1.01, 1.17, 2.1, 3.63], slow)
    assert text.startswith("S did not fall because the iteration did not grow dearer than plain decoding. Verify "
                           "cost 1.81× a decode pass at B = 2 and 1.77× at B = 8, where the model has 1.17× and 3.63×.")
    assert "the GEMM of 2 to 64 rows" in text and "cannot predict it" in text
    assert "A cost the roofline does not see" in checks.describe_speedup_trend(falls, batches, [5.3, 1.8, 2.3, 1.8],
                                                                              [1.0, 1.2, 2.1, 3.6])
    held = checks.speedup_falls(PAYS["batches"], measured_s(PAYS), PAYS["model_s"])
    assert checks.describe_speedup_trend(held, PAYS["batches"], vd(PAYS), PAYS["model_vd"], slow) == ""


# ---------------------------------------------------------------------------------------------- Chapter 3

# Chapter 3's stored run (2-core AMD EPYC, one thread): k, wall-clock S (median, low, high), S from the passes,
# Leviathan's E[N]/(1 + kc), and the loop's unmodelled ms per iteration
E2E_K = [1, 2, 4, 6]
E2E = {"median": [0.750, 0.743, 0.675, 0.565], "low": [0.541, 0.618, 0.548, 0.493],
       "high": [0.961, 1.096, 0.836, 0.778], "passes": [1.018, 0.998, 0.773, 0.688],
       "leviathan": [1.175, 1.197, 0.934, 0.817], "extra": [1.496, 1.896, 1.832, 2.305]}


def wall(name, predicted, **changes):
    e = {**E2E, **changes}
    return checks.wall_clock_agrees(name, E2E_K, e["median"], e["low"], e["high"], predicted)


def test_wall_clock_verdicts_have_a_stated_noise_margin():
    # the passes: 1.018 <= 0.961 x 1.1 = 1.057, 0.998 <= 1.206, 0.773 <= 0.920, 0.688 <= 0.856: every k agrees
    passes = wall("the pass times", E2E["passes"])
    assert passes.ok and passes.sentence == ("The pass times predicted the wall-clock speedup at every k, within the "
                                             "measured range and the 10% noise.")
    # Leviathan: 1.175 > 1.057 at k = 1 (1.11x off) and 0.934 > 0.920 at k = 4 (1.02x): k = 1 is the worst
    lev = wall("Leviathan's formula", E2E["leviathan"])
    assert not lev.ok and lev.numbers["worst k"] == 1
    assert lev.sentence == ("Leviathan's formula predicted 1.18× at k = 1, above the 0.54–0.96× the wall clock "
                            "measured (median 0.75×), beyond the 10% noise. It missed so at 2 of the 4 values of k")
    text = checks.describe_wall_clock(lev, E2E_K, E2E["leviathan"], E2E["median"], E2E["extra"], 0.3)
    assert text.endswith("took 1.50 ms per iteration at k = 1: sampling, cache rollback and bookkeeping, which no "
                         "prediction from pass times sees.")
    # a prediction below the range: plain decoding's own loop is named
    low = wall("the pass times", [0.4, 0.998, 0.773, 0.688])  # 0.4 < 0.541 / 1.1 = 0.492
    assert not low.ok and "below the 0.54–0.96×" in low.sentence
    assert "Plain decoding paid 0.30 ms per token" in checks.describe_wall_clock(low, E2E_K, [0.4, 0.998, 0.773, 0.688],
                                                                              E2E["median"], E2E["extra"], 0.3)
    assert checks.describe_wall_clock(passes, E2E_K, E2E["passes"], E2E["median"], E2E["extra"], 0.3) == passes.sentence
    with pytest.raises(ValueError):
        wall("x", E2E["passes"][:3])


@pytest.mark.parametrize("c, says", [
    (0.43, "per-pass overhead, not the bytes, sets c (6.2× what reading the weights would give)"),  # the stored run
    (0.09, "per-pass overhead adds 30% to it"),
    (0.072, "equal within the 10% noise"),
    (0.05, "faster than its share of the bytes"),
])
def test_overhead_sentence_follows_c(c, says):
    text = checks.describe_overhead_c(c, 0.069)
    assert says in text and text.startswith(f"So c = {c:.2f}, against the parameter ratio 0.069")


def test_formula_gap_sentence():
    assert checks.describe_formula_gap({0.0: 0.031, 1.0: -0.02}) == (
        "On average the i.i.d. formula is close: measured E[N] differs from it by 3.1% at temperature 0 and 2.0% at "
        "temperature 1.")
    assert "misses the mean here" in checks.describe_formula_gap({0.0: 0.031, 1.0: 0.2})


def test_tree_formula_sentence_follows_the_gap():
    # Chapter 7's stored run: measured 3.100, 3.644, 3.478, 4.041 against the formula's 3.176, 3.496, 3.358, 3.909
    measured = {"chain of 4": 3.100, "(2, 1, 1, 1)": 3.644, "(3, 2, 1)": 3.478, "best 15": 4.041}
    formula = {"chain of 4": 3.176, "(2, 1, 1, 1)": 3.496, "(3, 2, 1)": 3.358, "best 15": 3.909}
    assert checks.describe_tree_formula(measured, formula, chain="chain of 4") == (
        "The formula predicts every tree's tokens per iteration to within 4.2% of what tree decoding measured, and "
        "every wider tree yielded more than the chain of 4.")
    close = checks.describe_tree_formula({**measured, "(3, 2, 1)": 2.9}, formula, chain="chain of 4")
    assert close == ("The formula predicts every tree's tokens per iteration to within 13.6% of what tree decoding "
                     "measured; the (3, 2, 1) yielded no more than the chain of 4 (3.10).")
    missed = checks.describe_tree_formula({**measured, "(3, 2, 1)": 2.6}, formula, chain="chain of 4")
    assert missed.startswith("The formula misses what tree decoding measured by up to 22.6% (the (3, 2, 1): 2.60 "
                             "tokens per iteration against 3.36), 15% or more")
    assert missed.endswith("; the (3, 2, 1) yielded no more than the chain of 4 (3.10).")
    with pytest.raises(ValueError, match="chain"):
        checks.describe_tree_formula(measured, formula, chain="chain of 3")


def test_amortization_clause_follows_the_verdict():
    held = checks.grows("per-token time falls", [1, 128], [1.0, 13.9], [1.0, 24.5])
    flat = checks.grows("per-token time falls", [1, 64], [1.0, 1.1], [1.0, 24.5])
    untested = checks.grows("per-token time falls", [1, 64], [1.0, 1.5], [1.0, 1.8])
    assert held.ok and not flat.ok and not untested.tested
    assert checks.describe_amortization(held, 1, 128, 13.9) == (
        "Here the fastest per-token time fell 13.9× from B = 1 to its best batch, B = 128. The model on this "
        "device's measured roofs predicts 24.5× from B = 1 to 128, where it measured 13.9×, enough for the check "
        "above.")
    assert checks.describe_amortization(flat, 1, 64, 2.9).endswith("where it measured 1.1×: too flat, as the check "
                                                                  "above says.")
    assert checks.describe_amortization(untested, 1, 64, 1.5).endswith("predicts 1.8× from B = 1 to 64, where it "
                                                                       "measured 1.5×: too small a fall to test.")
    assert "saved nothing" in checks.describe_amortization(flat, 1, 1, 1.0)


def test_describe_all_names_only_what_failed():
    ok = checks.Verdict("a grows", True, True, "It grew.")
    untested = checks.Verdict("b grows", True, False, "Nothing to test.")
    bad = checks.Verdict("c grows", False, True, "From L = 512 to 8192 ...: too flat.")
    assert checks.describe_all([ok, untested], "All grew.") == "All grew."
    text = checks.describe_all([ok, bad], "All grew.")
    assert text == "Not as the model says: c grows. From L = 512 to 8192 ...: too flat."


def test_pass_price_sentence():
    # Chapter 7's stored run: the draft c = 0.233 against 0.069 by bytes, the early exit 0.62 against 0.52
    mixed = checks.describe_pass_prices({"draft": (0.233, 0.069), "early exit": (0.62, 0.52)})
    assert mixed == ("The prices here are partly the bytes and partly per-pass overhead: the draft 3.38× its share of "
                     "the bytes and the early exit 1.19× its share of the bytes.")
    assert checks.describe_pass_prices({"draft": (0.233, 0.069)}).startswith("At these model sizes per-pass overhead")
    assert "follow the bytes" in checks.describe_pass_prices({"draft": (0.072, 0.069), "early exit": (0.5, 0.52)})
    with pytest.raises(ValueError):
        checks.describe_pass_prices({})


@pytest.mark.parametrize("fused, says", [(1.0, "ran 3.0× faster"), (2.9, "the same within"), (4.0, "costs more")])
def test_fused_sentence(fused, says):
    assert says in checks.describe_fused(fused, 3.0)


def test_takeaway_price_sentence_follows_the_numbers():
    # Chapter 7's stored run on the EPYC: c = 0.233 against 0.069 by bytes, chain 1.90, tree 1.60 one-token passes
    said = checks.describe_price_measured(2.217e-3, 8.07e6, 20e9, 0.233, 0.069, (5, 1.90), (16, 1.60))
    assert ("A draft pass costs c = 0.233 of a target pass, against 0.069 by bytes. A one-token target pass takes "
            "2.22 ms, where reading its 8.1 MB of weights at the copy bandwidth measured above takes 0.40 ms. The rest "
            "is per-pass overhead, which a small model pays in full." in said)
    assert "The tree measured cheaper than the chain: more work ran faster" in said
    ordered = checks.describe_price_measured(2.1e-3, 8.07e6, 20e9, 0.233, 0.069, (5, 1.40), (16, 1.78))
    assert "measured cheaper" not in ordered and ordered.endswith("the 16-token tree 1.78, where the bytes, read once "
                                                                  "either way, say about 1.")
    assert "its 0.069 by bytes" in checks.describe_price_measured(2e-3, 8e6, 2e10, 0.072, 0.069, (5, 1.0), (16, 1.0))
    # the opening comes from the same noise tests: the draft's c against its bytes share, each verify against 1
    opening = "Measured on this device, the shipped pair "
    assert said.startswith(opening + "does not follow that price. A draft pass costs")
    assert checks.describe_price_measured(2e-3, 8e6, 2e10, 0.072, 0.069, (5, 1.05), (16, 0.97)).startswith(
        opening + "follows that price. A draft pass costs c = 0.072 of a target pass, its 0.069 by bytes.")
    assert checks.describe_price_measured(2e-3, 8e6, 2e10, 0.072, 0.069, (5, 1.05), (16, 1.6)).startswith(
        opening + "follows that price in its draft but not in its verify passes. ")
    assert checks.describe_price_measured(2e-3, 8e6, 2e10, 0.233, 0.069, (5, 1.0), (16, 1.08)).startswith(
        opening + "follows that price in its verify passes but not in its draft. ")
    # each of its sentences within the 45 words a glued sentence may have
    for sentence in said.split(". "):
        assert len(sentence.split()) <= 45, sentence
    with pytest.raises(ValueError, match="bandwidth"):
        checks.describe_price_measured(2e-3, 8e6, 0, 0.2, 0.07, (5, 1.4), (16, 1.8))


@pytest.mark.parametrize("per_hit, compare, closing", [
    (1.15e-3, "less than", "A recompute is a prefill, no more."),  # Chapter 9's stored run: 1.15 ms against 6.76
    (6.0e-3, "about as much as", "A recompute is a prefill, no more."),
    (10.0e-3, "more than", "Here a recompute cost 1.5× a prefill of its tokens on their own"),
    (-0.1e-3, "less than", "Within this run's noise the recompute cost nothing measurable"),
])
def test_recompute_sentence_follows_the_ratio(per_hit, compare, closing):
    said = checks.describe_recompute(per_hit, 6.76e-3)
    assert said[0] == compare and said[1].startswith(closing)


def test_adaptive_policy_verdict():
    # Chapter 8's stored run: plain 1.105 measured, fixed 1.008, V0 0.997 (adaptive k's time = 1)
    ratios = {"plain decoding": 1.105, "fixed k = 2": 1.008, "V0 rule": 0.997}
    sampled = {"plain decoding": 1.03, "fixed k = 2": 0.99, "V0 rule": 0.99}
    v = checks.adaptive_holds(ratios, sampled)
    assert v.ok and v.sentence == ("The step times sampled during the run predicted no clear win (more than 15%) "
                                   "for adaptive k over any policy. Adaptive k was never more than 15% behind: at "
                                   "worst it ran at 1.00× the speed of the V0 rule.")
    v = checks.adaptive_holds(ratios, {**sampled, "plain decoding": 1.2})
    assert v.ok and v.sentence.startswith("The step times sampled during the run predicted a clear win for adaptive k "
                                          "over the plain decoding (1.20×), and it measured 1.10×. Adaptive k was "
                                          "never more than 15% behind")
    lost = checks.adaptive_holds({**ratios, "plain decoding": 0.98}, {**sampled, "plain decoding": 1.2})
    assert not lost.ok and "a clear win over the plain decoding (1.20×) and it measured 0.98×" in lost.sentence
    behind = checks.adaptive_holds({**ratios, "V0 rule": 0.8}, sampled)
    assert not behind.ok and "adaptive k ran at 0.80× the speed of the V0 rule, more than 15% behind" in behind.sentence
    with pytest.raises(ValueError):
        checks.adaptive_holds(ratios, {"plain decoding": 1.0})
