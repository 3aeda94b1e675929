"""Layers benchmark: a remotekit step on each real runtime vs the same hop typed by hand.

For each runtime this machine can run (a real LXC container, a real Podman container, a
one-node Slurm cluster: tests/runtimes.py), through local -> sshd (127.0.0.1) -> hop -> venv
Python, median of N runs each:

  remotekit   a trivial run_python on a warm target (one held SSH connection)
  by hand     `ssh -S ctl host '<hop> <venv>/bin/python -c pass'` over an OpenSSH
              ControlMaster, the hop being exactly the one remotekit's layer types:
                lxc     lxc-attach -n NAME --clear-env -- PY -c pass
                podman  podman exec -i NAME PY -c pass
                slurm   srun --jobid=J --overlap --export=NONE -- PY -c pass
  target      remotekit / by hand <= 1.5x on each

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
from bench.bench_engine import controlmaster, median_time  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import SSHServer, venv_prefix  # noqa: E402

TARGET = 1.5


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
            t = stack.enter_context(inv.target(kind))
            t.run_python(trivial)  # warm: connection held
            hand = [*ssh, join([*by_hand[kind], py, "-c", "pass"])]
            ours = median_time(lambda: t.run_python(trivial), args.runs)  # noqa: B023
            theirs = median_time(lambda: subprocess.run(hand, check=True), args.runs)  # noqa: B023
            rows.append(
                {
                    "runtime": kind,
                    "chain": t.chain,
                    "remotekit_s": ours,
                    "by_hand_s": theirs,
                    "ratio": ours / theirs,
                    "pass": ours / theirs <= TARGET,
                }
            )
    print(
        f"\n{'runtime':8s} {'remotekit run_python':>21s} {'by hand (ControlMaster)':>24s} {'ratio':>7s}"
    )
    for r in rows:
        print(
            f"{r['runtime']:8s} {r['remotekit_s'] * 1000:18.1f} ms {r['by_hand_s'] * 1000:21.1f} ms "
            f"{r['ratio']:6.2f}x  {'PASS' if r['pass'] else 'FAIL'} (target <= {TARGET}x)"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "layers.json").write_text(
        json.dumps({"runs": args.runs, "rows": rows, "skipped": skipped}, indent=2)
    )
    return 0 if all(r["pass"] for r in rows) else 1  # nothing measured (all skipped): 0


if __name__ == "__main__":
    sys.exit(main())
