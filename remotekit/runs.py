"""Runs: commands started with ``detach=True`` that keep running there after the step ends.

``t.run(argv, detach=True)`` (or ``run_python``) starts a **run**: the shipped supervisor
(``remote/supervisor.py``, its docstring holds the record format) starts the command in its
own session, records it under the runs dir there (hosts.yaml ``runs_dir:``, else
``$XDG_STATE_HOME``/``~/.local/state/remotekit/runs``), keeps its output (stdout, stderr, and
both interleaved) and records its exit. It returns the run's handle, a :class:`Run`
(``t.run_handle(id)`` makes one for a run found again, e.g. by ``t.runs()``)::

    run = t.run(["python", "train.py"], detach=True)
    print(run.id, run.state())                  # running
    for chunk in run.logs(follow=True):        # bytes, as written; resumes after a dropped link
        sys.stdout.buffer.write(chunk)
    run.wait().exit_code

Every operation is one step running the supervisor in another mode; nothing stays running
there for it (Ctrl-C or a closed iterator stops that step). The steps run on the target's
:class:`~remotekit.engine.Engine` (a run's target is its :class:`~remotekit.engine.Facade`),
and every error a run's handle raises leaves through its boundary, secrets masked, as the
Target's own do.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import queue
import secrets
import shlex
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

from remotekit import shipping
from remotekit.engine import Engine, Facade, masks_errors
from remotekit.errors import ConnectError, ConnectionLost, RemotekitError, StepFailed
from remotekit.follow import Resumable, Stopped
from remotekit.layers import Launch, compose
from remotekit.remote import protocol, runrecord
from remotekit.result import Result, Script, Shown, clip, table
from remotekit.spec import HostSpec
from remotekit.step import MAX_TIMEOUT_S, StepRequest, run_step, stream_file
from remotekit.transports import for_spec

__all__ = [
    "STATES",
    "STREAMS",
    "LogStream",
    "Run",
    "RunInfo",
    "check_id",
    "check_stream",
    "ended_code",
    "ended_words",
    "home_of",
    "list_runs",
    "prune",
    "render_runs",
    "start",
]


SUPERVISOR = "supervisor.py"
#: Where the supervisor's own files go beside a detached script's, so no name of yours clashes.
BESIDE = ".remotekit"
#: What a run can be: running; exited (by itself); stopped (by ``stop``); lost (its
#: supervisor vanished without recording an exit, e.g. the container restarted); corrupt (its
#: record failed its check: :mod:`remotekit.remote.runrecord`; never signalled, ``rm`` removes it).
STATES = (*runrecord.STATES, runrecord.CORRUPT)
#: The logs of a run: ``output`` (stdout and stderr as they came), ``stdout``, ``stderr``.
STREAMS = runrecord.STREAMS
#: The grace ``stop`` gives a run's tree between TERM and KILL, unless told.
STOP_GRACE_S = 10.0


@dataclass(frozen=True, repr=False)
class RunInfo(Shown):
    """One run as recorded there. ``started``/``ended`` are Unix times (``ended`` None while
    it runs); ``exit_code`` is 128+N for signal N, None until it ends (and for a lost run);
    ``job`` is a batch job's id (a run on a Slurm target), else None; ``lost_bytes``: the
    bytes of each log (``output``, ``stdout``, ``stderr``) that could not be written there
    (a full disk), none when nothing was lost. A ``corrupt`` run's record failed its check:
    ``problem`` says how (its ``id`` is shown escaped when it is not an id). Its ``str()`` is
    the table ``remotekit stop`` prints for it (:func:`render_runs`)."""

    id: str
    host: str
    state: str
    exit_code: int | None
    started: float
    ended: float | None
    command: tuple[str, ...]
    log: str
    pid: int | None = None
    job: str | None = None
    lost_bytes: dict[str, int] = field(default_factory=dict)
    problem: str | None = None

    repr_keys = ("id", "host", "state", "exit_code")

    @property
    def duration_s(self) -> float:
        return (self.ended if self.ended is not None else time.time()) - self.started

    @classmethod
    def from_record(cls, host: str, rec: dict[str, Any]) -> RunInfo:
        """The run of a ``run`` record, each field checked (:func:`runrecord.problem`): a
        record that fails is a ``corrupt`` run saying why, never an error, so one bad record
        does not hide the others."""
        if rec.get("state") == runrecord.CORRUPT:
            return cls._corrupt(host, rec, str(rec.get("problem") or "no reason given"))
        why = runrecord.problem(rec, runrecord.INFO)
        if why is not None:
            return cls._corrupt(host, rec, f"its record there: {why}")
        ended = rec.get("ended")
        return cls(
            id=rec["id"],
            host=rec.get("host") or host,
            state=rec["state"],
            exit_code=rec.get("exit_code"),
            started=float(rec["started"]),
            ended=None if ended is None else float(ended),
            command=tuple(rec["command"]),
            log=rec["log"],
            pid=rec.get("pid"),
            job=rec.get("job"),
            lost_bytes={k: n for k, n in (rec.get("lost_bytes") or {}).items() if n},
        )

    @classmethod
    def _corrupt(cls, host: str, rec: dict[str, Any], why: str) -> RunInfo:
        raw, log = rec.get("id"), rec.get("log")
        named = runrecord.is_id(raw)
        return cls(
            id=str(raw) if named else repr(raw),
            host=host,
            state=runrecord.CORRUPT,
            exit_code=None,
            started=0.0,
            ended=None,
            command=(),
            log=(log if named else repr(log)) if isinstance(log, str) else "",
            problem=why,
        )

    def render(self) -> str:
        return render_runs([self])


#: The runs table's columns a narrow terminal goes without, the first first (--wide: all):
#: ``remotekit logs ID`` reads the log, and the duration says how long ago a run began.
SPARE_COLUMNS = ("log", "started")


def render_runs(runs: Sequence[RunInfo]) -> str:
    """Runs as the table ``remotekit runs`` prints: id, state, exit code, started, duration,
    command, log (``no runs`` for none), and a ``job`` column (the batch job's id) when any
    run is a batch job."""
    if not runs:
        return "no runs"
    jobs = any(r.job for r in runs)
    lost = any(r.lost_bytes for r in runs)
    rows = [
        (
            r.id,
            *((r.job,) if jobs else ()),
            r.state,
            r.exit_code,
            *_times(r),
            *((r.lost_bytes.get("output"),) if lost else ()),
            _short(shlex.join(r.command)) if r.problem is None else r.problem,
            r.log,
        )
        for r in runs
    ]
    head = ["id", *(["job"] if jobs else []), "state", "exit", "started", "duration"]
    heads = [*head, *(["bytes lost"] if lost else []), "command", "log"]
    return table(heads, rows, optional=SPARE_COLUMNS)


def _times(r: RunInfo) -> tuple[str | None, str | None]:
    """Its started and duration columns (none for a corrupt record: it has no times)."""
    if r.state == runrecord.CORRUPT:
        return None, None
    return _when(r.started), _took(r.duration_s)


def _when(t: float | None) -> str | None:
    return None if not t else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _took(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _short(text: str, n: int = 60) -> str:
    return clip(text, n, "...")


def ended_code(state: str | None, exit_code: int | None) -> int:
    """The exit code ``logs --follow`` ends with for a run that ended so: its own (128+N for
    signal N), 2 when there is none to give (lost, its record corrupt or gone)."""
    if state in ("exited", "stopped"):
        return exit_code or 0
    return 2


def ended_words(state: str | None, exit_code: int | None) -> str:
    """How a run ended, in words: ``exited with code 3``, ``was stopped: exit 143 (signal
    15, SIGTERM)``, ``was lost (its supervisor vanished)``."""
    if state not in ("exited", "stopped"):
        return {
            "lost": "was lost (its supervisor vanished)",
            runrecord.CORRUPT: "has a corrupt record there",
            None: "is gone: its record was removed",
        }.get(state, f"is {state}")
    code = exit_code or 0
    said = "was stopped: exit" if state == "stopped" else "exited with code"
    if code > 128:
        with contextlib.suppress(ValueError):
            said += f" {code} (signal {code - 128}, {signal.Signals(code - 128).name})"
            return said
    return f"{said} {code}"


def new_id() -> str:
    return secrets.token_hex(4)


def check_id(run_id: str) -> None:
    """ValueError unless ``run_id`` is a run's id (letters, digits, ``_`` and ``-``, at most
    64): an id names a folder there, and must not climb out of it."""
    if not runrecord.is_id(run_id):
        raise ValueError(f"not a run id: {run_id!r}")


def check_stream(stream: str) -> None:
    """ValueError unless ``stream`` is one of a run's logs (:data:`STREAMS`)."""
    if stream not in STREAMS:
        raise ValueError(f"not a log of a run: {stream!r} (output, stdout or stderr)")


