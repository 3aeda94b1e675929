"""Issue 35's fourth held-out set: real public logs gathered blind, by a helper who took no
part in the reading of printed logs, from repositories no earlier set used
(tests/data/public/heldout4/, each folder with its LICENSE and a NOTICE.md;
tests/public_runs.md, "Held-out runs, fourth set (issue 35)", says where each came from).

The expectations below were written from the files alone, before ``train-log`` was run on
any of them; one test a run, asserting the few facts a careful engineer would insist on: the
loss chosen and its length, the step axis, how many runs, the key finding present or absent.
The expected values are read from the files here with a plain regex, not with remotekit.
"""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

from tests.trainlog_kit import (
    NEVER_LEARNED,
    RESTART_SAID,
    TWO_RUNS_SAID,
    UNHEALTHY_SAID,
    assert_licensed_set,
    close,
    held_out,
    loss_spikes,
    numbers,
    resumes,
    run,
    said,
    said_apart_from_path,
    series,
    source,
)


def held(rel: str) -> Path:
    return held_out("heldout4", rel)


def loss_column(src: dict[str, object]) -> str:
    columns = src["columns"]
    assert isinstance(columns, dict) and "loss" in columns, src
    return str(columns["loss"]).split("/")[-1]


# ---------------------------------------------------------------------------------------------
# Keras CSVLogger files (``epoch,...`` header, one row an epoch)


def test_heldout4_keras_csvlogger_nan_from_the_first_epoch() -> None:
    """``epoch,loss,mean_absolute_error``: 354 rows (epoch 0 .. 353), ``loss`` is ``nan`` on
    every row; ``mean_absolute_error`` is 2.6e34 at epoch 0, then 0.9535 to the last digit on
    every later row. A run broken from its first logged point, never recovered. The careful
    answer: ``loss`` is the loss (not the error metric), the epoch is the step, and the run is
    called unhealthy (NaN from the start)."""
    path = held("braincnn-keras-nan/BrainCNN.log")
    rows = list(csv.DictReader(path.read_text("utf-8").splitlines()))
    assert len(rows) == 354 and all(row["loss"] == "nan" for row in rows)
    r = run(path)
    src = source(r)
    assert loss_column(src) == "loss"
    assert (src["first_step"], src["last_step"]) == (0, 353), src
    assert UNHEALTHY_SAID.search(said(r)), said(r)


def test_heldout4_keras_csvlogger_thousand_epochs_smooth() -> None:
    """The same header, 1,000 rows (epoch 0 .. 999): ``loss`` 0.619 -> 0.068, falling every
    few epochs by less than 1 % (no rise above 0.7 %), flat near 0.07 from about epoch 350;
    ``mean_absolute_error`` flat at ~0.227 from epoch 2. One run, no spike, not unhealthy."""
    path = held("braincnn-keras-csvlogger/BrainCNN.log")
    rows = list(csv.DictReader(path.read_text("utf-8").splitlines()))
    losses = [float(row["loss"]) for row in rows]
    assert len(losses) == 1000 and losses[0] > 0.6 and losses[-1] < 0.07
    r = run(path)
    src = source(r)
    assert loss_column(src) == "loss"
    assert (src["first_step"], src["last_step"]) == (0, 999), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 1000 and close(loss["median"], statistics.median(losses))
    assert not NEVER_LEARNED.search(said(r))
    assert not TWO_RUNS_SAID.search(said_apart_from_path(r))
    assert loss_spikes(r) == []


def test_heldout4_keras_csvlogger_many_metrics_with_lr_cuts() -> None:
    """A segmentation run's CSVLogger file: 12 columns (``accuracy``, ``dice_coef``, ``loss``,
    ``lr``, ``mean_io_u_5``, ``precision`` and their ``val_`` twins), 24 rows (epoch 0 .. 23).
    ``loss`` 0.056 -> 0.0258, ``val_loss`` 0.055 -> 0.0345 (its largest rise, +12 % at epoch 3,
    is noise before the first lr cut); ``lr`` cut by 5 at epochs 4, 8, 13, 16. ``dice_coef``
    and the IoU rise (maximised): not the loss. One run, healthy, no spike."""
    path = held("brats-keras-csvlogger/training.log")
    rows = list(csv.DictReader(path.read_text("utf-8").splitlines()))
    losses = [float(row["loss"]) for row in rows]
    val = [float(row["val_loss"]) for row in rows]
    assert len(losses) == len(val) == 24
    r = run(path)
    src = source(r)
    assert loss_column(src) == "loss"
    assert (src["first_step"], src["last_step"]) == (0, 23), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 24 and close(loss["median"], statistics.median(losses))
    (held_loss,) = series(r, "val_loss")
    assert held_loss["n"] == 24 and close(held_loss["median"], statistics.median(val))
    assert not NEVER_LEARNED.search(said(r))
    assert not TWO_RUNS_SAID.search(said_apart_from_path(r))
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# a hand-rolled TensorFlow trainer's console, saved as Markdown


