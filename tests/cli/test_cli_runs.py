"""The run tasks as a user types them: `run --detach`, `runs`, `logs`, `stop`, `rm` (local, and
on Slurm through ssh)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_inventory
from tests.harness import SSHServer, fill, rk
from tests.runtimes import SlurmCluster
from tests.trainlog_kit import RUN_SCRIPT, RUN_SPIKE


def started(cwd: Path, *argv: str) -> str:
    r = rk("run", "--detach", "--json", "--", *argv, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["hosts"][0]["id"])


@pytest.mark.timeout(120)
def test_detach_prints_the_id_and_logs_follow_exits_with_the_runs_code(tmp_path: Path) -> None:
    r = rk("run", "--detach", "--", "bash", "-c", "printf 'a\\nb'; sleep .5; exit 4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = r.stdout.decode().strip()
    assert line.startswith("local | detached: run "), line
    run_id = line.split("run ")[1].split(",")[0]
    f = rk("logs", run_id, "--follow", cwd=tmp_path)
    assert (f.returncode, f.stdout) == (4, b"a\nb")  # byte for byte: no newline added
    assert rk("logs", run_id, "--tail", "1", cwd=tmp_path).stdout == b"b"
    listed = json.loads(rk("runs", "--json", cwd=tmp_path).stdout)["hosts"][0]["result"]
    mine = next(r for r in listed if r["id"] == run_id)
    assert {"id", "state", "exit_code", "started", "ended", "command", "log"} <= set(mine)
    assert (mine["state"], mine["exit_code"]) == ("exited", 4)
    assert run_id in rk("runs", cwd=tmp_path).stdout.decode()
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0
    assert run_id not in rk("runs", cwd=tmp_path).stdout.decode()


@pytest.mark.timeout(120)
def test_stop_then_rm_and_errors_exit_2(tmp_path: Path) -> None:
    run_id = started(tmp_path, "sleep", "60")
    refused = rk("rm", run_id, cwd=tmp_path)
    assert refused.returncode == 2 and b"still running: stop it first" in refused.stderr
    s = rk("stop", run_id, "--grace", "1", "--json", cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["state"] == "stopped"
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0
    gone = rk("logs", run_id, cwd=tmp_path)
    assert gone.returncode == 2 and f"no run {run_id}".encode() in gone.stderr
    helped = rk("stop", "--help", cwd=tmp_path)  # not taken as an id there
    assert helped.returncode == 0 and b"remotekit [--core-opts] stop" in helped.stdout


@pytest.mark.timeout(120)
def test_runs_clean_removes_every_ended_run_and_keeps_running_ones(tmp_path: Path) -> None:
    ended = started(tmp_path, "true")
    running = started(tmp_path, "sleep", "60")
    assert rk("logs", ended, "--follow", cwd=tmp_path).returncode == 0  # it ended
    kept = rk("runs", "--clean", "--older-than", "1", cwd=tmp_path)  # ended just now: kept
    assert kept.returncode == 0 and ended in kept.stdout.decode()
    r = rk("runs", "--clean", cwd=tmp_path)
    assert r.returncode == 0 and f"removed run {ended}".encode() in r.stderr, r.stderr
    listed = json.loads(rk("runs", "--json", cwd=tmp_path).stdout)["hosts"][0]["result"]
    left = [x["id"] for x in listed]
    assert ended not in left and running in left
    assert rk("stop", running, "--grace", "1", cwd=tmp_path).returncode == 0
    assert rk("rm", running, cwd=tmp_path).returncode == 0


@pytest.mark.timeout(120)
def test_ctrl_c_ends_logs_follow_and_leaves_nothing_reading_there(tmp_path: Path) -> None:
    import signal
    import time

    from tests.harness import run_readers

    run_id = started(tmp_path, "bash", "-c", "while :; do echo tick; sleep .1; done")
    follow = subprocess.Popen(
        [sys.executable, "-m", "remotekit", "logs", run_id, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert follow.stdout is not None and follow.stdout.readline() == b"tick\n"
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 130
        end = time.monotonic() + 10
        while run_readers(run_id) and time.monotonic() < end:
            time.sleep(0.05)
        assert run_readers(run_id) == []
        assert b"Traceback" not in follow.stderr.read()  # type: ignore[union-attr]
    finally:
        follow.kill()
        rk("stop", run_id, "--grace", "1", cwd=tmp_path)
        rk("rm", run_id, cwd=tmp_path)


@pytest.mark.timeout(120)
def test_train_log_run_reads_the_runs_own_log(tmp_path: Path) -> None:
    """`train-log --run ID` analyses the run's output log: no path typed by hand."""
    writer = (
        "import json\n"
        "for s in range(1, 301):\n"
        "    loss = 2.0 - s / 300 + (6.0 if s == 200 else 0.0)\n"
        "    print(json.dumps({'step': s, 'loss': loss}))\n"
    )
    (tmp_path / "train.py").write_text(writer)
    r = rk("py", "train.py", "--detach", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_id = str(json.loads(r.stdout)["hosts"][0]["id"])
    assert rk("logs", run_id, "--follow", cwd=tmp_path).returncode == 0  # it has ended
    a = rk("train-log", "--run", run_id, "--json", cwd=tmp_path)
    report = json.loads(a.stdout)["hosts"][0]["result"]
    assert report["path"].endswith(f"/{run_id}/output.log"), report["path"]
    assert 200 in [s["step"] for s in report["spikes"]], a.stdout[-2000:]
    both = rk("train-log", "--run", run_id, "--log", "x.log", cwd=tmp_path)
    assert both.returncode == 2 and b"--log or --run" in both.stderr
    missing = rk("train-log", "--run", "nope1234", cwd=tmp_path)
    assert missing.returncode == 2 and b"nope1234" in missing.stderr


@pytest.mark.timeout(240)
def test_on_slurm_through_ssh_runs_shows_the_job_and_logs_follow_ends_with_it(
    tmp_path: Path, sshd: SSHServer, slurm_cluster: SlurmCluster
) -> None:
    """ssh -> the login node (the test sshd) -> sbatch: `runs` names the job (table and
    --json), `logs --follow` gives the job's output and exits with its exit code."""
    srun = shutil.which("srun") or "srun"
    host = sshd.host_yaml(
        slurm={"job": int(slurm_cluster.running), "bin": srun},
        python=sys.executable,
        runs_dir=str(tmp_path / "runs"),
    )
    write_inventory(tmp_path / "hosts.yaml", {"hpc": host}, default="hpc")
    command = "echo in $SLURM_JOB_ID; sleep 1; echo done; exit 4"
    run_id = started(tmp_path, "bash", "-c", command)
    f = rk("logs", run_id, "--follow", cwd=tmp_path)
    assert f.returncode == 4, f.stderr
    job = f.stdout.split()[1].decode()
    assert f.stdout == f"in {job}\ndone\n".encode()
    listed = json.loads(rk("runs", "--json", cwd=tmp_path).stdout)["hosts"][0]["result"]
    mine = next(r for r in listed if r["id"] == run_id)
    assert (mine["job"], mine["state"], mine["exit_code"]) == (job, "exited", 4)
    shown = rk("runs", cwd=tmp_path).stdout.decode().splitlines()
    assert shown[0].split()[:3] == ["id", "job", "state"], shown
    assert any(line.split()[:3] == [run_id, job, "exited"] for line in shown), shown
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0


@pytest.mark.timeout(120)
def test_an_interrupted_follow_says_where_it_stopped_and_offset_goes_on_from_there(
    tmp_path: Path,
) -> None:
    """Ctrl-C on `logs --follow` prints the --offset of the bytes it wrote; a second
    `logs --follow --offset N` shows the rest: together, every line exactly once."""
    import re
    import shlex
    import signal

    n = 80
    run_id = started(
        tmp_path, "bash", "-c", f"for i in $(seq 1 {n}); do echo line $i; sleep .05; done"
    )
    follow = subprocess.Popen(
        [sys.executable, "-m", "remotekit", "logs", run_id, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert follow.stdout is not None
        got = b""
        while got.count(b"\n") < 10:
            got += follow.stdout.readline()
        follow.send_signal(signal.SIGINT)
        got += follow.stdout.read()  # not communicate(): it would skip what readline buffered
        assert follow.wait(timeout=30) == 130
        err = follow.stderr.read()  # type: ignore[union-attr]
        said = re.search(rb"at byte (\d+) of run \w+'s log; go on with: (remotekit logs .*)", err)
        assert said is not None, err
        assert int(said.group(1)) == len(got)
        again = shlex.split(said.group(2).decode())
        assert again == [
            "remotekit",
            "logs",
            run_id,
            "--host",
            "local",
            "--offset",
            str(len(got)),
            "--follow",
        ]
        rest = rk(*again[1:], cwd=tmp_path)
        assert rest.returncode == 0, rest.stderr
        assert got + rest.stdout == b"".join(b"line %d\n" % i for i in range(1, n + 1))
        both = rk("logs", run_id, "--tail", "1", "--offset", "3", cwd=tmp_path)
        assert both.returncode == 2 and b"--tail or --offset" in both.stderr
    finally:
        follow.kill()
        rk("rm", run_id, cwd=tmp_path)


@pytest.mark.timeout(180)
def test_bad_ids_and_streams_are_usage_errors_before_anything_runs(tmp_path: Path) -> None:
    """Every id and --stream is checked first: a usage error (exit 2, one line), never a
    traceback, a file outside the run, or 16 s of reconnects to a supervisor that refused."""
    run_id = started(tmp_path, "echo", "x")
    assert rk("logs", run_id, "--follow", cwd=tmp_path).returncode == 0  # it ended
    for args in (
        ("logs", "../../x"),
        ("logs", "x" * 65),
        ("stop", "../../x"),
        ("rm", "a/b"),
        ("train-log", "--run", "../x"),
        ("logs", run_id, "--stream", "../../outside"),
        ("logs", run_id, "--stream", "bogus", "--follow"),
    ):
        r = rk(*args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1, (args, r.stderr)
        assert b"not a run id" in r.stderr or b"not a log of a run" in r.stderr, r.stderr
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0


@pytest.mark.timeout(120)
def test_stop_of_a_corrupt_record_signals_nothing_and_says_so(
    tmp_path: Path, run_records: Path
) -> None:
    """A record whose pids are 0 (kill(0): the stop's own group) and no start time: `stop`
    says it is corrupt, in one line naming host and run, exit 2; `runs` lists it as such;
    `rm` removes it."""
    run_id = started(tmp_path, "true")
    assert rk("logs", run_id, "--follow", cwd=tmp_path).returncode == 0  # it ended
    record = run_records / run_id / "run.json"
    forged = {**json.loads(record.read_text()), "supervisor": {"pid": 0}, "pid": 0}
    del forged["pid_start"]
    record.write_text(json.dumps(forged))
    (run_records / run_id / "exit.json").unlink()
    s = rk("stop", run_id, "--grace", "1", cwd=tmp_path)
    assert s.returncode == 2 and s.stderr.count(b"\n") == 1, s.stderr
    said = s.stderr.decode()
    assert "host 'local'" in said and f"run {run_id}: its record is corrupt" in said, said
    assert "supervisor is not a process" in said and "nothing was signalled" in said, said
    listed = json.loads(rk("runs", "--json", cwd=tmp_path).stdout)["hosts"][0]["result"]
    mine = next(r for r in listed if r["id"] == run_id)
    assert mine["state"] == "corrupt" and "supervisor" in mine["problem"], mine
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0
    assert not (run_records / run_id).exists()


@pytest.mark.timeout(180)
def test_a_full_runs_disk_is_said_in_one_line_and_lost_output_is_shown(
    tmp_path: Path, small_runs: Path
) -> None:
    """hosts.yaml ``runs_dir:`` on a 256 KiB disk: a run that writes 2 MiB ends with its own
    code, `logs` and `runs` show how many bytes were lost; once the disk is full, `run
    --detach` says why it started nothing, in one line."""
    host = {"python": sys.executable, "runs_dir": str(small_runs / "runs")}
    write_inventory(tmp_path / "hosts.yaml", {"local": host}, default="local")
    lines = 16384
    code = f"import sys\nfor i in range({lines}): sys.stdout.write('%0127d\\n' % i)\nsys.exit(3)"
    run_id = started(tmp_path, sys.executable, "-c", code)
    f = rk("logs", run_id, "--follow", cwd=tmp_path)
    assert f.returncode == 3, f.stderr
    said = re.search(rb"run \w+ on local: (\d+) bytes of its output could not be written", f.stderr)
    assert said is not None, f.stderr
    assert len(f.stdout) + int(said.group(1)) == lines * 128
    listed = json.loads(rk("runs", "--json", cwd=tmp_path).stdout)["hosts"][0]["result"]
    assert next(r for r in listed if r["id"] == run_id)["lost_bytes"] == {
        "output": int(said.group(1)),
        "stdout": lines * 128 - len(rk("logs", run_id, "--stream", "stdout", cwd=tmp_path).stdout),
    }
    assert "bytes lost" in rk("runs", cwd=tmp_path).stdout.decode()
    fill(small_runs)
    r = rk("run", "--detach", "--", "sleep", "60", cwd=tmp_path)
    assert r.returncode != 0 and b"Traceback" not in r.stderr, r.stderr
    assert r.stderr.count(b"\n") == 1 and b"No space left on device" in r.stderr, r.stderr
    assert re.search(rb"run \w+ on local: cannot record it in ", r.stderr), r.stderr
    assert rk("rm", run_id, cwd=tmp_path).returncode == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("how", "code", "said"),
    [
        ("3", 3, "exited with code 3"),  # the run failed: its code, as `logs --follow` gives it
        ("kill", 137, "exited with code 137 (signal 9, SIGKILL)"),
        ("0", 1, "exited with code 0"),  # it succeeded: train-log's own (1: a spike was found)
    ],
)
def test_train_log_run_follow_ends_with_the_run_and_says_how(
    tmp_path: Path, how: str, code: int, said: str
) -> None:
    """`train-log --run ID --follow` ends when the run ends (it once followed until its
    --timeout), says how the run ended, and exits with the run's code when it failed."""
    go = tmp_path / "go"
    (tmp_path / "train.py").write_text(RUN_SCRIPT)
    r = rk("py", "--detach", "--json", "train.py", "--", str(go), how, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_id = str(json.loads(r.stdout)["hosts"][0]["id"])
    argv = ["train-log", "--run", run_id, "--follow", "--timeout", "90"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "remotekit", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert follow.stderr is not None
        first = follow.stderr.readline()  # `following LOG: ...`: its first rows are judged
        assert b"following " in first, first
        go.touch()
        out, err = follow.communicate(timeout=60)
        assert follow.returncode == code, err
        assert f"run {run_id} {said}".encode() in err, err
        assert out.decode().startswith(f"local | step {RUN_SPIKE}: loss spike"), out
    finally:
        follow.kill()
        go.touch()
        rk("logs", run_id, "--follow", cwd=tmp_path)
        rk("rm", run_id, cwd=tmp_path)
