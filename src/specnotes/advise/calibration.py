"""Which calibration a report uses (``resolve_calibration``: the engine's on the GPU, the nearest, pooled or
none), what the request extrapolates past, and the stored band of its cross-validated error."""

from __future__ import annotations

from dataclasses import dataclass

from specnotes import validate
from specnotes.advise.words import _ranges_text
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import ModelShape


def _calibrate():
    from specnotes.record import calibrate  # numpy and the published record: only when a report needs them

    return calibrate


# The published record's drafter names → the advisor's kinds; "self-speculation" is a draft model that is the
# target itself (``--draft`` the same shape as ``--target``, usually with ``--draft-context``).
PUBLISHED_DRAFTERS = {"draft-model": "model", "self-speculation": "self-speculation", "eagle-head": "eagle",
                      "eagle3-head": "eagle3", "ngram": "ngram", "early-exit": "early-exit"}


@dataclass(frozen=True)
class Request:
    """What the report is asked about, in the terms of a calibration's ``fitted_to``."""

    gpu: str | None
    engine: str | None
    engine_version: str | None
    kind: str
    target: str
    tp: int
    weight_bytes: float
    batch: tuple[int, int]
    context: int
    tree: bool
    moe: bool = False  # the target is a mixture of experts: its engines are calibrated as families of their own


def request_of(accel, gpu_name, engine, version, kind, target: ModelShape, draft, tp, batch, context,
               tree) -> Request:
    own = kind == "model" and isinstance(draft, ModelShape) and draft.n_layers == target.n_layers and \
        draft.d_model == target.d_model
    return Request(gpu_name, engine, version, "self-speculation" if own else kind, target.name, tp,
                   target.weight_bytes, batch, context, tree, isinstance(target, cost.MoEShape))


def extrapolations(fitted: dict, req: Request, gpus: list[str]) -> list[str]:
    """What the request asks beyond what the calibration was fitted on (``fitted``: its ``fitted_to``)."""
    out = []
    lo, hi = fitted["batch"]
    if req.batch[1] > hi:
        out.append(f"batches above B = {hi}: it was fitted on B = {_ranges_text([[lo, hi]])}")
    c_lo, c_hi = fitted["context"]
    if not c_lo <= req.context <= c_hi:
        out.append(f"context L = {req.context}: it was fitted on L = {_ranges_text([[c_lo, c_hi]])}")
    if req.gpu is None:
        out.append(f"a GPU not in the table: it was fitted on {', '.join(gpus)}")
    elif req.gpu not in gpus:
        out.append(f"the {req.gpu}: it was fitted on {', '.join(gpus)}")
    kinds = {PUBLISHED_DRAFTERS.get(d, d) for d in fitted["drafters"]}
    if req.kind not in kinds:
        out.append(f"drafter {req.kind!r}: it was fitted on {', '.join(sorted(kinds))}")
    if req.target not in fitted["targets"]:
        out.append(f"target {req.target}: it was fitted on {', '.join(fitted['targets'])}")
    if req.tp not in fitted["tp"]:
        out.append(f"tp = {req.tp}: it was fitted on tp = {', '.join(map(str, fitted['tp']))}")
    if req.weight_bytes not in fitted["weight_bytes"]:
        bits = ", ".join(f"{8 * w:g}-bit" for w in fitted["weight_bytes"])
        out.append(f"{8 * req.weight_bytes:g}-bit weights: it was fitted on {bits} weights (the weight reads move)")
    if req.tree and not fitted["trees"]:
        out.append("a draft tree: it was fitted on chains only")
    return out


@dataclass(frozen=True)
class Resolved:
    """A calibration resolved for a request: its name (None: the idealized model), the time functions'
    keyword arguments, what it was fitted to, the sentence saying which and why, warnings, what the request
    extrapolates past, and the band of its cross-validated error (``calibrate.Band``: a function of B)."""

    name: str | None
    knobs: dict
    about: str | None
    note: str
    warnings: tuple[str, ...]
    extrapolations: tuple[str, ...]
    band: object | None  # calibrate.Band
    fitted_batch: int | None = None
    band_about: dict | None = None
    provenance: str = ""  # where the calibration's data come from, when the record doubts it (a note)


def _gpus_of(stored: dict, engine: str | None) -> list[str]:
    """The GPUs the record has calibrations of ``engine`` on (None: any engine)."""
    return sorted({a for a, names in stored.items() if a in hardware.ACCELERATORS for n, r in names.items()
                   if "alias_of" not in r and (engine is None or _calibrate()._versions_of(engine, [n]))})


