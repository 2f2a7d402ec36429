"""Rejection sampling from logits, and from the target's logits with the draft's probabilities: agrees with
speculative_sample on the softmaxed inputs in every torch path (chunks, one step, one sequence: float64 logits,
which the compiled path does not take; it has tests/sampling/test_kernel.py), follows the target
(chi-square, with wrong variants caught, among them each new way the chunked path could go wrong), never emits a
token of weight 0, stays exact for logits far outside exp's range, greedy at T = 0."""

import pytest
import torch
from chains import logits_pvalues

from specnotes.sampling import fused
from specnotes.sampling.exact import draw_uniforms, inverse_cdf, logits_to_probs, speculative_sample
from specnotes.sampling.fused import sample_from_logits, sample_from_target_logits

pytestmark = pytest.mark.usefixtures("one_thread")

SIGNIFICANCE = 1e-4


def from_draft_probs(drafts, lq, lp, T, generator=None, uniforms=None):
    """sample_from_target_logits with the draft's own probabilities softmax(lq / T), as a drafter hands them over."""
    return sample_from_target_logits(drafts, torch.softmax(lq / T, -1), lp, T, generator=generator, uniforms=uniforms)


SAMPLERS = [sample_from_logits, from_draft_probs]


def random_logits(g, B, k, V, scale=1.5, dtype=torch.float64):
    return scale * torch.randn(B, k, V, generator=g, dtype=dtype), scale * torch.randn(B, k + 1, V, generator=g,
                                                                                        dtype=dtype)


@pytest.fixture(params=["chunks", "one chunk"])
def path(request, monkeypatch):
    """Each of sample_from_logits' batch paths: position by position in chunks (of 3 KB here: many chunks, and
    rows gathered out of order after the first position), or every position at once (all fits one chunk)."""
    monkeypatch.setattr(fused, "CHUNK_BYTES", 3 << 10 if request.param == "chunks" else 1 << 30)
    return request.param


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize(("B", "k", "V", "temperature"), [(400, 3, 6, 1.0), (300, 4, 50, 0.7), (40, 4, 1000, 1.3),
                                                          (50, 2, 300, 1.0), (200, 1, 129, 2.0), (12, 3, 5000, 0.8)])
def test_agrees_with_speculative_sample_on_softmaxed_inputs(path, sampler, B, k, V, temperature):
    g = torch.Generator().manual_seed(B + V)
    lq, lp = random_logits(g, B, k, V)
    q, p = torch.softmax(lq / temperature, -1), torch.softmax(lp / temperature, -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, k)
    uniforms = draw_uniforms(B, k, g)
    ref = speculative_sample(drafts, q, p, uniforms=uniforms)
    ours = sampler(drafts, lq, lp, temperature, uniforms=uniforms)
    assert torch.equal(ours[1], ref[1])  # the accept tests agree exactly here (float64)
    assert (ours[0] == ref[0]).all(1).double().mean() >= 0.99  # the last token, up to rounding at CDF edges
    assert len(ref[1].unique()) > 1


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize(("k", "V", "temperature", "scale"), [(4, 32000, 1.0, 1.5), (3, 300, 0.7, 0.3),
                                                              (2, 50, 1.0, 0.1)])
def test_one_sequence_agrees_with_speculative_sample(sampler, k, V, temperature, scale):
    """B = 1 walks the positions: the same acceptances and tokens as the vectorized sampler, at every stop."""
    g = torch.Generator().manual_seed(V)
    stops = set()
    for _ in range(40):
        lq, lp = random_logits(g, 1, k, V, scale)
        q, p = torch.softmax(lq / temperature, -1), torch.softmax(lp / temperature, -1)
        drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(1, k)
        uniforms = draw_uniforms(1, k, g)
        ref = speculative_sample(drafts, q, p, uniforms=uniforms)
        ours = sampler(drafts, lq, lp, temperature, uniforms=uniforms)
        assert torch.equal(ours[1], ref[1]) and torch.equal(ours[0], ref[0])
        stops.add(int(ref[1]))
    assert len(stops) > 1


