"""Issue 24's goals for the held-out error (``GOALS``, ``judge``, ``goals_table``) and issue 34's for the advisor's
band (``BAND_GOALS``, ``judge_band``), each judged into ``Goals`` with the sentence the prose may say."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from specnotes import validate
from specnotes.record.calibrate.bands import held_out_band
from specnotes.record.calibrate.crossval import REGIMES, CrossValidation, cross_validate
from specnotes.record.calibrate.variants import CHOSEN
from specnotes.record.calibrate.wording import shown

# Issue 24's goals for the held-out error, leaving one source out: each row of the table is judged on its own.
GOALS = {"median": 0.10, "bias": 0.05, "verdict": 0.95, "coverage": 0.80}


@dataclass(frozen=True)
class Goals:
    """Issue 24's goals judged on one row of the cross-validation: ``met`` {goal: True/False/None (not
    judged)}, ``ok`` (every judged goal met), ``sentence`` (what the prose may say), ``numbers``."""

    met: dict
    ok: bool
    sentence: str
    numbers: dict
    said: dict = dataclasses.field(default_factory=dict)  # {goal: its number and target, in words}


def judge(row: dict, coverage: float | None = None) -> Goals:
    """Judge a ``CrossValidation.summary`` row (and the band's held-out coverage of the same points, if
    given) against ``GOALS``: median |log ratio| ≤ 0.10, |bias| ≤ 0.05, verdict agreement ≥ 95%, coverage
    ≥ 80%. The sentence names the goals met and those not, with the numbers."""
    for key in ("median |log ratio|", "bias", "verdict agreement", "points"):
        if key not in row:
            raise validate.BadArgument(f"judge needs a summary row with {key!r}; got keys {sorted(row)}")
    numbers = {"median": row["median |log ratio|"], "bias": row["bias"], "verdict": row["verdict agreement"],
               "coverage": coverage}
    met = {"median": numbers["median"] <= GOALS["median"], "bias": abs(numbers["bias"]) <= GOALS["bias"],
           "verdict": numbers["verdict"] >= GOALS["verdict"],
           "coverage": None if coverage is None else coverage >= GOALS["coverage"]}
    bias = numbers["bias"]
    said = {"median": f"median |log ratio| {shown(numbers['median'], GOALS['median'])} "
                      f"(goal ≤ {GOALS['median']:.2f})",
            "bias": f"bias {shown(bias, math.copysign(GOALS['bias'], bias), 3, '+f')} "
                    f"(goal within ±{GOALS['bias']:.2f})",
            "verdict": f"verdict agreement {shown(numbers['verdict'], GOALS['verdict'], 1, '%')} "
                       f"(goal ≥ {GOALS['verdict']:.0%})",
            "coverage": None if coverage is None else
            f"band coverage {shown(coverage, GOALS['coverage'], 0, '%')} (goal ≥ {GOALS['coverage']:.0%})"}
    what = f"{row.get('variant', 'the model')}, {row.get('regime', 'all')} ({row['points']} points)"
    return Goals(met, not any(m is False for m in met.values()), _goal_sentence(what, said, met), numbers)


def _goal_sentence(what: str, said: dict, met: dict) -> str:
    """"what: every goal is met.", "what: no goal is met." or "what: 2 of 4 goals are met.", then one short sentence a
    goal, those met first: "Met: <its number and goal>." or "Not met: ...". Each goal judged (``met`` True or False;
    None: not judged) is said with its number (``said``)."""
    good = [said[g] for g, m in met.items() if m]
    bad = [said[g] for g, m in met.items() if m is False]
    head = ("every goal is met" if not bad else "no goal is met" if not good
            else f"{len(good)} of {len(good) + len(bad)} goals {'is' if len(good) == 1 else 'are'} met")
    return " ".join([f"{what}: {head}.", *(f"Met: {x}." for x in good), *(f"Not met: {x}." for x in bad)])


def goals_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> dict:
    """{regime: Goals} for ``variant`` leaving one source out, the held-out coverage of each regime's own band
    (``held_out_band``) included."""
    cv = cv or cross_validate()
    return {r: judge(cv.summary("source", variant, regime=r), float(held_out_band(cv, variant, r)["covered"].mean()))
            for r in REGIMES}


# Issue 34's goals, for the advisor's band held out by source (``band_table``, ``anchor_table``). The median over
# every acceptance-only point is the number issue 24's ``GOALS["median"]`` judges: one bound for it, issue 24's
# (issue 44, P2 6). The others judge what issue 24 does not: B > 1 alone, each bucket's coverage, the verdicts.
BAND_GOALS = {"bias": 0.10, "median": 0.15, "median_all": GOALS["median"], "coverage": 0.80, "bucket_points": 10,
              "right": 0.95, "decisive": 0.70, "anchor_median": 0.08}


def judge_band(rows: list[dict], anchor_rows: list[dict] | None = None, estimate: str = "centre") -> Goals:
    """Judge the band's held-out table (``band_table``; ``anchor_table`` for the anchored goal) against
    ``BAND_GOALS``: for the points with B > 1, |bias| ≤ 0.10 and median |log ratio| ≤ 0.15 and over every
    point median ≤ 0.10 (issue 24's bound for the same number), of ``estimate`` ("centre": the band's central
    estimate, what the advisor reports; "model": the model's S alone); coverage ≥ 80% in every batch bucket
    with at least 10 points; decisive verdicts right ≥ 95% with at least 70% of the points decisive; anchored
    up to 8× above the measured batch, median ≤ 0.08. A bound is met when the number is on its side or equal to it."""
    validate.choice("estimate", estimate, ("centre", "model"))
    by = {r["bucket"]: r for r in rows}
    for key in ("B > 1", "all"):
        if key not in by or not by[key].get("points"):
            raise validate.BadArgument(f"judge_band needs band_table rows with points in {key!r}")
    g, e = BAND_GOALS, estimate
    big = [r for r in rows if r["bucket"] not in ("B > 1", "all") and r.get("points", 0) >= g["bucket_points"]]
    worst = min(big, key=lambda r: r["coverage"]) if big else None
    every = by["all"]
    numbers = {"bias": by["B > 1"][f"{e}_bias"], "median": by["B > 1"][f"{e}_median"],
               "median_all": every[f"{e}_median"], "coverage": worst["coverage"] if worst else None,
               "right": every["decisive_right"], "decisive": every["decisive_share"]}
    anchor = {r["distance"]: r for r in anchor_rows or []}.get("up to 8× above")
    numbers["anchor_median"] = anchor["median"] if anchor and anchor["pairs"] else None
    met = {"bias": abs(numbers["bias"]) <= g["bias"], "median": numbers["median"] <= g["median"],
           "median_all": numbers["median_all"] <= g["median_all"],
           "coverage": None if worst is None else numbers["coverage"] >= g["coverage"],
           "right": None if numbers["right"] is None else numbers["right"] >= g["right"],
           "decisive": numbers["decisive"] >= g["decisive"],
           "anchor_median": None if numbers["anchor_median"] is None
           else numbers["anchor_median"] <= g["anchor_median"]}
    said = {"bias": f"bias at B > 1 {shown(numbers['bias'], math.copysign(g['bias'], numbers['bias']), 3, '+f')} "
                    f"(goal within ±{g['bias']:.2f})",
            "median": f"median |log ratio| at B > 1 {shown(numbers['median'], g['median'])} "
                      f"(goal ≤ {g['median']:.2f})",
            "median_all": f"over every B {shown(numbers['median_all'], g['median_all'])} "
                          f"(goal ≤ {g['median_all']:.2f})",
            "coverage": None if worst is None else f"coverage {shown(numbers['coverage'], g['coverage'], 0, '%')} "
                                                    f"in {worst['bucket']}, the lowest of the buckets with "
                                                    f"{g['bucket_points']} points or more (goal ≥ {g['coverage']:.0%})",
            "right": None if numbers["right"] is None else f"{shown(numbers['right'], g['right'], 0, '%')} of "
                                                            f"decisive verdicts right (goal ≥ {g['right']:.0%})",
            "decisive": f"{shown(numbers['decisive'], g['decisive'], 0, '%')} of points decisive "
                        f"(goal ≥ {g['decisive']:.0%})",
            "anchor_median": None if numbers["anchor_median"] is None else
            f"anchored up to 8× above the measured batch, median {shown(numbers['anchor_median'], g['anchor_median'])}"
            f" (goal ≤ {g['anchor_median']:.2f})"}
    what = "the band's central estimate" if e == "centre" else "the model's S"
    return Goals(met, not any(m is False for m in met.values()), _goal_sentence(what, said, met), numbers, said)


def decisive_text(row: dict) -> str:
    """What a ``band_table`` row says of its verdicts, in one sentence: the share of points given a decisive
    verdict, and how many of those were right ("all" only when every one was)."""
    if not row.get("points"):
        raise validate.BadArgument("decisive_text needs a band_table row with points")
    if not row["decisive"]:
        return f"None of the {row['points']} points got a decisive verdict."
    right = ("all of them were right" if row["right"] == row["decisive"] else
             "none of them was right" if row["right"] == 0 else f"{row['right']} of them were right")
    return (f"{row['decisive_share']:.0%} of the {row['points']} points got a decisive verdict ({row['decisive']}), "
            f"and {right}.")
