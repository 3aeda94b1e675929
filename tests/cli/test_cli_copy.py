"""The copy tasks' grammar: ``get SRC DEST`` / ``put SRC DEST`` by position as ``sync SRC
DEST``, ``scp`` and ``kubectl cp`` take them (folders too, as ``scp -r``), and ``sync
NAME:SRC DEST`` pulling (rsync's ``HOST:PATH``): on this machine, and through the real sshd
into a real LXC container via the pct stand-in. Each tree is read back by tests/tree_kit's
snapshot script, never by the code under test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import remotekit
from tests.harness import cli
from tests.tree_kit import expected, local_snapshot, make_tree


def test_cli_get_and_put_take_src_and_dest_by_position(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    r = cli("put", str(src), str(tmp_path / "there"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert local_snapshot(tmp_path / "there") == expected(src)
    r = cli("get", f"local:{tmp_path / 'there'}", str(tmp_path / "back"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert local_snapshot(tmp_path / "back") == expected(src)
    r = cli("put", str(src / "run.sh"), str(tmp_path / "back") + "/", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # the flag spellings are invoke's names of the same two words: they mean the same
    r = cli("get", "--src", str(src / "run.sh"), "--dest", str(tmp_path / "f.sh"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "f.sh").read_bytes() == (src / "run.sh").read_bytes()
    r = cli("put", "--dest", str(tmp_path / "g.sh"), str(src / "run.sh"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "g.sh").read_bytes() == (src / "run.sh").read_bytes()


def test_cli_sync_pulls_from_the_side_named_there(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    r = cli("sync", f"local:{src}", "here", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)["hosts"][0]["result"]
    assert result["pulled"] is True and len(result["sent"]) == 7
    assert local_snapshot(tmp_path / "here") == expected(src)
    (src / "run.sh").write_text("new\n")
    r = cli("sync", f"local:{src}", "here", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "would get run.sh" in r.stdout and "would get 1 file(s)" in r.stdout
    r = cli("sync", str(src), f"local:{tmp_path / 'pushed'}", cwd=tmp_path)  # a push, named
    assert r.returncode == 0, r.stderr
    assert local_snapshot(tmp_path / "pushed") == expected(src)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["sync", "gpu9:/x", "y"], "no target 'gpu9'"),
        (["sync", "local:/x", "local:/y"], "both sides are there"),
        (["sync", "local:/x", "y", "--all"], "names one target: not with --group/--all"),
        (["get", "local:/x", "y", "--host", "other"], "names local, --host names other"),
        (["get", "x", "local:/y"], "get copies from there to here"),
        (["put", "local:/x", "y"], "put copies from here to there"),
    ],
)
def test_cli_names_a_side_it_cannot_use(argv: list[str], said: str, tmp_path: Path) -> None:
    r = cli(*argv, cwd=tmp_path)
    assert r.returncode == 2 and said in r.stderr, r.stderr
    if "gpu9" in said:
        assert "./gpu9:/x" in r.stderr  # how a local path with a colon is typed


def test_cli_pull_through_ssh_into_lxc(
    inventory: remotekit.Inventory, ct: remotekit.Target, tmp_path: Path
) -> None:
    """``sync ct:DIR DEST`` and ``get ct:DIR DEST`` through the real sshd, pct and LXC."""
    src = make_tree(tmp_path / "src")
    dest = f"/workspace/pull-{os.getpid()}"
    try:
        ct.sync(src, dest)
        inv = str(inventory.path)
        r = cli("sync", "--inventory", inv, f"ct:{dest}", str(tmp_path / "a"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        r = cli("get", "--inventory", inv, f"ct:{dest}", str(tmp_path / "b"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert local_snapshot(tmp_path / "a") == local_snapshot(tmp_path / "b") == expected(src)
    finally:
        ct.run(["rm", "-rf", dest], check=False)
