"""llm.c's console output (karpathy/llm.c ``train_gpt2.cu``): ``step %4d/%d | train loss
%7.6f | norm %6.4f | lr %.2e | %.2f ms | ...`` (``train_gpt2.c``: ``step %d: train loss %f
(took %f ms)``); a save: ``Writing model to ..._%08d.bin``.
"""

from __future__ import annotations

import re

from ..linefmt import NUMBER, LineFormat, groups
from . import Reader

_N = NUMBER[1:-1]


class LlmCStdout(Reader):
    FORMAT = "llm.c-stdout"
    WHAT = "llm.c train_gpt2 output"
    ORDER = 90
    FOLLOWS = True
    NAMES = ()  # whatever stdout was sent to: found as a text log
    LINE = LineFormat(
        FORMAT,
        groups(
            re.compile(
                r"^step\s+(?P<step>\d+)(?:/\d+)?\s*[|:]\s*(?:train )?loss (?P<loss>"
                + _N
                + r")(?:.*?\bnorm (?P<norm>"
                + _N
                + r"))?(?:.*?\blr (?P<lr>"
                + _N
                + r"))?"
            )
        ),
        "step",
        (("checkpoint", re.compile(r"^[Ww]riting (?:model|state) .*?(?:step|_)(\d+)")),),
    )
    sniff, read = LINE.sniff, LINE.read
