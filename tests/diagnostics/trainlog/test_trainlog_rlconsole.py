"""The console a reinforcement-learning logger prints (``remote/trainlog/readers/kvtable.py``):
stable-baselines3's and OpenAI baselines' key/value table, one table a dump, read as the row
its ``progress.csv`` holds, so the console and the CSV of one run give one answer.

The stable-baselines3 runs were written by the library itself (tests/data/sb3-cartpole/,
its NOTICE.md says how and with which versions); the public console is rlberry's user guide's
(tests/public_runs.md, ``rlberry-sb3-console``); the baselines console is written here to
the shape of ``baselines/logger.py``'s ``HumanOutputFormat`` from one set of rows that also
makes its CSV.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest

from tests.harness import DATA
from tests.trainlog_kit import Run, run

SB3 = DATA / "sb3-cartpole"
RLBERRY = DATA / "public" / "rlberry-sb3-console" / "agent_ppo_cartpole.txt"


def _answer(r: Run) -> dict[str, object]:
    """What train-log answers of a run: the roles' columns, the step axis, the lengths."""
    assert r.code in (0, 1), r.records
    src = r.one("source")
    return {
        "columns": src["columns"],
        "step_key": src["step_key"],
        "first_step": src["first_step"],
        "last_step": src["last_step"],
        "stride": src["stride"],
        "rows": src["rows"],
        "n": {m["label"]: m["n"] for m in r.all("metric")},
    }


def _warnings(r: Run) -> str:
    return "\n".join(w["message"] for w in r.all("warning"))


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_sb3_console_gives_the_answer_of_its_progress_csv(algo: str) -> None:
    """Before, the console was read a line kind at a time: each ``|    loss | 46.6 |`` its own
    series, at the row, no step axis, no lr; now each table is a row as in the CSV."""
    console = run(SB3 / algo / "console.txt")
    table = run(SB3 / algo / "progress.csv")
    assert console.one("source")["format"] == "kvtable"
    assert _answer(console) == _answer(table)
    assert console.one("source")["step_key"] == "time/total_timesteps"
    assert "time/total_timesteps" in _warnings(table)  # the CSV says its choice too


def test_sb3_ppo_console_loss_is_the_total_and_its_step_the_timesteps() -> None:
    r = run(SB3 / "ppo" / "console.txt")
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert "val_loss" not in src["columns"]  # the critic's value_loss is no held-out loss
    assert (src["first_step"], src["last_step"], src["stride"]) == (512, 4096, 256)
    assert _answer(r)["n"] == {"loss": 15, "lr": 15}  # 16 tables, the first before any update
    assert "its keys named with their section" in _warnings(r)


def test_two_sb3_runs_appended_to_one_console_are_said(tmp_path: Path) -> None:
    """``learn()`` called again with reset_num_timesteps, stdout to the same file: the
    timesteps fall to the start and climb again; the last run is analysed."""
    text = (SB3 / "ppo" / "console.txt").read_text()
    log = tmp_path / "console.txt"
    log.write_text(text + text)
    r = run(log)
    said = _warnings(r)
    assert "a second run (or a restart from scratch) appended to the same file" in said
    assert "run part 2 of 2 analysed" in said
    assert _answer(r)["n"] == {"loss": 15, "lr": 15}
    assert not r.all("spike")
    first = run(log, "--run-part", "1")
    assert "run part 1 of 2 analysed" in _warnings(first)


def test_public_rlberry_console_tables_read_around_a_foreign_line() -> None:
    """Five tables of changing widths, an rlberry ``[INFO] ... | key = value |`` line between
    two of them: the tables are the rows, the foreign line no row."""
    r = run(RLBERRY)
    src = r.one("source")
    assert src["format"] == "kvtable"
    assert src["step_key"] == "time/total_timesteps"
    assert src["columns"]["loss"] == "train/loss"
    assert (src["first_step"], src["last_step"]) == (4096, 10240)
    assert _answer(r)["n"]["loss"] == 4
    assert src["skipped"] == 6  # the wrapper's four lines, the [INFO] line and "None"


# OpenAI baselines ppo2 (baselines/ppo2/ppo2.py) logs these keys, baselines/logger.py prints
# them sorted, the full key on each line: ``'| %s%s | %s%s |'``, values ``'%-8.3g'``.
BASELINES_KEYS = [
    "eplenmean",
    "eprewmean",
    "fps",
    "loss/approxkl",
    "loss/clipfrac",
    "loss/policy_entropy",
    "loss/policy_loss",
    "loss/value_loss",
    "misc/explained_variance",
    "misc/nupdates",
    "misc/serial_timesteps",
    "misc/time_elapsed",
    "misc/total_timesteps",
]


def _baselines_rows(n: int) -> list[dict[str, float]]:
    rng = random.Random(3)
    rows = []
    for u in range(1, n + 1):
        rows.append(
            {
                "eplenmean": 20.0 + u,
                "eprewmean": 20.0 + u,
                "fps": float(rng.randint(900, 1100)),
                "loss/approxkl": rng.uniform(1e-4, 1e-2),
                "loss/clipfrac": rng.uniform(0, 0.1),
                "loss/policy_entropy": 0.69 - 0.002 * u,
                "loss/policy_loss": rng.uniform(-0.02, 0.02),
                "loss/value_loss": 40.0 / u + rng.uniform(0, 1),
                "misc/explained_variance": rng.uniform(-0.1, 0.5),
                "misc/nupdates": float(u),
                "misc/serial_timesteps": 128.0 * u,
                "misc/time_elapsed": 0.5 * u,
                "misc/total_timesteps": 1024.0 * u,
            }
        )
    return rows


def _human(rows: list[dict[str, float]]) -> str:
    out = ["Logging to /tmp/openai-2019-01-01", "Stepping environment..."]
    for d in rows:
        cells = [(k, f"{d[k]:<8.3g}") for k in sorted(d)]
        kw = max(len(k) for k, _ in cells)
        vw = max(len(v) for _, v in cells)
        dashes = "-" * (kw + vw + 7)
        out.append(dashes)
        out += [f"| {k:<{kw}} | {v:<{vw}} |" for k, v in cells]
        out.append(dashes)
    return "\n".join(out) + "\n"


def test_baselines_console_with_full_keys_gives_its_csv_answer(tmp_path: Path) -> None:
    rows = _baselines_rows(40)
    console = tmp_path / "log.txt"
    console.write_text(_human(rows))
    table = tmp_path / "progress.csv"
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=BASELINES_KEYS)
        w.writeheader()
        w.writerows(rows)
    a, b = run(console), run(table)
    assert a.one("source")["format"] == "kvtable"
    # baselines prints every number with three digits, the counters too (1024: 1.02e+03)
    ours, theirs = _answer(a), _answer(b)
    for key, off in (("first_step", 0.005), ("last_step", 0.005), ("stride", 0.05)):
        mine, csv_s = float(ours.pop(key)), float(theirs.pop(key))  # type: ignore[arg-type]
        assert abs(mine - csv_s) <= off * csv_s, (key, mine, csv_s)
    assert ours == theirs
    # all environments' steps so far, over one environment's (serial_timesteps)
    assert a.one("source")["step_key"] == "misc/total_timesteps"
    assert "val_loss" not in a.one("source")["columns"]
