"""A host's health now, or refreshed with ``--watch``: ``gpu``, ``env``, ``disk``, ``procs``.

Each is a few lines over :mod:`remotekit.diagnostics.system` (imported when a task runs, so
``--list`` and ``--help`` stay quick).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from invoke import Context

from remotekit.cli.output import WATCHING, Watching, fan_out, watch_or_fan_out
from remotekit.cli.selection import OPTIONS_HERE, TIMEOUT_HELP, Selection, fleet_task


def _system() -> ModuleType:
    from remotekit.diagnostics import system

    return system


@fleet_task(
    WATCHING,
    help={
        "timeout": TIMEOUT_HELP,
        "temp": "warn at or above this GPU temperature, C (default 85)",
    },
)
def gpu(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    temp: float = 85.0,
    watching: Watching = OPTIONS_HERE,
) -> None:
    """GPU health: nvidia-smi (temperature, ECC, throttling, stale memory) and torch's view."""
    system = _system()
    watch_or_fan_out(
        sel,
        lambda t, console: system.gpu_status(t, timeout=timeout or None, temp_threshold=temp),
        render=system.render_gpu,
        title="gpu",
        watching=watching,
    )


@fleet_task(help={"timeout": TIMEOUT_HELP})
def env(c: Context, sel: Selection, timeout: float = 0.0) -> None:
    """Environment: Python, torch, CUDA, cuDNN, NCCL, container, memory; torch CVE warnings."""
    system = _system()
    fan_out(
        sel,
        lambda t, console: system.environment(t, timeout=timeout or None),
        render=system.render_env,
        title="env",
    )


@fleet_task(
    WATCHING,
    iterable=["path"],
    help={
        "timeout": TIMEOUT_HELP,
        "path": "a path to check (repeatable; default: workdir and checkpoints)",
        "min_free": "warn below this %% free (default 10)",
    },
)
def disk(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    path: Any = None,
    min_free: float = 10.0,
    watching: Watching = OPTIONS_HERE,
) -> None:
    """Disk: free space and inodes for workdir and checkpoints, largest files, will a save fit."""
    system = _system()
    watch_or_fan_out(
        sel,
        lambda t, console: system.disk_usage(
            t, list(path) or None, timeout=timeout or None, min_free_pct=min_free
        ),
        render=system.render_disk,
        title="disk",
        watching=watching,
    )


@fleet_task(
    WATCHING,
    help={
        "timeout": TIMEOUT_HELP,
        "every": "all processes, not only Python and GPU ones",
    },
)
def procs(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    every: bool = False,
    watching: Watching = OPTIONS_HERE,
) -> None:
    """Processes: Python and GPU processes with age and RSS (stale trainers holding a GPU)."""
    system = _system()
    watch_or_fan_out(
        sel,
        lambda t, console: system.processes(t, timeout=timeout or None, all_processes=every),
        render=system.render_procs,
        title="procs",
        watching=watching,
    )
