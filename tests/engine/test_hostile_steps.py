"""Steps and transfers under hostile or careless input (issue 11): nothing hangs, nothing
grows without bound, nothing survives a step unasked, nothing lies.

The cases that depend on the transport run on ``local`` and through the real sshd (ssh ->
fake pct exec -> venv Python): the ``target`` fixture is parametrized over both.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import remotekit
from remotekit import shipping
from remotekit.step import OutputStream as _Stream
from tests.conftest import CT, held_with_python
from tests.harness import FAKES, processes_with, wait_gone


@dataclass(frozen=True)
class There:
    """A scratch folder as the target sees it (``path``) and as this test sees it (``here``)."""

    target: remotekit.Target
    path: str
    here: Path
    ct_tmp: Path | None = None  # the container's /tmp, seen from here

    def local(self, there: str) -> Path:
        """Where a path the target names lies for this test."""
        if self.ct_tmp is None:
            return Path(there)
        return self.ct_tmp / Path(there).relative_to("/tmp")


@pytest.fixture
def there(
    target: remotekit.Target, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[There]:
    if target.spec.hop is None:
        yield There(target, str(tmp_path / "there"), (tmp_path / "there"))
        return
    name = f"rk-hostile-{uuid.uuid4().hex[:8]}"
    node = request.getfixturevalue("node")
    try:
        yield There(target, f"/tmp/{name}", node.ct_tmp(CT) / name, node.ct_tmp(CT))
    finally:
        shutil.rmtree(node.ct_tmp(CT) / name, ignore_errors=True)


def _pid_of(description: str) -> int:
    return int(description.split(":")[0].split()[1])


def _stat(target: remotekit.Target, pid: int) -> list[str] | None:
    """``/proc/PID/stat`` fields after the name, read there: a pid the runner reports is a pid
    in the target's own pid namespace (a real container's differ from this host's)."""
    r = target.run(["cat", f"/proc/{pid}/stat"], check=False, timeout=20)
    return r.stdout.rsplit(")", 1)[1].split() if r.ok else None


def _gone(target: remotekit.Target, pid: int) -> bool:
    fields = _stat(target, pid)
    return fields is None or fields[0] == "Z"


def _session(target: remotekit.Target, pid: int) -> int | None:
    fields = _stat(target, pid)
    return int(fields[3]) if fields else None


def _kill(target: remotekit.Target, pid: int) -> None:
    target.run(["kill", "-9", str(pid)], check=False, timeout=20)


# -- large shipped files ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_large_shipped_file_arrives_whole(target: remotekit.Target) -> None:
    blob = os.urandom(24 << 20)
    script = remotekit.Script(
        b"import hashlib, os, sys\n"
        b"p = os.path.join(os.environ['REMOTEKIT_DIR'], 'blob.bin')\n"
        b"print(hashlib.sha256(open(p, 'rb').read()).hexdigest())\n",
        name="sum.py",
    )
    r = target.run_python(script, files={"blob.bin": blob}, timeout=50)
    assert r.stdout.strip() == hashlib.sha256(blob).hexdigest()


@pytest.mark.timeout(60)
def test_runner_writes_shipped_files_through(local: remotekit.Target) -> None:
    """The runner never holds a shipped file in memory (it used to hold it twice)."""
    size = 64 << 20
    script = remotekit.Script(
        b"import os\n"
        b"for line in open('/proc/%d/status' % os.getppid()):\n"
        b"    if line.startswith('VmHWM:'):\n"
        b"        print(int(line.split()[1]) * 1024)\n",
        name="hwm.py",
    )
    r = local.run_python(script, files={"big.bin": bytes(size)}, timeout=50)
    assert int(r.stdout) < size // 2, f"runner peak RSS {int(r.stdout) >> 20} MiB"


def peak_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


