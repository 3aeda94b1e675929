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

``--suite layouts`` (issue 9) measures the 8-GPU layouts against their naive full load, on
checkpoints of about ``--layout-gb`` (default 1.1) built under ``--tmp`` and deleted after:

- DCP (written by the real ``dcp.save``, one file per rank, 2 ranks' worth of files): ``ckpt.py
  scan DIR`` vs ``dcp.load`` into a full state dict of the checkpoint's shapes, then a NaN count;
- DeepSpeed ZeRO-2 (bf16 model states + 2 fp32 optimizer partitions with Adam moments, built to
  DeepSpeed's layout, as tests/data/deepspeed shows it): scan vs ``torch.load`` of every file,
  held together as zero_to_fp32.py does, then a NaN count.

Targets: scan wall time and peak RSS <= 0.5x the naive load's. ``--suite formats`` (issue 34)
writes one model of about ``--formats-gb`` (default 1.0; fp32 tensors of 4096 columns, NaN and
+-Inf planted, one in the last chunk of the last tensor) twice, as safetensors (by the
``safetensors`` package) and as a torch.save file, and measures each whole command:

- ``ckpt.py scan`` of the safetensors file vs a plain safetensors + NumPy script
  (``safe_open(framework="np")``, ``np.isnan`` / ``np.isinf`` per tensor): target <= 1.0x
  (the scan imports no torch for it);
- ``ckpt.py scan`` of the torch file vs a plain ``torch.load(mmap=True)`` + ``isnan`` /
  ``isinf`` script: target <= 0.5x.

Peak RSS of each is reported; every tool must find the planted values. The safetensors file
is also checked on the scan's standard-library path (NumPy made unimportable, as on a Python
without it) in turns with its NumPy path: MB/s of each (the records' ``seconds``) and the
ratio, as information. ``--suite small`` scans
``--small-files`` (default 20,000) tiny checkpoints and reports files per second (target >=
1,000) next to a bare ``torch.load`` loop over the same files in one process.

Targets (seed suite): scan wall time <= 0.5x the seed's; scan peak RSS <= 0.5x the seed's; the scan's own
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


def scan(path: Path, jobs: int = 1, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    wall, rss, out, err, code = timed(
        [*prefix, sys.executable, str(SCRIPT), "scan", str(path), "--jobs", str(jobs)]
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
        "posinf_weights": sum(c["posinf_weights"] for c in cps),
        "neginf_weights": sum(c["neginf_weights"] for c in cps),
        "nan_optimizer": sum(c["nan_optimizer"] for c in cps),
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


# ------------------------------------------------------------------------ layouts (issue 9)

# Each builder / baseline runs as its own child process (this one stays torch-free, see
# make_in_subprocess); argv: DIR BYTES.
MAKE_DCP = r"""
import sys, warnings, torch, torch.distributed.checkpoint as dcp
out, nbytes = sys.argv[1], int(sys.argv[2])
n = 16
rows = max(1, nbytes // (3 * 4 * n * 4096))
g = torch.Generator().manual_seed(0)
model = {f"layers.{i}.weight": torch.randn(rows, 4096, generator=g) * 0.02 for i in range(n)}
optim = {f"state.layers.{i}.weight.{k}": torch.rand(rows, 4096, generator=g) * 1e-3
         for i in range(n) for k in ("exp_avg", "exp_avg_sq")}
model["layers.3.weight"][5, 7] = float("nan")
warnings.simplefilter("ignore")
dcp.save({"model": model, "optimizer": optim, "train_state": {"step": torch.tensor(1000)}},
         checkpoint_id=out)
"""

NAIVE_DCP = r"""
import sys, time, warnings, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
warnings.simplefilter("ignore")
path = sys.argv[1]
md = dcp.FileSystemReader(path).read_metadata()
sd = {}
for fqn, m in md.state_dict_metadata.items():
    if isinstance(m, TensorStorageMetadata):
        sd[fqn] = torch.empty(m.size, dtype=m.properties.dtype)
dcp.load(sd, checkpoint_id=path)
nan = sum(int(torch.isnan(t).sum()) for t in sd.values() if t.is_floating_point())
print(nan)
"""

MAKE_ZERO = r"""
import os, sys, torch
out, nbytes = sys.argv[1], int(sys.argv[2])
os.makedirs(out + "/global_step1000")
n, ranks = 16, 2
rows = max(1, nbytes // (14 * n * 4096))  # bf16 module (2 B) + fp32 master, exp_avg, exp_avg_sq
g = torch.Generator().manual_seed(0)
module = {f"layers.{i}.weight": (torch.randn(rows, 4096, generator=g) * 0.02).bfloat16()
          for i in range(n)}
total = n * rows * 4096
torch.save({"module": module, "optimizer": None, "global_steps": 1000, "global_samples": 64000,
            "param_shapes": [{k: v.shape for k, v in module.items()}], "dp_world_size": ranks,
            "mp_world_size": 1, "ds_config": {"zero_optimization": {"stage": 2}},
            "ds_version": "0.19.8"}, out + "/global_step1000/mp_rank_00_model_states.pt")
for r in range(ranks):
    part = total // ranks
    fp32 = torch.randn(part, generator=g) * 0.02
    if r == 1:
        fp32[12345] = float("nan")
    state = {"step": torch.tensor(1000.0), "exp_avg": torch.zeros(part),
             "exp_avg_sq": torch.rand(part, generator=g) * 1e-6}
    osd = {"loss_scaler": None, "dynamic_loss_scale": False, "overflow": False, "clip_grad": 1.0,
           "base_optimizer_state": {"state": {0: state},
                                    "param_groups": [{"lr": 1e-4, "params": [0]}]},
           "single_partition_of_fp32_groups": [fp32], "zero_stage": 2, "partition_count": [ranks]}
    torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.19.8"},
               out + "/global_step1000/zero_pp_rank_%d_mp_rank_00_optim_states.pt" % r)
with open(out + "/latest", "w") as f:
    f.write("global_step1000")
"""

NAIVE_ZERO = r"""
import glob, sys, torch
files = sorted(glob.glob(sys.argv[1] + "/global_step*/*.pt"))
loaded = [torch.load(f, map_location="cpu", weights_only=True) for f in files]
def tensors(o):
    if isinstance(o, torch.Tensor):
        yield o
    elif isinstance(o, dict):
        for v in o.values():
            yield from tensors(v)
    elif isinstance(o, (list, tuple)):
        for v in o:
            yield from tensors(v)
nan = sum(int(torch.isnan(t).sum()) for o in loaded for t in tensors(o) if t.is_floating_point())
print(nan)
"""

MAKE_SMALL = r"""
import os, sys, torch
out, n = sys.argv[1], int(sys.argv[2])
for d in range(0, n, 1000):
    os.makedirs("%s/d%03d" % (out, d // 1000))
for i in range(n):
    torch.save({"w": torch.full((8,), float(i)), "step": i}, "%s/d%03d/s%06d.pt" % (out, i // 1000, i))
"""

BARE_SMALL = r"""
import glob, sys, time, torch
files = sorted(glob.glob(sys.argv[1] + "/*/*.pt"))
t0 = time.perf_counter()
for f in files:
    sd = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
    torch.isfinite(sd["w"]).all()
print(len(files) / (time.perf_counter() - t0))
"""


MAKE_FORMATS = r"""
import sys, torch
from safetensors.torch import save_file
st_path, pt_path, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
cols, n = 4096, 16
rows = max(1, nbytes // (4 * cols * n))
g = torch.Generator().manual_seed(0)
sd = {"layers.%d.weight" % i: torch.randn(rows, cols, generator=g) * 0.02 for i in range(n)}
sd["layers.0.weight"][5, 7] = float("nan")
sd["layers.7.weight"][1, 1] = float("inf")
sd["layers.%d.weight" % (n - 1)][-1, -1] = float("-inf")  # the last chunk of the last tensor
save_file(sd, st_path)
torch.save(sd, pt_path)
"""

# The plain ways to answer "any NaN/Inf in here?" that a user would type.
ST_NUMPY = r"""
import sys, numpy as np
from safetensors import safe_open
bad = 0
with safe_open(sys.argv[1], framework="np") as f:
    for k in f.keys():
        t = f.get_tensor(k)
        bad += int(np.isnan(t).sum()) + int(np.isinf(t).sum())
print(bad)
"""

TORCH_MMAP = r"""
import sys, torch
sd = torch.load(sys.argv[1], map_location="cpu", mmap=True, weights_only=True)
print(sum(int(torch.isnan(t).sum()) + int(torch.isinf(t).sum()) for t in sd.values()))
"""


def formats_suite(tmp: Path, nbytes: int, repeat: int) -> list[tuple[str, float, str, float]]:
    st, pt = tmp / "model.safetensors", tmp / "model.pt"
    t0 = time.perf_counter()
    child(MAKE_FORMATS, str(st), str(pt), str(nbytes))
    os.sync()
    cat_s = cat_seconds([st], repeat=1)  # also warms the page cache
    cat_seconds([pt], repeat=1)
    print(
        f"made {gib(st.stat().st_size)} safetensors + torch.save files in "
        f"{time.perf_counter() - t0:.0f} s; cat of the safetensors file {cat_s:.2f} s",
        flush=True,
    )
    rows: list[tuple[str, float, str, float]] = []
    for name, path, code, limit in (
        ("safetensors", st, ST_NUMPY, 1.0),
        ("torch.save", pt, TORCH_MMAP, 0.5),
    ):
        runs = []
        for _ in range(repeat):  # interleaved, so that drift on a shared host hits both
            runs.append((scan(path), child(code, str(path))))
        ours = best([r[0] for r in runs])
        base = min((r[1] for r in runs), key=lambda r: r[0])
        found = ours["nan_weights"] + ours["posinf_weights"] + ours["neginf_weights"]
        assert found == int(base[2].split()[-1]) == 3, (ours, base[2])
        label = "safetensors + numpy" if name == "safetensors" else "torch.load(mmap) + isnan"
        print(
            f"  {name}: scan {ours['wall_s']:.2f} s / {gib(ours['peak_rss'])}; {label} "
            f"{base[0]:.2f} s / {gib(base[1])}; both find {found} NaN/Inf",
            flush=True,
        )
        rows.append((f"{name} scan wall time vs {label}", ours["wall_s"] / base[0], "<=", limit))
        rows.append(
            (f"{name} scan peak RSS vs {label} (info)", ours["peak_rss"] / base[1], "<=", 99)
        )
    rows += stdlib_rows(tmp, st, repeat)
    st.unlink()
    pt.unlink()
    return rows


def stdlib_rows(tmp: Path, st: Path, repeat: int) -> list[tuple[str, float, str, float]]:
    """The safetensors scan on its standard-library path (NumPy made unimportable, as on a
    Python without it) against its NumPy path, in turns: MB/s of the check (the records'
    ``seconds``: open + check, without interpreter start) and the ratio."""
    blocked = tmp / "no-numpy"
    blocked.mkdir(exist_ok=True)
    (blocked / "numpy.py").write_text("raise ModuleNotFoundError('numpy blocked', name='numpy')\n")
    no_numpy = ("env", f"PYTHONPATH={blocked}")
    runs = [(scan(st), scan(st, prefix=no_numpy)) for _ in range(repeat)]
    with_np = min(r[0]["file_s"] for r in runs)
    stdlib = min(r[1]["file_s"] for r in runs)
    assert {
        r[1]["nan_weights"] + r[1]["posinf_weights"] + r[1]["neginf_weights"] for r in runs
    } == {3}
    mb = st.stat().st_size / 1e6
    print(
        f"  safetensors check: NumPy path {mb / with_np:.0f} MB/s, standard library "
        f"{mb / stdlib:.0f} MB/s ({stdlib / with_np:.1f}x the NumPy path's time); load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return [("safetensors stdlib check time vs NumPy path (info)", stdlib / with_np, "<=", 99)]


def child(code: str, *args: str) -> tuple[float, int, str]:
    """Run ``code`` in a fresh Python: (wall seconds, peak RSS, stdout)."""
    wall, rss, out, err, rc = timed([sys.executable, "-c", code, *args])
    if rc != 0:
        raise SystemExit(f"child failed (exit {rc}):\n{err}")
    return wall, rss, out


def layout_suite(tmp: Path, nbytes: int, repeat: int) -> list[tuple[str, float, str, float]]:
    rows: list[tuple[str, float, str, float]] = []
    for name, make, naive, expect in (
        ("DCP", MAKE_DCP, NAIVE_DCP, 1),
        ("ZeRO-2", MAKE_ZERO, NAIVE_ZERO, 1),
    ):
        d = tmp / name
        t0 = time.perf_counter()
        child(make, str(d), str(nbytes))
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        os.sync()
        cat_seconds([f for f in d.rglob("*") if f.is_file()], repeat=1)  # warm the page cache
        print(
            f"made {name} checkpoint of {gib(size)} in {time.perf_counter() - t0:.0f} s", flush=True
        )
        ours = best([scan(d) for _ in range(repeat)])
        base = min((child(naive, str(d)) for _ in range(repeat)), key=lambda r: r[0])
        found = int(base[2].split()[-1])
        assert ours["nan_weights"] + _nan_opt(ours) == found == expect, (ours, found)
        print(
            f"  {name}: scan {ours['wall_s']:.2f} s / {gib(ours['peak_rss'])}; naive load "
            f"{base[0]:.2f} s / {gib(base[1])}; both find {found} NaN",
            flush=True,
        )
        rows.append((f"{name} scan wall time vs naive load", ours["wall_s"] / base[0], "<=", 0.5))
        rows.append((f"{name} scan peak RSS vs naive load", ours["peak_rss"] / base[1], "<=", 0.5))
        shutil.rmtree(d)
    return rows


def _nan_opt(rec: dict[str, Any]) -> int:
    return int(rec.get("nan_optimizer", 0))


def small_suite(tmp: Path, n: int) -> list[tuple[str, float, str, float]]:
    d = tmp / "small"
    t0 = time.perf_counter()
    child(MAKE_SMALL, str(d), str(n))
    print(f"made {n} small checkpoints in {time.perf_counter() - t0:.0f} s", flush=True)
    os.sync()
    wall, rss, out, err, _ = timed([sys.executable, str(SCRIPT), "scan", str(d)])
    recs = [json.loads(line) for line in out.splitlines()]
    clean = sum(1 for r in recs if r.get("type") == "checkpoint" and r["status"] == "clean")
    assert clean == n, (clean, err[-2000:])
    bare = float(child(BARE_SMALL, str(d))[2].split()[-1])
    rate = n / wall
    print(
        f"  {n} small files: scan {wall:.1f} s = {rate:.0f} files/s (whole command, peak RSS "
        f"{gib(rss)}); bare torch.load loop {bare:.0f} files/s",
        flush=True,
    )
    shutil.rmtree(d)
    return [
        ("small files per second (x1000)", rate / 1000, ">=", 1.0),
        ("small files: scan rate vs bare torch.load loop (info)", rate / bare, ">=", 0.0),
    ]


def run_suites(opts: argparse.Namespace) -> int:
    """The layout and small-file suites: a table of ratios with PASS/FAIL."""
    targets: list[tuple[str, float, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench_ckpt_", dir=opts.tmp) as tmp_name:
        tmp = Path(tmp_name)
        if opts.suite in ("layouts", "all"):
            targets += layout_suite(tmp, int(opts.layout_gb * (1 << 30)), opts.repeat)
        if opts.suite in ("formats", "all"):
            targets += formats_suite(tmp, int(opts.formats_gb * (1 << 30)), opts.repeat)
        if opts.suite in ("small", "all"):
            targets += small_suite(tmp, opts.small_files)
    ok_all = True
    print()
    results: dict[str, Any] = {}
    for name, value, op, limit in targets:
        ok = value <= limit if op == "<=" else value >= limit
        ok_all &= ok
        results[name] = {"value": round(value, 3), "op": op, "limit": limit, "pass": ok}
        print(f"  {name:<55} {value:7.3f}  (target {op} {limit})  {'PASS' if ok else 'FAIL'}")
    out = RESULTS.with_name(f"ckpt-{opts.suite}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"targets": results, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2)
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0 if ok_all else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool (the fastest counts)")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    ap.add_argument(
        "--suite", choices=["seed", "layouts", "formats", "small", "all"], default="seed"
    )
    ap.add_argument("--layout-gb", type=float, default=1.1)
    ap.add_argument("--small-files", type=int, default=20000)
    ap.add_argument("--formats-gb", type=float, default=1.0)
    opts = ap.parse_args()
    if opts.suite != "seed":
        return run_suites(opts)
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
