"""One resumable remote stream: a step that streams records from there for as long as it
takes (a run's log under ``logs --follow``, a training log under ``train-log --follow``), run
again when its connection drops or goes silent, and going on where it stopped.

The caller's step says what "where it stopped" means (a byte offset, the last step judged)
and tells the stream each record it hears (:meth:`Resumable.heard`) and each that moved it on
(:meth:`Resumable.moved`). One set of rules, for both followers:

- a dropped connection (:class:`~remotekit.ConnectionLost`, :class:`~remotekit.ConnectError`)
  runs the step again, :data:`RECONNECTS` times in a row at most, pausing a little longer
  each time (:func:`pause_s`); a connection that moved the stream on starts the count again.
  Refused credentials or host keys are raised at once: trying again cannot mend them;
- a connection that said nothing for :data:`SILENT_S` seconds after its first record (the far
  side speaks at least once a second: data, a beat, a status) is taken for dead and closed,
  so its step ends as a lost connection and runs again: a link that died silently (no reset,
  a NAT that forgot it) would otherwise hang until TCP gives up, many minutes later;
- the reader stops the stream by setting ``stop``: a callback then raises :class:`Stopped`
  (the engine stops the step there, as on Ctrl-C), and so does a pause between tries.

::

    stream = Resumable(close=target.close, stop=closed)
    stream.run(lambda: one_connection(on_record=lambda rec: (stream.heard(), ...)))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from remotekit.errors import AuthError, ConnectError, ConnectionLost, HostKeyError, RemotekitError

__all__ = ["RECONNECTS", "SILENT_S", "Resumable", "Stopped", "pause_s"]

#: How often a step is run again after its connection dropped, in a row.
RECONNECTS = 8
#: A stream that heard nothing (no data, no beat, no status) for this long after its first
#: record takes its connection for dead, closes it and connects again.
SILENT_S = 15.0

T = TypeVar("T")


class Stopped(Exception):
    """The reader stopped the stream: raised in a step's callback, so that the engine stops
    the step there, or instead of connecting again."""


def pause_s(misses: int) -> float:
    """The pause before the next try, ``misses`` tries in a row having failed: 0.1 s after a
    connection that moved the stream on (0), then 0.2 s, doubling, at most 3 s."""
    return min(0.1 * 2.0**misses, 3.0)


class Resumable:
    """Runs a step that streams, again after a dropped or silent connection (see the module).

    ``close`` closes the connection a step runs on (None: no watchdog, for a step whose far
    side does not speak each second); ``stop`` is the reader's (None: never stopped);
    ``on_again(error, misses)`` is told before each new try. One :meth:`run` at a time."""

    def __init__(
        self,
        close: Callable[[], None] | None = None,
        *,
        stop: threading.Event | None = None,
        on_again: Callable[[RemotekitError, int], None] | None = None,
    ) -> None:
        self.close = close
        self.stop = stop if stop is not None else threading.Event()
        self.on_again = on_again
        self._heard: float | None = None  # when the current step's last record came
        self._moved = False  # the current step moved the stream on

    def heard(self) -> None:
        """A record came (call it from the step's callback): the connection lives. Raises
        :class:`Stopped` once the reader stopped the stream."""
        if self.stop.is_set():
            raise Stopped
        self._heard = time.monotonic()

    def moved(self) -> None:
        """The record moved the stream on: a later drop starts the count of tries again."""
        self._moved = True

    def run(self, step: Callable[[], T]) -> T:
        """``step()``'s value, run again after each dropped or silent connection until it
        ends by itself; the last error once :data:`RECONNECTS` tries in a row failed."""
        misses = 0
        while True:
            try:
                return self._watched(step)
            except (ConnectionLost, ConnectError) as exc:
                if isinstance(exc, (AuthError, HostKeyError)):
                    raise
                misses = 0 if self._moved else misses + 1
                if misses > RECONNECTS:
                    raise
                if self.stop.wait(pause_s(misses)):
                    raise Stopped from None
                if self.on_again is not None:
                    self.on_again(exc, misses)

    def _watched(self, step: Callable[[], T]) -> T:
        """One try, watched for silence (when there is a ``close``)."""
        self._heard, self._moved = None, False
        done = threading.Event()
        if self.close is not None:
            threading.Thread(target=self._watch, args=(done,), name="silence", daemon=True).start()
        try:
            return step()
        finally:
            done.set()

    def _watch(self, done: threading.Event) -> None:
        """Close the connection of a step gone silent (:data:`SILENT_S`); armed by its first
        record (connecting has its own timeouts)."""
        assert self.close is not None
        while not done.wait(0.5):
            heard = self._heard
            if heard is not None and time.monotonic() - heard > SILENT_S:
                self.close()  # the step ends as ConnectionLost: run again
                return
