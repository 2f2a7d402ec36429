"""Counts the prose takes from ``_toc.yml``, not from its own text: ``{{ chapter_count }}`` ("Ten") and
``{{ chapter_count_n }}`` ("10"), the chapters of the TOC's numbered part, as MyST substitutions on every page
(book/intro.ipynb: "{{ chapter_count }} chapters, each opening with one question")."""

from __future__ import annotations

from pathlib import Path

import yaml
from sphinx.application import Sphinx

WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()


def chapters(toc: dict) -> list[str]:
    """The files of the TOC's numbered parts (the chapters), in order."""
    out = []
    for part in toc.get("parts", []):
        if part.get("numbered"):
            out += [entry["file"] for entry in part.get("chapters", []) if "file" in entry]
    return out


def add_counts(app: Sphinx, config) -> None:
    toc = yaml.safe_load((Path(app.confdir) / "_toc.yml").read_text())
    n = len(chapters(toc))
    subs = dict(config.myst_substitutions or {})
    subs["chapter_count"] = WORDS[n].capitalize() if n < len(WORDS) else str(n)
    subs["chapter_count_n"] = str(n)
    config.myst_substitutions = subs


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_counts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
