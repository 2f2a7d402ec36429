"""Verification on a budget (Chapter 11): the decode worker with one k a row (greedy == plain, with the draft model
and the parallel drafter, and through a request's failure), the law of rows that verify different numbers of
drafts (chi-square, with the wrong trims it must reject), the estimates, the profiled slot cost, the policy's
choices, the spoiled drafter and the comparison's bookkeeping."""

import numpy as np
import pytest
import torch
from chains import SIGNIFICANCE, pair_pvalue
from conftest import noisy_pair
from hypothesis import given, settings
from hypothesis import strategies as st

from specnotes.analytic import cost
from specnotes.sampling.exact import draw_uniforms, speculative_sample
from specnotes.serve import budget, decode_worker, serving
from specnotes.tiny import parallel_drafter as pdm
from specnotes.tiny.generate import generate, keep_proposed
from specnotes.tiny.model import ModelConfig
from specnotes.tiny.ragged import sample_rows

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=256)


@pytest.fixture(scope="module")
def pair():
    return noisy_pair(TINY, noise=0.01)


@pytest.fixture(scope="module")
def parallel_pair(pair):
    target, draft = pair
    return target, pdm.from_draft(draft).double().eval()


def prompts(n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (int(m),), generator=g) for m in torch.randint(2, 12, (n,), generator=g)]


def run_worker(target, draft, drafter, choose, new=24, seed=1):
    """Decode every prompt on one worker, with k chosen by ``choose(worker, step)``; the finished tokens by id."""
    ps = prompts()
    w = decode_worker.DecodeWorker(target, draft, slots=len(ps), capacity=40, k_max=6, drafter=drafter)
    for i, p in enumerate(ps):
        w.admit(decode_worker.prefill(target, p, new, request_id=i))
    done, step, rows = {}, 0, []
    while w.n:
        result = w.step(choose(w, step))
        rows += result.rows
        step += 1
        done |= {f.request_id: f.tokens for f in result.finished}
    return done, rows


@pytest.mark.parametrize("which", ["draft model", "parallel"])
def test_one_k_a_row_keeps_greedy_decoding_exact(pair, parallel_pair, which):
    target, draft = pair if which == "draft model" else parallel_pair
    drafter = decode_worker.DraftModelDrafter if which == "draft model" else pdm.ParallelDrafter
    g = torch.Generator().manual_seed(0)
    choose = lambda w, step: torch.randint(0, 7, (w.n,), generator=g).tolist() if step % 3 else 2
    done, rows = run_worker(target, draft, drafter, choose)
    plain = generate(target, prompts(), 24).tokens
    assert all(torch.equal(done[i], plain[i]) for i in range(len(plain)))
    assert {v for _, v, _ in rows} >= {0, 3, 6}  # rows really did verify different numbers of drafts
    assert all(0 <= a <= v for _, v, a in rows)


def test_a_row_list_must_fit_the_batch(pair):
    target, draft = pair
    w = decode_worker.DecodeWorker(target, draft, slots=2, capacity=40, k_max=4)
    w.admit(decode_worker.prefill(target, prompts()[0], 8, request_id=0))
    for bad in ([1, 2], [9], [-1]):
        with pytest.raises(ValueError, match="k"):
            w.step(bad)
    assert w.step([3]).slots == 3


# ---------------------------------------------------------------------------------------------- the law of short rows
# One step from x0 of a Markov chain: drafts from the draft chain Q, row b verifying ks[b] of them (random), the target
# rows past ks[b] garbage (uniform), as a packed verify pass leaves them. The first two tokens each row emits must
# follow P[x0] and P[first].

V, K, N = 5, 3, 200_000


def chains(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.softmax(0.7 * torch.randn(V, V, generator=g, dtype=torch.float64), -1) for _ in range(2)]


def no_trim(drafts, q, p, ks, generator):
    """WRONG: verifies the short rows but keeps whatever the sampler accepted, garbage positions included."""
    return speculative_sample(drafts, q, p, uniforms=draw_uniforms(len(drafts), drafts.shape[1], generator))


