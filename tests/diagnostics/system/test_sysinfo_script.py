"""remote/sysinfo.py run directly, as it runs there: a subprocess, JSON lines out, exit code.

nvidia-smi is tests/fakes/nvidia-smi, found on PATH like the real one. The script runs with
``python -S`` (no site-packages): the standard library only, as a shipped file promises, and
no torch (one test runs it with the venv's torch, one with a fake torch package).
"""

from __future__ import annotations

import ast
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import remotekit.remote
from remotekit.remote.sysinfo import disk
from tests.harness import FAKES
from tests.smi import H100

SCRIPT = Path(remotekit.remote.__file__).with_name("sysinfo.py")
FAKE_SMI = FAKES / "nvidia-smi"
STALE_PID = 4194301


class Run:
    """One finished run of the script: its records, exit code, stderr and pid."""

    def __init__(self, proc: subprocess.Popen[str], stdout: str, stderr: str):
        self.pid = proc.pid
        self.code = proc.returncode
        self.stderr = stderr
        self.lines = stdout.splitlines()
        self.records = [json.loads(line) for line in self.lines]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == type_]

    def one(self, type_: str) -> dict[str, Any]:
        found = self.of(type_)
        assert len(found) == 1, (type_, self.records)
        return found[0]

    def codes(self, type_: str) -> list[str]:
        return [r["code"] for r in self.of(type_)]


def make_bin(folder: Path, *, smi: bool = True, scenario: str | None = None) -> Path:
    """A PATH folder with ``python3`` (this interpreter, for the fake's shebang) and, if
    ``smi``, a copy of the fake nvidia-smi (with a ``scenario`` file beside it if given)."""
    folder.mkdir(parents=True, exist_ok=True)
    py = folder / "python3"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    py.chmod(0o755)
    if smi:
        shutil.copy2(FAKE_SMI, folder / "nvidia-smi")
    if scenario is not None:
        (folder / "scenario").write_text(scenario + "\n")
    return folder


def run(
    *args: str,
    path: Path,
    scenario: str | None = None,
    extra_env: dict[str, str] | None = None,
    python: list[str] | None = None,
) -> Run:
    env = {"PATH": str(path), "LC_ALL": "C.UTF-8", **(extra_env or {})}
    if scenario is not None:
        env["FAKE_NVIDIA_SMI_SCENARIO"] = scenario
    argv = [*(python or [sys.executable, "-S"]), str(SCRIPT), *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    stdout, stderr = proc.communicate(timeout=120)
    return Run(proc, stdout, stderr)


@pytest.fixture
def smi_bin(tmp_path: Path) -> Path:
    return make_bin(tmp_path / "bin")


def gpu(run_: Run, index: int) -> dict[str, Any]:
    return next(g for g in run_.of("gpu") if g["index"] == index)


def warnings(run_: Run) -> list[tuple[str, Any]]:
    return [(w["code"], w.get("gpu")) for w in run_.of("warning")]


# --------------------------------------------------------------------------- the fake itself


def test_fake_follows_the_real_cli(smi_bin: Path) -> None:
    def smi(*args: str, scenario: str = "healthy") -> subprocess.CompletedProcess[str]:
        env = {"PATH": str(smi_bin), "FAKE_NVIDIA_SMI_SCENARIO": scenario}
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, env=env, timeout=30
        )

    listing = smi("-L").stdout.splitlines()
    assert len(listing) == 8
    assert listing[0].startswith(f"GPU 0: {H100} (UUID: GPU-")

    csv = smi("--query-gpu=memory.used,name,clocks.sm,power.draw", "--format=csv").stdout
    header, first = csv.splitlines()[:2]
    assert header == "memory.used [MiB], name, clocks.current.sm [MHz], power.draw [W]"
    assert first == f"71234 MiB, {H100}, 1980 MHz, 611.37 W"

    bad = smi("--query-gpu=index,no.such.field", "--format=csv,noheader,nounits")
    assert (bad.returncode, bad.stdout) == (
        2,
        'Field "no.such.field" is not a valid field to query.\n\n',
    )

    old = smi("--query-gpu=clocks_event_reasons.active", "--format=csv", scenario="old-driver")
    assert old.returncode == 2 and "clocks_event_reasons.active" in old.stdout
    assert smi("--query-gpu=index", "--format=csv,noheader").stdout.split() == list("01234567")

    none = smi("-L", scenario="no-driver")
    assert none.returncode == 9
    assert none.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate")

    apps = smi(
        "--query-compute-apps=pid,process_name,used_memory", "--format=csv", scenario="throttled"
    )
    lines = apps.stdout.splitlines()
    assert lines[0] == "pid, process_name, used_gpu_memory [MiB]"
    assert len(lines) == 1 + 7  # the idle GPU 6 holds no process


