"""Passwordless ``sudo -n [-u USER] --``: root (or another user) where the chain is.

hosts.yaml: ``sudo: true`` (root, on the node, outside the container hop), or in a ``hops:``
list at any depth: ``- sudo: true``, ``- sudo: alice`` (``sudo -u alice``) or
``- sudo: {user: alice, bin: /usr/bin/sudo}``. ``-n`` makes sudo fail at once rather than wait
for a password prompt that nobody can answer; its words then are ``sudo: a password is
required``; for a user that does not exist there, ``sudo: unknown user alice``.
Interactive (``remotekit shell``): the same argv; the terminal passes through sudo.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from remotekit.errors import AuthError, RemotekitError
from remotekit.layers.core import Failure, Fields, Hop, Launch

__all__ = ["Sudo"]

#: A user name sudo takes as one argument (POSIX portable names, as useradd allows them).
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


#: YAML 1.1 booleans written as strings: a quoted ``'yes'`` is a mistake, not a user.
_BOOLISH = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false"})


def _is_user(v: Any) -> bool:
    return isinstance(v, str) and bool(_USER.fullmatch(v)) and v.lower() not in _BOOLISH


@dataclass(frozen=True)
class Sudo(Hop):
    """Passwordless sudo (``-n``: fail at once rather than wait for a password prompt), to
    root or to ``as_user``."""

    sudo: str = "sudo"
    #: Who asks (the SSH user), only for the message when sudo wants a password.
    user: str | None = None
    #: Whom to become (``sudo -u``); None: root.
    as_user: str | None = None

    key: ClassVar[str] = "sudo"
    kind: ClassVar[str] = "sudo"
    own_tree: ClassVar[bool] = False
    exe_key: ClassVar[str] = "sudo"
    says: ClassVar[str] = "{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure(
            r"(?s)\A(?=.*sudo)(?=.*(password|terminal))",
            AuthError,
            "sudo wants a password; remotekit needs passwordless sudo (NOPASSWD) for "
            "{hop.asker}:\n{said}",
        ),
        Failure(
            r"^sudo: unknown user",
            AuthError,
            "sudo cannot run as {hop.as_user}: no such user there:\n{said}",
        ),
    )

    @classmethod
    def read(cls, fields: Fields) -> Sudo | None:
        what = "true or false, a user name, or {user: NAME, bin: PATH}"
        value = fields.get("sudo", lambda v: isinstance(v, (bool, Mapping)) or _is_user(v), what)
        if isinstance(value, str):
            return cls(as_user=value)
        if not isinstance(value, Mapping):
            return cls() if value else None
        sub = fields.mapping("sudo", ("user", "bin"))
        user = sub.get("user", _is_user, "a user name")
        return cls(sub.text("bin") or "sudo", as_user=user)

    @property
    def name(self) -> str:
        return self.as_user or "root"

    @property
    def label(self) -> str:
        return f"sudo -u {self.as_user}" if self.as_user else "sudo"

    @property
    def asker(self) -> str:
        """Who needs passwordless sudo, for the message."""
        return self.user or "this user"

    def apply(self, launch: Launch) -> Launch:
        user = ("-u", self.as_user) if self.as_user else ()
        return self.wrap(launch, (self.sudo, "-n", *user, "--"))

    def probe(self) -> tuple[str, ...]:
        return self.apply(Launch(argv=("true",))).argv

    def verdict(self, code: int | None, text: str) -> tuple[bool, str]:
        return code == 0, "passwordless sudo works" if code == 0 else text or f"exit {code}"

    def missing(
        self, host: str, step: str, where: str = "the node", source: str = ""
    ) -> RemotekitError:
        return RemotekitError(
            f"{self.not_found(where, source)}: is sudo installed there? (`sudo:` in hosts.yaml "
            "asks for it)",
            host=host,
            step=step,
        )
