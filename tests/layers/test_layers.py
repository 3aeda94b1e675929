"""Layers are pure: each test asserts the exact launch argv and payload fields."""

from __future__ import annotations

from dataclasses import replace

import pytest

from remotekit.errors import (
    AuthError,
    ContainerError,
    ContainerNotFound,
    ContainerNotRunning,
    RemotekitError,
)
from remotekit.inventory import HostSpec, SSHSpec
from remotekit.layers import (
    HOPS,
    LOADER,
    Docker,
    Env,
    Hop,
    Interpreter,
    Kubectl,
    Launch,
    Lxc,
    Pct,
    Podman,
    Slurm,
    Sudo,
    Venv,
    Workdir,
    compose,
)


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
        hops=(Sudo(), Pct(200)),
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


# -- one test per hop: the exact argv it adds, and its chain label --------------------------

INNER = compose([Interpreter("/v/bin/python")])
TAIL = ("/v/bin/python", "-c", LOADER)


@pytest.mark.parametrize(
    ("hop", "argv", "label"),
    [
        (Pct(200, "/usr/sbin/pct"), ("/usr/sbin/pct", "exec", "200", "--"), "pct exec 200"),
        (Lxc("ct1"), ("lxc-attach", "-n", "ct1", "--clear-env", "--"), "lxc-attach -n ct1"),
        (
            Lxc("ct1", "/usr/bin/lxc-attach", ("TERM", "LANG")),
            (
                "/usr/bin/lxc-attach",
                "-n",
                "ct1",
                "--clear-env",
                "--keep-var",
                "TERM",
                "--keep-var",
                "LANG",
                "--",
            ),
            "lxc-attach -n ct1",
        ),
        (Podman("web"), ("podman", "exec", "-i", "web"), "podman exec web"),
        (
            Docker("web", "/usr/bin/podman"),
            ("/usr/bin/podman", "exec", "-i", "web"),
            "docker exec web",
        ),
        (Docker("web"), ("docker", "exec", "-i", "web"), "docker exec web"),
        (
            Slurm(4242, node="node07", bin="/usr/bin/srun"),
            (
                "/usr/bin/srun",
                "--jobid=4242",
                "--overlap",
                "--unbuffered",
                "-w",
                "node07",
                "--export=NONE",
                "--",
            ),
            "srun --jobid 4242 -w node07",
        ),
        (
            Slurm(7),
            ("srun", "--jobid=7", "--overlap", "--unbuffered", "--export=NONE", "--"),
            "srun --jobid 7",
        ),
        (
            Kubectl("trainer-0", "main", "ml", "kind-rk", "/k/kubectl"),
            (
                "/k/kubectl",
                "--context",
                "kind-rk",
                "exec",
                "-i",
                "-n",
                "ml",
                "trainer-0",
                "-c",
                "main",
                "--",
            ),
            "kubectl exec -n ml trainer-0 -c main",
        ),
        (
            Kubectl("p"),
            ("kubectl", "exec", "-i", "-n", "default", "p", "--"),
            "kubectl exec -n default p",
        ),
        (Sudo(), ("sudo", "-n", "--"), "sudo"),
    ],
)
def test_each_hop_wraps_the_argv(hop: Hop, argv: tuple[str, ...], label: str) -> None:
    launch = hop.apply(INNER)
    assert launch.argv == (*argv, *TAIL)
    assert launch.chain == f"{label} -> /v/bin/python"
    assert (launch.env, launch.cwd) == (INNER.env, INNER.cwd)
    # srun relays output in TCP segments that wait for each other's ACK: only it asks the
    # agent's caller to answer output (Launch.nudge), and an outer hop keeps what it said
    assert launch.nudge == isinstance(hop, Slurm) == Sudo().apply(launch).nudge


def test_a_chain_of_any_depth_nests_each_hops_argv_whole() -> None:
    """ssh -> srun -> pct -> podman -> sudo -u: each hop's words, then the next hop's argv as
    arguments (no shell anywhere: the argv is the only thing that crosses)."""
    spec = HostSpec(
        name="n",
        ssh=SSHSpec(host="login"),
        hops=(Slurm(7), Pct(200), Podman("web"), Sudo(as_user="al$ice")),
        venv="/v",
    )
    launch = compose(spec.layers())
    assert launch.argv == (
        *("srun", "--jobid=7", "--overlap", "--unbuffered", "--export=NONE", "--"),
        "/usr/bin/env",  # the next hop's tool by name, where srun leaves no PATH
        *("pct", "exec", "200", "--"),
        *("podman", "exec", "-i", "web"),
        *("sudo", "-n", "-u", "al$ice", "--"),
        *("/v/bin/python", "-c", LOADER),
    )
    assert (
        launch.chain
        == "srun --jobid 7 -> pct exec 200 -> podman exec web -> sudo -u al$ice -> /v/bin/python"
    )
    assert launch.nudge  # an inner hop keeps what an outer one asked for


