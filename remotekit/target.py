"""A Target is a transport plus an ordered stack of layers; every action on it is a step.

This module is the public facade: :class:`Target` (``run``, ``run_python``, ``put``, ``get``,
``ping``, ``cancel``; ``runs`` and ``run_handle`` for the runs ``detach=True`` starts, see
:mod:`remotekit.runs`) and :func:`local_target`. What every step runs on (spec, transport,
launch, cancellation, secrets) is the target's :class:`~remotekit.engine.Engine`: each method
builds its step's request once (:class:`~remotekit.step.StepRequest`; with ``detach=True``
the same request starts a run: :func:`remotekit.runs.start`) and hands it to what runs it;
every error leaves through the engine's boundary, the one place the target's secrets are
masked (:func:`~remotekit.engine.masks_errors`). One step is
:mod:`remotekit.step`, the layer checks :mod:`remotekit.ping`, the host spec
:mod:`remotekit.spec`, the transport :func:`remotekit.transports.for_spec`.

Each step ships the runner (``remote/runner.py``) and its payload over stdin, through
``[ssh ->] [hop -> ...] python -c LOADER`` (the chain's hops, in order), in one round trip.
The target knows no hop's tool: each hop (``remotekit.layers``) says its argv, its probe and its
failures. The runner spawns the command in its own process group there, with the step's env
and cwd, and stops the whole tree when the deadline passes or when its stdin closes (timeout,
Ctrl-C, lost connection).

Output is split into lines as it arrives; each line goes to ``on_output(stream, line)`` and
into the Result, which keeps at most ``capture_limit`` bytes per stream (the last ones)."""

from __future__ import annotations

import os
import secrets
import stat
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, overload

from remotekit import shell
from remotekit.engine import Engine, Facade, masks_errors
from remotekit.errors import ConnectionLost, RemotekitError, StepFailed
from remotekit.layers import Launch
from remotekit.ping import Check, PingReport, ping
from remotekit.remote.runner import GET_IS_A_DIRECTORY, kind_of
from remotekit.result import Result, Script
from remotekit.shell import NotStarted
from remotekit.shipping import shown_name
from remotekit.spec import LOCAL, HostSpec
from remotekit.step import (
    MAX_TIMEOUT_S,
    OutputCallback,
    Stdin,
    StepHeader,
    StepRequest,
    file_chunks,
    run_step,
    stdin_source,
    stream_file,
)
from remotekit.transports import for_spec
from remotekit.transports.base import ExecutableMissing, Terminal, TerminalTransport, Transport

if TYPE_CHECKING:
    from remotekit.forward import Forward
    from remotekit.runs import Run, RunInfo
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

#: Bytes of each stream a Result keeps (the last ones); more is counted in ``*_dropped``.
DEFAULT_CAPTURE_LIMIT = 16 << 20
#: ``get`` refuses files larger than this unless given ``max_bytes``.
DEFAULT_GET_MAX_BYTES = 1 << 40


def _step_name(argv: Sequence[str]) -> str:
    return "run " + os.path.basename(argv[0]) if argv else "run"


