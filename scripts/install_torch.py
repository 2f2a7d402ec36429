"""Install torch into a virtual environment: the version CI tests, CPU build unless the machine has an NVIDIA GPU.

``python3 scripts/install_torch.py .venv/bin/python [--version X]`` (``make setup`` runs it);
``python3 scripts/install_torch.py --print-version`` prints ``TORCH``, which ``.ci/run`` installs.

- ``TORCH`` below is the one place the torch version is named: ``make setup`` installs it and CI
  (``.ci/run``) installs and tests it. ``--version`` overrides it (the Colab test pins its own).
- A torch that the environment can already import is kept, whatever its version or build: it says so,
  naming the version CI tests.
- Linux without an NVIDIA GPU: torch from PyTorch's CPU wheel index. A plain ``torch`` from PyPI is
  the CUDA build there, a multi-GB download that such a machine cannot use. If the CPU index cannot be
  reached, the same version from the usual index (PyPI, or the mirror pip is configured with).
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

TORCH = "2.13.0"  # the torch CI tests (.ci/run reads it from here) and make setup installs
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu(which=shutil.which, exists=os.path.exists) -> bool:
    """An NVIDIA driver is loaded (``/proc/driver/nvidia``) or its ``nvidia-smi`` is on the PATH."""
    return exists("/proc/driver/nvidia") or which("nvidia-smi") is not None


def installed_torch(python: str) -> str | None:
    """The version of the torch ``python`` can import, None if it cannot."""
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return (done.stdout.strip() or "unknown") if done.returncode == 0 else None


def can_import_torch(python: str) -> bool:
    return installed_torch(python) is not None


def install_plans(python: str, *, installed: bool, gpu: bool, system: str, version: str = TORCH
                  ) -> list[list[list[str]]]:
    """The ways to give ``python`` torch ``version``, in the order to try them, each a list of pip commands:
    none if it has a torch; on a Linux machine without an NVIDIA GPU the CPU build from PyTorch's index,
    then (if that fails) the same version from the usual index; elsewhere PyPI's build."""
    if installed:
        return []
    requirement = f"torch=={version}"
    pip = [python, "-m", "pip", "install", "-q"]
    usual = [pip + [requirement]]
    if system == "Linux" and not gpu:
        return [[pip + ["--no-deps", "--index-url", CPU_INDEX, requirement], pip + [requirement]], usual]
    return [usual]


def install_commands(python: str, *, installed: bool, gpu: bool, system: str, version: str = TORCH
                     ) -> list[list[str]]:
    """The pip commands of the first plan (:func:`install_plans`): what runs when every index answers."""
    plans = install_plans(python, installed=installed, gpu=gpu, system=system, version=version)
    return plans[0] if plans else []


def run_plans(plans: list[list[list[str]]], run=subprocess.run, say=print) -> None:
    """Run each plan's commands in turn until one plan completes; the last plan's failure is raised."""
    for i, plan in enumerate(plans):
        try:
            for command in plan:
                say("torch: " + " ".join(command))
                run(command, check=True)
            return
        except subprocess.CalledProcessError:
            if i == len(plans) - 1:
                raise
            say("torch: that failed (is the index reachable?); trying the next way")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", nargs="?", help="the environment's python, e.g. .venv/bin/python")
    parser.add_argument("--version", default=TORCH, help=f"the torch version to install (default {TORCH}, CI's)")
    parser.add_argument("--print-version", action="store_true", help="print the version CI tests and exit")
    args = parser.parse_args(argv)
    if args.print_version:
        print(TORCH)
        return 0
    if args.python is None:
        parser.error("the environment's python is required (e.g. .venv/bin/python)")
    have = installed_torch(args.python)
    if have is not None:
        note = "" if have.split("+")[0] == TORCH else f"; CI tests {TORCH}"
        print(f"torch: keeping the installed {have}{note}")
        return 0
    run_plans(install_plans(args.python, installed=False, gpu=has_nvidia_gpu(), system=platform.system(),
                            version=args.version), say=lambda text: print(text, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
