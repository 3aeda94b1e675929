"""train-log's API: the analysis run there (:func:`analyze_train_log`: its keywords are the
fields of :class:`~remotekit.remote.trainlog.options.TrainLogOptions`, which travels there as
one record), and its records made a report (:func:`build_report`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from remotekit.diagnostics import defaults
from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    Record,
    renamed,
    run_diagnostic,
)
from remotekit.diagnostics.trainlog.model import (
    DEFAULT_PRESET,
    Composition,
    Correlation,
    Distribution,
    Event,
    Histogram,
    LogSource,
    MetricStats,
    Onset,
    Periodicity,
    Preset,
    Series,
    Spike,
)
from remotekit.diagnostics.trainlog.report import TrainLogReport, diagnosis
from remotekit.quoting import join
from remotekit.remote.protocol import FINAL
from remotekit.remote.trainlog.options import TrainLogOptions

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = ["SCRIPT", "analyze_train_log", "build_report", "no_loss_hints"]

SCRIPT = "trainlog.py"


#: record type -> (report field, converter): one record per report (_ONE_EACH), or every
#: record of the type collected into a tuple field (_MANY); the classes read their records
_ONE_EACH: dict[str, tuple[str, Callable[[Record], Any]]] = {
    cls.TYPE: (name, cls.from_dict)
    for name, cls in (
        ("source", LogSource),
        ("preset", Preset),
        ("onset", Onset),
        ("distribution", Distribution),
        ("periodicity", Periodicity),
        ("composition", Composition),
        ("histogram", Histogram),
    )
}
_MANY: dict[str, tuple[str, Callable[[Record], Any]]] = {
    **{
        cls.TYPE: (name, cls.from_dict)
        for name, cls in (
            ("metrics", MetricStats),
            ("events", Event),
            ("spikes", Spike),
            ("correlations", Correlation),
            ("series", Series),
        )
    },
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
    base = ["remotekit", "train-log"] + (["--host", host] if host else []) + ["--log", path]
    return tuple(join([*base, "--metric", col]) for col in list(numeric)[:HINT_COLUMNS])


@renamed(path="log", ckpt_dir="checkpoints")
def analyze_train_log(
    target: Target,
    log: str,
    *,
    metrics: Sequence[str] | str | None = None,
    preset: str = DEFAULT_PRESET,
    ckpt_steps: Sequence[int] | str | None = None,
    checkpoints: str | None = None,
    steps_per_epoch: float | None = None,
    run_part: int | None = None,
    vocab_size: int | None = None,
    tolerance: float | None = None,
    points: int = 0,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> TrainLogReport:
    """Analyse the training log ``log`` *on* ``target`` (a file, or a run directory: its log
    is picked); only findings come back.

    ``metrics`` names the columns to check (default: loss, acc, lr, grad_norm, found under
    their usual names, e.g. ``train/loss``); ``preset`` picks the spike rule (see
    :data:`PRESETS`); checkpoint saves come from the log's own lines plus ``ckpt_steps``
    and the checkpoints in ``checkpoints`` (a directory) there (default: the host's
    ``checkpoints:``, as for ``remotekit train-log``; their names, else their own step keys; a
    run directory's ``checkpoints/`` too); ``steps_per_epoch`` marks epoch starts (else an
    ``epoch`` field does); ``run_part`` picks the run of a file that holds several (a step
    counter that falls and climbs again: 1 the first, -1 the last, the default);
    ``vocab_size`` is the vocabulary size (or the number of classes) the loss is a
    cross-entropy over, for a log that does not state it (a loss above ln of it from the
    start is unhealthy; without one, a loss that never falls is);
    ``tolerance`` is how many steps from an event still count as
    "at" it (default: max(5, 2 logging strides)); ``points`` > 0 also fetches a decimated
    series of each metric (for :func:`plot_report`).

    A log that cannot be analysed gives a report with ``errors`` and exit code 2; a script
    that stopped before its final record (killed, crashed) raises
    :class:`~remotekit.DiagnosticError` naming host and step, and the engine's own errors
    (connection, timeout, container, interpreter) are raised too.
    """
    options = TrainLogOptions.of(
        log,
        metrics=metrics,
        preset=preset,
        ckpt_steps=ckpt_steps,
        ckpt_dir=defaults.checkpoints(target, checkpoints),
        steps_per_epoch=steps_per_epoch,
        run_part=run_part,
        vocab_size=vocab_size,
        tolerance=tolerance,
        points=points,
    )
    run = run_diagnostic(
        target, SCRIPT, options.argv(), step="train-log", timeout=timeout, on_record=on_record
    )
    host = run.result.host or target.name
    return build_report(host, str(log), run.records, duration_s=run.result.duration_s)
