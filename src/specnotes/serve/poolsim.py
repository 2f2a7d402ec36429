"""A decode pool as a queueing system: request rate in, batch size, TPOT and latency out (Chapter 8).

Requests arrive at rate λ (Poisson), are prefilled, and join a decode pool's running batch. The pool
runs one step after another over everything that is running; a step of B requests with k drafts each
takes ``step_time(B, k)`` seconds (from the cost model or measured) and gives each request N tokens,
N drawn from the truncated geometric distribution of acceptance α (Chapter 3). A request leaves once it
has its output tokens. So the batch is not chosen, it *follows*: by Little's law the mean batch is
B = λ · N_out · TPOT, and TPOT itself grows with B. Speculation lowers TPOT at a small batch, and raises
it (and lowers the most requests per second the pool can finish) at a large one.

Two layouts:

- ``"disaggregated"``: prefill runs elsewhere (``prefill_workers`` servers, ``prefill_s`` each), as in
  a prefill/decode (PD) split; the decode pool only decodes.
- ``"colocated"``: one server does both, like vLLM V0 in 2024: before a decode step, the requests that
  arrived are prefilled in one pass that holds up the whole batch (``prefill_s(n)`` for n prompts).

Built on SimPy (discrete-event simulation): the arrivals, the prefill servers and the decode loop are
SimPy processes; SimPy keeps the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from specnotes import validate
from specnotes.analytic import cost

LAYOUTS = ("disaggregated", "colocated")


@dataclass
class Request:
    id: int
    arrival: float
    output_tokens: int
    admitted: float = math.nan  # joined the decode batch
    finished: float = math.nan
    produced: int = 0


@dataclass
class SimResult:
    """One simulated run. ``steps``: (start s, seconds, batch, k) per decode step (and per colocated
    prefill pass, with k = -1); ``requests``: every request, in arrival order."""

    rate: float
    requests: list[Request]
    steps: list[tuple[float, float, int, int]] = field(default_factory=list)
    warmup: int = 0

    def measured(self) -> list[Request]:
        """The requests after the warm-up that finished (the steady-state sample)."""
        return [r for r in self.requests[self.warmup:] if not math.isnan(r.finished)]

    def window(self) -> tuple[float, float]:
        """From the first measured request's admission to the last one's."""
        measured = self.measured()
        return measured[0].admitted, max(r.admitted for r in measured)

    def mean_batch(self) -> float:
        """Time-averaged number of running requests over ``window()``."""
        lo, hi = self.window()
        area = sum(b * max(0.0, min(t + dt, hi) - max(t, lo)) for t, dt, b, _ in self.steps)
        return area / (hi - lo)

    def admission_rate(self) -> float:
        lo, hi = self.window()
        return sum(lo <= r.admitted <= hi for r in self.requests) / (hi - lo)

    def residence(self) -> float:
        """Mean time from joining the batch to the last token, over the requests admitted in the window."""
        lo, hi = self.window()
        return float(np.mean([r.finished - r.admitted for r in self.measured() if lo <= r.admitted <= hi]))

    def tpot(self) -> np.ndarray:
        """Per measured request: decode time per output token."""
        return np.array([(r.finished - r.admitted) / r.output_tokens for r in self.measured()])

    def latency(self) -> np.ndarray:
        """Per measured request: arrival to last token (queueing and prefill included)."""
        return np.array([r.finished - r.arrival for r in self.measured()])

    def summary(self) -> dict:
        return {"rate": self.rate, "mean batch": self.mean_batch(), "TPOT ms": 1e3 * self.tpot().mean(),
                "latency s": self.latency().mean(), "p90 latency s": float(np.quantile(self.latency(), 0.9)),
                "finished": len(self.measured())}


def tokens_per_step(rng: np.random.Generator, alpha: float, k: int, size: int) -> np.ndarray:
    """N for ``size`` requests: α^(n-1)(1-α) for n ≤ k, α^k for n = k + 1 (``cost.tokens_pmf``)."""
    if not isinstance(rng, np.random.Generator):
        raise validate.BadArgumentType(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                                       f"got {type(rng).__name__}")
    alpha = validate.probability("alpha", alpha)
    k = validate.integer("k", k, low=0)
    size = validate.integer("size", size, low=0)
    if k == 0:
        return np.ones(size, dtype=np.int64)
    if alpha >= 1.0:
        return np.full(size, k + 1, dtype=np.int64)
    return np.minimum(rng.geometric(1.0 - alpha, size), k + 1)


def simulate(rate: float, step_time: Callable[[int, int], float], policy: Callable[[int], int], alpha: float,
             output_tokens: int | Callable[[np.random.Generator], int], requests: int = 2000, warmup: int = 200,
             layout: str = "disaggregated", prefill_s: float | Callable[[int], float] = 0.0,
             prefill_workers: int = 1, max_batch: int | None = None, seed: int = 0) -> SimResult:
    """Run ``requests`` Poisson arrivals at ``rate`` per second through prefill and the decode pool.

    ``policy(B)`` -> k for each decode step; ``output_tokens``: a count, or a function drawing one;
    ``prefill_s``: seconds to prefill n prompts (a number: per prompt); ``max_batch``: at most this many
    running (the rest wait; None: no limit). The first ``warmup`` requests are left out of the statistics.
    """
    rate = validate.number("rate", rate, low=0, low_open=True)
    check_callables(step_time, policy)
    alpha = validate.probability("alpha", alpha)
    requests = validate.integer("requests", requests, low=2)
    warmup = validate.integer("warmup", warmup, low=0, high=requests - 2)
    layout = validate.choice("layout", layout, LAYOUTS)
    prefill_workers = validate.integer("prefill_workers", prefill_workers, low=1)
    max_batch = math.inf if max_batch is None else validate.integer("max_batch", max_batch, low=1)
    if not callable(prefill_s):
        per_prompt = validate.number("prefill_s", prefill_s, low=0)
        prefill_s = lambda n: n * per_prompt  # noqa: E731
    if not callable(output_tokens):
        fixed = validate.integer("output_tokens", output_tokens, low=1)
        output_tokens = lambda _: fixed  # noqa: E731
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    result = SimResult(rate, [], warmup=warmup)
    handed_off = simpy.Store(env)  # prefilled requests waiting for the decode pool
    all_done, finished = env.event(), [0]

    def prefill(req: Request, servers: simpy.Resource):
        with servers.request() as slot:
            yield slot
            yield env.timeout(prefill_s(1))
        yield handed_off.put(req)

    def arrivals():
        servers = simpy.Resource(env, prefill_workers)
        for i in range(requests):
            yield env.timeout(rng.exponential(1.0 / rate))
            req = Request(i, env.now, int(output_tokens(rng)))
            result.requests.append(req)
            if layout == "disaggregated":
                env.process(prefill(req, servers))
            else:
                yield handed_off.put(req)

    def decode_pool():
        running: list[Request] = []
        while True:
            if not running:
                running.append((yield handed_off.get()))
                newcomers = 1
            else:
                newcomers = 0
            while handed_off.items and len(running) < max_batch:
                running.append((yield handed_off.get()))
                newcomers += 1
            if layout == "colocated" and newcomers:  # one prefill pass for the newcomers holds up the batch
                seconds = prefill_s(newcomers)
                result.steps.append((env.now, seconds, len(running) - newcomers, -1))
                yield env.timeout(seconds)
            for req in running[len(running) - newcomers:]:
                req.admitted = env.now
            B = len(running)
            k = validate.integer(f"policy({B})", policy(B), low=0)
            seconds = step_seconds(step_time, B, k)
            result.steps.append((env.now, seconds, B, k))
            yield env.timeout(seconds)
            for req, n in zip(running, tokens_per_step(rng, alpha, k, B), strict=True):
                req.produced += int(n)
                if req.produced >= req.output_tokens:
                    req.finished = env.now
                    finished[0] += 1
            if finished[0] == requests:
                all_done.succeed()
            running = [r for r in running if math.isnan(r.finished)]

    env.process(arrivals())
    env.process(decode_pool())
    env.run(until=all_done)
    return result


def step_seconds(step_time, B: int, k: int) -> float:
    """``step_time(B, k)``, checked: a decode step takes a positive, finite number of seconds (at 0 the pool would
    finish any load at once, and the simulation would never advance its clock)."""
    return validate.number(f"step_time({B}, {k}) (seconds)", step_time(B, k), low=0, low_open=True)


def check_callables(step_time, policy):
    """BadArgument unless ``step_time`` (B, k -> seconds) and ``policy`` (B -> k) can be called."""
    for name, fn, what in (("step_time", step_time, "(B, k) -> seconds per decode step"),
                           ("policy", policy, "B -> k, e.g. serving.FixedK(4) or a KTable")):
        if not callable(fn):
            raise validate.BadArgumentType(f"{name} must be a function {what}, got {fn!r}")


def steady_batch(rate: float, step_time: Callable[[int, int], float], policy: Callable[[int], int], alpha: float,
                 output_tokens: float, max_batch: int = 4096) -> float | None:
    """The mean-field steady state: the B where λ · N_out · T_step(B, k(B)) / E[N](α, k(B)) = B (Little's law
    with every step at the mean batch), linear between integer batches. None if even ``max_batch`` running
    requests cannot keep up with λ (the queue grows without bound)."""
    rate = validate.number("rate", rate, low=0, low_open=True)
    output_tokens = validate.number("output_tokens", output_tokens, low=1)
    check_callables(step_time, policy)

    def excess(b: int) -> float:  # arrivals' demand for running slots minus b
        k = policy(b)
        return rate * output_tokens * step_seconds(step_time, b, k) / cost.expected_tokens(alpha, k) - b

    previous = excess(1)
    if previous <= 0:  # under one request running on average: B is the fraction of time the pool is busy
        return 1.0 + previous
    for b in range(2, max_batch + 1):
        now = excess(b)
        if now <= 0:
            return b - 1 + previous / (previous - now)
        previous = now
    return None


def steady_tpot(rate: float, step_time: Callable[[int, int], float], policy: Callable[[int], int], alpha: float,
                output_tokens: float, max_batch: int = 4096) -> float | None:
    """TPOT at the mean-field steady state: T_step(B, k(B)) / E[N](α, k(B)) at B = ``steady_batch``, linear
    between integer batches (at B below 1, the TPOT of a batch of 1). None past the pool's capacity."""
    B = steady_batch(rate, step_time, policy, alpha, output_tokens, max_batch)
    if B is None:
        return None
    tpot = lambda b: step_seconds(step_time, b, policy(b)) / cost.expected_tokens(alpha, policy(b))
    b = max(1, math.floor(B))
    return tpot(b) + (tpot(b + 1) - tpot(b)) * min(max(B - b, 0.0), 1.0)


