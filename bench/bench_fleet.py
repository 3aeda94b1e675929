"""Fleet wall time: 32 targets, remotekit against Fabric, in one run.

    .venv/bin/python bench/bench_fleet.py [--targets 32] [--reps 3] [--out bench/results/fleet.json]

Starts the test harness's real sshd on 127.0.0.1 and points ``--targets`` inventory entries at
it (plain SSH targets: one connection each, as for 32 machines). Two measurements, each case
repeated ``--reps`` times (median reported):

A 1 s step on every host:

- ``remotekit_connect``: fresh targets each time, ``remotekit.fleet(targets).run(["sleep", "1"])``
  with the default parallelism and one process per step (``agent=False``): connecting is part
  of the time, as for ``remotekit run --all --no-agent``. **Target: <= 2.5 s** (serially it
  would be 32 s).
- ``one_agent``: the same with the agent (the default): connecting and the agent's start
  there are part of the time. **Target (issue 34): one_agent / fabric_connect <= 0.9x**.
- ``remotekit_warm``: the same fleet again with its connections held.
- ``fabric_connect`` / ``fabric_warm``: the peer baseline, Fabric's
  ``ThreadingGroup(...).run("sleep 1")`` (one thread per host, no cap), fresh and held.

Three steps on every host, connecting included (fresh targets and a fresh group each time):
a command (``hostname``), a Python file shipped with ``run_python``, and a diagnostic
(``remotekit.diagnostics.system.disk_usage`` of a small folder: space, inodes, largest files):

- ``three_per_step`` (``agent=False``) and ``three_agent`` (``agent=True``):
  ``fleet.map`` of the three steps, each host in turn through its own three.
- ``three_fabric``: what a person types with ``ThreadingGroup.run``: ``hostname``, the same
  file's code as ``python -c CODE`` (one round trip, no upload: the quickest way a person
  has), and ``df -P DIR; df -Pi DIR; find DIR -xdev -type f -printf '%s %p\\n' | sort -rn |
  head -n 10``. **Target (issue 34): three_agent / three_fabric <= 0.9x** (it was 1.0x).
- ``*_1host``: the same three cases on one host (5x the reps). All 32 "hosts" here share
  this machine's cores, so the far side's CPU per host adds up, as it would not on 32
  machines; one host shows the per-host cost alone.
- ``three_agent_pct`` / ``three_fabric_pct``: the same three steps on ``--targets`` targets
  through the chain remotekit is for: ssh -> the ``pct`` stand-in (tests/fakes/pct) -> one
  real LXC container -> its venv; Fabric types ``pct exec 200 -- ...`` for each command
  (busybox there: ``ls -l`` for the sizes). The stand-in costs ~10 ms of CPU a call; Proxmox's
  own pct is a Perl program that loads the PVE modules on every call, so on a real node this
  ratio is lower still. ``one_agent_pct`` / ``one_fabric_pct``: the 1 s step through the same
  chain (Fabric: ``pct exec 200 -- sleep 1``). **Target (issue 34): <= 0.9x, each**. Needs root
  and LXC (``--no-container`` skips it).

The targets' Python is this development venv's unless ``--clean-venv``: then a fresh venv
of the same interpreter with nothing installed, as a target's venv is (it has no editable
install of remotekit, whose finder here imports pathlib and re at every Python's start, ~12 ms
of CPU each: what the agent pays on every host, and Fabric's ``python -c`` once a host); both
remotekit and Fabric use it.

Every case takes turns with the others (one run of each, ``--reps`` times), so load on this
machine hits all alike; each run records the 1-minute load average as it started (the
median per case is printed and written), as the figures move with it.

Ratios are remotekit / Fabric for the same case (below 1: remotekit is faster). Results go to
stdout and, as JSON, to ``--out``. Exit status: 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import venv
from importlib import metadata
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from fabric import ThreadingGroup  # noqa: E402
from fabric.exceptions import GroupException  # noqa: E402

import remotekit  # noqa: E402
from remotekit.diagnostics import system  # noqa: E402
from remotekit.fleet import DEFAULT_PARALLEL  # noqa: E402
from tests.harness import FakeNode, SSHServer, venv_prefix  # noqa: E402
from tests.runtimes import LxcContainer  # noqa: E402

TARGET_S = 2.5
TARGET_CASE = "remotekit_connect"
STEP = ["sleep", "1"]
THREE_TARGET = 0.9
#: Issue 34: 32 x ``sleep 1`` with the agent, connect and its start included, against Fabric.
ONE_TARGET = 0.9
#: The Python file of the three steps: small, as a check a person ships is.
CHECK_PY = "import os, sys\nprint(sys.version_info[0], os.getpid(), sum(range(1000)))\n"


#: One timed run: seconds, hosts that failed, the 1-minute load average as it started.
Run = tuple[float, int, float]


def timed(fn: Callable[[], int]) -> Run:
    """(seconds, hosts that failed, load average) for one call of ``fn``, which returns the
    failures."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    failed = fn()
    return time.perf_counter() - t0, failed, load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fleet.json")
    ap.add_argument(
        "--no-container",
        action="store_true",
        help="skip the three steps through ssh -> pct -> LXC (needs root and LXC)",
    )
    ap.add_argument(
        "--clean-venv",
        action="store_true",
        help="the targets' Python: a fresh venv with nothing installed (see above)",
    )
    opts = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        sshd = SSHServer(Path(tmp) / "sshd").start()
        python = clean_venv(Path(tmp) / "venv") if opts.clean_venv else sys.executable
        try:
            fleet_ = Hosts(sshd, Path(tmp), opts.targets, python=python)
            runs = {**measure(fleet_, opts.reps), **measure_three(fleet_, opts.reps)}
            # one host: the far side has these cores to itself, as each of 32 machines would
            one = Hosts(sshd, Path(tmp) / "one", 1, python=python)
            three = measure_three(one, opts.reps * 5)
            runs.update({f"{case}_1host": r for case, r in three.items()})
        finally:
            sshd.stop()
        if not opts.no_container:
            ct_runs = container_runs(Path(tmp) / "ct", opts.targets, opts.reps, opts.clean_venv)
            runs.update(ct_runs)
    medians = {case: statistics.median(t for t, _, _ in r) for case, r in runs.items()}
    failures = {case: sum(f for _, f, _ in r) for case, r in runs.items()}
    loads = {case: statistics.median(ld for _, _, ld in r) for case, r in runs.items()}
    ratio = {
        "connect": medians["remotekit_connect"] / medians["fabric_connect"],
        "one_agent": medians["one_agent"] / medians["fabric_connect"],
        "warm": medians["remotekit_warm"] / medians["fabric_warm"],
        "three_per_step": medians["three_per_step"] / medians["three_fabric"],
        "three_agent": medians["three_agent"] / medians["three_fabric"],
        "three_agent_1host": medians["three_agent_1host"] / medians["three_fabric_1host"],
    }
    if "three_agent_pct" in medians:
        ratio["three_agent_pct"] = medians["three_agent_pct"] / medians["three_fabric_pct"]
        ratio["one_agent_pct"] = medians["one_agent_pct"] / medians["one_fabric_pct"]
    ok = medians[TARGET_CASE] <= TARGET_S and failures[TARGET_CASE] == 0
    three_ok = ratio["three_agent"] <= THREE_TARGET and not any(
        failures[c] for c in ("three_agent", "three_fabric")
    )
    # issue 34: each chain, 1 step and 3, at most ONE_TARGET / THREE_TARGET, no host failing
    baseline = {
        "one_agent": "fabric_connect",
        "three_agent": "three_fabric",
        "one_agent_pct": "one_fabric_pct",
        "three_agent_pct": "three_fabric_pct",
    }
    issue34 = {
        case: ratio[case] <= (ONE_TARGET if case.startswith("one") else THREE_TARGET)
        and not failures[case]
        and not failures[base]
        for case, base in baseline.items()
        if case in ratio
    }
    report = {
        "benchmark": "fleet",
        "targets": opts.targets,
        "step": " ".join(STEP),
        "reps": opts.reps,
        "target_python": "a fresh venv" if opts.clean_venv else "this development venv",
        "parallel": DEFAULT_PARALLEL,
        "target": {"case": TARGET_CASE, "max_s": TARGET_S, "pass": ok},
        "three_steps_target": {
            "ratio": "three_agent / three_fabric",
            "max": THREE_TARGET,
            "pass": three_ok,
        },
        "issue34_targets": {
            "max": {"one step": ONE_TARGET, "three steps": THREE_TARGET},
            "baseline": baseline,
            "pass": issue34,
        },
        "median_s": {k: round(v, 3) for k, v in medians.items()},
        "runs_s": {k: [round(t, 3) for t, _, _ in r] for k, r in runs.items()},
        "load_average_1m": {k: round(v, 2) for k, v in loads.items()},
        "failed_hosts": failures,
        "ratio_remotekit_over_fabric": {k: round(v, 3) for k, v in ratio.items()},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "fabric": metadata.version("fabric"),
            "paramiko": metadata.version("paramiko"),
            "sshd": "OpenSSH on 127.0.0.1 (tests/harness.py)",
        },
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{opts.targets} targets, median of {opts.reps} runs (load: the 1-minute average)")
    print(f"{'case':<20} {'median':>8}  {'load':>5}  runs")
    for case in runs:
        each = ", ".join(f"{t:.2f}" for t, _, _ in runs[case])
        bad = f"  ({failures[case]} host failures)" if failures[case] else ""
        print(f"{case:<20} {medians[case]:>7.2f}s  {loads[case]:>5.1f}  [{each}]{bad}")
    print(
        f"`{' '.join(STEP)}`, remotekit/fabric: {ratio['one_agent']:.2f} with the agent, "
        f"{ratio['connect']:.2f} per step (with connect), {ratio['warm']:.2f} (warm, per step)"
    )
    print(
        f"three steps, remotekit/fabric: {ratio['three_agent']:.2f} with the agent, "
        f"{ratio['three_per_step']:.2f} per step; one host: {ratio['three_agent_1host']:.2f} "
        f"with the agent"
    )
    if "three_agent_pct" in ratio:
        print(
            f"three steps through ssh -> pct -> LXC -> venv, remotekit/fabric: "
            f"{ratio['three_agent_pct']:.2f} with the agent (the stand-in pct costs ~10 ms a "
            f"call; Proxmox's, a Perl program, costs far more, and Fabric pays it 3x a host); "
            f"`{' '.join(STEP)}` through it: {ratio['one_agent_pct']:.2f}"
        )
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: {TARGET_CASE} median {medians[TARGET_CASE]:.2f} s (target <= {TARGET_S} s)")
    verdict = "PASS" if three_ok else "FAIL"
    print(
        f"{verdict}: three steps incl. connect, agent / Fabric {ratio['three_agent']:.2f}x "
        f"(target <= {THREE_TARGET}x)"
    )
    for case, met in issue34.items():
        most = ONE_TARGET if case.startswith("one") else THREE_TARGET
        print(f"{'PASS' if met else 'FAIL'}: issue 34, {case} {ratio[case]:.2f}x (<= {most}x)")
    print(f"written: {opts.out}")
    return 0 if ok and three_ok and all(issue34.values()) else 1


