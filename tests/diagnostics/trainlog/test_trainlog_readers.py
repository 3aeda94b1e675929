"""train-log's format readers (each a module of ``remote/trainlog/readers/`` that says which
files it reads and returns series and the events its format states), their registry, and
the small ones: MLflow file stores and OLMo / OLMo-core console logs.

The MLflow stores are written by mlflow itself (``mlflow-skinny``, its file store); the OLMo
console logs are written to the shape OLMo's and OLMo-core's source prints, quoted beside
the writer here.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CI
from tests.harness import DATA
from tests.smi import make_bin_dir, smi_env
from tests.trainlog_kit import SCRIPT, Run, run, shipped

pytest.importorskip("torch")  # as before: this suite runs where torch is (some inputs need it)

READERS = SCRIPT.parent / "trainlog" / "readers"


def _keras_log(path: Path) -> Path:
    """A Keras 3 fit(verbose=2) of 12 epochs, to the shape docs/extending.md's reader cites."""
    lines = []
    for e, v in enumerate([2.31, 1.62, 1.21, 0.97, 0.84, 0.75, 0.69, 0.66, 2.9, 0.62, 0.6, 0.59]):
        lines += [f"Epoch {e + 1}/12", f"1875/1875 - 3s - 2ms/step - accuracy: {0.5 + e / 30:.4f}"]
        lines[-1] += f" - loss: {v:.4f} - val_accuracy: 0.8{e}00 - val_loss: {v + 0.1:.4f}"
    path.write_text("\n".join(["Using PyTorch backend.", *lines]) + "\n")
    return path


def _docs_reader() -> str:
    docs = (SCRIPT.parents[2] / "docs" / "extending.md").read_text()
    section = docs[docs.index("## Adding a train-log reader") :]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def test_docs_adding_a_reader_example_runs(tmp_path: Path) -> None:
    """docs/extending.md's example reader, saved as one module in a copy of the shipped
    files, and no other file touched, reads its format: a new format is that module."""
    remote = tmp_path / "remote"
    shutil.copytree(SCRIPT.parent, remote, ignore=shutil.ignore_patterns("__pycache__"))
    (remote / "trainlog" / "readers" / "keras.py").write_text(_docs_reader())
    log = _keras_log(tmp_path / "fit.log")
    r = run(log, script=remote / "trainlog.py")
    src_rec = r.one("source")
    assert (src_rec["format"], src_rec["rows"], src_rec["first_step"]) == ("keras", 12, 1)
    assert src_rec["columns"]["loss"] == "loss" and src_rec["last_step"] == 12
    assert "keras" not in {rec["format"] for rec in run(log).all("source")}  # not shipped
    helptext = subprocess.run(
        [sys.executable, str(remote / "trainlog.py"), "--help"], capture_output=True, text=True
    ).stdout
    assert "keras" in helptext  # --format offers it


_THROUGH_A_TARGET = """
import json, sys
import remotekit
from remotekit import shipping

assert remotekit.__file__.startswith(sys.argv[1]), remotekit.__file__  # the copy's
with remotekit.local_target(agent=sys.argv[2] == "agent") as t:
    for _ in range(2):  # the package sent, then the one kept there
        res = t.run_python(shipping.script("trainlog.py"), [sys.argv[3]], timeout=60, check=False)
        recs = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        print(json.dumps([r["format"] for r in recs if r.get("type") == "source"]))
"""


