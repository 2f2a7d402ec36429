"""Self-checking problems: ``exercises.check("ch4.p1a", your_answer)`` says "right", or what went wrong.

Every problem's reference answer is computed by the book's own functions (``answer`` below calls the
problem's answer function; the chapter's folded answer glues the same value), never typed in. A check
compares your value with it within the problem's tolerance (relative, or exact for integers); if it is
off, against the typical wrong answers listed for that problem (each computed from the model too, each
with a hint); then against generic slips (units, a factor of 2, the reciprocal, off by one).

    from specnotes import exercises
    exercises.check("ch1.p1a", 29.0)      # right: ...
    exercises.check("ch4.p1a", 971)       # off by a factor of k + 1: did you use B + k? ...
    exercises.problems()                  # every problem: id, chapter, one-line summary
    exercises.answer("ch2.p1a")           # the reference value (what the chapter glues)

Ids are ``ch<chapter>.p<problem>`` with a letter per part (``ch1.p1a``, ``ch1.p1b``); a problem whose
answer is a statement, not a number, is multiple choice (``check("ch2.p3", "b")``).

Adding a problem
----------------
One entry in ``PROBLEMS`` (or ``register(Problem(...))`` from anywhere), with an answer function that
the chapter's hidden answer cell calls too, so the glued answer and the checker cannot disagree::

    Problem("ch5.p1", "05_context_length", "KV bytes read per sequence, Llama-3-8B at L = 8192 (GB)",
            answer=partial(kv_read_gb, LLAMA_3_8B, 8192), unit="GB",
            mistakes=(Mistake(partial(kv_read_gb, LLAMA_3_8B, 8192, heads=32), "that counts all 32 query "
                              "heads: the cache holds n_kv_heads = 8"),))

then, in the notebook, ``glue("p1_kv", exercises.answer("ch5.p1"))`` in the hidden answer cell and a
check cell after the problem (a markdown line and ``# exercises.check("ch5.p1", your_answer)``, as in
every chapter). ``tests/test_exercises.py`` runs every entry against its reference answer and against
each listed mistake (the hint must come back), so an entry with no mistake fails the test.
``rel`` is the relative tolerance (default 2%: readers round datasheet constants); ``rel=0`` means
exact (integers: a best k, a batch from a table).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from specnotes import context, cost, hardware, published, validate
from specnotes.cost import LLAMA_3_2_1B, LLAMA_3_8B, LLAMA_3_70B

# Spec-Bench (Xia et al. 2024, github.com/hemingkx/Spec-Bench), Vicuna-7B with a separate draft model
# (SpS), A100, greedy: mean accepted tokens per iteration, from the published record Chapter 3's table
# of published pairs shows.
SPEC_BENCH_SPS_MEAN_ACCEPTED = published.load("spec_bench")["a100_vicuna7b_sps"].values["mean_accepted_tokens"]


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer, computed (``value()``), and what to say when a reader gives it."""

    value: Callable[[], float | str]
    hint: str


@dataclass(frozen=True)
class Problem:
    id: str
    chapter: str  # the notebook's name, e.g. "04_batch_size"
    summary: str  # the question in one line, with its unit
    answer: Callable[[], float | str]
    unit: str = ""
    rel: float = 0.02  # relative tolerance; 0: exact
    mistakes: tuple[Mistake, ...] = ()
    choices: dict[str, str] = field(default_factory=dict)  # multiple choice: letter → statement


@dataclass(frozen=True)
class Verdict:
    """What ``check`` returns: ``right`` and the message (shown as the value's repr in a notebook)."""

    right: bool
    message: str

    def __bool__(self) -> bool:
        return self.right

    def __str__(self) -> str:
        return self.message

    __repr__ = __str__


# ---------------------------------------------------------------------------------------------- answers
# Each computes one quantity with the book's functions; problems bind their arguments with partial.


def decode_step_ms(shape: cost.ModelShape, accel: str, dtype: str | None = None, batch: int = 1) -> float:
    """Roofline time of one decode step, ms (Chapter 1)."""
    return 1e3 * cost.roofline_time(cost.decode_cost(shape, batch), accel, dtype)


def decode_tokens_per_s(shape: cost.ModelShape, accel: str, dtype: str | None = None) -> float:
    """Tokens per second for one sequence: one token per decode step."""
    return 1e3 / decode_step_ms(shape, accel, dtype)


def which_fits(shape: cost.ModelShape, accel: str, dtypes=("bf16", "fp8"), context: int = 1024) -> str:
    """Which of ``dtypes`` (weights, KV and math) leave room beside the weights for one sequence of ``context``
    tokens (``cost.max_batch`` > 0): "neither", the one dtype that does, or "both" (Chapter 1, Problem 1)."""
    fits = [d for d in dtypes if cost.max_batch(shape.in_dtype(d), None, accel, context) > 0]
    return "both" if len(fits) == len(dtypes) else fits[0] if fits else "neither"


def weights_gb(shape: cost.ModelShape, dtype: str = "bf16") -> float:
    """Bytes of the weights in memory (embedding table included), GB."""
    return shape.in_dtype(dtype).memory_bytes / 1e9


def compute_time_ms(shape: cost.ModelShape, accel: str, dtype: str, batch: int = 1) -> float:
    """The FLOP side of the roofline alone, 2PB / peak, ms (a wrong answer at small B)."""
    return 1e3 * 2 * shape.params * batch / hardware.accelerator(accel).peak(dtype)


