#!/usr/bin/env python3
"""train-log: read a training log where it lives and report spikes, events and batch shape.

Runs *there* (inside the container) with only the standard library, on Python >= 3.8.
The log is streamed once into compact ``array`` columns; only findings travel back.

Usage::

    trainlog.py PATH [--metrics loss,acc] [--metric NAME ...] [--preset olmo2|olmo-core|megatron]
                [--ckpt-steps 2000,4001] [--checkpoints DIR] [--steps-per-epoch 1931]
                [--tolerance STEPS] [--points 2000] [--format auto|jsonl|csv|json|text]

Inputs (auto-detected by content): JSON lines (W&B history with ``_step``, LLaMA-Factory /
TRL ``trainer_log.jsonl`` with ``current_steps``, or any ``step`` key), CSV with a header
(Lightning ``metrics.csv``, sparse rows), HF ``trainer_state.json`` (``log_history``), W&B
run files (``run-*.wandb``) and ``wandb-summary.json``, TensorBoard event files
(``simple_value`` and scalar tensors), the text of nanoGPT, llm.c, Megatron-LM and fairseq
(only lines in their format are data), else plain text with ``key=value`` or ``key: value``
pairs. PATH may be a run directory: the log in it is picked (``chosen_from`` says which and
why). Lines that announce checkpoint saves or resumes become events.

Records, one JSON object per stdout line, each with a ``"type"``; non-finite numbers are
sent as the strings ``"nan"``, ``"inf"``, ``"-inf"``:

``source``       path, chosen_from, format, dialect (whose log: Lightning, LLaMA-Factory,
                 HF, W&B), lines, rows, skipped, bad_lines, step_key, columns {label:
                 key}, metrics, first_step, last_step, stride, tolerance (steps that still
                 count as "at" an event); guesses and fallbacks come as ``warning``s
``preset``       name, window (used), preset_window, sigma, ratio, cliff_sigma, cliff_drop,
                 rule
``metric``       label, key, direction ("up", "down", "none"), n, flagged, spike_share,
                 nonfinite, median
``event``        kind (checkpoint, resume, epoch, warmup, lr-jump, pause), step, source, detail
``spike``        metric, kind (spike, cliff, nonfinite), step (the peak's), onset_step,
                 peak_step, value (the peak's), baseline,
                 scale, score, recovery_steps (None: not back by the end), flagged,
                 event, event_step, distance, bucket, run_position
``correlation``  kind, events, spikes, at_events, coverage, expected, p_value, beyond_chance
``distribution`` metric, scale, first_step, last_step, n, shape, modes [{center, weight, lo,
                 hi, bucket, purity}], bimodality, trend_slope, quantised ({distinct,
                 quantum} when the values are too coarse to have a shape, else None)
``periodicity``  lag and max_lag (in steps), lag_rows, stride, acf, periodic, quantised
``composition``  key, buckets [{bucket, batches, share, loss_median, max_run}], explained,
                 max_run, max_run_bucket, random_max_run, interleaved_max_run, homogeneous,
                 long_runs, modes_match, finding, verdict, derived (how the batch key was
                 derived from a running total, e.g. TRL's num_tokens, else None)
``histogram``    metric, scale, key, edges, counts {bucket: [...]}, modes, first_step,
                 last_step
``series``       metric, steps, values (min/max per bin; every spike kept)
``warning``      message
``error``        message (then exit 2)
``summary``      rows, spikes, events {kind: count}, findings [names], exit (always last)

Exit status: 0 nothing found, 1 findings, 2 could not run.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gc
import json
import math
import os
import pickletools
import re
import struct
import sys
import traceback
import zipfile
from array import array
from collections import Counter
from itertools import chain, compress, islice, repeat
from operator import ge, gt, itemgetter, le, lt, mul, ne, sub

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its shipped sibling modules
from protocol import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, emit, finish, mask  # the record protocol

COMMAND = "train-log"  # the command named in the final record

PRESETS = {
    "olmo2": {
        "window": 1000,
        "sigma": 7.0,
        "ratio": None,
        "rule": "OLMo 2: value >= 7 sigma from the rolling baseline of the last 1000 values",
    },
    "olmo-core": {
        "window": 128,
        "sigma": 6.0,
        "ratio": None,
        "rule": "OLMo-core: |x - baseline| / sigma > 6 over the last 128 values",
    },
    "megatron": {
        "window": 1000,
        "sigma": None,
        "ratio": 10.0,
        "rule": "Megatron --check-for-spiky-loss: value > 10x the running max of recent values",
    },
}
CLIFF_SIGMA = 4.0  # a cliff is >= 4 sigma below the baseline ...
CLIFF_DROP = 0.5  # ... and at most half of it
RECOVER_SIGMA = 3.0  # back to baseline: 3 values in a row within 3 sigma of it
SKETCH = 33  # values kept per block for the rolling quantiles
MAX_SPIKES = 500  # spike records sent (the highest scores); all are counted
MAX_EVENTS = 2000  # event records sent per kind
STABLE_MAX = 50000  # values of the stable window (the log's second half, the latest ones)

ROLES = {
    "loss": (
        "loss",
        "train/loss",
        "train_loss",
        "train_loss_step",
        "train/loss_step",
        "loss_step",
        "trl",
        "training_loss",
        "loss/train",
        "lm_loss",
        "train/lm_loss",
        "lm loss",
        "train_loss_epoch",
    ),
    "acc": (
        "acc",
        "accuracy",
        "train/acc",
        "train/accuracy",
        "train_acc",
        "train_accuracy",
        "train_acc_step",
        "acc/train",
        "accuracy/train",
    ),
    "lr": (
        "lr",
        "learning_rate",
        "train/lr",
        "train/learning_rate",
        "learning-rate",
        "learning rate",
        "lr-0",
        "lr-adamw",
        "lr-adam",
        "lr-sgd",
    ),
    "grad_norm": (
        "grad_norm",
        "train/grad_norm",
        "gradient_norm",
        "grad-norm",
        "grad norm",
        "total_grad_norm",
        "optim/total_grad_norm",
        "norm",
        "gnorm",
    ),
}
ROLE_NAMES = {
    "loss": "loss",
    "acc": "acc",
    "accuracy": "acc",
    "lr": "lr",
    "learning_rate": "lr",
    "grad_norm": "grad_norm",
}
STEP_KEYS = (
    "step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "train/step",
    "current_steps",
    "current_step",
    "num_updates",
    "iteration",
    "iter",
    "_step",
)
META = {
    "epoch": ("epoch", "train/epoch", "trainer/epoch"),
    "seq_len": ("seq_len", "seqlen", "seq_length", "max_len", "batch/seq_len", "train/seq_len"),
    "tokens": ("tokens", "num_tokens", "ntokens", "batch_tokens", "train/tokens"),
    "time": ("_timestamp", "timestamp", "time", "wall_time", "_runtime"),
}
BUCKET_KEYS = ("bucket", "length_bucket", "bucket_id", "batch/bucket", "train/bucket")
NOT_TRAIN = ("eval", "val", "test")

# Numbers: "nan", "inf", "-inf", "Infinity", "NaN" (any case, quoted or not) and numbers that
# overflow a double ("1e999") are read as the non-finite values they are; a finite value beyond
# float32's range (|v| > FMAX, e.g. 1e308: no fp32/bf16 training computes it) is an overflow
# marker too. Both are reported as "nonfinite" incidents with the value as logged, and left
# out of every baseline, median and distribution, so one of them cannot poison the statistics.
FMAX = 3.4028234663852886e38

# A NaN with a payload marks "key missing in this row"; a logged NaN is a plain NaN.
MISSING = struct.unpack("<d", struct.pack("<Q", 0x7FF80000DEADBEEF))[0]
_MISSING_BYTES = struct.pack("<d", MISSING)

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)\b"
PAIR_RE = re.compile(r"""['"]?([A-Za-z_][\w./\-]*)['"]?\s*[=:]\s*['"]?(""" + _NUM + ")", re.I)
# the fast path's looser pairs: any value token; float() decides (else the line goes slow)
FAST_PAIR_RE = re.compile(r"""([A-Za-z_][\w./\-]*)['"]?\s*[=:]\s*['"]?([^\s,|;'"{}()\[\]]+)""")
WORD_RE = re.compile(
    r"\b(step|iter|iteration|epoch|loss|acc|accuracy|lr|grad_norm)\s+(" + _NUM + ")", re.I
)
CKPT_RE = re.compile(
    r"\bsav(?:e|ed|ing)\b.{0,40}?(?:checkpoint|ckpt|state)|(?:checkpoint|ckpt)\b.{0,20}?\b(?:saved|written)",
    re.I,
)
RESUME_RE = re.compile(
    r"\bresum(?:e|ed|ing)\b|\brestor(?:e|ed|ing)\b.{0,30}?(?:checkpoint|ckpt|state)|\bload(?:ed|ing)?\b.{0,20}?(?:checkpoint|ckpt)",
    re.I,
)
EVENT_STEP_RE = re.compile(
    r"(?:global[_ ]?step|\bstep|\biter(?:ation)?|checkpoint|ckpt)[\s_\-=:#]*(\d+)", re.I
)
DIR_STEP_RE = re.compile(r"(?:step|iter|checkpoint|ckpt)[\s_\-=]*(\d+)", re.I)


class LogError(Exception):
    """The log cannot be analysed; the message says why and what to do."""


# --------------------------------------------------------------------------------------------
# output


def _num(v):
    """A finite float rounded to 6 significant digits, a whole one as an int: records stay
    small (a series of 2000 points); non-finite floats pass as they are (the protocol
    encodes them as "nan", "inf", "-inf")."""
    if isinstance(v, float) and math.isfinite(v):
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return float("%.6g" % v)
    return v


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _num(obj)


def send(rtype, **fields):
    """Write one record of ``rtype`` (numbers rounded by ``_num``) with the protocol."""
    rec = {"type": rtype}
    rec.update(_clean(fields))
    emit(rec)


def end(code, rows=0, spikes=0, events=None, findings=()):
    """The ``summary`` record (what was found, in counts), then the one final record."""
    send("summary", rows=rows, spikes=spikes, events=events or {}, findings=list(findings))
    return finish(COMMAND, code)


def failed(message, **fields):
    """The log could not be analysed: one ``error`` record, then the end with exit 2."""
    send("error", message=message, **fields)
    return end(EXIT_FAILED)


# --------------------------------------------------------------------------------------------
# reading


def _is_missing(x):
    return x != x and struct.pack("<d", x) == _MISSING_BYTES


def _to_float(v):
    if v is None:
        return MISSING
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().strip("'\""))
        except ValueError:
            return MISSING
    return MISSING


def _find_key(keys, aliases, bases=None):
    """``(key, exact)``: the first of ``aliases`` among ``keys`` (case-insensitive), else a
    key whose last ``/`` part is one of ``bases`` and that is not an eval/val/test key (a
    guess: ``exact`` is False)."""
    low = {}
    for k in keys:
        low.setdefault(k.lower(), k)
    for a in aliases:
        if a in low:
            return low[a], True
    if bases:
        for lk, k in low.items():
            if lk.startswith(NOT_TRAIN):
                continue
            if lk.rsplit("/", 1)[-1] in bases:
                return k, False
    return None, False


def resolve_columns(keys, wanted, step_key=None):
    """Map labels to row keys: ``(step_key, [(label, key)], [(meta, key)], bucket_key,
    missing_labels, guesses)``; ``guesses`` says in words which choice was not certain."""
    keys = list(keys)
    guesses = []
    if step_key is None or step_key not in keys:
        step_key, exact = _find_key(keys, STEP_KEYS, ("step", "global_step"))
        if step_key is None:
            guesses.append(
                "no step key found (looked for %s): row numbers are used as steps"
                % ", ".join(STEP_KEYS[:6])
            )
        elif not exact:
            guesses.append("step key %r chosen by its name's last part" % step_key)
    metrics = []
    missing = []
    names = wanted or ["loss", "acc", "lr", "grad_norm"]
    for name in names:
        role = ROLE_NAMES.get(name.lower())
        if role is not None:
            key, exact = _find_key(keys, (name.lower(),) + ROLES[role], ROLES[role])
            label = role
        else:
            key, exact = _find_key(keys, (name.lower(),), (name.lower(),))
            label = name
        if key is None or key == step_key or any(k == key for _, k in metrics):
            if wanted:
                missing.append(name)
            continue
        if not exact:
            guesses.append("%s: column %r chosen by its name's last part" % (label, key))
        elif key.lower().endswith("_epoch"):
            guesses.append("%s: only the per-epoch column %r was found" % (label, key))
        metrics.append((label, key))
    used = {step_key} | {k for _, k in metrics}
    meta = []
    for name, aliases in META.items():
        key, _ = _find_key(keys, aliases)
        if key is not None and key not in used:
            meta.append((name, key))
            used.add(key)
    bucket_key, _ = _find_key(keys, BUCKET_KEYS, ("bucket",))
    if bucket_key in used:
        bucket_key = None
    return step_key, metrics, meta, bucket_key, missing, guesses


class NoLoss(Exception):
    """No loss series in the log (and none named): the numeric columns there are."""

    def __init__(self, numeric, found):
        Exception.__init__(self, "no loss series found")
        self.numeric = numeric
        self.found = found


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
        vals = [_to_float(d.get(k)) for k in self.keys]
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

    def dict_event(self, d):
        for v in d.values():
            if isinstance(v, str) and ("heckpoint" in v or "ckpt" in v or "esum" in v):
                step = _to_float(d.get(self.step_key)) if self.step_key else MISSING
                return self.text_event(v, None if step is MISSING else step)
        return False

    def text_event(self, line, step=None):
        """A line that is not a metrics row: a checkpoint save or a resume, if it says so."""
        kind = None
        if RESUME_RE.search(line):
            kind = "resume"
        elif CKPT_RE.search(line):
            kind = "checkpoint"
        if kind is None:
            return False
        m = EVENT_STEP_RE.search(line)
        if m:
            step = float(m.group(1))
        elif step is None:
            step = self.last_step()
        self.events.append((kind, step, "log", mask(line.strip())[:160]))
        return True


def _maybe_event(ing, line):
    low = line.lower()
    if "checkpoint" in low or "ckpt" in low or "resum" in low or "restor" in low:
        return ing.text_event(line)
    return False


MAX_LINE = 1 << 20  # bytes: a longer line is skipped and counted, never held whole
BLOCK = 1 << 22  # bytes read at a time
SNIFF_BYTES = 1 << 24  # the sniff looks at most this far for its first lines
SNIFF_LINES = 200
MAX_DOC = 1 << 28  # a whole-document JSON (trainer_state.json) larger than this is refused


class Lines:
    """The lines of a binary file, a block at a time, each at most ``MAX_LINE`` bytes:
    longer ones (a 2 GiB line without a newline) are skipped while reading and counted in
    ``long``, so memory stays at one block whatever the file holds. NUL bytes are dropped."""

    def __init__(self, f, limit=None):
        self.f = f
        self.limit = limit
        self.long = 0
        self.nbytes = 0

    def __iter__(self):
        carry = b""
        dropping = False
        read = self.f.read
        while self.limit is None or self.nbytes < self.limit:
            chunk = read(BLOCK)
            if not chunk:
                break
            self.nbytes += len(chunk)
            if dropping:
                i = chunk.find(b"\n")
                if i < 0:
                    continue
                chunk = chunk[i + 1 :]
                dropping = False
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
            else:
                carry = buf[cut + 1 :]
                lines = self._split(buf[: cut + 1])
                if lines:
                    yield lines
            if len(carry) > MAX_LINE:
                self.long += 1
                carry = b""
                dropping = True
        if carry and not dropping and (self.limit is None or self.nbytes < self.limit):
            lines = self._split(carry + b"\n")
            if lines:
                yield lines

    def _split(self, data):
        if b"\0" in data:
            data = data.replace(b"\0", b"")
        lines = data.decode("utf-8", "replace").split("\n")
        lines.pop()
        if len(data) > MAX_LINE and max(map(len, lines)) > MAX_LINE:
            keep = [ln for ln in lines if len(ln) <= MAX_LINE]
            self.long += len(lines) - len(keep)
            lines = keep
        return lines


def _head(blocks, n):
    """The first ``n`` lines of ``blocks``, and an iterator over the blocks left."""
    head = []
    it = iter(blocks)
    for block in it:
        if len(head) + len(block) >= n:
            k = n - len(head)
            head.extend(block[:k])
            return head, chain([block[k:]], it)
        head.extend(block)
    return head, iter(())


# --------------------------------------------------------------------------------------------
# line formats of the trainers that print text: a line is data only if it matches its
# format's data pattern, and an event only if it matches an event pattern of that format.

_F = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
_PIPE_PAIR_RE = re.compile(r"([A-Za-z][\w ./\-]*?)\s*:\s*" + _F + r"\s*(?=\||$)", re.I)
_KV_RE = re.compile(r"([A-Za-z_][\w/.\-]*)=" + _F)


def _groups(rx):
    def parse(line):
        m = rx.search(line)
        if m is None:
            return None
        return {k: v for k, v in m.groupdict().items() if v is not None}

    parse.rx = rx
    return parse


def _megatron(line):
    # megatron/training/training.py training_log(): ' iteration  N/  M | consumed samples: ...
    # | learning rate: 1.5E-04 | global batch size: 512 | lm loss: 7.1E+00 | loss scale: 1.0 |
    # grad norm: 1.23 | number of skipped iterations: 0 | number of nan iterations: 0 |'
    m = _MEGATRON_RE.search(line)
    if m is None:
        return None
    d = dict(_PIPE_PAIR_RE.findall(line[m.end() :]))
    d["iteration"] = m.group(1)
    return d


_MEGATRON_RE = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")


def _fairseq(line):
    # fairseq/logging/progress_bar.py: JsonProgressBar prints '... | train_inner | {"epoch": 1,
    # "update": 0.1, "loss": "9.9", ..., "num_updates": "100", "lr": "5e-05", "gnorm": "1.2"}';
    # SimpleProgressBar prints 'epoch 001:    100 / 1102 loss=9.9, ..., num_updates=100, ...'
    i = line.find("| train_inner | {")
    if i >= 0:
        try:
            d = json.loads(line[i + 16 :])
        except (ValueError, RecursionError):  # nesting too deep
            return None
        return d if isinstance(d, dict) and "num_updates" in d else None
    if _FAIRSEQ_SIMPLE_RE.search(line):
        d = dict(_KV_RE.findall(line))
        return d if "num_updates" in d else None
    return None


_FAIRSEQ_SIMPLE_RE = re.compile(r"\bepoch \d+:\s+\d+ / \d+ ")


# (name, parse(line) -> dict or None, step key, [(event kind, pattern with a step group)],
#  where the format comes from)
LINE_FORMATS = (
    (
        # karpathy/nanoGPT train.py: print(f"iter {iter_num}: loss {lossf:.4f}, time
        # {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%"); "saving checkpoint to {out_dir}"
        # after "step {iter_num}: train loss ..., val loss ..."
        "nanogpt",
        _groups(re.compile(r"^iter (?P<iter>\d+): loss (?P<loss>" + _F[1:-1] + r"), time ")),
        "iter",
        (
            # the eval line before a save names its step (kind None: the step of what follows)
            (None, re.compile(r"^step (\d+): train loss ")),
            ("checkpoint", re.compile(r"^saving checkpoint to ")),
        ),
    ),
    (
        # karpathy/llm.c llmc/logger.h: "s:%d trl:%.4f lr:%.6f norm:%.4f" and "s:%d tel:%.4f"
        "llm.c",
        _groups(
            re.compile(
                r"^s:(?P<s>\d+) trl:(?P<trl>" + _F[1:-1] + r")"
                r"(?: lr:(?P<lr>" + _F[1:-1] + r"))?(?: norm:(?P<norm>" + _F[1:-1] + r"))?"
            )
        ),
        "s",
        (),
    ),
    (
        # karpathy/llm.c train_gpt2.cu: "step %4d/%d | train loss %7.6f | norm %6.4f | lr %.2e |
        # %.2f ms | ..." (train_gpt2.c: "step %d: train loss %f (took %f ms)")
        "llm.c-stdout",
        _groups(
            re.compile(
                r"^step\s+(?P<step>\d+)(?:/\d+)?\s*[|:]\s*(?:train )?loss (?P<loss>"
                + _F[1:-1]
                + r")(?:.*?\bnorm (?P<norm>"
                + _F[1:-1]
                + r"))?(?:.*?\blr (?P<lr>"
                + _F[1:-1]
                + r"))?"
            )
        ),
        "step",
        (("checkpoint", re.compile(r"^[Ww]riting (?:model|state) .*?(?:step|_)(\d+)")),),
    ),
    (
        "megatron",
        _megatron,
        "iteration",
        (
            ("checkpoint", re.compile(r"saving checkpoint at iteration\s+(\d+)")),
            ("resume", re.compile(r"successfully loaded checkpoint from .*? at iteration\s+(\d+)")),
        ),
    ),
    (
        "fairseq",
        _fairseq,
        "num_updates",
        (
            ("checkpoint", re.compile(r"\bsaved checkpoint .*?\(epoch \d+ @ (\d+) updates")),
            ("resume", re.compile(r"\bloaded checkpoint .*?\(epoch \d+ @ (\d+) updates")),
        ),
    ),
)


def sniff(path):
    """``(format, line format or None)``: ``jsonl``, ``json`` (a whole document:
    trainer_state.json), ``csv``, ``tfevents``, ``wandb`` or ``text``; for text, the trainer
    whose line format most lines match. Looks at the first lines only, each bounded."""
    with open(path, "rb") as f:
        magic = f.read(16)
        f.seek(0)
        if magic[:3] == b":W&" or magic[:4] == b"W&B\x00":
            return "wandb", None
        if _looks_tfrecord(magic):
            return "tfevents", None
        src = Lines(f, SNIFF_BYTES)
        lines = []
        for block in src:
            for ln in block:
                ln = ln.strip()
                if ln:
                    lines.append(ln)
                    if len(lines) >= SNIFF_LINES:
                        break
            if len(lines) >= SNIFF_LINES:
                break
    if not lines:
        if src.long and magic.lstrip()[:1] in (b"{", b"["):
            return "json", None  # one compact JSON document (trainer_state.json on one line)
        if src.long:
            raise LogError(
                "no line shorter than %d bytes in the first %d MiB (%d over-long lines skipped)"
                % (MAX_LINE, SNIFF_BYTES >> 20, src.long)
            )
        raise LogError("the log is empty")
    lines = [ln.lstrip("\ufeff") for ln in lines[:SNIFF_LINES]]
    first = lines[0]
    if not first.startswith(("{", "[")) and _mostly_json_objects(lines):
        return "jsonl", None  # a banner or a stray print before the JSON lines
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # nesting too deep
            return "json", None
        if isinstance(obj, dict) and "log_history" not in obj:
            if "_wandb" in obj and len(lines) == 1:
                return "json", None  # wandb-summary.json: one document, one line
            return "jsonl", None
        return "json", None
    if first.startswith("["):
        return "json", None
    best, hits = None, 0
    for lf in LINE_FORMATS:
        k = sum(1 for ln in lines if lf[1](ln) is not None)
        if k > hits:
            best, hits = lf, k
    if best is not None:
        return "text", best
    for delim in (",", "\t"):
        cells = [c.strip().strip('"') for c in first.split(delim)]
        if (
            len(cells) >= 2
            and "=" not in first
            and all(re.match(r"^[A-Za-z_][\w./\- ]*$", c) for c in cells if c)
            and (len(lines) < 2 or len(lines[1].split(delim)) == len(first.split(delim)))
        ):
            return "csv", None
    return "text", None


def _mostly_json_objects(lines):
    """Most of these lines are JSON objects (``{...}`` that parse)."""
    objs = 0
    for ln in lines:
        if ln[:1] == "{" and ln[-1:] == "}":
            try:
                objs += isinstance(json.loads(ln), dict)
            except ValueError:
                pass
    return objs * 2 > len(lines)


def _looks_tfrecord(head):
    """A TFRecord starts with a little-endian uint64 length and a masked CRC of it."""
    if len(head) < 12:
        return False
    return _masked_crc(head[:8]) == struct.unpack("<I", head[8:12])[0]


# --------------------------------------------------------------------------------------------
# binary logs: TensorBoard event files and W&B run files, read with the standard library


def _crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def _masked_crc(data):
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h Mask)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(buf, i):
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    shift, out = 0, 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _fields(buf):
    """``(field number, wire type, value)`` of one protobuf message: varints as ints,
    fixed64/fixed32 as raw 8/4 bytes, length-delimited as a memoryview slice."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        wt = key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            ln, i = _varint(buf, i)
            v = buf[i : i + ln]
            i += ln
        elif wt == 1:
            v = buf[i : i + 8]
            i += 8
        elif wt == 5:
            v = buf[i : i + 4]
            i += 4
        else:
            raise ValueError("protobuf wire type %d" % wt)
        if i > n:
            raise ValueError("truncated protobuf field")
        yield key >> 3, wt, v


