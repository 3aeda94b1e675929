"""What every sysinfo command may use: a file's text, a tool's output (bounded in time)."""

from __future__ import annotations

MIB = 1024 * 1024


def read_text(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def run_tool(argv, timeout):
    """(exit code, stdout, stderr) of ``argv``; a hung child is killed and not waited for long.

    A process stuck in the driver (D state) survives SIGKILL until the driver lets go, so
    after the kill we wait at most 2 s more and then leave it.
    """
    import contextlib
    import subprocess

    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        raise
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
