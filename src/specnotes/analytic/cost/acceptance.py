"""Acceptance with i.i.d. drafts (Chapter 3): E[N] (``expected_tokens``), its inverse (``implied_alpha``), the
distribution of N (``tokens_pmf``) and Leviathan's memory-bound speedup with its best k (``speedup``,
``optimal_k``); and acceptance that depends on the draft position (Chapter 11): survival probabilities and the
conditional rates (``survival``, ``conditional_rates``), E[N] from them (``expected_tokens_by_position``), the
one α an i.i.d. model is fitted with (``pooled_alpha``) and the error it makes (``iid_error``)."""

from __future__ import annotations

from specnotes import validate


def expected_tokens(alpha: float, k: int) -> float:
    """E[N] = (1 - α^(k+1)) / (1 - α): tokens per iteration with i.i.d. acceptance (Leviathan Eq. 1)."""
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=0)
    if alpha == 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def implied_alpha(tokens_per_iteration: float, k: int) -> float:
    """The α whose ``expected_tokens(α, k)`` is ``tokens_per_iteration``: the inverse, by bisection.

    ``tokens_per_iteration`` is the mean accepted length per iteration *with* the bonus token
    (Spec-Bench's "mean accepted tokens"), in [1, k + 1]. E[N] = 1 + α + ... + α^k rises strictly with α, so the root
    is unique; 1 ↦ 0 and k + 1 ↦ 1. (The bisection sums the powers: near α = 1 the closed form
    (1 − α^(k+1))/(1 − α) loses digits to cancellation.)
    """
    k = validate.integer("k", k, low=1)
    tokens = validate.number("tokens_per_iteration", tokens_per_iteration, low=1, high=k + 1)
    powers = lambda a: sum(a**i for i in range(k + 1))
    lo, hi = 0.0, 1.0
    for _ in range(64):  # 2^-64: below float precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if powers(mid) < tokens else (lo, mid)
    return lo if tokens - powers(lo) < powers(hi) - tokens else hi


def tokens_pmf(alpha: float, k: int) -> list[float]:
    """P(N = n) for n = 1..k+1: tokens one iteration yields under i.i.d. acceptance (chapter 3).

    N = n ≤ k means n-1 acceptances then a rejection, α^(n-1)(1-α); N = k+1 means all k accepted,
    α^k. The mean is ``expected_tokens(alpha, k)``.
    """
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=0)
    return [alpha ** (n - 1) * (1 - alpha) for n in range(1, k + 1)] + [alpha**k]


def speedup(alpha: float, k: int, c: float) -> float:
    """Memory-bound walltime improvement E[N] / (1 + k·c) (Leviathan Thm 3.8)."""
    c = validate.number("c (draft step time / target step time)", c, low=0)
    return expected_tokens(alpha, k) / (1 + k * c)


def optimal_k(alpha: float, c: float, k_max: int = 64) -> int:
    """The k in 0..k_max that maximizes ``speedup`` (k = 0 means: do not speculate)."""
    k_max = validate.integer("k_max", k_max, low=0)
    return max(range(k_max + 1), key=lambda k: speedup(alpha, k, c))


# ---------------------------------------------------------------------------------------------- by position (Ch 11)


def _alphas(name: str, values) -> list[float]:
    try:
        values = list(values)
    except TypeError:
        raise validate.BadArgumentType(f"{name} must be a sequence of probabilities, one per draft position, "
                                       f"got {type(values).__name__}") from None
    if not values:
        raise validate.BadArgument(f"{name} must hold at least one probability (draft position 1)")
    return [validate.probability(f"{name}[{i}]", a) for i, a in enumerate(values)]


def survival(alphas) -> list[float]:
    """P(N ≥ i + 1) for i = 1..k: the chance that drafts 1..i all pass, Π_{j ≤ i} α_j, from the *conditional*
    rates α_j = P(draft j accepted | drafts 1..j−1 accepted). vLLM logs these survival probabilities as its
    "per-position acceptance rate" (``num_accepted_tokens_per_pos`` / drafts)."""
    out, p = [], 1.0
    for a in _alphas("alphas", alphas):
        p *= a
        out.append(p)
    return out


def conditional_rates(survivals) -> list[float]:
    """The conditional α_i = P(N ≥ i + 1) / P(N ≥ i) from survival probabilities (the inverse of ``survival``);
    a position no draft reached (survival 0) gets α = 0. ``survivals`` must not rise with i."""
    s = _alphas("survivals", survivals)
    if any(b > a for a, b in zip(s, s[1:], strict=False)):
        raise validate.BadArgument(f"survivals must not rise with the position (P(N ≥ i + 1) ≤ P(N ≥ i)), got {s}")
    return [b / a if a else 0.0 for a, b in zip([1.0, *s], s, strict=False)]


def expected_tokens_by_position(alphas, k: int | None = None) -> float:
    """E[N] = 1 + Σ_{i=1..k} Π_{j ≤ i} α_j: tokens per iteration when draft i passes with its own conditional
    rate α_i (Adaptive K's E_acc, vLLM's survival sum). ``k`` (default: all given) uses the first k; with
    every α_i = α this is ``expected_tokens(α, k)``."""
    alphas = _alphas("alphas", alphas)
    k = len(alphas) if k is None else validate.integer("k", k, low=0, high=len(alphas))
    return 1.0 + sum(survival(alphas)[:k]) if k else 1.0


def pooled_alpha(alphas) -> float:
    """The one α Chapter 3 measures from the same drafts: accepted / checked, Σ_i S_i / Σ_i S_(i−1) with S_0 = 1
    (a draft is checked when every one before it passed). What an i.i.d. model is fitted with."""
    s = survival(alphas)
    return sum(s) / (1.0 + sum(s[:-1]))


def iid_error(alphas, alpha: float | None = None) -> float:
    """The relative error of the i.i.d. E[N], ``expected_tokens(α, k)``, against the per-position one: α is
    ``pooled_alpha`` unless given (a first-position rate, say). Negative: the i.i.d. model predicts too few."""
    alphas = _alphas("alphas", alphas)
    a = pooled_alpha(alphas) if alpha is None else validate.probability("alpha", alpha)
    return expected_tokens(a, len(alphas)) / expected_tokens_by_position(alphas) - 1.0
