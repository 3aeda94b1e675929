"""The local half of the resident agent (:mod:`remotekit.remote.agent`): one per open target.

:class:`Agent` starts the agent once through the target's launch chain (``ssh -> hop(s) ->
python -c LOADER``, as a runner is started) and then runs each step as frames on that one
channel; :meth:`Agent.start` returns an :class:`AgentStep`, a
:class:`~remotekit.transports.base.Channel` with the events a transport's process has
(:class:`Output`, :class:`Exit`, :class:`Lost`, :class:`Cancelled`), so a step runs on it
unchanged. The frame format is the agent's own (``FRAME``, ``frame``, ``frames``), imported
from the shipped file: it is written once.

Flow control both ways is per step: a step's payload is sent while at most ``WINDOW`` of its
bytes are not yet written into its runner there, and the agent relays a step's output while
at most ``WINDOW`` of it is not yet taken off the step's event queue here, so one step that
floods (or a consumer that reads slowly) never stalls another step.

When the agent dies (its channel lost, or killed there), every step still running gets
:class:`Lost` naming the agent, its pid and the host; the next step starts a new agent.

A frame crosses one thread hand-off each way: the caller writes its frames on the channel
itself (``Written.write``: a step's start and its small payload as one write), and the
transport's one reader thread takes the agent's frames apart (``_take``, the channel's sink)
and puts each on its step's queue.

What the agent sends is not trusted: the one reader (``_take``) takes it through the frame
decoder (``frames``, with what the agent may send, ``TO_CALLER``) and checks each frame
against the state here (a step that is running, output within its window: at most
``MOST_UNACKED`` of it not yet credited). The first frame that fails ends the agent at once as
a dropped connection would (its channel closed: its runners stop their steps), each step on
it gets :class:`Lost` with ``violation`` set, saying ``protocol violation: <what>`` and
naming the agent and host, and what still comes on the channel is read and dropped: this
process never holds more than a frame's bound and the window of it.

Its first frame (the hello) says its pid and Python version; what the chain printed on stdout
before it (a login banner) is not taken for frames. :attr:`Agent.refused` says why an agent
that said hello cannot take steps (a Python older than ``MIN_PYTHON``): the engine then runs
each step without it.
"""

from __future__ import annotations

import functools
import itertools
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from remotekit import shipping
from remotekit.layers import Launch
from remotekit.remote.agent import (
    FRAME,
    GRACE,
    MIN_PYTHON,
    MOST_UNACKED,
    PIECE,
    TO_CALLER,
    WINDOW,
    ProtocolError,
    frame,
    frames,
)
from remotekit.transports.base import Channel, Event, Exit, Lost, Output, Transport, Written

__all__ = ["Agent", "AgentStep"]

#: Largest stdin piece in one frame (and the most of them written to the agent at once).
_PIECE = PIECE
#: Output bytes taken here before the agent is told (one credit frame per this many).
_CREDIT = 1 << 16
#: How long close() waits, beyond the agent's own bound, for it to exit before it lets go.
_CLOSE_S = 3.0
#: The agent's hello: its frame header (kind A, step 0, any length), then its JSON.
_HELLO = re.compile(re.escape(FRAME.pack(b"A", 0, 0)[:5]) + rb'.{4}\{"pid": ', re.S)
#: Bytes kept of what came on stdout before the hello (a banner; the hops' words).
_BEFORE = 4096
#: How long after the agent last said something (any frame: a step's output or end, a
#: probe's answer, its hello) a step goes to it without a probe first (Agent.idle). Long
#: enough that the back-to-back steps and calls of a script or a loop (milliseconds apart)
#: skip the probe's round trip; short enough that a link heard within it is as good as a
#: probe's answer, which is itself a round trip old when the step goes (0.1-0.3 s on a
#: distant link). A link that died inside it fails the step sent into it as a dropped link
#: does: see Engine._ready_agent.
QUIET_S = 0.25


@functools.cache
def loader_bytes() -> bytes:
    """What an agent's loader reads first: the boot (``remote/boot.py``), the agent's source
    behind it (``<length>\n<source>``, read by the boot) and the runner's frame."""
    boot, agent = shipping.source("boot.py"), shipping.source("agent.py")
    return b"".join(
        [
            f"{len(boot)}\n".encode(),
            boot,
            f"{len(agent)}\n".encode(),
            agent,
            frame(b"R", 0, shipping.source("runner.py")),
        ]
    )


