"""The resident agent (the default): the agent's own tests, on ``local`` and through the real
sshd (ssh -> fake pct exec -> a real LXC container -> venv Python): its lifetime
(``close()``, SIGKILL mid-step, a dropped connection, the local process gone), many steps at
once, a flooding step, secrets, warm imports, the hops' words when it cannot start, and the
interpreters it runs on (or falls back from). The engine's own suites run on it as the
default; tests/engine/test_per_step.py re-runs them with ``agent: false``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import remotekit
import remotekit.agent
import remotekit.remote
from remotekit.agent import QUIET_S, Agent, loader_bytes
from remotekit.layers import LOADER
from remotekit.remote.agent import (
    FRAME,
    MIN_PYTHON,
    PIECE,
    TO_CALLER,
    WARMS,
    ProtocolError,
    frame,
    frames,
)
from remotekit.step import StepHeader
from tests.conftest import CT, held_with_python, write_inventory
from tests.harness import FAKES, PYTHONS, ancestors, processes_with, venv_prefix, wait_gone

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def agent() -> bool:
    """The ``local`` and ``target`` fixtures open their targets with the agent on."""
    return True


#: A step's command that prints the pid of the agent it runs under: the runner is the
#: command's parent, the agent the runner's parent.
AGENT_PID = ["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"]


def agent_pid(target: remotekit.Target) -> int:
    return int(target.run(AGENT_PID, timeout=20).stdout)


def marker() -> str:
    """A unique ``sleep`` argument to find a step's processes by (in any pid namespace)."""
    return f"{700 + uuid.uuid4().int % 200}.{uuid.uuid4().int % 10**6:06d}"


