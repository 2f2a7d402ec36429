"""Which dtype a device measures in, and why (Chapter 1).

``$SPECNOTES_DTYPE`` (float32, bfloat16, float16, or fp32/bf16/fp16), else bf16 on GPUs with native bf16
(compute capability >= 8), fp16 on older GPUs (T4) and MPS; on a CPU a probe of under two seconds picks
the dtype whose (k+1)-row GEMM costs closest to its 1-row GEMM over a weight larger than the last-level
cache: the dtype with the widest memory-bound range, where the physics the book teaches shows
(:func:`choose_dtype`). The probe times GEMMs, so this module sits above ``measure.timing``.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from specnotes import validate
from specnotes.measure.devices import DTYPE_ENV, DTYPES, as_dtype, dtype_name, resolve
from specnotes.measure.timing import time_fn

PROBE_ROWS = 5  # k + 1 with the book's k = 4: the rows of a verify pass at B = 1
TIE = 1.10  # probe ratios within 10% of the best are a tie, broken in the order of DTYPES (bf16 first)
PROBE_BYTES = 64 * 2**20  # the probe's weight in every dtype: twice a typical L3, and three dtypes in < 2 s
PROBE_ORDER = ("bf16", "fp32", "fp16")  # fp16 last, and only if time is left: CPUs rarely have a fast fp16 path


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype chapters measure in on one device, and why.

    source: ``"SPECNOTES_DTYPE"``, ``"probe"`` (CPU), ``"GPU"`` or ``"MPS"``.
    ratios: for the probe, per dtype, the time of a ``rows``-row GEMM over the probe's weight divided
        by the time of a 1-row GEMM over it, the median of back-to-back pairs (1.0: the extra rows are
        free; memory-bound).
    gemv_gb_per_s: per dtype, the weight bytes the 1-row GEMM streamed per second, median (a dtype whose
        1-row GEMM is far slower than the others' has no fast path here and is not chosen).
    """

    dtype: str
    source: str
    detail: str = ""
    ratios: dict[str, float] = field(default_factory=dict)
    gemv_gb_per_s: dict[str, float] = field(default_factory=dict)
    weight: tuple[int, int] = (0, 0)
    rows: int = PROBE_ROWS
    seconds: float = 0.0

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def reason(self) -> str:
        """One sentence: which dtype, and why."""
        if self.source != "probe":
            return f"{self.dtype}: {self.detail}"
        others = ", ".join(f"{d} {r:.2f}×" for d, r in self.ratios.items() if d != self.dtype)
        return (f"{self.dtype}: a {self.rows}-row GEMM over a 64 MiB weight costs {self.ratios[self.dtype]:.2f}× "
                f"a 1-row GEMM in {self.dtype} ({others}): the widest memory-bound range on this CPU")

    def __str__(self) -> str:
        return self.reason


def choose_dtype(ratios: dict[str, float], gemv_gb_per_s: dict[str, float]) -> str:
    """The dtype whose (k+1)-row GEMM costs closest to its 1-row GEMM (``ratios``: many-row time over
    1-row time), among those whose 1-row GEMM streams at least a quarter as fast as the best one's (a
    dtype with no fast path at all looks "flat" only because even one row is slow). A ratio below 1
    (the 1-row path slower than the many-row one) counts as 1: flat. Ratios within ``TIE`` of the best
    are a tie, broken in the order bf16, fp16, fp32 (the dtypes GPUs serve in first)."""
    if not ratios or set(ratios) != set(gemv_gb_per_s) or not set(ratios) <= set(DTYPES):
        raise validate.BadArgument(f"ratios and gemv_gb_per_s need the same dtypes, from {sorted(DTYPES)}; "
                                   f"got {sorted(ratios)} and {sorted(gemv_gb_per_s)}")
    fastest = max(gemv_gb_per_s.values())
    flatness = {d: max(ratios[d], 1.0) for d in DTYPES if d in ratios and gemv_gb_per_s[d] >= fastest / 4}
    best = min(flatness.values())
    return next(d for d in flatness if flatness[d] <= best * TIE)


