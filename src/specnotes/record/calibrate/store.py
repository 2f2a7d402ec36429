"""The store: ``write_calibrations`` fits the chosen variant to the whole record and writes data/calibrations.json,
with each engine's identity, what it was fitted to (``fitted_to``), the cross-validated error and the advisor's
bands (``band_record``); ``stored``, ``calibrations``, ``calibration`` and ``lookup`` read it."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.hardware import ACCELERATORS, DEVICES
from specnotes.record import published
from specnotes.record.calibrate.admission import record
from specnotes.record.calibrate.bands import (
    ADVISOR_REGIME,
    anchor_band,
    anchor_pairs,
    anchor_table,
    band_table,
    batch_band,
)
from specnotes.record.calibrate.crossval import CrossValidation, cross_validate
from specnotes.record.calibrate.engine_fit import ALLREDUCE_LATENCY, SHRINK, fit_engines
from specnotes.record.calibrate.features import Features
from specnotes.record.calibrate.points import MOE_APART, MOE_SUFFIX, Case, calibration_name
from specnotes.record.calibrate.variants import CHOSEN, VARIANTS

KNOBS = ("overhead", "draft_overhead", "allreduce_latency", "layer_overhead", "expert_slowdown")  # what one holds


def drafter_kind(c: Case) -> str:
    """The published record's name for a case's drafter: eagle3-head, eagle-head, self-speculation, ..."""
    d = c.draft
    if isinstance(d, cost.EagleHead):
        return "eagle3-head" if d.fc_inputs == 3 else "eagle-head"
    if d == c.target:
        return "self-speculation"
    return {cost.ModelShape: "draft-model", cost.NoWeights: "ngram", cost.EarlyExit: "early-exit"}.get(
        type(d), type(d).__name__)


def fitted_to(cases_) -> dict:
    """What a set of cases covers: the ranges a calibration fitted to them can be trusted in."""
    cases_ = list(cases_)
    span = lambda values: [min(values), max(values)]
    return {"sources": sorted({c.source for c in cases_}), "series": sorted({c.series for c in cases_}),
            "points": len(cases_), "batch": span([c.batch for c in cases_]),
            "context": span([c.context for c in cases_]), "k": sorted({c.k for c in cases_}),
            "trees": any(c.widths for c in cases_), "targets": sorted({c.target.name for c in cases_}),
            "drafters": sorted({drafter_kind(c) for c in cases_}), "tp": sorted({c.tp for c in cases_}),
            "weight_bytes": sorted({c.target.weight_bytes for c in cases_}), "gpu_doubt": gpu_doubt(cases_)}


def gpu_doubt(cases_) -> list[str]:
    """The published record's doubts about which GPU measured these cases (a series' setup
    ``accelerator_doubt``), one line per series that has one: "source/series: why"."""
    out = []
    for source, series in dict.fromkeys((c.source, c.series) for c in cases_):
        if not source:
            continue
        why = published.load(source)[series].setup.get("accelerator_doubt")
        if why:
            out.append(f"{source}/{series}: {why}")
    return out


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "magicdec": "MagicDec research engine",
                "vllm-moe": "vLLM, MoE targets", "sglang-moe": "SGLang, MoE targets", "atom-moe": "ATOM, MoE targets"}
# Calibrations the chapters first called by the published source they came from.
ALIASES = {("H100-SXM", "specdecode_bench"): "vllm-0.10.1"}


def _rounded(knobs: dict, engine: str = "") -> dict:
    """Knobs as stored, 4 significant digits; a dense engine's without ``expert_slowdown`` (it has no experts:
    the knob is the MoE engines', fitted to the MoE series alone)."""
    return {k: (v if isinstance(v, str) else float(f"{v:.4g}")) for k, v in knobs.items()
            if k != "expert_slowdown" or engine.endswith(MOE_SUFFIX)}


ANCHOR_NOMINAL = 0.95  # the anchored band: the central 95% of the 40 nearest pairs (pairs are many and alike)


def band_record(cv: CrossValidation, variant: str = CHOSEN) -> dict:
    """The advisor's bands as stored: the batch band (``batch_band``, acceptance-only errors) and the anchored
    band (``anchor_band``) with their held-out tables (``band_table``, ``anchor_table``)."""
    pairs = anchor_pairs(cv, variant)
    return {"variant": variant, "regime": ADVISOR_REGIME, "batch": batch_band(cv, variant).to_json(),
            "held_out": _rounded_rows(band_table(cv, variant)),
            "anchor": anchor_band(cv, variant, ANCHOR_NOMINAL, pairs).to_json(),
            "anchor_held_out": _rounded_rows(anchor_table(cv, variant, ANCHOR_NOMINAL))}