def far_logits(g, B=64, k=2, V=300):
    """float64 logits far outside exp's range: +800 on every other draft row (exp overflows), -800 on every other
    target row (it underflows to 0), -725 on one target row (a sum in (0, 1): subnormal terms) and one target
    row spread 400 times wider (overflows), with the drafts and uniforms for them."""
    lq, lp = random_logits(g, B, k, V)
    lq[::2] += 800.0
    lp[1::2] -= 800.0
    lp[4, 1] -= 725.0
    lp[2, 0] *= 400.0
    drafts = torch.multinomial(torch.softmax(lq, -1).reshape(-1, V), 1, generator=g).reshape(B, k)
    return drafts, lq, lp, draw_uniforms(B, k, g)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_large_and_small_logits_are_safe(path, sampler):
    """Rows far outside exp's range: the batch's softmax rows and the log-normalizers its draws are computed
    again with, and one sequence's unshifted exp(l) redone shifted by its maximum where its sum leaves [1, inf),
    in the tests, in the residual and in the bonus row: the same draws as on the softmaxed inputs."""
    drafts, lq, lp, uniforms = far_logits(torch.Generator().manual_seed(1))
    ref = speculative_sample(drafts, torch.softmax(lq, -1), torch.softmax(lp, -1), uniforms=uniforms)
    assert len(ref[1].unique()) == 3  # stops at every position, and bonus tokens
    for rows in (slice(None), slice(0, 1), slice(1, 2)):  # the batch, and one sequence
        ours = sampler(drafts[rows], lq[rows], lp[rows], 1.0, uniforms=(uniforms[0][rows], uniforms[1][rows]))
        assert torch.equal(ours[1], ref[1][rows]) and (ours[0] == ref[0][rows]).all(1).double().mean() >= 0.98


def no_shift(monkeypatch):
    """WRONG: the draw's block computed again as exp(l / T), without the row's log-normalizer (and one sequence's
    exp(l) unshifted whatever its sum: no redo of a row that overflowed or underflowed)."""
    exp = fused.Draws.exp
    monkeypatch.setattr(fused.Draws, "exp", lambda self, logits, shift: exp(self, logits, 0.0))


def test_without_the_shifted_redo_far_logits_go_wrong(monkeypatch):
    """The check above can fail: without the log-normalizers, the rows far outside exp's range give wrong draws."""
    no_shift(monkeypatch)
    monkeypatch.setattr(fused, "CHUNK_BYTES", 40 << 10)  # position by position, in chunks
    drafts, lq, lp, uniforms = far_logits(torch.Generator().manual_seed(1), V=3000)
    ref = speculative_sample(drafts, torch.softmax(lq, -1), torch.softmax(lp, -1), uniforms=uniforms)
    try:
        ours = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    except ZeroDivisionError:  # a row whose sum underflowed to 0
        return
    assert not (torch.equal(ours[1], ref[1]) and torch.equal(ours[0], ref[0]))