@pytest.mark.timeout(120)
def test_a_large_put_and_get_arrive_whole_in_bounded_memory(
    target: remotekit.Target, tmp_path: Path
) -> None:
    """A 1 GB transfer's stand-in: 128 MiB each way, byte for byte, while this process grows
    by less than 64 MiB (what the transport and the agent's windows may hold), as a 1 GB one
    must (bench/bench_bulk.py measures that, and the far side's peak)."""
    src, back = tmp_path / "src.bin", tmp_path / "back.bin"
    with src.open("wb") as f:
        for _ in range(128):
            f.write(os.urandom(1 << 20))
    there = f"/tmp/rk-bulk-{uuid.uuid4().hex}.bin"
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from here
    before = peak_kb()
    try:
        target.put(src, there, timeout=100)
        target.get(there, back, timeout=100)
    finally:
        target.run(["rm", "-f", there])
    grew = (peak_kb() - before) >> 10
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()
    assert grew < 64, f"this process grew by {grew} MiB"


# -- leftovers and detach --------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_background_writer_does_not_keep_the_step_open(target: remotekit.Target) -> None:
    marker = f"rk-writer-{uuid.uuid4().hex[:8]}"
    script = f"(while :; do echo {marker} >&2; sleep .1; done) & exit 0"
    r = target.run(["bash", "-c", script], timeout=20)
    assert r.ok and r.exit_code == 0
    assert r.stopped, "the Result must name what was stopped"
    assert all(_gone(target, _pid_of(d)) for d in r.stopped)
    assert not r.still_running
    assert wait_gone(marker, 2.0) == []


@pytest.mark.timeout(30)
def test_quiet_background_child_does_not_outlive_the_step(target: remotekit.Target) -> None:
    secs = 100 + int(uuid.uuid4().int % 800)  # a unique `sleep N` to look for
    r = target.run(["bash", "-c", f"sleep {secs} >/dev/null 2>&1 & echo started"], timeout=20)
    assert r.ok and r.stdout == "started\n"
    assert any(f"sleep {secs}" in d for d in r.stopped), r.stopped
    assert wait_gone(f"sleep {secs}", 2.0) == []


@pytest.mark.timeout(30)
def test_a_clean_step_stops_nothing(target: remotekit.Target) -> None:
    r = target.run(["bash", "-c", "sleep 0.1 & wait; echo done"], timeout=20)
    assert r.ok and r.stopped == () and r.still_running == ()


# -- a flood next to a ticking step ----------------------------------------------------------

GIB = 1 << 30
#: The most the flood's runner or the agent may peak at, or this process grow by, while 1 GiB
#: passes through them (each holds ~15 MiB here; holding the flood would be ~1 GiB).
FLOOD_MEMORY = 200 << 20