def trim_one_late(drafts, q, p, ks, generator):
    """WRONG: keeps one draft past each row's verified ones (an off-by-one in the trim)."""
    tokens, accepted = speculative_sample(drafts, q, p, uniforms=draw_uniforms(len(drafts), drafts.shape[1],
                                                                              generator))
    return keep_proposed(tokens, accepted, (ks + 1).clamp(max=drafts.shape[1]))


def resample_after_trim(drafts, q, p, ks, generator):
    """WRONG: for a row that accepted all its ks drafts, draws its last token from q (the draft) instead of keeping
    the sampler's token there."""
    tokens, accepted = sample_rows(drafts, q, p, ks, generator)
    rows = torch.arange(len(drafts))
    full = (accepted == ks) & (ks < drafts.shape[1])
    tokens[rows[full], ks[full]] = torch.multinomial(q[rows[full], ks[full]], 1, generator=generator)[:, 0]
    return tokens, accepted


def right(drafts, q, p, ks, generator):
    return sample_rows(drafts, q, p, ks, generator)


@pytest.mark.parametrize(("trim", "ok"), [(right, True), (no_trim, False), (trim_one_late, False),
                                          (resample_after_trim, False)], ids=lambda x: getattr(x, "__name__", x))
def test_rows_that_verify_fewer_drafts_emit_the_targets_distribution(trim, ok):
    P, Q = chains()
    g = torch.Generator().manual_seed(1)
    x0 = 0
    d1 = torch.multinomial(Q[x0], N, replacement=True, generator=g)
    d2 = torch.multinomial(Q[d1], 1, generator=g)[:, 0]
    d3 = torch.multinomial(Q[d2], 1, generator=g)[:, 0]
    drafts = torch.stack([d1, d2, d3], 1)
    q = torch.stack([Q[x0].expand(N, V), Q[d1], Q[d2]], 1)
    ks = torch.randint(0, K + 1, (N,), generator=g)
    p = torch.stack([P[x0].expand(N, V), P[d1], P[d2], P[d3]], 1)
    garbage = torch.arange(K + 1) > ks[:, None]  # what the packed pass did not compute
    p = torch.where(garbage[..., None], torch.full_like(p, 1 / V), p)
    tokens, kept = trim(drafts, q, p, ks, g)
    first = tokens[:, 0]
    two = tokens[:, 1] >= 0
    pv = [pair_pvalue(torch.zeros(N, dtype=torch.int64), first, N * torch.nn.functional.one_hot(
        torch.tensor(x0), V).double()[:, None] * P),
          pair_pvalue(first[two], tokens[two, 1], torch.bincount(first[two], minlength=V).double()[:, None] * P)]
    assert (min(pv) > SIGNIFICANCE) == ok, pv
    if ok:
        assert (kept <= ks).all()


# ---------------------------------------------------------------------------------------------- the policy's parts


def test_estimates_by_hand():
    est = budget.Estimates([0.5, 0.5], strength=2.0)
    est.observe([(7, 2, 2), (7, 2, 0), (8, 1, 1)])
    # request 7: position 1 reached twice, passed once; position 2 reached once, passed once
    assert est.rates(7) == pytest.approx([(1 + 1) / (2 + 2), (1 + 1) / (2 + 1)])
    assert est.rates(8) == pytest.approx([(1 + 1) / 3, 0.5])  # position 2 never verified: the prior
    assert est.rates(99) == [0.5, 0.5]
    with pytest.raises(ValueError):
        budget.Estimates([1.5])
    with pytest.raises(ValueError, match="decay"):
        budget.Estimates([0.5], decay=0)


def test_estimates_forget_so_a_request_left_undrafted_is_tried_again():
    est = budget.Estimates([0.8], strength=1.0, decay=0.5)
    est.observe([(0, 1, 0)])  # one rejection: (0.8 + 0) / (1 + 1)
    assert est.rates(0) == pytest.approx([0.4])
    est.observe([])  # a step without its drafts: the count halves, the prior weighs more
    assert est.rates(0) == pytest.approx([0.8 / 1.5])
    for _ in range(30):
        est.observe([])
    assert est.rates(0) == pytest.approx([0.8], rel=1e-6)