@pytest.mark.parametrize("agent", ["agent", "per-step"])
def test_a_new_reader_module_is_all_a_host_needs(tmp_path: Path, agent: str) -> None:
    """The same module in a copy of remotekit (nothing else changed) through a real step:
    the package it ships holds the module, and the registry finds it there, run from the
    package the step sent and from the one kept in the cache (on the agent, compiled
    through its code cache)."""
    src = tmp_path / "src"
    shutil.copytree(
        SCRIPT.parents[1], src / "remotekit", ignore=shutil.ignore_patterns("__pycache__")
    )
    (src / "remotekit" / "remote" / "trainlog" / "readers" / "keras.py").write_text(_docs_reader())
    log = _keras_log(tmp_path / "fit.log")
    env = {**os.environ, "PYTHONPATH": str(src), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run(
        [sys.executable, "-c", _THROUGH_A_TARGET, str(src), agent, str(log)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout: its remotekit/ would come first on the path
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ['["keras"]', '["keras"]'], proc.stdout
    kept = [p for p in (tmp_path / "xdg" / "remotekit" / "pkg").iterdir() if p.name[0] != "."]
    assert len(kept) == 1  # the second step ran from there
    assert (kept[0] / "remotekit" / "remote" / "trainlog" / "readers" / "keras.py").is_file()


def test_every_reader_module_defines_one_registered_reader_that_keeps_the_contract() -> None:
    """Each module of readers/ is found, its one Reader registered in the claim order (which
    breaks ties between readers as sure: tests/diagnostics/trainlog/test_trainlog_formats.py proves it on
    logs); one without a part of the contract breaks the registry when it is asked."""
    registry = shipped("trainlog.readers")
    modules = {p.stem for p in READERS.glob("*.py")} - {"__init__"}
    found = sorted(type(r).__module__.rpartition(".")[2] for r in registry.READERS)
    assert found == sorted(modules)
    formats = [r.FORMAT for r in registry.READERS]
    assert formats == [
        "wandb",
        "tensorboard",
        "mlflow",
        "olmo",
        "kvtable",
        "jsonl",
        "json",
        "nanogpt",
        "llm.c",
        "llm.c-stdout",
        "megatron",
        "fairseq",
        "csv",
        "text",
    ]
    assert len({r.ORDER for r in registry.READERS}) == len(formats)
    assert registry.FALLBACK is registry.READERS[-1]
    for reader in registry.READERS:
        assert isinstance(reader, registry.Reader) and reader.WHAT, reader.FORMAT
        assert type(reader).sniff is not registry.Reader.sniff or reader.FALLBACK
        assert type(reader).read is not registry.Reader.read, reader.FORMAT
        assert all(len(name) == 3 for name in reader.NAMES), reader.FORMAT
        assert registry.by_format(reader.FORMAT) is reader
    # --format offers every reader's format, from the registry
    helptext = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert all(f in helptext for f in formats), helptext


def _need_mlflow() -> None:
    if importlib.util.find_spec("mlflow") is None:
        if CI:
            pytest.fail("CI=true but mlflow is missing: the test extra must install mlflow-skinny")
        pytest.skip("mlflow not installed (pip install mlflow-skinny)")


_MLFLOW_WRITER = """
import json, sys
import mlflow
spec = json.loads(sys.argv[1])
mlflow.set_tracking_uri("file:" + spec["store"])
mlflow.set_experiment(spec["experiment"])
for run in spec["runs"]:
    with mlflow.start_run(run_name=run["name"]):
        mlflow.log_param("lr", 3e-4)
        mlflow.set_tag("team", "x")
        for key, points in run["metrics"].items():
            for step, value in points:
                mlflow.log_metric(key, value, step=step)
"""


def mlflow_store(root: Path, runs: list[dict[str, object]], experiment: str = "exp") -> Path:
    """An ``mlruns/`` written by mlflow's own file store (in a child: its settings stay there)."""
    _need_mlflow()
    store = root / "mlruns"
    spec = {"store": str(store), "experiment": experiment, "runs": runs}
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_URI": ""}
    proc = subprocess.run(
        [sys.executable, "-c", _MLFLOW_WRITER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return store


def falling(n: int, stride: int, spike_at: int | None = None) -> list[tuple[int, float]]:
    """A loss falling from 2.8 towards 0.4 (a little noise), and a 3.4x jump at one step."""
    out = []
    for i in range(n):
        step = i * stride
        v = 0.4 + 2.4 * math.exp(-i / 60) + 0.01 * math.sin(i * 1.7)
        if step == spike_at:
            v *= 3.4
        out.append((step, v))
    return out


def loss_spikes(r: Run, metric: str = "loss") -> list[float]:
    return [s["peak_step"] for s in r.all("spike") if s["metric"] == metric and s["flagged"]]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    long_run = {
        "name": "long",
        "metrics": {
            "train/loss": falling(300, 10, spike_at=1500),
            "val_loss": [(s, v + 0.1) for s, v in falling(300, 10)[::50]],
        },
    }
    short_run = {"name": "short", "metrics": {"train/loss": falling(20, 10)}}
    return mlflow_store(tmp_path_factory.mktemp("mlflow"), [short_run, long_run])


def _runs(store: Path) -> dict[str, Path]:
    (exp,) = [p for p in store.iterdir() if p.name not in ("0", ".trash")]
    out = {}
    for r in exp.iterdir():
        if r.is_dir():
            out[(r / "tags" / "mlflow.runName").read_text().strip()] = r
    return out


@pytest.mark.parametrize("level", ["project", "store", "experiment", "run"])
def test_mlflow_file_store_at_every_level(store: Path, level: str) -> None:
    runs = _runs(store)
    path = {
        "project": store.parent,  # the folder that holds mlruns/
        "store": store,
        "experiment": runs["long"].parent,
        "run": runs["long"],
    }[level]
    r = run(path)
    assert r.code == 1, r.records
    src = r.one("source")
    assert src["format"] == "mlflow"
    assert src["step_key"] == "step"
    assert src["columns"]["loss"] == "train/loss"
    assert src["first_step"] == 0 and src["last_step"] == 2990 and src["rows"] == 300
    assert loss_spikes(r) == [1500]
    assert "MLflow run long" in src["chosen_from"]
    if level != "run":
        assert (
            "the longest history of a train-side loss ('train/loss': 300 values)"
            in (src["chosen_from"])
        )
        assert "also there" in src["chosen_from"] and "20 values" in src["chosen_from"]
    # params and tags are no series
    assert "lr" not in src["columns"].values()


def test_mlflow_run_without_a_loss_lists_its_series(tmp_path: Path) -> None:
    s = mlflow_store(tmp_path, [{"name": "acc", "metrics": {"accuracy_top5": falling(30, 1)}}])
    r = run(s)
    assert r.code == 2
    err = r.one("error")
    assert err["kind"] == "no-loss" and "accuracy_top5" in err["message"]


# ---------------------------------------------------------------------------------------------
# OLMo / OLMo-core console logs


def _olmo_float(value: float) -> str:
    # OLMo olmo/train.py Trainer.log_metrics_to_console.format_float
    if value < 0.0001:
        return str(value)
    if value > 1000:
        return f"{int(value):,d}"
    if value > 100:
        return f"{value:.1f}"
    if value > 10:
        return f"{value:.2f}"
    if value > 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def _core_float(value: float) -> str:
    # OLMo-core src/olmo_core/utils.py format_float (the >= 1e9 branch: B, T, P, E)
    a = abs(value)
    if a >= 1e9:
        for suffix, factor in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("B", 1e9)):
            if a >= factor:
                s = value / factor
                d = 1 if abs(s) > 100 else 2 if abs(s) > 10 else 3 if abs(s) > 1 else 4
                return f"{s:,.{d}f}{suffix}"
    if a < 0.0001:
        return f"{value:.2E}"
    if a >= 1000:
        return f"{int(value):,d}"
    return _olmo_float(value)


def _prefix(name: str, lineno: int, level: str = "INFO") -> str:
    # olmo/util.py setup_logging (non-interactive): asctime, hostname:local_rank, name:lineno
    return f"2024-02-01 10:00:00.000\tjupiter-cs-aus-133:0\t{name}:{lineno}\t{level}\t"


# What an OLMo log prints before its first step: the config and model dumps, a logger's
# source line (olmo.checkpoint:669), a data-order save, a shell trace and Python source.
OLMO_NOISE = [
    _prefix("__main__", 97) + "Configuration:",
    *"""\
TrainConfig(run_name='olmo-small', seed=6198, epoch=None, dry_run=False,
  model=ModelConfig(d_model=2048, n_heads=16, n_layers=16, max_sequence_length=2048),
  save_interval=500, save_folder='/runs/olmo-small', load_path=None, max_duration='3000')
OLMo(
  (transformer): ModuleDict(
    (att_proj): Linear(in_features=2048, out_features=6144, bias=False)
  )
)""".splitlines(),
    _prefix("olmo.checkpoint", 669) + "Saving model and optim state...",
    _prefix("olmo.data.iterable_dataset", 79) + "Global data order indices saved to '/runs/x'",
    "+ export OMP_NUM_THREADS=8",
    "+ step=0",
    "    def save_checkpoint(self, step=0, lr=1e-3):",
    _prefix("olmo.train", 1141) + "Pre-train system metrics",
    "    System/Peak GPU Memory (MB)=12,345",
]


def olmo_log(core: bool, spike_at: int = 1500, resume_at: int | None = None) -> str:
    lines = list(OLMO_NOISE)
    fmt = _core_float if core else _olmo_float
    name = "olmo_core.train.callbacks.console_logger" if core else "olmo.train"
    loss_key = "train/CE loss" if core else "train/CrossEntropyLoss"
    gn_key = "optim/total grad norm" if core else "optim/total_grad_norm"
    start = resume_at or 0
    if resume_at is not None:
        lines.append(
            _prefix("olmo_core.train.trainer", 902) + f"Loading checkpoint from "
            f"'/runs/olmo-small/step{resume_at}'..."
        )
    for i, (step, loss) in enumerate(falling(300, 10, spike_at=spike_at)):
        step += 10
        if step <= start:
            continue
        marker = f"[step={step}/???,epoch=0,eta=1h2m]" if core else f"[step={step}/3000,epoch=0]"
        metrics = {
            loss_key: loss,
            gn_key: 0.5 + 0.01 * (i % 7),
            "throughput/total_tokens": step * 4_194_304 * (300 if core else 1),
            "optim/learning_rate_group0": 4e-4 * min(1.0, step / 200) * 1e-1,
        }
        lines.append(_prefix(name, 1245) + marker)
        lines += [f"    {k}={fmt(v)}" for k, v in metrics.items()]
        if step % 100 == 0:
            label = "c4_en-validation"
            lines.append(_prefix("olmo.train", 1018) + f"Running evaluation for '{label}'...")
            lines.append(_prefix("olmo.train", 1042) + "[eval_step=1/100]")
            lines.append(_prefix("olmo.train", 1047) + label)
            lines.append(f"    eval/{label}/CrossEntropyLoss={fmt(loss + 0.2)}")
        if step % 500 == 0:
            if core:
                lines.append(
                    _prefix("olmo_core.train.trainer", 1008)
                    + f"Saving checkpoint for step {step} to '/runs/olmo-small/step{step}' "
                    "asynchronously..."
                )
                lines.append(
                    _prefix("olmo_core.train.trainer", 1031)
                    + f"Checkpoint for step {step} saved successfully"
                )
            else:
                lines.append(_prefix("olmo.train", 1271) + "Saving checkpoint...")
                lines.append(_prefix("olmo.checkpoint", 669) + "Saving model and optim state...")
                lines.append(
                    _prefix("olmo.train", 1273) + f"Checkpoint saved to /runs/olmo-small/step{step}"
                )
    return "\n".join(lines) + "\n"


def events_of(r: Run, kind: str) -> list[float]:
    return sorted(e["step"] for e in r.all("event") if e["kind"] == kind)


@pytest.mark.parametrize("core", [False, True], ids=["olmo", "olmo-core"])
def test_olmo_console_log(tmp_path: Path, core: bool) -> None:
    p = tmp_path / "train.log"
    p.write_text(olmo_log(core))
    r = run(p)
    src = r.one("source")
    assert src["format"] == "olmo"
    assert src["columns"]["loss"] == ("train/CE loss" if core else "train/CrossEntropyLoss")
    assert src["columns"]["grad_norm"] == (
        "optim/total grad norm" if core else "optim/total_grad_norm"
    )
    # the marker's steps, not the rows: 10, 20, ... 3000
    assert (src["first_step"], src["last_step"], src["rows"], src["stride"]) == (10, 3000, 300, 10)
    assert events_of(r, "checkpoint") == [500, 1000, 1500, 2000, 2500, 3000]
    assert events_of(r, "resume") == []
    assert loss_spikes(r) == [1510]


def test_olmo_core_resume_at_the_step_of_its_checkpoint(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text(olmo_log(True, resume_at=1000))
    r = run(p)
    src = r.one("source")
    assert (src["first_step"], src["last_step"]) == (1010, 3000)
    assert events_of(r, "resume") == [1000]


def test_olmo_values_as_format_float_prints_them(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text(olmo_log(True))
    r = run(p, "--metric", "throughput/total_tokens", "--metric", "loss", "--points", "400")
    (series,) = [s for s in r.all("series") if s["metric"] == "throughput/total_tokens"]
    # 1.26B, 2.52B, ...: OLMo-core's suffixed values read as the numbers they stand for
    assert series["values"][0] == pytest.approx(10 * 4_194_304 * 300, rel=1e-3)


# ---------------------------------------------------------------------------------------------
# a number is a step only where the format says so

SHELL_TRACE = [
    "+ export CUDA_VISIBLE_DEVICES=0,1",
    "+ python train.py --resume_from_checkpoint out/checkpoint-900 --lr=3e-4 --save_steps=500",
    "++ date +%s",
    "+ step=0",
]
PY_SOURCE = [
    "def save_checkpoint(model, step=100):",
    "    torch.save(model.state_dict(), f'ckpt_{step}.pt')  # saving checkpoint step 100",
    "    if args.resume: load_checkpoint(step=700)",
    "    lr = 3e-4",
    "lr: 0.001",
]


def plain_log(spike_at: int = 1500) -> str:
    """A generic ``key=value`` log behind a shell trace and Python source, whose logger prints
    its source line (``olmo.checkpoint:669``) and saves other things into a checkpoint folder."""
    lines = [*SHELL_TRACE, *PY_SOURCE]
    for step, loss in falling(300, 10, spike_at=spike_at):
        step += 10
        lines.append(f"2024-02-01 10:00:00 INFO train.py:88 step={step} loss={loss:.4f} lr=0.0003")
        if step == 20:
            lines.append(
                "2024-02-01 10:00:00 INFO olmo.data:79 Global data order indices saved to "
                "'/runs/x/checkpoints/train_data/global_indices.npy'"
            )
        if step % 1000 == 0:
            lines.append(  # a save's own line: at the step just logged, not at 669
                "2024-02-01 10:00:00 INFO olmo.checkpoint:669 Saving model and optim state..."
            )
            lines.append(
                f"2024-02-01 10:00:00 INFO trainer.py:1273 Saving checkpoint to "
                f"/runs/x/checkpoint-{step}"
            )
    return "\n".join(lines) + "\n"


def test_events_and_series_come_only_from_log_lines_that_state_them(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text(plain_log())
    r = run(p)
    src = r.one("source")
    assert (src["first_step"], src["last_step"], src["rows"]) == (10, 3000, 300)
    # not 669 (a logger's source line), not 0 (data-order indices saved), not 100 or 700 or
    # 900 (Python source, a shell trace)
    assert events_of(r, "checkpoint") == [1000, 2000, 3000]
    assert events_of(r, "resume") == []
    lr = [m for m in r.all("metric") if m["label"] == "lr"]
    assert lr and lr[0]["n"] == 300  # no lr values from the source or the trace
    assert events_of(r, "lr-jump") == []


def test_a_trainer_format_is_found_behind_a_long_shell_trace(tmp_path: Path) -> None:
    trace = [f"+ export VAR_{i}=value_{i} lr=0.{i}" for i in range(1100)]
    body = [
        f" [2024-05-01 10:00:00] iteration {i:8d}/  500000 | consumed samples: {i * 512:12d} |"
        f" learning rate: 1.5E-04 | global batch size:   512 | lm loss: {v:.6E} | loss scale:"
        " 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |"
        for i, v in falling(300, 1)
        if i
    ]
    p = tmp_path / "megatron.log"
    p.write_text("\n".join(trace + body) + "\n")
    r = run(p)
    src = r.one("source")
    assert src["format"] == "megatron"
    assert src["columns"]["loss"] == "lm loss"
    assert (src["first_step"], src["rows"]) == (1, 299)


def test_a_trainer_line_whose_optional_values_stop_still_gives_every_row(tmp_path: Path) -> None:
    """A trainer's lines are read a block at a time, each column converted at once; where
    an optional value stops (llm.c's logger prints lr and norm only when it has them) the
    block is read row by row: every step, and the lr where it was logged."""
    lines = []
    for s, v in falling(400, 1, spike_at=300):
        s += 1
        extra = f" lr:0.000300 norm:0.5{s % 10}" if s <= 100 else ""  # llmc/logger.h
        lines.append(f"s:{s} trl:{v:.4f}{extra}")
        if s % 50 == 0:
            lines.append(f"s:{s} tel:{v + 0.1:.4f}")  # an eval line: the held-out loss
    p = tmp_path / "main.log"
    p.write_text("\n".join(lines) + "\n")
    r = run(p)
    src = r.one("source")
    assert (src["format"], src["rows"], src["last_step"], src["skipped"]) == ("llm.c", 400, 400, 0)
    assert {m["label"]: m["n"] for m in r.all("metric")} == {
        "loss": 400,
        "lr": 100,
        "grad_norm": 100,
        "val_loss": 8,
    }
    assert [s["step"] for s in r.all("spike") if s["metric"] == "loss"] == [301]


# ---------------------------------------------------------------------------------------------
# binary logs: a file that parses is never called text, whatever its series


_WANDB_WRITER = """
import json, sys
import wandb
rows = json.loads(sys.argv[2])
run = wandb.init(dir=sys.argv[1], project="p")
for row in rows:
    wandb.log(row)
run.finish()
"""


def wandb_run(root: Path, rows: list[dict[str, float]]) -> Path:
    """An offline W&B run written by wandb itself; returns the run directory's parent."""
    pytest.importorskip("wandb")
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONFIG_DIR": str(root / "wbconfig"),
        "WANDB_CACHE_DIR": str(root / "wbcache"),
        "WANDB_DATA_DIR": str(root / "wbdata"),
    }
    out = root / "run"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-c", _WANDB_WRITER, str(out), json.dumps(rows)],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    return out


def tb_file(d: Path, scalars: dict[str, list[tuple[int, float]]]) -> Path:
    """A TensorBoard event file from torch's SummaryWriter (new_style: tensor summaries)."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(d))
    for tag, points in scalars.items():
        for step, v in points:
            w.add_scalar(tag, v, step, new_style=True)
    w.close()
    (f,) = d.glob("events.out.tfevents.*")
    return f


def test_tensorboard_file_without_a_loss_lists_its_series(tmp_path: Path) -> None:
    f = tb_file(tmp_path, {"train/accuracy": falling(50, 1), "lr-Adam": falling(50, 1)})
    r = run(f)
    assert r.code == 2
    err = r.one("error")
    assert err["kind"] == "no-loss", err
    assert "not a text log" not in err["message"]
    assert "a TensorBoard event file that parses" in err["message"]
    assert "train/accuracy" in err["numeric"] and "lr-Adam" in err["message"]


def test_wandb_file_without_a_loss_lists_its_series(tmp_path: Path) -> None:
    rows = [{"top1": 0.5 + i / 100, "throughput": 1000.0 + 7 * math.sin(i)} for i in range(40)]
    (f,) = wandb_run(tmp_path, rows).glob("wandb/offline-run-*/run-*.wandb")
    r = run(f)
    err = r.one("error")
    assert err["kind"] == "no-loss", err
    assert "a W&B run file that parses" in err["message"]
    assert "top1" in err["numeric"] and "throughput" in err["numeric"]


def _keras_event_file(d: Path, points: list[tuple[int, float]], content: bool) -> Path:
    """A TF2 / Keras event file (``*.v2``): each scalar a float tensor summary of the scalars
    plugin, its value in ``tensor_content`` (TF2's C++ writer: AsProtoTensorContent) or in
    ``float_val``, after a ``keras`` string tensor (the model config), as the Keras
    TensorBoard callback writes them; written with tensorboard's own EventFileWriter."""
    import struct
    import time

    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    w = EventFileWriter(str(d), filename_suffix=".v2")
    config = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b'{"class_name": 1}'])
    w.add_event(
        event_pb2.Event(
            wall_time=time.time(),
            summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="keras", tensor=config)]
            ),
        )
    )
    for step, v in points:
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)
        if content:
            t.tensor_content = struct.pack("<f", v)
        else:
            t.float_val.append(v)
        value = summary_pb2.Summary.Value(
            tag="epoch_loss", tensor=t, metadata=summary_pb2.SummaryMetadata(plugin_data=plugin)
        )
        w.add_event(
            event_pb2.Event(
                wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])
            )
        )
    w.close()
    (f,) = d.glob("events.out.tfevents.*.v2")
    return f


