"""Layers: pure transforms of a :class:`Launch`, composed in order, with no I/O.

A step there is started by one argv, the *launch*: the target's interpreter running a constant
loader (``python -c LOADER``), which reads the runner and then the step's payload from stdin.
Layers wrap that argv from the inside out::

    Interpreter("/root/venv/bin/python")    ["/root/venv/bin/python", "-c", LOADER]
    Pct(200)                                ["pct", "exec", "200", "--", *argv]
    Sudo()                                  ["sudo", "-n", "--", *argv]

and the SSH transport quotes the result once (:func:`remotekit.quoting.join`). Env, working
directory and the venv's PATH do not touch the argv at all: they are fields of the payload,
which travels as bytes on stdin. So no user value is ever parsed by a shell, and secret env
values never show in a process table (``ps``) on the node.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

__all__ = [
    "LOADER",
    "Env",
    "Interpreter",
    "Launch",
    "Layer",
    "Pct",
    "Sudo",
    "Venv",
    "Workdir",
    "compose",
]

#: The only code that crosses a shell: it reads ``<len>\n<runner source>`` from stdin and runs it.
LOADER = "import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))"


@dataclass(frozen=True)
class Launch:
    """How a step starts there: the argv plus what the runner applies before it spawns."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    path_prepend: tuple[str, ...] = ()
    cwd: str | None = None
    interpreter: str | None = None
    hops: tuple[str, ...] = ()

    @property
    def chain(self) -> str:
        """The hops for people: ``sudo -> pct exec 200 -> /root/venv/bin/python``."""
        return " -> ".join(self.hops)


class Layer(Protocol):
    """A pure transform; ``describe`` is its hop in a layer chain."""

    def apply(self, launch: Launch) -> Launch: ...


@dataclass(frozen=True)
class Interpreter:
    """The innermost layer: ``python -c LOADER`` with the given interpreter."""

    python: str

    def apply(self, launch: Launch) -> Launch:
        return replace(
            launch,
            argv=(self.python, "-c", LOADER),
            interpreter=self.python,
            hops=(*launch.hops, self.python),
        )


@dataclass(frozen=True)
class Venv:
    """Run with ``<venv>/bin/python``, and put ``<venv>/bin`` first on PATH, like ``activate``."""

    path: str

    def apply(self, launch: Launch) -> Launch:
        bindir = posixpath.join(self.path, "bin")
        launch = Interpreter(posixpath.join(bindir, "python")).apply(launch)
        return replace(
            launch,
            env={**launch.env, "VIRTUAL_ENV": self.path},
            path_prepend=(bindir, *launch.path_prepend),
        )


@dataclass(frozen=True)
class Env:
    """Environment variables for the step (sent in the payload, never on a command line)."""

    values: Mapping[str, str]

    def apply(self, launch: Launch) -> Launch:
        return replace(launch, env={**launch.env, **self.values})


@dataclass(frozen=True)
class Workdir:
    path: str

    def apply(self, launch: Launch) -> Launch:
        return replace(launch, cwd=self.path)


@dataclass(frozen=True)
class Pct:
    """Enter Proxmox container ``vmid``: ``pct exec <vmid> -- argv`` (pct runs no shell)."""

    vmid: int
    pct: str = "pct"

    def apply(self, launch: Launch) -> Launch:
        return replace(
            launch,
            argv=(self.pct, "exec", str(self.vmid), "--", *launch.argv),
            hops=(f"pct exec {self.vmid}", *launch.hops),
        )


@dataclass(frozen=True)
class Sudo:
    """Passwordless sudo (``-n``: fail at once rather than wait for a password prompt)."""

    def apply(self, launch: Launch) -> Launch:
        return replace(launch, argv=("sudo", "-n", "--", *launch.argv), hops=("sudo", *launch.hops))


def compose(layers: tuple[Layer, ...] | list[Layer], launch: Launch | None = None) -> Launch:
    """Apply ``layers`` in order (innermost first) to an empty launch."""
    out = launch or Launch()
    for layer in layers:
        out = layer.apply(out)
    return out
