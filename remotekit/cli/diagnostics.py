"""The diagnostics' tasks: ``diagnose``, ``train-log``, ``ckpt-scan``, ``ckpt-inspect``,
``ckpt-diff``, ``ckpt-bisect``, ``demo``.

Each is a few lines over its module in :mod:`remotekit.diagnostics` (imported when the task
runs, so ``--list`` and ``--help`` stay quick and need no torch).
"""

from __future__ import annotations

import importlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from invoke import Context, Exit

import remotekit
from remotekit.cli.output import dry_run_steps, fan_out, progress_line, warner
from remotekit.cli.selection import (
    DRY_RUN_HELP,
    OPTIONS_HERE,
    TIMEOUT_HELP,
    OptionGroup,
    Selection,
    fleet_task,
    required,
    split_option,
)
from remotekit.fleet import HostOutcome
from remotekit.remote.ckpt import options as ckpt_options
from remotekit.remote.trainlog.base import DEFAULT_PRESET
from remotekit.remote.trainlog.options import task_help
from remotekit.render import Console


@dataclass(frozen=True)
class Loading:
    """How the checkpoint tasks load files there: weights_only unless --unsafe-pickle (the
    help of its flags is that of :class:`~remotekit.remote.ckpt.options.CkptOptions`)."""

    allow_global: Any = None
    unsafe_pickle: bool = False
    timeout: float = 0.0

    def kwargs(self) -> dict[str, Any]:
        """As the checkpoint functions take them."""
        return {
            "allow_globals": list(self.allow_global or ()),
            "unsafe_pickle": self.unsafe_pickle,
            "timeout": self.timeout or None,
        }


LOADING = OptionGroup(
    "load",
    Loading,
    {**ckpt_options.task_help(), "timeout": TIMEOUT_HELP},
    {"iterable": ("allow_global",)},
)


def _checkpoints() -> ModuleType:
    from remotekit.diagnostics import checkpoints

    return checkpoints


def scan_progress(console: Console, host: str) -> Callable[[Any], None]:
    """A checkpoint scan's progress (files, bytes) on ``console``'s progress line."""
    show = progress_line(console, f"{host}:")
    return lambda p: show.update("", p.bytes_done, p.bytes_total, _checkpoints().progress_line(p))


#: How to get what ``--plot`` needs: no package index has remotekit, so from its clone or
#: wheel (the ``plot`` extra), into a pipx install, or matplotlib alone into this Python.
PLOT_NEEDS = (
    "--plot needs matplotlib, which this Python ({exe}) cannot import. Install it: in a clone "
    "of remotekit, `pip install '.[plot]'` (or `bash .ci/setup demo`); with pipx, `pipx "
    "inject remotekit matplotlib`; else (a wheel, a venv) `{exe} -m pip install matplotlib`"
)


