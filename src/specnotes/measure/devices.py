"""Which device and dtype the book measures on, and how big to make the work there.

- :func:`pick_device`: ``$SPECNOTES_DEVICE``, else CUDA, else Apple MPS, else the CPU.
- :func:`dtype_choice` / :func:`default_dtype`: ``$SPECNOTES_DTYPE`` (float32, bfloat16, float16, or
  fp32/bf16/fp16), else bf16 on GPUs with native bf16 (compute capability >= 8), fp16 on older GPUs
  (T4) and MPS; on a CPU a probe of under two seconds picks the dtype whose (k+1)-row GEMM costs closest
  to its 1-row GEMM over a weight larger than the last-level cache: the dtype with the widest
  memory-bound range, where the physics the book teaches shows (:func:`choose_dtype`).
- :func:`sizes_for`: problem sizes for the device, so chapters never hard-code them.
- :func:`cache_bytes`, :func:`memory_bytes`: its last-level cache and the memory a measurement may fill.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specnotes import validate

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
DEVICE_ENV = "SPECNOTES_DEVICE"  # "cpu", "cuda:1", ... overrides pick_device()
DTYPE_ENV = "SPECNOTES_DTYPE"  # "float32", "bfloat16", "float16" (or fp32, bf16, fp16) overrides default_dtype()
PROBE_ROWS = 5  # k + 1 with the book's k = 4: the rows of a verify pass at B = 1
TIE = 1.10  # probe ratios within 10% of the best are a tie, broken in the order of DTYPES (bf16 first)
PROBE_BYTES = 64 * 2**20  # the probe's weight in every dtype: twice a typical L3, and three dtypes in < 2 s
PROBE_ORDER = ("bf16", "fp32", "fp16")  # fp16 last, and only if time is left: CPUs rarely have a fast fp16 path

MiB = 2**20
GiB = 2**30


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``"bf16"``/``"fp16"``/``"fp32"`` (or ``"bfloat16"``, ``"float16"``, ``"float32"``, or the torch
    dtype itself) -> torch dtype. Anything else: ValueError naming the allowed values."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
        raise validate.BadArgument(f"dtype {dtype} is not supported; use one of {sorted(DTYPES)} or the torch "
                                   f"dtypes {list(DTYPES.values())}")
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = _DTYPE_ALIASES.get(key, key)
        if key in DTYPES:
            return DTYPES[key]
    raise validate.BadArgument(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)} "
                               f"(or {sorted(_DTYPE_ALIASES)}) or a torch dtype")


def dtype_name(dtype: torch.dtype | str) -> str:
    """Short name used in records and in the cost model: ``"bf16"``, ``"fp16"`` or ``"fp32"``."""
    dt = as_dtype(dtype)
    return next(k for k, v in DTYPES.items() if v == dt)


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

    A device of the wrong type is a TypeError, an unknown or unavailable one a ValueError, naming the
    argument (``device``, or ``$SPECNOTES_DEVICE``) and the allowed values (never a silent fall-back)."""
    name = "device" if prefer is not None else DEVICE_ENV
    prefer = prefer if prefer is not None else os.environ.get(DEVICE_ENV) or None
    if prefer is not None:
        allowed = "'cpu', 'cuda', 'cuda:N' or 'mps'"
        if not isinstance(prefer, (str, torch.device)):
            raise validate.BadArgumentType(f"{name} must be a str or torch.device ({allowed}), got {prefer!r} "
                                           f"({type(prefer).__name__})")
        try:
            dev = torch.device(prefer)
        except RuntimeError:
            raise validate.BadArgument(f"{name} must be {allowed}, got {prefer!r}") from None
        if not _available(dev):
            raise validate.BadArgument(f"{name} {prefer!r} is not available here; 'cpu' always is")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _available(torch.device("mps")):
        return torch.device("mps")
    return torch.device("cpu")


def resolve(device: torch.device | str | None) -> torch.device:
    """``device`` as a torch.device, checked by :func:`pick_device` (known and available); None means
    :func:`pick_device`'s choice."""
    return device if isinstance(device, torch.device) and device.type == "cpu" else pick_device(device)


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
    """The hardware behind ``device``: the GPU's name, or the CPU model with the number of threads
    torch uses and its vector capability (e.g. ``"AMD EPYC (2 threads, AVX2)"``)."""
    dev = resolve(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    return f"{_cpu_model()} ({torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()})"


@contextlib.contextmanager
def num_threads(n: int | None):
    """``with num_threads(2): ...`` sets torch's CPU thread count inside the block and restores it.
    ``None`` leaves it as is."""
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(validate.integer("num_threads", n, low=1))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def llc_bytes() -> int | None:
    """Size of the CPU's last-level cache from Linux sysfs, or None where unknown."""
    best = None
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:].upper(), 1)
        digits = size.rstrip("KkMmGg")
        if digits.isdigit():
            best = max(best or 0, int(digits) * mult)
    return best


