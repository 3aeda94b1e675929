"""train-log reads the logs people have, as their own writers write them, and says what it read.

Every log here is made in the test by the real writer where it installs (the ``test`` extra
declares them): TensorBoard event files from ``torch.utils.tensorboard.SummaryWriter`` (both
``simple_value`` and ``new_style`` tensor scalars) and from tensorboard's own writers
(``tensorboard.summary.Writer``: float tensors with the scalars plugin, as
``tensorboard.summary`` writes; ``EventFileWriter`` with ``simple_value`` protos); W&B offline
runs from ``wandb`` itself (``WANDB_MODE=offline``), read here without wandb; Lightning's
``CSVLogger``. Where the writer is a whole trainer that cannot run here (HF ``Trainer``,
LLaMA-Factory, nanoGPT, llm.c, Megatron-LM, fairseq), the file is written to the shape their
source prints, quoted beside each, with the noise real logs have around their data lines:
source code, config dumps, tracebacks.

Each test asserts what the output reports: the format, the step key, each metric's column,
``chosen_from`` for a run directory, and a warning when a choice was a guess.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from invoke.exceptions import ParseError
from invoke.parser import Parser

import remotekit
import remotekit.diagnostics.trainlog as tl
from remotekit.cli import ns as package_tasks
from remotekit.render import to_json
from tests.harness import cli
from tests.trainlog_kit import Run, run, shipped

pytest.importorskip("torch")  # as before: this suite runs where torch is (some inputs need it)

N = 300
SPIKE_ROW = 150


def curve(n: int = N, spike: int | None = SPIKE_ROW) -> list[tuple[int, float, float, float]]:
    """``(row, loss, lr, grad_norm)``: a decaying loss with a little noise and one spike."""
    rnd = random.Random(0)
    out = []
    for i in range(n):
        loss = 2.5 * math.exp(-i / 200) + 1.0 + rnd.gauss(0, 0.01)
        if i == spike:
            loss += 3.0
        out.append((i, loss, 3e-4 * min(1.0, (i + 1) / 20), 0.5 + rnd.gauss(0, 0.01)))
    return out


def spike_steps(r: Run) -> list[float]:
    return [
        s["peak_step"] for s in r.all("spike") if s["metric"] == "loss" and s["kind"] == "spike"
    ]


def warnings_of(r: Run) -> list[str]:
    return [w["message"] for w in r.all("warning")]


# ---------------------------------------------------------------------------------------------
# TensorBoard


def _tb_torch(d: Path, new_style: bool) -> None:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(d))
    for i, loss, lr, gn in curve():
        step = i * 10
        w.add_scalar("train/loss", loss, step, new_style=new_style)
        w.add_scalar("train/learning_rate", lr, step, new_style=new_style)
        w.add_scalar("train/grad_norm", gn, step, new_style=new_style)
        if i % 100 == 0:  # not scalars: must not become series
            w.add_histogram("weights", torch.tensor([0.1, 0.2, 0.3 + i]), step)
            w.add_text("note", f"saving checkpoint at step {step}", step)
    w.close()


def _tb_writer(d: Path) -> None:
    tb_summary = pytest.importorskip("tensorboard.summary")
    w = tb_summary.Writer(str(d))  # float32 tensors, plugin "scalars"
    for i, loss, lr, _ in curve():
        w.add_scalar("loss", loss, step=i * 10)
        w.add_scalar("lr", lr, step=i * 10)
    w.close()


def _tb_event_file_writer(d: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    w = EventFileWriter(str(d))
    for i, loss, lr, gn in curve():
        values = [
            summary_pb2.Summary.Value(tag="loss", simple_value=loss),
            summary_pb2.Summary.Value(tag="learning_rate", simple_value=lr),
            # a float tensor that is not a scalar (shape [3]): never a series, though its
            # tag is a metric name
            summary_pb2.Summary.Value(
                tag="grad_norm",
                tensor=tensor_util.make_tensor_proto(np.array([gn, gn, gn], dtype=np.float32)),
            ),
        ]
        w.add_event(
            event_pb2.Event(
                step=i * 10, wall_time=1.7e9 + i, summary=summary_pb2.Summary(value=values)
            )
        )
    w.close()


@pytest.mark.parametrize(
    ("writer", "cols"),
    [
        (
            "torch-simple",
            {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm"},
        ),
        (
            "torch-tensor",
            {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm"},
        ),
        ("tensorboard-writer", {"loss": "loss", "lr": "lr"}),
        ("tensorboard-event-file-writer", {"loss": "loss", "lr": "learning_rate"}),
    ],
)
def test_tensorboard_event_files_of_each_writer(
    tmp_path: Path, writer: str, cols: dict[str, str]
) -> None:
    pytest.importorskip("tensorboard")
    d = tmp_path / "runs" / "exp1"
    if writer.startswith("torch"):
        _tb_torch(d, new_style=writer == "torch-tensor")
    elif writer == "tensorboard-writer":
        _tb_writer(d)
    else:
        _tb_event_file_writer(d)
    (event_file,) = d.glob("events.out.tfevents.*")
    r = run(event_file)
    src = r.one("source")
    assert src["format"] == "tensorboard" and src["step_key"] == "step"
    assert src["columns"] == cols and src["rows"] == N
    assert src["first_step"] == 0 and src["last_step"] == (N - 1) * 10 and src["stride"] == 10
    assert spike_steps(r) == [SPIKE_ROW * 10]
    # the text summary "saving checkpoint ..." is not a scalar and not an event line
    assert not [e for e in r.all("event") if e["kind"] == "checkpoint"]
    # the run directory: the event file is found in it and the output says so
    rd = run(tmp_path)
    assert rd.one("source")["chosen_from"].startswith("runs/exp1/events.out.tfevents.")
    assert "TensorBoard" in rd.one("source")["chosen_from"]


def test_tensorboard_matches_the_official_reader(tmp_path: Path) -> None:
    """Every scalar our stdlib reader sees is the one tensorboard's EventAccumulator sees."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    d = tmp_path / "tb"
    _tb_torch(d, new_style=True)
    (event_file,) = d.glob("events.out.tfevents.*")
    with open(event_file, "rb") as f:
        rows = list(_reader("tensorboard")._rows_of(f, [0, 0, None]))
    ea = EventAccumulator(str(event_file), size_guidance={"tensors": 0, "scalars": 0})
    ea.Reload()
    official = {(e.step, float(np.asarray(tensor_value(e)))) for e in ea.Tensors("train/loss")}
    ours = {(int(r["step"]), r["train/loss"]) for r in rows}
    assert ours == official and len(ours) == N


def tensor_value(e: Any) -> Any:
    from tensorboard.util import tensor_util

    return tensor_util.make_ndarray(e.tensor_proto)


