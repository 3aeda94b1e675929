"""The shipped files on other Pythons: the runner needs >= 3.6, the diagnostics >= 3.8.

Uses whatever other interpreters this machine has (python3.X on PATH, pyenv versions);
each is a real interpreter running the real shipped files through the local target.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import remotekit
from remotekit.diagnostics import system, trainlog
from tests.harness import PYTHONS

OLD = sorted(v for v in PYTHONS if (3, 6) <= v < (3, 11))


def ids(v: tuple[int, int]) -> str:
    return f"py{v[0]}.{v[1]}"


@pytest.mark.parametrize(
    "version", [v for v in OLD if v >= (3, 6)] or [None], ids=lambda v: ids(v) if v else "none"
)
def test_runner_on_older_pythons(version: tuple[int, int] | None) -> None:
    if version is None:
        pytest.skip("no other Python >= 3.6 on this machine")
    with remotekit.local_target(python=PYTHONS[version]) as t:
        r = t.run_python(remotekit.Script("import sys\nprint(sys.version_info[:2])\n"), args=["x"])
        assert r.stdout.strip() == str(version)
        assert t.run(["echo", "ok"]).stdout == "ok\n"
        with pytest.raises(remotekit.StepTimeout):
            t.run(["sleep", "30"], timeout=1)


@pytest.mark.parametrize(
    "version", [v for v in OLD if v >= (3, 8)] or [None], ids=lambda v: ids(v) if v else "none"
)
def test_stdlib_diagnostics_on_older_pythons(
    version: tuple[int, int] | None, tmp_path: Path
) -> None:
    if version is None:
        pytest.skip("no other Python >= 3.8 on this machine")
    with remotekit.local_target(python=PYTHONS[version]) as t:
        env = system.environment(t)
        assert env.python is not None and env.python.startswith(f"{version[0]}.{version[1]}")
        log = tmp_path / "train.jsonl"
        log.write_text(
            "".join(
                json.dumps({"step": i, "loss": 1.0 + (i % 3) * 0.01}) + "\n" for i in range(300)
            )
        )
        report = trainlog.analyze_train_log(t, str(log))
        assert report.source is not None and report.source.rows == 300


@pytest.mark.parametrize(
    "version", [v for v in OLD if v >= (3, 8)] or [None], ids=lambda v: ids(v) if v else "none"
)
def test_a_call_on_older_pythons(version: tuple[int, int] | None, tmp_path: Path) -> None:
    """``call.py`` (the far side of Target.call) and the runner's value pipe on Python >= 3.8:
    a value, an exception with its traceback, a timeout."""
    if version is None:
        pytest.skip("no other Python >= 3.8 on this machine")
    (tmp_path / "old_checks.py").write_text(
        "import sys, time\n"
        "def version():\n"
        "    return list(sys.version_info[:2])\n"
        "def boom():\n"
        "    raise OSError('no')\n"
        "def nap():\n"
        "    time.sleep(30)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import old_checks  # type: ignore[import-not-found]

        with remotekit.local_target(python=PYTHONS[version]) as t:
            assert t.call(old_checks.version, timeout=60) == list(version)
            with pytest.raises(remotekit.RemoteError, match="OSError: no"):
                t.call(old_checks.boom, timeout=60)
            with pytest.raises(remotekit.StepTimeout):
                t.call(old_checks.nap, timeout=1)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("old_checks", None)


def test_python2_gets_a_clear_error() -> None:
    if (2, 7) not in PYTHONS:
        pytest.skip("no Python 2.7 here")
    with (
        remotekit.local_target(python=PYTHONS[(2, 7)]) as t,
        pytest.raises(remotekit.RemotekitError, match=r"needs Python >= 3\.6"),
    ):
        t.run(["true"])
