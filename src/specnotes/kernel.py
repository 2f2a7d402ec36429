"""The acceptance step compiled for this CPU: ``csrc/accept.c``, built on first use with the machine's C compiler
and loaded with ctypes (no torch headers: a small build), for ``fused`` to call on fp32 logits.

Why C: an exact sampler from logits must exponentiate every logit of every row it reads, and torch has no kernel
that only sums exponentials: its logsumexp writes temporaries, its softmax writes the probabilities and passes over
each row three times, and torch.exp uses a slower exp than the softmax's. The C loop takes each row's normalizer in
one pass, and passes again only over the two rows a sequence stops on, while they are in cache.

Threads: torch's thread count, through OpenMP. Built with -fopenmp the library needs libgomp.so.1, and the loader
gives it the one torch already loaded, so its loops run on torch's own threads rather than on a second pool that
would fight them for the cores. A compiler without OpenMP (Apple's clang) builds it single-threaded.
With no compiler, or with ``SPECNOTES_KERNEL=0``, ``available()`` is False and ``fused`` uses torch alone.

Loading: a shared library runs with the reader's rights, and its cache name is a hash anyone can compute. So it is
loaded only from a cache folder this user owns and no one else can write (created 0700; a folder that fails this
is refused, and the library is built into a fresh ``mkdtemp`` folder instead, with the reason in ``how_built()``);
only if it and its sidecar (size and sha256, written when it was built) are this user's and agree (else it is built
again: a truncated file would kill the process with SIGBUS when mapped); and a new build is first called once in a
child process, so that a library this CPU cannot run (SIGILL) means no kernel, and why, not a dead process."""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
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
    """What -march=native depends on: the CPU's model and flags (Linux; on macOS, sysctl's CPU features), else what
    platform says of it."""
    if platform.system() == "Darwin":
        features = sysctl_cpu()
        if features:
            return features
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(dict.fromkeys(s for s in lines if s.startswith(("model name", "flags", "Features"))))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def sysctl_cpu() -> str:
    """macOS: the CPU's name and features (``sysctl machdep.cpu hw.optional``: on Intel, machdep.cpu.features and
    leaf7_features; on Apple silicon, hw.optional.arm.FEAT_*), or "" if sysctl does not answer."""
    try:
        done = subprocess.run(["sysctl", "machdep.cpu", "hw.optional"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return "\n".join(line for line in done.stdout.splitlines() if line.startswith(("machdep.cpu.brand_string",
                     "machdep.cpu.features", "machdep.cpu.leaf7_features", "machdep.cpu.extfeatures", "hw.optional")))


def cache_dirs() -> list[Path]:
    """Where the library is cached: the user's cache (a folder of its own, created 0700 by this module), else the
    system's temporary folder."""
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specnotes" / "kernel"
    return [home, Path(tempfile.gettempdir()) / f"specnotes-{os.getuid() if hasattr(os, 'getuid') else 'user'}"]


def untrusted(path: Path) -> str | None:
    """Why ``path`` (a cache folder, or a file in one) may not be trusted, or None: it must be a folder or file of
    this user's own, not a symbolic link, that neither the group nor others can write."""
    try:
        st = os.lstat(path)
    except OSError as error:
        return f"{path}: {error.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def private_folder(folder: Path) -> str | None:
    """Create ``folder`` (mode 0700) if it is missing; why it may not hold libraries this process loads, or None."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        return f"{folder} cannot be created: {error.strerror or error}"
    return untrusted(folder)


def sidecar(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def fingerprint(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def damaged(library: Path) -> str | None:
    """Why the cached ``library`` may not be loaded, or None: it and its sidecar must be trusted files, and the
    library's size and sha256 those the sidecar recorded when it was built (and passed its probe)."""
    for path in (library, sidecar(library)):
        why = untrusted(path)
        if why:
            return why
    try:
        if fingerprint(library.read_bytes()) != sidecar(library).read_text():
            return f"{library} is not the library its sidecar describes (size and sha256)"
    except (OSError, UnicodeDecodeError) as error:
        return f"{library}: {error}"
    return None


# Run in a child process on a new library: loads it (with the OpenMP runtime this process uses, where it has one)
# and calls both functions once on a small input, so that an instruction this CPU lacks kills the child, not us.
PROBE = """
import ctypes, math, sys
for dependency in sys.argv[2:]:
    ctypes.CDLL(dependency, mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[1])
B, k, V = 3, 2, 300
f32, i64 = ctypes.c_float, ctypes.c_int64
target = (f32 * (B * (k + 1) * V))(*[math.sin(0.37 * i) for i in range(B * (k + 1) * V)])
draft = (f32 * (B * k * V))(*[math.cos(0.41 * i) for i in range(B * k * V)])
tokens, u = (i64 * (B * k))(*[7 * i % V for i in range(B * k)]), (f32 * (B * k))(*[0.5] * (B * k))
v = (f32 * B)(0.3, 0.6, 0.9)
out, accepted, token = (f32 * B)(), (i64 * B)(), (i64 * B)()
lib.log_normalizers(target, i64(B), i64(V), f32(1.0), 2, out)
lib.accept_step(target, draft, 0, tokens, u, v, i64(B), i64(k), i64(V), f32(1.0), 2, accepted, token)
assert all(math.isfinite(x) for x in out) and all(0 <= a <= k for a in accepted) and all(0 <= t < V for t in token)
"""


def openmp_runtime() -> list[str]:
    """The OpenMP runtime this process has loaded (torch's libgomp), which the kernel uses in this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return list(dict.fromkeys(line.split(None, 5)[-1] for line in maps.splitlines()
                              if "/libgomp" in line and line.split(None, 5)[-1].startswith("/")))


def probe(library: Path) -> str | None:
    """Why the new ``library`` cannot run here, or None: it is loaded and called once in a child process."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", PROBE, str(library), *openmp_runtime()],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return f"its probe did not run: {error}"
    said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        hint = " (an instruction this CPU lacks)" if name == "SIGILL" else ""
        return f"it was killed by {name}{hint} when called in a probe process{': ' + said if said else ''}"
    if done.returncode:
        return f"its probe failed: {said or f'exit status {done.returncode}'}"
    return None


def key(source: bytes, how: str) -> str:
    """The cache key: anyone can compute it (it is a hash of public things), which is why a library is loaded only
    from a folder the user alone can write."""
    return hashlib.sha256(b"\0".join([source, how.encode(), cpu_key().encode()])).hexdigest()[:16]


def build(flag_sets=FLAGS) -> tuple[Path | None, str]:
    """The compiled library, cached by source, compiler, flags and CPU, and how it was built; or (None, why not).
    Each set of ``flag_sets`` is tried in turn, in the first cache folder that is private (this user's, created
    0700, writable by no one else) and can be written; with none, in a fresh private temporary folder. A cached
    library is used only if it matches its sidecar (else it is built again); a new one is probed in a child
    process before it is cached, and one that dies there is not used."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler found"
    source, errors, notes, refused, fresh = SOURCE.read_bytes(), [], {}, {}, []
    said = lambda how: f"{how} ({'; '.join(notes)})" if notes else how  # noqa: E731
    for flags in flag_sets:
        how = f"{cc} {' '.join(flags)}"
        name = f"accept-{key(source, how)}.so"
        for folder in [*cache_dirs(), None]:
            if folder is None:  # no cache folder would do: a fresh one, made once
                fresh = fresh or [fresh_folder()]
                folder = fresh[0]
            else:
                if folder not in refused:
                    refused[folder] = private_folder(folder)
                if refused[folder]:
                    notes[refused[folder]] = None
                    continue
            target = folder / name
            if target.exists() or sidecar(target).exists():
                why = damaged(target)
                if why is None:
                    return target, said(how)
                notes[f"built again: {why}"] = None
            try:
                with tempfile.TemporaryDirectory(dir=folder) as tmp:
                    out, stamp = Path(tmp) / "accept.so", Path(tmp) / "accept.so.sha256"
                    subprocess.run([cc, *flags, "-shared", "-fPIC", str(SOURCE), "-o", str(out), "-lm"], check=True,
                                   capture_output=True, timeout=120)
                    why = probe(out)
                    if why is not None:
                        errors.append(f"{how}: {why}")
                        break  # these flags give a library that does not run here, in any folder
                    stamp.write_text(fingerprint(out.read_bytes()))
                    out.chmod(0o755)  # whatever the umask: writable by this user alone
                    stamp.chmod(0o644)
                    os.replace(out, target)
                    os.replace(stamp, sidecar(target))
                if fresh and folder == fresh[0]:
                    notes[f"built in {folder}, for this process only"] = None
                return target, said(how)
            except FileNotFoundError as error:
                if error.filename != cc:
                    errors.append(f"{how} in {folder}: {error}")
                    continue
                return None, f"the C compiler {cc} cannot be run: {error.strerror}"
            except subprocess.CalledProcessError as error:
                errors.append(f"{how}: {error.stderr.decode(errors='replace').strip()[:300]}")
                break  # these flags fail in any folder
            except (OSError, subprocess.SubprocessError) as error:
                errors.append(f"{how} in {folder}: {error}")
    return None, "; ".join(errors + list(notes))


def fresh_folder() -> Path:
    """A new private temporary folder (mkdtemp: mode 0700, a name no one could guess), removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="specnotes-kernel-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


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
        off = os.environ.get("SPECNOTES_KERNEL") == "0"
        path, how = (None, "disabled by SPECNOTES_KERNEL=0") if off else build(FLAGS)
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
    """``accept_step`` (csrc/accept.c) over every sequence -> (accepted [B] int64, -1 where a drafted token lies
    outside [0, V) or a row it read has no finite normalizer; the last token [B] int64). Tensors fp32 (draft_tokens
    int64), contiguous, on the CPU."""
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
