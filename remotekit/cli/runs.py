"""The tasks of runs (``run --detach`` / ``py --detach``): ``runs``, ``logs``, ``stop``, ``rm``.

``runs`` lists every run on the selected targets (``--clean``: after removing the finished). ``logs``, ``stop`` and ``rm`` take a run's
id and find it on the selected targets (default: the default target): the one that has it.
``logs --follow`` streams the output as it is written, resumes after a dropped connection
without losing or repeating a byte, and exits with the run's exit code; a ``logs`` cut short
(Ctrl-C, a connection that stayed down) prints the ``--offset`` that goes on from there.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from invoke import Context, Exit

import remotekit
from remotekit.cli.output import fan_out
from remotekit.cli.selection import OPTIONS_HERE, Selection, fleet_task
from remotekit.fleet import fleet
from remotekit.render import Console, to_json
from remotekit.runs import (
    LogStream,
    Run,
    RunInfo,
    check_id,
    check_stream,
    list_runs,
    prune,
    render_runs,
)

ID_HELP = "the run's id (what run --detach printed; see `remotekit runs`)"


@fleet_task(
    help={
        "clean": "first remove every run that ended (exited, stopped, lost): the retention rule",
        "older_than": "with --clean: only those that ended at least this many days ago",
    }
)
def runs(c: Context, sel: Selection, clean: bool = False, older_than: float = 0.0) -> None:
    """List the runs (run --detach / py --detach) on targets.

    Id, (Slurm) job, state, exit code, started, duration, command, log (--clean
    [--older-than DAYS]: remove the finished ones first)."""
    if older_than and not clean:
        raise Exit("remotekit: --older-than goes with --clean", code=2)

    def list_them(t: remotekit.Target, console: Console) -> list[RunInfo]:
        if clean:
            for gone in prune(t, older_than * 86400.0):
                console.line(t.name, "stderr", f"removed run {gone}")
        return t.runs()

    fan_out(sel, list_them, render=render_runs, title="runs")


def find_run(sel: Selection, run_id: str) -> Run:
    """The run ``run_id`` on whichever selected target has it (exit 2: none, or several)."""
    if not run_id or run_id.startswith("-"):  # `stop --help` hands invoke's --help over as ID
        raise Exit("remotekit: give the run's id first (see `remotekit runs`)", code=2)
    usage(check_id, run_id)
    targets = sel.targets()
    if len(targets) == 1:
        return targets[0].run_handle(run_id)
    with fleet(targets, parallel=sel.parallel or None) as f:
        outcomes = f.map(lambda t: [r.id for r in t.runs()])
    having = [t for t, o in zip(targets, outcomes) if o.error is None and run_id in o.value]
    if len(having) != 1:
        where = "none of " if not having else "several of "
        hosts = ", ".join(t.name for t in (having or targets))
        said = f"remotekit: run {run_id}: on {where}the selected hosts ({hosts})"
        listed = f"; `remotekit runs --host {shlex.quote(hosts.replace(', ', ','))}` lists theirs"
        raise Exit(said + ("" if having else listed), code=2)
    return having[0].run_handle(run_id)


def failed(run: Run, exc: remotekit.RemotekitError) -> str:
    """What to say when a run's call failed: for a run that its host does not have (a typo,
    or removed), that, and where the runs are listed (as `kubectl logs` of an unknown pod
    says NotFound); else the error."""
    with contextlib.suppress(remotekit.RemotekitError):
        if not list_runs(run.target, run.id):
            host = run.target.name
            listed = f"`remotekit runs --host {shlex.quote(host)}` lists its runs"
            return f"remotekit: no run {run.id} on {host}; {listed}"
    return f"remotekit: {exc}"


def usage(check: Any, value: str) -> None:
    """``check(value)``; its ValueError a usage error (exit 2), before anything runs."""
    try:
        check(value)
    except ValueError as exc:
        raise Exit(f"remotekit: {exc} (see `remotekit runs`)", code=2) from None


def act(run: Run, what: Any) -> Any:
    """``what()`` with ``run``'s target open; its errors (masked: they left the run's handle)
    are a usage exit naming them."""
    try:
        with run.target:
            return what()
    except remotekit.RemotekitError as exc:
        raise Exit(failed(run, exc), code=2) from None


@fleet_task(
    positional=["id"],
    help={
        "id": ID_HELP,
        "follow": "go on as it is written, until the run ends; exit with its exit code",
        "tail": "start at the last N lines",
        "offset": "start at byte N of the log: where an interrupted logs said it stopped",
        "stream": "output (both, as they came; default), stdout or stderr",
    },
)
def logs(
    c: Context,
    id: str,
    sel: Selection = OPTIONS_HERE,
    follow: bool = False,
    tail: int = -1,
    offset: int = -1,
    stream: str = "output",
) -> None:
    """A run's output, byte for byte: `logs ID`, `logs ID --follow` until it ends.

    A follow reconnects; cut short, it says the --offset that goes on from there."""
    if tail >= 0 and offset >= 0:
        raise Exit("remotekit: give --tail or --offset, not both", code=2)
    usage(check_stream, stream)
    run = find_run(sel, id)
    chunks = run.logs(
        follow=follow,
        tail=None if tail < 0 else tail,
        offset=None if offset < 0 else offset,
        stream=stream,
        on_warning=lambda said: print(f"remotekit: {said}", file=sys.stderr, flush=True),
    )
    shown = _Shown(chunks)
    try:
        with run.target, shown.interrupts_deferred():
            for chunk in chunks:
                shown.write(chunk)
    except KeyboardInterrupt:
        print(_resume(run, shown.at, follow, stream, "interrupted"), file=sys.stderr)
        raise Exit(code=130) from None
    except remotekit.RemotekitError as exc:
        said = failed(run, exc) if shown.at is None else f"remotekit: {exc}"
        if shown.at is not None:
            said += "\n" + _resume(run, shown.at, follow, stream, "cut short")
        raise Exit(said, code=2) from None
    if chunks.lost_bytes:
        print(
            f"remotekit: run {id} on {run.target.name}: {chunks.lost_bytes} bytes of its "
            f"{stream} could not be written there (the disk was full): they are not in it",
            file=sys.stderr,
        )
    if follow:
        if chunks.state == "lost":
            raise Exit(f"remotekit: run {id} was lost (its supervisor vanished)", code=2)
        raise Exit(code=chunks.exit_code or 0)


class _Shown:
    """Chunks written to stdout, and the log offset where what was written ends (``at``:
    None before the read said where it starts). A Ctrl-C that comes while a chunk is being
    written is held until that chunk is out and counted, so ``at`` is exact: the resumed
    read repeats nothing and loses nothing."""

    def __init__(self, chunks: LogStream):
        self.chunks = chunks
        self.written: int | None = None  # where the chunks written end
        self._resets = 0
        self._writing = False
        self._held = False

    @property
    def at(self) -> int | None:
        return self.written if self.written is not None else self.chunks.offset

    def write(self, chunk: bytes) -> None:
        if self.chunks.resets != self._resets:  # followed from the log's start again
            self.written, self._resets = None, self.chunks.resets
        begin = self.at or 0
        self._writing = True
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        self.written = begin + len(chunk)
        self._writing = False
        if self._held:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def interrupts_deferred(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers are the main thread's: nothing to hold
            return

        def on_sigint(signum: int, frame: Any) -> None:
            if self._writing:
                self._held = True
            else:
                raise KeyboardInterrupt

        old = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)


def _resume(run: Run, at: int | None, follow: bool, stream: str, what: str) -> str:
    """What goes on from where an interrupted ``logs`` stopped, as a line to type."""
    if at is None:
        return f"remotekit: {what} before any output of run {run.id}"
    again = ["remotekit", "logs", run.id, "--host", run.target.name, "--offset", str(at)]
    again += ["--follow"] if follow else []
    again += ["--stream", stream] if stream != "output" else []
    return f"remotekit: {what} at byte {at} of run {run.id}'s log; go on with: {shlex.join(again)}"


@fleet_task(
    positional=["id"],
    help={"id": ID_HELP, "grace": "seconds between TERM and KILL (default 10)"},
)
def stop(c: Context, id: str, sel: Selection = OPTIONS_HERE, grace: float = 10.0) -> None:
    """Stop a run: TERM to its whole tree (setsid children, daemons too), KILL after --grace."""
    run = find_run(sel, id)
    info = act(run, lambda: run.stop(grace=grace))
    print(to_json(info, indent=2) if sel.json else render_runs([info]))


@fleet_task(positional=["id"], help={"id": ID_HELP})
def rm(c: Context, id: str, sel: Selection = OPTIONS_HERE) -> None:
    """Remove a finished run's record and log (a running one is refused: stop it first)."""
    run = find_run(sel, id)
    act(run, run.rm)
    gone = {"id": id, "host": run.target.name, "removed": True}
    print(to_json(gone) if sel.json else f"{run.target.name}: removed run {id}")
