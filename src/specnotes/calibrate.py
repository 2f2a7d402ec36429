"""Calibrations: the cost model's engine knobs fitted to a published data set, in the open (Chapter 6).

The idealized model (``cost``, per-kernel roofline, no overhead) gets the shape of S(B) right and its
level wrong. A real engine adds a fixed cost to every pass (launches, scheduling, sampling, Python),
runs small-M GEMMs below peak, overlaps memory and math less than perfectly, and pays per all-reduce.
A *calibration* is the set of ``cost`` keyword arguments (``overlap``, ``overhead``, ``draft_overhead``,
``allreduce_latency``) that makes the model match one published S(B) data set:

1. ``cases(source, series)``: each published point as the model sees it (shapes, accelerator, batch,
   k, α from the published tokens per iteration, context, draft window, tp) and the measured S.
2. ``fit(cases, free=...)``: least squares on log S over the points, for each overlap mode, keeping
   the mode with the smallest sum of squares. Log S, because a speedup is a ratio: a 10% miss counts
   the same at S = 1.2 and at S = 2, above or below.
3. ``calibration(accelerator, source)``: the fitted knobs stored in ``data/calibrations.json``, with
   what they were fitted to (a test refits and compares, so the file cannot drift from the fit).

The knobs enter every pass time additively (``overhead`` per target pass, ``draft_overhead`` per draft
pass, ``allreduce_latency`` per all-reduce), so each case's times are linear in them. ``fit`` uses
that: it prices every case once at zero and once per unit of each knob, then searches the knobs on a
grid (refined five times) with S in closed form. ``predict`` recomputes S through ``cost`` directly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import numpy as np

from specnotes import cost, published, validate
from specnotes.hardware import ACCELERATORS, Accelerator

KNOBS = ("overhead", "draft_overhead", "allreduce_latency")

# Shapes of the models the published record uses (config.json of each on the Hugging Face hub).
LLAMA_31_8B = replace(cost.LLAMA_3_8B, name="Llama-3.1-8B")  # same architecture as Llama-3-8B
LLAMA_2_7B = cost.ModelShape(32, 4096, 32, 32, 11008, 32000, name="Llama-2-7B-32K")  # multi-head KV
TINYLLAMA = cost.ModelShape(22, 2048, 32, 4, 5632, 32000, name="TinyLlama-1.1B")
# EAGLE-3's draft for Llama-3.1-8B: one Llama decoder layer and a ~32k-token draft LM head (vLLM's
# llama_eagle3.py). Its fc (3·4096 → 4096) and wider QKV input (2·4096) are left out: ~18% of its bytes.
EAGLE3_LLAMA31_8B = cost.ModelShape(1, 4096, 32, 8, 14336, 32000, name="EAGLE-3 head (Llama-3.1-8B)")
QWEN3_8B = cost.ModelShape(36, 4096, 32, 8, 12288, 151936, name="Qwen3-8B")
EAGLE3_QWEN3_8B = cost.ModelShape(1, 4096, 32, 8, 12288, 32000, name="EAGLE-3 head (Qwen3-8B)")
SHAPES = {s.name: s for s in (LLAMA_31_8B, LLAMA_2_7B, TINYLLAMA, EAGLE3_LLAMA31_8B, QWEN3_8B, EAGLE3_QWEN3_8B,
                              cost.LLAMA_3_70B)}
EAGLE3_HEADS = {LLAMA_31_8B.name: EAGLE3_LLAMA31_8B, QWEN3_8B.name: EAGLE3_QWEN3_8B}


# ---------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One published point as the model sees it, with the measured speedup."""

    label: str
    target: cost.ModelShape
    draft: cost.Draft
    accel: str | Accelerator
    batch: int
    k: int
    alpha: float
    context: int
    draft_context: int | None
    tp: int
    measured: float

    def speedup(self, **knobs) -> float:
        return cost.batch_speedup(self.target, self.draft, self.accel, self.batch, self.k, self.alpha, self.context,
                                  draft_context=self.draft_context, tp=self.tp, **knobs)


