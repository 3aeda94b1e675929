"""The engine's tasks: ``hosts``, ``ping``, and steps (``run``, ``py``, ``put``, ``get``)."""

from __future__ import annotations

import os
import posixpath
import stat
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Callable

from invoke import Context, Exit

import remotekit
from remotekit.cli.output import (
    dry_run_steps,
    fan_out,
    progress_line,
    shared_progress_line,
    step_notes,
)
from remotekit.cli.selection import (
    CMD_HELP,
    DRY_RUN_HELP,
    OPTIONS_HERE,
    SELECT_HELP,
    TIMEOUT_HELP,
    OptionGroup,
    Selection,
    command_words,
    fleet_task,
    host_of,
    named_side,
    one_target,
    shell_line,
    task,
)
from remotekit.inventory import find_inventory, init_inventory, looked_text
from remotekit.layers.core import is_env_name
from remotekit.render import Console, human_bytes, table, to_json

DETACH_HELP = (
    "start it as a run there (its own session, recorded, output kept) and return; print "
    "its id (see runs, logs, stop, rm)"
)
MASK_OUTPUT_HELP = (
    "mask secret_env values in the steps' own output too (live lines and --json results); "
    "our own messages, errors and tables are always masked"
)


RESOLVE_HELP = (
    "ask each found group (pct_list, slurm_job, kubectl_selector) for its members now, and "
    "list them with when they were found"
)


@task(
    help={
        "inventory": SELECT_HELP["inventory"],
        "json": SELECT_HELP["json"],
        "resolve": RESOLVE_HELP,
        "init": "write a starting hosts.yaml to ~/.config/remotekit/hosts.yaml "
        "($XDG_CONFIG_HOME; or to --inventory), never over an existing file",
    },
)
def hosts(
    c: Context, inventory: str = "", json: bool = False, resolve: bool = False, init: bool = False
) -> None:
    """List the targets in hosts.yaml, their layer chains and groups.

    Says which hosts.yaml was read; with --resolve, the members of each found group too (a
    group that cannot be resolved: exit 2); with --init, write a starting hosts.yaml."""
    if init:
        return _init(inventory)
    try:
        inv = remotekit.load_inventory(inventory or None)
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    groups = {h: [g for g, m in inv.groups.items() if h in m] for h in inv.hosts}
    rows = [(s.name, remotekit.Target(s).chain, ",".join(groups[s.name]), s.source) for s in inv]
    found, failed = _found_rows(inv) if resolve else ([], [])
    if json:
        keys = ["host", "chain", "groups", "source"]
        print(to_json([*(dict(zip(keys, r)) for r in rows), *found], indent=2))
    else:
        print(f"inventory: {inv.path or '(embedded default)'}")
        if inv.looked:
            print(looked_text(inv.looked))
        print(
            f"default: {inv.default or 'local'} (what a task runs on without --host/--group/--all)"
        )
        print(table(["host", "chain", "groups", "declared at"], rows))
        _print_found(inv, found, resolve)
    for error in failed:
        print(f"remotekit: {error}", file=sys.stderr)
    if failed:
        raise Exit(code=2)


def _init(inventory: str) -> None:
    """``hosts --init``: the starting hosts.yaml, and a note when it is not the one read here."""
    try:
        path = init_inventory(inventory or None)
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    print(f"wrote {path}: a starting hosts.yaml (only `local`); edit it, then `remotekit hosts`")
    read = find_inventory()
    if not inventory and read is not None and read.resolve() != path.resolve():
        print(
            f"remotekit: note: in this folder {read} is read, not {path}: "
            f"$REMOTEKIT_HOSTS and ./hosts.yaml come first",
            file=sys.stderr,
        )


def _found_rows(inv: remotekit.Inventory) -> tuple[list[dict[str, Any]], list[str]]:
    """Each found group's members as ``hosts --json`` rows (with ``found``: the query, when,
    how long it took), and the errors of the groups that could not be resolved."""
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for name in inv.found:
        try:
            got = inv.resolve(name)
        except remotekit.RemotekitError as exc:
            failed.append(str(exc))
            continue
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(got.at))
        found = {"group": name, "query": got.query, "at": when, "duration_s": got.duration_s}
        for m in got.members:
            chain = remotekit.Target(m).chain
            rows.append(dict(host=m.name, chain=chain, groups=name, source=m.source, found=found))
    return rows, failed


def _print_found(inv: remotekit.Inventory, found: list[dict[str, Any]], resolved: bool) -> None:
    if not inv.found:
        return
    queries = [(g.name, g.query, g.source) for g in inv.found.values()]
    print("\nfound groups (asked each time they are selected):")
    print(table(["group", "query", "declared at"], queries))
    if not resolved:
        print("remotekit hosts --resolve lists their members now")
    elif found:
        print(
            table(
                ["host", "chain", "group", "found at"],
                [(r["host"], r["chain"], r["groups"], r["found"]["at"]) for r in found],
            )
        )


