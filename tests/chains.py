"""Shared by test_sampling and test_generate: is what speculative decoding emits a Markov chain of the
target, at every position (the bonus token included)? And the deliberately wrong samplers those
checks must reject.

Each check is a chi-square goodness-of-fit test at significance 1e-4: with a correct sampler and a
random seed it would raise a false alarm once in 10,000 runs (the seeds are fixed, so the suite is
deterministic). The wrong samplers get p-values below 1e-30 here.
"""

from __future__ import annotations

import functools

import torch

from specnotes.sampling.exact import draw_uniforms, inverse_cdf

SIGNIFICANCE = 1e-4


def chi_square_pvalue(counts, expected, dof=None) -> float:
    counts, expected = counts.double().flatten(), expected.double().flatten()
    assert expected.min() >= 5, "too few expected counts for the chi-square approximation"
    stat = ((counts - expected) ** 2 / expected).sum()
    dof = torch.tensor(counts.numel() - 1.0 if dof is None else float(dof), dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, stat / 2))  # survival function of chi2(dof)


def pair_pvalue(prev, token, expected_counts) -> float:
    """Chi-square p-value of the (prev, token) counts against ``expected_counts`` [V, V], over the rows
    that occur. Each row is a distribution over V tokens fitted to its own total: V - 1 dof per row."""
    V = expected_counts.shape[0]
    counts = torch.bincount(prev * V + token, minlength=V * V).view(V, V)
    used = expected_counts.sum(1) > 0
    return chi_square_pvalue(counts[used], expected_counts[used], dof=int(used.sum()) * (V - 1))


def position_pvalues(tokens, accepted, P, x0: int) -> list[float]:
    """tokens [n, k+1]: the first k+1 tokens emitted from x0 by n independent sequences; accepted [n]:
    drafts accepted by their first iteration; P [V, V]: the target chain. One p-value per position
    j = 1..k+1, that (t_{j-1}, t_j) ~ P^(j-1)[x0](a)·P[a, b]; then one for the bonus alone: among the
    sequences whose first k drafts all passed, t_{k+1} ~ P[t_k]."""
    n, k = tokens.shape[0], tokens.shape[1] - 1
    V = P.shape[0]
    prev = torch.full((n,), x0, dtype=torch.int64)
    reach = torch.nn.functional.one_hot(torch.tensor(x0), V).to(P.dtype)  # distribution of t_{j-1}
    pvalues = []
    for j in range(k + 1):
        pvalues.append(pair_pvalue(prev, tokens[:, j], n * reach[:, None] * P))
        prev, reach = tokens[:, j], reach @ P
    all_in = accepted == k
    last_draft, bonus = tokens[all_in, k - 1], tokens[all_in, k]
    rows = torch.bincount(last_draft, minlength=V).to(P.dtype)
    pvalues.append(pair_pvalue(last_draft, bonus, rows[:, None] * P))
    return pvalues


# ------------------------------------------------------------------ deliberately wrong samplers
# Each is the textbook rule with one realistic mistake.


def textbook(draft_tokens, draft_probs, target_probs, generator=None, *, bug=None):
    """Speculative sampling written from the paper (vectorized), with an optional ``bug``."""
    B, k = draft_tokens.shape
    u, v = draw_uniforms(B, k, generator, target_probs.device)
    rows = torch.arange(B)
    p_x = target_probs[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1)
    q_x = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    accepted = u < (q_x / p_x if bug == "ratio inverted: min(1, q/p)" else p_x / q_x)
    n = accepted.long().cumprod(-1).sum(-1)
    p, q = target_probs[rows, n], draft_probs[rows, n.clamp(max=k - 1)]
    residual = {"resample from p after a rejection": p,
                "residual max(0, q - p)": (q - p).clamp(min=0)}.get(bug, (p - q).clamp(min=0))
    bonus = {"bonus drawn from p[k-1]": target_probs[:, k - 1],
             "bonus drawn from q[k-1]": draft_probs[:, k - 1],
             "residual applied at the bonus position too": (p - q).clamp(min=0)}.get(bug, p)
    final_u = u[rows, n.clamp(max=k - 1)] if bug == "one uniform for the accept test and the last draw" else v
    last = inverse_cdf(torch.where((n < k)[:, None], residual, bonus), final_u)
    tokens = torch.where(torch.arange(k + 1) < n[:, None], torch.cat([draft_tokens, draft_tokens[:, :1]], 1), -1)
    tokens[rows, n] = last
    return tokens, n


