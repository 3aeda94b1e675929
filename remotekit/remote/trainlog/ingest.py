"""Rows into columns for ``trainlog.py``: the compact ``array`` columns a table's rows go
into (:class:`Ingest`, its columns chosen by :mod:`.choose`), and the save and resume lines
met between the rows.
"""

from __future__ import annotations

from array import array
from operator import itemgetter

from ..protocol import mask
from .base import (
    EVENT_HINT_RE,
    EVENT_STEP_RE,
    MISSING,
    SETTING_COMMENT_RE,
    SOURCE_LINE_RE,
    event_kind,
    to_float,
)
from .choose import (
    NoLoss,
    continued_start,
    epoch_axis,
    hint_columns,
    maximised_key,
    resolve_columns,
)
from .source import number_column


class Ingest:
    """Rows into one flat row-major ``array('d')`` (step, metrics..., meta...) plus bucket
    codes; the hot path is ``flat.extend(itemgetter(*keys)(row))``."""

    def __init__(self, step_key, metrics, meta, bucket_key):
        self.step_key = step_key
        self.metrics = metrics
        self.meta = meta
        self.bucket_key = bucket_key
        self.keys = ([step_key] if step_key else []) + [k for _, k in metrics]
        self.keys += [k for _, k in meta]
        self.K = len(self.keys)
        self.m0 = 1 if step_key else 0
        self.m1 = self.m0 + len(metrics)
        if self.K == 1:
            key = self.keys[0]
            self.getter = lambda d: (d[key],)
        else:
            self.getter = itemgetter(*self.keys)
        self.flat = array("d")  # rows not yet moved into the columns
        self.cols = [array("d") for _ in self.keys]
        self.codes = array("i")
        self.cmap = {}
        self.bnames = []
        self.skipped = 0
        self.bad = 0
        self.events = []

    def rows(self):
        return len(self.cols[0]) + len(self.flat) // self.K

    def last_step(self):
        n = self.rows()
        if n == 0:
            return 0.0
        if not self.step_key:
            return float(n - 1)
        if self.flat:
            return self.flat[(len(self.flat) // self.K - 1) * self.K]
        return self.cols[0][-1]

    def flush(self):
        """Move the buffered rows into the columns (keeps the peak memory near one copy)."""
        K = self.K
        self.fix_partial()
        for j, col in enumerate(self.cols):
            col.extend(self.flat[j::K])
        del self.flat[:]

    def code(self, v):
        if v is None:
            v = "-"
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        try:
            return self.cmap[v]
        except (KeyError, TypeError):
            pass
        name = str(v)
        for known, c in self.cmap.items():
            if str(known) == name:
                return c
        c = len(self.bnames)
        self.bnames.append(name)
        try:
            self.cmap[v] = c
        except TypeError:
            self.cmap[name] = c
        return c

    def fix_partial(self):
        """``array.extend`` may have appended part of a row before failing: drop it."""
        n = len(self.flat)
        cut = (n // self.K) * self.K
        if cut != n:
            del self.flat[cut:]

    def slow(self, d, quiet=False):
        """A row the fast path refused: missing keys, strings, or not a row at all."""
        if not isinstance(d, dict):
            self.skipped += 1
            return
        vals = [to_float(d.get(k)) for k in self.keys]
        if all(vals[i] is MISSING for i in range(self.m0, self.m1)):
            if not (self.dict_event(d) or quiet):
                self.skipped += 1
            return
        if self.step_key and vals[0] is MISSING:
            vals[0] = self.last_step() + 1
        self.flat.extend(vals)
        if self.bucket_key is not None:
            self.codes.append(self.code(d.get(self.bucket_key)))

    def add(self, d):
        """One parsed row (a dict)."""
        try:
            self.flat.extend(self.getter(d))
        except KeyError:
            self.slow(d)
            return
        except TypeError:
            self.fix_partial()
            self.slow(d)
            return
        if self.bucket_key is not None:
            bv = d.get(self.bucket_key)
            try:
                self.codes.append(self.cmap[bv])
            except (KeyError, TypeError):
                self.codes.append(self.code(bv))

    def add_cells(self, cells):
        """Rows of numbers as text, ``K`` cells a row in the order of ``keys``, one flat
        list, converted a column at a time (:func:`number_column`); when a cell is no number
        (an empty group, a word), row by row, such a row through :meth:`slow`."""
        K = self.K
        arrays = []
        for j in range(K):
            a = number_column(cells[j::K])
            if a is None:
                break
            arrays.append(a)
        else:
            self.flush()
            for col, a in zip(self.cols, arrays):
                col.extend(a)
            return
        ext = self.flat.extend
        for i in range(0, len(cells), K):
            row = cells[i : i + K]
            try:
                ext(map(float, row))
            except (ValueError, TypeError):
                self.fix_partial()
                self.slow({k: v for k, v in zip(self.keys, row) if v is not None})

    def dict_event(self, d):
        for v in d.values():
            if isinstance(v, str) and ("heckpoint" in v or "ckpt" in v or "esum" in v):
                step = to_float(d.get(self.step_key)) if self.step_key else MISSING
                return self.text_event(v, None if step is MISSING else step)
        return False

    def maybe_event(self, line):
        """A line that may announce a save or a resume (a reader's line that is no row):
        :meth:`text_event` for one that says so; False for the rest (a cheap test first)."""
        if EVENT_HINT_RE.search(line):
            return self.text_event(line)
        return False

    def text_event(self, line, step=None):
        """A line that is not a metrics row: a checkpoint save or a resume, if it says so.
        Its step is one the line states (``step 500``, ``checkpoint-500``), else the step
        of the last row (the save follows it); a logger's source line (``olmo.checkpoint:
        669``) is no step, and a path says where something was saved, not what."""
        kind = event_kind(line)
        if kind is None:
            return False
        line = SETTING_COMMENT_RE.sub(r"\1", line)
        m = EVENT_STEP_RE.search(SOURCE_LINE_RE.sub(" ", line))
        if m:
            step = float(m.group(1))
        elif step is None:
            step = self.last_step()
        self.events.append((kind, step, "log", mask(line.strip())[:160]))
        return True


def ingest_for(keys, wanted, head=(), step_key=None, seldom=()):
    """An :class:`Ingest` for rows with these keys (a Counter of the first rows' keys);
    ``seldom``: columns of lines of their own kind (:func:`~.choose.resolve_columns`).

    Without a loss series (and no metric named), the log cannot answer the question: the
    error lists the numeric columns there are, for ``--metrics`` to name one."""
    cols = resolve_columns(keys, wanted, step_key, head, seldom)
    epoch = epoch_axis(cols, head)
    if epoch is not None:
        cols = resolve_columns(keys, wanted, epoch, head, seldom)
        cols[5][:] = [g for g in cols[5] if not g.startswith("no step key")]
        cols[5].append(
            "no step key; one row per epoch (%r counts 0, 1, 2, ...): the epoch is the step axis"
            % epoch
        )
    step_key, metrics, meta, bucket_key, missing, guesses, why = cols
    score = None
    if not metrics or (not wanted and not any(label == "loss" for label, _ in metrics)):
        if not head:
            raise NoLoss(sorted(keys), [k for _, k in metrics])
        numeric, left_out = hint_columns(head, step_key)
        # no loss, and the log's one series a score the run maximises (a reward, a return,
        # a score, by its name): there is no other question to ask of it, so it is
        # analysed in the loss's place (higher is better), said so; whether it ever rose
        # is the onset's question. With other series beside it, which one is the
        # question: the user names it.
        if wanted or len(numeric) != 1 or numeric[0] in {k for _, k in metrics}:
            raise NoLoss(numeric, [k for _, k in metrics], left_out)
        score = maximised_key(numeric, head)
        if score is None:
            raise NoLoss(numeric, [k for _, k in metrics], left_out)
        why[score] = (
            "%s <- %r: no loss in the log; its one series is a score the run maximises, by "
            "its name, analysed in the loss's place (higher is better)" % (score, score)
        )
        guesses.append(why[score])
        metrics = [(score, score)] + list(metrics)
    ing = Ingest(step_key, metrics, meta, bucket_key)
    # a count that goes on from earlier training while this run's starts again: said, and
    # the run's loss need not fall (no flat-loss verdict: see :mod:`.onset`)
    ing.continues = continued = continued_start(keys, head, step_key) if head else None
    guesses.extend([continued] if continued else [])
    ing.maximised = score
    ing.missing = missing
    ing.guesses = guesses
    ing.why = why
    ing.all_keys = list(keys)
    return ing
