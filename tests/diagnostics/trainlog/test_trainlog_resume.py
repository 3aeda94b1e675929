"""A loss jump at a resume, joined to the checkpoint the run resumed from (issue 35,
"Checkpoints that can (or cannot) resume"): with the checkpoints given, ``train-log`` says
"loss spike at the resume from step 1000: <checkpoint>: no optimizer state for 2 of 4
parameters ...", a finding of its own (``spike-at-resume``); ``diagnose --run`` says it in the
run's verdict. The checkpoints are real torch saves of an Adam over TinyNet.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import remotekit
from remotekit.diagnostics import diagnose as dg
from remotekit.diagnostics import trainlog as tl
from tests import ckpt_factory as cf
from tests.smi import make_bin_dir, smi_env
from tests.trainlog_kit import run

pytestmark = pytest.mark.timeout(240)


def _resumed_log(path: Path) -> None:
    """Steps 1..1500, then the run resumed from its step-1000 save and logged 1001..2000
    again, its loss 1.5 above the curve at the resume and back within ~50 steps."""
    rnd = random.Random(0)

    def loss(s: int) -> float:
        return 2.0 * math.exp(-s / 800) + 0.5 + rnd.gauss(0, 0.01)

    lines = [f"step={s} loss={loss(s):.4f}" for s in range(1, 1501)]
    lines += [
        f"step={s} loss={loss(s) + 1.5 * math.exp(-(s - 1001) / 15):.4f}" for s in range(1001, 2001)
    ]
    path.write_text("\n".join(lines) + "\n")


def _save(path: Path, step: int, drop: int = 0) -> None:
    model, opt = cf.train_tiny(3)
    osd = opt.state_dict()
    for i in sorted(osd["state"])[len(osd["state"]) - drop :]:
        del osd["state"][i]
    torch.save({"model": model.state_dict(), "optimizer": osd, "step": step}, path)


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    _resumed_log(tmp_path / "train.log")
    (tmp_path / "checkpoints").mkdir()
    _save(tmp_path / "checkpoints" / "ckpt_500.pt", 500)
    _save(tmp_path / "checkpoints" / "ckpt_1000.pt", 1000, drop=2)
    return tmp_path


def test_a_spike_at_a_resume_names_what_the_checkpoint_lacked(run_dir: Path) -> None:
    ckpt = run_dir / "checkpoints" / "ckpt_1000.pt"
    r = run(run_dir / "train.log", "--checkpoints", run_dir / "checkpoints")
    (spike,) = [s for s in r.all("spike") if s["event"] == "resume"]
    assert spike["resume_from"] == 1000
    assert spike["resume_check"] == (
        f"{ckpt}: no optimizer state for 2 of 4 parameters (model.fc2.weight, model.fc2.bias): "
        "a resume restarts their moments at zero"
    )
    assert "spike-at-resume" in r.one("summary")["findings"] and r.code == 1


def test_a_checkpoint_that_holds_everything_is_said_so_and_no_finding(run_dir: Path) -> None:
    _save(run_dir / "checkpoints" / "ckpt_1000.pt", 1000)
    r = run(run_dir / "train.log", "--checkpoints", run_dir / "checkpoints")
    (spike,) = [s for s in r.all("spike") if s["event"] == "resume"]
    assert spike["resume_check"].endswith("ckpt_1000.pt holds what a resume needs")
    assert "spike-at-resume" not in r.one("summary")["findings"]


def test_without_the_checkpoints_nothing_is_joined(run_dir: Path) -> None:
    r = run(run_dir / "train.log")
    (spike,) = [s for s in r.all("spike") if s["event"] == "resume"]
    assert spike.get("resume_check") is None
    assert "spike-at-resume" not in r.one("summary")["findings"]


@pytest.fixture(scope="module")
def target() -> Iterator[remotekit.Target]:
    with remotekit.local_target() as t:
        yield t


def test_the_api_says_it_in_the_diagnosis(target: remotekit.Target, run_dir: Path) -> None:
    rep = tl.analyze_train_log(
        target, str(run_dir / "train.log"), ckpt_dir=str(run_dir / "checkpoints")
    )
    assert "spike-at-resume" in rep.findings
    line = next(x for x in rep.diagnosis if "at the resume" in x)
    assert line.startswith("loss spike at the resume from step 1000: ")
    assert "no optimizer state for 2 of 4 parameters" in line


def test_diagnose_run_joins_the_log_and_the_checkpoints(
    target: remotekit.Target, run_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bin_dir = make_bin_dir(tmp_path_factory.mktemp("bin"))
    rep = dg.diagnose(target, run=str(run_dir), env=smi_env(bin_dir, "healthy"))
    v = "\n".join(rep.verdict)
    assert "loss spike at the resume from step 1000: " in v
    assert "no optimizer state for 2 of 4 parameters (model.fc2.weight, model.fc2.bias)" in v
    assert rep.exit_code == 1
