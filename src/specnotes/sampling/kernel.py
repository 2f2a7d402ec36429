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

Loading (issue 45): a shared library runs with the reader's rights, its cache name is a hash anyone can compute,
and another user who can rename any folder on the way to it can swap in their own library, during the build or
between a check and the load. So no step trusts a path twice:
- Folders are opened from / one at a time, each through the descriptor of the one above, O_DIRECTORY | O_NOFOLLOW
  (``open_folder``). Every folder above the cache must be root's or this user's, writable by no one else unless it
  has the sticky bit (as /tmp has); a symbolic link is followed only inside such a folder. The cache folder itself
  must be this user's (created 0700) and writable by no one else, an ACL included (it shows in the group bits).
  A folder that fails is refused, with the reason in ``how_built()``, and the next one is tried; with none left,
  a fresh ``mkdtemp`` folder (which must pass too), for this process only.
- The compiler writes by path, so it writes (its temporary files too: TMPDIR) into a new 0700 folder made
  through the cache folder's descriptor, inside it: no other user can rename anything on that path. Its output is
  opened through that folder's descriptor and probed in a child process as /proc/self/fd/N (a library this CPU
  cannot run, SIGILL, means no kernel and why, not a dead process); its bytes are copied into new files
  (O_EXCL | O_NOFOLLOW) in the cache folder, with a sidecar (size and sha256), renamed over the entry by descriptor.
- A cached entry is opened by descriptor; its bytes are read and hashed through it and compared with its sidecar
  (a truncated file would kill the process with SIGBUS when mapped, a mismatch is built again); that same
  descriptor is what is loaded, as /proc/self/fd/N (with no /proc, a copy in a fresh private folder).
The compiler has COMPILE_SECONDS for all its runs together: one that hangs is killed with every process it
started and the torch path is used; why a run failed is said with the compiler's messages."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import hashlib
import os
import platform
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

SOURCE = Path(__file__).parent / "csrc" / "accept.c"
# tried in turn, the first that builds; -fno-trapping-math lets the compiler turn exp_fast's clamps into vector selects
# in the plain loops (the C file's own vector loops cover AVX-512 and AVX2): without it GCC leaves them scalar
FLAGS = (("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"),
         ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"),
         ("-O3", "-fno-math-errno", "-fno-trapping-math"))
COMPILE_SECONDS = 40  # for all the compiler's runs together: a compiler that hangs costs this, then torch is used
PROBE_SECONDS = 60
PROC_FD = "/proc/self/fd"  # where a process's descriptors have names (Linux)
DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_state: dict = {}
_checked: dict[str, int] = {}  # library path -> the descriptor build() checked it through, for load() to map
# Descriptors of loaded libraries stay open for the process's life: the dynamic loader knows a library by the name
# it was opened with, so a /proc/self/fd/N it has loaded must never come to name another file.
_mapped: list[int] = []


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
    system's temporary folder. An empty or relative XDG_CACHE_HOME is ignored, as the XDG spec says (an empty one
    put the cache in the current folder)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    home = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return [home / "specnotes" / "kernel", Path(tempfile.gettempdir()) / f"specnotes-{user}"]


class Refused(OSError):
    """A folder or file no library is loaded from; its message says why."""


class NoCompiler(Exception):
    """The C compiler cannot be run at all."""


def not_private(st: os.stat_result, where) -> str | None:
    """Why a cache folder, or a file in one, may not be trusted, or None: it must be this user's, and neither its
    group nor others may write it."""
    if st.st_uid != os.getuid():
        return f"{where} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{where} can be written by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def not_safe_above(st: os.stat_result, where) -> str | None:
    """Why a folder above a cache folder lets another user rename what is in it, or None: it must be root's or this
    user's, and one its group or others can write must have the sticky bit."""
    if st.st_uid not in (0, os.getuid()):
        return f"{where} is owned by uid {st.st_uid}, neither root nor this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        who = "others" if st.st_mode & stat.S_IWOTH else "its group"
        return f"{where} can be written by {who} and has no sticky bit"
    return None


