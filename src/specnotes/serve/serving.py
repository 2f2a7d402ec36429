"""Speculation in a server (Chapter 8): pick k for every step from the running batch.

A server's batch changes all the time, and Chapter 4 showed that the best k changes with it: from
several draft tokens at batch 1 to none past the crossover. A *policy* maps the running batch B to
the k of the next step:

- ``FixedK(k)``: what a batch-1 benchmark suggests, at every load;
- ``DisableAbove(k, b)``: vLLM V0's ``speculative_disable_by_batch_size``: k, and none once the
  running batch reaches b (``vllm/spec_decode/spec_decode_worker.py``:
  ``running_queue_size >= disable_by_batch_size``);
- ``KTable``: a k per batch range, the format of vLLM's current ``num_speculative_tokens_per_batch_size``.
  ``adaptive_k`` fills one in: for every B, the k with the highest goodput B·E[N](α, k) / T_step(B, k),
  SmartSpec's criterion (Liu et al. 2024, arXiv 2406.14066), from step times measured on this device
  (``measure_step_times``) or modelled (``modelled_step_time``).

``serve`` runs a ``DecodeWorker`` through a workload whose concurrency changes over time and logs
every step and every request. A step's cost depends on its context too (its attention spans the longest
running request), and on the machine's state at the time: ``StepSampler`` times calibration steps at two
contexts *between* the served steps, and ``ContextLines`` reads the step time at each step's own context,
so that a policy's prediction can be checked against what the run measured (``model_check``).
"""

from __future__ import annotations

import bisect
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specnotes import validate
from specnotes.analytic import cost
from specnotes.serve.decode_worker import DecodeWorker, Handoff

StepTime = Callable[[int, int], float]  # (batch, k) -> seconds per step

# turboderp/Qwama-0.5B-Instruct, the vLLM blog's draft for Llama-3-70B: Qwen2-0.5B-Instruct (config.json:
# 24 layers, hidden 896, 14 heads, 2 KV heads, intermediate 4864) with Llama-3's 128,256-token vocabulary
QWAMA_0_5B = cost.ModelShape(24, 896, 14, 2, 4864, 128256, name="Qwama-0.5B")


# ---------------------------------------------------------------------------------------------- policies


@dataclass(frozen=True)
class FixedK:
    """The same k at every batch size."""

    k: int

    def __post_init__(self):
        validate.integer("k", self.k, low=0)

    def __call__(self, batch: int) -> int:
        return self.k

    @property
    def name(self) -> str:
        return "plain decoding (k = 0)" if self.k == 0 else f"fixed k = {self.k}"


@dataclass(frozen=True)
class DisableAbove:
    """vLLM V0's rule: speculate k tokens while the running batch is below ``disable_by_batch_size``,
    none from there on. (V0 also kept speculation off for the rest of every request that saw it off;
    here the rule applies step by step.)"""

    k: int
    disable_by_batch_size: int

    def __post_init__(self):
        validate.integer("k", self.k, low=0)
        validate.integer("disable_by_batch_size", self.disable_by_batch_size, low=1)

    def __call__(self, batch: int) -> int:
        return 0 if batch >= self.disable_by_batch_size else self.k

    @property
    def name(self) -> str:
        return f"k = {self.k}, off from B = {self.disable_by_batch_size} (vLLM V0 rule)"


@dataclass(frozen=True)
class KTable:
    """A k for each batch range: ``ranges`` holds (first B, last B, k), consecutive from B = 1; a batch
    past the last range uses its k. vLLM's ``num_speculative_tokens_per_batch_size`` has this form."""

    ranges: tuple[tuple[int, int, int], ...]
    label: str = "adaptive k"

    def __post_init__(self):
        if not self.ranges:
            raise validate.BadArgument("ranges must hold at least one (first, last, k)")
        expected = 1
        for first, last, k in self.ranges:
            validate.integer("k", k, low=0)
            if first != expected or last < first:
                raise validate.BadArgument(f"ranges must be consecutive from B = 1, got {self.ranges}")
            expected = last + 1

    def __call__(self, batch: int) -> int:
        i = bisect.bisect_left([last for _, last, _ in self.ranges], batch)
        return self.ranges[min(i, len(self.ranges) - 1)][2]

    @property
    def name(self) -> str:
        return self.label

    def vllm_config(self) -> list[list[int]]:
        """The table as vLLM's ``num_speculative_tokens_per_batch_size`` entries [first, last, k]."""
        return [list(r) for r in self.ranges]