def accept_always(draft_tokens, draft_probs, target_probs, generator=None):
    """Trusts every draft, then adds a bonus token from the target."""
    B, k = draft_tokens.shape
    bonus = torch.multinomial(target_probs[:, k], 1, generator=generator)
    return torch.cat([draft_tokens, bonus], 1), torch.full((B,), k)


BUGS = ["residual applied at the bonus position too", "bonus drawn from p[k-1]", "bonus drawn from q[k-1]",
        "resample from p after a rejection", "residual max(0, q - p)", "ratio inverted: min(1, q/p)",
        "one uniform for the accept test and the last draw"]
WRONG_SAMPLERS = {bug: functools.partial(textbook, bug=bug) for bug in BUGS} | {"accept every draft": accept_always}


# ---------------------------------------------------------------------------------------------- from logits
# For the samplers that take logits (test_fused, test_kernel): Markov chains over V tokens (5 by default; test_kernel
# also runs 37, above the kernel's vector width) whose logit rows are the target's and the draft's; the first two
# tokens a sampler emits from x0 must follow P(x0, ·) and P(t1, ·), where P = softmax(log P0 / T): temperature
# applied to the target's own logits.

LOGIT_V, LOGIT_K = 5, 3


def logit_chains(seed=0, dtype=torch.float64, V=LOGIT_V, scale=0.9):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(V, V, generator=g, dtype=torch.float64).to(dtype) for _ in range(2)]


def logits_once(sampler, LP, LQ, prev, T, g):
    cdf = torch.softmax(LQ.double() / T, -1).cumsum(-1)  # drafts drawn by inverse CDF: multinomial is slow at V = 37
    drafts, lq, lp, token = [], [], [LP[prev]], prev
    for _ in range(LOGIT_K):
        lq.append(LQ[token])
        u = torch.rand(len(token), 1, generator=g, dtype=torch.float64) * cdf[token, -1:]
        token = torch.searchsorted(cdf[token], u, right=True)[:, 0].clamp_(max=LQ.shape[-1] - 1)
        drafts.append(token)
        lp.append(LP[token])
    return sampler(torch.stack(drafts, 1), torch.stack(lq, 1), torch.stack(lp, 1), T, generator=g)


def logits_pvalues(sampler, T, n=200_000, seed=1, dtype=torch.float64, V=LOGIT_V, scale=0.9):
    """Chi-square p-values of the first emitted token and of the first two, for ``sampler(drafts, lq, lp, T,
    generator=)`` on chains of ``V`` tokens whose logits (``scale`` times normal) are ``dtype``. A wider V needs a
    smaller scale, so that every pair keeps an expected count of at least 5."""
    LP, LQ = logit_chains(dtype=dtype, V=V, scale=scale)
    P = torch.softmax(LP.double() / T, -1)
    g = torch.Generator().manual_seed(seed)
    tokens, accepted = logits_once(sampler, LP, LQ, torch.zeros(n, dtype=torch.int64), T, g)
    t1 = tokens[:, 0]
    again, _ = logits_once(sampler, LP, LQ, t1, T, g)
    t2 = torch.where(accepted >= 1, tokens[:, 1], again[:, 0])
    return (chi_square_pvalue(torch.bincount(t1, minlength=V), P[0] * n),
            chi_square_pvalue(torch.bincount(t1 * V + t2, minlength=V ** 2), P[0][:, None] * P * n))
