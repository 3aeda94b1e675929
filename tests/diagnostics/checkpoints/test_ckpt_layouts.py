"""remote/ckpt.py on the checkpoint layouts of real training runs (issue 9).

Every fixture is the real thing where it can run here: nanoGPT's dict saved with torch.save,
torch.distributed.checkpoint directories written by the real ``dcp.save`` (one process, no
process group), DeepSpeed directories written by real DeepSpeed 0.19.8 (tests/data/deepspeed,
make.py says how; DeepSpeed itself is no test dependency). HF Trainer ``checkpoint-N/``
directories are written with torch + safetensors to the layout of transformers'
``Trainer._save_checkpoint`` (transformers is no dependency of the tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import ckpt_factory as cf
from tests.ckpt_kit import SCRIPT, run
from tests.harness import DATA

pytestmark = pytest.mark.timeout(120)


def scan(path: Path, *extra: str) -> tuple[int, dict[str, dict[str, Any]]]:
    r = run("scan", str(path), *extra)
    return r.code, r.by_path


# ------------------------------------------------------------------------------ nanoGPT


def test_nanogpt_step_is_iter_num_and_best_val_loss_is_metadata(tmp_path: Path) -> None:
    p = tmp_path / "ckpt.pt"
    cf.nanogpt_checkpoint(p, iter_num=2000, best_val_loss=2.875)
    code, recs = scan(p)
    rec = recs[str(p)]
    assert code == 0 and rec["status"] == "clean"
    assert (rec["global_step"], rec["step_key"]) == (2000, "iter_num")
    assert rec["params"] == cf.PARAMS  # not PARAMS + 1: the loss is no weight
    assert rec["scalars"]["best_val_loss"] == 2.875
    assert rec["max_abs_weights"] != 2.875
    assert any("best_val_loss" in n and "metadata" in n for n in rec["notes"])


def test_step_keys_of_other_trainers_most_specific_first(tmp_path: Path) -> None:
    model, _ = cf.train_tiny(1)
    sd = model.state_dict()
    cases = {
        "lightning.ckpt": ({"state_dict": sd, "global_step": 300, "epoch": 2}, 300, "global_step"),
        "megatron.pt": ({"model": sd, "iteration": 700}, 700, "iteration"),
        "fairseq.pt": (
            {"model": sd, "optimizer_history": [{"num_updates": 10}, {"num_updates": 900}]},
            900,
            "optimizer_history[-1].num_updates",
        ),
        "titan.pt": (
            {"model": sd, "train_state": {"step": torch.tensor(55)}},
            55,
            "train_state.step",
        ),
        "epochs_only.pt": ({"model": sd, "epoch": 7}, 7, "epoch"),  # nothing finer: the epoch
    }
    for name, (obj, _, _) in cases.items():
        torch.save(obj, tmp_path / name)
    _, recs = scan(tmp_path)
    for name, (_, step, key) in cases.items():
        rec = recs[str(tmp_path / name)]
        assert (rec["global_step"], rec["step_key"]) == (step, key), name
        assert rec["params"] == cf.PARAMS, name
    assert recs[str(tmp_path / "lightning.ckpt")]["epoch"] == 2


def test_a_flat_state_dict_keeps_its_scalar_parameters(tmp_path: Path) -> None:
    """A 0-d tensor in a plain state dict (CLIP's logit_scale) is a weight, not metadata."""
    model, _ = cf.train_tiny(1)
    sd = dict(model.state_dict(), logit_scale=torch.tensor(4.6))
    torch.save(sd, tmp_path / "clip.pt")
    rec = scan(tmp_path / "clip.pt")[1][str(tmp_path / "clip.pt")]
    assert rec["params"] == cf.PARAMS + 1


# ------------------------------------------------------------------------------ AllenNLP


def test_allennlp_th_files_are_found_and_read(tmp_path: Path) -> None:
    """AllenNLP's Trainer writes ``model_state_e{E}_b{B}.th`` (the model's state_dict),
    ``training_state_e{E}_b{B}.th`` and ``best.th`` with torch.save (allenai/allennlp 80fb606,
    allennlp/training/checkpointer.py lines 80-98 and 207-214, gradient_descent_trainer.py
    line 908); the training state's layout is that of the repository's own
    test_fixtures/simple_tagger/serialization_full/training_state_e1_b0.th."""
    model, opt = cf.train_tiny(2)
    torch.save(model.state_dict(), tmp_path / "model_state_e1_b0.th")
    torch.save(model.state_dict(), tmp_path / "best.th")
    training_state = {
        "version": 1,
        "metric_tracker": {"best_so_far": -0.62, "epochs_with_no_improvement": 0},
        "optimizer": opt.state_dict(),
        "callbacks": [],
        "epochs_completed": 1,
        "batches_in_epoch_completed": 0,
        "best_model_filename": None,
    }
    torch.save(training_state, tmp_path / "training_state_e1_b0.th")
    code, recs = scan(tmp_path)
    names = ("model_state_e1_b0.th", "best.th", "training_state_e1_b0.th")
    assert set(recs) == {str(tmp_path / n) for n in names} and code == 0
    assert recs[str(tmp_path / "best.th")]["params"] == cf.PARAMS
    state = recs[str(tmp_path / "training_state_e1_b0.th")]
    assert (state["status"], state["params"], state["other"]) == ("clean", 0, {"counter": 4})


#: AllenNLP's own checkpoints, copied unchanged from allenai/allennlp 80fb606 (Apache-2.0):
#: tests/data/public/allennlp-simple-tagger/NOTICE.md names the source paths.
ALLENNLP_DATA = DATA / "public" / "allennlp-simple-tagger"


def test_allennlp_checkpoints_written_by_allennlp(tmp_path: Path) -> None:
    """What tests/public_runs.md says of them, read by hand: three clean files (the model
    state of 1,340 params, best.th of 1,850: a model trained on a larger vocabulary), an
    Adadelta training state at lr 1e-06 over 9 params, and between model_state and best.th
    6 of 9 tensors compared with 3 shape changes (vocab 10 -> 15, tags 2 -> 4). Loaded with
    weights_only=True (ckpt.py's default: no --unsafe here)."""
    import shutil

    d = tmp_path / "simple_tagger"
    shutil.copytree(ALLENNLP_DATA, d, ignore=shutil.ignore_patterns("LICENSE", "*.md"))
    model = d / "serialization_full" / "model_state_e1_b0.th"
    training = d / "serialization_full" / "training_state_e1_b0.th"
    best = d / "serialization" / "best.th"

    r = run("scan", str(d))
    assert r.code == 0 and set(r.by_path) == {str(model), str(training), str(best)}
    assert [rec["status"] for rec in r.by_path.values()] == ["clean"] * 3
    assert (r.by_path[str(model)]["params"], r.by_path[str(best)]["params"]) == (1340, 1850)
    assert r.by_path[str(training)]["params"] == 0  # optimizer state only
    assert r.one("done")["clean"] == 3

    ins = run("inspect", str(training)).one("inspect")
    assert ins["ok"] and ins["scalars"]["epochs_completed"] == 1
    (opt,) = ins["optimizers"]
    assert set(opt["slots"]) == {"step", "square_avg", "acc_delta"}  # Adadelta's state
    (group,) = opt["groups"]
    assert (group["lr"], group["params"], group["hyper"]["rho"]) == (1e-06, 9, 0.95)
    assert opt["state_params"] == 9

    diff = run("diff", str(model), str(best)).one("diff")
    assert (diff["tensors_a"], diff["tensors_b"], diff["compared"]) == (9, 9, 6)
    shapes = {c["name"]: (c["shape_a"], c["shape_b"]) for c in diff["changes"]}
    assert diff["changes_total"] == 3 and shapes == {
        "text_field_embedder.token_embedder_tokens.weight": ([10, 100], [15, 100]),
        "tag_projection_layer._module.weight": ([2, 4], [4, 4]),
        "tag_projection_layer._module.bias": ([2], [4]),
    }
    assert diff["flags"] == []


# ------------------------------------------------------------------------------ HF Trainer


def test_hf_trainer_checkpoint_dirs_are_one_record_each(tmp_path: Path) -> None:
    run_dir = tmp_path / "out"
    clean = cf.hf_trainer_dir(run_dir, 500)
    bad = cf.hf_trainer_dir(run_dir, 1000, nan_optimizer=3, sharded=True)
    r = run("scan", str(run_dir))
    assert set(r.by_path) == {str(clean), str(bad)}  # no record per file inside
    c, b = r.by_path[str(clean)], r.by_path[str(bad)]
    assert (c["format"], c["status"], c["global_step"]) == ("hf-trainer", "clean", 500)
    assert c["step_key"] == "trainer_state.json:global_step"
    assert c["params"] == cf.PARAMS
    assert c["max_abs_optimizer"] is not None  # optimizer.pt was read, as optimizer state
    assert (b["status"], b["global_step"], b["nan_optimizer"], b["nan_weights"]) == (
        "bad",
        1000,
        1,
        0,
    )
    assert b["bad_tensors"][0]["name"] == "optimizer.state.0.exp_avg_sq"
    assert b["bad_tensors"][0]["first_index"] == 3
    skipped = set(r.one("plan")["skipped"])
    assert str(bad / "scheduler.pt") in skipped and str(bad / "rng_state.pth") in skipped


def test_bisect_orders_hf_checkpoints_by_their_trainer_state(tmp_path: Path) -> None:
    for step in (100, 200, 300):
        cf.hf_trainer_dir(tmp_path, step, nan_optimizer=0 if step == 300 else None)
    r = run("bisect", str(tmp_path))
    b = r.one("bisect")
    assert b["order"] == "global_step"
    assert (b["last_clean"]["global_step"], b["first_bad"]["global_step"]) == (200, 300)


def test_a_checkpoint_written_by_the_real_hf_trainer(tmp_path: Path) -> None:
    """tests/data/hf_trainer/checkpoint-4: transformers' Trainer wrote it (make.py says how)."""
    import shutil

    from safetensors import safe_open

    d = tmp_path / "out" / "checkpoint-4"
    shutil.copytree(cf.HF_TRAINER_DATA / "checkpoint-4", d)
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        params = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    rec = scan(d.parent)[1][str(d)]
    assert (rec["format"], rec["status"], rec["global_step"]) == ("hf-trainer", "clean", 4)
    assert rec["params"] == params
    key = cf.storage_key_after(d / "optimizer.pt", "exp_avg_sq")
    cf.plant_in_zip(d / "optimizer.pt", key, 9, float("nan"), torch.float32)
    rec = scan(d.parent)[1][str(d)]
    assert (rec["status"], rec["nan_optimizer"], rec["nan_weights"]) == ("bad", 1, 0)
    assert rec["bad_tensors"][0]["slot"] == "exp_avg_sq"
    assert rec["bad_tensors"][0]["first_index"] == 9


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ------------------------------------------------------------------------------ DCP


def test_dcp_directory_written_by_dcp_save_is_scanned_exactly(tmp_path: Path) -> None:
    clean, bad, inf = tmp_path / "step-100", tmp_path / "step-200", tmp_path / "step-300"
    cf.save_dcp(clean, 100)
    cf.save_dcp(bad, 200, nan_weight=19)
    cf.save_dcp(inf, 300, inf_optim=True)
    r = run("scan", str(tmp_path), "--chunk-elems", "7")  # chunks smaller than a tensor
    c, b, i = (r.by_path[str(p)] for p in (clean, bad, inf))
    assert (c["format"], c["status"], c["global_step"], c["step_key"]) == (
        "dcp",
        "clean",
        100,
        "train_state.step",
    )
    assert c["params"] == cf.PARAMS
    assert c["scalars"] == {"train_state.step": 100}
    assert (b["status"], b["nan_weights"], b["bad_tensors"][0]["name"]) == (
        "bad",
        1,
        "model.fc1.weight",
    )
    assert b["bad_tensors"][0]["first_index"] == 19
    assert (i["posinf_optimizer"], i["bad_tensors"][0]["name"]) == (1, "optimizer.state.1.exp_avg")
    assert r.code == 1


def test_dcp_metadata_that_names_other_code_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "step-1"
    cf.save_dcp(d, 1)
    marker = tmp_path / "pwned"
    (d / ".metadata").write_bytes(
        b"cbuiltins\nexec\n(V" + f"open({str(marker)!r}, 'w')".encode() + b"\ntR."
    )
    rec = scan(d)[1][str(d)]
    assert rec["status"] == "error" and "builtins.exec" in rec["error"]
    assert not marker.exists()


def test_dcp_with_a_missing_or_cut_shard_file_is_an_error(tmp_path: Path) -> None:
    d = tmp_path / "step-5"
    cf.save_dcp(d, 5)
    shard = next(d.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:1000])
    rec = scan(d)[1][str(d)]
    assert rec["status"] == "error" and "truncated" in rec["error"]
    shard.unlink()
    rec = scan(d)[1][str(d)]
    assert rec["status"] == "error" and shard.name in rec["error"]


