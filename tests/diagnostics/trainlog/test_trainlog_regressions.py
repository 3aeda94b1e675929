"""Last month's classes, on runs of other shapes (issue 35, class 8): a 5x grad-norm step
after a decaying start, saves and resumes invented from a printed config or a start from
scratch, a Megatron log behind a long preamble, the periodicity of a sawtooth longer than
the lags looked at.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from tests.trainlog_kit import run, shipped

# -- last month's classes, on runs of other shapes -----------------------------------------------


def test_a_5x_grad_norm_step_after_a_decaying_start_is_a_spike(tmp_path: Path) -> None:
    """A short log whose grad norm decays from 4.5 to 0.5 (the learning phase) and later
    steps 5x for one row (2% noise): the decay made the scale, and the step was missed."""
    rng = random.Random(5)
    rows = []
    for s in range(1, 44):
        g = (0.5 + 4 * 0.85 ** (s - 1)) * (1 + rng.gauss(0, 0.02))
        rows.append(
            {
                "step": s,
                "loss": round(3 - 0.01 * s, 4),
                "grad_norm": round(g * (5 if s == 36 else 1), 4),
            }
        )
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(d) + "\n" for d in rows))
    assert 36 in run(log).spikes("grad_norm")


def test_no_save_or_resume_from_a_printed_config_or_a_start_from_scratch(tmp_path: Path) -> None:
    """nanoGPT prints its config file before the log: a setting's comment ("save a checkpoint
    after each eval", "'scratch' or 'resume'") says what it does, not what happened; "no
    checkpoint found ... starting from random weights" says there was nothing to resume."""
    log = tmp_path / "train.log"
    log.write_text(
        "Overriding config with config/train_shakespeare_char.py:\n"
        "always_save_checkpoint = True # if True, always save a checkpoint after each eval\n"
        "init_from = 'scratch' # 'scratch' or 'resume' or 'gpt2*'\n"
        "resume: None\n"
        "Initializing a new model from scratch\n"
        "no checkpoint found at out/ckpt.pt: starting from random weights (not resuming)\n"
        + "".join(f"step {s}: loss={4.2 - 0.05 * s:.3f}\n" for s in range(1, 21))
        + "saving checkpoint to out/ckpt.pt at step 20\n"
    )
    events = [(e["kind"], e["step"]) for e in run(log).all("event") if e["source"] == "log"]
    assert events == [("checkpoint", 20)]


def _megatron_behind_a_preamble(path: Path) -> Path:
    """Megatron-LM's console behind 600 lines of an srun-labelled shell trace and the
    480-line arguments dump (1,083 lines before the first iteration line)."""
    rng = random.Random(3)
    lines = []
    for i in range(300):
        lines.append(f"0: + export NCCL_IB_TIMEOUT={20 + i % 3}")
        lines.append(f"0: ++ scontrol show hostnames 'node[{i:03d}-{i + 1:03d}]'")
    lines.append("------------------------ arguments ------------------------")
    lines += [f"  arg_{i:03d} ........................................ {i % 7}" for i in range(480)]
    lines.append("-------------------- end of arguments ---------------------")
    lines.append(" > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)")
    for i in range(1, 61):
        loss = 10.9 * 0.97**i + 2 + rng.gauss(0, 0.02)
        lines.append(
            f" iteration {10 * i:8d}/  500000 | consumed samples: {5120 * i:12d} | "
            f"learning rate: {1.5e-4 * min(1, i / 10):.6E} | global batch size:   512 | "
            f"lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {1.2 + rng.gauss(0, 0.05):.3f} |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_megatron_log_behind_a_long_preamble_is_read_as_megatron(tmp_path: Path) -> None:
    r = run(_megatron_behind_a_preamble(tmp_path / "slurm-1234.out"))
    src = r.one("source")
    assert src["format"] == "megatron" and src["rows"] == 60
    assert src["columns"]["loss"] == "lm loss" and src["columns"]["lr"] == "learning rate"
    start = r.one("onset")  # the padded vocabulary line gives the chance level
    assert start["chance"] == pytest.approx(math.log(50257), abs=1e-3) and not start["unhealthy"]


def test_the_periodicity_of_a_sawtooth_longer_than_its_lags_does_not_crash() -> None:
    """An epoch-long cycle over under two epochs: every autocorrelation peak is below 0, so
    no peak was within "0.9 x the top" and next() raised StopIteration."""
    comp = shipped("trainlog.composition")
    rng = random.Random(0)
    r = [(i % 111.5) / 111.5 + rng.gauss(0, 0.01) for i in range(175)]
    out = comp.periodicity(r)
    assert out is not None and out["periodic"] is False and out["acf"] < 0


def test_a_sawtooth_loss_log_is_analysed_to_the_end(tmp_path: Path) -> None:
    """The same end to end: a loss that climbs for 121 steps and falls back, twice; before,
    "the analysis failed (StopIteration ... in periodicity)", exit 2."""
    rng = random.Random(4)
    n = rng.randint(100, 400)
    period = rng.uniform(0.4, 0.9) * n
    rows = [
        json.dumps({"step": s, "loss": round(2 + (s % period) / period + rng.gauss(0, 0.01), 4)})
        for s in range(1, n + 1)
    ]
    (tmp_path / "log.jsonl").write_text("\n".join(rows) + "\n")
    r = run(tmp_path / "log.jsonl")
    assert r.code in (0, 1) and not r.all("error")
    assert r.one("periodicity")["periodic"] is False
