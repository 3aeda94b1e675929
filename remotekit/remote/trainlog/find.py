"""Which log of a path ``trainlog.py`` reads: the log of a run directory (:func:`find_log`):
its candidates by the file names the readers claim, each measured by its reader, and of
several the one :func:`.rank.choose` prefers, with why and what else was there; and the
run's checkpoint directory (:func:`ckpt_dir_of`).
"""

from __future__ import annotations

import os
import re
from itertools import islice

from . import readers
from .base import LogError
from .choose import NoLoss
from .rank import Candidate, choose
from .read import read_source
from .readers import claimants, mlflow, text, wandb
from .source import Source

CKPT_NAME_RE = re.compile(r"(?:checkpoint|ckpt|global_step|step|iter)[-_]?(\d+)(?:\.\w+)*$", re.I)


MEASURE_BYTES = 1 << 20  # a larger candidate is measured on its first MiB, scaled to its size
MAX_MEASURED = 32  # candidates measured at most (the preferred kinds first, newest first)


def find_log(run_dir, max_entries=20000):
    """``(file, why, notes)``: the training log of a run directory. Its candidates are the
    files the readers claim by name (``NAMES``; of a log saved into every checkpoint, the
    last checkpoint's; of a W&B run without its .wandb file, the console output); of
    several, each is read (a large one its first MiB) and :func:`choose` takes the longest
    history of a train-side loss, then the preferred kind, then the newest. An MLflow store
    (or one of its experiments) gives the run it prefers. ``notes``: caveats of the choice
    (warnings)."""
    run = _mlflow_run(run_dir)
    if run is not None:
        return run + ([],)
    found, older = _candidates(run_dir, max_entries)
    found, notes = _wandb_runs(run_dir, found)
    if not found:
        raise LogError(
            "no training log under it (looked for %s)"
            % ", ".join(sorted(set(what for _, what, _, _ in readers.names())))
        )
    if len(found) == 1:
        _, _, rel, full, what = found[0]
        best, why = 0, "%s (%s): the only candidate" % (rel, what)
    else:
        cands = []
        for pref, age, rel, full, what in found[:MAX_MEASURED]:
            lengths, exact = measure(full)
            cands.append(Candidate(rel, lengths, -age, pref, exact, what))
        best, why = choose(cands)
        why = "%s: %s" % (cands[best], why)
        if len(found) > MAX_MEASURED:
            why += "; %d more candidates not looked at" % (len(found) - MAX_MEASURED)
    if older:
        why += "; %d older checkpoint copies (%s) not read" % (
            len(older),
            ", ".join(older[:3]) + (", ..." if len(older) > 3 else ""),
        )
    return found[best][3], why, notes.get(found[best][3], [])


def _candidates(run_dir, max_entries):
    """``([(preference, -mtime, rel, full, what)], [older copies])``: the files under
    ``run_dir`` (4 levels at most) the readers claim by name, sorted, the preferred kinds
    and the newest first; a name with a step (``checkpoint-N/trainer_state.json``) is a
    copy of the run's log saved at step N: the highest N stands for them all."""
    found, copies = [], {}
    seen = 0
    patterns = sorted(readers.names(), key=lambda n: n[2])
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
            for pat, what, pref, _ in patterns:
                m = re.search(pat, rel)
                if m and m.groups():
                    copies.setdefault(pat, []).append((float(m.group(1)), rel, full, what, pref))
                elif m:
                    found.append((pref, -_mtime(full), rel, full, what))
                if m:
                    break
    older = []
    for items in copies.values():
        items.sort(reverse=True)
        _, rel, full, what, pref = items[0]
        found.append((pref, -_mtime(full), rel, full, what))
        older += [c[1] for c in items[1:]]
    found.sort()
    return found, sorted(older)


