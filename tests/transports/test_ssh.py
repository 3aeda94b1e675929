"""The engine through real parts: local -> sshd on 127.0.0.1 -> fake pct exec -> venv Python."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import remotekit
from remotekit.agent import QUIET_S
from tests.conftest import CT, need_program, write_inventory
from tests.harness import FakeNode, SSHServer, ancestors, processes_with, venv_prefix, wait_gone

pytestmark = pytest.mark.sshd

# The seed's failure case: everything a shell would eat, and a line reading PYEOF.
SEED_SCRIPT = """\
import os, sys
d = "ckpt-0001"
ckpt = {"global_step": 4001, "epoch": 2}
print(f'{d}: step={ckpt["global_step"]} epoch={ckpt["epoch"]}')
print("double \\"quotes\\" and 'single' and '\\\\'' and $HOME and `uname` and ${PATH} and {a,b} *")
s = '''
PYEOF
'''
print(s.strip())
print("non-ASCII: äöü ß 中文 🙂 – “quoted”")
print("argv:", sys.argv[1:])
"""  # noqa: RUF001


def marker() -> str:
    return f"60{uuid.uuid4().int % 10**6:06d}.5"  # a unique `sleep` argument


def test_chain_names_every_layer(ct: remotekit.Target, node: FakeNode) -> None:
    assert ct.chain.startswith("ssh ")
    assert f"pct exec {CT}" in ct.chain
    assert ct.chain.endswith("/bin/python")


def test_seed_script_runs_byte_exact(ct: remotekit.Target, tmp_path: Path) -> None:
    args = ["{x}", "a b", "'\\''", "$HOME", "`id`", "PYEOF"]
    script = tmp_path / "check.py"
    script.write_text(SEED_SCRIPT, encoding="utf-8")
    here = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, check=True
    ).stdout.decode()
    there = ct.run_python(script, args=args)
    assert there.stdout == here
    assert there.ok and there.exit_code == 0
    assert "ckpt-0001: step=4001 epoch=2" in there.stdout


def test_stdout_and_stderr_stay_separate(ct: remotekit.Target) -> None:
    r = ct.run_python(remotekit.Script("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"))
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"


def test_env_and_cwd_reach_the_step(ct: remotekit.Target) -> None:
    r = ct.run(
        ["sh", "-c", 'printf "%s|%s|%s" "$A" "$VIRTUAL_ENV" "$(pwd)"'],
        env={"A": "x y $z 'q'"},
        cwd="/usr",
    )
    a, venv, cwd = r.stdout.split("|")
    assert a == "x y $z 'q'"
    assert venv == sys.prefix
    assert cwd == "/usr"


def test_venv_bin_is_first_on_path(ct: remotekit.Target) -> None:
    r = ct.run(["python", "-c", "import sys; print(sys.prefix)"])
    assert r.stdout.strip() == sys.prefix


def test_files_ship_into_the_container_not_the_node(ct: remotekit.Target, node: FakeNode) -> None:
    only_on_node = Path("/tmp") / f"remotekit-node-only-{uuid.uuid4().hex}"
    only_on_node.write_text("node")
    try:
        probe = f"import os\nprint(os.path.exists({str(only_on_node)!r}))\n"
        r = ct.run_python(remotekit.Script(probe), files={"data/extra.txt": b"\x00\xffbytes"})
        assert r.stdout.strip() == "False"
        r = ct.run_python(
            remotekit.Script(
                "import os,sys\n"
                "p = os.path.join(os.environ['REMOTEKIT_DIR'], 'data', 'extra.txt')\n"
                "sys.stdout.write(open(p,'rb').read().hex())\n"
                "import helper; print(helper.X)\n"
            ),
            files={"data/extra.txt": b"\x00\xffbytes", "helper.py": b"X = 42\n"},
        )
        assert r.stdout == (b"\x00\xffbytes".hex() + "42\n")
    finally:
        only_on_node.unlink()
    assert not list(node.ct_tmp(CT).glob("remotekit-*")), "temp dir left in the container"


def test_timeout_stops_the_step_everywhere(ct: remotekit.Target) -> None:
    m = marker()
    t0 = time.monotonic()
    with pytest.raises(remotekit.StepTimeout) as info:
        ct.run(["sh", "-c", f"echo started; sleep {m}; echo never"], timeout=2, step="long sleep")
    elapsed = time.monotonic() - t0
    err = info.value
    assert err.host == "ct" and err.step == "long sleep" and err.timeout_s == 2
    assert "long sleep" in str(err) and "'ct'" in str(err) and "2 s" in str(err)
    assert err.result.stdout == "started\n"  # partial output is kept
    assert err.result.exit_code is None
    assert elapsed < 4
    assert wait_gone(m, 3) == []


def test_timeout_of_run_python_kills_its_children(ct: remotekit.Target) -> None:
    m = marker()
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '{m}'])\n"  # a grandchild, in the same session
        f"subprocess.Popen(['setsid', 'sleep', '{m}'])\n"  # one that left the session
        "print('spawned', flush=True)\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(remotekit.StepTimeout) as info:
        ct.run_python(remotekit.Script(code, name="spawner.py"), timeout=3)
    assert "spawned" in info.value.result.stdout
    assert wait_gone(m, 3) == []


def test_interrupt_stops_the_remote_step(ct: remotekit.Target) -> None:
    m = marker()
    seen = threading.Event()

    def on_output(stream: str, line: str) -> None:
        if line == "running":
            seen.set()

    def interrupt() -> None:
        seen.wait(20)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        ct.run(["sh", "-c", f"echo running; sleep {m}"], on_output=on_output, timeout=60)
    assert seen.is_set()
    assert wait_gone(m, 5) == []


def test_dropped_connection_kills_the_remote_step(
    inventory: remotekit.Inventory, agent: bool | None
) -> None:
    m = marker()
    errors: list[BaseException] = []

    def run() -> None:
        with inventory.target("ct", agent=agent) as t:
            try:
                t.run(["sleep", m], timeout=120)
            except BaseException as exc:
                errors.append(exc)

    th = threading.Thread(target=run)
    th.start()
    end = time.monotonic() + 20
    while not processes_with(m) and time.monotonic() < end:
        time.sleep(0.05)
    pids = processes_with(m)
    assert pids, "the step never started"
    session = next(pid for pid, cmd in ancestors(pids[0]) if cmd.startswith("sshd:"))
    os.kill(session, signal.SIGKILL)  # the sshd process serving this connection dies
    th.join(30)
    assert not th.is_alive()
    assert errors and isinstance(errors[0], remotekit.ConnectionLost), errors
    assert errors[0].host == "ct"
    assert wait_gone(m, 5) == []


def test_sixteen_concurrent_steps_on_one_target(ct: remotekit.Target, node: FakeNode) -> None:
    results: dict[int, remotekit.Result] = {}
    failures: list[BaseException] = []

    def one(i: int) -> None:
        try:
            script = remotekit.Script(
                f"import os, time\nprint({i} * 1000, os.environ['REMOTEKIT_DIR'])\ntime.sleep(0.3)\n",
                name=f"job{i}.py",
            )
            results[i] = ct.run_python(script, timeout=120)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not failures, failures
    dirs = set()
    for i, r in results.items():
        value, tmpdir = r.stdout.split()
        assert value == str(i * 1000)
        dirs.add(tmpdir)
    assert len(results) == 16 and len(dirs) == 16
    assert not list(node.ct_tmp(CT).glob("remotekit-*")), "temp dirs left behind"


@pytest.mark.timeout(120)
def test_a_server_session_limit_means_wait_not_lost(tmp_path: Path, sshd: SSHServer) -> None:
    """sshd refuses a session over its MaxSessions (and holds a finished one's slot until its
    process is reaped): the connection is fine, so steps wait for a slot, none is "lost".
    (One process per step: each step is a session; on the agent they are messages on one.)"""
    tight = SSHServer(tmp_path / "sshd", extra_config="MaxSessions 2\n").start()
    try:
        inv = write_inventory(tmp_path / "hosts.yaml", {"node": tight.host_yaml()})
        failures: list[BaseException] = []
        with inv.target("node", agent=False) as t:

            def one() -> None:
                try:
                    t.run(["sleep", "0.5"], timeout=60)
                except BaseException as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=one) for _ in range(6)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(90)
        assert not failures, failures
    finally:
        tight.stop()


def test_one_connection_is_reused(inventory: remotekit.Inventory, agent: bool | None) -> None:
    with inventory.target("ct", agent=agent) as t:
        t.run(["true"])
        first = t.transport._conn.client.get_transport()  # type: ignore[attr-defined]
        for _ in range(3):
            t.run(["true"])
        assert t.transport._conn.client.get_transport() is first  # type: ignore[attr-defined]


def test_output_streams_live(ct: remotekit.Target, node: FakeNode) -> None:
    go = f"go-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "print('first', flush=True)\n"
        "end = time.time() + 30\n"
        f"while not os.path.exists('/tmp/{go}') and time.time() < end:\n"
        "    time.sleep(0.02)\n"
        f"print('second' if os.path.exists('/tmp/{go}') else 'no go')\n"
    )
    lines: list[tuple[str, str]] = []

    def on_output(stream: str, line: str) -> None:
        lines.append((stream, line))
        if line == "first":  # the script waits for this: only live streaming gets here
            (node.ct_tmp(CT) / go).write_text("")

    try:
        r = ct.run_python(remotekit.Script(code), on_output=on_output, timeout=60)
    finally:
        (node.ct_tmp(CT) / go).unlink(missing_ok=True)
    assert lines == [("stdout", "first"), ("stdout", "second")]
    assert r.stdout == "first\nsecond\n"


def test_capture_is_bounded(inventory: remotekit.Inventory, agent: bool | None) -> None:
    spec = inventory.spec("ct")
    with remotekit.Target(spec, capture_limit=1 << 20, agent=agent) as t:
        seen = [0]

        def count(stream: str, line: str) -> None:
            seen[0] += 1

        code = "import sys\nline = 'x' * 99 + '\\n'\nfor i in range(200000):\n    sys.stdout.write(line)\nprint('END')\n"
        r = t.run_python(remotekit.Script(code), on_output=count, timeout=120)
    assert seen[0] == 200001  # every line reached the callback
    assert len(r.stdout) <= (1 << 20)
    assert r.stdout_dropped == 200000 * 100 + 4 - len(r.stdout)
    assert r.stdout.endswith("x\nEND\n")


def test_put_and_get_through_the_container(
    ct: remotekit.Target, node: FakeNode, tmp_path: Path
) -> None:
    data = os.urandom(3 << 20) + b"\n\x00end"
    src = tmp_path / "local.bin"
    src.write_bytes(data)
    ct.put(src, "/tmp/x.bin")
    assert (node.ct_tmp(CT) / "x.bin").read_bytes() == data  # it landed inside the CT
    assert not Path("/tmp/x.bin").exists() or Path("/tmp/x.bin").read_bytes() != data
    back = tmp_path / "back.bin"
    ct.get("/tmp/x.bin", back)
    assert back.read_bytes() == data
    with pytest.raises(remotekit.StepFailed, match="no-such-file"):
        ct.get("/tmp/no-such-file", tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    (node.ct_tmp(CT) / "x.bin").unlink()


def test_stopped_container(inventory: remotekit.Inventory, agent: bool | None) -> None:
    with (
        inventory.target("stopped", agent=agent) as t,
        pytest.raises(remotekit.ContainerNotRunning) as info,
    ):
        t.run(["true"])
    assert "container '201' not running!" in str(info.value)
    assert (info.value.host, info.value.step, info.value.container) == (
        "stopped",
        "run true",
        "201",
    )


def test_unknown_container(inventory: remotekit.Inventory, agent: bool | None) -> None:
    with (
        inventory.target("noct", agent=agent) as t,
        pytest.raises(remotekit.ContainerNotFound) as info,
    ):
        t.run_python(remotekit.Script("pass"))
    assert info.value.container == "999"
    assert "Configuration file 'nodes/pve/lxc/999.conf' does not exist" in str(info.value)


def test_missing_venv(inventory: remotekit.Inventory, agent: bool | None) -> None:
    with (
        inventory.target("novenv", agent=agent) as t,
        pytest.raises(remotekit.InterpreterNotFound) as info,
    ):
        t.run(["true"])
    assert info.value.path == "/opt/no-such-venv/bin/python"
    assert "/opt/no-such-venv/bin/python" in str(info.value)


def test_ping_walks_the_layers(inventory: remotekit.Inventory, agent: bool | None) -> None:
    with inventory.target("ct", agent=agent) as t:
        checks = t.ping().checks
    assert [c.ok for c in checks] == [True, True, True, True, True]
    assert checks[1].layer == f"pct exec {CT}"
    assert [c.layer for c in checks[3:]] == ["agent", "torch"]
    with inventory.target("stopped", agent=agent) as t:
        checks = t.ping().checks
    assert [c.ok for c in checks] == [True, False]
    assert "stopped" in checks[1].detail
    with inventory.target("novenv", agent=agent) as t:
        checks = t.ping().checks
    assert [c.ok for c in checks] == [True, True, False]
    assert "/opt/no-such-venv/bin/python" in checks[2].detail


def test_secret_env_values_never_show(
    sshd: SSHServer, node: FakeNode, tmp_path: Path, agent: bool | None
) -> None:
    secret = "hf_" + uuid.uuid4().hex
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {
            "s": sshd.host_yaml(
                container=CT,
                pct=str(node.pct),
                venv=sys.prefix,
                env={"HF_TOKEN": secret},
                secret_env=["HF_TOKEN"],
            )
        },
    )
    with inv.target("s", agent=agent) as t:
        with pytest.raises(remotekit.StepFailed) as info:
            t.run(["sh", "-c", 'echo "token is $HF_TOKEN" >&2; exit 3'])
        assert info.value.result.stderr == f"token is {secret}\n"  # the data is not lost
        assert secret not in str(info.value) and "token is ***" in str(info.value)
        # the value never crosses a command line: check the runner's own argv there
        m = marker()

        def sleeper() -> None:
            with pytest.raises(remotekit.StepTimeout):
                t.run(["sleep", m], timeout=3)

        th = threading.Thread(target=sleeper)
        th.start()
        end = time.monotonic() + 10
        while not processes_with(m) and time.monotonic() < end:
            time.sleep(0.05)
        for pid in processes_with(m):
            for _, cmd in ancestors(pid):
                assert secret not in cmd
        th.join(30)


# -- connecting: host keys, auth, refused, DNS ------------------------------------------------


def test_unknown_host_key_is_refused(sshd: SSHServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": sshd.host_yaml(known_hosts=str(kh))})
    with inv.target("h") as t, pytest.raises(remotekit.HostKeyError) as info:
        t.run(["true"])
    msg = str(info.value)
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in msg
    assert "host_key: accept-new" in msg and "SHA256:" in msg
    assert kh.read_text() == ""


def test_accept_new_records_the_key_and_then_trusts_it(sshd: SSHServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    inv = write_inventory(
        tmp_path / "hosts.yaml", {"h": sshd.host_yaml(known_hosts=str(kh), host_key="accept-new")}
    )
    with inv.target("h") as t:
        assert t.run(["echo", "ok"]).stdout == "ok\n"
    assert kh.read_text().split()[1:] == sshd.host_pub.split()[:2]
    assert kh.stat().st_mode & 0o077 == 0
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": sshd.host_yaml(known_hosts=str(kh))})
    with inv.target("h") as t:
        assert t.run(["echo", "ok"]).stdout == "ok\n"


def test_changed_host_key_is_always_refused(sshd: SSHServer, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(
        [need_program("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True
    )
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {Path(f'{other}.pub').read_text()}")
    before = kh.read_text()
    for policy in ("strict", "accept-new"):
        inv = write_inventory(
            tmp_path / "hosts.yaml", {"h": sshd.host_yaml(known_hosts=str(kh), host_key=policy)}
        )
        with inv.target("h") as t, pytest.raises(remotekit.HostKeyError, match="HOST KEY CHANGED"):
            t.run(["true"])
    assert kh.read_text() == before


def test_wrong_key_is_an_auth_error(sshd: SSHServer, tmp_path: Path) -> None:
    key = tmp_path / "stranger"
    subprocess.run(
        [need_program("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
    )
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": sshd.host_yaml(identity=str(key))})
    with inv.target("h") as t, pytest.raises(remotekit.AuthError) as info:
        t.run(["true"])
    assert str(key) in str(info.value) and info.value.host == "h"


def test_an_auth_failure_names_the_user_and_every_key_tried(
    sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `ssh -v` would tell: the user the server refused, and each key offered (the
    identity file, then the default ~/.ssh/id_* keys)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    default, stranger = home / ".ssh" / "id_ed25519", tmp_path / "stranger"
    for key in (default, stranger):
        subprocess.run(
            [need_program("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
            check=True,
        )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    settings = sshd.host_yaml(identity=str(stranger), ssh=f"nobody-here@127.0.0.1:{sshd.port}")
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": settings})
    with inv.target("h") as t, pytest.raises(remotekit.AuthError) as info:
        t.run(["true"])
    msg = str(info.value)
    assert "refused user 'nobody-here'" in msg and "failed.)" not in msg, msg
    assert f"keys tried: {stranger}, {default}" in msg, msg


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o644, 0o660])
def test_a_key_others_can_read_or_write_is_refused_like_openssh(
    sshd: SSHServer, tmp_path: Path, mode: int
) -> None:
    key = tmp_path / "id key"  # a space: the chmod hint must quote it
    shutil.copy(sshd.client_key, key)
    key.chmod(mode)
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": sshd.host_yaml(identity=str(key))})
    with inv.target("h") as t, pytest.raises(remotekit.AuthError) as info:
        t.run(["true"])
    msg = str(info.value)
    assert "UNPROTECTED PRIVATE KEY FILE" in msg and f"{mode:04o}" in msg, msg
    assert f"chmod 600 '{key}'" in msg and info.value.host == "h", msg
    key.chmod(0o600)  # as the message says: then it is used
    with inv.target("h") as t:
        assert t.run(["echo", "ok"]).stdout == "ok\n"


def test_refused_port_is_a_connect_error(tmp_path: Path) -> None:
    from tests.harness import free_port

    port = free_port()
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {"h": {"ssh": f"root@127.0.0.1:{port}", "timeouts": {"connect": 3}}},
    )
    t0 = time.monotonic()
    with inv.target("h") as t, pytest.raises(remotekit.ConnectError) as info:
        t.run(["true"])
    assert time.monotonic() - t0 < 3
    assert f"127.0.0.1:{port}" in str(info.value) and "refused" in str(info.value)


def test_unresolvable_host_is_a_connect_error(tmp_path: Path) -> None:
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {"h": {"ssh": "root@no-such-host.invalid", "timeouts": {"connect": 3}}},
    )
    with inv.target("h") as t, pytest.raises(remotekit.ConnectError, match="cannot resolve"):
        t.run(["true"])


@pytest.mark.parametrize("seed", range(1))
def test_random_argv_and_env_roundtrip_over_ssh(ct: remotekit.Target, seed: int) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    text = st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
    )

    @settings(max_examples=25, deadline=None)
    @given(argv=st.lists(text, max_size=5), value=text)
    def check(argv: list[str], value: str) -> None:
        r = ct.run(
            [
                "python",
                "-c",
                "import json,os,sys; print(json.dumps([sys.argv[1:], os.environ['V']]))",
                *argv,
            ],
            env={"V": value},
        )
        assert json.loads(r.stdout) == [argv, value]

    check()


def test_jump_host(sshd: SSHServer, node: FakeNode, tmp_path: Path, agent: bool | None) -> None:
    # ProxyJump through the same sshd: laptop -> 127.0.0.1 (jump) -> 127.0.0.1 -> pct -> venv
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {
            "via": sshd.host_yaml(
                jump=f"{sshd.user}@127.0.0.1:{sshd.port}",
                container=CT,
                pct=str(node.pct),
                venv=sys.prefix,
            )
        },
    )
    with inv.target("via", agent=agent) as t:
        assert (
            t.run_python(remotekit.Script("print('through the jump')")).stdout
            == "through the jump\n"
        )


def _sessions_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:``port`` (each an SSH session's link)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(1 for r in rows if int(r[1].split(":")[1], 16) == port and r[3] == "01")


def test_a_chain_of_jump_hosts(own_sshd: SSHServer, node: FakeNode, tmp_path: Path) -> None:
    """ProxyJump a,b (``jump:`` a list): the laptop reaches the first gateway, that one the
    second, that one the target, each an SSH connection of its own (here all three to the
    same sshd); close() ends every one of them."""
    gateway = f"{own_sshd.user}@127.0.0.1:{own_sshd.port}"
    host = own_sshd.host_yaml(jump=[gateway, gateway], container=CT, pct=str(node.pct))
    inv = write_inventory(tmp_path / "hosts.yaml", {"via": {**host, "venv": sys.prefix}})
    t = inv.target("via")
    try:
        assert t.run(["python", "-c", "print('through two jumps')"]).stdout == "through two jumps\n"
        assert _sessions_to(own_sshd.port) == 3
    finally:
        t.close()
    end = time.monotonic() + 10
    while _sessions_to(own_sshd.port) and time.monotonic() < end:
        time.sleep(0.05)
    assert _sessions_to(own_sshd.port) == 0


def test_silent_server_is_a_connect_error_within_the_timeout(tmp_path: Path) -> None:
    # A port that accepts but never says its SSH banner (a wedged sshd, a firewall proxy).
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        inv = write_inventory(
            tmp_path / "hosts.yaml",
            {"h": {"ssh": f"root@127.0.0.1:{port}", "timeouts": {"connect": 2}}},
        )
        t0 = time.monotonic()
        with inv.target("h") as t, pytest.raises(remotekit.ConnectError) as info:
            t.run(["true"])
        assert time.monotonic() - t0 < 2 + 3
    assert f"127.0.0.1:{port}" in str(info.value) and info.value.host == "h"


def test_sudo_layer(inventory: remotekit.Inventory, node: FakeNode, agent: bool | None) -> None:
    node.sudo_policy("nopasswd")
    with inventory.target("sudo", agent=agent) as t:
        assert t.chain.startswith("ssh ") and " -> sudo -> pct exec 200 -> " in t.chain
        assert t.run(["echo", "as root"]).stdout == "as root\n"
        assert [c.ok for c in t.ping().checks] == [True] * 6


def test_sudo_that_wants_a_password_is_an_auth_error(
    inventory: remotekit.Inventory, node: FakeNode, agent: bool | None
) -> None:
    node.sudo_policy("password")
    try:
        with inventory.target("sudo", agent=agent) as t:
            with pytest.raises(remotekit.AuthError) as info:
                t.run(["true"])
            assert "NOPASSWD" in str(info.value) and "sudo: a password is required" in str(
                info.value
            )
            report = t.ping()
            assert [(c.layer, c.ok) for c in report.checks][1] == ("sudo", False)
            assert report.exit_code == 2
    finally:
        node.sudo_policy("nopasswd")


def test_ssh_config_alias(sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `ssh: kpro6` names a Host block of ~/.ssh/config: HostName, Port, User, IdentityFile
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host kpro6-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n"
    )
    (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts.read_text())
    monkeypatch.setenv("HOME", str(home))
    inv = write_inventory(tmp_path / "hosts.yaml", {"k": {"ssh": "kpro6-alias"}})
    with inv.target("k") as t:
        assert t.run(["echo", "via alias"]).stdout == "via alias\n"


def test_unknown_key_hint_names_the_real_address_behind_an_alias(
    sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {sshd.client_key}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    inv = write_inventory(tmp_path / "hosts.yaml", {"k": {"ssh": f"{sshd.user}@box"}})
    with inv.target("k") as t, pytest.raises(remotekit.HostKeyError) as info:
        t.run(["true"])
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> ~/.ssh/known_hosts" in str(info.value)


@pytest.mark.timeout(120)
def test_a_server_that_refuses_a_terminal_says_so_and_keeps_the_connection(
    tmp_path: Path, sshd: SSHServer
) -> None:
    """``PermitTTY no`` (or ``no-pty``) refuses the pty, not the connection: the error says so,
    and the same connection (and its session slot) serves the next step."""
    strict = SSHServer(tmp_path / "sshd", extra_config="PermitTTY no\n").start()
    try:
        inv = write_inventory(tmp_path / "hosts.yaml", {"node": strict.host_yaml()})
        with inv.target("node") as t:
            t.run(["true"])
            conn = t.transport._conn  # type: ignore[attr-defined]
            for _ in range(3):  # each try gives its session slot back
                with pytest.raises(remotekit.RemotekitError) as info:
                    t.transport.open_terminal(["true"], term="xterm", columns=80, rows=24)  # type: ignore[attr-defined]
                assert not isinstance(info.value, remotekit.ConnectionLost)
                assert "refused a terminal" in str(info.value)
                assert info.value.step == "shell" and info.value.host == "node"
            assert t.transport._conn is conn and conn.is_connected  # type: ignore[attr-defined]
            assert t.run(["echo", "still"]).stdout.strip() == "still"
    finally:
        strict.stop()


@pytest.mark.timeout(120)
def test_ping_a_server_that_opens_no_session_is_a_failed_hop_check(
    tmp_path: Path, sshd: SSHServer, agent: bool | None
) -> None:
    """``MaxSessions 0``: the connection is up but no channel opens. The hop's probe cannot
    run: that is the hop's failed check in the report, not an exception out of ping."""
    closed = SSHServer(tmp_path / "sshd", extra_config="MaxSessions 0\n").start()
    try:
        host = closed.host_yaml(container=CT, pct="/bin/false", timeouts={"connect": 1})
        inv = write_inventory(tmp_path / "hosts.yaml", {"node": host})
        with inv.target("node", agent=agent) as t:
            report = t.ping()
        assert [c.ok for c in report.checks] == [True, False]
        assert report.checks[1].layer == f"pct exec {CT}"
        assert "channel" in report.checks[1].detail and report.exit_code == 2
    finally:
        closed.stop()


