"""Shared fixtures: a real sshd on 127.0.0.1, a fake Proxmox node behind it, an inventory.

Tests marked ``sshd`` skip when there is no sshd on this machine, except under CI=true,
where a missing sshd is an error: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import remotekit
from tests.harness import FakeNode, SSHServer, find_sshd, venv_prefix

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CT, STOPPED = 200, 201


def _need_sshd() -> None:
    if find_sshd() is None:
        if CI:
            pytest.fail("CI=true but sshd is missing: .ci/run must install openssh-server")
        pytest.skip("no sshd on this machine (apt-get install openssh-server)")


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> FakeNode:
    fake = FakeNode(tmp_path_factory.mktemp("node")).install(shared=[venv_prefix()])
    fake.add(CT)
    fake.add(STOPPED, state="stopped")
    return fake


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory, node: FakeNode) -> Iterator[SSHServer]:
    _need_sshd()
    server = SSHServer(
        tmp_path_factory.mktemp("sshd"),
        env={"FAKE_PCT_STATE": str(node.state_file), "PATH": f"{node.bin}:{os.environ['PATH']}"},
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


def write_inventory(path: Path, hosts: dict[str, object], **top: object) -> remotekit.Inventory:
    path.write_text(yaml.safe_dump({"hosts": hosts, **top}, sort_keys=False))
    return remotekit.load_inventory(path)


@pytest.fixture(scope="session")
def inventory(
    tmp_path_factory: pytest.TempPathFactory, sshd: SSHServer, node: FakeNode
) -> remotekit.Inventory:
    venv = venv_prefix()
    pct = str(node.pct)
    hosts = {
        "node": sshd.host_yaml(),
        "ct": sshd.host_yaml(container=CT, pct=pct, venv=venv),
        "stopped": sshd.host_yaml(container=STOPPED, pct=pct, venv=venv),
        "noct": sshd.host_yaml(container=999, pct=pct, venv=venv),
        "novenv": sshd.host_yaml(container=CT, pct=pct, venv="/opt/no-such-venv"),
        "sudo": sshd.host_yaml(sudo=True, container=CT, pct=pct, venv=venv),
    }
    return write_inventory(tmp_path_factory.mktemp("inv") / "hosts.yaml", hosts)


@pytest.fixture(scope="session")
def ct(inventory: remotekit.Inventory) -> Iterator[remotekit.Target]:
    """ssh -> fake pct exec 200 -> venv, one held connection for the whole session."""
    with inventory.target("ct") as t:
        yield t


@pytest.fixture
def local() -> Iterator[remotekit.Target]:
    with remotekit.local_target() as t:
        yield t
