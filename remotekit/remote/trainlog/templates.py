"""Line templates of a text log no trainer format claims, mined as log-template miners
(Drain, He et al. 2017) do: a line's constant words and separators are its template, its
numbers the fields. Each line kind is read as its own table, never merged with another:

- a template that recurs is a series family, its fields named by the words before them
  (``loss: 0.5``, ``loss 0.5``, ``loss, 0.5``, ``loss=0.5`` alike);
- train, validation and test lines are told apart by their template's own words (``train``,
  ``valid``, ``val``, ``eval``, ``test``), or, for lines that name none, by the header line
  right before each (``***** Evaluating ... *****`` then ``ppl: 2.01``): a held-out line's
  series are named so
  (``val/loss``), the train lines' ``train/...``; a template once per epoch beside a finer
  one of its kind is an epoch-level series (``epoch/...``);
- the step comes from the line itself: a global step where the line states one; else
  epoch x batches-per-epoch + batch where it states ``batch i/N``, ``[i/N]`` or ``i/N
  batches``, or a counter beside the epoch that starts again at each new epoch (a step
  within the epoch: its largest value is the epoch's count), or a counter in brackets
  (``[e, i]``: the epoch and the batch; ``Train: e [i/N]``; a ``[N]`` that climbs at every
  line, first or after a logger's prefix); a line with neither takes the step of the train
  line before it (so a validation line sits at the step it was computed at); else the row.
  It is said which;
- the counter is checked: one that falls and climbs again is a second run (or a restart)
  appended to the same file, and a step logged again with other values a restart: each is
  said, and the last part is read unless ``run_part`` chooses another;
- text lines (source code, a shell trace, a traceback, a config printed once) are no data:
  a template seen once is no series, and code or a traceback frame never is one;
- templates a word apart (:func:`merged`: ``loss=0.3 (best)`` beside ``loss=0.3``, a phase
  name in one place) are one line kind where the evidence says so: their lines never state
  the same counter (they continue one series), or, with no counter, the word takes three
  values or more (a variable, as Drain reads it). A word that says the kind (``Train`` /
  ``Valid``), or lines that log the same steps (``[rank0]`` / ``[rank1]``), keep them apart;
- a line that stops before the unnamed fields its kind's other lines end with (the first,
  with no time since the one before) is of that kind (:func:`_cut_short`).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from heapq import merge as _interleave
from itertools import compress, islice, repeat
from operator import add, eq, ge, itemgetter, lt, mul, ne, not_, sub

from ..protocol import mask
from .base import (
    CODE_RE,
    EVENT_HINT_RE,
    EVENT_STEP_RE,
    MISSING,
    SOURCE_LINE_RE,
    event_kind,
    loss_name,
    lr_name,
    to_float,
)
from .source import HEAD_ROWS

# A number as a field: not inside a word (``resnet110``, ``fc1``), with the blanks around it
# (padding that changes with the number's width is no part of the template).
# A non-finite value is a field as a number is, its unit after it too (``step_avg:nanms``
# before a timer has an average, ``step_avg:123.92ms`` after): one line kind, not two.
_UNIT = r"(?:ms|us|µs|ns|sec|secs|min|mins|hr|hrs)\b"
# A number with a magnitude suffix (``smpl:32K``, ``2M``, tqdm's ``16.4k``: a humanised
# count) is one field worth the number times its unit: a count that crosses a thousand does
# not start another line kind, and its value is the count's.
MAGNITUDE = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_SUFFIX = r"(?-i:[KMGTB]|k)(?![A-Za-z0-9_])"
_NUM = (
    r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:"
    + _SUFFIX
    + r")?|[-+]?(?:nan|inf(?:inity)?)(?:\b|(?="
    + _UNIT
    + "))"
)
SPLIT_RE = re.compile(r"\s*(?<![A-Za-z_\d.])(" + _NUM + r")\s*", re.I)
# the separators between a field's name and the field before it
_SEGMENT_RE = re.compile(r"[|,;\t\[\](){}<>]+|\s-+\s|={2,}>?|-{2,}>?")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_/.]*")

HELD_OUT = {"val": "val", "valid": "val", "validation": "val", "eval": "val", "dev": "val"}
HELD_OUT.update({"evaluation": "val", "evaluating": "val", "validating": "val"})
HELD_OUT.update({"test": "test", "testing": "test"})
TRAIN_WORDS = ("train", "training")
EPOCH_WORDS = ("epoch", "epochs")
STEP_WORDS = ("step", "global_step", "globalstep", "iter", "iteration", "it", "update", "updates")
BATCH_WORDS = ("batch", "batches", "iter", "iters", "iteration", "step", "steps", "it")
EVENT_WORDS = ("checkpoint", "ckpt", "resum", "restor")
# a rate in bytes a second: a progress bar of a file moved (a model pushed, a dataset
# fetched), not of training, whatever it counts
_TRANSFER_RE = re.compile(r"(?<![A-Za-z])[kMGT]?i?B/s\b")


def kind_of(words):
    """``"val"``, ``"test"``, ``"train"`` or None: the first word of ``words`` that says."""
    for w in words:
        lw = w.lower()
        if lw in HELD_OUT:
            return HELD_OUT[lw]
        if lw in TRAIN_WORDS:
            return "train"
    return None


class Template:
    """One line kind: its constant parts, the lines (their index in the file) and the fields
    as text, in segments in line order: lists of rows (a line's fields, split one by one)
    and :class:`Block` s (a block's lines of the template most lines are of, read by its
    regex at once and kept as numbers, its text kept for the rare reader of a field's
    text)."""

    __slots__ = (
        "_at_row",
        "at",
        "bar",
        "columns",
        "consts",
        "first",
        "rows",
        "rx",
        "segs",
        "width",
        "word",
    )

    def __init__(self, consts, first):
        self.consts = consts
        self.width = len(consts) - 1
        self.at = array("l")
        self.rows = []  # the last segment when it is a list: where the next split row goes
        self.segs = [self.rows]
        self.first = first  # the first line of this kind (what a note quotes)
        self.columns = {}
        self.rx = None  # its block regexes (any text, ASCII text), once it is the fast one
        self._at_row = None  # (rows, starts of the segments), for cell()
        self.word = None  # the word that keeps it apart from a template a word away
        self.bar = False  # its lines are a progress bar's redraws (:data:`BAR_RE`)

    def add_block(self, text, cols):
        """The block ``text``'s lines of this template, ``cols`` their fields as text, a
        tuple a field: each field kept as numbers only where it is not the first line's own
        text throughout (a constant field costs a count, no conversion)."""
        first = self.segs[0][0]
        n = len(cols[0])
        vals = []
        for j in range(self.width):
            c = cols[j]
            # (the ends first: a field that changes within the block is told in two looks)
            if c[0] == first[j] == c[-1] and c.count(first[j]) == n:
                vals.append(None)
            elif c[0] == c[-1] and c.count(c[0]) == n:  # one text in the block (an epoch)
                v, state, alt = _convert(c[:1])
                vals.append((v * n, state, alt and alt * n))
            else:  # read while the block's texts are in the caches (later: 3x slower)
                vals.append(_convert(c))
        self.segs.append(Block(text, n, vals))
        self.rows = []
        self.segs.append(self.rows)

    def _rows(self, seg):
        """A segment's rows of text."""
        if isinstance(seg, list):
            return seg
        w = self.width
        return [r for r in self.rx[0].findall(seg.text) if not r[w]]

    def texts(self, j):
        """Field ``j`` of every line, as text."""
        out = []
        for seg in self.segs:
            out.extend(map(itemgetter(j), self._rows(seg)))
        return out

    def cell(self, i, j):
        """Field ``j`` of line ``i`` (of this kind), as text."""
        if self._at_row is None or self._at_row[0] != len(self.at):
            starts, n = [], 0
            for seg in self.segs:
                starts.append(n)
                n += len(seg) if isinstance(seg, list) else seg.n
            self._at_row = (len(self.at), starts, {})
        _, starts, cache = self._at_row
        k = bisect_right(starts, i) - 1
        while not (self.segs[k] if isinstance(self.segs[k], list) else self.segs[k].n):
            k -= 1  # an empty list segment starts where the next one does
        rows = cache.get(k)
        if rows is None:
            rows = cache[k] = self._rows(self.segs[k])
        return rows[i - starts[k]][j]

    def column(self, j):
        """Field ``j`` of every line, as numbers (once): as :func:`~.source.number_column`
        reads the whole column (whole numbers by ``int`` where all are, else ``float``),
        "nan", "Inf" as a trainer prints them, a word missing."""
        out = self.columns.get(j)
        if out is None:
            first = self.segs[0][0][j]
            parts = []
            for seg in self.segs:
                if isinstance(seg, list):
                    if seg:
                        parts.append(_convert(list(map(itemgetter(j), seg))))
                elif seg.vals[j] is None:
                    v, state, alt = _convert([first])
                    parts.append((v * seg.n, state, alt and alt * seg.n))
                else:
                    parts.append(seg.vals[j])
            state = min(p[1] for p in parts)
            out = array("d")
            for v, s, alt in parts:
                out.extend(alt if s > state and alt is not None else v)
            self.columns[j] = out
        return out

    def varies(self, j):
        """Whether field ``j`` takes more than one value: a field that never changes is a
        constant of the template (a logger's source line, a date), as Drain merges it."""
        first = self.segs[0][0][j]
        for seg in self.segs:
            if isinstance(seg, list):
                c = list(map(itemgetter(j), seg))
                if c.count(first) != len(c):
                    return True
            elif seg.vals[j] is not None:
                return True
        return False


class Block:
    """A block's lines of the fast template: its text, how many lines of the template it
    holds, and each field as :func:`_convert` read it (None: the first line's text
    throughout)."""

    __slots__ = ("n", "text", "vals")

    def __init__(self, text, n, vals):
        self.text = text
        self.n = n
        self.vals = vals


def _convert(cells):
    """``(values, how, alt)`` of cells of text: ``how`` 2 read by ``int`` (all whole), 1 by
    ``float``, 0 by ``to_float`` (a word: missing), as :func:`~.source.number_column` and
    :meth:`Template.column` read a column; ``alt``: the values as ``float`` reads them where
    they differ from ``int``'s (``-0``), for a column read by ``float`` after all."""
    try:
        v = array("d", map(int, cells))
    except (ValueError, TypeError, OverflowError):
        pass
    else:
        alt = None
        if 0.0 in v:
            f = array("d", map(float, cells))
            if f.tobytes() != v.tobytes():
                alt = f
        return v, 2, alt
    try:
        return array("d", map(float, cells)), 1, None
    except (ValueError, TypeError):
        return array("d", map(value, cells)), 0, None


def value(text):
    """A field's text as a number: as :func:`~.base.to_float` reads it, a magnitude suffix
    (``32K``, ``1.5M``) times its unit; a word: missing."""
    unit = MAGNITUDE.get(text[-1:]) if isinstance(text, str) else None
    if unit is not None:
        try:
            return float(text[:-1]) * unit
        except ValueError:
            pass
    return to_float(text)


def mine(lines, start=0, table=None, events=None, fast=None):
    """Lines into templates (``{key: Template}``), in one pass: one regex split a line, the
    template's key its constants joined. ``events``: ``[(index, line)]`` of the lines that
    may announce a save or a resume. ``fast``: a data :class:`Template` most lines are of,
    matched first by its own regex (:func:`compiled`: one ``findall`` over the block, a
    row a line, its fields kept as numbers), the split only for the others. Returns the
    table."""
    table = {} if table is None else table
    rest = range(start, start + len(lines))
    if fast is not None and lines:
        # the block's lines of the fast template at C speed, the others one by one
        if fast.rx is None:
            fast.rx = compiled(fast)
        text = "\n".join(lines) + "\n"
        found = fast.rx[text.isascii()].findall(text)  # a tuple a line, whatever its kind
        cols = list(zip(*found))
        # a line of another kind: its text in the last group (with its newline, never "")
        miss = cols[fast.width]
        if miss.count("") == len(miss):  # a block of train lines only: the most of them
            fast.add_block(text, cols)
            fast.at.extend(rest)
            return table
        hit = list(map(not_, miss))
        if any(hit):
            fast.add_block(text, list(zip(*compress(found, hit))))
            fast.at.extend(compress(rest, hit))
        rest = list(compress(rest, map(not_, hit)))
        lines = [m[:-1] for m in compress(miss, map(not_, hit))]
    split = SPLIT_RE.split
    get = table.get
    event = EVENT_HINT_RE.search
    unbar = BAR_RE.sub
    for i, line in zip(rest, lines):
        bar = False
        if "<" in line and "[" in line:  # (a cheap look first: most lines are no bar)
            cut = unbar(_unbar, line)
            if cut != line:
                line, bar = cut.rstrip(), True
        parts = split(line)
        if len(parts) > 1:
            consts = parts[0::2]
            key = "\x00".join(consts)
            t = get(key)
            if t is None:
                t = table[key] = Template(consts, line)
            t.at.append(i)
            t.rows.append(parts[1::2])
            t.bar = t.bar or bar
        if events is not None and event(line):
            events.append((i, line))
    return table


# A tqdm progress bar's state: ``50%|█████     | 1/2 [00:00<00:00,  5.87it/s`` (the percent
# and the bar drawn optional, ``?`` where a time or a rate is not known yet), then either
# its end (``]``) or its postfix (``, loss=0.35, v_num=vakz]``). The drawing, the times and
# the rate change at every redraw: as constants they would make each redraw a line kind of
# its own (a bar at 0%, at 50%, at 100%); the postfix is the data.
# (A number starts where no digit stands before it: a long run of digits is tried once, not
# from each of its digits.)
BAR_RE = re.compile(
    r"(?:(?<!\d)(\d+)%\|[^|\n]*\|\s*)?(?<!\d)(\d+/\d+)\s*\[[\d:]+<[\d:?]+,\s*(?:[\d.]+|\?)\s*"
    r"(?:[A-Za-z]*/s|s/[A-Za-z]+)(\]|(?=,))"
)


def _unbar(m):
    """A bar's state without its drawing, times and rate: ``p%|| i/N [`` before a postfix
    (the percent kept: a field between the bar's description and its count, as it was, so
    that ``train:  12%|...| 12/100``'s count is no field named ``train``); nothing for a bar
    without one (the progress of something, glued to another line or alone)."""
    if m.group(3):
        return ""
    return (m.group(1) + "%|| " if m.group(1) else "") + m.group(2) + " ["


def compiled(t):
    r"""The block regexes of template ``t``: a line of it (its constants as they are, a
    number group between each two, the blanks around a number free: ``SPLIT_RE``'s template
    of the same line) and its newline, or else any line, whole, in one more group. Two of
    them: for any text, and for ASCII text (``str.isascii``), where ``\d`` and ``\s`` are
    the ASCII characters they match spelled out (a class without a category: 1.4x faster)."""
    # a loose number (what is no number reads as missing): the constants decide the match,
    # and a class is 1.5x faster than SPLIT_RE's exact alternatives here. Blanks stop at
    # the newline: a match is one line, as a line's own match was. A magnitude suffix
    # (``32K``) is in the class too: an optional suffix after it cost the match ~35%, and
    # where a constant starts with such a letter (``12Bx``) the match gives it back
    out = []
    for blank, digit in ((r"[^\S\n]", r"\d"), (r"[\t\x0b\x0c\r\x1c-\x1f ]", "0-9")):
        num = r"%s*([-+%s.eEKMGTBk]+|(?i:[-+]?(?:nan|inf(?:inity)?)))%s*" % (blank, digit, blank)
        out.append(re.compile(num.join(re.escape(c) for c in t.consts) + r"\n|(.*\n)"))
    return tuple(out)


def most(table):
    """The data template most lines are of, or None."""
    data = [t for t in table.values() if is_data(t)]
    return max(data, key=lambda t: len(t.at)) if data else None


def _name(before):
    """A field's name from the constant text before it: the words of its last segment (up
    to three, ``valid loss`` -> ``valid_loss``); a counter word ends the name (``end of
    epoch`` -> ``epoch``); "" when no word is there (``[640/``)."""
    segs = [s for s in _SEGMENT_RE.split(before) if s.strip(" :=#/")]
    if not segs:
        return ""
    words = _WORD_RE.findall(segs[-1])
    words = [w.strip("./").lower() for w in words if w.strip("./")]
    if not words:
        return ""
    if words[-1] in EPOCH_WORDS or words[-1] in STEP_WORDS or words[-1] in BATCH_WORDS:
        return words[-1]
    return "_".join(words[-3:])


class Kind:
    """A data template read: its kind (train/val/test), field names, counters, steps."""

    def __init__(self, t):
        self.t = t
        c = t.consts
        self.names = [_name(c[j]) for j in range(t.width)]
        self.kind = kind_of(_WORD_RE.findall(" ".join(c))) or "train"
        n = self.names
        self.epoch = next((j for j in range(t.width) if n[j] in EPOCH_WORDS), None)
        # ``Epoch 3/100``, ``Epoch [3/100]``: the epoch and the number of epochs
        self.of = None
        if self.epoch is not None and self.epoch + 1 < t.width:
            self.of = self.epoch + 1 if c[self.epoch + 1].lstrip().startswith("/") else None
        self.step = next((j for j in range(t.width) if n[j] in STEP_WORDS[:5]), None)
        # ``i/N``: a field the next one follows after a "/" (``[640/60000``, ``200/ 2983
        # batches``, ``batch: 3/100``), unless it is the epoch's own (``epoch 3/10``)
        self.progress = _progress(t, n, self.epoch)
        if self.progress is not None and n[self.progress] == "step" and self.step == self.progress:
            self.step = None  # ``step 3/100``: per epoch or in all, the total says
        # ``[3][40/196]``, ``Train: 3 [40/196]``: the number just before a bracketed ``i/N``,
        # bracketed itself or named by no word but the line's kind, is its epoch
        j = self.progress
        if (
            self.epoch is None
            and j
            and (
                (c[j].strip() == "][" and c[j - 1].rstrip().endswith("["))
                or (c[j].strip() == "[" and (not n[j - 1] or kind_of([n[j - 1]]) is not None))
            )
        ):
            self.epoch = j - 1
        if self.step is None and self.progress is None and self.epoch is None:
            self.epoch, self.step = _pair(t, n)
        if self.step is None and self.progress is None and self.epoch is None:
            self.step = _lead(t, n)
        self.counters = {self.epoch, self.step, self.progress, self.of}
        if self.progress is not None:
            self.counters.add(self.progress + 1)
        self.steps = None
        self.how = ""
        self.counter = "step"  # what the run's counter counts, as the notes say it
        self.marked = None  # a line kind stating no epoch: the epoch of the marker before each
        self._fields = None

    def fields(self):
        """``[(j, name)]``: the fields that are series (named, no counter, not constant; a
        constant lr beside fields that are)."""
        if self._fields is None:
            self._fields = self._series_fields()
        return self._fields

    def _series_fields(self):
        out, seen, steady = [], {}, []
        for j, name in enumerate(self.names):
            if not name or j in self.counters:
                continue
            if not self.t.varies(j):
                if lr_name(name):
                    steady.append(j)
                continue
            k = seen[name] = seen.get(name, 0) + 1
            out.append((j, name if k == 1 else "%s_%d" % (name, k)))
        if out:  # a constant lr beside series (not on a config line of constants alone)
            out = sorted(out + [(j, self.names[j]) for j in steady if self.names[j] not in seen])
        return out

    def rounded(self):
        """Whether the step the lines state is printed rounded to a magnitude (``1K``)."""
        if self.step is None:
            return False
        return any(x[-1:] in MAGNITUDE for x in self.t.texts(self.step))

    def epochs(self):
        """The epoch of each line: the one it states, else the one of the ``Epoch i/N``
        line before it (Keras prints the epoch on a line of its own), else None."""
        if self.epoch is not None:
            return self.t.column(self.epoch)
        return self.marked

    def own_steps(self, e0):
        """The steps the lines state, and how, or None (the line states no counter)."""
        t = self.t
        if self.step is not None:
            self.how = "the step each line states (%r)" % self.names[self.step]
            if not self.names[self.step]:
                self.how = "the unnamed number in brackets each line states (a counter: it climbs)"
            col = t.column(self.step)
            ep = self.epochs()
            m = _inner(col, ep) if ep is not None else None
            if m is not None:  # a step within the epoch: epoch x its count + the step
                said = self.names[self.step] or "batch"
                self.how = (
                    "epoch x %s + %s, from the epoch and the %s each line states (it starts "
                    "again at every new epoch: a count within the epoch, of %s at most)"
                    % (_fmt(m), said, repr(said) if self.names[self.step] else said, _fmt(m))
                )
                return array("d", map(add, map(mul, map(sub, ep, repeat(e0)), repeat(m)), col))
            if any(map(ge, col, islice(col, 1, None))) and self.rounded():
                even = unrounded(col, t.texts(self.step))
                if even is not None:
                    self.how += (
                        ", printed rounded (%r): at one stride of %s, which every printed "
                        "value agrees with to its rounding"
                        % (_rounded_text(t, self.step), _fmt(even[1] - even[0]))
                    )
                    return even
            return col
        if self.progress is None:
            return None
        i = t.column(self.progress)
        ep = self.epochs()
        if ep is not None:
            if not t.varies(self.progress + 1):  # one N throughout: not converted
                m = value(t.cell(0, self.progress + 1))
                self.how = "epoch x %s + i, from the epoch and the 'i/N' each line states" % _fmt(m)
                # (e - e0) * m + i, mapped in C: a generator costs 3x over 1M lines
                return array("d", map(add, map(mul, map(sub, ep, repeat(e0)), repeat(m)), i))
            n = t.column(self.progress + 1)
            self.how = "epoch x N + i, from the epoch and the 'i/N' each line states"
            return array("d", map(add, map(mul, map(sub, ep, repeat(e0)), n), i))
        n = t.column(self.progress + 1)
        # no epoch: each time i starts again is a new epoch
        out, base = array("d"), 0.0
        for k in range(len(i)):
            if k and i[k] < i[k - 1]:
                base += n[k - 1]
            out.append(base + i[k])
        self.how = "epochs x N + i, from the 'i/N' each line states (its restarts count epochs)"
        return out


def _lead(t, names):
    """The field of a number alone in brackets (``[10]\\t...``, ``(3) ...``), at the start of
    every line or after a logger's prefix (absl's ``I0325 14:04:37.61 ... writer.py:48] [2000]
    eval_loss=...``), unnamed, a whole number that climbs at every line: the line's own
    counter (a boosting round, an iteration, a summary's step); the first such, else None."""
    c = t.consts
    if t.width < 2:
        return None
    for j in range(t.width - 1):
        opens = c[j].strip() in ("[", "(") if not j else c[j].endswith((" [", " ("))
        if names[j] or not opens or not c[j + 1].lstrip().startswith(("]", ")")):
            continue
        if not t.varies(j):
            continue
        col = t.column(j)
        if not _whole(col):
            continue
        if all(map(lt, col, islice(col, 1, None))):
            return j
    return None


def _pair(t, names):
    """``(epoch, step)``: the fields of two whole numbers alone in brackets at the start of
    every line (``[2,  4000] loss: 1.374``, PyTorch's tutorial print), unnamed, the first
    changing less often than the second (an epoch; the second a batch: counted within the
    epoch, or the run's own, as :func:`_inner` tells); else ``(None, None)``."""
    c = t.consts
    if t.width < 3 or names[0] or names[1] or c[0].strip() not in ("[", "("):
        return None, None
    if c[1].strip() != "," or not c[2].lstrip().startswith(("]", ")")) or not t.varies(1):
        return None, None
    ep, col = t.column(0), t.column(1)
    if not (_whole(ep) and _whole(col)):
        return None, None
    if sum(map(ne, ep, islice(ep, 1, None))) >= sum(map(ne, col, islice(col, 1, None))):
        return None, None  # the outer counter changes less often than the inner one
    return 0, 1


def _inner(col, ep):
    """The count per epoch of a counter that starts again at every new epoch (``epoch: 2
    step: 5`` after ``epoch: 1 step: 15``: a step within the epoch, not the run's), or None
    (a counter that climbs on across epochs is the run's own). The evidence: the epoch
    rises at least once, and at every rise the counter does not climb; the count is its
    largest value. A counter that falls where the epoch falls too (or stays) is no new
    epoch: the composed step falls there, and that is said as a second run or a restart."""
    rises = list(compress(range(1, len(ep)), map(lt, ep, islice(ep, 1, None))))  # in C
    if not rises or any(col[i] > col[i - 1] for i in rises):
        return None
    if not any(col[i] < col[i - 1] for i in rises) and len(set(col)) > 1:
        return None  # equal at every rise but varying: no restart seen
    m = max(col)
    return m if m > 0 else None


def _progress(t, names, epoch):
    """The field ``i`` of the line's ``i/N`` (``[640/60000``, ``200/ 2983 batches``,
    ``batch: 3/100``), or None: a pair of two numbers only (``2022/08/22``, a date, is a
    chain of three), not the epoch's own (``epoch 3/10``), not one whose ``i`` never moves
    while its ``N`` does (``0/50``, ``0/100``: N is what counts), with ``i`` never past ``N``
    (``07/03``: a month and a day). Where several are, the one whose ``i`` changes from line
    to line most often (a batch counter does at every line, a date's day seldom)."""
    c = t.consts
    found = []
    for j in range(t.width - 1):
        if not c[j + 1].startswith("/") or j == epoch or names[j] not in ("",) + BATCH_WORDS:
            continue
        if c[j].endswith("/") or (j + 2 <= t.width and c[j + 2].startswith("/")):
            continue  # ``a/b/c``: a date or a path, no progress
        if len(t.at) > 1 and not t.varies(j) and t.varies(j + 1):
            continue  # ``0/50``, ``0/100``: the count is N, i no counter at all
        found.append(j)
    if len(found) <= 1 or len(t.at) < 2:
        return found[0] if found else None
    best, most = None, -1
    for j in found:
        i, total = t.column(j), t.column(j + 1)
        if any(map(lt, total, i)):
            continue
        changes = sum(map(ne, i, islice(i, 1, None)))
        if changes > most:
            best, most = j, changes
    return best


def _fmt(v):
    return str(int(v)) if v == int(v) else "%g" % v


def unrounded(values, texts):
    """The steps of a counter printed rounded to a magnitude (``200, 400, ..., 1K, 1K, 1K,
    2K``: 1000, 1200, 1400, 1600 as a trainer's humanised count prints them), as one even
    stride puts them in each run the file holds (a run ends where the counter falls by more
    than its rounding): the stride of the values printed in full where two follow each
    other, else the run's span. None unless every printed value lies within half its unit of
    its step (a counter that logs unevenly keeps its printed values)."""
    n = len(values)
    units = [MAGNITUDE.get(x[-1:], 1.0) for x in texts]
    if n < 3 or len(units) != n:
        return None
    cuts = [0]
    for i in range(1, n):
        if values[i] + units[i] / 2 < values[i - 1] - units[i - 1] / 2:
            cuts.append(i)
    cuts.append(n)
    out = array("d")
    for a, b in zip(cuts, cuts[1:]):
        part = _even(values[a:b], units[a:b])
        if part is None:
            return None
        out.extend(part)
    return out


def _even(values, units):
    """:func:`unrounded` of one run: its steps at one stride, or None."""
    n = len(values)
    if n < 2:
        return values
    full = [b - a for a, b, u, w in zip(values, values[1:], units, units[1:]) if u == w == 1.0]
    stride = sorted(full)[len(full) // 2] if full else (values[-1] - values[0]) / (n - 1)
    if not stride > 0:
        return None
    i0 = next((i for i, u in enumerate(units) if u == 1.0), 0)
    start = values[i0] - i0 * stride
    out = array("d", (start + i * stride for i in range(n)))
    for v, u, s in zip(values, units, out):
        if abs(s - v) > u / 2:
            return None
    return out


def _rounded_text(t, j):
    """The first text of field ``j`` printed with a magnitude suffix."""
    return next(x for x in t.texts(j) if x[-1:] in MAGNITUDE)


def is_data(t):
    """A template whose lines are data: recurring, a field with a name, no source code or
    traceback frame."""
    if len(t.at) < 2 or not _no_text(t):
        return False
    return any(_name(t.consts[j]) for j in range(t.width))


# a shell command continued on the next line (``torchrun --nnodes 1 \``): a command written
# out, no value a run printed (a flag on a line of its own is code: :data:`~.base.CODE_RE`)
_CONTINUED_RE = re.compile(r"\\\s*$")


def _no_text(t):
    """Whether a template's lines may be data: no source code, traceback frame, command
    line, save or resume announced, or a file's transfer."""
    line = t.first.lstrip()
    if CODE_RE.match(t.first) or line.startswith(('File "', "Traceback", "at ")):
        return False
    if _CONTINUED_RE.search(t.first):
        return False  # a command continued on the next line: what was asked
    low = line.lower()
    if any(w in low for w in EVENT_WORDS) or event_kind(line):
        return False  # a save or a resume announced: an event, not a series
    if any(_TRANSFER_RE.search(c) for c in t.consts):
        return False  # a download's or an upload's progress bar (``5.72MB/s``): no training
    return True


# -- held-out lines beside a trainer format's own -----------------------------------------

#: A word that may say validation, evaluation or test (:data:`HELD_OUT`) as a word or a
#: name's part (``valid |``, ``val_loss``; not ``interval``, ``value``): the cheap look a
#: trainer format gives the lines it does not claim, before :func:`held_out_values`.
HELD_OUT_RE = re.compile(
    r"(?<![A-Za-z])(?:%s)(?![A-Za-z])" % "|".join(sorted(HELD_OUT, key=len, reverse=True)),
    re.I,
)


def held_out_values(lines):
    """The held-out losses on ``lines`` that a trainer's line format does not claim
    (fairseq's ``valid | epoch 001 | valid on 'valid' subset | loss 9.189 | ...``,
    Megatron's ``validation loss at iteration 100 | lm loss value: 9.66E+00 | ...``),
    mined as templates: a field named a loss (:func:`~.base.loss_name`) on a line whose
    template says validation, evaluation or test, or whose own name says so. A line seen
    once counts (an evaluation each epoch, one in a short log); code, tracebacks and save
    lines never do. Returns ``[(line index, series name, value, step the line states or
    None)]`` in line order; the series named as :func:`_name_series` names them
    (``val/loss``; ``val_loss`` as it is)."""
    out = []
    for t in mine(lines).values():
        if not _no_text(t):
            continue
        k = Kind(t)
        stated = t.column(k.step) if k.step is not None else None
        seen = {}
        for j, name in enumerate(k.names):
            if not name or j in k.counters or not loss_name(name):
                continue
            own = _name_kind(name)
            if own == "train" or (own is None and k.kind == "train"):
                continue
            full = name if own else "%s/%s" % (k.kind, name)
            n = seen[full] = seen.get(full, 0) + 1
            full = full if n == 1 else "%s_%d" % (full, n)
            for m, (i, v) in enumerate(zip(t.at, t.column(j))):
                out.append((i, full, v, None if stated is None else stated[m]))
    return sorted(out)


def worth(table):
    """Whether the line kinds say more than key=value pairs read line by line would: two
    kinds of data line (train and validation, per batch and per epoch), or one that states
    its progress as ``i/N``, or a counter a line's pairs do not say (a bracketed round, a
    step within the epoch). A log of one line kind reads as it always did."""
    table, _ = merged(table)
    kinds = [Kind(t) for t in table.values() if is_data(t)]
    kinds = [k for k in kinds if k.fields()]
    if kinds:  # a save line that states a held-out loss: a val line kind beside the train's
        kinds += _saved_held_out(table)
    # lines that differ in a word only (``[rank0]:``, ``[rank1]:``) are one kind, as Drain
    # merges templates a token apart: what differs is the kind or the fields
    if len({(k.kind, tuple(name for _, name in k.fields())) for k in kinds}) >= 2:
        return True
    if _marks(table) is not None:
        return bool(kinds)  # ``Epoch 3/100`` on a line of its own, data lines after it
    # a step printed rounded (``step:1K``): the reading line by line would take its repeats
    # for restarts; the line kinds' reading puts the rows back at their steps
    if any(k.progress is not None or k.of is not None or k.rounded() for k in kinds):
        return True
    # a counter pairs do not name (``[10]\\t...``), or one counted within the epoch (it
    # starts again at each new one): line by line, its falls would read as restarts
    return any(k.step is not None and (not k.names[k.step] or _inner_step(k)) for k in kinds)


def _inner_step(k):
    ep = k.epochs()
    return ep is not None and _inner(k.t.column(k.step), ep) is not None


def _marks(table):
    """``(lines, epochs)`` of the lines that state the epoch as ``i/N`` and nothing else
    (Keras's ``Epoch 3/100`` before each epoch's line), or None when the log has none."""
    found = []
    for t in table.values():
        if not is_data(t):
            continue
        k = Kind(t)
        if k.of is not None and not k.fields():
            found.append((t.at, t.column(k.epoch)))
    if not found:
        return None
    pairs = sorted(p for at, ep in found for p in zip(at, ep))
    return array("l", (p[0] for p in pairs)), array("d", (p[1] for p in pairs))


def _mark(kinds, marks):
    """The epoch of the marker line before each line, for the kinds that state none (all
    their lines after the first marker); a line that states ``i/N`` with i = N on every
    line is a finished progress bar, one line an epoch: no batch counter then."""
    if marks is None:
        return
    at, ep = marks
    for k in kinds:
        if k.epoch is not None or k.t.at[0] < at[0]:
            continue
        k.marked = array("d", (ep[bisect_right(at, line) - 1] for line in k.t.at))
    for k in kinds:
        if k.progress is not None and k.epochs() is not None:
            if k.t.texts(k.progress) == k.t.texts(k.progress + 1):
                k.progress = None  # ``1875/1875 [======] - loss: ...``: the epoch's summary


def read_kinds(table, events, out, run_part=None):
    """The data templates of ``table`` into ``out`` (a :class:`~.series.Read`): each its own
    series, on the steps its lines state, the run part chosen (``run_part``: 1-based; None
    or 0: the last; negative: from the end)."""
    table, joined = merged(table)
    kinds = [Kind(_last_draws(t)) if t.bar else Kind(t) for t in table.values() if is_data(t)]
    kinds = [k for k in kinds if k.fields()] + _saved_held_out(table)
    once = sum(1 for t in table.values() if len(t.at) == 1)
    _headed(kinds, table)
    _mark(kinds, _marks(table))
    primary = _primary(kinds)
    before = _set_up(kinds, primary)
    if before:
        kinds = [k for k in kinds if k not in before]
    e0 = _first_epoch(kinds)
    for k in kinds:
        k.steps = k.own_steps(e0)
    if primary is not None and primary.steps is None:
        _epoch_steps(primary)
    lo, hi = _run_part(primary, run_part, out)
    # the part's series from its first train line: the lines after the last part's last
    # train line (its evaluation) are the last part's; its events from the line after that
    start = primary.t.at[bisect_right(primary.t.at, lo - 1)] if lo else 0
    for k in kinds:
        _align(k, primary, e0)
    twice = _name_series(kinds, primary)
    sides = []
    if not _as_table(kinds, primary, start, hi, out):
        for k in kinds:
            a, b = _span(k, start, hi)
            steps = k.steps[a:b]
            m = _lanes(steps) if k is not primary else 1
            if m > 1:
                sides.append((k, m))
            for j, name in k.series:
                col = k.t.column(j)[a:b]
                for r in range(m):
                    lane = name if not r else "%s_%d" % (name, r + 1)
                    if _held(k, name):
                        out.seldom.add(lane)
                    for s, v in zip(steps[r::m], col[r::m]):
                        out.add(lane, s, v)
    _events(events, primary, lo, hi, out)
    out.caveats.append(_said(kinds, primary, once, len(before)))
    for k, m in sides:
        out.caveats.append(
            "lines like %r state each step %d times in turn (engines or ranks side by side): "
            "read as %d series each, the later ones named _2 .. _%d"
            % (mask(k.t.first.strip())[:60], m, m, m)
        )
    for name in twice:
        out.caveats.append(
            "%s is printed twice, by two line kinds (the same values at the same steps): "
            "read once" % name
        )
    out.caveats.extend(joined)


def _saved_held_out(table):
    """Val kinds of the save lines that state the held-out loss they were saved for
    (``Epoch 3, global step 4: 'val_loss' reached 0.156 (best 0.156), saving model to ...``):
    a save is an event, and the held-out value it names is a point of its own, at the step
    the line states (else the train line's before it). Only the first field named a
    held-out loss is read (the file name's copy, the best so far, a top-k rank are not);
    the save lines that share their text up to it are one kind, seen twice at least."""
    groups = {}
    for t in table.values():
        # the field first (its constants are short), the line's words after (a line's
        # length is the bound of a look at its text)
        j, word = next(
            ((j, w) for j in range(t.width) for w in [_held_out_word(t.consts[j])] if w),
            (None, None),
        )
        if word is None or _no_text(t) or event_kind(t.first) != "checkpoint":
            continue
        if CODE_RE.match(t.first) or any(_TRANSFER_RE.search(c) for c in t.consts):
            continue
        groups.setdefault(tuple(t.consts[: j + 1]) + ("",), []).append((t, word))
    out = []
    for consts, found in groups.items():
        j = len(consts) - 2
        ts = sorted((t for t, _ in found), key=lambda t: -len(t.at))
        m = Template(consts, ts[0].first)
        rows = _interleave(*(zip(t.at, _all_rows(t)) for t in ts), key=itemgetter(0))
        for i, row in rows:
            m.at.append(i)
            m.rows.append(list(row[: j + 1]))
        if len(m.at) < 2:
            continue
        k = Kind(m)
        if j in k.counters:
            continue
        k.kind = "val"
        k._fields = [(j, found[0][1])]
        out.append(k)
    return out


def _held_out_word(before):
    """The word of the constant text before a field that names it a held-out loss
    (``'val_loss' reached`` -> ``val_loss``), else None."""
    segs = [s for s in _SEGMENT_RE.split(before) if s.strip(" :=#/")]
    for w in _WORD_RE.findall(segs[-1]) if segs else ():
        w = w.strip("./").lower()
        if loss_name(w) and _name_kind(w) in ("val", "test"):
            return w
    return None


def _last_draws(t):
    """A progress bar's template (``Epoch 3:  50%|...| 1/2 [..., loss=0.27]``, redrawn) with
    one line an epoch: the last drawn at the furthest ``i/N`` the epoch's bar reached. A bar
    is one line redrawn, not a line a step: its postfix is a value as it stood at each
    redraw (a running loss), the same value shown again as the bar moves, and the bar drawn
    again at 0% (a new epoch's bar still showing the last one's value) is no step back. A
    bar that states no epoch keeps one line a position: the last drawn where the bar drew
    the same ``i/N`` again (``update()`` then ``set_postfix()``: the old value, then the
    new). The template as it is where its lines state no ``i/N``, or draw each once."""
    k = Kind(t)
    if k.progress is None:
        return t
    pos = t.column(k.progress)
    if k.epoch is None:
        n = len(pos)
        keep = [i for i in range(n) if i + 1 == n or pos[i + 1] != pos[i]]
    else:
        ep = t.column(k.epoch)
        keep, best = [], None  # best: the line of the epoch's furthest draw so far
        for i in range(len(ep)):
            if i and ep[i] != ep[i - 1]:
                keep.append(best)
                best = None
            if best is None or pos[i] >= pos[best]:
                best = i
        keep.append(best)
    if len(keep) == len(pos):
        return t
    m = Template(t.consts, t.first)
    m.bar, m.word = True, t.word
    rows = list(_all_rows(t))
    for i in keep:
        m.at.append(t.at[i])
        m.rows.append(list(rows[i][: t.width]))
    return m


def _name_kind(name):
    """The kind a series' own name says (``eval_loss`` -> val, ``train/loss`` -> train), or
    None."""
    return kind_of(re.split(r"[_/.]", name))


def _whole(col):
    """Whether every value of ``col`` is a whole number (no NaN): a counter's column."""
    return not any(x != x or not float(x).is_integer() for x in col)


def _held(k, name):
    """Whether series ``name`` of kind ``k`` is held out: its lines' kind says so, or its
    own name does (``eval_loss`` on a line that names no kind)."""
    return k.kind in ("val", "test") or _name_kind(name) in ("val", "test")


def _headed(kinds, table):
    """A line kind whose words name no kind (no train, valid, eval or test word) and whose
    every line comes right after a line that says held out is of that line's kind: the
    header names what is printed under it (``***** Evaluating perplexity, Epoch 1/16 *****``
    then ``ppl: 2.01``: an evaluation, not a train line). A header with no number is no
    template (:func:`mine`), so it is not seen."""
    for k in kinds:
        if k.t.bar or kind_of(_WORD_RE.findall(" ".join(k.t.consts))) is not None:
            continue  # (a bar redrawn after the validation's own bar is its epoch's again)
        before = k.t.at[0] - 1
        header = next((t for t in table.values() if _holds(t.at, before)), None)
        if header is None:
            continue
        said = kind_of(_WORD_RE.findall(" ".join(header.consts)))
        if said not in ("val", "test"):
            continue
        at = set(header.at)
        if all(i - 1 in at for i in k.t.at):
            k.kind = said


def _holds(at, i):
    """Whether the sorted line numbers ``at`` hold line ``i``."""
    j = bisect_right(at, i) - 1
    return j >= 0 and at[j] == i


# -- templates a word apart --------------------------------------------------------------

# a word of a template's constants, with the brackets and the blank that hug it: what a
# template without the word lacks (``loss=0.3 (best)`` -> ``loss=0.3``)
_HUGGED_RE = re.compile(r"[ \t]*[(\[{<]?([A-Za-z_][A-Za-z0-9_]*)[)\]}>!*]?")
VARIABLE = "<*>"  # the word of a merged template's varying slot, as Drain writes it
MIN_VARIANTS = 3  # words in one slot, with no counter to say more: a variable
MAX_COMPARED = 2000  # templates: past this many, those seen once are not compared


def merged(table):
    """``(table, notes)``: ``table`` with each set of templates a word apart that the
    evidence says are one line kind merged into one (the others as they are), and the
    merges in words. The evidence (:func:`_one_kind`): a word that names the kind keeps its
    lines apart; lines that never state the same counter continue one series; lines with no
    counter are one kind when the word takes :data:`MIN_VARIANTS` values or more.
    Templates whose constants differ only in the width of their blanks (``Epoch(train)
    [1]`` beside ``Epoch(train)  [1]``: padding, as Drain splits tokens on any run of
    blanks) are one line kind first."""
    table = _unpadded(table)
    table, notes = _cut_short(table)
    groups = _word_apart(table)
    if not groups:
        return table, notes
    out, parent = dict(table), {}

    def root(k):
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    for _, members in groups:
        words = [w for _, w in members]
        if any(w is not None and kind_of([w]) for w in words):
            continue  # Train / Valid, eval / test: the word says the kind
        if not _one_kind([table[k] for k, _ in members], len(set(words))):
            for k, w in members:  # kinds side by side (ranks): their series named apart
                table[k].word = table[k].word or w
            continue
        for k, _ in members[1:]:
            a, b = root(members[0][0]), root(k)
            if a != b:
                parent[b] = a
    sets = {}
    for k in parent:
        sets.setdefault(root(k), set()).add(k)
    for top, keys in sets.items():
        keys.add(top)
        ts = sorted((table[k] for k in keys), key=lambda t: -len(t.at))
        for k in keys:
            del out[k]
        m = _merge(ts)
        out["\x00".join(m.consts)] = m
        notes.append(
            "%d line kinds a word apart read as one (%s): their lines continue one series"
            % (len(ts), ", ".join(repr(mask(t.first.strip())[:60]) for t in ts[:3]))
        )
    return out, notes


def _unpadded(table):
    """``table`` with the templates a padding apart (their constants the same with each run
    of blanks as one) merged into one, the most lines first; the same table where none are."""
    groups = {}
    for key, t in table.items():
        if t.width:
            groups.setdefault(tuple(_BLANKS_RE.sub(" ", c) for c in t.consts), []).append(key)
    sets = [keys for keys in groups.values() if len(keys) > 1]
    if not sets:
        return table
    out = dict(table)
    for keys in sets:
        ts = sorted((table[k] for k in keys), key=lambda t: -len(t.at))
        for k in keys:
            del out[k]
        m = _merge(ts, vary=False)
        out["\x00".join(m.consts)] = m
    return out


_BLANKS_RE = re.compile(r"[ \t]+")


def _cut_short(table):
    """``(table, notes)``: each template whose line stops where a recurring one's goes on
    (its constants the longer's up to its last field, the line ending there) merged into
    that one, its lines' missing fields missing, where the fields the longer adds are
    unnamed (a time in brackets: TF's ``loss = 161.3, step = 1`` before ``loss = 15.79,
    step = 101 (0.065 sec)``, the first line with no time since the one before) and the
    two never state the same counter: the first line of a kind, not a kind of its own."""
    ends = {}
    for key, t in table.items():
        if t.width and not t.consts[-1].strip() and not CODE_RE.match(t.first):
            ends.setdefault(tuple(t.consts[:-1]), key)
    if not ends:
        return table, []
    out, notes = dict(table), []
    for key, t in table.items():
        if len(t.at) < 2 or t.width < 2 or key not in out:
            continue
        unnamed = t.width
        while unnamed > 1 and not _name(t.consts[unnamed - 1]):
            unnamed -= 1  # the fields from ``unnamed`` on are unnamed
        for w in range(unnamed, t.width):
            short = ends.get(tuple(t.consts[:w]))
            if short is None or short not in out or short == key:
                continue
            s = table[short]
            if not _named_data(s) or not _one_kind([t, s], 1):
                continue
            del out[key], out[short]
            m = _merge([t, s], vary=False)
            out["\x00".join(m.consts)] = m
            notes.append(
                "%d line(s) like %r read as lines like %r that stop before their %r field "
                "(missing there): their lines continue one series"
                % (
                    len(s.at),
                    mask(s.first.strip())[:60],
                    mask(t.first.strip())[:60],
                    mask(t.consts[w].strip())[:20],
                )
            )
            break
    return out, notes


def _named_data(t):
    """Whether template ``t`` has a named field and may be data (:func:`_no_text`)."""
    return _no_text(t) and any(_name(t.consts[j]) for j in range(t.width))


def _word_apart(table):
    """``[(slot, [(key, word)])]``: the templates with a field whose constants are the same
    but for one word in one slot (another word there, or none), ``word`` each one's (None:
    it has none there); the most lines first. The word that names a field is never the
    one (``loss 0.5`` / ``acc 0.9`` are other fields). A log of many templates (chatter)
    has its recurring ones compared only."""
    buckets = {}
    few = len(table) <= MAX_COMPARED
    for key, t in table.items():
        if not t.width or not (few or len(t.at) > 1) or CODE_RE.match(t.first):
            continue
        cs = tuple(t.consts)
        buckets.setdefault(("=",) + cs, []).append((key, None))
        for j, c in enumerate(cs):
            for m in _HUGGED_RE.finditer(c):
                if j < t.width and not _WORD_RE.search(c, m.end()):
                    continue  # the word that names field j (loss / acc): another field
                a, b = m.span(1)
                less = cs[:j] + (c[: m.start()] + c[m.end() :],) + cs[j + 1 :]
                other = cs[:j] + (c[:a] + VARIABLE + c[b:],) + cs[j + 1 :]
                buckets.setdefault(("=",) + less, []).append((key, m.group(1)))
                buckets.setdefault(("~", j) + other, []).append((key, m.group(1)))
    out = []
    for bkey, members in buckets.items():
        if len(members) < 2 or len({k for k, _ in members}) < len(members):
            continue
        if bkey[0] == "=" and sum(1 for _, w in members if w is None) != 1:
            continue  # a deletion: the one without the word and those with one more
        members.sort(key=lambda m: -len(table[m[0]].at))
        out.append((bkey[1] if bkey[0] == "~" else None, members))
    return out


def _one_kind(ts, variants):
    """Whether the templates ``ts`` (a word apart) are one line kind: their counters (the
    fields their names say count: epoch, step, ``i/N``) never repeat from one to another;
    with no counter, the word takes :data:`MIN_VARIANTS` values or more."""
    k = Kind(ts[0])
    counters = sorted(j for j in k.counters if j is not None)
    if not counters:
        return variants >= MIN_VARIANTS
    seen = set(zip(*(ts[0].column(j) for j in counters)))
    for t in ts[1:]:
        if Kind(t).counters != k.counters:
            return False
        mine = set(zip(*(t.column(j) for j in counters)))
        if mine & seen:
            return False  # the same steps logged by each: kinds side by side (ranks)
        seen |= mine
    return True


def _merge(ts, vary=True):
    """One template of the templates ``ts`` (the most lines first): its lines in the file's
    order, its constants the first's with the varying word as :data:`VARIABLE` (``vary``;
    else the first's as they are)."""
    first = ts[0]
    consts = list(first.consts)
    for t in ts[1:] if vary else ():
        for j, (a, b) in enumerate(zip(consts, t.consts)):
            if a != b:
                consts[j] = _variable(a, b)
    m = Template(tuple(consts), first.first)
    m.bar = any(t.bar for t in ts)
    w = first.width
    rows = _interleave(*(zip(t.at, _all_rows(t)) for t in ts), key=itemgetter(0))
    for i, row in rows:
        m.at.append(i)
        row = list(row[:w])
        if len(row) < w:  # a line cut short (:func:`_cut_short`): the rest missing
            row.extend([""] * (w - len(row)))
        m.rows.append(row)
    return m


def _all_rows(t):
    """Every line's fields of template ``t``, as text (a block's lines by one regex pass)."""
    for seg in t.segs:
        yield from t._rows(seg)


def _variable(a, b):
    """The constant ``a`` with the word where ``b`` differs (or lacks it) as the variable."""
    for m in _HUGGED_RE.finditer(a):
        x, y = m.span(1)
        if a[: m.start()] + a[m.end() :] == b or any(
            a[:x] + VARIABLE + a[y:] == b[: n.start(1)] + VARIABLE + b[n.end(1) :]
            for n in _HUGGED_RE.finditer(b)
        ):
            return a[:x] + VARIABLE + a[y:]
    return a


def _span(k, lo, hi):
    """The range of a kind's lines that lie in the lines ``lo`` to ``hi``."""
    return bisect_right(k.t.at, lo - 1), bisect_right(k.t.at, hi - 1)


def _as_table(kinds, primary, lo, hi, out):
    """The series as one table on the primary kind's rows, column by column (no dict a row):
    each other kind's value goes to the row of its step, or of the train line before it.
    False (nothing done) when a value has no row of its own there: two lines at one row,
    a step the train lines never logged; then each series is added on its own axis."""
    if primary is None:
        return False
    pa, pb = _span(primary, lo, hi)
    steps = primary.steps[pa:pb]
    n = len(steps)
    if n < 2 or any(map(ge, steps, islice(steps, 1, None))):
        return False
    # a column is converted only when the table keeps it (ppl, ms/batch: never): the
    # choice reads the head, converted on its own
    cols = {"step": steps}
    for j, name in primary.series:
        cols[name] = (primary, j, pa, pb)
    index = None
    for k in kinds:
        if k is primary:
            continue
        a, b = _span(k, lo, hi)
        if a >= b:
            continue
        if k.how.startswith("the step of the train line"):
            rows = [bisect_right(primary.t.at, line) - 1 - pa for line in k.t.at[a:b]]
        else:
            index = index or {s: i for i, s in enumerate(steps)}
            rows = [index.get(s, -1) for s in k.steps[a:b]]
        if min(rows) < 0 or len(set(rows)) < len(rows):
            return False
        for j, name in k.series:
            if name in cols:
                return False
            col = cols[name] = array("d", [MISSING]) * n
            for i, v in zip(rows, k.t.column(j)[a:b]):
                col[i] = v
    keys = list(cols)
    head = [dict(zip(keys, vals)) for vals in zip(*(_head(c) for c in cols.values()))]
    ing = out.table(dict.fromkeys(keys, n), head, "step")
    if ing.bucket_key is not None or ing.step_key != "step":
        out._table = None  # a bucket column: each series on its own axis, as a Read adds them
        return False
    ing.cols = [_whole(cols[key]) for key in ing.keys]
    return True


def _head(col):
    """The first rows of a table column: an array, or ``(kind, field, first, end)``."""
    if isinstance(col, array):
        return col[:HEAD_ROWS]
    k, j, a, b = col
    return array("d", (value(k.t.cell(i, j)) for i in range(a, min(b, a + HEAD_ROWS))))


def _whole(col):
    if isinstance(col, array):
        return col
    k, j, a, b = col
    return k.t.column(j)[a:b]


def _primary(kinds):
    """The train line kind the run's step comes from: one with a counter of its own, the
    most lines; else the most lines."""
    train = [k for k in kinds if k.kind == "train"]
    if not train:
        return None
    counted = [k for k in train if k.step is not None or k.progress is not None]
    # else one that states its epoch (``{'loss': ..., 'epoch': 0.25}``): a record of the
    # training, where a line with no counter (``rank = 3``) may be anything printed
    counted = counted or [k for k in train if k.epochs() is not None]
    return max(counted or train, key=lambda k: len(k.t.at))


def _counted(k):
    """Whether the line kind ``k`` states a counter of its own (step, ``i/N``, epoch)."""
    return k.step is not None or k.progress is not None or k.epochs() is not None


def _set_up(kinds, primary):
    """The kinds printed before the training's first line and never after it, with no
    counter of their own (a config's ``kernel_size: 5`` lines, a rank's set-up): no series."""
    if primary is None or not _counted(primary):
        return []
    first = primary.t.at[0]
    return [k for k in kinds if k is not primary and not _counted(k) and k.t.at[-1] < first]


def _first_epoch(kinds):
    firsts = [(k.t.at[0], k.epochs()[0]) for k in kinds if k.epochs() is not None]
    return min(firsts)[1] if firsts else 0.0


def _epoch_steps(primary):
    """The run's steps when its train lines state no step and no batch: the epoch they
    state (``Epoch [3/100]``) or follow (Keras's ``Epoch 3/100`` line), else the row."""
    ep = primary.epochs()
    if ep is None:
        primary.steps = array("d", range(len(primary.t.at)))
        primary.how = "the row (the line states no step)"
        return
    if _stuck(ep):
        # ``{'loss': ..., 'epoch': 0.0}`` ten times: a run shorter than an epoch, or its
        # epoch printed rounded; each line is a step of its own, not a restart of the epoch
        primary.steps = array("d", range(len(primary.t.at)))
        primary.how = (
            "the row (the epoch each line states never falls and repeats on most lines: it "
            "counts no line)"
        )
        return
    primary.steps = ep
    primary.counter = "epoch"
    said = "states" if primary.epoch is not None else "follows ('Epoch i/N' on a line of its own)"
    primary.how = "the epoch each line %s (no step or batch counter: the step is the epoch)" % said


def _stuck(ep):
    """Whether an epoch column counts no line: it never falls and stays the same from one
    line to the next more often than it moves (at least three lines). A resumed run repeats
    an epoch once; a run shorter than an epoch (or a fraction printed rounded) repeats it
    on most lines."""
    n = len(ep)
    if n < 3 or any(map(lt, islice(ep, 1, None), ep)):
        return False
    return 2 * sum(map(eq, ep, islice(ep, 1, None))) > n - 1


def _run_part(primary, run_part, out):
    """``(first line, end line)`` of the run part read: the file is cut where the primary
    counter falls (or a step comes again with other values); each cut is said."""
    end = 1 << 62
    if primary is None or primary.steps is None:
        return 0, end
    steps, at = primary.steps, primary.t.at
    if all(map(lt, steps, islice(steps, 1, None))):
        return 0, end
    vals = [primary.t.texts(j) for j, _ in primary.fields()]
    cuts = []
    for i in range(1, len(steps)):
        if steps[i] < steps[i - 1] or (
            steps[i] == steps[i - 1] and any(v[i] != v[i - 1] for v in vals)
        ):
            cuts.append(i)
    if not cuts:
        return 0, end
    bounds = [0] + cuts + [len(steps)]
    parts = list(zip(bounds, bounds[1:]))
    for c in cuts:
        again = steps[c] == steps[c - 1]
        first = steps[c] <= steps[0]
        what = (
            "%s %s logged again with other values: a restart" % (primary.counter, _fmt(steps[c]))
            if again
            else "a second run (or a restart from scratch) appended to the same file"
            if first
            else "a restart from %s %s (a resume)" % (primary.counter, _fmt(steps[c]))
        )
        out.notes.append(
            "the %s counter falls from %s to %s at line %d: %s"
            % (primary.counter, _fmt(steps[c - 1]), _fmt(steps[c]), at[c] + 1, what)
            if not again
            else "line %d: %s" % (at[c] + 1, what)
        )
    k = len(parts) if not run_part else run_part if run_part > 0 else len(parts) + 1 + run_part
    if not 1 <= k <= len(parts):
        k = len(parts)
        out.notes.append("run part %s does not exist: the last is read" % run_part)
    a, b = parts[k - 1]
    out.notes.append(
        "run part %d of %d read (lines %d-%d; run_part / --run-part chooses another)"
        % (k, len(parts), at[a] + 1, at[b - 1] + 1)
    )
    lo = 0 if a == 0 else at[a - 1] + 1
    hi = end if b == len(steps) else at[b - 1] + 1
    # the lines after the part's last train line up to the next part belong to it
    if b < len(steps):
        hi = at[b]
    return lo, hi


def _align(k, primary, e0):
    """The steps of a kind with no counter of its own: the step of the train line before
    each (a validation line after the batches it followed); else the epoch; else the row."""
    if k.steps is not None:
        return
    n = len(k.t.at)
    if primary is not None and primary is not k and primary.steps is not None:
        pat, ps = primary.t.at, primary.steps
        out = array("d")
        for line in k.t.at:
            i = bisect_right(pat, line) - 1
            out.append(ps[i] if i >= 0 else ps[0])
        k.steps = out
        k.how = "the step of the train line before each"
    elif k.epoch is not None:
        k.steps = k.t.column(k.epoch)
        k.how = "the epoch each line states"
    else:
        k.steps = array("d", range(n))
        k.how = "the row"


def _name_series(kinds, primary):
    """Each field's series name: ``train/``, ``val/``, ``test/`` unless its name says its
    kind itself; ``epoch/`` for a kind once per epoch beside a finer one of its kind; a
    kind kept apart from one a word away (``[rank1]``) that would share a name with it
    gets its word (``train/loss_rank1``; the primary kind keeps the plain name). A series
    another kind printed already, the same values at the same steps (caffe's ``Iteration
    100, loss = x`` and ``Train net output #0: loss = x``), is read once: returns the names
    of those."""
    fine = {}
    for k in kinds:
        if k.step is not None or k.progress is not None:
            fine[k.kind] = max(fine.get(k.kind, 0), len(k.t.at))
    taken, twice = {}, []
    for k in sorted(kinds, key=lambda k: k is not primary):
        # once per epoch: at most a line to every two of the finer kind's (a line after each
        # of them is a part of the same record, at its step)
        coarse = k.step is None and k.progress is None and 2 * len(k.t.at) <= fine.get(k.kind, 0)
        k.series = []
        for j, name in k.fields():
            own = _name_kind(name)
            full = name if own else "%s/%s" % (k.kind, name)
            if coarse:
                full = "epoch/" + full
            if full in taken and _same(taken[full], (k, j)):
                twice.append(full)
                continue
            if full in taken and k.t.word:  # ``[rank1]`` beside ``[rank0]``: its own
                full = "%s_%s" % (full, k.t.word.lower())
            taken[full] = (k, j)
            k.series.append((j, full))
    return twice


def _same(a, b):
    """Whether the fields ``(kind, j)`` ``a`` and ``b`` hold the same values at the same steps."""
    (p, i), (k, j) = a, b
    return len(p.t.at) == len(k.t.at) and p.steps == k.steps and p.t.column(i) == k.t.column(j)


def _lanes(steps):
    """How many lines state each step in turn (``step=10`` printed by two engines, two
    ranks, one line each), where every step is stated that many times on lines one after
    the other and the steps rise from one group to the next (the last group may be cut);
    else 1 (a kind whose step falls or repeats otherwise is read as it is)."""
    n = len(steps)
    if n < 4 or all(map(lt, steps, islice(steps, 1, None))):
        return 1
    m = 1
    while m < n and steps[m] == steps[0]:
        m += 1
    if m < 2 or n < 2 * m:
        return 1
    for i in range(m, n):
        first = steps[i - i % m]
        if steps[i] != first or (not i % m and not first > steps[i - m]):
            return 1
    return m


def _events(events, primary, lo, hi, out):
    """The save and resume lines of the run part read, at the step they state, else at the
    step of the train line before them; one before the first train line that states no step
    has none to be put at (a ``--help`` text's "you won't be able to resume", a note that a
    run may be resumed): it is said, not placed at a step it never named."""
    unplaced = 0
    for i, line in events:
        if not lo <= i < hi:
            continue
        kind = event_kind(line)
        if kind is None:
            continue
        m = EVENT_STEP_RE.search(SOURCE_LINE_RE.sub(" ", line))
        if m:
            step = float(m.group(1))
        elif primary is not None and primary.steps is not None:
            j = bisect_right(primary.t.at, i) - 1
            if j < 0:
                unplaced += 1
                continue
            step = primary.steps[j]
        else:
            continue
        out.event(kind, step, mask(line.strip()))
    if unplaced:
        out.notes.append(
            "%d save or resume line(s) before the first train line state no step: no event "
            "is placed for them" % unplaced
        )


def _said(kinds, primary, once, before=0):
    """The reading in words: each line kind, its series and its steps."""
    parts = []
    for k in sorted(kinds, key=lambda k: k.t.at[0]):
        parts.append(
            "%s lines like %r (%d): %s, at %s"
            % (
                k.kind,
                mask(k.t.first.strip())[:80],
                len(k.t.at),
                ", ".join(name for _, name in k.series) or "no series another kind has not",
                k.how + (" (the run's step)" if k is primary else ""),
            )
        )
    text = "no known trainer line format: its line kinds were read apart, " + "; ".join(parts)
    if once:
        text += "; %d line(s) of a kind seen once (a config, a summary) are no series" % once
    if before:
        text += (
            "; %d line kind(s) with no counter printed only before the first train line (a "
            "config, a set-up) are no series" % before
        )
    return text
