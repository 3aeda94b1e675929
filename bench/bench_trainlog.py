"""train-log benchmark: analysing a 1,000,000-step log vs merely reading it, in one run.

Both run as subprocesses of a small wrapper that reports the child's wall time, CPU time
and peak RSS (``getrusage(RUSAGE_CHILDREN).ru_maxrss``):

  baseline   python -c 'for line in open(log): json.loads(line)'     (nothing kept)
  train-log  python remotekit/remote/trainlog.py log --points 2000   (everything, series too)

The log is JSON lines as a training script writes them (step, loss, acc, lr, grad_norm,
bucket, seq_len, tokens): homogeneous length buckets (52% bucket 5), a slowly falling loss
and a 13x spike every 100,000 steps. Best of ``--repeat`` runs each, alternating.
Target: train-log time <= 3x the baseline's.

Then each reader alone (in this process, the shipped package imported: ``read_log``) on a
``--steps`` file of its format vs the bare parse of that format, in the same run:

  jsonl, trainer_state.json   json.loads per line / json.load of the document
  csv (Lightning metrics.csv) csv.reader over the file
  nanogpt, llm.c, megatron,   the format's own compiled data regex, .search per line
  fairseq, key=value text     (key=value: FAST_PAIR_RE.findall per line)
  templates (a console no      a regex of its train line per line (the regex a user would
  trainer format claims)       write for that one file); the reader mines the templates
  olmo (OLMo console log)     its metric-line and step-marker regexes, one per line
  mlflow (a FileStore run)    split + float/int per metric line, over its metric files
  tensorboard                 tensorboard's EventAccumulator (scalars + tensors kept whole)
  wandb                       wandb's protobuf Record.ParseFromString per record over the
                              LevelDB-log framing, json.loads per history value (wandb 0.31
                              has no Python reader: its Go wandb-core reads these files)

Target: reader <= 3x the bare parse; TensorBoard and W&B faster than the official reader.
The TensorBoard file is written by tensorboard's own EventFileWriter (simple_value loss,
float tensor lr, as tensorboard.summary writes); the W&B file with wandb's protobuf classes
and the LevelDB-log framing of wandb's datastore (1M wandb.log calls take ~17 min here:
~1,000 rows/s measured; tests/diagnostics/trainlog/test_trainlog_formats.py uses wandb.log itself).

Run: .venv/bin/python bench/bench_trainlog.py [--steps 1000000] [--repeat 3] [--quick]
     (--quick: 100,000 steps, one repeat; writes bench/results/trainlog.json)
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

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


# ---------------------------------------------------------------------------------------------
# each reader vs the bare parse of its format (in this process)


def shipped(module: str) -> Any:
    """A module of the shipped ``trainlog/`` package, by its name in the package (the
    laptop imports the very modules that run there)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("remotekit.remote." + module)


