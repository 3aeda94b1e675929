"""remote/ckpt.py on zip archives that hold torch files (issue 35, mistake class 7).

stable-baselines3's ``model.save`` writes a zip of torch.save files (``policy.pth``,
``policy.optimizer.pth``, ``pytorch_variables.pth``) and a JSON ``data`` member with the step
(``num_timesteps``). Before, such a file was "not a torch.save checkpoint", exit 2, though each
member loads with plain torch. Written by the real stable-baselines3 where it is installed (it
is no test dependency), always in its layout with torch + zipfile (tests/ckpt_factory.py), and
one public save (tests/data/public/sb3-trained-agents, MIT).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch

from tests import ckpt_factory as cf
from tests.ckpt_kit import run
from tests.harness import DATA

pytestmark = pytest.mark.timeout(120)

SB3_PUBLIC = DATA / "public" / "sb3-trained-agents" / "ppo-CartPole-v1.zip"


def _zip_of(path: Path, members: dict[str, bytes], packed: bool = False) -> Path:
    kind = zipfile.ZIP_DEFLATED if packed else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", kind) as zf:
        for name, raw in members.items():
            zf.writestr(zipfile.ZipInfo(name), raw, compress_type=kind)
    return path


def _torch_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("writer", ["layout", "stable-baselines3"])
def test_zip_save_is_read_member_by_member(tmp_path: Path, writer: str) -> None:
    if writer == "stable-baselines3":
        if not cf.sb3_available():
            pytest.skip("stable-baselines3 is not installed here (no test dependency)")
        path = cf.sb3_real_save(tmp_path / "ppo_cartpole")
    else:
        path = cf.sb3_layout_save(tmp_path / "ppo_cartpole.zip", num_timesteps=128)
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 0 and rec["status"] == "clean", rec
    assert rec["format"] == "zip"
    assert (rec["global_step"], rec["step_key"]) == (128, "data:num_timesteps")
    assert rec["scalars"]["num_timesteps"] == 128
    assert rec["max_abs_optimizer"] is not None  # the optimizer member is its own section
    assert any("zip archive of 3 torch files" in n for n in rec["notes"]), rec["notes"]
    assert any("cloudpickle" in n and "not decoded" in n for n in rec["notes"])
    ins = run("inspect", str(path))
    tensors = ins.of("tensor")
    in_opt = [t for t in tensors if t["name"].startswith("policy.optimizer.")]
    assert {t["section"] for t in in_opt if t["kind"] is None} == {"optimizer"}  # not: steps
    assert all(t["section"] == "weights" for t in tensors if t["name"].startswith("policy.mlp"))
    (opt,) = ins.one("inspect")["optimizers"]
    assert opt["path"] == "policy.optimizer"
    assert opt["state_params"] == sum(g["params"] for g in opt["groups"])


def test_public_sb3_save_of_rl_trained_agents() -> None:
    """DLR-RM/rl-trained-agents' PPO CartPole-v1 (tests/public_runs.md): 100,096 environment
    steps in 7,820 updates; its linear lr schedule ran past the end (progress -0.00096), so
    the optimizer's lr is negative: shown as it is."""
    r = run("inspect", str(SB3_PUBLIC), "--resume")
    rec = r.one("inspect")
    assert r.code == 0 and rec["ok"], rec
    assert (rec["format"], rec["global_step"]) == ("zip", 100096)
    assert rec["scalars"]["_n_updates"] == 7820
    (opt,) = rec["optimizers"]
    assert opt["state_params"] == 12 and opt["slots"] == {
        "step": 12,
        "exp_avg": 12,
        "exp_avg_sq": 12,
    }
    assert opt["groups"][0]["lr"] == pytest.approx(-9.6e-07)
    assert rec["resume"]["ready"] and rec["resume"]["optimizer_params"] == 12
    scan = run("scan", str(SB3_PUBLIC.parent))
    assert scan.code == 0 and scan.by_path[str(SB3_PUBLIC)]["status"] == "clean"


def test_nan_in_a_member_is_found_by_its_member_name(tmp_path: Path) -> None:
    path = cf.sb3_layout_save(tmp_path / "bad.zip", nan_weight=True)
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 1 and rec["status"] == "bad"
    assert rec["nan_weights"] == 1
    assert rec["bad_tensors"][0]["name"] == "policy.mlp_extractor.fc1.weight"


def test_a_torch_save_zip_is_not_taken_for_a_container(tmp_path: Path) -> None:
    """torch.save's own file is a zip too: named .zip, it is still read as torch.save."""
    path = tmp_path / "model.zip"
    torch.save(cf.checkpoint_dict(), path)
    rec = run("scan", str(path)).by_path[str(path)]
    assert (rec["status"], rec["format"]) == ("clean", "torch")


def test_a_zip_with_no_torch_member_is_refused_as_before(tmp_path: Path) -> None:
    path = _zip_of(tmp_path / "data.zip", {"a.txt": b"hello", "data": b"{}"})
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error"
    assert "not a torch.save checkpoint" in rec["error"]


def test_a_directory_scan_finds_zip_saves_and_passes_other_zips(tmp_path: Path) -> None:
    cf.sb3_layout_save(tmp_path / "ppo.zip")
    _zip_of(tmp_path / "dataset.zip", {"images/0.png": b"\x89PNG"})
    r = run("scan", str(tmp_path))
    assert r.code == 0 and sorted(r.by_path) == [str(tmp_path / "ppo.zip")]


def test_a_zip_bomb_member_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    """64 MiB of zeros deflate to ~64 KiB (1000x): refused from the sizes the archive
    declares, the other members still read."""
    good = _torch_bytes({"w": torch.ones(4)})
    path = _zip_of(
        tmp_path / "bomb.zip",
        {"policy.pth": good, "bomb.pth": b"\0" * (64 << 20)},
        packed=True,
    )
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error"
    assert "'bomb.pth'" in rec["error"] and "zip bomb" in rec["error"], rec["error"]
    assert rec["params"] == 4  # policy.pth was read


def test_member_names_that_climb_out_or_hold_control_characters_are_refused(
    tmp_path: Path,
) -> None:
    t = _torch_bytes({"w": torch.ones(2)})
    path = _zip_of(
        tmp_path / "names.zip",
        {"policy.pth": t, "../../evil.pth": t, "po\x1b[31mlicy2.pth": t, "/abs.pth": t},
    )
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error"
    err = rec["error"]
    assert "'../../evil.pth'" in err and "leaves the archive" in err
    assert "'/abs.pth'" in err
    assert "\x1b" not in err and "'po\\x1b[31mlicy2.pth'" in err  # shown escaped
    assert rec["params"] == 2  # the one member with a fine name
    assert not (tmp_path.parent / "evil.pth").exists()


def test_a_member_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    cf.write_malicious(evil, marker)
    path = _zip_of(
        tmp_path / "trojan.zip",
        {
            "policy.pth": _torch_bytes({"w": torch.ones(2)}),
            "policy.optimizer.pth": evil.read_bytes(),
        },
    )
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error"
    assert "policy.optimizer.pth: weights-only load refused" in rec["error"]
    assert not marker.exists()
