"""remotekit: run code and diagnostics on containerized GPU hosts.

import remotekit
inv = remotekit.load_inventory("hosts.yaml")
with inv.target("kpro6") as t:                   # ssh -> pct exec 200 -> /root/venv/bin/python
    r = t.run(["nvidia-smi", "-L"], timeout=30)
    r = t.run_python("check.py", args=["--dir", "/workspace/checkpoints"], timeout=600)
"""

from __future__ import annotations

from remotekit.diagnostics.diagnose import diagnose
from remotekit.errors import (
    AuthError,
    ConnectError,
    ConnectionLost,
    ContainerError,
    ContainerNotFound,
    ContainerNotRunning,
    ForwardError,
    HostKeyError,
    InterpreterNotFound,
    InventoryError,
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
from remotekit.target import Check, PingReport, Target, local_target

__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "Check",
    "ConnectError",
    "ConnectionLost",
    "ContainerError",
    "ContainerNotFound",
    "ContainerNotRunning",
    "Detached",
    "Fleet",
    "FleetInterrupted",
    "Forward",
    "ForwardError",
    "HostKeyError",
    "HostOutcome",
    "HostSpec",
    "InterpreterNotFound",
    "Inventory",
    "InventoryError",
    "PingReport",
    "RemotekitError",
    "Result",
    "Script",
    "StepCancelled",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "Target",
    "UnknownHost",
    "diagnose",
    "fleet",
    "load_inventory",
    "local_target",
    "parse_inventory",
]
