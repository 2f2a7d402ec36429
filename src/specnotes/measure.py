"""Timing harness, probes and sweeps: how the book measures, on whatever device it finds.

Introduced in chapter 1 (``01_roofline_decode``) and used by every chapter that measures.

The rules every measurement here follows (gpt-fast style):

* synchronize the device before starting and before stopping every sample;
* run warm-up calls first and exclude them (allocator, kernel selection, caches, clocks);
* report the median and the inter-quartile range of repeated samples, never a mean or a single run;
* size the work to the device (:func:`sizes_for`) so a chapter's sweeps take seconds on a 2-core CPU
  and measure realistic shapes on a GPU;
* keep provenance (device, dtype, torch version, date, host) with every result (:class:`Record`).

Nothing here changes global torch state. :func:`num_threads` sets the CPU thread count only inside a
``with`` block and restores it.

Units: seconds, bytes, FLOPs; bandwidth in bytes/s (``gb_per_s`` is decimal GB/s, 1 GB = 1e9 bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import operator
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specnotes.cost import gemm_cost

# ----------------------------------------------------------------------------------------------
# dtypes and devices

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}
DEVICE_ENV = "SPECNOTES_DEVICE"  # set to "cpu" (or "cuda:1", ...) to override pick_device()


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``"bf16"``/``"fp16"``/``"fp32"`` (or ``"bfloat16"``, ``"float16"``, ``"float32"``, or the
    torch dtype itself) -> torch dtype. Anything else: ValueError naming the allowed values."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
        raise ValueError(f"dtype {dtype} is not supported; use one of {sorted(DTYPES)} or the torch dtypes "
                         f"{list(DTYPES.values())}")
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = _DTYPE_ALIASES.get(key, key)
        if key in DTYPES:
            return DTYPES[key]
    raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)} "
                     f"(or {sorted(_DTYPE_ALIASES)}) or a torch dtype")


def dtype_name(dtype: torch.dtype | str) -> str:
    """Short name used in records and in the cost model: ``"bf16"``, ``"fp16"`` or ``"fp32"``."""
    dt = as_dtype(dtype)
    return next(k for k, v in DTYPES.items() if v == dt)


def _device(device: torch.device | str | None) -> torch.device:
    return pick_device() if device is None else torch.device(device)


def _available(dev: torch.device) -> bool:
    if dev.type == "cpu":
        return True
    if dev.type == "cuda":
        return torch.cuda.is_available() and (dev.index is None or dev.index < torch.cuda.device_count())
    if dev.type == "mps":
        return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    return False


def pick_device(prefer: torch.device | str | None = None) -> torch.device:
    """The device chapters measure on: ``prefer`` if given, else ``$SPECNOTES_DEVICE`` if set, else
    CUDA if available, else Apple MPS if available, else the CPU.

    A preferred device that is not available is a ValueError (we never silently fall back from an
    explicit request)."""
    prefer = prefer if prefer is not None else os.environ.get(DEVICE_ENV) or None
    if prefer is not None:
        try:
            dev = torch.device(prefer)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"unknown device {prefer!r}; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
        if not _available(dev):
            raise ValueError(f"device {prefer!r} is not available here; 'cpu' always is")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _available(torch.device("mps")):
        return torch.device("mps")
    return torch.device("cpu")


def sync(device: torch.device | str | None = None) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU, which runs eagerly)."""
    dev = _device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device | str | None = None) -> str:
    """Human-readable name of the hardware behind ``device``: the GPU's name, or the CPU model with
    the number of threads torch uses (e.g. ``"AMD EPYC (2 threads)"``)."""
    dev = _device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    return f"{_cpu_model()} ({torch.get_num_threads()} threads)"


def default_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """bf16 on the CPU and on GPUs with native bf16 (compute capability >= 8: A100, L4, H100, ...);
    fp16 on older GPUs (T4, V100), where bf16 is emulated and slow, and on MPS."""
    dev = _device(device)
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        return torch.bfloat16 if major >= 8 else torch.float16
    if dev.type == "mps":
        return torch.float16
    return torch.bfloat16


