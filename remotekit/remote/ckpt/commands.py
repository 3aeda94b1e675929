"""Checkpoint diagnostics: the subcommands scan, inspect, diff and bisect (and the worker's).

Part of ``ckpt.py``: each ``cmd_*`` takes its command's options (``options.py``: ``cmd_scan``
a ``ScanOptions``, ...), writes its records and returns the exit code.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
import time

from ..protocol import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, emit, finish
from . import rawdiff
from .base import (
    COUNTER,
    NONFINITE_KEYS,
    NONNEG_SLOTS,
    OPTIMIZER,
    OTHER,
    WEIGHTS,
    Fatal,
    LoadError,
    as_number,
    euid,
    import_torch,
    is_torchless_file,
    short,
    uses_torch,
)
from .check import exit_code_of, scan_item
from .discover import MAX_LOGS, discover
from .formats import allow_globals, import_global
from .layouts import open_source
from .resume import check as resume_check
from .workers import make_pool

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())


# ------------------------------------------------------------------------------ commands


def _preflight(opts, items=None):
    """Before any work: the warning --unsafe-pickle owes, the --allow-global names, and torch
    when some of ``items`` needs it (all of them: None)."""
    if opts.unsafe_pickle:
        emit(
            {
                "type": "warning",
                "message": "--unsafe-pickle: checkpoints are loaded with weights_only=False; a "
                "malicious file runs arbitrary code here as uid %d" % euid(),
            }
        )
    for name in opts.allow_globals:
        import_global(name)  # fail before any work when a name is wrong
    if items is None or any(_needs_torch(it) for it in items):
        if importlib.util.find_spec("torch") is None:
            raise Fatal(
                "torch is not installed for %s: install torch >= 2.1 in the environment that "
                "runs this script" % sys.executable
            )


def _needs_torch(item):
    """Whether checking a discovered item imports torch: safetensors files (alone or as an
    index's shards) and GGUF files are read without it."""
    if item["kind"] in ("unsupported", "error"):
        return False
    if item["kind"] == "file":
        return not is_torchless_file(item["path"])
    if item["kind"] == "hf-index":
        return not all(is_torchless_file(p) for p in item.get("files", ()))
    return True


def _opens_torch(path):
    """Whether inspect/diff of ``path`` imports torch: not for a safetensors, GGUF or NumPy
    file, nor an index of such shards (a directory: always; a missing path: its error)."""
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path):
        return True
    items, _ = discover(path)
    return any(_needs_torch(it) for it in items)


def _torch_for(opts, *paths):
    """The preflight of inspect / diff; torch imported when one of ``paths`` needs it (or
    --allow-global names a class for torch's unpickler)."""
    needs = any(_opens_torch(p) for p in paths)
    _preflight(opts, None if needs else [])
    if needs or opts.allow_globals:
        import_torch()
        allow_globals(opts.allow_globals)


def cmd_scan(opts):
    t0 = time.time()
    logs = []
    items, skipped = discover(opts.path, logs)
    _preflight(opts, items)
    total = sum(int(it.get("bytes", 0)) for it in items)
    jobs = max(1, min(opts.jobs, len(items)))
    emit(
        {
            "type": "plan",
            "files": len(items),
            "bytes": total,
            "jobs": jobs,
            "skipped": skipped,
            "logs": logs[:MAX_LOGS],
        }
    )
    direct = [it for it in items if it["kind"] in ("unsupported", "error")]
    work = [it for it in items if it["kind"] not in ("unsupported", "error")]
    recs = []
    for it in direct:
        rec = scan_item(it, opts)
        emit(rec)
        recs.append(rec)
    if work:
        pool = make_pool(jobs, opts)
        try:
            recs += pool.run([dict(it, op="scan") for it in work])
        finally:
            pool.close()
    counts = {"clean": 0, "bad": 0, "error": 0, "unsupported": 0}
    for r in recs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    code = max([exit_code_of(r) for r in recs] or [EXIT_OK])
    return finish("scan", code, files=len(recs), seconds=round(time.time() - t0, 3), **counts)


