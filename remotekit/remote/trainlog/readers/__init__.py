"""The format readers of ``trainlog.py``, one module per format, each defining one
:class:`Reader`, and the registry that tells which one reads a file.

A new format is one module here: its :class:`Reader` subclass is registered as it is
defined, and every module of this package is imported when the package is (discovered
where it lies, the shipped package's folder there as the source tree here), so nothing
else names it. Its ``ORDER`` breaks ties between readers that are as sure.

A reader imports nothing of the stages after it (choose, ingest, series, the analysis,
follow, find): it fills the ``out`` it is handed, and what those stages need to know of a
format they ask of the reader, through the attributes and hooks below; none of them
names a format.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..source import Head, line_tail


class Reader(object):
    """A log format: what it is called, which files of a run directory it claims, how sure
    it is of a file, and how it reads one.

    ``FORMAT``      the format's name, as the ``source`` record (and ``--format``) gives it
    ``WHAT``        the format in words ("TensorBoard event file")
    ``ORDER``       where it stands among readers that are as sure of a file (lower first)
    ``NAMES``       ``((regex, what, preference), ...)``: the files of a run directory that
                    are logs of this format, by their path below it; ``preference`` orders
                    candidates whose histories are as long (lower first); ``()`` for a
                    format found only by its content (a trainer's console output is a
                    ``*.log``)
    ``FOLLOWS``     it grows by appending: ``--follow`` follows it, keeping :meth:`tail`;
                    else ``--follow`` refuses it, in the words of ``NOT_FOLLOWED`` when it
                    has them
    ``BINARY``      a file that parses but has no loss is named as this format, never
                    handed to the text reader (its sniff is sure from its magic bytes)
    ``DOCUMENT``    read whole: its first bytes alone do not parse, so a large one is not
                    measured on them
    ``DIRECTORY``   a directory is one log of this format (its ``sniff`` sees
                    ``head.is_dir``)
    ``FALLBACK``    what no other reader claims is read with it (the text reader)
    """

    FORMAT = ""
    WHAT = ""
    ORDER = 1000
    NAMES = ()
    FOLLOWS = False
    NOT_FOLLOWED = None
    BINARY = False
    DOCUMENT = False
    DIRECTORY = False
    FALLBACK = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        DEFINED.append(cls)

    def sniff(self, head):
        """How sure it is that a file is of its format, from its :class:`~..source.Head`:
        1 sure (magic bytes, JSON lines); 0.9 a marker only this format writes; 0.8 a whole
        document; ``0.5 x`` the share of the first lines a trainer's line format matches;
        0.001 could be, unless another says more (a CSV header); 0 no."""
        return 0.0

    def read(self, src, out):
        """The series (and events) of ``src`` (a :class:`~..source.Source`) into ``out``
        (a :class:`~..series.Read`): ``out.add(name, step, value)`` per value, or
        ``out.table(keys, head)`` for rows sharing one step axis; ``out.notes`` for caveats
        of this log, ``out.caveats`` for what is said of any log read so. It may raise
        :class:`~..source.NotMine` (then the next reader that claimed the file reads it)."""
        raise NotImplementedError

    def tail(self, f):
        """What ``--follow`` keeps of the growing log ``f`` (a format that ``FOLLOWS``): a
        :class:`~..source.LineTail`, its latest complete lines; a format kept otherwise (a
        CSV's header in front, TensorBoard's records) says its own."""
        return line_tail(f)

    # -- what the find stage asks of every reader (of a run directory) ---------------------

    def stored_runs(self, path):
        """A format whose logs are the runs of a store (MLflow's ``mlruns/``): the live
        runs ``path`` holds, ``[(run dir, {series: values logged}, start time, what)]``, of
        which the find stage chooses one before it looks for files. ``[]``: none."""
        return []

    def sift(self, top, found, notes):
        """A format whose run directories hold more than its logs (W&B's ``run-*``): the
        candidate logs ``found`` under the run directory ``top``, seen to and sorted
        (``[(preference, -mtime, path below top, path, what)]``); ``notes``: ``{path:
        [caveat]}`` of a candidate it adds. It may raise LogError when nothing is left."""
        return found


DEFINED = []  # the Reader subclasses, as they are defined


def _discover():
    """Every module of this package imported: each defines its reader."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module("%s.%s" % (__name__, info.name))


_discover()  # after Reader: each module imports it from here
READERS = tuple(sorted((cls() for cls in DEFINED), key=lambda r: (r.ORDER, r.FORMAT)))
FALLBACK = next(r for r in READERS if r.FALLBACK)  # what no other reader claims
SURE = 1.0
# what --follow follows, in words (its refusal of any other format says them)
FOLLOWED = "JSON lines, CSV, text logs, key/value table consoles, TensorBoard event files"


def claimants(src):
    """The readers that claim ``src`` (a :class:`~..source.Source`), the surest first (ties:
    in the order of :data:`READERS`), the text reader last for a file: a binary format
    that claims it ends the list. Raises LogError for an empty file."""
    head = Head(src)
    head.empty()
    scored = []
    for i, reader in enumerate(READERS):
        if head.is_dir != reader.DIRECTORY or reader is FALLBACK:
            continue
        score = reader.sniff(head)
        if score >= SURE:
            scored = [(-score, i, reader)]
            break
        if score > 0:
            scored.append((-score, i, reader))
    out = [reader for _, _, reader in sorted(scored, key=lambda t: t[:2])]
    if out and out[0].BINARY:
        return out[:1]
    return out if head.is_dir else out + [FALLBACK]


def by_format(name):
    """The reader of the format named ``name`` (``--format``), or None."""
    for reader in READERS:
        if reader.FORMAT == name:
            return reader
    return None


def names():
    """``[(regex, what, preference, reader)]``: the file names every reader claims."""
    return [(rx, what, pref, reader) for reader in READERS for rx, what, pref in reader.NAMES]
