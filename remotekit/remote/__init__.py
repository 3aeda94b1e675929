"""Files that remotekit ships and runs *there*, inside the container, with its Python.

Every ``*.py`` here except this ``__init__`` runs there, and so do the packages beside them
(``ckpt/``, ``trainlog/``): they import only the standard library, torch and their sibling
modules and packages, run on Python >= 3.8, and talk to the local side through the record protocol of
:mod:`remotekit.remote.protocol` (JSON lines on stdout, one object per line, each with a
``"type"`` key, one final ``done`` record). Load them as bytes with :func:`script`, which ships
a script together with every sibling module and package it imports, at the same relative
paths (``from ckpt.check import scan_item`` in ``ckpt.py`` ships ``ckpt/__init__.py`` and
``ckpt/check.py``, whose ``from .base import ...`` ships ``ckpt/base.py``; ``from .readers
import mlflow`` ships ``readers/mlflow.py``), so a diagnostic may be a package of small
modules. Local code imports three of them too: ``protocol.py`` (the
format is written once), ``sync.py`` (its exclude rules and path checks mean the same on
both sides) and ``runrecord.py`` (a run's record and its checks, for both sides). ``relay.py`` (:mod:`remotekit.forward`) speaks no records: after one line each
way, its stdin and stdout are a raw byte stream. ``agent.py``
(:mod:`remotekit.agent`) speaks no records either: its stdin and stdout carry frames, whose
format local code imports from it (written once); ``boot.py`` is what its loader runs first,
and compiles the agent through the code cache.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

from remotekit.result import Script

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["companions", "script", "source"]

_IMPORT = re.compile(
    rb"^\s*(?:from\s+(\.*[\w.]*)\s+import\s*(\([^)]*\)|[\w, \t]+)"
    rb"|import\s+([\w.]+(?:\s*,\s*[\w.]+)*))",
    re.M,
)


def _resource(name: str) -> Traversable:
    node = resources.files(__name__)
    for part in name.split("/"):
        node = node.joinpath(part)
    return node


@lru_cache(maxsize=None)
def source(name: str) -> bytes:
    """The bytes of the shipped file ``name`` (e.g. ``"runner.py"``, ``"ckpt/base.py"``)."""
    return _resource(name).read_bytes()


def _shipped(name: str) -> bool:
    return name != "__init__.py" and _resource(name).is_file()


def _module_files(module: str, importer: str, names: tuple[str, ...] = ()) -> list[str]:
    """The files that importing ``module`` from the shipped file ``importer`` loads: a
    sibling ``protocol.py``, or a package's ``__init__.py`` and its module (``ckpt.base``,
    or ``.base`` inside ``ckpt/``), and of ``from package import a, b`` the submodules
    ``a`` and ``b``; every candidate, shipped or not."""
    tail = module.lstrip(".")
    if tail != module:  # relative: from the importer's package, one level up per extra dot
        package = importer.split("/")[:-1]
        package = package[: len(package) - (len(module) - len(tail) - 1)]
        module = ".".join([*package, tail])
    parts = [p for p in module.split(".") if p]
    files = ["/".join([*parts[:i], "__init__.py"]) for i in range(1, len(parts) + 1)]
    files += ["/".join([*parts, n]) + ".py" for n in names]
    return [*files, "/".join(parts) + ".py"] if tail else files


@lru_cache(maxsize=None)
def companions(name: str) -> tuple[str, ...]:
    """The modules ``name`` imports, directly or through each other, sorted: sibling files
    and the files of sibling packages (``ckpt/__init__.py``, ``ckpt/base.py``)."""
    found: set[str] = set()
    todo = [name]
    while todo:
        importer = todo.pop()
        for m in _IMPORT.finditer(source(importer)):
            if m.group(1) is not None:  # from MODULE import NAMES: a name may be a submodule
                words = re.findall(r"\w+", m.group(2).decode().replace(" as ", " , "))
                pairs = [(m.group(1).decode(), tuple(words))]
            else:
                pairs = [(mod, ()) for mod in m.group(3).decode().replace(" ", "").split(",")]
            for mod, names in pairs:
                for file in _module_files(mod, importer, names):
                    if file != name and file not in found and _shipped(file):
                        found.add(file)
                        todo.append(file)
    return tuple(sorted(found))


def script(name: str) -> Script:
    """The shipped file ``name`` as a :class:`~remotekit.Script` ready for ``run_python``,
    with the modules and packages it imports beside it (at the same relative paths)."""
    return Script(source(name), name=name, files={f: source(f) for f in companions(name)})