def _said(hello: bytes) -> tuple[int, tuple[int, ...]]:
    """The agent's pid and Python version, from its hello's JSON."""
    try:
        said = json.loads(hello)
        pid, python = said["pid"], tuple(said["python"])
    except (ValueError, KeyError, TypeError):
        pid, python = None, ()
    if not isinstance(pid, int) or not python or not all(isinstance(n, int) for n in python):
        raise ProtocolError(f"a hello that is not one: {hello!r}")
    return pid, python


class _Events(queue.Queue[Event]):
    """A step's event queue that credits the agent with the output taken off it (one credit
    per ``_CREDIT`` bytes), and counts what it has not credited yet (held, or taken and owed):
    the agent may send no more than ``MOST_UNACKED`` of it (:meth:`room`)."""

    def __init__(self, credit: Callable[[int], None]) -> None:
        super().__init__()
        self._credit = credit
        self._unacked = 0  # output bytes put here and not yet credited
        self._owed = 0  # of those, taken off the queue

    def _put(self, event: Event) -> None:
        super()._put(event)
        if isinstance(event, Output):
            self._unacked += len(event.data)

    def _get(self) -> Event:
        event: Event = super()._get()
        if isinstance(event, Output):
            self._owed += len(event.data)
            if self._owed >= _CREDIT:
                self._credit(self._owed)
                self._unacked -= self._owed
                self._owed = 0
        return event

    def room(self, n: int) -> bool:
        """Whether ``n`` more bytes of output keep the agent within the step's window."""
        with self.mutex:
            return self._unacked + n <= MOST_UNACKED


class AgentStep(Channel):
    """One step on the agent: its events, ``close_stdin`` (EOF: the runner stops the step)
    and ``terminate`` (let go: EOF, and its further output is dropped)."""

    def __init__(self, agent: Agent, sid: int):
        super().__init__()
        self.events = self.held = _Events(self._credit)  # held: as the _Events it is
        self._agent, self.sid = agent, sid
        self._lock = threading.Condition()
        self._in_flight = 0  # stdin bytes sent, not yet written into the runner there
        self._eof = False
        self._ended = False  # it exited (or its agent is gone): the agent takes no more for it
        self._gone = False

    def _credit(self, n: int) -> None:
        self._agent.send(b"C", self.sid, str(n).encode())

    def feed(self, body: Iterable[bytes]) -> None:
        """Send the payload, at most WINDOW in flight, from a thread of its own (a payload in
        memory and no larger than WINDOW goes with the step's start: Agent.start)."""
        for data in self.framed(body):
            self._agent.write(data)

    def framed(self, body: Iterable[bytes]) -> Iterator[bytes]:
        """The payload's D frames, each once the window has room for it (one in memory and
        no larger than WINDOW never waits)."""
        for chunk in body:
            view = memoryview(chunk)
            for at in range(0, len(view), _PIECE):
                piece = view[at : at + _PIECE]  # copied once, into its frame
                with self._lock:
                    self._lock.wait_for(
                        lambda: self._in_flight < WINDOW or self._eof or self._ended
                    )
                    if self._eof or self._ended:
                        return
                    self._in_flight += len(piece)
                yield frame(b"D", self.sid, piece)

    def written(self, n: int) -> None:
        with self._lock:
            self._in_flight -= n
            self._lock.notify_all()

    def deliver(self, event: Event) -> None:
        if isinstance(event, (Exit, Lost)):  # what it has not written there never will be:
            with self._lock:  # a sender waiting for room (its stdin, unread) stops
                self._ended = True
                self._lock.notify_all()
        if not self._gone:
            self.events.put(event)
        elif isinstance(event, Output):
            self._credit(len(event.data))

    def close_stdin(self) -> None:
        with self._lock:
            if self._eof:
                return
            self._eof = True
            self._lock.notify_all()
        self._agent.send(b"E", self.sid)

    def terminate(self) -> None:
        self._gone = True
        self.close_stdin()


