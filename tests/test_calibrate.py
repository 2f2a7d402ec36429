"""Calibrations: α from published tokens per iteration, the fit (recovers knobs it was given), the stored
values (equal to a refit), and the chapter's done-when checks against the published record."""

import dataclasses
import math

import numpy as np
import pytest

from specnotes import calibrate, cost, hardware, published, validate

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


def test_stored_calibrations_are_what_fit_engines_gives():
    stored = calibrate.stored()
    v = calibrate.VARIANTS[calibrate.CHOSEN]
    assert stored["model"]["variant"] == v.name and stored["model"]["free"] == list(v.free)
    full = calibrate.fit_engines(v)
    names = 0
    for accel, by_name in cost.calibrations().items():
        for name, record in by_name.items():
            if "alias_of" in record:
                assert cost.calibration(accel, name) == cost.calibration(accel, record["alias_of"])
                continue
            names += 1
            engine = record["family"]  # "sglang", or "sglang-moe" for its MoE targets (calibrate.MOE_APART)
            assert name == calibrate.calibration_name(engine, record["version"])
            knobs, how = full.knobs((engine, record["version"], accel))
            assert how == "fitted to this engine on this GPU"
            assert record["knobs"]["overlap"] == knobs["overlap"] == "none"
            for knob, value in record["knobs"].items():
                if knob != "overlap":
                    assert value == pytest.approx(knobs[knob], rel=1e-3, abs=1e-12), (accel, name, knob)
    assert names == len(full.keys)  # one stored calibration per (engine, version, GPU) of the record
    assert stored["pooled"]["knobs"]["layer_overhead"] == pytest.approx(
        full.knobs(("no such engine", None, "H100-SXM"))[0]["layer_overhead"], rel=1e-3)


def test_stored_cross_validation_is_what_cross_validate_gives():
    rows = calibrate.stored()["cross_validation"]["rows"]
    again = calibrate.cross_validate().rows()
    assert [(r["variant"], r["held out"], r["points"]) for r in rows] == [
        (r["variant"], r["held out"], r["points"]) for r in again]
    for r, a in zip(rows, again, strict=True):
        assert r["median |log ratio|"] == pytest.approx(a["median |log ratio|"], abs=1e-4)
        assert r["bias"] == pytest.approx(a["bias"], abs=1e-4)


def test_calibration_is_reexported_by_cost_and_returns_a_copy():
    knobs = cost.calibration("H100-SXM", "specdecode_bench")
    assert knobs == calibrate.calibration("H100-SXM", "specdecode_bench")
    knobs["overhead"] = 1.0
    assert cost.calibration("H100-SXM", "specdecode_bench")["overhead"] != 1.0
    assert set(knobs) <= {"overlap", *calibrate.KNOBS}


@pytest.mark.parametrize("args,match", [
    (("H100", "specdecode_bench"), "accelerator_name"),
    (("T4", "specdecode_bench"), "no calibration for T4"),
    (("H100-SXM", "tgi-2.0"), "source"),
])
def test_calibration_checks_its_arguments(args, match):
    with pytest.raises(validate.BadArgument, match=match):
        cost.calibration(*args)


# ---- done when (issue 12)

def test_calibrated_model_within_10_percent_of_specdecode_bench_fig1c():
    knobs = cost.calibration("H100-SXM", "specdecode_bench")
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
    for knobs in ({}, cost.calibration("A100-80GB", "magicdec")):
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
    knobs = cost.calibration("H100-SXM", "specdecode_bench")
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


# ---- the record, the vectorized model, the engine fit, the cross-validation (issue 24)

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


def _scaled(rec, keep, factor=3.0):
    """The record with the measured S of every case for which ``keep(case)`` is true multiplied by ``factor``."""
    return calibrate.Record(tuple(dataclasses.replace(c, measured=c.measured * factor) if keep(c) else c
                                  for c in rec.cases), rec.skipped)