_SILENT_SERVER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])  # accepted, and never a byte written
"""


@pytest.mark.timeout(60)
def test_a_host_that_sends_no_banner_is_our_error_and_nothing_of_paramiko(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", _SILENT_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        box = {"ssh": f"root@127.0.0.1:{port}", "timeouts": {"connect": 2}}
        write_inventory(tmp_path / "hosts.yaml", {"mute": box})
        cli = [sys.executable, "-m", "remotekit", "run", "--host", "mute", "--cmd", "true"]
        r = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=45)
    finally:
        server.kill()
        server.wait()
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert f"no SSH banner from 127.0.0.1:{port} within 2 s" in out, out
    for noise in ("Exception (client)", "No existing session", "Traceback", "paramiko"):
        assert noise not in out, out


@pytest.mark.timeout(60)
def test_paramiko_records_still_reach_an_application_that_configured_logging(
    tmp_path: Path,
) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", _SILENT_SERVER], stdout=subprocess.PIPE, text=True
    )
    app = (
        "import logging, sys, time, remotekit\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "inv = remotekit.load_inventory(sys.argv[1])\n"
        "try:\n"
        "    inv.target('mute').run(['true'])\n"
        "except remotekit.ConnectError as exc:\n"
        "    print('ours:', exc)\n"
        "time.sleep(0.5)\n"
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        box = {"ssh": f"root@127.0.0.1:{port}", "timeouts": {"connect": 1}}
        inv = write_inventory(tmp_path / "hosts.yaml", {"mute": box})
        r = subprocess.run(
            [sys.executable, "-c", app, str(inv.path)], capture_output=True, text=True, timeout=45
        )
    finally:
        server.kill()
        server.wait()
    assert "ours: " in r.stdout and "no SSH banner" in r.stdout, r.stdout + r.stderr
    assert "paramiko.transport" in r.stderr, r.stderr  # the application's handler got them


@pytest.mark.timeout(120)
def test_a_connection_dropped_between_steps_reconnects_with_a_note(
    own_sshd: SSHServer, node: FakeNode, tmp_path: Path, agent: bool | None
) -> None:
    """The server drops the held connection while no step runs: the next step opens a new
    one, says so (a warning naming the host), and runs once; nothing is run again."""
    host = own_sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
    inv = write_inventory(tmp_path / "hosts.yaml", {"box": host})
    runs = node.ct_tmp(CT) / f"runs-{uuid.uuid4().hex}"
    step = ["sh", "-c", f"echo ran >> /tmp/{runs.name}; echo ok"]
    with inv.target("box", agent=agent) as t:
        assert t.run(step).stdout == "ok\n"
        time.sleep(QUIET_S + 0.25)  # no step, and the agent silent for longer than its window
        assert own_sshd.drop_connections()  # the sshd process serving it is gone
        for _ in range(2):  # at once, and after paramiko saw the connection go
            with pytest.warns(remotekit.Reconnected, match=r"^box: .*dropped.*reconnected") as w:
                assert t.run(step).stdout == "ok\n"
            assert [x.filename for x in w] == [__file__]  # it names the caller's line
            assert own_sshd.drop_connections()
            time.sleep(0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a connection that stayed up: no note
            with pytest.warns(remotekit.Reconnected):
                t.run(step)
            assert t.run(step).stdout == "ok\n"
    assert runs.read_text() == "ran\n" * 5  # each step ran once


@pytest.mark.timeout(120)
def test_a_connection_gone_silent_between_steps_fails_the_next_step(
    own_sshd: SSHServer, node: FakeNode, tmp_path: Path, agent: bool | None
) -> None:
    """The held connection stops answering while no step runs (no FIN, no RST): the next
    step is not sent into it to wait out its own timeout; the engine finds the link dead
    within timeouts.connect and says so. (On the agent, an idle agent answers a probe before
    a step goes to it, when it has said nothing for QUIET_S.)"""
    host = own_sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
    inv = write_inventory(tmp_path / "hosts.yaml", {"box": {**host, "timeouts": {"connect": 2}}})
    runs = node.ct_tmp(CT) / f"runs-{uuid.uuid4().hex}"
    step = ["sh", "-c", f"echo ran >> /tmp/{runs.name}; echo ok"]
    with inv.target("box", agent=agent) as t:
        assert t.run(step).stdout == "ok\n"
        time.sleep(QUIET_S + 0.25)  # no step, and the agent silent for longer than its window
        assert own_sshd.freeze_connections()
        try:
            with pytest.raises(remotekit.ConnectionLost) as info:
                t.run(step, timeout=60)
        finally:
            own_sshd.drop_connections()
        assert info.value.host == "box"
    assert runs.read_text() == "ran\n"  # the step that met the silent link never ran


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["dropped", "silent"])
def test_a_link_that_dies_right_after_a_step_fails_the_next_step_once(
    own_sshd: SSHServer, node: FakeNode, tmp_path: Path, how: str
) -> None:
    """The agent answered a moment ago (within QUIET_S), so the next step goes to it with no
    probe; the link died in that moment. The step fails as on a link that dies under a
    running step: a dropped one at once, ConnectionLost naming the host (or, where the drop
    was seen before the step went, the step runs once on a new connection, with its note);
    a silent one at the step's timeout, StepTimeout. A step that met the dead link never
    runs, and none runs twice."""
    host = own_sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
    inv = write_inventory(tmp_path / "hosts.yaml", {"box": {**host, "timeouts": {"connect": 2}}})
    runs = node.ct_tmp(CT) / f"runs-{uuid.uuid4().hex}"
    step = ["sh", "-c", f"echo ran >> /tmp/{runs.name}; echo ok"]
    with inv.target("box", agent=True) as t:
        assert t.run(step).stdout == "ok\n"
        dies = own_sshd.drop_connections if how == "dropped" else own_sshd.freeze_connections
        assert dies()
        ran = 1
        try:
            with warnings.catch_warnings(record=True) as notes:
                warnings.simplefilter("always", remotekit.Reconnected)
                assert t.run(step, timeout=5).stdout == "ok\n"
            assert how == "dropped", "a step on a silent link ended"
            assert [type(n.message) for n in notes] == [remotekit.Reconnected]
            ran += 1
        except (remotekit.ConnectionLost, remotekit.StepTimeout) as exc:
            wanted = remotekit.ConnectionLost if how == "dropped" else remotekit.StepTimeout
            assert isinstance(exc, wanted), exc
            assert exc.host == "box", exc
        finally:
            own_sshd.drop_connections()
    assert runs.read_text() == "ran\n" * ran  # the step that met the dead link never ran


@pytest.mark.timeout(300)
def test_eof_and_close_from_two_threads_keep_the_connection(
    own_sshd: SSHServer, tmp_path: Path
) -> None:
    """A step's stdin closed (EOF) in one thread as another closes its channel: paramiko sends
    both after letting go of the channel's lock, so they could reach sshd as CLOSE then EOF,
    and sshd drops the whole connection for a message on a channel it has freed. That was
    the forward test's rare 'could not open a channel' (clients closing while their relays
    were closed); here it happened in round 1 of 1 to 2 every time before the fix."""
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": own_sshd.host_yaml()})
    with inv.target("h", agent=False) as t:
        transport = t.transport
        for _ in range(100):
            procs = [transport.start(["cat"], iter(())) for _ in range(6)]
            gate = threading.Barrier(2 * len(procs))

            def at_once(fn: Callable[[], None], gate: threading.Barrier = gate) -> None:
                gate.wait()
                fn()

            threads = [
                threading.Thread(target=at_once, args=(fn,), daemon=True)
                for p in procs
                for fn in (p.close_stdin, p.terminate)
            ]
            for th in threads:
                th.start()
            for th in threads:
                th.join(10)
        with warnings.catch_warnings():
            warnings.simplefilter("error", remotekit.Reconnected)
            assert t.run(["echo", "same connection"]).stdout == "same connection\n"
        assert transport.reconnects == 0  # type: ignore[attr-defined]
