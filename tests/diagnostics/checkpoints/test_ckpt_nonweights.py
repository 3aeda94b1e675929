"""Non-weights in a checkpoint are counted apart from the weights, by remote/ckpt.py.

Params are the floating tensors of the model and of the optimizer state; everything else a
checkpoint holds as a tensor is "other": BatchNorm's int64 ``num_batches_tracked``, Adam's
per-parameter ``step`` (a 0-d float32 tensor since torch 2.0), Lightning's ModelCheckpoint
scores (``best_model_score``, ``current_score``, ``best_k_models``, ``kth_value``), RNG
states, integer buffers. They are never added to the parameter count, never make a checkpoint
"bad", and ``diff`` reports them on their own lines instead of in the relative change.

Fixtures are written by the real writers: torch itself (tests/ckpt_factory.py), a real
Lightning Trainer with a ModelCheckpoint callback (``lightning_run``), and nanoGPT's layout
(karpathy/nanoGPT train.py, cited at ``nanogpt_checkpoint``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import ckpt_factory as cf
from tests.ckpt_kit import run

pytestmark = pytest.mark.timeout(180)

CALLBACK = "callbacks.ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'"


@pytest.fixture(scope="module")
def lightning(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return cf.lightning_run(tmp_path_factory.mktemp("lightning"), epochs=2)


def _callback_state(path: Path) -> dict[str, Any]:
    ckpt = torch.load(path, weights_only=True)
    [state] = [v for k, v in ckpt["callbacks"].items() if k.startswith("ModelCheckpoint")]
    return state


def _rel_change(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||B-A|| / ||A|| over the given tensors, in float64: the oracle for diff's figure."""
    ss_a = sum(float((a[k].double() ** 2).sum()) for k in a)
    ss_d = sum(float(((b[k].double() - a[k].double()) ** 2).sum()) for k in a)
    return math.sqrt(ss_d) / math.sqrt(ss_a)


# ------------------------------------------------------------------------------ Lightning


def test_the_lightning_files_hold_what_the_tests_are_about(lightning: list[Path]) -> None:
    first, second = lightning
    assert (first.name, second.name) == ("epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt")
    state = _callback_state(first)
    assert state["best_model_score"].dim() == 0 and len(state["best_k_models"]) == 1
    assert state["kth_value"].item() == math.inf  # fewer kept than save_top_k: +inf
    sd = torch.load(first, weights_only=True)["state_dict"]
    assert sd["net.bn.num_batches_tracked"].dtype == torch.int64


def test_a_lightning_ckpt_scans_clean_with_its_scores_and_counters_apart(
    lightning: list[Path],
) -> None:
    """kth_value's +inf is the callback's bookkeeping, not a bad weight; the scores are
    not parameters."""
    r = run("scan", str(lightning[0].parent))
    assert r.code == 0, r.records
    first, second = (r.by_path[str(p)] for p in lightning)
    for rec, scores in ((first, 4), (second, 5)):  # best_k_models grows by one per epoch
        assert rec["status"] == "clean", rec
        assert rec["params"] == cf.BN_FLOATS
        assert rec["posinf_weights"] == 0 and rec["bad_tensors"] == []
        assert rec["other"] == {"counter": 1 + 6, "score": scores}  # num_batches_tracked, step
        assert rec["other_tensors"] == 7 + scores
    assert any("kth_value" in n and "not a weight" in n for n in first["notes"])


def test_inspect_lists_the_lightning_non_weights_as_other(lightning: list[Path]) -> None:
    r = run("inspect", str(lightning[0]))
    ins = r.one("inspect")
    assert ins["totals"]["weights"]["numel"] == cf.BN_FLOATS
    assert ins["totals"]["optimizer"]["numel"] == 2 * cf.BN_PARAMS  # exp_avg, exp_avg_sq
    assert ins["totals"]["other"]["tensors"] == 11
    assert ins["other"] == {"counter": 7, "score": 4}
    kinds = {t["name"]: t["kind"] for t in r.of("tensor") if t["section"] == "other"}
    assert kinds["state_dict.net.bn.num_batches_tracked"] == "counter"
    assert kinds["optimizer_states.0.state.0.step"] == "counter"
    assert kinds[next(n for n in kinds if n.startswith(CALLBACK) and "kth_value" in n)] == "score"
    assert all(t["kind"] is None for t in r.of("tensor") if t["section"] != "other")


