"""Chapter 5: context length. When the KV cache, not the weights, decides whether speculation pays.

Terms of ``specnotes.analytic.cost`` read off for long contexts (notation: P matmul parameters, w bytes per
weight, KV(1) = ``kv_bytes_per_token`` bytes of K and V per token over all layers, g = n_heads /
n_kv_heads the GQA group, n = k + 1 tokens per sequence in a verify pass, ridge = peak / bandwidth):

- a pass reads the weights once (P·w) and every sequence's cache once (B·L·KV(1)): the KV bytes do
  not amortize across B, but the n verified positions of one sequence share them;
- attention does 4·d_head·n_heads FLOPs per (query, key) pair and layer, so its own intensity is
  2·g·n / kv_bytes FLOP per byte (n·g in 16-bit), whatever B and L are (``attention_intensity``);
- the verify pass is bound by one of three terms (``pass_terms``, ``regime``): reading the weights,
  reading the KV cache, or the matmuls' FLOPs. Their boundaries in the (B, L) plane
  (``regime_boundaries``) are the hyperbola L_kv = P·w / (B·KV(1)) (weights = KV, ``kv_context``), the
  vertical B_c = ridge·w / (2n) (weights = FLOPs, ``compute_batch``) and the horizontal
  L_c = 2·P·n / (ridge·KV(1)) (KV = FLOPs, ``compute_context``), which meet at one point.

What speculation gains there (``kv_bound_speedup``, ``pays_at_every_batch_context``) and the draft's
own KV (``draft_kv_ratio``) are derived in each function's docstring. ``speedup_map`` evaluates
``cost.batch_speedup`` on a (B, L) grid with the memory limit (``cost.max_batch``) beside it, and
``memory_verdicts`` says per context where speculation pays among the batches that fit;
``throughput_at_memory_limit`` compares tokens per second when memory, not a fixed B, sets the batch;
``logits_share`` sizes the [B·n, V] logits the default model leaves out.

The helpers at the end (``excess_halved``, ``fall_verdict``, ``describe_fall``, ``verify_batch``,
``kv_anchored_ratios``) describe a measurement on *this* device from this device's model (``specnotes.measure.kvtiming``
measures; the chapter's assertions are ``measure.checks.ratio_falls``, ``shared_cache`` and ``grows``). Nothing
here needs torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import EarlyExit, ModelShape, NoWeights

REGIMES = ("weights", "KV cache", "compute")


def _ridge(shape: ModelShape, accel: hardware.Accelerator) -> float:
    return accel.ridge(hardware.usable_dtype(accel, shape.compute))


def group_size(shape: ModelShape) -> int:
    """g: query heads per KV head (1 without GQA)."""
    return shape.n_heads // shape.n_kv_heads


def attention_intensity(shape: ModelShape, new_tokens: int) -> float:
    """Attention's FLOP per byte over a long cache (L ≫ n), per layer, sequence and cached token:
    4·d_head·n_heads·n FLOPs against 2·n_kv_heads·d_head·kv_bytes bytes, so 2·g·n / kv_bytes
    (n·g in 16-bit). Neither B nor L appears: batching never lifts attention off the memory roof;
    only more queries per sequence (verification) or a bigger GQA group do."""
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    return 2 * group_size(shape) * new_tokens / shape.kv_bytes


def kv_context(shape: ModelShape, batch: int) -> float:
    """L_kv = P·w / (B·KV(1)): the context at which a pass reads as many bytes of KV cache as of weights."""
    batch = validate.integer("batch", batch, low=1)
    return shape.weight_bytes_total / (batch * shape.kv_bytes_per_token)


def compute_batch(shape: ModelShape, accel, new_tokens: int) -> float:
    """B_c = ridge·w / (2n): the batch at which the matmuls of a pass with n tokens per sequence
    reach the ridge (their intensity is 2·B·n / w)."""
    accel = hardware.accelerator(accel)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    return _ridge(shape, accel) * shape.weight_bytes / (2 * new_tokens)


def compute_context(shape: ModelShape, accel, new_tokens: int) -> float:
    """L_c = 2·P·n / (ridge·KV(1)): the context at which reading one sequence's cache (L·KV(1) / BW)
    takes as long as its n tokens' matmul FLOPs (2·P·n / peak). Independent of B: both grow with it."""
    accel = hardware.accelerator(accel)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    return 2 * shape.params * new_tokens / (_ridge(shape, accel) * shape.kv_bytes_per_token)