def measure(path):
    """``({series: values}, exact)`` of a candidate log: read by the reader that claims it,
    whole up to :data:`MEASURE_BYTES`, else its first MiB with the counts scaled to its size
    (``exact`` False); a document (a JSON file) is read whole. A log that cannot be read
    measures ``{}``; one without a loss gives its series' names with no values."""
    try:
        size = os.path.getsize(path)
        src = Source(path)
        limit = None
        if size > MEASURE_BYTES and not getattr(claimants(src)[0], "DOCUMENT", False):
            limit = MEASURE_BYTES
        ing = read_source(Source(path, limit=limit), "auto", None)[0]
    except NoLoss as exc:
        return {k: 0 for k in exc.numeric[:8]}, True
    except (LogError, OSError, ValueError):
        return {}, True
    ing.flush()
    scale = float(size) / limit if limit else 1.0
    out = {}
    for j, (_, key) in enumerate(ing.metrics):
        col = ing.cols[ing.m0 + j]
        out[key] = int(sum(1 for v in col if v == v) * scale)  # NaN: missing (or logged)
    return out, limit is None


WANDB_RUN_DIR_RE = re.compile(r"(?:^|/)(?:offline-)?run-\d{8}_\d{6}-\w+$")


OUTPUT_LOG = "files/output.log"  # the console output W&B captures in a run directory


def _wandb_runs(run_dir, found):
    """``(found, notes)``: the candidates, with W&B run directories seen to. One without its
    ``run-*.wandb`` file (the only history W&B keeps there) has side files only: its own
    debug logs are no candidates, and its ``files/output.log`` (the console output W&B
    captured: what the script printed) is, with a note (``{path: [note]}``) that says the
    history is missing. When nothing else is left to read, a LogError names what there is."""
    top = run_dir.rstrip("/")
    notes, bare = {}, []
    for root, dirs, _files in os.walk(top):
        if root[len(top) :].count("/") > 2:
            dirs[:] = []
        if not WANDB_RUN_DIR_RE.search(root):
            continue
        dirs[:] = []
        inside = root + "/"
        if any(f[4] == wandb.WHAT and f[3].startswith(inside) for f in found):
            continue
        found = [f for f in found if not f[3].startswith(inside)]
        held = _without_history(os.path.relpath(root, top), root)
        out = os.path.join(root, OUTPUT_LOG)
        if not os.path.isfile(out):
            bare.append(held)
            continue
        found.append((text.NAMES[0][2], -_mtime(out), out[len(top) + 1 :], out, "W&B console"))
        notes[out] = [
            held + ": read %s, the console output W&B captured (what the script printed, "
            "not what it logged), instead; copy the run's .wandb file for its history" % OUTPUT_LOG
        ]
    if bare and not found:
        raise LogError(
            bare[0] + "; copy the run's .wandb file too, or name a log of the trainer's own"
        )
    found.sort()
    return found, notes


def _without_history(rel, root):
    """What a W&B run directory without its .wandb file holds, in words."""
    names = (os.path.relpath(os.path.join(r, n), root) for r, _, ns in os.walk(root) for n in ns)
    there = sorted(islice(names, 1000))  # a media-heavy run folder is not listed whole
    return (
        "a W&B run directory without its run-*.wandb file (the run's history): %s holds only %s"
        % (rel, ", ".join(there[:8]) or "nothing")
        + (" and %d more" % (len(there) - 8) if len(there) > 8 else "")
    )


def _mlflow_run(path):
    """``(run dir, why)`` of an MLflow store, experiment or run, else None."""
    runs = mlflow.runs_of(path)
    base = len(path.rstrip("/")) + 1
    if not runs:  # a project folder with its mlruns/ beside the code
        runs = mlflow.runs_of(os.path.join(path, "mlruns"))
    if not runs:
        return None
    cands = [
        Candidate(
            r[base:] or ".",
            mlflow.lengths(r),
            _float(m.get("start_time")),
            what="MLflow run %s" % (m.get("run_name") or os.path.basename(r)),
        )
        for r, m in runs
    ]
    best, why = choose(cands)
    return runs[best][0], "%s: %s" % (cands[best], why)


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
