"""train-log benchmark: analysing a 1,000,000-step log vs merely reading it, in one run.

Both run as subprocesses of a small wrapper that reports the child's wall time, CPU time
and peak RSS (``getrusage(RUSAGE_CHILDREN).ru_maxrss``):

  baseline   python -c 'for line in open(log): json.loads(line)'     (nothing kept)
  train-log  python remotekit/remote/trainlog.py log --points 2000   (everything, series too)

The log is JSON lines as a training script writes them (step, loss, acc, lr, grad_norm,
bucket, seq_len, tokens): homogeneous length buckets (52% bucket 5), a slowly falling loss
and a 13x spike every 100,000 steps. Best of ``--repeat`` runs each, alternating.
Target: train-log time <= 3x the baseline's.

Run: .venv/bin/python bench/bench_trainlog.py [--steps 1000000] [--repeat 3]
     (writes bench/results/trainlog.json)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"
RESULTS = ROOT / "bench" / "results" / "trainlog.json"
TARGET_RATIO = 3.0

BASELINE = "import json, sys\nfor line in open(sys.argv[1]):\n    json.loads(line)\n"


def measure(argv: list[str], stdout: Path) -> dict[str, Any]:
    """Wall s, CPU s and peak RSS (MiB) of ``argv`` run as the child of a fresh wrapper."""
    wrapper = (
        "import json, resource, subprocess, sys, time\n"
        "out = open(sys.argv[1], 'wb')\n"
        "t0 = time.perf_counter()\n"
        "rc = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
        "wall = time.perf_counter() - t0\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': rc, 'wall_s': wall, 'cpu_s': ru.ru_utime + ru.ru_stime,"
        " 'maxrss_mib': ru.ru_maxrss / 1024}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, str(stdout), *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def write_log(path: Path, steps: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    buckets = {1: 8, 3: 32, 5: 96}
    ids, weights = [1, 3, 5], [0.18, 0.30, 0.52]
    level = {1: 1.6, 3: 0.7, 5: 0.15}
    acc = {1: 0.75, 3: 0.9, 5: 0.98}
    picks = rng.choices(ids, weights=weights, k=steps)
    with open(path, "w") as f:
        for s, b in enumerate(picks):
            loss = level[b] * (1.0 + 2.0 / (1 + s / 1000)) * math.exp(rng.gauss(0, 0.08))
            a = min(1.0, acc[b] + rng.gauss(0, 0.02))
            if s % 100_000 == 50_000:
                loss, a = 13.0, 0.03
            f.write(
                f'{{"step": {s}, "loss": {loss:.5f}, "acc": {a:.4f}, "lr": 0.0003, '
                f'"grad_norm": {rng.uniform(0.3, 1.2):.4f}, "bucket": {b}, '
                f'"seq_len": {buckets[b]}, "tokens": {buckets[b] * 64}}}\n'
            )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rk-bench-trainlog-"))
    try:
        log = work / "history.jsonl"
        t0 = time.perf_counter()
        write_log(log, args.steps)
        print(
            f"log: {args.steps:,} steps, {log.stat().st_size / 2**20:.0f} MiB "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "train-log": []}
        argv = {
            "baseline": [sys.executable, "-c", BASELINE, str(log)],
            "train-log": [sys.executable, str(SCRIPT), str(log), "--points", "2000"],
        }
        out = {name: work / f"{name}.out" for name in argv}
        for _ in range(args.repeat):
            for name in argv:
                runs[name].append(measure(argv[name], out[name]))
        # the analysis must have found what the log holds, or its speed means nothing
        records = [json.loads(line) for line in out["train-log"].read_text().splitlines()]
        summary = records[-1]
        spikes = [r for r in records if r["type"] == "spike" and r["metric"] == "loss"]
        comp = next(r for r in records if r["type"] == "composition")
        expected = len(range(50_000, args.steps, 100_000))
        correct = (
            summary["rows"] == args.steps
            and len(spikes) == expected
            and comp["finding"]
            and all(r["rc"] == 1 for r in runs["train-log"])
        )
        best = {name: min(r["wall_s"] for r in rs) for name, rs in runs.items()}
        cpu = {name: min(r["cpu_s"] for r in rs) for name, rs in runs.items()}
        rss = {name: max(r["maxrss_mib"] for r in rs) for name, rs in runs.items()}
        ratio = best["train-log"] / best["baseline"]
        ok = ratio <= TARGET_RATIO and correct
        print(f"{'':10}  {'wall s (best)':>13}  {'cpu s (best)':>12}  {'peak RSS MiB':>12}")
        for name in argv:
            print(f"{name:10}  {best[name]:13.2f}  {cpu[name]:12.2f}  {rss[name]:12.1f}")
        print(
            f"ratio train-log / baseline: {ratio:.2f}x wall, "
            f"{cpu['train-log'] / cpu['baseline']:.2f}x cpu  (target <= {TARGET_RATIO:g}x)"
        )
        print(
            f"found: {len(spikes)} of {expected} planted loss spikes, composition finding "
            f"{comp['finding']}  ({'correct' if correct else 'WRONG'})"
        )
        print("PASS" if ok else "FAIL")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "steps": args.steps,
                    "log_mib": log.stat().st_size / 2**20,
                    "repeat": args.repeat,
                    "runs": runs,
                    "best_wall_s": best,
                    "best_cpu_s": cpu,
                    "peak_rss_mib": rss,
                    "ratio_wall": ratio,
                    "ratio_cpu": cpu["train-log"] / cpu["baseline"],
                    "target_ratio": TARGET_RATIO,
                    "correct": correct,
                    "pass": ok,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {RESULTS.relative_to(ROOT)}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
