"""Chapter 4's problems (04_batch_size): batch size and the crossover batch."""

from __future__ import annotations

from functools import partial

from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B
from specnotes.pages.exercises.answers import (
    H100,
    H200,
    best_k_at,
    crossover,
    derived_crossover,
    memory_bound_speedup,
    speedup_at,
)
from specnotes.pages.exercises.registry import _M, _P, register

OFF_BY_K_PLUS_1 = ("off by a factor of k + 1: did you use B + k? With every sequence speculating, the verify "
                   "pass has B(k + 1) tokens per weight read, so divide by k + 1")


for _problem in [
    # Chapter 4: batch size and the crossover batch
    _P("ch4.p1a", "04_batch_size", "B* from the regime-2 formula, Llama-3-70B + 1B draft, H100, k = 4, α = 0.8",
       partial(derived_crossover, LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8), "sequences",
       mistakes=(_M(partial(derived_crossover, LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8, 1), OFF_BY_K_PLUS_1),
                 _M(partial(derived_crossover, LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8, 4), "you divided by k: the "
                    "verify pass scores k + 1 tokens per sequence"),
                 _M(partial(derived_crossover, LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8), "that is the 8B target's B*: "
                    "c for the 70B target is the 1B draft's parameters over the 70B's, about 0.02"))),
    _P("ch4.p1b", "04_batch_size", "the exact B* on two H100s, tp = 2, L = 0 (cost.crossover_batch; the chapter's "
       "table)", partial(crossover, LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8, 2), "sequences", rel=0,
       mistakes=(_M(partial(crossover, LLAMA_3_8B, LLAMA_3_2_1B, H100, 4, 0.8), "that is the 8B target's B*: read "
                    "the 70B column"),
                 _M(partial(crossover, LLAMA_3_70B, LLAMA_3_2_1B, H100, 4, 0.8), "that is one H100 holding all of the "
                    "70B, which its 80 GB cannot: with tp = 2 every pass also pays two all-reduces per layer "
                    "(cost.crossover_batch(..., tp=2))"),
                 _M(partial(crossover, LLAMA_3_70B, LLAMA_3_2_1B, H200, 4, 0.8, 2), "that is the H200's row: the "
                    "question is about the H100 SXM"))),
    _P("ch4.p2a", "04_batch_size", "the best k at B = 64, H100, 8B target + 1B draft, α = 0.8",
       partial(best_k_at, LLAMA_3_8B, LLAMA_3_2_1B, H100, 64, 0.8), rel=0,
       mistakes=(_M(partial(best_k_at, LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 0.8), "that is the best k at B = 1 "
                    "(memory-bound, Leviathan's optimum): at B = 64 each extra drafted token costs verify compute, "
                    "so the best k is smaller"),)),
    _P("ch4.p2b", "04_batch_size", "the best k at B = 1, same setting",
       partial(best_k_at, LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 0.8), rel=0,
       mistakes=(_M(lambda: best_k_at(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, 0.8) + 1, "off by one: k counts drafted "
                    "tokens, not the k + 1 tokens an iteration can yield"),)),
    _P("ch4.p3", "04_batch_size", "S at B = 96, L = 0, Llama-3-70B + 1B draft on two H200s (tp = 2), α = 0.7, "
       "k = 3 (×)", partial(speedup_at, LLAMA_3_70B, LLAMA_3_2_1B, H200, 96, 3, 0.7, 2),
       mistakes=(_M(partial(memory_bound_speedup, LLAMA_3_70B, LLAMA_3_2_1B, 3, 0.7), "that is the memory-bound "
                    "limit E[N]/(1 + kc), true at small B: at B = 96 the verify pass has 96 · 4 = 384 tokens per "
                    "weight read, past the H200's ridge, so it costs compute"),
                 _M(partial(speedup_at, LLAMA_3_70B, LLAMA_3_2_1B, H200, 96, 3, 0.7), "that is one H200 holding all "
                    "of the 70B, which its 141 GB cannot (the bf16 weights alone fill it): with tp = 2 every pass "
                    "also pays two all-reduces per layer"),
                 _M(partial(speedup_at, LLAMA_3_70B, LLAMA_3_2_1B, H100, 96, 3, 0.7, 2), "that is on two H100s: the "
                    "H200's lower ridge (more bandwidth, same compute) leaves less headroom"))),
]:
    register(_problem)
