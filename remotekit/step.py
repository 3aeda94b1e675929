"""The step engine: how one step runs on a :class:`~remotekit.target.Target`.

:class:`StepRun` runs one step in named phases: **payload** (the runner and the step's header
and bytes, as one stdin stream), **start** (the transport starts the launch argv), **pump**
(events -> output lines until exit, timeout, cancel or a lost connection), **stop** (EOF to
the runner, which stops the step's tree there; then close), **result** (a Result, or the error
that says what went wrong and where). :class:`OutputStream` splits each stream into lines and
recognises the runner's control lines. The hop helpers open hops that need a lookup (a Slurm
job by name) and explain a runner that never started, asking each hop in turn.

:mod:`remotekit.target` is the public facade; this module is its engine room and reads the
target's state (its spec, launch, transport, lock and the set of running processes).
"""

from __future__ import annotations

import itertools
import json
import queue
import secrets
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any, Callable

from remotekit import remote
from remotekit.errors import (
    ConnectionLost,
    InterpreterNotFound,
    RemotekitError,
    StepCancelled,
    StepFailed,
    StepTimeout,
    quote_tool,
)
from remotekit.layers import Launch, compose
from remotekit.result import Detached, Result
from remotekit.transports.base import Cancelled, ExecutableMissing, Exit, Lost, Output, Process

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "MAX_LINE",
    "MAX_TIMEOUT_S",
    "REMOTE_BACKSTOP_S",
    "OutputCallback",
    "OutputStream",
    "StepRun",
    "checked_timeout",
    "echo",
    "file_chunks",
    "inside",
    "open_hops",
    "probe",
    "slices",
]

#: ``on_output(stream, line)``: stream is ``"stdout"`` or ``"stderr"``, line has no newline.
OutputCallback = Callable[[str, str], None]


def echo(stream: str, line: str) -> None:
    """An ``on_output`` that prints each line as it comes to this process's stdout or
    stderr, by the stream it came on: live output in a terminal, and in Jupyter into the
    running cell, stdout and stderr apart (``t.run(argv, on_output=remotekit.echo)``)."""
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(line + "\n")
    out.flush()


#: A line longer than this is passed on in pieces, so one endless line cannot exhaust memory.
MAX_LINE = 1 << 20
#: Extra seconds the runner waits past the step's timeout before it stops the step itself.
REMOTE_BACKSTOP_S = 5.0
#: The longest per-call timeout (as for ``timeouts.step`` in hosts.yaml): every wait takes it as is.
MAX_TIMEOUT_S = 30 * 86400.0
#: Bytes of payload handed to a transport in one piece.
PAYLOAD_CHUNK = 1 << 20


class OutputStream:
    """Splits one output stream into lines: to the callback, into a bounded capture."""

    def __init__(
        self,
        name: str,
        on_output: OutputCallback | None,
        capture: bool,
        limit: int,
        nonce: str | None = None,
    ):
        self.name = name
        self.on_output = on_output
        self.capture = capture
        self.limit = limit
        self.nonce = nonce
        self.buf = bytearray()
        self.kept: deque[str] = deque()
        self.kept_bytes = 0
        self.dropped = 0
        self.controls: list[tuple[str, Any]] = []
        self.lines_seen = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                if len(self.buf) >= MAX_LINE:
                    chunk = bytes(self.buf[:MAX_LINE])
                    del self.buf[:MAX_LINE]
                    self._line(chunk, newline=False)
                    continue
                return
            chunk = bytes(self.buf[:nl])
            del self.buf[: nl + 1]
            self._line(chunk)

    def flush(self) -> None:
        if self.buf:
            chunk = bytes(self.buf)
            self.buf.clear()
            self._line(chunk, newline=False)

    def _line(self, raw: bytes, newline: bool = True) -> None:
        text = raw.decode("utf-8", "replace")
        record = self._control(text)
        if record is not None:
            before, word, data = record
            self.controls.append((word, data))
            if not before:
                return
            text, newline = before, False
        self.lines_seen += 1
        if self.on_output is not None:
            self.on_output(self.name, text)
        if self.capture:
            piece = text + ("\n" if newline else "")
            self.kept.append(piece)
            self.kept_bytes += len(piece)
            while self.kept_bytes > self.limit and len(self.kept) > 1:
                old = self.kept.popleft()
                self.kept_bytes -= len(old)
                self.dropped += len(old)

    def _control(self, text: str) -> tuple[str, str, Any] | None:
        """``(output before it, word, data)`` for a runner's control line, else None.

        The first control line (``ready``) carries our nonce and the runner's key; every
        later one must carry that key, which no step can know. Anything else that looks like
        one (a forged or malformed line) is ordinary output.
        """
        if self.nonce is None or self.nonce not in text:
            return None
        before, _, rest = text.partition(self.nonce)
        word, _, raw = rest.strip().partition(" ")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        if not self.controls:
            if word != "ready" or not isinstance(data, dict) or not data.get("key"):
                return None
            self.nonce = str(data["key"])
        elif word == "ready" or (word == "exit" and self.has("exit")):
            return None  # one ready, one final record: a second is not the runner's
        return before, word, data

    def control(self, word: str) -> Any:
        return next((d for w, d in self.controls if w == word), None)

    def has(self, word: str) -> bool:
        return any(w == word for w, _ in self.controls)

    @property
    def text(self) -> str:
        return "".join(self.kept)


