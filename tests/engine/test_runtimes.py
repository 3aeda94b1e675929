"""The engine's guarantees, against every real runtime, on the local node and through sshd.

One parametrized suite over [pct-over-lxc, lxc, podman, docker (engine=podman), slurm,
kubectl (fake)] x [local, ssh]: nasty argv and env round trips, byte-exact run_python, a
timeout leaves no process (checked by pid inside the container's own pid namespace), a lost
connection stops the step there, a detached run outlives its step (a batch job via srun), 16
concurrent steps, bad input, the caller's env never leaks
in, each stopped/missing container, job or pod is its own clear error quoting the tool, and
ping names the broken hop. Each runtime is started once per session (tests/conftest.py) and
each target is opened once and shared.

Two more rows run a shipped file, a detached run, a timeout, a warm second step and what a
read-only root changes: a Podman container started with ``--read-only`` and an LXC container
whose rootfs is mounted ``ro`` (tests/runtimes.py), each with /tmp and /workspace writable
(READ_ONLY).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.diagnostics import system
from tests import runtimes
from tests.conftest import need, write_inventory
from tests.harness import SSHServer, processes_with, wait_gone
from tests.runtime_hosts import NESTED, hosts_for
from tests.runtimes import pid_inside

RUNTIMES = ("pct", "lxc", "podman", "docker", "slurm", "kubectl")
HOPS = ("local", "ssh")
#: the nested chains run through ssh only (the chains users have; the local rows show
#: nothing more there, and each of their steps costs the most)
ROWS = [(r, h) for r in RUNTIMES for h in HOPS] + [(r, "ssh") for r in NESTED]
#: rows whose container has a read-only root (only /tmp and /workspace writable): the tests
#: marked ``on_read_only_roots_too`` and those below "read-only roots" run on them
READ_ONLY = [(r, h) for r in ("podman-ro", "lxc-ro") for h in HOPS]
on_read_only_roots_too = pytest.mark.parametrize(
    "target", [*ROWS, *READ_ONLY], indirect=True, ids="-".join
)
NASTY = [
    "{x}",
    "a b",
    "'\\''",
    '"',
    "$HOME",
    "`id`",
    "$(id)",
    "*",
    "~",
    "\\",
    "a\nb",
    "PYEOF",
    "-c",
    "--",
    "",
    " lead",
    "äöü 中文 🙂",
    "%s%n",
    ";|&<>",
]
#: what a hop tool itself prints when the command exits non-zero
HOP_NOTES = ("srun: error: ", "command terminated with exit code ")
ECHO_ARGV = "import json,sys,os; print(json.dumps([sys.argv[1:], os.environ.get('NASTY')]))"
SCRIPT = """\
import sys
d = "ckpt-0001"
ckpt = {"global_step": 4001}
print(f'{d}: step={ckpt["global_step"]}')
print("quotes \\"x\\" 'y' $HOME `uname` ${PATH} {a,b} *")
s = '''
PYEOF
'''
print(s.strip(), "äöü 🙂")
print("argv:", sys.argv[1:])
sys.stdout.buffer.write(bytes(range(256)).hex().encode() + b"\\n")
"""


@dataclass
class Broken:
    """A host whose container/job/pod is stopped or missing, and what the error must say."""

    host: str
    error: str  # the ContainerError subclass
    says: str  # the tool's own words, quoted in the message
    ident: str  # the container, job or pod, named in the message


@dataclass
class World:
    """One runtime's hosts.yaml: ``local`` and ``ssh`` reach the running container."""

    runtime: str
    inv: remotekit.Inventory
    ident: str
    broken: list[Broken] = field(default_factory=list)
    no_ssh: str | None = None  #: why there are no ``ssh`` hosts (no sshd here)

    def need_ssh(self) -> None:
        if self.no_ssh is not None:
            pytest.skip(self.no_ssh)


