"""remotekit's tasks in this repository: `invoke --list`.

The package's tasks (``remotekit --list`` once installed: the same tasks, flags and output)
come from :mod:`remotekit.cli`; this file adds the project's dev tasks (``bench``).
"""

from __future__ import annotations

import shlex
import sys

from invoke import Context, Exit, task

from remotekit.cli import collection


@task(help={"quick": "smaller sizes and fewer runs (minutes -> about one)"})
def bench(c: Context, quick: bool = False) -> None:
    """Run the benchmarks in bench/ (each compares against its named baseline in one run)."""
    runs = [
        ["bench/bench_engine.py", *(["--runs", "10"] if quick else [])],
        ["bench/bench_layers.py", *(["--runs", "10"] if quick else [])],
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


ns = collection(bench)
