"""The diagnostics' tasks run as a user would: `remotekit TASK ...` in a subprocess, local target.

Only what the task layer adds is asserted here: the process's exit code, the host's report on
stdout, ``--json``, an engine error as exit 2 (a message on stderr), ``--plot``. What the
reports hold and how they render: tests/diagnostics/checkpoints/test_checkpoints_api.py, tests/diagnostics/system/test_system_api.py and
tests/diagnostics/trainlog/test_trainlog_api.py.

The fake nvidia-smi cannot be reached through the step's ``env=`` from the command line: these
tests write a hosts.yaml (``--inventory``) whose ``local`` host sets ``PATH`` and the scenario.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import remotekit
from tests import ckpt_factory as cf
from tests import trainlog_factory as factory
from tests.conftest import write_inventory
from tests.harness import PNG, cli, only_host
from tests.smi import H100, make_bin_dir, make_notorch, smi_env, smi_hosts


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bin_dir(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="module")
def notorch(tmp_path_factory: pytest.TempPathFactory) -> remotekit.Target:
    return make_notorch(tmp_path_factory.mktemp("notorch"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> cf.Corpus:
    return cf.build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The homogeneous-batches log of tests/diagnostics/trainlog/test_trainlog_api.py: spikes at 200, 330, 400."""
    d = tmp_path_factory.mktemp("trainlog-cli")
    rows = factory.cached("homogeneous", 600, (200, 330, 400))
    return factory.write_jsonl(rows, d / "homo.jsonl", checkpoints=(200, 400, 500))


# --------------------------------------------------------------------------- checkpoints