@pytest.mark.parametrize("content", [True, False], ids=["tensor_content", "float_val"])
def test_keras_tf2_event_files_are_read(tmp_path: Path, content: bool) -> None:
    pts = [(s, v) for s, v in falling(40, 1, spike_at=25)]
    f = _keras_event_file(tmp_path, pts, content)
    r = run(f)
    src = r.one("source")
    assert src["format"] == "tensorboard" and src["columns"]["loss"] == "epoch_loss"
    assert src["rows"] == 40 and loss_spikes(r) == [25]


# ---------------------------------------------------------------------------------------------
# the file of a run directory: one rule, said in the output


_LIGHTNING_RUN = """
import sys, warnings
import torch
import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
warnings.filterwarnings("ignore")
torch.manual_seed(0)
X = torch.randn(64, 4)
Y = X.sum(1, keepdim=True)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=4)

class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def _loss(self, b):
        return torch.nn.functional.mse_loss(self.net(b[0]), b[1])
    def training_step(self, b, i):
        loss = self._loss(b)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss
    def validation_step(self, b, i):
        self.log("val_loss", self._loss(b))
    def test_step(self, b, i):
        self.log("test_loss", self._loss(b))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

m = M()
for stage in ("fit", "validate", "test"):
    logger = TensorBoardLogger(sys.argv[1], name="lightning_logs", version=0)
    t = L.Trainer(max_epochs=3, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
                  enable_checkpointing=False, enable_model_summary=False, accelerator="cpu")
    getattr(t, stage)(m, data, data) if stage == "fit" else getattr(t, stage)(m, data)
"""


