"""The record protocol (remotekit/remote/protocol.py), written once for both sides, and the
local wrapper that runs a diagnostic script (diagnostics.base): shipping, the final record,
and the Report every diagnostic's report satisfies (records read by their class:
tests/diagnostics/test_records.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit import shipping
from remotekit.diagnostics import checkpoints as ck
from remotekit.diagnostics import system
from remotekit.diagnostics.base import Report, run_diagnostic
from remotekit.diagnostics.diagnose import DiagnoseReport
from remotekit.errors import DiagnosticError
from remotekit.remote import protocol

REMOTE = Path(protocol.__file__).parent


def _script(body: str, name: str = "diag.py") -> remotekit.Script:
    return remotekit.Script(textwrap.dedent(body), name=name)


# ----------------------------------------------------------------------------- the format


def test_non_finite_numbers_travel_as_strings_and_come_back() -> None:
    rec = {"type": "x", "v": [math.nan, math.inf, -math.inf, 1.5], "d": {"k": math.inf}}
    line = protocol.dumps(rec)
    assert "NaN" not in line and "Infinity" not in line
    back = protocol.parse(line)
    assert back is not None and back["v"][1:] == ["inf", "-inf", 1.5]
    assert math.isnan(protocol.number(back["v"][0]))
    assert protocol.number(back["d"]["k"]) == math.inf
    assert [protocol.number(v) for v in (3, "x", None, True)] == [3, None, None, None]


def test_parse_takes_records_only() -> None:
    assert protocol.parse('{"type": "done", "exit_code": 0}') == {"type": "done", "exit_code": 0}
    for line in ("plain text", '{"no_type": 1}', "{broken", "[1, 2]"):
        assert protocol.parse(line) is None


@pytest.mark.parametrize(
    ("argv", "masked"),
    [
        (["train.py", "--token", "abc"], ["train.py", "--token", "***"]),
        (["x", "--api-key=abc"], ["x", "--api-key=***"]),
        (["env", "HF_PASSWORD=abc", "B=1"], ["env", "HF_PASSWORD=***", "B=1"]),
        (["get", "https://h/f?sig=abc"], ["get", "https://h/f?***"]),
        (["python", "--lr", "3e-4"], ["python", "--lr", "3e-4"]),
    ],
)
def test_one_masking_for_command_lines(argv: list[str], masked: list[str]) -> None:
    assert protocol.mask_argv(argv) == masked


def test_one_masking_for_free_text() -> None:
    text = "s3://b/k?X-Amz-Signature=abc token=xyz lr=0.1 secret: hush"
    assert protocol.mask(text) == "s3://b/k?*** token=*** lr=0.1 secret: ***"
    assert protocol.is_secret_name("WANDB_API_KEY") and not protocol.is_secret_name("epoch")


def test_a_command_writes_one_final_record_with_its_exit_code(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from protocol import Out
        out = Out("demo")
        out.emit("thing", value=float("nan"))
        out.note("n1", "context")
        out.warning("w1", "a finding")
        sys.exit(out.done())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REMOTE)], capture_output=True, text=True, check=False
    )
    recs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 1
    assert [r["type"] for r in recs] == ["thing", "note", "warning", "done"]
    assert recs[0]["value"] == "nan"
    assert recs[-1] == {
        "type": "done",
        "command": "demo",
        "exit_code": 1,
        "warnings": 1,
        "errors": 0,
    }


# ----------------------------------------------------------------------------- shipping


def test_a_script_runs_from_the_package_shipped_whole() -> None:
    """No file is chosen: a diagnostic names the package (its hash), which holds every file
    of remotekit/remote/ at its path, byte for byte, and nothing else."""
    package = shipping.package()
    ckpt = shipping.script("ckpt.py")
    assert ckpt.name == "remotekit/remote/ckpt.py" and ckpt.files == {}
    assert ckpt.package == package.hash == shipping.script("trainlog.py").package
    here = {
        "remotekit/remote/" + p.relative_to(REMOTE).as_posix(): p.read_bytes()
        for p in REMOTE.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert dict(package.files) == here
    assert "remotekit/remote/trainlog/readers/mlflow.py" in here


def test_every_shipped_file_says_what_it_is() -> None:
    for path in REMOTE.rglob("*.py"):  # the shipped packages too, nested ones included
        first = path.read_text().lstrip().splitlines()
        first = first[1:] if first[0].startswith("#!") else first
        assert first[0].startswith(('"""', "# ")) and len(first[0]) > 20, path.name


# ----------------------------------------------------------------------------- the wrapper