def need_matplotlib() -> None:
    """``--plot``'s check, before anything runs there: exit 2 saying how to install
    matplotlib, rather than after the whole analysis ran."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise Exit("remotekit: " + PLOT_NEEDS.format(exe=sys.executable), code=2) from None


def draw_logs(plot: str, reports: list[tuple[str, Any]], console: Console, hosts: int) -> int:
    """Draw each host's train-log report into ``plot`` (``plot-HOST.png`` each when ``hosts``
    is more than one); the exit code: 2 if one could not be drawn."""
    from remotekit.diagnostics import trainlog

    worst = 0
    for host, rep in reports:
        dest = plot if hosts == 1 else str(Path(plot).with_stem(f"{Path(plot).stem}-{host}"))
        try:
            trainlog.plot_report(rep, dest)
        except ImportError:  # installed, but broken since need_matplotlib() looked
            print("remotekit: " + PLOT_NEEDS.format(exe=sys.executable), file=sys.stderr)
            return 2
        except (OSError, ValueError) as exc:
            print(f"remotekit: could not draw {dest}: {exc}", file=sys.stderr)
            worst = 2
            continue
        console.say(f"plot: {dest}", stream="stderr")
    return worst


@fleet_task(
    help={
        "checkpoints": "the checkpoints to scan (default: --run-dir, then the host's "
        "`checkpoints:`: the first holding some)",
        "run_dir": "a training run's directory there: its checkpoints, its log, and one verdict",
        "plot": "with --run-dir: draw the log with spikes and saves into this PNG (needs matplotlib: the plot extra)",
        "dry_run": DRY_RUN_HELP,
    }
)
def diagnose(
    c: Context,
    sel: Selection,
    checkpoints: str = "",
    run_dir: str = "",
    plot: str = "",
    dry_run: bool = False,
) -> None:
    """Everything at once: env, gpu, disk and ckpt-scan, each its own step; a summary.

    With --run-dir DIR: also the run's log, spikes at the saves found, batches, and a verdict."""
    from remotekit.diagnostics.diagnose import diagnose as run_diagnose
    from remotekit.diagnostics.diagnose import render_section, render_summary

    if plot and not run_dir:
        raise Exit("remotekit: --plot needs --run-dir (it draws the run's log)", code=2)
    if plot:
        need_matplotlib()

    def diagnose_host(t: remotekit.Target, console: Console) -> Any:
        def show(section: Any) -> None:
            console.say(f"[{t.name}] {render_section(section)}\n\n")

        return run_diagnose(
            t,
            checkpoints=checkpoints or None,
            run_dir=run_dir or None,
            on_section=show,
            points=2000 if plot else 0,
        )

    if dry_run:  # each section is its own step: each prints
        return dry_run_steps(sel.targets(dry_run=True), diagnose_host)

    def draw(outcomes: list[HostOutcome], console: Console) -> int:
        logs = []
        for o in outcomes:
            section = o.value.section("train-log") if o.error is None else None
            if section is not None and section.report is not None:
                logs.append((o.host, section.report))
        return draw_logs(plot, logs, console, len(outcomes)) if plot else 0

    fan_out(sel, diagnose_host, render=render_summary, title="diagnose", after=draw)


@fleet_task(
    iterable=["metric"],
    help={
        **task_help(),
        "plot": "draw loss/accuracy with spikes and events into this PNG (needs matplotlib: the plot extra)",
        "timeout": TIMEOUT_HELP + "; with --follow: how long to follow (default: until Ctrl-C)",
        "on_incident": "with --follow: a command run here for each incident, the incident as "
        "JSON on its stdin (split like a shell would, run without one; a failure is a warning)",
        "run": "instead of --log: the output log of run ID (`remotekit runs`), on the selected "
        "host that has it; with --follow, until the run ends (exit: the run's code if it failed)",
        "dry_run": DRY_RUN_HELP,
    },
)
def train_log(
    c: Context,
    log: str = "",
    sel: Selection = OPTIONS_HERE,
    preset: str = DEFAULT_PRESET,
    metric: Any = None,
    ckpt_steps: str = "",
    steps_per_epoch: float = 0.0,
    run_part: int = 0,
    vocab_size: int = 0,
    plot: str = "",
    timeout: float = 0.0,
    checkpoints: str = "",
    follow: bool = False,
    on_incident: str = "",
    run: str = "",
    dry_run: bool = False,
) -> None:
    """What happened to this run: spikes, cliffs, events, and batch composition."""
    if plot and not follow:  # before --run looks the run up there
        need_matplotlib()
    if run and log:
        raise Exit("remotekit: --log or --run, not both", code=2)
    if run and dry_run:
        raise Exit("remotekit: --dry-run takes --log (--run looks the run up there)", code=2)
    if run:
        sel, log = run_log(sel, run)
    required(log=log)
    from remotekit.diagnostics import trainlog

    if on_incident and not follow:
        raise Exit("remotekit: --on-incident goes with --follow", code=2)
    if follow:
        if plot:
            raise Exit("remotekit: --plot draws a whole log: not with --follow", code=2)
        options = {
            "metrics": list(metric or ()) or None,
            "preset": preset,
            "ckpt_steps": ckpt_steps or None,
            "steps_per_epoch": steps_per_epoch or None,
            "timeout": timeout or None,
            "run": run or None,  # its log (--log), followed until the run ends
        }
        hook = split_option("on-incident", on_incident) if on_incident else None
        if dry_run:
            return dry_run_steps(
                sel.targets(dry_run=True),
                lambda t, console: follow_once(t, log, checkpoints or None, options),
            )
        return follow_log(sel, log, checkpoints or None, options, hook)

    def analyze(t: remotekit.Target, console: Console) -> Any:
        return trainlog.analyze_train_log(
            t,
            log,
            metrics=list(metric or ()) or None,
            preset=preset,
            ckpt_steps=ckpt_steps or None,
            checkpoints=checkpoints or None,
            steps_per_epoch=steps_per_epoch or None,
            run_part=run_part or None,
            vocab_size=vocab_size or None,
            points=2000 if plot else 0,
            timeout=timeout or None,
        )

    def draw(outcomes: list[HostOutcome], console: Console) -> int:
        if not plot:
            return 0
        drawable = [(o.host, o.value) for o in outcomes if o.exit_code != 2]
        return draw_logs(plot, drawable, console, len(outcomes))

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), analyze)
    fan_out(sel, analyze, render=trainlog.render_report, title="train-log", after=draw)