def test_ckpt_scan_prints_the_table_and_exits_1(corpus: cf.Corpus, tmp_path: Path) -> None:
    r = cli("ckpt-scan", "--checkpoints", str(corpus.root / "nan_weights"), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "checkpoint.pt" in r.stdout and "bad" in r.stdout and "2/1/2" in r.stdout
    assert "model_state_dict.fc1.weight (weights, float32, 128 values): 2 NaN" in r.stdout
    assert "(exit 1)" in r.stdout
    assert "\x1b" not in r.stdout + r.stderr  # piped: no colour, no progress line


def test_ckpt_scan_json_and_unsafe_warning(corpus: cf.Corpus, tmp_path: Path) -> None:
    r = cli(
        "ckpt-scan", "--checkpoints", str(corpus.unsafe), "--unsafe-pickle", "--json", cwd=tmp_path
    )
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == 0
    assert [c["status"] for c in host["result"]["checkpoints"]] == ["clean"]
    assert host["result"]["warnings"] and host["result"]["plan"]["files"] == 1
    r = cli("ckpt-scan", "--checkpoints", str(corpus.unsafe), "--unsafe-pickle", cwd=tmp_path)
    assert r.returncode == 0
    assert "local | warning: --unsafe-pickle" in r.stderr and "arbitrary code" in r.stderr


def test_ckpt_scan_json_still_warns_about_unsafe_pickle(corpus: cf.Corpus, tmp_path: Path) -> None:
    r = cli(
        "ckpt-scan", "--checkpoints", str(corpus.unsafe), "--unsafe-pickle", "--json", cwd=tmp_path
    )
    assert r.returncode == 0
    assert "--unsafe-pickle" in r.stderr and "arbitrary code" in r.stderr


def test_ckpt_scan_error_exits_2(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    r = cli("ckpt-scan", "--checkpoints", missing, cwd=tmp_path)
    assert r.returncode == 2
    assert f"local | error: [host 'local', step 'ckpt-scan'] {missing}: no such file" in r.stderr
    assert "CHECKPOINT" not in r.stdout  # no scan table: the error above names the failure
    assert r.stdout == "" and r.stderr.count("no such file") == 1  # one host: said once
    r = cli("ckpt-scan", "--checkpoints", missing, "--json", cwd=tmp_path)
    assert r.returncode == 2
    assert "no such file" in only_host(r.stdout)["error"]["message"]


def test_ckpt_inspect_of_an_unreadable_file_exits_2(corpus: cf.Corpus, tmp_path: Path) -> None:
    r = cli("ckpt-inspect", "--checkpoint", str(corpus.root / "bad/empty.pt"), cwd=tmp_path)
    assert r.returncode == 2
    assert "empty file" in r.stdout


def test_ckpt_diff_reports_counters_on_their_own_line(tmp_path: Path) -> None:
    a, b = cf.counters_only_pair(tmp_path / "pair", steps=200)
    r = cli("ckpt-diff", "-a", str(a), "-b", str(b), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "relative change (float weights only): weights 0%, optimizer state 0%" in r.stdout
    assert "counters: 7 changed (num_batches_tracked +200, step +200 x6)" in r.stdout


def test_ckpt_bisect_exits_1(tmp_path: Path) -> None:
    series = tmp_path / "run"
    cf.build_bisect_series(series, [10, 20, 30, 40, 50], {40, 50}, ["r1", "r2", "r3", "r4", "r5"])
    r = cli("ckpt-bisect", "--checkpoints", str(series), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "first bad:" in r.stdout and "<- last clean" in r.stdout


def test_demo_agrees_and_exits_0(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    r = cli("demo", "--dir", str(where), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5/5 samples as expected" in r.stdout
    assert "--allow-global argparse.Namespace" in r.stdout  # the unsafe sample says how
    assert (where / "clean" / "checkpoint.pt").is_file()  # a --dir of yours is kept
    from remotekit.cli.diagnostics import DEMO_NEXT

    tail = r.stdout.rstrip().splitlines()[-len(DEMO_NEXT) - 1 :]  # it ends with what to try
    assert tail[0] == "next:" and [ln.split("#")[0].strip() for ln in tail[1:]] == [
        cmd for cmd, _ in DEMO_NEXT
    ], r.stdout


def test_demo_json_and_its_temp_dir_is_removed(tmp_path: Path) -> None:
    r = cli("demo", "--json", cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == 0, r.stderr
    demo = host["result"]
    assert demo["mismatches"] == [] and len(demo["samples"]) == 5
    status = {c["path"]: c["status"] for c in demo["scan"]["checkpoints"]}
    assert [status[s["path"]] for s in demo["samples"]] == [s["expect"] for s in demo["samples"]]
    assert not Path(demo["directory"]).exists()


# --------------------------------------------------------------------------- system


def test_gpu_exit_code_table_and_json(
    notorch: remotekit.Target, bin_dir: Path, tmp_path: Path
) -> None:
    hosts = smi_hosts(tmp_path, bin_dir, "ecc", notorch)
    r = cli("gpu", "--inventory", hosts, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert H100 in r.stdout and "THROTTLE" in r.stdout
    assert "warning: GPU 2: 3 uncorrected ECC error(s)" in r.stdout
    assert r.stdout.rstrip().endswith("gpu on local: 2 finding(s)")

    r = cli("gpu", "--inventory", hosts, "--json", cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == host["result"]["exit_code"] == 1
    assert len(host["result"]["gpus"]) == 8
    assert host["result"]["gpus"][2]["ecc_uncorrected_volatile"] == 3


def test_fewer_gpus_than_hosts_yaml_declares_is_a_finding(
    notorch: remotekit.Target, bin_dir: Path, tmp_path: Path
) -> None:
    """A GPU lost from the bus (Xid 79) leaves a node that still runs, one GPU short: with
    ``gpus: 8`` in hosts.yaml, ``gpu`` and ``diagnose`` say so as a finding (exit 1)."""
    local = {"python": notorch.spec.python, "workdir": notorch.spec.workdir}
    hosts = tmp_path / "hosts.yaml"
    write_inventory(hosts, {"local": {**local, "gpus": 8, "env": smi_env(bin_dir, "lost-gpu")}})
    r = cli("gpu", "--inventory", str(hosts), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "warning: 7 GPU(s) seen where 8 are declared (gpus: 8)" in r.stdout
    r = cli("diagnose", "--inventory", str(hosts), "--json", cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == 1
    gpu = next(s for s in host["result"]["sections"] if s["name"] == "gpu")
    assert gpu["status"] == "findings" and gpu["findings"][0].startswith("7 GPU(s) seen where 8")
    # the same node with its eight GPUs, or with no count declared: no finding
    write_inventory(hosts, {"local": {**local, "gpus": 8, "env": smi_env(bin_dir, "healthy")}})
    assert cli("gpu", "--inventory", str(hosts), cwd=tmp_path).returncode == 0
    write_inventory(hosts, {"local": {**local, "gpu": True, "env": smi_env(bin_dir, "lost-gpu")}})
    assert cli("gpu", "--inventory", str(hosts), cwd=tmp_path).returncode == 0


def test_an_engine_error_exits_2(notorch: remotekit.Target, bin_dir: Path, tmp_path: Path) -> None:
    hosts = smi_hosts(tmp_path, bin_dir, "healthy", notorch)
    r = cli("gpu", "--inventory", hosts, "--timeout", "0.001", cwd=tmp_path)
    assert r.returncode == 2
    assert any(
        line.startswith("local | error: [host 'local', step 'gpu'] timed out")
        for line in r.stderr.splitlines()
    ), r.stderr
    r = cli("env", "--inventory", hosts, "--json", "--timeout", "0.001", cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == 2
    assert "timed out" in host["error"]["message"]


def test_disk_of_a_missing_path_exits_1(tmp_path: Path) -> None:
    r = cli("disk", "--path", str(tmp_path / "missing"), "--min-free", "0", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "(missing)" in r.stdout and "warning: " in r.stdout


def test_diagnose_text_and_json(notorch: remotekit.Target, bin_dir: Path, tmp_path: Path) -> None:
    hosts = smi_hosts(tmp_path, bin_dir, "throttled", notorch)
    r = cli("diagnose", "--inventory", hosts, cwd=tmp_path)
    text = r.stdout
    assert r.returncode == 1, text + r.stderr
    # each section as it completes, then the summary table
    assert text.index("== env: ok") < text.index("== gpu: findings") < text.index("\nsection ")
    assert "ckpt-scan  skipped" in text

    hosts = smi_hosts(tmp_path, bin_dir, "no-driver", notorch)
    r = cli("diagnose", "--inventory", hosts, "--json", cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == 2
    sections = host["result"]["sections"]
    assert [s["name"] for s in sections] == ["env", "gpu", "disk", "ckpt-scan"]
    assert sections[1]["status"] == "failed"
    assert sections[1]["error"].startswith("NVIDIA-SMI has failed")


def test_diagnose_shows_the_checkpoint_scan_table(
    corpus: cf.Corpus, bin_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    torch = remotekit.local_target(workdir=str(work))  # our own Python: the scan needs torch
    hosts = smi_hosts(tmp_path, bin_dir, "healthy", torch)
    nan = str(corpus.root / "nan_weights")
    r = cli("diagnose", "--inventory", hosts, "--checkpoints", nan, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    scan = r.stdout[r.stdout.index("== ckpt-scan: findings") :]
    assert "CHECKPOINT" in scan and "2/1/2" in scan and "(exit 1)" in scan
    assert "model_state_dict.fc1.weight (weights, float32, 128 values): 2 NaN" in scan


# --------------------------------------------------------------------------- train-log


def test_train_log_unknown_preset_exits_2(log: Path, tmp_path: Path) -> None:
    r = cli("train-log", "--log", str(log), "--preset", "olmo3", cwd=tmp_path)
    assert r.returncode == 2
    assert "local | error: unknown preset 'olmo3'" in r.stderr


def test_train_log_text_exits_1(log: Path, tmp_path: Path) -> None:
    r = cli("train-log", "--log", str(log), "--steps-per-epoch", "150", cwd=tmp_path)
    text = r.stdout
    assert r.returncode == 1, text + r.stderr
    assert "Verdict: loss is " in text and "interleave buckets" in text
    assert re.search(r"none within ±5 \(nearest: epoch 300, 3[01] steps after\)", text)
    assert "checkpoint 200 (+0)" in text
    assert "2 of 3" in text and "more than chance" in text
    assert text.rstrip().endswith("exit 1 (findings: spikes, cliffs, batch-composition)")


def test_train_log_json(log: Path, tmp_path: Path) -> None:
    args = ("--metric", "loss", "--metric", "acc", "--json")
    r = cli("train-log", "--log", str(log), *args, cwd=tmp_path)
    host = only_host(r.stdout)
    assert r.returncode == host["exit_code"] == host["result"]["exit_code"] == 1
    report = host["result"]
    assert report["source"]["metrics"] == ["loss", "acc"]
    assert report["composition"]["finding"] is True
    assert report["series"] == []  # only a plot asks for the series


def test_train_log_plot(log: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    r = cli("train-log", "--log", str(log), "--plot", str(png), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert png.read_bytes()[:8] == PNG
    assert f"plot: {png}" in r.stderr


#: A sitecustomize that makes matplotlib unimportable in the process it starts in: what a
#: Python without it installed says (the code under test is not touched).
NO_MATPLOTLIB = """\
import sys


class NoMatplotlib:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError("No module named 'matplotlib'", name=name)
        return None


sys.meta_path.insert(0, NoMatplotlib())
"""


@pytest.mark.parametrize("task", ["train-log", "diagnose"])
def test_plot_without_matplotlib_exits_2_before_anything_runs_and_says_how(
    task: str, log: Path, tmp_path: Path
) -> None:
    """--plot without matplotlib once ran the whole analysis (diagnose: every section) and
    then said `pip install 'remotekit[plot]'`, which no package index answers."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_MATPLOTLIB)
    png = tmp_path / "run.png"
    where = ["--log", str(log)] if task == "train-log" else ["--run-dir", str(log.parent)]
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run(
        [sys.executable, "-m", "remotekit", task, *where, "--plot", str(png)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""  # no analysis ran, no section was shown
    assert "--plot needs matplotlib" in r.stderr
    assert "pip install '.[plot]'" in r.stderr and "pipx inject remotekit matplotlib" in r.stderr
    assert f"{sys.executable} -m pip install matplotlib" in r.stderr
    assert "remotekit[plot]" not in r.stderr and not png.exists()


def test_train_log_plot_of_a_log_that_cannot_be_read_exits_2(tmp_path: Path) -> None:
    png = tmp_path / "run.png"
    r = cli("train-log", "--log", str(tmp_path / "nope.jsonl"), "--plot", str(png), cwd=tmp_path)
    assert r.returncode == 2
    assert "cannot read" in r.stdout
    assert "Traceback" not in r.stderr and not png.exists()
