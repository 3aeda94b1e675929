"""The transport contract.

Example::

    proc = transport.start(["python3", "-c", "print(1)"], stdin=[b""])
    while (event := next_event(proc.events, until=None)) is not None:
        if isinstance(event, Exit):
            break

``start`` returns at once; the process's output arrives as typed events, in order per stream:

- :class:`Output` (``stream`` ``"stdout"`` or ``"stderr"``, ``data``): output as it is produced;
- :class:`Exit` (``code``: the status, ``None`` if unknown): the process ended, after its
  output was drained; always the last event;
- :class:`Lost` (``reason``): the transport died (the connection dropped); also the last event;
- :class:`Cancelled`: the consumer's own :meth:`Process.cancel` (from any thread) woke it; the
  process still runs until the consumer stops it.

``close_stdin`` sends EOF (the runner there takes it as "stop the step"); ``terminate``
gives up on the process locally (closes the channel, kills the local process). A transport's
process is a :class:`Channel`: the queue and ``cancel`` are written once, there.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable, Literal, Protocol, Union, runtime_checkable

__all__ = [
    "BACKLOG",
    "SLICE_S",
    "Cancelled",
    "Channel",
    "Event",
    "ExecutableMissing",
    "Exit",
    "Lost",
    "Output",
    "Process",
    "Terminal",
    "TerminalTransport",
    "Transport",
    "next_event",
    "wait_for_room",
]


@dataclass(frozen=True)
class Output:
    """Bytes the process wrote on one of its streams."""

    stream: Literal["stdout", "stderr"]
    data: bytes


@dataclass(frozen=True)
class Exit:
    """The process ended (``code``: its status, ``None`` if unknown); the last event."""

    code: int | None


@dataclass(frozen=True)
class Lost:
    """The transport died under the process (``reason`` says how); the last event.
    ``violation``: it was closed here because what came on it broke the resident agent's
    frame protocol (:mod:`remotekit.agent`); ``reason`` says how."""

    reason: str
    violation: bool = False


@dataclass(frozen=True)
class Cancelled:
    """The consumer called :meth:`Process.cancel`: stop waiting (the process still runs)."""


Event = Union[Output, Exit, Lost, Cancelled]

#: The longest the main thread blocks in one wait (for an event, a close): the kernel may hand
#: a Ctrl-C to another thread of this process, which only sets Python's flag, and a longer
#: wait in the main thread would not see it until it returned (a step's: its timeout).
SLICE_S = 0.25


def next_event(events: queue.Queue[Event], until: float | None) -> Event | None:
    """The next event of ``events``; None once ``until`` (a ``time.monotonic()``; None: never)
    passes. It waits :data:`SLICE_S` at a time, so a Ctrl-C is seen while it waits."""
    while True:
        left = SLICE_S if until is None else min(SLICE_S, until - time.monotonic())
        if left <= 0:
            return None
        try:
            return events.get(timeout=left)
        except queue.Empty:
            pass


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

    def cancel(self) -> None:
        """Wake the consumer of :attr:`events` with :class:`Cancelled` (from any thread)."""
        ...


class Channel:
    """The part every transport's process shares: its event queue and :meth:`cancel`."""

    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()

    def cancel(self) -> None:
        """Wake the consumer of :attr:`events` with :class:`Cancelled` (from any thread):
        it stops the process the way it stops one that timed out."""
        self.events.put(Cancelled())


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
