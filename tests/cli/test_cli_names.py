"""One name per meaning across the tasks, and the Python functions named alike: a log is
``--log``, a folder of checkpoints ``--checkpoints``, one checkpoint ``--checkpoint``, a
training run's folder ``--run-dir``, a run's id ``--run``, and ``--path`` only disk's path.
The old spellings still work for this release, with a note (a DeprecationWarning in Python),
and are shown nowhere."""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import remotekit
from remotekit.cli import ns
from remotekit.spec import LOCAL
from tests.harness import cli

#: option -> the tasks that take it, each with that one meaning.
MEANINGS = {
    "log": {"train-log"},
    "checkpoints": {"diagnose", "train-log", "ckpt-scan", "ckpt-bisect"},
    "checkpoint": {"ckpt-inspect"},
    "run_dir": {"diagnose"},
    "run": {"train-log"},
    "path": {"disk"},
}


def task_options() -> dict[str, set[str]]:
    """Each task's option names, as its parameters (from a copy: building the contexts
    consumes the help)."""
    return {c.name: {str(a.name) for a in c.args.values()} for c in copy.deepcopy(ns).to_contexts()}


def test_each_meaning_has_one_name_and_each_name_one_meaning() -> None:
    flags = {t: {n.replace("-", "_") for n in names} for t, names in task_options().items()}
    for option, tasks in MEANINGS.items():
        have = {t for t, names in flags.items() if option in names}
        assert have == tasks, (option, have)
    assert not [t for t, names in flags.items() if "ckpt_dir" in names]


@pytest.mark.parametrize(
    ("old", "new", "note"),
    [
        (
            ["ckpt-scan", "--path", "/ck"],
            ["ckpt-scan", "--checkpoints", "/ck"],
            "--path is --checkpoints",
        ),
        (
            ["ckpt-bisect", "--path=/ck"],
            ["ckpt-bisect", "--checkpoints=/ck"],
            "--path is --checkpoints",
        ),
        (
            ["ckpt-inspect", "--path", "/ck/a.pt"],
            ["ckpt-inspect", "--checkpoint", "/ck/a.pt"],
            "--path is --checkpoint",
        ),
        (
            ["train-log", "--path", "/l.jsonl"],
            ["train-log", "--log", "/l.jsonl"],
            "--path is --log",
        ),
        (
            ["train-log", "--log", "/l.jsonl", "--ckpt-dir", "/ck"],
            ["train-log", "--log", "/l.jsonl", "--checkpoints", "/ck"],
            "--ckpt-dir is --checkpoints",
        ),
        (
            ["diagnose", "--run", "/r", "--path", "/ck"],
            ["diagnose", "--run-dir", "/r", "--checkpoints", "/ck"],
            "--run is --run-dir",
        ),
    ],
)
def test_an_old_name_works_for_this_release_with_a_note(
    old: list[str], new: list[str], note: str, tmp_path: Path
) -> None:
    was = cli(*old, "--dry-run", cwd=tmp_path)
    now = cli(*new, "--dry-run", cwd=tmp_path)
    assert was.returncode == now.returncode == 0, was.stderr + now.stderr
    assert was.stdout == now.stdout and "/" in was.stdout  # the same steps, the path in them
    assert (
        f"remotekit: {old[0]} {note} now" in was.stderr and "goes after this release" in was.stderr
    )
    assert "now (one name" not in now.stderr


def test_old_names_are_not_shown_and_only_rewritten_in_their_task(tmp_path: Path) -> None:
    for task, hidden in (
        ("train-log", ("--path", "--ckpt-dir")),
        ("diagnose", ("--path", "--run=")),
    ):
        shown = cli("--help", task, cwd=tmp_path).stdout
        assert not [h for h in hidden if h in shown], shown
    r = cli("disk", "--path", "/", "--dry-run", cwd=tmp_path)  # disk's own --path
    assert r.returncode == 0 and "is --" not in r.stderr, r.stderr
    r = cli("run", "--", "echo", "train-log", "--path", cwd=tmp_path)  # a command's own words
    assert r.returncode == 0 and r.stdout == "local | train-log --path\n", r.stdout
    assert r.stderr == "", r.stderr


def test_the_api_takes_the_same_names_and_warns_on_the_old_ones(tmp_path: Path) -> None:
    """Each function's steps, read off a dry-run target (nothing runs): the new keyword and
    the old one give the same step; the old one warns, naming the new."""
    from remotekit.diagnostics import checkpoints, trainlog
    from remotekit.diagnostics.diagnose import diagnose

    def chain(fn: object, *args: object, **kw: object) -> str:
        """The chains of the steps ``fn`` would run (diagnose runs each section's)."""
        t, chains = remotekit.Target(LOCAL, dry_run=True), []
        t.trace = lambda step, chain: chains.append(chain)
        with contextlib.suppress(remotekit.DryRun):
            fn(t, *args, **kw)  # type: ignore[operator]
        return "\n".join(chains)

    calls = [
        (
            trainlog.analyze_train_log,
            {"log": "/l.jsonl", "checkpoints": "/ck"},
            {"path": "/l.jsonl", "ckpt_dir": "/ck"},
        ),
        (
            trainlog.follow_train_log,
            {"log": "/l.jsonl", "checkpoints": "/ck"},
            {"path": "/l.jsonl", "ckpt_dir": "/ck"},
        ),
        (checkpoints.scan_checkpoints, {"checkpoints": "/ck"}, {"path": "/ck"}),
        (checkpoints.bisect_checkpoints, {"checkpoints": "/ck"}, {"directory": "/ck"}),
        (checkpoints.inspect_checkpoint, {"checkpoint": "/ck/a.pt"}, {"path": "/ck/a.pt"}),
        (diagnose, {"checkpoints": "/ck", "run_dir": "/r"}, {"path": "/ck", "run": "/r"}),
    ]
    for fn, new, old in calls:
        if fn is trainlog.follow_train_log:  # a follow starts its step when iterated

            def fn(t: remotekit.Target, _f: object = fn, **kw: object) -> None:
                with _f(t, **kw) as live:  # type: ignore[operator]
                    next(iter(live))

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            now = chain(fn, **new)
        with pytest.warns(
            DeprecationWarning, match=r"is \w+\((log|checkpoints|checkpoint|run_dir)=\) now"
        ):
            was = chain(fn, **old)
        assert was == now and "/ck" in now, (fn, was, now)
    with pytest.raises(TypeError, match="takes checkpoints="):
        trainlog.analyze_train_log(
            remotekit.Target(LOCAL, dry_run=True), "/l", ckpt_dir="/a", checkpoints="/b"
        )


def test_no_old_name_is_left_in_what_the_package_says() -> None:
    """The hints and errors the package prints name the new options (the old live only in
    the table of old names)."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from remotekit.diagnostics.trainlog.api import no_loss_hints as h; print(h('g', '/l', ['x']))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--log /l" in r.stdout and "--path" not in r.stdout
