"""The record's admission rules (Chapter 6): ``record()``, every published series of S against the batch (or the
requests a closed loop keeps in flight, ``LOADS``) that the model can represent, as ``Case`` s, and the series it
cannot represent with every rule each fails (``SKIP_KINDS``, ``skip_summary``). The rules: ``_load_rule``,
``shape``, ``_draft``, ``point_draft``, ``assumed_gpu`` (an "H100" without its form factor priced as the SXM part,
marked ``gpu_assumed``). A series that publishes no acceptance is *anchored* to its smallest batch. Chapter 10's
readers of the published MoE series: ``published_moe_series``, ``published_curve``."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from specnotes.analytic import cost
from specnotes.analytic.hardware import ACCELERATORS, DEVICES
from specnotes.record import published
from specnotes.record.calibrate.points import Case, _cases, magicdec_alpha, point_draft
from specnotes.record.calibrate.predictions import anchors, predict
from specnotes.record.calibrate.shapes import SHAPE_ALIASES, SHAPES, SKIP_KINDS, Unpriceable, _draft, shape

# Where a source gives no context for a series, the same source's context for the same dataset (its
# traces), else this many tokens: chat prompts plus a few hundred tokens of output, the middle of a decode.
DEFAULT_CONTEXT = 512


@dataclass(frozen=True)
class Record:
    """The published record as the model sees it: ``cases`` (every point of every series it can
    represent), ``skipped`` ({"source/series": why the model cannot represent it}) and ``kinds`` (the rules of
    ``SKIP_KINDS`` each skipped series fails)."""

    cases: tuple[Case, ...]
    skipped: dict
    kinds: dict = dataclasses.field(default_factory=dict)  # {"source/series": [the rules it fails]}

    @property
    def anchor(self) -> np.ndarray:
        return np.array(anchors(list(self.cases)))

    @property
    def scored(self) -> np.ndarray:
        """The points a prediction is judged on: all but the anchors of anchored series."""
        return np.array([not (c.anchored and a == i) for i, (c, a) in enumerate(zip(self.cases, self.anchor,
                                                                                   strict=True))])

    def series(self) -> list[str]:
        return list(dict.fromkeys(f"{c.source}/{c.series}" for c in self.cases))


def _dataset_contexts(source) -> dict:
    """{dataset: middle context} for the series of a source that publish a context range."""
    out = {}
    for s in source.series:
        if isinstance(s.setup.get("context"), list) and s.setup.get("dataset"):
            lo, hi = s.bounds("context")
            out.setdefault(s.setup["dataset"], round((lo + hi) / 2))
    return out


# A GPU a source names without its form factor: the record's older series price a bare "H100" as the SXM part
# (eagle3_2025 "1x H100", vllm_pr16937 "H100", sglang_pr2150 "a single H100"); a series whose accelerator the
# record leaves null only for want of the form factor is priced so too, marked ``gpu_assumed``, and its error
# is reported apart (``FAMILIES``). A series that names no GPU at all stays out.
FORM_FACTORS = {"H100": ("H100-SXM", "H100-PCIe")}
ASSUME_FORM_FACTOR = True
# Targets the cost model cannot price although their config is public, and why.
UNPRICED_TARGETS = {
    "Qwen3.8-27B": "48 of its 64 layers are linear attention (Gated DeltaNet), which the cost model does not "
                   "price: each sequence carries a recurrent state of 48 heads × 128 × 128 values in each such "
                   "layer, about 75 MB in bf16, read and written by every pass (at B = 128, about 10 GB each way, "
                   "beside 54 GB of weights), and a verify pass keeps one state per drafted token to roll back",
}


def assumed_gpu(setup: dict, missing: dict) -> tuple[str, str] | None:
    """(accelerator, what was assumed) for a series whose GPU the source names without its form factor
    (``FORM_FACTORS``: a bare "H100" priced as the SXM part, as the record's older series are), or None."""
    text = f"{setup.get('accelerator_text') or ''} {missing.get('accelerator', '')}"
    if setup.get("accelerator") is not None or "form factor" not in missing.get("accelerator", ""):
        return None
    for family, (chosen, other) in FORM_FACTORS.items():
        if re.search(rf"\b{family}\b", text):
            bw = lambda name: ACCELERATORS[name].mem_bandwidth / 1e12
            return chosen, (f"'{family}' without its form factor, priced as the {chosen} ({bw(chosen):.2f} TB/s; "
                            f"the {other} has {bw(other):.2f} TB/s)")
    return None


def _load_rule(s) -> str:
    """"batch" or "concurrency" (``LOADS``) for a series whose S the model can take as a decode speedup at a
    batch, else an ``Unpriceable``: an open loop (speedups at an arrival rate), a closed loop counted per
    data-parallel rank, or a throughput that counts the prompts' tokens."""
    setup = s.setup
    if "batch" in s.columns:
        return "batch"
    if "concurrency" in s.columns:
        if "per rank" in str(setup.get("concurrency_unit") or ""):
            raise Unpriceable("parallel layout", "requests in flight per data-parallel attention rank, with the "
                                                 "experts spread over the ranks: a layout the cost model does not "
                                                 "split (it knows tensor parallelism only)")
        if re.search(r"\binput\b|\bprompt", str(setup.get("metric") or "")):
            raise Unpriceable("not a decode speedup", "a throughput that counts the prompts' tokens: its ratio "
                                                      "times prefill as much as decode")
        return "concurrency"
    if "qps" in s.columns:
        raise Unpriceable("not a decode speedup", "latencies at an arrival rate (an open loop): the batch is "
                                                  "whatever the engine's speed makes it")
    raise Unpriceable("not a speedup", "not a speedup against the batch size or the requests in flight")


def _said(why: str | None) -> str:
    """" (why)" where the record says more than that a value is not published or stated."""
    plain = re.fullmatch(r"\s*(not (published|stated)\.?)?\s*", why or "")
    return "" if plain else f" ({why})"


def _checks(source, s) -> list:
    """Every rule the series must pass (``SKIP_KINDS``), in order, each a function raising ``Unpriceable``."""
    setup = s.setup

    def target():
        if setup.get("target") in UNPRICED_TARGETS:
            raise Unpriceable("shape", f"no shape for the target {setup['target']!r}: "
                                       f"{UNPRICED_TARGETS[setup['target']]}")
        shape(setup.get("target"))

    def ngram():
        if setup.get("drafter") == "ngram":
            raise Unpriceable("n-gram", "an n-gram drafter proposes only where the prompt matches (vLLM's "
                                        "NgramProposer returns no draft otherwise), so how many tokens each verify "
                                        "pass scores is not published")

    def drafter():
        if setup.get("target") in SHAPES or setup.get("target") in SHAPE_ALIASES:
            _draft(setup, shape(setup["target"]))

    def gpu():
        accel = setup.get("accelerator")
        if accel is None and not (ASSUME_FORM_FACTOR and assumed_gpu(setup, s.missing)):
            raise Unpriceable("no GPU", "the GPU is not published" + _said(s.missing.get("accelerator")))
        if accel is not None and accel not in DEVICES:
            raise Unpriceable("GPU not in the table", f"the GPU {accel!r} is not in hardware.DEVICES")

    def layout():
        if setup.get("tp") is None:
            raise Unpriceable("parallel layout",
                              "the tensor-parallel split is not published" + _said(s.missing.get("tp")))

    def drafted():
        for p in s.points:
            point_draft(setup, p)

    def context():
        if not (isinstance(setup.get("context"), list) or "context" in s.columns) and re.search(
                r">\s*\d+\s*k", s.missing.get("context", "")):
            raise Unpriceable("context", f"its context is only bounded below ({s.missing['context']}): the KV reads "
                                         "need it")

    return [lambda: _load_rule(s), target, ngram, drafter, gpu, layout, drafted, context]


def _series_cases(source, s) -> list[Case]:
    """The cases of one series of the record, or an ``Unpriceable`` naming every rule it fails (its ``kind``: the
    first; ``kinds``: all of them)."""
    setup = s.setup
    failed = []
    for check in _checks(source, s):
        try:
            check()
        except Unpriceable as err:
            failed.append(err)
    if failed:
        err = Unpriceable(failed[0].kind, "; ".join(dict.fromkeys(str(e) for e in failed)))
        err.kinds = list(dict.fromkeys(e.kind for e in failed))
        raise err
    load = _load_rule(s)
    assumed = assumed_gpu(setup, s.missing) if setup.get("accelerator") is None else None
    if isinstance(setup.get("context"), list) or "context" in s.columns:
        context = None
    else:
        context = _dataset_contexts(source).get(setup.get("dataset"), DEFAULT_CONTEXT)
    alpha = magicdec_alpha if (source.name == "magicdec" and setup.get("target") == "Llama-3.1-8B") else None
    per_point = "mean_acceptance_length" in s.columns and all(p.get("mean_acceptance_length") for p in s.points)
    published_acceptance = (alpha is not None or per_point or isinstance(setup.get("alpha"), float)
                            or setup.get("tokens_per_iteration") is not None)
    mark = lambda cs: [replace(c, load=load, accel=assumed[0], gpu_assumed=assumed[1]) if assumed
                       else replace(c, load=load) for c in cs]
    if assumed:
        setup = {**setup, "accelerator": assumed[0]}
    if published_acceptance:
        return mark(_cases(source.name, s, setup, alpha=alpha, context=context))
    out = [replace(c, anchored=True, alpha=None) for c in _cases(source.name, s, setup, alpha=0.5, context=context)]
    groups = {}
    for c in out:
        groups.setdefault((c.k, c.widths), []).append(c)
    out = [c for members in groups.values() if len({m.batch for m in members}) > 1 for c in members]
    if not out:
        err = Unpriceable("acceptance", "no acceptance is published and no two batch sizes share a k, so no point "
                                        "can be predicted from another")
        err.kinds = ["acceptance"]
        raise err
    return mark(out)


def series_cases(source: str | None, series) -> list[Case]:
    """The cases of one published ``series`` of ``source`` (a name of ``published.names()``, or None for a
    series of no recorded source), as ``record`` admits them, or an ``Unpriceable`` naming every rule it fails."""
    from types import SimpleNamespace

    known = published.load(source) if source in published.names() else None
    return _series_cases(SimpleNamespace(name=source or "", series=known.series if known else (series,)), series)


@cache
def record() -> Record:
    """Every series of the published record with S against the batch (or the requests in flight of a closed
    loop, ``LOADS``) that the model can represent (see the module docstring), and the others with the reasons:
    ``skipped`` {series: why}, ``kinds`` {series: the rules it fails, ``SKIP_KINDS``}."""
    out, skipped, kinds = [], {}, {}
    for name in published.names():
        source = published.load(name)
        for s in source.series:
            if s.values is not None or not ({"speedup", "latency_sd"} & set(s.columns)):
                continue  # constants or other measurements, not S
            try:
                out += _series_cases(source, s)
            except Unpriceable as err:
                skipped[f"{name}/{s.id}"] = str(err)
                kinds[f"{name}/{s.id}"] = getattr(err, "kinds", [err.kind])
    return Record(tuple(out), skipped, kinds)


def published_moe_series() -> list[tuple[str, object]]:
    """(source name, series) of every published series whose target is a MoE preset (``cost.MOE_PRESETS``) and
    which gives a speedup against the batch or the requests in flight of a closed loop: what Chapter 10 draws
    beside the model where the cost model can price it (``published_curve``), and lists with the reason where
    not."""
    found = []
    for name in published.names():
        for series in published.load(name).series:
            columns = set(series.columns)
            target = series.setup.get("target")
            moe = target in cost.MOE_PRESETS or SHAPE_ALIASES.get(target, ("",))[0] in cost.MOE_PRESETS
            if (moe and "speedup" in columns
                    and columns & {"batch", "concurrency"}):
                found.append((name, series))
    return found


def published_curve(series, source: str | None = None) -> tuple[list[int], list[float], list[float] | None, str]:
    """(batches, measured S, the idealized model's S at each point or None, what the model assumed or why it has
    nothing) for a published MoE series (``published_moe_series``; ``source``: the name of the source it comes
    from). The series is read as Chapter 6 reads it (``series_cases``: the preset target, the drafter
    its setup names, MTP included, each point's own k or tree and acceptance, the closed loop's requests in
    flight as the batch); a series Chapter 6 cannot price gets None and the rules it fails. Each point is priced
    at its own settings by the idealized roofline, with no engine knobs (Chapter 6 fits and judges those); a
    series with no published acceptance is scaled to its smallest batch's measured S, as Chapter 6 anchors it."""
    key = "batch" if "batch" in series.columns else "concurrency"
    batches, measured = [int(b) for b in series.column(key)], [float(s) for s in series.column("speedup")]
    try:
        cases_ = series_cases(source, series)
    except Unpriceable as err:
        return batches, measured, None, f"no model curve: {err}"
    if [c.batch for c in cases_] != batches:
        return batches, measured, None, "no model curve: only some of its points can be predicted"
    model = predict(cases_)
    first = cases_[0]
    said = (f"acceptance anchored at B = {min(batches)}" if first.anchored else
            "each point's own tokens per iteration" if first.tokens is not None or len({c.alpha for c in cases_}) > 1
            else f"α = {first.alpha:.2f}")
    gpu = getattr(first.accel, "name", first.accel)
    assumed = f"; {first.gpu_assumed}" if first.gpu_assumed else ""
    return batches, measured, model, (f"idealized model: {said}; {gpu}, tp = {first.tp}, L = {first.context}"
                                      f"{assumed}")


def skip_summary(rec: Record | None = None) -> list[dict]:
    """What keeps series out of the record, one row per rule (``SKIP_KINDS``) that keeps any out: the series and
    points it fails, and how many of them fail it alone (the rule to lift to admit them)."""
    rec = rec or record()
    rows = []
    for kind, what in SKIP_KINDS.items():
        hit = [key for key, ks in rec.kinds.items() if kind in ks]
        if not hit:
            continue
        alone = [key for key in hit if rec.kinds[key] == [kind]]
        npoints = lambda keys: sum(len(published.load(k.split("/")[0])[k.split("/")[1]].points) for k in keys)
        rows.append({"rule": kind, "what": what, "series": len(hit), "points": npoints(hit),
                     "alone series": len(alone), "alone points": npoints(alone), "alone": alone})
    return rows
