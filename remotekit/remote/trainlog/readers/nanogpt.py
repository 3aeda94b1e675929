"""nanoGPT's console output (karpathy/nanoGPT ``train.py``): ``print(f"iter {iter_num}: loss
{lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")`` a step; a save prints
``saving checkpoint to {out_dir}`` after the eval line ``step {iter_num}: train loss ...,
val loss ...``, which names its step.
"""

from __future__ import annotations

import re

from ..linefmt import NUMBER, LineFormat, groups
from . import Reader


class NanoGPT(Reader):
    FORMAT = "nanogpt"
    WHAT = "nanoGPT train.py output"
    ORDER = 70
    FOLLOWS = True
    NAMES = ()  # whatever stdout was sent to: found as a text log
    LINE = LineFormat(
        FORMAT,
        groups(re.compile(r"^iter (?P<iter>\d+): loss (?P<loss>" + NUMBER[1:-1] + r"), time ")),
        "iter",
        (
            # the eval line before a save names its step (kind None: the step of what follows)
            (None, re.compile(r"^step (\d+): train loss ")),
            ("checkpoint", re.compile(r"^saving checkpoint to ")),
        ),
    )
    sniff, read = LINE.sniff, LINE.read
