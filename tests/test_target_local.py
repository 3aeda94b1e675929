"""The same API against the `local` target (no SSH): this runs everywhere, sshd or not."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest

import remotekit
from tests.harness import processes_with, wait_gone


def test_run_and_result(local: remotekit.Target) -> None:
    r = local.run(["sh", "-c", "echo out; echo err >&2; exit 0"], step="hello")
    assert (r.host, r.step, r.argv, r.exit_code, r.ok) == (
        "local",
        "hello",
        ("sh", "-c", "echo out; echo err >&2; exit 0"),
        0,
        True,
    )
    assert (r.stdout, r.stderr) == ("out\n", "err\n")
    assert r.duration_s > 0
    with pytest.raises(AttributeError):
        r.exit_code = 1  # type: ignore[misc]  # frozen


def test_argv_must_be_a_list(local: remotekit.Target) -> None:
    with pytest.raises(TypeError, match="list"):
        local.run("ls -l")  # type: ignore[arg-type]


def test_failed_step_carries_its_result(local: remotekit.Target) -> None:
    with pytest.raises(remotekit.StepFailed) as info:
        local.run(["sh", "-c", "echo partial; echo boom >&2; exit 7"])
    e = info.value
    assert e.result.exit_code == 7 and e.result.stdout == "partial\n"
    assert "exited with 7" in str(e) and "boom" in str(e) and e.host == "local"
    r = local.run(["sh", "-c", "exit 7"], check=False)
    assert r.exit_code == 7 and not r.ok


def test_signal_exit_code(local: remotekit.Target) -> None:
    r = local.run(["sh", "-c", "kill -TERM $$"], check=False)
    assert r.exit_code == 128 + 15


def test_command_not_found(local: remotekit.Target) -> None:
    with pytest.raises(remotekit.StepFailed) as info:
        local.run(["no-such-command-xyz"])
    assert info.value.result.exit_code == 127
    assert "command not found: no-such-command-xyz" in str(info.value)


def test_missing_workdir(local: remotekit.Target) -> None:
    with pytest.raises(remotekit.StepFailed, match="/no/such/dir"):
        local.run(["true"], cwd="/no/such/dir")


def test_missing_interpreter_is_named() -> None:
    with (
        remotekit.local_target(python="/opt/nope/bin/python3") as t,
        pytest.raises(remotekit.InterpreterNotFound) as info,
    ):
        t.run(["true"])
    assert info.value.path == "/opt/nope/bin/python3"


def test_run_python_from_a_file(local: remotekit.Target, tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('hello', *sys.argv[1:])\n")
    r = local.run_python(script, args=["a b", "c"])
    assert r.stdout == "hello a b c\n" and r.step == "hello.py"


def test_python_exit_codes_and_tracebacks(local: remotekit.Target) -> None:
    r = local.run_python(remotekit.Script("raise SystemExit(3)"), check=False)
    assert r.exit_code == 3
    r = local.run_python(remotekit.Script("def f():\n    1/0\nf()\n", name="bad.py"), check=False)
    assert r.exit_code == 1
    assert r.stderr.startswith("Traceback") and 'bad.py", line 3' in r.stderr
    assert "runner" not in r.stderr and "runpy" not in r.stderr


#: What ``python file.py`` gives a script: its globals, ``__main__`` in sys.modules (so its
#: classes pickle), argv, and the encoding its coding line names.
AS_A_FILE = """\
# -*- coding: latin-1 -*-
import os, pickle, sys
class Point:
    pass
print(__name__, os.path.basename(__file__), os.path.basename(sys.argv[0]), sys.argv[1:])
print(sys.modules["__main__"].Point is Point, type(pickle.loads(pickle.dumps(Point()))) is Point)
print("caf\xe9", __doc__, __spec__)
"""


def test_a_shipped_script_runs_as_python_runs_a_file(local: remotekit.Target) -> None:
    script = remotekit.Script(AS_A_FILE.encode("latin-1"), name="as_file.py")
    r = local.run_python(script, args=["a b"])
    assert r.stdout.splitlines() == [
        "__main__ as_file.py as_file.py ['a b']",
        "True True",
        "caf\xe9 None None",
    ]


def test_a_shipped_zip_app_and_a_syntax_error(local: remotekit.Target) -> None:
    """What does not compile as a source file still runs as ``python app.pyz`` runs it,
    and a syntax error reads as Python tells it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("__main__.py", "import sys\nprint('zipped', sys.argv[1:])\n")
    r = local.run_python(remotekit.Script(buf.getvalue(), name="app.pyz"), args=["x"])
    assert r.stdout == "zipped ['x']\n"
    r = local.run_python(remotekit.Script("x = (\n", name="broken.py"), check=False)
    assert r.exit_code == 1 and "SyntaxError" in r.stderr and "broken.py" in r.stderr


