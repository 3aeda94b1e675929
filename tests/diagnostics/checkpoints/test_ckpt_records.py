"""The checkpoint diagnostics' records, declared once (remote/ckpt/records.py): what
``ckpt.py`` writes is what the classes declare, they read back what they write, and the
local side's names are these very classes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

import pytest

import remotekit.diagnostics.checkpoints as checkpoints
from remotekit.remote.ckpt import records as R
from remotekit.remote.records import Record
from remotekit.render import to_jsonable
from tests.harness import ROOT

torch = pytest.importorskip("torch")

SCRIPT = ROOT / "remotekit" / "remote" / "ckpt.py"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three saves of a model with its Adam state; the last has a NaN weight."""
    d = tmp_path_factory.mktemp("ckpt-records") / "run"
    d.mkdir()
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    for step in (100, 200, 300):
        sd = {k: v.clone() for k, v in model.state_dict().items()}
        if step == 300:
            sd["weight"][0, 0] = float("nan")
        save = {"model": sd, "optimizer": opt.state_dict(), "step": step, "epoch": 1}
        torch.save(save, d / f"ckpt-{step}.pt")
    return d


def script(*args: Any, path: Path = SCRIPT) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(path), *map(str, args)], capture_output=True, text=True, timeout=300
    )
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def written(run_dir: Path) -> list[tuple[type[Record], dict[str, Any]]]:
    """Each record (and nested record) the four commands write, with its class."""
    out: list[tuple[type[Record], dict[str, Any]]] = []
    for rec in script("scan", run_dir):
        if rec["type"] == "checkpoint":
            out.append((R.Checkpoint, rec))
            out += [(R.BadTensor, b) for b in rec["bad_tensors"]]
        elif rec["type"] == "plan":
            out.append((R.ScanPlan, rec))
    for rec in script("inspect", run_dir / "ckpt-100.pt"):
        if rec["type"] == "tensor":
            out.append((R.TensorInfo, rec))
        elif rec["type"] == "inspect":
            out.append((R.Inspect, rec))
            for o in rec["optimizers"]:
                out += [(R.OptimizerInfo, o)] + [(R.ParamGroup, g) for g in o["groups"]]
    for rec in script("diff", run_dir / "ckpt-100.pt", run_dir / "ckpt-300.pt"):
        if rec["type"] == "diff":
            out.append((R.Diff, rec))
            out += [(R.TensorDiff, d) for d in rec["top_weights"] + rec["top_optimizer"]]
            out += [(R.DiffFlag, f) for f in rec["flags"]]
            out += [(R.TensorChange, c) for c in rec["changes"]]
            for part in (rec["counters"], rec["other"]):
                out += [(R.NonWeightDiff, part)]
                out += [(R.NonWeightChange, c) for c in part["by_name"]]
    for rec in script("diff", run_dir / "ckpt-100.pt", run_dir / "gone.pt"):  # fails early
        if rec["type"] == "diff":
            out.append((R.Diff, rec))
    for rec in script("bisect", run_dir):
        if rec["type"] == "bisect":
            out.append((R.Bisect, rec))
            out += [(R.BisectPoint, rec["last_clean"]), (R.BisectPoint, rec["first_bad"])]
            out.append((R.BadTensor, rec["first_bad"]["tensor"]))
        elif rec["type"] == "order":
            out.append((R.BisectOrder, rec))
            out += [(R.BisectPoint, c) for c in rec["checkpoints"]]
    samples = SCRIPT.with_name("ckpt_samples.py")
    for rec in script(run_dir.with_name("samples"), "--steps", 2, path=samples):
        if rec["type"] == "sample":
            out.append((R.SampleCheckpoint, rec))
    return out


def test_every_class_is_written(written: list[tuple[type[Record], dict[str, Any]]]) -> None:
    found = {cls for cls, _ in written}
    expected = {R.Checkpoint, R.BadTensor, R.ScanPlan, R.TensorInfo, R.OptimizerInfo}
    expected |= {R.ParamGroup, R.TensorDiff, R.DiffFlag, R.NonWeightDiff, R.NonWeightChange}
    expected |= {R.SampleCheckpoint, R.Inspect, R.Diff, R.Bisect, R.BisectOrder, R.BisectPoint}
    assert expected <= found, expected - found


