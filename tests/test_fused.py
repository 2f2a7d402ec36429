"""Rejection sampling from logits: agrees with speculative_sample on the softmaxed inputs in every path (chunks,
one step, one sequence), follows the target (chi-square, with wrong variants caught), never emits a token of
weight 0, greedy at T = 0."""

import pytest
import torch

from specnotes import fused
from specnotes.fused import sample_from_logits
from specnotes.sampling import draw_uniforms, inverse_cdf, logits_to_probs, speculative_sample

pytestmark = pytest.mark.usefixtures("one_thread")

SIGNIFICANCE = 1e-4


def random_logits(g, B, k, V, scale=1.5, dtype=torch.float64):
    return scale * torch.randn(B, k, V, generator=g, dtype=dtype), scale * torch.randn(B, k + 1, V, generator=g,
                                                                                        dtype=dtype)


@pytest.fixture(params=["chunks", "one chunk"])
def path(request, monkeypatch):
    """Each of sample_from_logits' batch paths: position by position in chunks (of 3 KB here: many chunks, and
    rows gathered out of order after the first position), or every position at once (all fits one chunk)."""
    monkeypatch.setattr(fused, "CHUNK_BYTES", 3 << 10 if request.param == "chunks" else 1 << 30)
    return request.param


@pytest.mark.parametrize(("B", "k", "V", "temperature"), [(400, 3, 6, 1.0), (300, 4, 50, 0.7), (40, 4, 1000, 1.3),
                                                          (50, 2, 300, 1.0), (200, 1, 129, 2.0)])
def test_agrees_with_speculative_sample_on_softmaxed_inputs(path, B, k, V, temperature):
    g = torch.Generator().manual_seed(B + V)
    lq, lp = random_logits(g, B, k, V)
    q, p = torch.softmax(lq / temperature, -1), torch.softmax(lp / temperature, -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, k)
    uniforms = draw_uniforms(B, k, g)
    ref = speculative_sample(drafts, q, p, uniforms=uniforms)
    ours = sample_from_logits(drafts, lq, lp, temperature, uniforms=uniforms)
    assert torch.equal(ours[1], ref[1])  # the accept tests agree exactly here (float64)
    assert (ours[0] == ref[0]).all(1).double().mean() >= 0.99  # the last token, up to rounding at CDF edges
    assert len(ref[1].unique()) > 1


@pytest.mark.parametrize(("k", "V", "temperature", "scale"), [(4, 32000, 1.0, 1.5), (3, 300, 0.7, 0.3),
                                                              (2, 50, 1.0, 0.1)])
def test_one_sequence_agrees_with_speculative_sample(k, V, temperature, scale):
    """B = 1 walks the positions: the same acceptances and tokens as the vectorized sampler, at every stop."""
    g = torch.Generator().manual_seed(V)
    stops = set()
    for _ in range(40):
        lq, lp = random_logits(g, 1, k, V, scale)
        q, p = torch.softmax(lq / temperature, -1), torch.softmax(lp / temperature, -1)
        drafts = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(1, k)
        uniforms = draw_uniforms(1, k, g)
        ref = speculative_sample(drafts, q, p, uniforms=uniforms)
        ours = sample_from_logits(drafts, lq, lp, temperature, uniforms=uniforms)
        assert torch.equal(ours[1], ref[1]) and torch.equal(ours[0], ref[0])
        stops.add(int(ref[1]))
    assert len(stops) > 1


def test_large_and_small_logits_are_safe(path):
    """Logits far outside exp's range: softmax subtracts each row's maximum, so nothing overflows."""
    g = torch.Generator().manual_seed(1)
    B, k, V = 64, 2, 300
    lq, lp = random_logits(g, B, k, V)
    lq[::2] += 500.0
    lp[1::2] -= 700.0
    drafts = torch.multinomial(torch.softmax(lq, -1).reshape(-1, V), 1, generator=g).reshape(B, k)
    uniforms = draw_uniforms(B, k, g)
    ref = speculative_sample(drafts, torch.softmax(lq, -1), torch.softmax(lp, -1), uniforms=uniforms)
    for rows in (slice(None), slice(0, 1)):  # the batch, and one sequence
        ours = sample_from_logits(drafts[rows], lq[rows], lp[rows], 1.0,
                                  uniforms=(uniforms[0][rows], uniforms[1][rows]))
        assert torch.equal(ours[1], ref[1][rows]) and (ours[0] == ref[0][rows]).all(1).double().mean() >= 0.98


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


@pytest.mark.parametrize(("B", "V"), [(3000, 300), (500, 300), (200, 32000)])  # chunks, one chunk, chunks
def test_the_last_token_never_has_weight_zero(B, V):
    """Rounding at the end of the CDF must not pick a token of the residual that has no weight (the clamps of
    ``sampling.sample_weights``): here every emitted token must be one of the first 10, in every path."""
    drafts, lq, lp, uniforms = zero_tail_case(B, V, torch.Generator().manual_seed(B + V))
    tokens, n = sample_from_logits(drafts, lq, lp, 1.0, uniforms=uniforms)
    assert (n == 0).all() and (tokens[:, 0] < 10).all()
    one = sample_from_logits(drafts[:1], lq[:1], lp[:1], 1.0, uniforms=(uniforms[0][:1], uniforms[1][:1]))
    assert one[0][0, 0] < 10