def test_cross_validation_never_sees_the_points_it_predicts():
    # change the measured S of what is held out wildly: its held-out predictions must not move, the in-sample
    # ones must. A series with a published acceptance, leaving one series out:
    rec = calibrate.record()
    v = "per-layer cost"
    target = "specdecode_bench/fig1b_eagle3"
    mine = np.array([f"{c.source}/{c.series}" == target for c in rec.cases])
    assert not any(c.anchored for c, m in zip(rec.cases, mine, strict=True) if m)
    changed = _scaled(rec, lambda c: f"{c.source}/{c.series}" == target)
    a = calibrate.cross_validate((v,), ("series",), rec=rec)
    b = calibrate.cross_validate((v,), ("series",), rec=changed)
    assert np.allclose(a.predicted["series"][v][mine], b.predicted["series"][v][mine])
    assert not np.allclose(a.in_sample[v][mine], b.in_sample[v][mine])
    # a whole source, leaving one source out (its points predicted from their published acceptance; an
    # anchored point takes its level from its own series' anchor, by design: tested below)
    source = np.array([c.source == "magicdec" and not c.anchored for c in rec.cases]) & rec.scored
    a = calibrate.cross_validate((v,), ("source",), rec=rec)
    b = calibrate.cross_validate((v,), ("source",), rec=_scaled(rec, lambda c: c.source == "magicdec"))
    assert np.allclose(a.predicted["source"][v][source], b.predicted["source"][v][source])
    assert not np.allclose(a.in_sample[v][source], b.in_sample[v][source])
    # an anchored series: every point but its anchor changed, its predictions (from the anchor) do not move
    anchored = "eagle3_2025/table3_sglang_h100_eagle"
    idx = [i for i, c in enumerate(rec.cases) if f"{c.source}/{c.series}" == anchored]
    assert all(rec.cases[i].anchored for i in idx) and not rec.scored[idx[0]] and rec.scored[idx[1:]].all()
    first = rec.cases[idx[0]]
    changed = _scaled(rec, lambda c: f"{c.source}/{c.series}" == anchored and c is not first)
    a = calibrate.cross_validate((v,), ("series",), rec=rec)
    b = calibrate.cross_validate((v,), ("series",), rec=changed)
    assert np.allclose(a.predicted["series"][v][idx[1:]], b.predicted["series"][v][idx[1:]])
    assert not np.allclose(a.in_sample[v][idx[1:]], b.in_sample[v][idx[1:]])


def test_cross_validation_is_deterministic_and_reports_every_variant():
    cv = calibrate.cross_validate()
    rows = cv.rows()
    held = lambda v, h: "not held out" if v == "first calibration" else h
    assert {(r["variant"], r["held out"], r["regime"]) for r in rows} == {
        (v, held(v, h), regime) for v in calibrate.VARIANTS for h in ("one source", "one series")
        for regime in calibrate.REGIMES}
    # the two regimes split the scored points
    by = {r["regime"]: r["points"] for r in rows if r["variant"] == calibrate.CHOSEN and r["scheme"] == "source"}
    assert by["acceptance only"] + by["anchored"] == by["all"] == int(cv.record.scored.sum())
    again = calibrate.cross_validate(rec=calibrate.record())
    for scheme in ("source", "series"):
        for v in calibrate.VARIANTS:
            assert np.array_equal(cv.predicted[scheme][v], again.predicted[scheme][v], equal_nan=True), (scheme, v)


def test_done_when_leave_one_source_out():
    # issue 24's benchmark: the best variant, leaving one source out, over the whole record (both regimes
    # mixed). The goals are calibrate.GOALS (median <= 0.10, |bias| <= 0.05, verdict >= 95%); judged per
    # regime in test_goals_are_judged_per_regime. The median and the bias of the mix meet them.
    cv = calibrate.cross_validate()
    assert cv.best("source") == calibrate.CHOSEN
    best = cv.summary("source", calibrate.CHOSEN)
    assert best["points"] >= 150
    assert best["median |log ratio|"] <= 0.10
    # REGRESSION GUARD, not the goal: with the MoE points (two users' SGLang runs, predicted too high) the bias
    # of the mix is +0.052, just past GOALS["bias"] = 0.05; judge says so, and this catches it getting worse
    assert abs(best["bias"]) <= 0.06 and calibrate.judge(best).met["bias"] == (abs(best["bias"]) <= 0.05)
    # REGRESSION GUARD, not the goal: the verdict agreement reaches 91.2% (92.6% before the MoE points, of which
    # 12 of 16 agree), short of GOALS["verdict"] = 95% (Chapter 6 shows which points and why); this only catches
    # it getting worse
    assert best["verdict agreement"] >= 0.91
    assert not calibrate.judge(best).met["verdict"]
    # and it beats the idealized model and the first calibration on the same points
    for other in ("idealized", "first calibration", "2 knobs per engine"):
        assert cv.summary("source", other)["median |log ratio|"] > best["median |log ratio|"], other