@pytest.fixture(scope="module")
def lightning_version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Lightning ``version_0/``: fit, validate and test, one event file each."""
    pytest.importorskip("lightning")
    root = tmp_path_factory.mktemp("lightning")
    proc = subprocess.run(
        [sys.executable, "-c", _LIGHTNING_RUN, str(root)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = root / "lightning_logs" / "version_0"
    assert len(list(v.glob("events.out.tfevents.*"))) == 3
    return v


def _fit_file(version: Path) -> str:
    """The event file with the training steps (by content: the one with train_loss_step)."""
    read_log = shipped("trainlog.read").read_log
    for f in sorted(version.glob("events.out.tfevents.*")):
        if "train_loss_step" in read_log(str(f), "auto", None)[0].keys:
            return f.name
    raise AssertionError("no fit event file")


def test_lightning_version_dir_reads_the_fit_file_and_says_why(lightning_version: Path) -> None:
    r = run(lightning_version)
    src = r.one("source")
    fit = _fit_file(lightning_version)
    assert src["path"].endswith(fit), src
    assert src["columns"]["loss"] == "train_loss_step" and src["rows"] == 48
    why = src["chosen_from"]
    assert why.startswith(fit + " (TensorBoard event file): the longest history of a train-side")
    assert "also there:" in why and "held-out only: 'val_loss'" in why
    assert "held-out only: 'test_loss'" in why


def test_diagnose_run_reads_the_file_train_log_reads(
    lightning_version: Path, tmp_path: Path
) -> None:
    import remotekit
    from remotekit.diagnostics import diagnose as dg

    with remotekit.local_target() as t:
        rep = dg.diagnose(
            t, run_dir=str(lightning_version), env=smi_env(make_bin_dir(tmp_path), "healthy")
        )
    log = rep.section("train-log")
    assert log is not None and log.report is not None and log.report.source is not None
    assert log.report.source.path == run(lightning_version).one("source")["path"]
    assert any(
        line.startswith(f"log: {log.report.source.path} (tensorboard") for line in rep.verdict
    )


def test_keras_train_folder_over_validation(tmp_path: Path) -> None:
    train = _keras_event_file(tmp_path / "logs" / "train", falling(20, 1), True)
    val = _keras_event_file(tmp_path / "logs" / "validation", falling(20, 1), True)
    os.utime(train, (1, 1))  # the validation file is the newer one
    r = run(tmp_path / "logs")
    src = r.one("source")
    assert src["path"] == str(train)
    held_out = f"validation/{val.name} (TensorBoard event file; a held-out folder: 'epoch_loss'"
    assert held_out in src["chosen_from"]


def test_a_run_directory_of_several_kinds_reads_the_longest_history(tmp_path: Path) -> None:
    """The kinds of log in a run directory are ranked by what they hold, not by their names:
    a console log with the whole run beats a metrics.csv that stopped early (its name was
    preferred before), and what else was there is said with its loss and length."""
    (tmp_path / "metrics.csv").write_text(
        "step,train_loss\n" + "".join(f"{s},{v}\n" for s, v in falling(100, 1))
    )
    (tmp_path / "train.log").write_text(
        "".join(f"step={s} loss={v:.4f}\n" for s, v in falling(600, 1, spike_at=400))
    )
    src = run(tmp_path).one("source")
    assert src["path"].endswith("train.log") and src["rows"] == 600
    assert src["chosen_from"] == (
        "train.log (text log): the longest history of a train-side loss ('loss': 600 values); "
        "also there: metrics.csv (Lightning metrics.csv; 'train_loss': 100 values)"
    )


def test_as_long_a_history_in_two_kinds_reads_the_preferred_one(tmp_path: Path) -> None:
    """LLaMA-Factory writes the same history twice: trainer_log.jsonl as it goes, and the HF
    trainer_state.json at the end (the newer file); as long, the run's own log is read."""
    rows = [{"current_steps": s + 1, "loss": v, "lr": 1e-4} for s, v in falling(300, 1)]
    (tmp_path / "trainer_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = {"log_history": [{"step": r["current_steps"], "loss": r["loss"]} for r in rows]}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    os.utime(tmp_path / "trainer_log.jsonl", (1, 1))
    why = run(tmp_path).one("source")["chosen_from"]
    assert why.startswith(
        "trainer_log.jsonl (LLaMA-Factory trainer_log.jsonl): the longest history of a "
        "train-side loss ('loss': 300 values), and of as long ones the preferred kind; also "
        "there: trainer_state.json (HF trainer_state.json; 'loss': 300 values)"
    )


def test_a_large_candidate_is_measured_on_its_start(tmp_path: Path) -> None:
    """A candidate over 1 MiB is read to its first MiB to be ranked, its length scaled (and
    said to be an estimate); the one chosen is then read whole."""
    big = [json.dumps({"step": s, "loss": v, "pad": "x" * 200}) for s, v in falling(12000, 1)]
    (tmp_path / "big.jsonl").write_text("\n".join(big) + "\n")
    assert (tmp_path / "big.jsonl").stat().st_size > 2 << 20
    (tmp_path / "small.log").write_text("".join(f"step={s} loss={v}\n" for s, v in falling(50, 1)))
    src = run(tmp_path).one("source")
    assert src["path"].endswith("big.jsonl") and src["rows"] == 12000
    m = re.search(r"\('loss': ~(\d+) values\)", src["chosen_from"])
    assert m and 11000 < int(m.group(1)) < 13000, src["chosen_from"]


# ---------------------------------------------------------------------------------------------
# damage noticed


def test_wandb_history_cut_short_of_its_summary_is_warned(tmp_path: Path) -> None:
    rows = [{"loss": v, "lr": 1e-3} for _, v in falling(3000, 1)]
    (f,) = wandb_run(tmp_path, rows).glob("wandb/offline-run-*/run-*.wandb")
    # what an online run (or `wandb sync`) leaves beside it: files/wandb-summary.json, the
    # last value of each key (wandb/sdk/internal/sender.py writes it; offline runs do not)
    summary = {"_step": 2999, "loss": rows[-1]["loss"], "_runtime": 61.2, "_wandb": {"runtime": 61}}
    (f.parent / "files" / "wandb-summary.json").write_text(json.dumps(summary))
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 3)
    r = run(f)
    last = r.one("source")["last_step"]
    assert 0 < last < 2999
    (w,) = [w for w in (x["message"] for x in r.all("warning")) if "cut short" in w]
    assert f"says the run reached _step 2999, but the history in {f.name} stops at {last}" in w


