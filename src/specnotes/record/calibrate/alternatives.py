"""The record's choices judged held out against their alternatives (``alternative_table``): MoE engines fitted apart
or in their dense families (``shared_moe``); a bare "H100" priced as the SXM part or the PCIe one
(``other_form_factor``)."""

from __future__ import annotations

from dataclasses import replace

from specnotes.record.calibrate.admission import FORM_FACTORS, Record
from specnotes.record.calibrate.bands import family_mask
from specnotes.record.calibrate.crossval import REGIMES, CrossValidation, cross_validate, regime_mask
from specnotes.record.calibrate.points import MOE_SUFFIX
from specnotes.record.calibrate.variants import CHOSEN


def shared_moe(rec: Record) -> Record:
    """``rec`` with the MoE targets' engines back in their dense families (``MOE_APART`` off)."""
    strip = lambda c: replace(c, engine=c.engine.removesuffix(MOE_SUFFIX))
    return Record(tuple(strip(c) for c in rec.cases), rec.skipped, rec.kinds)


def other_form_factor(rec: Record) -> Record:
    """``rec`` with every GPU the record assumed (``FORM_FACTORS``) priced as the other form factor."""
    swap = {chosen: other for chosen, other in FORM_FACTORS.values()}
    return Record(tuple(replace(c, accel=swap[c.accel]) if c.gpu_assumed else c for c in rec.cases), rec.skipped,
                  rec.kinds)


def alternative_table(cv: CrossValidation | None = None, variant: str = CHOSEN) -> list[dict]:
    """The record's choices judged held out by source, each against its alternative: MoE engines fitted apart
    (``MOE_APART``) or in their dense families; a bare "H100" priced as the SXM part or the PCIe one (the
    points of the family "GPU form factor assumed", then every point). Per row and regime: median and bias."""
    cv = cv or cross_validate()
    rows = []

    def add(what, other_cv, mask=None):
        for regime in REGIMES:
            keep = cv.record.scored & regime_mask(cv.record, regime) & (True if mask is None else mask)
            if not keep.any():
                continue
            a = cv.summary("source", variant, mask, regime)
            b = other_cv.summary("source", variant, mask, regime)
            rows.append({"choice": what, "regime": regime, "points": a["points"],
                         "median": a["median |log ratio|"], "bias": a["bias"],
                         "other median": b["median |log ratio|"], "other bias": b["bias"]})

    if any(c.moe for c in cv.record.cases):
        add("MoE engines fitted apart (other: with their dense family)",
            cross_validate((variant,), ("source",), rec=shared_moe(cv.record)))
    if any(c.gpu_assumed for c in cv.record.cases):
        other = cross_validate((variant,), ("source",), rec=other_form_factor(cv.record))
        add("'H100' priced as SXM (other: as PCIe), its points", other, family_mask(cv.record,
                                                                                 "GPU form factor assumed"))
        add("'H100' priced as SXM (other: as PCIe), every point", other)
    return rows
