"""remote/ckpt.py run directly, as it runs there: a subprocess, JSON lines out, exit code.

Every checkpoint is real (tests/ckpt_factory.py: a small model trained with Adam, saved with
torch.save or the safetensors package) with faults planted at known places, so the counts,
sections, names and first indexes a scan reports are checked exactly. A few tests load the
script as a module to check its value checker and its safetensors parser against torch and
the safetensors package.
"""

from __future__ import annotations

import ast
import glob
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import remotekit.remote
from remotekit.remote.ckpt import base as ckpt_base
from remotekit.remote.ckpt.check import check_entry
from remotekit.remote.ckpt.formats import Entry, _open_safetensors, tensor_chunks
from tests import ckpt_factory as cf
from tests.ckpt_kit import SCRIPT, Run, run
from tests.conftest import need_program

SAMPLES = Path(remotekit.remote.__file__).with_name("ckpt_samples.py")  # run by the API tests

# Every case build_corpus makes, relative to its root (test_corpus_cases_are_all_listed).
CASES = [
    "clean/checkpoint.pt",
    "nan_weights/checkpoint.pt",
    "inf_optimizer/checkpoint.pt",
    "mixed_dtypes/checkpoint.pt",
    "tied/checkpoint.pt",
    "ddp/checkpoint.pt",
    "nested/checkpoint.pt",
    "legacy/checkpoint.pt",
    "safetensors/model.safetensors",
    "hf",
    "bad/truncated.pt",
    "bad/empty.pt",
    "bad/notazip.pt",
    "bad/dir.pt",
    "bad/nokeys.pt",
    "bad/cut.safetensors",
    "bad/dangling.pt",
    "broken_layouts/dcp_step100",
    "broken_layouts/global_step7",
    "unsafe_global/checkpoint.pt",
]
COUNT_KEYS = [
    "nan_weights",
    "posinf_weights",
    "neginf_weights",
    "nan_optimizer",
    "posinf_optimizer",
    "neginf_optimizer",
    "negative_exp_avg_sq",
]


#: ckpt.py in a Python that imported torch first, as the agent runs it for a step that asks
#: for torch (forked from its warm process).
WARM = "import runpy, sys, torch\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"


def run_warm(*args: str) -> Run:
    cmd = [sys.executable, "-c", WARM, str(SCRIPT), *args]
    return Run(subprocess.run(cmd, capture_output=True, text=True, timeout=240))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> cf.Corpus:
    return cf.build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def scanned(corpus: cf.Corpus) -> Run:
    return run("scan", str(corpus.root))


# --------------------------------------------------------------------------- scan


def test_corpus_cases_are_all_listed(corpus: cf.Corpus) -> None:
    assert sorted(str(corpus.root / c) for c in CASES) == sorted(corpus.expect)


def test_scan_speaks_json_lines_plan_first_done_last(scanned: Run, corpus: cf.Corpus) -> None:
    assert scanned.records, scanned.stderr
    assert all("type" in r for r in scanned.records)
    assert scanned.records[0]["type"] == "plan"
    assert scanned.records[-1]["type"] == "done"
    plan = scanned.one("plan")
    assert plan["files"] == len(CASES)
    assert plan["bytes"] > 0
    assert sorted(plan["skipped"]) == sorted(corpus.skipped)  # HF trainer side files


def test_scan_exit_code_is_2_when_some_file_cannot_be_read(scanned: Run) -> None:
    done = scanned.one("done")
    assert scanned.code == done["exit_code"] == 2
    assert (done["clean"], done["bad"], done["error"], done["unsupported"]) == (3, 7, 10, 0)


@pytest.mark.parametrize("case", CASES)
def test_scan_reports_each_checkpoint_exactly(scanned: Run, corpus: cf.Corpus, case: str) -> None:
    path = str(corpus.root / case)
    rec = scanned.by_path[path]
    assert cf.mismatches(corpus.expect[path], rec) == [], rec
    assert rec["ok"] == (rec["status"] == "clean")
    assert (rec["error"] is None) == (rec["status"] in ("clean", "bad"))
    if rec["status"] == "clean":
        assert all(rec[k] == 0 for k in COUNT_KEYS)


