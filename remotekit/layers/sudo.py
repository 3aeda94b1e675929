"""Passwordless ``sudo -n --`` on the node, outside any container hop.

hosts.yaml: ``sudo: true``. ``-n`` makes sudo fail at once rather than wait for a password
prompt that nobody can answer; its words then are ``sudo: a password is required``.
Interactive (``remotekit shell``): the same argv; the terminal passes through sudo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from remotekit.errors import AuthError, RemotekitError
from remotekit.layers.core import Failure, Fields, Hop, Launch

__all__ = ["Sudo"]


@dataclass(frozen=True)
class Sudo(Hop):
    """Passwordless sudo (``-n``: fail at once rather than wait for a password prompt)."""

    sudo: str = "sudo"
    #: Who asks (the SSH user), only for the message when sudo wants a password.
    user: str | None = None

    key: ClassVar[str] = "sudo"
    kind: ClassVar[str] = "sudo"
    exe_key: ClassVar[str] = "sudo"
    says: ClassVar[str] = "{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure(
            r"(?s)\A(?=.*sudo)(?=.*(password|terminal))",
            AuthError,
            "sudo wants a password; remotekit needs passwordless sudo (NOPASSWD) for "
            "{hop.asker}:\n{said}",
        ),
    )

    @classmethod
    def read(cls, fields: Fields) -> Sudo | None:
        on = fields.get("sudo", lambda v: isinstance(v, bool), "true or false")
        return cls() if on else None

    @property
    def name(self) -> str:
        return "sudo"

    @property
    def label(self) -> str:
        return "sudo"

    @property
    def asker(self) -> str:
        """Who needs passwordless sudo, for the message."""
        return self.user or "this user"

    def apply(self, launch: Launch) -> Launch:
        return self.wrap(launch, (self.sudo, "-n", "--"))

    def probe(self) -> tuple[str, ...]:
        return self.apply(Launch(argv=("true",))).argv

    def verdict(self, code: int | None, text: str) -> tuple[bool, str]:
        return code == 0, "passwordless sudo works" if code == 0 else text or f"exit {code}"

    def missing(self, host: str, step: str) -> RemotekitError:
        return RemotekitError(
            "sudo is not installed on the node (`sudo: true` in hosts.yaml asks for it)",
            host=host,
            step=step,
        )
