"""Runs (``detach=True``): recorded, listed, followed across a dropped connection with every
byte exactly once, stopped with their whole tree, marked lost when the supervisor vanishes.

The cases run on ``local`` and through the real sshd into the real LXC container (ssh ->
fake pct exec -> venv Python): the ``target`` fixture is parametrized over both. Processes
are looked for in this host's /proc, which sees the container's too.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit.runs import Run
from tests.conftest import need_program, open_local
from tests.harness import ancestors, fill, processes_with, run_readers, wait_gone
from tests.runtimes import SlurmCluster


def _start(t: remotekit.Target, argv: list[str]) -> Run:
    run = t.run(argv, detach=True, timeout=30)
    assert isinstance(run, Run) and run.id and run.result is not None and run.result.ok
    return run


def _tidy(run: Run) -> None:
    if run.state() == "running":
        run.stop(grace=1)
    run.rm()


def _marker() -> str:
    return f"rk-run-{uuid.uuid4().hex[:8]}"


@pytest.mark.timeout(60)
def test_a_run_is_recorded_listed_and_its_exit_kept(target: remotekit.Target) -> None:
    mark = _marker()
    run = _start(target, ["bash", "-c", f"echo {mark}; echo oops >&2; sleep 1; exit 3"])
    try:
        info = run.info()
        assert info.state == "running" and info.exit_code is None and info.ended is None
        assert info.command[:2] == ("bash", "-c") and info.host == target.name
        assert run.id in [r.id for r in target.runs()]
        done = run.wait(timeout=30)
        assert (done.state, done.exit_code) == ("exited", 3)
        assert done.ended is not None and done.ended >= done.started
        both = b"".join(run.logs())  # interleaved as it came: the order of two pipes is free
        assert sorted(both.splitlines()) == sorted([mark.encode(), b"oops"])
        assert b"".join(run.logs(stream="stdout")) == f"{mark}\n".encode()
        assert b"".join(run.logs(stream="stderr")) == b"oops\n"
    finally:
        _tidy(run)
    assert run.id not in [r.id for r in target.runs()]


@pytest.mark.timeout(60)
def test_binary_output_and_no_trailing_newline_come_back_byte_exact(
    target: remotekit.Target,
) -> None:
    blob = bytes(range(256)) * 3 + b"\r\n\x00tail without newline"
    code = f"import sys; sys.stdout.buffer.write({blob!r}); sys.stdout.flush()"
    run = _start(target, [target.launch.interpreter or "python3", "-c", code])
    try:
        assert run.wait(timeout=30).exit_code == 0
        assert b"".join(run.logs()) == blob
        assert b"".join(run.logs(offset=700)) == blob[700:]
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_megabytes_of_random_bytes_come_back_whole(local: remotekit.Target) -> None:
    blob = os.urandom(3 << 20)  # escaped, each record of these is several times their size
    code = "import os, sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())"
    src = Path(local.spec.runs_dir or "/tmp") / f"rk-blob-{uuid.uuid4().hex[:8]}"
    src.write_bytes(blob)
    try:
        run = _start(local, [sys.executable, "-c", code, str(src)])
        try:
            assert run.wait(timeout=30).exit_code == 0
            assert b"".join(run.logs()) == blob
        finally:
            _tidy(run)
    finally:
        src.unlink()


@pytest.mark.timeout(60)
def test_a_whole_log_travels_as_the_file_s_bytes_not_as_records(
    target: remotekit.Target,
) -> None:
    """``logs()`` without follow/tail/offset reads the log file on the raw byte path (the
    runner's ``get``), which costs no encoding there nor decoding here."""
    run = _start(target, ["printf", "a\\0b\\377\\n"])
    steps: list[tuple[str, str]] = []
    try:
        run.wait(timeout=30)
        target.trace = lambda step, chain: steps.append((step, chain))
        stream = run.logs()
        assert b"".join(stream) == b"a\0b\377\n"
        assert (stream.state, stream.exit_code, stream.offset) == ("exited", 0, 5)
        reads = [chain for step, chain in steps if step == f"runs logs {run.id}"]
        assert len(reads) == 1 and f"get {run.info().log}" in reads[0]
        steps.clear()
        assert b"".join(run.logs(stream="stderr")) == b""
        assert any(c.endswith(f"/{run.id}/stderr.log") for _, c in steps)
    finally:
        target.trace = None
        _tidy(run)


@pytest.mark.timeout(120)
def test_a_whole_log_read_across_a_killed_connection_comes_back_byte_exact(
    ct: remotekit.Target,
) -> None:
    n = 6_000_000  # 54 MB: more than every buffer on the way holds, so the read is cut midway
    code = "import sys; sys.stdout.buffer.write(b''.join(b'%08d\\n' % i for i in range(int(sys.argv[1]))))"
    run = _start(ct, [ct.launch.interpreter or "python3", "-c", code, str(n)])
    try:
        assert run.wait(timeout=60).exit_code == 0
        steps: list[str] = []
        ct.trace = lambda step, chain: steps.append(chain)
        stream = run.logs()
        chunks = iter(stream)
        got = bytearray(next(chunks))
        _cut_the_connection(ct, run.id)
        for chunk in chunks:
            got += chunk
        assert len(got) == 9 * n and bytes(got) == b"".join(b"%08d\n" % i for i in range(n))
        assert (stream.state, stream.offset) == ("exited", 9 * n)
        resumed = [c for c in steps if f"logs {run.id}" in c]
        assert resumed and "--offset" in resumed[0]  # the rest, from where the cut left it
    finally:
        ct.trace = None
        _tidy(run)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("follow", [False, True])
def test_a_stream_s_offset_is_where_what_the_reader_took_ends(
    local: remotekit.Target, follow: bool
) -> None:
    """A reader that breaks off: ``offset`` counts what it took, not what was read ahead
    for it, so ``logs(offset=stream.offset)`` goes on with nothing lost and nothing twice."""
    n = 1_000_000
    code = "import sys; sys.stdout.buffer.write(b''.join(b'%06d\\n' % i for i in range(int(sys.argv[1]))))"
    run = _start(local, [sys.executable, "-c", code, str(n)])
    try:
        assert run.wait(timeout=30).exit_code == 0
        stream = run.logs(follow=follow)
        assert stream.offset is None
        chunks = iter(stream)
        taken = next(chunks) + next(chunks)
        time.sleep(0.5)  # the worker reads ahead meanwhile: what it holds was not taken
        chunks.close()  # type: ignore[attr-defined]
        assert stream.offset == len(taken)
        rest = b"".join(run.logs(follow=follow, offset=stream.offset))
        assert taken + rest == b"".join(b"%06d\n" % i for i in range(n))
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_nasty_argv_is_recorded_and_run_as_given(target: remotekit.Target) -> None:
    words = ["a b", "$(touch /tmp/rk-pwned)", "'\"`;|&", "ünïcödé ✓", "-n", "\\", "", "--", "*"]
    run = _start(target, ["printf", "[%s]\\n", *words])
    try:
        assert run.wait(timeout=30).exit_code == 0
        assert run.info().command == ("printf", "[%s]\\n", *words)
        expected = "".join(f"[{w}]\n" for w in words).encode()
        assert b"".join(run.logs()) == expected
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_tail_gives_the_last_lines(local: remotekit.Target) -> None:
    run = _start(local, ["bash", "-c", "for i in $(seq 1 50); do echo line$i; done"])
    try:
        run.wait(timeout=30)
        assert b"".join(run.logs(tail=3)) == b"line48\nline49\nline50\n"
        assert b"".join(run.logs(tail=0)) == b""
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_two_runs_at_once_keep_their_own_output(target: remotekit.Target) -> None:
    go = f"/tmp/{_marker()}"  # both wait for it: they run at the same time
    wait = f"while [ ! -e {go} ]; do sleep .05; done; "
    a = _start(target, ["bash", "-c", wait + "for i in 1 2 3; do echo a$i; done"])
    b = _start(target, ["bash", "-c", wait + "for i in 1 2 3; do echo b$i; done; exit 5"])
    try:
        assert a.id != b.id
        assert {a.info().state, b.info().state} == {"running"}
        target.run(["touch", go], timeout=20)
        assert (a.wait(timeout=30).exit_code, b.wait(timeout=30).exit_code) == (0, 5)
        assert b"".join(a.logs()) == b"a1\na2\na3\n"
        assert b"".join(b.logs()) == b"b1\nb2\nb3\n"
    finally:
        target.run(["rm", "-f", go], timeout=20)
        _tidy(a)
        _tidy(b)


@pytest.mark.timeout(60)
def test_follow_ends_with_the_run_and_gives_its_exit_code(target: remotekit.Target) -> None:
    run = _start(
        target, ["bash", "-c", "for i in $(seq 1 20); do echo $i; sleep .05; done; exit 7"]
    )
    try:
        stream = run.logs(follow=True)
        got = b"".join(stream)
        assert got == b"".join(f"{i}\n".encode() for i in range(1, 21))
        assert (stream.state, stream.exit_code) == ("exited", 7)
    finally:
        _tidy(run)


def _cut_the_connection(target: remotekit.Target, run_id: str) -> None:
    """Kill what carries the follow: the local runner, or the sshd session process."""
    pids = run_readers(run_id)
    assert pids, "no logs step running"
    chain = ancestors(pids[0])
    if target.spec.ssh is None:
        victim = chain[0][0]  # the runner: the local transport's process
    else:
        victim = next(pid for pid, cmd in chain if cmd.startswith("sshd"))
    os.kill(victim, signal.SIGKILL)


@pytest.mark.timeout(90)
def test_follow_across_a_killed_connection_shows_every_line_exactly_once(
    target: remotekit.Target,
) -> None:
    n = 400
    run = _start(target, ["bash", "-c", f"for i in $(seq 1 {n}); do echo line $i; sleep .01; done"])
    try:
        stream = run.logs(follow=True)
        got = bytearray()
        cuts = 0
        for chunk in stream:
            got += chunk
            if cuts < 2 and got.count(b"\n") > (cuts + 1) * n // 4:
                _cut_the_connection(target, run.id)
                cuts += 1
        assert cuts == 2
        assert bytes(got) == b"".join(f"line {i}\n".encode() for i in range(1, n + 1))
        assert stream.exit_code == 0
    finally:
        _tidy(run)


@pytest.mark.timeout(90)
def test_follow_over_a_connection_gone_silent_reconnects_and_loses_nothing(
    ct: remotekit.Target,
) -> None:
    """The sshd session carrying the follow is frozen (SIGSTOP): TCP stays up, nothing comes,
    as on a link that died without a reset. The follow notices the silence (no beat) and
    reconnects, well before TCP would give up."""
    n = 300
    run = _start(ct, ["bash", "-c", f"for i in $(seq 1 {n}); do echo line $i; sleep .1; done"])
    frozen: list[int] = []
    try:
        stream = run.logs(follow=True)
        got = bytearray()
        for chunk in stream:
            got += chunk
            if not frozen and got.count(b"\n") >= 30:
                chain = ancestors(run_readers(run.id)[0])
                frozen.append(next(pid for pid, cmd in chain if cmd.startswith("sshd")))
                os.kill(frozen[0], signal.SIGSTOP)
        assert frozen
        assert bytes(got) == b"".join(f"line {i}\n".encode() for i in range(1, n + 1))
        assert stream.exit_code == 0
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)
        _tidy(run)