def test_scan_separates_weights_from_optimizer_state(scanned: Run, corpus: cf.Corpus) -> None:
    rec = scanned.by_path[str(corpus.root / "inf_optimizer/checkpoint.pt")]
    assert {b["section"] for b in rec["bad_tensors"]} == {"optimizer"}
    assert [b["slot"] for b in rec["bad_tensors"]] == ["exp_avg_sq", "exp_avg_sq", "exp_avg"]
    assert rec["max_abs_weights"] is not None and rec["max_abs_optimizer"] is not None
    clean = scanned.by_path[str(corpus.root / "clean/checkpoint.pt")]
    # Adam's step counters (3.0) do not count as a magnitude of the optimizer state.
    assert 0 < clean["max_abs_optimizer"] < 1


def test_scan_reads_legacy_files_without_mmap(scanned: Run, corpus: cf.Corpus) -> None:
    rec = scanned.by_path[str(corpus.root / "legacy/checkpoint.pt")]
    assert any("legacy" in n for n in rec["notes"])


def test_bad_values_exit_1(corpus: cf.Corpus) -> None:
    r = run("scan", str(corpus.root / "nan_weights"))
    assert r.code == 1
    assert r.one("done")["bad"] == 1


def test_jobs_and_tiny_chunks_give_the_same_exact_answers(scanned: Run, corpus: cf.Corpus) -> None:
    """Two workers, and chunks of 7 values: every count and first index must be unchanged."""
    r = run("scan", str(corpus.root), "--jobs", "2", "--chunk-elems", "7")
    assert r.code == 2
    assert r.one("plan")["jobs"] == 2
    keys = [*COUNT_KEYS, "status", "params", "tensors", "bad_tensors", "error", "global_step"]
    for path, rec in scanned.by_path.items():
        other = r.by_path[path]
        assert {k: other[k] for k in keys} == {k: rec[k] for k in keys}, path


def test_glob_selects_files_and_an_index_keeps_its_shards(corpus: cf.Corpus) -> None:
    r = run("scan", str(corpus.root / "[ch]*" / "*"))  # clean/ and hf/
    paths = set(r.by_path)
    assert paths == {
        str(corpus.root / "clean/checkpoint.pt"),
        str(corpus.root / "hf/model.safetensors.index.json"),
    }
    assert not any("model-0000" in p for p in paths)  # shards belong to their index
    assert str(corpus.root / "hf/trainer_state.json") not in paths


def test_missing_path_is_one_fatal_error(tmp_path: Path) -> None:
    r = run("scan", str(tmp_path / "nope"))
    assert r.code == 2
    assert [x["type"] for x in r.records] == ["error", "done"]
    assert str(tmp_path / "nope") in r.one("error")["message"]


def test_empty_directory_says_what_it_looked_for(tmp_path: Path) -> None:
    r = run("scan", str(tmp_path))
    assert r.code == 2
    msg = r.one("error")["message"]
    assert "no checkpoints" in msg and "*.safetensors" in msg


