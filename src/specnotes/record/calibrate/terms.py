"""The term search (issue 34, ``term_search``): candidate costs that grow with the batch or that only a MoE layer
pays (``CANDIDATES``), each added to the base variant and kept only by the rule ``keeps``; what it found, in words
(``term_text``, ``term_story``)."""

from __future__ import annotations

import numpy as np

from specnotes.record.calibrate.bands import ADVISOR_REGIME
from specnotes.record.calibrate.crossval import CrossValidation, cross_validate, regime_mask
from specnotes.record.calibrate.points import calibration_name
from specnotes.record.calibrate.variants import VARIANTS
from specnotes.record.calibrate.wording import shown_pair

# Issue 34: candidate costs that grow with the batch, each added to the chosen variant and kept only if
# leaving one source out improves the bias at B > 1 without making the median error worse.
BASE = "per-layer cost"
CANDIDATES = {
    "+ GEMM tiles": "a GEMM computes its rows in tiles (16 to 128, fitted): a verify pass of B(k+1) rows pays for "
                    "the whole last tile, so small-M GEMMs run below the roofline",
    "+ per-verified-token cost": "a time for each drafted token the verify pass scores: sampling, the acceptance "
                                 "test, tree masks, KV writes",
    "+ per-sequence cost": "a time per sequence in every pass, draft passes included: the engine's scheduling "
                           "and metadata per request per step",
    "+ per-MoE-layer cost": "a time per MoE layer of every pass: the router, the top-k, the token alignment and the "
                            "grouped GEMMs' launches that a dense layer does not run",
    "+ per-expert cost": "a time per distinct expert each MoE layer touches: a touched expert's GEMM runs its few rows "
                         "padded to a whole tile, so its cost grows with E[D](tokens), as a verify pass's does",
    "+ per-token cost": "a time for each token a target pass scores, B in decode and B(k+1) in a verify pass: whatever "
                        "a step does per token that the roofline leaves out (routing, sampling, activations)",
    "+ per-pass cost": "a fixed time per target pass beside the per-layer one: a multi-GPU MoE step's launch, "
                       "scheduling and synchronisation, which would lift S at B = 1 above the roofline's",
    "+ per-token MoE cost": "a time per token each MoE layer routes: the top-k, the sort of tokens by expert, the "
                            "dispatch and combine of their activations, B(k+1)·m rows in a verify pass",
    "+ per-token MoE cost, held": "the per-token MoE cost, fitted to the MoE points with the per-layer knobs of the "
                                  "record held: it cannot move a dense prediction",
    "+ grouped-GEMM efficiency, held": "the experts' grouped GEMM below peak, fitted with the per-layer knobs held",
    "+ per-MoE-layer cost, held": "the per-MoE-layer cost, fitted with the per-layer knobs held",
    "+ compute below peak": "every kernel's math at a fraction of the datasheet peak: compute that grows with the "
                            "tokens, so a verify pass pays it k + 1 times",
    "+ grouped-GEMM efficiency": "the experts' grouped GEMM at a fraction of the peak: few rows per expert, each "
                                 "padded to a tile, so a fused MoE kernel runs far below the roofline",
    "+ attention compute": "attention's math at a fraction of the peak: MLA's absorbed attention sits near the ridge "
                           "at one query (242 FLOP/byte), so a verify pass of k + 1 queries is compute-bound there",
    "+ all-reduce bytes": "the tensor-parallel all-reduces' bytes at a fraction of the link bandwidth: those bytes "
                          "grow with the tokens, B(k + 1) in a verify pass, not only the latency per call",
}


# The five candidates issue 34 tried (Chapter 6's search for the batch-growing cost); the rest are issue 42's.
ISSUE_34 = ("+ GEMM tiles", "+ per-verified-token cost", "+ per-sequence cost", "+ per-MoE-layer cost",
            "+ per-expert cost")


def residual_rows(cv: CrossValidation, variant: str = BASE, regime: str = ADVISOR_REGIME) -> list[dict]:
    """One row per held-out point of ``regime`` (leaving one source out): where it comes from, what might
    explain its error (batch B, verify rows B·(k+1) or B·(tree + 1), the tokens a sequence drafts, weight
    bits, engine) and the error log(predicted / measured)."""
    keep = cv.record.scored & regime_mask(cv.record, regime)
    pred = cv.predicted["source"][variant]
    out = []
    for i in np.flatnonzero(keep):
        c = cv.record.cases[i]
        out.append({"source": c.source, "series": c.series, "batch": c.batch, "k": c.k,
                    "verify_rows": c.batch * (c.k + 1), "drafted": sum(c.widths) if c.widths else c.k,
                    "tree": bool(c.widths), "weight_bits": round(8 * c.target.weight_bytes),
                    "engine": calibration_name(c.engine, c.version), "gpu": getattr(c.accel, "name", c.accel),
                    "error": float(np.log(pred[i] / cv.measured[i]))})
    return out