def _kb(pid: int | str, key: str) -> int:
    """A ``/proc/PID/status`` figure (``VmHWM``, ``VmRSS``) in bytes; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.timeout(240)
def test_a_gib_flood_arrives_whole_in_bounded_memory_and_stalls_no_other_step(
    local: remotekit.Target,
) -> None:
    """1 GiB on one step's stdout, counted by a callback that keeps nothing, next to a step
    on the same target that prints a line a second: every byte arrives, every tick comes on
    time, and neither this process nor the far side (the agent or the runner) holds it.
    About 4 s of flood here (2 cores), on either path."""
    got = {"stdout": 0, "stderr": 0}
    pids: list[int] = []  # the flood's runner, then the runner's parent (the agent, or us)

    def count(stream: str, line: str) -> None:
        if stream == "stderr" and not pids:
            pids.extend(int(p) for p in line.split())
        else:
            got[stream] += len(line)  # no newline in /dev/zero: pieces of MAX_LINE bytes

    flood = [
        "sh",
        "-c",
        f"echo $PPID $(cut -d' ' -f4 /proc/$PPID/stat) >&2; exec head -c {GIB} /dev/zero",
    ]
    Path("/proc/self/clear_refs").write_text("5")  # this process's VmHWM starts again here
    ours = _kb("self", "VmRSS")
    peaks: dict[int, int] = {}
    done = threading.Event()

    def watch() -> None:  # VmHWM is a peak: the last reading before a process ends holds it
        while not done.wait(0.2):
            for pid in pids:
                peaks[pid] = max(peaks.get(pid, 0), _kb(pid, "VmHWM"))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result: list[object] = []

    def flood_step() -> None:
        start = time.monotonic()
        try:
            result.append(local.run(flood, timeout=200, capture=False, on_output=count))
        except BaseException as exc:
            result.append(exc)
        result.append(time.monotonic() - start)

    flooder = threading.Thread(target=flood_step, daemon=True)
    flooder.start()
    end = time.monotonic() + 60
    while not got["stdout"] and flooder.is_alive():
        assert time.monotonic() < end, "the flood never started"
        time.sleep(0.05)
    ticks: list[tuple[float, int]] = []  # when each tick came, and how far the flood was
    started = time.monotonic()
    tick = local.run(
        ["sh", "-c", "for k in 1 2 3 4 5; do echo tick $k; sleep 1; done"],
        timeout=60,
        on_output=lambda stream, line: ticks.append((time.monotonic(), got["stdout"])),
    )
    flooder.join(200)
    done.set()
    watcher.join(5)
    try:
        assert tick.stdout == "".join(f"tick {k}\n" for k in range(1, 6))
        assert len(result) == 2 and isinstance(result[0], remotekit.Result), result
        assert result[0].ok and got["stdout"] == GIB, (got, result)
        during = [t for t, n in ticks if n < GIB]
        flood_s = result[-1]
        assert isinstance(flood_s, float)
        # a tick a second from the flood's first bytes: a flood of 3 s or more (4 s here) has
        # two while it runs; a machine that passes 1 GiB in a second leaves nothing to stall
        assert len(during) >= min(2, int(flood_s) - 1), f"no tick during the flood: {ticks}"
        gaps = [b - a for a, b in zip([started] + [t for t, _ in ticks], [t for t, _ in ticks])]
        assert gaps[0] < 10 and max(gaps[1:]) < 1.5, f"a tick came late: {gaps}"
        runner, parent = pids
        assert 0 < peaks[runner] < FLOOD_MEMORY, f"the runner peaked at {peaks[runner] >> 20} MiB"
        if parent != os.getpid():  # the agent (agent=False: the runner is ours, seen above)
            assert 0 < peaks[parent] < FLOOD_MEMORY, (
                f"the agent peaked at {peaks[parent] >> 20} MiB"
            )
        grew = _kb("self", "VmHWM") - ours
        assert grew < FLOOD_MEMORY, f"this process grew by {grew >> 20} MiB"
    finally:
        print(
            f"flood: {result[-1] if result else '?'} s, ticks {ticks}, peaks {peaks}, "
            f"grew {(_kb('self', 'VmHWM') - ours) >> 20} MiB"
        )


@pytest.mark.timeout(30)
def test_detach_leaves_one_process_running_with_a_log(there: There) -> None:
    marker = f"rk-detach-{uuid.uuid4().hex[:8]}"
    run = there.target.run(["bash", "-c", f"echo {marker}; exec sleep 60"], detach=True, timeout=20)
    r = run.result
    assert r is not None and r.ok and r.detached is not None
    d = r.detached
    folder = there.local(d.dir)

    def log() -> str:  # the log is in the run's record there (not a tmpfs): read it there
        return there.target.run(["cat", d.log], check=False, timeout=20).stdout

    try:
        assert not _gone(there.target, d.pid)
        assert _session(there.target, d.pid) == d.pid, "its own session"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        end = time.monotonic() + 5
        while marker not in log() and time.monotonic() < end:
            time.sleep(0.05)
        assert marker in log()
        time.sleep(0.3)
        assert not _gone(there.target, d.pid), "a detached process survives its step"
    finally:
        _kill(there.target, d.pid)
        run.wait(timeout=20)
        run.rm()
        subprocess.run(["rm", "-rf", str(folder)], check=False)


@pytest.mark.timeout(30)
def test_run_python_detach_keeps_its_files(local: remotekit.Target) -> None:
    script = remotekit.Script(
        b"import os, time\nprint(open(os.path.join(os.environ['REMOTEKIT_DIR'], 'cfg')).read())\n"
        b"time.sleep(60)\n",
        name="train.py",
    )
    r = local.run_python(script, files={"cfg": b"lr=3e-4"}, detach=True, timeout=20).result
    d = r.detached if r is not None else None
    assert d is not None and Path(d.dir, "train.py").is_file()
    try:
        end = time.monotonic() + 10
        while "lr=3e-4" not in Path(d.log).read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert "lr=3e-4" in Path(d.log).read_text()
    finally:
        os.kill(d.pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", d.dir], check=False)


@pytest.mark.timeout(30)
def test_timeout_message_matches_what_happened(local: remotekit.Target) -> None:
    with pytest.raises(remotekit.StepTimeout) as info:
        local.run(["sleep", "30"], timeout=0.5)
    e = info.value
    assert e.started and e.confirmed and "process tree terminated" in str(e)
    assert any("sleep 30" in d for d in e.result.stopped)


# -- forged control lines --------------------------------------------------------------------

FORGER = rb"""
import gc, json, os, sys
found = set()
def look(text):
    at = text.find("remotekit-")
    while at >= 0:
        found.add(text[at:at + 42].split()[0].split('"')[0])
        at = text.find("remotekit-", at + 1)
