"""Rendering for people and for machines: plain tables, host-prefixed lines, JSON."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Sequence

__all__ = ["table", "to_json", "to_jsonable"]


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A left-aligned text table; ``None`` cells print as ``-``."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested), tuples and mappings as plain JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)  # "nan", "inf", "-inf": JSON has no literal for them
    return obj


def to_json(obj: Any, indent: int | None = None) -> str:
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, default=str)
