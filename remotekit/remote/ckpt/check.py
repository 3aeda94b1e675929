"""Checkpoint diagnostics: checking values (NaN, +-Inf, negative second moments) and scanning.

Part of ``ckpt.py``. One ``aminmax`` per chunk tells a clean chunk; only chunks with bad values
are counted element by element. Values a file stores as raw floats (safetensors) are checked
without torch (:mod:`values`). :func:`scan_item` turns one discovered item into its
``checkpoint`` record; :func:`meta_item` reads only its step (bisect's ordering).
"""

from __future__ import annotations

import gc
import math
import mmap
import os
import time

from ..protocol import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, emit
from .base import (
    NAME_STEP,
    NONFINITE_KEYS,
    NONNEG_SLOTS,
    OPTIMIZER,
    OTHER,
    PROGRESS_EVERY_S,
    SECTIONS,
    WEIGHTS,
    Fatal,
    LoadError,
    Unscannable,
    is_checkable,
    short,
    uses_torch,
)
from .layouts import open_source
from .values import Stats, check_raw, raw_checkable

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())


# ------------------------------------------------------------------------------ checking


_UPCAST = {}  # dtype -> True when this torch cannot reduce it natively (float8, ...)


def _aminmax(c):
    """(x, min, max) of a real chunk, upcasting dtypes torch cannot reduce (float8)."""
    if not _UPCAST.get(c.dtype):
        try:
            mn, mx = torch.aminmax(c)
            return c, float(mn), float(mx)
        except (RuntimeError, NotImplementedError, TypeError):
            if c.dtype in (torch.float32, torch.float64):
                raise
            _UPCAST[c.dtype] = True
    try:
        x = c.float()
    except (RuntimeError, NotImplementedError, TypeError):
        raise Unscannable(
            "dtype %s cannot be checked on CPU by torch %s" % (c.dtype, torch.__version__)
        ) from None
    mn, mx = torch.aminmax(x)
    return x, float(mn), float(mx)


ROW = 1 << 14  # elements per row when a chunk with bad values is narrowed down


def _check_chunk(c, offset, st, nonneg):
    """Fold one 1-D chunk into ``st``.

    The common case is one reduction: ``aminmax`` propagates NaN and shows +-Inf as the min or
    max, so finite min and max mean a clean chunk (and, in a second-moment slot, min >= 0 means
    no negative value). Otherwise a row-wise ``aminmax`` finds the rows holding bad values and
    only those rows are counted exactly: elementwise masks are slow, and bad values are rare.
    """
    if c.dtype.is_complex:
        _check_complex(c, offset, st)
        return
    x, mn, mx = _aminmax(c)
    if math.isfinite(mn) and math.isfinite(mx) and not (nonneg and mn < 0):
        st.minmax(mn, mx)
        return
    n = x.numel()
    full = n - n % ROW
    if full:
        rows = x[:full].view(-1, ROW)
        rmn, rmx = torch.aminmax(rows, dim=1)
        ok = torch.isfinite(rmn) & torch.isfinite(rmx)
        if nonneg:
            ok &= rmn >= 0
        if bool(ok.any()):
            st.minmax(float(rmn[ok].min()), float(rmx[ok].max()))
        bad_rows = (~ok).nonzero().flatten()
        if bad_rows.numel():
            first = int(bad_rows[0])
            _first_bad(rows[first], offset + first * ROW, st, nonneg)
            _count_exact(rows.index_select(0, bad_rows).view(-1), st, nonneg)
    if full < n:
        _first_bad(x[full:], offset + full, st, nonneg)
        _count_exact(x[full:], st, nonneg)


def _count_exact(x, st, nonneg):
    st.nan += int(torch.count_nonzero(torch.isnan(x)))
    st.posinf += int(torch.count_nonzero(x == math.inf))
    st.neginf += int(torch.count_nonzero(x == -math.inf))
    if nonneg:
        st.negative += int(torch.count_nonzero(x < 0))  # -inf counts as negative too
    fin = torch.isfinite(x)
    if bool(fin.any()):
        mn, mx = torch.aminmax(x[fin])
        st.minmax(float(mn), float(mx))


