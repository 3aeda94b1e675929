"""Runs benchmark: following a run's log through local -> sshd (127.0.0.1) -> pct stand-in ->
real LXC container -> venv Python, against OpenSSH in the same run.

  1. latency: a line the run writes (it prints its own wall clock) -> the chunk holding it
     handed out by ``Run.logs(follow=True)`` here: p50 / p95            target: p95 <= 250 ms
  2. throughput: ``Run.logs()`` of a finished run's log of ``--mb`` MB (the issue's 1 GB:
     ``--mb 1024``)  vs  ``ssh -S ctl host 'pct exec 200 -- cat LOG'`` over an OpenSSH
     ControlMaster (bytes to /dev/null)
                                                                        target: >= 0.5x
     (and, for scale, ``Run.logs(follow=True)`` of the same log: the bytes as data records,
     and ``Target.get`` of the same file, the engine's raw byte path, which ``logs()`` takes)
  3. ``runs`` on ``--hosts`` (32) plain SSH targets at the test sshd (one connection each, as
     for 32 machines; each its own ``runs_dir:``) holding 20 ended runs each (records written
     as the supervisor writes them): ``remotekit runs --all --json`` (the CLI, a fresh
     process: connecting and Python's start included), ``fleet.map(t.runs())`` on fresh
     targets and on held ones  vs  one ``ssh host ls RUNS_DIR`` per host, all at once
     (median of ``--reps``)                                       (no target: the ratio)

Run: .venv/bin/python bench/bench_runs.py [--lines 100] [--mb 256|1024] [--hosts 32] [--reps 3]
     (writes bench/results/runs.json)
"""

from __future__ import annotations

import argparse
import json
import os
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
from bench.bench_engine import container_chain, median_time, print_checks  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from tests.harness import SSHServer  # noqa: E402

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
    run = t.run_python(remotekit.Script(CLOCK, name="clock.py"), [str(lines)], detach=True)
    got, buf = [], b""
    for chunk in run.logs(follow=True):
        now = time.time()
        buf += chunk
        *whole, buf = buf.split(b"\n")
        got += [now - float(w) for w in whole if w]
    run.rm()
    return got


def fake_runs(top: Path, host: str, count: int) -> None:
    """``count`` ended runs under ``top``, their records as the supervisor writes them."""
    now = time.time()
    for i in range(count):
        folder = top / f"{host}r{i:02d}"
        folder.mkdir(parents=True, mode=0o700)
        record = {
            "id": folder.name,
            "host": host,
            "command": ["python", "train.py", "--seed", str(i)],
            "cwd": "/root",
            "started": now - 3600 + i,
            "supervisor": {"pid": 1, "start": 0},
            "pid": 1,
            "pid_start": 0,
        }
        (folder / "run.json").write_text(json.dumps(record))
        ended = {"code": 0, "ended": now - 60 + i, "reason": "exit", "stopped": []}
        (folder / "exit.json").write_text(json.dumps(ended))
        for name in ("output", "stdout", "stderr"):
            (folder / f"{name}.log").write_bytes(b"step 1 loss 2.0\n")