def _reader(name: str) -> Any:
    return shipped(f"trainlog.readers.{name}")


# ---------------------------------------------------------------------------------------------
# W&B


WANDB_RUN = """
import math, os, sys
import wandb
rows = [tuple(map(float, r.split(","))) for r in sys.argv[2].split(";")]
run = wandb.init(dir=sys.argv[1], project="p", config={"lr": 3e-4, "note": "lr=1e-3 in config"})
for i, loss, lr, gn in rows:
    d = {"train/loss": loss, "train/learning_rate": lr, "train/grad_norm": gn}
    if sys.argv[3] == "hf":
        d["train/global_step"] = int(i) * 10
    d["train/epoch"] = i / 100
    wandb.log(d)
run.finish()
"""


def _wandb_run(tmp_path: Path, style: str, rows: list[tuple[int, float, float, float]]) -> Path:
    pytest.importorskip("wandb")
    env = dict(os.environ)
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(tmp_path / "wbconfig"),
        WANDB_CACHE_DIR=str(tmp_path / "wbcache"),
        WANDB_DATA_DIR=str(tmp_path / "wbdata"),
    )
    arg = ";".join(",".join(repr(float(x)) for x in r) for r in rows)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    subprocess.run(
        [sys.executable, "-c", WANDB_RUN, str(run_dir), arg, style],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    return run_dir


@pytest.mark.parametrize("style", ["hf", "plain"])
def test_wandb_offline_run_read_without_wandb(tmp_path: Path, style: str) -> None:
    run_dir = _wandb_run(tmp_path, style, curve())
    (wb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    assert wb_file.stat().st_size > 32768  # the records cross LevelDB-log blocks
    r = run(run_dir)
    src = r.one("source")
    assert src["format"] == "wandb"
    assert (
        src["chosen_from"].startswith("wandb/offline-run-") and "W&B run file" in src["chosen_from"]
    )
    assert src["columns"]["loss"] == "train/loss" and src["columns"]["lr"] == "train/learning_rate"
    assert src["columns"]["grad_norm"] == "train/grad_norm" and src["rows"] == N
    if style == "hf":  # the trainer's own step, not W&B's row counter
        assert src["step_key"] == "train/global_step" and src["stride"] == 10
        assert spike_steps(r) == [SPIKE_ROW * 10]
    else:
        assert src["step_key"] == "_step" and spike_steps(r) == [SPIKE_ROW]
    # every value exactly as logged (wandb 0.31 has no Python reader of its own: the Go
    # wandb-core reads these files; bench/bench_trainlog.py compares with its protobuf classes)
    rows = list(_reader("wandb")._rows(str(wb_file), [0]))
    assert [row["train/loss"] for row in rows] == [loss for _, loss, _, _ in curve()]
    assert [row["_step"] for row in rows] == list(range(N))
    # past the first rows the reader looks up only the kept items: the same values
    for keep in ({"train/loss", "_step", "train/global_step"}, {"train/loss", "_step"}):
        fast = list(_reader("wandb")._rows(str(wb_file), [0], [keep]))
        assert [{k: r[k] for k in keep if k in r} for r in fast] == [
            {k: r[k] for k in keep if k in r} for r in rows
        ]


def test_wandb_summary_alone_is_read_and_says_it_has_no_history(tmp_path: Path) -> None:
    # files/wandb-summary.json, one JSON line, as wandb writes it at the end of an online run
    # (offline runs here do not write it): the last value of each key
    d = tmp_path / "wandb" / "run-20250101_000000-abc" / "files"
    d.mkdir(parents=True)
    summary = {
        "train/loss": 1.2,
        "_step": 299,
        "_runtime": 30.5,
        "_timestamp": 1.7e9,
        "_wandb": {"runtime": 30},
    }
    (d / "wandb-summary.json").write_text(json.dumps(summary))
    r = run(d / "wandb-summary.json")
    src = r.one("source")
    assert src["format"] == "wandb-summary" and src["step_key"] == "_step"
    assert src["columns"]["loss"] == "train/loss"
    assert any("only the last value" in w for w in warnings_of(r))


# ---------------------------------------------------------------------------------------------
# Lightning, HF, LLaMA-Factory / TRL


def test_lightning_csvlogger_sparse_rows(tmp_path: Path) -> None:
    loggers = pytest.importorskip("lightning.fabric.loggers")
    lg = loggers.CSVLogger(str(tmp_path), name="lightning_logs")
    for i, loss, _, _ in curve():
        lg.log_metrics({"train_loss_step": loss}, step=i)
        if i % 100 == 99:  # one metric per row: epoch rows are separate
            lg.log_metrics({"train_loss_epoch": 1.5, "epoch": i // 100, "val_loss": 1.6}, step=i)
    lg.save()
    lg.finalize("success")
    r = run(tmp_path)
    src = r.one("source")
    assert src["format"] == "csv" and src["dialect"] == "Lightning CSVLogger metrics.csv"
    assert src["chosen_from"] == (
        "lightning_logs/version_0/metrics.csv (Lightning metrics.csv): the only candidate"
    )
    assert src["step_key"] == "step" and src["columns"]["loss"] == "train_loss_step"
    assert src["rows"] == N and spike_steps(r) == [SPIKE_ROW]


def test_lightning_only_per_epoch_loss_is_a_warned_guess(tmp_path: Path) -> None:
    p = tmp_path / "metrics.csv"
    lines = ["epoch,step,train_loss_epoch"] + [f"{i},{i * 10},{2.0 - i * 0.01}" for i in range(60)]
    p.write_text("\n".join(lines) + "\n")
    r = run(p)
    assert r.one("source")["columns"]["loss"] == "train_loss_epoch"
    assert any("per-epoch column 'train_loss_epoch'" in w for w in warnings_of(r))


def test_hf_trainer_state_with_eval_rows(tmp_path: Path) -> None:
    # transformers/trainer_callback.py TrainerState.save_to_json: log_history holds train rows
    # {"epoch", "grad_norm", "learning_rate", "loss", "step"} and eval rows {"eval_loss", ...}
    hist: list[dict[str, Any]] = []
    for i, loss, lr, gn in curve():
        step = (i + 1) * 25
        hist.append(
            {
                "epoch": step / 3000,
                "grad_norm": gn,
                "learning_rate": lr,
                "loss": round(loss, 4),
                "step": step,
            }
        )
        if i % 50 == 49:
            hist.append({"epoch": step / 3000, "eval_loss": 1.9, "eval_runtime": 3.2, "step": step})
    state = {"global_step": N * 25, "max_steps": N * 25, "save_steps": 500, "log_history": hist}
    ck = tmp_path / "out" / "checkpoint-7500"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text(json.dumps(state, indent=2))
    r = run(tmp_path / "out")
    src = r.one("source")
    assert src["format"] == "trainer_state" and src["dialect"].startswith("HF Trainer")
    assert "checkpoint-7500/trainer_state.json" in src["chosen_from"]
    assert src["step_key"] == "step" and src["stride"] == 25
    assert src["columns"] == {
        "loss": "loss",
        "lr": "learning_rate",
        "grad_norm": "grad_norm",
        "epoch": "epoch",
    }
    assert spike_steps(r) == [(SPIKE_ROW + 1) * 25]


def test_llamafactory_trainer_log_current_steps(tmp_path: Path) -> None:
    # LLaMA-Factory src/llamafactory/train/callbacks.py LogCallback: one JSON line per log
    # with current_steps / total_steps (TRL-based trainers; num_tokens a running total)
    lines = ["***** Running training *****"]  # a stray non-JSON line, as in real copies
    for i, loss, lr, _ in curve():
        lines.append(
            json.dumps(
                {
                    "current_steps": (i + 1) * 10,
                    "total_steps": N * 10,
                    "loss": loss,
                    "lr": lr,
                    "epoch": i / 100,
                    "percentage": i / N * 100,
                    "num_tokens": (i + 1) * 61440,
                    "elapsed_time": f"0:00:{i % 60:02d}",
                    "remaining_time": "0:10:00",
                }
            )
        )
    (tmp_path / "saves").mkdir()
    (tmp_path / "saves" / "trainer_log.jsonl").write_text("\n".join(lines) + "\n")
    r = run(tmp_path)
    src = r.one("source")
    assert src["format"] == "jsonl" and src["dialect"].startswith("LLaMA-Factory")
    assert src["chosen_from"] == (
        "saves/trainer_log.jsonl (LLaMA-Factory trainer_log.jsonl): the only candidate"
    )
    assert src["step_key"] == "current_steps" and src["first_step"] == 10 and src["stride"] == 10
    assert src["columns"]["loss"] == "loss" and src["columns"]["lr"] == "lr"
    assert spike_steps(r) == [(SPIKE_ROW + 1) * 10]


# ---------------------------------------------------------------------------------------------
# text logs with source code, config dumps and tracebacks around the data lines

NOISE_BEFORE = textwrap.dedent(
    """\
    import os
    learning_rate = 6e-4 # max learning rate
    lr=3e-4
    # save checkpoint every eval_interval, resume from out_dir if init_from == 'resume'
    def save(step=100): print(f"saving checkpoint at step {step}")
    Overriding config with config/train_shakespeare_char.py:
    {'batch_size': 64, 'lr': 0.001, 'loss': 9.99, 'step': 7}
    tokens per iteration will be: 16,384
    """
)
NOISE_AFTER = textwrap.dedent(
    """\
    Traceback (most recent call last):
      File "train.py", line 300, in <module>
        loss = model(X, Y)  # step=12 loss=99.0
    RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (step 400, loss 1.0)
    """
)


def _nanogpt(rows: list[tuple[int, float, float, float]]) -> tuple[str, str, dict[str, str], int]:
    # karpathy/nanoGPT train.py: print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms,
    # mfu {running_mfu*100:.2f}%"), "step N: train loss X, val loss Y", "saving checkpoint to out"
    out = []
    for i, loss, _, _ in rows:
        out.append(f"iter {i}: loss {loss:.4f}, time 12.34ms, mfu 41.20%")
        if i % 100 == 99:
            out.append(f"step {i + 1}: train loss {loss:.4f}, val loss {loss + 0.1:.4f}")
            out.append("saving checkpoint to out-shakespeare-char")
    return "\n".join(out), "nanogpt", {"loss": "loss"}, 1


def _llmc(rows: list[tuple[int, float, float, float]]) -> tuple[str, str, dict[str, str], int]:
    # karpathy/llm.c llmc/logger.h: fprintf "s:%d trl:%.4f lr:%.6f norm:%.4f" / "s:%d tel:%.4f"
    out = []
    for i, loss, lr, gn in rows:
        out.append(f"s:{i * 10} trl:{loss:.4f} lr:{lr:.6f} norm:{gn:.4f}")
        if i % 50 == 0:
            out.append(f"s:{i * 10} tel:{loss + 0.05:.4f}")
    return "\n".join(out), "llm.c", {"loss": "trl", "lr": "lr", "grad_norm": "norm"}, 10


def _llmc_stdout(
    rows: list[tuple[int, float, float, float]],
) -> tuple[str, str, dict[str, str], int]:
    # karpathy/llm.c train_gpt2.cu: "step %4d/%d | train loss %7.6f | norm %6.4f | lr %.2e | ..."
    out = [
        f"step {i + 1:4d}/{N} | train loss {loss:7.6f} | norm {gn:6.4f} | lr {lr:.2e} | 41.00 ms | 45.1% bf16 MFU"
        for i, loss, lr, gn in rows
    ]
    return "\n".join(out), "llm.c-stdout", {"loss": "loss", "lr": "lr", "grad_norm": "norm"}, 1


def _megatron(rows: list[tuple[int, float, float, float]]) -> tuple[str, str, dict[str, str], int]:
    # NVIDIA/Megatron-LM megatron/training/training.py training_log()
    out = []
    for i, loss, lr, gn in rows:
        out.append(
            f" [2024-05-01 10:00:00] iteration {i + 1:8d}/  500000 | consumed samples: {(i + 1) * 512:12d} |"
            f" elapsed time per iteration (ms): 812.3 | learning rate: {lr:.6E} | global batch size:"
            f"   512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gn:.3f} |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        if i % 100 == 99:
            out.append(f"saving checkpoint at iteration {i + 1:7d} to /ckpt in torch format")
    return (
        "\n".join(out),
        "megatron",
        {"loss": "lm loss", "lr": "learning rate", "grad_norm": "grad norm"},
        1,
    )


def _fairseq(rows: list[tuple[int, float, float, float]]) -> tuple[str, str, dict[str, str], int]:
    # fairseq/logging/progress_bar.py JsonProgressBar: "... | INFO | train_inner | {json}"
    out = []
    for i, loss, lr, gn in rows:
        d = {
            "epoch": 1,
            "update": round(i / 1000, 3),
            "loss": f"{loss:.3f}",
            "ppl": "9.1",
            "wps": "1234",
            "num_updates": str((i + 1) * 100),
            "lr": f"{lr:g}",
            "gnorm": f"{gn:.3f}",
        }
        out.append("2024-05-01 10:00:00 | INFO | train_inner | " + json.dumps(d))
    return "\n".join(out), "fairseq", {"loss": "loss", "lr": "lr", "grad_norm": "gnorm"}, 100


@pytest.mark.parametrize("make", [_nanogpt, _llmc, _llmc_stdout, _megatron, _fairseq])
def test_trainer_text_logs_among_code_configs_and_tracebacks(tmp_path: Path, make: Any) -> None:
    rows = [(i, round(loss, 4), lr, gn) for i, loss, lr, gn in curve()]
    body, fmt, cols, stride = make(rows)
    p = tmp_path / "train.log"
    p.write_text(NOISE_BEFORE + body + "\n" + NOISE_AFTER)
    r = run(p)
    src = r.one("source")
    assert src["format"] == fmt
    assert {k: v for k, v in src["columns"].items() if k in cols} == cols
    assert src["rows"] == N and src["stride"] == stride
    assert spike_steps(r) == [
        rows[SPIKE_ROW][0] * stride + (0 if fmt in ("nanogpt", "llm.c") else stride)
    ]
    # nothing from the code, the config dump or the traceback: no "resume", no checkpoint at 100,
    # no lr series from "lr=3e-4", no row at step 7, 12 or 400 of those lines
    kinds = {e["kind"] for e in r.all("event")}
    assert "resume" not in kinds
    assert all(e["source"] != "log" or e["step"] % 100 == 0 for e in r.all("event"))
    assert not any("no known trainer line format" in w for w in warnings_of(r))
    assert r.all("metric")[0]["median"] < 5.0


def test_generic_key_value_text_says_it_is_a_fallback(tmp_path: Path) -> None:
    p = tmp_path / "out.txt"
    p.write_text("".join(f"step={i} loss={loss:.4f} lr={lr}\n" for i, loss, lr, _ in curve()))
    r = run(p)
    src = r.one("source")
    assert (
        src["format"] == "text" and src["step_key"] == "step" and src["columns"]["loss"] == "loss"
    )
    assert any("no known trainer line format" in w for w in warnings_of(r))


def test_step_key_chosen_by_its_last_part_is_warned(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text(
        "".join(json.dumps({"optim/step": i * 4, "loss": loss}) + "\n" for i, loss, _, _ in curve())
    )
    r = run(p)
    assert r.one("source")["step_key"] == "optim/step"
    assert any("step key 'optim/step' chosen by its name's last part" in w for w in warnings_of(r))


def test_no_step_key_is_warned(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text("".join(json.dumps({"loss": loss}) + "\n" for _, loss, _, _ in curve()))
    r = run(p)
    assert r.one("source")["step_key"] is None
    assert any("row numbers are used as steps" in w for w in warnings_of(r))


# ---------------------------------------------------------------------------------------------
# numbers at the edges: decided in remote/trainlog.py (FMAX): non-finite and beyond-float32
# values are "nonfinite" incidents with the value as logged, and never enter the statistics

EDGE = {
    40: "1e308",
    60: "-1e308",
    80: "inf",
    100: "NaN",
    120: "-Infinity",
    140: "1e999",
    160: "nan",
}


@pytest.mark.parametrize("fmt", ["jsonl-strings", "jsonl-numbers", "csv", "text"])
def test_extreme_and_nonfinite_values_do_not_poison_the_stats(tmp_path: Path, fmt: str) -> None:
    rows = [(i, loss) for i, loss, _, _ in curve(spike=None)]
    if fmt == "jsonl-strings":
        p = tmp_path / "l.jsonl"
        p.write_text(
            "".join(json.dumps({"step": i, "loss": EDGE.get(i, loss)}) + "\n" for i, loss in rows)
        )
    elif fmt == "jsonl-numbers":  # Python's json writes NaN / Infinity / 1e+308 bare
        p = tmp_path / "l.jsonl"
        p.write_text(
            "".join(
                json.dumps({"step": i, "loss": float(EDGE.get(i, loss))}) + "\n" for i, loss in rows
            )
        )
    elif fmt == "csv":
        p = tmp_path / "l.csv"
        p.write_text("step,loss\n" + "".join(f"{i},{EDGE.get(i, loss)}\n" for i, loss in rows))
    else:
        p = tmp_path / "l.log"
        p.write_text("".join(f"step={i} loss={EDGE.get(i, loss)}\n" for i, loss in rows))
    r = run(p)
    assert r.code == 1  # the non-finite values are findings
    m = r.all("metric")[0]
    assert m["nonfinite"] == len(EDGE) and m["n"] == N - len(EDGE)
    assert 1.0 < m["median"] < 3.5
    nf = {int(s["step"]): s["value"] for s in r.all("spike") if s["kind"] == "nonfinite"}
    assert sorted(nf) == sorted(EDGE)
    assert (
        nf[40] == 1e308
        and nf[60] == -1e308
        and nf[80] == "inf"
        and nf[120] == "-inf"
        and nf[100] == "nan"
    )
    assert not [s for s in r.all("spike") if s["kind"] == "spike"]  # the baseline is intact
    dist = r.one("distribution")
    assert all(math.isfinite(x["center"]) and x["center"] < 3.5 for x in dist["modes"])


# ---------------------------------------------------------------------------------------------
# what the local half reports, and the no-loss hint through the real task parser


@pytest.fixture(scope="module")
def target() -> remotekit.Target:
    return remotekit.local_target()


def test_local_report_says_format_step_key_columns_and_chosen_from(
    tmp_path: Path, target: remotekit.Target
) -> None:
    p = tmp_path / "run" / "metrics.csv"
    p.parent.mkdir()
    p.write_text(
        "epoch,step,train_loss_step\n" + "".join(f"0,{i},{loss}\n" for i, loss, _, _ in curve())
    )
    rep = tl.analyze_train_log(target, str(tmp_path / "run"), timeout=60)
    src = rep.source
    assert (
        src is not None
        and src.chosen_from == "metrics.csv (Lightning metrics.csv): the only candidate"
    )
    assert src.dialect == "Lightning CSVLogger metrics.csv" and src.step_key == "step"
    text = tl.render_report(rep)
    assert "format csv (Lightning CSVLogger metrics.csv), step key 'step'" in text
    assert "loss <- 'train_loss_step'" in text
    assert "log chosen in the run directory: metrics.csv (Lightning metrics.csv)" in text
    doc = json.loads(to_json(rep))
    assert (
        doc["source"]["chosen_from"] == src.chosen_from
        and doc["source"]["columns"]["loss"] == "train_loss_step"
    )


def parse_task_line(line: str) -> Any:
    """A suggested ``remotekit ...`` line through invoke's own parser on the package's tasks."""
    argv = shlex.split(line)
    assert argv[0] == "remotekit"
    return Parser(contexts=copy.deepcopy(package_tasks).to_contexts()).parse_argv(argv[1:])


def test_no_loss_exit_2_hints_are_real_command_lines(
    tmp_path: Path, target: remotekit.Target
) -> None:
    p = tmp_path / "odd log.jsonl"  # a space: the hint must quote it
    p.write_text(
        "".join(
            # no name says loss (a "ppl" column would now be chosen: perplexity is a loss)
            json.dumps({"iter": i, "objective": loss, "score": math.exp(loss), "tag": "x"}) + "\n"
            for i, loss, _, _ in curve()
        )
    )
    r = run(p)
    assert r.code == 2
    err = r.one("error")
    assert (
        err["kind"] == "no-loss"
        and err["numeric"] == ["objective", "score"]
        and err["flag"] == "--metric"
    )
    # the script itself accepts the flag it names
    assert run(p, "--metric", "objective").code in (0, 1)

    rep = tl.analyze_train_log(target, str(p), timeout=60)
    assert rep.exit_code == 2 and rep.numeric_columns == ("objective", "score")
    assert len(rep.hints) == 2
    text = tl.render_report(rep)
    for hint in rep.hints:
        assert f"try: {hint}" in text
        (ctx,) = parse_task_line(hint)
        assert ctx.name == "train-log"
        assert ctx.args["log"].value == str(p)
        assert ctx.args["metric"].value in (["objective"], ["score"])
        # and the named column then analyses: exit 0/1, not 2
        again = tl.analyze_train_log(
            target, ctx.args["log"].value, metrics=ctx.args["metric"].value, timeout=60
        )
        assert again.exit_code in (0, 1) and again.source is not None
    # the parser is strict: the old hint's flag does not exist (so this test can fail)
    with pytest.raises(ParseError):
        parse_task_line(rep.hints[0].replace("--metric", "--metrics"))


def test_no_loss_hints_printed_by_the_task_run_as_printed(tmp_path: Path) -> None:
    p = tmp_path / "log.jsonl"
    p.write_text(
        "".join(json.dumps({"iter": i, "objective": loss}) + "\n" for i, loss, _, _ in curve())
    )
    r = cli("train-log", "--log", str(p), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    hints = [ln.split("try: ", 1)[1] for ln in r.stdout.splitlines() if "try: " in ln]
    assert hints == [f"remotekit train-log --host local --log {p} --metric objective"]
    again = cli(*shlex.split(hints[0])[1:], cwd=tmp_path)
    assert again.returncode in (0, 1), again.stdout + again.stderr
    assert "columns: objective <- 'objective'" in again.stdout


@pytest.mark.parametrize("odd", ["none", "text-cell", "empty-step", "short-row", "nan-cell"])
def test_csv_column_path_reads_what_the_jsonl_twin_reads(tmp_path: Path, odd: str) -> None:
    """CSV blocks are converted a column at a time; odd rows send a block row by row. Either
    way the answer is the one the same rows give as JSON lines."""
    rows: list[dict[str, Any]] = []
    for i, loss, _, _ in curve():
        rows.append({"step": i, "train_loss_step": round(loss, 5)})
        if i % 100 == 99:
            rows.append({"step": i, "epoch": i // 100, "train_loss_epoch": 1.5})
    if odd == "text-cell":
        rows[10]["train_loss_step"] = "oops"
    elif odd == "empty-step":
        del rows[20]["step"]
    elif odd == "short-row":
        rows[30] = {"step": 30}
    elif odd == "nan-cell":
        rows[40]["train_loss_step"] = "nan"
    header = ["epoch", "step", "train_loss_epoch", "train_loss_step"]
    csv_lines = [",".join(header)]
    for r in rows:
        cells = [str(r.get(h, "")) for h in header]
        csv_lines.append(
            ",".join(cells[:2]) if odd == "short-row" and r == {"step": 30} else ",".join(cells)
        )
    (tmp_path / "m.csv").write_text("\n".join(csv_lines) + "\n")
    jrows = [{k: (float(v) if v == "nan" else v) for k, v in r.items()} for r in rows]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jrows))
    a, b = run(tmp_path / "m.csv"), run(tmp_path / "m.jsonl")
    keys = ("rows", "first_step", "last_step", "step_key", "columns", "skipped")
    assert {k: a.one("source")[k] for k in keys} == {k: b.one("source")[k] for k in keys}
    assert a.all("metric") == b.all("metric")
    assert spike_steps(a) == spike_steps(b) == [SPIKE_ROW]


@pytest.mark.parametrize(
    "odd", ["none", "quoted-comma", "quoted-newline", "wide-then-short", "crlf"]
)
def test_csv_split_path_reads_what_csv_reader_reads(tmp_path: Path, odd: str) -> None:
    """A CSV block without quotes, each line of the header's width, is split as text; any
    other block goes through ``csv.reader``. The same rows with every data cell quoted (so every
    block goes through ``csv.reader``) give the same answer. Over 4 MiB, the odd row near the
    end, so split blocks and a ``csv.reader`` block meet in one file."""
    header = "epoch,step,train_loss_epoch,train_loss_step,val_loss"
    rows = []
    for s in range(260_000):
        rows.append(["", str(s), "", "%.5f" % (2.0 + math.sin(s / 500) + (s == 200_000)), ""])
        if s % 1000 == 999:  # Lightning's epoch and validation rows: no train_loss_step
            rows.append([str(s // 1000), str(s), "1.5", "", ""])
            rows.append([str(s // 1000), str(s), "", "", "1.6"])
    at = 255_000
    eol = "\r\n" if odd == "crlf" else "\n"

    def write(path: Path, quote_all: bool) -> None:
        lines = []
        for k, r in enumerate(rows):
            cells = [f'"{c}"' for c in r] if quote_all else list(r)
            if k == at and odd == "quoted-comma":
                cells[3] = '"2,5"'  # text in a kept column: the row is counted as skipped
            elif k in (at, at + 1) and odd == "quoted-newline":
                # one quoted train_loss_epoch cell over two lines, each of the header's width
                cells = ["", r[1], '"a' if k == at else 'b"', r[3], ""]
            elif k == at and odd == "wide-then-short":
                cells.append("7")  # a cell too many, then a cell too few: the cells add up
            elif k == at + 1 and odd == "wide-then-short":
                cells = cells[1:]  # its step under epoch: csv.reader's row has no step
            lines.append(",".join(cells))
        path.write_text(header + eol + eol.join(lines) + eol, newline="")

    write(tmp_path / "split.csv", False)
    write(tmp_path / "quoted.csv", True)
    assert (tmp_path / "split.csv").stat().st_size > 4 << 20
    a, b = run(tmp_path / "split.csv"), run(tmp_path / "quoted.csv")
    keys = ("rows", "first_step", "last_step", "step_key", "columns", "skipped")
    assert {k: a.one("source")[k] for k in keys} == {k: b.one("source")[k] for k in keys}
    assert a.one("source")["rows"] == 260_000 - (odd not in ("none", "crlf"))
    assert a.all("metric") == b.all("metric")
    assert a.all("spike") == b.all("spike")


def test_damaged_binary_logs_are_read_up_to_the_damage_and_say_so(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    d = tmp_path / "tb"
    _tb_event_file_writer(d)
    (event_file,) = d.glob("events.out.tfevents.*")
    data = bytearray(event_file.read_bytes())
    # the records: [len 8][crc 4][data len][crc 4]; find the 101st and 201st
    offs, i = [], 0
    while i < len(data):
        offs.append(i)
        i += 16 + int.from_bytes(data[i : i + 8], "little")
    body = offs[101] + 12
    data[body : body + 6] = b"\xff" * 6  # an Event that is not one: skipped
    data[offs[201]] ^= 0x55  # a length that fails its CRC: the end of what can be read
    event_file.write_bytes(bytes(data))
    r = run(event_file)
    assert r.code in (0, 1)
    w = warnings_of(r)
    assert "1 corrupt record(s) in the event file skipped" in w
    assert f"the event file is corrupt at byte {offs[201]}: nothing after it was read" in w
    assert r.one("source")["rows"] == 199 and r.one("source")["bad_lines"] == 1

    (tmp_path / "w").mkdir()
    run_dir = _wandb_run(tmp_path / "w", "hf", curve())
    (wb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    raw = bytearray(wb_file.read_bytes())
    rnd = random.Random(3)
    for _ in range(40):
        raw[rnd.randrange(64, len(raw))] = rnd.randrange(256)
    wb_file.write_bytes(bytes(raw))
    r = run(wb_file)
    assert r.code in (0, 1, 2) and not r.stderr


# -- the loss is found by what its name says, not by a list of exact names ----------------------


@pytest.mark.parametrize(
    ("columns", "loss", "parts"),
    [
        # OLMo-core's W&B/console names (olmo_core.train.callbacks: "train/CE loss" family)
        (
            ["step", "train/CrossEntropyLoss", "val/CrossEntropyLoss", "lr"],
            "train/CrossEntropyLoss",
            [],
        ),
        # a DDP run logging the rank-local loss beside nothing else
        (["step", "train_loss_local", "lr"], "train_loss_local", []),
        # ultralytics: three parts and no total: each is analysed
        (
            ["epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss", "val/box_loss"],
            "train/box_loss",
            ["train/cls_loss", "train/dfl_loss"],
        ),
        # a loss word split by its separator
        (["step", "train/cross_entropy", "lr"], "train/cross_entropy", []),
        # a held-out loss only: analysed, and said to be held-out
        (["step", "val_nll"], "val_nll", []),
    ],
)
def test_the_loss_is_chosen_by_what_its_name_says(
    tmp_path: Path, columns: list[str], loss: str, parts: list[str]
) -> None:
    p = tmp_path / "log.csv"
    rows = [",".join(columns)]
    for i in range(120):
        vals = [str(i)] + [f"{2.5 * math.exp(-i / 40) + 0.3 + 0.01 * (i % 3):.4f}"] * (
            len(columns) - 1
        )
        rows.append(",".join(vals))
    p.write_text("\n".join(rows) + "\n")
    r = run(p)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == loss
    held = [c for c in columns if c.startswith("val/")]  # analysed beside a train-side loss
    assert src["columns"].get("val_loss") == (held[0] if held else None)
    assert src["metrics"] == ["loss", *parts] + (["lr"] if "lr" in columns else []) + (
        ["val_loss"] if held else []
    )
    said = src["why"]["loss"]  # every pick says why, in the source record
    assert said.startswith(f"loss <- {loss!r}: ")
    held_out = [w["message"] for w in r.all("warning") if w["message"].startswith("loss <- ")]
    assert ("held-out" in said) == loss.startswith("val") == bool(held_out)


def test_a_held_out_loss_is_analysed_beside_the_train_loss(tmp_path: Path) -> None:
    """A Keras CSVLogger file (keras.callbacks.CSVLogger: epoch, then the logs dict's keys
    sorted, val_ ones included): val_loss jumps to 7.4 between 1.44 and 1.29 at epoch 1 of
    17 while the train loss falls smoothly. Before, only the train loss was analysed and
    the log was "no spikes"."""
    val = [1.44, 7.4, 1.29] + [1.2 - 0.02 * i for i in range(14)]
    lines = ["epoch,accuracy,loss,val_accuracy,val_loss"]
    for e, v in enumerate(val):
        lines.append(f"{e},{0.5 + 0.02 * e:.3f},{2.0 - 0.08 * e:.4f},{0.6 + 0.01 * e:.3f},{v}")
    p = tmp_path / "training.log"
    p.write_text("\n".join(lines) + "\n")
    r = run(p)
    src = r.one("source")
    assert (src["columns"]["loss"], src["columns"]["val_loss"]) == ("loss", "val_loss")
    assert src["why"]["val_loss"] == "val_loss <- 'val_loss': the held-out loss by name"
    assert [(s["metric"], s["step"]) for s in r.all("spike")] == [("val_loss", 1)]
    # a log whose only loss is held out analyses it once, as the loss
    only = tmp_path / "val.csv"
    only.write_text(
        "epoch,val_loss,test_loss\n" + "".join(f"{e},{v},{v}\n" for e, v in enumerate(val))
    )
    src = run(only).one("source")
    assert src["columns"]["loss"] == "val_loss" and "val_loss" not in src["metrics"]
    # and one with no held-out loss is not said to lack one
    plain = tmp_path / "train.csv"
    plain.write_text("step,loss\n" + "".join(f"{e},{2 - 0.01 * e}\n" for e in range(50)))
    assert not [w for w in run(plain).all("warning") if "val_loss" in w["message"]]


@pytest.mark.parametrize(
    ("row", "step_key"),
    [
        # a counter no trainer we know names so: by its name and its whole numbers that rise
        (lambda i: {"opt_step": 10 * i, "consumed_samples": 640 * i}, "opt_step"),
        (lambda i: {"trainer_step": i, "tokens_seen": 4096 * i}, "trainer_step"),
        # a rate, a setting and a float are not the counter, whatever their names say
        (
            lambda i: {"steps_per_sec": 3.1 + 0.01 * (i % 3), "max_steps": 1000, "n_iter": 5 * i},
            "n_iter",
        ),
        (lambda i: {"update_norm": 0.5 + 0.01 * i, "updates_total": 500}, None),
    ],
)
def test_the_step_key_is_found_by_its_name_and_values(
    tmp_path: Path, row: Any, step_key: str | None
) -> None:
    """Before, a step counter whose name was not on the list ('opt_step' at 10, 20, ...)
    gave "no step key": the rows were renumbered 0..N, and every step said was wrong."""
    rows = [{**row(i), "train/loss": 2 - 0.001 * i} for i in range(1, 200)]
    src = run(_rows_log(tmp_path / "log.jsonl", rows)).one("source")
    assert src["step_key"] == step_key, src
    if step_key is not None:
        assert src["first_step"] == rows[0][step_key] and src["last_step"] == rows[-1][step_key]


def test_batch_fields_are_found_by_their_names_and_values(tmp_path: Path) -> None:
    """A batch's bucket, length and tokens and the epoch under names no trainer we know
    uses: before, none was found ("no batch fields"), and the composition analysis that
    needs them never ran. Clocks and rates of tokens are not a batch's tokens."""
    rng = random.Random(3)
    rows = []
    for i in range(1, 400):
        length = rng.choice([128, 256, 512, 1024])
        rows.append(
            {
                "opt_step": i,
                "epoch_time": 1.5 * i,  # a clock that rises too: not the epoch
                "cur_epoch": i // 100,
                "ctx_len": length,
                "tokens_seen": 4096 * i,
                "tokens_per_sec": 5000.0 + rng.random(),
                "tokens_per_batch": 8 * length,
                "len_bucket": f"b{length}",
                "loss": 2 - 0.002 * i + 0.1 * (length == 1024),
            }
        )
    src = run(_rows_log(tmp_path / "log.jsonl", rows)).one("source")
    cols = src["columns"]
    assert (cols["epoch"], cols["seq_len"], cols["tokens"]) == (
        "cur_epoch",
        "ctx_len",
        "tokens_per_batch",
    )
    assert cols["bucket"] == "len_bucket", src


def test_a_step_logged_twice_is_warned_only_where_a_value_differs(tmp_path: Path) -> None:
    """HF's log_history repeats the train row's step and epoch in its eval row: merged,
    nothing lost, no warning. Two different losses at one step: the later one, warned."""
    rows = [{"step": s, "epoch": s / 10, "loss": 2 - 0.01 * s} for s in range(40)]
    same = []
    for row in rows:  # an eval row after every tenth train row, at its step and epoch
        same.append(row)
        if row["step"] % 10 == 9:
            same.append({"step": row["step"], "epoch": row["epoch"], "eval_loss": row["loss"]})
    r = run(_rows_log(tmp_path / "same.jsonl", same))
    assert not [w for w in r.all("warning") if "logged twice" in w["message"]]
    assert r.one("source")["columns"]["val_loss"] == "eval_loss"
    clash = [*rows[:20], {"step": 19, "loss": 1.5}, *rows[20:]]
    r = run(_rows_log(tmp_path / "clash.jsonl", clash))
    assert "1 steps were logged twice: the later value is used" in [
        w["message"] for w in r.all("warning")
    ]


def _falling(i: int) -> float:
    return round(2.5 * math.exp(-i / 40) + 0.3 + 0.01 * (i % 3), 4)


def _rows_log(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("name", "rows", "loss", "passed"),
    [
        # a constant that says loss beside the loss that varies
        (
            "constant",
            [
                {"step": i, "train/loss_ema_const": 0.5, "train/nll": _falling(i)}
                for i in range(100)
            ],
            "train/nll",
            "'train/loss_ema_const' (constant 0.5)",
        ),
        # a run's summary row (HF's last log_history row has train_loss, the run's mean)
        (
            "set-once",
            [{"step": i, "train/nll": _falling(i)} for i in range(100)]
            + [{"step": 100, "train/total_loss": 1.1, "train_runtime": 812.5}],
            "train/nll",
            "'train/total_loss' (set once)",
        ),
        # an AMP loss scale (torch.cuda.amp.GradScaler: 65536, halved on overflow) varies
        (
            "amp-scale",
            [
                {"step": i, "train/loss_scaler": 65536.0 / (1 + i % 2), "train/nll": _falling(i)}
                for i in range(100)
            ],
            "train/nll",
            "'train/loss_scaler' (an AMP loss scale)",
        ),
    ],
)
def test_the_loss_is_never_a_constant_a_set_once_value_or_an_amp_scale(
    tmp_path: Path, name: str, rows: list[dict[str, Any]], loss: str, passed: str
) -> None:
    r = run(_rows_log(tmp_path / f"{name}.jsonl", rows))
    src = r.one("source")
    assert src["columns"]["loss"] == loss, src
    assert f"passed over: {passed}" in src["why"]["loss"]


def test_an_amp_loss_scale_beside_a_loss_no_name_calls_a_loss_is_no_loss(tmp_path: Path) -> None:
    """An audit's CSV: the loss is 'objective', beside a constant AMP scale of 65536: no
    loss by name, and never the scale; the error names 'objective' first to pick."""
    p = tmp_path / "log.csv"
    rows = "".join(f"{_falling(i)},65536,{1 + 0.1 * (i % 5):.3f}\n" for i in range(100))
    p.write_text("objective,loss_scale,grad_norm\n" + rows)
    r = run(p)
    err = r.one("error")
    assert r.code == 2 and err["kind"] == "no-loss", r.records
    assert err["numeric"][0] == "objective" and "loss_scale" not in err["numeric"]


@pytest.mark.parametrize(
    ("name", "rows", "role", "key", "passed"),
    [
        # Lightning's grad_norm(): per-layer 'grad_2.0_norm/<param>' and their total
        (
            "lightning-grad-norm",
            [
                {
                    "step": i,
                    "loss": _falling(i),
                    "grad_2.0_norm/layer.weight": 0.5 + 0.01 * (i % 4),
                    "grad_2.0_norm_total": 1.0 + 0.01 * (i % 4),
                }
                for i in range(100)
            ],
            "grad_norm",
            "grad_2.0_norm_total",
            None,
        ),
        # a post-clip norm that is always the clip value, beside the norm before clipping
        (
            "clipped",
            [
                {"step": i, "loss": _falling(i), "grad_norm": 1.0, "grad_norm_unclipped": 2 + i % 5}
                for i in range(100)
            ],
            "grad_norm",
            "grad_norm_unclipped",
            "'grad_norm' (constant 1)",
        ),
        # ultralytics' results.csv: one lr per param group; pg0 holds the biases, whose
        # warm-up falls from warmup_bias_lr 0.1, the weights' pg1 and pg2 rise together
        (
            "ultralytics-lr",
            [
                {
                    "step": i,
                    "loss": _falling(i),
                    "lr/pg0": max(0.01, 0.07 - 0.03 * i),
                    "lr/pg1": 0.01 * min(1, (i + 1) / 3),
                    "lr/pg2": 0.01 * min(1, (i + 1) / 3),
                }
                for i in range(100)
            ],
            "lr",
            "lr/pg1",
            None,
        ),
        # a config row first: lr is the setting, learning_rate the schedule
        (
            "config-row",
            [{"lr": 3e-4, "seed": 1}]
            + [
                {"step": i, "loss": _falling(i), "learning_rate": 3e-4 * min(1, (i + 1) / 10)}
                for i in range(100)
            ],
            "lr",
            "learning_rate",
            "'lr' (set once)",
        ),
    ],
)
def test_grad_norm_and_lr_are_chosen_by_name_and_content(
    tmp_path: Path,
    name: str,
    rows: list[dict[str, Any]],
    role: str,
    key: str,
    passed: str | None,
) -> None:
    src = run(_rows_log(tmp_path / f"{name}.jsonl", rows)).one("source")
    assert src["columns"][role] == key, src
    why = src["why"][role]
    assert why.startswith(f"{role} <- {key!r}: ")
    assert passed is None or f"passed over: {passed}" in why
    if name == "ultralytics-lr":
        assert "the schedule most of the param groups share" in why


def test_every_pick_says_why_in_the_report(tmp_path: Path) -> None:
    rows = [
        {"step": i, "loss": _falling(i), "learning_rate": 1e-4, "grad_norm": 1 + 0.01 * (i % 7)}
        for i in range(100)
    ]
    log = _rows_log(tmp_path / "log.jsonl", rows)
    text = tl.render_report(tl.build_report("local", str(log), run(log).records))
    assert "loss <- 'loss': the train-side loss by name" in text
    assert "lr <- 'learning_rate': the learning rate by name; constant 0.0001" in text
    assert "grad_norm <- 'grad_norm': the gradient norm by name" in text


def test_no_name_that_says_loss_is_still_no_loss(tmp_path: Path) -> None:
    """``lossless`` is not a loss, and a column that no name calls a loss is never chosen."""
    p = tmp_path / "log.csv"
    p.write_text("step,lossless_ratio,score\n" + "".join(f"{i},{i / 10},{i}\n" for i in range(50)))
    r = run(p)
    assert r.code == 2 and r.one("error")["kind"] == "no-loss"


def test_a_quoted_newline_at_a_block_boundary_stays_in_its_cell(tmp_path: Path) -> None:
    """Lines are handled a block at a time: a quoted cell whose newline is the last one of a
    block goes on in the next block, and its row is read whole (not a row and a stray
    ``b"`` counted as skipped). The first rows (the head the columns are chosen from) are
    read at once, so the boundary is a later block's."""
    block = 4 * shipped("trainlog.source").BLOCK  # the 4th block's end: past the first rows
    lines, size, s = ["step,loss,note"], len("step,loss,note") + 1, 0
    while size < block - 64:
        lines.append(f"{s},{2.0 - s * 1e-4:.5f},")
        size += len(lines[-1]) + 1
        s += 1
    opened = f'{s},{2.0 - s * 1e-4:.5f},"a'
    lines.append(opened + "x" * (block - size - 1 - len(opened)))  # its newline: the block's last
    lines.append('b"')
    lines += [f"{k},{2.0 - k * 1e-4:.5f}," for k in range(s + 1, s + 2000)]
    path = tmp_path / "notes.csv"
    path.write_text("\n".join(lines) + "\n")
    assert path.read_bytes()[block - 1 : block + 3] == b'\nb"\n'
    src = run(path).one("source")
    assert src["rows"] == s + 2000 and src["skipped"] == 0 and src["last_step"] == s + 1999


def test_an_ultralytics_results_csv_with_padded_names_is_read(tmp_path: Path) -> None:
    """ultralytics 8.0's BaseTrainer.save_metrics writes each cell right-aligned ('%23s'),
    names with parentheses (metrics/mAP50-95(B)): it is CSV, not text."""
    cols = ["epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/mAP50-95(B)"]
    lines = [",".join(f"{c:>23}" for c in cols)]
    for e in range(1, 61):
        cls = 6.0 if e == 30 else 2.0 * math.exp(-e / 20) + 0.4
        vals = [f"{e}", f"{1.5 * math.exp(-e / 30) + 0.3:.5g}", f"{cls:.5g}", "1.1", "0.3"]
        lines.append(",".join(f"{v:>23}" for v in vals))
    p = tmp_path / "results.csv"
    p.write_text("\n".join(lines) + "\n")
    r = run(p)
    src = r.one("source")
    assert src["format"] == "csv" and src["columns"]["loss"] == "train/box_loss"
    assert [s["metric"] for s in r.all("spike")] == ["train/cls_loss"], r.all("spike")


def test_no_loss_hints_are_series_that_vary_ranked_by_how_loss_like(tmp_path: Path) -> None:
    # A run's own JSONL as a new user writes it: a config row first (seed, sizes, the node's
    # number, the lr), then per-step rows carrying the rank, the world size, a sample id, a
    # token counter and a clock beside the series that matter; no name says loss.
    rng = random.Random(3)
    rows: list[dict[str, Any]] = [
        {"seed": 1234, "n_layer": 12, "lr": 3e-4, "node": "07", "hostname": "gpu-07"}
    ]
    for i in range(200):
        rows.append(
            {
                "iter": i,
                "acc": 0.2 + 0.6 * (1 - math.exp(-i / 50)) + rng.gauss(0, 0.01),
                "rank": 0,
                "world_size": 8,
                "sample_id": rng.randrange(10**6),
                "tokens_seen": 4096 * (i + 1),
                "time": 1.7e9 + 2.5 * i,
                "objective": 0.4 + 2.4 * math.exp(-i / 60) + rng.gauss(0, 0.02),
                "throughput": 9000 + rng.gauss(0, 50),
            }
        )
    p = tmp_path / "run.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run(p)
    assert r.code == 2
    err = r.one("error")
    assert err["kind"] == "no-loss"
    # only series that vary, the falling one first
    assert err["numeric"][0] == "objective"
    assert set(err["numeric"]) == {"objective", "acc", "throughput"}
    # and what was left out, with why, on one line of the message
    (line,) = [ln for ln in err["message"].splitlines() if "left out" in ln]
    groups = line.split("left out:", 1)[1].split(";")
    for name, why in [
        ("rank", "constant"),
        ("world_size", "constant"),
        ("seed", "set once"),
        ("n_layer", "set once"),
        ("lr", "set once"),
        ("node", "set once"),
        ("sample_id", "id"),
        ("tokens_seen", "counter"),
        ("time", "counter"),
    ]:
        (group,) = [g for g in groups if re.search(rf"(?<![\w-]){name}(?![\w-])", g)]
        assert why in group, (name, why, line)
