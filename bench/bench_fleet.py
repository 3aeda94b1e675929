"""Fleet wall time: 32 targets each running a 1 s step, remotekit against Fabric, in one run.

    .venv/bin/python bench/bench_fleet.py [--targets 32] [--reps 3] [--out bench/results/fleet.json]

Starts the test harness's real sshd on 127.0.0.1 and points ``--targets`` inventory entries at
it (plain SSH targets: one connection each, as for 32 machines). Four cases, each repeated
``--reps`` times (median reported):

- ``remotekit_connect``: fresh targets each time, ``remotekit.fleet(targets).run(["sleep", "1"])``
  with the default parallelism: connecting is part of the time, as for ``remotekit run --all``.
  **This is the target figure: <= 2.5 s** (serially it would be 32 s).
- ``remotekit_warm``: the same fleet again with its connections held.
- ``fabric_connect`` / ``fabric_warm``: the peer baseline, Fabric's
  ``ThreadingGroup(...).run("sleep 1")`` (one thread per host, no cap), fresh and held.

Ratios are remotekit / Fabric for the same case (below 1: remotekit is faster). Results go to
stdout and, as JSON, to ``--out``. Exit status: 0 when the target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from fabric import ThreadingGroup  # noqa: E402
from fabric.exceptions import GroupException  # noqa: E402

import remotekit  # noqa: E402
from remotekit.fleet import DEFAULT_PARALLEL  # noqa: E402
from tests.harness import SSHServer  # noqa: E402

TARGET_S = 2.5
TARGET_CASE = "remotekit_connect"
STEP = ["sleep", "1"]


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    """(seconds, hosts that failed) for one call of ``fn``, which returns the failures."""
    t0 = time.perf_counter()
    failed = fn()
    return time.perf_counter() - t0, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fleet.json")
    opts = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        sshd = SSHServer(Path(tmp) / "sshd").start()
        try:
            runs = measure(sshd, Path(tmp), opts.targets, opts.reps)
        finally:
            sshd.stop()

    medians = {case: statistics.median(t for t, _ in r) for case, r in runs.items()}
    failures = {case: sum(f for _, f in r) for case, r in runs.items()}
    ratio = {
        "connect": medians["remotekit_connect"] / medians["fabric_connect"],
        "warm": medians["remotekit_warm"] / medians["fabric_warm"],
    }
    ok = medians[TARGET_CASE] <= TARGET_S and failures[TARGET_CASE] == 0
    report = {
        "benchmark": "fleet",
        "targets": opts.targets,
        "step": " ".join(STEP),
        "reps": opts.reps,
        "parallel": DEFAULT_PARALLEL,
        "target": {"case": TARGET_CASE, "max_s": TARGET_S, "pass": ok},
        "median_s": {k: round(v, 3) for k, v in medians.items()},
        "runs_s": {k: [round(t, 3) for t, _ in r] for k, r in runs.items()},
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

    print(f"{opts.targets} targets x `{' '.join(STEP)}`, median of {opts.reps} runs")
    print(f"{'case':<20} {'median':>8}  runs")
    for case in ("remotekit_connect", "fabric_connect", "remotekit_warm", "fabric_warm"):
        each = ", ".join(f"{t:.2f}" for t, _ in runs[case])
        bad = f"  ({failures[case]} host failures)" if failures[case] else ""
        print(f"{case:<20} {medians[case]:>7.2f}s  [{each}]{bad}")
    print(f"remotekit/fabric: {ratio['connect']:.2f} (with connect), {ratio['warm']:.2f} (warm)")
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: {TARGET_CASE} median {medians[TARGET_CASE]:.2f} s (target <= {TARGET_S} s)")
    print(f"written: {opts.out}")
    return 0 if ok else 1


def measure(sshd: SSHServer, tmp: Path, n: int, reps: int) -> dict[str, list[tuple[float, int]]]:
    names = [f"t{i:02d}" for i in range(n)]
    hosts = {name: sshd.host_yaml(python=sys.executable) for name in names}
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))
    specs = remotekit.load_inventory(path).select(hosts=names)

    def remotekit_run(f: remotekit.Fleet) -> int:
        return sum(not o.ok for o in f.run(STEP))

    def remotekit_connect() -> int:
        with remotekit.fleet(specs) as f:  # fresh targets: connecting is timed
            return remotekit_run(f)

    address = [f"{sshd.user}@127.0.0.1:{sshd.port}"] * n  # n connections, as for n hosts
    kwargs = {
        "connect_kwargs": {
            "key_filename": [str(sshd.client_key)],
            "allow_agent": False,
            "look_for_keys": False,
        },
    }

    def fabric_group() -> ThreadingGroup:
        # Fabric sets AutoAddPolicy itself: unknown host keys are accepted silently.
        return ThreadingGroup(*address, **kwargs)

    def fabric_run(g: ThreadingGroup) -> int:
        try:
            results = g.run(" ".join(STEP), hide=True, warn=True, in_stream=False)
        except GroupException as exc:
            results = exc.result
        return len(results.failed) + sum(not r.ok for r in results.succeeded.values())

    def fabric_connect() -> int:
        g = fabric_group()
        try:
            return fabric_run(g)
        finally:
            g.close()

    runs: dict[str, list[tuple[float, int]]] = {
        k: [] for k in ("remotekit_connect", "fabric_connect", "remotekit_warm", "fabric_warm")
    }
    for _ in range(reps):  # interleaved, so that load on this machine hits both alike
        runs["remotekit_connect"].append(timed(remotekit_connect))
        runs["fabric_connect"].append(timed(fabric_connect))

    held = remotekit.fleet(specs)
    group = fabric_group()
    try:
        held.map(lambda t: t.connect())
        group.run("true", hide=True, in_stream=False)
        for _ in range(reps):
            runs["remotekit_warm"].append(timed(lambda: remotekit_run(held)))
            runs["fabric_warm"].append(timed(lambda: fabric_run(group)))
    finally:
        held.close()
        group.close()
    return runs


if __name__ == "__main__":
    sys.exit(main())
