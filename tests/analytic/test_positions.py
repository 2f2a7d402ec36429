"""Chapter 11's cost model: E[N] from per-position acceptance, the block-drafter kind priced as one pass, the host
cost of a suffix drafter, where a block and a chain stop paying, and the slot budget against brute force."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnotes.analytic import cost

probability = st.floats(0.0, 1.0, allow_nan=False)
alphas_st = st.lists(probability, min_size=1, max_size=10)

# vLLM PR #48892's per-position (unconditional) acceptance, GSM8K, concurrency 64, MTP 8 (FACTS.md section 4)
PR48892 = [0.7568, 0.6011, 0.4976, 0.4113, 0.3538, 0.2980, 0.2608, 0.2229]


@given(st.floats(0.0, 1.0), st.integers(0, 12))
def test_constant_rates_give_the_iid_formula(alpha, k):
    assert cost.expected_tokens_by_position([alpha] * max(k, 1), k) == pytest.approx(cost.expected_tokens(alpha, k))


@given(alphas_st)
def test_survival_and_conditional_rates_invert_each_other(alphas):
    s = cost.survival(alphas)
    assert all(b <= a + 1e-15 for a, b in zip([1.0, *s], s, strict=False))
    back = cost.conditional_rates(s)
    for a, b, p in zip(alphas, back, [1.0, *s], strict=False):
        if p > 1e-12:
            assert b == pytest.approx(a, rel=1e-9, abs=1e-12)
    assert cost.expected_tokens_by_position(alphas) == pytest.approx(1 + sum(s))


@given(alphas_st)
def test_pooled_alpha_is_accepted_over_checked_and_the_iid_error_vanishes_for_constant_rates(alphas):
    s = cost.survival(alphas)
    assert cost.pooled_alpha(alphas) == pytest.approx(sum(s) / (1 + sum(s[:-1])))
    assert 0 <= cost.pooled_alpha(alphas) <= 1
    assert cost.iid_error([alphas[0]] * len(alphas)) == pytest.approx(0, abs=1e-12)


def test_the_published_head_by_hand():
    """FACTS.md's computation: conditional rates rise from 0.757 to 0.855; E[N] = 1 + Σp = 4.402; an i.i.d. chain
    at the first position's 0.757 predicts 3.78, 14% too few."""
    rates = cost.conditional_rates(PR48892)
    assert [round(a, 3) for a in rates] == [0.757, 0.794, 0.828, 0.827, 0.86, 0.842, 0.875, 0.855]
    assert cost.expected_tokens_by_position(rates) == pytest.approx(1 + sum(PR48892))
    assert round(cost.expected_tokens(PR48892[0], 8), 2) == 3.78
    assert cost.iid_error(rates, PR48892[0]) == pytest.approx(3.7769 / 4.4023 - 1, abs=2e-4)


@pytest.mark.parametrize("bad", [[], [1.2], [0.5, -0.1], "x", None])
def test_bad_rates_are_a_clear_value_error(bad):
    with pytest.raises(ValueError, match="alphas"):
        cost.expected_tokens_by_position(bad)


def test_rising_survivals_are_refused():
    with pytest.raises(ValueError, match="must not rise"):
        cost.conditional_rates([0.5, 0.6])


# ---------------------------------------------------------------------------------------------- a block drafter

HEAD = cost.ModelShape(1, 4096, 32, 8, 14336, 128256, name="one 8B layer and head")


def test_a_block_is_one_pass_whose_price_grows_only_with_its_positions():
    block = cost.Block(HEAD, k_max=16)
    passes = [cost.draft_passes(block, 8, k, 1024) for k in (1, 4, 16)]
    assert all(len(p) == 1 for p in passes)
    chain = cost.draft_passes(HEAD, 8, 16, 1024)
    assert len(chain) == 16
    t = [cost.draft_time(block, "H100-SXM", 8, k, 1024) for k in (1, 4, 16)]
    assert t[0] <= t[1] <= t[2] < cost.draft_time(HEAD, "H100-SXM", 8, 16, 1024) / 4
    fixed = cost.Block(HEAD, block=16)  # DFlash evaluates its whole block whatever k is
    assert cost.draft_time(fixed, "H100-SXM", 8, 1, 1024) == cost.draft_time(fixed, "H100-SXM", 8, 16, 1024)
    assert cost.draft_time(block, "H100-SXM", 8, 16, 1024) == cost.draft_time(cost.SinglePass(HEAD), "H100-SXM", 8,
                                                                               16, 1024)


def test_a_block_refuses_more_than_it_drafts_in_one_pass():
    with pytest.raises(ValueError, match="k_max|high|<= 16|16"):
        cost.draft_time(cost.Block(HEAD, k_max=16), "H100-SXM", 1, 17)
    for bad in ({"k_max": 0}, {"block": 0}):
        with pytest.raises(ValueError):
            cost.Block(HEAD, **bad)


