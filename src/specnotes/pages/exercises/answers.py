"""The answer functions the chapters' problems share: each computes one quantity with the book's functions (a
reference answer, or a typical wrong one), and a problem binds its arguments with ``partial``. A chapter's own
answer functions may sit in its module instead (``ch7``, ``ch10``)."""

from __future__ import annotations

import math
from collections.abc import Callable

from specnotes.analytic import context, cost, hardware
from specnotes.analytic.cost import LLAMA_3_8B, LLAMA_3_70B

H100, H200 = "H100-SXM", "H200"


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
    from specnotes.record import calibrate

    case = calibrate.cases(source, series)[0]
    knobs = calibrate.calibration(accel, source)
    draft = case.draft.layer if isinstance(case.draft, cost.EagleHead) else case.draft
    target_fixed = knobs["overhead"] + case.target.n_layers * knobs["layer_overhead"]
    draft_fixed = knobs["draft_overhead"] + draft.n_layers * knobs["layer_overhead"]
    return case.expected() * target_fixed / (target_fixed + k * (draft_fixed if own_draft_cost else target_fixed))


def published_tokens(source: str, series: str) -> float:
    from specnotes.record import published

    return published.load(source)[series].setup["tokens_per_iteration"]


def calibrated_speedup_at(source: str, series: str, accel: str, batch: int, calibrated: bool = True) -> float:
    """S at ``batch`` for the data set's first case, with the stored calibration (or idealized)."""
    from specnotes.record import calibrate

    case = calibrate.cases(source, series)[0]
    return calibrate.curve(case, [batch], **(calibrate.calibration(accel, source) if calibrated else {}))[0]


def magicdec_window_speedup(window: int, context: int = 32000, batch: int = 64) -> float:
    """The idealized S of MagicDec's case at (context, batch) with a draft KV window (Chapter 6, Problem 2)."""
    from specnotes.record import calibrate

    cases = calibrate.cases("magicdec", "fig6c_llama31_selfspec_a100", alpha=calibrate.magicdec_alpha)
    case = next(c for c in cases if (c.context, c.batch) == (context, batch))
    return calibrate.vary([case], draft_context=window)[0].speedup()


# Chapter 6, Problem 3: a hypothetical engine's measurements, given in the problem
YOUR_ENGINE = {"tokens": 2.4, "k": 3, "context": 1000, "batches": (1, 16, 64, 128),
               "speedups": (1.90, 1.80, 1.52, 1.20)}


def your_engine_fit():
    """``calibrate.fit`` of Chapter 6, Problem 3's measurements (Llama-3.1-8B + EAGLE-3 on an H100)."""
    from specnotes.record import calibrate

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
    from specnotes.serve import serving

    pool = serving.fit_blog_pool()
    if name == "adaptive":
        return serving.adaptive_k(pool.step, pool.alpha, BLOG_MAX_BATCH, BLOG_K_MAX)
    return serving.FixedK(0 if name == "plain" else serving.BLOG_K)


def blog_step(expansion: bool = True):
    """The fitted pool's step time, with V0's batch-expansion cost or (a wrong answer) without it."""
    from specnotes.serve import serving

    pool = serving.fit_blog_pool()
    return pool.step if expansion else pool.roofline_step


def blog_capacity(policy: str, expansion: bool = True) -> float:
    """``poolsim.max_rate`` of the fitted pool (requests/s)."""
    from specnotes.serve import poolsim, serving

    pool = serving.fit_blog_pool()
    return poolsim.max_rate(blog_step(expansion), blog_policy(policy), pool.alpha, pool.requests_tokens,
                            BLOG_MAX_BATCH)


def blog_rate(batch: int, k: int, tpot_batch: int | None = None, tokens_per_step: bool = True,
              per_request: bool = True) -> float:
    """λ that holds ``batch`` requests running: B · E[N] / (N_out · T_step(B, k)), equation (1) solved for λ.
    The wrong answers: T_step at ``tpot_batch`` instead of B; E[N] left out; N_out left out."""
    from specnotes.serve import serving

    pool = serving.fit_blog_pool()
    tokens = cost.expected_tokens(pool.alpha, k) if tokens_per_step else 1.0
    return batch * tokens / ((pool.requests_tokens if per_request else 1) * pool.step(tpot_batch or batch, k))


def blog_flag(expansion: bool = True) -> int | None:
    """The V0 flag at its best for k = 4: the batch from which k = 4 stops paying (``serving.crossover``)."""
    from specnotes.serve import serving

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
    from specnotes.serve import kvcache

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
