"""Templates a word apart (``remote/trainlog/templates.py``, :func:`merged`), decided by
evidence as Drain decides a variable: a marker word on some lines (``loss=0.3 (best)``) or a
phase name in one place, whose lines continue one counter, is one line kind; a word that
says the kind (``train`` / ``valid``), the word that names a field (``loss`` / ``grad_norm``)
or lines that log the same steps (``[rank0]`` / ``[rank1]``) keep the kinds apart.
Property-style: seeded random logs, any separator and assignment style.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from tests.trainlog_kit import Run, run

SEPARATORS = [" | ", ", ", "  ", "\t", " - ", "; "]
ASSIGN = [": ", "=", " "]
MARKERS = ["({})", "[{}]", "{}!"]
MARKER_WORDS = ["best", "improved", "saved_best"]
PHASES = [("warmup", "main", "cooldown"), ("stage1", "stage2", "stage3"), ("ramp", "flat", "decay")]
VAL = ["valid", "Validation", "val", "eval"]


def _warnings(r: Run) -> str:
    return "\n".join(w["message"] for w in r.all("warning"))


def _n(r: Run) -> dict[str, int]:
    return {m["label"]: m["n"] for m in r.all("metric")}


def _row(prefix: str, step: int, sep: str, eq: str, name: str, value: float) -> str:
    return f"{prefix} step{eq}{step}{sep}{name}{eq}{value:.4f}"


def test_marked_and_phased_lines_are_one_kind_beside_the_held_out_lines(tmp_path: Path) -> None:
    """Property: a marker on a tenth of the train lines, a phase word in three spans of the
    run: the train loss is every train line (one kind), the validation lines apart."""
    rng = random.Random(3508)
    for case in range(12):
        sep, eq = rng.choice(SEPARATORS), rng.choice(ASSIGN)
        marker = rng.choice(MARKERS).format(rng.choice(MARKER_WORDS))
        phases = rng.choice(PHASES) if case % 2 else None
        val = rng.choice(VAL)
        steps = rng.randrange(90, 240)
        lines, train, held = [], 0, 0
        for s in range(1, steps + 1):
            phase = phases[min(2, 3 * (s - 1) // steps)] + " " if phases else ""
            line = _row(f"train {phase}".strip(), s, sep, eq, "loss", 3.0 / s + 0.5)
            lines.append(line + (" " + marker if rng.random() < 0.1 else ""))
            train += 1
            if rng.random() < 0.15 or s == steps:
                lines.append(_row(val, s, sep, eq, "loss", 3.2 / s + 0.6))
                held += 1
        log = tmp_path / f"marked{case}.log"
        log.write_text("\n".join(lines) + "\n")
        r = run(log)
        assert r.code in (0, 1), (case, r.records[-3:])
        cols, n = r.one("source")["columns"], _n(r)
        assert cols["loss"] == "train/loss" and n["loss"] == train, (case, marker, phases, n)
        assert cols["val_loss"] == "val/loss" and n["val_loss"] == held, (case, n)
        said = _warnings(r)
        assert "read as one" in said, (case, said)
        assert "second run" not in said, (case, said)
        kinds = re.findall(r"(\w+) lines like '[^']*' \((\d+)\)", said)
        assert sorted(kinds) == sorted([("train", str(train)), ("val", str(held))]), (case, kinds)


def test_lines_a_word_apart_that_log_the_same_steps_stay_apart(tmp_path: Path) -> None:
    """Property: each rank prints its own line for every step, and a second field kind
    (``grad_norm``) too: never one series of 2x the steps, never "a second run"; the first
    rank's loss is the loss, the others named by their word."""
    rng = random.Random(3509)
    for case in range(8):
        sep, eq = rng.choice(SEPARATORS), rng.choice(ASSIGN)
        ranks = rng.randrange(2, 5)
        steps = rng.randrange(80, 200)
        lines = []
        for s in range(1, steps + 1):
            for k in range(ranks):
                lines.append(_row(f"[rank{k}] train", s, sep, eq, "loss", 3.0 / s + 0.5 + k / 100))
            lines.append(_row("[rank0] train", s, sep, eq, "grad_norm", 1.0 + s % 3))
            if s % 25 == 0:
                lines.append(_row("[rank0] valid", s, sep, eq, "loss", 3.2 / s + 0.6))
        log = tmp_path / f"ranks{case}.log"
        log.write_text("\n".join(lines) + "\n")
        r = run(log)
        assert r.code in (0, 1), (case, r.records[-3:])
        n, said = _n(r), _warnings(r)
        assert n["loss"] == steps and n["val_loss"] == steps // 25, (case, n)
        assert "second run" not in said and "read as one" not in said, (case, said)
        assert all(f"train/loss_rank{k}" in said for k in range(1, ranks)), (case, said)
