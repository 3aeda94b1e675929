"""A logger's key/value table on the console: one table a dump, each a row of the run. It is
what stable-baselines3's and OpenAI baselines' ``HumanOutputFormat`` print to stdout on
every update (the same logger that writes ``progress.csv``), and what many trainers copy.

The shape, from the writers' source (``stable_baselines3/common/logger.py`` and
``baselines/logger.py``, ``HumanOutputFormat.write``): a ruler of dashes, then one line a
key, ``| {key:<width} | {value:<width} |``, the values formatted ``%-8.3g``, then the ruler
again. stable-baselines3 groups the keys by their section: a line ``| rollout/ |  |``
heads the keys of ``rollout/``, each printed indented by four blanks without its section
(``|    ep_rew_mean | 23.4 |`` is ``rollout/ep_rew_mean``); baselines prints the full key.
A table is read as the row ``progress.csv`` holds for the same dump, its keys named as the
CSV names them, so the console and the CSV of a run give the same answer (to the
console's three digits). Lines outside a table (``Using cpu device``, a trainer's own
prints) are no data: counted as skipped, but two kinds stable-baselines3's callbacks print
between tables. An evaluation (``EvalCallback``: ``Eval num_timesteps=N, episode_reward=R +/-
S`` and ``Episode length: L +/- S``) is a row at step N of ``eval/mean_reward`` and
``eval/mean_ep_length``, the names the table it dumps next gives them (so when that table
is printed too, the line is no second row). A save (``CheckpointCallback``: ``Saving model
checkpoint to .../rl_model_N_steps.zip``; the zoo's ``Saving to ...``) is a checkpoint event
at the step its file name states, else at the last table's.

It grows a table at a time, so ``--follow`` follows it (:class:`TableTail`): a table still
being printed is held back until its closing ruler, so a row is judged whole.
"""

from __future__ import annotations

import re
from itertools import islice

from ..source import Lines, LineTail
from . import Reader

RULER_RE = re.compile(r"^\s*-{5,}\s*$")
ROW_RE = re.compile(r"^\s*\|( *)([^|]*?)\s*\|\s*([^|]*?)\s*\|\s*$")
CLAIM_BYTES = 1 << 20  # a long preamble (a config, a warning) may come first
_CLAIM_RE = re.compile(rb"(?m)^-{5,}\r?\n\| *[^|\n]*[^ |\n] *\| *[^|\n]* *\|\r?\n\| ")
SURE = 0.9  # a ruler then rows of two cells: no other format prints that
EVAL_RE = re.compile(r"^\s*Eval num_timesteps=(\d+), episode_reward=(\S+?),? \+/- ")
EVAL_LENGTH_RE = re.compile(r"^\s*Episode length: (\S+?),? \+/- ")
SAVE_RE = re.compile(r"^\s*Saving (?:model checkpoint |replay buffer |vecnormalize )?to (\S+)")
SAVE_STEP_RE = re.compile(r"_(\d+)_steps\b")  # CheckpointCallback's file names
EVAL_KEYS = ("eval/mean_reward", "eval/mean_ep_length")
_RULER_B = re.compile(rb"^\s*-{5,}\s*$")
_ROW_B = re.compile(rb"^\s*\|[^|]*\|[^|]*\|\s*$")


class KeyValueTable(Reader):
    FORMAT = "kvtable"
    WHAT = "key/value table console (stable-baselines3, OpenAI baselines)"
    ORDER = 45
    NAMES = ()  # whatever stdout was sent to: found as a text log by its content
    FOLLOWS = True

    def sniff(self, head):
        """A ruler followed by ``| key | value |`` rows, in the first :data:`CLAIM_BYTES`."""
        return SURE if _CLAIM_RE.search(head.raw(CLAIM_BYTES)) is not None else 0.0

    def read(self, src, out):
        with src.open() as f:
            lines = Lines(f)
            out.stream(_rows(lines, out))
            out.long = lines.long
        out.caveats.append(
            "each key/value table on the console is one row, its keys named with their "
            "section (train/value_loss) as the logger's progress.csv names them"
        )

    def tail(self, f):
        return TableTail()