def _rounded_rows(rows: list[dict]) -> list[dict]:
    return [{k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()} for r in rows]


def _compact_lists(text: str) -> str:
    """Indented JSON with every list of plain values (numbers, strings) on one line."""
    return re.sub(r"\[\n\s*((?:[^\[\]{}\n]+,\n\s*)*[^\[\]{}\n]+)\n\s*\]",
                  lambda m: "[" + " ".join(x.strip() for x in m.group(1).split("\n")) + "]", text)


def write_calibrations(path=None, cv: CrossValidation | None = None) -> dict:
    """Fit the chosen variant (``CHOSEN``) to the whole record and write data/calibrations.json (or ``path``):
    one calibration per (engine, version, GPU) in the record, the families' and the pooled knobs for engines
    the record has not seen, the cross-validation table and the advisor's bands."""
    rec = record()
    cv = cv or cross_validate()
    v = VARIANTS[CHOSEN]
    full = fit_engines(v, features=Features(rec.cases, v.heads))
    doc = {"about": "cost-model knobs per engine and GPU, fitted to the published record and cross-validated: "
                    "specnotes.record.calibrate (record, VARIANTS, fit_engines, cross_validate); regenerate with "
                    "python -m specnotes.record.calibrate --write",
           "model": {"variant": v.name, "what": v.what, "overlap": "none", "free": list(v.free),
                     "held": v.held,
                     "fixed": {"overhead": 0.0, "allreduce_latency": ALLREDUCE_LATENCY},
                     "fixed_source": "allreduce_latency: ~10 us, vLLM's custom all-reduce for small messages on H100 "
                                     "(interconnect.json, allreduce_h100_vllm_custom)",
                     "shrink": SHRINK,
                     "chosen_by": "issue 42's rule (moe_keeps): of the terms that lower the MoE family's median "
                                  "|log ratio| leaving one source out without raising either dense median, the one "
                                  "that lowers it most, over the per-layer cost"},
           "cross_validation": {"rows": [{k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()}
                                         for r in cv.rows()],
                                "bands": {name: band_record(cv, name) for name in ("idealized", CHOSEN)},
                                "skipped": rec.skipped},
           "pooled": {"knobs": _rounded(full.knobs(("", None, ""))[0]), "fitted_to": fitted_to(rec.cases)},
           "families": {f: {"knobs": _rounded(full.knobs((f, None, ""))[0], f),
                            "fitted_to": fitted_to(c for c in rec.cases if c.engine == f)} for f in full.families}}
    for key in full.keys:
        engine, version, accel = key
        mine = [c for c in rec.cases if c.key == key]
        doc.setdefault(accel, {})[calibration_name(engine, version)] = {
            "knobs": _rounded(full.knobs(key)[0], engine), "engine": ENGINE_NAMES.get(engine, engine), "family": engine,
            "version": version,
            "accelerator": accel, "fitted_to": fitted_to(mine),
            "method": f"specnotes.record.calibrate.fit_engines({v.name!r}): least squares on log S over every series "
                      "of the record, this engine's knobs shrunk toward its family's and the pooled ones"}
    for (accel, alias), name in ALIASES.items():
        if name in doc.get(accel, {}):
            doc[accel][alias] = {"alias_of": name, "why": "the name the chapters first used for this calibration"}
    path = path or resources.files("specnotes").joinpath("data", "calibrations.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_compact_lists(json.dumps(doc, indent=1)) + "\n")
    _stored.cache_clear()
    return doc


@cache
def _stored() -> dict:
    path = resources.files("specnotes").joinpath("data", "calibrations.json")
    return json.loads(path.read_text(encoding="utf-8"))


def stored() -> dict:
    """The whole of data/calibrations.json (a copy): per-GPU calibrations, families, pooled, model, CV."""
    return json.loads(json.dumps(_stored()))


def calibrations() -> dict:
    """Every stored calibration: {accelerator: {name: record}} (``write_calibrations`` writes them), each
    record with its knobs, the engine and GPU it describes, what it was fitted to and its cross-validated
    error. A copy."""
    return {k: v for k, v in stored().items() if k in ACCELERATORS}


def calibration(accelerator_name: str, source: str) -> dict:
    """The keyword arguments of the cost model's time functions for the engine calibrated as ``source`` on
    ``accelerator_name`` (``calibrations()`` lists them; Chapter 6 fits them):

        knobs = calibrate.calibration("H100-SXM", "vllm-0.10.1")
        cost.batch_speedup(target, draft, "H100-SXM", 64, 3, 0.62, 720, **knobs)

    A name is an engine and its version ("vllm-0.10.1", "sglang-0.5.9", ...) or, for the calibrations the
    book fitted first, the published source they came from ("specdecode_bench": vLLM 0.10.1 in SpecDecode-Bench;
    "magicdec"). Returns a new dict (overlap, overhead, draft_overhead, layer_overhead, allreduce_latency)."""
    validate.choice("accelerator_name", accelerator_name, ACCELERATORS)
    stored_ = calibrations()
    if accelerator_name not in stored_:
        raise validate.BadArgument(f"no calibration for {accelerator_name}; calibrated: {', '.join(stored_)}")
    names = stored_[accelerator_name]
    validate.choice(f"source (calibrated on {accelerator_name})", source, names)
    record_ = names[source]
    if "alias_of" in record_:
        record_ = names[record_["alias_of"]]
    return dict(record_["knobs"])


def _versions_of(engine: str, names) -> list[str]:
    """The stored names that are ``engine`` itself or ``engine``-VERSION (a version starts with a digit): not
    another family whose name starts the same ("sglang-moe" is not a version of "sglang")."""
    return [n for n in names if n == engine or (n.startswith(engine + "-") and n[len(engine) + 1:][:1].isdigit())]


def lookup(accelerator_name: str, engine: str, version: str | None = None,
           moe: bool = False) -> tuple[str | None, dict, str]:
    """The best calibration the record offers an engine on a GPU: (stored name or None, knobs, how it was
    found). In order: this engine and version on this GPU; this engine at another version on this GPU; the
    engine's family knobs (fitted on other GPUs); the pooled knobs of every engine. ``moe``: the target is a
    mixture of experts, whose engines are fitted as families of their own (``MOE_APART``): that family is looked
    up first, and where the record has none, the same engine's dense knobs, saying so."""
    validate.choice("accelerator_name", accelerator_name, ACCELERATORS)
    engine = str(engine).lower()
    doc = stored()
    if moe and MOE_APART and not engine.endswith(MOE_SUFFIX):
        moe_engine = engine + MOE_SUFFIX
        if any(_versions_of(moe_engine, doc.get(accelerator_name, {}))) or moe_engine in doc["families"]:
            return lookup(accelerator_name, moe_engine, version)
        name, knobs, how = lookup(accelerator_name, engine, version)
        return name, knobs, f"{how}; the record has no {ENGINE_NAMES.get(engine, engine)} serving a mixture of " \
                            "experts, so these are its dense targets' knobs"
    here = doc.get(accelerator_name, {})
    name = calibration_name(engine, version)
    label = ENGINE_NAMES.get(engine, engine) + (f" {version}" if version else "")
    if name in here:
        return name, calibration(accelerator_name, name), f"fitted to {label} on {accelerator_name}"
    same = [n for n in _versions_of(engine, here) if "alias_of" not in here[n]]
    if same:  # the newest version the record has on this GPU
        newest = max(same, key=lambda n: [int(x) for x in re.findall(r"\d+", here[n]["version"] or "")])
        fitted = f"{ENGINE_NAMES.get(engine, engine)} {here[newest]['version'] or '(version not published)'}"
        asked = f"not to {label}" if version else "the newest version the record has (--engine-version not given)"
        return newest, calibration(accelerator_name, newest), f"fitted to {fitted} on {accelerator_name}, {asked}"
    if engine in doc["families"]:
        gpus = sorted({g for g in doc["families"][engine]["fitted_to"]["sources"]})
        where = sorted({a for a, names in doc.items() if a in DEVICES and _versions_of(engine, names)})
        return None, dict(doc["families"][engine]["knobs"]), (
            f"{ENGINE_NAMES.get(engine, engine)} was fitted on {', '.join(where)} (from {', '.join(gpus)}), not on "
            f"{accelerator_name}: its knobs are carried over")
    return None, dict(doc["pooled"]["knobs"]), (f"the record has no {label} at all: the knobs pooled over every "
                                                "engine in it")
