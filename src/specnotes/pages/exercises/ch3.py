"""Chapter 3's problems (03_acceptance): acceptance."""

from __future__ import annotations

from functools import partial

from specnotes.analytic import cost
from specnotes.pages.exercises.answers import (
    constant,
    drafted_fraction,
    geometric_alpha,
    largest_paying_c,
    one_minus,
    optimal_k,
)
from specnotes.pages.exercises.registry import _M, _P, register
from specnotes.record import published

# Spec-Bench (Xia et al. 2024, github.com/hemingkx/Spec-Bench), Vicuna-7B with a separate draft model
# (SpS), A100, greedy: mean accepted tokens per iteration, from the published record Chapter 3's table
# of published pairs shows.
SPEC_BENCH_SPS_MEAN_ACCEPTED = published.load("spec_bench")["a100_vicuna7b_sps"].values["mean_accepted_tokens"]


for _problem in [
    # Chapter 3: acceptance
    _P("ch3.p1a", "03_acceptance", "α implied by Spec-Bench's SpS mean accepted tokens at k = 4",
       partial(cost.implied_alpha, SPEC_BENCH_SPS_MEAN_ACCEPTED, 4), rel=0.01,
       mistakes=(_M(partial(geometric_alpha, SPEC_BENCH_SPS_MEAN_ACCEPTED), "that is the k → ∞ formula "
                    "E[N] = 1/(1 − α): with k drafts solve (1 − α^(k+1))/(1 − α) = E[N]"),
                 _M(partial(drafted_fraction, SPEC_BENCH_SPS_MEAN_ACCEPTED, 4), "(E[N] − 1)/k is the fraction of "
                    "drafted tokens accepted, not the per-token α of the i.i.d. model: solve "
                    "(1 − α^(k+1))/(1 − α) = E[N]"))),
    _P("ch3.p1b", "03_acceptance", "the same at k = 8",
       partial(cost.implied_alpha, SPEC_BENCH_SPS_MEAN_ACCEPTED, 8), rel=0.002,
       mistakes=(_M(partial(cost.implied_alpha, SPEC_BENCH_SPS_MEAN_ACCEPTED, 4), "that is the k = 4 answer: the same "
                    "E[N] implies a different α at each k"),
                 _M(partial(drafted_fraction, SPEC_BENCH_SPS_MEAN_ACCEPTED, 8), "(E[N] − 1)/k is the fraction of "
                    "drafted tokens accepted, not α: solve (1 − α^(k+1))/(1 − α) = E[N]"))),
    _P("ch3.p2a", "03_acceptance", "largest draft cost c at which speculation can pay with α = 0.8",
       partial(largest_paying_c, 0.8), rel=0.01,
       mistakes=(_M(partial(one_minus, 0.8), "1 − α is the rejection rate: with k = 1, S = (1 + α)/(1 + c) > 1 "
                    "exactly when c < α"),)),
    _P("ch3.p2b", "03_acceptance", "the best k at α = 0.8 and c = 0.5", partial(optimal_k, 0.8, 0.5), rel=0,
       mistakes=(_M(lambda: optimal_k(0.8, 0.5) + 1, "off by one: k counts drafted tokens; an iteration yields up "
                    "to k + 1"),
                 _M(partial(optimal_k, 0.8, 0.0), "that is the best k for a free draft (c = 0): at c = 0.5 each "
                    "drafted token costs half a target step"))),
    _P("ch3.p3", "03_acceptance", "why can α at temperature 1 exceed α at temperature 0?", constant("a"), choices={
        "a": "Σ min(p, q) gives partial credit wherever the two distributions overlap, even when argmaxes differ",
        "b": "temperature 1 makes the target's distribution sharper",
        "c": "at temperature 0 the draft must match a randomly sampled target token",
        "d": "at temperature 1 the acceptance test accepts every draft"},
       mistakes=(_M(constant("b"), "temperature 1 leaves the distributions as trained; temperature 0 is the sharpest "
                    "(all mass on the argmax)"),
                 _M(constant("c"), "at temperature 0 nothing is random: a draft is accepted only when both argmaxes "
                    "agree, which is all-or-nothing per position"),
                 _M(constant("d"), "the test accepts with probability min(1, p/q) at every temperature: that is what "
                    "keeps the output exactly the target's distribution"))),
]:
    register(_problem)
