"""The fake nvidia-smi (tests/fakes/nvidia-smi) on a step's ``PATH``: what the gpu / env /
disk / procs diagnostics and ``diagnose`` tests run against, through the API or the command
line.

``make_bin_dir`` makes a PATH folder holding the fake (and a ``python3`` for its shebang),
``smi_env`` the step env that puts it first and picks the fake's scenario, ``smi_hosts`` a
hosts.yaml whose ``local`` host sets that env (the command line has no ``env=``), and
``make_notorch`` the local target on this Python without site-packages (no torch: quick, and
the "torch is missing" path). A GPU host planted in a folder, for the per-layer probe:
tests/gpuroot.py.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import remotekit
from tests.conftest import open_local, write_inventory
from tests.harness import FAKES

FAKE_SMI = FAKES / "nvidia-smi"
H100 = "NVIDIA H100 80GB HBM3"  # the fake's GPU name


def make_bin_dir(folder: Path) -> Path:
    """``folder`` as a PATH folder: the fake nvidia-smi, and ``python3`` for its shebang."""
    folder.mkdir(exist_ok=True)
    shutil.copy2(FAKE_SMI, folder / "nvidia-smi")
    py = folder / "python3"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    py.chmod(0o755)
    return folder


def make_notorch(folder: Path, agent: bool | None = None) -> remotekit.Target:
    """The local target with an interpreter that runs this Python without site-packages,
    and a small workdir (the disk section walks it), both in ``folder``; its steps on the
    agent or not, as ``agent`` says (None: the default)."""
    py = folder / "python-S"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    py.chmod(0o755)
    work = folder / "work"
    work.mkdir()
    return open_local(agent, python=str(py), workdir=str(work))


def smi_env(bin_dir: Path, scenario: str = "healthy", **extra: str) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_NVIDIA_SMI_SCENARIO": scenario, **extra}


def smi_hosts(tmp_path: Path, bin_dir: Path, scenario: str, target: remotekit.Target) -> str:
    """A hosts.yaml whose ``local`` runs ``target``'s interpreter in its workdir (the disk
    section walks it) and sees the fake nvidia-smi in ``scenario``; its path."""
    local = {"python": target.spec.python, "workdir": target.spec.workdir}
    path = tmp_path / f"hosts-{scenario}.yaml"
    write_inventory(path, {"local": {**local, "env": smi_env(bin_dir, scenario)}})
    return str(path)