def cache_bytes(device: torch.device | str | None = None) -> int:
    """The device's last-level cache in bytes: a GPU's L2, a CPU's L3 from sysfs (32 MiB where sysfs does
    not say), 0 on MPS (not known)."""
    dev = resolve(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).L2_cache_size
    if dev.type == "mps":
        return 0
    return llc_bytes() or 32 * MiB


def _meminfo(field: str) -> int | None:
    """A field of Linux's /proc/meminfo in bytes (None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            line = next((line for line in f if line.startswith(f"{field}:")), "")
    except OSError:
        return None
    digits = line.split()[1:2]
    return int(digits[0]) * 1024 if digits and digits[0].isdigit() else None


def _cgroup_limit() -> int | None:
    """The container's memory limit in bytes (cgroup v2, then v1), None where there is none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def memory_bytes(device: torch.device | str | None = None) -> int:
    """The memory a measurement on ``device`` may fill, in bytes: a GPU's total memory; MPS's recommended
    working set; on the CPU the memory available now (Linux's MemAvailable, else the physical memory),
    at most the container's limit, and 8 GiB where neither can be read."""
    dev = resolve(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory
    if dev.type == "mps":
        return int(torch.mps.recommended_max_memory())
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        physical = None
    known = [m for m in (_meminfo("MemAvailable") or physical, _cgroup_limit()) if m]
    return min(known) if known else 8 * GiB


def fits_in_cache(nbytes: float, device: torch.device | str | None = None) -> bool:
    """Whether ``nbytes`` fit in the device's last-level cache (:func:`cache_bytes`), so a kernel that
    rereads them may stream faster than the DRAM/HBM roof."""
    nbytes = validate.number("nbytes", nbytes, low=0)
    return nbytes <= cache_bytes(device)


# ---------------------------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one device.

    copy_bytes: buffer size for ``copy_bandwidth``; several times the last-level cache so the copy
        streams from DRAM/HBM instead of hitting cache.
    d_in, d_out: the weight of the decode GEMM (``y = x @ W.T``, ``W`` is ``[d_out, d_in]``), larger
        than the last-level cache, like a real layer's weights.
    batches: the batch sizes of a time-vs-batch sweep (powers of two, from GEMV to past the ridge).
    peak_n: side of the square GEMM that measures the compute roof.
    warmup, repeats: timing defaults for this device.
    budget_s: seconds one measured point may take (see ``time_fn``); None: no limit.
    min_s: seconds of samples a fast point gathers at least (``time_fn``: fastest samples from a
        window longer than a scheduler stall).
    """

    copy_bytes: int
    d_in: int
    d_out: int
    batches: tuple[int, ...]
    peak_n: int
    warmup: int
    repeats: int
    budget_s: float | None = None
    min_s: float = 0.0

    @property
    def weight_elems(self) -> int:
        return self.d_in * self.d_out


def sizes_for(device: torch.device | str | None = None) -> Sizes:
    """Sizes for ``device`` (the why of each number is in the comments)."""
    dev = resolve(device)
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
    llc = llc_bytes() or 32 * MiB
    return Sizes(
        # 4x the last-level cache, at least 256 MiB and at most 1 GiB (two buffers must fit in a laptop's
        # RAM; some virtual machines report the whole socket's L3, 500 MB, for a 2-core slice).
        copy_bytes=min(GiB, max(256 * MiB, 4 * llc)),
        # 4096 x 8192 bf16 = 64 MiB: twice a 32 MiB L3, so every step streams the weight from DRAM (a weight
        # that fits in L3 measures the cache, not memory), yet a B=1 GEMV takes only ~5-15 ms on two cores.
        # A bigger L3 gets a proportionally wider weight.
        d_in=4096,
        d_out=8192 * min(4, max(1, math.ceil(2 * llc / (64 * MiB)))),
        # 1 .. 128: from the GEMV to past a CPU's knee (a few tokens without bf16 units, tens with them).
        batches=tuple(2**i for i in range(8)),
        # 1024^3 x 2 = 2.1 GFLOP: 0.05-0.3 s on two cores, enough to reach the GEMM kernel's plateau.
        peak_n=1024,
        # few repeats keep a chapter's sweep to seconds; 3 warm-ups because the first points are noisiest;
        # at most ~1 s per point (slow points get fewer samples, never fewer than 3).
        warmup=3,
        repeats=7,
        budget_s=1.0,
        # a 2-core machine shared with other jobs stalls a process for up to ~0.2 s at a time
        min_s=0.25,
    )


# ---------------------------------------------------------------------------------------------- dtype


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
    from specnotes.measure.timing import time_fn

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
