"""remote/trainlog.py on logs as they are found, not as they should be.

Each log here is broken the way real ones are: a line of megabytes (a dumped tensor or
config), NUL bytes (a file preallocated and not yet written, a crash mid-write), binary
garbage (the wrong file), a sparse gigabyte, Latin-1 text, Windows line ends, a last line
cut off, a log still being written, the lines of eight ranks in one file, impossible steps,
a resumed run appended to the same log, JSON nested past the parser's depth.

The rule for every one: a clear result (rows, a warning saying what was set aside) or a
clear error (exit 2 and an ``error`` record), never a traceback, never exit 0 without a
loss series read.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT

SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"

# Runs the script as its own __main__ and reports its peak resident memory on the way out.
PEAK_RSS = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            sys.stderr.write('PEAK_RSS_KB %d\\n' % int(line.split()[1]))\n"
    "atexit.register(peak)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


class Result:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        self.code = proc.returncode
        self.stderr = proc.stderr
        self.records = [json.loads(line) for line in proc.stdout.splitlines()]
        assert self.records, proc.stderr
        final = self.records[-1]
        assert final["type"] == "done" and final["exit_code"] == self.code
        if self.code == 0:  # never "OK" without a loss series read
            src = self.one("source")
            assert src["rows"] > 0 and "loss" in src["metrics"]
        if self.code == 2:
            assert self.of("error")

    def of(self, rtype: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == rtype]

    def one(self, rtype: str) -> dict[str, Any]:
        [rec] = self.of(rtype)
        return rec

    def warned(self, words: str) -> bool:
        return any(words in w["message"] for w in self.of("warning"))


def run(path: Path, *args: Any, measure: bool = False) -> Result:
    head = [sys.executable, "-c", PEAK_RSS] if measure else [sys.executable]
    proc = subprocess.run(
        [*head, str(SCRIPT), str(path), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return Result(proc)


def rows(n: int, start: int = 1, seed: int = 0, stride: int = 1) -> list[str]:
    """JSON lines as a trainer writes them: step, loss (4 decimals, falling: a run that
    learns), learning rate."""
    rng = random.Random(seed)
    return [
        json.dumps({"step": s, "loss": round(_falling(s) + rng.gauss(0, 0.05), 4), "lr": 1e-4})
        for s in range(start, start + n * stride, stride)
    ]


def _falling(step: int) -> float:
    """A loss that learns: 2.0 at the start, 1.5 by step 500 (a flat one never learned)."""
    return 1.0 + 1.0 / (1 + step / 500)


def loss_median(r: Result) -> float:
    return float(next(m["median"] for m in r.of("metric") if m["label"] == "loss"))


def write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text(end.join(lines) + end)
    return path


# ---------------------------------------------------------------------------------------------


def test_a_line_of_megabytes_is_skipped_and_said(tmp_path: Path) -> None:
    good = rows(200)
    blob = json.dumps({"step": 0, "config": "x" * (3 << 20)})
    r = run(write(tmp_path / "log.jsonl", [*good[:100], blob, *good[100:]]))
    assert r.code == 0 and r.one("source")["rows"] == 200
    assert r.warned("longer than")


def test_nul_bytes_inside_and_between_lines(tmp_path: Path) -> None:
    text = "\n".join(rows(300)).replace('"lr"', '"l\0r"', 20)
    path = tmp_path / "log.jsonl"
    path.write_bytes(
        text.encode() + b"\n" + b"\0" * 4096 + b"\n" + "\n".join(rows(50, 301)).encode()
    )
    r = run(path)
    assert r.code == 0 and r.one("source")["rows"] == 350


def test_binary_garbage_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "model.log"  # the wrong file, named like a log
    path.write_bytes(random.Random(0).randbytes(1 << 20))
    r = run(path)
    assert r.code == 2 and "not a text log" in r.one("error")["message"]


def test_a_sparse_gigabyte_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """200 rows, a 1 GiB hole of NULs (a preallocated file), 200 rows: every row read,
    the hole skipped as an over-long line, and the script never holds it."""
    path = tmp_path / "log.jsonl"
    with open(path, "w") as f:
        f.write("\n".join(rows(200)) + "\n")
        f.truncate(f.tell() + (1 << 30))
    with open(path, "a") as f:
        f.write("\n" + "\n".join(rows(200, 201)) + "\n")
    r = run(path, measure=True)
    assert r.code == 0 and r.one("source")["rows"] == 400
    assert r.one("source")["last_step"] == 400 and r.warned("longer than")
    peak_kb = int(r.stderr.split("PEAK_RSS_KB ")[1].split()[0])
    assert peak_kb < 150 * 1024, f"peak RSS {peak_kb} kB"


def test_a_file_of_nothing_but_nul_bytes_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    with open(path, "wb") as f:
        f.truncate(64 << 20)
    r = run(path)
    assert r.code == 2 and "no line shorter than" in r.one("error")["message"]


def test_latin1_text(tmp_path: Path) -> None:
    rng = random.Random(1)
    path = tmp_path / "train.log"
    with open(path, "wb") as f:
        for i in range(300):
            loss = _falling(i) + rng.gauss(0, 0.05)
            line = f"Schritt {i}: step={i + 1} loss={loss:.4f} Größe=café\n"
            f.write(line.encode("latin-1"))
    r = run(path)
    assert r.code == 0 and r.one("source")["rows"] == 300


@pytest.mark.parametrize("kind", ["text", "csv"])
def test_windows_line_ends(tmp_path: Path, kind: str) -> None:
    rng = random.Random(2)
    if kind == "text":
        lines = [
            f"step={i + 1} loss={2.3 - 0.002 * i + rng.gauss(0, 0.05):.4f} lr=0.001"
            for i in range(300)
        ]
    else:  # Lightning's metrics.csv written on Windows
        lines = ["step,train_loss_step,lr-AdamW"]
        lines += [f"{i + 1},{2.3 - 0.002 * i + rng.gauss(0, 0.05):.4f},0.001" for i in range(300)]
    path = tmp_path / f"log.{'csv' if kind == 'csv' else 'log'}"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    r = run(path)
    assert r.code == 0 and r.one("source")["rows"] == 300
    assert r.one("source")["columns"]["lr"] in ("lr", "lr-AdamW")
    assert loss_median(r) == pytest.approx(2.0, abs=0.05)


def test_a_last_line_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(rows(300)) + '\n{"step": 301, "loss": 2.')
    r = run(path)
    assert r.code == 0 and r.one("source")["rows"] == 300 and r.one("source")["bad_lines"] == 1


def test_a_log_being_written_while_read(tmp_path: Path) -> None:
    path = write(tmp_path / "log.jsonl", rows(20000))
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json, sys, time\n"
            "with open(sys.argv[1], 'a') as f:\n"
            "    for k in range(20001, 40001):\n"
            "        f.write(json.dumps({'step': k, 'loss': 2.0, 'lr': 1e-4}) + '\\n')\n"
            "        if k % 500 == 0:\n"
            "            f.flush(); time.sleep(0.01)\n",
            str(path),
        ]
    )
    try:
        time.sleep(0.05)
        r = run(path)
    finally:
        writer.wait(timeout=60)
    src = r.one("source")
    assert r.code in (0, 1) and 20000 <= src["rows"] <= 40000
    assert src["bad_lines"] <= 1  # at most the line being written when the read ended


def test_eight_ranks_printing_in_turn_are_not_resumes(tmp_path: Path) -> None:
    """torchrun without a rank guard: every rank prints its own loss, in order."""
    rng = random.Random(3)
    lines = [
        f"[rank{rank}]: step={s} loss={2 + 0.1 * rank + rng.gauss(0, 0.03):.4f}"
        for s in range(1, 301)
        for rank in range(8)
    ]
    r = run(write(tmp_path / "train.log", lines))
    assert r.one("source")["rows"] == 300
    assert r.warned("several writers") and not any(e["kind"] == "resume" for e in r.of("event"))
    assert loss_median(r) == pytest.approx(2.35, abs=0.02)  # the mean of the ranks' losses


def test_ranks_a_step_apart_are_not_hundreds_of_resumes(tmp_path: Path) -> None:
    """Four ranks drifting by up to two steps: the step goes back on almost every line.
    Before: 300 'resume' events, steps lost, and the ranks' own loss levels read as a
    bimodal loss (exit 1)."""
    rng = random.Random(5)
    timed = []
    for s in range(1, 401):
        for rank in range(4):
            loss = _falling(s) + 0.1 * rank + rng.gauss(0, 0.03)
            timed.append((s + rng.uniform(0, 2.5), f"[rank{rank}]: step={s} loss={loss:.4f}"))
    timed.sort()
    r = run(write(tmp_path / "train.log", [line for _, line in timed]))
    assert r.code == 0, [c["verdict"] for c in r.of("composition")]
    assert r.one("source")["rows"] == 400 and r.warned("several writers")
    assert not any(e["kind"] == "resume" for e in r.of("event"))


def test_impossible_steps_are_set_aside(tmp_path: Path) -> None:
    lines = [
        json.dumps({"step": -5, "loss": 2.0}),
        *rows(300),
        json.dumps({"step": 1e30, "loss": 2.0}),
        '{"step": Infinity, "loss": 2.0}',
        '{"step": 1e400, "loss": 2.0}',
    ]
    r = run(write(tmp_path / "log.jsonl", lines), "--ckpt-steps", "100,200")
    src = r.one("source")
    assert (src["rows"], src["first_step"], src["last_step"]) == (300, 1, 300)
    assert r.warned("4 rows with an impossible step")
    corr = {c["kind"]: c for c in r.of("correlation")}
    assert corr["checkpoint"]["coverage"] > 0.01  # the step range is 1..300, not 1..1e30


def test_a_lone_mangled_step_is_not_a_resume(tmp_path: Path) -> None:
    good = rows(300)
    lines = [*good[:100], '{"step": true, "loss": 2.0}', '{"step": 7, "loss": 2.0}', *good[100:]]
    r = run(write(tmp_path / "log.jsonl", lines))
    assert r.one("source")["rows"] == 300
    assert not any(e["kind"] == "resume" for e in r.of("event"))
    assert r.warned("out of line")


def test_a_resumed_run_keeps_the_later_rows(tmp_path: Path) -> None:
    """Resumed from the checkpoint of step 200 after step 300: steps 201..300 twice."""
    first, again = rows(300, seed=1), rows(150, start=201, seed=2)
    r = run(write(tmp_path / "log.jsonl", [*first, *again]), "--points", "100000")
    assert r.one("source")["rows"] == 350
    [resume] = [e for e in r.of("event") if e["kind"] == "resume"]
    assert resume["step"] == 201 and "300 to 201" in resume["detail"]
    series = next(s for s in r.of("series") if s["metric"] == "loss")
    at = dict(zip(series["steps"], series["values"]))
    assert at[250] == json.loads(again[49])["loss"] != json.loads(first[249])["loss"]


def test_json_nested_past_the_parsers_depth(tmp_path: Path) -> None:
    good = rows(300)
    deep = '{"a":' * 50000 + "1" + "}" * 50000
    r = run(write(tmp_path / "log.jsonl", [*good[:100], deep, *good[100:]]))
    assert r.code == 0 and r.one("source")["rows"] == 300 and r.one("source")["bad_lines"] == 1


@pytest.mark.parametrize("with_epoch", [True, False], ids=["epoch-field", "no-epoch-field"])
def test_a_per_epoch_step_counter_is_not_a_resume(tmp_path: Path, with_epoch: bool) -> None:
    """A loop that logs its step within the epoch (0..495 every 5 steps, three times):
    before, each restart was a 'resume' and two epochs' rows were set aside."""
    rng = random.Random(6)
    lines = []
    for ep in range(3):
        for s in range(0, 500, 5):
            row = {"step": s, "loss": round(2 - 0.3 * ep + rng.gauss(0, 0.03), 4)}
            lines.append(json.dumps({"epoch": ep, **row} if with_epoch else row))
    r = run(write(tmp_path / "log.jsonl", lines))
    src = r.one("source")
    assert (src["rows"], src["first_step"], src["last_step"]) == (300, 0, 1495)
    assert not any(e["kind"] == "resume" for e in r.of("event"))
    assert sorted(e["step"] for e in r.of("event") if e["kind"] == "epoch") == [500, 1000]
    assert r.warned("per-epoch count")


