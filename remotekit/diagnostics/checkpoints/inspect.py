"""``ckpt-inspect``: keys, dtypes, shapes, step, optimizer hyperparameters of one checkpoint,
without reading tensor data (:func:`inspect_checkpoint`, :func:`render_inspect`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from remotekit.diagnostics.base import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK
from remotekit.diagnostics.checkpoints.common import (
    SCRIPT,
    kinds,
    run_script,
    short_count,
    short_float,
)
from remotekit.remote.ckpt.options import InspectOptions
from remotekit.remote.ckpt.records import (
    Inspect,
    OptimizerInfo,
    ParamGroup,
    ResumeCheck,
    TensorInfo,
)
from remotekit.render import human_bytes, table
from remotekit.result import Shown

if TYPE_CHECKING:
    # the names the fields InspectReport inherits from the record are annotated with, for
    # whoever resolves them here (the API reference)
    from collections.abc import Mapping  # noqa: F401
    from typing import Any  # noqa: F401

    from remotekit.target import Target

__all__ = [
    "InspectReport",
    "OptimizerInfo",
    "ParamGroup",
    "ResumeCheck",
    "TensorInfo",
    "inspect_checkpoint",
    "render_inspect",
]


@dataclass(frozen=True, repr=False)
class InspectReport(Shown, Inspect):
    """Structure of one checkpoint (the ``inspect`` record,
    :class:`~remotekit.remote.ckpt.records.Inspect`): tensors, step/epoch, top-level
    scalars, optimizers; ``totals`` per section ("weights", "optimizer", "other") and
    ``other`` per kind."""

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return EXIT_FAILED
        return EXIT_FINDINGS if self.findings else EXIT_OK

    @property
    def findings(self) -> tuple[str, ...]:
        """What a resume would lose, when the inspect was asked (``resume=True``)."""
        r = self.resume
        return tuple(f"{self.path}: {g}" for g in r.gaps) if r is not None and r.asked else ()

    @property
    def errors(self) -> tuple[str, ...]:
        return (f"{self.path}: {self.error}",) if self.exit_code == EXIT_FAILED else ()

    def render(self) -> str:
        return render_inspect(self)


def inspect_checkpoint(
    target: Target,
    path: str,
    *,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    resume: bool = False,
    timeout: float | None = None,
) -> InspectReport:
    """Keys, dtypes, shapes, sizes, step/epoch and optimizer hyperparameters of one checkpoint
    (a file or an HF ``*.index.json``), without reading tensor data (memory-mapped torch
    files; the safetensors header only). A checkpoint that cannot be read gives a report with
    ``ok`` False and ``error``; CheckpointError / engine errors as in :func:`scan_checkpoints`.

    ``resume`` (:class:`ResumeCheck`) says whether a run could resume from it with nothing
    lost, always; with ``resume=True`` what it would lose is a finding (``exit_code`` 1).
    """
    loading = {"allow_globals": allow_globals, "unsafe_pickle": unsafe_pickle}
    args = InspectOptions.of(path, resume=resume, **loading).argv()
    run = run_script(target, SCRIPT, args, step="ckpt-inspect", timeout=timeout)
    rec = run.first(Inspect.TYPE)
    report = InspectReport.from_dict(rec)
    return replace(
        report,
        path=report.path if rec and "path" in rec else path,
        error=report.error if rec else "the script gave no inspect record",
        tensors=tuple(TensorInfo.from_dict(r) for r in run.of(TensorInfo.TYPE)),
    )


def render_inspect(report: InspectReport) -> str:
    """Header (format, size, step), optimizer groups with lr, then every tensor."""
    head = f"{report.path}: {report.format or '?'}, {human_bytes(report.bytes)}"
    head += f", step {report.global_step if report.global_step is not None else '?'}"
    head += f", epoch {report.epoch if report.epoch is not None else '?'}"
    lines = [head]
    if report.error:
        lines.append(f"error: {report.error}")
    if report.top_keys:
        lines.append("top-level keys: " + ", ".join(report.top_keys))
    if report.scalars:
        lines.append("scalars: " + ", ".join(f"{k}={v!r}" for k, v in report.scalars.items()))
    for o in report.optimizers:
        slots = ", ".join(f"{k} x{v}" for k, v in o.slots.items())
        lines.append(
            f"optimizer at {o.path or '<root>'}: state for {o.state_params} params ({slots}); "
            f"step {o.step if o.step is not None else '?'}"
        )
        keys = sorted({k for g in o.groups for k in g.hyper})
        rows = [
            [g.index, short_float(g.lr), g.params, *[g.hyper.get(k) for k in keys]]
            for g in o.groups
        ]
        lines.append(_indent(table(["GROUP", "LR", "PARAMS", *[k.upper() for k in keys]], rows)))
    if report.tensors:
        rows = [
            [
                t.name,
                f"{t.section} ({t.kind})" if t.kind else t.section,
                t.dtype,
                "x".join(str(s) for s in t.shape) or "scalar",
                t.numel,
                human_bytes(t.bytes),
                ", ".join(t.shared_with) or None,
            ]
            for t in report.tensors
        ]
        lines.append("")
        lines.append(
            table(["TENSOR", "SECTION", "DTYPE", "SHAPE", "NUMEL", "SIZE", "SHARED WITH"], rows)
        )
    for sec, t in report.totals.items():
        of_kinds = f" ({kinds(report.other)})" if sec == "other" and report.other else ""
        lines.append(
            f"{sec}: {t.get('tensors', 0)} tensors{of_kinds}, {short_count(t.get('numel', 0))} "
            f"values, {human_bytes(t.get('bytes', 0))}"
        )
    if report.dtypes:
        lines.append(
            "dtypes: " + ", ".join(f"{k} {short_count(v)}" for k, v in report.dtypes.items())
        )
    lines += [f"note: {n}" for n in report.notes]
    if report.resume is not None:
        lines += _resume_lines(report.resume)
    return "\n".join(lines)


def _resume_lines(r: ResumeCheck) -> list[str]:
    """The resume check: its verdict, then what is there and what is not saved."""
    lines = [r.line()]
    lines += [f"  has: {p}" for p in r.present]
    lines += [f"  not saved: {n}" for n in r.not_saved]
    if r.optimizer_missing > len(r.missing_params):
        lines.append(f"  (first {len(r.missing_params)} of {r.optimizer_missing} listed)")
    return lines


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())
