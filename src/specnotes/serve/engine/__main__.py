"""``python -m specnotes.serve.engine``: the command line (``cli.main``)."""

from specnotes.serve.engine.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
