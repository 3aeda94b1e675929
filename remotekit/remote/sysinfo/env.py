"""The ``env`` command: Python, host, kernel, CPUs, memory, the container, and torch (with
the checkpoint-loading CVEs of its version as findings).
"""

from __future__ import annotations

import os
import re
import sys

from .base import MIB, read_text, run_tool
from .torchview import torch_view

# (fixed in, CVE, what it is): torch releases below "fixed in" are affected.
TORCH_CVES = [
    (
        (2, 6, 0),
        "CVE-2025-32434",
        "remote code execution via torch.load even with weights_only=True",
    ),
    ((2, 10, 0), "CVE-2026-24747", "memory corruption in the weights-only unpickler"),
]


def cmd_env(args, out):
    import platform
    import socket

    mem_total, mem_avail = meminfo()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    out.emit(
        "env",
        python=platform.python_version(),
        python_executable=sys.executable,
        venv=sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        hostname=socket.gethostname(),
        kernel=platform.release(),
        os=os_release(),
        cpu_count=os.cpu_count(),
        cpu_usable=usable,
        mem_total_mib=mem_total,
        mem_available_mib=mem_avail,
        cgroup_memory_limit_mib=cgroup_memory_limit_mib(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        container=container_info(),
    )
    torch = torch_view(full=True)
    out.emit("torch", **torch)
    if not torch["importable"]:
        out.note("no_torch", torch["error"])
    else:
        for cve, message in torch_cve_findings(torch["version"]):
            out.warning("torch_cve", message, cve=cve)
    return out.done()


def meminfo():
    fields = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[key] = int(parts[0]) * 1024 // MIB  # kB -> MiB
    return fields.get("MemTotal"), fields.get("MemAvailable")


def cgroup_memory_limit_mib():
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (read_text(path) or "").strip()
        if text.isdigit() and int(text) < (1 << 60):
            return int(text) // MIB
    return None


def container_info():
    """{"detected": bool|None, "kind": str|None, "evidence": [str]} from the usual markers."""
    import shutil
    import subprocess

    kind, evidence = None, []
    if os.path.exists("/run/.containerenv"):
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    if os.path.exists("/.dockerenv"):
        kind = kind or "docker"
        evidence.append("/.dockerenv exists")
    environ = read_text("/proc/1/environ")
    if environ is None:
        evidence.append("/proc/1/environ not readable")
    else:
        for item in environ.split("\0"):
            if item.startswith("container="):  # only this key leaves the host, never others
                kind = kind or item.split("=", 1)[1] or None
                evidence.append("pid 1 has %s" % item)
    cgroup = read_text("/proc/1/cgroup") or ""
    for marker in ("docker", "lxc", "kubepods", "libpod", "containerd"):
        if marker in cgroup:
            kind = kind or marker
            evidence.append("/proc/1/cgroup mentions %s" % marker)
            break
    tool = shutil.which("systemd-detect-virt")
    if tool is None:
        evidence.append("systemd-detect-virt not available")
    else:
        try:
            code, text, _ = run_tool([tool, "--container"], 5)
            found = text.strip()
            if code == 0 and found and found != "none":
                kind = kind or found
                evidence.append("systemd-detect-virt --container: %s" % found)
            else:
                evidence.append("systemd-detect-virt --container: none")
        except (OSError, subprocess.TimeoutExpired) as exc:
            evidence.append("systemd-detect-virt failed: %s" % exc)
    detected = kind is not None
    return {"detected": detected, "kind": kind, "evidence": evidence}


def os_release():
    for line in (read_text("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def torch_version_tuple(version):
    """(major, minor, patch), and whether it is a pre-release, of a torch version string."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?([^+]*)", version or "")
    if not m:
        return None, False
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    pre = bool(re.search(r"(a|b|rc|dev)\d*", m.group(4) or ""))
    return release, pre


def torch_cve_findings(version):
    """[(cve, message)] for a torch version with a known checkpoint-loading CVE."""
    release, pre = torch_version_tuple(version)
    if release is None:
        return []
    found = []
    for fixed, cve, what in TORCH_CVES:
        fixed_s = "%d.%d" % fixed[:2]
        if release < fixed:
            found.append(
                (
                    cve,
                    "torch %s is affected by %s (%s; fixed in %s): load only "
                    "checkpoints you trust, and upgrade" % (version, cve, what, fixed_s),
                )
            )
        elif pre and release == fixed:
            found.append(
                (
                    cve,
                    "torch %s is a pre-release of %s, which fixed %s (%s): this build "
                    "may predate the fix" % (version, fixed_s, cve, what),
                )
            )
    return found
