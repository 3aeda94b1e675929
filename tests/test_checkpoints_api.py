"""The checkpoint diagnostics through the engine, on the local target.

``scan_checkpoints`` and friends ship ``remote/ckpt.py`` with ``run_python``, parse its records
into frozen reports and give exit codes; the ``*_main`` task bodies print them. The same
corpus as tests/test_ckpt_script.py (tests/ckpt_factory.py), so the exact expectations are
shared; the sshd -> fake pct -> venv tests reuse them too.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit.diagnostics import checkpoints as ck
from remotekit.render import to_jsonable
from tests import ckpt_factory as cf


@pytest.fixture(scope="module")
def target() -> Iterator[remotekit.Target]:
    with remotekit.local_target() as t:
        yield t


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> cf.Corpus:
    return cf.build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def scan(target: remotekit.Target, corpus: cf.Corpus) -> dict[str, object]:
    """One scan of the whole corpus, with everything its callbacks saw."""
    seen: list[ck.CheckpointReport] = []
    progress: list[ck.ScanProgress] = []
    reports = ck.scan_checkpoints(
        target, str(corpus.root), on_report=seen.append, on_progress=progress.append
    )
    return {"reports": reports, "seen": seen, "progress": progress}


def test_scan_returns_sorted_frozen_reports_matching_the_corpus(
    scan: dict[str, object], corpus: cf.Corpus
) -> None:
    reports = scan["reports"]
    assert isinstance(reports, ck.CheckpointScan)
    assert [r.path for r in reports] == sorted(corpus.expect)
    for r in reports:
        assert cf.mismatches(corpus.expect[r.path], to_jsonable(r)) == [], r
    first = reports[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.status = "clean"  # type: ignore[misc]


def test_scan_verdicts_and_exit_code(scan: dict[str, object], corpus: cf.Corpus) -> None:
    reports = scan["reports"]
    assert isinstance(reports, ck.CheckpointScan)
    assert reports.exit_code == ck.scan_exit_code(reports) == 2
    assert len(reports.findings) == 7 and len(reports.errors) == 10
    nan = next(r for r in reports if r.path.endswith("nan_weights/checkpoint.pt"))
    assert (nan.ok, nan.exit_code, nan.nonfinite_weights, nan.nonfinite_optimizer) == (
        False,
        1,
        5,
        0,
    )
    assert any("nan_weights" in f and "2 NaN" in f for f in reports.findings)
    assert reports.plan is not None and reports.plan.files == len(corpus.expect)
    assert sorted(reports.plan.skipped) == sorted(corpus.skipped)
    unsafe = next(r for r in reports if r.path == str(corpus.unsafe))
    assert unsafe.needs_globals == ("argparse.Namespace",)


def test_scan_callbacks_see_every_report_and_progress_to_the_end(scan: dict[str, object]) -> None:
    seen = scan["seen"]
    progress = scan["progress"]
    assert isinstance(seen, list) and isinstance(progress, list)
    assert sorted(r.path for r in seen) == [r.path for r in scan["reports"]]  # type: ignore[attr-defined]
    last = progress[-1]
    assert last.files_done == last.files_total == len(seen)
    assert last.bytes_done == last.bytes_total > 0
    assert [p.files_done for p in progress] == sorted(p.files_done for p in progress)


def test_scan_of_nothing_raises_checkpoint_error_naming_the_path(
    target: remotekit.Target, tmp_path: Path
) -> None:
    with pytest.raises(ck.CheckpointError, match="no such file or directory") as info:
        ck.scan_checkpoints(target, str(tmp_path / "missing"))
    assert str(tmp_path / "missing") in str(info.value)
    assert info.value.result.exit_code == 2


def test_scan_main_prints_the_table_and_returns_the_exit_code(
    target: remotekit.Target, corpus: cf.Corpus
) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = ck.scan_main(target, str(corpus.root / "nan_weights"), out=out, err=err, progress=True)
    text = out.getvalue()
    assert code == 1
    assert "checkpoint.pt" in text and "bad" in text and "2/1/2" in text
    assert "model_state_dict.fc1.weight (weights, float32, 128 values): 2 NaN" in text
    assert "(exit 1)" in text
    bar = err.getvalue()
    assert "ckpt-scan [" in bar and "1/1 files" in bar and bar.endswith("\r\x1b[K")


def test_scan_main_json_and_unsafe_warning(target: remotekit.Target, corpus: cf.Corpus) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = ck.scan_main(
        target, str(corpus.unsafe), json_out=True, unsafe_pickle=True, out=out, err=err
    )
    doc = json.loads(out.getvalue())
    assert code == doc["exit_code"] == 0
    assert [c["status"] for c in doc["checkpoints"]] == ["clean"]
    assert "--unsafe-pickle" in err.getvalue() and "arbitrary code" in err.getvalue()


def test_scan_main_turns_errors_into_exit_2(target: remotekit.Target, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert ck.scan_main(target, str(tmp_path / "missing"), out=out, err=err) == 2
    assert "ckpt-scan: error:" in err.getvalue() and out.getvalue() == ""
    out = io.StringIO()
    assert ck.scan_main(target, str(tmp_path / "missing"), json_out=True, out=out, err=err) == 2
    assert "no such file" in json.loads(out.getvalue())["error"]


def test_allow_globals_reach_the_script(target: remotekit.Target, corpus: cf.Corpus) -> None:
    reports = ck.scan_checkpoints(target, str(corpus.unsafe), allow_globals=["argparse.Namespace"])
    assert [r.status for r in reports] == ["clean"] and reports.exit_code == 0


def test_inspect(target: remotekit.Target, corpus: cf.Corpus) -> None:
    report = ck.inspect_checkpoint(target, str(corpus.clean))
    assert (report.ok, report.exit_code, report.global_step, report.format) == (True, 0, 3, "torch")
    names = [t.name for t in report.tensors]
    assert names[:4] == [
        f"model_state_dict.{k}" for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    ]
    assert report.tensors[0].shape == (16, 8)
    (opt,) = report.optimizers
    assert [g.lr for g in opt.groups] == [1e-3, 5e-4]
    text = ck.render_inspect(report)
    assert "model_state_dict.fc1.weight" in text and "16x8" in text and "0.001" in text
    out = io.StringIO()
    assert ck.inspect_main(target, str(corpus.root / "bad/empty.pt"), out=out) == 2
    assert "empty file" in out.getvalue()


def test_diff(target: remotekit.Target, corpus: cf.Corpus) -> None:
    report = ck.diff_checkpoints(
        target, str(corpus.clean), str(corpus.root / "inf_optimizer/checkpoint.pt")
    )
    assert report.ok and report.step_delta == 2 and report.exit_code == 1
    assert report.lr_a == ((1e-3, 5e-4),)
    kinds = {(f.name, f.kind) for f in report.flags}
    assert ("optimizer_state_dict.state.0.exp_avg_sq", "nonfinite_exp_avg_sq") in kinds
    assert ("optimizer_state_dict.state.1.exp_avg_sq", "negative_exp_avg_sq") in kinds
    assert ("optimizer_state_dict.state.2.exp_avg", "new_nonfinite") in kinds
    assert report.top_weights and all(d.section == "weights" for d in report.top_weights)
    text = ck.render_diff(report)
    assert "step delta: +2" in text and "negative_exp_avg_sq" in text and "(exit 1)" in text


def test_bisect(target: remotekit.Target, tmp_path: Path) -> None:
    steps = [10, 20, 30, 40, 50]
    paths = cf.build_bisect_series(tmp_path, steps, {40, 50}, ["r1", "r2", "r3", "r4", "r5"])
    report = ck.bisect_checkpoints(target, str(tmp_path))
    assert report.exit_code == 1
    assert report.last_clean == ck.BisectPoint(str(paths[2]), 30, 0)
    assert report.first_bad is not None and report.first_bad.path == str(paths[3])
    assert report.first_bad_tensor is not None
    assert (report.first_bad_tensor.name, report.first_bad_tensor.section) == (
        "model_state_dict.fc2.weight",
        "weights",
    )
    assert [p.global_step for p in report.ordered] == steps
    out = io.StringIO()
    assert ck.bisect_main(target, str(tmp_path), out=out, progress=False) == 1
    assert "first bad:" in out.getvalue() and "<- last clean" in out.getvalue()


def test_demo_makes_samples_scans_them_and_agrees(target: remotekit.Target, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = ck.demo_main(target, str(tmp_path / "demo"), out=out, err=err, progress=False)
    text = out.getvalue()
    assert code == 0, text
    assert "5/5 samples as expected" in text
    assert "--allow-global argparse.Namespace" in text  # the unsafe sample says how to allow it


def test_the_local_half_does_not_import_torch() -> None:
    code = "import sys, remotekit.diagnostics.checkpoints; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
