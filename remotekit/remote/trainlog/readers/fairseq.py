"""fairseq's console output (``fairseq/logging/progress_bar.py``): JsonProgressBar prints
``... | train_inner | {"epoch": 1, "update": 0.1, "loss": "9.9", ..., "num_updates": "100",
"lr": "5e-05", "gnorm": "1.2"}``; SimpleProgressBar ``epoch 001:    100 / 1102 loss=9.9,
..., num_updates=100, ...``. Saves and loads name their update.
"""

from __future__ import annotations

import json
import re

from ..linefmt import NUMBER, LineFormat
from . import Reader

_KV_RE = re.compile(r"([A-Za-z_][\w/.\-]*)=" + NUMBER)
_SIMPLE_RE = re.compile(r"\bepoch \d+:\s+\d+ / \d+ ")


def parse(line):
    i = line.find("| train_inner | {")
    if i >= 0:
        try:
            d = json.loads(line[i + 16 :])
        except (ValueError, RecursionError):  # nesting too deep
            return None
        return d if isinstance(d, dict) and "num_updates" in d else None
    if _SIMPLE_RE.search(line):
        d = dict(_KV_RE.findall(line))
        return d if "num_updates" in d else None
    return None


class Fairseq(Reader):
    FORMAT = "fairseq"
    WHAT = "fairseq output"
    ORDER = 110
    FOLLOWS = True
    NAMES = ()  # whatever stdout was sent to: found as a text log
    LINE = LineFormat(
        FORMAT,
        parse,
        "num_updates",
        (
            ("checkpoint", re.compile(r"\bsaved checkpoint .*?\(epoch \d+ @ (\d+) updates")),
            ("resume", re.compile(r"\bloaded checkpoint .*?\(epoch \d+ @ (\d+) updates")),
        ),
    )
    sniff, read = LINE.sniff, LINE.read
