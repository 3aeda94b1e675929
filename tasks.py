"""remotekit's laptop face: `invoke --list`. Every task is a thin wrapper over the Python API.

Every task takes a selection of targets (``--host a,b``, ``--group g``, ``--all``; default:
``local``), runs them in parallel (``--parallel N``), prints each host's output prefixed with
its name, ends with a summary table, and exits with the worst host's code: 0 all OK,
1 findings, 2 some host failed. ``--json`` prints machine-readable output only.
"""

from __future__ import annotations

import shlex
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from invoke import Exit, task

import remotekit
from remotekit.fleet import FleetInterrupted, HostOutcome, fleet
from remotekit.render import Console, mask_strings, table, to_json, to_jsonable

SELECT_HELP = {
    "host": "target name(s) from hosts.yaml, comma-separated (default: local)",
    "group": "a group from hosts.yaml",
    "all": "every target in hosts.yaml",
    "parallel": "hosts worked on at once (default 64)",
    "json": "machine-readable output only (JSON on stdout)",
    "verbose": "show each host's layer chain, and each step's full chain as it starts",
    "inventory": "hosts.yaml to use (default: $REMOTEKIT_HOSTS, ./hosts.yaml, ~/.config/remotekit/hosts.yaml)",
}
TIMEOUT_HELP = "seconds before the step is stopped there (default: the host's timeouts.step)"
WATCH_HELP = {
    "watch": "refresh every N seconds (default 2) until Ctrl-C: in place on a terminal, "
    "appended when piped (one JSON line a refresh with --json)",
    "count": "with --watch: stop after this many refreshes (default: until Ctrl-C)",
}


def _help(**extra: str) -> dict[str, str]:
    return {**SELECT_HELP, **extra}


def _select(host: str, group: str, all: bool, inventory: str) -> list[remotekit.Target]:
    try:
        inv = remotekit.load_inventory(inventory or None)
        specs = inv.select(
            hosts=host or ("local" if not group and not all else None), group=group or None, all=all
        )
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    if not specs:
        raise Exit("remotekit: no targets selected", code=2)
    return [remotekit.Target(s) for s in specs]


def _required(**values: str) -> None:
    """Options a task cannot do without (options, not positionals: so --help stays help)."""
    for name, value in values.items():
        if not value:
            raise Exit(f"remotekit: --{name.replace('_', '-')} is required", code=2)


def _finding(o: HostOutcome) -> str:
    if o.error is not None:
        text = str(getattr(o.error, "message", None) or o.error)
        return f"{type(o.error).__name__}: {text.splitlines()[0] if text else ''}"
    value = o.value
    if isinstance(value, remotekit.Result):
        if value.detached is not None:
            return f"detached: pid {value.detached.pid}, log {value.detached.log}"
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


@dataclass(frozen=True)
class Sel:
    """The target selection and output options every task takes."""

    host: str
    group: str
    all: bool
    parallel: int
    json: bool
    verbose: bool
    inventory: str
    #: Mask secret values in the steps' own output too (live lines and --json results).
    mask_output: bool = False