def pass_terms(shape: ModelShape, accel, batch: int, new_tokens: int, context: int) -> dict[str, float]:
    """The three times (s) that can bound a pass: reading the weights, reading (and writing) the KV
    cache, and the matmuls' FLOPs. Per kernel, a pass takes about max(weights, compute) + KV cache
    (attention stays memory-bound while ``attention_intensity`` is under the ridge)."""
    accel = hardware.accelerator(accel)
    matmul = cost.matmul_cost(shape, batch, new_tokens)
    kv = cost.attention_cost(shape, batch, new_tokens, context)
    peak = accel.peak(hardware.usable_dtype(accel, shape.compute))
    return {"weights": matmul.bytes / accel.mem_bandwidth, "KV cache": kv.bytes / accel.mem_bandwidth,
            "compute": matmul.flops / peak}


def regime(shape: ModelShape, accel, batch: int, new_tokens: int, context: int) -> str:
    """Which of ``REGIMES`` bounds this pass: the largest of ``pass_terms``."""
    terms = pass_terms(shape, accel, batch, new_tokens, context)
    return max(REGIMES, key=terms.__getitem__)


def regime_boundaries(shape: ModelShape, accel, new_tokens: int, batch_range: tuple[int, int],
                      context_range: tuple[int, int], points: int = 64) -> dict[str, tuple[list[float], list[float]]]:
    """The three boundaries of ``regime`` as polylines (batches, contexts) inside the given ranges,
    keyed "A | B". They meet at (B_c, L_c); the hyperbola is sampled at ``points`` batches (log-spaced).
    A boundary entirely outside the ranges is left out."""
    accel = hardware.accelerator(accel)
    b_lo, b_hi = validate.integers("batch_range", batch_range, low=1)
    l_lo, l_hi = validate.integers("context_range", context_range, low=1)
    points = validate.integer("points", points, low=2)
    bc, lc = compute_batch(shape, accel, new_tokens), compute_context(shape, accel, new_tokens)
    lines = {}
    top = min(bc, b_hi)
    if top > b_lo:
        bs = [b_lo * (top / b_lo) ** (i / (points - 1)) for i in range(points)]
        pts = [(b, shape.weight_bytes_total / (b * shape.kv_bytes_per_token)) for b in bs]
        pts = [(b, min(max(ell, l_lo), l_hi)) for b, ell in pts]
        lines["weights | KV cache"] = ([b for b, _ in pts], [ell for _, ell in pts])
    if b_lo < bc < b_hi and lc > l_lo:
        lines["weights | compute"] = ([bc, bc], [l_lo, min(lc, l_hi)])
    if l_lo < lc < l_hi and bc < b_hi:
        lines["KV cache | compute"] = ([max(bc, b_lo), b_hi], [lc, lc])
    return lines


# ---------------------------------------------------------------------------------------------- the draft's KV


def _draft_per_token(target: ModelShape, draft) -> tuple[float, float]:
    """(matmul parameters, KV bytes per cached token) of a draft's one-token pass."""
    if isinstance(draft, EarlyExit):
        draft = cost.early_exit_shape(target, draft.layers)
    if isinstance(draft, NoWeights):
        return 0.0, 0.0
    if not isinstance(draft, ModelShape):
        raise validate.BadArgumentType(f"draft must be a ModelShape, EarlyExit or NoWeights here; "
                                       f"got {type(draft).__name__}")
    return float(draft.params), draft.kv_bytes_per_token


def _draft_length(context: int, draft_context: int | None) -> int:
    context = validate.integer("context", context, low=0)
    if draft_context is None:
        return context
    return validate.integer("draft_context", draft_context, low=0)


def draft_kv_ratio(target: ModelShape, draft, k: int, context: int, draft_context: int | None = None) -> float:
    """ρ = k·KV_q(1)·L_q / (KV_p(1)·L): KV bytes the draft reads per iteration (k passes over its own
    L_q cached tokens; ``draft_context``, default L) over the bytes the verify pass reads (one pass over L).

    A full-context draft model pays its KV k times per iteration: ρ = k·KV_q/KV_p, whatever L is.
    A draft with a fixed window W pays k·KV_q·W, which L dilutes: ρ → 0 as L grows. n-gram: ρ = 0.
    """
    k = validate.integer("k", k, low=0)
    draft_ctx = _draft_length(context, draft_context)
    if context == 0:
        raise validate.BadArgument("context must be >= 1 for a ratio of KV bytes")
    _, kv_q = _draft_per_token(target, draft)
    return k * kv_q * draft_ctx / (target.kv_bytes_per_token * context)