def zero_tail_case(B, V, g):
    """Logits whose residual max(0, p - q) is 0 past token 9: p and q share the tail, p is higher on the first
    10 tokens (so its normalizer is larger and its tail smaller). Every draft is a tail token with q > p,
    tested with u just under 1 so it is rejected, and v just under 1 points at the very end of the CDF: there
    two sums of the same weights that differ in the last bit (a block's sum, the running sum inside it) send
    an unclamped inverse CDF past the last token with weight, onto the tail."""
    lp = 2 * torch.randn(B, 2, V, generator=g)
    lq = lp[:, :1].clone()
    lp[:, :, :10] += 1 + 3 * torch.rand(B, 1, 1, generator=g)
    drafts = torch.randint(10, V, (B, 1), generator=g)
    top = torch.tensor(1.0).nextafter(torch.tensor(0.0))
    return drafts, lq, lp, (torch.full((B, 1), float(top)), torch.full((B,), float(top)))


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize(("B", "V"), [(3000, 300), (500, 300), (200, 32000)])  # chunks, one chunk, chunks
def test_the_last_token_never_has_weight_zero(monkeypatch, compiled, sampler, B, V):
    """Rounding at the end of the CDF must not pick a token of the residual that has no weight (the clamps of
    ``sampling.sample_weights``, the draw's own in the kernel): every emitted token must be one of the first 10, in
    every path (fp32: the kernel's where it is built, and torch's)."""
    if not compiled:
        monkeypatch.setitem(fused.kernel._state, "lib", None)
    elif not fused.kernel.available():
        pytest.skip(fused.kernel.how_built())
    drafts, lq, lp, uniforms = zero_tail_case(B, V, torch.Generator().manual_seed(B + V))
    tokens, n = sampler(drafts, lq, lp, 1.0, uniforms=uniforms)
    assert (n == 0).all() and (tokens[:, 0] < 10).all()
    one = sampler(drafts[:1], lq[:1], lp[:1], 1.0, uniforms=(uniforms[0][:1], uniforms[1][:1]))
    assert one[0][0, 0] < 10


# ---------------------------------------------------------------------------------------------- exactness
# chains.logits_pvalues: the first two emitted tokens from x0 must follow P(x0, ·) and P(t1, ·), P = softmax(log P0
# / T), on Markov chains with float64 logits (the torch path).


def residual_without_q(drafts, lq, lp, T, generator=None):
    """WRONG: after a rejection, draw from p instead of norm(max(0, p - q))."""
    u, v = draw_uniforms(*drafts.shape, generator)
    tokens, n = sample_from_logits(drafts, lq, lp, T, uniforms=(u, v))
    rows = torch.arange(len(n))
    from_p = inverse_cdf(torch.softmax(lp[rows, n] / T, -1), v)
    tokens[rows, n] = torch.where(n < drafts.shape[1], from_p, tokens[rows, n])
    return tokens, n


def patched(sampler, owner, name, replacement):
    """``sampler`` run with ``owner.name`` replaced by ``replacement(original)``."""

    def run(drafts, lq, lp, T, generator=None):
        original = getattr(owner, name)
        setattr(owner, name, replacement(original))
        try:
            return sampler(drafts, lq, lp, T, generator=generator)
        finally:
            setattr(owner, name, original)

    run.__name__ = f"{sampler.__name__}: {name} wrong"
    return run


def temperature_ignored(drafts, lq, lp, T, generator=None):
    """WRONG: the chunks' rows are exponentiated at T = 1 whatever the temperature."""
    return patched(sample_from_logits, fused, "load",
                   lambda load: lambda out, plane, rows, temperature, *args, **kwargs: load(out, plane, rows, 1.0,
                                                                                            *args, **kwargs)
                   )(drafts, lq, lp, T, generator)


def residual_unscaled(drafts, lq, lp, T, generator=None):
    """WRONG: the chunks' rows exponentiated but not normalized, so the tests and the residual take exp(l_p) and
    exp(l_q) for p and q, without their normalizers."""
    return patched(sample_from_logits, fused, "load",
                   lambda load: lambda out, plane, rows, temperature, exp=True, softmax=False: load(
                       out, plane, rows, temperature, exp)
                   )(drafts, lq, lp, T, generator)


def sums_in_chunk_order(drafts, lq, lp, T, generator=None):
    """WRONG: each chunk's block sums written to the first rows, not to its sequences' rows."""
    def keep(original):
        return lambda self, weights, chunk: original(self, weights, list(range(len(chunk))))

    return patched(sample_from_logits, fused.Draws, "keep", keep)(drafts, lq, lp, T, generator)


def q_of_the_first_position(drafts, lq, lp, T, generator=None):
    """WRONG (draft probabilities): the rejecting rows' q read at the first position, whatever the position."""
    def residual(original):
        def run(self, e, chunk, stop, i, spare):
            return original(self, e, chunk, stop, 0, spare)
        return run

    return patched(from_draft_probs, fused.Draws, "residual", residual)(drafts, lq, lp, T, generator)


