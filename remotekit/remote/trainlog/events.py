"""Events for ``trainlog.py``: checkpoint saves (log lines, the checkpoint directory, the
files' own step keys, HF ``save_steps``), resumes, epoch starts, a missing warmup, lr jumps
and pauses; the nearest event of each spike and whether spikes sit at events more often
than chance.
"""

from __future__ import annotations

import bisect
import math
import os
import pickletools
import re
import struct
import zipfile
from array import array
from itertools import compress, islice, repeat
from operator import gt, le, mul, sub

from ..infile import load_json, open_regular
from .base import DIR_STEP_RE, MAX_EVENTS, binom_sf, fmt_number, quantile
from .source import MAX_DOC

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
    return [(step, detail) for step, detail, _ in checkpoint_entries(path)]


def checkpoint_entries(path):
    """``[(step, detail, entry path)]``: :func:`checkpoint_saves` with the path of each."""
    found = {}
    for d in [path] + [os.path.join(path, c) for c in ("checkpoints", "ckpt", "ckpts")]:
        if d == path or os.path.isdir(d):
            for step, detail, full in _saves_in(d):
                found.setdefault(step, (detail, full))
    return [(step, detail, full) for step, (detail, full) in sorted(found.items())]


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
            found.setdefault(float(m.group(1)), ("%s in %s" % (name, path), full))
        elif re.fullmatch(r"\d+(?:\.\w+)*", name) or LLMC_CKPT_RE.match(name):
            m = LLMC_CKPT_RE.match(name)
            step = float(m.group(1)) if m else float(name.split(".")[0])
            found.setdefault(step, ("%s in %s" % (name, path), full))
        else:
            step, key = _own_step(full)
            if step is not None:
                found.setdefault(step, ("%s of %s" % (key, full), full))
    return [(step, detail, entry) for step, (detail, entry) in sorted(found.items())]


def _own_step(full):
    """``(step, key)`` read cheaply from a checkpoint entry itself, else ``(None, None)``."""
    name = os.path.basename(full)
    try:
        if os.path.isdir(full):
            full = os.path.join(full, "trainer_state.json")
            if not os.path.isfile(full) or os.path.getsize(full) > MAX_DOC:
                return None, None
            with open_regular(full) as f:
                doc = load_json(f.read().decode("utf-8", "replace"), full)
            step = doc.get("global_step") if isinstance(doc, dict) else None
            return _step_or_none(step), "global_step"
        if name in ("latest", "latest_checkpointed_iteration.txt"):
            with open_regular(full) as f:
                text = f.read(256).decode("utf-8", "replace")
            m = re.search(r"(\d+)\s*$", text.strip())
            return (float(m.group(1)), name) if m else (None, None)
        if name.endswith(".safetensors"):
            return _safetensors_step(full)
        with open_regular(full) as f:
            if zipfile.is_zipfile(f):
                return _torch_zip_step(f)
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
    with open_regular(full) as f:
        size = struct.unpack("<Q", f.read(8))[0]
        if size > MAX_PICKLE:
            return None, None
        head = f.read(size).decode("utf-8", "replace")
        meta = load_json(head, "the safetensors header of " + full).get("__metadata__") or {}
    for key in CKPT_STEP_KEYS:
        step = _step_or_none(meta.get(key))
        if step is not None:
            return step, key
    return None, None


def _torch_zip_step(full):
    """The step key of a torch zip file's top-level dict, from its pickle's opcodes: a key
    string followed at once by an int. The largest ``step`` is taken (optimizer states
    hold per-parameter step counts that never exceed the global one)."""
    with zipfile.ZipFile(full) as z:  # a path or an open file
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


def find_events(
    ing, steps, cols, extra, warnings, ckpt_steps=(), ckpt_dir=None, steps_per_epoch=None
):
    """Every event as ``(kind, step, source, detail)``, sorted by step, one per (kind, step):
    the log's own, resumes, saves (also the ``ckpt_steps`` given and those in ``ckpt_dir``),
    epoch starts (every ``steps_per_epoch``), lr jumps, pauses."""
    events = list(ing.events)
    n = len(steps)
    events += _resumes(steps, n)
    events += _saves(ckpt_steps, ckpt_dir, extra, steps, n, warnings)
    if n:
        events += _epochs(steps_per_epoch, cols, steps, n)
    events += _lr_events(cols, steps)
    events += _pauses(cols, steps, n)
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


def _resumes(steps, n):
    """Resumes: the step counter goes back (or repeats)."""
    events = []
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
                    "step counter %s from %s to %s" % (word, fmt_number(prev), fmt_number(s)),
                )
            )
    return events


def _saves(ckpt_steps, ckpt_dir, extra, steps, n, warnings):
    """Checkpoint saves given (``--ckpt-steps``), found in ``--checkpoints``, or from HF
    ``save_steps``."""
    events = []
    for s in ckpt_steps:
        events.append(("checkpoint", float(s), "ckpt-steps", "given with --ckpt-steps"))
    if ckpt_dir:
        try:
            for s, detail in checkpoint_saves(ckpt_dir):
                events.append(("checkpoint", s, "ckpt-dir", detail))
        except OSError as exc:
            warnings.append(
                "cannot list the checkpoint directory %s (--checkpoints/--ckpt-dir): %s"
                % (ckpt_dir, exc.strerror or exc)
            )
    if extra.get("save_steps") and n:
        every = float(extra["save_steps"])
        if every > 0:
            k = 1
            while k * every <= steps[-1] + 0.5 and k <= MAX_EVENTS:
                events.append(
                    ("checkpoint", k * every, "trainer_state", "save_steps %s" % fmt_number(every))
                )
                k += 1
    return events


def _epochs(steps_per_epoch, cols, steps, n):
    """Epoch starts: every ``--steps-per-epoch`` steps, else where the ``epoch`` field grows."""
    events = []
    lo, hi = min(steps), max(steps)
    if steps_per_epoch:
        spe = float(steps_per_epoch)
        k = 1
        while k * spe <= hi and k <= MAX_EVENTS:
            s = float(round(k * spe))
            if s >= lo:
                events.append(
                    (
                        "epoch",
                        s,
                        "steps-per-epoch",
                        "epoch %d starts (%s steps each)" % (k, fmt_number(spe)),
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
    return events


MIN_SCHEDULE = 5  # lr values needed before "no warmup" or a jump can be said


def _lr_events(cols, steps):
    """The lr already at its peak at step 0 (no warmup); later jumps back up."""
    events = []
    lr = cols.get("lr")
    if lr is not None and len(lr):
        if math.isfinite(sum(lr)):
            rows = None
            lv = lr
        else:
            rows = [i for i, v in enumerate(lr) if v - v == 0]
            lv = array("d", (lr[i] for i in rows))
        # one or two values say nothing about a schedule (a run that stopped at its start)
        if len(lv) >= MIN_SCHEDULE:
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
                        % (fmt_number(steps[r0]), fmt_number(lv[0]), fmt_number(peak)),
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
                        "lr jumped from %s to %s" % (fmt_number(lv[i - 1]), fmt_number(lv[i])),
                    )
                )
                shown += 1
                if shown >= MAX_EVENTS:
                    break
    return events


def _pauses(cols, steps, n):
    """Pauses: wall-clock gaps far beyond the usual step time."""
    events = []
    t = cols.get("time")
    if t is not None and n > 10:
        dts = array("d", map(sub, islice(t, 1, None), t))
        fin = sorted(d for d in dts[:: max(1, len(dts) // 10000)] if d == d and d > 0)
        if fin:
            typ = quantile(fin, 0.5)
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
    return events


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
