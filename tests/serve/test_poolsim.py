"""The decode-pool simulator: Little's law, the tokens per step, the mean-field steady state."""

import math

import numpy as np
import pytest

from specnotes.analytic import cost
from specnotes.serve import poolsim, serving
from specnotes.validate import BadArgument

pytest.importorskip("simpy")


def linear_step(batch, k):
    """Seconds per step: 10 ms of weights and overhead, 2 ms per draft pass, 0.2 ms per verified token."""
    return 0.010 + 0.002 * k + 0.0002 * batch * (k + 1)


def littles_gap(result) -> float:
    """|B - λ·W| / B over the steady-state window."""
    B = result.mean_batch()
    return abs(B - result.admission_rate() * result.residence()) / B


class BatchPerStep(poolsim.SimResult):
    """Wrong: the mean batch over steps, not over time (a long step counts as much as a short one)."""

    def mean_batch(self):
        lo, hi = self.window()
        return float(np.mean([b for t, _, b, k in self.steps if lo <= t <= hi and k >= 0]))


class ResidenceFromArrival(poolsim.SimResult):
    """Wrong: residence counted from the arrival, so prefill and the wait for it count as time in the batch."""

    def residence(self):
        lo, hi = self.window()
        return float(np.mean([r.finished - r.arrival for r in self.measured() if lo <= r.admitted <= hi]))


SETUPS = {
    "plain, disaggregated": dict(policy=serving.FixedK(0), layout="disaggregated", prefill_s=0.05, prefill_workers=4),
    "k=3, disaggregated": dict(policy=serving.FixedK(3), layout="disaggregated", prefill_s=0.05, prefill_workers=4),
    "k=3, colocated": dict(policy=serving.FixedK(3), layout="colocated", prefill_s=lambda n: 0.02 + 0.01 * n),
}


@pytest.mark.parametrize("setup", SETUPS, ids=list(SETUPS))
def test_steady_state_obeys_littles_law_within_5_percent(setup):
    result = poolsim.simulate(20.0, linear_step, alpha=0.7, output_tokens=100, requests=1200, warmup=200, seed=3,
                              **SETUPS[setup])
    assert littles_gap(result) < 0.05
    # the form: B = λ · N_out · TPOT, with the nominal rate and the measured TPOT
    B = result.mean_batch()
    assert abs(B - 20.0 * 100 * result.tpot().mean()) / B < 0.05


def steep_step(batch, k):
    """Step times that grow fast with the batch: long and short steps differ, so time weighting matters."""
    return 0.005 + 0.0005 * batch * (k + 1) + 0.002 * k


@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("wrong", [BatchPerStep, ResidenceFromArrival], ids=lambda c: c.__name__)
def test_the_littles_law_check_catches_wrong_bookkeeping(wrong, k):
    result = poolsim.simulate(20.0, steep_step, serving.FixedK(k), alpha=0.7, output_tokens=50, requests=1200,
                              warmup=200, seed=3, prefill_s=0.2, prefill_workers=16)
    assert littles_gap(result) < 0.05
    result.__class__ = wrong
    assert littles_gap(result) > 0.05


def wrong_untruncated(rng, alpha, k, size):
    return rng.geometric(1 - alpha, size)


def wrong_stops_at_k(rng, alpha, k, size):
    return np.minimum(rng.geometric(1 - alpha, size), k)


def wrong_alpha_swapped(rng, alpha, k, size):
    return np.minimum(rng.geometric(alpha, size), k + 1)


def pmf_distance(draw, alpha, k, n=40_000) -> float:
    counts = np.bincount(draw(np.random.default_rng(0), alpha, k, n), minlength=k + 2)
    inside = np.abs(counts[1:k + 2] / n - np.array(cost.tokens_pmf(alpha, k))).sum()
    return 0.5 * (inside + counts[k + 2:].sum() / n)


