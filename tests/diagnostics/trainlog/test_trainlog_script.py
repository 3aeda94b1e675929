"""remote/trainlog.py, run as the container runs it: a standalone script, JSON lines out.

The logs come from a real (tiny) torch training loop (tests/trainlog_factory.py): batches
made of one length bucket and drawn at random (the story's bug), mixed batches, and
homogeneous batches in an interleaved or a sorted order; spikes are planted at two
checkpoint steps and at one step with no event.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import trainlog_factory as factory
from tests.trainlog_kit import SCRIPT, Run, run, shipped

SPIKES = (200, 330, 400)  # 200 and 400 are checkpoint saves; 330 is no event at all
CKPTS = (200, 400, 500)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each torch-made log once per module (the runs themselves once per session)."""
    d = tmp_path_factory.mktemp("trainlogs")
    homo = factory.cached("homogeneous", 600, SPIKES)
    return {
        "homogeneous": factory.write_jsonl(homo, d / "homo.jsonl", checkpoints=CKPTS),
        "mixed": factory.write_jsonl(
            factory.cached("mixed", 600, (), 30), d / "mixed.jsonl", checkpoints=CKPTS
        ),
        "strided": factory.write_jsonl(factory.cached("strided", 600), d / "strided.jsonl"),
        "cycled": factory.write_jsonl(factory.cached("cycled", 600), d / "cycled.jsonl"),
    }


@pytest.fixture(scope="module")
def homo_run(logs: dict[str, Path]) -> Run:
    return run(logs["homogeneous"])


# ---------------------------------------------------------------------------------------------
# the script itself


def test_script_is_stdlib_only_python38() -> None:
    # the script, the trainlog/ package (its modules import each other relatively) and the
    # modules of the shipped package it imports: the script imports them by name
    shipped = [SCRIPT, *(SCRIPT.parent / "trainlog").rglob("*.py")]
    shipped += [SCRIPT.parent / f for f in ("protocol.py", "infile.py", "runner.py")]
    siblings = {"remotekit"}
    mods = set()
    for path in shipped:
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mods.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | siblings
    assert mods <= allowed, mods - allowed


# ---------------------------------------------------------------------------------------------
# batch composition: the story's cause


def test_homogeneous_bucketed_batches_get_the_verdict(homo_run: Run) -> None:
    comp = homo_run.one("composition")
    assert comp["key"] == "bucket"
    assert comp["homogeneous"] and comp["long_runs"] and comp["finding"]
    top = comp["buckets"][0]
    assert top["bucket"] == "5" and abs(top["share"] - 0.52) < 0.05
    assert comp["max_run"] >= 8 and comp["max_run"] > 2 * comp["interleaved_max_run"]
    assert "bucket 5 is 5" in comp["verdict"]
    assert comp["verdict"].endswith("batches look homogeneous, interleave buckets")
    dist = homo_run.one("distribution")
    assert dist["shape"] in ("bimodal", "trimodal", "multimodal")
    assert dist["bimodality"] > 5 / 9
    # the lowest mode is the long bucket's, and it is pure
    low = min(dist["modes"], key=lambda m: m["center"])
    assert low["bucket"] == "5" and low["purity"] > 0.9
    # per-bucket losses are well apart
    med = {b["bucket"]: b["loss_median"] for b in comp["buckets"]}
    assert med["5"] < med["3"] < med["1"]
    assert "batch-composition" in homo_run.one("summary")["findings"]
    assert homo_run.code == 1


def test_mixed_batches_do_not(logs: dict[str, Path]) -> None:
    r = run(logs["mixed"])
    comp = r.one("composition")
    assert not comp["finding"] and not comp["homogeneous"]
    assert comp["explained"] < 0.1
    assert r.one("distribution")["shape"] == "unimodal"
    assert r.all("spike") == []
    assert r.one("summary")["findings"] == []
    assert r.code == 0


def test_interleaved_homogeneous_batches_are_expected_not_a_finding(
    logs: dict[str, Path],
) -> None:
    r = run(logs["strided"])
    comp = r.one("composition")
    assert comp["homogeneous"] and not comp["long_runs"] and not comp["finding"]
    assert comp["max_run"] <= 2
    assert "already interleaved" in comp["verdict"]
    assert r.one("distribution")["shape"] != "unimodal"
    assert r.code == 0


