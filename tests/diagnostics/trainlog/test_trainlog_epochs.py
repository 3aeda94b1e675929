"""A text log that states the epoch as ``i/N`` and no batch or step counter
(``remote/trainlog/templates.py``): the step is the epoch, said so, and an epoch counter that
falls back and climbs again is a second run appended, said, the last one read, ``--run-part``
choosing another, and no spike invented at the new run's first loss.

The consoles are written to the shapes their trainers print (Keras's ``model.fit``, quoted
beside each; a hand-rolled ``Epoch [i/N]`` trainer's train and test lines); one public run is
a real Keras console (tests/public_runs.md, ``keras-mnist-convnet-console``).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from tests.harness import DATA
from tests.trainlog_kit import Run, run

KERAS = DATA / "public" / "keras-mnist-convnet-console" / "mnist_convnet_fit.txt"


def _warnings(r: Run) -> str:
    return "\n".join(w["message"] for w in r.all("warning"))


def _metrics(r: Run) -> dict[str, int]:
    return {m["label"]: m["n"] for m in r.all("metric")}


def _keras_line(style: str, loss: float, acc: float, rng: random.Random) -> str:
    if style == "keras2":
        # keras 2 ProgbarLogger, verbose=1, the bar as a file keeps its last state:
        #   1875/1875 [==============================] - 5s 2ms/step - loss: 0.2950 - ...
        bar = "[==============================]"
        head = f"1875/1875 {bar} - {rng.randint(3, 6)}s {rng.randint(2, 3)}ms/step"
        return (
            f"{head} - loss: {loss:.4f} - accuracy: {acc:.4f} - val_loss: {loss * 1.1:.4f} "
            f"- val_accuracy: {acc - 0.01:.4f}"
        )
    if style == "keras3":
        # keras 3: metrics sorted, the bar drawn with U+2501
        #   1875/1875 ━━━━━━━━━━━━━━━━━━━━ 5s 2ms/step - accuracy: 0.91 - loss: 0.29 - ...
        return (
            f"1875/1875 {chr(0x2501) * 20} {rng.randint(3, 6)}s {rng.randint(2, 3)}ms/step - "
            f"accuracy: {acc:.4f} - loss: {loss:.4f} - val_accuracy: {acc - 0.01:.4f} - "
            f"val_loss: {loss * 1.1:.4f}"
        )
    # verbose=2: one line an epoch, no bar: "1875/1875 - 4s - loss: 0.5850 - ..."
    return (
        f"1875/1875 - {rng.randint(3, 6)}s - loss: {loss:.4f} - accuracy: {acc:.4f} - "
        f"val_loss: {loss * 1.1:.4f} - val_accuracy: {acc - 0.01:.4f}"
    )


def _keras(path: Path, style: str, runs: int = 1, epochs: int = 12) -> Path:
    """Keras's model.fit console: ``Epoch {e}/{epochs}`` on its own line, then the epoch's
    line; ``runs`` fits appended to one file, each a little worse than the last."""
    rng = random.Random(5)
    out = ['Model: "sequential"', "Total params: 34,826"]
    for r in range(runs):
        for e in range(1, epochs + 1):
            loss = 0.6 / e + 0.3 * r + rng.uniform(0, 0.01)
            out.append(f"Epoch {e}/{epochs}")
            out.append(_keras_line(style, loss, 1 - loss / 3, rng))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("style", ["keras2", "keras3", "verbose2"])
def test_keras_console_step_is_the_epoch_of_its_epoch_line(tmp_path: Path, style: str) -> None:
    """Before, each epoch's line was read at '1875 x the epochs the i/N restarted' and i
    never restarts (1875/1875 every time): one step, 11 'restarts' invented."""
    r = run(_keras(tmp_path / "fit.log", style))
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert src["columns"]["val_loss"] == "val_loss"
    assert (src["first_step"], src["last_step"], src["stride"]) == (1, 12, 1)
    assert _metrics(r)["loss"] == 12 and _metrics(r)["val_loss"] == 12
    said = _warnings(r)
    assert "the step is the epoch" in said
    assert "restart" not in said


def test_keras_fits_appended_to_one_console_are_two_runs(tmp_path: Path) -> None:
    log = _keras(tmp_path / "fit.log", "keras2", runs=2)
    r = run(log)
    said = _warnings(r)
    assert "the epoch counter falls from 12 to 1 at line 28: a second run" in said
    assert "run part 2 of 2 read" in said
    assert _metrics(r)["loss"] == 12
    assert not r.all("spike")
    first = run(log, "--run-part", "1")
    assert "run part 1 of 2 read" in _warnings(first)
    assert _metrics(first)["loss"] == 12


def _hand_rolled(path: Path, runs: int = 1, epochs: int = 20) -> Path:
    # a trainer's own prints after each epoch, as in countless tutorials:
    #   print(f"Epoch [{epoch+1}/{num_epochs}], Train Loss: {train_loss:.4f}, "
    #         f"Train Acc: {train_acc:.2f}%")
    #   print(f"Epoch [{epoch+1}/{num_epochs}], Test Loss: {test_loss:.4f}, "
    #         f"Test Acc: {test_acc:.2f}%")
    out = ["Using device: cuda", "Files already downloaded and verified"]
    for r in range(runs):
        for e in range(1, epochs + 1):
            loss = 2.3 * math.exp(-e / 6) + 0.2 + 0.4 * r
            out.append(f"Epoch [{e}/{epochs}], Train Loss: {loss:.4f}, Train Acc: {40 + e:.2f}%")
            out.append(
                f"Epoch [{e}/{epochs}], Test Loss: {loss + 0.1:.4f}, Test Acc: {38 + e:.2f}%"
            )
    path.write_text("\n".join(out) + "\n")
    return path


def test_hand_rolled_epoch_of_n_train_and_test_lines_on_the_epoch(tmp_path: Path) -> None:
    """Before: 'at the row (the line states no step)', steps 0..19."""
    r = run(_hand_rolled(tmp_path / "train.log"))
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == "train_loss"
    assert src["columns"]["val_loss"] == "test_loss"
    assert (src["first_step"], src["last_step"]) == (1, 20)
    assert _metrics(r)["loss"] == 20 and _metrics(r)["val_loss"] == 20
    assert "the epoch each line states (no step or batch counter: the step is the epoch)" in (
        _warnings(r)
    )


def test_hand_rolled_runs_appended_no_spike_at_the_new_runs_first_loss(tmp_path: Path) -> None:
    """Two runs in one file, the second worse: before, read as one series on row numbers,
    the second run's first loss was a spike at row 20; now a second run, said."""
    log = _hand_rolled(tmp_path / "train.log", runs=2)
    r = run(log)
    said = _warnings(r)
    assert "the epoch counter falls from 20 to 1 at line 43: a second run" in said
    assert "run part 2 of 2 read" in said
    assert not r.all("spike")
    assert _metrics(r)["loss"] == 20
    first = run(log, "--run-part", "1")
    assert "run part 1 of 2 read" in _warnings(first)
    assert first.one("source")["last_step"] == 20


