"""Re-execute notebooks in place, top to bottom, as the website will show them.

``python -m specnotes.pages.refresh notebooks/01_roofline_decode.ipynb ...`` (``make refresh``).
Widget state is stored (so explorers render with no kernel), and each notebook records in its
metadata how long it took and, in ``measure.provenance``'s one format, on what it ran: the kernel that
executed the chapter reports its own device and the dtype it chose, with the reason (the status page
shows them). Needs ``nbformat`` and ``nbclient`` (the book's build tools, ``requirements.txt``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specnotes import validate

MARK = "specnotes-provenance:"
# Run in the chapter's own kernel after its last cell, so the dtype is the one the chapter chose (its
# probe is cached per process), not one a second probe might choose; a chapter that chose none says so.
PROVENANCE_CELL = (f"import json as _json\nfrom specnotes import measure as _m\n"
                   f"print({MARK!r} + _json.dumps(_m.provenance(choose=False)))")


def kernel_provenance(outputs: list) -> dict:
    """The provenance the extra cell printed (its stream output)."""
    for out in outputs:
        for line in out.get("text", "").splitlines():
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
    raise RuntimeError(f"the kernel printed no provenance line; outputs: {outputs}")


def refresh(path: Path, timeout: int = 900) -> float:
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        raise SystemExit(f"python -m specnotes.pages.refresh needs nbformat and nbclient ({error}): "
                         "pip install 'specnotes[refresh]'") from None

    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell(PROVENANCE_CELL)
    nb.cells.append(probe)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    nb.cells.pop()
    nb.metadata["specnotes"] = {**kernel_provenance(probe.outputs), "seconds": round(seconds, 1)}
    nbformat.write(nb, path)
    return seconds


def notebook_path(text: str) -> Path:
    """An existing .ipynb file (an argparse ``type=``: a bad one exits with status 2, naming it)."""
    path = Path(text)
    if path.suffix != ".ipynb" or not path.is_file():
        raise argparse.ArgumentTypeError(f"must be an existing .ipynb file, got {text!r}")
    return path


def main(argv=None) -> int:
    parser = validate.Parser(prog="python -m specnotes.pages.refresh", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=notebook_path, help="the .ipynb files to execute in place")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        print(f"  {refresh(path):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
