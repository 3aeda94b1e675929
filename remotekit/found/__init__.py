"""Groups found at run time: the cluster names the members, remotekit enters each one.

A hosts.yaml group may be a query instead of a list::

    groups:
      cts:      {pct_list: pve1, tag: gpu}              # running CTs of Proxmox node pve1
      jobnodes: {slurm_job: 4242, via: login1}          # every node of running job 4242
      trainers: {kubectl_selector: app=trainer, namespace: ml}   # every running pod

Each kind is one :class:`~remotekit.found.core.Finder` module (``pct``, ``slurm``,
``kubectl``), registered in :data:`FINDERS` by its hosts.yaml key. The query runs on the
group's *via* host (a declared host; ``pct_list`` names it, the others say ``via:``, default
``local``) each time the group is selected (``--group cts``, ``Inventory.select(group=...)``);
:func:`~remotekit.found.core.resolve` makes the members, HostSpecs named ``GROUP/MEMBER``
(``cts/200``): the via host's connection, then the hop the finder found (``pct exec 200``,
``srun --jobid 4242 -w node01``, ``kubectl exec ... trainer-0``), then the group's own
settings (venv, workdir, env, ...). A query that fails, or finds no one, is a
:class:`~remotekit.errors.GroupError` naming the group, the query and the cause.
"""

from __future__ import annotations

from remotekit.found.core import (
    MAX_MEMBERS,
    Finder,
    Found,
    FoundGroup,
    QueryFailed,
    Resolved,
    Said,
    resolve,
)
from remotekit.found.kubectl import KubeSelector
from remotekit.found.pct import PctList
from remotekit.found.slurm import SlurmJob

__all__ = [
    "FINDERS",
    "MAX_MEMBERS",
    "MEMBER_KEYS",
    "Finder",
    "Found",
    "FoundGroup",
    "KubeSelector",
    "PctList",
    "QueryFailed",
    "Resolved",
    "Said",
    "SlurmJob",
    "resolve",
]

#: hosts.yaml group key -> the finder it declares.
FINDERS: dict[str, type[Finder]] = {f.key: f for f in (PctList, SlurmJob, KubeSelector)}

#: The host keys a found group may set for its members (the rest is the via host's
#: connection, or the hop the finder found). A declared host takes the same keys
#: (``inventory.HOST_KEYS`` is built from this set).
MEMBER_KEYS = frozenset(
    {
        "venv",
        "python",
        "workdir",
        "env",
        "secret_env",
        "checkpoints",
        "runs_dir",
        "gpu",
        "gpus",
        "timeouts",
        "agent",
    }
)