def test_python_env_override_uses_a_fresh_interpreter(local: remotekit.Target) -> None:
    r = local.run_python(
        remotekit.Script("import sys\nprint(sys.flags.optimize)\n"), env={"PYTHONOPTIMIZE": "2"}
    )
    assert r.stdout == "2\n"


def test_stdin_of_a_step_is_empty(local: remotekit.Target) -> None:
    r = local.run_python(remotekit.Script("import sys\nprint(repr(sys.stdin.read()))\n"))
    assert r.stdout == "''\n"


def test_temp_dir_is_private_and_removed(local: remotekit.Target) -> None:
    code = "import os, stat\nd = os.environ['REMOTEKIT_DIR']\nprint(d, oct(stat.S_IMODE(os.stat(d).st_mode)))\n"
    r = local.run_python(remotekit.Script(code))
    path, mode = r.stdout.split()
    assert mode == "0o700"
    assert not os.path.exists(path)


def test_timeout_on_the_local_target(local: remotekit.Target) -> None:
    m = f"70{uuid.uuid4().int % 10**6:06d}.5"
    t0 = time.monotonic()
    with pytest.raises(remotekit.StepTimeout) as info:
        local.run(["sh", "-c", f"echo begun; sleep {m}"], timeout=1.5)
    assert time.monotonic() - t0 < 4
    assert info.value.result.stdout == "begun\n" and info.value.timeout_s == 1.5
    assert wait_gone(m, 3) == []


def test_term_ignoring_step_is_killed(local: remotekit.Target) -> None:
    m = f"71{uuid.uuid4().int % 10**6:06d}"
    code = f"import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('{m}', flush=True)\ntime.sleep(600)\n"
    with pytest.raises(remotekit.StepTimeout):
        local.run(["python3", "-c", code], timeout=1)
    assert wait_gone(m, 4) == []


def test_cancel_stops_running_steps(local: remotekit.Target) -> None:
    m = f"72{uuid.uuid4().int % 10**6:06d}.5"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            local.run(["sleep", m], timeout=60)
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=run)
    th.start()
    end = time.monotonic() + 10
    while not processes_with(m) and time.monotonic() < end:
        time.sleep(0.02)
    local.cancel()
    th.join(10)
    assert errors and isinstance(errors[0], remotekit.StepCancelled)
    assert wait_gone(m, 3) == []
    with pytest.raises(remotekit.StepCancelled):
        local.run(["true"])


def test_on_output_gets_lines_with_their_stream(local: remotekit.Target) -> None:
    seen: list[tuple[str, str]] = []
    local.run(
        ["sh", "-c", "printf 'a\\nb'; printf 'e\\n' >&2"],
        on_output=lambda stream, line: seen.append((stream, line)),
    )
    assert sorted(seen) == [("stderr", "e"), ("stdout", "a"), ("stdout", "b")]


def test_capture_limit_keeps_the_tail() -> None:
    with remotekit.Target(remotekit.local_target().spec, capture_limit=1000) as t:
        r = t.run(["sh", "-c", "i=0; while [ $i -lt 500 ]; do echo line$i; i=$((i+1)); done"])
    assert r.stdout.endswith("line499\n") and len(r.stdout) <= 1000
    assert r.stdout_dropped + len(r.stdout) == sum(len(f"line{i}\n") for i in range(500))


def test_very_long_lines_are_cut_into_pieces(local: remotekit.Target) -> None:
    pieces: list[int] = []
    local.run_python(
        remotekit.Script("import sys\nsys.stdout.write('x' * 3_000_000)\n"),
        on_output=lambda s, line: pieces.append(len(line)),
        capture=False,
    )
    assert sum(pieces) == 3_000_000 and max(pieces) <= 1 << 20


def test_put_parents_creates_the_missing_directories(
    local: remotekit.Target, tmp_path: Path
) -> None:
    src = tmp_path / "a.bin"
    src.write_bytes(b"abc")
    with pytest.raises(remotekit.StepError, match="does not exist"):
        local.put(src, str(tmp_path / "x" / "y" / "a.bin"))
    local.put(src, str(tmp_path / "x" / "y" / "a.bin"), parents=True)
    local.put(src, f"{tmp_path}/p/q/", parents=True)  # a trailing / names the directory
    assert (tmp_path / "x" / "y" / "a.bin").read_bytes() == (tmp_path / "p/q/a.bin").read_bytes()