def clean_venv(path: Path) -> str:
    """A fresh venv of this interpreter at ``path``, nothing installed: its Python."""
    venv.EnvBuilder(symlinks=True).create(path)
    return str(path / "bin" / "python")


def container_runs(work: Path, n: int, reps: int, clean: bool = False) -> dict[str, list[Run]]:
    """The 1 s step and the three steps on ``n`` targets through ssh -> the pct stand-in ->
    one real LXC container (CT 200) -> the venv there (``clean``: a fresh one in its
    /workspace): the chain remotekit is for. {} where LXC cannot run here (not root, no
    lxc-create), with a note."""
    if os.geteuid() != 0 or shutil.which("lxc-create") is None:
        print("note: no LXC here (needs root and lxc-create): the container chain is skipped")
        return {}
    ct = LxcContainer()
    node = FakeNode(work / "node", running=ct).install()
    server = SSHServer(work / "sshd", env=node.env)
    try:
        ct.start()
        node.add(200)
        server.start()
        assert ct.workspace is not None
        there = None
        if clean:  # made here in its /workspace, run there from /workspace/venv
            clean_venv(ct.workspace / "venv")
            there = "/workspace/venv"
        hosts = Hosts(
            server, work / "hosts", n, pct=str(node.pct), workspace=ct.workspace, venv=there
        )
        three = measure_three(hosts, reps, per_step=False)
        one = measure_one(hosts, reps)
        return {f"{case}_pct": r for case, r in {**one, **three}.items()}
    finally:
        server.stop()
        ct.stop()


