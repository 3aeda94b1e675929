"""A far side gone wrong, for the tests of the caller's frame reader (tests/engine/test_agent.py) and
of a step's control lines (tests/engine/test_hostile_steps.py): run as the target's Python, instead
of the loader that would start remotekit's agent or runner (``python agent.py MODE``).

Every mode but ``flood-stdout`` and ``flood-stderr`` plays the resident agent
(remote/agent.py) as far as its first step: it reads what the caller ships first (the boot's
and the agent's source, each behind its length), says hello (an ``A`` frame with its pid, as
the real one), waits for the first step's start (``S``), and then breaks the frame protocol
as MODE says:

    garbage     bytes that are no frame (an OSC 52 sequence: escaped where it is quoted)
    huge        a frame header claiming 4 GiB of payload, then a stream of bytes behind it
    flood       the step's output far past the flow-control window, never waiting for credit
    unknown     a frame of a kind the protocol does not have
    number      an exit frame whose status is no number
    stranger    output for a step the caller never started

and then waits for its channel to close (EOF on stdin; a write to it failing), as the agent
does. ``flood-stdout`` and ``flood-stderr`` play a runner (or an agent before its hello):
128 MiB on that stream with no newline, then exit 3.

Standard library only; run with ``-S``.
"""

import json
import os
import struct
import sys
from typing import BinaryIO

FRAME = struct.Struct("!cII")
MIB = 1 << 20


def out(data: bytes, fd: int = 1) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def frame(kind: bytes, sid: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(kind, sid, len(payload)) + payload


def first_step(stdin: BinaryIO) -> int:
    """Read the shipped sources, say hello, and return the first step's id."""
    for _ in range(2):  # the boot's source, then the agent's, each behind its length
        stdin.read(int(stdin.readline()))
    hello = json.dumps({"pid": os.getpid(), "python": list(sys.version_info[:3])}).encode()
    out(frame(b"A", 0, hello))
    while True:  # the runner's frame (R), maybe a nudge (N), then the step's start (S)
        kind, sid, n = FRAME.unpack(stdin.read(FRAME.size))
        stdin.read(n)
        if kind == b"S":
            return int(sid)


def misbehave(mode: str, sid: int) -> None:
    if mode == "garbage":
        out(b"\x1b]52;c;cHduZWQ=\x07 this is no frame\n")
    elif mode == "huge":
        out(FRAME.pack(b"O", sid, 0xFFFFFFFF))
        for _ in range(512):
            out(b"x" * MIB)
    elif mode == "flood":
        piece = frame(b"O", sid, b"x" * (1 << 16))
        for _ in range(512 * 16):  # 512 MiB, unasked for
            out(piece)
    elif mode == "unknown":
        out(frame(b"Z", sid, b"hi"))
    elif mode == "number":
        out(frame(b"X", sid, b"zero"))
    elif mode == "stranger":
        out(frame(b"O", sid + 1000, b"not yours\n"))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def main() -> None:
    mode = sys.argv[1]
    stdin = sys.stdin.buffer
    if mode.startswith("flood-"):
        fd = 1 if mode == "flood-stdout" else 2
        for _ in range(128):
            out(b"x" * MIB, fd)
        raise SystemExit(3)
    try:
        misbehave(mode, first_step(stdin))
        while stdin.read1(1 << 16):  # the agent dies with its channel
            pass
    except OSError:  # the channel is gone (EPIPE)
        pass


if __name__ == "__main__":
    main()
