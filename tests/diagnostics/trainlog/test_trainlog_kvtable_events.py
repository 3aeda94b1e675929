"""What stable-baselines3's callbacks print between the console's tables
(``remote/trainlog/readers/kvtable.py``): an evaluation (``Eval num_timesteps=N,
episode_reward=R +/- S``) is a row at step N of ``eval/mean_reward`` (no second row when the
table the evaluation dumps is printed too), a save (``Saving model checkpoint to
.../rl_model_N_steps.zip``) a checkpoint event at N. The console was written by the library
itself (tests/data/sb3-cartpole/NOTICE.md, ``ppo-eval/``).
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import DATA
from tests.trainlog_kit import run

CONSOLE = DATA / "sb3-cartpole" / "ppo-eval" / "console.txt"
REWARDS = [78.0, 147.33, 153.67, 87.67, 100.0, 59.33]  # the Eval lines', in order


def _without_eval_tables(path: Path) -> Path:
    """The console as a logger that prints no table for an evaluation leaves it: each
    evaluation's table (the one with an ``eval/`` section) cut out, its line kept."""
    lines = CONSOLE.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("-----") and lines[i + 1].startswith("| eval/"):
            i += 2
            while not lines[i].startswith("-----"):
                i += 1
            i += 1
            continue
        out.append(lines[i])
        i += 1
    path.write_text("\n".join(out))
    return path


def test_saves_between_tables_are_checkpoint_events() -> None:
    r = run(CONSOLE)
    assert r.one("source")["format"] == "kvtable"
    saves = [(e["kind"], e["step"]) for e in r.all("event")]
    assert saves == [("checkpoint", 1000), ("checkpoint", 2000), ("checkpoint", 3000)]
    assert all("rl_model_" in e["detail"] for e in r.all("event"))


def test_an_evaluation_between_tables_is_a_row_on_the_timesteps_axis(tmp_path: Path) -> None:
    r = run(
        _without_eval_tables(tmp_path / "console.txt"),
        "--metric",
        "eval/mean_reward",
        "--points",
        "100",
    )
    assert r.code in (0, 1), r.records[-3:]
    assert r.one("source")["step_key"] == "time/total_timesteps"
    (s,) = [s for s in r.all("series") if s["metric"] == "eval/mean_reward"]
    assert s["steps"] == [500, 1000, 1500, 2000, 2500, 3000]
    assert s["values"] == REWARDS


def test_an_evaluation_whose_table_is_printed_is_one_row() -> None:
    r = run(CONSOLE, "--metric", "eval/mean_reward", "--points", "100")
    (s,) = [s for s in r.all("series") if s["metric"] == "eval/mean_reward"]
    assert s["steps"] == [500, 1000, 1500, 2000, 2500, 3000]  # the table's, said once
    assert s["values"] == [78, 147, 154, 87.7, 100, 59.3]  # the table's three digits