def start(target: Facade, request: StepRequest, script: Script | None = None) -> Run:
    """Start the run ``request`` asks for on ``target``: what ``run(..., detach=True)`` and
    ``run_python(..., detach=True)`` do with the request they built. The run's command is the
    request's argv; with ``script`` (the request's, its files in it), that script with those
    arguments. The supervisor's step keeps the request's display, name, timeout, env, cwd and
    ``on_output``, and is checked (the run's own exit code comes from ``wait``). A run that
    did not start raises StepFailed (its exit code and words): there is no run to hand back."""
    engine = target.engine
    engine.remember_secrets(request.env)  # the run's later calls are masked with them too
    spec, step, run_id = engine.spec, request.step, new_id()
    args = ["start", run_id, "--host", engine.name, "--display", json.dumps(request.display)]
    args += ["--grace", str(spec.timeouts.kill_grace), *_runs_dir(spec)]
    command, batch = _command(engine, list(request.header.argv), script is not None, run_id, step)
    sup = _with_supervisor(script)
    args += [*batch, *(["--script", script.name] if script is not None else []), "--", *command]
    told, refusal = request.on_output, f"remotekit: run {run_id} on "

    def shown(stream: str, line: str) -> None:  # a refusal is raised as the error, not shown
        if told is not None and not line.startswith(refusal):
            told(stream, line)

    supervised = StepRequest.script(
        sup,
        args,
        detach=True,
        report=True,
        display=request.display,
        step=step,
        timeout=request.timeout,
        env=request.env,
        cwd=request.cwd,
        on_output=None if told is None else shown,
    )
    try:
        res = run_step(home_of(target), supervised)
    except StepFailed as exc:
        refused = _refused(exc.result, run_id)
        if refused is None:
            raise
        raise RemotekitError(refused, host=engine.name, step=step) from None
    assert res.detached is not None and res.detached.id, res  # the supervisor reported it
    return Run(target, res.detached.id, result=res)


