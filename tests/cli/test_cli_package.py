"""The task collection as a package: `python -m remotekit` from anywhere, the collection
mounted in a user's own tasks.py, and the selection options declared once (fleet_task)."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from invoke import Context

import remotekit.tasks
from remotekit.cli import selection
from remotekit.cli.selection import OPTIONS_HERE, Selection, fleet_task
from tests.harness import ROOT


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)}
    env.pop("REMOTEKIT_HOSTS", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_python_m_remotekit_works_from_any_directory(tmp_path: Path) -> None:
    r = run([sys.executable, "-m", "remotekit", "--list"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "  ckpt-scan " in r.stdout and "  hosts " in r.stdout
    assert "bench" not in r.stdout  # the repository's dev task is not the package's
    r = run([sys.executable, "-m", "remotekit", "hosts"], tmp_path)
    assert r.returncode == 0 and "(embedded default)" in r.stdout
    r = run([sys.executable, "-m", "remotekit", "run", "--cmd", "echo hi there"], tmp_path)
    assert r.returncode == 0 and "hi there" in r.stdout
    r = run([sys.executable, "-m", "remotekit", "run"], tmp_path)
    assert r.returncode == 2 and "give the command after -- (or --cmd)" in r.stderr
    r = run([sys.executable, "-m", "remotekit", "--print-completion-script", "zsh"], tmp_path)
    assert r.returncode == 0 and "_complete_remotekit + -f remotekit" in r.stdout
    # what the completion script asks: the candidates for "remotekit ckpt-scan --"
    r = run([sys.executable, "-m", "remotekit", "--complete", "--", "remotekit", "ckpt-"], tmp_path)
    assert {"ckpt-scan", "ckpt-diff", "ckpt-bisect"} <= set(r.stdout.split())
    r = run(
        [sys.executable, "-m", "remotekit", "--complete", "--", "remotekit", "ping", "--"], tmp_path
    )
    assert {"--host", "--group", "--all", "--inventory"} <= set(r.stdout.split())


def test_the_repositorys_invoke_holds_its_dev_tasks_and_its_options_are_true(
    tmp_path: Path,
) -> None:
    """One face per set of tasks: remotekit's behind ``remotekit`` (only options that act),
    the repository's dev tasks behind ``invoke``, whose own options act on them (they call
    ``c.run``): ``--dry`` shows the benchmarks' commands and runs none."""
    invoke = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]
    r = run([*invoke, "--list"], tmp_path)
    assert r.returncode == 0, r.stderr
    listed = set(re.findall(r"^  (\S+)", r.stdout, re.M))
    assert listed == {"bench"}
    assert not listed & set(remotekit.tasks.ns.task_names)
    r = run([*invoke, "ping"], tmp_path)
    assert r.returncode != 0 and "No idea what 'ping' is" in r.stderr
    r = run([*invoke, "--dry", "bench", "--quick"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{sys.executable} bench/bench_engine.py --runs 10" in r.stdout
    assert "== bench/bench_sync.py" in r.stdout and "PASS" not in r.stdout


def test_a_users_tasks_py_mounts_the_collection(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(
        textwrap.dedent(
            """
            from invoke import Collection, task
            import remotekit.tasks

            @task
            def train(c):
                print("training")

            ns = Collection(train)
            ns.add_collection(remotekit.tasks.ns, "rk")
            """
        )
    )
    invoke = [sys.executable, "-m", "invoke", "--search-root", str(tmp_path)]
    r = run([*invoke, "--list"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "  train" in r.stdout and "  rk.ping " in r.stdout and "  rk.ckpt-scan " in r.stdout
    r = run([*invoke, "rk.hosts"], tmp_path)
    assert r.returncode == 0 and "local" in r.stdout, r.stderr
    r = run([*invoke, "rk.run", "--cmd", "echo mounted", "--host", "local"], tmp_path)
    assert r.returncode == 0 and "mounted" in r.stdout, r.stderr
    r = run([*invoke, "rk.run", "--host", "local", "--", "echo", "a  b"], tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | a  b"], r.stderr
    r = run([*invoke, "train"], tmp_path)
    assert r.returncode == 0 and "training" in r.stdout


def test_fleet_task_puts_the_selection_where_sel_stands() -> None:
    seen: list[tuple[str, Selection, int]] = []

    @fleet_task(help={"path": "a path", "jobs": "how many"})
    def probe(c: Context, path: str = "", sel: Selection = OPTIONS_HERE, jobs: int = 1) -> None:
        """A probe."""
        seen.append((path, sel, jobs))

    names = list(inspect.signature(probe.body).parameters)
    assert names == ["c", "path", *selection.SELECT_HELP, "jobs"]
    assert set(probe.help) == {"path", "jobs", *selection.SELECT_HELP}
    probe(Context(), path="p", host="a,b", parallel=3, jobs=2)
    assert seen == [("p", Selection(host="a,b", parallel=3), 2)]
    probe(Context())
    assert seen[-1] == ("", Selection(), 1)


def test_every_fleet_task_takes_the_same_selection_options() -> None:
    fleet = [t for t in remotekit.tasks.TASKS if "parallel" in inspect.signature(t.body).parameters]
    assert len(fleet) >= 15
    for t in fleet:
        params = inspect.signature(t.body).parameters
        assert all(name in params for name in selection.SELECT_HELP), t.name
        assert all(t.help[name] == text for name, text in selection.SELECT_HELP.items())
