"""Plain LXC: ``lxc-attach -n NAME --clear-env [--keep-var V ...] --`` on the node.

hosts.yaml: ``lxc: NAME`` or ``lxc: {name: NAME, bin: /usr/bin/lxc-attach, keep_env: [TERM]}``.
``--clear-env`` leaves only PATH and ``container=lxc`` inside; the step's env comes from the
payload. lxc-attach has no cwd option (the runner sets cwd). Its words (lxc 5)::

    lxc-attach: NAME: ../src/lxc/attach.c: get_attach_context: 405 Connection refused - Failed to get init pid
    lxc-attach: NAME: ... Failed to exec "x"                                       (exit 127)

``Failed to get init pid`` (exit 1) means stopped OR missing; ``lxc-info -n NAME -s`` (beside
lxc-attach) tells which: ``State: STOPPED`` vs ``NAME doesn't exist``.

Interactive (``remotekit shell``): the same argv; lxc-attach allocates a pty inside when its
stdin is a terminal and passes window size changes on to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning
from remotekit.layers.core import (
    Failure,
    Fields,
    Hop,
    Launch,
    is_container_name,
    is_env_name,
    tool_beside,
)

__all__ = ["Lxc"]

_NO_INIT_PID = "failed to get init pid"


@dataclass(frozen=True)
class Lxc(Hop):
    """Enter LXC container ``name`` with ``lxc-attach`` and a cleared environment."""

    container: str
    bin: str = "lxc-attach"
    keep_env: tuple[str, ...] = ()

    key: ClassVar[str] = "lxc"
    up: ClassVar[str] = "State: RUNNING"
    says: ClassVar[str] = "lxc-attach says:\n{words}"
    #: "Failed to get init pid" cannot tell stopped from missing: the target asks the probe,
    #: and the rows that need its answer (``status=``) come first.
    confirm: ClassVar[bool] = True
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure(
            _NO_INIT_PID,
            ContainerNotFound,
            "LXC container {hop.name!r} does not exist (lxc-info: {status}); {said}",
            status="doesn't exist|does not exist",
        ),
        Failure(
            _NO_INIT_PID,
            ContainerNotRunning,
            "LXC container {hop.name!r} is not running ({status}); {said}",
            status=r"^State:(?!\s*RUNNING)",
        ),
        Failure(
            _NO_INIT_PID,
            ContainerError,
            "LXC container {hop.name!r} cannot be entered (stopped or missing: "
            "`lxc-info -n {hop.name}` says which); {said}",
        ),
    )

    @classmethod
    def read(cls, fields: Fields) -> Lxc:
        what = "a container name, or {name: NAME, bin: PATH, keep_env: [VAR]}"
        value = fields.get("lxc", lambda v: is_container_name(v) or isinstance(v, Mapping), what)
        if isinstance(value, str):
            return cls(value)
        sub = fields.mapping("lxc", ("name", "bin", "keep_env"))
        name = sub.get("name", is_container_name, "a container name (no '/' or spaces)")
        if name is None:
            sub.fail("name", "`lxc:` needs `name:`")
        keep = sub.get(
            "keep_env",
            lambda v: isinstance(v, list) and all(is_env_name(x) for x in v),
            "a list of environment variable names",
        )
        return cls(name, sub.text("bin") or "lxc-attach", tuple(keep or ()))

    @property
    def name(self) -> str:
        return self.container

    @property
    def label(self) -> str:
        return f"lxc-attach -n {self.container}"

    def apply(self, launch: Launch) -> Launch:
        keep = [w for var in self.keep_env for w in ("--keep-var", var)]
        return self.wrap(launch, (self.bin, "-n", self.container, "--clear-env", *keep, "--"))

    def probe(self) -> tuple[str, ...]:
        return (tool_beside(self.bin, "lxc-info"), "-n", self.container, "-s")

    def config_file(self) -> str:
        # the default lxcpath (lxc.container.conf(5); `lxc-config lxc.lxcpath`)
        return f"/var/lib/lxc/{self.container}/config"