class Hosts:
    """``n`` inventory entries (and Fabric addresses) all pointing at ``sshd``: plain SSH
    targets run by ``python``, or with ``pct`` (the node's ``pct`` stand-in) each through
    ``pct exec 200`` into a real LXC container (``workspace``: its /workspace, here) and the
    venv there (``venv``: its path there; by default this one's, which the container binds)."""

    def __init__(
        self,
        sshd: SSHServer,
        tmp: Path,
        n: int,
        pct: str | None = None,
        workspace: Path | None = None,
        python: str = sys.executable,
        venv: str | None = None,
    ):
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.names = [f"t{i:02d}" for i in range(n)]
        if pct is None:
            entry = sshd.host_yaml(python=python)
            self.prefix: list[str] = []  # what a person types before each command
            self.python = python
        else:
            venv = venv or venv_prefix()
            entry = sshd.host_yaml(container=200, pct=pct, venv=venv)
            self.prefix = [pct, "exec", "200", "--"]
            self.python = f"{venv}/bin/python"
        hosts = {name: entry for name in self.names}
        path = tmp / "hosts.yaml"
        path.write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))
        self.specs = remotekit.load_inventory(path).select(hosts=self.names)
        self.address = [f"{sshd.user}@127.0.0.1:{sshd.port}"] * n  # n connections, n hosts
        self.kwargs = {
            "connect_kwargs": {
                "key_filename": [str(sshd.client_key)],
                "allow_agent": False,
                "look_for_keys": False,
            },
        }
        # the diagnostic's folder: here, and its path there
        self.disk_here = (workspace if workspace is not None else tmp) / "disk"
        self.disk_there = "/workspace/disk" if workspace is not None else str(self.disk_here)

    def commands(self) -> list[str]:
        """The three steps as a person types them for Fabric (through ``pct exec`` there)."""
        py, d = shlex.quote(self.python), shlex.quote(self.disk_there)
        if not self.prefix:
            return [
                "hostname",
                f"{py} -c {shlex.quote(CHECK_PY)}",
                f"df -P {d}; df -Pi {d}; "
                f"find {d} -xdev -type f -printf '%s %p\\n' | sort -rn | head -n 10",
            ]
        pct = " ".join(map(shlex.quote, self.prefix))
        # busybox's find there has no -printf: ls -l gives the sizes
        disk = (
            f"df -P {d}; df -Pi {d}; "
            f"find {d} -xdev -type f -exec ls -l {{}} + | sort -k5 -rn | head -n 10"
        )
        return [
            f"{pct} hostname",
            f"{pct} {py} -c {shlex.quote(CHECK_PY)}",
            f"{pct} sh -c {shlex.quote(disk)}",
        ]

    def fleet(self, *, agent: bool | None = None) -> remotekit.Fleet:
        return remotekit.fleet(remotekit.Target(s, agent=agent) for s in self.specs)

    def group(self) -> ThreadingGroup:
        # Fabric sets AutoAddPolicy itself: unknown host keys are accepted silently.
        return ThreadingGroup(*self.address, **self.kwargs)