def test_fake_reads_its_scenario_file_and_env_wins(tmp_path: Path) -> None:
    folder = make_bin(tmp_path / "bin", scenario="ecc")
    from_file = run("gpu", path=folder)
    assert warnings(from_file) == [("ecc_uncorrected", 2), ("ecc_uncorrected", 6)]
    from_env = run("gpu", path=folder, scenario="healthy")
    assert warnings(from_env) == []


# --------------------------------------------------------------------------- gpu


def test_gpu_healthy(smi_bin: Path) -> None:
    r = run("gpu", path=smi_bin, scenario="healthy")
    assert r.code == 0
    assert r.one("done") == {
        "type": "done",
        "command": "gpu",
        "exit_code": 0,
        "warnings": 0,
        "errors": 0,
    }
    smi = r.one("smi")
    assert smi["path"] == str(smi_bin / "nvidia-smi")
    assert smi["throttle_field"] == "clocks_event_reasons.active"
    assert [g["index"] for g in r.of("gpu")] == list(range(8))
    g0 = gpu(r, 0)
    assert g0["uuid"].startswith("GPU-")
    del g0["uuid"]
    assert g0 == {
        "type": "gpu",
        "index": 0,
        "name": H100,
        "pstate": "P0",
        "utilization_pct": 97,
        "memory_used_mib": 71234,
        "memory_total_mib": 81559,
        "temperature_c": 52,
        "power_draw_w": 611.37,
        "power_limit_w": 700.0,
        "clocks_sm_mhz": 1980,
        "throttle_mask": 0,
        "throttle_reasons": [],
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
    }
    apps = r.of("gpu_process")
    assert [(a["gpu_index"], a["pid"], a["visible"]) for a in apps] == [
        (i, r.pid, True) for i in range(8)
    ]
    assert apps[0]["used_memory_mib"] == 71234 - 554
    torch = r.one("torch")
    assert torch["importable"] is False and "torch is not installed" in torch["error"]
    assert r.codes("note") == ["no_torch"]
    assert r.of("warning") == [] and r.of("error") == []


