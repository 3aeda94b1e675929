"""A process its callers write themselves (``stdin=None``) and whose events go to a sink: the
resident agent's channel (remotekit/agent.py), here and through the real sshd."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remotekit.transports.base import Event, Exit, Lost, Output, Transport, Written
from remotekit.transports.local import LocalTransport
from tests.conftest import write_inventory
from tests.harness import SSHServer

#: The far side: reads nothing until ``go`` exists, then copies stdin to stdout.
COPY = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
    "while True:\n"
    "    data = os.read(0, 1 << 16)\n"
    "    if not data: break\n"
    "    os.write(1, data)\n"
)
#: More than a pipe (64 KiB) or an SSH window (2 MiB) holds: most of it waits for the far side.
PIECES = [bytes([n]) * (100 << 10) for n in range(40)]


@pytest.fixture(params=["local", "ssh"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Transport]:
    if request.param == "local":
        yield LocalTransport()
        return
    sshd: SSHServer = request.getfixturevalue("own_sshd")
    inv = write_inventory(tmp_path / "hosts.yaml", {"h": sshd.host_yaml()})
    with inv.target("h", agent=False) as t:
        yield t.transport


class Taken:
    """A sink: the events, in the order they came, and who delivered them."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.threads: set[str] = set()
        self.ended = threading.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.threads.add(threading.current_thread().name)
        if isinstance(event, (Exit, Lost)):
            self.ended.set()

    def stdout(self) -> bytes:
        return b"".join(e.data for e in self.events if isinstance(e, Output))


def started(transport: Transport, go: Path, sink: Callable[[Event], None]) -> Written:
    return transport.start([sys.executable, "-c", COPY, str(go)], None, sink=sink)


def test_writes_never_wait_for_the_far_side_and_arrive_whole_in_order(
    transport: Transport, tmp_path: Path
) -> None:
    """Every write returns while the far side reads nothing (what the channel cannot take
    at once goes from the writer's own thread), from two threads at once; each arrives
    whole, in its thread's order; EOF comes behind them all; the sink gets every event,
    the exit last, and nothing goes on the queue."""
    go, taken = tmp_path / "go", Taken()
    proc = started(transport, go, taken)
    half = len(PIECES) // 2

    def write(pieces: list[bytes]) -> None:
        for piece in pieces:
            proc.write(piece)

    other = threading.Thread(target=write, args=(PIECES[half:],))
    other.start()
    write(PIECES[:half])
    other.join(30)
    assert not other.is_alive(), "a write waited for the far side"
    assert not go.exists() and taken.events == []  # the far side has read nothing yet
    go.touch()
    proc.close_stdin()
    assert taken.ended.wait(60), taken.events[-1:]
    assert isinstance(taken.events[-1], Exit) and taken.events[-1].code == 0, taken.events[-1]
    assert proc.events.empty()
    out = taken.stdout()
    assert len(out) == sum(map(len, PIECES))
    runs = [out[at : at + len(PIECES[0])] for at in range(0, len(out), len(PIECES[0]))]
    assert sorted(runs) == PIECES, "a write was cut or interleaved with another"
    order = [run[0] for run in runs]
    assert [n for n in order if n < half] == list(range(half))
    assert [n for n in order if n >= half] == list(range(half, len(PIECES)))


def test_a_write_cut_part_way_closes_the_stream(
    transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that an exception (a Ctrl-C) cuts part-way leaves a stream whose rest cannot
    be read as it was meant: it is closed (here its stdin; over SSH its channel), and
    later writes go nowhere."""
    go, taken = tmp_path / "go", Taken()
    go.touch()
    proc = started(transport, go, taken)
    proc.write(b"before\n")
    writer = proc._writer  # type: ignore[attr-defined]
    real = writer._now

    def cut(view: memoryview) -> int:
        real(view[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_now", cut)
    with pytest.raises(KeyboardInterrupt):
        proc.write(b"cut here\n")
    proc.write(b"after\n")
    assert taken.ended.wait(30), "the stream was not closed"
    out = taken.stdout()
    assert b"here" not in out and b"after" not in out, out
