"""CSV with a header (Lightning's ``metrics.csv``, sparse: one metric a row; ultralytics'
``results.csv``, padded with spaces; Keras's CSVLogger; tab-separated too).
"""

from __future__ import annotations

import csv
import gc
import re
from array import array
from collections import Counter
from itertools import chain, compress, dropwhile, repeat
from operator import itemgetter

from ..base import MISSING, LogError
from ..source import (
    HEAD_ROWS,
    MAX_LINE,
    Lines,
    LineTail,
    first_line,
    head_lines,
    number_column,
)
from . import Reader

#: A header cell as trainers name their columns: train/box_loss, metrics/mAP50-95(B), lr-AdamW@0
_NAME_RE = re.compile(r"^[A-Za-z_][\w./\-()\[\]@:%+ ]*$")
WEAK = 0.001  # a header could be a CSV's: unless a trainer's lines or a JSON array say otherwise
MAX_QUOTED_LINES = 1000  # a quoted cell over more lines is a stray quote: not held on to


class Csv(Reader):
    FORMAT = "csv"
    WHAT = "CSV"
    ORDER = 120
    FOLLOWS = True
    NAMES = (
        (r"(?:^|/)metrics\.csv$", "Lightning metrics.csv", 50),
        (r"\.csv$", WHAT, 100),
    )

    def sniff(self, head):
        """Weak: a first line of names, split by commas or tabs, as wide as the next line."""
        lines = list(dropwhile(_comment, head.lines))  # SB3's Monitor: a #{...} line first
        if not lines:
            return 0.0
        first = lines[0]
        for delim in (",", "\t"):
            cells = [c.strip().strip('"') for c in first.split(delim)]
            if (
                len(cells) >= 2
                and "=" not in first
                and all(_NAME_RE.match(c) for c in cells if c)
                and (len(lines) < 2 or len(lines[1].split(delim)) == len(first.split(delim)))
            ):
                return WEAK
        return 0.0

    def read(self, src, out):
        with src.open() as f:
            lines = Lines(f)
            _read(lines, out)
            out.long = lines.long

    def tail(self, f):
        """What ``--follow`` keeps of a growing CSV: its latest complete lines, its header line
        in front of them however the window moves (the follow begins past it)."""
        header, end = first_line(f)
        while _comment(header.decode("utf-8", "replace")):
            line = f.readline(MAX_LINE)
            if not line:
                break
            if line.strip():
                header, end = (line if line.endswith(b"\n") else line + b"\n"), f.tell()
        return LineTail(header, end)


def _comment(line):
    """A comment line before the header: stable-baselines3's Monitor writes ``#`` and a
    JSON object (its start time, the environment) above ``r,l,t``."""
    return line.lstrip("\ufeff").startswith("#")


def _dialect(keys):
    if "step" in keys and any(k.endswith(("_step", "_epoch")) for k in keys):
        return "Lightning CSVLogger metrics.csv"
    return None


# The hot loop binds its names locally: a call per row would cost more than the parse.
# long: one pass over the blocks; the column-at-a-time path is already its own function
def _read(src, out):
    blocks = iter(src)
    first = None
    pending = []
    for block in blocks:
        for i, ln in enumerate(block):
            if ln.strip() and not _comment(ln):
                first = ln.lstrip("\ufeff")
                pending = block[i + 1 :]
                break
        if first is not None:
            break
    if first is None:
        raise LogError("the log is empty")
    delim = "\t" if first.count("\t") > first.count(",") else ","
    header = [h.strip() for h in next(csv.reader([first], delimiter=delim))]
    head, blocks = head_lines(chain([pending], blocks), HEAD_ROWS)
    head_rows = [dict(zip(header, r)) for r in csv.reader(head, delimiter=delim)]
    ing = out.table(Counter(header), head_rows)
    out.dialect = _dialect(header)
    pos = {h: i for i, h in enumerate(header)}
    idx = [pos[k] for k in ing.keys]
    getter = itemgetter(*idx) if len(idx) > 1 else (lambda r, i=idx[0]: (r[i],))
    bidx = pos[ing.bucket_key] if ing.bucket_key is not None else None
    ext = ing.flat.extend
    m0, m1 = ing.m0, ing.m1
    nm = m1 - m0
    codes = ing.codes

    def code_of(row):
        return ing.code(row[bidx] if bidx < len(row) else None)

    # Sparse rows (Lightning: one metric per row, the other cells empty) convert cell by
    # cell; a file whose first rows are sparse skips the all-cells-at-once attempt.
    sparse = any(not r.get(k) for r in head_rows[:200] for k in ing.keys)
    nlines = 1
    width = len(header)
    for block, text in _blocks(chain([head], blocks), delim):
        nlines += len(block)
        # a block's rows are held at once: without the cyclic GC scanning them (they hold
        # only strings), which otherwise costs more than the parse
        gc_was = gc.isenabled()
        gc.disable()
        try:
            if bidx is None:
                flat = _csv_split(block, text, delim, width)
                if flat is not None and _csv_columns(ing, _Cells(flat, width), idx, header):
                    continue
            rows = list(filter(None, csv.reader(block, delimiter=delim)))
            if (
                bidx is None
                and rows
                and len(set(map(len, rows))) == 1
                and len(rows[0]) == width
                and _csv_columns(ing, rows, idx, header)
            ):
                continue
        finally:
            if gc_was:
                gc.enable()
        for row in rows:
            if not sparse:
                try:
                    ext(map(float, getter(row)))
                except (ValueError, IndexError, TypeError):
                    ing.fix_partial()
                else:
                    if bidx is not None:
                        codes.append(code_of(row))
                    continue
            try:
                vals = [float(c) if c else MISSING for c in getter(row)]
            except (ValueError, IndexError, TypeError):
                vals = None
            if vals is None or (m0 and vals[0] is MISSING) or vals[m0:m1].count(MISSING) == nm:
                if len(row) == 1 and ing.maybe_event(row[0]):
                    continue
                ing.slow(dict(zip(header, row)))
                continue
            ext(vals)
            if bidx is not None:
                codes.append(code_of(row))
        ing.flush()
    out.lines = nlines


