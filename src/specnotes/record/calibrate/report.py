"""The plain-text tables ``python -m specnotes.record.calibrate --cv`` prints: the record summary (``skip_text``),
the cross-validation (``cv_table``), the advisor's bands (``band_text``), the families (``family_text``) and the
record's choices against their alternatives (``alternative_text``)."""

from __future__ import annotations

import numpy as np

from specnotes.record.calibrate.admission import Record, skip_summary
from specnotes.record.calibrate.bands import (
    ADVISOR_REGIME,
    BAND_BUILD,
    BAND_BUILDS,
    BUCKETS,
    anchor_table,
    band_table,
    batch_band,
    held_out_band,
    min_points,
)
from specnotes.record.calibrate.crossval import REGIMES, CrossValidation, cross_validate
from specnotes.record.calibrate.goals import GOALS, judge, judge_band
from specnotes.record.calibrate.store import ANCHOR_NOMINAL
from specnotes.record.calibrate.variants import CHOSEN, VARIANTS


def band_text(cv: CrossValidation | None = None, variant: str = CHOSEN) -> str:
    """The advisor's bands held out by source, as plain text (what ``--cv`` prints after the table): per batch
    bucket the points, how many the band covered, the decisive verdicts and the right ones, and the bias and
    median |log ratio| of the model's S and of the band's central estimate; then the anchored predictions by
    reach; then the goals judged (``judge_band``)."""
    cv = cv or cross_validate()
    rows, anchors_ = band_table(cv, variant), anchor_table(cv, variant, ANCHOR_NOMINAL)
    band = batch_band(cv, variant)
    lines = [f"the advisor's band ({variant}, {ADVISOR_REGIME}): the central {band.nominal:.0%} of the {band.points} "
             "held-out errors nearest in log B"
             + (", widened to the sources' spread (each source's median error), centred on the model's S"
                if band.between else "") + "; each source judged with the band built from the others",
             f"{'bucket':9} {'points':>6} {'covered':>9} {'decisive':>9} {'right':>7} {'model bias':>10} "
             f"{'median':>7} {'centre bias':>11} {'median':>7}"]
    for r in rows:
        if not r["points"]:
            lines.append(f"{r['bucket']:9} {0:6d}   (no published point)")
            continue
        right = f"{r['right']}/{r['decisive']}"
        lines.append(f"{r['bucket']:9} {r['points']:6d} {r['covered']:4d} {r['coverage']:4.0%} {r['decisive']:4d} "
                     f"{r['decisive_share']:4.0%} {right:>7} {r['model_bias']:+10.3f} {r['model_median']:7.3f} "
                     f"{r['centre_bias']:+11.3f} {r['centre_median']:7.3f}")
    for build in BAND_BUILDS:
        if build == BAND_BUILD:
            continue
        other = band_table(cv, variant, build=build)
        said = ", ".join(f"{r['bucket']} {r['coverage']:.0%}" for r in other[:len(BUCKETS)] if r.get("points"))
        every = other[-1]
        lines.append(f"built as {build!r} instead: covered {said}; {every['decisive_share']:.0%} decisive, "
                     f"{every['right']}/{every['decisive']} right; centre median {every['centre_median']:.3f}, "
                     f"bias at B > 1 {other[-2]['centre_bias']:+.3f}")
    lines += ["", f"anchored on one measured batch ({variant}): pairs of points of one series, the central "
                  f"{ANCHOR_NOMINAL:.0%} of the nearest {min_points(ANCHOR_NOMINAL)} pairs in log(B / measured B)",
              f"{'reach':15} {'pairs':>6} {'median':>7} {'bias':>7} {'covered':>8}"]
    for r in anchors_:
        lines.append(f"{r['distance']:15} {r['pairs']:6d} " + ("   (none)" if not r["pairs"] else
                     f"{r['median']:7.3f} {r['bias']:+7.3f} {r['coverage']:8.0%}"))
    lines += ["", "goals (issue 34): " + judge_band(rows, anchors_).sentence,
              "the model alone: " + judge_band(rows, anchors_, "model").sentence]
    return "\n".join(lines)