@pytest.fixture(scope="session")
def worlds(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], World]]:
    """``worlds(runtime)``: that runtime's World, built (and its runtime started) on first use.
    The read-only LXC container is started here (only its rows use it) and stopped at the end."""
    made: dict[str, World] = {}
    own = contextlib.ExitStack()

    def fx(name: str) -> Any:
        if name != "lxc_ro":
            return request.getfixturevalue(name)
        need("lxc")
        ct = runtimes.LxcContainer(read_only=True)
        own.callback(ct.stop)
        return ct.start()

    def get(runtime: str) -> World:
        if runtime not in made:
            try:
                sshd: SSHServer | None = request.getfixturevalue("sshd")
                no_ssh = None
            except pytest.skip.Exception as exc:  # no sshd here: the local rows still run
                sshd, no_ssh = None, str(exc.msg)
            hop, ident, broken = hosts_for(runtime, fx)
            venv = {"venv": sys.prefix}
            hosts: dict[str, Any] = {"local": {**hop, **venv}}
            if sshd is not None:
                hosts["ssh"] = sshd.host_yaml(**hop, **venv)
            bad = []
            for name, (settings, error, says, what) in broken.items():
                vias = ("ssh",) if runtime in NESTED else HOPS
                for via in vias if sshd is not None else ("local",):
                    host = f"{name}-{via}"
                    base = sshd.host_yaml() if sshd is not None and via == "ssh" else {}
                    hosts[host] = {**base, **settings, **venv}
                    bad.append(Broken(host, error, says, what))
            path = tmp_path_factory.mktemp(f"inv-{runtime}") / "hosts.yaml"
            made[runtime] = World(runtime, write_inventory(path, hosts), ident, bad, no_ssh)
        return made[runtime]

    with own:
        yield get


@pytest.fixture(scope="session")
def held() -> Iterator[dict[tuple[str, str, bool | None], remotekit.Target]]:
    """Targets opened once per (runtime, hop, agent) and closed at the end of the session."""
    targets: dict[tuple[str, str, bool | None], remotekit.Target] = {}
    try:
        yield targets
    finally:
        for t in targets.values():
            t.close()


def _open(
    worlds: Callable[[str], World],
    held: dict[Any, remotekit.Target],
    key: tuple[str, str, bool | None],
) -> remotekit.Target:
    if key not in held:
        world = worlds(key[0])
        if key[1] == "ssh":
            world.need_ssh()
        held[key] = world.inv.target(key[1], agent=key[2])
    return held[key]


@pytest.fixture(params=ROWS, ids="-".join)
def target(
    request: pytest.FixtureRequest,
    worlds: Callable[[str], World],
    held: dict[tuple[str, str, bool | None], remotekit.Target],
    agent: bool | None,
) -> remotekit.Target:
    """A warm target on each runtime, reached locally or through the real sshd."""
    return _open(worlds, held, (*request.param, agent))


@pytest.fixture(params=RUNTIMES + NESTED)
def runtime(request: pytest.FixtureRequest, worlds: Callable[[str], World]) -> World:
    return worlds(request.param)


def marker() -> str:
    return f"62{uuid.uuid4().int % 10**6:06d}.5"  # a unique `sleep` argument


# -- quoting and payload -------------------------------------------------------------------------


def test_nasty_argv_and_env_round_trip(target: remotekit.Target) -> None:
    value = "".join(NASTY)
    r = target.run(["python", "-c", ECHO_ARGV, *NASTY], env={"NASTY": value})
    assert json.loads(r.stdout) == [NASTY, value]


@on_read_only_roots_too
def test_run_python_is_byte_exact(target: remotekit.Target) -> None:
    args = ["{x}", "a b", "'\\''", "$HOME", "PYEOF"]
    r = target.run_python(
        remotekit.Script(SCRIPT.encode(), name="check.py"),
        args=args,
        files={"data/blob.bin": bytes(range(256))},
    )
    want = (
        "ckpt-0001: step=4001\n"
        "quotes \"x\" 'y' $HOME `uname` ${PATH} {a,b} *\n"
        "PYEOF äöü 🙂\n"
        f"argv: {args}\n"
        f"{bytes(range(256)).hex()}\n"
    )
    assert r.stdout == want
    assert r.ok and r.exit_code == 0