def test_sorted_order_is_periodic_and_runs_long(logs: dict[str, Path]) -> None:
    r = run(logs["cycled"])
    per = r.one("periodicity")
    assert per["periodic"] and abs(per["lag"] - 60) <= 2
    comp = r.one("composition")
    assert comp["finding"] and comp["max_run"] == 20
    assert "repeats every" in comp["verdict"]
    # each return to the first bucket's level is the cycle, not a spike
    assert r.all("spike") == []


def test_seq_len_stands_in_for_a_missing_bucket_field(tmp_path: Path) -> None:
    rows = [
        {k: v for k, v in row.items() if k != "bucket"}
        for row in factory.cached("homogeneous", 600, SPIKES)
    ]
    r = run(factory.write_jsonl(rows, tmp_path / "seqlen.jsonl"))
    comp = r.one("composition")
    assert comp["key"] == "seq_len" and comp["finding"]
    assert comp["buckets"][0]["bucket"] == "96"  # bucket 5's length
    assert "seq_len 96 is 52% of batches" in comp["verdict"]


def test_without_batch_fields_a_multimodal_loss_is_still_a_finding(tmp_path: Path) -> None:
    rows = [
        {k: v for k, v in row.items() if k not in ("bucket", "seq_len", "tokens")}
        for row in factory.cached("homogeneous", 600, SPIKES)
    ]
    r = run(factory.write_jsonl(rows, tmp_path / "bare.jsonl"))
    comp = r.one("composition")
    assert comp["key"] is None and comp["finding"]
    assert "log each step's bucket or seq_len" in comp["verdict"]
    assert r.one("distribution")["shape"] != "unimodal"
    assert "histogram" in {rec["type"] for rec in r.records}


# ---------------------------------------------------------------------------------------------
# spikes and events


def test_spikes_at_checkpoints_are_told_from_the_one_at_no_event(homo_run: Run) -> None:
    loss = homo_run.spikes("loss")
    assert set(loss) == set(SPIKES)
    for step in (200, 400):
        s = loss[step]
        assert s["event"] == "checkpoint" and s["distance"] == 0
    lone = loss[330]
    assert abs(lone["distance"]) > homo_run.one("source")["tolerance"]
    for s in loss.values():
        assert s["value"] > 4 and s["baseline"] < 1 and s["score"] >= 7
        assert s["recovery_steps"] is not None and 0 < s["recovery_steps"] < 100
        assert s["bucket"] in ("1", "3", "5") and s["run_position"] >= 1
    cliffs = homo_run.spikes("acc", "cliff")
    assert set(cliffs) == set(SPIKES)
    assert all(c["value"] < 0.5 * c["baseline"] for c in cliffs.values())
    corr = {c["kind"]: c for c in homo_run.all("correlation")}
    assert corr["checkpoint"]["at_events"] == 2 and corr["checkpoint"]["spikes"] == 3
    assert corr["checkpoint"]["beyond_chance"] and corr["checkpoint"]["p_value"] < 0.05
    assert not corr["epoch"]["beyond_chance"]
    assert {"spikes", "cliffs"} <= set(homo_run.one("summary")["findings"])


def test_events_from_log_lines_epoch_field_and_missing_warmup(homo_run: Run) -> None:
    events = homo_run.all("event")
    ck = [e for e in events if e["kind"] == "checkpoint"]
    assert [e["step"] for e in ck] == list(CKPTS)
    assert all(e["source"] == "log" and "Saving checkpoint" in e["detail"] for e in ck)
    assert [e["step"] for e in events if e["kind"] == "epoch"] == [150, 300, 450]
    warm = [e for e in events if e["kind"] == "warmup"]
    assert len(warm) == 1 and warm[0]["step"] == 0 and "no warmup" in warm[0]["detail"]


def test_a_warmup_schedule_is_not_flagged(logs: dict[str, Path]) -> None:
    r = run(logs["mixed"])
    assert not [e for e in r.all("event") if e["kind"] == "warmup"]