def test_wandb_run_dir_without_its_wandb_file_says_what_is_missing(tmp_path: Path) -> None:
    rows = [{"loss": v} for _, v in falling(50, 1)]
    (f,) = wandb_run(tmp_path, rows).glob("wandb/offline-run-*/run-*.wandb")
    f.unlink()
    (f.parent / "files" / "output.log").write_text("wandb: syncing\nEpoch 1 done\n")
    r = run(f.parent)
    err = r.one("error")
    assert "numeric columns: none" not in err["message"]
    assert "W&B run directory without its run-*.wandb file" in err["message"]
    assert "files/output.log" in err["message"] and "logs/debug.log" in err["message"]
    (f.parent / "files" / "output.log").unlink()  # nothing left to read: said so, not a guess
    err = run(f.parent).one("error")["message"]
    assert "W&B run directory without its run-*.wandb file" in err and "logs/debug.log" in err
    assert "copy the run's .wandb file too" in err


def test_a_wandb_run_whose_only_history_is_its_output_log(tmp_path: Path) -> None:
    """W&B copies what the script printed to files/output.log. Without the run's .wandb file
    that is all the run directory holds of the training: it is read (here an HF Trainer's
    printed log dicts) with a warning that the .wandb is missing; W&B's own debug logs are not
    candidates."""
    (f,) = wandb_run(tmp_path, [{"x": 1.0}]).glob("wandb/offline-run-*/run-*.wandb")
    f.unlink()
    lines = ["***** Running training *****", "  Num examples = 12800"]
    for _, v in falling(200, 1, spike_at=150):
        # transformers/trainer.py Trainer.log(): print of the logs dict, every logging step
        lines.append(repr({"loss": round(v, 4), "grad_norm": 0.5, "learning_rate": 5e-05}))
    (f.parent / "files" / "output.log").write_text("\n".join(lines) + "\n")
    r = run(tmp_path / "run")
    src = r.one("source")
    assert src["path"].endswith("files/output.log") and src["rows"] == 200
    assert src["chosen_from"].startswith(f"wandb/{f.parent.name}/files/output.log (W&B console)")
    (w,) = [x["message"] for x in r.all("warning") if ".wandb" in x["message"]]
    assert "without its run-*.wandb file" in w and "read files/output.log" in w
    assert "logs/debug.log" in w  # what the folder holds
    assert [s["step"] for s in r.all("spike") if s["metric"] == "loss"] == [150]