def kv_bound_speedup(target: ModelShape, draft, k: int, alpha: float, context: int,
                     draft_context: int | None = None) -> float:
    """S when every pass is bound by its KV reads (B·L·KV ≫ weights and FLOPs): plain decoding reads
    the cache once per token, a speculative iteration reads the target's once and the draft's k times
    for E[N] tokens, so S = E[N] / (1 + ρ) (``draft_kv_ratio``).

    The draft stays cheap while ρ < E[N] − 1: k·KV_q·L_q < (E[N] − 1)·KV_p·L.
    """
    return cost.expected_tokens(alpha, k) / (1 + draft_kv_ratio(target, draft, k, context, draft_context))


def pays_at_every_batch_context(target: ModelShape, draft, accel, k: int, alpha: float,
                                draft_window: int | None = None) -> float:
    """L_∞: the context above which speculation pays at every batch size (memory aside).

    As B grows every matmul becomes compute-bound and attention stays memory-bound, so per sequence
    (times × bandwidth, in bytes; a = 2P/ridge, a_q = 2P_q/ridge the matmul FLOPs as bytes)
        T_decode → a + L·KV_p,   T_verify → (k+1)·a + L·KV_p,   T_draft → k·(a_q + L_q·KV_q),
    and S∞ = E[N]·(a + L·KV_p) / (k·a_q + k·L_q·KV_q + (k+1)·a + L·KV_p). S∞ > 1 where
        L·(E[N] − 1)·KV_p > (k + 1 − E[N])·a + k·a_q + k·L_q·KV_q.
    With a full-context draft (L_q = L) that is L > [(k+1−E[N])·a + k·a_q] / ((E[N]−1)·KV_p − k·KV_q);
    with a window W (L_q = W, ``draft_window``) the draft's term k·W·KV_q moves to the numerator.
    ``math.inf`` if no context is long enough (the draft's KV is not cheap: ``kv_bound_speedup`` ≤ 1).
    """
    accel = hardware.accelerator(accel)
    k = validate.integer("k", k, low=0)
    en = cost.expected_tokens(alpha, k)
    ridge = _ridge(target, accel)
    p_q, kv_q = _draft_per_token(target, draft)
    a, a_q, kv_p = 2 * target.params / ridge, 2 * p_q / ridge, target.kv_bytes_per_token
    fixed = (k + 1 - en) * a + k * a_q
    if draft_window is None:
        slope = (en - 1) * kv_p - k * kv_q
    else:
        fixed += k * validate.integer("draft_window", draft_window, low=0) * kv_q
        slope = (en - 1) * kv_p
    return fixed / slope if slope > 0 else math.inf


# ---------------------------------------------------------------------------------------------- maps and memory


@dataclass(frozen=True)
class SpeedupMap:
    """S(B, L) on a grid: ``speedup[i][j]`` at ``contexts[i]``, ``batches[j]``; ``max_batch[i]`` is the
    largest batch that fits at ``contexts[i]`` (None: the accelerator has no memory size)."""

    label: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    speedup: tuple[tuple[float, ...], ...]
    max_batch: tuple[int | None, ...]

    def fits(self, i: int, j: int) -> bool:
        limit = self.max_batch[i]
        return limit is None or self.batches[j] <= limit


def _model(model: dict) -> dict:
    """The time functions' keyword arguments; the draft's KV length is set by ``draft_window`` here."""
    if "draft_context" in model:
        raise validate.BadArgument("pass draft_window= (the draft keeps min(L, W) tokens), not draft_context=")
    return model


def windowed(context: int, draft_window: int | None) -> int | None:
    """The draft's KV length at context L: min(L, W) for a window W, or None (the draft keeps all L)."""
    return None if draft_window is None else min(context, draft_window)


def speedup_map(target: ModelShape, draft, accel, k: int, alpha: float, batches, contexts,
                draft_window: int | None = None, label: str = "", **model) -> SpeedupMap:
    """``cost.batch_speedup`` at every (B, L) of the grid, and ``cost.max_batch`` at every L (with this
    draft's weights and KV: a window W keeps min(L, W) tokens). ``model``: the keyword arguments of
    ``cost.batch_speedup`` (overlap, overhead, draft_overhead, tp, ...), applied to both."""
    accel, model = hardware.accelerator(accel), _model(model)
    batches = tuple(validate.integers("batches", batches, low=1))
    contexts = tuple(validate.integers("contexts", contexts, low=0))
    if draft_window is not None:
        validate.integer("draft_window", draft_window, low=0)
    grid, limits = [], []
    for ctx in contexts:
        window = windowed(ctx, draft_window)
        grid.append(tuple(cost.batch_speedup(target, draft, accel, b, k, alpha, ctx, draft_context=window, **model)
                          for b in batches))
        limits.append(cost.max_batch(target, draft, accel, ctx, k=k, tp=model.get("tp", 1), draft_context=window))
    return SpeedupMap(label, batches, contexts, tuple(grid), tuple(limits))