def _unreadable_as(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """A file this process cannot read, and the argv prefix to run as an unprivileged user.

    Root reads anything, so as root the scan runs in a new user namespace (``unshare -U``):
    there the file's owner is unmapped and its mode 000 is enforced."""
    p = tmp_path / "locked" / "checkpoint.pt"
    p.parent.mkdir()
    torch.save({"w": torch.ones(3)}, p)
    p.chmod(0)
    if os.geteuid() != 0:
        return p, ()
    unshare = need_program("unshare")  # as root, the only way to make a file unreadable
    probe = subprocess.run([unshare, "-U", "cat", str(p)], capture_output=True, text=True)
    if probe.returncode == 0 or "Permission denied" not in probe.stderr:
        pytest.skip(f"user namespaces unavailable here: {probe.stderr.strip()}")
    return p, (unshare, "-U")


def test_permission_denied_is_a_record_not_a_crash(tmp_path: Path) -> None:
    path, prefix = _unreadable_as(tmp_path)
    r = run("scan", str(path.parent), prefix=prefix)
    assert r.code == 2, r.stderr
    rec = r.by_path[str(path)]
    assert rec["status"] == "error"
    assert "permission denied" in rec["error"]


# --------------------------------------------------------------------------- safety


def test_malicious_pickle_is_not_executed_by_default(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ck = tmp_path / "evil" / "checkpoint.pt"
    ck.parent.mkdir()
    cf.write_malicious(ck, marker)

    r = run("scan", str(ck.parent))
    assert not marker.exists(), "the scan ran code from the checkpoint"
    rec = r.by_path[str(ck)]
    assert rec["status"] == "error"
    assert rec["needs_globals"] == ["builtins.exec"]
    assert "--allow-global builtins.exec" in rec["error"]
    assert "--unsafe-pickle" in rec["error"]
    assert r.code == 2

    # Control: the payload is live, so the check above means something.
    r = run("scan", str(ck.parent), "--unsafe-pickle")
    assert marker.read_text() == "pwned"
    assert "arbitrary code" in r.one("warning")["message"]
    assert r.by_path[str(ck)]["status"] == "clean"


@pytest.mark.parametrize("runner", [run, run_warm], ids=["spawned", "forked"])
def test_a_file_that_kills_the_worker_costs_only_that_file(
    tmp_path: Path, runner: Callable[..., Run]
) -> None:
    """Checked two at a time; the worker dies; the files it had open are checked again alone,
    so only the killer gets the error record and the scan goes on. The same when the workers
    are forks of a scan that has torch imported."""
    for i in range(3):
        d = tmp_path / f"ok{i}"
        d.mkdir()
        torch.save({"w": torch.ones(4)}, d / "checkpoint.pt")
    (tmp_path / "killer").mkdir()
    cf.write_worker_killer(tmp_path / "killer" / "checkpoint.pt")
    r = runner("scan", str(tmp_path), "--jobs", "2", "--unsafe-pickle")
    statuses = {Path(p).parent.name: rec["status"] for p, rec in r.by_path.items()}
    assert statuses == {"ok0": "clean", "ok1": "clean", "ok2": "clean", "killer": "error"}
    assert (
        "worker process died (exit 3)" in r.by_path[str(tmp_path / "killer/checkpoint.pt")]["error"]
    )
    assert r.code == 2 and r.one("done")["files"] == 4


def test_with_torch_imported_the_worker_is_a_fork_of_the_scan(tmp_path: Path) -> None:
    """A scan that has torch imported already (the agent forked it from its warm process)
    checks in a fork of itself, which has torch too, not in a new ``ckpt.py _worker``
    interpreter that imports it again; without torch imported it starts that interpreter."""
    ck, marker = tmp_path / "ck", tmp_path / "argv.json"  # the file writes its reader's argv
    ck.mkdir()
    cf.write_argv_recorder(ck / "checkpoint.pt", marker)
    warm = run_warm("scan", str(ck), "--unsafe-pickle")
    assert [r["status"] for r in warm.of("checkpoint")] == ["clean"], warm.records
    assert json.loads(marker.read_text())[1:3] == ["scan", str(ck)]
    cold = run("scan", str(ck), "--unsafe-pickle")
    assert [r["status"] for r in cold.of("checkpoint")] == ["clean"], cold.records
    assert json.loads(marker.read_text())[1] == "_worker"


def test_allow_global_loads_a_refused_checkpoint(corpus: cf.Corpus) -> None:
    r = run("scan", str(corpus.unsafe), "--allow-global", "argparse.Namespace")
    assert r.code == 0, r.records
    rec = r.by_path[str(corpus.unsafe)]
    assert (rec["status"], rec["params"], rec["global_step"]) == ("clean", cf.PARAMS, 3)


def test_allow_global_that_cannot_be_imported_stops_before_any_work(corpus: cf.Corpus) -> None:
    r = run("scan", str(corpus.unsafe), "--allow-global", "no_such_module.Thing")
    assert r.code == 2
    assert [x["type"] for x in r.records] == ["error", "done"]
    assert "no_such_module.Thing" in r.one("error")["message"]


# --------------------------------------------------------------------------- inspect


def test_inspect_lists_tensors_step_and_lr_per_group(corpus: cf.Corpus) -> None:
    r = run("inspect", str(corpus.clean))
    assert r.code == 0, r.stderr
    info = r.one("inspect")
    ck = torch.load(corpus.clean, weights_only=True)
    tensors = {t["name"]: t for t in r.of("tensor")}
    for k, v in ck["model_state_dict"].items():
        t = tensors[f"model_state_dict.{k}"]
        assert (t["shape"], t["dtype"], t["section"]) == (list(v.shape), "float32", "weights")
    assert tensors["optimizer_state_dict.state.0.exp_avg_sq"]["slot"] == "exp_avg_sq"
    assert (info["global_step"], info["epoch"], info["format"]) == (3, 0, "torch")
    (opt,) = info["optimizers"]
    assert [g["lr"] for g in opt["groups"]] == [1e-3, 5e-4]
    assert opt["groups"][0]["hyper"]["betas"] == [0.9, 0.999]
    assert opt["slots"] == {"step": 4, "exp_avg": 4, "exp_avg_sq": 4}
    assert info["totals"]["weights"]["numel"] == cf.PARAMS


def test_inspect_does_not_send_credentials_back(tmp_path: Path) -> None:
    ck = cf.checkpoint_dict()
    ck["wandb_url"] = "https://api.wandb.ai/run/abc?token=hunter2secret"
    ck["hf_token"] = "hf_abcdefSECRET"
    ck["note"] = "resumed from s3 with aws_secret_access_key=SHHH and lr 1e-3"
    path = tmp_path / "ck.pt"
    torch.save(ck, path)
    r = run("inspect", str(path))
    assert r.code == 0, r.stderr
    scalars = r.one("inspect")["scalars"]
    assert scalars["hf_token"] == "***"
    assert scalars["wandb_url"] == "https://api.wandb.ai/run/abc?***"
    assert scalars["note"] == "resumed from s3 with aws_secret_access_key=*** and lr 1e-3"
    for secret in ("hunter2secret", "hf_abcdefSECRET", "SHHH"):
        assert secret not in json.dumps(r.records)


def test_inspect_reads_only_the_safetensors_header(tmp_path: Path) -> None:
    """The header claims 1 GiB of data the (sparse) file does not hold: inspect still answers."""
    p = tmp_path / "big.safetensors"
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [1 << 28], "data_offsets": [0, 1 << 30]}}
    ).encode()
    with open(p, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + (1 << 30))
    r = run("inspect", str(p))
    assert r.code == 0, r.records
    assert r.one("tensor")["shape"] == [1 << 28]