def _fan(
    sel: Sel,
    fn: Callable[[remotekit.Target, Console], Any],
    *,
    render: Callable[[Any], str] | None = None,
    title: str = "",
    after: Callable[[list[HostOutcome], Console], int] | None = None,
) -> None:
    """Run ``fn(target, console)`` on the selected targets; print, summarize, exit.

    ``after(outcomes, console)`` runs last (e.g. drawing a plot) and may raise the exit code.
    """
    targets = _select(sel.host, sel.group, sel.all, sel.inventory)
    names = [t.name for t in targets]

    def mask(text: str) -> str:
        for t in targets:
            text = t.redact(text)
        return text

    console = Console(names, quiet=sel.json, mask=mask, mask_output=sel.mask_output)
    if sel.verbose:
        for t in targets:
            console.line(t.name, "stderr", f"chain: {t.chain}")
            t.trace = lambda step, chain, host=t.name: console.line(
                host, "stderr", f"step {step}: {chain}"
            )
    total, done, failed = len(targets), [0], [0]

    def on_done(o: HostOutcome) -> None:
        done[0] += 1
        failed[0] += o.exit_code == 2
        if render is not None and o.error is None:
            section = render(o.value)
            console.say(
                f"== {o.host}{' ' + title if title else ''} ==\n{section}" if total > 1 else section
            )
        elif o.error is not None:
            console.line(o.host, "stderr", f"error: {o.error}")
        console.progress(f"[{done[0]}/{total} hosts done, {failed[0]} failed]")

    interrupted = False
    console.progress(f"[0/{total} hosts done, 0 failed]")
    with fleet(targets, parallel=sel.parallel or None) as f:
        try:
            outcomes = f.map(lambda t: fn(t, console), on_done=on_done)
        except FleetInterrupted as exc:
            outcomes, interrupted = exc.outcomes, True
    console.done()
    code = 130 if interrupted else max((o.exit_code for o in outcomes), default=0)
    missing = [t.name for t in targets if t.name not in {o.host for o in outcomes}]
    if sel.json:
        doc: dict[str, Any] = {"exit_code": code, "interrupted": interrupted}
        doc["hosts"] = [_outcome_json(o, mask, sel.mask_output) for o in outcomes]
        doc["hosts"] += [{"host": h, "status": "not run", "exit_code": None} for h in missing]
        print(to_json(doc, indent=2))
    elif total > 1 or interrupted or any(o.exit_code == 2 for o in outcomes):
        rows = [(o.host, o.status, f"{o.duration_s:.1f}s", _finding(o)) for o in outcomes]
        rows += [(h, "not run", "-", "interrupted") for h in missing]
        console.say("\n" + table(["host", "status", "time", "finding"], rows))
    if interrupted:
        raise Exit("remotekit: interrupted; every running step was stopped", code=130)
    if after is not None:
        code = max(code, after(outcomes, console))
    if code:
        raise Exit(code=code)


def _outcome_json(o: HostOutcome, mask: Callable[[str], str], mask_output: bool) -> dict[str, Any]:
    """One host in --json: our texts (errors, chain) masked; the result as the step made it,
    unless ``mask_output``."""
    out: dict[str, Any] = {"host": o.host, "status": o.status, "exit_code": o.exit_code}
    out["duration_s"] = round(o.duration_s, 3)
    out["chain"] = mask(o.chain)
    if o.error is not None:
        out["error"] = {"type": type(o.error).__name__, "message": mask(str(o.error))}
    else:
        value = to_jsonable(o.value)
        out["result"] = mask_strings(value, mask) if mask_output else value
    return out


# -- the engine ------------------------------------------------------------------------------


@task(help={"inventory": SELECT_HELP["inventory"], "json": SELECT_HELP["json"]})
def hosts(c, inventory="", json=False):
    """List the targets in hosts.yaml with their layer chains and groups."""
    try:
        inv = remotekit.load_inventory(inventory or None)
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    groups = {h: [g for g, m in inv.groups.items() if h in m] for h in inv.hosts}
    rows = [(s.name, remotekit.Target(s).chain, ",".join(groups[s.name]), s.source) for s in inv]
    if json:
        print(
            to_json([dict(zip(["host", "chain", "groups", "source"], r)) for r in rows], indent=2)
        )
    else:
        print(f"inventory: {inv.path or '(embedded default)'}")
        print(table(["host", "chain", "groups", "declared at"], rows))


@task(help=_help())
def ping(c, host="", group="", all=False, parallel=0, json=False, verbose=False, inventory=""):
    """Check each hop in turn with its own probe: SSH, sudo, container/job/pod, Python, torch."""

    def one(t: remotekit.Target, console: Console) -> remotekit.PingReport:
        def show(ch: remotekit.Check) -> None:
            console.line(t.name, "stdout", f"{'ok  ' if ch.ok else 'FAIL'} {ch.layer}: {ch.detail}")

        return t.ping(on_check=show)

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
    )


DETACH_HELP = (
    "start it there in its own session, output to a log file; print its pid and log, return"
)
MASK_OUTPUT_HELP = (
    "mask secret_env values in the steps' own output too (live lines and --json results); "
    "our own messages, errors and tables are always masked"
)


def _step_notes(t: remotekit.Target, r: remotekit.Result, console: Console) -> None:
    """What the engine did beside the step: a detached process, stopped leftovers."""
    if r.detached is not None:
        d = r.detached
        console.line(t.name, "stdout", f"detached: pid {d.pid}, log {d.log}")
    for what in r.stopped:
        console.line(t.name, "stderr", f"stopped, left running by the step: {what}")
    for what in r.still_running:
        console.line(t.name, "stderr", f"could not stop, still running: {what}")


