"""Chapter 7's problems (07_cheaper_drafters): the cheaper drafters, Llama-3-8B on an H100, context 1,024, k = 4
unless stated; with the answer functions only they use."""

from __future__ import annotations

from functools import partial

from specnotes.analytic import cost
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_8B
from specnotes.pages.exercises.answers import H100, free_verify_batch
from specnotes.pages.exercises.registry import _M, _P, register

CH7_CONTEXT = 1024


def ngram_last_paying(k: int, alpha: float) -> int:
    """The largest batch up to which a drafter that reads no weights (cost.NGRAM) pays, memory permitting."""
    ranges = cost.paying_batches(LLAMA_3_8B, cost.NGRAM, H100, k, alpha, context=CH7_CONTEXT)
    return ranges[0][1] if ranges and ranges[0][0] == 1 else 0


def early_exit_speedup(layers: int, alpha: float, k: int = 4) -> float:
    """Modelled S at B = 1 of self-speculation through the target's first ``layers`` layers and its head."""
    return cost.batch_speedup(LLAMA_3_8B, cost.EarlyExit(layers), H100, 1, k, alpha, context=CH7_CONTEXT)


def deepest_exit(alpha: float, draft_alpha: float = 0.8, k: int = 4, head: bool = True) -> int:
    """The deepest exit layer whose S at B = 1 still matches a Llama-3.2-1B draft at ``draft_alpha``.
    ``head=False``: the slip of pricing an exit at c = j/L with Leviathan's formula (no LM head)."""
    goal = cost.batch_speedup(LLAMA_3_8B, LLAMA_3_2_1B, H100, 1, k, draft_alpha, context=CH7_CONTEXT)
    if head:
        good = [j for j in range(1, LLAMA_3_8B.n_layers) if early_exit_speedup(j, alpha, k) >= goal]
    else:
        good = [j for j in range(1, LLAMA_3_8B.n_layers) if cost.speedup(alpha, k, j / LLAMA_3_8B.n_layers) >= goal]
    return max(good, default=0)


def sampler_gb(batch: int, k: int, reads: float, extra_rows: int = 0) -> float:
    """GB moved by a rejection step over fp32 logits of Llama-3's vocabulary: ``reads`` trips over the
    B(2k + 1) rows, plus ``extra_rows`` rows per sequence."""
    return (reads * batch * (2 * k + 1) + extra_rows * batch) * LLAMA_3_8B.vocab * 4 / 1e9


for _problem in [
    _P("ch7.p1a", "07_cheaper_drafters", "the largest batch at which an n-gram drafter pays, α = 0.5, k = 4",
       partial(ngram_last_paying, 4, 0.5), rel=0,
       mistakes=(_M(partial(free_verify_batch, H100, 4), "that is where the verify pass leaves the bandwidth roof: "
                    "past it speculation still pays until a verify pass costs E[N] decode steps"),)),
    _P("ch7.p1b", "07_cheaper_drafters", "the same with k = 8", partial(ngram_last_paying, 8, 0.5), rel=0,
       mistakes=(_M(partial(ngram_last_paying, 4, 0.5), "that is k = 4: with k = 8 the verify pass carries 9 tokens "
                    "per sequence and leaves the roof sooner"),)),
    _P("ch7.p2a", "07_cheaper_drafters", "S at B = 1 of a 16-layer early exit with α = 1 (×)",
       partial(early_exit_speedup, 16, 1.0),
       mistakes=(_M(partial(cost.speedup, 1.0, 4, 0.5), "that prices a draft pass at c = 16/32: every draft pass also "
                    "reads the LM head (0.5 G parameters), and the verify pass is not free"),)),
    _P("ch7.p2b", "07_cheaper_drafters", "the deepest exit layer that matches a 1B draft at α = 0.8, if the exit "
       "accepts α = 0.9", partial(deepest_exit, 0.9), rel=0,
       mistakes=(_M(partial(deepest_exit, 0.9, head=False), "that prices the exit at c = j/32, without the LM head "
                    "each draft pass reads"),)),
    _P("ch7.p3a", "07_cheaper_drafters", "B from which a chain of k = 3 makes the verify pass compute-bound (bf16)",
       partial(free_verify_batch, H100, 3),
       mistakes=(_M(partial(free_verify_batch, H100, 3, 3), "the verify pass reads k + 1 tokens per sequence: the "
                    "drafts and the bonus position"),)),
    _P("ch7.p3b", "07_cheaper_drafters", "the same for a 21-node token tree", partial(free_verify_batch, H100, 21),
       mistakes=(_M(partial(free_verify_batch, H100, 21, 21), "the tree's root (the pending token) is verified too: "
                    "T + 1 tokens per sequence"),)),
    _P("ch7.p4a", "07_cheaper_drafters", "GB moved by softmax-then-sample, B = 64, k = 4, V = 128,256, fp32",
       partial(sampler_gb, 64, 4, 3), "GB",
       mistakes=(_M(partial(sampler_gb, 64, 4, 2), "softmax reads the logits and writes p and q, and the sampler "
                    "reads them back: three trips"),)),
    _P("ch7.p4b", "07_cheaper_drafters", "GB read by sampling straight from the logits, worst case (all accepted)",
       partial(sampler_gb, 64, 4, 1), "GB",
       mistakes=(_M(partial(sampler_gb, 64, 4, 2), "a normalizer pass and a sampling pass would read every row "
                    "twice; sampling in the same cache-sized chunk reads it once"),
                 _M(partial(sampler_gb, 64, 4, 1, 2), "the residual's rows are formed in the chunk that normalized "
                    "them: no row is read again"))),
]:
    register(_problem)
