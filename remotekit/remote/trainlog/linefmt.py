"""The line formats of trainers that print text (nanoGPT, llm.c, Megatron-LM, fairseq:
each a reader module of its own that declares one :class:`LineFormat`): a line is data only
if it matches the format's data pattern, and an event only if it matches one of the
format's event patterns; everything else is skipped.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

from ..protocol import mask
from .source import HEAD_ROWS, SNIFF_BYTES, SNIFF_LINES, Lines, head_lines

#: How far into a file a line format looks for its first data line past a preamble, and how
#: many of its anchor's places there it tries (a JSON log with an ``iteration`` key has one a
#: line: a few tries tell it is no such format).
PREAMBLE_BYTES = SNIFF_BYTES >> 4  # 1 MiB: ~10,000 lines of trace or arguments
PREAMBLE_TRIES = 32

#: A number as trainers print it, as one regex group (nan and inf too).
NUMBER = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"


def groups(rx):
    """A ``parse(line)`` of one regex whose named groups are the columns (the fast path
    reads them straight into the arrays)."""

    def parse(line):
        m = rx.search(line)
        if m is None:
            return None
        return {k: v for k, v in m.groupdict().items() if v is not None}

    parse.rx = rx
    return parse


class LineFormat:
    """A trainer's line format: ``parse(line)`` gives a row (a dict) of a data line, else
    None; ``step_key``: the row key that is the step (the format says so); ``events``:
    ``(kind, regex)`` whose first group, if any, is the step the line states (kind None: a
    line that names the step of what follows, as nanoGPT's eval line before a save).

    The reader of one line format holds it as ``LINE`` and takes ``sniff, read = LINE.sniff,
    LINE.read`` (its ``tail``, the latest lines, is every reader's)."""

    def __init__(self, name, parse, step_key, events=(), anchor=None):
        self.name = name
        self.parse = parse
        self.step_key = step_key
        self.events = events
        self.anchor = anchor

    def sniff(self, head):
        """Half the share of the file's first lines that are this format's data: a line
        format is never surer than the syntax of a whole file (JSON, a marker). A format
        with an ``anchor`` (bytes every data line holds) whose first lines hold none looks
        past them: a log behind a long preamble (a shell trace, a dump of 500 arguments)
        is judged by the lines from its first data line on (:func:`_past_preamble`)."""
        if not head.lines:
            return 0.0
        hits = sum(1 for ln in head.lines if self.parse(ln) is not None)
        if hits == 0 and self.anchor is not None and len(head.lines) >= SNIFF_LINES:
            return _past_preamble(self, head)
        return 0.5 * hits / len(head.lines)

    def read(self, src, out):
        out.fmt = self.name
        with src.open() as f:
            lines = Lines(f)
            _read_lines(self, lines, out)
            out.long = lines.long


def _past_preamble(lf, head):
    """:meth:`LineFormat.sniff` of the :data:`SNIFF_LINES` lines from the first that holds
    ``lf.anchor`` and parses as data, within the file's first :data:`PREAMBLE_BYTES`
    (found by a bytes search, not a regex per line); 0 when there is none. Half the score
    of the same lines at the top: a preamble is some doubt."""
    raw = head.raw(PREAMBLE_BYTES)
    at = raw.find(lf.anchor)
    for _ in range(PREAMBLE_TRIES):
        if at < 0:
            break
        start = raw.rfind(b"\n", 0, at) + 1
        end = raw.find(b"\n", at)
        line = raw[start : end if end >= 0 else len(raw)].decode("utf-8", "replace").strip()
        if lf.parse(line) is not None:
            text = raw[start : start + (1 << 16)].decode("utf-8", "replace")
            lines = [ln.strip() for ln in text.splitlines()]
            lines = [ln for ln in lines if ln][:SNIFF_LINES]
            if len(lines) > 1:
                lines = lines[:-1]  # the last may be cut short
            hits = sum(1 for ln in lines if lf.parse(ln) is not None)
            return 0.25 * hits / len(lines)
        at = raw.find(lf.anchor, at + 1) if end >= 0 else -1
    return 0.0


# long: the per-line loop of every trainer format, names bound locally (a call costs > a regex)
def _read_lines(lf, src, out):
    """A trainer's text log: only lines matching its data pattern are rows; events only from
    its event lines; everything else (source code, config dumps, tracebacks) is skipped."""
    parse, step_key, event_res = lf.parse, lf.step_key, lf.events
    lines, blocks = head_lines(src, HEAD_ROWS)
    parsed = [parse(ln) for ln in lines]
    head = [d for d in parsed if d]
    keys = Counter()
    for d in head:
        keys.update(d.keys())
    ing = out.table(keys, head, step_key)
    getter = ing.getter
    nlines = 0
    at = [None]  # a step named by a line without data (nanoGPT's eval line), for what follows
    # the values of the data lines since the last other line, converted a column at a time
    # (a call per value costs more than the regex that found it)
    pending = []
    add = pending.extend

    def flush():
        if pending:
            ing.add_cells(pending)
            del pending[:]
            at[0] = None

    def other(line):
        for kind, rx in event_res:
            m = rx.search(line)
            if m:
                step = float(m.group(1)) if m.groups() else at[0]
                if kind is None:
                    at[0] = step
                    return
                if step is None:
                    step = ing.last_step()
                ing.events.append((kind, step, "log", mask(line.strip())[:160]))
                return
        if line.strip():
            ing.skipped += 1

    # One regex whose named groups are the columns: its groups are the row (all of them,
    # in their order: m.groups(), else m.group(*keys)).
    rx = getattr(parse, "rx", None)
    direct = rx is not None and all(k in rx.groupindex for k in ing.keys)
    search = rx.search if direct else None
    keys = tuple(ing.keys)
    every = direct and keys == tuple(sorted(rx.groupindex, key=rx.groupindex.get))
    every = every and rx.groups == len(keys)
    one = keys[0] if len(keys) == 1 else None
    for block in chain([lines], blocks):
        nlines += len(block)
        for line in block:
            if direct:
                m = search(line)
                if m is None:
                    flush()
                    other(line)
                    continue
                if every:
                    add(m.groups())
                elif one is None:
                    add(m.group(*keys))
                else:
                    add((m.group(one),))
                continue
            d = parse(line)
            if d is None:
                flush()
                other(line)
                continue
            try:
                add(getter(d))
            except KeyError:  # a key of the columns missing: row by row
                flush()
                at[0] = None
                ing.slow(d)
        flush()
        ing.flush()
    out.lines = nlines
