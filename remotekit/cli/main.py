"""The installed ``remotekit`` command (and ``python -m remotekit``): invoke's ``Program``
over the package's task collection, so it works from any directory, with ``--list``,
``--help TASK``, ``--version`` and ``--print-completion-script bash|zsh|fish``."""

from __future__ import annotations

from invoke import Program

from remotekit import __version__
from remotekit.cli import ns

program = Program(
    namespace=ns,
    name="remotekit",
    binary="remotekit",
    binary_names=["remotekit"],
    version=__version__,
)


def main() -> None:
    """Entry point of the ``remotekit`` console script."""
    program.run()