def test_diff_of_two_lightning_epochs_is_over_float_weights(lightning: list[Path]) -> None:
    a, b = (torch.load(p, weights_only=True) for p in lightning)
    floats = [k for k, v in a["state_dict"].items() if v.is_floating_point()]
    want = _rel_change(
        {k: a["state_dict"][k] for k in floats}, {k: b["state_dict"][k] for k in floats}
    )
    sa, sb = (x["optimizer_states"][0]["state"] for x in (a, b))
    moments = [(i, s) for i in sa for s in ("exp_avg", "exp_avg_sq")]
    want_opt = _rel_change(
        {f"{i}.{s}": sa[i][s] for i, s in moments}, {f"{i}.{s}": sb[i][s] for i, s in moments}
    )
    r = run("diff", *map(str, lightning))
    d = r.one("diff")
    assert d["ok"], d
    assert d["rel_change"]["weights"] == pytest.approx(want, rel=1e-9)
    assert d["rel_change"]["optimizer"] == pytest.approx(want_opt, rel=1e-9)
    assert all(t["section"] == "weights" for t in d["top_weights"])
    assert not any("num_batches_tracked" in t["name"] for t in d["top_weights"])
    assert d["counters"]["compared"] == d["counters"]["changed"] == 7
    by = {g["name"]: g for g in d["counters"]["by_name"]}
    assert by["num_batches_tracked"] == {
        "name": "num_batches_tracked",
        "kind": "counter",
        "compared": 1,
        "changed": 1,
        "delta_min": 4,
        "delta_max": 4,
    }
    assert (by["step"]["changed"], by["step"]["delta_min"], by["step"]["delta_max"]) == (6, 4, 4)
    other = {g["name"]: g for g in d["other"]["by_name"]}
    assert other["kth_value"]["changed"] == 0  # still +inf: unchanged, and no flag
    assert other["best_k_models"]["compared"] == 1  # only A's one key is in both
    assert d["flags"] == [] and r.code == 0


# ------------------------------------------------------------------------------ torch


def test_a_pair_whose_only_change_is_its_counters_reads_unchanged(tmp_path: Path) -> None:
    a, b = cf.counters_only_pair(tmp_path, steps=200)
    r = run("diff", str(a), str(b))
    d = r.one("diff")
    assert r.code == 0 and d["ok"], d
    assert d["rel_change"] == {"weights": 0.0, "optimizer": 0.0}
    assert d["compared"] == d["identical"]
    assert d["counters"]["changed"] == 1 + 6
    by = {g["name"]: (g["changed"], g["delta_min"]) for g in d["counters"]["by_name"]}
    assert by == {"num_batches_tracked": (1, 200), "step": (6, 200)}


def test_scan_of_a_batchnorm_checkpoint_counts_its_floats_only(tmp_path: Path) -> None:
    a, _ = cf.counters_only_pair(tmp_path, steps=3)
    rec = run("scan", str(a)).by_path[str(a)]
    assert rec["status"] == "clean"
    assert rec["params"] == cf.BN_FLOATS  # running_mean/var are model state: counted
    assert rec["other"] == {"counter": 7}
    assert rec["max_abs_optimizer"] != 3.0  # Adam's step is no magnitude


def test_rng_states_and_integer_buffers_are_other(tmp_path: Path) -> None:
    model, opt = cf.train_bn(2)
    p = tmp_path / "ckpt.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "rng_state": torch.get_rng_state(),
            "buffers": {"token_ids": torch.arange(10)},
        },
        p,
    )
    rec = run("scan", str(p)).by_path[str(p)]
    assert rec["other"] == {"counter": 7, "rng": 1, "integer": 1}
    assert rec["params"] == cf.BN_FLOATS


def test_safetensors_int64_buffers_are_other(tmp_path: Path) -> None:
    model, _ = cf.train_bn(2)
    p = tmp_path / "model.safetensors"
    cf.save_safetensors(model.state_dict(), p)
    r = run("inspect", str(p))
    assert r.one("inspect")["other"] == {"counter": 1}
    [t] = [t for t in r.of("tensor") if t["section"] == "other"]
    assert (t["name"], t["kind"], t["dtype"]) == ("bn.num_batches_tracked", "counter", "int64")


# ------------------------------------------------------------------------------ nanoGPT


def test_nanogpt_optimizer_steps_are_counters_and_best_val_loss_metadata(tmp_path: Path) -> None:
    p = tmp_path / "ckpt.pt"
    cf.nanogpt_checkpoint(p, iter_num=2000, best_val_loss=2.875)
    ins = run("inspect", str(p)).one("inspect")
    assert ins["totals"]["weights"]["numel"] == cf.PARAMS
    assert ins["totals"]["optimizer"]["numel"] == 2 * cf.PARAMS  # not + 4 step counters
    assert ins["other"] == {"counter": 4}
    assert ins["scalars"]["best_val_loss"] == 2.875 and ins["scalars"]["iter_num"] == 2000
    rec = run("scan", str(p)).by_path[str(p)]
    assert (rec["params"], rec["other"]) == (cf.PARAMS, {"counter": 4})
