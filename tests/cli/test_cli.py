"""The command line, run as a user would: `remotekit TASK ...` in a subprocess, local target."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import cli


def test_list_shows_every_task_with_help() -> None:
    r = cli("--list")
    assert r.returncode == 0
    for name in ("hosts", "ping", "run", "py", "runs", "logs", "stop", "rm", "gpu", "diagnose"):
        assert f"  {name} " in r.stdout


def test_help_documents_flags() -> None:
    r = cli("--help", "run")
    assert r.returncode == 0
    for flag in (
        "--cmd",
        "--host",
        "--group",
        "--all",
        "--parallel",
        "--json",
        "--verbose",
        "--timeout",
    ):
        assert flag in r.stdout


def test_run_streams_with_the_host_prefix(tmp_path: Path) -> None:
    r = cli("run", "--cmd", "echo 'a {b} $c'", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "local | a {b} $c"
    assert "\x1b[" not in r.stdout  # piped: no colour


def test_run_failure_exits_2_and_says_so_once(tmp_path: Path) -> None:
    r = cli("run", "--cmd", "sh -c 'echo nope >&2; exit 3'", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["local | nope", "local | failed: exit 3"]
    assert r.stdout == ""  # one host: no summary table


def test_py_ships_a_file(tmp_path: Path) -> None:
    script = tmp_path / "check.py"
    script.write_text(
        'import sys\nckpt = {"global_step": 7}\nprint(f\'step={ckpt["global_step"]}\', sys.argv[1:])\n'
    )
    r = cli("py", "--script", str(script), "--args", "--dir '/a b'", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "local | step=7 ['--dir', '/a b']"


def test_json_is_json_only(tmp_path: Path) -> None:
    r = cli("run", "--cmd", "echo hi", "--json", cwd=tmp_path)
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0
    [h] = doc["hosts"]
    assert h["host"] == "local" and h["status"] == "ok" and h["result"]["stdout"] == "hi\n"


def test_ping_local(tmp_path: Path) -> None:
    r = cli("ping", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "local | ok   local: this machine" in r.stdout
    assert "local | ok   agent: on (pid " in r.stdout  # the interpreter's check ran on it
    assert "torch:" in r.stdout


def test_no_agent_runs_each_step_alone(tmp_path: Path) -> None:
    r = cli("ping", "--no-agent", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "local | ok   agent: off (agent: false); one process per step" in r.stdout
    # the command line of the runner's parent: the agent's loader, or this remotekit itself
    parent = "p=$(awk '{print $4}' /proc/$PPID/stat); tr '\\0' ' ' < /proc/$p/cmdline"
    on = cli("run", "--", "sh", "-c", parent, cwd=tmp_path)
    off = cli("run", "--no-agent", "--", "sh", "-c", parent, cwd=tmp_path)
    assert "exec(sys.stdin.buffer.read(" in on.stdout and "-m remotekit" not in on.stdout
    assert "-m remotekit" in off.stdout, off.stdout


def test_unknown_host_lists_the_known_ones(tmp_path: Path) -> None:
    r = cli("ping", "--host", "kpro9", cwd=tmp_path)
    assert r.returncode == 2
    assert "unknown target 'kpro9'" in r.stderr and "known targets: local" in r.stderr


def test_bad_inventory_is_named(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a:\n    ssh: x\n    contianer: 1\n")
    r = cli("hosts", cwd=tmp_path)
    assert r.returncode == 2
    assert "hosts.yaml:4: hosts.a.contianer: unknown key" in r.stderr


def test_hosts_lists_chains(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  kpro6: {ssh: root@kpro6.lan, container: 200, venv: /root/venv}\ngroups:\n  gpu: [kpro6]\n"
    )
    r = cli("hosts", cwd=tmp_path)
    assert r.returncode == 0
    assert "ssh root@kpro6.lan -> pct exec 200 -> /root/venv/bin/python" in r.stdout
    assert "gpu" in r.stdout


def test_hosts_shows_every_hop(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n"
        "  job: {ssh: gpu@login1, slurm: {job: 4242, node: node07}, venv: /scratch/venv}\n"
        "  byname: {ssh: gpu@login1, slurm: {name: train-llama}, python: python3}\n"
        "  lx: {ssh: root@n1, sudo: true, lxc: box, venv: /v}\n"
        "  pod: {ssh: n2, podman: web, venv: /v}\n"
        "  k8s: {kubectl: {pod: trainer-0, container: main, namespace: ml}, venv: /v}\n"
    )
    r = cli("hosts", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for chain in (
        "ssh gpu@login1 -> srun --jobid 4242 -w node07 -> /scratch/venv/bin/python",
        "ssh gpu@login1 -> srun --job-name train-llama -> python3",
        "ssh root@n1 -> sudo -> lxc-attach -n box -> /v/bin/python",
        "ssh n2 -> podman exec web -> /v/bin/python",
        "local -> kubectl exec -n ml trainer-0 -c main -> /v/bin/python",
    ):
        assert chain in r.stdout


def test_ping_and_run_name_the_broken_hop(tmp_path: Path) -> None:
    # an engine that follows podman's CLI for a container that has exited
    engine = tmp_path / "podman"
    engine.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = container ]; then echo exited; exit 0; fi\n'
        "echo 'Error: can only create exec sessions on running containers: "
        "container state improper' >&2\nexit 255\n"
    )
    engine.chmod(0o755)
    (tmp_path / "hosts.yaml").write_text(
        f"hosts:\n  pod: {{podman: web, engine: {engine}, venv: /v}}\n"
        "  job: {slurm: {name: train, bin: /nonexistent/srun}, venv: /v}\n"
    )
    r = cli("ping", "--host", "pod,job", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pod | FAIL podman exec web: exited" in r.stdout
    assert "job | FAIL srun --job-name train: squeue could not look up job named 'train'" in (
        r.stdout
    )
    r = cli("run", "--host", "pod", "--cmd", "true", "--verbose", cwd=tmp_path)
    assert r.returncode == 2
    assert "chain: local -> podman exec web -> /v/bin/python" in r.stderr
    assert "podman container 'web' is not running" in r.stderr  # one host: said once, no table
    assert "container state improper" in r.stderr and r.stdout == ""


def test_an_unbalanced_quote_names_the_option(tmp_path: Path) -> None:
    script = tmp_path / "check.py"
    script.write_text("print('ran')\n")
    # (--cmd is a shell line: sh there judges its quoting, test_cli_step_options.py)
    for args, option in ((("py", "--script", str(script), "--args", 'a "b'), "--args"),):
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr
        assert option in r.stderr and "quotation" in r.stderr, r.stderr
