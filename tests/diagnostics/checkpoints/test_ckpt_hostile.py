"""Checkpoint diagnostics on hostile files (issue 11): nothing reported "clean" that is not,
nothing hangs, nothing grows without bound.

Each case failed before its fix: repacked (deflated) zips and damaged safetensors layouts
scanned "clean", a glob through two symlink loops never ended, and every file cost a full
``gc.collect()``. Peak memory is measured on the script's process tree (``run_measured``).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from remotekit.remote.ckpt.base import import_torch
from remotekit.remote.ckpt.check import BIG_FILE, _collect_if_needed, scan_item
from remotekit.remote.ckpt.discover import _file_item
from tests import ckpt_factory as cf
from tests.ckpt_kit import SCRIPT, Run, run, run_measured

pytestmark = pytest.mark.timeout(90)

MiB = 1 << 20


# ------------------------------------------------------------------ wrong but "clean" before


def test_a_zip_with_deflated_entries_is_an_error_with_the_reason(tmp_path: Path) -> None:
    torch.save(cf.checkpoint_dict(), tmp_path / "orig.pt")
    packed = cf.deflate_zip(tmp_path / "orig.pt", tmp_path / "repacked.pt")
    rec = run("scan", str(packed)).by_path[str(packed)]
    assert rec["status"] == "error"
    assert "compressed" in rec["error"] and "torch.save stores every entry" in rec["error"]


ST_F32 = {"dtype": "F32"}


@pytest.mark.parametrize(
    ("header", "data_len", "reason"),
    [
        ({"w": {**ST_F32, "shape": [2], "data_offsets": [-8, 0]}}, 16, "negative"),
        (
            {
                "a": {**ST_F32, "shape": [4], "data_offsets": [0, 16]},
                "b": {**ST_F32, "shape": [4], "data_offsets": [8, 24]},
            },
            24,
            "overlaps",
        ),
        ({"w": {**ST_F32, "shape": [-2, -2], "data_offsets": [0, 16]}}, 16, "negative dimension"),
        ({"w": {**ST_F32, "shape": [2], "data_offsets": [8, 16]}}, 16, "not part of any tensor"),
        ({"w": {**ST_F32, "shape": [2], "data_offsets": [0, "8"]}}, 8, "not two integers"),
    ],
    ids=["negative-offset", "overlap", "negative-shape", "hole", "string-offset"],
)
def test_damaged_safetensors_layouts_are_errors(
    tmp_path: Path, header: dict[str, Any], data_len: int, reason: str
) -> None:
    p = cf.write_safetensors_header(tmp_path / "m.safetensors", header, data_len)
    rec = run("scan", str(p)).by_path[str(p)]
    assert rec["status"] == "error", rec
    assert reason in rec["error"]


def test_absurd_safetensors_sizes_cost_no_memory(tmp_path: Path) -> None:
    huge = 1 << 40
    p = cf.write_safetensors_header(
        tmp_path / "huge.safetensors",
        {"w": {**ST_F32, "shape": [huge], "data_offsets": [0, 4 * huge]}},
        64,
    )
    r, peak = run_measured("scan", str(p), timeout=60)
    assert r.by_path[str(p)]["status"] == "error"
    assert "past the end of the file" in r.by_path[str(p)]["error"]
    assert peak < 600 * MiB, f"peak RSS {peak / MiB:.0f} MiB"


# ---------------------------------------------------------------------------- symlink loops


@pytest.fixture
def looped(tmp_path: Path) -> Path:
    """ckpts/{a,b}/x.pt with two loops: ckpts/a/up -> ckpts, ckpts/b/self -> ckpts/b."""
    root = tmp_path / "ckpts"
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        torch.save({"w": torch.ones(3)}, root / d / "x.pt")
    os.symlink(root, root / "a" / "up")
    os.symlink(root / "b", root / "b" / "self")
    os.symlink(root / "a" / "x.pt", root / "alias.pt")  # the same file by a second name
    return root


def test_a_glob_through_two_symlink_loops_ends_and_visits_each_file_once(looped: Path) -> None:
    r, peak = run_measured("scan", str(looped / "**" / "*.pt"), timeout=60)
    assert r.code == 0, r.stderr
    found = sorted(os.path.realpath(p) for p in r.by_path)
    assert found == sorted(str(looped / d / "x.pt") for d in ("a", "b"))
    assert peak < 600 * MiB


def test_a_directory_scan_with_loops_visits_each_file_once(looped: Path) -> None:
    r = run("scan", str(looped))
    assert sorted(os.path.realpath(p) for p in r.by_path) == sorted(
        str(looped / d / "x.pt") for d in ("a", "b")
    )


# ------------------------------------------------------------------------ many small files


@pytest.fixture(scope="module")
def ckpt_torch() -> None:
    """The package's modules, in this process, with torch imported as ckpt.py imports it."""
    import_torch()