_F32 = struct.Struct("<f").unpack
_F64 = struct.Struct("<d").unpack


def _tensor_scalar(buf):
    """The value of a scalar TensorProto (tensorflow/core/framework/tensor.proto: dtype 1,
    tensor_shape 2 {dim 2}, tensor_content 4, half_val 13, float_val 5, double_val 6,
    int_val 7, int64_val 10); None for anything that is not one number (a histogram, an
    image, a string): those are not scalar series."""
    dtype = 0
    val = None
    for f, wt, v in _fields(buf):
        if f == 1:
            dtype = v
        elif f == 2:
            if any(sf == 2 for sf, _, _ in _fields(v)):
                dims = 1
                for sf, _, dv in _fields(v):
                    if sf == 2:
                        for df, _, size in _fields(dv):
                            if df == 1:
                                dims *= size
                if dims != 1:
                    return None
        elif f == 4 and dtype in (1, 2):
            if len(v) != (4 if dtype == 1 else 8):
                return None
            val = (_F32 if dtype == 1 else _F64)(bytes(v))[0]
        elif f == 5 and val is None:
            val = _F32(bytes(v[:4]))[0]
        elif f == 6 and val is None:
            val = _F64(bytes(v[:8]))[0]
        elif f in (7, 10) and val is None:
            if wt == 0:
                val = float(v if v < 1 << 63 else v - (1 << 64))
            elif wt == 2 and len(v):
                n, _ = _varint(v, 0)
                val = float(n if n < 1 << 63 else n - (1 << 64))
        elif f == 8:
            return None  # string_val: text, not a number
    return val


def _event_scalars(buf, row):
    """One Event (tensorflow/core/util/event.proto: wall_time 1, step 2, summary 5) into
    ``row``; Summary.Value: tag 1, simple_value 2, tensor 8. Returns the step or None."""
    step = None
    for f, _, v in _fields(buf):
        if f == 2:
            step = v
        elif f == 5:
            for sf, _, sv in _fields(v):
                if sf != 1:
                    continue
                tag, val = None, None
                for vf, _, vv in _fields(sv):
                    if vf == 1:
                        tag = bytes(vv).decode("utf-8", "replace")
                    elif vf == 2:
                        val = _F32(bytes(vv))[0]
                    elif vf == 8:
                        val = _tensor_scalar(vv)
                if tag is not None and val is not None:
                    row[tag] = val
    return step


def _tfrecords(f, counts=None):
    """Payloads of a TFRecord file: uint64 length, uint32 masked CRC of it, data, CRC. A
    length whose CRC does not match ends the reading (the records after it cannot be
    found): ``counts[2]`` is then its offset."""
    read = f.read
    unpack = struct.Struct("<QI").unpack
    while True:
        head = read(12)
        if len(head) < 12:
            return
        n, crc = unpack(head)
        if _masked_crc(head[:8]) != crc:
            if counts is None:
                raise LogError("a corrupt TFRecord length at offset %d" % (f.tell() - 12))
            counts[2] = f.tell() - 12
            return
        if n > MAX_LINE * 64:
            raise LogError("a TFRecord of %d bytes at offset %d: not an event file" % (n, f.tell()))
        data = read(n + 4)
        if len(data) < n + 4:
            return  # the writer was still writing: the last record is partial
        yield memoryview(data)[:n]


