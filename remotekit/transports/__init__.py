"""Transports: the only modules that touch processes and sockets.

A transport starts one argv there with bytes on its stdin and reports what happens as
events on a queue (see :class:`~remotekit.transports.base.Process`). ``local`` runs it as a
subprocess on this machine; ``ssh`` sends it as one exec request over a held SSH connection.
The ssh transport (paramiko, Fabric) is imported only when first used.
"""

from __future__ import annotations

from typing import Any

from remotekit.transports.base import Process, Transport
from remotekit.transports.local import LocalTransport

__all__ = ["LocalTransport", "Process", "SSHTransport", "Transport"]


def __getattr__(name: str) -> Any:
    if name == "SSHTransport":
        from remotekit.transports.ssh import SSHTransport

        return SSHTransport
    raise AttributeError(name)