@contextlib.contextmanager
def num_threads(n: int | None):
    """``with num_threads(2): ...`` sets torch's CPU thread count inside the block and restores it.
    ``None`` leaves it as is."""
    old = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ValueError(f"num_threads must be >= 1, got {n}")
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _llc_bytes() -> int | None:
    """Size of the CPU's last-level cache from Linux sysfs, or None where unknown."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    best = None
    for idx in sorted(base.glob("index*")):
        try:
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:].upper(), 1)
        digits = size.rstrip("KkMmGg")
        if digits.isdigit():
            best = max(best or 0, int(digits) * mult)
    return best


# ----------------------------------------------------------------------------------------------
# sizes


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one device, so chapters never hard-code them.

    copy_bytes: buffer size for :func:`copy_bandwidth`; several times the last-level cache so the
        copy streams from DRAM/HBM instead of hitting cache.
    d_in, d_out: the weight of the decode GEMM (``y = x @ W.T``, ``W`` is ``[d_out, d_in]``); large
        enough that the weight does not fit in the last-level cache, like a real layer's weights.
    batches: the batch sizes of a time-vs-batch sweep (powers of two, from GEMV to past the ridge).
    peak_n: side of the square GEMM that measures the compute roof.
    warmup, repeats: timing defaults for this device.
    budget_s: seconds one measured point may take (see :func:`time_fn`); None: no limit.
    """

    copy_bytes: int
    d_in: int
    d_out: int
    batches: tuple[int, ...]
    peak_n: int
    warmup: int
    repeats: int
    budget_s: float | None = None

    @property
    def weight_elems(self) -> int:
        return self.d_in * self.d_out


MiB = 2**20
GiB = 2**30


def sizes_for(device: torch.device | str | None = None) -> Sizes:
    """Sizes for ``device`` (the why of each number is in the comments)."""
    dev = _device(device)
    if dev.type == "cuda":
        return Sizes(
            # 1 GiB: 20x the largest L2 (H100 50 MB, B200 126 MB) and small next to even a T4's 16 GB.
            copy_bytes=GiB,
            # Llama-3-70B's MLP up-projection, 8192 x 28672: 470 MB of bf16, a real layer's weight.
            d_in=8192,
            d_out=28672,
            # 1 .. 4096: from the GEMV up to well past every GPU's ridge (T4 ~200, H100 ~300, B200 ~560).
            batches=tuple(2**i for i in range(13)),
            # 8192^3 x 2 = 1.1 TFLOP: milliseconds on any GPU, big enough to reach the tensor-core peak.
            peak_n=8192,
            warmup=5,
            repeats=20,
            budget_s=2.0,
        )
    if dev.type == "mps":
        return Sizes(copy_bytes=512 * MiB, d_in=4096, d_out=14336, batches=tuple(2**i for i in range(11)),
                     peak_n=4096, warmup=3, repeats=10, budget_s=2.0)
    llc = _llc_bytes() or 32 * MiB
    return Sizes(
        # 256 MiB, or 4x the last-level cache if that is larger (a 2-core EPYC slice reports 32 MiB of L3);
        # two buffers of this size must fit in RAM, which any laptop has.
        copy_bytes=max(256 * MiB, 4 * llc),
        # 4096 x 8192 bf16 = 64 MiB: twice a 32 MiB L3, so every step streams the weight from DRAM (a weight
        # that fits in L3 measures the cache, not memory), yet a B=1 GEMV takes only ~5-15 ms on two cores.
        # A bigger L3 gets a proportionally wider weight.
        d_in=4096,
        d_out=8192 * min(4, max(1, math.ceil(2 * llc / (64 * MiB)))),
        # 1 .. 128: a CPU's bf16 GEMM tops out at tens of GFLOP/s, so its ridge (peak / bandwidth) sits at a
        # few FLOP/byte, i.e. a knee at a few tokens; 128 shows the flat part and a long rise, and B=128
        # (8.6 GFLOP) already takes ~0.5 s on two busy cores.
        batches=tuple(2**i for i in range(8)),
        # 1024^3 x 2 = 2.1 GFLOP: 0.05-0.3 s on two cores, enough to reach the GEMM kernel's plateau.
        peak_n=1024,
        # few repeats keep a chapter's sweep to seconds; 3 warm-ups because the first points are noisiest;
        # at most ~1 s per point (slow points get fewer samples, never fewer than 3).
        warmup=3,
        repeats=7,
        budget_s=1.0,
    )


