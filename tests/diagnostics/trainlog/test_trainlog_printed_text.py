"""What a printed log holds besides its data, read as text (issue 35's second held-out set):
a setting's name and value (an argparse Namespace, a config dump, a dataclass field of the
script's source) is no event, whatever its words; a non-finite field printed with its unit
(``step_avg:nanms``) keeps its line in its line kind; a trainer format's eval lines are read
beside its train lines, each a series. Synthetic logs, each in the two ways a text log is
read: one data line kind (key/value pairs line by line) and several (line templates).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.trainlog_kit import run, series

PREAMBLES = {
    "namespace": [
        "[11/19 08:55:06] trainer INFO: Command line arguments: Namespace(config_file="
        "'cfg.yaml', resume=False, eval_only=False, num_gpus=2, opts=[])",
        "[11/19 08:55:06] trainer INFO: Namespace(resume=True, restore_ckpt='out/a.pth')",
    ],
    "config dump": [
        "SOLVER:",
        "  CHECKPOINT_PERIOD: 1000",
        "  save_checkpoint: true",
        "  resume_from_checkpoint: 0",
        "  restore_optimizer: off",
        "  resume: True",
        "args: auto_resume=1 ckpt_every=500 checkpoint_dir=out/ckpt",
        "  save_model: true",
        "  model_save_dir: out/models",
        "  write_policy_every: 5",
    ],
    "source code": [
        "@dataclass",
        "class Hyperparameters:",
        "    save_every : int = 0 # every how many steps to save the checkpoint? 0 for only at the end",
        "    resume_from : str = 'latest' # the checkpoint to resume from",
        "    restore_state : bool = False",
    ],
}


def _log(
    path: Path,
    preamble: list[str],
    kinds: int,
    save: str = "Saving checkpoint to out/model_0000050.pth",
) -> Path:
    lines = list(preamble)
    for s in range(1, 61):
        lines.append(f"iter: {s}  total_loss: {2.0 / math.sqrt(s) + 0.3:.4f}  lr: 0.01")
        if kinds > 1 and s % 10 == 0:
            lines.append(f"eval iter: {s}  loss: {2.1 / math.sqrt(s) + 0.35:.4f}")
        if s == 50:
            lines.append(save)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kinds", [1, 2])
@pytest.mark.parametrize("what", sorted(PREAMBLES))
def test_a_printed_setting_is_no_event(tmp_path: Path, what: str, kinds: int) -> None:
    """``resume=False`` / ``resume=True`` in a Namespace, ``CHECKPOINT_PERIOD: 1000`` in a
    config, ``save_every : int = 0 # ... checkpoint`` in the source: what a run is set to do,
    not what it did. The save the log announces is the one event."""
    r = run(_log(tmp_path / "train.log", PREAMBLES[what], kinds))
    assert r.code in (0, 1), r.all("error")
    events = [(e["kind"], e["step"]) for e in r.all("event") if e["source"] == "log"]
    assert events == [("checkpoint", 50)], r.all("event")
    (loss,) = series(r, "loss")
    assert loss["n"] == 60


SAVES = [
    "Saving checkpoint to out/ckpt at step 50",
    "checkpoint saved (step 50)",
    "INFO 2026-06-12 11:35:18 train.py:367 Checkpoint policy after step 50",
    "checkpointing at iteration 50",
    # no step on the line: the save follows the train line before it
    "saved model at epoch 5",
    "Model weights saved in out/run-7/model.safetensors",
]


@pytest.mark.parametrize("kinds", [1, 2])
@pytest.mark.parametrize("save", SAVES)
def test_a_line_that_says_a_save_happened_is_a_checkpoint(
    tmp_path: Path, save: str, kinds: int
) -> None:
    """A save in the words a trainer prints it: a verb of saving beside what was saved, in
    either order, or "checkpoint" itself the verb at a step. Its step is the one the line
    states, else the train line's before it. Before: "Checkpoint policy after step N",
    "checkpointing at ...", "saved model ..." and "Model weights saved ..." gave none."""
    r = run(_log(tmp_path / "train.log", [], kinds, save))
    assert r.code in (0, 1), r.all("error")
    events = [(e["kind"], e["step"]) for e in r.all("event") if e["source"] == "log"]
    assert events == [("checkpoint", 50)], r.all("event")
    (loss,) = series(r, "loss")
    assert loss["n"] == 60


@pytest.mark.parametrize(
    "line",
    [
        "Evaluating checkpoint at step 50",
        "best checkpoint at epoch 5 (loss 0.41)",
        'File "train.py", line 88, in save_model',
        "Will not save the model: no improvement",
    ],
)
def test_a_checkpoint_used_or_not_saved_is_no_save(tmp_path: Path, line: str) -> None:
    r = run(_log(tmp_path / "train.log", [], 2, line))
    assert r.code in (0, 1), r.all("error")
    assert [e for e in r.all("event") if e["source"] == "log"] == []


def test_a_non_finite_field_with_its_unit_keeps_its_line(tmp_path: Path) -> None:
    """A timer's average is ``nan`` until it has one (``step_avg:nanms``): the first eval
    line and the first train lines are of the same kind as the later ones, and the eval
    loss keeps its first point."""
    lines = []
    for s in range(0, 81):
        avg = "nan" if s < 6 else f"{100 + s % 7:.2f}"
        if s % 10 == 0:
            lines.append(
                f"step:{s}/80 val_loss:{5 - s / 40:.4f} train_time:{s * 100}ms step_avg:{avg}ms"
            )
        if s:
            lines.append(
                f"step:{s}/80 train_loss:{5 - s / 45:.4f} train_time:{s * 100}ms step_avg:{avg}ms"
            )
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.all("error")
    (loss,) = series(r, "loss")
    (val,) = series(r, "val_loss")
    assert (loss["n"], val["n"]) == (80, 9)


def test_llmc_eval_lines_are_read_beside_the_train_lines(tmp_path: Path) -> None:
    """llm.c's log: ``s:N tel:x`` (the eval loss, every 20 steps) among ``s:N trl:x lr:y
    norm:z``: the eval loss is the held-out series, at the step each line states; the
    train loss keeps one point a step."""
    lines = []
    for s in range(0, 101):
        if s % 20 == 0:
            lines.append(f"s:{s} tel:{11 - s / 20:.4f}")
        lines.append(f"s:{s} trl:{11 - s / 19:.4f} lr:0.000600 norm:{1 + 1 / (s + 1):.2f}")
    log = tmp_path / "main.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.all("error")
    assert r.one("source")["format"] == "llm.c"
    (loss,) = series(r, "loss")
    (val,) = series(r, "val_loss")
    assert (loss["n"], val["n"]) == (101, 6)
    assert [e for e in r.all("event") if e["kind"] == "resume"] == []


MODULE_PRINT = (
    "Net(\n"
    "  (head): Linear(in_features=4, out_features=512, bias=True)\n"
    "  (ff_1): Linear(in_features=512, out_features=512, bias=True)\n"
    "  (drop): Dropout(p=0.1, inplace=False)\n"
    ")\n"
)


def test_a_console_rewritten_with_carriage_returns_is_read_a_piece_a_line(tmp_path: Path) -> None:
    """A terminal's console saved as it was sent: each episode's line starts with a
    carriage return and overwrites the one before, no newline between them (a full line
    again now and then). Each piece is a line: a row an episode."""
    pieces = "".join(
        f"\rEpisode {e}\tFrame {20 * e} \tloss: {1.0 / e + 0.1:.4f}" for e in range(1, 121)
    )
    log = tmp_path / "training.log"
    log.write_bytes(("Using cpu\n" + pieces + "\n").encode())
    r = run(log)
    assert r.code in (0, 1), r.all("error")
    (loss,) = series(r, "loss")
    assert loss["n"] == 120


def test_a_printed_model_is_no_data(tmp_path: Path) -> None:
    """A model's printed structure (``(head): Linear(in_features=4, out_features=512)``)
    is text: its numbers are no series, so a log of episode lengths alone is refused naming
    them, not the layer sizes."""
    rows = "".join(f"Episode {e} Length: {20 + e % 5}.00\n" for e in range(1, 60))
    log = tmp_path / "training.log"
    log.write_text("Using cpu\n" + MODULE_PRINT + rows)
    r = run(log)
    assert r.code == 2
    (err,) = r.all("error")
    assert err["numeric"] == ["Length"], err
    assert not any("features" in k for _, ks in err["left_out"] for k in ks), err
