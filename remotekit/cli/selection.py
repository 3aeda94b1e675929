"""Which targets a task works on: the selection options, declared once.

Every fleet task takes ``--host a,b`` / ``--group g`` / ``--all`` (default: hosts.yaml's
``default:``, else ``local``), ``--parallel N``, ``--json``, ``--wide``, ``--verbose``,
``--inventory FILE`` and ``--no-agent``. A task says so by one
parameter, ``sel: Selection``; :func:`fleet_task` puts the nine options in its place in the
signature invoke reads (``__signature__``), adds their help, and hands the task one
:class:`Selection`. Other options that several tasks share (a step's ``--timeout/--detach/
--mask-output``, the checkpoint loading options, ``--watch/--count``) are an
:class:`OptionGroup` the same way.
"""

from __future__ import annotations

import functools
import inspect
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import invoke
from invoke import Context, Exit

import remotekit
from remotekit.render import tables_fit, terminal_width
from remotekit.spec import HostSpec

SELECT_HELP = {
    "host": "target name(s) from hosts.yaml, comma-separated (default: hosts.yaml's "
    "`default:`, else local)",
    "group": "a group from hosts.yaml",
    "all": "every target in hosts.yaml",
    "parallel": "hosts worked on at once (default 64)",
    "json": "machine-readable output only (JSON on stdout)",
    "wide": "tables show every column, every cell whole (without it, on a terminal they fit "
    "its width: spare columns left out, reasons wrapped, long paths shortened in the middle; "
    "piped output is never cut)",
    "verbose": "show each host's layer chain, and each step's full chain as it starts",
    "inventory": "hosts.yaml to use (default: $REMOTEKIT_HOSTS, ./hosts.yaml, "
    "~/.config/remotekit/hosts.yaml or under $XDG_CONFIG_HOME)",
    "agent": "--no-agent: one process per step on every host, as hosts.yaml `agent: false` "
    "(default: each host as hosts.yaml says; the resident agent unless it says false)",
}
TIMEOUT_HELP = "seconds before the step is stopped there (default: the host's timeouts.step)"
DRY_RUN_HELP = (
    "print each host's layer chain ending in what would run there (a shipped script with its "
    "arguments); run nothing, connect nowhere"
)


@dataclass(frozen=True)
class Selection:
    """The target selection and output options every fleet task takes (defaults: ``local``)."""

    host: str = ""
    group: str = ""
    all: bool = False
    parallel: int = 0
    json: bool = False
    #: ``--wide``: tables with every column, as wide as their cells, not fitted to the
    #: terminal (kubectl's ``-o wide``); --json and a stdout that is no terminal keep every
    #: column and cell anyway.
    wide: bool = False
    verbose: bool = False
    inventory: str = ""
    #: False (``--no-agent``): no host's steps run on the resident agent. A choice for this
    #: one command, for every host it selects: the two paths keep the same guarantees, so
    #: the reason to leave the agent is a host (an agent that misbehaves there), not a step.
    agent: bool = True

    def targets(self, dry_run: bool = False) -> list[remotekit.Target]:
        """The selected targets (``dry_run``: targets that run no step, see
        :class:`remotekit.Target`); a bad inventory or an empty selection ends the task
        (exit 2)."""
        return select_targets(
            self.host, self.group, self.all, self.inventory, dry_run, agent=self.agent
        )

    def size(self) -> int:
        """How many targets are selected (none opened; a bad selection ends the task)."""
        return len(_selected(self.host, self.group, self.all, self.inventory)[1])


def select_targets(
    host: str,
    group: str,
    all: bool,
    inventory: str,
    dry_run: bool = False,
    *,
    agent: bool = True,
) -> list[remotekit.Target]:
    """Targets by name, group or all; none of them: hosts.yaml's ``default:``, else ``local``
    (said once on stderr when hosts.yaml declares other hosts), from ``inventory``; with
    ``agent`` False, none of them uses the resident agent."""
    inv, specs = _selected(host, group, all, inventory)
    others = [h for h in inv.hosts if h != "local"]
    if not (host or group or all or inv.default) and others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        print(
            f"remotekit: no --host given: running on local, this machine ({inv.path} also "
            f"declares {shown}; --host NAME, or `default: NAME` in it, picks another)",
            file=sys.stderr,
            flush=True,
        )
    return [remotekit.Target(s, agent=None if agent else False, dry_run=dry_run) for s in specs]


