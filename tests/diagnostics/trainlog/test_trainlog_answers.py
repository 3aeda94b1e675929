"""Answers of remote/trainlog.py that must hold on real logs, not only on our own.

Each test is a failure class seen on public training logs (issue 9), in the shape those
logs have: HF Trainer / TRL ``log_history`` rows logged every 10 or 25 steps with the loss
rounded to 4 decimals, TRL's running ``num_tokens``, checkpoint directories as HF Trainer,
DeepSpeed, Megatron and nanoGPT-style loops name them. The logs are written here, row by
row, since what is under test is the reading of their shape; the script runs as the
container runs it (a subprocess, JSON lines out).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import remotekit
import remotekit.diagnostics.trainlog as tl
from remotekit.diagnostics import diagnose as dg
from tests import trainlog_factory as factory
from tests.conftest import write_inventory
from tests.harness import ROOT, cli
from tests.smi import make_bin_dir, smi_env

SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"


def run(path: Path, *args: Any) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(path), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records and records[-1]["type"] == "done", proc.stdout + proc.stderr
    assert records[-1]["exit_code"] == proc.returncode
    return proc.returncode, records


def of(records: list[dict[str, Any]], rtype: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == rtype]


def one(records: list[dict[str, Any]], rtype: str) -> dict[str, Any]:
    found = of(records, rtype)
    assert len(found) == 1, (rtype, found)
    return found[0]


def write_rows(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def hf_rows(
    n: int,
    *,
    stride: int = 10,
    seed: int = 0,
    loss: Any = None,
    extra: Any = None,
) -> list[dict[str, Any]]:
    """``log_history`` rows as HF Trainer writes them (``logging_steps=stride``): loss and
    grad_norm rounded to 4 decimals, a linear-decay learning rate, a fractional epoch."""
    rng = random.Random(seed)
    rows = []
    for k in range(1, n + 1):
        step = k * stride
        value = loss(step, rng) if loss else 2.0 + rng.gauss(0, 0.02)
        row = {
            "epoch": round(k / n * 3, 4),
            "grad_norm": round(0.8 + rng.gauss(0, 0.05), 4),
            "learning_rate": 2e-5 * (1 - k / (n + 1)),
            "loss": round(value, 4),
            "step": step,
        }
        if extra:
            row.update(extra(k, step, rng))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# spikes: the peak's own step and value; a return to baseline ends an incident


def test_a_blip_at_a_save_and_a_large_spike_three_rows_later_are_two_incidents(
    tmp_path: Path,
) -> None:
    bumps = {2000: 2.2, 2030: 6.0}  # loss back at ~2.0 at 2010 and 2020

    def loss(step: int, rng: random.Random) -> float:
        return bumps.get(step, 2.0 + rng.gauss(0, 0.02))

    log = write_rows(tmp_path / "trainer_log.jsonl", hf_rows(300, loss=loss))
    code, recs = run(log, "--ckpt-steps", "1000,2000,3000")
    assert code == 1
    tol = one(recs, "source")["tolerance"]
    spikes = {s["step"]: s for s in of(recs, "spike") if s["metric"] == "loss"}
    assert set(spikes) == {2000, 2030}
    big, blip = spikes[2030], spikes[2000]
    assert (big["value"], big["onset_step"], big["peak_step"]) == (6.0, 2030, 2030)
    assert blip["value"] == 2.2 and blip["recovery_steps"] == 10
    # the large spike is nowhere near a save; the blip is at one
    assert abs(big["distance"]) > tol and blip["distance"] == 0
    corr = next(c for c in of(recs, "correlation") if c["kind"] == "checkpoint")
    assert (corr["at_events"], corr["spikes"]) == (1, 2)
    text = tl.render_report(tl.build_report("local", str(log), recs))
    assert "2 incident(s)" in text and "1 at no event: step 2030" in text


def test_close_incidents_are_told_by_the_larger_ones_step(tmp_path: Path) -> None:
    """Logged every step: the blip and the spike 3 steps later are within one tolerance;
    the diagnosis names the larger one's step, not the blip's."""
    bumps = {300: 2.2, 303: 6.0}

    def loss(step: int, rng: random.Random) -> float:
        return bumps.get(step, 2.0 + rng.gauss(0, 0.02))

    log = write_rows(tmp_path / "log.jsonl", hf_rows(600, stride=1, loss=loss))
    _, recs = run(log)
    assert {s["step"] for s in of(recs, "spike") if s["metric"] == "loss"} == {300, 303}
    report = tl.build_report("local", str(log), recs)
    assert any("at no event: step 303" in line for line in report.diagnosis), report.diagnosis


def test_one_incident_rising_over_rows_is_reported_at_its_peak(tmp_path: Path) -> None:
    climb = {1500: 3.0, 1510: 4.5, 1520: 7.0, 1530: 3.5}  # no return to baseline between

    def loss(step: int, rng: random.Random) -> float:
        return climb.get(step, 2.0 + rng.gauss(0, 0.02))

    log = write_rows(tmp_path / "log.jsonl", hf_rows(300, loss=loss))
    _, recs = run(log)
    spikes = [s for s in of(recs, "spike") if s["metric"] == "loss"]
    assert len(spikes) == 1
    s = spikes[0]
    assert (s["step"], s["value"], s["onset_step"]) == (1520, 7.0, 1500)
    assert s["flagged"] == 4


# ---------------------------------------------------------------------------------------------
# running totals are never batch sizes


def _trl_extra(start: float) -> Any:
    """TRL's ``num_tokens``: tokens seen so far (a running total), batches of ~6144 tokens."""
    seen = [start]

    def extra(k: int, step: int, rng: random.Random) -> dict[str, Any]:
        seen[0] += 10 * rng.choice((6144, 6144, 6100, 6200, 5890))
        return {"num_tokens": float(seen[0]), "mean_token_accuracy": 0.61 + rng.gauss(0, 0.01)}

    return extra