def test_the_block_runs_out_of_room_sooner_than_a_chain():
    """Its verify pass has 17 tokens a sequence against the chain's 4: it meets the ridge 17/4 times sooner, and
    on the model a 16-block at α = 0.8 stops paying at a smaller batch than a 3-chain of an EAGLE-3 head."""
    assert cost.ridge_ratio(16, 3) == 17 / 4
    block = cost.stops_paying(cost.LLAMA_3_8B, cost.Block(HEAD, k_max=16), "H100-SXM", [0.8] * 16)
    chain = cost.stops_paying(cost.LLAMA_3_8B, cost.EAGLE3_LLAMA_3_1_8B, "H100-SXM", [0.8] * 3)
    assert block is not None and chain is not None and 1 < block < chain
    s = cost.position_speedup(cost.LLAMA_3_8B, cost.Block(HEAD, k_max=16), "H100-SXM", block, [0.8] * 16)
    assert s <= 1 < cost.position_speedup(cost.LLAMA_3_8B, cost.Block(HEAD, k_max=16), "H100-SXM", block - 1,
                                          [0.8] * 16)


def test_best_k_of_a_block_falls_with_the_batch():
    ks = [cost.best_position_k(cost.LLAMA_3_8B, cost.Block(HEAD, k_max=16), "H100-SXM", b, [0.85] * 16)
          for b in (1, 16, 64, 256, 1024)]
    assert ks == sorted(ks, reverse=True) and ks[0] >= 8 and ks[-1] < ks[0]


def test_position_speedup_is_batch_speedup_for_constant_rates():
    for b in (1, 32):
        assert cost.position_speedup(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "H100-SXM", b, [0.7] * 4) == pytest.approx(
            cost.batch_speedup(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "H100-SXM", b, 4, 0.7))


def test_a_host_lookup_costs_its_time_per_sequence():
    host = cost.HostLookup(per_sequence=20e-6)
    assert cost.draft_time(host, "H100-SXM", 64, 8) == pytest.approx(64 * 20e-6)
    assert cost.draft_time(host, "H100-SXM", 64, 8, draft_overhead=1e-4) == pytest.approx(64 * 20e-6 + 1e-4)
    assert cost.draft_time(cost.NGRAM, "H100-SXM", 64, 8) == 0
    with pytest.raises(ValueError, match="per_sequence"):
        cost.HostLookup(per_sequence=-1)


# ---------------------------------------------------------------------------------------------- the slot budget


def brute_force(survivals, step_seconds):
    """Every prefix length per request: the best expected tokens per second (the optimum budget_slots claims)."""
    best = 0.0
    for ks in itertools.product(*[range(len(s) + 1) for s in survivals]):
        tokens = len(survivals) + sum(sum(s[:k]) for s, k in zip(survivals, ks, strict=True))
        best = max(best, tokens / step_seconds(sum(ks)))
    return best


rows_st = st.lists(st.lists(probability, min_size=1, max_size=4), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(rows_st, st.floats(0.01, 2.0), st.floats(0.0, 1.0), st.floats(0.0, 3.0))
def test_budget_slots_is_optimal_among_all_prefix_allocations(alphas, per_slot, jump, fixed):
    survivals = cost.survival_rows(alphas)
    step = lambda s: 1.0 + fixed * 0 + (jump if s else 0.0) + per_slot * s  # a draft pass's cost once any slot runs
    n, ks = cost.budget_slots(survivals, step)
    assert sum(ks) == n
    got = (len(survivals) + sum(sum(s[:k]) for s, k in zip(survivals, ks, strict=True))) / step(n)
    assert got == pytest.approx(brute_force(survivals, step), rel=1e-9)


def test_budget_slots_by_hand():
    # two requests: a confident one and a doubtful one; each slot costs 0.2 of a step
    n, ks = cost.budget_slots([[0.9, 0.8, 0.7], [0.3, 0.1, 0.05]], lambda s: 1 + 0.2 * s)
    assert ks == [3, 0] and n == 3  # (2 + 2.4) / 1.6 = 2.75 beats every other budget
    # a free slot is always worth verifying; an expensive one never
    assert cost.budget_slots([[0.1]], lambda s: 1.0) == (1, [1])
    assert cost.budget_slots([[0.9]], lambda s: 1 + 10 * s) == (0, [0])


def test_budget_slots_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one request"):
        cost.budget_slots([], lambda s: 1.0)
    with pytest.raises(ValueError, match="must not rise"):
        cost.budget_slots([[0.2, 0.5]], lambda s: 1.0)
    with pytest.raises(ValueError, match="step_seconds"):
        cost.budget_slots([[0.5]], lambda s: 0.0)
    assert math.isfinite(cost.budget_slots([[0.5]], lambda s: 1.0, max_slots=0)[0])


def test_the_split_gives_a_host_lookup_its_own_term():
    host = cost.HostLookup(per_sequence=20e-6)
    split = cost.breakdown(cost.LLAMA_3_8B, host, "H100-SXM", 64, 8, 1024)
    assert split.totals("draft")["host"] == pytest.approx(64 * 20e-6)
    assert split.seconds("iteration") == pytest.approx(cost.iteration_time(cost.LLAMA_3_8B, host, "H100-SXM", 64, 8,
                                                                           1024))
