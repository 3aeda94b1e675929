"""``train-log --follow``: a log being written (by a real writer process, tests/fakes/
trainlog_writer.py) followed on the local target and through the real chain (sshd, and
sshd -> fake pct exec -> a real LXC container); incidents reported while the writer is still
going, the follower gone after Ctrl-C or close(), a lost connection followed again,
truncation, rotation, a partial last line, an endless line, CSV, text and TensorBoard logs,
``--json``, ``--on-incident``, formats and files that are refused.

Bounds, not clocks: every follow has a ``timeout`` (it then ends by itself), every wait a
deadline; the writer waits for files the test creates when it has seen what it waits for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import remotekit
import remotekit.diagnostics.trainlog as tl
from remotekit.errors import DiagnosticError
from tests.conftest import CT, write_inventory
from tests.harness import FAKES, FakeNode, SSHServer, Tty, processes_with, venv_prefix, wait_gone
from tests.trainlog_kit import (
    BOUND_S,
    RUN_SCRIPT,
    RUN_SPIKE,
    append,
    follow,
    once_started,
    until,
)

WRITER = FAKES / "trainlog_writer.py"
REMOTEKIT = [str(Path(sys.executable).parent / "remotekit")]
SPIKE = 340


class Writer:
    """A training run's logger in a process of its own, writing ``log`` (see the writer)."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        self.go, self.stop = Path(f"{log}.go"), Path(f"{log}.stop")
        argv = [sys.executable, str(WRITER), str(log), "--go", str(self.go)]
        argv += ["--stop", str(self.stop), "--max-s", str(BOUND_S), *args]
        self.proc = subprocess.Popen(argv)

    def started(self, rows: int = 300) -> Writer:
        """Once the baseline rows are written."""
        end = time.monotonic() + 30
        while _lines(self.log) < rows and time.monotonic() < end:
            time.sleep(0.02)
        return self

    def finish(self) -> str:
        self.stop.touch()
        self.proc.wait(timeout=30)
        return Path(f"{self.log}.end").read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.fixture
def writers() -> Iterator[Callable[..., Writer]]:
    made: list[Writer] = []

    def make(log: Path, *args: str) -> Writer:
        made.append(Writer(log, *args))
        return made[-1]

    yield make
    for w in made:
        w.kill()


def target_for(tmp_path: Path, host: dict[str, object]) -> remotekit.Target:
    inv = write_inventory(tmp_path / f"hosts-{uuid.uuid4().hex}.yaml", {"there": host})
    return inv.target("there")


def holders(log: Path, *but: int) -> list[int]:
    """Pids of the processes (but ours and ``but``) holding the file ``log`` open, found by
    its inode: a follower there holds its log open, seen from here whatever its namespace."""
    want = (log.stat().st_dev, log.stat().st_ino)
    skip = {os.getpid(), *but}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                st = fd.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == want:
                found.append(int(entry.name))
                break
    return found