def _selected(
    host: str, group: str, all: bool, inventory: str
) -> tuple[remotekit.Inventory, list[HostSpec]]:
    """The inventory and the specs selected from it; a bad one or none ends the task (2)."""
    try:
        inv = remotekit.load_inventory(inventory or None)
        if host or group or all:
            specs = inv.select(hosts=host or None, group=group or None, all=all)
        else:
            specs = inv.select_default()
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    if not specs:
        raise Exit("remotekit: no targets selected", code=2)
    return inv, list(specs)


def one_target(
    host: str, inventory: str, task_name: str, dry_run: bool = False
) -> remotekit.Target:
    """The one target a single-host task (``get``, ``shell``, ``forward``) works on."""
    targets = select_targets(host, "", False, inventory, dry_run)
    if len(targets) != 1:
        raise Exit(f"remotekit: {task_name} takes one --host", code=2)
    return targets[0]


def named_side(path: str, inventory: str) -> tuple[str, str] | None:
    """``(NAME, PATH)`` when ``path`` is written ``NAME:PATH``, rsync's and scp's remote side
    (a colon before any slash), with NAME a target of hosts.yaml; None for a local path. A
    NAME hosts.yaml lacks ends the task (2), saying how a local path with a colon is typed."""
    from remotekit.sync import host_path

    named = host_path(path)
    if named is None:
        return None
    try:
        inv = remotekit.load_inventory(inventory or None)
    except remotekit.RemotekitError as exc:
        raise Exit(f"remotekit: {exc}", code=2) from None
    if named[0] not in inv.hosts:
        raise Exit(
            f"remotekit: {path}: no target {named[0]!r} in {inv.path or 'hosts.yaml'} (known: "
            f"{', '.join(inv.hosts)}; a local path with a colon is written ./{path})",
            code=2,
        )
    return named


def host_of(path: str, host: str, name: str) -> str:
    """The one host a ``NAME:PATH`` side (``path``) names, where ``--host`` (``host``) was
    also given it must be the same one."""
    if host and host != name:
        raise Exit(f"remotekit: {path} names {name}, --host names {host}: give one", code=2)
    return name


def required(**values: Any) -> None:
    """Options a task cannot do without (options, not positionals: so --help stays help)."""
    for name, value in values.items():
        if not value:
            raise Exit(f"remotekit: --{name.replace('_', '-')} is required", code=2)


def split_option(name: str, value: str) -> list[str]:
    """``value`` split like a shell would here; bad quoting is a usage error naming --name."""
    try:
        return shlex.split(value)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise Exit(f"remotekit: --{name}: {exc} in {value!r}", code=2) from None


#: Where the ``remotekit`` program puts the words after ``--`` of the argv it parsed, in the
#: config each task's context reads (invoke keeps only a space-joined string of them).
AFTER_DASHES = ("remotekit", "after_dashes")


def words_after_dashes(argv: Sequence[str]) -> list[str]:
    """The words after the first ``--`` of ``argv`` (the program's name first), exactly as
    given; where invoke's parser splits them off too."""
    rest = list(argv[1:])
    return rest[rest.index("--") + 1 :] if "--" in rest else []


def after_dashes(c: Context) -> list[str]:
    """The words after ``--`` on the command line the task was called by, exactly as given:
    from the argv the ``remotekit`` program parsed (also an in-process ``program.run(argv)``);
    in a collection mounted in a project's own tasks.py, invoke's program parsed this
    process's command line, ``sys.argv``."""
    section, key = AFTER_DASHES
    given = c.config.get(section, {}).get(key)
    return list(given) if given is not None else words_after_dashes(sys.argv)


def command_words(c: Context, name: str, value: str) -> list[str]:
    """A command (or a script's arguments) as typed: the words after ``--``, untouched, or
    ``--name``'s value split like a shell would; both at once is a usage error."""
    words = after_dashes(c)
    if value and words:
        raise Exit(f"remotekit: give --{name} or the words after --, not both", code=2)
    return words or split_option(name, value)


#: The shell a ``--cmd`` line is given to there: POSIX sh, which every image has (bash is
#: not in alpine's or busybox's); ``--cmd LINE`` is ``-- sh -c LINE``.
SHELL = ("sh", "-c")
CMD_HELP = (
    "a shell line, run there by sh -c as typed (pipes, &&, cd, $VARS, globs: "
    "--cmd 'cd /data && ls | wc -l')"
)


