"""train-log's records as values: what ``remote/trainlog.py`` sends back, one frozen
dataclass per record type (the report that holds them: :mod:`.report`), and the presets."""

from __future__ import annotations

from dataclasses import dataclass, field

from remotekit.remote.trainlog import base as wire
from remotekit.remote.trainlog.base import DEFAULT_PRESET

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
    "Periodicity",
    "Preset",
    "Series",
    "Spike",
]

PRESETS = tuple(wire.PRESETS)  # the names, in the order the script there defines them


@dataclass(frozen=True)
class LogSource:
    """What was read: format, counts, the key that gave the step, label -> key of columns."""

    path: str
    format: str
    lines: int
    rows: int
    skipped: int
    bad_lines: int
    step_key: str | None
    columns: dict[str, str]
    metrics: tuple[str, ...]
    first_step: float
    last_step: float
    stride: float
    tolerance: float
    chosen_from: str | None = None  # the file picked when ``--path`` was a run directory, and why
    dialect: str | None = None  # whose log this is (Lightning CSVLogger, LLaMA-Factory, ...)
    #: Why each metric's column is the one, in words ("loss <- 'train/loss': the train-side
    #: loss by name; also seen: 'val/loss' ...; passed over: 'loss_scale' (an AMP loss scale)")
    why: dict[str, str] = field(default_factory=dict)

    def describe(self) -> list[str]:
        """What was read, in words: the format, the step key, each metric's column and why."""
        fmt = self.format + (f" ({self.dialect})" if self.dialect else "")
        step = f"step key {self.step_key!r}" if self.step_key else "no step key (row numbers)"
        cols = ", ".join(f"{label} <- {key!r}" for label, key in self.columns.items())
        out = [f"format {fmt}, {step}; columns: {cols or 'none'}"]
        out += [self.why[label] for label in self.metrics if label in self.why]
        if self.chosen_from:
            out.append(f"log chosen in the run directory: {self.chosen_from}")
        return out


@dataclass(frozen=True)
class Preset:
    """The spike rule used; ``window`` may be shorter than ``preset_window`` for a short log."""

    name: str
    window: int
    preset_window: int
    sigma: float | None
    ratio: float | None
    cliff_sigma: float
    cliff_drop: float
    rule: str


@dataclass(frozen=True)
class MetricStats:
    """One metric: its direction (``up``: spikes, ``down``: cliffs, ``none``), how many
    values were flagged and their share (OLMo 2's spike score), non-finite values."""

    label: str
    key: str
    direction: str
    n: int
    flagged: int
    spike_share: float
    nonfinite: int
    median: float | None


@dataclass(frozen=True)
class Event:
    """Something that happened at ``step``: checkpoint, resume, epoch, warmup, lr-jump, pause."""

    kind: str
    step: float
    source: str
    detail: str


@dataclass(frozen=True)
class Spike:
    """One incident of one metric: its worst ``value`` at its own ``step`` (= ``peak_step``;
    ``onset_step`` is where it began) against ``baseline``; an incident ends when the metric
    is back at its baseline, so a later spike is another incident. ``score`` is sigmas (or x
    running max for megatron); ``recovery_steps`` is None when the metric was not back by the
    end. ``event`` is the nearest event (``distance``
    = step - event step); ``bucket``/``run_position``: the batch's bucket and how many
    same-bucket steps in a row led up to it; ``rule``: which rule flagged it (the preset,
    with the clause when not its main one, e.g. "trend (first values: 2x the level)")."""

    metric: str
    kind: str
    step: float
    peak_step: float
    value: float
    baseline: float | None
    scale: float | None
    score: float | None
    recovery_steps: float | None
    flagged: int
    event: str | None
    event_step: float | None
    distance: float | None
    bucket: str | None
    run_position: int | None
    at_event: bool = False
    onset_step: float | None = None
    rule: str | None = None


@dataclass(frozen=True)
class Correlation:
    """Spike onsets within ``tolerance`` steps of events of ``kind``, against chance."""

    kind: str
    events: int
    spikes: int
    at_events: int
    tolerance: float
    coverage: float
    expected: float
    p_value: float
    beyond_chance: bool


@dataclass(frozen=True)
class Mode:
    """A mode of the loss: where (``center``, in loss units), how much of the window, and
    which bucket dominates it (``purity``: that bucket's share of the mode)."""

    center: float
    weight: float
    lo: float
    hi: float
    bucket: str | None
    purity: float | None


@dataclass(frozen=True)
class Distribution:
    """Shape of ``metric`` over a stable window (trend removed): its modes and Sarle's
    bimodality coefficient (> 5/9 hints at several modes)."""

    metric: str
    scale: str
    first_step: float
    last_step: float
    n: int
    shape: str
    modes: tuple[Mode, ...]
    bimodality: float | None
    trend_slope: float
    #: ``{"distinct": N, "quantum": q}`` when the logged values are too coarse (rounded) to
    #: have a shape; the shape is then "quantised" and no composition finding comes from it.
    quantised: dict[str, float] | None = None


@dataclass(frozen=True)
class Periodicity:
    """The strongest autocorrelation peak of the loss at a lag >= 2. ``lag`` and ``max_lag``
    are in steps (``lag_rows`` log rows of ``stride`` steps each); a ``quantised`` loss is
    never called periodic."""

    lag: float | None
    acf: float | None
    max_lag: float
    periodic: bool
    lag_rows: int | None = None
    stride: float = 1.0
    quantised: bool = False


@dataclass(frozen=True)
class BucketStat:
    bucket: str
    batches: int
    share: float
    loss_median: float | None
    max_run: int


@dataclass(frozen=True)
class Composition:
    """Batch composition: per-bucket stats (``key`` is the field used, None without batch
    metadata), the share of loss variance the bucket explains, the longest same-bucket run
    against what a random order (``random_max_run``) and an interleaved one would give;
    ``finding`` when batches are homogeneous and run long (or, without metadata, when the
    loss is multimodal or periodic)."""

    key: str | None
    buckets: tuple[BucketStat, ...]
    explained: float | None
    max_run: int | None
    max_run_bucket: str | None
    random_max_run: float | None
    interleaved_max_run: int | None
    homogeneous: bool | None
    long_runs: bool | None
    modes_match: bool
    finding: bool
    verdict: str
    #: How the batch key was derived from a running total (TRL's ``num_tokens``: per-step
    #: differences, never the totals themselves), else None.
    derived: str | None = None


@dataclass(frozen=True)
class Histogram:
    """Counts of the loss per bin (``edges`` in loss units), per bucket where known."""

    metric: str
    scale: str
    key: str | None
    edges: tuple[float, ...]
    counts: dict[str, tuple[int, ...]]
    modes: tuple[float, ...]
    first_step: float
    last_step: float


@dataclass(frozen=True)
class Series:
    """A decimated metric: min and max of each bin, every spike kept."""

    metric: str
    steps: tuple[float, ...]
    values: tuple[float, ...]
