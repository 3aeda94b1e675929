"""``train-log --follow``: a training log followed there as it grows, each new incident
(spike, cliff, non-finite run, resume) handed over as it is found (:func:`follow_train_log`,
an iterator of :class:`Incident`, with a :class:`FollowStatus` a second)."""

from __future__ import annotations

import math
import posixpath
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from remotekit.diagnostics import defaults
from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    OutputTail,
    Record,
    renamed,
    run_records,
)
from remotekit.diagnostics.trainlog.api import SCRIPT
from remotekit.diagnostics.trainlog.model import Event, LogSource, Spike
from remotekit.diagnostics.trainlog.words import (
    NOT_BACK,
    SPIKE_COLUMNS,
    event_line,
    num,
    spike_cells,
)
from remotekit.errors import DiagnosticError, RemotekitError
from remotekit.follow import Resumable, Stopped
from remotekit.remote.protocol import FINAL, number
from remotekit.remote.trainlog.options import TrainLogOptions
from remotekit.remote.trainlog.records import FollowState
from remotekit.result import Result, Shown
from remotekit.runs import STATES, ended_code, ended_words
from remotekit.step import MAX_TIMEOUT_S

if TYPE_CHECKING:
    from remotekit.runs import Run
    from remotekit.target import Target

__all__ = ["FollowStatus", "Incident", "LogFollow", "follow_train_log"]

#: Seconds ``close()`` waits for the follower there to stop, beyond the host's kill grace:
#: the stop lands with its next status record (one a second), then the runner stops it.
STOP_WAIT_S = 5.0
#: Seconds past the ``timeout`` the follow ends at by itself there before the step is stopped.
TIMEOUT_MARGIN_S = 30.0


