"""A run directory is searched for the names common trainers give their logs (issue 35,
mistake class 7): detectron2's ``metrics.json`` given as the run directory was "no training
log under it", though the JSON lines reader reads the file itself. Each is found and said
whose name it is; what reads it is still chosen by its content.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.trainlog_kit import run


def _falling(n: int, every: int = 1) -> list[tuple[int, float]]:
    return [(s, 2.0 * math.exp(-s / (n * every / 4)) + 0.3) for s in range(0, n * every, every)]


def _detectron2(p: Path) -> None:
    """detectron2's JSONWriter: a line an iteration window (``iteration``, ``total_loss`` and
    its parts, ``lr``), and an evaluation's line (``bbox/AP``) now and then."""
    with p.open("w") as f:
        for it, v in _falling(100, 20):
            row = {"iteration": it + 19, "total_loss": v, "loss_cls": v / 2, "lr": 2.5e-4}
            f.write(json.dumps(dict(row, data_time=0.002, time=0.3)) + "\n")
            if it % 500 == 480:
                f.write(json.dumps({"bbox/AP": 30.0, "iteration": it + 19}) + "\n")


def _mmdet(p: Path) -> None:
    """MMCV's TextLoggerHook ``<timestamp>.log.json``: an env line, then a line per interval."""
    with p.open("w") as f:
        f.write(json.dumps({"env_info": "sys.platform: linux", "seed": 0}) + "\n")
        for it, v in _falling(100, 50):
            f.write(
                json.dumps({"mode": "train", "epoch": 1, "iter": it + 50, "lr": 0.02, "loss": v})
                + "\n"
            )


def _progress_csv(p: Path) -> None:
    """stable-baselines3's CSVOutputFormat: sorted keys, a row per rollout."""
    with p.open("w") as f:
        f.write("time/total_timesteps,train/learning_rate,train/loss,train/n_updates\n")
        for s, v in _falling(80):
            f.write(f"{(s + 1) * 2048},0.0003,{v},{(s + 1) * 10}\n")


CASES: dict[str, tuple[str, str, Callable[[Path], None]]] = {
    "detectron2": ("output/metrics.json", "detectron2 metrics.json", _detectron2),
    "mmdet": ("work_dirs/20240101_120000.log.json", "MMCV / MMDetection *.log.json", _mmdet),
    "sb3": ("PPO_1/progress.csv", "stable-baselines3 / rllab progress.csv", _progress_csv),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_conventional_log_name_is_found_and_said(tmp_path: Path, case: str) -> None:
    rel, what, write = CASES[case]
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    write(p)
    r = run(tmp_path)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["path"] == str(p)
    assert src["chosen_from"].startswith(f"{rel} ({what}): the only candidate"), src
    assert src["rows"] >= 80


def test_detectron2_metrics_json_given_as_the_run_directory(tmp_path: Path) -> None:
    """The issue's case: the directory detectron2 wrote (cfg.OUTPUT_DIR) given as the run."""
    out = tmp_path / "output"
    out.mkdir()
    _detectron2(out / "metrics.json")
    (out / "last_checkpoint").write_text("model_final.pth")
    src = run(out).one("source")
    assert (src["format"], src["step_key"], src["columns"]["loss"]) == (
        "jsonl",
        "iteration",
        "total_loss",
    )
    assert src["skipped"] == 4  # the evaluation lines: no loss in them


def test_a_conventional_name_ranks_as_its_history_says(tmp_path: Path) -> None:
    """A console log with the whole run beats a short metrics.json: names make candidates,
    their histories choose."""
    out = tmp_path / "output"
    out.mkdir()
    (out / "metrics.json").write_text(
        "".join(json.dumps({"iteration": s, "total_loss": v}) + "\n" for s, v in _falling(20))
    )
    (out / "train.log").write_text("".join(f"step={s} loss={v:.4f}\n" for s, v in _falling(300)))
    why = run(out).one("source")["chosen_from"]
    assert why.startswith("train.log (text log): the longest history")
    assert "metrics.json (detectron2 metrics.json; 'total_loss': 20 values)" in why