def test_ckpt_dir_ckpt_steps_and_steps_per_epoch(tmp_path: Path, logs: dict[str, Path]) -> None:
    rows = factory.cached("homogeneous", 600, SPIKES)
    path = factory.write_jsonl(rows, tmp_path / "plain.jsonl")  # no checkpoint lines
    ck = tmp_path / "ckpt"
    for name in ("checkpoint-200", "step_400.pt", "global_step330", "latest"):
        (ck / name).mkdir(parents=True)
    r = run(path, "--ckpt-dir", ck, "--ckpt-steps", "500", "--steps-per-epoch", "100")
    by = {(e["kind"], e["step"]): e["source"] for e in r.all("event")}
    assert by[("checkpoint", 200)] == "ckpt-dir" and by[("checkpoint", 400)] == "ckpt-dir"
    assert by[("checkpoint", 330)] == "ckpt-dir" and by[("checkpoint", 500)] == "ckpt-steps"
    assert sorted(s for k, s in by if k == "epoch") == [100, 200, 300, 400, 500]
    assert all(r.spikes("loss")[s]["event"] == "checkpoint" for s in SPIKES)
    missing = run(path, "--ckpt-dir", tmp_path / "nope")
    assert any("--ckpt-dir" in w["message"] for w in missing.all("warning"))
    assert missing.code == 1  # the analysis itself ran


def test_pause_and_lr_jump_are_events(tmp_path: Path) -> None:
    rows = [dict(row) for row in factory.cached("mixed", 600, (), 30)]
    for row in rows:  # a decaying schedule that restarts at 450 (a scheduler reset)
        row["lr"] = 0.02 * (1 - (row["step"] % 450) / 600) if row["step"] > 30 else row["lr"]
    r = run(factory.write_jsonl(rows, tmp_path / "wb.jsonl", wandb=True, pause_at=250))
    kinds = {(e["kind"], e["step"]) for e in r.all("event")}
    assert ("pause", 250) in kinds and ("lr-jump", 450) in kinds
    assert not [k for k, _ in kinds if k == "warmup"]