# ----------------------------------------------------------------------------------------------
# timing


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), of an already sorted sequence."""
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
            raise ValueError("Timing needs at least one sample")
        self.samples = [float(s) for s in self.samples]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q1(self) -> float:
        return _quantile(sorted(self.samples), 0.25)

    @property
    def q3(self) -> float:
        return _quantile(sorted(self.samples), 0.75)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_spread(self) -> float:
        """IQR / median: 0.05 is a quiet machine, 0.3 a busy one."""
        return self.iqr / self.median if self.median > 0 else math.inf

    def __str__(self) -> str:
        return f"{self.median * 1e3:.3f} ms (IQR {self.iqr * 1e3:.3f} ms, n={len(self.samples)})"


def _check_int(name: str, value, lo: int) -> int:
    """An integer >= lo (numpy integers welcome; bools and floats are not), else ValueError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}") from None
    if value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value}")
    return value


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


def _warm_up(fn: Callable[[], object], warmup: int, dev: torch.device, budget_s: float | None) -> float:
    """Run up to ``warmup`` untimed calls (stopping early once they used half of ``budget_s``);
    return the wall time of the last one (0.0 if none ran)."""
    spent = last = 0.0
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        last = time.perf_counter() - t0
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
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronized.

    On CUDA each sample is the elapsed time between two CUDA events around the call (unless a
    ``timer`` is given); elsewhere the device is synchronized, then ``timer`` (default
    ``time.perf_counter``) read before and after the call and a second synchronize.
    ``device=None`` means :func:`pick_device`, the device chapters compute on.

    ``budget_s`` (optional) bounds slow calls: warm-up stops after at least one call once it used
    half the budget, and the number of samples drops to fit the budget, but never below
    ``min(3, repeats)``, so a median and quartiles always exist.
    """
    warmup = _check_int("warmup", warmup, 0)
    repeats = _check_int("repeats", repeats, 1)
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds or None, got {budget_s!r}")
    dev = _device(device)
    last = _warm_up(fn, warmup, dev, budget_s)
    sync(dev)
    if budget_s is not None and last > 0:
        repeats = min(repeats, max(3, math.ceil(budget_s / last)))
    if dev.type == "cuda" and timer is None:
        return Timing(_cuda_samples(fn, repeats, dev))
    timer = timer or time.perf_counter
    samples = []
    for _ in range(repeats):
        sync(dev)
        t0 = timer()
        fn()
        sync(dev)
        samples.append(timer() - t0)
    return Timing(samples)


# ----------------------------------------------------------------------------------------------
# records with provenance


def _driver_version() -> str | None:
    try:  # private API, present in recent torch builds; the value is e.g. 12040 for CUDA driver 12.4
        v = torch._C._cuda_getDriverVersion()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return None


def provenance(device: torch.device | str | None = None, dtype: torch.dtype | str | None = None) -> dict:
    """Where and how a number was measured: device, dtype, torch version, ISO date (UTC), host
    (GPU name or CPU model with thread count), CPU threads, and CUDA / driver versions on CUDA
    (None elsewhere)."""
    dev = _device(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    on_cuda = dev.type == "cuda"
    return {
        "device": str(dev),
        "dtype": dtype_name(dt),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": device_name(dev),
        "threads": torch.get_num_threads(),
        "cuda": torch.version.cuda if on_cuda else None,
        "driver": _driver_version() if on_cuda else None,
    }


@dataclass
class Record:
    """One measured result: what was measured (``name``, ``params``), its timing (median and
    quartiles in seconds, all samples), provenance, and derived numbers in ``extra``
    (e.g. ``bytes_per_s``, ``flops_per_s``)."""

    name: str
    params: dict
    median_s: float
    q1_s: float
    q3_s: float
    samples: list[float]
    device: str
    dtype: str
    torch: str
    date: str
    host: str
    extra: dict = field(default_factory=dict)
    threads: int | None = None
    cuda: str | None = None
    driver: str | None = None

    @classmethod
    def from_timing(cls, name: str, params: dict, timing: Timing, device=None, dtype=None,
                    extra: dict | None = None) -> Record:
        return cls(name=name, params=dict(params), median_s=timing.median, q1_s=timing.q1,
                   q3_s=timing.q3, samples=list(timing.samples), extra=dict(extra or {}),
                   **provenance(device, dtype))

    @property
    def timing(self) -> Timing:
        return Timing(list(self.samples))

    @property
    def bytes_per_s(self) -> float | None:
        return self.extra.get("bytes_per_s")

    @property
    def flops_per_s(self) -> float | None:
        return self.extra.get("flops_per_s")

    @property
    def gb_per_s(self) -> float | None:
        return None if self.bytes_per_s is None else self.bytes_per_s / 1e9

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        unknown = {k: v for k, v in d.items() if k not in names}
        rec = cls(**known)
        if unknown:  # keep fields written by a newer version instead of dropping them
            rec.extra = {**unknown, **rec.extra}
        return rec


SCHEMA = "specnotes.records/1"


def save_records(records: Iterable[Record], path: str | os.PathLike) -> Path:
    """Write records as JSON (``{"schema": ..., "records": [...]}``); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "records": [r.to_dict() for r in records]}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load_records(path: str | os.PathLike) -> list[Record]:
    """Read records written by :func:`save_records` (a bare JSON list of records is accepted too)."""
    doc = json.loads(Path(path).read_text())
    items = doc["records"] if isinstance(doc, dict) else doc
    return [Record.from_dict(d) for d in items]


