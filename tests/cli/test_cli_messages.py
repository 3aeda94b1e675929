"""What the `remotekit` command says when things go wrong, as a person reads it: Ctrl-C,
an unknown run, a task's help line."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.harness import FakeNode, SSHServer, wait_gone


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


@pytest.mark.sshd
@pytest.mark.timeout(180)
def test_a_wrong_pct_path_and_a_missing_ct_are_said_once_in_our_words(
    sshd: SSHServer, node: FakeNode, tmp_path: Path
) -> None:
    """Over a real sshd with the fake pct: a wrong `pct:` is "pct not found at PATH on NODE
    (hosts.yaml:LINE)" in `run` and `ping`, not bash's text; pct's own "does not exist" is
    said once (in the error), not streamed as output and then quoted again."""
    from tests.conftest import CT, write_inventory
    from tests.harness import rk, venv_prefix

    hosts = tmp_path / "hosts.yaml"
    write_inventory(
        hosts,
        {
            "badpct": sshd.host_yaml(container=CT, pct="/usr/sbin/pct", venv=venv_prefix()),
            "noct": sshd.host_yaml(container=999, pct=str(node.pct), venv=venv_prefix()),
        },
    )
    line = hosts.read_text().splitlines().index("    pct: /usr/sbin/pct") + 1
    said = f"pct not found at /usr/sbin/pct on 127.0.0.1 ({hosts}:{line})"
    for task in ("run", "ping"):
        r = rk(task, "--host", "badpct", *(["--", "true"] if task == "run" else []), cwd=tmp_path)
        err = (r.stdout + r.stderr).decode()
        assert r.returncode == 2 and said in err, err
        assert "bash" not in err and "No such file" not in err, err
    r = rk("run", "--host", "noct", "--", "true", cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("'nodes/pve/lxc/999.conf' does not exist") == 1, err
    assert "container 999 cannot be entered; pct says:" in err, err


def test_every_tasks_list_line_is_a_whole_sentence() -> None:
    """`remotekit --list` (and --help) shows each task's first docstring line (invoke's
    helpline): it must be the whole first sentence, never cut mid-sentence by the wrap."""
    from invoke.util import helpline

    from remotekit.cli import TASKS

    for task in TASKS:
        doc = (task.__doc__ or "").strip().splitlines()
        first = helpline(task)
        assert first is not None and first == doc[0].strip(), task.name
        assert first.endswith((".", "?", "!")), f"{task.name}: {first!r} is cut mid-sentence"
        assert len(doc) == 1 or not doc[1].strip(), f"{task.name}: its first sentence goes on"