def test_inspect_shows_shared_storage(corpus: cf.Corpus) -> None:
    r = run("inspect", str(corpus.root / "tied/checkpoint.pt"))
    tensors = {t["name"]: t for t in r.of("tensor")}
    assert tensors["lm_head.weight"]["shared_with"] == ["embed.weight"]
    assert r.one("inspect")["totals"]["weights"]["numel"] == 50 * 8 + 8


# --------------------------------------------------------------------------- diff


def test_diff_reports_change_new_nonfinite_and_bad_second_moments(tmp_path: Path) -> None:
    a = cf.checkpoint_dict(steps=3)
    b = cf.checkpoint_dict(steps=3)
    b["global_step"] = 7
    b["optimizer_state_dict"]["param_groups"][0]["lr"] = 2e-3
    b["model_state_dict"]["fc1.weight"] += 0.5
    cf.plant(b["model_state_dict"]["fc2.weight"], [0], cf.NAN)
    cf.plant(b["optimizer_state_dict"]["state"][1]["exp_avg_sq"], [0, 3], -1.0)
    b["model_state_dict"]["fc2.bias"] = torch.zeros(5)
    b["model_state_dict"]["extra.weight"] = torch.ones(2)
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")

    r = run("diff", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--top", "2")
    d = r.one("diff")
    assert r.code == 1, d
    assert (d["step_a"], d["step_b"], d["step_delta"]) == (3, 7, 4)
    assert d["lr_a"] == [[1e-3, 5e-4]] and d["lr_b"] == [[2e-3, 5e-4]]
    assert d["only_b"] == ["model_state_dict.extra.weight"] and d["only_a"] == []
    assert [c["name"] for c in d["changes"]] == ["model_state_dict.fc2.bias"]
    w = a["model_state_dict"]["fc1.weight"]
    top = d["top_weights"][0]
    assert top["name"] == "model_state_dict.fc1.weight"
    assert math.isclose(
        top["rel_change"], 0.5 * math.sqrt(w.numel()) / float(w.norm()), rel_tol=1e-5
    )
    assert math.isclose(top["max_abs_diff"], 0.5, rel_tol=1e-5)
    assert len(d["top_weights"]) == 2
    flags = {(f["name"], f["kind"]): f["count"] for f in d["flags"]}
    assert flags == {
        ("model_state_dict.fc2.weight", "new_nonfinite"): 1,
        ("optimizer_state_dict.state.1.exp_avg_sq", "negative_exp_avg_sq"): 2,
    }


def test_diff_matches_names_across_ddp_prefixes(corpus: cf.Corpus) -> None:
    sd = torch.load(corpus.clean, weights_only=True)["model_state_dict"]
    torch.save(sd, corpus.root.parent / "plain.pt")
    r = run("diff", str(corpus.root / "ddp/checkpoint.pt"), str(corpus.root.parent / "plain.pt"))
    d = r.one("diff")
    # "module.fc1.weight" (DDP) and "fc1.weight" are the same tensor
    assert r.code == 0
    assert (d["compared"], d["identical"], d["only_a"], d["only_b"]) == (4, 4, [], [])
    assert any("module." in n for n in d["notes"])


def test_diff_of_an_unreadable_side_exits_2(corpus: cf.Corpus) -> None:
    r = run("diff", str(corpus.clean), str(corpus.root / "bad/truncated.pt"))
    assert r.code == 2
    assert "B (" in r.one("diff")["error"]


# --------------------------------------------------------------------------- bisect

STEPS = [100, 200, 300, 400, 500, 600, 700]
NAMES = ["e", "a", "g", "c", "b", "f", "d"]  # name order is not step order


def test_bisect_binary_finds_the_first_bad_checkpoint_by_step(tmp_path: Path) -> None:
    paths = cf.build_bisect_series(tmp_path, STEPS, {400, 500, 600, 700}, NAMES)
    r = run("bisect", str(tmp_path))
    b = r.one("bisect")
    assert r.code == 1, b
    assert (b["order"], b["mode"], b["checkpoints"]) == ("global_step", "binary", 7)
    assert [c["global_step"] for c in r.one("order")["checkpoints"]] == STEPS
    assert b["last_clean"]["path"] == str(paths[2]) and b["last_clean"]["global_step"] == 300
    assert b["first_bad"]["path"] == str(paths[3]) and b["first_bad"]["global_step"] == 400
    tensor = b["first_bad"]["tensor"]
    assert (tensor["name"], tensor["section"], tensor["nan"], tensor["first_index"]) == (
        "model_state_dict.fc2.weight",
        "weights",
        1,
        5,
    )
    assert b["scanned"] == len(r.of("checkpoint")) < 7
    assert b["assumption"]


def test_bisect_linear_sees_an_isolated_bad_save(tmp_path: Path) -> None:
    paths = cf.build_bisect_series(tmp_path, STEPS, {200}, NAMES)
    r = run("bisect", str(tmp_path), "--linear")
    b = r.one("bisect")
    assert r.code == 1
    assert b["first_bad"]["global_step"] == 200
    assert b["last_clean"]["global_step"] == 100
    assert b["later_clean"] == [str(p) for p in paths[2:]]
    assert b["scanned"] == 7


def test_bisect_takes_the_step_from_the_name_when_the_files_hold_none(tmp_path: Path) -> None:
    names = [f"checkpoint-{s}" for s in (9, 10, 100, 11)]
    cf.build_bisect_series(tmp_path, [1, 2, 3, 4], {3, 4}, names, with_step=False)
    (tmp_path / "checkpoint-5").mkdir()
    (tmp_path / "checkpoint-5" / "checkpoint.pt").write_bytes(b"")  # unreadable: left out
    r = run("bisect", str(tmp_path))
    b = r.one("bisect")
    order = [Path(c["path"]).parent.name for c in r.one("order")["checkpoints"]]
    assert order == ["checkpoint-9", "checkpoint-10", "checkpoint-11", "checkpoint-100"]
    assert b["order"] == "global_step"
    assert [c["global_step"] for c in r.one("order")["checkpoints"]] == [9, 10, 11, 100]
    # checkpoint-11 holds "step 4" (bad), checkpoint-100 "step 3" (bad): first bad by name is 11
    assert Path(b["first_bad"]["path"]).parent.name == "checkpoint-11"
    assert b["unreadable"] == [str(tmp_path / "checkpoint-5" / "checkpoint.pt")]
    assert r.code == 2


# --------------------------------------------------------------------------- Python 3.8


@pytest.mark.parametrize("script", [SCRIPT, SAMPLES], ids=lambda p: p.name)
def test_shipped_scripts_parse_as_python_3_8(script: Path) -> None:
    ast.parse(script.read_text(), feature_version=(3, 8))


def test_script_runs_on_python_3_8_and_says_torch_is_missing(corpus: cf.Corpus) -> None:
    found = [os.environ.get("REMOTEKIT_PYTHON38", ""), shutil.which("python3.8") or ""]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    usable = [p for p in found if p and ".pyenv/shims" not in p and os.access(p, os.X_OK)]
    if not usable:
        pytest.skip("no python3.8 here (set REMOTEKIT_PYTHON38 to one)")
    py38 = usable[0]
    proc = subprocess.run(
        [py38, "-S", str(SCRIPT), "scan", str(corpus.root)], capture_output=True, text=True
    )
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 2, proc.stderr
    assert [r["type"] for r in records] == ["error", "done"]
    assert "torch" in records[0]["message"] and "install torch" in records[0]["message"]

    # Discovery needs no torch: on 3.8 it finds exactly what it finds here.
    code = (
        "import json, os, sys; "
        "pkg = sys.modules.setdefault('remotekit', type(sys)('remotekit')); "
        "pkg.__path__ = [os.path.dirname(os.path.dirname(sys.argv[1]))]; "
        "from remotekit.remote.ckpt.discover import discover; "
        "print(json.dumps(discover(sys.argv[2])))"
    )
    argv = ["-S", "-c", code, str(SCRIPT), str(corpus.root)]
    old = subprocess.run([py38, *argv], capture_output=True, text=True, check=True)
    new = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
    assert json.loads(old.stdout) == json.loads(new.stdout)


# --------------------------------------------------------------------------- in-process


@pytest.fixture(scope="module")
def ckpt_torch() -> None:
    """The package's modules, in this process, with torch imported as ckpt.py imports it."""
    ckpt_base.import_torch()


DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.complex64,
]
PLANTS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(1, 12),
    cols=st.integers(1, 12),
    transpose=st.booleans(),
    chunk=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    plants=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(sorted(PLANTS))), max_size=8),
)
def test_checker_counts_exactly_across_chunks_dtypes_and_layouts(
    ckpt_torch: None,
    dtype: torch.dtype,
    rows: int,
    cols: int,
    transpose: bool,
    chunk: int,
    seed: int,
    plants: list[tuple[int, str]],
) -> None:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, cols, generator=g, dtype=torch.float32) * 3
    if dtype.is_complex:
        base = torch.complex(base, torch.randn(rows, cols, generator=g))
    flat = base.view(-1)
    for i, kind in plants:
        flat[i % flat.numel()] = PLANTS[kind]
    x = base.to(dtype)
    if transpose:
        x = x.t()  # a non-contiguous view: checked in row blocks
    entry = Entry(
        "t",
        "weights",
        None,
        x.dtype,
        tuple(x.shape),
        x.numel(),
        0,
        None,
        lambda n: tensor_chunks(x, n, None),
    )
    got = check_entry(entry, chunk)

    ref = x.contiguous().view(-1)
    ref = ref.to(torch.complex64) if dtype.is_complex else ref.float()
    if dtype.is_complex:
        re, im = ref.real, ref.imag
        nan = torch.isnan(re) | torch.isnan(im)
        pos = ((re == math.inf) | (im == math.inf)) & ~nan
        neg = ((re == -math.inf) | (im == -math.inf)) & ~nan & ~pos
    else:
        nan, pos, neg = torch.isnan(ref), ref == math.inf, ref == -math.inf
    bad = nan | pos | neg
    assert (got.nan, got.posinf, got.neginf) == (int(nan.sum()), int(pos.sum()), int(neg.sum()))
    if bool(bad.any()):
        assert got.first_bad == int(bad.nonzero()[0])
    else:
        assert got.first_bad is None
    if bool((~bad).any()):
        assert math.isclose(got.max_abs, float(ref[~bad].abs().max()), rel_tol=1e-6)


