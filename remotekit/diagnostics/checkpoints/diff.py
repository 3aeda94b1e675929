"""``ckpt-diff``: checkpoint B against checkpoint A, tensor by tensor: relative change, the
values that became non-finite (or a negative second moment) on the way, what changed among
the tensors that are no weights (:func:`diff_checkpoints`, :func:`render_diff`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from remotekit.diagnostics.base import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK
from remotekit.diagnostics.checkpoints.common import SCRIPT, run_script, short_float
from remotekit.remote.ckpt.options import DiffOptions
from remotekit.remote.ckpt.records import (
    Diff,
    DiffFlag,
    NonWeightChange,
    NonWeightDiff,
    TensorChange,
    TensorDiff,
)
from remotekit.render import fit_lines, table
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "DiffFlag",
    "DiffReport",
    "NonWeightChange",
    "NonWeightDiff",
    "TensorChange",
    "TensorDiff",
    "diff_checkpoints",
    "render_diff",
]


@dataclass(frozen=True, repr=False)
class DiffReport(Shown, Diff):
    """Checkpoint B compared with checkpoint A (see :func:`diff_checkpoints`; the ``diff``
    record, :class:`~remotekit.remote.ckpt.records.Diff`).

    ``rel_change_*`` are over the params (floating weights and optimizer state) only;
    ``counters`` (num_batches_tracked, optimizer steps) and ``other`` (scores, RNG states,
    integer tensors) say on their own what changed among the tensors that are no weights.
    """

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_FAILED
        return EXIT_FINDINGS if self.flags_total else EXIT_OK

    @property
    def findings(self) -> tuple[str, ...]:
        """One line per flag (values that became non-finite, bad second moments)."""
        lines = tuple(f"{f.name} ({f.section}): {f.kind} x{f.count}" for f in self.flags)
        hidden = self.flags_total - len(self.flags)
        return lines + ((f"... and {hidden} more flags",) if hidden > 0 else ())

    @property
    def errors(self) -> tuple[str, ...]:
        return (str(self.error),) if self.error else ()

    def render(self) -> str:
        return render_diff(self)


def diff_checkpoints(
    target: Target,
    a: str,
    b: str,
    *,
    top: int = 10,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    timeout: float | None = None,
) -> DiffReport:
    """Compare checkpoint ``b`` with ``a``, tensor by tensor, there.

    Per tensor: ||B-A|| / ||A||, max |B-A|, cosine, shape/dtype changes; keys only in one side
    (after removing ``module.`` / ``_orig_mod.`` wrappers when that matches more names); step
    delta and lr per param group; the ``top`` tensors by relative change per section. Flags
    values that became non-finite, and negative or non-finite exp_avg_sq (exit code 1).
    """
    loading = {"allow_globals": allow_globals, "unsafe_pickle": unsafe_pickle}
    args = DiffOptions.of(a, b, top=top, **loading).argv()
    rec = run_script(target, SCRIPT, args, step="ckpt-diff", timeout=timeout).first(Diff.TYPE)
    if rec is None:
        return DiffReport(a=a, b=b, ok=False, error="the script gave no diff record")
    return replace(DiffReport.from_dict(rec), a=a, b=b)


# --------------------------------------------------------------------------- text


def _pct(x: float | None) -> str | None:
    if x is None:
        return None
    if math.isinf(x) or math.isnan(x):
        return short_float(x)
    return f"{100 * x:.3g}%"


def render_diff(report: DiffReport) -> str:
    """Steps and lr, key differences, top tensors by relative change, and the flags."""
    lines = [
        f"A: {report.a} (step {report.step_a}, epoch {report.epoch_a})",
        f"B: {report.b} (step {report.step_b}, epoch {report.epoch_b})",
    ]
    if report.error:
        lines.append(f"error: {report.error}")
        if not report.compared:
            return "\n".join(fit_lines(lines))
    lines = fit_lines([*lines, *_diff_summary(report)]) + _diff_tables(report)
    lines += fit_lines(f"note: {n}" for n in report.notes)
    verdict = {
        EXIT_OK: "no new non-finite values",
        EXIT_FINDINGS: f"{report.flags_total} finding(s)",
        EXIT_FAILED: "could not compare",
    }[report.exit_code]
    lines += ["", f"diff: {verdict} (exit {report.exit_code})"]
    return "\n".join(lines)


def _diff_summary(report: DiffReport) -> list[str]:
    """Step delta, lr per group, what was compared, relative change, names only on one side."""
    lines = []
    if report.step_delta is not None:
        lines.append(f"step delta: {report.step_delta:+}")
    for i, (la, lb) in enumerate(zip(report.lr_a, report.lr_b)):
        lines.append(f"optimizer {i} lr per group: {list(la)} -> {list(lb)}")
    lines.append(
        f"compared {report.compared} tensors ({report.identical} identical); "
        f"only in A: {report.only_a_total}, only in B: {report.only_b_total}, "
        f"shape/dtype changes: {report.changes_total}"
    )
    lines.append(
        f"relative change (float weights only): weights {_pct(report.rel_change_weights)}, "
        f"optimizer state {_pct(report.rel_change_optimizer)}"
    )
    for title, part in (("counters", report.counters), ("other non-weights", report.other)):
        line = part.line(title) if part is not None else None
        if line:
            lines.append(line)
    for title, names in (("only in A", report.only_a), ("only in B", report.only_b)):
        if names:
            lines.append(f"{title}: " + ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""))
    return lines


def _diff_tables(report: DiffReport) -> list[str]:
    """Shape/dtype changes, the top tensors by relative change per section, the flags."""
    lines: list[str] = []
    if report.changes:
        rows: list[list[Any]] = [
            [
                c.name,
                "x".join(map(str, c.shape_a)),
                "x".join(map(str, c.shape_b)),
                c.dtype_a,
                c.dtype_b,
            ]
            for c in report.changes
        ]
        lines += ["", table(["TENSOR", "SHAPE A", "SHAPE B", "DTYPE A", "DTYPE B"], rows)]
    for title, diffs in (
        ("weights", report.top_weights),
        ("optimizer state", report.top_optimizer),
    ):
        if not diffs:
            continue
        rows = [
            [
                d.name,
                _pct(d.rel_change),
                short_float(d.max_abs_diff),
                short_float(d.cosine),
                d.dtype,
                d.numel,
                d.new_nonfinite or None,
            ]
            for d in diffs
        ]
        lines += ["", f"Top {title} by relative change ||B-A||/||A||:"]
        lines.append(
            table(
                ["TENSOR", "REL CHANGE", "MAX|B-A|", "COSINE", "DTYPE", "NUMEL", "NEW NON-FINITE"],
                rows,
                optional=("NUMEL", "DTYPE"),
            )
        )
    if report.flags:
        lines += ["", "Flags:"]
        lines.append(
            table(
                ["TENSOR", "SECTION", "FINDING", "COUNT"],
                [[f.name, f.section, f.kind, f.count] for f in report.flags],
            )
        )
    return lines
