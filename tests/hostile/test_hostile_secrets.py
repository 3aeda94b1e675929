"""secret_env values never leak into what remotekit renders (issue 11).

Every rendered output is searched for each secret and each line of a multi-line one: the
`remotekit run`/`py` summary and its finding column, errors, --verbose, --json. The step's own
output passes through live and in --json unless --mask-output; then nothing holds them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import remotekit
from tests.conftest import write_inventory

TOKEN = "hf_SeCrEt0123456789"
MULTI = "first-line-of-the-key-AAAA\nsecond-line-of-the-key-BBBB"
PIECES = (TOKEN, "first-line-of-the-key-AAAA", "second-line-of-the-key-BBBB")
# Prints both secrets (the multi-line one on stderr, so the finding shows its *last* line
# while its first line stays above), then fails.
LEAK = "sh -c 'echo $HF_TOKEN; echo \"$MULTI\" >&2; exit 3'"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def inv_dir(tmp_path: Path, agent: bool | None) -> Path:
    env = {"HF_TOKEN": TOKEN, "MULTI": MULTI}
    box = {"env": env, "secret_env": ["HF_TOKEN", "MULTI"]}
    write_inventory(tmp_path / "hosts.yaml", {"box": box, "box2": box}, agent=agent)
    return tmp_path


def _ours(text: str) -> list[str]:
    """The lines remotekit wrote itself: everything but a host's live output lines."""
    return [ln for ln in text.splitlines() if not re.match(r"box2? *\| ", ln)]


def _leaks(lines: list[str]) -> list[str]:
    return [ln for ln in lines if any(p in ln for p in PIECES)]


@pytest.mark.timeout(120)
def test_run_summary_errors_and_verbose_are_masked(inv_dir: Path) -> None:
    r = cli(inv_dir, "run", "--host", "box,box2", "--cmd", LEAK, "--verbose")
    assert r.returncode == 2
    assert "exit 3: ***" in r.stdout  # the finding column
    assert _leaks(_ours(r.stdout + r.stderr)) == []
    # live output passes through, as documented
    assert f"box  | {TOKEN}" in r.stdout


@pytest.mark.timeout(120)
def test_mask_output_masks_everything(inv_dir: Path) -> None:
    r = cli(inv_dir, "run", "--host", "box,box2", "--cmd", LEAK, "--mask-output")
    assert r.returncode == 2
    assert _leaks((r.stdout + r.stderr).splitlines()) == []
    assert "box  | ***" in r.stdout


@pytest.mark.timeout(120)
def test_json_passes_output_through_unless_masked(inv_dir: Path) -> None:
    r = cli(inv_dir, "run", "--host", "box", "--cmd", LEAK, "--json")
    doc = json.loads(r.stdout)
    assert doc["hosts"][0]["result"]["stdout"] == TOKEN + "\n"
    r = cli(inv_dir, "run", "--host", "box", "--cmd", LEAK, "--json", "--mask-output")
    doc = json.loads(r.stdout)
    assert doc["hosts"][0]["result"]["stdout"] == "***\n"
    assert _leaks((r.stdout + r.stderr).splitlines()) == []


@pytest.mark.timeout(120)
def test_py_task_errors_are_masked(inv_dir: Path) -> None:
    script = inv_dir / "leak.py"
    script.write_text("import os, sys\nraise SystemExit('boom ' + os.environ['MULTI'])\n")
    r = cli(inv_dir, "py", "--host", "box", "--script", str(script))
    assert r.returncode == 2
    assert _leaks(_ours(r.stdout + r.stderr)) == []


def _spec(**env: str) -> remotekit.HostSpec:
    return remotekit.HostSpec(name="box", env=env, secret_env=frozenset({"HF_TOKEN", "MULTI"}))


@pytest.mark.timeout(30)
def test_per_call_env_secret_is_masked_in_errors(agent: bool | None) -> None:
    with remotekit.Target(_spec(), agent=agent) as t:
        with pytest.raises(remotekit.StepFailed) as info:
            t.run(["sh", "-c", 'echo "$HF_TOKEN"; exit 3'], env={"HF_TOKEN": TOKEN})
        assert TOKEN in info.value.result.stdout  # the step's own output, kept as it was
        assert TOKEN not in str(info.value) and "***" in str(info.value)
        assert TOKEN not in t.redact(f"x {TOKEN} y")