def _rows_into(rows_iter, wanted, step_key, need=None):
    """An Ingest from an iterator of row dicts (first rows choose the columns; ``need``, a
    one-item list, then tells the iterator which keys are kept)."""
    head = list(islice(rows_iter, HEAD_ROWS))
    keys = Counter()
    for d in head:
        keys.update(d.keys())
    ing = _ingest_for(keys, wanted, head, step_key)
    if need is not None:
        need[0] = set(ing.keys) | ({ing.bucket_key} if ing.bucket_key else set())
    n = 0
    for d in chain(head, rows_iter):
        ing.add(d)
        n += 1
        if not n % 65536:
            ing.flush()
    ing.flush()
    return ing, n


def _tf_rows(path, counts):
    with open(path, "rb") as f:
        row, step = {}, None
        for data in _tfrecords(f, counts):
            counts[0] += 1
            cur = {}
            try:
                s = _event_scalars(data, cur)
            except (ValueError, IndexError, struct.error):
                counts[1] += 1  # a record that is not a well-formed Event: skipped
                continue
            if not cur:
                continue
            if s != step and row:
                yield row
                row = {}
            step = s
            row.update(cur)
            row["step"] = float(s or 0)
        if row:
            yield row


def read_tfevents(path, wanted):
    """Scalars of a TensorBoard event file, one row per step."""
    counts = [0, 0, None]
    ing, _ = _rows_into(_tf_rows(path, counts), wanted, "step")
    _damage(ing, counts, "event file")
    return ing, "tensorboard", counts[0]


def _damage(ing, counts, what):
    """Corrupt records of a binary log: counted as bad lines and said in a warning."""
    ing.bad += counts[1]
    if counts[1]:
        ing.guesses.append("%d corrupt record(s) in the %s skipped" % (counts[1], what))
    if counts[2] is not None:
        ing.guesses.append(
            "the %s is corrupt at byte %d: nothing after it was read" % (what, counts[2])
        )


# wandb/sdk/internal/datastore.py: a 7-byte file header ":W&B", magic 0xBEE1, version 0;
# then LevelDB-log framing: 32 KiB blocks, each record chunk a 7-byte header (crc32, length,
# type: 1 full, 2 first, 3 middle, 4 last); a block tail under 7 bytes is zero padding.
_WB_BLOCK = 32768


def _wandb_records(f):
    data = f.read(7)
    if data[:4] != b":W&B":
        raise LogError("not a W&B run file (no :W&B header)")
    off = 7
    parts = []
    hdr = struct.Struct("<IHB").unpack
    buf = b""
    pos = 0
    while True:
        if len(buf) - pos < _WB_BLOCK + 7:
            buf = buf[pos:] + f.read(BLOCK)
            pos = 0
        left = _WB_BLOCK - off % _WB_BLOCK
        if left < 7:
            pos += left
            off += left
            continue
        if len(buf) - pos < 7:
            return
        _, ln, typ = hdr(buf[pos : pos + 7])
        if typ == 0 and ln == 0:
            pos += left
            off += left
            continue
        chunk = buf[pos + 7 : pos + 7 + ln]
        if len(chunk) < ln:
            return
        pos += 7 + ln
        off += 7 + ln
        if typ == 1:
            yield chunk
        elif typ == 2:
            parts = [chunk]
        elif typ == 3:
            parts.append(chunk)
        elif typ == 4:
            parts.append(chunk)
            yield b"".join(parts)
            parts = []


def _pb_varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _wandb_rows(path, counts, need=None):
    """History rows of a ``.wandb`` file (wandb_internal.proto: Record num 1, history 2;
    HistoryRecord item 1, step 2 {num 1}; HistoryItem key 1, nested_key 2, value_json 16;
    wandb-core writes every key as nested_key parts).

    ``need``: a one-item list that the caller fills with the keys it keeps once the columns
    are chosen; from then on each record is searched for just those items (``bytes.find``)
    instead of walking every field, and a record whose items do not look as expected is
    walked in full."""
    loads = json.loads
    names = {}  # key bytes -> str, decoded once
    pats = None
    with open(path, "rb") as f:
        for rec in _wandb_records(f):
            counts[0] += 1
            rec = bytes(rec)
            if pats is None and need is not None and need[0] is not None:
                # a nested key ("a.b": parts ["a", "b"]) is not one encoded key: walk in full
                pats = (
                    []
                    if any("." in k for k in need[0])
                    else [
                        (k, b"\x12" + tail, b"\x0a" + tail)
                        for k in need[0]
                        for tail in [
                            _pb_varint(len(k.encode("utf-8"))) + k.encode("utf-8") + b"\x82\x01"
                        ]
                    ]
                )
            try:
                row = _wandb_record(rec, pats, loads, names)
            except (ValueError, IndexError):
                counts[1] += 1  # not a well-formed Record: skipped
                continue
            if row:
                yield row