def weight_read_ms(params: float, weight_bytes: float, accel: str) -> float:
    """w·P / BW, ms."""
    return 1e3 * weight_bytes * params / hardware.accelerator(accel).mem_bandwidth


def critical_batch(accel: str, dtype: str) -> float:
    return hardware.accelerator(accel).critical_batch(dtype)


def ridge(accel: str, dtype: str = "bf16") -> float:
    return hardware.accelerator(accel).ridge(dtype)


def peak_over_bandwidth(accel: str, dtype: str, times: float = 1.0) -> float:
    """times · peak / BW: the ridge, or a multiple of it (wrong answers that drop or double w/2)."""
    return times * hardware.accelerator(accel).ridge(dtype)


def overhead_bound_params_b(overhead_s: float, accel: str, weight_bytes: float = 2) -> float:
    """P at which w·P / BW equals the overhead t0: P = t0 · BW / w, in billions (Chapter 1, Problem 4)."""
    return overhead_s * hardware.accelerator(accel).mem_bandwidth / weight_bytes / 1e9


def free_verify_batch(accel: str, k: int, tokens_per_sequence: int | None = None) -> float:
    """The largest B with B·(k + 1) tokens per weight read under the ridge: ridge / (k + 1) (Chapter 2).
    ``tokens_per_sequence`` replaces k + 1 (wrong answers use k)."""
    return ridge(accel) / (k + 1 if tokens_per_sequence is None else tokens_per_sequence)


def largest_free_batch(accel: str, k: int, rounding: Callable[[float], int] = math.floor) -> int:
    """The largest whole batch whose B·(k + 1) tokens per weight read stay within the ridge (Chapter 2):
    floor(ridge / (k + 1)). ``rounding`` = math.ceil gives the batch one past it (a wrong answer)."""
    return rounding(free_verify_batch(accel, k))


def b_plus_k_batch(accel: str, k: int) -> float:
    """The source note's "B + k" rule: ridge − k (wrong when every sequence speculates)."""
    return ridge(accel) - k


def draft_ms(draft: cost.ModelShape, accel: str, batch: int, k: int) -> float:
    """k autoregressive draft passes, ms."""
    return 1e3 * cost.draft_time(draft, accel, batch, k)


def one_pass_ms(shape: cost.ModelShape, accel: str, batch: int, new_tokens: int) -> float:
    """One pass over ``new_tokens`` tokens per sequence, ms: a single-pass drafter, or one draft step."""
    return 1e3 * cost.roofline_time(cost.forward_cost(shape, batch, new_tokens), accel)


def geometric_alpha(mean_tokens: float) -> float:
    """α from E[N] = 1/(1 − α), the k → ∞ limit (a wrong answer at finite k)."""
    return 1 - 1 / mean_tokens


def drafted_fraction(mean_tokens: float, k: int) -> float:
    """(E[N] − 1)/k: the fraction of drafted tokens accepted (a different quantity from α)."""
    return (mean_tokens - 1) / k


def largest_paying_c(alpha: float, k: int = 1) -> float:
    """The c at which ``cost.speedup(alpha, k, c)`` falls to 1, by bisection (k = 1: Corollary 3.9, c = α)."""
    lo, hi = 0.0, 1.0
    while cost.speedup(alpha, k, hi) > 1:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cost.speedup(alpha, k, mid) > 1 else (lo, mid)
    return (lo + hi) / 2


def one_minus(x: float) -> float:
    return 1 - x


def optimal_k(alpha: float, c: float) -> int:
    return cost.optimal_k(alpha, c)


def param_ratio(draft: cost.ModelShape, target: cost.ModelShape) -> float:
    """c in the memory-bound limit: the draft's parameters over the target's."""
    return draft.params / target.params


def derived_crossover(target: cost.ModelShape, draft: cost.ModelShape, accel: str, k: int, alpha: float,
                      divisor: int | None = None) -> float:
    """B* ≈ ridge · (E[N] − k·c) / (k + 1), c the parameter ratio (Chapter 4's regime-2 formula).
    ``divisor`` replaces k + 1 (wrong answers)."""
    c = param_ratio(draft, target)
    return ridge(accel) * (cost.expected_tokens(alpha, k) - k * c) / (k + 1 if divisor is None else divisor)


def crossover(target: cost.ModelShape, draft: cost.ModelShape, accel: str, k: int, alpha: float,
              tp: int = 1) -> int | None:
    return cost.crossover_batch(target, draft, accel, k, alpha, tp=tp)


def best_k_at(target: cost.ModelShape, draft: cost.ModelShape, accel: str, batch: int, alpha: float,
              k_max: int = 10) -> int:
    """The k in 1..k_max with the largest ``cost.batch_speedup`` at this batch (Chapter 4, Problem 2)."""
    return max(range(1, k_max + 1), key=lambda k: cost.batch_speedup(target, draft, accel, batch, k, alpha))


def speedup_at(target: cost.ModelShape, draft: cost.ModelShape, accel: str, batch: int, k: int,
               alpha: float, tp: int = 1) -> float:
    return cost.batch_speedup(target, draft, accel, batch, k, alpha, tp=tp)


def memory_bound_speedup(target: cost.ModelShape, draft: cost.ModelShape, k: int, alpha: float) -> float:
    """Leviathan's E[N] / (1 + k·c) with c the parameter ratio: S at small B (a wrong answer at large B)."""
    return cost.speedup(alpha, k, param_ratio(draft, target))