def test_heldout4_tf_console_step_lines_and_epoch_test_lines_apart() -> None:
    """In a Markdown code fence: two shape lines, then per epoch (``Epoch e/2``) 16 lines
    ``Epoch e/2 | Step s/781 | train_loss: x | train_acc: y | lr: z`` (s = 0, 50 .. 750) and
    one ``Epoch e/2 | train_loss: x | train_acc: y | test_loss: t | test_acc: u | lr: z``
    line; then ``final testing accuracy``. The careful answer: the 32 step lines are the
    train loss (median 0.296), the two epoch lines are not merged into it; the test loss is
    the held-out loss (2 points, 0.2735 and 0.2803); the step is epoch x 781 + s, not the
    row. One run, no spike."""
    path = held("tfnlp-imdb-console/only_attn_text_clf_imdb_test.md")
    text = path.read_text("utf-8")
    train = numbers(text, r"^Epoch \d/2 \| Step \d+/781 \| train_loss: ([\d.]+)")
    test = numbers(text, r"^Epoch \d/2 \| train_loss: [\d.]+ .*test_loss: ([\d.]+)")
    assert len(train) == 32 and test == [0.2735, 0.2803]
    r = run(path)
    src = source(r)
    assert loss_column(src) == "train_loss"
    (loss,) = series(r, "loss")
    assert loss["n"] == 32 and close(loss["median"], statistics.median(train))
    (held_loss,) = series(r, "val_loss")
    assert held_loss["n"] == 2 and close(held_loss["median"], statistics.median(test))
    assert (src["first_step"], src["last_step"]) in ((0, 1531), (781, 2312)), src
    assert not TWO_RUNS_SAID.search(said_apart_from_path(r))
    assert loss_spikes(r) == []


def test_heldout4_tf_console_generated_text_between_lines() -> None:
    """20 lines ``Epoch 1/1 | Batch b/1959622 | train loss: x | lr: 0.0010`` (b = 4810 ..
    5000 by 10; the file starts mid-run, as its author kept it), and twice a sample of
    generated prose between them (text, not data). ``train loss`` 0.367 .. 0.385. The careful
    answer: 20 rows, the batch is the step (4810 .. 5000), no resume invented from a log that
    starts late, no spike."""
    path = held("tfnlp-textgen-console/rnn_text_gen_test.md")
    losses = numbers(
        path.read_text("utf-8"), r"^Epoch 1/1 \| Batch \d+/1959622 \| train loss: ([\d.]+)"
    )
    assert len(losses) == 20
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 20 and close(loss["median"], statistics.median(losses))
    assert (src["first_step"], src["last_step"]) == (4810, 5000), src
    assert resumes(r) == []
    assert not RESTART_SAID.search(said_apart_from_path(r))
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# fairseq-train's console, two log formats


def test_heldout4_fairseq_json_records_kept_apart() -> None:
    """fairseq's console with ``--log-format json``: a 7 KB config dict on one line, an
    overflow note, then ``train_inner | {...}`` records at ``num_updates`` 25, 50, 10025, 10050
    (``loss`` 18.665, 16.884, 8.667, 8.739: the file is an excerpt, the updates between are
    not there), one ``valid | {..."valid_loss": "8.535"...}`` record at 10000, one end-of-epoch
    ``train | {..."train_loss": "7.874"...}`` record (``train_num_updates`` 100000), "done
    training". The careful answer: the loss is the train_inner ``loss`` (4 points, on the
    ``num_updates`` axis, from 25); the valid and end-of-epoch records are not merged into it;
    no spike."""
    path = held("fairseq-json-inner/train.log")
    text = path.read_text("utf-8")
    inner = numbers(text, r'train_inner \| \{.*"loss": "([\d.]+)"')
    assert inner == [18.665, 16.884, 8.667, 8.739]
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 4 and close(loss["median"], statistics.median(inner))
    assert src["first_step"] == 25 and src["last_step"] in (10050, 100000), src
    assert not TWO_RUNS_SAID.search(said_apart_from_path(r))
    assert loss_spikes(r) == []


