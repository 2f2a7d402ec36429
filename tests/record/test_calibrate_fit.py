"""Calibrations, the fits (calibrate.predictions, features, engine_fit, one_fit): ``fit`` recovers knobs it was
given, the what-ifs (trees, derated peaks, curves, varied inputs), the vectorized model prices as ``cost`` does,
the joint fit recovers each engine's knobs, and the chapter's done-when checks against the published record."""

import dataclasses
import math

import numpy as np
import pytest

from specnotes import validate
from specnotes.analytic import cost, hardware
from specnotes.record import calibrate

FIG1C = ("specdecode_bench", "fig1c_eagle3")


def _synthetic(cases, **truth):
    """The same cases with the 'measured' speedup replaced by the model's at known knobs."""
    return [dataclasses.replace(c, measured=c.speedup(**truth)) for c in cases]


@pytest.mark.parametrize("truth", [
    {"overlap": "none", "overhead": 2.0e-3, "draft_overhead": 0.7e-3},
    {"overlap": "kernel", "overhead": 4.5e-3, "draft_overhead": 0.3e-3},
    {"overlap": "pass", "overhead": 1.0e-3, "draft_overhead": 1.5e-3},
])
def test_fit_recovers_the_knobs_that_made_the_data(truth):
    f = calibrate.fit(_synthetic(calibrate.cases(*FIG1C), **truth))
    assert f.knobs["overlap"] == truth["overlap"]
    assert f.knobs["overhead"] == pytest.approx(truth["overhead"], rel=0.01)
    assert f.knobs["draft_overhead"] == pytest.approx(truth["draft_overhead"], rel=0.01)
    assert f.rms_log < 1e-3
    assert f.residuals == pytest.approx([0.0] * 4, abs=2e-3)


def test_fit_with_tensor_parallelism_recovers_the_per_pass_sums():
    # at tp = 8 every pass of the (self-speculating) model makes 2·32 all-reduces, so the data fix
    # only overhead + 64·latency and draft_overhead + 64·latency: the fit must recover those sums
    # (and reproduce the data), whatever split between the knobs it lands on
    truth = {"overlap": "kernel", "overhead": 1.0e-3, "draft_overhead": 2.0e-3, "allreduce_latency": 15e-6}
    cases = calibrate.cases("magicdec", "fig6c_llama31_selfspec_a100", alpha=calibrate.magicdec_alpha)
    f = calibrate.fit(_synthetic(cases, **truth), free=("overhead", "draft_overhead", "allreduce_latency"))
    calls = 2 * calibrate.LLAMA_31_8B.n_layers
    for knob in ("overhead", "draft_overhead"):
        got = f.knobs[knob] + calls * f.knobs["allreduce_latency"]
        assert got == pytest.approx(truth[knob] + calls * truth["allreduce_latency"], rel=0.01), knob
    assert f.knobs["overlap"] == "kernel" and f.rms_log < 1e-3
    # with the latency fixed at its true value, the overheads themselves come back
    f = calibrate.fit(_synthetic(cases, **truth), fixed={"allreduce_latency": 15e-6})
    assert (f.knobs["overhead"], f.knobs["draft_overhead"]) == pytest.approx((1.0e-3, 2.0e-3), rel=0.01)


def test_fit_reports_every_overlap_mode_and_keeps_the_best():
    f = calibrate.fit(calibrate.cases(*FIG1C))
    assert set(f.by_overlap) == set(cost.OVERLAPS)
    assert f.rms_log == min(v["rms_log"] for v in f.by_overlap.values())
    assert f.predicted == pytest.approx(calibrate.predict(list(f.cases), **f.knobs))
    assert [r["model"] for r in f.rows()] == pytest.approx(list(f.predicted))


@pytest.mark.parametrize("kwargs", [
    {"free": ()}, {"free": ("overhead", "overhead")}, {"free": ("t0",)},
    {"fixed": {"overhead": 1e-3}}, {"fixed": {"allreduce_latency": -1.0}, "free": ("overhead",)},
    {"overlaps": ("perfect",)},
])
def test_fit_checks_its_arguments(kwargs):
    with pytest.raises(validate.BadArgument):
        calibrate.fit(calibrate.cases(*FIG1C), **kwargs)