def _command(
    engine: Engine, command: list[str], script: bool, run_id: str, step: str
) -> tuple[list[str], list[str]]:
    """What the supervisor starts, and the arguments that say so: ``command``; or, where a
    run is started from outside a hop (:func:`_outside_hop`), the task of that hop the
    supervisor holds, or the batch job it submits (``--batch``: the job's files there)."""
    hops = engine.spec.hops
    at = _outside_hop(engine.spec)
    if at is None:
        return command, []
    outside = hops[at]
    # through the hops inside the job's (sudo): they stay in its tree
    inner = compose(reversed(hops[at + 1 :]), Launch(argv=tuple(command)))
    held = outside.held(inner.argv)  # a task the supervisor holds (a found group's rank)
    job = outside.batch(inner.argv, f"remotekit-{run_id}")  # its env and cwd: sbatch's own
    if script:
        what = "a batch job" if job is not None else "a task the login node starts"
        raise RemotekitError(
            f"a detached run through {outside.label} is {what}, which runs a command: "
            "put the script where the job's node can read it, and run it with run --detach",
            host=engine.name,
            step=step,
        )
    if held is not None:
        return list(held), []
    assert job is not None
    there = {f.name: getattr(job, f.name) for f in fields(job) if f.name != "submit"}
    return list(job.submit), ["--batch", json.dumps(there)]


