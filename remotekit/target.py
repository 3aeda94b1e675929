"""A Target is a transport plus an ordered stack of layers; every action on it is a step.

This module is the public facade: :class:`Target` (``run``, ``run_python``, ``put``, ``get``,
``ping``, ``cancel``) and :func:`local_target`. The step engine is :mod:`remotekit.step`, the
layer checks :mod:`remotekit.ping`, the host spec :mod:`remotekit.spec`, the transport
:func:`remotekit.transports.for_spec`.

Each step ships the runner (``remote/runner.py``) and its payload over stdin, through
``[ssh ->] [sudo ->] [container hop ->] python -c LOADER``, in one round trip. The target
knows no hop's tool: each hop (``remotekit.layers``) says its argv, its probe and its
failures. The runner spawns the command in its own process group there, with the step's env
and cwd, and stops the whole tree when the deadline passes or when its stdin closes (timeout,
Ctrl-C, lost connection).

Output is split into lines as it arrives; each line goes to ``on_output(stream, line)`` and
into the Result, which keeps at most ``capture_limit`` bytes per stream (the last ones)."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shlex
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

from remotekit import shell
from remotekit.errors import ConnectionLost, RemotekitError
from remotekit.layers import Launch, compose
from remotekit.ping import Check, PingReport, ping
from remotekit.result import Result, Script
from remotekit.shell import NotStarted
from remotekit.spec import LOCAL, HostSpec
from remotekit.step import MAX_LINE as MAX_LINE  # these limits were defined here before step.py
from remotekit.step import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from remotekit.step import REMOTE_BACKSTOP_S as REMOTE_BACKSTOP_S
from remotekit.step import (
    OutputCallback,
    OutputStream,
    StepRun,
    file_chunks,
    missing,
    not_started,
    open_hops,
    slices,
)
from remotekit.transports import for_spec
from remotekit.transports.base import ExecutableMissing, Process, TerminalTransport, Transport

if TYPE_CHECKING:
    from remotekit.forward import Forward
    from remotekit.sync import SyncResult

#: ``on_progress(done, total)`` of a transfer: bytes done so far (never decreasing) of ``total``.
ProgressCallback = Callable[[int, int], None]

__all__ = [
    "DEFAULT_CAPTURE_LIMIT",
    "Check",
    "OutputCallback",
    "PingReport",
    "Target",
    "local_target",
]

#: The line splitter's name before it moved to :mod:`remotekit.step` (tests import it here).
_Stream = OutputStream

#: Bytes of each stream a Result keeps (the last ones); more is counted in ``*_dropped``.
DEFAULT_CAPTURE_LIMIT = 16 << 20
#: ``get`` refuses files larger than this unless given ``max_bytes``.
DEFAULT_GET_MAX_BYTES = 1 << 40


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _redacts_errors(method: _Method) -> _Method:
    """A Target method whose RemotekitErrors leave with the target's secrets masked."""

    @functools.wraps(method)
    def wrapper(self: Target, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except RemotekitError as exc:
            self._redacted(exc)
            raise

    return cast(_Method, wrapper)


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
        """Check a step's (or the spec's) ``env`` and remember its secret values.

        Runs before anything else a step does, so every error it raises is masked. A value
        that is not a string is refused here, naming the variable and never the value.
        """
        for name, value in (env or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                what = name if isinstance(name, str) else type(name).__name__
                raise TypeError(
                    f"env[{what!r}] must be a string, not {type(value).__name__} "
                    "(environment values are text: pass str(value))"
                )
        pieces = [p for n in self.spec.secret_env for p in _secret_texts((env or {}).get(n))]
        if pieces:
            with self._lock:
                self._secrets.update(pieces)

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
                proc.cancel()

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

    def python_display(self, script_name: str, args: Sequence[Any] = ()) -> tuple[str, ...]:
        """The command a shipped script's step shows (``python -u <shipped check.py> ...``)."""
        interpreter = self.launch.interpreter or "python"
        return (interpreter, "-u", f"<shipped {script_name}>", *map(str, args))

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
        display = self.python_display(script.name, args)
        return self._step(
            header,
            (piece for data in all_files.values() for piece in slices(data)),
            display=display,
            step=step or script.name,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
        )

    @_redacts_errors
    def forward(
        self,
        port: int,
        local_port: int = 0,
        bind: str = "127.0.0.1",
        *,
        check: bool = True,
        on_error: Callable[[RemotekitError], None] | None = None,
    ) -> Forward:
        """Reach ``127.0.0.1:port`` in the target's own network namespace from here.

        Listens on ``bind:local_port`` here (0: a free port; see ``.local_port``, ``.url``);
        each connection is relayed over its own channel through every layer of the target
        (see :mod:`remotekit.forward`). With ``check``, a port nothing listens on there raises
        :class:`~remotekit.errors.ForwardError` now. Close it (or leave the ``with``) to end
        every connection; nothing stays running there. ``on_error`` hears each distinct failure
        of a later connection once (default: logged on ``remotekit.forward``).
        """
        from remotekit.forward import Forward

        fwd = Forward(self, port, local_port=local_port, bind=bind, on_error=on_error)
        return fwd.start(check=check)

    def put(
        self,
        local: str | os.PathLike[str],
        remote_path: str,
        *,
        mode: int | None = None,
        parents: bool = False,
        timeout: float | None = None,
        step: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Result:
        """Copy a local file there (atomically: a temp file beside it, then rename).

        ``parents`` creates the missing directories there first (``mkdir -p``): the one that
        holds ``remote_path``, or ``remote_path`` itself when it ends with ``/``.

        The file there gets the local file's mode (under the umask there), never wider than
        the mode of a file it replaces; ``mode=`` sets it exactly instead. ``on_progress(done,
        total)`` is called as bytes leave (``done`` never decreases; ``total`` is the size).
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
            "parents": parents,
        }
        with fh:
            return self._step(
                header,
                file_chunks(fh, size, on_progress),
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
        on_progress: ProgressCallback | None = None,
    ) -> Result:
        """Copy a regular file from there to ``local`` (a temp file, renamed when complete).

        FIFOs, devices, directories and sockets are refused, as is a file larger than
        ``max_bytes``. The local file gets the remote file's mode under our umask, never
        wider than the mode of a local file it replaces. ``on_progress(done, total)`` is
        called as bytes arrive, once the size there is known, and when the copy is complete.
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
            if on_progress is not None and "size" in info:
                on_progress(got[0], int(info["size"]))

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
            if on_progress is not None:
                on_progress(got[0], int(info.get("size", got[0])))
            _land(tmp, dest, int(info.get("mode", 0o666)))
            ok = True
            return result
        finally:
            if not ok:
                tmp.unlink(missing_ok=True)

    @_redacts_errors
    def sync(
        self,
        src: str | os.PathLike[str],
        dest: str,
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
        timeout: float | None = None,
    ) -> SyncResult:
        """Make ``dest`` there hold the contents of the local directory ``src``: only changed
        files travel (size + mtime, then content hash), in a few steps; see :mod:`remotekit.sync`.

        ``on_progress(bytes_done, bytes_total)`` is called as file bodies are sent.
        """
        from remotekit.sync import sync

        return sync(
            self,
            src,
            dest,
            delete=delete,
            exclude=exclude,
            dry_run=dry_run,
            on_progress=on_progress,
            timeout=timeout,
        )

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
        """One step (:class:`remotekit.step.StepRun`); every error it raises is redacted
        (see :meth:`redact`)."""
        return StepRun(
            self,
            header,
            payload,
            display=display,
            step=step,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
            stdout_sink=stdout_sink,
            info=info,
        ).run()

    def _launch(self, step: str) -> Launch:
        """The launch, once every hop knows where it goes (looked up on the first step)."""
        if not self._opened:
            open_hops(self, step)
        return self.launch

    def _missing(self, path: str, step: str) -> RemotekitError:
        """The error for an executable not found there (see :func:`remotekit.step.missing`)."""
        return missing(self, path, step)

    def _not_started(self, code: int | None, res: Result, step: str) -> RemotekitError:
        """Why the runner never said ready (see :func:`remotekit.step.not_started`)."""
        return not_started(self, code, res, step)

    @contextlib.contextmanager
    def _tracked(self, proc: Process) -> Iterator[Process]:
        """``proc`` stopped by :meth:`cancel` while the block runs (at once if cancelled)."""
        with self._lock:
            self._active.add(proc)
            if self._cancelled.is_set():
                proc.cancel()
        try:
            yield proc
        finally:
            with self._lock:
                self._active.discard(proc)

    # -- shell -------------------------------------------------------------------------------

    @_redacts_errors
    def shell(
        self,
        argv: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: int = 0,
        stdout: int = 1,
        start_timeout: float = 60.0,
    ) -> int:
        """Run ``argv`` (default: the login shell there) on a terminal inside the target, attached
        to ours (file descriptors ``stdin``/``stdout``), and return its exit status.

        The chain is the target's, each hop in its interactive form (a pty end to end), with
        the venv active, the target's env and ``env``, in ``cwd`` or the workdir (else the
        home directory). See :mod:`remotekit.shell`. ``start_timeout`` bounds the wait for
        the program there to start; a hop that cannot be entered raises its own error.
        """
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, e.g. ['python'], not one string")
        step = "shell"
        self._remember_secrets(env)
        launch = shell.interactive(self.spec.hops, self._launch(step))
        transport = self.transport
        if not isinstance(transport, TerminalTransport):
            raise RemotekitError(
                f"{transport.label} cannot open a terminal", host=self.name, step=step
            )
        if self.trace is not None:
            self.trace(step, " -> ".join((transport.label, *launch.hops)))
        columns, rows = shell.window_size(stdout, stdin)
        term_name = os.environ.get("TERM") or "xterm-256color"
        try:
            term = transport.open_terminal(launch.argv, term=term_name, columns=columns, rows=rows)
        except ExecutableMissing as exc:
            raise self._missing(exc.path, step) from None
        except TimeoutError:
            raise RemotekitError(
                f"no free SSH session for the shell ({transport.label})", host=self.name, step=step
            ) from None
        except RemotekitError as exc:
            exc.host, exc.step = exc.host or self.name, exc.step or step
            raise
        blobs = shell.request(launch, argv, env, cwd)
        try:
            code = shell.session(term, blobs, stdin, stdout, start_timeout)
        except NotStarted as exc:
            raise self._shell_not_started(exc, argv, start_timeout) from None
        except RemotekitError as exc:  # e.g. ConnectionLost from a write to the terminal
            exc.step = exc.step or step
            raise
        if code is None:
            raise ConnectionLost(
                "the connection dropped while the shell ran (no exit status came back)",
                host=self.name,
                step=step,
            )
        return code

    def _shell_not_started(
        self, exc: NotStarted, argv: Sequence[str] | None, timeout: float
    ) -> RemotekitError:
        if exc.code is None:
            return RemotekitError(
                f"the shell did not start within {timeout:g} s via {self.chain}",
                host=self.name,
                step="shell",
            )
        text = exc.output.decode("utf-8", "replace").replace("\r\n", "\n")
        display = tuple(argv or ("<login shell>",))
        res = Result(self.name, "shell", display, exc.code, text, "", 0.0, chain=self.chain)
        return self._not_started(exc.code, res, "shell")

    # -- ping --------------------------------------------------------------------------------

    def ping(self, on_check: Callable[[Check], None] | None = None) -> PingReport:
        """Check each layer in turn (connection, sudo, container, interpreter, torch).

        Stops at the first layer that fails; that check says why (see :mod:`remotekit.ping`).
        """
        return ping(self, on_check)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def _land(tmp: Path, dest: Path, mode_there: int) -> None:
    """Rename a fetched temp file over ``dest``, with the mode there under our umask, never
    wider than the mode of a file it replaces (no setuid, setgid or sticky)."""
    mode = 0o777 & ~_umask() & mode_there
    if dest.is_file():
        mode &= stat.S_IMODE(dest.stat().st_mode)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Lines of a multi-line secret shorter than this are not masked on their own.
MIN_SECRET_LINE = 4


def mask(text: str, secrets: Iterable[Any]) -> str:
    """``text`` with each secret (whole, and each line of a multi-line one) as ``***``.

    A secret may be any value (a number given as ``env=``, a list written in hosts.yaml): its
    ``str()`` and ``repr()`` are masked, and so is every string inside a list, tuple, set or
    mapping (its values). Masking never raises: it runs on the way out of every error.
    """
    pieces: set[str] = set()
    for value in secrets:
        for piece in _secret_texts(value):
            if not piece:
                continue
            pieces.add(piece)
            lines = piece.splitlines()
            if len(lines) > 1:
                pieces.update(ln.strip() for ln in lines if len(ln.strip()) >= MIN_SECRET_LINE)
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "***")
    return text


def _secret_texts(value: Any, depth: int = 0) -> Iterator[str]:
    """Every text under which ``value`` can appear in a message (bounded for nested values)."""
    if value is None or depth > 8:
        return
    if isinstance(value, str):
        if value:
            yield value
        return
    try:
        yield str(value)
        yield repr(value)
    except Exception:  # a hostile __str__/__repr__: mask what is left
        pass
    if isinstance(value, Mapping):
        items: Iterable[Any] = value.values()  # its keys are names, not secrets
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = value
    else:
        return
    for item in items:
        yield from _secret_texts(item, depth + 1)


def local_target(**overrides: Any) -> Target:
    """The ``local`` target (this machine, our own interpreter), optionally with overrides."""
    return Target(replace(LOCAL, **overrides) if overrides else LOCAL)
