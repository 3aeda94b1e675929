"""Daily work on one target or a few: ``shell``, ``forward``, ``sync``."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, Callable

from invoke import Context, Exit

import remotekit
from remotekit.cli.output import fan_out, shared_progress_line
from remotekit.cli.selection import (
    CMD_HELP,
    OPTIONS_HERE,
    SELECT_HELP,
    TIMEOUT_HELP,
    Selection,
    fleet_task,
    host_of,
    named_side,
    one_target,
    required,
    shell_line,
    task,
)
from remotekit.render import Console

OnError = Callable[[remotekit.RemotekitError], None]


@task(
    help={
        "host": "the target: one name from hosts.yaml (default: its `default:`, else local)",
        "cmd": CMD_HELP + ", instead of the login shell (or give the program and its "
        "arguments after --: no shell)",
        "inventory": SELECT_HELP["inventory"],
    },
)
def shell(c: Context, host: str = "", cmd: str = "", inventory: str = "") -> None:
    """A shell (or `-- PROGRAM ARGS...`) inside the target, venv active, in its workdir.

    Exits with the program's status (2 when the target cannot be entered)."""
    argv = shell_line(c, cmd)
    try:
        with one_target(host, inventory, "shell") as t:
            code = t.shell(argv or None, terminal=sys.stdin.isatty())  # ssh: -T unless a tty
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    except KeyboardInterrupt:  # Ctrl-C before the program there started (then it is theirs)
        raise Exit("remotekit: interrupted", code=130) from None
    if code:
        raise Exit(code=code)


def _ports(spec: str) -> tuple[int, int]:
    """``LOCAL:REMOTE``, the order of ``ssh -L`` and ``kubectl port-forward``; ``REMOTE`` or
    ``:REMOTE`` alone: a free port here."""
    here, _, there = spec.rpartition(":")
    try:
        return int(here or 0), int(there)
    except ValueError:
        raise Exit(
            f"remotekit: --port wants REMOTE or LOCAL:REMOTE (as ssh -L), got {spec!r}", code=2
        ) from None


def _open(
    t: remotekit.Target, spec: str, bind: str, check: bool, said: OnError
) -> remotekit.Forward:
    """The forward ``--port spec`` asks for. For this release only, the old order
    (REMOTE:LOCAL) is still read where it is unambiguous: LOCAL:REMOTE cannot work (nothing
    accepts on REMOTE there, found by the check) while REMOTE:LOCAL can (something accepts on
    LOCAL there, and REMOTE is free here). Then a note says so. Anything else reads LOCAL:REMOTE:
    with both ports open there (or --no-check: nothing was asked there) ssh's order wins."""
    here, there = _ports(spec)
    try:
        return t.forward(there, local_port=here, bind=bind, check=check, on_error=said)
    except remotekit.ForwardError as exc:
        if not (exc.refused and here and here != there):
            raise
        try:
            fwd = t.forward(here, local_port=there, bind=bind, check=True, on_error=said)
        except remotekit.RemotekitError:
            raise remotekit.ForwardError(
                f"{exc.message} (--port {spec} is LOCAL:REMOTE, as in ssh -L and kubectl "
                "port-forward)",
                host=exc.host,
                step=exc.step,
                port=exc.port,
                refused=True,
            ) from None
    print(
        f"remotekit: --port {spec} is LOCAL:REMOTE now, as in ssh -L and kubectl "
        f"port-forward; nothing accepts connections on {there} there and {here} does, so it "
        f"is read the old way round (REMOTE:LOCAL), for this release only: type --port "
        f"{there}:{here}",
        file=sys.stderr,
        flush=True,
    )
    return fwd


