"""train-log: find loss spikes and accuracy cliffs in a training log, what they sit at, and
whether the batches themselves are the cause.

The log stays where it is: ``remote/trainlog.py`` reads it there (stdlib only) and sends back
findings, a decimated series and a histogram. This package turns those records into frozen
dataclasses (:class:`TrainLogReport`), renders them as text (:func:`render_report`), and
draws the optional picture (matplotlib, the ``plot`` extra)::

    report = analyze_train_log(target, "/workspace/run/log.jsonl", ckpt_dir="/workspace/ckpt")
    report.exit_code            # 0 OK, 1 findings, 2 could not run
    report.composition.verdict  # "loss is trimodal; modes match length buckets; ..."

What it looks for (the story behind it: spikes that sat at checkpoint saves, one that sat at
no event, and a trimodal loss from homogeneous length-bucketed batches):

- spikes (loss, grad norm) and cliffs (accuracy) by a named preset: ``trend`` (the
  default: a line that follows the series, a level shift is no spike) or a published rule
  (``olmo2``, ``olmo-core``, ``megatron``, ``zclip``); onset, peak, baseline, score, the
  steps it took to get back, and which rule flagged it;
- events: checkpoint saves (log lines, ``ckpt_dir``, ``ckpt_steps``, HF ``save_steps``),
  resumes (the step counter goes back), epoch starts, a missing warmup, lr jumps, pauses;
  for each spike the nearest event, and per kind whether spikes sit at events more often
  than chance (binomial test on the share of steps near an event);
- batch composition: the modes of the loss over a stable window, periodicity, and where
  the log has a per-step ``bucket`` / ``seq_len`` / ``tokens``: loss per bucket, share of
  batches, runs of same-bucket steps, and a verdict in words.

One module a concern: :mod:`.model` (the records as values), :mod:`.api` (the options, the
run there, records -> report), :mod:`.report` (the report, its text and diagnosis),
:mod:`.plot` (matplotlib), :mod:`.follow` (``--follow``), :mod:`.words` (numbers in words).
"""

from __future__ import annotations

from remotekit.diagnostics.trainlog.api import analyze_train_log
from remotekit.diagnostics.trainlog.api import build_report as build_report
from remotekit.diagnostics.trainlog.follow import (
    FollowStatus,
    Incident,
    LogFollow,
    follow_train_log,
)
from remotekit.diagnostics.trainlog.model import DEFAULT_PRESET as DEFAULT_PRESET
from remotekit.diagnostics.trainlog.model import (
    PRESETS,
    BucketStat,
    Composition,
    Correlation,
    Distribution,
    Event,
    Histogram,
    LogSource,
    MetricStats,
    Mode,
    Onset,
    Periodicity,
    Preset,
    Series,
    Spike,
)
from remotekit.diagnostics.trainlog.report import TrainLogReport, plot_report, render_report

__all__ = [
    "PRESETS",
    "BucketStat",
    "Composition",
    "Correlation",
    "Distribution",
    "Event",
    "FollowStatus",
    "Histogram",
    "Incident",
    "LogFollow",
    "LogSource",
    "MetricStats",
    "Mode",
    "Onset",
    "Periodicity",
    "Preset",
    "Series",
    "Spike",
    "TrainLogReport",
    "analyze_train_log",
    "follow_train_log",
    "plot_report",
    "render_report",
]
