"""How every fleet task runs and reports: one function on each selected host, in parallel.

:func:`fan_out` prints each host's lines prefixed with its name, a section per host when a
task renders one, a summary table when several hosts ran (one host: its result, and a failure's
reason once, in full), and exits with the worst host's code: 0 all OK, 1 findings, 2 some host failed, 130 interrupted. ``--json``
prints one JSON document instead. :func:`watch_or_fan_out` is the same with ``--watch``.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from invoke import Exit

import remotekit
from remotekit.cli.selection import OptionGroup, Selection
from remotekit.fleet import FleetInterrupted, HostOutcome, fleet
from remotekit.render import Console, mask_strings, table, to_json, to_jsonable, visible

#: ``fn(target, console)``: what a task does on one host.
OnHost = Callable[[remotekit.Target, Console], Any]


@dataclass(frozen=True)
class Watching:
    """``--watch [N]`` and ``--count K``: a diagnostic refreshed (``watch`` None: run once)."""

    watch: Any = None
    count: int = 0


WATCHING = OptionGroup(
    "watching",
    Watching,
    {
        "watch": "refresh every N seconds (default 2) until Ctrl-C: in place on a terminal, "
        "appended when piped (one JSON line a refresh with --json)",
        "count": "with --watch: stop after this many refreshes (default: until Ctrl-C)",
    },
    {"optional": ("watch",)},
)


def redactor(targets: list[remotekit.Target]) -> Callable[[str], str]:
    """Mask every selected host's secret values in a text of ours."""

    def mask(text: str) -> str:
        for t in targets:
            text = t.redact(text)
        return text

    return mask


def fan_out(
    sel: Selection,
    fn: OnHost,
    *,
    render: Callable[[Any], str] | None = None,
    title: str = "",
    after: Callable[[list[HostOutcome], Console], int] | None = None,
    mask_output: bool = False,
) -> None:
    """Run ``fn(target, console)`` on the selected targets; print, summarize, exit.

    ``render(value)`` draws a host's section; ``after(outcomes, console)`` runs last (e.g.
    drawing a plot) and may raise the exit code; ``mask_output`` masks secret values in the
    steps' own output too (live lines and --json results).
    """
    targets = sel.targets()
    mask = redactor(targets)
    console = Console([t.name for t in targets], quiet=sel.json, mask=mask, mask_output=mask_output)
    if sel.verbose:
        _trace_chains(targets, console)
    outcomes, interrupted = _run_on_fleet(sel, targets, fn, console, render, title)
    if any(isinstance(o.error, BrokenPipeError) for o in outcomes):
        raise BrokenPipeError  # stdout's reader went away: the steps are stopped; say no more
    code = 130 if interrupted else max((o.exit_code for o in outcomes), default=0)
    missing = [t.name for t in targets if t.name not in {o.host for o in outcomes}]
    if sel.json:
        doc: dict[str, Any] = {"exit_code": code, "interrupted": interrupted}
        doc["hosts"] = [outcome_json(o, mask, mask_output) for o in outcomes]
        doc["hosts"] += [{"host": h, "status": "not run", "exit_code": None} for h in missing]
        print(to_json(doc, indent=2))
    elif interrupted:
        pass  # each cancelled step said so as it ended; the last line counts them
    elif len(targets) == 1:
        _say_failed_step(outcomes, console)
    else:
        rows = [(o.host, o.status, f"{o.duration_s:.1f}s", host_finding(o)) for o in outcomes]
        rows += [(h, "not run", "-", "interrupted") for h in missing]
        console.say("\n" + table(["host", "status", "time", "finding"], rows))
    if interrupted:
        raise Exit(interrupted_line(outcomes, missing), code=130)
    if after is not None:
        code = max(code, after(outcomes, console))
    if code:
        raise Exit(code=code)


def dry_run_steps(targets: list[remotekit.Target], fn: OnHost) -> None:
    """``--dry-run``: ``fn(target, console)`` on each of ``targets`` (made with
    ``dry_run=True``: they run no step and connect nowhere) in turn; each step it would run
    prints as ``host: chain``. A host whose steps cannot even be named (no --checkpoints and no
    ``checkpoints:``, a local file that cannot be read) says why on stderr, and the exit code
    is then 2."""
    quiet, code = Console(quiet=True), 0
    for t in targets:
        t.trace = lambda step, chain, t=t: print(
            visible(f"{t.name}: {t.redact(chain)}"), flush=True
        )
        try:
            fn(t, quiet)
        except remotekit.DryRun:
            pass
        except remotekit.RemotekitError as exc:
            print(f"{t.name}: error: {exc}", file=sys.stderr, flush=True)
            code = 2
    if code:
        raise Exit(code=code)


