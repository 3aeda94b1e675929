"""The one way a diagnostic's local half runs its remote half.

A remote script (``remotekit/remote/<name>``) prints one JSON object per stdout line, each
with a ``"type"`` key. :func:`run_records` ships it with ``run_python``, turns those lines
into dicts as they arrive (``on_record`` sees each one live), and passes any other line on
to ``on_output``. Exit codes of every diagnostic: 0 OK, 1 findings, 2 could not run.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

from remotekit import remote
from remotekit.result import Result

if TYPE_CHECKING:
    from remotekit.target import OutputCallback, Target

__all__ = ["EXIT_FAILED", "EXIT_FINDINGS", "EXIT_OK", "OutputTail", "run_records", "worst_exit"]

EXIT_OK, EXIT_FINDINGS, EXIT_FAILED = 0, 1, 2

Record = dict[str, Any]


class OutputTail:
    """An ``on_output`` sink keeping the last ``n`` lines a script wrote besides its records:
    what a failure message quotes when the script stopped without its final record."""

    def __init__(self, n: int = 12) -> None:
        self.lines: deque[str] = deque(maxlen=n)

    def __call__(self, stream: str, line: str) -> None:
        self.lines.append(line)

    def indented(self) -> str:
        """The kept lines, each indented by two spaces."""
        return "\n".join("  " + line for line in self.lines)


def run_records(
    target: Target,
    script_name: str,
    args: Sequence[str] = (),
    *,
    step: str | None = None,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
    on_output: OutputCallback | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[list[Record], Result]:
    """Run ``remote/<script_name>`` on ``target``; return its records and the step's Result.

    Never raises for a non-zero exit of the script (the records say what went wrong); it does
    raise the engine's errors (timeout, connection, container, interpreter). ``env`` is
    passed to ``run_python`` (variables set for the script there).
    """
    records: list[Record] = []

    def sink(stream: str, line: str) -> None:
        if stream == "stdout" and line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if isinstance(rec, dict) and "type" in rec:
                records.append(rec)
                if on_record is not None:
                    on_record(rec)
                return
        if on_output is not None:
            on_output(stream, line)

    result = target.run_python(
        remote.script(script_name),
        args=list(args),
        step=step or script_name.removesuffix(".py"),
        timeout=timeout,
        env=env,
        check=False,
        on_output=sink,
        capture=False,
    )
    return records, result


def worst_exit(codes: Sequence[int]) -> int:
    return max(codes, default=EXIT_OK)
