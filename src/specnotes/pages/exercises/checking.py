"""Checking a reader's answer against a problem's: "right", the hint of a listed mistake, or a generic diagnosis
(units, a factor of 2, the reciprocal, off by one) (``check``, ``check_all``, ``Verdict``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specnotes import validate
from specnotes.pages.exercises.registry import Problem, problem


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