@task(
    help=_help(
        cmd="the command, split like a shell would here (no shell runs there)",
        timeout=TIMEOUT_HELP,
        detach=DETACH_HELP,
        mask_output=MASK_OUTPUT_HELP,
    )
)
def run(
    c,
    cmd="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
    detach=False,
    mask_output=False,
):
    """Run a command on targets, output streamed live with host prefixes."""
    _required(cmd=cmd)
    argv = shlex.split(cmd)

    def one(t: remotekit.Target, console: Console) -> Any:
        r = t.run(
            argv,
            timeout=timeout or None,
            check=False,
            on_output=console.output(t.name),
            detach=detach,
        )
        _step_notes(t, r, console)
        return r

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory, mask_output),
        one,
    )


@task(
    help=_help(
        script="a local Python file to ship and run there",
        args="its arguments, split like a shell would",
        timeout=TIMEOUT_HELP,
        detach=DETACH_HELP,
        mask_output=MASK_OUTPUT_HELP,
    )
)
def py(
    c,
    script="",
    args="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
    detach=False,
    mask_output=False,
):
    """Ship a Python file to targets and run it there with the target's interpreter."""
    _required(script=script)
    try:
        shipped = remotekit.Script.from_path(script)
    except OSError as exc:
        raise Exit(f"remotekit: cannot read {script}: {exc.strerror}", code=2) from None
    argv = shlex.split(args)

    def one(t: remotekit.Target, console: Console) -> Any:
        r = t.run_python(
            shipped,
            args=argv,
            timeout=timeout or None,
            check=False,
            on_output=console.output(t.name),
            detach=detach,
        )
        _step_notes(t, r, console)
        return r

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory, mask_output),
        one,
    )


@task(
    help=_help(
        src="local file", dest="path there (a directory keeps the name)", timeout=TIMEOUT_HELP
    )
)
def put(
    c,
    src="",
    dest="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
):
    """Copy a local file to targets (atomic: written beside, then renamed)."""
    _required(src=src, dest=dest)
    shown = _shared_progress(f"put {Path(src).name}")
    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: t.put(
            src, dest, timeout=timeout or None, on_progress=shown(console).part(t.name)
        ),
    )


@task(
    help={
        "src": "path there",
        "dest": "local path",
        "host": "one target",
        "inventory": SELECT_HELP["inventory"],
        "timeout": TIMEOUT_HELP,
    }
)
def get(c, src="", dest="", host="local", inventory="", timeout=0.0):
    """Copy a file from one target to here."""
    _required(src=src, dest=dest)
    [t] = _select(host, "", False, inventory)
    console = Console([t.name])
    with t:
        try:
            t.get(src, dest, timeout=timeout or None, on_progress=_progress(console, f"get {src}"))
        except remotekit.RemotekitError as exc:
            raise Exit(f"remotekit: {exc}", code=2) from None
        finally:
            console.done()


# -- run health: env, gpu, disk, procs, diagnose ---------------------------------------------


def _system():
    from remotekit.diagnostics import system

    return system


@task(
    optional=["watch"],
    help=_help(
        timeout=TIMEOUT_HELP,
        temp="warn at or above this GPU temperature, C (default 85)",
        **WATCH_HELP,
    ),
)
def gpu(
    c,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
    temp=85.0,
    watch=None,
    count=0,
):
    """GPU health: nvidia-smi (temperature, ECC, throttling, stale memory) and torch's view."""
    system = _system()
    _watch_or_fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: system.gpu_status(t, timeout=timeout or None, temp_threshold=temp),
        render=system.render_gpu,
        title="gpu",
        watch=watch,
        count=count,
    )


@task(help=_help(timeout=TIMEOUT_HELP))
def env(
    c,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
):
    """Environment: Python, torch, CUDA, cuDNN, NCCL, container, memory; torch CVE warnings."""
    system = _system()
    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: system.environment(t, timeout=timeout or None),
        render=system.render_env,
        title="env",
    )