def test_olmo_rich_console_log_and_metric_loss_by_its_name(tmp_path: Path) -> None:
    # olmo/util.py RichHandler (an interactive run): time "[%Y-%m-%d %X]", the level padded to
    # 8, "[{name}:{lineno}, rank={local_rank}]", the message; lines start with "[", as JSON does
    lines = []
    for step, loss in falling(40, 1, spike_at=30):
        step += 1
        lines.append(
            f"[2024-04-18 14:24:11] INFO     [olmo.train:729, rank=0] [step={step}/739328]"
        )
        lines.append(f"    train/CrossEntropyLoss={_olmo_float(loss)}")
        lines.append(f"    throughput/total_tokens={_olmo_float(step * 4_194_304.0)}")
    p = tmp_path / "console.log"
    p.write_text("\n".join(lines) + "\n")
    r = run(p, "--metric", "loss", "--metric", "throughput/total_tokens")
    src = r.one("source")
    assert src["format"] == "olmo" and (src["first_step"], src["last_step"]) == (1, 40)
    # --metric loss finds the loss by what its name says, as the default choice does
    assert src["columns"] == {
        "loss": "train/CrossEntropyLoss",
        "throughput/total_tokens": "throughput/total_tokens",
    }
    assert loss_spikes(r) == [31]