@pytest.mark.timeout(30)
def test_every_line_of_a_multiline_secret_is_masked_in_errors(agent: bool | None) -> None:
    with remotekit.Target(_spec(MULTI=MULTI), agent=agent) as t:
        with pytest.raises(remotekit.StepFailed) as info:
            t.run(["sh", "-c", 'echo "$MULTI" >&2; exit 3'])
        assert _leaks(str(info.value).splitlines()) == []
        with pytest.raises(remotekit.StepTimeout) as timeout:
            t.run(["sh", "-c", 'echo "$MULTI"; sleep 30'], timeout=0.5)
        assert _leaks(str(timeout.value).splitlines()) == []


@pytest.mark.timeout(30)
def test_a_non_string_env_value_is_refused_and_the_target_still_works(
    agent: bool | None,
) -> None:
    spec = remotekit.HostSpec(name="box", secret_env=frozenset({"CALL_TOKEN", "HF_TOKEN"}))
    with remotekit.Target(spec, agent=agent) as t:
        for value in (12345, ["hf_x"], 98.76, b"hf_bytes"):
            with pytest.raises(TypeError) as info:
                t.run(["true"], env={"CALL_TOKEN": value})  # type: ignore[dict-item]
            assert "CALL_TOKEN" in str(info.value) and repr(value) not in str(info.value)
        # every later error on the target is its own, masked as before
        with pytest.raises(remotekit.StepFailed) as failed:
            t.run(["sh", "-c", 'echo "$HF_TOKEN" >&2; exit 3'], env={"HF_TOKEN": TOKEN})
        assert TOKEN not in str(failed.value) and "exit" in str(failed.value)


def test_masking_accepts_any_value_and_never_fails() -> None:
    from remotekit.engine import mask

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    text = "a 12345 b ['hf_x'] c hf_y d {'k': 'hf_z'}"
    out = mask(text, [12345, ["hf_x"], {"k": "hf_z"}, Hostile(), None, "", b"hf_y", "hf_y"])
    assert out == "a *** b *** c *** d ***", out


@pytest.mark.timeout(60)
def test_a_detached_runs_later_calls_mask_the_secrets_it_started_with(
    tmp_path: Path, agent: bool | None
) -> None:
    """A run's wait, stop and logs (followed or not) are calls of their own, long after the
    step that started it: the far side's words in their errors (here the supervisor's "no
    run ... in DIR", a runs dir whose name holds the secret) leave masked, with the secret
    the run was started with (``env=``), as every other error of the target."""
    spec = remotekit.HostSpec(
        name="box", secret_env=frozenset({"HF_TOKEN"}), runs_dir=str(tmp_path / f"runs-{TOKEN}")
    )
    with remotekit.Target(spec, agent=agent) as t:
        run = t.run(["true"], env={"HF_TOKEN": TOKEN}, detach=True, timeout=30)
        run.wait(timeout=30)
        run.rm()  # what follows asks for a run the supervisor no longer has
        calls = {
            "wait": lambda: run.wait(timeout=30),
            "stop": lambda: run.stop(grace=1),
            "logs": lambda: list(run.logs(follow=True)),
            "logs --offset": lambda: list(run.logs(offset=0)),
        }
        said = {}
        for name, call in calls.items():
            with pytest.raises(remotekit.RemotekitError) as info:
                call()
            said[name] = str(info.value)
        assert {n: s for n, s in said.items() if TOKEN in s or "***" not in s} == {}


@pytest.mark.timeout(60)
def test_a_followed_runs_warning_masks_the_secret(tmp_path: Path, agent: bool | None) -> None:
    """The warning a follow gives when the log is truncated there names the log's path (in
    a runs dir whose name holds the secret): masked, as an error would be."""
    spec = remotekit.HostSpec(
        name="box", secret_env=frozenset({"HF_TOKEN"}), runs_dir=str(tmp_path / f"runs-{TOKEN}")
    )
    go = tmp_path / "go"
    script = f"echo a-longer-first-line; while [ ! -e {go} ]; do sleep .05; done; echo b1"
    warned: list[str] = []
    with remotekit.Target(spec, agent=agent) as t:
        run = t.run(["sh", "-c", script], env={"HF_TOKEN": TOKEN}, detach=True, timeout=30)
        try:
            chunks = iter(run.logs(follow=True, on_warning=warned.append))
            assert next(chunks) == b"a-longer-first-line\n"  # then shorter than it was
            t.run(["truncate", "-s", "0", run.info().log], timeout=20)
            go.touch()
            assert b"".join(chunks) == b"b1\n"
        finally:
            go.touch()
            run.wait(timeout=30)
            run.rm()
    assert len(warned) == 1 and "was truncated" in warned[0], warned
    assert TOKEN not in warned[0] and "***" in warned[0], warned