def _refused(res: Result | None, run_id: str) -> str | None:
    """The supervisor's one line saying why run ``run_id`` was not started (nothing runs, no
    record is left: a full disk), when that is why the step failed; else None."""
    for line in reversed((res.stderr if res is not None else "").splitlines()):
        said = line.removeprefix("remotekit: ")
        if said.startswith(f"run {run_id} on "):
            return said
    return None


def _with_supervisor(script: Script | None) -> Script:
    """The supervisor as the step's script (from the shipped package); a detached script and
    its files in the step's folder."""
    sup = shipping.script(SUPERVISOR)
    files: dict[str, bytes] = {}
    if script is not None:
        theirs = {script.name: script.source, **script.files}
        clash = [n for n in theirs if n.split("/")[0] == BESIDE]
        if clash:
            raise ValueError(f"{clash[0]!r}: a detached script's files may not be under {BESIDE}/")
        files.update(theirs)
    return replace(sup, files=files)


def _outside_hop(spec: HostSpec) -> int | None:
    """The index of the hop a detached run is started from outside of: as a batch job (a
    Slurm hop), or as a task the run's supervisor holds (a found group's rank:
    :meth:`~remotekit.layers.Hop.held`), when the run would stay in that hop's step: no hop
    inside it enters a tree of its own (a container inside the job keeps a run started in it
    alive, as on any container)."""
    hops = spec.hops
    for i in reversed(range(len(hops))):
        if hops[i].batch((), "") is not None or hops[i].held(()) is not None:
            return i
        if hops[i].own_tree:
            return None
    return None


#: The engine a run's supervisor lives on, for a target whose hop runs detached runs as batch
#: jobs: the same chain without that hop (the login node), opened once.
_HOMES: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_HOMES_LOCK = threading.Lock()


def home_of(target: Facade) -> Engine:
    """Where ``target``'s runs are recorded and supervised: its engine, or for a Slurm target
    the login node's (its chain without the ``srun`` hop), where ``sbatch`` submits the job
    (or, for a found group's rank, where the supervisor holds its ``srun``); that one is
    opened as the target's is (its capture limit, agent as hosts.yaml says, dry run)."""
    engine = target.engine
    at = _outside_hop(engine.spec)
    if at is None:
        return engine
    with _HOMES_LOCK:
        home = _HOMES.get(engine)
        if home is None:
            outside = replace(engine.spec, hops=engine.spec.hops[:at])
            limit, dry = engine.capture_limit, engine.dry_run
            home = Engine(
                outside, for_spec(outside), capture_limit=limit, agent=outside.agent, dry_run=dry
            )
            _HOMES[engine] = home
        return home


def _runs_dir(spec: HostSpec) -> list[str]:
    return ["--runs-dir", spec.runs_dir] if spec.runs_dir else []


def list_runs(target: Facade, run_id: str = "") -> list[RunInfo]:
    """Every run recorded on ``target`` (or only run ``run_id``), oldest first."""
    with target.engine.boundary():
        records = _call(target, "list", [run_id] if run_id else [])
    found = [RunInfo.from_record(target.name, r) for r in records if r.get("type") == "run"]
    if "/" in target.name:  # a found group's member (remotekit.found) shares its via host's
        found = [r for r in found if r.host == target.name]  # runs dir: its own runs there
    return sorted(found, key=lambda r: (r.started, r.id))


