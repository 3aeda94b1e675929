"""train-log through the engine: the local target ships remote/trainlog.py and runs it with
our own interpreter; the local half returns frozen dataclasses, text, JSON and a picture. What
only the invoke task does (exit code, ``--json``, ``--plot`` without matplotlib):
tests/cli/test_cli_diagnostics.py."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import remotekit
import remotekit.diagnostics.trainlog as tl
from remotekit.render import to_json
from tests import trainlog_factory as factory

pytest.importorskip("torch")

SPIKES = (200, 330, 400)
CKPTS = (200, 400, 500)


@pytest.fixture(scope="module")
def target() -> remotekit.Target:
    return remotekit.local_target()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("trainlogs-api")
    return {
        "homogeneous": factory.write_jsonl(
            factory.cached("homogeneous", 600, SPIKES), d / "homo.jsonl", checkpoints=CKPTS
        ),
        "mixed": factory.write_jsonl(
            factory.cached("mixed", 600, (), 30), d / "mixed.jsonl", checkpoints=CKPTS
        ),
    }


@pytest.fixture(scope="module")
def report(target: remotekit.Target, logs: dict[str, Path]) -> tl.TrainLogReport:
    return tl.analyze_train_log(target, str(logs["homogeneous"]), points=400)


def test_report_is_values(report: tl.TrainLogReport) -> None:
    assert report.host == "local" and report.exit_code == 1 and not report.ok
    assert isinstance(report.source, tl.LogSource) and report.source.rows == 600
    assert report.preset is not None and report.preset.name == "trend"
    assert all(isinstance(s, tl.Spike) for s in report.spikes)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.exit_code = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.spikes[0].step = 1  # type: ignore[misc]
    assert set(report.findings) == {"spikes", "cliffs", "batch-composition"}


def test_report_leads_to_the_batches(report: tl.TrainLogReport) -> None:
    loss = {int(s.onset_step or s.step): s for s in report.spikes if s.metric == "loss"}
    assert set(loss) == set(SPIKES)
    assert loss[200].at_event and loss[400].at_event and not loss[330].at_event
    ck = next(c for c in report.correlations if c.kind == "checkpoint")
    assert ck.beyond_chance and (ck.at_events, ck.spikes) == (2, 3)
    comp = report.composition
    assert comp is not None and comp.finding and comp.key == "bucket"
    assert comp.buckets[0].bucket == "5"
    assert report.distribution is not None and len(report.distribution.modes) >= 2
    said = " ".join(report.diagnosis)
    assert "2 of 3 sit at checkpoint saves" in said
    assert re.search(r"1 at no event: step 33[01]\b", said)  # the peak's own step
    assert "interleave buckets" in said
    assert "no warmup" in said


def test_series_and_histogram_come_back_small(report: tl.TrainLogReport) -> None:
    loss = report.series_for("loss")
    assert loss is not None and 100 < len(loss.steps) <= 420
    assert report.histogram is not None and set(report.histogram.counts) == {"1", "3", "5"}
    peaks = {s.peak_step: s.value for s in report.spikes if s.metric == "loss"}
    got = dict(zip(loss.steps, loss.values))
    assert all(got[k] == pytest.approx(v) for k, v in peaks.items())


def test_clean_log_is_ok(target: remotekit.Target, logs: dict[str, Path]) -> None:
    rep = tl.analyze_train_log(target, str(logs["mixed"]), ckpt_steps=[100], timeout=60)
    assert rep.exit_code == 0 and rep.ok and rep.spikes == ()
    assert rep.composition is not None and not rep.composition.finding
    assert rep.diagnosis == ("no spikes, cliffs or signs of homogeneous batches.",)
    assert any(e.kind == "checkpoint" and e.source == "ckpt-steps" for e in rep.events)


def test_records_arrive_live(target: remotekit.Target, logs: dict[str, Path]) -> None:
    seen: list[str] = []
    tl.analyze_train_log(target, str(logs["mixed"]), on_record=lambda r: seen.append(r["type"]))
    assert seen[0] == "source" and seen[-1] == "done"


def test_missing_log_is_exit_2_not_an_exception(target: remotekit.Target, tmp_path: Path) -> None:
    rep = tl.analyze_train_log(target, str(tmp_path / "nope.jsonl"))
    assert rep.exit_code == 2 and rep.source is None
    assert "cannot read" in rep.errors[0]


def test_unknown_preset(target: remotekit.Target, logs: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=r"unknown preset.*olmo-core"):
        tl.analyze_train_log(target, str(logs["mixed"]), preset="olmo3")


def test_render_report(target: remotekit.Target, logs: dict[str, Path]) -> None:
    rep = tl.analyze_train_log(target, str(logs["homogeneous"]), steps_per_epoch=150)
    text = tl.render_report(rep)
    assert rep.exit_code == 1
    assert "Verdict: loss is " in text and "interleave buckets" in text
    assert re.search(r"none within ±5 \(nearest: epoch 300, 3[01] steps after\)", text)
    assert "checkpoint 200 (+0)" in text
    assert "2 of 3" in text and "more than chance" in text
    assert text.rstrip().endswith("exit 1 (findings: spikes, cliffs, batch-composition)")


def test_report_json(target: remotekit.Target, logs: dict[str, Path]) -> None:
    rep = tl.analyze_train_log(target, str(logs["homogeneous"]), metrics="loss,acc")
    doc = json.loads(to_json(rep, indent=2))
    assert rep.exit_code == doc["exit_code"] == 1
    assert doc["source"]["metrics"] == ["loss", "acc"]
    assert doc["composition"]["finding"] is True
    assert doc["series"] == []  # only a plot asks for the series


def test_plot(target: remotekit.Target, logs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    rep = tl.analyze_train_log(target, str(logs["homogeneous"]), points=2000)
    assert rep.exit_code == 1
    assert tl.plot_report(rep, str(png)) == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_raises_import_error(
    target: remotekit.Target,
    logs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rep = tl.analyze_train_log(target, str(logs["homogeneous"]), points=2000)
    png = tmp_path / "run.png"
    with pytest.raises(ImportError):
        tl.plot_report(rep, str(png))
    assert rep.exit_code == 1 and "Verdict:" in tl.render_report(rep)
    assert not png.exists()


def test_render_handles_a_failed_report() -> None:
    rep = tl.TrainLogReport(host="h", path="/x", errors=("boom",), exit_code=2)
    text = tl.render_report(rep)
    assert "error: boom" in text and text.endswith("exit 2 (could not run)")


def test_build_report_from_records_ignores_unknown_fields() -> None:
    recs: list[dict[str, Any]] = [
        {"type": "event", "kind": "resume", "step": 5, "source": "steps", "detail": "d", "new": 1},
        {"type": "summary", "rows": 10, "spikes": 0, "findings": []},
        {"type": "done", "command": "train-log", "exit_code": 0},
    ]
    rep = tl.build_report("h", "/x", recs)
    assert rep.events == (tl.Event("resume", 5, "steps", "d"),) and rep.exit_code == 0
    truncated = tl.build_report("h", "/x", recs[:1])
    assert truncated.exit_code == 2 and "before its final record" in truncated.errors[0]
