"""Proxmox ``pct exec <vmid> --``: a Proxmox VE container (LXC underneath) on the node.

hosts.yaml: ``container: 200`` (the CT id, 100..999999999) and ``pct:`` (the executable,
default ``pct``). pct runs no shell: the argv after ``--`` is exec'd inside the CT.

pct's own words (pve-container src/PVE/CLI/pct.pm, PVE/LXC/Config.pm), exit 255 (Perl's die)::

    Configuration file 'nodes/pve/lxc/999.conf' does not exist
    container '201' not running!
    missing command

Interactive (``remotekit shell``): the same argv. pct exec execs lxc-attach, which gives the
command a pty of its own when its stdin is a terminal (``pct enter`` only gives a login shell).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning, RemotekitError
from remotekit.layers.core import Fields, Hop, Launch

__all__ = ["Pct"]

#: Proxmox's CT id range (pve-common's pve-vmid format).
VMID_MIN, VMID_MAX = 100, 999_999_999


def _is_vmid(v: Any) -> bool:
    if isinstance(v, str) and re.fullmatch(r"[0-9]+", v, flags=re.ASCII):
        v = int(v)
    return isinstance(v, int) and not isinstance(v, bool) and VMID_MIN <= v <= VMID_MAX


@dataclass(frozen=True)
class Pct(Hop):
    """Enter Proxmox container ``vmid``: ``pct exec <vmid> -- argv`` (pct runs no shell)."""

    vmid: int
    pct: str = "pct"

    key: ClassVar[str] = "container"
    options: ClassVar[tuple[str, ...]] = ("pct",)
    exe_key: ClassVar[str] = "pct"

    @classmethod
    def read(cls, fields: Fields) -> Pct:
        vmid = fields.get(
            "container",
            _is_vmid,
            f"a Proxmox CT id (an integer {VMID_MIN}..{VMID_MAX} in ASCII digits, e.g. 200)",
        )
        return cls(int(vmid), fields.text("pct") or "pct")

    @property
    def executable(self) -> str:
        return self.pct

    @property
    def name(self) -> str:
        return str(self.vmid)

    @property
    def label(self) -> str:
        return f"pct exec {self.vmid}"

    def apply(self, launch: Launch) -> Launch:
        return self.wrap(launch, (self.pct, "exec", str(self.vmid), "--"))

    def probe(self) -> tuple[str, ...]:
        return (self.pct, "status", str(self.vmid))

    def verdict(self, code: int | None, text: str) -> tuple[bool, str]:
        running = code == 0 and "running" in text and "stopped" not in text
        return running, text or f"exit {code}"

    def explain(
        self,
        code: int | None,
        text: str,
        host: str,
        step: str,
        status: tuple[int | None, str] | None = None,
    ) -> RemotekitError | None:
        low = text.lower()
        where: dict[str, Any] = dict(host=host, step=step, container=self.name)
        said = f"container {self.vmid} cannot be entered; pct says:\n{self.quote(text)}"
        if "not running" in low:
            return ContainerNotRunning(said, **where)
        if "does not exist" in low or "no such container" in low:
            return ContainerNotFound(said, **where)
        if "missing command" in low:
            return ContainerError(said, **where)
        return super().explain(code, text, host, step)

    def missing(self, host: str, step: str) -> ContainerError:
        return ContainerError(
            f"{self.pct!r} not found: is this a Proxmox node? (`pct:` in hosts.yaml)",
            host=host,
            step=step,
            container=self.name,
        )
