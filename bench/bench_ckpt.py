#!/usr/bin/env python3
"""Benchmark ``remotekit/remote/ckpt.py scan`` against the seed script, in one run.

    .venv/bin/python bench/bench_ckpt.py [--size-gb 2] [--repeat 3] [--tmp /tmp]

Makes a checkpoint of about ``--size-gb`` (fp32 weights plus Adam exp_avg and exp_avg_sq, so a
third of it is weights; 3 NaN planted in weights and 2 +Inf in exp_avg_sq) in a temp dir, warms
the page cache (after ``sync``: pages still under writeback slow down whoever reads them
first), then measures, each tool as a subprocess (wall time, and peak RSS from
``wait4``, which includes the scan's worker process):

- the seed: the inline script from the original debugging session, reproduced below (full
  ``torch.load(weights_only=False)``, then separate ``isnan().sum()`` / ``isinf().sum()`` passes);
- ``ckpt.py scan`` (mmap, one reduction per chunk, pages released after checking);
- ``cat file > /dev/null`` (the page-cache read speed);
- 8 checkpoints of ``--size-gb / 8`` each, scanned with ``--jobs 1`` and ``--jobs 2``.

Targets: scan wall time <= 0.5x the seed's; scan peak RSS <= 0.5x the seed's; the scan's own
check time for the file (its record's ``seconds``: load + check, without interpreter start and
``import torch``) <= 3x ``cat``. Both tools must agree on the planted NaN count. The ``--jobs``
speed-up is reported as a figure: with a warm page cache each file is checked in tens of ms,
so both runs are mostly interpreter and torch start-up. Prints a table with PASS/FAIL per target and writes
``bench/results/ckpt.json``. Needs about 2 x ``--size-gb`` of free disk; temp files are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "remotekit" / "remote" / "ckpt.py"
RESULTS = ROOT / "bench" / "results" / "ckpt.json"

# The seed (background notes, msg 8745), unchanged except that the checkpoint directory comes
# from argv and the time spent in the loop is printed to stderr.
SEED = r"""
import sys, time
t_import = time.time()
import torch, os
t0 = time.time()
CKPT = sys.argv[1]
for d in sorted(os.listdir(CKPT)):
    path = f"{CKPT}/{d}/checkpoint.pt"
    if not os.path.exists(path):
        continue
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        sd = ckpt["model_state_dict"]
        nan_c = sum(torch.isnan(v).sum().item() for v in sd.values() if v.is_floating_point())
        inf_c = sum(torch.isinf(v).sum().item() for v in sd.values() if v.is_floating_point())
        total = sum(v.numel() for v in sd.values() if v.is_floating_point())
        opt_nan = 0
        for state in ckpt["optimizer_state_dict"]["state"].values():
            for v2 in state.values():
                if isinstance(v2, torch.Tensor) and v2.is_floating_point():
                    opt_nan += torch.isnan(v2).sum().item()
        gs = ckpt["global_step"]
        ep = ckpt["epoch"]
        print(f"{d}: step={gs} epoch={ep} params={total/1e6:.1f}M nan_w={nan_c} inf_w={inf_c} opt_nan={opt_nan}")
    except Exception as e:
        print(f"{d}: ERROR {e}")
