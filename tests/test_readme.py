"""README's two commands stay true: CI runs exactly README's test command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.harness import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README has no bash block near the top"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_has_the_two_commands_near_the_top() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.index("```bash") < 600
    setup_and_main, setup_and_test = readme_commands()
    # the first installs only what the demo and --plot need: `.ci/setup demo`
    assert (
        setup_and_main.startswith("bash .ci/setup demo && ") and "remotekit demo" in setup_and_main
    )
    assert setup_and_test.startswith("bash .ci/setup && ") and "pytest" in setup_and_test


def test_ci_runs_readmes_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci


def setup_installs(tmp_path: Path, *args: str) -> list[str]:
    """What `.ci/setup ARGS` asks pip for, run in a copy of .ci/ whose .venv/bin/python is a
    fake that records its argv (so nothing is downloaded)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "setup").write_text((ROOT / ".ci" / "setup").read_text())
    log = tmp_path / "argv.log"
    fake = repo / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", str(repo / ".ci" / "setup"), *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in log.read_text().splitlines() if " install " in line]


def test_readmes_first_command_installs_only_what_the_demo_and_plot_need(tmp_path: Path) -> None:
    demo = setup_installs(tmp_path / "demo", "demo")
    assert [line.split()[-1] for line in demo] == ["pip", "torch==2.13.0", ".[plot]"]
    full = setup_installs(tmp_path / "full")
    assert full[-1].split()[-1] == ".[test,dev,plot]"
    r = subprocess.run(
        ["bash", str(ROOT / ".ci" / "setup"), "tests"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "usage: bash .ci/setup [demo]" in r.stderr
