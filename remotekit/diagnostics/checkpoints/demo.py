"""``demo``: plant known faults in sample checkpoints there and check that the scan finds
each (:func:`run_demo`, :func:`make_samples`, :func:`render_demo`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from remotekit.diagnostics.base import EXIT_FINDINGS, EXIT_OK
from remotekit.diagnostics.checkpoints.common import SAMPLES_SCRIPT, run_script
from remotekit.diagnostics.checkpoints.scan import (
    CheckpointScan,
    ProgressCallback,
    render_scan,
    scan_checkpoints,
)
from remotekit.remote.ckpt.records import SampleCheckpoint
from remotekit.render import fit_lines
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = ["DemoReport", "Sample", "make_samples", "render_demo", "run_demo"]


@dataclass(frozen=True, repr=False)
class Sample(Shown, SampleCheckpoint):
    """A sample checkpoint made by :func:`make_samples` (the ``sample`` record,
    :class:`~remotekit.remote.ckpt.records.SampleCheckpoint`); ``expect`` is the status a
    scan must give it. Its ``str()`` is its line in ``ckpt-demo``'s list of samples."""

    repr_keys = ("name", "expect")

    def render(self) -> str:
        return f"{self.name:<14} {self.detail} (a scan must say: {self.expect})"


@dataclass(frozen=True, repr=False)
class DemoReport(Shown):
    """What :func:`run_demo` planted in ``directory`` on ``host`` and what the scan said.

    ``mismatches`` has one line per sample whose scan status is not the one it should get;
    they are the ``findings`` (exit code 1). An unreadable sample is the point of one of them,
    so ``scan.exit_code`` is 2 whatever happens: the demo's verdict is ``exit_code``.
    """

    host: str
    directory: str
    samples: tuple[Sample, ...]
    scan: CheckpointScan
    mismatches: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return EXIT_FINDINGS if self.mismatches or not self.samples else EXIT_OK

    @property
    def findings(self) -> tuple[str, ...]:
        return self.mismatches

    @property
    def notes(self) -> tuple[str, ...]:
        return ()

    @property
    def errors(self) -> tuple[str, ...]:
        return ()

    def render(self) -> str:
        return render_demo(self)


def make_samples(
    target: Target, directory: str, *, steps: int = 5, timeout: float | None = None
) -> list[Sample]:
    """Write the demo's sample checkpoints into ``directory`` there (``remote/ckpt_samples.py``):
    clean, NaN in weights, +Inf in Adam state, truncated, needs an unsafe global."""
    run = run_script(
        target,
        SAMPLES_SCRIPT,
        [directory, "--steps", str(steps)],
        step="ckpt-samples",
        timeout=timeout,
    )
    return [Sample.from_dict(r) for r in run.of(Sample.TYPE)]


def run_demo(
    target: Target,
    directory: str,
    *,
    jobs: int = 1,
    timeout: float | None = None,
    on_progress: ProgressCallback | None = None,
) -> DemoReport:
    """Make the sample checkpoints in ``directory`` there (:func:`make_samples`), scan them
    (:func:`scan_checkpoints`, ``jobs``, ``on_progress``) and check that each sample got the
    status it should. ``timeout`` is per step. Raises as those two do."""
    samples = tuple(make_samples(target, directory, timeout=timeout))
    scan = scan_checkpoints(target, directory, jobs=jobs, timeout=timeout, on_progress=on_progress)
    status = {r.path: r.status for r in scan}
    mismatches = [
        f"{s.name}: expected {s.expect}, scan says {status.get(s.path, 'nothing')}"
        for s in samples
        if status.get(s.path) != s.expect
    ]
    if not samples:
        mismatches.append(f"{SAMPLES_SCRIPT} made no samples in {directory}")
    return DemoReport(target.name, directory, samples, scan, tuple(mismatches))


def render_demo(report: DemoReport) -> str:
    """The samples planted, the scan table, and whether the scan found what was planted."""
    n = len(report.samples)
    made = [f"Made {n} sample checkpoints in {report.directory} on {report.host}:"]
    made += [f"  {s.render()}" for s in report.samples]
    if report.mismatches:
        verdict = [f"demo: the scan disagrees with what was planted (exit {report.exit_code}):"]
        verdict += [f"  {m}" for m in report.mismatches]
    else:
        verdict = [
            f"demo: the scan found every planted fault, {n}/{n} samples as expected "
            f"(exit {report.exit_code})"
        ]
    lines = [*fit_lines(made), "", render_scan(report.scan, plan=report.scan.plan), ""]
    return "\n".join([*lines, *fit_lines(verdict)])
