"""Fleet mode through real parts: eleven inventory entries -> one sshd -> fake pct -> venv.

The fleet inventory (``fleet_hosts``, written once per module and ``agent``), in this order,
which is not alphabetical:

    zulu alpha down mike stopped hang bravo plain local yankee echo

``down`` is a closed port (ConnectError), ``stopped`` a stopped container (ContainerError),
``hang`` sleeps past its own ``timeouts.step`` (StepTimeout), ``plain`` is the node itself with
an interpreter that has no site-packages (so ``ping`` finds no torch: exit 1), ``local`` is this
machine; the others are fake containers. Every host sets ``WHO`` to its name, so output says
where it came from. The tasks run as subprocesses from the repository root.
"""

from __future__ import annotations

import functools
import io
import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.diagnostics import system
from remotekit.fleet import DEFAULT_PARALLEL, FleetInterrupted
from remotekit.render import Console
from tests.conftest import write_inventory
from tests.harness import FAKES, ROOT, FakeNode, SSHServer, free_port, processes_with, wait_gone

pytestmark = pytest.mark.sshd

FAKE_SMI = FAKES / "nvidia-smi"
HANG_S = 4.0  # the hanging host's own timeouts.step; the others keep the default (600 s)
CONTAINERS = {
    "zulu": 300,
    "alpha": 301,
    "mike": 302,
    "hang": 303,
    "bravo": 304,
    "yankee": 305,
    "echo": 306,
}
STOPPED_CT = 310
ANSI = "\x1b["
PROGRESS = "hosts done"


@dataclass(frozen=True)
class FleetHosts:
    path: Path
    inv: remotekit.Inventory

    @property
    def names(self) -> list[str]:
        """Every host, in inventory order."""
        return [s.name for s in self.inv]

    @property
    def ok(self) -> list[str]:
        """The hosts whose steps run and finish, in inventory order."""
        return [n for n in self.names if n not in ("down", "stopped", "hang")]

    @property
    def width(self) -> int:
        return max(len(n) for n in self.names)

    def chain(self, name: str) -> str:
        return remotekit.Target(self.inv.spec(name)).chain


@pytest.fixture(scope="module")
def fleet_inventories(
    tmp_path_factory: pytest.TempPathFactory, sshd: SSHServer, node: FakeNode
) -> Callable[[bool | None], FleetHosts]:
    """The fleet's hosts.yaml, one written per ``agent`` (every host's ``agent:``)."""
    return functools.cache(lambda agent: _fleet_hosts(tmp_path_factory, sshd, node, agent))


@pytest.fixture
def fleet_hosts(
    fleet_inventories: Callable[[bool | None], FleetHosts], agent: bool | None
) -> FleetHosts:
    return fleet_inventories(agent)


def _fleet_hosts(
    tmp_path_factory: pytest.TempPathFactory, sshd: SSHServer, node: FakeNode, agent: bool | None
) -> FleetHosts:
    root = tmp_path_factory.mktemp("fleet")
    for vmid in CONTAINERS.values():
        node.add(vmid)
    node.add(STOPPED_CT, state="stopped")
    nosite = root / "python-S"  # the node's "python": no site-packages, so no torch
    nosite.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    nosite.chmod(0o755)
    pct, venv = str(node.pct), sys.prefix

    def ct(name: str, **extra: Any) -> dict[str, object]:
        vmid = CONTAINERS.get(name, STOPPED_CT)
        env = {"WHO": name, **extra.pop("env", {})}
        return sshd.host_yaml(container=vmid, pct=pct, venv=venv, env=env, **extra)

    hosts: dict[str, object] = {
        "zulu": ct("zulu"),
        "alpha": ct("alpha"),
        "down": {"ssh": f"root@127.0.0.1:{free_port()}", "timeouts": {"connect": 3}},
        "mike": ct("mike"),
        "stopped": ct("stopped"),
        "hang": ct("hang", env={"HANG": "1"}, timeouts={"step": HANG_S}),
        "bravo": ct("bravo"),
        "plain": sshd.host_yaml(python=str(nosite), env={"WHO": "plain"}),
        "local": {"env": {"WHO": "local"}},
        "yankee": ct("yankee"),
        "echo": ct("echo"),
    }
    path = root / "hosts.yaml"
    # the group is listed out of order: a selection comes back in inventory order
    groups = {"gpu": ["plain", "stopped", "down", "alpha"]}
    inv = write_inventory(path, hosts, agent=agent, groups=groups)
    return FleetHosts(path, inv)


