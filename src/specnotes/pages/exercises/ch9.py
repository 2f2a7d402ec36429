"""Chapter 9's problems (09_kv_reuse): speculation meets KV reuse."""

from __future__ import annotations

from functools import partial

from specnotes.analytic.cost import LLAMA_3_8B, LLAMA_3_70B
from specnotes.pages.exercises.answers import H100, constant, hit_tokens, not_reused, recompute_pct, recompute_steps
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 9: speculation meets KV reuse (a drafter one token behind, the drop rule)
    _P("ch9.p1a", "09_kv_reuse", "tokens a hit reuses: 1,000-token shared prompt, blocks of 16", partial(
       hit_tokens, 1000, 16), "tokens", rel=0,
       mistakes=(_M(partial(hit_tokens, 1000, 16, drop=False), "that keeps the last hit block: a drafter one "
                    "token ahead needs the drop rule, which gives that block back"),
                 _M(lambda: 1000 - 16, "only whole blocks of the servable prefix hit: the prompt minus its last "
                    "token and the drafter's lag, 998 tokens, is 62 blocks, and the drop rule gives one back"))),
    _P("ch9.p1b", "09_kv_reuse", "tokens the drop rule recomputes on that hit", partial(
       hit_tokens, 1000, 16, "recomputed"), "tokens", rel=0,
       mistakes=(_M(partial(not_reused, 1000, 16), "that counts every token not reused: the last prompt token "
                    "and the tail past the last whole block are computed with or without the rule; the rule "
                    "recomputes the one block it gives back"),)),
    _P("ch9.p1c", "09_kv_reuse", "tokens a hit reuses with 1,648-token blocks (#53670's unit), same prompt",
       partial(hit_tokens, 1000, 1648), "tokens", rel=0,
       mistakes=(_M(partial(hit_tokens, 1000, 1648, "servable"), "only whole blocks are hashed, published and "
                    "hit: 998 servable tokens do not fill one 1,648-token block"),)),
    _P("ch9.p1d", "09_kv_reuse", "tokens a hit reuses of a 5,000-token prompt with 1,648-token blocks",
       partial(hit_tokens, 5000, 1648), "tokens", rel=0,
       mistakes=(_M(partial(hit_tokens, 5000, 1648, drop=False), "that keeps the last hit block: the drop rule "
                    "gives one of the three whole blocks back"),)),
    _P("ch9.p1e", "09_kv_reuse", "tokens recomputed on every such hit", partial(hit_tokens, 5000, 1648, "recomputed"),
       "tokens", rel=0,
       mistakes=(_M(partial(not_reused, 5000, 1648), "that counts every token not reused: the last token and the "
                    "tail past the last whole block are computed anyway; the rule recomputes one block"),)),
    _P("ch9.p2a", "09_kv_reuse", "one 1,648-token recompute of Llama-3-70B after 4,096 cached tokens, H100, in "
       "batch-1 decode steps", partial(recompute_steps, LLAMA_3_70B, H100, 1648), "decode steps",
       mistakes=(_M(lambda: 1648.0, "that charges each token a decode step: a prefill runs all 1,648 tokens in one "
                    "pass, compute-bound, and a batch-1 decode step is memory-bound"),
                 _M(partial(recompute_steps, LLAMA_3_70B, H100, 1648, 0), "that is at an empty context: both the "
                    "recompute and the decode step read 4,096 cached tokens"),
                 _M(partial(recompute_steps, LLAMA_3_8B, H100, 1648), "that is Llama-3-8B: the question is about "
                    "the 70B model"))),
    _P("ch9.p2b", "09_kv_reuse", "by what fraction the recompute lengthens 200 decode steps (%)",
       partial(recompute_pct, 200), "%",
       mistakes=(_M(partial(recompute_pct, 200, scale=1), "that is a fraction: the answer is in percent"),
                 _M(partial(recompute_pct, 200, True), "that divides by the total with the recompute included: "
                    "the question compares the recompute with the 200 decode steps"))),
    _P("ch9.p3", "09_kv_reuse", "why is the eager policy right without speculation and wrong with it?", constant("a"),
       choices={
           "a": "a plain pass writes only the pending token's slot, which is committed, so every written slot is "
                "verified; a verify pass also writes k drafts and rolls rejected ones back, so a block can be "
                "fully written with a rejected draft's keys in its last slot",
           "b": "speculation computes different keys for accepted tokens than plain decoding does",
           "c": "without speculation no block is ever full when the eager test runs, so it never publishes",
           "d": "with speculation the hashes are taken over drafted token ids"},
       mistakes=(_M(constant("b"), "a verify pass computes the same keys for committed tokens (causal attention: "
                    "the chapter runs float64 to show it); only the slots of rejected drafts hold wrong keys"),
                 _M(constant("c"), "the eager test publishes full blocks in plain decoding too; it is right there "
                    "because written = verified after every plain pass"),
                 _M(constant("d"), "hashes are taken over token ids that are known, all committed (the pending "
                    "one included): the wrong part is the keys in the slot, not the hash"))),
    _P("ch9.p4", "09_kv_reuse", "when is disabling the drop rule (vLLM PR #53388) safe for outputs?", constant("a"),
       choices={
           "a": "when the kept block holds only drafter state; not when it also holds target state a lookup "
                "cannot vouch for, like a hybrid model's recurrent state written over draft positions",
           "b": "never: a drafter state from another continuation changes the output tokens",
           "c": "always: the target verifies every token, whatever the cache holds",
           "d": "only at temperature 0"},
       mistakes=(_M(constant("b"), "the target verifies every draft: a wrong drafter state changes q, which moves "
                    "acceptance, not the output (the chapter's keep rule left every output identical)"),
                 _M(constant("c"), "verification protects against a wrong drafter, not a wrong target: a kept block "
                    "with target state a hit cannot vouch for (#43559's recurrent state) changes p itself"),
                 _M(constant("d"), "speculative sampling emits tokens distributed as p for any q at every "
                    "temperature: sampled outputs are safe too"))),
]:
    register(_problem)
