"""An interactive program inside a target, with a terminal end to end (``Target.shell``).

The chain is the target's own, each hop in its interactive form (:meth:`Hop.interactive`)::

    ssh (a pty, our window size) -> each hop, in order: [sudo | pct exec | lxc-attach |
    podman exec -it | srun --pty | kubectl exec -it] ... -> python -c SHELL_LOADER

so the terminal is at the innermost level (each hop gives the next one a terminal).

Only a constant crosses the shells. :data:`SHELL_LOADER` puts its terminal in raw mode and
says :data:`READY`; then we send, as ``<length>:<base64>`` blobs, the second stage
(``remote/shell.py``) and the request (argv, env, PATH additions, workdir). The second stage
restores the terminal and execs the program, whose exit status comes back as ours.

The handshake. READY proves only that the loader's own terminal is raw. A hop's client
(``podman exec -t``, seen under load) may pass READY on before it takes ITS terminal (over
SSH: sshd's pty there, which we cannot inspect) out of echo and line mode; blobs sent then are
echoed onto the screen (env values shown) and, having no newline, wait in the line buffer (a
line holds 4095 bytes), so the loader may wait for ever. So after READY we probe: ``^U`` and a
letter (``a`` to ``t`` in turn), every :data:`PROBE_S`. The loader answers each byte it reads
with ``~`` and the byte upper-cased (``~A``: no echo and no hop's words look like that), until
it reads ``.``. A terminal in line mode holds a probe in its line buffer, where the next ``^U``
(VKILL) erases it: it never reaches the loader, and the line never grows. A terminal that
echoes sends the probe's letter back before the loader's answer can pass through it (the echo
is written when the byte arrives, the answer after it was read). So the first answer to a
probe whose letter did not come back since it was sent proves the whole chain raw and silent;
only then do ``.`` and the blobs go. What comes between READY and the loader's ``~.`` (echo,
answers to probes still under way) is ours and dropped; output before READY (a login
script's) is shown. With no such answer within the start timeout the program there is stopped,
and the error says that a terminal on the way stayed in line mode, and what to do: never a hang.

While attached, our terminal is in raw mode (so Ctrl-C is a byte for the program there, not
a signal for us) and is always restored; a window size change (SIGWINCH) is passed on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import signal
import termios
import threading
import time
import tty
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from types import FrameType
from typing import Any

from remotekit import shipping
from remotekit.layers import Hop, Launch
from remotekit.transports.base import Terminal

__all__ = [
    "READY",
    "SHELL_LOADER",
    "NotStarted",
    "attach",
    "interactive",
    "request",
    "session",
]

#: What the loader says on stdout once its terminal no longer echoes (no newline: nothing
#: of it reaches the screen).
READY = b"REMOTEKIT-SHELL-READY"

#: The only code that crosses a shell: raw mode, READY, each byte read answered (``~`` and the
#: byte upper-cased) until ``.``, then run the second stage it is sent (see the module doc).
SHELL_LOADER = (
    """\
import os,base64,termios as T
saved=None
if os.isatty(0):
 saved=T.tcgetattr(0);r=T.tcgetattr(0);r[0]&=~(T.ICRNL|T.INLCR|T.IGNCR|T.IXON|T.ISTRIP)
 r[3]&=~(T.ECHO|T.ICANON|T.ISIG|T.IEXTEN);r[6][T.VMIN]=1;r[6][T.VTIME]=0
 T.tcsetattr(0,T.TCSAFLUSH,r)
def blob():
 n=b''
 while n[-1:]!=b':':
  c=os.read(0,1)
  if not c:raise SystemExit(1)
  n+=c
 n=int(n[:-1]);b=b''
 while len(b)<n:
  c=os.read(0,n-len(b))
  if not c:raise SystemExit(1)
  b+=c
 return base64.b64decode(b)
os.write(1,b'"""
    + READY.decode()
    + """')
c=b''
while c!=b'.':
 c=os.read(0,1);os.write(1,b'~'+c.upper())
 if not c:raise SystemExit(1)
exec(blob())"""
)

_CHUNK = 1 << 16
#: A probe (:func:`handshake`) this often until the loader answers one unechoed.
PROBE_S = 0.1
#: The probes' letters, in turn; the loader answers each as ``~`` and the letter upper-cased.
#: An answer tells its probe from the one before with its letter if it comes back within a
#: round of them (2 s at PROBE_S).
_PROBES = b"abcdefghijklmnopqrst"
_TILDE = ord("~")
#: Output kept from before READY (shown, or quoted in the error when READY never comes).
_KEEP = 1 << 16
#: How long output may still come after the program exited (a pty drains in milliseconds).
_DRAIN_S = 0.3
_EOF_AGAIN_S = 1.0  # input that ended: ^D again this often until the program there ends


