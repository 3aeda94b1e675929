"""Shared fixtures: a real sshd on 127.0.0.1, a Proxmox node stand-in behind it whose CTs are
real LXC containers, a real Podman container, a one-node Slurm cluster, an inventory.

Tests marked ``sshd`` skip when there is no sshd on this machine, and tests on a runtime skip
(one line: what is missing) when it cannot run here, except under CI=true, where either is an
error: CI must run them.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import remotekit
from tests import runtimes
from tests.harness import FakeNode, NoMount, SSHServer, find_sshd, small_disk, venv_prefix

# Ctrl-C as a terminal delivers it: a shell that starts a job in the background without job
# control (`.ci/run &`, `bash -c '...' &`) leaves SIGINT *ignored*, and that is inherited, so
# the `invoke` processes these tests start and then SIGINT (forward, watch) would never see it.
# A Python handler here is reset to the default in every child at exec.
signal.signal(signal.SIGINT, signal.default_int_handler)

# A piped stdin reaches a one-host `remotekit run` step, as with ssh: the commands these tests
# start must not read the stdin the suite itself was started with (a CI runner's pipe that
# never ends). A test that gives a step input passes it explicitly. A terminal stays (pdb).
if not os.isatty(0):
    _devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(_devnull, 0)
    os.close(_devnull)

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CT, STOPPED = 200, 201
#: The CT whose LXC container runs containers of its own (``nested``).
NESTED_CT = 210


def _need_sshd() -> None:
    if find_sshd() is None:
        if CI:
            pytest.fail("CI=true but sshd is missing: .ci/run must install openssh-server")
        pytest.skip("no sshd on this machine (apt-get install openssh-server)")


def need_program(name: str) -> str:
    """The path of program ``name``; skip (with the reason) when it is not installed, fail
    under CI, where .ci/run installs every program the tests use."""
    path = shutil.which(name)
    if path is None:
        if CI:
            pytest.fail(f"CI=true but {name} is missing: .ci/run must install it")
        pytest.skip(f"{name} not installed")
    return path


def need(kind: str) -> None:
    """Skip (with a one-line reason) when runtime ``kind`` cannot run here; fail under CI."""
    reason = runtimes.missing(kind)
    if reason is not None:
        if CI:
            pytest.fail(f"CI=true but {reason}: .ci/run must install it (and run as root)")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder for this session's runtimes; their client settings set in our env.

    ``SLURM_CONF`` and ``CONTAINERS_CONF`` name files in it before the runtimes start, so the
    sshd (started once) passes them to its sessions too.
    """
    root = tmp_path_factory.mktemp("world")
    env = {
        "SLURM_CONF": str(root / "slurm" / "slurm.conf"),
        "CONTAINERS_CONF": str(root / "podman" / "containers.conf"),
        "FAKE_PCT_ROOT": str(root / "node" / "pve"),  # pct on the local node, too
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield root
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def pve(world: Path) -> FakeNode:
    """The Proxmox node stand-in's tools and config dir, with no CT yet (see ``node``)."""
    return FakeNode(world / "node").install()


@pytest.fixture(scope="session")
def lxc_ct() -> Iterator[runtimes.LxcContainer]:
    """A real running busybox LXC container (venv bound, private /tmp, writable /workspace)."""
    need("lxc")
    ct = runtimes.LxcContainer()
    try:
        yield ct.start()
    finally:
        ct.stop()


@pytest.fixture(scope="session")
def lxc_stopped() -> Iterator[runtimes.LxcContainer]:
    """The stopped twin of ``lxc_ct``: created, configured, never started."""
    need("lxc")
    ct = runtimes.LxcContainer(running=False)
    try:
        yield ct.start()
    finally:
        ct.stop()


@pytest.fixture(scope="session")
def node(
    pve: FakeNode, lxc_ct: runtimes.LxcContainer, lxc_stopped: runtimes.LxcContainer
) -> FakeNode:
    """The node with CT 200 (the running LXC container) and CT 201 (the stopped one)."""
    pve.running, pve.stopped = lxc_ct, lxc_stopped
    pve.add(CT)
    pve.add(STOPPED, state="stopped")
    return pve


@pytest.fixture(scope="session")
def nested(node: FakeNode, world: Path) -> Iterator[runtimes.PodmanWorld]:
    """Podman inside CT 210 (``NESTED_CT``), a real LXC container made for nesting, as on a
    Proxmox node (Docker or Podman in a CT): a running container (``.running``) and a
    stopped one, both with user ``rk`` whom root may ``sudo -u``. Stopped with the CT."""
    need("lxc")
    need("podman")
    ct = runtimes.LxcContainer(nesting=True)
    try:
        ct.start()
        node.add(NESTED_CT, ct=ct)
        yield runtimes.PodmanWorld(world / "nested", via=runtimes.lxc_attach(ct), user="rk").start()
    finally:
        ct.stop()


@pytest.fixture(scope="session")
def podman_ctr(world: Path) -> Iterator[runtimes.PodmanWorld]:
    """A real podman container (``.running``, under --init) and a stopped one (``.stopped``)."""
    need("podman")
    pods = runtimes.PodmanWorld(world / "podman")
    try:
        yield pods.start()
    finally:
        pods.stop()


@pytest.fixture(scope="session")
def slurm_cluster(world: Path) -> Iterator[runtimes.SlurmCluster]:
    """A one-node Slurm cluster with a RUNNING job (``.running``) and pending/finished/unknown
    job ids (``.pending``, ``.finished``, ``.unknown``)."""
    need("slurm")
    cluster = runtimes.SlurmCluster(world / "slurm")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kube(world: Path) -> runtimes.FakeKube:
    """The fake kubectl (``.bin``) with pods in namespace ``ml``: see runtimes.FakeKube."""
    return runtimes.FakeKube(world / "kube").install()


def _serve(root: Path, pve: FakeNode) -> Iterator[SSHServer]:
    _need_sshd()
    env = {**pve.env, "SLURM_CONF": os.environ["SLURM_CONF"]}
    env["CONTAINERS_CONF"] = os.environ["CONTAINERS_CONF"]
    server = SSHServer(root, env=env)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd(
    tmp_path_factory: pytest.TempPathFactory, pve: FakeNode, world: Path
) -> Iterator[SSHServer]:
    yield from _serve(tmp_path_factory.mktemp("sshd"), pve)


@pytest.fixture
def own_sshd(tmp_path: Path, pve: FakeNode, world: Path) -> Iterator[SSHServer]:
    """An sshd like ``sshd`` for one test alone: its connections are that test's own (one it
    may drop with :meth:`~tests.harness.SSHServer.drop_connections`)."""
    yield from _serve(tmp_path / "own-sshd", pve)


def write_inventory(
    path: Path, hosts: dict[str, object], *, agent: bool | None = None, **top: object
) -> remotekit.Inventory:
    """A hosts.yaml at ``path``, loaded. ``agent`` (the fixture's value): every host's
    ``agent:`` when not None (a host that says its own keeps it)."""
    if agent is not None:
        defaults = top.get("defaults") or {}
        assert isinstance(defaults, dict), defaults
        top["defaults"] = {**defaults, "agent": agent}
    path.write_text(yaml.safe_dump({"hosts": hosts, **top}, sort_keys=False))
    return remotekit.load_inventory(path)


@pytest.fixture(scope="session")
def inventory(
    tmp_path_factory: pytest.TempPathFactory, sshd: SSHServer, node: FakeNode
) -> remotekit.Inventory:
    venv = venv_prefix()
    pct = str(node.pct)
    hosts = {
        "node": sshd.host_yaml(),
        "ct": sshd.host_yaml(container=CT, pct=pct, venv=venv),
        "stopped": sshd.host_yaml(container=STOPPED, pct=pct, venv=venv),
        "noct": sshd.host_yaml(container=999, pct=pct, venv=venv),
        "novenv": sshd.host_yaml(container=CT, pct=pct, venv="/opt/no-such-venv"),
        "sudo": sshd.host_yaml(sudo=True, container=CT, pct=pct, venv=venv),
    }
    return write_inventory(tmp_path_factory.mktemp("inv") / "hosts.yaml", hosts)


@pytest.fixture
def agent() -> bool | None:
    """How ``local``, ``target`` (and a module's own targets that take it) run their steps:
    None as hosts.yaml says (the resident agent: the default), False one process per step.
    A module that re-runs the engine's tests on one path overrides it (test_per_step*.py)."""
    return None


def held_per_agent(
    inv: remotekit.Inventory, name: str
) -> Iterator[Callable[[bool | None], remotekit.Target]]:
    """For a fixture to yield from: ``get(agent)``, ``inv``'s target ``name`` opened once per
    ``agent`` value and held, all closed at the fixture's end."""
    held: dict[bool | None, remotekit.Target] = {}

    def get(agent: bool | None) -> remotekit.Target:
        if agent not in held:
            held[agent] = inv.target(name, agent=agent)
        return held[agent]

    try:
        yield get
    finally:
        for t in held.values():
            t.close()


@pytest.fixture(scope="session")
def cts(inventory: remotekit.Inventory) -> Iterator[Callable[[bool | None], remotekit.Target]]:
    """ssh -> fake pct exec 200 -> venv, one held connection per ``agent`` for the session."""
    yield from held_per_agent(inventory, "ct")


@pytest.fixture
def ct(cts: Callable[[bool | None], remotekit.Target], agent: bool | None) -> remotekit.Target:
    """ssh -> fake pct exec 200 -> venv, one held connection for the whole session."""
    return cts(agent)


def open_local(agent: bool | None, **overrides: Any) -> remotekit.Target:
    """The local target (``overrides`` of its spec, as ``local_target`` takes them), its steps
    on the agent or not (None: the default)."""
    if agent is not None:
        overrides["agent"] = agent
    return remotekit.local_target(**overrides)


def held_with_python(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    agent: bool | None,
    wrapper: Callable[[str], str],
) -> Iterator[Callable[[str], remotekit.Target]]:
    """For a fixture parametrized ``local``/``ssh`` to yield from: ``open_target(name)``, a
    target here or through the real sshd (ssh -> the node's Python) whose ``python`` is the
    shell script ``wrapper(name)`` (a stand-in far side), its steps on the agent or not
    (``agent``); every target opened is closed at the fixture's end."""
    opened: list[remotekit.Target] = []

    def open_target(name: str) -> remotekit.Target:
        python = tmp_path / f"python-{name}"
        python.write_text(wrapper(name))
        python.chmod(0o755)
        if request.param == "local":
            t = open_local(agent, python=str(python))
        else:
            host = request.getfixturevalue("sshd").host_yaml(python=str(python))
            inv = write_inventory(tmp_path / f"{name}.yaml", {"far": host}, agent=agent)
            t = inv.target("far")
        opened.append(t)
        return t

    try:
        yield open_target
    finally:
        for t in opened:
            t.close()


@pytest.fixture
def local(agent: bool | None) -> Iterator[remotekit.Target]:
    with open_local(agent) as t:
        yield t


@pytest.fixture(params=["local", "ssh"])
def target(request: pytest.FixtureRequest, agent: bool | None) -> Iterator[remotekit.Target]:
    """The same test on this machine and through ssh -> fake pct exec 200 -> venv (``ct``).
    A module that needs other targets declares its own ``target``."""
    if request.param == "local":
        with open_local(agent) as t:
            yield t
    else:
        yield request.getfixturevalue("cts")(agent)


def _xdg_home(var: str, home: Path, *below: str) -> Iterator[Path]:
    """``$var`` set to ``home`` for the session (then as it was); yields ``home/below``."""
    old = os.environ.get(var)
    os.environ[var] = str(home)
    try:
        yield home.joinpath(*below)
    finally:
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


@pytest.fixture(scope="session", autouse=True)
def code_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Agents started on ``local`` keep their compiled code here, not in ~/.cache."""
    yield from _xdg_home("XDG_CACHE_HOME", tmp_path_factory.mktemp("cache"), "remotekit", "code")


@pytest.fixture(scope="session", autouse=True)
def run_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Runs started on ``local`` (``detach=True``) are recorded here, not in ~/.local/state."""
    yield from _xdg_home("XDG_STATE_HOME", tmp_path_factory.mktemp("state"), "remotekit", "runs")


@pytest.fixture
def small_runs(tmp_path: Path) -> Iterator[Path]:
    """A disk of 256 KiB of its own (a real tmpfs), for a runs dir that fills; skipped where
    mounting is not permitted (not root), failed under CI."""
    disk = small_disk(tmp_path / "disk")
    try:
        path = disk.__enter__()
    except NoMount as exc:
        if CI:
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))
    try:
        yield path
    finally:
        disk.__exit__(None, None, None)
