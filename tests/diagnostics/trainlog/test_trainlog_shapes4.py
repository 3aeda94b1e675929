"""Printed-console shapes issue 35's fourth and fifth held-out sets found misread
(tests/public_runs.md, "Held-out runs, fourth set" and "fifth set"), each made here: the
rule each fix adds is one for any console of the shape, never for the file it was seen in.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from tests.trainlog_kit import TWO_RUNS_SAID, close, run, said, series, source


def _loss(i: int, start: float = 3.0) -> float:
    """A falling loss with a small deterministic wiggle (no spike, no plateau)."""
    return round(0.4 + (start - 0.4) * math.exp(-i / 40) + 0.01 * math.sin(i * 1.7), 5)


def _resumes(r) -> list[dict[str, object]]:
    return [e for e in r.all("event") if e["kind"] == "resume"]


# ---------------------------------------------------------------------------------------------
# a config printed before the training (``kernel_size: 5`` lines): a text, not series


def _glog(i: int) -> str:
    return f"I0728 23:55:{i % 60:02d}.{i:06d}  4259 "


def _config_then_iterations(path: Path, iterations: list[int], *, twice: bool = False) -> Path:
    """A glog console: the net's prototxt printed whole (layer fields that recur, no
    counter), set-up lines, then per iteration ``Iteration i (...), loss = x`` (and, with
    ``twice``, the same loss again on a ``Train net output`` line) and ``Iteration i, lr``."""
    with open(path, "w") as f:
        f.write(_glog(0) + "net.cpp:53] Initializing net from parameters:\n")
        for layer, (out, kernel) in enumerate([(20, 5), (50, 5), (500, 3), (10, 1)]):
            f.write(f'layer {{\n  name: "conv{layer}"\n  param {{\n    lr_mult: 1\n  }}\n')
            f.write(f"  param {{\n    lr_mult: 2\n  }}\n    num_output: {out}\n")
            f.write(f"    kernel_size: {kernel}\n    stride: {layer % 2 + 1}\n}}\n")
        for layer in range(4):
            f.write(_glog(1) + f"net.cpp:137] Memory required for data: {200960 + layer * 4096}\n")
        for n, i in enumerate(iterations):
            x = _loss(n)
            f.write(_glog(n) + f"solver.cpp:218] Iteration {i} (4.7 iter/s, 21.2s/100 iters), ")
            f.write(f"loss = {x}\n")
            if twice:
                f.write(_glog(n) + f"solver.cpp:237]     Train net output #0: loss = {x} ")
                f.write(f"(* 1 = {x} loss)\n")
            f.write(_glog(n) + f"sgd_solver.cpp:105] Iteration {i}, lr = {0.01 * 0.99**n:.6g}\n")
    return path


def test_config_printed_before_the_training_is_no_series(tmp_path: Path) -> None:
    """Two iterations after a printed net: the loss is read (2 points), the config's
    recurring fields (``kernel_size``, ``num_output``) are not taken for series beside it."""
    path = _config_then_iterations(tmp_path / "train.log", [0, 100])
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    (loss,) = series(r, "loss")
    assert loss["n"] == 2 and close(loss["median"], (_loss(0) + _loss(1)) / 2)
    assert (src["first_step"], src["last_step"]) == (0, 100), src
    text = said(r)
    assert "kernel_size" not in text and "num_output" not in text, text
    assert "printed only before the first train line" in text


def test_a_value_printed_twice_by_two_line_kinds_is_one_point(tmp_path: Path) -> None:
    """``Iteration i, loss = x`` then ``Train net output #0: loss = x``: each step's loss
    twice, by a line after each train line: one point a step, not two (nor an epoch-level
    series of the second)."""
    path = _config_then_iterations(tmp_path / "train.log", list(range(0, 3000, 100)), twice=True)
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 30, loss
    assert (src["first_step"], src["last_step"]) == (0, 2900), src
    assert _resumes(r) == []
    assert "train/loss is printed twice" in said(r)
    assert "epoch/train/loss" not in said(r)


# ---------------------------------------------------------------------------------------------
# a printed dict a step (``{'loss': ..., 'epoch': 0.25}``) after lines ranks print


def _dict_console(path: Path, n: int = 12, ranks: int = 24) -> Path:
    with open(path, "w") as f:
        f.write("  --resume_from_checkpoint RESUME_FROM_CHECKPOINT\n")
        f.write("                        when this is true, you won't be able to resume\n")
        for rank in range(ranks):
            f.write(f"My guessed rank = {(rank * 7) % ranks}\n")
        for i in range(n):
            f.write(
                f"{{'loss': {_loss(i)}, 'grad_norm': {1 + 0.1 * (i % 3)}, "
                f"'learning_rate': {5e-5 * (1 - i / n):.6g}, 'epoch': {(i + 1) / n:.2f}}}\n"
            )
            f.write(f" {100 * (i + 1) // n}%|####| {i + 1}/{n} [00:{i:02d}<00:10, 1.2it/s]\n")
        f.write("{'train_runtime': 375.1, 'train_loss': 2.49, 'epoch': 1.0}\n")
        for rank in range(ranks):
            f.write(f"My guessed rank = {(rank * 5) % ranks}\n")
    return path


def test_printed_dicts_that_state_their_epoch_are_the_run(tmp_path: Path) -> None:
    """Lines with no counter (``My guessed rank = 7``, one a rank) outnumber the dicts; the
    dicts state their epoch: they are the run's lines, one point each, on the epoch axis."""
    path = _dict_console(tmp_path / "console.txt")
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/loss", src
    (loss,) = series(r, "loss")
    assert loss["n"] == 12 and close(loss["median"], statistics.median(_loss(i) for i in range(12)))
    assert (src["first_step"], src["last_step"]) == (0.08, 1), src