def follow_once(
    t: remotekit.Target, log: str, checkpoints: str | None, options: dict[str, Any]
) -> None:
    """The follow ``train-log --follow`` starts on ``t``, iterated to its end (on a dry-run
    target: its one step, reported)."""
    from remotekit.diagnostics import trainlog

    with trainlog.follow_train_log(t, log, checkpoints=checkpoints, **options) as live:
        for _ in live:
            pass


#: Seconds an --on-incident command may run before it is stopped (and warned about).
HOOK_TIMEOUT_S = 60.0
#: Seconds a stopped command's process group gets between TERM and KILL.
HOOK_GRACE_S = 1.0


class IncidentHook:
    """``--on-incident CMD``: ``argv`` run here once per incident, the incident's JSON on its
    stdin, one at a time and in order, in a thread of its own (a slow notifier never holds
    the follow up). A command that fails, is missing or runs past ``timeout`` is a warning
    (with its last output line); the follow goes on. Each command leads a process group of
    its own (its session), stopped whole (:func:`stop_group`) when it ends, at its timeout
    and when the hook is closed: nothing it started outlives it, or remotekit."""

    def __init__(
        self, argv: list[str], warn: Callable[[str], None], timeout: float = HOOK_TIMEOUT_S
    ) -> None:
        self.argv, self.warn, self.timeout = argv, warn, timeout
        self._todo: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None  # the command running now
        self._closed = False  # close() gave up waiting: start nothing more
        self._thread = threading.Thread(target=self._work, name="on-incident", daemon=True)
        self._thread.start()

    def __call__(self, incident_json: str) -> None:
        self._todo.put(incident_json)

    def _work(self) -> None:
        while (data := self._todo.get()) is not None:
            problem = self._run(data)
            if problem:
                self.warn(f"--on-incident {self.argv[0]}: {problem}")

    def _run(self, data: str) -> str:
        with self._lock:
            if self._closed:
                return ""
            try:
                proc = self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    start_new_session=True,  # a group to stop whole, out of reach of Ctrl-C
                )
            except OSError as exc:
                return exc.strerror or str(exc)
        try:
            out, _ = proc.communicate(data + "\n", timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return f"still running after {self.timeout:g} s: stopped"
        finally:
            stop_group(proc, HOOK_GRACE_S)  # at its timeout, or what it left running
            with self._lock:
                self._proc = None
        if proc.returncode == 0:
            return ""
        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "")
        return f"exit {proc.returncode}" + (f": {last.strip()}" if last else "")

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the command running now, as the terminal would have sent it
        were it in our process group."""
        with self._lock:
            if self._proc is not None:
                _signal_group(self._proc.pid, signal.SIGINT)

    def close(self, wait: float = HOOK_TIMEOUT_S) -> None:
        """Run the incidents still queued (at most ``wait`` seconds more), then stop: a
        command still running then (or when this wait is cut short) is stopped whole."""
        self._todo.put(None)
        try:
            self._thread.join(wait)
        finally:
            with self._lock:
                self._closed, proc = True, self._proc
            if proc is not None:
                stop_group(proc, HOOK_GRACE_S)


def stop_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session``): TERM,
    then KILL after ``grace`` seconds (or at once when the wait is interrupted) to what is
    left of it; ``proc`` is reaped. Its number is ``proc``'s pid, which no other process
    takes while ``proc`` is unreaped or the group has a member left."""
    gone = not _signal_group(proc.pid, signal.SIGTERM)
    end = time.monotonic() + grace
    try:
        while not gone and time.monotonic() < end:
            time.sleep(0.02)
            gone = proc.poll() is not None and not _signal_group(proc.pid, 0)
    finally:
        if not gone:
            _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal_group(pgid: int, signum: int) -> bool:
    """Whether ``signum`` reached a process of group ``pgid`` (0: whether one is there)."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def run_log(sel: Selection, run_id: str) -> tuple[Selection, str]:
    """``--run ID``: the one selected host that has run ``run_id``, and the run's log there."""
    from remotekit.cli.runs import act, find_run

    handle = find_run(sel, run_id)
    info = act(handle, handle.info)
    return replace(sel, host=handle.target.name, group="", all=False), info.log