def test_tokens_per_step_follow_the_truncated_geometric():
    for alpha, k in ((0.7, 4), (0.9, 2), (0.3, 6)):
        assert pmf_distance(poolsim.tokens_per_step, alpha, k) < 0.01
    assert (poolsim.tokens_per_step(np.random.default_rng(0), 1.0, 3, 5) == 4).all()
    assert (poolsim.tokens_per_step(np.random.default_rng(0), 0.5, 0, 5) == 1).all()


@pytest.mark.parametrize("wrong", [wrong_untruncated, wrong_stops_at_k, wrong_alpha_swapped])
def test_the_pmf_check_rejects_wrong_draws(wrong):
    assert pmf_distance(wrong, 0.7, 4) > 0.05


def test_steady_batch_matches_the_closed_form():
    # plain decoding with T = a + b·B: B = λ·N·(a + b·B)  =>  B = λ·N·a / (1 − λ·N·b)
    a, b, N = 0.010, 0.0002, 100
    step = lambda batch, k: a + b * batch  # noqa: E731
    for rate in (5.0, 20.0, 40.0):
        expected = rate * N * a / (1 - rate * N * b)
        got = poolsim.steady_batch(rate, step, serving.FixedK(0), 0.7, N)
        assert got == pytest.approx(expected, rel=0.02), rate
    assert poolsim.steady_batch(0.5, step, serving.FixedK(0), 0.7, N) == pytest.approx(0.5 * N * (a + b))  # busy 51%
    assert poolsim.steady_batch(50.0, step, serving.FixedK(0), 0.7, N, max_batch=1000) is None  # λ·N·b = 1
    # the most requests per second: at the largest batch, B / (N·(a + b·B))
    assert poolsim.max_rate(step, serving.FixedK(0), 0.7, N, max_batch=200) == pytest.approx(200 / (N * (a + b * 200)))


def test_the_simulation_agrees_with_the_mean_field_at_moderate_load():
    for policy in (serving.FixedK(0), serving.FixedK(3)):
        result = poolsim.simulate(20.0, linear_step, policy, 0.7, 100, requests=1200, warmup=200, seed=1)
        predicted = poolsim.steady_batch(20.0, linear_step, policy, 0.7, 100)
        assert result.mean_batch() == pytest.approx(predicted, rel=0.15)


def test_speculation_helps_at_a_low_rate_and_hurts_near_the_plain_pools_limit():
    # With linear_step, 3 drafts at α = 0.7 pay while the batch is small and cost more at a large one
    policies = serving.FixedK(0), serving.FixedK(3)
    low = [poolsim.simulate(2.0, linear_step, p, 0.7, 100, requests=600, warmup=100, seed=2) for p in policies]
    assert low[1].tpot().mean() < 0.8 * low[0].tpot().mean()
    high = [poolsim.simulate(35.0, linear_step, p, 0.7, 100, requests=1500, warmup=300, seed=2, max_batch=300)
            for p in policies]
    assert high[1].latency().mean() > high[0].latency().mean()
    assert poolsim.max_rate(linear_step, policies[1], 0.7, 100, 300) < poolsim.max_rate(linear_step, policies[0], 0.7,
                                                                                         100, 300)


def test_colocated_prefill_holds_up_the_batch():
    kw = dict(step_time=linear_step, policy=serving.FixedK(0), alpha=0.7, output_tokens=100, requests=800,
              warmup=100, seed=4)
    apart = poolsim.simulate(20.0, layout="disaggregated", prefill_s=0.03, prefill_workers=8, **kw)
    together = poolsim.simulate(20.0, layout="colocated", prefill_s=lambda n: 0.03 * n, **kw)
    assert together.tpot().mean() > 1.2 * apart.tpot().mean()
    assert any(k == -1 for *_, k in together.steps) and not any(k == -1 for *_, k in apart.steps)