def records_to_frame(records: Iterable[Record]):
    """A pandas DataFrame, one row per record, ``params`` and ``extra`` flattened into columns.
    Needs pandas (imported only here)."""
    import pandas as pd  # optional dependency

    rows = []
    for r in records:
        d = r.to_dict()
        d.pop("samples")
        row = {**d.pop("params"), **d.pop("extra"), **d}
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# probes


def copy_bandwidth(device=None, nbytes: int | None = None, dtype: torch.dtype | str = torch.float32, *,
                   warmup: int | None = None, repeats: int | None = None) -> Record:
    """Memory bandwidth from ``dst.copy_(src)`` of a buffer several times the last-level cache
    (``nbytes`` from :func:`sizes_for` unless given).

    Bytes counted: ``2 * nbytes`` (each byte read once and written once, as STREAM counts). CPUs
    without streaming stores also read the destination before writing it (write-allocate), so the
    true DRAM traffic can be 3x; we do not count it, which makes this a slightly conservative roof.
    ``extra``: ``bytes`` moved per copy, ``bytes_per_s``, ``gb_per_s``.
    """
    dev = _device(device)
    sizes = sizes_for(dev)
    nbytes = sizes.copy_bytes if nbytes is None else _check_int("nbytes", nbytes, 1)
    dt = as_dtype(dtype)
    numel = max(1, nbytes // dt.itemsize)
    src = torch.ones(numel, dtype=dt, device=dev)
    dst = torch.empty_like(src)
    timing = time_fn(lambda: dst.copy_(src), warmup=sizes.warmup if warmup is None else warmup,
                     repeats=sizes.repeats if repeats is None else repeats, device=dev,
                     budget_s=sizes.budget_s)
    moved = 2 * numel * dt.itemsize
    bw = moved / timing.median
    return Record.from_timing("copy", {"nbytes": numel * dt.itemsize}, timing, dev, dt,
                              {"bytes": moved, "bytes_per_s": bw, "gb_per_s": bw / 1e9})


def _matmul_record(x: torch.Tensor, wt: torch.Tensor, y: torch.Tensor, sizes: Sizes, warmup: int,
                   repeats: int, name: str = "matmul") -> Record:
    batch, d_in = x.shape
    d_out = wt.shape[1]
    timing = time_fn(lambda: torch.mm(x, wt, out=y), warmup=warmup, repeats=repeats, device=x.device,
                     budget_s=sizes.budget_s)
    # FLOPs = 2·B·d_in·d_out; bytes = weight read once + x read + y written (cost.gemm_cost, one source of truth)
    cost = gemm_cost(batch, d_in, d_out, weight_bytes=x.dtype.itemsize)
    flops, nbytes = cost.flops, cost.bytes
    t = timing.median
    extra = {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes, "flops_per_s": flops / t,
             "bytes_per_s": nbytes / t, "gb_per_s": nbytes / t / 1e9, "per_token_s": t / batch}
    return Record.from_timing(name, {"batch": batch, "d_in": d_in, "d_out": d_out}, timing, x.device,
                              x.dtype, extra)


def _check_shape(batches: Sequence[int], d_in: int, d_out: int) -> tuple[list[int], int, int]:
    batches = [_check_int("batch", b, 1) for b in batches]
    if not batches:
        raise ValueError("batches must hold at least one batch size >= 1")
    return batches, _check_int("d_in", d_in, 1), _check_int("d_out", d_out, 1)


def _weight(d_in: int, d_out: int, dt: torch.dtype, dev: torch.device) -> torch.Tensor:
    """``W.T`` as a view of a ``[d_out, d_in]`` weight: the layout of ``nn.Linear``, which ``F.linear``
    multiplies as ``x @ W.T`` too (a contiguous ``[d_in, d_out]`` copy can hit a far slower bf16 CPU path)."""
    return (torch.randn(d_out, d_in, device=dev, dtype=torch.float32) * d_in**-0.5).to(dt).t()


def matmul_time(batch: int, d_in: int | None = None, d_out: int | None = None, dtype=None, device=None, *,
                warmup: int | None = None, repeats: int | None = None) -> Record:
    """Time one decode-style GEMM ``y = x[B, d_in] @ W.T`` (weight ``[d_out, d_in]``, as ``nn.Linear``;
    output preallocated so the allocator is not timed). Sizes and dtype default to :func:`sizes_for` /
    :func:`default_dtype` for the device. ``extra``: flops, bytes (:func:`specnotes.cost.gemm_cost`), intensity,
    flops_per_s, bytes_per_s, gb_per_s, per_token_s."""
    return matmul_sweep([batch], d_in, d_out, dtype, device, progress=False, warmup=warmup,
                        repeats=repeats)[0]


def matmul_sweep(batches: Sequence[int] | None = None, d_in: int | None = None, d_out: int | None = None,
                 dtype=None, device=None, progress: bool = True, *, warmup: int | None = None,
                 repeats: int | None = None) -> list[Record]:
    """:func:`matmul_time` at each batch size (default ``sizes_for(device).batches``), sharing one
    weight; shows a tqdm progress bar unless ``progress=False``."""
    from tqdm.auto import tqdm

    dev = _device(device)
    sizes = sizes_for(dev)
    batches, d_in, d_out = _check_shape(sizes.batches if batches is None else batches,
                                        sizes.d_in if d_in is None else d_in,
                                        sizes.d_out if d_out is None else d_out)
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


def peak_matmul_flops(device=None, dtype=None, n: int | None = None, *, warmup: int | None = None,
                      repeats: int | None = None) -> Record:
    """The measured compute roof: the best FLOP/s of two GEMMs far above any ridge, a square
    ``n x n x n`` one and a wide decode-shaped ``(n/4) x n x n`` one (``n`` from :func:`sizes_for`).

    Why two: on GPUs the square GEMM is the fastest, but some CPU libraries' bf16 kernels run
    decode-shaped GEMMs faster than square ones, and a roof that measured decode points poke through
    teaches nothing. ``extra`` holds ``flops_per_s`` (the best) and both shapes' results.
    """
    dev = _device(device)
    sizes = sizes_for(dev)
    n = sizes.peak_n if n is None else _check_int("n", n, 4)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    warmup = sizes.warmup if warmup is None else warmup
    repeats = sizes.repeats if repeats is None else repeats
    wt = _weight(n, n, dt, dev)
    recs = []
    for m in (n, n // 4):
        x = torch.randn(m, n, device=dev, dtype=dt)
        y = torch.empty(m, n, device=dev, dtype=dt)
        recs.append(_matmul_record(x, wt, y, sizes, warmup, repeats, name="peak_matmul"))
    best = max(recs, key=lambda r: r.flops_per_s)
    best.extra["shapes"] = [{**r.params, "flops_per_s": r.flops_per_s, "median_s": r.median_s} for r in recs]
    return best


@dataclass(frozen=True)
class MeasuredRoof:
    """A roofline measured on this device: ``bandwidth`` (bytes/s) and ``flops`` (FLOP/s), with the
    records they came from. Unpacks as a pair: ``bw, flops = measured_roofline()``."""

    bandwidth: float
    flops: float
    records: tuple[Record, ...] = ()

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two roofs meet."""
        return self.flops / self.bandwidth

    def __iter__(self):
        return iter((self.bandwidth, self.flops))

    def as_accelerator(self, dtype: str, name: str = "this device (measured)"):
        """This roof as a ``hardware.Accelerator``, so ``cost.roofline_time`` can predict times on it."""
        from specnotes.hardware import Accelerator

        return Accelerator(name, {dtype_name(dtype): self.flops}, self.bandwidth, 0.0, "measured: copy_ and GEMM")


def measured_roofline(device=None, dtype=None) -> MeasuredRoof:
    """(bandwidth, flops) measured here: :func:`copy_bandwidth` and :func:`peak_matmul_flops`.
    This is how the CPU (which has no datasheet entry) gets a roofline."""
    dev = _device(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    copy = copy_bandwidth(dev)
    peak = peak_matmul_flops(dev, dt)
    return MeasuredRoof(copy.bytes_per_s, peak.flops_per_s, (copy, peak))


# ----------------------------------------------------------------------------------------------
# the knee of a time-vs-batch curve


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
        raise ValueError(f"batches and times differ in length ({len(batches)} vs {len(times)})")
    if len(batches) < 3:
        raise ValueError(f"need at least 3 points to find a knee, got {len(batches)}")
    if any(b <= 0 for b in batches) or any(t <= 0 for t in times):
        raise ValueError("batches and times must all be > 0")
    pts = sorted(zip(batches, times, strict=True))
    if len({b for b, _ in pts}) != len(pts):
        raise ValueError("batch sizes must be distinct")
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


# ----------------------------------------------------------------------------------------------
# a transformer layer stack: decode vs verify vs draft passes (Chapters 2 and 4)


@dataclass(frozen=True)
class StackSizes:
    """Layer stacks and sweep sizes for one device.

    target, draft: the same fraction of each model's layers, so their time ratio is the full
        models' ratio (LM heads left out: a stack is layers only).
    batches: batch sizes of the sweep; context: cached tokens per sequence; k: draft tokens.
    """

    target: object  # cost.ModelShape
    draft: object
    batches: tuple[int, ...]
    context: int
    k: int
    warmup: int
    repeats: int
    budget_s: float | None


def stack_sizes(device: torch.device | str | None = None) -> StackSizes:
    from specnotes.stack import stack_shape

    dev = _device(device)
    if dev.type == "cuda":
        return StackSizes(
            # 4 of Llama-3-8B's 32 layers and 2 of Llama-3.2-1B's 16: an eighth of each model.
            target=stack_shape(4, 4096, 32, 8, 14336, name="Llama-3-8B, 4 of 32 layers"),
            draft=stack_shape(2, 2048, 32, 8, 8192, name="Llama-3.2-1B, 2 of 16 layers"),
            # 1 .. 512 sequences: B(k+1) crosses every GPU's ridge (~200-400 tokens) well inside the sweep.
            batches=tuple(2**i for i in range(10)),
            context=512, k=4, warmup=5, repeats=15, budget_s=2.0,
        )
    return StackSizes(
        # Llama-shaped but small: 2 layers of d=2048 (180 MB of bf16 weights, several times a CPU's L3),
        # and a draft an eighth of its size. A CPU's ridge is a few tokens, so B up to 16 shows it all.
        target=stack_shape(2, 2048, 16, 4, 5632, name="2 layers, d=2048"),
        draft=stack_shape(1, 1024, 8, 2, 2816, name="1 layer, d=1024"),
        batches=(1, 2, 4, 8, 16),
        context=256, k=4, warmup=2, repeats=7, budget_s=1.0,
    )


def stack_time(stack, batch: int, new_tokens: int, context: int = 0, speculating: int | None = None, *,
               warmup: int = 2, repeats: int = 5, budget_s: float | None = None) -> Record:
    """Time one forward pass of ``stack`` (a ``specnotes.stack.LayerStack``): ``batch`` sequences
    adding ``new_tokens`` each after ``context`` cached tokens (or, with ``speculating`` = s, only the
    first s adding ``new_tokens`` and the rest one). ``extra`` holds the cost model's FLOPs and bytes
    for the same pass and the achieved rates."""
    from specnotes import cost
    from specnotes.stack import forward, pass_inputs

    _check_int("batch", batch, 1)
    _check_int("new_tokens", new_tokens, 1)
    _check_int("context", context, 0)
    x, caches, groups = pass_inputs(stack, batch, new_tokens, context, speculating)
    with torch.inference_mode():
        timing = time_fn(lambda: forward(stack, x, caches, context, groups), warmup=warmup, repeats=repeats,
                         device=stack.device, budget_s=budget_s)
    if speculating is None or speculating == batch:
        model = cost.forward_cost(stack.shape, batch, new_tokens, context)
    else:
        model = cost.mixed_verify_cost(stack.shape, batch, new_tokens - 1, speculating, context)
    t = timing.median
    extra = {"flops": model.flops, "bytes": model.bytes, "tokens": model.tokens, "intensity": model.intensity,
             "flops_per_s": model.flops / t, "bytes_per_s": model.bytes / t, "gb_per_s": model.bytes / t / 1e9,
             "per_token_s": t / model.tokens}
    params = {"stack": stack.shape.name, "batch": batch, "new_tokens": new_tokens, "context": context,
              "speculating": batch if speculating is None else speculating}
    return Record.from_timing("stack_pass", params, timing, stack.device, stack.dtype, extra)


def stack_sweep(stack, batches: Sequence[int], new_tokens: Sequence[int] = (1, 5), context: int = 0,
                progress: bool = True, **timing) -> list[Record]:
    """:func:`stack_time` for every (batch, new_tokens) pair, with a progress bar."""
    from tqdm.auto import tqdm

    pairs = [(b, n) for b in batches for n in new_tokens]
    bar = tqdm(pairs, desc=f"{stack.shape.name}: passes", disable=not progress)
    records = []
    for b, n in bar:
        bar.set_postfix(B=b, n=n)
        records.append(stack_time(stack, b, n, context, **timing))
    return records


def stack_overhead(shape, device=None, dtype=None, context: int = 0, repeats: int = 30) -> float:
    """The per-pass floor t0 of a layer stack: the fastest pass of a stack with ``shape``'s layers and
    kernels but tiny dimensions (4 per head), whose roofline time is nanoseconds. Seconds."""
    from specnotes.stack import build_stack, stack_shape

    dev = _device(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    tiny = stack_shape(shape.n_layers, 4 * shape.n_heads, shape.n_heads, shape.n_kv_heads, 8, name="floor")
    return min(stack_time(build_stack(tiny, dev, dt), 1, 1, context, warmup=3, repeats=repeats).samples)
