"""The compiled acceptance step (specnotes.sampling.kernel, csrc/accept.c), built three ways (for this CPU, for AVX2
without AVX-512, and with no -march: its plain loops), by each of its two routes (the first pass's exponentials kept
for the residual, or the stopping rows exponentiated again: fused.route forced to each): agrees with
speculative_sample on the softmaxed inputs and with the torch path, at vocabulary sizes around its vector width and
block size; gives the same draws with one thread or two, run after run; handles logits far outside exp's range, rows
whose sum lies in (0, 1), -inf (a masked token is never emitted, nor accepted at u = 0), a residual with no weight (p
itself), and NaN or +inf (the torch path takes over); follows the target (chi-square on fp32 Markov chains through
the kernel, at 5 tokens and above the vector width, with wrong uses of it and one-line wrong kernels caught); builds
or declines cleanly (no compiler, a flag the compiler rejects, a cache folder that cannot be written, a library that
does not load); and loads safely (never from a folder another user controls, a corrupt cache entry built again, a
library that crashes this CPU probed in a child)."""

import contextlib
import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from chains import logits_pvalues

from specnotes.sampling import exact, fused, kernel
from specnotes.sampling.exact import draw_uniforms, inverse_cdf, speculative_sample
from specnotes.sampling.fused import sample_from_logits, sample_from_target_logits

# Without a C compiler the kernel's tests skip, except under CI=true, where .ci/run installs one: there they fail.
REQUIRED = os.environ.get("CI", "").lower() == "true"
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not kernel.available() and not REQUIRED, reason=f"no kernel: {kernel.how_built()}")]

SIGNIFICANCE = 1e-4
BUILDS = {"native": None, "avx2": ("-O3", "-march=x86-64-v3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"),
          "generic": ("-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math")}


@pytest.fixture(params=list(BUILDS))
def built(request, monkeypatch):
    """The library built with each set of flags, in place of this process's own."""
    flags = BUILDS[request.param]
    if flags is not None:
        if request.param == "avx2" and platform.machine() not in ("x86_64", "AMD64"):
            pytest.skip("AVX2 is x86")
        path, how = kernel.build((flags,))
        assert path is not None, how
        monkeypatch.setitem(kernel._state, "lib", kernel.load(path))
    return request.param


ROUTES = ("kept", "recomputed")


@pytest.fixture(params=ROUTES)
def routed(request, monkeypatch):
    """Every sampler call takes this route in the kernel, whatever acceptance it is told (fused.route forced)."""
    force(monkeypatch, request.param)
    return request.param


def force(monkeypatch, route):
    monkeypatch.setattr(fused, "route", lambda expected_acceptance, draft="logits": route)


def kept_now() -> bool:
    """Whether the samplers take the kept route now: what a direct call of kernel.accept_step is given here."""
    return fused.route(None) == "kept"


def torch_only(monkeypatch):
    monkeypatch.setitem(kernel._state, "lib", None)


def from_draft_probs(drafts, lq, lp, T, generator=None, uniforms=None):
    return sample_from_target_logits(drafts, torch.softmax(lq / T, -1), lp, T, generator=generator, uniforms=uniforms)


SAMPLERS = [sample_from_logits, from_draft_probs]


def case(B, k, V, T, seed, scale=1.5):
    """fp32 logits, drafts drawn from q, uniforms; and p, q in float64 for the reference."""
    g = torch.Generator().manual_seed(seed)
    lq, lp = scale * torch.randn(B, k, V, generator=g), scale * torch.randn(B, k + 1, V, generator=g)
    q, p = (torch.softmax(x.double() / T, -1) for x in (lq, lp))
    drafts = torch.multinomial(q.reshape(-1, V).float(), 1, generator=g).reshape(B, k) if k else \
        torch.zeros(B, 0, dtype=torch.int64)
    return drafts, lq, lp, q, p, draw_uniforms(B, k, g)


def test_the_kernel_is_built():
    assert kernel.available(), kernel.how_built()


def test_chapter_7_can_show_a_c_function():
    text = kernel.function_source("accept_step")
    assert text.startswith("/* For each of the B sequences") and "int64_t accept_step(" in text and text.endswith("\n}")
    lse = kernel.function_source("lse")
    assert lse.startswith("/* The row's normalizer") and "\nstatic norm lse(" in lse
    with pytest.raises(ValueError, match="no function"):
        kernel.function_source("softmax")


def test_the_c_block_is_the_samplers_block():
    assert re.search(r"#define BLOCK (\d+)", kernel.SOURCE.read_text())[1] == str(exact.BLOCK)


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize(("B", "k", "V", "T"), [(300, 4, 1, 1.0), (400, 3, 5, 1.0), (300, 2, 15, 0.7),
                                                (300, 2, 16, 1.3), (300, 3, 17, 1.0), (200, 2, 127, 1.0),
                                                (200, 2, 128, 0.8), (200, 4, 129, 1.0), (100, 1, 5000, 1.0),
                                                (64, 4, 32000, 1.0), (50, 0, 300, 1.0)])
def test_agrees_with_speculative_sample_and_the_torch_path(built, routed, monkeypatch, sampler, B, k, V, T):
    drafts, lq, lp, q, p, uniforms = case(B, k, V, T, seed=B + V + k)
    ref = speculative_sample(drafts, q, p, uniforms=uniforms)
    ours = sampler(drafts, lq, lp, T, uniforms=uniforms)
    torch_only(monkeypatch)
    theirs = sampler(drafts, lq, lp, T, uniforms=uniforms)
    for other in (ref, theirs):  # fp32 against float64: a test or a draw may differ where rounding moves it
        assert (ours[1] == other[1]).double().mean() >= 0.99
        assert (ours[0] == other[0]).all(1).double().mean() >= 0.98
    assert len(ref[1].unique()) > 1 or k == 0 or V == 1