def link_target(dir_fd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:  # not a link, or not there
        return None


def child_folder(dir_fd: int, name: str, where: Path, create: bool) -> int:
    """The folder ``name`` in the folder open as ``dir_fd``, opened without following a link (made 0700 first if
    it is missing and ``create``)."""
    try:
        return os.open(name, DIR, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise Refused(f"{where}: No such file or directory") from None
    except OSError as error:
        raise Refused(f"{where} cannot be opened as a folder: {error.strerror}") from None
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made by a process beside this one
    except OSError as error:
        raise Refused(f"{where} cannot be created: {error.strerror}") from None
    return child_folder(dir_fd, name, where, False)


def open_folder(path: Path, create: bool = False) -> int:
    """A descriptor of the folder ``path`` (made 0700, with any missing folder above it, if ``create``), opened from
    / one folder at a time through the descriptor of the one above, so that what was checked is what is open: each
    folder above must pass ``not_safe_above``, the folder itself ``not_private``. A symbolic link is followed only
    from a folder that passed (so only root or this user put it there). Raises Refused, saying why."""
    parts, where, links = list(Path(path).absolute().parts[1:]), Path("/"), 0
    fd = os.open("/", DIR)
    try:
        while parts:
            why = not_safe_above(os.fstat(fd), where)
            if why:
                raise Refused(why)
            name = parts.pop(0)
            target = link_target(fd, name)
            if target is None:
                child = child_folder(fd, name, where / name, create)
                os.close(fd)
                fd, where = child, where / name
                continue
            links += 1
            if links > 40:
                raise Refused(f"{path}: too many levels of symbolic links")
            link = Path(target)
            parts[:0] = link.parts[1:] if link.is_absolute() else link.parts
            if link.is_absolute():
                root = os.open("/", DIR)
                os.close(fd)
                fd, where = root, Path("/")
        why = not_private(os.fstat(fd), path)
        if why:
            raise Refused(why)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(dir_fd: int, name: str, where: Path) -> int:
    """A descriptor of the file ``name`` in the folder open as ``dir_fd``: a regular file, not a link, that passes
    ``not_private``. Raises Refused, or FileNotFoundError where there is none."""
    try:
        fd = os.open(name, FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise Refused(f"{where} is a symbolic link" if error.errno == errno.ELOOP else
                      f"{where}: {error.strerror}") from None
    st = os.fstat(fd)
    why = not_private(st, where) if stat.S_ISREG(st.st_mode) else f"{where} is not a regular file"
    if why:
        os.close(fd)
        raise Refused(why)
    return fd


def contents(fd: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, sum(map(len, chunks))):
        chunks.append(chunk)
    return b"".join(chunks)


def fingerprint(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def checked(dir_fd: int, folder: Path, name: str) -> int:
    """A descriptor of the cached library ``name`` in ``folder`` (open as ``dir_fd``) whose bytes, read through it,
    have the size and sha256 its sidecar recorded when it was built and passed its probe; both must pass
    ``open_file``. Raises Refused, or FileNotFoundError where there is no library."""
    fd = open_file(dir_fd, name, folder / name)
    try:
        try:
            side = open_file(dir_fd, name + ".sha256", folder / (name + ".sha256"))
        except FileNotFoundError:
            raise Refused(f"{folder / name} has no sidecar") from None
        try:
            recorded = contents(side)
        finally:
            os.close(side)
        if fingerprint(contents(fd)).encode() != recorded:
            raise Refused(f"{folder / name} is not the library its sidecar describes (size and sha256)")
        return fd
    except BaseException:
        os.close(fd)
        raise


def written(dir_fd: int, name: str, data: bytes, mode: int) -> int:
    """A descriptor of a new file ``name`` in the folder open as ``dir_fd`` (O_EXCL: never a file or link that was
    there) holding ``data``, with ``mode`` whatever the umask."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        return fd
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)
        raise


def stored(dir_fd: int, name: str, data: bytes) -> int:
    """``data`` cached as ``name``, with its sidecar, in the folder open as ``dir_fd``: each written to a new file
    and renamed over the entry, all through the descriptor. -> a descriptor of the library written."""
    temps = [f".{name}.{secrets.token_hex(8)}", f".{name}.sha256.{secrets.token_hex(8)}"]
    fd = written(dir_fd, temps[0], data, 0o755)
    try:
        os.close(written(dir_fd, temps[1], fingerprint(data).encode(), 0o644))
        os.replace(temps[0], name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.replace(temps[1], name + ".sha256", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return fd
    except BaseException:
        os.close(fd)
        for temp in temps:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
        raise


def loadable(fd: int) -> str:
    """A name under which the dynamic loader opens the very file open as ``fd``: /proc/self/fd/N (the same in a
    child the descriptor is passed to); with no /proc, a copy in a fresh private folder (removed at exit)."""
    if os.path.isdir(PROC_FD):
        return f"{PROC_FD}/{fd}"
    folder = Path(tempfile.mkdtemp(prefix="specnotes-kernel-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    dir_fd = open_folder(folder)  # the copy is loaded by its path: no other user may rename a folder above it
    try:
        os.close(written(dir_fd, "accept.so", contents(fd), 0o755))
    finally:
        os.close(dir_fd)
    return str(folder / "accept.so")


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


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def probe(fd: int) -> str | None:
    """Why the new library open as ``fd`` cannot run here, or None: it is loaded and called once in a child
    process."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", PROBE, loadable(fd), *openmp_runtime()], pass_fds=(fd,),
                              capture_output=True, text=True, timeout=PROBE_SECONDS)
    except (OSError, subprocess.SubprocessError) as error:
        return f"its probe did not run: {error}"
    said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode < 0:
        name = signal_name(-done.returncode)
        hint = " (an instruction this CPU lacks)" if name == "SIGILL" else ""
        return f"it was killed by {name}{hint} when called in a probe process{': ' + said if said else ''}"
    if done.returncode:
        return f"its probe failed: {said or f'exit status {done.returncode}'}"
    return None


def trimmed(stderr: bytes, limit: int = 300) -> str:
    """The compiler's messages on one line, its errors alone where it names some, cut at ``limit`` characters."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    said = " | ".join([line for line in lines if "error" in line.lower()] or lines)
    return said if len(said) <= limit else said[: limit - 1] + "…"


def compiled(cc: str, flags, folder: Path, seconds: float) -> str | None:
    """Compiles csrc/accept.c with ``flags`` into ``folder``/accept.so, the compiler's temporary files in ``folder``
    too, within ``seconds`` (after which it is killed with every process it started) -> why it failed, or None.
    Raises NoCompiler where the compiler cannot be run."""
    command = [cc, *flags, "-shared", "-fPIC", str(SOURCE), "-o", str(folder / "accept.so"), "-lm"]
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env=os.environ | {"TMPDIR": str(folder)}, start_new_session=True)
    except OSError as error:
        raise NoCompiler(f"the C compiler {cc} cannot be run: {error.strerror}") from None
    stderr, late = b"", None
    try:
        stderr = child.communicate(timeout=max(seconds, 0.01))[1]
    except subprocess.TimeoutExpired:
        late = f"did not finish within {seconds:.0f} s and was stopped"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # its own session: cc1, as and ld die with it
        with contextlib.suppress(subprocess.TimeoutExpired):
            stderr = child.communicate(timeout=5)[1]
    said = trimmed(stderr or b"")
    if late:
        return f"{late}: {said}" if said else late
    if child.returncode:
        status = (f"exit status {child.returncode}" if child.returncode > 0 else
                  f"killed by {signal_name(-child.returncode)}")
        return f"{status}: {said}" if said else f"{status}, with nothing on stderr"
    return None


def key(source: bytes, how: str) -> str:
    """The cache key: anyone can compute it (it is a hash of public things), which is why a library is loaded only
    from a folder the user alone can write."""
    return hashlib.sha256(b"\0".join([source, how.encode(), cpu_key().encode()])).hexdigest()[:16]


def built_in(cc: str, flags, folder: Path, dir_fd: int, name: str, deadline: float) -> tuple[int | None, str | None]:
    """Builds the library in a new 0700 folder inside the cache ``folder`` (open as ``dir_fd``), probes it through
    a descriptor and caches what passed as ``name`` -> (a descriptor of the cached library, None), or (None, why
    the compiler's output is of no use). Raises OSError where the folder cannot be written."""
    work = f".build-{secrets.token_hex(8)}"
    os.mkdir(work, 0o700, dir_fd=dir_fd)
    try:
        why = compiled(cc, flags, folder / work, deadline - time.monotonic())
        if why:
            return None, why
        work_fd = child_folder(dir_fd, work, folder / work, False)
        try:
            out = os.open("accept.so", FILE, dir_fd=work_fd)
        finally:
            os.close(work_fd)
        try:
            why = probe(out)
            return (None, why) if why else (stored(dir_fd, name, contents(out)), None)
        finally:
            os.close(out)
    finally:
        removed(dir_fd, work)


def removed(dir_fd: int, name: str) -> None:
    """Removes the build folder ``name`` and the files in it, through descriptors (the compiler leaves no folders)."""
    with contextlib.suppress(OSError):
        fd = os.open(name, DIR, dir_fd=dir_fd)
        try:
            for entry in os.listdir(fd):
                os.unlink(entry, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dir_fd)


def private_folders(notes: dict):
    """Yields (folder, its descriptor, whether it is the fresh one): each cache folder that passes ``open_folder``
    (made if missing), then a fresh private temporary folder (removed at exit), each opened only once the one
    before could not be written, and open while it is used. Why a folder was refused goes into ``notes``."""
    fresh = None
    for folder in [*cache_dirs(), None]:
        if folder is None:
            folder = fresh = Path(tempfile.mkdtemp(prefix="specnotes-kernel-"))
            atexit.register(shutil.rmtree, fresh, ignore_errors=True)
        try:
            fd = open_folder(folder, create=True)
        except Refused as why:
            notes[str(why)] = None
            continue
        try:
            yield folder, fd, folder == fresh
        finally:
            os.close(fd)


def handed(path: Path, fd: int, how: str) -> tuple[Path, str]:
    """(path, how), keeping ``fd``, through which the library at ``path`` was checked, for ``load`` to map."""
    with contextlib.suppress(KeyError, OSError):
        os.close(_checked.pop(str(path)))
    _checked[str(path)] = fd
    return path, how


def build(flag_sets=FLAGS) -> tuple[Path | None, str]:
    """The compiled library, cached by source, compiler, flags and CPU, and how it was built; or (None, why not).
    It is looked for, else built, in the first cache folder that passes ``open_folder`` and can be written; with
    none, in a fresh private temporary folder, for this process only. The flag sets are tried in turn until one
    gives a library that runs (probed in a child process) or the compiler's COMPILE_SECONDS are spent. A cached
    library is used only if it matches its sidecar, else it is built again."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler found"
    if os.name != "posix":
        return None, "the kernel is built on POSIX systems only (Linux, macOS)"
    source, errors, notes, failed = SOURCE.read_bytes(), [], {}, set()
    said = lambda how: f"{how} ({'; '.join(notes)})" if notes else how  # noqa: E731
    deadline = time.monotonic() + COMPILE_SECONDS
    folders = private_folders(notes)
    try:
        for folder, dir_fd, fresh in folders:
            for flags in flag_sets:
                if flags in failed:
                    continue  # these flags fail in any folder
                how = f"{cc} {' '.join(flags)}"
                name = f"accept-{key(source, how)}.so"
                try:
                    return handed(folder / name, checked(dir_fd, folder, name), said(how))
                except FileNotFoundError:
                    pass
                except Refused as why:
                    notes[f"built again: {why}"] = None
                if time.monotonic() >= deadline:
                    errors.append(f"{how}: not tried, the compiler's {COMPILE_SECONDS} s were spent")
                    return None, "; ".join(errors + list(notes))
                try:
                    fd, why = built_in(cc, flags, folder, dir_fd, name, deadline)
                except NoCompiler as error:
                    return None, str(error)
                except OSError as error:
                    errors.append(f"{how} in {folder}: {error.strerror or error}")
                    break  # this folder cannot be written: the next one
                if fd is None:
                    errors.append(f"{how}: {why}")
                    failed.add(flags)
                    continue
                if fresh:
                    notes[f"built in {folder}, for this process only"] = None
                return handed(folder / name, fd, said(how))
            else:
                break  # every flag set was tried in this folder
    finally:
        folders.close()
    return None, "; ".join(errors + list(notes))


def load(path: Path) -> ctypes.CDLL:
    """The library at ``path``, mapped from the very file that was checked: through the descriptor ``build`` checked
    it through, or else one ``checked`` here (its folder opened by ``open_folder``). Raises OSError if it is
    refused or does not load."""
    fd = _checked.pop(str(path), None)
    if fd is None:
        dir_fd = open_folder(Path(path).parent)
        try:
            fd = checked(dir_fd, Path(path).parent, Path(path).name)
        finally:
            os.close(dir_fd)
    try:
        lib = ctypes.CDLL(loadable(fd))
    except BaseException:
        os.close(fd)
        raise
    _mapped.append(fd)
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


Q_PROBS, KEEP, LAYOUT = 1, 2, 4  # accept_step's ``how`` (csrc/accept.c)
_counting: list = [None, None]  # (a library, its accept_step read as returning how many sequences it handed back)


def counting_step(lib: ctypes.CDLL):
    """``lib``'s accept_step as a function pointer of the wrapper's own whose int64 result (how many sequences the C
    function handed back) is read; ``load``'s declaration of ``lib.accept_step`` (no result) is left as it is."""
    if _counting[0] is not lib:
        step = lib["accept_step"]  # a new pointer to the same function, not the one load declared
        step.argtypes, step.restype = lib.accept_step.argtypes, ctypes.c_int64
        _counting[:] = [lib, step]
    return _counting[1]


def accept_step(draft_tokens, draft, draft_is_probs, target_logits, u, v, temperature, kept: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``accept_step`` (csrc/accept.c) over every sequence -> (accepted [B] int64, -1 where a drafted token lies
    outside [0, V) or a row it read has no finite normalizer; tokens [B, k + 1] int64 as ``speculative_sample``
    lays them out: the accepted drafts, the last token, -1 after, and -1 throughout a sequence handed back; how many
    were handed back). Tensors fp32 (draft_tokens int64), contiguous, on the CPU. ``kept``: the kept route (each
    row's exponentials kept from its first pass for the residual) rather than the stopping rows exponentiated
    again; the same law either way. Few torch calls: on a busy core each costs tens of microseconds."""
    lib = library()
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    draft = target_logits if draft is None else draft  # k = 0: no draft row is read
    accepted, tokens = torch.empty(B, dtype=torch.int64), torch.full((B, k + 1), -1, dtype=torch.int64)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    how = Q_PROBS * bool(draft_is_probs) + KEEP * bool(kept) + LAYOUT
    handed = counting_step(lib)(ptr(target_logits), ptr(draft), how, ptr(draft_tokens), ptr(u), ptr(v), B, k, V,
                                1.0 / temperature, torch.get_num_threads(), ptr(accepted), ptr(tokens))
    return accepted, tokens, handed


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
