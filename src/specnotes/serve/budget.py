"""Verification on a budget (Chapter 11): one k per request, chosen every step from each request's acceptance.

Chapter 8's policies give every running request the same k. vLLM's adaptive verification scores each (request,
position) draft slot by its *survival probability*, the running product of that request's per-position
acceptance estimates, and verifies the highest-scoring slots up to a per-step budget taken from step costs
profiled at start-up: the budget that maximizes expected tokens per second (``cost.budget_slots`` derives it).
Here:

- ``SlotCost`` is the profiled cost: T(B, S, W) for a step of B requests verifying S draft slots in all, at most W
  in one row, fitted to step times measured at one k for every row (``serving.measure_step_times``) and with k for
  one row only (``measure_one_row``): at each B measured, the plain step, a jump once anything is drafted (the
  draft pass and the verify pass's fixed cost), a cost per slot and one per row of width (this worker pads
  attention to the longest row); linear in B between the batches measured. ``prices`` says what a step costs as
  the worker runs it: one k for every row, or rows the worker pads to the rectangle (``PACK_BELOW``), at the time
  measured for one k a row; rows it packs, at the fitted T(B, S, W).
- ``Estimates`` keeps each request's per-position acceptance: a prior (the pooled per-position rates, measured
  before the run) updated by what the request's own drafts did, as vLLM's online estimator recalibrates during
  serving. At temperature 0 a request's rates are learnt within a few steps.
- ``Budget`` is the policy: ``slots(worker)`` returns one k per running row for ``DecodeWorker.step``;
  ``observe(result)`` feeds the estimates. It is a policy of ``serving.serve`` like the others. Its choice is
  vLLM's, in numpy (``cumprod``, a sort, ``cumsum``, the argmax of tokens over time): ``cost.budget_slots`` is the
  same rule written out, and a test holds the two to the same answer. ``compare`` times it with the step.
- ``SpoiledDrafter`` makes a synthetic mix: a parallel drafter whose drafts, for the requests it is told, are
  replaced with probability ``rate`` by a token the target never writes, and reported as that one-hot proposal,
  so decoding stays exact; those requests' acceptance falls to about (1 − rate) of their own.
- ``TRTLLM_SCHEDULE``: TensorRT-LLM's documented ``draft_len_schedule`` example, a per-batch k table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specnotes import validate
from specnotes.serve import serving
from specnotes.serve.decode_worker import PACK_BELOW
from specnotes.serve.serving import KTable, StepTimes
from specnotes.tiny.parallel_drafter import ParallelDrafter

# TensorRT-LLM PR #10860: "draft_len_schedule = {4: 4, 8: 2, 32: 1} means: Batch sizes 1–4: use runtime_draft_len=4;
# Batch sizes 5–8: 2; Batch sizes 9–32: 1; Batch sizes 33+: use runtime_draft_len=0"
TRTLLM_SCHEDULE = KTable(((1, 4, 4), (5, 8, 2), (9, 32, 1), (33, 33, 0)), label="TensorRT-LLM schedule {4: 4, 8: 2, "
                                                                                 "32: 1}, 0 above")


@dataclass(frozen=True)
class SlotCost:
    """T(B, S, W) = plain(B) + [S > 0]·(jump(B) + per_slot(B)·S + per_width(B)·B·W) for a step of B requests that
    verifies S draft slots in all, W of them at most in one row; linear in B between the ``batches`` measured and
    past the last two. The width term is this worker's: its packed pass runs the matmuls over the real tokens but
    lays attention out per row, padded to the longest (vLLM's variable-length attention has no such term)."""

    batches: tuple[int, ...]
    plain: tuple[float, ...]
    jump: tuple[float, ...]
    per_slot: tuple[float, ...]
    per_width: tuple[float, ...]
    rect: tuple[tuple[float, ...], ...] | None = None  # measured, one k a row: rect[k][i] at batches[i], k = 0..

    def __call__(self, batch: int, slots: int, width: int | None = None) -> float:
        at = lambda ys: float(_line(batch, self.batches, ys))
        if not slots:
            return at(self.plain)
        width = -(-slots // batch) if width is None else width  # one k a row: the slots spread evenly
        return at(self.plain) + at(self.jump) + at(self.per_slot) * slots + at(self.per_width) * batch * width

    def prices(self, batch: int, slots, widths) -> np.ndarray:
        """The time of a step of ``batch`` rows verifying ``slots[j]`` draft slots, at most ``widths[j]`` in a row,
        for each j, as ``DecodeWorker.step`` runs it: no slot, the plain step; one k for every row (S = B·W), or
        rows the worker pads to the rectangle (real tokens B + S at least ``PACK_BELOW`` of B·(W + 1)), the step
        at one k = W a row, as measured (``rect``; the fitted T with S = B·W past it); rows it packs, T(B, S, W)."""
        slots, widths = np.asarray(slots, dtype=float), np.asarray(widths, dtype=int)
        plain, jump, slot, width, measured = _terms(self, batch)
        packed = plain + jump + slot * slots + width * batch * widths
        rect = plain + jump + (slot + width) * batch * widths
        if measured.size:
            rect = np.where(widths < len(measured), measured[np.minimum(widths, len(measured) - 1)], rect)
        padded = (slots >= batch * widths) | (batch + slots >= PACK_BELOW * batch * (widths + 1))
        return np.where(slots == 0, plain, np.where(padded, rect, packed))

    def step_time(self, batch: int, ks: Sequence[int]) -> float:
        """``prices`` for one step with ``ks[b]`` drafts verified in row b."""
        return float(self.prices(batch, [sum(ks)], [max(ks)])[0])

    @classmethod
    def fit(cls, times: StepTimes, one_row: StepTimes | None = None) -> SlotCost:
        """From step times at one k for every row, k = 0..k_max (k_max ≥ 1), and ``one_row``, at the same batches,
        with k for one row and none for the others (without it, no width term: every slot costs alike). Per batch,
        least squares over k = 1..k_max of T(B, k) − plain = jump + (per_slot + per_width)·B·k and T_one(B, k) −
        plain = jump + per_slot·k + per_width·B·k; the per-token terms at least 0."""
        if times.k_max < 1:
            raise validate.BadArgument("SlotCost needs step times at k = 1 or more besides k = 0")
        if one_row is not None and (one_row.batches != times.batches or one_row.k_max != times.k_max):
            raise validate.BadArgument("one_row must be measured at the same batches and k as times")
        plain, jump, per_slot, per_width = [], [], [], []
        for i, b in enumerate(times.batches):
            t0 = times.seconds[0][i]
            rows, ys = [], []
            for k in range(1, times.k_max + 1):
                rows.append([1.0, b * k, b * k])
                ys.append(times.seconds[k][i] - t0)
                if one_row is not None:
                    rows.append([1.0, k, b * k])
                    ys.append(one_row.seconds[k][i] - t0)
            a = np.array(rows)
            if one_row is None:
                a = a[:, :2]
            coef = np.linalg.lstsq(a, np.array(ys), rcond=None)[0]
            coef = np.concatenate([coef, [0.0]]) if one_row is None else coef
            j, ps, pw = float(coef[0]), max(float(coef[1]), 0.0), max(float(coef[2]), 0.0)
            plain.append(t0)
            jump.append(max(j, 0.0))
            per_slot.append(ps)
            per_width.append(pw)
        return cls(tuple(times.batches), tuple(plain), tuple(jump), tuple(per_slot), tuple(per_width),
                   tuple(map(tuple, times.seconds)))


def _terms(c: SlotCost, batch: int) -> tuple[float, float, float, float, np.ndarray]:
    """A slot cost's terms at ``batch`` (plain, jump, per slot, per width, the measured steps at k = 0..), computed
    once a batch and kept on the instance: the policy prices every step with them."""
    kept = c.__dict__.setdefault("_at_batch", {})
    if batch not in kept:
        at = lambda ys: float(_line(batch, c.batches, ys))
        kept[batch] = (*(at(ys) for ys in (c.plain, c.jump, c.per_slot, c.per_width)),
                       np.array([at(ys) for ys in c.rect or ()]))
    return kept[batch]


def measure_one_row(worker, handoffs: Sequence, batches: Sequence[int], k_max: int, warmup: int = 1,
                    repeats: int = 3, clock=time.perf_counter, settle: tuple[int, int] = (0, 0)) -> StepTimes:
    """Step times with k drafts for the first row and none for the others, k = 0..k_max, at each batch: what
    ``SlotCost.fit`` needs to tell a slot's own cost from the width it pads every row to. Timed as
    ``serving.measure_step_times`` times them (rewound, the ks taking turns, the fastest of ``repeats`` rounds after
    ``settle``), with no envelope: a row's own k is all that differs."""
    seconds = serving.fastest_steps(worker, handoffs, batches, k_max, warmup, repeats, False, clock, settle,
                                    rows_k=lambda k, b: [k] + [0] * (b - 1))
    return StepTimes(tuple(batches), tuple(map(tuple, seconds.tolist())))


def _line(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) == 1:
        return ys[0]
    i = min(max(int(np.searchsorted(xs, x)) - 1, 0), len(xs) - 2)
    return max(ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i]), 0.0)


