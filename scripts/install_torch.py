"""Install torch into a virtual environment, CPU build unless the machine has an NVIDIA GPU.

``python3 scripts/install_torch.py .venv/bin/python [--version 2.13.0]`` (``make setup`` runs it).

- A torch that the environment can already import is kept, whatever its build (CI installs its own).
- Linux without an NVIDIA GPU: torch from PyTorch's CPU wheel index. A plain ``torch`` from PyPI is
  the CUDA build there, a multi-GB download that such a machine cannot use.
- Linux with an NVIDIA GPU, macOS, Windows: torch from PyPI (there the default wheel is the right one).

torch alone comes from the CPU index (``--no-deps``); its dependencies then come from the usual index,
so a machine that cannot reach the CPU index waits for one lookup, not one per dependency.
Standard library only: it runs before the environment has anything installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu(which=shutil.which, exists=os.path.exists) -> bool:
    """An NVIDIA driver is loaded (``/proc/driver/nvidia``) or its ``nvidia-smi`` is on the PATH."""
    return exists("/proc/driver/nvidia") or which("nvidia-smi") is not None


def can_import_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def install_commands(python: str, *, installed: bool, gpu: bool, system: str, version: str | None = None
                     ) -> list[list[str]]:
    """The pip commands that give ``python`` a torch: none if it has one, the CPU build on a Linux
    machine without an NVIDIA GPU, PyPI's build otherwise. ``version`` pins it (``2.13.0``)."""
    if installed:
        return []
    requirement = f"torch=={version}" if version else "torch"
    pip = [python, "-m", "pip", "install", "-q"]
    if system == "Linux" and not gpu:
        return [pip + ["--no-deps", "--index-url", CPU_INDEX, requirement], pip + [requirement]]
    return [pip + [requirement]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the environment's python, e.g. .venv/bin/python")
    parser.add_argument("--version", default=None, help="pin a torch version, e.g. 2.13.0")
    args = parser.parse_args(argv)
    installed = can_import_torch(args.python)
    commands = install_commands(args.python, installed=installed, gpu=has_nvidia_gpu(), system=platform.system(),
                                version=args.version)
    if not commands:
        print("torch: keeping the installed build")
    for command in commands:
        print("torch:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
