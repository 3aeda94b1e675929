"""train-log: find loss spikes and accuracy cliffs in a training log, what they sit at, and
whether the batches themselves are the cause.

The log stays where it is: ``remote/trainlog.py`` reads it there (stdlib only) and sends back
findings, a decimated series and a histogram. This module turns those records into frozen
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
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    OutputTail,
    Record,
    from_record,
    run_diagnostic,
    run_records,
)
from remotekit.errors import (
    AuthError,
    ConnectError,
    ConnectionLost,
    DiagnosticError,
    HostKeyError,
    RemotekitError,
)
from remotekit.quoting import join
from remotekit.remote.protocol import FINAL, number
from remotekit.render import table
from remotekit.result import Result, Shown
from remotekit.target import MAX_TIMEOUT_S

if TYPE_CHECKING:
    from remotekit.target import Target

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

PRESETS = ("trend", "olmo2", "olmo-core", "megatron", "zclip")
DEFAULT_PRESET = PRESETS[0]  # remote/trainlog.py's own default too (a test holds them equal)
SCRIPT = "trainlog.py"


# ---------------------------------------------------------------------------------------------
# records as values


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


@dataclass(frozen=True, repr=False)
class TrainLogReport(Shown):
    """Everything train-log found; ``exit_code`` 0 OK, 1 findings, 2 could not run."""

    host: str
    path: str
    source: LogSource | None = None
    preset: Preset | None = None
    metrics: tuple[MetricStats, ...] = ()
    spikes: tuple[Spike, ...] = ()
    events: tuple[Event, ...] = ()
    correlations: tuple[Correlation, ...] = ()
    distribution: Distribution | None = None
    periodicity: Periodicity | None = None
    composition: Composition | None = None
    histogram: Histogram | None = None
    series: tuple[Series, ...] = ()
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()  # command lines to run next (e.g. naming a metric column)
    numeric_columns: tuple[str, ...] = ()  # when no loss was found: the columns there are
    findings: tuple[str, ...] = ()
    diagnosis: tuple[str, ...] = ()
    exit_code: int = EXIT_OK
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        """The script's warnings: caveats of the reading (a column chosen by its name's last
        part, skipped lines, a summary without history), context that never changes the
        exit code; the problems found are ``findings``."""
        return self.warnings

    def render(self) -> str:
        return render_report(self)

    def pictures(self) -> list[tuple[str, bytes]]:
        """The picture ``--plot`` draws (:func:`plot_report`), shown in Jupyter below the
        findings and the text: when the report holds series (made with ``points`` > 0) and
        matplotlib is installed; none otherwise."""
        if not self.series:
            return []
        import os
        import tempfile

        try:
            with tempfile.TemporaryDirectory(prefix="remotekit-plot-") as tmp:  # 0700
                path = plot_report(self, os.path.join(tmp, "plot.png"))
                with open(path, "rb") as f:
                    return [(f"{self.host}:{self.path}", f.read())]
        except ImportError:
            return []

    def series_for(self, metric: str) -> Series | None:
        """The analysed series of column ``metric``, or None when it was not analysed."""
        return next((s for s in self.series if s.metric == metric), None)


# ---------------------------------------------------------------------------------------------
# records -> dataclasses


def _floats(vals: Sequence[Any]) -> tuple[float, ...]:
    """Numbers of a record as floats (non-finite ones arrive as strings)."""
    return tuple(float(n) if (n := number(v)) is not None else math.nan for v in vals)


def _histogram(rec: Record) -> Histogram:
    counts = {str(k): tuple(int(c) for c in v) for k, v in (rec.get("counts") or {}).items()}
    edges, modes = _floats(rec.get("edges") or ()), _floats(rec.get("modes") or ())
    return from_record(Histogram, rec, edges=edges, counts=counts, modes=modes)


def _series(rec: Record) -> Series:
    steps, values = _floats(rec.get("steps") or ()), _floats(rec.get("values") or ())
    return from_record(Series, rec, steps=steps, values=values)


#: record type -> (report field, converter): one record per report (_ONE_EACH), or every
#: record of the type collected into a tuple field (_MANY)
_ONE_EACH: dict[str, tuple[str, Callable[[Record], Any]]] = {
    "source": ("source", lambda r: from_record(LogSource, r)),
    "preset": ("preset", lambda r: from_record(Preset, r)),
    "distribution": ("distribution", lambda r: from_record(Distribution, r)),
    "periodicity": ("periodicity", lambda r: from_record(Periodicity, r)),
    "composition": ("composition", lambda r: from_record(Composition, r)),
    "histogram": ("histogram", _histogram),
}
_MANY: dict[str, tuple[str, Callable[[Record], Any]]] = {
    "metric": ("metrics", lambda r: from_record(MetricStats, r)),
    "event": ("events", lambda r: from_record(Event, r)),
    "spike": ("spikes", lambda r: from_record(Spike, r)),
    "correlation": ("correlations", lambda r: from_record(Correlation, r)),
    "series": ("series", _series),
    "warning": ("warnings", lambda r: str(r.get("message", ""))),
    "error": ("errors", lambda r: str(r.get("message", ""))),
}


def build_report(
    host: str, path: str, records: Sequence[Record], *, duration_s: float = 0.0
) -> TrainLogReport:
    """A :class:`TrainLogReport` from the script's records: the exit code is the final
    record's (exit 2, and an error saying so, when the records end before it)."""
    values: dict[str, Any] = {}
    many: dict[str, list[Any]] = {name: [] for name, _ in _MANY.values()}
    summary: Record = {}
    final: Record | None = None
    for rec in records:
        t = str(rec.get("type"))
        if t in _ONE_EACH:
            name, make = _ONE_EACH[t]
            values[name] = make(rec)
        elif t in _MANY:
            name, make = _MANY[t]
            many[name].append(make(rec))
        elif t == "summary":
            summary = rec
        elif t == FINAL:
            final = rec
        if t == "error" and rec.get("kind") == "no-loss":
            numeric = tuple(str(k) for k in rec.get("numeric", ()))
            values.update(numeric_columns=numeric, hints=no_loss_hints(host, path, numeric))
    if final is None:
        many["errors"].append("the analysis stopped before its final record")
    code = _exit_code(final, many["errors"])
    source = values.get("source")
    tol = source.tolerance if source is not None else 0.0
    many["spikes"] = [
        replace(s, at_event=s.distance is not None and abs(s.distance) <= tol)
        for s in many["spikes"]
    ]
    tuples: dict[str, Any] = {name: tuple(items) for name, items in many.items()}
    rep = TrainLogReport(
        host=host,
        path=path,
        duration_s=duration_s,
        findings=tuple(str(f) for f in summary.get("findings", ())),
        exit_code=code,
        **values,
        **tuples,
    )
    return replace(rep, diagnosis=tuple(diagnosis(rep)))


