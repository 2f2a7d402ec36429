"""Issue 45's attacks on the kernel's loader (specnotes.sampling.kernel), one test each: a folder swapped while the
library is built, a parent folder swapped between the hash check and the load, an empty or relative XDG_CACHE_HOME, a
cache below a folder another user can change, a compiler that hangs, and one that fails without a word.

The swaps are made by a second user (created with useradd when the tests run as root, else those cases skip) in a
folder anyone can write that has no sticky bit, and by this same user in a private folder, where every folder check
passes and only the loader's descriptors stand between the swap and a planted load. They strike at the worst
moment, deterministically, through seams the loader has always had: a compiler (CC) that swaps once it has
written its output, as the auditor's attacker did on reading its -o from /proc, and ctypes.CDLL, which swaps just
before the real dlopen. A planted library exports ``planted_marker``: it must never be the one loaded."""

import ctypes
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specnotes.sampling import kernel

pytestmark = pytest.mark.skipif(kernel.compiler() is None, reason="no C compiler")

QUICK = (("-O1",),)  # flags that build fast
ATTACKER = "specnotes-attacker"

PLANTED = """#include <stdint.h>
int planted_marker(void) { return 1; }
void log_normalizers(const float *x, int64_t rows, int64_t V, float inv_t, int threads, float *out) {
    for (int64_t j = 0; j < rows; j++) out[j] = 0.0f;
}
void accept_step(const float *target, const float *draft, int q_probs, const int64_t *tokens, const float *u,
                 const float *v, int64_t B, int64_t k, int64_t V, float inv_t, int threads, int64_t *accepted,
                 int64_t *token) {
    for (int64_t b = 0; b < B; b++) accepted[b] = 0, token[b] = 0;
}
"""

# The attacker: moves aside the folder of the shared folder's that leads to ``victim`` and builds the same path
# again, ending in the planted library and a sidecar that matches it.
SWAP = r"""
import hashlib, os, sys
from pathlib import Path
shared, victim, planted = map(Path, sys.argv[1:4])
if not victim.is_relative_to(shared):
    sys.exit(0)
top = shared / victim.relative_to(shared).parts[0]
if top.exists():
    os.rename(top, top.with_name(f"{top.name}.moved-{os.getpid()}"))
os.makedirs(victim.parent)
data = planted.read_bytes()
victim.write_bytes(data)
victim.chmod(0o755)
Path(f"{victim}.sha256").write_text(f"{len(data)} {hashlib.sha256(data).hexdigest()}\n")
"""

# A compiler that compiles, then lets the attacker swap the folders above its output before the loader goes on.
CC_THEN_SWAP = """#!{python}
import subprocess, sys
args = sys.argv[1:]
done = subprocess.run([{cc!r}, *args])
subprocess.run([{attacker_python!r}, "-c", {swap!r}, {shared!r}, args[args.index("-o") + 1], {planted!r}],
               check=True, **{who!r})
sys.exit(done.returncode)
"""


