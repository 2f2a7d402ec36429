"""What the words of a chosen sentence claim, as predicates over the numbers it was chosen on; and the inputs that
probe them. ``tests/registry.py`` holds one :class:`Chooser` per chooser; ``tests/test_choosers.py`` walks the
package for choosers and runs every registered one under hypothesis.

A claim is a phrase (a regular expression, searched in the sentence) and a predicate over the chooser's arguments
``a`` (attributes: ``a.speedups``) and the sentence ``t``: wherever the phrase is said, the predicate must hold.
Write predicates with the words below, so that a claim reads as its phrase does:

    r"S fell from": lambda a, t: fell(a.speedups[0], a.speedups[-1]) and printed_fell(t, r"from (\\S+) .* to (\\S+)")

Inputs: :func:`near` gives floats at a threshold, a hair either side of it and either side of where its printed
value rounds, then anything in a range; build a chooser's arguments from it with ``st.fixed_dictionaries``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

HAIR = 1e-5  # "just": a relative step either side of a threshold that 6 printed decimals still show (from 0.1 up)


@dataclass(frozen=True)
class Chooser:
    """A chooser's entry: ``args`` (a strategy of keyword-argument dicts), ``claims`` (phrase -> predicate over
    the arguments and the sentence; every phrase must be said on some generated input), ``text`` (the sentence
    from what the chooser returns: a str as it is, a Verdict's ``.sentence``...), ``call`` (how to call it, when not
    ``f(**args)``), ``probes`` (arguments always tried first: a review's probes, a recorded chapter's numbers) and
    ``max_examples`` (fewer inputs than the profile's, for a chooser that takes more than a millisecond)."""

    args: st.SearchStrategy
    claims: dict[str, Callable]
    text: Callable = field(default=lambda out: out)
    call: Callable | None = None
    probes: tuple[dict, ...] = ()
    max_examples: int | None = None


# ---------------------------------------------------------------------------------------------- inputs


def near(*points: float, lo: float = 0.0, hi: float = 10.0, digits: int = 2, pct: bool = False) -> st.SearchStrategy:
    """Floats at each of ``points``, a hair either side, either side of the nearest values that print with
    ``digits`` decimals (as a percentage with ``pct``) the same as the point, and anything in [lo, hi]."""
    values = []
    for p in points:
        step = 10.0 ** -digits / (100 if pct else 1)
        values += [p, p * (1 - HAIR), p * (1 + HAIR), p - step / 2, p + step / 2, p - step / 2 * (1 - 1e-3),
                   p + step / 2 * (1 - 1e-3)]
    values = sorted({v for v in values if lo <= v <= hi})
    return st.one_of(st.sampled_from(values), st.floats(lo, hi, allow_nan=False)) if values else \
        st.floats(lo, hi, allow_nan=False)


def series(element: st.SearchStrategy, min_size: int = 2, max_size: int = 6) -> st.SearchStrategy:
    """A list of ``element`` values."""
    return st.lists(element, min_size=min_size, max_size=max_size)


def batches(min_size: int = 2, max_size: int = 6) -> st.SearchStrategy:
    """Increasing batch sizes (powers of two from 1, as the sweeps take them, or any increasing integers)."""
    return st.integers(min_size, max_size).flatmap(lambda n: st.one_of(
        st.just([2**i for i in range(n)]),
        st.lists(st.integers(1, 4096), min_size=n, max_size=n, unique=True).map(sorted)))


def with_batches(values: st.SearchStrategy, *names: str, min_size: int = 2, **fixed) -> st.SearchStrategy:
    """Arguments {"batches": [...], name: [values at each batch], ...} for series choosers."""
    return batches(min_size).flatmap(lambda b: st.fixed_dictionaries(
        {"batches": st.just(b), **{n: st.lists(values, min_size=len(b), max_size=len(b)) for n in names},
         **fixed}))


# ---------------------------------------------------------------------------------------------- claims


def fell(first: float, last: float) -> bool:
    return last < first


def rose(first: float, last: float) -> bool:
    return last > first


def within(x: float, y: float, tol: float) -> bool:
    """x is within ``tol`` (a fraction) of y: |x/y − 1| ≤ tol."""
    return abs(x / y - 1) <= tol * (1 + 1e-12)


def never_above(values: Sequence[float], bound: float) -> bool:
    return max(values) <= bound


def same_direction(a0: float, a1: float, b0: float, b1: float) -> bool:
    """"as the model predicts": the two moved the same way."""
    return (a1 > a0) == (b1 > b0) and (a1 < a0) == (b1 < b0)


def number(text: str) -> float:
    """A printed number ("1.04", "12%", "1,024", "2.3×") as a float (a percentage as a fraction)."""
    value = float(text.replace(",", "").rstrip("×x%").replace("−", "-"))
    return value / 100 if text.endswith("%") else value


def printed(text: str, pattern: str) -> list[float]:
    """The numbers the groups of ``pattern`` match in ``text`` (the first match), as printed."""
    m = re.search(pattern, text)
    if not m:
        raise AssertionError(f"{pattern!r} not in {text!r}")
    return [number(g) for g in m.groups()]


def printed_raw(text: str, pattern: str) -> str:
    """The text of the first group ``pattern`` matches in ``text``, as printed."""
    m = re.search(pattern, text)
    if not m:
        raise AssertionError(f"{pattern!r} not in {text!r}")
    return m.group(1)


def printed_order(text: str, pattern: str, holds: Callable[[float, float], bool]) -> bool:
    """The two numbers ``pattern`` matches, as printed, are in the order the words say (``holds(first, second)``)."""
    a, b = printed(text, pattern)
    return holds(a, b)


def prints(text: str, value: float) -> bool:
    """``text`` (a printed number) is ``value`` rounded to the decimals ``text`` shows."""
    body = text.replace(",", "").rstrip("×x")
    pct = body.endswith("%")
    body = body.rstrip("%")
    decimals = len(body.partition(".")[2])
    return (f"{value:.{decimals}%}" if pct else f"{value:.{decimals}f}") == text.replace(",", "").rstrip("×x")


def all_of(*claims: Callable) -> Callable:
    """One predicate that holds when every one of ``claims`` does."""
    return lambda a, t: all(c(a, t) for c in claims)


NUM = r"(-?[\d,]*\.?\d+[%×]?)"  # a printed number, for the patterns of the claims


def isclose(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
