"""A host's health now, or refreshed with ``--watch``: ``gpu``, ``env``, ``disk``, ``procs``.

Each is a few lines over :mod:`remotekit.diagnostics.system` (imported when a task runs, so
``--list`` and ``--help`` stay quick).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from invoke import Context

import remotekit
from remotekit.cli.output import WATCHING, Watching, dry_run_steps, fan_out, watch_or_fan_out
from remotekit.cli.selection import (
    DRY_RUN_HELP,
    OPTIONS_HERE,
    TIMEOUT_HELP,
    Selection,
    fleet_task,
)
from remotekit.render import Console


def _system() -> ModuleType:
    from remotekit.diagnostics import system

    return system


@fleet_task(
    WATCHING,
    help={
        "timeout": TIMEOUT_HELP,
        "temp": "warn at or above this GPU temperature, C (default 85)",
        "layers": "what each level of the chain sees of the GPUs (node, each container, the "
        "interpreter), and which one lost them",
        "dry_run": DRY_RUN_HELP,
    },
)
def gpu(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    temp: float = 85.0,
    layers: bool = False,
    watching: Watching = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """GPU health: nvidia-smi (temperature, ECC, throttling, stale memory) and torch's view."""
    system = _system()
    render: Any = system.render_gpu

    def on_host(t: remotekit.Target, console: Console) -> Any:
        return system.gpu_status(t, timeout=timeout or None, temp_threshold=temp)

    if layers:
        from remotekit.diagnostics import gpulayers

        render = gpulayers.render_gpu_layers

        def on_host(t: remotekit.Target, console: Console) -> Any:
            return gpulayers.gpu_layers(t, timeout=timeout or None)

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), on_host)
    watch_or_fan_out(sel, on_host, render=render, title="gpu", watching=watching)


@fleet_task(help={"timeout": TIMEOUT_HELP, "dry_run": DRY_RUN_HELP})
def env(c: Context, sel: Selection, timeout: float = 0.0, dry_run: bool = False) -> None:
    """Environment: Python, torch, CUDA, cuDNN, NCCL, container, memory; torch CVE warnings."""
    system = _system()

    def on_host(t: remotekit.Target, console: Console) -> Any:
        return system.environment(t, timeout=timeout or None)

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), on_host)
    fan_out(
        sel,
        on_host,
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
        "dry_run": DRY_RUN_HELP,
    },
)
def disk(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    path: Any = None,
    min_free: float = 10.0,
    watching: Watching = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """Disk: free space and inodes for workdir and checkpoints, largest files, will a save fit."""
    system = _system()

    def on_host(t: remotekit.Target, console: Console) -> Any:
        paths = list(path) or None
        return system.disk_usage(t, paths, timeout=timeout or None, min_free_pct=min_free)

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), on_host)
    watch_or_fan_out(
        sel,
        on_host,
        render=system.render_disk,
        title="disk",
        watching=watching,
    )


@fleet_task(
    WATCHING,
    help={
        "timeout": TIMEOUT_HELP,
        "every": "all processes, not only Python and GPU ones",
        "dry_run": DRY_RUN_HELP,
    },
)
def procs(
    c: Context,
    sel: Selection,
    timeout: float = 0.0,
    every: bool = False,
    watching: Watching = OPTIONS_HERE,
    dry_run: bool = False,
) -> None:
    """Processes: Python and GPU processes with age and RSS (stale trainers holding a GPU)."""
    system = _system()

    def on_host(t: remotekit.Target, console: Console) -> Any:
        return system.processes(t, timeout=timeout or None, all_processes=every)

    if dry_run:
        return dry_run_steps(sel.targets(dry_run=True), on_host)
    watch_or_fan_out(
        sel,
        on_host,
        render=system.render_procs,
        title="procs",
        watching=watching,
    )