def _trace_chains(targets: list[remotekit.Target], console: Console) -> None:
    """--verbose: each host's layer chain now, each step's full chain as it starts."""
    for t in targets:
        console.line(t.name, "stderr", f"chain: {t.chain}")
        t.trace = lambda step, chain, host=t.name: console.line(
            host, "stderr", f"step {step}: {chain}"
        )


def _run_on_fleet(
    sel: Selection,
    targets: list[remotekit.Target],
    fn: OnHost,
    console: Console,
    render: Callable[[Any], str] | None,
    title: str,
) -> tuple[list[HostOutcome], bool]:
    """``fn`` on every target, a host's section printed as it finishes, with a progress line;
    the outcomes, and whether Ctrl-C cut the run short."""
    total, done, failed = len(targets), [0], [0]

    def on_done(o: HostOutcome) -> None:
        done[0] += 1
        failed[0] += o.exit_code == 2
        if render is not None and o.error is None:
            section = render(o.value)
            console.say(
                f"== {o.host}{' ' + title if title else ''} ==\n{section}" if total > 1 else section
            )
        elif isinstance(o.error, remotekit.StepCancelled):  # Ctrl-C: said once, as itself
            console.line(o.host, "stderr", visible(o.error.message))
        elif o.error is not None and not isinstance(o.error, BrokenPipeError):
            console.line(o.host, "stderr", f"error: {o.error}")
        console.progress(f"[{done[0]}/{total} hosts done, {failed[0]} failed]")

    console.progress(f"[0/{total} hosts done, 0 failed]")
    with fleet(targets, parallel=sel.parallel or None) as f:
        try:
            outcomes, interrupted = f.map(lambda t: fn(t, console), on_done=on_done), False
        except FleetInterrupted as exc:
            outcomes, interrupted = exc.outcomes, True
    console.done()
    return outcomes, interrupted


def interrupted_line(outcomes: list[HostOutcome], missing: list[str]) -> str:
    """Ctrl-C's last line, with how many hosts had finished first or never started (each
    cancelled step said so once, on its own line)."""
    cancelled = sum(isinstance(o.error, remotekit.StepCancelled) for o in outcomes)
    counts = (
        [f"{len(outcomes) - cancelled} host(s) had finished"] if len(outcomes) > cancelled else []
    )
    if missing:
        counts.append(f"{len(missing)} never started")
    return "remotekit: interrupted" + (f"; {', '.join(counts)}" if counts else "")


def _say_failed_step(outcomes: list[HostOutcome], console: Console) -> None:
    """One host, no table: a step that exited non-zero says so (its output is above; an
    error was already said in full as the host finished)."""
    for o in outcomes:
        if isinstance(o.value, remotekit.Result) and not o.value.ok:
            console.line(o.host, "stderr", f"failed: exit {o.value.exit_code}")


def reason_line(error: BaseException) -> str:
    """An error's reason on one line: its message's first line, and for a message that ends
    with the step's last output, that output's last line (the traceback's verdict)."""
    text = str(getattr(error, "message", None) or error)
    head, has_tail, tail = text.partition("; last output:\n")
    first = head.splitlines()[0] if head else ""
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    reason = f"{first}; last output: {last}" if has_tail and last else first
    return (
        reason
        if isinstance(error, remotekit.RemotekitError)
        else f"{type(error).__name__}: {reason}"
    )


def host_finding(o: HostOutcome) -> str:
    """A host's row in the summary table: its error's reason, or what its result found first."""
    if o.error is not None:
        return reason_line(o.error)
    value = o.value
    if isinstance(value, remotekit.Result):
        if value.detached is not None:
            return value.detached.render()
        stopped = f"stopped {len(value.stopped)} leftover process(es)" if value.stopped else ""
        if value.ok:
            return stopped
        tail = (value.stderr or value.stdout).strip().splitlines()
        text = f"exit {value.exit_code}" + (f": {tail[-1]}" if tail else "")
        return f"{text}; {stopped}" if stopped else text
    findings = getattr(value, "findings", None) or getattr(value, "errors", None) or ()
    if findings:
        first = findings[0]
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        return f"{first}{more}"
    return ""


