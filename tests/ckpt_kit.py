"""``remotekit/remote/ckpt.py`` run as it runs there: a subprocess, JSON lines out, an exit
code. A plain module (no tests, no fixtures), shared by the checkpoint test modules; the
checkpoints themselves come from tests/ckpt_factory.py.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import remotekit.remote

SCRIPT = Path(remotekit.remote.__file__).with_name("ckpt.py")


class Run:
    """One finished run of the script: its records, exit code and stderr."""

    def __init__(self, proc: subprocess.CompletedProcess[str]):
        self.code = proc.returncode
        self.stderr = proc.stderr
        self.lines = proc.stdout.splitlines()
        self.records = [json.loads(line) for line in self.lines]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == type_]

    def one(self, type_: str) -> dict[str, Any]:
        found = self.of(type_)
        assert len(found) == 1, (type_, self.records, self.stderr)
        return found[0]

    @property
    def by_path(self) -> dict[str, dict[str, Any]]:
        return {r["path"]: r for r in self.of("checkpoint")}


def run(*args: str, script: Path = SCRIPT, prefix: tuple[str, ...] = ()) -> Run:
    proc = subprocess.run(
        [*prefix, sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    return Run(proc)


# A process of its own between the test and the script: its RUSAGE_CHILDREN peak is the
# script's tree alone (the test process's own holds the largest child any earlier test reaped).
_MARK = "remotekit-test-peak-rss="
_PEAK = f"""\
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
sys.stderr.write("\\n{_MARK}%d\\n" % peak)
sys.exit(code)
"""


def run_measured(*args: str, timeout: float = 240) -> tuple[Run, int]:
    """``run(*args)`` and the peak resident memory (bytes) of the script and its children."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    err, _, peak = proc.stderr.rpartition(_MARK)
    assert peak.strip().isdigit(), proc.stderr
    proc.stderr = err.removesuffix("\n")
    return Run(proc), int(peak)


# ------------------------------------------------------------------ archives that lie


def _central(data: bytearray, name: str) -> int:
    """The offset of ``name``'s central directory entry in the archive ``data``."""
    at = 0
    while True:
        at = data.index(b"PK\x01\x02", at)
        nlen = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + nlen] == name.encode():
            return at
        at += 4


def patch_zip(path: Path, name: str, *, size: int | None = None, offset: int | None = None) -> None:
    """Make the central directory lie about ``name``: its unpacked size (both sizes of a
    stored member, in the local header too), or where its local header is."""
    data = bytearray(path.read_bytes())
    at = _central(data, name)
    local = struct.unpack_from("<I", data, at + 42)[0]
    if size is not None:
        stored = struct.unpack_from("<H", data, at + 10)[0] == zipfile.ZIP_STORED
        struct.pack_into("<I", data, at + 24, size)
        struct.pack_into("<I", data, local + 22, size)
        if stored:
            struct.pack_into("<I", data, at + 20, size)
            struct.pack_into("<I", data, local + 18, size)
    if offset is not None:
        struct.pack_into("<I", data, at + 42, offset)
    path.write_bytes(bytes(data))


# ------------------------------------------------------ the far side without torch or NumPy

PATHS = ["numpy", "stdlib"]  # the value checker's two ways: with NumPy, or without it


def blocked(tmp_path: Path, *modules: str) -> str:
    """A directory for PYTHONPATH whose modules ``modules`` fail to import as absent ones do."""
    d = tmp_path / ("no-" + "-".join(modules))
    d.mkdir(exist_ok=True)
    for m in modules:
        (d / (m + ".py")).write_text(
            f"raise ModuleNotFoundError({f'No module named {m!r} (test)'!r}, name={m!r})\n"
        )
    return str(d)


def scan_without(tmp_path: Path, modules: tuple[str, ...], *args: str) -> Run:
    """``ckpt.py scan ARGS`` (its worker too) in a Python where ``modules`` cannot be imported."""
    return without(tmp_path, modules, "scan", *args)


def blocked_for(path: str) -> tuple[str, ...]:
    if path == "numpy":
        pytest.importorskip("numpy", reason="the NumPy path needs numpy in this venv")
        return ("torch",)
    return ("torch", "numpy")


def without(tmp_path: Path, modules: tuple[str, ...], *args: str) -> Run:
    """``ckpt.py ARGS`` in a Python where ``modules`` cannot be imported."""
    path = [blocked(tmp_path, *modules), os.environ.get("PYTHONPATH") or ""]
    return run(*args, prefix=("env", "PYTHONPATH=" + os.pathsep.join(filter(None, path))))