def fixed_cost_speedup(source: str, series: str, accel: str, k: int, own_draft_cost: bool = True) -> float:
    """S when the calibration's fixed costs dominate every pass (Chapter 6, Problem 1): a target pass costs
    t0 + L·t_layer, a draft pass t0_draft + L_draft·t_layer, so S → E[N]·T_t / (T_t + k·T_d).
    ``own_draft_cost=False`` charges each draft pass the target's fixed cost instead."""
    from specnotes import calibrate

    case = calibrate.cases(source, series)[0]
    knobs = cost.calibration(accel, source)
    draft = case.draft.layer if isinstance(case.draft, cost.EagleHead) else case.draft
    target_fixed = knobs["overhead"] + case.target.n_layers * knobs["layer_overhead"]
    draft_fixed = knobs["draft_overhead"] + draft.n_layers * knobs["layer_overhead"]
    return case.expected() * target_fixed / (target_fixed + k * (draft_fixed if own_draft_cost else target_fixed))


def published_tokens(source: str, series: str) -> float:
    from specnotes import published

    return published.load(source)[series].setup["tokens_per_iteration"]


def calibrated_speedup_at(source: str, series: str, accel: str, batch: int, calibrated: bool = True) -> float:
    """S at ``batch`` for the data set's first case, with the stored calibration (or idealized)."""
    from specnotes import calibrate

    case = calibrate.cases(source, series)[0]
    return calibrate.curve(case, [batch], **(cost.calibration(accel, source) if calibrated else {}))[0]


def magicdec_window_speedup(window: int, context: int = 32000, batch: int = 64) -> float:
    """The idealized S of MagicDec's case at (context, batch) with a draft KV window (Chapter 6, Problem 2)."""
    from specnotes import calibrate

    cases = calibrate.cases("magicdec", "fig6c_llama31_selfspec_a100", alpha=calibrate.magicdec_alpha)
    case = next(c for c in cases if (c.context, c.batch) == (context, batch))
    return calibrate.vary([case], draft_context=window)[0].speedup()


# Chapter 6, Problem 3: a hypothetical engine's measurements, given in the problem
YOUR_ENGINE = {"tokens": 2.4, "k": 3, "context": 1000, "batches": (1, 16, 64, 128),
               "speedups": (1.90, 1.80, 1.52, 1.20)}


def your_engine_fit():
    """``calibrate.fit`` of Chapter 6, Problem 3's measurements (Llama-3.1-8B + EAGLE-3 on an H100)."""
    from specnotes import calibrate

    e = YOUR_ENGINE
    head = calibrate.cases("specdecode_bench", "fig1c_eagle3")[0]
    alpha = cost.implied_alpha(e["tokens"], e["k"])
    return calibrate.fit([calibrate.Case(f"batch={b}", head.target, head.draft, "H100-SXM", b, e["k"], alpha,
                                         e["context"], None, 1, s)
                          for b, s in zip(e["batches"], e["speedups"], strict=True)])


def your_engine_knob(name: str, overlap: str | None = None, scale: float = 1e3) -> float:
    """A knob of the best fit (or of the best fit with one ``overlap`` mode), ms by default."""
    fit = your_engine_fit()
    knobs = fit.knobs if overlap is None else fit.by_overlap[overlap]["knobs"]
    return scale * knobs[name]


def your_engine_overlap() -> str:
    return your_engine_fit().knobs["overlap"]


def your_engine_worst_error() -> float:
    return max(abs(r) for r in your_engine_fit().residuals)


def your_engine_rms_log() -> float:
    return your_engine_fit().rms_log


def first_paying_batch(target: cost.ModelShape, draft, accel: str, k: int, alpha: float, ctx: int,
                       window: int, limit: int = 1024) -> int:
    return cost.paying_batches(target, draft, accel, k, alpha, ctx, limit=limit, draft_context=min(ctx, window))[0][0]


def memory_limited_ratio(target: cost.ModelShape, draft, accel: str, k: int, alpha: float, ctx: int) -> float:
    return context.throughput_at_memory_limit(target, draft, accel, k, alpha, ctx)["ratio"]


def speedup_at_memory_limit(target: cost.ModelShape, draft, accel: str, k: int, alpha: float, ctx: int) -> float:
    fits = cost.max_batch(target, draft, accel, ctx, k=k)
    return cost.batch_speedup(target, draft, accel, fits, k, alpha, ctx)


def logits_pct(shape: cost.ModelShape, accel: str, batch: int, new_tokens: int) -> float:
    return 100 * context.logits_share(shape, accel, batch, new_tokens)


def logits_bound_pct(shape: cost.ModelShape, accel: str, scale: float = 100) -> float:
    """The most the logits' share of a pass can reach, 4·V·ridge/P (``context.logits_share_bound``), in %."""
    return scale * context.logits_share_bound(shape, accel)


def self_draft_speedup(batch: int, window: int | None = 512, ctx: int = 32768, k: int = 3, alpha: float = 0.8,
                       accel: str = "H100-SXM") -> float:
    """S of Llama-3-8B drafting for itself with a ``window``-token draft cache (None: its full cache) at
    context ``ctx`` (Chapter 5, Problem 2)."""
    return cost.batch_speedup(LLAMA_3_8B, LLAMA_3_8B, accel, batch, k, alpha, ctx, draft_context=window)


def constant(value):
    """A multiple-choice letter (the answer of a question about a statement, not a number)."""
    return lambda: value