# ------------------------------------------------------------------------------ DeepSpeed


@pytest.mark.parametrize("variant", ["zero1", "zero2", "zero2_bf16", "zero3"])
def test_real_deepspeed_checkpoints_scan_clean_with_their_step(
    tmp_path: Path, variant: str
) -> None:
    d = cf.copy_deepspeed(variant, tmp_path / variant)
    rec = scan(d)[1][str(d)]
    assert (rec["format"], rec["status"], rec["global_step"]) == ("deepspeed", "clean", 2)
    assert rec["needs_globals"] == []  # DeepSpeed's own objects load as inert placeholders
    assert rec["max_abs_optimizer"] is not None
    if variant != "zero3":
        assert rec["params"] == cf.PARAMS
    else:  # ZeRO-3 keeps the weights only in the optimizer partitions, and says so
        assert any(n.startswith("ZeRO-3: the model states hold no weights") for n in rec["notes"])
    assert any("`latest` names this checkpoint" in n for n in rec["notes"])


def test_nan_in_a_deepspeed_fp32_partition_is_found(tmp_path: Path) -> None:
    d = cf.copy_deepspeed("zero2", tmp_path / "zero2")
    optim = d / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    key = cf.storage_key_after(optim, "single_partition_of_fp32_groups")
    cf.plant_in_zip(optim, key, 5, float("nan"), torch.float32)
    rec = scan(d)[1][str(d)]
    assert (rec["status"], rec["nan_optimizer"], rec["nan_weights"]) == ("bad", 1, 0)
    assert rec["bad_tensors"][0]["first_index"] == 5
    assert "single_partition_of_fp32_groups" in rec["bad_tensors"][0]["name"]