def _call(
    target: Facade,
    mode: str,
    args: Sequence[str],
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """The supervisor in ``mode``: its records (or each to ``on_record``); its error record
    raised as a RemotekitError; a step cut off before its final record as ConnectionLost."""
    home = home_of(target)
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    said: list[str] = []
    step = f"runs {mode}" + (f" {args[0]}" if args else "")

    def on_output(stream: str, line: str) -> None:
        rec = protocol.parse(line) if stream == "stdout" else None
        if rec is None:
            said.append(line)
            del said[:-10]
        elif rec["type"] == "error":
            errors.append(str(rec.get("message", "")))
        elif on_record is not None and rec["type"] != protocol.FINAL:
            on_record(rec)
        else:
            records.append(rec)

    sup, argv = shipping.script(SUPERVISOR), [mode, *args, *_runs_dir(home.spec)]
    request = StepRequest.script(
        sup,
        argv,
        display=home.python_display(shipping.shown_name(sup), argv),
        step=step,
        timeout=timeout,
        check=False,
        on_output=on_output,
        capture=False,
    )
    res = run_step(home, request)
    if errors:
        raise RemotekitError("; ".join(errors), host=home.name, step=step)
    if not records or records[-1].get("type") != protocol.FINAL:
        if said:  # it said why (a traceback): the far side's error, not a lost connection
            raise RemotekitError(
                f"the supervisor there failed (exit {res.exit_code}): " + " | ".join(said[-3:]),
                host=home.name,
                step=step,
            )
        raise ConnectionLost(
            f"the {step} step ended (exit {res.exit_code}) before its final record, "
            "without a word: its process there is gone",
            result=res,
            host=home.name,
            step=step,
        )
    return records


def prune(target: Facade, older_than_s: float = 0.0) -> list[str]:
    """Remove the record of every run on ``target`` that ended (exited, stopped or lost) at
    least ``older_than_s`` seconds ago; the ids removed."""
    args = ["--finished", "--older-than", str(older_than_s)]
    with target.engine.boundary():
        final = _call(target, "rm", args)[-1]
    return [str(i) for i in final.get("removed") or ()]


@masks_errors
class Run(Shown):
    """The handle of run ``id`` on ``target``: what ``target.run(..., detach=True)`` returns,
    or ``target.run_handle(id)`` for a run found again.

    ``result`` is the Result of the step that started it (``result.detached``: the command's
    pid, the log, the shipped files' dir; ``result.argv``, ``chain``, ``duration_s``), or
    None for a handle made from an id. Every other answer is read there when asked.
    Showing it asks nothing of the host (a notebook's display never waits on a connection):
    its ``str()`` is ``run ID on HOST``; :meth:`info` is the run's record as it is now.
    """

    repr_keys = ("id", "host")

    def __init__(self, target: Facade, run_id: str, *, result: Result | None = None):
        check_id(run_id)
        self.target = target
        self.id = run_id
        self.result = result

    @property
    def engine(self) -> Engine:
        """The target's engine: every error of the run's calls leaves through its boundary."""
        return self.target.engine

    @property
    def host(self) -> str:
        return self.target.name

    def render(self) -> str:
        return f"run {self.id} on {self.host}"

    def info(self) -> RunInfo:
        """The run's record as it is now."""
        found = list_runs(self.target, self.id)
        if not found:
            raise RemotekitError(f"no run {self.id}", host=self.target.name, step="runs")
        return found[0]

    def state(self) -> str:
        """``running``, ``exited``, ``stopped`` or ``lost``."""
        return self.info().state

    def logs(
        self,
        follow: bool = False,
        tail: int | None = None,
        offset: int | None = None,
        stream: str = "output",
        on_warning: Callable[[str], None] | None = None,
    ) -> LogStream:
        """The run's output as bytes chunks (``stream``: ``output``, ``stdout`` or ``stderr``),
        from ``offset`` or the last ``tail`` lines (default: the start). With ``follow``, until
        the run ended and all of it came; a dropped connection is reconnected and the output
        resumes at the byte it stopped at: nothing lost, nothing twice. A log truncated or
        replaced there while it is followed is followed again from its start, and
        ``on_warning`` (default: :func:`warnings.warn`) is told so. ValueError for a stream
        that is none of those, or a negative ``tail`` or ``offset``."""
        check_stream(stream)
        for name, value in (("tail", tail), ("offset", offset)):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be 0 or more, not {value}")
        return LogStream(
            self, follow=follow, tail=tail, offset=offset, stream=stream, on_warning=on_warning
        )

    def wait(self, timeout: float | None = None) -> RunInfo:
        """Block until the run ends (reconnecting if the connection drops); its record."""
        limit = timeout or MAX_TIMEOUT_S
        records = Resumable().run(lambda: _call(self.target, "wait", [self.id], timeout=limit))
        return RunInfo.from_record(self.target.name, records[0])

    def stop(self, grace: float = STOP_GRACE_S) -> RunInfo:
        """TERM the run's whole tree (its own session, setsid children, double-forked daemons:
        the supervisor is their subreaper), KILL what is left after ``grace`` s."""
        args = [self.id, "--grace", str(grace)]
        records = _call(self.target, "stop", args, timeout=grace + 60.0)
        return RunInfo.from_record(self.target.name, records[0])

    def rm(self) -> None:
        """Remove the record of a run that ended (refused while it runs)."""
        _call(self.target, "rm", [self.id])


@masks_errors
class LogStream:
    """An iterator of a run's output chunks (bytes). ``offset`` is where the chunks the
    reader took end in the log (a chunk is taken once the reader asks for the next one or
    closes the iterator; before the first, where the read starts; None until that is
    known): a later ``run.logs(offset=stream.offset)`` goes on from there with nothing lost
    and nothing twice, also after a break, a Ctrl-C or an error mid-way. After it ends,
    ``state`` and ``exit_code`` are the run's, and ``lost_bytes`` how many bytes of this log
    could not be written there (a full disk). A log truncated or replaced mid-follow is
    followed from its start again: ``offset`` goes back to 0, ``resets`` counts it, and the
    warning goes to ``on_warning`` and ``warnings``. Closing it early stops the step. A
    dropped or silent connection is connected again by the one resumable stream
    (:class:`remotekit.follow.Resumable`), that ``train-log --follow`` uses too."""

    def __init__(
        self,
        run: Run,
        *,
        follow: bool,
        tail: int | None,
        offset: int | None,
        stream: str,
        on_warning: Callable[[str], None] | None = None,
    ):
        self.run = run
        self.follow, self.tail, self.stream = follow, tail, stream
        self.on_warning = on_warning
        self.offset: int | None = None
        self._read = offset  # where the worker's next byte is read from
        self.state: str | None = None
        self.exit_code: int | None = None
        self.lost_bytes = 0
        self.resets = 0
        self.warnings: list[str] = []
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=16)
        self._closed = threading.Event()
        close = (lambda: home_of(run.target).close()) if follow else None  # the supervisor beats
        self._stream = Resumable(close, stop=self._closed)

    @property
    def engine(self) -> Engine:
        """The run's target's engine: an error met while iterating leaves through it."""
        return self.run.engine

    def __iter__(self) -> Iterator[bytes]:
        worker = threading.Thread(target=self._work, name=f"logs {self.run.id}", daemon=True)
        worker.start()
        try:
            while True:
                try:  # in slices: a Ctrl-C taken by another thread is seen (see Forward.wait)
                    kind, data = self._queue.get(timeout=0.25)
                except queue.Empty:
                    continue
                if kind == "data":
                    chunk, end = data
                    try:
                        yield chunk
                    finally:  # the reader came back for more, or closed us: it has this one
                        self.offset = end
                elif kind == "at":  # the queue is in order: what came before was handed out
                    self.offset = data
                elif kind == "reset":
                    self._reset(data)
                elif kind == "error":
                    raise data
                else:
                    self._end(data)
                    return
        finally:
            self._closed.set()
            while worker.is_alive():  # unblock a worker waiting to hand over a chunk
                with contextlib.suppress(queue.Empty):
                    self._queue.get(timeout=0.05)

    def _reset(self, message: str) -> None:
        self.offset = 0
        self.resets += 1
        said = self.engine.redact(f"run {self.run.id} on {self.run.host}: {message}")
        self.warnings.append(said)
        if self.on_warning is not None:
            self.on_warning(said)
        else:
            warnings.warn(said, stacklevel=3)

    def _end(self, done: dict[str, Any]) -> None:
        code, lost = done.get("run_exit_code"), done.get("lost_bytes")
        self.state = done.get("state") if done.get("state") in STATES else None
        self.exit_code = code if type(code) is int else None
        self.lost_bytes = lost if type(lost) is int and lost > 0 else 0

    def _put(self, item: tuple[str, Any]) -> None:
        while not self._closed.is_set():
            try:
                return self._queue.put(item, timeout=0.25)
            except queue.Full:
                continue
        raise Stopped

    def _args(self) -> list[str]:
        args = [self.run.id, "--stream", self.stream]
        if self._read is not None:
            args += ["--offset", str(self._read)]
        elif self.tail is not None:
            args += ["--tail", str(self.tail)]
        return args + (["--follow"] if self.follow else [])

    def _on_record(self, rec: dict[str, Any]) -> None:
        self._stream.heard()
        kind, at = rec.get("type"), rec.get("at")
        if kind == "start" and isinstance(at, int):
            self._read = at
            self._put(("at", at))
        elif kind == "reset" and at == 0:  # the log was truncated or replaced: from its start
            self._read = 0
            self._put(("reset", str(rec.get("message", ""))))
        elif kind == "data" and isinstance(at, int):
            data = str(rec.get("bytes", "")).encode("latin-1")  # one code point a byte
            skip = (self._read or 0) - at  # a resumed read starts where we stopped: 0
            if skip < 0:
                self._gap(at)
            if len(data) > skip:
                self._put(("data", (data[max(skip, 0) :], at + len(data))))
                self._read = at + len(data)
                self._stream.moved()

    def _gap(self, at: int) -> None:
        raise RemotekitError(
            f"the log of run {self.run.id} came back with bytes {self._read}..{at} missing "
            "(a record was cut on the way)",
            host=self.run.target.name,
            step="runs logs",
        )

    def _once(self) -> list[dict[str, Any]]:
        """One connection's read, from where the last one stopped."""
        limit = MAX_TIMEOUT_S if self.follow else None
        args = self._args()
        records = _call(self.run.target, "logs", args, on_record=self._on_record, timeout=limit)
        end = records[-1].get("offset")
        if isinstance(end, int) and end != self._read:
            self._gap(end)
        return records

    def _whole(self) -> dict[str, Any] | None:
        """The whole log, no follow: its file's bytes from the start, on the engine's raw
        byte path (what ``get`` does), not as records, which cost the supervisor an
        encoding and us a decoding of every byte (a quarter of ``ssh cat``'s throughput).
        The state is the run's before the read: an ended run's log is all there. None when
        the connection dropped on the way: the records go on from where it stopped."""
        info = Resumable().run(self.run.info)
        path = posixpath.join(posixpath.dirname(info.log), f"{self.stream}.log")
        self._read = 0
        self._put(("at", 0))

        def sink(data: bytes) -> None:
            end = (self._read or 0) + len(data)
            self._put(("data", (data, end)))
            self._read = end

        try:
            stream_file(home_of(self.run.target), path, sink, step=f"runs logs {self.run.id}")
        except (ConnectionLost, ConnectError):
            return None
        lost = info.lost_bytes.get(self.stream, 0)
        return {
            "state": info.state,
            "run_exit_code": info.exit_code,
            "offset": self._read,
            "lost_bytes": lost,
        }

    def _work(self) -> None:
        try:
            plain = not self.follow and self._read is None and self.tail is None
            done = self._whole() if plain else None
            if done is None:
                done = self._stream.run(self._once)[-1]
            self._put(("done", done))
        except Stopped:
            pass
        except BaseException as exc:  # handed to the reader's thread
            with contextlib.suppress(Stopped):
                self._put(("error", exc))