def magicdec_alpha(context: int) -> float:
    """MagicDec's published acceptance rate (Llama-3.1-8B self-speculation, StreamingLLM budget 512) at
    ``context`` tokens, interpolated linearly between the table's columns (24,000 has no column)."""
    table = published.load("magicdec")["acceptance_llama31_budget512"]
    xs, ys = table.column("context"), table.column("alpha")
    context = validate.number("context", context, low=xs[0], high=xs[-1])
    return float(np.interp(context, xs, ys))


def _draft(setup: dict, target: cost.ModelShape):
    kind = setup.get("drafter")
    if kind == "self-speculation":
        return target
    if kind == "eagle3-head" and target.name in EAGLE3_HEADS:
        return EAGLE3_HEADS[target.name]
    if kind == "draft-model" and setup.get("draft") in SHAPES:
        return SHAPES[setup["draft"]]
    if kind == "ngram":
        return cost.NGRAM
    raise validate.BadArgument(f"no draft shape for drafter {kind!r} (draft {setup.get('draft')!r}) on {target.name}")


def cases(source: str, series: str, alpha=None, context: int | None = None,
          draft_context: int | None = None) -> list[Case]:
    """The points of ``published.load(source)[series]`` as model inputs.

    α: ``alpha`` (a number, or a function of the context) if given, else the setup's ``alpha``, else
    the one whose E[N] is the setup's ``tokens_per_iteration``. Context: a ``context`` column if the
    points have one, else ``context``, else the middle of the setup's range (the mean context while
    decoding, when the range runs from prompt to prompt + output). k likewise (column, then setup).
    ``draft_context``: the draft's own KV length, default the setup's (the top of a range).
    """
    s = published.load(source)[series]
    setup = s.setup
    target = SHAPES.get(setup.get("target"))
    if target is None:
        raise validate.BadArgument(f"no shape for target {setup.get('target')!r}; known: {', '.join(SHAPES)}")
    draft = _draft(setup, target)
    if draft_context is None and isinstance(setup.get("draft_context"), int | list):
        draft_context = int(s.bounds("draft_context")[1])
    out = []
    for p in s.points:
        k = int(p["k"]) if "k" in p else int(setup["k"])
        ctx = int(p["context"]) if "context" in p else context
        if ctx is None:
            lo, hi = s.bounds("context")
            ctx = round((lo + hi) / 2)
        if alpha is not None:
            a = alpha(ctx) if callable(alpha) else validate.probability("alpha", alpha)
        elif isinstance(setup.get("alpha"), float):
            a = setup["alpha"]
        elif setup.get("tokens_per_iteration") is not None:
            a = cost.implied_alpha(setup["tokens_per_iteration"], k)
        else:
            raise validate.BadArgument(f"{series} publishes neither alpha nor tokens per iteration: pass alpha=")
        label = ", ".join(f"{c}={p[c]:g}" for c in s.columns if c != "speedup")
        out.append(Case(label, target, draft, setup["accelerator"], int(p["batch"]), k, a, ctx, draft_context,
                        int(setup.get("tp", 1)), float(p["speedup"])))
    return out


def predict(cases_: list[Case], **knobs) -> list[float]:
    """The model's S for each case with these ``cost`` keyword arguments (overlap, overheads, ...)."""
    return [c.speedup(**knobs) for c in cases_]


def residuals(cases_: list[Case], **knobs) -> list[float]:
    """model / measured − 1 for each case."""
    return [row["residual"] for row in compare(cases_, **knobs)]


def compare(cases_: list[Case], **knobs) -> list[dict]:
    """One row per case: the point, the measured S, the model's S with these knobs, the residual."""
    return [{"point": c.label, "measured": c.measured, "model": m, "residual": m / c.measured - 1}
            for c, m in zip(cases_, predict(cases_, **knobs), strict=True)]


