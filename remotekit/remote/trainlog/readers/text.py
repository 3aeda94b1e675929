"""Plain text, the format of a log no other reader claims. Its first lines' templates
(:mod:`..templates`) decide how: a log of several line kinds (train and validation lines,
per batch and per epoch) or whose lines state their progress as ``i/N`` is read a line kind
at a time; else each line's ``key=value`` and ``key: value`` pairs (and words as ``step 12
| loss 0.7``) are a row. Lines that announce a save or a resume are events.
"""

from __future__ import annotations

import gc
from collections import Counter

from ..base import CODE_RE, EVENT_HINT_RE, FAST_PAIR_RE, PAIR_RE, WORD_RE, event_kind
from ..source import HEAD_ROWS, Lines, head_lines
from ..templates import mine, most, read_kinds, worth
from . import Reader


class Text(Reader):
    FORMAT = "text"
    WHAT = "text log"
    ORDER = 130
    FALLBACK = True  # never sure (its sniff says 0): it reads what no other reader claims
    FOLLOWS = True
    NAMES = ((r"(?:\.log|\.out|\.txt)$", WHAT, 90),)

    def read(self, src, out):
        with src.open() as f:
            lines = Lines(f)
            head, blocks = head_lines(lines, HEAD_ROWS)
            events = []
            table = mine(head, 0, None, events)
            if worth(table):
                # millions of field strings and matches, none in a cycle: the cyclic
                # collector's passes over them cost ~40% of the reading (1M lines: 1.6 s
                # with it, 0.9 s without), so it rests until they are columns
                collecting = gc.isenabled()
                gc.disable()
                try:
                    n, fast = len(head), most(table)
                    for block in blocks:
                        mine(block, n, table, events, fast)
                        n += len(block)
                    read_kinds(table, events, out, out.run_part)
                finally:
                    if collecting:
                        gc.enable()
                out.lines = n
            else:
                out.caveats.append(
                    "no known trainer line format (nanoGPT, llm.c, Megatron, fairseq): every "
                    "line's key=value / key: value pairs were read as data"
                )
                _read(_again(head, blocks), out)
            out.long = lines.long


def _again(head, blocks):
    """The blocks of lines with the head read already in front."""
    yield head
    yield from blocks


def _text_row(line):
    d = dict(PAIR_RE.findall(line))
    if not d or not any(k.lower() in ("step", "iter", "iteration") for k in d):
        for k, v in WORD_RE.findall(line):
            d.setdefault(k.lower(), v)
    return d


def _read(src, out):
    lines, blocks = head_lines(src, HEAD_ROWS)
    nlines = 0
    keys = Counter()
    plain = Counter()
    parsed = []
    for line in lines:
        # code's pairs are no columns, nor a sign of them; nor are a save's or a resume's
        # ("checkpoint saved (step 50)" names no step column of a log counted by ``iter``)
        if CODE_RE.match(line) or (EVENT_HINT_RE.search(line) and event_kind(line)):
            parsed.append({})
            continue
        d = _text_row(line)
        parsed.append(d)
        keys.update(d.keys())
        plain.update(dict(FAST_PAIR_RE.findall(line)).keys())
    ing = out.table(keys, parsed)
    nlines += len(lines)
    for line, d in zip(lines, parsed):
        _text_line(ing, line, d)
    # The fast path: one regex per line, then the same itemgetter + array.extend as JSON.
    # "Step 12 | loss 0.7" has words, not pairs: then the word regex runs too.
    pairs = FAST_PAIR_RE.findall
    words = WORD_RE.findall if not all(k in plain for k in ing.keys) else None
    ext = ing.flat.extend
    getter = ing.getter
    bkey = ing.bucket_key
    app = ing.codes.append
    for block in blocks:
        nlines += len(block)
        # a word a save or a resume is said in lies within a line: a block without one
        # (most) spares each line its look
        low = "\n".join(block).lower()
        said = "checkpoint" in low or "ckpt" in low or "resum" in low or "restor" in low
        for line in block:
            if said:
                low = line.lower()
                if "checkpoint" in low or "ckpt" in low or "resum" in low or "restor" in low:
                    _text_line(ing, line, None)
                    continue
            d = dict(pairs(line))
            if words is not None:
                for k, v in words(line):
                    d.setdefault(k.lower(), v)
            try:
                ext(map(float, getter(d)))
            except (KeyError, ValueError, TypeError):
                ing.fix_partial()
                _text_line(ing, line, None)
                continue
            if bkey is not None:
                app(ing.code(d.get(bkey)))
        ing.flush()
    out.lines = nlines


def _text_line(ing, line, d):
    """A line off the fast path: an event, a row (only with the log's step key, when it has
    one: a number is a step only where the log says so), or skipped."""
    event = ing.maybe_event(line)
    if CODE_RE.match(line):
        d = None  # source code or a shell trace printed before the log: no row
    elif d is None:
        d = _text_row(line)
    if d and (not ing.step_key or ing.step_key in d):
        ing.slow(d, quiet=event)
    elif line.strip() and not event:
        ing.skipped += 1
