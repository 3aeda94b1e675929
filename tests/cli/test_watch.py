"""``--watch`` and transfer progress, driven as a person does: `remotekit TASK` on a real pty
(Python's ``pty``) and through a pipe.

The GPU is the fake nvidia-smi of tests/fakes/ (through a hosts.yaml whose hosts set PATH),
the transfers go through the local target and the real sshd fixture. Counts, not clocks:
``--count N`` bounds a watch, and the frames are counted in what it printed.
"""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from remotekit.progress import Meter, Progress, format_eta
from remotekit.watch import (
    CLEAR_BELOW,
    CLEAR_LINE,
    CLEAR_SCREEN,
    HOME,
    Screen,
    fleet_frame,
    parse_interval,
    watch,
)
from tests.conftest import open_local, write_inventory
from tests.harness import REMOTEKIT, SSHServer, Tty
from tests.smi import make_bin_dir, make_notorch, smi_env

# --------------------------------------------------------------------------- helpers


def pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REMOTEKIT, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def marked(mark: str) -> list[int]:
    """Pids of live processes whose environment holds ``mark`` (a step's env reaches every
    process the step starts)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in env and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def watch_inventories(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bool | None], Path]:
    """``hosts`` as written for each ``agent``, once per module."""
    return functools.cache(lambda agent: _write_hosts(tmp_path_factory.mktemp("watch"), agent))


@pytest.fixture
def hosts(watch_inventories: Callable[[bool | None], Path], agent: bool | None) -> Path:
    """A hosts.yaml with ``a`` and ``b`` (local, the fake nvidia-smi) and ``slow`` (its
    nvidia-smi says it started, then hangs), each step's env marked with a unique value;
    every host's ``agent:`` as the fixture says."""
    return watch_inventories(agent)


def _write_hosts(d: Path, agent: bool | None) -> Path:
    bin_dir = make_bin_dir(d / "bin")
    notorch = make_notorch(d)
    slow = d / "slowbin"
    slow.mkdir()
    (slow / "nvidia-smi").write_text(f'#!/bin/sh\ntouch "{d}/started"\nexec sleep 300\n')
    (slow / "nvidia-smi").chmod(0o755)
    local = {"python": notorch.spec.python, "workdir": notorch.spec.workdir}
    mark = {"WATCH_TEST_MARK": f"watch-{uuid.uuid4().hex}"}
    path = d / "hosts.yaml"
    write_inventory(
        path,
        {
            "a": {**local, "env": smi_env(bin_dir, **mark)},
            "b": {**local, "env": smi_env(bin_dir, "throttled", **mark)},
            "slow": {**local, "env": {"PATH": f"{slow}:/usr/bin:/bin", **mark}},
        },
        agent=agent,
    )
    return path


def mark_of(hosts: Path) -> str:
    return hosts.read_text().split("WATCH_TEST_MARK: ", 1)[1].split()[0]


# --------------------------------------------------------------------------- --watch


def test_watch_redraws_in_place_on_a_tty_with_every_host_in_each_frame(hosts: Path) -> None:
    tty = Tty(
        ["gpu", "--watch", "0.1", "--count", "3", "--host", "a,b", "--inventory", str(hosts)],
        hosts.parent,
    )
    try:
        rc = tty.finish()
    finally:
        tty.kill()
    out = tty.seen.decode(errors="replace")
    assert out.count("Every 0.1s: remotekit gpu") == 3, out[-2000:]
    assert out.count(CLEAR_SCREEN) == 1 and out.count(HOME) == 3  # cleared once, then redrawn
    assert out.count("== a ==") == out.count("== b ==") == 3
    assert "gpu on b" in out and "throttl" in out.lower()
    assert rc == 1  # --count: the last refresh's verdict (b is throttled)


def test_watch_fits_the_frame_to_a_small_window(hosts: Path) -> None:
    args = ["gpu", "--watch", "0.1", "--count", "2", "--host", "a,b", "--inventory", str(hosts)]
    tty = Tty(args, hosts.parent, size=(12, 40))
    try:
        tty.finish()
    finally:
        tty.kill()
    out = tty.seen.decode(errors="replace")
    frames = out.split(HOME)[1:]
    assert len(frames) == 2
    for frame in frames:
        lines = frame.replace("\r", "").replace(CLEAR_LINE, "").split("\n")
        assert len(lines) - 1 <= 11, lines  # never a newline on the last row: nothing scrolls
        assert max(len(line) for line in lines) <= 39, lines
        assert "more lines (a larger" in frame


