"""Checkpoint diagnostics: the subcommands scan, inspect, diff and bisect (and the worker's).

Part of ``ckpt.py``: each ``cmd_*`` takes the parsed options, writes its records and returns
the exit code.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
import time

from ckpt_base import (
    NONFINITE_KEYS,
    NONNEG_SLOTS,
    OPTIMIZER,
    WEIGHTS,
    Fatal,
    LoadError,
    _as_number,
    _euid,
    _import_torch,
    _short,
    uses_torch,
)
from ckpt_check import exit_code_of, scan_item
from ckpt_discover import MAX_LOGS, discover
from ckpt_formats import _allow_globals, _import_global
from ckpt_layouts import open_source
from ckpt_workers import make_pool
from protocol import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, emit

torch = None  # this module's torch: set by _import_torch() (discovery needs no torch)
uses_torch(globals())


# ------------------------------------------------------------------------------ commands


def _preflight(opts):
    if opts.unsafe_pickle:
        emit(
            {
                "type": "warning",
                "message": "--unsafe-pickle: checkpoints are loaded with weights_only=False; a "
                "malicious file runs arbitrary code here as uid %d" % _euid(),
            }
        )
    for name in opts.allow_global or ():
        _import_global(name)  # fail before any work when a name is wrong
    if importlib.util.find_spec("torch") is None:
        raise Fatal(
            "torch is not installed for %s: install torch >= 2.1 in the environment that runs "
            "this script" % sys.executable
        )


def cmd_scan(opts):
    t0 = time.time()
    _preflight(opts)
    logs = []
    items, skipped = discover(opts.path, logs)
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
    emit(
        dict(
            {
                "type": "done",
                "command": "scan",
                "exit_code": code,
                "files": len(recs),
                "seconds": round(time.time() - t0, 3),
            },
            **counts,
        )
    )
    return code


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
                elif _as_number(v) is not None:
                    hyper[k] = _as_number(v)
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
                step = _as_number(s["step"])
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
    _preflight(opts)
    _import_torch()
    _allow_globals(opts.allow_global or ())
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
        "metadata": None,
        "needs_globals": [],
        "notes": [],
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
        rec["totals"] = totals
        rec["dtypes"] = dtypes
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
    emit(
        {
            "type": "done",
            "command": "inspect",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code


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
    _preflight(opts)
    _import_torch()
    _allow_globals(opts.allow_global or ())
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
    emit(
        {
            "type": "done",
            "command": "diff",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code


def _diff(a, b, rec, opts):
    ma = dict((e.name, e) for e in a.entries)
    mb = dict((e.name, e) for e in b.entries)
    notes = []
    if set(ma) != set(mb):
        sa = dict((_strip_wrappers(n), e) for n, e in ma.items())
        sb = dict((_strip_wrappers(n), e) for n, e in mb.items())
        if len(set(sa) & set(sb)) > len(set(ma) & set(mb)):
            ma, mb = sa, sb
            notes.append(
                "names matched after removing 'module.' / '_orig_mod.' (DDP, torch.compile)"
            )
    only_a = [n for n in ma if n not in mb]
    only_b = [n for n in mb if n not in ma]
    changes, diffs, flags = [], [], []
    seen_keys = set()
    tot = {WEIGHTS: [0.0, 0.0], OPTIMIZER: [0.0, 0.0]}
    identical = 0
    for name, ea in ma.items():
        eb = mb.get(name)
        if eb is None:
            continue
        if ea.shape != eb.shape or ea.dtype != eb.dtype:
            changes.append(
                {
                    "name": name,
                    "shape_a": list(ea.shape),
                    "shape_b": list(eb.shape),
                    "dtype_a": str(ea.dtype).replace("torch.", ""),
                    "dtype_b": str(eb.dtype).replace("torch.", ""),
                }
            )
        if ea.shape != eb.shape or ea._chunks is None or eb._chunks is None:
            continue
        key = (ea.key, eb.key)
        if ea.key is not None and eb.key is not None and key in seen_keys:
            continue  # tied weights: compared once
        seen_keys.add(key)
        try:
            d = _diff_entry(ea, eb, opts.chunk_elems)
        except (RuntimeError, NotImplementedError, TypeError) as e:
            notes.append("%s: not compared (%s)" % (name, _short(e)))
            continue
        sec = ea.section
        tot[sec][0] += d.pop("ss_a")
        tot[sec][1] += d.pop("ss_d")
        d.update(
            name=name,
            section=sec,
            slot=ea.slot if sec == OPTIMIZER else None,
            numel=ea.numel,
            dtype=str(ea.dtype).replace("torch.", ""),
        )
        if d["max_abs_diff"] == 0 and not d["nonfinite_a"] and not d["nonfinite_b"]:
            identical += 1
        diffs.append(d)
        second_moment = sec == OPTIMIZER and ea.slot in NONNEG_SLOTS
        if d["new_nonfinite"] and not second_moment:
            flags.append(
                {"name": name, "section": sec, "kind": "new_nonfinite", "count": d["new_nonfinite"]}
            )
        if second_moment:
            if d["nonfinite_b"]:
                flags.append(
                    {
                        "name": name,
                        "section": sec,
                        "kind": "nonfinite_exp_avg_sq",
                        "count": d["nonfinite_b"],
                    }
                )
            if d["negative_b"]:
                flags.append(
                    {
                        "name": name,
                        "section": sec,
                        "kind": "negative_exp_avg_sq",
                        "count": d["negative_b"],
                    }
                )

    def rank(section):
        # Step counters change by design: they would crowd out the tensors worth a look.
        pool = [
            d
            for d in diffs
            if d["section"] == section and not (d["slot"] == "step" and d["numel"] == 1)
        ]
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
        compared=len(diffs),
        identical=identical,
        only_a=only_a[:50],
        only_b=only_b[:50],
        only_a_total=len(only_a),
        only_b_total=len(only_b),
        changes=changes[:50],
        changes_total=len(changes),
        top_weights=rank(WEIGHTS),
        top_optimizer=rank(OPTIMIZER),
        flags=flags[:50],
        flags_total=len(flags),
        rel_change={
            s: (math.sqrt(v[1]) / math.sqrt(v[0]) if v[0] > 0 else None) for s, v in tot.items()
        },
        notes=notes + a.notes + b.notes,
    )
    problems = ["A: " + p for p in a.problems] + ["B: " + p for p in b.problems]
    if problems:
        rec["error"] = "; ".join(problems[:5])
        return EXIT_FAILED
    return EXIT_FINDINGS if flags else EXIT_OK


_NUM = re.compile(r"(\d+)")


def _natural(s):
    return [int(p) if p.isdigit() else p for p in _NUM.split(s)]


def cmd_bisect(opts):
    t0 = time.time()
    _preflight(opts)
    if not os.path.isdir(opts.path):
        raise Fatal(
            "%s is not a directory (bisect orders the checkpoints found under one)" % opts.path
        )
    items, skipped = discover(opts.path)
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
            rec = scan_item(it, opts)
            emit(rec)
            unreadable.append(it["path"])
    work = [it for it in items if it["kind"] not in ("unsupported", "error")]
    pool = make_pool(opts.jobs if opts.linear else 1, opts) if work else None
    try:
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
        rel = lambda p: os.path.relpath(p, opts.path)  # noqa: E731
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
        results = {}

        def scan(idx_items):
            todo = [dict(it, op="scan") for it, _ in idx_items if it["path"] not in results]
            for r in pool.run(todo) if todo else []:
                results[r["path"]] = r

        later_clean, bad = [], []
        if opts.linear:
            scan(cands)
            seq = [c for c in cands if results[c[0]["path"]]["status"] in ("clean", "bad")]
            unreadable += [c[0]["path"] for c in cands if c not in seq]
            first = next(
                (i for i, c in enumerate(seq) if results[c[0]["path"]]["status"] == "bad"), None
            )
            bad = [c[0]["path"] for c in seq if results[c[0]["path"]]["status"] == "bad"]
            if first is not None:
                later_clean = [
                    c[0]["path"]
                    for c in seq[first + 1 :]
                    if results[c[0]["path"]]["status"] == "clean"
                ]
            lo = first - 1 if first is not None else len(seq) - 1
            hi = first if first is not None else len(seq)
        else:
            seq = list(cands)
            lo, hi = -1, len(seq)
            while hi - lo > 1:  # invariant: seq[lo] clean (or -1), seq[hi] bad (or len)
                mid = (lo + hi) // 2
                scan([seq[mid]])
                st = results[seq[mid][0]["path"]]["status"]
                if st == "clean":
                    lo = mid
                elif st == "bad":
                    hi = mid
                else:
                    unreadable.append(seq[mid][0]["path"])
                    del seq[mid]
                    hi -= 1
            bad = [p for p, r in results.items() if r["status"] == "bad"]

        def brief(i, with_tensor):
            if i < 0 or i >= len(seq):
                return None
            it, step = seq[i]
            r = results[it["path"]]
            out = {"path": it["path"], "global_step": step, "epoch": r.get("epoch")}
            if with_tensor:
                out["tensor"] = (r.get("bad_tensors") or [None])[0]
                for k in NONFINITE_KEYS + ("negative_exp_avg_sq",):
                    out[k] = r.get(k)
            return out

        first_bad = brief(hi, True)
        code = EXIT_FINDINGS if first_bad else EXIT_OK
        if unreadable:
            code = EXIT_FAILED
        emit(
            {
                "type": "bisect",
                "directory": opts.path,
                "order": order,
                "mode": "linear" if opts.linear else "binary",
                "checkpoints": len(cands),
                "scanned": len(results),
                "last_clean": brief(lo, False),
                "first_bad": first_bad,
                "unreadable": unreadable,
                "bad": bad,
                "later_clean": later_clean,
                "assumption": None
                if opts.linear
                else "binary search: assumes that once a checkpoint is bad, every later one is "
                "too; use --linear to check them all",
            }
        )
    finally:
        if pool is not None:
            pool.close()
    emit(
        {
            "type": "done",
            "command": "bisect",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code