@dataclass
class Estimates:
    """Per-request conditional acceptance by draft position: (strength·prior_i + accepted_i) / (strength +
    reached_i), where reached_i counts the request's drafts checked at position i. ``prior``: one rate a
    position (the pooled measurement); ``strength``: how many drafts the prior weighs; ``decay``: each step, the
    counts so far are multiplied by it (an exponential moving window, as vLLM's and SGLang's estimators keep), so
    a request the budget stopped drafting for drifts back to the prior and is tried again. The counts live in one
    array, a row a request (row 0: none yet), so that a step's update and a batch's rates are a few array
    operations: the policy pays for them every step."""

    prior: list[float]
    strength: float = 4.0
    decay: float = 1.0
    rows: dict[int, int] = field(default_factory=dict)  # request id -> its row of ``counts``
    counts: np.ndarray = field(init=False, repr=False)  # [requests + 1, 2, positions]: reached, accepted

    def __post_init__(self):
        self.prior = [validate.probability(f"prior[{i}]", a) for i, a in enumerate(self.prior)]
        if not self.prior:
            raise validate.BadArgument("prior must give a rate for at least one draft position")
        self.strength = validate.number("strength", self.strength, low=0, low_open=True)
        self.decay = validate.number("decay", self.decay, low=0, low_open=True, high=1)
        self.counts = np.zeros((1, 2, len(self.prior)))
        self._weighted_prior = self.strength * np.array(self.prior)

    def rates(self, request_id: int) -> list[float]:
        return self.matrix([request_id])[0].tolist()

    def matrix(self, request_ids: Sequence[int]) -> np.ndarray:
        """[len(request_ids), positions]: each request's rates, one row each."""
        c = self.counts[[self.rows.get(r, 0) for r in request_ids]]
        return (self._weighted_prior + c[:, 1]) / (self.strength + c[:, 0])

    def observe(self, rows: Sequence[tuple[int, int, int]]):
        """(request id, drafts verified, drafts accepted) per row of a step: positions 1..accepted passed, and
        position accepted + 1, if verified, was checked and failed."""
        if self.decay != 1:
            self.counts[1:] *= self.decay
        if not rows:
            return
        new = [rid for rid, _, _ in rows if rid not in self.rows]
        if new:
            for rid in dict.fromkeys(new):
                self.rows[rid] = len(self.rows) + 1
            self.counts = np.concatenate([self.counts, np.zeros((len(self.rows) + 1 - len(self.counts),
                                                                 *self.counts.shape[1:]))])
        at, verified, accepted = np.array([(self.rows[rid], v, a) for rid, v, a in rows]).T
        position = np.arange(len(self.prior))
        reached = position < np.minimum(verified, accepted + 1)[:, None]
        np.add.at(self.counts, (at, 0), reached)  # add.at: a request may appear twice (pooled_rates' one id)
        np.add.at(self.counts, (at, 1), position < accepted[:, None])