def fabric_run(g: ThreadingGroup, command: str) -> int:
    """``command`` on every host of ``g``; the hosts that failed."""
    try:
        results = g.run(command, hide=True, warn=True, in_stream=False)
    except GroupException as exc:
        results = exc.result
    return len(results.failed) + sum(not r.ok for r in results.succeeded.values())


def measure(hosts: Hosts, reps: int) -> dict[str, list[Run]]:
    """The 1 s step: remotekit (with the agent, and one process per step) and Fabric,
    connect included, taking turns; then warm (per step)."""

    def remotekit_run(f: remotekit.Fleet) -> int:
        return sum(not o.ok for o in f.run(STEP))

    def remotekit_connect() -> int:
        with hosts.fleet(agent=False) as f:  # fresh targets: connecting is timed
            return remotekit_run(f)

    def fabric_connect() -> int:
        g = hosts.group()
        try:
            return fabric_run(g, " ".join(STEP))
        finally:
            g.close()

    runs: dict[str, list[Run]] = {
        k: []
        for k in (
            "one_agent",
            "remotekit_connect",
            "fabric_connect",
            "remotekit_warm",
            "fabric_warm",
        )
    }
    turns = {
        "one_agent": one_agent(hosts),
        "remotekit_connect": remotekit_connect,
        "fabric_connect": fabric_connect,
    }
    for _ in range(reps):  # interleaved, so that load on this machine hits all alike
        for case, fn in turns.items():
            runs[case].append(timed(fn))

    held = hosts.fleet(agent=False)
    group = hosts.group()
    try:
        held.map(lambda t: t.connect())
        group.run("true", hide=True, in_stream=False)
        for _ in range(reps):
            runs["remotekit_warm"].append(timed(lambda: remotekit_run(held)))
            runs["fabric_warm"].append(timed(lambda: fabric_run(group, " ".join(STEP))))
    finally:
        held.close()
        group.close()
    return runs