def marker() -> str:
    return f"61{uuid.uuid4().int % 10**6:06d}.5"  # a unique `sleep` argument


def say(m: str) -> list[str]:
    """Says hello and "done"; on the host with HANG set, sleeps ``m`` seconds in between."""
    script = 'echo "hello from $WHO"; if [ -n "$HANG" ]; then sleep "$1"; fi; echo done'
    return ["sh", "-c", script, "sh", m]


def by_host(outcomes: Sequence[remotekit.HostOutcome]) -> dict[str, remotekit.HostOutcome]:
    return {o.host: o for o in outcomes}


# -- the Python API ----------------------------------------------------------------------------


def test_every_host_has_its_own_outcome_in_inventory_order(fleet_hosts: FleetHosts) -> None:
    m = marker()
    finished: list[str] = []
    with remotekit.fleet(fleet_hosts.inv.select(all=True)) as f:
        outcomes = f.run(say(m), on_done=lambda o: finished.append(o.host))
    assert [o.host for o in outcomes] == fleet_hosts.names
    assert sorted(finished) == sorted(fleet_hosts.names)  # each reported once, as it finished
    by = by_host(outcomes)
    for h in fleet_hosts.ok:
        o = by[h]
        assert o.error is None and isinstance(o.value, remotekit.Result), (h, o.error)
        assert o.value.stdout == f"hello from {h}\ndone\n"
        assert (o.status, o.exit_code, o.ok) == ("ok", 0, True)
        assert o.chain == o.value.chain == fleet_hosts.chain(h)

    down = by["down"].error
    assert isinstance(down, remotekit.ConnectError) and down.host == "down"
    assert "refused" in str(down)
    stopped = by["stopped"].error
    assert isinstance(stopped, remotekit.ContainerError) and stopped.host == "stopped"
    assert f"container '{STOPPED_CT}' not running!" in str(stopped)
    hang = by["hang"].error
    assert isinstance(hang, remotekit.StepTimeout) and hang.host == "hang"
    assert hang.timeout_s == HANG_S  # its own timeouts.step, not the others' default
    assert hang.result.stdout == "hello from hang\n"  # what it said before it was stopped
    for h in ("down", "stopped", "hang"):
        assert (by[h].status, by[h].exit_code, by[h].ok, by[h].value) == ("failed", 2, False, None)
    assert max(o.exit_code for o in outcomes) == 2

    # The hanging host delayed nobody: every other host was done before its timeout.
    assert finished[-1] == "hang"
    assert all(by[h].duration_s < HANG_S for h in fleet_hosts.names if h != "hang")
    assert by["hang"].duration_s >= HANG_S
    assert wait_gone(m) == []  # and its sleep was stopped there