def _optimizer_info(src):
    out = []
    for path, opt in src.optimizers:
        groups = []
        for i, g in enumerate(opt.get("param_groups") or []):
            if not isinstance(g, dict):
                continue
            hyper = {}
            for k, v in g.items():
                if k == "params":
                    continue
                if isinstance(v, (bool, int, float, str)) or v is None:
                    hyper[k] = v
                elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
                    hyper[k] = list(v)
                elif as_number(v) is not None:
                    hyper[k] = as_number(v)
            lr = hyper.pop("lr", None)
            groups.append(
                {"index": i, "lr": lr, "params": len(g.get("params") or []), "hyper": hyper}
            )
        state = opt.get("state") or {}
        slots = {}
        for s in state.values() if isinstance(state, dict) else ():
            if isinstance(s, dict):
                for k in s:
                    slots[str(k)] = slots.get(str(k), 0) + 1
        step = None
        for s in state.values() if isinstance(state, dict) else ():
            if isinstance(s, dict) and "step" in s:
                step = as_number(s["step"])
                break
        out.append(
            {
                "path": path,
                "groups": groups,
                "state_params": len(state),
                "slots": slots,
                "step": step,
            }
        )
    return out


def cmd_inspect(opts):
    t0 = time.time()
    _torch_for(opts, opts.path)
    path = opts.path
    rec = {
        "type": "inspect",
        "path": path,
        "ok": False,
        "error": None,
        "format": None,
        "bytes": 0,
        "global_step": None,
        "epoch": None,
        "top_keys": [],
        "scalars": {},
        "optimizers": [],
        "totals": {},
        "dtypes": {},
        "other": {},
        "metadata": None,
        "needs_globals": [],
        "notes": [],
        "resume": None,
    }
    src = None
    try:
        src = open_source(path, opts, header_only=True)
        rec.update(
            format=src.format,
            bytes=src.bytes,
            global_step=src.meta["global_step"],
            epoch=src.meta["epoch"],
            top_keys=src.meta["top_keys"],
            scalars=src.meta["scalars"],
            metadata=src.meta.get("metadata"),
            notes=src.notes,
            optimizers=_optimizer_info(src),
        )
        rec["totals"], rec["dtypes"] = _emit_tensors(src)
        rec["resume"] = dict(resume_check(src, path), asked=opts.resume)
        for e in src.entries:
            if e.section == OTHER:
                rec["other"][e.kind] = rec["other"].get(e.kind, 0) + 1
        if src.problems:
            rec["error"] = "; ".join(src.problems[:5])
        rec["needs_globals"] = sorted(set(src.needs_globals))
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
    finally:
        if src is not None:
            src.close()
    rec["ok"] = rec["error"] is None
    emit(rec)
    code = EXIT_OK if rec["ok"] else EXIT_FAILED
    if code == EXIT_OK and opts.resume and rec["resume"] and not rec["resume"]["ready"]:
        code = EXIT_FINDINGS  # asked "can it resume?", and it cannot with nothing lost
    return finish("inspect", code, seconds=round(time.time() - t0, 3))


def _emit_tensors(src):
    """One "tensor" record per entry; returns (totals per section, numel per dtype), values in
    shared storage counted once."""
    names_by_key = {}
    for e in src.entries:
        if e.key is not None:
            names_by_key.setdefault(e.key, []).append(e.name)
    totals = {}
    dtypes = {}
    for e in src.entries:
        dt = str(e.dtype).replace("torch.", "")
        shared = (
            [n for n in names_by_key.get(e.key, ()) if n != e.name] if e.key is not None else []
        )
        emit(
            {
                "type": "tensor",
                "name": e.name,
                "section": e.section,
                "slot": e.slot if e.section == OPTIMIZER else None,
                "kind": e.kind,
                "dtype": dt,
                "shape": list(e.shape),
                "numel": e.numel,
                "bytes": e.nbytes,
                "shared_with": shared,
            }
        )
        t = totals.setdefault(e.section, {"tensors": 0, "numel": 0, "bytes": 0})
        t["tensors"] += 1
        if not shared or names_by_key[e.key][0] == e.name:
            t["numel"] += e.numel
            t["bytes"] += e.nbytes
            dtypes[dt] = dtypes.get(dt, 0) + e.numel
    return totals, dtypes


_WRAPPERS = re.compile(r"(^|\.)(module|_orig_mod)\.")


def _strip_wrappers(name):
    prev = None
    while prev != name:
        prev = name
        name = _WRAPPERS.sub(lambda m: m.group(1), name, count=1)
    return name


