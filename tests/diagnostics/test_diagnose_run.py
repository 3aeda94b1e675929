"""``diagnose(run_dir=DIR)`` / ``remotekit diagnose --run-dir DIR``: one answer for a training run.

The run directory is the seed's afternoon in miniature: a JSON-lines log from a real (tiny)
training loop with homogeneous length-bucketed batches and spikes planted at steps 200, 330
and 400 (tests/trainlog_factory.py), and HF Trainer checkpoints at 200, 400 and 500, the last
with a NaN in its optimizer state. Nobody types the save steps: they come from the scan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit.diagnostics import diagnose as dg
from remotekit.diagnostics import trainlog
from tests import ckpt_factory as cf
from tests import trainlog_factory as factory
from tests.harness import PNG, cli, only_host
from tests.smi import make_bin_dir, smi_env, smi_hosts

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "run"
    run.mkdir()
    rows = factory.cached("homogeneous", 600, (200, 330, 400))
    factory.write_jsonl(rows, run / "train_log.jsonl")
    for step in (200, 400, 500):
        cf.hf_trainer_dir(run / "checkpoints", step, nan_optimizer=2 if step == 500 else None)
    return run


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bin_dir(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="module")
def report(run_dir: Path, bin_dir: Path) -> Iterator[dg.DiagnoseReport]:
    with remotekit.local_target() as t:
        yield dg.diagnose(t, run_dir=str(run_dir), env=smi_env(bin_dir, "healthy"))


def test_a_run_gets_checkpoints_log_and_verdict(report: dg.DiagnoseReport, run_dir: Path) -> None:
    assert [s.name for s in report.sections] == list(dg.RUN_SECTIONS)
    scan = report.section("ckpt-scan")
    assert scan is not None and scan.status == "findings"
    log = report.section("train-log")
    assert log is not None and isinstance(log.report, trainlog.TrainLogReport)
    assert log.report.source is not None
    # the script chose it in the run (not a trainer_state.json), and says so
    assert log.report.source.path == str(run_dir / "train_log.jsonl")
    # ... and why: the longest history; the last checkpoint's copy looked at, the older not
    why = log.report.source.chosen_from or ""
    assert why.startswith(
        "train_log.jsonl (JSON lines): the longest history of a train-side loss ('loss': 600 "
        "values); also there: checkpoints/checkpoint-500/trainer_state.json (HF trainer_state"
    )
    assert why.endswith(
        "; 2 older checkpoint copies (checkpoints/checkpoint-200/trainer_state.json, "
        "checkpoints/checkpoint-400/trainer_state.json) not read"
    )
    saves = sorted(e.step for e in log.report.events if e.kind == "checkpoint")
    assert saves == [200, 400, 500]  # from the scan, not typed by anyone
    v = "\n".join(report.verdict)
    assert f"first bad: {run_dir / 'checkpoints' / 'checkpoint-500'} at step 500" in v
    assert "last clean before it: step 400" in v
    assert "of 3 checkpoint saves" in v and "expected by chance (p=" in v
    assert "batches: loss is trimodal" in v
    assert report.exit_code == 1


def test_the_verdict_renders_after_the_sections(report: dg.DiagnoseReport, run_dir: Path) -> None:
    text = dg.render_verdict(report)
    assert text.startswith(f"== run {run_dir}\ncheckpoints: 3 (hf-trainer)")
    assert dg.render_section(report.sections[-1]).startswith("== train-log: findings")


def test_a_run_without_a_log_fails_only_that_section(tmp_path: Path, bin_dir: Path) -> None:
    cf.hf_trainer_dir(tmp_path, 100)
    (tmp_path / "checkpoint-100" / "trainer_state.json").unlink()
    with remotekit.local_target() as t:
        rep = dg.diagnose(t, run_dir=str(tmp_path), env=smi_env(bin_dir, "healthy"))
    log = rep.section("train-log")
    assert log is not None and log.status == "failed" and "no training log under" in str(log.error)
    assert rep.section("ckpt-scan").status == "ok"  # type: ignore[union-attr]
    assert any(
        line.startswith("log: not analysed (") and "no training log under" in line
        for line in rep.verdict
    )


@pytest.fixture(scope="module")
def log_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's folder holding its log and no checkpoint (they are kept elsewhere)."""
    run = tmp_path_factory.mktemp("log-only")
    rows = factory.cached("homogeneous", 600, (200, 330, 400))
    factory.write_jsonl(rows, run / "train_log.jsonl")
    return run


