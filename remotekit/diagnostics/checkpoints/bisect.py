"""``ckpt-bisect``: the last clean and the first bad checkpoint of a run, ordered by global
step (:func:`bisect_checkpoints`, :func:`render_bisect`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from remotekit.diagnostics import defaults
from remotekit.diagnostics.base import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, worst_exit
from remotekit.diagnostics.checkpoints.common import (
    SCRIPT,
    CheckpointError,
    display_paths,
    run_script,
)
from remotekit.diagnostics.checkpoints.scan import (
    CheckpointReport,
    ProgressCallback,
    ReportCallback,
    Tracker,
    counts_line,
)
from remotekit.remote.ckpt.options import BisectOptions
from remotekit.remote.ckpt.records import Bisect, BisectOrder, BisectPoint
from remotekit.render import table
from remotekit.result import Shown

if TYPE_CHECKING:
    # the name a field BisectReport inherits from the record is annotated with, for whoever
    # resolves it here (the API reference)
    from remotekit.remote.ckpt.records import BadTensor  # noqa: F401
    from remotekit.target import Target

__all__ = ["BisectPoint", "BisectReport", "bisect_checkpoints", "render_bisect"]


@dataclass(frozen=True, repr=False)
class BisectReport(Shown, Bisect):
    """Where a run went bad (the ``bisect`` record,
    :class:`~remotekit.remote.ckpt.records.Bisect`, with ``reports``, those of the
    checkpoints it scanned): ``last_clean`` and ``first_bad`` in ``order`` ("global_step",
    or "name" when some checkpoint has no step), with the first bad tensor and its section.

    ``mode`` "binary" checks about log2(n) checkpoints and assumes that once one is bad every
    later one is too; "linear" checks all, and ``later_clean`` lists clean ones after the
    first bad (an isolated corrupt save rather than a divergence).
    """

    # mypy takes the record's wire(...) fields for ones with defaults; they have none (and
    # this one is required as it always was), hence the ignore.
    reports: tuple[CheckpointReport, ...]  # type: ignore[misc]

    @property
    def exit_code(self) -> int:
        codes = [EXIT_FINDINGS if self.first_bad else EXIT_OK]
        if self.unreadable:
            codes.append(EXIT_FAILED)
        return worst_exit(codes)

    @property
    def findings(self) -> tuple[str, ...]:
        if self.first_bad is None:
            return ()
        step = self.first_bad.global_step
        return (f"first bad checkpoint: {self.first_bad.path} (step {step})",)

    @property
    def notes(self) -> tuple[str, ...]:
        return (self.assumption,) if self.assumption else ()

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(f"{p}: unreadable" for p in self.unreadable)

    def render(self) -> str:
        return render_bisect(self)


def bisect_checkpoints(
    target: Target,
    directory: str | None = None,
    *,
    linear: bool = False,
    jobs: int = 1,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    timeout: float | None = None,
    on_report: ReportCallback | None = None,
    on_progress: ProgressCallback | None = None,
) -> BisectReport:
    """Order the checkpoints under ``directory`` (default: the host's ``checkpoints:``) by
    global step (or by name, naturally sorted, when some has none) and find the last clean
    and the first bad one.

    By default a binary search (about log2(n) scans; assumes that once a checkpoint is bad,
    every later one is too); ``linear=True`` scans all (with ``jobs`` workers) and reports
    clean checkpoints after the first bad one. Unreadable checkpoints are left out of the
    order and listed in ``unreadable`` (exit code 2).
    """
    where = defaults.need_checkpoints(target, directory, "ckpt-bisect")
    loading = {"allow_globals": allow_globals, "unsafe_pickle": unsafe_pickle}
    args = BisectOptions.of(where, linear=linear, jobs=jobs, **loading).argv()
    tracker = Tracker(on_progress, on_report)
    run = run_script(
        target, SCRIPT, args, step="ckpt-bisect", timeout=timeout, on_record=tracker.record
    )
    rec = run.first(Bisect.TYPE)
    if rec is None:
        raise CheckpointError("ckpt.py bisect gave no bisect record", result=run.result)
    order = BisectOrder.from_dict(run.first(BisectOrder.TYPE))
    report = BisectReport.from_dict(rec)
    return replace(
        report, directory=where, ordered=order.checkpoints, reports=tuple(tracker.reports)
    )


def render_bisect(report: BisectReport) -> str:
    """The ordered checkpoints with the status of those scanned, then the answer."""
    by_path = {r.path: r for r in report.reports}
    shown = display_paths([p.path for p in report.ordered] or [report.directory])
    rows = []
    for i, p in enumerate(report.ordered):
        r = by_path.get(p.path)
        mark = ""
        if report.last_clean and p.path == report.last_clean.path:
            mark = "<- last clean"
        if report.first_bad and p.path == report.first_bad.path:
            mark = "<- first bad"
        rows.append(
            [
                i + 1,
                shown.get(p.path, p.path),
                p.global_step,
                r.status if r else "(not scanned)",
                counts_line(r) if r and r.status == "bad" else None,
                mark or None,
            ]
        )
    lines = [
        f"{report.checkpoints} checkpoint(s) under {report.directory}, ordered by {report.order}; "
        f"scanned {report.scanned} ({report.mode} search)",
        table(["#", "CHECKPOINT", "STEP", "STATUS", "BAD VALUES", ""], rows),
        "",
    ]
    if report.first_bad is None:
        lines.append("no bad checkpoint found" + (" (all clean)" if not report.unreadable else ""))
    else:
        lc = report.last_clean
        lines.append(
            f"last clean: {lc.path} (step {lc.global_step})"
            if lc
            else "last clean: none (the first checkpoint is bad)"
        )
        lines.append(f"first bad:  {report.first_bad.path} (step {report.first_bad.global_step})")
        if report.first_bad_tensor is not None:
            lines.append(f"  first bad tensor: {report.first_bad_tensor.describe()}")
    if report.later_clean:
        lines.append(
            f"{len(report.later_clean)} clean checkpoint(s) after the first bad one: isolated bad "
            "saves rather than a divergence? " + ", ".join(report.later_clean[:5])
        )
    if report.assumption:
        lines.append(f"note: {report.assumption}")
    for path in report.unreadable:
        r = by_path.get(path)
        lines.append(f"could not check {path}: {r.error if r else 'unreadable'}")
    lines.append(f"bisect: exit {report.exit_code}")
    return "\n".join(lines)
