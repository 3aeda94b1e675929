"""What the `remotekit` command says when things go wrong, as a person reads it: Ctrl-C,
an unknown run, a task's help line."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.harness import wait_gone


def marker() -> str:
    return f"{800 + uuid.uuid4().int % 100}.{uuid.uuid4().int % 10**6:06d}"  # a `sleep` argument


@pytest.mark.timeout(120)
@pytest.mark.parametrize("hosts", [["local"], ["a", "b"]])
def test_ctrl_c_says_cancelled_once_per_step_and_no_failed_table(
    tmp_path: Path, hosts: list[str]
) -> None:
    """A real SIGINT to a real `remotekit run`: each step says "cancelled" once, as it ends;
    no "error:" line, no summary table calling it "failed"; exit 130; nothing left there."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {}\n  b: {}\n")
    m = marker()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remotekit",
            "run",
            "--host",
            ",".join(hosts),
            "--",
            "sh",
            "-c",
            f"echo ready; exec sleep {m}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        for _ in hosts:
            assert proc.stdout.readline().rstrip().endswith(b"| ready")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        said = err.decode()
        assert said.count("cancelled") == len(hosts), said
        for h in hosts:
            assert (
                f"{h}".ljust(max(map(len, hosts))) + " | cancelled; the step was stopped there"
                in said
            )
        assert "failed" not in said + out.decode() and "error:" not in said, said
        assert "status" not in out.decode(), out  # no summary table
        assert said.rstrip().splitlines()[-1] == "remotekit: interrupted", said
        assert wait_gone(m, 10) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("task", ["logs", "stop", "rm"])
def test_an_unknown_run_says_so_and_points_to_runs(tmp_path: Path, task: str) -> None:
    """`logs ID` of a run the host does not have: "no run ID on HOST" and the `runs` command
    that lists what it has (as kubectl's NotFound), not the supervisor's words."""
    from tests.harness import rk

    r = rk(task, "abcdef12", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.decode().strip() == (
        "remotekit: no run abcdef12 on local; `remotekit runs --host local` lists its runs"
    ), r.stderr
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {}\n  b: {}\n")
    r = rk(task, "abcdef12", "--host", "a,b", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.decode().strip().endswith(
        "(a, b); `remotekit runs --host a,b` lists theirs"
    ), r.stderr
