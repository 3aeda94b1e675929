"""The one way a diagnostic's local half runs its remote half and reads what it said.

A remote script (``remotekit/remote/<name>``) speaks the record protocol of
:mod:`remotekit.remote.protocol` (imported here too: the format is written once): one JSON
object per stdout line, ``warning`` / ``error`` / ``note`` records, and ONE final ``done``
record with the exit code. :func:`run_diagnostic` ships the script (with the sibling modules it
imports), hands each record to ``on_record`` as it arrives, and returns a :class:`DiagnosticRun`; a
script that stopped before its final record is a :class:`~remotekit.DiagnosticError` naming
host and step, with the last lines it wrote. A record becomes a value through its class
(:class:`remotekit.remote.records.Record`, declared once, in ``remote/``), and every report
satisfies :class:`Report`, which is all that renderers, ``diagnose``, ``--json`` and fleet
summaries rely on.

Exit codes of every diagnostic: 0 OK, 1 findings, 2 could not run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from remotekit import shipping
from remotekit.errors import DiagnosticError
from remotekit.remote.protocol import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, FINAL, parse
from remotekit.result import Result, Script, Shown

if TYPE_CHECKING:
    from remotekit.target import OutputCallback, Target

__all__ = [
    "EXIT_FAILED",
    "EXIT_FINDINGS",
    "EXIT_OK",
    "DiagnosticRun",
    "OutputTail",
    "Report",
    "run_diagnostic",
    "run_records",
    "worst_exit",
]

Record = dict[str, Any]


@runtime_checkable
class Report(Protocol):
    """What every diagnostic report offers, whatever else it holds.

    ``exit_code``: 0 OK, 1 findings, 2 could not (fully) run. ``findings``: one line per
    problem found; ``notes``: context that is not a problem; ``errors``: what could not be
    checked. ``render()``: the report for people (tables, lines).
    """

    @property
    def exit_code(self) -> int: ...

    @property
    def findings(self) -> tuple[str, ...]: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    @property
    def errors(self) -> tuple[str, ...]: ...

    def render(self) -> str:
        """The text the CLI prints for the report (also its ``str()``)."""
        ...


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


def _script_of(script: str | Script) -> Script:
    """``remote/<script>`` with the modules it imports, or a given Script with the protocol
    module beside it (a diagnostic of your own can ``from protocol import Out``)."""
    if isinstance(script, Script):
        return replace(
            script, files={"protocol.py": shipping.source("protocol.py"), **script.files}
        )
    return shipping.script(script)


def _name(script: str | Script) -> str:
    return script.name if isinstance(script, Script) else script


def run_records(
    target: Target,
    script_name: str | Script,
    args: Sequence[str] = (),
    *,
    step: str | None = None,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
    on_output: OutputCallback | None = None,
    env: Mapping[str, str] | None = None,
    keep: bool = True,
    preload: Sequence[str] | None = None,
    at: int | None = None,
    python: str = "python3",
) -> tuple[list[Record], Result]:
    """Run ``remote/<script_name>`` (or a :class:`~remotekit.Script`) on ``target``; return
    its records and the step's Result (``keep=False``: no records kept, each goes to
    ``on_record`` only: a script that writes for days, as ``train-log --follow``).

    Never raises for a non-zero exit of the script (the records say what went wrong); it does
    raise the engine's errors (timeout, connection, container, interpreter). ``env`` is
    passed to ``run_python`` (variables set for the script there). ``preload``: the slow
    imports this run needs, for the agent (None: torch when the shipped code imports it
    anywhere). ``at``: run it with ``python`` inside only the first ``at`` hops of the chain
    (:meth:`~remotekit.Target.run_python_at`; 0: on the node); None: the target's interpreter.
    The lower layer of :func:`run_diagnostic`, which also checks the final record.
    """
    records: list[Record] = []

    def sink(stream: str, line: str) -> None:
        rec = parse(line) if stream == "stdout" else None
        if rec is not None:
            if keep:
                records.append(rec)
            if on_record is not None:
                on_record(rec)
        elif on_output is not None:
            on_output(stream, line)

    script = _script_of(script_name)
    how: dict[str, Any] = dict(
        args=list(args),
        step=step or _name(script_name).removesuffix(".py"),
        timeout=timeout,
        env=env,
        check=False,
        on_output=sink,
        capture=False,
    )
    if at is not None:
        return records, target.run_python_at(at, script, python=python, **how)
    heavy = _heavy(script) if preload is None else tuple(preload)
    return records, target.run_python(script, preload=heavy, **how)


def _heavy(script: Script) -> tuple[str, ...]:
    """``("torch",)`` when the script or a module shipped beside it imports torch: with the
    agent on, it then starts with torch already imported."""
    sources = [script.source, *script.files.values()]
    if isinstance(script, shipping.PackageScript):  # what the diagnostic it starts is made of
        sources += shipping.slice_sources(script)
    return ("torch",) if any(b"import torch" in s for s in sources) else ()


@dataclass(frozen=True, repr=False)
class DiagnosticRun(Shown):
    """One finished run of a diagnostic script: its records in order, its final ``done``
    record, the step's Result, and the messages of its warning / note / error records
    (``findings`` are the warnings', ``errors`` the errors', ``notes`` the notes')."""

    records: tuple[Record, ...]
    final: Record
    result: Result

    @property
    def host(self) -> str:
        return self.result.host

    @property
    def findings(self) -> tuple[str, ...]:
        return self.messages("warning")

    @property
    def errors(self) -> tuple[str, ...]:
        return self.messages("error")

    @property
    def notes(self) -> tuple[str, ...]:
        return self.messages("note")

    def render(self) -> str:
        """``STEP: exit N, K records``, then a line per error, warning and note record."""
        said = [
            f"{kind}: {message}"
            for kind in ("error", "warning", "note")
            for message in self.messages(kind)
        ]
        head = f"{self.result.step}: exit {self.exit_code}, {len(self.records)} records"
        return "\n".join([head, *said])

    @property
    def exit_code(self) -> int:
        code = self.final.get("exit_code")
        return code if code in (EXIT_OK, EXIT_FINDINGS, EXIT_FAILED) else EXIT_FAILED

    def of(self, type_: str) -> list[Record]:
        """The records of one type, in order."""
        return [r for r in self.records if r.get("type") == type_]

    def first(self, type_: str) -> Record | None:
        """The first record of ``type_``, or None when the script printed none."""
        return next((r for r in self.records if r.get("type") == type_), None)

    def messages(self, type_: str) -> tuple[str, ...]:
        """The ``message`` of each record of ``type_`` (``"warning"``, ``"note"``, ``"error"``)."""
        return tuple(str(r.get("message")) for r in self.of(type_))


def run_diagnostic(
    target: Target,
    script_name: str | Script,
    args: Sequence[str] = (),
    *,
    step: str | None = None,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
    env: Mapping[str, str] | None = None,
    fatal_errors: bool = False,
    error: type[DiagnosticError] = DiagnosticError,
    preload: Sequence[str] | None = None,
    at: int | None = None,
    python: str = "python3",
) -> DiagnosticRun:
    """Run ``remote/<script_name> <args>`` on ``target``; each record goes to ``on_record`` as
    it arrives; the :class:`DiagnosticRun` comes back once the script ended.

    Raises ``error`` (a :class:`~remotekit.DiagnosticError`) when the script stopped before
    its final record, naming host, step, exit status and its last output lines; with
    ``fatal_errors``, also when it wrote an ``error`` record (a script whose errors mean "could
    not run at all"). Engine errors (timeout, connection, interpreter) pass through.
    ``preload``, ``at`` and ``python`` as for :func:`run_records`.
    """
    tail = OutputTail()
    records, result = run_records(
        target,
        script_name,
        args,
        step=step,
        timeout=timeout,
        on_record=on_record,
        on_output=tail,
        env=env,
        preload=preload,
        at=at,
        python=python,
    )
    if fatal_errors:
        fatal = [str(r.get("message")) for r in records if r.get("type") == "error"]
        if fatal:
            raise error("; ".join(fatal), result=result)
    final = next((r for r in reversed(records) if r.get("type") == FINAL), None)
    if final is None:
        command = f"{_name(script_name)} {args[0]}" if args else _name(script_name)
        msg = f"{command} stopped before its final record (exit {result.exit_code})"
        if tail.lines:
            msg += "; last output:\n" + tail.indented()
        raise error(msg, result=result)
    return DiagnosticRun(tuple(records), final, result)


def worst_exit(codes: Sequence[int]) -> int:
    """The exit code of several reports: the worst (highest) one; 0 for none."""
    return max(codes, default=EXIT_OK)