def row_cost(dtype, d_in: int, d_out: int, rows: int = PROBE_ROWS, pairs: int = 11, timer=None) -> tuple[float, float]:
    """(median 1-row seconds, median over ``pairs`` of rows-row time / 1-row time) of GEMMs over one
    ``[d_out, d_in]`` weight in ``dtype`` on the CPU. Each pair runs back to back, so a change in load
    hits both of its calls; the median of the pairs' ratios is stable where the ratio of two minima is not
    (on a shared 2-core machine the latter swung 0.3-9x in one minute, the former 1.8-2.0x)."""
    dt = as_dtype(dtype)
    weight = torch.full((d_out, d_in), 0.01, dtype=dt).t()  # values do not change a dense GEMM's time
    one, many = torch.full((1, d_in), 0.01, dtype=dt), torch.full((rows, d_in), 0.01, dtype=dt)
    out_one, out_many = torch.empty(1, d_out, dtype=dt), torch.empty(rows, d_out, dtype=dt)
    t_one, ratios = [], []
    for i in range(validate.integer("pairs", pairs, low=1)):
        a = time_fn(lambda: torch.mm(one, weight, out=out_one), warmup=int(i == 0), repeats=1, device="cpu",
                    timer=timer).median
        b = time_fn(lambda: torch.mm(many, weight, out=out_many), warmup=int(i == 0), repeats=1, device="cpu",
                    timer=timer).median
        t_one.append(a)
        ratios.append(b / a)
    return statistics.median(t_one), statistics.median(ratios)


def _probe(budget_s: float = 1.5) -> DtypeChoice:
    """Probe bf16, fp32 and, if they took under ``budget_s``, fp16 on the CPU: ``row_cost`` over a
    64 MiB weight each."""
    start = time.perf_counter()
    ratios, gemv, shapes = {}, {}, {}
    for name in PROBE_ORDER:
        if len(ratios) >= 2 and time.perf_counter() - start > budget_s:
            break
        d_in = 4096
        d_out = PROBE_BYTES // (d_in * DTYPES[name].itemsize)
        one, ratio = row_cost(name, d_in, d_out)
        ratios[name], gemv[name], shapes[name] = ratio, PROBE_BYTES / one / 1e9, (d_out, d_in)
    chosen = choose_dtype(ratios, gemv)
    return DtypeChoice(chosen, "probe", ratios=ratios, gemv_gb_per_s=gemv, weight=shapes[chosen],
                       seconds=time.perf_counter() - start)


_CHOICES: dict[str, DtypeChoice] = {}


def dtype_choice(device: torch.device | str | None = None) -> DtypeChoice:
    """The dtype chapters measure in on ``device`` and why (see the module docstring). The CPU probe
    runs once per process and device; ``$SPECNOTES_DTYPE`` is read on every call."""
    dev = resolve(device)
    env = os.environ.get(DTYPE_ENV)
    if env:
        try:
            name = dtype_name(env)
        except ValueError:
            raise validate.BadArgument(f"{DTYPE_ENV}={env!r}: use float32, bfloat16 or float16 "
                                       f"(or fp32, bf16, fp16)") from None
        choice = DtypeChoice(name, DTYPE_ENV, f"set by {DTYPE_ENV}={env}")
    elif dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        choice = (DtypeChoice("bf16", "GPU", f"native on this GPU (compute capability {major}.{minor})")
                  if major >= 8 else
                  DtypeChoice("fp16", "GPU", f"this GPU (compute capability {major}.{minor}) has no bf16 tensor cores"))
    elif dev.type == "mps":
        choice = DtypeChoice("fp16", "MPS", "Apple MPS")
    else:
        cached = _CHOICES.get(str(dev))
        choice = cached if cached is not None and cached.source == "probe" else _probe()
    _CHOICES[str(dev)] = choice
    return choice


def last_choice(device: torch.device | str | None = None) -> DtypeChoice | None:
    """The choice :func:`dtype_choice` last made for ``device`` in this process (None: none yet)."""
    return _CHOICES.get(str(resolve(device)))


def default_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The torch dtype of :func:`dtype_choice`."""
    return dtype_choice(device).torch_dtype