def table_from_ks(ks: Sequence[int], label: str = "adaptive k") -> KTable:
    """``ks[b - 1]`` is the k at batch b: merged into ranges."""
    ranges: list[list[int]] = []
    for b, k in enumerate(ks, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, int(k)])
    return KTable(tuple(map(tuple, ranges)), label)


# ---------------------------------------------------------------------------------------------- goodput


def goodput(step_time: StepTime, alpha: float, batch: int, k: int) -> float:
    """Tokens per second a step of B sequences with k drafts each yields: B·E[N](α, k) / T_step(B, k)."""
    return batch * cost.expected_tokens(alpha, k) / step_time(batch, k)


def adaptive_k(step_time: StepTime, alpha: float, max_batch: int, k_max: int) -> KTable:
    """For each B in 1..max_batch, the k in 0..k_max with the highest goodput (SmartSpec's criterion)."""
    alpha = validate.probability("alpha", alpha)
    max_batch = validate.integer("max_batch", max_batch, low=1)
    k_max = validate.integer("k_max", k_max, low=0)
    ks = [max(range(k_max + 1), key=lambda k, b=b: goodput(step_time, alpha, b, k)) for b in range(1, max_batch + 1)]
    return table_from_ks(ks)


def crossover(step_time: StepTime, alpha: float, k: int, max_batch: int) -> int | None:
    """The first B from which k drafts never beat plain decoding again (up to max_batch): 1 if they never
    do, None if they still do at max_batch. Where to set ``DisableAbove`` for this k, at best."""
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=1)
    max_batch = validate.integer("max_batch", max_batch, low=1)
    pays = [goodput(step_time, alpha, b, k) > goodput(step_time, alpha, b, 0) for b in range(1, max_batch + 1)]
    if not any(pays):
        return 1
    last = max(b for b, p in enumerate(pays, start=1) if p)
    return None if last == max_batch else last + 1


# ---------------------------------------------------------------------------------------------- step times


@dataclass(frozen=True)
class StepTimes:
    """Seconds per decode step at some batch sizes, for each k: ``seconds[k][i]`` at ``batches[i]``.
    Called as ``times(batch, k)``: linear in B between them, extended linearly past the last two (a
    step's time grows about linearly with B once past the overhead floor)."""

    batches: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]

    def __call__(self, batch: int, k: int) -> float:
        return float(_extrapolate(batch, self.batches, self.seconds[k]))

    @property
    def k_max(self) -> int:
        return len(self.seconds) - 1


@dataclass(frozen=True)
class LinearStepTimes:
    """T_step(B, k) = intercepts[k] + slopes[k]·B: a fixed cost per step (launches, Python, the weights
    while they dominate) plus a cost per sequence. ``fit_lines`` fits it to measured step times."""

    intercepts: tuple[float, ...]
    slopes: tuple[float, ...]

    def __call__(self, batch: int, k: int) -> float:
        return self.intercepts[k] + self.slopes[k] * batch

    @property
    def k_max(self) -> int:
        return len(self.slopes) - 1


def _percent_apart(x: float, bound: float) -> str:
    """``x`` as a percentage with as many decimals (0 to 3) as it takes to print it on its side of ``bound``."""
    for d in range(4):
        text, edge = f"{x:.{d}%}", f"{bound:.{d}%}"
        if x == bound or (text != edge and (float(text[:-1]) > float(edge[:-1])) == (x > bound)):
            return text
    return text


