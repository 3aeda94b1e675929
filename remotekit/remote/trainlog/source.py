"""What a reader of ``trainlog.py`` reads: a :class:`Source` (a file or directory, or the
window of a followed log), its lines a block at a time (:class:`Lines`), and the
:class:`Head` the readers sniff a file's format from.
"""

from __future__ import annotations

import io
import json
import os
from array import array
from collections import deque
from itertools import chain

from ..infile import open_regular
from .base import CODE_RE, LogError

MAX_LINE = 1 << 20  # bytes: a longer line is skipped and counted, never held whole
# Lines are read and handled a block at a time: a block's lines, cells and values stay in
# the CPU's caches (100,000-step logs: 4 MiB blocks made the CSV reader 3.2x csv.reader,
# nanoGPT's 2.6x its regex; 64 KiB blocks 2.7x and 2.4x, JSON lines 1.0x either way).
BLOCK = 1 << 16
READ = 1 << 22  # bytes read at a time where nothing is split into lines (a W&B file)
SNIFF_BYTES = 1 << 24  # the sniff looks at most this far for its first lines
SNIFF_LINES = 200
MAX_DOC = 1 << 28  # a whole-document JSON (trainer_state.json) larger than this is refused
HEAD_ROWS = 5000  # rows a reader hands over before the columns are chosen
HARD_MAX = 1 << 26  # bytes a followed log's window holds at most, whatever the rows


class Source:
    """A log to read: ``path`` (what messages name; a directory for a format that is one,
    as an MLflow run) and its bytes, the file there or ``data`` (bytes: the window of a
    followed log); ``limit``: only the file's first bytes (a candidate measured)."""

    def __init__(self, path, data=None, limit=None):
        self.path = path
        self.data = data
        self.limit = limit

    def open(self):
        """The bytes, as a binary file object (the caller closes it)."""
        if self.data is None and self.limit is not None:
            with open_regular(self.path) as f:
                self.data = f.read(self.limit)
        if self.data is not None:
            return io.BytesIO(self.data)  # shares the bytes, no copy
        return open_regular(self.path)

    def size(self):
        return len(self.data) if self.data is not None else os.path.getsize(self.path)

    def is_dir(self):
        return self.data is None and os.path.isdir(self.path)


class Head:
    """The start of a file, as the readers' ``sniff`` looks at it: ``magic`` (its first 16
    bytes), ``lines`` (its first :data:`SNIFF_LINES` non-empty lines, stripped, without a
    shell trace or source code printed before the log), ``long`` (over-long lines met) and
    :meth:`raw` (its first bytes, read once however many readers ask). A directory has no
    bytes: ``is_dir`` is True and only a directory format's sniff looks at ``path``."""

    def __init__(self, src):
        self.src = src
        self.path = src.path
        self.is_dir = src.is_dir()
        self.magic = b""
        self.lines = []
        self.long = 0
        self._raw = b""
        self._json = {}
        if not self.is_dir:
            self._read()

    def _read(self):
        with self.src.open() as f:
            self.magic = f.read(16)
            f.seek(0)
            src = Lines(f, SNIFF_BYTES)
            lines = self.lines
            for block in src:
                for ln in block:
                    if CODE_RE.match(ln):
                        continue  # a shell trace or source code before the log: not its format
                    ln = ln.strip()
                    if ln:
                        lines.append(ln)
                        if len(lines) >= SNIFF_LINES:
                            break
                if len(lines) >= SNIFF_LINES:
                    break
            self.long = src.long
        if lines:
            lines[0] = lines[0].lstrip("\ufeff")

    def raw(self, size):
        """The file's first ``size`` bytes (at most), read once for every reader asking."""
        if len(self._raw) < size and not self.is_dir:
            with self.src.open() as f:
                self._raw = f.read(size)
        return self._raw[:size]

    def json(self, line):
        """``line`` parsed as JSON (once), or the exception that refused it."""
        if line not in self._json:
            try:
                self._json[line] = json.loads(line)
            except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
                self._json[line] = exc
        return self._json[line]

    def empty(self):
        """LogError when the file shows no line a format could be told from."""
        if self.is_dir or self.lines:
            return
        if self.long and self.magic.lstrip()[:1] in (b"{", b"["):
            return  # one compact JSON document (trainer_state.json on one line)
        if self.long:
            raise LogError(
                "no line shorter than %d bytes in the first %d MiB (%d over-long lines skipped)"
                % (MAX_LINE, SNIFF_BYTES >> 20, self.long)
            )
        raise LogError("the log is empty")


