"""The seconds of a pass on an accelerator: its kernels' roofline times combined per ``overlap`` (``OVERLAPS``),
the all-reduces over the link and the engine's fixed costs (``roofline_time``, ``pass_time``, ``decode_summary``);
``Pass`` and ``_Engine``, one pass of an iteration and the knobs all its passes share."""

from __future__ import annotations

from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic.cost.kernels import Kernel, PassCost, _check_pass, _forward, decode_cost
from specnotes.analytic.cost.shapes import ModelShape
from specnotes.analytic.hardware import DTYPE_BYTES, Accelerator, accelerator, usable_dtype

OVERLAPS = ("kernel", "pass", "none")


def _math_dtype(accel: Accelerator, dtype: str | None, compute: str | None) -> str:
    """The dtype whose peak a pass runs at: the shape's own (``compute``; bf16 falls back to fp16 where
    there is no bf16 peak, the T4), or an explicit ``dtype``, which must agree with it and exist here."""
    if dtype is None:
        return usable_dtype(accel, compute or "bf16")
    validate.choice("dtype", dtype, DTYPE_BYTES)
    if compute is not None and dtype != compute and usable_dtype(accel, compute) != dtype:
        raise validate.BadArgument(f"dtype={dtype!r} disagrees with the model's math dtype {compute!r}; "
                                   f"use shape.in_dtype({dtype!r}) (or leave dtype out)")
    accel.peak(dtype)  # raises, naming the dtypes this accelerator has
    return dtype


def _seconds(kernels, accel: Accelerator, peak: float, overlap: str, latency: float, slowdown: float = 0.0) -> float:
    """Roofline seconds of a pass's kernels (no overhead); the all-reduces never overlap. ``slowdown``: the experts'
    grouped GEMM (a kernel named "experts") computes at 1/(1 + slowdown) of the peak (``expert_slowdown``)."""
    memory = [k.bytes / accel.mem_bandwidth for k in kernels if k.flops or k.bytes]
    compute = [k.flops / peak * (1 + slowdown if k.name == "experts" else 1) for k in kernels if k.flops or k.bytes]
    if overlap == "kernel":
        t = sum(map(max, memory, compute))
    elif overlap == "pass":
        t = max(sum(memory), sum(compute))
    else:
        t = sum(memory) + sum(compute)
    calls = sum(k.calls for k in kernels)
    if calls:
        if not accel.link_bandwidth:
            raise validate.BadArgument(f"{accel.name} has no link bandwidth in the table: tp > 1 needs one")
        t += sum(k.link_bytes for k in kernels) / (accel.link_bandwidth / 2) + calls * latency
    return t


def roofline_time(cost: PassCost, accel: Accelerator | str, dtype: str | None = None, overhead: float = 0.0,
                  overlap: str = "kernel", allreduce_latency: float = 0.0,
                  draft_overhead: float | None = None, layer_overhead: float = 0.0,
                  expert_slowdown: float = 0.0) -> float:
    """Seconds for one pass: the kernels' roofline times combined per ``overlap`` (see the module
    docstring), plus the all-reduces (link bytes at half the datasheet link bandwidth, which counts
    both directions, plus ``allreduce_latency`` per call), plus ``overhead``, plus ``layer_overhead`` for
    each decoder layer the pass runs (``cost.layers``: set by ``forward_cost``; 0 for a bare kernel).
    ``expert_slowdown``: a MoE's grouped expert GEMM computes at 1/(1 + expert_slowdown) of the peak (a
    calibration's; the idealized model's is 0).

    ``draft_overhead`` is checked and otherwise unused (one pass of the target pays ``overhead``), so that a
    calibration, ``**calibrate.calibration(...)``, can be passed to every time function alike."""
    accel = accelerator(accel)
    peak = accel.peak(_math_dtype(accel, dtype, cost.compute))
    overhead = validate.number("overhead", overhead, low=0)
    overlap = validate.choice("overlap", overlap, OVERLAPS)
    latency = validate.number("allreduce_latency", allreduce_latency, low=0)
    layer = validate.number("layer_overhead", layer_overhead, low=0)
    slow = validate.number("expert_slowdown", expert_slowdown, low=0)
    if draft_overhead is not None:
        validate.number("draft_overhead", draft_overhead, low=0)
    return _seconds(cost.parts, accel, peak, overlap, latency, slow) + overhead + layer * cost.layers


