"""Host specs: what one target is, as declared (SSH address, hops, interpreter, env, timeouts).

Plain frozen dataclasses with no I/O. :mod:`remotekit.inventory` reads hosts.yaml into them;
:mod:`remotekit.transports` and :mod:`remotekit.target` take them as they are. Nothing here
imports either, so the import graph runs one way: inventory -> target -> transports -> spec.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from remotekit.layers import Env, Hop, Interpreter, Layer, Sudo, Venv, Workdir

__all__ = ["HOST_KEY_POLICIES", "LOCAL", "HostSpec", "SSHSpec", "Timeouts"]

HOST_KEY_POLICIES = ("strict", "accept-new")


@dataclass(frozen=True)
class SSHSpec:
    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    host_key: str = "strict"
    #: The last jump host on the way (ProxyJump); its own ``jump`` is the one before it, so
    #: ``jump: [a, b]`` is ``b`` reached through ``a``.
    jump: SSHSpec | None = None

    @property
    def display(self) -> str:
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port else ""
        return f"{user}{host}{port}"


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    step: float | None = 600.0
    kill_grace: float = 1.0


@dataclass(frozen=True)
class HostSpec:
    """One target as declared. ``layers`` turns it into the launch transforms, innermost first.

    ``hops`` is the chain after the transport, in order, innermost last: hosts.yaml's
    ``hops:`` list, or its single keys as a chain of one or two (``[sudo] [container hop]``).
    """

    name: str
    ssh: SSHSpec | None = None
    hops: tuple[Hop, ...] = ()
    venv: str | None = None
    python: str | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()
    checkpoints: str | None = None
    #: Where runs (``detach=True``) are recorded there; None: the state dir's default.
    runs_dir: str | None = None
    #: hosts.yaml says it has GPUs (``gpus: N`` > 0 or ``gpu: true``): no GPU found there is
    #: then an error; otherwise "no GPU here" is a note.
    has_gpu: bool = False
    #: hosts.yaml ``gpus: N``: fewer GPUs found there is a finding (a GPU lost from the bus);
    #: 0 when not said.
    gpus: int = 0
    timeouts: Timeouts = Timeouts()
    #: Steps are messages to one resident agent there (``remotekit.agent``), unless hosts.yaml
    #: says ``agent: false``: then each step is a process of its own, started through the chain.
    agent: bool = True
    source: str = "<embedded>"
    #: Where each hop's executable is set in hosts.yaml (``path:line`` of ``pct:``, or of
    #: the hop's own key when its tool is the default), for "not found" messages.
    hop_sources: tuple[str, ...] = ()

    @property
    def interpreter(self) -> str:
        """The Python that runs steps there. A plain ``local`` target uses our own."""
        if self.venv:
            return self.venv.rstrip("/") + "/bin/python"
        if self.python:
            return self.python
        if self.ssh is None and not self.hops:
            return sys.executable
        return "python3"

    def layers(self) -> tuple[Layer, ...]:
        """The layers to compose, innermost first: interpreter (or venv), env, workdir, then
        the hops from the innermost out."""
        inner: Layer = Venv(self.venv) if self.venv else Interpreter(self.interpreter)
        out: list[Layer] = [inner]
        if self.env:
            out.append(Env(dict(self.env)))
        if self.workdir:
            out.append(Workdir(self.workdir))
        out.extend(reversed(self.hops))
        return tuple(out)

    @property
    def hop(self) -> Hop | None:
        """The innermost hop that enters somewhere (a container, job or pod; not sudo)."""
        return next((h for h in reversed(self.hops) if not isinstance(h, Sudo)), None)

    @property
    def sudo(self) -> bool:
        """Whether the chain goes through sudo anywhere."""
        return any(isinstance(h, Sudo) for h in self.hops)


LOCAL = HostSpec(name="local")
