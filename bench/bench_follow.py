"""train-log --follow benchmark: a spike line written -> the incident shown here, against a
hand-typed ``ssh ... pct exec 200 -- tail -F LOG`` seeing the same line, in one run.

Through local -> sshd (127.0.0.1) -> pct stand-in -> real LXC container -> venv Python. One
writer (tests/fakes/trainlog_writer.py, a row every 20 ms, a spike every 100 rows, each
spike's write time kept in ``LOG.times``) feeds both watchers at once:

  1. ``follow_train_log`` on the container target: each incident's ``seen`` time here;
  2. ``ssh -S ctl host 'pct exec 200 -- tail -n 0 -F LOG'`` over an OpenSSH ControlMaster:
     when each spike line (``"loss": 20.5``) arrives here.

Reported: p50 / p95 / max of both latencies and the ratio of the p50s (follow / tail -F);
target: the follower's p95 within a few seconds (it judges the log at most every 0.2 s plus
the analysis of its window; ``tail -F`` only copies bytes).

Run: .venv/bin/python bench/bench_follow.py [--spikes 20]   (writes bench/results/follow.json)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
import remotekit.diagnostics.trainlog as tl  # noqa: E402
from bench.bench_engine import controlmaster  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from tests.harness import FAKES, FakeNode, SSHServer, venv_prefix  # noqa: E402
from tests.runtimes import LxcContainer  # noqa: E402

EVERY, GAP = 0.02, 100  # seconds a row, rows between spikes


def quantiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return {"p50_ms": statistics.median(xs) * 1000, "p95_ms": p95 * 1000, "max_ms": xs[-1] * 1000}


def tail_arrivals(argv: list[str], out: dict[int, float], stop: threading.Event) -> None:
    """Read ``tail -F`` over ssh; the arrival time of each spike line, by its step."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            now = time.time()
            row = json.loads(raw)
            if row.get("loss") == 20.5:
                out[int(row["step"])] = now
            if stop.is_set():
                break
    finally:
        proc.terminate()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spikes", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rk-bench-follow-"))
    ct = LxcContainer()
    node = FakeNode(work / "node", running=ct).install()
    server = SSHServer(work / "sshd", env=node.env)
    stack = ExitStack()
    follow_lat: list[float] = []
    tail_lat: list[float] = []
    try:
        ct.start()
        node.add(200)
        server.start()
        _, ssh = stack.enter_context(controlmaster(server, work / "ctl"))
        here = node.ct_tmp(200) / "bench-follow"
        here.mkdir(parents=True, exist_ok=True)
        log, there = here / "log.jsonl", "/tmp/bench-follow/log.jsonl"
        log.touch()
        inv_file = work / "hosts.yaml"
        host = server.host_yaml(container=200, pct=str(node.pct), venv=venv_prefix())
        inv_file.write_text(json.dumps({"hosts": {"ct": host}}))
        steps = [300 + GAP * (k + 1) for k in range(args.spikes)]
        tail_seen: dict[int, float] = {}
        stop = threading.Event()
        tail_cmd = [
            *ssh,
            join([str(node.pct), "exec", "200", "--", "tail", "-n", "0", "-F", there]),
        ]
        reader = threading.Thread(target=tail_arrivals, args=(tail_cmd, tail_seen, stop))
        reader.start()
        with remotekit.load_inventory(inv_file).target("ct") as t:
            writer = None
            seen: dict[int, float] = {}

            def start_writer(status: tl.FollowStatus) -> None:
                nonlocal writer
                if writer is None:  # the follower runs: every line from now on is new
                    spikes = [a for s in steps for a in ("--spike-at", str(s))]
                    writer = subprocess.Popen(
                        [
                            sys.executable,
                            str(FAKES / "trainlog_writer.py"),
                            str(log),
                            "--every",
                            str(EVERY),
                            "--max-s",
                            str(EVERY * (steps[-1] + 50)),
                            *spikes,
                        ]
                    )

            with tl.follow_train_log(t, there, on_status=start_writer, timeout=600) as live:
                for inc in live:
                    seen[int(inc.step)] = inc.seen
                    if len(seen) >= len(steps):
                        break
            assert writer is not None
            writer.wait()
        stop.set()
        reader.join(10)
        written = {
            int(a): float(b)
            for a, b in (ln.split() for ln in Path(f"{log}.times").read_text().splitlines())
        }
        follow_lat = [seen[s] - written[s] for s in steps if s in seen]
        tail_lat = [tail_seen[s] - written[s] for s in steps if s in tail_seen]
    finally:
        stack.close()
        server.stop()
        ct.stop()
        shutil.rmtree(work, ignore_errors=True)

    figures = {
        "spikes": args.spikes,
        "follow": quantiles(follow_lat),
        "tail_F_over_ssh": quantiles(tail_lat),
    }
    figures["ratio_p50_follow_over_tail"] = figures["follow"]["p50_ms"] / max(
        figures["tail_F_over_ssh"]["p50_ms"], 1e-3
    )
    ok = figures["follow"]["p95_ms"] <= 3000 and len(follow_lat) == args.spikes
    print(json.dumps(figures, indent=2))
    print(
        f"follow p95 {figures['follow']['p95_ms']:.0f} ms (target <= 3000 ms): {'OK' if ok else 'MISSED'}"
    )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "follow.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
