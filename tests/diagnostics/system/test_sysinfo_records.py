"""The sysinfo commands' records, declared once (remote/sysinfo/records.py): what
``sysinfo.py`` writes is what the classes declare, they read back what they write, a record
of a script that failed early loads as before, and the local side's names are these very
classes. The script runs as it runs there (a subprocess, tests/fakes/nvidia-smi on PATH, a
fake torch package that sees two CUDA devices)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

import remotekit.diagnostics.system as system
from remotekit.remote import protocol
from remotekit.remote.records import Record
from remotekit.remote.sysinfo import records as R
from remotekit.render import to_json
from tests.harness import FAKES, ROOT

SCRIPT = ROOT / "remotekit" / "remote" / "sysinfo.py"
BY_TYPE: dict[str, type[Record]] = {
    cls.TYPE: cls for cls in (getattr(R, n) for n in R.__all__) if cls.TYPE is not None
}


def fake_torch(root: Path) -> Path:
    """A torch package whose CUDA sees two devices (the properties torch >= 2.5 has)."""
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "__version__ = '2.6.0+cu124'\nfrom torch import cuda, version\n"
    )
    (pkg / "version.py").write_text("cuda = '12.4'\n")
    (pkg / "cuda.py").write_text(
        "class _Props:\n"
        "    def __init__(self, i):\n"
        "        self.name, self.total_memory = 'NVIDIA H100 80GB HBM3', 80 << 30\n"
        "        self.major, self.minor, self.uuid = 9, 0, '8932f937-0000-0000-0000-00000000000%d' % i\n"
        "        self.pci_domain_id, self.pci_bus_id, self.pci_device_id = 0, 0x18 + 16 * i, 0\n"
        "def is_available():\n    return True\n"
        "def device_count():\n    return 2\n"
        "def get_device_properties(i):\n    return _Props(i)\n"
    )
    return root


def script(*args: str, path: Path, **env: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(path), "LC_ALL": "C.UTF-8", **env},
    )
    out = [protocol.parse(line) for line in proc.stdout.splitlines()]
    assert out and all(r is not None for r in out), proc.stdout + proc.stderr
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The records of every command: gpu (a healthy host, then one whose GPU memory a pid
    from another namespace holds), env, disk (a tree with checkpoints, a missing path, a
    path inside another) and procs (with GPU memory held by a Python process)."""
    tmp = tmp_path_factory.mktemp("sysinfo-records")
    bin_ = tmp / "bin"
    bin_.mkdir()
    shutil.copy2(FAKES / "nvidia-smi", bin_ / "nvidia-smi")
    (bin_ / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (bin_ / "python3").chmod(0o755)
    torch = {"PYTHONPATH": str(fake_torch(tmp / "site"))}
    tree = tmp / "work"
    for name, size in (("run/checkpoint-100/model.safetensors", 3000), ("run/final.pt", 6000)):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(b"\0" * size)
    out = script("gpu", path=bin_, **torch)
    out += script("gpu", path=bin_, FAKE_NVIDIA_SMI_SCENARIO="stale-process")
    out += script("env", path=bin_, **torch)
    disk = [str(tree), str(tree / "run"), str(tmp / "missing")]
    out += script("disk", "--min-free-pct", "0", "--", *disk, path=bin_)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:  # a Python process that is no ancestor of the script, holding GPU memory
        out += script("procs", path=bin_, FAKE_NVIDIA_SMI_APP_PIDS=str(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    return out


def _has_default(f: Any) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def nested(rec: dict[str, Any]) -> list[tuple[type[Record], dict[str, Any]]]:
    """The records inside ``rec`` with their classes: a torch record's devices, an env
    record's container."""
    if rec["type"] == "torch":
        return [(R.TorchDevice, d) for d in rec["devices"]]
    if rec["type"] == "env":
        return [(R.ContainerInfo, rec["container"])]
    return []


def test_every_record_type_was_written(written: list[dict[str, Any]]) -> None:
    assert set(BY_TYPE) <= {r["type"] for r in written}
    torch = next(r for r in written if r["type"] == "torch")
    assert len(torch["devices"]) == 2 and torch["devices"][0]["uuid"].startswith("GPU-")
    assert {r["inside"] is None for r in written if r["type"] == "walk"} == {True, False}
    assert any(not r["visible"] for r in written if r["type"] == "gpu_process")
    assert any(r["gpus"] for r in written if r["type"] == "proc")


def test_the_script_writes_exactly_the_declared_fields(written: list[dict[str, Any]]) -> None:
    """Each key the far side writes is a field of its record class (none crosses
    undeclared), and each field without a default is written; the fields the local side
    fills in (``sent=False``: env's host and torch) are never written."""
    found = [(BY_TYPE[r["type"]], r) for r in written if r["type"] in BY_TYPE]
    found += [n for _, r in found for n in nested(r)]
    for cls, rec in found:
        keys = set(rec) - {"type"}
        sent = {f.name for f in fields(cls) if f.metadata.get("sent", True)}  # type: ignore[arg-type]
        required = {f.name for f in fields(cls) if f.name in sent and not _has_default(f)}  # type: ignore[arg-type]
        assert keys <= sent, (cls.__name__, keys - sent)
        assert required <= keys, (cls.__name__, required - keys)


def test_what_is_read_is_written_back_the_same(written: list[dict[str, Any]]) -> None:
    for rec in written:
        cls = BY_TYPE.get(rec["type"])
        if cls is None:
            continue
        value = cls.from_dict(rec)
        assert cls.from_dict(value.to_dict()) == value, rec["type"]
        line = protocol.dumps({"type": cls.TYPE, **value.to_dict()})
        assert cls.from_dict(protocol.parse(line)) == value, rec["type"]


def test_a_record_of_a_script_that_failed_early_loads_as_before() -> None:
    """Missing fields: their defaults, else () for a tuple and None otherwise."""
    assert R.Gpu.from_dict({"index": 3}) == R.Gpu(3, *[None] * 11, (), None, None)  # type: ignore[arg-type]
    assert R.TorchInfo.from_dict({"importable": False}).devices == ()
    assert R.Filesystem.from_dict({"path": "/x"}).free_pct is None
    assert R.ProcInfo.from_dict({"pid": 7}).gpus == ()
    env = system.EnvReport.from_dict(None)
    assert (env.python, env.container, env.torch) == (None, None, None)
    assert R.Environment.from_dict({"container": {}}).container is None  # empty: none


def test_hostile_values_are_bounded() -> None:
    """A value of the wrong sort becomes what its kind says (where from_record raised or
    split a text: a tuple from what is no list is (), a nested record from what is no
    mapping is none or an empty one); what was read as it came still is."""
    gpu = R.Gpu.from_dict({"index": "x", "throttle_reasons": "abc", "power_draw_w": "inf"})
    assert (gpu.index, gpu.throttle_reasons, gpu.power_draw_w) == (0, (), float("inf"))
    torch = R.TorchInfo.from_dict({"devices": "abc", "version": 7})
    assert (torch.devices, torch.version) == ((), 7)
    assert R.TorchInfo.from_dict({"devices": [5]}).devices == (R.TorchDevice.from_dict({}),)
    assert R.Environment.from_dict({"container": "lxc"}).container is None
    assert R.ProcInfo.from_dict({"gpus": [0, None, [1]]}).gpus == (0, None, (1,))


def test_the_local_names_are_the_shared_classes() -> None:
    for name in R.__all__:
        if name == "Environment":
            assert issubclass(system.EnvReport, R.Environment)
        elif hasattr(system, name):
            assert getattr(system, name) is getattr(R, name), name
    assert set(R.__all__) - {"Environment", "SmiInfo"} <= set(system.__all__)


def test_the_env_report_keeps_its_json(written: list[dict[str, Any]]) -> None:
    """``env --json`` is the report's fields in the order they always had: host first."""
    rec = next(r for r in written if r["type"] == "env")
    report = system.EnvReport.from_dict(rec)
    keys = list(json.loads(to_json(report)))
    assert keys[:3] == ["host", "python", "python_executable"]
    assert keys[-6:] == ["container", "torch", "findings", "notes", "errors", "exit_code"]