@task(
    iterable=["path"],
    optional=["watch"],
    help=_help(
        timeout=TIMEOUT_HELP,
        path="a path to check (repeatable; default: workdir and checkpoints)",
        min_free="warn below this %% free (default 10)",
        **WATCH_HELP,
    ),
)
def disk(
    c,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
    path=None,
    min_free=10.0,
    watch=None,
    count=0,
):
    """Disk: free space and inodes for workdir and checkpoints, largest files, will a save fit."""
    system = _system()
    _watch_or_fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: system.disk_usage(
            t, list(path) or None, timeout=timeout or None, min_free_pct=min_free
        ),
        render=system.render_disk,
        title="disk",
        watch=watch,
        count=count,
    )


@task(
    optional=["watch"],
    help=_help(
        timeout=TIMEOUT_HELP, every="all processes, not only Python and GPU ones", **WATCH_HELP
    ),
)
def procs(
    c,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    timeout=0.0,
    every=False,
    watch=None,
    count=0,
):
    """Processes: Python and GPU processes with age and RSS (stale trainers holding a GPU)."""
    system = _system()
    _watch_or_fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: system.processes(t, timeout=timeout or None, all_processes=every),
        render=system.render_procs,
        title="procs",
        watch=watch,
        count=count,
    )


@task(
    help=_help(
        path="checkpoints to scan (default: --run, else the host's `checkpoints:`)",
        run="a training run's directory there: its checkpoints, its log, and one verdict",
        plot="with --run: draw the log with spikes and saves into this PNG (needs remotekit[plot])",
    )
)
def diagnose(
    c,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    path="",
    run="",
    plot="",
):
    """Everything at once: env, gpu, disk and ckpt-scan, each its own step; a summary.
    With --run DIR: also the run's log, spikes at the saves found, batches, and a verdict."""
    from remotekit.diagnostics.diagnose import diagnose as run_diagnose
    from remotekit.diagnostics.diagnose import render_section, render_verdict

    if plot and not run:
        raise Exit("remotekit: --plot needs --run (it draws the run's log)", code=2)

    def one(t: remotekit.Target, console: Console) -> Any:
        def show(section: Any) -> None:
            console.say(f"[{t.name}] {render_section(section)}\n\n")

        return run_diagnose(
            t, path=path or None, run=run or None, on_section=show, points=2000 if plot else 0
        )

    def summary(report: Any) -> str:
        rows = [
            (
                s.name,
                s.status,
                "-" if s.status == "skipped" else f"{s.duration_s:.1f}s",
                len(s.findings),
                (s.error or "").split("\n")[0],
            )
            for s in report.sections
        ]
        text = table(["section", "status", "time", "findings", "detail"], rows)
        verdict = render_verdict(report)
        return f"{text}\n\n{verdict}" if verdict else text

    def draw(outcomes: list[HostOutcome], console: Console) -> int:
        logs = []
        for o in outcomes:
            section = o.value.section("train-log") if o.error is None else None
            if section is not None and section.report is not None:
                logs.append((o.host, section.report))
        return _draw_logs(plot, logs, console, len(outcomes)) if plot else 0

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=summary,
        title="diagnose",
        after=draw,
    )


def _draw_logs(plot: str, reports: list[tuple[str, Any]], console: Console, hosts: int) -> int:
    """Draw each host's train-log report into ``plot`` (one PNG per host when several)."""
    from remotekit.diagnostics import trainlog

    worst = 0
    for host, rep in reports:
        dest = plot if hosts == 1 else str(Path(plot).with_stem(f"{Path(plot).stem}-{host}"))
        try:
            trainlog.plot_report(rep, dest)
        except ImportError:
            print(
                "remotekit: --plot needs matplotlib: pip install 'remotekit[plot]'", file=sys.stderr
            )
            return 2
        except (OSError, ValueError) as exc:
            print(f"remotekit: could not draw {dest}: {exc}", file=sys.stderr)
            worst = 2
            continue
        console.say(f"plot: {dest}", stream="stderr")
    return worst


# -- training logs ---------------------------------------------------------------------------