def bonus_from_first_row(drafts, lq, lp, T, generator=None):
    """WRONG: the last token always comes from the target's first position."""
    return sample_from_logits(drafts, lq, lp[:, :1].expand_as(lp).contiguous(), T, generator=generator)


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("chunk_bytes", [fused.CHUNK_BYTES, 1 << 30])  # 200,000 sequences: chunks, or one step
@pytest.mark.parametrize("T", [1.0, 0.6])
def test_emitted_tokens_follow_the_target(monkeypatch, sampler, T, chunk_bytes):
    monkeypatch.setattr(fused, "CHUNK_BYTES", chunk_bytes)
    assert min(logits_pvalues(sampler, T)) > SIGNIFICANCE


@pytest.mark.parametrize("broken", [residual_without_q, temperature_ignored, bonus_from_first_row, residual_unscaled,
                                    sums_in_chunk_order, q_of_the_first_position])
def test_the_check_catches_a_wrong_variant(broken):
    assert min(logits_pvalues(broken, 0.6)) < SIGNIFICANCE


def test_temperature_zero_is_greedy_and_reads_no_draft_logits():
    g = torch.Generator().manual_seed(3)
    B, k, vocab = 500, 4, 4
    lq, lp = random_logits(g, B, k, vocab)
    drafts = lq.argmax(-1)
    ref = speculative_sample(drafts, logits_to_probs(lq, 0.0).double(), logits_to_probs(lp, 0.0).double(),
                             generator=torch.Generator().manual_seed(0))
    for ours in (sample_from_logits(drafts, None, lp, 0.0), sample_from_target_logits(drafts, None, lp, 0.0)):
        assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert set(ref[1].tolist()) == set(range(k + 1))


