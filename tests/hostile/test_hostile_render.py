"""Text from the far side, shown by remotekit: its control characters show as escapes.

A process's argv (``procs``), a file name (``disk``), a tensor key in a checkpoint
(``ckpt-scan``, ``ckpt-diff``), a metric name in a log (``train-log`` and the ``--metric``
line it suggests), a run's command (``runs``) and an error that quotes a step's output are
the far side's to choose. Each plants an OSC 52 (writes the clipboard), an OSC 0 (sets the
window title), a clear screen, a cursor move and a C1 CSI there; what remotekit prints of
it must carry none of them raw, and show each as its escape (``\\x1b``). The output of the
user's own command is the exception: it reaches the terminal as ssh leaves it.

Each test runs the CLI as a user would, through a hosts.yaml whose ``local`` target takes
the ``agent`` fixture, so tests/engine/test_per_step.py runs them again without the agent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import remotekit
from remotekit.render import clip, table, to_json, visible
from remotekit.runs import RunInfo, render_runs
from tests.conftest import open_local, write_inventory

#: OSC 52 (clipboard), OSC 0 (window title), clear screen, cursor home, a C1 CSI (colour).
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x1b[1;1H\u009b31m"
#: How it shows: the same text, each control as its escape.
SHOWN = "\\x1b]52;c;cHduZWQ=\\x07\\x1b]0;pwned\\x07\\x1b[2J\\x1b[1;1H\\x9b31m"
#: What must never reach the terminal raw from such text.
RAW = ("\x1b", "\x07", "\x9b")


def no_raw(text: str) -> bool:
    return not any(c in text for c in RAW)


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def rk(*args: str, hosts: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args, "--inventory", str(hosts)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        errors="surrogateescape",
    )


@pytest.fixture
def inventory_file(tmp_path: Path, agent: bool | None) -> Path:
    """A hosts.yaml whose ``local`` (this Python: torch for the scans) works in ``work/`` and
    keeps its runs in ``runs/``, its steps on the agent or not as ``agent`` says."""
    (tmp_path / "work").mkdir()
    local = {"workdir": str(tmp_path / "work"), "runs_dir": str(tmp_path / "runs")}
    write_inventory(tmp_path / "hosts.yaml", {"local": local}, agent=agent)
    return tmp_path / "hosts.yaml"


# --------------------------------------------------------------------------- the sanitiser


def test_visible_shows_controls_as_escapes_and_keeps_text() -> None:
    assert visible(HOSTILE) == SHOWN
    assert visible("tab\tnew\nline", keep="") == "tab\\tnew\\nline"
    assert visible("tab\tnew\nline") == "tab\tnew\nline"  # a line of text keeps them
    assert visible("a\rb\x7fc\x00") == "a\\rb\\x7fc\\x00"
    assert visible("trojan\u202eexe.txt\u2066") == "trojan\\u202eexe.txt\\u2066"
    assert visible(os.fsdecode(b"bad\xff\x9b")) == "bad\\xff\\x9b"  # undecodable bytes
    ordinary = "größe 10 µs ✓ 损失 'q' \"d\" \\x1b"
    assert visible(ordinary) == ordinary
    assert visible(visible(HOSTILE)) == visible(HOSTILE)


def test_a_long_cell_is_cut_after_it_is_made_visible() -> None:
    """Cut first, a column would end inside the sequence (``\\x1b]52;c;...`` never
    terminated: the terminal swallows what follows); made visible first, the cut is text."""
    long = "x" * 90 + HOSTILE
    cut = clip(long, 100)
    assert cut == "x" * 90 + SHOWN[:10] and no_raw(cut)
    command = ("sh", "-c", "x" * 40 + HOSTILE)  # the 60th character is inside the OSC 52
    run = RunInfo("r1", "h", "exited", 0, 0.0, 1.0, command, "/runs/r1/output")
    [row] = [line for line in render_runs([run]).splitlines() if line.startswith("r1")]
    assert f"sh -c '{'x' * 40}{SHOWN[:10]}... " in row and no_raw(row), row
    assert table(["A"], [["a\x1b[2Jb\nc"]]).splitlines()[-1] == "a\\x1b[2Jb\\nc"


def test_a_fitted_table_never_splits_an_escape() -> None:
    """Fitting a table to the terminal cuts paths in the middle and wraps reasons: it works
    on the escaped text, and keeps each escape (``\\x1b``) whole or leaves it out."""
    path = "/data/" + "d" * 30 + HOSTILE + "e" * 30 + "/model.pt"
    reason = "n" * 7 + HOSTILE + " and then some words " + HOSTILE
    for width in range(30, 90):
        text = table(["CHECKPOINT", "REASON"], [(path, reason)], width=width)
        assert no_raw(text)
        body = "".join(text.splitlines()[2:])
        for at in (i for i in range(len(body)) if body.startswith("\\x", i)):
            assert re.fullmatch(r"\\x[0-9a-f]{2}", body[at : at + 4]), (width, body)


def test_fitted_lines_stay_escaped_and_never_split_an_escape() -> None:
    """The prose under a table (a reason, an error from the far side) wraps on a narrow
    terminal: it is escaped first, and each escape ends up whole on one line."""
    from remotekit.result import fit_lines

    line = "  " + "r" * 9 + HOSTILE + " could not load " + HOSTILE * 3 + " and more words"
    for width in range(20, 90):
        fitted = fit_lines([line], width=width)
        assert all(no_raw(x) and len(x) <= width for x in fitted), (width, fitted)
        for x in fitted:
            for at in (i for i in range(len(x)) if x.startswith("\\x", i)):
                assert re.fullmatch(r"\\x[0-9a-f]{2}", x[at : at + 4]), (width, x)


def test_json_stays_json_with_every_control_escaped() -> None:
    value = {f"k{HOSTILE}": [f"v\x7f{HOSTILE}", "größe"]}
    text = to_json(value, indent=2)
    assert no_raw(text) and "\x7f" not in text and text.isascii()
    assert json.loads(text) == value  # the same value, exactly


def test_errors_str_shows_the_far_sides_text_visibly() -> None:
    exc = remotekit.ConnectError(f"cannot read {HOSTILE}", host="gpu1")
    assert str(exc) == f"[host 'gpu1'] cannot read {SHOWN}"
    assert exc.message == f"cannot read {HOSTILE}"  # the value keeps what came
    note = remotekit.errors.AgentUnavailable(f"gpu1: the agent cannot run: {HOSTILE}")
    assert str(note) == f"gpu1: the agent cannot run: {SHOWN}"  # as ``warnings`` prints it


# --------------------------------------------------------------------------- through the CLI


@pytest.fixture
def planted_process() -> Iterator[subprocess.Popen[bytes]]:
    """A Python process of this machine whose argv carries the sequences."""
    proc = subprocess.Popen(
        ["python", "-c", "import time; time.sleep(120)", HOSTILE],
        executable=sys.executable,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_procs_shows_a_process_argv_visibly(
    planted_process: subprocess.Popen[bytes], inventory_file: Path, tmp_path: Path
) -> None:
    r = rk("procs", hosts=inventory_file, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    [row] = [line for line in r.stdout.splitlines() if line.startswith(f"{planted_process.pid} ")]
    assert "time.sleep(120) " + SHOWN[:30] in row, row
    assert no_raw(r.stdout) and no_raw(r.stderr), r.stdout
    doc = json.loads(rk("procs", "--json", hosts=inventory_file, cwd=tmp_path).stdout)  # still JSON
    found = [p for p in doc["hosts"][0]["result"]["processes"] if p["pid"] == planted_process.pid]
    assert found and found[0]["cmdline"].endswith(HOSTILE), found


def test_disk_shows_a_file_name_visibly(inventory_file: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / f"big{HOSTILE}.bin").write_bytes(b"\0" * 300_000)
    (data / os.fsdecode(b"undecodable\xff\x9b[2J.pt")).write_bytes(b"\0" * 200_000)
    r = rk("disk", "--path", str(data), "--min-free", "0", hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"big{SHOWN}.bin" in r.stdout
    assert "undecodable\\xff\\x9b[2J.pt" in r.stdout
    assert no_raw(r.stdout) and no_raw(r.stderr), r.stdout


def test_disk_watch_frames_show_a_file_name_visibly(inventory_file: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / f"big{HOSTILE}.bin").write_bytes(b"\0" * 300_000)
    args = ("disk", "--path", str(data), "--min-free", "0", "--watch", "1", "--count", "1")
    r = rk(*args, hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"big{SHOWN}.bin" in r.stdout and no_raw(r.stdout + r.stderr), r.stdout


def test_ckpt_scan_shows_a_tensor_key_visibly(inventory_file: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    key = f"fc{HOSTILE}.weight"
    torch.save({"model": {key: torch.tensor([1.0, float("nan"), 2.0])}}, ck / f"s{HOSTILE}.pt")
    r = rk("ckpt-scan", "--checkpoints", str(ck), hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"fc{SHOWN}.weight" in r.stdout and "1 NaN" in r.stdout, r.stdout
    assert f"s{SHOWN}.pt" in r.stdout
    assert no_raw(r.stdout) and no_raw(r.stderr), r.stdout
    j = rk("ckpt-scan", "--checkpoints", str(ck), "--json", hosts=inventory_file, cwd=tmp_path)
    assert no_raw(j.stdout) and any(key in text for text in strings(json.loads(j.stdout)))


def test_ckpt_diff_shows_a_tensor_key_visibly(inventory_file: Path, tmp_path: Path) -> None:
    key = f"fc{HOSTILE}.weight"
    torch.save({key: torch.tensor([1.0, 2.0])}, tmp_path / "a.pt")
    torch.save({key: torch.tensor([1.0, 3.0]), f"new{HOSTILE}": torch.ones(2)}, tmp_path / "b.pt")
    args = ("ckpt-diff", "-a", str(tmp_path / "a.pt"), "-b", str(tmp_path / "b.pt"))
    r = rk(*args, hosts=inventory_file, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert f"fc{SHOWN}.weight" in r.stdout and f"new{SHOWN}" in r.stdout, r.stdout
    assert no_raw(r.stdout) and no_raw(r.stderr), r.stdout


def test_train_log_shows_a_metric_name_and_the_suggested_line_visibly(
    inventory_file: Path, tmp_path: Path
) -> None:
    """No loss column: it names the numeric ones and suggests ``--metric NAME`` for each."""
    rows = [{"step": i, f"err{HOSTILE}": 1.0 / (i + 1), "lr": 0.1 * i} for i in range(60)]
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    r = rk("train-log", "--log", str(log), hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert f"--metric 'err{SHOWN}'" in said, said
    assert no_raw(r.stdout) and no_raw(r.stderr), said


def test_runs_shows_a_runs_command_visibly(inventory_file: Path, tmp_path: Path) -> None:
    started = rk(
        "run", "--detach", "--", "sh", "-c", ": ", HOSTILE, hosts=inventory_file, cwd=tmp_path
    )
    assert started.returncode == 0 and no_raw(started.stdout), started.stdout + started.stderr
    r = rk("runs", hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"sh -c ': ' '{SHOWN[:20]}" in r.stdout and no_raw(r.stdout + r.stderr), r.stdout


def test_an_error_quoting_a_steps_output_shows_it_visibly(
    inventory_file: Path, tmp_path: Path
) -> None:
    """The step's own stderr is relayed raw, as ssh would; the error line that quotes it
    (the step timed out; its last output) is remotekit's, and shows it visibly."""
    command = f"printf '%s\\n' '{HOSTILE}' >&2; sleep 30"
    r = rk("run", "--timeout", "2", "--", "sh", "-c", command, hosts=inventory_file, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert f"local | {HOSTILE}" in lines  # the command's own line, as it came
    error = "\n".join(lines[next(i for i, x in enumerate(lines) if "error:" in x) :])
    assert "timed out" in error and SHOWN in error and no_raw(error), r.stderr


def test_a_step_failed_error_str_shows_the_output_visibly(agent: bool | None) -> None:
    with open_local(agent) as t, pytest.raises(remotekit.StepFailed) as caught:
        t.run(["sh", "-c", f"printf '%s\\n' '{HOSTILE}' >&2; exit 3"], check=True)
    assert SHOWN in str(caught.value) and no_raw(str(caught.value))
    assert caught.value.result.stderr == HOSTILE + "\n"  # the value keeps what came


def test_a_commands_own_output_reaches_the_terminal_raw(
    inventory_file: Path, tmp_path: Path
) -> None:
    r = rk(
        "run", "--", "printf", "\\033[1mbold\\033]0;title\\007", hosts=inventory_file, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "local | \x1b[1mbold\x1b]0;title\x07\n"