class Budget:
    """Verification on a budget, as a serving policy (see the module docstring). ``cost``: the profiled T(B, S);
    ``prior``: pooled per-position acceptance; ``k_max``: the longest draft a request may get; ``decay``: the
    estimates' forgetting a step (0.99: a window of about 100 steps). At 0.9 a request the drafter cannot guess is
    tried again every few steps, and each try is a wasted draft and verify pass."""

    def __init__(self, slot_cost: SlotCost, prior: Sequence[float], k_max: int, strength: float = 4.0,
                 decay: float = 0.99, label: str = "budget (survival-scored slots)"):
        self.cost = slot_cost
        self.k_max = validate.integer("k_max", k_max, low=1, high=len(prior))
        self.prior, self.strength, self.decay, self.label = list(prior), strength, decay, label
        self.reset()

    def reset(self):
        self.estimates = Estimates(self.prior[: self.k_max], self.strength, self.decay)

    @property
    def name(self) -> str:
        return self.label

    def __call__(self, batch: int) -> int:  # a policy that needs the rows answers slots(); this is its fallback
        return self.k_max

    def slots(self, worker) -> list[int]:
        """One k per running row. Every slot sorted by survival (ties to the earlier position, so each row's slots
        stay a prefix); for each width W, the top S slots at positions up to W, for every S: B + their sum tokens,
        in the time ``SlotCost.prices`` gives S slots at the widest row they reach (``cost.budget_slots`` is this
        rule for one W, written out). The best tokens per second of them all, and of plain decoding."""
        B, top = worker.n, min(self.k_max, worker.k_max)
        scores = np.cumprod(self.estimates.matrix(worker.request_ids[:B])[:, :top], axis=1).T.ravel()
        order = np.argsort(-scores, kind="stable")  # position-major: slot j is row j % B, position j // B + 1
        position = order // B + 1
        within = position <= np.arange(1, top + 1)[:, None]  # [W, slot]: the slot counts at width W
        # column 0 of each width is plain decoding (no slot), so one pricing covers it, and a tie goes to it
        counted = np.concatenate([np.ones((top, 1), dtype=bool), within], axis=1)
        slots = np.cumsum(counted, axis=1) - 1
        widths = np.maximum.accumulate(np.concatenate([np.ones((top, 1), dtype=int), position * within], axis=1),
                                       axis=1)
        tokens = B + np.cumsum(np.concatenate([[0.0], scores[order]]) * counted, axis=1)
        rate = np.where(counted, tokens / self.cost.prices(B, slots, widths), -np.inf)
        w, j = divmod(int(np.argmax(rate)), rate.shape[1])
        return np.bincount(order[:j][within[w, :j]] % B, minlength=B).tolist()

    def observe(self, result):
        self.estimates.observe(result.rows)