def test_sudo_to_another_user() -> None:
    assert Sudo(as_user="rk").apply(INNER).argv == ("sudo", "-n", "-u", "rk", "--", *TAIL)
    assert Sudo(as_user="rk").label == "sudo -u rk"
    exc = Sudo(as_user="rk").explain(1, "sudo: unknown user rk\nsudo: error initializing", "h", "s")
    assert type(exc) is AuthError and "sudo cannot run as rk: no such user there" in str(exc)


def test_slurm_finds_a_bare_interpreter_without_path() -> None:
    # --export=NONE leaves the task without PATH; slurmstepd only runs absolute paths then.
    launch = Slurm(7).apply(compose([Interpreter("python3")]))
    assert launch.argv[-4:] == ("/usr/bin/env", "python3", "-c", LOADER)
    assert launch.interpreter == "python3"


def test_sudo_goes_outside_the_container_hop() -> None:
    spec = HostSpec(name="n", ssh=SSHSpec(host="n"), hops=(Sudo(), Podman("web")), python="python3")
    assert compose(spec.layers()).argv[:7] == ("sudo", "-n", "--", "podman", "exec", "-i", "web")
    assert [h.label for h in spec.hops] == ["sudo", "podman exec web"]


def test_the_registry_maps_hosts_yaml_keys_to_hops() -> None:
    assert {
        "container": Pct,
        "lxc": Lxc,
        "podman": Podman,
        "docker": Docker,
        "slurm": Slurm,
        "kubectl": Kubectl,
    } == HOPS


@pytest.mark.parametrize(
    ("hop", "probe"),
    [
        (Pct(200, "/p/pct"), ("/p/pct", "status", "200")),
        (Lxc("c", "/usr/bin/lxc-attach"), ("/usr/bin/lxc-info", "-n", "c", "-s")),
        (Lxc("c"), ("lxc-info", "-n", "c", "-s")),
        (
            Podman("w", "/usr/bin/podman"),
            ("/usr/bin/podman", "container", "inspect", "--format", "{{.State.Status}}", "w"),
        ),
        (
            Slurm(9, bin="/opt/slurm/bin/srun"),
            ("/opt/slurm/bin/squeue", "--noheader", "--jobs=9", "--format=%T"),
        ),
        (
            Kubectl("p", namespace="ml", context="c1"),
            (
                "kubectl",
                "--context",
                "c1",
                "get",
                "pod",
                "-n",
                "ml",
                "p",
                "-o",
                "jsonpath={.status.phase}",
            ),
        ),
        (Sudo(), ("sudo", "-n", "--", "true")),
    ],
)
def test_each_hop_has_its_own_probe(hop: Hop, probe: tuple[str, ...]) -> None:
    assert hop.probe() == probe


@pytest.mark.parametrize(
    ("hop", "code", "text", "up"),
    [
        (Pct(200), 0, "status: running", True),
        (Pct(200), 0, "status: stopped", False),
        (Lxc("c"), 0, "State:          RUNNING", True),
        (Lxc("c"), 0, "State:          STOPPED", False),
        (Lxc("c"), 1, "c doesn't exist", False),
        (Podman("w"), 0, "running\n", True),
        (Podman("w"), 0, "exited\n", False),
        (Podman("w"), 125, "Error: no such container w", False),
        (Slurm(9), 0, "RUNNING\n", True),
        (Slurm(9), 0, "PENDING\n", False),
        (Slurm(9), 1, "slurm_load_jobs error: Invalid job id specified", False),
        (Kubectl("p"), 0, "Running", True),
        (Kubectl("p"), 0, "Succeeded", False),
        (Sudo(), 1, "sudo: a password is required", False),
    ],
)
def test_each_hop_reads_its_probe(hop: Hop, code: int, text: str, up: bool) -> None:
    ok, detail = hop.verdict(code, text)
    assert ok is up and detail


# -- failure explanations: the tools' own words -> the error, quoting them -------------------

NOT_FOUND, NOT_RUNNING, REFUSED = ContainerNotFound, ContainerNotRunning, ContainerError
LXC_NO_PID = (
    "lxc-attach: c1: ../src/lxc/attach.c: get_attach_context: 405 Connection refused - "
    "Failed to get init pid\nlxc-attach: c1: ../src/lxc/attach.c: lxc_attach: 1470 "
    "Connection refused - Failed to get the attach context"
)


