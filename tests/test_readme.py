"""README's two commands stay true: CI runs exactly README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README has no bash block near the top"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_has_the_two_commands_near_the_top() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.index("```bash") < 600
    setup_and_main, setup_and_test = readme_commands()
    assert setup_and_main.startswith("bash .ci/setup && ") and "invoke demo" in setup_and_main
    assert setup_and_test.startswith("bash .ci/setup && ") and "pytest" in setup_and_test


def test_ci_runs_readmes_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci


def test_every_task_is_in_the_readme() -> None:
    from invoke import Collection

    import tasks

    names = set(Collection.from_module(tasks).task_names)
    table = (ROOT / "README.md").read_text()
    missing = sorted(n for n in names if f"`{n}" not in table)
    assert not missing, f"tasks missing from README's task table: {missing}"