def test_event_details_do_not_carry_credentials(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = [f"step={i} loss={1 + (i % 5) * 0.01:.3f} acc=0.5" for i in range(400)]
    lines.insert(
        201,
        "step=200 Saving checkpoint to https://bucket.s3.amazonaws.com/ckpt-200.pt"
        "?X-Amz-Credential=AKIAXXXX&X-Amz-Signature=deadbeef0123 api_key=sk-live-42",
    )
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    [ev] = [e for e in r.all("event") if e["kind"] == "checkpoint"]
    assert ev["step"] == 200
    assert "ckpt-200.pt?***" in ev["detail"] and "api_key=***" in ev["detail"]
    for secret in ("AKIAXXXX", "deadbeef0123", "sk-live-42"):
        assert secret not in json.dumps(r.records)


def test_resume_is_an_event(tmp_path: Path) -> None:
    rows = factory.resumed(factory.cached("homogeneous", 600, SPIKES), at=450, back_to=380)
    r = run(factory.write_jsonl(rows, tmp_path / "resumed.jsonl"))
    res = [e for e in r.all("event") if e["kind"] == "resume"]
    assert len(res) == 1 and res[0]["step"] == 380
    assert "from 449 to 380" in res[0]["detail"]
    # the resumed run replaces the earlier rows at steps 380..449: one row per step, not mixed
    assert r.one("source")["rows"] == 600
    assert any("goes back 1 time" in w["message"] for w in r.all("warning"))


def test_nan_loss_is_a_finding_but_missing_keys_are_not(tmp_path: Path) -> None:
    rows = factory.nan_at(factory.cached("mixed", 600, (), 30), [520, 521])
    path = factory.write_jsonl(rows, tmp_path / "nan.jsonl")
    with open(path, "a") as f:  # W&B-style rows that lack the training keys
        for s in range(600, 610):
            f.write(json.dumps({"step": s, "eval_loss": 0.5}) + "\n")
    r = run(path)
    nonfinite = [s for s in r.all("spike") if s["kind"] == "nonfinite"]
    assert len(nonfinite) == 1
    assert nonfinite[0]["step"] == 520 and nonfinite[0]["flagged"] == 2
    assert nonfinite[0]["value"] == "nan"
    loss = next(m for m in r.all("metric") if m["label"] == "loss")
    assert loss["nonfinite"] == 2 and loss["n"] == 598
    assert r.one("source")["skipped"] == 10
    assert "nonfinite" in r.one("summary")["findings"] and r.code == 1


def test_presets(tmp_path: Path) -> None:
    rows = [dict(row) for row in factory.cached("homogeneous", 600, SPIKES)]
    # far beyond 10x the running max; Megatron's max is over the window, which must not
    # still hold the 8x spike at 400 (window 150 rows for this short log)
    rows[590]["loss"] = 60.0
    path = factory.write_jsonl(rows, tmp_path / "blowup.jsonl")
    olmo = run(path)
    core = run(path, "--preset", "olmo-core")
    mega = run(path, "--preset", "megatron")
    assert set(olmo.spikes()) == {*SPIKES, 590}
    assert set(core.spikes()) >= {*SPIKES, 590}
    assert set(mega.spikes()) == {590}  # 5-8x spikes pass Megatron's 10x rule
    assert mega.spikes()[590]["score"] > 10
    assert core.one("preset")["window"] == 128 and core.one("preset")["sigma"] == 6
    assert mega.one("preset")["ratio"] == 10


# ---------------------------------------------------------------------------------------------
# input formats


def _expect_story(r: Run, fmt: str, *, events: bool = True) -> None:
    assert r.one("source")["format"] == fmt
    assert r.one("source")["rows"] == 600
    assert set(r.spikes("loss")) == set(SPIKES)
    if events:
        assert r.spikes("loss")[200]["event"] == "checkpoint"
        assert r.spikes("loss")[200]["distance"] == 0


def test_format_wandb_history(tmp_path: Path) -> None:
    rows = factory.cached("homogeneous", 600, SPIKES)
    path = factory.write_jsonl(rows, tmp_path / "history.jsonl", wandb=True)
    r = run(path, "--ckpt-steps", "200,400")
    _expect_story(r, "jsonl")
    src = r.one("source")
    assert src["step_key"] == "train/global_step"
    assert src["columns"]["loss"] == "train/loss" and src["columns"]["bucket"] == "train/bucket"
    assert r.one("composition")["finding"]


def test_format_csv(tmp_path: Path) -> None:
    r = run(factory.write_csv(factory.cached("homogeneous", 600, SPIKES), tmp_path / "log.csv"))
    _expect_story(r, "csv", events=False)
    assert r.one("composition")["finding"]
    assert r.one("source")["columns"]["acc"] == "acc"


def test_format_trainer_state(tmp_path: Path) -> None:
    rows = factory.cached("homogeneous", 600, SPIKES)
    path = factory.write_trainer_state(rows, tmp_path / "trainer_state.json", save_steps=200)
    r = run(path)
    _expect_story(r, "trainer_state")
    src = r.one("source")
    assert src["skipped"] == 0 and src["columns"]["val_loss"] == "eval_loss"  # eval rows read
    assert not [w for w in r.all("warning") if "logged twice" in w["message"]]
    ck = [e["step"] for e in r.all("event") if e["kind"] == "checkpoint"]
    assert ck == [200, 400]
    assert r.one("source")["columns"]["lr"] == "learning_rate"


@pytest.mark.parametrize("style", ["kv", "colon"])
def test_format_text(tmp_path: Path, style: str) -> None:
    rows = factory.cached("homogeneous", 600, SPIKES)
    path = factory.write_text(rows, tmp_path / f"{style}.log", style=style, checkpoints=CKPTS)
    r = run(path)
    _expect_story(r, "text")
    ck = [e for e in r.all("event") if e["kind"] == "checkpoint"]
    assert [e["step"] for e in ck] == list(CKPTS)
    assert r.one("composition")["finding"]


def test_only_the_named_metrics(logs: dict[str, Path]) -> None:
    r = run(logs["homogeneous"], "--metrics", "grad_norm,perplexity")
    assert r.one("source")["metrics"] == ["grad_norm"]
    assert any("perplexity" in w["message"] for w in r.all("warning"))
    assert {s["metric"] for s in r.all("spike")} == {"grad_norm"}


# ---------------------------------------------------------------------------------------------
# what travels back


def test_decimated_series_keeps_every_spike(logs: dict[str, Path]) -> None:
    r = run(logs["homogeneous"], "--points", "60")
    series = {s["metric"]: s for s in r.all("series")}
    assert set(series) == {"loss", "acc", "lr", "grad_norm"}
    loss = series["loss"]
    assert len(loss["steps"]) <= 80 and loss["steps"] == sorted(loss["steps"])
    points = dict(zip(loss["steps"], loss["values"]))
    for s in r.spikes("loss").values():
        assert points[s["peak_step"]] == pytest.approx(s["value"], rel=1e-5)
    assert max(loss["values"]) == pytest.approx(max(s["value"] for s in r.spikes().values()))
    hist = r.one("histogram")
    assert set(hist["counts"]) == {"1", "3", "5"}
    assert len(hist["edges"]) == len(hist["counts"]["5"]) + 1
    assert not [s for s in run(logs["homogeneous"]).all("series")]  # none unless asked


# ---------------------------------------------------------------------------------------------
# could not run


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("", "empty"),
        ('{"step": 1, "foo": 2}\n{"step": 2, "foo": 3}\n', "no loss series found"),
        ('{"log_history": 3', "no loss series found"),
    ],
)
def test_could_not_run(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_text(content)
    r = run(path)
    assert r.code == 2
    assert message in r.one("error")["message"]
    assert r.one("done")["exit_code"] == 2


def test_forced_json_that_is_not(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": 3')
    r = run(path, "--format", "json")
    assert r.code == 2 and "not valid JSON" in r.one("error")["message"]


def test_format_hf_stdout_dict_lines(tmp_path: Path) -> None:
    rows = factory.cached("homogeneous", 600, SPIKES)
    path = tmp_path / "stdout.log"
    with open(path, "w") as f:
        for row in rows:
            d = {"loss": row["loss"], "grad_norm": row["grad_norm"], "learning_rate": row["lr"]}
            f.write(repr({**d, "epoch": row["epoch"]}) + "\n")
            if row["step"] in CKPTS:
                f.write(f"Saving model checkpoint to out/checkpoint-{row['step']}\n")
    r = run(path)
    src = r.one("source")
    assert src["format"] == "text" and src["rows"] == 600 and src["step_key"] is None
    assert set(r.spikes("loss")) == set(SPIKES)  # no step field: the row number stands in
    assert [e["step"] for e in r.all("event") if e["kind"] == "checkpoint"] == list(CKPTS)


def test_a_directory_is_not_a_log(tmp_path: Path) -> None:
    r = run(tmp_path)
    assert r.code == 2 and "directory" in r.one("error")["message"]


# ---------------------------------------------------------------------------------------------
# pieces, as properties (the shipped package's modules)


BASE = shipped("trainlog.base")
floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(floats, min_size=1, max_size=400), st.integers(2, 50), st.data())
def test_decimate_keeps_extremes_and_asked_points(
    vals: Sequence[float], points: int, data: st.DataObject
) -> None:
    keep = data.draw(st.lists(st.integers(0, len(vals) - 1), max_size=3))
    idx = BASE.decimate(list(vals), points, keep)
    assert idx == sorted(set(idx))
    assert set(keep) <= set(idx)
    assert max(vals) in [vals[i] for i in idx] and min(vals) in [vals[i] for i in idx]
    if len(vals) > points:
        assert len(idx) <= points + len(keep) + 4


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 30), st.floats(0.0, 1.0))
def test_binomial_tail(n: int, p: float) -> None:
    tails = [BASE.binom_sf(k, n, p) for k in range(n + 2)]
    assert tails[0] == 1.0 and tails[-1] == 0.0
    assert all(a >= b - 1e-12 for a, b in zip(tails, tails[1:]))
    if n and 0 < p < 1:
        assert tails[n] == pytest.approx(p**n)


def test_binomial_tail_of_many_spikes_does_not_overflow() -> None:
    # a log with tens of thousands of incidents (a detector on multimodal noise): comb(n, i)
    # is an int too large for a float there
    assert 0.0 <= BASE.binom_sf(30_000, 60_000, 0.4) <= 1e-300
    assert BASE.binom_sf(20_000, 60_000, 0.4) == pytest.approx(1.0)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**7), floats, st.sampled_from(["=", ": ", " = "]))
def test_text_pairs(step: int, loss: float, sep: str) -> None:
    row = shipped("trainlog.readers.text")._text_row(
        f"INFO 12:00:01 step{sep}{step} loss{sep}{loss!r} note=ok"
    )
    assert float(row["step"]) == step
    assert float(row["loss"]) == loss or math.isclose(float(row["loss"]), loss)
