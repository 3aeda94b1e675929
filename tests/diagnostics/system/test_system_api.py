"""The gpu / env / disk / procs diagnostics and ``diagnose`` through the engine, on the local target.

The fake nvidia-smi (tests/fakes) is found through the ``PATH`` the step sets there. Most
tests use a target whose interpreter runs ``python -S`` (no torch: quick, and the "torch is
missing" path); the ones about torch use the plain ``remotekit.local_target()``. What only the
invoke tasks do (exit code, ``--json``, an engine error as exit 2): tests/cli/test_cli_diagnostics.py.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import types
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.diagnostics import diagnose as dg
from remotekit.diagnostics import system
from remotekit.render import to_json
from tests.conftest import open_local
from tests.runtimes import wait_for
from tests.smi import H100, make_bin_dir, make_notorch, smi_env

TORCH_NO_CUDA = "nvidia-smi sees 8 GPU(s) but torch {} (a CPU-only build) cannot use CUDA"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    return make_bin_dir(tmp_path / "bin")


@pytest.fixture
def notorch(tmp_path: Path, agent: bool | None) -> remotekit.Target:
    return make_notorch(tmp_path, agent)


# --------------------------------------------------------------------------- gpu


def test_gpu_status_through_the_engine(bin_dir: Path, agent: bool | None) -> None:
    t = open_local(agent)
    seen: list[str] = []
    report = system.gpu_status(
        t, env=smi_env(bin_dir), timeout=120, on_record=lambda r: seen.append(r["type"])
    )
    assert report.host == "local"
    assert report.nvidia_smi == str(bin_dir / "nvidia-smi")
    assert report.throttle_field == "clocks_event_reasons.active"
    assert [g.index for g in report.gpus] == list(range(8))
    g0 = report.gpus[0]
    assert (g0.name, g0.memory_used_mib, g0.temperature_c, g0.power_draw_w) == (
        H100,
        71234,
        52,
        611.37,
    )
    assert g0.throttle_reasons == () and isinstance(g0.throttle_reasons, tuple)
    assert all(p.visible for p in report.processes) and len(report.processes) == 8
    assert report.torch is not None and report.torch.importable
    torch_version = metadata.version("torch")
    assert report.torch.version == torch_version
    if report.torch.cuda is None:  # a CPU wheel, as in CI: torch cannot use the fake's GPUs
        assert report.findings == (TORCH_NO_CUDA.format(torch_version),)
        assert report.exit_code == 1
    assert report.errors == ()
    assert seen[0] == "smi" and seen[-1] == "done"


def test_gpu_status_findings_and_exit_codes(notorch: remotekit.Target, bin_dir: Path) -> None:
    hot = system.gpu_status(notorch, env=smi_env(bin_dir, "throttled"))
    assert hot.exit_code == 1
    assert hot.findings[0] == "GPU 3: temperature 88 C >= 85 C"
    assert [f.split(":")[0] for f in hot.findings] == ["GPU 3", "GPU 3", "GPU 5", "GPU 7"]
    assert hot.gpus[3].throttle_reasons == ("sw_thermal_slowdown", "hw_thermal_slowdown")
    assert hot.torch is not None and not hot.torch.importable
    assert hot.notes == (hot.torch.error,)

    cool = system.gpu_status(notorch, env=smi_env(bin_dir, "throttled"), temp_threshold=90)
    assert [f.split(":")[0] for f in cool.findings] == ["GPU 3", "GPU 5", "GPU 7"]

    none = system.gpu_status(notorch, env=smi_env(bin_dir, "no-driver"))
    assert none.exit_code == 2 and none.gpus == ()
    assert none.errors[0].startswith("NVIDIA-SMI has failed because it couldn't communicate")
    assert none.notes[-1] == system.LAYERS_HINT  # where to look next: which level lost it
    assert system.LAYERS_HINT not in hot.notes  # hot GPUs were not lost


def test_gpu_status_without_nvidia_smi(notorch: remotekit.Target, tmp_path: Path) -> None:
    report = system.gpu_status(notorch, env={"PATH": str(tmp_path)})
    assert report.exit_code == 0 and report.errors == ()  # a CPU host: a note, not a failure
    assert any(n.startswith("no GPU here") for n in report.notes)
    report = system.gpu_status(notorch, env={"PATH": str(tmp_path)}, gpu_expected=True)
    assert report.exit_code == 2
    assert report.errors == (
        f"nvidia-smi is not on PATH ({tmp_path}): no NVIDIA driver utilities here",
    )


def test_render_gpu_and_json(notorch: remotekit.Target, bin_dir: Path) -> None:
    report = system.gpu_status(notorch, env=smi_env(bin_dir, "ecc"))
    assert report.exit_code == 1
    text = system.render_gpu(report)
    assert H100 in text and "THROTTLE" in text
    assert "warning: GPU 2: 3 uncorrected ECC error(s)" in text
    assert text.rstrip().endswith("gpu on local: 2 finding(s)")

    doc = json.loads(to_json(report, indent=2))
    assert doc["exit_code"] == 1 and len(doc["gpus"]) == 8
    assert doc["gpus"][2]["ecc_uncorrected_volatile"] == 3


def test_an_engine_error_is_raised(notorch: remotekit.Target, bin_dir: Path) -> None:
    with pytest.raises(remotekit.StepTimeout, match=r"^\[host 'local', step 'gpu'\] timed out"):
        system.gpu_status(notorch, timeout=0.001, env=smi_env(bin_dir))
    with pytest.raises(remotekit.StepTimeout, match="timed out"):
        system.environment(notorch, timeout=0.001)


# --------------------------------------------------------------------------- env


def test_environment_with_torch(agent: bool | None) -> None:
    report = system.environment(open_local(agent), timeout=120)
    assert report.python == platform.python_version()
    assert report.python_executable == sys.executable
    assert report.cpu_count == os.cpu_count()
    assert report.torch is not None and report.torch.version == metadata.version("torch")
    assert report.container is not None and isinstance(report.container.evidence, tuple)
    major, minor = (int(x) for x in report.torch.version.split(".")[:2])
    expected = ["CVE-2025-32434"] if (major, minor) < (2, 6) else []
    expected += ["CVE-2026-24747"] if (major, minor) < (2, 10) else []
    assert [f.split(" is affected by ")[1].split(" ")[0] for f in report.findings] == expected
    assert report.exit_code == (1 if expected else 0) and report.errors == ()
    assert "python" in system.render_env(report)


def test_environment_without_torch(notorch: remotekit.Target) -> None:
    report = system.environment(notorch, env={"CUDA_VISIBLE_DEVICES": "3"})
    assert report.exit_code == 0 and report.findings == ()
    assert report.cuda_visible_devices == "3"
    assert report.torch is not None and not report.torch.importable
    assert report.notes and "torch is not installed" in report.notes[0]


# --------------------------------------------------------------------------- disk


def test_disk_usage_defaults_to_workdir_and_checkpoints(tmp_path: Path, agent: bool | None) -> None:
    work, ckpt = tmp_path / "work", tmp_path / "ckpt"
    (work / "data").mkdir(parents=True)
    (work / "data" / "shard.bin").write_bytes(b"\0" * 3000)
    (ckpt / "step_200").mkdir(parents=True)
    (ckpt / "step_200" / "model.pt").write_bytes(b"\0" * 2000)
    (ckpt / "step_200" / "optim.pt").write_bytes(b"\0" * 4000)
    t = open_local(agent, workdir=str(work), checkpoints=str(ckpt), python=sys.executable)
    report = system.disk_usage(t, min_free_pct=0, top=2)
    assert [f.path for f in report.filesystems] == [str(work), str(ckpt)]
    assert [(w.root, w.files, w.bytes) for w in report.walks] == [
        (str(work), 1, 3000),
        (str(ckpt), 2, 6000),
    ]
    assert [(f.size_bytes, f.checkpoint) for f in report.largest_files] == [
        (4000, True),
        (3000, False),
    ]
    (c,) = report.checkpoints
    assert (c.path, c.size_bytes, c.kind) == (str(ckpt / "step_200"), 6000, "dir")
    assert report.exit_code == 0
    missing = system.disk_usage(t, [str(tmp_path / "missing")], min_free_pct=0)
    assert missing.exit_code == 1
    text = system.render_disk(missing)
    assert "(missing)" in text and "warning: " in text


# --------------------------------------------------------------------------- procs


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


def test_processes_through_the_engine(
    notorch: remotekit.Target, bin_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    env = smi_env(bin_dir, "stale-process", FAKE_NVIDIA_SMI_APP_PIDS=str(sleeper.pid))
    report = system.processes(notorch, env=env)
    (p,) = [p for p in report.processes if p.pid == sleeper.pid]
    assert p.python and p.gpus == (0, 1, 2, 3) and p.gpu_memory_mib is not None
    assert [g.pid for g in report.gpu_processes if not g.visible] == [4194301] * 4
    assert report.exit_code == 1 and len(report.findings) == 1
    assert "not visible here" in report.findings[0]
    text = system.render_procs(report)
    assert "PID (NOT VISIBLE HERE)" in text and str(sleeper.pid) in text


def live_children(pid: int) -> list[int]:
    """The processes (not zombies) whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError):
            continue
        if state != "Z" and int(ppid) == pid:
            found.append(int(stat.parent.name))
    return found


