"""Which targets a task works on: the selection options, declared once.

Every fleet task takes ``--host a,b`` / ``--group g`` / ``--all`` (default: ``local``),
``--parallel N``, ``--json``, ``--verbose`` and ``--inventory FILE``. A task says so by one
parameter, ``sel: Selection``; :func:`fleet_task` puts the seven options in its place in the
signature invoke reads (``__signature__``), adds their help, and hands the task one
:class:`Selection`.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields
from typing import Any, Callable

from invoke import Exit, task

import remotekit

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


@dataclass(frozen=True)
class Selection:
    """The target selection and output options every fleet task takes (defaults: ``local``)."""

    host: str = ""
    group: str = ""
    all: bool = False
    parallel: int = 0
    json: bool = False
    verbose: bool = False
    inventory: str = ""

    def targets(self) -> list[remotekit.Target]:
        """The selected targets; a bad inventory or an empty selection ends the task (exit 2)."""
        return select_targets(self.host, self.group, self.all, self.inventory)


#: The default selection (``local``): for a task whose own options come before the selection
#: (``def py(c, script="", args="", sel: Selection = DEFAULT_SELECTION, ...)``).
DEFAULT_SELECTION = Selection()


def select_targets(host: str, group: str, all: bool, inventory: str) -> list[remotekit.Target]:
    """Targets by name, group or all (none of them: ``local``), from ``inventory``."""
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


def one_target(host: str, inventory: str, task: str) -> remotekit.Target:
    """The one target a single-host task (``get``, ``shell``, ``forward``) works on."""
    targets = select_targets(host, "", False, inventory)
    if len(targets) != 1:
        raise Exit(f"remotekit: {task} takes one --host", code=2)
    return targets[0]


def required(**values: Any) -> None:
    """Options a task cannot do without (options, not positionals: so --help stays help)."""
    for name, value in values.items():
        if not value:
            raise Exit(f"remotekit: --{name.replace('_', '-')} is required", code=2)


_SELECTION_PARAMETERS = [
    inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default)
    for f in fields(Selection)
]


def fleet_task(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@task`` for a task that works on a selection of targets.

    The task declares ``sel: Selection`` where the selection options belong in its signature
    (its place decides invoke's short flags); invoke sees ``--host``, ``--group``, ... there
    instead, with their help, and the task gets them as one :class:`Selection`. ``options``
    are ``@task``'s (``help`` for the task's own options, ``iterable``, ``optional``, ...).
    """

    def wrap(body: Callable[..., Any]) -> Any:
        sig = inspect.signature(body)
        params = list(sig.parameters.values())
        at = [p.name for p in params].index("sel")
        outer = sig.replace(parameters=[*params[:at], *_SELECTION_PARAMETERS, *params[at + 1 :]])

        @functools.wraps(body)
        def run_task(*args: Any, **kwargs: Any) -> Any:
            given = outer.bind(*args, **kwargs)
            given.apply_defaults()
            values = dict(given.arguments)
            sel = Selection(**{p.name: values.pop(p.name) for p in _SELECTION_PARAMETERS})
            return body(**values, sel=sel)

        run_task.__signature__ = outer  # type: ignore[attr-defined]
        return task(run_task, **{**options, "help": {**SELECT_HELP, **options.get("help", {})}})

    return wrap
