"""The notebook and the command line give the same answer: every diagnostic task of the
collection, run as ``remotekit TASK --json`` and through its API function on the same
target and inputs, compared field by field.

The target is ``local`` as a hosts.yaml declares it, with every key a task takes a default
from: ``checkpoints:`` (real HF Trainer checkpoints, one with a NaN in its optimizer
state), ``workdir:``, ``gpus: 8`` and an ``env:`` that shows the fake nvidia-smi with one
GPU fallen off the bus. The API calls pass only what the command line is given: what each
face fills in by itself must be the same (:mod:`remotekit.diagnostics.defaults` decides it
for both). A task the collection gains fails :func:`test_every_task_has_a_pair_or_a_reason`
until it is paired here or said not to be a diagnostic.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.cli import ns
from remotekit.diagnostics import checkpoints as ck
from remotekit.diagnostics import diagnose as dg
from remotekit.diagnostics import gpulayers, system, trainlog
from remotekit.diagnostics.demo import demo
from remotekit.render import to_json
from tests import ckpt_factory as cf
from tests import trainlog_factory as factory
from tests.conftest import write_inventory
from tests.harness import cli, only_host
from tests.smi import make_bin_dir, smi_env

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class World:
    """The inputs both faces get: ``hosts`` (hosts.yaml), and the paths the tasks are given."""

    hosts: Path
    ckpt: Path  # the host's `checkpoints:`: checkpoint-200 clean, checkpoint-400 bad
    run: Path  # a run's folder holding its log only (its checkpoints are the host's)
    log: Path
    demo: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("faces")
    ckpt, run, work = root / "ckpt", root / "run", root / "work"
    for step in (200, 400):
        cf.hf_trainer_dir(ckpt, step, nan_optimizer=1 if step == 400 else None)
    run.mkdir()
    work.mkdir()
    log = factory.write_jsonl(
        factory.cached("homogeneous", 600, (200, 330, 400)), run / "train_log.jsonl"
    )
    local = {
        "python": sys.executable,
        "workdir": str(work),
        "checkpoints": str(ckpt),
        "gpus": 8,
        "env": smi_env(make_bin_dir(root / "bin"), "lost-gpu"),
    }
    hosts = root / "hosts.yaml"
    write_inventory(hosts, {"local": local})
    return World(hosts, ckpt, run, log, root / "demo")


Api = Callable[[remotekit.Target, World], Any]


@dataclass(frozen=True)
class Case:
    """One way to run a task: its command-line arguments and the API call that answers the
    same question; ``before`` readies the inputs for each face (a fresh folder)."""

    args: Callable[[World], list[str]]
    api: Api
    before: Callable[[World], None] = lambda w: None
    #: Fields that are the machine's doing, not the task's (matched at any depth).
    machine: frozenset[str] = frozenset()


def _fresh_demo(w: World) -> None:
    shutil.rmtree(w.demo, ignore_errors=True)


#: What differs between any two runs, whoever runs them, each with why: how long a step
#: took; pids (the fake nvidia-smi lists its caller's as the GPU's process); free memory and
#: disk (other processes use them between the two reads).
VOLATILE = frozenset(
    {"duration_s", "seconds", "pid", "mem_available_mib"}
    | {"free_bytes", "used_bytes", "free_pct", "inodes_free", "inodes_free_pct"}
)
#: A time said in words ("env: ok in 3.2 s", diagnose's summary lines).
SAID_TIME = re.compile(r"\b\d+(?:\.\d+)? s\b")

#: Every diagnostic task, each way it answers (flags that change which function answers).
PAIRS: dict[str, list[Case]] = {
    "env": [Case(lambda w: [], lambda t, w: system.environment(t))],
    "gpu": [
        Case(lambda w: [], lambda t, w: system.gpu_status(t)),
        Case(lambda w: ["--layers"], lambda t, w: gpulayers.gpu_layers(t)),
    ],
    "disk": [Case(lambda w: [], lambda t, w: system.disk_usage(t))],
    "procs": [
        # every process of the machine, other people's tests included, at two moments
        Case(lambda w: [], lambda t, w: system.processes(t), machine=frozenset({"processes"}))
    ],
    "diagnose": [
        Case(lambda w: [], lambda t, w: dg.diagnose(t)),
        Case(lambda w: ["--run", str(w.run)], lambda t, w: dg.diagnose(t, run=str(w.run))),
    ],
    "train-log": [
        Case(
            lambda w: ["--path", str(w.log)], lambda t, w: trainlog.analyze_train_log(t, str(w.log))
        )
    ],
    "ckpt-scan": [Case(lambda w: [], lambda t, w: ck.scan_checkpoints(t))],
    "ckpt-inspect": [
        Case(
            lambda w: ["--path", str(w.ckpt / "checkpoint-400" / "optimizer.pt")],
            lambda t, w: ck.inspect_checkpoint(t, str(w.ckpt / "checkpoint-400" / "optimizer.pt")),
        )
    ],
    "ckpt-diff": [
        Case(
            lambda w: ["-a", str(w.ckpt / "checkpoint-200"), "-b", str(w.ckpt / "checkpoint-400")],
            lambda t, w: ck.diff_checkpoints(
                t, str(w.ckpt / "checkpoint-200"), str(w.ckpt / "checkpoint-400")
            ),
        )
    ],
    "ckpt-bisect": [Case(lambda w: [], lambda t, w: ck.bisect_checkpoints(t))],
    "demo": [
        Case(lambda w: ["--dir", str(w.demo)], lambda t, w: demo(t, str(w.demo)), _fresh_demo)
    ],
}

#: The tasks that are no diagnostic, and why they have no pair here.
NOT_DIAGNOSTICS = {
    "hosts": "lists hosts.yaml itself: no target is asked anything",
    "ping": "a reachability check of each hop: the engine's (tests/engine/), no report",
    "run": "runs the user's command: its output is the answer, passed through",
    "py": "runs the user's script: its output is the answer, passed through",
    "put": "copies a file: tests/sync/",
    "get": "copies a file: tests/sync/",
    "runs": "lists detached runs: tests/runs/ (Target.runs is the API, the same object)",
    "logs": "a run's output as written: tests/runs/",
    "stop": "stops a run: tests/runs/",
    "rm": "removes a run's record: tests/runs/",
    "shell": "an interactive terminal: no answer to compare",
    "forward": "a port forward held open: tests/forward/",
    "sync": "copies a folder: tests/sync/",
}


def test_every_task_has_a_pair_or_a_reason() -> None:
    names = set(ns.task_names)  # as typed: train-log
    assert names - set(PAIRS) - set(NOT_DIAGNOSTICS) == set(), "a task without a pair"
    assert (set(PAIRS) | set(NOT_DIAGNOSTICS)) - names == set(), "a pair without a task"
    assert set(PAIRS) & set(NOT_DIAGNOSTICS) == set()


def _plain(value: Any, drop: frozenset[str] = VOLATILE) -> Any:
    """``value`` (parsed JSON) without what cannot agree between two runs (``drop``, at any
    depth; times said in words)."""
    if isinstance(value, dict):
        return {k: _plain(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_plain(v, drop) for v in value]
    return SAID_TIME.sub("<time>", value) if isinstance(value, str) else value


def _differences(cli_: Any, api: Any, where: str = "") -> Iterator[str]:
    """Each field where the two answers differ, by its path."""
    if isinstance(cli_, dict) and isinstance(api, dict):
        for k in sorted(set(cli_) | set(api)):
            if k not in cli_ or k not in api:
                yield f"{where}.{k}: only in the {'api' if k in api else 'cli'} answer"
            else:
                yield from _differences(cli_[k], api[k], f"{where}.{k}")
    elif isinstance(cli_, list) and isinstance(api, list) and len(cli_) == len(api):
        for i, (a, b) in enumerate(zip(cli_, api)):
            yield from _differences(a, b, f"{where}[{i}]")
    elif cli_ != api:
        yield f"{where or '.'}: cli {json.dumps(cli_)[:300]} != api {json.dumps(api)[:300]}"


CASES = [(name, i) for name, cases in PAIRS.items() for i in range(len(cases))]


@pytest.mark.parametrize(("task", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_the_command_line_and_the_api_agree(world: World, task: str, index: int) -> None:
    case = PAIRS[task][index]
    drop = VOLATILE | case.machine
    case.before(world)
    r = cli(
        task, "--inventory", str(world.hosts), "--json", *case.args(world), cwd=world.hosts.parent
    )
    host = only_host(r.stdout)
    assert "error" not in host, r.stdout + r.stderr
    case.before(world)
    with remotekit.load_inventory(world.hosts).target("local") as t:
        report = case.api(t, world)
    answer = json.loads(to_json(report))
    assert host["exit_code"] == r.returncode == report.exit_code, r.stderr
    said = list(_differences(_plain(host["result"], drop), _plain(answer, drop)))
    assert said == [], "\n".join(said)