def gone(log: Path, *but: int, timeout: float = 15.0) -> list[int]:
    """Poll until no process (but ``but``) holds ``log`` open; those still there at the end."""
    end = time.monotonic() + timeout
    while (left := holders(log, *but)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def go_once_following(writer: Writer) -> Callable[[tl.FollowStatus], None]:
    """An on_status that lets the writer go on once the follower judged its first rows."""

    def on_status(status: tl.FollowStatus) -> None:
        if status.state == "following" and not writer.go.exists():
            writer.go.touch()

    return on_status


# --------------------------------------------------------------------------- the chain


@pytest.fixture
def where(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[remotekit.Target, Path, str]]:
    """(target, the log's folder as seen here, the same folder as seen there):
    this machine, or sshd -> fake pct exec -> the LXC container (its private /tmp)."""
    if request.param == "local":
        with remotekit.local_target() as t:
            yield t, tmp_path, str(tmp_path)
        return
    node: FakeNode = request.getfixturevalue("node")
    sshd: SSHServer = request.getfixturevalue("sshd")
    here = node.ct_tmp(CT) / f"follow-{tmp_path.name}"
    here.mkdir(parents=True, exist_ok=True)
    os.chmod(here, 0o777)
    host = sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
    with target_for(tmp_path, host) as t:
        yield t, here, f"/tmp/{here.name}"


@pytest.mark.parametrize("where", ["local", "ct"], indirect=True)
def test_a_spike_is_reported_while_the_writer_is_still_going(
    where: tuple[remotekit.Target, Path, str], writers: Callable[..., Writer]
) -> None:
    t, here, there = where
    w = writers(here / "log.jsonl", "--spike-at", str(SPIKE)).started()
    with follow(t, f"{there}/log.jsonl", on_status=go_once_following(w)) as live:
        inc = until(live, lambda i: i.kind == "spike")
        assert w.proc.poll() is None and not w.stop.exists()  # the run still goes on
        assert holders(w.log, w.proc.pid)  # the follower there
        assert (inc.step, inc.metric) == (SPIKE, "loss")
        assert inc.spike is not None and inc.spike.value == 20.5 and inc.spike.baseline
        assert live.source is not None and live.source.format == "jsonl"
        assert live.status is not None and live.status.backlog in (None, 0)
        assert "step 340: loss spike: value 20.5" in inc.render()
    assert gone(w.log, w.proc.pid) == []  # close() stopped it there
    assert w.finish() == "stop"


def test_the_follower_over_ssh_is_gone_after_close(
    sshd: SSHServer, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    t = target_for(tmp_path, sshd.host_yaml(python=f"{venv_prefix()}/bin/python"))
    log = tmp_path / "log.jsonl"
    w = writers(log, "--spike-at", str(SPIKE)).started()
    with t, follow(t, str(log), on_status=go_once_following(w)) as live:
        assert until(live, lambda i: i.kind == "spike").step == SPIKE
        assert holders(log, w.proc.pid)
    assert gone(log, w.proc.pid) == []
    assert w.finish() == "stop"


def test_a_lost_connection_is_followed_again_without_losing_an_incident(
    sshd: SSHServer, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    """The sshd serving the follow dies after the first spike; the second is written while
    no follower runs: the follow starts again after the last step it judged and reports the
    second spike, the first not again."""
    from tests.harness import ancestors

    t = target_for(tmp_path, sshd.host_yaml(python=f"{venv_prefix()}/bin/python"))
    log = tmp_path / "log.jsonl"
    spikes = ["--spike-at", str(SPIKE), "--spike-at", str(SPIKE + 60)]
    w = writers(log, *spikes, "--hold-at", str(SPIKE + 50)).started()

    def on_warning(message: str) -> None:
        if "connection lost" in message:
            Path(f"{log}.hold").touch()  # the next spike is written while none follows

    with t, follow(t, str(log), on_status=go_once_following(w), on_warning=on_warning) as live:
        assert until(live, lambda i: True).step == SPIKE
        (follower,) = holders(log, w.proc.pid)
        session = next(pid for pid, cmd in ancestors(follower) if cmd.startswith("sshd:"))
        os.kill(session, signal.SIGKILL)
        assert until(live, lambda i: True).step == SPIKE + 60
        lost = [m for m in live.warnings if "connection lost" in m]
        assert len(lost) == 1 and "following again after step 3" in lost[0], live.warnings
    assert gone(log, w.proc.pid) == []
    assert w.finish() == "stop"


@pytest.mark.timeout(120)
def test_a_connection_gone_silent_is_followed_again_without_losing_an_incident(
    sshd: SSHServer, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    """The sshd session serving the follow is frozen (SIGSTOP) after the first spike: TCP
    stays up and nothing comes, as on a link that died without a reset. The follow notices
    the silence (no status for a while), connects again and reports the second spike, long
    before the step's own timeout would have ended it."""
    from tests.harness import ancestors

    t = target_for(tmp_path, sshd.host_yaml(python=f"{venv_prefix()}/bin/python"))
    log = tmp_path / "log.jsonl"
    spikes = ["--spike-at", str(SPIKE), "--spike-at", str(SPIKE + 60)]
    w = writers(log, *spikes, "--hold-at", str(SPIKE + 50)).started()
    frozen: list[int] = []

    def on_warning(message: str) -> None:
        if "connection lost" in message:
            Path(f"{log}.hold").touch()  # the next spike is written once it follows again

    try:
        with t, follow(t, str(log), on_status=go_once_following(w), on_warning=on_warning) as live:
            assert until(live, lambda i: True).step == SPIKE
            (follower,) = holders(log, w.proc.pid)
            chain = ancestors(follower)
            frozen.append(next(pid for pid, cmd in chain if cmd.startswith("sshd:")))
            os.kill(frozen[0], signal.SIGSTOP)
            assert until(live, lambda i: True).step == SPIKE + 60
            lost = [m for m in live.warnings if "connection lost" in m]
            assert len(lost) == 1 and "following again after step 3" in lost[0], live.warnings
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)
    assert gone(log, w.proc.pid) == []
    assert w.finish() == "stop"


# --------------------------------------------------------------------------- the API, local


@pytest.fixture
def local(tmp_path: Path) -> Iterator[remotekit.Target]:
    with remotekit.local_target() as t:
        yield t


def test_what_the_log_held_before_is_the_baseline_not_reported(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    log = tmp_path / "log.jsonl"
    w = writers(log, "--spike-at", "100", "--spike-at", str(SPIKE)).started()
    seen: list[tl.FollowStatus] = []

    def on_status(s: tl.FollowStatus) -> None:
        seen.append(s)
        go_once_following(w)(s)

    with follow(local, str(log), on_status=on_status) as live:
        assert until(live, lambda i: True).step == SPIKE  # not the spike at 100
    assert [s.backlog for s in seen if s.backlog] == [1]
    assert "1 incident(s) already in the log" in (seen[0].backlog_line() or "")


def test_nan_and_a_resume_are_incidents(local: remotekit.Target, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("")
    rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 301)]
    nan = [{"step": 301, "loss": "nan"}, {"step": 302, "loss": 2.0}]
    with follow(
        local, str(log), on_status=once_started(lambda: append(log, [*rows, *nan]))
    ) as live:
        assert until(live, lambda i: True).kind == "nonfinite"
        append(log, [{"step": s, "loss": 2.0 + 0.01 * (s % 5)} for s in range(250, 320)])
        inc = until(live, lambda i: True)
        assert (inc.kind, inc.step) == ("resume", 250)
        assert inc.event is not None and "went back" in inc.render()


def test_a_cancel_stops_the_follower_there_and_ends_the_iteration(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    log = tmp_path / "log.jsonl"
    w = writers(log, "--spike-at", str(SPIKE)).started()
    with follow(local, str(log), on_status=go_once_following(w)) as live:
        assert until(live, lambda i: True).step == SPIKE
        local.cancel()  # from any thread: here, the one that iterates
        with pytest.raises(remotekit.StepCancelled):
            next(live)
        with pytest.raises(StopIteration):
            next(live)  # over, and stays over
    local.resume()
    assert gone(log, w.proc.pid) == []


def once_following(action: Callable[[], None]) -> Callable[[tl.FollowStatus], None]:
    """An on_status that runs ``action`` once, when the follower has judged its first rows."""
    done: list[bool] = []

    def on_status(status: tl.FollowStatus) -> None:
        if status.state == "following" and not done:
            done.append(True)
            action()

    return on_status


def _truncate(log: Path) -> int:
    log.write_text("")  # a new run in the same file: its steps start again
    return 1


def _rotate(log: Path) -> int:
    log.rename(log.with_name(log.name + ".1"))
    return 400


@pytest.mark.parametrize(
    ("change", "words"), [(_truncate, "was truncated"), (_rotate, "was replaced")]
)
def test_a_truncated_or_replaced_log_is_read_again_from_its_start(
    local: remotekit.Target, tmp_path: Path, change: Callable[[Path], int], words: str
) -> None:
    log = tmp_path / "log.jsonl"
    append(log, [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 400)])
    spike = [0]

    def new_run() -> None:
        first = change(log)
        rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(first, first + 300)]
        spike[0] = first + 300
        append(log, [*rows, {"step": spike[0], "loss": 30.0}, {"step": spike[0] + 1, "loss": 2.0}])

    warned: list[str] = []
    with follow(
        local, str(log), on_status=once_following(new_run), on_warning=warned.append
    ) as live:
        assert until(live, lambda i: True).step == spike[0]
    assert any(words in w for w in warned), warned


def test_a_log_replaced_by_an_empty_file_is_read_once_it_has_lines(
    local: remotekit.Target, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    append(log, [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 400)])
    rotated: list[int] = []
    count = [0]

    def on_status(s: tl.FollowStatus) -> None:
        count[0] += 1
        if s.state == "following" and not rotated:
            log.rename(tmp_path / "log.jsonl.1")
            log.touch()  # the logger reopened its file, nothing written yet
            rotated.append(count[0])
        elif rotated and count[0] == rotated[0] + 2:  # two looks at the empty file
            rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(400, 700)]
            append(log, [*rows, {"step": 700, "loss": 30.0}, {"step": 701, "loss": 2.0}])

    with follow(local, str(log), on_status=on_status) as live:
        assert until(live, lambda i: True).step == 700
    assert live.warnings and "was replaced" in live.warnings[0]


def test_a_partial_last_line_waits_for_its_newline(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    """``step=340 loss=2`` then ``0.5``: read early, the line would say 2 (no spike)."""
    log = tmp_path / "train.log"
    w = writers(log, "--format", "text", "--spike-at", str(SPIKE), "--split-at", str(SPIKE))
    w.started()

    def on_status(s: tl.FollowStatus) -> None:
        go_once_following(w)(s)
        if log.exists() and not log.read_bytes().endswith(b"\n") and s.bytes == _size(log):
            Path(f"{log}.rest").touch()  # the follower has read the partial line

    with follow(local, str(log), on_status=on_status) as live:
        inc = until(live, lambda i: True)
        assert (inc.step, inc.kind) == (SPIKE, "spike")
        assert inc.spike is not None and inc.spike.value == 20.5
        assert live.source is not None and live.source.format == "text"


def test_an_endless_line_is_dropped_and_the_follow_goes_on(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """3 MiB without a newline (a binary blob, a runaway print): never held whole."""
    log = tmp_path / "log.jsonl"
    rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 300)]

    def write() -> None:
        with log.open("a") as f:
            for _ in range(3):
                f.write("x" * (1 << 20))
                f.flush()
                time.sleep(0.1)
            f.write("\n")
        append(log, [*rows, {"step": 300, "loss": 30.0}, {"step": 301, "loss": 2.0}])

    log.write_text("")
    with follow(local, str(log), on_status=once_started(write)) as live:
        inc = until(live, lambda i: True)
        assert (inc.step, inc.kind) == (300, "spike")


def _size(path: Path) -> int:
    return path.stat().st_size


def test_a_csv_log_keeps_its_header_when_the_window_moves(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    """5000 rows before: the window is cut to its latest 2000 rows, the header stays."""
    log = tmp_path / "metrics.csv"
    w = writers(log, "--format", "csv", "--baseline", "5000", "--spike-at", "5040")
    w.started(5000)
    with follow(local, str(log), on_status=go_once_following(w)) as live:
        inc = until(live, lambda i: True)
        assert (inc.step, inc.kind) == (5040, "spike")
        assert live.source is not None and live.source.format == "csv"


def test_a_tensorboard_event_file_is_followed(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    pytest.importorskip("tensorboard")
    w = writers(tmp_path / "tb", "--format", "tfevents", "--spike-at", str(SPIKE))
    end = time.monotonic() + 60
    while not list((tmp_path / "tb").glob("events.out.tfevents.*")) and time.monotonic() < end:
        time.sleep(0.05)
    with follow(local, str(tmp_path / "tb"), on_status=go_once_following(w)) as live:
        inc = until(live, lambda i: True)
        assert (inc.step, inc.kind) == (SPIKE, "spike")
        assert live.source is not None and live.source.format == "tensorboard"


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        (
            "run-abc.wandb",
            b":W&B\xe1\xbe\x00" + b"\x00" * 64,
            "a W&B run file (.wandb): not followed",
        ),
        (
            "trainer_state.json",
            json.dumps({"log_history": [{"step": 1, "loss": 2.0}]}).encode(),
            "a JSON document",
        ),
    ],
)
def test_a_log_that_is_not_appended_is_refused_clearly(
    local: remotekit.Target, tmp_path: Path, name: str, data: bytes, words: str
) -> None:
    (tmp_path / name).write_bytes(data)
    with (
        pytest.raises(DiagnosticError) as err,
        follow(local, str(tmp_path / name)) as live,
    ):
        next(iter(live))
    assert words in str(err.value) and "JSON lines, CSV, text logs" in str(err.value)
    assert err.value.host == "local"


def test_a_fifo_is_refused_not_waited_on(local: remotekit.Target, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "log.jsonl")  # opening it would block until a writer comes
    with pytest.raises(DiagnosticError) as err, follow(local, str(tmp_path / "log.jsonl")) as live:
        next(live)
    assert "a FIFO (named pipe), not a regular file" in str(err.value)


def test_a_run_directory_is_followed_through_its_log(
    local: remotekit.Target, tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    w = writers(tmp_path / "trainer_log.jsonl", "--spike-at", str(SPIKE)).started()
    with follow(local, str(tmp_path), on_status=go_once_following(w)) as live:
        assert until(live, lambda i: True).step == SPIKE
        assert live.source is not None and live.source.chosen_from
        assert live.source.chosen_from.startswith("trainer_log.jsonl (LLaMA-Factory")


def test_the_longest_timeout_a_step_takes_bounds_a_follow_too(
    local: remotekit.Target, tmp_path: Path
) -> None:
    from remotekit.step import MAX_TIMEOUT_S

    class Enough(Exception):
        pass

    def on_status(s: tl.FollowStatus) -> None:
        raise Enough(s.state)  # the follower runs: out of the iteration

    log = tmp_path / "log.jsonl"
    live = follow(local, str(log), timeout=MAX_TIMEOUT_S, on_status=on_status)
    with live, pytest.raises(Enough, match="waiting"):
        next(live)


def test_a_missing_log_is_waited_for(local: remotekit.Target, tmp_path: Path) -> None:
    log = tmp_path / "later.jsonl"
    seen: list[tl.FollowStatus] = []

    def on_status(s: tl.FollowStatus) -> None:
        seen.append(s)
        if len(seen) == 2:
            rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 300)]
            append(log, [*rows, {"step": 300, "loss": 30.0}])

    with follow(local, str(log), on_status=on_status) as live:
        assert until(live, lambda i: True).step == 300
    assert seen[0].state == "waiting" and "no file at" in (seen[0].why or "")
    assert "waiting: no file at" in seen[0].line()


