"""A run that never learned, or broke at once, for ``trainlog.py``: the loss non-finite from
its first logged value, or above the chance level from the start and staying there (a
uniform guess over the vocabulary or the classes scores ln V, ln C: a loss above it is
worse than guessing), with the step where it recovered if it did; with no chance level, a
loss flat from its first value to its last (no fall beyond its own scatter): it never
learned.

The chance level comes from ``--vocab-size`` when given, else from the log itself: a
vocabulary or class count stated once in its first lines (a config dump, a header:
``vocab_size=50257``, ``"num_classes": 10``, ``ntokens = 33278``); a count stated with
several values is a series, not a setting.
"""

from __future__ import annotations

import math
import re
from itertools import chain

from ..infile import open_regular
from .base import FMAX, ORIGIN_STRIDES, fmt_number, is_missing, median

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
# Flat from the start (no chance level to judge by): the loss's values in blocks (10, fewer
# for a short loss: FLAT_BLOCK values a block at least); their medians all within
# FLAT_SIGMA standard errors of a block's median (from the values' own scatter around it)
# or FLAT_REL of the first block's level, of the first block's median: no fall worth the
# name, from the first value to the last.
FLAT_BLOCK = 5
# values at least: the start's two blocks and one after them (an epoch-level log of 16
# epochs is judged; fewer say nothing about a trend)
MIN_FLAT = 3 * FLAT_BLOCK
# and at ln 2 or above: a cross-entropy at chance over 2 classes or more is never below it,
# and a loss that sits below it (a converged loss, a log that starts late) learned something
FLAT_FLOOR = math.log(2)
FLAT_SAMPLE = 2000  # values of a block its median and scatter are read from, at most
FLAT_BLOCKS = 10
FLAT_SIGMA = 3.0
FLAT_REL = 0.01


def given_chance(count):
    """``(ln count, words)`` of a vocabulary or class count given by ``--vocab-size``."""
    return math.log(count), "--vocab-size %d: ln %d = %s" % (
        count,
        count,
        fmt_number(round(math.log(count), 4)),
    )


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


def onset(label, key, col, steps, chance=None, chance_from=None, flat=True):
    """The ``onset`` record's fields of metric ``label`` (column ``key``, values ``col`` at
    ``steps``, missing values left out), or None when there is nothing to say: no chance
    level, a finite first value and (``flat``: looked for) a loss that moved. ``chance``
    (ln V or ln C) is scaled to the loss's own units: a perplexity is compared with the
    count itself, bits with log2. Reads the start of the column only (and counts its
    finite values when a stretch is long enough); the whole of it for a flat loss."""
    rows = (i for i, v in enumerate(col) if v == v or not is_missing(v))
    first = next(rows, None)
    if first is None:
        return None
    rec = dict(metric=label, key=key, chance=None, chance_from=chance_from)
    if not -FMAX <= col[first] <= FMAX:
        return dict(rec, **_nonfinite(col, steps, first, rows))
    if chance is None:
        return _flat(rec, col, steps) if flat else None
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


