"""The one timer: every measurement in the book goes through :func:`time_fn`.

The rules (gpt-fast style):

* synchronize the device before starting and before stopping every sample (:func:`sync`: CUDA and MPS;
  the CPU runs eagerly);
* run warm-up calls first and exclude them (allocator, kernel selection, caches, clocks);
* report the median and the inter-quartile range of repeated samples (:class:`Timing`), never a mean
  or a single run; where contention matters, compare the fastest samples (another process only ever
  adds time);
* stay inside a time budget: per point (``time_fn(budget_s=...)``) and per sweep (:func:`doubling_sweep`).

Units: seconds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specnotes import validate
from specnotes.measure.devices import resolve

MAX_SAMPLES = 2000  # min_s stops stretching a very fast call here


def sync(device: torch.device | str | None = None) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU, which runs eagerly)."""
    dev = resolve(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an already sorted sequence."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass
class Timing:
    """Repeated wall-clock samples (seconds) of one measured call, with robust summaries."""

    samples: list[float]

    def __post_init__(self):
        if not self.samples:
            raise validate.BadArgument(f"samples must hold at least one time, got {self.samples!r}")
        self.samples = [float(s) for s in self.samples]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q1(self) -> float:
        return quantile(sorted(self.samples), 0.25)

    @property
    def q3(self) -> float:
        return quantile(sorted(self.samples), 0.75)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def fastest(self) -> float:
        return min(self.samples)

    @property
    def rel_spread(self) -> float:
        """IQR / median: 0.05 is a quiet machine, 0.3 a busy one."""
        return self.iqr / self.median if self.median > 0 else math.inf

    def __str__(self) -> str:
        return f"{self.median * 1e3:.3f} ms (IQR {self.iqr * 1e3:.3f} ms, n={len(self.samples)})"


def _cuda_samples(fn: Callable[[], object], repeats: int, device: torch.device) -> list[float]:
    """One pair of CUDA events per sample: GPU time between them, without host-side launch jitter."""
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)  # ms -> s
    return samples


def _warm_up(fn: Callable[[], object], warmup: int, dev: torch.device, budget_s: float | None,
             timer: Callable[[], float]) -> float:
    """Run up to ``warmup`` untimed calls (stopping early once they used half of ``budget_s``);
    return the wall time of the last one (0.0 if none ran)."""
    spent = last = 0.0
    for _ in range(warmup):
        t0 = timer()
        fn()
        sync(dev)
        last = timer() - t0
        spent += last
        if budget_s is not None and spent >= budget_s / 2:
            break
    return last


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    repeats: int = 10,
    device: torch.device | str | None = None,
    timer: Callable[[], float] | None = None,
    budget_s: float | None = None,
    min_s: float = 0.0,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronized.

    On CUDA each sample is the elapsed time between two CUDA events around the call (unless a
    ``timer`` is given); elsewhere the device is synchronized, then ``timer`` (default
    ``time.perf_counter``) read before and after the call and a second synchronize.
    ``device=None`` means ``pick_device()``, the device chapters compute on.

    ``budget_s`` (optional) bounds slow calls: warm-up stops after at least one call once it used
    half the budget, and the number of samples drops to fit the budget, but never below
    ``min(3, repeats)``, so a median and quartiles always exist.

    ``min_s`` stretches fast calls: sampling goes on past ``repeats`` until the samples add up to
    ``min_s`` seconds (at most ``MAX_SAMPLES``), so the fastest sample comes from a window longer
    than one stall of a shared machine's scheduler (tens to hundreds of milliseconds).
    """
    warmup = validate.integer("warmup", warmup, low=0)
    repeats = validate.integer("repeats", repeats, low=1)
    min_s = validate.number("min_s", min_s, low=0)
    if budget_s is not None:
        budget_s = validate.number("budget_s", budget_s, low=0, low_open=True)
    dev = resolve(device)
    cuda_events = dev.type == "cuda" and timer is None
    timer = timer or time.perf_counter
    last = _warm_up(fn, warmup, dev, budget_s, timer)
    sync(dev)
    if budget_s is not None and last > 0:
        repeats = min(repeats, max(3, math.ceil(budget_s / last)))
    samples: list[float] = []
    while len(samples) < repeats or (sum(samples) < min_s and len(samples) < MAX_SAMPLES):
        if cuda_events:
            samples += _cuda_samples(fn, 1, dev)
            continue
        sync(dev)
        t0 = timer()
        fn()
        sync(dev)
        samples.append(timer() - t0)
    return Timing(samples)


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int = 3,
    repeats: int = 10,
    device: torch.device | str | None = None,
    timer: Callable[[], float] | None = None,
) -> dict[str, Timing]:
    """Time several calls against each other: ``warmup`` untimed rounds, then ``repeats`` rounds that time each
    call once, in an order that turns by one every round. On a shared machine a burst of load then lands on
    all of them alike, so that the ratio of their medians means something even where the medians move.
    Each sample is synchronized as in ``time_fn`` (wall clock; on CUDA too, to keep one clock for all)."""
    warmup = validate.integer("warmup", warmup, low=0)
    repeats = validate.integer("repeats", repeats, low=1)
    if not fns:
        raise validate.BadArgument("fns must name at least one call to time")
    dev = resolve(device)
    timer = timer or time.perf_counter
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(warmup + repeats):
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            sync(dev)
            t0 = timer()
            fns[name]()
            sync(dev)
            if round_ >= warmup:
                samples[name].append(timer() - t0)
    return {name: Timing(samples[name]) for name in names}


# ---------------------------------------------------------------------------------------------- sweeps


@dataclass
class Sweep:
    """What :func:`doubling_sweep` measured: ``results[i]`` at ``batches[i]``, and why it stopped:
    ``"done"`` (the caller's condition held), ``"budget"`` (the next batch would not fit in the time
    budget) or ``"limit"`` (the next batch would pass the largest allowed)."""

    batches: list[int]
    results: list
    stop: str
    seconds: float
    budget_s: float | None
    limit: int


def doubling_sweep(point: Callable[[int], object], done: Callable[[list[int], list], bool], *, first: int = 1,
                   min_last: int = 1, limit: int = 1 << 16, budget_s: float | None = None,
                   timer: Callable[[], float] | None = None, min_points: int = 1) -> Sweep:
    """Call ``point(B)`` for B = first, 2·first, 4·first, ... and stop after the first B >= ``min_last``
    at which ``done(batches, results)`` is true, or before a B that would pass ``limit``, or before a B
    that would not fit in ``budget_s`` (seconds since the start plus twice the last point's time: doubling
    B at most doubles a point's work once past the knee; below it, a point costs about the same). The
    budget never cuts the sweep below ``min_points`` points (one point shows no trend)."""
    first = validate.integer("first", first, low=1)
    min_last = validate.integer("min_last", min_last, low=1)
    min_points = validate.integer("min_points", min_points, low=1)
    limit = validate.integer("limit", limit, low=first)
    if budget_s is not None:
        budget_s = validate.number("budget_s", budget_s, low=0, low_open=True)
    timer = timer or time.perf_counter
    start = timer()
    batches, results, last = [], [], 0.0
    b, stop = first, "limit"
    while b <= limit:
        if budget_s is not None and len(batches) >= min_points and (timer() - start) + 2 * last > budget_s:
            stop = "budget"
            break
        t = timer()
        results.append(point(b))
        batches.append(b)
        last = timer() - t
        if b >= min_last and done(batches, results):
            stop = "done"
            break
        b *= 2
    return Sweep(batches, results, stop, timer() - start, budget_s, limit)
