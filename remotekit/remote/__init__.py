"""Files that remotekit ships and runs *there*, inside the container, with its Python.

Everything in this folder except this ``__init__`` is a standalone program: it imports only
the standard library and torch, runs on Python >= 3.8, and talks to the local side through
JSON lines on stdout (one object per line, each with a ``"type"`` key). The local halves in
:mod:`remotekit.diagnostics` parse those records. Load them as bytes with :func:`script`.
Two exceptions: ``relay.py`` (:mod:`remotekit.forward`): after one line each way, its stdin
and stdout are a raw byte stream; and ``sync.py`` (stdlib only) is also imported here, so that
its exclude rules and path checks mean the same on both sides.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from remotekit.result import Script

__all__ = ["script", "source"]


@lru_cache(maxsize=None)
def source(name: str) -> bytes:
    """The bytes of the shipped file ``name`` (e.g. ``"runner.py"``)."""
    return resources.files(__name__).joinpath(name).read_bytes()


def script(name: str) -> Script:
    """The shipped file ``name`` as a :class:`~remotekit.Script` ready for ``run_python``."""
    return Script(source(name), name=name)
