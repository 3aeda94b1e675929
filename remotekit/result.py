"""Values a step returns: :class:`Result`, :class:`Script` (the file a step ships), and
:class:`Shown`, how results and reports print themselves; :func:`visible`, what makes any text
from the far side safe to show on a terminal."""

from __future__ import annotations

import base64
import functools
import html
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

__all__ = ["Detached", "Result", "Script", "Shown", "clip", "table", "visible"]

#: What a terminal acts on instead of showing: C0 controls (ESC, BEL, CR, BS ...), DEL and
#: C1 controls (U+0080-U+009F: U+009B is a CSI of its own), the bidi overrides and isolates
#: that reorder what is shown ("Trojan Source", CVE-2021-42574), and lone surrogates (a far
#: side's undecodable bytes, which would also make ``print`` raise).
_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _shown_as(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte the far side could not decode (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def visible(text: str, keep: str = "\t\n") -> str:
    """``text`` with every character a terminal would act on shown as its escape instead
    (ESC as ``\\x1b``, U+009B as ``\\x9b``, U+202E as ``\\u202e``); the rest, non-ASCII
    letters included, as it is. ``keep``: the controls left as they are (tab and newline for
    lines of text; none for a table's cell). Idempotent: what it returns has nothing left to
    escape.

    The one sanitiser for what remotekit itself shows (tables, its console lines, status and
    progress lines, ``Shown.render``, errors' ``str``): text from the far side (a process's
    argv, a file name, a tensor key, a metric name) can hold escape sequences that set the
    clipboard (OSC 52), the window title (OSC 0) or move the cursor over what is shown. A
    command's own output stream is not passed through it: it reaches the terminal as ssh
    would leave it."""
    if _UNSEEN.search(text) is None:
        return text
    return _UNSEEN.sub(lambda m: m.group() if m.group() in keep else _shown_as(m), text)


def clip(text: str, width: int, mark: str = "") -> str:
    """``text`` made :func:`visible` (no control kept), then cut to ``width`` characters,
    ``mark`` ending a cut one: a cut never leaves half an escape sequence to the terminal."""
    text = visible(text, keep="")
    return text if len(text) <= width else text[: width - len(mark)] + mark


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A left-aligned text table; ``None`` cells print as ``-`` (the CLI's tables, and the
    ``str()`` of the results that print as one). Every cell is :func:`visible`, a tab or a
    newline in it included (it would break the columns)."""
    cells = [[("-" if c is None else visible(str(c), keep="")) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


class Shown:
    """A result or report that explains itself wherever it is shown.

    ``str()`` is :meth:`render`, what the CLI prints for it (one renderer for both faces);
    ``repr()`` is one line (the attributes named in ``repr_keys`` that are set, e.g. host and
    exit code, then how many findings and errors), not a dump of every field; in Jupyter it
    displays as HTML: its findings and errors first, then the rendered text, then its
    :meth:`pictures`. A dataclass using it is declared with ``repr=False`` so this repr stands.
    """

    #: The attributes ``repr()`` names, in this order, where they are set (not None, not "").
    repr_keys: ClassVar[tuple[str, ...]] = ("host", "exit_code")
    #: True where :meth:`render` is a command's own output (a :class:`Result`), shown as it
    #: came, as ssh shows it; every other ``render`` is made :func:`visible`.
    raw_render: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``render`` is wrapped in :func:`visible` (the one place every
        report's text passes through: its ``str()``, the CLI's sections, Jupyter's HTML)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("render")
        if own is not None and not cls.raw_render:
            cls.render = _made_visible(own)  # type: ignore[method-assign]

    def render(self) -> str:
        """The text the CLI prints for it (also its ``str()``)."""
        raise NotImplementedError

    def pictures(self) -> list[tuple[str, bytes]]:
        """The pictures shown below the text in Jupyter, each ``(title, PNG bytes)``: what
        the CLI's ``--plot`` draws for it; none by default."""
        return []

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        parts = [type(self).__name__]
        for key in self.repr_keys:
            value = getattr(self, key, None)
            if value is not None and value != "":
                parts.append(f"{key}={value!r}")
        for name in ("findings", "errors"):
            items = getattr(self, name, None)
            if items:
                parts.append(f"{len(items)} {name}")
        return f"<{' '.join(parts)}>"

    def _repr_html_(self) -> str:
        items = [
            f'<li class="{name}"><b>{label}</b> {html.escape(str(line))}</li>'
            for name, label in (("errors", "error:"), ("findings", "finding:"))
            for line in (getattr(self, name, None) or ())
        ]
        head = f"<ul>{''.join(items)}</ul>" if items else ""
        text = html.escape(self.render())
        images = "".join(
            f'<img alt="{html.escape(title)}" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode("ascii")}"/>'
            for title, png in self.pictures()
        )
        return f'<div class="remotekit">{head}<pre>{text}</pre>{images}</div>'


def _made_visible(render: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(render)
    def shown(self: Shown, *args: Any, **kwargs: Any) -> str:
        return visible(render(self, *args, **kwargs))

    return shown


@dataclass(frozen=True, repr=False)
class Detached(Shown):
    """A command started with ``detach=True``: it runs on there in its own session.

    It is a **run** (:mod:`remotekit.runs`; its handle keeps this as ``run.result.detached``):
    ``id`` names it on its host (``target.run_handle(id)``, ``remotekit logs ID``); ``pid`` is
    the command's, ``log`` its output (stdout and stderr interleaved) in the run's record;
    ``dir`` is the step's private folder (0700: the shipped files), removed with the run's
    record (``rm``).
    """

    pid: int
    log: str
    dir: str
    id: str = ""

    repr_keys = ("id", "pid")

    def render(self) -> str:
        """``detached: run ID, pid N, log PATH``, as ``run --detach`` prints it: the id first
        (``remotekit logs ID --follow`` takes it)."""
        return f"detached: run {self.id}, pid {self.pid}, log {self.log}"


@dataclass(frozen=True, repr=False)
class Result(Shown):
    """What a finished (or stopped) step produced.

    ``stdout`` / ``stderr`` hold the captured text, at most ``capture_limit`` bytes of each
    (the *last* bytes are kept; ``stdout_dropped`` / ``stderr_dropped`` count what was cut).
    ``exit_code`` is the command's exit status, ``128 + N`` when signal N ended it, or
    ``None`` when the step was stopped before it exited (timeout, interrupt, lost connection).

    ``stopped`` names the processes (``pid N: command``) the runner stopped because they were
    still running when the step's main process exited (or at its timeout): only processes
    that are gone afterwards. ``still_running`` names any that survived even SIGKILL.
    ``detached`` is set for a ``detach=True`` step: the pid and log of what it started.
    """

    host: str
    step: str
    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    chain: str = ""
    stopped: tuple[str, ...] = ()
    still_running: tuple[str, ...] = ()
    detached: Detached | None = None

    raw_render = True  # what the step printed, as it printed it

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def display_argv(self) -> str:
        return shlex.join(self.argv)

    def render(self) -> str:
        """What the step printed (stdout, then stderr), then its exit if not 0; a cut
        capture says how much was dropped."""
        parts = []
        for name, text, dropped in (
            ("stdout", self.stdout, self.stdout_dropped),
            ("stderr", self.stderr, self.stderr_dropped),
        ):
            if dropped:
                parts.append(f"[{name}: first {dropped} bytes dropped]")
            if text:
                parts.append(text.rstrip("\n"))
        if not self.ok:
            stopped = "stopped before it exited" if self.exit_code is None else ""
            parts.append(f"[{self.step}: {stopped or f'exit {self.exit_code}'}]")
        return "\n".join(parts)


@dataclass(frozen=True, repr=False)
class Script(Shown):
    """A Python program to ship and run there, as bytes, with optional extra files beside it.

    ``name`` is the file name it gets in the private temp dir there (tracebacks show it);
    ``files`` maps further relative names to bytes, written beside the script (importable).
    Its ``str()`` is a header line (name, size, the files beside it) and the source; its
    ``repr()`` names it and its size, not its bytes.
    """

    source: bytes
    name: str = "script.py"
    files: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.source, str):
            object.__setattr__(self, "source", self.source.encode("utf-8"))
        for rel, data in self.files.items():
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"files[{rel!r}] must be bytes, not {type(data).__name__}"
                    + (" (encode it, e.g. text.encode())" if isinstance(data, str) else "")
                )
        if os.path.normpath(self.name) in {os.path.normpath(r) for r in self.files}:
            raise ValueError(
                f"files has an entry named {self.name!r}, the script's own name: it would "
                f"replace the script; rename one of them"
            )
        for rel in [self.name, *self.files]:
            parts = Path(rel).parts
            if not parts or Path(rel).is_absolute() or ".." in parts:
                raise ValueError(f"script file name must be relative, without '..': {rel!r}")

    def __repr__(self) -> str:
        beside = f" +{len(self.files)} file(s)" if self.files else ""
        return f"<Script name={self.name!r} {len(self.source)} bytes{beside}>"

    def render(self) -> str:
        """``# NAME (N bytes; beside it: F (N bytes), ...)``, then the source as text."""
        beside = ", ".join(f"{rel} ({len(data)} bytes)" for rel, data in self.files.items())
        head = f"# {self.name} ({len(self.source)} bytes" + (
            f"; beside it: {beside})" if beside else ")"
        )
        return f"{head}\n{self.source.decode('utf-8', 'replace').rstrip()}"

    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str], files: Mapping[str, bytes] | None = None
    ) -> Script:
        p = Path(path)
        return cls(p.read_bytes(), name=p.name, files=dict(files or {}))
