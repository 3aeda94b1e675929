"""What a format reader of ``trainlog.py`` returns (:class:`Read`): numeric series, each
with its own step axis, and the events its format has evidence for; :func:`ingest` turns
them into the rows the analysis reads.

A reader for a new format is one module with a ``read(path) -> Read``. It never guesses:
a number is a step only where the format says it is one, and an event is one of the
format's own save or resume lines, at the step that line states.
"""

from __future__ import annotations

from array import array

from .binary import _rows_into


class Read:
    """The series and events of one log, as its reader found them.

    ``series``: name -> ``(steps, values)``, two ``array('d')`` in the order logged;
    ``events``: ``(kind, step, detail)``; ``notes``: caveats of the reading, in words (they
    become warnings); ``lines``: units read (lines, records); ``skipped``: lines that were
    neither data nor an event; ``bad``: lines of the format that did not parse."""

    def __init__(self, fmt):
        self.fmt = fmt
        self.series = {}
        self.events = []
        self.notes = []
        self.lines = 0
        self.skipped = 0
        self.bad = 0

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


def ingest(read, wanted):
    """``(Ingest, format, lines)`` of a :class:`Read`: its series as rows, its events and
    notes carried over (the analysis then treats it as any other log)."""
    ing, _ = _rows_into(iter(_rows(read)), wanted, "step")
    ing.events.extend((kind, step, "log", detail) for kind, step, detail in read.events)
    ing.guesses = list(read.notes) + ing.guesses
    ing.skipped += read.skipped
    ing.bad += read.bad
    return ing, read.fmt, read.lines