def test_band_is_the_quantiles_of_the_nearest_errors():
    # 30 errors at B = 1 (all 0.1) and 30 at B = 128 (0.3 to 0.59): the band at B = 1 sees only the first kind
    at = (0.0,) * 30 + (7.0,) * 30
    errors = (0.1,) * 30 + tuple(0.3 + 0.01 * i for i in range(30))
    band = calibrate.Band(at, errors, ("a",) * 30 + ("b",) * 30, nominal=0.9, points=20)
    assert list(band.nearest(0.0)) == list(range(30))  # ties at the cut are all kept
    assert band.factors(0.0) == pytest.approx((math.exp(-0.1),) * 3)
    low, centre, high = band.factors(7.0)
    e = np.array(errors[30:])
    assert (low, centre, high) == pytest.approx(tuple(np.exp(-np.quantile(e, [0.95, 0.5, 0.05]))))
    assert low <= centre <= high  # the central estimate is never outside its own band
    assert band.factors(2.0) == band.factors(0.0) and band.factors(12.0) == band.factors(7.0)  # nearest side
    assert band.span() == (0.0, 7.0)
    # fewer errors than points: all of them
    few = calibrate.Band((0.0, 5.0), (0.1, 0.3), ("a", "b"), nominal=0.9, points=20)
    assert few.factors(0.0) == few.factors(5.0)
    assert calibrate.Band.from_json(band.to_json()).factors(7.0) == pytest.approx(band.factors(7.0), abs=1e-4)
    assert band.without("b").factors(7.0) == band.factors(0.0)
    with pytest.raises(validate.BadArgument, match="one coordinate and one source per error"):
        calibrate.Band((0.0,), (0.1, 0.2), ("a",))
    assert calibrate.min_points(0.9) == 20 and calibrate.min_points(0.95) == 40


@pytest.mark.parametrize(("low", "high", "said"), [
    (1.0001, 1.5, "pays"), (1.0, 1.5, "uncertain"), (0.5, 0.9999, "loses"), (0.5, 1.0, "uncertain"),
    (0.9, 1.1, "uncertain"), (1.2, 1.2, "pays"), (0.8, 0.8, "loses")])
def test_verdict_needs_the_whole_band_on_one_side_of_one(low, high, said):
    assert calibrate.verdict_of(low, high) == said


def test_verdict_refuses_a_band_upside_down():
    with pytest.raises(validate.BadArgument, match="low edge must not exceed"):
        calibrate.verdict_of(1.2, 1.1)


def test_the_band_is_judged_on_sources_it_was_not_built_from():
    cv = calibrate.cross_validate()
    h = calibrate.held_out_band(cv)
    full = calibrate.batch_band(cv)
    acceptance = np.array([not c.anchored for c in cv.record.cases])
    assert sorted(full.errors) == pytest.approx(sorted(cv.errors("source", calibrate.CHOSEN, acceptance)))
    for i, c in enumerate(h["cases"]):
        f = full.without(c.source).factors(math.log2(c.batch))
        assert (h["low"][i], h["centre"][i], h["high"][i]) == pytest.approx(tuple(h["model"][i] * x for x in f))
        assert c.source not in full.without(c.source).sources
        assert h["low"][i] <= h["centre"][i] <= h["high"][i]
    rows = {r["bucket"]: r for r in calibrate.band_table(cv)}
    assert list(rows)[:4] == ["B = 1", "B = 2–8", "B = 9–64", "B > 64"]
    assert sum(rows[b]["points"] for b in list(rows)[:4]) == rows["all"]["points"] == len(h["cases"])
    every = rows["all"]
    assert every["covered"] == int(h["covered"].sum()) and every["decisive"] == int(h["decisive"].sum())
    # a decisive verdict is right when the measured S is on its side of 1
    for v, m, right in zip(h["verdict"], h["measured"], h["right"], strict=True):
        assert right == ((v == "pays" and m > 1) or (v == "loses" and m <= 1))
    # the central estimate is the model's own S, moved to the band's nearest edge where the band excludes it
    assert h["centre"] == pytest.approx(np.clip(h["model"], h["low"], h["high"]))
    # built as issue 34 first built it (the nearest errors only), the band is narrower and covers less
    nearest = calibrate.held_out_band(cv, build="nearest")
    assert (nearest["high"] / nearest["low"] <= h["high"] / h["low"] + 1e-12).all()
    assert nearest["covered"].sum() <= h["covered"].sum()