@fleet_task()
def ping(c: Context, sel: Selection) -> None:
    """Check each hop in turn with its own probe: SSH, sudo, container/job/pod, Python, torch."""

    def check_hops(t: remotekit.Target, console: Console) -> remotekit.PingReport:
        def show(ch: remotekit.Check) -> None:
            console.line(t.name, "stdout", ch.render())

        return t.ping(on_check=show)

    fan_out(sel, check_hops)


ENV_HELP = (
    "NAME=VALUE set for this step only, on top of hosts.yaml's env: (repeatable; sent with "
    "the step, never on a command line there; a secret_env name's value is masked as "
    "hosts.yaml's are)"
)
WORKDIR_HELP = (
    "an absolute directory there to run this step in, instead of hosts.yaml's workdir: "
    "(as docker run -w)"
)


@dataclass(frozen=True)
class StepOptions:
    """How ``run`` and ``py`` run their step."""

    timeout: float = 0.0
    detach: bool = False
    mask_output: bool = False
    dry_run: bool = False
    env: Any = None  # the NAME=VALUE words of each --env (invoke's list), None: none given
    workdir: str = ""

    def where(self) -> dict[str, Any]:
        """``env=`` and ``cwd=`` as Target.run takes them: the same layers as hosts.yaml's
        ``env:`` and ``workdir:``, for this step only; a bad one ends the task (exit 2)."""
        env: dict[str, str] = {}
        for word in self.env or ():
            name, eq, value = word.partition("=")
            if not eq or not is_env_name(name):
                # the name alone: a value is never quoted back (it may be a secret)
                raise Exit(
                    f"remotekit: --env wants NAME=VALUE, got {name!r}{eq and '=...'}", code=2
                )
            env[name] = value
        if self.workdir and not posixpath.isabs(self.workdir):
            raise Exit(
                f"remotekit: --workdir wants an absolute path there, got {self.workdir!r}", code=2
            )
        return {"env": env or None, "cwd": self.workdir or None}


STEP = OptionGroup(
    "step",
    StepOptions,
    {
        "timeout": TIMEOUT_HELP,
        "detach": DETACH_HELP,
        "mask_output": MASK_OUTPUT_HELP,
        "dry_run": DRY_RUN_HELP,
        "env": ENV_HELP,
        "workdir": WORKDIR_HELP,
    },
    {"iterable": ("env",)},
)


