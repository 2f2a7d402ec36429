"""Chapter 11's problems (11_engines_since): a block drafter's ridge, survival against conditional acceptance, and a
verification budget by hand; with the answer functions only they use."""

from __future__ import annotations

from functools import partial

from specnotes.analytic import cost
from specnotes.pages.exercises.answers import H100, free_verify_batch
from specnotes.pages.exercises.registry import _M, _P, register

DASHBOARD = (0.80, 0.60, 0.45, 0.30)  # Problem 2: vLLM-style per-position acceptance (survivals), k = 4
REQUESTS = ((0.9, 0.8, 0.7), (0.3, 0.1, 0.05))  # Problem 3: two requests' survival probabilities
STEP_MS = (1.0, 0.2)  # Problem 3: a step costs 1 + 0.2·S ms for S verified slots


def step_ms(slots: int) -> float:
    return STEP_MS[0] + STEP_MS[1] * slots


def ridge_ratio() -> float:
    """How many times smaller the batch is where a 16-position block's verify pass meets the ridge than a 3-chain's."""
    return free_verify_batch(H100, 3) / free_verify_batch(H100, 15)


def dashboard_en(k: int = 4, conditional: bool = False) -> float:
    """E[N] from the dashboard's rates read as survivals; ``conditional``: the slip of reading them as α_i."""
    rates = DASHBOARD[:k]
    return cost.expected_tokens_by_position(rates) if conditional else 1 + sum(rates)


def conditional_at(position: int) -> float:
    """The conditional rate at ``position`` (1-based) from the dashboard's survivals."""
    return cost.conditional_rates(DASHBOARD)[position - 1]


def iid_error_pct(alpha: float = DASHBOARD[0]) -> float:
    """How far (%) an i.i.d. chain at ``alpha`` misses the dashboard's E[N] (positive: too many)."""
    return 100 * (cost.expected_tokens(alpha, len(DASHBOARD)) / dashboard_en() - 1)


def budget(part: str):
    """Problem 3: the budget's slots, request B's share of them, or its expected tokens per ms."""
    slots, ks = cost.budget_slots(REQUESTS, step_ms)
    if part == "slots":
        return slots
    if part == "b":
        return ks[1]
    return (len(REQUESTS) + sum(sum(r[:k]) for r, k in zip(REQUESTS, ks, strict=True))) / step_ms(slots)


def best_fixed_rate() -> float:
    """Problem 3's comparison: the best tokens per ms with one k for both requests."""
    return max((len(REQUESTS) + sum(sum(r[:k]) for r in REQUESTS)) / step_ms(k * len(REQUESTS)) for k in range(4))


def every_slot_rate() -> float:
    """The slip of verifying every slot: tokens per ms with all six."""
    return (len(REQUESTS) + sum(map(sum, REQUESTS))) / step_ms(sum(map(len, REQUESTS)))


for _problem in [
    _P("ch11.p1a", "11_engines_since", "B from which a 16-position block's verify pass (k = 15) is compute-bound, "
       "H100, bf16", partial(free_verify_batch, H100, 15),
       mistakes=(_M(partial(free_verify_batch, H100, 16), "a block of 16 positions proposes 15 drafts: its verify "
                    "pass carries those and the pending token, 16 per sequence, not 17"),
                 _M(partial(free_verify_batch, H100, 15, 15), "the verify pass also reads the pending token: k + 1 "
                    "tokens per sequence"))),
    _P("ch11.p1b", "11_engines_since", "the same for a chain of k = 3", partial(free_verify_batch, H100, 3),
       mistakes=(_M(partial(free_verify_batch, H100, 3, 3), "the verify pass reads k + 1 tokens per sequence"),)),
    _P("ch11.p1c", "11_engines_since", "their ratio (×)", ridge_ratio,
       mistakes=(_M(lambda: 15 / 3, "the ridge batch goes as 1/(k + 1): (15 + 1)/(3 + 1)"),)),
    _P("ch11.p2a", "11_engines_since", "E[N] of the dashboard's head (per-position 0.80, 0.60, 0.45, 0.30)",
       dashboard_en,
       mistakes=(_M(partial(dashboard_en, conditional=True), "vLLM's per-position rate is a survival, P(N ≥ i + 1): "
                    "add the rates, do not multiply them again"),)),
    _P("ch11.p2b", "11_engines_since", "the conditional acceptance at position 3", partial(conditional_at, 3),
       mistakes=(_M(lambda: DASHBOARD[2], "that is the survival to position 3; the conditional rate is S_3 / S_2"),)),
    _P("ch11.p2c", "11_engines_since", "how far (%) an i.i.d. chain at α = 0.80 misses that E[N]", iid_error_pct,
       "%", rel=0.05,
       mistakes=(_M(lambda: -iid_error_pct(), "the i.i.d. chain predicts too many tokens here: a positive error"),)),
    _P("ch11.p3a", "11_engines_since", "slots the step should verify", partial(budget, "slots"), rel=0,
       mistakes=(_M(lambda: 6, "verifying every slot: B's slots cost 0.2 ms each and yield less than the step's "
                    "tokens per ms"),)),
    _P("ch11.p3b", "11_engines_since", "how many of them are request B's", partial(budget, "b"), rel=0,
       mistakes=(_M(lambda: 1, "B's first slot survives 0.3 of the time and costs 0.2 ms: 1.5 tokens per ms, below "
                    "the 2.75 the step already makes without it"),)),
    _P("ch11.p3c", "11_engines_since", "expected tokens per ms of that step", partial(budget, "rate"),
       "tokens/ms",
       mistakes=(_M(best_fixed_rate, "that is the best single k for both requests"),
                 _M(every_slot_rate, "that verifies every slot"))),
]:
    register(_problem)
