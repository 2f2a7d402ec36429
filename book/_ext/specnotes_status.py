"""``{specnotes-status}``: the status page's tables, generated at build time.

- one row per notebook in ``_toc.yml``: when, on what device and in which dtype (and why that dtype)
  its stored outputs were produced, read
  from ``metadata.specnotes`` that ``python -m specnotes.pages.refresh`` (``make refresh``) writes;
- the versions of the tools that built this website, and of the vendored JavaScript.

Nothing is typed by hand or stored in a notebook, so the page cannot go stale: the status page is
re-read whenever a notebook changes (and on every build, for the tool versions).
"""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path

import yaml
from book_toc import toc_files
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

BUILD_PACKAGES = ["jupyter-book", "sphinx", "myst-nb", "myst-parser", "sphinx-book-theme", "pydata-sphinx-theme",
                  "sphinxcontrib-bibtex", "ipywidgets", "altair", "matplotlib", "numpy", "pandas", "torch", "specnotes"]
MANIFEST = Path(__file__).resolve().parents[1] / "_assets" / "vendor" / "VENDORED.json"
ENV_KEY = "specnotes_status_docs"  # the pages that hold the directive, kept in the (pickled) build environment


NOT_USED = "not used to build this site"
# Why a package can be missing from the build: the site shows the stored outputs, so ``make book`` builds it in
# an environment with only the book's tools (and without torch on purpose).
NOT_USED_NOTE = (f"\"{NOT_USED}\": the website is built from the notebooks' stored outputs and executes no "
                 "chapter, so the packages only the chapters import are not installed where it is built; torch is "
                 "left out on purpose. The table of chapters above gives the torch that produced each one's outputs.")


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return NOT_USED


def dtype_text(meta: dict) -> tuple[str, str]:
    """(the dtype a chapter measured in, why: ``measure.provenance``'s reason), or what older metadata lacks.
    A chapter that probes gives the probe's reason; one that measures in a fixed dtype says "fixed by the
    chapter"; one whose kernel reported no dtype at all measured nothing on the device that ran it."""
    if "dtype_reason" not in meta:
        return "not recorded", ""
    if not meta.get("dtype"):
        return "—", ""
    return meta["dtype"], meta["dtype_reason"]


NAMES = {"python": "Python", "torch": "torch"}  # a chapter's recorded versions, by metadata key


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


class StatusDirective(SphinxDirective):
    """Render the provenance tables (``:table: chapters`` or ``:table: build``)."""

    option_spec = {"table": lambda arg: arg.strip()}

    def chapter_rows(self) -> list[str]:
        """One row a chapter: when, how long, on what and in which dtype. Python and torch get a column each only
        where the chapters' versions differ; else one sentence above says them (the table then fits a phone)."""
        root = Path(self.env.srcdir)
        toc_path = root / "_toc.yml"
        self.env.note_dependency(str(toc_path))
        metas = []
        for rel in toc_files(yaml.safe_load(toc_path.read_text())):
            path = root / f"{rel}.ipynb"
            if not path.is_file():
                continue
            self.env.note_dependency(str(path))
            metas.append((f"{{doc}}`/{rel}`", json.loads(path.read_text()).get("metadata", {}).get("specnotes")))
        shared = {key: {cell(m.get(key, "?")) for _, m in metas if m} for key in ("python", "torch")}
        apart = [key for key, values in shared.items() if len(values) > 1]
        head = ["Page", "Stored outputs produced", "Execution time", "Device", "dtype",
                *[NAMES[key] for key in apart]]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        why = []
        for title, meta in metas:
            if not meta:
                rows.append(f"| {title} | not recorded: run `make refresh` |" + " |" * (len(head) - 2))
                continue
            date = str(meta.get("date", "?")).replace("T", " ").replace("Z", " UTC")
            dtype, reason = dtype_text(meta)
            rows.append(" | ".join([
                f"| {title}", cell(date), f"{float(meta.get('seconds', 'nan')):.1f} s",
                cell(meta.get("host", meta.get("device", "?"))), cell(dtype),
                *[cell(meta.get(key, "?")) for key in apart]]) + " |")
            if reason:
                why.append(f"- {title}: {reason}")
        same = [f"{NAMES[key]} {next(iter(values))}" for key, values in shared.items() if len(values) == 1]
        lead = [f"Every chapter's outputs were produced with {' and '.join(same)}.", ""] if same else []
        why_title = ("Why each chapter measured in its dtype (a CPU probes, see Chapter 1; a chapter whose models have "
                     "a fixed dtype says so; \"—\": the page measures nothing on the device that ran it):")
        return lead + rows + (["", why_title, "", *why] if why else [])

    def build_rows(self) -> list[str]:
        rows = ["| Built with | Version |", "|---|---|", f"| Python | {platform.python_version()} |"]
        versions = {name: version(name) for name in BUILD_PACKAGES}
        rows += [f"| {name} | {v} |" for name, v in versions.items()]
        if NOT_USED in versions.values():
            rows += ["", NOT_USED_NOTE]
        if MANIFEST.is_file():
            self.env.note_dependency(str(MANIFEST))
            packages = json.loads(MANIFEST.read_text())["packages"]
            rows += ["", "| Vendored JavaScript (served from this site) | Version | License |", "|---|---|---|"]
            rows += [f"| {name} | {pkg['version']} | {pkg['license']} |" for name, pkg in sorted(packages.items())]
        return rows

    def run(self) -> list[nodes.Node]:
        getattr(self.env, ENV_KEY).add(self.env.docname)
        table = self.options.get("table", "chapters")
        rows = self.chapter_rows() if table == "chapters" else self.build_rows()
        container = nodes.container(classes=["specnotes-status"])
        self.state.nested_parse(StringList(rows, source="specnotes-status"), self.content_offset, container)
        return [container]


def init_docs(app, env, docnames):
    if not hasattr(env, ENV_KEY):
        setattr(env, ENV_KEY, set())


def purge_doc(app, env, docname):
    getattr(env, ENV_KEY, set()).discard(docname)


def merge_docs(app, env, docnames, other):
    getattr(env, ENV_KEY).update(getattr(other, ENV_KEY, set()) & set(docnames))


def always_reread_status(app, env, added, changed, removed):
    """The build table shows the tools of *this* build: re-read the page every time (the set of pages that
    hold the directive lives in the environment, so a later build in a new process still finds them)."""
    return sorted(getattr(env, ENV_KEY, set()) & set(env.found_docs))


def setup(app: Sphinx) -> dict:
    app.add_directive("specnotes-status", StatusDirective)
    app.connect("env-before-read-docs", init_docs)
    app.connect("env-purge-doc", purge_doc)
    app.connect("env-merge-info", merge_docs)
    app.connect("env-get-outdated", always_reread_status)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
