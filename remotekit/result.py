"""Values a step returns: :class:`Result`, :class:`Script` (the file a step ships), and
:class:`Shown`, how results and reports print themselves; :func:`visible`, what makes any text
from the far side safe to show on a terminal."""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

__all__ = [
    "Detached",
    "Result",
    "Script",
    "Shown",
    "clip",
    "fit_lines",
    "table",
    "tables_fit",
    "visible",
]

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


#: The width tables fit in where a caller names none (:func:`tables_fit`): None, every cell
#: whole. A process-wide value, not a ContextVar: the fleet's worker threads render too.
_FIT: list[int | None] = [None]


@contextlib.contextmanager
def tables_fit(width: int | None) -> Iterator[None]:
    """Within it, every :func:`table` that names no width fits in ``width`` columns (None:
    cells whole). The CLI says how wide the terminal is (:func:`remotekit.render.
    terminal_width`); the API sets none, so a notebook's ``str(report)`` keeps everything."""
    before, _FIT[0] = _FIT[0], width
    try:
        yield
    finally:
        _FIT[0] = before


def fit_width() -> int | None:
    """The width text is fitted to now (within :func:`tables_fit`), or None: kept whole."""
    return _FIT[0]


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    width: int | None = None,
    *,
    optional: Sequence[str] = (),
    indent: str = "",
) -> str:
    """A left-aligned text table; ``None`` cells print as ``-`` (the CLI's tables, and the
    ``str()`` of the results that print as one). Every cell and header is :func:`visible`, a
    tab or a newline in it included (it would break the columns).

    ``width`` (default: the one :func:`tables_fit` set, else none): a table wider than it is
    fitted as kubectl's and rich's are, what loses nothing first. A header wraps at its
    spaces. Then the ``optional`` columns (headers; the first named goes first) are left out
    one at a time, as kubectl shows its default columns and ``-o wide`` the rest; a line
    under the table names them. Then a long column with spaces (a reason, a finding) wraps
    within its cell, and last one without (a path, a name) is shortened in the middle
    (``/work/.../step_400/model.pt``); a column of at most :data:`_SHORT_COLUMN` never
    gives. A table that cannot fit even so keeps its cells whole (a cut the terminal wraps
    anyway would lose text for nothing). Cells are escaped before they are cut, and a cut
    never splits an escape (``\\x1b``). ``indent`` starts every line (and counts in the
    width)."""
    heads = [visible(str(h), keep="") for h in headers]
    cells = [[("-" if c is None else visible(str(c), keep="")) for c in row] for row in rows]
    fit = _FIT[0] if width is None else width
    fit = None if fit is None else fit - len(indent)
    cols = list(range(len(heads)))
    widths = [_natural(heads, cells, i) for i in cols]
    if fit is not None and _span(widths) > fit:
        cols, widths = _layout(heads, cells, fit, [visible(h, keep="") for h in optional])
    prose = [any(_BREAKS.search(row[i]) for row in cells if i < len(row)) for i in cols]
    widths = [  # as wide as what a wrap or a cut left in it, no wider
        max(
            [len(x) for x in _cell_lines(heads[i], w, True)]
            + [len(x) for row in cells if i < len(row) for x in _cell_lines(row[i], w, p)]
        )
        for i, w, p in zip(cols, widths, prose)
    ]
    lines = _row_lines([heads[i] for i in cols], widths, [True] * len(cols))
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines += _row_lines([row[i] for i in cols if i < len(row)], widths, prose)
    left_out = [h for i, h in enumerate(heads) if i not in cols]
    if left_out and fit is not None:
        lines += _wrapped(f"(--wide adds {', '.join(left_out)})", fit)
    return "\n".join(indent + line for line in lines)


def fit_lines(lines: Iterable[str], width: int | None = None) -> list[str]:
    """Lines of prose under a table (findings, reasons, errors), fitted as its cells are:
    where a width is set (``width``, else :func:`tables_fit`'s) each is made :func:`visible`
    and one longer than the width wraps at spaces, its next lines indented two more than it
    (an escape never split); where none is, ``lines`` as they are."""
    fit = _FIT[0] if width is None else width
    if fit is None:
        return list(lines)
    out = []
    for line in lines:
        line = visible(line, keep="")
        body = line.lstrip(" ")
        hang = " " * (len(line) - len(body) + 2)
        if len(line) <= fit or fit - len(hang) < _SHORT_COLUMN:
            out.append(line)
            continue
        first, *rest = _wrapped(body, fit - len(hang))
        out += [hang[:-2] + first, *(hang + piece for piece in rest)]
    return out


def _row_lines(cells: Sequence[str], widths: Sequence[int], prose: Sequence[bool]) -> list[str]:
    """One row of the table: a line, or several where a cell wraps."""
    parts = [_cell_lines(c, w, p) for c, w, p in zip(cells, widths, prose)]
    lines = []
    for k in range(max(len(p) for p in parts) if parts else 1):
        line = [(p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths)]
        lines.append("  ".join(line).rstrip())
    return lines


#: A column narrower than this is never shortened (statuses, sizes, times, counts).
_SHORT_COLUMN = 16
#: One unit of escaped text: a shown escape (``\\x1b``, ``\\u202e``, ``\\n``) or a character.
_UNIT = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\[tnr]|.", re.DOTALL)
_ELIDED = "..."
#: Where a cell's text may wrap (a space, or after a comma), and its parts between them.
_BREAKS = re.compile(r" |,.")
_PARTS = re.compile(r"[^ ,]*,|[^ ,]+")


