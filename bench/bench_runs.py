"""Runs benchmark: following a run's log through local -> sshd (127.0.0.1) -> pct stand-in ->
real LXC container -> venv Python, against OpenSSH in the same run.

  1. latency: a line the run writes (it prints its own wall clock) -> the chunk holding it
     handed out by ``Run.logs(follow=True)`` here: p50 / p95            target: p95 <= 250 ms
  2. throughput: ``Run.logs()`` of a finished run's log of ``--mb`` MB  vs  ``ssh -S ctl host
     'pct exec 200 -- cat LOG'`` over an OpenSSH ControlMaster (bytes to /dev/null)
                                                                        target: >= 0.5x
     (and ``Target.get`` of the same file, the engine's raw byte path, for scale)

Run: .venv/bin/python bench/bench_runs.py [--lines 100] [--mb 256]   (writes bench/results/runs.json)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_engine import container_chain  # noqa: E402
from remotekit.quoting import join  # noqa: E402

CLOCK = (  # it waits first: lines written before the follow attached would count its start
    "import sys, time\n"
    "time.sleep(2)\n"
    "for i in range(int(sys.argv[1])):\n"
    "    print(repr(time.time()), flush=True)\n"
    "    time.sleep(0.1)\n"
)
BULK = (
    "import sys\n"
    "chunk = (b'z' * 1023 + b'\\n') * 1024\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    sys.stdout.buffer.write(chunk)\n"
)


def latencies(t: remotekit.Target, lines: int) -> list[float]:
    """Seconds from each line's own clock to the moment its chunk came out here."""
    r = t.run_python(remotekit.Script(CLOCK, name="clock.py"), [str(lines)], detach=True)
    assert r.detached is not None
    run = t.run_handle(r.detached.id)
    got, buf = [], b""
    for chunk in run.logs(follow=True):
        now = time.time()
        buf += chunk
        *whole, buf = buf.split(b"\n")
        got += [now - float(w) for w in whole if w]
    run.rm()
    return got


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--mb", type=int, default=256)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rk-bench-runs-"))
    figures: dict[str, float] = {}
    stack = ExitStack()
    try:
        chain = stack.enter_context(container_chain(work))
        with chain.inventory.target("ct") as t:
            lat = latencies(t, args.lines)
            figures["follow_latency_ms_p50"] = statistics.median(lat) * 1000
            figures["follow_latency_ms_p95"] = percentile(lat, 95) * 1000
            figures["follow_latency_ms_max"] = max(lat) * 1000

            r = t.run_python(remotekit.Script(BULK, name="bulk.py"), [str(args.mb)], detach=True)
            assert r.detached is not None
            run = t.run_handle(r.detached.id)
            run.wait()
            t0 = time.perf_counter()
            got = sum(len(c) for c in run.logs())
            figures["logs_s"] = time.perf_counter() - t0
            assert got == args.mb << 20, got
            cat = [*chain.ssh, join([chain.pct, "exec", "200", "--", "cat", run.info().log])]
            t0 = time.perf_counter()
            subprocess.run(cat, check=True, stdout=subprocess.DEVNULL)
            figures["ssh_cat_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()  # the engine's own raw path, for scale: Target.get
            t.get(run.info().log, work / "got.log")
            figures["target_get_s"] = time.perf_counter() - t0
            run.rm()
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)

    figures["logs_mb_per_s"] = args.mb / figures["logs_s"]
    figures["ssh_cat_mb_per_s"] = args.mb / figures["ssh_cat_s"]
    figures["target_get_mb_per_s"] = args.mb / figures["target_get_s"]
    ratio = figures["logs_mb_per_s"] / figures["ssh_cat_mb_per_s"]
    p95 = figures["follow_latency_ms_p95"]
    checks = [
        ("line -> logs --follow here (p95)", f"{p95:.0f} ms", "<= 250 ms", p95 <= 250),
        (f"logs / ssh cat, {args.mb} MB log", f"{ratio:.2f}x", ">= 0.5x", ratio >= 0.5),
    ]
    for k, v in figures.items():
        print(f"{k:36s} {v:10.4f}")
    print()
    for name, got_, target, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name:38s} {got_:>14s}  (target {target})")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    result = {"lines": args.lines, "mb": args.mb, "figures": figures, "ratio_vs_ssh_cat": ratio}
    result["pass"] = all(c[3] for c in checks)
    (out / "runs.json").write_text(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