@contextlib.contextmanager
def threads(n):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# (B, k, V, sampler): independent drafts (most stop at the first position) on both entry points, and bonus rows only
# (k = 0): each thread spends most of its time summing and searching the rows its sequences stopped on, and a run is
# long enough for both threads to join it. A buffer the threads shared made 11 to 26 of 30 runs of each differ here
# (2 busy cores); with 64 sequences, as few as 0 of 30.
THREAD_CASES = [(2048, 1, 1000, sample_from_logits), (2048, 2, 1000, from_draft_probs),
                (4096, 0, 1000, sample_from_logits)]


def two_threads_agree(repeats: int = 6) -> bool:
    """Whether two threads give the draws of one, every time, over ``repeats`` runs of each of ``THREAD_CASES``: a
    race between the threads (a buffer they share) shows in some runs, not in every one."""
    for B, k, V, sampler in THREAD_CASES:
        drafts, lq, lp, _, _, uniforms = case(B, k, V, 1.0, seed=B + k + V)
        one = sampler(drafts, lq, lp, 1.0, uniforms=uniforms)
        with threads(2):
            for _ in range(repeats):
                two = sampler(drafts, lq, lp, 1.0, uniforms=uniforms)
                if not (torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])):
                    return False
    return True


def test_one_thread_or_two_draw_the_same(built, routed):
    assert two_threads_agree()


def far_case(seed=1, B=64, k=2, V=300):
    """fp32 logits far outside exp's range: +100 on every other draft row (exp overflows), -200 on every other
    target row (every term underflows), one row spread 60 times wider, and the bonus rows too."""
    drafts, lq, lp, _, _, uniforms = case(B, k, V, 1.0, seed)
    lq[::2] += 100.0
    lp[1::2] -= 200.0
    lp[2, 0] *= 60.0
    lp[3, k] *= 60.0
    drafts = torch.multinomial(torch.softmax(lq.double(), -1).reshape(-1, V).float(), 1,
                               generator=torch.Generator().manual_seed(seed)).reshape(B, k)
    return drafts, lq, lp, uniforms


def all_taken_by_the_kernel(drafts, lq, lp, uniforms, T=1.0) -> bool:
    """Whether the kernel itself found a finite normalizer for every row it read (-1: it handed the call back to
    the torch path)."""
    accepted, _, _ = kernel.accept_step(drafts, lq, False, lp, *uniforms, T, kept=kept_now())
    return bool((accepted >= 0).all())


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_far_logits_give_the_draws_of_the_softmaxed_inputs(built, routed, sampler):
    """Rows whose unshifted sums overflow or underflow are summed again shifted, in the kernel: it hands none of
    them back to the torch path, and the draws are those of the softmaxed inputs."""
    drafts, lq, lp, uniforms = far_case()
    assert all_taken_by_the_kernel(drafts, lq, lp, uniforms)
    ref = speculative_sample(drafts, torch.softmax(lq.double(), -1), torch.softmax(lp.double(), -1), uniforms=uniforms)
    assert len(ref[1].unique()) == 3  # stops at every position, and bonus tokens
    ours = sampler(drafts, lq, lp, 1.0, uniforms=uniforms)
    assert (ours[1] == ref[1]).double().mean() >= 0.98 and (ours[0] == ref[0]).all(1).double().mean() >= 0.97


def near_the_flush_case(seed=9, B=2000, k=2, V=300):
    """Target logits near -89, where exp flushes to 0 (below -87.3): each target row's unshifted sum lies in (0, 1),
    and a third of its mass is in terms that flushed to 0, so only the sum shifted by the row's maximum is right."""
    drafts, lq, lp, _, _, uniforms = case(B, k, V, 1.0, seed)
    return drafts, lq, lp - 89.0, uniforms


def near_the_flush_agrees(sampler) -> bool:
    drafts, lq, lp, uniforms = near_the_flush_case()
    ref = speculative_sample(drafts, torch.softmax(lq.double(), -1), torch.softmax(lp.double(), -1), uniforms=uniforms)
    ours = sampler(drafts, lq, lp, 1.0, uniforms=uniforms)
    return bool((ours[1] == ref[1]).double().mean() >= 0.99 and (ours[0] == ref[0]).all(1).double().mean() >= 0.98)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_sum_in_0_1_is_summed_again_shifted(built, routed, sampler):
    drafts, lq, lp, uniforms = near_the_flush_case()
    terms = torch.exp(lp.double())
    sums, flushed = terms.sum(-1), (terms * (lp < -87.34)).sum(-1)
    assert ((sums > 0) & (sums < 1)).all() and (flushed / sums).mean() > 0.2  # really in (0, 1), and much lost
    assert all_taken_by_the_kernel(drafts, lq, lp, uniforms)
    assert near_the_flush_agrees(sampler)


def empty_residual_case(seed=10, B=500, k=2, V=300):
    """A draft that is the target up to rounding, handing over its probabilities q = p (1 + 1e-5), and u just below
    1: every first draft is rejected (u q(x) > p(x)), and max(0, p - q) has no weight anywhere. The last token must
    then come from p itself. -> drafts, q, target logits, uniforms, and p's first row in float64."""
    drafts, lq, lp, _, p, (u, v) = case(B, k, V, 1.0, seed)
    q = (p[:, :k] * (1 + 1e-5)).float()
    top = float(torch.tensor(1.0).nextafter(torch.tensor(0.0)))
    return drafts, q, lp, (torch.full_like(u, top), v), p[:, 0]