def _natural(heads: Sequence[str], cells: list[list[str]], i: int) -> int:
    return max([len(heads[i]), *(len(row[i]) for row in cells if i < len(row))])


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def _layout(
    heads: Sequence[str], cells: list[list[str]], fit: int, optional: Sequence[str]
) -> tuple[list[int], list[int]]:
    """The columns shown and their widths in ``fit``: every column, its headers wrapped;
    else without the optional ones, one at a time; else with cells wrapped, then long names
    cut; else (it cannot fit) every cell of the columns left whole."""
    cols = list(range(len(heads)))
    drop = [heads.index(h) for h in optional if h in heads]
    while True:
        widths = _narrowed(heads, cells, cols, fit, _HEADERS)
        if widths is not None:
            return cols, widths
        if not drop:
            break
        cols.remove(drop.pop(0))
    widths = _narrowed(heads, cells, cols, fit, _CUT)
    return cols, widths or [_natural(heads, cells, i) for i in cols]


#: How far :func:`_narrowed` goes: headers wrap; cells with spaces wrap too; names are cut.
_HEADERS, _WRAP, _CUT = 0, 1, 2


def _narrowed(
    heads: Sequence[str], cells: list[list[str]], cols: Sequence[int], fit: int, most: int
) -> list[int] | None:
    """The widths of ``cols`` narrowed to ``fit``, a step at a time up to ``most`` (what
    loses nothing first), the widest column first: none below its header's longest word,
    a short column (:data:`_SHORT_COLUMN`) not at all, a long one with spaces not below its
    longest word nor that (it wraps between words), then a long one not below
    :data:`_SHORT_COLUMN` (it is cut; its words too); None if that is not enough."""
    widths = [_natural(heads, cells, i) for i in cols]
    for step in range(most + 1):
        floor = []
        for i, w in zip(cols, widths):
            column = [row[i] for row in cells if i < len(row)]
            least = max((len(c) for c in column), default=0)
            if step == _CUT:
                least = min(least, _SHORT_COLUMN)
            elif step == _WRAP and least > _SHORT_COLUMN and any(map(_BREAKS.search, column)):
                words = max(len(part) for c in column for part in _PARTS.findall(c))
                least = max(words, _SHORT_COLUMN)
            floor.append(min(w, max(least, *(len(word) for word in heads[i].split(" ")))))
        _narrow(widths, floor, fit)
    return widths if _span(widths) <= fit else None


def _narrow(widths: list[int], floor: Sequence[int], fit: int) -> None:
    """Narrow ``widths`` towards ``fit``, the widest first, none below its ``floor``."""
    while _span(widths) > fit:
        over = _span(widths) - fit
        long = [k for k, w in enumerate(widths) if w > floor[k]]
        if not long:
            return
        k = max(long, key=lambda j: widths[j])
        second = max([widths[j] for j in long if j != k] + [floor[k]])
        widths[k] -= min(over, max(1, widths[k] - second))


def _units(text: str) -> list[str]:
    return _UNIT.findall(text)


def _cell_lines(text: str, width: int, prose: bool) -> list[str]:
    """One cell in ``width`` columns: whole if it fits; else wrapped at spaces (``prose``,
    a column with spaces) or shortened in the middle."""
    if len(text) <= width:
        return [text]
    return _wrapped(text, width) if prose else [_middle_cut(text, width)]


def _middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters with its middle left out: a path keeps its first
    part and as many of its last parts as fit (``/work/.../step_400/model.pt``), anything
    else its head and tail; an escape is kept whole or left out."""
    room = width - len(_ELIDED)
    if room < 2:
        return "".join(_cut(_units(text), width))
    parts = text.split("/")
    if len(parts) > 2:
        head = parts[0] + "/" if parts[0] else "/" + parts[1] + "/"
        rest = parts[1:] if parts[0] else parts[2:]
        tail: list[str] = []
        while rest and len(head) + len("/".join([rest[-1], *tail])) + len(_ELIDED) + 1 <= width:
            tail.insert(0, rest.pop())
        if tail and len(head) + len(_ELIDED) + 1 + len("/".join(tail)) <= width:
            return head + _ELIDED + "/" + "/".join(tail)
    units = _units(text)
    front = _cut(units, (room + 1) // 2)
    back = _cut(units[::-1], room - len("".join(front)))[::-1]
    return "".join(front) + _ELIDED + "".join(back)


def _cut(units: list[str], width: int) -> list[str]:
    """The first of ``units`` that fit in ``width`` characters (an escape whole or not)."""
    kept: list[str] = []
    used = 0
    for u in units:
        if used + len(u) > width:
            break
        kept.append(u)
        used += len(u)
    return kept


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces and after commas (a list
    such as ``sw_thermal_slowdown,hw_slowdown``); a longer word is broken where it must be,
    between escapes, never inside one."""
    lines: list[str] = []
    line = ""
    for n, word in enumerate(text.split(" ")):
        for k, part in enumerate(_PARTS.findall(word) or [""]):
            candidate = f"{line}{' ' if n and not k else ''}{part}" if line else part
            if len(candidate) <= width:
                line = candidate
                continue
            if line:
                lines.append(line)
            units = _units(part)
            while len("".join(units)) > width:
                piece = _cut(units, width) or units[:1]
                lines.append("".join(piece))
                units = units[len(piece) :]
            line = "".join(units)
    if line or not lines:
        lines.append(line)
    return lines


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
