"""Layers are pure: each test asserts the exact launch argv and payload fields."""

from __future__ import annotations

from remotekit.inventory import HostSpec, SSHSpec
from remotekit.layers import LOADER, Env, Interpreter, Launch, Pct, Sudo, Venv, Workdir, compose


def test_interpreter_runs_the_constant_loader() -> None:
    launch = compose([Interpreter("/usr/bin/python3")])
    assert launch.argv == ("/usr/bin/python3", "-c", LOADER)
    assert launch.interpreter == "/usr/bin/python3"


def test_full_stack_in_order() -> None:
    launch = compose(
        [
            Venv("/root/venv"),
            Env({"A": "1"}),
            Workdir("/workspace"),
            Pct(200, "/usr/sbin/pct"),
            Sudo(),
        ]
    )
    assert launch.argv == (
        "sudo",
        "-n",
        "--",
        "/usr/sbin/pct",
        "exec",
        "200",
        "--",
        "/root/venv/bin/python",
        "-c",
        LOADER,
    )
    assert launch.env == {"VIRTUAL_ENV": "/root/venv", "A": "1"}
    assert launch.path_prepend == ("/root/venv/bin",)
    assert launch.cwd == "/workspace"
    assert launch.chain == "sudo -> pct exec 200 -> /root/venv/bin/python"


def test_layers_do_not_mutate_their_input() -> None:
    base = compose([Interpreter("python3")])
    Env({"X": "y"}).apply(base)
    Pct(201).apply(base)
    assert base == compose([Interpreter("python3")])


def test_env_values_never_reach_the_argv() -> None:
    secret = "s3cret value; rm -rf /"
    launch = compose([Interpreter("python3"), Env({"TOKEN": secret}), Pct(200)])
    assert all(secret not in a for a in launch.argv)
    assert launch.env["TOKEN"] == secret


def test_the_loader_is_one_shell_safe_line() -> None:
    assert "\n" not in LOADER and "'" not in LOADER


def test_host_spec_layers() -> None:
    spec = HostSpec(
        name="kpro6",
        ssh=SSHSpec(host="kpro6.lan", user="root"),
        sudo=True,
        hop=Pct(200),
        venv="/root/venv/",
        workdir="/workspace",
        env={"HF_HOME": "/workspace/hf"},
    )
    launch = compose(spec.layers())
    assert launch.argv[:7] == ("sudo", "-n", "--", "pct", "exec", "200", "--")
    assert launch.argv[7] == "/root/venv/bin/python"
    assert launch.env["HF_HOME"] == "/workspace/hf" and launch.cwd == "/workspace"


def test_plain_python_target() -> None:
    spec = HostSpec(name="n", ssh=SSHSpec(host="n"), python="python3.11")
    assert compose(spec.layers()).argv == ("python3.11", "-c", LOADER)
    assert compose(spec.layers()) == Launch(
        argv=("python3.11", "-c", LOADER), interpreter="python3.11", hops=("python3.11",)
    )
