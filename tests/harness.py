"""Real parts for tests and benchmarks: an OpenSSH sshd on 127.0.0.1 and a Proxmox node stand-in.

``SSHServer`` starts a real ``sshd`` with generated host and client keys, its own config and
known_hosts, polls it until it answers and stops it in ``stop()``. ``FakeNode`` installs the
`pct` stand-in (tests/fakes/pct), whose CTs are real LXC containers (tests/runtimes.py). Used by
tests/conftest.py and by bench/. Beside them, what many test modules share: the command line
run as a user runs it (``cli``, ``rk``, ``Tty`` on a pty) and the other Pythons found here
(``PYTHONS``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import glob
import importlib
import inspect
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.runtimes import LxcContainer

#: Where things are, for every test file to import rather than walk up from its own
#: ``__file__``: a test file moved into a subfolder of tests/ then needs no edit.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FAKES = TESTS / "fakes"
DATA = TESTS / "data"


def find_sshd() -> str | None:
    for cand in (shutil.which("sshd"), "/usr/sbin/sshd", "/usr/local/sbin/sshd"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "remotekit-test", "-f", str(path)],
        check=True,
    )


@dataclass
class SSHServer:
    """A real sshd on 127.0.0.1 (free port), for the current user, key auth only."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    user: str = field(default_factory=getpass.getuser)
    proc: subprocess.Popen[bytes] | None = None
    #: More sshd_config lines (e.g. ``MaxSessions 2``).
    extra_config: str = ""

    @property
    def client_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def host_pub(self) -> str:
        return (self.root / "ssh_host_ed25519_key.pub").read_text().strip()

    def start(self, timeout: float = 20.0) -> SSHServer:
        sshd = find_sshd()
        if sshd is None:
            raise RuntimeError("sshd not found (apt-get install openssh-server)")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        hostkey = self.root / "ssh_host_ed25519_key"
        if not hostkey.exists():
            _keygen(hostkey)
            _keygen(self.client_key)
            (self.root / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        setenv = " ".join(f"{k}={v}" for k, v in {"SHLVL": "1", **self.env}.items())
        last = ""
        for _ in range(5):
            self.port = free_port()
            cfg = self.root / "sshd_config"
            cfg.write_text(
                f"Port {self.port}\n"
                "ListenAddress 127.0.0.1\n"
                f"HostKey {hostkey}\n"
                f"PidFile {self.root / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PermitRootLogin prohibit-password\n"
                # Debian's bash sources ~/.bashrc for `ssh host cmd` when SHLVL < 2 (FIELD-NOTES)
                f"SetEnv {setenv}\n"
                "LogLevel ERROR\n"
                "MaxStartups 64:30:128\n"
                "Subsystem sftp internal-sftp\n" + self.extra_config
            )
            self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {self.host_pub}\n")
            # its log goes to a file: a pipe nobody reads after the start fills up in a long
            # session, and then every sshd process that logs an error blocks
            log = self.root / "sshd.log"
            with log.open("wb") as err:
                self.proc = subprocess.Popen(
                    [sshd, "-D", "-e", "-f", str(cfg)],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    last = log.read_text(errors="replace")
                    break
                if self._answers():
                    return self
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"sshd did not start: {last}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def drop_connections(self) -> list[int]:
        """Kill (SIGKILL) the sshd processes serving this server's connections, as a server
        that went away does; the listener stays. Returns the pids killed."""
        assert self.proc is not None, "the server is not running"
        killed = _children(self.proc.pid)
        for pid in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return killed

    def freeze_connections(self) -> list[int]:
        """Stop (SIGSTOP) the sshd processes serving this server's connections: each link
        stays open but says nothing more, as one that died silently does (a NAT that forgot
        it). :meth:`drop_connections` ends them. Returns the pids stopped."""
        assert self.proc is not None, "the server is not running"
        todo, frozen = _children(self.proc.pid), []
        while todo:
            pid = todo.pop()
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"sshd"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
                todo += _children(pid)
        return frozen

    def host_yaml(self, **extra: object) -> dict[str, object]:
        """The hosts.yaml settings that reach this server."""
        return {
            "ssh": f"{self.user}@127.0.0.1:{self.port}",
            "identity": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            **extra,
        }


@dataclass
class FakeNode:
    """A Proxmox node stand-in: the `pct` stand-in (tests/fakes/pct) and a fake `sudo` in
    ``root/bin``, and CT configs under ``root/pve`` (the node's /etc/pve) that map each vmid to
    a real LXC container (tests/runtimes.py): ``running`` or ``stopped``.

    ``install()`` needs no container (the sshd fixture only needs ``env``); ``add()`` does.
    """

    root: Path
    running: LxcContainer | None = None
    stopped: LxcContainer | None = None
    name: str = "pve"
    vmids: dict[int, LxcContainer] = field(default_factory=dict)

    @property
    def pct(self) -> Path:
        return self.root / "bin" / "pct"

    @property
    def bin(self) -> Path:
        """The node's fake tools (pct, sudo): put it first on the node's PATH."""
        return self.root / "bin"

    @property
    def pve(self) -> Path:
        """The stand-in for /etc/pve (``$FAKE_PCT_ROOT``)."""
        return self.root / "pve"

    @property
    def env(self) -> dict[str, str]:
        """What the node's sshd sessions need: the pct stand-in's root and the tools on PATH."""
        return {"FAKE_PCT_ROOT": str(self.pve), "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def install(self) -> FakeNode:
        self.bin.mkdir(parents=True, exist_ok=True)
        for tool in ("pct", "sudo"):
            src = (FAKES / tool).read_text().split("\n", 1)[1]
            # Our own interpreter, -S: no pyenv shim, no site (the fakes are stdlib only).
            (self.bin / tool).write_text(f"#!{sys.executable} -S\n{src}")
            (self.bin / tool).chmod(0o755)
        (self.pve / "nodes" / self.name / "lxc").mkdir(parents=True, exist_ok=True)
        if not (self.pve / "local").is_symlink():
            (self.pve / "local").symlink_to(f"nodes/{self.name}")
        if not (self.pve / "lxc").is_symlink():  # as pmxcfs links it: /etc/pve/lxc/<vmid>.conf
            (self.pve / "lxc").symlink_to(f"nodes/{self.name}/lxc")
        return self

    def sudo_policy(self, policy: str) -> None:
        """``nopasswd`` or ``password`` (what the fake sudo answers to ``sudo -n``)."""
        (self.bin / "sudo-policy").write_text(policy)

    def add(
        self,
        vmid: int,
        state: str = "running",
        ct: LxcContainer | None = None,
        hostname: str = "",
        tags: str = "",
    ) -> None:
        """CT ``vmid``: the running LXC container, or the stopped one (``state="stopped"``),
        or the container ``ct``; its config's ``hostname:`` (default ``ct<vmid>``) and
        ``tags:`` (``gpu;train``)."""
        ct = ct or (self.running if state == "running" else self.stopped)
        if ct is None:
            raise RuntimeError(f"FakeNode has no {state} LXC container for CT {vmid}")
        self.vmids[vmid] = ct
        tagline = f"tags: {tags}\n" if tags else ""
        self.conf(vmid).write_text(
            f"arch: amd64\nhostname: {hostname or f'ct{vmid}'}\nostype: unmanaged\n"
            f"{tagline}rk-lxc-name: {ct.name}\n"
        )

    def remove(self, vmid: int) -> None:
        """CT ``vmid`` is gone from the node (its config removed)."""
        self.vmids.pop(vmid, None)
        self.conf(vmid).unlink(missing_ok=True)

    def conf(self, vmid: int) -> Path:
        """CT ``vmid``'s config (``/etc/pve/nodes/<node>/lxc/<vmid>.conf``)."""
        return self.pve / "nodes" / self.name / "lxc" / f"{vmid}.conf"

    def ct_tmp(self, vmid: int) -> Path:
        """The running container's /tmp as seen from the node."""
        return self.vmids[vmid].path("/tmp")


def venv_prefix() -> str:
    """The venv the tests run in (a real venv Python with torch): the containers' venv."""
    if sys.prefix == sys.base_prefix:
        raise RuntimeError("run the tests from a venv (see README): the fake container uses it")
    return sys.prefix


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (the whole process table, via /proc)."""
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmd:
            out.append(int(name))
    return out


def run_readers(run_id: str) -> list[int]:
    """The processes that have run ``run_id``'s log open, its supervisor aside: its ``logs``
    steps (a fork of the runner: their command line is the runner's, so found by the file)."""
    log = f"/{run_id}/output.log"
    supervisor = set(processes_with(f"start {run_id}"))
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in supervisor:
            continue
        try:
            links = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")]
        except OSError:
            continue
        if any(link.endswith(log) for link in links):
            out.append(int(name))
    return out


def _children(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` (via /proc)."""
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and _parent(int(n)) == parent]


def _parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (``None`` once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def wait_gone(marker: str, timeout: float = 5.0) -> list[int]:
    """Poll until no process carries ``marker``; returns those still there at the end."""
    end = time.monotonic() + timeout
    while (left := processes_with(marker)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def ancestors(pid: int) -> list[tuple[int, str]]:
    """(pid, cmdline) from ``pid``'s parent up to init."""
    out = []
    while pid > 1:
        parent = _parent(pid)
        if parent is None:
            break
        pid = parent
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            break
        out.append((pid, cmd))
    return out


def _is_fixture(obj: object) -> bool:
    """Whether ``obj`` is a ``@pytest.fixture`` function (pytest exports no public test)."""
    try:
        from _pytest.fixtures import FixtureFunctionDefinition  # pytest >= 8.4
    except ImportError:  # before 8.4 the decorator marks the function itself
        return hasattr(obj, "_pytestfixturefunction")
    return isinstance(obj, FixtureFunctionDefinition)


def suite(name: str) -> ModuleType:
    """The test module ``name`` (``"test_runtimes"``) wherever it lies under tests/, imported
    under the dotted name pytest gives it (``tests.engine.test_runtimes``): a module that
    re-runs another's tests names it without its folder."""
    found = [p for p in TESTS.rglob(f"{name}.py") if DATA not in p.parents]
    if len(found) != 1:
        raise LookupError(f"{len(found)} test modules named {name}.py under {TESTS}: {found}")
    return importlib.import_module(".".join(found[0].relative_to(ROOT).with_suffix("").parts))


def rerunnable(module: ModuleType, fixtures: set[str]) -> dict[str, Callable[..., Any]]:
    """The test functions of ``module`` that take any of ``fixtures``, directly or through a
    fixture of ``module``'s own, and (when there are any) ``module``'s own fixtures, those they
    ask for with ``request.getfixturevalue`` too: a module that imports them
    (``globals().update(...)``) re-runs them with its own overrides of those fixtures. A test
    added there later is re-run too, with no list to keep."""
    own = {name: fn for name, fn in vars(module).items() if _is_fixture(fn)}

    def reaches(fn: Callable[..., Any]) -> set[str]:
        """The fixtures ``fn`` takes, and those ``module``'s own fixtures among them take."""
        seen: set[str] = set()
        todo = list(inspect.signature(fn).parameters)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += inspect.signature(own[name]).parameters if name in own else ()
        return seen

    tests = {
        name: fn
        for name, fn in vars(module).items()
        if name.startswith("test_") and callable(fn) and fixtures & reaches(fn)
    }
    return {**own, **tests} if tests else {}


class NoMount(Exception):
    """A filesystem could not be mounted here (not root, no CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def small_disk(path: Path, size: str = "256k") -> Iterator[Path]:
    """A real disk that fills: a tmpfs of ``size`` mounted at ``path``, unmounted at the end
    (lazily: a run's supervisor may still hold a file on it). NoMount when mounting is not
    permitted here."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if r.returncode != 0:
        raise NoMount(f"cannot mount a tmpfs at {path}: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(disk: Path) -> Path:
    """The file that takes what is left of ``disk``, written until the disk refused more."""
    filler = disk / f"filler-{os.getpid()}-{time.monotonic_ns()}"
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * 4096
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


#: Ways a cache folder there (``<cache home>/remotekit/<name>``) is not ours alone, so that what
#: is read from it could be someone else's: how -> (the folder, under the cache home, ``{name}``
#: the cache's own; a mode to give it; an owner to give it).
UNTRUSTED_CACHE = {
    "{name} not ours": ("remotekit/{name}", None, 65534),
    "{name} group-writable": ("remotekit/{name}", 0o770, None),
    "{name} world-writable": ("remotekit/{name}", 0o707, None),
    "{name} readable by others": ("remotekit/{name}", 0o755, None),
    "remotekit/ not ours": ("remotekit", None, 65534),
    "remotekit/ group-writable": ("remotekit", 0o775, None),
    "the cache home world-writable": ("", 0o777, None),
    "the cache home not ours": ("", None, 65534),
    "a folder above it world-writable": ("..", 0o777, None),
    "a folder above it not ours": ("..", None, 65534),
}


def untrusted_cache(name: str) -> dict[str, tuple[str, int | None, int | None]]:
    """UNTRUSTED_CACHE for the cache folder ``name`` (``pkg``, ``code``)."""
    return {
        how.format(name=name): (below.format(name=name), mode, owner)
        for how, (below, mode, owner) in UNTRUSTED_CACHE.items()
    }


def make_untrusted(home: Path, how: tuple[str, int | None, int | None]) -> None:
    """Make the folder of an UNTRUSTED_CACHE case, under the cache home ``home``, so."""
    below, mode, owner = how
    folder = home / below
    if mode is not None:
        folder.chmod(mode)
    if owner is not None:
        os.chown(folder, owner, -1)


def tree(folder: Path) -> dict[str, tuple[int, int, int, int]]:
    """Everything under ``folder``: path -> (mode, uid, size, mtime_ns), links not followed."""
    out = {}
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        out[str(path.relative_to(folder))] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
    return out


# ---------------------------------------------------------------------------------------------
# the command line, as a user runs it: `remotekit TASK ...` in a subprocess, or on a pty

REMOTEKIT = [sys.executable, "-m", "remotekit"]
PNG = b"\x89PNG\r\n\x1a\n"  # how a ``--plot`` file starts


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def rk(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args], cwd=cwd, capture_output=True, timeout=60
    )


def only_host(stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)
    [host] = doc["hosts"]
    assert host["host"] == "local" and host["exit_code"] == doc["exit_code"]
    return host


class Tty:
    """`remotekit ARGS` with stdout and stderr on a new pty (or stderr alone: ``stdout=PIPE``),
    in its own session and process group; what it writes to the pty is read into ``seen``."""

    def __init__(
        self,
        args: list[str],
        cwd: Path,
        *,
        pipe_stdout: bool = False,
        size: tuple[int, int] = (60, 200),
    ) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))  # rows, cols
        self.proc = subprocess.Popen(
            [*REMOTEKIT, *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe_stdout else slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, done: object, timeout: float = 60.0) -> bytes:
        """Read until ``done(seen)`` is true or the pty closes; the bytes seen."""
        end = time.monotonic() + timeout
        while not done(self.seen) and time.monotonic() < end:  # type: ignore[operator]
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # EIO: every writer has closed the pty
                    break
                if not data:
                    break
                self.seen += data
        return self.seen

    def finish(self, timeout: float = 60.0) -> int:
        self.read_until(lambda _: False, timeout=0.1)
        rc = self.proc.wait(timeout=timeout)
        self.read_until(lambda _: False, timeout=0.5)
        os.close(self.master)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# ---------------------------------------------------------------------------------------------
# the other Pythons on this machine


def _interpreters() -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    candidates = [shutil.which(f"python3.{m}") for m in range(6, 15)] + [shutil.which("python2.7")]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv/versions/*/bin/python")))
    for path in filter(None, candidates):
        try:
            out = subprocess.run(
                [path, "-c", "import sys; sys.stdout.write('%d %d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if len(out) == 2:
            found.setdefault((int(out[0]), int(out[1])), path)
    return found


def __getattr__(name: str) -> Any:
    """``PYTHONS``: (major, minor) -> the path of each other Python found here, looked for on
    first use (each candidate is run), not by every module that imports this one."""
    if name == "PYTHONS":
        globals()["PYTHONS"] = pythons = _interpreters()
        return pythons
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
