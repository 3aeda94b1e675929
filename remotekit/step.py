"""One step on a target's :class:`~remotekit.engine.Engine`, in named phases.

:class:`StepRequest` is one step as asked, built once by its caller: the runner's op, the bytes
behind it, how it runs and what it shows. :class:`StepRun` runs it: **header** (the step's op,
completed with the launch's env, cwd and limits; the engine ships it behind the runner, with
the step's bytes, as one stdin stream), **start** (:meth:`Engine.start_step
<remotekit.engine.Engine.start_step>`), **pump** (events -> output lines until exit, timeout,
cancel or a lost connection), **stop** (EOF to the runner, which stops the step's tree there;
then close), **result** (a Result, or the error that says what went wrong and where).
:class:`OutputStream` splits each stream into lines and recognises the runner's control lines.
:func:`run_step` is the way in (:func:`stream_file`: a file's bytes, on it). Its errors are
masked where they leave the target (:meth:`Engine.boundary <remotekit.engine.Engine.boundary>`).
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import secrets
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any, Callable, Union

from remotekit.engine import Engine
from remotekit.errors import (
    ConnectionLost,
    ProtocolViolation,
    RemotekitError,
    StepCancelled,
    StepFailed,
    StepTimeout,
)
from remotekit.layers import Launch
from remotekit.remote.runner import (
    EXIT,
    FILE,
    MISSING,
    PACKAGE,
    READY,
    STARTED,
    STDIN_PIECE,
    STDIN_WINDOW,
    TAKEN,
    VALUE,
    StepHeader,
)
from remotekit.result import Detached, Result, Script
from remotekit.shipping import Package, PackageScript, package
from remotekit.transports.base import (
    Cancelled,
    ExecutableMissing,
    Exit,
    Lost,
    Output,
    Process,
    next_event,
)

__all__ = [
    "MAX_LINE",
    "MAX_TIMEOUT_S",
    "REMOTE_BACKSTOP_S",
    "OutputCallback",
    "OutputStream",
    "Stdin",
    "StepHeader",
    "StepRequest",
    "StepRun",
    "StepStdin",
    "checked_timeout",
    "echo",
    "file_chunks",
    "run_step",
    "slices",
    "stdin_source",
    "stream_file",
]

#: ``on_output(stream, line)``: stream is ``"stdout"`` or ``"stderr"``, line has no newline.
OutputCallback = Callable[[str, str], None]
#: What a step's ``stdin=`` takes: bytes, a binary file object, or an iterable of bytes.
Stdin = Union[bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


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
#: Lines of the hops' words held before the runner is ready (each shorter than
#: MAX_HELD_LINE): past these, what is held is shown and nothing more is held.
MAX_HELD, MAX_HELD_LINE = 200, 4096
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
        #: Control words also handed to a function as they come (their data).
        self.hooks: dict[str, Callable[[Any], None]] = {}
        self.lines_seen = 0
        #: The runner's stream (it has a nonce): what comes before its ``ready`` is the hops'
        #: words (a shell's, pct's). Held, not shown: shown when the step starts, or quoted
        #: once by the error of a launch that never started (never both).
        self.held: list[str] | None = [] if nonce is not None else None

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
            hook = self.hooks.get(word)
            if hook is not None:
                hook(data)
            if word not in (TAKEN, VALUE):  # pieces (of stdin taken, of a value): not kept
                self.controls.append((word, data))
            if word == READY:
                self.release()
            if not before:
                return
            text, newline = before, False
        self.lines_seen += 1
        if self.held is not None and len(self.held) < MAX_HELD and len(text) < MAX_HELD_LINE:
            self.held.append(text)
        elif self.on_output is not None:
            self.release()
            self.on_output(self.name, text)
        if self.capture:
            piece = text + ("\n" if newline else "")
            self.kept.append(piece)
            self.kept_bytes += len(piece)
            while self.kept_bytes > self.limit and len(self.kept) > 1:
                old = self.kept.popleft()
                self.kept_bytes -= len(old)
                self.dropped += len(old)

    def release(self) -> None:
        """Show the lines held before the runner's ``ready`` (from then on, none is held)."""
        held, self.held = self.held or [], None
        if self.on_output is not None:
            for line in held:
                self.on_output(self.name, line)

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
            if word != READY or not isinstance(data, dict) or not data.get("key"):
                return None
            self.nonce = str(data["key"])
        elif word == READY or (word == EXIT and self.has(EXIT)):
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


