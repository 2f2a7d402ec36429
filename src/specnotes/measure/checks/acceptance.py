"""Acceptance measured: a mean with its standard error (:class:`Estimate`), two estimates ordered beyond ``Z``
standard errors (:func:`order`), and the sentences Chapters 3 and 7 choose from them: measured E[N] against the
i.i.d. and the tree formulas, α from generation against scoring and against the published range, and where in a
word the models agree (:class:`PlaceStory`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specnotes import validate
from specnotes.measure.checks.wording import apart


def describe_formula_gap(gaps: dict, *, close: float = 0.15) -> str:
    """How far measured E[N] sits from the i.i.d. formula's at each temperature (``gaps``: temperature ->
    measured / formula - 1). "Close" claims every gap is under ``close``; "misses" that one is ``close`` or more.
    Each gap is printed with the digits it takes to tell it from ``close``."""
    if not gaps:
        raise validate.BadArgument("gaps must hold at least one temperature")
    close = validate.number("close", close, low=0, low_open=True)
    parts = [f"{apart(100 * abs(validate.number(f'gaps[{t}]', g)), 100 * close, 1)[0]}% at temperature {t:g}"
             for t, g in gaps.items()]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    if all(abs(g) < close for g in gaps.values()):
        return f"On average the i.i.d. formula is close: measured E[N] differs from it by {listed}."
    return (f"The i.i.d. formula misses the mean here: measured E[N] differs from it by {listed}, {close:.0%} or "
            f"more somewhere, so acceptance on this text is far from independent draws at one α.")


def describe_tree_formula(measured: dict, formula: dict, *, chain: str, close: float = 0.15) -> str:
    """Chapter 7: tokens per iteration that tree decoding measured against the positional-acceptance formula
    (``measured``, ``formula``: tree name -> E[N]), and whether every wider tree beat the ``chain``. Within
    ``close`` of every tree the formula predicts them; past it, it misses. A finding either way."""
    if not measured or set(measured) != set(formula) or chain not in measured:
        raise validate.BadArgument(f"measured and formula must name the same trees, the chain {chain!r} among them")
    close = validate.number("close", close, low=0, low_open=True)
    gaps = {name: validate.number(f"measured[{name!r}]", measured[name], low=0, low_open=True)
            / validate.number(f"formula[{name!r}]", formula[name], low=0, low_open=True) - 1 for name in measured}
    worst = max(gaps, key=lambda name: abs(gaps[name]))
    gap = apart(100 * abs(gaps[worst]), 100 * close, 1)[0]
    if abs(gaps[worst]) < close:
        said = f"The formula predicts every tree's tokens per iteration to within {gap}% of what tree decoding measured"
    else:
        said = (f"The formula misses what tree decoding measured by up to {gap}% (the {worst}: "
                f"{measured[worst]:.2f} tokens per iteration against {formula[worst]:.2f}), {close:.0%} or more: "
                "on this text whether a child is accepted depends on more than its rank")
    lost = [name for name in measured if name != chain and not measured[name] > measured[chain]]
    if not lost:
        return f"{said}, and every wider tree yielded more than the {chain}."
    return f"{said}; the {' and the '.join(lost)} yielded no more than the {chain} ({measured[chain]:.2f})."


Z = 3.0  # standard errors apart before two estimates count as different (positions are correlated)


@dataclass(frozen=True)
class Estimate:
    """A measured mean and its standard error."""

    mean: float
    error: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The sample mean of ``values`` and its standard error, s / sqrt(n)."""
        values = [validate.number(f"values[{i}]", v) for i, v in enumerate(values)]
        if len(values) < 2:
            raise validate.BadArgument(f"an estimate needs at least 2 values, got {len(values)}")
        mean = math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return cls(mean, math.sqrt(var / len(values)))

    @classmethod
    def rate(cls, successes: int, trials: int) -> Estimate:
        """A binomial rate: successes / trials, standard error sqrt(p(1 - p) / trials)."""
        trials = validate.integer("trials", trials, low=1)
        successes = validate.integer("successes", successes, low=0, high=trials)
        p = successes / trials
        return cls(p, math.sqrt(p * (1 - p) / trials))


def order(a: Estimate, b: Estimate, *, z: float = Z) -> int:
    """+1 if ``a`` is above ``b`` by more than ``z`` combined standard errors, -1 if below, 0 if within."""
    z = validate.number("z", z, low=0)
    gap = a.mean - b.mean
    if abs(gap) <= z * math.hypot(a.error, b.error):
        return 0
    return 1 if gap > 0 else -1