class SpoiledDrafter(ParallelDrafter):
    """A parallel drafter whose drafts for the requests in ``spoil`` (request id -> rate) are replaced, each with
    probability ``rate``, by ``token`` (one the target never writes: NUL in Austen). Which drafts are spoiled
    depends only on the request and the draft's place in its text (a seeded draw), so every policy, and every
    repeat, sees the same spoiled positions. A spoiled draft is a deterministic proposal and is reported as one
    (q one-hot at ``token``), so the sampler stays exact at any temperature."""

    def __init__(self, model, spoil: dict[int, float] | None = None, token: int = 0):
        super().__init__(model)
        self.spoil = {int(r): validate.probability("spoil rate", a) for r, a in (spoil or {}).items()}
        self.token = validate.integer("token", token, low=0, high=model.config.vocab_size - 2)
        self.rows: list[int | None] = []

    def propose(self, k, temperature, generator=None, ks=None):
        start = (self.cache.lengths + self.pending_len).tolist()  # where each row's first draft lands
        drafts, probs = super().propose(k, temperature, generator, ks)
        rows = list(self.rows[: len(drafts)]) + [None] * (len(drafts) - len(self.rows[: len(drafts)]))
        rate = torch.tensor([self.spoil.get(r, 0.0) if r is not None else 0.0 for r in rows])
        if not bool((rate > 0).any()):
            return drafts, probs
        u = torch.stack([torch.rand(k, generator=torch.Generator().manual_seed(1_000_003 * (r or 0) + at))
                         for r, at in zip(rows, start, strict=True)])
        hit = (u < rate[:, None]).to(drafts.device)
        spike = torch.nn.functional.one_hot(torch.full_like(drafts, self.token), probs.shape[-1]).to(probs.dtype)
        return torch.where(hit, self.token, drafts), torch.where(hit[..., None], spike, probs)


