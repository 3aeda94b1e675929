"""Progress of long transfers and scans: bytes, rate and ETA on one line, redrawn in place.

    from remotekit.progress import Progress

    with Progress("put") as show:             # draws on stderr, only if it is a terminal
        t.put("big.bin", "/data/", on_progress=show)

A :class:`Progress` is an ``on_progress(done, total)`` callback (the signature of
``Target.put``/``get`` and of ``sync``); :meth:`Progress.part` gives one callback per host
whose bytes add up on the same line. It draws at most ``1 / interval`` times a second (the
last state is always drawn when a part completes), through ``draw``: by default a
:class:`~remotekit.render.Console` progress line, which shows only on a terminal stderr and
never in quiet (``--json``) mode. Nothing here prints anywhere else.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from remotekit.render import Console, human_bytes, visible

__all__ = ["Meter", "Progress", "format_eta", "format_rate"]

#: The rate is measured over this many seconds of recent samples (smooth, yet current).
RATE_WINDOW_S = 3.0


def format_rate(rate: float | None) -> str:
    """``12.3 MiB/s``; ``-`` while unknown."""
    if rate is None:
        return "-"
    return f"{human_bytes(int(rate))}/s"


def format_eta(seconds: float | None) -> str:
    """``ETA 1:02:03`` / ``ETA 2:05``; ``ETA -`` while unknown."""
    if seconds is None:
        return "ETA -"
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


class Meter:
    """A transfer rate from ``(time, bytes done)`` samples over the last ``window`` seconds."""

    def __init__(self, window: float = RATE_WINDOW_S) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, done: int) -> None:
        if self._samples and done < self._samples[-1][1]:
            self._samples.clear()  # restarted (a retry): the old samples say nothing
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()

    @property
    def rate(self) -> float | None:
        """Bytes a second, or None before two samples a measurable time apart."""
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def eta(self, done: int, total: int) -> float | None:
        rate = self.rate
        if not rate or rate <= 0 or total <= 0:
            return None
        return max(0, total - done) / rate


def _fit(line: str) -> str:
    """``line`` made :func:`visible`, then cut to the width of a terminal stderr: a wrapped
    line cannot be redrawn in place (the carriage return goes back to the start of its last
    row only)."""
    line = visible(line, keep="")
    try:
        cols = os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return line
    return line[: cols - 1] if cols > 1 else line


class Progress:
    """An ``on_progress(done, total)`` callback that shows bytes, rate and ETA on one line.

    ``label`` starts the line; ``draw`` receives each line (default: a terminal-only
    :meth:`Console.progress` on stderr); ``interval`` is the least time between two
    draws. :meth:`close` (or leaving the ``with``) clears the line. Thread-safe: hosts
    transferring in parallel call their :meth:`part` callbacks from their own threads.
    """

    def __init__(
        self,
        label: str = "",
        *,
        draw: Callable[[str], None] | None = None,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self._console: Console | None = None
        if draw is None:
            self._console = Console()
            draw = self._console.progress
        self._draw = draw
        self.interval = interval
        self.clock = clock
        self.meter = Meter()
        self._parts: dict[str, tuple[int, int]] = {}
        self._notes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._last_draw: float | None = None

    def __call__(self, done: int, total: int) -> None:
        self.update("", done, total)

    def part(self, key: str) -> Callable[[int, int], None]:
        """A callback for one of several transfers (e.g. one per host) shown on this line."""
        return lambda done, total: self.update(key, done, total)

    def update(self, key: str, done: int, total: int, note: str = "") -> None:
        """Part ``key`` has ``done`` of ``total`` bytes; ``note`` replaces its bytes text."""
        with self._lock:
            self._parts[key] = (done, total)
            if note:
                self._notes[key] = note
            done_all = sum(d for d, _ in self._parts.values())
            now = self.clock()
            self.meter.add(now, done_all)
            finished = total > 0 and done >= total
            if (
                self._last_draw is not None
                and now - self._last_draw < self.interval
                and not finished
            ):
                return
            self._last_draw = now
            # Drawn under the lock, so that a slower thread never draws an older state last.
            self._draw(_fit(self.line()))

    def line(self) -> str:
        """``label  1.2 GiB/4.0 GiB  30%  110.0 MiB/s  ETA 0:26`` (several parts: summed,
        with a ``2/3 done`` count)."""
        done = sum(d for d, _ in self._parts.values())
        total = sum(t for _, t in self._parts.values())
        pieces = [self.label] if self.label else []
        if len(self._parts) > 1:
            finished = sum(1 for d, t in self._parts.values() if t and d >= t)
            pieces.append(f"{finished}/{len(self._parts)} done")
        notes = [n for n in self._notes.values() if n]
        if len(self._parts) == 1 and notes:
            pieces.append(notes[0])
        else:
            pct = f"  {100 * done // total}%" if total else ""
            pieces.append(f"{human_bytes(done)}/{human_bytes(total)}{pct}")
        pieces += [format_rate(self.meter.rate), format_eta(self.meter.eta(done, total))]
        return "  ".join(pieces)

    def close(self) -> None:
        if self._console is not None:
            self._console.done()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
