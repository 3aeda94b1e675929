"""The Python API as scripts and notebooks see it: results that explain themselves.

``str()`` of every report is what the CLI prints for it, ``repr()`` is one line, Jupyter gets
HTML with the findings first, and a fleet outcome says why it failed in one place whichever
layer failed (the transport, the step, the diagnostic's own records).
"""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

import pytest
import torch

import remotekit
from remotekit.diagnostics import checkpoints, system
from remotekit.diagnostics.base import Report
from tests.conftest import write_inventory
from tests.test_cli import cli


def reports(t: remotekit.Target, tmp_path: Path) -> list[Report]:
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save({"w": torch.tensor([1.0, float("nan")])}, ck / "bad.pt")
    return [
        system.environment(t),
        system.disk_usage(t, str(tmp_path)),
        system.processes(t),
        t.ping(),
        checkpoints.scan_checkpoints(t, str(ck)),
    ]


def test_str_is_render_and_repr_is_one_line(local: remotekit.Target, tmp_path: Path) -> None:
    for r in reports(local, tmp_path):
        name = type(r).__name__
        assert str(r) == r.render() and str(r).strip(), name
        assert "\n" not in repr(r) and len(repr(r)) < 200, repr(r)
        assert repr(r).startswith(f"<{name}"), repr(r)


def test_html_shows_the_findings_first_and_escapes(local: remotekit.Target, tmp_path: Path) -> None:
    scan = reports(local, tmp_path)[-1]
    assert scan.findings, scan.render()
    page = scan._repr_html_()
    first = page.index("finding:")
    assert first < page.index("<pre>")
    assert "nan" in page.lower()
    r = local.run(["sh", "-c", "echo '<b>&'; exit 3"], check=False)
    assert "&lt;b&gt;&amp;" in r._repr_html_() and "<b>&" not in r._repr_html_()
    assert str(r).splitlines()[0] == "<b>&" and "exit 3" in str(r).splitlines()[-1]


def test_str_of_a_report_is_what_the_cli_prints(local: remotekit.Target, tmp_path: Path) -> None:
    env = system.environment(local)
    out = cli("env", "--host", "local")
    stable = [ln for ln in env.render().splitlines() if not ln.startswith("memory")]
    for line in stable:
        assert line in out.stdout, (line, out.stdout)


def test_a_failed_outcome_says_why_whatever_layer_failed(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """The README's fleet example printed ``local failed ()``: a diagnostic that failed on
    its own records (no nvidia-smi) had no ``error``; ``reason`` holds it either way."""
    (tmp_path / "bin").mkdir()
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {
            # says it has GPUs, so no nvidia-smi is a failure, not a "no GPU here" note
            "nogpu": {"env": {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}, "gpus": 1},
            "dead": {"ssh": "root@127.0.0.1:1", "known_hosts": str(tmp_path / "kh")},
        },
    )
    with remotekit.fleet([inv.target("nogpu"), inv.target("dead")]) as f:
        gpu, dead = f.map(lambda t: system.gpu_status(t, timeout=60))
        failed_run, _ = f.run(["sh", "-c", "echo boom >&2; exit 4"], check=False)
    assert gpu.status == "failed" and gpu.error is None
    assert "nvidia-smi" in gpu.reason, gpu.reason
    assert dead.error is not None and "connection refused" in dead.reason
    assert "exited with 4" in failed_run.reason and "boom" in failed_run.reason
    assert str(gpu).startswith("nogpu: failed\n") and "nvidia-smi is not on PATH" in str(gpu)
    ok = remotekit.fleet([inv.target("nogpu")]).run(["true"])[0]
    assert ok.reason == "" and str(ok).startswith("nogpu: ok")
    assert repr(ok) == "<HostOutcome host='nogpu' exit_code=0>"


def test_remotekits_own_steps_are_not_called_commands(
    local: remotekit.Target, tmp_path: Path
) -> None:
    with pytest.raises(remotekit.StepFailed) as info:
        local.get(str(tmp_path / "nothere.pt"), tmp_path / "x.pt")
    msg = str(info.value)
    assert "command get" not in msg
    assert f"get {tmp_path / 'nothere.pt'} {tmp_path / 'x.pt'} failed (exit 1)" in msg
    assert "No such file" in msg


def test_ping_names_the_address_once(tmp_path: Path) -> None:
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {"dead": {"ssh": "root@127.0.0.1:1", "known_hosts": str(tmp_path / "kh")}},
    )
    with inv.target("dead") as t:
        check = t.ping().checks[0]
    assert check.layer == "ssh root@127.0.0.1:1"
    assert not check.detail.startswith("root@127.0.0.1:1"), check.detail
    assert "connection refused" in check.detail


def test_a_mistyped_timeout_gets_a_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(remotekit.InventoryError) as info:
        write_inventory(tmp_path / "hosts.yaml", {"h": {"timeouts": {"stpe": 5}}})
    assert "did you mean 'step'" in str(info.value) and "hosts.yaml:" in str(info.value)


def test_the_package_is_typed() -> None:
    assert (importlib.resources.files("remotekit") / "py.typed").is_file()
    assert sys.modules["remotekit"].__all__


def test_a_train_log_report_in_jupyter_shows_its_plot(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """Where the CLI has --plot, the notebook shows the picture: a report with series has a
    PNG in its HTML, after the findings; one without series (points=0) has none."""
    import base64
    import json

    from remotekit.diagnostics import trainlog

    log = tmp_path / "train.jsonl"
    rows = [{"step": s, "loss": 2.0 - s / 400 + (5.0 if s == 300 else 0.0)} for s in range(400)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with_series = trainlog.analyze_train_log(local, str(log), points=500)
    page = with_series._repr_html_()
    assert page.index("finding:") < page.index('<img alt="local:')
    png = base64.b64decode(page.split("data:image/png;base64,", 1)[1].split('"', 1)[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert "<img" not in trainlog.analyze_train_log(local, str(log))._repr_html_()
