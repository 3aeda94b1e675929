"""Files that remotekit ships and runs *there*, inside the container, with its Python.

Every ``*.py`` here except this ``__init__`` runs there: it imports only the standard library,
torch and its sibling modules, runs on Python >= 3.8, and talks to the local side through the
record protocol of :mod:`remotekit.remote.protocol` (JSON lines on stdout, one object per line,
each with a ``"type"`` key, one final ``done`` record). Load them as bytes with :func:`script`,
which ships a script together with every sibling module it imports (``import ckpt_check``
beside ``ckpt.py``), so a diagnostic may be split into small modules. Local code imports two of
them too: ``protocol.py`` (the format is written once) and ``sync.py`` (its exclude rules and
path checks mean the same on both sides). ``relay.py`` (:mod:`remotekit.forward`) speaks no
records: after one line each way, its stdin and stdout are a raw byte stream. ``agent.py``
(:mod:`remotekit.agent`) speaks no records either: its stdin and stdout carry frames, whose
format local code imports from it (written once).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from remotekit.result import Script

__all__ = ["companions", "script", "source"]

_IMPORT = re.compile(rb"^\s*(?:from\s+(\w+)\s+import\b|import\s+(\w+(?:\s*,\s*\w+)*))", re.M)


@lru_cache(maxsize=None)
def source(name: str) -> bytes:
    """The bytes of the shipped file ``name`` (e.g. ``"runner.py"``)."""
    return resources.files(__name__).joinpath(name).read_bytes()


def _shipped(name: str) -> bool:
    return name != "__init__.py" and resources.files(__name__).joinpath(name).is_file()


@lru_cache(maxsize=None)
def companions(name: str) -> tuple[str, ...]:
    """The sibling modules ``name`` imports, directly or through each other, sorted."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for m in _IMPORT.finditer(source(todo.pop())):
            for mod in (m.group(1) or m.group(2)).decode().replace(" ", "").split(","):
                file = mod + ".py"
                if file != name and file not in found and _shipped(file):
                    found.add(file)
                    todo.append(file)
    return tuple(sorted(found))


def script(name: str) -> Script:
    """The shipped file ``name`` as a :class:`~remotekit.Script` ready for ``run_python``,
    with the sibling modules it imports beside it."""
    return Script(source(name), name=name, files={f: source(f) for f in companions(name)})