def test_anchored_pairs_predict_one_batch_from_another_of_the_same_series():
    cv = calibrate.cross_validate()
    pairs = calibrate.anchor_pairs(cv)
    rec, ratio = cv.record, cv.ratio["source"][calibrate.CHOSEN]
    fig1c = [i for i, c in enumerate(rec.cases) if c.series == "fig1c_eagle3"]
    one, big = (next(i for i in fig1c if rec.cases[i].batch == b) for b in (1, 128))
    p = next(p for p in pairs if (p["series"], p["anchor"], p["batch"]) == ("fig1c_eagle3", 1, 128))
    predicted = rec.cases[one].measured * ratio[big] / ratio[one]
    assert p["error"] == pytest.approx(math.log(predicted / rec.cases[big].measured))
    assert p["at"] == pytest.approx(7.0)
    assert all(p["anchor"] != p["batch"] for p in pairs)
    rows = {r["distance"]: r for r in calibrate.anchor_table(cv)}
    assert set(rows) == {"1–2×", "2–8×", "> 8×", "up to 8× above"}
    assert rows["1–2×"]["pairs"] + rows["2–8×"]["pairs"] + rows["> 8×"]["pairs"] == len(pairs)


def _row(median, bias, verdict, points=50):
    return {"variant": "v", "regime": "acceptance only", "points": points, "median |log ratio|": median,
            "bias": bias, "verdict agreement": verdict}


def test_judge_chooses_its_sentence_by_the_numbers():
    every = calibrate.judge(_row(0.05, -0.01, 0.97), coverage=0.85)
    assert every.ok and all(every.met.values()) and "every goal is met" in every.sentence
    none = calibrate.judge(_row(0.2, 0.2, 0.8), coverage=0.5)
    assert not none.ok and not any(none.met.values()) and "no goal is met" in none.sentence
    some = calibrate.judge(_row(0.061, -0.004, 0.935))
    assert some.met == {"median": True, "bias": True, "verdict": False, "coverage": None}
    assert not some.ok and "met: median" in some.sentence and "Not met: verdict agreement 93.5%" in some.sentence
    assert "coverage" not in some.sentence  # not judged: not said
    # the goals' edges are inclusive
    assert calibrate.judge(_row(0.10, -0.05, 0.95), coverage=0.80).ok
    with pytest.raises(validate.BadArgument, match="summary row"):
        calibrate.judge({"median": 0.1})


def test_goals_are_judged_per_regime():
    cv = calibrate.cross_validate()
    goals = calibrate.goals_table(cv)
    assert set(goals) == set(calibrate.REGIMES)
    acc = cv.summary("source", calibrate.CHOSEN, regime="acceptance only")
    anchored = cv.summary("source", calibrate.CHOSEN, regime="anchored")
    assert goals["acceptance only"].met["bias"] == (abs(acc["bias"]) <= 0.05)
    assert goals["anchored"].met["median"] == (anchored["median |log ratio|"] <= 0.10)
    # predicted from the acceptance alone, the model is biased high (the complaint, not yet fixed)
    assert acc["bias"] > 0.05 and not goals["acceptance only"].ok
    table = calibrate.cv_table(cv)
    assert "acceptance only" in table and "anchored" in table and "not held out" in table


def test_bias_by_source_splits_the_regime_s_bias_over_its_sources():
    cv = calibrate.cross_validate()
    by = calibrate.bias_by_source(cv)
    acc = cv.summary("source", calibrate.CHOSEN, regime="acceptance only")
    assert sum(n for _, n in by.values()) == acc["points"]
    # the regime's bias is the points-weighted mean of its sources' (in log terms)
    assert sum(n * np.log(f) for f, n in by.values()) / acc["points"] == pytest.approx(acc["bias"])
    # the sources disagree: some are predicted too high, some too low (why the band spans their spread)
    assert min(f for f, _ in by.values()) < 1 < max(f for f, _ in by.values())


def test_lookup_says_which_calibration_it_found():
    name, knobs, how = calibrate.lookup("H100-SXM", "vllm", "0.10.1")
    assert name == "vllm-0.10.1" and knobs == cost.calibration("H100-SXM", "specdecode_bench")
    assert how == "fitted to vLLM 0.10.1 on H100-SXM"
    name, _, how = calibrate.lookup("H100-SXM", "SGLang", "0.5.3.post3")
    assert name.startswith("sglang-") and "not to SGLang 0.5.3.post3" in how
    name, knobs, how = calibrate.lookup("L40S", "sglang", "0.5.9")
    assert name is None and "not on L40S" in how and knobs == calibrate.stored()["families"]["sglang"]["knobs"]
    name, knobs, how = calibrate.lookup("H100-SXM", "tensorrt-llm")
    assert name is None and "pooled" in how and knobs == calibrate.stored()["pooled"]["knobs"]