def test_stdin_streams_through_the_chain(target: remotekit.Target) -> None:
    """A step's stdin passes every hop's tool (pct exec, lxc-attach, podman exec -i, srun,
    kubectl exec -i), byte-exact, then EOF."""
    data = bytes(range(256)) * 5000 + b"no newline"  # > 1 MB
    digest = "import hashlib,sys; d=sys.stdin.buffer.read(); print(len(d), hashlib.sha256(d).hexdigest())"
    r = target.run(["sh", "-c", 'cat | python -c "$0"', digest], stdin=data)
    assert r.stdout == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


# -- runs ----------------------------------------------------------------------------------------


@on_read_only_roots_too
def test_a_run_outlives_its_step_or_is_refused(target: remotekit.Target) -> None:
    """detach=True through each hop: a run that goes on after its step, is recorded and kept
    (kubectl/podman/docker exec and pct/lxc-attach leave a new session running; through srun,
    whose step takes every process with it, the run is a batch job: sbatch from outside)."""
    go = f"/tmp/rk-go-{uuid.uuid4().hex[:8]}"  # it waits for this, made after its step ended
    code = (
        "import os, sys, time\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
        "print('done', sys.argv[2:])\n"
    )
    argv = ["python", "-c", code, go, *NASTY[:4]]
    run = target.run(argv, detach=True, timeout=60)
    try:
        assert run.info().state == "running"
        target.run(["python", "-c", f"open({go!r}, 'w')"])
        assert run.wait(timeout=60).exit_code == 0
        assert b"".join(run.logs()) == f"done {NASTY[:4]}\n".encode()
    finally:
        if run.state() == "running":
            run.stop(grace=1)
        run.rm()
        target.run(["rm", "-f", go], check=False)


# -- stopping ------------------------------------------------------------------------------------


def _inside_pids(m: str) -> dict[int, int | None]:
    """host pid -> pid in its own pid namespace, for each process carrying marker ``m``."""
    return {pid: pid_inside(pid) for pid in processes_with(m)}


@on_read_only_roots_too
def test_timeout_leaves_no_process_inside(target: remotekit.Target) -> None:
    m = marker()
    seen: dict[int, int | None] = {}
    said: list[int] = []

    def on_output(stream: str, line: str) -> None:
        if line.startswith("pid "):
            said.append(int(line.split()[1]))
            end = time.monotonic() + 5  # poll: /proc may be read mid-exec
            while said[0] not in seen.values() and time.monotonic() < end:
                seen.update(_inside_pids(m))

    with pytest.raises(remotekit.StepTimeout) as info:
        target.run(["sh", "-c", f'echo "pid $$"; exec sleep {m}'], timeout=1.5, on_output=on_output)
    assert info.value.host == target.name and info.value.timeout_s == 1.5
    # the sleep was seen from here, under the pid it has inside its container ...
    assert said and said[0] in seen.values(), (said, seen)
    # ... and neither it nor any process with that inside pid is left
    assert wait_gone(m, 5) == []
    assert said[0] not in _inside_pids(m).values()


def _sshd_sessions_of(t: remotekit.Target, server: SSHServer) -> list[int]:
    """The sshd processes holding this target's connection (found by its socket's inode)."""
    sock: socket.socket = t.transport._conn.client.get_transport().sock  # type: ignore[attr-defined]
    here = sock.getsockname()[1]
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        local, remote = f[1], f[2]
        if int(local.split(":")[1], 16) == server.port and int(remote.split(":")[1], 16) == here:
            inodes.add(f[9])
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}
        except OSError:
            continue
        if any(f"socket:[{i}]" in links for i in inodes):
            pids.append(int(pid))
    return pids