def second_user() -> dict:
    """subprocess's arguments that run a command as a second user, made with useradd if missing; skips unless this
    process is root."""
    if os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("a second user is made, and acts, only under root (with /usr/bin/python3)")
    try:
        pwd.getpwnam(ATTACKER)
    except KeyError:
        made = shutil.which("useradd") and subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER], capture_output=True)
        if not made or made.returncode:
            pytest.skip("useradd could not make a second user")
    entry = pwd.getpwnam(ATTACKER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@pytest.fixture(params=["another user", "this user"])
def arena(request, tmp_path, monkeypatch):
    """(shared, who, planted): the folder the attacker swaps in, who swaps (subprocess's arguments that run a command
    as the second user, or {} for this one), and the planted library.
    Another user gets a folder anyone can write, with no sticky bit, in a folder under /tmp it can reach; this user
    a private folder. The cache and the temporary folder are both in ``shared``, as is the library built."""
    if request.param == "another user":
        who = second_user()
        base = Path(tempfile.mkdtemp(dir="/tmp", prefix="specnotes-attack-"))
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
        base.chmod(0o755)
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
    else:
        who, base = {}, tmp_path
        shared = base / "shared"
        shared.mkdir(mode=0o700)
    source = base / "planted.c"
    source.write_text(PLANTED)
    planted = base / "planted.so"
    subprocess.run([kernel.compiler(), "-O1", "-shared", "-fPIC", str(source), "-o", str(planted)], check=True)
    planted.chmod(0o644)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setattr(kernel, "FLAGS", QUICK)
    monkeypatch.setattr(kernel, "_state", {})
    return shared, who, planted


def python_for(who: dict) -> str:
    return "/usr/bin/python3" if who else sys.executable  # the second user cannot reach this venv's


def planted_loaded(lib) -> bool:
    return lib is not None and hasattr(lib, "planted_marker")


def refused_as_shared(shared: Path, how: str) -> bool:
    return f"{shared} can be written by others and has no sticky bit" in how


def test_a_folder_swapped_during_the_build_is_not_loaded(monkeypatch, arena):
    """The auditor's first attack: once the compiler has written its output, the attacker moves aside the shared
    folder's child on the way to it and puts the same path back, ending in a planted library (on 40e5d32: loaded,
    8 times in 8, with how_built() as usual)."""
    shared, who, planted = arena
    fake = shared.parent / "cc"
    fake.write_text(CC_THEN_SWAP.format(python=sys.executable, cc=kernel.compiler(), swap=SWAP, shared=str(shared),
                                        planted=str(planted), who=who, attacker_python=python_for(who)))
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    lib = kernel.library()
    assert not planted_loaded(lib), kernel.how_built()
    if not who:  # nothing refused here: the library built is the one loaded
        assert lib is not None, kernel.how_built()
    else:
        assert lib is None and refused_as_shared(shared, kernel.how_built()), kernel.how_built()


def test_a_parent_swapped_between_the_hash_and_the_load_is_not_loaded(monkeypatch, arena):
    """The second attack: a good library is cached; between the loader's check of it and its dlopen the attacker
    swaps the shared folder's child on the way to it for one holding a planted library with a matching sidecar
    (on 40e5d32, renameat2 in a loop won 11 times in 100; here the swap comes at the worst moment, every time)."""
    shared, who, planted = arena
    kernel.build(QUICK)  # the cache entry (refused, and not made, in a folder another user can write)
    victim = kernel.cache_dirs()[0] / f"accept-{kernel.key(kernel.SOURCE.read_bytes(), kernel.compiler() + ' -O1')}.so"
    real, swaps = ctypes.CDLL, []

    def swapping(name, *args, **kwargs):
        if not swaps:
            swaps.append(name)
            subprocess.run([python_for(who), "-c", SWAP, str(shared), str(victim), str(planted)], check=True, **who)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", swapping)
    lib = kernel.library()
    assert not planted_loaded(lib), kernel.how_built()
    if not who:
        assert lib is not None and swaps, kernel.how_built()
    else:
        assert lib is None and refused_as_shared(shared, kernel.how_built()), kernel.how_built()


@pytest.mark.parametrize("xdg", ["", "relative/cache"])
def test_an_empty_or_relative_xdg_cache_home_means_home_cache(monkeypatch, tmp_path, xdg):
    """The XDG spec: XDG_CACHE_HOME empty is unset, and a relative one is invalid. On 40e5d32 the cache went to
    ./specnotes/kernel (or ./relative/cache/...) under the current folder."""
    home, here = tmp_path / "home", tmp_path / "here"
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.chdir(here)
    assert kernel.cache_dirs()[0] == home / ".cache" / "specnotes" / "kernel"
    path, how = kernel.build(QUICK)
    assert path is not None and path.parent == home / ".cache" / "specnotes" / "kernel", how
    assert not list(here.iterdir())


ABOVE = ["writable by others", "writable by the group", "owned by another user", "a link in a folder others can write",
         "sticky and writable by others", "a link in a private folder"]


@pytest.mark.parametrize("above", ABOVE)
def test_a_cache_below_a_folder_another_user_can_change_is_refused(monkeypatch, tmp_path, above):
    """Every folder above the cache must be root's or this user's, and writable by no one else unless it has the
    sticky bit; a link is followed only from such a folder. A folder that fails is refused with the reason in
    how_built(), and the library is built in a fresh private temporary folder (on 40e5d32 only the cache folder
    itself was checked: the first four were used). The last two are used, now as before."""
    if above == "owned by another user" and os.geteuid() != 0:
        pytest.skip("giving a folder to another owner needs root")
    folder, real = tmp_path / "above", tmp_path / "real"
    folder.mkdir()
    real.mkdir(mode=0o700)
    cache = folder / "cache"
    if above.startswith("a link"):
        (folder / "link").symlink_to(real)
        cache = folder / "link" / "cache"
    folder.chmod({"writable by others": 0o777, "writable by the group": 0o770, "sticky and writable by others": 0o1777,
                  "a link in a folder others can write": 0o777}.get(above, 0o755))
    if above == "owned by another user":
        os.chown(folder, 12345, 12345)
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [cache])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the fresh folder is made
    path, how = kernel.build(QUICK)
    assert path is not None, how
    if above in ("sticky and writable by others", "a link in a private folder"):
        assert path.parent == cache and how == f"{kernel.compiler()} -O1"
    else:
        assert not path.is_relative_to(folder) and not path.resolve().is_relative_to(real), how
        assert f"{folder} " in how and f"built in {path.parent}, for this process only" in how, how
        assert re.search(r"uid 12345, neither root nor this user|can be written by (others|its group) and has no "
                         r"sticky bit", how), how


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


