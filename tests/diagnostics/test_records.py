"""remote/records.py: the record base both sides import (frozen dataclasses that say, field
by field, how a loose wire value becomes the field's value)."""

from __future__ import annotations

import glob
import math
import os
import shutil
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass

import pytest

from remotekit.remote import protocol
from remotekit.remote.records import (
    DICT,
    FLOAT,
    FLOATS,
    INT,
    NUMBER,
    STRS,
    Record,
    record,
    records,
    wire,
)
from tests.harness import ROOT


@dataclass(frozen=True)
class Inner(Record):
    name: str
    size: int = wire(INT, default=0)


@dataclass(frozen=True)
class Outer(Record):
    TYPE = "outer"

    path: str
    loss: float | None = wire(FLOAT)
    step: int | float | None = wire(NUMBER)
    tags: tuple[str, ...] = wire(STRS)
    inner: tuple[Inner, ...] = wire(records(Inner))
    count: int = wire(INT, default=0)
    best: Inner | None = wire(record(Inner), default=None)
    shape: tuple[int, ...] = wire(default=())
    points: tuple[float, ...] = wire(FLOATS, default=())
    extra: dict[str, int] = wire(DICT, factory=dict)
    flag: bool = wire(default=False, sent=False)


FULL = Outer(
    "/a",
    0.5,
    2000,
    ("x", "1"),
    (Inner("w", 4), Inner("b", 0)),
    3,
    Inner("w", 4),
    (2, 3),
    (1.0, 2.5),
    {"k": 1},
    True,
)


def test_each_field_is_read_by_its_kind() -> None:
    rec = {
        "type": "outer",
        "path": "/a",
        "loss": "nan",
        "step": 2000,
        "count": 3.9,
        "tags": ["x", 1],
        "inner": [{"name": "w", "size": 4}, {"name": "b"}],
        "best": {"name": "w", "size": "4"},
        "shape": [2, [3]],
        "points": [1, "inf", "bad"],
        "unknown": "ignored",
    }
    out = Outer.from_dict(rec)
    assert out.loss is not None and math.isnan(out.loss)
    assert (out.step, out.count, out.tags, out.shape) == (2000, 3, ("x", "1"), (2, (3,)))
    assert out.inner == (Inner("w", 4), Inner("b", 0))
    assert out.best == Inner("w", 0)  # "4" is no number: an int field takes 0
    assert out.points[:2] == (1.0, math.inf) and math.isnan(out.points[2])
    assert out.extra == {} and out.flag is False


def test_a_record_of_a_script_that_failed_early_loads() -> None:
    """Missing (or null) fields take their default, else their kind's empty value: () for
    a tuple, None otherwise; so does a record that is not there at all."""
    assert Outer.from_dict({"path": "/b", "count": None}) == Outer(
        "/b", None, None, (), (), 0, None, (), (), {}, False
    )
    assert Outer.from_dict(None) == Outer.from_dict({}) == Outer.from_dict({"type": "outer"})
    assert Outer.from_dict({}).path is None


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        (INT, "1e999", 0),
        (INT, math.inf, 0),
        (INT, "nan", 0),
        (INT, True, 0),
        (INT, [1], 0),
        (INT, -7.9, -7),
        (INT, 10**30, 10**30),
        (FLOAT, "abc", None),
        (FLOAT, {"a": 1}, None),
        (FLOAT, False, None),
        (FLOAT, "-inf", -math.inf),
        (FLOAT, 3, 3.0),
        (NUMBER, 3, 3),
        (NUMBER, "x", None),
        (STRS, "abc", ()),
        (STRS, 5, ()),
        (STRS, [1, None], ("1", "None")),
        (FLOATS, "abc", ()),
        (FLOATS, {"a": 1}, ()),
        (FLOATS, 7, ()),
        (DICT, [1, 2], {}),
        (DICT, "ab", {}),
        (DICT, {"a": 1}, {"a": 1}),
        (records(Inner), "abc", ()),
        (records(Inner), [1, {"name": "n"}], (Inner(None, 0), Inner("n", 0))),  # type: ignore[arg-type]
        (record(Inner), [1], None),
        (record(Inner), "x", None),
    ],
)
def test_a_hostile_value_becomes_what_its_kind_says(
    kind: object, value: object, expected: object
) -> None:
    assert kind.parse(value) == expected  # type: ignore[attr-defined]


def test_to_dict_is_the_wire_form_and_from_dict_reads_it_back() -> None:
    d = FULL.to_dict()
    assert list(d) == [
        "path", "loss", "step", "tags", "inner", "count", "best", "shape", "points", "extra",
        "flag",
    ]  # fmt: skip
    assert d["inner"] == [{"name": "w", "size": 4}, {"name": "b", "size": 0}]
    assert d["tags"] == ["x", "1"] and d["shape"] == [2, 3]
    assert Outer.from_dict(d) == FULL
    line = protocol.dumps({"type": Outer.TYPE, **d})
    back = protocol.parse(line)
    assert back is not None and Outer.from_dict(back) == FULL


def test_non_finite_floats_travel_as_the_protocols_strings() -> None:
    x = Outer("/n", math.inf, -math.inf, (), (), points=(math.nan, 1.0))
    d = x.to_dict()
    assert (d["loss"], d["step"], d["points"]) == ("inf", "-inf", ["nan", 1.0])
    y = Outer.from_dict(protocol.parse(protocol.dumps({"type": "outer", **d})))
    assert (y.loss, y.step) == (math.inf, -math.inf) and math.isnan(y.points[0])


def test_records_are_frozen_values() -> None:
    with pytest.raises(FrozenInstanceError):
        FULL.path = "/x"  # type: ignore[misc]
    assert hash(Inner("a", 1)) == hash(Inner.from_dict({"name": "a", "size": 1}))


def test_only_the_standard_library_and_python_3_8() -> None:
    import ast

    tree = ast.parse(
        (ROOT / "remotekit" / "remote" / "records.py").read_text(), feature_version=(3, 8)
    )
    mods = {
        n.module or "" if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    # relative imports (".protocol") are the package's own; "typing" only for the checker
    assert {m.split(".")[0] for m in mods if m} <= set(sys.stdlib_module_names) | {"protocol"}


def python38() -> str:
    found = [os.environ.get("REMOTEKIT_PYTHON38", ""), shutil.which("python3.8") or ""]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    usable = [p for p in found if p and ".pyenv/shims" not in p and os.access(p, os.X_OK)]
    if not usable:
        pytest.skip("no python3.8 here (set REMOTEKIT_PYTHON38 to one)")
    return usable[0]


def test_records_round_trip_on_python_3_8() -> None:
    """The shared record classes load and round-trip on the oldest Python the far side runs."""
    code = (
        "import json, os, sys; "
        "pkg = sys.modules.setdefault('remotekit', type(sys)('remotekit')); "
        "pkg.__path__ = [sys.argv[1]]; "
        "from remotekit.remote.trainlog import records as r; "
        "s = r.Spike.from_dict({'metric': 'loss', 'kind': 'spike', 'step': 'inf', 'flagged': 2}); "
        "d = r.Distribution.from_dict({'metric': 'loss', 'modes': [{'center': 1}]}); "
        "assert r.Spike.from_dict(s.to_dict()) == s and r.Distribution.from_dict(d.to_dict()) == d; "
        "print(json.dumps([s.to_dict(), d.to_dict()]))"
    )
    argv = ["-S", "-c", code, str(ROOT / "remotekit")]
    old = subprocess.run([python38(), *argv], capture_output=True, text=True, check=True)
    new = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
    assert old.stdout == new.stdout and '"step": "inf"' in old.stdout
