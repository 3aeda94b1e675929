"""Chains benchmark: what each added hop costs a warm step, as a ratio to the one-hop chain.

Two families of chains on real runtimes (tests/runtimes.py), each reached through sshd on
127.0.0.1, every row of a family measured in the same run, taking turns run after run
(bench_engine.interleaved_medians), median of N:

  pct     ssh -> pct exec 210                      (the pct stand-in over a real LXC container
          ssh -> pct exec 210 -> podman exec NAME   made for nesting; Podman inside it)
          ssh -> pct exec 210 -> podman exec NAME -> sudo -u rk   (the host's real sudo)
  slurm   ssh -> srun --jobid J                    (a one-node Slurm cluster)
          ssh -> srun --jobid J -> podman exec NAME (a Podman container on the job's node)

For each chain, a trivial ``run_python`` on a warm target:

  agent     each step a message to the resident agent, started once through the whole chain
  per step  ``agent=False``: a new channel, every hop and the interpreter, per step

and each chain's figure as a ratio to its family's one-hop chain, and per added hop:
(t_n - t_1) / (n - 1) / t_1. Target: on the agent, an added hop costs a warm step at most
0.75x of the one-hop chain's whole step (the hops are entered once, when the agent starts;
after that a hop only passes the step's bytes on: lxc-attach, sudo and srun hand over their
file descriptors or relay in-kernel, Podman relays them through conmon, a few ms measured
here). The per-step figures are reported with no target: there each hop's own start
(``podman exec`` ~0.1 s) is paid by every step, which is what the agent is for.

Run: .venv/bin/python bench/bench_chains.py [--runs 20] [--only pct,slurm]
(as root, with the runtimes installed: see .ci/run; writes bench/results/chains.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_engine import interleaved_medians, print_checks  # noqa: E402
from bench.bench_layers import agent_served  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import FakeNode, SSHServer, venv_prefix  # noqa: E402

#: An added hop's cost to a warm agent step, at most, as a share of the one-hop chain's step.
TARGET = 0.75
VMID = 210
NEEDS = {"pct": ("lxc", "podman"), "slurm": ("slurm", "podman")}


def _tool(name: str) -> str:
    return shutil.which(name, path=f"{os.environ['PATH']}:/usr/sbin:/sbin") or name


def pct_family(work: Path, node: FakeNode, stack: ExitStack) -> list[list[dict[str, Any]]]:
    """The pct chains, one hop more each: their ``hops:`` lists."""
    ct = runtimes.LxcContainer(nesting=True)
    stack.callback(ct.stop)
    ct.start()
    node.add(VMID, ct=ct)
    pods = runtimes.PodmanWorld(work / "nested", via=runtimes.lxc_attach(ct), user="rk").start()
    pct = {"container": VMID, "pct": str(node.pct)}
    family = [[pct], [pct, {"podman": pods.running}]]
    if shutil.which("sudo"):  # the real one, under the /usr the containers bind
        family.append([pct, {"podman": pods.running}, {"sudo": "rk"}])
    return family


def slurm_family(work: Path, stack: ExitStack) -> list[list[dict[str, Any]]]:
    cluster = runtimes.SlurmCluster(work / "slurm")
    stack.callback(cluster.stop)
    cluster.start()
    pods = runtimes.PodmanWorld(work / "podman")
    stack.callback(pods.stop)
    pods.start()
    job = {"slurm": {"job": int(cluster.running), "bin": _tool("srun")}}
    return [[job], [job, {"podman": pods.running, "engine": str(pods.engine)}]]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default="pct,slurm")
    args = ap.parse_args()
    families = [f for f in args.only.split(",") if f]
    skipped = {}
    for f in families:
        why = [w for k in NEEDS[f] if (w := runtimes.missing(k)) is not None]
        if why:
            skipped[f] = "; ".join(why)
            print(f"skip {f}: {skipped[f]}")
    families = [f for f in families if f not in skipped]
    work = Path(tempfile.mkdtemp(prefix="rk-bench-chains-"))
    node = FakeNode(work / "node").install()
    # the runtimes' client settings, known before sshd starts so its sessions get them too
    env = {
        **node.env,
        "SLURM_CONF": str(work / "slurm" / "slurm.conf"),
        "CONTAINERS_CONF": str(work / "podman" / "containers.conf"),
    }
    os.environ.update({k: v for k, v in env.items() if k != "PATH"})
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        server = SSHServer(work / "sshd", env=env)
        stack.callback(server.stop)
        server.start()
        chains = {
            f: pct_family(work, node, stack) if f == "pct" else slurm_family(work, stack)
            for f in families
        }
        hosts = {
            f"{f}-{depth}": server.host_yaml(hops=hops, venv=venv_prefix())
            for f, family in chains.items()
            for depth, hops in enumerate(family, 1)
        }
        inv_file = work / "hosts.yaml"
        inv_file.write_text(json.dumps({"hosts": hosts}))
        inv = remotekit.load_inventory(inv_file)
        for f, family in chains.items():
            rows += measure(inv, f, len(family), args.runs, stack)
    report(rows)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "chains.json").write_text(
        json.dumps({"runs": args.runs, "rows": rows, "skipped": skipped}, indent=2)
    )
    return 0 if all(r["pass"] for r in rows) else 1  # all skipped: 0


def measure(
    inv: remotekit.Inventory, family: str, depths: int, runs: int, stack: ExitStack
) -> list[dict[str, Any]]:
    """One family's rows: each chain's warm step (agent, per step), as ratios to depth 1."""
    trivial = remotekit.Script(b"pass\n", name="trivial.py")
    fns = {}
    targets = {}
    for d in range(1, depths + 1):
        name = f"{family}-{d}"
        t = stack.enter_context(inv.target(name, agent=False))
        ta = stack.enter_context(inv.target(name, agent=True))
        t.run_python(trivial)  # warm: connection held
        ta.run_python(trivial)  # warm: the agent runs
        targets[d] = (t, ta)
        fns[f"step-{d}"] = lambda t=t: t.run_python(trivial)
        fns[f"agent-{d}"] = lambda ta=ta: ta.run_python(trivial)
    medians = interleaved_medians(fns, runs)
    rows = []
    for d, (t, ta) in targets.items():
        agent, step = medians[f"agent-{d}"], medians[f"step-{d}"]
        ratio, step_ratio = agent / medians["agent-1"], step / medians["step-1"]
        per_hop = (ratio - 1) / (d - 1) if d > 1 else 0.0
        served = agent_served(ta)
        rows.append(
            {
                "family": family,
                "hops": d,
                "chain": t.chain,
                "agent_s": agent,
                "per_step_s": step,
                "agent_ratio": ratio,
                "agent_per_added_hop": per_hop,
                "per_step_ratio": step_ratio,
                "per_step_per_added_hop": (step_ratio - 1) / (d - 1) if d > 1 else 0.0,
                "agent_served": served,
                "pass": served and per_hop <= TARGET,
            }
        )
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    figures: dict[str, float] = {}
    checks = []
    for r in rows:
        k = f"{r['family']}_{r['hops']}_hops"
        figures[f"{k}_agent_ms"] = r["agent_s"] * 1000
        figures[f"{k}_agent_ratio"] = r["agent_ratio"]
        figures[f"{k}_per_step_ms"] = r["per_step_s"] * 1000
        figures[f"{k}_per_step_ratio"] = r["per_step_ratio"]
        if r["hops"] > 1:
            got = f"+{r['agent_per_added_hop']:.2f}x" if r["agent_served"] else "no agent"
            name = f"{r['family']}: {r['hops']} hops, agent, per added hop"
            checks.append((name, got, f"<= +{TARGET}x", r["pass"]))
    print()
    for r in rows:
        print(f"{r['family']}-{r['hops']}: {r['chain']}")
    print()
    print_checks(figures, checks)


if __name__ == "__main__":
    sys.exit(main())