def _exit_code(final: Record | None, errors: Sequence[str]) -> int:
    """The final record's exit code; 2 without one, or when the script wrote errors."""
    code = final.get("exit_code") if final is not None else EXIT_FAILED
    if errors or code not in (EXIT_OK, EXIT_FINDINGS, EXIT_FAILED):
        return EXIT_FAILED
    return int(code)


HINT_COLUMNS = 5  # command lines suggested when no loss series was found


def no_loss_hints(host: str, path: str, numeric: Sequence[str]) -> tuple[str, ...]:
    """``remotekit train-log`` command lines that name one of the numeric columns found with
    ``--metric`` (the task's flag; tests run each through the task parser)."""
    base = ["remotekit", "train-log"] + (["--host", host] if host else []) + ["--path", path]
    return tuple(join([*base, "--metric", col]) for col in list(numeric)[:HINT_COLUMNS])


# ---------------------------------------------------------------------------------------------
# the API


def _csv(v: Sequence[Any] | str | None) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    return ",".join(str(x) for x in v)


def script_args(
    path: str,
    *,
    metrics: Sequence[str] | str | None = None,
    preset: str = DEFAULT_PRESET,
    ckpt_steps: Sequence[int] | str | None = None,
    ckpt_dir: str | None = None,
    steps_per_epoch: float | None = None,
    tolerance: float | None = None,
    points: int = 0,
) -> list[str]:
    """The argv of ``remote/trainlog.py`` for these options."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    args = [str(path), "--preset", preset]
    if (m := _csv(metrics)) is not None and m.strip():
        args += ["--metrics", m]
    if (c := _csv(ckpt_steps)) is not None and c.strip():
        args += ["--ckpt-steps", c]
    if ckpt_dir:
        args += ["--ckpt-dir", str(ckpt_dir)]
    if steps_per_epoch:
        args += ["--steps-per-epoch", f"{float(steps_per_epoch):g}"]
    if tolerance is not None:
        args += ["--tolerance", f"{float(tolerance):g}"]
    if points > 0:
        args += ["--points", str(int(points))]
    return args


def analyze_train_log(
    target: Target,
    path: str,
    *,
    metrics: Sequence[str] | str | None = None,
    preset: str = DEFAULT_PRESET,
    ckpt_steps: Sequence[int] | str | None = None,
    ckpt_dir: str | None = None,
    steps_per_epoch: float | None = None,
    tolerance: float | None = None,
    points: int = 0,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> TrainLogReport:
    """Analyse the training log at ``path`` *on* ``target``; only findings come back.

    ``metrics`` names the columns to check (default: loss, acc, lr, grad_norm, found under
    their usual names, e.g. ``train/loss``); ``preset`` picks the spike rule (see
    :data:`PRESETS`); checkpoint saves come from the log's own lines plus ``ckpt_steps``
    and the checkpoints in ``ckpt_dir`` there (their names, else their own step keys; a run
    directory's ``checkpoints/`` too); ``steps_per_epoch`` marks epoch starts (else an
    ``epoch`` field does); ``tolerance`` is how many steps from an event still count as
    "at" it (default: max(5, 2 logging strides)); ``points`` > 0 also fetches a decimated
    series of each metric (for :func:`plot_report`).

    A log that cannot be analysed gives a report with ``errors`` and exit code 2; a script
    that stopped before its final record (killed, crashed) raises
    :class:`~remotekit.DiagnosticError` naming host and step, and the engine's own errors
    (connection, timeout, container, interpreter) are raised too.
    """
    args = script_args(
        path,
        metrics=metrics,
        preset=preset,
        ckpt_steps=ckpt_steps,
        ckpt_dir=ckpt_dir,
        steps_per_epoch=steps_per_epoch,
        tolerance=tolerance,
        points=points,
    )
    run = run_diagnostic(
        target, SCRIPT, args, step="train-log", timeout=timeout, on_record=on_record
    )
    host = run.result.host or target.name
    return build_report(host, str(path), run.records, duration_s=run.result.duration_s)


# ---------------------------------------------------------------------------------------------
# following a log as it grows

#: Seconds ``close()`` waits for the follower there to stop, beyond the host's kill grace:
#: the stop lands with its next status record (one a second), then the runner stops it.
STOP_WAIT_S = 5.0
#: Seconds past the ``timeout`` the follow ends at by itself there before the step is stopped.
TIMEOUT_MARGIN_S = 30.0
#: Tries to follow again after a lost connection (1, 2, 4, 8, 16 s apart); a connection that
#: delivered a status starts the count again.
RECONNECTS = 5


@dataclass(frozen=True, repr=False)
class FollowStatus(Shown):
    """Where a followed log stands (one a second): ``state`` "waiting" (``why``: no file
    yet, empty, no rows) or "following"; the latest ``step`` and ``loss``, ``rate`` in steps
    a second, the ``rows`` judged, ``lines`` and ``bytes`` read, ``idle_s`` since the last
    new line, ``incidents`` reported; ``backlog``, once: the incidents already in the log
    when the follow began (not reported: ``train-log`` without ``--follow`` lists them).
    Its ``str()`` is :meth:`line`, the status line ``train-log --follow`` shows."""

    state: str
    step: float | None = None
    loss: float | None = None
    rate: float | None = None
    rows: int = 0
    lines: int = 0
    bytes: int = 0
    idle_s: float | None = None
    incidents: int = 0
    why: str | None = None
    backlog: int | None = None

    repr_keys = ("state", "step", "incidents")

    def render(self) -> str:
        return self.line()

    def backlog_line(self) -> str | None:
        """What the log held when the follow began, in words (None but in the first status)."""
        if not self.backlog:
            return None
        return (
            f"{self.backlog} incident(s) already in the log up to step {_number(self.step)} "
            "(train-log without --follow lists them)"
        )

    def line(self) -> str:
        """``step 1200  loss 2.31  4.1 steps/s  2 incidents`` (or why it waits)."""
        if self.state == "waiting":
            return f"waiting: {self.why or 'no rows yet'}"
        rate = f"{_number(self.rate, 3)} steps/s" if self.rate is not None else "- steps/s"
        idle = (
            f"  (no new line for {_number(self.idle_s, 2)} s)" if (self.idle_s or 0) >= 10 else ""
        )
        return (
            f"step {_number(self.step)}  loss {_number(self.loss)}  {rate}  "
            f"{self.incidents} incident(s){idle}"
        )


@dataclass(frozen=True, repr=False)
class Incident(Shown):
    """One incident of a followed log, as it was found: a spike, cliff or non-finite run
    (``spike``, the same record ``train-log`` reports) or a resume (``event``). ``kind``:
    spike, cliff, nonfinite or resume; ``seen``: when it arrived here (Unix time);
    ``tolerance``: the steps from an event that count as at it (the log's preset's)."""

    host: str
    path: str
    kind: str
    step: float
    metric: str | None
    spike: Spike | None = None
    event: Event | None = None
    seen: float = 0.0
    tolerance: float = 0.0

    repr_keys = ("host", "kind", "step", "metric")

    def render(self, tolerance: float | None = None) -> str:
        """One line, in the words of ``train-log``'s tables (the line ``train-log --follow``
        prints for it); ``tolerance`` overrides the incident's own."""
        if self.spike is not None:
            tol = self.tolerance if tolerance is None else tolerance
            cells = _spike_cells(self.spike, tol)
            pairs = [f"{h} {c}" for h, c in zip(SPIKE_COLUMNS[3:], cells[3:]) if c != "-"]
            return f"step {cells[0]}: {cells[1]} {cells[2]}: " + ", ".join(pairs)
        assert self.event is not None
        return _event_line(self.event)