def test_a_run_without_checkpoints_takes_the_hosts(
    log_only: Path, run_dir: Path, bin_dir: Path
) -> None:
    # the run keeps its log here and its checkpoints where hosts.yaml's `checkpoints:` says:
    # the scan finds them there, as plain diagnose does, and the log is read with their saves
    ckpt = str(run_dir / "checkpoints")
    with remotekit.local_target(checkpoints=ckpt) as t:
        rep = dg.diagnose(t, run_dir=str(log_only), env=smi_env(bin_dir, "healthy"))
        plain = dg.diagnose(t, env=smi_env(bin_dir, "healthy"))
    scan, alone = rep.section("ckpt-scan"), plain.section("ckpt-scan")
    assert scan is not None and alone is not None
    assert scan.status == alone.status == "findings" and scan.findings == alone.findings
    assert any(f"first bad: {run_dir / 'checkpoints' / 'checkpoint-500'}" in v for v in rep.verdict)
    log = rep.section("train-log")
    assert log is not None and log.report is not None
    assert sorted(e.step for e in log.report.events if e.kind == "checkpoint") == [200, 400, 500]


def test_no_checkpoints_is_said_as_ckpt_scan_says_it(
    log_only: Path, bin_dir: Path, tmp_path: Path
) -> None:
    # not "ok, 0 checkpoint(s)": the section failed, in ckpt-scan's own words, and ckpt-scan
    # of the same folder (a log in it or not) exits 2 with them
    with remotekit.local_target() as t:
        rep = dg.diagnose(t, run_dir=str(log_only), env=smi_env(bin_dir, "healthy"))
    scan = rep.section("ckpt-scan")
    assert scan is not None and scan.status == "failed" and scan.report is None
    assert str(scan.error).startswith(
        f"[host 'local', step 'ckpt-scan'] no checkpoints under {log_only} (looked for *.pt"
    )
    assert rep.exit_code == 2
    assert any(
        v.startswith(
            f"checkpoints: not checked ([host 'local', step 'ckpt-scan'] no checkpoints under {log_only}"
        )
        for v in rep.verdict
    )
    r = cli("ckpt-scan", "--checkpoints", str(log_only), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"local | error: {scan.error}" in r.stderr


def test_no_checkpoints_anywhere_names_each_place(
    log_only: Path, bin_dir: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "ckpt"
    empty.mkdir()
    with remotekit.local_target(checkpoints=str(empty)) as t:
        rep = dg.diagnose(t, run_dir=str(log_only), env=smi_env(bin_dir, "healthy"))
    scan = rep.section("ckpt-scan")
    assert scan is not None and scan.status == "failed"
    said = str(scan.error)
    assert (
        f"no checkpoints under {log_only} (" in said and f"; no checkpoints under {empty} (" in said
    )


# --------------------------------------------------------------------------- the task


def test_cli_diagnose_run_text_json_and_plot(run_dir: Path, bin_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    hosts = smi_hosts(tmp_path, bin_dir, "healthy", remotekit.local_target(workdir=str(work)))
    r = cli("diagnose", "--inventory", hosts, "--run-dir", str(run_dir), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    text = r.stdout
    assert text.index("== ckpt-scan: findings") < text.index("== train-log: findings")
    assert text.index("\nsection ") < text.index(f"== run {run_dir}")
    assert "first bad:" in text and "spikes at saves:" in text

    png = tmp_path / "run.png"
    r = cli(
        "diagnose",
        "--inventory",
        hosts,
        "--run-dir",
        str(run_dir),
        "--json",
        "--plot",
        str(png),
        cwd=tmp_path,
    )
    host = only_host(r.stdout)
    assert host["exit_code"] == 1
    result = host["result"]
    assert [s["name"] for s in result["sections"]] == list(dg.RUN_SECTIONS)
    assert any(line.startswith("spikes at saves: ") for line in result["verdict"])
    assert png.read_bytes().startswith(PNG)
    json.dumps(result)  # plain JSON all the way down


def test_cli_diagnose_plot_without_run_exits_2(tmp_path: Path) -> None:
    r = cli("diagnose", "--plot", str(tmp_path / "x.png"), cwd=tmp_path)
    assert r.returncode == 2 and "--plot needs --run-dir" in r.stderr


def test_the_verdict_says_a_run_unhealthy_from_the_start(tmp_path: Path, bin_dir: Path) -> None:
    """A run whose loss never moved: the verdict says so as train-log does (its ``start:``
    line), not only its section; a checkpoint beside it keeps the scan's part."""
    cf.hf_trainer_dir(tmp_path, 300)
    rows = [
        {"step": s, "loss": round(2.3026 + 0.01 * ((s * 7919) % 13 - 6) / 6, 5)}
        for s in range(1, 301)
    ]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with remotekit.local_target() as t:
        rep = dg.diagnose(t, run_dir=str(tmp_path), env=smi_env(bin_dir, "healthy"))
    start = [line for line in rep.verdict if line.startswith("start: ")]
    assert start and start[0].startswith(
        "start: loss unhealthy from the start: flat from its first value to its last: 300 values"
    )
    assert rep.exit_code == 1