@pytest.mark.parametrize(
    ("hop", "code", "text", "error", "words"),
    [
        (Pct(201), 255, "container '201' not running!", NOT_RUNNING, "container 201"),
        (
            Pct(999),
            255,
            "Configuration file 'nodes/pve/lxc/999.conf' does not exist",
            NOT_FOUND,
            "container 999",
        ),
        (Pct(200), 255, "missing command", REFUSED, "pct says"),
        (Pct(200, "pct"), 127, "bash: line 1: pct: command not found", REFUSED, "Proxmox node"),
        (
            Lxc("c", "/opt/lxc/bin/lxc-attach"),
            127,
            "bash: line 1: /opt/lxc/bin/lxc-attach: No such file or directory",
            REFUSED,
            "is lxc-attach installed there? (`bin:` in hosts.yaml",
        ),
        (
            Kubectl("p"),
            127,
            "zsh:1: command not found: kubectl",
            REFUSED,
            "kubectl not found on the PATH",
        ),
        (Lxc("c1"), 1, LXC_NO_PID, REFUSED, "stopped or missing"),
        (
            Podman("w"),
            125,
            'Error: no container with name or ID "w" found: no such container',
            NOT_FOUND,
            "no podman container 'w'",
        ),
        (
            Podman("w"),
            255,
            "Error: can only create exec sessions on running containers: container state improper",
            NOT_RUNNING,
            "is not running",
        ),
        (Docker("w"), 1, "Error: No such container: w", NOT_FOUND, "no docker container 'w'"),
        (
            Docker("w"),
            1,
            "Error response from daemon: container w is not running",
            NOT_RUNNING,
            "docker container 'w'",
        ),
        (Podman("w", "/opt/podman"), 127, "sh: 1: /opt/podman: not found", REFUSED, "engine:"),
        (
            Slurm(4242),
            1,
            "srun: error: Unable to confirm allocation for job 4242: Invalid job id specified",
            NOT_FOUND,
            "no job 4242",
        ),
        (
            Slurm(4243),
            1,
            "srun: error: Unable to confirm allocation for job 4243: Job is pending execution",
            NOT_RUNNING,
            "job 4243 is still pending",
        ),
        (
            Slurm(4244),
            1,
            "srun: error: Unable to confirm allocation for job 4244: "
            "Job/step already completing or completed",
            NOT_RUNNING,
            "job 4244 has finished",
        ),
        (
            Slurm(4245),
            1,
            "srun: error: Slurm job 4245 has expired\n"
            "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 4245",
            NOT_RUNNING,
            "job 4245 has finished",
        ),
        (
            Kubectl("x"),
            1,
            'Error from server (NotFound): pods "x" not found',
            NOT_FOUND,
            "no pod default/x",
        ),
        (
            Kubectl("p", "c"),
            1,
            'error: unable to upgrade connection: container not found ("c")',
            NOT_RUNNING,
            "pod default/p container 'c' is not running",
        ),
        (
            Kubectl("p"),
            1,
            "error: cannot exec into a container in a completed pod; current phase is Succeeded",
            NOT_RUNNING,
            "is not running",
        ),
        (
            Kubectl("p", context="gone"),
            1,
            'error: context "gone" does not exist',
            REFUSED,
            "kubectl",
        ),
    ],
)
def test_each_hop_explains_its_failures(
    hop: Hop, code: int, text: str, error: type[ContainerError], words: str
) -> None:
    exc = hop.explain(code, text, "h1", "run true")
    assert type(exc) is error
    assert (exc.host, exc.step, exc.container) == ("h1", "run true", hop.name)
    assert words in str(exc)
    if error is not REFUSED or code != 127:
        assert text.splitlines()[-1] in str(exc), "the tool's own words are quoted"


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        ((0, "State:          STOPPED"), ContainerNotRunning, "is not running"),
        ((1, "c1 doesn't exist"), ContainerNotFound, "does not exist"),
    ],
)
def test_lxc_asks_its_probe_whether_stopped_or_missing(
    status: tuple[int, str], error: type[ContainerError], words: str
) -> None:
    assert Lxc.confirm
    exc = Lxc("c1").explain(1, LXC_NO_PID, "h", "s", status=status)
    assert type(exc) is error and words in str(exc) and "Failed to get init pid" in str(exc)