@task(
    iterable=["metric"],
    help=_help(
        path="the training log there, or its run directory (JSON lines, CSV, trainer_state.json, W&B .wandb, TensorBoard events, nanoGPT/llm.c/Megatron/fairseq or key=value text)",
        preset="spike rule: olmo2 (1000 steps, 7 sigma), olmo-core (128, 6), megatron (10x running max)",
        metric="a metric to analyse besides loss/acc/lr/grad_norm (repeatable)",
        ckpt_steps="checkpoint steps, comma-separated (else found in the log or --checkpoints)",
        ckpt_dir="the older name of --checkpoints",
        checkpoints="the run's checkpoint directory there: its saves are checkpoint events (default: the host's `checkpoints:`)",
        steps_per_epoch="steps per epoch, for epoch boundaries",
        plot="draw loss/accuracy with spikes and events into this PNG (needs remotekit[plot])",
        timeout=TIMEOUT_HELP,
    ),
)
def train_log(
    c,
    path="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    preset="olmo2",
    metric=None,
    ckpt_steps="",
    ckpt_dir="",
    steps_per_epoch=0.0,
    plot="",
    timeout=0.0,
    checkpoints="",
):
    """What happened to this run: spikes, cliffs, events, and batch composition."""
    _required(path=path)
    from remotekit.diagnostics import trainlog

    def one(t: remotekit.Target, console: Console) -> Any:
        return trainlog.analyze_train_log(
            t,
            path,
            metrics=list(metric or ()) or None,
            preset=preset,
            ckpt_steps=ckpt_steps or None,
            ckpt_dir=_host_checkpoints(t, checkpoints or ckpt_dir),
            steps_per_epoch=steps_per_epoch or None,
            points=2000 if plot else 0,
            timeout=timeout or None,
        )

    def draw(outcomes: list[HostOutcome], console: Console) -> int:
        if not plot:
            return 0
        worst = 0
        for o in outcomes:
            if o.exit_code == 2:  # no analysis to draw
                continue
            dest = (
                plot
                if len(outcomes) == 1
                else str(Path(plot).with_stem(f"{Path(plot).stem}-{o.host}"))
            )
            try:
                trainlog.plot_report(o.value, dest)
            except ImportError:
                print(
                    "remotekit: --plot needs matplotlib: pip install 'remotekit[plot]'",
                    file=sys.stderr,
                )
                return 2
            except (OSError, ValueError) as exc:
                print(f"remotekit: could not draw {dest}: {exc}", file=sys.stderr)
                worst = 2
                continue
            console.say(f"plot: {dest}", stream="stderr")
        return worst

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=trainlog.render_report,
        title="train-log",
        after=draw,
    )


# -- checkpoints -----------------------------------------------------------------------------

SAFETY_HELP = {
    "allow_global": "a global a checkpoint may use under weights_only (module.Name; repeatable)",
    "unsafe_pickle": "load with weights_only=False: RUNS ARBITRARY CODE from the file; only for files you trust",
}


def _ckpt():
    from remotekit.diagnostics import checkpoints

    return checkpoints


def _load_options(allow_global: Any, unsafe_pickle: bool, timeout: float) -> dict[str, Any]:
    """How the checkpoint tasks load files there: weights_only unless --unsafe-pickle."""
    return {
        "allow_globals": list(allow_global or ()),
        "unsafe_pickle": unsafe_pickle,
        "timeout": timeout or None,
    }


def _host_checkpoints(t: remotekit.Target, path: str) -> str | None:
    """``path``, else the host's ``checkpoints:``, else None."""
    if path or t.spec.checkpoints:
        return path or str(t.spec.checkpoints)
    return None


def _checkpoints_path(t: remotekit.Target, path: str, step: str) -> str:
    """``--path``, else the host's ``checkpoints:``."""
    if (where := _host_checkpoints(t, path)) is not None:
        return where
    raise remotekit.RemotekitError(
        "no --path given and no `checkpoints:` for this host in hosts.yaml", host=t.name, step=step
    )


def _scan_progress(console: Console, host: str) -> Callable[[Any], None]:
    show = _progress(console, f"{host}:")
    return lambda p: show.update("", p.bytes_done, p.bytes_total, _ckpt().progress_line(p))


def _warn(console: Console, host: str) -> Callable[[str], None]:
    def warn(message: str) -> None:
        if console.quiet:  # --json: stdout is for the JSON only, but a warning must be seen
            print(f"{host}: warning: {message}", file=sys.stderr, flush=True)
        else:
            console.line(host, "stderr", f"warning: {message}")

    return warn


