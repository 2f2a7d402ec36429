"""Chapter 11's economics: S(B) when acceptance depends on the draft position, the best k of a block drafter
against B, where a block and a chain stop paying, and verification on a budget.

- ``position_speedup``: S(B) = E[N]·T_target(B, 1) / (T_draft + T_target(B, k + 1)) with E[N] =
  1 + Σ_i Π_{j ≤ i} α_j (``expected_tokens_by_position``): any drafter kind, a ``Block`` included (one pass).
- ``best_position_k``: the k in 0..k_max with the highest S at a batch; ``stops_paying``: the first batch from
  which S ≤ 1 for good (None: it still pays at the limit).
- ``budget_slots``: vLLM's adaptive verification, derived. A step that verifies a set A of (request, position)
  slots, each a prefix of its request's draft, yields B + Σ_(r,i)∈A s_(r,i) tokens in expectation, s the slot's
  survival probability (the bonus token, then every slot that passes). When the step's time depends only on |A|,
  the best A of each size is the |A| highest-scoring slots (a row's scores fall along it, so the top slots are
  prefixes), and the best size S maximizes (B + Σ top-S)/T(S): grow the budget while the next slot's survival
  exceeds tokens-per-second so far times the time it adds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specnotes import validate
from specnotes.analytic.cost.acceptance import _alphas, expected_tokens_by_position, survival
from specnotes.analytic.cost.drafters import Block, Draft
from specnotes.analytic.cost.iteration import tree_speedup
from specnotes.analytic.cost.paying import batch_ranges
from specnotes.analytic.cost.shapes import ModelShape


def _k_range(draft: Draft, alphas: list[float], k_max: int | None) -> int:
    limit = len(alphas) if not isinstance(draft, Block) else min(len(alphas), draft.k_max)
    return limit if k_max is None else validate.integer("k_max", k_max, low=0, high=limit)


def position_speedup(target: ModelShape, draft: Draft, accel, batch: int, alphas, k: int | None = None,
                     context: int = 0, **knobs) -> float:
    """S(B) at k drafts (default: one per α given) whose conditional acceptance is α_i at position i. k = 0
    gives 1. ``knobs``: the time functions' keyword arguments (dtype, overheads, overlap, tp, ...)."""
    alphas = _alphas("alphas", alphas)
    k = len(alphas) if k is None else validate.integer("k", k, low=0, high=len(alphas))
    if k == 0:
        return 1.0
    tokens = expected_tokens_by_position(alphas, k)
    return tree_speedup(target, draft, accel, batch, (1,) * k, k, tokens, context, **knobs)


def best_position_k(target: ModelShape, draft: Draft, accel, batch: int, alphas, k_max: int | None = None,
                    context: int = 0, **knobs) -> int:
    """The k in 0..k_max (default: as many as α's given, and a block's ``k_max``) with the highest S at this
    batch; 0: do not speculate."""
    alphas = _alphas("alphas", alphas)
    top = _k_range(draft, alphas, k_max)
    return max(range(top + 1), key=lambda k: position_speedup(target, draft, accel, batch, alphas, k, context,
                                                                **knobs))


def stops_paying(target: ModelShape, draft: Draft, accel, alphas, k: int | None = None, context: int = 0,
                 limit: int = 4096, **knobs) -> int | None:
    """The first batch from which S ≤ 1 up to ``limit`` (1: it never pays; None: it still pays at ``limit``)."""
    limit = validate.integer("limit", limit, low=1)
    alphas = _alphas("alphas", alphas)
    ranges = batch_ranges(lambda b: position_speedup(target, draft, accel, b, alphas, k, context, **knobs) > 1,
                          limit)
    if not ranges:
        return 1
    return None if ranges[-1][1] >= limit else ranges[-1][1] + 1


def ridge_ratio(k: int, k_other: int) -> float:
    """How many times smaller the batch is at which a verify pass of k + 1 tokens per sequence meets the ridge
    than one of k_other + 1: intensity B(k + 1) reaches the ridge at B = ridge/(k + 1)."""
    k = validate.integer("k", k, low=0)
    k_other = validate.integer("k_other", k_other, low=0)
    return (k + 1) / (k_other + 1)


def budget_slots(survivals: Sequence[Sequence[float]], step_seconds: Callable[[int], float],
                 max_slots: int | None = None) -> tuple[int, list[int]]:
    """Verification on a budget: (S, ks), the number of draft slots to verify and how many of each request's
    drafts they cover, maximizing (B + Σ of the S highest survival probabilities) / step_seconds(S).

    ``survivals[r]``: request r's survival probability at each draft position (not rising along it);
    ``step_seconds(S)``: the step's time when it verifies S draft slots in all (B bonus positions besides),
    positive. ``max_slots``: the most slots to consider (default: every one). Ties between equal scores go
    to the earlier position, so every request's slots stay a prefix of its draft."""
    rows = [_alphas(f"survivals[{r}]", s) for r, s in enumerate(survivals)]
    if not rows:
        raise validate.BadArgument("survivals must hold at least one request")
    for r, s in enumerate(rows):
        if any(b > a for a, b in zip(s, s[1:], strict=False)):
            raise validate.BadArgument(f"survivals[{r}] must not rise along the draft, got {s}")
    slots = sorted(((s, i, r) for r, row in enumerate(rows) for i, s in enumerate(row)), key=lambda x: (-x[0], x[1]))
    top = len(slots) if max_slots is None else validate.integer("max_slots", max_slots, low=0, high=len(slots))
    best, best_rate, gained = 0, None, float(len(rows))
    for n in range(top + 1):
        if n:
            gained += slots[n - 1][0]
        t = validate.number(f"step_seconds({n})", step_seconds(n), low=0, low_open=True)
        if best_rate is None or gained / t > best_rate:
            best, best_rate = n, gained / t
    ks = [0] * len(rows)
    for _, i, r in slots[:best]:
        ks[r] = max(ks[r], i + 1)
    return best, ks


def survival_rows(alphas_by_request: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each request's survival probabilities from its conditional rates (``survival``)."""
    return [survival(a) for a in alphas_by_request]


def describe_stops(first: int | None, second: int | None, limit: int, names: tuple[str, str]) -> str:
    """Where two drafters stop paying on the model (``stops_paying``: the first batch with S ≤ 1 for good; None:
    it still pays at ``limit``), and which stops first."""
    limit = validate.integer("limit", limit, low=1)
    a, b = names
    for name, at in ((a, first), (b, second)):
        if at is not None:
            validate.integer(f"where {name} stops paying", at, low=1, high=limit)
    said = lambda name, at: (f"{name} still pays at B = {limit}" if at is None else
                             f"{name} never pays" if at == 1 else f"{name} stops paying at B = {at}")
    both = f"{said(a, first)} and {said(b, second)}"
    if first == second:
        return f"On the model {both}: neither stops first." if first is not None else f"On the model {both}."
    if second is None or (first is not None and first < second):
        return f"On the model {both}: {a} stops first."
    return f"On the model {both}: {b} stops first."
