"""``diagnose``: one host's env, GPUs, disk and checkpoints, each section its own step; with
``run_dir=DIR`` also the run's training log, and one answer for the whole run.

Sections run in the order of :data:`SECTIONS` (plus ``train-log`` with ``run_dir``), each with
its own timeout (:data:`DEFAULT_TIMEOUTS`, overridable per name). A section that raises (a
:class:`~remotekit.RemotekitError` such as a timeout, or any other exception) becomes a
*failed* section and the others still run; ``ckpt-scan`` is *skipped* when the host has no
``checkpoints:`` and no ``checkpoints`` or ``run_dir`` is given, and *failed* where it finds no
checkpoint, as ``ckpt-scan`` is (where to look: :mod:`~remotekit.diagnostics.defaults`,
for both faces). The report's exit code is the worst section's: 0 OK, 1 findings, 2 a
section could not run.

``run_dir=DIR`` answers "what happened to this run?" in one go: the checkpoints under DIR (clean
or not, the first bad one by step), the training log found in DIR (format, spikes, whether
they sit at the checkpoint saves the scan found, with the chance estimate) and the
batch-composition verdict; :attr:`DiagnoseReport.verdict` says it in a few lines.

>>> report = diagnose(target, on_section=lambda s: print(s.name, s.status))
env ok
gpu findings
disk ok
ckpt-scan skipped
>>> report.exit_code, report.findings
(1, ('[gpu] GPU 3: temperature 88 C >= 85 C',))
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics import defaults, system
from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    Report,
    renamed,
    worst_exit,
)
from remotekit.errors import DiagnosticError, RemotekitError
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "DEFAULT_TIMEOUTS",
    "RUN_SECTIONS",
    "SECTIONS",
    "DiagnoseReport",
    "Section",
    "diagnose",
    "render_section",
    "render_verdict",
]

SECTIONS = ("env", "gpu", "disk", "ckpt-scan")
#: The sections of ``diagnose(run_dir=DIR)``: the log is read after the scan, with its save steps.
RUN_SECTIONS = (*SECTIONS, "train-log")
#: Seconds each section may run (its step's timeout); ``timeouts=`` overrides by name.
DEFAULT_TIMEOUTS: Mapping[str, float] = MappingProxyType(
    {"env": 60.0, "gpu": 90.0, "disk": 180.0, "ckpt-scan": 1800.0, "train-log": 600.0}
)
_STATUS = {EXIT_OK: "ok", EXIT_FINDINGS: "findings", EXIT_FAILED: "failed"}


@dataclass(frozen=True, repr=False)
class Section(Shown):
    """One finished section.

    ``status`` is ``"ok"``, ``"findings"``, ``"failed"`` (it raised, or its report says it
    could not run; ``error`` says why) or ``"skipped"`` (``error`` says why; exit code 0).
    ``report`` is the section's own report (:class:`~remotekit.diagnostics.system.EnvReport`,
    ``GpuReport``, ``DiskReport``, the checkpoint scan's), None when it raised or was skipped.
    Its ``str()`` is what ``remotekit diagnose`` prints as the section completes
    (:func:`render_section`).
    """

    name: str
    status: str
    exit_code: int
    findings: tuple[str, ...]
    error: str | None
    duration_s: float
    report: Any = None

    repr_keys = ("name", "status")

    @property
    def errors(self) -> tuple[str, ...]:
        """Why a failed section failed (one line), else nothing."""
        return (self.error,) if self.status == "failed" and self.error else ()

    def render(self) -> str:
        return render_section(self)

    def pictures(self) -> list[tuple[str, bytes]]:
        """Its report's (the train-log section's plot, with ``points``)."""
        return self.report.pictures() if isinstance(self.report, Shown) else []


@dataclass(frozen=True, repr=False)
class DiagnoseReport(Shown):
    """All sections in run order; ``findings`` are theirs, each prefixed ``[section]``."""

    host: str
    sections: tuple[Section, ...]
    exit_code: int
    findings: tuple[str, ...]
    summary: tuple[str, ...]  # one line per section, e.g. "gpu: findings (2) in 1.4 s"
    run: str | None = None
    #: With ``run``: the answer for the run (checkpoints, log, saves, batches), line by line.
    verdict: tuple[str, ...] = ()

    def section(self, name: str) -> Section | None:
        """The section of diagnostic ``name`` (``"gpu"``, ``"ckpt-scan"``, ...), if it ran."""
        return next((s for s in self.sections if s.name == name), None)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.summary

    @property
    def errors(self) -> tuple[str, ...]:
        """One line per failed section (a :class:`~remotekit.diagnostics.base.Report`)."""
        return tuple(f"[{s.name}] {s.error}" for s in self.sections if s.status == "failed")

    def pictures(self) -> list[tuple[str, bytes]]:
        """What ``diagnose --plot`` draws: with ``run`` and ``points`` > 0, the run's log
        (the train-log section's picture), shown in Jupyter below the findings and text."""
        return [p for s in self.sections for p in s.pictures()]

    def render(self) -> str:
        """Every section, then the run's verdict (with ``run``)."""
        parts = [render_section(s) for s in self.sections]
        return "\n\n".join(parts + ([render_verdict(self)] if self.run else []))


def _from_report(name: str, report: Report, started: float) -> Section:
    """A Section from a :class:`Report` (a finding or error may be an object with a
    ``message``: the train-log report's are)."""
    raw_code = report.exit_code
    code = raw_code if raw_code in _STATUS else EXIT_FAILED
    findings = tuple(str(getattr(f, "message", f)) for f in report.findings or ())
    error = None
    if code == EXIT_FAILED:
        errors = [str(getattr(e, "message", e)) for e in report.errors or ()]
        error = "; ".join(errors) or f"the section's report has exit code {raw_code!r}"
    return Section(name, _STATUS[code], code, findings, error, time.monotonic() - started, report)


def _scan_checkpoints(target: Target, places: Sequence[str], timeout: float) -> Any:
    """The scan of the first of ``places`` that holds checkpoints; where none does, ckpt-scan's
    own error for each (a run's folder, then the host's ``checkpoints:``)."""
    # Imported here: the checkpoint scanner is its own module, and diagnose must still run
    # (with a failed ckpt-scan section) where it is missing or broken.
    try:
        from remotekit.diagnostics.checkpoints import scan_checkpoints
    except ImportError as exc:
        raise RemotekitError(
            f"checkpoint scanner unavailable: {exc}", host=target.name, step="ckpt-scan"
        ) from exc
    said: list[str] = []
    for place in places:
        try:
            return scan_checkpoints(target, place, timeout=timeout)
        except DiagnosticError as exc:  # the scan's own "could not run": CheckpointError
            if place == places[-1] and not said:
                raise
            said.append(exc.message)
    raise RemotekitError("; ".join(dict.fromkeys(said)), host=target.name, step="ckpt-scan")


def _train_log(
    target: Target, run: str, scan: Any, timeout: float, points: int
) -> tuple[Any, str | None]:
    """The train-log report for the run's log, given the save steps the scan found, and
    the log read. The script chooses the log in the run directory (``find_log`` there: the
    one rule ``train-log`` on a directory follows too) and says which, why, and what else."""
    from remotekit.diagnostics import trainlog

    steps = _save_steps(scan)
    # the script also reads the saves off the run's checkpoints itself (names such as
    # checkpoint-2000 / global_step2000 / iter_0002000, and the files' own step keys): a
    # scan that failed, or found checkpoints whose step it could not read, still gives them
    report = trainlog.analyze_train_log(
        target, run, ckpt_steps=steps or None, checkpoints=run, points=points, timeout=timeout
    )
    src = getattr(report, "source", None)
    return report, getattr(src, "path", None)


def _save_steps(scan: Any) -> list[int]:
    """The steps of the checkpoints found (those with a real step, not an epoch)."""
    steps = set()
    for r in scan or ():
        step = getattr(r, "global_step", None)
        if isinstance(step, (int, float)) and getattr(r, "step_key", None) not in ("epoch",):
            steps.add(int(step))
    return sorted(steps)


# long: for its docstring; the body is the section table, then one loop over it.
@renamed(path="checkpoints", run="run_dir")
def diagnose(
    target: Target,
    *,
    checkpoints: str | None = None,
    run_dir: str | None = None,
    include_ckpt: bool = True,
    timeouts: Mapping[str, float] | None = None,
    on_section: Callable[[Section], None] | None = None,
    env: Mapping[str, str] | None = None,
    points: int = 0,
) -> DiagnoseReport:
    """Run env, gpu, disk and (with ``checkpoints``, ``run_dir`` or the host's
    ``checkpoints:``) ckpt-scan; with ``run_dir`` also train-log on the run's log, and the
    run's verdict.

    ``checkpoints`` is the checkpoint directory to scan (default: ``run_dir``, then the
    host's ``checkpoints:``, the first holding checkpoints: :func:`~remotekit.diagnostics.
    defaults.run_checkpoints`); no checkpoint there is a failed section, as ``ckpt-scan``
    says it. The disk section measures the host's ``workdir`` (else ``~``) and the first of
    those directories. ``run_dir`` is a training run's directory there: its checkpoints are
    scanned, its log (the one ``train-log`` on the directory chooses) is analysed with the
    steps of those checkpoints as save events. ``points`` > 0 fetches that many points of
    each log series
    (for a plot). ``timeouts`` overrides :data:`DEFAULT_TIMEOUTS` by section name (unknown
    names raise ValueError). ``env`` is set for the env, gpu and disk scripts there.
    ``on_section`` is called with each section as it completes, skipped ones included. Never
    raises for a failing section; it records it and goes on.
    """
    unknown = set(timeouts or {}) - set(RUN_SECTIONS)
    if unknown:
        raise ValueError(f"unknown section(s) in timeouts: {', '.join(sorted(unknown))}")
    limits = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    places = defaults.run_checkpoints(target, checkpoints, run_dir)
    disk_paths = defaults.disk_paths(target, places[0] if places else None)

    runs: dict[str, Callable[[], Any]] = {
        "env": lambda: system.environment(target, timeout=limits["env"], env=env),
        "gpu": lambda: system.gpu_status(target, timeout=limits["gpu"], env=env),
        "disk": lambda: system.disk_usage(target, disk_paths, timeout=limits["disk"], env=env),
    }
    skip: dict[str, str] = {}
    if not include_ckpt:
        skip["ckpt-scan"] = "not requested"
    elif not places:
        skip["ckpt-scan"] = defaults.NO_CHECKPOINTS
    else:
        runs["ckpt-scan"] = lambda: _scan_checkpoints(target, places, limits["ckpt-scan"])
    logs: list[str] = []
    if run_dir:
        run = run_dir

        def read_log() -> Any:
            scan = done.get("ckpt-scan")
            report, log = _train_log(target, run, scan, limits["train-log"], points)
            logs.append(log or "")
            return report

        runs["train-log"] = read_log

    sections: list[Section] = []
    done: dict[str, Any] = {}
    for name in RUN_SECTIONS if run_dir else SECTIONS:
        section = _run_section(name, runs.get(name), skip.get(name, ""))
        done[name] = section.report
        sections.append(section)
        if on_section is not None:
            on_section(section)

    return DiagnoseReport(
        host=target.name,
        sections=tuple(sections),
        exit_code=worst_exit([s.exit_code for s in sections]),
        findings=tuple(f"[{s.name}] {f}" for s in sections for f in s.findings),
        summary=tuple(_summary_line(s) for s in sections),
        run=run_dir,
        verdict=tuple(_verdict(sections, logs[0] if logs else None)) if run_dir else (),
    )


def _run_section(name: str, fn: Callable[[], Any] | None, skipped: str) -> Section:
    started = time.monotonic()
    if fn is None:
        return Section(name, "skipped", EXIT_OK, (), skipped, 0.0)
    try:
        return _from_report(name, fn(), started)
    except RemotekitError as exc:
        return Section(name, "failed", EXIT_FAILED, (), str(exc), time.monotonic() - started)
    except Exception as exc:  # one broken section must not cost the others
        msg = f"{type(exc).__name__}: {exc}"
        return Section(name, "failed", EXIT_FAILED, (), msg, time.monotonic() - started)


# ------------------------------------------------------------------------------- the verdict


def _verdict(sections: Sequence[Section], log: str | None) -> list[str]:
    by = {s.name: s for s in sections}
    return _ckpt_verdict(by.get("ckpt-scan")) + _log_verdict(by.get("train-log"), log)


def _step(r: Any) -> str:
    return "?" if r.global_step is None else f"{r.global_step:g}"


def _ckpt_verdict(section: Section | None) -> list[str]:
    if section is None or section.report is None:
        why = section.error if section is not None else "not run"
        return [f"checkpoints: not checked ({(why or '').splitlines()[0] if why else ''})"]
    reports = list(section.report)  # never empty: a scan that finds none is an error
    order = sorted(reports, key=lambda r: (r.global_step is None, r.global_step or 0, r.path))
    readable = [r for r in order if r.status in ("clean", "bad")]
    bad = [r for r in readable if r.status == "bad"]
    unreadable = [r for r in order if r.status not in ("clean", "bad")]
    formats = sorted({str(r.format) for r in reports if r.format})
    head = f"checkpoints: {len(reports)} ({', '.join(formats) or 'format unknown'})"
    if not bad:
        out = [f"{head}, all {len(readable)} readable ones clean"]
    else:
        first = bad[0]
        clean_before = [
            r for r in readable if r.status == "clean" and order.index(r) < order.index(first)
        ]
        out = [
            f"{head}, {len(bad)} with non-finite values; first bad: {first.path} at step "
            f"{_step(first)} ({_counts(first)})"
            + (f"; last clean before it: step {_step(clean_before[-1])}" if clean_before else "")
        ]
    if unreadable:
        out.append(
            f"  {len(unreadable)} unreadable, e.g. {unreadable[0].path}: {unreadable[0].error}"
        )
    return out


def _counts(r: Any) -> str:
    parts = []
    for sec in ("weights", "optimizer"):
        n = getattr(r, f"nonfinite_{sec}", 0)
        if n:
            parts.append(f"{n} in {sec}")
    if getattr(r, "negative_exp_avg_sq", 0):
        parts.append(f"{r.negative_exp_avg_sq} negative second moments")
    return ", ".join(parts) or "bad values"


def _log_verdict(section: Section | None, log: str | None) -> list[str]:
    if section is None:
        return []
    rep = section.report
    if rep is None:
        return [f"log: not analysed ({(section.error or '').splitlines()[0]})"]
    src = getattr(rep, "source", None)
    errors = [str(getattr(e, "message", e)) for e in getattr(rep, "errors", ())]
    if errors and src is None:  # nothing read: no log in the run, or none that parses
        return [f"log: not analysed ({errors[0].splitlines()[0]})"]
    if errors:
        return [f"log: {log}: {errors[0]}"]
    fmt = getattr(src, "format", None) or "?"
    key = getattr(src, "step_key", None)
    out = [f"log: {getattr(src, 'path', None) or log} ({fmt}, step key {key or 'row number'})"]
    start = getattr(rep, "onset", None)
    if start is not None:  # how the loss started, as train-log says it
        from remotekit.diagnostics.trainlog.words import onset_line

        out.append(f"start: {onset_line(start)}")
    spikes = getattr(rep, "spikes", ())
    saves = [c for c in getattr(rep, "correlations", ()) if c.kind == "checkpoint"]
    metrics = sorted({str(getattr(x, "metric", "?")) for x in spikes})
    out.append(
        f"spikes and cliffs: {len(spikes)}" + (f" ({', '.join(metrics)})" if metrics else "")
    )
    for c in saves:
        out.append(
            f"spikes at saves: {c.at_events} of {c.spikes} incidents within ±{c.tolerance:g} steps of "
            f"{c.events} checkpoint saves; {c.expected:.2g} expected by chance "
            f"(p={c.p_value:.2g}): "
            + ("more than chance" if c.beyond_chance else "no more than chance")
        )
    if spikes and not saves:
        out.append("spikes at saves: no save steps known (no checkpoint with a step was found)")
    out += [line for line in (s.resume_line() for s in spikes) if line]
    comp = getattr(rep, "composition", None)
    if comp is not None and getattr(comp, "verdict", None):
        out.append(f"batches: {comp.verdict}")
    else:
        out.append("batches: no composition verdict (no per-step batch key, no stable window)")
    return out


def render_verdict(report: DiagnoseReport) -> str:
    """The run's answer, for people ('' without ``run``)."""
    if not report.run:
        return ""
    return "\n".join([f"== run {report.run}", *report.verdict])


def render_summary(report: DiagnoseReport) -> str:
    """The sections as one table (name, status, time, findings, detail), then the verdict."""
    from remotekit.render import table

    rows = [
        (
            s.name,
            s.status,
            "-" if s.status == "skipped" else f"{s.duration_s:.1f}s",
            len(s.findings),
            (s.error or "").split("\n")[0],
        )
        for s in report.sections
    ]
    text = table(["section", "status", "time", "findings", "detail"], rows)
    verdict = render_verdict(report)
    return f"{text}\n\n{verdict}" if verdict else text


def _summary_line(s: Section) -> str:
    if s.status == "skipped":
        return f"{s.name}: skipped ({s.error})"
    line = f"{s.name}: {s.status}"
    if s.findings:
        line += f" ({len(s.findings)})"
    line += f" in {s.duration_s:.1f} s"
    if s.status == "failed" and s.error:
        line += f": {s.error.splitlines()[0]}"
    return line


def render_section(section: Section) -> str:
    """A section for people: a header line, then its report's table (or its error)."""
    head = f"== {section.name}: {section.status}"
    if section.status != "skipped":
        head += f" ({section.duration_s:.1f} s)"
    lines = [head]
    report = section.report
    if isinstance(report, Report):
        lines.append(report.render())
    else:  # failed before a report, or skipped
        if section.error:
            lines.append(("" if section.status == "skipped" else "error: ") + section.error)
        lines += [f"warning: {f}" for f in section.findings]
    return "\n".join(lines)
