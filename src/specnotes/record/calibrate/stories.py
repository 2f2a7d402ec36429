"""The chapters' sentences about the held-out results, chosen by the numbers: one family beside another
(``family_story``), the record's choices (``alternative_story``), the band (``band_story``, ``centre_story``) and
the closed-loop series (``closed_loop_text``)."""

from __future__ import annotations

from specnotes import validate
from specnotes.record import published
from specnotes.record.calibrate.admission import Record, record
from specnotes.record.calibrate.bands import BUCKETS
from specnotes.record.calibrate.goals import BAND_GOALS
from specnotes.record.calibrate.wording import shown, shown_pair


def _than(a: float, b: float) -> tuple[str, str]:
    """(a as printed, "above b" / "below b" / "equal to b"), printed so that the words are true of them: two numbers
    that print alike even at shown_pair's most digits are "equal to" as printed (hypothesis: 0 and 2e-308)."""
    sa, sb = shown_pair(a, b)
    return sa, f"equal to {sb}" if a == b or sa == sb else f"above {sb}" if a > b else f"below {sb}"


def family_story(rows: list[dict], family: str = "MoE", against: str = "dense") -> str:
    """One family's held-out error beside another's (``family_table``), in two sentences chosen by the numbers:
    the median and bias of the points predicted from their acceptance alone, and the band's coverage of them.
    A family with no such point says so."""
    by = {r["family"]: r for r in rows}
    mine, other = by[family], by[against]
    acc, ref = mine["acceptance only"], other["acceptance only"]
    if acc is None:
        return f"No {family} point is predicted from its published acceptance alone."
    n = f"{acc['points']} {family} point{'s' if acc['points'] != 1 else ''}"
    src = f"{acc['sources']} source{'s' if acc['sources'] != 1 else ''}"  # the regime's own, not the family's
    median, than = _than(acc["median"], ref["median"]) if ref else (f"{acc['median']:.3f}", "")
    first = (f"The {n} from {src}, predicted from their published acceptance alone, are off by a median "
             f"{median} in log terms" + (f", {than} for the {against} points" if ref else "")
             + f"; their bias is {acc['bias']:+.3f}" + (f" ({against}: {ref['bias']:+.3f})" if ref else "") + ".")
    band, ref_band = mine["band"], other["band"]
    second = (f"The band covered {band['covered']} of them ({band['coverage']:.0%}"
              + (f"; {against}: {ref_band['coverage']:.0%}" if ref_band else "") + "), and "
              + (f"{band['right']} of the {band['decisive']} decisive verdicts were right." if band["decisive"]
                 else "gave no decisive verdict."))
    return f"{first} {second}"


def alternative_story(rows: list[dict], choice: str) -> str:
    """Whether the record's ``choice`` (a row group of ``alternative_table``) beats its alternative held out:
    "on every regime", "on none", or on which, by the median |log ratio|."""
    mine = [r for r in rows if r["choice"] == choice]
    if not mine:
        raise validate.BadArgument(f"no rows for {choice!r}; choices: {sorted({r['choice'] for r in rows})}")
    better = [r["regime"] for r in mine if r["median"] < r["other median"]]
    nums = "; ".join(f"{r['regime']} {r['median']:.3f} against {r['other median']:.3f}" for r in mine)
    where = ("on every regime" if len(better) == len(mine) else "on none of the regimes" if not better
             else "on " + " and ".join(better) + " only")
    return f"Held out by source, it predicts better {where} (median |log ratio|: {nums})."


def _coverage_list(rows: list[dict]) -> str:
    said = []
    for r in rows[:len(BUCKETS)]:
        if not r.get("points"):
            continue
        where = r["bucket"].replace("B > ", "above ").replace("B = ", "at B = ")
        said.append(f"{r['covered']} of the {r['points']} {where}" if r["points"] < BAND_GOALS["bucket_points"]
                    else f"{shown(r['coverage'], BAND_GOALS['coverage'], 0, '%')} of the {r['points']} {where}")
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else said[0]


def band_story(rows: list[dict], other: list[dict] | None = None) -> str:
    """How the band did held out by source (``band_table``), per batch bucket, against issue 34's coverage goal
    (``BAND_GOALS``: 80% in every bucket of 10 points or more); with ``other`` (the same table for another
    build, ``BAND_BUILDS``), how that one did in the same buckets."""
    g, n = BAND_GOALS["coverage"], BAND_GOALS["bucket_points"]
    judged = [r for r in rows[:len(BUCKETS)] if r.get("points", 0) >= n]
    short = [r["bucket"] for r in judged if r["coverage"] < g]
    said = f"Held out, the band covered {_coverage_list(rows)}."
    said += (f" That is at least {g:.0%} in every bucket of {n} points or more." if not short else
             f" That is below {g:.0%} at {', '.join(short)}.")
    if other:
        by = {r["bucket"]: r for r in other}
        pairs = [(r, by[r["bucket"]]) for r in rows[:len(BUCKETS)] if r.get("points")]
        less = sum(o["coverage"] < r["coverage"] for r, o in pairs)
        more = sum(o["coverage"] > r["coverage"] for r, o in pairs)
        how = ("less in every bucket" if less == len(pairs) else "never less" if not less else
               f"less in {less} of the {len(pairs)} buckets" + (f" and more in {more}" if more else ""))
        said += f" Built from the nearest errors alone, it covered {_coverage_list(other)}. That is {how}."
    return said


def centre_story(rows: list[dict], other: list[dict]) -> str:
    """The band's central estimate at B > 1 held out (``band_table``) beside another build's (``other``), in one
    sentence of numbers: median |log ratio| and bias of each."""
    mine, theirs = rows[-2], other[-2]
    m1, m2 = shown_pair(mine["centre_median"], theirs["centre_median"])
    b1, b2 = shown_pair(mine["centre_bias"], theirs["centre_bias"], style="+f")
    return (f"At B > 1 the central estimate is off by a median {m1} held out (bias {b1}); centred on the nearest "
            f"errors' median, as first built, it was off by {m2} (bias {b2}).")


def closed_loop_text(rec: Record | None = None) -> str:
    """What became of the closed-loop series (speedups at requests in flight): how many are admitted, and what
    keeps the others out (``Record.kinds``)."""
    rec = rec or record()
    loops = [k for k in rec.kinds if published.load(k.split("/")[0])[k.split("/")[1]].columns
             and "concurrency" in published.load(k.split("/")[0])[k.split("/")[1]].columns]
    admitted = len({(c.source, c.series) for c in rec.cases if c.load == "concurrency"})
    kinds: dict = {}
    for k in loops:
        for kind in rec.kinds[k]:
            kinds[kind] = kinds.get(kind, 0) + 1
    why = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    if not loops:
        return f"{admitted} closed-loop series {'is' if admitted == 1 else 'are'} admitted, and none is kept out."
    if not admitted:
        return (f"None of the {len(loops)} closed-loop series is admitted: each fails another rule. Series per "
                f"rule: {why}.")
    return (f"{admitted} closed-loop series {'is' if admitted == 1 else 'are'} admitted; the other {len(loops)} "
            f"each fail another rule. Series per rule: {why}.")
