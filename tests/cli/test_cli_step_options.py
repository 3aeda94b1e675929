"""How a step is typed: `--cmd` is a shell line there, the words after `--` are an argv with no
shell; `--env` / `--workdir` for one step; `-n` for every `--dry-run`; short flags from
Fabric's and docker's habits answered with the option to type. Real local target, and the
real sshd for a line that crosses a hop."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml

from remotekit.cli import ns
from tests.harness import SSHServer, cli

#: A line a shell reads in full: quotes of both kinds, a variable, a glob, a pipe, a comment
#: with an apostrophe (shlex would call its quote unclosed), a backslash and a newline.
LINE = """cd "$DIR" && printf '%s|' *.txt "it's" 'a  b' \\$HOME | tr a-z A-Z # don't
echo; echo "second line: $((6 * 7))" """


def _hosts(path: Path, hosts: dict[str, object]) -> None:
    (path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))


def test_cmd_is_a_shell_line_run_by_sh_there(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("a", "b", "c"):
        (data / name).write_text(name)
    r = cli("run", "--cmd", f"cd {data} && ls | wc -l", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["local", "|", "3"]


def test_cmd_line_arrives_as_typed(tmp_path: Path) -> None:
    """The same bytes as `sh -c LINE` here: never split, re-quoted or expanded on the way."""
    (tmp_path / "x.txt").write_text("")
    (tmp_path / "y.txt").write_text("")
    env = {"DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": "/home/h"}
    want = subprocess.run(["sh", "-c", LINE], env=env, capture_output=True, text=True).stdout
    assert want == "X.TXT|Y.TXT|IT'S|A  B|$HOME|\nsecond line: 42\n"  # the line is a good one
    r = cli("run", "--env", f"DIR={tmp_path}", "--cmd", LINE, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(f"local | {line}\n" for line in want.splitlines())


def test_cmd_line_crosses_ssh_as_typed(tmp_path: Path, sshd: SSHServer) -> None:
    _hosts(tmp_path, {"node": sshd.host_yaml()})
    work = tmp_path / "work"
    work.mkdir()
    (work / "x.txt").write_text("")
    (work / "y.txt").write_text("")
    r = cli("run", "--host", "node", "--env", f"DIR={work}", "--cmd", LINE, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "node | X.TXT|Y.TXT|IT'S|A  B|$HOME|\nnode | second line: 42\n"


def test_shell_cmd_is_the_same_shell_line(tmp_path: Path) -> None:
    r = cli("shell", "--cmd", "echo a | tr a b; cd / && pwd; exit 3", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["b", "/"]


def test_words_after_dashes_run_with_no_shell(tmp_path: Path) -> None:
    r = cli("run", "--", "echo", "$HOME", "|", "wc", "&&", "cd", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "local | $HOME | wc && cd\n"


def test_a_bad_line_is_the_shells_error_there(tmp_path: Path) -> None:
    r = cli("run", "--cmd", "echo 'hi", cwd=tmp_path)
    assert r.returncode == 2  # sh's own exit status for a syntax error: the host failed
    assert "Traceback" not in r.stderr
    assert "local | sh: " in r.stderr and "local | failed: exit 2" in r.stderr, r.stderr


def test_cmd_and_words_both_is_a_usage_error(tmp_path: Path) -> None:
    r = cli("run", "--cmd", "ls", "--", "ls", cwd=tmp_path)
    assert r.returncode == 2
    assert "give --cmd or the words after --, not both" in r.stderr


def test_dry_run_shows_the_line_given_to_sh(tmp_path: Path) -> None:
    r = cli("run", "--dry-run", "--cmd", "ls /workspace | wc -l", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("sh -c 'ls /workspace | wc -l'"), r.stdout


def test_env_and_workdir_for_one_step_on_top_of_hosts_yaml(tmp_path: Path) -> None:
    there, other = tmp_path / "there", tmp_path / "other"
    there.mkdir()
    other.mkdir()
    _hosts(
        tmp_path,
        {"local": {"env": {"A": "host", "B": "host"}, "workdir": str(there)}},
    )
    show = 'echo "$A $B $C $(pwd)"'
    plain = cli("run", "--cmd", show, cwd=tmp_path)
    assert plain.stdout == f"local | host host  {there}\n", plain.stderr
    step = cli(
        "run", "--env", "A=step", "--env", "C=x=y z", "--workdir", str(other), "--cmd", show,
        cwd=tmp_path,
    )  # fmt: skip
    assert step.returncode == 0, step.stderr
    assert step.stdout == f"local | step host x=y z {other}\n"
    again = cli("run", "--cmd", show, cwd=tmp_path)  # for that step only
    assert again.stdout == plain.stdout


def test_py_takes_env_and_workdir_too(tmp_path: Path) -> None:
    script = tmp_path / "where.py"
    script.write_text("import os\nprint(os.environ['LR'], os.getcwd())\n")
    r = cli("py", str(script), "--env", "LR=3e-4", "--workdir", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"local | 3e-4 {tmp_path}\n"


def test_bad_env_or_workdir_is_a_usage_error(tmp_path: Path) -> None:
    for args, said in (
        (("--env", "TOKEN"), "--env wants NAME=VALUE, got 'TOKEN'"),
        (("--env", "1X=s3cret"), "--env wants NAME=VALUE, got '1X'=..."),
        (("--workdir", "data"), "--workdir wants an absolute path there, got 'data'"),
    ):
        r = cli("run", *args, "--", "true", cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert said in r.stderr and "s3cret" not in r.stderr, r.stderr


def test_a_secret_given_with_env_is_masked(tmp_path: Path) -> None:
    _hosts(tmp_path, {"local": {"secret_env": ["TOKEN"]}})
    r = cli("run", "--env", "TOKEN=s3cret-value", "--mask-output", "--json", "--cmd",
            'echo "t=$TOKEN"', cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "s3cret-value" not in r.stdout + r.stderr and "t=***" in r.stdout


def test_n_is_dry_run_on_every_task_that_has_dry_run() -> None:
    with_dry_run = []
    for name, t in ns.tasks.items():
        for arg in copy.deepcopy(t).get_arguments():  # invoke pops the task's help dict
            if arg.name == "dry_run":
                with_dry_run.append(name)
                assert "n" in arg.names, name
    assert {"run", "py", "put", "get", "sync", "ckpt-scan", "diagnose"} <= set(with_dry_run)


def test_n_runs_nothing(tmp_path: Path) -> None:
    r = cli("run", "-n", "--cmd", "touch made", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "sh -c 'touch made'" in r.stdout and not (tmp_path / "made").exists()
    assert "-n, --dry-run" in cli("--help", "put").stdout


def test_fabric_and_docker_short_flags_say_what_to_type(tmp_path: Path) -> None:
    for args, said in (
        (("ping", "-H", "gpu1"), "-H is no short flag of ping: use --host HOST"),
        (("-H", "gpu1", "ping"), "-H is no short flag of ping: use --host HOST after the task"),
        (("ping", "-e"), "-e is no short flag of ping: use --verbose"),
        (
            ("run", "-e", "A=1", "--", "true"),
            "-e is no short flag of run: use --env NAME=VALUE or --verbose",
        ),
    ):
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert said in r.stderr, r.stderr