@task(
    iterable=["allow_global"],
    help=_help(
        path="a checkpoint file, a directory (searched recursively) or a glob (default: the host's `checkpoints:`)",
        jobs="files scanned in parallel there",
        timeout=TIMEOUT_HELP,
        **SAFETY_HELP,
    ),
)
def ckpt_scan(
    c,
    path="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    jobs=1,
    allow_global=None,
    unsafe_pickle=False,
    timeout=0.0,
):
    """Are my checkpoints corrupt? NaN/Inf in weights and optimizer state (exit 1 if so)."""
    ck = _ckpt()

    def one(t: remotekit.Target, console: Console) -> Any:
        where = _checkpoints_path(t, path, "ckpt-scan")
        return ck.scan_checkpoints(
            t,
            where,
            jobs=jobs,
            **_load_options(allow_global, unsafe_pickle, timeout),
            on_progress=_scan_progress(console, t.name),
            on_warning=_warn(console, t.name),
        )

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=lambda scan: ck.render_scan(scan, plan=scan.plan),
        title="ckpt-scan",
    )


@task(
    iterable=["allow_global"],
    help=_help(
        path="a checkpoint file, an HF *.index.json, or a checkpoint directory (HF checkpoint-N/, DeepSpeed global_stepN/, DCP)",
        timeout=TIMEOUT_HELP,
        **SAFETY_HELP,
    ),
)
def ckpt_inspect(
    c,
    path="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    allow_global=None,
    unsafe_pickle=False,
    timeout=0.0,
):
    """Keys, dtypes, shapes, step/epoch and lr per param group, without reading tensor data."""
    _required(path=path)
    ck = _ckpt()
    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: ck.inspect_checkpoint(
            t,
            path,
            **_load_options(allow_global, unsafe_pickle, timeout),
        ),
        render=ck.render_inspect,
        title="ckpt-inspect",
    )


@task(
    iterable=["allow_global"],
    help=_help(
        a="the earlier checkpoint (a file or a checkpoint directory)",
        b="the later checkpoint (a file or a checkpoint directory)",
        top="tensors listed by relative change",
        timeout=TIMEOUT_HELP,
        **SAFETY_HELP,
    ),
)
def ckpt_diff(
    c,
    a="",
    b="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    top=10,
    allow_global=None,
    unsafe_pickle=False,
    timeout=0.0,
):
    """What changed between two checkpoints: the 'bad jump' finder."""
    _required(a=a, b=b)
    ck = _ckpt()
    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        lambda t, console: ck.diff_checkpoints(
            t,
            a,
            b,
            top=top,
            **_load_options(allow_global, unsafe_pickle, timeout),
        ),
        render=ck.render_diff,
        title="ckpt-diff",
    )


@task(
    iterable=["allow_global"],
    help=_help(
        path="a directory of checkpoints (default: the host's `checkpoints:`)",
        linear="check every checkpoint instead of a binary search",
        jobs="files scanned in parallel there",
        timeout=TIMEOUT_HELP,
        **SAFETY_HELP,
    ),
)
def ckpt_bisect(
    c,
    path="",
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    linear=False,
    jobs=1,
    allow_global=None,
    unsafe_pickle=False,
    timeout=0.0,
):
    """The last clean and the first bad checkpoint, ordered by global_step."""
    ck = _ckpt()

    def one(t: remotekit.Target, console: Console) -> Any:
        where = _checkpoints_path(t, path, "ckpt-bisect")
        return ck.bisect_checkpoints(
            t,
            where,
            linear=linear,
            jobs=jobs,
            **_load_options(allow_global, unsafe_pickle, timeout),
            on_progress=_scan_progress(console, t.name),
        )

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=ck.render_bisect,
        title="ckpt-bisect",
    )


@task(
    help=_help(dir="where to make the samples there (default: a new temp dir, removed afterwards)")
)
def demo(
    c, host="", group="", all=False, parallel=0, json=False, verbose=False, inventory="", dir=""
):
    """The main job in a minute, no server needed: make sample checkpoints and scan them."""
    ck = _ckpt()

    def one(t: remotekit.Target, console: Console) -> Any:
        if dir:
            return ck.run_demo(t, dir, on_progress=_scan_progress(console, t.name))
        mkdtemp = remotekit.Script(
            "import tempfile\nprint(tempfile.mkdtemp(prefix='remotekit-demo-'))\n"
        )
        where = t.run_python(mkdtemp, step="demo dir").stdout.strip()
        try:
            return ck.run_demo(t, where, on_progress=_scan_progress(console, t.name))
        finally:
            t.run(["rm", "-rf", "--", where], check=False, step="demo cleanup")

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=ck.render_demo,
        title="demo",
    )


