"""Printed-console shapes issue 35's seventh held-out set found misread (tests/public_runs.md,
"Held-out runs, seventh set"), and the sixth set's clu evaluations, each made here: the rule
each fix adds is one for any log of the shape, never for the file it was seen in.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from tests.trainlog_kit import (
    RESTART_SAID,
    TWO_RUNS_SAID,
    close,
    loss_spikes,
    run,
    said,
    said_apart_from_path,
    series,
    source,
)


def _loss(i: int, start: float = 3.0) -> float:
    """A falling loss with a small deterministic wiggle (no spike, no plateau)."""
    return round(0.4 + (start - 0.4) * math.exp(-i / 30) + 0.01 * math.sin(i * 1.7), 4)


# ---------------------------------------------------------------------------------------------
# ``[e, i] loss: x``: the epoch and the batch within it, in brackets before each line


def _pairs(path: Path, epochs: int = 3, per_epoch: int = 6, every: int = 500) -> Path:
    """``[e, i] loss: x`` for e = 1 .. ``epochs``, i = every .. per_epoch x every; after the
    training, a throughput line of another kind whose ``0/N`` never moves its ``0``."""
    with open(path, "w") as f:
        f.write("Files already downloaded and verified\n")
        n = 0
        for e in range(1, epochs + 1):
            for i in range(every, per_epoch * every + 1, every):
                f.write(f"[{e}, {i:5d}] loss: {_loss(n):.3f}\n")
                n += 1
        for k in range(1, 9):
            f.write(f"[INFO 12:00:{k:02d}] 0/{50 * k}, SamplesPerSec={1290 + k * 0.37:.4f}\n")
        f.write("Finished Training\n")
    return path


def test_an_epoch_and_batch_pair_in_brackets_is_the_step(tmp_path: Path) -> None:
    """Three epochs of six lines: 18 points on epoch x 3000 + batch (500 .. 9000), the
    batch's fall at each epoch no restart; the samples/s lines (``0/N``: its ``0`` never
    moves, no progress) are not the run's counter."""
    r = run(_pairs(tmp_path / "train.log"))
    src = source(r)
    assert "sample" not in (src["columns"]["loss"] or "").lower(), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 18, loss
    assert close(loss["median"], statistics.median(round(_loss(n), 3) for n in range(18)))
    assert (src["first_step"], src["last_step"]) == (500, 9000), src
    assert not RESTART_SAID.search(said_apart_from_path(r)), said(r)
    assert loss_spikes(r) == []


def test_a_pair_whose_first_number_changes_as_often_is_no_epoch(tmp_path: Path) -> None:
    """``[a, b] loss: x`` where both change at every line (a coordinate, not an epoch and
    its batch): no step is made of them."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(12):
            f.write(f"[{n + 1}, {2 * n + 3}] loss: {_loss(n):.3f}\n")
    r = run(path)
    assert "epoch x" not in said(r), said(r)


# ---------------------------------------------------------------------------------------------
# the first line of a kind with no time since the one before (TF Estimator's ``loss = x,
# step = N (0.065 sec)``, whose step-1 line has no ``(... sec)``)


def test_a_line_cut_short_of_a_trailing_time_continues_its_kind(tmp_path: Path) -> None:
    """``loss = x, step = 1`` then ``loss = x, step = N (0.06 sec)`` every 100 steps: one
    series of 8 points from step 1, said so."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        f.write("INFO:tensorflow:Create CheckpointSaverHook.\n")
        f.write(f"INFO:tensorflow:loss = {_loss(0) * 50:.4f}, step = 1\n")
        for n in range(1, 8):
            f.write(f"INFO:tensorflow:global_step/sec: {1500 + 7 * n:.2f}\n")
            f.write(f"INFO:tensorflow:loss = {_loss(n):.4f}, step = {100 * n + 1} (0.06{n} sec)\n")
        f.write("INFO:tensorflow:Loss for final step: 0.5.\n")
    r = run(path)
    src = source(r)
    assert not re.search(r"sec|global", src["columns"]["loss"]), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 8, loss
    assert (src["first_step"], src["last_step"]) == (1, 701), src
    assert "continue one series" in said(r), said(r)
    assert not RESTART_SAID.search(said_apart_from_path(r)), said(r)


# ---------------------------------------------------------------------------------------------
# ``Train: e [i/N]`` lines, ``Test: [i/M]`` lines after each epoch, two runs in one file