def test_lost_connection_stops_the_step_there(
    runtime: World, sshd: SSHServer, agent: bool | None
) -> None:
    runtime.need_ssh()
    m = marker()
    errors: list[BaseException] = []
    with runtime.inv.target("ssh", agent=agent) as t:
        t.connect()

        def run() -> None:
            try:
                t.run(["sleep", m], timeout=120)
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=run)
        th.start()
        end = time.monotonic() + 30
        while not processes_with(m) and time.monotonic() < end:
            time.sleep(0.05)
        assert processes_with(m), "the step never started"
        sessions = _sshd_sessions_of(t, sshd)
        assert sessions, "no sshd process holds this connection"
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)  # the sshd serving this connection dies
        th.join(30)
    assert not th.is_alive()
    assert errors and isinstance(errors[0], remotekit.ConnectionLost), errors
    assert wait_gone(m, 10) == []


def test_sixteen_concurrent_steps(runtime: World, agent: bool | None) -> None:
    runtime.need_ssh()
    results: dict[int, remotekit.Result] = {}
    failures: list[BaseException] = []
    # its own connection: the held one may still have sessions closing from earlier tests
    with runtime.inv.target("ssh", agent=agent) as t:

        def one(i: int) -> None:
            try:
                code = f"import os\nprint({i} * 7, os.environ['REMOTEKIT_DIR'])\n"
                script = remotekit.Script(code.encode(), name=f"s{i}.py")
                results[i] = t.run_python(script, timeout=120)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(180)
    assert not failures, failures
    assert sorted(int(r.stdout.split()[0]) for r in results.values()) == [i * 7 for i in range(16)]
    assert len({r.stdout.split()[1] for r in results.values()}) == 16  # a private dir each


@on_read_only_roots_too
def test_steps_share_one_agent(target: remotekit.Target) -> None:
    # In a Slurm job too: slurmstepd holds a task's output until a newline unless srun has
    # --unbuffered, and the agent's frames are binary, so its first frame never came back.
    code = "import os; print(open('/proc/%d/stat' % os.getppid()).read().rsplit(')')[1].split()[1])"
    argv = ["python", "-c", code]  # the runner's parent (some images have no awk)
    assert target.run(argv).stdout == target.run(argv).stdout


# -- input and environment -----------------------------------------------------------------------


