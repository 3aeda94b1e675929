"""train-log's options, declared once (remote/trainlog/options.py): the task's flags and help,
the API's keywords, the record that crosses, and trainlog.py's command line all come from
the one dataclass."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from invoke.tasks import Task

import remotekit.tasks
from remotekit.diagnostics.trainlog import analyze_train_log, follow_train_log
from remotekit.remote.trainlog.base import DEFAULT_PRESET
from remotekit.remote.trainlog.options import TrainLogOptions, parser
from tests import trainlog_factory as factory
from tests.harness import ROOT

SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"
FIELDS = dataclasses.fields(TrainLogOptions)


def train_log_task() -> Task[Any]:
    return next(t for t in remotekit.tasks.TASKS if t.name == "train_log")


@pytest.mark.parametrize("f", FIELDS, ids=[f.name for f in FIELDS])
def test_every_option_is_a_flag_of_the_task_with_its_help_or_says_why_not(
    f: dataclasses.Field[object],
) -> None:
    task, meta = train_log_task(), f.metadata
    assert meta["help"], f"{f.name}: an option without help"
    if meta["task"] is None:
        assert meta["why_not"], f"{f.name}: no train-log flag, and no reason why not"
        return
    assert meta["task"] in inspect.signature(task.body).parameters, (f.name, meta["task"])
    assert task.help[meta["task"]] == meta["help"]


def test_the_api_keywords_are_options() -> None:
    """analyze_train_log's keywords (its documented signature) each name a field; the
    follow takes the same ones."""
    names = {f.name for f in FIELDS}
    tasks = {f.metadata["task"]: f.name for f in FIELDS if f.metadata["task"]}
    api = inspect.signature(analyze_train_log).parameters
    own = {"target", "timeout", "on_record"}
    # a field's name, or the task's one name for it where the wire's differs (log, checkpoints)
    assert set(api) - own <= names | set(tasks)
    defaults = {tasks.get(n, n): api[n].default for n in set(api) - own - {"log"}}
    assert TrainLogOptions.of("p", **defaults) == TrainLogOptions("p")  # the same defaults
    assert set(inspect.signature(follow_train_log).parameters) >= {"target", "log", "options"}


def test_loose_values_become_the_fields_types() -> None:
    a = TrainLogOptions.of(
        "/l", metrics="loss, acc,", ckpt_steps="200 400,600", steps_per_epoch=0, points=-3
    )
    b = TrainLogOptions.of(
        "/l", metrics=["loss", "acc"], ckpt_steps=[200, 400.0, 600], steps_per_epoch=None
    )
    assert a == b
    assert a.metrics == ("loss", "acc") and a.ckpt_steps == (200.0, 400.0, 600.0)
    assert a.steps_per_epoch is None and a.points == 0 and a.wanted == ["loss", "acc"]
    assert TrainLogOptions("/l").wanted is None and TrainLogOptions("/l").preset == DEFAULT_PRESET


def test_a_bad_value_is_refused_naming_its_option() -> None:
    with pytest.raises(ValueError, match=r"^unknown preset 'olmo3'; choose one of trend, "):
        TrainLogOptions.of("/l", preset="olmo3")
    with pytest.raises(ValueError, match=r"^ckpt_steps: not a step: 'x'"):
        TrainLogOptions.of("/l", ckpt_steps="100,x")
    with pytest.raises(ValueError, match=r"^tolerance: not a number"):
        TrainLogOptions.of("/l", tolerance="wide")
    with pytest.raises(ValueError, match=r"^unknown format 'yaml'; choose one of auto,"):
        TrainLogOptions.of("/l", format="yaml")
    with pytest.raises(ValueError, match=r"^a path is needed, not ''"):
        TrainLogOptions.of("")
    with pytest.raises(ValueError, match=r"unknown train-log option\(s\): metric$"):
        TrainLogOptions.from_dict({"path": "/l", "metric": "loss"})
    with pytest.raises(TypeError):
        TrainLogOptions.of("/l", metric="loss")  # a keyword the API does not take


def test_a_record_is_read_as_the_checkpoint_commands_records_are() -> None:
    """train-log's options stand on the shared base (remote/options.py): a record without
    the path, or not an object, is a ValueError naming train-log, as for ckpt's."""
    with pytest.raises(ValueError, match=r"^missing train-log option\(s\): path$"):
        TrainLogOptions.from_dict({"preset": "olmo2"})
    with pytest.raises(ValueError, match=r"^the train-log options are a JSON object, not list$"):
        TrainLogOptions.from_dict([])  # type: ignore[arg-type]


def test_they_cross_as_one_record_of_what_differs_from_the_defaults() -> None:
    opts = TrainLogOptions.of(
        "/run dir/log.jsonl", preset="olmo2", ckpt_steps="1000", after_step=float("-inf")
    )
    path, flag, record = opts.argv()
    assert (path, flag) == ("/run dir/log.jsonl", "--options")
    assert json.loads(record) == {"preset": "olmo2", "ckpt_steps": [1000.0], "after_step": "-inf"}
    assert TrainLogOptions.from_argv(opts.argv()) == opts
    assert TrainLogOptions("/l").argv() == ["/l", "--options", "{}"]
    every = TrainLogOptions.of(
        "/l", metrics="a", tolerance=3, points=9, format="csv", follow=True, duration=1.5
    )
    assert TrainLogOptions.from_dict(every.to_dict()) == every


def test_the_command_line_by_hand_has_a_flag_per_field() -> None:
    flags = {a.dest for a in parser()._actions}
    assert {f.name for f in FIELDS} <= flags
    by_hand = TrainLogOptions.from_argv(
        [
            *("/l", "--metrics", "a,b", "--metric", "c", "--ckpt-dir", "/ck", "--follow"),
            *("--ckpt-steps", "5,6", "--after-step=-inf", "--preset", "zclip"),
        ]
    )
    assert by_hand == TrainLogOptions.of(
        "/l",
        metrics="a,b,c",
        ckpt_dir="/ck",
        follow=True,
        ckpt_steps=(5, 6),
        after_step=float("-inf"),
        preset="zclip",
    )
    # flags go on top of the record
    both = TrainLogOptions.from_argv(["/l", "--options", '{"points": 7}', "--points", "9"])
    assert both.points == 9


def test_the_script_reads_the_record_as_it_reads_flags(tmp_path: Path) -> None:
    log = factory.write_jsonl(factory.cached("homogeneous", 600), tmp_path / "log.jsonl")
    opts = TrainLogOptions.of(str(log), ckpt_steps="200,400", steps_per_epoch=150, points=50)
    flags = ["--ckpt-steps", "200,400", "--steps-per-epoch", "150", "--points", "50"]
    out = []
    for argv in (opts.argv(), [str(log), *flags]):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120
        )
        out.append(proc.stdout)
    assert out[0] == out[1] and '"source":"ckpt-steps"' in out[0] and '"type":"series"' in out[0]


def test_a_bad_record_by_hand_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "/l", "--options", '{"presett": "x"}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown train-log option(s): presett" in proc.stderr


def test_a_hostile_record_is_a_usage_error_too() -> None:
    """A record nested past the parser's recursion, or not an object: refused as a usage
    error naming --options, not a traceback (remote/options.py reads it, bounded)."""
    for record, said in (("[" * 30_000 + "]" * 30_000, "nested too deeply"), ("[1]", "not list")):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "/l", "--options", record],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and "error: --options" in proc.stderr and said in proc.stderr
