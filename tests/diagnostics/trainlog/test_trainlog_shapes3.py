"""Log shapes issue 35's third held-out set found unread (tests/public_runs.md, "Held-out
runs, third set"), each made here from the factory's training rows: the rule each fix adds
is one for any log of the shape, never for the file it was seen in.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests import trainlog_factory as factory
from tests.trainlog_kit import run, source

# ---------------------------------------------------------------------------------------------
# a JSON document whose rows are a list inside it (a results file, not trainer_state.json)


def _results_document(rows: list[dict[str, float]], path: Path) -> Path:
    metrics = [
        {"step": r["step"], "train loss": r["loss"], "valid accuracy": r["acc"]}
        for r in rows
        if r["step"] % 10 == 0
    ]
    doc = {
        "run_info": {"created_at": "2025-06-20T11:06:05+00:00", "train_config": {"lr": 1e-4}},
        "train_info": {"status": "success", "train_time": 812.5, "metrics": metrics},
        # shorter lists of objects with numbers: not the log
        "meta_info": {"gpus": [{"index": 0, "memory": 80}, {"index": 1, "memory": 80}]},
    }
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_json_document_rows_are_its_longest_list_of_records(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = _results_document(rows, tmp_path / "results.json")
    r = run(path)
    src = source(r)
    assert src["format"] == "json" and src["step_key"] == "step"
    assert src["columns"]["loss"] == "train loss"
    assert (src["first_step"], src["last_step"], src["rows"]) == (0, 290, 30)
    assert "['train_info']['metrics']" in src["dialect"]
    assert any("30 objects of ['train_info']['metrics']" in w["message"] for w in r.all("warning"))


def test_json_document_with_no_list_of_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"lr": 1e-4, "layers": [1, 2, 3], "name": {"a": "b"}}, indent=2))
    r = run(path)
    assert r.code == 2
    (err,) = r.all("error")
    assert "no list of row objects" in err["message"]


# ---------------------------------------------------------------------------------------------
# a console whose counts are humanised (``smpl:32K``) and whose step is printed rounded (``1K``)


def _humanised(n: float) -> str:
    if n >= 1e6:
        return f"{round(n / 1e6)}M"
    return f"{round(n / 1e3)}K" if n >= 1e3 else str(int(n))


def _console(rows: list[dict[str, float]], scale: int, path: Path, *, runs: int = 1) -> Path:
    """LeRobot's line shape: every 5th row, the step ``scale`` x the row, printed humanised
    as the other counts are; an upload's progress bars after the end."""
    with open(path, "w") as f:
        f.write("INFO 2026-05-11 15:40:38 ot_train.py:330 Start offline training\n")
        for _ in range(runs):
            for r in rows[::5]:
                s = r["step"] * scale
                f.write(
                    f"INFO 2026-05-11 15:42:44 ot_train.py:357 step:{_humanised(s)} "
                    f"smpl:{_humanised(s * 32)} ep:{_humanised(s // 9)} epch:{s / 450:.2f} "
                    f"loss:{r['loss']:.3f} grdn:{r['grad_norm']:.3f} lr:{r['lr']:.1e}\n"
                )
        f.write("INFO 2026-05-11 23:56:34 ot_train.py:438 End of training\n")
        for k in range(1, 12):
            f.write(
                f"model.safetensors:  {k * 9}%|{'#' * k}| {k * 18.7:.1f}M/206M "
                f"[00:0{k % 10}<00:35, {k * 3.1:.2f}MB/s]\n"
            )
    return path


