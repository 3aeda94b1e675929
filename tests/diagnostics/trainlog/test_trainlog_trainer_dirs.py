"""Run directories as real trainers' own loggers leave them (tests/data/trainer-dirs/,
written by Lightning, transformers' Trainer, Keras and stable-baselines3 themselves; see its
NOTICE.md): given the directory, train-log finds the trainer's log by its conventional name,
says whose name it found, and reads every value the library wrote.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.harness import DATA
from tests.trainlog_kit import Run, run

DIRS = DATA / "trainer-dirs"


def _n(r: Run) -> dict[str, int]:
    return {m["label"]: m["n"] for m in r.all("metric")}


def _csv_count(path: Path, column: str) -> int:
    with path.open(newline="") as f:
        return sum(1 for row in csv.DictReader(f) if row[column] not in ("", None))


def test_lightning_csvlogger_metrics_csv() -> None:
    log = DIRS / "lightning" / "lightning_logs" / "version_0" / "metrics.csv"
    r = run(DIRS / "lightning")
    src = r.one("source")
    assert src["path"] == str(log) and "Lightning metrics.csv" in src["chosen_from"]
    assert src["columns"]["loss"] == "train_loss" and src["columns"]["val_loss"] == "val_loss"
    n = _n(r)
    assert n["loss"] == _csv_count(log, "train_loss") and n["val_loss"] == 3


def test_hf_trainer_state_of_the_last_checkpoint() -> None:
    last = DIRS / "hf" / "checkpoint-48" / "trainer_state.json"
    r = run(DIRS / "hf")
    src = r.one("source")
    assert src["path"] == str(last) and src["format"] == "trainer_state"
    assert "2 older checkpoint copies" in src["chosen_from"]
    history = json.loads(last.read_text())["log_history"]
    n = _n(r)
    assert n["loss"] == sum(1 for h in history if "loss" in h)
    assert n["val_loss"] == sum(1 for h in history if "eval_loss" in h) == 3


def test_keras_csvlogger_training_log_is_found_by_its_name() -> None:
    log = DIRS / "keras" / "training.log"
    r = run(DIRS / "keras")
    src = r.one("source")
    assert src["path"] == str(log) and src["format"] == "csv"
    assert "Keras training.log" in src["chosen_from"], src["chosen_from"]
    assert _n(r) == {"loss": 5, "val_loss": 5}


@pytest.mark.parametrize("monitor_only", [False, True])
def test_sb3_progress_csv_before_its_monitor_csv(tmp_path: Path, monitor_only: bool) -> None:
    """progress.csv holds the losses; the Monitor's episodes (no loss) are the last resort:
    alone, refused for want of a loss with the columns there are, read past the ``#{...}``
    line the Monitor writes above its header (before, that line was taken for the header)."""
    where = DIRS / "sb3"
    if monitor_only:
        where = tmp_path
        (tmp_path / "0.monitor.csv").write_bytes((DIRS / "sb3" / "0.monitor.csv").read_bytes())
    r = run(where)
    if monitor_only:
        assert r.code == 2
        err = r.one("error")
        assert "no loss" in err["message"] and sorted(err["numeric"]) == ["l", "r", "t"], err
        episodes = (DIRS / "sb3" / "0.monitor.csv").read_text().count("\n") - 2
        assert _n(run(where, "--metric", "r")) == {"r": episodes}
        return
    src = r.one("source")
    assert src["path"] == str(DIRS / "sb3" / "progress.csv")
    assert "stable-baselines3" in src["chosen_from"] and "0.monitor.csv" in src["chosen_from"]
    assert _n(r)["loss"] == _csv_count(DIRS / "sb3" / "progress.csv", "train/loss")