def _diff_entry(ea, eb, chunk):
    """Per-tensor comparison over chunks, in float64; non-finite elements are left out of norms."""
    ss_a = ss_b = ss_d = dot = 0.0
    max_d = 0.0
    nf_a = nf_b = new_nf = neg_b = 0
    nonneg = ea.section == OPTIMIZER and ea.slot in NONNEG_SLOTS
    for (_, ca), (_, cb) in zip(ea.chunks(chunk), eb.chunks(chunk)):
        a = _to_f64(ca)
        b = _to_f64(cb)
        if nonneg:
            neg_b += int((b < 0).sum())  # every element of B, before the finite filter
        fa = torch.isfinite(a)
        fb = torch.isfinite(b)
        if not (bool(fa.all()) and bool(fb.all())):
            nf_a += int((~fa).sum())
            nf_b += int((~fb).sum())
            new_nf += int((fa & ~fb).sum())
            both = fa & fb
            a = a[both]
            b = b[both]
        d = b - a
        ss_a += float((a * a).sum())
        ss_b += float((b * b).sum())
        ss_d += float((d * d).sum())
        dot += float((a * b).sum())
        if d.numel():
            max_d = max(max_d, float(d.abs().max()))
    na, nb = math.sqrt(ss_a), math.sqrt(ss_b)
    rel = math.sqrt(ss_d) / na if na > 0 else (0.0 if ss_d == 0 else math.inf)
    cos = dot / (na * nb) if na > 0 and nb > 0 else None
    return {
        "rel_change": rel,
        "max_abs_diff": max_d,
        "cosine": cos,
        "nonfinite_a": nf_a,
        "nonfinite_b": nf_b,
        "new_nonfinite": new_nf,
        "negative_b": neg_b,
        "ss_a": ss_a,
        "ss_d": ss_d,
    }


def _to_f64(c):
    if c.dtype.is_complex:
        return torch.view_as_real(c.to(torch.complex128)).reshape(-1)
    if c.dtype in (torch.float64,):
        return c
    try:
        return c.to(torch.float64)
    except (RuntimeError, NotImplementedError, TypeError):
        return c.float().to(torch.float64)


def _lr_list(src):
    return [[g["lr"] for g in o["groups"]] for o in _optimizer_info(src)]


def cmd_diff(opts):
    t0 = time.time()
    _torch_for(opts, opts.a, opts.b)
    rec = {"type": "diff", "a": opts.a, "b": opts.b, "ok": False, "error": None}
    srcs = []
    code = EXIT_FAILED
    try:
        for side, p in (("A", opts.a), ("B", opts.b)):
            try:
                srcs.append(open_source(p, opts))
            except LoadError as e:
                raise LoadError("%s (%s): %s" % (side, p, e.reason), e.needs_globals) from e
        a, b = srcs
        code = _diff(a, b, rec, opts)
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
    finally:
        for s in srcs:
            s.close()
    rec["ok"] = rec["error"] is None
    emit(rec)
    return finish("diff", code, seconds=round(time.time() - t0, 3))


def _diff(a, b, rec, opts):
    notes = []
    ma, mb = _match_names(a, b, notes)
    only_a = [n for n in ma if n not in mb]
    only_b = [n for n in mb if n not in ma]
    cmp = _Comparison()
    for name, ea in ma.items():
        eb = mb.get(name)
        if eb is not None:
            cmp.add(name, ea, eb, opts.chunk_elems, notes)

    def rank(section):
        pool = [d for d in cmp.diffs if d["section"] == section]
        return sorted(pool, key=lambda d: -d["rel_change"])[: opts.top]

    sa, sb = a.meta["global_step"], b.meta["global_step"]
    rec.update(
        format_a=a.format,
        format_b=b.format,
        step_a=sa,
        step_b=sb,
        step_delta=(sb - sa)
        if isinstance(sa, (int, float)) and isinstance(sb, (int, float))
        else None,
        epoch_a=a.meta["epoch"],
        epoch_b=b.meta["epoch"],
        lr_a=_lr_list(a),
        lr_b=_lr_list(b),
        tensors_a=len(ma),
        tensors_b=len(mb),
        compared=len(cmp.diffs),
        identical=cmp.identical,
        only_a=only_a[:50],
        only_b=only_b[:50],
        only_a_total=len(only_a),
        only_b_total=len(only_b),
        changes=cmp.changes[:50],
        changes_total=len(cmp.changes),
        top_weights=rank(WEIGHTS),
        top_optimizer=rank(OPTIMIZER),
        flags=cmp.flags[:50],
        flags_total=len(cmp.flags),
        counters=cmp.other.summary(counters=True),
        other=cmp.other.summary(counters=False),
        rel_change={
            s: (math.sqrt(v[1]) / math.sqrt(v[0]) if v[0] > 0 else None) for s, v in cmp.tot.items()
        },
        notes=notes + a.notes + b.notes,
    )
    problems = ["A: " + p for p in a.problems] + ["B: " + p for p in b.problems]
    if problems:
        rec["error"] = "; ".join(problems[:5])
        return EXIT_FAILED
    return EXIT_FINDINGS if cmp.flags else EXIT_OK


