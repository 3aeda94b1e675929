"""train-log's words: numbers, shares and p-values as the tables print them, and a spike's
cells and an event's line, shared by the report's text and a followed log's lines."""

from __future__ import annotations

import math

from remotekit.diagnostics.trainlog.model import Event, Onset, Spike

__all__ = [
    "KIND_WORDS",
    "SPIKE_COLUMNS",
    "event_line",
    "event_phrase",
    "num",
    "onset_line",
    "p_value",
    "pct",
    "spike_cells",
]


def num(v: float | None, digits: int = 4) -> str:
    """``v`` in ``digits`` significant digits, a whole number as such; ``-`` for None."""
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    """A share as a whole percent; ``-`` for None."""
    return "-" if v is None else f"{100 * v:.0f}%"


def p_value(v: float) -> str:
    """A p-value in two significant digits."""
    return f"{v:.2g}"


#: Each kind of event in the words of the diagnosis.
KIND_WORDS = {
    "checkpoint": "checkpoint saves",
    "resume": "resumes",
    "epoch": "epoch starts",
    "warmup": "the start without warmup",
    "lr-jump": "learning-rate jumps",
    "pause": "pauses in logging",
}


def event_phrase(s: Spike, tol: float) -> str:
    """Where a spike sits against its nearest event, ``tol`` steps counting as at it."""
    if s.event is None or s.event_step is None or s.distance is None:
        return "no event in the log"
    where = f"{s.event} {num(s.event_step)}"
    if abs(s.distance) <= tol:
        return f"{where} ({'+' if s.distance >= 0 else ''}{num(s.distance)})"
    side = "after" if s.distance > 0 else "before"
    return f"none within ±{num(tol)} (nearest: {where}, {num(abs(s.distance))} steps {side})"


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


def spike_cells(s: Spike, tol: float) -> tuple[str, ...]:
    """A spike's cells under :data:`SPIKE_COLUMNS` (the table, and a followed log's lines)."""
    back = (
        "-"
        if s.kind == "nonfinite"
        else (f"{num(s.recovery_steps)} steps" if s.recovery_steps is not None else "not back")
    )
    return (
        num(s.step),
        s.metric,
        s.kind,
        num(s.value),
        num(s.baseline),
        num(s.score, 3),
        back,
        event_phrase(s, tol),
        f"{s.bucket} ({s.run_position})" if s.bucket is not None else "-",
        s.rule or "-",
    )


def onset_line(o: Onset) -> str:
    """How the loss started, in one line: unhealthy from the start (and where it
    recovered), or how it stands against chance; where the chance level came from."""
    head = f"{o.metric} unhealthy from the start: " if o.unhealthy else f"{o.metric} "
    where = f" (chance from {o.chance_from})" if o.chance_from and o.chance is not None else ""
    return head + o.verdict + where


def event_line(e: Event) -> str:
    """``step 1200: resume: ...``: an event in one line."""
    return f"step {num(e.step)}: {e.kind}: {e.detail}"