print(f"seed loop seconds: {time.time() - t0:.3f}", file=sys.stderr)
"""

NAN_AT = [5, 1000, 123456]
INF_AT = [7, 8]


def make_checkpoint(path: Path, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """A training checkpoint of about ``nbytes``: fp32 weights, Adam exp_avg / exp_avg_sq.
    Imports torch: call it through :func:`make_in_subprocess`."""
    import torch

    cols = 4096
    weight_elems = max(cols, nbytes // 3 // 4)
    torch.manual_seed(seed)
    block = min(weight_elems, 4096 * 4096)
    base = torch.randn(block)
    sd: dict[str, torch.Tensor] = {}
    state: dict[int, dict[str, torch.Tensor]] = {}
    left, i = weight_elems, 0
    while left >= cols:
        rows = min(block, left) // cols
        w = (base[: rows * cols] * (1 + 1e-3 * i)).view(rows, cols)
        sd[f"layers.{i}.weight"] = w
        state[i] = {
            "step": torch.tensor(100.0),
            "exp_avg": w * 0.01,
            "exp_avg_sq": (w * w) * 1e-4,
        }
        left -= rows * cols
        i += 1
    sd["layers.0.weight"].view(-1)[NAN_AT] = float("nan")
    state[min(3, i - 1)]["exp_avg_sq"].view(-1)[INF_AT] = float("inf")
    ckpt = {
        "model_state_dict": sd,
        "optimizer_state_dict": {
            "state": state,
            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "params": list(range(i))}],
        },
        "global_step": 1000,
        "epoch": 1,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return {"tensors": i, "weight_elems": sum(v.numel() for v in sd.values())}


def make_in_subprocess(path: Path, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """Build a checkpoint in a child process: this process must stay small and torch-free,
    because a forked child's peak RSS (``ru_maxrss``) starts from its parent's size."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_ckpt as b; "
        "from pathlib import Path; "
        "print(json.dumps(b.make_checkpoint(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(path), str(nbytes), str(seed)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def timed(argv: list[str], stdout: Any = subprocess.PIPE) -> tuple[float, int, str, str, int]:
    """(wall seconds, peak RSS bytes of the process tree, stdout, stderr, exit code)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=err)
        out = proc.stdout.read().decode() if proc.stdout is not None else ""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        errtext = err.read().decode(errors="replace")
    return wall, usage.ru_maxrss * 1024, out, errtext, proc.returncode


def cat_seconds(files: list[Path], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for f in files:
            with open(f, "rb") as src, open(os.devnull, "wb") as dst:
                subprocess.run(["cat"], stdin=src, stdout=dst, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def scan(path: Path, jobs: int = 1) -> dict[str, Any]:
    wall, rss, out, err, code = timed(
        [sys.executable, str(SCRIPT), "scan", str(path), "--jobs", str(jobs)]
    )
    records = [json.loads(line) for line in out.splitlines()]
    cps = [r for r in records if r["type"] == "checkpoint"]
    if not cps:
        raise SystemExit(f"ckpt.py scan produced no checkpoint record (exit {code}):\n{err}")
    return {
        "wall_s": wall,
        "peak_rss": rss,
        "exit_code": code,
        "file_s": sum(c["seconds"] for c in cps),
        "nan_weights": sum(c["nan_weights"] for c in cps),
        "posinf_optimizer": sum(c["posinf_optimizer"] for c in cps),
        "statuses": sorted({c["status"] for c in cps}),
    }


def seed(ckpt_dir: Path, script: Path) -> dict[str, Any]:
    wall, rss, out, err, code = timed([sys.executable, str(script), str(ckpt_dir)])
    loop = next(
        (float(x.split(":")[1]) for x in err.splitlines() if "seed loop seconds" in x), None
    )
    nan = sum(
        int(part.split("=")[1])
        for line in out.splitlines()
        for part in line.split()
        if part.startswith("nan_w=")
    )
    return {
        "wall_s": wall,
        "peak_rss": rss,
        "exit_code": code,
        "loop_s": loop,
        "nan_weights": nan,
        "output": out.strip(),
    }


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda r: r["wall_s"])


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool (the fastest counts)")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    opts = ap.parse_args()
    size = int(opts.size_gb * (1 << 30))
    need = 2 * size + (256 << 20)
    free = shutil.disk_usage(opts.tmp).free
    if free < need:
        raise SystemExit(
            f"{opts.tmp} has {gib(free)} free; this run needs {gib(need)} (try --size-gb)"
        )

    with tempfile.TemporaryDirectory(prefix="bench_ckpt_", dir=opts.tmp) as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        one = tmp / "one" / "run" / "checkpoint.pt"
        info = make_in_subprocess(one, size)
        many = [tmp / "many" / f"ckpt_{i}" / "checkpoint.pt" for i in range(8)]
        for i, p in enumerate(many):
            make_in_subprocess(p, size // 8, seed=i + 1)
        seed_script = tmp / "seed_check_ckpt.py"
        seed_script.write_text(SEED)
        print(
            f"made {gib(one.stat().st_size)} checkpoint ({info['tensors']} weight tensors, "
            f"{info['weight_elems'] / 1e6:.0f}M params) and 8 x {gib(many[0].stat().st_size)} "
            f"in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )

        os.sync()  # writeback of the fresh files would otherwise slow whichever tool runs first
        cat_s = cat_seconds([one])  # also warms the page cache
        cat_seconds(many, repeat=1)
        ours = best([scan(one.parent.parent) for _ in range(opts.repeat)])
        base = best([seed(one.parent.parent, seed_script) for _ in range(opts.repeat)])
        j1 = best([scan(tmp / "many", jobs=1) for _ in range(opts.repeat)])
        j2 = best([scan(tmp / "many", jobs=2) for _ in range(opts.repeat)])
        file_bytes = one.stat().st_size

    speedup = j1["wall_s"] / j2["wall_s"]
    targets = [
        ("scan wall time vs seed", ours["wall_s"] / base["wall_s"], "<=", 0.5),
        ("scan peak RSS vs seed", ours["peak_rss"] / base["peak_rss"], "<=", 0.5),
        ("scan check time vs cat", ours["file_s"] / cat_s, "<=", 3.0),
    ]
    agree = ours["nan_weights"] == base["nan_weights"] == len(NAN_AT) and ours[
        "posinf_optimizer"
    ] == len(INF_AT)
    rows = [
        ("checkpoint size", gib(file_bytes)),
        ("cat file > /dev/null", f"{cat_s:.2f} s ({file_bytes / cat_s / 1e9:.1f} GB/s)"),
        (
            "seed: wall / loop / peak RSS",
            f"{base['wall_s']:.2f} s / {base['loop_s']:.2f} s / {gib(base['peak_rss'])}",
        ),
        (
            "scan: wall / check / peak RSS",
            f"{ours['wall_s']:.2f} s / {ours['file_s']:.2f} s / {gib(ours['peak_rss'])}",
        ),
        ("scan wall time vs cat (info)", f"{ours['wall_s'] / cat_s:.2f}x"),
        (
            "8 files --jobs 1 / --jobs 2",
            f"{j1['wall_s']:.2f} s / {j2['wall_s']:.2f} s = {speedup:.2f}x (per-file checks "
            f"sum to {j1['file_s']:.2f} s / {j2['file_s']:.2f} s)",
        ),
        (
            "seed found NaN in weights",
            f"{base['nan_weights']} (planted {len(NAN_AT)}; it does not look for Inf in optimizer state)",
        ),
        (
            "scan found NaN w / +Inf opt",
            f"{ours['nan_weights']} / {ours['posinf_optimizer']} (planted {len(NAN_AT)} / {len(INF_AT)})",
        ),
    ]
    width = max(len(r[0]) for r in rows + [(t[0], "") for t in targets])
    print(
        f"\nckpt scan benchmark ({platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()})"
    )
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print()
    results: dict[str, Any] = {"targets": {}}
    ok_all = agree
    for name, value, op, limit in targets:
        ok = value <= limit if op == "<=" else value >= limit
        ok_all &= ok
        results["targets"][name] = {"value": round(value, 3), "op": op, "limit": limit, "pass": ok}
        print(
            f"  {name:<{width}}  {value:6.2f}x  (target {op} {limit}x)  {'PASS' if ok else 'FAIL'}"
        )
    print(f"  {'both tools agree on planted NaN':<{width}}  {'PASS' if agree else 'FAIL'}")
    results.update(
        size_bytes=file_bytes,
        cat_s=cat_s,
        seed={k: v for k, v in base.items() if k != "output"},
        scan=ours,
        jobs1=j1,
        jobs2=j2,
        jobs_speedup=speedup,
        agree=agree,
        host={"cpus": os.cpu_count(), "python": platform.python_version()},
        when=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