def verdict(ranges: list[tuple[int, int]], fits: int | None) -> str:
    """Where speculation pays, in words, from ``cost.paying_batches`` ranges and the batch limit."""
    if fits == 0:
        return "does not fit"
    if not ranges:
        return "never pays"
    spans = ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in ranges)
    if fits is not None and ranges == [(1, fits)]:
        return f"pays at every batch that fits (1–{fits})"
    return f"pays at B = {spans}"


def memory_verdicts(target: ModelShape, draft, accel, k: int, alpha: float, contexts,
                    draft_window: int | None = None, **model) -> list[dict]:
    """Per context L: the largest batch that fits, the crossover batch B* without a memory limit
    (``cost.crossover_batch``: None = pays up to 65,536 sequences, 1 = never pays), and where
    speculation pays among the batches that fit (``cost.paying_batches``), in words."""
    accel, model = hardware.accelerator(accel), _model(model)
    rows = []
    for ctx in validate.integers("contexts", contexts, low=0):
        window = windowed(ctx, draft_window)
        fits = cost.max_batch(target, draft, accel, ctx, k=k, tp=model.get("tp", 1), draft_context=window)
        b_star = cost.crossover_batch(target, draft, accel, k, alpha, ctx, draft_context=window, **model)
        ranges = cost.paying_batches(target, draft, accel, k, alpha, ctx, draft_context=window, **model)
        rows.append({"L": ctx, "fits": fits, "B*": b_star, "ranges": ranges, "verdict": verdict(ranges, fits)})
    return rows


def logits_share(target: ModelShape, accel, batch: int, new_tokens: int, context: int = 0,
                 logit_bytes: float = 4) -> float:
    """Time to write and read back the [B·n, V] logits (``cost.logits_cost``, not in the default model)
    over the pass's own time (per-kernel roofline)."""
    accel = hardware.accelerator(accel)
    logits = cost.roofline_time(cost.logits_cost(target, batch, new_tokens, logit_bytes), accel,
                                dtype=hardware.usable_dtype(accel, target.compute))
    return logits / cost.pass_time(target, accel, batch, new_tokens, context)


def logits_share_bound(shape: ModelShape, accel, logit_bytes: float = 4) -> float:
    """The most ``logits_share`` reaches, once the pass's matmuls are compute-bound: logits time
    2·b·B·n·V / BW over matmul time 2·P·B·n / peak = b·V·ridge / P (b = ``logit_bytes``). Below
    that the share grows like 2·b·B·n·V / (P·w), the logits' bytes over the weights'."""
    accel = hardware.accelerator(accel)
    logit_bytes = validate.number("logit_bytes", logit_bytes, low=0, low_open=True)
    return logit_bytes * shape.vocab * _ridge(shape, accel) / shape.params


def throughput_at_memory_limit(target: ModelShape, draft, accel, k: int, alpha: float, context: int,
                               draft_window: int | None = None, **model) -> dict:
    """A server that runs as many sequences as fit: plain decoding at its largest batch (target only)
    against speculation at *its* largest batch (the draft's weights and KV take memory too).

    tokens/s = B / T_decode(B) plain, B·E[N] / T_iter(B) speculative; ``ratio`` is their quotient,
    which equals S(B) only when both batches are equal. ``model``: keyword arguments of the time
    functions (overlap, overhead, ...). A batch of 0 (nothing fits) gives 0 tokens/s.
    """
    accel, model = hardware.accelerator(accel), _model(model)
    window = windowed(validate.integer("context", context, low=0), draft_window)
    tp = model.get("tp", 1)
    plain_b = cost.max_batch(target, None, accel, context, tp=tp)
    spec_b = cost.max_batch(target, draft, accel, context, k=k, tp=tp, draft_context=window)
    if plain_b is None or spec_b is None:
        raise validate.BadArgument(f"{accel.name} has no memory size: no batch limit to compare at")
    plain = plain_b / cost.pass_time(target, accel, plain_b, 1, context, **model) if plain_b else 0.0
    spec = (spec_b * cost.expected_tokens(alpha, k)
            / cost.iteration_time(target, draft, accel, spec_b, k, context, draft_context=window, **model)
            if spec_b else 0.0)
    return {"plain batch": plain_b, "speculative batch": spec_b, "plain tokens/s": plain,
            "speculative tokens/s": spec, "ratio": spec / plain if plain else math.nan}


# ---------------------------------------------------------------------------------------------- checks


