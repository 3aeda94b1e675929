"""Which log of a path ``trainlog.py`` reads: the log of a run directory (:func:`find_log`),
by the file names the readers claim and, among several of a kind, :func:`.rank.choose`;
and the run's checkpoint directory (:func:`ckpt_dir_of`).
"""

from __future__ import annotations

import os
import re
from itertools import islice

from . import readers
from .base import LogError
from .rank import choose
from .readers import mlflow, tensorboard

CKPT_NAME_RE = re.compile(r"(?:checkpoint|ckpt|global_step|step|iter)[-_]?(\d+)(?:\.\w+)*$", re.I)


def find_log(run_dir, max_entries=20000):
    """``(file, why)``: the training log of a run directory, by the file names the readers
    claim (``NAMES``: the newest file of the best kind; for checkpoints, the highest step).
    An MLflow store (or one of its experiments) gives the run :func:`choose` prefers."""
    run = _mlflow_run(run_dir)
    if run is not None:
        return run
    found = []
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
            for pat, what, rank, _ in patterns:
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
    cands = [(rel, tensorboard.lengths(full), -key) for _, key, rel, full, _ in files]
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