# ---------------------------------------------------------------------------------------------- the comparison


def pooled_rates(rows: Sequence[tuple[int, int, int]], k_max: int) -> list[float]:
    """Conditional acceptance by position over every request together, from steps' ``rows`` (request id, drafts
    verified, accepted): what a calibration run tells the budget's prior and Chapter 8's α. A position no draft
    reached gets the last rate that was measured (0.5 if none was)."""
    est = Estimates([0.5] * validate.integer("k_max", k_max, low=1), strength=1e-9)
    est.observe([(0, verified, accepted) for _, verified, accepted in rows])
    reached, passed = est.counts[est.rows.get(0, 0)]
    rates, last = [], 0.5
    for n, a in zip(reached, passed, strict=True):
        last = a / n if n else last
        rates.append(float(last))
    return rates


def calibrate(worker, handoffs, k: int, steps: int = 4) -> list[tuple[int, int, int]]:
    """Run the handoffs (all at once: at most ``worker.slots``) for ``steps`` steps of k drafts a request and return
    every step's rows: the acceptance a policy may know before the run (the budget's prior, Chapter 8's pooled α)."""
    worker.reset()
    for h in handoffs:
        worker.admit(h)
    rows: list[tuple[int, int, int]] = []
    for _ in range(validate.integer("steps", steps, low=1)):
        rows.extend(worker.step(k).rows)
    worker.reset()
    return rows


@dataclass
class Comparison:
    """What ``compare`` measured: ``steps[policy][B]``, one list of step seconds per repeat; ``tokens[policy][B]``,
    the tokens each step delivered (the same in every repeat: the work is deterministic at temperature 0);
    ``slots_per_token``, the draft slots a policy verified per token it delivered; ``outputs``, what each policy
    wrote for each request at each B (its last repeat); ``bookkeeping[policy][B]``, like ``steps``, the seconds of
    each step spent outside the worker's step: the policy's choice of k and its ``observe``."""

    batches: list[int]
    steps: dict[str, dict[int, list[list[float]]]]
    tokens: dict[str, dict[int, list[int]]]
    slots_per_token: dict[str, dict[int, float]]
    outputs: dict[int, dict[str, dict[int, list[int]]]] = field(default_factory=dict)  # B -> policy -> id -> tokens
    bookkeeping: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)

    def bookkeeping_share(self, policy: str, batch: int) -> float:
        """The share of the policy's step time, over every repeat at ``batch``, spent choosing k and observing: what
        the choice cost as it ran, between the worker's steps (a loop of choices alone runs with warm caches)."""
        total = sum(map(sum, self.steps[policy][batch]))
        return sum(map(sum, self.bookkeeping[policy][batch])) / total

    def runs(self, policy: str, batch: int) -> list[float]:
        """Tokens per second of each repeat."""
        total = sum(self.tokens[policy][batch])
        return [total / sum(r) for r in self.steps[policy][batch]]

    def fastest(self, policy: str, batch: int) -> float:
        """Tokens per second with every step at its fastest over the repeats (Chapter 8's ``serving.fastest``):
        each step did the same work in every repeat, and contention on a shared machine only adds time."""
        per_step = [min(ts) for ts in zip(*self.steps[policy][batch], strict=True)]
        return sum(self.tokens[policy][batch]) / sum(per_step)

    def median(self, policy: str, batch: int) -> float:
        return float(np.median(self.runs(policy, batch)))

    def spread(self, policy: str, batch: int) -> tuple[float, float]:
        """(lowest, highest) tokens/s over the repeats."""
        r = self.runs(policy, batch)
        return float(min(r)), float(max(r))

    def best_of(self, names: Sequence[str], batch: int) -> str:
        """The policy among ``names`` with the highest fastest-of tokens/s at ``batch``."""
        return max(names, key=lambda n: self.fastest(n, batch))

    def disagreements(self) -> list[tuple[int, int]]:
        """(B, request id) wherever two policies wrote different tokens for a request (over the tokens both wrote):
        at temperature 0 every policy must write the target's greedy text, so on a correct worker this is empty."""
        out = []
        for b, by_policy in self.outputs.items():
            runs = list(by_policy.values())
            for rid in runs[0]:
                seqs = [r[rid] for r in runs]
                n = min(len(x) for x in seqs)
                if any(x[:n] != seqs[0][:n] for x in seqs):
                    out.append((b, rid))
        return out


