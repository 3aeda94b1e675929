"""A run that never learned, or broke at once (issue 35, item 5): a loss above chance (ln V,
ln C of the count the log states) from the start, or non-finite from its first value, is
"unhealthy from the start", with the step where it came back; a usual start is said so.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Callable

import pytest

import remotekit
from remotekit.diagnostics.trainlog.api import analyze_train_log, build_report
from tests.harness import cli
from tests.trainlog_factory import write_csv
from tests.trainlog_kit import run, shipped

# -- a run unhealthy from the start --------------------------------------------------------------


def _lm_log(path: Path, stuck_epochs: int, vocab_line: str | None) -> Path:
    """A JSON-lines LM log, 14 rows an epoch: the loss sits at ~10.9 (above ln 33278 =
    10.41) for ``stuck_epochs`` epochs, then falls after an lr cut."""
    rng = random.Random(2)
    lines = [vocab_line] if vocab_line else []
    step = 0
    for ep in range(6):
        for _ in range(14):
            step += 200
            if ep < stuck_epochs:
                loss = 10.9 + rng.gauss(0, 0.05)
            else:
                loss = 7.5 * 0.98 ** (step / 200 - 14 * stuck_epochs) + 1 + rng.gauss(0, 0.05)
            lr = 20.0 if ep < stuck_epochs else 5.0
            lines.append(json.dumps({"step": step, "epoch": ep, "loss": round(loss, 3), "lr": lr}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_loss_above_chance_from_the_start_is_unhealthy_until_it_falls(tmp_path: Path) -> None:
    r = run(_lm_log(tmp_path / "log.jsonl", 3, '{"vocab_size": 33278, "bptt": 35}'))
    start = r.one("onset")
    assert start["unhealthy"] and start["kind"] == "above-chance"
    assert start["chance"] == pytest.approx(math.log(33278), abs=1e-3)
    assert start["first_step"] == 200 and start["last_step"] == 42 * 200
    assert start["recovered_step"] == 43 * 200
    assert "vocab_size=33278 at line 1" in start["chance_from"]
    assert "unhealthy-start" in r.records[-2]["findings"] and r.code == 1
    rep = build_report("local", "log.jsonl", r.records)
    assert rep.onset is not None and rep.onset.unhealthy
    assert rep.diagnosis[0].startswith("loss unhealthy from the start: above chance (10.41)")
    assert "  start: loss unhealthy from the start: " in rep.render()


def test_a_usual_start_at_chance_is_not_unhealthy(tmp_path: Path) -> None:
    """A loss that starts near ln V and falls at once is how training starts: said, not
    flagged; nor is any loss when the log states no count (nothing to judge it by)."""
    rng = random.Random(4)
    rows = ['{"vocab_size": 50257}']
    for s in range(1, 61):
        loss = 9.0 * 0.93**s + 2 + rng.gauss(0, 0.02)  # 10.4 at step 1, ln 50257 = 10.82
        rows.append(json.dumps({"step": s, "loss": round(loss + 0.9 * (s < 4), 4)}))
    (tmp_path / "log.jsonl").write_text("\n".join(rows) + "\n")
    r = run(tmp_path / "log.jsonl")
    start = r.one("onset")
    assert not start["unhealthy"] and start["kind"] == "healthy"
    assert "a usual start" in start["verdict"] and r.code == 0
    r = run(_lm_log(tmp_path / "nocount.jsonl", 3, None))
    assert r.all("onset") == [] and r.code == 0


def test_a_count_stated_with_several_values_is_no_chance_level(tmp_path: Path) -> None:
    """``ntokens`` per batch is a series, not a vocabulary: no chance level from it."""
    lines = []
    for s in range(1, 41):
        lines.append(f"step={s} loss={12 - 0.01 * s:.3f} ntokens={4000 + 37 * (s % 5)}")
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    assert run(tmp_path / "train.log").all("onset") == []


def test_a_loss_nan_from_its_first_value_is_unhealthy_counted_without_held_out_rows(
    tmp_path: Path,
) -> None:
    rows = []
    for s in range(1, 41):
        loss = "NaN" if s <= 15 else f"{6 - 0.05 * s:.4f}"
        rows.append(f'{{"step": {s}, "loss": {loss}}}')
        if s % 10 == 0:
            rows.append(f'{{"step": {s}, "val_loss": {"NaN" if s <= 15 else "5.0"}}}')
    (tmp_path / "log.jsonl").write_text("\n".join(rows) + "\n")
    r = run(tmp_path / "log.jsonl")
    start = r.one("onset")
    assert start["kind"] == "nonfinite" and start["unhealthy"]
    assert start["values"] == 15 and start["recovered_step"] == 16
    assert "non-finite from its first logged value (nan at step 1): 15 value(s)" in start["verdict"]
    loss = next(m for m in r.all("metric") if m["label"] == "loss")
    assert loss["nonfinite"] == 15  # the val rows' NaN is the val_loss's own
    assert "unhealthy-start" in r.records[-2]["findings"]


def test_chance_in_the_units_of_a_perplexity_or_bits() -> None:
    onset = shipped("trainlog.onset")
    assert onset._in_units("train/ppl", math.log(100)) == pytest.approx(100)
    assert onset._in_units("bpb", math.log(256)) == pytest.approx(8)
    assert onset._in_units("loss", 2.0) == 2.0


# -- a loss that never learned, with no count to judge it by -----------------------------------


def _per_batch(path: Path, curve: Callable[[int], float], noise: float, n: int = 400) -> Path:
    """A hand-rolled trainer's per-batch console: ``Train Epoch: e [i/N]\tLoss: x``, the loss
    ``curve(step)`` with a per-batch scatter of ``noise`` (a small batch is noisy)."""
    rng = random.Random(7)
    lines = []
    for s in range(n):
        loss = max(0.0, curve(s) + rng.gauss(0, noise))
        lines.append(f"Train Epoch: {s // 40 + 1} [{(s % 40) * 64}/2560]\tLoss: {loss:.6f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_loss_flat_from_its_first_value_is_a_run_that_never_learned(tmp_path: Path) -> None:
    """No vocabulary or class count in the log: a loss whose level never falls beyond its
    own per-batch scatter, from its first value to its last, never learned; said with the
    evidence (the parts' medians, the scatter) and the other reading (a trained start)."""
    r = run(_per_batch(tmp_path / "flat.log", lambda s: 1.0, 0.25))
    start = r.one("onset")
    assert start["unhealthy"] and start["kind"] == "flat" and start["chance"] is None
    assert start["values"] == 400 and start["recovered_step"] is None
    verdict = start["verdict"]
    assert verdict.startswith("flat from its first value to its last: 400 values from step ")
    assert "no fall beyond its own scatter" in verdict and "trained model" in verdict
    assert "unhealthy-start" in r.records[-2]["findings"] and r.code == 1
    rep = build_report("local", "flat.log", r.records)
    assert rep.diagnosis[0].startswith("loss unhealthy from the start: flat from its first")
    assert "Nothing was learned" in rep.diagnosis[0]


@pytest.mark.parametrize(
    "curve, noise",
    [
        (lambda s: 2.3 * math.exp(-s / 120) + 0.2, 0.3),  # MNIST-like, noisy batches
        (lambda s: 1.0 - 0.1 * s / 400, 0.1),  # a slow learner: 10% over the run
        (lambda s: 2.3026 + 1e-5 * math.sin(s), 0.0),  # a rounded constant: flat
        (lambda s: 0.0101, 0.0002),  # converged (below ln 2): a late view, not flat
    ],
)
def test_a_loss_that_falls_beyond_its_scatter_learned(
    tmp_path: Path, curve: Callable[[int], float], noise: float
) -> None:
    r = run(_per_batch(tmp_path / "learn.log", curve, noise))
    flat = noise == 0.0
    assert [o["kind"] for o in r.all("onset")] == (["flat"] if flat else [])


def _epochs(path: Path, curve: Callable[[int], float], epochs: int) -> Path:
    """A hand-rolled per-epoch CSV (pandas' index column, epoch, train and valid loss)."""
    rows = [
        {"": e, "epoch": e, "train_loss": curve(e), "valid_loss": 1.2 * curve(e)}
        for e in range(epochs)
    ]
    return write_csv(rows, path)


def test_a_short_epoch_log_whose_loss_never_moved_never_learned(tmp_path: Path) -> None:
    """16 epochs of a loss at its ceiling that creeps down a hair each epoch (1.0018 to 0.997,
    -0.5%: a mask loss that never found a mask) are judged like a long loss: the start's two
    parts and one after them, when its noise lets a fall of 1% show. Before: fewer than 20
    values were never judged."""
    r = run(_epochs(tmp_path / "log.csv", lambda e: 1.0018 - 0.0003 * e, 16))
    (start,) = r.all("onset")
    assert start["kind"] == "flat" and start["values"] == 16 and r.code == 1
    assert "of each of 3 parts" in start["verdict"]
    # the same number of epochs of a loss that learned, and a log too short to tell
    assert run(_epochs(tmp_path / "learn.csv", lambda e: 0.5 + 2 * 0.8**e, 16)).all("onset") == []
    assert run(_epochs(tmp_path / "slow.csv", lambda e: 1.0 - 0.002 * e, 16)).all("onset") == []
    assert run(_epochs(tmp_path / "short.csv", lambda e: 1.0, 14)).all("onset") == []
    # 16 noisy values (a warm-up's first iterations: 17 +- 3): one noisy comparison of the
    # start's parts with the last says nothing of a fall, so nothing is said
    noisy = [17, 15.8, 17.1, 25.3, 14.8, 19.3, 25.1, 19.0, 13.8, 16.6, 15.1, 15.9, 13.9]
    noisy += [15.5, 18.9, 14.4]
    assert run(_epochs(tmp_path / "noisy.csv", lambda e: noisy[e], 16)).all("onset") == []


def test_a_vocab_size_given_is_the_chance_level_of_a_log_that_states_none(tmp_path: Path) -> None:
    """``--vocab-size`` (``vocab_size=``) gives the count a log does not state: the chance
    rule then judges its start, said with where the count came from."""
    log = _lm_log(tmp_path / "log.jsonl", 3, None)
    start = run(log, "--vocab-size", "33278").one("onset")
    assert start["kind"] == "above-chance" and start["recovered_step"] == 43 * 200
    assert start["chance_from"] == "--vocab-size 33278: ln 33278 = 10.41"
    with remotekit.local_target() as t:
        rep = analyze_train_log(t, str(log), vocab_size=33278)
        assert rep.onset is not None and rep.onset.kind == "above-chance"
        assert rep.exit_code == 1
        with pytest.raises(ValueError, match=r"vocab_size.*whole number >= 2"):
            analyze_train_log(t, str(log), vocab_size=1)
    r = cli("train-log", "--log", str(log), "--vocab-size", "33278", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "chance from --vocab-size 33278: ln 33278 = 10.41" in r.stdout


def test_a_flat_loss_logged_from_a_later_step_is_a_resumed_model(tmp_path: Path) -> None:
    """A log that begins at step 11840 (a resume: a relaunch of a trained model) does not
    show the run's start: a flat loss there is no run that never learned."""
    rng = random.Random(9)
    rows = [{"step": 11840 + 10 * k, "loss": 2.1 + rng.gauss(0, 0.2)} for k in range(300)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run(tmp_path / "log.jsonl").all("onset") == []
    rows = [dict(r, step=r["step"] - 11840) for r in rows]  # the same from step 0: flat
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [o["kind"] for o in run(tmp_path / "log.jsonl").all("onset")] == ["flat"]