@pytest.mark.parametrize("start", [0.0, 1.2e9], ids=["fresh", "resumed-high"])
def test_a_running_token_count_gives_per_step_batches_and_says_so(
    tmp_path: Path, start: float
) -> None:
    log = write_rows(tmp_path / "trl.jsonl", hf_rows(400, extra=_trl_extra(start)))
    _, recs = run(log)
    comp = one(recs, "composition")
    assert comp["key"] == "tokens"
    assert comp["derived"] and "running total 'num_tokens'" in comp["derived"]
    sizes = [float(b["bucket"]) for b in comp["buckets"] if b["bucket"] != "-"]
    assert sizes and max(sizes) <= 6200  # per step, never the totals (61440, 122880, ...)
    assert "differences of the running total 'num_tokens'" in comp["verdict"]
    assert any("running total" in w["message"] for w in of(recs, "warning"))
    text = tl.render_report(tl.build_report("local", str(log), recs))
    assert "tokens per step, from the differences of the running total 'num_tokens'" in text


def test_a_length_sorted_batch_size_is_not_a_running_total(tmp_path: Path) -> None:
    """Per-batch tokens in a length-sorted order never go down either, but repeat."""

    def extra(k: int, step: int, rng: random.Random) -> dict[str, Any]:
        return {"num_tokens": float(1024 * (1 + (k - 1) * 4 // 400))}

    log = write_rows(tmp_path / "sorted.jsonl", hf_rows(400, extra=extra))
    _, recs = run(log)
    comp = one(recs, "composition")
    assert comp["key"] == "tokens" and comp["derived"] is None
    assert {b["bucket"] for b in comp["buckets"]} == {"1024", "2048", "3072", "4096"}


# ---------------------------------------------------------------------------------------------
# rounding and stride


def test_a_loss_rounded_to_few_values_has_no_shape_or_period_finding(tmp_path: Path) -> None:
    """Late in training HF's 4-decimal loss flips between two values: not a bimodal loss."""

    def loss(step: int, rng: random.Random) -> float:
        return 0.01005 + rng.gauss(0, 0.00002)

    log = write_rows(tmp_path / "state.jsonl", hf_rows(800, stride=25, loss=loss))
    code, recs = run(log)
    assert code == 0, one(recs, "composition")["verdict"]
    dist, per, comp = one(recs, "distribution"), one(recs, "periodicity"), one(recs, "composition")
    assert dist["shape"] == "quantised" and dist["quantised"]["distinct"] <= 3
    assert math.isclose(dist["quantised"]["quantum"], 1e-4, rel_tol=1e-6)
    assert per["quantised"] and not per["periodic"]
    assert not comp["finding"] and "distinct values" in comp["verdict"]
    assert "batch-composition" not in one(recs, "summary")["findings"]
    text = tl.render_report(tl.build_report("local", str(log), recs))
    assert "too coarse" in text and "exit 0 (OK)" in text
    assert "only 2 distinct values in steps of 0.0001" in text and "bimodality" not in text


def test_a_period_is_told_in_steps_not_log_rows(tmp_path: Path) -> None:
    """Every 25 steps a row; the loss repeats every 4 rows: that is every 100 steps."""

    def loss(step: int, rng: random.Random) -> float:
        return 1.2 + 0.05 * math.sin(2 * math.pi * step / 100) + rng.gauss(0, 0.01)

    log = write_rows(tmp_path / "state.jsonl", hf_rows(800, stride=25, loss=loss))
    code, recs = run(log)
    per = one(recs, "periodicity")
    assert per["periodic"] and (per["lag"], per["lag_rows"], per["stride"]) == (100, 4, 25)
    assert code == 1
    assert "repeats every 100 steps" in one(recs, "composition")["verdict"]
    text = tl.render_report(tl.build_report("local", str(log), recs))
    assert "Periodicity: repeats every 100 steps, 4 log rows" in text


def test_rounding_does_not_hide_real_bucket_modes(tmp_path: Path) -> None:
    """The story's trimodal loss, logged with 4 decimals as HF does: still the verdict."""
    rows = [{**r, "loss": round(r["loss"], 4)} for r in factory.cached("homogeneous", 600)]
    code, recs = run(factory.write_jsonl(rows, tmp_path / "homo.jsonl"))
    dist, comp = one(recs, "distribution"), one(recs, "composition")
    assert dist["quantised"] is None and dist["shape"] != "quantised"
    assert comp["finding"] and comp["modes_match"] and code == 1


# ---------------------------------------------------------------------------------------------
# saves from the checkpoints themselves

SPIKES = (200, 330, 400)  # spikes planted by the factory: 200 and 400 at saves, 330 at none
SAVES = (200, 400, 500)


def _torch_file(path: Path, step: int, *, key: str) -> None:
    """A real torch checkpoint whose name says nothing: model, an Adam state (per-parameter
    ``step`` counts as tensors), the step under ``key``, a 0-d ``best_val_loss``."""
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), key: step}
    torch.save({**state, "best_val_loss": torch.tensor(1.25)}, path)


def _layout(root: Path, kind: str) -> Path:
    """Saves at :data:`SAVES` as each trainer lays them out; the directory to name."""
    root.mkdir(parents=True)
    for s in SAVES:
        if kind == "hf":  # HF Trainer: checkpoint-N/ with trainer_state.json
            (root / f"checkpoint-{s}").mkdir()
            (root / f"checkpoint-{s}" / "trainer_state.json").write_text(
                json.dumps({"global_step": s})
            )
        elif kind == "deepspeed":  # global_stepN/mp_rank_00_model_states.pt, `latest`
            (root / f"global_step{s}").mkdir()
            (root / f"global_step{s}" / "mp_rank_00_model_states.pt").write_bytes(b"")
            (root / "latest").write_text(f"global_step{s}")
        elif kind == "megatron":  # iter_000000N/, latest_checkpointed_iteration.txt
            (root / f"iter_{s:07d}").mkdir()
            (root / "latest_checkpointed_iteration.txt").write_text(str(s))
        elif kind == "lightning":  # ModelCheckpoint's default file name
            _torch_file(root / f"epoch=0-step={s}.ckpt", s, key="global_step")
        elif kind == "llmc":  # llm.c: model_%08d.bin and state_%08d_%05d.bin
            (root / f"model_{s:08d}.bin").write_bytes(b"\0" * 16)
            (root / f"state_{s:08d}_00000.bin").write_bytes(b"\0" * 16)
        elif kind == "own-keys":  # names without steps: the files' own iter_num
            _torch_file(root / f"snapshot-{'abc'[SAVES.index(s)]}.pt", s, key="iter_num")
    if kind == "run-dir":  # a run directory: checkpoints/ beside the logs and samples
        _layout(root / "checkpoints", "hf")
        (root / "trainer_log.jsonl").write_text("")
        (root / "samples_step1000.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root


@pytest.mark.parametrize(
    "kind", ["hf", "deepspeed", "megatron", "lightning", "llmc", "own-keys", "run-dir"]
)
def test_are_the_spikes_at_saves_needs_no_step_list(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("torch")
    rows = factory.cached("homogeneous", 600, SPIKES)
    log = factory.write_jsonl(rows, tmp_path / "plain.jsonl")  # no save lines in the log
    ckpts = _layout(tmp_path / "out", kind)
    _, recs = run(log, "--checkpoints", ckpts)
    saves = {e["step"]: e for e in of(recs, "event") if e["kind"] == "checkpoint"}
    assert set(saves) == set(SAVES), saves
    assert all(e["source"] == "ckpt-dir" for e in saves.values())
    corr = next(c for c in of(recs, "correlation") if c["kind"] == "checkpoint")
    assert (corr["at_events"], corr["spikes"], corr["events"]) == (2, 3, 3)
    assert corr["beyond_chance"] and corr["p_value"] < 0.05
    if kind == "own-keys":
        assert "iter_num of" in saves[400]["detail"]


def test_a_nanogpt_ckpt_pt_gives_its_iter_num_and_never_unpickles(tmp_path: Path) -> None:
    """nanoGPT overwrites one ckpt.pt: its iter_num is the last save. The file's pickle
    would run code if loaded: reading the step must not load it."""
    pytest.importorskip("torch")
    import torch

    out = tmp_path / "out"
    out.mkdir()
    _torch_file(out / "ckpt.pt", 400, key="iter_num")
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    torch.save({"iter_num": 200, "payload": Evil()}, out / "other.pt")
    rows = factory.cached("homogeneous", 600, SPIKES)
    _, recs = run(factory.write_jsonl(rows, tmp_path / "log.jsonl"), "--checkpoints", out)
    saves = {e["step"]: e["detail"] for e in of(recs, "event") if e["kind"] == "checkpoint"}
    assert saves == {200: f"iter_num of {out / 'other.pt'}", 400: f"iter_num of {out / 'ckpt.pt'}"}
    assert not marker.exists()


def test_safetensors_metadata_and_lightning_keys_give_the_steps(tmp_path: Path) -> None:
    """Names without steps: a safetensors header's ``__metadata__`` step, a Lightning-style
    file's top-level ``global_step``."""
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    out = tmp_path / "weights"
    out.mkdir()
    for name, step in (("first", 200), ("second", 400)):
        st.save_file({"w": torch.zeros(2, 2)}, out / f"{name}.safetensors", {"step": str(step)})
    _torch_file(out / "last.ckpt", 500, key="global_step")
    rows = factory.cached("homogeneous", 600, SPIKES)
    _, recs = run(factory.write_jsonl(rows, tmp_path / "log.jsonl"), "--checkpoints", out)
    saves = {e["step"]: e["detail"] for e in of(recs, "event") if e["kind"] == "checkpoint"}
    assert saves == {
        200: f"step of {out / 'first.safetensors'}",
        400: f"step of {out / 'second.safetensors'}",
        500: f"global_step of {out / 'last.ckpt'}",
    }


def test_train_log_takes_the_hosts_checkpoints(tmp_path: Path) -> None:
    """hosts.yaml `checkpoints:` is where train-log looks for saves when none are named."""
    rows = factory.cached("homogeneous", 600, SPIKES)
    log = factory.write_jsonl(rows, tmp_path / "plain.jsonl")
    ckpts = _layout(tmp_path / "ckpts", "hf")
    hosts = tmp_path / "hosts.yaml"
    write_inventory(hosts, {"local": {"python": sys.executable, "checkpoints": str(ckpts)}})
    r = cli("train-log", "--inventory", str(hosts), "--log", str(log), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "checkpoint 200 (+0)" in r.stdout and "2 of 3" in r.stdout
    assert "more than chance" in r.stdout


@pytest.mark.parametrize("kind", ["llmc", "megatron"])
def test_diagnose_run_reads_the_saves_off_checkpoints_the_scan_cannot_read(
    tmp_path: Path, kind: str
) -> None:
    """llm.c's raw model_%08d.bin files, Megatron's iter_N directories without their shards:
    the scan reads no step from them, their names still say where the saves were."""
    pytest.importorskip("torch")
    run_dir = tmp_path / "run"
    _layout(run_dir / "checkpoints", kind)
    rows = factory.cached("homogeneous", 600, SPIKES)
    factory.write_jsonl(rows, run_dir / "train_log.jsonl")
    env = smi_env(make_bin_dir(tmp_path / "bin"), "healthy")
    with remotekit.local_target() as t:
        report = dg.diagnose(t, run_dir=str(run_dir), env=env)
    log = report.section("train-log")
    assert log is not None and log.report is not None
    saves = sorted(e.step for e in log.report.events if e.kind == "checkpoint")
    assert saves == list(SAVES)
    said = "\n".join(report.verdict)
    assert "spikes at saves: 2 of 3 incidents" in said and "more than chance" in said
