"""Printed-console shapes issue 35's sixth held-out set found misread (tests/public_runs.md,
"Held-out runs, sixth set"), each made here: the rule each fix adds is one for any log of
the shape, never for the file it was seen in.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from tests.trainlog_kit import TWO_RUNS_SAID, close, loss_spikes, run, said, series, source


def _loss(i: int, start: float = 3.0) -> float:
    """A falling loss with a small deterministic wiggle (no spike, no plateau)."""
    return round(0.4 + (start - 0.4) * math.exp(-i / 40) + 0.01 * math.sin(i * 1.7), 5)


# ---------------------------------------------------------------------------------------------
# a step counted within the epoch, with no ``/N``: it starts again at every new epoch


def _inner_console(path: Path, runs: list[int], every: int = 50, per_epoch: int = 200) -> Path:
    """``epoch=e iter=i loss=x`` every ``every`` batches of ``per_epoch``, ``i`` counted
    within the epoch (50 .. 200, then 50 again), for each run of ``runs`` epochs appended
    one after the other; an epoch summary line after each epoch."""
    with open(path, "w") as f:
        f.write("starting training\n")
        for epochs in runs:
            n = 0
            for e in range(1, epochs + 1):
                for i in range(every, per_epoch + 1, every):
                    f.write(f"epoch={e} iter={i} loss={_loss(n)}\n")
                    n += 1
                f.write(f"finished epoch, time {10 + e}.5 s\n")
    return path


def test_a_step_counted_within_the_epoch_is_epoch_times_its_count_plus_it(tmp_path: Path) -> None:
    """Five epochs of four lines, ``iter`` 50 .. 200 in each: one run of 20 points on the
    axis 50 .. 1000 (epoch x 200 + iter), no restart said at the epoch boundaries."""
    path = _inner_console(tmp_path / "train.log", [5])
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20, loss
    assert close(loss["median"], statistics.median(_loss(n) for n in range(20))), loss
    assert (src["first_step"], src["last_step"]) == (50, 1000), src
    assert not TWO_RUNS_SAID.search(said(r).replace(str(path), "")), said(r)
    assert "restart" not in said(r), said(r)
    assert loss_spikes(r) == []


def test_an_inner_counter_whose_epoch_falls_is_a_second_run(tmp_path: Path) -> None:
    """Two runs appended (3 epochs, then 4): the epoch falls from 3 to 1 with the inner
    counter; the two runs are said, the last one's 16 points read on 50 .. 800."""
    path = _inner_console(tmp_path / "train.log", [3, 4])
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 16, loss
    assert (src["first_step"], src["last_step"]) == (50, 800), src
    assert TWO_RUNS_SAID.search(said(r).replace(str(path), "")), said(r)
    assert said(r).count("falls") == 1, said(r)


def test_a_step_that_climbs_across_epochs_is_the_run_step(tmp_path: Path) -> None:
    """A global step beside the epoch (it climbs on at each new epoch) is taken as it is."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(20):
            f.write(f"epoch={n // 4 + 1} iter={(n + 1) * 50} loss={_loss(n)}\n")
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20, loss
    assert (src["first_step"], src["last_step"]) == (50, 1000), src


def test_a_step_within_the_epoch_on_one_line_kind_is_one_run(tmp_path: Path) -> None:
    """The inner counter on a log of one line kind (no epoch summary): one run, 20 points."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(20):
            f.write(f"epoch: {n // 4 + 1} step: {(n % 4 + 1) * 5}, loss is {_loss(n)}\n")
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20, loss
    assert (src["first_step"], src["last_step"]) == (5, 100), src
    assert not TWO_RUNS_SAID.search(said(r).replace(str(path), "")), said(r)


# ---------------------------------------------------------------------------------------------
# boosting rounds: ``[r]`` before each line, an error function measured on each side


def _rounds(path: Path, n: int = 12) -> Path:
    """``[r]\\ttrain-rmse:a\\teval-rmse:b`` for r = 0 .. n-1, the eval side above the
    train side, both falling."""
    with open(path, "w") as f:
        f.write("[12:00:01] WARNING: using default objective\n")
        for r in range(n):
            f.write(f"[{r}]\ttrain-rmse:{_loss(r, 2.0):.5f}\teval-rmse:{_loss(r, 2.5) + 0.1:.5f}\n")
    return path


def test_a_number_in_brackets_starting_each_line_is_its_step(tmp_path: Path) -> None:
    """``[r] ... loss: x``: the bracketed number that climbs at every line is the step."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(15):
            f.write(f"[{5 * (n + 1)}] train loss: {_loss(n)}\n")
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 15, loss
    assert (src["first_step"], src["last_step"]) == (5, 75), src


def test_an_error_function_on_each_side_is_the_loss_and_the_held_out_loss(tmp_path: Path) -> None:
    """No column says loss: the train side's error function (``train-rmse``) is the loss,
    the held-out side's of the same function (``eval-rmse``) the held-out loss, apart; the
    rounds are the step (0 .. 11)."""
    r = run(_rounds(tmp_path / "boost.log"))
    src = source(r)
    assert src["columns"]["loss"].replace("-", "_") == "train_rmse", src
    assert src["columns"]["val_loss"].replace("-", "_") == "eval_rmse", src
    (loss,) = series(r, "loss")
    (held,) = series(r, "val_loss")
    assert loss["n"] == held["n"] == 12
    assert close(loss["median"], statistics.median(round(_loss(i, 2.0), 5) for i in range(12)))
    assert (src["first_step"], src["last_step"]) == (0, 11), src


def test_a_named_loss_comes_before_an_error_function(tmp_path: Path) -> None:
    """A log that names its loss keeps it, an error function beside it is no stand-in."""
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        for n in range(15):
            f.write(f"step {n} loss={_loss(n)} mae={_loss(n, 1.0)}\n")
    r = run(path)
    assert source(r)["columns"]["loss"] != "mae", source(r)


# ---------------------------------------------------------------------------------------------
# a Jupyter notebook: its cells' printed outputs are the console


def _notebook(path: Path, lines: list[str]) -> Path:
    """An nbformat 4 notebook: a markdown cell, a code cell whose stream output prints
    ``lines`` (in two chunks, as a kernel flushes them), a result's ``text/plain`` and an
    image, as a notebook saved after a run holds them."""
    half = len(lines) // 2
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# train\n"]},
        {
            "cell_type": "code",
            "execution_count": 1,
            "metadata": {},
            "source": ["model.fit(x, y)\n"],
            "outputs": [
                {"name": "stdout", "output_type": "stream", "text": lines[:half]},
                {"name": "stdout", "output_type": "stream", "text": "".join(lines[half:])},
                {
                    "output_type": "execute_result",
                    "execution_count": 1,
                    "metadata": {},
                    "data": {"text/plain": ["<Model at 0x7f00>"]},
                },
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]},
                },
            ],
        },
    ]
    doc = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 2}
    path.write_text(json.dumps(doc, indent=1), "utf-8")
    return path


def test_a_notebook_s_printed_outputs_are_read_as_its_console(tmp_path: Path) -> None:
    """A notebook whose cell printed ``step s | loss x`` lines: read as that console (20
    points on 10 .. 200), not refused as a JSON document with no rows."""
    lines = [f"step {10 * (n + 1)} | loss {_loss(n)}\n" for n in range(20)]
    r = run(_notebook(tmp_path / "train.ipynb", lines))
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20, loss
    assert close(loss["median"], statistics.median(_loss(n) for n in range(20))), loss
    assert (src["first_step"], src["last_step"]) == (10, 200), src
    assert "notebook" in said(r), said(r)
