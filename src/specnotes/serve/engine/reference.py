"""The book's committed llama-server records, ``data/reference/llama-server/<kind>-<cpu>.json``: where
``measure --record`` writes one, and reading one back."""

from __future__ import annotations

import re
from pathlib import Path

from specnotes import validate
from specnotes.serve.engine.speedup import KINDS, cpu_name

REFERENCE = Path(__file__).parents[2] / "data" / "reference" / "llama-server"


def reference_path(kind: str = "shipped", cpu: str | None = None) -> Path:
    """``data/reference/llama-server/<kind>-<cpu>.json``: where ``measure --record`` writes."""
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu or cpu_name()).lower()).strip("-")
    return REFERENCE / f"{validate.choice('kind', kind, KINDS)}-{slug}.json"


def load_reference(kind: str = "shipped"):
    """The committed llama-server record of ``kind`` (the one the book shows)."""
    from specnotes.measure.records import load_results

    found = sorted(REFERENCE.glob(f"{validate.choice('kind', kind, KINDS)}-*.json"))
    if not found:
        raise FileNotFoundError(f"no {kind}-*.json in {REFERENCE}")
    return load_results(found[0])