def vary(cases_: list[Case], **changes) -> list[Case]:
    """The same cases with some inputs changed (``vary(cases, draft_context=None)``: the draft reads the
    whole cache; ``vary(cases, tp=1)``; ``vary(cases, accel=derated("A100-80GB", 0.5))``)."""
    fields = {f.name for f in dataclasses.fields(Case)} - {"label", "measured"}
    for name in changes:
        validate.choice("input to vary", name, sorted(fields))
    return [replace(c, **changes) for c in cases_]


def curve(case: Case, batches, **knobs) -> list[float]:
    """The model's S(B) over ``batches`` for the setup of ``case`` (everything but the batch kept)."""
    return [replace(case, batch=validate.integer("batch", b, low=1)).speedup(**knobs) for b in batches]


def derated(accel, efficiency: float):
    """``accel`` with every FLOP/s peak multiplied by ``efficiency`` (achieved / datasheet): a what-if
    for GEMMs and attention that run below peak. Not a calibration knob of ``cost``."""
    accel = cost.accelerator(accel)
    efficiency = validate.number("efficiency", efficiency, low=0, high=1, low_open=True)
    return replace(accel, name=f"{accel.name} at {efficiency:.0%} of peak",
                   peak_flops={k: v * efficiency for k, v in accel.peak_flops.items()})


def efficiency_scan(cases_: list[Case], efficiencies, **fit_kwargs) -> list[dict]:
    """Refit ``cases_`` with the accelerator's peaks scaled by each efficiency: how much of a residual a
    compute shortfall explains. One row per efficiency: the knobs fitted and the rms log error."""
    rows = []
    for e in efficiencies:
        f = fit([replace(c, accel=derated(c.accel, e)) for c in cases_], **fit_kwargs)
        rows.append({"efficiency": e, "rms_log": f.rms_log, **f.knobs})
    return rows


def tree_speedup(target: cost.ModelShape, draft: cost.ModelShape, accel, batch: int, depth: int, branching: int,
                 verified: int, tokens: float, context: int = 0, tp: int = 1, overlap: str = "kernel",
                 overhead: float = 0.0, draft_overhead: float | None = None, allreduce_latency: float = 0.0) -> float:
    """S of tree speculation: ``depth`` draft passes (the first over 1 token per sequence, the others over
    ``branching`` candidates), then one target pass over the ``verified`` tree tokens plus the bonus
    position, yielding ``tokens`` per iteration on average (published; no i.i.d. α for a tree).

    S = tokens · T_target(B, 1) / (Σ_levels T_draft(B, n_level) + T_target(B, verified + 1)). A chain is
    ``branching=1, verified=depth``: then this is ``cost.batch_speedup`` at the α with E[N] = tokens.
    """
    depth = validate.integer("depth", depth, low=1)
    branching = validate.integer("branching", branching, low=1)
    verified = validate.integer("verified", verified, low=depth)
    tokens = validate.number("tokens", tokens, low=1, high=verified + 1)
    common = dict(overlap=overlap, tp=tp, allreduce_latency=allreduce_latency)
    t_draft = overhead if draft_overhead is None else draft_overhead
    plain = cost.pass_time(target, accel, batch, 1, context, overhead=overhead, **common)
    verify = cost.pass_time(target, accel, batch, verified + 1, context, overhead=overhead, **common)
    drafting = sum(cost.pass_time(draft, accel, batch, 1 if level == 0 else branching, context + level,
                                  overhead=t_draft, **common) for level in range(depth))
    return tokens * plain / (drafting + verify)


