"""The step engine of one target: what every step runs on, as one object.

A :class:`~remotekit.target.Target` (the public facade) holds one :class:`Engine`; the modules
that run steps (:mod:`remotekit.step`, :mod:`remotekit.ping`, :mod:`remotekit.forward`,
:mod:`remotekit.sync`) are handed it and use its public methods only. It owns:

- the host spec and the transport;
- the launch chain, resolved once: :meth:`Engine.launch_for` looks up what a hop needs (a
  Slurm job given by name) before the first step; and the hops' own words when a step went
  wrong (:meth:`Engine.missing`, :meth:`Engine.not_started`, :meth:`Engine.probe`);
- cancellation: each running step's process is :meth:`Engine.tracked`, :meth:`Engine.cancel`
  wakes every one (:meth:`~remotekit.transports.base.Process.cancel`);
- secrets: the values of the spec's and every step's ``secret_env``, and the one place they
  are masked, :meth:`Engine.boundary`, that every error of a Target or a run leaves through;
- :meth:`Engine.start_step`: the one place a step starts: with :attr:`Engine.use_agent` (the
  default), a message to the target's one resident agent (:mod:`remotekit.agent`), started
  there on the first step and again after it died; :meth:`Engine.close` stops it with its
  steps. Without it (hosts.yaml ``agent: false``, ``Target(agent=False)``, ``--no-agent``, or
  an agent that could not run there: :meth:`Engine.agent_status` says which), the step's runner
  is started through the whole chain, with its header and payload on stdin.

It imports none of the modules that use it (``step``, ``ping``, ``forward``, ``sync``,
``runs``, ``target``), not even for types: they name the Target by its base, :class:`Facade`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import re
import shlex
import threading
import time
import warnings
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable, TypeVar

from remotekit import shipping
from remotekit.agent import Agent
from remotekit.errors import (
    AgentUnavailable,
    DryRun,
    InterpreterNotFound,
    RemotekitError,
    StepCancelled,
    caller_level,
    interrupted,
    quote_tool,
)
from remotekit.layers import Interpreter, Launch, compose
from remotekit.result import Result
from remotekit.spec import HostSpec
from remotekit.transports.base import (
    SLICE_S,
    Cancelled,
    ExecutableMissing,
    Exit,
    Output,
    Process,
    Transport,
    next_event,
)

__all__ = ["MIN_SECRET_LINE", "Engine", "Facade", "mask", "masks_errors"]


class Engine:
    """The step machinery of one target (its spec, transport, launch, cancellation, secrets)."""

    def __init__(
        self,
        spec: HostSpec,
        transport: Transport,
        *,
        capture_limit: int,
        agent: bool = True,
        dry_run: bool = False,
    ):
        self.spec = spec
        #: Every step is reported (:meth:`dry`) instead of run; nothing connects.
        self.dry_run = dry_run
        self.name = spec.name
        self.transport = transport
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
        self.remember_secrets(spec.env)
        self._asked = agent
        self._fallen: str | None = None  # why the agent could not run here, once it could not
        #: Whether steps run as messages to one resident agent there (:mod:`remotekit.agent`):
        #: asked for, until it could not run there (:meth:`agent_status`).
        self.use_agent = agent
        self._agent: Agent | None = None
        self._agent_lock = threading.Lock()
        self._no_cache: set[str] = set()  # the launch chains whose runner keeps no package

    # -- the shipped package -----------------------------------------------------------------

    def sends_package(self, launch: Launch) -> bool:
        """Whether a step through ``launch`` sends the package it runs from behind its header
        (:mod:`remotekit.shipping`): only where the runner keeps none (a read-only home);
        elsewhere it is sent when the runner says it is ``missing`` (once per host and
        version, unless its cache is cleared)."""
        return launch.chain in self._no_cache

    def keeps_packages(self, launch: Launch, cache: bool) -> None:
        """What the runner through ``launch`` said: whether it keeps the packages it gets."""
        with self._lock:
            if cache:
                self._no_cache.discard(launch.chain)
            else:
                self._no_cache.add(launch.chain)

    # -- secrets -----------------------------------------------------------------------------

    def remember_secrets(self, env: Mapping[str, str] | None) -> None:
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
        """``text`` with every secret value of this target replaced by ``***`` (see
        :meth:`remotekit.target.Target.redact`)."""
        with self._lock:
            values = list(self._secrets)
        return mask(text, values)

    def redacted(self, exc: RemotekitError) -> RemotekitError:
        """``exc`` with this target's secrets masked in its message (the same object): see
        :meth:`boundary` (a thread that reports an error, not raising it, calls it itself)."""
        exc.message = self.redact(exc.message)
        exc.args = tuple(self.redact(a) if isinstance(a, str) else a for a in exc.args)
        return exc

    @contextlib.contextmanager
    def boundary(self) -> Iterator[None]:
        """Where every error leaves this target: a RemotekitError raised in the block (by a
        step, a transfer, the far side's words read here, a check here) leaves with the
        target's secrets masked (:meth:`redacted`). The one place they are: each public
        method of a Target, a run's handle and a forward enters it (:func:`masks_errors`)."""
        try:
            yield
        except RemotekitError as exc:
            self.redacted(exc)
            raise
        except KeyboardInterrupt as exc:
            if type(exc) is not KeyboardInterrupt or hasattr(exc, "_render_traceback_"):
                raise  # a fleet's own, or one already said
            raise interrupted(self.name) from None

    # -- the chain ---------------------------------------------------------------------------

    @property
    def chain(self) -> str:
        """The layer chain, e.g. ``ssh root@kpro6 -> pct exec 200 -> /root/venv/bin/python``."""
        return self.chain_of(self.launch)

    def chain_of(self, launch: Launch) -> str:
        """The chain of ``launch`` (the target's, or one of :meth:`launch_at`)."""
        return f"{self.transport.label} -> {launch.chain}"

    def step_chain(self, argv: Sequence[str], launch: Launch | None = None) -> str:
        """The chain a step runs through, ending in its own command (``-u <check.py>`` ...)."""
        hops = (launch or self.launch).hops[:-1]
        return " -> ".join([self.transport.label, *hops, shlex.join(argv)])

    def dry(self, step: str, display: Sequence[str], launch: Launch | None = None) -> None:
        """With ``dry_run``: hand the step's chain to :attr:`trace` and raise
        :class:`DryRun` before anything runs or connects (a Slurm job given by name is not
        looked up either); without it, nothing."""
        if not self.dry_run:
            return
        chain = self.step_chain(display, launch)
        if self.trace is not None:
            self.trace(step, chain)
        raise DryRun(chain, host=self.name, step=step)

    def python_display(self, script_name: str, args: Sequence[Any] = ()) -> tuple[str, ...]:
        """The command a shipped script's step shows (``python -u <shipped check.py> ...``)."""
        interpreter = self.launch.interpreter or "python"
        return (interpreter, "-u", f"<shipped {script_name}>", *map(str, args))

    # -- cancellation ------------------------------------------------------------------------

    def cancel(self) -> None:
        """Wake every tracked process with a cancel, and refuse new steps until :meth:`resume`."""
        self._cancelled.set()
        with self._lock:
            for proc in self._active:
                proc.cancel()

    def resume(self) -> None:
        self._cancelled.clear()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @contextlib.contextmanager
    def tracked(self, proc: Process) -> Iterator[Process]:
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

    # -- starting a step ---------------------------------------------------------------------

    def start_step(
        self,
        launch: Launch,
        header: bytes,
        body: Iterable[bytes],
        wait: float | None,
        agent: bool = True,
    ) -> Process:
        """Start the runner through ``launch``: on its stdin the runner, ``header`` (the step's
        JSON header) and ``body`` (the step's bytes). ``wait`` bounds the wait for a free slot
        (TimeoutError); an executable not found there raises ExecutableMissing. ``agent``
        False: a process of its own, whatever :attr:`use_agent` says (a step at another
        place of the chain than the agent's: :meth:`launch_at`).

        Every step that runs the runner starts here, and only here (a probe and a forward's
        relay are bare commands on channels of their own): a process held there that takes
        steps as messages replaces this one method, returning a Channel per step with the
        same events: with :attr:`use_agent`, the agent (:meth:`agent`) does."""
        held = self._ready_agent(launch, wait) if agent and self.use_agent else None
        if held is not None:
            return held.start(header, body)
        first = b"".join([shipping.runner_first(), f"{len(header)}\n".encode(), header])
        return self.transport.start(launch.argv, itertools.chain([first], body), wait=wait)

    def agent(self, launch: Launch) -> Agent | None:
        """The target's agent, started through ``launch`` when there is none or it died;
        None when steps run without one."""
        with self._agent_lock:
            if not self.use_agent:
                return None
            if self._agent is None or not self._agent.alive:
                grace = self.spec.timeouts.kill_grace
                self._agent = Agent(self.transport, launch, self.name, self.chain, grace=grace)
            return self._agent

    def _ready_agent(self, launch: Launch, wait: float | None) -> Agent | None:
        """The agent to start a step on, once it said hello (or died: the step then gets its
        words); None when it cannot run here, after :meth:`_fall_back`. The step's payload is
        not touched before this answers, so the step can still run without an agent.

        An agent that sat idle (no step running, and nothing from it for QUIET_S) answers a
        probe first (one round trip): its channel may have dropped, or gone silent, since it
        last spoke, and a step sent into it would be lost with it. One that does not answer
        within timeouts.connect is let go, and the step goes to a new agent (the transport
        reconnects, with its note) and runs once, as a step does whose held connection is
        found dead before its channel opens. One heard within QUIET_S (back-to-back steps)
        takes the step without a probe: a link that died in that moment fails the step as
        one that dies under a running step does, never running it: a dropped one at once
        (ConnectionLost naming the agent and host; where the drop was seen first, the step
        goes to a new agent as above), a silent one at the step's timeout (StepTimeout)."""
        agent = self.agent(launch)
        if agent is not None and agent.idle and not agent.answers(self.spec.timeouts.connect):
            self._discard(agent)
            agent = self.agent(launch)
        if agent is None:  # another step found it cannot run here
            return None
        hello_by = agent.started + self.spec.timeouts.connect
        wait_by = None if wait is None else time.monotonic() + wait
        while not agent.wait_ready(SLICE_S):
            now = time.monotonic()
            if self.cancelled or (wait_by is not None and now >= wait_by):
                return agent  # the step stops as any other, on its agent
            if now >= hello_by:
                connect = self.spec.timeouts.connect
                self._fall_back(
                    agent,
                    f"it said nothing within {connect:g} s (timeouts.connect): something on "
                    "the way holds back or changes its output",
                )
                return None
        if agent.refused is not None:
            self._fall_back(agent, agent.refused)
            return None
        return agent

    def _discard(self, agent: Agent) -> None:
        """Let go of an agent whose channel is dead or silent (the next one starts anew)."""
        with self._agent_lock:
            if self._agent is agent:
                self._agent = None
        threading.Thread(target=agent.close, daemon=True).start()

    def _fall_back(self, agent: Agent, why: str) -> None:
        """The agent cannot run here: every step of this target from now on runs as a
        process of its own; said once, as an :class:`AgentUnavailable` note."""
        with self._agent_lock:
            first, self.use_agent = self.use_agent, False
            self._fallen = why
        self._discard(agent)
        if first:
            warnings.warn(
                self.redact(
                    f"{self.name}: the remotekit agent cannot run via {self.chain}: {why}; "
                    "each step runs as a process of its own (as with `agent: false`)"
                ),
                AgentUnavailable,
                stacklevel=caller_level(),
            )

    def agent_status(self) -> str:
        """The agent in words, as ping shows it: its pid there, or why steps run without it."""
        if self._fallen is not None:
            return f"off: {self._fallen}; one process per step"
        if not self._asked:
            return "off (agent: false); one process per step"
        agent = self._agent
        if agent is None or not agent.alive or agent.pid is None:
            return "on: started by the first step"
        return f"on (pid {agent.pid} there): every step is a message to it"

    def close(self) -> None:
        """Stop the agent (it stops its steps) and close the transport."""
        with self._agent_lock:
            agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()
        self.transport.close()

    # -- hops: looked up before the first step, asked when the runner did not start -----------

    def launch_for(self, step: str) -> Launch:
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
                    code, text = self.probe(self.inside(i, lookup))
                    try:
                        hops[i] = hop.resolved(code, text, self.name)
                    except RemotekitError as exc:
                        exc.step = step
                        raise
            self.spec = replace(self.spec, hops=tuple(hops))
            self.launch = compose(self.spec.layers())
            self._opened = True

    def inside(self, n: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the first ``n`` hops (e.g. a probe under sudo, or the probe of
        hop ``n`` where that hop's tool runs)."""
        return list(compose(reversed(self.spec.hops[:n]), Launch(argv=tuple(argv))).argv)

    def launch_at(self, n: int, python: str, step: str) -> Launch:
        """The launch of a step run by ``python`` inside the first ``n`` hops (0: on the node
        itself), as a process of its own there: none of the target's env, workdir or venv,
        which are the innermost level's (e.g. what each level of the chain sees)."""
        if not 0 <= n <= len(self.spec.hops):
            raise ValueError(f"{n} hops: the chain has {len(self.spec.hops)}")
        if not self.dry_run:  # a hop given by name (a Slurm job) is looked up first
            self.launch_for(step)
        return compose([Interpreter(python), *reversed(self.spec.hops[:n])])

    def missing(self, path: str, step: str, launch: Launch | None = None) -> RemotekitError:
        """The error for an executable the transport could not find: interpreter, hop tool,
        other."""
        launch = launch or self.launch
        chain = self.chain_of(launch)
        if path == launch.interpreter:
            return InterpreterNotFound(
                f"interpreter {path} not found ({chain})", path=path, host=self.name, step=step
            )
        for i, hop in enumerate(self.spec.hops):
            if path == hop.executable:
                return hop.missing(self.name, step, *self.hop_place(i))
        return RemotekitError(f"{path!r} not found ({chain})", host=self.name, step=step)

    def hop_place(self, i: int) -> tuple[str, str]:
        """Where hop ``i``'s tool is looked for (the node: the SSH host or this machine; or
        the hop it runs in, ``container 200``; sudo enters nothing) and where hosts.yaml sets
        it (``path:line``): what its "not found" says."""
        hops, spec = self.spec.hops, self.spec
        inside = [h for h in hops[:i] if h.own_tree]
        node = spec.ssh.host if spec.ssh is not None else "this machine"
        where = inside[-1].what if inside else node
        return where, spec.hop_sources[i] if i < len(spec.hop_sources) else spec.source

    def not_started(
        self, code: int | None, res: Result, step: str, launch: Launch | None = None
    ) -> RemotekitError:
        """The runner never said ready (through ``launch``, default the target's): whose words
        are these? Each hop is asked, outermost first; when the words could be several hops'
        (``no such container`` from a container inside a CT), the first of them whose probe
        says it is down is the broken one. Then a hop's tool that an outer hop could not exec;
        then the interpreter."""
        text = (res.stderr + res.stdout).strip()
        low = text.lower()
        quoted = quote_tool(text)
        where = dict(host=self.name, step=step)
        hops = self.spec.hops
        said: list[tuple[int, RemotekitError]] = []
        for i, hop in enumerate(hops):
            place, source = self.hop_place(i)
            error = hop.explain(code, text, self.name, step, where=place, source=source)
            if error is not None and hop.confirm:
                status = self.probe(self.inside(i, hop.probe()))
                error = hop.explain(
                    code, text, self.name, step, status=status, where=place, source=source
                )
            if error is not None:
                said.append((i, error))
        if said:
            return self._first_down(said)
        exec_failed = any(h.exec_failed(code, text) for h in hops)
        if exec_failed or code in (126, 127, 255) or "no such file" in low or "not found" in low:
            for i, hop in enumerate(hops[1:], 1):  # a tool inside: the outer hop's words name it
                if _names(text, hop.executable):
                    return hop.missing(self.name, step, *self.hop_place(i))
        launch = launch or self.launch
        interp = launch.interpreter or "python"
        if exec_failed or code in (126, 127, 255) or "no such file" in low or "not found" in low:
            hint = f"check `venv:`/`python:` in hosts.yaml ({self.spec.source})"
            if launch is not self.launch:  # a level of the chain (launch_at): no hosts.yaml key
                hint = f"via {self.chain_of(launch)}"
            return InterpreterNotFound(
                f"interpreter {interp} not found there (exit {code}); {hint}:\n{quoted}",
                path=interp,
                **where,
            )
        return RemotekitError(
            f"the remotekit runner did not start via {self.chain_of(launch)} (exit {code}); "
            f"needs Python >= 3.6 there:\n{quoted}",
            **where,
        )

    def _first_down(self, said: list[tuple[int, RemotekitError]]) -> RemotekitError:
        """Of the hops whose words these may be (index, error), the first whose probe says it
        is not up; the first of them when every probe says up (it went down, then up)."""
        if len(said) == 1:
            return said[0][1]
        for i, error in said:
            hop = self.spec.hops[i]
            up, _ = hop.verdict(*self.probe(self.inside(i, hop.probe())))
            if not up:
                return error
        return said[0][1]

    def probe(self, argv: list[str], timeout: float = 15.0) -> tuple[int | None, str]:
        """Run a bare command on the node (no runner: for checks before the runner can run)."""
        started = time.monotonic()
        cancelled = StepCancelled(
            Result(self.name, "ping", tuple(argv), None, "", "", 0.0, chain=self.chain)
        )
        if self.cancelled:
            raise cancelled
        try:
            proc = self.transport.start(argv, [])
        except ExecutableMissing as exc:
            return 127, f"{exc.path}: not found"
        chunks: list[bytes] = []
        try:
            with self.tracked(proc):
                proc.close_stdin()
                while (event := next_event(proc.events, started + timeout)) is not None:
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


# -- the public face of an engine ---------------------------------------------------------------

_Class = TypeVar("_Class", bound=type)
_Facade = TypeVar("_Facade", bound="Facade")


def masks_errors(cls: _Class) -> _Class:
    """``cls`` with each public method it defines (and ``__iter__``, its whole iteration) run
    inside ``self.engine``'s :meth:`Engine.boundary`: its errors leave masked however they were
    raised, a method added later too. On :class:`Facade` (a Target), a run, its log stream, a
    forward."""
    for name, method in list(vars(cls).items()):
        if (name.startswith("_") and name != "__iter__") or not inspect.isfunction(method):
            continue
        setattr(cls, name, _behind_boundary(method))
    return cls


def _behind_boundary(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def each(self: Any, *args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            with self.engine.boundary():
                return (yield from method(self, *args, **kwargs))

        return each

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.engine.boundary():
            return method(self, *args, **kwargs)

    return call


@masks_errors
class Facade:
    """The public face of one :class:`Engine`: the base of :class:`~remotekit.target.Target`,
    so that what the modules under the target hold and hand back (a run's handle,
    :mod:`remotekit.runs`) is named by the class it is, not by a copy of its shape. ``engine``
    is what its steps run on; ``name`` the host's name. Use it as a context manager."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.name = engine.name

    def __enter__(self: _Facade) -> _Facade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the agent, if one runs (and every step on it), and close the held connection
        (a later step opens a new one)."""
        self.engine.close()


def _names(text: str, executable: str) -> bool:
    """Whether a tool's words name ``executable`` as a word of its own (``exec "podman"``,
    ``execve(): podman:``), not inside a longer path or name."""
    return re.search(rf"(?<![\w./-]){re.escape(executable)}(?![\w./-])", text) is not None


# -- masking ---------------------------------------------------------------------------------

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