def test_arguments_are_checked():
    with pytest.raises(BadArgument, match="rate"):
        poolsim.simulate(0, linear_step, serving.FixedK(0), 0.5, 10)
    with pytest.raises(BadArgument, match="layout"):
        poolsim.simulate(1, linear_step, serving.FixedK(0), 0.5, 10, layout="pd")
    with pytest.raises(BadArgument, match="alpha"):
        poolsim.simulate(1, linear_step, serving.FixedK(0), 1.5, 10)
    with pytest.raises(BadArgument, match="warmup"):
        poolsim.simulate(1, linear_step, serving.FixedK(0), 0.5, 10, requests=10, warmup=9)


def test_sweep_rows_and_their_littles_law_check():
    rows = poolsim.sweep((5.0, 20.0), linear_step, (serving.FixedK(0), serving.FixedK(2)), 0.7, 100,
                         requests=600, warmup=100, seed=5)
    assert [(r["rate"], r["policy"]) for r in rows] == [(5.0, "plain decoding (k = 0)"), (5.0, "fixed k = 2"),
                                                       (20.0, "plain decoding (k = 0)"), (20.0, "fixed k = 2")]
    assert all(r["little gap"] < 0.05 for r in rows)
    assert rows[2]["mean batch"] > rows[0]["mean batch"]  # more load, a bigger batch


def test_solve_finds_the_parameter_by_bisection():
    assert poolsim.solve(lambda x: x**3, 27.0, 0.0, 10.0, iters=40) == pytest.approx(3.0)
    with pytest.raises(BadArgument, match="outside"):
        poolsim.solve(lambda x: x, 20.0, 0.0, 10.0)


def test_solve_answers_an_evaluated_point_of_a_noisy_function():
    # a rising function with a fixed +-5% ripple, like a seeded simulation: the midpoint of the last bracket
    # was never evaluated and can sit where the ripple is against it; the answer must reproduce the target
    def noisy(x):
        return x * (1 + 0.05 * math.sin(977 * x))

    x = poolsim.solve(noisy, 2.0, 0.0, 4.0, iters=11)
    assert noisy(x) == pytest.approx(2.0, rel=0.005)  # the last bracket's midpoint: 0.8% off


def test_sized_runs_every_rate_for_the_same_time():
    assert poolsim.sized(10.0, 120.0) == {"requests": 1200, "warmup": 240}
    assert poolsim.sized(0.5, 120.0) == {"requests": 100, "warmup": 20}  # never fewer than min_requests
    rows = poolsim.sweep((5.0,), linear_step, (serving.FixedK(0),), 0.7, 50, seconds=60.0, seed=1)
    assert rows[0]["little gap"] < 0.05


def test_steady_tpot_and_the_rate_where_speculation_starts_to_hurt():
    # T = a + b·B·(k + 1): plain TPOT = a + b·B; with k = 1 at α = 0.5, E[N] = 1.5 and TPOT = (a + 2b·B) / 1.5
    a, b, N, alpha = 0.010, 0.0002, 100, 0.5
    step = lambda batch, k: a + b * batch * (k + 1)
    one = serving.FixedK(1)
    for rate in (5.0, 20.0):
        B = poolsim.steady_batch(rate, step, one, alpha, N)
        assert poolsim.steady_tpot(rate, step, one, alpha, N) == pytest.approx((a + 2 * b * B) / 1.5, rel=1e-3)
    assert poolsim.steady_tpot(60.0, step, one, alpha, N, max_batch=500) is None  # past capacity
    # with B = λ·N·TPOT: plain TPOT = a / (1 - bλN), k = 1 TPOT = a / (1.5 - 2bλN); equal where
    # 1.5 - 2bλN = 1 - bλN: λ* = 0.5 / (b·N) = 25 requests/s
    assert poolsim.crossover_rate(step, one, alpha, N, 1.0, 40.0) == pytest.approx(25.0, rel=1e-3)
    with pytest.raises(BadArgument, match="outside"):
        poolsim.crossover_rate(step, one, alpha, N, 1.0, 20.0)  # speculation still pays at 20
    with pytest.raises(BadArgument, match="past its capacity"):
        poolsim.crossover_rate(step, one, alpha, N, 1.0, 60.0)