@dataclass(frozen=True, repr=False)
class FollowStatus(Shown, FollowState):
    """Where a followed log stands (one a second; its fields: the ``status`` record,
    :class:`~remotekit.remote.trainlog.records.FollowState`): ``state`` "waiting" (``why``:
    no file yet, empty, no rows) or "following"; the latest ``step`` and ``loss``, ``rate``
    in steps a second, the ``rows`` judged, ``lines`` and ``bytes`` read, ``idle_s`` since
    the last new line, ``incidents`` reported; ``backlog``, once: the incidents already in
    the log when the follow began (not reported: ``train-log`` without ``--follow`` lists
    them). Its ``str()`` is :meth:`line`, the status line ``train-log --follow`` shows."""

    repr_keys = ("state", "step", "incidents")

    def render(self) -> str:
        return self.line()

    def backlog_line(self) -> str | None:
        """What the log held when the follow began, in words (None but in the first status)."""
        if not self.backlog:
            return None
        return (
            f"{self.backlog} incident(s) already in the log up to step {num(self.step)} "
            "(train-log without --follow lists them)"
        )

    def line(self) -> str:
        """``step 1200  loss 2.31  4.1 steps/s  2 incidents`` (or why it waits)."""
        if self.state == "waiting":
            return f"waiting: {self.why or 'no rows yet'}"
        rate = f"{num(self.rate, 3)} steps/s" if self.rate is not None else "- steps/s"
        idle = f"  (no new line for {num(self.idle_s, 2)} s)" if (self.idle_s or 0) >= 10 else ""
        return (
            f"step {num(self.step)}  loss {num(self.loss)}  {rate}  "
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
            cells = spike_cells(self.spike, tol)
            pairs = [_pair(h, c) for h, c in zip(SPIKE_COLUMNS[3:], cells[3:]) if c != "-"]
            line = f"step {cells[0]}: {cells[1]} {cells[2]}: " + ", ".join(pairs)
            resume = self.spike.resume_line()  # what the checkpoint resumed from lacked
            return line if resume is None else f"{line}; {resume}"
        assert self.event is not None
        return event_line(self.event)


def _pair(header: str, cell: str) -> str:
    """A column's header and cell as words: ``back after 12 steps``, but ``not back``
    alone (never "back after not back")."""
    return cell if header == "back after" and cell == NOT_BACK else f"{header} {cell}"


class LogFollow:
    """The incidents of a log followed there, an iterator of :class:`Incident`; see
    :func:`follow_train_log`. ``status`` / ``source`` / ``warnings``: the latest word from
    there; ``exit_code`` once the follow ended by itself (None while it runs, or stopped).
    Following a run's log (``run``, its handle): the follow ends with the run, and then
    ``run_state`` / ``run_exit_code`` are how it ended (:meth:`run_ended` in words)."""

    def __init__(
        self,
        target: Target,
        options: TrainLogOptions,
        *,
        timeout: float | None,
        on_status: Callable[[FollowStatus], None] | None,
        on_warning: Callable[[str], None] | None,
        run: Run | None = None,
    ) -> None:
        self.target, self.path, self.run = target, options.path, run
        self.run_state: str | None = None
        self.run_exit_code: int | None = None
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
        # one resumable stream, as logs --follow: a silent connection (no status a second)
        # is closed and followed again, like a dropped one
        self._stream = Resumable(target.close, stop=self._stop, on_again=self._say_again)
        self._tail = OutputTail()
        self._after: float | None = None  # the last step a status named (-inf: none judged)
        self._thread = threading.Thread(
            target=self._run, args=(options, timeout), name="train-log-follow", daemon=True
        )
        self._thread.start()

    # -- there (the step, in its own thread) ---------------------------------------------

    def _run(self, options: TrainLogOptions, timeout: float | None) -> None:
        """The follow there; after a lost or silent connection, again (the rules of
        :class:`remotekit.follow.Resumable`) from the last step a status named, so that an
        incident written meanwhile is reported and none twice."""
        end = None if timeout is None else time.monotonic() + timeout
        try:
            result = self._stream.run(lambda: self._step(options, end))
            self._events.put(("end", result))
        except Stopped:
            self._events.put(("stopped", None))
        except BaseException as exc:  # the engine's errors, raised where the caller iterates
            self._events.put(("error", exc))

    def _step(self, options: TrainLogOptions, end: float | None) -> Result:
        """One follow there, up to ``end``, after the last step judged (a follow taken up
        again); the records to the caller's queue."""

        def record(rec: Record) -> None:
            self._stream.heard()
            self._judged(rec)
            self._events.put(("record", rec))

        def output(stream: str, line: str) -> None:
            if self._stop.is_set():
                raise Stopped
            self._tail(stream, line)

        options = replace(options, after_step=self._after)
        step_timeout = MAX_TIMEOUT_S
        if end is not None:  # the follow ends by itself; the step a little later
            left = max(1.0, end - time.monotonic())
            options = replace(options, duration=round(left, 3))
            step_timeout = min(MAX_TIMEOUT_S, left + TIMEOUT_MARGIN_S)
        _, result = run_records(
            self.target,
            SCRIPT,
            options.argv(),
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
            self._stream.moved()  # a connection that worked: the tries start again
        step = {"status": "step", "spike": "onset_step", "event": "step"}.get(str(t))
        at = number(rec.get(step)) if step is not None else None
        if t == "status" or at is not None:
            known = -math.inf if self._after is None else self._after
            self._after = max(known, -math.inf if at is None else at)

    def _say_again(self, exc: RemotekitError, tries: int) -> None:
        """The warning that the follow starts again (``tries``: failed in a row before)."""
        where = "its start" if self._after in (None, -math.inf) else f"step {num(self._after)}"
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
            self.status = FollowStatus.from_dict(rec)
            if self.on_status is not None:
                self.on_status(self.status)
        elif t == "source":
            self.source = LogSource.from_dict(rec)
        elif t in ("warning", "error"):
            msg = str(rec.get("message", ""))
            (self.warnings if t == "warning" else self._errors).append(msg)
            if t == "warning" and self.on_warning is not None:
                self.on_warning(msg)
        elif t == "spike":
            tol = self.source.tolerance if self.source is not None else 0.0
            sp = Spike.from_dict(rec)
            sp = replace(sp, at_event=sp.distance is not None and abs(sp.distance) <= tol)
            return self._incident(sp.kind, sp.step, sp.metric, spike=sp)
        elif t == "event":
            ev = Event.from_dict(rec)
            return self._incident(ev.kind, ev.step, None, event=ev)
        elif t == FINAL:
            self._final = True
            code = rec.get("exit_code")
            self.exit_code = code if code in (EXIT_OK, EXIT_FINDINGS) else EXIT_FAILED
            state, code = rec.get("run_state"), rec.get("run_exit_code")
            self.run_state = state if state in STATES else None
            self.run_exit_code = code if type(code) is int else None
        return None

    def run_ended(self) -> str | None:
        """``run ID exited with code 3`` (:func:`~remotekit.runs.ended_words`), once the
        follow of a run ended with it; else None."""
        if self.run is None or not self._final:
            return None
        return f"run {self.run.id} {ended_words(self.run_state, self.run_exit_code)}"

    def run_exit(self) -> int | None:
        """The exit code ``logs --follow`` gives the run that ended (None: no run followed,
        or not to its end)."""
        if self.run is None or not self._final:
            return None
        return ended_code(self.run_state, self.run_exit_code)

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


@renamed(path="log", ckpt_dir="checkpoints")
def follow_train_log(
    target: Target,
    log: str | None = None,
    *,
    run: str | Run | None = None,
    timeout: float | None = None,
    on_status: Callable[[FollowStatus], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    **options: Any,
) -> LogFollow:
    """Follow the training log ``log`` *on* ``target`` as it grows: an iterator of each
    new :class:`Incident` (spike, cliff, non-finite run, resume) as it is found there, by
    the detector of :func:`analyze_train_log` over the log's latest rows. ``options``: those
    of :func:`analyze_train_log` (``metrics``, ``preset``, ``ckpt_steps``, ``checkpoints``,
    ``steps_per_epoch``, ``tolerance``; not ``points``; ``checkpoints`` defaults to the host's
    ``checkpoints:`` there too)::

        with follow_train_log(t, "/workspace/run/log.jsonl") as live:
            for incident in live:
                print(incident.render())

    Followed: logs that grow by appending (JSON lines, CSV, text logs, key/value table
    consoles, TensorBoard event files); W&B run files and JSON documents
    (``trainer_state.json``) are not: the iterator raises
    :class:`~remotekit.DiagnosticError` saying so, as for a log that cannot be read. What
    the log held when the follow began is the baseline, not reported (``status.backlog``
    counts its incidents). A truncated or replaced (rotated) log is read again from its
    start, with a warning. ``on_status`` hears a :class:`FollowStatus` every second,
    ``on_warning`` each warning, both in the iterating thread.

    No step timeout: it follows until :meth:`LogFollow.close` (leaving the ``with``; Ctrl-C
    in the loop, then close), which stops the follower there; ``timeout`` seconds bound the
    whole follow (it then ends by itself, ``exit_code`` 1 if it reported incidents). A lost
    connection, or one gone silent (no status for :data:`~remotekit.follow.SILENT_S` s), is a
    warning: the follow starts again there (:data:`~remotekit.follow.RECONNECTS` tries in a
    row) after the last step it had judged, so an incident written meanwhile is still reported, once.
    The engine's other errors are raised by the iteration.

    ``run`` (instead of ``log``: an id, as ``remotekit runs`` lists them, or a
    :class:`~remotekit.runs.Run`): the output log of that run on ``target``, followed until
    the run ends, as ``logs --follow`` is: its last lines are judged, then the iteration
    ends, and :meth:`LogFollow.run_ended` says how the run ended.
    """
    if "points" in options:
        raise TypeError("follow_train_log() takes no points: a followed log sends no series")
    if (log is None) == (run is None):
        raise TypeError("follow_train_log() takes a log or a run, one of them")
    handle = target.run_handle(run) if isinstance(run, str) else run
    if handle is not None:
        log = handle.info().log
        options = {**options, "run_dir": posixpath.dirname(log)}
    # the API's name for it (ckpt_dir= is @renamed to it); the options' own: ckpt_dir
    ckpt_dir = defaults.checkpoints(target, options.pop("checkpoints", None))
    follow = TrainLogOptions.of(str(log), follow=True, ckpt_dir=ckpt_dir, **options)
    return LogFollow(
        target, follow, timeout=timeout, on_status=on_status, on_warning=on_warning, run=handle
    )