def piped_stdin(hosts: int) -> IO[bytes] | None:
    """This process's stdin for the step, as ``ssh host cmd`` passes its own: when it is a
    pipe, a file or a socket (not a terminal, not /dev/null), the step reads it, then EOF;
    else its stdin is /dev/null (``< /dev/null`` turns it off, as ``ssh -n`` does). One
    stream goes to one host: with several, none gets it (held whole here it could go to
    each; it is not), and a note says so."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no stdin, or not a file descriptor
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return None  # a terminal, /dev/null: nothing is read from it
    if hosts > 1:
        print(
            f"remotekit: stdin is not passed on: it goes to one host, and {hosts} are selected",
            file=sys.stderr,
            flush=True,
        )
        return None
    return sys.stdin.buffer


def _run_live(sel: Selection, step: StepOptions, start: Callable[..., Any]) -> None:
    """``start(target, **how)`` on every selected host, its output live with host prefixes,
    then what the engine did beside it (a started run, stopped leftovers); with --dry-run,
    each host's chain ending in the command instead (as it would run, detached or not). A
    host's value is the step's Result (with --detach: the one that started the run, which
    names it)."""
    where = step.where()
    if step.dry_run:
        targets = sel.targets(dry_run=True)
        return dry_run_steps(
            targets, lambda t, console: start(t, check=False, detach=False, **where)
        )

    stdin = None if step.detach else piped_stdin(sel.size())

    def on_host(t: remotekit.Target, console: Console) -> remotekit.Result:
        how: dict[str, Any] = {
            "timeout": step.timeout or None,
            "on_output": console.output(t.name),
            **where,
        }
        if stdin is not None:
            how["stdin"] = stdin
        # with --detach, the step that started the run (one that did not start raises
        # StepFailed: the host failed)
        r: remotekit.Result = (
            start(t, detach=True, **how).result if step.detach else start(t, check=False, **how)
        )
        step_notes(t, r, console)
        return r

    fan_out(sel, on_host, mask_output=step.mask_output)


@fleet_task(
    STEP,
    help={
        "cmd": CMD_HELP + "; or the words of a command after --, run with no shell: "
        "remotekit run --host H -- nvidia-smi -L"
    },
)
def run(c: Context, sel: Selection, cmd: str = "", step: StepOptions = OPTIONS_HERE) -> None:
    """Run a command on targets: `-- PROGRAM ARGS...`, or --cmd "a shell line".

    Output streamed live with host prefixes; a piped stdin goes to the command (one host), as
    with ssh."""
    argv = shell_line(c, cmd)
    if not argv:
        raise Exit("remotekit: give the command after -- (or --cmd)", code=2)
    _run_live(sel, step, lambda t, **how: t.run(argv, **how))


@fleet_task(
    STEP,
    positional=["script"],
    help={
        "script": "a local Python file to ship and run there (also the first word: py train.py)",
        "args": "its arguments, split like a shell would; or give them after --: "
        "remotekit py train.py -- --lr 3e-4",
    },
)
def py(
    c: Context,
    script: str,
    args: str = "",
    sel: Selection = OPTIONS_HERE,
    step: StepOptions = OPTIONS_HERE,
) -> None:
    """Ship a Python file to targets and run it there: `py SCRIPT -- ARGS...`.

    The target's interpreter (its venv's) runs it."""
    try:
        program = remotekit.Script.from_path(script)
    except OSError as exc:
        raise Exit(f"remotekit: cannot read {script}: {exc.strerror}", code=2) from None
    argv = command_words(c, "args", args)
    _run_live(sel, step, lambda t, **how: t.run_python(program, args=argv, **how))


@fleet_task(
    positional=["src", "dest"],
    help={
        "src": "a local file, or a directory: copied with all it holds, as scp -r (a / at its "
        "end changes nothing)",
        "dest": "the path there; an existing directory (or one ending in /) gets SRC under "
        "its own name, as with scp; NAME:DEST picks the target, as --host NAME",
        "parents": "create the missing directories of DEST there first (mkdir -p; a DEST "
        "ending in / is one)",
        "timeout": TIMEOUT_HELP,
        "dry_run": DRY_RUN_HELP,
    },
)
def put(
    c: Context,
    src: str,
    dest: str,
    sel: Selection = OPTIONS_HERE,
    parents: bool = False,
    timeout: float = 0.0,
    dry_run: bool = False,
) -> None:
    """Copy a local file or directory to targets, as scp: `put SRC DEST`.

    Each file is atomic: written beside, then renamed."""
    if named_side(src, sel.inventory) is not None:
        raise Exit(f"remotekit: put copies from here to there; {src} is there: use get", code=2)
    if (named := named_side(dest, sel.inventory)) is not None:
        sel, dest = replace(sel, host=host_of(dest, sel.host, named[0])), named[1]
    if dry_run:
        targets = sel.targets(dry_run=True)
        return dry_run_steps(targets, lambda t, console: t.put(src, dest, parents=parents))
    shown = shared_progress_line(f"put {Path(src).name}")

    def put_file(t: remotekit.Target, console: Console) -> Any:
        moved = Moved(shown(console).part(t.name))
        r = t.put(src, dest, parents=parents, timeout=timeout or None, on_progress=moved)
        moved.say(console, t.name, f"put {src} -> {dest}")
        tree_findings(t.name, r, console)
        return r

    fan_out(sel, put_file)


def tree_findings(host: str, r: Any, console: Console) -> None:
    """What a ``put``/``get`` of a directory left out (skipped, unlisted), a line each."""
    for line in getattr(r, "findings", ()):
        console.line(host, "stderr", line)


class Moved:
    """An ``on_progress(done, total)`` that passes the bytes on and times them, then says on a
    terminal what a copy did: ``put a -> b: 1.2 MiB in 0.3 s``."""

    def __init__(self, then: Callable[[int, int], None]):
        self.then, self.bytes, self.start = then, 0, time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        self.bytes = done
        self.then(done, total)

    def say(self, console: Console, host: str, what: str) -> None:
        if console.live:
            took = time.monotonic() - self.start
            console.line(host, "stderr", f"{what}: {human_bytes(self.bytes)} in {took:.1f} s")


@task(
    positional=["src", "dest"],
    help={
        "src": "the path there, a file or a directory (copied with all it holds, as scp -r); "
        "NAME:SRC picks the target, as --host NAME",
        "dest": "the local path; an existing directory (or one ending in /) gets SRC under "
        "its own name, as with scp",
        "host": "one target (default: hosts.yaml's `default:`, else local)",
        "inventory": SELECT_HELP["inventory"],
        "parents": "create the missing local directories of DEST first (mkdir -p; a DEST "
        "ending in / is one)",
        "timeout": TIMEOUT_HELP,
        "dry_run": DRY_RUN_HELP,
    },
)
def get(
    c: Context,
    src: str,
    dest: str,
    host: str = "",
    inventory: str = "",
    parents: bool = False,
    timeout: float = 0.0,
    dry_run: bool = False,
) -> None:
    """Copy a file or directory from one target to here, as scp: `get SRC DEST`."""
    if named_side(dest, inventory) is not None:
        raise Exit(f"remotekit: get copies from there to here; {dest} is there: use put", code=2)
    if (named := named_side(src, inventory)) is not None:
        host, src = host_of(src, host, named[0]), named[1]
    t = one_target(host, inventory, "get", dry_run=dry_run)
    if dry_run:
        return dry_run_steps([t], lambda t, console: t.get(src, dest, parents=parents))
    console = Console([t.name])
    moved = Moved(progress_line(console, f"get {src}"))
    with t:
        try:
            r = t.get(src, dest, parents=parents, timeout=timeout or None, on_progress=moved)
        except remotekit.RemotekitError as exc:
            raise Exit(f"remotekit: {exc}", code=2) from None
        finally:
            console.done()
    moved.say(console, t.name, f"get {src} -> {dest}")
    tree_findings(t.name, r, console)
    if getattr(r, "findings", ()):
        raise Exit(code=1)
