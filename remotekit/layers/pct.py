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

from dataclasses import dataclass
from typing import ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning
from remotekit.layers.core import Failure, Fields, Hop, Launch, is_whole

__all__ = ["Pct"]

#: Proxmox's CT id range (pve-common's pve-vmid format).
VMID_MIN, VMID_MAX = 100, 999_999_999


@dataclass(frozen=True)
class Pct(Hop):
    """Enter Proxmox container ``vmid``: ``pct exec <vmid> -- argv`` (pct runs no shell)."""

    vmid: int
    pct: str = "pct"

    key: ClassVar[str] = "container"
    options: ClassVar[tuple[str, ...]] = ("pct",)
    exe_key: ClassVar[str] = "pct"
    up: ClassVar[str] = "status: running"
    missing_hint: ClassVar[str] = "is it a Proxmox node? (`pct:` in hosts.yaml sets its path)"
    says: ClassVar[str] = "container {hop.vmid} cannot be entered; pct says:\n{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure("not running", ContainerNotRunning),
        Failure("does not exist|no such container", ContainerNotFound),
        Failure("missing command", ContainerError),
    )

    @classmethod
    def read(cls, fields: Fields) -> Pct:
        vmid = fields.get(
            "container",
            lambda v: is_whole(v, VMID_MIN, VMID_MAX),
            f"a Proxmox CT id (an integer {VMID_MIN}..{VMID_MAX} in ASCII digits, e.g. 200)",
        )
        return cls(int(vmid), fields.text("pct") or "pct")

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

    def config_file(self) -> str:
        # /etc/pve/lxc is pmxcfs's link to the local node's nodes/<node>/lxc (pve-cluster);
        # the CT's GPU lines (lxc.cgroup2.devices.allow, lxc.mount.entry, devN) live there
        return f"/etc/pve/lxc/{self.vmid}.conf"
