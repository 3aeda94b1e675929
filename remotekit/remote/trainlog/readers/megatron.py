"""Megatron-LM's console output (``megatron/training/training.py`` ``training_log()``):
`` iteration  N/  M | consumed samples: ... | learning rate: 1.5E-04 | global batch size:
512 | lm loss: 7.1E+00 | loss scale: 1.0 | grad norm: 1.23 | number of skipped iterations:
0 | number of nan iterations: 0 |``; saves and loads name their iteration.
"""

from __future__ import annotations

import re

from ..linefmt import NUMBER, LineFormat
from . import Reader

PIPE_PAIR_RE = re.compile(r"([A-Za-z][\w ./\-]*?)\s*:\s*" + NUMBER + r"\s*(?=\||$)", re.I)
_ITERATION_RE = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")


def parse(line):
    m = _ITERATION_RE.search(line)
    if m is None:
        return None
    d = dict(PIPE_PAIR_RE.findall(line[m.end() :]))
    d["iteration"] = m.group(1)
    return d


class Megatron(Reader):
    FORMAT = "megatron"
    WHAT = "Megatron-LM output"
    ORDER = 100
    FOLLOWS = True
    NAMES = ()  # whatever stdout was sent to: found as a text log
    LINE = LineFormat(
        FORMAT,
        parse,
        "iteration",
        (
            ("checkpoint", re.compile(r"saving checkpoint at iteration\s+(\d+)")),
            ("resume", re.compile(r"successfully loaded checkpoint from .*? at iteration\s+(\d+)")),
        ),
        anchor=b"iteration",  # behind a shell trace or the 500-line arguments dump too
    )
    sniff, read = LINE.sniff, LINE.read