# --------------------------------------------------------------------------- the CLI


def _cli(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    path = tmp_path / "hosts.yaml"
    write_inventory(path, {name: {"python": sys.executable} for name in ("local", "local2")})
    argv = [*REMOTEKIT, "train-log", "--inventory", str(path), *args]
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def go_once_holding(w: Writer) -> None:
    """Let the writer go on once a follower holds its log open: it has read what is there
    (the baseline) and judges every line from now on."""
    end = time.monotonic() + 60
    while not holders(w.log, w.proc.pid):
        assert time.monotonic() < end, "no follower opened the log"
        time.sleep(0.05)
    w.go.touch()


def _read_line(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> bytes:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no line in time"
    return proc.stdout.readline()


def test_cli_json_lines_then_ctrl_c_exits_0_and_leaves_no_follower(
    tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    log = tmp_path / "log.jsonl"
    w = writers(log, "--spike-at", str(SPIKE), "--nan-at", str(SPIKE + 20)).started()
    args = ["--log", str(log), "--follow", "--json", "--timeout", str(BOUND_S)]
    proc = _cli(tmp_path, *args)
    try:
        go_once_holding(w)
        first = json.loads(_read_line(proc))
        second = json.loads(_read_line(proc))
        assert w.proc.poll() is None
        assert (first["kind"], first["step"], first["spike"]["value"]) == ("spike", SPIKE, 20.5)
        assert (second["kind"], second["step"]) == ("nonfinite", SPIKE + 20)
        assert second["spike"]["value"] == "nan" and first["host"] == "local"
        assert holders(log, w.proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert b"Traceback" not in err
    assert gone(log, w.proc.pid) == []


def test_cli_on_incident_gets_the_json_and_a_failing_hook_is_a_warning(
    tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    log = tmp_path / "log.jsonl"
    got = tmp_path / "hook.out"
    hook = tmp_path / "hook"
    hook.write_text(f'#!/bin/sh\ncat >> "{got}"\necho "no notifier here" >&2\nexit 3\n')
    hook.chmod(0o755)
    w = writers(log, "--spike-at", str(SPIKE), "--spike-at", str(SPIKE + 40)).started()
    proc = _cli(
        tmp_path,
        "--log",
        str(log),
        "--follow",
        "--on-incident",
        f"'{hook}' --flag",
        "--timeout",
        "60",
    )
    try:
        go_once_holding(w)
        lines = [_read_line(proc), _read_line(proc)]
        end = time.monotonic() + 30
        while _lines(got) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0
    assert [b"step 340: loss spike" in lines[0], b"step 380: loss spike" in lines[1]] == [
        True,
        True,
    ]
    sent = [json.loads(x) for x in got.read_text().splitlines()]
    assert [(s["kind"], s["step"]) for s in sent] == [("spike", SPIKE), ("spike", SPIKE + 40)]
    assert b"warning: --on-incident " in err and b"exit 3: no notifier here" in err


def _hook_leaving_a_tree(tmp_path: Path) -> tuple[Path, str]:
    """An --on-incident command that starts a child and an orphaned grandchild (``sleep``,
    in its process group), then returns at once or, given ``hang``, waits for them; the
    marker it is given (its second argument) is on each one's command line."""
    hook = tmp_path / "tree-hook"
    hook.write_text(
        "#!/bin/sh\n"
        "cat > /dev/null\n"
        'sleep "$2" > /dev/null 2>&1 &\n'
        '( sleep "$2" > /dev/null 2>&1 & )\n'
        'if [ "$1" = hang ]; then wait; fi\n'
    )
    hook.chmod(0o755)
    return hook, f"{300 + uuid.uuid4().int % 100}.{uuid.uuid4().int % 10**6:06d}"


@pytest.mark.parametrize("then", ["hang", "return"])
def test_an_incident_hook_leaves_no_process_of_its_tree(tmp_path: Path, then: str) -> None:
    """Stopped at its timeout (``hang``) or ended on its own, an --on-incident command goes
    with all it started: its child, its orphaned grandchild (TERM to its process group, KILL
    after a grace); for each incident."""
    from remotekit.cli.diagnostics import IncidentHook

    hook, m = _hook_leaving_a_tree(tmp_path)
    warned: list[str] = []
    notify = IncidentHook([str(hook), then, m], warned.append, timeout=1.0)
    for n in range(2):
        notify(json.dumps({"n": n}))
    notify.close(wait=30)
    assert wait_gone(m, 5) == []
    stopped = f"--on-incident {hook}: still running after 1 s: stopped"
    assert warned == ([stopped] * 2 if then == "hang" else [])


def test_cli_ctrl_c_during_an_incident_hook_leaves_no_process_of_its_tree(
    tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    """Ctrl-C while an --on-incident command runs: it gets the SIGINT a terminal sends (in a
    session of its own, it is not in our process group), and what it started, which ignores
    SIGINT (sh's background jobs), is stopped with it: remotekit exits 0 and leaves none."""
    log = tmp_path / "log.jsonl"
    hook, m = _hook_leaving_a_tree(tmp_path)
    w = writers(log, "--spike-at", str(SPIKE)).started()
    args = ["--log", str(log), "--follow", "--on-incident", f"'{hook}' hang {m}"]
    proc = _cli(tmp_path, *args, "--timeout", "60")
    try:
        go_once_holding(w)
        assert b"step 340: loss spike" in _read_line(proc)
        end = time.monotonic() + 30
        while len(processes_with(m)) < 3:  # the hook, its child, its grandchild
            assert time.monotonic() < end, "the hook did not start its tree"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert b"Traceback" not in err
    assert wait_gone(m, 5) == []


def test_the_help_names_what_the_follower_follows_and_refuses() -> None:
    """The formats are named in two places (the follower's error there, from the readers'
    registry, and the task's help): the help says each of the follower's words."""
    from remotekit.cli.diagnostics import train_log
    from remotekit.remote.trainlog.readers import FOLLOWED, READERS

    helptext = " ".join(train_log.help["follow"].split())
    assert all(part in helptext for part in FOLLOWED.split(", "))
    refused = {r.FORMAT for r in READERS if r.NOT_FOLLOWED}
    assert refused == {"wandb", "json"}
    assert "W&B .wandb" in helptext and "trainer_state.json" in helptext


def test_cli_refuses_a_wandb_file_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "run-x.wandb").write_bytes(b":W&B\xe1\xbe\x00" + b"\x00" * 64)
    proc = _cli(tmp_path, "--log", str(tmp_path / "run-x.wandb"), "--follow")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert b"not followed" in err and b"TensorBoard event files" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--on-incident", "true"], b"--on-incident goes with --follow"),
        (["--follow", "--host", "local,local2"], b"train-log --follow takes one --host"),
        (["--follow", "--plot", "x.png"], b"--plot draws a whole log: not with --follow"),
    ],
)
def test_cli_usage_errors_exit_2(tmp_path: Path, args: list[str], words: bytes) -> None:
    proc = _cli(tmp_path, "--log", "x.jsonl", *args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and words in err, err


def test_cli_on_a_terminal_shows_a_live_status_line_and_ctrl_c_exits_0(
    tmp_path: Path, writers: Callable[..., Writer]
) -> None:
    log = tmp_path / "log.jsonl"
    w = writers(log, "--spike-at", str(SPIKE)).started()
    hosts = tmp_path / "hosts.yaml"
    write_inventory(hosts, {"local": {"python": sys.executable}})
    tty = Tty(["train-log", "--inventory", str(hosts), "--log", str(log), "--follow"], tmp_path)
    try:
        go_once_holding(w)
        seen = tty.read_until(lambda seen: b"step 340: loss spike" in seen)
        seen = tty.read_until(lambda seen: seen.count(b"steps/s") >= 2)
        os.killpg(tty.proc.pid, signal.SIGINT)
        rc = tty.finish()
    finally:
        tty.kill()
    text = tty.seen.decode(errors="replace")
    assert rc == 0, text[-2000:]
    assert b"\r\x1b[K" in seen and b"local | step " in seen  # the line redrawn in place
    assert "following " in text and "format jsonl" in text and "Traceback" not in text
    assert gone(log, w.proc.pid) == []


@pytest.mark.parametrize(("how", "state", "code"), [("3", "exited", 3), ("kill", "exited", 137)])
def test_a_runs_log_is_followed_until_the_run_ends_and_says_how(
    local: remotekit.Target, tmp_path: Path, how: str, state: str, code: int
) -> None:
    """follow_train_log(run=ID) ends with the run, as `logs --follow` does: the run's last
    lines judged (the spike it wrote just before it ended is reported), then its end."""
    script, go = tmp_path / "train.py", tmp_path / "go"
    script.write_text(RUN_SCRIPT)
    run = local.run_python(str(script), [str(go), how], detach=True, timeout=30)
    try:

        def on_status(status: tl.FollowStatus) -> None:  # the rows so far judged: go on
            if status.state == "following":
                go.touch()

        live = tl.follow_train_log(local, run=run.id, timeout=BOUND_S, on_status=on_status)
        with live:
            found = [(i.kind, i.step) for i in live]  # ends by itself, with the run
        assert ("spike", RUN_SPIKE) in found, live.warnings
        assert (live.run_state, live.run_exit_code) == (state, code)
        assert live.exit_code == 1 and live.run_exit() == code
        said = live.run_ended()
        assert said is not None and said.startswith(f"run {run.id} exited with code {code}")
        if how == "kill":
            assert said.endswith("(signal 9, SIGKILL)")
    finally:
        go.touch()
        run.wait(timeout=30)
        run.rm()


def test_a_follow_takes_a_log_or_a_run(local: remotekit.Target) -> None:
    with pytest.raises(TypeError, match="a log or a run"):
        tl.follow_train_log(local)
    with pytest.raises(TypeError, match="a log or a run"):
        tl.follow_train_log(local, "x.log", run="ab12")


@pytest.mark.parametrize(("recovery", "said"), [(None, "not back"), (12.0, "back after 12 steps")])
def test_a_followed_spikes_line_says_back_after_n_steps_or_not_back(
    recovery: float | None, said: str
) -> None:
    """The follow line pairs each column's header with its cell; a spike not back at its
    baseline says "not back", never "back after not back"."""
    from remotekit.diagnostics.trainlog.follow import Incident
    from remotekit.diagnostics.trainlog.model import Spike

    spike = Spike(
        metric="loss",
        kind="spike",
        step=200,
        peak_step=200,
        value=8.0,
        baseline=1.0,
        scale=0.1,
        score=7.0,
        recovery_steps=recovery,
        flagged=1,
        event=None,
        event_step=None,
        distance=None,
        bucket=None,
        run_position=None,
    )
    line = Incident("h", "/log", "spike", 200, "loss", spike=spike).render()
    assert said in line and "back after not back" not in line, line