def test_gpu_throttled(smi_bin: Path) -> None:
    r = run("gpu", path=smi_bin, scenario="throttled")
    assert (r.code, r.one("done")["exit_code"]) == (1, 1)
    assert warnings(r) == [
        ("high_temperature", 3),
        ("throttle", 3),
        ("throttle", 5),
        ("throttle", 7),
    ]
    by_gpu = {(w["code"], w.get("gpu")): w for w in r.of("warning")}
    assert by_gpu["high_temperature", 3]["message"] == "GPU 3: temperature 88 C >= 85 C"
    assert by_gpu["throttle", 3]["reasons"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert "0x0000000000000060" in by_gpu["throttle", 3]["message"]
    assert by_gpu["throttle", 5]["reasons"] == ["sw_power_cap"]
    assert by_gpu["throttle", 7]["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    # idle (0x1) is reported but is not a problem
    assert (gpu(r, 6)["throttle_mask"], gpu(r, 6)["throttle_reasons"]) == (1, ["gpu_idle"])
    assert gpu(r, 3)["throttle_mask"] == 0x60 and gpu(r, 3)["clocks_sm_mhz"] == 1305
    assert [a["gpu_index"] for a in r.of("gpu_process")] == [0, 1, 2, 3, 4, 5, 7]


def test_gpu_temperature_threshold_is_configurable(smi_bin: Path) -> None:
    r = run("gpu", "--temp-threshold", "56", path=smi_bin, scenario="healthy")
    assert r.code == 1
    assert warnings(r) == [("high_temperature", 2), ("high_temperature", 5)]  # 58 C each


def test_gpu_fewer_than_declared_is_a_finding(smi_bin: Path) -> None:
    r = run("gpu", "--gpus", "8", path=smi_bin, scenario="lost-gpu")
    assert (r.code, r.one("done")["exit_code"]) == (1, 1)
    [lost] = r.of("warning")
    assert lost["code"] == "gpus_missing" and (lost["seen"], lost["declared"]) == (7, 8)
    assert lost["message"].startswith("7 GPU(s) seen where 8 are declared (gpus: 8)")
    assert [g["index"] for g in r.of("gpu")] == list(range(7))
    assert run("gpu", path=smi_bin, scenario="lost-gpu").code == 0  # nothing declared
    assert run("gpu", "--gpus", "8", path=smi_bin, scenario="healthy").code == 0
    more = run("gpu", "--gpus", "4", path=smi_bin, scenario="healthy")
    assert more.code == 0 and more.codes("note") == ["gpus_more", "no_torch"]


def test_gpu_ecc(smi_bin: Path) -> None:
    r = run("gpu", path=smi_bin, scenario="ecc")
    assert r.code == 1
    assert warnings(r) == [("ecc_uncorrected", 2), ("ecc_uncorrected", 6)]
    vol, agg = r.of("warning")
    assert vol["message"].startswith("GPU 2: 3 uncorrected ECC error(s) since the driver loaded")
    assert agg["message"].startswith("GPU 6: 12 uncorrected ECC error(s) in its lifetime")
    assert (gpu(r, 2)["ecc_uncorrected_volatile"], gpu(r, 2)["ecc_uncorrected_aggregate"]) == (3, 3)


def test_gpu_memory_of_an_invisible_pid(smi_bin: Path) -> None:
    if os.path.exists(f"/proc/{STALE_PID}"):
        pytest.skip(f"pid {STALE_PID} happens to exist here")
    r = run("gpu", path=smi_bin, scenario="stale-process")
    assert r.code == 1
    (w,) = r.of("warning")
    assert (w["code"], w["pid"], w["gpus"], w["memory_mib"]) == (
        "stale_gpu_memory",
        STALE_PID,
        [4, 5, 6, 7],
        4 * 70980,
    )
    assert "not visible here" in w["message"]
    visible = [(a["gpu_index"], a["visible"]) for a in r.of("gpu_process")]
    assert visible == [(i, i < 4) for i in range(8)]


def test_gpu_old_driver_retries_with_the_throttle_field(smi_bin: Path) -> None:
    r = run("gpu", path=smi_bin, scenario="old-driver")
    assert r.code == 0
    assert r.codes("note") == ["old_driver_field", "no_torch"]
    assert r.one("smi")["throttle_field"] == "clocks_throttle_reasons.active"
    assert [g["name"] for g in r.of("gpu")] == ["NVIDIA A100-SXM4-80GB"] * 8
    assert gpu(r, 7)["utilization_pct"] is None  # [N/A] in MIG mode
    assert gpu(r, 0)["throttle_mask"] == 0 and gpu(r, 0)["power_limit_w"] == 400.0


def test_gpu_no_driver_is_a_record_not_a_crash(smi_bin: Path) -> None:
    r = run("gpu", path=smi_bin, scenario="no-driver")
    assert (r.code, r.one("done")["exit_code"]) == (2, 2)
    (err,) = r.of("error")
    assert err["code"] == "no_driver"
    assert err["message"] == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    assert r.of("gpu") == [] and r.of("smi") == []
    assert r.one("torch")["importable"] is False  # torch's view is still given
    assert "Traceback" not in r.stderr


def test_gpu_without_nvidia_smi_is_a_note_unless_gpus_are_expected(tmp_path: Path) -> None:
    r = run("gpu", path=make_bin(tmp_path / "bin", smi=False))
    assert r.code == 0 and r.of("error") == []
    assert "no_gpu" in r.codes("note")
    (note,) = [n for n in r.of("note") if n["code"] == "no_gpu"]
    assert note["message"].startswith("no GPU here")
    r = run("gpu", "--gpu-expected", path=make_bin(tmp_path / "bin", smi=False))
    assert r.code == 2
    (err,) = r.of("error")
    assert err["code"] == "no_nvidia_smi"
    assert err["message"].startswith("nvidia-smi is not on PATH")
    assert "Traceback" not in r.stderr


# --------------------------------------------------------------------------- env


def write_fake_torch(root: Path, version: str) -> Path:
    pkg = root / "torch"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "cuda").mkdir()
    (pkg / "__init__.py").write_text(
        f"__version__ = {version!r}\nfrom torch import backends, cuda, version\n"
    )
    (pkg / "version.py").write_text("cuda = '12.4'\n")
    (pkg / "backends" / "__init__.py").write_text("from torch.backends import cudnn\n")
    (pkg / "backends" / "cudnn.py").write_text("def version():\n    return 90100\n")
    (pkg / "cuda" / "__init__.py").write_text(
        "from torch.cuda import nccl\n"
        "def is_available():\n    return False\n"
        "def device_count():\n    return 0\n"
    )
    (pkg / "cuda" / "nccl.py").write_text("def version():\n    return (2, 21, 5)\n")
    return root


@pytest.mark.parametrize(
    ("version", "cves"),
    [
        ("2.5.1+cu124", ["CVE-2025-32434", "CVE-2026-24747"]),
        ("2.6.0a0+ecf3bae40a", ["CVE-2025-32434", "CVE-2026-24747"]),
        ("2.9.1+cu128", ["CVE-2026-24747"]),
        ("2.10.0+cu128", []),
    ],
)
def test_env_torch_cves(tmp_path: Path, smi_bin: Path, version: str, cves: list[str]) -> None:
    fake = write_fake_torch(tmp_path / "site", version)
    r = run("env", path=smi_bin, extra_env={"PYTHONPATH": str(fake)})
    assert [w["cve"] for w in r.of("warning")] == cves
    assert r.code == (1 if cves else 0)
    torch = r.one("torch")
    assert {k: torch[k] for k in ("importable", "version", "cuda", "cudnn", "nccl")} == {
        "importable": True,
        "version": version,
        "cuda": "12.4",
        "cudnn": "90100",
        "nccl": "2.21.5",
    }
    assert (torch["cuda_available"], torch["device_count"]) == (False, 0)
    if "2.6.0a0" in version:
        assert "pre-release of 2.6" in r.of("warning")[0]["message"]


def test_env_host_facts_without_torch(smi_bin: Path) -> None:
    r = run("env", path=smi_bin, extra_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.code == 0
    env = r.one("env")
    assert env["python"] == platform.python_version()
    assert env["python_executable"] == sys.executable
    assert env["hostname"] == socket.gethostname()
    assert env["kernel"] == os.uname().release
    assert env["cpu_count"] == os.cpu_count()
    assert env["cpu_usable"] == len(os.sched_getaffinity(0))
    assert env["cuda_visible_devices"] == "0,1"
    assert 0 < env["mem_available_mib"] <= env["mem_total_mib"]
    container = env["container"]
    assert isinstance(container["detected"], bool) and container["evidence"]
    if os.path.exists("/.dockerenv"):
        assert "/.dockerenv exists" in container["evidence"]
    assert r.one("torch")["importable"] is False
    assert r.codes("note") == ["no_torch"]


def test_env_with_the_real_torch(smi_bin: Path) -> None:
    r = run("env", path=smi_bin, python=[sys.executable])
    torch = r.one("torch")
    assert torch["importable"] is True
    assert torch["version"] == metadata.version("torch")
    assert isinstance(torch["cuda_available"], bool)
    assert r.code == (1 if r.of("warning") else 0)
    assert all(w["code"] == "torch_cve" for w in r.of("warning"))


# --------------------------------------------------------------------------- disk


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    write(root / "run" / "checkpoint-100" / "model.safetensors", 3000)
    write(root / "run" / "checkpoint-100" / "optimizer.pt", 5000)
    write(root / "run" / "checkpoint-100" / "trainer_state.json", 100)
    write(root / "run" / "final.pt", 6000)
    write(root / "dcp" / ".metadata", 50)
    write(root / "dcp" / "__0_0.distcp", 4000)
    write(root / "dcp" / "__1_0.distcp", 4000)
    write(root / "data" / "big.bin", 10000)
    return root


def test_disk_sizes_files_and_checkpoints(tree: Path, smi_bin: Path) -> None:
    r = run("disk", "--top", "3", "--min-free-pct", "0", str(tree), path=smi_bin)
    assert r.code == 0, r.records
    fs = r.one("fs")
    vfs = os.statvfs(tree)
    assert (fs["path"], fs["exists"], fs["checked"]) == (str(tree), True, str(tree))
    assert fs["total_bytes"] == vfs.f_blocks * vfs.f_frsize
    assert 0 <= fs["free_bytes"] <= fs["total_bytes"]
    assert fs["inodes_total"] in (vfs.f_files, None)
    walk = r.one("walk")
    assert (walk["files"], walk["bytes"], walk["truncated"], walk["errors"]) == (8, 32150, None, 0)
    assert [(f["path"], f["size_bytes"], f["checkpoint"]) for f in r.of("file")] == [
        (str(tree / "data" / "big.bin"), 10000, False),
        (str(tree / "run" / "final.pt"), 6000, True),
        (str(tree / "run" / "checkpoint-100" / "optimizer.pt"), 5000, True),
    ]
    ckpt = r.one("checkpoint")
    # the whole checkpoint-100 directory is one save (8100 B), bigger than final.pt or dcp/
    assert (ckpt["path"], ckpt["size_bytes"], ckpt["kind"]) == (
        str(tree / "run" / "checkpoint-100"),
        8100,
        "dir",
    )


def test_disk_dcp_directory_is_one_checkpoint(tmp_path: Path, smi_bin: Path) -> None:
    root = tmp_path / "ckpts"
    write(root / "latest" / ".metadata", 50)
    write(root / "latest" / "__0_0.distcp", 4000)
    write(root / "latest" / "__1_0.distcp", 4000)
    write(root / "small.pt", 10)
    r = run("disk", "--min-free-pct", "0", str(root), path=smi_bin)
    ckpt = r.one("checkpoint")
    assert (ckpt["path"], ckpt["size_bytes"], ckpt["kind"]) == (str(root / "latest"), 8050, "dir")


def test_disk_low_space_threshold(tree: Path, smi_bin: Path) -> None:
    r = run("disk", "--min-free-pct", "100", str(tree), path=smi_bin)
    assert r.code == 1
    inodes = ["low_inodes"] if r.one("fs")["inodes_total"] else []  # btrfs & co. report none
    assert r.codes("warning") == ["low_space", *inodes]
    assert all(w["message"].endswith("< 100%)") for w in r.of("warning"))


def test_disk_checkpoint_that_will_not_fit(tmp_path: Path, smi_bin: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    vfs = os.statvfs(root)
    huge = root / "huge.pt"
    try:  # sparse: its size is bigger than the free space, its blocks are not
        with open(huge, "wb") as f:
            f.truncate(vfs.f_bavail * vfs.f_frsize + (1 << 30))
    except OSError as exc:
        pytest.skip(f"this filesystem refuses a sparse file that big: {exc}")
    r = run("disk", "--min-free-pct", "0", str(root), path=smi_bin)
    assert r.code == 1
    (w,) = r.of("warning")
    assert (w["code"], w["path"]) == ("checkpoint_wont_fit", str(huge))
    assert "will not fit" in w["message"]


def test_disk_missing_path_measures_its_parent(tmp_path: Path, smi_bin: Path) -> None:
    missing = tmp_path / "not" / "yet"
    r = run("disk", "--min-free-pct", "0", str(missing), path=smi_bin)
    assert r.code == 1
    fs = r.one("fs")
    assert (fs["exists"], fs["checked"]) == (False, str(tmp_path))
    assert fs["total_bytes"] > 0
    assert r.codes("warning") == ["missing_path"]


def test_disk_walk_is_bounded_and_nested_paths_walk_once(tree: Path, smi_bin: Path) -> None:
    r = run(
        "disk",
        "--min-free-pct",
        "0",
        "--max-entries",
        "4",
        str(tree),
        str(tree / "run"),
        path=smi_bin,
    )
    outer, inner = r.of("walk")
    assert outer["truncated"] == "max_entries"
    assert inner == {"type": "walk", "root": str(tree / "run"), "inside": str(tree)}
    assert r.codes("note") == ["walk_truncated"]
    assert len(r.of("fs")) == 2


# --------------------------------------------------------------------------- procs


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def sleeper(procs: list[subprocess.Popen[bytes]], *extra: str) -> int:
    p = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(120)", *extra])
    procs.append(p)
    return p.pid


def test_procs_lists_gpu_holders(smi_bin: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    pid = sleeper(sleepers)
    r = run(
        "procs", path=smi_bin, scenario="healthy", extra_env={"FAKE_NVIDIA_SMI_APP_PIDS": str(pid)}
    )
    assert r.code == 0, r.of("warning")
    (me,) = [p for p in r.of("proc") if p["pid"] == pid]
    assert me["python"] is True and me["ppid"] == os.getpid()
    assert me["cmdline"] == f"{sys.executable} -S -c import time; time.sleep(120)"
    assert me["gpus"] == list(range(8))
    assert me["gpu_memory_mib"] == sum(71234 + 17 * i - 554 for i in range(8))
    assert me["age_s"] >= 0 and me["rss_mib"] > 0
    # neither the script nor its ancestors (here: this pytest) are listed
    assert not {r.pid, os.getpid()} & {p["pid"] for p in r.of("proc")}


def test_procs_stopped_holder_and_shared_gpu(
    smi_bin: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    a, b = sleeper(sleepers), sleeper(sleepers)
    os.kill(a, signal.SIGSTOP)
    for _ in range(1000):  # the stop is asynchronous; wait until /proc says so
        with open(f"/proc/{a}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                break
        time.sleep(0.01)
    r = run("procs", path=smi_bin, extra_env={"FAKE_NVIDIA_SMI_APP_PIDS": f"{a},{b}"})
    assert r.code == 1
    assert r.codes("warning") == ["stopped_gpu_holder"] + ["shared_gpu"] * 8
    stopped = r.of("warning")[0]
    assert stopped["pid"] == a and "is stopped (T)" in stopped["message"]
    assert r.of("warning")[1]["pids"] == sorted([a, b])


def test_procs_hide_secret_arguments(
    smi_bin: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    pid = sleeper(sleepers, "--api-key", "SEKRIT1", "--wandb-token=SEKRIT2", "HF_PASSWORD=SEKRIT3")
    r = run("procs", path=smi_bin)
    (me,) = [p for p in r.of("proc") if p["pid"] == pid]
    assert me["cmdline"].endswith("--api-key *** --wandb-token=*** HF_PASSWORD=***")
    assert "SEKRIT" not in "\n".join(r.lines)


def test_procs_without_nvidia_smi(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    pid = sleeper(sleepers)
    r = run("procs", path=make_bin(tmp_path / "bin", smi=False))
    assert r.code == 0
    assert r.codes("note") == ["no_nvidia_smi"]
    assert pid in [p["pid"] for p in r.of("proc")]


# --------------------------------------------------------------------------- Python 3.8


def test_sources_parse_as_python_38() -> None:
    for path in (SCRIPT, FAKE_SMI):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def _python38() -> str | None:
    found = [os.environ.get("REMOTEKIT_PYTHON38", ""), shutil.which("python3.8") or ""]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for exe in found:
        if exe and ".pyenv/shims" not in exe and os.access(exe, os.X_OK):
            return exe
    return None


def test_runs_on_python_38(tmp_path: Path, tree: Path) -> None:
    exe = _python38()
    if exe is None:
        pytest.skip("no python3.8 here (set REMOTEKIT_PYTHON38 to one)")
    py = [exe, "-S"]
    folder = make_bin(tmp_path / "bin")
    assert run("gpu", path=folder, scenario="throttled", python=py).code == 1
    assert run("gpu", path=folder, scenario="old-driver", python=py).code == 0
    env = run("env", path=folder, python=py)
    assert env.code == 0 and env.one("env")["python"].startswith("3.8.")
    disk = run("disk", "--min-free-pct", "0", str(tree), path=folder, python=py)
    assert disk.code == 0 and disk.one("checkpoint")["size_bytes"] == 8100
    assert run("procs", path=folder, python=py).code == 0


@pytest.mark.parametrize(
    "args, said",
    [
        ([], "the command is one of gpu, env, disk, procs, not ''"),
        (["nvme"], "the command is one of gpu, env, disk, procs, not 'nvme'"),
        (["disk", "--top", "ten", "/"], "disk: --top takes a number, not 'ten'"),
        (["disk", "--tops=3", "/"], "disk: unknown option --tops=3"),
        (["disk", "--min-free-pct"], "disk: --min-free-pct needs a value"),
        (["disk"], "disk: a path is needed"),
        (["env", "/data"], "env: no path is taken"),
        (["procs", "--all=yes"], "procs: --all takes no value"),
    ],
)
def test_a_command_line_it_cannot_read_exits_2_saying_what(
    args: list[str], said: str, tmp_path: Path
) -> None:
    """The script reads its command line itself (argparse's import and parsers cost a step
    ~4 ms); a mistake still exits 2 before any record, with the usage and what was wrong."""
    r = run(*args, path=make_bin(tmp_path / "bin"))
    assert (r.code, r.records) == (2, [])
    assert r.stderr.splitlines()[-1] == f"sysinfo.py: error: {said}"
    assert r.stderr.startswith("usage: sysinfo.py {gpu,env,disk,procs}")


def test_options_are_read_in_both_spellings_and_paths_after_the_separator(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}").write_bytes(b"x" * (i + 1) * 1000)
    r = run("disk", "--top=1", "--min-free-pct", "0", "--", str(folder), path=make_bin(tmp_path))
    assert r.code == 0, r.stderr
    assert [f["path"] for f in r.of("file")] == [str(folder / "f2")]


def test_disk_names_checkpoints_by_their_names(tmp_path: Path) -> None:
    """A ``.bin`` is a checkpoint when its name says so (pytorch_model*, *optim*,
    *model_states*) and a folder when it is named like a save (checkpoint-N, GLOBAL_STEP7:
    any case); other .bin files and folders are not."""
    root = tmp_path / "w"
    write(root / "pytorch_model-00001-of-00002.bin", 7000)
    write(root / "zero" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.bin", 6000)
    write(root / "data" / "tokens.bin", 9000)
    write(root / "Checkpoint_12" / "weights.dat", 500)
    write(root / "GLOBAL_STEP7" / "mp_rank_00_model_states.bin", 400)
    write(root / "checkpoints" / "notes.txt", 300)  # "checkpoints" is not checkpoint-N
    r = run("disk", "--top", "9", "--min-free-pct", "0", str(root), path=make_bin(tmp_path))
    assert r.code == 0, r.stderr
    assert {Path(f["path"]).name: f["checkpoint"] for f in r.of("file")} == {
        "tokens.bin": False,
        "pytorch_model-00001-of-00002.bin": True,
        "bf16_zero_pp_rank_0_mp_rank_00_optim_states.bin": True,
        "weights.dat": False,
        "mp_rank_00_model_states.bin": True,
        "notes.txt": False,
    }
    ckpt = r.one("checkpoint")  # the largest save on the filesystem: the sharded weights
    assert (Path(ckpt["path"]).name, ckpt["kind"]) == ("pytorch_model-00001-of-00002.bin", "file")


def test_checkpoint_names_are_told_as_the_patterns_told_them() -> None:
    """The names are told by string tests, not regexes (the disk command compiles none):
    they decide as the patterns they replaced, name for name. Asked of the disk command's
    module, which the laptop imports as the package it is there."""
    file_re = r"^(pytorch_model.*|.*optim.*|.*model_states.*)\.bin$"
    dir_re = r"(?i)^(checkpoint|ckpt|step|global_step|iter|epoch)[-_]?\d+$"
    files = ["pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "Pytorch_model.bin",
             "optim.bin", "x_optim_states.bin", "mp_rank_00_model_states.bin", "model.bin",
             "tokens.bin", "optim.bin.bak", "optim.BIN", ".bin", "bin", "optimizer.pt",
             "a.safetensors", "notes.txt", "pytorch_model"]  # fmt: skip
    dirs = ["checkpoint-500", "checkpoint500", "checkpoint_5", "Checkpoint_12", "GLOBAL_STEP7",
            "global_step", "step", "step-", "step-_5", "step__5", "iter_0001000", "epoch3",
            "ckpt-1", "checkpoints", "checkpoints-1", "my_step5", "step5a", "5", "-5", "",
            "steps5", "EPOCH-10", "iter_"]  # fmt: skip
    told_files = [disk.is_checkpoint_file(n) for n in files]
    told_dirs = [disk.is_checkpoint_dir(n) for n in dirs]
    suffixes = (".pt", ".pth", ".ckpt", ".safetensors", ".distcp", ".pkl")
    assert dict(zip(files, told_files)) == {
        n: n.endswith(suffixes) or bool(re.match(file_re, n)) for n in files
    }
    assert dict(zip(dirs, told_dirs)) == {n: bool(re.match(dir_re, n)) for n in dirs}


def test_disk_imports_only_what_it_uses(tmp_path: Path) -> None:
    """The disk command (the one a fleet asks of every host) imports none of what only the
    other commands need, nor threading for the records' lock: each is a fresh step's time."""
    r = run(
        "disk",
        "--min-free-pct",
        "0",
        str(tmp_path),
        path=make_bin(tmp_path / "bin"),
        python=[sys.executable, "-S", "-X", "importtime"],
    )
    assert r.code == 0, r.stderr
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert "remotekit.remote.protocol" in imported  # what is read is the import list
    for name in ("threading", "subprocess", "socket", "csv", "platform", "shutil", "argparse"):
        assert name not in imported, name