def test_a_diagnostic_maps_over_the_fleet(
    sshd: SSHServer, tmp_path: Path, agent: bool | None
) -> None:
    """``fleet.map(lambda t: diag(t))``: reports with findings (1), failures (2), errors (2)."""
    bin_dir = tmp_path / "bin"  # plain SSH hosts: the node's /tmp is theirs
    bin_dir.mkdir()
    shutil.copy2(FAKE_SMI, bin_dir / "nvidia-smi")
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    nosite = str(bin_dir / "python3")
    scenario = {"cool": "healthy", "hot": "throttled", "nodrv": "no-driver", "down": "healthy"}
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {
            "cool": sshd.host_yaml(python=nosite),
            "hot": sshd.host_yaml(python=nosite),
            "nodrv": sshd.host_yaml(python=nosite),
            "down": {"ssh": f"root@127.0.0.1:{free_port()}", "timeouts": {"connect": 3}},
        },
        agent=agent,
    )

    def gpu(t: remotekit.Target) -> system.GpuReport:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_NVIDIA_SMI_SCENARIO": scenario[t.name]}
        return system.gpu_status(t, env=env, timeout=60)

    specs = [inv.spec(h) for h in ("cool", "hot", "nodrv", "down")]
    with remotekit.fleet(specs) as f:
        outcomes = f.map(gpu)
    assert [(o.host, o.status, o.exit_code) for o in outcomes] == [
        ("cool", "ok", 0),
        ("hot", "findings", 1),
        ("nodrv", "failed", 2),
        ("down", "failed", 2),
    ]
    cool, hot, nodrv, down = outcomes
    assert isinstance(hot.value, system.GpuReport) and hot.value.host == "hot"
    assert hot.value.findings[0] == "GPU 3: temperature 88 C >= 85 C"
    assert len(cool.value.gpus) == 8 and cool.value.findings == ()
    assert nodrv.error is None and nodrv.value.errors[0].startswith("NVIDIA-SMI has failed")
    assert isinstance(down.error, remotekit.ConnectError) and down.value is None
    assert max(o.exit_code for o in outcomes[:2]) == 1  # findings only: the worst is 1


def test_parallel_bounds_the_hosts_at_work(fleet_hosts: FleetHosts) -> None:
    specs = [fleet_hosts.inv.spec(h) for h in fleet_hosts.ok]
    lock = threading.Lock()

    def busiest(parallel: int | None, specs: list[remotekit.HostSpec]) -> int:
        now, peak = [0], [0]

        def fn(t: remotekit.Target) -> remotekit.Result:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            try:
                return t.run(["sleep", "0.3"])
            finally:
                with lock:
                    now[0] -= 1

        with remotekit.fleet(specs, parallel=parallel) as f:
            outcomes = f.map(fn)
        assert [(o.host, o.ok) for o in outcomes] == [(s.name, True) for s in specs]
        return peak[0]

    assert busiest(3, specs) == 3
    assert busiest(1, specs[:3]) == 1
    assert DEFAULT_PARALLEL >= 32
    assert remotekit.fleet(specs).parallel == DEFAULT_PARALLEL
    assert busiest(None, specs) == len(specs)  # by default, all of these at once


class _Interrupter:
    """Sends SIGINT to this process (Ctrl-C) once ``n`` processes carry ``marker``."""

    def __init__(self, m: str, n: int):
        self.fired = threading.Event()
        self.over = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(m, n), daemon=True)
        self.thread.start()

    def _run(self, m: str, n: int) -> None:
        end = time.monotonic() + 30
        while len(processes_with(m)) < n and time.monotonic() < end:
            time.sleep(0.05)
        if not self.over.is_set():  # never into a test that has moved on
            self.fired.set()
            os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self) -> _Interrupter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.over.set()
        self.thread.join(35)


def test_ctrl_c_stops_every_remote_step_and_reports_what_finished(
    fleet_hosts: FleetHosts,
) -> None:
    m = marker()
    running = [h for h in fleet_hosts.names if h not in ("down", "stopped")]  # hang too
    f = remotekit.fleet(fleet_hosts.inv.select(all=True))
    with f, _Interrupter(m, len(running)) as ctrl_c, pytest.raises(FleetInterrupted) as info:
        f.run(["sleep", m], timeout=30)
    assert ctrl_c.fired.is_set()
    assert isinstance(info.value, KeyboardInterrupt)
    outcomes = info.value.outcomes
    assert [o.host for o in outcomes] == fleet_hosts.names  # every host had started
    by = by_host(outcomes)
    assert isinstance(by["down"].error, remotekit.ConnectError)  # finished before Ctrl-C
    assert isinstance(by["stopped"].error, remotekit.ContainerError)
    for h in running:
        err = by[h].error
        assert isinstance(err, remotekit.StepCancelled) and err.host == h, (h, err)
        assert by[h].status == "failed"
    assert wait_gone(m, 10) == []  # no process left on any host