def test_the_script_writes_exactly_the_declared_fields(
    written: list[tuple[type[Record], dict[str, Any]]],
) -> None:
    """Every key written is a field (or named in the class's UNREAD, with its reason), and
    every field without a default is written; a field the local side fills in
    (``sent=False``: inspect's tensors, gathered from the tensor records) never is."""
    for cls, rec in written:
        declared = {f.name for f in fields(cls) if f.metadata.get("sent", True)}  # type: ignore[arg-type]
        required = {
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.name in declared and f.default is MISSING and f.default_factory is MISSING
        }
        keys = set(rec) - {"type"}
        assert keys - set(cls.UNREAD) <= declared, (cls.__name__, keys - declared)
        assert required <= keys, (cls.__name__, required - keys)


def test_what_is_read_is_written_back_the_same(
    written: list[tuple[type[Record], dict[str, Any]]],
) -> None:
    for cls, rec in written:
        value = cls.from_dict(rec)
        back = cls.from_dict(value.to_dict())
        if back != value:  # a NaN (rel_change) is not equal to itself: as its wire form
            assert back.to_dict() == value.to_dict(), cls.__name__


def test_what_diff_and_bisect_write_reads_as_their_reports(
    written: list[tuple[type[Record], dict[str, Any]]],
) -> None:
    """The nested sections of the wire land on the report's own fields (``rel_change`` on
    ``rel_change_*``, ``first_bad``'s tensor on ``first_bad_tensor``), and the reports keep
    their fields, so ``--json``'s keys, in their order."""
    diff = next(rec for cls, rec in written if cls is R.Diff and rec["ok"])
    d = checkpoints.DiffReport.from_dict(diff)
    assert (d.rel_change_weights, d.rel_change_optimizer) == (
        diff["rel_change"]["weights"],
        diff["rel_change"]["optimizer"],
    )
    assert d.lr_a == tuple(map(tuple, diff["lr_a"])) and d.counters is not None
    assert list(to_jsonable(d)) == [
        *("a", "b", "ok", "error", "format_a", "format_b", "step_a", "step_b", "step_delta"),
        *("epoch_a", "epoch_b", "lr_a", "lr_b", "tensors_a", "tensors_b", "compared"),
        *("identical", "only_a", "only_b", "only_a_total", "only_b_total", "changes"),
        *("changes_total", "top_weights", "top_optimizer", "flags", "flags_total"),
        *("rel_change_weights", "rel_change_optimizer", "counters", "other"),
        *("needs_globals", "notes"),
    ]
    bisect = next(rec for cls, rec in written if cls is R.Bisect)
    order = next(rec for cls, rec in written if cls is R.BisectOrder)
    b = replace(
        checkpoints.BisectReport.from_dict(bisect),
        ordered=R.BisectOrder.from_dict(order).checkpoints,
        reports=(),
    )
    assert b.first_bad == R.BisectPoint.from_dict(bisect["first_bad"])
    assert b.first_bad_tensor == R.BadTensor.from_dict(bisect["first_bad"]["tensor"])
    assert [p.global_step for p in b.ordered] == [100, 200, 300]
    assert list(to_jsonable(b)) == [
        *("directory", "order", "mode", "checkpoints", "scanned", "last_clean", "first_bad"),
        *("first_bad_tensor", "unreadable", "bad", "later_clean", "assumption", "ordered"),
        "reports",
    ]
    assert list(to_jsonable(b.first_bad)) == ["path", "global_step", "epoch"]


def test_a_record_of_a_script_that_failed_early_loads_as_before() -> None:
    c = R.Checkpoint.from_dict({"path": "/c.pt"})
    assert (c.status, c.bad_tensors, c.scalars, c.params, c.max_abs_weights) == (
        "error",
        (),
        {},
        0,
        None,
    )
    assert R.BadTensor.from_dict({"name": "w"}).shared_with == ()
    assert R.TensorInfo.from_dict({}).shape == ()
    assert R.OptimizerInfo.from_dict({}).path == ""
    d = R.TensorDiff.from_dict({"name": "w"})
    assert d.rel_change != d.rel_change and d.max_abs_diff == 0.0
    diff = R.Diff.from_dict({"a": "/a", "b": "/b", "ok": False, "error": "B: gone"})
    assert diff == R.Diff("/a", "/b", False, "B: gone")
    assert (diff.lr_a, diff.only_a, diff.counters, diff.rel_change_weights) == ((), (), None, None)
    b = R.Bisect.from_dict({"directory": "/d"})
    assert (b.order, b.checkpoints, b.last_clean, b.first_bad, b.first_bad_tensor) == ((None,) * 5)
    assert (b.unreadable, b.bad, b.later_clean, b.ordered, b.assumption) == ((),) * 4 + (None,)
    assert R.BisectOrder.from_dict(None).checkpoints == ()


