"""The most a measured speedup can be (``ceiling``), and the rule that flags a measurement above it as noise
(``above_ceiling``, ``within_ceiling``).

The rule. A chain of k drafts at acceptance α yields E[N](α, k) tokens an iteration, and

    S = E[N] · T_dec / (T_draft + T_verify).

A verify pass over k + 1 tokens reads every weight and the KV cache a plain step reads, so it costs at least a
plain step: T_verify ≥ T_dec. Drafting costs at least ``draft_steps`` plain steps (0 for a drafter that is free,
the loosest case; k + 1 when the draft is the target itself and also re-scores the verified batch, as
llama-server's is in Chapter 8). So on any machine

    S ≤ ceiling = E[N](α, k) / (1 + draft_steps).

A measured S is a ratio of two measured times, each of which another process can slow. The fastest samples of one
pass differ by up to ``NOISE`` (10%) on a busy 2-core machine, so a ratio may sit up to that much above a true S
that is at its ceiling. The allowance is that 10%, once: a measurement above ceiling × (1 + NOISE) (to 6 decimals,
so that a sentence can print the two apart) is impossible for the k and α it was measured at. It is flagged as noise
(load slowed the plain run, most often) and left out of the sentences a chapter says about S. One at most 10% above
is kept: noise can put an S just under the ceiling there. α is the one the S was computed with; where α is an
estimate, pass its upper edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic import cost
from specnotes.measure.checks.tolerances import NOISE
from specnotes.measure.checks.verdicts import Verdict
from specnotes.measure.checks.wording import apart


def ceiling(alpha: float, k: int, draft_steps: float = 0.0) -> float:
    """The most S a chain of ``k`` drafts at acceptance ``alpha`` can give: E[N](α, k) / (1 + draft_steps)
    (the module's docstring derives it). α in [0, 1], k ≥ 1, draft_steps ≥ 0."""
    k = validate.integer("k", k, low=1)
    draft_steps = validate.number("draft_steps", draft_steps, low=0)
    return cost.expected_tokens(alpha, k) / (1 + draft_steps)


def above_ceiling(measured: float, alpha: float, k: int, draft_steps: float = 0.0, noise: float = NOISE) -> bool:
    """Whether a measured S is past its ceiling by more than the noise allowance: S > ceiling · (1 + noise)."""
    measured = validate.number("measured", measured, low=0, low_open=True)
    noise = validate.number("noise", noise, low=0, high=1)
    return _past(measured, ceiling(alpha, k, draft_steps) * (1 + noise))


def _past(s: float, limit: float) -> bool:
    """s > limit, to the 6 decimals a sentence can print them apart with (``wording.apart``)."""
    return round(s, 6) > round(limit, 6)


@dataclass(frozen=True)
class Ceiling(Verdict):
    """``within_ceiling``'s verdict, with the batches whose S it keeps and the (batch, S) pairs it flags."""

    sentence: str  # what the prose may say, as a Verdict's (named here so that the chooser walk sees the class)
    kept: tuple[int, ...] = ()
    flagged: tuple[tuple[int, float], ...] = ()
    limit: float = 0.0
    allowed: float = 0.0


def within_ceiling(batches: Sequence[int], measured: Sequence[float], alpha: float, k: int,
                   draft_steps: float = 0.0, noise: float = NOISE) -> Ceiling:
    """Every measured S against its ceiling for ``k`` and ``alpha`` (the rule in the module's docstring). The
    verdict holds when no S is past ceiling · (1 + noise); ``kept`` are the batches whose S a sentence may use,
    ``flagged`` the (B, S) left out as noise, and the sentence names them. It never fails a cell: a flagged S
    is noise, not a broken machine."""
    batches = [validate.integer(f"batches[{i}]", b, low=1) for i, b in enumerate(batches)]
    measured = [validate.number(f"measured[{i}]", s, low=0, low_open=True) for i, s in enumerate(measured)]
    if len(batches) != len(measured) or not batches:
        raise validate.BadArgument(f"batches and measured must be non-empty and match; got {len(batches)} batches "
                                   f"and {len(measured)} speedups")
    top = ceiling(alpha, k, draft_steps)
    noise = validate.number("noise", noise, low=0, high=1)
    allowed = top * (1 + noise)
    flagged = tuple((b, s) for b, s in zip(batches, measured, strict=True) if _past(s, allowed))
    kept = tuple(b for b, s in zip(batches, measured, strict=True) if not _past(s, allowed))
    claim = f"no S above what k = {k} drafts at α = {alpha:g} can give, {top:.2f}, by more than {noise:.0%}"
    numbers = {"ceiling": top, "allowed": allowed, "flagged": len(flagged), "largest S": max(measured)}
    if not flagged:
        b, s = max(zip(batches, measured, strict=True), key=lambda p: p[1])
        s_text, top_text = apart(s, top)
        said = (f"Every measured S is within what {k} draft{'s' * (k > 1)} at α = {alpha:g} can give, {top_text}: "
                f"the largest is {s_text} at B = {b}" + (f", above it by no more than the {noise:.0%} noise allows, "
                                                         "so it is kept." if _past(s, top) else "."))
        return Ceiling(claim, True, True, said, numbers, kept, flagged, top, allowed)
    least = min(s for _, s in flagged)
    listed = " and ".join(f"{apart(s, allowed)[0]} at B = {b}" for b, s in flagged)
    noun = "it" if len(flagged) == 1 else "them"
    said = (f"S = {listed}: past {apart(least, allowed)[1]}, the {apart(top, allowed)[0]} that {k} "
            f"draft{'s' * (k > 1)} at α = {alpha:g} can give and the {noise:.0%} that noise may add. There the plain "
            f"run measured slower than a speculative step's passes allow, which no unloaded machine does: load slowed "
            f"it. The sentences here leave {noun} out.")
    return Ceiling(claim, False, True, said, numbers, kept, flagged, top, allowed)


