"""What the measured Chapters 1, 2 and 4 find in a measurement, live or recorded.

A chapter measures, then hands its numbers to one function here: :func:`gemm` (Chapter 1, the decode
GEMM against this device's roofs), :func:`verify` (Chapter 2, verify over decode on the layer stacks)
or :func:`speedup` (Chapter 4, S(B) on the layer stacks). Each

- raises ``measure.checks.Broken`` where the machine or the code is broken: a timer that disagrees
  with itself, a NaN, more work measured far faster than less (``checks.more_work_is_slower``). It is
  the only way a measured cell fails;
- runs the checks of agreement with the model (``Verdict``\\ s, printed, never asserted): on a CPU whose
  GEMM library runs a few rows far below both roofs, the model and the measurement part, and that is a
  finding;
- chooses every sentence the chapter glues about the measurement, by glue name, from the numbers.

:func:`recorded` rebuilds a chapter's inputs from a ``python -m specnotes.bench chapters`` record
(``data/reference``), so ``tests/measure/test_reference.py`` replays every chapter on every machine the book
has met.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from specnotes.analytic import cost
from specnotes.measure import checks, stack
from specnotes.measure.devices import as_dtype, dtype_name
from specnotes.measure.probes import GemmEfficiency, MeasuredRoof, gemm_roofline, geometric_error
from specnotes.measure.records import Record, Results
from specnotes.measure.timing import Sweep


@dataclass
class Findings:
    """What a chapter found: the invariants that held, the verdicts on the model and the sentences it
    glues (by glue name); ``numbers``, the measured numbers it glues beside them."""

    invariants: list[checks.Verdict]
    verdicts: list[checks.Verdict]
    sentences: dict[str, str]
    numbers: dict[str, float] = field(default_factory=dict)
    crossing: checks.Crossing | None = None

    def __str__(self) -> str:
        return "\n".join(str(v) for v in self.invariants + self.verdicts)


def sound(records) -> None:
    """``checks.timer_agrees`` on every record: raises ``checks.Broken`` on the first a broken timer made."""
    for r in records:
        label = f"{r.name} {r.params}"
        checks.timer_agrees(label, r.samples, r.median_s, r.q1_s, r.q3_s)


# ---------------------------------------------------------------------------------------------- Chapter 1


def gemm(roof: MeasuredRoof, records: list[Record], *, floor: float = 0.0, cached: bool = False) -> Findings:
    """Chapter 1: a decode-GEMM sweep (``measure.matmul_sweep`` records) on this device's measured ``roof``,
    with the per-op ``floor`` (``measure.matmul_floor``) in the model; ``cached``: the weight fits in the
    last-level cache. Sentences: ``roofs_verdict``, ``amortization_verdict``, ``amortization_here``,
    ``efficiency_story``."""
    records = sorted(records, key=lambda r: r.params["batch"])
    sound(records)
    rows = [r.params["batch"] for r in records]
    labels = [f"B={b}" for b in rows]
    fastest = [r.fastest_s for r in records]
    roofline = [gemm_roofline(r, roof) for r in records]
    modelled = [t + floor for t in roofline]
    work = [(r.extra.get("flops", 0.0), r.extra.get("bytes", 1.0)) for r in map(_with_work, records)]
    invariant = checks.more_work_is_slower(labels, fastest, modelled, work, common_bytes=True)  # one weight
    roofs = checks.within_roofs(fastest, roofline, labels, cached=cached)
    amortization = [fastest[0] / (f / b) for f, b in zip(fastest, rows, strict=True)]
    grows = checks.grows("per-token time falls as B grows", rows, amortization,
                         [modelled[0] / (m / b) for m, b in zip(modelled, rows, strict=True)])
    efficiency = GemmEfficiency.from_sweep(records, roof)
    copy = roof.bandwidth / 1e9
    slow = checks.describe_slow_gemms(rows, efficiency.ratios, efficiency.gb_per_s, copy)
    flat = f" {slow} So sharing one weight read among more rows saves less than the model says." if slow else ""
    best = max(range(len(rows)), key=amortization.__getitem__)
    sentences = {
        "roofs_verdict": roofs.sentence,
        "amortization_verdict": grows.sentence + (flat if grows.tested and not grows.ok else ""),
        "efficiency_story": checks.describe_gemm_efficiency(rows, efficiency.ratios, efficiency.leave_one_out(),
                                                            efficiency.gb_per_s, copy),
    }
    numbers = {"amortization": amortization[best], "best_batch": rows[best],
               "efficiency_loo_error": efficiency.error(), "roofline_error": efficiency.error([1.0] * len(rows)),
               "efficiency_min": min(efficiency.ratios), "efficiency_max": max(efficiency.ratios)}
    sentences["amortization_here"] = checks.describe_amortization(grows, rows[0], rows[best], amortization[best])
    return Findings([invariant], [roofs, grows], sentences, numbers)


# ---------------------------------------------------------------------------------------------- Chapters 2 and 4


def _passes(sweep: stack.BatchSweep, kinds) -> list[tuple[str, int]]:
    return [(kind, b) for kind in kinds for b in sweep.batches if b in sweep.records.get(kind, {})]


def _with_work(r: Record) -> Record:
    """A GEMM record with its FLOPs and bytes (``cost.gemm_cost``) where a transcription left them out."""
    if "flops" in r.extra:
        return r
    p = r.params
    c = cost.gemm_cost(p["batch"], p["d_in"], p["d_out"], weight_bytes=as_dtype(r.dtype).itemsize)
    return dataclasses.replace(r, extra={**r.extra, "flops": c.flops, "bytes": c.bytes})


def _stack_invariants(sweep: stack.BatchSweep, model: stack.StackModel, kinds) -> checks.Verdict:
    passes = _passes(sweep, kinds)
    sound(sweep.records[kind][b] for kind, b in passes)
    work = [model.work(*p) for p in passes]
    return checks.more_work_is_slower([f"{kind} B={b}" for kind, b in passes], [sweep.time(*p) for p in passes],
                                      [model.time(*p) for p in passes], work)


def _held(efficiency: GemmEfficiency, rows) -> int:
    return sum(efficiency.extrapolates(m) for m in rows)


def verify(sweep: stack.BatchSweep, model: stack.StackModel, roof: MeasuredRoof, *, cached: bool = False,
           efficiency: GemmEfficiency | None = None) -> Findings:
    """Chapter 2: decode, verify and "B + k" passes of the layer stack at each batch, against ``model`` (the
    roofline on ``roof`` plus the per-pass floor); with ``efficiency``, the model with the per-M GEMM
    efficiency beside it. ``cached``: the target's weights fit in the last-level cache. Sentences:
    ``m_story``, ``m_free_story``, ``roofs_verdict``, ``grows_verdict``, ``eff_story``."""
    invariant = _stack_invariants(sweep, model, stack.PASSES)
    passes = _passes(sweep, ("decode", "verify", "mixed"))
    roofs = checks.within_roofs([sweep.time(*p) for p in passes], [model.time(*p, floor=False) for p in passes],
                                [f"{kind} B={b}" for kind, b in passes], cached=cached)
    B, k = sweep.batches, sweep.k
    vd = [sweep.time("verify", b) / sweep.time("decode", b) for b in B]
    vd_model = [model.time("verify", b) / model.time("decode", b) for b in B]
    grows = checks.grows("verify/decode grows once B(k+1) passes the ridge", B, vd, vd_model)
    sentences = {
        "m_story": checks.describe_verify(
            B, vd, vd_model, critical_batch=roof.critical_batch, k=k,
            decode_excess=sweep.time("decode", B[0]) / model.time("decode", B[0]),
            verify_excess=sweep.time("verify", B[0]) / model.time("verify", B[0])),
        "m_free_story": checks.describe_free_batch(roof.critical_batch, k, B, vd, vd_model),
        "roofs_verdict": roofs.sentence,
        "grows_verdict": grows.sentence,
    }
    numbers = {"t0_ms": 1e3 * model.t0_target}
    mixed = [b for b in B if b in sweep.records.get("mixed", {})]
    if mixed:
        numbers["mixed_max"] = sweep.time("mixed", mixed[-1]) / sweep.time("decode", mixed[-1])
    if efficiency is not None:
        with_e = model.with_efficiency(efficiency)
        vd_e = [with_e.time("verify", b) / with_e.time("decode", b) for b in B]
        numbers |= {"vd_error": geometric_error(vd_model, vd), "vd_error_eff": geometric_error(vd_e, vd)}
        sentences["eff_story"] = checks.describe_efficiency_gain(
            "verify/decode", numbers["vd_error"], numbers["vd_error_eff"],
            extrapolated=_held(efficiency, [b * n for b in B for n in (1, k + 1)]))
    return Findings([invariant], [roofs, grows], sentences, numbers)


def speedup(sweep: stack.BatchSweep, model: stack.StackModel, roof: MeasuredRoof, *, cache_bytes: float = 0.0,
            efficiency: GemmEfficiency | None = None) -> Findings:
    """Chapter 4: S(B) measured on the layer stacks against ``model`` on ``roof`` (``cache_bytes``: the
    last-level cache, ``measure.devices.cache_bytes``); with ``efficiency``, the model with the per-M GEMM
    efficiency beside it. Sentences: ``meas_story``, ``c_story``, ``free_story``, ``model_bstar``,
    ``gap_story``, ``falls_story``, ``bound_story``, ``eff_story``, ``ceiling_story``; ``crossing`` for the plot's
    marks. A measured S past its ceiling for k and α (``checks.within_ceiling``) is left out of every other sentence
    and said so in ``ceiling_story``."""
    invariant = _stack_invariants(sweep, model, stack.PASSES)
    k = sweep.k
    every = sweep.batches
    # a measured S past what k drafts at α can give is noise (checks.ceiling): flagged, and left out of the rest
    ceiling = checks.within_ceiling(every, [sweep.speedup(b) for b in every], sweep.alpha, k)
    B = [b for b in every if b in ceiling.kept] or list(every)
    s_measured = [sweep.speedup(b) for b in B]
    s_model = [model.speedup(b) for b in B]
    crossing = checks.describe_crossing(B, s_measured, sweep.stop, model.crossover(), ridge=roof.ridge,
                                        critical_batch=roof.critical_batch, k=k)
    caps = [model.speedup_cap(b, sweep.time("decode", b), cache_bytes) for b in B]
    falls, bound = checks.speedup_falls(B, s_measured, s_model), checks.speedup_bound(B, s_measured, caps)
    vd = [sweep.time("verify", b) / sweep.time("decode", b) for b in B]
    vd_model = [model.time("verify", b) / model.time("decode", b) for b in B]
    slow = "" if efficiency is None else checks.describe_slow_gemms(efficiency.rows, efficiency.ratios,
                                                                     efficiency.gb_per_s, roof.bandwidth / 1e9)
    why_flat = checks.describe_speedup_trend(falls, B, vd, vd_model, slow)
    widest = max(B, key=lambda b: abs(math.log(sweep.speedup(b) / model.speedup(b))))  # where they part most
    draft_cached = model.draft.weight_bytes_total <= cache_bytes
    sentences = {
        "meas_story": crossing.sentence,
        "c_story": checks.describe_draft_cost(sweep.time("draft", B[0]) / sweep.time("decode", B[0]),
                                              model.draft.params / model.target.params,
                                              model.time("draft", 1) / model.time("decode", 1),
                                              draft_cached=draft_cached),
        "free_story": checks.describe_free_batch(roof.critical_batch, k, B, vd, vd_model),
        "model_bstar": "beyond any batch that fits" if crossing.model_bstar is None else f"B = {crossing.model_bstar}",
        "gap_story": checks.describe_model_gap(
            widest, k, sweep.speedup(widest), model.speedup(widest),
            {kind: (sweep.time(kind, widest), model.time(kind, widest)) for kind in ("decode", "verify", "draft")}),
        "falls_story": falls.sentence + (f" {why_flat}" if why_flat else ""),
        "bound_story": bound.sentence,
        "ceiling_story": ceiling.sentence,
    }
    numbers = {"s_error": geometric_error(s_model, s_measured)}
    if efficiency is not None:
        s_eff = [model.with_efficiency(efficiency).speedup(b) for b in B]
        numbers |= {"s_error_eff": geometric_error(s_eff, s_measured)}
        sentences["eff_story"] = checks.describe_efficiency_gain(
            "S(B)", numbers["s_error"], numbers["s_error_eff"],
            extrapolated=_held(efficiency, [b * n for b in B for n in (1, k + 1)]))
    return Findings([invariant], [falls, bound, ceiling], sentences, numbers, crossing)


# ---------------------------------------------------------------------------------------------- records


@dataclass
class Recorded:
    """A chapter run rebuilt from a record: ``roof`` (the roofs the chapters judged it on), the decode-GEMM
    sweep and the matmul floor (Chapter 1), the layer stacks' sweep and their model (Chapters 2 and 4),
    the last-level cache. A part the record lacks is None, and the chapter that needs it cannot replay."""

    name: str
    provenance: dict
    roof: MeasuredRoof
    gemm_records: list[Record] | None
    floor: float | None
    sweep: stack.BatchSweep | None
    model: stack.StackModel | None
    cache_bytes: float

    @property
    def efficiency(self) -> GemmEfficiency | None:
        return None if not self.gemm_records else GemmEfficiency.from_sweep(self.gemm_records, self.roof)

    def chapter1(self) -> Findings:
        r = self.gemm_records[0]
        weight = as_dtype(r.dtype).itemsize * r.params["d_in"] * r.params["d_out"]
        return gemm(self.roof, self.gemm_records, floor=self.floor or 0.0, cached=weight <= self.cache_bytes)

    def chapter2(self) -> Findings:
        cached = self.model.target.weight_bytes_total <= self.cache_bytes
        return verify(self.sweep, self.model, self.roof, cached=cached, efficiency=self.efficiency)

    def chapter4(self) -> Findings:
        return speedup(self.sweep, self.model, self.roof, cache_bytes=self.cache_bytes, efficiency=self.efficiency)

    @property
    def chapters(self) -> dict:
        """The chapters this record holds what it takes to replay, by number."""
        out = {}
        if self.gemm_records:
            out[1] = self.chapter1
        if self.sweep is not None and "verify" in self.sweep.records:
            out[2] = self.chapter2
            if self.sweep.records.get("draft"):
                out[4] = self.chapter4
        return out


def _kind(r: Record, draft_name: str, k: int) -> str:
    p = r.params
    if p["stack"] == draft_name:
        return "draft"
    if p["new_tokens"] == 1:
        return "decode"
    return "verify" if p.get("speculating", p["batch"]) == p["batch"] else "mixed"


def _shape(d: dict) -> cost.ModelShape:
    fields = {f.name for f in dataclasses.fields(cost.ModelShape)}
    return cost.ModelShape(**{key: value for key, value in d.items() if key in fields})


def recorded(results: Results, name: str = "") -> Recorded:
    """The chapters' inputs from a ``bench chapters`` record (``measure.load_results``). ``notes["roof"]``
    holds the roofs as the chapters use them (the faster of two measurements of each); the stacks'
    shapes, k, context, α, floors and the sweep's stop are in ``notes`` too. As in the chapters, a floor is
    at most what the sweep's first pass left over (``StackModel.bounded_by``); a record without the draft's
    floor gives the draft the target's, and one without the last-level cache is read as having none."""
    notes, sections = results.notes, results.sections
    dtype = dtype_name(results.provenance["dtype"])
    r = notes["roof"]
    roof = MeasuredRoof(r["bandwidth"], r["flops"], (), dtype_name(r.get("dtype") or dtype))
    gemm_records = sections.get("matmul_sweep") or None
    sweep = model = None
    if sections.get("stack_sweep"):
        st = notes["stacks"]
        target, draft = (_shape(st[which]).in_dtype(dtype) for which in ("target", "draft"))
        k, context, alpha = st["k"], st["context"], notes["alpha"]
        records = {kind: {} for kind in stack.PASSES}
        for rec in sections["stack_sweep"]:
            records[_kind(rec, draft.name, k)][rec.params["batch"]] = rec
        batches = sorted(records["decode"])
        sweep = stack.BatchSweep(k, alpha, context, batches, records,  # its S values: BatchSweep.speedup
                                 Sweep(batches, [], notes["stack_sweep_stop"], notes.get("stack_sweep_s") or 0.0,
                                       None, notes.get("stack_sweep_limit") or batches[-1]))
        model = stack.StackModel(target, draft, roof.as_accelerator(dtype), notes["t0_target_s"],
                                 notes.get("t0_draft_s") or notes["t0_target_s"], k, alpha, context).bounded_by(sweep)
    return Recorded(name, results.provenance, roof, gemm_records, notes.get("t0_gemm_s"), sweep, model,
                    notes.get("cache_bytes") or 0)