def holding_torch(pid: int) -> list[int]:
    """The live children of ``pid`` that have torch's libraries mapped (the agent's warm
    process; its other children, a spare runner or a call's worker, do not)."""
    found = []
    for child in live_children(pid):
        try:
            maps = Path(f"/proc/{child}/maps").read_text()
        except OSError:
            continue
        if "libtorch" in maps:
            found.append(child)
    return found


def test_with_the_agent_only_gpu_and_env_ask_for_torch(bin_dir: Path, tmp_path: Path) -> None:
    """A step that asks for torch starts the agent's warm process (a child that imports torch
    once and stays); disk and procs must not start it: they do not use torch. (About the
    agent: one path only.) The agent keeps other children between steps (the next step's
    runner, forked ahead), so the warm process is told by what it has mapped: the target's
    Python is this one, with torch."""
    env = smi_env(bin_dir)
    (tmp_path / "work").mkdir()
    with open_local(True, workdir=str(tmp_path / "work")) as t:
        agent = int(t.run(["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"]).stdout)
        system.disk_usage(t, [str(tmp_path)], env=env)
        system.processes(t, env=env)
        assert holding_torch(agent) == []
        system.environment(t, env=env)
        system.gpu_status(t, env=env)
        wait_for("one warm process", lambda: len(holding_torch(agent)) == 1, timeout=10)


