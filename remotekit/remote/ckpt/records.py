"""The checkpoint diagnostics' records, declared once: what ``ckpt.py`` writes there and the
local side (:mod:`remotekit.diagnostics.checkpoints`) reads back, as frozen dataclasses on
:class:`~remotekit.remote.records.Record` (``from_dict`` / ``to_dict``; each field's kind
says how its wire value is read).

The records of one checkpoint and its tensors (``checkpoint``, ``tensor``, ``plan``), and
those nested in the ``inspect``, ``diff`` and ``bisect`` records; the reports that hold
them (with their text) are the local side's.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

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
    records,
    whole,
    wire,
)

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping

__all__ = [
    "BadTensor",
    "BisectPoint",
    "Checkpoint",
    "DiffFlag",
    "Inspect",
    "LogFile",
    "NonWeightChange",
    "NonWeightDiff",
    "OptimizerInfo",
    "ParamGroup",
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
class BisectPoint(Record):
    """A checkpoint in the bisect's order: its path, global step and epoch."""

    path: str = wire(TEXT)
    global_step: int | float | None = wire(NUMBER)
    epoch: int | float | None = wire(NUMBER, default=None)


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