def test_pooled_rates_by_hand():
    rows = [(0, 3, 3), (1, 3, 1), (2, 3, 0), (3, 1, 1)]
    # position 1: 4 checked, 3 passed; 2: rows 0 and 1 checked, row 0 passed; 3: row 0 checked and passed; 4: never
    # checked, so the last rate measured
    assert budget.pooled_rates(rows, 4) == pytest.approx([0.75, 0.5, 1.0, 1.0])


def synthetic_times(plain=(1.0, 0.1), jump=0.5, per_slot=0.02, batches=(1, 4, 16), k_max=4, per_width=0.0,
                    one_row=False):
    """Step times T = plain + [k > 0](jump + per_slot·S + per_width·B·W): one k for every row (S = B·k, W = k), or
    with ``one_row`` k for one row only (S = W = k)."""
    cost_of = lambda b, k: jump + (per_slot * (k if one_row else b * k) + per_width * b * k) if k else 0
    seconds = [[plain[0] + plain[1] * b + cost_of(b, k) for b in batches] for k in range(k_max + 1)]
    return serving.StepTimes(tuple(batches), tuple(map(tuple, seconds)))


def test_the_slot_cost_recovers_a_synthetic_profile():
    c = budget.SlotCost.fit(synthetic_times())
    assert c(4, 0) == pytest.approx(1.4)
    assert c(4, 8) == pytest.approx(1.4 + 0.5 + 0.02 * 8)
    assert c(10, 5) == pytest.approx(1.0 + 1.0 + 0.5 + 0.02 * 5)  # between the batches measured
    with pytest.raises(ValueError, match="k = 1"):
        budget.SlotCost.fit(synthetic_times(k_max=0))


def test_the_slot_cost_tells_a_slot_from_the_width_it_pads_to():
    kw = {"per_slot": 0.02, "per_width": 0.01}
    c = budget.SlotCost.fit(synthetic_times(**kw), synthetic_times(**kw, one_row=True))
    # at B = 1 a slot and a row of width are the same thing: only their sum is measured there
    assert c.per_slot[1:] == pytest.approx((0.02,) * 2) and c.per_width[1:] == pytest.approx((0.01,) * 2)
    assert c.per_slot[0] + c.per_width[0] == pytest.approx(0.03)
    # one row of 4 drafts among 16 costs its 4 slots and 16 rows padded to width 4
    assert c(16, 4, 4) == pytest.approx(1.0 + 1.6 + 0.5 + 0.02 * 4 + 0.01 * 16 * 4)
    assert c(16, 32) == pytest.approx(c(16, 32, 2))  # one k a row: 2 each
    with pytest.raises(ValueError, match="same batches"):
        budget.SlotCost.fit(synthetic_times(), synthetic_times(batches=(1, 2, 4), one_row=True))


def test_measure_one_row_times_one_long_row(pair):
    target, draft = pair
    w = decode_worker.DecodeWorker(target, draft, slots=4, capacity=40, k_max=3)
    hs = [decode_worker.prefill(target, p, 20, request_id=i) for i, p in enumerate(prompts(4))]
    ticks = iter(range(10**6))
    t = budget.measure_one_row(w, hs, [1, 4], 3, warmup=0, repeats=2, clock=lambda: float(next(ticks)))
    assert t.batches == (1, 4) and t.k_max == 3 and all(v == 1.0 for row in t.seconds for v in row)


class Rows:
    """What Budget.slots reads of a worker."""

    def __init__(self, ids, k_max=4):
        self.request_ids, self.n, self.k_max = list(ids), len(ids), k_max