# --------------------------------------------------------------------------- diagnose


def test_diagnose_runs_every_section_in_order(
    notorch: remotekit.Target, bin_dir: Path, tmp_path: Path
) -> None:
    t = notorch
    seen: list[tuple[str, str]] = []
    report = dg.diagnose(
        t, env=smi_env(bin_dir, "ecc"), on_section=lambda s: seen.append((s.name, s.status))
    )
    # disk is "findings" only on a host with less than 10% free: not this test's business
    assert seen[3] == ("ckpt-scan", "skipped") and seen[2][1] in ("ok", "findings")
    assert seen[:2] == [("env", "ok"), ("gpu", "findings")]
    assert report.exit_code == 1
    assert report.findings[0].startswith("[gpu] GPU 2: 3 uncorrected ECC error(s)")
    assert isinstance(report.section("gpu").report, system.GpuReport)  # type: ignore[union-attr]
    skipped = report.section("ckpt-scan")
    assert (
        skipped is not None
        and skipped.error
        == "no path given (--checkpoints) and no `checkpoints:` for this host in hosts.yaml"
    )
    assert (
        report.summary[3]
        == "ckpt-scan: skipped (no path given (--checkpoints) and no `checkpoints:` for this host in hosts.yaml)"
    )
    off = dg.diagnose(t, checkpoints=str(tmp_path), include_ckpt=False, env=smi_env(bin_dir))
    assert off.section("ckpt-scan").error == "not requested"  # type: ignore[union-attr]