def empty_residual_draws_from_p() -> bool:
    drafts, q, lp, uniforms, p0 = empty_residual_case()
    tokens, n = sample_from_target_logits(drafts, q, lp, 1.0, uniforms=uniforms)
    return bool((n == 0).all() and (tokens[:, 0] == inverse_cdf(p0, uniforms[1])).double().mean() >= 0.99)


def test_a_residual_with_no_weight_draws_from_p(built, routed, monkeypatch):
    drafts, q, lp, uniforms, _ = empty_residual_case()
    accepted, tokens, _ = kernel.accept_step(drafts, q, True, lp, *uniforms, 1.0, kept=kept_now())
    assert (accepted == 0).all() and (tokens[:, 0] >= 0).all()
    assert empty_residual_draws_from_p()
    ours = sample_from_target_logits(drafts, q, lp, 1.0, uniforms=uniforms)
    torch_only(monkeypatch)
    theirs = sample_from_target_logits(drafts, q, lp, 1.0, uniforms=uniforms)
    assert (ours[0] == theirs[0]).all(1).double().mean() >= 0.99


def masked_tokens_emitted(sampler) -> int:
    """-inf logits (a vocabulary mask) on the target's second half, and u = 0 for every other sequence: how many
    emitted tokens (accepted drafts or last tokens) are masked. A draft with p(x) = 0 must be rejected even at
    u = 0 (0 < 0 fails), and exp gives masked tokens weight 0 exactly, so no residual or bonus row emits one."""
    B, k, V = 2000, 2, 300
    drafts, lq, lp, _, _, (u, v) = case(B, k, V, 1.0, seed=3)
    lp[..., V // 2:] = float("-inf")
    u[::2] = 0.0
    tokens, n = sampler(drafts, lq, lp, 1.0, uniforms=(u, v))
    assert (n < k).any() and (n == k).any() and (drafts[::2, 0] >= V // 2).any()
    return int((tokens >= V // 2).sum())


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_masked_token_is_never_emitted(built, routed, sampler):
    assert masked_tokens_emitted(sampler) == 0


@pytest.mark.usefixtures("built", "routed")
def test_a_nan_or_inf_row_takes_the_torch_path(monkeypatch):
    """A NaN or +inf logit in a row the kernel reads (here at the first position, which every sequence reads)
    makes that sequence's normalizer NaN, so the kernel hands the call back and the torch path answers."""
    drafts, lq, lp, _, _, uniforms = case(16, 2, 300, 1.0, seed=4)
    lp[5, 0, 7] = float("nan")
    lq[6, 0, 3] = float("nan")
    lp[7, 0, 2] = float("inf")
    accepted, _, handed = kernel.accept_step(drafts, lq, False, lp, *uniforms, 1.0, kept=kept_now())
    assert accepted[5:8].tolist() == [-1] * 3 and (accepted[8:] >= 0).all() and handed == 3
    ours = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    torch_only(monkeypatch)
    theirs = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_the_wrapper_reads_how_many_were_handed_back_and_leaves_the_loaders_declaration():
    """kernel.accept_step reads the C function's int64 result through a pointer of its own (counting_step): load's
    declaration of lib.accept_step, no result, is the loader's and stays as it is."""
    lib = kernel.library()
    drafts, lq, lp, _, _, uniforms = case(8, 2, 300, 1.0, seed=12)
    lq[3, 0, 5] = float("nan")
    assert kernel.accept_step(drafts, lq, False, lp, *uniforms, 1.0)[2] == 1
    assert lib.accept_step.restype is None and kernel.counting_step(lib).restype is ctypes.c_int64
    assert kernel.counting_step(lib) is kernel.counting_step(lib) is not lib.accept_step


@pytest.mark.usefixtures("built", "routed")
def test_a_drafted_token_outside_the_vocabulary_is_refused():
    """kernel.accept_step is public, and fused checks the drafted tokens before it calls it; the kernel checks them
    too: a sequence with a drafted token outside [0, V) gets -1 (it read past its rows before)."""
    drafts, lq, lp, _, _, uniforms = case(8, 2, 300, 1.0, seed=12)
    drafts[2, 0], drafts[4, 1], drafts[5, 0] = 300, 307, -1
    accepted, _, handed = kernel.accept_step(drafts, lq, False, lp, *uniforms, 1.0, kept=kept_now())
    assert accepted[[2, 4, 5]].tolist() == [-1] * 3 and (accepted[[0, 1, 3, 6, 7]] >= 0).all() and handed == 3
    with pytest.raises(ValueError, match="must lie in"):  # handed back, the call is refused, as before the kernel
        sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    accepted, _, _ = kernel.accept_step(drafts, torch.softmax(lq, -1), True, lp, *uniforms, 1.0, kept=kept_now())
    assert accepted[[2, 4, 5]].tolist() == [-1] * 3


def test_log_normalizers_stay_accurate_at_a_wide_vocabulary(built):
    """At V = 256k the normalizer of each row is a sum of 256k terms: summed in float lanes its error grew with V
    (5e-6 here); the block sums are accumulated in double, within 2e-6 of float64's logsumexp."""
    logits = 2 * torch.randn(4, 1 << 18, generator=torch.Generator().manual_seed(11))
    out = torch.empty(4)
    for T in (1.0, 0.7):
        kernel.log_normalizers(logits, T, out)
        error = float((out.double() - torch.logsumexp(logits.double() / T, -1)).abs().max())
        assert error < 2e-6, f"T = {T}: {error:.2g}"


@pytest.mark.parametrize("entry", ["logits", "probs"])
def test_a_tiny_temperature_with_large_logits_gives_exact_draws(built, routed, entry):
    """T = 1e-4 with logits near 100: l / T is near 1e6, where a float's step is 0.06, so the logits are shifted by
    their row's maximum before the scaling. The draws are those of the softmaxed inputs (float64), and the accept
    test, with u 0.1% either side of p(x) / q(x), decides as float64 does: p(x) is right to better than 0.1%."""
    B, k, V, T = 4000, 1, 300, 1e-4
    g = torch.Generator().manual_seed(13)
    lq, lp = (100.0 + 3e-4 * torch.randn(B, n, V, generator=g) for n in (k, k + 1))
    q, p = (torch.softmax(x.double() / T, -1) for x in (lq, lp))
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, k)
    uniforms = draw_uniforms(B, k, g)

    def sampler(u):  # q handed over as probabilities is float64's, rounded once: a float32 softmax would be off too
        if entry == "logits":
            return sample_from_logits(drafts, lq, lp, T, uniforms=(u, uniforms[1]))
        return sample_from_target_logits(drafts, q.float(), lp, T, uniforms=(u, uniforms[1]))

    ref, ours = speculative_sample(drafts, q, p, uniforms=uniforms), sampler(uniforms[0])
    assert all_taken_by_the_kernel(drafts, lq, lp, uniforms, T)
    assert (ours[1] == ref[1]).double().mean() >= 0.995 and (ours[0] == ref[0]).all(1).double().mean() >= 0.99
    x, below = drafts[:, :, None], torch.arange(B)[:, None] % 2 == 0
    close = (p[:, :1].gather(2, x) / q.gather(2, x))[:, :, 0] * torch.where(below, 0.999, 1.001)
    near = (close < 1)[:, 0]
    assert near.sum() > B / 4 and torch.equal(sampler(close.float())[1][near] > 0, below[near, 0])


@pytest.mark.parametrize("march", [(), ("-march=native",)])
def test_no_undefined_behaviour_under_ubsan(monkeypatch, tmp_path, march):
    """Built with UBSan (undefined behaviour aborts), the library's probe, which calls both functions in a child
    process, must live: exp's 2^n once shifted a signed int into its sign bit."""
    flags = ("-O1", *march, "-fsanitize=undefined", "-fno-sanitize-recover=undefined")
    trivial = tmp_path / "t.c"
    trivial.write_text("int f(int x) { return x << 1; }\n")
    if subprocess.run([kernel.compiler(), *flags, "-shared", "-fPIC", str(trivial), "-o", str(tmp_path / "t.so")],
                      capture_output=True).returncode:
        pytest.skip("this compiler has no UBSan")
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path])
    path, how = kernel.build((flags,))
    assert path is not None, how


# ---------------------------------------------------------------------------------------------- exactness
# chains.logits_pvalues, as in test_fused, on fp32 logits, so that the draws go through the kernel: the first two
# emitted tokens from x0 must follow P(x0, ·) and P(t1, ·), P = softmax(log P0 / T).


def pvalues(sampler, T):
    return logits_pvalues(sampler, T, dtype=torch.float32)


def kernel_called_wrong(name, change):
    """sample_from_logits with ``kernel.accept_step`` called with its arguments changed by ``change``."""
    def run(drafts, lq, lp, T, generator=None):
        original = kernel.accept_step
        kernel.accept_step = lambda *args, **kw: original(*change(*args), **kw)
        try:
            return sample_from_logits(drafts, lq, lp, T, generator=generator)
        finally:
            kernel.accept_step = original

    run.__name__ = name
    return run


WRONG = [
    # the rows exponentiated at T = 1 whatever the temperature
    kernel_called_wrong("temperature ignored", lambda d, q, probs, p, u, v, T: (d, q, probs, p, u, v, 1.0)),
    # each sequence tested and corrected against the next sequence's draft rows
    kernel_called_wrong("draft rows of the next sequence",
                        lambda d, q, probs, p, u, v, T: (d, q.roll(1, 0).contiguous(), probs, p, u, v, T)),
    # the draft's rows taken for the target's: every test passes and the residual is empty (then p = q is used)
    kernel_called_wrong("target rows are the draft's",
                        lambda d, q, probs, p, u, v, T: (d, q, probs, torch.cat([q, p[:, -1:]], 1).contiguous(),
                                                         u, v, T)),
    # one uniform for the tests and the last token
    kernel_called_wrong("v reused as u", lambda d, q, probs, p, u, v, T: (d, q, probs, p,
                                                                         v[:, None].expand_as(u).contiguous(), v, T)),
]


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_emitted_tokens_follow_the_target(built, routed, T):
    assert min(pvalues(sample_from_logits, T)) > SIGNIFICANCE


WIDE = dict(V=37, scale=0.3)  # above the vector loops' two vectors a step (32 floats on AVX-512), and their tail


def wide_pvalues(sampler, T=0.6):
    return logits_pvalues(sampler, T, dtype=torch.float32, **WIDE)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_emitted_tokens_follow_the_target_above_the_vector_width(built, routed, sampler):
    if built == "generic":
        pytest.skip("the build with no -march has no vector loops of its own")
    assert min(wide_pvalues(sampler)) > SIGNIFICANCE


@pytest.mark.parametrize("wrong", WRONG, ids=lambda w: w.__name__)
def test_the_check_catches_a_wrong_use_of_the_kernel(wrong):
    assert min(pvalues(wrong, 0.6)) < SIGNIFICANCE


# ---------------------------------------------------------------------------------------------- building


def test_no_compiler_means_no_kernel(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "compiler", lambda: None)
    assert kernel.build() == (None, "no C compiler found")
    monkeypatch.setattr(kernel, "compiler", lambda: str(tmp_path / "cc"))  # CC names a compiler that is not there
    assert kernel.build() == (None, f"the C compiler {tmp_path / 'cc'} cannot be run: No such file or directory")


def test_a_rejected_flag_falls_to_the_next_set(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path])
    path, how = kernel.build((("-O3", "--no-such-flag"), ("-O3",)))
    assert path is not None and path.parent == tmp_path and how.endswith(" -O3")
    path, why = kernel.build((("-O3", "--no-such-flag"),))
    assert path is None and "--no-such-flag" in why


