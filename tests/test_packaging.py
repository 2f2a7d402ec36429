"""Packaging: every import the package makes is declared, requirements.txt is the package with every
extra, the website's build needs no torch, and make setup's torch decision (scripts/install_torch.py)
with the machine faked: GPU or not, torch installed or not."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "specnotes"
EXTRAS = metadata.metadata("specnotes").get_all("Provides-Extra")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install_torch = _load("install_torch", ROOT / "scripts" / "install_torch.py")


def optional_imports(tree) -> set[ast.AST]:
    """Import statements inside ``try: ... except ImportError``: the code works without them."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            guarded |= {n for stmt in node.body for n in ast.walk(stmt)}
    return guarded


def imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file, at any depth (function-level ones too),
    but those guarded by ``except ImportError``."""
    tree = ast.parse(path.read_text())
    guarded = optional_imports(tree)
    names = set()
    for node in ast.walk(tree):
        if node in guarded:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extra: str | None = None) -> set[str]:
    """The package's own requirements (extra None) or one extra's, as normalized names."""
    out = set()
    for line in metadata.requires("specnotes"):
        req = Requirement(line)
        own = req.marker is None if extra is None else req.marker is not None and req.marker.evaluate({"extra": extra})
        if own:
            out.add(normalized(req.name))
    return out


def declared() -> set[str]:
    return requirements().union(*(requirements(extra) for extra in EXTRAS))



@functools.cache
def distributions_providing() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_every_third_party_import_of_the_package_is_declared(path):
    providers = distributions_providing()
    for module in sorted(imports(path) - set(sys.stdlib_module_names) - {"specnotes"}):
        dists = {normalized(d) for d in providers.get(module, [module])}
        assert dists & declared(), f"{path.name} imports {module}: add it to pyproject.toml (an extra if optional)"


def test_refresh_imports_are_in_the_refresh_extra():
    # the defect this guards: refresh.py shipped importing nbformat/nbclient that nothing declared
    assert {"nbformat", "nbclient"} <= requirements("refresh")


def test_requirements_txt_is_the_package_with_every_extra():
    lines = [s.strip() for s in (ROOT / "requirements.txt").read_text().splitlines()]
    (line,) = [s for s in lines if s and not s.startswith("#")]
    extras = set(re.fullmatch(r"-e \.\[(.*)\]", line).group(1).split(","))
    assert extras == set(EXTRAS)


def test_the_website_build_needs_no_torch():
    # make book installs .[book] only; the Sphinx extensions it loads import neither torch nor specnotes
    assert "torch" not in requirements("book") | requirements()
    for path in sorted((ROOT / "book" / "_ext").glob("*.py")):
        assert not imports(path) & {"torch", "specnotes"}, path.name


# ---------------------------------------------------------------------- make setup's torch


def commands(**machine):
    return install_torch.install_commands("py", **{"installed": False, "gpu": False, "system": "Linux"} | machine)


def test_a_torch_already_installed_is_kept():
    for gpu in (False, True):
        assert commands(installed=True, gpu=gpu) == []


def test_linux_without_a_gpu_gets_cis_version_of_the_cpu_build_from_pytorchs_index():
    first, second = commands()
    pinned = f"torch=={install_torch.TORCH}"
    assert first[-4:] == ["--no-deps", "--index-url", "https://download.pytorch.org/whl/cpu", pinned]
    assert second[-1] == pinned and "--index-url" not in second  # then its dependencies, from PyPI


def test_linux_with_a_gpu_and_other_systems_get_pypis_build_of_cis_version():
    pinned = ["py", "-m", "pip", "install", "-q", f"torch=={install_torch.TORCH}"]
    assert commands(gpu=True) == [pinned] and commands(system="Darwin") == [pinned]


def test_a_version_given_replaces_cis():
    assert all(c[-1] == "torch==2.99.0" for c in commands(version="2.99.0"))


def test_an_unreachable_cpu_index_falls_back_to_the_same_version_from_the_usual_index():
    import subprocess

    plans = install_torch.install_plans("py", installed=False, gpu=False, system="Linux")
    ran, said = [], []

    def run(command, check):
        ran.append(command)
        if CPU_INDEX in command:
            raise subprocess.CalledProcessError(1, command)

    CPU_INDEX = install_torch.CPU_INDEX
    install_torch.run_plans(plans, run=run, say=said.append)
    assert ran[-1] == ["py", "-m", "pip", "install", "-q", f"torch=={install_torch.TORCH}"] and len(ran) == 2
    assert any("trying the next way" in s for s in said)
    with pytest.raises(subprocess.CalledProcessError):  # every way failed: the last failure is raised
        install_torch.run_plans(plans, run=lambda c, check: (_ for _ in ()).throw(subprocess.CalledProcessError(1, c)),
                                say=said.append)


def test_the_torch_version_is_named_in_one_place_that_ci_and_make_setup_read():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/install_torch.py --print-version" in ci
    assert not re.search(r"torch==\d", ci), "CI names a torch version of its own"
    assert "scripts/install_torch.py $(PY)" in (ROOT / "Makefile").read_text()  # make setup: TORCH by default
    readme = (ROOT / "README.md").read_text()
    assert f"torch {install_torch.TORCH}" in readme, "the README says which torch make setup installs"
    named = {v for f in (".ci/run", "Makefile", "README.md", "requirements.txt", "pyproject.toml")
             for v in re.findall(r"torch[= ]=?(\d+\.\d+\.\d+)", (ROOT / f).read_text())}
    assert named <= {install_torch.TORCH}, named


def test_print_version_prints_cis_torch(capsys):
    assert install_torch.main(["--print-version"]) == 0
    assert capsys.readouterr().out.strip() == install_torch.TORCH


def test_gpu_detection_with_the_machine_faked():
    no_file, no_command = (lambda path: False), (lambda name: None)
    assert not install_torch.has_nvidia_gpu(which=no_command, exists=no_file)
    assert install_torch.has_nvidia_gpu(which=no_command, exists=lambda path: path == "/proc/driver/nvidia")
    assert install_torch.has_nvidia_gpu(which=lambda name: "/usr/bin/nvidia-smi", exists=no_file)


def test_torch_detection_asks_the_environment_itself(tmp_path):
    venv.create(tmp_path, with_pip=False)  # an empty environment
    assert not install_torch.can_import_torch(str(tmp_path / "bin" / "python"))


def test_a_torch_of_another_version_is_kept_and_named(capsys):
    import torch

    assert install_torch.main([sys.executable]) == 0  # this environment has a torch: nothing is installed
    said = capsys.readouterr().out
    assert f"keeping the installed {torch.__version__}" in said
    assert (f"CI tests {install_torch.TORCH}" in said) == (torch.__version__.split("+")[0] != install_torch.TORCH)


def test_the_c_source_ships_with_the_package():
    """specnotes.sampling.kernel builds its csrc/*.c on the reader's machine: package-data must carry them into the
    wheel."""
    import fnmatch

    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["specnotes"]
    sources = list((PACKAGE / "sampling" / "csrc").glob("*.c"))
    assert sources and all(any(fnmatch.fnmatch(f"sampling/csrc/{s.name}", p) for p in patterns) for s in sources)


def test_compare_outputs_finds_no_change_between_a_revision_and_itself_and_one_where_an_output_moved(tmp_path):
    """scripts/compare_outputs.py (issue 43's check that a refactor moved no stored output): a revision against itself
    differs nowhere; a notebook whose output text was changed is named, cell by cell."""
    spec = importlib.util.spec_from_file_location("compare_outputs", ROOT / "scripts" / "compare_outputs.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    assert compare.main(["HEAD", "HEAD"]) == 0
    rules = compare.sanitizers()
    cell = {"cell_type": "code", "source": ["x"], "outputs": [{"output_type": "stream", "text": ["0.123456789999\n"]}]}
    moved = {**cell, "outputs": [{"output_type": "stream", "text": ["0.124\n"]}]}
    noise = {**cell, "outputs": [{"output_type": "stream", "text": ["0.123456780000\n"]}]}
    same = compare.code_outputs(json.dumps({"cells": [cell]}), rules)
    assert same == compare.code_outputs(json.dumps({"cells": [noise]}), rules)  # float noise is sanitized away
    assert same != compare.code_outputs(json.dumps({"cells": [moved]}), rules)