@dataclass(frozen=True)
class StepRequest:
    """One step as asked: what the runner does there, the bytes that follow, and how the step
    runs and shows here. Built once by its caller (:class:`~remotekit.target.Target`, sync,
    ping), run by :func:`run_step`; :meth:`script` builds the one that runs a shipped script.

    ``header`` is the runner's op (:class:`StepHeader`) and ``payload`` the bytes behind it on
    stdin (iterated once, as the step starts). ``display`` is the command its Result and trace
    show, ``step`` its name in errors; ``timeout`` None means the host's ``timeouts.step``;
    ``env`` and ``cwd`` go on top of the launch's; ``check``: a non-zero exit raises
    :class:`StepFailed`. ``stdout_sink`` takes the raw stdout after the runner's marker line
    (``get``), or after the line ``marker`` when the step's script prints one (a pull's
    ``read``); ``info`` receives the runner's ``file`` record (``get``). ``at``: run it with
    ``python`` inside only the first ``at`` hops of the chain (:meth:`Engine.launch_at
    <remotekit.engine.Engine.launch_at>`), as a process of its own; None: the target's launch.
    ``stdin``: what the step reads on its stdin (pieces of bytes, :func:`stdin_source`: sent
    once the step started, as it takes them); None: /dev/null. ``shipped``: the package the
    script runs from, when not :func:`remotekit.shipping.package` (a call's bundle).
    ``on_value``: handed each ``value`` control record (a piece of what the step wrote on
    its value pipe, header ``value``), as it comes.
    """

    header: StepHeader
    display: tuple[str, ...]
    step: str
    payload: Iterable[bytes] = ()
    timeout: float | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    check: bool = True
    on_output: OutputCallback | None = None
    capture: bool = True
    stdout_sink: Callable[[bytes], Any] | None = None
    marker: str | None = None
    info: dict[str, Any] | None = None
    at: int | None = None
    python: str = "python3"
    stdin: Iterable[bytes] | None = None
    shipped: Package | None = None
    on_value: Callable[[Any], None] | None = None

    @property
    def package(self) -> Package:
        """The package the step's script runs from (sent when the runner lacks it)."""
        return self.shipped or package()

    @classmethod
    def script(
        cls,
        script: Script,
        args: Sequence[Any] = (),
        *,
        display: tuple[str, ...],
        step: str,
        files: Mapping[str, bytes] | None = None,
        detach: bool = False,
        report: bool = False,
        preload: Sequence[str] = (),
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = True,
        on_output: OutputCallback | None = None,
        capture: bool = True,
        at: int | None = None,
        python: str = "python3",
        stdin: Stdin | None = None,
        shipped: Package | None = None,
        value: int = 0,
        on_value: Callable[[Any], None] | None = None,
    ) -> StepRequest:
        """The step that runs ``script`` there with ``args``: the script and its files (and
        ``files``) travel as the runner's shipped files, in bounded pieces (views, no copies;
        a sequence, so a small payload goes out with the step's start)."""
        if files:
            script = replace(script, files={**script.files, **files})  # validates names, types
        # a package's script travels in it (named): only the files come; any other script too
        in_package = isinstance(script, PackageScript)
        all_files = {**({} if in_package else {script.name: script.source}), **script.files}
        header = StepHeader(
            argv=tuple(map(str, args)),
            script=script.name,
            files=tuple((name, len(data), 0o600) for name, data in all_files.items()),
            detach=detach,
            report=report,
            preload=tuple(map(str, preload)),
            package=script.package if isinstance(script, PackageScript) else None,
            value=value,
        )
        payload = tuple(piece for data in all_files.values() for piece in slices(data))
        return cls(
            header,
            display,
            step,
            payload,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
            at=at,
            python=python,
            stdin=stdin_source(stdin, detach),
            shipped=shipped,
            on_value=on_value,
        )