def test_an_unwritable_cache_falls_to_the_next_folder(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where a folder should be: mkdir fails
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [blocked / "specnotes", tmp_path / "ok"])
    path, _ = kernel.build((("-O3",),))
    assert path is not None and path.parent == tmp_path / "ok"
    assert kernel.build((("-O3",),))[0] == path  # cached: not built again


def test_a_library_that_does_not_load_means_no_kernel(monkeypatch, tmp_path):
    broken = tmp_path / "accept-broken.so"
    broken.write_text("not a shared library")
    monkeypatch.setattr(kernel, "build", lambda flags: (broken, "cc -O3"))
    monkeypatch.setattr(kernel, "_state", {})
    assert not kernel.available() and "did not load" in kernel.how_built()


def test_switched_off_the_samplers_use_torch(monkeypatch):
    monkeypatch.setenv("SPECNOTES_KERNEL", "0")
    monkeypatch.setattr(kernel, "_state", {})
    assert not kernel.available() and "SPECNOTES_KERNEL=0" in kernel.how_built()
    drafts, lq, lp, q, p, uniforms = case(20, 2, 300, 1.0, seed=5)
    ref = speculative_sample(drafts, q, p, uniforms=uniforms)
    ours = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    assert (ours[1] == ref[1]).double().mean() >= 0.95


