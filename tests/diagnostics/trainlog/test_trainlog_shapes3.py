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