def test_ctrl_c_never_starts_the_queued_hosts(fleet_hosts: FleetHosts) -> None:
    m = marker()
    started: list[str] = []

    def fn(t: remotekit.Target) -> remotekit.Result:
        started.append(t.name)
        return t.run(["sleep", m], timeout=30)

    specs = [fleet_hosts.inv.spec(h) for h in fleet_hosts.ok]
    f = remotekit.fleet(specs, parallel=3)
    with f, _Interrupter(m, 3), pytest.raises(FleetInterrupted) as info:
        f.map(fn)
    outcomes = info.value.outcomes
    assert [o.host for o in outcomes] == fleet_hosts.ok[:3]  # the hosts that had started
    assert sorted(started) == sorted(fleet_hosts.ok[:3])  # the queued ones never did
    assert all(isinstance(o.error, remotekit.StepCancelled) for o in outcomes)
    assert wait_gone(m, 10) == []


def test_a_failing_on_done_stops_the_fleet(fleet_hosts: FleetHosts) -> None:
    m = marker()

    def fn(t: remotekit.Target) -> object:
        if t.name == "zulu":  # done once the others' steps run there
            end = time.monotonic() + 20
            while len(processes_with(m)) < 2 and time.monotonic() < end:
                time.sleep(0.05)
            return None
        return t.run(["sleep", m], timeout=30)

    def broken(o: remotekit.HostOutcome) -> None:
        raise RuntimeError(f"rendering {o.host} failed")

    with remotekit.fleet(fleet_hosts.inv.select(hosts="zulu,alpha,mike")) as f:
        with pytest.raises(RuntimeError, match="rendering zulu failed"):
            f.map(fn, on_done=broken)
        assert processes_with(m) == []  # the fleet stopped them there before it raised


# -- live output -------------------------------------------------------------------------------

BODY_SRC = """\
def body(who, i):
    n = 70000 if i % 50 == 7 else 1000 + (i * 37) % 900  # some lines span many SSH packets
    return "%s:%d:%s" % (who, i, (who + ".") * (n // (len(who) + 1)))
"""
N_LINES = 200
_ns: dict[str, Any] = {}
exec(BODY_SRC, _ns)
body = _ns["body"]


def _first_diff(host: str, got: list[str], want: list[str]) -> str:
    """Where two long lists of long lines part, in a few words."""
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    a, b = (got[i] if i < len(got) else None), (want[i] if i < len(want) else None)

    def show(x: str | None) -> str | None:
        return x if x is None or len(x) < 80 else f"{x[:40]}...{x[-30:]} ({len(x)})"

    return f"{host}: {len(got)} lines, want {len(want)}; line {i}: {show(a)!r} != {show(b)!r}"


def test_prefixed_lines_never_interleave(fleet_hosts: FleetHosts) -> None:
    script = remotekit.Script(
        BODY_SRC
        + "import os, sys\n"
        + "who = os.environ['WHO']\n"
        + f"for i in range({N_LINES}):\n"
        + "    sys.stdout.write(body(who, i) + '\\n')\n"
        + "    if i % 10 == 0:\n"
        + "        sys.stderr.write('err ' + body(who, i)[:300] + '\\n')\n",
        name="chatty.py",
    )
    out, err = io.StringIO(), io.StringIO()
    console = Console(fleet_hosts.names, out=out, err=err)
    specs = [fleet_hosts.inv.spec(h) for h in fleet_hosts.ok]
    with remotekit.fleet(specs) as f:
        outcomes = f.map(
            lambda t: t.run_python(script, on_output=console.output(t.name), capture=False)
        )
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]

    def split(text: str) -> dict[str, list[str]]:
        assert text.endswith("\n")
        lines: dict[str, list[str]] = {}
        for line in text[:-1].split("\n"):
            tag, sep, rest = line.partition(" | ")
            assert sep and tag == tag.rstrip().ljust(fleet_hosts.width), line[:120]
            lines.setdefault(tag.rstrip(), []).append(rest)
        return lines

    seen_out, seen_err = split(out.getvalue()), split(err.getvalue())
    assert sorted(seen_out) == sorted(seen_err) == sorted(fleet_hosts.ok)
    for h in fleet_hosts.ok:
        want = [body(h, i) for i in range(N_LINES)]
        assert seen_out[h] == want, _first_diff(h, seen_out[h], want)
        want = [f"err {body(h, i)[:300]}" for i in range(0, N_LINES, 10)]
        assert seen_err[h] == want, _first_diff(h, seen_err[h], want)
    assert ANSI not in out.getvalue() + err.getvalue()