class Agent:
    """One agent there, started through ``launch`` on ``transport``; see the module doc."""

    def __init__(
        self, transport: Transport, launch: Launch, host: str, chain: str, *, grace: float
    ):
        self.host, self.chain = host, chain
        self._nudge = launch.nudge  # answer each piece of output (Launch.nudge says why)
        self._grace = grace  # the steps' TERM -> KILL grace
        self.pid: int | None = None
        #: The Python version there, from the hello.
        self.python: tuple[int, ...] = ()
        self._before = bytearray()  # stdout before the hello
        self._buf = bytearray()  # its frames not yet whole
        self._over = False  # it ended, or broke the protocol: what still comes is dropped
        self._ready = threading.Event()  # its hello came, or it died
        self._dead = threading.Event()
        self._ran = False  # its hello came: it ran there (else its words are the hops')
        self._end: tuple[int | None, str] = (None, "")  # its exit code and loss reason
        self._violation: str | None = None  # how it broke the frame protocol, if it did
        self._lock = threading.Lock()
        self._steps: dict[int, AgentStep] = {}
        self._next = 1
        self._probes: dict[bytes, threading.Event] = {}  # P frames sent, not yet answered
        self._tokens = itertools.count(1)
        self._stderr = bytearray()
        self._proc: Written = transport.start(launch.argv, None, sink=self._take)
        #: When its channel opened (the connection made): its hello is due from then on.
        self.started = time.monotonic()
        self._heard = self.started  # when it last said something (Agent.idle)
        # The runner follows the boot's and the agent's source at once, without waiting for
        # its hello (one round trip less): the agent takes over what its loader's buffered
        # read took in beyond its source. A step waits for the hello (Engine._ready_agent),
        # so that it can still run without the agent when none answers.
        self._proc.write(loader_bytes())

    @property
    def alive(self) -> bool:
        return not self._dead.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Whether it said hello, or died, within ``timeout`` seconds."""
        return self._ready.wait(timeout)

    @property
    def idle(self) -> bool:
        """Whether nothing proves its channel up now: it ran steps, none is running, and it
        has said nothing for longer than QUIET_S."""
        with self._lock:
            quiet = time.monotonic() - self._heard > QUIET_S
            return quiet and self._next > 1 and not self._steps

    def answers(self, timeout: float) -> bool:
        """Whether it answers a probe (a round trip on its channel) within ``timeout``."""
        with self._lock:
            token = str(next(self._tokens)).encode()
            heard = self._probes[token] = threading.Event()
        self.send(b"P", 0, token)
        heard.wait(timeout)  # set by the answer, or by its death
        with self._lock:
            self._probes.pop(token, None)
        return heard.is_set() and self.alive

    @property
    def refused(self) -> str | None:
        """Why this agent takes no steps although it said hello (None: it takes them)."""
        if self.python and tuple(self.python[:2]) < MIN_PYTHON:
            have = ".".join(map(str, self.python))
            need = ".".join(map(str, MIN_PYTHON))
            return f"Python {have} there is older than it needs (>= {need})"
        return None

    # -- the channel -------------------------------------------------------------------------

    def send(self, kind: bytes, sid: int, payload: bytes | memoryview = b"") -> None:
        self.write(frame(kind, sid, payload))

    def write(self, data: bytes) -> None:
        """Frames to the agent, from the calling thread (it never waits on the far side:
        the transport's Writer)."""
        if self.alive:
            self._proc.write(data)

    def _take(self, event: Event) -> None:
        """The channel's sink, in the transport's reader thread: the one reader of what the
        agent sends, until it ends or breaks the protocol."""
        if self._over:
            return
        try:
            if isinstance(event, Output):
                if event.stream == "stderr":
                    self._stderr += event.data
                    del self._stderr[:-4096]
                    return
                self._heard = time.monotonic()
                buf = self._buf
                buf += event.data if self._ran else self._hello(event.data)
                for kind, sid, payload in frames(buf, TO_CALLER):
                    self._frame(kind, sid, payload)
                if self._nudge and self._ran and self._steps:  # more to come: nudge
                    self.send(b"N", 0)
            elif isinstance(event, Exit):
                self._over = True
                self._died(event.code, "")
            elif isinstance(event, Lost):
                self._over = True
                self._died(None, event.reason)
        except ProtocolError as exc:
            self._over = True
            self._violated(str(exc))

    def _violated(self, what: str) -> None:
        """The agent broke the frame protocol: its steps learn it at once, its channel is
        closed as for a dropped connection, and what still comes on it is dropped unread."""
        who = "the remotekit agent" + (f" (pid {self.pid})" if self.pid is not None else "")
        self._violation = f"protocol violation: {what}, from {who} on {self.host}"
        self._died(None, self._violation)
        threading.Thread(target=self._proc.terminate, daemon=True).start()

    def _hello(self, data: bytes) -> bytes:
        """Stdout before the hello: kept aside (a banner, the hops' words) until the hello
        comes; from it on, the frames."""
        self._before += data
        found = _HELLO.search(self._before)
        if found is None:
            del self._before[:-_BEFORE]
            return b""
        rest = bytes(self._before[found.start() :])
        del self._before[found.start() :]
        return rest

    def _frame(self, kind: bytes, sid: int, payload: bytes) -> None:
        """One frame, well formed (``frames`` checked it): ProtocolError for one out of
        place (a second hello, a step that is not running, output past its window)."""
        if kind == b"A":
            if self._ran:
                raise ProtocolError("a second hello")
            self.pid, self.python = _said(payload)
            self._ran = True
            self._ready.set()
            return
        with self._lock:
            if kind == b"P":
                heard = self._probes.get(payload)
                if heard is not None:
                    heard.set()
                return
            step = self._steps.get(sid)
            if step is None:
                raise ProtocolError(f"a {kind!r} frame for step {sid}, which is not running")
            if kind == b"X":
                del self._steps[sid]
        if kind == b"O" or kind == b"e":
            if not step.held.room(len(payload)):
                raise ProtocolError(
                    f"more of step {sid}'s output unacknowledged than its window allows "
                    f"({MOST_UNACKED} bytes)"
                )
            step.deliver(Output("stdout" if kind == b"O" else "stderr", payload))
        elif kind == b"W":
            step.written(int(payload))
        elif kind == b"X":
            step.deliver(Exit(int(payload)))

    def _died(self, code: int | None, reason: str) -> None:
        """The agent is gone: each step still here learns it, in words that name it."""
        self._end = (code, reason)  # before _dead: a step started later reads it
        self._dead.set()
        self._ready.set()
        with self._lock:
            for heard in self._probes.values():
                heard.set()
        self._fail_steps()

    def _fail_steps(self) -> None:
        code, reason = self._end
        with self._lock:
            steps, self._steps = list(self._steps.values()), {}
        how = reason or (f"exit {code}" if code is not None else "no exit status")
        tail = self._stderr.decode(errors="replace").strip()
        for step in steps:
            if self._violation is not None:
                step.deliver(Lost(self._violation, violation=True))
            elif self._ran:
                what = f"the remotekit agent (pid {self.pid}) on {self.host} ended ({how})"
                step.deliver(Lost(what + (f": {tail}" if tail else "")))
            else:  # it never ran: its words are what the hops' explanations read
                if self._before:
                    step.deliver(Output("stdout", bytes(self._before)))
                step.deliver(Output("stderr", bytes(self._stderr)))
                step.deliver(Exit(code))
            step.close_stdin()  # its payload's sender stops

    # -- steps -------------------------------------------------------------------------------

    def start(self, header: bytes, body: Iterable[bytes]) -> AgentStep:
        """Start one step: ``header`` is the runner's (JSON), ``body`` its payload."""
        with self._lock:
            sid, self._next = self._next, self._next + 1
            step = self._steps[sid] = AgentStep(self, sid)
        start = frame(b"S", sid, f"{len(header)}\n".encode() + header)
        small = isinstance(body, (list, tuple)) and sum(map(len, body)) <= WINDOW
        # in memory and within the window: it never waits, and goes with the start as one
        # write (one message through the hops, not two)
        self.write(b"".join([start, *step.framed(body)]) if small else start)
        if not self.alive:  # died before we registered: say so, as for any other step
            self._fail_steps()
        if not small:
            threading.Thread(target=step.feed, args=(body,), daemon=True).start()
        return step

    def close(self) -> None:
        """EOF to the agent (it stops every step, then exits), behind what was written to
        it (within a bound); let go after a bound."""
        self._proc.close_stdin()
        if not self._dead.wait(self._grace + GRACE + _CLOSE_S):
            self._proc.terminate()