def _match_names(a, b, notes):
    """Tensor name -> entry for A and B; without DDP / torch.compile wrapper prefixes when
    that matches more names (a note says so)."""
    ma = dict((e.name, e) for e in a.entries)
    mb = dict((e.name, e) for e in b.entries)
    if set(ma) != set(mb):
        sa = dict((_strip_wrappers(n), e) for n, e in ma.items())
        sb = dict((_strip_wrappers(n), e) for n, e in mb.items())
        if len(set(sa) & set(sb)) > len(set(ma) & set(mb)):
            ma, mb = sa, sb
            notes.append(
                "names matched after removing 'module.' / '_orig_mod.' (DDP, torch.compile)"
            )
    return ma, mb


class _Comparison(object):
    """What comparing tensor pairs found: shape/dtype ``changes``, per-tensor ``diffs`` of the
    params, ``flags`` (findings), squared norms per section (``tot``: [||A||^2, ||B-A||^2]),
    and how the tensors that are no params changed (``other``)."""

    def __init__(self):
        self.changes, self.diffs, self.flags = [], [], []
        self.seen_keys = set()
        self.tot = {WEIGHTS: [0.0, 0.0], OPTIMIZER: [0.0, 0.0]}
        self.identical = 0
        self.other = _NonWeights()

    def add(self, name, ea, eb, chunk, notes):
        if ea.shape != eb.shape or ea.dtype != eb.dtype:
            self.changes.append(
                {
                    "name": name,
                    "shape_a": list(ea.shape),
                    "shape_b": list(eb.shape),
                    "dtype_a": str(ea.dtype).replace("torch.", ""),
                    "dtype_b": str(eb.dtype).replace("torch.", ""),
                }
            )
        if ea.shape != eb.shape or ea._chunks is None or eb._chunks is None:
            return
        if OTHER in (ea.section, eb.section):
            self.other.add(ea, eb, chunk)
            return
        key = (ea.key, eb.key)
        if ea.key is not None and eb.key is not None and key in self.seen_keys:
            return  # tied weights: compared once
        self.seen_keys.add(key)
        try:
            if _both_raw(ea, eb):
                nonneg = ea.section == OPTIMIZER and ea.slot in NONNEG_SLOTS
                d = rawdiff.diff_entry(ea, eb, chunk, nonneg)
            else:
                d = _diff_entry(ea, eb, chunk)
        except (RuntimeError, NotImplementedError, TypeError) as e:
            notes.append("%s: not compared (%s)" % (name, short(e)))
            return
        sec = ea.section
        self.tot[sec][0] += d.pop("ss_a")
        self.tot[sec][1] += d.pop("ss_d")
        d.update(
            name=name,
            section=sec,
            slot=ea.slot if sec == OPTIMIZER else None,
            numel=ea.numel,
            dtype=str(ea.dtype).replace("torch.", ""),
        )
        if d["max_abs_diff"] == 0 and not d["nonfinite_a"] and not d["nonfinite_b"]:
            self.identical += 1
        self.diffs.append(d)
        self.flags += _flags(name, sec, sec == OPTIMIZER and ea.slot in NONNEG_SLOTS, d)