def test_the_budget_gives_confident_requests_more_slots():
    policy = budget.Budget(budget.SlotCost.fit(synthetic_times(jump=0.1, per_slot=0.3)), [0.6] * 4, k_max=4)
    assert policy.slots(Rows([0, 1])) == [1, 1]  # the prior alone: one slot each
    for _ in range(3):
        policy.observe(decode_worker.StepResult(2, 4, 0, 0, 0, [], rows=[(0, 4, 4), (1, 4, 0)]))
    ks = policy.slots(Rows([0, 1]))
    assert ks[0] > ks[1]
    policy.reset()
    assert policy.slots(Rows([0, 1]))[0] == policy.slots(Rows([0, 1]))[1]  # forgotten: the prior again


def given_estimates(policy, alphas):
    """The policy's estimates are ``alphas`` (request r's conditional rates: alphas[r])."""
    policy.estimates.matrix = lambda ids: np.array([alphas[r] for r in ids], dtype=float)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4), min_size=1, max_size=6),
       st.floats(0.0, 2.0), st.floats(0.001, 0.5), st.floats(0.0, 0.2),
       st.none() | st.lists(st.floats(1.0, 5.0), min_size=5, max_size=5))
def test_the_budget_expects_at_least_what_every_fixed_k_does(alphas, jump, per_slot, per_width, measured):
    """Under its own model, the budget's step yields at least the tokens per second of every one-k-a-row step,
    whether the one-k steps are priced by the fit or as measured (``rect``), and the rows as the worker runs them
    (packed or padded)."""
    rect = None if measured is None else tuple((t,) for t in measured)
    c = budget.SlotCost((1,), (1.0,), (jump,), (per_slot,), (per_width,), rect)
    policy = budget.Budget(c, [0.5] * 4, k_max=4)
    B = len(alphas)
    given_estimates(policy, alphas)  # the estimates are the truth here
    survivals = cost.survival_rows(alphas)
    rate = lambda ks: (B + sum(sum(s[:k]) for s, k in zip(survivals, ks, strict=True))) / c.step_time(B, ks)
    ks = policy.slots(Rows(range(B)))
    assert all(rate(ks) >= rate([k] * B) * (1 - 1e-12) for k in range(5))


class ByCount:
    """A slot cost that depends on the number of slots only: the case ``cost.budget_slots`` derives."""

    def __init__(self, plain, per_slot):
        self.plain, self.per_slot = plain, per_slot

    def prices(self, batch, slots, widths):
        return self.plain + self.per_slot * np.asarray(slots, dtype=float) ** 1.5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4), min_size=1, max_size=6),
       st.floats(0.1, 2.0), st.floats(0.001, 0.5))
def test_the_budget_chooses_as_the_derivation_does(alphas, plain, per_slot):
    """With a step time that depends on the slot count alone, the policy's numpy choice yields what
    ``cost.budget_slots`` (the derivation, written out) yields: the same tokens per second."""
    c = ByCount(plain, per_slot)
    policy = budget.Budget(budget.SlotCost((1,), (1.0,), (0.0,), (0.0,), (0.0,)), [0.5] * 4, k_max=4)
    policy.cost = c
    B = len(alphas)
    given_estimates(policy, alphas)
    survivals = cost.survival_rows(alphas)
    tokens = lambda ks: B + sum(sum(s[:k]) for s, k in zip(survivals, ks, strict=True))
    n, want = cost.budget_slots(survivals, lambda s: float(c.prices(B, [s], [1])[0]))
    ks = policy.slots(Rows(range(B)))
    assert tokens(ks) / float(c.prices(B, [sum(ks)], [1])[0]) == pytest.approx(tokens(want) / float(
        c.prices(B, [n], [1])[0]), rel=1e-9)
    assert all(k <= 4 for k in ks) and len(ks) == B