def describe_fixed_cost(lines: LinearStepTimes, largest: int, *, most: float = 0.5) -> str:
    """Chapter 8: how much of a plain step (k = 0) the fitted fixed cost per step is, at B = 1 and at the
    ``largest`` batch timed, by the step times measured on this device; "mostly" only where it is more than
    ``most`` of the step. Two sentences, each under 45 words."""
    largest = validate.integer("largest", largest, low=1)
    share = {b: lines.intercepts[0] / lines(b, 0) for b in (1, largest)}
    shown = {b: _percent_apart(x, most) for b, x in share.items()}  # "50%" never beside "mostly"
    said = (f"By the fitted step times, the fixed cost of a plain step, what it costs whatever the batch, is "
            f"{shown[1]} of it at B = 1 and {shown[largest]} at B = {largest}.")
    if share[largest] > most:
        return f"{said} Here every pass costs mostly its fixed per-step overhead."
    if share[1] > most:
        return f"{said} Here small batches pay mostly the fixed per-step overhead, and large ones their rows."
    return f"{said} Here even a one-sequence step costs mostly its rows, not its fixed overhead."


def fit_lines(times: StepTimes) -> LinearStepTimes:
    """A straight line in B through each k's measured step times, by least squares on the *relative* error
    (a 1 ms step and a 40 ms step count alike), slope at least 0. A policy read off noisy points jumps
    between ks from one batch size to the next; one read off the lines changes k only where the lines say so."""
    batches = np.array(times.batches, dtype=float)
    intercepts, slopes = [], []
    for seconds in np.array(times.seconds, dtype=float):
        if len(batches) == 1:
            intercepts.append(float(seconds[0]))
            slopes.append(0.0)
            continue
        a, b = np.linalg.lstsq(np.stack([1 / seconds, batches / seconds], 1), np.ones_like(seconds), rcond=None)[0]
        if b < 0:  # time cannot fall with the batch: a flat line at the mean
            a, b = float(np.mean(seconds)), 0.0
        intercepts.append(float(a))
        slopes.append(float(b))
    return LinearStepTimes(tuple(intercepts), tuple(slopes))


@dataclass(frozen=True)
class ContextLines:
    """T_step(B, k) at a context (the tokens a step's attention spans: its longest running request):
    ``lines[i]`` fitted at ``contexts[i]``, linear in the context between and past the two."""

    contexts: tuple[int, int]
    lines: tuple[LinearStepTimes, LinearStepTimes]

    def __post_init__(self):
        if len(self.contexts) != 2 or self.contexts[0] >= self.contexts[1]:
            raise validate.BadArgument(f"contexts must be two increasing token counts, got {self.contexts}")

    def at(self, context: float) -> LinearStepTimes:
        """The lines at ``context`` tokens."""
        f = (context - self.contexts[0]) / (self.contexts[1] - self.contexts[0])
        (a, b) = self.lines
        mix = lambda x, y: tuple(u + (v - u) * f for u, v in zip(x, y, strict=True))
        return LinearStepTimes(mix(a.intercepts, b.intercepts), mix(a.slopes, b.slopes))

    def __call__(self, batch: int, k: int, context: float) -> float:
        return self.at(context)(batch, k)


def _extrapolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) == 1:
        return ys[0]
    if x <= xs[-1]:
        return np.interp(x, xs, ys)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return ys[-1] + slope * (x - xs[-1])


def measure_step_times(worker: DecodeWorker, handoffs: Sequence[Handoff], batches: Sequence[int], k_max: int,
                       warmup: int = 2, repeats: int = 5, progress: bool = True,
                       clock: Callable[[], float] = time.perf_counter, settle: tuple[int, int] = (0, 0)
                       ) -> StepTimes:
    """Time ``worker.step(k)`` for every batch in ``batches`` and k in 0..k_max, at the handoffs' context.

    Each timed step is rewound (``worker.restore``), so every sample runs at the same context and no
    request finishes. The ks take turns (one sample of each per round), so a burst of contention on a
    shared machine hits them alike, and the fastest of ``repeats`` rounds is kept: contention only adds time.
    ``settle``: (steps, k) run before the snapshot, so that every timed step starts where a served one does, the
    draft with the tokens accepted since its last pass still to read (Chapter 11)."""
    seconds = fastest_steps(worker, handoffs, batches, k_max, warmup, repeats, progress, clock, settle)
    return StepTimes(tuple(batches), tuple(map(tuple, monotone_envelope(seconds).tolist())))