@pytest.mark.timeout(60)
def test_stop_ends_the_whole_tree_setsid_and_double_forked_daemons_too(
    target: remotekit.Target,
) -> None:
    mark = _marker()
    py = target.launch.interpreter or "python3"
    daemon = (
        "import os, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        f"time.sleep(300)  # {mark}-daemon\n"
    )
    script = (
        f"setsid bash -c 'sleep 301; : {mark}-setsid' & "
        f'{py} -c "$DAEMON"; '
        "trap '' TERM; sleep 302"  # TERM ignored, by the sleep too: KILL after the grace
    )
    run = _start(target, ["env", f"DAEMON={daemon}", "bash", "-c", script])
    try:
        end = time.monotonic() + 20
        while len(processes_with(mark)) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(processes_with(mark)) >= 3, "the run's three processes did not start"
        info = run.stop(grace=1)
        assert info.state == "stopped" and info.exit_code is not None
        assert wait_gone(mark, 5.0) == []
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_a_run_outlives_target_close(inventory: remotekit.Inventory, agent: bool | None) -> None:
    mark = _marker()
    with inventory.target("ct", agent=agent) as t:
        started = t.run(["bash", "-c", f"sleep 2; echo {mark}"], detach=True, timeout=30)
    # the connection is gone; a new one finds the run, which goes on and ends by itself
    with inventory.target("ct", agent=agent) as t:
        run = t.run_handle(started.id)
        assert run.state() == "running"
        assert run.wait(timeout=30).exit_code == 0
        assert b"".join(run.logs()) == f"{mark}\n".encode()
        run.rm()


