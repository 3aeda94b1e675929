"""train-log's records as values: what ``remote/trainlog.py`` sends back, one frozen
dataclass per record type, declared once in :mod:`remotekit.remote.trainlog.records` (the
far side's package, which both sides import) and named here; the report that holds them:
:mod:`.report`; and the presets."""

from __future__ import annotations

from remotekit.remote.trainlog import base as wire
from remotekit.remote.trainlog.base import DEFAULT_PRESET
from remotekit.remote.trainlog.records import (
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

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "BucketStat",
    "Composition",
    "Correlation",
    "Distribution",
    "Event",
    "Histogram",
    "LogSource",
    "MetricStats",
    "Mode",
    "Onset",
    "Periodicity",
    "Preset",
    "Series",
    "Spike",
]

PRESETS = tuple(wire.PRESETS)  # the names, in the order the script there defines them
