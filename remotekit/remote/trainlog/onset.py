"""A run that never learned, or broke at once, for ``trainlog.py``: the loss non-finite from
its first logged value, or above the chance level from the start and staying there (a
uniform guess over the vocabulary or the classes scores ln V, ln C: a loss above it is
worse than guessing), with the step where it recovered if it did.

The chance level comes from the log itself: a vocabulary or class count stated once in its
first lines (a config dump, a header: ``vocab_size=50257``, ``"num_classes": 10``,
``ntokens = 33278``); a count stated with several values is a series, not a setting.
"""

from __future__ import annotations

import math
import re

from ..infile import open_regular
from .base import FMAX, fmt_number, is_missing, median

CHANCE_BYTES = 1 << 18  # the head of the log searched for a vocabulary or class count (256 KiB)
CHANCE_RE = re.compile(
    r"""(?<![\w.])(?P<name>
        vocab(?:ulary)?[ \t_-]*size|vocab[ \t]*\(size|n_?vocab|vocab(?:ulary)?|ntokens|n_?words|
        (?:num|n|nb|number[ \t_]of)[ \t_-]*(?:classes|labels|categories)|n_?class(?:es)?
    )["']?[ \t]*(?:[=:]|[ \t]is[ \t]|[ \t])[ \t]*["']?(?P<n>\d+)(?![\d.])""",
    re.I | re.X,
)
STEMS = ("vocab", "ntokens", "words", "class", "labels", "categories")
MAX_STEM_LINES = 200  # lines a stem is looked for on: a word on every line is a column
KINDS = (("vocab", "the vocabulary"), ("word", "the vocabulary"), ("token", "the vocabulary"))
SETTLE = 3  # values in a row at or below chance: recovered (one dip is noise)
MIN_STRETCH = 5  # values above chance from the start before a run is called stuck there
MIN_SHARE = 0.1  # and this share of the loss's values at least


def chance_level(path):
    """``(ln count, words)`` of the vocabulary or class count the head of the file at
    ``path`` states once, else ``(None, None)``: ``words`` say where it came from."""
    try:
        with open_regular(path) as f:
            head = f.read(CHANCE_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None, None
    seen = {}
    for start in _stem_lines(head):  # the full pattern on the lines a cheap search found
        end = head.find("\n", start)
        for m in CHANCE_RE.finditer(head, start, end if end >= 0 else len(head)):
            name = re.sub(r"[\s_(-]+", "_", m.group("name").lower())
            line = head.count("\n", 0, start) + 1
            seen.setdefault(name, []).append((int(m.group("n")), line))
    for name, found in seen.items():
        counts = set(n for n, _ in found)
        if len(counts) != 1:
            continue  # several values: a per-batch count (tokens of a batch), not a setting
        n, line = found[0]
        if not 2 <= n <= 10**8:
            continue
        what = next((w for k, w in KINDS if k in name), "the classes")
        return math.log(n), "%s=%d at line %d (%s): ln %d = %s" % (
            name,
            n,
            line,
            what,
            n,
            fmt_number(round(math.log(n), 4)),
        )
    return None, None


def _stem_lines(text):
    """The starts of the lines of ``text`` that hold a word of :data:`STEMS` (any case), in
    order: ``str.find`` over the text, at most :data:`MAX_STEM_LINES` lines a word (one
    regex over a whole MiB with alternatives and no case costs 0.3 s)."""
    low = text.lower()
    starts = set()
    for stem in STEMS:
        at = low.find(stem)
        for _ in range(MAX_STEM_LINES):
            if at < 0:
                break
            starts.add(low.rfind("\n", 0, at) + 1)
            nl = low.find("\n", at)
            at = low.find(stem, nl) if nl >= 0 else -1
    return sorted(starts)


def onset(label, key, col, steps, chance=None, chance_from=None):
    """The ``onset`` record's fields of metric ``label`` (column ``key``, values ``col`` at
    ``steps``, missing values left out), or None when there is nothing to say: no chance
    level and a finite first value. ``chance`` (ln V or ln C) is scaled to the loss's own
    units: a perplexity is compared with the count itself, bits with log2."""
    rows = [i for i, v in enumerate(col) if not is_missing(v)]
    if not rows:
        return None
    rec = dict(metric=label, key=key, chance=None, chance_from=chance_from)
    bad = [i for i in rows if not -FMAX <= col[i] <= FMAX]
    if bad and bad[0] == rows[0]:
        k = 0
        while k < len(rows) and not -FMAX <= col[rows[k]] <= FMAX:
            k += 1
        back = steps[rows[k]] if k < len(rows) else None
        return dict(
            rec,
            kind="nonfinite",
            unhealthy=True,
            first_step=steps[rows[0]],
            last_step=steps[rows[k - 1]],
            values=k,
            recovered_step=back,
            start=None,
            verdict="non-finite from its first logged value (%s at step %s): %d value(s)%s"
            % (
                col[rows[0]],
                fmt_number(steps[rows[0]]),
                k,
                ", finite from step %s" % fmt_number(back)
                if back is not None
                else ", never finite",
            ),
        )
    if chance is None:
        return None
    level = _in_units(key, chance)
    rec["chance"] = level
    vals = [(steps[i], col[i]) for i in rows if math.isfinite(col[i])]
    k = _stretch(vals, level)
    start = median([v for _, v in vals[: max(1, min(k, MIN_STRETCH))]])
    rec.update(first_step=vals[0][0], start=start, values=k)
    stuck = k >= max(MIN_STRETCH, MIN_SHARE * len(vals)) and _sits(vals[:k], level)
    if not stuck:
        first = fmt_number(round(vals[0][1], 4))
        if k == 0:
            said = "starts at %s, below chance (%s)" % (first, fmt_number(round(level, 4)))
        else:
            said = (
                "starts at %s, above chance (%s), and is below it from step %s: a usual start"
                % (
                    first,
                    fmt_number(round(level, 4)),
                    fmt_number(vals[k][0]) if k < len(vals) else "-",
                )
            )
        return dict(
            rec,
            kind="healthy",
            unhealthy=False,
            last_step=vals[0][0],
            recovered_step=None,
            verdict=said,
        )
    back = vals[k][0] if k < len(vals) else None
    return dict(
        rec,
        kind="above-chance",
        unhealthy=True,
        last_step=vals[k - 1][0],
        recovered_step=back,
        verdict="above chance (%s) from the start: %d values from step %s to %s%s"
        % (
            fmt_number(round(level, 4)),
            k,
            fmt_number(vals[0][0]),
            fmt_number(vals[k - 1][0]),
            "; below it from step %s" % fmt_number(back)
            if back is not None
            else "; never below it",
        ),
    )


def _in_units(key, chance):
    """ln V in the units a loss named ``key`` is logged in."""
    low = key.lower()
    if "ppl" in low or "perplexity" in low:
        return math.exp(chance)
    if re.search(r"bpb|bpc|bits", low):
        return chance / math.log(2)
    return chance


def _stretch(vals, level):
    """How many of the first ``vals`` lie above ``level`` before :data:`SETTLE` in a row
    (or the rest, fewer) are at or below it."""
    n = len(vals)
    for i in range(n):
        if all(v <= level for _, v in vals[i : i + SETTLE]):
            return i
    return n


def _sits(stretch, level):
    """Whether a loss above ``level`` stays there: the excess of its last third is at
    least half its first third's (a healthy start at ln V falls at once)."""
    third = max(1, len(stretch) // 3)
    first = median([v for _, v in stretch[:third]]) - level
    last = median([v for _, v in stretch[-third:]]) - level
    return first > 0 and last >= 0.5 * first