def test_diagnose_a_failing_section_does_not_stop_the_others(
    notorch: remotekit.Target, bin_dir: Path
) -> None:
    report = dg.diagnose(notorch, env=smi_env(bin_dir), timeouts={"gpu": 0.001}, include_ckpt=False)
    statuses = [s.status for s in report.sections]
    assert statuses[:2] == ["ok", "failed"] and statuses[3] == "skipped"
    assert statuses[2] in ("ok", "findings")  # disk ran all the same
    gpu = report.section("gpu")
    assert gpu is not None and gpu.exit_code == 2 and gpu.report is None
    assert gpu.error is not None and "timed out after 0.001 s" in gpu.error
    assert report.exit_code == 2
    with pytest.raises(ValueError, match="unknown section"):
        dg.diagnose(notorch, timeouts={"gpus": 1.0})


@pytest.fixture
def fake_scanner(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Stands in for remotekit.diagnostics.checkpoints (another module's contract)."""
    calls: list[dict[str, Any]] = []
    state = types.SimpleNamespace(calls=calls, result=None, error=None)

    def scan_checkpoints(target: Any, path: str, *, timeout: float | None = None) -> Any:
        calls.append({"path": path, "timeout": timeout})
        if state.error is not None:
            raise state.error
        return state.result

    module = types.ModuleType("remotekit.diagnostics.checkpoints")
    module.scan_checkpoints = scan_checkpoints  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "remotekit.diagnostics.checkpoints", module)
    return state


def test_diagnose_ckpt_scan_contract(
    notorch: remotekit.Target, bin_dir: Path, fake_scanner: types.SimpleNamespace, tmp_path: Path
) -> None:
    t = open_local(
        notorch.spec.agent,
        python=notorch.spec.python,
        workdir=notorch.spec.workdir,
        checkpoints=str(tmp_path),
    )
    fake_scanner.result = types.SimpleNamespace(
        exit_code=1, findings=["step_100: 3 NaN in fc.weight"]
    )
    report = dg.diagnose(t, env=smi_env(bin_dir), timeouts={"ckpt-scan": 42.0})
    assert fake_scanner.calls == [{"path": str(tmp_path), "timeout": 42.0}]
    ckpt = report.section("ckpt-scan")
    assert ckpt is not None and (ckpt.status, ckpt.findings) == (
        "findings",
        ("step_100: 3 NaN in fc.weight",),
    )
    assert "[ckpt-scan] step_100: 3 NaN in fc.weight" in report.findings

    fake_scanner.error = RuntimeError("boom")
    broken = dg.diagnose(t, checkpoints="/elsewhere", env=smi_env(bin_dir))
    assert fake_scanner.calls[-1]["path"] == "/elsewhere"
    ckpt = broken.section("ckpt-scan")
    assert ckpt is not None and (ckpt.status, ckpt.error) == ("failed", "RuntimeError: boom")
    assert [s.name for s in broken.sections if s.report is not None] == ["env", "gpu", "disk"]


def test_diagnose_sections_render_and_json(notorch: remotekit.Target, bin_dir: Path) -> None:
    shown: list[str] = []
    report = dg.diagnose(
        notorch,
        env=smi_env(bin_dir, "throttled"),
        on_section=lambda s: shown.append(dg.render_section(s)),
    )
    text = "\n".join(shown)
    assert report.exit_code == 1
    assert text.index("== env: ok") < text.index("== gpu: findings") < text.index("== ckpt-scan")
    assert "== ckpt-scan: skipped\nno path given (--checkpoints) and no `checkpoints:`" in text
    assert "warning: GPU 3: temperature 88 C >= 85 C" in text  # the gpu section's own table

    broken = dg.diagnose(notorch, env=smi_env(bin_dir, "no-driver"))
    doc = json.loads(to_json(broken, indent=2))
    assert broken.exit_code == doc["exit_code"] == 2
    assert [s["name"] for s in doc["sections"]] == list(dg.SECTIONS)
    assert doc["sections"][1]["status"] == "failed"
    assert doc["sections"][1]["error"].startswith("NVIDIA-SMI has failed")