def shell_line(c: Context, cmd: str) -> list[str]:
    """The argv of ``--cmd LINE`` or of the words after ``--``: ``sh -c LINE`` (the line one
    argument, as typed: never split nor quoted; it travels in the step's header as bytes,
    as the words after ``--`` do), else the words untouched; both at once is a usage error.

    Why a shell for one string: it is how ssh (``ssh host 'ls | wc -l'``) and Fabric
    (``c.run("...")``) take a command, and both give it to a shell there; kubectl's
    ``exec -- ARGV`` runs none, and neither do the words after ``--`` here."""
    words = after_dashes(c)
    if cmd and words:
        raise Exit("remotekit: give --cmd or the words after --, not both", code=2)
    return [*SHELL, cmd] if cmd else words


#: The short flags remotekit keeps, on every task that has the option: rsync's, make's and
#: ``git clean``'s ``-n`` for a dry run. (No other short flags: invoke's automatic ones gave
#: ``-l`` three meanings across tasks.)
SHORT_FLAGS = {"dry_run": "n"}


class RemotekitTask(invoke.Task):  # type: ignore[type-arg]
    """A task whose options have :data:`SHORT_FLAGS`' short names where it takes them (and
    no automatic short flags): ``@task(klass=RemotekitTask)``, which :func:`task` and
    :func:`fleet_task` pass."""

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts: dict[str, Any] = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name)
        if short is not None and short not in taken_names:
            opts["names"] = [*opts["names"], short]
        return opts


def task(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """invoke's ``@task(**options)`` making a :class:`RemotekitTask` (no automatic short
    flags)."""
    made: Callable[[Callable[..., Any]], Any] = invoke.task(
        **{"klass": RemotekitTask, "auto_shortflags": False, **options}
    )
    return made


@dataclass(frozen=True)
class OptionGroup:
    """Options that several tasks take, declared once.

    ``options`` is a dataclass whose fields are the options (in order, with their defaults);
    a task that has the parameter ``param`` sees the options there in the signature invoke
    reads, and gets one ``options`` instance.
    """

    param: str
    options: type
    help: Mapping[str, str]
    #: ``@task`` lists the group adds to (``{"optional": ["watch"]}``).
    task_lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def parameters(self) -> list[inspect.Parameter]:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return [inspect.Parameter(f.name, kind, default=f.default) for f in fields(self.options)]

    def take(self, values: dict[str, Any]) -> Any:
        """The group's instance, made from (and removing) its options in ``values``."""
        return self.options(**{f.name: values.pop(f.name) for f in fields(self.options)})


SELECTION = OptionGroup("sel", Selection, SELECT_HELP)

#: The default a group's parameter takes in a task's own signature when Python wants one there
#: (``def py(c, script="", args="", sel: Selection = OPTIONS_HERE, ...)``). Never used: the
#: group's options stand there instead, and the task always gets the group's instance.
OPTIONS_HERE: Any = None


def fleet_task(*groups: OptionGroup, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@task`` for a task that works on a selection of targets, and takes ``groups``.

    The task declares ``sel: Selection`` where the selection options belong in its signature;
    invoke sees ``--host``, ``--group``, ... there instead, with their help, and the task gets
    them as one :class:`Selection`; the same for each further group. ``options`` are
    ``@task``'s (``help`` for the task's own options, ``iterable``, ``optional``, ...).
    No automatic short flags: invoke's gave ``-l`` three meanings across tasks (``--linear``,
    ``--all``, ``--allow-global``); a one-letter option (``-a``) is its own short flag, and
    ``--dry-run`` is also ``-n`` (:data:`SHORT_FLAGS`).
    """
    groups = (SELECTION, *groups)

    def wrap(body: Callable[..., Any]) -> Any:
        sig = inspect.signature(body)
        params = list(sig.parameters.values())
        for group in groups:
            declared = [p.name for p in params]
            if group.param not in declared:
                raise TypeError(f"task {body.__name__} has no parameter {group.param!r}")
            at = declared.index(group.param)
            params[at : at + 1] = group.parameters()
        outer = sig.replace(parameters=params)

        @functools.wraps(body)
        def run_task(*args: Any, **kwargs: Any) -> Any:
            given = outer.bind(*args, **kwargs)
            given.apply_defaults()
            values = dict(given.arguments)
            made = {group.param: group.take(values) for group in groups}
            sel = made[SELECTION.param]
            with tables_fit(None if sel.wide or sel.json else terminal_width()):
                return body(**values, **made)

        run_task.__signature__ = outer  # type: ignore[attr-defined]
        merged = {"auto_shortflags": False, **options}
        merged["help"] = {k: v for g in groups for k, v in g.help.items()}
        merged["help"].update(options.get("help", {}))
        for g in groups:
            for key, names in g.task_lists.items():
                merged[key] = [*merged.get(key, ()), *names]
        return task(**merged)(run_task)

    return wrap