def stdin_source(stdin: Stdin | None, detach: bool = False) -> Iterable[bytes] | None:
    """A step's ``stdin=`` as pieces of bytes (None: none), refused before anything runs
    unless it is bytes, a binary file object (read as its data comes: ``read1``) or an
    iterable of bytes; a detached step has no caller to read it from."""
    if stdin is None:
        return None
    if detach:
        raise ValueError("stdin= cannot go to a detached run (it outlives the step): give none")
    if isinstance(stdin, (str, io.TextIOBase)):
        what = "str" if isinstance(stdin, str) else "a text file"
        raise TypeError(
            f"stdin must be bytes, a binary file or an iterable of bytes, not {what}: "
            "pass text.encode(), a file opened with 'rb', or sys.stdin.buffer"
        )
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return slices(stdin)  # type: ignore[arg-type]
    read = getattr(stdin, "read1", None) or getattr(stdin, "read", None)
    if callable(read):
        return iter(functools.partial(read, STDIN_PIECE), b"")
    if isinstance(stdin, Iterable):
        return stdin
    raise TypeError(
        f"stdin must be bytes, a binary file or an iterable of bytes, not {type(stdin).__name__}"
    )


class StepStdin:
    """The caller's stdin of one step, as the runner reads it behind the payload: pieces of
    at most STDIN_PIECE (``<length>\n<bytes>``), ``0\n`` at its end. Nothing is taken from
    ``source`` before the step started (:meth:`start`: a step that never ran, such as one
    sent again with its package, consumed none of it), and never more than STDIN_WINDOW is
    sent beyond what the runner said its step took (:meth:`took`): a large stdin is held in
    neither place, and the runner reads its own stdin all the time, so the stop (EOF) is
    seen at once. An error of ``source`` is kept (:attr:`error`) and wakes the step
    (``wake``), which stops there and says it."""

    def __init__(self, source: Iterable[bytes]):
        self.source = source
        self.error: BaseException | None = None
        self.wake: Callable[[], None] = lambda: None
        self._cond = threading.Condition()
        self._started = False
        self._done = False  # the step ended, or closed its stdin: nothing more is sent
        self._sent = 0  # sent, not yet taken there

    def pieces(self) -> Iterator[bytes]:
        with self._cond:
            self._cond.wait_for(lambda: self._started or self._done)
        try:
            for chunk in self.source:
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    raise TypeError(f"stdin gave {type(chunk).__name__}, not bytes")
                view = memoryview(chunk).cast("B")
                for at in range(0, len(view), STDIN_PIECE):
                    piece = view[at : at + STDIN_PIECE]
                    if not self._room(len(piece)):
                        return
                    yield b"%d\n" % len(piece) + piece.tobytes()
                if self._done:
                    return
        except Exception as exc:  # the caller's source: the step stops and says it
            self.error = exc
            self.wake()
            return
        yield b"0\n"

    def _room(self, n: int) -> bool:
        """Wait until ``n`` more bytes keep within the window: False once nothing is sent."""
        with self._cond:
            self._cond.wait_for(lambda: self._sent + n <= STDIN_WINDOW or self._done)
            self._sent += n
            return not self._done

    def start(self, _data: Any = None) -> None:
        """The runner said the step started: its stdin may flow."""
        with self._cond:
            self._started = True
            self._cond.notify_all()

    def took(self, data: Any) -> None:
        """The runner's ``stdin`` record: how much it took, and whether the step's stdin
        closed (then no more is sent). Far-side words: a bad one is ignored, and a count
        is held to what was sent."""
        if not isinstance(data, dict):
            return
        taken = data.get("taken")
        with self._cond:
            if isinstance(taken, int) and not isinstance(taken, bool) and taken > 0:
                self._sent = max(0, self._sent - taken)
            if data.get("closed") is True:
                self._done = True
            self._cond.notify_all()

    def close(self) -> None:
        """The step ended: nothing more is sent (a sender waiting for room returns)."""
        with self._cond:
            self._done = True
            self._cond.notify_all()


