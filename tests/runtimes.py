"""Real runtimes for tests and benchmarks: an LXC container, a Podman container, a Slurm cluster.

Each class starts the real thing on this machine (as root, no network, no registry), polls it
until it answers (never a fixed sleep), and stops it in ``stop()``, which a fixture calls in
``finally``. Every resource has a unique name, since several test sessions share the machine.
The recipes (which config lines make each runtime start here) are measured facts from
shared/FIELD-NOTES.md, "Real runtimes on this machine".

Inside every container the host's ``/usr``, the test venv (at the same path) and the venv's base
interpreter are bound read-only, so ``<venv>/bin/python`` with torch runs there; ``/tmp`` is
private; ``/workspace`` is writable. A read-only container (``LxcContainer(read_only=True)``,
``PodmanWorld.read_only_container()``) has all of that on a root filesystem mounted read-only.

``missing(kind)`` says in one line why a runtime cannot run here (``None`` when it can).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import FAKES, free_port

TOOLS = {
    "lxc": ("lxc-create", "lxc-start", "lxc-attach", "lxc-info", "lxc-stop", "lxc-destroy"),
    "podman": ("podman", "runc"),
    "slurm": ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue"),
}
APT = {
    "lxc": "lxc busybox-static",
    "podman": "podman runc catatonit",
    "slurm": "slurmctld slurmd slurm-client munge",
}


CATATONIT = "/usr/libexec/podman/catatonit"


def missing(kind: str) -> str | None:
    """Why runtime ``kind`` (lxc, podman, slurm) cannot run here, in one line; None if it can."""
    if not sys.platform.startswith("linux"):
        return f"{kind} needs Linux"
    if os.geteuid() != 0:
        return f"{kind} test fixtures need root (privileged containers, slurmd)"
    absent = [t for t in TOOLS[kind] if _which(t) is None]
    if kind == "lxc" and _which("busybox") is None:
        absent.append("busybox")
    if kind == "podman" and not (Path(CATATONIT).exists() or _which("catatonit")):
        absent.append("catatonit")  # what `podman run --init` runs
    if absent:
        return f"{kind}: {', '.join(absent)} not installed (apt-get install {APT[kind]})"
    return None


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"


def _stale(name: str, prefix: str) -> bool:
    """A resource named by ``unique(prefix)`` whose session (its pid) is gone: a killed run's."""
    pid = name[len(prefix) + 1 :].split("-")[0]
    return name.startswith(prefix + "-") and pid.isdigit() and not Path(f"/proc/{pid}").exists()