@pytest.mark.timeout(60)
def test_a_supervisor_killed_outright_leaves_a_lost_run(target: remotekit.Target) -> None:
    mark = _marker()
    run = _start(target, ["bash", "-c", f"sleep 303; : {mark}"])
    try:
        sup = [p for p in processes_with(f"start {run.id}")]
        assert len(sup) == 1
        os.kill(sup[0], signal.SIGKILL)
        end = time.monotonic() + 10
        while run.state() != "lost" and time.monotonic() < end:
            time.sleep(0.05)
        assert run.state() == "lost" and run.info().exit_code is None
        assert processes_with(mark), "the command itself ran on"
        stopped = run.stop(grace=1)  # what can still be found (its process group) is stopped
        assert stopped.state == "stopped"
        assert wait_gone(mark, 5.0) == []
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_rm_refuses_a_running_run_and_removes_a_finished_one(local: remotekit.Target) -> None:
    run = _start(local, ["sleep", "30"])
    try:
        with pytest.raises(remotekit.RemotekitError, match="still running"):
            run.rm()
        run.stop(grace=1)
        run.rm()
        with pytest.raises(remotekit.RemotekitError, match=f"no run {run.id}"):
            run.info()
        with pytest.raises(remotekit.RemotekitError, match=f"no run {run.id}"):
            b"".join(run.logs())
    finally:
        if run.id in [r.id for r in local.runs()]:
            _tidy(run)


@pytest.mark.timeout(60)
def test_run_python_detach_is_a_run_with_its_files(local: remotekit.Target) -> None:
    script = remotekit.Script(
        b"import os, sys\n"
        b"print(open(os.path.join(os.environ['REMOTEKIT_DIR'], 'cfg')).read(), sys.argv[1:])\n",
        name="train.py",
    )
    run = local.run_python(script, ["--lr", "3e-4"], files={"cfg": b"lr"}, detach=True, timeout=30)
    r = run.result
    assert r is not None and r.detached is not None and r.detached.id == run.id
    assert r.argv[-3:] == ("<shipped train.py>", "--lr", "3e-4")
    try:
        assert run.wait(timeout=30).exit_code == 0
        assert b"".join(run.logs()) == b"lr ['--lr', '3e-4']\n"
    finally:
        _tidy(run)
    assert not os.path.exists(r.detached.dir), "rm removes the shipped files too"


@pytest.mark.timeout(60)
def test_records_are_private_and_runs_dir_is_honoured(tmp_path: Path, agent: bool | None) -> None:
    where = tmp_path / "my runs"
    with open_local(agent, runs_dir=str(where)) as t:
        run = _start(t, ["true"])
        try:
            run.wait(timeout=30)
            folder = where / run.id
            assert (os.stat(where).st_mode & 0o777) == 0o700
            assert (os.stat(folder).st_mode & 0o777) == 0o700
            for f in folder.iterdir():
                assert (f.stat().st_mode & 0o777) == 0o600, f.name
        finally:
            _tidy(run)


@pytest.mark.timeout(30)
def test_a_closed_follow_stops_its_step_there(local: remotekit.Target) -> None:
    run = _start(local, ["bash", "-c", "while :; do echo tick; sleep .05; done"])
    threads = threading.active_count()  # before the follow (other tests may have left some)
    try:
        stream = iter(run.logs(follow=True))
        next(stream)
        stream.close()  # type: ignore[attr-defined]
        end = time.monotonic() + 5
        while run_readers(run.id) and time.monotonic() < end:
            time.sleep(0.05)
        assert run_readers(run.id) == []
    finally:
        _tidy(run)
    end = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < end:
        time.sleep(0.05)
    assert threading.active_count() <= threads  # the follow's own threads ended with it


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, agent: bool | None) -> Iterator[remotekit.Target]:
    """``local`` inside the cluster's running job (srun --jobid); runs go through sbatch."""
    import shutil

    from remotekit.layers import Slurm

    job = int(slurm_cluster.running)
    srun = shutil.which("srun") or "srun"
    with open_local(agent, hops=(Slurm(job, bin=srun),), python=sys.executable) as t:
        yield t


def _job_state(job: str | None) -> str:
    """The job's state as slurmctld has it (ended jobs too: the test cluster keeps them)."""
    assert job is not None and job.isdigit(), job
    r = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--format=%T", f"--jobs={job}"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return r.stdout.strip()