def fastest_steps(worker: DecodeWorker, handoffs: Sequence[Handoff], batches: Sequence[int], k_max: int,
                  warmup: int, repeats: int, progress: bool, clock: Callable[[], float], settle: tuple[int, int],
                  rows_k=lambda k, b: k) -> np.ndarray:
    """``measure_step_times``' rounds: seconds [k, batch], the fastest timed ``worker.step(rows_k(k, b))`` of
    each (k, b) after ``warmup`` rounds; ``rows_k`` gives the step its ks (every row's k by default)."""
    from tqdm.auto import tqdm

    batches = validate.integers("batches", batches, low=1, high=min(worker.slots, len(handoffs)))
    k_max = validate.integer("k_max", k_max, low=0, high=worker.k_max)
    warmup = validate.integer("warmup", warmup, low=0)
    repeats = validate.integer("repeats", repeats, low=1)
    settle = (validate.integer("settle steps", settle[0], low=0), validate.integer("settle k", settle[1], low=0,
                                                                                    high=worker.k_max))
    need = (settle[0] + 1) * (max(k_max, settle[1]) + 1)
    if any(h.max_new_tokens <= need for h in handoffs[: max(batches)]):
        raise validate.BadArgument(f"every handoff needs max_new_tokens > {need} (the settling steps and k_max + 1): "
                                   "no request may finish during a timed step")
    seconds = np.full((k_max + 1, len(batches)), np.inf)
    for i, b in enumerate(tqdm(batches, desc="step times", disable=not progress)):
        worker.reset()
        for h in handoffs[:b]:
            worker.admit(h)
        for _ in range(settle[0]):
            worker.step(settle[1])
        snap = worker.snapshot()
        for round_ in range(warmup + repeats):
            for k in range(k_max + 1):
                t0 = clock()
                worker.step(rows_k(k, b))
                elapsed = clock() - t0
                worker.restore(snap)
                if round_ >= warmup:
                    seconds[k, i] = min(seconds[k, i], elapsed)
    worker.reset()
    return seconds


def monotone_envelope(seconds: np.ndarray) -> np.ndarray:
    """The largest array below ``seconds`` [k, batch] that never falls as k or the batch grows.

    A step with more sequences or more drafts does more work, so it cannot be faster; a measured
    point above a larger step's time was slowed by something else (contention only adds time), and
    is replaced by that time."""
    env = np.array(seconds, dtype=float)
    for k in reversed(range(env.shape[0])):
        env[k] = np.minimum.accumulate(env[k][::-1])[::-1]
        if k + 1 < env.shape[0]:
            env[k] = np.minimum(env[k], env[k + 1])
    return env