@pytest.mark.parametrize("writer", ["ultralytics", "keras"])
def test_a_per_epoch_log_without_a_step_has_the_epoch_for_its_steps(
    tmp_path: Path, writer: str
) -> None:
    """ultralytics' results.csv (engine/trainer.py save_metrics: 'epoch' then the metrics,
    each cell '%23s') and Keras's CSVLogger ('epoch' first, then the logs' keys sorted) have
    one row per epoch and no step column: the epoch is the step axis, not the row number,
    and no row is an 'epoch starts' event."""
    if writer == "ultralytics":
        cols = ["epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss", "val/box_loss"]
        lines = [",".join(f"{c:>23}" for c in cols)]
        for e, v in falling(40, 1):
            lines.append(",".join(f"{x:>23}" for x in (e, v, v * 1.5, 1.1, v + 0.2)))
    else:
        lines = ["epoch,accuracy,loss,val_accuracy,val_loss"]
        lines += [f"{e},0.9,{v},0.8,{v + 0.2}" for e, v in falling(40, 1)]
    p = tmp_path / ("results.csv" if writer == "ultralytics" else "training.log")
    p.write_text("\n".join(lines) + "\n")
    r = run(p, "--format", "csv")
    src = r.one("source")
    assert src["step_key"] == "epoch" and (src["first_step"], src["last_step"]) == (0, 39)
    assert events_of(r, "epoch") == []
    assert any("the epoch is the step axis" in w["message"] for w in r.all("warning"))


# ---------------------------------------------------------------------------------------------
# runs of projects we did not write. Copies whose licenses allow it are committed under
# tests/data/public (each folder with its LICENSE and a NOTICE.md naming source, commit and
# what was cut); tests/public_runs.md names each source, commit, path and license. A copy in
# REMOTEKIT_PUBLIC_RUNS=DIR is read before the committed one; the run too large to commit
# (the whole iqu955sp, 2.9 MB) is read only from there, and its test skips without it.

PUBLIC_COMMITTED = DATA / "public"
PUBLIC = [Path(d) for d in [os.environ.get("REMOTEKIT_PUBLIC_RUNS")] if d] + [PUBLIC_COMMITTED]


def public(run_dir: str) -> Path:
    """``run_dir`` (``<name>/<run>``) in REMOTEKIT_PUBLIC_RUNS, else in tests/data/public."""
    for root in PUBLIC:
        if (root / run_dir).is_dir():
            return root / run_dir
    pytest.skip(f"no {run_dir}/ in {', '.join(map(str, PUBLIC))} (see tests/public_runs.md)")