def follow_log(
    sel: Selection,
    log: str,
    checkpoints: str | None,
    options: dict[str, Any],
    hook: list[str] | None,
) -> None:
    """``train-log --follow``: one host; each incident a line (``--json``: a JSON object a
    line, flushed), the status on a terminal's progress line, ``hook`` run per incident;
    Ctrl-C ends it with exit 0. Of a run (``options["run"]``), it ends with the run and
    says how: the exit code is the run's when it failed (``logs --follow``'s: 128+N for
    signal N, 2 for a lost run), else train-log's own (1: incidents were reported)."""
    from remotekit.diagnostics import trainlog
    from remotekit.render import to_json

    targets = sel.targets()
    if len(targets) != 1:
        raise Exit("remotekit: train-log --follow takes one --host", code=2)
    t = targets[0]
    console = Console([t.name], quiet=sel.json, mask=t.redact)
    warn = warner(console, t.name)
    notify = IncidentHook(hook, warn) if hook else None
    said: list[str] = []

    def on_status(status: Any) -> None:
        if live.source is not None and not said:
            said.extend(live.source.describe())
            console.line(t.name, "stderr", f"following {log}: " + "; ".join(said))
        if (backlog := status.backlog_line()) is not None:
            console.line(t.name, "stderr", backlog)
        console.progress(f"{t.name} | {status.line()}")

    code = 0
    with t:
        live = trainlog.follow_train_log(
            t,
            None if options["run"] else log,
            checkpoints=checkpoints,
            on_status=on_status,
            on_warning=warn,
            **options,
        )
        try:
            for incident in live:
                tol = live.source.tolerance if live.source is not None else 0.0
                if sel.json:
                    print(to_json(incident), flush=True)
                else:
                    console.line(t.name, "stdout", incident.render(tol))
                if notify is not None:
                    notify(to_json(incident))
            code = live.exit_code or 0
            if (ended := live.run_ended()) is not None:  # said with --json too, as a warning
                console.done()
                if sel.json:
                    print(f"{t.name}: {ended}", file=sys.stderr, flush=True)
                else:
                    console.line(t.name, "stderr", ended)
                code = live.run_exit() or code  # a failed run says more than its spikes
        except KeyboardInterrupt:  # how a follow is meant to end: exit 0
            if notify is not None:
                notify.interrupt()
        except remotekit.RemotekitError as exc:
            console.done()
            raise Exit(f"remotekit: {t.name}: {exc}", code=2) from None
        finally:
            console.done()
            try:
                live.close()
            finally:
                if notify is not None:
                    notify.close()
    if code:
        raise Exit(code=code)


@fleet_task(
    LOADING,
    help={**ckpt_options.task_help(ckpt_options.ScanOptions), "dry_run": DRY_RUN_HELP},
)
def ckpt_scan(
    c: Context,
    checkpoints: str = "",
    sel: Selection = OPTIONS_HERE,
    jobs: int = 1,
    load: Loading = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """Are my checkpoints corrupt? NaN/Inf in weights and optimizer state (exit 1 if so)."""
    ck = _checkpoints()

    def scan(t: remotekit.Target, console: Console) -> Any:
        return ck.scan_checkpoints(
            t,
            checkpoints or None,
            jobs=jobs,
            **load.kwargs(),
            on_progress=scan_progress(console, t.name),
            on_warning=warner(console, t.name),
        )

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), scan)
    fan_out(sel, scan, render=lambda r: ck.render_scan(r, plan=r.plan), title="ckpt-scan")