def test_put_and_get(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(100_000))
    local.put(src, str(tmp_path / "b.bin"), mode=0o600)
    assert (tmp_path / "b.bin").read_bytes() == src.read_bytes()
    assert (tmp_path / "b.bin").stat().st_mode & 0o777 == 0o600
    (tmp_path / "d").mkdir()
    local.put(src, str(tmp_path / "d"))
    assert (tmp_path / "d" / "a.bin").exists()
    local.get(str(tmp_path / "b.bin"), tmp_path / "c.bin")
    assert (tmp_path / "c.bin").read_bytes() == src.read_bytes()
    with pytest.raises(remotekit.StepFailed, match="does not exist"):
        local.put(src, str(tmp_path / "nodir" / "x"))
    with pytest.raises(remotekit.RemotekitError, match="cannot read local file"):
        local.put(tmp_path / "missing", str(tmp_path / "x"))


def test_ping_local(local: remotekit.Target) -> None:
    report = local.ping()
    assert [c.ok for c in report.checks] == [True, True, True]
    assert report.checks[1].layer == sys.executable and report.exit_code == 0


def test_chain(local: remotekit.Target) -> None:
    assert local.chain == f"local -> {sys.executable}"


# -- a hop that looks up where it goes when the target opens (a Slurm job by name) ----------

SQUEUE = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/squeue.calls"
case "$*" in
  *--name=train*) printf '4241 PENDING\\n4242 RUNNING\\n' ;;
  *--name=queued*) printf '4243 PENDING\\n' ;;
  *--jobs=4242*) echo RUNNING ;;
esac
"""
# srun's CLI as remotekit uses it: options, then `--`, then the argv it runs in the allocation
SRUN = """#!/bin/sh
echo "$@" > "$(dirname "$0")/srun.args"
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def slurm_bin(tmp_path: Path) -> Path:
    for name, body in (("squeue", SQUEUE), ("srun", SRUN)):
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o755)
    return tmp_path


def test_a_job_by_name_is_looked_up_once_when_the_target_opens(slurm_bin: Path) -> None:
    inv = remotekit.parse_inventory(
        f"hosts:\n  job: {{slurm: {{name: train, bin: {slurm_bin / 'srun'}}}, "
        f"python: {sys.executable}}}\n"
    )
    with inv.target("job") as t:
        assert "srun --job-name train" in t.chain
        steps = [threading.Thread(target=t.run, args=(["true"],)) for _ in range(4)]
        for s in steps:
            s.start()
        for s in steps:
            s.join(30)
        assert t.run(["echo", "in"]).stdout == "in\n"
        assert "srun --jobid 4242" in t.chain
        report = t.ping()
    assert report.failed is None, report.findings
    assert [c.layer for c in report.checks][:2] == ["local", "srun --jobid 4242"]
    calls = (slurm_bin / "squeue.calls").read_text().splitlines()
    assert calls == ["--noheader --name=train --format=%i %T", "--noheader --jobs=4242 --format=%T"]
    srun = (slurm_bin / "srun.args").read_text().split()
    assert srun[:5] == ["--jobid=4242", "--overlap", "--unbuffered", "--export=NONE", "--"]


def test_a_job_by_name_that_is_pending_names_the_job(slurm_bin: Path) -> None:
    inv = remotekit.parse_inventory(
        f"hosts:\n  job: {{slurm: {{name: queued, bin: {slurm_bin / 'srun'}}}}}\n"
    )
    with inv.target("job") as t, pytest.raises(remotekit.ContainerNotRunning) as info:
        t.run(["true"], step="look")
    assert (info.value.host, info.value.step, info.value.container) == ("job", "look", "queued")
    assert "no RUNNING job named 'queued'; squeue shows: 4243 PENDING" in str(info.value)
    assert not (slurm_bin / "srun.args").exists()


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        ("; code=$?; echo 'Welcome to node7'; exit $code", "Welcome to node7"),
        (" | grep -v '\"python\": '", "no output"),
    ],
)
def test_ping_an_interpreter_that_answers_no_json(tmp_path: Path, tail: str, said: str) -> None:
    """A wrapper there that adds a line after the script's (or eats its answer): a failed
    interpreter check that shows what came back, not a crash."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"{tail}\n')
    python.chmod(0o755)
    with remotekit.local_target(python=str(python)) as t:
        report = t.ping()
    assert report.failed is not None and report.failed.layer == str(python)
    assert said in report.failed.detail and report.exit_code == 2
