"""Colab: every chapter's first cell installs what the chapter imports, and the chapter then runs.

The fast checks read the notebooks (install cell, launch-link targets, the extra covers every import).
The ``colab`` ones do what a Colab reader does: a fresh environment with nothing but Python, pip,
torch and a Jupyter kernel; the chapter's own first cell, pointed at this checkout instead of the
repository URL; then every cell, top to bottom, in a kernel running that environment's python.
``make test`` runs it for one chapter, ``make colab`` for all of them and the book's advisor page
(``book/advisor.ipynb``, whose first cell is a chapter's).

Cost: the environment holding torch and ipykernel (Colab's part) is built once and cached in
``_build/colab/base``. Each run then creates an empty virtual environment that sees the cached one
through a ``.pth`` line, as Colab's python sees its preinstalled torch, so the first cell really
installs specnotes and every dependency it declares into an environment that lacks them.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Pages outside notebooks/ that a reader also runs in Colab: checked like a chapter. Their ids (the file
# names) do not match ``make test``'s single chapter (-k 03_acceptance), so only ``make colab`` runs them.
PAGES = CHAPTERS + [ROOT / "book" / "advisor.ipynb", ROOT / "book" / "intro.ipynb", ROOT / "book" / "gpus.ipynb"]
REPOSITORY = f"git+{CONFIG['repository']['url']}@{CONFIG['repository']['branch']}"
COLAB_CACHE = ROOT / "_build" / "colab"
# What Colab has that a chapter may rely on: the kernel's own packages. Everything else (pandas,
# matplotlib, numpy... although Colab preinstalls them) must come from the first cell.
KERNEL = {"IPython", "ipykernel"}


def code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def first_code_cell(path):
    return code_cells(path)[0]


def install_requirement(source: str) -> Requirement:
    line = next(s for s in source.splitlines() if "git+" in s)
    return Requirement(line.split('"')[1])


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks/*.ipynb"
    assert all(path.is_file() for path in PAGES)
    # make test's fresh-environment run (-k COLAB_ONE) still selects one chapter, not the advisor page too
    one = re.search(r"^COLAB_ONE \?= (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert [p.name for p in PAGES if one in p.name] == [f"{one}.ipynb"]



@functools.cache
def distributions_providing() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_install_cell_uses_the_configured_repository(path):
    cell = first_code_cell(path)
    assert json.loads(path.read_text())["cells"][0] == cell  # the very first cell, above the title
    # first for Colab, and off the website: the page opens with its title and question (remove-cell)
    assert {"hide-output", "remove-cell"} <= set(cell["metadata"].get("tags", []))
    source = "".join(cell["source"])
    assert 'find_spec("specnotes") is None' in source  # installs only when missing
    requirement = install_requirement(source)
    assert requirement.name == "specnotes"
    assert requirement.url == REPOSITORY


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_launch_link_target_exists(path):
    # Colab opens <repo>/blob/<branch>/<path_to_book>/<toc path>.ipynb
    toc = (ROOT / "_toc.yml").read_text()
    rel = path.relative_to(ROOT).with_suffix("")
    assert f"file: {rel.as_posix()}" in toc or f"root: {rel.as_posix()}" in toc
    book_root = ROOT / CONFIG["repository"]["path_to_book"]
    assert (book_root / rel.with_suffix(".ipynb")).is_file()


def imported_modules(path) -> set[str]:
    """Top-level modules a chapter imports (after its install cell)."""
    names = set()
    for cell in code_cells(path)[1:]:
        source = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def declared_distributions(extras: set[str]) -> set[str]:
    """specnotes' own requirements plus those of ``extras``, as normalized distribution names."""
    out = set()
    for line in metadata.requires("specnotes") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            out.add(req.name.lower().replace("_", "-"))
    return out


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_install_cell_declares_every_import_of_its_chapter(path):
    # the static half of the Colab check, for every chapter: each import is the standard library,
    # the kernel's, torch (Colab has it), specnotes itself, or a requirement of the extra installed
    extras = install_requirement("".join(first_code_cell(path)["source"])).extras
    declared = declared_distributions(extras) | {"torch", "specnotes"}
    providers = distributions_providing()
    for module in sorted(imported_modules(path) - set(sys.stdlib_module_names) - KERNEL):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        assert dists & declared, f"{path.name} imports {module}; specnotes{sorted(extras)} does not install it"


# ------------------------------------------------------------------------------------------------
# the real thing: a fresh environment, the first cell, the whole chapter


def base_environment() -> Path:
    """A virtual environment with torch (this environment's version) and ipykernel only, cached."""
    import torch

    version = torch.__version__.split("+")[0]
    key = f"python {sys.version_info.major}.{sys.version_info.minor}, torch {version}, ipykernel"
    base = COLAB_CACHE / "base"
    stamp = base / "specnotes-colab-base"
    if stamp.is_file() and stamp.read_text() == key:
        return base
    shutil.rmtree(base, ignore_errors=True)
    venv.create(base, with_pip=True)
    python = str(base / "bin" / "python")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "install_torch.py"), python, "--version", version],
                   check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "ipykernel"], check=True)
    stamp.write_text(key)
    return base


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def fresh_environment(base: Path, where: Path) -> Path:
    """An empty virtual environment that also sees ``base``'s packages (listed after its own)."""
    venv.create(where, with_pip=True)
    (site_packages(where) / "colab_base.pth").write_text(f"{site_packages(base)}\n")
    return where / "bin" / "python"


def can_import(python, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def execute_with(python: Path, nb, cwd: Path, timeout: int = 900):
    """Run every cell of ``nb`` in a kernel started by ``python`` (nbclient raises on an error)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    spec = cwd / "kernels" / "colab"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh environment", "language": "python"}))
    km = AsyncKernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))
    NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.colab
@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_chapter_runs_in_a_fresh_environment_after_its_first_cell(path, tmp_path):
    import nbformat

    python = fresh_environment(base_environment(), tmp_path / "env")
    assert can_import(python, "torch") and can_import(python, "ipykernel")
    for missing in ("specnotes", "numpy", "matplotlib", "pandas", "myst_nb"):
        assert not can_import(python, missing), missing
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert REPOSITORY in first.source
    first.source = first.source.replace(REPOSITORY, ROOT.as_uri())
    work = tmp_path / "work"
    work.mkdir()
    execute_with(python, nb, work)
    # the first cell installed specnotes into the fresh environment, not into the cached base
    assert can_import(python, "specnotes")
    assert list(site_packages(tmp_path / "env").glob("specnotes-*.dist-info"))
    assert not list(site_packages(COLAB_CACHE / "base").glob("specnotes-*.dist-info"))
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors

