"""The model's S for cases at given ``cost`` knobs (``predict``; an anchored case takes its acceptance from its
series' smallest batch, ``anchors``), its residuals, what-ifs (``vary``, ``curve``, ``derated``), the S of tree
speculation and SpecDecode-Bench's own pass model."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from specnotes import validate
from specnotes.analytic import cost
from specnotes.record import published
from specnotes.record.calibrate.points import Case


def predict(cases_: list[Case], **knobs) -> list[float]:
    """The model's S for each case with these ``cost`` keyword arguments (overlap, overheads, ...). An anchored
    case takes its acceptance from its group's smallest batch (``anchors``), which must be among ``cases_``."""
    cases_ = list(cases_)
    if not any(c.anchored for c in cases_):
        return [c.speedup(**knobs) for c in cases_]
    ratios = [c.ratio(**knobs) for c in cases_]
    anchor = anchors(cases_)
    return [cases_[a].measured * r / ratios[a] if c.anchored else c.expected() * r
            for c, r, a in zip(cases_, ratios, anchor, strict=True)]


def anchors(cases_: list[Case]) -> list[int]:
    """For each case, the index of the case whose measured S fixes its acceptance: for an anchored case the
    smallest batch of its series at the same k (and tree); for any other case itself."""
    groups: dict = {}
    for i, c in enumerate(cases_):
        if c.anchored:
            groups.setdefault((c.source, c.series, c.k, c.widths), []).append(i)
    out = list(range(len(cases_)))
    for members in groups.values():
        first = min(members, key=lambda i: (cases_[i].batch, i))
        for i in members:
            out[i] = first
    return out


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
    fields_ = {f.name for f in dataclasses.fields(Case)} - {"label", "measured"}
    for name in changes:
        validate.choice("input to vary", name, sorted(fields_))
    return [replace(c, **changes) for c in cases_]


def curve(case: Case, batches, **knobs) -> list[float]:
    """The model's S(B) over ``batches`` for the setup of ``case`` (everything but the batch kept; an
    anchored case needs its E[N]: use ``replace(case, tokens=..., anchored=False)``)."""
    return [replace(case, batch=validate.integer("batch", b, low=1)).speedup(**knobs) for b in batches]


def derated(accel, efficiency: float):
    """``accel`` with every FLOP/s peak multiplied by ``efficiency`` (achieved / datasheet): a what-if
    for GEMMs and attention that run below peak. Not a calibration knob of ``cost``."""
    accel = cost.accelerator(accel)
    efficiency = validate.number("efficiency", efficiency, low=0, high=1, low_open=True)
    return replace(accel, name=f"{accel.name} at {efficiency:.0%} of peak",
                   peak_flops={k: v * efficiency for k, v in accel.peak_flops.items()})


def tree_speedup(target: cost.ModelShape, draft, accel, batch: int, depth: int, branching: int,
                 verified: int, tokens: float, context: int = 0, tp: int = 1, overlap: str = "kernel",
                 overhead: float = 0.0, draft_overhead: float | None = None, allreduce_latency: float = 0.0,
                 layer_overhead: float = 0.0) -> float:
    """S of tree speculation: ``depth`` draft levels (the first over 1 token per sequence, the others over
    ``branching`` candidates), then one target pass over the ``verified`` tree tokens plus the bonus
    position, yielding ``tokens`` per iteration on average (published; no i.i.d. α for a tree):
    ``cost.tree_speedup`` with widths (1, branching, ..., branching). A chain is ``branching=1,
    verified=depth``: then this is ``cost.batch_speedup`` at the α with E[N] = tokens.
    """
    depth = validate.integer("depth", depth, low=1)
    branching = validate.integer("branching", branching, low=1)
    return cost.tree_speedup(target, draft, accel, batch, (1,) + (branching,) * (depth - 1), verified, tokens,
                             context, tp=tp, overlap=overlap, overhead=overhead, draft_overhead=draft_overhead,
                             allreduce_latency=allreduce_latency, layer_overhead=layer_overhead)


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
