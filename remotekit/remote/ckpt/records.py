"""The checkpoint diagnostics' records, declared once: what ``ckpt.py`` writes there and the
local side (:mod:`remotekit.diagnostics.checkpoints`) reads back, as frozen dataclasses on
:class:`~remotekit.remote.records.Record` (``from_dict`` / ``to_dict``; each field's kind
says how its wire value is read).

The records of one checkpoint and its tensors (``checkpoint``, ``tensor``, ``plan``), of
the ``inspect``, ``diff``, ``order`` and ``bisect`` commands, and those nested in them; the
reports that are these records with their text are the local side's.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..records import (
    AS_IS,
    DICT,
    FLOAT,
    INT,
    NUMBER,
    STRS,
    TUPLE,
    Kind,
    Record,
    items,
    record,
    records,
    whole,
    wire,
)

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    R = TypeVar("R", bound="Record")  # the class from_dict is called on (as records.py's)

__all__ = [
    "BadTensor",
    "Bisect",
    "BisectOrder",
    "BisectPoint",
    "Checkpoint",
    "Diff",
    "DiffFlag",
    "Inspect",
    "LogFile",
    "NonWeightChange",
    "NonWeightDiff",
    "OptimizerInfo",
    "ParamGroup",
    "ResumeCheck",
    "SampleCheckpoint",
    "ScanPlan",
    "TensorChange",
    "TensorDiff",
    "TensorInfo",
]

#: A flat index: an int as it came, anything else None.
INDEX = Kind("index", lambda value: value if isinstance(value, int) else None)
#: A text (made a ``str``); missing: "".
TEXT = Kind("text", str, str)


def _float_or(default):
    def parse(value):
        n = FLOAT.parse(value)
        return default if n is None else n

    return parse


#: A float; what is no number (or missing): NaN ("not measured").
FLOAT_NAN = Kind("float or nan", _float_or(float("nan")), lambda: float("nan"))
#: A float; what is no number (or missing): 0.0.
FLOAT_0 = Kind("float or 0", lambda value: _float_or(0.0)(value) or 0.0, float)
#: A flag: the truth of what came; missing: False.
FLAG = Kind("flag", bool, bool)
#: A count (a whole number, as INT); missing: 0.
COUNT = Kind("count", whole, int)
#: A mapping, as DICT; missing: None (not known, rather than empty).
MAPPING = Kind("mapping or none", DICT.parse)
#: Names -> counts (each a whole number); no mapping: an empty one.
COUNTS = Kind(
    "counts", lambda value: {str(k): whole(v) for k, v in DICT.parse(value).items()}, dict
)
#: Section -> its totals, each a mapping as it came (one that is none: empty).
TOTALS = Kind(
    "totals", lambda value: {str(k): DICT.parse(v) for k, v in DICT.parse(value).items()}, dict
)
#: A status word; missing or empty: "error" (a record that says nothing read nothing).
STATUS = Kind("status", lambda value: str(value or "error"), lambda: "error")


def _lr(value):
    return None if value is None else FLOAT.parse(value)


#: Per optimizer, the lr of each param group: floats, None where one is no number.
LRS = Kind(
    "lr per group",
    lambda value: tuple(tuple(_lr(x) for x in items(g)) for g in items(value)),
    tuple,
)


@dataclass(frozen=True)
class BadTensor(Record):
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
    numel: int = wire(INT)
    nan: int = wire(INT)
    posinf: int = wire(INT)
    neginf: int = wire(INT)
    negative: int = wire(INT)
    first_index: int | None = wire(INDEX)
    shared_with: tuple[str, ...] = wire(STRS, default=())

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


@dataclass(frozen=True)
class Checkpoint(Record):
    """The ``checkpoint`` record: the scan of one checkpoint (the local side's
    ``CheckpointReport`` is this record with its text; its docstring says each field)."""

    TYPE = "checkpoint"
    #: Written there, not read here: the report's ``ok`` is worked out from ``status``.
    UNREAD = ("ok",)

    path: str
    status: str = wire(STATUS)
    error: str | None = None
    format: str | None = None
    global_step: int | float | None = wire(NUMBER, default=None)
    step_key: str | None = None
    epoch: int | float | None = wire(NUMBER, default=None)
    scalars: Mapping[str, Any] = wire(DICT, factory=dict)
    params: int = wire(INT, default=0)
    tensors: int = wire(INT, default=0)
    skipped_tensors: int = wire(INT, default=0)
    bytes: int = wire(INT, default=0)
    nan_weights: int = wire(INT, default=0)
    posinf_weights: int = wire(INT, default=0)
    neginf_weights: int = wire(INT, default=0)
    nan_optimizer: int = wire(INT, default=0)
    posinf_optimizer: int = wire(INT, default=0)
    neginf_optimizer: int = wire(INT, default=0)
    negative_exp_avg_sq: int = wire(INT, default=0)
    max_abs_weights: float | None = wire(FLOAT, default=None)
    max_abs_optimizer: float | None = wire(FLOAT, default=None)
    other_tensors: int = wire(INT, default=0)
    other: Mapping[str, int] = wire(DICT, factory=dict)
    bad_tensors: tuple[BadTensor, ...] = wire(records(BadTensor), default=())
    bad_tensors_total: int = wire(INT, default=0)
    needs_globals: tuple[str, ...] = wire(STRS, default=())
    notes: tuple[str, ...] = wire(STRS, default=())
    seconds: float = wire(FLOAT, default=0.0)


@dataclass(frozen=True)
class LogFile(Record):
    """A file met while walking the scanned directories that may be a training log."""

    path: str
    bytes: int = wire(INT)
    mtime: int = wire(INT)


@dataclass(frozen=True)
class ScanPlan(Record):
    """What the scan found before it started: files (checkpoints), their bytes, skipped files,
    and the files that may be training logs (``logs``: what ``diagnose --run`` reads)."""

    TYPE = "plan"

    files: int = wire(INT)
    bytes: int = wire(INT)
    jobs: int = wire(INT)
    skipped: tuple[str, ...] = wire(STRS, default=())
    logs: tuple[LogFile, ...] = wire(records(LogFile), default=())


@dataclass(frozen=True)
class TensorInfo(Record):
    """One tensor of an inspected checkpoint (no data read). ``section`` is "weights" or
    "optimizer" for a param, "other" for a tensor that is none, whose ``kind`` says why
    ("counter", "score", "rng", "integer")."""

    TYPE = "tensor"

    name: str
    section: str
    slot: str | None
    dtype: str
    shape: tuple[int, ...] = wire(TUPLE)
    numel: int = wire(INT)
    bytes: int = wire(INT)
    shared_with: tuple[str, ...] = wire(STRS, default=())
    kind: str | None = None


@dataclass(frozen=True)
class ParamGroup(Record):
    """An optimizer param group: its ``lr``, how many params, the other hyperparameters."""

    index: int = wire(INT)
    lr: float | None = wire(FLOAT)
    params: int = wire(INT)
    hyper: Mapping[str, Any] = wire(DICT, factory=dict)


@dataclass(frozen=True)
class OptimizerInfo(Record):
    """An optimizer state dict found at ``path`` inside the checkpoint."""

    path: str = wire(TEXT)
    groups: tuple[ParamGroup, ...] = wire(records(ParamGroup))
    state_params: int = wire(INT)
    slots: Mapping[str, int] = wire(DICT)
    step: int | float | None = wire(NUMBER)


@dataclass(frozen=True)
class ResumeCheck(Record):
    """Can a run resume from the checkpoint with nothing lost (``resume.py`` says how each is
    told from the files): ``gaps`` a resume would lose for sure (optimizer moments missing,
    a scheduler at another step, no scaler for an fp16 run), ``not_saved`` what the files
    lack and a trainer may need (RNG states, a data position), ``present`` what is there.
    ``optimizer_missing`` of ``optimizer_params`` parameters have no optimizer state;
    ``missing_params`` names the first of them (or "param 7" by index). ``asked``: the
    inspect was asked the question (``--resume``), so that gaps are findings (exit 1)."""

    ready: bool = wire(FLAG)
    gaps: tuple[str, ...] = wire(STRS, default=())
    not_saved: tuple[str, ...] = wire(STRS, default=())
    present: tuple[str, ...] = wire(STRS, default=())
    optimizer_params: int = wire(COUNT, default=0)
    optimizer_missing: int = wire(COUNT, default=0)
    missing_params: tuple[str, ...] = wire(STRS, default=())
    scheduler_step: int | float | None = wire(NUMBER, default=None)
    asked: bool = wire(FLAG, default=False)

    def line(self) -> str:
        """ "resume: ready ..." or "resume: would lose state: <first gap>"."""
        if self.ready:
            lacking = f" (not saved: {', '.join(n.split(':')[0] for n in self.not_saved)})"
            return "resume: nothing a resume needs is missing" + (lacking if self.not_saved else "")
        return "resume: would lose state: " + "; ".join(self.gaps)


@dataclass(frozen=True)
class Inspect(Record):
    """The ``inspect`` record: the structure of one checkpoint (the local side's
    ``InspectReport`` is this record with its text; its docstring says each field).
    ``tensors`` are the ``tensor`` records that came before it, gathered here."""

    TYPE = "inspect"

    path: str = wire(TEXT)
    ok: bool = wire(FLAG)
    error: str | None = wire()
    format: str | None = wire()
    bytes: int = wire(COUNT)
    global_step: int | float | None = wire(NUMBER)
    epoch: int | float | None = wire(NUMBER)
    tensors: tuple[TensorInfo, ...] = wire(records(TensorInfo), sent=False)
    top_keys: tuple[str, ...] = wire(STRS)
    scalars: Mapping[str, Any] = wire(DICT)
    optimizers: tuple[OptimizerInfo, ...] = wire(records(OptimizerInfo))
    totals: Mapping[str, Mapping[str, int]] = wire(TOTALS)
    dtypes: Mapping[str, int] = wire(COUNTS)
    metadata: Mapping[str, Any] | None = wire(MAPPING)
    needs_globals: tuple[str, ...] = wire(STRS)
    notes: tuple[str, ...] = wire(STRS)
    other: Mapping[str, int] = wire(DICT, factory=dict)
    resume: ResumeCheck | None = wire(record(ResumeCheck), default=None)


@dataclass(frozen=True)
class TensorDiff(Record):
    """B against A for one tensor: ``rel_change`` = ||B-A|| / ||A|| over the elements finite
    in both; ``new_nonfinite`` counts elements finite in A and not in B."""

    name: str
    section: str
    slot: str | None
    dtype: str
    numel: int = wire(INT)
    rel_change: float = wire(FLOAT_NAN)
    max_abs_diff: float = wire(FLOAT_0)
    cosine: float | None = wire(FLOAT)
    nonfinite_a: int = wire(INT)
    nonfinite_b: int = wire(INT)
    new_nonfinite: int = wire(INT)
    negative_b: int = wire(INT)


@dataclass(frozen=True)
class TensorChange(Record):
    """A tensor whose shape or dtype differs between A and B."""

    name: str
    shape_a: tuple[int, ...] = wire(TUPLE)
    shape_b: tuple[int, ...] = wire(TUPLE)
    dtype_a: str = wire(AS_IS)
    dtype_b: str = wire(AS_IS)


@dataclass(frozen=True)
class DiffFlag(Record):
    """A finding of the diff: ``kind`` is "new_nonfinite", "nonfinite_exp_avg_sq" or
    "negative_exp_avg_sq" (any second-moment slot); ``count`` elements."""

    name: str
    section: str
    kind: str
    count: int = wire(INT)


def _signed(x):
    return f"{x:+}" if isinstance(x, int) else f"{x:+.3g}"


@dataclass(frozen=True)
class NonWeightChange(Record):
    """The tensors of one kind and slot that are no weights (``name``: num_batches_tracked,
    step, best_model_score), A against B: how many were compared, how many changed, and the
    range of B - A over the one-value ones (None when none changed or a value is not finite)."""

    name: str
    kind: str
    compared: int = wire(INT)
    changed: int = wire(INT)
    delta_min: int | float | None = wire(NUMBER, default=None)
    delta_max: int | float | None = wire(NUMBER, default=None)

    def describe(self) -> str:
        """ "step +200 x6", "num_batches_tracked +4", "best_model_score" (no number)."""
        text = self.name
        lo, hi = self.delta_min, self.delta_max
        if lo is not None and hi is not None:
            text += f" {_signed(lo)}" if lo == hi else f" {_signed(lo)}..{_signed(hi)}"
        return text + (f" x{self.changed}" if self.changed > 1 else "")


@dataclass(frozen=True)
class NonWeightDiff(Record):
    """How the non-weights of one class (counters, or every other kind) changed."""

    compared: int = wire(INT)
    changed: int = wire(INT)
    by_name: tuple[NonWeightChange, ...] = wire(records(NonWeightChange), default=())

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


@dataclass(frozen=True)
class Diff(Record):
    """The ``diff`` record: checkpoint B against checkpoint A (the local side's
    ``DiffReport`` is this record with its text; its docstring says each field).

    The far side writes the relative change of each section as one mapping, ``rel_change``
    (``{"weights": x, "optimizer": y}``); it is read here as ``rel_change_weights`` and
    ``rel_change_optimizer`` (:meth:`from_dict`)."""

    TYPE = "diff"
    #: Written there as one mapping, read here as the two ``rel_change_*`` fields.
    UNREAD = ("rel_change",)

    a: str
    b: str
    ok: bool = wire(FLAG)
    error: str | None = wire()
    format_a: str | None = None
    format_b: str | None = None
    step_a: int | float | None = wire(NUMBER, default=None)
    step_b: int | float | None = wire(NUMBER, default=None)
    step_delta: int | float | None = wire(NUMBER, default=None)
    epoch_a: int | float | None = wire(NUMBER, default=None)
    epoch_b: int | float | None = wire(NUMBER, default=None)
    lr_a: tuple[tuple[float | None, ...], ...] = wire(LRS, default=())
    lr_b: tuple[tuple[float | None, ...], ...] = wire(LRS, default=())
    tensors_a: int = wire(INT, default=0)
    tensors_b: int = wire(INT, default=0)
    compared: int = wire(INT, default=0)
    identical: int = wire(INT, default=0)
    only_a: tuple[str, ...] = wire(STRS, default=())
    only_b: tuple[str, ...] = wire(STRS, default=())
    only_a_total: int = wire(INT, default=0)
    only_b_total: int = wire(INT, default=0)
    changes: tuple[TensorChange, ...] = wire(records(TensorChange), default=())
    changes_total: int = wire(INT, default=0)
    top_weights: tuple[TensorDiff, ...] = wire(records(TensorDiff), default=())
    top_optimizer: tuple[TensorDiff, ...] = wire(records(TensorDiff), default=())
    flags: tuple[DiffFlag, ...] = wire(records(DiffFlag), default=())
    flags_total: int = wire(INT, default=0)
    rel_change_weights: float | None = wire(FLOAT, default=None, sent=False)
    rel_change_optimizer: float | None = wire(FLOAT, default=None, sent=False)
    counters: NonWeightDiff | None = wire(record(NonWeightDiff), default=None)
    other: NonWeightDiff | None = wire(record(NonWeightDiff), default=None)
    needs_globals: tuple[str, ...] = wire(STRS, default=())
    notes: tuple[str, ...] = wire(STRS, default=())

    @classmethod
    def from_dict(cls: type[R], rec: Mapping[str, Any] | None) -> R:
        """As :meth:`Record.from_dict`, ``rel_change``'s two sections read as the
        ``rel_change_*`` fields (a ``rel_change`` that is no mapping: none)."""
        rel = rec.get("rel_change") if rec else None
        if isinstance(rel, Mapping):
            rec = dict(
                rec or {},
                rel_change_weights=rel.get("weights"),
                rel_change_optimizer=rel.get("optimizer"),
            )
        return super().from_dict(rec)


@dataclass(frozen=True)
class BisectPoint(Record):
    """A checkpoint in the bisect's order: its path, global step and epoch."""

    #: Written in the bisect record's ``first_bad`` only, not read here: its ``tensor`` is
    #: read as the bisect's ``first_bad_tensor``; its counts are the checkpoint record's.
    UNREAD = (
        "tensor",
        "nan_weights",
        "posinf_weights",
        "neginf_weights",
        "nan_optimizer",
        "posinf_optimizer",
        "neginf_optimizer",
        "negative_exp_avg_sq",
    )

    path: str = wire(TEXT)
    global_step: int | float | None = wire(NUMBER)
    epoch: int | float | None = wire(NUMBER, default=None)