@fleet_task(
    LOADING,
    help={**ckpt_options.task_help(ckpt_options.InspectOptions), "dry_run": DRY_RUN_HELP},
)
def ckpt_inspect(
    c: Context,
    checkpoint: str = "",
    sel: Selection = OPTIONS_HERE,
    load: Loading = OPTIONS_HERE,
    resume: bool = False,
    dry_run: bool = False,
) -> None:
    """What a checkpoint holds: keys, dtypes, shapes, step/epoch, lr per param group.

    Whether a run can resume from it with nothing lost (--resume: exit 1 if not); no tensor
    data is read."""
    required(checkpoint=checkpoint)
    ck = _checkpoints()

    def inspect(t: remotekit.Target, console: Console) -> Any:
        return ck.inspect_checkpoint(t, checkpoint, resume=resume, **load.kwargs())

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), inspect)
    fan_out(
        sel,
        inspect,
        render=ck.render_inspect,
        title="ckpt-inspect",
    )


@fleet_task(
    LOADING,
    help={**ckpt_options.task_help(ckpt_options.DiffOptions), "dry_run": DRY_RUN_HELP},
)
def ckpt_diff(
    c: Context,
    a: str = "",
    b: str = "",
    sel: Selection = OPTIONS_HERE,
    top: int = 10,
    load: Loading = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """What changed between two checkpoints: the 'bad jump' finder."""
    required(a=a, b=b)
    ck = _checkpoints()

    def diff(t: remotekit.Target, console: Console) -> Any:
        return ck.diff_checkpoints(t, a, b, top=top, **load.kwargs())

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), diff)
    fan_out(
        sel,
        diff,
        render=ck.render_diff,
        title="ckpt-diff",
    )


@fleet_task(
    LOADING,
    help={
        **ckpt_options.task_help(ckpt_options.BisectOptions),
        "dry_run": DRY_RUN_HELP + " (the first step: which checkpoints follow depends on it)",
    },
)
def ckpt_bisect(
    c: Context,
    checkpoints: str = "",
    sel: Selection = OPTIONS_HERE,
    linear: bool = False,
    jobs: int = 1,
    load: Loading = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """The last clean and the first bad checkpoint, ordered by global_step."""
    ck = _checkpoints()

    def bisect(t: remotekit.Target, console: Console) -> Any:
        return ck.bisect_checkpoints(
            t,
            checkpoints or None,
            linear=linear,
            jobs=jobs,
            **load.kwargs(),
            on_progress=scan_progress(console, t.name),
        )

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), bisect)
    fan_out(sel, bisect, render=ck.render_bisect, title="ckpt-bisect")


@fleet_task(
    help={"dir": "where to make the samples there (default: a new temp dir, removed afterwards)"}
)
def demo(c: Context, sel: Selection, dir: str = "") -> None:
    """The main job in a minute, no server needed: make sample checkpoints and scan them."""
    from remotekit.diagnostics.demo import demo as run_demo

    def next_steps(outcomes: list[HostOutcome], console: Console) -> int:
        if outcomes and all(o.ok for o in outcomes):
            console.say(demo_next())
        return 0

    fan_out(
        sel,
        lambda t, console: run_demo(t, dir or None, on_progress=scan_progress(console, t.name)),
        render=_checkpoints().render_demo,
        title="demo",
        after=next_steps,
    )


#: What to try after the demo: (command, why). Each command is parsed by the real parser
#: in the tests, so what the demo suggests is always typeable.
DEMO_NEXT = (
    ("remotekit ckpt-scan --checkpoints DIR", "the same scan on your own checkpoints, here"),
    ("remotekit hosts --init", "declare your machines (~/.config/remotekit/hosts.yaml)"),
    ("remotekit ping --host NAME", "check each hop to one: ssh, container, python"),
    ("remotekit ckpt-scan --host NAME", "scan its `checkpoints:` there"),
    ("remotekit train-log --host NAME --log LOG", "a training log's spikes, and why"),
)


def demo_next() -> str:
    """The demo's last lines: the commands to try next, aligned, each with why; on a
    terminal too narrow for that, each why on its own line above its command (a command is
    never wrapped: it is there to be copied)."""
    from remotekit.result import fit_width

    width = max(len(cmd) for cmd, _ in DEMO_NEXT)
    lines = [f"  {cmd:<{width}}  # {why}" for cmd, why in DEMO_NEXT]
    fit = fit_width()
    if fit is not None and max(len(line) for line in lines) > fit:
        lines = [f"  # {why}\n  {cmd}" for cmd, why in DEMO_NEXT]
    return "\nnext:\n" + "\n".join(lines)