def test_a_resume_word_before_the_training_with_no_step_is_no_event(tmp_path: Path) -> None:
    """A ``--help`` text ("you won't be able to resume") printed before the first train line
    states no step: no resume is placed at a step it never named."""
    path = _dict_console(tmp_path / "console.txt")
    r = run(path)
    assert _resumes(r) == []
    assert "before the first train line state no step" in said(r)


def test_a_resume_before_the_training_that_states_its_step_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        f.write("Resuming from checkpoint at step 500\n")
        for i in range(500, 540):
            f.write(f"Epoch [1][{i}/1000]  loss: {_loss(i - 500)}  lr: 0.001\n")
    r = run(path)
    assert [e["step"] for e in _resumes(r)] == [500]


# ---------------------------------------------------------------------------------------------
# a line kind printed by two engines (or ranks) at each step, one after the other


def test_a_step_printed_by_two_engines_in_turn_is_two_series(tmp_path: Path) -> None:
    """PPO's two engines print ``step=10, skipped=4, lr=[...]`` each at every 10th step:
    the second line at a step is the other engine's, no replay of the run from there (no
    resume, no run cut at step 10): every train line is read."""
    path = tmp_path / "ppo.log"
    with open(path, "w") as f:
        for s in range(200):
            f.write(f"epoch: 0|step: {s}|ppo_ep: 1|act_loss: {_loss(s) - 1.5}|cri_loss: 0.1\n")
            f.write(f"average reward score: {0.01 * s}\n")
            if s and not s % 10:
                for engine, lr in ((0, 5e-7), (1, 3e-7)):
                    f.write(
                        f"[INFO] [logging.py:96:log_dist] [Rank 0] step={s}, "
                        f"skipped={s // 10 + engine}, lr=[{lr * (1 + s / 100):.3g}]\n"
                    )
    r = run(path)
    src = source(r)
    assert src["columns"]["loss"] == "train/act_loss", src
    (loss,) = series(r, "loss")
    assert loss["n"] == 200, loss
    assert (src["first_step"], src["last_step"]) == (0, 199), src
    assert _resumes(r) == []
    assert not TWO_RUNS_SAID.search(said(r).replace(str(path), ""))
    assert "2 times in turn" in said(r)


# ---------------------------------------------------------------------------------------------
# ``Epoch(train) [e][i/N]`` after a date ``2022/08/22`` or ``07/03``


def _bracketed(path: Path, runs: list[int], date: str = "2022/08/22", n: int = 196) -> Path:
    """mmengine's shape: ``<date> 15:51:56 - mmengine - INFO - Epoch(train) [e][ i/N]  lr:
    ...  loss: x``, each run of ``runs`` that many lines from i = 10 by 10 (epochs turn over
    at N); one line with its blanks printed single."""
    with open(path, "w") as f:
        for k, length in enumerate(runs):
            f.write(f"{date} 15:51:54 - mmengine - INFO - Checkpoints will be saved to /w{k}\n")
            for m in range(length):
                it = 10 * (m + 1)
                e, i = 1 + (it - 1) // n, (it - 1) % n + 1
                pad = " " if m == 2 else "  "
                f.write(
                    f"{date} 15:51:56 - mmengine - INFO - Epoch(train){pad}[{e}][{i:3d}/{n}]"
                    f"{pad}lr: 1.0000e-03{pad}eta: 0:18:23{pad}time: 0.1414{pad}"
                    f"memory: 392{pad}loss: {_loss(m)}\n"
                )
            f.write(f"{date} 15:52:51 - mmengine - INFO - Epoch(val) [1][10/313]    eta: 0:00:03\n")
            f.write(
                f"{date} 15:52:54 - mmengine - INFO - Epoch(val) [1][313/313]  accuracy: 35.7\n"
            )
    return path


def test_bracketed_epoch_and_batch_after_a_date_are_the_step(tmp_path: Path) -> None:
    """``[e][i/N]``: the number before the bracketed ``i/N`` is the epoch, the step is (e - 1)
    x N + i; the date's ``2022/08/22`` (a chain of three) is no ``i/N``; a line whose blanks
    are printed single is the same line kind (all 30 are read)."""
    path = _bracketed(tmp_path / "15_minutes.md", [30], n=100)
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 30 and close(loss["median"], statistics.median(_loss(m) for m in range(30)))
    assert (src["first_step"], src["last_step"]) == (10, 300), src
    assert series(r, "val_loss") == []
    assert not TWO_RUNS_SAID.search(said(r).replace(str(path), ""))


def test_bracketed_consoles_appended_are_runs_and_the_last_is_read(tmp_path: Path) -> None:
    """Three consoles pasted one after another behind a ``07/03`` date (a month and a day,
    no ``i/N``: 7 > 3): the counter falls to 10 twice; the runs are said, the last read."""
    path = _bracketed(tmp_path / "page.md", [19, 19, 11], date="07/03")
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 11 and close(loss["median"], statistics.median(_loss(m) for m in range(11)))
    assert (src["first_step"], src["last_step"]) == (10, 110), src
    assert TWO_RUNS_SAID.search(said(r).replace(str(path), "")), said(r)
