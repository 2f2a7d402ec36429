"""Calibrations, the cross-validation (calibrate.crossval): it never sees the points it predicts, it is
deterministic, and issue 24's benchmark leaving one source out."""

import dataclasses

import numpy as np

from specnotes.record import calibrate


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
    # the best by this median is the MoE term fitted jointly, which moves the dense points (issue 42's rule, in
    # test_moe_goals, keeps the same term fitted with the per-layer knobs held: the chosen one)
    assert cv.best("source") in (calibrate.CHOSEN, calibrate.CHOSEN.removesuffix(", held"))
    best = cv.summary("source", calibrate.CHOSEN)
    assert best["points"] >= 200
    assert best["median |log ratio|"] <= 0.10
    # REGRESSION GUARD, not the goal: with the MoE points (issue 42's anchored MoE series on MI355X and GB200,
    # predicted to fall slower than they do) the bias of the mix is +0.073, past GOALS["bias"] = 0.05; judge says
    # so, and this catches it getting worse
    assert abs(best["bias"]) <= 0.08 and calibrate.judge(best).met["bias"] == (abs(best["bias"]) <= 0.05)
    # REGRESSION GUARD, not the goal: the verdict agreement reaches 91.2% (92.6% before the MoE points, of which
    # 12 of 16 agree), short of GOALS["verdict"] = 95% (Chapter 6 shows which points and why); this only catches
    # it getting worse
    assert best["verdict agreement"] >= 0.91
    assert not calibrate.judge(best).met["verdict"]
    # and it beats the idealized model and the first calibration on the same points
    for other in ("idealized", "first calibration", "2 knobs per engine"):
        assert cv.summary("source", other)["median |log ratio|"] > best["median |log ratio|"], other