@task(help={"quick": "smaller sizes and fewer runs (minutes -> about one)"})
def bench(c, quick=False):
    """Run the benchmarks in bench/ (each compares against its named baseline in one run)."""
    runs = [
        ["bench/bench_engine.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_layers.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_fleet.py"],
        ["bench/bench_transfer.py", *(["--sizes", "20,80", "--runs", "1"] if quick else [])],
        ["bench/bench_trainlog.py"],
        ["bench/bench_ckpt.py", *(["--size-gb", "0.5"] if quick else [])],
        ["bench/bench_forward.py", *(["--mb", "50", "--runs", "3"] if quick else [])],
        [
            "bench/bench_sync.py",
            *(["--files", "2000", "--big-mb", "16", "--runs", "1"] if quick else []),
        ],
    ]
    worst = 0
    for argv in runs:
        print(f"== {argv[0]}", flush=True)
        worst = max(worst, c.run(shlex.join([sys.executable, *argv]), warn=True).exited)
    if worst:
        raise Exit(code=worst)


# --- shell ---


def _after_dashes() -> list[str]:
    """The words after ``--`` on our command line, exactly as given (invoke keeps only a
    space-joined string of them, which loses quoting)."""
    return sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []


@task(
    help={
        "host": "the target: one name from hosts.yaml (default: local)",
        "cmd": "run this instead of the login shell, split like a shell would here "
        "(or give the program and its arguments after --)",
        "inventory": SELECT_HELP["inventory"],
    }
)
def shell(c, host="", cmd="", inventory=""):
    """A shell (or `-- PROGRAM ARGS...`) inside the target on a terminal, venv active, in its
    workdir. Exits with the program's status (2 when the target cannot be entered)."""
    argv = shlex.split(cmd) if cmd else _after_dashes()
    targets = _select(host, "", False, inventory)
    if len(targets) != 1:
        raise Exit("remotekit: shell takes one --host", code=2)
    try:
        with targets[0] as t:
            code = t.shell(argv or None)
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    except KeyboardInterrupt:  # Ctrl-C before the program there started (then it is theirs)
        raise Exit("remotekit: interrupted", code=130) from None
    if code:
        raise Exit(code=code)


# --- watch and progress ---------------------------------------------------------------------


def _watch_or_fan(
    sel: Sel,
    fn: Callable[[remotekit.Target, Console], Any],
    *,
    render: Callable[[Any], str],
    title: str,
    watch: Any,
    count: int,
) -> None:
    """A diagnostic once (:func:`_fan`), or with ``--watch [N]`` again and again: ``fn`` on
    every selected host, one frame a refresh.

    A watch ends with exit 0 on Ctrl-C (every step still running there is stopped); after
    ``--count`` refreshes, with the last refresh's worst exit code.
    """
    if watch is None:
        if count:
            raise Exit("remotekit: --count goes with --watch", code=2)
        return _fan(sel, fn, render=render, title=title)
    from remotekit import watch as watching

    try:
        interval = watching.parse_interval(watch)
    except ValueError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    if count < 0:
        raise Exit("remotekit: --count takes a number of refreshes >= 1", code=2)
    targets = _select(sel.host, sel.group, sel.all, sel.inventory)
    quiet = Console(quiet=True)

    def mask(text: str) -> str:
        for t in targets:
            text = t.redact(text)
        return text

    with fleet(targets, parallel=sel.parallel or None) as f:
        frame = watching.fleet_frame(f, lambda t: fn(t, quiet), render, mask=mask)
        show: Callable[[], str] = frame
        if sel.json:

            def show() -> str:
                frame()
                hosts = [_outcome_json(o, mask, sel.mask_output) for o in frame.last]
                return to_json({"exit_code": frame.exit_code, "hosts": hosts})

        screen = watching.Screen(live=False) if sel.json else watching.Screen()
        shown = watching.watch(
            show,
            interval=interval,
            count=count or None,
            title=f"remotekit {title}",
            screen=screen,
            header=not sel.json,
        )
    if count and shown >= count and frame.exit_code:
        raise Exit(code=frame.exit_code)


