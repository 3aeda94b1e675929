"""remotekit's laptop face: the task collection behind the ``remotekit`` command.

Every fleet task takes a selection of targets (``--host a,b``, ``--group g``, ``--all``;
default: hosts.yaml's ``default:``, else ``local``), runs them in parallel (``--parallel N``),
prints each host's output prefixed with its name, ends with a summary table when several hosts
ran, and exits with the worst host's code:
0 all OK, 1 findings, 2 some host failed. ``--json`` prints machine-readable output only.

Modules by theme: :mod:`~remotekit.cli.selection` (the selection options, declared once),
:mod:`~remotekit.cli.output` (running on many hosts, summaries, --json, --watch),
:mod:`~remotekit.cli.steps`, :mod:`~remotekit.cli.runs`, :mod:`~remotekit.cli.system`, :mod:`~remotekit.cli.diagnostics`,
:mod:`~remotekit.cli.daily`; :mod:`~remotekit.cli.main` is the installed ``remotekit`` command.

A project's own ``tasks.py`` can mount the collection::

    import remotekit.tasks
    from invoke import Collection

    ns = Collection(my_task)
    ns.add_collection(remotekit.tasks.ns, "rk")   # invoke rk.ping --host gpu1

(there invoke's program parses the command line, and its own options, such as ``--dry`` or
``-T``, change invoke's ``c.run``, which these tasks do not call).
"""

from __future__ import annotations

from typing import Any, Callable

from invoke import Collection, Task

from remotekit.cli import daily, diagnostics, runs, steps, system

#: Every task of the package, in the order ``--list`` shows them.
TASKS: tuple[Task[Callable[..., Any]], ...] = (
    steps.hosts,
    steps.ping,
    steps.run,
    steps.py,
    steps.put,
    steps.get,
    runs.runs,
    runs.logs,
    runs.stop,
    runs.rm,
    system.gpu,
    system.env,
    system.disk,
    system.procs,
    diagnostics.diagnose,
    diagnostics.train_log,
    diagnostics.ckpt_scan,
    diagnostics.ckpt_inspect,
    diagnostics.ckpt_diff,
    diagnostics.ckpt_bisect,
    diagnostics.demo,
    daily.shell,
    daily.forward,
    daily.sync,
)


def collection(*extra: Task[Callable[..., Any]]) -> Collection:
    """A new collection of every package task, plus ``extra`` (a project's own tasks)."""
    return Collection(*TASKS, *extra)


#: The package's tasks as one collection (``remotekit.tasks.ns`` is this one).
ns = collection()