@pytest.mark.parametrize("task", ["gpu", "procs", "disk"])
def test_watch_appends_plain_frames_on_a_pipe(hosts: Path, task: str) -> None:
    r = pipe(
        [task, "--watch", "0.05", "--count", "2", "--host", "a", "--inventory", str(hosts)],
        hosts.parent,
    )
    assert r.returncode in (0, 1), r.stderr
    assert "\x1b" not in r.stdout + r.stderr
    assert r.stdout.count(f"Every 0.05s: remotekit {task}") == 2
    assert "== a ==" not in r.stdout  # one host: no host headers


def test_watch_default_interval_and_json_lines(hosts: Path) -> None:
    r = pipe(
        ["gpu", "--watch", "--count", "2", "--json", "--host", "a,b", "--inventory", str(hosts)],
        hosts.parent,
    )
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stderr[-2000:]
    for line in lines:
        doc = json.loads(line)
        assert [h["host"] for h in doc["hosts"]] == ["a", "b"]
        assert doc["hosts"][0]["result"]["gpus"]
    assert r.returncode == 1


def test_watch_refuses_a_bad_interval(hosts: Path) -> None:
    r = pipe(["procs", "--watch", "soon", "--inventory", str(hosts), "--host", "a"], hosts.parent)
    assert r.returncode == 2
    assert "--watch takes seconds between refreshes, not 'soon'" in r.stderr
    r = pipe(["disk", "--count", "3", "--inventory", str(hosts), "--host", "a"], hosts.parent)
    assert r.returncode == 2 and "--count goes with --watch" in r.stderr


def test_ctrl_c_ends_a_watch_with_exit_0_and_leaves_nothing_running(hosts: Path) -> None:
    started = hosts.parent / "started"
    started.unlink(missing_ok=True)
    tty = Tty(
        ["gpu", "--watch", "0.1", "--host", "a,slow", "--inventory", str(hosts)], hosts.parent
    )
    try:
        # The first refresh hangs in slow's nvidia-smi: Ctrl-C lands mid-step.
        end = time.monotonic() + 60
        while not started.exists() and time.monotonic() < end:
            tty.read_until(lambda _: False, timeout=0.1)
        assert started.exists(), tty.seen.decode(errors="replace")
        assert marked(mark_of(hosts)), "the hanging step should be running"
        os.killpg(tty.proc.pid, signal.SIGINT)
        rc = tty.finish()
    finally:
        tty.kill()
    assert rc == 0, tty.seen.decode(errors="replace")[-2000:]
    assert "Traceback" not in tty.seen.decode(errors="replace")
    end = time.monotonic() + 10
    while marked(mark_of(hosts)) and time.monotonic() < end:
        time.sleep(0.1)
    assert marked(mark_of(hosts)) == []


def test_ctrl_c_over_ssh_stops_the_step_there(
    sshd: SSHServer, tmp_path: Path, agent: bool | None
) -> None:
    """The step there is not in our process group: only the fleet's stop reaches it."""
    slow = tmp_path / "slowbin"
    slow.mkdir()
    started = tmp_path / "started"
    (slow / "nvidia-smi").write_text(f'#!/bin/sh\ntouch "{started}"\nexec sleep 300\n')
    (slow / "nvidia-smi").chmod(0o755)
    mark = f"watch-{uuid.uuid4().hex}"
    notorch = make_notorch(tmp_path)
    far = sshd.host_yaml(
        python=notorch.spec.python,
        env={"PATH": f"{slow}:/usr/bin:/bin", "WATCH_TEST_MARK": mark},
    )
    inv = tmp_path / "hosts.yaml"
    write_inventory(inv, {"far": far}, agent=agent)
    tty = Tty(["procs", "--watch", "0.1", "--host", "far", "--inventory", str(inv)], tmp_path)
    try:
        end = time.monotonic() + 60
        while not started.exists() and time.monotonic() < end:
            tty.read_until(lambda _: False, timeout=0.1)
        assert started.exists(), tty.seen.decode(errors="replace")[-2000:]
        assert marked(mark)
        os.killpg(tty.proc.pid, signal.SIGINT)
        rc = tty.finish()
    finally:
        tty.kill()
    assert rc == 0, tty.seen.decode(errors="replace")[-2000:]
    end = time.monotonic() + 10
    while marked(mark) and time.monotonic() < end:
        time.sleep(0.1)
    assert marked(mark) == []