def little_batch(rate: float, output_tokens: float, tpot_s: float) -> float:
    """Little's law for a decode pool: B = λ · N_out · TPOT (Chapter 8, Problem 1)."""
    return rate * output_tokens * tpot_s


# Chapter 8, Problems 2 and 3: the vLLM blog's pool as the chapter fits it (``serving.fit_blog_pool``), with
# at most 256 requests running and the adaptive table's k up to 6
BLOG_MAX_BATCH, BLOG_K_MAX = 256, 6


def blog_policy(name: str):
    """"plain", "fixed" (k = 4) or "adaptive" (``serving.adaptive_k`` of the fitted pool)."""
    from specnotes import serving

    pool = serving.fit_blog_pool()
    if name == "adaptive":
        return serving.adaptive_k(pool.step, pool.alpha, BLOG_MAX_BATCH, BLOG_K_MAX)
    return serving.FixedK(0 if name == "plain" else serving.BLOG_K)


def blog_step(expansion: bool = True):
    """The fitted pool's step time, with V0's batch-expansion cost or (a wrong answer) without it."""
    from specnotes import serving

    pool = serving.fit_blog_pool()
    return pool.step if expansion else pool.roofline_step


def blog_capacity(policy: str, expansion: bool = True) -> float:
    """``poolsim.max_rate`` of the fitted pool (requests/s)."""
    from specnotes import poolsim, serving

    pool = serving.fit_blog_pool()
    return poolsim.max_rate(blog_step(expansion), blog_policy(policy), pool.alpha, pool.requests_tokens,
                            BLOG_MAX_BATCH)


def blog_rate(batch: int, k: int, tpot_batch: int | None = None, tokens_per_step: bool = True,
              per_request: bool = True) -> float:
    """λ that holds ``batch`` requests running: B · E[N] / (N_out · T_step(B, k)), equation (1) solved for λ.
    The wrong answers: T_step at ``tpot_batch`` instead of B; E[N] left out; N_out left out."""
    from specnotes import serving

    pool = serving.fit_blog_pool()
    tokens = cost.expected_tokens(pool.alpha, k) if tokens_per_step else 1.0
    return batch * tokens / ((pool.requests_tokens if per_request else 1) * pool.step(tpot_batch or batch, k))


def blog_flag(expansion: bool = True) -> int | None:
    """The V0 flag at its best for k = 4: the batch from which k = 4 stops paying (``serving.crossover``)."""
    from specnotes import serving

    pool = serving.fit_blog_pool()
    return serving.crossover(blog_step(expansion), pool.alpha, serving.BLOG_K, BLOG_MAX_BATCH)


def blog_adaptive_off() -> int:
    """The first batch at which the adaptive table stops speculating altogether."""
    table = blog_policy("adaptive")
    return next(b for b in range(1, BLOG_MAX_BATCH + 1) if table(b) == 0)


def blog_flag_rate(per_request: bool = True) -> float:
    """The request rate that holds the pool at the flag's batch, where the rule decodes plainly."""
    return blog_rate(blog_flag(), 0, per_request=per_request)


def hit_tokens(prompt_tokens: int, block_size: int, part: str = "reused", drop: bool = True) -> int:
    """Tokens a full-prefix hit reuses or recomputes for a drafter one token behind (``kvcache.prefix_hit``)."""
    from specnotes import kvcache

    return getattr(kvcache.prefix_hit(prompt_tokens, block_size, lag=1, drop=drop), part)


def not_reused(prompt_tokens: int, block_size: int) -> int:
    """Every prompt token a hit does not serve (a wrong answer for the drop rule's recompute)."""
    return prompt_tokens - hit_tokens(prompt_tokens, block_size)


def recompute_steps(shape: cost.ModelShape, accel: str, tokens: int, context: int = 4096) -> float:
    """One sequence's prefill of ``tokens`` after ``context`` cached ones, in decode steps at batch 1 at that
    context (roofline, Chapter 9)."""
    return (cost.roofline_time(cost.forward_cost(shape, 1, tokens, context), accel)
            / cost.roofline_time(cost.decode_cost(shape, 1, context), accel))


def recompute_pct(decode_steps: int, fraction_of_total: bool = False, scale: float = 100) -> float:
    """Chapter 9, Problem 2: the 1,648-token recompute over ``decode_steps`` decode steps of Llama-3-70B, %.
    The wrong answers: over the total (recompute included), or a fraction (``scale=1``)."""
    steps = recompute_steps(LLAMA_3_70B, H100, 1648)
    return scale * steps / (decode_steps + steps if fraction_of_total else decode_steps)


# ---------------------------------------------------------------------------------------------- problems

_P = Problem
_M = Mistake
H100, H200 = "H100-SXM", "H200"
OFF_BY_K_PLUS_1 = ("off by a factor of k + 1: did you use B + k? With every sequence speculating, the verify "
                   "pass has B(k + 1) tokens per weight read, so divide by k + 1")

PROBLEMS: dict[str, Problem] = {}


def register(problem: Problem) -> Problem:
    """Add a problem to the registry (ids are unique; every problem lists at least one mistake)."""
    if problem.id in PROBLEMS:
        raise validate.BadArgument(f"problem id {problem.id!r} is already registered")
    PROBLEMS[problem.id] = problem
    return problem


