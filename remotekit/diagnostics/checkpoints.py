"""Checkpoint diagnostics, the local half of ``remote/ckpt.py``: "are my checkpoints corrupt?"

Four questions, one step each on the target (the data never leaves it):

- :func:`scan_checkpoints` (``ckpt-scan``): exact NaN / +Inf / -Inf counts per checkpoint, in
  model weights and in optimizer state, for a file, a directory or a glob;
- :func:`inspect_checkpoint` (``ckpt-inspect``): keys, dtypes, shapes, step, optimizer
  hyperparameters, without reading tensor data;
- :func:`diff_checkpoints` (``ckpt-diff``): per-tensor relative change between two checkpoints,
  and the values that became non-finite (or a negative second moment) on the way;
- :func:`bisect_checkpoints` (``ckpt-bisect``): the last clean and the first bad checkpoint of
  a run, ordered by global step.

Each returns frozen reports with an ``exit_code``: 0 all clean, 1 findings (non-finite values),
2 something could not be read (see :mod:`remotekit.diagnostics.base`), and a ``render_*``
function turns each into text; :func:`run_demo` (``demo``) plants known faults and checks that
the scan finds them. The ``remotekit`` tasks (remotekit/cli/) print these, as JSON too, and
exit with the code. The API functions raise the engine's :class:`~remotekit.RemotekitError` s, and
:class:`CheckpointError` when the script there could not run at all (no torch, a path that
does not exist, a bad ``--allow-global``).

Safety: checkpoints are loaded with ``weights_only=True`` there, so a file cannot run code.
``allow_globals`` allow-lists named globals (their modules are imported, nothing else);
``unsafe_pickle=True`` loads plain pickle, which runs whatever the file holds.

This module does not import torch: only the script that runs there does.

>>> reports = scan_checkpoints(target, "/workspace/checkpoints", jobs=4)
>>> reports.exit_code, [(r.path, r.status, r.nan_weights) for r in reports]
(1, [('/workspace/checkpoints/step_1000/checkpoint.pt', 'clean', 0),
     ('/workspace/checkpoints/step_2000/checkpoint.pt', 'bad', 3)])
"""

from __future__ import annotations

import math
import posixpath
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    Record,
    Run,
    from_record,
    run_diagnostic,
    worst_exit,
)
from remotekit.errors import DiagnosticError
from remotekit.remote.protocol import number
from remotekit.render import human_bytes, table, visible
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "BadTensor",
    "BisectPoint",
    "BisectReport",
    "CheckpointError",
    "CheckpointReport",
    "CheckpointScan",
    "DemoReport",
    "DiffFlag",
    "DiffReport",
    "InspectReport",
    "LogFile",
    "NonWeightChange",
    "NonWeightDiff",
    "OptimizerInfo",
    "ParamGroup",
    "Sample",
    "ScanPlan",
    "ScanProgress",
    "TensorChange",
    "TensorDiff",
    "TensorInfo",
    "bisect_checkpoints",
    "diff_checkpoints",
    "inspect_checkpoint",
    "make_samples",
    "progress_line",
    "render_bisect",
    "render_demo",
    "render_diff",
    "render_inspect",
    "render_scan",
    "run_demo",
    "scan_checkpoints",
    "scan_exit_code",
]

SCRIPT = "ckpt.py"
SAMPLES_SCRIPT = "ckpt_samples.py"
SECTIONS = ("weights", "optimizer")
#: How many bad tensors the table lists per checkpoint (the report holds up to ``max_bad``).
SHOW_BAD = 5
#: Width of the bar in :func:`progress_line`, and the longest line it returns.
BAR_WIDTH, PROGRESS_MAX = 24, 160

WarningCallback = Callable[[str], None]


