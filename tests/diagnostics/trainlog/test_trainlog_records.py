"""train-log's records, declared once (remote/trainlog/records.py): what the script there
writes is what the classes declare, they read back what they write, and the local side's
public names are these very classes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

import remotekit.diagnostics.trainlog as trainlog
from remotekit.diagnostics.trainlog.api import build_report
from remotekit.diagnostics.trainlog.follow import FollowStatus
from remotekit.remote import protocol
from remotekit.remote.trainlog import records
from remotekit.remote.trainlog.records import RECORDS, Histogram, Series, Spike
from remotekit.render import to_json
from tests.harness import ROOT

SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"
BY_TYPE = {cls.TYPE: cls for cls in RECORDS}


def write_log(path: Path) -> Path:
    """A log with every record's reason: three bucket levels (a composition finding), two
    spikes, a checkpoint line; no torch needed."""
    rng = random.Random(1)
    levels = {1: 0.95, 3: 0.47, 5: 0.12}
    lines, bucket = [], 1
    for step in range(600):
        if rng.random() < 0.15:
            bucket = rng.choice(list(levels))
        loss = levels[bucket] + rng.gauss(0, 0.01) + (3.0 if step in (200, 330) else 0.0)
        row = {"step": step, "loss": round(loss, 5), "acc": round(1 - loss / 2, 4), "lr": 0.01}
        row.update(grad_norm=round(1 + rng.random(), 4), bucket=bucket, seq_len=8 * bucket)
        lines.append(json.dumps(row))
        if step == 200:
            lines.append("saving checkpoint step 200")
    path.write_text("\n".join(lines) + "\n")
    return path


def script(*args: Any) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120
    )
    out = [protocol.parse(line) for line in proc.stdout.splitlines()]
    assert all(r is not None for r in out), proc.stdout
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The records of one analysis (with a series), of one whose loss is NaN from its first
    value, and of one short follow."""
    log = write_log(tmp_path_factory.mktemp("records") / "log.jsonl")
    out = script(log, "--points", 100, "--ckpt-steps", "200,400")
    start = log.with_name("nan_start.jsonl")  # an onset record: the loss NaN from its start
    rows = [{"step": s, "loss": "NaN" if s < 5 else 2.0 - 0.01 * s} for s in range(40)]
    start.write_text("".join(json.dumps(r).replace('"NaN"', "NaN") + "\n" for r in rows))
    out += script(start)
    out += script(log, "--follow", "--duration", 1.5)
    out += script(log.with_name("later.jsonl"), "--follow", "--duration", 1.5)  # waits
    return out


def test_every_record_type_was_written(written: list[dict[str, Any]]) -> None:
    assert set(BY_TYPE) <= {r["type"] for r in written}


def test_the_script_writes_exactly_the_declared_fields(written: list[dict[str, Any]]) -> None:
    """Each key the far side writes is a field of its record class (none crosses
    undeclared), and each field without a default is written (the classes and the script
    cannot drift apart); fields the local side works out (``sent=False``) are never written."""
    for rec in written:
        cls = BY_TYPE.get(rec["type"])
        if cls is None:
            continue
        keys = set(rec) - {"type"}
        sent = {f.name for f in fields(cls) if f.metadata.get("sent", True)}
        required = {f.name for f in fields(cls) if f.name in sent and not _has_default(f)}
        assert keys <= sent, (rec["type"], keys - sent)
        assert required <= keys, (rec["type"], required - keys)


def _has_default(f: Any) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def test_what_is_read_is_written_back_the_same(written: list[dict[str, Any]]) -> None:
    for rec in written:
        cls = BY_TYPE.get(rec["type"])
        if cls is None:
            continue
        value = cls.from_dict(rec)
        assert cls.from_dict(value.to_dict()) == value, rec["type"]
        line = protocol.dumps({"type": cls.TYPE, **value.to_dict()})
        assert cls.from_dict(protocol.parse(line)) == value, rec["type"]


def test_a_record_of_a_script_that_failed_early_loads_as_before() -> None:
    """Missing fields: their defaults, else () for a tuple and None otherwise."""
    spike = Spike.from_dict({"type": "spike", "metric": "loss", "step": 3})
    assert (spike.metric, spike.step, spike.kind, spike.flagged) == ("loss", 3.0, None, None)
    assert (spike.at_event, spike.onset_step, spike.rule) == (False, None, None)
    assert records.Distribution.from_dict({}).modes == ()
    assert (
        records.LogSource.from_dict({}).why == {} and records.LogSource.from_dict({}).metrics == ()
    )
    assert Histogram.from_dict({}) == Histogram(None, None, None, (), {}, (), None, None)  # type: ignore[arg-type]
    assert Series.from_dict({"metric": "loss"}) == Series("loss", (), ())
    assert records.Periodicity.from_dict({}).stride == 1.0
    assert FollowStatus.from_dict({"state": "waiting"}).line() == "waiting: no rows yet"


def test_hostile_values_are_bounded() -> None:
    rec = {
        "metric": "loss",
        "kind": "spike",
        "step": "inf",
        "value": "1e999",
        "flagged": 10**40,
        "score": [1, 2],
        "run_position": "x",
    }
    s = Spike.from_dict(rec)
    assert s.step == float("inf") and s.value is None and s.score is None
    assert s.flagged == 10**40 and s.run_position == "x"  # as before: an int, text as it came
    h = Histogram.from_dict({"edges": "abc", "counts": {"a": ["nan", 2.5, "x"], "b": 7}})
    assert h.edges == () and h.counts == {"a": (0, 2, 0), "b": ()}
    comp = records.Composition.from_dict({"buckets": [5, {"bucket": "1", "batches": "9"}]})
    assert [(b.bucket, b.batches) for b in comp.buckets] == [(None, None), ("1", 0)]


def test_the_local_names_are_the_shared_classes() -> None:
    for cls in (*RECORDS, records.Mode, records.BucketStat):
        if cls is records.FollowState:
            assert issubclass(trainlog.FollowStatus, cls)
            continue
        assert getattr(trainlog, cls.__name__) is cls


def test_a_report_of_records_keeps_its_json(written: list[dict[str, Any]]) -> None:
    """The report's ``--json`` is the fields in their declared order (as before the move)."""
    analysis = written[: next(i for i, r in enumerate(written) if r["type"] == "done") + 1]
    rep = build_report("h", "/log", analysis)
    data = json.loads(to_json(rep))
    assert list(data["spikes"][0]) == [f.name for f in fields(Spike)]
    assert data["composition"]["buckets"] and data["histogram"]["counts"]
    assert data["spikes"][0]["at_event"] in (True, False)