@masks_errors
class Target(Facade):
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
        agent: bool | None = None,
        dry_run: bool = False,
    ):
        """``dry_run``: run no step and connect nowhere; each step raises :class:`DryRun`
        with the chain it would have run through, after handing it to :attr:`trace`."""
        if not isinstance(spec, HostSpec):
            raise TypeError(
                f"Target() takes a HostSpec, not {type(spec).__name__} {spec!r}; a host by "
                f"name: remotekit.load_inventory().target({spec!r})"
            )
        transport = transport if transport is not None else for_spec(spec)
        use_agent = spec.agent if agent is None else agent
        super().__init__(
            Engine(spec, transport, capture_limit=capture_limit, agent=use_agent, dry_run=dry_run)
        )

    # -- the engine's state, as the public attributes it always was ---------------------------

    @property
    def spec(self) -> HostSpec:
        """The host spec (a Slurm job given by name reads as its id once looked up)."""
        return self.engine.spec

    @property
    def transport(self) -> Transport:
        return self.engine.transport

    @property
    def launch(self) -> Launch:
        """The launch chain (argv, env, cwd) every step's runner goes through."""
        return self.engine.launch

    @property
    def trace(self) -> Callable[[str, str], None] | None:
        """Called with (step, step_chain) as each step starts (``--verbose`` prints it)."""
        return self.engine.trace

    @trace.setter
    def trace(self, value: Callable[[str, str], None] | None) -> None:
        self.engine.trace = value

    def redact(self, text: str) -> str:
        """``text`` with every secret value of this target replaced by ``***``.

        Secrets are the values of the ``secret_env`` names, from hosts.yaml and from any
        step's ``env=``; a multi-line value is masked whole and line by line (lines of at
        least :data:`~remotekit.engine.MIN_SECRET_LINE` characters, so a lone ``}`` is not
        masked everywhere).
        """
        return self.engine.redact(text)

    # -- lifecycle (a context manager; close: :class:`~remotekit.engine.Facade`) ----------------

    def cancel(self) -> None:
        """Stop every step running on this target (from any thread), and refuse new ones.

        Each stopped step raises :class:`StepCancelled` in its own thread, after its process
        tree there was stopped, as on a timeout. :meth:`resume` allows steps again.
        """
        self.engine.cancel()

    def resume(self) -> None:
        """Allow steps again after :meth:`cancel`."""
        self.engine.resume()

    def connect(self) -> None:
        """Open the connection now (otherwise the first step does)."""
        self.transport.connect()

    @property
    def chain(self) -> str:
        """The layer chain, e.g. ``ssh root@kpro6 -> pct exec 200 -> /root/venv/bin/python``."""
        return self.engine.chain

    def __repr__(self) -> str:
        return f"<Target {self.name}: {self.chain}>"

    # -- steps -------------------------------------------------------------------------------

    @overload
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
        stdin: Stdin | None = None,
        detach: Literal[False] = False,
    ) -> Result: ...

    @overload
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
        stdin: Stdin | None = None,
        detach: Literal[True],
    ) -> Run: ...

    @overload
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
        stdin: Stdin | None = None,
        detach: bool,
    ) -> Result | Run: ...

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
        stdin: Stdin | None = None,
        detach: bool = False,
    ) -> Result | Run:
        """Run ``argv`` there (no shell: pass ``["bash", "-c", ...]`` if you want one).

        ``timeout`` defaults to the host's ``timeouts.step``. Raises :class:`StepTimeout`
        (the step's process tree is stopped there), :class:`StepFailed` on a non-zero exit
        when ``check``, and the connection/container/interpreter errors.

        Nothing the step starts outlives it: whatever is still running when its main process
        exits is stopped (TERM, KILL after ``kill_grace``) and named in ``Result.stopped``.
        ``detach=True`` is the way to leave something running (a training run, TensorBoard):
        it starts a **run** (:mod:`remotekit.runs`), recorded there, in its own session under
        a supervisor, and returns its :class:`~remotekit.runs.Run` handle once it started
        (``.id``, ``.state()``, ``.logs(follow=True)``, ``.wait()``, ``.stop()``; ``.result``
        is the starting step's Result, ``.result.detached`` its pid, log and dir). A run
        that could not start (command not found) raises :class:`StepFailed` whatever
        ``check`` says: there is no run to hand back; its own exit code comes from ``wait``.

        ``stdin``: what the command reads on its stdin, as ``ssh host cmd`` passes its own
        (bytes, a binary file object such as ``sys.stdin.buffer`` or ``open(p, "rb")``, or
        an iterable of bytes), streamed as the command takes it, then EOF; None (default):
        /dev/null. Not with ``detach``.
        """
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, e.g. ['ls', '-l'], not one string")
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("argv is empty")
        request = StepRequest(
            StepHeader(argv=tuple(argv)),
            display=tuple(argv),
            step=step or _step_name(argv),
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
            stdin=stdin_source(stdin, detach),
        )
        if detach:
            from remotekit.runs import start

            return start(self, request)
        return run_step(self.engine, request)

    @overload
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
        stdin: Stdin | None = None,
        detach: Literal[False] = False,
        preload: Sequence[str] = (),
    ) -> Result: ...

    @overload
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
        stdin: Stdin | None = None,
        detach: Literal[True],
        preload: Sequence[str] = (),
    ) -> Run: ...

    @overload
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
        stdin: Stdin | None = None,
        detach: bool,
        preload: Sequence[str] = (),
    ) -> Result | Run: ...

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
        stdin: Stdin | None = None,
        detach: bool = False,
        preload: Sequence[str] = (),
    ) -> Result | Run:
        """Ship ``script`` (a local file path or a :class:`Script`) and run it there.

        The script and ``files`` travel as bytes into a private temp dir (0700, unique per
        step) that is removed afterwards, also on failure and timeout. The interpreter is the
        target's (venv / python), unbuffered; ``$REMOTEKIT_DIR`` names the temp dir.
        ``files`` values must be bytes (checked before anything is sent); a file may not
        take the script's own name. ``detach=True``: as for :meth:`run`, a
        :class:`~remotekit.runs.Run` (the temp dir then stays, holding the shipped files;
        ``run.result.detached.dir`` names it). ``preload``: modules
        the script imports that are slow to import (``["torch"]``): with the agent on, the step
        is forked from a process there that keeps them imported (the first such step pays
        the import); without it, nothing changes. ``stdin``: as for :meth:`run`.
        """
        if not isinstance(script, Script):
            script = Script.from_path(script)
        if files:
            script = replace(script, files={**script.files, **files})  # validates
        request = StepRequest.script(
            script,
            args,
            preload=preload,
            display=self.engine.python_display(shown_name(script), args),
            step=step or script.name,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=check,
            on_output=on_output,
            capture=capture,
            stdin=stdin,
            detach=detach,
        )
        if detach:
            from remotekit.runs import start

            return start(self, request, script)
        return run_step(self.engine, request)

    def call(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        pickle: bool = False,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_output: OutputCallback | None = None,
        step: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` there and return its value.

        ``fn`` is found there by its module and name: a function at the top level of a
        module (or a notebook cell); a lambda, closure or nested function is refused here.
        Its module, when it is the caller's own (not the standard library or an installed
        package), is shipped by the hash of its files and kept there (see
        :mod:`remotekit.call`). Arguments and the value are JSON (a tuple arrives as a list),
        checked here before anything runs; ``pickle=True`` pickles both ways instead
        (without it, nothing from there is ever unpickled here). An exception there raises
        :class:`~remotekit.errors.RemoteError` with its type, message and traceback.

        The call is a step named ``call <qualname>``: ``timeout``, Ctrl-C and
        :meth:`cancel` stop its process tree there as any step's; what it prints goes to
        ``on_output``, apart from the value. With the agent, calls run in a warm worker
        there that keeps its imports and globals until a stop (timeout, Ctrl-C, cancel)
        kills its tree; a call whose ``env``/``cwd`` differ gets a worker of its own
        (docs/api.md). The keywords above are the call's;
        the function gets every other one.

        >>> t.call(os.cpu_count)
        64
        """
        from remotekit.call import call

        return call(
            self.engine,
            fn,
            args,
            kwargs,
            pickle=pickle,
            timeout=timeout,
            env=env,
            cwd=cwd,
            on_output=on_output,
            step=step,
        )

    def run_python_at(
        self,
        hops: int,
        script: Script,
        args: Sequence[str] = (),
        *,
        python: str = "python3",
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        on_output: OutputCallback | None = None,
        step: str | None = None,
        capture: bool = True,
        stdin: Stdin | None = None,
    ) -> Result:
        """Run ``script`` with ``python`` inside only the first ``hops`` hops of the chain
        (0: on the node itself, before any hop; ``len(target.spec.hops)``: where the target's
        interpreter runs), as a process of its own (never on the agent). What runs there is
        what that level sees: none of the target's env, workdir or venv, which are the
        innermost level's; ``env`` is set. The rest (``stdin`` too) as for :meth:`run_python`.

        >>> t.run_python_at(0, Script(b"import os; print(os.listdir('/dev'))"))  # the node's
        """
        request = StepRequest.script(
            script,
            args,
            at=hops,
            python=python,
            display=(python, "-u", f"<shipped {shown_name(script)}>", *map(str, args)),
            step=step or script.name,
            timeout=timeout,
            env=env,
            check=check,
            on_output=on_output,
            capture=capture,
            stdin=stdin,
        )
        return run_step(self.engine, request)

    def forward(
        self,
        remote_port: int | None = None,
        *old: Any,
        local_port: int = 0,
        bind: str = "127.0.0.1",
        check: bool = True,
        on_error: Callable[[RemotekitError], None] | None = None,
        port: int | None = None,
    ) -> Forward:
        """Reach ``127.0.0.1:remote_port`` in the target's own network namespace from here.

        Listens on ``bind:local_port`` here (0: a free port; see ``.local_port``, ``.url``,
        ``.mapping``); each connection is relayed over its own channel through every layer of
        the target (see :mod:`remotekit.forward`). With ``check``, a port nothing listens on
        there raises :class:`~remotekit.errors.ForwardError` (``refused``) now. Close it (or
        leave the ``with``) to end every connection; nothing stays running there. ``on_error``
        hears each distinct failure of a later connection once (default: logged on
        ``remotekit.forward``).

        The ports are named, not placed: ``t.forward(6006, local_port=16006)``. The old
        names still work for one release, with a DeprecationWarning: ``port=`` for
        ``remote_port``, and ``local_port`` and ``bind`` given by position after it.
        """
        from remotekit.forward import Forward

        remote_port, local_port, bind = _forward_ports(remote_port, old, port, local_port, bind)
        self.engine.dry("forward", ("forward", str(remote_port)))
        fwd = Forward(self.engine, remote_port, local_port=local_port, bind=bind, on_error=on_error)
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
    ) -> Result | SyncResult:
        """Copy a local file there (atomically: a temp file beside it, then rename).

        ``parents`` creates the missing directories there first (``mkdir -p``): the one that
        holds ``remote_path``, or ``remote_path`` itself when it ends with ``/``.

        The file there gets the local file's mode (under the umask there), never wider than
        the mode of a file it replaces; ``mode=`` sets it exactly instead. ``on_progress(done,
        total)`` is called as bytes leave (``done`` never decreases; ``total`` is the size).

        A local directory is copied with all it holds, as ``scp -r`` and ``cp -r`` do: into
        ``remote_path`` under its own name when that is a directory there (or ends with
        ``/``), else as ``remote_path`` itself; a ``/`` at the end of ``local`` changes
        nothing (``rsync``'s "contents of" is :meth:`sync`'s). Files travel as a sync sends
        them (only those that differ; nothing there is removed), and the
        :class:`~remotekit.sync.SyncResult` is returned.
        """
        src = Path(local)
        if src.is_dir():
            if mode is not None:
                raise RemotekitError(f"put {src}: mode= is for one file", host=self.name)
            return self._put_tree(src, remote_path, parents, timeout, step, on_progress)
        return self._put_file(src, remote_path, mode, parents, timeout, step, on_progress)

    def _put_file(
        self,
        src: Path,
        remote_path: str,
        mode: int | None,
        parents: bool,
        timeout: float | None,
        step: str | None,
        on_progress: ProgressCallback | None,
    ) -> Result:
        """:meth:`put` of a regular file."""
        try:
            st = src.stat()
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block here, a device never end
                raise RemotekitError(
                    f"cannot put {src}: it is {kind_of(st.st_mode)}, not a regular file",
                    host=self.name,
                )
            size = st.st_size
            fh = src.open("rb")
        except OSError as exc:
            raise RemotekitError(
                f"cannot read local file {src}: {exc.strerror}", host=self.name
            ) from exc
        header = StepHeader(
            op="put",
            dest=remote_path,
            name=src.name,
            size=size,
            mode=stat.S_IMODE(st.st_mode) if mode is None else mode,
            explicit_mode=mode is not None,
            parents=parents,
        )
        with fh:
            request = StepRequest(
                header,
                display=("put", str(src), remote_path),
                step=step or f"put {remote_path}",
                payload=file_chunks(fh, size, on_progress),
                timeout=timeout,
            )
            return run_step(self.engine, request)

    def get(
        self,
        remote_path: str,
        local: str | os.PathLike[str],
        *,
        parents: bool = False,
        timeout: float | None = None,
        step: str | None = None,
        max_bytes: int = DEFAULT_GET_MAX_BYTES,
        on_progress: ProgressCallback | None = None,
    ) -> Result | SyncResult:
        """Copy a regular file from there to ``local`` (a temp file, renamed when complete).

        ``local`` may be a directory (the file keeps its name); one ending with ``/`` must be.
        ``parents`` creates the missing local directories first (``mkdir -p``): the one that
        holds ``local``, or ``local`` itself when it ends with ``/``.

        FIFOs, devices and sockets are refused, as is a file larger than ``max_bytes``. The
        local file gets the remote file's mode under our umask, never wider than the mode of
        a local file it replaces. ``on_progress(done, total)`` is called as bytes arrive,
        once the size there is known, and when the copy is complete.

        A directory there is copied with all it holds, as ``scp -r`` does, by :meth:`put`'s
        rule the other way round (into ``local`` under its own name when ``local`` is a
        directory, else as ``local``); files travel as a pull sends them (:meth:`sync`), and
        the :class:`~remotekit.sync.SyncResult` is returned (``max_bytes`` is per file).
        """
        # before the local side: a dry run makes no directory and no temp file here
        self.engine.dry(step or f"get {remote_path}", ("get", remote_path, os.fspath(local)))
        try:
            return self._get_file(
                remote_path, local, parents, timeout, step, max_bytes, on_progress
            )
        except StepFailed as exc:
            if exc.result is None or exc.result.exit_code != GET_IS_A_DIRECTORY:
                raise
        name = os.path.basename(remote_path.rstrip("/")) or remote_path
        dest = self._local_dest(local, name, parents)
        from remotekit.sync import pull

        return pull(self.engine, remote_path, dest, timeout=timeout, on_progress=on_progress)

    def _get_file(
        self,
        remote_path: str,
        local: str | os.PathLike[str],
        parents: bool,
        timeout: float | None,
        step: str | None,
        max_bytes: int,
        on_progress: ProgressCallback | None,
    ) -> Result:
        """:meth:`get` of a regular file."""
        dest = self._local_dest(local, os.path.basename(remote_path), parents)
        tmp = dest.with_name(f".{dest.name}.remotekit-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise RemotekitError(f"cannot write {dest}: {exc.strerror}", host=self.name) from exc
        ok = False
        got = [0]
        info: dict[str, Any] = {}

        def sink(data: bytes) -> None:
            got[0] += len(data)
            fh.write(data)
            if on_progress is not None and "size" in info:
                on_progress(got[0], int(info["size"]))

        try:
            with os.fdopen(fd, "wb") as fh:
                result = self.stream_file(
                    remote_path,
                    sink,
                    timeout=timeout,
                    step=step,
                    max_bytes=max_bytes,
                    info=info,
                    display=("get", remote_path, str(dest)),
                )
            if on_progress is not None:
                on_progress(got[0], int(info.get("size", got[0])))
            _land(tmp, dest, int(info.get("mode", 0o666)))
            ok = True
            return result
        finally:
            if not ok:
                tmp.unlink(missing_ok=True)

    def _put_tree(
        self,
        src: Path,
        remote_path: str,
        parents: bool,
        timeout: float | None,
        step: str | None,
        on_progress: ProgressCallback | None,
    ) -> SyncResult:
        """:meth:`put` of a directory: where it goes (one ``stat`` step), then a sync there."""
        from remotekit.sync import remote_root, sync

        name = step or f"put {remote_path}"
        self.engine.dry(name, ("put", "-r", str(src), remote_path))
        there = remote_root(self.engine, remote_path, timeout)
        into = remote_path.endswith("/")
        if there.get("exists") and not there.get("dir"):
            raise RemotekitError(
                f"cannot put directory {src} to {remote_path}: it exists there and is not a "
                "directory",
                host=self.name,
                step=name,
            )
        folder_missing = not there.get("exists") if into else not there.get("parent")
        if folder_missing and not parents:
            folder = remote_path if into else os.path.dirname(remote_path.rstrip("/"))
            raise RemotekitError(
                f"cannot put {src} to {remote_path}: directory {folder} does not exist there "
                "(put --parents creates it)",
                host=self.name,
                step=name,
            )
        dest = remote_path
        if into or there.get("exists"):
            dest = remote_path.rstrip("/") + "/" + (src.resolve().name or src.name)
        return sync(self.engine, src, dest, timeout=timeout, on_progress=on_progress)

    def _local_dest(self, local: str | os.PathLike[str], name: str, parents: bool) -> Path:
        """The local file a ``get`` writes: ``local``, or ``name`` in it when it is a directory;
        with ``parents``, its missing directories made first. A missing directory is an error
        naming it and the way out."""
        dest, into = Path(local), os.fspath(local).endswith(os.sep)
        folder = dest if into else dest.parent
        if parents:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RemotekitError(
                    f"cannot create {folder}: {exc.strerror}", host=self.name
                ) from exc
        if dest.is_dir():
            return dest / name
        if not folder.is_dir():
            raise RemotekitError(
                f"cannot write {local}: directory {folder} does not exist "
                "(get --parents creates it)",
                host=self.name,
            )
        return dest

    def stream_file(
        self,
        remote_path: str,
        sink: Callable[[bytes], Any],
        *,
        timeout: float | None = None,
        step: str | None = None,
        max_bytes: int | None = None,
        info: dict[str, Any] | None = None,
        display: tuple[str, ...] | None = None,
    ) -> Result:
        """The bytes of a regular file there, handed to ``sink`` piece by piece as they come
        (what :meth:`get` writes to its file; a run's ``logs``). The pieces are the file from
        its first byte to the end it had when read there, nothing else: after a failure, the
        bytes ``sink`` got are a prefix of it. ``info`` receives its ``mode`` and ``size``.
        Refused as :meth:`get` refuses; ``max_bytes`` None: no limit."""
        return stream_file(
            self.engine,
            remote_path,
            sink,
            timeout=timeout,
            step=step,
            max_bytes=max_bytes,
            info=info,
            display=display,
        )

    def sync(
        self,
        src: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
        timeout: float | None = None,
    ) -> SyncResult:
        """Make ``dest`` there hold the contents of the local directory ``src``: only changed
        files travel (size + mtime, then content hash), in a few steps; see :mod:`remotekit.sync`.

        The side written ``NAME:PATH`` with this target's name is the one there, as rsync's
        ``HOST:PATH``: ``t.sync("gpu1:/workspace/out", "./out")`` pulls (makes the local
        ``./out`` hold what ``/workspace/out`` holds there, by the same rules); a plain
        ``dest`` is a path there, as before.

        ``on_progress(bytes_done, bytes_total)`` is called as file bodies are sent.
        """
        from remotekit.sync import pull, sync

        there_src, there_dest = self._there(src), self._there(dest)
        if there_src is not None and there_dest is not None:
            raise RemotekitError(
                f"sync {os.fspath(src)} {dest}: both sides are there; one must be here",
                host=self.name,
            )
        if there_src is not None:
            return pull(
                self.engine,
                there_src,
                dest,
                delete=delete,
                exclude=exclude,
                dry_run=dry_run,
                on_progress=on_progress,
                timeout=timeout,
            )
        return sync(
            self.engine,
            src,
            there_dest if there_dest is not None else os.fspath(dest),
            delete=delete,
            exclude=exclude,
            dry_run=dry_run,
            on_progress=on_progress,
            timeout=timeout,
        )

    def _there(self, path: str | os.PathLike[str]) -> str | None:
        """The path there that ``path`` names as ``NAME:PATH`` with this target's name
        (rsync's and scp's ``HOST:PATH``), else None: a local path (``./gpu1:x`` is one).
        Another target's name is an error: it names no path of this one."""
        from remotekit.sync import host_path

        named = host_path(path)
        if named is None:
            return None
        if named[0] != self.name:
            raise RemotekitError(
                f"{os.fspath(path)} names the target {named[0]!r}, not this one; a local path "
                f"with a colon is written ./{os.fspath(path)}",
                host=self.name,
            )
        return named[1]

    # -- runs --------------------------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        """Every run (``detach=True``) recorded there: see :mod:`remotekit.runs`."""
        from remotekit.runs import list_runs

        return list_runs(self)

    def run_handle(self, run_id: str) -> Run:
        """The handle of run ``run_id`` (what ``run(..., detach=True)`` returned, found again:
        ``remotekit runs`` lists the ids): logs, wait, stop, rm."""
        from remotekit.runs import Run

        return Run(self, run_id)

    # -- shell -------------------------------------------------------------------------------

    def shell(
        self,
        argv: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: int = 0,
        stdout: int = 1,
        start_timeout: float = 60.0,
        terminal: bool = True,
    ) -> int:
        """Run ``argv`` (default: the login shell there) on a terminal inside the target, attached
        to ours (file descriptors ``stdin``/``stdout``), and return its exit status.

        The chain is the target's, each hop in its interactive form (a pty end to end), with
        the venv active, the target's env and ``env``, in ``cwd`` or the workdir (else the
        home directory). See :mod:`remotekit.shell`. ``start_timeout`` bounds the wait for
        the program there to start; a hop that cannot be entered raises its own error.
        ``terminal=False`` (``remotekit shell`` when its input is not a terminal, as
        ``ssh -T``): no pty anywhere; ``stdin`` is read to its end as the program's input, and
        its output comes as it is (no ``\\r``, no echo, no ^D for the end).
        """
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, e.g. ['python'], not one string")
        if not terminal:  # ssh -T: the input is a pipe or a file
            return self._shell_piped(argv, env, cwd, stdin, stdout)
        step = "shell"
        engine = self.engine
        engine.remember_secrets(env)
        engine.dry(step, ("shell", *(argv or ())))
        opened = engine.launch_for(step)  # first: a hop looked up by name is then known
        launch = shell.interactive(self.spec.hops, opened)
        term = self._terminal(launch, shell.window_size(stdout, stdin), step)
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

    def _shell_piped(
        self,
        argv: Sequence[str] | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: int,
        stdout: int,
    ) -> int:
        """:meth:`shell` for an input that is not a terminal (a pipe, a file): as ``ssh`` does
        then, no terminal there (no ``\\r``, no echo, EOF is the end of the input, not ^D): a
        step with the input as its stdin, its output to ``stdout`` (stderr to ours), and the
        program's status. No program: the login shell there reads the input."""

        def source() -> Iterator[bytes]:
            while chunk := os.read(stdin, 1 << 16):
                yield chunk

        def shown(stream: str, line: str) -> None:
            fd = stdout if stream == "stdout" else 2
            data = (line + "\n").encode("utf-8", "surrogateescape")
            while data:
                data = data[os.write(fd, data) :]

        program = list(argv) if argv else ["sh", "-c", 'exec "${SHELL:-/bin/sh}"']
        res = self.run(
            program,
            env=env,
            cwd=cwd,
            check=False,
            on_output=shown,
            capture=False,
            stdin=source(),
            timeout=MAX_TIMEOUT_S,
            step="shell",
        )
        return res.exit_code if res.exit_code is not None else 255

    def _terminal(self, launch: Launch, size: tuple[int, int], step: str) -> Terminal:
        """A terminal of ``size`` (columns, rows) running ``launch`` there."""
        transport = self.transport
        if not isinstance(transport, TerminalTransport):
            raise RemotekitError(
                f"{transport.label} cannot open a terminal", host=self.name, step=step
            )
        if self.trace is not None:
            self.trace(step, " -> ".join((transport.label, *launch.hops)))
        columns, rows = size
        term_name = os.environ.get("TERM") or "xterm-256color"
        try:
            return transport.open_terminal(launch.argv, term=term_name, columns=columns, rows=rows)
        except ExecutableMissing as exc:
            raise self.engine.missing(exc.path, step) from None
        except TimeoutError:
            raise RemotekitError(
                f"no free SSH session for the shell ({transport.label})", host=self.name, step=step
            ) from None
        except RemotekitError as exc:
            exc.host, exc.step = exc.host or self.name, exc.step or step
            raise

    def _shell_not_started(
        self, exc: NotStarted, argv: Sequence[str] | None, timeout: float
    ) -> RemotekitError:
        if exc.ready:
            return RemotekitError(
                f"the shell started but a terminal on the way stayed in line mode for"
                f" {timeout:g} s, so its request was not sent (it would have shown on the"
                f" screen): a hop of {self.chain} passed the program's output on without"
                " putting its terminal in raw mode. Give that hop a terminal (podman/docker"
                " exec -it, srun --pty, kubectl exec -it), or run the program without one:"
                " `remotekit run`, or `remotekit shell` with its input piped",
                host=self.name,
                step="shell",
            )
        if exc.code is None:
            return RemotekitError(
                f"the shell did not start within {timeout:g} s via {self.chain}",
                host=self.name,
                step="shell",
            )
        text = exc.output.decode("utf-8", "replace").replace("\r\n", "\n")
        display = tuple(argv or ("<login shell>",))
        res = Result(self.name, "shell", display, exc.code, text, "", 0.0, chain=self.chain)
        return self.engine.not_started(exc.code, res, "shell")

    # -- ping --------------------------------------------------------------------------------

    def ping(self, on_check: Callable[[Check], None] | None = None) -> PingReport:
        """Check each layer in turn (connection, sudo, container, interpreter, torch).

        Stops at the first layer that fails; that check says why (see :mod:`remotekit.ping`).
        """
        self.engine.dry("ping", ("ping",))
        return ping(self.engine, on_check)


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


def local_target(**overrides: Any) -> Target:
    """The ``local`` target (this machine, our own interpreter), optionally with overrides."""
    return Target(replace(LOCAL, **overrides) if overrides else LOCAL)


def _forward_ports(
    remote_port: int | None, old: tuple[Any, ...], port: int | None, local_port: int, bind: str
) -> tuple[Any, int, str]:
    """``Target.forward``'s ports, from the old names too (``port=``; the local port
    and the bind address by position): warned, for one release. Positional ports were
    (REMOTE, LOCAL) there and LOCAL:REMOTE on the command line (as ``ssh -L``): names end that."""
    if old or port is not None:
        if (port is not None and remote_port is not None) or len(old) > 2:
            raise TypeError("forward() takes remote_port, then local_port= and bind= by name")
        remote_port = port if port is not None else remote_port
        local_port = old[0] if old else local_port
        bind = old[1] if len(old) > 1 else bind
        named = [repr(remote_port), *([f"local_port={local_port!r}"] if local_port else [])]
        named += [f"bind={bind!r}"] if len(old) > 1 else []
        warnings.warn(
            f"forward() takes its ports by name now (port= and the local port by position "
            f"go in the next release): t.forward({', '.join(named)})",
            DeprecationWarning,
            stacklevel=4,  # the caller's line (past this helper, forward and masks_errors)
        )
    if remote_port is None:
        raise TypeError("forward() needs remote_port: the port there")
    return remote_port, local_port, bind