# ---------------------------------------------------------------------------------------------- exactness
# Markov chains over V tokens: the first two emitted tokens from x0 must follow P(x0, ·) and P(t1, ·) where P is
# softmax(log P0 / T): temperature applied to the target's own logits.

V, K = 5, 3


def chains(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [0.9 * torch.randn(V, V, generator=g, dtype=torch.float64) for _ in range(2)]  # logits rows


def once(sampler, LP, LQ, prev, T, g):
    Q = torch.softmax(LQ / T, -1)
    drafts, lq, lp, token = [], [], [LP[prev]], prev
    for _ in range(K):
        lq.append(LQ[token])
        token = torch.multinomial(Q[token], 1, generator=g).squeeze(-1)
        drafts.append(token)
        lp.append(LP[token])
    return sampler(torch.stack(drafts, 1), torch.stack(lq, 1), torch.stack(lp, 1), T, generator=g)


def pvalues(sampler, T, n=200_000, seed=1):
    LP, LQ = chains()
    P = torch.softmax(LP / T, -1)
    g = torch.Generator().manual_seed(seed)
    tokens, accepted = once(sampler, LP, LQ, torch.zeros(n, dtype=torch.int64), T, g)
    t1 = tokens[:, 0]
    again, _ = once(sampler, LP, LQ, t1, T, g)
    t2 = torch.where(accepted >= 1, tokens[:, 1], again[:, 0])

    def chi2(counts, probs):
        expected = probs.flatten() * n
        stat = ((counts.double() - expected) ** 2 / expected).sum()
        return float(torch.special.gammaincc(torch.tensor((counts.numel() - 1) / 2, dtype=torch.float64), stat / 2))

    return chi2(torch.bincount(t1, minlength=V), P[0]), chi2(torch.bincount(t1 * V + t2, minlength=V * V),
                                                             P[0][:, None] * P)


def residual_without_q(drafts, lq, lp, T, generator=None):
    """WRONG: after a rejection, draw from p instead of norm(max(0, p - q))."""
    u, v = draw_uniforms(*drafts.shape, generator)
    tokens, n = sample_from_logits(drafts, lq, lp, T, uniforms=(u, v))
    rows = torch.arange(len(n))
    from_p = inverse_cdf(torch.softmax(lp[rows, n] / T, -1), v)
    tokens[rows, n] = torch.where(n < drafts.shape[1], from_p, tokens[rows, n])
    return tokens, n


def temperature_ignored(drafts, lq, lp, T, generator=None):
    """WRONG: the rows are softmaxed at T = 1 whatever the temperature."""
    original = fused.softmax_rows
    fused.softmax_rows = lambda logits, rows, position, temperature, dtype: original(logits, rows, position, 1.0,
                                                                                     dtype)
    try:
        return sample_from_logits(drafts, lq, lp, T, generator=generator)
    finally:
        fused.softmax_rows = original


def bonus_from_first_row(drafts, lq, lp, T, generator=None):
    """WRONG: the last token always comes from the target's first position."""
    return sample_from_logits(drafts, lq, lp[:, :1].expand_as(lp).contiguous(), T, generator=generator)


@pytest.mark.parametrize("chunk_bytes", [fused.CHUNK_BYTES, 1 << 30])  # 200,000 sequences: 2 chunks, or one step
@pytest.mark.parametrize("T", [1.0, 0.6])
def test_emitted_tokens_follow_the_target(monkeypatch, T, chunk_bytes):
    monkeypatch.setattr(fused, "CHUNK_BYTES", chunk_bytes)
    assert min(pvalues(sample_from_logits, T)) > SIGNIFICANCE


@pytest.mark.parametrize("broken", [residual_without_q, temperature_ignored, bonus_from_first_row])
def test_the_check_catches_a_wrong_variant(broken):
    assert min(pvalues(broken, 0.6)) < SIGNIFICANCE


def test_temperature_zero_is_greedy_and_reads_no_draft_logits():
    g = torch.Generator().manual_seed(3)
    B, k, vocab = 500, 4, 4
    lq, lp = random_logits(g, B, k, vocab)
    drafts = lq.argmax(-1)
    ref = speculative_sample(drafts, logits_to_probs(lq, 0.0).double(), logits_to_probs(lp, 0.0).double(),
                             generator=torch.Generator().manual_seed(0))
    ours = sample_from_logits(drafts, None, lp, 0.0)
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert set(ours[1].tolist()) == set(range(k + 1))


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


def test_rows_read_counts_the_rows_up_to_each_stop():
    n = torch.tensor([0, 2, 4, 1])
    assert fused.rows_read(n, 4, 32000).tolist() == [2, 6, 9, 4]  # p and q up to the stop; 2k + 1 after k accepts
    assert fused.rows_read(n[:1], 4, 32000).tolist() == [2]  # one sequence walks its positions too
    assert fused.rows_read(n, 4, 8).tolist() == [9] * 4  # a batch that fits one chunk is read whole, in one step
