"""Issue 35's eighth held-out set: real public logs gathered blind, by a helper who took no
part in the reading of printed logs and did not read the readers, from repositories no
earlier set used (tests/data/public/heldout8/, each folder with its LICENSE and a NOTICE.md;
tests/public_runs.md, "Held-out runs, eighth set (issue 35)", says where each came from).

The expectations below were written from the files alone, before ``train-log`` was run on
any of them; one test a run, asserting the few facts a careful engineer would insist on: the
loss chosen and its length, the step axis, how many runs, the key finding present or absent
(here a real NaN), the held-out loss kept apart. The expected values are read from the files
here with a plain regex, not with remotekit.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from tests.trainlog_kit import (
    NEVER_LEARNED,
    RESTART_SAID,
    assert_licensed_set,
    chosen,
    close,
    held_out,
    loss_spikes,
    run,
    said,
    said_apart_from_path,
    series,
    source,
)

#: What the tool says of a loss that is not a number (the file's path taken out first: a
#: folder here is named ``...-nan``).
NAN_SAID = re.compile(r"\bnan\b|non-?finite|not a number", re.I)


def held(rel: str) -> Path:
    return held_out("heldout8", rel)


# ---------------------------------------------------------------------------------------------
# Malaya's Trainium notes: a Hugging Face Trainer console whose loss goes to NaN


def test_heldout8_trainer_dicts_with_a_real_nan_said() -> None:
    """Malaya's ``session/trainium-chip/README.md`` (34 KB): a ``neuron_parallel_compile
    torchrun ... run_clm.py --max_steps 10 --logging_steps 1`` command, then its console:
    about a hundred Neuron compile-cache lines and tqdm bars around ten Hugging Face Trainer
    dicts ``{'loss': x, 'learning_rate': y, 'epoch': 0.0}``: the loss is 0.0 five times, then
    ``nan`` twice, then 338649581355008.0, then 0.0 twice (the learning rate falls 1.8e-05 ->
    0.0 across them, one a step); then ``{'train_runtime': ..., 'train_loss': nan, 'epoch':
    0.0}``, a ``top`` table and a second command. No step is printed (``epoch`` is 0.0 on every
    dict): the dicts are steps 1 .. 10. The careful answer: the loss is the dicts' ``loss``,
    10 points (8 if the two NaNs are set apart), never the learning rate, the runtime or the
    epoch; the epoch is no step (it never moves); and the NaN is said: the run's loss went
    to NaN (a loss of exactly 0.0 and a 3.4e14 blow-up around it: a broken run); no held-out
    loss."""
    path = held("malaya-trainium-nan/README.md")
    text = path.read_text("utf-8")
    rows = re.findall(r"\{'loss': ([^,]+), 'learning_rate': ([^,]+), 'epoch': ([^}]+)\}", text)
    losses = [float(x) for x, _, _ in rows]
    assert len(rows) == 10 and {e for _, _, e in rows} == {"0.0"}
    assert [i for i, x in enumerate(losses) if math.isnan(x)] == [5, 6]
    assert max(x for x in losses if not math.isnan(x)) > 1e14
    assert "'train_loss': nan" in text
    r = run(path)
    src = source(r)
    name = chosen(src)
    assert name is None or not re.search(r"learning|rate|runtime|epoch|second", name, re.I), src
    (loss,) = series(r, "loss")
    assert loss["n"] in (8, 10), loss
    assert series(r, "val_loss") == []
    assert NAN_SAID.search(said_apart_from_path(r)), said(r)


# ---------------------------------------------------------------------------------------------
# walk-jump fork: a PyTorch Lightning job's tqdm progress bars, redirected to a file


def test_heldout8_lightning_progress_bars_one_point_an_epoch() -> None:
    """The walk-jump fork's file ``o`` (22 KB): a Hydra config dump (``lr: 0.0001``,
    ``weight_decay: 0.01``, ``monitor: val_loss``, ...), Lightning's start-up lines and model
    summary (``1.0 M Total params``), then its tqdm bars for 20 epochs of 2 batches each:
    ``Epoch e:  50%|...| 1/2 [00:00<00:00,  9.13it/s, loss=x, v_num=vakz]``, the bar redrawn
    several times an epoch (138 bar lines with a loss) and ``Validation DataLoader 0`` bars
    between them (no validation value is printed); each new epoch's first bars still show the
    last epoch's ``loss``. The ``loss`` settles on one value an epoch: 0.35, 0.341, 0.301 ...
    0.128, 0.125 for epochs 0 .. 19 (20 distinct values, median 0.178: Lightning's smoothed
    train loss); then ``Finished Training`` and the sampling step. The careful answer: the
    loss is the bars' ``loss``, one point an epoch (20), on the epoch axis (0 .. 19; or the
    global step, 2 an epoch), never the it/s, the bar's percent or a config value; the bar
    starting again at 0% each epoch is no restart; no held-out loss; one run, learning, no
    spike."""
    path = held("walkjump-lightning-tqdm/o")
    text = path.read_text("utf-8")
    bars = re.findall(
        r"^Epoch (\d+): +\d+%\|[^|]*\| (\d)/2 \[[^\]]*?, loss=([\d.]+), v_num=vakz\]", text, re.M
    )
    per_epoch: dict[int, float] = {}
    for epoch, _, value in bars:
        per_epoch[int(epoch)] = float(value)  # the last value an epoch shows
    assert len(bars) == 138 and sorted(per_epoch) == list(range(20))
    values = [per_epoch[e] for e in range(20)]
    assert (values[0], values[-1]) == (0.35, 0.125) and len(set(values)) == 20
    assert values == sorted(values, reverse=True)
    assert not re.search(r"val_loss[=:] *\d", text)
    r = run(path)
    src = source(r)
    name = chosen(src)
    assert name is None or not re.search(r"it/s|lr|decay|param|percent|v_num", name, re.I), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 20 and close(loss["median"], statistics.median(values)), loss
    assert src["last_step"] in (19, 20, 39, 40), src
    assert series(r, "val_loss") == []
    assert not RESTART_SAID.search(said_apart_from_path(r)), said(r)
    assert not NEVER_LEARNED.search(said(r)), said(r)
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# walk-jump fork: the same trainer's console as Weights & Biases captured it


def test_heldout8_lightning_wandb_capture_train_bars_and_checkpoint_val_loss() -> None:
    """The walk-jump fork's ``wandb/run-20250305_095436-xbc4dpre/files/output.log`` (5.5 KB):
    the console of a 20-epoch Lightning run as W&B's capture kept it: four tqdm bars only
    (``Epoch 1: 100%|...| 2/2 [..., loss=0.341, v_num=dpre]``, then epochs 6, 14 and 19:
    0.341, 0.23, 0.146, 0.125), warnings, and 17 ``ModelCheckpoint`` lines ``Epoch e, global
    step s: 'val_loss' reached x (best x), saving model to 'checkpoints/epoch=e-step=s-
    val_loss=....ckpt' as top k`` (e = 0, 2 .. 8, 10 .. 17, 19; s = e + 1; the val_loss falls
    0.333 -> 0.0573; the lines of epochs 1, 9 and 18 were not captured). The bars and the
    checkpoint lines are interleaved out of step (the epoch-6 bar stands before the epoch-2
    checkpoint line, the epoch-14 bar before epoch 10's), so the epoch read down the file falls
    three times without any restart. The careful answer: the train loss is the bars' ``loss``
    (4 points, median 0.188), never the checkpoint's ``val_loss``, ``best`` or ``top k``; the
    checkpoints' ``val_loss`` is the held-out loss (17 points), apart; one run (no restart),
    learning, no spike."""
    path = held("walkjump-wandb-output/output.log")
    text = path.read_text("utf-8")
    bars = re.findall(r"^Epoch (\d+): .*?, loss=([\d.]+), v_num=dpre\]$", text, re.M)
    ckpts = re.findall(
        r"^Epoch (\d+), global step (\d+): 'val_loss' reached ([\d.]+) \(best", text, re.M
    )
    assert [int(e) for e, _ in bars] == [1, 6, 14, 19]
    train = [float(x) for _, x in bars]
    val = [float(x) for _, _, x in ckpts]
    assert len(ckpts) == 17 and all(int(s) == int(e) + 1 for e, s, _ in ckpts)
    assert val == sorted(val, reverse=True)
    r = run(path)
    src = source(r)
    name = chosen(src)
    assert name is None or not re.search(r"val|best|top|step|it/s", name, re.I), src
    (loss,) = series(r, "loss")
    assert loss["n"] == 4 and close(loss["median"], statistics.median(train)), loss
    (held_loss,) = series(r, "val_loss")
    assert held_loss["n"] == 17 and close(held_loss["median"], statistics.median(val))
    assert not RESTART_SAID.search(said_apart_from_path(r)), said(r)
    assert not NEVER_LEARNED.search(said(r)), said(r)
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# stable-baselines3's logger page: one example table of the PPO console


def test_heldout8_sb3_logger_doc_one_table() -> None:
    """stable-baselines3's ``docs/common/logger.md`` (5.2 KB): a code example, then one
    example of the logger's output while training PPO: a single key/value table (``|
    eval/ |``: ``mean_ep_length 200``, ``mean_reward -157``; ``rollout/``: ``ep_len_mean``,
    ``ep_rew_mean -227``; ``time/``: ``fps 972``, ``iterations 19``, ``total_timesteps
    77824``; ``train/``: ``approx_kl``, ``clip_fraction``, ``entropy_loss -1.06``,
    ``explained_variance``, ``learning_rate``, ``loss 0.245``, ``n_updates 180``,
    ``policy_gradient_loss -0.00398``, ``std``, ``value_loss 0.226``), then prose naming each
    key (no numbers). The careful answer: one logged point; the loss is ``train/loss`` (0.245),
    never ``value_loss``, ``policy_gradient_loss``, ``entropy_loss`` or the rewards; a refusal
    (one point is too few to read a curve from) is careful too; no held-out loss (the ``eval/``
    section has rewards only), no spike, and no "never learned" said of a single point."""
    path = held("sb3-logger-doc-table/logger.md")
    text = path.read_text("utf-8")
    tables = re.findall(r"^\|    loss +\| ([-\d.e]+) +\|$", text, re.M)
    assert tables == ["0.245"] and text.count("|    total_timesteps") == 1
    r = run(path)
    if r.code == 2:
        return  # refused: a single point
    src = source(r)
    name = chosen(src)
    assert name is not None and re.search(r"(^|/)loss$", name), src
    for loss in series(r, "loss"):
        assert loss["n"] == 1 and close(loss["median"], 0.245), loss
    assert series(r, "val_loss") == []
    assert not NEVER_LEARNED.search(said(r)), said(r)
    assert loss_spikes(r) == []


# ---------------------------------------------------------------------------------------------
# the set itself


def test_heldout8_runs_keep_their_license_and_notice() -> None:
    assert_licensed_set("heldout8", "## Held-out runs, eighth set (issue 35)", 4)