class PackageMissing(Exception):
    """The runner there has not the step's package and ran nothing (:meth:`StepRun.note_package`)."""


def run_step(engine: Engine, request: StepRequest) -> Result:
    """Run one step (:class:`StepRun`), once more with its package when the runner there had
    not got it. Its secrets are remembered before anything runs; every error it raises is
    masked where it leaves the target (:meth:`Engine.boundary
    <remotekit.engine.Engine.boundary>`: the Target's and a run's methods)."""
    try:
        return StepRun(engine, request).run()
    except PackageMissing:  # nothing ran: once more, with the package
        return StepRun(engine, request, with_package=True).run()


def stream_file(
    engine: Engine,
    remote_path: str,
    sink: Callable[[bytes], Any],
    *,
    timeout: float | None = None,
    step: str | None = None,
    max_bytes: int | None = None,
    info: dict[str, Any] | None = None,
    display: tuple[str, ...] | None = None,
) -> Result:
    """The step that hands the bytes of a regular file there to ``sink`` piece by piece (see
    :meth:`Target.stream_file <remotekit.target.Target.stream_file>`): ``get``, a run's
    whole log. ``max_bytes`` None: no limit."""
    name = step or f"get {remote_path}"
    got = [0]

    def counted(data: bytes) -> None:
        got[0] += len(data)
        if max_bytes is not None and got[0] > max_bytes:
            raise RemotekitError(
                f"{remote_path} sent more than max_bytes={max_bytes}; stopped",
                host=engine.name,
                step=name,
            )
        sink(data)

    request = StepRequest(
        StepHeader(op="get", src=remote_path, max_bytes=max_bytes),
        display=display or ("get", remote_path),
        step=name,
        timeout=timeout,
        stdout_sink=counted,
        info={} if info is None else info,
    )
    return run_step(engine, request)


