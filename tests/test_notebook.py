"""remotekit in Jupyter, for real: cells executed by nbclient in a real ipykernel.

A step's output streams into the running cell (stdout and stderr apart); interrupting the
kernel mid-step (the notebook's stop button sends SIGINT) stops the step there, nothing
left running, and the Target opened in an earlier cell stays usable; a report as a cell's
last expression displays as HTML with its findings.
"""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CI

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


def wait_for(path: Path, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text().strip()


def test_a_notebook_streams_interrupts_and_displays(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    ckpt = tmp_path / "ck"
    cells = [
        cell(f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
            import torch, remotekit
            from remotekit.diagnostics import checkpoints
            t = remotekit.local_target()
            """),
        cell("""
            r = t.run(["sh", "-c", "echo out-1; echo err-1 >&2; sleep 0.2; echo out-2"],
                      on_output=remotekit.echo)
            """),
        cell(f"""
            t.run(["sh", "-c", "echo $$ > {pidfile}; exec sleep 300"])
            """),
        cell("""
            print(t.run(["echo", "still usable"]).stdout.strip())
            """),
        cell(f"""
            import os
            os.makedirs({str(ckpt)!r}, exist_ok=True)
            torch.save({{"w": torch.tensor([1.0, float("nan")])}}, {str(ckpt / "bad.pt")!r})
            checkpoints.scan_checkpoints(t, {str(ckpt)!r})
            """),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=240, allow_errors=True)
    interrupted = threading.Event()

    def stop_button() -> None:  # what the notebook's stop button does: SIGINT to the kernel
        wait_for(pidfile)
        pid = client.km.provisioner.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGINT)
        interrupted.set()

    with client.setup_kernel():
        for i, c in enumerate(nb.cells):
            if i == 2:
                threading.Thread(target=stop_button, daemon=True).start()
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
    sleeper = int(pidfile.read_text())
    end = time.monotonic() + 30
    while os.path.exists(f"/proc/{sleeper}") and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{sleeper}"), "the interrupted step is still running"

    assert "still usable" in "".join(o.text for o in outputs_of(nb.cells[3], "stream"))

    shown = outputs_of(nb.cells[4], "execute_result")
    assert shown, nb.cells[4].outputs
    page = shown[0].data["text/html"]
    assert page.index("finding:") < page.index("<pre>") and "bad.pt" in page
    assert shown[0].data["text/plain"].startswith("<CheckpointScan")
