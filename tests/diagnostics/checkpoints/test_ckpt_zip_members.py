"""A zip of torch files (stable-baselines3's ``model.save``) read member by member without
holding a member in memory, and its central directory not taken on its word: a member is
streamed into a private file and memory-mapped as a torch.save file is (its pages handed
back as they are checked), and the sizes the archive declares are checked against its
local headers, its end and the other members before a byte is unpacked.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tests.ckpt_kit import SCRIPT, patch_zip, run, run_measured

pytestmark = pytest.mark.timeout(240)


def _torch_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _save(path: Path, members: dict[str, bytes], packed: bool = False) -> Path:
    kind = zipfile.ZIP_DEFLATED if packed else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", kind) as zf:
        for name, raw in members.items():
            zf.writestr(zipfile.ZipInfo(name), raw, compress_type=kind)
    return path


def _peak_rss(*args: str) -> int:
    """The peak resident memory (bytes) of ``ckpt.py ARGS`` in a process of its own."""
    return run_measured(*args, timeout=200)[1]


def test_a_large_member_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    """A 160 MiB member: before, its bytes and then its tensors were held (2x its size
    over a small archive's peak); mapped, the scan's peak grows by far less than its size."""
    size = 160 << 20
    big = _save(
        tmp_path / "big.zip",
        {"policy.pth": _torch_bytes({"w": torch.zeros(size // 4)}), "data": b"{}"},
    )
    small = _save(
        tmp_path / "small.zip",
        {"policy.pth": _torch_bytes({"w": torch.zeros(16)}), "data": b"{}"},
    )
    r = run("scan", str(big))
    rec = r.by_path[str(big)]
    assert r.code == 0 and rec["status"] == "clean" and rec["params"] == size // 4, rec
    grew = _peak_rss("scan", str(big)) - _peak_rss("scan", str(small))
    assert grew < size // 2, f"the scan's peak grew by {grew >> 20} MiB for a 160 MiB member"


def test_the_unpacked_members_are_removed_when_the_checkpoint_is_closed(tmp_path: Path) -> None:
    path = _save(tmp_path / "ppo.zip", {"policy.pth": _torch_bytes({"w": torch.ones(4)})})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "scan", str(path)],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert '"status": "clean"' in proc.stdout or '"status":"clean"' in proc.stdout, proc.stdout
    assert list(scratch.iterdir()) == []


def test_a_member_that_unpacks_to_other_than_its_declared_size_is_refused(
    tmp_path: Path,
) -> None:
    """A packed member whose archive says fewer bytes than its data holds: refused by name,
    the other members still read (before: the whole archive was "damaged")."""
    good = _torch_bytes({"w": torch.ones(4)})
    lying = _torch_bytes({"w": torch.ones(64)})
    path = _save(tmp_path / "lie.zip", {"policy.pth": good, "policy.optimizer.pth": lying}, True)
    patch_zip(path, "policy.optimizer.pth", size=len(lying) - 100)
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error", rec
    assert "policy.optimizer.pth" in rec["error"] and "central directory" in rec["error"]
    assert rec["params"] == 4  # policy.pth was read


def test_a_stored_member_declared_past_the_archive_end_is_refused_unread(tmp_path: Path) -> None:
    good = _torch_bytes({"w": torch.ones(4)})
    path = _save(tmp_path / "long.zip", {"policy.pth": good, "pytorch_variables.pth": good})
    patch_zip(path, "pytorch_variables.pth", size=1 << 30)
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error", rec
    assert "'pytorch_variables.pth'" in rec["error"] and "past the archive's end" in rec["error"]
    assert rec["params"] == 4


def test_members_that_share_bytes_are_refused(tmp_path: Path) -> None:
    """A zip bomb without nesting points many central entries at one member's data: the
    second entry names the first's local header."""
    t = _torch_bytes({"w": torch.ones(4)})
    path = _save(tmp_path / "overlap.zip", {"policy.pth": t, "policy.optimizer.pth": t})
    patch_zip(path, "policy.optimizer.pth", offset=0)
    r = run("scan", str(path))
    rec = r.by_path[str(path)]
    assert r.code == 2 and rec["status"] == "error", rec
    assert "share bytes" in rec["error"] and "'policy.optimizer.pth'" in rec["error"], rec