class StepRun:
    """One step on ``engine``: :meth:`run` goes header -> start -> pump -> (stop) -> result.

    ``request`` is the step as asked (:class:`StepRequest`): the runner's op and the bytes
    behind it, and how it runs and shows here.
    """

    def __init__(self, engine: Engine, request: StepRequest, with_package: bool = False):
        engine.remember_secrets(request.env)  # before anything can fail: errors are masked
        self.engine = engine
        self.request = request
        self.step = step = request.step
        self.limit = (
            engine.spec.timeouts.step
            if request.timeout is None
            else checked_timeout(request.timeout, engine.name, step)
        )
        self.nonce = "remotekit-" + secrets.token_hex(8)
        limit, capture = engine.capture_limit, request.capture
        sink = request.stdout_sink
        self.out = OutputStream("stdout", request.on_output, capture and sink is None, limit)
        self.err = OutputStream("stderr", request.on_output, capture, limit, nonce=self.nonce)
        # ``get`` streams file bytes on stdout after a line holding the nonce; whatever a
        # login shell printed before it is output, not data.
        self.sink_on = False
        self.started = time.monotonic()
        self.lost = Lost("")
        # the target's, once the step starts, unless it runs elsewhere in the chain
        at = request.at
        self.launch = None if at is None else engine.launch_at(at, request.python, step)
        self.send_package = with_package  # whether the step's package goes behind its header
        source = request.stdin
        self.stdin = None if source is None else StepStdin(source)
        if self.stdin is not None:
            self.err.hooks = {STARTED: self.stdin.start, TAKEN: self.stdin.took}
        if request.on_value is not None:
            self.err.hooks[VALUE] = request.on_value

    def run(self) -> Result:
        engine = self.engine
        engine.dry(self.step, self.request.display, self.launch)
        launch = self.launch = self.launch or engine.launch_for(self.step)
        if self.request.header.package is not None and not self.send_package:
            self.send_package = engine.sends_package(launch)
        header = self.wire_header(launch)
        self.started = time.monotonic()
        if engine.cancelled:
            raise StepCancelled(self.result(None), started=False)
        if engine.trace is not None:
            engine.trace(self.step, engine.step_chain(self.request.display, launch))
        try:
            proc = self.start(launch, header)
            with engine.tracked(proc):
                try:
                    outcome, code = self.pump(proc)
                except BaseException:
                    self.stop(proc)
                    raise
            return self.finish(proc, outcome, code)
        finally:
            if self.stdin is not None:
                self.stdin.close()

    # -- header ------------------------------------------------------------------------------

    def wire_header(self, launch: Launch) -> bytes:
        """The header the runner reads: the step's op, with env, cwd and limits."""
        grace = self.engine.spec.timeouts.kill_grace
        header = replace(
            self.request.header,
            nonce=self.nonce,
            env={**launch.env, **(self.request.env or {})},
            path_prepend=tuple(launch.path_prepend),
            cwd=self.request.cwd or launch.cwd,
            timeout=None if self.limit is None else self.limit + grace + REMOTE_BACKSTOP_S,
            grace=grace,
            package_size=len(self.request.package.blob) if self.send_package else 0,
            stdin=self.stdin is not None,
        )
        return header.encode()

    # -- start -------------------------------------------------------------------------------

    def start(self, launch: Launch, header: bytes) -> Process:
        own = self.request.at is not None  # another place in the chain than the agent's
        body = self.request.payload
        if self.send_package:
            body = itertools.chain(slices(self.request.package.blob), body)
        if self.stdin is not None:
            body = itertools.chain(body, self.stdin.pieces())
        try:
            proc = self.engine.start_step(launch, header, body, wait=self.limit, agent=not own)
            if self.stdin is not None:
                self.stdin.wake = proc.cancel
            return proc
        except ExecutableMissing as exc:
            raise self.engine.missing(exc.path, self.step, launch) from None
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
            event = next_event(proc.events, deadline)
            if event is None:
                return "timeout", None
            if isinstance(event, Exit):
                return "exit", event.code
            if isinstance(event, Cancelled):
                return "cancelled", None
            if isinstance(event, Lost):
                self.lost = event
                return "lost", None
            self.handle(event)

    def handle(self, event: Output) -> None:
        data, sink, info = event.data, self.request.stdout_sink, self.request.info
        if event.stream == "stderr":
            self.err.feed(data)
        elif sink is None:
            self.out.feed(data)
        elif self.sink_on:
            if info is not None and not info:  # the size, for get's on_progress
                info.update(self.err.control(FILE) or {})
            sink(data)
        else:
            self.before_sink(data, sink)

    def before_sink(self, data: bytes, sink: Callable[[bytes], Any]) -> None:
        """Stdout before the line holding the nonce, after which come the bytes for ``sink``
        (``get``): output (what a login shell printed). The marker is looked for where it
        may be (from the end of what came before on); past MAX_LINE without it, what came is
        passed on as lines, in pieces, as any output: a far side that never sends it is
        held to a line's bound."""
        buf, marker = self.out.buf, (self.request.marker or self.nonce).encode() + b"\n"
        start = max(0, len(buf) - len(marker) + 1)
        buf += data
        at = buf.find(marker, start)
        if at >= 0:
            rest = bytes(buf[at + len(marker) :])
            del buf[at:]
            self.sink_on = True
            if rest:
                sink(rest)
        elif len(buf) > MAX_LINE:
            keep = bytes(buf[-(len(marker) - 1) :])  # where the marker may begin
            del buf[-(len(marker) - 1) :]
            self.out.feed(b"")  # the lines it holds, and pieces of MAX_LINE, out of it
            buf += keep

    # -- stop --------------------------------------------------------------------------------

    def stop(self, proc: Process) -> None:
        """Stop a step there: EOF makes the runner stop its tree; wait for that, then close."""
        proc.close_stdin()
        end = time.monotonic() + self.engine.spec.timeouts.kill_grace + 2.0
        try:
            while (event := next_event(proc.events, end)) is not None:
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
            error = self.stdin.error if self.stdin is not None else None
            if error is not None:  # reading the step's stdin here failed: it was stopped
                raise RemotekitError(
                    f"reading the step's stdin here failed ({type(error).__name__}: {error}); "
                    "the step was stopped there",
                    host=self.engine.name,
                    step=self.step,
                ) from error
            raise StepCancelled(self.result(None), confirmed=self.err.has(EXIT))
        if outcome == "timeout":
            self.stop(proc)
            assert self.limit is not None
            raise StepTimeout(self.result(None), self.limit, confirmed=self.err.has(EXIT))
        if outcome == "lost":
            proc.terminate()
            if self.lost.violation:
                raise ProtocolViolation(
                    f"{self.lost.reason}; the agent was closed, as for a dropped connection: the "
                    "runner there stops the step when it sees its stdin close",
                    result=self.result(None),
                    host=self.engine.name,
                    step=self.step,
                )
            raise ConnectionLost(
                f"connection lost while the step ran ({self.lost.reason}); the runner there "
                f"stops the step when it sees its stdin close",
                result=self.result(None),
                host=self.engine.name,
                step=self.step,
            )
        if not self.err.has(READY):
            raise self.engine.not_started(code, self.result(code), self.step, self.launch)
        if self.request.header.package is not None:
            self.note_package()
        trailer = self.err.control(EXIT)
        if isinstance(trailer, dict) and isinstance(trailer.get("code"), int):
            code = trailer["code"]
        if self.request.info is not None:
            self.request.info.update(self.err.control(FILE) or {})
        res = self.result(code)
        if self.request.check and code != 0:
            raise StepFailed(res, command=self.request.header.op == "exec")
        return res

    def note_package(self) -> None:
        """What the runner said of the step's package: kept (later steps send none), or
        ``missing`` (nothing ran: :class:`PackageMissing`, and the step goes once more, with
        it)."""
        assert self.launch is not None and self.request.header.package is not None
        missing, kept = self.err.control(MISSING), self.err.control(PACKAGE)
        if isinstance(kept, dict):
            self.engine.keeps_packages(self.launch, bool(kept.get("cached")))
        if isinstance(missing, dict) and not self.send_package:
            self.engine.keeps_packages(self.launch, bool(missing.get("cache")))
            raise PackageMissing(self.request.header.package)

    def result(self, code: int | None) -> Result:
        out, err = self.out, self.err
        out.flush()
        err.flush()
        trailer = err.control(EXIT) or {}
        detached = trailer.get("detached")
        return Result(
            host=self.engine.name,
            step=self.step,
            argv=self.request.display,
            exit_code=code,
            stdout=out.text,
            stderr=err.text,
            duration_s=time.monotonic() - self.started,
            stdout_dropped=out.dropped,
            stderr_dropped=err.dropped,
            chain=self.engine.chain_of(self.launch) if self.launch else self.engine.chain,
            stopped=tuple(map(str, trailer.get("stopped") or ())),
            still_running=tuple(map(str, trailer.get("running") or ())),
            detached=None if not isinstance(detached, dict) else Detached(**detached),
        )


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