def test_humanised_counts_one_line_kind_and_a_rounded_step_no_restart(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = _console(rows, 100, tmp_path / "train_log.txt")
    r = run(path)
    src = source(r)
    # 60 lines, steps 0 .. 29,500 by 500: printed 0, 500, 1K, 2K, 2K, 3K ... 30K
    assert src["columns"]["loss"] == "train/loss" and src["rows"] == 60
    assert (src["first_step"], src["last_step"], src["stride"]) == (0, 29500, 500)
    assert [e for e in r.all("event") if e["kind"] == "resume"] == []
    said = " ".join(w["message"] for w in r.all("warning"))
    assert "printed rounded ('1K')" in said and "stride of 500" in said
    assert "restart" not in said and "run part" not in said
    assert "safetensors" not in said  # an upload's progress bars: no series
    (loss,) = [m for m in r.all("metric") if m.get("label") == "loss"]
    assert loss["n"] == 60


def test_rounded_step_that_falls_is_still_a_second_run(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = _console(rows, 100, tmp_path / "train_log.txt", runs=2)
    r = run(path)
    src = source(r)
    said = " ".join(w["message"] for w in r.all("warning"))
    assert "second run" in said and "run part 2 of 2" in said, said
    assert src["rows"] <= 60


# ---------------------------------------------------------------------------------------------
# per-epoch JSON lines with no step: the epoch says where a run starts again


def _per_epoch(rows: list[dict[str, float]], epochs: list[int]) -> list[dict[str, float]]:
    """DETR's ``log.txt`` shape: a line an epoch, its train and test losses, no step; the
    epochs in ``epochs`` order (a restart repeats one, a second run starts again)."""
    out = []
    for k, e in enumerate(epochs):
        part = rows[k * 20 : (k + 1) * 20]
        loss = sum(r["loss"] for r in part) / len(part)
        out.append({"train_lr": 1e-4, "train_loss": loss, "test_loss": loss * 1.1, "epoch": e})
    return out


def _jsonl(rows: list[dict[str, float]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_per_epoch_lines_with_an_epoch_run_again_say_a_restart(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = _jsonl(_per_epoch(rows, [0, 1, 2, 3, 4, 5, 5, 6, 7, 8]), tmp_path / "log.txt")
    r = run(path)
    src = source(r)
    assert src["step_key"] is None and src["columns"]["loss"] == "train_loss"
    said = [w["message"] for w in r.all("warning")]
    assert "row 7: epoch 5 logged again with other values: a restart" in said
    assert "run part 2 of 2 analysed (rows 7-10; --run-part chooses another)" in said
    assert src["rows"] == 4


def test_per_epoch_lines_whose_epoch_falls_are_a_second_run(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = _jsonl(_per_epoch(rows, [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3]), tmp_path / "log.txt")
    r = run(path, "--run-part", "1")
    src = source(r)
    said = " ".join(w["message"] for w in r.all("warning"))
    assert "the epoch falls from 6 to 0 at row 8: a second run" in said
    assert "run part 1 of 2 analysed (rows 1-7" in said and src["rows"] == 7


def test_batch_lines_that_state_only_their_epoch_are_one_run(tmp_path: Path) -> None:
    # a row a batch, its epoch repeated (no held-out loss on each row): no restart
    rows = list(factory.cached("mixed", 300))
    batches = [{"loss": r["loss"], "epoch": r["step"] // 50} for r in rows]
    r = run(_jsonl(batches, tmp_path / "log.txt"))
    src = source(r)
    said = " ".join(w["message"] for w in r.all("warning"))
    assert "restart" not in said and "run part" not in said and src["rows"] == 300


# ---------------------------------------------------------------------------------------------
# torch.compile's warnings and a traceback name code ``<resume in forward>``: no resume


_COMPILER = (
    "[2023-12-04 01:43:47,275] torch._dynamo.convert_frame: [WARNING] WON'T CONVERT "
    "<resume in get_neighbours_as_edge_index> /home/u/PaiNN.py line 120 \n"
    "[2023-12-04 01:43:47,275] torch._dynamo.convert_frame: [WARNING] Traceback (most recent "
    "call last):\n"
    '  File "/tmp/tmpcu5m3psq.py", line 246, in <resume in forward>\n'
    "    return self.propagate(edge_index)\n"
)


def test_code_names_in_angle_brackets_and_frames_are_no_resume(tmp_path: Path) -> None:
    rows = list(factory.cached("mixed", 300))
    path = factory.write_text(rows, tmp_path / "train.log", style="colon")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(
        "".join(lines[:2]) + _COMPILER + "".join(lines[2:150]) + _COMPILER + "".join(lines[150:])
    )
    r = run(path)
    source(r)
    assert [e for e in r.all("event") if e["kind"] == "resume"] == []
    # a line that says a resume happened still is one
    path.write_text(
        "".join(lines[:100]) + "INFO resuming from checkpoint-98\n" + "".join(lines[100:])
    )
    r = run(path)
    assert [e["kind"] for e in r.all("event") if e["kind"] == "resume"] == ["resume"]
