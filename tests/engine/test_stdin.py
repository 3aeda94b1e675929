"""A step's stdin (``Target.run(..., stdin=)``, ``run_python``), as ``ssh host cmd`` passes its
own: streamed to the step as it reads, then EOF; on both engine paths (the resident agent and
one process per step), on this machine and through the real sshd (ssh -> fake pct exec ->
a real LXC container -> venv: the ``target`` fixture). The container runtimes' row of it is
in tests/engine/test_runtimes.py.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import random
import time
import uuid
from collections.abc import Iterator

import pytest

import remotekit
from tests.harness import wait_gone

#: What the step prints of what it read on stdin (until EOF): its length and its sha256.
DIGEST = (
    "import hashlib,sys; d=sys.stdin.buffer.read(); print(len(d), hashlib.sha256(d).hexdigest())"
)


@pytest.fixture(params=[None, False], ids=["agent", "per-step"])
def agent(request: pytest.FixtureRequest) -> bool | None:
    """Both engine paths: the resident agent (the default) and one process per step."""
    return request.param  # type: ignore[no-any-return]


def blob(n: int) -> bytes:
    """``n`` bytes of every value, no trailing newline (a seeded draw: the same each run)."""
    data = random.Random(n).randbytes(n)
    return data[:-1] + b"\x00"


def said(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def endless() -> Iterator[bytes]:
    """A stdin that never ends (a step that does not read it must still end)."""
    return itertools.repeat(b"y" * 65536)


def test_cat_passes_stdin_through_byte_exact(target: remotekit.Target) -> None:
    data = blob(3 * (1 << 20) + 7)  # > 1 MB, binary, no trailing newline
    r = target.run(["sh", "-c", 'cat | python -c "$0"', DIGEST], stdin=data)
    assert r.stdout == said(data)
    text = "hello\nno newline at the end"
    assert target.run(["cat"], stdin=text.encode()).stdout == text


def test_stdin_takes_a_binary_file_or_an_iterator(target: remotekit.Target) -> None:
    data = blob(1 << 20)
    assert target.run(["python", "-c", DIGEST], stdin=io.BytesIO(data)).stdout == said(data)
    pieces = (data[i : i + 1000] for i in range(0, len(data), 1000))
    assert target.run(["python", "-c", DIGEST], stdin=pieces).stdout == said(data)
    assert target.run(["python", "-c", DIGEST], stdin=b"").stdout == said(b"")


def test_eof_reaches_the_step_and_it_goes_on(target: remotekit.Target) -> None:
    r = target.run(["sh", "-c", "wc -c; echo after EOF; read x || echo EOF again"], stdin=b"abc")
    assert r.stdout.split() == ["3", "after", "EOF", "EOF", "again"]


def test_run_python_reads_stdin(target: remotekit.Target) -> None:
    script = remotekit.Script(
        b"import sys\nprint(repr(sys.stdin.read()))\nprint(repr(sys.stdin.buffer.read()))\n",
        name="reads.py",
    )
    assert target.run_python(script, stdin=b"hello\n").stdout == "'hello\\n'\nb''\n"


def test_run_python_at_each_level_reads_stdin(target: remotekit.Target) -> None:
    """`run_python_at` takes `stdin=` as `run_python` does, at every level of the chain
    (on the node, before any hop; where the target's interpreter runs)."""
    data = blob((1 << 20) + 3)
    script = remotekit.Script(DIGEST.encode(), name="digest.py")
    for level in range(len(target.spec.hops) + 1):
        r = target.run_python_at(level, script, stdin=data)
        assert r.stdout == said(data), level


def test_without_stdin_the_step_reads_dev_null(target: remotekit.Target) -> None:
    r = target.run(["python", "-c", "import os; print(os.path.realpath('/proc/self/fd/0'))"])
    assert r.stdout == "/dev/null\n"


def test_a_step_that_never_reads_stdin_ends_as_it_would(target: remotekit.Target) -> None:
    r = target.run(["sh", "-c", "exit 3"], stdin=endless(), check=False)
    assert r.exit_code == 3
    r = target.run(["sleep", "0.3"], stdin=endless())
    assert r.ok and r.stopped == ()
    # one that reads a little and closes it, then goes on
    r = target.run(["sh", "-c", "head -c 5; exec 0<&-; sleep 0.3; echo done"], stdin=endless())
    assert r.stdout == "yyyyydone\n"


def test_a_timeout_while_stdin_flows_stops_the_whole_tree(target: remotekit.Target) -> None:
    m = f"61{uuid.uuid4().int % 10**6:06d}.5"
    reader = "import sys,time\nwhile sys.stdin.buffer.read(4096): time.sleep(0.001)"
    argv = ["sh", "-c", f'sleep {m} & exec python -c "$0" {m}', reader]
    started = time.monotonic()
    with pytest.raises(remotekit.StepTimeout) as info:
        target.run(argv, stdin=endless(), timeout=1.5)
    assert info.value.timeout_s == 1.5
    assert time.monotonic() - started < 20  # it did end (the bound is generous: CI)
    assert wait_gone(m, 5) == []
    assert len(info.value.result.stopped) == 2, info.value.result.stopped


def test_an_error_reading_stdin_here_stops_the_step(target: remotekit.Target) -> None:
    m = f"63{uuid.uuid4().int % 10**6:06d}.5"

    def broken() -> Iterator[bytes]:
        yield b"some"
        time.sleep(0.5)
        raise OSError(5, "Input/output error")

    with pytest.raises(remotekit.RemotekitError, match="reading the step's stdin here failed"):
        target.run(["sh", "-c", f"cat >/dev/null; sleep {m}"], stdin=broken(), timeout=30)
    assert wait_gone(m, 5) == []


def test_bad_stdin_is_refused_before_anything_runs(local: remotekit.Target) -> None:
    with pytest.raises(TypeError, match="not str"):
        local.run(["cat"], stdin="text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a text file"):
        local.run(["cat"], stdin=io.StringIO("text"))
    with pytest.raises(TypeError, match="not int"):
        local.run(["cat"], stdin=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="detached"):
        local.run(["cat"], stdin=b"x", detach=True)
