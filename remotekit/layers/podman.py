"""Podman and Docker: ``<engine> exec -i NAME argv`` on the node.

hosts.yaml: ``podman: NAME`` or ``docker: NAME``, with ``engine:`` the executable (default
``podman`` / ``docker``). ``-i`` must come before the name, or stdin is silently not connected.
docker's CLI and exit codes match podman's, so one module serves both. Their words::

    Error: no container with name or ID "NAME" found: no such container    (podman, exit 125)
    Error: No such container: NAME                                         (docker)
    Error: can only create exec sessions on running containers: container state improper
                                                                           (podman, exit 255)
    Error response from daemon: container NAME is not running              (docker)
    126 the command cannot be invoked; 127 the command was not found inside

Interactive (``remotekit shell``): ``exec -it``, a pty inside that follows our window size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning
from remotekit.layers.core import Failure, Fields, Hop, Launch, is_container_name

__all__ = ["Docker", "Podman"]


@dataclass(frozen=True)
class Podman(Hop):
    """Enter a running Podman container: ``podman exec -i NAME argv``."""

    container: str
    engine: str = "podman"

    key: ClassVar[str] = "podman"
    options: ClassVar[tuple[str, ...]] = ("engine",)
    exe_key: ClassVar[str] = "engine"
    up: ClassVar[str] = "running"
    says: ClassVar[str] = "{hop.key} says (exit {code}):\n{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure(
            "no such container", ContainerNotFound, "no {hop.key} container {hop.name!r}; {said}"
        ),
        Failure(
            "state improper|is not running|is paused",
            ContainerNotRunning,
            "{hop.key} container {hop.name!r} is not running; {said}",
        ),
        Failure(r"\Aerror", ContainerError, "{hop.key} exec failed; {said}", code=125),
    )

    @classmethod
    def read(cls, fields: Fields) -> Podman:
        name = fields.get(cls.key, is_container_name, "a container name or id (no '/' or spaces)")
        return cls(name, fields.text("engine") or cls.key)

    @property
    def name(self) -> str:
        return self.container

    @property
    def label(self) -> str:
        return f"{self.key} exec {self.container}"

    def apply(self, launch: Launch) -> Launch:
        return self.wrap(launch, (self.engine, "exec", "-i", self.container))

    def interactive(self, launch: Launch) -> Launch:
        # -t: a pty inside (the engine proxies window size changes to it)
        return self.wrap(launch, (self.engine, "exec", "-it", self.container))

    def probe(self) -> tuple[str, ...]:
        fmt = "{{.State.Status}}"
        return (self.engine, "container", "inspect", "--format", fmt, self.container)


@dataclass(frozen=True)
class Docker(Podman):
    """``docker exec -i NAME argv`` (``engine:`` may name podman: same CLI and exit codes)."""

    engine: str = "docker"

    key: ClassVar[str] = "docker"