def _first_bad(x, base, st, nonneg):
    if st.first_bad is not None:
        return
    bad = ~torch.isfinite(x)
    if nonneg:
        bad |= x < 0
    if bool(bad.any()):
        st.first_bad = base + int(torch.argmax(bad.to(torch.uint8)))


def _check_complex(c, offset, st):
    try:
        r = torch.view_as_real(c)
    except (RuntimeError, NotImplementedError, TypeError):
        try:
            c = c.to(torch.complex64)
            r = torch.view_as_real(c)
        except (RuntimeError, NotImplementedError, TypeError):
            raise Unscannable(
                "dtype %s cannot be checked on CPU by torch %s" % (c.dtype, torch.__version__)
            ) from None
    _x, mn, mx = _aminmax(r)
    if math.isfinite(mn) and math.isfinite(mx):
        m = float(torch.abs(c).max())
        st.max_abs = m if st.max_abs is None else max(st.max_abs, m)
        return
    re_, im = r[:, 0], r[:, 1]
    nanm = torch.isnan(re_) | torch.isnan(im)
    posm = ((re_ == math.inf) | (im == math.inf)) & ~nanm
    negm = ((re_ == -math.inf) | (im == -math.inf)) & ~nanm & ~posm
    st.nan += int(nanm.sum())
    st.posinf += int(posm.sum())
    st.neginf += int(negm.sum())
    bad = nanm | posm | negm
    if st.first_bad is None:
        st.first_bad = offset + int(torch.argmax(bad.to(torch.uint8)))
    if not bool(bad.all()):
        m = float(torch.abs(c[~bad]).max())
        st.max_abs = m if st.max_abs is None else max(st.max_abs, m)


class _Progress(object):
    def __init__(self, path, total):
        self.path, self.total, self.done = path, total, 0
        self.last = time.time()

    def advance(self, n):
        self.done += n
        now = time.time()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            emit({"type": "progress", "path": self.path, "done": self.done, "total": self.total})


def check_entry(entry, chunk, progress=None):
    """Exact non-finite counts of one entry, reading it once in bounded chunks."""
    nonneg = entry.section == OPTIMIZER and entry.slot in NONNEG_SLOTS
    if entry.raw is not None and raw_checkable(entry.dtype):
        mm, start = entry.raw
        return check_raw(mm, start, entry.dtype, entry.numel, chunk, nonneg, progress)
    st = Stats(entry.numel)
    for off, c in entry.chunks(chunk):
        _check_chunk(c, off, st, nonneg)
        if progress is not None:
            progress.advance(c.numel() * c.element_size())
        del c
    return st


def empty_record(path, fmt=None, nbytes=0):
    rec = {
        "type": "checkpoint",
        "path": path,
        "status": "error",
        "ok": False,
        "error": None,
        "format": fmt,
        "global_step": None,
        "step_key": None,
        "epoch": None,
        "scalars": {},
        "params": 0,
        "tensors": 0,
        "skipped_tensors": 0,
        "other_tensors": 0,
        "other": {},
        "bytes": nbytes,
        "negative_exp_avg_sq": 0,
        "bad_tensors": [],
        "bad_tensors_total": 0,
        "needs_globals": [],
        "notes": [],
        "seconds": 0.0,
    }
    for sec in SECTIONS:
        for what in ("nan", "posinf", "neginf"):
            rec["%s_%s" % (what, sec)] = 0
        rec["max_abs_" + sec] = None
    return rec


