"""MLflow file stores (``mlflow.set_tracking_uri("file:...")``, the ``mlruns/`` folder) for
``trainlog.py``: each run's ``metrics/<name>`` files, read without mlflow.

The layout, from mlflow/store/tracking/file_store.py (``FileStore``): ``mlruns/<experiment
id>/meta.yaml``, ``mlruns/<experiment id>/<run id>/meta.yaml`` (``start_time``,
``lifecycle_stage``), ``.../<run id>/metrics/<key>`` with one ``<timestamp ms> <value>
<step>`` line per logged value (``_log_run_metric``; ``_get_metric_from_line`` also reads
2 fields, no step, and 5, with a dataset name and digest); a key with ``/`` is a path of
folders (``metrics/train/loss``). ``params/`` and ``tags/`` are not series; deleted runs
(``lifecycle_stage: deleted``) and ``.trash`` are not read.
"""

from __future__ import annotations

import os

from ...infile import open_regular
from ..source import Lines
from . import Reader

MAX_RUNS = 2000  # runs looked at in one store
MAX_METRICS = 5000  # metric files read in one run


class MLflow(Reader):
    FORMAT = "mlflow"
    WHAT = "MLflow run"
    ORDER = 30
    DIRECTORY = True  # a run is a directory of metric files
    NAMES = ()  # a store's runs are found by stored_runs

    def sniff(self, head):
        """Sure of a directory that is an MLflow run (``metrics/`` and ``meta.yaml``)."""
        return 1.0 if head.is_dir and is_run(head.path) else 0.0

    def stored_runs(self, path):
        """The live runs of the store, experiment or run ``path``, or of the ``mlruns/``
        beside a project's code in it."""
        runs = runs_of(path) or runs_of(os.path.join(path, "mlruns"))
        return [
            (
                r,
                lengths(r),
                _float(m.get("start_time")),
                "MLflow run %s" % (m.get("run_name") or os.path.basename(r)),
            )
            for r, m in runs
        ]

    def read(self, src, out):
        """The metrics of one run: a series per key, on the steps MLflow stored. A metric file
        that cannot be read (not a regular file, unreadable) is skipped and said."""
        for key, full in metric_files(src.path).items():
            try:
                unstepped = _read_metric(out, key, full)
            except OSError as exc:
                out.notes.append("metric %r not read: %s" % (key, exc.strerror or exc))
                continue
            if unstepped:
                out.notes.append(
                    "metric %r has no step field (an MLflow store older than 1.0): its %d values "
                    "are numbered in the order logged" % (key, unstepped)
                )


def _meta(path):
    """The ``key: value`` lines of a ``meta.yaml`` (flat; values as strings)."""
    out = {}
    try:
        with open_regular(os.path.join(path, "meta.yaml"), "r", errors="replace") as f:
            for line in f.read(1 << 16).splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith((" ", "-")):
                    out[key.strip()] = value.strip().strip("'\"")
    except OSError:
        pass
    return out


def is_run(path):
    return os.path.isdir(os.path.join(path, "metrics")) and os.path.isfile(
        os.path.join(path, "meta.yaml")
    )


def runs_of(path):
    """The live runs of ``path`` if it is an MLflow store, an experiment of one, or a run
    (else ``[]``), each as ``(run dir, meta)``."""
    if is_run(path):
        return [(path, _meta(path))]
    out = []
    for exp in _subdirs(path):
        if is_run(exp):
            out.append(exp)  # path is an experiment
        elif os.path.isfile(os.path.join(exp, "meta.yaml")):
            out.extend(r for r in _subdirs(exp) if is_run(r))
        if len(out) >= MAX_RUNS:
            break
    runs = [(r, _meta(r)) for r in out[:MAX_RUNS]]
    return [(r, m) for r, m in runs if m.get("lifecycle_stage") != "deleted"]


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def _subdirs(path):
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [os.path.join(path, n) for n in names if n != ".trash" and not n.startswith(".")]


def metric_files(run):
    """``{key: file}`` of a run's metrics (nested keys as ``a/b``)."""
    top = os.path.join(run, "metrics")
    out = {}
    for root, dirs, files in os.walk(top):
        dirs.sort()
        if len(out) >= MAX_METRICS:
            break
        for name in sorted(files)[: MAX_METRICS - len(out)]:
            full = os.path.join(root, name)
            out[os.path.relpath(full, top).replace(os.sep, "/")] = full
    return out


def lengths(run):
    """``{key: values logged}`` of a run, by counting lines (for choosing a run)."""
    out = {}
    for key, full in metric_files(run).items():
        try:
            with open_regular(full) as f:
                out[key] = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            out[key] = 0
    return out


def _read_metric(out, key, full):
    """One ``metrics/<key>`` file into ``out``; returns how many lines had no step field.
    Read a block at a time, each line bounded (source.Lines)."""
    unstepped = 0
    with open_regular(full) as f:
        src = Lines(f)
        for lines in src:
            out.lines += len(lines)
            for line in lines:
                parts = line.split()
                if not parts:
                    continue
                try:
                    value = float(parts[1])
                    if len(parts) >= 3:
                        step = float(int(parts[2]))
                    elif len(parts) == 2:
                        step = float(unstepped)
                        unstepped += 1
                    else:
                        raise ValueError(line)
                except (ValueError, IndexError):
                    out.bad += 1
                    continue
                out.add(key, step, value)
    if src.long:
        out.notes.append("metric %r: %d over-long lines skipped (not read)" % (key, src.long))
    return unstepped
