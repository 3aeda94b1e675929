"""This machine as a transport: the argv runs as a subprocess, no shell involved."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterable, Sequence
from typing import IO, Literal

from remotekit.errors import RemotekitError
from remotekit.transports.base import (
    Channel,
    ExecutableMissing,
    Exit,
    Output,
    Sink,
    Writer,
    wait_for_room,
)

__all__ = ["LocalProcess", "LocalTerminal", "LocalTransport"]

_CHUNK = 1 << 16
#: How long to wait for output pipes after the process exited (a background child may hold them).
_DRAIN_S = 0.5


class LocalProcess(Channel):
    """A subprocess: a reader thread per output pipe turns its output into events (to
    ``sink``, or onto the queue); a feed thread writes ``stdin``, or (None) its callers do
    (:meth:`write`, through a :class:`~remotekit.transports.base.Writer`)."""

    def __init__(
        self, argv: Sequence[str], stdin: Iterable[bytes] | None, sink: Sink | None = None
    ):
        super().__init__(sink)
        self._last_output = time.monotonic()
        self._gone = False  # terminated, or exited: stop holding output back for a reader
        try:
            self._proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
            )
        except FileNotFoundError as exc:
            raise ExecutableMissing(argv[0]) from exc
        except PermissionError as exc:
            raise ExecutableMissing(argv[0]) from exc
        assert self._proc.stdin and self._proc.stdout and self._proc.stderr
        self._writer: Writer | None = None
        if stdin is None:
            os.set_blocking(self._proc.stdin.fileno(), False)  # ours: the child's end blocks
            self._writer = Writer(self._write_now, self._write_all, self._shut)
        self._readers = [
            threading.Thread(target=self._pump, args=(self._proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(self._proc.stderr, "stderr"), daemon=True),
        ]
        for t in self._readers:
            t.start()
        if stdin is not None:
            threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _pump(self, pipe: IO[bytes], stream: Literal["stdout", "stderr"]) -> None:
        fd = pipe.fileno()
        try:
            while data := os.read(fd, _CHUNK):
                self.emit(Output(stream, data))
                wait_for_room(self.events, lambda: self._gone)
                self._last_output = time.monotonic()
        except OSError:
            pass
        finally:
            pipe.close()  # ours alone: left to the collector it is a ResourceWarning

    def _feed(self, chunks: Iterable[bytes]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:  # an unbuffered pipe write may be partial (a signal came)
                    view = view[stdin.write(view) or 0 :]
        except (OSError, ValueError):
            pass  # the process is gone; its exit says why

    def write(self, data: bytes | memoryview) -> None:
        assert self._writer is not None, "a process started with stdin is written by its feed"
        self._writer.write(data)

    def _write_now(self, view: memoryview) -> int:
        """What of ``view`` the pipe takes without waiting; -1: the process is gone."""
        stdin, sent = self._proc.stdin, 0
        assert stdin is not None
        try:
            while sent < len(view):
                n = stdin.write(view[sent:])
                if n is None:  # full (non-blocking)
                    break
                sent += n
        except (OSError, ValueError):
            return -1
        return sent

    def _write_all(self, view: memoryview) -> bool:
        """All of ``view``, waiting for room; False: the process is gone."""
        stdin = self._proc.stdin
        assert stdin is not None
        while view:
            took = self._write_now(view)
            if took < 0:
                return False
            view = view[took:]
            if view:
                try:
                    select.select([], [stdin], [], 1.0)
                except (OSError, ValueError):
                    return False
        return True

    def _wait(self) -> None:
        code = self._proc.wait()
        self._gone = True
        self._drop_stdin()  # nobody reads it now (a feed still writing gets an error)
        # Read until both pipes close, or until they stay quiet for _DRAIN_S (a leftover
        # child of the step may hold them open).
        self._last_output = time.monotonic()
        while any(t.is_alive() for t in self._readers):
            for t in self._readers:
                t.join(0.05)
            if time.monotonic() - self._last_output > _DRAIN_S:
                break
        self.emit(Exit(128 - code if code < 0 else code))

    def close_stdin(self) -> None:
        if self._writer is not None:
            self._writer.close()  # what was written goes first (within a bound)
        self._shut()

    def _shut(self) -> None:
        try:
            if self._proc.stdin:
                self._proc.stdin.close()
        except OSError:
            pass

    def terminate(self) -> None:
        self._gone = True
        # TERM first: the runner's handler stops the step's tree before it exits.
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(3.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._drop_stdin()

    def _drop_stdin(self) -> None:
        """Close stdin without waiting for what is still to be written (nobody reads it)."""
        if self._writer is not None:
            self._writer.close(0)
        self._shut()


class LocalTransport:
    """Runs argvs on this machine. Nothing to connect; ``close`` is a no-op."""

    label = "local"
    reached = "this machine"

    def start(
        self,
        argv: Sequence[str],
        stdin: Iterable[bytes] | None,
        *,
        wait: float | None = None,
        sink: Sink | None = None,
    ) -> LocalProcess:
        return LocalProcess(argv, stdin, sink)

    def open_terminal(
        self, argv: Sequence[str], *, term: str, columns: int, rows: int
    ) -> LocalTerminal:
        return LocalTerminal(argv, term, columns, rows)

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass


class LocalTerminal:
    """``argv`` on a new pty here, as the leader of its own session (the pty its terminal)."""

    def __init__(self, argv: Sequence[str], term: str, columns: int, rows: int):
        self._master, slave = os.openpty()
        try:
            _set_size(slave, columns, rows)
            self._proc = subprocess.Popen(
                list(argv),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env={**os.environ, "TERM": term},
                start_new_session=True,
                preexec_fn=_controlling_terminal,
            )
        except BaseException as exc:
            os.close(self._master)
            if isinstance(exc, FileNotFoundError):
                raise ExecutableMissing(argv[0]) from exc
            if isinstance(exc, OSError):  # no x bit, not an executable format: not "not found"
                raise RemotekitError(f"cannot run {argv[0]} here: {exc.strerror or exc}") from exc
            raise
        finally:
            os.close(slave)  # ours: the master reads EOF (EIO) once the program's are closed

    def fileno(self) -> int:
        return self._master

    def read(self) -> bytes:
        try:
            return os.read(self._master, _CHUNK)
        except OSError:  # EIO: no process holds the pty any more
            return b""

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._master, view) :]

    def resize(self, columns: int, rows: int) -> None:
        _set_size(self._master, columns, rows)  # the kernel signals SIGWINCH to the program

    def poll(self) -> int | None:
        return _status(self._proc.poll())

    def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout)
        return self.poll()

    def close(self) -> None:
        if self._proc.poll() is None:  # HUP, as when a terminal window closes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGHUP)
        with contextlib.suppress(OSError):
            os.close(self._master)


def _controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # in the child, after setsid: stdin is its terminal


def _set_size(fd: int, columns: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _status(code: int | None) -> int | None:
    return None if code is None else 128 - code if code < 0 else code