def excess_halved(first: float, last: float) -> bool:
    """A verify/decode ratio has fallen halfway to 1: last − 1 ≤ (first − 1)/2, from a first ratio above 1."""
    first, last = validate.number("first", first, low=0), validate.number("last", last, low=0)
    return first > 1 and last - 1 <= (first - 1) / 2


def fall_verdict(ratios, noise: float = 0.10) -> str:
    """How a verify/decode ratio measured at growing L moved, with a margin of ``noise`` (measure.checks'
    NOISE) for the timer: "halved" (its excess over 1 fell at least halfway), "fell" (it ended more than
    ``noise`` lower than it started), "flat" (within ``noise`` of where it started), or "rose" (more than
    ``noise`` above). One context: "flat"."""
    ratios = [validate.number("ratios", r, low=0) for r in ratios]
    noise = validate.number("noise", noise, low=0)
    if len(ratios) < 2:
        return "flat"
    if excess_halved(ratios[0], ratios[-1]):
        return "halved"
    if ratios[-1] < ratios[0] / (1 + noise):
        return "fell"
    return "rose" if ratios[-1] > ratios[0] * (1 + noise) else "flat"


STOPS = {"seen": "", "budget": "the sweep's time budget ran out", "memory": "the caches reached the sweep's memory cap"}


def describe_fall(ratios, stopped: str, noise: float = 0.10) -> str:
    """Chapter 5: what a verify/decode ratio measured at growing L did, as the words after "the ratio", chosen by
    :func:`fall_verdict` (the same ``noise``): "fell at least halfway to 1" (last − 1 ≤ (first − 1)/2, as
    ``excess_halved`` tests), "fell by more than the 10% noise, but not halfway to 1" (last < first/(1 + noise)),
    "stayed flat within the 10% noise" (with the range it took), or "rose by more than the 10% noise"; each but the
    first says why the sweep stopped (``stopped``: ``kvtiming.ContextSweep.stopped``, a key of ``STOPS``)."""
    if stopped not in STOPS:
        raise validate.BadArgument(f"stopped must be one of {', '.join(STOPS)}; got {stopped!r}")
    ratios = [validate.number("ratios", r, low=0) for r in ratios]
    verdict = fall_verdict(ratios, noise)
    by = f"{noise:.0%} noise"
    until = f" before {STOPS[stopped]}" if STOPS[stopped] else " over the contexts swept"
    return {
        "halved": "fell at least halfway to 1",
        "fell": f"fell by more than the {by}, but not halfway to 1{until}",
        "flat": f"stayed flat within the {by}, from {min(ratios):.2f} to {max(ratios):.2f} on the way,{until}",
        "rose": f"rose by more than the {by}{until}",
    }[verdict]


def kv_anchored_ratios(t_decode: float, t_verify: float, shape: ModelShape, accel, batch: int, start: int,
                       contexts) -> list[float]:
    """verify/decode at each context if both passes cost what they measured at ``start`` plus the KV
    bytes the extra context adds at the accelerator's bandwidth: B·(L − start)·KV(1) / BW, the same for
    both passes (each reads every cached token once). The chapter's mechanism alone, anchored at one
    measurement: matmuls as measured, no roofline peak involved."""
    accel = hardware.accelerator(accel)
    t_decode = validate.number("t_decode", t_decode, low=0, low_open=True)
    t_verify = validate.number("t_verify", t_verify, low=0, low_open=True)
    batch, start = validate.integer("batch", batch, low=1), validate.integer("start", start, low=0)
    extra = [batch * (ell - start) * shape.kv_bytes_per_token / accel.mem_bandwidth
             for ell in validate.integers("contexts", contexts, low=start)]
    return [(t_verify + x) / (t_decode + x) for x in extra]


def verify_batch(shape: ModelShape, accel, k: int, context: int = 0, overhead: float = 0.0, ratio: float = 2.0,
                 limit: int = 4096) -> int:
    """The smallest power-of-two batch at which this device's model puts a verify pass (k + 1 tokens per
    sequence) at ``ratio``× a decode pass or more: past the ridge, so that a falling ratio can be seen.
    ``limit`` if none up to it does."""
    k = validate.integer("k", k, low=1)
    ratio = validate.number("ratio", ratio, low=1, low_open=True)
    limit = validate.integer("limit", limit, low=1)
    b = 1
    while b < limit:
        verify = cost.pass_time(shape, accel, b, k + 1, context, overhead=overhead)
        if verify >= ratio * cost.pass_time(shape, accel, b, 1, context, overhead=overhead):
            return b
        b *= 2
    return limit