# ---------------------------------------------------------------------------------------------- loading
# A shared library runs as the reader: it is loaded only from a folder the reader alone owns and can write, only
# after its sidecar (size and sha256, written once the new library passed its probe) matches, and a new library is
# probed in a child process first, so a cache entry that is corrupt, or one that crashes this CPU, costs a rebuild
# or "no kernel, and why", never the process.

PLANTED = """#include <stdint.h>
void log_normalizers(const float *x, int64_t rows, int64_t V, float inv_t, int threads, float *out) {
    for (int64_t j = 0; j < rows; j++) out[j] = 0.0f;
}
int64_t accept_step(const float *target, const float *draft, int how, const int64_t *tokens, const float *u,
                    const float *v, int64_t B, int64_t k, int64_t V, float inv_t, int threads, int64_t *accepted,
                    int64_t *token) {
    for (int64_t b = 0; b < B; b++) accepted[b] = 0, token[b * (k + 1)] = 0; /* every sample chosen by the planter */
    return 0;
}
"""


def crashing(signal_name: str) -> str:
    """A library whose functions die of ``signal_name``, as one built for an instruction this CPU lacks does."""
    text = PLANTED
    for loop in ("for (int64_t j", "for (int64_t b"):
        text = text.replace(loop, f"raise({signal_name});\n    {loop}")
    return "#include <signal.h>\n" + text


def compiled(tmp_path, text: str, name: str):
    source = tmp_path / f"{name}.c"
    source.write_text(text)
    out = tmp_path / f"{name}.so"
    subprocess.run([kernel.compiler(), "-O1", "-shared", "-fPIC", str(source), "-o", str(out)], check=True)
    return out


def reload(monkeypatch):
    """Forget the library this process loaded, so that the next call builds or loads one again."""
    monkeypatch.setattr(kernel, "_state", {})


def follows_the_torch_path(monkeypatch) -> bool:
    drafts, lq, lp, _, _, uniforms = case(64, 3, 300, 1.0, seed=8)
    ours = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    with monkeypatch.context() as m:
        torch_only(m)
        theirs = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    return (ours[1] == theirs[1]).double().mean() >= 0.99 and len(ours[1].unique()) > 1


HOSTILE = ["owned by another user", "writable by others", "writable by the group"]


QUICK = (("-O1",),)  # flags that build fast, for the tests that build the library again and again


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_library_planted_in_a_folder_another_user_controls_is_never_loaded(monkeypatch, tmp_path, hostile):
    """Another user pre-creates the temp-folder cache (here: a folder of another owner, or one others can write) and
    plants a library under the name this build will look for; the reader's home cache cannot be written. The
    planted library must not be loaded, before or after the reader's own build (the swap-after-build variant), and
    ``how_built()`` says why the folder was refused."""
    if hostile == "owned by another user" and os.getuid() != 0:
        pytest.skip("giving a folder to another owner needs root")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a fresh private folder is made
    monkeypatch.setattr(kernel, "FLAGS", QUICK)
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path / "own"])
    name = kernel.build(QUICK)[0].name  # the name this build looks for: anyone can compute it
    folder, blocked = tmp_path / "specnotes-0", tmp_path / "home-cache"
    folder.mkdir()
    blocked.write_text("")  # a file where the home cache should be: it cannot be created
    if hostile == "owned by another user":
        os.chown(folder, 12345, 12345)
    else:
        folder.chmod(0o777 if hostile == "writable by others" else 0o770)
    planted = compiled(tmp_path, PLANTED, "planted")
    shutil.copy(planted, folder / name)
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [blocked / "specnotes", folder])
    for attempt in ("planted before", "swapped after the build"):
        reload(monkeypatch)
        assert kernel.available(), kernel.how_built()
        assert Path(os.path.realpath(kernel.library()._name)).parent != folder, attempt  # /proc/self/fd/N
        assert follows_the_torch_path(monkeypatch), attempt
        assert str(folder) in kernel.how_built() and ("uid 12345" in kernel.how_built() or "written by" in
                                                      kernel.how_built())
        for path in folder.iterdir():  # the planter swaps whatever the reader's build left there
            shutil.copy(planted, path)