def interactive(hops: Sequence[Hop], launch: Launch) -> Launch:
    """``launch`` (the target's) with the shell loader inside each hop's interactive form."""
    python = launch.interpreter or "python3"
    inner = replace(launch, argv=(python, "-c", SHELL_LOADER), hops=(python,))
    for hop in reversed(hops):
        inner = hop.interactive(inner)
    return inner


def _blob(data: bytes) -> bytes:
    encoded = base64.b64encode(data)
    return b"%d:%s" % (len(encoded), encoded)


def request(
    launch: Launch,
    argv: Sequence[str] | None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> bytes:
    """What the loader reads after READY: the second stage, then the request (two blobs)."""
    term = os.environ.get("TERM") or "xterm-256color"
    body = {
        "argv": list(argv) if argv else None,
        "env": {"TERM": term, **launch.env, **(env or {})},
        "path_prepend": list(launch.path_prepend),
        "cwd": cwd or launch.cwd,
    }
    return _blob(shipping.source("shell.py")) + _blob(json.dumps(body).encode())


def window_size(*fds: int) -> tuple[int, int]:
    """(columns, rows) of the first of ``fds`` that is a terminal; 80x24 when none is."""
    for fd in fds:
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            if size.columns and size.lines:
                return size.columns, size.lines
    return 80, 24


def handshake(term: Terminal, blobs: bytes, timeout: float) -> bytes:
    """Wait for READY, probe until the whole chain is raw, send ``blobs`` (the module doc says
    how); the output to show: what came before READY, and what came after the loader's ``~.``.

    Raises :class:`NotStarted` when the program there ends, or ``timeout`` s pass, first.
    """
    end = time.monotonic() + timeout
    seen = b""
    while data := _next(term, end):
        seen = (seen + data)[-_KEEP:]  # a login script's noise before READY: the tail only
        if READY in seen:
            break
    else:
        raise NotStarted(seen, term.wait(1.0))
    shown, _, rest = seen.partition(READY)
    probes = _Probes(term)
    after = probes.answered(rest)
    while after is None:
        probes.send()
        data = _next(term, min(end, probes.due))
        if data == b"" or (data is None and time.monotonic() >= end):
            raise NotStarted(shown, term.wait(1.0), ready=data is None)
        after = probes.answered(data or b"")
    term.write(b"." + blobs)
    # the answers to probes still under way, then the loader's "~.": ours, not shown
    drain = time.monotonic() + timeout
    while (at := after.find(b"~.")) < 0:
        data = _next(term, drain)
        if not data:
            return shown
        after = after[-1:] + data
    return shown + after[at + 2 :]


def _next(term: Terminal, until: float) -> bytes | None:
    """``term``'s next output; ``b""`` once it ended (or the program there did); None when
    nothing came by ``until``."""
    while (left := until - time.monotonic()) > 0:
        if select.select([term], [], [], min(left, 0.2))[0]:
            return term.read()
        if term.poll() is not None:
            return b""
    return None


class _Probes:
    """The probes sent after READY, and which of them came back as echo (module doc)."""

    def __init__(self, term: Terminal):
        self.term = term
        self.sent = 0
        self.due = time.monotonic()  #: when the next probe goes
        self.echoed: dict[int, bool] = {}  # a letter under way: whether its echo was seen
        self.tilde = False  # the last byte read was "~": an answer's letter may follow

    def send(self) -> None:
        """The next probe, if it is due."""
        if time.monotonic() < self.due:
            return
        letter = _PROBES[self.sent % len(_PROBES)]
        self.echoed[letter] = False
        self.term.write(b"\x15" + bytes([letter]))
        self.sent += 1
        self.due = time.monotonic() + PROBE_S

    def answered(self, data: bytes) -> bytes | None:
        """Reads ``data``: what follows the first answer to an unechoed probe, or None."""
        for i, byte in enumerate(data):
            letter = byte | 0x20  # an answer's letter is upper case; done with it either way
            if self.tilde and letter != byte and self.echoed.pop(letter, True) is False:
                return data[i + 1 :]
            self.tilde = byte == _TILDE
            if byte in self.echoed:
                self.echoed[byte] = True
        return None


class NotStarted(Exception):
    """The program there never said READY (a hop could not be entered, no interpreter...), or
    (``ready``) said it but its answer to a probe never came through: a terminal on the way
    stayed in line mode."""

    def __init__(self, output: bytes, code: int | None, ready: bool = False):
        super().__init__("the shell did not start")
        self.output = output  #: what came instead of READY (the hops' words)
        self.code = code  #: its exit status; None while it still runs (a start timeout)
        self.ready = ready  #: READY came, then no answer to a probe (a start timeout)


def session(
    term: Terminal, blobs: bytes, stdin_fd: int, stdout_fd: int, start_timeout: float
) -> int | None:
    """The whole session on ``term``: handshake, then :func:`attach` until the program there
    ends; its exit status (None: unknown, the connection dropped). ``term`` is closed after.

    Raises :class:`NotStarted` when the handshake does not end within ``start_timeout`` s.
    """
    try:
        _write_all(stdout_fd, handshake(term, blobs, start_timeout))
        attach(term, stdin_fd, stdout_fd)
        return term.wait(5.0)
    finally:
        term.close()


class _Winch:
    """SIGWINCH -> a byte on a pipe that the attach loop selects on (main thread only)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        self.old: Any = None
        self.on = threading.current_thread() is threading.main_thread()
        if self.on:
            self.old = signal.signal(signal.SIGWINCH, self._signal)

    def _signal(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            os.write(self.w, b"w")

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            os.read(self.r, 512)

    def close(self) -> None:
        if self.on:
            signal.signal(signal.SIGWINCH, self.old)
        os.close(self.r)
        os.close(self.w)


@contextlib.contextmanager
def _exit_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed window, ``kill``) raise SystemExit while attached, so the
    ``finally`` that restores our terminal runs (Python's default ends at once: left raw, no
    echo). Main thread only (signal handlers can be set nowhere else); the old ones come back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, _exit) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def attach(term: Terminal, stdin_fd: int, stdout_fd: int) -> None:
    """Relay bytes between our terminal and ``term`` until the program there ends.

    ``stdin_fd`` is put in raw mode (when it is a terminal) and restored on the way out,
    whatever happens; its window size follows to ``term``.
    """
    saved = termios.tcgetattr(stdin_fd) if os.isatty(stdin_fd) else None
    winch = _Winch()
    try:
        with _exit_on_signals():
            if saved is not None:
                tty.setraw(stdin_fd, termios.TCSANOW)
            size = window_size(stdout_fd, stdin_fd)
            term.resize(*size)  # it may have changed since the terminal was opened
            _relay(term, stdin_fd, stdout_fd, winch, size)
    finally:
        winch.close()
        if saved is not None:
            with contextlib.suppress(termios.error):  # hung up (the window closed): none left
                termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)


def _relay(
    term: Terminal, stdin_fd: int, stdout_fd: int, winch: _Winch, size: tuple[int, int]
) -> None:
    inputs: list[Any] = [term, stdin_fd, winch.r]
    ended: float | None = None  # when the program there exited
    eof: float | None = None  # when our input ended (not a terminal) and ^D was last sent
    while True:
        readable, _, _ = select.select(inputs, [], [], 0.1)
        if term in readable:
            data = term.read()
            if not data:
                return
            _write_all(stdout_fd, data)
        elif ended is None:
            if term.poll() is not None:
                ended = time.monotonic()
        elif time.monotonic() - ended > _DRAIN_S:
            return  # something there still holds the terminal open: the program is done
        if stdin_fd in readable:
            data = os.read(stdin_fd, _CHUNK)
            if data:
                term.write(data)
            else:  # our input ended (not a terminal): EOF for a cooked terminal there
                inputs.remove(stdin_fd)
                term.write(b"\x04")
                eof = time.monotonic()
        elif eof is not None and ended is None and time.monotonic() - eof >= _EOF_AGAIN_S:
            # A ^D that came while the program there was not reading, in cooked mode (bash
            # in its rc files), is an EOF its later raw read never sees: say it again. That
            # lost EOF is a NUL byte to the raw read, and a line editor that keeps it
            # (busybox ash shows "?") takes later ^Ds as "delete a character": so ^U first,
            # killing the line (our input's last partial line went with the first ^D).
            term.write(b"\x15\x04")
            eof = time.monotonic()
        if winch.r in readable:
            winch.drain()
            now = window_size(stdout_fd, stdin_fd)
            if now != size:
                size = now
                term.resize(*size)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])
