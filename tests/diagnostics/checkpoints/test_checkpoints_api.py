"""The checkpoint diagnostics through the engine, on the local target.

``scan_checkpoints`` and friends ship ``remote/ckpt.py`` with ``run_python``, parse its records
into frozen reports and give exit codes; the ``render_*`` functions turn them into text (the
invoke tasks that print them: tests/cli/test_cli_diagnostics.py). The same corpus as
tests/diagnostics/checkpoints/test_ckpt_script.py (tests/ckpt_factory.py), so the exact expectations are shared; the
sshd -> fake pct -> venv tests reuse them too.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit.diagnostics import checkpoints as ck
from remotekit.diagnostics import diagnose as dg
from remotekit.render import to_json, to_jsonable
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


def test_render_scan_and_its_progress_line(target: remotekit.Target, corpus: cf.Corpus) -> None:
    progress: list[ck.ScanProgress] = []
    reports = ck.scan_checkpoints(
        target, str(corpus.root / "nan_weights"), on_progress=progress.append
    )
    text = ck.render_scan(reports, plan=reports.plan)
    assert reports.exit_code == 1
    assert "checkpoint.pt" in text and "bad" in text and "2/1/2" in text
    assert "model_state_dict.fc1.weight (weights, float32, 128 values): 2 NaN" in text
    assert "(exit 1)" in text
    line = ck.progress_line(progress[-1])
    assert line.startswith(f"[{'#' * ck.BAR_WIDTH}] 1/1 files  ")
    assert line.endswith("  nan_weights/checkpoint.pt")
    assert "\x1b" not in line and "\r" not in line  # the Console draws and clears it


def test_progress_line_before_the_first_file_and_for_a_long_name() -> None:
    start = ck.progress_line(ck.ScanProgress(0, 3, 0, 0))
    assert start == f"[{'.' * ck.BAR_WIDTH}] 0/3 files  0 B/0 B"
    half = ck.progress_line(ck.ScanProgress(1, 3, 3 << 20, 6 << 20, "/ckpt/step_1/model.pt"))
    assert half == f"[{'#' * 12}{'.' * 12}] 1/3 files  3.0 MiB/6.0 MiB  step_1/model.pt"
    long = ck.progress_line(ck.ScanProgress(1, 3, 1, 2, "/ckpt/" + "x" * 300 + "/model.pt"))
    assert len(long) == ck.PROGRESS_MAX


def test_scan_json_and_unsafe_warning(target: remotekit.Target, corpus: cf.Corpus) -> None:
    warnings: list[str] = []
    reports = ck.scan_checkpoints(
        target, str(corpus.unsafe), unsafe_pickle=True, on_warning=warnings.append
    )
    doc = json.loads(to_json(reports, indent=2))
    assert reports.exit_code == doc["exit_code"] == 0
    assert [c["status"] for c in doc["checkpoints"]] == ["clean"]
    assert reports.warnings == tuple(warnings) == tuple(doc["warnings"])
    assert doc["plan"]["files"] == 1
    assert "--unsafe-pickle" in warnings[0] and "arbitrary code" in warnings[0]


def test_with_the_agent_the_scan_imports_torch_once(tmp_path: Path) -> None:
    """With the agent, the scan is forked from its warm process (torch imported) and checks
    in a fork of itself: the file is read by a process whose argv is the scan's own, not by
    a new ``ckpt.py _worker`` interpreter importing torch a second time."""
    marker = tmp_path / "argv.json"  # the file writes its reader's argv
    cf.write_argv_recorder(tmp_path / "checkpoint.pt", marker)
    warned: list[str] = []
    with remotekit.local_target(agent=True) as t:
        reports = ck.scan_checkpoints(
            t, str(tmp_path), unsafe_pickle=True, on_warning=warned.append
        )
    assert [r.status for r in reports] == ["clean"] and "--unsafe-pickle" in warned[0]
    assert json.loads(marker.read_text())[1:3] == ["scan", str(tmp_path)]


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
    empty = ck.inspect_checkpoint(target, str(corpus.root / "bad/empty.pt"))
    assert empty.exit_code == 2
    assert "empty file" in ck.render_inspect(empty)


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


def test_diff_of_a_path_that_never_existed_says_so(
    target: remotekit.Target, corpus: cf.Corpus, tmp_path: Path
) -> None:
    """A typo'd path is "no such file or directory", not "removed while scanning"; a
    dangling symlink is named as one."""
    gone = tmp_path / "no-such-ckpt.pt"
    report = ck.diff_checkpoints(target, str(corpus.clean), str(gone))
    assert not report.ok and report.exit_code == 2
    assert report.error == f"B ({gone}): no such file or directory", report.error
    link = tmp_path / "link.pt"
    link.symlink_to(gone)
    report = ck.diff_checkpoints(target, str(link), str(corpus.clean))
    assert report.error == f"A ({link}): a dangling symlink (to {str(gone)!r})", report.error


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
    text = ck.render_bisect(report)
    assert "first bad:" in text and "<- last clean" in text


def test_demo_makes_samples_scans_them_and_agrees(target: remotekit.Target, tmp_path: Path) -> None:
    progress: list[ck.ScanProgress] = []
    report = ck.run_demo(target, str(tmp_path / "demo"), on_progress=progress.append)
    text = ck.render_demo(report)
    assert report.exit_code == 0, text
    assert report.mismatches == report.findings == ()
    assert "5/5 samples as expected" in text
    assert "--allow-global argparse.Namespace" in text  # the unsafe sample says how to allow it
    assert [s.expect for s in report.samples] == ["clean", "bad", "bad", "error", "error"]
    assert report.scan.exit_code == 2  # the unreadable samples: the demo's verdict is its own
    assert progress[-1].files_done == progress[-1].files_total == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.mismatches = ("x",)  # type: ignore[misc]
    doc = json.loads(to_json(report, indent=2))
    assert doc["directory"] == str(tmp_path / "demo") and doc["mismatches"] == []
    assert [s["name"] for s in doc["samples"]] == [s.name for s in report.samples]
    assert [c["status"] for c in doc["scan"]["checkpoints"]] == [r.status for r in report.scan]


def test_demo_report_when_the_scan_disagrees(scan: dict[str, object]) -> None:
    reports = scan["reports"]
    assert isinstance(reports, ck.CheckpointScan)
    sample = ck.Sample("nan", reports[0].path, "bad", "2 NaN in weights")
    report = ck.DemoReport(
        "h", "/d", (sample,), reports, (f"nan: expected bad, scan says {reports[0].status}",)
    )
    assert report.exit_code == 1 and report.findings == report.mismatches
    text = ck.render_demo(report)
    assert "demo: the scan disagrees with what was planted (exit 1):" in text
    assert text.endswith(f"  nan: expected bad, scan says {reports[0].status}")
    assert ck.DemoReport("h", "/d", (), reports, ()).exit_code == 1  # nothing planted


def test_diagnose_shows_the_scan_table(scan: dict[str, object]) -> None:
    reports = scan["reports"]
    assert isinstance(reports, ck.CheckpointScan)
    section = dg.Section("ckpt-scan", "failed", 2, reports.findings, "2 unreadable", 1.5, reports)
    text = dg.render_section(section)
    assert text == "== ckpt-scan: failed (1.5 s)\n" + ck.render_scan(reports, plan=reports.plan)


def test_the_local_half_does_not_import_torch() -> None:
    code = "import sys, remotekit.diagnostics.checkpoints; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# ------------------------------------------------------------------ non-weights (other)


def test_diff_of_a_counters_only_pair_reads_unchanged_with_the_counters_apart(
    target: remotekit.Target, tmp_path: Path
) -> None:
    """B is A with num_batches_tracked and Adam's steps doubled: no weight changed."""
    a, b = cf.counters_only_pair(tmp_path, steps=200)
    report = ck.diff_checkpoints(target, str(a), str(b))
    assert report.exit_code == 0 and report.ok
    assert (report.rel_change_weights, report.rel_change_optimizer) == (0.0, 0.0)
    assert report.counters is not None and (report.counters.compared, report.counters.changed) == (
        7,
        7,
    )
    by = {g.name: g for g in report.counters.by_name}
    assert (by["num_batches_tracked"].delta_min, by["step"].changed) == (200, 6)
    text = ck.render_diff(report)
    assert "relative change (float weights only): weights 0%, optimizer state 0%" in text
    assert "counters: 7 changed (num_batches_tracked +200, step +200 x6)" in text
    assert "100%" not in text


def test_scan_and_inspect_show_the_non_weights_of_a_lightning_ckpt(
    target: remotekit.Target, tmp_path: Path
) -> None:
    first, _ = cf.lightning_run(tmp_path / "lt", epochs=2)
    scan = ck.scan_checkpoints(target, str(first))
    [r] = scan
    assert (r.status, r.params, r.other_tensors) == ("clean", cf.BN_FLOATS, 11)
    assert r.other == {"counter": 7, "score": 4}
    text = ck.render_scan(scan)
    assert "other tensors (not weights): 7 counters, 4 scores" in text
    report = ck.inspect_checkpoint(target, str(first))
    assert report.other == {"counter": 7, "score": 4}
    kinds = {t.name: t.kind for t in report.tensors}
    assert kinds["state_dict.net.bn.num_batches_tracked"] == "counter"
    assert kinds["state_dict.net.bn.running_mean"] is None
    text = ck.render_inspect(report)
    assert "other: 11 tensors (7 counters, 4 scores)" in text
    assert "other (counter)" in text  # the tensor table's SECTION column