def test_cache_folders_are_created_private(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path / "cache" / "specnotes"])
    path, how = kernel.build(QUICK)
    assert path is not None, how
    assert (tmp_path / "cache" / "specnotes").stat().st_mode & 0o777 == 0o700


def test_a_cached_library_others_can_write_is_built_again(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path])
    path, _ = kernel.build(QUICK)
    path.chmod(0o666)
    again, how = kernel.build(QUICK)
    assert again == path and not path.stat().st_mode & 0o022, how


CHILD = """
import sys
from pathlib import Path
import torch
from specnotes.sampling import kernel
from specnotes.sampling.fused import sample_from_logits
library, good = Path(sys.argv[1]), Path(sys.argv[1]).read_bytes()
g = torch.Generator().manual_seed(0)
lq, lp = torch.randn(8, 2, 300, generator=g), torch.randn(8, 3, 300, generator=g)
for damage in sys.argv[2:]:
    library.unlink()  # a new file: the one loaded in the round before stays mapped in this process
    library.write_bytes(Path(damage).read_bytes())
    kernel._state.clear()
    print(Path(damage).name, kernel.available(), flush=True)
    sample_from_logits(lq.argmax(-1), lq, lp, 1.0, generator=g)
    print(Path(damage).name, "sampled; rebuilt:", library.read_bytes() == good, flush=True)
"""


def test_a_corrupt_cache_entry_is_built_again_without_killing_the_process(monkeypatch, tmp_path):
    """A truncated library (SIGBUS when it is mapped), a garbage file, and a library that dies of SIGILL (one built
    for an instruction this CPU lacks, copied under this CPU's name), each in turn in the cache of a fresh process:
    each is noticed before it is loaded and built again, and the process lives and samples with the kernel."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    library, how = kernel.build(kernel.FLAGS)  # the cache entry the child loads
    assert library is not None and library.is_relative_to(tmp_path / "home"), how
    good = library.read_bytes()
    damages = {"truncated": good[: len(good) // 2], "garbage": b"not a library" * 100,
               "SIGILL": compiled(tmp_path, crashing("SIGILL"), "sigill").read_bytes()}
    for name, data in damages.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "tmp").mkdir()
    done = subprocess.run([sys.executable, "-c", CHILD, str(library), *(str(tmp_path / name) for name in damages)],
                          env=os.environ | {"TMPDIR": str(tmp_path / "tmp")}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}{done.stderr}"
    assert done.stdout.splitlines() == [line for name in damages for line in (f"{name} True",
                                                                              f"{name} sampled; rebuilt: True")]


RACER = """
import sys, time
from pathlib import Path
import torch
from specnotes.sampling import kernel
kernel.FLAGS = (("-O1",),)
Path(sys.argv[1], "ready-" + sys.argv[2]).touch()
while not Path(sys.argv[1], "go").exists():
    time.sleep(0.005)
logits, out = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)), torch.empty(4)
if kernel.available():
    kernel.log_normalizers(logits, 1.0, out)
