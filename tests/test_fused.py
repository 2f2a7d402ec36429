"""Rejection sampling from logits: agrees with speculative_sample on the softmaxed inputs, follows the target
(chi-square, with wrong variants caught), its two-level inverse CDF picks the flat CDF's token, greedy at T = 0."""

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


@pytest.mark.parametrize(("B", "k", "V", "temperature"), [(400, 3, 6, 1.0), (300, 4, 50, 0.7), (40, 4, 1000, 1.3),
                                                          (50, 2, 300, 1.0), (200, 1, 129, 2.0)])
def test_agrees_with_speculative_sample_on_softmaxed_inputs(B, k, V, temperature):
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


def test_rows_that_would_overflow_or_underflow_take_the_shifted_path(monkeypatch):
    big = torch.tensor([[[200.0, 100.0, 0.0]], [[-300.0, -301.0, -302.0]], [[1.0, 2.0, 3.0]]], dtype=torch.float64)
    e, z, lse = fused.exp_rows(big, torch.tensor([0, 1, 2]), 0, 1.0, torch.float64)
    assert torch.allclose(lse, torch.logsumexp(big[:, 0], -1))
    assert torch.allclose(e / z[:, None], torch.softmax(big[:, 0], -1))
    # a gathered (non-contiguous) set of rows, at a temperature
    x = torch.randn(5, 2, 333, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    e, z, lse = fused.exp_rows(x, torch.tensor([4, 1, 2]), 1, 0.5, torch.float64)
    assert torch.allclose(lse, torch.logsumexp(x[[4, 1, 2], 1] / 0.5, -1))


@pytest.mark.parametrize("V", [6, 128, 300, 32000])
def test_the_two_level_inverse_cdf_picks_the_flat_cdf_token(V):
    g = torch.Generator().manual_seed(V)
    B = 2000
    logits = 3 * torch.randn(B, 1, V, generator=g, dtype=torch.float64)
    v = torch.rand(B, generator=g, dtype=torch.float64)
    stop = fused.Stop(B, -(-V // fused.BLOCK), torch.float64, "cpu")
    p = torch.softmax(logits[:, 0], -1)
    stop.record(torch.arange(B), None, fused.block_sums(p), torch.logsumexp(logits[:, 0], -1))
    ours = stop.sample(logits, None, 1.0, v)
    flat = inverse_cdf(torch.softmax(logits[:, 0], -1), v)
    assert (ours == flat).double().mean() > 0.999


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
    """WRONG: the rows are exponentiated at T = 1 whatever the temperature."""
    original = fused.exp_rows
    fused.exp_rows = lambda logits, rows, position, temperature, dtype: original(logits, rows, position, 1.0, dtype)
    try:
        return sample_from_logits(drafts, lq, lp, T, generator=generator)
    finally:
        fused.exp_rows = original


def bonus_from_first_row(drafts, lq, lp, T, generator=None):
    """WRONG: the last token always comes from the target's first position."""
    return sample_from_logits(drafts, lq, lp[:, :1].expand_as(lp).contiguous(), T, generator=generator)


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_emitted_tokens_follow_the_target(T):
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