def _wandb_record(rec, pats, loads, names):
    """The history row of one Record, or None."""
    row = None
    i, n = 0, len(rec)
    while i < n:
        key, i = _varint(rec, i)
        wt = key & 7
        if wt == 2:
            ln, i = _varint(rec, i)
            if i + ln > n:
                raise ValueError("truncated field")
            if key == 0x12:  # field 2, history
                if pats:
                    row = _wandb_find(rec, i, i + ln, pats, loads)
                if row is None:
                    row = _wandb_history(rec, i, i + ln, loads, names)
            i += ln
        elif wt == 0:
            _, i = _varint(rec, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("protobuf wire type %d" % wt)
    return row


def _wandb_find(rec, start, end, pats, loads):
    """The items named in ``pats`` of one HistoryRecord, found by their encoded key; None
    when an item's header is not the one-byte-length form expected (then walk in full)."""
    row = {}
    find = rec.find
    for name, pat, alt in pats:
        j = find(pat, start, end)
        if j < 0:
            j = find(alt, start, end)  # the older writers' key field
            if j < 0:
                continue
        k = j + len(pat)
        vlen, v = _varint(rec, k)
        if j - start < 2 or rec[j - 2] != 0x0A or rec[j - 1] != v + vlen - j:
            return None
        try:
            row[name] = loads(rec[v : v + vlen])
        except ValueError:
            pass
    return row


def _wandb_history(buf, i, end, loads, names):
    """One HistoryRecord ``buf[i:end]`` as a row dict (values decoded from their JSON)."""
    row = {}
    step = None
    while i < end:
        key, i = _varint(buf, i)
        if key & 7 != 2:
            if key & 7 == 0:
                _, i = _varint(buf, i)
                continue
            return row  # fixed-width fields are not in a HistoryRecord: stop here
        ln, i = _varint(buf, i)
        stop = i + ln
        if key == 0x0A:  # item
            name, val = None, None
            while i < stop:
                k, i = _varint(buf, i)
                if k & 7 != 2:
                    if k & 7 == 0:
                        _, i = _varint(buf, i)
                        continue
                    break
                ln, i = _varint(buf, i)
                if k == 0x82:  # field 16, value_json
                    val = buf[i : i + ln]
                elif k == 0x0A or k == 0x12:  # key, nested_key
                    raw = buf[i : i + ln]
                    part = names.get(raw)
                    if part is None:
                        part = names[raw] = raw.decode("utf-8", "replace")
                    name = part if name is None or k == 0x0A else name + "." + part
                i += ln
            if name is not None and val is not None:
                try:
                    row[name] = loads(val)
                except ValueError:
                    pass
        elif key == 0x12:  # step {num 1}
            if i < stop and buf[i] == 0x08:
                step, _ = _varint(buf, i + 1)
        i = stop
    if row and step is not None:
        row.setdefault("_step", step)
    return row


def read_wandb(path, wanted):
    """History of a W&B run file (``run-*.wandb``), without wandb installed."""
    counts = [0, 0, None]
    # a trainer's own step (HF: train/global_step, Lightning: trainer/global_step) over W&B's
    # row counter _step, which counts log calls, not optimizer steps
    need = [None]
    ing, _ = _rows_into(_wandb_rows(path, counts, need), wanted, None, need)
    _damage(ing, counts, "W&B run file")
    return ing, "wandb", counts[0]


def _text_row(line):
    d = dict(PAIR_RE.findall(line))
    if not d or not any(k.lower() in ("step", "iter", "iteration") for k in d):
        for k, v in WORD_RE.findall(line):
            d.setdefault(k.lower(), v)
    return d


HEAD_ROWS = 5000  # rows read before the columns are chosen


def read_log(path, fmt, wanted):
    """Stream the log once; return ``(Ingest, format, lines, extra)``."""
    auto = fmt == "auto"
    lf = None
    if auto:
        fmt, lf = sniff(path)
    extra = {}
    if fmt == "tfevents":
        return read_tfevents(path, wanted) + (extra,)
    if fmt == "wandb":
        return read_wandb(path, wanted) + (extra,)
    doc = None
    if fmt == "json":
        size = os.path.getsize(path)
        if size > MAX_DOC:
            raise LogError(
                "a %d MiB JSON document; over %d MiB is not read whole (is it JSON lines?)"
                % (size >> 20, MAX_DOC >> 20)
            )
        with open(path, encoding="utf-8", errors="replace") as f:
            try:
                doc = json.load(f)
            except ValueError as exc:
                if not auto:
                    raise LogError("not valid JSON (%s)" % exc) from None
                fmt = "text"  # e.g. HF's stdout: {'loss': 0.7, 'learning_rate': 2e-05}
    if fmt == "json":
        if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
            rows = doc["log_history"]
            fmt = "trainer_state"
            for k in ("save_steps", "max_steps", "num_train_epochs", "global_step"):
                if isinstance(doc.get(k), (int, float)):
                    extra[k] = doc[k]
        elif isinstance(doc, list):
            rows = doc
        elif isinstance(doc, dict) and ("_step" in doc or "_wandb" in doc):
            # wandb-summary.json: the last value of each key, one row (no history)
            rows = [doc]
            fmt = "wandb-summary"
            extra["summary_only"] = True
        else:
            raise LogError("a JSON document without log_history (not a trainer_state.json)")
        rows = [r for r in rows if isinstance(r, dict)]
        head = rows[:HEAD_ROWS]
        ing = _ingest_for(Counter(chain.from_iterable(r.keys() for r in head)), wanted, head)
        for r in rows:
            ing.add(r)
        return ing, fmt, len(rows), extra
    with open(path, "rb") as f:
        src = Lines(f)
        if fmt == "csv":
            out = _read_csv(src, wanted)
        elif fmt == "jsonl":
            out = _read_jsonl(src, wanted)
        elif lf is not None:
            out = _read_formatted(src, lf, wanted)
        else:
            out = _read_text(src, wanted)
    out[0].long = src.long
    return out + (extra,)


def dialect_of(fmt, ing):
    """Whose log a generic format is, from the columns it has (None: any trainer's)."""
    keys = {k for k in ing.all_keys} if getattr(ing, "all_keys", None) else set(ing.keys)
    if fmt == "csv" and "step" in keys and any(k.endswith(("_step", "_epoch")) for k in keys):
        return "Lightning CSVLogger metrics.csv"
    if fmt == "jsonl":
        if "current_steps" in keys:
            return "LLaMA-Factory / TRL trainer_log.jsonl"
        if "_step" in keys or "_runtime" in keys:
            return "W&B history"
    if fmt == "trainer_state":
        return "HF Trainer trainer_state.json log_history"
    return None


def _numeric_keys(rows):
    """Keys with a number for a value in any of these rows (dicts)."""
    out = set()
    for d in rows:
        if not isinstance(d, dict):
            continue
        for k, v in d.items():
            if k in out or isinstance(v, bool):
                continue
            if isinstance(v, (int, float)) or (isinstance(v, str) and _to_float(v) is not MISSING):
                out.add(k)
    return out


def _ingest_for(keys, wanted, head=(), step_key=None):
    """An :class:`Ingest` for rows with these keys (a Counter of the first rows' keys).

    Without a loss series (and no metric named), the log cannot answer the question: the
    error lists the numeric columns there are, for ``--metrics`` to name one."""
    cols = resolve_columns(keys, wanted, step_key)
    step_key, metrics, meta, bucket_key, missing, guesses = cols
    if not wanted and not any(label == "loss" for label, _ in metrics):
        numeric = sorted(_numeric_keys(head) - {step_key}) if head else sorted(keys)
        raise NoLoss(numeric, [k for _, k in metrics])
    if not metrics:
        raise NoLoss(sorted(_numeric_keys(head) - {step_key}) if head else sorted(keys), [])
    ing = Ingest(step_key, metrics, meta, bucket_key)
    ing.missing = missing
    ing.guesses = guesses
    ing.all_keys = list(keys)
    return ing


def _read_jsonl(src, wanted):
    loads = json.loads
    nlines = 0
    lines, blocks = _head(src, HEAD_ROWS)
    head = []
    nlines = len(lines)
    for line in lines:
        if line[:1] == "{":
            try:
                d = loads(line)
            except (ValueError, RecursionError):  # nesting too deep
                head.append(None)
                continue
            head.append(d)
        elif line.strip():
            head.append(line)
    keys = Counter()
    for d in head:
        if isinstance(d, dict):
            keys.update(d.keys())
    ing = _ingest_for(keys, wanted, head)
    for d in head:
        if d is None:
            ing.bad += 1
        elif isinstance(d, str):
            if not _maybe_event(ing, d):
                ing.skipped += 1
        else:
            ing.add(d)
    # The hot loop: one json.loads and one array.extend per line.
    ext = ing.flat.extend
    getter = ing.getter
    bkey = ing.bucket_key
    codes = ing.codes
    app = codes.append
    cmap = ing.cmap
    slow = ing.slow
    for block in blocks:
        nlines += len(block)
        for line in block:
            if line[:1] != "{":
                if line.strip() and not _maybe_event(ing, line):
                    ing.skipped += 1
                continue
            try:
                d = loads(line)
            except (ValueError, RecursionError):  # nesting too deep
                ing.bad += 1
                continue
            try:
                ext(getter(d))
            except KeyError:
                slow(d)
                continue
            except TypeError:
                ing.fix_partial()
                slow(d)
                continue
            if bkey is not None:
                bv = d.get(bkey)
                try:
                    app(cmap[bv])
                except (KeyError, TypeError):
                    app(ing.code(bv))
        ing.flush()
    return ing, "jsonl", nlines


def _read_csv(src, wanted):
    blocks = iter(src)
    first = None
    pending = []
    for block in blocks:
        for i, ln in enumerate(block):
            if ln.strip():
                first = ln.lstrip("\ufeff")
                pending = block[i + 1 :]
                break
        if first is not None:
            break
    if first is None:
        raise LogError("the log is empty")
    delim = "\t" if first.count("\t") > first.count(",") else ","
    header = [h.strip() for h in next(csv.reader([first], delimiter=delim))]
    head_rows = [dict(zip(header, r)) for r in csv.reader(pending[:HEAD_ROWS], delimiter=delim)]
    ing = _ingest_for(Counter(header), wanted, head_rows)
    pos = {h: i for i, h in enumerate(header)}
    idx = [pos[k] for k in ing.keys]
    getter = itemgetter(*idx) if len(idx) > 1 else (lambda r, i=idx[0]: (r[i],))
    bidx = pos[ing.bucket_key] if ing.bucket_key is not None else None
    ext = ing.flat.extend
    m0, m1 = ing.m0, ing.m1
    nm = m1 - m0
    codes = ing.codes

    def code_of(row):
        return ing.code(row[bidx] if bidx < len(row) else None)

    # Sparse rows (Lightning: one metric per row, the other cells empty) convert cell by
    # cell; a file whose first rows are sparse skips the all-cells-at-once attempt.
    sparse = any(not r.get(k) for r in head_rows[:200] for k in ing.keys)
    nlines = 1
    width = len(header)
    for block in chain([pending], blocks):
        nlines += len(block)
        # a block's rows are held at once: without the cyclic GC scanning them (they hold
        # only strings), which otherwise costs more than the parse
        gc_was = gc.isenabled()
        gc.disable()
        try:
            rows = list(filter(None, csv.reader(block, delimiter=delim)))
            if bidx is None and _csv_columns(ing, rows, idx, width, header):
                continue
        finally:
            if gc_was:
                gc.enable()
        for row in rows:
            if not sparse:
                try:
                    ext(map(float, getter(row)))
                except (ValueError, IndexError, TypeError):
                    ing.fix_partial()
                else:
                    if bidx is not None:
                        codes.append(code_of(row))
                    continue
            try:
                vals = [float(c) if c else MISSING for c in getter(row)]
            except (ValueError, IndexError, TypeError):
                vals = None
            if vals is None or (m0 and vals[0] is MISSING) or vals[m0:m1].count(MISSING) == nm:
                if len(row) == 1 and _maybe_event(ing, row[0]):
                    continue
                ing.slow(dict(zip(header, row)))
                continue
            ext(vals)
            if bidx is not None:
                codes.append(code_of(row))
        ing.flush()
    return ing, "csv", nlines


def _csv_columns(ing, rows, idx, width, header):
    """A block of CSV rows of one width converted a column at a time (``array(map(float))``
    per column; empty cells are missing). False, with nothing done, when a row needs the
    row-by-row path: a step cell empty, a text cell in a kept column, rows of other widths."""
    if not rows or len(set(map(len, rows))) != 1 or len(rows[0]) != width:
        return False
    cols = {i: list(map(itemgetter(i), rows)) for i in set(idx)}
    out = []
    for i in idx:
        c = cols[i]
        try:
            out.append(array("d", map(float, c)))
        except ValueError:
            try:
                out.append(array("d", [float(x) if x else MISSING for x in c]))
            except ValueError:
                return False
    m0, m1 = ing.m0, ing.m1
    if m0 and "" in cols[idx[0]]:
        return False  # an empty step: the row-by-row path numbers it
    empty = None
    for i in idx[m0:m1]:
        c = cols[i]
        if "" not in c:
            empty = None
            break
        e = {k for k, x in enumerate(c) if not x}
        empty = e if empty is None else empty & e
    ing.flush()
    if empty:
        # rows without any kept metric (Lightning's epoch rows): counted, as row by row
        for k in sorted(empty):
            ing.slow(dict(zip(header, rows[k])))
        keep = [k not in empty for k in range(len(rows))]
        out = [array("d", compress(a, keep)) for a in out]
    for col, a in zip(ing.cols, out):
        col.extend(a)
    return True


def _read_formatted(src, lf, wanted):
    """A trainer's text log: only lines matching its data pattern are rows; events only from
    its event lines; everything else (source code, config dumps, tracebacks) is skipped."""
    name, parse, step_key, event_res = lf
    lines, blocks = _head(src, HEAD_ROWS)
    parsed = [parse(ln) for ln in lines]
    head = [d for d in parsed if d]
    keys = Counter()
    for d in head:
        keys.update(d.keys())
    ing = _ingest_for(keys, wanted, head, step_key)
    ext = ing.flat.extend
    getter = ing.getter
    nlines = 0
    at = [None]  # a step named by a line without data (nanoGPT's eval line), for what follows

    def other(line):
        for kind, rx in event_res:
            m = rx.search(line)
            if m:
                step = float(m.group(1)) if m.groups() else at[0]
                if kind is None:
                    at[0] = step
                    return
                if step is None:
                    step = ing.last_step()
                ing.events.append((kind, step, "log", mask(line.strip())[:160]))
                return
        if line.strip():
            ing.skipped += 1

    # One regex whose named groups are the columns: its groups go straight into the array.
    rx = getattr(parse, "rx", None)
    direct = rx is not None and all(k in rx.groupindex for k in ing.keys)
    search = rx.search if direct else None
    keys = tuple(ing.keys)
    one = len(keys) == 1
    for block in chain([lines], blocks):
        nlines += len(block)
        for line in block:
            if direct:
                m = search(line)
                if m is None:
                    other(line)
                    continue
                at[0] = None
                try:
                    ext(map(float, (m.group(keys[0]),) if one else m.group(*keys)))
                except (ValueError, TypeError):
                    ing.fix_partial()
                    ing.slow({k: v for k, v in m.groupdict().items() if v is not None})
                continue
            d = parse(line)
            if d is None:
                other(line)
                continue
            at[0] = None
            try:
                ext(map(float, getter(d)))
            except (KeyError, ValueError, TypeError):
                ing.fix_partial()
                ing.slow(d)
        ing.flush()
    return ing, name, nlines


def _read_text(src, wanted):
    lines, blocks = _head(src, HEAD_ROWS)
    nlines = 0
    keys = Counter()
    plain = Counter()
    parsed = []
    for line in lines:
        d = _text_row(line)
        parsed.append(d)
        keys.update(d.keys())
        plain.update(dict(FAST_PAIR_RE.findall(line)).keys())
    ing = _ingest_for(keys, wanted, parsed)
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
        for line in block:
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
    return ing, "text", nlines


def _text_line(ing, line, d):
    event = _maybe_event(ing, line)
    if d is None:
        d = _text_row(line)
    if d:
        ing.slow(d, quiet=event)
    elif line.strip() and not event:
        ing.skipped += 1


# --------------------------------------------------------------------------------------------
# arithmetic helpers (no numpy there)


def _quantile(sorted_vals, q):
    n = len(sorted_vals)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _median(vals):
    return _quantile(sorted(vals), 0.5)


def _robust_sigma(s):
    """A sigma from a sorted sample: IQR / 1.349, falling back to wider quantiles."""
    sig = (_quantile(s, 0.75) - _quantile(s, 0.25)) / 1.349
    if sig <= 0:
        sig = (_quantile(s, 0.9) - _quantile(s, 0.1)) / 2.563
    if sig <= 0:
        sig = (s[-1] - s[0]) / 6.0
    if sig <= 0:
        sig = max(abs(_quantile(s, 0.5)) * 1e-3, 1e-12)
    return sig


def binom_sf(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    total = 0.0
    for i in range(k, n + 1):
        total += math.comb(n, i) * p**i * (1 - p) ** (n - i)
    return min(1.0, total)


def decimate(vals, points, keep=()):
    """Indices that keep each bin's min and max (about ``points`` of them) plus ``keep``."""
    n = len(vals)
    if points <= 0:
        return []
    if n <= points:
        return list(range(n))
    bins = max(1, points // 2)
    size = -(-n // bins)
    out = set(i for i in keep if 0 <= i < n)
    for lo in range(0, n, size):
        seg = vals[lo : lo + size]
        out.add(lo + seg.index(max(seg)))
        out.add(lo + seg.index(min(seg)))
    out.add(0)
    out.add(n - 1)
    return sorted(out)


# --------------------------------------------------------------------------------------------
# spikes and cliffs


def _window_stats(pool):
    """Baseline of a sorted sample: (median, sigma, 2nd percentile, max).

    sigma is the larger of IQR / 1.349 and the standard deviation of the values between the
    1st and 99th percentile: robust to the few spike values, yet not fooled into a tiny sigma
    when the values form several modes (a frequent bucket with a higher loss is no spike).
    """
    m = len(pool)
    med = _quantile(pool, 0.5)
    sig = _robust_sigma(pool)
    cut = m // 100
    core = pool[cut : m - cut] if m - 2 * cut >= 3 else pool
    mean = sum(core) / len(core)
    var = sum(map(mul, core, core)) / len(core) - mean * mean
    if var > 0:
        sig = max(sig, math.sqrt(var))
    return med, sig, _quantile(pool, 0.02), pool[-1]


def _sketch(sorted_vals):
    m = len(sorted_vals)
    if m <= SKETCH:
        return sorted_vals
    return [sorted_vals[(i * (m - 1)) // (SKETCH - 1)] for i in range(SKETCH)]


def _recovery(vals, j, thr, up, cap, onset):
    """First index after ``j`` where the metric is back at its baseline: 3 values in a row
    within ``thr``, or fewer when the next one beyond ``onset`` starts a new incident (a
    return to baseline ends an incident: a blip and a later spike are two)."""
    n = len(vals)
    end = min(n, j + 1 + cap)
    t = j + 1
    while t < end:
        w = vals[t : t + 3]
        for a, v in enumerate(w):
            if (v > onset) if up else (v < onset):
                w = w[:a]
                break
        if w and ((max(w) <= thr) if up else (min(w) >= thr)):
            return t
        t += 1
    return None


def detect(label, vals, rows, steps, direction, preset):
    """Spikes (``up``) or cliffs (``down``) of one metric: ``(incidents, flagged)``.

    The baseline of each value is the median and sigma of the preceding ``window`` values,
    refreshed every ``window // 8`` values from per-block quantile sketches (at most 33
    values each, exact for small blocks). Values inside an incident (onset to recovery)
    never enter a baseline, as OLMo-core skips a spiking step. One incident per onset: the
    flagged values until the metric is back (3 values in a row within 3 sigma) belong to it.
    """
    n = len(vals)
    if n == 0 or direction == "none":
        return [], 0
    window = preset["window"]
    b = max(4, window // 8)
    nwin = max(1, window // b)
    minp = min(window, max(20, window // 10))
    ratio = preset["ratio"] if direction == "up" else None
    up = direction == "up"
    cap = 20 * window
    sketches = []  # per block: (sorted sketch, number of values it stands for)
    incidents = []
    flagged = 0
    stop = -1  # end (exclusive) of the current incident
    spans = []  # (start, stop) of every incident, to keep them out of the baselines
    for k in range(-(-n // b)):
        lo = k * b
        seg = vals[lo : lo + b]
        prev = [sk for sk in sketches[max(0, k - nwin) : k] if sk[1]]
        stats = None
        if sum(sk[1] for sk in prev) >= minp:
            pool = sorted(chain.from_iterable(sk[0] for sk in prev))
            stats = _window_stats(pool)
        if stats is not None:
            med, sig, q02, wmax = stats
            if up:
                thr = ratio * wmax if ratio else med + preset["sigma"] * sig
                hit = (ratio is None or wmax > 0) and max(seg) > thr
            else:
                thr = med - CLIFF_SIGMA * sig
                if q02 > 0:
                    thr = min(thr, q02 * (1 - CLIFF_DROP))
                hit = min(seg) < thr
            if hit:
                idx = [lo + j for j, v in enumerate(seg) if (v > thr if up else v < thr)]
                for j in idx:
                    flagged += 1
                    if j < stop:
                        incidents[-1]["flagged"] += 1
                        continue
                    back = med + RECOVER_SIGMA * sig if up else med - RECOVER_SIGMA * sig
                    end = _recovery(vals, j, back, up, cap, thr)
                    stop = end if end is not None else min(n, j + 1 + cap)
                    spans.append((j, stop))
                    part = vals[j:stop]
                    peak = max(part) if up else min(part)
                    pj = j + part.index(peak)
                    if ratio:
                        score = peak / wmax
                    else:
                        score = (peak - med) / sig if up else (med - peak) / sig
                    row = rows[j] if rows is not None else j
                    prow = rows[pj] if rows is not None else pj
                    recovery = None
                    if end is not None:
                        recovery = steps[rows[end] if rows is not None else end] - steps[row]
                    incidents.append(
                        {
                            "metric": label,
                            "kind": "spike" if up else "cliff",
                            "row": prow,
                            "idx": j,
                            "peak_idx": pj,
                            "end_idx": stop,
                            # the peak's own step and value; the onset is kept beside it
                            "step": steps[prow],
                            "onset_step": steps[row],
                            "peak_step": steps[prow],
                            "value": peak,
                            "baseline": med,
                            "scale": wmax if ratio else sig,
                            "score": score,
                            "recovery_steps": recovery,
                            "flagged": 1,
                        }
                    )
        # this block's sketch, without the values of any incident
        hi = lo + len(seg)
        inside = [sp for sp in spans[-8:] if sp[0] < hi and sp[1] > lo]
        if inside:
            clean = sorted(
                v for i, v in enumerate(seg, lo) if not any(a <= i < z for a, z in inside)
            )
        else:
            clean = sorted(seg)
        sketches.append((_sketch(clean), len(clean)))
    return incidents, flagged


# --------------------------------------------------------------------------------------------
# events


CKPT_STEP_KEYS = ("iter_num", "global_step", "iteration", "num_updates", "step")
MAX_CKPT_ENTRIES = 5000  # entries of a checkpoint directory looked at
MAX_PICKLE = 1 << 25  # a torch file's data.pkl larger than this is not searched for a step
LLMC_CKPT_RE = re.compile(r"(?:model|state)_0*(\d+)(?:_\d+)?\.bin$")  # llm.c: model_00002000.bin


def checkpoint_saves(path):
    """``[(step, detail)]``: the saves a checkpoint directory holds, by its entries' names
    (checkpoint-2000, step_2000.pt, global_step2000, iter_0002000, epoch=3-step=2000.ckpt,
    a bare 002000) and, for entries whose name has no step, by the files' own step keys
    where that is cheap: ``trainer_state.json`` (HF), ``latest`` (DeepSpeed),
    ``latest_checkpointed_iteration.txt`` (Megatron), the top-level ``iter_num`` /
    ``global_step`` / ``step`` of a torch zip file (nanoGPT's ckpt.pt; read from its pickle's
    opcodes, nothing is unpickled) and a safetensors header's metadata. A run directory
    whose checkpoints sit in ``checkpoints/``, ``ckpt/`` or ``ckpts/`` is looked into too.
    Only directories and files a checkpoint can be count (``samples_step1000.png`` is none)."""
    found = dict(_saves_in(path))
    for child in ("checkpoints", "ckpt", "ckpts"):
        if os.path.isdir(os.path.join(path, child)):
            for step, detail in _saves_in(os.path.join(path, child)):
                found.setdefault(step, detail)
    return sorted(found.items())


CKPT_EXTS = (
    ".pt",
    ".pth",
    ".bin",
    ".ckpt",
    ".safetensors",
    ".tar",
    ".pkl",
    ".distcp",
    ".index",
    ".npz",
    ".msgpack",
    ".h5",
)


def _saves_in(path):
    found = {}
    for name in sorted(os.listdir(path))[:MAX_CKPT_ENTRIES]:
        full = os.path.join(path, name)
        if "." in name.lstrip(".") and not name.endswith(CKPT_EXTS) and not os.path.isdir(full):
            if name not in ("latest", "latest_checkpointed_iteration.txt"):
                continue
        m = DIR_STEP_RE.search(name)
        if m:
            found.setdefault(float(m.group(1)), "%s in %s" % (name, path))
        elif re.fullmatch(r"\d+(?:\.\w+)*", name) or LLMC_CKPT_RE.match(name):
            m = LLMC_CKPT_RE.match(name)
            step = float(m.group(1)) if m else float(name.split(".")[0])
            found.setdefault(step, "%s in %s" % (name, path))
        else:
            step, key = _own_step(os.path.join(path, name))
            if step is not None:
                found.setdefault(step, "%s of %s" % (key, os.path.join(path, name)))
    return sorted(found.items())


def _own_step(full):
    """``(step, key)`` read cheaply from a checkpoint entry itself, else ``(None, None)``."""
    name = os.path.basename(full)
    try:
        if os.path.isdir(full):
            full = os.path.join(full, "trainer_state.json")
            if not os.path.isfile(full) or os.path.getsize(full) > MAX_DOC:
                return None, None
            with open(full, "rb") as f:
                doc = json.loads(f.read().decode("utf-8", "replace"))
            step = doc.get("global_step") if isinstance(doc, dict) else None
            return _step_or_none(step), "global_step"
        if name in ("latest", "latest_checkpointed_iteration.txt"):
            with open(full, "rb") as f:
                text = f.read(256).decode("utf-8", "replace")
            m = re.search(r"(\d+)\s*$", text.strip())
            return (float(m.group(1)), name) if m else (None, None)
        if name.endswith(".safetensors"):
            return _safetensors_step(full)
        if zipfile.is_zipfile(full):
            return _torch_zip_step(full)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        pass
    return None, None


def _step_or_none(v):
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return f if math.isfinite(f) and f >= 0 else None


def _safetensors_step(full):
    with open(full, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        if size > MAX_PICKLE:
            return None, None
        meta = json.loads(f.read(size).decode("utf-8", "replace")).get("__metadata__") or {}
    for key in CKPT_STEP_KEYS:
        step = _step_or_none(meta.get(key))
        if step is not None:
            return step, key
    return None, None


def _torch_zip_step(full):
    """The step key of a torch zip file's top-level dict, from its pickle's opcodes: a key
    string followed at once by an int. The largest ``step`` is taken (optimizer states
    hold per-parameter step counts that never exceed the global one)."""
    with zipfile.ZipFile(full) as z:
        info = next((i for i in z.infolist() if i.filename.endswith("data.pkl")), None)
        if info is None or info.file_size > MAX_PICKLE:
            return None, None
        pkl = z.read(info)
    seen = {}
    key = None
    for op, arg, _ in pickletools.genops(pkl):
        if op.name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            continue  # the memo between a key and its value
        if key is not None and op.name in ("BININT", "BININT1", "BININT2", "LONG1", "INT"):
            if isinstance(arg, int) and arg >= 0:
                seen[key] = max(seen.get(key, arg), arg) if key == "step" else seen.get(key, arg)
        key = arg if "UNICODE" in op.name and arg in CKPT_STEP_KEYS else None
    for k in CKPT_STEP_KEYS:
        if k in seen:
            return float(seen[k]), k
    return None, None


def find_events(ing, steps, cols, args, extra, warnings):
    """Every event as ``(kind, step, source, detail)``, sorted by step."""
    events = list(ing.events)
    n = len(steps)
    # resumes: the step counter goes back (or repeats)
    if n > 1:
        back = list(compress(range(1, n), map(le, islice(steps, 1, None), steps)))
        for i in back[:MAX_EVENTS]:
            s, prev = steps[i], steps[i - 1]
            word = "reset" if s <= steps[0] else "went back"
            events.append(
                (
                    "resume",
                    s,
                    "steps",
                    "step counter %s from %s to %s" % (word, _fmt(prev), _fmt(s)),
                )
            )
    if args.ckpt_steps:
        for s in args.ckpt_steps:
            events.append(("checkpoint", float(s), "ckpt-steps", "given with --ckpt-steps"))
    if args.ckpt_dir:
        try:
            for s, detail in checkpoint_saves(args.ckpt_dir):
                events.append(("checkpoint", s, "ckpt-dir", detail))
        except OSError as exc:
            warnings.append(
                "cannot list the checkpoint directory %s (--checkpoints/--ckpt-dir): %s"
                % (args.ckpt_dir, exc.strerror or exc)
            )
    if extra.get("save_steps") and n:
        every = float(extra["save_steps"])
        if every > 0:
            k = 1
            while k * every <= steps[-1] + 0.5 and k <= MAX_EVENTS:
                events.append(
                    ("checkpoint", k * every, "trainer_state", "save_steps %s" % _fmt(every))
                )
                k += 1
    # epochs
    if n:
        lo, hi = min(steps), max(steps)
        if args.steps_per_epoch:
            spe = float(args.steps_per_epoch)
            k = 1
            while k * spe <= hi and k <= MAX_EVENTS:
                s = float(round(k * spe))
                if s >= lo:
                    events.append(
                        (
                            "epoch",
                            s,
                            "steps-per-epoch",
                            "epoch %d starts (%s steps each)" % (k, _fmt(spe)),
                        )
                    )
                k += 1
        elif "epoch" in cols:
            ep = cols["epoch"]
            if math.isfinite(sum(ep)):
                fl = list(map(math.floor, ep))
            else:
                fl = [math.floor(e) if e - e == 0 else -1 for e in ep]
            starts = list(compress(range(1, n), map(lambda a, b: a > b >= 0, fl[1:], fl)))
            for i in starts[:MAX_EVENTS]:
                events.append(("epoch", steps[i], "epoch field", "epoch %d starts" % fl[i]))
    # learning rate: already at its peak at step 0 (no warmup); later jumps back up
    lr = cols.get("lr")
    if lr is not None and len(lr):
        if math.isfinite(sum(lr)):
            rows = None
            lv = lr
        else:
            rows = [i for i, v in enumerate(lr) if v - v == 0]
            lv = array("d", (lr[i] for i in rows))
        if len(lv):
            peak = max(lv)
            peak_i = lv.index(peak)
            r0 = rows[0] if rows else 0
            if peak > 0 and steps[r0] <= 10 and lv[0] >= 0.9 * peak:
                events.append(
                    (
                        "warmup",
                        steps[r0],
                        "lr",
                        "lr at step %s is %s, already its peak %s: no warmup"
                        % (_fmt(steps[r0]), _fmt(lv[0]), _fmt(peak)),
                    )
                )
            doubled = map(mul, lv, repeat(2.0))
            jumps = compress(range(1, len(lv)), map(gt, islice(lv, 1, None), doubled))
            shown = 0
            for i in jumps:
                if i <= peak_i or lv[i - 1] <= 0:
                    continue
                events.append(
                    (
                        "lr-jump",
                        steps[rows[i] if rows else i],
                        "lr",
                        "lr jumped from %s to %s" % (_fmt(lv[i - 1]), _fmt(lv[i])),
                    )
                )
                shown += 1
                if shown >= MAX_EVENTS:
                    break
    # pauses: wall-clock gaps far beyond the usual step time
    t = cols.get("time")
    if t is not None and n > 10:
        dts = array("d", map(sub, islice(t, 1, None), t))
        fin = sorted(d for d in dts[:: max(1, len(dts) // 10000)] if d == d and d > 0)
        if fin:
            typ = _quantile(fin, 0.5)
            lim = max(60.0, 20 * typ)
            gaps = list(compress(range(1, n), (d > lim for d in dts)))
            for i in gaps[:MAX_EVENTS]:
                events.append(
                    (
                        "pause",
                        steps[i],
                        "time",
                        "%.0f s without a log line (usual %.3g s)" % (dts[i - 1], typ),
                    )
                )
    events.sort(key=lambda e: (e[1], e[0]))
    # one event per (kind, step): several lines often announce the same save
    out = []
    seen = set()
    for e in events:
        if (e[0], e[1]) in seen:
            continue
        seen.add((e[0], e[1]))
        out.append(e)
    return out


KIND_ORDER = {"checkpoint": 0, "resume": 1, "warmup": 2, "lr-jump": 3, "pause": 4, "epoch": 5}


def nearest_event(step, events_by_step, ev_steps):
    """The nearest event to ``step`` (ties: checkpoint, resume, warmup, ...)."""
    if not ev_steps:
        return None
    i = bisect.bisect_left(ev_steps, step)
    best = None
    for j in range(max(0, i - 3), min(len(ev_steps), i + 3)):
        e = events_by_step[j]
        key = (abs(step - e[1]), KIND_ORDER.get(e[0], 9))
        if best is None or key < best[0]:
            best = (key, e)
    return best[1]


def coverage(ev_steps, tol, lo, hi):
    """Share of the step range [lo, hi] within ``tol`` steps of an event."""
    span = hi - lo + 1
    if span <= 0:
        return 1.0
    covered = 0.0
    cur_lo = cur_hi = None
    for s in ev_steps:
        a, b = max(lo, s - tol), min(hi, s + tol)
        if a > b:
            continue
        if cur_hi is not None and a <= cur_hi + 1:
            cur_hi = max(cur_hi, b)
        else:
            if cur_hi is not None:
                covered += cur_hi - cur_lo + 1
            cur_lo, cur_hi = a, b
    if cur_hi is not None:
        covered += cur_hi - cur_lo + 1
    return min(1.0, covered / span)


def correlate(incidents, events, tol, lo, hi):
    """Per event kind: do spikes sit at these events more often than chance would put them?"""
    onsets = sorted(set(i["step"] for i in incidents if i["kind"] != "nonfinite"))
    uniq = []
    for s in onsets:
        if not uniq or s - uniq[-1] > tol:
            uniq.append(s)
    out = []
    kinds = sorted(set(e[0] for e in events), key=lambda k: KIND_ORDER.get(k, 9))
    for kind in kinds:
        ev = sorted(e[1] for e in events if e[0] == kind)
        at = 0
        for s in uniq:
            i = bisect.bisect_left(ev, s - tol)
            if i < len(ev) and ev[i] <= s + tol:
                at += 1
        p = coverage(ev, tol, lo, hi)
        pv = binom_sf(at, len(uniq), p) if uniq else 1.0
        out.append(
            {
                "kind": kind,
                "events": len(ev),
                "spikes": len(uniq),
                "at_events": at,
                "tolerance": tol,
                "coverage": p,
                "expected": len(uniq) * p,
                "p_value": pv,
                "beyond_chance": bool(uniq) and at >= 1 and pv < 0.05 and at > len(uniq) * p,
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# batch composition


def kde_modes(r, nbins=200):
    """Modes of a sample: a histogram smoothed by a Gaussian kernel (Silverman bandwidth),
    local maxima merged until each stands out. Returns (modes, grid, density)."""
    s = sorted(r)
    n = len(s)
    lo, hi = _quantile(s, 0.005), _quantile(s, 0.995)
    if not hi > lo:
        return [{"center": s[n // 2], "weight": 1.0, "lo": s[0], "hi": s[-1]}], [], []
    mean = sum(s) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in s) / max(1, n - 1))
    iqr = (_quantile(s, 0.75) - _quantile(s, 0.25)) / 1.349
    spread = min(sd, iqr) if iqr > 0 else sd
    h = 0.9 * spread * n ** (-0.2)
    width = (hi - lo) / nbins
    h = max(h, width)
    counts = [0] * nbins
    for x in s:
        i = int((x - lo) / width)
        if 0 <= i < nbins:
            counts[i] += 1
    hb = h / width
    half = int(4 * hb) + 1
    kern = [math.exp(-0.5 * (d / hb) ** 2) for d in range(-half, half + 1)]
    dens = [0.0] * nbins
    for i, c in enumerate(counts):
        if not c:
            continue
        for d, w in enumerate(kern):
            j = i + d - half
            if 0 <= j < nbins:
                dens[j] += c * w
    grid = [lo + (i + 0.5) * width for i in range(nbins)]
    peaks = [
        i
        for i in range(nbins)
        if dens[i] > 0
        and (i == 0 or dens[i] > dens[i - 1])
        and (i == nbins - 1 or dens[i] >= dens[i + 1])
    ]
    top = max(dens)
    changed = True
    while changed and len(peaks) > 1:
        changed = False
        for a in range(len(peaks) - 1):
            p, q = peaks[a], peaks[a + 1]
            valley = min(dens[p : q + 1])
            low_peak = min(dens[p], dens[q])
            if valley > 0.85 * low_peak or low_peak - valley < 0.03 * top:
                peaks.pop(a + 1 if dens[p] >= dens[q] else a)
                changed = True
                break
    # regions between valleys
    bounds = [lo - 1e300]
    for a in range(len(peaks) - 1):
        p, q = peaks[a], peaks[a + 1]
        seg = dens[p : q + 1]
        v = p + seg.index(min(seg))
        bounds.append(grid[v])
    bounds.append(hi + 1e300)
    weights = [0] * len(peaks)
    for x in s:
        weights[max(0, min(len(peaks) - 1, bisect.bisect_right(bounds, x) - 1))] += 1
    modes = []
    for a, p in enumerate(peaks):
        modes.append(
            {
                "center": grid[p],
                "weight": weights[a] / n,
                "lo": max(bounds[a], s[0]),
                "hi": min(bounds[a + 1], s[-1]),
            }
        )
    # tiny modes are noise: fold them away (their mass goes to the neighbour)
    big = [m for m in modes if m["weight"] >= 0.05]
    if big and len(big) < len(modes):
        return kde_modes_fold(modes, big), grid, dens
    return modes, grid, dens


def kde_modes_fold(modes, big):
    out = [dict(m) for m in big]
    for m in modes:
        if m in big:
            continue
        j = min(range(len(out)), key=lambda i: abs(out[i]["center"] - m["center"]))
        out[j]["weight"] += m["weight"]
        out[j]["lo"] = min(out[j]["lo"], m["lo"])
        out[j]["hi"] = max(out[j]["hi"], m["hi"])
    return out


def bimodality_coefficient(r):
    """Sarle's b = (skew^2 + 1) / (excess kurtosis + 3(n-1)^2/((n-2)(n-3))); > 5/9 hints
    at two or more modes."""
    n = len(r)
    if n < 4:
        return None
    m = sum(r) / n
    m2 = sum((x - m) ** 2 for x in r) / n
    if m2 <= 0:
        return None
    m3 = sum((x - m) ** 3 for x in r) / n
    m4 = sum((x - m) ** 4 for x in r) / n
    g = m3 / m2**1.5
    k = m4 / m2**2 - 3
    return (g * g + 1) / (k + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def autocorr(r, max_lag):
    n = len(r)
    m = sum(r) / n
    z = [x - m for x in r]
    var = sum(map(mul, z, z))
    if var <= 0:
        return []
    return [sum(map(mul, z[:-lag], z[lag:])) / var for lag in range(1, max_lag + 1)]


def periodicity(r, stride=1.0, quantised=None):
    """The strongest autocorrelation bump at a lag >= 2 (a period), if any; its multiples
    give way to it (a period of 4 also peaks at 8). Lags are counted in log rows and
    reported in steps (``stride`` steps a row). A ``quantised`` loss (few distinct values)
    is never called periodic: its staircase repeats by itself."""
    r = r[-4096:]
    n = len(r)
    max_lag = min(512, n // 3)
    if max_lag < 4:
        return None
    acf = autocorr(r, max_lag)
    if not acf:
        return None
    peaks = []
    for i in range(1, len(acf) - 1):
        if acf[i] >= acf[i - 1] and acf[i] >= acf[i + 1]:
            peaks.append((i + 1, acf[i], acf[i] - min(acf[:i])))
    out = {
        "lag": None,
        "lag_rows": None,
        "acf": None,
        "max_lag": max_lag * stride,
        "stride": stride,
        "periodic": False,
        "quantised": bool(quantised),
    }
    if not peaks:
        return out
    top = max(p[1] for p in peaks)
    lag, a, bump = next(p for p in peaks if p[1] >= 0.9 * top)
    periodic = a >= max(0.3, 4.0 / math.sqrt(n)) and bump >= 0.2 and not quantised
    out.update(lag=lag * stride, lag_rows=lag, acf=a, periodic=periodic)
    return out


def quantisation(v, r, logscale):
    """``{"distinct", "quantum"}`` when the values are too coarse to have a shape: a dozen
    distinct values or fewer, or a rounding step (HF logs 4 decimals) that is not small
    against their spread (the residuals ``r``, in the values' units); else None."""
    distinct = sorted(set(v))
    d = len(distinct)
    gaps = [b - a for a, b in zip(distinct, distinct[1:]) if b > a]
    q = min(gaps) if gaps else 0.0
    if d > 12:
        rs = sorted(r)
        spread = (_quantile(rs, 0.75) - _quantile(rs, 0.25)) / 1.349
        if logscale:
            spread *= _quantile(sorted(v), 0.5)
        if not (q > 0 and spread < 3 * q):
            return None
    return {"distinct": d, "quantum": q}


def _row_stride(steps_of_rows):
    """The usual number of steps between consecutive log rows (1 when unknown)."""
    diffs = sorted(b - a for a, b in zip(steps_of_rows, steps_of_rows[1:]) if b > a)
    return _quantile(diffs, 0.5) if diffs else 1.0


def bucket_column(ing, cols, n):
    """Bucket codes per row and their names: the ``bucket`` field, else ``seq_len`` or
    ``tokens`` (distinct values, or powers of two when there are many)."""
    if ing.bucket_key is not None and len(ing.codes) == n and len(ing.bnames) >= 1:
        return ing.bucket_key, ing.codes, list(ing.bnames)
    for name in ("seq_len", "tokens"):
        col = cols.get(name)
        if col is None:
            continue
        fin = [v for v in col if v == v]
        if not fin:
            continue
        distinct = sorted(set(fin))
        if len(distinct) <= 16:
            names = [_fmt(v) for v in distinct]
            cmap = {v: i for i, v in enumerate(distinct)}
            codes = array("i", (cmap.get(v, -1) if v == v else -1 for v in col))
            return name, codes, names
        pw = sorted(set(math.ceil(math.log2(max(v, 1.0))) for v in fin))
        names = ["<=%d" % (2**p) for p in pw]
        cmap = {p: i for i, p in enumerate(pw)}
        codes = array(
            "i",
            (cmap[math.ceil(math.log2(max(v, 1.0)))] if v == v else -1 for v in col),
        )
        return name, codes, names
    return None, None, None


def composition(label, vals, rows, steps, incidents, ing, cols, nrows, derived=None):
    """Shape of ``label`` over a stable window, and how it follows the batch's bucket.
    ``derived``: ``{column: words}`` for batch columns taken from a running total."""
    n = len(vals)
    out = {}
    if n < 40:
        return out
    lo = n // 2
    lo = max(lo, n - STABLE_MAX)
    excl = sorted(
        (i["idx"], i["end_idx"] + 3)
        for i in incidents
        if i["metric"] == label and i["idx"] is not None
    )
    keep = []
    e = 0
    for i in range(lo, n):
        while e < len(excl) and excl[e][1] <= i:
            e += 1
        if e < len(excl) and excl[e][0] <= i < excl[e][1]:
            continue
        keep.append(i)
    if len(keep) < 30:
        return out
    v = [vals[i] for i in keep]
    logscale = min(v) > 0
    y = [math.log(x) for x in v] if logscale else list(v)
    # trend: least squares on log(row), so a still-falling loss does not smear the modes
    x = [math.log(i + 1) for i in keep]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx if sxx > 0 else 0.0
    r = [c - b * (a - mx) - my for a, c in zip(x, y)]
    level = my + b * (x[-1] - mx)  # residual 0 reads as the level at the window's end

    def unscale(t):
        return math.exp(t + level) if logscale else t + level

    modes, _, _ = kde_modes(r)
    bc = bimodality_coefficient(r)
    nm = len(modes)
    shape = {1: "unimodal", 2: "bimodal", 3: "trimodal"}.get(nm, "multimodal")
    quant = quantisation(v, r, logscale)
    if quant is not None:
        shape = "quantised"
    first_row = rows[keep[0]] if rows is not None else keep[0]
    last_row = rows[keep[-1]] if rows is not None else keep[-1]
    stride = _row_stride([steps[rows[i] if rows is not None else i] for i in keep])
    dist = {
        "metric": label,
        "scale": "log" if logscale else "linear",
        "first_step": steps[first_row],
        "last_step": steps[last_row],
        "n": len(r),
        "shape": shape,
        "bimodality": bc,
        "trend_slope": b,
        "modes": [],
        "quantised": quant,
    }
    per = periodicity(r, stride, quant)
    out["periodicity"] = per
    repeats = None  # the words for a periodic loss
    if per and per["periodic"]:
        repeats = "it repeats every %s steps (autocorrelation %.2f)" % (
            _fmt(per["lag"]),
            per["acf"],
        )
        if stride != 1:
            repeats = repeats[:-1] + ", every %d log rows)" % per["lag_rows"]
    coarse = None  # the words for a quantised loss
    if quant is not None:
        coarse = (
            "%s takes only %d distinct values in steps of %s (rounded when logged): too coarse "
            "to judge its shape or periodicity" % (label, quant["distinct"], _fmt(quant["quantum"]))
        )
    # buckets
    key, codes, names = bucket_column(ing, cols, nrows)
    rc = None
    if key is not None:
        rc = [codes[rows[i] if rows is not None else i] for i in keep]
    bounds = [m["hi"] for m in modes[:-1]]
    for m in modes:
        md = {
            "center": unscale(m["center"]),
            "weight": m["weight"],
            "lo": unscale(m["lo"]),
            "hi": unscale(m["hi"]),
            "bucket": None,
            "purity": None,
        }
        dist["modes"].append(md)
    if rc is not None:
        per_mode = [Counter() for _ in modes]
        for t, c in zip(r, rc):
            per_mode[min(len(modes) - 1, bisect.bisect_left(bounds, t))][c] += 1
        for md, cnt in zip(dist["modes"], per_mode):
            if cnt:
                c, k = cnt.most_common(1)[0]
                md["bucket"] = names[c] if c >= 0 else "-"
                md["purity"] = k / sum(cnt.values())
    out["distribution"] = dist
    # histogram on the original scale (trend removed), by bucket where known
    hb = 40 if len(r) >= 400 else 20
    rs = sorted(r)
    h_lo, h_hi = _quantile(rs, 0.002), _quantile(rs, 0.998)
    if h_hi > h_lo:
        w = (h_hi - h_lo) / hb
        edges = [unscale(h_lo + i * w) for i in range(hb + 1)]
        counts = {}
        top = None
        if rc is not None:
            topc = [c for c, _ in Counter(rc).most_common(8)]
            top = set(topc)
        for i, t in enumerate(r):
            j = int((t - h_lo) / w)
            if j == hb:
                j -= 1
            if not 0 <= j < hb:
                continue
            if rc is None:
                name = "all"
            else:
                c = rc[i]
                name = (names[c] if c >= 0 else "-") if c in top else "other"
            counts.setdefault(name, [0] * hb)[j] += 1
        out["histogram"] = {
            "metric": label,
            "scale": dist["scale"],
            "key": key,
            "edges": edges,
            "counts": counts,
            "modes": [m["center"] for m in dist["modes"]],
            "first_step": dist["first_step"],
            "last_step": dist["last_step"],
        }
    if key is None:
        # two signs, since a flat-topped sample can show a spurious bump
        multimodal = (
            nm >= 2
            and sum(1 for m in modes if m["weight"] >= 0.1) >= 2
            and (bc or 0) > 5 / 9
            and quant is None
        )
        words = [coarse or "%s is %s" % (label, shape)]
        if nm >= 2 and quant is None:
            words.append(
                "modes %s"
                % ", ".join(
                    "%s (%d%%)" % (_fmt(m["center"]), round(100 * m["weight"]))
                    for m in dist["modes"]
                )
            )
        finding = multimodal or repeats is not None
        if repeats:
            words.append(repeats)
        if finding:
            words.append(
                "batches may be homogeneous (e.g. length-bucketed): log each step's bucket or "
                "seq_len to confirm, and interleave buckets"
            )
        out["composition"] = {
            "key": None,
            "derived": None,
            "buckets": [],
            "explained": None,
            "max_run": None,
            "max_run_bucket": None,
            "random_max_run": None,
            "interleaved_max_run": None,
            "homogeneous": None,
            "long_runs": None,
            "modes_match": False,
            "finding": finding,
            "verdict": "; ".join(words) + ("" if finding else ": no sign of homogeneous batches"),
        }
        return out
    # per bucket: share of all batches, loss in the window, longest run of consecutive steps
    allc = Counter(codes)
    total = sum(allc.values())
    runs = {}
    nc = len(codes)
    starts = array("l", [0])
    starts.extend(compress(range(1, nc), map(ne, islice(codes, 1, None), codes)))
    starts.append(nc)
    for a, z in zip(starts, islice(starts, 1, None)):
        c = codes[a]
        if z - a > runs.get(c, 0):
            runs[c] = z - a
    by = {}
    for val, c in zip(v, rc):
        by.setdefault(c, []).append(val)
    byr = {}
    for t, c in zip(r, rc):
        byr.setdefault(c, []).append(t)
    mr = sum(r) / len(r)
    ss_tot = sum((t - mr) ** 2 for t in r)
    ss_b = sum(len(g) * (sum(g) / len(g) - mr) ** 2 for g in byr.values())
    explained = ss_b / ss_tot if ss_tot > 0 else 0.0
    buckets = []
    for c, cnt in allc.most_common():
        buckets.append(
            {
                "bucket": names[c] if c >= 0 else "-",
                "batches": cnt,
                "share": cnt / total,
                "loss_median": _median(by[c]) if c in by else None,
                "max_run": runs.get(c, 0),
            }
        )
    real = [bk for bk in buckets if bk["share"] >= 0.02]
    top = buckets[0]
    max_run_c = max(runs, key=lambda c: runs[c])
    max_run = runs[max_run_c]
    p = top["share"]
    random_run = math.log(max(2.0, total * (1 - p))) / math.log(1 / p) if 0 < p < 1 else total
    inter_run = max(1, math.ceil(p / (1 - p))) if p < 1 else total
    homogeneous = len(real) >= 2 and explained >= 0.3
    long_runs = max_run >= max(4, 2 * inter_run + 1)
    mode_buckets = [m["bucket"] for m in dist["modes"] if m["weight"] >= 0.05]
    match = (
        len(mode_buckets) >= 2
        and len(set(mode_buckets)) == len(mode_buckets)
        and all((m["purity"] or 0) >= 0.6 for m in dist["modes"] if m["weight"] >= 0.05)
    )
    stats = {
        "key": key,
        "buckets": buckets[:32],
        "explained": explained,
        "max_run": max_run,
        "max_run_bucket": names[max_run_c] if max_run_c >= 0 else "-",
        "random_max_run": random_run,
        "interleaved_max_run": inter_run,
        "derived": (derived or {}).get(key),
    }
    out["codes"] = (codes, names)
    kname = key.rsplit("/", 1)[-1]  # train/bucket reads as bucket
    bname = "%s %s" % (kname, top["bucket"])
    rname = "%s %s" % (kname, stats["max_run_bucket"])
    words = [coarse or "%s is %s" % (label, shape)]
    match = match and quant is None  # the modes of a rounded loss are its rounding steps
    if stats["derived"]:
        words.append("batches by %s" % stats["derived"])
    if len(real) < 2:
        words.append(
            "%s is %s in %.0f%% of batches (padded or mixed batches)"
            % (kname, top["bucket"], 100 * top["share"])
        )
        if repeats:
            words.append(repeats)
        out["composition"] = dict(
            stats,
            homogeneous=False,
            long_runs=False,
            modes_match=False,
            finding=False,
            verdict="; ".join(words) + ": no sign of homogeneous batches",
        )
        return out
    if match:
        words.append(
            "modes match %s" % ("token buckets" if kname == "tokens" else "length buckets")
        )
    elif homogeneous:
        words.append(
            "%s depends on the batch's %s (%.0f%% of its variance)"
            % (label, kname, 100 * explained)
        )
    words.append("%s is %.0f%% of batches" % (bname, 100 * top["share"]))
    unit = "steps" if stride == 1 else "log rows"
    words.append("up to %d consecutive same-%s %s (%s)" % (max_run, kname, unit, rname))
    if homogeneous and long_runs:
        tail = "batches look homogeneous, interleave buckets"
    elif homogeneous:
        tail = (
            "batches are homogeneous per bucket but already interleaved; the %s loss is expected"
            % shape
        )
    else:
        tail = "batches mix buckets (the bucket explains %.0f%% of the %s variance)" % (
            100 * explained,
            label,
        )
    if repeats:
        words.append(repeats)
    out["composition"] = dict(
        stats,
        homogeneous=homogeneous,
        long_runs=long_runs,
        modes_match=match,
        # a periodic loss from an interleaved order is expected; it matters with long runs
        finding=bool(homogeneous and long_runs),
        verdict="; ".join(words) + ": " + tail,
    )
    return out


# --------------------------------------------------------------------------------------------
# main


def _fmt(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


def _csv_steps(text):
    out = []
    for part in re.split(r"[,\s]+", text.strip()):
        if part:
            out.append(float(part))
    return out


LOG_NAMES = (
    # (pattern on the path below the run dir, what it is), in order of preference
    (r"(?:^|/)trainer_log\.jsonl$", "LLaMA-Factory trainer_log.jsonl"),
    (r"^trainer_state\.json$", "HF trainer_state.json"),
    (
        r"(?:^|/)checkpoint-(\d+)/trainer_state\.json$",
        "HF trainer_state.json of the last checkpoint",
    ),
    (r"(?:^|/)metrics\.csv$", "Lightning metrics.csv"),
    (r"(?:^|/)run-[^/]*\.wandb$", "W&B run file"),
    (r"(?:^|/)events\.out\.tfevents\.[^/]*$", "TensorBoard event file"),
    (r"\.jsonl$", "JSON lines"),
    (r"(?:\.log|\.out|\.txt)$", "text log"),
    (r"\.csv$", "CSV"),
)
CKPT_NAME_RE = re.compile(r"(?:checkpoint|ckpt|global_step|step|iter)[-_]?(\d+)(?:\.\w+)*$", re.I)


def find_log(run_dir, max_entries=20000):
    """``(file, why)``: the training log of a run directory, by the preference of
    ``LOG_NAMES`` (the newest file of the best kind; for checkpoints, the highest step)."""
    found = []
    seen = 0
    base = len(run_dir.rstrip("/")) + 1
    for root, dirs, files in os.walk(run_dir):
        depth = root[base:].count("/") + (1 if len(root) >= base else 0)
        if depth >= 4:
            dirs[:] = []
        dirs.sort()
        for name in files:
            seen += 1
            if seen > max_entries:
                break
            full = os.path.join(root, name)
            rel = full[base:]
            for rank, (pat, what) in enumerate(LOG_NAMES):
                m = re.search(pat, rel)
                if m:
                    key = float(m.group(1)) if m.groups() else _mtime(full)
                    found.append((rank, -key, rel, full, what))
                    break
    if not found:
        raise LogError(
            "a directory with no training log found in it (looked for %s)"
            % "trainer_state.json, trainer_log.jsonl, metrics.csv, wandb/run-*/*.wandb, "
            "events.out.tfevents.*, *.jsonl, *.log, *.txt, *.csv"
        )
    found.sort()
    rank, _, rel, full, what = found[0]
    others = len(found) - 1
    return full, "%s (%s)%s" % (rel, what, "; %d other candidates" % others if others else "")


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def ckpt_dir_of(run_dir):
    """The run directory itself, or its ``checkpoints``/``ckpt`` child, if it holds
    checkpoint entries (checkpoint-2000, step_2000, global_step2000, iter_2000.pt)."""
    for d in (run_dir, os.path.join(run_dir, "checkpoints"), os.path.join(run_dir, "ckpt")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        if any(CKPT_NAME_RE.match(n) for n in names):
            return d
    return None


def reconcile_steps(ing, steps, cols, warnings):
    """One row per step, in order. Rows at the same step (sparse loggers: one metric per
    row) are merged; a step counter that goes back (a resumed run appended to the same log)
    is a resume: the later run's rows replace the earlier rows at those steps, never mixed.
    Returns ``(steps, cols, n)``; resumes become events. Lines of several writers
    interleaved (ranks sharing one log) are no resumes: see :func:`merge_interleaved`."""
    n = len(steps)
    if n < 2 or not any(map(ge, steps, islice(steps, 1, None))):
        return steps, cols, n
    steps = per_epoch_steps(ing, steps, cols, warnings)
    if all(map(lt, steps, islice(steps, 1, None))):
        return steps, cols, n
    merged = merge_interleaved(ing, steps, cols, warnings)
    if merged is not None:
        return merged
    names = list(cols)
    arrs = [cols[k] for k in names]
    keep = bytearray(b"\x01") * n
    twice = 0
    for i in range(n - 1):
        if steps[i] != steps[i + 1]:
            continue
        both = False
        for c in arrs:
            a, b = c[i], c[i + 1]
            if _is_missing(b):
                c[i + 1] = a
            elif not _is_missing(a):
                both = True
        twice += both
        keep[i] = 0
    low = math.inf
    dropped = 0
    for i in range(n - 1, -1, -1):
        if not keep[i]:
            continue
        if steps[i] >= low:
            keep[i] = 0
            dropped += 1
        else:
            low = steps[i]
    backs = [i for i in range(1, n) if steps[i] < steps[i - 1]]
    for i in backs[:MAX_EVENTS]:
        j = i - 1
        ing.events.append(
            (
                "resume",
                steps[i],
                "steps",
                "step counter went back from %s to %s at row %d (a resumed run appended to "
                "the same log)" % (_fmt(steps[j]), _fmt(steps[i]), i + 1),
            )
        )
    if backs:
        warnings.append(
            "the step counter goes back %d time(s) (a resumed run appended to the same log): "
            "the later rows are used, %d earlier rows at the same steps are set aside"
            % (len(backs), dropped)
        )
    if twice:
        warnings.append("%d steps were logged twice: the later value is used" % twice)
    if len(ing.codes) == n:
        ing.codes = array("i", compress(ing.codes, keep))
    steps = array("d", compress(steps, keep))
    cols = {k: array("d", compress(c, keep)) for k, c in zip(names, arrs)}
    return steps, cols, len(steps)


def per_epoch_steps(ing, steps, cols, warnings):
    """``steps`` made continuous when the counter is a per-epoch one (0..499, 0..499, ...),
    else ``steps`` as they are. Such a counter restarts at its first value, again and again
    after the same span (or at each new value of an ``epoch`` field): no resume, and no
    earlier epoch's rows to set aside. Each restart becomes an epoch event."""
    n = len(steps)
    fwd = sorted(d for d in map(sub, islice(steps, 1, None), steps) if d > 0)
    if not fwd:
        return steps
    stride = _quantile(fwd, 0.5)
    backs = [i for i in range(1, n) if steps[i] < steps[i - 1]]
    resets = [i for i in backs if steps[i] <= steps[0] + stride]
    if not resets or len(resets) != len(backs):
        return steps
    bounds = [0, *resets, n]
    spans = [steps[b - 1] - steps[a] for a, b in zip(bounds, bounds[1:])]
    full = spans[:-1]  # the last epoch may be cut short
    same = max(full) - min(full) <= 0.1 * max(full) and spans[-1] <= 1.1 * max(full)
    ep = cols.get("epoch")
    by_field = ep is not None and all(
        not _is_missing(ep[i]) and not _is_missing(ep[i - 1]) and ep[i] > ep[i - 1] for i in resets
    )
    if not (by_field or (same and len(resets) >= 2)):
        return steps
    period = max(full) + stride
    out = array("d", steps)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for i in range(a, b):
            out[i] = steps[i] + k * period
        if k:
            ing.events.append(
                ("epoch", out[a], "steps", "the step counter restarted at %s" % _fmt(steps[a]))
            )
    warnings.append(
        "the step counter restarts at %s %d times (a per-epoch count, %s steps an epoch): "
        "made continuous, not taken as resumes" % (_fmt(steps[0]), len(resets), _fmt(period))
    )
    return out


def merge_interleaved(ing, steps, cols, warnings):
    """``(steps, cols, n)`` when the log holds several writers' lines interleaved (every
    rank printing its own loss, a step's lines out of order by a step or two), else None.

    Such a log goes back a little, often: many times, by a few strides at most; a resumed
    run goes back rarely, to a checkpoint. Its rows are put in step order and each step's
    values averaged over its lines (as an all-reduced loss would be); a NaN on any line
    stays a NaN."""
    n = len(steps)
    backs = [steps[i - 1] - steps[i] for i in range(1, n) if steps[i] < steps[i - 1]]
    fwd = sorted(d for d in map(sub, islice(steps, 1, None), steps) if d > 0)
    if not fwd:
        return None
    stride = _quantile(fwd, 0.5)
    # the same metric again at the same step, on most rows: every rank printing in turn
    # (a sparse logger's rows at one step carry different metrics, and are merged instead)
    again = 0
    first = cols[next(iter(cols))] if cols else ()
    for i in range(n - 1):
        if steps[i] == steps[i + 1] and not (_is_missing(first[i]) or _is_missing(first[i + 1])):
            again += 1
    shuffled = len(backs) >= max(3, n // 100) and _quantile(sorted(backs), 0.5) <= 4 * stride
    if not shuffled and again < max(3, n // 4):
        return None
    order = sorted(range(n), key=steps.__getitem__)
    names = list(cols)
    out_steps = array("d")
    out = {k: array("d") for k in names}
    codes = ing.codes if len(ing.codes) == n else None
    out_codes = array("i")
    most = 1
    a = 0
    while a < n:
        z = a + 1
        while z < n and steps[order[z]] == steps[order[a]]:
            z += 1
        group = order[a:z]
        most = max(most, z - a)
        out_steps.append(steps[group[0]])
        for k in names:
            vals = [cols[k][i] for i in group if not _is_missing(cols[k][i])]
            out[k].append(sum(vals) / len(vals) if vals else MISSING)
        if codes is not None:
            out_codes.append(codes[group[0]])
        a = z
    if codes is not None:
        ing.codes = out_codes
    warnings.append(
        "lines of several writers are interleaved (up to %d lines a step; the step counter "
        "went back %d times%s): taken as ranks sharing one log, not as resumes; each step's "
        "values are the mean of its lines (log from rank 0 only to see one rank's own)"
        % (most, len(backs), ", by %s steps at most" % _fmt(max(backs)) if backs else "")
    )
    return out_steps, out, len(out_steps)


def _glitches(steps, ok):
    """Rows (of the indices ``ok``) whose step is a glitch, not a resume: up to 3 rows far
    behind (> 4 strides) after which the log goes on from where it was (a mis-parsed step
    between 100 and 101), or one row far ahead of two neighbours in line. A resume goes on
    from where it went back to. Many such rows are interleaved writers instead (see
    :func:`merge_interleaved`)."""
    fwd = sorted(steps[b] - steps[a] for a, b in zip(ok, ok[1:]) if steps[b] > steps[a])
    if not fwd:
        return []
    far = 4 * _quantile(fwd, 0.5)
    odd = []
    for j in range(1, len(ok) - 1):
        prev, cur = steps[ok[j - 1]], steps[ok[j]]
        if odd and odd[-1] >= ok[j]:
            continue  # inside a run already set aside
        if cur < prev - far:
            run = [ok[j]]
            for k in range(j + 1, min(len(ok), j + 4)):
                if steps[ok[k]] >= prev:
                    odd.extend(run)
                    break
                run.append(ok[k])
        elif prev <= steps[ok[j + 1]] < cur - far:
            odd.append(ok[j])
    return odd


def drop_bad_steps(ing, steps, cols, warnings):
    """Rows whose step is not a step (negative, non-finite, beyond 2**53: a corrupt or
    mis-parsed line) are set aside, with a warning, before they bend the step axis (one
    step of 1e30 would make every spike "at" an event by chance alone)."""
    n = len(steps)
    keep = bytearray(0 <= s <= 2.0**53 for s in steps)
    bad = n - sum(keep)
    if bad:
        first = next(i for i in range(n) if not keep[i])
        warnings.append(
            "%d rows with an impossible step (negative, non-finite or beyond 2**53; the "
            "first: %s at row %d) set aside" % (bad, _fmt(steps[first]), first + 1)
        )
    odd = _glitches(steps, [i for i in range(n) if keep[i]])
    if odd and len(odd) <= max(3, n // 200):
        for i in odd:
            keep[i] = 0
        warnings.append(
            "%d rows whose step is out of line with the rows around it set aside (the first: "
            "step %s at row %d)" % (len(odd), _fmt(steps[odd[0]]), odd[0] + 1)
        )
    elif not bad:
        return steps, cols
    if len(ing.codes) == n:
        ing.codes = array("i", compress(ing.codes, keep))
    return array("d", compress(steps, keep)), {
        k: array("d", compress(c, keep)) for k, c in cols.items()
    }


COUNTER_META = ("tokens",)  # meta columns that some trainers log as running totals


def is_running_total(col):
    """A column that counts what was seen so far (tokens, samples, flos): it never goes
    down and grows at (almost) every row, also when a resumed run starts it high. A
    per-batch size in a length-sorted order never goes down either, but repeats its
    values (batches of one bucket), so it grows at few rows."""
    fin = [v for v in col if v == v]
    if len(fin) < 3 or not all(map(le, fin, islice(fin, 1, None))):
        return False
    grows = sum(map(gt, islice(fin, 1, None), fin))
    return grows >= 0.9 * (len(fin) - 1) and fin[-1] > fin[0]


def per_batch(ing, steps, cols, warnings):
    """A running total (TRL's num_tokens: 61440, 122880, ...) is not a batch size: use its
    differences per step instead, and say so. Returns ``{name: words}`` for each column
    so derived (the composition record carries the words)."""
    derived = {}
    for name in COUNTER_META:
        col = cols.get(name)
        if col is None or len(col) < 3:
            continue
        if not is_running_total(col):
            continue
        out = array("d", [math.nan])
        for i in range(1, len(col)):
            ds = steps[i] - steps[i - 1]
            out.append((col[i] - col[i - 1]) / ds if ds > 0 else math.nan)
        cols[name] = out
        key = dict(ing.meta).get(name)
        warnings.append(
            "%r is a running total (it never decreases): per-batch %s are taken from its "
            "differences per step, not its values" % (key, name)
        )
        derived[name] = "%s per step, from the differences of the running total %r" % (
            name,
            key,
        )
    return derived


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="trainlog.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--metrics", default="", help="comma-separated metric names")
    ap.add_argument(
        "--metric",
        action="append",
        default=[],
        help="a metric name (repeatable; adds to --metrics)",
    )
    ap.add_argument("--preset", default="olmo2", choices=sorted(PRESETS))
    ap.add_argument("--ckpt-steps", type=_csv_steps, default=None)
    ap.add_argument(
        "--checkpoints",
        "--ckpt-dir",
        dest="ckpt_dir",
        default=None,
        help="the run's checkpoint directory: its saves are checkpoint events",
    )
    ap.add_argument("--steps-per-epoch", type=float, default=None)
    ap.add_argument(
        "--tolerance", type=float, default=None, help="steps; default max(5, 2 strides)"
    )
    ap.add_argument("--points", type=int, default=0, help="send a decimated series (0: none)")
    ap.add_argument("--format", default="auto", choices=["auto", "jsonl", "csv", "json", "text"])
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    names = args.metrics.split(",") + list(args.metric)
    wanted = [m.strip() for m in names if m.strip()] or None
    try:
        return analyze_log(args, wanted)
    except NoLoss as exc:
        return _no_loss(args.path, exc)
    except LogError as exc:
        return failed("%s: %s" % (args.path, exc))
    except OSError as exc:
        return failed("cannot read %s: %s" % (args.path, exc.strerror or exc))
    except Exception as exc:  # a log that breaks the script still gets an answer, not a traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return failed(
            "%s: the analysis failed (%s: %s, at %s:%d in %s); this is a bug in trainlog.py: "
            "please report it with the log's first lines"
            % (
                args.path,
                type(exc).__name__,
                str(exc)[:200],
                os.path.basename(where.filename),
                where.lineno,
                where.name,
            ),
            kind="internal",
        )


def _no_loss(path, exc):
    """No loss series: a binary file is named as such, else the numeric columns there are."""
    binary = _binary_share(path)
    if binary > 0.1:
        return failed(
            "%s: not a text log: %.0f%% of its first bytes are binary (a checkpoint, "
            "an archive, the wrong file?); no loss series read" % (path, 100 * binary),
            kind="not-text",
        )
    what = (
        "found only %s, no loss series" % ", ".join(exc.found)
        if exc.found
        else "no loss series found"
    )
    return failed(
        "%s: %s; numeric columns: %s; name the one to analyse with --metric NAME"
        % (path, what, ", ".join(exc.numeric[:30]) or "none"),
        kind="no-loss",
        numeric=exc.numeric[:30],
        flag="--metric",
    )


def _binary_share(path, size=1 << 16):
    """Share of the first ``size`` bytes of ``path`` that no text log has: control bytes
    other than tab/newline/CR, and bytes that are not UTF-8 (0 for a directory)."""
    try:
        with open(path, "rb") as f:
            head = f.read(size)
    except OSError:
        return 0.0
    if not head:
        return 0.0
    text = head.decode("utf-8", "replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r"))
    return bad / len(text)


def analyze_log(args, wanted):
    preset = dict(PRESETS[args.preset])
    warnings = []
    path, chosen = args.path, None
    if os.path.isdir(path):
        run_dir = path
        path, chosen = find_log(run_dir)
        if args.ckpt_dir is None and not args.ckpt_steps:
            ck = ckpt_dir_of(run_dir)
            if ck is not None:
                args.ckpt_dir = ck
    ing, fmt, nlines, extra = read_log(path, args.format, wanted)
    if extra.pop("summary_only", False):
        warnings.append(
            "a W&B summary holds only the last value of each key, not the history: read the "
            "run's .wandb file (wandb/run-*/run-*.wandb) for spikes"
        )
    if fmt == "text":
        warnings.append(
            "no known trainer line format (nanoGPT, llm.c, Megatron, fairseq): every line's "
            "key=value / key: value pairs were read as data"
        )
    warnings.extend(getattr(ing, "guesses", []))
    if getattr(ing, "long", 0):
        warnings.append("%d lines longer than %d bytes skipped (not read)" % (ing.long, MAX_LINE))
    for name in getattr(ing, "missing", []):
        warnings.append("metric %r not found in the log" % name)
    n = ing.rows()
    if n == 0:
        raise LogError("no rows with %s" % ", ".join(k for _, k in ing.metrics))
    ing.flush()
    steps = ing.cols[0] if ing.step_key else array("d", range(n))
    cols = {}
    for j, (label, _) in enumerate(ing.metrics):
        cols[label] = ing.cols[ing.m0 + j]
    for j, (name, _) in enumerate(ing.meta):
        cols[name] = ing.cols[ing.m1 + j]
    ing.cols = []
    steps, cols = drop_bad_steps(ing, steps, cols, warnings)
    if not len(steps):
        raise LogError("no row with a usable step (%s)" % "; ".join(warnings[-1:]))
    steps, cols, n = reconcile_steps(ing, steps, cols, warnings)
    for name in [m for m, _ in ing.meta]:
        col = cols[name]
        if not math.isfinite(sum(col)):
            cols[name] = array("d", (math.nan if _is_missing(v) else v for v in col))
    derived = per_batch(ing, steps, cols, warnings)
    strides = sorted(map(sub, islice(steps, 1, min(n, 2001)), steps[: min(n, 2001) - 1]))
    stride = _quantile([s for s in strides if s > 0], 0.5) if any(s > 0 for s in strides) else 1.0
    tol = args.tolerance if args.tolerance is not None else max(5.0, 2 * stride)
    # A log shorter than a few windows would be judged against its own first learning
    # phase: use a quarter of the log (at least 50 rows) as the window instead.
    # (the preset record then says window < preset_window)
    preset["window"] = min(preset["window"], max(50, n // 4))
    send(
        "source",
        path=os.path.abspath(path),
        chosen_from=chosen,
        format=fmt,
        dialect=dialect_of(fmt, ing),
        lines=nlines,
        rows=n,
        skipped=ing.skipped,
        bad_lines=ing.bad,
        step_key=ing.step_key,
        columns=dict(
            ing.metrics + ing.meta + ([("bucket", ing.bucket_key)] if ing.bucket_key else [])
        ),
        metrics=[label for label, _ in ing.metrics],
        first_step=steps[0],
        last_step=steps[-1],
        stride=stride,
        tolerance=tol,
    )
    send(
        "preset",
        name=args.preset,
        window=preset["window"],
        preset_window=PRESETS[args.preset]["window"],
        sigma=preset["sigma"],
        ratio=preset["ratio"],
        cliff_sigma=CLIFF_SIGMA,
        cliff_drop=CLIFF_DROP,
        rule=preset["rule"],
    )
    incidents = []
    compact = {}
    for label, key in ing.metrics:
        col = cols[label]
        direction = "none" if label == "lr" else ("down" if "acc" in label.lower() else "up")
        total = sum(col)
        rows = None
        nonfinite = []
        if (
            not math.isfinite(total)
            or max(col, default=0.0) > FMAX
            or min(col, default=0.0) < -FMAX
        ):
            rows = [i for i, v in enumerate(col) if -FMAX <= v <= FMAX]
            bad = [i for i, v in enumerate(col) if not -FMAX <= v <= FMAX and not _is_missing(v)]
            vals = array("d", (col[i] for i in rows))
            if len(rows) == n:
                rows = None
            for i in bad:
                if nonfinite and nonfinite[-1]["last"] == i - 1:
                    nonfinite[-1]["last"] = i
                    nonfinite[-1]["flagged"] += 1
                    continue
                nonfinite.append({"first": i, "last": i, "flagged": 1, "value": col[i]})
        else:
            vals = col
        compact[label] = (vals, rows)
        found, flagged = detect(label, vals, rows, steps, direction, preset)
        for nf in nonfinite:
            found.append(
                {
                    "metric": label,
                    "kind": "nonfinite",
                    "row": nf["first"],
                    "idx": None,
                    "end_idx": None,
                    "step": steps[nf["first"]],
                    "onset_step": steps[nf["first"]],
                    "peak_step": steps[nf["first"]],
                    "value": nf["value"],
                    "baseline": None,
                    "scale": None,
                    "score": None,
                    "recovery_steps": None,
                    "flagged": nf["flagged"],
                }
            )
        incidents.extend(found)
        send(
            "metric",
            label=label,
            key=key,
            direction=direction,
            n=len(vals),
            flagged=flagged,
            spike_share=(flagged / len(vals)) if len(vals) else 0.0,
            nonfinite=sum(nf["flagged"] for nf in nonfinite),
            median=_median(vals[-min(len(vals), 10000) :]) if len(vals) else None,
        )
    # events
    events = find_events(ing, steps, cols, args, extra, warnings)
    ev_steps = [e[1] for e in events]
    counts = Counter(e[0] for e in events)
    sent = Counter()
    for e in events:
        sent[e[0]] += 1
        if sent[e[0]] <= MAX_EVENTS:
            send("event", kind=e[0], step=e[1], source=e[2], detail=e[3])
    # batch composition on the loss (or the first upward metric)
    main_label = next((lab for lab, _ in ing.metrics if lab == "loss"), None)
    if main_label is None:
        main_label = next((lab for lab, _ in ing.metrics if lab not in ("lr",)), None)
    comp = {}
    if main_label is not None:
        vals, rows = compact[main_label]
        comp = composition(main_label, vals, rows, steps, incidents, ing, cols, n, derived)
    codes, names = comp.get("codes", (None, None))
    if codes is None:
        key, codes, names = bucket_column(ing, cols, n)
    # spikes: nearest event, bucket and run position at the onset
    incidents.sort(key=lambda i: (i["step"], i["metric"]))
    for inc in incidents:
        e = nearest_event(inc["step"], events, ev_steps)
        if e is not None:
            inc["event"], inc["event_step"], inc["distance"] = e[0], e[1], inc["step"] - e[1]
        else:
            inc["event"] = inc["event_step"] = inc["distance"] = None
        inc["bucket"] = inc["run_position"] = None
        if codes is not None:
            row = inc["row"]
            c = codes[row]
            pos = 1
            while row - pos >= 0 and codes[row - pos] == c and pos < 100000:
                pos += 1
            inc["bucket"] = names[c] if c >= 0 else None
            inc["run_position"] = pos
    listed = incidents
    if len(listed) > MAX_SPIKES:
        listed = sorted(
            listed, key=lambda i: -(i["score"] if i["score"] is not None else math.inf)
        )[:MAX_SPIKES]
        listed.sort(key=lambda i: (i["step"], i["metric"]))
        warnings.append(
            "%d spikes found; the %d with the highest score are listed"
            % (len(incidents), MAX_SPIKES)
        )
    for inc in listed:
        rec = dict((k, v) for k, v in inc.items() if k not in ("row", "idx", "peak_idx", "end_idx"))
        send("spike", **rec)
    lo_s, hi_s = min(steps), max(steps)
    for c in correlate(incidents, events, tol, lo_s, hi_s):
        send("correlation", **c)
    if "distribution" in comp:
        send("distribution", **comp["distribution"])
    if comp.get("periodicity"):
        send("periodicity", **comp["periodicity"])
    if "composition" in comp:
        send("composition", **comp["composition"])
    if "histogram" in comp:
        send("histogram", **comp["histogram"])
    if args.points > 0:
        for label, _ in ing.metrics:
            vals, rows = compact[label]
            mine = [i for i in incidents if i["metric"] == label and i["idx"] is not None]
            keep = [i["idx"] for i in mine] + [i["peak_idx"] for i in mine]
            keep += [i["peak_idx"] + 1 for i in mine]
            idx = decimate(vals, args.points, keep)
            send(
                "series",
                metric=label,
                steps=[steps[rows[i] if rows is not None else i] for i in idx],
                values=[vals[i] for i in idx],
            )
    for w in warnings:
        send("warning", message=w)
    findings = []
    if any(i["kind"] == "spike" for i in incidents):
        findings.append("spikes")
    if any(i["kind"] == "cliff" for i in incidents):
        findings.append("cliffs")
    if any(i["kind"] == "nonfinite" for i in incidents):
        findings.append("nonfinite")
    if comp.get("composition", {}).get("finding"):
        findings.append("batch-composition")
    code = EXIT_FINDINGS if findings else EXIT_OK
    return end(code, rows=n, spikes=len(incidents), events=dict(counts), findings=findings)


if __name__ == "__main__":
    sys.exit(main())
