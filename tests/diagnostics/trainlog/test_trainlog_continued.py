"""A run continued in the same file (issue 35): a second part whose step counter starts again
but whose run does not (the trained model trained again, stable-baselines3's second
``learn()``, a fine-tuning after a first fit) is said as a continuation of the part before,
not as a second run from scratch; and its loss, flat as a trained model's is, is no run that
never learned.

The real one is written by stable-baselines3 itself (tests/data/sb3-cartpole/NOTICE.md,
``continued/``): ``time/total_timesteps`` starts again at 256 while ``train/n_updates`` goes
on from 92 to 96.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.harness import DATA
from tests.trainlog_kit import Run, run

CONTINUED = DATA / "sb3-cartpole" / "continued"


def _warnings(r: Run) -> str:
    return "\n".join(w["message"] for w in r.all("warning"))


@pytest.mark.parametrize("name", ["progress.csv", "console.txt"])
def test_sb3_learning_again_is_said_as_a_continuation(name: str) -> None:
    r = run(CONTINUED / name)
    said = _warnings(r)
    assert (
        "run part 2 continues run part 1 from step 6144 (the step counter falls from 6144 to "
        "256 at row 24 and climbs again, 'train/n_updates' goes on from 92 to 96): the trained "
        "model trained again, not a run from scratch"
    ) in said
    assert "a second run (or a restart from scratch)" not in said
    assert "run part 2 of 2 analysed" in said and r.one("source")["rows"] == 24
    assert r.all("onset") == []  # a trained model's loss need not fall


def _supervised(path: Path, second_from: float) -> Path:
    """Two parts in one JSON-lines log, each counting steps from 1: the first learns from
    2.5 to ~0.9; the second starts at ``second_from`` (0.9: the trained model again; 2.5: a
    new model) and stays there or falls."""
    rng = random.Random(5)
    rows = []
    for s in range(1, 201):
        rows.append({"step": s, "loss": 0.9 + 1.6 * 0.98**s + rng.gauss(0, 0.02)})
    for s in range(1, 201):
        level = 0.9 if second_from < 1 else 0.9 + 1.6 * 0.98**s
        rows.append({"step": s, "loss": level + rng.gauss(0, 0.02)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_fine_tune_restarting_its_counter_continues_the_run(tmp_path: Path) -> None:
    r = run(_supervised(tmp_path / "train.jsonl", 0.9))
    said = _warnings(r)
    assert "run part 2 continues run part 1 from step 200 (" in said
    assert "its loss starts at 0.89" in said and "not where it started (2.41" in said
    assert "a second run (or a restart from scratch)" not in said
    assert r.all("onset") == [] and r.code == 0  # flat, as a trained model's loss is


def test_a_new_model_from_scratch_is_still_a_second_run(tmp_path: Path) -> None:
    said = _warnings(run(_supervised(tmp_path / "train.jsonl", 2.5)))
    assert "a second run (or a restart from scratch) appended to the same file" in said
    assert "continues" not in said
