"""``train-log --follow`` on the logs the structure readers read (issue 35's leftovers): the
console of key/value tables stable-baselines3 and OpenAI baselines print (a table judged once
its closing ruler is printed), a console read by its line templates (train and validation
lines, the step from ``[i/N]``), and the spike at a resume joined to the checkpoint it
resumed from, as ``train-log`` joins it.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

import remotekit
import remotekit.diagnostics.trainlog as tl
from tests import ckpt_factory as cf
from tests.trainlog_kit import follow, once_started, until

pytestmark = pytest.mark.timeout(240)


def _table(step: int, loss: float, close: bool = True) -> str:
    """One dump of stable-baselines3's ``HumanOutputFormat`` (its layout: sections, keys
    indented by four blanks, a ruler above and below)."""
    rows = [
        ("rollout/", ""),
        ("    ep_rew_mean", f"{20 + step / 1000:.3g}"),
        ("time/", ""),
        ("    total_timesteps", str(step)),
        ("train/", ""),
        ("    entropy_loss", "-0.69"),
        ("    loss", f"{loss:.3g}"),
        ("    value_loss", f"{2 * loss:.3g}"),
    ]
    ruler = "-" * 40
    out = [ruler] + [f"| {k:<22} | {v:<11} |" for k, v in rows] + ([ruler] if close else [])
    return "\n".join(out) + "\n"


def _losses(n: int, seed: int = 0) -> list[float]:
    rnd = random.Random(seed)
    return [2.0 + 0.02 * math.sin(i * 1.7) + rnd.gauss(0, 0.005) for i in range(n)]


def test_a_table_waits_for_its_closing_ruler() -> None:
    from remotekit.remote.trainlog.readers.kvtable import TableTail

    tail = TableTail()
    tail.feed(b"Using cpu device\n" + _table(256, 2.0).encode())
    whole = tail.window()
    tail.feed(_table(512, 40.0, close=False).encode())
    assert tail.window() == whole  # the new table is not whole yet: held back
    tail.feed(b"-" * 40 + b"\n")
    assert tail.window().endswith(_table(512, 40.0).encode())
    tail.feed(b"Eval num_timesteps=512, episode_reward=9.40 +/- 0.66\n")
    assert tail.window().endswith(b"episode_reward=9.40 +/- 0.66\n")


def test_an_sb3_console_is_followed_and_a_spike_said_once_its_table_is_whole(
    local: remotekit.Target, tmp_path: Path
) -> None:
    log = tmp_path / "console.txt"
    losses = _losses(300)
    log.write_text(
        "Using cpu device\n" + "".join(_table(256 * (i + 1), v) for i, v in enumerate(losses))
    )
    more = _losses(40, seed=1)
    more[20] = 40.0
    text = "".join(_table(256 * (301 + i), v) for i, v in enumerate(more))
    with follow(local, str(log), on_status=once_started(lambda: _append(log, text))) as live:
        inc = until(live, lambda i: True)
    assert (inc.kind, inc.metric, inc.step) == ("spike", "loss", 256 * 321)
    assert live.source is not None and live.source.format == "kvtable"
    assert live.source.step_key == "time/total_timesteps"


def _append(log: Path, text: str) -> None:
    with log.open("a") as f:
        f.write(text)


def test_a_console_read_by_its_templates_is_followed_with_steps_from_its_lines(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """Train lines per 10 batches of 100, a validation line per epoch: the spike is said at
    epoch x 100 + batch, in the train loss, never merged with the validation loss."""
    log = tmp_path / "train.log"

    def epoch(e: int, losses: list[float]) -> str:
        out = [
            f"Train Epoch: {e} [{b}/100]\tLoss: {v:.4f}" for b, v in zip(range(10, 101, 10), losses)
        ]
        return "\n".join(out) + f"\nValidation Epoch: {e}\tLoss: 2.5000\n"

    base = _losses(400)
    log.write_text("".join(epoch(e, base[10 * e : 10 * e + 10]) for e in range(40)))
    more = _losses(60, seed=2)
    more[33] = 30.0
    text = "".join(epoch(40 + e, more[10 * e : 10 * e + 10]) for e in range(6))
    with follow(local, str(log), on_status=once_started(lambda: _append(log, text))) as live:
        inc = until(live, lambda i: True)
    assert inc.kind == "spike" and inc.metric is not None and "val" not in inc.metric
    assert inc.step == 43 * 100 + 40  # epoch 43, batch 40 of 100


def _save(path: Path, step: int, drop: int = 0) -> None:
    model, opt = cf.train_tiny(3)
    osd = opt.state_dict()
    for i in sorted(osd["state"])[len(osd["state"]) - drop :]:
        del osd["state"][i]
    torch.save({"model": model.state_dict(), "optimizer": osd, "step": step}, path)


def test_a_followed_spike_at_a_resume_names_what_the_checkpoint_lacked(
    local: remotekit.Target, tmp_path: Path
) -> None:
    rnd = random.Random(0)
    log = tmp_path / "train.log"
    log.write_text(
        "".join(f"step={s} loss={2.0 + rnd.gauss(0, 0.01):.4f}\n" for s in range(1, 1501))
    )
    (tmp_path / "checkpoints").mkdir()
    _save(tmp_path / "checkpoints" / "ckpt_500.pt", 500)
    _save(tmp_path / "checkpoints" / "ckpt_1000.pt", 1000, drop=2)
    again = "".join(
        f"step={s} loss={2.0 + 3.0 * math.exp(-(s - 1001) / 15) + rnd.gauss(0, 0.01):.4f}\n"
        for s in range(1001, 1400)
    )
    with follow(
        local,
        str(log),
        checkpoints=str(tmp_path / "checkpoints"),
        on_status=once_started(lambda: _append(log, again)),
    ) as live:
        spikes = []
        for inc in live:
            if inc.spike is not None:
                spikes.append(inc)
                break
    (inc,) = spikes
    assert inc.spike is not None and inc.spike.resume_from == 1000
    assert "no optimizer state for 2 of" in (inc.spike.resume_check or ""), inc.spike
    assert "the resume from step 1000" in inc.render()


def test_a_console_followed_from_its_first_line_settles_on_its_templates(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """Its first line alone sniffs as a headerless TSV (a tab in it), yet the text reader
    reads that line's loss: the follower settles on it from the first line, as train-log
    whole does (before: the TSV reader, and no loss found)."""
    log = tmp_path / "train.log"
    losses = _losses(400)
    lines = [
        f"Train Epoch: {e} [{b}/100]\tLoss: {losses[10 * e + b // 10 - 1]:.4f}"
        for e in range(40)
        for b in range(10, 101, 10)
    ]
    log.write_text(lines[0] + "\n")
    more = _losses(30, seed=3)
    more[17] = 30.0
    lines += [
        f"Train Epoch: {40 + k // 10} [{10 * (k % 10 + 1)}/100]\tLoss: {v:.4f}"
        for k, v in enumerate(more)
    ]
    base = "".join(line + "\n" for line in lines[1:400])
    rest = "".join(line + "\n" for line in lines[400:])
    steps: list[str] = []

    def on_status(s: tl.FollowStatus) -> None:
        """The baseline once the follower runs; the rest once it was judged."""
        if not steps:
            steps.append("base")
            _append(log, base)
        elif len(steps) == 1 and s.rows >= 400:
            steps.append("rest")
            _append(log, rest)

    with follow(local, str(log), on_status=on_status) as live:
        inc = until(live, lambda i: True)
        warned = list(live.warnings)
    assert (inc.kind, inc.step) == ("spike", 41 * 100 + 80)  # epoch 41, batch 80 of 100
    assert live.source is not None and live.source.format == "text"
    assert not any("second run" in w for w in warned), warned