def test_deepspeed_latest_naming_a_missing_save_is_reported(tmp_path: Path) -> None:
    cf.copy_deepspeed("zero2", tmp_path / "run")
    (tmp_path / "run" / "latest").write_text("global_step4")
    r = run("scan", str(tmp_path / "run"))
    latest = r.by_path[str(tmp_path / "run" / "latest")]
    assert latest["status"] == "error" and "global_step4" in latest["error"]
    assert r.by_path[str(tmp_path / "run" / "global_step2")]["status"] == "clean"


# ------------------------------------------------------------------------------ Git LFS


def test_git_lfs_pointers_are_named_with_the_fix(tmp_path: Path) -> None:
    cf.lfs_pointer(tmp_path / "pytorch_model.bin")
    hf = tmp_path / "hf"
    hf.mkdir()
    cf.lfs_pointer(hf / "model-00001-of-00001.safetensors")
    (hf / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}})
    )
    code, recs = scan(tmp_path)
    one = recs[str(tmp_path / "pytorch_model.bin")]
    assert one["format"] == "git-lfs-pointer"
    assert "Git LFS pointer" in one["error"] and "git lfs pull" in one["error"]
    assert "1342177280 bytes" in one["error"]
    shard = recs[str(hf / "model.safetensors.index.json")]
    assert "Git LFS pointer" in shard["error"]
    assert code == 2


