"""Which log ``trainlog.py`` reads and how: the log of a run directory (:func:`find_log`),
its checkpoint directory, and :func:`read_log`, which streams JSON lines, CSV, JSON
documents, trainer lines or plain text into an :class:`~.ingest.Ingest`.
"""

from __future__ import annotations

import csv
import gc
import json
import os
import re
from array import array
from collections import Counter
from itertools import chain, compress, islice, repeat
from operator import itemgetter

from infile import TooDeep, load_json, open_regular
from protocol import mask

from .base import CODE_RE, FAST_PAIR_RE, MISSING, PAIR_RE, WORD_RE, LogError, _fmt
from .binary import read_tfevents, read_wandb, tf_lengths
from .ingest import (
    HEAD_ROWS,
    MAX_DOC,
    Lines,
    NoLoss,
    _head,
    _ingest_for,
    _maybe_event,
)
from .lines import sniff
from .rank import choose
from .readers import mlflow, olmo
from .series import ingest


def _text_row(line):
    d = dict(PAIR_RE.findall(line))
    if not d or not any(k.lower() in ("step", "iter", "iteration") for k in d):
        for k, v in WORD_RE.findall(line):
            d.setdefault(k.lower(), v)
    return d


def read_log(path, fmt, wanted):
    """Stream the log once; return ``(Ingest, format, lines, extra)``."""
    auto = fmt == "auto"
    lf = None
    if os.path.isdir(path) and mlflow.is_run(path):
        return ingest(mlflow.read(path), wanted) + ({},)
    if auto:
        fmt, lf = sniff(path)
        # OLMo's rich console lines start with "[2024-04-18 14:24:11]": sniffed as JSON
        if fmt in ("text", "json") and olmo.claims(path):
            return ingest(olmo.read(path), wanted) + ({},)
    extra = {}
    if fmt in BINARY:
        what, reader = BINARY[fmt]
        try:
            out = reader(path, wanted)
        except NoLoss as exc:
            exc.what = what  # it parsed: its own series are listed, it is no text log
            raise
        if fmt == "wandb":
            _wandb_cut_short(path, out[0])
        return out + (extra,)
    doc = None
    if fmt == "json":
        size = os.path.getsize(path)
        if size > MAX_DOC:
            raise LogError(
                "a %d MiB JSON document; over %d MiB is not read whole (is it JSON lines?)"
                % (size >> 20, MAX_DOC >> 20)
            )
        with open_regular(path, "r", encoding="utf-8", errors="replace") as f:
            try:
                doc = load_json(f, "the JSON document")
            except TooDeep as exc:
                raise LogError(str(exc)) from None
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
    with open_regular(path) as f:
        return read_lines(f, fmt, lf, wanted) + (extra,)


def read_lines(f, fmt, lf, wanted):
    """A log of lines (``csv``, ``jsonl``, a trainer's text format ``lf``, or plain
    ``text``) from the binary file ``f``: ``(Ingest, format, lines)``. ``follow``
    hands it the window of a growing log, so a followed log is read by the same code."""
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
    return out


def _wandb_cut_short(path, ing):
    """A warning when the run's own summary (``files/wandb-summary.json`` beside the .wandb
    file) names a later step than the history read: the file was cut short."""
    summary = os.path.join(os.path.dirname(path), "files", "wandb-summary.json")
    try:
        with open_regular(summary, "r", encoding="utf-8", errors="replace") as f:
            doc = load_json(f, "wandb-summary.json")
    except (OSError, ValueError, TooDeep):
        return
    key = ing.step_key or "_step"
    said = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(said, (int, float)) or isinstance(said, bool) or not ing.rows():
        return
    last = ing.last_step()
    if said > last:
        ing.guesses.append(
            "the W&B summary says the run reached %s %s, but the history in %s stops at %s: "
            "the file is cut short (a copy taken while the run was writing, or damaged); "
            "only the steps read are analysed"
            % (key, _fmt(said), os.path.basename(path), _fmt(last))
        )


def _read_tfevents_at(path, wanted):
    with open_regular(path) as f:
        return read_tfevents(f, wanted)


BINARY = {
    "tfevents": ("TensorBoard event file", _read_tfevents_at),
    "wandb": ("W&B run file", read_wandb),
}


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