def test_one_line_kind_with_a_bracketed_epoch_is_read_on_the_epoch(tmp_path: Path) -> None:
    """``Epoch [3/15], Loss: 0.61`` alone, two runs: before, row numbers and a spike at the
    second run's first line."""
    lines = [
        f"Epoch [{e}/15], Loss: {2.0 / e + 0.5 * r:.4f}" for r in range(2) for e in range(1, 16)
    ]
    log = tmp_path / "single.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert (src["first_step"], src["last_step"]) == (1, 15)
    assert "a second run (or a restart from scratch) appended" in _warnings(r)
    assert not r.all("spike")


def test_public_keras_console_read_on_its_epochs() -> None:
    """keras-io's MNIST convnet: 11 finished epochs, the page's output stopping inside the
    12th. Before: one step (422), ten restarts invented."""
    r = run(KERAS)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert src["columns"]["val_loss"] == "val_loss"
    assert (src["first_step"], src["last_step"]) == (1, 11)
    assert _metrics(r)["loss"] == 11 and _metrics(r)["val_loss"] == 11
    said = _warnings(r)
    assert "follows ('Epoch i/N' on a line of its own)" in said
    assert "restart" not in said


def test_model_name_then_epoch_of_n_two_runs_said_no_spike(tmp_path: Path) -> None:
    """``resnet-50 - Epoch 3/30 - loss: ...``, two runs: before, the pairs of each line on row
    numbers, the second run's first loss a spike at row 30, nothing said."""
    lines = [
        f"resnet-50 - Epoch {e}/30 - loss: {1.5 / e + 0.3 * r:.4f} - lr: 0.1"
        for r in range(2)
        for e in range(1, 31)
    ]
    log = tmp_path / "resnet.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert (src["first_step"], src["last_step"]) == (1, 30)
    said = _warnings(r)
    assert "the epoch counter falls from 30 to 1 at line 31: a second run" in said
    assert "the step is the epoch" in said
    assert not r.all("spike")


@pytest.mark.parametrize(
    "line",
    [
        "Epoch {e}/30 - loss: {loss:.4f} - acc: {acc:.4f} - lr: 0.001",
        "Epoch [{e}/30] loss: {loss:.4f}, learning rate: 0.0010",
    ],
)
def test_a_constant_lr_on_a_one_kind_epoch_log_is_the_lr(tmp_path: Path, line: str) -> None:
    """An lr that never moved is still the lr (a schedule that was never set is worth
    saying): a line kind's constant field by an lr name is kept, where a constant field by
    any other name is a constant of the template (Drain's)."""
    rng = random.Random(1)
    rows = []
    for e in range(1, 31):
        loss = 2 * 0.9**e + 0.1 + rng.gauss(0, 0.01)
        rows.append(line.format(e=e, loss=loss, acc=0.5 + 0.015 * e) + " - seed: 7")
    (tmp_path / "train.log").write_text("\n".join(rows) + "\n")
    r = run(tmp_path / "train.log")
    src = r.one("source")
    assert "lr" in src["columns"] and "constant 0.001" in src["why"]["lr"]
    assert not any("seed" in k for k in src["columns"].values())
    assert _metrics(r)["lr"] == 30 and r.code == 0