def describe_alpha_sources(temperatures: Sequence[float], generated: Sequence[Estimate], scored: Sequence[Estimate],
                           *, z: float = Z) -> str:
    """α from speculative generation (the models' own text) next to α from scoring held-out text, at each
    temperature: which was higher, or that they agree within sampling noise."""
    if not (len(temperatures) == len(generated) == len(scored)) or not temperatures:
        raise validate.BadArgument("temperatures, generated and scored must have the same non-zero length")
    signs = [order(g, s, z=z) for g, s in zip(generated, scored, strict=True)]
    values = " and ".join(f"{s.mean:.2f}" for s in scored)
    text = {1: "generated text, the models' own, was easier to agree on than held-out text",
            -1: "held-out text was easier to agree on than the generated text",
            0: "the two estimates agree within sampling noise"}
    if len(set(signs)) == 1:
        both = " at both temperatures" if len(signs) == 2 else ""
        return f"scoring held-out text: {values}; {text[signs[0]]}{both}"
    parts = "; ".join(f"at temperature {t:g} {text[sign]}" for t, sign in zip(temperatures, signs, strict=True))
    return f"scoring held-out text: {values}; {parts}"


def describe_against_range(alpha: Estimate, low: float, high: float, *, z: float = Z) -> str:
    """Where a measured α sits against a published range of model drafts' α (``low`` to ``high``)."""
    low = validate.number("low", low, low=0, high=1)
    high = validate.number("high", high, low=low, high=1)
    span = f"{low:.2f} to {high:.2f}"
    bytes_ = "bytes are easier to guess than words (most of a word is predictable once it has started)"
    if alpha.mean - z * alpha.error > high:
        return f"lands above the range of the model drafts ({span}): {bytes_}"
    if alpha.mean + z * alpha.error < low:
        return f"lands below the range of the model drafts ({span})"
    return f"lands in the range of the model drafts ({span}): {bytes_}"


@dataclass(frozen=True)
class PlaceStory:
    """Chapter 3's sentences on where in a word the models agree: at temperature 0, at temperature 1, and
    at word boundaries across temperatures (Problem 3)."""

    t0: str
    t1: str
    boundary: str


def describe_places(inside_t0: Estimate, boundary_t0: Estimate, inside_t1: Estimate, boundary_t1: Estimate, *,
                    z: float = Z) -> PlaceStory:
    """α inside a word and after a space or punctuation, at temperatures 0 and 1; each ordering the
    sentences state holds beyond ``z`` standard errors, or they say the two agree within noise."""
    i0, b0, i1, b1 = inside_t0.mean, boundary_t0.mean, inside_t1.mean, boundary_t1.mean
    at0 = order(inside_t0, boundary_t0, z=z)
    t0 = {1: f"At temperature 0 the models agree on the next byte {i0:.2f} of the time inside a word but only "
             f"{b0:.2f} after a space or punctuation, where the next word has to be chosen.",
          -1: f"At temperature 0 the models agree on the next byte more often after a space or punctuation "
              f"({b0:.2f}) than inside a word ({i0:.2f}).",
          0: f"At temperature 0 the models agree on the next byte about as often inside a word ({i0:.2f}) as after "
             f"a space or punctuation ({b0:.2f}), within sampling noise."}[at0]
    like = "there α measures how alike the two distributions are, not how predictable the text is"
    at1 = order(inside_t1, boundary_t1, z=z)
    if at1 < 0:
        turn = "the order flips" if at0 > 0 else "after a space still leads" if at0 < 0 else "after a space leads"
        t1 = (f"At temperature 1 {turn}: {i1:.2f} inside a word against {b1:.2f} after one. There α measures how "
              f"alike the two distributions are, not how predictable the text is. Two models that are both unsure of "
              f"the next word spread their probability over the same few candidates.")
    elif at1 > 0:
        t1 = f"At temperature 1, where {like}, inside a word leads too ({i1:.2f} against {b1:.2f} after one)."
    else:
        t1 = (f"At temperature 1, where {like}, the two places agree within sampling noise ({i1:.2f} inside a word, "
              f"{b1:.2f} after one).")
    both = f"{b0:.2f} at temperature 0, {b1:.2f} at temperature 1"
    boundary = {1: f"On the shipped pair this is what happens at word boundaries: {both}.",
                0: f"On the shipped pair, at word boundaries the two temperatures agree within sampling noise "
                   f"({both}).",
                -1: f"On the shipped pair it does not happen even at word boundaries ({both}): there the argmax "
                    f"matches lost at temperature 1 outweigh the partial credit."}[order(boundary_t1, boundary_t0, z=z)]
    return PlaceStory(t0, t1, boundary)