for obj in gc.get_objects():
    for v in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):
        if isinstance(v, str):
            look(v)
        elif isinstance(v, bytes):
            look(v.decode("latin-1"))
for path in ("/proc/self/environ", "/proc/self/cmdline", "/proc/%d/cmdline" % os.getppid(),
             "/proc/%d/environ" % os.getppid()):
    try:
        look(open(path, "rb").read().decode("latin-1"))
    except OSError:
        pass
look(json.dumps(dict(os.environ)))
for fd in (1, 2):  # a pipe opened through /proc reads what is still in it
    try:
        r = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_NONBLOCK)
        look(os.read(r, 1 << 16).decode("latin-1"))
    except OSError:
        pass
for nonce in sorted(found):
    for word in ("ready", "started", "exit"):
        sys.stderr.write("%s %s %s\n" % (nonce, word, json.dumps({"code": 0, "reason": "exit", "key": nonce})))
    sys.stderr.write(nonce + " exit {not json\n")
sys.stderr.write("tried %d\n" % len(found))
sys.exit(3)
"""


@pytest.mark.timeout(30)
def test_a_step_cannot_forge_its_exit(target: remotekit.Target) -> None:
    r = target.run_python(remotekit.Script(FORGER, name="forge.py"), check=False, timeout=20)
    assert r.exit_code == 3 and not r.ok, r.stderr
    assert "tried" in r.stderr


@pytest.mark.timeout(30)
def test_forged_lines_in_a_plain_command_are_output(local: remotekit.Target) -> None:
    cmd = 'echo "remotekit-00 exit {\\"code\\": 0}" >&2; echo "remotekit-00 exit {bad" >&2; exit 4'
    r = local.run(["bash", "-c", cmd], check=False)
    assert r.exit_code == 4 and "remotekit-00 exit {bad" in r.stderr


@pytest.mark.timeout(10)
def test_malformed_control_line_is_output() -> None:
    lines: list[str] = []
    s = _Stream("stderr", lambda _, t: lines.append(t), True, 1 << 20, nonce="N1")
    s.feed(b'N1 ready {"key": "K9"}\n')
    s.feed(b"K9 exit {oops\nN1 exit {}\n")
    s.feed(b'K9 started {"pid": 5}\nK9 exit {"code": 3, "reason": "exit"}\n')
    s.feed(b'K9 exit {"code": 0, "reason": "exit"}\n')
    assert s.control("exit") == {"code": 3, "reason": "exit"}
    assert lines == ["K9 exit {oops", "N1 exit {}", 'K9 exit {"code": 0, "reason": "exit"}']


#: The most this process may grow by while a far side sends 128 MiB without a newline: a
#: line's bound (MAX_LINE, 1 MiB) and what the transport holds.
UNENDED_MEMORY = 64 << 20


@pytest.fixture(params=["local", "ssh"])
def unended(
    request: pytest.FixtureRequest, agent: bool | None, tmp_path: Path
) -> Iterator[Callable[[str], remotekit.Target]]:
    """``unended(stream)``: a target, here or through the real sshd (ssh -> the node's
    Python), whose runner (or agent: it never says hello) is tests/fakes/agent.py writing
    128 MiB on ``stream`` with no newline, then exiting 3."""

    def wrapper(stream: str) -> str:
        return f"#!/bin/sh\nexec {sys.executable} -S {FAKES / 'agent.py'} flood-{stream}\n"

    yield from held_with_python(request, tmp_path, agent, wrapper)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_far_side_that_never_ends_a_line_is_held_to_a_lines_bound(
    unended: Callable[[str], remotekit.Target], stream: str, tmp_path: Path
) -> None:
    """128 MiB with no newline, where the runner's words come: on stdout before ``get``'s
    marker line (which this process looked for in all of it, held whole), on stderr among
    its control lines. This process holds a line's bound of it (MAX_LINE), and the step
    fails saying the runner did not start; on the agent's path the same bytes come before
    its hello, held to its own bound."""
    t = unended(stream)
    Path("/proc/self/clear_refs").write_text("5")  # this process's VmHWM starts again here
    ours = _kb("self", "VmRSS")
    with pytest.raises(remotekit.RemotekitError, match="did not start") as info:
        if stream == "stdout":
            t.get("/etc/hostname", tmp_path / "hostname", timeout=100)
        else:
            t.run(["true"], capture=False, timeout=100)
    grew = _kb("self", "VmHWM") - ours
    assert info.value.host == t.name
    assert grew < UNENDED_MEMORY, f"this process grew by {grew >> 20} MiB"


@pytest.mark.timeout(30)
def test_get_refuses_a_fifo(there: There, tmp_path: Path) -> None:
    there.here.mkdir()
    os.mkfifo(there.here / "pipe")
    t0 = time.monotonic()
    with pytest.raises(remotekit.StepFailed, match="FIFO"):
        there.target.get(f"{there.path}/pipe", tmp_path / "out", timeout=20)
    assert time.monotonic() - t0 < 15
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.timeout(30)
def test_get_refuses_a_device(target: remotekit.Target, tmp_path: Path) -> None:
    with pytest.raises(remotekit.StepFailed, match="character device"):
        target.get("/dev/zero", tmp_path / "out", timeout=20)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(30)
def test_get_max_bytes(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.write_bytes(b"x" * 5000)
    (tmp_path / "in").mkdir()
    with pytest.raises(remotekit.StepFailed, match="max_bytes=1000"):
        local.get(str(src), tmp_path / "in" / "big", max_bytes=1000)
    assert list((tmp_path / "in").iterdir()) == []
    local.get(str(src), tmp_path / "in" / "big", max_bytes=5000)
    assert (tmp_path / "in" / "big").stat().st_size == 5000


# -- file modes --------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_put_keeps_the_mode_and_never_widens(there: There, tmp_path: Path) -> None:
    src = tmp_path / "key"
    src.write_bytes(b"secret")
    src.chmod(0o600)
    there.here.mkdir()
    dest, key = there.here / "key", f"{there.path}/key"
    there.target.put(src, key)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    src.chmod(0o644)
    there.target.put(src, key)  # replaces a 0600 file: stays 0600
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    there.target.put(src, key, mode=0o640)  # explicit: exactly that
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    run = tmp_path / "run.sh"
    run.write_bytes(b"#!/bin/sh\n")
    run.chmod(0o755)
    there.target.put(run, there.path)
    assert stat.S_IMODE((there.here / "run.sh").stat().st_mode) == 0o755 & ~_umask()
    assert [p.name for p in there.here.iterdir()] == ["key", "run.sh"] or sorted(
        p.name for p in there.here.iterdir()
    ) == ["key", "run.sh"]


@pytest.mark.timeout(30)
def test_get_keeps_the_mode_and_never_widens(there: There, tmp_path: Path) -> None:
    there.here.mkdir()
    src = there.here / "key"
    src.write_bytes(b"secret")
    src.chmod(0o600)
    here = tmp_path / "here"
    there.target.get(f"{there.path}/key", here)
    assert stat.S_IMODE(here.stat().st_mode) == 0o600
    src.chmod(0o644)
    there.target.get(f"{there.path}/key", here)
    assert stat.S_IMODE(here.stat().st_mode) == 0o600
    src.chmod(0o4750)
    here.unlink()
    there.target.get(f"{there.path}/key", here)
    assert stat.S_IMODE(here.stat().st_mode) == 0o750 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- a signalled put leaves nothing --------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signalled_put_leaves_no_temp_file(tmp_path: Path, sig: int) -> None:
    runner = shipping.source("runner.py")
    header = json.dumps(
        {"nonce": "n", "op": "put", "dest": str(tmp_path / "f"), "name": "f", "size": 10 << 20}
    ).encode()
    proc = subprocess.Popen(
        list(remotekit.local_target().launch.argv),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin and proc.stderr
    proc.stdin.write(b"%d\n%s%d\n%s" % (len(runner), runner, len(header), header))
    proc.stdin.write(bytes(1 << 20))
    proc.stdin.flush()
    end = time.monotonic() + 10
    while not list(tmp_path.glob(".remotekit-*")) and time.monotonic() < end:
        time.sleep(0.02)
    assert list(tmp_path.glob(".remotekit-*")), "the put should be under way"
    proc.send_signal(sig)
    assert proc.wait(10) == 128 + sig
    proc.stdin.close()
    assert list(tmp_path.iterdir()) == []


# -- sessions that never came; files= that cannot be sent ------------------------------------------


@pytest.mark.timeout(60)
def test_step_that_never_got_a_session_says_so(inventory: remotekit.Inventory) -> None:
    """One process per step: each step is an SSH session (on the agent they are messages on
    one, and 64 run at once: tests/engine/test_agent.py)."""
    secs = f"4.{uuid.uuid4().int % 10**6:06d}"  # a unique `sleep N` to count
    with inventory.target("node", agent=False) as t:
        slots = t.transport.max_sessions  # type: ignore[attr-defined]
        busy = [
            threading.Thread(target=t.run, args=(["sleep", secs],), kwargs={"timeout": 20})
            for _ in range(slots)
        ]
        for th in busy:
            th.start()
        end = time.monotonic() + 15
        while len(processes_with(f"sleep {secs}")) < slots and time.monotonic() < end:
            time.sleep(0.05)
        with pytest.raises(remotekit.StepTimeout) as info:
            t.run(["true"], timeout=0.5)
        for th in busy:
            th.join()
    e = info.value
    assert not e.started and "never started" in str(e) and "terminated" not in str(e)


@pytest.mark.timeout(10)
def test_files_must_be_bytes(local: remotekit.Target) -> None:
    script = remotekit.Script(b"print(1)", name="s.py")
    with pytest.raises(TypeError, match=r"files\['cfg.json'\] must be bytes, not str"):
        local.run_python(script, files={"cfg.json": "{}"})  # type: ignore[dict-item]


@pytest.mark.timeout(10)
def test_a_file_cannot_replace_the_script(local: remotekit.Target) -> None:
    script = remotekit.Script(b"print(1)", name="s.py")
    with pytest.raises(ValueError, match="script's own name"):
        local.run_python(script, files={"s.py": b"print(2)"})
    with pytest.raises(ValueError, match="script's own name"):
        local.run_python(script, files={"./s.py": b"print(2)"})


@pytest.mark.timeout(10)
def test_a_step_cancelled_before_it_started_says_so(local: remotekit.Target) -> None:
    local.cancel()
    try:
        with pytest.raises(remotekit.StepCancelled) as info:
            local.run(["true"])
    finally:
        local.resume()
    assert not info.value.started and "nothing ran there" in str(info.value)


@pytest.mark.timeout(60)
def test_cli_detach_prints_pid_and_log(tmp_path: Path) -> None:
    marker = f"rk-cli-detach-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "remotekit",
            "run",
            "--detach",
            "--cmd",
            f"bash -c 'echo {marker}; exec sleep 60'",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "detached: run " in ln)
    pid = int(line.split("pid ")[1].split(",")[0])
    log = Path(line.split("log ")[1].strip())
    try:
        with remotekit.local_target() as here:
            assert not _gone(here, pid)
        end = time.monotonic() + 5
        while marker not in log.read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert marker in log.read_text()
    finally:
        os.kill(pid, signal.SIGKILL)
        shutil.rmtree(log.parent, ignore_errors=True)


@pytest.mark.timeout(10)
def test_put_refuses_a_local_fifo_or_device(local: remotekit.Target, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(remotekit.RemotekitError, match="FIFO"):
        local.put(tmp_path / "pipe", str(tmp_path / "dest"))
    with pytest.raises(remotekit.RemotekitError, match="device"):
        local.put("/dev/zero", str(tmp_path / "dest"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 1e308, 0, -1, True])
def test_a_per_call_timeout_out_of_range_is_refused_before_anything_runs(
    local: remotekit.Target, tmp_path: Path, bad: float
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(remotekit.RemotekitError, match="timeout must be seconds > 0") as info:
        local.run(["touch", str(marker)], timeout=bad)
    assert info.value.host == "local" and info.value.step == "run touch"
    assert not marker.exists()
