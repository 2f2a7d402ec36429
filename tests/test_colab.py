"""Colab readiness that can be checked offline: install cells and launch-link targets."""

import json
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def first_code_cell(path):
    cells = json.loads(path.read_text())["cells"]
    return next(c for c in cells if c["cell_type"] == "code")


def install_requirement(source: str) -> str:
    line = next(s for s in source.splitlines() if "git+" in s)
    return line.split('"')[1]


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks/*.ipynb"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_install_cell_uses_the_configured_repository(path):
    cell = first_code_cell(path)
    assert "hide-output" in cell["metadata"].get("tags", [])
    source = "".join(cell["source"])
    assert 'find_spec("specnotes") is None' in source  # installs only when missing
    requirement = Requirement(install_requirement(source))
    assert requirement.name == "specnotes"
    repo, branch = CONFIG["repository"]["url"], CONFIG["repository"]["branch"]
    assert requirement.url == f"git+{repo}@{branch}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_launch_link_target_exists(path):
    # Colab opens <repo>/blob/<branch>/<path_to_book>/<toc path>.ipynb
    toc = (ROOT / "_toc.yml").read_text()
    rel = path.relative_to(ROOT).with_suffix("")
    assert f"file: {rel.as_posix()}" in toc
    book_root = ROOT / CONFIG["repository"]["path_to_book"]
    assert (book_root / rel.with_suffix(".ipynb")).is_file()
