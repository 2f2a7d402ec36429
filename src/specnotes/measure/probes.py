"""This device's measured roofs: copy bandwidth, GEMM peak, the overhead floor, decode-GEMM sweeps,
and the knee of a time-vs-batch curve.

Introduced in Chapter 1 (``01_roofline_decode``). Every probe times through ``measure.timing.time_fn``
and returns ``measure.records.Record``\\ s. Units: seconds, bytes, FLOPs; bandwidth in bytes/s
(``gb_per_s`` is decimal GB/s, 1 GB = 1e9 bytes).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from specnotes import validate
from specnotes.analytic.cost import gemm_cost
from specnotes.measure.devices import Sizes, as_dtype, dtype_name, resolve, sizes_for
from specnotes.measure.dtypes import default_dtype
from specnotes.measure.records import Record, rates
from specnotes.measure.timing import doubling_sweep, time_fn


def copy_bandwidth(device=None, nbytes: int | None = None, dtype: torch.dtype | str = torch.float32, *,
                   warmup: int | None = None, repeats: int | None = None, timer=None) -> Record:
    """Memory bandwidth from ``dst.copy_(src)`` of a buffer several times the last-level cache
    (``nbytes`` from ``sizes_for`` unless given).

    Bytes counted: ``2 * nbytes`` (each byte read once and written once, as STREAM counts). CPUs
    without streaming stores also read the destination before writing it (write-allocate), so the
    true DRAM traffic can be 3x; we do not count it, which makes this a conservative roof (a kernel
    that only reads, such as a GEMV, can stream up to 1.5x faster). ``extra``: ``bytes`` moved per
    copy, ``bytes_per_s``, ``gb_per_s``.
    """
    dev = resolve(device)
    sizes = sizes_for(dev)
    nbytes = sizes.copy_bytes if nbytes is None else validate.integer("nbytes", nbytes, low=1)
    dt = as_dtype(dtype)
    numel = max(1, nbytes // dt.itemsize)
    src = torch.ones(numel, dtype=dt, device=dev)
    dst = torch.empty_like(src)
    timing = time_fn(lambda: dst.copy_(src), warmup=sizes.warmup if warmup is None else warmup,
                     repeats=sizes.repeats if repeats is None else repeats, device=dev, budget_s=sizes.budget_s,
                     timer=timer, min_s=sizes.min_s)
    moved = 2 * numel * dt.itemsize
    bw = moved / timing.median
    return Record.from_timing("copy", {"nbytes": numel * dt.itemsize}, timing, dev, dt,
                              {"bytes": moved, "bytes_per_s": bw, "gb_per_s": bw / 1e9})


def _matmul_record(x: torch.Tensor, wt: torch.Tensor, y: torch.Tensor, sizes: Sizes, warmup: int,
                   repeats: int, name: str = "matmul") -> Record:
    batch, d_in = x.shape
    d_out = wt.shape[1]
    timing = time_fn(lambda: torch.mm(x, wt, out=y), warmup=warmup, repeats=repeats, device=x.device,
                     budget_s=sizes.budget_s, min_s=sizes.min_s)
    # FLOPs = 2·B·d_in·d_out; bytes = weight read once + x read + y written (cost.gemm_cost, one source of truth)
    cost = gemm_cost(batch, d_in, d_out, weight_bytes=x.dtype.itemsize)
    return Record.from_timing(name, {"batch": batch, "d_in": d_in, "d_out": d_out}, timing, x.device, x.dtype,
                              rates(cost.flops, cost.bytes, timing.median, batch))


def _weight(d_in: int, d_out: int, dt: torch.dtype, dev: torch.device) -> torch.Tensor:
    """``W.T`` as a view of a ``[d_out, d_in]`` weight: the layout of ``nn.Linear``, which ``F.linear``
    multiplies as ``x @ W.T`` too (a contiguous ``[d_in, d_out]`` copy can hit a far slower bf16 CPU path)."""
    return (torch.randn(d_out, d_in, device=dev, dtype=torch.float32) * d_in**-0.5).to(dt).t()


def matmul_time(batch: int, d_in: int | None = None, d_out: int | None = None, dtype=None, device=None, *,
                warmup: int | None = None, repeats: int | None = None) -> Record:
    """Time one decode-style GEMM ``y = x[B, d_in] @ W.T`` (weight ``[d_out, d_in]``, as ``nn.Linear``;
    output preallocated so the allocator is not timed). Sizes and dtype default to ``sizes_for`` /
    ``default_dtype`` for the device. ``extra``: flops, bytes (``cost.gemm_cost``), intensity,
    flops_per_s, bytes_per_s, gb_per_s, per_token_s."""
    return matmul_sweep([batch], d_in, d_out, dtype, device, progress=False, warmup=warmup, repeats=repeats)[0]


def matmul_sweep(batches: Sequence[int] | None = None, d_in: int | None = None, d_out: int | None = None,
                 dtype=None, device=None, progress: bool = True, *, warmup: int | None = None,
                 repeats: int | None = None) -> list[Record]:
    """:func:`matmul_time` at each batch size (default ``sizes_for(device).batches``), sharing one
    weight; shows a tqdm progress bar unless ``progress=False``."""
    from tqdm.auto import tqdm

    dev = resolve(device)
    sizes = sizes_for(dev)
    batches = validate.integers("batches", sizes.batches if batches is None else batches, low=1)
    d_in = validate.integer("d_in", sizes.d_in if d_in is None else d_in, low=1)
    d_out = validate.integer("d_out", sizes.d_out if d_out is None else d_out, low=1)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    warmup = sizes.warmup if warmup is None else warmup
    repeats = sizes.repeats if repeats is None else repeats
    wt = _weight(d_in, d_out, dt, dev)
    records = []
    bar = tqdm(batches, desc=f"matmul {d_in}x{d_out} {dtype_name(dt)}", disable=not progress)
    for b in bar:
        x = torch.randn(b, d_in, device=dev, dtype=dt)
        y = torch.empty(b, d_out, device=dev, dtype=dt)
        rec = _matmul_record(x, wt, y, sizes, warmup, repeats)
        bar.set_postfix(B=b, GBps=f"{rec.gb_per_s:.1f}", GFLOPs=f"{rec.flops_per_s / 1e9:.0f}")
        records.append(rec)
    return records


def efficiency_sweep(roof: MeasuredRoof, rows: int | None = None, device=None, dtype=None, *,
                     budget_s: float | None = None, progress: bool = True,
                     sizes: Sizes | None = None) -> tuple[list[Record], GemmEfficiency]:
    """Chapter 1's decode-GEMM sweep (the weight ``sizes`` gives, default ``sizes_for``, one weight for every point) at
    M = 1, 2, 4, ... up to ``rows`` (at least the sizes' own largest batch), within ``budget_s`` seconds
    (default: 10 on a CPU, 30 elsewhere; :func:`measure.timing.doubling_sweep` stops before a point that
    would not fit), and the per-M efficiency it gives on ``roof``: what Chapters 2 and 4 add to their model
    (``stack.StackModel.with_efficiency``) to show how much of its gap the GEMM library's paths explain."""
    from tqdm.auto import tqdm

    dev = resolve(device)
    sizes = sizes or sizes_for(dev)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    rows = max(sizes.batches[-1], validate.integer("rows", rows or 1, low=1))
    budget_s = (10.0 if dev.type == "cpu" else 30.0) if budget_s is None else budget_s
    wt = _weight(sizes.d_in, sizes.d_out, dt, dev)
    bar = tqdm(desc=f"matmul {sizes.d_in}x{sizes.d_out} {dtype_name(dt)}: rows", disable=not progress)

    def point(b: int) -> Record:
        x = torch.randn(b, sizes.d_in, device=dev, dtype=dt)
        y = torch.empty(b, sizes.d_out, device=dev, dtype=dt)
        bar.update()
        return _matmul_record(x, wt, y, sizes, sizes.warmup, sizes.repeats)

    sweep = doubling_sweep(point, lambda batches, results: False, limit=2 ** math.ceil(math.log2(rows)),
                           budget_s=budget_s, min_points=2)
    bar.close()
    return sweep.results, GemmEfficiency.from_sweep(sweep.results, roof)


def matmul_floor(device=None, dtype=None, repeats: int = 50) -> float:
    """The overhead floor t0 of one op on this device: the fastest of at least ``repeats`` calls of a
    1×64 @ 64×64 matmul, whose roofline time is nanoseconds, sampled for at least ``sizes_for``'s
    ``min_s``. Seconds. (The fastest: a floor is what the op costs when nothing else is in the way;
    on a busy machine the median can be milliseconds.)"""
    return matmul_time(1, 64, 64, dtype, device, repeats=validate.integer("repeats", repeats, low=1)).fastest_s


def peak_matmul_flops(device=None, dtype=None, n: int | None = None, *, warmup: int | None = None,
                      repeats: int | None = None) -> Record:
    """The measured compute roof: the best FLOP/s of two GEMMs far above any ridge, a square
    ``n x n x n`` one and a wide decode-shaped ``(n/4) x n x n`` one (``n`` from ``sizes_for``).

    Why two: on GPUs the square GEMM is the fastest, but some CPU libraries' bf16 kernels run
    decode-shaped GEMMs faster than square ones, and a roof that measured decode points poke through
    teaches nothing. Returns the record of the shape with the fastest sample; ``extra["shapes"]``
    holds both shapes' FLOPs and times.
    """
    dev = resolve(device)
    sizes = sizes_for(dev)
    n = sizes.peak_n if n is None else validate.integer("n", n, low=4)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    warmup = sizes.warmup if warmup is None else warmup
    repeats = sizes.repeats if repeats is None else repeats
    wt = _weight(n, n, dt, dev)
    recs = []
    for m in (n, n // 4):
        x = torch.randn(m, n, device=dev, dtype=dt)
        y = torch.empty(m, n, device=dev, dtype=dt)
        recs.append(_matmul_record(x, wt, y, sizes, warmup, repeats, name="peak_matmul"))
    best = max(recs, key=lambda r: r.extra["flops"] / r.fastest_s)
    best.extra["shapes"] = [{**r.params, "flops": r.extra["flops"], "median_s": r.median_s, "fastest_s": r.fastest_s}
                            for r in recs]
    return best


@dataclass(frozen=True)
class MeasuredRoof:
    """A roofline measured on this device: ``bandwidth`` (bytes/s) and ``flops`` (FLOP/s) in ``dtype``,
    with the records they came from. Unpacks as a pair: ``bw, flops = measured_roofline()``."""

    bandwidth: float
    flops: float
    records: tuple[Record, ...] = ()
    dtype: str = "bf16"

    def __post_init__(self):
        validate.number("bandwidth", self.bandwidth, low=0, low_open=True)
        validate.number("flops", self.flops, low=0, low_open=True)
        as_dtype(self.dtype)

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two roofs meet."""
        return self.flops / self.bandwidth

    @property
    def critical_batch(self) -> float:
        """Tokens per weight read at which a GEMM with ``dtype`` weights reaches the ridge: ridge · w / 2."""
        return self.ridge * as_dtype(self.dtype).itemsize / 2

    def __iter__(self):
        return iter((self.bandwidth, self.flops))

    def __str__(self) -> str:
        return (f"{self.bandwidth / 1e9:.1f} GB/s, {self.flops / 1e9:.0f} GFLOP/s in {self.dtype}: ridge "
                f"{self.ridge:.2g} FLOP/byte, critical batch {self.critical_batch:.2g} tokens")

    def best(self, other: MeasuredRoof) -> MeasuredRoof:
        """The faster of two measurements of the same roofs, roof by roof. A roof is what the device can do, and
        load from other processes only ever lowers a measurement: on a shared 2-core host one measurement of the
        bf16 GEMM peak came out 1.8x low, and a pass then beat it. Measuring again after a sweep and keeping
        the best makes a roof that one busy second cannot pull down."""
        if other.dtype != self.dtype:
            raise validate.BadArgument(f"roofs measured in {self.dtype} and {other.dtype} cannot be combined")
        return MeasuredRoof(max(self.bandwidth, other.bandwidth), max(self.flops, other.flops),
                            self.records + other.records, self.dtype)

    def as_accelerator(self, dtype: str | None = None, name: str = "this device (measured)"):
        """This roof as a ``hardware.Accelerator``, so the cost model can predict times on it."""
        from specnotes.analytic.hardware import Accelerator

        return Accelerator(name, {dtype_name(dtype or self.dtype): self.flops}, self.bandwidth, 0.0,
                           "measured: copy_ and GEMM")


def measured_roofline(device=None, dtype=None) -> MeasuredRoof:
    """(bandwidth, flops) measured here: :func:`copy_bandwidth` and :func:`peak_matmul_flops`, from
    their fastest samples, what the device does when nothing else is in the way (the passes the
    chapters compare with these roofs are judged by their fastest samples too). This is how the CPU
    (which has no datasheet entry) gets a roofline."""
    dev = resolve(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    copy = copy_bandwidth(dev)
    peak = peak_matmul_flops(dev, dt)
    return MeasuredRoof(copy.extra["bytes"] / copy.fastest_s, peak.extra["flops"] / peak.fastest_s, (copy, peak),
                        dtype_name(dt))


# ---------------------------------------------------------------------------------------------- GEMM efficiency


@dataclass(frozen=True)
class GemmEfficiency:
    """What the roofline leaves out of a decode GEMM on this device: at each measured row count M, the
    measured time over the roofline time on the measured roofs (``ratios``; 1 = at a roof, 6 = six times
    slower than the roofs allow: a library path for few rows that reaches neither roof).

    Between measured M it interpolates log ratio linearly in log M; outside them it holds the nearest
    measured ratio (:meth:`extrapolates` says where). A model that multiplies each GEMM's roofline time
    by ``efficiency(M)`` predicts the sweep it came from exactly; :meth:`leave_one_out` says how well it
    predicts a point it was not given, which is what matters for passes of other M (Chapters 2 and 4)."""

    rows: tuple[int, ...]
    ratios: tuple[float, ...]
    source: str = ""
    gb_per_s: tuple[float, ...] = ()  # weight bytes read per second at each row count (fastest sample)

    def __post_init__(self):
        rows = validate.integers("rows", self.rows, low=1)
        if not rows or any(a >= b for a, b in zip(rows, rows[1:], strict=False)):
            raise validate.BadArgument(f"rows must be increasing row counts, got {list(self.rows)}")
        if len(self.ratios) != len(rows):
            raise validate.BadArgument(f"ratios has {len(self.ratios)} values for {len(rows)} rows")
        for i, r in enumerate(self.ratios):
            validate.number(f"ratios[{i}]", r, low=0, low_open=True)

    @classmethod
    def from_sweep(cls, records: Sequence[Record], roof: MeasuredRoof) -> GemmEfficiency:
        """From a decode-GEMM sweep (``matmul_sweep`` records, each timed by its fastest sample) and the
        roofs it is judged on: measured / (bytes / bandwidth, FLOPs / peak, whichever is larger)."""
        records = sorted(records, key=lambda r: r.params["batch"])
        if not records:
            raise validate.BadArgument("a GEMM efficiency needs at least one measured GEMM")
        ratios = [r.fastest_s / gemm_roofline(r, roof) for r in records]
        weight = [as_dtype(r.dtype).itemsize * r.params["d_in"] * r.params["d_out"] for r in records]
        return cls(tuple(r.params["batch"] for r in records), tuple(ratios),
                   f"{records[0].params['d_in']}x{records[0].params['d_out']} {records[0].dtype} GEMM",
                   tuple(w / r.fastest_s / 1e9 for w, r in zip(weight, records, strict=True)))

    def __call__(self, rows: float) -> float:
        rows = validate.number("rows", rows, low=0, low_open=True)
        return _interpolate(self.rows, self.ratios, rows)

    def extrapolates(self, rows: float) -> bool:
        """``rows`` lies outside the measured row counts: the efficiency there is a held value."""
        return not self.rows[0] <= rows <= self.rows[-1]

    def leave_one_out(self) -> list[float]:
        """Each measured ratio predicted from the others alone (interpolated between its neighbours, or held
        from the nearest one at an end): the out-of-sample prediction of every point of the sweep."""
        if len(self.rows) < 2:
            return list(self.ratios)
        out = []
        for i in range(len(self.rows)):
            rows = self.rows[:i] + self.rows[i + 1:]
            ratios = self.ratios[:i] + self.ratios[i + 1:]
            out.append(_interpolate(rows, ratios, self.rows[i]))
        return out

    def error(self, predicted: Sequence[float] | None = None) -> float:
        """How far ``predicted`` ratios (default: :meth:`leave_one_out`) sit from the measured ones, as a
        geometric-mean factor minus one (0.25: off by 25% on average, either way)."""
        predicted = self.leave_one_out() if predicted is None else list(predicted)
        return geometric_error(predicted, self.ratios)


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """log y linear in log x between the points, held constant past the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = next(j for j in range(1, len(xs)) if xs[j] >= x)
    w = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
    return math.exp((1 - w) * math.log(ys[i - 1]) + w * math.log(ys[i]))


def geometric_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """exp(mean |log(predicted / measured)|) - 1: a model's typical error as a factor, whichever way it misses."""
    if len(predicted) != len(measured) or not measured:
        raise validate.BadArgument(f"predicted has {len(predicted)} values, measured {len(measured)}")
    logs = [abs(math.log(validate.number("predicted", p, low=0, low_open=True)
                         / validate.number("measured", m, low=0, low_open=True)))
            for p, m in zip(predicted, measured, strict=True)]
    return math.exp(statistics.fmean(logs)) - 1


def gemm_roofline(record: Record, roof: MeasuredRoof) -> float:
    """The roofline time of a ``matmul_sweep`` record on ``roof``: no floor, the roofs alone."""
    p = record.params
    cost = gemm_cost(p["batch"], p["d_in"], p["d_out"], weight_bytes=as_dtype(record.dtype).itemsize)
    return max(cost.bytes / roof.bandwidth, cost.flops / roof.flops)


# ---------------------------------------------------------------------------------------------- the knee


@dataclass(frozen=True)
class KneeFit:
    """Two-segment fit of step time vs batch: flat ``flat_s`` up to the knee, then the power law
    ``coef * B**exponent`` (exponent 1 = compute-bound, linear in B). ``batch`` is where they meet,
    None if no rise was measured (the knee lies beyond the largest batch)."""

    batch: float | None
    flat_s: float
    coef: float
    exponent: float
    split: int  # number of points assigned to the flat segment

    def predict(self, batches: Iterable[float]) -> list[float]:
        if self.batch is None:
            return [self.flat_s for _ in batches]
        return [max(self.flat_s, self.coef * b**self.exponent) for b in batches]


def knee_fit(batches: Sequence[float], times: Sequence[float], tol: float = 0.25) -> KneeFit:
    """Fit ``time(B)`` with a flat segment then a rising power law, in log-log space.

    For every split point (first i points flat, the rest - at least two - rising) we fit the flat level
    as the geometric mean of the flat points and the rise by least squares on ``log t = log c + p log B``,
    keep the split with the smallest squared log error, and report where the two fits meet.
    Log space because timing noise is multiplicative. If no point exceeds ``(1 + tol)`` times the
    flat level fitted to all points, nothing rose: ``batch`` is None.
    """
    if len(batches) != len(times):
        raise validate.BadArgument(f"batches and times differ in length ({len(batches)} vs {len(times)})")
    if len(batches) < 3:
        raise validate.BadArgument(f"need at least 3 points to find a knee, got {len(batches)}")
    batches = [validate.number(f"batches[{i}]", b, low=0, low_open=True) for i, b in enumerate(batches)]
    times = [validate.number(f"times[{i}]", t, low=0, low_open=True) for i, t in enumerate(times)]
    tol = validate.number("tol", tol, low=0)
    pts = sorted(zip(batches, times, strict=True))
    if len({b for b, _ in pts}) != len(pts):
        raise validate.BadArgument("batch sizes must be distinct")
    lb = [math.log(b) for b, _ in pts]
    lt = [math.log(t) for _, t in pts]
    n = len(pts)

    all_flat = statistics.fmean(lt)
    if max(lt) <= all_flat + math.log1p(tol):
        return KneeFit(None, math.exp(all_flat), 0.0, 0.0, n)

    best = None
    for i in range(1, n - 1):  # flat: [0, i), rising: [i, n), >= 2 points
        flat = statistics.fmean(lt[:i])
        xs, ys = lb[i:], lt[i:]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        p = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        c = my - p * mx
        err = sum((y - flat) ** 2 for y in lt[:i]) + sum((y - (c + p * x)) ** 2 for x, y in zip(xs, ys,
                                                                                            strict=True))
        if p > 0 and (best is None or err < best[0]):
            best = (err, i, flat, c, p)
    if best is None:  # time falls with B (noise at B = 1): no knee measured
        return KneeFit(None, math.exp(all_flat), 0.0, 0.0, n)
    _, i, flat, c, p = best
    batch = math.exp((flat - c) / p)
    batch = min(max(batch, pts[0][0]), pts[-1][0])
    return KneeFit(batch, math.exp(flat), math.exp(c), p, i)


def knee(batches: Sequence[float], times: Sequence[float], tol: float = 0.25) -> float | None:
    """The measured knee of a step-time-vs-batch curve: the batch at which the flat (memory-bound)
    fit and the rising (compute-bound) fit intersect - the measured counterpart of the roofline's
    critical batch. None if the curve never rose by more than ``tol`` (25 %) over the batches
    measured. See :func:`knee_fit`."""
    return knee_fit(batches, times, tol).batch
