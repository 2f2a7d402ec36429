"""``python -m specnotes.pages.exercises`` (``__main__``): list the problems."""

from __future__ import annotations

from specnotes import validate
from specnotes.pages.exercises.registry import problems


def main(argv=None) -> int:
    """``python -m specnotes.pages.exercises``: list the problems. It takes no arguments: any is refused (exit 2)."""
    validate.Parser(prog="python -m specnotes.pages.exercises",
                    description="List the book's self-checking problems: id, chapter, summary.").parse_args(argv)
    for pid, chapter, summary in problems():
        print(f"{pid:9} {chapter:22} {summary}")
    return 0