class StepSampler:
    """Calibration steps timed *during* a served workload: ``serve(..., between=sampler)`` calls it after every
    round of served steps, and each call times one step of one (context, B, k), in turn, then rewinds it.

    ``workers``: context (tokens) -> a worker holding at least max(batches) freshly admitted handoffs of that
    many tokens, each with max_new_tokens > k_max + 1; batch B steps its first B rows. ``every``: time a step
    on every ``every``-th call only (a cheaper, sparser sample). Interleaved with the served steps, the samples
    see the machine (its load, its caches) as the served steps did; a step time measured before the run and
    rewound at one context sees neither the run's machine nor its contexts."""

    def __init__(self, workers: dict[int, DecodeWorker], batches: Sequence[int], k_max: int,
                 clock: Callable[[], float] = time.perf_counter, every: int = 1):
        if len(workers) != 2:
            raise validate.BadArgument(f"need workers at exactly two contexts, got {sorted(workers)}")
        sizes = {w.n for w in workers.values()}
        self.batches = tuple(validate.integers("batches", batches, low=1, high=min(sizes)))
        self.k_max = validate.integer("k_max", k_max, low=0, high=min(w.k_max for w in workers.values()))
        for c, w in workers.items():
            left = w.budget[: w.n] - (w.committed[: w.n] - w.first_new[: w.n])  # tokens each request still needs
            if w.context != c or int(left.min()) <= k_max + 1:
                raise validate.BadArgument(f"the worker for context {c} must hold freshly admitted handoffs of {c} "
                                           f"tokens with max_new_tokens > k_max + 1 = {k_max + 1}")
        self.every = validate.integer("every", every, low=1)
        self.workers, self.clock = dict(sorted(workers.items())), clock
        self.snapshots = {c: (w.n, w.snapshot()) for c, w in self.workers.items()}
        self.cells = [(c, b, k) for c in self.workers for b in self.batches for k in range(self.k_max + 1)]
        self.samples: dict[tuple[int, int, int], list[float]] = {cell: [] for cell in self.cells}
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls % self.every:
            return
        c, b, k = self.cells[(self.calls // self.every - 1) % len(self.cells)]
        worker, (n, snap) = self.workers[c], self.snapshots[c]
        worker.n = b  # rows 0..b-1: a batch of b (nothing finishes: max_new_tokens > k + 1)
        t0 = self.clock()
        worker.step(k)
        elapsed = self.clock() - t0
        worker.restore(snap)
        worker.n = n
        self.samples[c, b, k].append(elapsed)

    def step_times(self, context: int, fastest_of: int = 1) -> StepTimes:
        """The samples at ``context`` as a table: the fastest of every ``fastest_of`` consecutive samples of a
        cell (as ``fastest`` keeps the fastest of that many rounds of a served step), their median, and the
        monotone envelope."""
        validate.choice("context", context, self.workers)
        fastest_of = validate.integer("fastest_of", fastest_of, low=1)
        short = [cell for cell in self.cells if cell[0] == context and len(self.samples[cell]) < fastest_of]
        if short:
            raise validate.BadArgument(f"{len(short)} cells have fewer than fastest_of = {fastest_of} samples "
                                       f"(e.g. {short[0]}): the run was too short for this grid")

        def typical(samples: list[float]) -> float:  # the median of the fastest of each run of fastest_of
            runs = np.array(samples[: len(samples) // fastest_of * fastest_of]).reshape(-1, fastest_of)
            return float(np.median(runs.min(axis=1)))

        seconds = np.array([[typical(self.samples[context, b, k]) for b in self.batches]
                            for k in range(self.k_max + 1)])
        return StepTimes(self.batches, tuple(map(tuple, monotone_envelope(seconds).tolist())))

    def lines(self, fastest_of: int = 1) -> ContextLines:
        """Straight lines in B (``fit_lines``) at both contexts."""
        contexts = tuple(self.workers)
        return ContextLines(contexts, tuple(fit_lines(self.step_times(c, fastest_of)) for c in contexts))


def modelled_step_time(target: cost.ModelShape, draft: cost.Draft, accel, context: int = 0, **model) -> StepTime:
    """T_step(B, k) from the cost model: a plain decode pass at k = 0, ``cost.iteration_time`` above.
    ``model``: the cost model's keyword arguments (dtype, overhead, draft_overhead, overlap, tp, ...).
    Values are cached: a simulation asks for the same (B, k) many times."""

    @functools.cache
    def step_time(batch: int, k: int) -> float:
        if k == 0:
            return cost.pass_time(target, accel, batch, 1, context, **{n: v for n, v in model.items()
                                                                       if n not in ("draft_overhead", "draft_context")})
        return cost.iteration_time(target, draft, accel, batch, k, context, **model)

    return step_time


def batch_expansion(step_time: StepTime, per_sequence_s: float) -> StepTime:
    """``step_time`` plus vLLM V0's batch-expansion scoring cost: a speculative step scores each of its B
    sequences as k + 1 sequences of one token (V0's ``BatchExpansionTop1Scorer``), and pays
    ``per_sequence_s`` of engine work for every one of those B·(k + 1); a plain step pays nothing extra."""
    per_sequence_s = validate.number("per_sequence_s", per_sequence_s, low=0)

    @functools.cache
    def expanded(batch: int, k: int) -> float:
        return step_time(batch, k) + (per_sequence_s * batch * (k + 1) if k else 0.0)

    return expanded


# ---------------------------------------------------------------------------------------------- the vLLM blog's pool

# vLLM blog 2024-10-17, Figs. 5 and 7: Llama-3-70B on 4×H100 with Qwama-0.5B, k = 4. The post gives neither
# prompt lengths nor context: these are assumed (Chapter 8 says so), and every rate simulates 2 minutes.
BLOG_PROMPT, BLOG_CONTEXT, BLOG_K, BLOG_TP, BLOG_SECONDS = 256, 384, 4, 4, 120.0


@dataclass(frozen=True)
class BlogPool:
    """The vLLM blog's decode pool as ``fit_blog_pool`` fitted it: the output length, α and V0's
    batch-expansion cost per expanded sequence; the step times without that cost (``roofline_step``)
    and with it (``step``); and ``poolsim.simulate``'s layout, prefill and seed (``simulation``)."""

    output_tokens: float
    alpha: float
    per_sequence_s: float
    roofline_step: StepTime
    step: StepTime
    simulation: dict

    @property
    def requests_tokens(self) -> int:
        """The output length every simulated request gets (whole tokens)."""
        return int(round(self.output_tokens))


def mean_latency(rate: float, step_time: StepTime, policy, alpha: float, output_tokens: float,
                 seconds: float = BLOG_SECONDS, **simulation) -> float:
    """Mean end-to-end latency (s) of ``seconds`` of Poisson arrivals at ``rate``, simulated (``poolsim``)."""
    from specnotes.serve import poolsim

    result = poolsim.simulate(rate, step_time, policy, alpha, int(round(output_tokens)), **simulation,
                              **poolsim.sized(rate, seconds))
    return float(result.latency().mean())


@functools.cache
def fit_blog_pool() -> BlogPool:
    """Fit the pool to three of the blog's bars, one number each, by bisection: N_out to the latency without
    speculation at 1 request/s, α to the latency with it at 1 request/s, and V0's batch-expansion cost to
    the latency with it at 4 requests/s. The cost model (with the H100 calibration's overheads) does the rest."""
    from specnotes.record import calibrate, published
    from specnotes.serve import poolsim

    bars = {p["qps"]: p for p in published.load("vllm_blog_2024")["fig5_draft_model_sharegpt"].points}
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    target = cost.LLAMA_3_70B
    roofline = modelled_step_time(target, QWAMA_0_5B, "H100-SXM", context=BLOG_CONTEXT, tp=BLOG_TP, **knobs)
    prefill_s = functools.cache(lambda n: cost.pass_time(target, "H100-SXM", n, BLOG_PROMPT, 0, tp=BLOG_TP, **knobs))
    sim = {"layout": "colocated", "prefill_s": prefill_s, "seed": 0}
    plain, fixed = FixedK(0), FixedK(BLOG_K)
    n_out = poolsim.solve(lambda n: mean_latency(1, roofline, plain, 0.5, n, **sim), bars[1]["latency_plain"],
                          50, 400, iters=8)
    alpha = 1 - poolsim.solve(lambda a: mean_latency(1, roofline, fixed, 1 - a, n_out, **sim),
                              bars[1]["latency_sd"], 0.02, 0.95, iters=8)
    per_seq = poolsim.solve(lambda c: mean_latency(4, batch_expansion(roofline, c), fixed, alpha, n_out, **sim),
                            bars[4]["latency_sd"], 0.0, 4e-4, iters=11)  # the simulation's noise: ±2% here
    return BlogPool(n_out, alpha, per_seq, roofline, batch_expansion(roofline, per_seq), sim)


# ---------------------------------------------------------------------------------------------- serving


def concurrency_limits(phases: Sequence[tuple[int, int]]) -> list[int]:
    """(requests, concurrency) phases -> the concurrency in force when each request is admitted."""
    limits = []
    for n, c in phases:
        limits += [validate.integer("concurrency", c, low=1)] * validate.integer("requests", n, low=0)
    return limits


@dataclass
class ServeRun:
    """What ``serve`` saw. ``steps``: one (seconds, batch, k, tokens delivered) per step; ``contexts``: each
    step's context (tokens its longest running request held before it); ``requests``: request id -> (index
    of its first step, index of its last step, tokens)."""

    policy: str
    steps: list[tuple[float, int, int, int]] = field(default_factory=list)
    requests: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    contexts: list[int] = field(default_factory=list)
    drafts_checked: int = 0
    drafts_accepted: int = 0
    drafts_verified: int = 0  # draft slots the verify passes ran (B·k a step for one k a row)

    @property
    def work(self) -> list[tuple[int, int, int]]:
        """(batch, k, tokens) of every step: the same for two runs that did the same work."""
        return [s[1:] for s in self.steps]

    @property
    def step_s(self) -> float:
        return sum(s[0] for s in self.steps)

    @property
    def tokens(self) -> int:
        return sum(r[2] for r in self.requests.values())

    @property
    def tokens_per_s(self) -> float:
        """Tokens over the time spent in steps (admitting a request, a copy, is left out)."""
        return self.tokens / self.step_s

    @property
    def s_per_token(self) -> np.ndarray:
        """Per request: the time of the steps it was in, over its tokens (the TPOT of a PD split's decode side)."""
        ends = np.cumsum([0.0] + [s[0] for s in self.steps])
        return np.array([(ends[last + 1] - ends[first]) / n for first, last, n in self.requests.values()])

    @property
    def alpha(self) -> float:
        return self.drafts_accepted / self.drafts_checked if self.drafts_checked else float("nan")

    def summary(self) -> dict:
        per_token = self.s_per_token
        return {"policy": self.policy, "tokens/s": self.tokens_per_s, "mean ms per token": 1e3 * per_token.mean(),
                "p90 ms per token": 1e3 * np.quantile(per_token, 0.9), "seconds": self.step_s,
                "steps": len(self.steps), "α": self.alpha}


def fastest(runs: Sequence[ServeRun]) -> ServeRun:
    """Several runs of the same workload and policy as one: each step at its fastest. At temperature 0 a
    run is deterministic, so step i did the same work in every run (checked), and contention only adds time."""
    if not runs:
        raise validate.BadArgument("need at least one run")
    first = runs[0]
    if any(r.work != first.work or r.requests != first.requests or r.contexts != first.contexts for r in runs[1:]):
        raise validate.BadArgument("the runs did different work (sampling at temperature > 0?): cannot combine")
    best = ServeRun(first.policy, requests=dict(first.requests), contexts=list(first.contexts),
                    drafts_checked=first.drafts_checked, drafts_accepted=first.drafts_accepted,
                    drafts_verified=first.drafts_verified)
    best.steps = [(min(r.steps[i][0] for r in runs), *first.steps[i][1:]) for i in range(len(first.steps))]
    return best


class _Session:
    """One policy working through the workload on its own worker: admissions, then one step at a time."""

    def __init__(self, worker: DecodeWorker, handoffs: Sequence[Handoff], limits: Sequence[int], policy):
        if len(limits) != len(handoffs):
            raise validate.BadArgument(f"need one limit per handoff, got {len(limits)} for {len(handoffs)}")
        worker.reset()
        self.worker, self.policy = worker, policy
        self.queue = deque(zip(handoffs, limits, strict=True))
        self.run = ServeRun(getattr(policy, "name", str(policy)))
        self.first_step: dict[int, int] = {}

    @property
    def done(self) -> bool:
        return not self.queue and not self.worker.n

    def step(self, clock: Callable[[], float]):
        worker, run = self.worker, self.run
        while self.queue and worker.n < min(self.queue[0][1], worker.slots):
            handoff, _ = self.queue.popleft()
            worker.admit(handoff)
            self.first_step[handoff.request_id] = len(run.steps)
        slots = getattr(self.policy, "slots", None)  # a budget (Chapter 11): one k per running row
        k = slots(worker) if slots else min(self.policy(worker.n), worker.k_max)
        run.contexts.append(worker.context)
        t0 = clock()
        result = worker.step(k)
        run.steps.append((clock() - t0, result.batch, result.k, result.tokens))
        run.drafts_checked += result.drafts_checked
        run.drafts_accepted += result.drafts_accepted
        run.drafts_verified += result.slots
        if hasattr(self.policy, "observe"):
            self.policy.observe(result)
        for done in result.finished:
            run.requests[done.request_id] = (self.first_step[done.request_id], len(run.steps) - 1, len(done.tokens))


def serve(workers: Sequence[DecodeWorker], handoffs: Sequence[Handoff], limits: Sequence[int], policies: Sequence,
          clock: Callable[[], float] = time.perf_counter,
          between: Callable[[], object] | None = None) -> list[ServeRun]:
    """Decode every handoff once per policy, each policy on its own worker: admit the next handoff whenever
    fewer than its limit are running (closed loop, like a client holding ``limit`` requests in flight),
    then step with k = policy(B). The policies take turns step by step, so a burst of load on a shared
    machine slows them alike; ``between`` (a ``StepSampler``) is called after every round of steps."""
    if len(workers) != len(policies) or len({id(w) for w in workers}) != len(workers):
        raise validate.BadArgument("need one worker of its own per policy")
    sessions = [_Session(w, handoffs, limits, p) for w, p in zip(workers, policies, strict=True)]
    while not all(s.done for s in sessions):
        for s in sessions:
            if not s.done:
                s.step(clock)
        if between is not None:
            between()
    return [s.run for s in sessions]


def predicted_seconds(run: ServeRun, step_time: StepTime | ContextLines) -> float:
    """What ``step_time`` says the run's steps cost: the policy comparison without the noise. ``ContextLines``
    read each step at its own context."""
    if isinstance(step_time, ContextLines):
        return sum(step_time(b, k, c) for (_, b, k, _), c in zip(run.steps, run.contexts, strict=True))
    return sum(step_time(b, k) for _, b, k, _ in run.steps)


def model_check(run: ServeRun, table: StepTime, sampled: ContextLines, table_context: int) -> dict:
    """A run's measured seconds against what its policy's ``table`` (timed before the run, at
    ``table_context``) predicted, the gap split into three factors whose product is measured / table:

    - ``drift``: the same steps priced by step times sampled *during* the run at ``table_context``, over the
      table: how much the machine's step costs moved between the calibration and the run;
    - ``context``: the sampled step times at each step's own context, over those at ``table_context``;
    - ``rest``: measured over that last prediction: what step times rewound at a fresh state do not capture
      (ragged rows, catch-up, requests leaving)."""
    measured, predicted = run.step_s, predicted_seconds(run, table)
    same = predicted_seconds(run, sampled.at(table_context))
    here = predicted_seconds(run, sampled)
    return {"policy": run.policy, "measured s": measured, "table s": predicted, "sampled s": here,
            "table error": measured / predicted - 1, "drift": same / predicted, "context": here / same,
            "rest": measured / here}


def explain_ratio(other: dict, adaptive: dict, bar: float) -> str:
    """A sentence on adaptive k against ``other`` (``model_check`` rows of both): the measured ratio of their
    times (``other``'s over adaptive's: above 1, adaptive was faster) against the table's, and which factor
    (drift, context, rest) moved it most. ``bar``: the smallest relative difference that counts (the noise floor)."""
    bar = validate.number("bar", bar, low=0)
    measured, table = other["measured s"] / adaptive["measured s"], other["table s"] / adaptive["table s"]
    factors = {f: other[f] / adaptive[f] for f in ("drift", "context", "rest")}
    name = other["policy"]
    side = "fell behind" if measured < 1 - bar else "beat" if measured > 1 + bar else "was level with"
    head = (f"Adaptive k {side} {name}: {name} took {measured:.2f}× adaptive k's time, where the policy's table "
            f"predicted {table:.2f}×")
    if abs(measured / table - 1) <= bar:
        return head + ", within the noise floor."
    main = max(factors, key=lambda f: abs(np.log(factors[f])))
    drifted, sampled = table * factors["drift"], table * factors["drift"] * factors["context"]
    why = {"drift": "the machine's drift between the calibration and the run: the same steps priced with the step "
                    f"times sampled during the run, at the table's context, give {drifted:.2f}×",
           "context": "the contexts the steps ran at: priced at each step's own context with the step times sampled "
                      f"during the run, they give {sampled:.2f}× (at the table's context, {drifted:.2f}×)",
           "rest": "serving itself, which steps rewound to a fresh state do not see (ragged rows, the draft's "
                   "catch-up, requests leaving): the step times sampled during the run, at each step's context, "
                   f"give {sampled:.2f}×"}[main]
    return f"{head}. Of the gap between the two, the largest part is {why}."