def test_small_files_do_not_each_cost_a_full_gc(tmp_path: Path, ckpt_torch: None) -> None:
    """A full collection (~0.1 s with torch loaded) per file made 100,000 files take hours:
    collect only after a large checkpoint or when memory grew."""
    paths = []
    for i in range(200):
        p = tmp_path / f"s{i}.pt"
        torch.save({"w": torch.full((4,), float(i))}, p)
        paths.append(p)
    opts = SimpleNamespace(unsafe_pickle=False, chunk_elems=1 << 22, max_bad=20)
    full = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info.get("generation") == 2:
            full.append(1)

    gc.callbacks.append(count)
    try:
        recs = [scan_item(_file_item(str(p)), opts) for p in paths]
    finally:
        gc.callbacks.remove(count)
    assert all(r["status"] == "clean" for r in recs)
    assert len(full) < 10, f"{len(full)} full collections for {len(paths)} small files"


def test_a_large_checkpoint_is_unmapped_before_the_next(tmp_path: Path, ckpt_torch: None) -> None:
    """The other half of the gc rule: after a checkpoint of BIG_FILE bytes, collect."""
    full = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info.get("generation") == 2:
            full.append(1)

    gc.callbacks.append(count)
    try:
        _collect_if_needed(BIG_FILE)
    finally:
        gc.callbacks.remove(count)
    assert full


def test_dcp_metadata_with_negative_offsets_is_an_error(tmp_path: Path) -> None:
    """Offsets in .metadata are trusted by torch; here they are checked like safetensors'."""
    import pickle

    d = tmp_path / "step-3"
    cf.save_dcp(d, 3)
    md = pickle.loads((d / ".metadata").read_bytes())  # our own fixture: trusted here
    for info in md.storage_data.values():
        info.offset = -info.offset - 64
    (d / ".metadata").write_bytes(pickle.dumps(md))
    rec = run("scan", str(d)).by_path[str(d)]
    assert rec["status"] == "error" and "the metadata is damaged" in rec["error"]


# ------------------------------------------------------------------ what is not a regular file


def scan_quick(*args: str) -> Run:
    """A scan that must end at once: a reader blocked on a FIFO fails the test in 20 s."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "scan", *args], capture_output=True, text=True, timeout=20
    )
    return Run(proc)


@pytest.mark.timeout(45)
def test_a_fifo_named_like_a_checkpoint_is_refused_not_waited_on(tmp_path: Path) -> None:
    torch.save(cf.checkpoint_dict(), tmp_path / "good.pt")
    os.mkfifo(tmp_path / "a.pt")
    r = scan_quick(str(tmp_path))
    rec = r.by_path[str(tmp_path / "a.pt")]
    assert rec["status"] == "error" and "FIFO" in rec["error"], rec
    assert r.by_path[str(tmp_path / "good.pt")]["status"] == "clean"


@pytest.mark.timeout(45)
def test_a_deepspeed_latest_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    step = cf.copy_deepspeed("zero1", tmp_path / "ds")
    (step.parent / "latest").unlink()
    os.mkfifo(step.parent / "latest")
    r = scan_quick(str(step.parent))
    assert r.records[-1]["type"] == "done", r.stderr


@pytest.mark.timeout(60)
def test_a_dcp_storage_file_that_is_a_fifo_is_an_error_naming_it(tmp_path: Path) -> None:
    d = tmp_path / "step-3"
    cf.save_dcp(d, 3)
    [storage] = [p for p in d.iterdir() if p.name.endswith(".distcp")][:1]
    storage.unlink()
    os.mkfifo(storage)
    rec = scan_quick(str(d)).by_path[str(d)]
    assert rec["status"] == "error" and storage.name in rec["error"] and "FIFO" in rec["error"]


# ------------------------------------------------------------------ names inside a checkpoint


def _nan_shard(path: Path) -> Path:
    cf.save_safetensors({"w": torch.full((4,), float("nan"))}, path)
    return path


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_an_index_naming_a_shard_outside_its_directory_is_an_error(
    tmp_path: Path, where: str
) -> None:
    import json

    outside = _nan_shard(tmp_path / "outside.safetensors")
    d = tmp_path / "model"
    d.mkdir()
    cf.save_safetensors({"v": torch.ones(4)}, d / "model-00001.safetensors")
    name = "../outside.safetensors" if where == "relative" else str(outside)
    index = d / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"v": "model-00001.safetensors", "w": name}}))
    rec = scan_quick(str(index)).by_path[str(index)]
    assert rec["status"] == "error" and name in rec["error"] and str(index) in rec["error"], rec
    assert not rec.get("nan_weights")


def test_dcp_metadata_naming_a_storage_file_outside_is_an_error(tmp_path: Path) -> None:
    import pickle
    import shutil

    d = tmp_path / "step-3"
    cf.save_dcp(d, 3)
    md = pickle.loads((d / ".metadata").read_bytes())  # our own fixture: trusted here
    first = next(iter(md.storage_data.values())).relative_path
    shutil.copy(d / first, tmp_path / "outside.distcp")
    for info in md.storage_data.values():
        if info.relative_path == first:
            info.relative_path = "../outside.distcp"
    (d / first).unlink()
    (d / ".metadata").write_bytes(pickle.dumps(md))
    rec = scan_quick(str(d)).by_path[str(d)]
    assert rec["status"] == "error" and "../outside.distcp" in rec["error"], rec
    assert ".metadata" in rec["error"]