def in_thread(fn: object, *args: object, **kw: object) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` in a thread; the list gets its result or the exception it raised."""
    out: list[object] = []

    def body() -> None:
        try:
            out.append(fn(*args, **kw))  # type: ignore[operator]
        except BaseException as exc:
            out.append(exc)

    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th, out


def wait_seen(m: str, timeout: float = 20.0, besides: tuple[int, ...] = ()) -> None:
    """Wait until a process with ``m`` on its command line runs (other than ``besides``)."""
    end = time.monotonic() + timeout
    while not set(processes_with(m)) - set(besides):
        assert time.monotonic() < end, f"no process with {m} appeared"
        time.sleep(0.05)


#: A step that leaves a setsid child and a double-forked daemon behind, then sleeps.
def tree(m: str) -> list[str]:
    return [
        "bash",
        "-c",
        f"setsid sleep {m} & (sleep {m} & ) ; sleep {m}",
    ]


#: A warm step (``preload``) that prints its warm process's pid: the runner is forked by it.
WARM_PID = remotekit.Script(
    "import os\nprint(open('/proc/%d/stat' % os.getppid()).read().rsplit(')', 1)[1].split()[1])\n",
    name="parent.py",
)


def warm_pid(target: remotekit.Target, preload: tuple[str, ...] = ("torch",)) -> int:
    """Start the target's warm process (torch imported: the real case) and return its pid."""
    return int(target.run_python(WARM_PID, preload=list(preload), timeout=120).stdout)


#: The live children (not zombies) of the pid in argv[1], read from /proc there, each with
#: whether it leads a session of its own (a step's runner, or the spare: the agent's child
#: forked for the next step; not a warm process).
CHILDREN = remotekit.Script(
    "import os, sys\n"
    "for n in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        f = open('/proc/%s/stat' % n).read().rsplit(')', 1)[1].split()\n"
    "    except OSError:\n"
    "        continue\n"
    "    if f[1] == sys.argv[1] and f[0] != 'Z':\n"
    "        print(n, int(f[3] == n))\n",
    name="children.py",
)


@pytest.fixture
def looker(target: remotekit.Target, request: pytest.FixtureRequest) -> Iterator[remotekit.Target]:
    """A target on the same machine as ``target`` (so in its pid namespace) that runs each
    step as a process of its own: it sees the agent's processes without being one of them."""
    if target.spec.hop is None:
        with remotekit.local_target(agent=False) as t:
            yield t
    else:
        yield request.getfixturevalue("cts")(False)


def children(looker: remotekit.Target, pid: int, runners: bool = True) -> set[int]:
    """The live children of ``pid``; ``runners`` False: but those leading a session (a
    step's runner, the spare)."""
    r = looker.run_python(CHILDREN, [str(pid)], timeout=30)
    pairs = [line.split() for line in r.stdout.splitlines()]
    return {int(n) for n, leads in pairs if runners or leads == "0"}


def next_runner(target: remotekit.Target) -> int:
    """The pid of the runner of a new step (the spare the agent forked for it, if any)."""
    return int(target.run(["sh", "-c", "echo $PPID"], timeout=20).stdout)


def stopped_runner_gone(
    looker: remotekit.Target, target: remotekit.Target, pid: int, besides: set[int]
) -> set[int]:
    """Poll until the agent ``pid`` has no live child but ``besides`` and one that is the
    runner of the next step (the spare); returns the others left."""
    end = time.monotonic() + 5
    while len(left := children(looker, pid) - besides) > 1 and time.monotonic() < end:
        time.sleep(0.1)
    return left - {next_runner(target)}


def gone_there(looker: remotekit.Target, pid: int, timeout: float) -> bool:
    """Poll until process ``pid`` of ``looker``'s machine is gone (or a zombie)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = looker.run(["cat", f"/proc/{pid}/stat"], check=False, timeout=20)
        if not r.ok or r.stdout.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


# -- it is one agent, and the same steps --------------------------------------------------


def test_steps_share_one_agent_and_per_step_ones_do_not(target: remotekit.Target) -> None:
    pid = agent_pid(target)
    assert agent_pid(target) == pid != os.getpid()
    with remotekit.local_target(agent=False) as plain:
        assert agent_pid(plain) == os.getpid()  # a runner per step, started by us


def probes_counted(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each probe an agent sends from now on (its timeout), through Agent.answers."""
    sent: list[float] = []
    real = Agent.answers

    def answers(self: Agent, timeout: float) -> bool:
        sent.append(timeout)
        return real(self, timeout)

    monkeypatch.setattr(Agent, "answers", answers)
    return sent


def test_a_step_right_after_another_sends_no_probe(
    target: remotekit.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent said something within QUIET_S (the last step's end): its link is as good as
    a probe's answer, and the back-to-back steps of a loop skip the round trip. (The window
    is widened here so that a slow machine keeps the steps within it.)"""
    target.run(["true"])
    monkeypatch.setattr(remotekit.agent, "QUIET_S", 30.0)
    sent = probes_counted(monkeypatch)
    for _ in range(3):
        assert target.run(["echo", "hi"]).stdout == "hi\n"
    assert target.run_python(remotekit.Script("print('ok')\n")).stdout == "ok\n"
    assert sent == []


def test_a_step_after_the_agent_was_quiet_sends_a_probe(
    target: remotekit.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past QUIET_S with no word from the agent, the next step waits for a probe's answer;
    the one right after it does not."""
    target.run(["true"])
    sent = probes_counted(monkeypatch)
    time.sleep(QUIET_S + 0.25)
    assert target.run(["echo", "hi"]).stdout == "hi\n"
    assert len(sent) == 1
    monkeypatch.setattr(remotekit.agent, "QUIET_S", 30.0)
    assert target.run(["echo", "hi"]).stdout == "hi\n"
    assert len(sent) == 1


def test_a_warm_step_with_a_small_payload_starts_no_thread_here(
    target: remotekit.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command, a shipped script and one over the agent's window, warm: the first two go
    out with the step's start (a thread a step cost the caller ~0.15 ms of its ~0.9);
    the big one is fed from a thread, whose window waits must not hold the caller."""
    target.run(["true"])
    started: list[object] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(getattr(self, "_target", None))
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    assert target.run(["echo", "hi"]).stdout == "hi\n"
    code = "import sys\nprint(len(sys.argv))\n"
    assert target.run_python(remotekit.Script(code), args=["a", "b"]).stdout == "3\n"
    assert started == []
    big = remotekit.Script("DATA = '" + "x" * (3 << 20) + "'\nprint(len(DATA))\n")
    assert target.run_python(big, timeout=60).stdout == f"{3 << 20}\n"
    assert len(started) == 1


def test_the_runner_and_a_step_sent_with_the_agents_source_are_taken(tmp_path: Path) -> None:
    """The caller sends the runner and the first step right behind the agent's source, in the
    same write, without waiting for the hello: the loader's buffered read takes them in
    beyond the source, and the agent must take them over from there (no poll announces them)."""
    header = StepHeader(argv=("echo", "hi"), nonce="n", cwd=str(tmp_path)).encode()
    sent = b"".join(
        [
            loader_bytes(),  # the boot, the agent's source and the runner's frame
            frame(b"N", 0),  # a nudge (Launch.nudge): nothing to do, nothing said
            frame(b"S", 1, f"{len(header)}\n".encode() + header),
            frame(b"N", 0),
        ]
    )
    got = agent_frames(sent)  # one write, less than a pipe holds: all there at once
    kinds = [kind for kind, _, _ in got]
    assert kinds[0] == b"A"  # the hello, then the step's frames
    assert [sid for _, sid, _ in got[1:]] == [1] * (len(got) - 1)
    assert b"".join(p for kind, sid, p in got if kind == b"O" and sid == 1) == b"hi\n"
    assert got[-1] == (b"X", 1, b"0")


def agent_frames(sent: bytes, until: bytes = b"X") -> list[tuple[bytes, int, bytes]]:
    """The frames a real agent sends for ``sent`` (its loader's stdin, left open), read until
    one of kind ``until``; its output is credited as it comes, as remotekit.agent does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(sent)
        proc.stdin.flush()
        got: list[tuple[bytes, int, bytes]] = []
        buf = bytearray()
        end = time.monotonic() + 60
        while not any(kind == until for kind, _, _ in got):
            assert time.monotonic() < end, f"no {until!r} frame; kinds: {[g[0] for g in got]}"
            if select.select([proc.stdout], [], [], 0.5)[0]:
                data = os.read(proc.stdout.fileno(), 1 << 20)
                assert data, f"the agent exited; kinds: {[g[0] for g in got]}"
                buf += data
                new = list(frames(buf, TO_CALLER))
                for kind, sid, payload in new:
                    if kind in (b"O", b"e"):
                        proc.stdin.write(frame(b"C", sid, str(len(payload)).encode()))
                proc.stdin.flush()
                got += new
        return got
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_step_runs_in_a_runner_forked_before_it_came(
    target: remotekit.Target, looker: remotekit.Target
) -> None:
    """Once no step runs, the agent forks the next step's runner (the spare), which waits for
    its header: a command then costs no fork of a Python while the caller waits, and a
    script one (its zygote, forked by that runner), not two."""
    pid = agent_pid(target)
    for step in (["sh", "-c", "echo $PPID"], None):
        spare = spare_of(looker, pid)
        if step is not None:  # the command's parent is its runner: the spare
            assert int(target.run(step, timeout=20).stdout) == spare
        else:  # a script runs in the zygote its runner (the spare) forked
            code = "import os\nprint(os.getppid())\n"
            assert int(target.run_python(remotekit.Script(code), timeout=20).stdout) == spare


#: A script that writes a digit into every descriptor it holds, then kills its runner: were
#: the pipe on which the runner says its status (runner.DONE) among them, the step would end
#: with the status the script chose. (It removes its folder first: its killed runner cannot.)
FORGE_STATUS = """import os, shutil, signal
for fd in os.listdir("/proc/self/fd"):
    try:
        os.write(int(fd), b"0") if int(fd) > 2 else None
    except OSError:
        pass
shutil.rmtree(os.path.dirname(os.path.abspath(__file__)))
os.kill(os.getppid(), signal.SIGKILL)
"""


@pytest.mark.timeout(60)
def test_a_script_cannot_say_its_runners_status(target: remotekit.Target) -> None:
    """A step's runner says its exit status to the agent on a pipe of its own, so that the
    step's end goes out before the runner's process is taken down; the script never holds
    that pipe: a runner killed by its script ends the step with 137, not what the script
    wrote."""
    r = target.run_python(remotekit.Script(FORGE_STATUS), check=False, timeout=20)
    assert r.exit_code == 128 + signal.SIGKILL, (r.exit_code, r.stderr)


def spare_of(looker: remotekit.Target, pid: int) -> int:
    """The agent ``pid``'s spare (polled for): its child that leads a session, no step running."""
    end = time.monotonic() + 10
    while len(spare := children(looker, pid) - children(looker, pid, runners=False)) != 1:
        assert time.monotonic() < end, "no runner was forked ahead of the next step"
        time.sleep(0.05)
    return spare.pop()


def test_after_a_script_the_next_runner_has_its_zygote_forked_already(
    target: remotekit.Target, looker: remotekit.Target
) -> None:
    """After a script, the spare's runner forks its zygote at once (the next step is likely
    a script too: then it costs no fork while the caller waits); after a command, it forks
    one only if its step runs a script."""
    pid = agent_pid(target)
    target.run_python(remotekit.Script("pass\n"), timeout=20)
    spare = spare_of(looker, pid)
    end = time.monotonic() + 10
    while not children(looker, spare):
        assert time.monotonic() < end, "the spare forked no zygote after a script"
        time.sleep(0.05)
    target.run(["true"], timeout=20)
    spare = spare_of(looker, pid)
    time.sleep(0.3)
    assert children(looker, spare) == set()


def test_a_short_steps_frames_come_in_one_write(tmp_path: Path) -> None:
    """A step's output frames wait a little (HOLD) for more, and a small payload is not
    acknowledged (W): a command that ends at once says its ready, started and exit lines and
    its end (X) in one write, one message through every hop, not four or five. The agent's
    stdout is a packet socket here, so that each write is read as one."""
    header = StepHeader(argv=("true",), nonce="n", cwd=str(tmp_path)).encode()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=theirs)
    theirs.close()
    ours.settimeout(30)
    assert proc.stdin is not None
    try:
        proc.stdin.write(loader_bytes())
        proc.stdin.flush()
        buf = bytearray(ours.recv(1 << 17))
        assert [kind for kind, _, _ in frames(buf, TO_CALLER)] == [b"A"]
        writes = []
        for sid in range(1, 6):
            proc.stdin.write(frame(b"S", sid, f"{len(header)}\n".encode() + header))
            proc.stdin.flush()
            got: list[bytes] = []
            while b"X" not in got:
                buf += ours.recv(1 << 17)
                got += [kind for kind, _, _ in frames(buf, TO_CALLER)]
                writes.append(sid)
            assert b"W" not in got
        assert min(writes.count(sid) for sid in range(1, 6)) == 1, writes
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        ours.close()


def test_a_gets_bytes_come_in_frames_of_a_piece(tmp_path: Path) -> None:
    """The bytes of a file a ``get`` reads there come in frames of up to PIECE (256 KiB),
    not of a pipe read's 64 KiB: a quarter of the turns of the agent's loop and of the
    caller's reader per byte. The caller's decoder takes a frame of PIECE and refuses one
    byte more."""
    src = tmp_path / "blob"
    src.write_bytes(os.urandom(1 << 16) * 48)  # 3 MiB
    header = StepHeader(op="get", src=str(src), nonce="n", cwd=str(tmp_path)).encode()
    got = agent_frames(loader_bytes() + frame(b"S", 1, f"{len(header)}\n".encode() + header))
    out = b"".join(p for kind, sid, p in got if kind == b"O" and sid == 1)
    assert out.endswith(src.read_bytes())  # after the runner's marker line, byte for byte
    assert max(len(p) for kind, _, p in got if kind == b"O") > 1 << 16
    assert list(frames(bytearray(frame(b"O", 1, bytes(PIECE))), TO_CALLER))
    with pytest.raises(ProtocolError, match=f"a b'O' frame of {PIECE + 1} bytes"):
        list(frames(bytearray(frame(b"O", 1, bytes(PIECE + 1))), TO_CALLER))


def test_the_agent_is_the_default_and_agent_false_turns_it_off(tmp_path: Path) -> None:
    inv = write_inventory(
        tmp_path / "hosts.yaml", {"plain": {}, "on": {"agent": True}, "off": {"agent": False}}
    )
    assert [inv.spec(h).agent for h in ("plain", "on", "off")] == [True, True, False]
    for host, agent, on in [
        ("plain", None, True),
        ("on", None, True),
        ("off", None, False),
        ("plain", False, False),  # Target(agent=...) wins over hosts.yaml, both ways
        ("off", True, True),
    ]:
        with inv.target(host, agent=agent) as t:
            first = agent_pid(t)
            assert (first == agent_pid(t) != os.getpid()) == on, (host, agent)
            assert (first == os.getpid()) == (not on), (host, agent)
    with remotekit.local_target() as t:
        assert agent_pid(t) == agent_pid(t) != os.getpid()


def test_hosts_yaml_agent_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(remotekit.InventoryError, match="agent"):
        write_inventory(tmp_path / "hosts.yaml", {"here": {"agent": "yes"}}).spec("here")


NASTY = [
    "",
    "plain",
    "tab\tand\rcarriage\r\n",
    "nul\x00byte",
    "\x1b[31mred\x1b[0m \x07bell",
    "ünïcødé ✓ 🐍 עברית مرحبا",
    "O\x00\x00\x00\x01\x00\x00\x00\x05frame",  # reads like one of the agent's frames
    'remotekit-00 exit {"code": 0}',
    "x" * 100_000,
]


def test_output_is_byte_exact(target: remotekit.Target) -> None:
    code = (
        "import sys, json\n"
        "for s in json.loads(sys.argv[1]):\n"
        "    sys.stdout.write(s + '\\n'); sys.stderr.write(s[::-1] + '\\n')\n"
    )
    import json

    r = target.run_python(remotekit.Script(code, name="nasty.py"), [json.dumps(NASTY)], timeout=30)
    assert r.stdout == "".join(s + "\n" for s in NASTY)
    assert r.stderr == "".join(s[::-1] + "\n" for s in NASTY)


def test_put_and_get_are_byte_exact(target: remotekit.Target, tmp_path: Path) -> None:
    blob = os.urandom(3 << 20) + b"O\x00\x00\x00\x01"
    src = tmp_path / "blob.bin"
    src.write_bytes(blob)
    path = f"/tmp/rk-agent-{uuid.uuid4().hex[:8]}.bin"
    try:
        target.put(src, path, timeout=30)
        back = tmp_path / "back.bin"
        target.get(path, back, timeout=30)
        assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(blob).digest()
    finally:
        target.run(["rm", "-f", path], check=False, timeout=20)


@pytest.mark.parametrize("code", [0, 1, 3, 125, 255])
def test_exit_codes(target: remotekit.Target, code: int) -> None:
    assert target.run(["sh", "-c", f"exit {code}"], check=False, timeout=20).exit_code == code


def test_killed_step_exit_code(target: remotekit.Target) -> None:
    r = target.run(["sh", "-c", "kill -KILL $$"], check=False, timeout=20)
    assert r.exit_code == 128 + 9


# -- stopping: timeout, cancel, close, a killed agent -------------------------------------


def test_timeout_stops_the_whole_tree(target: remotekit.Target, looker: remotekit.Target) -> None:
    m = marker()
    pid = agent_pid(target)
    before = children(looker, pid, runners=False)  # its warm process, if one was started
    with pytest.raises(remotekit.StepTimeout) as info:
        target.run(tree(m), timeout=2)
    assert info.value.confirmed
    assert wait_gone(m, 5) == []
    left = stopped_runner_gone(looker, target, pid, before)
    assert left == set(), "the agent kept a child (its runner)"
    assert target.run(["echo", "next"], timeout=20).stdout == "next\n"


def test_cancel_stops_the_whole_tree(target: remotekit.Target, looker: remotekit.Target) -> None:
    m = marker()
    pid = agent_pid(target)
    before = children(looker, pid, runners=False)  # its warm process, if one was started
    th, out = in_thread(target.run, tree(m), timeout=60)
    wait_seen(m)
    assert children(looker, pid) - before, "the step's runner is not the agent's child"
    target.cancel()
    th.join(20)
    target.resume()
    assert out and isinstance(out[0], remotekit.StepCancelled), out
    assert wait_gone(m, 5) == []
    left = stopped_runner_gone(looker, target, pid, before)
    assert left == set(), "the agent kept a child (its runner)"


def test_close_kills_the_agent_and_its_steps(request: pytest.FixtureRequest) -> None:
    for kind in ("local", "ssh"):
        t = (
            remotekit.local_target(agent=True)
            if kind == "local"
            else request.getfixturevalue("inventory").target("ct", agent=True)
        )
        m = marker()
        pid = agent_pid(t)
        th, out = in_thread(t.run, tree(m), timeout=60)
        wait_seen(m)
        t.close()
        th.join(20)
        assert out and isinstance(out[0], remotekit.RemotekitError), (kind, out)
        assert wait_gone(m, 5) == [], kind
        if kind == "local":
            assert wait_gone_pid(pid, 5), "the agent is still there after close()"
        else:  # its pid is the container's: look from a fresh agent
            with request.getfixturevalue("inventory").target("ct", agent=True) as again:
                assert again.run(["test", "-e", f"/proc/{pid}"], check=False).exit_code == 1
        t.close()


def wait_gone_pid(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            st = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if st[st.rindex(")") + 2 :].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def test_agent_killed_mid_step_is_a_clear_error_and_the_next_step_works(
    target: remotekit.Target, looker: remotekit.Target
) -> None:
    m = marker()
    pid = agent_pid(target)
    warm = warm_pid(target)
    th, out = in_thread(target.run, tree(m), timeout=60)
    wait_seen(m)
    # the agent's pid is its machine's (the container's): killed from a step of its own path
    looker.run(["kill", "-9", str(pid)], timeout=20)
    th.join(20)
    assert out and isinstance(out[0], remotekit.ConnectionLost), out
    err = out[0]
    assert err.host == target.name and err.step == "run bash"
    assert f"remotekit agent (pid {pid}) on {target.name}" in str(err)
    assert wait_gone(m, 8) == []
    assert gone_there(looker, warm, 5), "the warm process outlived its agent"
    assert agent_pid(target) != pid
    assert target.run(["echo", "next"], timeout=20).stdout == "next\n"


def test_a_dropped_connection_takes_the_agent_and_its_steps(
    inventory: remotekit.Inventory,
) -> None:
    with inventory.target("ct", agent=True) as t:
        pid = agent_pid(t)
        warm = warm_pid(t)
        m = marker()
        th, out = in_thread(t.run, tree(m), timeout=60)
        wait_seen(m)
        here = processes_with(m)[0]
        session = next(p for p, cmd in ancestors(here) if cmd.startswith("sshd:"))
        os.kill(session, signal.SIGKILL)  # the sshd process serving this connection dies
        th.join(30)
        assert out and isinstance(out[0], remotekit.ConnectionLost), out
        assert out[0].host == "ct"
        assert wait_gone(m, 8) == []
        assert agent_pid(t) != pid  # a new connection, a new agent
        assert t.run(["test", "-e", f"/proc/{pid}"], check=False, timeout=20).exit_code == 1
        assert gone_there(t, warm, 5), "the warm process outlived the connection"


# -- many steps at once -------------------------------------------------------------------


@pytest.mark.parametrize("n", [16, 64])
def test_concurrent_steps_keep_their_output_apart(target: remotekit.Target, n: int) -> None:
    pid = agent_pid(target)

    def one(i: int) -> tuple[str, str]:
        code = f"for k in $(seq 300); do echo {i}-$k; echo e{i}-$k >&2; done"
        r = target.run(["sh", "-c", code], timeout=60)
        return r.stdout, r.stderr

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    for i, (out, err) in enumerate(results):
        assert out == "".join(f"{i}-{k}\n" for k in range(1, 301))
        assert err == "".join(f"e{i}-{k}\n" for k in range(1, 301))
    assert agent_pid(target) == pid


def test_a_flooding_step_does_not_stall_another(target: remotekit.Target) -> None:
    """The flood's reader is slow, so its window fills; the quiet step still runs through."""
    m = marker()
    slow_reader = lambda stream, line: time.sleep(0.01)  # noqa: E731
    flood = ["sh", "-c", f"yes {'x' * 1000} & sleep {m}; kill $!"]
    th, _ = in_thread(target.run, flood, timeout=60, capture=False, on_output=slow_reader)
    wait_seen(m)
    lines: list[str] = []
    r = target.run(
        ["sh", "-c", "for k in 1 2 3 4 5; do echo tick $k; sleep 0.2; done"],
        timeout=30,
        on_output=lambda stream, line: lines.append(line),
    )
    assert r.stdout == "".join(f"tick {k}\n" for k in range(1, 6))
    assert lines == [f"tick {k}" for k in range(1, 6)]
    assert th.is_alive(), "the flood should still be running"
    target.cancel()
    th.join(20)
    target.resume()
    assert wait_gone(m, 5) == []


# -- secrets --------------------------------------------------------------------------------


def shown(pid: int) -> bytes:
    """What /proc (and so ``ps``) shows of a process: its argv and its environment."""
    return Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_secrets_are_not_in_the_agents_argv_or_environment(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Through ssh too: the sshd runs here, so the far side's processes (the hops, the agent
    in the container, its warm process) are in this machine's /proc, under other pids."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    host: dict[str, object] = {"agent": True, "secret_env": ["TOKEN"], "env": {"TOKEN": secret}}
    if kind == "ssh":
        sshd, node = request.getfixturevalue("sshd"), request.getfixturevalue("node")
        host = sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix(), **host)
    inv = write_inventory(tmp_path / "hosts.yaml", {"here": host})
    with inv.target("here") as t:
        m, w = marker(), marker()
        th, _ = in_thread(t.run, ["sleep", m], env={"OTHER": "x"}, timeout=60)
        in_warm = remotekit.Script(f"import subprocess\nsubprocess.run(['sleep', '{w}'])\n")
        th_warm, _ = in_thread(t.run_python, in_warm, preload=["json"], timeout=60)
        wait_seen(f"sleep {m}")
        wait_seen(f"sleep {w}")
        step = processes_with(f"sleep {m}")[0]
        agent = ancestors(step)[1][0]  # the step's parent is its runner, the runner's the agent
        if kind == "local":
            assert agent == agent_pid(t)
        chain = [p for p, _ in ancestors(processes_with(f"sleep {w}")[0])]
        warm = chain[chain.index(agent) - 1]  # the agent's child that forked the warm step
        hops = []  # what started the agent: ssh's session, its shell, pct, lxc-attach
        for pid, cmd in ancestors(agent):
            if pid == os.getpid():
                break
            hops.append(pid)
            if cmd.startswith("sshd:"):
                break
        assert secret.encode() in shown(step)  # the step's own env has it: we would see it
        leaks = [pid for pid in [agent, warm, *hops] if secret.encode() in shown(pid)]
        assert leaks == [], f"the secret is in these processes' argv or env: {leaks}"
        ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
        assert secret not in ps
        t.cancel()
        th.join(20)
        th_warm.join(20)


# -- the local process: Ctrl-C, killed ----------------------------------------------------

CALLER = f"""
import sys, remotekit
kind, m, inv = sys.argv[1:4]
t = (remotekit.local_target(agent=True) if kind == "local"
     else remotekit.load_inventory(inv).target("ct", agent=True))
print(t.run({AGENT_PID!r}).stdout.strip(), flush=True)
warm = remotekit.Script({WARM_PID.source!r}, name="parent.py")
print(t.run_python(warm, preload=["torch"], timeout=120).stdout.strip(), flush=True)
try:
    t.run(["bash", "-c", f"setsid sleep {{m}} & (sleep {{m}} & ) ; sleep {{m}}"], timeout=60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_the_local_process_gone_takes_the_agent_and_its_steps(
    kind: str, sig: int, request: pytest.FixtureRequest
) -> None:
    import subprocess
    import sys

    inv = request.getfixturevalue("inventory") if kind == "ssh" else None
    m = marker()
    proc = subprocess.Popen(
        [sys.executable, "-c", CALLER, kind, m, str(inv.path if inv else "")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        warm = int(proc.stdout.readline())
        wait_seen(f"sleep {m}")  # the step's own (the caller has ``m`` in its argv too)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    if sig == signal.SIGINT:
        assert "interrupted" in out and proc.returncode == 130
    assert wait_gone(m, 8) == []
    if inv is None:
        assert wait_gone_pid(pid, 5), "the agent outlived its caller"
        assert wait_gone_pid(warm, 5), "the warm process outlived its caller"
    else:
        with inv.target("ct") as again:
            assert again.run(["test", "-e", f"/proc/{pid}"], check=False).exit_code == 1
            assert gone_there(again, warm, 5), "the warm process outlived its caller"


# -- warm imports -------------------------------------------------------------------------

IMPORTED = remotekit.Script(
    "import sys\nprint('torch' in sys.modules)\nimport torch\nprint(torch.tensor([2]).item())\n",
    name="warm.py",
)


def test_a_step_that_asks_for_torch_finds_it_imported(target: remotekit.Target) -> None:
    first = target.run_python(IMPORTED, preload=["torch"], timeout=120)
    again = target.run_python(IMPORTED, preload=["torch"], timeout=60)
    plain = target.run_python(IMPORTED, timeout=120)
    assert first.stdout == again.stdout == "True\n2\n"
    assert plain.stdout == "False\n2\n"  # a step that does not ask stays small


def test_a_warm_process_serves_the_steps_of_its_env_and_at_most_warms_are_kept(
    target: remotekit.Target, looker: remotekit.Target
) -> None:
    """A warm process serves each step whose environment is the one it imported under (the
    same pid, again and again: the warm path kept), a step with another env gets its own,
    and past WARMS the least recently used one is closed. (What a step with another env
    finds imported: test_target_local's torch tests.)"""

    def warm_of(value: str) -> int:
        r = target.run_python(WARM_PID, preload=["json"], env={"WARM_ENV": value}, timeout=60)
        return int(r.stdout)

    values = [f"{uuid.uuid4().hex}-{i}" for i in range(WARMS)]
    pids = [warm_of(v) for v in values]
    assert len(set(pids)) == WARMS and agent_pid(target) not in pids
    assert [warm_of(v) for v in values] == pids  # each reused; values[0] least recently
    newer = warm_of(uuid.uuid4().hex)
    assert newer not in pids
    assert gone_there(looker, pids[0], 5), "the least recently used warm process stays"
    assert [warm_of(v) for v in values[1:]] == pids[1:]


def test_a_warm_step_is_stopped_like_any_other(target: remotekit.Target) -> None:
    m = marker()
    code = f"import subprocess\nsubprocess.run(['bash', '-c', 'setsid sleep {m} & (sleep {m} &); sleep {m}'])\n"
    target.run_python(IMPORTED, preload=["torch"], timeout=120)
    with pytest.raises(remotekit.StepTimeout) as info:
        target.run_python(remotekit.Script(code, name="tree.py"), preload=["torch"], timeout=3)
    assert info.value.confirmed
    assert wait_gone(m, 5) == []


def test_close_takes_the_warm_process_too() -> None:
    t = remotekit.local_target(agent=True)
    warm = warm_pid(t, ("json",))
    agent = agent_pid(t)
    assert warm != agent
    t.close()
    assert wait_gone_pid(warm, 5) and wait_gone_pid(agent, 5)


# -- an agent that cannot start: the hops' own words --------------------------------------


@pytest.mark.parametrize(
    ("host", "error", "words"),
    [
        ("stopped", remotekit.ContainerNotRunning, "container '201' not running!"),
        ("noct", remotekit.ContainerNotFound, "999.conf' does not exist"),
        ("novenv", remotekit.InterpreterNotFound, "/opt/no-such-venv/bin/python"),
    ],
)
def test_an_agent_that_cannot_start_says_why_as_the_runner_does(
    inventory: remotekit.Inventory, host: str, error: type[Exception], words: str
) -> None:
    with inventory.target(host, agent=True) as t:
        for _ in range(2):  # and again: a new agent is tried, with the same answer
            with pytest.raises(error) as info:
                t.run(["true"], timeout=30)
            assert words in str(info.value) and info.value.host == host  # type: ignore[attr-defined]


# -- interpreters: every Python the runner runs on, and an older one -----------------------

#: Every other Python on this machine the agent must run on (as the runner does).
AGENT_PYTHONS = sorted(v for v in PYTHONS if v >= MIN_PYTHON)


@pytest.mark.parametrize(
    "version", AGENT_PYTHONS or [None], ids=lambda v: f"py{v[0]}.{v[1]}" if v else "none"
)
def test_the_agent_runs_on_every_python_the_runner_runs_on(version: tuple[int, int] | None) -> None:
    if version is None:
        pytest.skip("no other Python on this machine (pyenv versions, python3.X on PATH)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", remotekit.AgentUnavailable)
        with remotekit.local_target(python=PYTHONS[version], agent=True) as t:
            r = t.run_python(remotekit.Script("import sys\nprint(sys.version_info[:2])\n"))
            assert r.stdout == f"{version}\n"
            assert agent_pid(t) == agent_pid(t) != os.getpid()
            m = marker()
            with pytest.raises(remotekit.StepTimeout):
                t.run(tree(m), timeout=1.5)
            assert wait_gone(m, 5) == []
            warm = remotekit.Script("import sys\nprint('decimal' in sys.modules)\n", name="d.py")
            assert t.run_python(warm, preload=["decimal"], timeout=30).stdout == "True\n"
            assert t.run_python(warm, timeout=30).stdout == "False\n"


def test_a_python_older_than_the_agent_runs_each_step_alone_with_one_note(
    tmp_path: Path,
) -> None:
    """An interpreter that loads the agent but is older than MIN_PYTHON: the agent says its
    version in its hello and leaves; the target runs each step (the first one too) as a
    process of its own, with one note naming host and version. No Python older than 3.6 is
    installed here (pyenv has 2.7 and 3.6 on; 2.7 fails both paths alike, see
    test_interpreters.py), so this one is ours made to report 3.5.10: a sitecustomize on its
    PYTHONPATH sets sys.version_info, the one thing the agent reads."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.version_info = (3, 5, 10, 'final', 0)\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    with remotekit.local_target(python=str(python)) as t:
        with pytest.warns(remotekit.AgentUnavailable) as notes:
            version = t.run_python(remotekit.Script("import sys\nprint(sys.version_info[:3])\n"))
            parents = {t.run(AGENT_PID, timeout=30).stdout for _ in range(2)}
        report = t.ping()
    assert version.stdout == "(3, 5, 10)\n" and os.getpid() == int(parents.pop()) and not parents
    said = [str(n.message) for n in notes if n.category is remotekit.AgentUnavailable]
    assert said == [
        f"local: the remotekit agent cannot run via local -> {python}: Python 3.5.10 there is "
        "older than it needs (>= 3.6); each step runs as a process of its own (as with "
        "`agent: false`)"
    ]
    assert [c.detail for c in report.checks if c.layer == "agent"] == [
        "off: Python 3.5.10 there is older than it needs (>= 3.6); one process per step"
    ]


def test_a_step_started_after_the_agent_died_unstarted_gets_the_hops_words() -> None:
    """The agent died before its hello (a stopped CT), and only then was the step registered:
    the step still gets the launch's own stderr and exit code, which the hops' explanations
    read (under CI the race made a stopped container a ConnectionLost)."""
    from remotekit.agent import Agent
    from remotekit.layers import Launch
    from remotekit.transports.base import Exit, Lost, Output
    from remotekit.transports.local import LocalTransport

    words = "lxc-attach: 201: Failed to get init pid"
    launch = Launch(argv=("sh", "-c", f"echo '{words}' >&2; exit 1"))
    agent = Agent(LocalTransport(), launch, "h", "sh", grace=1.0)
    deadline = time.monotonic() + 20
    while agent.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not agent.alive
    step = agent.start(b"{}", [])
    got = [step.events.get(timeout=5) for _ in range(2)]
    assert not any(isinstance(e, Lost) for e in got), got
    assert isinstance(got[0], Output) and words.encode() in got[0].data
    assert got[1] == Exit(1)


# -- a far side that breaks the frame protocol ----------------------------------------------

#: What the caller says of each way tests/fakes/agent.py breaks the protocol (after
#: "protocol violation: "): bytes it quotes are escaped (the OSC 52 of ``garbage`` too).
BROKEN = {
    "garbage": r"a frame of unknown kind b'\x1b'",
    "huge": "a b'O' frame of 4294967295 bytes",
    "flood": "more of step 1's output unacknowledged than its window allows",
    "unknown": "a frame of unknown kind b'Z'",
    "number": "a b'X' frame whose payload is not a decimal number: b'zero'",
    "stranger": "a b'O' frame for step 1001, which is not running",
}
#: The most this process may grow by while a far side sends 512 MiB it should not: the
#: window (1 MiB) and what the transport holds (64 events) are what it may hold.
HOSTILE_MEMORY = 64 << 20


def kb(key: str) -> int:
    """This process's ``/proc/self/status`` figure ``key`` (``VmHWM``, ``VmRSS``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/self/status")


@pytest.fixture(params=["local", "ssh"])
def broken(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[str], remotekit.Target]]:
    """``broken(mode)``: a target, here or through the real sshd (ssh -> the node's Python),
    whose first agent is tests/fakes/agent.py breaking the protocol as ``mode`` says, and
    every later one the real agent: its Python is a wrapper that runs the fake once."""

    def wrapper(mode: str) -> str:
        once = tmp_path / f"{mode}.ran"
        return (
            f'#!/bin/sh\nif [ -e {once} ]; then exec {sys.executable} "$@"; fi\n: > {once}\n'
            f"exec {sys.executable} -S {FAKES / 'agent.py'} {mode}\n"
        )

    yield from held_with_python(request, tmp_path, True, wrapper)


@pytest.mark.parametrize("mode", list(BROKEN))
def test_a_far_side_that_breaks_the_frame_protocol_ends_its_agent_at_once(
    broken: Callable[[str], remotekit.Target], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step on it fails within seconds (its own timeout is an hour) with the violation,
    named; this process holds no more than the window of what was sent; the reader thread
    raises nothing; the fake there is closed as for a dropped connection; and the next step
    starts a fresh agent (the real one, here)."""
    crashed: list[object] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)  # a reader thread that died
    t = broken(mode)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from here
    before = kb("VmRSS")
    slow = lambda stream, line: time.sleep(0.2)  # noqa: E731  (a reader that falls behind)
    th, out = in_thread(t.run, ["sleep", "3600"], timeout=3600, on_output=slow)
    th.join(30)
    grew = kb("VmHWM") - before
    print(f"{mode}: this process grew by {grew >> 20} MiB; the step ended with {out}")
    assert not th.is_alive(), "the step waits on its timeout"
    assert out and isinstance(out[0], remotekit.ProtocolViolation), out
    err = out[0]
    assert err.host == t.name and err.step == "run sleep"
    said = str(err)
    assert f"protocol violation: {BROKEN[mode]}" in said, said
    pid = int(said.split("remotekit agent (pid ", 1)[1].split(")")[0])
    assert f"remotekit agent (pid {pid}) on {t.name}" in said
    assert "\x1b" not in said and "may still be running" not in said
    assert grew < HOSTILE_MEMORY, f"this process grew by {grew >> 20} MiB"
    assert crashed == []
    assert wait_gone_pid(pid, 10), "the broken agent was not closed"
    assert agent_pid(t) != pid  # a fresh agent: the real one
    assert t.run(["echo", "next"], timeout=30).stdout == "next\n"


def test_the_agent_holds_its_caller_to_the_same_bounds(tmp_path: Path) -> None:
    """The agent's own reader takes the caller's frames through the same decoder: a header
    claiming 4 GiB (and a stream behind it) ends the agent at once, saying why on its stderr,
    and the step it ran is stopped, its tree too, as when its channel closes."""
    m = marker()
    header = StepHeader(argv=tuple(tree(m)), nonce="n", cwd=str(tmp_path)).encode()
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADER],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(loader_bytes() + frame(b"S", 1, f"{len(header)}\n".encode() + header))
        proc.stdin.flush()
        wait_seen(m)
        try:
            proc.stdin.write(FRAME.pack(b"D", 1, 0xFFFFFFFF))
            for _ in range(64):
                proc.stdin.write(b"x" * (1 << 20))
            proc.stdin.flush()
        except BrokenPipeError:  # it left: what it would not take has nowhere to go
            pass
        proc.wait(timeout=20)
        said = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        proc.stderr.close()
    assert b"remotekit agent: protocol violation: a b'D' frame of 4294967295 bytes" in said
    assert wait_gone(m, 8) == []
