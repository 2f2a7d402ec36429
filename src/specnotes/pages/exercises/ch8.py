"""Chapter 8's problems (08_serving): speculation in a server."""

from __future__ import annotations

from functools import partial

from specnotes.pages.exercises.answers import (
    BLOG_MAX_BATCH,
    blog_adaptive_off,
    blog_capacity,
    blog_flag,
    blog_flag_rate,
    blog_rate,
    constant,
    little_batch,
)
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 8: speculation in a server
    _P("ch8.p1a", "08_serving", "mean running batch at 6 requests/s, 300 output tokens, TPOT 20 ms (requests)",
       partial(little_batch, 6, 300, 0.020), "requests",
       mistakes=(_M(partial(little_batch, 6, 1, 0.020), "that is λ · TPOT: a request stays in the batch for all "
                    "its tokens, N_out · TPOT seconds, so B = λ · N_out · TPOT"),)),
    _P("ch8.p1b", "08_serving", "the batch when speculation brings TPOT to 12 ms at the same traffic (requests)",
       partial(little_batch, 6, 300, 0.012), "requests",
       mistakes=(_M(partial(little_batch, 6, 300, 0.020), "that is the batch without speculation: a server does not "
                    "choose its batch, the traffic sets it, and shorter stays make it smaller"),
                 _M(lambda: little_batch(6, 300, 0.020) ** 2 / little_batch(6, 300, 0.012), "the batch scales "
                    "with TPOT, not against it: 12 ms per token means shorter stays and fewer requests in flight"))),
    _P("ch8.p2a", "08_serving", "capacity of the fitted vLLM-blog pool without speculation, ≤ 256 running "
       "(requests/s)", partial(blog_capacity, "plain"), "requests/s",
       mistakes=(_M(partial(blog_rate, BLOG_MAX_BATCH, 0, tpot_batch=1), "that uses the batch-1 step time for 256 "
                    "requests: a step over 256 sequences takes longer, so take T_step at the batch itself"),)),
    _P("ch8.p2b", "08_serving", "its capacity with k = 4 (requests/s)", partial(blog_capacity, "fixed"),
       "requests/s",
       mistakes=(_M(partial(blog_capacity, "fixed", expansion=False), "that leaves out V0's batch-expansion cost: "
                    "the fitted pool pays it for every one of the B·(k + 1) expanded sequences"),
                 _M(partial(blog_rate, BLOG_MAX_BATCH, 4, tokens_per_step=False), "a speculative step gives each "
                    "request E[N](α, k) tokens, not one: multiply by E[N]"))),
    _P("ch8.p2c", "08_serving", "its capacity with the adaptive table (requests/s)", partial(blog_capacity, "adaptive"),
       "requests/s",
       mistakes=(_M(partial(blog_capacity, "fixed"), "that is fixed k = 4: the adaptive table runs k = 0 at the "
                    "large batches that set the capacity"),)),
    _P("ch8.p3a", "08_serving", "the best --speculative-disable-by-batch-size for k = 4 in that pool (requests)",
       blog_flag, "requests", rel=0,
       mistakes=(_M(blog_adaptive_off, "that is where the adaptive table stops speculating altogether: k = 4 "
                    "itself stops paying earlier (serving.crossover with k = 4)"),
                 _M(partial(blog_flag, expansion=False), "that is the crossover without V0's batch-expansion cost: "
                    "use the fitted pool's step time, which includes it"))),
    _P("ch8.p3b", "08_serving", "the request rate that holds the pool at that batch (requests/s)", blog_flag_rate,
       "requests/s",
       mistakes=(_M(partial(blog_flag_rate, per_request=False), "that leaves out N_out: each request stays "
                    "N_out · TPOT seconds, so λ = B / (N_out · TPOT)"),)),
    _P("ch8.p4", "08_serving", "an EAGLE-3 decode worker gets a handoff without hidden states: what is acceptable?",
       constant("a"), choices={
           "a": "refuse the request with an error that names the missing state, or decode it without speculation, "
                "explicitly and counted",
           "b": "draft from a zero hidden state: the target verifies every token, so outputs stay exact",
           "c": "proceed as usual: the KV cache carries everything the decode side needs",
           "d": "let the worker fail and restart: the watchdog recovers it"},
       mistakes=(_M(constant("b"), "outputs would stay exact, but acceptance, and with it the speedup, would "
                    "collapse unnoticed: a silent degradation is not an acceptable behaviour"),
                 _M(constant("c"), "the KV cache is the target's: an EAGLE-style drafter drafts from the target's "
                    "last hidden state, which this handoff does not carry"),
                 _M(constant("d"), "that is SGLang #36140 (a crash in spec_prepare_for_decode, then a watchdog "
                    "self-kill): every request in the batch is lost, and the next one crashes it again"))),
]:
    register(_problem)
