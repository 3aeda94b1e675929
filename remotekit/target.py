"""A Target is a transport plus an ordered stack of layers; every action on it is a step.

Each step ships the runner (``remote/runner.py``) and its payload over stdin, through
``[ssh ->] [sudo ->] [container hop ->] python -c LOADER``, in one round trip. The target knows
no hop's tool: each hop (``remotekit.layers``) says its argv, its probe and its failures. The runner spawns
the command in its own process group there, with the step's env and cwd, and stops the whole
tree when the deadline passes or when its stdin closes (timeout, Ctrl-C, lost connection).

Output is split into lines as it arrives; each line goes to ``on_output(stream, line)`` and
into the Result, which keeps at most ``capture_limit`` bytes per stream (the last ones).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import secrets
import shlex
import stat
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Callable, TypeVar, cast

from remotekit import remote
from remotekit.errors import (
    ConnectionLost,
    InterpreterNotFound,
    RemotekitError,
    StepCancelled,
    StepFailed,
    StepTimeout,
)
from remotekit.layers import Launch, compose
from remotekit.result import Detached, Result, Script
from remotekit.spec import LOCAL, HostSpec
from remotekit.transports import for_spec
from remotekit.transports.base import ExecutableMissing, Process, Transport

__all__ = [
    "DEFAULT_CAPTURE_LIMIT",
    "Check",
    "OutputCallback",
    "PingReport",
    "Target",
    "local_target",
]

#: ``on_output(stream, line)``: stream is ``"stdout"`` or ``"stderr"``, line has no newline.
OutputCallback = Callable[[str, str], None]

#: Bytes of each stream a Result keeps (the last ones); more is counted in ``*_dropped``.
DEFAULT_CAPTURE_LIMIT = 16 << 20
#: A line longer than this is passed on in pieces, so one endless line cannot exhaust memory.
MAX_LINE = 1 << 20
#: ``get`` refuses files larger than this unless given ``max_bytes``.
DEFAULT_GET_MAX_BYTES = 1 << 40
#: Extra seconds the runner waits past the step's timeout before it stops the step itself.
REMOTE_BACKSTOP_S = 5.0
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Check:
    """One layer's answer in :meth:`Target.ping`."""

    layer: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class PingReport:
    """Layer checks in order; the first failed one says which layer is broken."""

    host: str
    checks: tuple[Check, ...]

    @property
    def failed(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(f"{c.layer}: {c.detail}" for c in self.checks if not c.ok)

    @property
    def exit_code(self) -> int:
        """0 all layers up; 1 only torch is missing; 2 a layer failed."""
        bad = self.failed
        if bad is None:
            return 0
        return 1 if bad.layer == "torch" else 2


class _Stream:
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


_F = TypeVar("_F", bound=Callable[..., Any])


def _redacts_errors(method: _F) -> _F:
    """A Target method whose RemotekitErrors leave with the target's secrets masked."""

    @functools.wraps(method)
    def wrapper(self: Target, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except RemotekitError as exc:
            self._redacted(exc)
            raise

    return cast(_F, wrapper)


#: The longest per-call timeout (as for ``timeouts.step`` in hosts.yaml): every wait takes it as is.
MAX_TIMEOUT_S = 30 * 86400.0


def _checked_timeout(timeout: float, host: str, step: str) -> float:
    """A per-call timeout, refused before anything runs unless finite, > 0 and bounded."""
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not ok or not 0 < timeout <= MAX_TIMEOUT_S:  # NaN fails both comparisons
        raise RemotekitError(
            f"timeout must be seconds > 0 and <= {MAX_TIMEOUT_S:.0f}, got {timeout!r}",
            host=host,
            step=step,
        )
    return float(timeout)


def _step_name(argv: Sequence[str]) -> str:
    return "run " + os.path.basename(argv[0]) if argv else "run"


class Target:
    """One host from the inventory, opened on demand; use it as a context manager.

    >>> with remotekit.load_inventory().target("local") as t:
    ...     t.run(["echo", "hi"]).stdout
    'hi\\n'
    """

    def __init__(
        self,
        spec: HostSpec,
        transport: Transport | None = None,
        *,
        capture_limit: int = DEFAULT_CAPTURE_LIMIT,
    ):
        self.spec = spec
        self.name = spec.name
        self.transport = transport if transport is not None else for_spec(spec)
        self.capture_limit = capture_limit
        #: Called with (step, step_chain) as each step starts (``--verbose`` prints it).
        self.trace: Callable[[str, str], None] | None = None
        self.launch: Launch = compose(spec.layers())
        #: Whether every hop knows where it goes (a Slurm job given by name is looked up once).
        self._opened = not any(h.lookup() for h in spec.hops)
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._active: set[Process] = set()
        self._cancelled = threading.Event()
        self._secrets: set[str] = set()
        self._remember_secrets(spec.env)

    # -- secrets -----------------------------------------------------------------------------

    def _remember_secrets(self, env: Mapping[str, str] | None) -> None:
        for name in self.spec.secret_env:
            value = (env or {}).get(name)
            if value:
                with self._lock:
                    self._secrets.add(value)

    def redact(self, text: str) -> str:
        """``text`` with every secret value of this target replaced by ``***``.

        Secrets are the values of the ``secret_env`` names, from hosts.yaml and from any
        step's ``env=``; a multi-line value is masked whole and line by line (lines of at
        least :data:`MIN_SECRET_LINE` characters, so a lone ``}`` is not masked everywhere).
        """
        with self._lock:
            values = list(self._secrets)
        return mask(text, values)

    def _redacted(self, exc: RemotekitError) -> RemotekitError:
        exc.message = self.redact(exc.message)
        exc.args = tuple(self.redact(a) if isinstance(a, str) else a for a in exc.args)
        return exc

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the held connection (a later step opens a new one)."""
        self.transport.close()

    def cancel(self) -> None:
        """Stop every step running on this target (from any thread), and refuse new ones.

        Each stopped step raises :class:`StepCancelled` in its own thread, after its process
        tree there was stopped, as on a timeout. :meth:`resume` allows steps again.
        """
        self._cancelled.set()
        with self._lock:
            for proc in self._active:
                proc.events.put(("cancel", None))

    def resume(self) -> None:
        """Allow steps again after :meth:`cancel`."""
        self._cancelled.clear()

    def connect(self) -> None:
        """Open the connection now (otherwise the first step does)."""
        self.transport.connect()

    @property
    def chain(self) -> str:
        """The layer chain, e.g. ``ssh root@kpro6 -> pct exec 200 -> /root/venv/bin/python``."""
        return f"{self.transport.label} -> {self.launch.chain}"

    def step_chain(self, argv: Sequence[str]) -> str:
        """The chain a step runs through, ending in its own command (``-u <check.py>`` ...)."""
        hops = [self.transport.label, *self.launch.hops[:-1], shlex.join(argv)]
        return " -> ".join(hops)

    def __repr__(self) -> str:
        return f"<Target {self.name}: {self.chain}>"

    # -- steps -------------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = True,
        on_output: OutputCallback | None = None,
        step: str | None = None,
        capture: bool = True,
        detach: bool = False,
    ) -> Result:
        """Run ``argv`` there (no shell: pass ``["bash", "-c", ...]`` if you want one).

        ``timeout`` defaults to the host's ``timeouts.step``. Raises :class:`StepTimeout`
        (the step's process tree is stopped there), :class:`StepFailed` on a non-zero exit
        when ``check``, and the connection/container/interpreter errors.

        Nothing the step starts outlives it: whatever is still running when its main process
        exits is stopped (TERM, KILL after ``kill_grace``) and named in ``Result.stopped``.
        ``detach=True`` is the way to leave something running (a training run, TensorBoard):
        the command starts there in its own session, its output goes to a log file, and the
        step returns at once with ``Result.detached`` (pid, log path).
        """
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, e.g. ['ls', '-l'], not one string")
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("argv is empty")
        header = {"op": "exec", "argv": argv, "detach": detach}
        return self._step(
            header,
            [],
            display=tuple(argv),
            step=step or _step_name(argv),
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
        )

    def run_python(
        self,
        script: str | os.PathLike[str] | Script,
        args: Sequence[str] = (),
        *,
        files: Mapping[str, bytes] | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = True,
        on_output: OutputCallback | None = None,
        step: str | None = None,
        capture: bool = True,
        detach: bool = False,
    ) -> Result:
        """Ship ``script`` (a local file path or a :class:`Script`) and run it there.

        The script and ``files`` travel as bytes into a private temp dir (0700, unique per
        step) that is removed afterwards, also on failure and timeout. The interpreter is the
        target's (venv / python), unbuffered; ``$REMOTEKIT_DIR`` names the temp dir.
        ``files`` values must be bytes (checked before anything is sent); a file may not
        take the script's own name. ``detach=True``: as for :meth:`run` (the temp dir then
        stays, holding the log; ``Result.detached.dir`` names it).
        """
        if not isinstance(script, Script):
            script = Script.from_path(script)
        if files:
            script = replace(script, files={**script.files, **files})  # validates names, types
        all_files = {script.name: script.source, **script.files}
        manifest = [[name, len(data), 0o600] for name, data in all_files.items()]
        header: dict[str, Any] = {
            "op": "exec",
            "argv": [str(a) for a in args],
            "script": script.name,
            "files": manifest,
            "detach": detach,
        }
        display = (
            self.launch.interpreter or "python",
            "-u",
            f"<shipped {script.name}>",
            *map(str, args),
        )
        return self._step(
            header,
            (piece for data in all_files.values() for piece in _slices(data)),
            display=display,
            step=step or script.name,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
        )

    def put(
        self,
        local: str | os.PathLike[str],
        remote_path: str,
        *,
        mode: int | None = None,
        timeout: float | None = None,
        step: str | None = None,
    ) -> Result:
        """Copy a local file there (atomically: a temp file beside it, then rename).

        The file there gets the local file's mode (under the umask there), never wider than
        the mode of a file it replaces; ``mode=`` sets it exactly instead.
        """
        src = Path(local)
        try:
            st = src.stat()
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block here, a device never end
                raise RemotekitError(
                    f"cannot put {src}: it is {_kind(st.st_mode)}, not a regular file",
                    host=self.name,
                )
            size = st.st_size
            fh = src.open("rb")
        except OSError as exc:
            raise RemotekitError(
                f"cannot read local file {src}: {exc.strerror}", host=self.name
            ) from exc
        header = {
            "op": "put",
            "dest": remote_path,
            "name": src.name,
            "size": size,
            "mode": stat.S_IMODE(st.st_mode) if mode is None else mode,
            "explicit_mode": mode is not None,
        }
        with fh:
            return self._step(
                header,
                _chunks(fh, size),
                display=("put", str(src), remote_path),
                step=step or f"put {remote_path}",
                timeout=timeout,
                check=True,
            )

    def get(
        self,
        remote_path: str,
        local: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        step: str | None = None,
        max_bytes: int = DEFAULT_GET_MAX_BYTES,
    ) -> Result:
        """Copy a regular file from there to ``local`` (a temp file, renamed when complete).

        FIFOs, devices, directories and sockets are refused, as is a file larger than
        ``max_bytes``. The local file gets the remote file's mode under our umask, never
        wider than the mode of a local file it replaces.
        """
        dest = Path(local)
        if dest.is_dir():
            dest = dest / os.path.basename(remote_path)
        tmp = dest.with_name(f".{dest.name}.remotekit-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        ok = False
        got = [0]
        info: dict[str, Any] = {}
        name = step or f"get {remote_path}"

        def sink(data: bytes) -> None:
            got[0] += len(data)
            if got[0] > max_bytes:
                raise RemotekitError(
                    f"{remote_path} sent more than max_bytes={max_bytes}; stopped",
                    host=self.name,
                    step=name,
                )
            fh.write(data)

        try:
            with os.fdopen(fd, "wb") as fh:
                result = self._step(
                    {"op": "get", "src": remote_path, "max_bytes": max_bytes},
                    [],
                    display=("get", remote_path, str(dest)),
                    step=name,
                    timeout=timeout,
                    check=True,
                    stdout_sink=sink,
                    info=info,
                )
            mode = 0o777 & ~_umask() & int(info.get("mode", 0o666))  # no setuid, sticky
            if dest.is_file():
                mode &= stat.S_IMODE(dest.stat().st_mode)
            os.chmod(tmp, mode)
            os.replace(tmp, dest)
            ok = True
            return result
        finally:
            if not ok:
                tmp.unlink(missing_ok=True)

    # -- the step engine ---------------------------------------------------------------------

    @_redacts_errors
    def _step(
        self,
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
    ) -> Result:
        """One step; every error it raises is redacted (see :meth:`redact`)."""
        self._remember_secrets(env)
        launch = self._launch(step)
        limit = (
            self.spec.timeouts.step
            if timeout is None
            else _checked_timeout(timeout, self.name, step)
        )
        grace = self.spec.timeouts.kill_grace
        nonce = "remotekit-" + secrets.token_hex(8)
        header = {
            **header,
            "nonce": nonce,
            "env": {**launch.env, **(env or {})},
            "path_prepend": list(launch.path_prepend),
            "cwd": cwd or launch.cwd,
            "timeout": None if limit is None else limit + grace + REMOTE_BACKSTOP_S,
            "grace": grace,
        }
        runner = remote.source("runner.py")
        head = json.dumps(header).encode()
        stdin = _concat(
            [f"{len(runner)}\n".encode(), runner, f"{len(head)}\n".encode(), head], payload
        )

        out = _Stream("stdout", on_output, capture and stdout_sink is None, self.capture_limit)
        err = _Stream("stderr", on_output, capture, self.capture_limit, nonce=nonce)
        started = time.monotonic()
        deadline = None if limit is None else started + limit

        def result(code: int | None) -> Result:
            out.flush()
            err.flush()
            trailer = err.control("exit") or {}
            detached = trailer.get("detached")
            return Result(
                host=self.name,
                step=step,
                argv=display,
                exit_code=code,
                stdout=out.text,
                stderr=err.text,
                duration_s=time.monotonic() - started,
                stdout_dropped=out.dropped,
                stderr_dropped=err.dropped,
                chain=self.chain,
                stopped=tuple(map(str, trailer.get("stopped") or ())),
                still_running=tuple(map(str, trailer.get("running") or ())),
                detached=None if not isinstance(detached, dict) else Detached(**detached),
            )

        if self._cancelled.is_set():
            raise StepCancelled(result(None), started=False)
        if self.trace is not None:
            self.trace(step, self.step_chain(display))
        try:
            proc = self.transport.start(launch.argv, stdin, wait=limit)
        except ExecutableMissing as exc:
            raise self._missing(exc.path, step) from None
        except TimeoutError:
            assert limit is not None
            raise StepTimeout(result(None), limit, started=False) from None
        except RemotekitError as exc:
            exc.step = exc.step or step
            raise

        # ``get`` streams file bytes on stdout after a line holding the nonce; whatever a
        # login shell printed before it is output, not data.
        sink_on = [False]
        marker = nonce.encode() + b"\n"

        with self._lock:
            self._active.add(proc)
            if self._cancelled.is_set():
                proc.events.put(("cancel", None))

        def handle(kind: str, data: Any) -> None:
            if kind == "stdout":
                if stdout_sink is None:
                    out.feed(data)
                elif sink_on[0]:
                    stdout_sink(data)
                else:
                    out.buf += data
                    at = out.buf.find(marker)
                    if at >= 0:
                        rest = bytes(out.buf[at + len(marker) :])
                        del out.buf[at:]
                        sink_on[0] = True
                        if rest:
                            stdout_sink(rest)
            elif kind == "stderr":
                err.feed(data)

        outcome: str = "running"
        code: int | None = None
        try:
            while outcome == "running":
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    outcome = "timeout"
                    break
                try:
                    kind, data = proc.events.get(timeout=wait)
                except queue.Empty:
                    continue
                if kind == "exit":
                    outcome, code = "exit", data if isinstance(data, int) else None
                elif kind == "cancel":
                    outcome = "cancelled"
                elif kind == "lost":
                    outcome = "lost"
                    lost_reason = str(data)
                else:
                    handle(kind, data)
        except BaseException:
            self._stop(proc, handle)
            raise
        finally:
            with self._lock:
                self._active.discard(proc)
        if outcome == "cancelled":
            self._stop(proc, handle)
            raise StepCancelled(result(None), confirmed=err.has("exit"))
        if outcome == "timeout":
            self._stop(proc, handle)
            assert limit is not None
            raise StepTimeout(result(None), limit, confirmed=err.has("exit"))
        if outcome == "lost":
            proc.terminate()
            res = result(None)
            raise ConnectionLost(
                f"connection lost while the step ran ({lost_reason}); the runner there "
                f"stops the step when it sees its stdin close",
                result=res,
                host=self.name,
                step=step,
            )
        if not err.has("ready"):
            raise self._not_started(code, result(code), step)
        trailer = err.control("exit")
        if isinstance(trailer, dict) and isinstance(trailer.get("code"), int):
            code = trailer["code"]
        if info is not None:
            info.update(err.control("file") or {})
        res = result(code)
        if check and code != 0:
            raise StepFailed(res)
        return res

    def _stop(self, proc: Process, handle: Callable[[str, Any], None]) -> None:
        """Stop a step there: EOF makes the runner stop its tree; wait for that, then close."""
        proc.close_stdin()
        end = time.monotonic() + self.spec.timeouts.kill_grace + 2.0
        try:
            while (left := end - time.monotonic()) > 0:
                try:
                    kind, data = proc.events.get(timeout=left)
                except queue.Empty:
                    break
                if kind in ("exit", "lost"):
                    break
                handle(kind, data)
        finally:
            proc.terminate()

    def _launch(self, step: str) -> Launch:
        """The launch, once every hop knows where it goes (looked up on the first step)."""
        if not self._opened:
            self._open_hops(step)
        return self.launch

    def _open_hops(self, step: str) -> None:
        """Look up what a hop needs before the first step (a Slurm job by name -> its id)."""
        with self._open_lock:
            if self._opened:
                return
            hops = list(self.spec.hops)
            for i, hop in enumerate(hops):
                lookup = hop.lookup()
                if lookup is not None:
                    code, text = self._probe(self._inside(i, lookup))
                    try:
                        hops[i] = hop.resolved(code, text, self.name)
                    except RemotekitError as exc:
                        exc.step = step
                        raise
            if self.spec.hop is not None:
                self.spec = replace(self.spec, hop=hops[-1])
                self.launch = compose(self.spec.layers())
            self._opened = True

    def _inside(self, n: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the first ``n`` hops (e.g. a probe under sudo)."""
        return list(compose(reversed(self.spec.hops[:n]), Launch(argv=tuple(argv))).argv)

    def _missing(self, path: str, step: str) -> RemotekitError:
        if path == self.launch.interpreter:
            return InterpreterNotFound(
                f"interpreter {path} not found ({self.chain})", path=path, host=self.name, step=step
            )
        for hop in self.spec.hops:
            if path == hop.executable:
                return hop.missing(self.name, step)
        return RemotekitError(f"{path!r} not found ({self.chain})", host=self.name, step=step)

    def _not_started(self, code: int | None, res: Result, step: str) -> RemotekitError:
        """The runner never said ready: ask each hop, outermost first, if the words are its."""
        text = (res.stderr + res.stdout).strip()
        low = text.lower()
        quoted = "\n".join("  " + line for line in text.splitlines()[-10:]) or "  (no output)"
        where = dict(host=self.name, step=step)
        hops = self.spec.hops
        for i, hop in enumerate(hops):
            error = hop.explain(code, text, self.name, step)
            if error is not None and hop.confirm:
                status = self._probe(self._inside(i, hop.probe()))
                error = hop.explain(code, text, self.name, step, status=status)
            if error is not None:
                return error
        interp = self.launch.interpreter or "python"
        exec_failed = any(h.exec_failed(code, text) for h in hops)
        if exec_failed or code in (126, 127, 255) or "no such file" in low or "not found" in low:
            return InterpreterNotFound(
                f"interpreter {interp} not found there (exit {code}); check `venv:`/`python:` "
                f"in hosts.yaml ({self.spec.source}):\n{quoted}",
                path=interp,
                **where,
            )
        return RemotekitError(
            f"the remotekit runner did not start via {self.chain} (exit {code}); needs "
            f"Python >= 3.6 there:\n{quoted}",
            **where,
        )

    # -- ping --------------------------------------------------------------------------------

    def ping(self, on_check: Callable[[Check], None] | None = None) -> PingReport:
        """Check each layer in turn (connection, sudo, container, interpreter, torch).

        Stops at the first layer that fails; that check says why.
        """
        checks: list[Check] = []
        try:
            self._ping(checks, on_check)
        finally:
            report = PingReport(self.name, tuple(checks))
        return report

    def _ping(self, checks: list[Check], on_check: Callable[[Check], None] | None) -> None:
        def add(layer: str, ok: bool, detail: str) -> bool:
            c = Check(layer, ok, detail)
            checks.append(c)
            if on_check is not None:
                on_check(c)
            return ok

        try:
            self.connect()
        except RemotekitError as exc:
            add(self.transport.label, False, exc.message)
            return
        add(self.transport.label, True, "connected" if self.spec.ssh else "this machine")
        hops = self.spec.hops
        if not self._opened:
            try:
                self._open_hops("ping")
            except RemotekitError as exc:
                add(hops[-1].label, False, exc.message)
                return
            hops = self.spec.hops
        for i, hop in enumerate(hops):
            code, text = self._probe(self._inside(i, hop.probe()))
            if not add(hop.label, *hop.verdict(code, text)):
                return
        probe = Script(_PING_PY, name="remotekit_ping.py")
        try:
            res = self.run_python(probe, step="ping", timeout=max(30.0, self.spec.timeouts.connect))
        except StepCancelled:
            raise
        except RemotekitError as exc:
            add(self.launch.interpreter or "python", False, exc.message)
            return
        info = json.loads(res.stdout.strip().splitlines()[-1])
        # sys.executable is empty when the interpreter was found without PATH (slurm)
        add(
            info["executable"] or self.launch.interpreter or "python",
            True,
            f"Python {info['python']}",
        )
        torch = info.get("torch")
        add("torch", torch is not None, torch or "not importable: " + info.get("torch_error", ""))
        return

    def _probe(self, argv: list[str], timeout: float = 15.0) -> tuple[int | None, str]:
        """Run a bare command on the node (no runner: for checks before the runner can run)."""
        started = time.monotonic()
        cancelled = StepCancelled(
            Result(self.name, "ping", tuple(argv), None, "", "", 0.0, chain=self.chain)
        )
        if self._cancelled.is_set():
            raise cancelled
        try:
            proc = self.transport.start(argv, [])
        except ExecutableMissing as exc:
            return 127, f"{exc.path}: not found"
        with self._lock:
            self._active.add(proc)
        proc.close_stdin()
        chunks: list[bytes] = []
        try:
            while (left := started + timeout - time.monotonic()) > 0:
                try:
                    kind, data = proc.events.get(timeout=left)
                except queue.Empty:
                    break
                if kind == "cancel":
                    raise cancelled
                if isinstance(data, bytes):
                    chunks.append(data)
                else:
                    code = data if kind == "exit" and isinstance(data, int) else None
                    return code, b"".join(chunks).decode(errors="replace").strip()
            return None, f"no answer within {timeout:g} s"
        finally:
            with self._lock:
                self._active.discard(proc)
            proc.terminate()


_PING_PY = b"""\
import json, platform, sys
info = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch
    info["torch"] = torch.__version__ + (" (CUDA %s)" % torch.version.cuda if torch.version.cuda else " (CPU)")
except Exception as e:
    info["torch_error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(info))
"""


def _slices(data: bytes) -> Iterator[bytes]:
    """``data`` in bounded pieces (views, no copies): a transport never gets one huge write."""
    view = memoryview(data)
    for at in range(0, len(view), _CHUNK):
        yield view[at : at + _CHUNK]  # type: ignore[misc]


def _chunks(fh: IO[bytes], size: int) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fh`` (what the runner reads; a file still growing is
    sent as it was when measured)."""
    while size > 0 and (chunk := fh.read(min(_CHUNK, size))):
        size -= len(chunk)
        yield chunk


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def _concat(first: list[bytes], rest: Iterable[bytes]) -> Iterator[bytes]:
    yield b"".join(first)
    yield from rest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Lines of a multi-line secret shorter than this are not masked on their own.
MIN_SECRET_LINE = 4


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret (whole, and each line of a multi-line one) as ``***``."""
    pieces: set[str] = set()
    for value in secrets:
        if value:
            pieces.add(value)
            lines = value.splitlines()
            if len(lines) > 1:
                pieces.update(ln.strip() for ln in lines if len(ln.strip()) >= MIN_SECRET_LINE)
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "***")
    return text


def local_target(**overrides: Any) -> Target:
    """The ``local`` target (this machine, our own interpreter), optionally with overrides."""
    return Target(replace(LOCAL, **overrides) if overrides else LOCAL)