def compare(workers: Sequence, handoffs: Sequence, batches: Sequence[int], policies: Sequence, steps: int = 8,
            repeats: int = 3, warmup: int = 1, progress: bool = True, clock=time.perf_counter) -> Comparison:
    """Every policy at a steady batch of B, for each B in ``batches``: each policy's worker admits the first B
    handoffs (every one with more than ``(warmup + steps)·(k_max + 1)`` tokens to go, so none finishes), runs
    ``warmup`` untimed steps and then ``steps`` timed ones, each timed with the policy's choice of k and its
    ``observe``; the policies take turns step by step, so a burst of load on a shared machine slows them alike.
    ``repeats`` times from scratch at each B; a policy with ``reset`` forgets what it learnt before each run. A
    repeat that did other work than the first (sampling at temperature > 0) is a ``BadArgument``: the fastest-of
    estimate needs the same steps."""
    from tqdm.auto import tqdm

    batches = validate.integers("batches", batches, low=1, high=min(min(w.slots for w in workers), len(handoffs)))
    steps, repeats = validate.integer("steps", steps, low=1), validate.integer("repeats", repeats, low=1)
    warmup = validate.integer("warmup", warmup, low=0)
    need = (warmup + steps) * (max(w.k_max for w in workers) + 1)
    if any(h.max_new_tokens <= need for h in handoffs[: max(batches)]):
        raise validate.BadArgument(f"every handoff needs max_new_tokens > (warmup + steps)·(k_max + 1) = {need}: no "
                                   "request may finish during a run")
    names = [p.name for p in policies]
    times = {n: {b: [] for b in batches} for n in names}
    kept = {n: {b: [] for b in batches} for n in names}
    delivered = {n: {b: [] for b in batches} for n in names}
    verified = {n: {b: 0 for b in batches} for n in names}
    outputs: dict = {}
    for b in tqdm(batches, desc="policies at each B", disable=not progress):
        for _ in range(repeats):
            seconds, tokens, books = [[] for _ in policies], [[] for _ in policies], [[] for _ in policies]
            for w, p in zip(workers, policies, strict=True):
                w.reset()
                for h in handoffs[:b]:
                    w.admit(h)
                if hasattr(p, "reset"):
                    p.reset()
            for step in range(warmup + steps):
                for i, (w, p) in enumerate(zip(workers, policies, strict=True)):
                    slots = getattr(p, "slots", None)
                    t0 = clock()  # the policy's choice and its bookkeeping are part of the step
                    k = slots(w) if slots else min(p(w.n), w.k_max)
                    t1 = clock()
                    result = w.step(k)
                    t2 = clock()
                    if hasattr(p, "observe"):
                        p.observe(result)
                    t3 = clock()
                    if step >= warmup:
                        seconds[i].append(t3 - t0)
                        books[i].append((t1 - t0) + (t3 - t2))
                        tokens[i].append(result.tokens)
                        verified[names[i]][b] += result.slots
            for i, n in enumerate(names):
                if delivered[n][b] and delivered[n][b] != tokens[i]:
                    raise validate.BadArgument(f"{n} did other work in a repeat at B = {b} (sampling at temperature "
                                               "> 0?): the repeats cannot be combined step by step")
                delivered[n][b] = tokens[i]
                times[n][b].append(seconds[i])
                kept[n][b].append(books[i])
            outputs[b] = {n: {w.request_ids[r]: w.new_tokens(r).tolist() for r in range(w.n)}
                          for n, w in zip(names, workers, strict=True)}
    for w in workers:
        w.reset()
    slots_per_token = {n: {b: verified[n][b] / (repeats * sum(delivered[n][b])) for b in batches} for n in names}
    return Comparison(list(batches), times, delivered, slots_per_token, outputs, kept)
