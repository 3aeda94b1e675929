"""The transport contract.

Example::

    proc = transport.start(["python3", "-c", "print(1)"], stdin=[b""])
    while True:
        kind, data = proc.events.get()
        if kind == "exit":
            break

``start`` returns at once; the process's output arrives as events, in order per stream:

- ``("stdout", bytes)`` / ``("stderr", bytes)``: output as it is produced;
- ``("exit", int | None)``: the process ended (its status; ``None`` if unknown), after its
  output was drained; always the last event;
- ``("lost", str)``: the transport died (the connection dropped); also the last event.

``close_stdin`` sends EOF (the runner there takes it as "stop the step"); ``terminate``
gives up on the process locally (closes the channel, kills the local process).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable, Sequence
from typing import Callable, Protocol, Union, runtime_checkable

__all__ = [
    "BACKLOG",
    "Event",
    "ExecutableMissing",
    "Process",
    "Terminal",
    "TerminalTransport",
    "Transport",
    "wait_for_room",
]

Event = tuple[str, Union[bytes, int, str, None]]

#: Output events a process may have queued before its transport stops reading more: a consumer
#: that falls behind (a forwarded client that reads slowly) slows the sender down through the
#: pipe or the SSH window, instead of the queue growing without bound.
BACKLOG = 64


def wait_for_room(events: queue.Queue[Event], gone: Callable[[], bool]) -> None:
    """Wait while ``events`` holds :data:`BACKLOG` events, unless ``gone()`` (nobody reads)."""
    while events.qsize() >= BACKLOG and not gone():
        time.sleep(0.002)


class ExecutableMissing(Exception):
    """The first word of the argv does not exist (raised by ``start``, local transport only)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(path)


class Process(Protocol):
    events: queue.Queue[Event]

    def close_stdin(self) -> None: ...

    def terminate(self) -> None: ...


class Transport(Protocol):
    #: How this hop reads in a layer chain: ``local`` or ``ssh root@kpro6:22``.
    label: str
    #: What ping says once it is up: ``connected`` (SSH) or ``this machine`` (local).
    reached: str

    def start(
        self, argv: Sequence[str], stdin: Iterable[bytes], *, wait: float | None = None
    ) -> Process:
        """Start ``argv``; ``wait`` bounds the wait for a free slot (raises TimeoutError)."""
        ...

    def connect(self) -> None: ...

    def close(self) -> None: ...


class Terminal(Protocol):
    """A program started on a terminal (``open_terminal``): one byte stream each way.

    ``fileno`` is readable when ``read`` has output (or the end: ``b""``); ``poll`` is the
    exit status once the program ended (``None`` before, or when unknown, e.g. the connection
    dropped); ``close`` lets go (and stops the program if it still runs).
    """

    def fileno(self) -> int: ...

    def read(self) -> bytes: ...

    def write(self, data: bytes) -> None: ...

    def resize(self, columns: int, rows: int) -> None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float) -> int | None:
        """The exit status, waiting up to ``timeout`` s for it (after ``read`` gave ``b""``)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class TerminalTransport(Protocol):
    """A transport that can start a program on a terminal (a pty there)."""

    def open_terminal(
        self, argv: Sequence[str], *, term: str, columns: int, rows: int
    ) -> Terminal: ...