class _Stopped(Exception):
    """Raised in the step's output callback to stop a follow (the engine then stops the
    step there, as on Ctrl-C)."""


class LogFollow:
    """The incidents of a log followed there, an iterator of :class:`Incident`; see
    :func:`follow_train_log`. ``status`` / ``source`` / ``warnings``: the latest word from
    there; ``exit_code`` once the follow ended by itself (None while it runs, or stopped)."""

    def __init__(
        self,
        target: Target,
        path: str,
        args: list[str],
        *,
        timeout: float | None,
        on_status: Callable[[FollowStatus], None] | None,
        on_warning: Callable[[str], None] | None,
    ) -> None:
        self.target, self.path = target, path
        self.on_status, self.on_warning = on_status, on_warning
        self.status: FollowStatus | None = None
        self.source: LogSource | None = None
        self.warnings: list[str] = []
        self.exit_code: int | None = None
        self._errors: list[str] = []
        self._final = False
        self._over = False  # the follow ended: the iteration ends too, at once
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._tail = OutputTail()
        self._seen = False  # a status came over the current connection
        self._after: float | None = None  # the last step a status named (-inf: none judged)
        self._thread = threading.Thread(
            target=self._run, args=(args, timeout), name="train-log-follow", daemon=True
        )
        self._thread.start()

    # -- there (the step, in its own thread) ---------------------------------------------

    def _run(self, args: list[str], timeout: float | None) -> None:
        """The follow there; after a lost connection, again (:data:`RECONNECTS` tries, the
        waits doubling from 1 s) from the last step a status named, so that an incident
        written meanwhile is reported and none twice."""
        end = None if timeout is None else time.monotonic() + timeout
        tries = 0
        while True:
            try:
                result = self._step(args, end)
                self._events.put(("end", result))
                return
            except _Stopped:
                self._events.put(("stopped", None))
                return
            except (ConnectionLost, ConnectError) as exc:
                again = not isinstance(exc, (AuthError, HostKeyError)) and tries < RECONNECTS
                if not again:
                    self._events.put(("error", exc))
                    return
                if self._stop.wait(2.0**tries):  # closed meanwhile
                    self._events.put(("stopped", None))
                    return
                tries = 0 if self._seen else tries + 1
                self._seen = False
                self._say_again(exc, tries)
            except BaseException as exc:  # the engine's errors, raised where the caller iterates
                self._events.put(("error", exc))
                return

    def _step(self, args: list[str], end: float | None) -> Result:
        """One follow there, up to ``end``; the records to the caller's queue."""

        def record(rec: Record) -> None:
            if self._stop.is_set():
                raise _Stopped
            self._judged(rec)
            self._events.put(("record", rec))

        def output(stream: str, line: str) -> None:
            if self._stop.is_set():
                raise _Stopped
            self._tail(stream, line)

        more = [] if self._after is None else ["--after-step", repr(float(self._after))]
        step_timeout = MAX_TIMEOUT_S
        if end is not None:  # the follow ends by itself; the step a little later
            left = max(1.0, end - time.monotonic())
            more += ["--duration", f"{left:.3f}"]
            step_timeout = min(MAX_TIMEOUT_S, left + TIMEOUT_MARGIN_S)
        _, result = run_records(
            self.target,
            SCRIPT,
            [*args, *more],
            step="train-log --follow",
            timeout=step_timeout,
            on_record=record,
            on_output=output,
            keep=False,
        )
        return result

    def _judged(self, rec: Record) -> None:
        """How far the follower there had judged, by what arrived: the step of a status,
        the onset of an incident (its status may be lost with the connection)."""
        t = rec.get("type")
        if t == "status":
            self._seen = True  # a connection that worked: the tries start again
        step = {"status": "step", "spike": "onset_step", "event": "step"}.get(str(t))
        at = number(rec.get(step)) if step is not None else None
        if t == "status" or at is not None:
            known = -math.inf if self._after is None else self._after
            self._after = max(known, -math.inf if at is None else at)

    def _say_again(self, exc: RemotekitError, tries: int) -> None:
        where = "its start" if self._after in (None, -math.inf) else f"step {_number(self._after)}"
        msg = f"connection lost ({exc.message}); following again after {where} (try {tries + 1})"
        self._events.put(("record", {"type": "warning", "message": msg}))

    # -- here (the caller's thread) ------------------------------------------------------

    def __iter__(self) -> LogFollow:
        return self

    def __next__(self) -> Incident:
        if self._over:
            raise StopIteration
        while True:
            try:
                kind, item = self._events.get(timeout=1.0)
            except queue.Empty:
                continue
            if kind == "record":
                incident = self._take(item)
                if incident is not None:
                    return incident
            elif kind == "end":
                self._over = True
                self._end(item)
            elif kind == "error":
                self._over = True
                raise item
            else:
                self._over = True
                raise StopIteration

    def _take(self, rec: Record) -> Incident | None:
        """A record from there: an incident to return, or news to keep (and call back)."""
        t = rec.get("type")
        if t == "status":
            self.status = from_record(FollowStatus, rec)
            if self.on_status is not None:
                self.on_status(self.status)
        elif t == "source":
            self.source = from_record(LogSource, rec)
        elif t in ("warning", "error"):
            msg = str(rec.get("message", ""))
            (self.warnings if t == "warning" else self._errors).append(msg)
            if t == "warning" and self.on_warning is not None:
                self.on_warning(msg)
        elif t == "spike":
            tol = self.source.tolerance if self.source is not None else 0.0
            sp = from_record(Spike, rec)
            sp = replace(sp, at_event=sp.distance is not None and abs(sp.distance) <= tol)
            return self._incident(sp.kind, sp.step, sp.metric, spike=sp)
        elif t == "event":
            ev = from_record(Event, rec)
            return self._incident(ev.kind, ev.step, None, event=ev)
        elif t == FINAL:
            self._final = True
            code = rec.get("exit_code")
            self.exit_code = code if code in (EXIT_OK, EXIT_FINDINGS) else EXIT_FAILED
        return None

    def _incident(self, kind: str, step: float, metric: str | None, **what: Any) -> Incident:
        host = self.target.name
        tol = self.source.tolerance if self.source is not None else 0.0
        return Incident(
            host, self.path, kind, step, metric, seen=time.time(), tolerance=tol, **what
        )

    def _end(self, result: Result) -> None:
        """The step ended by itself: an error record or a missing final record raise."""
        if self._errors:
            raise DiagnosticError("; ".join(self._errors), result=result)
        if not self._final:
            msg = f"train-log --follow stopped before its final record (exit {result.exit_code})"
            if self._tail.lines:
                msg += "; last output:\n" + self._tail.indented()
            raise DiagnosticError(msg, result=result)
        raise StopIteration

    def close(self) -> None:
        """Stop following: the follower there is stopped (its whole process tree) before
        this returns. A host gone silent (no status for a while) is stopped by
        ``target.cancel()`` (then ``resume()``)."""
        self._stop.set()
        wait = STOP_WAIT_S + self.target.spec.timeouts.kill_grace
        self._thread.join(wait)
        if self._thread.is_alive():
            self.target.cancel()
            self._thread.join(wait)
            self.target.resume()

    def __enter__(self) -> LogFollow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def follow_train_log(
    target: Target,
    path: str,
    *,
    timeout: float | None = None,
    on_status: Callable[[FollowStatus], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    **options: Any,
) -> LogFollow:
    """Follow the training log at ``path`` *on* ``target`` as it grows: an iterator of each
    new :class:`Incident` (spike, cliff, non-finite run, resume) as it is found there, by
    the detector of :func:`analyze_train_log` over the log's latest rows. ``options``: those
    of :func:`analyze_train_log` (``metrics``, ``preset``, ``ckpt_steps``, ``ckpt_dir``,
    ``steps_per_epoch``, ``tolerance``; not ``points``)::

        with follow_train_log(t, "/workspace/run/log.jsonl") as live:
            for incident in live:
                print(incident.render())

    Followed: logs that grow by appending (JSON lines, CSV, text logs, TensorBoard event
    files); W&B run files and JSON documents (``trainer_state.json``) are not: the iterator
    raises :class:`~remotekit.DiagnosticError` saying so, as for a log that cannot be read. What
    the log held when the follow began is the baseline, not reported (``status.backlog``
    counts its incidents). A truncated or replaced (rotated) log is read again from its
    start, with a warning. ``on_status`` hears a :class:`FollowStatus` every second,
    ``on_warning`` each warning, both in the iterating thread.

    No step timeout: it follows until :meth:`LogFollow.close` (leaving the ``with``; Ctrl-C
    in the loop, then close), which stops the follower there; ``timeout`` seconds bound the
    whole follow (it then ends by itself, ``exit_code`` 1 if it reported incidents). A lost
    connection is a warning: the follow starts again there (:data:`RECONNECTS` tries) after
    the last step it had judged, so an incident written meanwhile is still reported, once.
    The engine's other errors are raised by the iteration.
    """
    if "points" in options:
        raise TypeError("follow_train_log() takes no points: a followed log sends no series")
    args = [*script_args(path, **options), "--follow"]
    return LogFollow(
        target, str(path), args, timeout=timeout, on_status=on_status, on_warning=on_warning
    )


# ---------------------------------------------------------------------------------------------
# words


def _number(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _p_value(v: float) -> str:
    return f"{v:.2g}"


_KIND_WORDS = {
    "checkpoint": "checkpoint saves",
    "resume": "resumes",
    "epoch": "epoch starts",
    "warmup": "the start without warmup",
    "lr-jump": "learning-rate jumps",
    "pause": "pauses in logging",
}


def _event_phrase(s: Spike, tol: float) -> str:
    if s.event is None or s.event_step is None or s.distance is None:
        return "no event in the log"
    where = f"{s.event} {_number(s.event_step)}"
    if abs(s.distance) <= tol:
        return f"{where} ({'+' if s.distance >= 0 else ''}{_number(s.distance)})"
    side = "after" if s.distance > 0 else "before"
    return (
        f"none within ±{_number(tol)} (nearest: {where}, {_number(abs(s.distance))} steps {side})"
    )


def _onsets(spikes: Sequence[Spike], tol: float) -> list[list[Spike]]:
    """Spikes grouped into incidents: onsets within ``tol`` steps of each other."""
    groups: list[list[Spike]] = []
    for s in sorted((s for s in spikes if s.kind != "nonfinite"), key=lambda s: s.step):
        if groups and s.step - groups[-1][0].step <= tol:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def diagnosis(rep: TrainLogReport) -> list[str]:
    """A few sentences that lead from the findings to a cause."""
    if rep.errors:
        return []
    out: list[str] = []
    tol = rep.source.tolerance if rep.source else 0.0
    groups = _onsets(rep.spikes, tol)
    if groups:
        kinds = sorted({f"{s.metric} {s.kind}s" for g in groups for s in g})
        out.append(f"{len(groups)} incident(s) ({', '.join(kinds)}).")
        for c in rep.correlations:
            if c.beyond_chance:
                out.append(
                    f"{c.at_events} of {c.spikes} sit at {_KIND_WORDS.get(c.kind, c.kind)} "
                    f"(±{_number(tol)} steps), more than chance ({_number(c.expected, 2)} expected, "
                    f"p={_p_value(c.p_value)})."
                )
        loose = [g for g in groups if not any(s.at_event for s in g)]
        if loose:
            worst = [max(g, key=lambda s: s.score or 0.0) for g in loose[:5]]  # the peak's step
            where = ", ".join(
                f"step {_number(w.step)}" + (f" (bucket {w.bucket})" if w.bucket else "")
                for w in worst
            )
            more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
            out.append(
                f"{len(loose)} at no event: {where}{more}; events do not explain those, "
                "look at what the batches were."
            )
    nonfinite = [s for s in rep.spikes if s.kind == "nonfinite"]
    if nonfinite:
        out.append(
            f"non-finite {', '.join(sorted({s.metric for s in nonfinite}))} from step "
            f"{_number(nonfinite[0].step)} ({sum(s.flagged for s in nonfinite)} value(s))."
        )
    comp = rep.composition
    if comp is not None and comp.finding:
        out.append(comp.verdict + ".")
        if comp.key is not None:
            out.append(
                "Fix: interleave buckets in proportion (stride-based), so that every bucket "
                "is spread over the epoch and no bucket runs for many steps in a row."
            )
    elif comp is not None and comp.homogeneous:
        out.append(comp.verdict + ".")
    warm = [e for e in rep.events if e.kind == "warmup"]
    if warm:
        out.append(f"{warm[0].detail} (expect a rough start; a warmup schedule avoids it).")
    if not out:
        out.append("no spikes, cliffs or signs of homogeneous batches.")
    return out


def render_report(rep: TrainLogReport) -> str:
    """The report as text for people: what was read, then one part per kind of finding."""
    parts = (_head, _metrics, _spikes, _events, _correlations, _distribution, _periodicity)
    lines: list[str] = [f"train-log  {rep.host}:{rep.path}"]
    for part in (*parts, _composition, _ending):
        lines += part(rep)
    return "\n".join(lines)


def _head(rep: TrainLogReport) -> list[str]:
    """Errors, hints, what was read, the preset and the reading's warnings."""
    lines: list[str] = []
    for msg in rep.errors:
        lines.append(f"  error: {msg}")
    for hint in rep.hints:
        lines.append(f"  try: {hint}")
    src = rep.source
    if src is not None:
        lines += [f"  {d}" for d in src.describe()]
        meta = [k for k in ("bucket", "seq_len", "tokens") if k in src.columns]
        lines.append(
            f"  {src.format}, {src.rows} rows (steps {_number(src.first_step)}..{_number(src.last_step)}),"
            f" metrics {', '.join(src.metrics)}"
            + (f"; batch fields: {', '.join(meta)}" if meta else "; no batch fields")
        )
    if rep.preset is not None:
        p = rep.preset
        short = (
            f" (window {p.window}, shortened from {p.preset_window} for this log)"
            if p.window != p.preset_window
            else ""
        )
        lines.append(f"  preset {p.name}: {p.rule}{short}")
    for w in rep.warnings:
        lines.append(f"  warning: {w}")
    return lines


def _metrics(rep: TrainLogReport) -> list[str]:
    """The table of metrics checked."""
    lines: list[str] = []
    if rep.metrics:
        lines += ["", "Metrics"]
        lines.append(
            table(
                ["metric", "key", "checks", "values", "flagged", "share", "non-finite", "median"],
                [
                    (
                        m.label,
                        m.key,
                        {"up": "spikes", "down": "cliffs"}.get(m.direction, "-"),
                        m.n,
                        m.flagged,
                        f"{m.spike_share:.2%}" if m.direction != "none" else "-",
                        m.nonfinite,
                        _number(m.median),
                    )
                    for m in rep.metrics
                ],
            )
        )
    return lines


SPIKE_COLUMNS = (
    "step",
    "metric",
    "kind",
    "value",
    "baseline",
    "score",
    "back after",
    "event",
    "bucket (run)",
    "rule",
)


def _spike_cells(s: Spike, tol: float) -> tuple[str, ...]:
    """A spike's cells under :data:`SPIKE_COLUMNS` (the table, and a followed log's lines)."""
    back = (
        "-"
        if s.kind == "nonfinite"
        else (f"{_number(s.recovery_steps)} steps" if s.recovery_steps is not None else "not back")
    )
    return (
        _number(s.step),
        s.metric,
        s.kind,
        _number(s.value),
        _number(s.baseline),
        _number(s.score, 3),
        back,
        _event_phrase(s, tol),
        f"{s.bucket} ({s.run_position})" if s.bucket is not None else "-",
        s.rule or "-",
    )


def _spikes(rep: TrainLogReport) -> list[str]:
    """The table of spikes and cliffs."""
    lines: list[str] = []
    tol = rep.source.tolerance if rep.source else 0.0
    if rep.spikes:
        lines += ["", f"Spikes and cliffs ({len(rep.spikes)})"]
        lines.append(table(list(SPIKE_COLUMNS), [_spike_cells(s, tol) for s in rep.spikes]))
    return lines


def _event_line(e: Event) -> str:
    return f"step {_number(e.step)}: {e.kind}: {e.detail}"


def _events(rep: TrainLogReport) -> list[str]:
    """The events by kind, and the notable ones."""
    lines: list[str] = []
    if rep.events:
        counts: dict[tuple[str, str], int] = {}
        for e in rep.events:
            counts[(e.kind, e.source)] = counts.get((e.kind, e.source), 0) + 1
        lines += ["", "Events: " + ", ".join(f"{n} {k} ({s})" for (k, s), n in counts.items())]
        notable = [e for e in rep.events if e.kind in ("resume", "warmup", "lr-jump", "pause")]
        for e in notable[:10]:
            lines.append("  " + _event_line(e))
    return lines


def _correlations(rep: TrainLogReport) -> list[str]:
    """Whether spikes sit at events more often than chance."""
    lines: list[str] = []
    tol = rep.source.tolerance if rep.source else 0.0
    if rep.correlations and any(c.spikes for c in rep.correlations):
        lines += ["", f"Spikes at events (onsets within ±{_number(tol)} steps)"]
        lines.append(
            table(
                ["events", "count", "spikes at them", "by chance", "p", "verdict"],
                [
                    (
                        c.kind,
                        c.events,
                        f"{c.at_events} of {c.spikes}",
                        _number(c.expected, 2),
                        _p_value(c.p_value),
                        "more than chance" if c.beyond_chance else "-",
                    )
                    for c in rep.correlations
                ],
            )
        )
    return lines


def _distribution(rep: TrainLogReport) -> list[str]:
    """The loss's shape over the stable window, with its modes."""
    lines: list[str] = []
    d = rep.distribution
    if d is not None and d.quantised:
        lines += [
            "",
            f"{d.metric.capitalize()} distribution, steps {_number(d.first_step)}..{_number(d.last_step)}:"
            f" only {_number(d.quantised.get('distinct'))} distinct values in steps of "
            f"{_number(d.quantised.get('quantum'))} (rounded when logged): no shape to judge",
        ]
    elif d is not None:
        lines += [
            "",
            f"{d.metric.capitalize()} distribution, steps {_number(d.first_step)}..{_number(d.last_step)} "
            f"({d.n} values, trend removed, {d.scale} scale): {d.shape}, bimodality "
            f"coefficient {_number(d.bimodality, 2)} (> 0.56 hints at several modes)",
        ]
        lines.append(
            table(
                ["mode", "weight", "range", "bucket (purity)"],
                [
                    (
                        _number(m.center),
                        _pct(m.weight),
                        f"{_number(m.lo)}..{_number(m.hi)}",
                        f"{m.bucket} ({_pct(m.purity)})" if m.bucket is not None else "-",
                    )
                    for m in d.modes
                ],
            )
        )
    return lines


def _periodicity(rep: TrainLogReport) -> list[str]:
    """The periodicity line."""
    lines: list[str] = []
    per = rep.periodicity
    if per is not None:
        rows = f", {per.lag_rows} log rows" if per.stride != 1 and per.lag_rows else ""
        if per.periodic:
            lines.append(
                f"Periodicity: repeats every {_number(per.lag)} steps{rows} "
                f"(autocorrelation {_number(per.acf, 2)})"
            )
        elif per.quantised:
            lines.append("Periodicity: not judged (the loss is too coarsely rounded)")
        elif per.lag is not None:
            lines.append(
                f"Periodicity: none (strongest autocorrelation {_number(per.acf, 2)} at lag "
                f"{_number(per.lag)} steps{rows})"
            )
    return lines


def _composition(rep: TrainLogReport) -> list[str]:
    """The batch composition table and its verdict."""
    lines: list[str] = []
    c = rep.composition
    if c is not None:
        if c.key is not None:
            lines += [
                "",
                f"Batch composition by {c.key}: it explains {_pct(c.explained)} of the loss "
                f"variance; longest same-{c.key} run {c.max_run} (random order: ~"
                f"{_number(c.random_max_run, 2)}, interleaved: {c.interleaved_max_run})",
            ]
            if c.derived:
                lines.append(f"  ({c.derived})")
            lines.append(
                table(
                    [c.key, "batches", "share", "loss median", "longest run"],
                    [
                        (b.bucket, b.batches, _pct(b.share), _number(b.loss_median), b.max_run)
                        for b in c.buckets
                    ],
                )
            )
        lines.append(f"Verdict: {c.verdict}")
    return lines


def _ending(rep: TrainLogReport) -> list[str]:
    """The diagnosis and the exit line."""
    lines: list[str] = []
    if rep.diagnosis:
        lines += ["", "Diagnosis"]
        lines += [f"  - {s}" for s in rep.diagnosis]
    word = {EXIT_OK: "OK", EXIT_FINDINGS: "findings", EXIT_FAILED: "could not run"}
    extra = (
        f": {', '.join(rep.findings)}" if rep.findings and rep.exit_code == EXIT_FINDINGS else ""
    )
    lines += ["", f"exit {rep.exit_code} ({word.get(rep.exit_code, '?')}{extra})"]
    return lines


# ---------------------------------------------------------------------------------------------
# the picture


_EVENT_STYLE = {
    "checkpoint": ("tab:green", "--"),
    "resume": ("tab:purple", "-"),
    "epoch": ("0.6", ":"),
    "warmup": ("tab:orange", "-."),
    "lr-jump": ("tab:brown", "-."),
    "pause": ("tab:gray", "-"),
}


def plot_report(rep: TrainLogReport, path: str) -> str:
    """Draw loss and accuracy against step (spikes and events marked) and the loss
    histogram by bucket into ``path`` (PNG, SVG, PDF by suffix). Needs matplotlib and a
    report made with ``points`` > 0; raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [m for m in ("loss", "acc") if rep.series_for(m) is not None]
    if not panels:
        panels = [s.metric for s in rep.series[:1]]
    hist = rep.histogram
    n = len(panels) + (1 if hist is not None else 0)
    if n == 0:
        raise ValueError("nothing to draw: the report has no series (use points > 0)")
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.2 * n), squeeze=False)
    ax_list = [a[0] for a in axes]
    tol = rep.source.tolerance if rep.source else 0.0
    for ax, metric in zip(ax_list, panels):
        _plot_metric(ax, rep, metric)
    ax_list[len(panels) - 1].set_xlabel("step")
    title = f"{rep.host}:{rep.path}"
    if rep.preset is not None:
        title += f"  (preset {rep.preset.name}, ±{_number(tol)} steps counts as at an event)"
    ax_list[0].set_title(title, fontsize=9)
    if hist is not None:
        _plot_histogram(ax_list[-1], rep, hist, plt)
        if rep.composition is not None:
            fig.text(0.01, 0.005, rep.composition.verdict, fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_metric(ax: Any, rep: TrainLogReport, metric: str) -> None:
    """One panel: the decimated series, the events as vertical lines, the spikes marked."""
    s = rep.series_for(metric)
    assert s is not None
    ax.plot(s.steps, s.values, lw=0.6, color="tab:blue", label=metric)
    if metric == "loss" and s.values and min(s.values) > 0:
        ax.set_yscale("log")
    _plot_events(ax, rep.events)
    _plot_spikes(ax, rep, metric)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.25)
    ax.legend(loc="best", fontsize=7, ncol=3)


def _plot_events(ax: Any, events: Sequence[Event]) -> None:
    """Each event as a vertical line styled by kind (epoch starts left out when crowded)."""
    seen: set[str] = set()
    for e in events:
        color, style = _EVENT_STYLE.get(e.kind, ("k", ":"))
        if e.kind == "epoch" and len(events) > 200:
            continue
        ax.axvline(
            e.step,
            color=color,
            ls=style,
            lw=0.9,
            alpha=0.8,
            label=e.kind if e.kind not in seen else None,
        )
        seen.add(e.kind)


def _plot_spikes(ax: Any, rep: TrainLogReport, metric: str) -> None:
    """Spikes and cliffs of ``metric`` at their peaks, each with its event (or none)."""
    mine = [sp for sp in rep.spikes if sp.metric == metric and math.isfinite(sp.value)]
    for kind, marker, color in (("spike", "^", "red"), ("cliff", "v", "red")):
        pts = [sp for sp in mine if sp.kind == kind]
        if not pts:
            continue
        ax.scatter(
            [p.peak_step for p in pts],
            [p.value for p in pts],
            marker=marker,
            s=40,
            color=color,
            zorder=5,
            label=f"{kind} ({len(pts)})",
        )
        crowded = len(pts) > 6
        for p in pts[:40]:
            at = ("at " + p.event) if p.at_event and p.event else "no event"
            ax.annotate(
                f"{_number(p.step)}: {at}",
                (p.peak_step, p.value),
                textcoords="offset points",
                xytext=(2, -4 if kind == "cliff" and crowded else 4),
                fontsize=6 if crowded else 7,
                rotation=90 if crowded else 0,
                va="top" if kind == "cliff" and crowded else "bottom",
                color="darkred",
            )


def _plot_histogram(ax: Any, rep: TrainLogReport, hist: Histogram, plt: Any) -> None:
    """The loss histogram (trend removed), stacked by bucket, with the modes marked."""
    edges = list(hist.edges)
    widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
    bottom = [0.0] * len(widths)
    cmap = plt.get_cmap("tab10")
    for i, (name, counts) in enumerate(hist.counts.items()):
        label = f"{hist.key} {name}" if hist.key else name
        ax.bar(
            edges[:-1],
            counts,
            width=widths,
            bottom=bottom,
            align="edge",
            color=cmap(i % 10),
            alpha=0.85,
            label=label,
        )
        bottom = [b + c for b, c in zip(bottom, counts)]
    for m in hist.modes:
        ax.axvline(m, color="k", ls="--", lw=0.8)
    if hist.scale == "log":
        ax.set_xscale("log")
    shape = rep.distribution.shape if rep.distribution else ""
    ax.set_title(
        f"{hist.metric} over steps {_number(hist.first_step)}..{_number(hist.last_step)} "
        f"(trend removed): {shape}" + (f", coloured by {hist.key}" if hist.key else ""),
        fontsize=9,
    )
    ax.set_xlabel(hist.metric)
    ax.set_ylabel("steps")
    ax.legend(fontsize=7)
