"""Layers benchmark: a remotekit step on each real runtime vs the same hop typed by hand.

For each runtime this machine can run (a real LXC container, a real Podman container, a
one-node Slurm cluster: tests/runtimes.py), through local -> sshd (127.0.0.1) -> hop -> venv
Python, median of N runs each:

  per step   a trivial run_python on a warm target, ``agent=False`` (one held SSH
             connection; a new channel, hop and interpreter per step)
  agent      the same with ``agent=True`` (each step a message to one resident agent there)
  by hand    `ssh -S ctl host '<hop> <venv>/bin/python -c pass'` over an OpenSSH
             ControlMaster, the hop being the one a person types:
               lxc     lxc-attach -n NAME --clear-env -- PY -c pass
               podman  podman exec -i NAME PY -c pass
               slurm   srun --jobid=J --overlap --export=NONE -- PY -c pass
  targets    per step / by hand <= 1.5x, agent / by hand <= 0.5x, on each runtime
             (the three take turns, run after run: bench_engine.interleaved_medians)

Whether the agent really served the agent target's steps is checked, not assumed (two steps
report the same parent there); where it did not, the agent figure is the per-step path and
the output says so.

Run: .venv/bin/python bench/bench_layers.py [--runs 20] [--only lxc,podman,slurm]
(as root, with the runtimes installed: see .ci/run; writes bench/results/layers.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_engine import controlmaster, interleaved_medians, print_checks  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import SSHServer, venv_prefix  # noqa: E402

TARGET = 1.5
AGENT_TARGET = 0.5
#: Prints the pid of the runner's parent there: the agent's pid when the agent serves the step.
PARENT = "import os; print(open('/proc/%d/stat' % os.getppid()).read().rsplit(')')[1].split()[1])"


def _tool(name: str) -> str:
    return shutil.which(name, path=f"{os.environ['PATH']}:/usr/sbin:/sbin") or name


def start(kind: str, work: Path, stack: ExitStack) -> tuple[dict[str, Any], list[str]]:
    """Start runtime ``kind``; (its hosts.yaml hop settings, the hop argv typed by hand)."""
    if kind == "lxc":
        ct = runtimes.LxcContainer()
        stack.callback(ct.stop)
        ct.start()
        attach = _tool("lxc-attach")
        return {"lxc": {"name": ct.name, "bin": attach}}, [
            attach, "-n", ct.name, "--clear-env", "--",
        ]  # fmt: skip
    if kind == "podman":
        pods = runtimes.PodmanWorld(work / "podman")
        stack.callback(pods.stop)
        pods.start()
        engine = _tool("podman")
        return {"podman": pods.running, "engine": engine}, [engine, "exec", "-i", pods.running]
    assert kind == "slurm"
    cluster = runtimes.SlurmCluster(work / "slurm")
    stack.callback(cluster.stop)
    cluster.start()
    srun = _tool("srun")
    job = cluster.running
    return {"slurm": {"job": int(job), "bin": srun}}, [
        srun, f"--jobid={job}", "--overlap", "--export=NONE", "--",
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default="lxc,podman,slurm")
    args = ap.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    skipped = {k: why for k in kinds if (why := runtimes.missing(k)) is not None}
    for k, why in skipped.items():
        print(f"skip {k}: {why}")
    kinds = [k for k in kinds if k not in skipped]
    work = Path(tempfile.mkdtemp(prefix="rk-bench-layers-"))
    # the runtimes' client settings, known before sshd starts so its sessions get them too
    env = {
        "SLURM_CONF": str(work / "slurm" / "slurm.conf"),
        "CONTAINERS_CONF": str(work / "podman" / "containers.conf"),
    }
    os.environ.update(env)
    py = f"{venv_prefix()}/bin/python"
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        server = SSHServer(work / "sshd", env=env)
        stack.callback(server.stop)
        server.start()
        _, ssh = stack.enter_context(controlmaster(server, work / "ctl"))
        hosts = {}
        by_hand: dict[str, list[str]] = {}
        for kind in kinds:
            hop, argv = start(kind, work, stack)
            hosts[kind] = server.host_yaml(**hop, venv=venv_prefix())
            by_hand[kind] = argv
        inv_file = work / "hosts.yaml"
        inv_file.write_text(json.dumps({"hosts": hosts}))
        inv = remotekit.load_inventory(inv_file)
        trivial = remotekit.Script(b"pass\n", name="trivial.py")
        for kind in kinds:
            hand = [*ssh, join([*by_hand[kind], py, "-c", "pass"])]
            rows.append(measure(inv, kind, hand, trivial, args.runs, stack))
    report(rows)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "layers.json").write_text(
        json.dumps({"runs": args.runs, "rows": rows, "skipped": skipped}, indent=2)
    )
    return 0 if all(r["pass"] and r["agent_pass"] for r in rows) else 1  # all skipped: 0


def agent_served(t: remotekit.Target) -> bool:
    """Whether two steps of ``t`` ran under one parent there (the resident agent)."""
    return t.run(["python", "-c", PARENT]).stdout == t.run(["python", "-c", PARENT]).stdout


def measure(
    inv: remotekit.Inventory,
    kind: str,
    hand: list[str],
    trivial: remotekit.Script,
    runs: int,
    stack: ExitStack,
) -> dict[str, Any]:
    """One runtime's row: the per-step path, the agent and the hop typed by hand."""
    t = stack.enter_context(inv.target(kind, agent=False))
    ta = stack.enter_context(inv.target(kind, agent=True))
    t.run_python(trivial)  # warm: connection held
    ta.run_python(trivial)  # warm: the agent runs
    served = agent_served(ta)
    medians = interleaved_medians(
        {
            "step": lambda: t.run_python(trivial),
            "agent": lambda: ta.run_python(trivial),
            "hand": lambda: subprocess.run(hand, check=True),
        },
        runs,
    )
    step, agent, theirs = medians["step"], medians["agent"], medians["hand"]
    return {
        "runtime": kind,
        "chain": t.chain,
        "remotekit_s": step,
        "agent_s": agent,
        "agent_served": served,
        "by_hand_s": theirs,
        "ratio": step / theirs,
        "agent_ratio": agent / theirs,
        "pass": step / theirs <= TARGET,
        "agent_pass": served and agent / theirs <= AGENT_TARGET,
    }


def report(rows: list[dict[str, Any]]) -> None:
    figures: dict[str, float] = {}
    checks = []
    for r in rows:
        k = r["runtime"]
        figures[f"{k}_per_step_ms"] = r["remotekit_s"] * 1000
        figures[f"{k}_agent_ms"] = r["agent_s"] * 1000
        figures[f"{k}_by_hand_ms"] = r["by_hand_s"] * 1000
        checks.append(
            (f"{k}: per step / by hand", f"{r['ratio']:.2f}x", f"<= {TARGET}x", r["pass"])
        )
        got = f"{r['agent_ratio']:.2f}x" if r["agent_served"] else "no agent"
        checks.append((f"{k}: agent / by hand", got, f"<= {AGENT_TARGET}x", r["agent_pass"]))
    print()
    print_checks(figures, checks)
    for r in rows:
        if not r["agent_served"]:
            print(
                f"note: {r['runtime']}: the agent did not serve the steps ({r['chain']}): "
                f"a hop on this chain does not carry it (Hop.agent), so its 'agent' figure "
                f"is the per-step path"
            )


if __name__ == "__main__":
    sys.exit(main())