def test_ctrl_c_between_refreshes_ends_with_exit_0(hosts: Path) -> None:
    tty = Tty(["procs", "--watch", "30", "--host", "a", "--inventory", str(hosts)], hosts.parent)
    try:
        # The end of the first frame: its last line may be cut to the window on a machine
        # with many processes, and waiting for it would wait through the next refresh.
        first = tty.read_until(lambda seen: CLEAR_BELOW.encode() in seen)
        assert CLEAR_BELOW.encode() in first, first.decode(errors="replace")[-2000:]
        os.killpg(tty.proc.pid, signal.SIGINT)  # during the 30 s wait
        rc = tty.finish(timeout=20)
    finally:
        tty.kill()
    assert rc == 0
    assert tty.seen.count(b"Every 30s: remotekit procs") == 1


def test_watch_loop_counts_and_screens() -> None:
    class Out:
        def __init__(self) -> None:
            self.text = ""

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    frames = iter(range(100))
    out = Out()
    shown = watch(
        lambda: f"frame {next(frames)}", interval=0.001, count=4, screen=Screen(out, live=False)
    )  # type: ignore[arg-type]
    assert shown == 4 and [f"frame {i}" in out.text for i in range(5)] == [True] * 4 + [False]
    assert parse_interval(True) == 2.0 and parse_interval("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "x"):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_a_watch_refreshes_through_one_agent_on_its_interval() -> None:
    """Every refresh is a message to the same resident agent (no new hop chain, no new
    Python a frame), and a frame starts no sooner than the interval after the one before."""
    import remotekit

    starts: list[float] = []

    def parent_of_runner(t: remotekit.Target) -> str:
        return t.run(["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"], timeout=30).stdout

    with remotekit.fleet([open_local(True)]) as f:
        frame = fleet_frame(f, parent_of_runner, str.strip)

        def timed() -> str:
            starts.append(time.monotonic())
            return frame()

        out = io.StringIO()
        shown = watch(timed, interval=0.5, count=4, screen=Screen(out, live=False))
    pids = {line for line in out.getvalue().splitlines() if line.isdigit()}
    assert shown == 4 and len(pids) == 1 and pids != {str(os.getpid())}, out.getvalue()
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert len(gaps) == 3 and min(gaps) >= 0.5 - 0.01, gaps


# --------------------------------------------------------------------------- progress


def test_progress_draws_bytes_rate_eta_at_most_every_interval() -> None:
    now = [0.0]
    lines: list[str] = []
    show = Progress("put x", draw=lines.append, interval=0.1, clock=lambda: now[0])
    total = 100 << 20
    for i in range(101):  # 1 MiB every 10 ms: 100 updates over a second
        now[0] = i * 0.01
        show(i << 20, total)
    # The first, one per 0.1 s after it, and the completion: about 11, never 100.
    assert 10 <= len(lines) <= 12, lines
    assert "MiB/s" in lines[-1] and "100.0 MiB/100.0 MiB  100%" in lines[-1]
    assert "100.0 MiB/s" in lines[-1] and lines[-1].endswith("ETA 0:00")
    assert "ETA -" in lines[0]  # no rate yet
    assert format_eta(3725) == "ETA 1:02:05"
    m = Meter()
    m.add(0.0, 0)
    m.add(1.0, 50)
    assert m.rate == 50 and m.eta(50, 150) == 2


def test_progress_sums_parts() -> None:
    lines: list[str] = []
    show = Progress("put", draw=lines.append, interval=0)
    show.part("a")(10, 10)
    show.part("b")(5, 10)
    assert lines[-1].startswith("put  1/2 done  15 B/20 B  75%")


def _callbacks() -> tuple[list[tuple[int, int]], object]:
    calls: list[tuple[int, int]] = []
    return calls, lambda done, total: calls.append((done, total))


def _assert_progress(calls: list[tuple[int, int]], size: int) -> None:
    assert calls, "on_progress was never called"
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and dones[-1] == size
    assert {t for _, t in calls} == {size}


def test_put_and_get_report_progress_locally(tmp_path: Path, agent: bool | None) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20) + b"tail")
    size = src.stat().st_size
    with open_local(agent) as t:
        calls, cb = _callbacks()
        t.put(src, str(tmp_path / "there.bin"), on_progress=cb)  # type: ignore[arg-type]
        _assert_progress(calls, size)
        assert len(calls) > 2  # several chunks, not just start and end
        calls, cb = _callbacks()
        t.get(str(tmp_path / "there.bin"), tmp_path / "back.bin", on_progress=cb)  # type: ignore[arg-type]
        _assert_progress(calls, size)
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_put_and_get_report_progress_over_ssh(
    sshd: SSHServer, tmp_path: Path, agent: bool | None
) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(2 << 20))
    size = src.stat().st_size
    dest = f"/tmp/remotekit-watch-{uuid.uuid4().hex}.bin"
    try:
        inv = write_inventory(tmp_path / "hosts.yaml", {"node": sshd.host_yaml()})
        with inv.target("node", agent=agent) as t:
            calls, cb = _callbacks()
            t.put(src, dest, on_progress=cb)  # type: ignore[arg-type]
            _assert_progress(calls, size)
            calls, cb = _callbacks()
            t.get(dest, tmp_path / "back.bin", on_progress=cb)  # type: ignore[arg-type]
            _assert_progress(calls, size)
        assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    finally:
        Path(dest).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.bin"
    path.write_bytes(os.urandom(24 << 20))
    return path


