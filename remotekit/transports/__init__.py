"""Transports: the only modules that touch processes and sockets.

A transport starts one argv there with bytes on its stdin and reports what happens as
events on a queue (see :class:`~remotekit.transports.base.Process`). ``local`` runs it as a
subprocess on this machine; ``ssh`` sends it as one exec request over a held SSH connection.
The ssh transport (paramiko, Fabric) is imported only when first used.
:func:`for_spec` picks the transport a host spec declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from remotekit.transports.base import Process, Transport
from remotekit.transports.local import LocalTransport

if TYPE_CHECKING:
    from remotekit.spec import HostSpec

__all__ = ["LocalTransport", "Process", "SSHTransport", "Transport", "for_spec"]


def for_spec(spec: HostSpec) -> Transport:
    """The transport that reaches ``spec``: SSH when it has ``ssh:``, else this machine."""
    if spec.ssh is None:
        return LocalTransport()
    from remotekit.transports.ssh import SSHTransport

    return SSHTransport(spec.ssh, host=spec.name, connect_timeout=spec.timeouts.connect)


def __getattr__(name: str) -> Any:
    if name == "SSHTransport":
        from remotekit.transports.ssh import SSHTransport

        return SSHTransport
    raise AttributeError(name)