def test_public_wandb_run_cut_short_of_its_summary() -> None:
    r = run(public("alpaca-kd-wandb/run-20231102_032820-iqu955sp"))
    src = r.one("source")
    assert src["format"] == "wandb" and src["step_key"] == "train/global_step"
    assert src["columns"]["loss"] == "train/loss"
    assert (src["first_step"], src["last_step"], src["rows"]) == (1, 30, 30)
    assert any(
        "says the run reached train/global_step 1218, but the history in run-iqu955sp.wandb "
        "stops at 30" in w["message"]
        for w in r.all("warning")
    )
    assert r.all("spike") == []


def test_public_wandb_run_whose_loss_drops_at_each_epoch_has_no_spike() -> None:
    """The whole run: the loss falls to ~1.1, drops to ~0.65 at the second epoch and to
    ~0.33 at the third, with per-batch noise of ~0.04. The trend preset's first calibration
    flagged a 0.60 at step 1082 (6.1 sigma of that noise); by hand no spike."""
    r = run(public("alpaca-kd-wandb/run-20231102_032820-iqu955sp-whole"))
    src = r.one("source")
    assert (src["rows"], src["last_step"]) == (1218, 1218)
    assert r.one("preset")["name"] == "trend"
    assert sorted(e["step"] for e in r.all("event") if e["kind"] == "epoch") == [405, 811, 1218]
    assert r.all("spike") == [] and r.code == 0
    assert "passed over: 'train/train_loss' (set once)" in src["why"]["loss"]


def test_public_wandb_run_of_one_step_claims_no_schedule() -> None:
    r = run(public("alpaca-kd-wandb/run-20231104_073205-5qvjca60"))
    src = r.one("source")
    assert src["rows"] == 1 and src["columns"]["lr"] == "train/learning_rate"
    # one lr value is no evidence of a missing warmup
    assert r.all("event") == [] and r.all("spike") == []


def test_public_lightning_csvlogger_run_with_its_val_loss() -> None:
    """A Lightning CSVLogger ``version_0/`` (Duccioo/Gaussian-Mixture-Neural-Network, MIT):
    700 epochs of 10 steps; ``train_loss`` one batch every 50 steps (140 values) and
    ``val_loss`` once an epoch (700), each in a row of its own. By hand: the batch loss is
    noisy (2e-4..3.9e-3) and falls slowly; val_loss falls from 3.3e-3 to a plateau of 1.35e-3
    by epoch 8, falls again from epoch ~100 to ~3e-4 at epochs 350-470, then rises slowly to
    ~5e-4 with growing noise (overfitting). Its largest excursions that come back within a
    few epochs: epochs 206 and 210-212 (to 1.1e-3 against ~5.5e-4) and 287-288 (to 8.8e-4
    against ~3.9e-4); none stands out from the others. ``trend`` flags one of them (2129)."""
    r = run(public("gmnn-lightning/lightning_logs/version_0"))
    src = r.one("source")
    assert src["format"] == "csv" and src["step_key"] == "step"
    assert src["chosen_from"].startswith("metrics.csv (Lightning metrics.csv)")
    assert src["columns"] == {"loss": "train_loss", "val_loss": "val_loss", "epoch": "epoch"}
    assert (src["rows"], src["first_step"], src["last_step"]) == (700, 9, 6999)
    assert {m["label"]: m["n"] for m in r.all("metric")} == {"loss": 140, "val_loss": 700}
    assert len(events_of(r, "epoch")) == 699
    assert r.one("preset")["name"] == "trend"
    assert [s for s in r.all("spike") if s["metric"] != "val_loss"] == []
    excursions = {2069, 2109, 2119, 2129, 2879, 2889}  # the ones seen by hand
    flagged = {s["peak_step"] for s in r.all("spike")}
    assert flagged <= excursions and len(flagged) <= 2, flagged


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_run_that_stopped_at_its_start_claims_no_lr_schedule(tmp_path: Path, n: int) -> None:
    """Seen on a public one-step W&B run: 'lr at step 1 is 1.3e-06, already its peak: no
    warmup', said from a single value. A schedule needs a few lr values to be judged."""
    log = tmp_path / "train.jsonl"
    rows = [{"step": s, "loss": 1.6 - 0.01 * s, "lr": 1.333e-06} for s in range(1, n + 1)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run(log)
    assert r.one("source")["rows"] == n
    assert [e for e in r.all("event") if "warmup" in str(e)] == []


def test_mlflow_run_with_hostile_metric_files(tmp_path: Path) -> None:
    """A FIFO among the metric files (it must not block), a line of 2 MiB without a
    newline, a malformed line: the good metric is read, the rest skipped and said."""
    s = mlflow_store(tmp_path, [{"name": "r", "metrics": {"train_loss": falling(30, 1)}}])
    (run_dir,) = [p for p in _runs(s).values()]
    os.mkfifo(run_dir / "metrics" / "stuck")
    (run_dir / "metrics" / "long").write_bytes(b"1 " + b"9" * (2 << 20))
    with open(run_dir / "metrics" / "train_loss", "a") as f:
        f.write("not a metric line\n")
    r = run(run_dir)
    src = r.one("source")
    assert src["format"] == "mlflow" and src["rows"] == 30 and src["bad_lines"] == 1
    said = [w["message"] for w in r.all("warning")]
    assert any("metric 'stuck' not read" in w for w in said)
    assert any("metric 'long': 1 over-long lines skipped" in w for w in said)
