"""Chapter 5's problems (05_context_length): context length and the KV cache."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from specnotes.analytic import context, cost
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B
from specnotes.pages.exercises.answers import (
    H100,
    constant,
    first_paying_batch,
    logits_bound_pct,
    logits_pct,
    memory_limited_ratio,
    self_draft_speedup,
    speedup_at_memory_limit,
)
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 5: context length and the KV cache
    _P("ch5.p1a", "05_context_length", "context at which 32 sequences' caches weigh Llama-3-70B's weights (tokens)",
       partial(context.kv_context, LLAMA_3_70B, 32), "tokens",
       mistakes=(_M(partial(context.kv_context, replace(LLAMA_3_70B, n_kv_heads=64), 32), "that counts all 64 "
                    "query heads: the cache holds n_kv_heads = 8 KV heads per layer"),
                 _M(partial(context.kv_context, LLAMA_3_70B, 1), "that is one sequence: each of the 32 holds its "
                    "own cache, so divide by B"))),
    _P("ch5.p1b", "05_context_length", "attention intensity of its verify pass at k = 4, bf16 cache (FLOP/byte)",
       partial(context.attention_intensity, LLAMA_3_70B, 5), "FLOP/byte",
       mistakes=(_M(constant(5.0), "that is n = k + 1 alone: each KV head serves g = 8 query heads, so multiply by g"),
                 _M(constant(8.0), "that is a decode pass's g: a verify pass has k + 1 = 5 queries per sequence"))),
    _P("ch5.p2a", "05_context_length", "ρ for Llama-3-8B drafting itself with a 512-token window, k = 3, L = 32,768",
       partial(context.draft_kv_ratio, LLAMA_3_8B, LLAMA_3_8B, 3, 32768, 512),
       mistakes=(_M(partial(context.draft_kv_ratio, LLAMA_3_8B, LLAMA_3_8B, 3, 32768), "that is the draft with its "
                    "full cache: with a window it reads 512 cached tokens per step, not 32,768"),)),
    _P("ch5.p2b", "05_context_length", "the KV-bound limit of S for that draft, α = 0.8 (×)",
       partial(context.kv_bound_speedup, LLAMA_3_8B, LLAMA_3_8B, 3, 0.8, 32768, 512), "×",
       mistakes=(_M(partial(cost.expected_tokens, 0.8, 3), "that is E[N] alone: the draft's window still costs "
                    "S = E[N]/(1 + ρ)"),
                 _M(partial(context.kv_bound_speedup, LLAMA_3_8B, LLAMA_3_8B, 3, 0.8, 32768), "that is the draft "
                    "with its full cache (ρ = k): the window is 512 tokens"))),
    _P("ch5.p2c", "05_context_length", "the smallest batch at which it pays on an H100 (memory aside)",
       partial(first_paying_batch, LLAMA_3_8B, LLAMA_3_8B, H100, 3, 0.8, 32768, 512), rel=0,
       mistakes=(_M(constant(1), "at B = 1 the weights dominate and the draft reads all of them k times: "
                    "S(1) < 1, see cost.paying_batches"),)),
    _P("ch5.p2d", "05_context_length", "S at B = 1 for that draft (×)", partial(self_draft_speedup, 1), "×",
       mistakes=(_M(partial(self_draft_speedup, 1, None), "that is the draft with its full cache: with the 512-token "
                    "window each draft step reads 512 cached tokens, not 32,768"),
                 _M(partial(context.kv_bound_speedup, LLAMA_3_8B, LLAMA_3_8B, 3, 0.8, 32768, 512), "that is the "
                    "KV-bound limit, reached at large B: at B = 1 the weights dominate, and the draft reads all of "
                    "them k times"))),
    _P("ch5.p2e", "05_context_length", "S at B = 64 for that draft (×)", partial(self_draft_speedup, 64), "×",
       mistakes=(_M(partial(self_draft_speedup, 1), "that is S at B = 1: at B = 64 the caches outweigh the weights"),
                 _M(partial(self_draft_speedup, 64, None), "that is the draft with its full cache: the window is 512 "
                    "tokens"),
                 _M(partial(context.kv_bound_speedup, LLAMA_3_8B, LLAMA_3_8B, 3, 0.8, 32768, 512), "that is the "
                    "limit as B grows: at B = 64 the weights still count, read once by the verify pass and k times "
                    "by the draft"))),
    _P("ch5.p3a", "05_context_length", "sequences that fit on an L4 at L = 256, Llama-3-8B + 1B draft, k = 4",
       partial(cost.max_batch, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 256, k=4), rel=0,
       mistakes=(_M(partial(cost.max_batch, LLAMA_3_8B, None, "L4", 256), "that leaves out the draft: its weights "
                    "and its cache take memory too"),
                 _M(partial(cost.crossover_batch, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 256), "that is B* at "
                    "L = 256, a batch that does not fit: count the weights and both caches (cost.max_batch)"))),
    _P("ch5.p3b", "05_context_length", "tokens/s with speculation over without, for a server that fills the L4 (×)",
       partial(memory_limited_ratio, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 256), "×",
       mistakes=(_M(partial(speedup_at_memory_limit, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 256), "that is S at a "
                    "fixed batch: without the draft the server holds more sequences, so compare tokens per second "
                    "at each configuration's own largest batch"),)),
    _P("ch5.p3c", "05_context_length", "S at that batch (the most sequences that fit), L4, L = 256 (×)",
       partial(speedup_at_memory_limit, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 256), "×",
       mistakes=(_M(partial(cost.batch_speedup, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 1, 4, 0.8, 256), "that is S at B = 1 "
                    "(about Leviathan's memory-bound E[N]/(1 + kc)): at the batch that fills memory the verify pass "
                    "carries B(k + 1) tokens per weight read, past the L4's ridge"),
                 _M(partial(memory_limited_ratio, LLAMA_3_8B, LLAMA_3_2_1B, "L4", 4, 0.8, 256), "that is the "
                    "tokens-per-second factor against a plain server at its own, larger batch: S compares the two "
                    "at the same batch"),
                 _M(partial(cost.batch_speedup, LLAMA_3_8B, LLAMA_3_2_1B, "L4", cost.max_batch(
                     LLAMA_3_8B, None, "L4", 256), 4, 0.8, 256), "that is S at the batch that fits without the "
                    "draft: with its weights and cache fewer sequences fit (cost.max_batch with the draft)"))),
    _P("ch5.p4", "05_context_length", "share of a Llama-3.2-1B draft step spent on fp32 logits, B = 256, H100 (%)",
       partial(logits_pct, LLAMA_3_2_1B, H100, 256, 1), "%",
       mistakes=(_M(partial(logits_pct, LLAMA_3_8B, H100, 256, 5), "that is the target's verify pass: the question "
                    "is the 1B draft's step"),
                 _M(partial(logits_bound_pct, LLAMA_3_2_1B, H100), "that is the most the share can "
                    "reach, once the draft's matmuls are compute-bound: at B = 256 they are not yet"))),
    _P("ch5.p4b", "05_context_length", "the most that share can be, Llama-3.2-1B draft step on an H100 (%)",
       partial(logits_bound_pct, LLAMA_3_2_1B, H100), "%",
       mistakes=(_M(partial(logits_pct, LLAMA_3_2_1B, H100, 256, 1), "that is the share at B = 256: it grows with B "
                    "until the draft's matmuls are compute-bound, where it levels at 4·V·ridge/P"),
                 _M(partial(logits_bound_pct, LLAMA_3_8B, H100), "that is Llama-3-8B's bound: the 1B draft has the "
                    "same vocabulary and far fewer parameters, so its logits weigh more"),
                 _M(partial(logits_bound_pct, LLAMA_3_2_1B, H100, 1), "that is a fraction: the answer is in percent"))),
]:
    register(_problem)
