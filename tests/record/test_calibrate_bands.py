"""Calibrations, the advisor's bands and the term search (calibrate.bands, goals, terms, stories, wording): the
bands held out, the goals judged at their edges, the batch terms kept by the rule, and the sentences."""

import math

import numpy as np
import pytest

from specnotes import validate
from specnotes.record import calibrate


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
    assert not some.ok and "2 of 3 goals are met. Met: median" in some.sentence
    assert "Not met: verdict agreement 93.5%" in some.sentence
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


def _band_rows(bias=0.0, median=0.1, median_all=0.09, coverage=0.9, right=1.0, decisive=0.8, small_coverage=0.0):
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
    ("median", dict(median=0.15), dict(median=0.1501)), ("median_all", dict(median_all=0.10),
                                                          dict(median_all=0.1001)),
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
    # issue 42's record: issue 34's rule keeps the MoE terms fitted with the per-layer knobs held (they move no
    # dense point) and the GEMM tiles; the chosen variant is one it keeps, the one issue 42's rule picks
    by = {r["variant"]: r for r in rows}
    assert by[calibrate.CHOSEN]["kept"] and calibrate.kept_term(rows) is not None
    assert not by["+ per-verified-token cost"]["kept"] and not by["+ per-sequence cost"]["kept"]
    assert calibrate.priceable(calibrate.CHOSEN) and not calibrate.priceable("+ GEMM tiles")
    assert f"kept: {calibrate.kept_term(rows)}" in calibrate.term_text(rows)


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
    # a regime counts its own sources (issue 44, P2 7): each regime's sources are among the family's
    for r in rows.values():
        got = [r[g]["sources"] for g in ("acceptance only", "anchored") if r[g]]
        assert all(1 <= n <= r["sources"] for n in got)
    dense = rows["dense"]
    assert dense["acceptance only"]["sources"] == len({c.source for c, k in zip(
        cv.record.cases, calibrate.family_mask(cv.record, "dense") & cv.record.scored
        & calibrate.regime_mask(cv.record, "acceptance only"), strict=True) if k})
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


def _fam(family, points, median, bias, covered, decisive=4, right=4, sources=2, family_sources=5):
    acc = {"points": points, "median": median, "bias": bias, "verdict": 0.9, "sources": sources} if points else None
    band = {"points": points, "covered": covered, "coverage": covered / points, "decisive": decisive,
            "right": right} if points else None
    return {"family": family, "points": points, "sources": family_sources, "acceptance only": acc, "anchored": None,
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