HANGS = "#!/bin/sh\nsleep 30 &\necho $! > {pid}\nwait\n"  # a compiler stuck in a pass it started (cc1, ld)
FIRST_USE = """
import time
from specnotes.sampling import kernel
kernel.COMPILE_SECONDS = 2
start = time.monotonic()
print(kernel.available(), time.monotonic() - start)
print(kernel.how_built())
"""


def test_a_hanging_compiler_falls_back_to_torch_within_its_budget(tmp_path):
    """A compiler that never finishes: the first use of the kernel falls back to torch once the compiler's budget
    (here 2 s) is spent, and whatever the compiler started is killed. On 40e5d32 it was tried 9 times at 120 s
    each (1,081 s); this first use is given 60 s."""
    fake, pid = tmp_path / "cc", tmp_path / "pid"
    fake.write_text(HANGS.format(pid=pid))
    fake.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    env = os.environ | {"CC": str(fake), "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    try:
        done = subprocess.run([sys.executable, "-c", FIRST_USE], env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the first use of the kernel had not fallen back to torch after 60 s")
    assert done.returncode == 0, done.stderr
    (available, seconds), how = done.stdout.splitlines()[0].split(), done.stdout.splitlines()[1]
    assert available == "False" and float(seconds) < 10, done.stdout
    first, *rest = how.split("; ")
    assert re.fullmatch(rf"{re.escape(str(fake))} [^:]+: did not finish within 2 s and was stopped", first), how
    assert all(re.fullmatch(r".+: not tried, the compiler's 2 s were spent", reason) for reason in rest), how
    deadline = time.monotonic() + 5
    while Path("/proc").is_dir() and running(int(pid.read_text())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path("/proc").is_dir() or not running(int(pid.read_text())), "the compiler's child was left running"
    assert kernel.COMPILE_SECONDS <= 45  # the default: a first use falls back within 60 s


def test_a_compiler_that_fails_without_a_word_is_said_to(monkeypatch, tmp_path):
    """CC=/bin/false exits 1 and prints nothing: each reason says so (on 40e5d32 they were empty: '...: ; ...: ')."""
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path])
    monkeypatch.setattr(kernel, "_state", {})
    assert not kernel.available()
    reasons = kernel.how_built().split("; ")
    assert len(reasons) == len(kernel.FLAGS), reasons
    for flags, reason in zip(kernel.FLAGS, reasons, strict=True):
        assert reason == f"/bin/false {' '.join(flags)}: exit status 1, with nothing on stderr", reasons