def _progress(console: Console, label: str) -> Any:
    """A transfer's bytes, rate and ETA on ``console``'s progress line (a terminal only,
    never with --json): an ``on_progress(done, total)`` callback."""
    from remotekit.progress import Progress

    return Progress(label, draw=console.progress)


def _shared_progress(label: str) -> Callable[[Console], Any]:
    """One progress line for a task's hosts together (their bytes summed); made on first use,
    from whichever host's thread comes first, with ``_fan``'s console."""
    lock = threading.Lock()
    made: list[Any] = []

    def get(console: Console) -> Any:
        with lock:
            if not made:
                made.append(_progress(console, label))
            return made[0]

    return get


# --- forward ---


def _ports(spec: str) -> tuple[int, int]:
    """``PORT`` or ``PORT:LOCAL`` (no LOCAL: a free port here)."""
    there, _, here = spec.partition(":")
    try:
        return int(there), int(here or 0)
    except ValueError:
        raise Exit(f"remotekit: --port wants PORT or PORT:LOCAL, got {spec!r}", code=2) from None


@task(
    help={
        "host": "one target",
        "port": "PORT there (e.g. 6006), or PORT:LOCAL to choose the port here",
        "bind": "address to listen on here (default 127.0.0.1: only this machine)",
        "check": "connect once first, so a port nothing listens on fails now (--no-check: later)",
        "inventory": SELECT_HELP["inventory"],
    }
)
def forward(c, host="local", port="", bind="127.0.0.1", check=True, inventory=""):
    """Reach a port inside the target (TensorBoard, Jupyter) at a local URL, until Ctrl-C."""
    _required(port=port)
    there, here = _ports(port)
    [t] = _select(host, "", False, inventory)

    def said(exc: remotekit.RemotekitError) -> None:
        print(f"remotekit: {exc}", file=sys.stderr, flush=True)

    with t:
        try:
            fwd = t.forward(there, here, bind, check=check, on_error=said)
        except remotekit.RemotekitError as exc:
            raise Exit(f"remotekit: {exc}", code=2) from None
        with fwd:
            print(f"{fwd.url} -> 127.0.0.1:{there} on {t.name} ({t.chain}); Ctrl-C to stop")
            sys.stdout.flush()
            try:
                fwd.wait()
            except KeyboardInterrupt:
                print("remotekit: forward stopped", file=sys.stderr)


# --- sync ---


@task(
    positional=["src", "dest"],
    iterable=["exclude"],
    help=_help(
        src="the local directory whose contents are pushed",
        dest="the directory there (created if missing)",
        delete="also remove what is there but not here (never excluded paths)",
        exclude="a .gitignore-style pattern to leave out (repeatable)",
        exclude_from="a file of such patterns, e.g. .gitignore (not read unless named)",
        dry_run="list what would change; change nothing",
        timeout=TIMEOUT_HELP,
    ),
)
def sync(
    c,
    src,
    dest,
    host="",
    group="",
    all=False,
    parallel=0,
    json=False,
    verbose=False,
    inventory="",
    delete=False,
    exclude=None,
    exclude_from="",
    dry_run=False,
    timeout=0.0,
):
    """Push a local directory into targets: only changed files travel (size+mtime, then hash)."""
    from remotekit.sync import SyncResult, read_patterns

    patterns = list(exclude or ())
    if exclude_from:
        try:
            patterns = read_patterns(exclude_from) + patterns
        except OSError as exc:
            raise Exit(f"remotekit: cannot read {exclude_from}: {exc.strerror}", code=2) from None

    progress = _shared_progress("sync")

    def one(t: remotekit.Target, console: Console) -> SyncResult:
        r = t.sync(
            src,
            dest,
            delete=delete,
            exclude=patterns,
            dry_run=dry_run,
            timeout=timeout or None,
            on_progress=progress(console).part(t.name),
        )
        if verbose or dry_run:
            verb = "would send" if dry_run else "sent"
            for rel in r.sent:
                console.line(t.name, "stdout", f"{verb} {rel}")
            for rel in r.deleted:
                console.line(t.name, "stdout", f"{'would delete' if dry_run else 'deleted'} {rel}")
        for what in r.skipped:
            console.line(t.name, "stderr", f"skipped {what}")
        return r

    _fan(
        Sel(host, group, all, parallel, json, verbose, inventory),
        one,
        render=lambda r: r.summary(),
        title="sync",
    )