def test_a_diff_and_a_bisect_record_read_as_before() -> None:
    """As from_record's given values read them: lr per group with None for no number, no
    rel_change section for one that is missing, a point only from a non-empty mapping."""
    d = R.Diff.from_dict(
        {"lr_a": [[1e-3, "nan", None]], "rel_change": {"weights": "inf"}, "counters": {}}
    )
    assert d.lr_a[0][0] == 1e-3 and d.lr_a[0][1] != d.lr_a[0][1] and d.lr_a[0][2] is None
    assert (d.rel_change_weights, d.rel_change_optimizer) == (float("inf"), None)
    assert d.counters == R.NonWeightDiff(None, None)  # type: ignore[arg-type]
    b = R.Bisect.from_dict({"first_bad": {}, "last_clean": {"path": "/c", "global_step": 5}})
    assert (b.first_bad, b.last_clean) == (None, R.BisectPoint("/c", 5))
    b = R.Bisect.from_dict({"first_bad": {"path": "/c", "tensor": None}})
    assert b.first_bad == R.BisectPoint("/c", None) and b.first_bad_tensor is None
    o = R.BisectOrder.from_dict({"checkpoints": [{}, 7, {"path": "/c", "global_step": 1}]})
    assert o.checkpoints == (R.BisectPoint("/c", 1),)


def test_an_inspect_record_reads_as_before() -> None:
    """Missing: no flag, no bytes, metadata not known; counts made whole, totals dicts
    (where from_record's given values raised on a float NaN or a section that is no mapping)."""
    i = R.Inspect.from_dict({"path": "/c.pt"})
    assert (i.ok, i.bytes, i.metadata, i.scalars, i.dtypes, i.tensors) == (
        False,
        0,
        None,
        {},
        {},
        (),
    )
    i = R.Inspect.from_dict({"dtypes": {"f32": float("nan"), 1: 2.0}, "totals": {"w": 1}})
    assert (i.dtypes, i.totals) == ({"f32": 0, "1": 2}, {"w": {}})


def test_hostile_values_are_bounded() -> None:
    b = R.BadTensor.from_dict({"name": "w", "nan": "1e999", "first_index": "x", "numel": True})
    assert (b.nan, b.first_index, b.numel) == (0, None, 0)
    c = R.Checkpoint.from_dict({"path": 1, "status": "", "scalars": [1], "bad_tensors": "abc"})
    assert (c.status, c.scalars, c.bad_tensors) == ("error", {}, ())
    n = R.NonWeightDiff.from_dict({"compared": 2, "changed": 1, "by_name": [7]})
    assert n.by_name == (R.NonWeightChange(None, None, None, None),)  # type: ignore[arg-type]
    # where from_record's given values raised (a group, a nested record or a rel_change that
    # is no mapping or list) or read a text as one name per character
    d = R.Diff.from_dict(
        {"lr_a": [5], "changes": [7], "rel_change": "x", "only_a": "ab", "notes": 3}
    )
    assert (d.lr_a, d.rel_change_weights, d.only_a, d.notes) == (((),), None, (), ())
    assert d.changes == (R.TensorChange(None, (), (), None, None),)  # type: ignore[arg-type]
    b = R.Bisect.from_dict({"first_bad": "abc", "unreadable": "ab"})
    assert (b.first_bad, b.first_bad_tensor, b.unreadable) == (None, None, ())
    b = R.Bisect.from_dict({"first_bad": {"path": "/c", "tensor": "x"}})
    assert b.first_bad == R.BisectPoint("/c", None) and b.first_bad_tensor is None


def test_the_local_names_are_the_shared_classes() -> None:
    for name in R.__all__:
        if name == "Checkpoint":
            assert issubclass(checkpoints.CheckpointReport, R.Checkpoint)
        elif name == "SampleCheckpoint":
            assert issubclass(checkpoints.Sample, R.SampleCheckpoint)
        elif name == "Inspect":
            assert issubclass(checkpoints.InspectReport, R.Inspect)
        elif name == "Diff":
            assert issubclass(checkpoints.DiffReport, R.Diff)
        elif name == "Bisect":
            assert issubclass(checkpoints.BisectReport, R.Bisect)
        elif hasattr(checkpoints, name):
            assert getattr(checkpoints, name) is getattr(R, name), name
    assert checkpoints.NonWeightChange("step", "counter", 6, 6, 200, 200).describe() == (
        "step +200 x6"
    )
