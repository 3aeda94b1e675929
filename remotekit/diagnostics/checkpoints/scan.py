"""``ckpt-scan``: exact NaN / +Inf / -Inf counts per checkpoint, in model weights and in
optimizer state, for a file, a directory or a glob (:func:`scan_checkpoints`); its reports,
its progress, and its text (:func:`render_scan`, :func:`progress_line`)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics import defaults
from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    Record,
    worst_exit,
)
from remotekit.diagnostics.checkpoints.common import (
    SCRIPT,
    WarningCallback,
    as_int,
    display_paths,
    kinds,
    run_script,
    short_count,
    short_float,
    warn,
)
from remotekit.remote.ckpt.options import ScanOptions
from remotekit.remote.ckpt.records import BadTensor, Checkpoint, LogFile, ScanPlan
from remotekit.render import human_bytes, table
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "BAR_WIDTH",
    "PROGRESS_MAX",
    "BadTensor",
    "CheckpointReport",
    "CheckpointScan",
    "LogFile",
    "ProgressCallback",
    "ReportCallback",
    "ScanPlan",
    "ScanProgress",
    "Tracker",
    "bad_tensor",
    "counts_line",
    "progress_line",
    "render_scan",
    "scan_checkpoints",
    "scan_exit_code",
]

#: How many bad tensors the table lists per checkpoint (the report holds up to ``max_bad``).
SHOW_BAD = 5
#: Width of the bar in :func:`progress_line`, and the longest line it returns.
BAR_WIDTH, PROGRESS_MAX = 24, 160


@dataclass(frozen=True, repr=False)
class CheckpointReport(Shown, Checkpoint):
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
        return (f"{self.path}: {counts_line(self)}",) if self.status == "bad" else ()

    @property
    def errors(self) -> tuple[str, ...]:
        return (f"{self.path}: {self.error}",) if self.exit_code == EXIT_FAILED else ()

    def render(self) -> str:
        return render_scan([self])

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> CheckpointReport:
        """The report of a ``checkpoint`` record (:meth:`from_dict`)."""
        return cls.from_dict(rec)


ReportCallback = Callable[[CheckpointReport], None]


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
        return tuple(f"{r.path}: {counts_line(r)}" for r in self if r.status == "bad")

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


def bad_tensor(b: Mapping[str, Any]) -> BadTensor:
    """A :class:`BadTensor` from its record (``first_index`` None unless a number)."""
    return BadTensor.from_dict(b)


class Tracker:
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
            self.files_total = as_int(rec.get("files"))
            self.bytes_total = as_int(rec.get("bytes"))
        elif kind == "progress":
            current = str(rec.get("path"))
            self.partial[current] = as_int(rec.get("done"))
        elif kind == "checkpoint":
            report = CheckpointReport.from_record(rec)
            self.reports.append(report)
            if self.on_report is not None:
                self.on_report(report)
            self.partial.pop(str(rec.get("path")), None)
            self.files_done += 1
            self.bytes_done += as_int(rec.get("bytes"))
            current = str(rec.get("path"))
        else:
            return
        if self.on_progress is not None:
            done = min(self.bytes_total, self.bytes_done + sum(self.partial.values()))
            self.on_progress(
                ScanProgress(self.files_done, self.files_total, done, self.bytes_total, current)
            )


def scan_checkpoints(
    target: Target,
    path: str | None = None,
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
    or a glob; default: the host's ``checkpoints:``) for NaN / +Inf / -Inf, in weights and
    in optimizer state.

    ``jobs`` checkpoints are checked in parallel (one worker process each, one checkpoint at
    a time per worker). ``on_report`` gets each :class:`CheckpointReport` as soon as its
    checkpoint is done, ``on_progress`` a :class:`ScanProgress` after each record, and
    ``on_warning`` the script's warnings (default: :func:`warnings.warn`). A file that cannot
    be read never stops the scan: it gets a report with status "error" and the reason.

    Returns a :class:`CheckpointScan` (a list of reports sorted by path, with ``exit_code``).
    Raises :class:`CheckpointError` when the scan cannot run at all (nothing at ``path``,
    no checkpoint there, no torch there, an ``allow_globals`` name that cannot be imported) and the engine's
    errors (timeout, connection, container, interpreter).
    """
    where = defaults.need_checkpoints(target, path, "ckpt-scan")
    loading = {"allow_globals": allow_globals, "unsafe_pickle": unsafe_pickle}
    args = ScanOptions.of(where, jobs=jobs, **loading).argv()
    tracker = Tracker(on_progress, on_report)
    notes: list[str] = []
    plan: list[ScanPlan] = []

    def on_record(rec: Record) -> None:
        kind = rec.get("type")
        if kind == "plan":
            plan.append(ScanPlan.from_dict(rec))
        elif kind == "warning":
            notes.append(str(rec.get("message")))
            warn(on_warning, str(rec.get("message")))
        tracker.record(rec)

    run_script(target, SCRIPT, args, step="ckpt-scan", timeout=timeout, on_record=on_record)
    return CheckpointScan(tracker.reports, plan=plan[0] if plan else None, warnings=notes)


def scan_exit_code(reports: Sequence[CheckpointReport]) -> int:
    """0 all clean, 1 non-finite values found, 2 some checkpoint could not be read."""
    return worst_exit([r.exit_code for r in reports])


# --------------------------------------------------------------------------- text


def _nonfinite_counts(r: CheckpointReport, section: str) -> str | None:
    """ "NaN/+Inf/-Inf" of a section; None ("-") for a checkpoint that was not read at all."""
    counts = [getattr(r, f"{kind}_{section}") for kind in ("nan", "posinf", "neginf")]
    if r.status not in ("clean", "bad") and not any(counts) and not r.params:
        return None
    return "/".join(str(c) for c in counts)


def counts_line(r: CheckpointReport) -> str:
    """A checkpoint's bad values in words, per section (``clean`` for none)."""
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


def _metadata_line(r: CheckpointReport, most: int = 6) -> str:
    """ "step from iter_num; best_val_loss=2.875, ...; other tensors (not weights): 4
    counters" (numbers only; '' when nothing)."""
    nums = [
        f"{k}={short_float(float(v)) if isinstance(v, float) else v}"
        for k, v in r.scalars.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    parts = [f"step from {r.step_key}"] if r.step_key else []
    if nums:
        parts.append(", ".join(nums[:most]) + (" ..." if len(nums) > most else ""))
    if r.other:
        parts.append(f"other tensors (not weights): {kinds(r.other)}")
    return "; ".join(parts)


def render_scan(reports: Sequence[CheckpointReport], *, plan: ScanPlan | None = None) -> str:
    """The scan table (counts are NaN/+Inf/-Inf), then findings, errors and a summary line."""
    shown = display_paths([r.path for r in reports])
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
            short_count(r.params) if r.status in ("clean", "bad") else None,
            human_bytes(r.bytes),
            _nonfinite_counts(r, "weights"),
            _nonfinite_counts(r, "optimizer"),
            short_float(r.max_abs_weights),
            short_float(r.max_abs_optimizer),
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
            lines.append(f"  {shown[r.path]}: {counts_line(r)}")
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
