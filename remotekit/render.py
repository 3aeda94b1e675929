"""Rendering for people and for machines: plain tables, host-prefixed lines, JSON."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from typing import Any, Callable, TextIO

from remotekit.result import clip, fit_lines, table, tables_fit, visible

__all__ = [
    "Console",
    "clip",
    "fit_lines",
    "human_bytes",
    "mask_strings",
    "table",
    "tables_fit",
    "terminal_width",
    "to_json",
    "to_jsonable",
    "visible",
]


def human_bytes(n: int | None) -> str | None:
    """``1.5 GiB``-style sizes for tables; ``None`` stays ``None`` (printed as ``-``)."""
    if n is None:
        return None
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested), tuples and mappings as plain JSON-ready values.

    An object with a ``__json__()`` method is asked for its own plain form first.
    """
    if hasattr(obj, "__json__") and not isinstance(obj, type):
        return to_jsonable(obj.__json__())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)  # "nan", "inf", "-inf": JSON has no literal for them
    return obj


def mask_strings(obj: Any, mask: Callable[[str], str]) -> Any:
    """A JSON-ready value (from :func:`to_jsonable`) with ``mask`` applied to every string."""
    if isinstance(obj, str):
        return mask(obj)
    if isinstance(obj, dict):
        return {mask(k): mask_strings(v, mask) for k, v in obj.items()}
    if isinstance(obj, list):
        return [mask_strings(v, mask) for v in obj]
    return obj


def to_json(obj: Any, indent: int | None = None) -> str:
    """``obj`` as JSON (:func:`to_jsonable`), ASCII only: every control character in it is
    escaped (``\\u001b``), DEL too (JSON allows it raw), so JSON on a terminal acts on nothing."""
    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, default=str)
    return text.replace("\x7f", "\\u007f")  # only ever inside a string: still the same JSON


_COLORS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92", "94")


class Console:
    """Whole lines from many hosts, each prefixed with its host, plus a progress line.

    ``mask`` (e.g. :meth:`Target.redact`) is applied to every text of ours: messages,
    tables, errors; then :func:`visible` (a far side's text in them shows its control
    characters as escapes). A host's own output (:meth:`output`) passes through as the step
    printed it, as ssh would show it (masked if ``mask_output``).

    Lines never interleave mid-line (one lock, one write per line); text holding newlines
    becomes several lines, each with the prefix. Colour only on a terminal (decided for stdout
    and stderr apart; not with NO_COLOR or TERM=dumb); the progress line only on a terminal
    stderr, and never in quiet (``--json``) mode, where nothing but the final JSON goes to
    stdout.
    """

    def __init__(
        self,
        hosts: Sequence[str] = (),
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        quiet: bool = False,
        color: bool | None = None,
        prefix: bool = True,
        mask: Callable[[str], str] | None = None,
        mask_output: bool = False,
    ):
        self.mask: Callable[[str], str] = mask or (lambda text: text)
        self.mask_output = mask_output
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        #: Colour on stdout; stderr decides for itself (``2>log`` must not get escapes).
        self.color = _wants_color(self.out) if color is None else color
        self._color_err = _wants_color(self.err) if color is None else color
        self.width = max((len(h) for h in hosts), default=0)
        self.prefix = prefix
        self._colors = {h: _COLORS[i % len(_COLORS)] for i, h in enumerate(hosts)}
        self._lock = threading.Lock()
        self._status = ""
        self._live = not quiet and isatty(self.err)

    def tag(self, host: str, stream: str = "stdout") -> str:
        """``host`` padded to the widest name, coloured when ``stream`` goes to a terminal."""
        name = host.ljust(self.width)
        colored = self._color_err if stream == "stderr" else self.color
        if colored:
            return f"\x1b[{self._colors.get(host, '0')}m{name}\x1b[0m"
        return name

    def line(self, host: str, stream: str, text: str) -> None:
        """One line of a host's output (stderr lines go to our stderr).

        Text with newlines in it is several lines: each gets the prefix, all in one write.
        The text is masked and made visible (it is ours: a message, an error, a chain).
        """
        self._line(host, stream, visible(self.mask(text)))

    def _line(self, host: str, stream: str, text: str) -> None:
        if self.quiet:
            return
        dest = self.err if stream == "stderr" else self.out
        lines = text.split("\n")
        if self.prefix:
            tag = self.tag(host, stream)
            lines = [f"{tag} | {piece}" for piece in lines]
        msg = "\n".join(lines) + "\n"
        with self._lock:
            self._clear()
            dest.write(msg)
            dest.flush()
            self._draw()

    def output(self, host: str) -> Callable[[str, str], None]:
        """An ``on_output`` callback that prints ``host``'s lines (masked if ``mask_output``)."""
        if self.mask_output:
            return lambda stream, text: self._line(host, stream, self.mask(text))
        return lambda stream, text: self._line(host, stream, text)

    def say(self, text: str, *, stream: str = "stdout") -> None:
        """A message of ours (not a host's), unless quiet."""
        if self.quiet:
            return
        text = visible(self.mask(text))
        dest = self.err if stream == "stderr" else self.out
        with self._lock:
            self._clear()
            dest.write(text + ("\n" if not text.endswith("\n") else ""))
            dest.flush()
            self._draw()

    @property
    def live(self) -> bool:
        """A person watches: stderr is a terminal and this is not ``--json``."""
        return self._live

    def progress(self, text: str) -> None:
        """Replace the progress line (terminal only; made visible, a newline included)."""
        if not self._live:
            return
        with self._lock:
            self._clear()
            self._status = visible(text, keep="")
            self._draw()

    def done(self) -> None:
        with self._lock:
            self._clear()
            self._status = ""

    def _clear(self) -> None:
        if self._live and self._status:
            self.err.write("\r\x1b[K")
            self.err.flush()

    def _draw(self) -> None:
        if self._live and self._status:
            self.err.write(self._status)
            self.err.flush()


def _wants_color(stream: TextIO) -> bool:
    """A terminal that shows colour (https://no-color.org: any non-empty NO_COLOR says no)."""
    return (
        isatty(stream) and not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"
    )


def terminal_width(stream: TextIO | None = None) -> int | None:
    """How wide the CLI's tables may be on ``stream`` (default stdout): $COLUMNS where set,
    else the terminal's width; None (every cell whole) where ``stream`` is no terminal: a
    pipe or a file gets everything, as kubectl's and ls's output does for scripts."""
    if not isatty(sys.stdout if stream is None else stream):
        return None
    return shutil.get_terminal_size(fallback=(0, 0)).columns or None


def isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