def test_no_output_is_lost_when_the_steps_exit(fleet_hosts: FleetHosts) -> None:
    """Each step's last bytes arrive, although OpenSSH may send the exit status before them."""
    size, reps, n = 300_000, 12, 16
    spec = fleet_hosts.inv.spec("plain")
    short: list[tuple[int, str, int]] = []
    with remotekit.fleet([remotekit.Target(spec) for _ in range(n)]) as f:
        for rep in range(reps):
            for o in f.run(["head", "-c", str(size), "/dev/zero"]):
                assert o.ok, o.error
                if len(o.value.stdout) != size:
                    short.append((rep, o.host, len(o.value.stdout)))
    assert short == [], f"{len(short)} of {n * reps} steps lost the end of their output"


def test_closing_a_fleet_stops_every_host_at_once(tmp_path: Path) -> None:
    """Closing a fleet stops each host's agent and steps together, not one host after
    another: each close waits for its agent to stop its steps and leave (a round trip, or a
    step's grace), which a fleet's ``with`` block would otherwise pay once per host. Each
    step, told to stop, says so and takes a while to leave: every host is told before the
    first one has left."""
    log, n = tmp_path / "log", 3
    step = (
        f'trap \'trap "" TERM; echo term $$ >> {log}; sleep 1.5; echo left $$ >> {log}; '
        f"exit 0' TERM; echo up $$ >> {log}; while :; do sleep 0.05; done"
    )
    slow = remotekit.local_target().spec
    slow = replace(slow, timeouts=replace(slow.timeouts, kill_grace=10.0))
    f = remotekit.fleet([remotekit.Target(slow) for _ in range(n)])
    ran = threading.Thread(target=f.run, args=(["sh", "-c", step],), kwargs={"check": False})
    ran.start()
    try:
        deadline = time.monotonic() + 30
        while len(_said(log, "up")) < n:
            assert time.monotonic() < deadline, _said(log)
            time.sleep(0.05)
    finally:
        f.close()
        ran.join(30)
    said = _said(log)
    told = {pid: said.index(("term", pid)) for _, pid in _said(log, "up")}
    assert all(("left", pid) in said for pid in told), said
    assert max(told.values()) < min(i for i, (w, _) in enumerate(said) if w == "left"), said