def crossover_rate(step_time: Callable[[int, int], float], policy: Callable[[int], int], alpha: float,
                   output_tokens: float, lo: float, hi: float, iters: int = 30) -> float:
    """The request rate in [lo, hi] above which ``policy``'s mean-field TPOT exceeds plain decoding's (k = 0): the
    rate where speculation starts to hurt, by bisection (``solve``) on the ratio of the two (past the
    capacity of ``policy``'s pool, its TPOT counts as infinite). BadArgument if they do not cross in [lo, hi]."""
    plain = lambda b: 0

    def ratio(rate: float) -> float:
        ours, theirs = (steady_tpot(rate, step_time, p, alpha, output_tokens) for p in (policy, plain))
        if theirs is None:
            raise validate.BadArgument(f"at {rate:g} requests/s plain decoding is past its capacity too: lower hi")
        return math.inf if ours is None else ours / theirs

    return solve(ratio, 1.0, validate.number("lo", lo, low=0, low_open=True), validate.number("hi", hi, low=lo),
                 iters)


def max_rate(step_time: Callable[[int, int], float], policy: Callable[[int], int], alpha: float,
             output_tokens: float, max_batch: int) -> float:
    """The most requests per second the pool can finish with at most ``max_batch`` running:
    max over B of B · E[N](α, k(B)) / (N_out · T_step(B, k(B)))."""
    max_batch = validate.integer("max_batch", max_batch, low=1)
    return max(b * cost.expected_tokens(alpha, policy(b)) / (output_tokens * step_seconds(step_time, b, policy(b)))
               for b in range(1, max_batch + 1))


