"""Run a diagnostic again and again and show it like ``watch``: in place on a terminal.

    from remotekit.diagnostics import system
    from remotekit.watch import fleet_frame, watch

    with remotekit.fleet(targets) as f:
        watch(fleet_frame(f, system.gpu_status, system.render_gpu), interval=2)

Each refresh is one step per host (all hosts in parallel, one frame). On a terminal the
frame is redrawn in place (cursor home, each line cleared to its end, the rest of the screen
cleared); elsewhere (a pipe, a file) each frame is appended as plain lines under a header
line, so a log of a watch reads top to bottom. Ctrl-C ends the loop: :func:`watch` returns
normally, and the fleet stops any step still running there (see :mod:`remotekit.fleet`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from remotekit.fleet import Fleet, FleetInterrupted, HostOutcome
from remotekit.render import isatty, tables_fit, visible

__all__ = [
    "DEFAULT_INTERVAL",
    "FleetFrame",
    "Screen",
    "fleet_frame",
    "parse_interval",
    "render_outcomes",
    "watch",
]

#: Seconds between refreshes when ``--watch`` is given without a number (as ``watch(1)``).
DEFAULT_INTERVAL = 2.0

HOME, CLEAR_LINE, CLEAR_BELOW, CLEAR_SCREEN = "\x1b[H", "\x1b[K", "\x1b[J", "\x1b[2J"


def parse_interval(value: Any) -> float:
    """``--watch`` as given: True (no number) is the default; else a positive number."""
    if value is True or value in ("", None):
        return DEFAULT_INTERVAL
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--watch takes seconds between refreshes, not {value!r}") from None
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"--watch takes a positive number of seconds, not {value!r}")
    return seconds


class Screen:
    """Where frames go: redrawn in place on a terminal, appended as plain lines elsewhere."""

    def __init__(self, out: TextIO | None = None, *, live: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.live = isatty(self.out) if live is None else live
        self.frames = 0

    def show(self, header: str | None, body: str) -> None:
        """One frame: ``header`` (if any), a blank line, then ``body``; its text
        :func:`visible` (a host's escape sequences, a title, a clear, a cursor move, must not
        act on our terminal: on a terminal only the screen's own cursor codes get through)."""
        lines = visible(body.rstrip("\n")).split("\n")
        if header is not None:
            lines = [visible(header), "", *lines]
        if self.live:
            lines = self._fit(lines)
            first = CLEAR_SCREEN if self.frames == 0 else ""
            text = first + HOME + "".join(line + CLEAR_LINE + "\n" for line in lines)
            self.out.write(text + CLEAR_BELOW)
        else:
            gap = "\n" if self.frames and header is not None else ""  # JSON lines: none
            self.out.write(gap + "\n".join(lines) + "\n")
        self.out.flush()
        self.frames += 1

    def _fit(self, lines: list[str]) -> list[str]:
        """``lines`` cut to the terminal: a line that wraps or a frame taller than the window
        would scroll, and the next redraw from the top would leave the old frame behind."""
        try:
            cols, rows = os.get_terminal_size(self.out.fileno())
        except (AttributeError, ValueError, OSError):
            return lines
        if cols <= 0 or rows <= 0:  # a terminal that does not know its size
            return lines
        lines = [line[: max(1, cols - 1)] for line in lines]
        if len(lines) >= rows > 1:
            cut = len(lines) - (rows - 2)
            more = f"... {cut} more lines (a larger window shows them)"
            lines = [*lines[: rows - 2], more[: max(1, cols - 1)]]
        return lines


def watch(
    frame: Callable[[], str],
    *,
    interval: float = DEFAULT_INTERVAL,
    count: int | None = None,
    title: str = "",
    screen: Screen | None = None,
    stop: threading.Event | None = None,
    header: bool = True,
) -> int:
    """Show ``frame()`` every ``interval`` seconds until Ctrl-C (or ``count`` frames, or
    ``stop`` set); the number of frames shown.

    The interval runs from the start of one refresh to the start of the next (a refresh
    slower than the interval is followed by the next at once). Ctrl-C during a refresh or
    during the wait ends the loop quietly: it is how a watch is meant to end. Each frame
    starts with an ``Every Ns: title  time`` line unless ``header=False`` (JSON lines).
    """
    screen = screen or Screen()
    stop = stop or threading.Event()
    shown = 0
    try:
        while count is None or shown < count:
            started = time.monotonic()
            with tables_fit(None):  # the screen cuts each line, as watch(1): no wrapping
                body = frame()  # that would make the frame taller than the window
            now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            head = f"Every {interval:g}s: {title}" if title else f"Every {interval:g}s"
            screen.show(f"{head}    {now}" if header else None, body)
            shown += 1
            if count is not None and shown >= count:
                break
            if stop.wait(max(0.0, started + interval - time.monotonic())):
                break
    except KeyboardInterrupt:  # FleetInterrupted too: the fleet already stopped its steps
        pass
    return shown


class FleetFrame:
    """A ``frame()`` for :func:`watch`: ``fn(target)`` on every host of a fleet, each report
    rendered by ``render`` under an ``== host ==`` line (none for a single host). A host's
    error is one line in its place, so one failing host never hides the others. ``mask``
    (e.g. the targets' ``redact``) is applied to the whole frame; ``last`` holds the latest
    outcomes (for an exit code)."""

    def __init__(
        self,
        f: Fleet,
        fn: Callable[..., Any],
        render: Callable[[Any], str],
        *,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.fleet, self.fn, self.render = f, fn, render
        self.mask = mask or (lambda text: text)
        self.last: list[HostOutcome] = []

    def __call__(self) -> str:
        try:
            self.last = self.fleet.map(self.fn)
        except FleetInterrupted:
            raise KeyboardInterrupt from None  # every step there is already stopped
        return self.mask(render_outcomes(self.last, self.render, many=len(self.fleet.targets) > 1))

    @property
    def exit_code(self) -> int:
        return max((o.exit_code for o in self.last), default=0)


def fleet_frame(
    f: Fleet,
    fn: Callable[..., Any],
    render: Callable[[Any], str],
    *,
    mask: Callable[[str], str] | None = None,
) -> FleetFrame:
    """:class:`FleetFrame` (``fn`` on every host of ``f``, rendered as one frame)."""
    return FleetFrame(f, fn, render, mask=mask)


def render_outcomes(
    outcomes: list[HostOutcome], render: Callable[[Any], str], *, many: bool
) -> str:
    """Host reports as one text: each rendered (or its error), under ``== host ==`` if
    ``many``."""
    sections = []
    for o in outcomes:
        text = render(o.value) if o.error is None else f"error: {o.error}"
        sections.append(f"== {o.host} ==\n{text}" if many else text)
    return "\n\n".join(sections)