def run_quick(path: Path) -> Result:
    """A run that must end at once: a reader blocked on a FIFO fails the test in 20 s."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=20
    )
    return Result(proc)


@pytest.mark.timeout(45)
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "log.jsonl")
    r = run_quick(tmp_path / "log.jsonl")
    assert r.code == 2 and "FIFO" in r.one("error")["message"]


@pytest.mark.timeout(45)
def test_a_run_directory_whose_trainer_state_is_a_fifo(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "trainer_state.json")
    r = run_quick(tmp_path)
    assert r.code == 2 and "trainer_state.json" in r.one("error")["message"]


def _crc32c_masked(data: bytes) -> int:
    """TFRecord's masked CRC-32C, bit by bit (the script under test uses a table)."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tfrecord(data: bytes) -> bytes:
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", _crc32c_masked(n)) + data + struct.pack("<I", _crc32c_masked(data))


def _scalar_event(step: int, loss: float) -> bytes:
    """An Event (wall_time 1, step 2, summary 5 {value 1 {tag 1, simple_value 2}})."""
    val = b"\x0a\x04loss\x15" + struct.pack("<f", loss)
    summary = b"\x0a" + bytes([len(val)]) + val
    varint = bytes([step & 0x7F | 0x80, step >> 7]) if step > 127 else bytes([step])
    head = b"\x09" + struct.pack("<d", 1.0) + b"\x10" + varint
    return head + b"\x2a" + bytes([len(summary)]) + summary