def test_heldout4_fairseq_simple_lines_kept_apart() -> None:
    """fairseq's console with ``--log-format simple``, after a ``commit ...`` line and a
    ``Submitted batch job`` line: three ``train_inner | epoch 001:  i / 50000 loss=x, ...``
    lines (i = 1, 2, 10; loss 16.264, 14.191, 9.331), one ``valid | epoch 001 | valid on
    'valid' subset | loss 9.189 | ... | num_updates 10`` line, one end-of-epoch ``train |
    epoch 001 | loss 11.87 | ...`` line. The careful answer: the train loss is the three
    train_inner values (steps 1 .. 10), the validation loss is 9.189 and is not merged into it,
    nor is the epoch average."""
    path = held("fairseq-simple-inner/train.log")
    text = path.read_text("utf-8")
    inner = numbers(text, r"train_inner \| epoch 001: +\d+ / 50000 loss=([\d.]+)")
    assert inner == [16.264, 14.191, 9.331]
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 3 and close(loss["median"], statistics.median(inner))
    assert (src["first_step"], src["last_step"]) == (1, 10), src
    (held_loss,) = series(r, "val_loss")
    assert held_loss["n"] == 1 and close(held_loss["median"], 9.189), held_loss


# ---------------------------------------------------------------------------------------------
# Caffe's glog console


def test_heldout4_caffe_console_two_iterations_each_printed_twice() -> None:
    """glog lines (``I0728 23:55:38.788589  4259 solver.cpp:44] ...``): the solver's and the
    net's prototxt printed whole (``top: "loss"``, ``type: "SoftmaxWithLoss"``: text, not
    data), ~100 layer set-up lines, then iterations 0 and 100, each as ``Iteration i (...
    iter/s, ...), loss = x``, ``Train net output #0: loss = x (* 1 = x loss)`` and
    ``Iteration i, lr = y``. The careful answer: 2 loss points (2.40473 at 0, 0.224371 at 100)
    on the iteration axis, not 4 (the same value printed twice is one point)."""
    path = held("caffe-glog-console/train.log")
    text = path.read_text("utf-8")
    points = re.findall(r"Iteration (\d+) \(.*\), loss = ([\d.]+)", text)
    assert points == [("0", "2.40473"), ("100", "0.224371")]
    assert len(re.findall(r"loss = [\d.]+", text)) == 4
    r = run(path)
    src = source(r)
    (loss,) = series(r, "loss")
    assert loss["n"] == 2 and close(loss["median"], (2.40473 + 0.224371) / 2)
    assert (src["first_step"], src["last_step"]) == (0, 100), src


# ---------------------------------------------------------------------------------------------
# a reinforcement-learning console with no loss at all, several runs in one file


def test_heldout4_rl_console_reward_is_no_loss_and_runs_are_said() -> None:
    """Markdown: notes, then a ``#### PG`` fence: 84 lines ``Episode n  Avg: r  BestAvg: b
    \u03c3: s  |  Steps: t  Secs: u`` (episode 100 .. 8400, ``Avg`` -20.24 -> ~2, the mean
    return, maximised), "Saved to ...", "Loaded: ...", then 22 more from episode 100 again
    (a second run from the saved weights); a ``#### PPO`` fence with ``ε`` and ``β`` columns:
    episodes 100, 200, "Loaded: ...", 100, 200, 300, then 300 again with other values, 400,
    500. No loss is printed anywhere. The careful answer: no column of returns (``Avg``,
    ``BestAvg``) or spread (``\u03c3``, a Greek sigma) is taken as the loss; where rows are read, the runs
    appended (the episode counter falls three times, and repeats once) are said."""
    path = held("angela-pong-console/pong.md")
    text = path.read_text("utf-8")
    episodes = [int(x) for x in re.findall(r"^Episode +(\d+) ", text, re.M)]
    falls = [i for i in range(1, len(episodes)) if episodes[i] <= episodes[i - 1]]
    assert len(episodes) == 114 and len(falls) == 4
    assert "loss" not in text.lower()
    r = run(path)
    if r.code == 2:
        return  # refused: nothing to call a loss (the careful answer's first half)
    src = source(r)
    chosen = src.get("columns", {}).get("loss")
    assert chosen is None or not re.search("avg|\u03c3|sigma|best|steps|secs", str(chosen), re.I), (
        src
    )
    assert TWO_RUNS_SAID.search(said_apart_from_path(r)), said(r)


# ---------------------------------------------------------------------------------------------
# the set itself


def test_heldout4_runs_keep_their_license_and_notice() -> None:
    assert_licensed_set("heldout4", "## Held-out runs, fourth set (issue 35)", 8)