class Lines:
    """The lines of a binary file, a block at a time, each at most ``MAX_LINE`` bytes:
    longer ones (a 2 GiB line without a newline) are skipped while reading and counted in
    ``long``, so memory stays at one block whatever the file holds. NUL bytes are dropped."""

    def __init__(self, f, limit=None):
        self.f = f
        self.limit = limit
        self.long = 0
        self.nbytes = 0

    def __iter__(self):
        carry = b""
        dropping = False
        read = self.f.read
        while self.limit is None or self.nbytes < self.limit:
            chunk = read(BLOCK)
            if not chunk:
                break
            self.nbytes += len(chunk)
            if dropping:
                i = chunk.find(b"\n")
                if i < 0:
                    continue
                chunk = chunk[i + 1 :]
                dropping = False
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
            else:
                carry = buf[cut + 1 :]
                lines = self._split(buf[: cut + 1])
                if lines:
                    yield lines
            if len(carry) > MAX_LINE:
                self.long += 1
                carry = b""
                dropping = True
        if carry and not dropping and (self.limit is None or self.nbytes < self.limit):
            lines = self._split(carry + b"\n")
            if lines:
                yield lines

    def _split(self, data):
        if b"\0" in data:
            data = data.replace(b"\0", b"")
        if b"\r" in data:
            # a console captured from a terminal: a carriage return starts the line again
            # (a progress line rewritten in place), so each piece is a line as it was shown
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.decode("utf-8", "replace").split("\n")
        lines.pop()
        if _has_long_line(data) and max(map(len, lines)) > MAX_LINE:
            keep = [ln for ln in lines if len(ln) <= MAX_LINE]
            self.long += len(lines) - len(keep)
            lines = keep
        return lines


def _has_long_line(data):
    """Whether ``data`` (bytes ending in a newline) may hold a line of over ``MAX_LINE``
    characters: one ``rfind`` per ``MAX_LINE`` bytes rather than a ``len`` per line. Bytes
    are never fewer than the characters they decode to, so False is certain."""
    p, n = 0, len(data)
    while n - p > MAX_LINE:
        j = data.rfind(b"\n", p, p + MAX_LINE + 1)
        if j < 0:
            return True
        p = j + 1
    return False


def head_lines(blocks, n):
    """The first ``n`` lines of ``blocks``, and an iterator over the blocks left."""
    head = []
    it = iter(blocks)
    for block in it:
        if len(head) + len(block) >= n:
            k = n - len(head)
            head.extend(block[:k])
            return head, chain([block[k:]], it)
        head.extend(block)
    return head, iter(())


class NotMine(LogError):
    """A reader that looked closer: the source is not of its format after all (a file whose
    first line opens a JSON document that does not parse). The next reader that claimed
    it reads it; a format named with ``--format`` gives this error."""


def number_column(cells):
    """An ``array('d')`` of a column of numbers as text, or None when a cell is none (an
    empty cell, a word, None). Whole numbers are read with ``int`` (a step column: a third faster
    than ``float``), the rest with ``float``; an int too large for a double is read by
    ``float`` as the infinity it is."""
    try:
        return array("d", map(int, cells))
    except (ValueError, TypeError, OverflowError):  # TypeError: None, an optional group
        pass
    try:
        return array("d", map(float, cells))
    except (ValueError, TypeError):
        return None


class LineTail:
    """The window ``--follow`` keeps of a growing log: its complete lines, from an offset
    on; a partial last line waits for its newline. ``header``: a line kept in front of the
    window however it moves (a CSV's header), ``begin``: the offset the follow begins at
    the earliest (past that header); ``from_start``: the follow reads the file from its
    start (records found only from the first), not from near its end."""

    from_start = False

    def __init__(self, header=b"", begin=0):
        self.header = header
        self.begin = begin
        self.items = deque()
        self.size = 0
        self.carry = b""

    def feed(self, data):
        """Take new bytes; the number of complete lines they finished."""
        buf = self.carry + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self.carry = buf if len(buf) <= MAX_LINE else b""  # an endless line: dropped
            return 0
        self.carry = buf[cut + 1 :]
        lines = buf[: cut + 1].splitlines(True)
        self._add(lines)
        return len(lines)

    def _add(self, items):
        self.items.extend(items)
        self.size += sum(map(len, items))
        while self.size > HARD_MAX and len(self.items) > 1:
            self.size -= len(self.items.popleft())

    def trim(self, share):
        """Drop the oldest ``share`` of the window."""
        self.keep_last(len(self.items) - int(len(self.items) * share))

    def keep_last(self, n):
        """Keep the latest ``n`` lines (records) only."""
        while len(self.items) > n:
            self.size -= len(self.items.popleft())

    def window(self):
        return self.header + b"".join(self.items)


def line_tail(f):
    """The ``tail`` of a log of lines: its latest complete lines (the follow may begin
    anywhere in the file, at the start of a line)."""
    return LineTail()


def mtime(path):
    """When the file ``path`` was last written (0 when it cannot be looked at)."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def first_line(f):
    """``(line, offset after it)``: the first non-empty line of the file ``f`` (a CSV's
    header), with its newline."""
    f.seek(0)
    for _ in range(1000):
        line = f.readline(MAX_LINE)
        if not line or line.strip():
            return (line if line.endswith(b"\n") else line + b"\n"), f.tell()
    return b"", f.tell()