def outcome_json(o: HostOutcome, mask: Callable[[str], str], mask_output: bool) -> dict[str, Any]:
    """One host in --json: our texts (errors, chain) masked; the result as the step made it,
    unless ``mask_output``."""
    out: dict[str, Any] = {"host": o.host, "status": o.status, "exit_code": o.exit_code}
    out["duration_s"] = round(o.duration_s, 3)
    out["chain"] = mask(o.chain)
    if o.error is not None:
        out["error"] = {"type": type(o.error).__name__, "message": mask(str(o.error))}
    else:
        if isinstance(o.value, remotekit.Result) and o.value.detached is not None:
            out["id"] = o.value.detached.id  # a started run's id, where a script looks first
        value = to_jsonable(o.value)
        out["result"] = mask_strings(value, mask) if mask_output else value
    return out


def watch_or_fan_out(
    sel: Selection,
    fn: OnHost,
    *,
    render: Callable[[Any], str],
    title: str,
    watching: Watching,
) -> None:
    """A diagnostic once (:func:`fan_out`), or with ``--watch [N]`` again and again: ``fn`` on
    every selected host, one frame a refresh.

    A watch ends with exit 0 on Ctrl-C (every step still running there is stopped); after
    ``--count`` refreshes, with the last refresh's worst exit code.
    """
    watch, count = watching.watch, watching.count
    if watch is None:
        if count:
            raise Exit("remotekit: --count goes with --watch", code=2)
        return fan_out(sel, fn, render=render, title=title)
    from remotekit.watch import Screen, fleet_frame, parse_interval
    from remotekit.watch import watch as refresh_until

    try:
        interval = parse_interval(watch)
    except ValueError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    if count < 0:
        raise Exit("remotekit: --count takes a number of refreshes >= 1", code=2)
    targets = sel.targets()
    quiet = Console(quiet=True)
    mask = redactor(targets)
    with fleet(targets, parallel=sel.parallel or None) as f:
        frame = fleet_frame(f, lambda t: fn(t, quiet), render, mask=mask)
        show: Callable[[], str] = frame
        if sel.json:

            def show() -> str:
                frame()
                hosts = [outcome_json(o, mask, False) for o in frame.last]
                return to_json({"exit_code": frame.exit_code, "hosts": hosts})

        shown = refresh_until(
            show,
            interval=interval,
            count=count or None,
            title=f"remotekit {title}",
            screen=Screen(live=False) if sel.json else Screen(),
            header=not sel.json,
        )
    if count and shown >= count and frame.exit_code:
        raise Exit(code=frame.exit_code)


def progress_line(console: Console, label: str) -> Any:
    """A transfer's bytes, rate and ETA on ``console``'s progress line (a terminal only,
    never with --json): an ``on_progress(done, total)`` callback."""
    from remotekit.progress import Progress

    return Progress(label, draw=console.progress)


def shared_progress_line(label: str) -> Callable[[Console], Any]:
    """One progress line for a task's hosts together (their bytes summed); made on first use,
    from whichever host's thread comes first, with :func:`fan_out`'s console."""
    lock = threading.Lock()
    made: list[Any] = []

    def get(console: Console) -> Any:
        with lock:
            if not made:
                made.append(progress_line(console, label))
            return made[0]

    return get


def warner(console: Console, host: str) -> Callable[[str], None]:
    """An ``on_warning`` callback: a host's warning on its prefixed stderr line; with --json
    (stdout is for the JSON only, but a warning must be seen) on plain stderr."""

    def warn(message: str) -> None:
        if console.quiet:
            print(visible(f"{host}: warning: {message}"), file=sys.stderr, flush=True)
        else:
            console.line(host, "stderr", f"warning: {message}")

    return warn


def step_notes(t: remotekit.Target, r: remotekit.Result, console: Console) -> None:
    """What the engine did beside the step: a detached process, stopped leftovers."""
    if r.detached is not None:
        console.line(t.name, "stdout", r.detached.render())
    for what in r.stopped:
        console.line(t.name, "stderr", f"stopped, left running by the step: {what}")
    for what in r.still_running:
        console.line(t.name, "stderr", f"could not stop, still running: {what}")