@task(
    help={
        "host": "one target (default: hosts.yaml's `default:`, else local)",
        "port": "REMOTE, the port there (e.g. 6006), or LOCAL:REMOTE as in ssh -L "
        "(LOCAL: the port here; left out, a free one)",
        "bind": "address to listen on here (default 127.0.0.1: only this machine)",
        "check": "connect once first, so a port nothing listens on fails now (--no-check: later)",
        "inventory": SELECT_HELP["inventory"],
    },
)
def forward(
    c: Context,
    host: str = "",
    port: str = "",
    bind: str = "127.0.0.1",
    check: bool = True,
    inventory: str = "",
) -> None:
    """Reach a port inside the target (TensorBoard, Jupyter) at a local URL, until Ctrl-C."""
    required(port=port)
    _ports(port)  # a bad spelling exits 2 before any connection
    t = one_target(host, inventory, "forward")

    def said(exc: remotekit.RemotekitError) -> None:
        print(f"remotekit: {exc}", file=sys.stderr, flush=True)

    with t:
        try:
            fwd = _open(t, port, bind, check, said)
        except remotekit.RemotekitError as exc:
            raise Exit(f"remotekit: {exc}", code=2) from None
        with fwd:
            print(f"forwarding {fwd.mapping} ({t.name}: {t.chain})")
            print(f"{fwd.url}  (Ctrl-C to stop)")
            sys.stdout.flush()
            try:
                fwd.wait()
            except KeyboardInterrupt:
                print("remotekit: forward stopped", file=sys.stderr)


@fleet_task(
    positional=["src", "dest"],
    iterable=["exclude"],
    help={
        "src": "the local directory whose contents are pushed, or NAME:DIR there to pull "
        "from target NAME (rsync's HOST:PATH)",
        "dest": "the directory there (created if missing), or here when SRC is NAME:DIR",
        "delete": "also remove what is there but not here (never excluded paths)",
        "exclude": "a .gitignore-style pattern to leave out (repeatable)",
        "exclude_from": "a file of such patterns, e.g. .gitignore (not read unless named)",
        "dry_run": "list what would change; change nothing",
        "timeout": TIMEOUT_HELP,
    },
)
def sync(
    c: Context,
    src: str,
    dest: str,
    sel: Selection = OPTIONS_HERE,
    delete: bool = False,
    exclude: Any = None,
    exclude_from: str = "",
    dry_run: bool = False,
    timeout: float = 0.0,
) -> None:
    """Push a local directory into targets, or pull one: `sync NAME:SRC DEST`, as rsync.

    Only changed files travel (size+mtime, then hash)."""
    from remotekit.sync import SyncResult, read_patterns

    sel = _remote_side(sel, src, dest)

    patterns = list(exclude or ())
    if exclude_from:
        try:
            patterns = read_patterns(exclude_from) + patterns
        except OSError as exc:
            raise Exit(f"remotekit: cannot read {exclude_from}: {exc.strerror}", code=2) from None
    progress = shared_progress_line("sync")

    def push(t: remotekit.Target, console: Console) -> SyncResult:
        r = t.sync(
            src,
            dest,
            delete=delete,
            exclude=patterns,
            dry_run=dry_run,
            timeout=timeout or None,
            on_progress=progress(console).part(t.name),
        )
        _show_changes(t.name, r, console, listed=sel.verbose or dry_run, dry_run=dry_run)
        return r

    fan_out(sel, push, render=lambda r: r.summary(), title="sync")


def _remote_side(sel: Selection, src: str, dest: str) -> Selection:
    """The selection a ``sync`` works on: rsync's reading of its two sides. The side written
    ``NAME:PATH`` (NAME a target of hosts.yaml) is there, on that one target; a pull
    (``NAME:SRC DEST``) works on it alone. With no such side, DEST is there, on every
    selected target, as before."""
    pulled, pushed = named_side(src, sel.inventory), named_side(dest, sel.inventory)
    if pulled and pushed:
        raise Exit(f"remotekit: sync {src} {dest}: both sides are there; one must be here", code=2)
    named = pulled or pushed
    if named is None:
        return sel
    if sel.group or sel.all:
        raise Exit(
            f"remotekit: {src if pulled else dest} names one target: not with --group/--all", code=2
        )
    return replace(sel, host=host_of(src if pulled else dest, sel.host, named[0]))


def _show_changes(host: str, r: Any, console: Console, *, listed: bool, dry_run: bool) -> None:
    """Each file sent (got) and deleted (``listed``: --verbose or --dry-run); what was
    skipped."""
    if listed:
        verb = (
            ("would get" if dry_run else "got")
            if r.pulled
            else ("would send" if dry_run else "sent")
        )
        gone = ("would delete" if dry_run else "deleted") + (" here" if r.pulled else "")
        for rel in r.sent:
            console.line(host, "stdout", f"{verb} {rel}")
        for rel in r.deleted:
            console.line(host, "stdout", f"{gone} {rel}")
    for what in r.skipped:
        console.line(host, "stderr", f"skipped {what}")
    for line in r.partial:
        console.line(host, "stderr", line)