def sized(rate: float, seconds: float, min_requests: int = 100) -> dict:
    """``requests`` and ``warmup`` for about ``seconds`` of arrivals at ``rate`` (the first fifth is warm-up):
    every rate simulated for the same time, so a high rate gets the long run its queue needs to settle."""
    rate = validate.number("rate", rate, low=0, low_open=True)
    seconds = validate.number("seconds", seconds, low=0, low_open=True)
    requests = max(validate.integer("min_requests", min_requests, low=10), round(rate * seconds))
    return {"requests": requests, "warmup": requests // 5}


def sweep(rates, step_time: Callable[[int, int], float], policies, alpha: float, output_tokens,
          progress: bool = False, seconds: float | None = None, **simulate_kwargs) -> list[dict]:
    """One simulation per (rate, policy): a row with the mean batch, TPOT, latency and the Little's-law
    check B = λ·W (``little gap``: |B − λ·W| / B over the steady-state window). With ``seconds``, each
    rate simulates that long (``sized``) instead of a fixed number of requests."""
    from tqdm.auto import tqdm

    rows = []
    for rate in tqdm(list(rates), desc="rates", disable=not progress):
        size = sized(rate, seconds) if seconds is not None else {}
        for policy in policies:
            result = simulate(rate, step_time, policy, alpha, output_tokens, **simulate_kwargs, **size)
            B = result.mean_batch()
            rows.append({"rate": rate, "policy": getattr(policy, "name", str(policy)), "mean batch": B,
                         "TPOT ms": 1e3 * float(result.tpot().mean()), "latency s": float(result.latency().mean()),
                         "λ·W": result.admission_rate() * result.residence(),
                         "little gap": abs(B - result.admission_rate() * result.residence()) / B})
    return rows


def solve(f: Callable[[float], float], target: float, lo: float, hi: float, iters: int = 12) -> float:
    """The x in [lo, hi] where the increasing function f reaches ``target`` (bisection). Fitting one
    parameter of the simulator to one published number, in the open. A simulated f is noisy, so the answer
    is the x, of those evaluated, whose f came nearest the target, not an unevaluated midpoint."""
    lo = validate.number("lo", lo)
    hi = validate.number("hi", hi, low=lo, low_open=True)
    seen = {lo: f(lo), hi: f(hi)}
    if not seen[lo] <= target <= seen[hi]:
        raise validate.BadArgument(f"target {target:g} is outside f([{lo:g}, {hi:g}]) = [{seen[lo]:g}, {seen[hi]:g}]")
    for _ in range(validate.integer("iters", iters, low=1)):
        mid = (lo + hi) / 2
        seen[mid] = f(mid)
        lo, hi = (mid, hi) if seen[mid] < target else (lo, mid)
    return min(seen, key=lambda x: abs(seen[x] - target))
