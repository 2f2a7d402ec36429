"""``python -m specnotes.record.calibrate [--cv] [--write]`` (``main``)."""

from __future__ import annotations

from specnotes import validate
from specnotes.record.calibrate.alternatives import alternative_table
from specnotes.record.calibrate.bands import family_table
from specnotes.record.calibrate.crossval import cross_validate
from specnotes.record.calibrate.moe_goals import moe_text
from specnotes.record.calibrate.report import alternative_text, band_text, cv_table, family_text, skip_text
from specnotes.record.calibrate.store import calibrations, write_calibrations
from specnotes.record.calibrate.terms import term_search, term_text
from specnotes.record.calibrate.variants import CHOSEN


def main(argv: list[str] | None = None) -> int:
    """``python -m specnotes.record.calibrate [--cv] [--write]``: print the stored calibrations; ``--cv`` the
    cross-validation of every variant over the whole record; ``--write`` refits the chosen variant and
    rewrites data/calibrations.json. Anything else exits with status 2."""
    parser = validate.Parser(prog="python -m specnotes.record.calibrate",
                                     description="The cost model's engine calibrations and their out-of-sample error.")
    parser.add_argument("--cv", action="store_true", help="cross-validate every variant (leave one series out, "
                                                          "leave one source out) and print the table")
    parser.add_argument("--write", action="store_true", help="refit the chosen variant, rewrite data/calibrations.json")
    args = parser.parse_args(argv)
    cv = cross_validate() if (args.cv or args.write) else None
    if args.cv:
        rec = cv.record
        print(f"The published record: {int(rec.scored.sum())} points predicted ({len(rec.cases)} with the anchors) "
              f"in {len(rec.series())} series of {len({c.source for c in rec.cases})} sources; "
              f"{len(rec.skipped)} series the model cannot represent.\n")
        print(skip_text(rec))
        print()
        print(cv_table(cv))
        best = cv.best("source")
        print(f"\nbest leaving one source out: {best}; stored calibrations use: {CHOSEN}")
        print()
        print(band_text(cv))
        print()
        print(f"by family ({CHOSEN}, leaving one source out; the band over the acceptance-only points)")
        print(family_text(family_table(cv)))
        print()
        print("the record's choices against their alternatives (held out by source)")
        print(alternative_text(alternative_table(cv)))
        print()
        print(term_text(term_search(cv)))
        print()
        print(moe_text(cv))
    if args.write:
        write_calibrations(cv=cv)
        print("written to data/calibrations.json")
    if not args.cv:
        for accel, names in calibrations().items():
            for name, r in names.items():
                print(accel, name, r.get("knobs", f"= {r.get('alias_of')}"))
    if not args.write:
        print("not written (--write rewrites data/calibrations.json)")
    return 0
