"""The package's invoke tasks as one importable collection, ``remotekit.tasks.ns``: mount it
in a project's own ``tasks.py`` with ``ns.add_collection(remotekit.tasks.ns, "rk")``.
The tasks themselves live in :mod:`remotekit.cli`."""

from __future__ import annotations

from remotekit.cli import TASKS, collection, ns

__all__ = ["TASKS", "collection", "ns"]