class _NonWeights(object):
    """How the tensors that are no params changed, per kind and slot (num_batches_tracked,
    step, best_model_score): how many were compared and changed, and by how much (the range
    of B - A over the one-value ones)."""

    def __init__(self):
        self.groups = {}  # (kind, slot) -> summary

    def add(self, ea, eb, chunk):
        kind = ea.kind or eb.kind
        name = str(ea.slot if ea.slot is not None else ea.name).rsplit(".", 1)[-1]
        g = self.groups.setdefault(
            (kind, name),
            {
                "name": name,
                "kind": kind,
                "compared": 0,
                "changed": 0,
                "delta_min": None,
                "delta_max": None,
            },
        )
        g["compared"] += 1
        if _both_raw(ea, eb):
            changed, delta = rawdiff.value_change(ea, eb, chunk)
        else:
            changed, delta = _value_change(ea, eb, chunk)
        g["changed"] += changed
        if delta is not None:
            g["delta_min"] = delta if g["delta_min"] is None else min(g["delta_min"], delta)
            g["delta_max"] = delta if g["delta_max"] is None else max(g["delta_max"], delta)

    def summary(self, counters):
        """The counters' summary (``counters``) or every other kind's: {compared, changed,
        by_name: [group]}, the changed groups first, each part by name."""
        groups = [g for (k, _), g in self.groups.items() if (k == COUNTER) == counters]
        groups.sort(key=lambda g: (not g["changed"], g["name"], g["kind"]))
        return {
            "compared": sum(g["compared"] for g in groups),
            "changed": sum(g["changed"] for g in groups),
            "by_name": groups[:20],
        }


def _both_raw(ea, eb):
    """Both tensors' bytes are mapped as their files store them (safetensors, GGUF, NumPy)
    in a dtype :mod:`.rawdiff` reads: compared without torch."""
    return (
        ea.raw is not None
        and eb.raw is not None
        and rawdiff.readable(ea.dtype)
        and rawdiff.readable(eb.dtype)
    )


def _value_change(ea, eb, chunk):
    """(1 if any value differs else 0, B - A for a one-value tensor that changed and whose
    values are finite, else None); NaN equals NaN here."""
    for (_, ca), (_, cb) in zip(ea.chunks(chunk), eb.chunks(chunk)):
        if ca.dtype != cb.dtype or ca.dtype == torch.bool:
            ca, cb = _to_f64(ca), _to_f64(cb)
        same = ca == cb
        if ca.is_floating_point() or ca.is_complex():
            same |= torch.isnan(ca) & torch.isnan(cb)
        if not bool(same.all()):
            break
    else:
        return 0, None
    if ea.numel != 1:
        return 1, None
    a, b = as_number(ca), as_number(cb)
    if a is None or b is None or not math.isfinite(b - a):
        return 1, None
    return 1, b - a


def _flags(name, section, second_moment, d):
    """The findings of one compared tensor: values that became non-finite, and a second
    moment (exp_avg_sq-like) slot holding non-finite or negative values."""
    counts = []
    if d["new_nonfinite"] and not second_moment:
        counts.append(("new_nonfinite", d["new_nonfinite"]))
    if second_moment and d["nonfinite_b"]:
        counts.append(("nonfinite_exp_avg_sq", d["nonfinite_b"]))
    if second_moment and d["negative_b"]:
        counts.append(("negative_exp_avg_sq", d["negative_b"]))
    return [{"name": name, "section": section, "kind": k, "count": n} for k, n in counts]


_NUM = re.compile(r"(\d+)")


def _natural(s):
    return [int(p) if p.isdigit() else p for p in _NUM.split(s)]


def cmd_bisect(opts):
    t0 = time.time()
    if not os.path.isdir(opts.directory):
        raise Fatal(
            "%s is not a directory (bisect orders the checkpoints found under one)" % opts.directory
        )
    work, unreadable = _bisect_plan(opts)
    pool = make_pool(opts.jobs if opts.linear else 1, opts) if work else None
    try:
        order, cands = _bisect_order(pool, work, opts, unreadable)
        search = _Bisection(pool, cands)
        if opts.linear:
            search.linear()
        else:
            search.binary()
        unreadable += search.unreadable
        first_bad = search.brief(search.hi, True)
        code = EXIT_FAILED if unreadable else EXIT_FINDINGS if first_bad else EXIT_OK
        emit(
            {
                "type": "bisect",
                "directory": opts.directory,
                "order": order,
                "mode": "linear" if opts.linear else "binary",
                "checkpoints": len(cands),
                "scanned": len(search.results),
                "last_clean": search.brief(search.lo, False),
                "first_bad": first_bad,
                "unreadable": unreadable,
                "bad": search.bad,
                "later_clean": search.later_clean,
                "assumption": None
                if opts.linear
                else "binary search: assumes that once a checkpoint is bad, every later one is "
                "too; use --linear to check them all",
            }
        )
    finally:
        if pool is not None:
            pool.close()
    return finish("bisect", code, seconds=round(time.time() - t0, 3))


