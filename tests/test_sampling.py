"""Speculative sampling: exactness (the output follows p), loop == fused, acceptance rate, and
proof that the statistical checks catch a wrong sampler."""

import pytest
import torch

from specnotes.sampling import (
    acceptance_rate,
    draw_uniforms,
    inverse_cdf,
    logits_to_probs,
    speculative_sample,
    speculative_sample_loop,
    total_variation,
)

pytestmark = pytest.mark.usefixtures("one_thread")


V, K = 6, 3
# Each distribution check is a chi-square goodness-of-fit test at significance 1e-4: with a
# correct sampler and a random seed it would raise a false alarm once in 10,000 runs (the seed is
# fixed, so the suite is deterministic). A wrong sampler gives p-values below 1e-30 here.
SIGNIFICANCE = 1e-4


def random_dists(generator, *shape, sharpness=1.5, dtype=torch.float64):
    return torch.softmax(sharpness * torch.randn(*shape, generator=generator, dtype=dtype), dim=-1)


def random_case(generator, B, k, vocab, dtype=torch.float64):
    q = random_dists(generator, B, k, vocab, dtype=dtype)
    p = random_dists(generator, B, k + 1, vocab, dtype=dtype)
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=generator).reshape(B, k)
    return drafts, q, p


def chi_square_pvalue(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    counts, expected = counts.double().flatten(), expected_probs.double().flatten() * counts.sum()
    assert expected.min() >= 5, "too few expected counts for the chi-square approximation"
    stat = ((counts - expected) ** 2 / expected).sum()
    dof = torch.tensor(counts.numel() - 1.0, dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, stat / 2))  # survival function of chi2(dof)


# ------------------------------------------------------------------ a Markov-chain language
# Target and draft are first-order Markov chains over V tokens: P[a] (resp. Q[a]) is the next-token
# distribution after token a. Speculative decoding from x0 must emit t1 ~ P[x0], then t2 ~ P[t1].


def markov_chains(seed=0):
    g = torch.Generator().manual_seed(seed)
    return random_dists(g, V, V, sharpness=0.7), random_dists(g, V, V, sharpness=0.7)


def speculate_once(sampler, P, Q, prev, generator, k=K):
    """One draft/verify iteration for every sequence; prev [N] is each sequence's last token."""
    drafts, q_rows, p_rows = [], [], [P[prev]]
    token = prev
    for _ in range(k):
        q_rows.append(Q[token])
        token = torch.multinomial(Q[token], 1, generator=generator).squeeze(-1)
        drafts.append(token)
        p_rows.append(P[token])
    return sampler(torch.stack(drafts, 1), torch.stack(q_rows, 1), torch.stack(p_rows, 1), generator=generator)


def first_two_tokens(sampler, P, Q, n, seed, x0=0):
    """The first two tokens emitted by speculative decoding from x0, for n independent runs."""
    g = torch.Generator().manual_seed(seed)
    prev = torch.full((n,), x0, dtype=torch.int64)
    tokens, accepted = speculate_once(sampler, P, Q, prev, g)
    t1 = tokens[:, 0]
    # where the first iteration emitted only one token, a second iteration continues from it
    again, _ = speculate_once(sampler, P, Q, t1, g)
    t2 = torch.where(accepted >= 1, tokens[:, 1], again[:, 0])
    return t1, t2, accepted


def check_matches_target(sampler, n, seed):
    """p-values of (first token ~ P[x0]) and ((t1, t2) ~ P[x0, t1] P[t1, t2])."""
    P, Q = markov_chains()
    t1, t2, _ = first_two_tokens(sampler, P, Q, n, seed)
    first = torch.bincount(t1, minlength=V)
    pairs = torch.bincount(t1 * V + t2, minlength=V * V)
    joint = P[0][:, None] * P
    return chi_square_pvalue(first, P[0]), chi_square_pvalue(pairs, joint)


def accept_always(draft_tokens, draft_probs, target_probs, generator=None):
    """A wrong sampler: trusts every draft, then adds a bonus token from the target."""
    B, k = draft_tokens.shape
    bonus = torch.multinomial(target_probs[:, k], 1, generator=generator)
    return torch.cat([draft_tokens, bonus], 1), torch.full((B,), k)


