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
from itertools import chain

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
    units: a perplexity is compared with the count itself, bits with log2. Reads the start
    of the column only (and counts its finite values when a stretch is long enough)."""
    rows = (i for i, v in enumerate(col) if v == v or not is_missing(v))
    first = next(rows, None)
    if first is None:
        return None
    rec = dict(metric=label, key=key, chance=None, chance_from=chance_from)
    if not -FMAX <= col[first] <= FMAX:
        return dict(rec, **_nonfinite(col, steps, first, rows))
    if chance is None:
        return None
    level = _in_units(key, chance)
    rec["chance"] = level
    vals = ((steps[i], col[i]) for i in chain([first], rows) if -FMAX <= col[i] <= FMAX)
    stretch, back = _stretch(vals, level)
    k = len(stretch)
    start = median([v for _, v in stretch[:MIN_STRETCH]] or [col[first]])
    rec.update(first_step=steps[first], start=start, values=k)
    stuck = k >= MIN_STRETCH and k >= MIN_SHARE * _finite_count(col) and _sits(stretch, level)
    back = back[0] if back is not None else None
    chance_said = fmt_number(round(level, 4))
    if not stuck:
        said = "starts at %s, below chance (%s)" % (fmt_number(round(col[first], 4)), chance_said)
        if k:
            said = (
                "starts at %s, above chance (%s), and is below it from step %s: a usual start"
                % (
                    fmt_number(round(col[first], 4)),
                    chance_said,
                    fmt_number(back) if back is not None else "-",
                )
            )
        return dict(
            rec,
            kind="healthy",
            unhealthy=False,
            last_step=steps[first],
            recovered_step=None,
            verdict=said,
        )
    return dict(
        rec,
        kind="above-chance",
        unhealthy=True,
        last_step=stretch[-1][0],
        recovered_step=back,
        verdict="above chance (%s) from the start: %d values from step %s to %s%s"
        % (
            chance_said,
            k,
            fmt_number(stretch[0][0]),
            fmt_number(stretch[-1][0]),
            "; below it from step %s" % fmt_number(back)
            if back is not None
            else "; never below it",
        ),
    )


def _nonfinite(col, steps, first, rows):
    """The fields of a loss non-finite from its first value (at index ``first``; ``rows``:
    the indices of the values after it): how many in a row, and where it turned finite."""
    k, last, back = 1, first, None
    for i in rows:
        if -FMAX <= col[i] <= FMAX:
            back = steps[i]
            break
        k, last = k + 1, i
    return dict(
        kind="nonfinite",
        unhealthy=True,
        first_step=steps[first],
        last_step=steps[last],
        values=k,
        recovered_step=back,
        start=None,
        verdict="non-finite from its first logged value (%s at step %s): %d value(s)%s"
        % (
            col[first],
            fmt_number(steps[first]),
            k,
            ", finite from step %s" % fmt_number(back) if back is not None else ", never finite",
        ),
    )


def _finite_count(col):
    """How many of ``col``'s values are finite (all of them, when their sum is)."""
    if math.isfinite(sum(col)):
        return len(col)
    return sum(1 for v in col if -FMAX <= v <= FMAX)


def _in_units(key, chance):
    """ln V in the units a loss named ``key`` is logged in."""
    low = key.lower()
    if "ppl" in low or "perplexity" in low:
        return math.exp(chance)
    if re.search(r"bpb|bpc|bits", low):
        return chance / math.log(2)
    return chance


def _stretch(vals, level):
    """``(stretch, settled)``: the first of ``vals`` (``(step, value)``, an iterator, read
    only as far as needed) that lie above ``level`` before :data:`SETTLE` in a row (or the
    rest, fewer) are at or below it, and the first of those (None: never)."""
    out, below = [], []
    for sv in vals:
        if sv[1] <= level:
            below.append(sv)
            if len(below) == SETTLE:
                break
        else:
            out.extend(below)
            out.append(sv)
            below = []
    return out, (below[0] if below else None)


def _sits(stretch, level):
    """Whether a loss above ``level`` stays there: the excess of its last third is at
    least half its first third's (a healthy start at ln V falls at once)."""
    third = max(1, len(stretch) // 3)
    first = median([v for _, v in stretch[:third]]) - level
    last = median([v for _, v in stretch[-third:]]) - level
    return first > 0 and last >= 0.5 * first
