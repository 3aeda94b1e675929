"""Checkpoint diagnostics through the real chain: sshd -> fake pct exec -> venv.

The corpus is written into the container's private /tmp (seen from the node at
``node.ct_tmp(CT)``); the scan runs there and only records travel back.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit.diagnostics import checkpoints as ck
from remotekit.render import to_jsonable
from tests import ckpt_factory as cf
from tests.conftest import CT
from tests.harness import FakeNode

pytestmark = pytest.mark.sshd


@pytest.fixture(scope="module")
def inside(node: FakeNode) -> Iterator[Path]:
    """A fresh folder in the container's /tmp, as the node sees it."""
    root = node.ct_tmp(CT) / "ckpt-corpus"
    yield root
    import shutil

    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(inside: Path) -> cf.Corpus:
    return cf.build_corpus(inside)


def there(node_path: str | Path, node: FakeNode) -> str:
    """The container's path for a file the node sees under the CT's /tmp."""
    return "/tmp/" + str(Path(node_path).relative_to(node.ct_tmp(CT)))


def test_scan_through_ssh_and_pct_matches_the_corpus(
    ct: remotekit.Target, corpus: cf.Corpus, node: FakeNode
) -> None:
    reports = ck.scan_checkpoints(ct, there(corpus.root, node), jobs=2)
    expect = {there(p, node): v for p, v in corpus.expect.items()}
    assert sorted(r.path for r in reports) == sorted(expect)
    for r in reports:
        assert cf.mismatches(expect[r.path], to_jsonable(r)) == [], r.path
    assert reports.exit_code == 2  # unreadable files are in the corpus on purpose
    nan = next(r for r in reports if r.path.endswith("nan_weights/checkpoint.pt"))
    assert nan.status == "bad" and nan.exit_code == 1


def test_clean_checkpoint_exits_0_and_bad_one_exits_1(
    ct: remotekit.Target, corpus: cf.Corpus, node: FakeNode
) -> None:
    assert ck.scan_checkpoints(ct, there(corpus.clean, node)).exit_code == 0
    bad = corpus.root / "nan_weights" / "checkpoint.pt"
    scan = ck.scan_checkpoints(ct, there(bad, node))
    assert scan.exit_code == 1 and scan.findings


def test_a_file_only_on_the_node_is_not_seen_in_the_container(
    ct: remotekit.Target, corpus: cf.Corpus, tmp_path: Path
) -> None:
    # tmp_path is under the node's /tmp, which the container does not share
    node_only = tmp_path / "node_only.pt"
    node_only.write_bytes(corpus.clean.read_bytes())
    with pytest.raises(remotekit.RemotekitError, match=r"node_only\.pt"):
        ck.scan_checkpoints(ct, str(node_only))


def test_malicious_pickle_does_not_run_there(ct: remotekit.Target, node: FakeNode) -> None:
    folder = node.ct_tmp(CT) / "evil"
    folder.mkdir(exist_ok=True)
    marker_there = "/tmp/evil/pwned"
    cf.write_malicious(folder / "model.pt", Path(marker_there))
    scan = ck.scan_checkpoints(ct, "/tmp/evil/model.pt")
    [r] = scan
    assert r.status == "error" and not (folder / "pwned").exists()
    assert scan.exit_code == 2


def test_inspect_and_diff_through_ssh(
    ct: remotekit.Target, corpus: cf.Corpus, node: FakeNode
) -> None:
    info = ck.inspect_checkpoint(ct, there(corpus.clean, node))
    assert info.global_step == 3 and info.ok
    diff = ck.diff_checkpoints(
        ct, there(corpus.clean, node), there(corpus.root / "nan_weights" / "checkpoint.pt", node)
    )
    assert diff.exit_code == 1  # the later one has new non-finite values


def test_scan_task_over_ssh_exits_1_with_a_table(
    sshd: object, node: FakeNode, corpus: cf.Corpus, tmp_path: Path
) -> None:
    import subprocess

    import yaml

    from tests.harness import SSHServer

    assert isinstance(sshd, SSHServer)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {"hosts": {"ct": sshd.host_yaml(container=CT, pct=str(node.pct), venv=sys.prefix)}}
        )
    )
    path = there(corpus.root / "nan_weights" / "checkpoint.pt", node)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "remotekit",
            "ckpt-scan",
            "--host",
            "ct",
            "--checkpoints",
            path,
            "--inventory",
            str(inv),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nan_weights" in r.stdout and "bad" in r.stdout
