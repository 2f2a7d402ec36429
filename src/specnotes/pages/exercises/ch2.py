"""Chapter 2's problems (02_draft_and_verify): what drafting and verifying cost."""

from __future__ import annotations

import math
from functools import partial

from specnotes.analytic.cost import LLAMA_3_2_1B
from specnotes.pages.exercises.answers import (
    H100,
    H200,
    b_plus_k_batch,
    constant,
    draft_ms,
    free_verify_batch,
    largest_free_batch,
    one_pass_ms,
    ridge,
)
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 2: what drafting and verifying cost
    _P("ch2.p1a", "02_draft_and_verify", "largest batch at which verifying k = 7 drafts is free, H200 bf16 (sequences)",
       partial(largest_free_batch, H200, 7), "sequences", rel=0.035,
       mistakes=(_M(partial(largest_free_batch, H200, 7, math.ceil),
                    f"rounded up: ridge/(k + 1) = {free_verify_batch(H200, 7):.1f}, and B = "
                    f"{largest_free_batch(H200, 7, math.ceil)} puts {8 * largest_free_batch(H200, 7, math.ceil)} "
                    f"tokens per weight read past the ridge of {ridge(H200):.0f}; the largest whole batch within it is "
                    "floor(ridge/(k + 1))"),
                 _M(partial(free_verify_batch, H200, 7, 7), "you divided by k: the verify pass scores k drafts plus "
                    "the bonus position, k + 1 tokens per sequence"),
                 _M(partial(b_plus_k_batch, H200, 7), "that is the source note's B + k rule (ridge − k). With every "
                    "sequence verifying k + 1 tokens the pass has B(k + 1) tokens per weight read"),
                 _M(partial(ridge, H200), "that is the ridge itself: with k + 1 tokens per sequence, divide it by "
                    "k + 1"))),
    _P("ch2.p1b", "02_draft_and_verify", "the same on an A100-80GB (sequences)",
       partial(largest_free_batch, "A100-80GB", 7), "sequences", rel=0.035,
       mistakes=(_M(partial(largest_free_batch, "A100-80GB", 7, math.ceil), "rounded up: the largest whole batch "
                    "whose B(k + 1) tokens stay within the ridge is floor(ridge/(k + 1))"),
                 _M(partial(free_verify_batch, "A100-80GB", 7, 7), "you divided by k: divide the ridge by k + 1"),
                 _M(partial(b_plus_k_batch, "A100-80GB", 7), "that is the B + k rule: the pass has B(k + 1) tokens "
                    "per weight read"))),
    _P("ch2.p2a", "02_draft_and_verify", "k = 4 autoregressive Llama-3.2-1B draft steps at B = 1, H100 (ms)",
       partial(draft_ms, LLAMA_3_2_1B, H100, 1, 4), "ms",
       mistakes=(_M(partial(one_pass_ms, LLAMA_3_2_1B, H100, 1, 4), "that is one pass: an autoregressive draft "
                    "runs k = 4 sequential passes and reads its weights in each"),)),
    _P("ch2.p2b", "02_draft_and_verify", "one pass of a block drafter: the same weights applied to all k = 4 "
       "positions at once (ms)", partial(one_pass_ms, LLAMA_3_2_1B, H100, 1, 4), "ms",
       mistakes=(_M(partial(draft_ms, LLAMA_3_2_1B, H100, 1, 4), "that is k passes: a block drafter applies one set "
                    "of weights to all k positions, so it reads them once"),)),
    _P("ch2.p3", "02_draft_and_verify", "at L = 32768, which bytes dominate both passes and keep verify ≈ decode?",
       constant("b"), choices={
           "a": "the weights, w·P",
           "b": "each sequence's KV cache, B·KV(L), read once per pass whatever n is",
           "c": "the attention FLOPs of the k + 1 new tokens",
           "d": "the KV entries the new tokens write"},
       mistakes=(_M(constant("a"), "the weights are read once per pass at any L, but they do not grow with B or L: at "
                    "L = 32768 the KV cache is the larger read, and it is what hides the extra verify FLOPs"),
                 _M(constant("c"), "those are FLOPs, not bytes, and verify multiplies them by k + 1: they make verify "
                    "costlier, not cheaper"),
                 _M(constant("d"), "those grow with the k + 1 new tokens and are tiny next to the cache already "
                    "stored"))),
]:
    register(_problem)