class CheckpointError(DiagnosticError):
    """The checkpoint script could not run at all; the message says why and what to do.

    Raised for a fatal ``error`` record (no torch there, a path that does not exist, an
    ``--allow-global`` name that cannot be imported) and for a script that stopped without
    its final record (crashed or killed); ``result`` is the step's Result.
    """


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class BadTensor:
    """One tensor with non-finite values (or negative values in a second-moment slot).

    ``section`` is "weights" or "optimizer"; ``slot`` the optimizer state name (exp_avg,
    exp_avg_sq, ...). ``first_index`` is the flat index of the first bad value.
    ``shared_with`` names the other keys that share this tensor's storage (tied weights):
    their counts are the same values, counted once in the checkpoint's totals.
    """

    name: str
    section: str
    slot: str | None
    dtype: str
    numel: int
    nan: int
    posinf: int
    neginf: int
    negative: int
    first_index: int | None
    shared_with: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for people: the tensor, its section, dtype and size, what is wrong."""
        parts = [
            f"{n} {label}"
            for n, label in ((self.nan, "NaN"), (self.posinf, "+Inf"), (self.neginf, "-Inf"))
            if n
        ]
        if self.negative:
            parts.append(f"{self.negative} negative")
        text = f"{self.name} ({self.section}, {self.dtype}, {self.numel} values): "
        text += ", ".join(parts) or "bad values"
        if self.first_index is not None:
            text += f"; first at flat index {self.first_index}"
        if self.shared_with:
            text += f"; same storage as {', '.join(self.shared_with)}"
        return text


@dataclass(frozen=True, repr=False)
class CheckpointReport(Shown):
    """The scan of one checkpoint: a file, an HF index with its shards, or a checkpoint
    directory (HF Trainer ``checkpoint-N/``, DeepSpeed ``global_stepN/``, a DCP directory).

    ``status``: "clean", "bad" (non-finite values, or a negative exp_avg_sq-like slot),
    "error" (could not be read; ``error`` says why and what to do) or "unsupported" (a format
    named but not handled). ``global_step`` comes from ``step_key`` (a key in the file such
    as "iter_num", "trainer_state.json:global_step", or "name" when only the file or directory
    name carries it). ``scalars`` are the top-level non-tensor values and 0-d tensors (e.g.
    nanoGPT's ``best_val_loss``): metadata, never counted as weights. Counts are exact;
    values in shared storage count once. ``params`` is the element count of the floating
    tensors of the model (outside optimizer state); ``max_abs_*`` is the largest finite
    magnitude per section. ``other`` counts, per kind, the tensors that are no weights
    ("counter": num_batches_tracked, an optimizer's step; "score": a trainer's bookkeeping such
    as Lightning's best_model_score; "rng"; "integer"): never params, never "bad".
    ``needs_globals`` lists what weights-only loading refused (see ``allow_globals``).
    """

    path: str
    status: str
    error: str | None = None
    format: str | None = None
    global_step: int | float | None = None
    step_key: str | None = None
    epoch: int | float | None = None
    scalars: Mapping[str, Any] = field(default_factory=dict)
    params: int = 0
    tensors: int = 0
    skipped_tensors: int = 0
    bytes: int = 0
    nan_weights: int = 0
    posinf_weights: int = 0
    neginf_weights: int = 0
    nan_optimizer: int = 0
    posinf_optimizer: int = 0
    neginf_optimizer: int = 0
    negative_exp_avg_sq: int = 0
    max_abs_weights: float | None = None
    max_abs_optimizer: float | None = None
    other_tensors: int = 0
    other: Mapping[str, int] = field(default_factory=dict)
    bad_tensors: tuple[BadTensor, ...] = ()
    bad_tensors_total: int = 0
    needs_globals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Read in full and every value finite."""
        return self.status == "clean"

    @property
    def nonfinite_weights(self) -> int:
        return self.nan_weights + self.posinf_weights + self.neginf_weights

    @property
    def nonfinite_optimizer(self) -> int:
        return self.nan_optimizer + self.posinf_optimizer + self.neginf_optimizer

    @property
    def exit_code(self) -> int:
        return {"clean": EXIT_OK, "bad": EXIT_FINDINGS}.get(self.status, EXIT_FAILED)

    @property
    def findings(self) -> tuple[str, ...]:
        return (f"{self.path}: {_counts_line(self)}",) if self.status == "bad" else ()

    @property
    def errors(self) -> tuple[str, ...]:
        return (f"{self.path}: {self.error}",) if self.exit_code == EXIT_FAILED else ()

    def render(self) -> str:
        return render_scan([self])

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> CheckpointReport:
        return from_record(cls, rec, status=str(rec.get("status") or "error"))


ReportCallback = Callable[[CheckpointReport], None]


@dataclass(frozen=True)
class LogFile:
    """A file met while walking the scanned directories that may be a training log."""

    path: str
    bytes: int
    mtime: int


@dataclass(frozen=True)
class ScanPlan:
    """What the scan found before it started: files (checkpoints), their bytes, skipped files,
    and the files that may be training logs (``logs``: what ``diagnose --run`` reads)."""

    files: int
    bytes: int
    jobs: int
    skipped: tuple[str, ...] = ()
    logs: tuple[LogFile, ...] = ()


@dataclass(frozen=True, repr=False)
class ScanProgress(Shown):
    """Progress of a scan: whole checkpoints done, and bytes done (partial files included).
    Its ``str()`` is the progress line ``ckpt-scan`` shows (:func:`progress_line`)."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    current: str | None = None

    repr_keys = ("files_done", "files_total", "bytes_done", "bytes_total")

    def render(self) -> str:
        return progress_line(self)


# after the class, not as a string: the alias is imported (demo.py), and a string would be
# resolved where it is used, for typing.get_type_hints and the API reference alike
ProgressCallback = Callable[[ScanProgress], None]


class CheckpointScan(Shown, list[CheckpointReport]):
    """The reports of one scan, sorted by path (a plain list of :class:`CheckpointReport`),
    with the scan's verdict: ``exit_code`` (worst report), ``findings`` (one line per bad
    checkpoint), ``errors`` (one line per unreadable or unsupported one), ``plan`` and the
    script's ``warnings``."""

    def __init__(
        self,
        reports: Sequence[CheckpointReport] = (),
        *,
        plan: ScanPlan | None = None,
        warnings: Sequence[str] = (),
    ) -> None:
        super().__init__(sorted(reports, key=lambda r: r.path))
        self.plan = plan
        self.warnings = tuple(warnings)

    @property
    def exit_code(self) -> int:
        return scan_exit_code(self)

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(f"{r.path}: {_counts_line(r)}" for r in self if r.status == "bad")

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(f"{r.path}: {r.error}" for r in self if r.status in ("error", "unsupported"))

    @property
    def notes(self) -> tuple[str, ...]:
        return self.warnings

    def render(self) -> str:
        return render_scan(self, plan=self.plan)

    def __json__(self) -> dict[str, Any]:
        """As JSON: the verdict with the reports, not only the list."""
        return {
            "exit_code": self.exit_code,
            "plan": self.plan,
            "warnings": self.warnings,
            "findings": self.findings,
            "errors": self.errors,
            "checkpoints": list(self),
        }


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of an inspected checkpoint (no data read). ``section`` is "weights" or
    "optimizer" for a param, "other" for a tensor that is none, whose ``kind`` says why
    ("counter", "score", "rng", "integer")."""

    name: str
    section: str
    slot: str | None
    dtype: str
    shape: tuple[int, ...]
    numel: int
    bytes: int
    shared_with: tuple[str, ...] = ()
    kind: str | None = None


@dataclass(frozen=True)
class ParamGroup:
    """An optimizer param group: its ``lr``, how many params, the other hyperparameters."""

    index: int
    lr: float | None
    params: int
    hyper: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OptimizerInfo:
    """An optimizer state dict found at ``path`` inside the checkpoint."""

    path: str
    groups: tuple[ParamGroup, ...]
    state_params: int
    slots: Mapping[str, int]
    step: int | float | None


@dataclass(frozen=True, repr=False)
class InspectReport(Shown):
    """Structure of one checkpoint: tensors, step/epoch, top-level scalars, optimizers;
    ``totals`` per section ("weights", "optimizer", "other") and ``other`` per kind."""

    path: str
    ok: bool
    error: str | None
    format: str | None
    bytes: int
    global_step: int | float | None
    epoch: int | float | None
    tensors: tuple[TensorInfo, ...]
    top_keys: tuple[str, ...]
    scalars: Mapping[str, Any]
    optimizers: tuple[OptimizerInfo, ...]
    totals: Mapping[str, Mapping[str, int]]
    dtypes: Mapping[str, int]
    metadata: Mapping[str, Any] | None
    needs_globals: tuple[str, ...]
    notes: tuple[str, ...]
    other: Mapping[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED

    @property
    def findings(self) -> tuple[str, ...]:
        return ()

    @property
    def errors(self) -> tuple[str, ...]:
        return (f"{self.path}: {self.error}",) if self.exit_code == EXIT_FAILED else ()

    def render(self) -> str:
        return render_inspect(self)


@dataclass(frozen=True)
class TensorDiff:
    """B against A for one tensor: ``rel_change`` = ||B-A|| / ||A|| over the elements finite
    in both; ``new_nonfinite`` counts elements finite in A and not in B."""

    name: str
    section: str
    slot: str | None
    dtype: str
    numel: int
    rel_change: float
    max_abs_diff: float
    cosine: float | None
    nonfinite_a: int
    nonfinite_b: int
    new_nonfinite: int
    negative_b: int


@dataclass(frozen=True)
class TensorChange:
    """A tensor whose shape or dtype differs between A and B."""

    name: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    dtype_a: str
    dtype_b: str


@dataclass(frozen=True)
class DiffFlag:
    """A finding of the diff: ``kind`` is "new_nonfinite", "nonfinite_exp_avg_sq" or
    "negative_exp_avg_sq" (any second-moment slot); ``count`` elements."""

    name: str
    section: str
    kind: str
    count: int


@dataclass(frozen=True)
class NonWeightChange:
    """The tensors of one kind and slot that are no weights (``name``: num_batches_tracked,
    step, best_model_score), A against B: how many were compared, how many changed, and the
    range of B - A over the one-value ones (None when none changed or a value is not finite)."""

    name: str
    kind: str
    compared: int
    changed: int
    delta_min: int | float | None = None
    delta_max: int | float | None = None

    def describe(self) -> str:
        """ "step +200 x6", "num_batches_tracked +4", "best_model_score" (no number)."""
        text = self.name
        lo, hi = self.delta_min, self.delta_max
        if lo is not None and hi is not None:
            text += f" {_signed(lo)}" if lo == hi else f" {_signed(lo)}..{_signed(hi)}"
        return text + (f" x{self.changed}" if self.changed > 1 else "")


@dataclass(frozen=True)
class NonWeightDiff:
    """How the non-weights of one class (counters, or every other kind) changed."""

    compared: int
    changed: int
    by_name: tuple[NonWeightChange, ...] = ()

    def line(self, title: str) -> str | None:
        """ "counters: 7 changed (num_batches_tracked +200, step +200 x6)"; None for none."""
        if not self.compared:
            return None
        count = (
            f"{self.changed} changed"
            if self.changed in (0, self.compared)
            else (f"{self.changed} of {self.compared} changed")
        )
        if not self.changed:
            return f"{title}: {self.compared} compared, none changed"
        shown = [g.describe() for g in self.by_name if g.changed]
        more = " ..." if len(shown) > 6 else ""
        return f"{title}: {count} ({', '.join(shown[:6])}{more})"


@dataclass(frozen=True, repr=False)
class DiffReport(Shown):
    """Checkpoint B compared with checkpoint A (see :func:`diff_checkpoints`).

    ``rel_change_*`` are over the params (floating weights and optimizer state) only;
    ``counters`` (num_batches_tracked, optimizer steps) and ``other`` (scores, RNG states,
    integer tensors) say on their own what changed among the tensors that are no weights.
    """

    a: str
    b: str
    ok: bool
    error: str | None
    format_a: str | None = None
    format_b: str | None = None
    step_a: int | float | None = None
    step_b: int | float | None = None
    step_delta: int | float | None = None
    epoch_a: int | float | None = None
    epoch_b: int | float | None = None
    lr_a: tuple[tuple[float | None, ...], ...] = ()
    lr_b: tuple[tuple[float | None, ...], ...] = ()
    tensors_a: int = 0
    tensors_b: int = 0
    compared: int = 0
    identical: int = 0
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    only_a_total: int = 0
    only_b_total: int = 0
    changes: tuple[TensorChange, ...] = ()
    changes_total: int = 0
    top_weights: tuple[TensorDiff, ...] = ()
    top_optimizer: tuple[TensorDiff, ...] = ()
    flags: tuple[DiffFlag, ...] = ()
    flags_total: int = 0
    rel_change_weights: float | None = None
    rel_change_optimizer: float | None = None
    counters: NonWeightDiff | None = None
    other: NonWeightDiff | None = None
    needs_globals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

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


@dataclass(frozen=True)
class BisectPoint:
    path: str
    global_step: int | float | None
    epoch: int | float | None = None


@dataclass(frozen=True, repr=False)
class BisectReport(Shown):
    """Where a run went bad: ``last_clean`` and ``first_bad`` in ``order`` ("global_step",
    or "name" when some checkpoint has no step), with the first bad tensor and its section.

    ``mode`` "binary" checks about log2(n) checkpoints and assumes that once one is bad every
    later one is too; "linear" checks all, and ``later_clean`` lists clean ones after the
    first bad (an isolated corrupt save rather than a divergence).
    """

    directory: str
    order: str
    mode: str
    checkpoints: int
    scanned: int
    last_clean: BisectPoint | None
    first_bad: BisectPoint | None
    first_bad_tensor: BadTensor | None
    unreadable: tuple[str, ...]
    bad: tuple[str, ...]
    later_clean: tuple[str, ...]
    assumption: str | None
    ordered: tuple[BisectPoint, ...]
    reports: tuple[CheckpointReport, ...]

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


@dataclass(frozen=True, repr=False)
class Sample(Shown):
    """A sample checkpoint made by :func:`make_samples`; ``expect`` is the status a scan
    must give it. Its ``str()`` is its line in ``ckpt-demo``'s list of samples."""

    name: str
    path: str
    expect: str
    detail: str

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


# --------------------------------------------------------------------------- parsing


def _int(v: Any) -> int:
    """A count from a record (0 when it is missing or not a number)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _float(v: Any) -> float | None:
    """A float from a record; the script writes non-finite floats as "nan", "inf", "-inf"."""
    n = number(v)
    return None if n is None else float(n)


def _bad_tensor(b: Mapping[str, Any]) -> BadTensor:
    first = b.get("first_index")
    return from_record(BadTensor, b, first_index=first if isinstance(first, int) else None)


def _tensor_diff(d: Mapping[str, Any]) -> TensorDiff:
    rel = _float(d.get("rel_change"))
    return from_record(
        TensorDiff,
        d,
        rel_change=math.nan if rel is None else rel,
        max_abs_diff=_float(d.get("max_abs_diff")) or 0.0,
    )


def _point(rec: Mapping[str, Any] | None) -> BisectPoint | None:
    return from_record(BisectPoint, rec, path=str(rec.get("path"))) if rec else None


# --------------------------------------------------------------------------- running


def _safety_args(allow_globals: Sequence[str], unsafe_pickle: bool) -> list[str]:
    if isinstance(allow_globals, str):
        allow_globals = [allow_globals]  # one name given bare: not its characters
    args: list[str] = []
    for name in allow_globals:
        args += ["--allow-global", name]
    if unsafe_pickle:
        args.append("--unsafe-pickle")
    return args


def _run(
    target: Target,
    script: str,
    args: Sequence[str],
    *,
    step: str,
    timeout: float | None,
    on_record: Callable[[Record], None] | None = None,
) -> Run:
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


class _Tracker:
    """Turns plan / progress / checkpoint records into :class:`ScanProgress` callbacks, and
    collects the checkpoint reports in ``reports`` (each also to ``on_report`` at once)."""

    def __init__(
        self, on_progress: ProgressCallback | None, on_report: ReportCallback | None
    ) -> None:
        self.on_progress = on_progress
        self.on_report = on_report
        self.reports: list[CheckpointReport] = []
        self.files_total = self.bytes_total = 0
        self.files_done = self.bytes_done = 0
        self.partial: dict[str, int] = {}

    def record(self, rec: Record) -> None:
        kind = rec.get("type")
        current: str | None = None
        if kind == "plan":
            self.files_total = _int(rec.get("files"))
            self.bytes_total = _int(rec.get("bytes"))
        elif kind == "progress":
            current = str(rec.get("path"))
            self.partial[current] = _int(rec.get("done"))
        elif kind == "checkpoint":
            report = CheckpointReport.from_record(rec)
            self.reports.append(report)
            if self.on_report is not None:
                self.on_report(report)
            self.partial.pop(str(rec.get("path")), None)
            self.files_done += 1
            self.bytes_done += _int(rec.get("bytes"))
            current = str(rec.get("path"))
        else:
            return
        if self.on_progress is not None:
            done = min(self.bytes_total, self.bytes_done + sum(self.partial.values()))
            self.on_progress(
                ScanProgress(self.files_done, self.files_total, done, self.bytes_total, current)
            )


def _warn(on_warning: WarningCallback | None, message: str) -> None:
    if on_warning is not None:
        on_warning(message)
    else:
        warnings.warn(visible(message), UserWarning, stacklevel=3)


# --------------------------------------------------------------------------- API


def scan_checkpoints(
    target: Target,
    path: str,
    *,
    jobs: int = 1,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    timeout: float | None = None,
    on_report: ReportCallback | None = None,
    on_progress: ProgressCallback | None = None,
    on_warning: WarningCallback | None = None,
) -> CheckpointScan:
    """Check every checkpoint at ``path`` there (a file, a directory searched recursively,
    or a glob) for NaN / +Inf / -Inf, in weights and in optimizer state.

    ``jobs`` checkpoints are checked in parallel (one worker process each, one checkpoint at
    a time per worker). ``on_report`` gets each :class:`CheckpointReport` as soon as its
    checkpoint is done, ``on_progress`` a :class:`ScanProgress` after each record, and
    ``on_warning`` the script's warnings (default: :func:`warnings.warn`). A file that cannot
    be read never stops the scan: it gets a report with status "error" and the reason.

    Returns a :class:`CheckpointScan` (a list of reports sorted by path, with ``exit_code``).
    Raises :class:`CheckpointError` when the scan cannot run at all (nothing at ``path``,
    no torch there, an ``allow_globals`` name that cannot be imported) and the engine's
    errors (timeout, connection, container, interpreter).
    """
    args = ["scan", path, "--jobs", str(max(1, jobs)), *_safety_args(allow_globals, unsafe_pickle)]
    tracker = _Tracker(on_progress, on_report)
    notes: list[str] = []
    plan: list[ScanPlan] = []

    def on_record(rec: Record) -> None:
        kind = rec.get("type")
        if kind == "plan":
            plan.append(from_record(ScanPlan, rec))
        elif kind == "warning":
            notes.append(str(rec.get("message")))
            _warn(on_warning, str(rec.get("message")))
        tracker.record(rec)

    _run(target, SCRIPT, args, step="ckpt-scan", timeout=timeout, on_record=on_record)
    return CheckpointScan(tracker.reports, plan=plan[0] if plan else None, warnings=notes)


def scan_exit_code(reports: Sequence[CheckpointReport]) -> int:
    """0 all clean, 1 non-finite values found, 2 some checkpoint could not be read."""
    return worst_exit([r.exit_code for r in reports])


def inspect_checkpoint(
    target: Target,
    path: str,
    *,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    timeout: float | None = None,
) -> InspectReport:
    """Keys, dtypes, shapes, sizes, step/epoch and optimizer hyperparameters of one checkpoint
    (a file or an HF ``*.index.json``), without reading tensor data (memory-mapped torch
    files; the safetensors header only). A checkpoint that cannot be read gives a report with
    ``ok`` False and ``error``; CheckpointError / engine errors as in :func:`scan_checkpoints`.
    """
    args = ["inspect", path, *_safety_args(allow_globals, unsafe_pickle)]
    run = _run(target, SCRIPT, args, step="ckpt-inspect", timeout=timeout)
    rec = run.first("inspect") or {}
    return from_record(
        InspectReport,
        rec,
        path=str(rec.get("path", path)),
        ok=bool(rec.get("ok")),
        error=rec.get("error") if rec else "the script gave no inspect record",
        bytes=_int(rec.get("bytes")),
        tensors=tuple(from_record(TensorInfo, r) for r in run.of("tensor")),
        scalars=dict(rec.get("scalars") or {}),
        optimizers=tuple(
            from_record(OptimizerInfo, o, path=str(o.get("path") or ""))
            for o in rec.get("optimizers") or ()
        ),
        totals={str(k): dict(v) for k, v in (rec.get("totals") or {}).items()},
        dtypes={str(k): _int(v) for k, v in (rec.get("dtypes") or {}).items()},
    )


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
    args = ["diff", a, b, "--top", str(max(1, top)), *_safety_args(allow_globals, unsafe_pickle)]
    rec = _run(target, SCRIPT, args, step="ckpt-diff", timeout=timeout).first("diff")
    if rec is None:
        return DiffReport(a=a, b=b, ok=False, error="the script gave no diff record")
    rel = rec.get("rel_change") or {}

    def lrs(v: Any) -> tuple[tuple[float | None, ...], ...]:
        return tuple(tuple(_float(x) for x in group) for group in v or ())

    return from_record(
        DiffReport,
        rec,
        a=a,
        b=b,
        ok=bool(rec.get("ok")),
        lr_a=lrs(rec.get("lr_a")),
        lr_b=lrs(rec.get("lr_b")),
        changes=tuple(from_record(TensorChange, c) for c in rec.get("changes") or ()),
        top_weights=tuple(_tensor_diff(d) for d in rec.get("top_weights") or ()),
        top_optimizer=tuple(_tensor_diff(d) for d in rec.get("top_optimizer") or ()),
        flags=tuple(from_record(DiffFlag, f) for f in rec.get("flags") or ()),
        rel_change_weights=_float(rel.get("weights")),
        rel_change_optimizer=_float(rel.get("optimizer")),
    )


def bisect_checkpoints(
    target: Target,
    directory: str,
    *,
    linear: bool = False,
    jobs: int = 1,
    allow_globals: Sequence[str] = (),
    unsafe_pickle: bool = False,
    timeout: float | None = None,
    on_report: ReportCallback | None = None,
    on_progress: ProgressCallback | None = None,
) -> BisectReport:
    """Order the checkpoints under ``directory`` by global step (or by name, naturally sorted,
    when some has none) and find the last clean and the first bad one.

    By default a binary search (about log2(n) scans; assumes that once a checkpoint is bad,
    every later one is too); ``linear=True`` scans all (with ``jobs`` workers) and reports
    clean checkpoints after the first bad one. Unreadable checkpoints are left out of the
    order and listed in ``unreadable`` (exit code 2).
    """
    args = ["bisect", directory, "--jobs", str(max(1, jobs))]
    if linear:
        args.append("--linear")
    args += _safety_args(allow_globals, unsafe_pickle)
    tracker = _Tracker(on_progress, on_report)
    run = _run(target, SCRIPT, args, step="ckpt-bisect", timeout=timeout, on_record=tracker.record)
    rec = run.first("bisect")
    if rec is None:
        raise CheckpointError("ckpt.py bisect gave no bisect record", result=run.result)
    order = run.first("order") or {}
    first_bad = rec.get("first_bad") or None
    return from_record(
        BisectReport,
        rec,
        directory=directory,
        last_clean=_point(rec.get("last_clean")),
        first_bad=_point(first_bad),
        first_bad_tensor=_bad_tensor(first_bad["tensor"])
        if first_bad and first_bad.get("tensor")
        else None,
        ordered=tuple(p for p in (_point(c) for c in order.get("checkpoints") or ()) if p),
        reports=tuple(tracker.reports),
    )


def make_samples(
    target: Target, directory: str, *, steps: int = 5, timeout: float | None = None
) -> list[Sample]:
    """Write the demo's sample checkpoints into ``directory`` there (``remote/ckpt_samples.py``):
    clean, NaN in weights, +Inf in Adam state, truncated, needs an unsafe global."""
    run = _run(
        target,
        SAMPLES_SCRIPT,
        [directory, "--steps", str(steps)],
        step="ckpt-samples",
        timeout=timeout,
    )
    return [from_record(Sample, r) for r in run.of("sample")]


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


# --------------------------------------------------------------------------- rendering


def _short_count(n: int) -> str:
    """A count in 3 or 4 characters: ``7``, ``1.2k``, ``3.4M``, ``1.0B``."""
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _short_float(x: float | None) -> str | None:
    """A float in 3 significant digits for a table (``nan``, ``inf`` as such; None stays)."""
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.3g}"


def _nonfinite_counts(r: CheckpointReport, section: str) -> str | None:
    """ "NaN/+Inf/-Inf" of a section; None ("-") for a checkpoint that was not read at all."""
    counts = [getattr(r, f"{kind}_{section}") for kind in ("nan", "posinf", "neginf")]
    if r.status not in ("clean", "bad") and not any(counts) and not r.params:
        return None
    return "/".join(str(c) for c in counts)


def _counts_line(r: CheckpointReport) -> str:
    parts = []
    for label, sec in (("weights", "weights"), ("optimizer state", "optimizer")):
        nan = getattr(r, f"nan_{sec}")
        pos = getattr(r, f"posinf_{sec}")
        neg = getattr(r, f"neginf_{sec}")
        if nan or pos or neg:
            parts.append(f"{label}: {nan} NaN, {pos} +Inf, {neg} -Inf")
    if r.negative_exp_avg_sq:
        parts.append(f"{r.negative_exp_avg_sq} negative exp_avg_sq values")
    return "; ".join(parts) or "clean"


def _display_paths(paths: Sequence[str]) -> dict[str, str]:
    """Paths relative to their common parent (remote paths are POSIX)."""
    if len(paths) <= 1:
        return {p: p for p in paths}
    try:
        base = posixpath.commonpath([posixpath.dirname(p) or "/" for p in paths])
    except ValueError:  # relative and absolute mixed
        return {p: p for p in paths}
    return {p: (posixpath.relpath(p, base) if base not in ("", "/") else p) for p in paths}


def _metadata_line(r: CheckpointReport, most: int = 6) -> str:
    """ "step from iter_num; best_val_loss=2.875, ...; other tensors (not weights): 4
    counters" (numbers only; '' when nothing)."""
    nums = [
        f"{k}={_short_float(float(v)) if isinstance(v, float) else v}"
        for k, v in r.scalars.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    parts = [f"step from {r.step_key}"] if r.step_key else []
    if nums:
        parts.append(", ".join(nums[:most]) + (" ..." if len(nums) > most else ""))
    if r.other:
        parts.append(f"other tensors (not weights): {_kinds(r.other)}")
    return "; ".join(parts)


#: How :func:`_kinds` names each kind of tensor that is no weight (singular, plural).
KIND_WORDS = {
    "counter": ("counter", "counters"),
    "score": ("score", "scores"),
    "rng": ("RNG state", "RNG states"),
    "integer": ("integer tensor", "integer tensors"),
}


def _kinds(other: Mapping[str, int]) -> str:
    """ "7 counters, 4 scores": the tensors that are no weights, per kind."""
    words = [(n, KIND_WORDS.get(k, (f"{k} tensor", f"{k} tensors"))) for k, n in other.items() if n]
    return ", ".join(f"{n} {w[0] if n == 1 else w[1]}" for n, w in words)


def _signed(x: float) -> str:
    return f"{x:+}" if isinstance(x, int) else f"{x:+.3g}"


def render_scan(reports: Sequence[CheckpointReport], *, plan: ScanPlan | None = None) -> str:
    """The scan table (counts are NaN/+Inf/-Inf), then findings, errors and a summary line."""
    shown = _display_paths([r.path for r in reports])
    lines = [_scan_table(reports, shown), *_scan_details(reports, shown)]
    lines += ["", _scan_summary(reports, plan)]
    return "\n".join(lines)


def _scan_table(reports: Sequence[CheckpointReport], shown: Mapping[str, str]) -> str:
    rows = [
        [
            shown[r.path],
            r.status,
            r.format,
            r.global_step,
            r.epoch,
            _short_count(r.params) if r.status in ("clean", "bad") else None,
            human_bytes(r.bytes),
            _nonfinite_counts(r, "weights"),
            _nonfinite_counts(r, "optimizer"),
            _short_float(r.max_abs_weights),
            _short_float(r.max_abs_optimizer),
            f"{r.seconds:.1f}",
        ]
        for r in reports
    ]
    headers = [
        "CHECKPOINT",
        "STATUS",
        "FORMAT",
        "STEP",
        "EPOCH",
        "PARAMS",
        "SIZE",
        "WEIGHTS NaN/+Inf/-Inf",
        "OPTIM NaN/+Inf/-Inf",
        "MAX|W|",
        "MAX|OPT|",
        "SECONDS",
    ]
    return table(headers, rows)


def _scan_details(reports: Sequence[CheckpointReport], shown: Mapping[str, str]) -> list[str]:
    """The bad values, where each step came from, and the checkpoints that could not be read."""
    lines: list[str] = []
    bad = [r for r in reports if r.status == "bad"]
    if bad:
        lines.append("")
        lines.append("Bad values:")
        for r in bad:
            lines.append(f"  {shown[r.path]}: {_counts_line(r)}")
            for t in r.bad_tensors[:SHOW_BAD]:
                lines.append(f"    {t.describe()}")
            more = r.bad_tensors_total - min(len(r.bad_tensors), SHOW_BAD)
            if more > 0:
                lines.append(f"    ... and {more} more tensor(s) (--json lists up to 20)")
    meta = [(r, _metadata_line(r)) for r in reports]
    meta = [(r, m) for r, m in meta if m]
    if meta:
        lines.append("")
        lines.append("Step source and metadata (not weights):")
        lines += [f"  {shown[r.path]}: {m}" for r, m in meta]
    failed = [r for r in reports if r.status in ("error", "unsupported")]
    if failed:
        lines.append("")
        lines.append("Could not check:")
        for r in failed:
            lines.append(f"  {shown[r.path]}: {r.error}")
    return lines


def _scan_summary(reports: Sequence[CheckpointReport], plan: ScanPlan | None) -> str:
    counts = {
        s: sum(1 for r in reports if r.status == s)
        for s in ("clean", "bad", "error", "unsupported")
    }
    summary = (
        f"{len(reports)} checkpoint(s): {counts['clean']} clean, {counts['bad']} with bad values, "
        f"{counts['error']} unreadable"
    )
    if counts["unsupported"]:
        summary += f", {counts['unsupported']} not supported"
    if plan is not None and plan.skipped:
        summary += f"; skipped {len(plan.skipped)} trainer side file(s)"
    return summary + f" (exit {scan_exit_code(reports)})"


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
            [g.index, _short_float(g.lr), g.params, *[g.hyper.get(k) for k in keys]]
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
        kinds = f" ({_kinds(report.other)})" if sec == "other" and report.other else ""
        lines.append(
            f"{sec}: {t.get('tensors', 0)} tensors{kinds}, {_short_count(t.get('numel', 0))} "
            f"values, {human_bytes(t.get('bytes', 0))}"
        )
    if report.dtypes:
        lines.append(
            "dtypes: " + ", ".join(f"{k} {_short_count(v)}" for k, v in report.dtypes.items())
        )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def _pct(x: float | None) -> str | None:
    if x is None:
        return None
    if math.isinf(x) or math.isnan(x):
        return _short_float(x)
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
            return "\n".join(lines)
    lines += _diff_summary(report) + _diff_tables(report)
    lines += [f"note: {n}" for n in report.notes]
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
                _short_float(d.max_abs_diff),
                _short_float(d.cosine),
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


def render_bisect(report: BisectReport) -> str:
    """The ordered checkpoints with the status of those scanned, then the answer."""
    by_path = {r.path: r for r in report.reports}
    shown = _display_paths([p.path for p in report.ordered] or [report.directory])
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
                _counts_line(r) if r and r.status == "bad" else None,
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


def render_demo(report: DemoReport) -> str:
    """The samples planted, the scan table, and whether the scan found what was planted."""
    n = len(report.samples)
    lines = [f"Made {n} sample checkpoints in {report.directory} on {report.host}:"]
    lines += [f"  {s.render()}" for s in report.samples]
    lines += ["", render_scan(report.scan, plan=report.scan.plan), ""]
    if report.mismatches:
        lines.append(f"demo: the scan disagrees with what was planted (exit {report.exit_code}):")
        lines += [f"  {m}" for m in report.mismatches]
    else:
        lines.append(
            f"demo: the scan found every planted fault, {n}/{n} samples as expected "
            f"(exit {report.exit_code})"
        )
    return "\n".join(lines)


def progress_line(p: ScanProgress) -> str:
    """A scan's progress as one line: a bar, files and bytes done, the file being checked
    (its directory and name). Plain text, at most ``PROGRESS_MAX`` characters: whoever shows
    it (``Console.progress``) redraws and clears it."""
    frac = p.bytes_done / p.bytes_total if p.bytes_total else p.files_done / max(1, p.files_total)
    filled = int(BAR_WIDTH * min(1.0, frac))
    name = ""
    if p.current:
        name = (
            posixpath.basename(posixpath.dirname(p.current)) + "/" + posixpath.basename(p.current)
        )
    line = (
        f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {p.files_done}/{p.files_total} files  "
        f"{human_bytes(p.bytes_done)}/{human_bytes(p.bytes_total)}  {name}"
    )
    return line.rstrip()[:PROGRESS_MAX]
