"""known_hosts written by an attacker or a careless user, against the real sshd: a clear
HostKeyError naming the file (never a traceback, never a hang), hints that work when pasted
into a shell, and ``accept-new`` entries that OpenSSH itself reads back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import remotekit
from tests.conftest import need_program, write_inventory
from tests.harness import SSHServer

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(60)]


def connect(sshd: SSHServer, tmp_path: Path, kh: Path, policy: str = "strict") -> str:
    """Run one step on the sshd with ``kh`` as known_hosts; its stdout."""
    inv = write_inventory(
        tmp_path / "hosts.yaml", {"h": sshd.host_yaml(known_hosts=str(kh), host_key=policy)}
    )
    with inv.target("h") as t:
        return t.run(["echo", "ok"]).stdout


def refused(sshd: SSHServer, tmp_path: Path, kh: Path, policy: str = "strict") -> str:
    with pytest.raises(remotekit.HostKeyError) as info:
        connect(sshd, tmp_path, kh, policy)
    assert info.value.host == "h"
    return str(info.value)


def other_key(tmp_path: Path) -> str:
    """A fresh ed25519 public key line, not the server's."""
    key = tmp_path / f"other{len(list(tmp_path.glob('other*')))}"
    subprocess.run(
        [need_program("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
    )
    return Path(f"{key}.pub").read_text().strip()


def openssh_connects(sshd: SSHServer, kh: Path) -> subprocess.CompletedProcess[str]:
    """The real OpenSSH client, checking the host key against ``kh`` only."""
    return subprocess.run(
        [
            *("ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={kh}"),
            *("-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes"),
            *("-o", "BatchMode=yes", "-i", str(sshd.client_key), "-p", str(sshd.port)),
            *(f"{sshd.user}@127.0.0.1", "echo", "openssh-ok"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


# -- files that are not known_hosts files ---------------------------------------------------


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_directory_is_a_host_key_error(sshd: SSHServer, tmp_path: Path, policy: str) -> None:
    kh = tmp_path / "known_hosts"
    kh.mkdir()
    msg = refused(sshd, tmp_path, kh, policy)
    assert f"known_hosts {kh}: it is a directory, not a file" in msg


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_fifo_is_a_host_key_error_without_hanging(
    sshd: SSHServer, tmp_path: Path, policy: str
) -> None:
    kh = tmp_path / "known_hosts"
    os.mkfifo(kh)
    msg = refused(sshd, tmp_path, kh, policy)
    assert f"known_hosts {kh}: it is a FIFO (named pipe), not a file" in msg


def test_a_device_is_a_host_key_error(sshd: SSHServer, tmp_path: Path) -> None:
    msg = refused(sshd, tmp_path, Path("/dev/zero"), "accept-new")
    assert "known_hosts /dev/zero: it is a character device" in msg


def test_a_path_through_a_file_is_a_host_key_error(sshd: SSHServer, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    msg = refused(sshd, tmp_path, tmp_path / "file" / "known_hosts", "accept-new")
    assert "cannot open it: Not a directory" in msg


# -- lines that cannot be read --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_non_utf8_line_is_a_host_key_error_naming_the_line(
    sshd: SSHServer, tmp_path: Path, policy: str
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_bytes(
        f"{sshd.known_hosts.read_text()}caf\xe9.lan {other_key(tmp_path)}\n".encode("latin-1")
    )
    before = kh.read_bytes()
    msg = refused(sshd, tmp_path, kh, policy)
    assert f"known_hosts {kh}:2: not UTF-8 text" in msg
    assert kh.read_bytes() == before


def test_a_corrupt_key_is_an_error_not_a_skip(sshd: SSHServer, tmp_path: Path) -> None:
    # Skipping the line would let accept-new record whatever key the server shows now.
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAA!!not-base64\n")
    msg = refused(sshd, tmp_path, kh, "accept-new")
    assert f"known_hosts {kh}:1: the key on this line cannot be read" in msg
    assert kh.read_text().count("\n") == 1


def test_comments_markers_and_odd_bytes_in_comments_are_fine(
    sshd: SSHServer, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    entry = sshd.known_hosts.read_text().strip()
    kh.write_bytes(
        b"# caf\xe9 (latin-1 comment)\n\n"
        + f"@cert-authority *.example.com {other_key(tmp_path)}\n".encode()
        + f"{entry} caf\xe9 trailing comment\n".encode("latin-1")
    )
    assert connect(sshd, tmp_path, kh) == "ok\n"


# -- the changed-key hint -------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_changed_key_hint_works_pasted_into_a_shell(
    sshd: SSHServer, tmp_path: Path, shell: str
) -> None:
    kh = tmp_path / "my known hosts"  # a space, too
    stale = f"[127.0.0.1]:{sshd.port} {other_key(tmp_path)}"
    kh.write_text(f"keep.example {other_key(tmp_path)}\n{stale}\n")
    msg = refused(sshd, tmp_path, kh)
    hint = msg.rsplit("\n", 1)[-1].strip()
    assert hint.startswith(f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f "), msg
    subprocess.run([need_program(shell), "-c", hint], check=True, capture_output=True, cwd=tmp_path)
    assert stale not in kh.read_text() and "keep.example" in kh.read_text()
    assert connect(sshd, tmp_path, kh, "accept-new") == "ok\n"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_unknown_key_hint_works_pasted_into_a_shell(
    sshd: SSHServer, tmp_path: Path, shell: str
) -> None:
    kh = tmp_path / "it's known hosts"
    kh.write_text("")
    msg = refused(sshd, tmp_path, kh)
    hint = msg.split("\n")[1].strip()
    assert hint.startswith(f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> "), msg
    argv = [need_program(shell), "-c", hint]
    subprocess.run(argv, check=True, capture_output=True, cwd=tmp_path, timeout=30)
    assert connect(sshd, tmp_path, kh) == "ok\n"


# -- what accept-new writes -----------------------------------------------------------------


def test_accept_new_hashes_its_entry_when_the_file_is_hashed(
    sshd: SSHServer, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"keep.example {other_key(tmp_path)}\n")
    subprocess.run(
        [need_program("ssh-keygen"), "-q", "-H", "-f", str(kh)], check=True, capture_output=True
    )
    assert kh.read_text().startswith("|1|")
    assert connect(sshd, tmp_path, kh, "accept-new") == "ok\n"
    lines = kh.read_text().splitlines()
    assert len(lines) == 2 and all(line.startswith("|1|") for line in lines)
    assert "127.0.0.1" not in kh.read_text()
    # OpenSSH finds it and trusts it; and so do we, strictly, on the next connection.
    found = subprocess.run(
        [need_program("ssh-keygen"), "-F", f"[127.0.0.1]:{sshd.port}", "-f", str(kh)],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0 and sshd.host_pub.split()[1] in found.stdout
    assert openssh_connects(sshd, kh).stdout == "openssh-ok\n"
    assert connect(sshd, tmp_path, kh) == "ok\n"
    assert len(kh.read_text().splitlines()) == 2


def test_accept_new_writes_plain_entries_to_a_plain_file(sshd: SSHServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"keep.example {other_key(tmp_path)}")  # no newline at the end
    assert connect(sshd, tmp_path, kh, "accept-new") == "ok\n"
    lines = kh.read_text().splitlines()
    assert lines[0].startswith("keep.example ssh-ed25519 ")  # not glued to the new entry
    assert lines[1] == f"[127.0.0.1]:{sshd.port} " + " ".join(sshd.host_pub.split()[:2])
    assert openssh_connects(sshd, kh).stdout == "openssh-ok\n"


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
@pytest.mark.parametrize("listed", [False, True], ids=["revoked only", "revoked and listed"])
def test_a_revoked_key_is_refused_as_openssh_does(
    sshd: SSHServer, tmp_path: Path, policy: str, listed: bool
) -> None:
    kh = tmp_path / "known_hosts"
    entry = sshd.known_hosts.read_text() if listed else ""
    kh.write_text(f"@revoked * {sshd.host_pub}\n{entry}")
    before = kh.read_text()
    msg = refused(sshd, tmp_path, kh, policy)
    assert f"is marked @revoked in {kh}" in msg
    assert kh.read_text() == before
    assert "REVOKED HOST KEY" in openssh_connects(sshd, kh).stderr
