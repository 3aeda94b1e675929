"""A GPU host planted in a folder: what ``REMOTEKIT_GPU_ROOT`` points the per-layer GPU probe
(remotekit/remote/gpulayers.py) and the fake nvidia-smi (tests/fakes/nvidia-smi) at.

``plant(folder, ...)`` writes, under ``folder`` standing for ``/``, the files a real host with
the NVIDIA driver has, as the real driver lays them out:

- ``dev/nvidia<N>``, ``dev/nvidiactl``, ``dev/nvidia-uvm``: character devices 195:N, 195:255
  and 511:0 (as root, ``mknod``: what Slurm's gres.conf insists on), else plain files;
- ``proc/driver/nvidia/version`` (``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15
  ...``, the closed module's line) and ``proc/driver/nvidia/gpus/<bus id>/``;
- ``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version>`` (the NVML library);
- ``proc/self/cgroup`` and ``sys/fs/cgroup/devices/devices.list`` (cgroup v1), when asked;
- ``usr/bin/nvidia-smi``: the fake, run by this test interpreter (bound in every container).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tests.harness import FAKES

DRIVER = "550.54.15"
#: nvidia-smi's bus ids for the fake's GPUs (tests/fakes/nvidia-smi: 0x18 + 0x10 * index).
BUS = ["00000000:%02X:00.0" % (0x18 + 0x10 * i) for i in range(8)]


def plant(
    folder: Path,
    *,
    gpus: int = 8,
    nodes: bool = True,
    kernel: str | None = DRIVER,
    nvml: str | None = DRIVER,
    cgroup: list[str] | None = None,
    smi: bool = True,
) -> Path:
    """``folder`` made a GPU host with ``gpus`` GPUs: their device nodes unless ``nodes`` is
    False, the module ``kernel`` (None: not loaded), the NVML library ``nvml`` (None: not
    installed), cgroup v1 ``devices.list`` lines ``cgroup`` (None: no cgroup files) and
    the fake nvidia-smi unless ``smi`` is False."""
    if nodes:
        dev = folder / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        for i in range(gpus):
            _node(dev / f"nvidia{i}", 195, i)
        _node(dev / "nvidiactl", 195, 255)
        _node(dev / "nvidia-uvm", 511, 0)
    if kernel is not None:
        proc = folder / "proc" / "driver" / "nvidia"
        (proc / "gpus").mkdir(parents=True, exist_ok=True)
        (proc / "version").write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {kernel}  Tue Feb 20 23:44:51 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
        )
        for bus in BUS[:gpus]:
            (proc / "gpus" / bus).mkdir(exist_ok=True)
    if nvml is not None:
        lib = folder / "usr" / "lib" / "x86_64-linux-gnu"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / f"libnvidia-ml.so.{nvml}").write_bytes(b"\x7fELF")
        (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{nvml}")
    if cgroup is not None:
        (folder / "proc" / "self").mkdir(parents=True, exist_ok=True)
        (folder / "proc" / "self" / "cgroup").write_text("5:devices:/\n0::/\n")
        devices = folder / "sys" / "fs" / "cgroup" / "devices"
        devices.mkdir(parents=True, exist_ok=True)
        (devices / "devices.list").write_text("".join(line + "\n" for line in cgroup))
    if smi:
        install_smi(folder / "usr" / "bin")
    return folder


def install_smi(folder: Path) -> Path:
    """The fake nvidia-smi in ``folder``, run by this interpreter (no pyenv shim, no site)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = (FAKES / "nvidia-smi").read_text().split("\n", 1)[1]
    path = folder / "nvidia-smi"
    path.write_text(f"#!{sys.executable} -S\n{src}")
    path.chmod(0o755)
    return path


def _node(path: Path, major: int, minor: int) -> None:
    if path.exists():
        return
    if os.geteuid() == 0:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        path.chmod(0o666)
    else:  # a plain file stands in: the probe reports it as such
        path.write_text("")
        path.chmod(0o666)


def env(folder: Path) -> dict[str, str]:
    """The step env that makes every level read ``folder`` (where each has one) as its /."""
    return {
        "REMOTEKIT_GPU_ROOT": str(folder),
        "PATH": f"{folder}/usr/bin:/usr/local/bin:/usr/bin:/bin",
    }
