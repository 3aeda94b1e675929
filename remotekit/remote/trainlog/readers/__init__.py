"""The format readers of ``trainlog.py``, one module per format, and the registry that tells
which one reads a file.

A reader is a module with:

``FORMAT``        the format's name, as the ``source`` record gives it
``WHAT``          the format in words ("TensorBoard event file")
``NAMES``         ``((regex, what, preference), ...)``: the files of a run directory that
                  are logs of this format, by their path below it; ``preference`` orders
                  candidates whose histories are as long (lower first); ``()`` for a format
                  found only by its content (a trainer's console output is a ``*.log``)
``sniff(head)``   how sure it is that a file is of its format, from its
                  :class:`~..source.Head`: 1 sure (magic bytes, JSON lines); 0.9 a marker
                  only this format writes; 0.8 a whole document; ``0.5 x`` the share of
                  the first lines a trainer's line format matches; 0.001 could be, unless
                  another says more (a CSV header); 0 no
``read(src, out)`` the series (and events) of ``src`` (a :class:`~..source.Source`) into
                  ``out`` (a :class:`~..series.Read`): ``out.add(name, step, value)`` per
                  value, or ``out.table(keys, head)`` for rows sharing one step axis; it may
                  raise :class:`~..source.NotMine` (then the next reader that claimed the
                  file reads it)

``tail(f)``       only a format that grows by appending: the window ``--follow`` keeps of
                  the growing file ``f`` (a :class:`~..source.LineTail`: its latest lines,
                  :func:`~..source.line_tail`; a CSV's header in front; TensorBoard's
                  records); without it ``--follow`` refuses the log, in the words of
                  ``NOT_FOLLOWED`` when the module has them

A reader imports nothing of the stages after it (choose, ingest, series, the analysis,
follow, find): it fills the ``out`` it is handed, and what those stages need to know of a
format they ask of the reader. It may say ``BINARY = True`` (a file that parses but has no
loss is named as this format, never handed to the text reader; its sniff is sure from its
magic bytes), ``DOCUMENT = True`` (read whole: its first
bytes alone do not parse, so a large one is not measured on them) and ``DIRECTORY = True``
(a directory is one log of this format: its ``sniff`` sees ``head.is_dir``).

A new format is one module here and its name in :data:`READERS`, whose order breaks ties.
"""

from __future__ import annotations

from ..source import Head
from . import (
    csvlog,
    fairseq,
    jsondoc,
    jsonl,
    llmc,
    llmc_stdout,
    megatron,
    mlflow,
    nanogpt,
    olmo,
    tensorboard,
    text,
    wandb,
)

READERS = (
    wandb,
    tensorboard,
    mlflow,
    olmo,
    jsonl,
    jsondoc,
    nanogpt,
    llmc,
    llmc_stdout,
    megatron,
    fairseq,
    csvlog,
    text,
)
FALLBACK = text  # what no other reader claims is read as text
SURE = 1.0


def claimants(src):
    """The readers that claim ``src`` (a :class:`~..source.Source`), the surest first (ties:
    in the order of :data:`READERS`), the text reader last for a file: a binary format
    that claims it ends the list. Raises LogError for an empty file."""
    head = Head(src)
    head.empty()
    scored = []
    for i, reader in enumerate(READERS):
        if head.is_dir != getattr(reader, "DIRECTORY", False) or reader is FALLBACK:
            continue
        score = reader.sniff(head)
        if score >= SURE:
            scored = [(-score, i, reader)]
            break
        if score > 0:
            scored.append((-score, i, reader))
    out = [reader for _, _, reader in sorted(scored, key=lambda t: t[:2])]
    if out and getattr(out[0], "BINARY", False):
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
