"""``diagnose``: one host's env, GPUs, disk and checkpoints, each section its own step.

Sections run in the order of :data:`SECTIONS`, each with its own timeout
(:data:`DEFAULT_TIMEOUTS`, overridable per name). A section that raises (a
:class:`~remotekit.RemotekitError` such as a timeout, or any other exception) becomes a
*failed* section and the others still run; ``ckpt-scan`` is *skipped* when the host has no
``checkpoints:`` and no ``path`` is given. The report's exit code is the worst section's:
0 OK, 1 findings, 2 a section could not run.

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
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics import system
from remotekit.diagnostics.base import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, worst_exit
from remotekit.errors import RemotekitError

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "DEFAULT_TIMEOUTS",
    "SECTIONS",
    "DiagnoseReport",
    "Section",
    "diagnose",
    "render_section",
]

SECTIONS = ("env", "gpu", "disk", "ckpt-scan")
#: Seconds each section may run (its step's timeout); ``timeouts=`` overrides by name.
DEFAULT_TIMEOUTS: Mapping[str, float] = MappingProxyType(
    {"env": 60.0, "gpu": 90.0, "disk": 180.0, "ckpt-scan": 1800.0}
)
_STATUS = {EXIT_OK: "ok", EXIT_FINDINGS: "findings", EXIT_FAILED: "failed"}


@dataclass(frozen=True)
class Section:
    """One finished section.

    ``status`` is ``"ok"``, ``"findings"``, ``"failed"`` (it raised, or its report says it
    could not run; ``error`` says why) or ``"skipped"`` (``error`` says why; exit code 0).
    ``report`` is the section's own report (:class:`~remotekit.diagnostics.system.EnvReport`,
    ``GpuReport``, ``DiskReport``, the checkpoint scan's), None when it raised or was skipped.
    """

    name: str
    status: str
    exit_code: int
    findings: tuple[str, ...]
    error: str | None
    duration_s: float
    report: Any = None


@dataclass(frozen=True)
class DiagnoseReport:
    """All sections in run order; ``findings`` are theirs, each prefixed ``[section]``."""

    host: str
    sections: tuple[Section, ...]
    exit_code: int
    findings: tuple[str, ...]
    summary: tuple[str, ...]  # one line per section, e.g. "gpu: findings (2) in 1.4 s"

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)


def _from_report(name: str, report: Any, started: float) -> Section:
    """A Section from a report with ``exit_code`` / ``findings`` / ``errors`` (duck-typed:
    the checkpoint scan's report comes from another module)."""
    raw_code = getattr(report, "exit_code", EXIT_OK)
    code = raw_code if raw_code in _STATUS else EXIT_FAILED
    findings = tuple(str(getattr(f, "message", f)) for f in getattr(report, "findings", ()) or ())
    error = None
    if code == EXIT_FAILED:
        errors = [str(getattr(e, "message", e)) for e in getattr(report, "errors", ()) or ()]
        error = "; ".join(errors) or f"the section's report has exit code {raw_code!r}"
    return Section(name, _STATUS[code], code, findings, error, time.monotonic() - started, report)


def _scan_checkpoints(target: Target, path: str, timeout: float) -> Any:
    # Imported here: the checkpoint scanner is its own module, and diagnose must still run
    # (with a failed ckpt-scan section) where it is missing or broken.
    try:
        from remotekit.diagnostics.checkpoints import scan_checkpoints
    except ImportError as exc:
        raise RemotekitError(
            f"checkpoint scanner unavailable: {exc}", host=target.name, step="ckpt-scan"
        ) from exc
    return scan_checkpoints(target, path, timeout=timeout)


def diagnose(
    target: Target,
    *,
    path: str | None = None,
    include_ckpt: bool = True,
    timeouts: Mapping[str, float] | None = None,
    on_section: Callable[[Section], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> DiagnoseReport:
    """Run env, gpu, disk and (with ``path`` or the host's ``checkpoints:``) ckpt-scan.

    ``path`` is the checkpoint directory to scan (default: the host's ``checkpoints:``); the
    disk section measures the host's ``workdir`` (else ``~``) and that directory.
    ``timeouts`` overrides :data:`DEFAULT_TIMEOUTS` by section name (unknown names raise
    ValueError). ``env`` is set for the env, gpu and disk scripts there. ``on_section`` is
    called with each section as it completes, skipped ones included. Never raises for a
    failing section; it records it and goes on.
    """
    unknown = set(timeouts or {}) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown section(s) in timeouts: {', '.join(sorted(unknown))}")
    limits = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    ckpt = path or target.spec.checkpoints
    disk_paths = [target.spec.workdir or "~", *([ckpt] if ckpt else [])]

    runs: dict[str, Callable[[], Any]] = {
        "env": lambda: system.environment(target, timeout=limits["env"], env=env),
        "gpu": lambda: system.gpu_status(target, timeout=limits["gpu"], env=env),
        "disk": lambda: system.disk_usage(target, disk_paths, timeout=limits["disk"], env=env),
    }
    skip: str | None = None
    if not include_ckpt:
        skip = "not requested"
    elif not ckpt:
        skip = f"no checkpoints: configured for {target.name} and no path given"
    else:
        ckpt_path = ckpt
        runs["ckpt-scan"] = lambda: _scan_checkpoints(target, ckpt_path, limits["ckpt-scan"])

    sections: list[Section] = []
    for name in SECTIONS:
        started = time.monotonic()
        if name not in runs:
            section = Section(name, "skipped", EXIT_OK, (), skip, 0.0)
        else:
            try:
                section = _from_report(name, runs[name](), started)
            except RemotekitError as exc:
                section = Section(
                    name, "failed", EXIT_FAILED, (), str(exc), time.monotonic() - started
                )
            except Exception as exc:  # one broken section must not cost the others
                msg = f"{type(exc).__name__}: {exc}"
                section = Section(name, "failed", EXIT_FAILED, (), msg, time.monotonic() - started)
        sections.append(section)
        if on_section is not None:
            on_section(section)

    return DiagnoseReport(
        host=target.name,
        sections=tuple(sections),
        exit_code=worst_exit([s.exit_code for s in sections]),
        findings=tuple(f"[{s.name}] {f}" for s in sections for f in s.findings),
        summary=tuple(_summary_line(s) for s in sections),
    )


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


def _render_scan(scan: Any) -> str:
    # Imported here, as in _scan_checkpoints: a scan report only exists once that module is.
    from remotekit.diagnostics.checkpoints import render_scan

    return render_scan(scan, plan=scan.plan)


#: A section's renderer by its report's type name: the checkpoint scan's type lives in a
#: module this one does not import up front (see _scan_checkpoints).
_RENDERERS: dict[str, Callable[[Any], str]] = {
    "EnvReport": system.render_env,
    "GpuReport": system.render_gpu,
    "DiskReport": system.render_disk,
    "CheckpointScan": _render_scan,
}


def render_section(section: Section) -> str:
    """A section for people: a header line, then its report's table (or its error)."""
    head = f"== {section.name}: {section.status}"
    if section.status != "skipped":
        head += f" ({section.duration_s:.1f} s)"
    lines = [head]
    render = _RENDERERS.get(type(section.report).__name__)
    if render is not None:
        lines.append(render(section.report))
    else:  # failed before a report, skipped, or a report type we do not know
        if section.error:
            lines.append(("" if section.status == "skipped" else "error: ") + section.error)
        lines += [f"warning: {f}" for f in section.findings]
    return "\n".join(lines)