def test_bad_input_and_exit_codes(target: remotekit.Target) -> None:
    with pytest.raises(TypeError):
        target.run("echo hi")
    with pytest.raises(ValueError):
        target.run([])
    r = target.run(["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
    assert (r.exit_code, r.stdout) == (3, "out\n")
    # a non-zero exit makes srun and kubectl add a line of their own, and only those
    hop_said = [line for line in r.stderr.splitlines() if line != "err"]
    assert "err\n" in r.stderr and all(line.startswith(HOP_NOTES) for line in hop_said), r.stderr
    with pytest.raises(remotekit.StepFailed) as info:
        target.run(["/no/such/command-rk"])
    assert info.value.result.exit_code == 127
    assert "/no/such/command-rk" in str(info.value)


def test_callers_env_does_not_leak_in(
    target: remotekit.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RK_LEAK_CANARY", "leaked")  # this process (the local node's caller)
    probe = "import os; print(sorted(k for k in os.environ if k in ('RK_LEAK_CANARY', 'FAKE_PCT_ROOT', 'CONTAINERS_CONF')))"
    r = target.run(["python", "-c", probe], env={"GIVEN": "1"})
    # FAKE_PCT_ROOT and CONTAINERS_CONF are in the sshd session's env (and ours): the node's
    assert r.stdout.strip() == "[]"
    r = target.run(["sh", "-c", 'printf %s "$GIVEN"'], env={"GIVEN": "1"})
    assert r.stdout == "1"  # what the step is given does arrive


# -- broken containers, jobs and pods ------------------------------------------------------------


def test_stopped_or_missing_is_its_own_clear_error(runtime: World, agent: bool | None) -> None:
    for bad in runtime.broken:
        with (
            runtime.inv.target(bad.host, agent=agent) as t,
            pytest.raises(remotekit.ContainerError) as info,
        ):
            t.run(["true"], step="probe")
        err = info.value
        assert type(err).__name__ == bad.error, (bad.host, type(err), str(err))
        assert (err.host, err.step) == (bad.host, "probe")
        assert getattr(err, "container", None) is not None
        if runtime.runtime in NESTED:  # the hop whose words these are, not the one outside it
            assert err.container == bad.ident, (bad.host, err.container, str(err))
        text = str(err)
        assert bad.says in text, (bad.host, text)  # quotes the tool
        assert bad.ident in text, (bad.host, text)


def test_ping_names_the_broken_hop(runtime: World, agent: bool | None) -> None:
    with runtime.inv.target("local", agent=agent) as t:
        report = t.ping()
    assert report.failed is None, report.findings
    assert any(runtime.ident in c.layer for c in report.checks), report.checks
    for bad in runtime.broken:
        if not bad.host.endswith("-ssh"):
            continue
        with runtime.inv.target(bad.host, agent=agent) as t:
            report = t.ping()
        failed = report.failed
        assert failed is not None, (bad.host, report.checks)
        assert report.checks[0].ok  # ssh itself is fine ...
        assert bad.ident in failed.layer or bad.ident in failed.detail, (bad.host, failed)
        assert report.exit_code == 2


# -- read-only roots ------------------------------------------------------------------------------

WRITABLE = """\
import json, os, sys
def writable(path):
    try:
        os.mkdir(os.path.join(path, ".rk-probe"))
    except OSError as exc:
        return exc.strerror
    os.rmdir(os.path.join(path, ".rk-probe"))
    return "writable"
print(json.dumps({p: writable(os.path.expanduser(p)) for p in sys.argv[1:]}))
"""
#: every entry (path -> mtime) on a writable mount there, but below /proc, /sys and argv
WRITTEN = """\
import json, os, sys
skip = ["/proc", "/sys"] + sys.argv[1:]
seen = {}
for line in open("/proc/self/mounts"):
    where, opts = line.split()[1], line.split()[3]
    if "rw" not in opts.split(",") or any(where == s or where.startswith(s + "/") for s in skip):
        continue
    for top, dirs, files in os.walk(where):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip]
        for name in [top, *files]:
            path = os.path.join(top, name)
            seen[path] = os.lstat(path).st_mtime_ns
print(json.dumps(seen))
"""


@pytest.mark.parametrize("target", READ_ONLY, indirect=True, ids="-".join)
def test_a_read_only_root_takes_every_kind_of_step(
    target: remotekit.Target, agent: bool | None, tmp_path: Path
) -> None:
    """Only /tmp and the workdir are writable there: not the root, nor the home, so the agent
    keeps no code cache. A fresh target's agent and its steps (a command, put and get, a
    diagnostic) work, a write to the root fails with the system's words, and nothing is
    written anywhere else."""
    probe = remotekit.Script(WRITABLE, name="writable.py")
    r = target.run_python(probe, args=["/", "/etc", "~", "~/.cache", "/tmp", "/workspace"])
    ro = "Read-only file system"
    assert json.loads(r.stdout) == {
        **dict.fromkeys(["/", "/etc", "~"], ro),
        "~/.cache": "No such file or directory",  # the code cache's parent: never made
        "/tmp": "writable",
        "/workspace": "writable",
    }
    written = remotekit.Script(WRITTEN, name="written.py")
    before = json.loads(target.run_python(written, args=["/tmp", "/workspace"]).stdout)
    assert "/dev" in before  # a writable tmpfs there is seen
    data = os.urandom(100_000)
    (tmp_path / "up.bin").write_bytes(data)
    d = f"/workspace/rk-{uuid.uuid4().hex[:8]}"
    with remotekit.Target(target.spec, agent=agent) as t:  # its agent starts on that root
        said = t.run(["sh", "-c", 'pwd; mkdir "$1" && echo hi >"$1/out"; cat "$1/out"', "-", d])
        assert said.stdout == "/workspace\nhi\n"
        t.put(tmp_path / "up.bin", f"{d}/sub/up.bin", parents=True)
        t.get(f"{d}/sub/up.bin", tmp_path / "down.bin")
        assert (tmp_path / "down.bin").read_bytes() == data
        with pytest.raises(remotekit.StepFailed, match=ro):
            t.put(tmp_path / "up.bin", "/etc/up.bin")
        disk = system.disk_usage(t, [d], min_free_pct=0)
        assert (disk.exit_code, disk.errors) == (0, ())
        assert [(w.root, w.files, w.bytes) for w in disk.walks] == [(d, 2, len(data) + 3)]
        (line,) = [c for c in t.ping().checks if c.layer == "agent"]
        assert line.detail.startswith("off (agent: false)" if agent is False else "on (pid"), line
        t.run(["rm", "-r", d])
    assert json.loads(target.run_python(written, args=["/tmp", "/workspace"]).stdout) == before


# -- forward: a port in the target's own network namespace ---------------------------------------

ECHO_SERVER = """\
import os, socket, sys, threading
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def echo(conn):
    with conn:
        while data := conn.recv(65536):
            if data == b"QUIT":
                os._exit(0)
            conn.sendall(data)
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"""


def _echoes(port: int, n: int) -> bool:
    msg = f"{n} äö {{x}} $HOME\n".encode() * 4000
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(msg)
        got = b""
        while len(got) < len(msg) and (data := c.recv(1 << 16)):
            got += data
    return got == msg


def test_forward_reaches_a_port_in_the_targets_namespace(target: remotekit.Target) -> None:
    """The relay runs through every hop, so 127.0.0.1 there is the container's / job's own."""
    target.run(["ip", "link", "set", "lo", "up"], check=False)  # busybox's init leaves lo down
    # below the ephemeral ports (32768-60999 on Linux): srun and ssh open those as they go,
    # and a port taken by one of them (an srun I/O listener) answered in the server's place
    port = 10000 + uuid.uuid4().int % 20000
    # the server is a step of its own (a detached process would not outlive a Slurm step)
    server = remotekit.Script(ECHO_SERVER, name="echo_server.py")
    with ThreadPoolExecutor(7) as pool:
        ran = pool.submit(target.run_python, server, args=[str(port)], timeout=60, check=False)
        end = time.monotonic() + 15
        while True:
            try:
                fwd = target.forward(port)
                break
            except remotekit.ForwardError as exc:
                if ran.done():  # the server's step ended: say how, not only "refused"
                    raise AssertionError(f"the echo server ended: {ran.result()!r}") from exc
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        with fwd:
            assert all(pool.map(lambda n: _echoes(fwd.local_port, n), range(6)))
            with socket.create_connection(("127.0.0.1", fwd.local_port)) as c:
                c.sendall(b"QUIT")
            assert ran.result().exit_code == 0
        assert wait_gone("# remotekit-relay", timeout=10) == []  # every relay exited there


# -- chains of several hops ------------------------------------------------------------------------

on_chains = pytest.mark.parametrize(
    "target", [(r, "ssh") for r in NESTED], indirect=True, ids="-".join
)


@on_chains
def test_ping_probes_each_hop_in_order(target: remotekit.Target) -> None:
    """One check per hop, outermost first (each probe ran inside the hops before it)."""
    report = target.ping()
    assert report.failed is None, report.findings
    hops = [h.label for h in target.spec.hops]
    assert [c.layer for c in report.checks][: len(hops) + 1] == [target.transport.label, *hops]
    assert target.chain == " -> ".join([target.transport.label, *hops, f"{sys.prefix}/bin/python"])


@on_chains
def test_files_travel_byte_exact_through_the_chain(
    target: remotekit.Target, tmp_path: Path
) -> None:
    """put, get and sync at the innermost level: bytes and names as they are, as its user."""
    there = f"/tmp/rk-files-{uuid.uuid4().hex[:8]}"
    data = os.urandom(300_000) + bytes(range(256))
    (tmp_path / "up.bin").write_bytes(data)
    tree = tmp_path / "tree"
    (tree / "sub dir").mkdir(parents=True)
    (tree / "sub dir" / "naïve $HOME `x` {a,b}.txt").write_bytes(b"quoted? no\n")
    (tree / "blob.bin").write_bytes(data[::-1])
    try:
        target.put(tmp_path / "up.bin", f"{there}/in/up.bin", parents=True)
        target.get(f"{there}/in/up.bin", tmp_path / "down.bin")
        assert (tmp_path / "down.bin").read_bytes() == data
        done = target.sync(tree, f"{there}/tree")
        assert sorted(done.sent) == ["blob.bin", "sub dir/naïve $HOME `x` {a,b}.txt"]
        assert target.sync(tree, f"{there}/tree").sent == ()  # nothing changed: nothing sent
        back = target.get(f"{there}/tree", tmp_path / "back")  # a pull: its bodies raw
        assert sorted(back.sent) == sorted(done.sent)
        assert (tmp_path / "back" / "blob.bin").read_bytes() == data[::-1]
        code = "import os,sys; p=sys.argv[1]; print(os.stat(p).st_uid, open(p,'rb').read())"
        name = f"{there}/tree/sub dir/naïve $HOME `x` {{a,b}}.txt"
        uid = "1000" if target.spec.sudo else "0"  # written by whom the chain ends as
        assert target.run(["python", "-c", code, name]).stdout == f"{uid} b'quoted? no\\n'\n"
    finally:
        target.run(["rm", "-rf", there], check=False)


@on_chains
def test_cancel_leaves_no_process_at_any_level(target: remotekit.Target) -> None:
    """Ctrl-C (``cancel``) stops the step's tree at the innermost level; nothing is left."""
    m = marker()

    def on_output(stream: str, line: str) -> None:
        if line.startswith("pid "):
            threading.Timer(0.3, target.cancel).start()

    try:
        with pytest.raises(remotekit.StepCancelled):
            argv = ["sh", "-c", f'echo "pid $$"; sleep {m} & exec sleep {m}']
            target.run(argv, timeout=60, on_output=on_output)
    finally:
        target.resume()
    assert wait_gone(m, 5) == []
    assert target.run(["true"]).ok  # and the chain takes the next step


@on_chains
def test_a_stopped_run_leaves_nothing_at_any_level(target: remotekit.Target) -> None:
    """A run detached at the innermost level, listed by ``runs``, stopped with its whole tree."""
    m = marker()
    run = target.run(["sh", "-c", f"sleep {m} & exec sleep {m}"], detach=True, timeout=60)
    try:
        end = time.monotonic() + 20
        while len(processes_with(m)) < 2:
            assert time.monotonic() < end, "the run never started its two sleeps"
            time.sleep(0.05)
        assert run.id in [r.id for r in target.runs()]
        assert run.stop(grace=1).state == "stopped"
        assert wait_gone(m, 10) == []
    finally:
        run.rm()


# -- calls -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [("lxc", "ssh"), ("podman", "ssh")], indirect=True, ids="-".join)
def test_a_call_returns_its_value_through_a_container(
    target: remotekit.Target, tmp_path: Path
) -> None:
    """Target.call through ssh -> a real container's own Python: the caller's module (which
    the container lacks) ships, the value comes back, and an exception's traceback with it."""
    name = f"rk_calls_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import sys\n"
        "def where(x):\n"
        "    print('there', flush=True)\n"
        "    return {'x': x, 'version': list(sys.version_info[:2])}\n"
        "def boom():\n"
        "    raise KeyError('missing')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        mod = __import__(name)
        lines: list[str] = []
        value = target.call(
            mod.where, [1, "é"], timeout=120, on_output=lambda s, line: lines.append(line)
        )
        assert value["x"] == [1, "é"] and lines == ["there"]
        with pytest.raises(remotekit.RemoteError) as info:
            target.call(mod.boom, timeout=120)
        assert info.value.remote_type == "builtins.KeyError"
        assert "raise KeyError('missing')" in info.value.remote_traceback
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
