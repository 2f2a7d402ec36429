"""Speculative sampling: exactness (every emitted token follows p, the bonus included, for k = 1 and 3),
loop == fused == a textbook version written here, acceptance rate, and proof that the statistical
checks reject each deliberately wrong sampler of ``chains.WRONG_SAMPLERS``."""

import math

import pytest
import torch
from chains import SIGNIFICANCE, WRONG_SAMPLERS, accept_always, position_pvalues, textbook

from specnotes.sampling import exact
from specnotes.sampling.exact import (
    acceptance_rate,
    draw_uniforms,
    logits_to_probs,
    speculative_sample,
    speculative_sample_loop,
    total_variation,
)

pytestmark = pytest.mark.usefixtures("one_thread")


V = 6
N_SAMPLES = 100_000


def random_dists(generator, *shape, sharpness=1.5, dtype=torch.float64):
    return torch.softmax(sharpness * torch.randn(*shape, generator=generator, dtype=dtype), dim=-1)


def random_case(generator, B, k, vocab, dtype=torch.float64):
    q = random_dists(generator, B, k, vocab, dtype=dtype)
    p = random_dists(generator, B, k + 1, vocab, dtype=dtype)
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=generator).reshape(B, k)
    return drafts, q, p


# ------------------------------------------------------------------ a Markov-chain language
# Target and draft are first-order Markov chains over V tokens: P[a] (resp. Q[a]) is the next-token
# distribution after token a. Speculative decoding from x0 must emit a chain of P: t1 ~ P[x0], then
# t2 ~ P[t1], and so on, whichever iteration and whichever rule (accepted draft, correction after a
# rejection, bonus after k acceptances) emitted each token. The draft is half the target, half noise:
# acceptance is high enough that all k drafts pass in a good share of iterations (the bonus token).


def markov_chains(seed=0):
    g = torch.Generator().manual_seed(seed)
    P = random_dists(g, V, V, sharpness=0.7)
    return P, 0.5 * P + 0.5 * random_dists(g, V, V, sharpness=0.7)


def speculate_once(sampler, P, Q, prev, generator, k):
    """One draft/verify iteration for every sequence; prev [N] is each sequence's last token."""
    drafts, q_rows, p_rows = [], [], [P[prev]]
    token = prev
    for _ in range(k):
        q_rows.append(Q[token])
        token = torch.multinomial(Q[token], 1, generator=generator).squeeze(-1)
        drafts.append(token)
        p_rows.append(P[token])
    return sampler(torch.stack(drafts, 1), torch.stack(q_rows, 1), torch.stack(p_rows, 1), generator=generator)


