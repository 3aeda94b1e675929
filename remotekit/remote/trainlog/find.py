"""Which log of a path ``trainlog.py`` reads: the log of a run directory (:func:`find_log`):
its candidates by the file names the readers claim and those common trainers give their
logs (:data:`CONVENTIONAL`), each measured by the reader that claims its content, and of
several the one :func:`.rank.choose` prefers, with why and what else was there; and the
run's checkpoint directory (:func:`ckpt_dir_of`).
"""

from __future__ import annotations

import os
import re

from .base import LogError
from .choose import NoLoss
from .rank import Candidate, choose
from .read import read_source
from .readers import READERS, claimants, names
from .source import Source, mtime

CKPT_NAME_RE = re.compile(r"(?:checkpoint|ckpt|global_step|step|iter)[-_]?(\d+)(?:\.\w+)*$", re.I)

# The names common trainers give their logs, whatever reader reads them (by their content):
# ``(regex on the path below the run directory, what, preference)``, as a reader's NAMES. A
# name here is a candidate and says whose it is; no reader is chosen by it.
CONVENTIONAL = (
    # detectron2's JSONWriter: one JSON object an iteration ("iteration", "total_loss", ...)
    (r"(?:^|/)metrics\.json$", "detectron2 metrics.json", 25),
    # MMEngine's LocalVisBackend, MMCV's TextLoggerHook (``<timestamp>.log.json``)
    (r"(?:^|/)vis_data/scalars\.json$", "MMEngine vis_data/scalars.json", 20),
    (r"\.log\.json$", "MMCV / MMDetection *.log.json", 25),
    # stable-baselines3's and rllab's CSV output, Spinning Up's progress.txt (tab-separated)
    (r"(?:^|/)progress\.csv$", "stable-baselines3 / rllab progress.csv", 35),
    (r"(?:^|/)progress\.txt$", "Spinning Up progress.txt", 35),
    (r"(?:^|/)results\.csv$", "ultralytics results.csv", 40),
    (r"(?:^|/)summary\.csv$", "timm summary.csv", 40),
    # Keras's CSVLogger, by the name its documentation's example gives (a CSV, read so)
    (r"(?:^|/)training\.log$", "Keras training.log (its csv logger's, or a console)", 80),
    # DETR and its kin: one JSON object an epoch in log.txt
    (r"(?:^|/)log\.txt$", "log.txt (DETR and kin, or a console)", 85),
    # stable-baselines3's Monitor: episode rewards and lengths, no loss: the last resort
    (r"(?:^|/)(?:\d+\.)?monitor\.csv$", "stable-baselines3 Monitor monitor.csv", 95),
)


def _patterns():
    """``[(regex, what, preference)]`` of every log name, the readers' and the trainers'
    conventional ones, the preferred first (a reader's name before a conventional one of
    the same preference)."""
    found = [(rx, what, pref) for rx, what, pref, _ in names()]
    return sorted(found + list(CONVENTIONAL), key=lambda n: n[2])


MEASURE_BYTES = 1 << 20  # a larger candidate is measured on its first MiB, scaled to its size
MAX_MEASURED = 32  # candidates measured at most (the preferred kinds first, newest first)


def find_log(run_dir, max_entries=20000):
    """``(file, why, notes)``: the training log of a run directory. Its candidates are the
    files the readers claim by name (``NAMES``; of a log saved into every checkpoint, the
    last checkpoint's), as each reader's ``sift`` sees to them (a W&B run without its
    .wandb file: its console output); of several, each is read (a large one its first MiB)
    and :func:`choose` takes the longest history of a train-side loss, then the preferred
    kind, then the newest. A store of runs (a reader's ``stored_runs``: an MLflow store or
    experiment) gives the run it prefers. ``notes``: caveats of the choice (warnings)."""
    run = _stored_run(run_dir)
    if run is not None:
        return run + ([],)
    found, older = _candidates(run_dir, max_entries)
    notes = {}
    for reader in READERS:
        found = reader.sift(run_dir, found, notes)
    if not found:
        raise LogError(
            "no training log under it (looked for %s)"
            % ", ".join(sorted(set(what for _, what, _ in _patterns())))
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
    patterns = _patterns()
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
            for pat, what, pref in patterns:
                m = re.search(pat, rel)
                if m and m.groups():
                    copies.setdefault(pat, []).append((float(m.group(1)), rel, full, what, pref))
                elif m:
                    found.append((pref, -mtime(full), rel, full, what))
                if m:
                    break
    older = []
    for items in copies.values():
        items.sort(reverse=True)
        _, rel, full, what, pref = items[0]
        found.append((pref, -mtime(full), rel, full, what))
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
        if size > MEASURE_BYTES and not claimants(src)[0].DOCUMENT:
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


def _stored_run(path):
    """``(run dir, why)`` of the run a reader's store at ``path`` prefers, else None."""
    for reader in READERS:
        runs = reader.stored_runs(path)
        if runs:
            break
    else:
        return None
    base = len(path.rstrip("/")) + 1
    cands = [
        Candidate(r[base:] or ".", lengths, started, what=what)
        for r, lengths, started, what in runs
    ]
    best, why = choose(cands)
    return runs[best][0], "%s: %s" % (cands[best], why)


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