def _blocks(blocks, delim):
    """``(lines, their text joined by delim)`` a block at a time, each ending outside a
    quoted cell: the lines of a quoted cell that goes on in the next block (a newline in a
    quoted cell) move on to it, so that ``csv.reader`` reads the cell whole."""
    carry = []
    for block in blocks:
        if carry:
            block, carry = carry + block, []
        text = delim.join(block)
        if '"' in text:
            cut = _open_quote(block)
            if cut is not None and len(block) - cut <= MAX_QUOTED_LINES:
                block, carry = block[:cut], block[cut:]
                text = delim.join(block)
        if block:
            yield block, text
    if carry:
        yield carry, delim.join(carry)  # a quote the file never closes


def _open_quote(block):
    """The index of the line where a quoted cell opens that ``block`` does not close, or
    None (a quote inside a quoted cell is doubled: every line with an odd count of quotes
    opens or closes one)."""
    start = None
    for i, line in enumerate(block):
        if line.count('"') % 2:
            start = i if start is None else None
    return start


def _csv_split(block, text, delim, width):
    """A block's cells in one flat list, ``width`` per row, by splitting ``text`` (its lines
    joined by ``delim``) once; None when ``csv.reader`` could read it otherwise: a quote, a
    carriage return, a blank line or a line of another width (those blocks take the
    ``csv.reader`` path)."""
    if '"' in text or "\r" in text or set(map(str.count, block, repeat(delim))) != {width - 1}:
        return None
    if width == 1 and "" in block:
        return None  # a blank line is no row
    return text.split(delim)


class _Cells:
    """The rows of a flat cell list, as ``_csv_columns`` reads them: ``len``, a column, a row."""

    def __init__(self, flat, width):
        self.flat, self.width = flat, width

    def __len__(self):
        return len(self.flat) // self.width

    def column(self, i):
        return self.flat[i :: self.width]

    def __getitem__(self, k):
        w = self.width
        return self.flat[k * w : k * w + w]


def _csv_columns(ing, rows, idx, header):
    """A block of CSV rows of the header's width converted a column at a time
    (``array(map(float))`` per column; empty cells are missing). False, with nothing done,
    when a row needs the row-by-row path: a step cell empty or a text cell in a kept column.
    ``rows``: a list of rows, or :class:`_Cells`."""
    n = len(rows)
    if isinstance(rows, _Cells):
        cols = {i: rows.column(i) for i in set(idx)}
    else:
        cols = {i: list(map(itemgetter(i), rows)) for i in set(idx)}
    m0, m1 = ing.m0, ing.m1
    if m0 and "" in cols[idx[0]]:
        return False  # an empty step: the row-by-row path numbers it
    out = []
    for i in idx:
        c = cols[i]
        a = number_column(c)
        if a is not None:
            out.append(a)
        else:
            blank = c.count("")
            if blank == n:
                out.append(array("d", [MISSING]) * n)
                continue
            try:
                out.append(array("d", [float(x) if x else MISSING for x in c]))
            except ValueError:
                return False
    # rows without any kept metric (Lightning's epoch rows): counted, as row by row
    metric = [cols[i] for i in idx[m0:m1]]
    empty = None
    if metric and all("" in c for c in metric):
        for c in sorted(metric, key=lambda c: c.count("")):  # the fewest blanks first
            e = {k for k, x in enumerate(c) if not x}
            empty = e if empty is None else empty & e
            if not empty:
                break
    ing.flush()
    if empty:
        for k in sorted(empty):
            ing.slow(dict(zip(header, rows[k])))
        keep = [k not in empty for k in range(n)]
        out = [array("d", compress(a, keep)) for a in out]
    for col, a in zip(ing.cols, out):
        col.extend(a)
    return True