def test_cli_cross_validation(capsys):
    assert calibrate.main(["--cv"]) == 0
    out = capsys.readouterr().out
    assert "per-layer cost" in out and "one source" in out
    for bucket in ("B = 1 ", "B = 2–8", "B = 9–64", "B > 64", "up to 8× above", "goals (issue 34)"):
        assert bucket in out
    for part in ("kept out by the rule", "by family", "MoE", "concurrency", "built as 'nearest' instead",
                 "MoE engines fitted apart", "candidate batch terms"):
        assert part in out, part
    with pytest.raises(SystemExit) as err:
        calibrate.main(["--bogus"])
    assert err.value.code == 2


def _band_rows(bias=0.0, median=0.1, median_all=0.1, coverage=0.9, right=1.0, decisive=0.8, small_coverage=0.0):
    n = 40
    row = lambda bucket, points, cov: {"bucket": bucket, "points": points, "coverage": cov,
                                       "covered": round(cov * points),
                                       "decisive": round(decisive * points), "decisive_share": decisive,
                                       "right": round(right * decisive * points), "decisive_right": right,
                                       "centre_bias": bias, "centre_median": median, "model_bias": bias,
                                       "model_median": median}
    return [row("B = 1", 9, small_coverage), {"bucket": "B = 2–8", "points": 0}, row("B = 9–64", n, coverage),
            row("B > 64", n, coverage), row("B > 1", 2 * n, coverage),
            row("all", 2 * n + 9, coverage) | {"centre_median": median_all, "model_median": median_all}]


ANCHOR = [{"distance": "up to 8× above", "pairs": 100, "median": 0.05, "bias": 0.0, "coverage": 0.9}]


@pytest.mark.parametrize(("goal", "inside", "outside"), [
    ("bias", dict(bias=0.10), dict(bias=0.1001)), ("bias", dict(bias=-0.10), dict(bias=-0.1001)),
    ("median", dict(median=0.15), dict(median=0.1501)), ("median_all", dict(median_all=0.12),
                                                          dict(median_all=0.1201)),
    ("coverage", dict(coverage=0.80), dict(coverage=0.7999)), ("right", dict(right=0.95), dict(right=0.9499)),
    ("decisive", dict(decisive=0.70), dict(decisive=0.6999))])
def test_judge_band_at_each_goals_edge(goal, inside, outside):
    met = calibrate.judge_band(_band_rows(**inside), ANCHOR)
    missed = calibrate.judge_band(_band_rows(**outside), ANCHOR)
    assert met.met[goal] and met.ok and "every goal is met" in met.sentence
    assert missed.met[goal] is False and not missed.ok and "Not met: " + {
        "bias": "bias", "median": "median", "median_all": "over every B", "coverage": "coverage",
        "right": "", "decisive": ""}[goal] in missed.sentence
    # a bucket with fewer than 10 points is not judged on coverage (B = 1 here covers none of its 9)
    assert met.numbers["coverage"] == inside.get("coverage", 0.9)


def test_judge_band_anchored_goal_and_what_is_not_judged():
    edge = [dict(ANCHOR[0], median=0.08)]
    assert calibrate.judge_band(_band_rows(), edge).met["anchor_median"]
    assert calibrate.judge_band(_band_rows(), [dict(ANCHOR[0], median=0.0801)]).met["anchor_median"] is False
    unjudged = calibrate.judge_band(_band_rows())
    assert unjudged.met["anchor_median"] is None and "anchored" not in unjudged.sentence
    none = calibrate.judge_band(_band_rows(bias=0.3, median=0.3, median_all=0.3, coverage=0.1, right=0.5,
                                           decisive=0.1), [dict(ANCHOR[0], median=0.2)])
    assert "no goal is met" in none.sentence
    assert "the model's S" in calibrate.judge_band(_band_rows(), ANCHOR, "model").sentence
    with pytest.raises(validate.BadArgument, match="band_table rows"):
        calibrate.judge_band(_band_rows()[:3])


def _term(bias, median, anchored):
    return {"variant": "v", "bias B > 1": bias, "median B > 1": median, "anchored median": anchored}


@pytest.mark.parametrize(("candidate", "kept"), [
    (_term(0.099, 0.15, 0.06), True),  # smaller |bias|, medians equal: kept
    (_term(-0.099, 0.15, 0.06), True),
    (_term(0.10, 0.15, 0.06), False),  # the same |bias|: not an improvement
    (_term(-0.10, 0.15, 0.06), False),
    (_term(0.05, 0.1501, 0.06), False),  # the median at B > 1 grows
    (_term(0.05, 0.15, 0.0601), False),  # the anchored median grows
])
def test_a_batch_term_is_kept_only_if_it_helps_without_hurting(candidate, kept):
    base = _term(0.10, 0.15, 0.06)
    assert calibrate.keeps(base, candidate) is kept


