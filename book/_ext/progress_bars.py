"""Stored progress bars stay out of the pages: a tqdm bar is live feedback while a cell runs, and stored it says
"batch: 0it [00:00, ?it/s]" or "batch: 9/?" to a reader of the website (issue 47). The notebooks keep them (Colab and
Jupyter show live ones as a chapter runs); this extension drops, from each built page, every stored widget view
whose model is a progress bar: an HBox whose children hold a FloatProgress or IntProgress model (what
``tqdm.auto`` makes in a kernel with ipywidgets), read from the notebook's stored widget state."""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

VIEW = re.compile(r'<script type="application/vnd\.jupyter\.widget-view\+json">(.*?)</script>', re.S)
STATE = "application/vnd.jupyter.widget-state+json"
PROGRESS = {"FloatProgressModel", "IntProgressModel"}


def progress_models(notebook: dict) -> set[str]:
    """The model ids of a notebook's stored widgets that are progress bars (or hold one among their children)."""
    state = notebook.get("metadata", {}).get("widgets", {}).get(STATE, {}).get("state", {})
    name = lambda ref: state.get(str(ref).removeprefix("IPY_MODEL_"), {}).get("model_name")
    return {mid for mid, m in state.items()
            if m.get("model_name") in PROGRESS
            or any(name(child) in PROGRESS for child in m.get("state", {}).get("children", []) or [])}


def _strip(html: str, bars: set[str]) -> str:
    def keep(match):
        try:
            return "" if json.loads(match.group(1)).get("model_id") in bars else match.group(0)
        except json.JSONDecodeError:
            return match.group(0)

    return VIEW.sub(keep, html)


def drop_progress_bars(app: Sphinx, doctree, docname: str) -> None:
    path = Path(app.env.doc2path(docname))
    if path.suffix != ".ipynb":
        return
    bars = progress_models(json.loads(path.read_text()))
    if not bars:
        return
    for raw in list(doctree.findall(nodes.raw)):
        if "widget-view+json" in raw.astext():
            text = _strip(raw.astext(), bars)
            if text.strip():
                raw.replace_self(nodes.raw(text, text, format=raw.get("format", "html")))
            else:
                raw.parent.remove(raw)


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", drop_progress_bars)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
