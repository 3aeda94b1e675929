"""The one place where an argv becomes a shell string: the SSH exec request.

sshd runs the command with the user's login shell as ``$SHELL -c <string>``; :func:`join`
makes a string that POSIX sh, dash, bash and zsh (with or without ``RC_QUOTES``) all split
back into exactly the original argv. Nothing else in remotekit builds command strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["join", "quote"]

_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def quote(arg: str) -> str:
    """One argv item as a shell word.

    Single quotes keep everything literal in every POSIX shell; a single quote itself is
    written ``\\'`` outside them. Unlike :func:`shlex.quote`, this never emits two adjacent
    quote characters inside a word, which zsh's ``RC_QUOTES`` would read as a literal quote.
    """
    if "\0" in arg:
        raise ValueError("an argument cannot contain a NUL byte")
    if _SAFE.fullmatch(arg):
        return arg
    if not arg:
        return "''"
    return "\\'".join(f"'{part}'" if part else "" for part in arg.split("'"))


def join(argv: Iterable[str]) -> str:
    return " ".join(quote(a) for a in argv)
