"""Which device the book measures on, and how big to make the work there.

- :func:`pick_device`: ``$SPECNOTES_DEVICE``, else CUDA, else Apple MPS, else the CPU.
- :func:`as_dtype` / :func:`dtype_name`: the dtypes the book measures in, by name. Which one a device
  measures in is :mod:`specnotes.measure.dtypes` (a probe that times GEMMs, so it sits above the timer).
- :func:`sizes_for`: problem sizes for the device, so chapters never hard-code them.
- :func:`cache_bytes`, :func:`memory_bytes`: its last-level cache and the memory a measurement may fill.

This module is the bottom of ``measure``: it imports nothing else from it.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from specnotes import validate
from specnotes.analytic import hardware

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
DEVICE_ENV = "SPECNOTES_DEVICE"  # "cpu", "cuda:1", ... overrides pick_device()
DTYPE_ENV = "SPECNOTES_DTYPE"  # "float32", "bfloat16", "float16" (or fp32, bf16, fp16) overrides default_dtype()

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


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "fma")


def cpu_info() -> dict:
    """What tells one x86 CPU kind from another where ``device_name`` cannot (every Xeon reads "Intel(R)
    Xeon(R) Processor"): vendor, family, model and the flags that decide a GEMM's path (``CPU_FLAGS``: bf16
    units or not, AMX or not), from /proc/cpuinfo; what cannot be read is None."""
    fields = {"vendor_id": None, "cpu family": None, "model": None, "flags": ""}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in fields and fields[key] in (None, ""):
                    fields[key] = value.strip()
                if not line.strip() and fields["vendor_id"] is not None:
                    break
    except OSError:
        pass
    flags = set(fields["flags"].split())
    number = lambda value: int(value) if value and value.isdigit() else None  # noqa: E731
    return {"vendor": fields["vendor_id"], "family": number(fields["cpu family"]), "model": number(fields["model"]),
            "flags": [flag for flag in CPU_FLAGS if flag in flags] if flags else None,
            "capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine()}


# (vendor, family, model) of the CPUs that recorded this book's numbers, by Intel's family/model numbering: a virtual
# machine's "model name" often hides the generation (this one reads "Intel(R) Xeon(R) Processor @ 2.80GHz")
MICROARCHITECTURES = {  # (vendor, family, model) as /proc/cpuinfo gives them: the kinds the book has met
    ("GenuineIntel", 6, 106): "Ice Lake server", ("AuthenticAMD", 25, 1): "Zen 3", ("AuthenticAMD", 25, 17): "Zen 4",
    ("AuthenticAMD", 26, 2): "Zen 5"}


def cpu_details() -> dict:
    """What /proc/cpuinfo says of this CPU (Linux; empty elsewhere): model name, family, model, stepping, logical
    CPUs, the vector extensions that matter here, and the load average when asked."""
    info, flags, cpus = {}, set(), 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "processor":
                    cpus += 1
                elif key in ("vendor_id", "model name", "cpu family", "model", "stepping") and key not in info:
                    info[key] = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        return {}
    family, model = int(info.get("cpu family", -1)), int(info.get("model", -1))
    return {"model_name": info.get("model name"), "family": family, "model": model,
            "microarchitecture": MICROARCHITECTURES.get((info.get("vendor_id"), family, model)),
            "stepping": int(info.get("stepping", -1)), "logical_cpus": cpus,
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "amx": "amx_tile" in flags, "load_average_1_5_15": list(os.getloadavg())}


def device_name(device: torch.device | str | None = None) -> str:
    """The hardware behind ``device``: the GPU's name, or the CPU model with the number of threads
    torch uses and its vector capability (e.g. ``"AMD EPYC (2 threads, AVX2)"``)."""
    dev = resolve(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    threads = torch.get_num_threads()
    return f"{_cpu_model()} ({threads} thread{'s' * (threads != 1)}, {torch.backends.cpu.get_cpu_capability()})"


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


def detect_accelerator(device=None) -> hardware.Accelerator | None:
    """The table row of the GPU this process would use; None on a CPU or an unknown GPU."""
    device = torch.device(device) if device is not None else None
    if not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return None
    row = hardware.match_device_name(torch.cuda.get_device_name(device))
    return hardware.DEVICES[row] if row else None