for _problem in [
    # Chapter 1: the roofline of a decode step
    _P("ch1.p1a", "01_roofline_decode", "Llama-3-70B decode step at B = 1 on one H200, bf16 (ms; a bound: "
       "the bf16 weights alone fill its 141 GB)",
       partial(decode_step_ms, LLAMA_3_70B, H200, "bf16"), "ms",
       mistakes=(_M(partial(weight_read_ms, LLAMA_3_70B.params, 1, H200),
                    "off by a factor of 2: a bf16 weight is 2 bytes, so the step reads 2P bytes"),
                 _M(partial(compute_time_ms, LLAMA_3_70B, H200, "bf16"),
                    "that is the compute time 2P/peak: at B = 1 the step is memory-bound, so use bytes/bandwidth"))),
    _P("ch1.p1b", "01_roofline_decode", "the same step with fp8 weights (ms)",
       partial(decode_step_ms, LLAMA_3_70B.in_dtype("fp8"), H200, "fp8"), "ms",
       mistakes=(_M(partial(decode_step_ms, LLAMA_3_70B, H200, "bf16"),
                    "that is the bf16 step: fp8 weights are 1 byte each, so the step reads half the bytes"),
                 _M(partial(compute_time_ms, LLAMA_3_70B, H200, "fp8"),
                    "that is the compute time 2P/peak at the fp8 peak: the step is still memory-bound"))),
    _P("ch1.p1c", "01_roofline_decode", "tokens per second for that one user, bf16 (tokens/s)",
       partial(decode_tokens_per_s, LLAMA_3_70B, H200, "bf16"), "tokens/s",
       mistakes=(_M(partial(decode_tokens_per_s, LLAMA_3_70B.in_dtype("fp8"), H200, "fp8"),
                    "that is the fp8 rate: the question asks for bf16"),)),
    _P("ch1.p1d", "01_roofline_decode", "which fits on the H200 with room for a 1,024-token sequence: \"neither\", "
       "\"bf16\", \"fp8\" or \"both\"", partial(which_fits, LLAMA_3_70B, H200),
       choices={"neither": "neither leaves room for a KV cache", "bf16": "only the bf16 weights",
                "fp8": "only the fp8 weights", "both": "both"},
       mistakes=(_M(constant("both"), f"the bf16 weights, embedding table included, take {weights_gb(LLAMA_3_70B):.1f} "
                    f"GB of the H200's {hardware.accelerator(H200).memory / 1e9:.0f} GB: no room is left for a KV "
                    "cache (cost.max_batch gives 0)"),
                 _M(constant("neither"), f"fp8 halves the weights to {weights_gb(LLAMA_3_70B, 'fp8'):.1f} GB: "
                    f"{cost.max_batch(LLAMA_3_70B.in_dtype('fp8'), None, H200, 1024)} sequences of 1,024 tokens fit "
                    "beside them"),
                 _M(constant("bf16"), "bf16 weights take twice fp8's bytes: where bf16 leaves room, fp8 does too"))),
    _P("ch1.p2", "01_roofline_decode", "critical batch of an H100 SXM with fp8 weights and fp8 math (tokens)",
       partial(critical_batch, H100, "fp8"), "tokens",
       mistakes=(_M(partial(peak_over_bandwidth, H100, "fp8"),
                    "that is the fp8 ridge, peak/BW: the critical batch is ridge · w/2, with w = 1 byte in fp8"),
                 _M(partial(peak_over_bandwidth, H100, "bf16", 0.5),
                    "that uses the bf16 peak with 1-byte weights: fp8 math runs at the fp8 peak, twice bf16's"))),
    _P("ch1.p3a", "01_roofline_decode", "Llama-3.2-1B decode step at B = 1 on a T4, fp16 (ms)",
       partial(decode_step_ms, LLAMA_3_2_1B, "T4", "fp16"), "ms",
       mistakes=(_M(partial(weight_read_ms, LLAMA_3_2_1B.n_layers * LLAMA_3_2_1B.layer_params, 2, "T4"),
                    "you left out the LM head: P counts every projection plus the d_model × vocab head, which a "
                    "step reads even when it shares its weights with the embedding"),
                 _M(partial(compute_time_ms, LLAMA_3_2_1B, "T4", "fp16"),
                    "that is the compute time 2P/peak: at B = 1 the step is memory-bound"))),
    _P("ch1.p3b", "01_roofline_decode", "batch at which that step stops being memory-bound, T4 fp16 (tokens)",
       partial(critical_batch, "T4", "fp16"), "tokens",
       mistakes=(_M(partial(critical_batch, "T4", "fp32"),
                    "that uses the fp32 peak: the T4 runs fp16 on its tensor cores (65 TFLOP/s)"),
                 _M(partial(peak_over_bandwidth, "T4", "fp16", 2),
                    "off by a factor of 2: a decode GEMM does 2B/w FLOPs per byte, which is B for 2-byte weights"))),
    _P("ch1.p4", "01_roofline_decode", "parameter count below which a 1 ms overhead exceeds an H100 bf16 weight read "
       "(billions)", partial(overhead_bound_params_b, 1e-3, H100), "billion parameters",
       mistakes=(_M(partial(overhead_bound_params_b, 1e-3, H100, 1),
                    "off by a factor of 2: P = t0 · BW / w, and a bf16 weight is w = 2 bytes"),)),
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
    # Chapter 6: the model against the published record
    _P("ch6.p1a", "06_published_record", "S if the H100 calibration's fixed costs dominated every pass (k = 3)",
       partial(fixed_cost_speedup, "specdecode_bench", "fig1c_eagle3", H100, 3),
       mistakes=(_M(partial(fixed_cost_speedup, "specdecode_bench", "fig1c_eagle3", H100, 3, False),
                    "that charges each draft pass the target's fixed cost, E[N]/(k + 1): a draft pass of a one-layer "
                    "head pays one layer's cost and the draft-pass overhead, not 32 layers'"),
                 _M(partial(published_tokens, "specdecode_bench", "fig1c_eagle3"), "that is E[N] alone: an "
                    "iteration also pays k draft overheads"))),
    _P("ch6.p1b", "06_published_record", "the calibrated S(1) for the same setup",
       partial(calibrated_speedup_at, "specdecode_bench", "fig1c_eagle3", H100, 1),
       mistakes=(_M(partial(calibrated_speedup_at, "specdecode_bench", "fig1c_eagle3", H100, 1, False),
                    "that is the idealized S(1), with no overheads: apply cost.calibration(\"H100-SXM\", "
                    "\"specdecode_bench\")"),)),
    _P("ch6.p2a", "06_published_record", "MagicDec, L = 32k, B = 64, k = 3: idealized S with a 512-token draft window",
       partial(magicdec_window_speedup, 512),
       mistakes=(_M(partial(magicdec_window_speedup, 32000), "that is the draft reading the whole 32k cache: "
                    "the window is 512 tokens"),)),
    _P("ch6.p2b", "06_published_record", "the same with a 4,096-token window", partial(magicdec_window_speedup, 4096),
       mistakes=(_M(partial(magicdec_window_speedup, 512), "that is the 512-token window"),)),
    _P("ch6.p2c", "06_published_record", "the same with a 32,000-token window (the whole context)",
       partial(magicdec_window_speedup, 32000),
       mistakes=(_M(partial(magicdec_window_speedup, 512), "that is the 512-token window: with the whole context "
                    "the self-speculating draft reads the full KV cache every step"),)),
    _P("ch6.p3a", "06_published_record", "your engine's fit: which overlap mode wins?", your_engine_overlap,
       choices={"kernel": "per-kernel roofline", "pass": "one max over the pass", "none": "memory + compute"},
       mistakes=(_M(constant("kernel"), "compare the modes' fits (fit.by_overlap): per-kernel maxes leave a larger "
                    "rms error of log S here"),
                 _M(constant("pass"), "compare the modes' fits (fit.by_overlap): one max over the pass fits worst, "
                    "and its overhead runs into the 20 ms bound"))),
    _P("ch6.p3b", "06_published_record", "your engine's fitted draft overhead t0_draft (ms)",
       partial(your_engine_knob, "draft_overhead"), "ms",
       mistakes=(_M(partial(your_engine_knob, "draft_overhead", "kernel"), "that is the per-kernel fit's value: "
                    "the best fit uses another overlap mode"),)),
    _P("ch6.p3c", "06_published_record", "your engine's fit: the largest relative error (a fraction, 0.05 = 5%)",
       your_engine_worst_error,
       mistakes=(_M(your_engine_rms_log, "that is the rms error of log S over the four points: the question asks "
                    "for the largest error at one point (fit.residuals)"),)),
    _P("ch6.p3d", "06_published_record", "your engine's fitted target overhead t0 (ms)",
       partial(your_engine_knob, "overhead"), "ms",
       mistakes=(_M(partial(your_engine_knob, "overhead", "pass"), "that is the one-max-per-pass fit's value, at its "
                    "20 ms bound: the best fit uses another overlap mode"),
                 _M(partial(your_engine_knob, "draft_overhead"), "that is t0_draft, the draft pass's overhead: t0 is "
                    "the target pass's (fit.knobs[\"overhead\"])"))),
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



# Chapter 7: the cheaper drafters (Llama-3-8B on an H100, context 1,024, k = 4 unless stated)
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

# Chapter 10: sparse targets (Qwen3-30B-A3B: 128 experts, 8 per token; DeepSeek-V3's MLA)


def verify_experts(shape: cost.MoEShape, batch: int, k: int, bonus: bool = True) -> float:
    """Expected distinct experts per layer a verify pass touches: T = B(k + 1) tokens (B·k without the bonus)."""
    return cost.expected_experts(shape.n_experts, shape.experts_per_token, batch * (k + bonus))


def no_collisions(shape: cost.MoEShape, batch: int, k: int) -> float:
    """The slip of counting m experts per token with no two tokens sharing one: min(N, m·T)."""
    return min(shape.n_experts, shape.experts_per_token * batch * (k + 1))


def with_replacement(shape: cost.MoEShape, batch: int, k: int) -> float:
    """The slip of treating a token's m picks as m independent picks of one expert each."""
    n = shape.n_experts
    return n * (1 - (1 - 1 / n) ** (shape.experts_per_token * batch * (k + 1)))


def expert_bytes_ratio(shape: cost.MoEShape, batch: int, k: int) -> float:
    """Routed-expert bytes of a verify pass over those of a decode pass at the same batch: E[D](B(k+1))/E[D](B)."""
    return verify_experts(shape, batch, k) / cost.expected_experts(shape.n_experts, shape.experts_per_token, batch)


def saturating_batch(shape: cost.MoEShape, share: float = 0.95, per_token: bool = True) -> int:
    """The smallest batch whose decode pass touches ``share`` of the experts on average: E[D](B) ≥ share·N.
    ``per_token=False``: the slip of B·m ≥ share·N (no collisions)."""
    n, m = shape.n_experts, shape.experts_per_token
    if not per_token:
        return math.ceil(share * n / m)
    return math.ceil(math.log(1 - share) / math.log(1 - m / n))


def mla_kv_kb(shape: cost.MoEShape, latent: bool = True, rope: bool = True) -> float:
    """KV bytes per token, kB: MLA's latent (d_c + d_rope per layer), or the slips of caching per-head K and V
    (``latent=False``: 2·H·d_head per layer, as GQA with H KV heads) or forgetting the rope part."""
    if not latent:
        return 2 * shape.n_layers * shape.n_heads * shape.qk_nope_head_dim * shape.kv_bytes / 1e3
    return shape.n_layers * (shape.kv_lora_rank + shape.qk_rope_head_dim * rope) * shape.kv_bytes / 1e3


def widest_paying(n_experts: int, per_token: int = 8, k: int = 3, alpha: float = 0.7) -> int:
    """The last batch at which speculation pays (Qwen3-30B-A3B's layers with ``n_experts`` experts, a Qwen3-0.6B
    draft, H100, L = 1024, no memory limit up to 4096): the end of the last paying range (0: none)."""
    shape = replace(cost.QWEN3_30B_A3B, n_experts=n_experts, experts_per_token=per_token)
    ranges = cost.paying_batches(shape, cost.QWEN3_0_6B, H100, k, alpha, 1024, limit=4096)
    return ranges[-1][1] if ranges else 0


for _problem in [
    _P("ch10.p1a", "10_sparse_targets", "distinct experts per layer a verify pass of Qwen3-30B-A3B touches at B = 1, "
       "k = 3", partial(verify_experts, cost.QWEN3_30B_A3B, 1, 3), "experts", rel=0.01,
       mistakes=(_M(partial(no_collisions, cost.QWEN3_30B_A3B, 1, 3), "that assumes no two tokens share an expert: "
                    "each of the other 120 is missed by a token with probability 1 − 8/128, so expect some overlap"),
                 _M(partial(verify_experts, cost.QWEN3_30B_A3B, 1, 3, False), "the verify pass runs k + 1 = 4 "
                    "tokens per sequence: the pending token and the k drafts"),
                 _M(partial(with_replacement, cost.QWEN3_30B_A3B, 1, 3), "a token picks 8 different experts: it "
                    "misses a given one with probability 1 − m/N, not (1 − 1/N)^m"))),
    _P("ch10.p1b", "10_sparse_targets", "routed-expert bytes of that verify pass over a decode pass's, B = 1",
       partial(expert_bytes_ratio, cost.QWEN3_30B_A3B, 1, 3), "×", rel=0.01,
       mistakes=(_M(constant(1.0), "that is a dense target, which reads every weight once whatever the tokens; a MoE "
                    "pass reads the experts its tokens chose"),
                 _M(constant(4.0), "k + 1 would be right only if no two tokens shared an expert"))),
    _P("ch10.p2", "10_sparse_targets", "the smallest batch whose plain decode pass touches 95% of Qwen3-30B-A3B's "
       "experts on average", partial(saturating_batch, cost.QWEN3_30B_A3B), "sequences", rel=0,
       mistakes=(_M(partial(saturating_batch, cost.QWEN3_30B_A3B, per_token=False), "B·m = 0.95·N ignores tokens "
                    "choosing the same experts: solve 1 − (1 − m/N)^B = 0.95"),
                 _M(partial(saturating_batch, cost.QWEN3_30B_A3B, 0.99), "that is 99%: the question asks for 95%"))),
    _P("ch10.p3a", "10_sparse_targets", "DeepSeek-V3's KV cache per token in bf16 (kB)",
       partial(mla_kv_kb, cost.DEEPSEEK_V3), "kB", rel=0.01,
       mistakes=(_M(partial(mla_kv_kb, cost.DEEPSEEK_V3, latent=False), "that caches per-head keys and values: MLA "
                    "caches one latent of d_c + d_rope per token and layer, which every head reads"),
                 _M(partial(mla_kv_kb, cost.DEEPSEEK_V3, rope=False), "the decoupled rotary key (qk_rope_head_dim = "
                    "64) is cached beside the 512-wide latent"))),
    _P("ch10.p3b", "10_sparse_targets", "FLOPs per byte of DeepSeek-V3's absorbed attention in a verify pass with "
       "k = 3, long context", partial(cost.mla_attention_intensity, cost.DEEPSEEK_V3, 4), "FLOP/byte", rel=0.02,
       mistakes=(_M(partial(cost.mla_attention_intensity, cost.DEEPSEEK_V3, 1), "that is one query per sequence, "
                    "a decode pass: the verify pass scores k + 1 = 4 queries against the same latent"),
                 _M(constant(4.0), "about k + 1 is GQA's attention in bf16 with one query head per KV head: under MLA "
                    "all 128 heads read one latent"))),
    _P("ch10.p4", "10_sparse_targets", "which MoE keeps speculation paying to larger batches, with the same active "
       "experts per token?", lambda: "a" if widest_paying(256) > widest_paying(32) else "b",
       choices={
           "a": "a sparser one, with more experts and the same m",
           "b": "a denser one, with fewer experts",
           "c": "neither: only the active parameters matter",
           "d": "one with more shared experts"},
       mistakes=(_M(constant("b"), "with few experts, decode already touches them all at small B and the verify pass "
                    "reaches the compute roof sooner: the paying range ends earlier"),
                 _M(constant("c"), "the active parameters set the FLOPs; the total experts set how many bytes a pass "
                    "reads and when the experts' matmuls turn compute-bound"),
                 _M(constant("d"), "shared experts are read by every pass like dense weights: they amortize as a "
                    "dense MLP does, and turn compute-bound as early"))),
]:
    register(_problem)


# ---------------------------------------------------------------------------------------------- checking


def problem(problem_id: str) -> Problem:
    """The registered problem; an unknown id raises, listing the parts of a multi-part problem or all ids."""
    if problem_id in PROBLEMS:
        return PROBLEMS[problem_id]
    parts = [p for p in PROBLEMS if isinstance(problem_id, str) and p.startswith(problem_id) and p[len(problem_id):]
             .isalpha()]
    if parts:
        listed = "; ".join(f"{p} ({PROBLEMS[p].summary})" for p in parts)
        raise validate.BadArgument(f"{problem_id} has parts: check each one: {listed}")
    raise validate.BadArgument(f"problem must be one of {', '.join(PROBLEMS)}; got {problem_id!r}")


def problems(chapter: str | None = None) -> list[tuple[str, str, str]]:
    """(id, chapter, summary) of every registered problem, or of one chapter's (e.g. "04_batch_size")."""
    return [(p.id, p.chapter, p.summary) for p in PROBLEMS.values() if chapter is None or p.chapter == chapter]


def answer(problem_id: str) -> float | str:
    """The reference answer, computed now by the problem's answer function."""
    return problem(problem_id).answer()


def _close(value: float, target: float, rel: float) -> bool:
    return value == target if rel == 0 else abs(value - target) <= rel * abs(target)


def _fmt(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _generic(value: float, ref: float, p: Problem) -> str:
    """A diagnosis when no listed mistake matches: units, a factor of 2, the reciprocal, off by one."""
    unit = f" (the answer is in {p.unit})" if p.unit else ""
    if ref > 0 >= value:
        return f"the answer is positive{unit}"
    if ref == 0:
        return f"{'too high' if value > 0 else 'too low'}{unit}"
    ratio = value / ref if ref else math.inf
    for n in (3, 6, 9, 12):
        for factor, side in ((10.0**n, "too large"), (10.0**-n, "too small")):
            if _close(ratio, factor, max(p.rel, 0.02)):
                return f"off by a factor of {10**n:,} ({side}): check the units{unit}"
    if _close(ratio, 2, max(p.rel, 0.02)) or _close(ratio, 0.5, max(p.rel, 0.02)):
        return (f"off by a factor of 2 ({'too high' if ratio > 1 else 'too low'}): the usual suspects are bytes "
                "per weight (2 in bf16) and FLOPs per weight per token (2)")
    if ref and _close(value * ref, 1, max(p.rel, 0.02)):
        return "that is the reciprocal of the answer: check which way round the ratio goes"
    if p.rel == 0 and abs(value - ref) == 1:
        return f"off by one ({'too high' if value > ref else 'too low'})"
    if _close(value, ref, max(0.1, 3 * p.rel)):
        return (f"close, but outside the tolerance (±{100 * p.rel:g}%): use the table's constants and do not round "
                "intermediate steps")
    return f"yours is {ratio:.3g}× the answer ({'too high' if ratio > 1 else 'too low'}){unit}"


def check(problem_id: str, value) -> Verdict:
    """Compare a reader's ``value`` with problem ``problem_id``'s answer: "right", or a diagnosis."""
    p = problem(problem_id)
    if p.choices:
        given = str(value).strip().lower()
        validate.choice("value", given, list(p.choices))  # letters, or the names the choices are
        if given == p.answer():
            return Verdict(True, f"right ({p.id}): {p.choices[given]}")
        hint = next((m.hint for m in p.mistakes if m.value() == given), "not that one")
        return Verdict(False, f"not right ({p.id}): {hint}")
    value = validate.number("value", value)
    ref = p.answer()
    if _close(value, ref, p.rel):
        within = "exactly" if p.rel == 0 else f"within {100 * p.rel:g}% of {_fmt(ref)}"
        return Verdict(True, f"right ({p.id}): {_fmt(value)} {p.unit}".rstrip() + f", {within}")
    hint = next((m.hint for m in p.mistakes if _close(value, m.value(), p.rel)), None)
    return Verdict(False, f"not right ({p.id}): {hint or _generic(value, ref, p)}")


def check_all(answers: dict, show: bool = True) -> list[tuple[str, Verdict]]:
    """Check several answers at once ({id: value}): one line per problem and the count right (printed
    when ``show``). For a lead collecting an onboarding cohort's answers."""
    if not isinstance(answers, Mapping):
        raise validate.BadArgumentType(f"answers must be a dict {{problem id: answer}}, e.g. {{'ch9.p1a': 976}}; "
                                       f"got {type(answers).__name__}")
    verdicts = [(pid, check(pid, value)) for pid, value in answers.items()]
    if show:
        for _, verdict in verdicts:
            print(f"{'✓' if verdict else '✗'} {verdict}")
        print(f"{sum(bool(v) for _, v in verdicts)} of {len(verdicts)} right")
    return verdicts


def main() -> int:
    """``python -m specnotes.exercises``: list the problems."""
    for pid, chapter, summary in problems():
        print(f"{pid:9} {chapter:22} {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