def _levels(col, steps, rel):
    """A series cut into blocks from its first value: (the indexes of its finite values,
    the number of blocks, each block's median, the values' scatter around their block's
    median (the median absolute deviation, as a sigma), the start (the first two blocks'
    median), a block median's standard error against the start), or None when it has
    fewer than :data:`MIN_FLAT` values or does not start at the run's start
    (:func:`_from_the_start`). With 3 parts (one after the start's two) it is judged only
    when its noise lets a change of ``rel`` of the start show (``FLAT_SIGMA`` standard
    errors within it): one noisy comparison is no evidence that nothing moved, a precise
    one is (a 16-epoch loss creeping 0.5%)."""
    idx = [i for i, v in enumerate(col) if -FMAX <= v <= FMAX]
    n = len(idx)
    if n < MIN_FLAT or not _from_the_start(steps, idx):
        return None
    nb = min(FLAT_BLOCKS, n // FLAT_BLOCK)
    size = n // nb
    blocks = [idx[b * size : (b + 1) * size] for b in range(nb - 1)]
    blocks.append(idx[(nb - 1) * size :])
    # a long series: each block by an even sample of FLAT_SAMPLE values (a median and a
    # scatter need no more; a million values sorted would cost a second)
    thin = -(-size // FLAT_SAMPLE)
    blocks = [b[::thin] for b in blocks]
    size = len(blocks[0])
    meds = [median([col[i] for i in b]) for b in blocks]
    dev = sorted(abs(col[i] - m) for b, m in zip(blocks, meds) for i in b)
    scatter = 1.4826 * dev[len(dev) // 2]
    # the start: the first two blocks' median; a median's standard error is sqrt(pi / 2)
    # sigma / sqrt(values), and a block's difference from the start has sqrt(1 + 1/2) that
    start = median([col[i] for b in blocks[:2] for i in b])
    err = 1.2533 * scatter / math.sqrt(size) * math.sqrt(1.5)
    if nb < 4 and FLAT_SIGMA * err > rel * abs(start):
        return None
    return idx, nb, meds, scatter, start, err


def _flat(rec, col, steps):
    """The fields of a loss flat from its first value to its last (the median of each
    later block within :data:`FLAT_SIGMA` standard errors or :data:`FLAT_REL` of the
    start, the first two blocks' median; none below :data:`FLAT_FLOOR`; the first value
    at the run's start: :func:`_from_the_start`), else None. The scatter is the
    values' own around their block's median (the median absolute deviation, as a sigma):
    per-batch noise is wide, a trend moves the medians, not the scatter within a block."""
    levels = _levels(col, steps, FLAT_REL)
    if levels is None:
        return None
    idx, nb, meds, scatter, start, err = levels
    n = len(idx)
    band = max(FLAT_SIGMA * err, FLAT_REL * abs(start))
    low, high = min(meds[2:]), max(meds[2:])
    # no fall beyond the band; a rise beyond twice it is no flat loss either (it diverged)
    if start - low > band or high - start > 2 * band or low < FLAT_FLOOR:
        return None
    first, last = idx[0], idx[-1]
    said = (
        "flat from its first value to its last: %d values from step %s to %s, the median "
        "of each of %d parts within %s of the start's (%s; lowest %s, not below ln 2), no "
        "fall beyond its own scatter (%s a value): it never learned (or it started from a "
        "trained model)"
        % (
            n,
            fmt_number(steps[first]),
            fmt_number(steps[last]),
            nb,
            fmt_number(round(band, 4)),
            fmt_number(round(start, 4)),
            fmt_number(round(low, 4)),
            fmt_number(round(scatter, 4)),
        )
    )
    return dict(
        rec,
        kind="flat",
        unhealthy=True,
        first_step=steps[first],
        last_step=steps[last],
        values=n,
        recovered_step=None,
        start=start,
        verdict=said,
    )


RISE_REL = 0.1  # a score that learned rises beyond this share of its start (or its noise)


def never_rose(label, key, col, steps):
    """The ``onset`` record's fields of a score the run maximises (``label``, column
    ``key``) that never rose from its first level: no later part's median above the start
    (the first two parts' median) beyond :data:`FLAT_SIGMA` standard errors or
    :data:`RISE_REL` of it; else None. The first value at the run's start, as for a flat
    loss (:func:`_from_the_start`)."""
    levels = _levels(col, steps, RISE_REL)
    if levels is None:
        return None
    idx, nb, meds, _, start, err = levels
    n = len(idx)
    band = max(FLAT_SIGMA * err, RISE_REL * abs(start))
    best = max(meds[2:])
    if best - start > band:
        return None
    first, last = idx[0], idx[-1]
    said = (
        "never rose from its first level: %d values from step %s to %s, the best median of "
        "%d parts %s against the start's %s (a rise within %s is none): it never learned (or "
        "it started trained)"
        % (
            n,
            fmt_number(steps[first]),
            fmt_number(steps[last]),
            nb,
            fmt_number(round(best, 4)),
            fmt_number(round(start, 4)),
            fmt_number(round(band, 4)),
        )
    )
    return dict(
        metric=label,
        key=key,
        chance=None,
        chance_from=None,
        kind="flat",
        unhealthy=True,
        first_step=steps[first],
        last_step=steps[last],
        values=n,
        recovered_step=None,
        start=start,
        verdict=said,
    )


def _from_the_start(steps, idx):
    """Whether the values at ``idx`` begin at the run's start: the first logged step within
    :data:`.base.ORIGIN_STRIDES` strides of 0. A part that begins later (a resume at step
    11840) is a trained model's: its loss need not fall."""
    head = [steps[b] - steps[a] for a, b in zip(idx[:50], idx[1:51])]
    stride = median([d for d in head if d > 0] or [1.0])
    return steps[idx[0]] <= ORIGIN_STRIDES * stride


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
