"""The two outcomes of a check (DESIGN §5, "invariants in cells, the model in sentences"): a :class:`Verdict`, a
finding on agreement with the model that a chapter glues and never fails on, and :class:`Broken`, what a measured
cell fails on; and one sentence for a set of verdicts (:func:`describe_all`)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Verdict:
    """A finding on agreement with the model, never asserted in a chapter (a cell fails only on :class:`Broken`).
    ``ok``: the measurement agrees with what the model predicts for this device; it chooses the sentence, and
    the unit tests assert it on recorded and synthetic data. ``tested``: False when the model predicts nothing
    this measurement could show (``ok`` is then True). ``sentence``: what the prose may say. ``numbers``: what
    it was decided on."""

    claim: str
    ok: bool
    tested: bool
    sentence: str
    numbers: dict = field(default_factory=dict)

    def __str__(self) -> str:
        state = "holds" if self.ok and self.tested else "not tested" if self.ok else "FAILS"
        nums = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in self.numbers.items())
        wrap = lambda text: textwrap.fill(text, 100, initial_indent="    ", subsequent_indent="    ")
        return f"{self.claim}: {state}.\n{wrap(self.sentence)}\n{wrap(f'[{nums}]')}"


class Broken(AssertionError):
    """A measurement no working machine produces: the timer disagrees with itself, a time is NaN or not
    positive, or more work ran faster than less beyond the noise. The one thing a measured cell fails on."""


def describe_all(verdicts: Sequence[Verdict], holds: str) -> str:
    """One sentence for a set of verdicts: ``holds`` where every one held (or tested nothing), else the
    claim and sentence of each that did not."""
    failed = [v for v in verdicts if not v.ok]
    if not failed:
        return holds
    return " ".join(f"Not as the model says: {v.claim}. {v.sentence}" for v in failed)
