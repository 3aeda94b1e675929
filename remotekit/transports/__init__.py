"""Transports: the only modules that touch processes and sockets.

A transport starts one argv there with bytes on its stdin and reports what happens as
events on a queue (see :class:`~remotekit.transports.base.Process`). ``local`` runs it as a
subprocess on this machine; ``ssh`` sends it as one exec request over a held SSH connection.
"""

from remotekit.transports.base import Process, Transport
from remotekit.transports.local import LocalTransport
from remotekit.transports.ssh import SSHTransport

__all__ = ["LocalTransport", "Process", "SSHTransport", "Transport"]