print(kernel.available(), kernel.available() and bool(torch.allclose(out, torch.logsumexp(logits, -1), atol=1e-5)))
print(kernel.how_built())
"""


def test_four_processes_building_into_one_empty_cache_all_load_a_good_library(monkeypatch, tmp_path):
    """Four fresh processes, let go together, build into one empty cache: each loads a library that works, and the
    cache ends with one entry that matches its sidecar (loaded with no rebuild) and no build folder or temp file."""
    (tmp_path / "tmp").mkdir()
    env = os.environ | {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(n)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for n in range(4)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    said = [racer.communicate(timeout=300) for racer in racers]
    assert all(out.splitlines()[0] == "True True" for out, _ in said), said
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, how = kernel.build(QUICK)
    assert how == f"{kernel.compiler()} -O1", how
    assert sorted(os.listdir(path.parent)) == [path.name, path.name + ".sha256"]
    kernel.load(path)


def test_with_no_proc_a_private_copy_of_the_checked_file_is_loaded(monkeypatch, tmp_path):
    """Where descriptors have no names (no /proc: macOS), the probe and the load each get a copy of the checked
    bytes in a fresh private folder, and the kernel works from it."""
    monkeypatch.setattr(kernel, "PROC_FD", str(tmp_path / "no-proc"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path / "cache"])
    path, how = kernel.build(QUICK)
    assert path is not None, how
    lib = kernel.load(path)
    copy = Path(lib._name)
    assert copy.parent.parent == tmp_path and copy.parent.name.startswith("specnotes-kernel-"), copy
    assert copy.read_bytes() == path.read_bytes() and copy.parent.stat().st_mode & 0o777 == 0o700
    monkeypatch.setitem(kernel._state, "lib", lib)
    assert follows_the_torch_path(monkeypatch)


@pytest.mark.parametrize("signal_name", ["SIGILL", "SIGBUS"])
def test_a_new_library_that_crashes_is_probed_in_a_child_not_loaded(monkeypatch, tmp_path, signal_name):
    source = tmp_path / "accept.c"
    source.write_text(crashing(signal_name))
    monkeypatch.setattr(kernel, "SOURCE", source)
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path / "cache"])
    path, why = kernel.build(QUICK)
    assert path is None and signal_name in why
    assert not list((tmp_path / "cache").glob("accept-*.so"))  # nothing that crashes is cached


def test_on_macos_the_key_holds_the_cpus_features(monkeypatch, tmp_path):
    """-march=native depends on the CPU's features, which macOS reports through sysctl (faked here): two CPUs with
    the same name and different features get different keys."""
    fake = tmp_path / "sysctl"
    fake.write_text('#!/bin/sh\necho "machdep.cpu.brand_string: Apple M2"\necho "hw.optional.arm.FEAT_BF16: $FEAT"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setenv("FEAT", "1")
    with_bf16 = kernel.cpu_key()
    monkeypatch.setenv("FEAT", "0")
    assert "FEAT_BF16: 1" in with_bf16 and kernel.cpu_key() != with_bf16


# ---------------------------------------------------------------------------------------------- wrong kernels
# Each a one-line change to csrc/accept.c (two are two lines), built for this CPU and for AVX2 and run through the
# checks above by each route the changed line is on (``MUTANT_ROUTES``; both where it is not named): each must fail
# one of them on each. "The vector ..." changes the loops built for AVX-512 or AVX2, "a NaN ..." the AVX-512 exp; the
# rest change code built anywhere. The four after the bonus-row mutant were missed before the checks of a masked draft
# at u = 0, of a sum in (0, 1), of a residual with no weight, of two threads run after run, and the chi-square above
# the vector width were added; the last eight are the kept route's own, and one of the recomputed route's.

C_MUTANTS = {
    "the vector residual not clamped at 0": (
        "return vmax(vsub(w, qk == 1 ? vmul(x, sq) : vexp(vfms(vsub(x, mq), scale, cq))), vset(0.0f));",
        "return vsub(w, qk == 1 ? vmul(x, sq) : vexp(vfms(vsub(x, mq), scale, cq)));"),
    "a NaN logit clamped away": ("static inline vec vexp_clamp(vec y) { return _mm512_max_ps(vset(-104.0f), y); }",
                                 "static inline vec vexp_clamp(vec y) { return _mm512_max_ps(y, vset(-104.0f)); }"),
    "the scalar weight not clamped at 0": ("return w > 0.0f ? w : 0.0f;\n}", "return w;\n}"),
    "accept where u q(x) < p(x) fails": ("if (!(u[b * k + n] * qx < px)) break;", "if (u[b * k + n] * qx < px) break;"),
    "no shifted redo of a sum out of range": ("if (s >= 1.0 && s < 1e38) return (norm){0.0f, (float)log(s)};",
                                              "return (norm){0.0f, (float)log(s)};"),
    "bonus token from the last draft position": ("p = target + (b * (k + 1) + k) * V;",
                                                 "p = target + (b * (k + 1) + k - 1) * V;"),
    "the weight before the block not taken off": ("rest = (goal - before) * inside / sums[j];",
                                                  "rest = goal * inside / sums[j];"),
    "q(x) not normalized": ("qx = q_probs ? q[x] : expf((q[x] - nq.m) * inv_t - nq.c);",
                            "qx = q_probs ? q[x] : expf(q[x] * inv_t);"),
    "accept where u q(x) = p(x)": ("if (!(u[b * k + n] * qx < px)) break;", "if (!(u[b * k + n] * qx <= px)) break;"),
    "the threads share one block-sums buffer": (
        ("float *sums = malloc(nb * sizeof(float));",
         "static float *sums;\n#pragma omp single\n        sums = malloc(nb * sizeof(float));"),
        ("        free(sums);\n", "#pragma omp barrier\n#pragma omp single\n        free(sums);\n")),
    "an unshifted sum trusted below 1": ("if (s >= 1.0 && s < 1e38) return (norm){0.0f, (float)log(s)};",
                                         "if (s > 0.0 && s < 1e38) return (norm){0.0f, (float)log(s)};"),
    "no fallback to p when the residual has no weight": ("if (last >= 0 || !q) break;", "break;"),
    "the kept q scaled by p's normalizer": ("if (!q_probs) q = kept + V, nq.s = expf(-nq.c);",
                                            "if (!q_probs) q = kept + V, nq.s = expf(-np.c);"),
    "the kept p not scaled": ("p = kept, np.s = expf(-np.c);", "p = kept, np.s = 1.0f;"),
    "the shifted sum's exponentials not kept": ("sum_exp(x, V, inv_t, m, keep, 0))}",
                                                "sum_exp(x, V, inv_t, m, 0, 0))}"),
    "p's and q's exponentials kept in one buffer": ("nq = lse(q, V, inv_t, kept ? kept + V : 0, 0);",
                                                    "nq = lse(q, V, inv_t, kept, 0);"),
    "the vector loop keeps one vector twice": ("vstore(keep + i, e0), vstore(keep + i + W, e1);",
                                               "vstore(keep + i, e0), vstore(keep + i + W, e0);"),
    "the vector loop's tail not kept": ("        if (keep) keep[i] = e;\n", ""),
    "the fallback to p reads its logits as kept exponentials": ("p = target + (b * (k + 1) + n) * V, np.s = 0.0f;",
                                                                "p = target + (b * (k + 1) + n) * V;"),
    "the threads share one kept buffer": (
        ("float *kept = keep ? malloc((q_probs ? 1 : 2) * V * sizeof(float)) : 0;",
         "static float *kept;\n#pragma omp single\n        kept = keep ? malloc(2 * V * sizeof(float)) : 0;"),
        ("        free(kept);\n", "#pragma omp barrier\n#pragma omp single\n        free(kept);\n")),
    "the vector recomputed q not normalized": ("vexp(vfms(vsub(x, mq), scale, cq))", "vexp(vmul(vsub(x, mq), scale))"),
}
KEPT_ONLY = ["the kept q scaled by p's normalizer", "the kept p not scaled", "the shifted sum's exponentials not kept",
             "p's and q's exponentials kept in one buffer", "the vector loop keeps one vector twice",
             "the vector loop's tail not kept", "the fallback to p reads its logits as kept exponentials",
             "the threads share one kept buffer"]
MUTANT_ROUTES = {name: ROUTES for name in C_MUTANTS} | {name: ("kept",) for name in KEPT_ONLY} | {
    "the vector recomputed q not normalized": ("recomputed",)}


def checks_pass() -> bool:
    """The checks of this file on the library in use, the cheap ones first: agreement, a masked draft at u = 0, a NaN
    row, far logits, a sum in (0, 1), a residual with no weight, two threads, and the chains."""
    for B, k, V, T in [(300, 3, 17, 1.0), (200, 4, 129, 0.8), (64, 4, 32000, 1.0)]:
        drafts, lq, lp, q, p, uniforms = case(B, k, V, T, seed=B + V + k)
        ref, ours = speculative_sample(drafts, q, p, uniforms=uniforms), sample_from_logits(drafts, lq, lp, T,
                                                                                           uniforms=uniforms)
        if (ours[1] == ref[1]).double().mean() < 0.99 or (ours[0] == ref[0]).all(1).double().mean() < 0.98:
            return False
    if masked_tokens_emitted(sample_from_logits):
        return False
    drafts, lq, lp, _, _, uniforms = case(16, 2, 300, 1.0, seed=4)
    lp[5, 0, 7] = float("nan")
    if kernel.accept_step(drafts, lq, False, lp, *uniforms, 1.0, kept=kept_now())[0][5] != -1:  # a NaN row handed back
        return False
    drafts, lq, lp, uniforms = far_case()
    if not all_taken_by_the_kernel(drafts, lq, lp, uniforms):
        return False
    ref = speculative_sample(drafts, torch.softmax(lq.double(), -1), torch.softmax(lp.double(), -1), uniforms=uniforms)
    ours = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    if (ours[1] == ref[1]).double().mean() < 0.98 or (ours[0] == ref[0]).all(1).double().mean() < 0.97:
        return False
    if not (near_the_flush_agrees(sample_from_logits) and empty_residual_draws_from_p() and two_threads_agree()):
        return False
    return min(pvalues(sample_from_logits, 0.6)) > SIGNIFICANCE and all(
        min(wide_pvalues(sampler)) > SIGNIFICANCE for sampler in SAMPLERS)


def built_mutant(monkeypatch, tmp_path, name, build):
    """Load the library built from csrc/accept.c changed as ``C_MUTANTS[name]`` says, with the flags of ``build``."""
    changes = C_MUTANTS[name]
    source = kernel.SOURCE.read_text()
    for old, new in (changes,) if isinstance(changes[0], str) else changes:
        assert source.count(old) == 1, f"the mutant {name!r} no longer matches csrc/accept.c"
        source = source.replace(old, new)
    mutant = tmp_path / "accept.c"
    mutant.write_text(source)
    monkeypatch.setattr(kernel, "SOURCE", mutant)
    monkeypatch.setattr(kernel, "cache_dirs", lambda: [tmp_path])
    path, how = kernel.build(kernel.FLAGS if BUILDS[build] is None else (BUILDS[build],))
    assert path is not None, how
    monkeypatch.setitem(kernel._state, "lib", kernel.load(path))


@pytest.mark.parametrize("build", ["native", "avx2"])
@pytest.mark.parametrize(("name", "route"), [(name, route) for name in C_MUTANTS for route in MUTANT_ROUTES[name]])
def test_the_checks_catch_a_wrong_kernel(monkeypatch, tmp_path, name, route, build):
    if name.startswith("the vector") and build == "native" and not {"avx512f", "avx2"} & set(kernel.cpu_key().split()):
        pytest.skip("the AVX-512 and AVX2 loops are not built for this CPU")
    if name.startswith("a NaN") and (build == "avx2" or "avx512f" not in kernel.cpu_key()):
        pytest.skip("an AVX-512 line: not built")
    if build == "avx2" and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("AVX2 is x86")
    built_mutant(monkeypatch, tmp_path, name, build)
    force(monkeypatch, route)
    assert not checks_pass()


def test_a_kept_route_mutant_passes_by_the_recomputed_route(monkeypatch, tmp_path):
    """The route forcing reaches the kernel: a mutant of a line only the kept route runs fails the checks by that
    route and passes them by the recomputed one (which is why KEPT_ONLY mutants run by the kept route alone)."""
    built_mutant(monkeypatch, tmp_path, "the kept p not scaled", "native")
    force(monkeypatch, "recomputed")
    assert checks_pass()
    force(monkeypatch, "kept")
    assert not checks_pass()


@pytest.mark.usefixtures("routed")
def test_the_checks_pass_the_kernel_as_it_is():
    assert checks_pass()
