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
from tests.trainlog_factory import write_csv
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


def _from_a_trained_model(path: Path, count_from: int, jitter: float = 0.0) -> Path:
    """A CSV whose step counts this run from its first stride (``n``: 512, 1024, ...) beside
    a second counter with a name nobody knows (``k``, 5 a row, empty in the first row as an
    update count before the first update is) that starts at ``count_from``, and a clock
    (``t``, 4 s a row after 600 s of set-up, ``jitter`` s either way). The loss sits at a
    trained model's 1.5 from the first row."""
    rng = random.Random(4)
    rows = []
    for i in range(60):
        rows.append(
            {
                "t": round(600 + 4 * i + rng.uniform(-jitter, jitter)),
                "n": 512 * (i + 1),
                "loss": round(1.5 + rng.gauss(0, 0.01), 5),
                "k": count_from + 5 * (i - 1) if i else "",
            }
        )
    return write_csv(rows, path)


def test_a_counter_far_from_its_origin_while_the_step_starts_at_its_own_continues(
    tmp_path: Path,
) -> None:
    """A counter that starts 1000 of its strides from 0 while the step starts at its first
    stride counts from earlier training: the run continues a trained model (by the values,
    not the names). Said, and its flat loss is no run that never learned. Before: nothing
    said, and the flat loss called a run that never learned."""
    r = run(_from_a_trained_model(tmp_path / "log.csv", 5000, jitter=1))
    said = _warnings(r)
    assert (
        "'k' starts at 5000, 1000 of its strides of 5 from 0, while 'n' starts at its origin "
        "(512): the run continues earlier training"
    ) in said
    assert r.all("onset") == [] and r.code == 0
    # the same count from its origin: nothing continues (the clock, 150 rows' worth from 0
    # at its first row, is no count of earlier training: its steps jitter, a counter's are
    # exact), and the flat loss is said
    r = run(_from_a_trained_model(tmp_path / "fresh.csv", 5, jitter=1))
    assert "continues" not in _warnings(r)
    assert [o["kind"] for o in r.all("onset")] == ["flat"]
