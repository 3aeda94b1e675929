"""The `remotekit` command as a person types it: what --help shows is what it does, usage
errors exit 2 with a "did you mean", and a pipe closed early ends quietly."""

from __future__ import annotations

import copy
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from invoke import Collection, ParseError, Program
from invoke.parser import Parser

from remotekit.cli import ns as package_tasks
from remotekit.cli.main import program
from tests.conftest import need_program
from tests.harness import ROOT


def env_for(home: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home)}
    env.pop("REMOTEKIT_HOSTS", None)
    return env


def remotekit(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "remotekit", *args]
    return subprocess.run(
        argv, cwd=cwd, env=env or env_for(cwd), capture_output=True, text=True, timeout=120
    )


def without(program: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the PATH folders that hold ``program`` left out (a GPU machine's
    nvidia-smi, for a test about a machine without one)."""
    folders = env.get("PATH", os.defpath).split(os.pathsep)
    kept = [d for d in folders if not shutil.which(program, path=d)]
    return {**env, "PATH": os.pathsep.join(kept)}


def test_help_lists_only_remotekits_options(tmp_path: Path) -> None:
    r = remotekit("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    core = r.stdout.split("Subcommands:")[0]
    for invokes in (
        "--dry",
        "--command-timeout",
        "-T",
        "--prompt-for-sudo-password",
        "--pty",
        "--warn-only",
        "--write-pyc",
        "--echo",
        "--hide",
        "--config",
        "--debug",
    ):
        assert invokes not in core
    for ours in ("--help", "--list", "--version", "--print-completion-script", "--complete"):
        assert ours in core


@pytest.mark.parametrize("flag", ["--dry", "--command-timeout=1", "--pty", "--warn-only"])
def test_an_invoke_option_is_not_taken_silently(tmp_path: Path, flag: str) -> None:
    r = remotekit(flag, "run", "--cmd", "echo ran", cwd=tmp_path)
    assert r.returncode == 2 and "ran" not in r.stdout


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["ckpt-scna"], "did you mean ckpt-scan"),
        (["ping", "--hots", "gpu1"], "did you mean --host"),
        (["run", "--cmd", "true", "--paralel", "2"], "did you mean --parallel"),
        (["--help", "ckpt-scna"], "did you mean ckpt-scan"),
        (["--lsit"], "did you mean --list"),
        (["ping", "--parallel", "many"], "'many'"),
    ],
)
def test_a_usage_error_exits_2_with_a_hint(tmp_path: Path, args: list[str], hint: str) -> None:
    r = remotekit(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert hint in r.stderr and "Traceback" not in r.stderr


def test_task_help_works_where_the_task_takes_a_positional_argument(tmp_path: Path) -> None:
    """invoke reads --help as the missing positional (a file named --help): not here."""
    positional = sorted(
        c.name for c in copy.deepcopy(package_tasks).to_contexts() if c.positional_args
    )
    assert {"py", "sync", "logs", "stop", "rm"} <= set(positional)
    for name in positional:
        for helps in (["--help"], ["-h"], ["--json", "--help"]):
            r = remotekit(name, *helps, cwd=tmp_path)
            assert r.returncode == 0, (name, helps, r.stderr)
            assert f"remotekit [--core-opts] {name} [--options]" in r.stdout, (name, helps)
    # the command's own --help, after -- or as an option's value, is not ours
    r = remotekit(
        "run", "--", sys.executable, "-c", "import sys; print(sys.argv)", "--help", cwd=tmp_path
    )
    assert r.returncode == 0 and "'--help']" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["ping", "-h", "gpu1"], "(-h is --help, not --host any more: use --host gpu1)"),
        (["-h", "gpu1", "ping"], "(-h is --help, not --host any more: use --host gpu1)"),
        (["ping", "-i", "x.yaml"], "(-i is no short flag of ping: use --inventory FILE)"),
        (["run", "-g", "gpu", "--", "true"], "(-g is no short flag of run: use --group GROUP)"),
        (["ckpt-scan", "-j", "4"], "(-j is no short flag of ckpt-scan: use --json or --jobs N)"),
        (["-i", "x.yaml", "ping"], "(-i is no short flag of ping: use --inventory FILE after "),
    ],
)
def test_a_short_flag_from_before_says_which_long_one(
    tmp_path: Path, args: list[str], hint: str
) -> None:
    """The automatic short flags (-h for --host, -i for --inventory ...) are gone; a person
    who types one from habit is told the long flag, not "did you mean procs?"."""
    r = remotekit(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert hint in r.stderr and "did you mean" not in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("buffered", [True, False])
def test_list_into_a_closed_pipe_ends_quietly(tmp_path: Path, buffered: bool) -> None:
    env = env_for(tmp_path)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    argv = [sys.executable, "-m", "remotekit", "--list"]
    p = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""


def test_run_into_a_closed_pipe_stops_the_step_quietly(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    endless = f"sh -c 'echo $$ > {pidfile}; while :; do echo line; done'"
    argv = [sys.executable, "-m", "remotekit", "run", "--cmd", endless]
    p = subprocess.Popen(
        argv, cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"local | line\n"
    p.stdout.close()  # `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the step (pid {pid}) still runs after its output pipe closed")


def test_run_takes_the_command_after_dashes_untouched(tmp_path: Path) -> None:
    r = remotekit(
        "run", "--host", "local", "--", "sh", "-c", 'echo "[$0] [$1]"', "a b", "-L", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["local | [a b] [-L]"]
    r = remotekit("run", "--cmd", "echo 'x  y'", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | x  y"]
    r = remotekit("run", "--cmd", "true", "--", "true", cwd=tmp_path)
    assert r.returncode == 2 and "not both" in r.stderr


def test_a_piped_stdin_goes_to_the_command_as_with_ssh(tmp_path: Path) -> None:
    def piped(*args: str, data: bytes | None) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "remotekit", *args]
        stdin = subprocess.DEVNULL if data is None else None
        env = env_for(tmp_path)
        return subprocess.run(
            argv, cwd=tmp_path, env=env, input=data, stdin=stdin, capture_output=True, timeout=120
        )

    r = piped("run", "--", "cat", data=b"hi\nno newline")  # echo hi | remotekit run -- cat
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == ["local | hi", "local | no newline"]
    script = "import sys; print(repr(sys.stdin.read()))"
    (tmp_path / "reads.py").write_text(script)
    assert piped("py", "reads.py", data=b"x\n").stdout == b"local | 'x\\n'\n"
    assert piped("run", "--", "cat", data=None).stdout == b""  # < /dev/null: nothing read
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {}\n  b: {}\n")
    r = piped("run", "--host", "a,b", "--", "cat", data=b"hi\n")
    assert r.returncode == 0 and b"| hi" not in r.stdout
    assert b"stdin is not passed on: it goes to one host, and 2 are selected" in r.stderr


def test_py_takes_the_script_and_its_args_as_typed(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv[1:])\n")
    r = remotekit("py", "--host", "local", "train.py", "--", "--lr", "3e-4", "a b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["local | ['--lr', '3e-4', 'a b']"]
    r = remotekit("py", "--script", "train.py", "--args", "--lr '1 2'", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | ['--lr', '1 2']"]
    r = remotekit("py", cwd=tmp_path)
    assert r.returncode == 2 and "script" in r.stderr


def test_the_words_after_dashes_come_from_the_argv_the_program_parsed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``program.run(argv=[...])`` in this process (a wrapper, a test, a notebook): the
    command after ``--`` is the one in that argv, never this process's own command line."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {}\n")
    (tmp_path / "show.py").write_text("import sys\nprint(sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["pytest", "--", "echo", "from sys.argv"])
    shown = ["sh", "-c", 'echo "[$1]"', "-", "a  b"]
    ours = copy.deepcopy(program)  # parsing consumes the tasks' help texts: not the shared ones
    ours.run(argv=["remotekit", "run", "--host", "box", "--", *shown], exit=False)
    assert capfd.readouterr().out.splitlines() == ["box | [a  b]"]
    ours = copy.deepcopy(program)
    ours.run(argv=["remotekit", "py", "show.py", "--host", "box", "--", "--lr", "1 2"], exit=False)
    assert capfd.readouterr().out.splitlines() == ["box | ['--lr', '1 2']"]
    ours = copy.deepcopy(program)
    ours.run(argv=["remotekit", "run", "--host", "box", "--cmd", "echo no dashes"], exit=False)
    assert capfd.readouterr().out.splitlines() == ["box | no dashes"]


def repository_tasks() -> Any:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from gen_docs import repository_tasks as tasks_of_the_repository
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return tasks_of_the_repository()


def fresh(coll: Collection) -> Collection:
    """A copy to read flags from: invoke's get_arguments consumes a task's help dict."""
    return copy.deepcopy(coll)


def test_each_short_flag_has_one_meaning_across_tasks() -> None:
    meanings: dict[str, set[str]] = {}
    core = {n for a in program.core_args() for n in a.names if len(n) == 1}
    for coll in (fresh(package_tasks), repository_tasks()):
        for name in coll.task_names:
            for arg in coll[name].get_arguments():
                long = next((n for n in arg.names if len(n) > 1), arg.names[0])
                for short in (n for n in arg.names if len(n) == 1):
                    meanings.setdefault(short, set()).add(long)
    several = {s: sorted(m) for s, m in meanings.items() if len(m) > 1}
    assert not several, f"short flags with several meanings: {several}"
    assert not core & set(meanings), "a task's short flag shadows a core one"


#: Commands README or docs/ write wrongly, with the fix they want (edited elsewhere):
#: each must still fail to parse, so a fixed one says to drop its entry here.
README_FIX_PENDING: dict[str, str] = {}  # a README command known to be wrong: its fix


def docs_commands(task_names: set[str], dev_task_names: set[str]) -> list[str]:
    """Every remotekit/invoke command README and docs/*.md write: code block lines, the code
    spans of their prose, and the first column of task tables (a task and its flags, without
    the binary: a package task's row is a `remotekit` command, a dev task's an `invoke` one).
    A command written as `.venv/bin/remotekit` counts as `remotekit`, `.venv/bin/invoke` as
    `invoke`."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in paths)
    text = text.replace(".venv/bin/remotekit ", "remotekit ").replace(
        ".venv/bin/invoke ", "invoke "
    )
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        for line in block.splitlines():
            line = line.removeprefix("$ ").strip()
            if re.match(r"(remotekit|invoke) ", line):
                commands.append(line)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for cell in re.findall(r"^\|([^|]*)\|", prose, re.M):
        spans = re.findall(r"`([^`]*)`", cell)
        commands += [f"remotekit {s}" for s in spans if s.split(" ")[0] in task_names]
        commands += [f"invoke {s}" for s in spans if s.split(" ")[0] in dev_task_names]
    spans = re.findall(r"`((?:remotekit|invoke) [^`]*)`", prose)
    # a user's own tasks.py mounting the collection as rk.* is not ours to parse
    commands += [s.replace(" TASK", " ping") for s in spans if " rk." not in s]
    return commands


def words_of(command: str) -> list[str]:
    """The words a shell would hand over: up to a pipe or redirection, README's [optional]
    brackets and ... dropped, a placeholder (N, SRC) given a value every kind of flag takes."""
    words = shlex.split(command.replace("[", "").replace("]", ""), comments=True)
    cut = next((i for i, w in enumerate(words) if w in {"|", ">", ">>", "&&", ";"}), len(words))
    words = [w for w in words[1:cut] if w not in {"...", "ARGS..."}]
    return ["1" if re.fullmatch(r"[A-Z]+", w) else w for w in words]


def test_every_command_in_readme_and_docs_parses_with_the_real_parser() -> None:
    repo = repository_tasks()
    commands = docs_commands(set(package_tasks.task_names), set(repo.task_names))
    assert len(commands) > 30 and any("ckpt-diff" in c for c in commands)
    assert any("train-log --host kpro6" in c for c in commands)  # README's own
    assert any(c.startswith("invoke --dry bench") for c in commands)  # the dev tasks' face
    wrong, pending = [], []
    for command in commands:
        ours = command.startswith("remotekit ")
        coll = fresh(package_tasks if ours else repo)
        # as each program parses: its core options first, then the tasks and theirs
        initial = program.initial_context if ours else Program().initial_context
        core = Parser(initial=initial, ignore_unknown=True)
        parser = Parser(initial=initial, contexts=coll.to_contexts())
        if ours:
            said_in_new_names(command)
        try:
            parser.parse_argv(core.parse_argv(words_of(command)).unparsed)
        except ParseError as exc:
            bucket = pending if command.removeprefix("invoke ") in README_FIX_PENDING else wrong
            bucket.append(f"{command!r}: {exc}")
    assert not wrong, "README and docs/ commands that do not parse:\n" + "\n".join(wrong)
    assert len(pending) == len(README_FIX_PENDING), f"fixed in README, drop here: {pending}"


def test_hosts_yaml_default_is_the_target_without_a_selection(tmp_path: Path) -> None:
    hosts = "hosts:\n  box: {env: {WHERE: box}}\n  cage: {env: {WHERE: cage}}\n"
    hosts += "groups:\n  both: [box, cage]\n"
    where = ["run", "--", "sh", "-c", "echo $WHERE"]
    (tmp_path / "hosts.yaml").write_text(hosts + "default: cage\n")
    r = remotekit(*where, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["cage | cage"], r.stderr
    assert r.stderr == ""
    (tmp_path / "hosts.yaml").write_text(hosts + "default: both\n")
    r = remotekit(*where, cwd=tmp_path)
    assert r.returncode == 0 and {"box  | box", "cage | cage"} <= set(r.stdout.splitlines())
    r = remotekit("run", "--host", "box", *where[1:], cwd=tmp_path)
    assert r.stdout.splitlines() == ["box | box"]


def test_the_implicit_local_says_so_once_when_hosts_yaml_has_others(tmp_path: Path) -> None:
    r = remotekit("run", "--", "echo", "hi", cwd=tmp_path)  # no hosts.yaml: local, silently
    assert r.returncode == 0 and r.stderr == ""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {}\n")
    r = remotekit("run", "--", "echo", "hi", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | hi"]
    [note] = r.stderr.splitlines()
    assert "running on local" in note and "box" in note and "default: NAME" in note
    r = remotekit("run", "--host", "local", "--", "echo", "hi", cwd=tmp_path)
    assert r.stderr == ""


def test_one_host_has_no_table_and_says_the_reason_once_in_full(tmp_path: Path) -> None:
    slow = ["run", "--timeout", "1", "--", "sh", "-c", "echo one; echo two; sleep 30"]
    r = remotekit(*slow, cwd=tmp_path)
    assert r.returncode == 2
    assert "finding" not in r.stdout and "status" not in r.stdout
    said = r.stdout + r.stderr
    assert said.count("timed out after 1 s") == 1
    assert "local |   one\nlocal |   two" in r.stderr  # the reason's last output, whole


def test_many_hosts_table_carries_the_reason(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {}\n  b: {}\n")
    slow = ["run", "--host", "a,b", "--timeout", "1", "--", "sh", "-c", "echo one; sleep 30"]
    r = remotekit(*slow, cwd=tmp_path)
    assert r.returncode == 2
    rows = [line for line in r.stdout.splitlines() if line.startswith(("a  ", "b  "))]
    assert len(rows) == 2
    for row in rows:
        assert row.endswith(
            "timed out after 1 s and was stopped (process tree terminated); last output: one"
        )


def on_terminal(*args: str, cwd: Path) -> tuple[int, str, str]:
    """``remotekit ARGS`` with stderr on a pseudo-terminal: (exit code, stdout, what the
    terminal showed)."""
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "remotekit", *args]
    p = subprocess.Popen(argv, cwd=cwd, env=env_for(cwd), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command has closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    out, _ = p.communicate(timeout=60)
    return p.returncode, out.decode(), shown.decode(errors="replace")


def test_put_and_get_say_what_they_did_on_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"x" * 3000)
    code, _, shown = on_terminal("put", "--src", "blob", "--dest", "there/deep/", cwd=tmp_path)
    assert code == 2 and "put --parents creates it" in shown
    code, _, shown = on_terminal(
        "put", "--src", "blob", "--dest", "there/deep/", "--parents", cwd=tmp_path
    )
    assert code == 0 and (tmp_path / "there" / "deep" / "blob").read_bytes() == b"x" * 3000
    assert re.search(r"put blob -> there/deep/: 2\.9 KiB in \d+\.\d s", shown), shown
    code, _, shown = on_terminal("get", "--src", "there/deep/blob", "--dest", "back", cwd=tmp_path)
    assert code == 0 and (tmp_path / "back").read_bytes() == b"x" * 3000
    assert re.search(r"get there/deep/blob -> back: 2\.9 KiB in \d+\.\d s", shown), shown
    r = remotekit("put", "--src", "blob", "--dest", "a/b", "--parents", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "a" / "b").is_file()
    assert r.stdout == r.stderr == ""  # piped: quiet, as before


def test_get_parents_makes_the_local_directories(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"x" * 3000)
    r = remotekit("get", "--src", "blob", "--dest", "back/deep/", cwd=tmp_path)
    assert r.returncode == 2 and "get --parents creates it" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "back").exists()
    r = remotekit("get", "--src", "blob", "--dest", "back/deep/", "--parents", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "back" / "deep" / "blob").read_bytes() == b"x" * 3000
    r = remotekit("get", "--src", "blob", "--dest", "a/b/c", "--parents", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "a" / "b" / "c").read_bytes() == b"x" * 3000


def test_gpu_on_a_host_without_a_gpu_is_a_note_unless_hosts_yaml_says_it_has_gpus(
    tmp_path: Path,
) -> None:
    env = without("nvidia-smi", env_for(tmp_path))  # on a GPU machine too
    assert shutil.which("nvidia-smi", path=env["PATH"]) is None
    r = remotekit("gpu", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note: no GPU here" in r.stdout and "error" not in r.stdout + r.stderr
    (tmp_path / "hosts.yaml").write_text("hosts:\n  local: {gpu: true}\n")
    r = remotekit("gpu", cwd=tmp_path, env=env)
    assert r.returncode == 2 and "nvidia-smi is not on PATH" in r.stdout + r.stderr
    (tmp_path / "hosts.yaml").write_text("hosts:\n  local: {gpus: 8}\n")
    assert remotekit("gpu", cwd=tmp_path, env=env).returncode == 2
    (tmp_path / "hosts.yaml").write_text("hosts:\n  local: {gpus: lots}\n")
    r = remotekit("gpu", cwd=tmp_path, env=env)
    assert r.returncode == 2 and "hosts.yaml:2" in r.stderr and "gpus" in r.stderr


def test_completion_offers_host_and_group_names(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  box: {}\n  cage: {}\ngroups:\n  both: [box, cage]\n"
    )
    r = remotekit("--complete", "--", "remotekit", "ping", "--host", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["local", "box", "cage"]
    r = remotekit("--complete", "--", "remotekit", "gpu", "--group", "b", cwd=tmp_path)
    assert r.stdout.split() == ["both"]
    r = remotekit("--complete", "--", "remotekit", "ping", "--ho", cwd=tmp_path)
    assert "--host" in r.stdout.split()  # flags still complete as before


#: What the shell hands ``--complete`` for a line, and what each candidate must look like:
#: the shell keeps the candidates that start with the word being completed. bash splits
#: ``--host=kp`` into ``--host = kp`` (``=`` is in its COMP_WORDBREAKS) and completes ``kp``;
#: zsh keeps ``--host=kp`` one word, so the candidates carry ``--host=`` too. A comma list
#: completes its last name and keeps the ones before it.
NAME_SHAPES = [
    (["--host", "kp"], ["kpro6", "kpro7"]),
    (["--host=kp"], ["--host=kpro6", "--host=kpro7"]),
    (["--host", "=", "kp"], ["kpro6", "kpro7"]),
    (["--host", "="], ["local", "kpro6", "kpro7", "other"]),
    (["--host", "kpro6,"], ["kpro6,local", "kpro6,kpro7", "kpro6,other"]),
    (["--host", "kpro6,k"], ["kpro6,kpro7"]),
    (["--host=local,kpro7,o"], ["--host=local,kpro7,other"]),
    (["--host", "=", "local,kp"], ["local,kpro6", "local,kpro7"]),
    (["--group=g"], ["--group=gpu"]),
    (["--inventory=fleet.yaml", "--host", "f"], ["far1", "far2"]),
    (["--inventory", "=", "fleet.yaml", "--host", "=", "f"], ["far1", "far2"]),
]


@pytest.mark.parametrize(("words", "candidates"), NAME_SHAPES)
def test_completion_fits_the_shape_of_the_word_being_completed(
    tmp_path: Path, words: list[str], candidates: list[str]
) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  kpro6: {}\n  kpro7: {}\n  other: {}\ngroups:\n  gpu: [kpro6, kpro7]\n"
    )
    (tmp_path / "fleet.yaml").write_text("hosts:\n  far1: {}\n  far2: {}\n")
    r = remotekit("--complete", "--", "remotekit", "ping", *words, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == candidates


#: A line typed, how each shell hands it to the printed script's function, and what it offers.
SHELL_LINES = [
    ("bash", "COMP_WORDS=(remotekit ping --host kp); _complete_remotekit remotekit kp --host",
     ["kpro6", "kpro7"]),
    ("bash", "COMP_WORDS=(remotekit ping --host = kp); _complete_remotekit remotekit kp =",
     ["kpro6", "kpro7"]),
    ("bash", "COMP_WORDS=(remotekit ping --host kpro6,k); "
     "_complete_remotekit remotekit kpro6,k --host", ["kpro6,kpro7"]),
    ("zsh", "words=(remotekit ping --host=kp); _complete_remotekit",
     ["--host=kpro6", "--host=kpro7"]),
    ("zsh", "words=(remotekit ping --host kpro6,); _complete_remotekit",
     ["kpro6,local", "kpro6,kpro7", "kpro6,other"]),
]  # fmt: skip


@pytest.mark.parametrize(("shell", "line", "offered"), SHELL_LINES)
def test_a_shell_completes_host_names_through_the_printed_script(
    tmp_path: Path, shell: str, line: str, offered: list[str]
) -> None:
    path = need_program(shell)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  kpro6: {}\n  kpro7: {}\n  other: {}\n")
    shown = 'echo "${COMPREPLY[@]}"' if shell == "bash" else "print -r -- $reply"
    script = f"source <(remotekit --print-completion-script {shell})\n{line}\n{shown}\n"
    env = {**env_for(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(
        [path, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == offered


def test_dry_run_prints_the_chain_and_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  far: {ssh: nobody@127.0.0.1:1, container: 200, venv: /v}\n"
    )
    mark = tmp_path / "ran"
    r = remotekit("run", "--host", "far,local", "--dry-run", "--", "touch", str(mark), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"local: local -> touch {mark}",
        f"far: ssh nobody@127.0.0.1:1 -> pct exec 200 -> touch {mark}",
    ]
    assert not mark.exists()  # and the unreachable host was never connected to
    (tmp_path / "train.py").write_text(f"open({str(mark)!r}, 'w')\n")
    r = remotekit(
        "py", "--host", "far", "train.py", "--dry-run", "--", "--lr", "3e-4", cwd=tmp_path
    )
    assert r.stdout.splitlines() == [
        "far: ssh nobody@127.0.0.1:1 -> pct exec 200 -> /v/bin/python -u '<shipped train.py>' "
        "--lr 3e-4"
    ]
    assert not mark.exists()


#: A task's words, and the start of each line its --dry-run prints for the host ``far``
#: (unreachable: connecting would fail): the chain ending in the shipped script and its argv.
FAR = "far: ssh nobody@127.0.0.1:1 -> pct exec 200 -> "
SHIPS = FAR + "/v/bin/python -u '<shipped "
DRY_RUNS = [
    (["gpu"], [SHIPS + "sysinfo.py>' gpu --temp-threshold 85 "]),
    (["env"], [SHIPS + "sysinfo.py>' env"]),
    (["disk", "--path", "/data"], [SHIPS + "sysinfo.py>' disk "]),
    (["procs"], [SHIPS + "sysinfo.py>' procs "]),
    (
        ["diagnose"],
        [
            SHIPS + "sysinfo.py>' env",
            SHIPS + "sysinfo.py>' gpu ",
            SHIPS + "sysinfo.py>' disk ",
            SHIPS + "ckpt.py>' scan /ck ",
        ],
    ),
    (["ckpt-scan", "--jobs", "3"], [SHIPS + "ckpt.py>' scan /ck --options '{\"jobs\":3}'"]),
    (["ckpt-inspect", "--checkpoint", "/ck/a.pt"], [SHIPS + "ckpt.py>' inspect /ck/a.pt"]),
    (["ckpt-diff", "-a", "/a.pt", "-b", "/b.pt"], [SHIPS + "ckpt.py>' diff /a.pt /b.pt "]),
    (["ckpt-bisect"], [SHIPS + "ckpt.py>' bisect /ck "]),
    (["train-log", "--log", "/run/log.jsonl"], [SHIPS + "trainlog.py>' /run/log.jsonl "]),
    (["train-log", "--log", "/run/l.csv", "--follow"], [SHIPS + "trainlog.py>' /run/l.csv "]),
    (["put", "--src", "blob", "--dest", "/x/", "--parents"], [FAR + "put blob /x/"]),
    (["get", "--src", "/x", "--dest", "back/", "--parents"], [FAR + "get /x back/"]),
]


@pytest.mark.parametrize(("args", "starts"), DRY_RUNS)
def test_dry_run_of_transfers_and_diagnostics_prints_what_would_ship_and_runs_nothing(
    tmp_path: Path, args: list[str], starts: list[str]
) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  far: {ssh: nobody@127.0.0.1:1, container: 200, venv: /v, checkpoints: /ck}\n"
    )
    (tmp_path / "blob").write_bytes(b"x")
    r = remotekit(*args, "--host", "far", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(starts) and all(map(str.startswith, lines, starts)), lines
    assert r.stderr == "" and sorted(p.name for p in tmp_path.iterdir()) == ["blob", "hosts.yaml"]


def test_dry_run_copies_nothing_here_either(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"x")
    r = remotekit("put", "--src", "blob", "--dest", "copy", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "local: local -> put blob copy\n", r.stderr
    r = remotekit("get", "--src", "blob", "--dest", "a/b/", "--parents", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "local: local -> get blob a/b/\n", r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob"]
    r = remotekit("ckpt-scan", "--dry-run", cwd=tmp_path)  # no --checkpoints, no checkpoints:
    assert r.returncode == 2 and "no path given (--checkpoints)" in r.stderr and r.stdout == ""


def test_hosts_says_which_hosts_yaml_it_read_and_init_writes_one(tmp_path: Path) -> None:
    """From a project folder with no hosts.yaml: `hosts` and an unknown --host say where
    hosts.yaml was looked for; `hosts --init` writes the user's own, once."""
    home, proj = tmp_path / "home", tmp_path / "proj"
    proj.mkdir()
    env = env_for(home)
    env.pop("XDG_CONFIG_HOME", None)
    config = home / ".config" / "remotekit" / "hosts.yaml"
    r = remotekit("hosts", cwd=proj, env=env)
    assert r.returncode == 0 and "inventory: (embedded default)" in r.stdout
    assert f"{proj}/hosts.yaml (no file), {config} (no file)" in r.stdout
    assert f"`remotekit hosts --init` writes a starting one to {config}" in r.stdout
    r = remotekit("ping", "--host", "kpro6", cwd=proj, env=env)
    assert r.returncode == 2 and f"{proj}/hosts.yaml (no file)" in r.stderr
    r = remotekit("hosts", "--init", cwd=proj, env=env)
    assert r.returncode == 0 and r.stdout.startswith(f"wrote {config}: "), r.stderr
    r = remotekit("hosts", cwd=proj, env=env)
    assert f"inventory: {config}\n" in r.stdout and f"{config} (read)" in r.stdout
    r = remotekit("hosts", "--init", cwd=proj, env=env)
    assert r.returncode == 2 and f"{config}: already exists" in r.stderr
    config.unlink()
    (proj / "hosts.yaml").write_text("hosts: {}\n")  # found first, here: --init says so
    r = remotekit("hosts", "--init", cwd=proj, env=env)
    assert r.returncode == 0 and f"in this folder {proj}/hosts.yaml is read" in r.stderr


def said_in_new_names(command: str) -> None:
    """What remotekit itself suggests uses no option name given up for one name per meaning
    (the old spellings work this release, with a note a newcomer should never see)."""
    from remotekit.cli.main import OLD_NAMES

    words = words_of(command)  # the task first
    old = OLD_NAMES.get(words[0], {}) if words else {}
    assert not [w for w in words if w.split("=")[0] in old], command


def test_what_the_demo_suggests_parses_with_the_real_parser() -> None:
    from remotekit.cli.diagnostics import DEMO_NEXT

    assert any("hosts --init" in cmd for cmd, _ in DEMO_NEXT)
    for command, _ in DEMO_NEXT:
        said_in_new_names(command)
        core = Parser(initial=program.initial_context, ignore_unknown=True)
        parser = Parser(
            initial=program.initial_context, contexts=fresh(package_tasks).to_contexts()
        )
        parser.parse_argv(core.parse_argv(words_of(command)).unparsed)


def test_the_commands_hosts_yaml_names_parse() -> None:
    """The clone's hosts.yaml and the one `hosts --init` writes name commands that work (the
    clone's said `invoke hosts`: "No idea what 'hosts' is!")."""
    for path in (ROOT / "hosts.yaml", ROOT / "remotekit" / "hosts_starter.yaml"):
        comments = "\n".join(ln for ln in path.read_text().splitlines() if ln.startswith("#"))
        commands = re.findall(r"`((?:remotekit|invoke) [^`]*)`", comments)
        assert any(c.startswith("remotekit hosts") for c in commands), path
        for command in commands:
            assert command.startswith("remotekit "), f"{path}: {command}"
            said_in_new_names(command)
            core = Parser(initial=program.initial_context, ignore_unknown=True)
            parser = Parser(
                initial=program.initial_context, contexts=fresh(package_tasks).to_contexts()
            )
            parser.parse_argv(core.parse_argv(words_of(command)).unparsed)
