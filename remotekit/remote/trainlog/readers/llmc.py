"""llm.c's log file (karpathy/llm.c ``llmc/logger.h``): ``s:%d trl:%.4f lr:%.6f norm:%.4f``
a training step, ``s:%d tel:%.4f`` an evaluation (``trl``/``tel``: train and eval loss).
"""

from __future__ import annotations

import re

from ..linefmt import NUMBER, LineFormat, groups
from . import Reader

_N = NUMBER[1:-1]


class LlmC(Reader):
    FORMAT = "llm.c"
    WHAT = "llm.c log file"
    ORDER = 80
    FOLLOWS = True
    NAMES = ()  # main.log: found as a text log
    LINE = LineFormat(
        FORMAT,
        groups(
            re.compile(
                r"^s:(?P<s>\d+) (?:trl:(?P<trl>" + _N + r")"
                r"(?: lr:(?P<lr>" + _N + r"))?(?: norm:(?P<norm>" + _N + r"))?"
                r"|tel:(?P<tel>" + _N + r"))"
            )
        ),
        "s",
    )
    sniff, read = LINE.sniff, LINE.read