def test_term_search_on_the_record():
    cv = calibrate.cross_validate()
    rows = calibrate.term_search(cv)
    assert [r["variant"] for r in rows] == [calibrate.BASE, *calibrate.CANDIDATES]
    base = rows[0]
    acc = calibrate.residual_rows(cv)
    err = np.array([r["error"] for r in acc])
    big = np.array([r["batch"] > 1 for r in acc])
    assert base["bias B > 1"] == pytest.approx(err[big].mean())
    assert base["bias B = 1"] == pytest.approx(err[~big].mean())
    assert len(acc) == cv.summary("source", calibrate.BASE, regime="acceptance only")["points"]
    assert {r["verify_rows"] for r in acc if r["batch"] == 1 and not r["tree"]} <= {2, 3, 4, 5, 6}
    for r in rows[1:]:
        assert r["kept"] == calibrate.keeps(base, r)
    # on today's record no candidate is kept: each trades one source's bias for another's (Chapter 6);
    # should new data make one pass, cost must be able to price it before CHOSEN may move to it
    assert calibrate.kept_term(rows) is None and cv.best("source") == calibrate.CHOSEN == calibrate.BASE
    assert all(not calibrate.priceable(v) for v in calibrate.CANDIDATES)
    assert "kept: none" in calibrate.term_text(rows)


@pytest.mark.parametrize(("goal", "inside", "outside"), [
    ("median", dict(median=0.10), dict(median=0.1001)), ("bias", dict(bias=0.05), dict(bias=0.0501)),
    ("bias", dict(bias=-0.05), dict(bias=-0.0501)), ("verdict", dict(verdict=0.95), dict(verdict=0.9499)),
    ("coverage", dict(coverage=0.80), dict(coverage=0.7999))])
def test_judge_at_each_goals_edge(goal, inside, outside):
    numbers = dict(median=0.05, bias=0.0, verdict=0.97, coverage=0.9)
    make = lambda n: calibrate.judge(_row(n["median"], n["bias"], n["verdict"]), coverage=n["coverage"])
    met, missed = make({**numbers, **inside}), make({**numbers, **outside})
    assert met.met[goal] and "every goal is met" in met.sentence
    assert missed.met[goal] is False and "Not met: " in missed.sentence


@pytest.mark.parametrize(("decisive", "right", "says"), [
    (42, 42, "and all of them were right."), (42, 41, "and 41 of them were right."),
    (3, 0, "and none of them was right."), (0, 0, "None of the 51 points got a decisive verdict.")])
def test_decisive_text_says_all_only_when_every_one_was_right(decisive, right, says):
    row = {"points": 51, "decisive": decisive, "decisive_share": decisive / 51, "right": right}
    assert calibrate.decisive_text(row).endswith(says)


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
    with pytest.raises(calibrate.Unpriceable, match="latent"):
        calibrate._draft({"drafter": "eagle3-head"}, cost.DEEPSEEK_V3)


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
    assert {c.engine for c in rec.cases if c.moe} == {"sglang" + calibrate.MOE_SUFFIX}
    assert {c.engine for c in calibrate.shared_moe(rec).cases} == {c.engine.removesuffix("-moe") for c in rec.cases}
    assert {c.accel for c in calibrate.other_form_factor(rec).cases if c.gpu_assumed} == {"H100-PCIe"}
    # the closed loops: how many, and the rules that keep each out
    loops = [k for k in rec.kinds if "concurrency" in published.load(k.split("/")[0])[k.split("/")[1]].columns]
    said = calibrate.closed_loop_text(rec)
    admitted = {c.series for c in rec.cases if c.load == "concurrency"}
    assert said.startswith(f"None of the {len(loops)} closed-loop series") == (not admitted)
    assert all(kind in said for k in loops for kind in rec.kinds[k])


def test_family_table_splits_the_held_out_error():
    cv = calibrate.cross_validate()
    rows = {r["family"]: r for r in calibrate.family_table(cv)}
    assert list(rows) == list(calibrate.FAMILIES)
    scored = int(cv.record.scored.sum())
    assert rows["dense"]["points"] + rows["MoE"]["points"] == scored
    assert rows["batch"]["points"] + rows["concurrency"]["points"] == scored
    moe = rows["MoE"]["acceptance only"]
    mask = calibrate.family_mask(cv.record, "MoE")
    assert moe["median"] == pytest.approx(cv.summary("source", calibrate.CHOSEN, mask, "acceptance only")[
        "median |log ratio|"])
    h = calibrate.held_out_band(cv)
    assert rows["MoE"]["band"]["points"] == int(h["moe"].sum()) == moe["points"]
    if rows["concurrency"]["points"] == 0:  # today's record: no closed loop passes every other rule
        assert rows["concurrency"]["acceptance only"] is None and rows["concurrency"]["band"] is None
    text = calibrate.family_text(list(rows.values()))
    assert "MoE" in text and "(none)" in text


