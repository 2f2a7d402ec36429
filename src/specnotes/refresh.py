"""Re-execute notebooks in place, top to bottom, as the website will show them.

``python -m specnotes.refresh notebooks/01_roofline_decode.ipynb ...`` (``make refresh``).
Widget state is stored (so explorers render with no kernel), and each notebook records in its
metadata how long it took and on what it ran, for the book's status page.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path


def execution_provenance(seconds: float) -> dict:
    import torch

    from specnotes.measure import device_name, pick_device

    return {
        "seconds": round(seconds, 1),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device_name(pick_device()),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def refresh(path: Path, timeout: int = 900) -> float:
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        raise SystemExit(f"python -m specnotes.refresh needs nbformat and nbclient ({error}): "
                         "pip install 'specnotes[refresh]'") from None

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    nb.metadata["specnotes"] = execution_provenance(seconds)
    nbformat.write(nb, path)
    return seconds


def notebook_path(text: str) -> Path:
    """An existing .ipynb file (an argparse ``type=``: a bad one exits with status 2, naming it)."""
    path = Path(text)
    if path.suffix != ".ipynb" or not path.is_file():
        raise argparse.ArgumentTypeError(f"must be an existing .ipynb file, got {text!r}")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specnotes.refresh", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=notebook_path, help="the .ipynb files to execute in place")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        print(f"  {refresh(path):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