# ---- done when (issue 12)

def test_calibrated_model_within_10_percent_of_specdecode_bench_fig1c():
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    rows = calibrate.compare(calibrate.cases(*FIG1C), **knobs)
    assert [r["point"] for r in rows] == ["batch=1", "batch=16", "batch=64", "batch=128"]
    assert all(abs(r["residual"]) < 0.10 for r in rows), rows
    # and the idealized model is not: flat near 2.0 where the measurement falls to 1.3
    ideal = calibrate.compare(calibrate.cases(*FIG1C))
    assert max(abs(r["residual"]) for r in ideal) > 0.10


def test_magicdec_trend_needs_the_draft_window_and_is_reproduced_with_tp8():
    cases = calibrate.cases("magicdec", "table_a100_llama31_selfspec", alpha=calibrate.magicdec_alpha)
    assert [(c.batch, c.k, c.tp, c.draft_context) for c in cases] == [(32, 3, 8, 512), (64, 3, 8, 512),
                                                                       (128, 4, 8, 512)]
    measured = [c.measured for c in cases]
    assert measured == sorted(measured)  # the published speedup rises with the batch
    for knobs in ({}, calibrate.calibration("A100-80GB", "magicdec")):
        s = calibrate.predict(cases, **knobs)
        assert s == sorted(s) and s[0] > 1, knobs  # the model rises too, idealized and calibrated
    full_kv = calibrate.vary(cases, draft_context=None)  # the draft reads the whole cache
    s = calibrate.predict(full_kv)
    assert max(s) < 1 and s[-1] < s[0]  # without the window self-speculation does not pay, and falls


def test_tree_speedup_with_one_branch_is_the_chain():
    alpha = cost.implied_alpha(2.4, 3)
    knobs = {"overlap": "none", "overhead": 3e-3, "draft_overhead": 5e-4}
    for b in (1, 64):
        chain = cost.batch_speedup(calibrate.QWEN3_8B, calibrate.EAGLE3_QWEN3_8B, "H100-SXM", b, 3, alpha, 200, **knobs)
        tree = calibrate.tree_speedup(calibrate.QWEN3_8B, calibrate.EAGLE3_QWEN3_8B, "H100-SXM", b, 3, 1, 3, 2.4, 200,
                                      **knobs)
        assert tree == pytest.approx(chain, rel=1e-12)
    # verifying 21 tree tokens for 2.92 accepted loses to the chain once the verify pass is compute-bound
    wide = calibrate.tree_speedup(calibrate.QWEN3_8B, calibrate.EAGLE3_QWEN3_8B, "H100-SXM", 64, 3, 4, 21, 2.92, 200)
    chain = calibrate.tree_speedup(calibrate.QWEN3_8B, calibrate.EAGLE3_QWEN3_8B, "H100-SXM", 64, 3, 1, 3, 2.25, 200)
    assert wide < chain


def test_derated_scales_only_the_peaks():
    h100 = hardware.accelerator("H100-SXM")
    half = calibrate.derated("H100-SXM", 0.5)
    assert half.peak("bf16") == h100.peak("bf16") / 2 and half.mem_bandwidth == h100.mem_bandwidth
    for bad in (0.0, 1.5):
        with pytest.raises(validate.BadArgument):
            calibrate.derated("H100-SXM", bad)
    cases = calibrate.cases(*FIG1C)
    rows = calibrate.efficiency_scan(cases, (1.0, 0.5))
    assert [r["efficiency"] for r in rows] == [1.0, 0.5]
    assert rows[0]["rms_log"] == pytest.approx(calibrate.fit(cases).rms_log)


def test_curve_keeps_everything_but_the_batch():
    case = calibrate.cases(*FIG1C)[2]
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    assert calibrate.curve(case, [64], **knobs) == [case.speedup(**knobs)]
    assert calibrate.curve(case, [1, 128]) == pytest.approx([c.speedup() for c in calibrate.cases(*FIG1C)][::3])