def test_the_band_spans_the_sources_spread():
    # two sources whose errors sit apart: the band built from both reaches both, the nearest-errors band need not
    at = (0.0,) * 30
    errors = tuple([0.30] * 28 + [-0.10] * 2)
    sources = ("a",) * 28 + ("b",) * 2
    between = calibrate.Band(at, errors, sources, between=True, centre="model")
    nearest = calibrate.Band(at, errors, sources)
    assert between.offsets() == {"a": 0.30, "b": -0.10}
    lo, mid, hi = between.quantiles(0.0)
    assert lo == pytest.approx(-0.10) and hi == pytest.approx(0.30) and mid == 0.0
    assert nearest.quantiles(0.0)[0] > 0.0  # the 5% tail of 30 errors, 2 of them at -0.10: source b left out
    # the centre is the model's own S unless the band excludes it: then its nearest edge
    above = calibrate.Band(at, tuple(e + 0.5 for e in errors), sources, between=True, centre="model")
    assert above.quantiles(0.0)[1] == pytest.approx(0.40)
    assert calibrate.Band.from_json(between.to_json()) == between
    legacy = {k: v for k, v in nearest.to_json().items() if k not in ("between", "centre")}
    assert calibrate.Band.from_json(legacy) == nearest  # a band stored before keeps its build
    with pytest.raises(validate.BadArgument, match="centre"):
        calibrate.Band(at, errors, sources, centre="mean")


def test_lookup_keeps_moe_engines_apart():
    name, _, how = calibrate.lookup("H100-SXM", "sglang", moe=True)
    assert name == "sglang-moe" and "MoE" in how
    name, _, how = calibrate.lookup("H100-SXM", "sglang")
    assert name != "sglang-moe" and name.startswith("sglang-")
    name, knobs, how = calibrate.lookup("H100-SXM", "vllm", "0.10.1", moe=True)
    assert name == "vllm-0.10.1" and "no vLLM serving a mixture of experts" in how
    assert calibrate._versions_of("sglang", ["sglang", "sglang-0.5.9", "sglang-moe", "sglangx-1"]) == [
        "sglang", "sglang-0.5.9"]


def test_why_a_term_is_not_kept_names_the_rule_it_fails():
    base = _term(0.10, 0.15, 0.06)
    assert calibrate.why_not_kept(base, _term(0.099, 0.15, 0.06)) == []
    assert "no smaller" in calibrate.why_not_kept(base, _term(-0.10, 0.15, 0.06))[0]
    assert "median at B > 1 grows" in calibrate.why_not_kept(base, _term(0.05, 0.1501, 0.06))[0]
    assert "anchored median grows" in calibrate.why_not_kept(base, _term(0.05, 0.15, 0.0601))[0]
    rows = [dict(base, variant="base"), dict(_term(0.05, 0.15, 0.0601), variant="+ GEMM tiles", kept=False),
            dict(_term(0.04, 0.14, 0.05), variant="+ per-MoE-layer cost", kept=True)]
    story = calibrate.term_story(rows)
    assert story.startswith("+ per-MoE-layer cost is kept.") and "GEMM tiles: the anchored median grows" in story
    rows[2].update(_term(0.11, 0.14, 0.05), kept=False, variant="+ per-MoE-layer cost")
    story = calibrate.term_story(rows)
    assert story.startswith("No term is kept.") and "Per-MoE-layer cost: its bias at B > 1, +0.110" in story


def _fam(family, points, median, bias, covered, decisive=4, right=4, sources=2):
    acc = {"points": points, "median": median, "bias": bias, "verdict": 0.9} if points else None
    band = {"points": points, "covered": covered, "coverage": covered / points, "decisive": decisive,
            "right": right} if points else None
    return {"family": family, "points": points, "sources": sources, "acceptance only": acc, "anchored": None,
            "band": band}


@pytest.mark.parametrize(("median", "said"), [(0.1064, "0.1064 in log terms, above 0.1058"),
                                              (0.1058, "0.106 in log terms, equal to 0.106"),
                                              (0.1054, "0.105 in log terms, below 0.106")])