# One pass groups tied tensors, checks each stored tensor once and sums per section.
# long: the three steps share the group table and read best together.
def scan_source(src, rec, opts):
    """Check every tensor of an opened source and fill the counts of ``rec``."""
    groups = []  # [entry, [names], stats] per distinct stored tensor, in checkpoint order
    keys = set()
    todo = 0
    for e in src.entries:
        if (
            e.section != OTHER
            and is_checkable(e.dtype)
            and e._chunks is not None
            and (e.key is None or e.key not in keys)
        ):
            todo += e.nbytes
            keys.add(e.key)
    by_key = {}
    progress = _Progress(src.path, todo)
    rec["tensors"] = len(src.entries)
    for e in src.entries:
        if e.section == OTHER:
            _count_other(e, rec, opts)
            continue
        if not is_checkable(e.dtype):
            rec["skipped_tensors"] += 1
            continue
        if e._chunks is None:
            continue
        if e.key is not None and e.key in by_key:
            by_key[e.key][1].append(e.name)
            continue
        try:
            st = check_entry(e, opts.chunk_elems, progress)
        except Unscannable as exc:
            rec["skipped_tensors"] += 1
            note = "%s: %s" % (e.name, exc)
            if len(rec["notes"]) < 20:
                rec["notes"].append(note)
            continue
        g = [e, [e.name], st]
        groups.append(g)
        if e.key is not None:
            by_key[e.key] = g
        sec = e.section
        if sec == WEIGHTS:
            rec["params"] += e.numel
        rec["nan_" + sec] += st.nan
        rec["posinf_" + sec] += st.posinf
        rec["neginf_" + sec] += st.neginf
        if st.negative:
            rec["negative_exp_avg_sq"] += st.negative
        if st.max_abs is not None:
            cur = rec["max_abs_" + sec]
            rec["max_abs_" + sec] = st.max_abs if cur is None else max(cur, st.max_abs)
    bad = []
    for e, names, st in groups:
        if not (st.nonfinite or st.negative):
            continue
        for name in names:
            bad.append(
                {
                    "name": name,
                    "section": e.section,
                    "slot": e.slot if e.section == OPTIMIZER else None,
                    "dtype": str(e.dtype).replace("torch.", ""),
                    "numel": e.numel,
                    "nan": st.nan,
                    "posinf": st.posinf,
                    "neginf": st.neginf,
                    "negative": st.negative,
                    "first_index": st.first_bad,
                    "shared_with": [n for n in names if n != name],
                }
            )
    rec["bad_tensors_total"] = len(bad)
    rec["bad_tensors"] = bad[: opts.max_bad]


def _count_other(e, rec, opts):
    """Count a tensor that is no param under its kind; a non-finite value in one (Lightning's
    kth_value is +inf until save_top_k checkpoints are kept) is a note, never a bad weight."""
    rec["other_tensors"] += 1
    rec["other"][e.kind] = rec["other"].get(e.kind, 0) + 1
    if not is_checkable(e.dtype):
        rec["skipped_tensors"] += 1  # integer and bool values are not checked
        return
    if e._chunks is None:
        return
    st = check_entry(e, opts.chunk_elems)
    if st.nonfinite and len(rec["notes"]) < 20:
        rec["notes"].append(
            "%s: %s in a %s, not a weight (not counted)" % (e.name, _nonfinite_words(st), e.kind)
        )


def _nonfinite_words(st):
    return ", ".join(
        "%d %s" % (n, w)
        for n, w in ((st.nan, "NaN"), (st.posinf, "+Inf"), (st.neginf, "-Inf"))
        if n
    )


# A full gc pass costs ~0.1 s with torch loaded: run one only when memory asks for it.
BIG_FILE = 256 << 20  # a checkpoint this large may leave a mapping behind in a cycle: unmap it
RSS_SLACK = 1 << 30  # resident memory this far above the first file's: collect
_RSS_BASE = []


def _rss():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


def _collect_if_needed(nbytes):
    """gc.collect() after a large checkpoint, or when resident memory grew by RSS_SLACK."""
    rss = _rss()
    if not _RSS_BASE:
        _RSS_BASE.append(rss)
    if nbytes >= BIG_FILE or rss - _RSS_BASE[0] > RSS_SLACK:
        gc.collect()