def test_predictor_pass_time_by_hand():
    # B = 2, n = 4, L = 1000 with the published coefficients, added up by hand
    by_hand = 3.92645679e-08 * 2 * 1000 + 2.10103129e-05 * 8 + 5.88590713e-03 + 1.20683946e-03
    assert calibrate.predictor_pass_time(2, 4, 1000) == pytest.approx(by_hand, rel=1e-12)
    with pytest.raises(validate.BadArgument):
        calibrate.predictor_pass_time(0, 1, 0)


def test_vary_changes_only_what_it_is_told():
    cases = calibrate.cases(*FIG1C)
    tp2 = calibrate.vary(cases, tp=2, context=100)
    assert [(c.tp, c.context, c.batch, c.measured) for c in tp2] == [(2, 100, c.batch, c.measured) for c in cases]
    with pytest.raises(validate.BadArgument, match="input to vary"):
        calibrate.vary(cases, measured=2.0)


@pytest.mark.parametrize("knobs,knee", [
    ({}, math.inf),
    ({"overlap": "none", "draft_overhead": 4e-4, "layer_overhead": 6e-5, "allreduce_latency": 1e-5}, 1.0),
    ({"overlap": "kernel", "overhead": 1e-3, "draft_overhead": 2e-4, "layer_overhead": 3e-5,
      "allreduce_latency": 2e-5}, math.inf),
])
def test_features_price_every_case_as_cost_does(knobs, knee):
    # the vectorized evaluator the fits use against cost's own functions, over the whole record (trees,
    # tp = 4 and 8, EAGLE heads, self-speculation with a window, anchored series)
    rec = calibrate.record()
    f = calibrate.Features(rec.cases)
    x = np.array([[knobs.get(j, 0.0) for j in calibrate.LINEAR]] * f.n)
    assert f.predict(knee, x) == pytest.approx(calibrate.predict(list(rec.cases), **knobs), rel=1e-9)


def test_eagle_heads_priced_as_engines_run_them():
    # the first draft pass runs the fc and the layer over the k + 1 verified tokens, the LM head over B
    head = calibrate.EAGLE3_LLAMA31_8B
    passes = cost.draft_passes(head, 8, 3, 100)
    assert len(passes) == 3
    first, later = passes[0].kernels, passes[1].kernels
    d = head.layer.d_model
    assert first[0].flops == 2 * (head.body_params + 3 * d * d) * 8 * 4
    assert later[0].flops == 2 * head.body_params * 8 and first[1].flops == later[1].flops == 2 * d * 32000 * 8
    assert head.params == 3 * d * d + head.body_params + d * 32000
    # EAGLE-3's wide QKV: the layer reads [embedding; feature]
    assert head.body_params == head.layer.layer_params + d * (32 + 2 * 8) * 128


def _synthetic_by_engine(cases, knobs_by_engine):
    return [dataclasses.replace(c, measured=c.speedup(**knobs_by_engine[c.engine])) for c in cases]


def test_fit_engines_recovers_each_engines_knobs():
    truth = {"vllm": {"overlap": "none", "draft_overhead": 3e-4, "layer_overhead": 4e-5, "allreduce_latency": 1e-5},
             "sglang": {"overlap": "none", "draft_overhead": 6e-4, "layer_overhead": 7e-5, "allreduce_latency": 1e-5}}
    cases = [c for c in calibrate.record().cases if c.source == "specdecode_bench" and not c.anchored]
    cases = _synthetic_by_engine(cases, truth)
    fit = calibrate.fit_engines(calibrate.CHOSEN, cases, shrink=1e-6)
    for engine, version in (("vllm", "0.10.1"), ("sglang", "0.5.9")):
        knobs, how = fit.knobs((engine, version, "H100-SXM"))
        assert how == "fitted to this engine on this GPU"
        for knob in ("draft_overhead", "layer_overhead"):
            assert knobs[knob] == pytest.approx(truth[engine][knob], rel=0.02), (engine, knob)
    # an engine the fit never saw gets the pooled knobs, and says so
    assert fit.knobs(("tgi", None, "H100-SXM"))[1] == "no fit for this engine: pooled over every engine"
    assert fit.knobs(("vllm", "0.11.0", "H100-SXM"))[1] == "vllm fitted on other versions or GPUs"
