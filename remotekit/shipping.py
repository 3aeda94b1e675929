"""What the laptop ships of :mod:`remotekit.remote`, and how: the package by its hash, or a file.

The far side runs the very modules this process imports (:mod:`remotekit.remote` says why
and how they find each other there). Two ways they travel:

- **alone**, as source: :func:`source` gives the bytes of one file (the runner, the agent and
  its boot, the relay, the shell, ``sync.py``, ``protocol.py`` beside a script of your own);
  :func:`runner_first` is the boot and the runner, what a step of its own starts with;
- **the package**, whole: :func:`package` is every file of ``remotekit/remote/`` at its path
  under ``remotekit/remote/``, named by the hash of them all; :func:`script` is an entry point
  of it as a :class:`PackageScript`, whose step names the package in its header
  (``package``) and sends none of its bytes. The runner there runs it from its cache of
  packages; a runner without that package says ``missing`` before anything ran, and the
  step (:mod:`remotekit.step`) sends it once more with :attr:`Package.blob` behind its
  header, which the runner unpacks into its cache (or the step's temp dir). Which files
  travel is no one's choice: all of them, once per host and version.

The blob is ``zlib(<manifest JSON>\\n<file bytes, in manifest order>)``, the manifest a list of
``[name, size]``: a read and a ``zlib.decompress`` there, no tarfile to import.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from typing import TYPE_CHECKING

from remotekit.remote.runner import package_hash
from remotekit.result import Script

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["Package", "PackageScript", "package", "runner_first", "script", "source"]

#: Where the package's files sit, under the folder the far side puts on its path.
PREFIX = "remotekit/remote/"


def _resource(name: str) -> Traversable:
    node = resources.files("remotekit.remote")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node


@cache
def source(name: str) -> bytes:
    """The bytes of the file ``name`` of :mod:`remotekit.remote` (``"runner.py"``,
    ``"ckpt/base.py"``)."""
    return _resource(name).read_bytes()


@cache
def runner_first() -> bytes:
    """What a loader reads first to run one step as a process of its own: the boot, which
    holds the cache folders' rules, and behind it the runner, marked as the program it runs
    (``remote/boot.py`` says how); then come the step's header and payload."""
    boot, runner = source("boot.py"), source("runner.py")
    return b"%d\n%s%d runner\n%s" % (len(boot), boot, len(runner), runner)


@dataclass(frozen=True)
class Package:
    """The shipped package: ``files`` (path under the package root -> bytes) and their hash."""

    files: tuple[tuple[str, bytes], ...]

    @cached_property
    def hash(self) -> str:
        """The package's name there: a hash of every file's path and bytes."""
        return package_hash(self.files)

    @cached_property
    def blob(self) -> bytes:
        """What travels behind a header that says ``package_size``: see the module doc."""
        manifest = json.dumps([[name, len(data)] for name, data in self.files]).encode()
        return zlib.compress(b"".join([manifest, b"\n", *(d for _, d in self.files)]), 6)


def _walk(node: Traversable, rel: str) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            if child.name != "__pycache__":
                out += _walk(child, f"{rel}{child.name}/")
        elif child.name.endswith(".py"):
            out.append((f"{rel}{child.name}", child.read_bytes()))
    return out


@cache
def package() -> Package:
    """This remotekit's :mod:`remotekit.remote`, every ``*.py`` of it (read once)."""
    return Package(tuple(_walk(resources.files("remotekit.remote"), PREFIX)))


@dataclass(frozen=True, repr=False)
class PackageScript(Script):
    """An entry point of the shipped package (``name``: its path in the package, such as
    ``remotekit/remote/trainlog.py``; ``source``: its bytes, for what shows it), run there
    from the package named ``package`` (its hash); ``files`` go to the step's temp dir
    (``$REMOTEKIT_DIR``), as a script's do."""

    package: str = field(default="")


def script(name: str) -> PackageScript:
    """The entry point ``name`` of :mod:`remotekit.remote` (``"trainlog.py"``) as a step's
    script: it runs there from the package (see the module doc)."""
    return PackageScript(source(name), name=PREFIX + name, package=package().hash)


def shown_name(script: Script) -> str:
    """The name a step of ``script`` shows (``<shipped trainlog.py>``): a package's entry
    point by its name in :mod:`remotekit.remote`."""
    if isinstance(script, PackageScript):
        return script.name.removeprefix(PREFIX)
    return script.name


def slice_sources(script: PackageScript) -> list[bytes]:
    """The entry point's bytes and those of the folder of its name (``ckpt.py`` and
    ``ckpt/``): what the diagnostic it starts is made of."""
    stem = script.name.removesuffix(".py") + "/"
    return [script.source, *(data for name, data in package().files if name.startswith(stem))]
