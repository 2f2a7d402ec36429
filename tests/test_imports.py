"""The package reads bottom-up: no specnotes module imports, directly or through others, a module that
imports it back (DESIGN §3). Every import counts, including those inside functions: a lazy import
hides a circle from the interpreter, not from a reader."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import specnotes

ROOT = Path(specnotes.__file__).parent
def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The specnotes modules ``path`` imports: ``from specnotes.measure import checks`` is
    specnotes.measure.checks, ``from specnotes.measure.checks import NOISE`` is specnotes.measure.checks."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: "from . import x" in package a.b is a.b.x
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m in modules} - {module_name(path)}


def graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports(p, modules) for p in paths}


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or v not in component:
                component.add(stack.pop())
            on.difference_update(component)
            if len(component) > 1:
                found.append(frozenset(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_kind_of_import():
    edges = graph()
    assert "specnotes.measure.checks" in edges["specnotes.measure.stack"]  # from specnotes.measure import checks
    assert "specnotes.measure.timing" in edges["specnotes.measure.probes"]  # from ...timing import time_fn
    assert "specnotes.analytic.hardware" in edges["specnotes.pages.plots.roofs"]  # a lazy import inside a function


def test_the_circle_finder_finds_a_planted_circle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(planted) == [frozenset("abc")]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    found = circles(graph())
    assert not found, f"import circles: {[sorted(c) for c in found]}"


def test_measure_reads_bottom_up():
    edges = graph()
    assert not {m for m in edges["specnotes.measure.devices"] if m.startswith("specnotes.measure")}  # the bottom
    assert "specnotes.measure.dtypes" not in edges["specnotes.measure.timing"]  # the probe times GEMMs: above it


def lint_imports(tmp_path, plant: str | None = None) -> subprocess.CompletedProcess:
    """lint-imports with this project's contracts (pyproject.toml) over a copy of the package, ``plant`` appended to
    analytic/hardware.py first."""
    import shutil

    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy / "specnotes", ignore=shutil.ignore_patterns("data", "__pycache__"))
    if plant:
        with open(copy / "specnotes" / "analytic" / "hardware.py", "a") as fh:
            fh.write(f"\n{plant}\n")
    config = tmp_path / "contracts.toml"
    config.write_text((ROOT.parents[1] / "pyproject.toml").read_text())
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config", str(config),
                           "--no-cache"], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_the_layer_contracts_hold_and_fail_on_an_upward_import(tmp_path):
    assert lint_imports(tmp_path).returncode == 0
    for plant, broken in (("from specnotes.record import published", "The layers import downward only"),
                          ("def f():\n    from specnotes import advise", "The layers import downward only"),
                          ("import torch", "build without torch"),
                          ("import matplotlib", "Only the pages")):
        out = lint_imports(tmp_path / plant.split()[-1], plant)
        assert out.returncode != 0 and broken in out.stdout and "specnotes.analytic.hardware" in out.stdout, plant