def checked_timeout(timeout: float, host: str, step: str) -> float:
    """A per-call timeout, refused before anything runs unless finite, > 0 and bounded."""
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not ok or not 0 < timeout <= MAX_TIMEOUT_S:  # NaN fails both comparisons
        raise RemotekitError(
            f"timeout must be seconds > 0 and <= {MAX_TIMEOUT_S:.0f}, got {timeout!r}",
            host=host,
            step=step,
        )
    return float(timeout)


# -- one step, in phases ---------------------------------------------------------------------


class StepRun:
    """One step on ``target``: :meth:`run` goes payload -> start -> pump -> (stop) -> result.

    ``header`` is the runner's op (``exec``/``put``/``get`` and its fields); ``payload`` the
    bytes that follow it on stdin. ``stdout_sink`` takes the raw stdout after the runner's
    marker line (``get``); ``info`` receives the runner's ``file`` record (``get``).
    """

    def __init__(
        self,
        target: Target,
        header: dict[str, Any],
        payload: Iterable[bytes],
        *,
        display: tuple[str, ...],
        step: str,
        timeout: float | None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool,
        on_output: OutputCallback | None = None,
        capture: bool = True,
        stdout_sink: Callable[[bytes], Any] | None = None,
        info: dict[str, Any] | None = None,
    ):
        target._remember_secrets(env)  # before anything can fail: errors are masked
        self.target = target
        self.header, self.body = header, payload
        self.display, self.step, self.check = display, step, check
        self.env, self.cwd, self.info = env, cwd, info
        self.stdout_sink = stdout_sink
        self.limit = (
            target.spec.timeouts.step
            if timeout is None
            else checked_timeout(timeout, target.name, step)
        )
        self.nonce = "remotekit-" + secrets.token_hex(8)
        limit = target.capture_limit
        self.out = OutputStream("stdout", on_output, capture and stdout_sink is None, limit)
        self.err = OutputStream("stderr", on_output, capture, limit, nonce=self.nonce)
        # ``get`` streams file bytes on stdout after a line holding the nonce; whatever a
        # login shell printed before it is output, not data.
        self.sink_on = False
        self.started = time.monotonic()
        self.lost_reason = ""

    def run(self) -> Result:
        target = self.target
        launch = target._launch(self.step)
        stdin = self.payload(launch)
        self.started = time.monotonic()
        if target._cancelled.is_set():
            raise StepCancelled(self.result(None), started=False)
        if target.trace is not None:
            target.trace(self.step, target.step_chain(self.display))
        proc = self.start(launch, stdin)
        with target._tracked(proc):
            try:
                outcome, code = self.pump(proc)
            except BaseException:
                self.stop(proc)
                raise
        return self.finish(proc, outcome, code)

    # -- payload -----------------------------------------------------------------------------

    def payload(self, launch: Launch) -> Iterator[bytes]:
        """stdin: the runner, then the header (env, cwd, limits), then the step's bytes."""
        grace = self.target.spec.timeouts.kill_grace
        header = {
            **self.header,
            "nonce": self.nonce,
            "env": {**launch.env, **(self.env or {})},
            "path_prepend": list(launch.path_prepend),
            "cwd": self.cwd or launch.cwd,
            "timeout": None if self.limit is None else self.limit + grace + REMOTE_BACKSTOP_S,
            "grace": grace,
        }
        runner = remote.source("runner.py")
        head = json.dumps(header).encode()
        first = b"".join([f"{len(runner)}\n".encode(), runner, f"{len(head)}\n".encode(), head])
        return itertools.chain([first], self.body)

    # -- start -------------------------------------------------------------------------------

    def start(self, launch: Launch, stdin: Iterable[bytes]) -> Process:
        try:
            return self.target.transport.start(launch.argv, stdin, wait=self.limit)
        except ExecutableMissing as exc:
            raise missing(self.target, exc.path, self.step) from None
        except TimeoutError:
            assert self.limit is not None
            raise StepTimeout(self.result(None), self.limit, started=False) from None
        except RemotekitError as exc:
            exc.step = exc.step or self.step
            raise

    # -- pump --------------------------------------------------------------------------------

    def pump(self, proc: Process) -> tuple[str, int | None]:
        """Events to output until the step ends: ``(outcome, exit code)``."""
        deadline = None if self.limit is None else self.started + self.limit
        while True:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return "timeout", None
            try:
                event = proc.events.get(timeout=wait)
            except queue.Empty:
                continue
            if isinstance(event, Exit):
                return "exit", event.code
            if isinstance(event, Cancelled):
                return "cancelled", None
            if isinstance(event, Lost):
                self.lost_reason = event.reason
                return "lost", None
            self.handle(event)

    def handle(self, event: Output) -> None:
        data = event.data
        if event.stream == "stderr":
            self.err.feed(data)
        elif self.stdout_sink is None:
            self.out.feed(data)
        elif self.sink_on:
            if self.info is not None and not self.info:  # the size, for get's on_progress
                self.info.update(self.err.control("file") or {})
            self.stdout_sink(data)
        else:
            self.out.buf += data
            buf = self.out.buf
            marker = self.nonce.encode() + b"\n"
            at = buf.find(marker)
            if at >= 0:
                rest = bytes(buf[at + len(marker) :])
                del buf[at:]
                self.sink_on = True
                if rest:
                    self.stdout_sink(rest)

    # -- stop --------------------------------------------------------------------------------

    def stop(self, proc: Process) -> None:
        """Stop a step there: EOF makes the runner stop its tree; wait for that, then close."""
        proc.close_stdin()
        end = time.monotonic() + self.target.spec.timeouts.kill_grace + 2.0
        try:
            while (left := end - time.monotonic()) > 0:
                try:
                    event = proc.events.get(timeout=left)
                except queue.Empty:
                    break
                if isinstance(event, (Exit, Lost)):
                    break
                if isinstance(event, Output):
                    self.handle(event)
        finally:
            proc.terminate()

    # -- result ------------------------------------------------------------------------------

    def finish(self, proc: Process, outcome: str, code: int | None) -> Result:
        """The Result of a step that ended, or the error that says how it ended."""
        if outcome == "cancelled":
            self.stop(proc)
            raise StepCancelled(self.result(None), confirmed=self.err.has("exit"))
        if outcome == "timeout":
            self.stop(proc)
            assert self.limit is not None
            raise StepTimeout(self.result(None), self.limit, confirmed=self.err.has("exit"))
        if outcome == "lost":
            proc.terminate()
            raise ConnectionLost(
                f"connection lost while the step ran ({self.lost_reason}); the runner there "
                f"stops the step when it sees its stdin close",
                result=self.result(None),
                host=self.target.name,
                step=self.step,
            )
        if not self.err.has("ready"):
            raise not_started(self.target, code, self.result(code), self.step)
        trailer = self.err.control("exit")
        if isinstance(trailer, dict) and isinstance(trailer.get("code"), int):
            code = trailer["code"]
        if self.info is not None:
            self.info.update(self.err.control("file") or {})
        res = self.result(code)
        if self.check and code != 0:
            raise StepFailed(res, command=self.header.get("op") == "exec")
        return res

    def result(self, code: int | None) -> Result:
        out, err = self.out, self.err
        out.flush()
        err.flush()
        trailer = err.control("exit") or {}
        detached = trailer.get("detached")
        return Result(
            host=self.target.name,
            step=self.step,
            argv=self.display,
            exit_code=code,
            stdout=out.text,
            stderr=err.text,
            duration_s=time.monotonic() - self.started,
            stdout_dropped=out.dropped,
            stderr_dropped=err.dropped,
            chain=self.target.chain,
            stopped=tuple(map(str, trailer.get("stopped") or ())),
            still_running=tuple(map(str, trailer.get("running") or ())),
            detached=None if not isinstance(detached, dict) else Detached(**detached),
        )