def test_the_slot_cost_prices_a_step_as_the_worker_runs_it():
    """Rows the worker pads to the rectangle (most of it real) cost the step measured at one k for all; rows it packs
    cost the fitted T(B, S, W); one k for every row, the step measured at that k."""
    c = budget.SlotCost((4,), (1.0,), (0.5,), (0.1,), (0.01,), ((1.0,), (1.7,), (2.0,), (2.6,)))
    assert c.step_time(4, [0, 0, 0, 0]) == 1.0
    assert c.step_time(4, [2, 2, 2, 2]) == 2.0  # one k a row: measured
    assert c.step_time(4, [3, 3, 3, 2]) == 2.6  # 15 real tokens of 16: padded to k = 3, measured
    assert c.step_time(4, [3, 0, 0, 0]) == pytest.approx(1.0 + 0.5 + 0.1 * 3 + 0.01 * 4 * 3)  # 7 of 16: packed
    assert c.step_time(4, [4, 4, 4, 4]) == pytest.approx(1.0 + 0.5 + 0.11 * 16)  # past what was measured: the fit
    assert budget.SlotCost.fit(synthetic_times()).rect == synthetic_times().seconds


def test_the_trtllm_schedule_is_the_documented_one():
    assert [budget.TRTLLM_SCHEDULE(b) for b in (1, 4, 5, 8, 9, 32, 33, 512)] == [4, 4, 2, 2, 1, 1, 0, 0]


def test_spoiled_drafts_are_rejected_and_greedy_stays_exact(parallel_pair):
    target, par = parallel_pair
    make = lambda m: budget.SpoiledDrafter(m, {0: 1.0, 2: 1.0})
    done, rows = run_worker(target, par, make, lambda w, step: 4)
    plain = generate(target, prompts(), 24).tokens
    assert all(torch.equal(done[i], plain[i]) for i in range(len(plain)))
    assert all(a == 0 for r, _, a in rows if r in (0, 2))  # every draft of theirs was the NUL token
    assert any(a > 0 for r, _, a in rows if r not in (0, 2))


def test_the_comparison_runs_every_policy_at_a_steady_batch(parallel_pair):
    target, par = parallel_pair
    hs = [decode_worker.prefill(target, p, 40, request_id=i) for i, p in enumerate(prompts())]
    policies = [serving.FixedK(0), serving.FixedK(2),
                budget.Budget(budget.SlotCost.fit(synthetic_times()), [0.7] * 4, k_max=4)]
    workers = [decode_worker.DecodeWorker(target, par, slots=5, capacity=60, k_max=4, drafter=pdm.ParallelDrafter)
               for _ in policies]
    ticks = iter(range(10**6))
    result = budget.compare(workers, hs, [1, 4], policies, steps=3, repeats=2, progress=False,
                            clock=lambda: float(next(ticks)))
    assert set(result.steps) == {p.name for p in policies}
    assert all(len(result.steps[p][b]) == 2 and len(result.steps[p][b][0]) == 3 for p in result.steps for b in (1, 4))
    assert result.slots_per_token["plain decoding (k = 0)"][4] == 0
    # the clock is read before the choice, around the worker's step and after observe: a step is 3 ticks, 2 of
    # them outside the worker's step, so tokens/s is a third of the tokens a step (plain decoding delivers B)
    assert result.median("plain decoding (k = 0)", 4) == pytest.approx(4 / 3)
    assert result.fastest("plain decoding (k = 0)", 4) == pytest.approx(4 / 3)
    assert all(result.bookkeeping_share(p, b) == pytest.approx(2 / 3) for p in result.steps for b in (1, 4))
    assert result.median("fixed k = 2", 4) >= 4 / 3
    assert result.disagreements() == [] and set(result.outputs[4]) == {p.name for p in policies}
    result.outputs[4]["fixed k = 2"][0][0] += 1  # a worker that wrote another token: found
    assert result.disagreements() == [(4, 0)]
    with pytest.raises(ValueError, match="max_new_tokens"):
        budget.compare(workers, hs, [1], policies, steps=20, repeats=1, progress=False)


def test_fastest_takes_every_step_at_its_fastest():
    c = budget.Comparison([1], {"p": {1: [[2.0, 1.0], [1.0, 3.0]]}}, {"p": {1: [2, 2]}}, {"p": {1: 0.0}})
    assert c.runs("p", 1) == [4 / 3, 1.0] and c.fastest("p", 1) == 2.0  # steps 1.0 and 1.0: 4 tokens in 2 s
    assert c.spread("p", 1) == (1.0, 4 / 3) and c.median("p", 1) == pytest.approx(7 / 6)