def _losses(steps: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [2.0 + 3.0 / (1 + s / 1000) + rng.gauss(0, 0.02) for s in range(steps)]


def _write_lines(path: Path, lines: Any) -> None:
    with open(path, "w") as f:
        f.writelines(lines)


def make_jsonl(path: Path, steps: int) -> None:
    _write_lines(
        path,
        (
            f'{{"current_steps": {s}, "loss": {v:.5f}, "lr": 0.0003, "epoch": {s / 1e5:.5f}}}\n'
            for s, v in enumerate(_losses(steps))
        ),
    )


def make_csv(path: Path, steps: int) -> None:
    # Lightning CSVLogger: the union of keys as header, empty cells where a row lacks one
    lines = ["epoch,step,train_loss_epoch,train_loss_step,val_loss\n"]
    lines += (f",{s},,{v:.5f},\n" for s, v in enumerate(_losses(steps)))
    _write_lines(path, lines)


def make_trainer_state(path: Path, steps: int) -> None:
    hist = [
        {"epoch": s / 1e5, "grad_norm": 0.5, "learning_rate": 3e-4, "loss": round(v, 4), "step": s}
        for s, v in enumerate(_losses(steps))
    ]
    path.write_text(json.dumps({"global_step": steps, "log_history": hist}))


TEXT_LINES = {
    "nanogpt": "iter {s}: loss {v:.4f}, time 12.34ms, mfu 41.20%\n",
    "llm.c": "s:{s} trl:{v:.4f} lr:0.000300 norm:0.5123\n",
    "megatron": (
        " iteration {s:8d}/ 1000000 | consumed samples: {s:12d} | elapsed time per iteration "
        "(ms): 812.3 | learning rate: 3.000000E-04 | global batch size:   512 | lm loss: "
        "{v:.6E} | loss scale: 1.0 | grad norm: 0.512 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |\n"
    ),
    "fairseq": (
        '2024-05-01 10:00:00 | INFO | train_inner | {{"epoch": 1, "update": 0.1, "loss": '
        '"{v:.3f}", "ppl": "9.1", "wps": "1234", "num_updates": "{s}", "lr": "0.0003", '
        '"gnorm": "0.512"}}\n'
    ),
    "text": "step={s} loss={v:.5f} lr=0.0003 grad_norm=0.512\n",
}


def make_text(fmt: str) -> Any:
    def make(path: Path, steps: int) -> None:
        tmpl = TEXT_LINES[fmt]
        _write_lines(path, (tmpl.format(s=s, v=v) for s, v in enumerate(_losses(steps))))

    return make


def make_tfevents(path: Path, steps: int) -> Path:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    w = EventFileWriter(str(path))
    lr = tensor_util.make_tensor_proto(np.float32(3e-4))  # tf2 style: a float tensor scalar
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    for s, v in enumerate(_losses(steps)):
        vals = [
            summary_pb2.Summary.Value(tag="train/loss", simple_value=v),
            summary_pb2.Summary.Value(tag="train/lr", tensor=lr, metadata=meta),
        ]
        w.add_event(
            event_pb2.Event(step=s, wall_time=1.7e9 + s, summary=summary_pb2.Summary(value=vals))
        )
    w.close()
    (f,) = path.glob("events.out.tfevents.*")
    return f


def _leveldb_frame(records: Any) -> bytes:
    """wandb datastore framing: ':W&B' + magic 0xBEE1 + version 0, then 32 KiB blocks of
    chunks with a 7-byte header (crc32, uint16 length, type 1 full/2 first/3 middle/4 last)."""
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for data in records:
        first = True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += b"\0" * left
                continue
            n = min(len(data), left - 7)
            chunk, data = data[:n], data[n:]
            typ = (1 if not data else 2) if first else (4 if not data else 3)
            out += struct.pack("<IHB", zlib.crc32(bytes([typ]) + chunk), n, typ) + chunk
            first = False
            if not data:
                break
    return bytes(out)


def make_wandb(path: Path, steps: int) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    def recs() -> Any:
        for s, v in enumerate(_losses(steps)):
            r = pb.Record()
            h = r.history
            for k, val in (
                ("train/loss", v),
                ("train/lr", 3e-4),
                ("train/global_step", s),
                ("_step", s),
                ("_runtime", s * 0.1),
                ("_timestamp", 1.7e9 + s),
            ):
                item = h.item.add()
                item.nested_key.append(k)  # as wandb-core writes every key
                item.value_json = json.dumps(val)
            h.step.num = s
            yield r.SerializeToString()

    with open(path, "wb") as f:
        f.write(_leveldb_frame(recs()))


def bare_wandb(path: Path) -> int:
    """wandb's protobuf classes over the framing: the parse wandb itself does."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    off, n, parts = 7, 0, []
    rec = pb.Record()
    loads = json.loads
    while off + 7 <= len(data):
        left = 32768 - off % 32768
        if left < 7:
            off += left
            continue
        _, ln, typ = struct.unpack_from("<IHB", data, off)
        if typ == 0:
            off += left
            continue
        parts.append(data[off + 7 : off + 7 + ln])
        off += 7 + ln
        if typ in (1, 4):
            rec.ParseFromString(b"".join(parts))
            parts = []
            for item in rec.history.item:
                _ = item.key or ".".join(item.nested_key)
                loads(item.value_json)
            n += 1
    return n


def bare_tensorboard(path: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return len(ea.Scalars("train/loss")) + len(ea.Tensors("train/lr"))


def bare_jsonl(path: Path) -> int:
    loads = json.loads
    n = 0
    with open(path, "rb") as f:
        for line in f:
            loads(line)
            n += 1
    return n


def bare_csv(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.reader(f))


def bare_json(path: Path) -> int:
    with open(path) as f:
        return len(json.load(f)["log_history"])


def bare_regex(rx: Any) -> Any:
    def bare(path: Path) -> int:
        n = 0
        search = rx.search
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                n += search(line) is not None
        return n

    return bare


def bare_findall(rx: Any) -> Any:
    def bare(path: Path) -> int:
        findall = rx.findall
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if findall(line))

    return bare


def _line_regex(name: str) -> Any:
    """The compiled data regex of a text format (the first one its parser runs)."""
    if name == "megatron":
        return shipped("trainlog.readers.megatron").PIPE_PAIR_RE
    return shipped("trainlog.readers").by_format(name).LINE.parse.rx


def bare_fairseq(path: Path) -> int:
    """fairseq's train_inner lines are JSON after a prefix: the bare parse is json.loads."""
    loads = json.loads
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            loads(line[line.index("{") :])
            n += 1
    return n


#: A console no trainer format claims (pytorch/examples word_language_model's lines): read by
#: its line templates; a validation line after each 1,000 train lines.
CONSOLE_TRAIN = (
    "| epoch {e:3d} | {b:5d}/{n:5d} batches | lr 20.00 | ms/batch 12.10 | loss {v:5.2f} | "
    "ppl {p:8.2f}\n"
)
CONSOLE_VALID = "| end of epoch {e:3d} | time: 36.93s | valid loss {v:5.2f} | valid ppl {p:8.2f}\n"
CONSOLE_RE = re.compile(
    r"\| epoch +(\d+) \| +(\d+)/ *(\d+) batches \| lr ([\d.]+) \| ms/batch +([\d.]+) \| "
    r"loss +([\d.]+) \| ppl +([\d.]+)"
)


def make_console(path: Path, steps: int) -> None:
    n = 1000

    def lines() -> Any:
        for s, v in enumerate(_losses(steps)):
            e, b = divmod(s, n)
            yield CONSOLE_TRAIN.format(e=e + 1, b=b + 1, n=n, v=v, p=min(math.exp(v), 1e6))
            if b == n - 1:
                yield CONSOLE_VALID.format(e=e + 1, v=v + 0.1, p=min(math.exp(v + 0.1), 1e6))

    _write_lines(path, lines())


def make_olmo(path: Path, steps: int) -> None:
    """An OLMo console log: a ``[step=N/M,epoch=0]`` marker and four metric lines a step."""
    losses = _losses(steps)

    def lines() -> Any:
        for s, v in enumerate(losses, 1):
            yield (
                f"2024-02-01 10:00:00.000\thost:0\tolmo.train:1245\tINFO\t[step={s}/{steps},epoch=0]\n"
                f"    train/CrossEntropyLoss={v:.4f}\n    optim/total_grad_norm=0.5120\n"
                f"    throughput/total_tokens={s * 4_194_304:,d}\n    train/Perplexity=12.34\n"
            )

    _write_lines(path, lines())


def bare_olmo() -> Any:
    olmo = shipped("trainlog.readers.olmo")
    metric, marker = olmo.METRIC_RE.match, olmo.MARKER_RE.search

    def parse(path: Path) -> int:
        n = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                if metric(line) is None and marker(line) is not None:
                    n += 1
        return n

    return parse


def make_mlflow(path: Path, steps: int) -> None:
    """An MLflow run as its FileStore writes it: meta.yaml, metrics/<key> of
    '<ms> <value> <step>' lines (a loss and a nested lr key)."""
    (path / "metrics" / "train").mkdir(parents=True)
    (path / "meta.yaml").write_text("lifecycle_stage: active\nrun_name: bench\nstart_time: 1\n")
    losses = _losses(steps)
    _write_lines(
        path / "metrics" / "loss",
        (f"{1700000000000 + s} {v} {s}\n" for s, v in enumerate(losses)),
    )
    _write_lines(
        path / "metrics" / "train" / "lr",
        (f"{1700000000000 + s} 0.0003 {s}\n" for s in range(steps)),
    )


def bare_mlflow(path: Path) -> int:
    n = 0
    for f in (path / "metrics" / "loss", path / "metrics" / "train" / "lr"):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                float(parts[1])
                int(parts[2])
                n += 1
    return n


def bench_readers(work: Path, steps: int, repeat: int, only: str) -> dict[str, Any]:
    read_log = shipped("trainlog.read").read_log
    cases: list[tuple[str, Any, Any, str, str]] = [
        ("jsonl", make_jsonl, bare_jsonl, "json.loads per line", "jsonl"),
        ("csv", make_csv, bare_csv, "csv.reader", "csv"),
        ("trainer_state", make_trainer_state, bare_json, "json.load", "json"),
    ]
    for name in ("nanogpt", "llm.c", "megatron"):
        cases.append(
            (name, make_text(name), bare_regex(_line_regex(name)), "a regex per line", "log")
        )
    cases.append(("fairseq", make_text("fairseq"), bare_fairseq, "json.loads per line", "log"))
    cases.append(
        (
            "text",
            make_text("text"),
            bare_findall(shipped("trainlog.base").FAST_PAIR_RE),
            "a regex per line",
            "log",
        )
    )
    cases.append(("olmo", make_olmo, bare_olmo(), "its two regexes per line", "log"))
    if importlib.util.find_spec("remotekit.remote.trainlog.templates") is not None:
        cases.append(
            ("templates", make_console, bare_regex(CONSOLE_RE), "its train line's regex", "log")
        )
    cases.append(("mlflow", make_mlflow, bare_mlflow, "split + float per line", "run"))
    cases.append(("tensorboard", make_tfevents, bare_tensorboard, "EventAccumulator", "tb"))
    cases.append(("wandb", make_wandb, bare_wandb, "wandb protobuf Record", "wandb"))
    wanted = {x for x in only.split(",") if x}
    out: dict[str, Any] = {}
    print(f"\nreaders on {steps:,}-step files: best of {repeat}, CPU s of this process")
    print(f"{'reader':14} {'MiB':>6} {'reader s':>9} {'bare s':>8} {'ratio':>6}  baseline")
    for name, make, bare, what, ext in cases:
        if wanted and name not in wanted:
            continue
        path = work / f"{name}.{ext}"
        if name == "tensorboard":
            path.mkdir()
            path = make_tfevents(path, steps)
        elif name == "mlflow":
            path.mkdir()
            make(path, steps)
        else:
            make(path, steps)
        mine, base = [], []
        rows = 0
        for _ in range(repeat):
            t0 = time.process_time()
            ing = read_log(str(path), "auto", None)[0]
            ing.flush()
            mine.append(time.process_time() - t0)
            rows = ing.rows()
            t0 = time.process_time()
            bare(path)
            base.append(time.process_time() - t0)
        ratio = min(mine) / min(base)
        official = name in ("tensorboard", "wandb")
        target = 1.0 if official else TARGET_RATIO
        ok = ratio <= target and rows == steps
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
        size = sum(f.stat().st_size for f in files) / 2**20
        print(
            f"{name:14} {size:6.0f} {min(mine):9.2f} {min(base):8.2f} {ratio:5.2f}x  {what}"
            f"  (target {'< 1' if official else '<= 3'}x; rows {rows:,}){'' if ok else '  FAIL'}"
        )
        out[name] = {
            "mib": size,
            "reader_s": mine,
            "bare_s": base,
            "baseline": what,
            "ratio": ratio,
            "target": target,
            "rows": rows,
            "pass": ok,
        }
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="100,000 steps, one repeat")
    ap.add_argument("--only", default="", help="comma-separated reader names (default: all)")
    ap.add_argument("--preset", default="", help="the spike rule (default: train-log's own)")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.repeat = min(args.steps, 100_000), 1
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
        if args.preset:
            argv["train-log"] += ["--preset", args.preset]
        out = {name: work / f"{name}.out" for name in argv}
        for _ in range(args.repeat):
            for name in argv:
                runs[name].append(measure(argv[name], out[name]))
        # the analysis must have found what the log holds, or its speed means nothing
        records = [json.loads(line) for line in out["train-log"].read_text().splitlines()]
        summary = next(r for r in records if r["type"] == "summary")
        assert records[-1]["type"] == "done" and records[-1]["exit_code"] == 1, records[-1]
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
        print("analysis:", "PASS" if ok else "FAIL")
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
        readers = bench_readers(work, args.steps, args.repeat, args.only)
        ok = ok and all(r["pass"] for r in readers.values())
        doc = json.loads(RESULTS.read_text())
        doc["readers"] = readers
        doc["pass"] = ok
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
        print("PASS" if ok else "FAIL")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