def _point(value: Any) -> BisectPoint | None:
    return BisectPoint.from_dict(value) if isinstance(value, Mapping) and value else None


#: A checkpoint of the bisect's order; None for what is no mapping or an empty one.
POINT = Kind("point", _point)
#: The checkpoints in order, each one that is no mapping or an empty one left out.
POINTS = Kind(
    "points", lambda value: tuple(p for p in map(_point, items(value)) if p is not None), tuple
)


@dataclass(frozen=True)
class BisectOrder(Record):
    """The ``order`` record: how the bisect ordered the checkpoints (``"global_step"``, or
    ``"name"`` when some has none), before it scans any."""

    TYPE = "order"

    order: str | None
    checkpoints: tuple[BisectPoint, ...] = wire(POINTS)


@dataclass(frozen=True)
class Bisect(Record):
    """The ``bisect`` record: the last clean and the first bad checkpoint (the local side's
    ``BisectReport`` is this record with its text and the checkpoint reports of the scans;
    its docstring says each field). ``first_bad_tensor`` is read from ``first_bad``'s
    ``tensor`` (:meth:`from_dict`); ``ordered`` is the order record's checkpoints."""

    TYPE = "bisect"

    directory: str
    order: str
    mode: str
    checkpoints: int = wire(INT)
    scanned: int = wire(INT)
    last_clean: BisectPoint | None = wire(POINT)
    first_bad: BisectPoint | None = wire(POINT)
    first_bad_tensor: BadTensor | None = wire(record(BadTensor), sent=False)
    unreadable: tuple[str, ...] = wire(STRS)
    bad: tuple[str, ...] = wire(STRS)
    later_clean: tuple[str, ...] = wire(STRS)
    assumption: str | None = wire()
    ordered: tuple[BisectPoint, ...] = wire(POINTS, sent=False)

    @classmethod
    def from_dict(cls: type[R], rec: Mapping[str, Any] | None) -> R:
        """As :meth:`Record.from_dict`, ``first_bad``'s ``tensor`` read as
        ``first_bad_tensor`` (one that is none or empty: None)."""
        bad = rec.get("first_bad") if rec else None
        if isinstance(bad, Mapping) and "tensor" in bad:
            rec = dict(rec or {}, first_bad_tensor=bad["tensor"] or None)
        return super().from_dict(rec)


@dataclass(frozen=True)
class SampleCheckpoint(Record):
    """A sample checkpoint ``ckpt_samples.py`` made for the demo (the local side's
    ``Sample``): its name and path, the status a scan must give it, what is in it in words."""

    TYPE = "sample"
    #: Written there, not read here: the tensors a fault was planted in (the scan that the
    #: demo runs finds them itself).
    UNREAD = ("planted",)

    name: str
    path: str
    expect: str
    detail: str