def test_a_script_that_stops_before_its_final_record_is_an_error_naming_host_and_step(
    local: remotekit.Target,
) -> None:
    script = _script(
        """
        import sys
        from protocol import emit
        emit({"type": "thing", "n": 1})
        print("about to fall over", file=sys.stderr)
        sys.exit(3)
        """
    )
    seen: list[dict] = []
    with pytest.raises(DiagnosticError) as info:
        run_diagnostic(local, script, ["probe"], step="my-step", on_record=seen.append)
    text = str(info.value)
    assert "host 'local'" in text and "step 'my-step'" in text
    assert "diag.py probe stopped before its final record (exit 3)" in text
    assert "about to fall over" in text
    assert seen == [{"type": "thing", "n": 1}]  # records still arrive as they are written


def test_fatal_error_records_raise_the_diagnostics_own_error(local: remotekit.Target) -> None:
    script = _script(
        """
        import sys
        from protocol import fail
        sys.exit(fail("probe", "no torch here"))
        """
    )
    with pytest.raises(ck.CheckpointError, match="no torch here"):
        run_diagnostic(local, script, ["probe"], fatal_errors=True, error=ck.CheckpointError)
    run = run_diagnostic(local, script, ["probe"])  # not fatal: the Run says it
    assert (run.exit_code, run.messages("error")) == (2, ("no torch here",))


def test_a_run_keeps_records_messages_and_the_exit_code(local: remotekit.Target) -> None:
    script = _script(
        """
        import sys
        from protocol import Out
        out = Out("probe")
        out.emit("gpu", index=0)
        out.emit("gpu", index=1)
        out.warning("hot", "GPU 1 is hot")
        sys.exit(out.done())
        """
    )
    run = run_diagnostic(local, script, ["probe"])
    assert run.exit_code == 1 and run.result.exit_code == 1
    assert [r["index"] for r in run.of("gpu")] == [0, 1]
    assert run.messages("warning") == ("GPU 1 is hot",) and run.messages("note") == ()
    assert run.final["command"] == "probe"


# ----------------------------------------------------------------------------- reports


def test_every_report_satisfies_report() -> None:
    common = {"findings": (), "notes": (), "errors": (), "exit_code": 0, "host": "h"}
    reports: list[Any] = [
        system.GpuReport(
            nvidia_smi=None, throttle_field=None, gpus=(), processes=(), torch=None, **common
        ),
        system.EnvReport.from_dict(common),
        system.DiskReport(filesystems=(), walks=(), largest_files=(), checkpoints=(), **common),
        system.ProcReport(processes=(), gpu_processes=(), **common),
    ]
    rep = ck.CheckpointReport.from_record({"path": "/c.pt", "status": "bad", "nan_weights": 2})
    reports += [rep, ck.CheckpointScan([rep])]
    reports.append(DiagnoseReport(host="h", sections=(), exit_code=0, findings=(), summary=()))
    reports.append(ck.DiffReport(a="a", b="b", ok=False, error="unreadable"))
    for r in reports:
        assert isinstance(r, Report), type(r).__name__
        assert isinstance(r.render(), str)
    assert len(rep.findings) == 1 and rep.findings[0].startswith("/c.pt: ")
    assert "NaN" in rep.findings[0] and rep.errors == ()
    assert reports[-1].errors == ("unreadable",) and reports[-1].exit_code == 2


# ----------------------------------------------------------------------------- the README


def test_docs_adding_a_diagnostic_example_runs(local: remotekit.Target) -> None:
    """The two code blocks of docs/extending.md's "Adding a diagnostic", run as written (the script is
    shipped as a Script here instead of from remotekit/remote/, which the test cannot add)."""
    import re
    from dataclasses import dataclass as dataclass_

    text = (REMOTE.parents[1] / "docs" / "extending.md").read_text()
    section = text[text.index("## Adding a diagnostic") :]
    there, here = (
        textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    )
    uptime_script = remotekit.Script(there, name="uptime.py")
    namespace = {
        "dataclass": dataclass_,
        "Target": remotekit.Target,
        "run_diagnostic": run_diagnostic,
        "__name__": "readme_uptime",
    }
    code = "from __future__ import annotations\n" + here.replace('"uptime.py"', "UPTIME")
    namespace["UPTIME"] = uptime_script
    sys.modules["readme_uptime"] = type(sys)("readme_uptime")
    try:
        exec(compile(code, "docs/extending.md", "exec"), namespace)
        sys.modules["readme_uptime"].__dict__.update(namespace)
        report = namespace["uptime"](local)
    finally:
        del sys.modules["readme_uptime"]
    assert isinstance(report, Report)
    assert report.host == "local" and report.exit_code in (0, 1)
    assert isinstance(report.seconds, float) and report.seconds > 0
    assert report.render().startswith("local: up ")
