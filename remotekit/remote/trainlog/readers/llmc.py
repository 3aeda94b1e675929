"""llm.c's log file (karpathy/llm.c ``llmc/logger.h``): ``s:%d trl:%.4f lr:%.6f norm:%.4f``
a training step, ``s:%d tel:%.4f`` an evaluation (``trl``/``tel``: train and eval loss).
"""

from __future__ import annotations

import re

from ..linefmt import NUMBER, LineFormat, groups

_N = NUMBER[1:-1]
FORMAT = "llm.c"
WHAT = "llm.c log file"
NAMES = ()  # main.log: found as a text log
LINE = LineFormat(
    FORMAT,
    groups(
        re.compile(
            r"^s:(?P<s>\d+) trl:(?P<trl>" + _N + r")"
            r"(?: lr:(?P<lr>" + _N + r"))?(?: norm:(?P<norm>" + _N + r"))?"
        )
    ),
    "s",
)
sniff = LINE.sniff
read = LINE.read
tail = LINE.tail
