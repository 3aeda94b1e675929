"""OpenSSH ``known_hosts`` for the SSH transport: read it, check keys, record new ones.

paramiko's own reader opens the file blindly (a FIFO or ``/dev/zero`` hangs it), decodes it
as text (a non-UTF-8 byte is a traceback) and stops at the first corrupt key. Here the file
is opened without blocking and checked to be a regular file first, only the fields that
matter must be UTF-8, and every problem is :class:`KnownHostsUnusable` naming the file and
the line, which the transport turns into a ``HostKeyError``.

Policies for a key that known_hosts does not list (a *changed* key never reaches them:
paramiko refuses it with ``BadHostKeyException``):

- :class:`StrictPolicy` refuses it;
- :class:`AcceptNewPolicy` records it, hashed (``|1|salt|hash``) when the file already
  holds a hashed entry, as OpenSSH's ``HashKnownHosts yes`` would.

Both refuse a key marked ``@revoked``, as OpenSSH does.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass, field

import paramiko

from remotekit.quoting import quote

__all__ = [
    "AcceptNewPolicy",
    "KnownHosts",
    "KnownHostsUnusable",
    "RevokedHostKey",
    "StrictPolicy",
    "UnknownHostKey",
    "read_known_hosts",
    "shell_path",
]

_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class KnownHostsUnusable(paramiko.SSHException):
    """known_hosts cannot be read or written; ``where`` is the file (``path:line``)."""

    def __init__(self, where: str, problem: str):
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


class UnknownHostKey(paramiko.SSHException):
    """The server's key is not in known_hosts (``hostname`` as known_hosts names the hop)."""

    def __init__(self, hostname: str, key: paramiko.PKey):
        self.hostname = hostname
        self.key = key
        super().__init__(hostname)


class RevokedHostKey(UnknownHostKey):
    """The server's key is marked ``@revoked`` in known_hosts."""


@dataclass(frozen=True)
class KnownHosts:
    """What one known_hosts file says."""

    path: str
    entries: tuple[tuple[str, paramiko.PKey], ...] = ()  # (host name or |1| hash, key)
    revoked: frozenset[bytes] = field(default_factory=frozenset)  # key blobs
    hashed: bool = False  # some entry is hashed: record new ones hashed too


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, known: KnownHosts):
        self.known = known

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if key.asbytes() in self.known.revoked:
            raise RevokedHostKey(hostname, key)
        raise UnknownHostKey(hostname, key)


class AcceptNewPolicy(StrictPolicy):
    """OpenSSH's ``accept-new``: record an unknown key in known_hosts, refuse a changed one."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if key.asbytes() in self.known.revoked:
            raise RevokedHostKey(hostname, key)
        name = paramiko.HostKeys.hash_host(hostname) if self.known.hashed else hostname
        _append(self.known.path, f"{name} {key.get_name()} {key.get_base64()}")
        client.get_host_keys().add(hostname, key.get_name(), key)


def read_known_hosts(path: str) -> KnownHosts:
    """Read an OpenSSH known_hosts file (a missing one lists nothing).

    Lines paramiko has no key type for (``@cert-authority``, ``sk-*`` keys) are skipped; a
    line whose names or key cannot be read is an error, not a skip: under ``accept-new`` a
    skipped entry would let a changed key be recorded as new.
    """
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return KnownHosts(path)
    entries: list[tuple[str, paramiko.PKey]] = []
    revoked: set[bytes] = set()
    try:
        with os.fdopen(fd, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                fields = raw.split(None, 4)
                marker = fields.pop(0) if fields and fields[0].startswith(b"@") else None
                if not fields or fields[0].startswith(b"#"):
                    continue
                where = f"{path}:{lineno}"
                if marker == b"@revoked" and len(fields) >= 3:
                    revoked.add(_key_blob(fields[2], where))
                elif marker is None:
                    entries += _entries(fields[:3], where)
    except OSError as exc:
        raise KnownHostsUnusable(path, f"cannot read it: {exc.strerror}") from exc
    return KnownHosts(
        path,
        tuple((name, key) for name, key in entries if key.asbytes() not in revoked),
        frozenset(revoked),
        any(name.startswith("|1|") for name, _ in entries),
    )


def _entries(fields: list[bytes], where: str) -> list[tuple[str, paramiko.PKey]]:
    try:
        text = b" ".join(fields).decode()
    except UnicodeDecodeError:
        raise KnownHostsUnusable(where, "not UTF-8 text") from None
    try:
        entry = paramiko.hostkeys.HostKeyEntry.from_line(text)
    except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
        raise KnownHostsUnusable(where, "the key on this line cannot be read") from None
    return [] if entry is None else [(name, entry.key) for name in entry.hostnames]


def _key_blob(field: bytes, where: str) -> bytes:
    try:
        return base64.b64decode(field, validate=True)
    except binascii.Error:
        raise KnownHostsUnusable(where, "the key on this line cannot be read") from None


def _open_regular(path: str, flags: int) -> int:
    """An fd on ``path`` if it is a regular file; never blocks on a FIFO or a device."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise
    except OSError as exc:
        # A directory, or a FIFO opened for writing with no reader (ENXIO, not a hang).
        try:
            kind = _FILE_KINDS.get(stat.S_IFMT(os.stat(path).st_mode))
        except OSError:
            kind = None
        why = f"it is {kind}, not a file" if kind else f"cannot open it: {exc.strerror}"
        raise KnownHostsUnusable(path, why) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise KnownHostsUnusable(path, f"it is {_FILE_KINDS.get(stat.S_IFMT(mode))}, not a file")
    os.set_blocking(fd, True)
    return fd


def _append(path: str, line: str) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        fd = _open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "ab") as f:
            size = os.fstat(fd).st_size
            # A last line without its newline would swallow ours into it.
            sep = b"" if size == 0 or os.pread(fd, 1, size - 1) == b"\n" else b"\n"
            f.write(sep + line.encode() + b"\n")
    except OSError as exc:
        raise KnownHostsUnusable(path, f"cannot record the key: {exc.strerror}") from exc


def shell_path(path: str) -> str:
    """``path`` as a shell word for a hint, a leading ``~/`` left for the shell to expand."""
    if path.startswith("~/"):
        return "~/" + quote(path[2:])
    return quote(path)
