"""What every format reader of ``trainlog.py`` returns (:class:`Read`): numeric series, each
with its own step axis or sharing one (a table), and the events its format has evidence
for; :meth:`Read.ingest` turns them into the rows the analysis reads.

A reader never guesses: a number is a step only where the format says it is one, and an
event is one of the format's own save or resume lines, at the step that line states. It
never chooses either: which series is the loss, and which key of a table its step, is
:mod:`.choose`'s rule, the same for every format.
"""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import chain, islice

from .choose import NoLoss
from .ingest import ingest_for
from .source import HEAD_ROWS


class Read:
    """The series and events of one log, as its reader found them. A format gives its
    numbers one of two ways:

    - :meth:`add`: a value of a series at a step, each series on its own step axis (MLflow's
      metric files, OLMo's blocks);
    - :meth:`table`: rows that share one step axis (a JSON line, a CSV row, a TensorBoard
      step): it returns the :class:`~.ingest.Ingest` the rows go into, a row at a time
      (``ing.add(row)``) or straight into its ``array`` columns in a reader's own hot loop;
      :meth:`stream` does it for an iterator of row dicts.

    ``events``: ``(kind, step, detail)``; ``notes``: caveats of the reading, in words (they
    become warnings); ``caveats``: what is to be said of any log read so (a summary that
    holds no history), the first warnings; ``lines``: units read (lines, records); ``skipped``: lines that were
    neither data nor an event; ``bad``: lines of the format that did not parse; ``long``:
    lines over the length limit, skipped; ``extra``: what the format states about the run
    (HF's ``save_steps``: saves for the events); ``dialect``: whose log it is, when a
    generic format's columns say so (Lightning's metrics.csv)."""

    def __init__(self, fmt, wanted=None):
        self.fmt = fmt
        self.wanted = wanted
        self.series = {}
        self.events = []
        self.notes = []
        self.caveats = []
        self.lines = 0
        self.skipped = 0
        self.bad = 0
        self.long = 0
        self.extra = {}
        self.dialect = None
        self.run_part = None  # which run of a file holding several (None: the last)
        # series read off lines of their own kind (an evaluation's): seldom by nature, never
        # passed over as set once (:func:`~.choose.resolve_columns`)
        self.seldom = set()
        self._table = None

    def add(self, name, step, value):
        """One value of series ``name`` at ``step``."""
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = (array("d"), array("d"))
        s[0].append(step)
        s[1].append(value)

    def event(self, kind, step, detail):
        """A save or resume the format states, at the step it states (no duplicate)."""
        ev = (kind, float(step), detail[:160])
        if not any(e[0] == kind and e[1] == ev[1] for e in self.events[-4:]):
            self.events.append(ev)

    def table(self, keys, head=(), step_key=None):
        """The :class:`~.ingest.Ingest` for rows with ``keys`` (a Counter of the first rows'
        keys); ``head``: the first rows (dicts), whose values the choice reads; ``step_key``:
        the key the format says is the step (else :mod:`.choose` looks for one). Raises
        NoLoss when the keys hold no loss series (and none was named)."""
        self._table = ingest_for(keys, self.wanted, head, step_key, self.seldom)
        return self._table

    def beside(self, columns, keys, head, step_key=None):
        """Columns a reader found beside its table's rows (``{name: array}``, a value a row,
        MISSING where there is none: a held-out loss on lines of its own) added to the
        table: its columns are chosen again among ``keys`` with ``head`` (the first rows,
        these columns' values in them), as any table's are, but for one thing: such a
        column is never passed over as set once (an evaluation is seldom: once an epoch, once
        in a short log; a config field is no line of its own). False (the table as it was)
        when the new choice wants a column the table did not keep (its rows are read once)
        or finds no loss."""
        old = self._table
        old.flush()
        try:
            new = ingest_for(keys, self.wanted, head, step_key, columns)
        except NoLoss:
            return False
        have = dict(zip(old.keys, old.cols))
        have.update(columns)
        if any(k not in have for k in new.keys) or new.bucket_key != old.bucket_key:
            return False
        new.cols = [have[k] for k in new.keys]
        new.codes, new.cmap, new.bnames = old.codes, old.cmap, old.bnames
        new.events, new.skipped, new.bad = old.events, old.skipped, old.bad
        self._table = new
        return True

    def stream(self, rows, step_key=None, need=None):
        """Rows (an iterator of dicts) into a :meth:`table` chosen from the first
        ``HEAD_ROWS`` of them; ``need``, a one-item list, then tells the iterator which keys
        are kept. Returns the rows read."""
        head = list(islice(rows, HEAD_ROWS))
        keys = Counter()
        for d in head:
            keys.update(d.keys())
        ing = self.table(keys, head, step_key)
        if need is not None:
            need[0] = set(ing.keys) | ({ing.bucket_key} if ing.bucket_key else set())
        n = 0
        for d in chain(head, rows):
            ing.add(d)
            n += 1
            if not n % 65536:
                ing.flush()
        ing.flush()
        return n

    def damage(self, counts, what):
        """Corrupt records of a binary log (``counts``: records, corrupt ones, the offset
        where a corrupt length stopped the reading or None): counted as bad lines and said."""
        self.bad += counts[1]
        if counts[1]:
            self.notes.append("%d corrupt record(s) in the %s skipped" % (counts[1], what))
        if counts[2] is not None:
            self.notes.append(
                "the %s is corrupt at byte %d: nothing after it was read" % (what, counts[2])
            )

    def ingest(self):
        """The :class:`~.ingest.Ingest` the analysis reads: the table, or the series as rows
        (:func:`_rows`), with the events, counts and notes of the reading carried over."""
        ing = self._table
        if ing is None:
            ing = _ingest_for_rows(_rows(self), self.wanted, self.seldom)
            ing.guesses = list(self.notes) + ing.guesses
        else:
            ing.guesses = ing.guesses + list(self.notes)
        ing.events.extend((kind, step, "log", detail) for kind, step, detail in self.events)
        ing.skipped += self.skipped
        ing.bad += self.bad
        ing.long = self.long
        ing.dialect = self.dialect
        ing.caveats = self.caveats
        ing.run_part = self.run_part
        return ing


def _ingest_for_rows(rows, wanted, seldom=()):
    read = Read(None, wanted)
    read.seldom = set(seldom)
    read.stream(iter(rows), "step")
    return read._table


def _rows(read):
    """Rows ``{"step": s, name: value, ...}``: the values of every series at a step in one
    row; a step a series logs again (a replay after a resume) opens a new row after the
    first pass, so the step axis goes back there as it did in the run."""
    items = list(read.series.items())
    if items and all(steps == items[0][1][0] for _, (steps, _) in items):
        # one step axis for all (a console log's blocks): rows in the order logged
        names = [name for name, _ in items]
        return [
            dict(zip(names, vals), step=s)
            for s, *vals in zip(items[0][1][0], *(values for _, (_, values) in items))
        ]
    rows = {}
    for name, (steps, values) in items:
        seen = {}
        for s, v in zip(steps, values):
            k = seen.get(s, 0)
            seen[s] = k + 1
            row = rows.get((k, s))
            if row is None:
                row = rows[(k, s)] = {"step": s}
            row[name] = v
    return [rows[key] for key in sorted(rows)]
