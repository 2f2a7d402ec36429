"""Where llama-server is built and found: the pinned ``llama-cpp-python`` sdist (``LLAMA_CPP_PYTHON``, which
vendors llama.cpp; ``make engine`` reads the version from this file), the build folder (``engine_dir``,
``_build/engine/`` or ``$SPECNOTES_ENGINE_DIR``), the binary for a version, and what its build recorded."""

from __future__ import annotations

import os
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"  # the pinned sdist (make engine reads it here)


class EngineNotBuilt(RuntimeError):
    """No llama-server binary for the pinned version: run ``make engine``."""


def repo_root() -> Path | None:
    """The checkout this package runs from (src layout), or None for an installed package."""
    root = Path(__file__).resolve().parents[4]
    return root if (root / "pyproject.toml").exists() and (root / "src" / "specnotes").is_dir() else None


def engine_dir() -> Path:
    """Where ``make engine`` builds: ``$SPECNOTES_ENGINE_DIR``, else ``_build/engine`` in the checkout (or in the
    current folder for an installed package)."""
    if os.environ.get("SPECNOTES_ENGINE_DIR"):
        return Path(os.environ["SPECNOTES_ENGINE_DIR"])
    return (repo_root() or Path.cwd()) / "_build" / "engine"


def version_dir(version: str = LLAMA_CPP_PYTHON) -> Path:
    return engine_dir() / f"llama-cpp-python-{version}"


def binary(version: str = LLAMA_CPP_PYTHON) -> Path | None:
    """The built ``llama-server`` for ``version``, or None."""
    path = version_dir(version) / "bin" / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) and (path.parent.parent / "build-info.txt").is_file() \
        else None


def require_binary(version: str = LLAMA_CPP_PYTHON) -> Path:
    path = binary(version)
    if path is None:
        raise EngineNotBuilt(f"no llama-server built for llama-cpp-python {version} under {engine_dir()}: run "
                             "`make engine` (it builds llama.cpp's server from the pinned sdist, CPU only; the "
                             "book's page 'Run it on your cluster' lists the build times measured on two cores)")
    return path


def build_info(version: str = LLAMA_CPP_PYTHON) -> dict:
    """What ``scripts/build_engine.sh`` recorded: version, llama.cpp commit, flags, build seconds, compiler."""
    path = version_dir(version) / "build-info.txt"
    info = {}
    for line in path.read_text().splitlines():
        for key in ("llama-cpp-python", "llama.cpp commit", "build seconds", "compiler", "cpu"):
            if line.startswith(key + " "):
                info[key] = line[len(key) + 1:]
        if line.startswith("GGML_NATIVE="):
            info["flags"] = line
    return info
