"""remotekit: run code and diagnostics on containerized GPU hosts. The public API.

``import remotekit`` loads the engine (inventory, targets, transports, layers, fleet);
the diagnostics load on first use (``remotekit.diagnose``, ``remotekit.diagnostics``).

import remotekit
inv = remotekit.load_inventory("hosts.yaml")
with inv.target("kpro6") as t:                   # ssh -> pct exec 200 -> /root/venv/bin/python
    r = t.run(["nvidia-smi", "-L"], timeout=30)
    r = t.run_python("check.py", args=["--dir", "/workspace/checkpoints"], timeout=600)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from remotekit.errors import (
    AgentUnavailable,
    AuthError,
    ConnectError,
    ConnectionLost,
    ContainerError,
    ContainerNotFound,
    ContainerNotRunning,
    DryRun,
    ForwardError,
    GroupError,
    HostKeyError,
    InterpreterNotFound,
    InventoryError,
    ProtocolViolation,
    Reconnected,
    RemoteError,
    RemotekitError,
    StepCancelled,
    StepError,
    StepFailed,
    StepTimeout,
    UnknownHost,
)
from remotekit.fleet import Fleet, FleetInterrupted, HostOutcome, fleet
from remotekit.forward import Forward
from remotekit.inventory import HostSpec, Inventory, load_inventory, parse_inventory
from remotekit.result import Detached, Result, Script
from remotekit.runs import Run, RunInfo
from remotekit.step import echo
from remotekit.target import Check, PingReport, Target, local_target

if TYPE_CHECKING:
    from remotekit.diagnostics.diagnose import diagnose

__version__ = "0.1.0"

__all__ = [
    "AgentUnavailable",
    "AuthError",
    "Check",
    "ConnectError",
    "ConnectionLost",
    "ContainerError",
    "ContainerNotFound",
    "ContainerNotRunning",
    "Detached",
    "DryRun",
    "Fleet",
    "FleetInterrupted",
    "Forward",
    "ForwardError",
    "GroupError",
    "HostKeyError",
    "HostOutcome",
    "HostSpec",
    "InterpreterNotFound",
    "Inventory",
    "InventoryError",
    "PingReport",
    "ProtocolViolation",
    "Reconnected",
    "RemoteError",
    "RemotekitError",
    "Result",
    "Run",
    "RunInfo",
    "Script",
    "StepCancelled",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "Target",
    "UnknownHost",
    "diagnose",
    "echo",
    "fleet",
    "load_inventory",
    "local_target",
    "parse_inventory",
]


#: Imported on first use, so ``import remotekit`` loads the engine only (no diagnostics,
#: no renderer, no torch, no paramiko).
_LAZY_MODULES = frozenset({"diagnostics", "render"})


def __getattr__(name: str) -> Any:
    if name == "diagnose":
        from remotekit.diagnostics.diagnose import diagnose

        # kept as an ordinary attribute from now on, where tools that read the module's
        # __dict__ (pdoc, the API reference) find it like every other name in __all__
        globals()["diagnose"] = diagnose
        return diagnose
    if name == "diagnostics":
        # As before it was lazy: ``remotekit.diagnostics.system`` works without its own import.
        importlib.import_module("remotekit.diagnostics.diagnose")
    if name in _LAZY_MODULES:
        return importlib.import_module(f"remotekit.{name}")
    raise AttributeError(f"module 'remotekit' has no attribute {name!r}")
