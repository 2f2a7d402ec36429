"""Chapter 11's sentences, each chosen from the numbers measured: E[N] predicted per position against measured on
held-out prompts (``describe_position_fit``), a rate that changes with depth, temperature or place in the text
(``describe_change``), the budget against every one-k-a-step policy at each batch (``describe_budget``) and a
suffix drafter's host time against the step it waits on (``describe_host_cost``)."""

from __future__ import annotations

from collections.abc import Sequence

from specnotes import validate
from specnotes.measure.checks.acceptance import Estimate, Z, order
from specnotes.measure.checks.tolerances import NOISE
from specnotes.measure.checks.verdicts import Verdict
from specnotes.measure.checks.wording import apart

CLOSE = 0.03  # issue 46's goal: E[N] from per-position α within 3% of the measured E[N]


def describe_position_fit(ks: Sequence[int], measured: Sequence[float], per_position: Sequence[float],
                          iid: Sequence[float], *, close: float = CLOSE) -> Verdict:
    """E[N] measured at each k on held-out prompts against what the rates measured on other prompts predict per
    position and as one i.i.d. α. Holds where the per-position prediction is within ``close`` at every k; the
    sentence gives the worst error of each model and where the i.i.d. one is worst (errors printed, and decided, to
    two decimals of a percent)."""
    n = len(ks)
    if not n or not (len(measured) == len(per_position) == len(iid) == n):
        raise validate.BadArgument("ks, measured, per_position and iid must have the same non-zero length")
    close = validate.number("close", close, low=0, low_open=True)
    err = lambda pred, i: validate.number(f"predicted[{i}]", pred, low=0) / validate.number(
        f"measured[{i}]", measured[i], low=0, low_open=True) - 1
    pos = [err(p, i) for i, p in enumerate(per_position)]
    flat = [err(p, i) for i, p in enumerate(iid)]
    worst_pos = max(range(n), key=lambda i: abs(pos[i]))
    worst_iid = max(range(n), key=lambda i: abs(flat[i]))
    shown_pos = f"{100 * abs(pos[worst_pos]):.2f}"
    ok = float(shown_pos) <= 100 * close  # decided as printed: "within 3.00%" is within 3%
    head = (f"On the held-out prompts, E[N] from the per-position rates is within {shown_pos}% of the measured E[N] "
            f"at every k" if ok else
            f"On the held-out prompts, E[N] from the per-position rates misses the measured E[N] by {shown_pos}% at "
            f"k = {ks[worst_pos]}, more than {close:.0%}")
    head += "."
    way = "too many" if flat[worst_iid] > 0 else "too few"
    tail = (f" One i.i.d. α misses it by up to {100 * abs(flat[worst_iid]):.1f}% (at k = {ks[worst_iid]}: "
            f"{iid[worst_iid]:.2f} tokens, {way}, against {measured[worst_iid]:.2f} measured).")
    if f"{100 * abs(flat[worst_iid]):.1f}" == "0.0":
        tail = " One i.i.d. α predicts it as well, to within 0.05% at every k."
    return Verdict(f"E[N] from per-position α within {close:.0%} of the measured E[N]", ok, True, head + tail,
                   {"worst per-position error": pos[worst_pos], "worst i.i.d. error": flat[worst_iid]})


def describe_change(what: str, labels: Sequence[str], rates: Sequence[Estimate], *, z: float = Z) -> str:
    """How a rate moved from its first setting to its last (``labels``: "at temperature 0", "after 64 tokens",
    ...): "fell" or "rose" beyond ``z`` combined standard errors, else "stayed within sampling noise"."""
    if len(labels) != len(rates) or len(rates) < 2:
        raise validate.BadArgument("labels and rates must have the same length, at least 2")
    first, last = rates[0], rates[-1]
    a, b = apart(first.mean, last.mean)
    side = order(last, first, z=z)
    if side == 0:
        return f"{what} stayed within sampling noise, {a} {labels[0]} and {b} {labels[-1]}."
    return f"{what} {'rose' if side > 0 else 'fell'} from {a} {labels[0]} to {b} {labels[-1]}."


def describe_budget(batches: Sequence[int], budget: Sequence[float], best: Sequence[float], best_names: Sequence[str],
                    plain_best: int | None, *, tolerance: float = NOISE) -> Verdict:
    """The budget against the best one-k-a-step policy at each B: ``budget`` and ``best`` are tokens/s (each step at
    its fastest over the repeats), ``best_names`` which policy was best at each B, ``plain_best`` the first B from
    which plain decoding was the best fixed k (where uniform speculation stopped paying; None: it never was).

    At a B the budget is *behind* below (1 − ``tolerance``) times the best, *ahead* above (1 + ``tolerance``) times
    it, else *level*: ``tolerance`` is what the noise of a shared machine can do. Holds when it is behind nowhere
    and ahead somewhere."""
    n = len(batches)
    if not n or not (len(budget) == len(best) == len(best_names) == n):
        raise validate.BadArgument("batches, budget, best and best_names must have the same non-zero length")
    tolerance = validate.number("tolerance", tolerance, low=0, high=1, high_open=True)
    for name, values in (("budget", budget), ("best", best)):
        for i, v in enumerate(values):
            validate.number(f"{name}[{i}] (tokens/s)", v, low=0, low_open=True)
    gain = [b / f - 1 for b, f in zip(budget, best, strict=True)]
    behind = [i for i in range(n) if gain[i] < -tolerance]
    ahead = [i for i in range(n) if gain[i] > tolerance]
    top = max(range(n), key=lambda i: gain[i])
    def listed(idx):
        names = [str(batches[i]) for i in idx]
        return "B = " + (names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}")

    if behind:
        worst = min(behind, key=lambda i: gain[i])
        head = (f"The budget fell behind the best one-k policy by more than {tolerance:.0%} at {listed(behind)}. At "
                f"B = {batches[worst]} it made {budget[worst]:.0f} tokens/s against {best[worst]:.0f} for "
                f"{best_names[worst]}")
    elif ahead:
        head = (f"The budget matched the best one-k policy within {tolerance:.0%} at every B, and beat it by more at "
                f"{listed(ahead)}")
    else:
        head = f"The budget was level with the best one-k policy at every B, within {tolerance:.0%}"
    if gain[top] > 0:
        near = "" if plain_best is None else f"; plain decoding was the best fixed k from B = {plain_best}"
        head += f". It gained most at B = {batches[top]}: {100 * gain[top]:.1f}% over {best_names[top]}{near}."
    else:
        head += f". It was nowhere faster than the best one (closest at B = {batches[top]})."
    return Verdict("the budget at least the best one-k policy at every B, above all of them somewhere",
                   not behind and bool(ahead), True, head, {"largest gain": gain[top], "at B": batches[top]})


def describe_host_cost(per_sequence_s: float, batch: int, step_s: float) -> str:
    """A suffix drafter's host time at ``batch`` sequences (``per_sequence_s`` each) against the plain decode step
    it would wait on there (``step_s``): the share, and "more than the step itself" where it is."""
    per_sequence_s = validate.number("per_sequence_s", per_sequence_s, low=0)
    batch = validate.integer("batch", batch, low=1)
    step_s = validate.number("step_s", step_s, low=0, low_open=True)
    host = per_sequence_s * batch
    said = (f"The lookups cost {1e6 * per_sequence_s:.0f} µs a sequence: at B = {batch}, {1e3 * host:.2f} ms a step "
            f"against {1e3 * step_s:.2f} ms for the target's plain step")
    if host > step_s:
        return f"{said}, more than the step itself: the host, not the GPU, would set the pace."
    return f"{said}, {host / step_s:.0%} of it."