def test_damaged_tensorboard_records_are_skipped_and_counted(tmp_path: Path) -> None:
    out = bytearray(_tfrecord(b"\x09" + struct.pack("<d", 1.0) + b"\x1a\x0dbrain.Event:2"))
    at = []
    for s in range(300):
        at.append(len(out))
        out += _tfrecord(_scalar_event(s, 2.0 - s / 1000))
    # record 100: its value became a field of the wrong type (a TypeError in the parser)
    i = out.index(b"loss\x15", at[100]) + 4
    out[i : i + 5] = b"\x40\x01\x40\x01\x40"
    # record 200: its loss changed after writing; only the data CRC can tell
    i = out.index(b"loss\x15", at[200]) + 5
    out[i : i + 4] = struct.pack("<f", 1e30)
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(bytes(out))
    r = run_quick(path)
    assert r.code in (0, 1)
    assert r.one("source")["rows"] == 298 and r.one("source")["bad_lines"] == 2
    assert r.warned("2 corrupt record(s) in the event file skipped")
    assert "1e+30" not in json.dumps(r.records)


@pytest.mark.parametrize("given", ["file", "run-directory"])
def test_a_trainer_state_nested_100000_deep_is_a_clear_error(tmp_path: Path, given: str) -> None:
    doc = '{"log_history": [{"step": 1, "loss": 1.0}], "x": ' + "[" * 100000 + "]" * 100000 + "}"
    (tmp_path / "trainer_state.json").write_text(doc)
    r = run_quick(tmp_path / "trainer_state.json" if given == "file" else tmp_path)
    [err] = r.of("error")
    assert r.code == 2 and "nested deeper than" in err["message"], err
    assert "this is a bug" not in err["message"]