def _train_test(f, runs: list[int], epochs: int = 2) -> None:
    n = 0
    for per_epoch in runs:
        for e in range(epochs):
            for i in (0, per_epoch // 2):
                f.write(
                    f"Train: {e} [{i:4d}/{per_epoch} ({100 * i // per_epoch:3d}%)]  "
                    f"Loss: {_loss(n):.3f} ({_loss(n) + 0.05:.3f})  Time: 0.{300 + n}s,  "
                    f"{400 + n}.00/s  LR: 1.000e-03  Data: 0.0{40 + n} (0.050)\n"
                )
                n += 1
            for i in (0, 10):
                f.write(
                    f"Test: [{i:4d}/10]  Time: 0.{500 + n} (0.600)  Loss: {_loss(n, 4.0):7.3f} "
                    f"({_loss(n, 4.0):6.3f})  Acc@1: {10 + n:7.3f} ({10 + n:7.3f})\n"
                )
        f.write("*** Best metric: 0.5 (epoch 1)\n")


def test_the_number_before_a_bracketed_progress_after_the_kind_is_the_epoch(
    tmp_path: Path,
) -> None:
    """``Train: e [i/N]``: ``e`` (named by no word but the line's kind) is the epoch; two
    runs (the epoch falls back to 0): both said, the last one's train loss (4 points) read,
    the ``Test`` lines' loss apart and the last run's only."""
    path = tmp_path / "console.md"
    with open(path, "w") as f:
        _train_test(f, [60, 30])
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    assert TWO_RUNS_SAID.search(said_apart_from_path(r)), said(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 4, loss
    assert close(loss["median"], statistics.median(round(_loss(n), 3) for n in range(4, 8)))
    assert (src["first_step"], src["last_step"]) == (0, 45), src
    for held in series(r, "val_loss"):
        assert held["n"] <= 4, held


# ---------------------------------------------------------------------------------------------
# a logger's prefix, then the step alone in brackets: clu's ``writer.py:48] [2000] eval_...``


def test_a_step_in_brackets_after_a_logger_prefix_places_an_evaluation(tmp_path: Path) -> None:
    """absl lines: per-step train lines that state their step in words, then two evaluations
    ``[N] eval_accuracy=..., eval_loss=...`` whose step is the bracketed number after the
    prefix: the held-out loss, its 2 points, not passed over as set once."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(20):
            f.write(
                f"I0325 14:00:{n + 10:02d}.976243 1302955 train.py:652] Finished training step "
                f"{n}. Loss: {_loss(n) * 3:.5f}, LR: 0.00003\n"
            )
        for k, step in enumerate((2000, 4000)):
            f.write(
                f"I0325 14:0{4 + 3 * k}:37.610165 1302455 logging_writer.py:48] [{step}] "
                f"steps_per_sec={5.2 + k:.4f}\n"
            )
            f.write(
                f"I0325 14:0{5 + 3 * k}:24.184369 1302455 logging_writer.py:48] [{step}] "
                f"eval_accuracy={0.40 + 0.02 * k:.4f}, eval_loss={3.2 - 0.2 * k:.4f}\n"
            )
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    (held,) = series(r, "val_loss")
    assert held["n"] == 2 and close(held["median"], 3.1), held
    assert "eval_loss" in src["columns"]["val_loss"], src


# ---------------------------------------------------------------------------------------------
# a README's command: its flags are no series


def test_a_command_s_flags_are_no_series(tmp_path: Path) -> None:
    """A README: a command written out one flag a line (``--learning_rate=2e-5 \\``), three
    times with other values, and an evaluation's summary: no train loss anywhere. The flags
    are not read as series, nor offered as numeric ones (what was asked is no value a run
    printed)."""
    path = tmp_path / "README.md"
    with open(path, "w") as f:
        for k, lr in enumerate(("2e-5", "3e-5", "5e-5")):
            f.write("python run_classifier.py \\\n")
            f.write(f"  --learning_rate={lr} \\\n  --num_train_epochs={k + 2}.0 \\\n")
            f.write(f"  --max_seq_length {64 * (k + 1)} \\\n  --output_dir=/tmp/out/\n\n")
        f.write("***** Eval results *****\n  eval_accuracy = 0.845588\n  eval_loss = 0.505248\n")
    r = run(path)
    assert not re.search(r"learning_rate|num_train_epochs|max_seq_length", said(r)), said(r)