def test_family_story_compares_by_the_printed_numbers(median, said):
    rows = [_fam("dense", 51, 0.1058, 0.064, 50), _fam("MoE", 16, median, 0.06, 12, decisive=7, right=6)]
    story = calibrate.family_story(rows)
    assert said in story and "16 MoE points from 2 sources" in story and "(75%; dense: 98%)" in story
    assert "6 of the 7 decisive verdicts were right" in story
    rows[1]["band"]["decisive"] = 0
    assert "gave no decisive verdict" in calibrate.family_story(rows)
    assert calibrate.family_story([_fam("dense", 51, 0.1, 0.0, 50), _fam("MoE", 0, 0, 0, 0)]) == (
        "No MoE point is predicted from its published acceptance alone.")


def test_alternative_story_says_where_the_choice_wins():
    row = lambda regime, a, b: {"choice": "c", "regime": regime, "points": 1, "median": a, "bias": 0,
                                "other median": b, "other bias": 0}
    assert "on every regime" in calibrate.alternative_story([row("all", 0.1, 0.11), row("anchored", 0.1, 0.2)], "c")
    assert "on none of the regimes" in calibrate.alternative_story([row("all", 0.1, 0.1)], "c")  # a tie is not better
    assert "on anchored only" in calibrate.alternative_story([row("all", 0.2, 0.1), row("anchored", 0.1, 0.2)], "c")
    with pytest.raises(validate.BadArgument, match="choices"):
        calibrate.alternative_story([row("all", 0.1, 0.1)], "d")


@pytest.mark.parametrize(("coverage", "said"), [(0.80, "80% of the 40 above 64. That is at least 80% in every bucket"),
                                                (0.7999, "79.99% of the 40 above 64. That is below 80% at B > 64")])
def test_band_story_at_the_coverage_goal(coverage, said):
    rows = _band_rows(coverage=0.9)
    rows[3]["coverage"] = coverage  # B > 64, 40 points
    rows[0]["coverage"], rows[0]["covered"] = 0.0, 0  # B = 1 has 9 points: not judged, said as a count
    story = calibrate.band_story(rows)
    assert said in story and "0 of the 9 at B = 1" in story
    other = [dict(r, coverage=r.get("coverage", 0) - 0.1) if r.get("points") else r for r in rows]
    assert "less in every bucket" in calibrate.band_story(rows, other)
    other[0] = dict(rows[0])
    assert "less in 2 of the 3 buckets" in calibrate.band_story(rows, other)


@pytest.mark.parametrize(("x", "goal", "style", "text"), [
    (0.7999, 0.80, "%", "79.99%"), (0.80, 0.80, "%", "80%"), (0.8001, 0.80, "%", "80.01%"), (0.85, 0.80, "%", "85%"),
    (0.1001, 0.10, "+f", "+0.1001"), (0.0999, 0.10, "+f", "+0.0999"), (-0.1001, -0.10, "+f", "-0.1001"),
    (0.1204, 0.12, "f", "0.1204"), (0.124, 0.12, "f", "0.124")])
def test_a_number_is_never_printed_on_the_wrong_side_of_its_goal(x, goal, style, text):
    assert calibrate.shown(x, goal, 0 if style == "%" else 3, style) == text
    assert calibrate.shown_pair(0.0604, 0.0601) == ("0.0604", "0.0601")
    assert calibrate.shown_pair(0.0601, 0.0601) == ("0.060", "0.060")


def test_goal_sentences_print_numbers_on_their_side_of_the_goal():
    missed = calibrate.judge_band(_band_rows(coverage=0.7999, bias=0.1001), ANCHOR)
    assert "coverage 79.99% in B = 9–64" in missed.sentence and "bias at B > 1 +0.1001" in missed.sentence
    assert "Not met: bias" in missed.sentence
    met = calibrate.judge_band(_band_rows(coverage=0.80, bias=0.10), ANCHOR)
    assert "coverage 80% in" in met.sentence and "bias at B > 1 +0.100 " in met.sentence
    row = calibrate.judge(_row(0.1001, -0.0501, 0.9499), coverage=0.7999)
    for text in ("median |log ratio| 0.1001", "bias -0.0501", "verdict agreement 94.99%", "band coverage 79.99%"):
        assert text in row.sentence


def test_centre_story_prints_both_builds():
    rows, other = _band_rows(median=0.1181, bias=0.095), _band_rows(median=0.1876, bias=0.0951)
    assert calibrate.centre_story(rows, other) == (
        "At B > 1 the central estimate is off by a median 0.118 held out (bias +0.0950); centred on the nearest "
        "errors' median, as first built, it was off by 0.188 (bias +0.0951).")