def _bisect_plan(opts):
    """Discover the checkpoints under the directory: the readable-looking items, and the
    paths of those already known unreadable (their records are written here)."""
    items, skipped = discover(opts.directory)
    _preflight(opts, items)
    emit(
        {
            "type": "plan",
            "files": len(items),
            "bytes": sum(int(i.get("bytes", 0)) for i in items),
            "jobs": opts.jobs,
            "skipped": skipped,
        }
    )
    unreadable = []
    for it in items:
        if it["kind"] in ("unsupported", "error"):
            emit(scan_item(it, opts))
            unreadable.append(it["path"])
    return [it for it in items if it["kind"] not in ("unsupported", "error")], unreadable


def _bisect_order(pool, work, opts, unreadable):
    """Read each checkpoint's step (no values) and order them: by global step when every one
    has one, else by name (naturally sorted). Returns (order, [(item, step)])."""
    metas = {}
    if pool is not None:
        for m in pool.run([dict(it, op="meta") for it in work]):
            metas[m["path"]] = m
    cands = []
    for it in work:
        m = metas.get(it["path"], {})
        if m.get("error"):
            unreadable.append(it["path"])
            emit(dict(scan_item(dict(it, kind="error", reason=m["error"]), opts)))
            continue
        cands.append((it, m.get("global_step")))
    rel = lambda p: os.path.relpath(p, opts.directory)  # noqa: E731
    if cands and all(s is not None for _, s in cands):
        order = "global_step"
        cands.sort(key=lambda c: (c[1], _natural(rel(c[0]["path"]))))
    else:
        order = "name"
        cands.sort(key=lambda c: _natural(rel(c[0]["path"])))
    emit(
        {
            "type": "order",
            "order": order,
            "checkpoints": [{"path": it["path"], "global_step": s} for it, s in cands],
        }
    )
    return order, cands


class _Bisection(object):
    """The search over ordered (item, step) candidates: ``seq[lo]`` is the last clean one
    (-1: none), ``seq[hi]`` the first bad one (``len(seq)``: none)."""

    def __init__(self, pool, cands):
        self.pool = pool
        self.cands = cands
        self.seq = list(cands)
        self.results = {}  # path -> checkpoint record
        self.unreadable, self.bad, self.later_clean = [], [], []
        self.lo, self.hi = -1, len(cands)

    def scan(self, idx_items):
        todo = [dict(it, op="scan") for it, _ in idx_items if it["path"] not in self.results]
        for r in self.pool.run(todo) if todo else []:
            self.results[r["path"]] = r

    def status(self, cand):
        return self.results[cand[0]["path"]]["status"]

    def linear(self):
        """Check every candidate; clean ones after the first bad are ``later_clean``."""
        self.scan(self.cands)
        seq = self.seq = [c for c in self.cands if self.status(c) in ("clean", "bad")]
        self.unreadable += [c[0]["path"] for c in self.cands if c not in seq]
        first = next((i for i, c in enumerate(seq) if self.status(c) == "bad"), None)
        self.bad = [c[0]["path"] for c in seq if self.status(c) == "bad"]
        if first is not None:
            self.later_clean = [c[0]["path"] for c in seq[first + 1 :] if self.status(c) == "clean"]
        self.lo = first - 1 if first is not None else len(seq) - 1
        self.hi = first if first is not None else len(seq)

    def binary(self):
        """About log2(n) scans; an unreadable candidate leaves the sequence."""
        seq = self.seq
        while self.hi - self.lo > 1:  # invariant: seq[lo] clean (or -1), seq[hi] bad (or len)
            mid = (self.lo + self.hi) // 2
            self.scan([seq[mid]])
            st = self.status(seq[mid])
            if st == "clean":
                self.lo = mid
            elif st == "bad":
                self.hi = mid
            else:
                self.unreadable.append(seq[mid][0]["path"])
                del seq[mid]
                self.hi -= 1
        self.bad = [p for p, r in self.results.items() if r["status"] == "bad"]

    def brief(self, i, with_tensor):
        if i < 0 or i >= len(self.seq):
            return None
        it, step = self.seq[i]
        r = self.results[it["path"]]
        out = {"path": it["path"], "global_step": step, "epoch": r.get("epoch")}
        if with_tensor:
            out["tensor"] = (r.get("bad_tensors") or [None])[0]
            for k in NONFINITE_KEYS + ("negative_exp_avg_sq",):
                out[k] = r.get(k)
        return out
