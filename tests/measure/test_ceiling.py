"""measure.checks.ceiling: the most a measured S can be for its k and α, and the noise rule at its boundary."""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnotes import validate
from specnotes.analytic import cost
from specnotes.measure import checks

alphas = st.floats(0.0, 1.0)
ks = st.integers(1, 16)
steps = st.floats(0.0, 20.0)


@given(alphas, ks, steps)
def test_the_ceiling_is_e_n_over_one_plus_the_least_draft_cost(alpha, k, draft_steps):
    assert checks.ceiling(alpha, k, draft_steps) == pytest.approx(cost.expected_tokens(alpha, k) / (1 + draft_steps))


@given(alphas, ks, st.floats(0.0, 5.0), st.floats(1e-4, 10.0), st.floats(1e-4, 10.0), st.floats(0.0, 10.0))
def test_no_speculative_step_whose_passes_cost_their_least_passes_the_ceiling(alpha, k, draft_steps, t_dec, extra_v,
                                                                             extra_d):
    # S = E[N]·T_dec/(T_draft + T_verify) with T_verify ≥ T_dec and T_draft ≥ draft_steps·T_dec: never above
    s = cost.expected_tokens(alpha, k) * t_dec / (draft_steps * t_dec + extra_d + t_dec + extra_v)
    assert s <= checks.ceiling(alpha, k, draft_steps) * (1 + 1e-12)
    assert not checks.above_ceiling(s, alpha, k, draft_steps)


@settings(max_examples=200)
@given(alphas, ks, st.floats(0.0, 0.5), st.floats(1e-5, 0.5))
def test_the_boundary_is_the_ceiling_times_one_plus_the_noise(alpha, k, noise, past):
    top = checks.ceiling(alpha, k)
    edge = top * (1 + noise)
    assert not checks.above_ceiling(edge, alpha, k, noise=noise)  # at the edge: kept
    assert checks.above_ceiling(edge * (1 + past), alpha, k, noise=noise)  # past it: flagged
    assert not checks.above_ceiling(edge * (1 - past / 2), alpha, k, noise=noise)
    verdict = checks.within_ceiling([1, 2], [edge, edge * (1 + past)], alpha, k, noise=noise)
    assert verdict.kept == (1,) and verdict.flagged == ((2, edge * (1 + past)),) and not verdict.ok


def test_chapter_10s_pair_is_flagged_and_named():
    # issue 47: "S rose ... to 3.75 at B = 64" with k = 3 and α = 0.8, where E[N] = 2.95
    v = checks.within_ceiling([1, 16, 64], [1.4, 2.1, 3.75], 0.8, 3)
    assert v.flagged == ((64, 3.75),) and v.kept == (1, 16)
    assert v.limit == pytest.approx(cost.expected_tokens(0.8, 3)) and math.isclose(v.allowed, 1.1 * v.limit)
    assert "3.75 at B = 64" in v.sentence and "2.95" in v.sentence and "leave it out" in v.sentence


def test_chapter_8s_pairs_above_the_alpha_one_ceiling_are_flagged():
    # the big pair is its own draft and re-scores the verified batch: drafting costs at least k + 1 plain steps
    k = 4
    assert checks.ceiling(1.0, k, draft_steps=k + 1) == pytest.approx((k + 1) / (k + 2))
    v = checks.within_ceiling([1, 2, 4, 4], [0.942, 0.754, 0.641, 1.16], 1.0, k, draft_steps=k + 1)
    assert v.flagged == ((1, 0.942), (4, 1.16)) and "leave them out" in v.sentence


def test_within_the_allowance_is_kept_and_said_so():
    top = checks.ceiling(0.8, 3)
    v = checks.within_ceiling([1, 8], [1.2, top * 1.05], 0.8, 3)
    assert v.ok and v.flagged == () and "by no more than the 10% noise allows" in v.sentence
    v = checks.within_ceiling([1, 8], [1.2, 1.4], 0.8, 3)
    assert v.ok and v.sentence.endswith("the largest is 1.40 at B = 8.")


@pytest.mark.parametrize("call, names", [
    (lambda: checks.ceiling(1.5, 3), "alpha"),
    (lambda: checks.ceiling(0.5, 0), "k"),
    (lambda: checks.ceiling(0.5, 3, -1), "draft_steps"),
    (lambda: checks.above_ceiling(-1.0, 0.5, 3), "measured"),
    (lambda: checks.above_ceiling(1.0, 0.5, 3, noise=2), "noise"),
    (lambda: checks.within_ceiling([1, 2], [1.0], 0.5, 3), "batches and measured"),
    (lambda: checks.within_ceiling([0], [1.0], 0.5, 3), "batches[0]"),
])
def test_bad_input_is_a_value_error_naming_it(call, names):
    with pytest.raises(validate.BadArgument, match=re.escape(names)):
        call()
