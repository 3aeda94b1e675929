"""What every checkpoint command shares: the scripts there, :class:`CheckpointError`, the
safety flags, numbers from records, and numbers, paths and tensor kinds in words."""

from __future__ import annotations

import math
import posixpath
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics.base import DiagnosticRun, Record, run_diagnostic
from remotekit.errors import DiagnosticError
from remotekit.remote.protocol import number
from remotekit.render import visible

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "KIND_WORDS",
    "SAMPLES_SCRIPT",
    "SCRIPT",
    "SECTIONS",
    "CheckpointError",
    "WarningCallback",
    "as_float",
    "as_int",
    "display_paths",
    "kinds",
    "run_script",
    "short_count",
    "short_float",
    "warn",
]

SCRIPT = "ckpt.py"
SAMPLES_SCRIPT = "ckpt_samples.py"
SECTIONS = ("weights", "optimizer")

WarningCallback = Callable[[str], None]


class CheckpointError(DiagnosticError):
    """The checkpoint script could not run at all; the message says why and what to do.

    Raised for a fatal ``error`` record (no torch there, a path that does not exist, an
    ``--allow-global`` name that cannot be imported) and for a script that stopped without
    its final record (crashed or killed); ``result`` is the step's Result.
    """


# --------------------------------------------------------------------------- running


def as_int(v: Any) -> int:
    """A count from a record (0 when it is missing or not a number)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def as_float(v: Any) -> float | None:
    """A float from a record; the script writes non-finite floats as "nan", "inf", "-inf"."""
    n = number(v)
    return None if n is None else float(n)


def run_script(
    target: Target,
    script: str,
    args: Sequence[str],
    *,
    step: str,
    timeout: float | None,
    on_record: Callable[[Record], None] | None = None,
) -> DiagnosticRun:
    """Run a checkpoint script; CheckpointError on a fatal record or a missing ``done``."""
    return run_diagnostic(
        target,
        script,
        args,
        step=step,
        timeout=timeout,
        on_record=on_record,
        fatal_errors=True,
        error=CheckpointError,
    )


def warn(on_warning: WarningCallback | None, message: str) -> None:
    """A warning of the script to ``on_warning``, else to :func:`warnings.warn` (shown escaped)."""
    if on_warning is not None:
        on_warning(message)
    else:
        warnings.warn(visible(message), UserWarning, stacklevel=3)


# --------------------------------------------------------------------------- words


def short_count(n: int) -> str:
    """A count in 3 or 4 characters: ``7``, ``1.2k``, ``3.4M``, ``1.0B``."""
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def short_float(x: float | None) -> str | None:
    """A float in 3 significant digits for a table (``nan``, ``inf`` as such; None stays)."""
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.3g}"


def display_paths(paths: Sequence[str]) -> dict[str, str]:
    """Paths relative to their common parent (remote paths are POSIX)."""
    if len(paths) <= 1:
        return {p: p for p in paths}
    try:
        base = posixpath.commonpath([posixpath.dirname(p) or "/" for p in paths])
    except ValueError:  # relative and absolute mixed
        return {p: p for p in paths}
    return {p: (posixpath.relpath(p, base) if base not in ("", "/") else p) for p in paths}


#: How :func:`kinds` names each kind of tensor that is no weight (singular, plural).
KIND_WORDS = {
    "counter": ("counter", "counters"),
    "score": ("score", "scores"),
    "rng": ("RNG state", "RNG states"),
    "integer": ("integer tensor", "integer tensors"),
}


def kinds(other: Mapping[str, int]) -> str:
    """ "7 counters, 4 scores": the tensors that are no weights, per kind."""
    words = [(n, KIND_WORDS.get(k, (f"{k} tensor", f"{k} tensors"))) for k, n in other.items() if n]
    return ", ".join(f"{n} {w[0] if n == 1 else w[1]}" for n, w in words)
