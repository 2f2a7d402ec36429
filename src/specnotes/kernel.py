"""The acceptance step compiled for this CPU: ``csrc/accept.c``, built on first use with the machine's C compiler
and loaded with ctypes (no torch headers: a small build), for ``fused`` to call on fp32 logits.

Why C: an exact sampler from logits must exponentiate every logit of every row it reads, and torch has no kernel
that only sums exponentials: its logsumexp writes temporaries, its softmax writes the probabilities and passes over
each row three times, and torch.exp uses a slower exp than the softmax's. The C loop takes each row's normalizer in
one pass, and passes again only over the two rows a sequence stops on, while they are in cache.

Threads: torch's thread count, through OpenMP. Built with -fopenmp the library needs libgomp.so.1, and the loader
gives it the one torch already loaded, so its loops run on torch's own threads rather than on a second pool that
would fight them for the cores. A compiler without OpenMP (Apple's clang) builds it single-threaded.
With no compiler, or with ``SPECNOTES_KERNEL=0``, ``available()`` is False and ``fused`` uses torch alone."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).parent / "csrc" / "accept.c"
# tried in turn, the first that builds; -fno-trapping-math lets the compiler turn exp_fast's clamps into vector selects
# in the plain loops (the C file's own vector loops cover AVX-512 and AVX2): without it GCC leaves them scalar
FLAGS = (("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"),
         ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"),
         ("-O3", "-fno-math-errno", "-fno-trapping-math"))
_state: dict = {}


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def cpu_key() -> str:
    """What -march=native depends on: the CPU's model and flags (Linux), else what platform says of it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(dict.fromkeys(s for s in lines if s.startswith(("model name", "flags", "Features"))))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def cache_dirs() -> list[Path]:
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specnotes"
    return [home, Path(tempfile.gettempdir()) / f"specnotes-{os.getuid() if hasattr(os, 'getuid') else 'user'}"]


def build(flag_sets=FLAGS) -> tuple[Path | None, str]:
    """The compiled library, cached by source, compiler, flags and CPU, and how it was built; or (None, why not).
    Each set of ``flag_sets`` is tried in turn, in the first cache folder that can be written."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler found"
    source, errors = SOURCE.read_bytes(), []
    for flags in flag_sets:
        how = f"{cc} {' '.join(flags)}"
        key = hashlib.sha256(b"\0".join([source, how.encode(), cpu_key().encode()])).hexdigest()[:16]
        for cache in cache_dirs():
            target = cache / f"accept-{key}.so"
            if target.exists():
                return target, how
            try:
                cache.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=cache) as tmp:
                    out = Path(tmp) / "accept.so"
                    subprocess.run([cc, *flags, "-shared", "-fPIC", str(SOURCE), "-o", str(out), "-lm"], check=True,
                                   capture_output=True, timeout=120)
                    os.replace(out, target)
                return target, how
            except subprocess.CalledProcessError as error:
                errors.append(f"{how}: {error.stderr.decode(errors='replace').strip()[:300]}")
                break  # these flags fail in any folder
            except (OSError, subprocess.SubprocessError) as error:
                errors.append(f"{how} in {cache}: {error}")
    return None, "; ".join(errors)


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    p, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
    lib.accept_step.argtypes = [p, p, i32, p, p, p, i64, i64, i64, f32, i32, p, p]
    lib.accept_step.restype = None
    lib.log_normalizers.argtypes = [p, i64, i64, f32, i32, p]
    lib.log_normalizers.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The library this process uses (built once), or None."""
    if "lib" not in _state:
        path, how = (None, "disabled by SPECNOTES_KERNEL=0") if os.environ.get("SPECNOTES_KERNEL") == "0" else build()
        lib = None
        if path is not None:
            try:
                lib = load(path)
            except (OSError, AttributeError) as error:  # a library the loader rejects, or one without our functions
                how = f"{path} did not load: {error}"
        _state["lib"], _state["how"] = lib, how
    return _state["lib"]


def available() -> bool:
    return library() is not None


def how_built() -> str:
    """The compiler and flags the kernel was built with, or why there is none."""
    library()
    return _state["how"]


def usable(*tensors: torch.Tensor | None) -> bool:
    """Whether the kernel can take these tensors as they are: fp32, contiguous, on the CPU."""
    return available() and all(t is None or (t.dtype == torch.float32 and t.device.type == "cpu"
                                             and t.is_contiguous()) for t in tensors)


def accept_step(draft_tokens, draft, draft_is_probs, target_logits, u, v, temperature) -> tuple[torch.Tensor, ...]:
    """``accept_step`` (csrc/accept.c) over every sequence -> (accepted [B] int64, -1 where a row it read has no
    finite normalizer; the last token [B] int64). Tensors fp32 (draft_tokens int64), contiguous, on the CPU."""
    lib = library()
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    draft = target_logits if draft is None else draft  # k = 0: no draft row is read
    accepted, token = torch.empty(B, dtype=torch.int64), torch.empty(B, dtype=torch.int64)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    lib.accept_step(ptr(target_logits), ptr(draft), int(draft_is_probs), ptr(draft_tokens), ptr(u), ptr(v), B, k, V,
                    1.0 / temperature, torch.get_num_threads(), ptr(accepted), ptr(token))
    return accepted, token


def log_normalizers(logits: torch.Tensor, temperature: float, out: torch.Tensor) -> None:
    """log Σ exp(l / T) of each row of ``logits`` [R, V] (fp32, contiguous) into ``out`` [R]."""
    lib = library()
    R, V = logits.shape
    lib.log_normalizers(ctypes.c_void_p(logits.data_ptr()), R, V, 1.0 / temperature, torch.get_num_threads(),
                        ctypes.c_void_p(out.data_ptr()))


def function_source(name: str) -> str:
    """The text of the C function ``name`` in csrc/accept.c, with the comment above it (for Chapter 7 to show)."""
    lines = SOURCE.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if not line.startswith((" ", "#", "/*", "}"))
                  and re.search(rf"\b{re.escape(name)}\(", line)), None)
    if start is None:
        raise ValueError(f"no function {name!r} in {SOURCE.name}")
    top = start
    while top > 0 and lines[top - 1].strip() and not lines[top - 1].startswith(("}", "#")):
        top -= 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[top: end + 1])
