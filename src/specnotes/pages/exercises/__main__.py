"""``python -m specnotes.pages.exercises``: list the problems (``cli.main``)."""

from specnotes.pages.exercises.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
