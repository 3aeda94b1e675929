"""The checks every commit passes, run as tests so CI runs them: ``ruff check`` and ``ruff
format --check`` on the code and its tests, and ``mypy`` with pyproject.toml's settings
(``strict`` on the package; the files shipped there are checked without strictness, their
functions the local side calls annotated).

Without the tools (the ``dev`` extra: ruff, mypy and the stubs of PyYAML and paramiko) the
checks are skipped, except under ``CI=true``, where a missing tool is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

#: What ruff looks at (the brief's pre-commit line): the package, its tests, benchmarks, tools.
SOURCES = ("remotekit", "tests", "bench", "tools")
#: The dev extra's parts, by the module each installs.
TOOLS = {
    "ruff": "ruff",
    "mypy": "mypy",
    "yaml-stubs": "types-PyYAML",
    "paramiko-stubs": "types-paramiko",
}


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    missing = [pkg for mod, pkg in TOOLS.items() if importlib.util.find_spec(mod) is None]
    if not missing:
        return
    why = f"{', '.join(missing)} not installed (pip install -e '.[dev]')"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def tool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_ruff_finds_nothing() -> None:
    r = tool("ruff", "check", *SOURCES)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_code_is_formatted() -> None:
    r = tool("ruff", "format", "--check", *SOURCES)
    assert r.returncode == 0, "run `ruff format remotekit tests bench tools`:\n" + r.stdout


@pytest.mark.timeout(600)
def test_mypy_strict_finds_nothing() -> None:
    r = tool("mypy")  # files, strictness and the shipped files' exceptions: pyproject.toml
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


def test_the_settings_are_strict(tmp_path: Path) -> None:
    """The checks can fail: with the project's settings an untyped function is an error,
    and so is an unused import."""
    (tmp_path / "loose.py").write_text("import os\n\n\ndef f(x):\n    return x\n")
    config = str(ROOT / "pyproject.toml")
    typed = tool("mypy", "--config-file", config, "loose.py", cwd=tmp_path)
    assert typed.returncode == 1 and "[no-untyped-def]" in typed.stdout, typed.stdout
    linted = tool("ruff", "check", "--config", config, "loose.py", cwd=tmp_path)
    assert linted.returncode == 1 and "F401" in linted.stdout, linted.stdout