def _jsonl_head(lines):
    """The first lines parsed: a dict per JSON object, None per line that is not valid
    JSON, the text of other non-empty lines (an event, or skipped)."""
    head = []
    for line in lines:
        if line[:1] == "{":
            try:
                head.append(json.loads(line))
            except (ValueError, RecursionError):  # nesting too deep
                head.append(None)
        elif line.strip():
            head.append(line)
    return head


def _read_jsonl(src, wanted):
    loads = json.loads
    lines, blocks = _head(src, HEAD_ROWS)
    head = _jsonl_head(lines)
    nlines = len(lines)
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


# The hot loop binds its names locally: a call per row would cost more than the parse.
# long: one pass over the blocks; the column-at-a-time path is already its own function
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
            if bidx is None:
                flat = _csv_split(block, delim, width)
                if flat is not None and _csv_columns(ing, _Cells(flat, width), idx, header):
                    continue
            rows = list(filter(None, csv.reader(block, delimiter=delim)))
            if (
                bidx is None
                and rows
                and len(set(map(len, rows))) == 1
                and len(rows[0]) == width
                and _csv_columns(ing, rows, idx, header)
            ):
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


def _csv_split(block, delim, width):
    """A block's cells in one flat list, ``width`` per row, by splitting its text once;
    None when ``csv.reader`` could read it otherwise: a quote, a carriage return, a blank
    line or a line of another width (those blocks take the ``csv.reader`` path)."""
    text = delim.join(block)
    if '"' in text or "\r" in text or set(map(str.count, block, repeat(delim))) != {width - 1}:
        return None
    if width == 1 and "" in block:
        return None  # a blank line is no row
    return text.split(delim)


class _Cells:
    """The rows of a flat cell list, as ``_csv_columns`` reads them: ``len``, a column, a row."""

    def __init__(self, flat, width):
        self.flat, self.width = flat, width

    def __len__(self):
        return len(self.flat) // self.width

    def column(self, i):
        return self.flat[i :: self.width]

    def __getitem__(self, k):
        w = self.width
        return self.flat[k * w : k * w + w]


def _csv_columns(ing, rows, idx, header):
    """A block of CSV rows of the header's width converted a column at a time
    (``array(map(float))`` per column; empty cells are missing). False, with nothing done,
    when a row needs the row-by-row path: a step cell empty or a text cell in a kept column.
    ``rows``: a list of rows, or :class:`_Cells`."""
    n = len(rows)
    if isinstance(rows, _Cells):
        cols = {i: rows.column(i) for i in set(idx)}
    else:
        cols = {i: list(map(itemgetter(i), rows)) for i in set(idx)}
    m0, m1 = ing.m0, ing.m1
    if m0 and "" in cols[idx[0]]:
        return False  # an empty step: the row-by-row path numbers it
    out = []
    for i in idx:
        c = cols[i]
        try:
            out.append(array("d", map(float, c)))
        except ValueError:
            blank = c.count("")
            if blank == n:
                out.append(array("d", [MISSING]) * n)
                continue
            try:
                out.append(array("d", [float(x) if x else MISSING for x in c]))
            except ValueError:
                return False
    # rows without any kept metric (Lightning's epoch rows): counted, as row by row
    metric = [cols[i] for i in idx[m0:m1]]
    empty = None
    if metric and all("" in c for c in metric):
        for c in sorted(metric, key=lambda c: c.count("")):  # the fewest blanks first
            e = {k for k, x in enumerate(c) if not x}
            empty = e if empty is None else empty & e
            if not empty:
                break
    ing.flush()
    if empty:
        for k in sorted(empty):
            ing.slow(dict(zip(header, rows[k])))
        keep = [k not in empty for k in range(n)]
        out = [array("d", compress(a, keep)) for a in out]
    for col, a in zip(ing.cols, out):
        col.extend(a)
    return True


# long: the per-line loop of every trainer format, names bound locally (a call costs > a regex)
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
    """A line off the fast path: an event, a row (only with the log's step key, when it has
    one: a number is a step only where the log says so), or skipped."""
    event = _maybe_event(ing, line)
    if CODE_RE.match(line):
        d = None  # source code or a shell trace printed before the log: no row
    elif d is None:
        d = _text_row(line)
    if d and (not ing.step_key or ing.step_key in d):
        ing.slow(d, quiet=event)
    elif line.strip() and not event:
        ing.skipped += 1


