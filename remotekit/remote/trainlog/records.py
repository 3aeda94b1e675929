"""train-log's records, declared once: what ``trainlog.py`` writes there and what the local
side (:mod:`remotekit.diagnostics.trainlog`) reads back, one frozen dataclass per record type
(:class:`~remotekit.remote.records.Record`: ``from_dict`` / ``to_dict``; ``TYPE`` is the
record's ``"type"``). Each field's kind says how its wire value is read (:mod:`..records`).

Records that are no class here: ``warning`` / ``error`` / ``done`` (the protocol's) and
``summary`` (rows, spikes, events {kind: count}, findings).

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import FLOAT, FLOATS, INT, STRS, Kind, Record, items, records, whole, wire

__all__ = [
    "RECORDS",
    "BucketStat",
    "Composition",
    "Correlation",
    "Distribution",
    "Event",
    "FollowState",
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


@dataclass(frozen=True)
class LogSource(Record):
    """What was read: format, counts, the key that gave the step, label -> key of columns."""

    TYPE = "source"

    path: str
    format: str
    lines: int = wire(INT)
    rows: int = wire(INT)
    skipped: int = wire(INT)
    bad_lines: int = wire(INT)
    step_key: str | None = wire()
    columns: dict[str, str] = wire()
    metrics: tuple[str, ...] = wire(STRS)
    first_step: float = wire(FLOAT)
    last_step: float = wire(FLOAT)
    stride: float = wire(FLOAT)
    tolerance: float = wire(FLOAT)
    chosen_from: str | None = None  # the file picked when ``--log`` was a run directory, and why
    dialect: str | None = None  # whose log this is (Lightning CSVLogger, LLaMA-Factory, ...)
    #: Why each metric's column is the one, in words ("loss <- 'train/loss': the train-side
    #: loss by name; also seen: 'val/loss' ...; passed over: 'loss_scale' (an AMP loss scale)")
    why: dict[str, str] = wire(factory=dict)

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
class Preset(Record):
    """The spike rule used; ``window`` may be shorter than ``preset_window`` for a short log."""

    TYPE = "preset"

    name: str
    window: int = wire(INT)
    preset_window: int = wire(INT)
    sigma: float | None = wire(FLOAT)
    ratio: float | None = wire(FLOAT)
    cliff_sigma: float = wire(FLOAT)
    cliff_drop: float = wire(FLOAT)
    rule: str = wire()


@dataclass(frozen=True)
class MetricStats(Record):
    """One metric: its direction (``up``: spikes, ``down``: cliffs, ``none``), how many
    values were flagged and their share (OLMo 2's spike score), non-finite values."""

    TYPE = "metric"

    label: str
    key: str
    direction: str
    n: int = wire(INT)
    flagged: int = wire(INT)
    spike_share: float = wire(FLOAT)
    nonfinite: int = wire(INT)
    median: float | None = wire(FLOAT)


@dataclass(frozen=True)
class Onset(Record):
    """How the loss started (:mod:`.onset`): ``kind`` "nonfinite" (NaN or inf from its
    first logged value), "above-chance" (above ``chance``, ln V or ln C of the count the
    log states or ``--vocab-size`` gives, from the start and staying there), "flat" (no
    chance level: no fall beyond its own scatter from its first value to its last; for a
    score analysed in a loss's place, no rise beyond it) or
    "healthy"; ``unhealthy`` for the first three, over ``values`` values from ``first_step`` to ``last_step``, and
    ``recovered_step`` where it came back (None: never). ``chance_from`` says where the
    count was read; ``verdict`` says it all in words."""

    TYPE = "onset"

    metric: str
    key: str
    kind: str
    unhealthy: bool = wire()
    first_step: float = wire(FLOAT)
    last_step: float = wire(FLOAT)
    values: int = wire(INT)
    recovered_step: float | None = wire(FLOAT)
    start: float | None = wire(FLOAT)
    chance: float | None = wire(FLOAT)
    verdict: str = wire()
    chance_from: str | None = None


@dataclass(frozen=True)
class Event(Record):
    """Something that happened at ``step``: checkpoint, resume, epoch, warmup, lr-jump, pause."""

    TYPE = "event"

    kind: str
    step: float = wire(FLOAT)
    source: str = wire()
    detail: str = wire()


@dataclass(frozen=True)
class Spike(Record):
    """One incident of one metric: its worst ``value`` at its own ``step`` (= ``peak_step``;
    ``onset_step`` is where it began) against ``baseline``; an incident ends when the metric
    is back at its baseline, so a later spike is another incident. ``score`` is sigmas (or x
    running max for megatron); ``recovery_steps`` is None when the metric was not back by the
    end. ``event`` is the nearest event (``distance``
    = step - event step); ``bucket``/``run_position``: the batch's bucket and how many
    same-bucket steps in a row led up to it; ``rule``: which rule flagged it (the preset,
    with the clause when not its main one, e.g. "trend (first values: 2x the level)").
    ``at_event`` is worked out here: ``distance`` within the log's tolerance."""

    TYPE = "spike"

    metric: str
    kind: str
    step: float = wire(FLOAT)
    peak_step: float = wire(FLOAT)
    value: float = wire(FLOAT)
    baseline: float | None = wire(FLOAT)
    scale: float | None = wire(FLOAT)
    score: float | None = wire(FLOAT)
    recovery_steps: float | None = wire(FLOAT)
    flagged: int = wire(INT)
    event: str | None = wire()
    event_step: float | None = wire(FLOAT)
    distance: float | None = wire(FLOAT)
    bucket: str | None = wire()
    run_position: int | None = wire()
    at_event: bool = wire(default=False, sent=False)
    onset_step: float | None = wire(FLOAT, default=None)
    rule: str | None = None
    #: At a resume, with the checkpoints given: the step of the checkpoint resumed from, and
    #: what it lacked for the resume (or why it was not checked); ``resumes.py``.
    resume_from: float | None = wire(FLOAT, default=None)
    resume_check: str | None = None

    def resume_line(self) -> str | None:
        """ "loss spike at the resume from step 1000: <what the checkpoint lacked>"; None
        for an incident at no resume (or with no checkpoints given)."""
        if not self.resume_check:
            return None
        where = (
            f"the resume from step {self.resume_from:g}"
            if self.resume_from is not None
            else f"the resume at step {self.event_step:g}"
            if self.event_step is not None
            else "a resume"
        )
        return f"{self.metric} {self.kind} at {where}: {self.resume_check}"


@dataclass(frozen=True)
class Correlation(Record):
    """Spike onsets within ``tolerance`` steps of events of ``kind``, against chance."""

    TYPE = "correlation"

    kind: str
    events: int = wire(INT)
    spikes: int = wire(INT)
    at_events: int = wire(INT)
    tolerance: float = wire(FLOAT)
    coverage: float = wire(FLOAT)
    expected: float = wire(FLOAT)
    p_value: float = wire(FLOAT)
    beyond_chance: bool = wire()


@dataclass(frozen=True)
class Mode(Record):
    """A mode of the loss: where (``center``, in loss units), how much of the window, and
    which bucket dominates it (``purity``: that bucket's share of the mode)."""

    center: float = wire(FLOAT)
    weight: float = wire(FLOAT)
    lo: float = wire(FLOAT)
    hi: float = wire(FLOAT)
    bucket: str | None = wire()
    purity: float | None = wire(FLOAT)


@dataclass(frozen=True)
class Distribution(Record):
    """Shape of ``metric`` over a stable window (trend removed): its modes and Sarle's
    bimodality coefficient (> 5/9 hints at several modes)."""

    TYPE = "distribution"

    metric: str
    scale: str
    first_step: float = wire(FLOAT)
    last_step: float = wire(FLOAT)
    n: int = wire(INT)
    shape: str = wire()
    modes: tuple[Mode, ...] = wire(records(Mode))
    bimodality: float | None = wire(FLOAT)
    trend_slope: float = wire(FLOAT)
    #: ``{"distinct": N, "quantum": q}`` when the logged values are too coarse (rounded) to
    #: have a shape; the shape is then "quantised" and no composition finding comes from it.
    quantised: dict[str, float] | None = None


@dataclass(frozen=True)
class Periodicity(Record):
    """The strongest autocorrelation peak of the loss at a lag >= 2. ``lag`` and ``max_lag``
    are in steps (``lag_rows`` log rows of ``stride`` steps each); a ``quantised`` loss is
    never called periodic."""

    TYPE = "periodicity"

    lag: float | None = wire(FLOAT)
    acf: float | None = wire(FLOAT)
    max_lag: float = wire(FLOAT)
    periodic: bool = wire()
    lag_rows: int | None = None
    stride: float = wire(FLOAT, default=1.0)
    quantised: bool = False


@dataclass(frozen=True)
class BucketStat(Record):
    bucket: str
    batches: int = wire(INT)
    share: float = wire(FLOAT)
    loss_median: float | None = wire(FLOAT)
    max_run: int = wire(INT)


@dataclass(frozen=True)
class Composition(Record):
    """Batch composition: per-bucket stats (``key`` is the field used, None without batch
    metadata), the share of loss variance the bucket explains, the longest same-bucket run
    against what a random order (``random_max_run``) and an interleaved one would give;
    ``finding`` when batches are homogeneous and run long (or, without metadata, when the
    loss is multimodal or periodic)."""

    TYPE = "composition"

    key: str | None
    buckets: tuple[BucketStat, ...] = wire(records(BucketStat))
    explained: float | None = wire(FLOAT)
    max_run: int | None = wire()
    max_run_bucket: str | None = wire()
    random_max_run: float | None = wire(FLOAT)
    interleaved_max_run: int | None = wire()
    homogeneous: bool | None = wire()
    long_runs: bool | None = wire()
    modes_match: bool = wire()
    finding: bool = wire()
    verdict: str = wire()
    #: How the batch key was derived from a running total (TRL's ``num_tokens``: per-step
    #: differences, never the totals themselves), else None.
    derived: str | None = None


def _counts(value):
    pairs = value.items() if isinstance(value, dict) else ()
    return dict((str(k), tuple(whole(c) for c in items(v))) for k, v in pairs)


#: ``{bucket: counts}``: each bucket's counts as whole numbers (not a mapping: none).
COUNTS = Kind("counts", _counts, dict)


@dataclass(frozen=True)
class Histogram(Record):
    """Counts of the loss per bin (``edges`` in loss units), per bucket where known."""

    TYPE = "histogram"

    metric: str
    scale: str
    key: str | None
    edges: tuple[float, ...] = wire(FLOATS)
    counts: dict[str, tuple[int, ...]] = wire(COUNTS)
    modes: tuple[float, ...] = wire(FLOATS)
    first_step: float = wire(FLOAT)
    last_step: float = wire(FLOAT)


@dataclass(frozen=True)
class Series(Record):
    """A decimated metric: min and max of each bin, every spike kept."""

    TYPE = "series"

    metric: str
    steps: tuple[float, ...] = wire(FLOATS)
    values: tuple[float, ...] = wire(FLOATS)


@dataclass(frozen=True)
class FollowState(Record):
    """Where a followed log stands, sent once a second by ``--follow``: ``state`` "waiting"
    (``why``: no file yet, empty, no rows) or "following"; the latest ``step`` and ``loss``,
    ``rate`` in steps a second, the ``rows`` judged, ``lines`` and ``bytes`` read,
    ``idle_s`` since the last new line, ``incidents`` reported; ``backlog``, once: the
    incidents already in the log when the follow began."""

    TYPE = "status"

    state: str
    step: float | None = wire(FLOAT, default=None)
    loss: float | None = wire(FLOAT, default=None)
    rate: float | None = wire(FLOAT, default=None)
    rows: int = wire(INT, default=0)
    lines: int = wire(INT, default=0)
    bytes: int = wire(INT, default=0)
    idle_s: float | None = wire(FLOAT, default=None)
    incidents: int = wire(INT, default=0)
    why: str | None = None
    backlog: int | None = None


#: Every record class of train-log that is a record of its own on the wire (not only
#: nested), in the order the analysis writes them.
RECORDS = (
    LogSource,
    Preset,
    MetricStats,
    Onset,
    Event,
    Spike,
    Correlation,
    Distribution,
    Periodicity,
    Composition,
    Histogram,
    Series,
    FollowState,
)