@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
def test_safetensors_parser_agrees_with_the_safetensors_package(
    ckpt_torch: None, tmp_path: Path
) -> None:
    from safetensors import safe_open

    tensors = {
        "a.weight": torch.randn(7, 3),
        "b.bias": torch.randn(5).to(torch.bfloat16),
        "c": torch.randn(2, 2, 2).to(torch.float16),
        "d.ids": torch.arange(6),
        "e.scalar": torch.tensor(1.5),
    }
    path = tmp_path / "x.safetensors"
    cf.save_safetensors(tensors, path)
    src = _open_safetensors(str(path), path.stat().st_size)
    try:
        assert not src.problems
        entries = {e.name: e for e in src.entries}
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                e = entries[name]
                want = f.get_tensor(name)
                got = torch.cat([c.clone() for _, c in e.chunks(4)])
                assert (e.dtype, e.shape) == (want.dtype, tuple(want.shape))
                assert torch.equal(got, want.reshape(-1))
    finally:
        src.close()


@pytest.mark.slow
def test_peak_memory_stays_far_below_the_checkpoint_size(tmp_path: Path) -> None:
    """mmap plus released pages: checking 128 MiB of weights adds far less than 128 MiB of RSS."""

    def peak_rss(path: Path) -> int:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "scan", str(path)], stdout=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0
        return usage.ru_maxrss * 1024  # KiB on Linux; includes the worker (a waited child)

    small = tmp_path / "small.pt"
    torch.save({"w": torch.zeros(16)}, small)
    big = tmp_path / "big.pt"
    size = 128 << 20
    torch.save({"w": torch.zeros(size // 8), "v": torch.ones(size // 8)}, big)
    extra = peak_rss(big) - peak_rss(small)
    assert extra < size // 4, f"scanning {size >> 20} MiB added {extra >> 20} MiB of RSS"