def test_inspect_and_diff_take_checkpoint_directories(tmp_path: Path) -> None:
    a = cf.hf_trainer_dir(tmp_path, 100)
    b = cf.hf_trainer_dir(tmp_path, 200, nan_optimizer=1)
    ins = run("inspect", str(a)).one("inspect")
    assert (ins["format"], ins["global_step"], ins["ok"]) == ("hf-trainer", 100, True)
    assert set(ins["totals"]) == {"weights", "optimizer", "other"}
    assert ins["other"] == {"counter": 4}  # optimizer.pt's Adam steps: no weights
    d = run("diff", str(a), str(b)).one("diff")
    assert d["step_delta"] == 100
    assert any(f["kind"] == "nonfinite_exp_avg_sq" for f in d["flags"])
    assert os.path.isdir(a)


@pytest.mark.slow
def test_dcp_scan_memory_stays_far_below_the_checkpoint_size(tmp_path: Path) -> None:
    """Chunks are checked in place (mmap, pages released): RSS does not grow with the file."""
    import subprocess
    import sys
    import warnings

    import torch.distributed.checkpoint as dcp

    def peak_rss(path: Path) -> int:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "scan", str(path)], stdout=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return usage.ru_maxrss * 1024

    size = 128 << 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.zeros(16)}, checkpoint_id=str(tmp_path / "small"))
        big = {f"l{i}": torch.zeros(size // 4 // 4) for i in range(4)}
        dcp.save(big, checkpoint_id=str(tmp_path / "big"))
    del big
    extra = peak_rss(tmp_path / "big") - peak_rss(tmp_path / "small")
    assert extra < size // 4, f"scanning {size >> 20} MiB of DCP added {extra >> 20} MiB of RSS"


@pytest.mark.parametrize(
    ("path", "step"),
    [
        ("/runs/a/checkpoint-2000/model.safetensors", 2000),
        ("/runs/a/lightning_logs/version_0/checkpoints/epoch=3-step=1000.ckpt", 1000),
        ("/ckpt/global_step700/mp_rank_00_model_states.pt", 700),
        ("/out/step_120.pt", 120),
        ("/titan/checkpoint/step-50/__0_0.distcp", 50),
        ("/out/iter_0004000/model_optim_rng.pt", 4000),
        ("/out/final.pt", None),
        ("/out/v2/model.pt", None),
    ],
)
def test_step_from_the_name(path: str, step: int | None) -> None:
    from remotekit.remote.ckpt.check import step_from_name

    assert step_from_name(path) == step