def test_put_shows_bytes_and_rate_on_a_terminal_only(big: Path, tmp_path: Path) -> None:
    args = ["put", "--src", str(big), "--dest", str(tmp_path / "a.bin")]
    tty = Tty(args, tmp_path, pipe_stdout=True)
    try:
        rc = tty.finish()
    finally:
        tty.kill()
    err = tty.seen.decode(errors="replace")
    assert rc == 0, err
    assert "put big.bin" in err and "MiB/24.0 MiB" in err and "/s" in err and "ETA" in err
    assert "\r\x1b[K" in err  # redrawn in place, and cleared at the end
    r = pipe(args, tmp_path)
    assert r.returncode == 0 and "ETA" not in r.stderr + r.stdout and "\r" not in r.stderr
    tty = Tty([*args, "--json"], tmp_path, pipe_stdout=True)
    try:
        rc = tty.finish()
    finally:
        tty.kill()
    assert rc == 0 and tty.seen == b""  # --json: not a byte on the terminal's stderr


def test_get_shows_progress_on_a_terminal_only(big: Path, tmp_path: Path) -> None:
    args = ["get", "--src", str(big), "--dest", str(tmp_path / "b.bin")]
    tty = Tty(args, tmp_path, pipe_stdout=True)
    try:
        rc = tty.finish()
    finally:
        tty.kill()
    err = tty.seen.decode(errors="replace")
    assert rc == 0 and f"get {big}" in err and "24.0 MiB/24.0 MiB" in err and "/s" in err
    r = pipe(args, tmp_path)
    assert r.returncode == 0 and r.stderr == "" and (tmp_path / "b.bin").stat().st_size == 24 << 20


def test_ckpt_scan_shows_rate_and_eta_on_a_terminal(tmp_path: Path) -> None:
    import torch

    ck = tmp_path / "ckpts"
    ck.mkdir()
    for i in range(3):
        torch.save({"w": torch.randn(256, 256)}, ck / f"step{i}.pt")
    args = ["ckpt-scan", "--checkpoints", str(ck)]
    tty = Tty(args, tmp_path, pipe_stdout=True)
    try:
        rc = tty.finish()
    finally:
        tty.kill()
    err = tty.seen.decode(errors="replace")
    assert rc == 0, err
    assert "files" in err and "/s" in err and "ETA" in err
    # Piped or --json: no progress, as for put above (the same Console line); each run here
    # pays for a torch import there, so the pipe case is left to test_cli_diagnostics.


def test_frames_show_control_characters_from_a_host_as_escapes() -> None:
    """A host's text may carry escape sequences (a title, a clear screen, a C1 CSI): drawn
    they would act on our terminal, or on the one that later shows the file they were piped
    to. They show as escapes; on a terminal only the screen's own cursor codes get through."""
    out = io.StringIO()
    body = "a\x1b]0;pwned\x07b\tc\x1b[2J\rd\x9b31me\x7f\x00f\nok\n"
    Screen(out, live=True).show("head", body)  # type: ignore[arg-type]
    text = out.getvalue()
    for code in (CLEAR_SCREEN, HOME, CLEAR_LINE, CLEAR_BELOW):
        text = text.replace(code, "")
    assert text == "head\n\na\\x1b]0;pwned\\x07b\tc\\x1b[2J\\rd\\x9b31me\\x7f\\x00f\nok\n"
    plain = io.StringIO()
    Screen(plain, live=False).show(None, "raw\x1b[31m\n")  # type: ignore[arg-type]
    assert plain.getvalue() == "raw\\x1b[31m\n"
