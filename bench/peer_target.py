"""What the peers (Mitogen, execnet) run there in bench_steps.py: a module of the caller's
own, which Mitogen ships on demand; execnet runs the same source text."""

from __future__ import annotations

#: A tiny file, run as remotekit runs a script: as ``__main__``, its output back here.
TINY = 'print("ok")\n'


def run_true() -> int:
    """``true`` as a new process there: its exit status."""
    import subprocess

    return subprocess.call(["true"])


def run_source(source: str) -> str:
    """``source`` run as ``__main__`` in this interpreter; what it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "tiny.py", "exec"), {"__name__": "__main__"})
    return out.getvalue()
