"""Can a run resume from this checkpoint with nothing lost? (issue 35, "Checkpoints that can
(or cannot) resume"): ``ckpt.py inspect`` says it always (its ``resume``), and with
``--resume`` what a resume would lose is a finding (exit 1); the API's
``inspect_checkpoint(resume=True)`` gives the same answer and exit code.

Checkpoints are real torch objects (an Adam over TinyNet, a LambdaLR, a GradScaler state,
torch's RNG state) saved in the layouts trainers use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import remotekit
from remotekit.diagnostics import checkpoints as ck
from tests import ckpt_factory as cf
from tests.ckpt_kit import run

pytestmark = pytest.mark.timeout(120)


def _full(steps: int = 3) -> dict[str, Any]:
    """A training loop's checkpoint with everything a resume needs: model, Adam, a LambdaLR
    stepped once per optimizer step, a GradScaler's state, RNG states, the sampler's place."""
    model, opt = cf.train_tiny(steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    for _ in range(steps):
        sched.step()
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer": opt.state_dict(),
        "lr_scheduler": sched.state_dict(),
        "scaler": {"scale": 65536.0, "growth_factor": 2.0, "_growth_tracker": 3},
        "rng_state": {"torch": torch.get_rng_state()},
        "sampler": {"epoch": 0, "index": steps * 32},
        "step": steps,
        "config": {"fp16": True},
    }


def inspect(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    r = run("inspect", str(path), *extra)
    return r.code, r.one("inspect")["resume"]


def test_a_checkpoint_with_everything_can_resume(tmp_path: Path) -> None:
    p = tmp_path / "full.pt"
    torch.save(_full(), p)
    code, res = inspect(p, "--resume")
    assert code == 0 and res["ready"] and res["gaps"] == [], res
    assert res["optimizer_params"] == 4 and res["optimizer_missing"] == 0
    assert res["scheduler_step"] == 3
    present = " ".join(res["present"])
    for what in ("optimizer state for all 4", "lr_scheduler", "scaler", "rng_state", "sampler"):
        assert what in present, (what, res["present"])


def test_optimizer_state_missing_for_some_parameters_is_named(tmp_path: Path) -> None:
    """The state of fc2's two parameters is not in the file: a resume restarts their moments
    at zero. Named by the model's order, matched by the moments' shapes."""
    ckpt = _full()
    del ckpt["optimizer"]["state"][2], ckpt["optimizer"]["state"][3]
    p = tmp_path / "partial.pt"
    torch.save(ckpt, p)
    code, res = inspect(p, "--resume")
    assert code == 1 and not res["ready"]
    assert (res["optimizer_missing"], res["optimizer_params"]) == (2, 4)
    assert res["missing_params"] == ["model.fc2.weight", "model.fc2.bias"]
    assert res["gaps"][0].startswith("no optimizer state for 2 of 4 parameters (model.fc2.weight")
    code, res = inspect(p)  # not asked: said, but no finding
    assert code == 0 and not res["ready"]


def test_a_scheduler_at_another_step_is_a_gap(tmp_path: Path) -> None:
    ckpt = _full(3)
    ckpt["step"] = 1000
    p = tmp_path / "sched.pt"
    torch.save(ckpt, p)
    code, res = inspect(p, "--resume")
    assert code == 1
    assert any(
        "lr scheduler (lr_scheduler) at step 3, the checkpoint at step 1000" in g
        for g in res["gaps"]
    )


def test_fp16_without_a_scaler_is_a_gap_and_without_fp16_only_not_saved(tmp_path: Path) -> None:
    ckpt = _full()
    del ckpt["scaler"]
    p = tmp_path / "noscaler.pt"
    torch.save(ckpt, p)
    code, res = inspect(p, "--resume")
    assert code == 1 and any(
        "no AMP grad scaler" in g and "config.fp16=True" in g for g in res["gaps"]
    )
    ckpt["config"] = {"amp": True}  # a switch, not a scaler's state
    torch.save(ckpt, p)
    code, res = inspect(p, "--resume")
    assert code == 1 and any("config.amp=True" in g for g in res["gaps"]), res
    ckpt["config"] = {"fp16": False}
    torch.save(ckpt, p)
    code, res = inspect(p, "--resume")
    assert code == 0 and any(n.startswith("AMP grad scaler") for n in res["not_saved"])


def test_weights_only_and_sgd_without_momentum(tmp_path: Path) -> None:
    model, _ = cf.train_tiny(1)
    p = tmp_path / "weights.pt"
    torch.save(model.state_dict(), p)
    code, res = inspect(p, "--resume")
    assert code == 1 and res["gaps"][0].startswith("no optimizer state")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 8)).sum().backward()
    sgd.step()
    torch.save({"model": model.state_dict(), "optimizer": sgd.state_dict(), "step": 1}, p)
    code, res = inspect(p, "--resume")
    assert res["gaps"] == [] and any("SGD without momentum" in x for x in res["present"])


def test_hf_trainer_directory_reads_its_side_files(tmp_path: Path) -> None:
    """checkpoint-N/: scheduler.pt, rng_state.pth beside the weights; the factory's LambdaLR
    was never stepped (last_epoch 0) while trainer_state.json says step 200: a gap."""
    d = cf.hf_trainer_dir(tmp_path, 200)
    code, res = inspect(d, "--resume")
    assert code == 1
    assert any("scheduler.pt) at step 0, the checkpoint at step 200" in g for g in res["gaps"])
    assert any("rng_state.pth" in x for x in res["present"])


def test_sb3_zip_save_resume(tmp_path: Path) -> None:
    p = cf.sb3_layout_save(tmp_path / "ppo.zip", drop_state=1)
    code, res = inspect(p, "--resume")
    assert code == 1
    assert res["missing_params"] == ["policy.mlp_extractor.fc2.bias"]


@pytest.fixture(scope="module")
def target() -> Iterator[remotekit.Target]:
    with remotekit.local_target() as t:
        yield t


def test_api_gives_the_script_s_answer(target: remotekit.Target, tmp_path: Path) -> None:
    ckpt = _full()
    del ckpt["optimizer"]["state"][3]
    p = tmp_path / "partial.pt"
    torch.save(ckpt, p)
    asked = ck.inspect_checkpoint(target, str(p), resume=True)
    assert asked.exit_code == 1 and asked.resume is not None
    assert asked.resume.missing_params == ("model.fc2.bias",)
    assert asked.findings == (f"{p}: {asked.resume.gaps[0]}",)
    text = ck.render_inspect(asked)
    assert "resume: would lose state: no optimizer state for 1 of 4 parameters" in text
    plain = ck.inspect_checkpoint(target, str(p))
    assert plain.exit_code == 0 and plain.resume == dataclasses.replace(asked.resume, asked=False)