def one_agent(hosts: Hosts) -> Callable[[], int]:
    """The 1 s step on fresh targets with the agent: connect and its start timed."""

    def run() -> int:
        with hosts.fleet() as f:
            return sum(not o.ok for o in f.run(STEP))

    return run


def measure_one(hosts: Hosts, reps: int) -> dict[str, list[Run]]:
    """The 1 s step with the agent against Fabric typing it (through ``pct exec`` there),
    taking turns, connect included."""
    command = " ".join(map(shlex.quote, [*hosts.prefix, *STEP]))

    def fabric_one() -> int:
        g = hosts.group()
        try:
            return fabric_run(g, command)
        finally:
            g.close()

    cases = {"one_agent": one_agent(hosts), "one_fabric": fabric_one}
    runs: dict[str, list[Run]] = {k: [] for k in cases}
    for _ in range(reps):  # interleaved, so that load on this machine hits both alike
        for case, fn in cases.items():
            runs[case].append(timed(fn))
    return runs


def measure_three(hosts: Hosts, reps: int, per_step: bool = True) -> dict[str, list[Run]]:
    """Three steps a host (a command, a Python file, a diagnostic), connect included."""
    check = hosts.tmp / "check.py"
    check.write_text(CHECK_PY)
    hosts.disk_here.mkdir(exist_ok=True)  # what the diagnostic looks at: a few files
    for i in range(20):
        (hosts.disk_here / f"f{i}.bin").write_bytes(b"x" * 1024 * (i + 1))

    def three(t: remotekit.Target) -> bool:
        ok = t.run(["hostname"], check=False).ok
        ok &= t.run_python(str(check), check=False).ok
        return ok and system.disk_usage(t, [hosts.disk_there]).exit_code < 2  # 2: could not run

    def remotekit_three(agent: bool) -> Callable[[], int]:
        def run() -> int:
            with hosts.fleet(agent=agent) as f:
                return sum(not (o.ok and o.value) for o in f.map(three))

        return run

    commands = hosts.commands()

    def fabric_three() -> int:
        g = hosts.group()
        try:
            return max(fabric_run(g, c) for c in commands)
        finally:
            g.close()

    cases = {
        "three_per_step": remotekit_three(agent=False),
        "three_agent": remotekit_three(agent=True),
        "three_fabric": fabric_three,
    }
    if not per_step:
        del cases["three_per_step"]
    runs: dict[str, list[Run]] = {k: [] for k in cases}
    for _ in range(reps):  # interleaved, so that load on this machine hits all alike
        for case, fn in cases.items():
            runs[case].append(timed(fn))
    return runs


if __name__ == "__main__":
    sys.exit(main())