def scan_item(item, opts):
    """One "checkpoint" record for a discovered item; never raises for a bad file."""
    t0 = time.time()
    rec = empty_record(item["path"], item.get("format"), item.get("bytes", 0))
    kind = item["kind"]
    if kind == "unsupported":
        rec["status"] = "unsupported"
        rec["error"] = item["reason"]
        return rec
    if kind == "error":
        rec["error"] = item["reason"]
        return rec
    src = None
    try:
        src = open_source(item["path"], opts)
        rec["format"] = src.format
        rec["bytes"] = src.bytes or rec["bytes"]
        _name_step(src)
        rec["global_step"] = src.meta["global_step"]
        rec["step_key"] = src.meta["step_key"]
        rec["epoch"] = src.meta["epoch"]
        rec["scalars"] = src.meta["scalars"]
        rec["notes"].extend(src.notes)
        scan_source(src, rec, opts)
        if src.problems:
            rec["error"] = "; ".join(src.problems[:5])
            rec["needs_globals"] = sorted(set(src.needs_globals))
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
        rec["format"] = rec["format"] or e.fmt
    except Fatal:
        raise
    except Exception as e:  # a bad file must never stop the scan: say what happened
        rec["error"] = "unexpected %s while checking: %s" % (type(e).__name__, short(e))
    finally:
        if src is not None:
            src.close()
        src = None
        _collect_if_needed(rec["bytes"])
    if rec["error"]:
        rec["status"] = "error"
    elif any(rec[k] for k in NONFINITE_KEYS) or rec["negative_exp_avg_sq"]:
        rec["status"] = "bad"
    else:
        rec["status"] = "clean"
    rec["ok"] = rec["status"] == "clean"
    rec["seconds"] = round(time.time() - t0, 3)
    return rec


def meta_record(path, error=None):
    return {
        "type": "meta",
        "path": path,
        "global_step": None,
        "step_key": None,
        "epoch": None,
        "error": error,
    }


def step_from_name(path):
    """A step written in the checkpoint's name or in one of its two parent directories'."""
    parts = os.path.abspath(path).split(os.sep)[-3:]
    for part in reversed(parts):
        found = NAME_STEP.findall(os.path.splitext(part)[0] if part == parts[-1] else part)
        if found:
            return int(found[-1])
    return None


def _name_step(src):
    """The file holds no step: take the one in its name (checkpoint-2000/, step_2000.pt),
    else its epoch (the least specific counter; ``step_key`` "epoch" says so)."""
    if src.meta["global_step"] is None:
        step = step_from_name(src.path)
        if step is not None:
            src.meta["global_step"], src.meta["step_key"] = step, "name"
        elif src.meta["epoch"] is not None:
            src.meta["global_step"], src.meta["step_key"] = src.meta["epoch"], "epoch"


def meta_item(item, opts):
    """A "meta" record (step, epoch) for ordering; reads no tensor data."""
    rec = meta_record(item["path"])
    if item["kind"] not in ("file", "hf-index", "dir"):
        rec["error"] = item.get("reason")
        return rec
    src = None
    try:
        src = open_source(item["path"], opts, header_only=True)
        _name_step(src)
        rec["step_key"] = src.meta["step_key"]
        rec["global_step"] = src.meta["global_step"]
        rec["epoch"] = src.meta["epoch"]
    except LoadError as e:
        rec["error"] = e.reason
    except Fatal:
        raise
    except Exception as e:
        rec["error"] = "unexpected %s: %s" % (type(e).__name__, short(e))
    finally:
        if src is not None:
            src.close()
        src = None
        _collect_if_needed(0)
    return rec


def exit_code_of(rec):
    return {"clean": EXIT_OK, "bad": EXIT_FINDINGS}.get(rec.get("status"), EXIT_FAILED)
