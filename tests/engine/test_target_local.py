"""The same API against the `local` target (no SSH): this runs everywhere, sshd or not."""

from __future__ import annotations

import gc
import io
import os
import re
import subprocess
import sys
import threading
import time
import uuid
import warnings
import zipfile
from pathlib import Path

import pytest

import remotekit
from remotekit.layers import LOADER
from remotekit.step import StepHeader
from tests.conftest import open_local
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


def test_a_target_made_from_a_name_says_how_to_get_one() -> None:
    with pytest.raises(TypeError, match=r"HostSpec, not str 'local'.*\.target\('local'\)"):
        remotekit.Target("local")  # type: ignore[arg-type]


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


def test_a_command_is_found_on_the_steps_path_or_said_why_it_cannot_run(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """The runner finds a command as execvpe does, on the step's own PATH (not the runner's),
    relative to the step's cwd with a slash; one it may not run exits 126, naming it."""
    found, denied = tmp_path / "found", tmp_path / "denied"
    for folder in (found, denied):
        folder.mkdir()
    (found / "hello").write_text("#!/bin/sh\necho hi from $(pwd)\n")
    (found / "hello").chmod(0o755)
    (denied / "hello").write_text("#!/bin/sh\necho never\n")  # not executable
    path = f"{denied}:{found}:/usr/bin:/bin"  # the first one found that may run, as execvp
    assert local.run(["hello"], env={"PATH": path}, cwd=str(tmp_path)).stdout == (
        f"hi from {tmp_path}\n"
    )
    assert local.run(["./hello"], cwd=str(found)).stdout == f"hi from {found}\n"
    with pytest.raises(remotekit.StepFailed) as info:
        local.run(["hello"], env={"PATH": f"{denied}:/usr/bin:/bin"})
    assert info.value.result.exit_code == 126
    assert "permission denied: hello" in str(info.value)


def test_the_runner_watches_its_step_in_one_thread_and_hands_it_only_stdio(
    local: remotekit.Target,
) -> None:
    """The runner relays, waits and watches for EOF in one poll loop (a thread costs a step
    forked from the agent ~0.3 ms), and the command it starts holds fds 0-2 only; for a
    command it forks nothing else (no zygote: that is for scripts)."""
    # Only simple commands: in a pipeline or $(...) the shell holds the pipe's fds itself
    # while ``ls`` reads them (a 3 one run in three).
    probe = "ls /proc/$$/fd; grep ^Threads /proc/$PPID/status; echo $$; "
    probe += "cat /proc/$PPID/task/$PPID/children"
    *fds, threads, pid, children = local.run(["sh", "-c", probe]).stdout.splitlines()
    assert fds == ["0", "1", "2"]
    assert threads.split() == ["Threads:", "1"]
    assert children.split() == [pid]


def test_missing_workdir(local: remotekit.Target) -> None:
    with pytest.raises(remotekit.StepFailed, match="/no/such/dir"):
        local.run(["true"], cwd="/no/such/dir")


def test_missing_interpreter_is_named(agent: bool | None) -> None:
    with (
        remotekit.Target(
            remotekit.local_target(python="/opt/nope/bin/python3").spec, agent=agent
        ) as t,
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


#: What torch read from OMP_NUM_THREADS as it was imported: its thread pool's size (at most
#: the cores: 1 is said by the variable only, on this machine's 2 cores and on more).
THREADS = remotekit.Script("import torch\nprint(torch.get_num_threads())\n", name="threads.py")


def test_torch_is_imported_in_the_hosts_env_in_a_warm_step_too(agent: bool | None) -> None:
    """hosts.yaml's ``env:`` is what torch reads as it is imported, in a step that asks for
    it (``preload``: with the agent, forked from a process that has imported it) as in one
    that imports it itself."""
    with open_local(agent, env={"OMP_NUM_THREADS": "1"}) as t:
        warm = t.run_python(THREADS, preload=["torch"], timeout=120)
        plain = t.run_python(THREADS, timeout=120)
    assert (warm.stdout, plain.stdout) == ("1\n", "1\n")


def test_torch_is_imported_in_each_steps_own_env_never_a_stale_one(agent: bool | None) -> None:
    """A step's ``env=`` too, and a later step with another value gets its own, the first
    value again its own: no step is forked from a process imported under another env."""
    with open_local(agent) as t:
        got = [
            t.run_python(THREADS, preload=["torch"], env={"OMP_NUM_THREADS": n}, timeout=120)
            for n in ("1", "2", "1")
        ]
    two = f"{min(2, os.cpu_count() or 1)}\n"
    assert [r.stdout for r in got] == ["1\n", two, "1\n"]


def test_stdin_of_a_step_is_empty(local: remotekit.Target) -> None:
    r = local.run_python(remotekit.Script("import sys\nprint(repr(sys.stdin.read()))\n"))
    assert r.stdout == "''\n"


def test_temp_dir_is_private_and_removed(local: remotekit.Target) -> None:
    code = "import os, stat\nd = os.environ['REMOTEKIT_DIR']\nprint(d, oct(stat.S_IMODE(os.stat(d).st_mode)))\n"
    r = local.run_python(remotekit.Script(code))
    path, mode = r.stdout.split()
    assert mode == "0o700"
    assert not os.path.exists(path)


def test_temp_dir_is_removed_whole_and_never_through_a_link(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """What a step leaves in its folder goes with it (folders in folders, a module's
    __pycache__, a read-only file); a link it left there to a folder elsewhere is removed
    as a link, and what the link points to stays."""
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "keep.txt").write_text("mine")
    (outside / "inner" / "deep.txt").write_text("mine too")
    code = f"""\
import os
d = os.environ['REMOTEKIT_DIR']
os.makedirs(os.path.join(d, 'a', 'b', 'c'))
for name in ('a/x', 'a/b/y', 'a/b/c/z'):
    with open(os.path.join(d, name), 'w') as f:
        f.write(name)
os.chmod(os.path.join(d, 'a', 'x'), 0o400)
with open(os.path.join(d, 'helper.py'), 'w') as f:
    f.write('VALUE = 1\\n')
import helper  # its __pycache__ beside it
os.symlink({str(outside)!r}, os.path.join(d, 'link'))
os.symlink({str(outside / "keep.txt")!r}, os.path.join(d, 'a', 'file-link'))
print(d)
"""
    r = local.run_python(remotekit.Script(code, name="leaves.py"))
    assert not os.path.lexists(r.stdout.strip())
    assert (outside / "keep.txt").read_text() == "mine"
    assert (outside / "inner" / "deep.txt").read_text() == "mine too"


def test_timeout_on_the_local_target(local: remotekit.Target) -> None:
    m = f"70{uuid.uuid4().int % 10**6:06d}.5"
    t0 = time.monotonic()
    with pytest.raises(remotekit.StepTimeout) as info:
        local.run(["sh", "-c", f"echo begun; sleep {m}"], timeout=1.5)
    assert time.monotonic() - t0 < 4
    assert info.value.result.stdout == "begun\n" and info.value.timeout_s == 1.5
    assert wait_gone(m, 3) == []


def test_a_flood_read_slowly_is_still_stopped_at_its_timeout(local: remotekit.Target) -> None:
    """The runner writes the step's output without blocking: while a slow reader here holds
    it back (every pipe on the way full), the runner still hears the caller give up, and the
    step's tree is stopped at its timeout, none of it left."""
    m = f"71{uuid.uuid4().int % 10**6:06d}.5"
    seen: list[str] = []

    def slow(stream: str, line: str) -> None:
        seen.append(line)
        time.sleep(0.02)  # ~50 lines a second against a flood of megabytes a second

    with pytest.raises(remotekit.StepTimeout):
        local.run(["sh", "-c", f"yes {'x' * 1000} & sleep {m}; kill $!"], timeout=2, on_output=slow)
    assert seen and wait_gone(m, 5) == [] and wait_gone("yes " + "x" * 1000, 5) == []


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


def test_capture_limit_keeps_the_tail(agent: bool | None) -> None:
    with remotekit.Target(remotekit.local_target().spec, capture_limit=1000, agent=agent) as t:
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


def test_get_parents_makes_the_local_directories(local: remotekit.Target, tmp_path: Path) -> None:
    there = tmp_path / "there.bin"
    there.write_bytes(os.urandom(10_000))
    local.get(str(there), tmp_path / "x" / "y" / "a.bin", parents=True)
    local.get(str(there), f"{tmp_path}/p/q/", parents=True)  # a trailing / names the directory
    assert (tmp_path / "x/y/a.bin").read_bytes() == there.read_bytes()
    assert (tmp_path / "p/q/there.bin").read_bytes() == there.read_bytes()
    # without parents: an error naming the directory and the way out, and nothing written
    for dest in (tmp_path / "nodir" / "a.bin", f"{tmp_path}/nodir/"):
        with pytest.raises(remotekit.RemotekitError, match=r"nodir does not exist.*--parents"):
            local.get(str(there), dest)
    assert not (tmp_path / "nodir").exists()


def test_a_dry_run_target_runs_and_connects_nothing(tmp_path: Path, agent: bool | None) -> None:
    inv = remotekit.parse_inventory(
        "hosts:\n"
        "  far: {ssh: nobody@127.0.0.1:1, container: 200, venv: /v}\n"
        "  job: {ssh: nobody@127.0.0.1:1, slurm: {name: train}, python: python3}\n"
    )
    mark = tmp_path / "ran"
    traced: list[tuple[str, str]] = []
    t = remotekit.Target(inv.spec("far"), agent=agent, dry_run=True)
    t.trace = lambda step, chain: traced.append((step, chain))
    with pytest.raises(remotekit.DryRun) as info:
        t.run(["touch", str(mark)])
    chain = f"ssh nobody@127.0.0.1:1 -> pct exec 200 -> touch {mark}"
    assert (
        info.value.chain == chain and info.value.host == "far" and traced == [("run touch", chain)]
    )
    with pytest.raises(remotekit.DryRun, match=r"'<shipped check\.py>' --lr 1"):
        t.run_python(remotekit.Script("open('x', 'w')\n", name="check.py"), ["--lr", "1"])
    blob = tmp_path / "blob"
    blob.write_bytes(b"x")
    with pytest.raises(remotekit.DryRun, match=r"-> put .*blob /x"):
        t.put(blob, "/x", parents=True)
    with pytest.raises(remotekit.DryRun, match=r"-> get /x .*back"):
        t.get("/x", tmp_path / "back" / "f", parents=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob"]  # no temp file, no back/
    for connects in (t.ping, lambda: t.forward(6006), lambda: t.shell(["python"])):
        with pytest.raises(remotekit.DryRun):  # what is not a step connects nowhere either
            connects()
    job = remotekit.Target(inv.spec("job"), agent=agent, dry_run=True)  # its job is not looked up
    with pytest.raises(remotekit.DryRun, match="srun --job-name train -> true"):
        job.run(["true"])
    with pytest.raises(remotekit.DryRun) as detached:  # its supervisor's step, on the login node
        job.run(["true"], detach=True)
    assert detached.value.chain == "ssh nobody@127.0.0.1:1 -> true"


def test_ping_local(local: remotekit.Target) -> None:
    report = local.ping()
    assert [c.ok for c in report.checks] == [True, True, True, True]
    assert report.checks[1].layer == sys.executable and report.exit_code == 0
    agent = report.checks[2]
    assert agent.layer == "agent"
    if local.spec.agent:  # the interpreter's check ran on it
        assert re.fullmatch(r"on \(pid \d+ there\): every step is a message to it", agent.detail)
    else:
        assert agent.detail == "off (agent: false); one process per step"


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


def test_a_job_by_name_is_looked_up_once_when_the_target_opens(
    slurm_bin: Path, agent: bool | None
) -> None:
    inv = remotekit.parse_inventory(
        f"hosts:\n  job: {{slurm: {{name: train, bin: {slurm_bin / 'srun'}}}, "
        f"python: {sys.executable}}}\n"
    )
    with inv.target("job", agent=agent) as t:
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
    said = next(c for c in report.checks if c.layer == "agent").detail
    if agent is False:
        assert said == "off (agent: false); one process per step", said
    else:
        assert said.startswith("on (pid "), said  # srun --unbuffered carries it
    calls = (slurm_bin / "squeue.calls").read_text().splitlines()
    assert calls == ["--noheader --name=train --format=%i %T", "--noheader --jobs=4242 --format=%T"]
    srun = (slurm_bin / "srun.args").read_text().split()
    assert srun[:5] == ["--jobid=4242", "--overlap", "--unbuffered", "--export=NONE", "--"]


def test_a_job_by_name_that_is_pending_names_the_job(slurm_bin: Path, agent: bool | None) -> None:
    inv = remotekit.parse_inventory(
        f"hosts:\n  job: {{slurm: {{name: queued, bin: {slurm_bin / 'srun'}}}}}\n"
    )
    with inv.target("job", agent=agent) as t, pytest.raises(remotekit.ContainerNotRunning) as info:
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
    interpreter check that shows what came back, not a crash. (One process per step: the
    wrapper's words land in the step; an agent's steps never see them, see below.)"""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"{tail}\n')
    python.chmod(0o755)
    with remotekit.local_target(python=str(python), agent=False) as t:
        report = t.ping()
    assert report.failed is not None and report.failed.layer == str(python)
    assert said in report.failed.detail and report.exit_code == 2


def test_a_step_leaves_no_pipe_to_the_collector() -> None:
    """Each step's pipes are closed when it ends (left to the collector, each was a
    ResourceWarning, three a step)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with remotekit.local_target(agent=False) as t:
            for _ in range(3):
                t.run(["true"])
        gc.collect()
    assert [str(w.message) for w in seen if w.category is ResourceWarning] == []


AGENT_PID = ["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"]  # the runner's parent


def test_a_banner_around_the_agent_is_neither_a_frame_nor_a_steps_output(tmp_path: Path) -> None:
    """A wrapper (a login shell's rc file) that prints before and after the interpreter: the
    agent's frames are found after the banner, and no step's output holds it."""
    python = tmp_path / "python"
    body = f'echo "Welcome to node7"\n"{sys.executable}" "$@"\necho "Bye from node7"\n'
    python.write_text("#!/bin/sh\n" + body)
    python.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("error", remotekit.AgentUnavailable)
        with remotekit.local_target(python=str(python)) as t:
            assert t.run(["echo", "hi"], timeout=30).stdout == "hi\n"
            pid = t.run(AGENT_PID, timeout=30).stdout
            assert pid == t.run(AGENT_PID, timeout=30).stdout and int(pid) != os.getpid()


def test_a_chain_that_holds_back_the_agents_output_runs_each_step_alone(tmp_path: Path) -> None:
    """A wrapper whose pipe buffers the agent's output (``| grep``) would keep it from ever
    saying hello: after timeouts.connect the target runs each step as a process of its own,
    with one note naming the host, and the first step runs that way too."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n"{sys.executable}" "$@" | grep -v nothing-matches-this\n')
    python.chmod(0o755)
    timeouts = remotekit.spec.Timeouts(connect=2)
    with remotekit.local_target(python=str(python), timeouts=timeouts) as t:
        with pytest.warns(remotekit.AgentUnavailable) as notes:
            first = t.run(["echo", "first"], timeout=60)
            parents = {t.run(AGENT_PID, timeout=60).stdout for _ in range(2)}
        report = t.ping()
    assert first.stdout == "first\n" and len(parents) == 2  # a wrapper shell per step
    said_all = [str(n.message) for n in notes if n.category is remotekit.AgentUnavailable]
    assert len(said_all) == 1, said_all
    said = said_all[0]
    assert said.startswith(f"local: the remotekit agent cannot run via local -> {python}: ")
    assert "said nothing within 2 s (timeouts.connect)" in said
    assert "each step runs as a process of its own" in said
    agent = next(c for c in report.checks if c.layer == "agent")
    assert agent.detail.startswith("off: it said nothing within 2 s")


def test_a_command_inherits_no_fd_the_runners_caller_left_open(tmp_path: Path) -> None:
    """A hop may leave fds open in the interpreter it starts (the runner's stdin is then not
    the only thing it got). The command the runner starts gets fds 0-2 and nothing else, as
    Popen's close_fds gave it."""
    runner = remotekit.shipping.source("runner.py")
    header = StepHeader(argv=("sh", "-c", "ls /proc/$$/fd"), nonce="n", cwd=str(tmp_path))
    body = header.encode()
    left_r, left_w = os.pipe()
    try:  # stdin stays open while the step runs: EOF on it would stop the step
        proc = subprocess.Popen(
            [sys.executable, "-c", LOADER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(left_r, left_w),
        )
    finally:
        os.close(left_r)
        os.close(left_w)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(f"{len(runner)}\n".encode() + runner + f"{len(body)}\n".encode() + body)
    proc.stdin.flush()
    out = proc.stdout.read()  # to its end: the runner exits when its step has
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    proc.stderr.close()
    assert out.split() == [b"0", b"1", b"2"]


@pytest.mark.timeout(60)
def test_a_ctrl_c_the_kernel_hands_to_another_thread_stops_the_step(
    local: remotekit.Target,
) -> None:
    """The kernel may give a process's SIGINT to any thread that does not block it; there it
    only sets Python's flag, and the main thread sees it when its wait returns. The step's
    wait returns often enough: the step stops then, not at its timeout (here 300 s, past
    this test's own limit)."""
    import signal

    m = f"{700 + uuid.uuid4().int % 200}.{uuid.uuid4().int % 10**6:06d}"
    running = threading.Event()

    def on_output(stream: str, line: str) -> None:
        if line == "running":
            running.set()

    def interrupt() -> None:  # SIGINT to this thread, not to the main one
        running.wait(30)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        local.run(["sh", "-c", f"echo running; exec sleep {m}"], on_output=on_output, timeout=300)
    assert running.is_set()
    assert time.monotonic() - started < 40, "the interrupt waited for something"
    assert wait_gone(m, 5) == []
