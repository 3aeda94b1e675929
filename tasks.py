"""This repository's dev tasks: ``invoke --list`` (``.venv/bin/invoke`` after ``.ci/setup``).

remotekit's own tasks are the ``remotekit`` command (``.venv/bin/remotekit`` in this clone):
invoke's program shows its own options (``--dry``, ``--echo``, ``-T``, ``--warn-only``), which
change invoke's ``c.run``. The dev tasks here call ``c.run``, so there those options are true;
remotekit's tasks do not, so they live behind ``remotekit``, which offers only options that act.
"""

from __future__ import annotations

import shlex
import sys

from invoke import Collection, Context, Exit, task


@task(help={"quick": "smaller sizes and fewer runs (minutes -> about one)"})
def bench(c: Context, quick: bool = False) -> None:
    """Run the benchmarks in bench/ (each compares against its named baseline in one run)."""
    runs = [
        ["bench/bench_engine.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_layers.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_chains.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_fleet.py", *(["--reps", "1"] if quick else [])],
        ["bench/bench_diagnose.py", *(["--runs", "1", "--frames", "4"] if quick else [])],
        ["bench/bench_transfer.py", *(["--sizes", "20,80", "--runs", "1"] if quick else [])],
        ["bench/bench_trainlog.py"],
        ["bench/bench_ckpt.py", *(["--size-gb", "0.5"] if quick else [])],
        ["bench/bench_forward.py", *(["--mb", "50", "--runs", "3"] if quick else [])],
        ["bench/bench_runs.py", *(["--lines", "30", "--mb", "32"] if quick else [])],
        [
            "bench/bench_sync.py",
            *(["--files", "2000", "--big-mb", "16", "--runs", "1"] if quick else []),
        ],
    ]
    worst = 0
    for argv in runs:
        print(f"== {argv[0]}", flush=True)
        worst = max(worst, c.run(shlex.join([sys.executable, *argv]), warn=True).exited)
    if worst:
        raise Exit(code=worst)


ns = Collection(bench)