LOG_NAMES = (
    # (pattern on the path below the run dir, what it is), in order of preference
    (r"(?:^|/)trainer_log\.jsonl$", "LLaMA-Factory trainer_log.jsonl"),
    (r"^trainer_state\.json$", "HF trainer_state.json"),
    # a run's own JSON lines at its top level over a checkpoint's copy of the history
    (r"^[^/]*\.jsonl$", "JSON lines"),
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
    ``LOG_NAMES`` (the newest file of the best kind; for checkpoints, the highest step).
    An MLflow store (or one of its experiments) gives the run :func:`choose` prefers."""
    run = _mlflow_run(run_dir)
    if run is not None:
        return run
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
    _wandb_without_history(run_dir, found)
    if not found:
        raise LogError(
            "no training log under it (looked for %s)"
            % "trainer_state.json, trainer_log.jsonl, metrics.csv, wandb/run-*/*.wandb, "
            "events.out.tfevents.*, *.jsonl, *.log, *.txt, *.csv"
        )
    found.sort()
    _wandb_without_history(run_dir, found)
    rank, _, rel, full, what = found[0]
    same = [f for f in found if f[0] == rank]
    if len(same) > 1 and what == "TensorBoard event file":
        return _event_file(same, len(found) - len(same))
    others = len(found) - 1
    return full, "%s (%s)%s" % (rel, what, "; %d other candidates" % others if others else "")


WANDB_RUN_DIR_RE = re.compile(r"(?:^|/)(?:offline-)?run-\d{8}_\d{6}-\w+$")


def _wandb_without_history(run_dir, found):
    """A W&B run directory whose best log is one of its own side files (debug.log,
    output.log) has lost its ``run-*.wandb`` file, the only history W&B keeps there: say
    so, and what is there, rather than read a debug log as the training log."""
    if any(f[4] == "W&B run file" for f in found):
        return
    top = run_dir.rstrip("/")
    best = found[0][3] if found else None
    for root, dirs, _files in os.walk(top):
        if root[len(top) :].count("/") > 2:
            dirs[:] = []
        if not WANDB_RUN_DIR_RE.search(root):
            continue
        if best is not None and not best.startswith(root + "/"):
            return
        names = (
            os.path.relpath(os.path.join(r, n), root) for r, _, ns in os.walk(root) for n in ns
        )
        there = sorted(islice(names, 1000))  # a media-heavy run folder is not listed whole
        raise LogError(
            "a W&B run directory without its run-*.wandb file (the run's history): %s holds "
            "only %s; copy the run's .wandb file too, or name a log of the trainer's own"
            % (os.path.relpath(root, top), ", ".join(there[:8]) or "nothing")
            + (" and %d more" % (len(there) - 8) if len(there) > 8 else "")
        )


def _event_file(files, more):
    """``(file, why)``: of several event files (Lightning's fit, validate and test; Keras's
    train/ and validation/), the one :func:`choose` prefers."""
    cands = [(rel, tf_lengths(full), -key) for _, key, rel, full, _ in files]
    best, why = choose(cands)
    rel, full = files[best][2], files[best][3]
    tail = "; %d other candidates of other kinds" % more if more else ""
    return full, "%s (TensorBoard event file): %s%s" % (rel, why, tail)


def _mlflow_run(path):
    """``(run dir, why)`` of an MLflow store, experiment or run, else None."""
    runs = mlflow.runs_of(path)
    base = len(path.rstrip("/")) + 1
    if not runs:  # a project folder with its mlruns/ beside the code
        runs = mlflow.runs_of(os.path.join(path, "mlruns"))
    if not runs:
        return None
    cands = [
        (
            "%s (MLflow run %s)" % (r[base:] or ".", m.get("run_name") or os.path.basename(r)),
            mlflow.lengths(r),
            _float(m.get("start_time")),
        )
        for r, m in runs
    ]
    best, why = choose(cands)
    return runs[best][0], "%s: %s" % (cands[best][0], why)


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


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