def resolve_calibration(gpu_name: str | None, name: str | None, req: Request, lookup=None) -> Resolved:
    """The calibration a report uses. ``name``: "auto" (the engine's on this GPU, else the nearest the record
    has, saying which), "none" (the idealized roofline), "pooled" (the knobs pooled over every engine), or a
    stored name of the GPU (``lookup(gpu, name)``: ``calibrate.calibration`` by default; a test passes its own)."""
    name = "auto" if name is None else name
    stored = _calibrate().stored()
    chosen, about = stored_band(stored, stored["model"]["variant"])
    if name == "none":
        return Resolved(None, {}, None, "`--calibration none`: the idealized roofline (no engine costs)", (), (),
                        *stored_band(stored, "idealized")[:1], None, stored_band(stored, "idealized")[1])
    if gpu_name is None and name not in ("auto", "pooled"):
        raise validate.BadArgument(f"calibration {name!r}: a calibration belongs to a GPU of the table, and this one "
                                   "is given by --bandwidth/--peak; use --gpu, or --calibration auto, pooled or none")
    if lookup is not None and name != "auto":
        try:
            knobs = dict(lookup(gpu_name, name))
        except (KeyError, ValueError):
            raise validate.BadArgument(f"calibration {name!r} does not exist for {gpu_name}") from None
        return Resolved(name, knobs, None, f"`--calibration {name}`: as given (not cross-validated)", (), (), None)
    pooled = stored["pooled"]
    if name == "pooled" or (name == "auto" and (req.engine is None or gpu_name is None)):
        why = ("`--calibration pooled`" if name == "pooled" else
               "auto: the GPU is not in the table, so it has no calibration of its own" if gpu_name is None else
               "auto: the engine is not given (`--engine`)")
        note = (f"{why}: the engine knobs pooled over every engine in the published record "
                f"({', '.join(sorted(stored['families']))})")
        gone = extrapolations(pooled["fitted_to"], req, _gpus_of(stored, None))
        engine = ["the engine: the pooled knobs are no engine's own"] if name == "auto" else []
        return Resolved("pooled", dict(pooled["knobs"]), "pooled over every engine in the record", note, (),
                        tuple(engine + gone), chosen, pooled["fitted_to"]["batch"][1], about)
    if gpu_name is None:
        raise validate.BadArgument(f"calibration {name!r}: a calibration belongs to a GPU of the table, and this one "
                                   "is given by --bandwidth/--peak; use --gpu, or --calibration auto, pooled or none")
    here = {n: r for n, r in stored.get(gpu_name, {}).items()}
    if name == "auto":
        found, knobs, how = _calibrate().lookup(gpu_name, req.engine, req.engine_version, moe=req.moe)
        moe_family = f"{req.engine}{_calibrate().MOE_SUFFIX}"
        family = (moe_family if req.moe and moe_family in stored["families"] else
                  req.engine if req.engine in stored["families"] else None)
        record = here[found] if found else stored["families"][family] if family else pooled
        gone = extrapolations(record["fitted_to"], req, [gpu_name])  # another GPU: the engine's sentence says so
        exact = found is not None and not any(s in how for s in ("not to", "not given", "dense targets' knobs"))
        engine = [] if exact else [f"the engine: {how}"]
        label = found or (f"{family} (fitted on other GPUs)" if family else "pooled")
        doubt = gpu_doubt_text(record["fitted_to"])
        how, _, sources = how.partition(" (from ")
        if sources:  # where the knobs come from is a note, not part of the Model line
            sources, _, rest = sources.partition(")")
            how += rest
        note = f"auto: {how}" + ("; this setup is inside what it was fitted on" if exact and not gone else "")
        said = ([f"The knobs come from these sources of the published record: {sources}."] if sources else []) + (
            [_doubt_note(doubt)] if doubt else [])
        return Resolved(label, dict(knobs), how, note, (), tuple(engine + gone), chosen,
                        record["fitted_to"]["batch"][1], about, " ".join(said).rstrip("."))
    names = [n for n in here if "alias_of" not in here[n]] + [n for n in here if "alias_of" in here[n]]
    if name not in here:
        where = "; ".join(f"{a}: {', '.join(n)}" for a, n in
                          ((a, list(v)) for a, v in stored.items() if a in hardware.ACCELERATORS)) or "none"
        raise validate.BadArgument(f"calibration {name!r} is not stored for {gpu_name} (it has "
                                   f"{', '.join(names) or 'none'}; stored: {where}); or auto, pooled, none")
    record = here[here[name]["alias_of"]] if "alias_of" in here[name] else here[name]
    gone = extrapolations(record["fitted_to"], req, [gpu_name])
    label = f"{record['engine']} {record['version'] or '(version not published)'} on {gpu_name}"
    engine = [] if req.engine and calibrate_name_matches(name, record, req) else [
        f"the engine: `--calibration {name}` is {label}" + (f", asked for {req.engine} {req.engine_version or ''}"
                                                            .rstrip() if req.engine else "")]
    warnings = ((f"`--calibration {name}` ({label}) applied past what it was fitted on: {'; '.join(engine + gone)}",)
                if engine + gone else ())
    doubt = gpu_doubt_text(record["fitted_to"])
    return Resolved(name, _calibrate().calibration(gpu_name, name), label, f"`--calibration {name}`: {label}", warnings,
                    tuple(engine + gone), chosen, record["fitted_to"]["batch"][1], about, _doubt_note(doubt))


def stored_band(stored: dict, variant: str, kind: str = "batch") -> tuple:
    """(``calibrate.Band``, how it was built and how it did held out) of a stored variant: ``kind`` "batch" (the
    band as a function of B, from the acceptance-only held-out errors) or "anchor" (of an anchored prediction,
    as a function of log2(B / measured B)); (None, None) where none is stored."""
    rec = stored["cross_validation"].get("bands", {}).get(variant)
    if rec is None:
        return None, None
    band = _calibrate().Band.from_json(rec[kind])
    held = rec["held_out" if kind == "batch" else "anchor_held_out"]
    return band, {"variant": variant, "regime": rec["regime"] if kind == "batch" else "anchored",
                  "nominal": band.nominal, "points": band.points, "errors": len(band.errors),
                  "sources": len(set(band.sources)), "held_out": held, "between": band.between,
                  "centre": band.centre}


def _doubt_note(doubt: str) -> str:
    return f"The calibration's data hold points whose GPU the record doubts: {doubt}" if doubt else ""


def gpu_doubt_text(fitted: dict) -> str:
    """The record's doubt about which GPU measured what a calibration was fitted to, in one clause ("" if none)."""
    whys = sorted({line.split(": ", 1)[-1] for line in fitted.get("gpu_doubt", [])})
    return "; ".join(whys)


def calibrate_name_matches(name: str, record: dict, req: Request) -> bool:
    engine = str(req.engine or "").lower()
    return record["engine"].lower().startswith(engine) and (req.engine_version in (None, record["version"]))
