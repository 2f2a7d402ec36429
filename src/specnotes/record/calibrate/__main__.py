"""``python -m specnotes.record.calibrate``: ``cli.main``."""

from specnotes.record.calibrate.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
