"""How ``trainlog.py`` reads a log: the reader that claims it (the registry of
:mod:`.readers`) fills a :class:`~.series.Read`, whose series become the
:class:`~.ingest.Ingest` the analysis reads.
"""

from __future__ import annotations

from .base import LogError
from .choose import NoLoss
from .readers import READERS, by_format, claimants
from .series import Read
from .source import NotMine, Source


def read_log(path, fmt, wanted):
    """Read the log ``path`` once (``fmt``: "auto", or a format named with ``--format``);
    return ``(Ingest, format, lines, extra)``."""
    return read_source(Source(path), fmt, wanted)


def read_source(src, fmt, wanted):
    """:func:`read_log` of a :class:`~.source.Source` (a followed log's window too)."""
    if fmt != "auto":
        reader = by_format(fmt)
        if reader is None:
            raise LogError("no reader of the format %r" % fmt)
        return read_with(reader, src, wanted)
    tried = claimants(src)
    if not tried:
        kinds = ", ".join(r.WHAT for r in READERS if r.DIRECTORY)
        raise LogError("a directory no reader claims (formats that are one: %s)" % kinds)
    for reader in tried[:-1]:
        try:
            return read_with(reader, src, wanted)
        except NotMine:
            continue  # it looked closer: the next reader that claimed the file reads it
    return read_with(tried[-1], src, wanted)


def read_with(reader, src, wanted):
    """``(Ingest, format, lines, extra)`` of ``src`` read by ``reader``."""
    out = Read(reader.FORMAT, wanted)
    try:
        reader.read(src, out)
    except NoLoss as exc:
        if reader.BINARY:
            exc.what = reader.WHAT  # it parsed: its own series are listed, it is no text log
        raise
    return out.ingest(), out.fmt, out.lines, out.extra
