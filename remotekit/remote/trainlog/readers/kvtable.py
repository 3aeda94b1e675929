"""A logger's key/value table on the console: one table a dump, each a row of the run. It is
what stable-baselines3's and OpenAI baselines' ``HumanOutputFormat`` print to stdout on
every update (the same logger that writes ``progress.csv``), and what many trainers copy.

The shape, from the writers' source (``stable_baselines3/common/logger.py`` and
``baselines/logger.py``, ``HumanOutputFormat.write``): a ruler of dashes, then one line a
key, ``| {key:<width} | {value:<width} |``, the values formatted ``%-8.3g``, then the ruler
again. stable-baselines3 groups the keys by their section: a line ``| rollout/ |  |``
heads the keys of ``rollout/``, each printed indented by four blanks without its section
(``|    ep_rew_mean | 23.4 |`` is ``rollout/ep_rew_mean``); baselines prints the full key.
A table is read as the row ``progress.csv`` holds for the same dump, its keys named as the
CSV names them, so the console and the CSV of a run give the same answer (to the
console's three digits). Lines outside a table (``Using cpu device``, a trainer's own
prints) are no data: counted as skipped.
"""

from __future__ import annotations

import re

from ..source import Lines
from . import Reader

RULER_RE = re.compile(r"^\s*-{5,}\s*$")
ROW_RE = re.compile(r"^\s*\|( *)([^|]*?)\s*\|\s*([^|]*?)\s*\|\s*$")
CLAIM_BYTES = 1 << 20  # a long preamble (a config, a warning) may come first
_CLAIM_RE = re.compile(rb"(?m)^-{5,}\r?\n\| *[^|\n]*[^ |\n] *\| *[^|\n]* *\|\r?\n\| ")
SURE = 0.9  # a ruler then rows of two cells: no other format prints that


class KeyValueTable(Reader):
    FORMAT = "kvtable"
    WHAT = "key/value table console (stable-baselines3, OpenAI baselines)"
    ORDER = 45
    NAMES = ()  # whatever stdout was sent to: found as a text log by its content

    def sniff(self, head):
        """A ruler followed by ``| key | value |`` rows, in the first :data:`CLAIM_BYTES`."""
        return SURE if _CLAIM_RE.search(head.raw(CLAIM_BYTES)) is not None else 0.0

    def read(self, src, out):
        with src.open() as f:
            lines = Lines(f)
            out.stream(_rows(lines, out))
            out.long = lines.long
        out.caveats.append(
            "each key/value table on the console is one row, its keys named with their "
            "section (train/value_loss) as the logger's progress.csv names them"
        )


def _rows(blocks, out):
    """The tables of ``blocks`` (lists of lines), one dict a table; what lies between
    tables is counted skipped."""
    ruler, row = RULER_RE.match, ROW_RE.match
    d = None  # the table being read (None: between tables)
    section = ""
    for lines in blocks:
        out.lines += len(lines)
        for line in lines:
            m = row(line) if d is not None else None
            if m is not None:
                indent, key, value = m.groups()
                if key.endswith("/") and not value:
                    section = key  # the keys below it are this section's
                elif key:
                    d[section + key if indent and section else key] = value
                continue
            if ruler(line):
                if d:
                    yield d
                    d, section = None, ""
                else:
                    d, section = {}, ""
                continue
            if d:  # a table cut off by another print: what it held is its row
                yield d
            d = None
            if line.strip():
                out.skipped += 1
    if d:
        yield d
