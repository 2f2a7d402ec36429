"""The registry of problems: ``Problem`` (id, chapter, one-line summary, answer function, unit, tolerance, its
typical mistakes as ``Mistake`` entries, lettered choices), ``PROBLEMS`` and ``register``, and reading it back
(``problem``, ``problems``, ``answer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specnotes import validate


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer, computed (``value()``), and what to say when a reader gives it."""

    value: Callable[[], float | str]
    hint: str


@dataclass(frozen=True)
class Problem:
    id: str
    chapter: str  # the notebook's name, e.g. "04_batch_size"
    summary: str  # the question in one line, with its unit
    answer: Callable[[], float | str]
    unit: str = ""
    rel: float = 0.02  # relative tolerance; 0: exact
    mistakes: tuple[Mistake, ...] = ()
    choices: dict[str, str] = field(default_factory=dict)  # multiple choice: letter → statement


_P = Problem
_M = Mistake


PROBLEMS: dict[str, Problem] = {}


def register(problem: Problem) -> Problem:
    """Add a problem to the registry (ids are unique; every problem lists at least one mistake)."""
    if problem.id in PROBLEMS:
        raise validate.BadArgument(f"problem id {problem.id!r} is already registered")
    PROBLEMS[problem.id] = problem
    return problem


def problem(problem_id: str) -> Problem:
    """The registered problem; an unknown id raises, listing the parts of a multi-part problem or all ids."""
    if problem_id in PROBLEMS:
        return PROBLEMS[problem_id]
    parts = [p for p in PROBLEMS if isinstance(problem_id, str) and p.startswith(problem_id) and p[len(problem_id):]
             .isalpha()]
    if parts:
        listed = "; ".join(f"{p} ({PROBLEMS[p].summary})" for p in parts)
        raise validate.BadArgument(f"{problem_id} has parts: check each one: {listed}")
    raise validate.BadArgument(f"problem must be one of {', '.join(PROBLEMS)}; got {problem_id!r}")


def problems(chapter: str | None = None) -> list[tuple[str, str, str]]:
    """(id, chapter, summary) of every registered problem, or of one chapter's (e.g. "04_batch_size")."""
    return [(p.id, p.chapter, p.summary) for p in PROBLEMS.values() if chapter is None or p.chapter == chapter]


def answer(problem_id: str) -> float | str:
    """The reference answer, computed now by the problem's answer function."""
    return problem(problem_id).answer()