def _kill_the_supervisor(run: Run) -> None:
    """SIGKILL the run's supervisor and its ``sbatch --wait`` (as a login node's reboot would
    end both): the job runs on. An sbatch left behind would wait on, past the test cluster."""
    sup = processes_with(f"start {run.id}")
    assert len(sup) == 1, sup
    os.kill(sup[0], signal.SIGKILL)
    for pid in processes_with(f"--job-name=remotekit-{run.id}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while processes_with(f"start {run.id}") and time.monotonic() < end:
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_on_slurm_a_run_is_a_batch_job_that_exits_with_the_jobs_code(
    slurm: remotekit.Target,
) -> None:
    mark = _marker()
    run = _start(slurm, ["bash", "-c", f"echo {mark} in $SLURM_JOB_ID; exit 6"])
    try:
        done = run.wait(timeout=90)
        assert (done.state, done.exit_code) == ("exited", 6)
        out = b"".join(run.logs()).decode()
        assert out.startswith(f"{mark} in ") and out.split()[-1].isdigit(), out
        assert done.job == out.split()[-1], "the record names the job"
        assert run.info().command == ("bash", "-c", f"echo {mark} in $SLURM_JOB_ID; exit 6")
    finally:
        _tidy(run)


@pytest.mark.timeout(120)
def test_on_slurm_a_job_goes_through_the_hops_that_stay_in_its_tree(
    slurm_cluster: SlurmCluster, agent: bool | None
) -> None:
    """srun -> sudo -u nobody: still a batch job (sudo's command stays in the job's tree),
    whose command is entered through the hops after srun (the real sudo, on the node)."""
    from remotekit.layers import Slurm, Sudo

    sudo = need_program("sudo")
    srun = need_program("srun")
    hops = (Slurm(int(slurm_cluster.running), bin=srun), Sudo(sudo, as_user="nobody"))
    with open_local(agent, hops=hops, python=sys.executable) as t:
        run = _start(t, ["sh", "-c", "echo as $(id -un)"])
        try:
            done = run.wait(timeout=90)
            assert (done.state, done.exit_code) == ("exited", 0)
            assert done.job is not None and done.job.isdigit()  # a batch job
            assert b"".join(run.logs()).decode() == "as nobody\n"
        finally:
            _tidy(run)


@pytest.mark.timeout(120)
def test_on_slurm_stop_cancels_the_job_by_its_id(slurm: remotekit.Target) -> None:
    """The job renamed after it started (scontrol update): only its id still finds it."""
    mark = _marker()
    run = _start(slurm, ["bash", "-c", f"echo started; sleep 300; : {mark}"])
    try:
        stream = iter(run.logs(follow=True))
        assert next(stream) == b"started\n"  # the job runs
        job = run.info().job
        assert _job_state(job) == "RUNNING"
        subprocess.run(["scontrol", "update", f"JobId={job}", "JobName=renamed"], check=True)
        assert run.stop(grace=1).state == "stopped"
        end = time.monotonic() + 30
        while _job_state(job) != "CANCELLED":
            assert time.monotonic() < end, _job_state(job)
            time.sleep(0.2)
        assert wait_gone(mark, 20.0) == []
    finally:
        _tidy(run)


@pytest.mark.timeout(180)
def test_on_slurm_a_run_whose_supervisor_is_gone_is_what_its_job_is(
    slurm: remotekit.Target,
) -> None:
    """Without its supervisor (a login node rebooted) a batch run still runs while its job
    does: running, followed to its end, and its exit code read from the scheduler."""
    go = f"/tmp/{_marker()}"
    run = _start(slurm, ["bash", "-c", f"echo a; while [ ! -e {go} ]; do sleep .1; done; exit 5"])
    try:
        stream = run.logs(follow=True)
        chunks = iter(stream)
        assert next(chunks) == b"a\n"
        _kill_the_supervisor(run)
        assert run.state() == "running" and _job_state(run.info().job) == "RUNNING"
        Path(go).touch()
        assert b"".join(chunks) == b""  # the follow ends with the job
        assert (stream.state, stream.exit_code) == ("exited", 5)
        info = run.info()
        assert (info.state, info.exit_code) == ("exited", 5) and info.ended is not None
    finally:
        Path(go).unlink(missing_ok=True)
        _tidy(run)


@pytest.mark.timeout(180)
def test_on_slurm_stop_without_the_supervisor_cancels_the_job(slurm: remotekit.Target) -> None:
    mark = _marker()
    run = _start(slurm, ["bash", "-c", f"echo started; sleep 300; : {mark}"])
    try:
        assert next(iter(run.logs(follow=True))) == b"started\n"
        _kill_the_supervisor(run)
        assert run.state() == "running"
        stopped = run.stop(grace=1)
        assert (stopped.state, stopped.exit_code) == ("stopped", 128 + signal.SIGTERM)
        assert _job_state(stopped.job) == "CANCELLED"
        assert wait_gone(mark, 20.0) == []
    finally:
        _tidy(run)


@pytest.mark.timeout(120)
def test_on_slurm_a_job_nobody_knows_is_lost_and_a_silent_scheduler_leaves_it_running(
    slurm: remotekit.Target, slurm_cluster: SlurmCluster, run_records: Path
) -> None:
    """Without the supervisor: squeue failing (slurmctld unreachable) is no answer, so the
    run stays running; a job squeue does not know (purged, no accounting) leaves it lost."""
    from dataclasses import replace

    run = _start(slurm, ["bash", "-c", "sleep 300"])
    job = run.info().job
    try:
        _kill_the_supervisor(run)
        deaf = replace(slurm.spec, env={"SLURM_CONF": "/nonexistent/slurm.conf"})
        with remotekit.Target(deaf) as t:
            assert t.run_handle(run.id).state() == "running"
        record = run_records / run.id / "run.json"
        forgotten = {**json.loads(record.read_text()), "job": slurm_cluster.unknown}
        record.write_text(json.dumps(forgotten))
        info = run.info()
        assert (info.state, info.job) == ("lost", slurm_cluster.unknown)
    finally:
        subprocess.run(["scancel", str(job)], check=False, timeout=20)
        _tidy(run)


@pytest.mark.timeout(10)
def test_on_slurm_a_detached_script_is_refused_saying_why() -> None:
    from remotekit.layers import Slurm

    t = remotekit.Target(remotekit.HostSpec(name="hpc", hops=(Slurm(4242, bin="/no/such/srun"),)))
    script = remotekit.Script(b"print(1)", name="train.py")
    with pytest.raises(remotekit.RemotekitError) as info:  # before anything runs
        t.run_python(script, detach=True)
    text = str(info.value)
    assert "host 'hpc'" in text and "is a batch job" in text and "run --detach" in text


def _python38() -> str:
    import glob
    import shutil

    found = [os.environ.get("REMOTEKIT_PYTHON38", ""), shutil.which("python3.8") or ""]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    usable = [p for p in found if p and ".pyenv/shims" not in p and os.access(p, os.X_OK)]
    if not usable:
        pytest.skip("no python3.8 here (set REMOTEKIT_PYTHON38 to one)")
    return usable[0]


def test_the_supervisor_parses_as_python_3_8() -> None:
    import ast

    from remotekit import shipping

    ast.parse(shipping.source("supervisor.py"), feature_version=(3, 8))


@pytest.mark.timeout(60)
def test_runs_work_with_python_3_8_there(agent: bool | None) -> None:
    with open_local(agent, python=_python38()) as t:
        run = _start(t, ["bash", "-c", "echo old; exit 2"])
        try:
            assert run.wait(timeout=30).exit_code == 2
            assert b"".join(run.logs(follow=True)) == b"old\n"
            sleeper = _start(t, ["sleep", "30"])
            assert sleeper.stop(grace=1).state == "stopped"
            _tidy(sleeper)
        finally:
            _tidy(run)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("chain", ["lxc-attach", pytest.param("ssh-pct", marks=pytest.mark.sshd)])
def test_a_container_restart_marks_its_runs_lost(
    chain: str, tmp_path: Path, agent: bool | None
) -> None:
    """A container of its own, restarted under a running run, entered by lxc-attach here or
    through sshd -> `pct exec` as on a Proxmox node: the record (in the container's state
    dir, not its tmpfs /tmp) stays; the run is lost, and rm works."""
    from remotekit.layers import Lxc
    from tests import runtimes
    from tests.conftest import need, write_inventory
    from tests.harness import FakeNode, SSHServer, venv_prefix

    need("lxc")
    box = runtimes.LxcContainer().start()
    server = None
    try:
        if chain == "lxc-attach":
            t = open_local(agent, hops=(Lxc(box.name),), venv=venv_prefix(), python=None)
        else:
            node = FakeNode(tmp_path / "node", running=box).install()
            node.add(301)
            server = SSHServer(tmp_path / "sshd", env=node.env).start()
            host = server.host_yaml(container=301, pct=str(node.pct), venv=venv_prefix())
            write_inventory(tmp_path / "hosts.yaml", {"ct": host})
            t = remotekit.load_inventory(tmp_path / "hosts.yaml").target("ct", agent=agent)
        with t:
            run = _start(t, ["bash", "-c", "sleep 300"])
            assert run.state() == "running"
            subprocess.run(["lxc-stop", "-n", box.name, "-k"], check=True, timeout=60)
            subprocess.run(["lxc-start", "-n", box.name, "-d"], check=True, timeout=60)
            runtimes.wait_for(f"lxc-attach {box.name}", box._answers)
            info = run.info()
            assert (info.state, info.exit_code) == ("lost", None)
            run.rm()
            assert t.runs() == []
    finally:
        if server is not None:
            server.stop()
        box.stop()


FOLLOWER = """
import json, resource, sys, time
import remotekit
with remotekit.local_target(**json.loads(sys.argv[2])) as t:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = 0
    for chunk in t.run_handle(sys.argv[1]).logs(follow=True):
        got += len(chunk)
        time.sleep(0.002)  # a reader slower than the log: the backlog must not pile up here
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(got, grew * 1024)
"""


@pytest.mark.timeout(180)
def test_following_a_large_log_keeps_local_memory_bounded(local: remotekit.Target) -> None:
    mb = 256
    code = "import sys\nb = b'x' * 1023 + b'\\n'\nfor _ in range(%d * 1024): sys.stdout.buffer.write(b)\n"
    run = _start(local, [sys.executable, "-c", code % mb])
    try:
        overrides = json.dumps({"agent": local.spec.agent})  # the follower's steps go as ours
        r = subprocess.run(
            [sys.executable, "-c", FOLLOWER, run.id, overrides],
            capture_output=True,
            text=True,
            timeout=170,
        )
        assert r.returncode == 0, r.stderr
        got, grew = map(int, r.stdout.split())
        assert got == mb << 20, r.stdout
        assert grew < 96 << 20, f"the follower grew by {grew >> 20} MiB for a {mb} MiB log"
    finally:
        _tidy(run)


@pytest.mark.timeout(60)
def test_a_runs_command_leaves_the_host_with_its_secrets_masked(local: remotekit.Target) -> None:
    run = _start(local, ["env", "HF_TOKEN=hf_s3cr3t", "true", "--api-key", "k3y", "--lr", "1"])
    try:
        run.wait(timeout=30)
        shown = run.info().command
        assert "hf_s3cr3t" not in " ".join(shown) and "k3y" not in shown
        assert shown == ("env", "HF_TOKEN=***", "true", "--api-key", "***", "--lr", "1")
    finally:
        _tidy(run)


@pytest.mark.timeout(120)
def test_detach_is_typed_as_a_run(tmp_path: Path) -> None:
    """mypy knows ``run(..., detach=True)`` is a Run and ``run(...)`` a Result."""
    api = pytest.importorskip("mypy.api")
    if sys.version_info < (3, 11):
        pytest.skip("typing.assert_type is Python >= 3.11")
    src = tmp_path / "typed.py"
    src.write_text(
        "from typing import assert_type\n"
        "import remotekit\n"
        "from remotekit.runs import Run\n"
        "def f(t: remotekit.Target, flag: bool) -> None:\n"
        "    assert_type(t.run(['x'], detach=True), Run)\n"
        "    assert_type(t.run(['x']), remotekit.Result)\n"
        "    assert_type(t.run(['x'], detach=False), remotekit.Result)\n"
        "    assert_type(t.run_python('s.py', ['a'], detach=True), Run)\n"
        "    assert_type(t.run_python('s.py'), remotekit.Result)\n"
        "    assert_type(t.run(['x'], detach=flag), remotekit.Result | Run)\n"
    )
    out, err, code = api.run(["--no-error-summary", str(src)])
    assert code == 0, out + err


# -- records, ids and disks that cannot be trusted; logs that change under a follow ---------


def _agent_pid(t: remotekit.Target) -> int:
    """The pid of the process that ran this step's runner (the agent, on its path)."""
    return int(t.run(["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"], timeout=20).stdout)


#: Run there: run.json of the run in folder argv[1] with the JSON object argv[2] merged in
#: (a null removes the key), and no exit.json: a record as a hand, or a bug, leaves it.
FORGE = """
import json, os, sys
folder, changes = sys.argv[1], json.loads(sys.argv[2])
with open(os.path.join(folder, "run.json")) as f:
    rec = json.load(f)
rec.update(changes)
with open(os.path.join(folder, "run.json"), "w") as f:
    json.dump({k: v for k, v in rec.items() if v is not None}, f)
if os.path.exists(os.path.join(folder, "exit.json")):
    os.remove(os.path.join(folder, "exit.json"))
"""


def _forge(t: remotekit.Target, run: Run, **changes: object) -> None:
    folder = os.path.dirname(run.info().log)
    t.run([t.launch.interpreter or "python3", "-c", FORGE, folder, json.dumps(changes)])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pid", [-1, 0, 1])
def test_stop_never_signals_a_recorded_pid_of_one_or_less(
    ct: remotekit.Target, agent: bool | None, pid: int
) -> None:
    """A record whose supervisor pid is -1, 0 or 1, without a start time: kill(-1) would end
    every process of the user (root in the container: all of them, the agent too), kill(0)
    the stop's own group, kill(1) init. Such a record is corrupt: stop signals nothing and
    says so in one line; the sentinel and the agent live on."""
    mark = _marker()
    sentinel = _start(ct, ["bash", "-c", f"sleep 300; : {mark}"])
    victim = _start(ct, ["true"])
    try:
        victim.wait(timeout=30)
        before = _agent_pid(ct)
        _forge(ct, victim, supervisor={"pid": pid}, pid=pid, pid_start=None)
        with pytest.raises(remotekit.RemotekitError) as info:
            victim.stop(grace=1)
        said = str(info.value)
        assert "\n" not in said and "host 'ct'" in said and f"run {victim.id}:" in said
        assert "record is corrupt" in said and "nothing was signalled" in said, said
        assert victim.info().state == "corrupt"
        assert processes_with(mark) and sentinel.state() == "running"
        assert ct.run(["true"], timeout=20).ok  # a second step, on the same agent
        if agent is not False:
            assert _agent_pid(ct) == before
    finally:
        victim.rm()  # a corrupt record is removed by its id, and the files shipped for it
        _tidy(sentinel)
    assert victim.result is not None and victim.result.detached is not None
    assert not ct.run(["test", "-e", victim.result.detached.dir], timeout=20, check=False).ok


@pytest.mark.timeout(90)
def test_rm_removes_no_folder_a_record_names_but_the_runner_did_not_make(
    target: remotekit.Target,
) -> None:
    """A record's ``dir`` (a corrupt record's too) is removed with it only where it is what a
    runner makes (remotekit-<12 hex>, a folder itself, ours): a forged one pointing at
    another folder, or at a link named as ours, leaves both where they are."""
    mark = _marker()
    keep = f"/tmp/{mark}-keep"
    link = "/tmp/remotekit-" + uuid.uuid4().hex[:12]
    made = target.run(["sh", "-c", f"mkdir {keep} && touch {keep}/f && ln -s {keep} {link}"])
    assert made.ok, made
    try:
        for forged in (keep, link):
            for corrupt in (False, True):
                run = _start(target, ["true"])
                run.wait(timeout=30)
                assert run.result is not None and run.result.detached is not None
                _forge(target, run, dir=forged, **({"started": "yesterday"} if corrupt else {}))
                run.rm()
                target.run(["rm", "-rf", run.result.detached.dir], timeout=20)  # its real one
                assert target.run(["test", "-f", f"{keep}/f"], timeout=20).ok, (forged, corrupt)
                assert target.run(["test", "-L", link], timeout=20).ok, (forged, corrupt)
    finally:
        target.run(["rm", "-rf", keep, link], timeout=20)


#: Run there: record folders beside the run in folder argv[1], each its run.json with one
#: thing wrong (a field, a type, a key gone, a value out of bounds, the size, the nesting,
#: the folder's name); the folder names, as JSON, on stdout.
MAKE_BAD = """
import json, os, sys
folder = sys.argv[1]
with open(os.path.join(folder, "run.json")) as f:
    good = json.load(f)
made = []
def bad(name, data):
    os.mkdir(os.path.join(os.path.dirname(folder), name), 0o700)
    with open(os.path.join(os.path.dirname(folder), name, "run.json"), "w") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))
    made.append(name)
bad("bad-started", dict(good, id="bad-started", started="yesterday"))
bad("bad-types", dict(good, id="bad-types", command="rm -rf /", pid="12"))
bad("bad-missing", {k: v for k, v in dict(good, id="bad-missing").items() if k != "supervisor"})
bad("bad-huge", dict(good, id="bad-huge", started=1e308, supervisor={"pid": 2**40, "start": 1}))
bad("bad-size", dict(good, id="bad-size", command=["x" * 100000]))
bad("bad-deep", "[" * 50000)
bad("bad-json", "{not json")
osc = "bad\\x1b]0;pwned\\x07"
bad(osc, dict(good, id=osc))
print(json.dumps(made))
"""


@pytest.mark.timeout(90)
def test_each_record_is_checked_on_its_own_and_a_bad_one_is_listed_as_corrupt(
    target: remotekit.Target,
) -> None:
    """One malformed record used to make ``runs`` list nothing for the whole host; now each
    is listed as corrupt (saying what is wrong, its id escaped) and the rest as usual."""
    run = _start(target, ["echo", "fine"])
    made: list[str] = []
    try:
        run.wait(timeout=30)
        py = target.launch.interpreter or "python3"
        folder = os.path.dirname(run.info().log)
        made = json.loads(target.run([py, "-c", MAKE_BAD, folder], timeout=30).stdout)
        listed = {r.id: r for r in target.runs()}
        assert listed[run.id].state == "exited" and listed[run.id].problem is None
        why = {
            "bad-started": "started is not a Unix time",
            "bad-types": "command is not a list of words",
            "bad-missing": "supervisor is missing",
            "bad-huge": "started is not a Unix time",
            "bad-size": "larger than 64 KiB",
            "bad-deep": "not JSON",
            "bad-json": "not JSON",
            repr(made[-1]): "id is not a run id",
        }
        for name, problem in why.items():
            r = listed[name]
            assert (r.state, r.exit_code) == ("corrupt", None), name
            assert r.problem is not None and problem in r.problem, (name, r.problem)
        shown = str(target.runs()[0]) + "".join(str(r) for r in listed.values())
        assert "\x1b" not in shown and "\x07" not in shown
        assert run.info().state == "exited"
        with pytest.raises(remotekit.RemotekitError, match="record is corrupt"):
            target.run_handle("bad-started").stop(grace=1)
        target.run_handle("bad-started").rm()
        assert "bad-started" not in [r.id for r in target.runs()]
    finally:
        top = os.path.dirname(os.path.dirname(run.info().log))
        gone = [os.path.join(top, name) for name in made]
        if gone:
            target.run(["rm", "-rf", "--", *gone], timeout=30)
        _tidy(run)


@pytest.mark.timeout(60)
def test_ids_and_streams_are_checked_before_anything_runs(target: remotekit.Target) -> None:
    """An id names a folder there and a stream a file in it: ``../../x`` must not climb out
    (``--stream ../../outside`` printed a file beside the runs dir)."""
    run = _start(target, ["echo", "mine"])
    top = os.path.dirname(os.path.dirname(run.info().log))  # the runs dir
    outside = os.path.join(os.path.dirname(top), "outside.log")
    steps: list[str] = []
    try:
        run.wait(timeout=30)
        target.run(["sh", "-c", f"echo not-a-run > {outside}"], timeout=20)
        target.trace = lambda step, chain: steps.append(step)
        for bad in ("../../x", "", "a/b", "x" * 65, "..", "r\x1b]0;t\x07"):
            with pytest.raises(ValueError, match="not a run id"):
                target.run_handle(bad)
        for stream in ("../../outside", "bogus", "output/../../../outside"):
            for follow in (False, True):
                with pytest.raises(ValueError, match="not a log of a run"):
                    run.logs(stream=stream, follow=follow)
        with pytest.raises(ValueError, match="0 or more"):
            run.logs(offset=-1)
        assert steps == []  # refused here: nothing ran there
    finally:
        target.trace = None
        target.run(["rm", "-f", outside], timeout=20)
        _tidy(run)


@pytest.mark.timeout(60)
def test_an_error_there_is_said_once_not_retried_as_a_lost_connection(
    target: remotekit.Target,
) -> None:
    """The supervisor's own failure (here a log that is a directory) is its error, raised at
    once: one step, no reconnects, not a ConnectionLost."""
    run = _start(target, ["echo", "x"])
    steps: list[str] = []
    try:
        run.wait(timeout=30)
        log = os.path.join(os.path.dirname(run.info().log), "stderr.log")
        target.run(["sh", "-c", f"rm {log} && mkdir {log}"], timeout=20)
        target.trace = lambda step, chain: steps.append(step)
        for follow in (True, False):
            with pytest.raises(remotekit.RemotekitError) as info:
                b"".join(run.logs(stream="stderr", follow=follow, offset=0))
            assert not isinstance(info.value, remotekit.ConnectionLost), info.value
            assert "not a regular file" in str(info.value), info.value
        assert steps == [f"runs logs {run.id}"] * 2
        target.run(["rmdir", log], timeout=20)
    finally:
        target.trace = None
        _tidy(run)


@pytest.mark.timeout(60)
def test_a_full_disk_refuses_a_detached_run_and_nothing_runs(
    small_runs: Path, agent: bool | None
) -> None:
    """The run is recorded before its command starts: a disk too full to record it starts
    nothing, and says so in one line (no supervisor traceback)."""
    mark = _marker()
    began = small_runs.parent / "began"  # not on the full disk
    with open_local(agent, runs_dir=str(small_runs / "runs")) as t:
        fill(small_runs)
        with pytest.raises(remotekit.RemotekitError) as info:
            t.run(["bash", "-c", f"touch {began}; sleep 300; : {mark}"], detach=True, timeout=30)
        said = str(info.value)
        assert "Traceback" not in said and "\n" not in said, said
        assert re.search(r"run \w+ on local: cannot record it in .*: No space left", said), said
        assert wait_gone(mark, 5.0) == [] and not began.exists()  # it never started
        assert t.runs() == []  # and no record is left


@pytest.mark.timeout(120)
def test_a_disk_that_fills_during_a_run_loses_output_not_the_run(
    small_runs: Path, agent: bool | None
) -> None:
    """Output that cannot be written is drained and counted, so the run ends when it should
    (it blocked on its full pipe), its exit is recorded on the full disk, the loss is shown,
    and stop works there (it wrote a file first)."""
    mark = _marker()
    lines = 16384  # 2 MiB of output for a 256 KiB disk
    code = f"import sys\nfor i in range({lines}): sys.stdout.write('%0127d\\n' % i)\nsys.exit(3)"
    expected = b"".join(b"%0127d\n" % i for i in range(lines))
    with open_local(agent, runs_dir=str(small_runs / "runs")) as t:
        sleeper = _start(t, ["bash", "-c", f"sleep 300; : {mark}"])
        flood = _start(t, [sys.executable, "-c", code])
        try:
            done = flood.wait(timeout=60)
            assert (done.state, done.exit_code) == ("exited", 3)
            lost = done.lost_bytes.get("output", 0)
            kept = b"".join(flood.logs())
            assert lost > 0 and len(kept) + lost == len(expected) and kept == expected[: len(kept)]
            followed = flood.logs(follow=True)
            assert b"".join(followed) == kept and followed.lost_bytes == lost
            assert "bytes lost" in str(done) and str(lost) in str(done)
            with pytest.raises(OSError, match="No space left"):  # the disk is full still
                (small_runs / "one-more").write_bytes(b"x" * 4096)
            stopped = sleeper.stop(grace=1)
            assert stopped.state == "stopped" and wait_gone(mark, 5.0) == []
        finally:
            _tidy(flood)
            _tidy(sleeper)


def _taker(chunks: Iterator[bytes]) -> Callable[[bytes, float], bytes]:
    """``take(want, timeout)``: what ``chunks`` gave so far, once it ends with ``want``
    (read by a thread, so a follow that shows nothing fails here instead of hanging)."""
    got: queue.Queue[bytes | None] = queue.Queue()
    seen = bytearray()

    def read() -> None:
        for chunk in chunks:
            got.put(chunk)
        got.put(None)

    threading.Thread(target=read, daemon=True).start()

    def take(want: bytes, timeout: float = 20.0) -> bytes:
        end = time.monotonic() + timeout
        while not seen.endswith(want):
            left = end - time.monotonic()
            assert left > 0, f"waited for {want!r}, got {bytes(seen)!r}"
            with contextlib.suppress(queue.Empty):
                chunk = got.get(timeout=min(left, 0.5))
                assert chunk is not None, f"ended before {want!r}: {bytes(seen)!r}"
                seen.extend(chunk)
        return bytes(seen)

    return take


@pytest.mark.timeout(90)
def test_a_follow_goes_on_from_the_start_of_a_log_truncated_or_replaced(
    target: remotekit.Target,
) -> None:
    """The run's log truncated mid-follow, then replaced by a new file: the lines written
    after each are shown, and each is said once."""
    go = f"/tmp/{_marker()}"
    wait = "while [ ! -e {0} ]; do sleep .05; done; "
    script = "echo a1; echo a2; echo a3; " + wait.format(go + "1") + "echo b1; "
    script += wait.format(go + "2") + "echo c1"
    run = _start(target, ["bash", "-c", script])
    warned: list[str] = []
    try:
        log = run.info().log
        stream = run.logs(follow=True, on_warning=warned.append)
        take = _taker(iter(stream))
        take(b"a1\na2\na3\n")
        target.run(["truncate", "-s", "0", log], timeout=20)
        target.run(["touch", go + "1"], timeout=20)
        assert take(b"b1\n") == b"a1\na2\na3\nb1\n"
        assert len(warned) == 1 and "was truncated (9 -> " in warned[0], warned
        target.run(["sh", "-c", f"echo new > {log}.new && mv {log}.new {log}"], timeout=20)
        target.run(["touch", go + "2"], timeout=20)
        assert take(b"c1\n") == b"a1\na2\na3\nb1\nnew\nc1\n"
        assert len(warned) == 2 and "was replaced" in warned[1], warned
        assert run.wait(timeout=30).exit_code == 0
        assert all(f"run {run.id} on {target.name}: {log} was" in w for w in warned)
    finally:
        target.run(["rm", "-f", go + "1", go + "2"], timeout=20)
        _tidy(run)


def test_the_runs_table_on_a_narrow_terminal_spares_the_start_and_the_log() -> None:
    """`remotekit runs` on 80 columns: id, state, exit, duration and the command (wrapped);
    the start time and the log path (`logs ID` reads it) with --wide, or in a pipe."""
    from remotekit.result import tables_fit
    from remotekit.runs import RunInfo, render_runs

    command = ("sh", "-c", "echo a long command line with many words in it; sleep 1")
    log = "/root/.local/state/remotekit/runs/14baa34f/output.log"
    run = RunInfo("14baa34f", "h", "exited", 0, 1.7e9, 1.7e9 + 1.1, command, log)
    with tables_fit(80):
        narrow = render_runs([run]).splitlines()
    assert narrow[0].split() == ["id", "state", "exit", "duration", "command"], narrow
    assert narrow[-1] == "(--wide adds started, log)" and max(map(len, narrow)) <= 80
    assert narrow[2].startswith("14baa34f  exited  0     1.1s      sh -c 'echo a long")
    whole = render_runs([run])
    assert log in whole and "--wide" not in whole and len(whole.splitlines()) == 3