def fleet_listing(work: Path, hosts: int, per_host: int, reps: int) -> dict[str, float]:
    """Seconds (medians) to list the runs of ``hosts`` targets, against one ``ssh ls`` each."""
    sshd = SSHServer(work / "sshd").start()
    try:
        names = [f"t{i:02d}" for i in range(hosts)]
        spec = {}
        for name in names:
            fake_runs(work / "runs" / name, name, per_host)
            where = str(work / "runs" / name)
            spec[name] = sshd.host_yaml(python=sys.executable, runs_dir=where)
        inv = work / "fleet.yaml"
        inv.write_text(json.dumps({"hosts": spec}))
        specs = remotekit.load_inventory(inv).select(hosts=names)
        want = hosts * per_host
        cli = [str(Path(sys.executable).parent / "remotekit"), "runs", "--all", "--json"]
        env = {**os.environ, "REMOTEKIT_HOSTS": str(inv)}

        def by_cli() -> None:
            out = subprocess.run(cli, env=env, check=True, capture_output=True).stdout
            assert out.count(b'"state": "exited"') == want, out[-400:]

        def by_api(f: remotekit.Fleet) -> None:
            got = f.map(lambda t: t.runs())
            assert sum(len(o.value or ()) for o in got) == want

        def fresh() -> None:
            with remotekit.fleet(specs) as f:
                by_api(f)

        ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={sshd.known_hosts}"]
        ssh += ["-i", str(sshd.client_key), "-p", str(sshd.port), f"{sshd.user}@127.0.0.1"]

        def by_ssh_ls() -> None:
            procs = [
                subprocess.Popen(
                    [*ssh, join(["ls", str(work / "runs" / n)])], stdout=subprocess.PIPE
                )
                for n in names
            ]
            listed = sum(len(p.communicate()[0].split()) for p in procs)
            assert all(p.returncode == 0 for p in procs) and listed == want

        figures = {
            "fleet_runs_cli_s": median_time(by_cli, reps),
            "fleet_runs_api_fresh_s": median_time(fresh, reps),
            "fleet_ssh_ls_s": median_time(by_ssh_ls, reps),
        }
        with remotekit.fleet(specs) as held:
            by_api(held)
            figures["fleet_runs_api_held_s"] = median_time(lambda: by_api(held), reps)
        return figures
    finally:
        sshd.stop()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument(
        "--mb", type=int, default=256, help="MiB of log for the throughput (1024: the issue's 1 GB)"
    )
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--runs-per-host", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
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

            run = t.run_python(remotekit.Script(BULK, name="bulk.py"), [str(args.mb)], detach=True)
            run.wait()
            t0 = time.perf_counter()
            got = sum(len(c) for c in run.logs())
            figures["logs_s"] = time.perf_counter() - t0
            assert got == args.mb << 20, got
            t0 = time.perf_counter()  # the same bytes as data records (what a follow reads)
            got = sum(len(c) for c in run.logs(follow=True))
            figures["logs_follow_s"] = time.perf_counter() - t0
            assert got == args.mb << 20, got
            cat = [*chain.ssh, join([chain.pct, "exec", "200", "--", "cat", run.info().log])]
            t0 = time.perf_counter()
            subprocess.run(cat, check=True, stdout=subprocess.DEVNULL)
            figures["ssh_cat_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()  # the engine's own raw path, for scale: Target.get
            t.get(run.info().log, work / "got.log")
            figures["target_get_s"] = time.perf_counter() - t0
            run.rm()
        stack.close()
        figures.update(fleet_listing(work, args.hosts, args.runs_per_host, args.reps))
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)

    figures["logs_mb_per_s"] = args.mb / figures["logs_s"]
    figures["logs_follow_mb_per_s"] = args.mb / figures["logs_follow_s"]
    figures["ssh_cat_mb_per_s"] = args.mb / figures["ssh_cat_s"]
    figures["target_get_mb_per_s"] = args.mb / figures["target_get_s"]
    ratio = figures["logs_mb_per_s"] / figures["ssh_cat_mb_per_s"]
    fleet_ratio = figures["fleet_runs_cli_s"] / figures["fleet_ssh_ls_s"]
    figures["fleet_runs_cli_over_ssh_ls"] = fleet_ratio
    p95 = figures["follow_latency_ms_p95"]
    checks = [
        ("line -> logs --follow here (p95)", f"{p95:.0f} ms", "<= 250 ms", p95 <= 250),
        (f"logs / ssh cat, {args.mb} MB log", f"{ratio:.2f}x", ">= 0.5x", ratio >= 0.5),
    ]
    print_checks(figures, checks)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    result = {"lines": args.lines, "mb": args.mb, "figures": figures, "ratio_vs_ssh_cat": ratio}
    result["fleet"] = {"hosts": args.hosts, "runs_per_host": args.runs_per_host}
    result["pass"] = all(c[3] for c in checks)
    (out / "runs.json").write_text(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
