"""Sync benchmark: `Target.sync` into a container vs the hand-typed two hops, in one run.

A tree of N small files (default 10,000 in 100 folders) plus a few large files is pushed from
here into a real LXC container behind a real sshd (127.0.0.1) and the pct stand-in
(tests/harness.py FakeNode), twice: initial (DEST empty) and no change (nothing to do).

  remotekit   t.sync(SRC, /workspace/code)        ssh -> pct exec 200 -> venv python
  by hand     rsync -a --delete SRC/ node:STAGING/   (over an OpenSSH ControlMaster, so no
              connection setup is counted), then
              ssh node 'tar -C STAGING -c . | pct exec 200 -- tar -C /workspace/code -x'
              (the second hop has no change detection: it copies the whole tree each time)

Reported: seconds for each, and ratios (remotekit / by hand; < 1 is faster). The no-change
remotekit sync should be well under a second (it is one step that lists DEST and sends nothing).

Needs rsync (apt-get install rsync), sshd, lxc and root, as the tests do.
Run: .venv/bin/python bench/bench_sync.py [--files 10000] [--big 3] [--big-mb 64] [--runs 3]
(writes bench/results/sync.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_engine import controlmaster, median_time  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from remotekit.sync import SyncResult  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import FakeNode, SSHServer, venv_prefix  # noqa: E402

CT = 200


def make_tree(src: Path, files: int, big: int, big_mb: int) -> int:
    """N small files (100 per folder, 1-4 KiB) and ``big`` files of ``big_mb`` MiB; bytes."""
    total = 0
    for i in range(files):
        path = src / f"pkg{i // 100:03d}" / f"mod{i % 100:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (f"# module {i}\n" + "x = 1\n" * (150 + i % 500)).encode()
        path.write_bytes(data)
        total += len(data)
    for i in range(big):
        path = src / "weights" / f"part{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for _ in range(big_mb):
                f.write(os.urandom(1 << 20))
        total += big_mb << 20
    return total


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=3, help="large files")
    ap.add_argument("--big-mb", type=int, default=64, help="MiB each")
    ap.add_argument("--runs", type=int, default=3, help="no-change runs (median)")
    args = ap.parse_args()
    for tool in ("rsync", "tar"):
        if shutil.which(tool) is None:
            print(f"skip: {tool} is missing (apt-get install {tool})")
            return 0
    why = runtimes.missing("lxc")
    if why is not None:
        print(f"skip: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="rk-bench-sync-"))
    figures: dict[str, Any] = {"files": args.files, "big": args.big, "big_mb": args.big_mb}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        node = FakeNode(work / "node").install()
        ct = runtimes.LxcContainer()
        stack.callback(ct.stop)
        node.running = ct.start()
        node.add(CT)
        os.environ.update({"FAKE_PCT_ROOT": str(node.pve)})
        server = SSHServer(work / "sshd", env=node.env)
        stack.callback(server.stop)
        server.start()
        _, ssh = stack.enter_context(controlmaster(server, work / "ctl"))
        src = work / "src"
        size = make_tree(src, args.files, args.big, args.big_mb)
        figures["bytes"] = size
        print(f"tree: {args.files} files + {args.big} x {args.big_mb} MiB = {size / 2**20:.0f} MiB")

        inv_file = work / "hosts.yaml"
        host = server.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
        inv_file.write_text(json.dumps({"hosts": {"ct": host}}))
        t = stack.enter_context(remotekit.load_inventory(inv_file).target("ct"))
        t.run(["true"])  # warm: connection held, as rsync's ControlMaster is

        ours_dest, hand_dest, staging = "/workspace/rk", "/workspace/hand", work / "staging"
        staging.mkdir()
        rsync = [
            "rsync",
            "-a",
            "--delete",
            "-e",
            join(ssh[:-1]),
            f"{src}/",
            f"{ssh[-1]}:{staging}/",
        ]
        second_hop = [
            *ssh,
            join(["sh", "-c", f"tar -C {staging} -c . | pct exec {CT} -- tar -C {hand_dest} -x"]),
        ]
        t.run(["mkdir", "-p", hand_dest])

        def by_hand() -> tuple[float, float]:
            a = timed(lambda: subprocess.run(rsync, check=True))
            b = timed(lambda: subprocess.run(second_hop, check=True))
            return a, b

        first = t.sync(src, ours_dest)
        ours_initial = first.duration_s
        hop1, hop2 = by_hand()
        assert len(first.sent) == args.files + args.big, first.summary()
        print(f"initial   remotekit {ours_initial:7.2f} s   by hand {hop1 + hop2:7.2f} s "
              f"(rsync {hop1:.2f} + into CT {hop2:.2f})   ratio {ours_initial / (hop1 + hop2):.2f}")  # fmt: skip
        figures["initial"] = {
            "remotekit_s": round(ours_initial, 3),
            "rsync_s": round(hop1, 3),
            "into_ct_s": round(hop2, 3),
            "ratio": round(ours_initial / (hop1 + hop2), 3),
        }

        results: list[SyncResult] = []
        ours = median_time(lambda: results.append(t.sync(src, ours_dest)), args.runs)
        assert all(r.sent == () and r.steps == 1 for r in results), results[-1].summary()
        hand = [by_hand() for _ in range(args.runs)]
        hop1 = sorted(a for a, _ in hand)[len(hand) // 2]
        hop2 = sorted(b for _, b in hand)[len(hand) // 2]
        print(f"no change remotekit {ours:7.2f} s   by hand {hop1 + hop2:7.2f} s "
              f"(rsync {hop1:.2f} + into CT {hop2:.2f})   ratio {ours / (hop1 + hop2):.2f}   "
              f"vs rsync hop alone {ours / hop1:.2f}")  # fmt: skip
        figures["no_change"] = {
            "remotekit_s": round(ours, 3),
            "rsync_s": round(hop1, 3),
            "into_ct_s": round(hop2, 3),
            "ratio": round(ours / (hop1 + hop2), 3),
            "ratio_vs_rsync_alone": round(ours / hop1, 3),
            "under_1s": ours < 1.0,
        }
        print(f"no-change sync under 1 s: {'PASS' if ours < 1.0 else 'FAIL'} ({ours:.2f} s)")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sync.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
