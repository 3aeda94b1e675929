"""Printed-console shapes issue 35's eighth held-out set found misread (tests/public_runs.md,
"Held-out runs, eighth set"), each made here: the rule each fix adds is one for any log of
the shape, never for the file it was seen in.
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
    series,
    source,
)


def _loss(i: int, start: float = 2.0) -> float:
    """A falling loss with a small deterministic wiggle (no spike, no plateau)."""
    return round(0.3 + (start - 0.3) * math.exp(-i / 8) + 0.004 * math.sin(i * 1.7), 4)


def _apart_from_path(r: object, path: Path) -> str:
    return said(r).replace(str(path), "")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# printed dicts whose epoch never moves (a run shorter than an epoch): each line is a step


def _dicts_in_chatter(path: Path, losses: list[str], epoch: str = "0.0") -> Path:
    """A Trainer's ``{'loss': x, 'learning_rate': y, 'epoch': 0.0}`` a step among a cache's
    recurring status lines (numbers of their own), a progress bar's state glued to one dict
    (the bar redrawn where the dict was printed), then the summary dict."""
    n = len(losses)
    with open(path, "w") as f:
        f.write(f"python run_clm.py --max_steps {n} --logging_steps 1\n")
        for i, x in enumerate(losses):
            f.write(f"INFO cache: remaining items are {3 * i + 2}, done are {i + 7}, total is 40\n")
            f.write(f"INFO cache: remaining items are {3 * i + 1}, done are {i + 8}, total is 40\n")
            glued = f"{i + 1}/{n} [00:{i + 10}<00:08,  2.71s/it]" if i == 3 else ""
            lr = 2e-5 * (1 - i / n)
            f.write(f"{{'loss': {x}, 'learning_rate': {lr!r}, 'epoch': {epoch}}}{glued}\n")
            f.write(
                f"{10 * (i + 1) // n}0%|#         | {i + 1}/{n} [00:{i + 10}<00:36,  2.64s/it]\n"
            )
        f.write("{'train_runtime': 36.37, 'train_samples_per_second': 175.9, 'train_loss': nan}\n")
    return path


def test_dicts_whose_epoch_never_moves_are_a_step_each_and_the_nan_is_said(tmp_path: Path) -> None:
    """Ten dicts, ``epoch`` 0.0 on each, the loss 0.0 five times, ``nan`` twice, a blow-up to
    3.4e14, 0.0 twice: the loss is read (10 rows, one a line, the row its step: the epoch
    that never moves counts no line, so no restart at each line), the NaN said, the
    blow-up a spike. Before: each line "epoch 0 logged again with other values: a
    restart", the last line alone read, the loss passed over as set once: no loss found."""
    losses = ["0.0"] * 5 + ["nan", "nan", "338649581355008.0", "0.0", "0.0"]
    path = _dicts_in_chatter(tmp_path / "console.log", losses)
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    assert src["rows"] == 10, src
    (loss,) = series(r, "loss")
    assert loss["n"] == 8 and loss["nonfinite"] == 2, loss
    assert re.search(r"\bnan\b|non-?finite", _apart_from_path(r, path), re.I), said(r)
    assert any(s["kind"] == "nonfinite" for s in r.all("spike")), r.all("spike")
    assert any(s["value"] == 338649581355008.0 for s in loss_spikes(r)), loss_spikes(r)
    assert not RESTART_SAID.search(_apart_from_path(r, path)), said(r)