def test_bad_inputs():
    g = torch.Generator().manual_seed(5)
    lq, lp = random_logits(g, 2, 3, 7)
    drafts = torch.zeros(2, 3, dtype=torch.int64)
    for args in [(drafts[:, :2], lq, lp), (drafts, lq, lp[:, :3]), (drafts.int(), lq, lp), (drafts + 9, lq, lp),
                 (drafts, None, lp)]:
        with pytest.raises(ValueError):
            sample_from_logits(*args, temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        sample_from_logits(drafts, lq, lp, -1.0)
    tokens, n = sample_from_logits(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(1, 0, 3),
                                   torch.tensor([[[0.0, 0.0, 50.0]]]), 1.0)
    assert tokens.tolist() == [[2]] and n.tolist() == [0]
    q = torch.softmax(lq, -1)
    for args in [(drafts[:, :2], q, lp), (drafts, q, lp[:, :3]), (drafts.int(), q, lp), (drafts + 9, q, lp),
                 (drafts, None, lp), (drafts, (q > 0.1).long(), lp)]:
        with pytest.raises(ValueError, match="draft"):
            sample_from_target_logits(*args, temperature=1.0)


def test_rows_read_counts_the_rows_up_to_each_stop():
    n = torch.tensor([0, 2, 4, 1])
    assert fused.rows_read(n, 4, 32000).tolist() == [2, 6, 9, 4]  # p and q up to the stop; 2k + 1 after k accepts
    assert fused.rows_read(n, 4, 32000, "probs").tolist() == [2, 4, 5, 3]  # p up to the stop, q only there
    assert fused.rows_read(n, 4, 32000, "target").tolist() == [1, 3, 5, 2]  # the rows that path exponentiates
    assert fused.rows_read(n[:1], 4, 32000).tolist() == [2]  # one sequence walks its positions too
    assert fused.rows_read(n, 4, 8, compiled=True).tolist() == [2, 6, 9, 4]  # the kernel walks every sequence
    assert fused.rows_read(n, 4, 8, compiled=False).tolist() == [9] * 4  # torch reads a batch in one chunk whole
    assert fused.rows_read(n, 4, 32000, compiled=False).tolist() == [2, 6, 9, 4]
    with pytest.raises(ValueError, match="draft"):
        fused.rows_read(n, 4, 8, "softmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_normalizers_are_logsumexp_even_far_outside_exps_range(monkeypatch, dtype):
    monkeypatch.setattr(fused, "CHUNK_BYTES", 40 << 10)  # several chunks
    g = torch.Generator().manual_seed(4)
    logits = 3 * torch.randn(30, 3000, generator=g, dtype=dtype)
    logits[3] += 500.0  # overflows unshifted
    logits[5] -= 900.0  # underflows unshifted
    logits[7] *= 60.0  # spread 60 times wider: overflows unshifted too
    logits[9] = logits[9] / 2 - 89.0  # at T = 1 a sum in (0, 1), a third of it in terms an fp32 exp flushes to 0
    assert 0 < float(torch.exp(logits[9].double()).sum()) < 1
    for T in (1.0, 0.7):
        assert torch.allclose(fused.log_normalizers(logits, T), torch.logsumexp(logits / T, -1).to(
            logits.dtype), rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0)
    with pytest.raises(ValueError, match="temperature"):
        fused.log_normalizers(logits, 0.0)
    with pytest.raises(ValueError, match="logits"):
        fused.log_normalizers(logits[0])


@pytest.mark.parametrize("draft", ["logits", "probs"])
def test_the_route_turns_at_its_threshold(draft):
    """The kernel's route (fused.route): kept below KEPT_BELOW[draft] and with no estimate, recomputed from it up."""
    below = fused.KEPT_BELOW[draft]
    assert 0 < below < 1
    route = lambda a: fused.route(a, draft)  # noqa: E731
    assert route(None) == route(0.0) == route(below - 1e-9) == "kept"
    assert route(below) == route(below + 1e-9) == route(1.0) == "recomputed"
    for bad in (-0.1, 1.5, float("nan"), "high"):
        with pytest.raises(ValueError, match="expected_acceptance"):
            route(bad)
    with pytest.raises(ValueError, match="draft"):
        fused.route(0.5, "softmax")
    assert fused.route(0.75) == "kept" and fused.route(0.75, "probs") == "recomputed"  # the two thresholds apart


def test_acceptance_of_counts_the_drafts_tested():
    """Accepted drafts over drafts tested: n + 1 tested where a sequence stopped after n, k where it took all k."""
    assert fused.acceptance_of(torch.tensor([0, 4, 2]), 4) == 6 / 8
    assert fused.acceptance_of(torch.tensor([4, 4]), 4) == 1.0
    assert fused.acceptance_of(torch.tensor([0, 0]), 3) == 0.0
    assert fused.acceptance_of(torch.tensor([0, 0]), 0) is None and fused.acceptance_of(torch.tensor([]), 4) is None


@pytest.mark.parametrize(("expected", "kept"), [(None, [True, True]), (0.2, [True, True]), (0.75, [True, False]),
                                                (0.95, [False, False]), (1.0, [False, False])])
def test_the_expected_acceptance_picks_the_kernels_route(monkeypatch, expected, kept):
    """What both samplers tell the kernel (by_kernel's ``kept``) follows fused.route of the acceptance they are given
    (the kernel stubbed out here: tests/sampling/test_kernel.py runs each route)."""
    seen = []
    monkeypatch.setattr(fused, "by_kernel", lambda *args: seen.append(args[-1]))  # None: the torch path answers
    monkeypatch.setattr(fused.kernel, "usable", lambda *tensors: True)
    g = torch.Generator().manual_seed(6)
    lq, lp = random_logits(g, 20, 3, 50, dtype=torch.float32)
    drafts = torch.multinomial(torch.softmax(lq, -1).reshape(-1, 50), 1, generator=g).reshape(20, 3)
    sample_from_logits(drafts, lq, lp, 1.0, expected_acceptance=expected)
    sample_from_target_logits(drafts, torch.softmax(lq, -1), lp, 1.0, expected_acceptance=expected)
    assert seen == kept