@dataclass(frozen=True)
class Pass:
    """One pass of an iteration as the time model sees it: its kernels (per device), the decoder layers it
    runs (each pays ``layer_overhead``), whether it is a draft pass (pays ``draft_overhead``; a target pass
    pays ``overhead``) and the dtype its math runs in (None: the accelerator's bf16, or fp16 on a T4)."""

    kernels: tuple[Kernel, ...]
    layers: int
    draft: bool
    compute: str | None
    dtype: str | None = None  # an explicit dtype asked for (checked against ``compute``)
    host: float = 0.0  # seconds of host (CPU) work the pass waits for: a suffix drafter's lookups (Chapter 11)


@dataclass(frozen=True)
class _Engine:
    """The model's knobs, checked once: what every pass of one speedup calculation shares."""

    accel: Accelerator
    dtype: str | None
    overhead: float
    draft_overhead: float
    overlap: str
    tp: int
    latency: float
    layer: float = 0.0
    slowdown: float = 0.0  # expert_slowdown: the experts' GEMM at 1/(1 + slowdown) of the peak

    def seconds(self, shape: ModelShape, batch: int, new_tokens: int, context: int, overhead: float,
                dtype: str | None = None) -> float:
        peak = self.accel.peak(_math_dtype(self.accel, dtype, shape.compute))
        kernels = _forward(shape, batch, new_tokens, context, self.tp)
        return (_seconds(kernels, self.accel, peak, self.overlap, self.latency, self.slowdown) + overhead
                + self.layer * shape.n_layers)

    def pass_seconds(self, p: Pass) -> float:
        fixed = self.draft_overhead if p.draft else self.overhead
        if not p.kernels:  # an n-gram lookup: its overhead only (and a host lookup's time)
            return fixed + p.host
        peak = self.accel.peak(_math_dtype(self.accel, p.dtype, p.compute))
        return _seconds(p.kernels, self.accel, peak, self.overlap, self.latency, self.slowdown) + fixed + \
            self.layer * p.layers


def _engine(accel, dtype=None, overhead=0.0, draft_overhead=None, overlap="kernel", tp=1,
            allreduce_latency=0.0, layer_overhead=0.0, expert_slowdown=0.0) -> _Engine:
    overhead = validate.number("overhead", overhead, low=0)
    draft_overhead = overhead if draft_overhead is None else validate.number("draft_overhead", draft_overhead, low=0)
    return _Engine(accelerator(accel), dtype, overhead, draft_overhead, validate.choice("overlap", overlap, OVERLAPS),
                   validate.integer("tp", tp, low=1), validate.number("allreduce_latency", allreduce_latency, low=0),
                   validate.number("layer_overhead", layer_overhead, low=0),
                   validate.number("expert_slowdown", expert_slowdown, low=0))


def pass_time(shape: ModelShape, accel, batch: int, new_tokens: int, context: int = 0, dtype: str | None = None,
              overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
              draft_overhead: float | None = None, layer_overhead: float = 0.0, expert_slowdown: float = 0.0) -> float:
    """Seconds for one pass of ``shape`` (B sequences × n new tokens after L cached ones) on tp devices.
    A target pass pays ``overhead`` and ``layer_overhead`` per layer; ``draft_overhead`` is accepted (and
    checked) so a calibration passes whole."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    return eng.seconds(shape, batch, new_tokens, context, eng.overhead, dtype)


def decode_summary(shape: ModelShape, accel, batch: int, context: int = 0, dtype: str | None = None,
                   overhead: float = 0.0, overlap: str = "kernel", draft_overhead: float | None = None,
                   layer_overhead: float = 0.0, allreduce_latency: float = 0.0, expert_slowdown: float = 0.0) -> dict:
    """One row of a decode-step table: intensity, step time, per-token time, tokens/s, which roof binds
    (the roof is the roofline's; ``overhead`` and ``layer_overhead`` add to the step time)."""
    accel = accelerator(accel)
    c = decode_cost(shape, batch, context)
    t = roofline_time(c, accel, dtype, overhead, overlap, allreduce_latency, draft_overhead=draft_overhead,
                      layer_overhead=layer_overhead, expert_slowdown=expert_slowdown)
    ridge = accel.ridge(_math_dtype(accel, dtype, shape.compute))
    return {"B": batch, "AI (FLOP/byte)": c.intensity, "step ms": 1e3 * t, "ms per token": 1e3 * t / batch,
            "tokens/s": batch / t, "bound": "memory" if c.intensity < ridge else "compute"}