def test_dicts_whose_epoch_is_printed_rounded_are_a_step_each(tmp_path: Path) -> None:
    """Thirty dicts among a cache's status lines, the epoch printed to one decimal (0.0 ten
    times, 0.1 ten times, ...): it never falls and repeats on most lines, so it is no
    step: 30 points, no restart. Before: a restart said at each repeat, the last part read."""
    path = tmp_path / "console.log"
    with open(path, "w") as f:
        for i in range(30):
            f.write(f"INFO cache: remaining items are {40 - i}, done are {i + 7}, total is 40\n")
            f.write(f"{{'loss': {_loss(i)}, 'grad_norm': {1 + i % 3}, 'epoch': {i // 10 / 10}}}\n")
    r = run(path)
    (loss,) = series(r, "loss")
    assert loss["n"] == 30, loss
    assert close(loss["median"], statistics.median(_loss(i) for i in range(30))), loss
    assert not RESTART_SAID.search(_apart_from_path(r, path)), said(r)
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# a progress bar redrawn (PyTorch Lightning's, written to a file): one point an epoch


def _bar(e: int, i: int, n: int, loss: float | None, rate: str = " 9.13it/s") -> str:
    pct = 100 * i // n
    drawn = ("#" * (10 * i // n)).ljust(10)
    times = "00:00<?, ?it/s" if i == 0 else f"00:00<00:00, {rate}"
    post = f", loss={loss}, v_num=ab12]" if loss is not None else "]"
    return f"Epoch {e}: {pct:3d}%|{drawn}| {i}/{n} [{times}{post}"


def _lightning_bars(path: Path, epochs: int, batches: int = 4) -> list[float]:
    """A config dump, then each epoch's bar as Lightning redraws it into a file: at 0% with
    the last epoch's loss, each position drawn twice (the old value, then the new), the
    validation bar, the 100% bar drawn again, and the bar reset to 0% before the next
    epoch's name is set. Returns the value each epoch's bar ends on."""
    shown, last = 0.0, []
    with open(path, "w") as f:
        f.write(f"trainer:\n  max_epochs: {epochs}\n  lr: 0.0001\n  weight_decay: 0.01\n")
        f.write("Training: 0it [00:00, ?it/s]\n")
        for e in range(epochs):
            f.write(_bar(e, 0, batches, None) + "\n")
            if e:
                f.write(_bar(e, 0, batches, shown) + "  \n")
            for i in range(1, batches + 1):
                f.write(_bar(e, i, batches, shown if e or i > 1 else None) + "\n")
                shown = _loss(e * batches + i)
                f.write(_bar(e, i, batches, shown, "9.05it/s") + "\n")
            f.write("Validation DataLoader 0: 100%|##########| 1/1 [00:00<00:00, 45.5it/s]\n")
            f.write(_bar(e, batches, batches, shown, "4.14it/s") + "\n")
            f.write(_bar(e, 0, batches, shown) + "        \n")
            last.append(shown)
        f.write("Finished Training\n")
    return last


def test_a_progress_bar_redrawn_is_one_point_an_epoch(tmp_path: Path) -> None:
    """Six epochs of four batches, each bar redrawn some 12 times: the loss is the bar's
    ``loss``, one point an epoch (the value its bar ends on), on epoch x 4 + i; one run,
    no restart, no ranks interleaved. Before: the bar at 0%, 25%, ... were line kinds of
    their own (the drawing a constant), their points averaged a step, the bar reset to 0%
    read as several writers interleaved."""
    path = tmp_path / "o"
    last = _lightning_bars(path, 6)
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    (loss,) = series(r, "loss")
    assert loss["n"] == 6, loss
    assert close(loss["median"], statistics.median(last)), loss
    assert (src["first_step"], src["last_step"]) == (4, 24), src
    text = _apart_from_path(r, path)
    assert not RESTART_SAID.search(text), said(r)
    assert "interleaved" not in text and "ranks" not in text, said(r)
    assert loss_spikes(r) == []


def test_a_bar_drawn_at_any_state_is_one_line_kind(tmp_path: Path) -> None:
    """A console that kept one bar line now and then (at 0%, 50%, 100%: each drawn
    otherwise): the bars are one line kind, each a point (5), whatever their drawing.
    Before: only the bars at 100% were read (each other drawing a kind seen once)."""
    path = tmp_path / "output.log"
    states = [(1, 4), (4, 0), (7, 2), (9, 4), (12, 2)]
    with open(path, "w") as f:
        for n, (e, i) in enumerate(states):
            f.write(f"some warning about the data loader, worker {n}\n")
            f.write(_bar(e, i, 4, _loss(3 * n)) + "\n")
    r = run(path)
    (loss,) = series(r, "loss")
    assert loss["n"] == 5, loss
    assert close(loss["median"], statistics.median(_loss(3 * n) for n in range(5))), loss


# ---------------------------------------------------------------------------------------------
# a save line that states the held-out loss it was saved for


def test_a_save_line_stating_the_held_out_loss_gives_it(tmp_path: Path) -> None:
    """Lightning's ModelCheckpoint lines (``Epoch e, global step s: 'val_loss' reached x
    (best x), saving model to '.../epoch=e-step=s-val_loss=x.ckpt' as top k``) among the
    train lines: each is a save (an event) and a held-out point, its value the first
    held-out loss the line names (not the best, the file name's copy or the rank), at the
    step it states. Before: events only, no held-out loss."""
    path = tmp_path / "output.log"
    val = []
    with open(path, "w") as f:
        for e in range(12):
            f.write(f"epoch {e} step {10 * (e + 1)} loss {_loss(e)}\n")
            v = round(0.5 * _loss(e), 5)
            val.append(v)
            tail = f"-v{e % 3}" if e % 4 else ""
            f.write(
                f"Epoch {e}, global step {10 * (e + 1)}: 'val_loss' reached {v:.5f} (best {v:.5f}), "
                f"saving model to 'checkpoints/epoch={e}-step={10 * (e + 1)}-val_loss={v:.4f}"
                f"{tail}.ckpt' as top {e + 1}\n"
            )
    r = run(path)
    (loss,) = series(r, "loss")
    assert loss["n"] == 12, loss
    (held,) = series(r, "val_loss")
    assert held["n"] == 12 and close(held["median"], statistics.median(val)), held
    assert len([e for e in r.all("event") if e["kind"] == "checkpoint"]) == 12
    assert not RESTART_SAID.search(_apart_from_path(r, path)), said(r)


def test_a_long_run_of_digits_beside_a_bar_s_marks_is_read(tmp_path: Path) -> None:
    """Hostile input: a line near the length limit, a run of digits after ``<`` and ``[``
    (what the bar's cut looks for first), among train lines. The cut tries the run once,
    not from each of its digits (that was hours at this length): the log is read, its 20
    train lines' loss."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for i in range(20):
            f.write(f"epoch {i} step {i} loss {_loss(i)}\n")
            if i == 10:
                f.write("<[" + "7" * 1_000_000 + "\n")
    r = run(path)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20, loss


def test_a_bar_with_no_epoch_drawn_twice_a_position_is_one_point_a_position(
    tmp_path: Path,
) -> None:
    """A loop's own bar (``train:  12%|#  | 12/100 [..., loss=x]``, no epoch), each position
    drawn twice as ``update()`` then ``set_postfix()`` draw it (the old value, then the
    new), two passes of 40: 80 points, one a position, the second pass a new epoch as the
    bar starting again says; no restart. Before (main): each position's second draw read
    as the step logged again with other values (a restart) or as a second engine's line
    side by side, and one point read."""
    path = tmp_path / "train.log"
    shown, values = 0.0, []
    with open(path, "w") as f:
        f.write("loading data, 40 batches\n")
        for p in range(2):
            for i in range(1, 41):
                f.write(_bar(p, i, 40, shown).replace(f"Epoch {p}", "train") + "\n")
                shown = _loss(40 * p + i)
                values.append(shown)
                f.write(_bar(p, i, 40, shown).replace(f"Epoch {p}", "train") + "\n")
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 80, loss
    assert close(loss["median"], statistics.median(values)), loss
    assert (src["first_step"], src["last_step"]) == (1, 80), src
    text = _apart_from_path(r, path)  # ("its restarts count epochs": the reader's own words)
    assert "logged again" not in text and not TWO_RUNS_SAID.search(text), said(r)
