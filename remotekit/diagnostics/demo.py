"""The demo: sample checkpoints made on a target and scanned there, in a directory of the
caller's or in a temporary one made there and removed afterwards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from remotekit.diagnostics.checkpoints import DemoReport, ProgressCallback, run_demo
from remotekit.result import Script

if TYPE_CHECKING:
    from remotekit.target import Target

_MKDTEMP = Script(b"import tempfile\nprint(tempfile.mkdtemp(prefix='remotekit-demo-'))\n")


def demo(
    target: Target, directory: str | None = None, *, on_progress: ProgressCallback | None = None
) -> DemoReport:
    """:func:`~remotekit.diagnostics.checkpoints.run_demo` in ``directory`` there, or (None)
    in a new private temp dir there that is removed afterwards, whatever happens."""
    if directory:
        return run_demo(target, directory, on_progress=on_progress)
    where = target.run_python(_MKDTEMP, step="demo dir").stdout.strip()
    try:
        return run_demo(target, where, on_progress=on_progress)
    finally:
        target.run(["rm", "-rf", "--", where], check=False, step="demo cleanup")
