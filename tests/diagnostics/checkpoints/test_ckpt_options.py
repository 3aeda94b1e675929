"""The checkpoint commands' options, declared once (remote/ckpt/options.py): the tasks' flags
and help, the API's keywords, the record that crosses, and ckpt.py's command line all come
from one dataclass a command."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from invoke.tasks import Task

import remotekit
import remotekit.remote
import remotekit.tasks
from remotekit.diagnostics import checkpoints as ck
from remotekit.remote.ckpt.options import (
    COMMANDS,
    DEFAULT_CHUNK,
    MAX_JOBS,
    BisectOptions,
    CkptOptions,
    DiffOptions,
    InspectOptions,
    ScanOptions,
    WorkerOptions,
    from_argv,
)
from remotekit.remote.options import MAX_RECORD
from tests import ckpt_factory as cf
from tests.harness import cli

SCRIPT = Path(remotekit.remote.__file__).with_name("ckpt.py")

#: Each command's options, the task that sets them and the API function that takes them.
SURFACES: dict[type[CkptOptions], tuple[str, Callable[..., Any]]] = {
    ScanOptions: ("ckpt_scan", ck.scan_checkpoints),
    InspectOptions: ("ckpt_inspect", ck.inspect_checkpoint),
    DiffOptions: ("ckpt_diff", ck.diff_checkpoints),
    BisectOptions: ("ckpt_bisect", ck.bisect_checkpoints),
}
#: The API's keywords that are no option: where it runs and how it reports.
OWN = {"target", "timeout", "on_report", "on_progress", "on_warning"}
FIELDS = [(cls, f) for cls in SURFACES for f in dataclasses.fields(cls)]


def task(name: str) -> Task[Any]:
    return next(t for t in remotekit.tasks.TASKS if t.name == name)


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=240
    )


@pytest.mark.parametrize(("cls", "f"), FIELDS, ids=[f"{cls.COMMAND}.{f.name}" for cls, f in FIELDS])
def test_every_option_is_a_flag_of_its_task_and_a_keyword_of_its_api_or_says_why_not(
    cls: type[CkptOptions], f: dataclasses.Field[object]
) -> None:
    name, api = SURFACES[cls]
    meta, keywords = f.metadata, inspect.signature(api).parameters
    assert meta["help"], f"{cls.COMMAND}.{f.name}: an option without help"
    if meta["task"] is None:
        assert meta["why_not"], f"{cls.COMMAND}.{f.name}: no task flag, and no reason why not"
        assert f.name not in keywords, f"{f.name}: the API takes it, so should the task"
        return
    assert meta["task"] in inspect.signature(task(name).body).parameters, (f.name, meta["task"])
    assert task(name).help[meta["task"]] == meta["help"]
    # the field's name, or the tasks' one name for it where the wire's differs (the field
    # path of ScanOptions is scan_checkpoints(checkpoints=), as --checkpoints)
    assert {f.name, meta["task"]} & set(keywords), f"{api.__name__} has no keyword {f.name}"


@pytest.mark.parametrize("cls", list(SURFACES), ids=[c.COMMAND for c in SURFACES])
def test_the_api_keywords_are_options_with_the_same_defaults(cls: type[CkptOptions]) -> None:
    _, api = SURFACES[cls]
    keywords = inspect.signature(api).parameters
    fields = dataclasses.fields(cls)
    assert set(keywords) - OWN <= {f.name for f in fields} | {f.metadata["task"] for f in fields}
    operands = ["/p"] * len(cls.OPERANDS)
    named = {f.metadata["task"] for f in fields if f.name in cls.OPERANDS}
    defaults = {
        k: p.default for k, p in keywords.items() if k not in OWN | set(cls.OPERANDS) | named
    }
    assert cls.of(*operands, **defaults) == cls.of(*operands)


def test_the_worker_options_are_the_scans_own() -> None:
    own = [f for f in dataclasses.fields(WorkerOptions) if f.name not in {"jobs", "threads"}]
    assert own == list(dataclasses.fields(CkptOptions))  # how to load: as the scan does
    for f in dataclasses.fields(WorkerOptions):
        assert f.metadata["help"] and (f.metadata["task"] or f.metadata["why_not"]), f.name
    assert set(COMMANDS) == {"scan", "inspect", "diff", "bisect", "_worker"}


def test_loose_values_become_the_fields_types() -> None:
    a = ScanOptions.of("/c", jobs="4", allow_globals="argparse.Namespace")
    b = ScanOptions.of("/c", jobs=4, allow_globals=[" argparse.Namespace"])
    assert a == b and a.allow_globals == ("argparse.Namespace",) and a.jobs == 4
    assert ScanOptions.of("/c", jobs=0).jobs == 1  # as before: at least one
    assert DiffOptions.of("/a", "/b", top=0).top == 1
    assert ScanOptions.of(Path("/c")).path == "/c"
    plain = ScanOptions.of("/c")
    assert (plain.unsafe_pickle, plain.max_bad, plain.chunk_elems) == (False, 20, DEFAULT_CHUNK)


def test_they_cross_as_one_record_of_what_differs_from_the_defaults() -> None:
    assert ScanOptions.of("/run dir/ck").argv() == ["scan", "/run dir/ck", "--options", "{}"]
    diff = DiffOptions.of("/a.pt", "/b.pt", top=3, unsafe_pickle=True)
    command, a, b, flag, record = diff.argv()
    assert (command, a, b, flag) == ("diff", "/a.pt", "/b.pt", "--options")
    assert json.loads(record) == {"top": 3, "unsafe_pickle": True}
    every = [
        ScanOptions.of("/c", jobs=3, allow_globals=["a.B", "c.D"], max_bad=2, chunk_elems=7),
        InspectOptions.of("/c/x.pt", unsafe_pickle=True),
        diff,
        BisectOptions.of("/c", linear=True, jobs=2),
        BisectOptions.of("/c", jobs=2, unsafe_pickle=True).worker(2, 5),
    ]
    for opts in every:
        assert from_argv(opts.argv()) == opts
        assert type(opts).from_dict(opts.to_dict()) == opts
    worker = every[-1]
    assert isinstance(worker, WorkerOptions) and (worker.jobs, worker.threads) == (2, 5)
    assert worker.unsafe_pickle and worker.argv()[0] == "_worker"
    assert ScanOptions.of("/c").worker(1, 4096).threads == 4096  # more CPUs than MAX_JOBS


def test_the_command_line_by_hand_has_a_flag_per_field() -> None:
    for cls in COMMANDS.values():
        operands = ["/p"] * len(cls.OPERANDS)
        for f in dataclasses.fields(cls):
            if f.name in cls.OPERANDS:
                continue
            flag = (f.metadata["flags"] or ("--" + f.name.replace("_", "-"),))[0]
            value = [] if f.default is False else ["a.B"] if f.default == () else ["3"]
            given = from_argv([cls.COMMAND, *operands, flag, *value])
            assert getattr(given, f.name) != f.default, (cls.COMMAND, flag)
    by_hand = from_argv(
        [
            *("scan", "/c", "--jobs", "3", "--allow-global", "a.B", "--allow-global", "c.D"),
            *("--unsafe-pickle", "--max-bad", "2", "--chunk-elems", "7"),
        ]
    )
    assert by_hand == ScanOptions.of(
        "/c", jobs=3, allow_globals=["a.B", "c.D"], unsafe_pickle=True, max_bad=2, chunk_elems=7
    )
    assert from_argv(["bisect", "/c", "--linear"]) == BisectOptions.of("/c", linear=True)
    # flags go on top of the record
    both = from_argv(["scan", "/c", "--options", '{"jobs": 2, "max_bad": 5}', "--jobs", "4"])
    assert both == ScanOptions.of("/c", jobs=4, max_bad=5)
    assert from_argv([]) is None


# ------------------------------------------------------------------ refused, on every way in


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: ck.scan_checkpoints(t, "/c", jobs="many"), "jobs: not a whole number: 'many'"),
        (
            lambda t: ck.scan_checkpoints(t, "/c", unsafe_pickle="false"),
            "unsafe_pickle: true or false, not 'false'",
        ),
        (
            lambda t: ck.inspect_checkpoint(t, "/c", allow_globals=["a.B", 3]),
            "allow_globals: not a global's name: 3",
        ),
        (lambda t: ck.diff_checkpoints(t, "/a", "", top=2), "b: a path is needed, not ''"),
        (lambda t: ck.diff_checkpoints(t, "/a", "/b", top=2.5), "top: not a whole number: 2.5"),
        (
            lambda t: ck.bisect_checkpoints(t, "/c", jobs=MAX_JOBS + 1),
            f"jobs: {MAX_JOBS + 1} is more than {MAX_JOBS}",
        ),
        (lambda t: ck.bisect_checkpoints(t, "/c", linear="yes"), "linear: true or false"),
    ],
)
def test_a_bad_keyword_of_the_api_is_refused_naming_its_option_before_any_step(
    call: Callable[[remotekit.Target], Any], message: str
) -> None:
    with remotekit.local_target() as t, pytest.raises(ValueError, match="^" + re.escape(message)):
        call(t)


def test_a_bad_value_in_the_record_or_a_flag_by_hand_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^max_bad: not a whole number: 'lots'"):
        ScanOptions.from_dict({"path": "/c", "max_bad": "lots"})
    with pytest.raises(ValueError, match=r"^unknown checkpoint option\(s\): jobs$"):
        InspectOptions.from_dict({"path": "/c", "jobs": 2})  # not an option of inspect
    with pytest.raises(TypeError):
        ScanOptions.of("/c", allow_global=["a.B"])  # the task's name, not the API's
    r = run_script("scan", "/c", "--jobs", "x")
    assert r.returncode == 2 and r.stdout == ""
    assert "ckpt.py scan: error: jobs: not a whole number: 'x'" in r.stderr
    r = run_script("diff", "/a", "/b", "--top", "1e9")
    assert r.returncode == 2 and "ckpt.py diff: error: top: not a whole number: '1e9'" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("ckpt-scan", "--checkpoints", "/c", "--jobs", str(MAX_JOBS + 1)),
            "jobs: 1025 is more than",
        ),
        (
            ("ckpt-inspect", "--checkpoint", "/c", "--allow-global", " "),
            "allow_globals: not a global",
        ),
        (("ckpt-bisect", "--checkpoints", "/c", "--jobs", "4096"), "jobs: 4096 is more than 1024"),
    ],
)
def test_a_bad_flag_of_the_task_is_refused_naming_its_option(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2 and f"local | error: {message}" in r.stderr, r.stderr


# ------------------------------------------------------------------ hostile records, there


def _nested(depth: int) -> str:
    return '{"allow_globals": ' + "[" * depth + "]" * depth + "}"


BIG = json.dumps({"allow_globals": ["a.B"] * (MAX_RECORD // 6)})


HOSTILE = [
    ('{"jobz": 2}', "unknown checkpoint option(s): jobz"),
    ('{"command": "diff", "path": "/etc"}', "unknown checkpoint option(s): command"),
    ('{"jobs": [4]}', "jobs: not a whole number: [4]"),
    ('{"jobs": 1e999}', "jobs: not a whole number: inf"),
    ('{"jobs": 10000000000000000000000}', "jobs: 10000000000000000000000 is more than 1024"),
    ('{"unsafe_pickle": "false"}', "unsafe_pickle: true or false, not 'false'"),
    ('{"unsafe_pickle": 1}', "unsafe_pickle: true or false, not 1"),
    ('{"allow_globals": {"os.system": 1}}', "allow_globals: a name or a list of names, not {"),
    ('{"allow_globals": ["a.B\\u0000"]}', "allow_globals: not a global's name: 'a.B\\x00'"),
    ('["jobs", 2]', "--options takes a JSON object, not list"),
    ("{jobs: 2}", "--options: not JSON (Expecting property name"),
    (BIG, f"--options: {len(BIG)} characters, more than {MAX_RECORD}"),
    (_nested(30_000), "--options: nested too deeply"),
]


@pytest.mark.parametrize(("record", "message"), HOSTILE, ids=[m[:30] for _, m in HOSTILE])
def test_a_hostile_record_is_refused_there_with_a_clear_error_before_any_work(
    tmp_path: Path, record: str, message: str
) -> None:
    marker = tmp_path / "argv.json"  # written by the checkpoint if loaded as plain pickle
    cf.write_argv_recorder(tmp_path / "checkpoint.pt", marker)
    r = run_script("scan", str(tmp_path), "--options", record)
    assert r.returncode == 2 and r.stdout == "" and not marker.exists()
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("ckpt.py scan: error: " + message), line
    assert len(line) < 300  # the refusal shows what was wrong, clipped, never the record


# ------------------------------------------------------------------ the script, both ways


def test_the_script_reads_the_record_as_it_reads_flags(tmp_path: Path) -> None:
    cf.build_bisect_series(tmp_path, [100, 200, 300], {200}, ["a", "b", "c"])
    opts = BisectOptions.of(str(tmp_path), linear=True, max_bad=1, chunk_elems=7)
    flags = ["bisect", str(tmp_path), "--linear", "--max-bad", "1", "--chunk-elems", "7"]
    out = []
    for argv in (opts.argv(), flags):
        r = run_script(*argv)
        assert r.returncode == 1, r.stderr
        records = [json.loads(line) for line in r.stdout.splitlines()]
        out.append([{k: v for k, v in rec.items() if k != "seconds"} for rec in records])
    assert out[0] == out[1]
    bisect = next(rec for rec in out[0] if rec["type"] == "bisect")
    assert bisect["mode"] == "linear" and bisect["first_bad"]["global_step"] == 200