class TableTail(LineTail):
    """The window ``--follow`` keeps of a growing console of tables: its complete lines,
    but those of a table whose closing ruler has not come yet (they wait, as a partial line
    does for its newline)."""

    def __init__(self):
        super().__init__()
        self.open = 0  # the latest lines: a table not closed yet (its ruler and rows)
        self.rows = 0  # the rows of that table

    def _add(self, items):
        super()._add(items)
        for line in items:
            if _RULER_B.match(line):
                if self.rows:  # its closing ruler: the table is whole
                    self.open = self.rows = 0
                else:  # an opening ruler (after another, the first was an empty table)
                    self.open, self.rows = 1, 0
            elif self.open and _ROW_B.match(line):
                self.open += 1
                self.rows += 1
            else:  # a line outside a table, or one that cut a table off: all is whole
                self.open = self.rows = 0
        self.open = min(self.open, len(self.items))

    def keep_last(self, n):
        super().keep_last(n)
        self.open = min(self.open, len(self.items))

    def window(self):
        whole = islice(self.items, 0, len(self.items) - self.open)
        return self.header + b"".join(whole)


def _rows(blocks, out):
    """The tables of ``blocks`` (lists of lines), one dict a table, and the evaluations
    printed between them (:class:`_Between`); the other lines between tables are counted
    skipped."""
    ruler, row = RULER_RE.match, ROW_RE.match
    d = None  # the table being read (None: between tables)
    section = ""
    between = _Between(out)
    for lines in blocks:
        out.lines += len(lines)
        for line in lines:
            m = row(line) if d is not None else None
            if m is not None:
                indent, key, value = m.groups()
                if key.endswith("/") and not value:
                    section = key  # the keys below it are this section's
                elif key:
                    d[section + key if indent and section else key] = value
                continue
            if ruler(line):
                if d:
                    yield from between.table(d)
                    d, section = None, ""
                else:
                    d, section = {}, ""
                continue
            if d:  # a table cut off by another print: what it held is its row
                yield from between.table(d)
            d = None
            if line.strip() and not between.line(line):
                out.skipped += 1
    if d:
        yield from between.table(d)
    yield from between.table(None)


class _Between:
    """What stable-baselines3's callbacks print between tables: an evaluation (a row of its
    own, unless the next table holds it) and a save (a checkpoint event)."""

    def __init__(self, out):
        self.out = out
        self.step_key, self.step = "time/total_timesteps", None  # the last table's
        self.eval = None  # an evaluation printed, waiting for the next table

    def table(self, d):
        """The rows a table ``d`` (None: the log's end) brings: the evaluation before it
        first, unless the table itself holds it."""
        if self.eval is not None and not (d and EVAL_KEYS[0] in d):
            yield self.eval
        self.eval = None
        if d is None:
            return
        for k, v in d.items():
            if k == "total_timesteps" or k.endswith("/total_timesteps"):
                self.step_key, self.step = k, v
                break
        yield d

    def line(self, line):
        """Whether ``line`` was an evaluation or a save (else it is skipped)."""
        m = EVAL_RE.match(line)
        if m is not None:
            self.eval = {self.step_key: m.group(1), EVAL_KEYS[0]: m.group(2)}
            return True
        m = EVAL_LENGTH_RE.match(line)
        if m is not None and self.eval is not None:
            self.eval[EVAL_KEYS[1]] = m.group(1)
            return True
        m = SAVE_RE.match(line)
        if m is not None:
            stated = SAVE_STEP_RE.search(m.group(1))
            step = stated.group(1) if stated else self.step
            try:
                self.out.event("checkpoint", float(step), line.strip())
            except (TypeError, ValueError):  # no table yet, no step in its name
                return False
            return True
        return False
