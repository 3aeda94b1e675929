"""remotekit in Jupyter, for real: cells executed by nbclient in a real ipykernel, on
``local`` and through the real sshd -> fake ``pct exec`` -> a real LXC container.

A step's output streams into the running cell (stdout and stderr apart); interrupting the
kernel mid-step (the notebook's stop button sends SIGINT) stops the step there, nothing
left running, and the Target opened in an earlier cell stays usable, also after the server
dropped its connection between cells (the next step reconnects, with a note); a report as
a cell's last expression displays as HTML with its findings.
"""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from remotekit.agent import QUIET_S
from tests.conftest import CI, CT, write_inventory
from tests.harness import ROOT, FakeNode, SSHServer, processes_with, venv_prefix, wait_gone

try:
    import ipykernel  # noqa: F401
    import nbclient
    import nbformat
except ImportError as exc:  # the test extra brings them: pip install -e .[test]
    if CI:
        raise
    pytest.skip(f"{exc.name} not installed (pip install -e .[test])", allow_module_level=True)


def cell(source: str) -> Any:
    return nbformat.v4.new_code_cell(textwrap.dedent(source))


def outputs_of(c: Any, kind: str) -> list[Any]:
    return [o for o in c.outputs if o.output_type == kind]


#: The notebook's first cell: ``t`` is the target, ``checkpoints`` the diagnostic.
SETUP = """
    import sys
    sys.path.insert(0, {root!r})
    import torch, remotekit
    from remotekit.diagnostics import checkpoints
    t = {target}
    """


@dataclass
class Where:
    """A target the notebook runs on: how its first cell opens it, the folder where its
    files are seen from here and from there, and (over SSH) the server, to drop its
    connection between cells."""

    target: str
    here: Path
    there: str
    server: SSHServer | None = None


def local(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    return Where("remotekit.local_target()", tmp_path, str(tmp_path))


def ct(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """ssh to an sshd of this test's own -> fake ``pct exec 200`` -> the LXC container."""
    server: SSHServer = request.getfixturevalue("own_sshd")
    node: FakeNode = request.getfixturevalue("node")
    host = server.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix())
    write_inventory(tmp_path / "hosts.yaml", {"box": host})
    here = node.ct_tmp(CT) / f"nb-{uuid.uuid4().hex}"
    here.mkdir()
    target = f"remotekit.load_inventory({str(tmp_path / 'hosts.yaml')!r}).target('box')"
    return Where(target, here, f"/tmp/{here.name}", server)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("at", [local, pytest.param(ct, marks=pytest.mark.sshd)])
def test_a_notebook_streams_interrupts_and_displays(
    at: Callable[[pytest.FixtureRequest, Path], Where],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    where = at(request, tmp_path)
    m = f"63{uuid.uuid4().int % 10**6:06d}.5"  # a unique `sleep` argument
    torch.save({"w": torch.tensor([1.0, float("nan")])}, where.here / "bad.pt")
    cells = [
        cell(SETUP.format(root=str(ROOT), target=where.target)),
        cell("""
            r = t.run(["sh", "-c", "echo out-1; echo err-1 >&2; sleep 0.5; echo out-2"],
                      on_output=remotekit.echo)
            """),
        cell(f"""
            t.run(["sh", "-c", "echo started; exec sleep {m}"], on_output=remotekit.echo)
            """),
        cell("""
            print(t.run(["echo", "still usable"]).stdout.strip())
            """),
        cell("""
            print(t.run(["echo", "after the drop"]).stdout.strip())
            """),
        cell(f"""
            checkpoints.scan_checkpoints(t, {where.there!r})
            """),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=240, allow_errors=True)
    interrupted = threading.Event()

    def stop_button() -> None:  # what the notebook's stop button does: SIGINT to the kernel
        end = time.monotonic() + 60
        while not processes_with(m):
            assert time.monotonic() < end, "the step never started"
            time.sleep(0.05)
        pid = client.km.provisioner.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGINT)
        interrupted.set()

    with client.setup_kernel():
        for i, c in enumerate(nb.cells):
            if i == 2:
                threading.Thread(target=stop_button, daemon=True).start()
            if i == 4 and where.server is not None:
                # The server drops the connection once it sat idle, as between a person's cells
                # (seconds): a step then first asks the agent whether its link is up. A step
                # sent within QUIET_S of the agent's last word is not asked: a drop in that
                # moment fails it (ConnectionLost), which tests/transports/test_ssh.py holds.
                time.sleep(2 * QUIET_S)
                assert where.server.drop_connections()
            client.execute_cell(c, i)
    assert interrupted.is_set()

    streams: dict[str, str] = {}
    for o in outputs_of(nb.cells[1], "stream"):  # each line as it came, in its own stream
        streams[o.name] = streams.get(o.name, "") + o.text
    assert streams.get("stdout", "").split() == ["out-1", "out-2"], nb.cells[1].outputs
    assert streams.get("stderr", "").split() == ["err-1"], nb.cells[1].outputs
    last = outputs_of(nb.cells[1], "stream")[-1]
    assert (last.name, last.text) == ("stdout", "out-2\n")  # came alone, after the sleep

    errors = outputs_of(nb.cells[2], "error")
    assert errors and errors[0].ename == "KeyboardInterrupt", nb.cells[2].outputs
    host = "box" if where.server is not None else "local"
    assert errors[0].traceback == [  # one line, not a traceback through our waits (queue.py)
        f"KeyboardInterrupt: interrupted; what ran on {host} was stopped there, and {host} "
        "stays usable"
    ], errors[0].traceback
    assert "started" in text_of(nb.cells[2], "stdout")
    assert wait_gone(m, 30) == [], "the interrupted step is still running there"

    assert text_of(nb.cells[3], "stdout") == "still usable\n", nb.cells[3].outputs
    assert text_of(nb.cells[4], "stdout") == "after the drop\n", nb.cells[4].outputs
    if where.server is not None:  # reconnected, with a note naming the host
        note = text_of(nb.cells[4], "stderr")
        assert "Reconnected: box: the SSH connection" in note and "reconnected" in note, note
        assert 'run(["echo", "after the drop"])' in note, note  # the cell's line, not ours
        assert "ssh.py" not in note, note
    else:
        assert not text_of(nb.cells[4], "stderr"), nb.cells[4].outputs

    shown = outputs_of(nb.cells[5], "execute_result")
    assert shown, nb.cells[5].outputs
    page = shown[0].data["text/html"]
    assert page.index("finding:") < page.index("<pre>") and "bad.pt" in page
    assert shown[0].data["text/plain"].startswith("<CheckpointScan")


def text_of(c: Any, stream: str) -> str:
    return "".join(o.text for o in outputs_of(c, "stream") if o.name == stream)


@pytest.mark.timeout(120)
def test_a_function_of_a_cell_is_called_there(tmp_path: Path) -> None:
    """``t.call`` of a function defined in a cell (``__main__`` with no file): it travels as
    its source, which the kernel keeps for its cells; its output streams into the cell."""
    cells = [
        cell(SETUP.format(root=str(ROOT), target="remotekit.local_target()")),
        cell("""
            def square(x):
                print("squaring", x)
                return x * x
            """),
        cell("""
            print(t.call(square, 7, timeout=60, on_output=remotekit.echo))
            """),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=90, allow_errors=True)
    client.execute()
    assert outputs_of(nb.cells[2], "error") == [], nb.cells[2].outputs
    assert text_of(nb.cells[2], "stdout") == "squaring 7\n49\n", nb.cells[2].outputs