def skip_text(rec: Record | None = None) -> str:
    """The record summary as plain text (``skip_summary``): per rule, the series and points it keeps out, and how
    many of them it alone keeps out."""
    rows = skip_summary(rec)
    lines = [f"{'kept out by the rule':22} {'series':>6} {'points':>6}  {'by it alone':>11}  what it says"]
    for r in rows:
        alone = f"{r['alone series']} ({r['alone points']})"
        lines.append(f"{r['rule']:22} {r['series']:6d} {r['points']:6d}  {alone:>11}  {r['what']}")
    return "\n".join(lines)


def family_text(rows: list[dict]) -> str:
    """``family_table`` as plain text (what ``--cv`` prints)."""
    lines = [f"{'family':24} {'sources':>7} {'acceptance only':>31} {'anchored':>31} {'band: covered':>14} "
             f"{'decisive':>9} {'right':>6}",
             f"{'':24} {'':7} {'sources points median   bias':>31} {'sources points median   bias':>31}"]
    cell = lambda r: (f"{r['sources']:7d} {r['points']:6d} {r['median']:6.3f} {r['bias']:+6.3f}" if r
                      else f"{'(none)':>28}")
    for r in rows:
        band = r["band"]
        tail = (f"{band['covered']:5d} {band['coverage']:6.0%} {band['decisive']:4d} {band['decisive_share']:4.0%} "
                f"{band['right']:3d}/{band['decisive']:<3d}" if band else "")
        lines.append(f"{r['family']:24} {r['sources']:7d} {cell(r['acceptance only']):>31} {cell(r['anchored']):>31} "
                     f"{tail}")
    return "\n".join(lines)


def alternative_text(rows: list[dict]) -> str:
    lines = [f"{'choice':58} {'regime':15} {'points':>6} {'median':>7} {'bias':>7} {'other':>7} {'bias':>7}"]
    for r in rows:
        lines.append(f"{r['choice'][:58]:58} {r['regime']:15} {r['points']:6d} {r['median']:7.3f} {r['bias']:+7.3f} "
                     f"{r['other median']:7.3f} {r['other bias']:+7.3f}")
    return "\n".join(lines)


def cv_table(cv: CrossValidation | None = None) -> str:
    """The cross-validation as plain text (what ``--cv`` prints): per scheme and variant, the points predicted
    from their published acceptance alone, the anchored points, and the two mixed; leaving one source out,
    which of issue 24's goals (``GOALS``, ``judge``) each row meets (m: median, b: bias, v: verdict, c:
    coverage of that regime's band; "-" not met). A stored variant fitted to a source of the record is
    marked "not held out"."""
    cv = cv or cross_validate()
    lines = [f"{'variant':28} {'held out':12} {'regime':15} {'points':>6} {'median':>7} {'bias':>7} {'verdict':>8} "
             f"{'goals':>5}  worst point"]
    coverage = {(v, r): float(held_out_band(cv, v, r)["covered"].mean()) for v in cv.predicted.get("source", {})
                for r in REGIMES}
    for r in cv.rows():
        goals = ""
        if r["scheme"] == "source":
            met = judge(r, coverage[(r["variant"], r["regime"])]).met
            goals = "".join(letter if met[g] else "-" for g, letter in zip(GOALS, "mbvc", strict=True))
        lines.append(f"{r['variant']:28} {r['held out']:12} {r['regime']:15} {r['points']:6d} "
                     f"{r['median |log ratio|']:7.3f} {r['bias']:+7.3f} {r['verdict agreement']:8.1%} {goals:>5}  "
                     f"{r['worst']}")
    for name, v in VARIANTS.items():
        if v.fitted_on and name in cv.predicted.get("source", {}):
            n = int((cv.record.scored & np.array([c.source == v.fitted_on for c in cv.record.cases])).sum())
            lines.append(f"\nnot held out: {name}'s knobs were fitted to {v.fitted_on}, the source of {n} of the "
                         f"{int(cv.record.scored.sum())} points; its rows are not out-of-sample.")
    lines.append(f"goals (leaving one source out, per row): median <= {GOALS['median']}, |bias| <= {GOALS['bias']}, "
                 f"verdict >= {GOALS['verdict']:.0%}, band coverage >= {GOALS['coverage']:.0%}")
    return "\n".join(lines)