def resample_from_target(draft_tokens, draft_probs, target_probs, generator=None):
    """A subtler wrong sampler: right accept test, but on rejection draws from p, not max(0, p - q)."""
    B, k = draft_tokens.shape
    u, v = draw_uniforms(B, k, generator)
    tokens, n = speculative_sample(draft_tokens, draft_probs, target_probs, uniforms=(u, v))
    rows = torch.arange(B)
    from_p = inverse_cdf(target_probs[rows, n], v)
    tokens[rows, n] = torch.where(n < k, from_p, tokens[rows, n])
    return tokens, n


@pytest.mark.parametrize(("sampler", "n"), [(speculative_sample, 200_000), (speculative_sample_loop, 6_000)])
def test_emitted_tokens_follow_the_target(sampler, n):
    p_first, p_pair = check_matches_target(sampler, n, seed=1)
    assert p_first > SIGNIFICANCE
    assert p_pair > SIGNIFICANCE


@pytest.mark.parametrize("broken", [accept_always, resample_from_target])
def test_the_distribution_check_catches_a_wrong_sampler(broken):
    p_first, p_pair = check_matches_target(broken, 200_000, seed=1)
    assert min(p_first, p_pair) < SIGNIFICANCE


def test_acceptance_rate_matches_alpha():
    P, Q = markov_chains()
    n = 200_000
    _, _, accepted = first_two_tokens(speculative_sample, P, Q, n, seed=2)
    alpha = float(acceptance_rate(Q[0], P[0]))
    observed = float((accepted >= 1).double().mean())
    sigma = (alpha * (1 - alpha) / n) ** 0.5
    assert abs(observed - alpha) < 5 * sigma  # false alarm rate ~6e-7
    # the same check fails for the sampler that accepts everything
    _, _, accepted = first_two_tokens(accept_always, P, Q, n, seed=2)
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
    B, k, vocab = 400, 5, 4  # small vocabulary: drafts often agree with the target
    draft_logits = torch.randn(B, k, vocab, generator=g)
    target_logits = torch.randn(B, k + 1, vocab, generator=g)
    q, p = logits_to_probs(draft_logits, 0.0), logits_to_probs(target_logits, 0.0)
    drafts = draft_logits.argmax(-1)
    for sampler in (speculative_sample, speculative_sample_loop):
        tokens, n = sampler(drafts, q, p, generator=g)
        best = target_logits.argmax(-1)
        agree = (drafts == best[:, :k]).long().cumprod(-1).sum(-1)
        assert torch.equal(n, agree)
        assert torch.equal(tokens[torch.arange(B), n], best[torch.arange(B), n])


def test_k_zero_is_plain_sampling():
    p = torch.tensor([[[0.0, 0.0, 1.0]]])
    tokens, n = speculative_sample(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(1, 0, 3), p)
    assert tokens.tolist() == [[2]] and n.tolist() == [0]


def test_logits_to_probs():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert logits_to_probs(logits, 0.0).tolist() == [[0.0, 1.0, 0.0]]
    assert torch.allclose(logits_to_probs(logits, 2.0), torch.softmax(logits / 2, -1))
    with pytest.raises(ValueError):
        logits_to_probs(logits, -1.0)


def test_invalid_inputs_raise_value_error():
    g = torch.Generator().manual_seed(5)
    drafts, q, p = random_case(g, 2, 3, 5, dtype=torch.float32)
    bad = [
        (drafts[:, :2], q, p),  # k mismatch
        (drafts, q, p[:, :3]),  # target needs k+1 positions
        (drafts, q[..., :4], p),  # vocabulary mismatch
        (drafts.int(), q, p),  # dtype
        (drafts + 10, q, p),  # out of vocabulary
        (drafts, q * 2, p),  # not normalized
        (drafts, q, -p),  # negative
        (drafts[0], q, p),  # rank
    ]
    for args in bad:
        with pytest.raises(ValueError):
            speculative_sample(*args)
        with pytest.raises(ValueError):
            speculative_sample_loop(*args)
    zero_q = q.clone()
    zero_q[0, 0] = 0.0
    zero_q[0, 0, (drafts[0, 0] + 1) % 5] = 1.0
    with pytest.raises(ValueError, match="zero draft probability"):
        speculative_sample(drafts, zero_q, p)


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
    with pytest.raises(ValueError, match="same shape"):
        total_variation(p, torch.ones(2) / 2)
