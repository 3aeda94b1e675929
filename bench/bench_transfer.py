"""Transfer benchmark: shipping N MB with run_python(files=) vs put of N MB, in one run.

Through local -> sshd (127.0.0.1) -> venv Python, median of R runs each, for each size:

  run_python(Script, files={"blob": N MB})   vs   put(N MB file)        target: ratio ~1

(Issue 11: shipped files used to go to the channel as one bytes object that paramiko
re-sliced per packet: 80 MB took 79 s while put of 30 MB took 0.5 s.)

Run: .venv/bin/python bench/bench_transfer.py [--sizes 20,80,200] [--runs 3]
(writes bench/results/transfer.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from tests.harness import SSHServer, venv_prefix  # noqa: E402

SCRIPT = remotekit.Script(
    b"import os\nprint(os.path.getsize(os.path.join(os.environ['REMOTEKIT_DIR'], 'blob')))\n",
    name="size.py",
)


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="20,80,200", help="MB, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rk-bench-transfer-"))
    server = SSHServer(work / "sshd").start()
    figures: dict[str, dict[str, float]] = {}
    try:
        inv_file = work / "hosts.yaml"
        host = server.host_yaml(venv=venv_prefix())
        inv_file.write_text(json.dumps({"hosts": {"node": host}}))
        inv = remotekit.load_inventory(inv_file)
        with inv.target("node") as t:
            t.run(["true"])  # warm: connection open
            for mb in (int(s) for s in args.sizes.split(",")):
                blob = os.urandom(1 << 20) * mb
                src = work / "blob"
                src.write_bytes(blob)

                def ship(blob: bytes = blob, mb: int = mb) -> None:
                    r = t.run_python(SCRIPT, files={"blob": blob}, timeout=600)
                    assert int(r.stdout) == mb << 20

                def put(src: Path = src) -> None:
                    t.put(src, str(work / "landed"), timeout=600)

                shipped = median_time(ship, args.runs)
                copied = median_time(put, args.runs)
                figures[f"{mb}MB"] = {
                    "run_python_files_s": round(shipped, 3),
                    "put_s": round(copied, 3),
                    "ratio": round(shipped / copied, 2),
                }
                print(
                    f"{mb:5d} MB  run_python(files=) {shipped:7.3f} s   put {copied:7.3f} s   "
                    f"ratio {shipped / copied:5.2f}  ({mb / shipped:6.1f} MB/s)",
                    flush=True,
                )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "transfer.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