def emitted_tokens(sampler, P, Q, n, k, seed, x0=0):
    """The first k+1 tokens speculative decoding emits from x0, for n independent sequences
    ([n, k+1]: one iteration's worth when all k drafts pass), and the first iteration's accepted count."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(n)
    out = torch.full((n, 2 * (k + 1)), -1, dtype=torch.int64)
    produced = torch.zeros(n, dtype=torch.int64)
    prev = torch.full((n,), x0, dtype=torch.int64)
    first_accepted = None
    while (produced < k + 1).any():
        tokens, accepted = speculate_once(sampler, P, Q, prev, g, k)
        first_accepted = accepted if first_accepted is None else first_accepted
        gained = torch.where(produced < k + 1, accepted + 1, 0)
        keep = torch.arange(k + 1) < gained[:, None]
        slots = produced[:, None] + torch.arange(k + 1)
        out[rows[:, None].expand_as(slots)[keep], slots[keep]] = tokens[keep]
        prev = tokens[rows, accepted]
        produced += gained
    return out[:, : k + 1], first_accepted


def check_every_position(sampler, n, k, seed, x0=0):
    """p-values of every emitted position and of the bonus (see chains.position_pvalues), and the
    share of sequences whose first iteration accepted all k drafts."""
    P, Q = markov_chains()
    tokens, accepted = emitted_tokens(sampler, P, Q, n, k, seed, x0)
    return position_pvalues(tokens, accepted, P, x0), float((accepted == k).double().mean())


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize(("sampler", "n"), [(speculative_sample, N_SAMPLES), (speculative_sample_loop, 8_000),
                                            (textbook, N_SAMPLES)], ids=["fused", "loop", "textbook"])
def test_every_emitted_position_follows_the_target(sampler, n, k):
    pvalues, all_accepted = check_every_position(sampler, n, k, seed=k)
    assert min(pvalues) > SIGNIFICANCE, pvalues
    assert all_accepted > 0.1  # the bonus position is exercised, not just reachable


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("name", list(WRONG_SAMPLERS))
def test_the_distribution_check_rejects_a_wrong_sampler(name, k):
    pvalues, _ = check_every_position(WRONG_SAMPLERS[name], N_SAMPLES, k, seed=k)
    assert min(pvalues) < SIGNIFICANCE, pvalues


def test_acceptance_rate_matches_alpha():
    P, Q = markov_chains()
    n = 200_000
    _, accepted = emitted_tokens(speculative_sample, P, Q, n, 1, seed=2)
    alpha = float(torch.minimum(Q[0], P[0]).sum())  # the overlap, by hand
    assert float(acceptance_rate(Q[0], P[0])) == pytest.approx(alpha)
    observed = float((accepted >= 1).double().mean())
    sigma = (alpha * (1 - alpha) / n) ** 0.5
    assert abs(observed - alpha) < 5 * sigma  # false alarm rate ~6e-7
    # the same check fails for the sampler that accepts everything
    _, accepted = emitted_tokens(accept_always, P, Q, n, 1, seed=2)
    assert abs(float((accepted >= 1).double().mean()) - alpha) > 5 * sigma


@pytest.mark.parametrize(("B", "k", "vocab"), [(300, 1, 6), (300, 3, 6), (200, 5, 50), (50, 4, 1000)])
def test_loop_and_fused_agree_sample_for_sample(B, k, vocab):
    g = torch.Generator().manual_seed(k * 1000 + vocab)
    drafts, q, p = random_case(g, B, k, vocab)
    uniforms = draw_uniforms(B, k, g)
    fused = speculative_sample(drafts, q, p, uniforms=uniforms)
    loop = speculative_sample_loop(drafts, q, p, uniforms=uniforms)
    assert torch.equal(fused[0], loop[0]) and torch.equal(fused[1], loop[1])
    # ragged: a mix of acceptance counts, so the test exercises every branch
    assert len(fused[1].unique()) > 1
    # with the same generator seed both consume the same random numbers
    a = speculative_sample(drafts, q, p, generator=torch.Generator().manual_seed(7))
    b = speculative_sample_loop(drafts, q, p, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # and so does the textbook version of tests/chains.py, written independently from the paper
    c = textbook(drafts, q, p, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])


def test_output_layout():
    g = torch.Generator().manual_seed(3)
    B, k = 500, 4
    drafts, q, p = random_case(g, B, k, 8, dtype=torch.float32)
    tokens, n = speculative_sample(drafts, q, p, generator=g)
    assert tokens.dtype == n.dtype == torch.int64 and tokens.shape == (B, k + 1) and n.shape == (B,)
    assert ((n >= 0) & (n <= k)).all()
    steps = torch.arange(k + 1)
    accepted_part = steps < n[:, None]
    assert torch.equal(tokens[accepted_part], drafts[accepted_part[:, :k]])
    assert (tokens[steps > n[:, None]] == -1).all()
    assert ((tokens[torch.arange(B), n] >= 0) & (tokens[torch.arange(B), n] < 8)).all()
    assert set(n.tolist()) == set(range(k + 1))


def test_greedy_accepts_exactly_the_argmax_prefix():
    g = torch.Generator().manual_seed(4)
    B, k, vocab = 400, 5, 4
    target_logits = torch.randn(B, k + 1, vocab, generator=g)
    # the draft sees the target's logits plus noise: its argmax agrees often, not always
    draft_logits = target_logits[:, :k] + 0.6 * torch.randn(B, k, vocab, generator=g)
    q, p = logits_to_probs(draft_logits, 0.0), logits_to_probs(target_logits, 0.0)
    drafts = draft_logits.argmax(-1)
    for sampler in (speculative_sample, speculative_sample_loop):
        tokens, n = sampler(drafts, q, p, generator=g)
        best = target_logits.argmax(-1)
        agree = (drafts == best[:, :k]).long().cumprod(-1).sum(-1)
        assert torch.equal(n, agree)
        assert torch.equal(tokens[torch.arange(B), n], best[torch.arange(B), n])
        # every case occurs: a rejection at the first draft, in the middle, and all k accepted (the bonus)
        assert set(n.tolist()) == set(range(k + 1))


def test_k_zero_is_plain_sampling():
    p = torch.tensor([[[0.0, 0.0, 1.0]]])
    tokens, n = speculative_sample(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(1, 0, 3), p)
    assert tokens.tolist() == [[2]] and n.tolist() == [0]


def test_logits_to_probs():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert logits_to_probs(logits, 0.0).tolist() == [[0.0, 1.0, 0.0]]
    assert torch.allclose(logits_to_probs(logits, 2.0), torch.softmax(logits / 2, -1))


def test_rejection_with_no_residual_mass_falls_back_to_the_target():
    # only reachable through rounding (p and q equal up to a few ulps); forced here without validation
    p = torch.tensor([[[0.25, 0.5, 0.0], [0.3, 0.3, 0.4]]])
    q = torch.tensor([[[0.5, 0.5, 0.0]]])
    drafts = torch.tensor([[0]])
    uniforms = (torch.tensor([[0.9]]), torch.tensor([0.5]))  # 0.9 * q(0) > p(0): rejected
    for sampler in (speculative_sample, speculative_sample_loop):
        tokens, n = sampler(drafts, q, p, uniforms=uniforms, validate=False)
        assert n.tolist() == [0] and tokens.tolist() == [[1, -1]]  # v = 0.5 of p's mass 0.75 -> token 1


def test_total_variation_by_hand():
    p = torch.tensor([0.5, 0.5, 0.0])
    assert total_variation(p, p) == 0.0
    assert total_variation(p, torch.tensor([0.0, 0.0, 1.0])) == 1.0
    assert total_variation(p, torch.tensor([0.25, 0.5, 0.25])) == pytest.approx(0.25)


# ---------------------------------------------------------------------------------------------- large vocabularies
# Past sampling.FLAT tokens the inverse CDF runs in two levels (block sums, then one block). Both samplers use it.


@pytest.mark.parametrize(("B", "k", "vocab"), [(64, 4, 5000), (1, 4, 32000), (1, 3, 6), (2, 4, 32000)])
def test_loop_and_vectorized_agree_past_the_flat_limit_and_at_batch_one(B, k, vocab):
    g = torch.Generator().manual_seed(vocab + B)
    drafts, q, p = random_case(g, B, k, vocab)
    uniforms = draw_uniforms(B, k, g)
    fused = speculative_sample(drafts, q, p, uniforms=uniforms)
    loop = speculative_sample_loop(drafts, q, p, uniforms=uniforms)
    assert torch.equal(fused[0], loop[0]) and torch.equal(fused[1], loop[1])


@pytest.mark.parametrize("vocab", [2049, 32000, 128256])
def test_the_two_level_inverse_cdf_is_the_flat_one(vocab):
    from specnotes.sampling.exact import sample_cdf, sample_weights

    g = torch.Generator().manual_seed(vocab)
    weights = torch.softmax(3 * torch.randn(500, vocab, generator=g, dtype=torch.float64), -1)
    v = torch.rand(500, generator=g, dtype=torch.float64)
    assert (sample_weights(weights, v) == sample_cdf(weights.cumsum(-1), v)).double().mean() > 0.998
    # zero weights: whole empty blocks, an empty tail, v at the very top; a zero-weight token never comes back
    sparse = torch.zeros(300, vocab, dtype=torch.float64)
    picks = torch.randint(0, vocab - 200, (300, 3), generator=g)
    sparse.scatter_(1, picks, torch.rand(300, 3, generator=g, dtype=torch.float64) + 0.1)
    for top in (torch.rand(300, generator=g, dtype=torch.float64), torch.full((300,), 1 - 1e-12, dtype=torch.float64),
                torch.zeros(300, dtype=torch.float64)):
        chosen = sample_weights(sparse, top)
        assert (sparse.gather(1, chosen[:, None]) > 0).all()
    one = torch.zeros(vocab, dtype=torch.float64)
    one[vocab - 1] = 1.0  # the last token only: the padded tail of the last block must not catch it
    assert int(sample_weights(one, torch.tensor(0.5, dtype=torch.float64))) == vocab - 1


def test_weights_accepts_distributions_and_positive_weights():
    probs = torch.tensor([[0.25, 0.75], [1.0, 0.0]])
    assert exact.check_weights("probs", probs, normalized=True) is probs
    assert exact.check_weights("w", torch.tensor([3.0, 0.0, 1.0])) is not None  # unnormalized is fine


@pytest.mark.parametrize(("values", "normalized", "error", "match"), [
    (torch.zeros(2, 3), False, ValueError, r"w: every row needs a positive total"),
    (torch.tensor([0.5, -0.1, 0.6]), False, ValueError, r"w must hold finite weights >= 0"),
    (torch.tensor([0.5, math.nan]), False, ValueError, r"w must hold finite weights >= 0"),
    (torch.tensor([[0.5, 0.6]]), True, ValueError, r"w must be probability distributions .* from 1\.1 to 1\.1"),
    (torch.tensor([1, 2]), False, TypeError, r"w must be a floating-point tensor"),
    ([0.5, 0.5], False, TypeError, r"w must be a floating-point tensor \[\.\.\., V\] of weights, got list"),
])
def test_weights_rejects(values, normalized, error, match):
    with pytest.raises(error, match=match):
        exact.check_weights("w", values, normalized=normalized)