@pytest.mark.parametrize(
    ("hop", "code", "text"),
    [
        (Pct(200), 0, "hello"),
        (Lxc("c"), 127, 'lxc-attach: c: attach.c: lxc_attach_run_command: Failed to exec "py"'),
        (Podman("w"), 127, "Error: crun: executable file not found in $PATH: OCI runtime error"),
        (Slurm(1), 2, "slurmstepd: error: execve(): python9: No such file or directory"),
        (Kubectl("p"), 127, "command terminated with exit code 127"),
    ],
)
def test_words_that_are_not_the_hops_are_left_to_the_interpreter(
    hop: Hop, code: int, text: str
) -> None:
    assert hop.explain(code, text, "h", "s") is None


def test_sudo_that_wants_a_password_names_the_user() -> None:
    exc = Sudo(user="gpu").explain(1, "sudo: a password is required", "h", "s")
    assert type(exc) is AuthError
    assert "passwordless sudo (NOPASSWD) for gpu:\n  sudo: a password is required" in str(exc)


def test_sudo_missing_on_the_node() -> None:
    exc = Sudo().explain(127, "bash: line 1: sudo: command not found", "h", "s")
    assert type(exc) is RemotekitError and "sudo not found on the PATH on the node" in str(exc)


def test_slurm_and_kubectl_exec_failures_are_the_interpreters() -> None:
    assert Slurm(1).exec_failed(
        2, "slurmstepd: error: execve(): python9: No such file or directory"
    )
    assert Slurm(1).exec_failed(13, "slurmstepd: error: execve(): /v/bin/python: Permission denied")
    assert not Slurm(1).exec_failed(2, "my step exited 2")
    assert Kubectl("p").exec_failed(126, "command terminated with exit code 126")


# -- a Slurm job given by name ---------------------------------------------------------------


def test_slurm_job_by_name_is_looked_up_with_squeue_beside_srun() -> None:
    hop = Slurm(job_name="train-llama", bin="/opt/slurm/bin/srun")
    assert hop.label == "srun --job-name train-llama"
    assert hop.lookup() == (
        "/opt/slurm/bin/squeue",
        "--noheader",
        "--name=train-llama",
        "--format=%i %T",
    )
    found = hop.resolved(0, "4241 PENDING\n4242 RUNNING\n", "h")
    assert found.job == 4242 and found.label == "srun --jobid 4242"
    assert found.lookup() is None
    assert found.apply(INNER).argv[1] == "--jobid=4242"


@pytest.mark.parametrize(
    ("text", "error", "words"),
    [
        (
            "4241 PENDING\n",
            ContainerNotRunning,
            "no RUNNING job named 'train-llama'; squeue shows: 4241 PENDING",
        ),
        ("", ContainerNotFound, "no job named 'train-llama'"),
        ("1 RUNNING\n2 RUNNING\n", ContainerError, "several running jobs"),
    ],
)
def test_slurm_job_by_name_that_is_not_running(
    text: str, error: type[ContainerError], words: str
) -> None:
    with pytest.raises(error) as info:
        Slurm(job_name="train-llama").resolved(0, text, "h")
    assert type(info.value) is error and words in str(info.value)
    assert info.value.container == "train-llama"


MISSING_TOOLS = [
    Pct(200, "/usr/sbin/pct"),
    Lxc("c1", "/opt/lxc/bin/lxc-attach"),
    Podman("w", "/opt/bin/podman"),
    Docker("w", "/opt/bin/docker"),
    Kubectl("p", bin="/opt/bin/kubectl"),
    Slurm(job=4242, bin="/opt/slurm/bin/srun"),
    Sudo("/opt/bin/sudo"),
]


@pytest.mark.parametrize("hop", MISSING_TOOLS, ids=lambda h: type(h).__name__)
def test_every_hops_tool_not_found_says_where_and_the_hosts_yaml_line(hop: Hop) -> None:
    """One message for every hop kind: "pct not found at /usr/sbin/pct on NODE
    (hosts.yaml:LINE)", never the shell's own words; a bare name is looked for on the PATH."""
    assert {type(h) for h in MISSING_TOOLS} >= {*HOPS.values(), Sudo}  # every kind is here
    exe = hop.executable
    name = exe.rsplit("/", 1)[1]
    shell = f"bash: line 1: {exe}: No such file or directory"
    exc = hop.explain(127, shell, "h", "s", where="kpro6", source="hosts.yaml:7")
    assert exc is not None
    assert exc.message.startswith(f"{name} not found at {exe} on kpro6 (hosts.yaml:7)"), exc
    assert "bash" not in exc.message and "No such file" not in exc.message, exc
    bare = replace(hop, **{hop.exe_key: name})
    assert bare.not_found("kpro6") == f"{name} not found on the PATH on kpro6"