def predictor_pass_time(batch: int, new_tokens: int, context: int) -> float:
    """A target pass as SpecDecode-Bench's own fitted H100 model prices it (simulator ``predictor.py``):
    c_kv·(cached tokens in the batch) + c_compute·(tokens processed) + c_fixed, plus the per-step overhead
    the simulator adds to every engine step. Seconds; B sequences × n new tokens after L cached ones."""
    batch = validate.integer("batch", batch, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    context = validate.integer("context", context, low=0)
    v = published.load("specdecode_bench")["predictor_llama8b_h100"].values
    return (v["target_c_kv"] * batch * context + v["target_c_compute"] * batch * new_tokens + v["target_c_fixed"]
            + v["overhead_constant_per_step"])


# ---------------------------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class Fit:
    """A fitted calibration: ``knobs`` (pass them to any ``cost`` time function), the fit's quality,
    and the best fit of every overlap mode tried (so a reader sees why this mode)."""

    knobs: dict
    free: tuple[str, ...]
    rms_log: float
    cases: tuple[Case, ...]
    predicted: tuple[float, ...]
    by_overlap: dict

    @property
    def residuals(self) -> list[float]:
        return [m / c.measured - 1 for m, c in zip(self.predicted, self.cases, strict=True)]

    def rows(self) -> list[dict]:
        """One row per point: what was measured, what the calibrated model says, the residual."""
        return compare(list(self.cases), **self.knobs)


def _linear_parts(cases_: list[Case], overlap: str, fixed: dict, names: tuple[str, ...]):
    """Per case: E[N], plain-decode and iteration times at the fixed knobs, and their change per unit
    of each free knob (exact: the knobs add to pass times)."""
    def times(**knobs):
        both = {**fixed, **knobs}
        kw = dict(overlap=overlap, overhead=both.get("overhead", 0.0),
                  allreduce_latency=both.get("allreduce_latency", 0.0))
        plain = np.array([cost.pass_time(c.target, c.accel, c.batch, 1, c.context, tp=c.tp, **kw) for c in cases_])
        it = np.array([cost.iteration_time(c.target, c.draft, c.accel, c.batch, c.k, c.context,
                                           draft_overhead=both.get("draft_overhead", kw["overhead"]),
                                           draft_context=c.draft_context, tp=c.tp, **kw) for c in cases_])
        return plain, it
    zero = {n: 0.0 for n in names}
    plain0, iter0 = times(**zero)
    unit = {n: tuple(t - t0 for t, t0 in zip(times(**{**zero, n: 1.0}), (plain0, iter0), strict=True)) for n in names}
    en = np.array([cost.expected_tokens(c.alpha, c.k) for c in cases_])
    return en, plain0, iter0, unit


def _search(en, plain0, iter0, unit, names, measured, bounds):
    """Grid search of sum((log S_model − log S_measured)²), refined five times around the best."""
    log_measured = np.log(measured)
    lo = np.array([bounds[n][0] for n in names], float)
    hi = np.array([bounds[n][1] for n in names], float)
    steps = {1: 401, 2: 81, 3: 25}[len(names)]
    for _ in range(6):
        axes = [np.linspace(a, b, steps) for a, b in zip(lo, hi, strict=True)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(names))
        plain = plain0[None, :] + sum(grid[:, [i]] * unit[n][0][None, :] for i, n in enumerate(names))
        it = iter0[None, :] + sum(grid[:, [i]] * unit[n][1][None, :] for i, n in enumerate(names))
        sse = ((np.log(en[None, :] * plain / it) - log_measured[None, :]) ** 2).sum(1)
        best = grid[np.argmin(sse)]
        span = (hi - lo) / (steps - 1) * 4
        lo, hi = np.maximum(lo, best - span), np.minimum(hi, best + span)
        lo = np.maximum(lo, [bounds[n][0] for n in names])
    return best, float(sse.min())


def fit(cases_: list[Case], free: tuple[str, ...] = ("overhead", "draft_overhead"), overlaps=cost.OVERLAPS,
        fixed: dict | None = None, bounds: dict | None = None) -> Fit:
    """Fit the ``free`` knobs (1 to 3 of overhead, draft_overhead, allreduce_latency; seconds) to the
    cases' measured S by least squares on log S, for each overlap mode in ``overlaps``; keep the best.

    Knobs that add the same constant to the same passes cannot be told apart: at a fixed tp every pass
    of a full model makes 2·n_layers all-reduces, so ``allreduce_latency`` only moves the per-pass sums
    overhead + 2·n_layers·latency. Fix it from a measurement (``fixed=``) and fit the overheads.

    ``fixed``: knobs held at a given value (a sourced all-reduce latency, say). ``bounds``: (low, high)
    seconds per free knob; default 0 to 20 ms for overheads and 0 to 100 µs for the all-reduce latency.
    """
    cases_ = list(cases_)
    if not cases_:
        raise validate.BadArgument("fit needs at least one case")
    free = tuple(free)
    if not 1 <= len(free) <= 3 or len(set(free)) != len(free):
        raise validate.BadArgument(f"free must name 1 to 3 distinct knobs of {KNOBS}; got {free}")
    for name in free:
        validate.choice("free knob", name, KNOBS)
    fixed = dict(fixed or {})
    for name, value in fixed.items():
        validate.choice("fixed knob", name, KNOBS)
        validate.number(name, value, low=0)
        if name in free:
            raise validate.BadArgument(f"{name} is both free and fixed")
    overlaps = [validate.choice("overlap", o, cost.OVERLAPS) for o in overlaps]
    default = {"overhead": (0.0, 0.02), "draft_overhead": (0.0, 0.02), "allreduce_latency": (0.0, 1e-4)}
    bounds = {**default, **(bounds or {})}
    measured = np.array([c.measured for c in cases_])
    by_overlap = {}
    for overlap in overlaps:
        en, plain0, iter0, unit = _linear_parts(cases_, overlap, fixed, free)
        best, sse = _search(en, plain0, iter0, unit, free, measured, bounds)
        knobs = {"overlap": overlap, **fixed, **{n: float(v) for n, v in zip(free, best, strict=True)}}
        by_overlap[overlap] = {"knobs": knobs, "rms_log": math.sqrt(sse / len(cases_))}
    overlap = min(by_overlap, key=lambda o: by_overlap[o]["rms_log"])
    knobs = by_overlap[overlap]["knobs"]
    return Fit(knobs, free, by_overlap[overlap]["rms_log"], tuple(cases_), tuple(predict(cases_, **knobs)), by_overlap)


# ---------------------------------------------------------------------------------------------- stored


@cache
def _stored() -> dict:
    path = resources.files("specnotes").joinpath("data", "calibrations.json")
    return json.loads(path.read_text(encoding="utf-8"))


def calibrations() -> dict:
    """Every stored calibration: {accelerator: {source: record}}, each record with its knobs, what it
    was fitted to (source, series, fixed knobs, free knobs) and how well it fits."""
    return {k: v for k, v in json.loads(json.dumps(_stored())).items() if k != "about"}


def calibration(accelerator_name: str, source: str) -> dict:
    """The ``cost`` keyword arguments fitted to the published data set ``source`` on ``accelerator_name``.

        knobs = cost.calibration("H100-SXM", "specdecode_bench")
        cost.batch_speedup(target, draft, "H100-SXM", 64, 3, 0.62, 720, **knobs)

    Returns a new dict (overlap, overhead, draft_overhead, and allreduce_latency where fitted or fixed).
    """
    validate.choice("accelerator_name", accelerator_name, ACCELERATORS)
    stored = {k: v for k, v in _stored().items() if k != "about"}
    if accelerator_name not in stored:
        raise validate.BadArgument(f"no calibration for {accelerator_name}; calibrated: {', '.join(stored)}")
    validate.choice(f"source (calibrated on {accelerator_name})", source, stored[accelerator_name])
    return dict(stored[accelerator_name][source]["knobs"])


# How each stored calibration is fitted: the data set, the free and fixed knobs, and α. ``refit`` runs
# one; ``python -m specnotes.calibrate --write`` rewrites data/calibrations.json from all of them.
RECIPES = {
    ("H100-SXM", "specdecode_bench"): {
        "series": "fig1c_eagle3", "free": ("overhead", "draft_overhead"), "fixed": {},
        "alpha": "from the published tokens per iteration (2.2548 at k = 3)",
        "why": "Fig. 1(c): the book's headline setup (Llama-3.1-8B, EAGLE-3, k = 3, one H100, vLLM 0.10.1)"},
    ("A100-80GB", "magicdec"): {
        "series": "fig6c_llama31_selfspec_a100", "free": ("overhead", "draft_overhead"),
        "fixed": {"allreduce_latency": 10e-6},
        "alpha": "MagicDec's acceptance table (budget 512) by context, linear between its columns",
        "why": "Figure 6(c): 20 points over context 4k-100k and batch 32-256, 8-way tensor parallel",
        "fixed_source": "allreduce_latency: ~10 us, vLLM's custom all-reduce at tp = 8 for small messages "
                        "(interconnect.json, allreduce_h100_vllm_custom; an H100 measurement: no A100 one was found)"},
}


def recipe_cases(accelerator_name: str, source: str) -> list[Case]:
    """The cases a stored calibration is fitted to."""
    recipe = RECIPES[(accelerator_name, source)]
    alpha = magicdec_alpha if source == "magicdec" else None
    return cases(source, recipe["series"], alpha=alpha)


def refit(accelerator_name: str, source: str) -> Fit:
    """Run the fit a stored calibration came from (see ``RECIPES``)."""
    key = (accelerator_name, source)
    if key not in RECIPES:
        raise validate.BadArgument(f"no recipe for {key}; known: {sorted(RECIPES)}")
    recipe = RECIPES[key]
    return fit(recipe_cases(*key), free=recipe["free"], fixed=recipe["fixed"])


def _record(key, f: Fit) -> dict:
    recipe = RECIPES[key]
    knobs = {k: (v if isinstance(v, str) else float(f"{v:.4g}")) for k, v in f.knobs.items()}
    return {
        "knobs": knobs,
        "fitted_to": {"source": key[1], "series": recipe["series"], "free": list(recipe["free"]),
                      "fixed": recipe["fixed"], "alpha": recipe["alpha"], "why": recipe["why"],
                      **({"fixed_source": recipe["fixed_source"]} if "fixed_source" in recipe else {})},
        "method": "specnotes.calibrate.fit: least squares on log S over the series' points, overlap chosen "
                  "from kernel/pass/none by the smallest sum of squares",
        "rms_log": float(f"{f.rms_log:.4g}"),
        "residuals": {r["point"]: float(f"{r['residual']:.4g}") for r in f.rows()},
        "by_overlap": {o: {"rms_log": float(f"{v['rms_log']:.4g}"),
                           **{k: float(f"{x:.4g}") for k, x in v["knobs"].items() if k in f.free}}
                       for o, v in f.by_overlap.items()},
    }


def write_calibrations(path=None) -> dict:
    """Refit every recipe and write data/calibrations.json (or ``path``)."""
    out = {}
    for key in RECIPES:
        out.setdefault(key[0], {})[key[1]] = _record(key, refit(*key))
    doc = {"about": "cost-model knobs fitted to published data sets: specnotes.calibrate (RECIPES, fit); "
                    "regenerate with python -m specnotes.calibrate --write", **out}
    path = path or resources.files("specnotes").joinpath("data", "calibrations.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    _stored.cache_clear()
    return doc


def main(argv: list[str] | None = None) -> int:
    """``python -m specnotes.calibrate [--write]``: refit every stored calibration (``RECIPES``) and print
    the knobs; ``--write`` also rewrites data/calibrations.json. Anything else exits with status 2."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m specnotes.calibrate",
                                     description="Refit every stored calibration and print the knobs.")
    parser.add_argument("--write", action="store_true", help="rewrite data/calibrations.json with the fits")
    args = parser.parse_args(argv)
    if args.write:
        doc = write_calibrations()
        records = [(a, s, r) for a, by_source in doc.items() if a != "about" for s, r in by_source.items()]
    else:
        records = [(a, s, _record((a, s), refit(a, s))) for a, s in RECIPES]
    for accel, source, record in records:
        print(accel, source, record["knobs"], "rms log error", record["rms_log"])
    print("written to data/calibrations.json" if args.write else
          "not written (--write rewrites data/calibrations.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
