"""The `remotekit` command as a person types it: what --help shows is what it does, usage
errors exit 2 with a "did you mean", and a pipe closed early ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def env_for(home: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home)}
    env.pop("REMOTEKIT_HOSTS", None)
    return env


def remotekit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "remotekit", *args]
    return subprocess.run(
        argv, cwd=cwd, env=env_for(cwd), capture_output=True, text=True, timeout=120
    )


def test_help_lists_only_remotekits_options(tmp_path: Path) -> None:
    r = remotekit("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    core = r.stdout.split("Subcommands:")[0]
    for invokes in (
        "--dry",
        "--command-timeout",
        "-T",
        "--prompt-for-sudo-password",
        "--pty",
        "--warn-only",
        "--write-pyc",
        "--echo",
        "--hide",
        "--config",
        "--debug",
    ):
        assert invokes not in core
    for ours in ("--help", "--list", "--version", "--print-completion-script", "--complete"):
        assert ours in core


@pytest.mark.parametrize("flag", ["--dry", "--command-timeout=1", "--pty", "--warn-only"])
def test_an_invoke_option_is_not_taken_silently(tmp_path: Path, flag: str) -> None:
    r = remotekit(flag, "run", "--cmd", "echo ran", cwd=tmp_path)
    assert r.returncode == 2 and "ran" not in r.stdout


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["ckpt-scna"], "did you mean ckpt-scan"),
        (["ping", "--hots", "gpu1"], "did you mean --host"),
        (["run", "--cmd", "true", "--paralel", "2"], "did you mean --parallel"),
        (["--help", "ckpt-scna"], "did you mean ckpt-scan"),
        (["--lsit"], "did you mean --list"),
        (["ping", "--parallel", "many"], "'many'"),
    ],
)
def test_a_usage_error_exits_2_with_a_hint(tmp_path: Path, args: list[str], hint: str) -> None:
    r = remotekit(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert hint in r.stderr and "Traceback" not in r.stderr


def test_list_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "remotekit", "--list"]
    p = subprocess.Popen(
        argv, cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""


def test_run_into_a_closed_pipe_stops_the_step_quietly(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    endless = f"sh -c 'echo $$ > {pidfile}; while :; do echo line; done'"
    argv = [sys.executable, "-m", "remotekit", "run", "--cmd", endless]
    p = subprocess.Popen(
        argv, cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"local | line\n"
    p.stdout.close()  # `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the step (pid {pid}) still runs after its output pipe closed")


def test_run_takes_the_command_after_dashes_untouched(tmp_path: Path) -> None:
    r = remotekit(
        "run", "--host", "local", "--", "sh", "-c", 'echo "[$0] [$1]"', "a b", "-L", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["local | [a b] [-L]"]
    r = remotekit("run", "--cmd", "echo 'x  y'", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | x  y"]
    r = remotekit("run", "--cmd", "true", "--", "true", cwd=tmp_path)
    assert r.returncode == 2 and "not both" in r.stderr


def test_py_takes_the_script_and_its_args_as_typed(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv[1:])\n")
    r = remotekit("py", "--host", "local", "train.py", "--", "--lr", "3e-4", "a b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["local | ['--lr', '3e-4', 'a b']"]
    r = remotekit("py", "--script", "train.py", "--args", "--lr '1 2'", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | ['--lr', '1 2']"]
    r = remotekit("py", cwd=tmp_path)
    assert r.returncode == 2 and "script" in r.stderr
