"""The line formats of trainers that print text (nanoGPT, llm.c, Megatron-LM, fairseq:
each a reader module of its own that declares one :class:`LineFormat`): a line is data only
if it matches the format's data pattern, and an event only if it matches one of the
format's event patterns; everything else is skipped.
"""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import chain

from ..protocol import mask
from .base import MISSING, is_missing
from .source import HEAD_ROWS, SNIFF_BYTES, SNIFF_LINES, Lines, head_lines
from .templates import HELD_OUT_RE, SPLIT_RE, held_out_values

#: How far into a file a line format looks for its first data line past a preamble, and how
#: many of its anchor's places there it tries (a JSON log with an ``iteration`` key has one a
#: line: a few tries tell it is no such format).
PREAMBLE_BYTES = SNIFF_BYTES >> 4  # 1 MiB: ~10,000 lines of trace or arguments
PREAMBLE_TRIES = 32

#: The lines a format does not claim that are kept for a look at their held-out losses
#: (:func:`_held_out`): how many at most, and how long each may be.
MAX_HELD_LINES = 10000
MAX_HELD_CHARS = 4096
#: How far back from the train row before it a held-out line's own step is looked for.
MAX_HELD_BACK = 1000
#: Such lines before the first train row kept to be told apart (_first_evaluation).
MAX_EARLY_HELD = 64

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
    its event lines; the held-out losses on lines of their own (a validation line after the
    train lines) a column beside them (:func:`_held_out`); everything else (source code,
    config dumps, tracebacks) is skipped."""
    parse, step_key, event_res = lf.parse, lf.step_key, lf.events
    lines, blocks = head_lines(src, HEAD_ROWS)
    parsed = [parse(ln) for ln in lines]
    head = [d for d in parsed if d]
    counts = Counter()
    for d in head:
        counts.update(d.keys())
    ing = out.table(counts, head, step_key)
    getter = ing.getter
    nlines = 0
    at = [None]  # a step named by a line without data (nanoGPT's eval line), for what follows
    # the values of the data lines since the last other line, converted a column at a time
    # (a call per value costs more than the regex that found it)
    pending = []
    add = pending.extend
    held = []  # (train rows before it, line): the lines that may hold a held-out loss
    early = []  # such lines before the first train row (see _first_evaluation)
    held_out = HELD_OUT_RE.search

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
            if held_out(line) and len(held) < MAX_HELD_LINES and len(line) <= MAX_HELD_CHARS:
                n = ing.rows()
                if n:
                    held.append((n, line))
                elif len(early) < MAX_EARLY_HELD:  # an argument dump, or a first evaluation
                    early.append(line)

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
    if held:
        _held_out(_first_evaluation(early, held) + held, ing, counts, head, out)


def _shape(line):
    """A line's constant text, its numbers aside, as the template reader splits it."""
    return tuple(SPLIT_RE.split(line.strip())[0::2])


def _first_evaluation(early, held):
    """The held-out lines before the first train row that are an evaluation before training
    (llm.c's and nanoGPT's ``val loss x`` at step 0), told from an argument dump or a config
    by their shape, numbers aside: one that recurs after the train rows began. Each sits at
    the first train row."""
    if not early:
        return []
    later = {_shape(line) for _, line in held}
    return [(1, line) for line in early if _shape(line) in later]


def _held_out(held, ing, counts, head, out):
    """The held-out losses on lines the format does not claim
    (:func:`~.templates.held_out_values`) as columns of its table: each value at the train
    row before its line, or, where the line states its step, at the row of that step (a
    value whose step no train row logged is left out, said). The table's columns are then
    chosen again with them, as for any table (:meth:`~.series.Read.beside`)."""
    found = held_out_values([line for _, line in held])
    if not found:
        return
    n = ing.rows()
    steps = ing.cols[0] if ing.step_key else None
    cols, used, off = {}, set(), 0
    for i, name, v, stated in found:
        r = held[i][0] - 1
        if stated is not None and steps is not None and steps[r] != stated:
            r = next(
                (q for q in range(r, max(-1, r - MAX_HELD_BACK), -1) if steps[q] == stated), None
            )
        col = cols.get(name)
        if col is None:
            col = cols[name] = array("d", [MISSING]) * n
        if r is None or not is_missing(col[r]):
            off += 1  # a step no train row logged, or a second value at one row
            continue
        col[r] = v
        used.add(i)
    rows = [dict(d) for d in head[:n]]
    for name, col in cols.items():
        counts[name] = 0
        for r, d in enumerate(rows):
            if not is_missing(col[r]):
                d[name] = col[r]
                counts[name] += 1
    if out.beside(cols, counts, rows, ing.step_key):
        out._table.skipped -= len(used)
        if off:
            out.notes.append(
                "%d held-out value(s) left out: at a step no train line logged, or a second "
                "at one row" % off
            )
