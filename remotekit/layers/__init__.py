"""Layers: pure transforms of a :class:`Launch`, composed in order, with no I/O.

``core`` holds the launch and the layers every target has (interpreter, venv, env, workdir).
Each *hop* (a way in: sudo, a container, a job, a pod) is one module; :data:`HOPS` maps the
hosts.yaml key that declares a container hop to its class. A target's chain is
``ssh -> hop -> hop ... -> interpreter``, any number of hops in any order
(:attr:`remotekit.spec.HostSpec.hops`, hosts.yaml ``hops:``): each hop wraps the argv of
the ones inside it, so the innermost hop's argv is an argument of the next one out, to the
SSH exec request. hosts.yaml's single keys make the chain ``[sudo] [container hop]``.

Adding a hop: write ``remotekit/layers/<name>.py`` with a :class:`Hop` subclass (its keys,
argv, interactive argv when the tool must be asked for a pty, and probe as code; its tool's
words as data: ``up``, ``says``, ``failures``), add it to :data:`HOPS`, test it in
tests/layers/test_layers.py, then run ``python tools/gen_docs.py`` (docs/extending.md, "Adding a
layer").
"""

from __future__ import annotations

from remotekit.layers.core import (
    LOADER,
    Env,
    Fields,
    Hop,
    Interpreter,
    Launch,
    Layer,
    Venv,
    Workdir,
    compose,
)
from remotekit.layers.kubectl import Kubectl
from remotekit.layers.lxc import Lxc
from remotekit.layers.pct import Pct
from remotekit.layers.podman import Docker, Podman
from remotekit.layers.slurm import Slurm
from remotekit.layers.sudo import Sudo

__all__ = [
    "HOPS",
    "LOADER",
    "Docker",
    "Env",
    "Fields",
    "Hop",
    "Interpreter",
    "Kubectl",
    "Launch",
    "Layer",
    "Lxc",
    "Pct",
    "Podman",
    "Slurm",
    "Sudo",
    "Venv",
    "Workdir",
    "compose",
]

#: hosts.yaml key -> the container hop it declares: one as a host's single key, any number as
#: items of a ``hops:`` list (where ``sudo:`` may stand too, at any depth).
HOPS: dict[str, type[Hop]] = {hop.key: hop for hop in (Pct, Lxc, Podman, Docker, Slurm, Kubectl)}
