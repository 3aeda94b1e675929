"""How ``trainlog.py`` reads a log: the reader that claims it (the registry of
:mod:`.readers`) fills a :class:`~.series.Read`, whose series become the
:class:`~.ingest.Ingest` the analysis reads.
"""

from __future__ import annotations

from .base import LogError
from .choose import NoLoss
from .readers import FALLBACK, READERS, by_format, claimants
from .series import Read
from .source import NotMine, Source


def read_log(path, fmt, wanted, run_part=None):
    """Read the log ``path`` once (``fmt``: "auto", or a format named with ``--format``;
    ``run_part``: which run of a file holding several, None the last); return ``(Ingest,
    format, lines, extra)``."""
    return read_source(Source(path), fmt, wanted, run_part)


def read_source(src, fmt, wanted, run_part=None):
    """:func:`read_log` of a :class:`~.source.Source` (a followed log's window too)."""
    if fmt != "auto":
        reader = by_format(fmt)
        if reader is None:
            raise LogError("no reader of the format %r" % fmt)
        return read_with(reader, src, wanted, run_part)
    tried = claimants(src)
    if not tried:
        kinds = ", ".join(r.WHAT for r in READERS if r.DIRECTORY)
        raise LogError("a directory no reader claims (formats that are one: %s)" % kinds)
    first = None
    for reader in tried[:-1]:
        try:
            return read_with(reader, src, wanted, run_part)
        except NotMine:
            continue  # it looked closer: the next reader that claimed the file reads it
        except NoLoss as exc:
            if reader.BINARY or tried[-1] is not FALLBACK:
                raise
            # a console with a tab in each line sniffs as a headerless TSV: its line
            # templates may hold the loss; if not, the first reader's answer stands
            first = first or exc
    try:
        return read_with(tried[-1], src, wanted, run_part)
    except NoLoss:
        if first is not None:
            raise first from None
        raise


def read_with(reader, src, wanted, run_part=None):
    """``(Ingest, format, lines, extra)`` of ``src`` read by ``reader``."""
    out = Read(reader.FORMAT, wanted)
    out.run_part = run_part
    try:
        reader.read(src, out)
    except NoLoss as exc:
        if reader.BINARY:
            exc.what = reader.WHAT  # it parsed: its own series are listed, it is no text log
        raise
    return out.ingest(), out.fmt, out.lines, out.extra