def wait_for(what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``ready`` until it is true; RuntimeError naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not ready after {timeout:g} s")
        time.sleep(0.05)


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def _check(argv: list[str], **kw: object) -> str:
    r = _run(argv, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def venv_binds() -> list[str]:
    """Host paths to bind read-only at the same place: the venv and its base interpreter."""
    venv = sys.prefix
    paths = [venv]
    cfg = Path(venv) / "pyvenv.cfg"
    if cfg.exists():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                base = str(Path(value.strip()).resolve().parent)  # the interpreter's prefix
                paths.append(base)
    return [p for p in paths if not (p == "/usr" or p.startswith("/usr/"))]


def pid_inside(host_pid: int) -> int | None:
    """The pid a host process has in its own (innermost) pid namespace (``NSpid``)."""
    try:
        status = Path(f"/proc/{host_pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return None


# -- LXC -----------------------------------------------------------------------------------------


@dataclass
class LxcContainer:
    """A real busybox LXC container; ``running=False`` creates it and leaves it stopped;
    ``read_only=True`` mounts its root filesystem read-only (``lxc.rootfs.options = ro``);
    ``nesting=True`` lets containers run inside it (Podman, as on a Proxmox CT with
    ``features: nesting=1``: see :data:`NESTING`), with Podman's settings in its /etc."""

    name: str = field(default_factory=lambda: unique("rk-lxc"))
    running: bool = True
    read_only: bool = False
    nesting: bool = False
    workspace: Path | None = None
    lxcpath: str = "/var/lib/lxc"

    @property
    def config(self) -> Path:
        return Path(self.lxcpath) / self.name / "config"

    def start(self) -> LxcContainer:
        for old in _run(["lxc-ls", "-1"]).stdout.split():
            if _stale(old, "rk-lxc"):  # left by a test session that was killed
                _run(["lxc-destroy", "-n", old, "-f"])
                for ws in Path(tempfile.gettempdir()).glob(f"{old}-ws-*"):
                    shutil.rmtree(ws, ignore_errors=True)
        _check(["lxc-create", "-n", self.name, "-t", "busybox"])
        self.workspace = Path(tempfile.mkdtemp(prefix=f"{self.name}-ws-"))
        self.config.write_text(self._config(self.config.read_text()))
        if self.nesting:
            self._podman_settings(self.config.parent / "rootfs")
        if self.read_only:  # no mount point can be made on a read-only root: make them now
            rootfs = self.config.parent / "rootfs"
            for inside in ("tmp", "workspace", *(p.lstrip("/") for p in venv_binds())):
                (rootfs / inside).mkdir(parents=True, exist_ok=True)
        if self.running:
            _check(["lxc-start", "-n", self.name, "-d"])
            wait_for(f"lxc container {self.name}", lambda: self.state() == "RUNNING")
            # busybox's init may still be mounting: wait until a command really runs inside
            wait_for(f"lxc-attach {self.name}", self._answers)
        return self

    def _config(self, template: str) -> str:
        """The template's config without network, apparmor and its lib binds, plus ours."""
        drop = ("lxc.net.", "lxc.apparmor.")
        binds = ("lxc.mount.entry = /lib", "lxc.mount.entry = /usr/lib")
        keep = [
            line
            for line in template.splitlines()
            if not line.startswith(drop) and not line.startswith(binds)
        ]
        ours = [
            "lxc.net.0.type = empty",
            "lxc.apparmor.profile = unconfined",
            # a private /tmp, mounted before anything that could be bound below it
            "lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,mode=1777,create=dir 0 0",
            "lxc.mount.entry = /usr usr none ro,bind 0 0",
            "lxc.mount.entry = /lib lib none ro,bind 0 0",
            "lxc.mount.entry = /lib64 lib64 none ro,bind,optional 0 0",
            *(
                f"lxc.mount.entry = {p} {p.lstrip('/')} none ro,bind,create=dir 0 0"
                for p in venv_binds()
            ),
            f"lxc.mount.entry = {self.workspace} workspace none rw,bind,create=dir 0 0",
            *(["lxc.rootfs.options = ro"] if self.read_only else []),
            *(NESTING if self.nesting else []),
        ]
        if self.nesting:  # cgroups and /proc, /sys writable: NESTING's mounts, not these
            keep = [line for line in keep if not line.startswith("lxc.mount.auto")]
        return "\n".join([*keep, *ours]) + "\n"

    @staticmethod
    def _podman_settings(rootfs: Path) -> None:
        """Podman's settings in the container's /etc, as its admin would write them (pct exec
        clears the environment: no CONTAINERS_CONF reaches a podman run there)."""
        etc = rootfs / "etc" / "containers"
        etc.mkdir(parents=True, exist_ok=True)
        # cgroupfs: no systemd inside; file events: no journald
        conf = CONTAINERS_CONF + 'cgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        (etc / "containers.conf").write_text(conf)
        # vfs: the CT's root is a plain directory, on which overlay cannot be stacked here
        (etc / "storage.conf").write_text(
            '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\n'
            'graphroot = "/var/lib/containers/storage"\n'
        )
        (etc / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        (rootfs / "var" / "tmp").mkdir(parents=True, exist_ok=True)  # podman import stages here

    def _answers(self) -> bool:
        return _run(["lxc-attach", "-n", self.name, "--clear-env", "--", "true"]).returncode == 0

    def state(self) -> str:
        r = _run(["lxc-info", "-n", self.name, "-sH"])
        return r.stdout.strip() if r.returncode == 0 else "MISSING"

    @property
    def init_pid(self) -> int:
        return int(_check(["lxc-info", "-n", self.name, "-pH"]).strip())

    def path(self, inside: str) -> Path:
        """Where the container's ``inside`` path is, seen from the host (via its init's root)."""
        return Path(f"/proc/{self.init_pid}/root") / inside.lstrip("/")

    def stop(self) -> None:
        if self.state() == "RUNNING":
            _run(["lxc-stop", "-n", self.name, "-k"])
        _run(["lxc-destroy", "-n", self.name, "-f"])
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)


#: What lets Podman run inside a (privileged) LXC container here: cgroups, /proc and /sys
#: mounted writable (LXC's nesting.conf, what Proxmox's ``nesting=1`` sets), no capability
#: dropped, every device allowed (runc makes /dev/null and friends in the inner container).
NESTING = [
    "lxc.mount.auto = cgroup:rw:force proc:rw sys:rw",
    "lxc.cap.drop =",
    "lxc.cgroup.devices.allow = a",
]


def lxc_attach(ct: LxcContainer) -> tuple[str, ...]:
    """The argv prefix that runs a command inside ``ct`` (its environment cleared, as pct's)."""
    return ("lxc-attach", "-n", ct.name, "--clear-env", "--")


# -- Podman --------------------------------------------------------------------------------------

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
netns = "none"
[engine]
runtime = "runc"
"""


@dataclass
class PodmanWorld:
    """A containers.conf for this machine, an imported rootfs image, and containers made from it.

    The image is a handful of directories and symlinks (``bin -> usr/bin``...): everything
    else is the host's ``/usr`` bound read-only, so no registry is needed.

    ``via``: run podman inside another container (``lxc_attach(ct)`` for an LXC container made
    with ``nesting=True``, whose /etc holds Podman's settings). ``user``: the image also has
    that user (uid 1000, a home) and root may ``sudo -u`` to it (the host's real sudo, under
    the bound /usr, with a PAM stack that lets root through).
    """

    root: Path
    image: str = field(default_factory=lambda: "localhost/" + unique("rk-rootfs"))
    names: list[str] = field(default_factory=list)
    running: str = ""  #: a running container (``sleep infinity`` under --init)
    stopped: str = ""  #: a stopped one (exited)
    read_only: str = ""  #: a running one with a read-only root, once asked for
    via: tuple[str, ...] = ()
    user: str = ""

    @property
    def conf(self) -> Path:
        return self.root / "containers.conf"

    @property
    def env(self) -> dict[str, str]:
        """What every podman client here needs in its environment (inside ``via``: nothing,
        the container's /etc has it)."""
        return {} if self.via else {"CONTAINERS_CONF": str(self.conf)}

    @property
    def engine(self) -> Path:
        """podman with this world's settings, as one executable (``engine:`` in hosts.yaml),
        for a hop that clears the environment before it (``srun --export=NONE``), as a
        site's /etc/containers would hold them. ``"$@"`` passes every argument as it is."""
        path = self.root / "podman"
        if not path.exists():
            path.write_text(f'#!/bin/sh\nCONTAINERS_CONF={self.conf} exec podman "$@"\n')
            path.chmod(0o755)
        return path

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run([*self.via, "podman", *args], env={**os.environ, **self.env})

    def start(self) -> PodmanWorld:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.via:
            self.conf.write_text(CONTAINERS_CONF)
            self._sweep()
        rootfs = self._rootfs(self.root / "rootfs")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            [*self.via, "podman", "import", "-", self.image],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
        )
        tar.wait()
        if imp.returncode != 0:
            raise RuntimeError(f"podman import failed: {imp.stderr.strip()}")
        self.running = self.container()
        self.stopped = self.container(running=False)
        return self

    def _rootfs(self, rootfs: Path) -> Path:
        for d in ("usr", "tmp", "etc", "proc", "sys", "dev", "workspace", "root"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            (rootfs / link).symlink_to(f"usr/{link}")
        etc = rootfs / "etc"
        (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (etc / "group").write_text("root:x:0:\n")
        if self.user:
            u = self.user
            with (etc / "passwd").open("a") as f:
                f.write(f"{u}:x:1000:1000::/home/{u}:/bin/sh\n")
            with (etc / "group").open("a") as f:
                f.write(f"{u}:x:1000:\n")
            (rootfs / "home" / u).mkdir(parents=True)
            os.chown(rootfs / "home" / u, 1000, 1000)
            (etc / "sudoers").write_text("root ALL=(ALL:ALL) ALL\n")
            (etc / "sudoers").chmod(0o440)
            (etc / "pam.d").mkdir()
            (etc / "pam.d" / "sudo").write_text(
                "auth sufficient pam_rootok.so\nauth required pam_deny.so\n"
                "account required pam_permit.so\nsession required pam_permit.so\n"
            )
            (etc / "hosts").write_text("127.0.0.1 localhost\n")
        return rootfs

    def container(self, running: bool = True, extra: tuple[str, ...] = ()) -> str:
        """A new container from the image, running ``sleep infinity`` under --init, or stopped;
        ``extra``: more ``podman run`` options."""
        name = unique("rk-pod")
        self.names.append(name)
        binds = [a for p in ["/usr", *venv_binds()] for a in ("-v", f"{p}:{p}:ro")]
        argv = ["run", "-d", "--init", "--name", name, "--tmpfs", "/tmp:rw,mode=1777", *binds]
        argv += extra
        out = self.podman(*argv, self.image, "sleep", "infinity")
        if out.returncode != 0:
            raise RuntimeError(f"podman run failed: {out.stderr.strip()}")
        wait_for(f"podman container {name}", lambda: self.state(name) == "running")
        if self.user:  # the tmpfs comes 0755 inside an LXC container, whatever mode= says
            self.podman("exec", name, "chmod", "1777", "/tmp")
        if not running:
            self.podman("stop", "-t", "5", name)
            wait_for(f"podman stop {name}", lambda: self.state(name) == "exited")
        return name

    def read_only_container(self) -> str:
        """A running container whose root is read-only (``--read-only``: podman mounts a tmpfs
        on /tmp, /var/tmp and /run), with a host folder bound writable at /workspace; made on
        the first call, removed by ``stop()``."""
        if not self.read_only:
            workspace = Path(tempfile.mkdtemp(prefix="ro-workspace-", dir=self.root))
            self.read_only = self.container(
                extra=("--read-only", "-v", f"{workspace}:/workspace:rw")
            )
        return self.read_only

    def _sweep(self) -> None:
        """Remove what a killed test session left (its pid is in every name)."""
        names = self.podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        for old in names:
            if _stale(old, "rk-pod"):
                self.podman("rm", "-f", "-t", "0", old)
        images = self.podman("images", "--format", "{{.Repository}}").stdout.split()
        for image in images:
            if _stale(image.removeprefix("localhost/"), "rk-rootfs"):
                self.podman("rmi", "-f", image)

    def state(self, name: str) -> str:
        r = self.podman("inspect", "-f", "{{.State.Status}}", name)
        return r.stdout.strip() if r.returncode == 0 else "missing"

    def stop(self) -> None:
        for name in self.names:
            self.podman("rm", "-f", "-t", "0", name)
        self.podman("rmi", "-f", self.image)


# -- Slurm ---------------------------------------------------------------------------------------

HOSTNAME = os.uname().nodename.split(".")[0]


@dataclass
class SlurmCluster:
    """A private one-node Slurm cluster: munged, slurmctld and slurmd on 127.0.0.1 free ports.

    Every file (keys, sockets, state, spool, pid and log files) lives under ``root``. Clients
    need ``env`` (``SLURM_CONF``).
    """

    root: Path
    name: str = field(default_factory=lambda: unique("rk").replace("-", "_"))

    # its own node name (slurmd -N): its cgroups (slurm_<node>) and jobs are not another
    # cluster's on this machine
    node: str = field(default_factory=lambda: unique("rk").replace("-", "_"))
    jobs: list[str] = field(default_factory=list)
    running: str = ""  #: a RUNNING job (``sleep 3000``): steps run in its allocation
    pending: str = ""  #: a job held PENDING (``--hold``)
    finished: str = ""  #: a COMPLETED job
    unknown: str = "67000000"  #: an id no job has (above any FirstJobId used here)
    #: GPUs as Slurm's gres/gpu plugin sees them: a folder holding character devices
    #: ``nvidia0..N-1`` (gres.conf ``File=``: slurmd refuses anything but a device node) and N
    gpus: tuple[Path, int] | None = None

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def tool(self, *argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return _run(list(argv), env={**os.environ, **self.env}, **kw)

    def start(self) -> SlurmCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # munged wants its socket's directories searchable
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir(exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = self.root / "munge.sock"
        _check(
            [
                "munged",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={self.root / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={self.root / 'munged.seed'}",
            ]
        )
        wait_for("munged", sock.exists)
        self._write_conf(sock)
        _check(["slurmctld", "-f", str(self.conf)], env={**os.environ, **self.env})
        wait_for("slurmctld", lambda: self.tool("scontrol", "ping").returncode == 0)
        _check(["slurmd", "-f", str(self.conf), "-N", self.node], env={**os.environ, **self.env})
        wait_for("slurmd", self._node_up)
        self.running = self.submit("--job-name=rk-running", "--wrap", "sleep 3000")
        self.finished = self.submit("--job-name=rk-finished", "--wrap", "true", wait="COMPLETED")
        self.pending = self.submit(
            "--job-name=rk-pending", "--hold", "--wrap", "true", wait="PENDING"
        )
        return self

    def _write_conf(self, sock: Path) -> None:
        cpus = os.cpu_count() or 1
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20) // 2
        r = self.root
        self.conf.write_text(
            f"ClusterName={self.name}\n"
            f"SlurmctldHost={HOSTNAME}(127.0.0.1)\n"
            "MailProg=/bin/true\n"
            f"SlurmctldPort={free_port()}\n"
            f"SlurmdPort={free_port()}\n"
            "SlurmUser=root\n"
            "AuthType=auth/munge\n"
            "CredType=cred/munge\n"
            f"AuthInfo=socket={sock}\n"
            "ProctrackType=proctrack/cgroup\n"
            "TaskPlugin=task/none\n"
            "SelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\n"
            "ReturnToService=2\n"
            "MpiDefault=none\n"
            "JobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\n"
            "SchedulerType=sched/backfill\n"
            "SlurmctldTimeout=30\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=2\nMinJobAge=7200\n"
            f"StateSaveLocation={r / 'state'}\n"
            f"SlurmdSpoolDir={r / 'spool'}\n"
            f"SlurmctldPidFile={r / 'slurmctld.pid'}\n"
            f"SlurmdPidFile={r / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}\n"
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}\n"
            f"FirstJobId={secrets.randbelow(10**6) + 1000}\n"
            f"NodeName={self.node} NodeHostname={HOSTNAME} "
            f"NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} State=UNKNOWN\n"
            f"PartitionName=rk Nodes={self.node} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4\n"
        )
        if self.gpus is not None:  # the node's GPUs, and the files they are (gres.conf)
            folder, count = self.gpus
            text = self.conf.read_text().replace(
                " State=UNKNOWN\n", f" Gres=gpu:{count} State=UNKNOWN\n"
            )
            self.conf.write_text("GresTypes=gpu\n" + text)
            files = f"{folder}/nvidia[0-{count - 1}]" if count > 1 else f"{folder}/nvidia0"
            (r / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File={files}\n")
        (r / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\n"
            "ConstrainRAMSpace=no\nConstrainSwapSpace=no\nConstrainDevices=no\n"
        )

    def _no_jobs(self) -> bool:
        r = self.tool("squeue", "--noheader", "--format=%i")
        return r.returncode != 0 or not r.stdout.strip()

    def _node_up(self) -> bool:
        r = self.tool("sinfo", "-h", "-N", "-o", "%t")
        return r.returncode == 0 and r.stdout.strip() in ("idle", "mix", "alloc")

    def job_state(self, job: str) -> str:
        r = self.tool("scontrol", "show", "job", job, "-o")
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "UNKNOWN"

    def submit(self, *argv: str, wait: str | None = "RUNNING") -> str:
        """sbatch ``argv`` (e.g. ``--wrap 'sleep 3000'``); the job id, once in state ``wait``."""
        out = _check(
            ["sbatch", "--parsable", f"--chdir={self.root}", *argv], env={**os.environ, **self.env}
        )
        job = out.strip().split(";")[0]
        self.jobs.append(job)
        if wait is not None:
            wait_for(f"slurm job {job} {wait}", lambda: self.job_state(job) == wait)
        return job

    def stop(self) -> None:
        for job in self.jobs:
            self.tool("scancel", job)
        # a batch job's slurmstepd outlives a slurmd stopped before it ended: wait for them
        with contextlib.suppress(RuntimeError):
            wait_for("slurm jobs ended", self._no_jobs, timeout=15)
        for daemon in ("slurmd", "slurmctld", "munged"):
            _stop_by_pidfile(self.root / f"{daemon}.pid")
        # slurmd's cgroups (proctrack/cgroup, cgroup v1): remove the empty tree it leaves
        for ctl in ("freezer", "cpuset", "memory", "devices"):
            top = Path(f"/sys/fs/cgroup/{ctl}/slurm_{self.node}")
            _rmdir_tree(top)


def _stop_by_pidfile(pidfile: Path, timeout: float = 10.0) -> None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and Path(f"/proc/{pid}").exists():
        if _zombie(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _rmdir_tree(top: Path) -> None:
    if not top.is_dir():
        return
    for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            with contextlib.suppress(OSError):
                path.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


# -- kubectl (fake: no cluster can run here) ----------------------------------------------------


@dataclass
class FakeKube:
    """tests/fakes/kubectl installed in ``root`` with its pods' state file beside it.

    Namespace ``ml``: ``trainer`` (Running; containers ``main`` and ``sidecar``), ``done``
    (Succeeded), ``queued`` (Pending, no node), ``crashing`` (Running, container ``main`` not
    running); labelled ``app=trainer``: ``trainer``, ``trainer-1`` (Running, also
    ``rank=1``), ``trainer-old`` (Running, being deleted) and ``done``. Context ``kind-rk``.
    """

    root: Path
    namespace: str = "ml"
    context: str = "kind-rk"

    @property
    def bin(self) -> Path:
        return self.root / "kubectl"

    def install(self) -> FakeKube:
        self.root.mkdir(parents=True, exist_ok=True)
        src = (FAKES / "kubectl").read_text().split("\n", 1)[1]
        self.bin.write_text(f"#!{sys.executable} -S\n{src}")
        self.bin.chmod(0o755)
        ns = self.namespace
        train = {"app": "trainer"}
        pods = {
            f"{ns}/trainer": {
                "phase": "Running",
                "node": "gpu1",
                "labels": train,
                "containers": {"main": {"running": True}, "sidecar": {"running": True}},
            },
            f"{ns}/trainer-1": {
                "phase": "Running",
                "node": "gpu2",
                "labels": {**train, "rank": "1"},
                "containers": {"main": {"running": True}},
            },
            f"{ns}/trainer-old": {
                "phase": "Running",
                "node": "gpu2",
                "labels": train,
                "deleting": True,
                "containers": {"main": {"running": True}},
            },
            f"{ns}/done": {
                "phase": "Succeeded",
                "node": "gpu1",
                "labels": train,
                "containers": {"main": {}},
            },
            f"{ns}/queued": {"phase": "Pending", "containers": {"main": {"running": False}}},
            f"{ns}/crashing": {
                "phase": "Running",
                "node": "gpu1",
                "containers": {"main": {"running": False}},
            },
        }
        state = {"contexts": [self.context], "current-context": self.context, "pods": pods}
        (self.root / "kubectl-state.json").write_text(json.dumps(state, indent=1))
        return self
