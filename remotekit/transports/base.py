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

A process that carries many messages each way (the resident agent's channel,
:mod:`remotekit.agent`) is started with ``stdin=None`` and a ``sink``: its caller then writes
its stdin itself (:meth:`Written.write`, from any thread, each write whole: no queue and no
feeding thread between), and the transport's one reader thread hands each event to ``sink``
as it comes (no queue, no thread between the channel and what takes its output apart):
a message crosses one thread hand-off each way, not three.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable, Literal, Protocol, Union, overload, runtime_checkable

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
    "Sink",
    "Terminal",
    "TerminalTransport",
    "Transport",
    "Writer",
    "Written",
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
#: What takes a process's events as they come, in the transport's reader thread, one at a time
#: (:meth:`Transport.start`); it must not wait on the process's own stdin.
Sink = Callable[[Event], None]

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


#: How long ``close_stdin`` of a process its caller writes waits for what is still to go
#: (:meth:`Writer.close`) before the EOF goes anyway.
FLUSH_S = 3.0


class Writer:
    """The stdin of a process that its callers write themselves (``stdin=None``).

    Each write goes out whole and in order. What the channel takes at once (``now``: the bytes
    it took without waiting; -1: it is gone) goes from the calling thread; the rest, and what
    comes behind it, from a thread of this writer's own (``wait``: all of it, waiting for
    room; False: it is gone), so no caller, the reader thread included, ever waits on the far
    side: a step's timeout holds on a link gone silent, and a reader that writes (a credit)
    never waits for a far side that waits for it. A write that an exception (a Ctrl-C) cut
    part-way leaves a stream that can no longer be read as frames: ``cut`` closes it, and the
    writer takes nothing more.
    """

    def __init__(
        self,
        now: Callable[[memoryview], int],
        wait: Callable[[memoryview], bool],
        cut: Callable[[], None],
    ) -> None:
        self._now, self._wait, self._cut = now, wait, cut
        self._lock = threading.Condition()
        self._behind: deque[memoryview] = deque()
        self._busy = False  # the thread holds bytes that go before any new write
        self._thread: threading.Thread | None = None
        self._gone = False

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        with self._lock:
            if self._gone:
                return
            if not self._busy:
                try:
                    took = self._now(view)
                except BaseException:
                    self._gone = True
                    self._cut()
                    raise
                if took < 0:
                    self._gone = True
                    return
                if took == len(view):
                    return
                view = view[took:]
                self._busy = True
            self._behind.append(view)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._behind and not self._gone:
                    self._busy = False
                    self._lock.notify_all()
                    self._lock.wait()
                if self._gone:
                    return
                view = self._behind.popleft()
            if not self._wait(view):
                with self._lock:
                    self._gone, self._busy = True, False
                    self._behind.clear()
                    self._lock.notify_all()
                return

    def close(self, timeout: float = FLUSH_S) -> None:
        """Take no more writes, once what is still to go went (or ``timeout`` passed)."""
        with self._lock:
            self._lock.wait_for(lambda: not self._busy or self._gone, timeout)
            self._gone = True
            self._lock.notify_all()


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


class Written(Process, Protocol):
    """A process started with ``stdin=None``: its callers write its stdin themselves."""

    def write(self, data: bytes | memoryview) -> None:
        """``data`` to the process's stdin, whole (a write from another thread goes before or
        after it, never inside it), never waiting for the far side (:class:`Writer`). A
        channel that is gone takes it silently: its end comes as an event."""
        ...


class Channel:
    """The part every transport's process shares: its event queue and :meth:`cancel`, and
    :meth:`emit`: an event to the sink it was started with, or else onto the queue."""

    def __init__(self, sink: Sink | None = None) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self._sink = sink
        self._sinking = threading.Lock()  # a transport with two readers (local: its pipes)

    def emit(self, event: Event) -> None:
        """``event`` to the sink (one at a time), or onto :attr:`events`."""
        if self._sink is None:
            self.events.put(event)
        else:
            with self._sinking:
                self._sink(event)

    def cancel(self) -> None:
        """Wake the consumer of :attr:`events` with :class:`Cancelled` (from any thread):
        it stops the process the way it stops one that timed out."""
        self.events.put(Cancelled())


class Transport(Protocol):
    #: How this hop reads in a layer chain: ``local`` or ``ssh root@kpro6:22``.
    label: str
    #: What ping says once it is up: ``connected`` (SSH) or ``this machine`` (local).
    reached: str

    @overload
    def start(
        self,
        argv: Sequence[str],
        stdin: None,
        *,
        wait: float | None = None,
        sink: Sink | None = None,
    ) -> Written: ...

    @overload
    def start(
        self,
        argv: Sequence[str],
        stdin: Iterable[bytes],
        *,
        wait: float | None = None,
        sink: Sink | None = None,
    ) -> Process: ...

    def start(
        self,
        argv: Sequence[str],
        stdin: Iterable[bytes] | None,
        *,
        wait: float | None = None,
        sink: Sink | None = None,
    ) -> Process:
        """Start ``argv``; ``wait`` bounds the wait for a free slot (raises TimeoutError).
        ``stdin`` None: its callers write it (:class:`Written`); ``sink``: the events go to
        it, in the reader's thread, not onto the queue."""
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