def term_search(cv: CrossValidation | None = None, base: str = BASE, candidates=tuple(CANDIDATES)) -> list[dict]:
    """The base variant and each candidate term, held out by source: over the points predicted from their
    acceptance alone the bias at B = 1 and at B > 1, the median |log ratio| at B > 1 and over every B, the
    bias at B > 1 of each source, and the anchored regime's median; ``kept`` by ``keeps``."""
    cv = cv or cross_validate()
    rows = []
    for v in (base, *candidates):
        acc = residual_rows(cv, v)
        err, batch = np.array([r["error"] for r in acc]), np.array([r["batch"] for r in acc])
        sources = np.array([r["source"] for r in acc])
        big = batch > 1
        rows.append({"variant": v, "what": CANDIDATES.get(v, VARIANTS[v].what),
                     "bias B = 1": float(err[~big].mean()), "bias B > 1": float(err[big].mean()),
                     "median B > 1": float(np.median(np.abs(err[big]))), "median": float(np.median(np.abs(err))),
                     "anchored median": cv.summary("source", v, regime="anchored")["median |log ratio|"],
                     "bias B > 1 by source": {str(s): float(err[big & (sources == s)].mean())
                                              for s in dict.fromkeys(sources[big])}})
    for r in rows[1:]:
        r["kept"] = keeps(rows[0], r)
    rows[0]["kept"] = None
    return rows


def keeps(base: dict, candidate: dict) -> bool:
    """The rule: a term is kept when, leaving one source out, its |bias| at B > 1 is smaller than the base's,
    and neither its median |log ratio| at B > 1 (acceptance only) nor the anchored regime's median is larger."""
    return (abs(candidate["bias B > 1"]) < abs(base["bias B > 1"]) and candidate["median B > 1"] <= base["median B > 1"]
            and candidate["anchored median"] <= base["anchored median"])


def term_text(rows: list[dict]) -> str:
    """``term_search`` as plain text (what ``--cv`` prints): one line per variant, then what the rule keeps."""
    lines = ["candidate batch terms (acceptance only, leaving one source out): kept only if the bias at B > 1 "
             "shrinks and neither median grows",
             f"{'variant':27} {'bias B=1':>8} {'bias B>1':>8} {'med B>1':>7} {'median':>7} {'anch med':>8}  kept  "
             "bias B>1 by source"]
    for r in rows:
        by = ", ".join(f"{s} {b:+.3f}" for s, b in r["bias B > 1 by source"].items())
        kept = "base" if r["kept"] is None else "yes" if r["kept"] else "no"
        lines.append(f"{r['variant']:27} {r['bias B = 1']:+8.3f} {r['bias B > 1']:+8.3f} {r['median B > 1']:7.3f} "
                     f"{r['median']:7.3f} {r['anchored median']:8.3f}  {kept:4}  {by}")
    kept = kept_term(rows)
    lines.append(f"kept: {kept}" if kept else f"kept: none; {rows[0]['variant']} stays")
    return "\n".join(lines)


def kept_term(rows: list[dict]) -> str | None:
    """The kept candidate with the smallest |bias| at B > 1, or None."""
    kept = [r for r in rows[1:] if r["kept"]]
    return min(kept, key=lambda r: abs(r["bias B > 1"]))["variant"] if kept else None


def why_not_kept(base: dict, candidate: dict) -> list[str]:
    """The parts of ``keeps`` a candidate fails, in words with its numbers (empty: it is kept)."""
    out = []
    if not abs(candidate["bias B > 1"]) < abs(base["bias B > 1"]):
        a, b = shown_pair(candidate["bias B > 1"], base["bias B > 1"], style="+f")
        out.append(f"its bias at B > 1, {a}, is no smaller than {b}")
    if candidate["median B > 1"] > base["median B > 1"]:
        a, b = shown_pair(candidate["median B > 1"], base["median B > 1"])
        out.append(f"its median at B > 1 grows to {a} from {b}")
    if candidate["anchored median"] > base["anchored median"]:
        a, b = shown_pair(candidate["anchored median"], base["anchored median"])
        out.append(f"the anchored median grows to {a} from {b}")
    return out


def term_story(rows: list[dict]) -> str:
    """What the search for a batch-growing term found (``term_search``), in short sentences: the term kept or
    that none is, then for each candidate that is not kept the first part of the rule it fails."""
    kept = kept_term(rows)
    said = [f"{kept} is kept." if kept else "No term is kept."]
    for r in rows[1:]:
        why = why_not_kept(rows[0], r)
        if why:
            name = r["variant"].removeprefix("+ ")
            said.append(f"{name[0].upper() + name[1:]}: {why[0]}.")
    return " ".join(said)