# -- hops: looked up before the first step, asked when the runner did not start ---------------


def open_hops(target: Target, step: str) -> None:
    """Look up what a hop needs before the first step (a Slurm job by name -> its id)."""
    with target._open_lock:
        if target._opened:
            return
        hops = list(target.spec.hops)
        for i, hop in enumerate(hops):
            lookup = hop.lookup()
            if lookup is not None:
                code, text = probe(target, inside(target, i, lookup))
                try:
                    hops[i] = hop.resolved(code, text, target.name)
                except RemotekitError as exc:
                    exc.step = step
                    raise
        if target.spec.hop is not None:
            target.spec = replace(target.spec, hop=hops[-1])
            target.launch = compose(target.spec.layers())
        target._opened = True


def inside(target: Target, n: int, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the first ``n`` hops (e.g. a probe under sudo)."""
    return list(compose(reversed(target.spec.hops[:n]), Launch(argv=tuple(argv))).argv)


def missing(target: Target, path: str, step: str) -> RemotekitError:
    """The error for an executable the transport could not find: interpreter, hop tool, other."""
    if path == target.launch.interpreter:
        return InterpreterNotFound(
            f"interpreter {path} not found ({target.chain})",
            path=path,
            host=target.name,
            step=step,
        )
    for hop in target.spec.hops:
        if path == hop.executable:
            return hop.missing(target.name, step)
    return RemotekitError(f"{path!r} not found ({target.chain})", host=target.name, step=step)


def not_started(target: Target, code: int | None, res: Result, step: str) -> RemotekitError:
    """The runner never said ready: ask each hop, outermost first, if the words are its."""
    text = (res.stderr + res.stdout).strip()
    low = text.lower()
    quoted = quote_tool(text)
    where = dict(host=target.name, step=step)
    hops = target.spec.hops
    for i, hop in enumerate(hops):
        error = hop.explain(code, text, target.name, step)
        if error is not None and hop.confirm:
            status = probe(target, inside(target, i, hop.probe()))
            error = hop.explain(code, text, target.name, step, status=status)
        if error is not None:
            return error
    interp = target.launch.interpreter or "python"
    exec_failed = any(h.exec_failed(code, text) for h in hops)
    if exec_failed or code in (126, 127, 255) or "no such file" in low or "not found" in low:
        return InterpreterNotFound(
            f"interpreter {interp} not found there (exit {code}); check `venv:`/`python:` "
            f"in hosts.yaml ({target.spec.source}):\n{quoted}",
            path=interp,
            **where,
        )
    return RemotekitError(
        f"the remotekit runner did not start via {target.chain} (exit {code}); needs "
        f"Python >= 3.6 there:\n{quoted}",
        **where,
    )


def probe(target: Target, argv: list[str], timeout: float = 15.0) -> tuple[int | None, str]:
    """Run a bare command on the node (no runner: for checks before the runner can run)."""
    started = time.monotonic()
    cancelled = StepCancelled(
        Result(target.name, "ping", tuple(argv), None, "", "", 0.0, chain=target.chain)
    )
    if target._cancelled.is_set():
        raise cancelled
    try:
        proc = target.transport.start(argv, [])
    except ExecutableMissing as exc:
        return 127, f"{exc.path}: not found"
    chunks: list[bytes] = []
    try:
        with target._tracked(proc):
            proc.close_stdin()
            while (left := started + timeout - time.monotonic()) > 0:
                try:
                    event = proc.events.get(timeout=left)
                except queue.Empty:
                    break
                if isinstance(event, Cancelled):
                    raise cancelled
                if isinstance(event, Output):
                    chunks.append(event.data)
                else:
                    code = event.code if isinstance(event, Exit) else None
                    return code, b"".join(chunks).decode(errors="replace").strip()
            return None, f"no answer within {timeout:g} s"
    finally:
        proc.terminate()


# -- payload pieces --------------------------------------------------------------------------


def slices(data: bytes) -> Iterator[bytes]:
    """``data`` in bounded pieces (views, no copies): a transport never gets one huge write."""
    view = memoryview(data)
    for at in range(0, len(view), PAYLOAD_CHUNK):
        yield view[at : at + PAYLOAD_CHUNK]  # type: ignore[misc]


def file_chunks(
    fh: IO[bytes], size: int, on_progress: Callable[[int, int], None] | None = None
) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fh`` (what the runner reads; a file still growing is
    sent as it was when measured), each counted to ``on_progress(done, total)`` once handed
    on."""
    total, left = size, size
    if on_progress is not None:
        on_progress(0, total)
    while left > 0 and (chunk := fh.read(min(PAYLOAD_CHUNK, left))):
        left -= len(chunk)
        yield chunk
        if on_progress is not None:
            on_progress(total - left, total)