def _said(path: Path, word: str | None = None) -> list[tuple[str, str]]:
    """The (word, pid) lines the steps wrote, in order (only ``word``'s when given)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(w, p) for w, _, p in (ln.partition(" ") for ln in lines) if word in (None, w)]


def test_console_lines_stay_whole_under_many_threads() -> None:
    hosts = [f"h{i}" for i in range(16)]
    out = io.StringIO()
    console = Console(hosts, out=out, err=out)
    text = {h: [f"{h}-{i}-" + h * (50 + i % 300) for i in range(300)] for h in hosts}

    def talk(h: str) -> None:
        emit = console.output(h)
        for i in range(0, 300, 2):  # two lines in one call: each gets the prefix
            emit("stdout" if i % 4 else "stderr", text[h][i] + "\n" + text[h][i + 1])

    threads = [threading.Thread(target=talk, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got: dict[str, list[str]] = {}
    for line in out.getvalue().splitlines():
        tag, _, rest = line.partition(" | ")
        got.setdefault(tag.rstrip(), []).append(rest)
        assert tag == tag.rstrip().ljust(3)
    assert got == text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_console_colour_and_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    hosts = ["a", "bb"]

    def show(console: Console) -> None:
        console.line("a", "stdout", "out")
        console.line("bb", "stderr", "err")
        console.progress("[1/2 hosts done, 0 failed]")
        console.say("note")
        console.done()

    out, err = _Tty(), _Tty()
    show(Console(hosts, out=out, err=err))
    assert f"{ANSI}36ma \x1b[0m | out\n" in out.getvalue()
    assert f"{ANSI}33mbb\x1b[0m | err\n" in err.getvalue()
    assert "[1/2 hosts done, 0 failed]" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")  # done() leaves no progress behind

    out, err = io.StringIO(), io.StringIO()  # piped: plain, no progress
    show(Console(hosts, out=out, err=err))
    assert out.getvalue() == "a  | out\nnote\n"
    assert err.getvalue() == "bb | err\n"

    out, err = _Tty(), io.StringIO()  # `2>log` on a terminal: no escapes in the log
    console = Console(hosts, out=out, err=err)
    show(console)
    assert err.getvalue() == "bb | err\n"
    assert console.tag("a", "stderr") == "a " and ANSI in console.tag("a")

    out, err = _Tty(), _Tty()  # quiet (--json): nothing at all
    show(Console(hosts, out=out, err=err, quiet=True))
    assert out.getvalue() == err.getvalue() == ""

    for name, value in (("NO_COLOR", "1"), ("TERM", "dumb")):
        with monkeypatch.context() as mp:
            mp.setenv(name, value)
            out, err = _Tty(), _Tty()
            show(Console(hosts, out=out, err=err))
            assert ANSI + "3" not in out.getvalue() + err.getvalue(), name


# -- the tasks ---------------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_run_json_is_machine_readable(fleet_hosts: FleetHosts) -> None:
    m = marker()
    p = cli(
        "run", "--cmd", shlex.join(say(m)), "--all", "--json", "--inventory", str(fleet_hosts.path)
    )
    data = json.loads(p.stdout)  # stdout is the JSON and nothing else
    assert p.returncode == 2, p.stderr
    assert data["exit_code"] == 2
    hosts = data["hosts"]
    assert [h["host"] for h in hosts] == fleet_hosts.names
    by = {h["host"]: h for h in hosts}
    for name in fleet_hosts.ok:
        h = by[name]
        assert (h["status"], h["exit_code"]) == ("ok", 0), h
        assert h["result"]["stdout"] == f"hello from {name}\ndone\n"
        assert h["chain"] == fleet_hosts.chain(name)
        assert isinstance(h["duration_s"], float) and "error" not in h
    for name, kind in (
        ("down", "ConnectError"),
        ("stopped", "ContainerNotRunning"),
        ("hang", "StepTimeout"),
    ):
        h = by[name]
        assert (h["status"], h["exit_code"], h["error"]["type"]) == ("failed", 2, kind), h
        assert "result" not in h
    assert f"{HANG_S:g} s" in by["hang"]["error"]["message"]
    assert PROGRESS not in p.stderr and ANSI not in p.stdout + p.stderr
    assert wait_gone(m) == []


def test_ping_json_by_group_and_by_host(fleet_hosts: FleetHosts) -> None:
    p = cli("ping", "--group", "gpu", "--json", "--inventory", str(fleet_hosts.path))
    assert p.returncode == 2, p.stderr
    data = json.loads(p.stdout)
    got = [(h["host"], h["status"], h["exit_code"]) for h in data["hosts"]]
    assert got == [  # inventory order, not the group's
        ("alpha", "ok", 0),
        ("down", "failed", 2),
        ("stopped", "failed", 2),
        ("plain", "findings", 1),
    ]
    by = {h["host"]: h for h in data["hosts"]}
    assert [c["ok"] for c in by["alpha"]["result"]["checks"]] == [True] * 5
    assert [c["ok"] for c in by["stopped"]["result"]["checks"]] == [True, False]
    assert by["down"]["result"]["checks"][0]["ok"] is False
    torch = by["plain"]["result"]["checks"][-1]
    assert torch["layer"] == "torch" and torch["ok"] is False

    p = cli("ping", "--host", "plain,local", "--json", "--inventory", str(fleet_hosts.path))
    assert p.returncode == 1, p.stderr  # findings only: the worst is 1
    data = json.loads(p.stdout)
    assert data["exit_code"] == 1
    assert [(h["host"], h["status"]) for h in data["hosts"]] == [
        ("plain", "findings"),
        ("local", "ok"),
    ]


def test_run_piped_is_plain_with_a_summary_and_verbose_chains(fleet_hosts: FleetHosts) -> None:
    m = marker()
    p = cli(
        "run",
        "--cmd",
        shlex.join(say(m)),
        "--all",
        "--verbose",
        "--inventory",
        str(fleet_hosts.path),
    )
    assert p.returncode == 2, p.stderr
    assert ANSI not in p.stdout + p.stderr
    assert PROGRESS not in p.stdout + p.stderr and "\r" not in p.stdout + p.stderr
    w = fleet_hosts.width
    out, err = p.stdout.splitlines(), p.stderr.splitlines()
    for h in fleet_hosts.names:  # --verbose: the chain each host runs
        assert f"{h.ljust(w)} | chain: {fleet_hosts.chain(h)}" in err, h
    for h in fleet_hosts.ok:
        assert f"{h.ljust(w)} | hello from {h}" in out and f"{h.ljust(w)} | done" in out
    assert f"{'hang'.ljust(w)} | hello from hang" in out
    for h in ("down", "stopped", "hang"):
        assert any(line.startswith(f"{h.ljust(w)} | error: ") for line in err), h
    # the summary table: host, status, duration, key finding; inventory order
    head = next(
        i for i, line in enumerate(out) if re.match(r"host\s+status\s+time\s+finding$", line)
    )
    rows = out[head + 2 : head + 2 + len(fleet_hosts.names)]
    assert [r.split()[0] for r in rows] == fleet_hosts.names
    status = {r.split()[0]: r.split()[1] for r in rows}
    assert status == {h: "ok" if h in fleet_hosts.ok else "failed" for h in fleet_hosts.names}
    finding = {r.split()[0]: r for r in rows}
    # the reason itself, as the error says it (no exception class names)
    assert re.search(r"\d+\.\ds\s+root@.*: connection refused", finding["down"])
    assert re.search(r"\d+\.\ds\s+container 310 cannot be entered", finding["stopped"])
    assert re.search(rf"\d+\.\ds\s+timed out after {HANG_S:g} s", finding["hang"])
    assert wait_gone(m) == []


def _on_terminal(args: Sequence[str], timeout: float = 60) -> tuple[int, str]:
    """Run remotekit with stdout and stderr on a pseudo-terminal; (exit code, what it showed)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "remotekit", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm-256color"},
    )
    os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(10), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_run_on_a_terminal_has_colour_and_progress(fleet_hosts: FleetHosts) -> None:
    code, shown = _on_terminal(
        [
            "run",
            "--cmd",
            "echo hi",
            "--host",
            "zulu,down,alpha",
            "--inventory",
            str(fleet_hosts.path),
        ]
    )
    assert code == 2, shown
    assert re.search(r"\x1b\[\d+mzulu\s*\x1b\[0m \| hi", shown), shown
    assert "[3/3 hosts done, 1 failed]" in shown
    assert "\r\x1b[K" in shown  # the progress line is cleared before the summary
    assert re.search(r"down\s+failed", shown)
