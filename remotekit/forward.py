"""Forward a port there to a socket here, through the target's layers (``Target.forward``).

A port inside a container often has no route from the laptop (a Proxmox CT on a private bridge,
a Slurm compute node, a pod), so ``ssh -L`` cannot reach it. Here each accepted connection
starts the relay (``remote/relay.py``) as a step through every hop of the target, like
``kubectl port-forward`` does over its API::

    client -> 127.0.0.1:LOCAL (here) -> SSH exec channel -> pct exec 200 -> python relay
                                                             -> 127.0.0.1:PORT (its netns)

The relay is shipped by the constant loader (:data:`remotekit.layers.LOADER`, marked as
:data:`RELAY_LOADER` so that ``ps`` there tells a relay from a step) on stdin,
followed by one JSON line (where to connect, a nonce); it answers the nonce on stdout once
connected, and from then on stdin/stdout are the raw stream. EOF either way closes both ends
(a half-closed connection is closed, as with ``kubectl port-forward``), so when a client goes,
or the forward is closed, the relay there exits and nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Callable

from remotekit import shipping
from remotekit.engine import Engine, masks_errors
from remotekit.errors import ForwardError, RemotekitError
from remotekit.layers import LOADER
from remotekit.result import Result
from remotekit.transports.base import SLICE_S, ExecutableMissing, Exit, Lost, Output, Process

__all__ = ["Forward"]

log = logging.getLogger(__name__)

#: The loader, marked: a relay shows as one in ``ps`` there (the code is :data:`LOADER`'s).
RELAY_LOADER = LOADER + "  # remotekit-relay"
#: What the relay's exit status and its stderr line mean (they mirror remote/relay.py).
RELAY_PREFIX = "remotekit-relay:"
RELAY_EXIT_CONNECT = 3
#: How long a new connection waits for a free SSH session (sshd's MaxSessions) before it is closed.
SLOT_WAIT_S = 60.0
_CHUNK = 1 << 18
_STEP = "forward"


class _Link:
    """One forwarded connection: a client socket here joined to one relay there."""

    def __init__(self, fwd: Forward, client: socket.socket):
        self.fwd = fwd
        self.client = client
        self.nonce = secrets.token_hex(8)
        self.ready = threading.Event()
        self.connected = False
        self.proc: Process | None = None
        self.err = bytearray()
        self.started = time.monotonic()

    def _stdin(self, request: bytes) -> Iterator[bytes]:
        """The relay, its request, then (once it is connected there) the client's bytes."""
        relay = shipping.source("relay.py")
        yield f"{len(relay)}\n".encode() + relay + request
        self.ready.wait()
        try:
            while self.connected and (data := self.client.recv(_CHUNK)):
                yield data
        except OSError:
            pass
        finally:
            if self.proc is not None:
                self.proc.close_stdin()  # EOF: the relay there closes its socket and exits

    def run(self) -> RemotekitError | None:
        """Relay until either end closes; the error when the relay could not connect."""
        fwd = self.fwd
        hosts = [fwd.remote_host, *(["::1"] if fwd.remote_host == "127.0.0.1" else [])]
        request = json.dumps({"hosts": hosts, "port": fwd.remote_port, "nonce": self.nonce})
        try:
            argv = [RELAY_LOADER if a == LOADER else a for a in fwd.engine.launch_for(_STEP).argv]
            self.proc = fwd.engine.transport.start(
                argv, self._stdin(request.encode() + b"\n"), wait=SLOT_WAIT_S
            )
        except ExecutableMissing as exc:
            return fwd.engine.missing(exc.path, _STEP)
        except TimeoutError:
            return fwd.error(
                f"no free SSH session within {SLOT_WAIT_S:g} s for a connection to port "
                f"{fwd.remote_port} (sshd's MaxSessions): close other connections"
            )
        except RemotekitError as exc:
            exc.step = exc.step or _STEP
            return exc
        finally:
            if self.proc is None:
                self.ready.set()
        if not fwd.hold(self.proc):
            self.ready.set()
            self.proc.terminate()
            return None
        try:
            return self._pump(self.proc)
        finally:
            fwd.let_go(self.proc)
            self.connected = False
            self.ready.set()
            self.proc.terminate()

    def _pump(self, proc: Process) -> RemotekitError | None:
        marker = self.nonce.encode() + b"\n"
        head = bytearray()
        while True:
            event = proc.events.get()
            if isinstance(event, Output) and event.stream == "stdout":
                data = event.data
                if not self.connected:
                    head += data
                    at = head.find(marker)
                    if at < 0:
                        del head[: -(1 << 16)]  # a login shell's chatter: keep the end
                        continue
                    data = bytes(head[at + len(marker) :])
                    self.connected = True
                    self.ready.set()
                try:
                    self.client.sendall(data)
                except OSError:
                    return None  # the client went away: terminate() closes the channel
            elif isinstance(event, Output):
                if len(self.err) < 1 << 16:
                    self.err += event.data
            else:  # the end: Exit, Lost or Cancelled
                code = event.code if isinstance(event, Exit) else None
                lost = event.reason if isinstance(event, Lost) else None
                return None if self.connected else self._failed(code, lost, bytes(head))

    def _failed(self, code: int | None, lost: str | None, out: bytes) -> RemotekitError:
        """Why the relay never connected: nothing listens there, or a hop refused."""
        fwd = self.fwd
        text = self.err.decode(errors="replace")
        where = f"{fwd.remote_host}:{fwd.remote_port}"
        said = (
            text.split(RELAY_PREFIX, 1)[1].strip().splitlines()[0] if RELAY_PREFIX in text else ""
        )
        if said and code != RELAY_EXIT_CONNECT:
            return fwd.error(f"the relay to {where} failed there (exit {code}): {said}")
        if said:
            why = said.rsplit(": ", 1)[-1]
            return fwd.error(
                f"nothing accepts connections on {where} there ({why}), via {fwd.engine.chain}: "
                f"is the server running in that namespace, on that port?",
                refused=True,
            )
        if lost is not None:
            return fwd.error(f"the relay to {where} was cut: {lost}")
        res = Result(
            host=fwd.engine.name,
            step=_STEP,
            argv=("relay", where),
            exit_code=code,
            stdout=out.decode(errors="replace"),
            stderr=text,
            duration_s=time.monotonic() - self.started,
            chain=fwd.engine.chain,
        )
        return fwd.engine.not_started(code, res, _STEP)


@masks_errors
class Forward:
    """``bind:local_port`` here, relayed to ``remote_host:remote_port`` in the target's namespace.

    Use it as a context manager (or call :meth:`close`)::

        with target.forward(6006) as fwd:
            print(fwd.mapping)      # 127.0.0.1:43817 -> 127.0.0.1:6006 there
            print(fwd.url)          # http://127.0.0.1:43817/
            fwd.wait()              # until Ctrl-C

    Each accepted connection runs in its own thread, over its own exec channel. A connection
    the far side refuses is closed here and reported to ``on_error`` (default: logged, once per
    distinct message); the last 100 stay in :attr:`errors`.
    """

    def __init__(
        self,
        engine: Engine,
        remote_port: int,
        *,
        local_port: int = 0,
        bind: str = "127.0.0.1",
        remote_host: str = "127.0.0.1",
        on_error: Callable[[RemotekitError], None] | None = None,
    ):
        for name, value, low in (("remote_port", remote_port, 1), ("local_port", local_port, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 65536:
                raise ForwardError(
                    f"{name} must be a TCP port number ({low}-65535), got {value!r}",
                    host=engine.name,
                    step=_STEP,
                    port=remote_port if isinstance(remote_port, int) else None,
                )
        self.engine = engine
        self.remote_port = remote_port
        self.bind = bind
        self.remote_host = remote_host
        self.on_error = on_error or _log
        self.errors: list[RemotekitError] = []
        self._said: set[str] = set()
        self._lock = threading.Lock()
        self._procs: set[Process] = set()
        self._clients: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._closed = threading.Event()
        self._listener: socket.socket | None = None
        self.local_port = local_port

    @property
    def port(self) -> int:
        """:attr:`remote_port` (its old name)."""
        return self.remote_port

    def error(self, message: str, *, refused: bool = False) -> ForwardError:
        """A :class:`ForwardError` about this forward (its host, step and port there)."""
        return ForwardError(
            message, host=self.engine.name, step=_STEP, port=self.remote_port, refused=refused
        )

    def hold(self, proc: Process) -> bool:
        """Keep ``proc`` (a connection's relay) for :meth:`close` to stop; False when close()
        ran already (while the connection waited for an SSH slot): it never saw this relay."""
        with self._lock:
            if self._closed.is_set():
                return False
            self._procs.add(proc)
            return True

    def let_go(self, proc: Process) -> None:
        """``proc``'s connection ended: close() has nothing more to stop there."""
        with self._lock:
            self._procs.discard(proc)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, check: bool = True) -> Forward:
        """Listen here; with ``check``, first relay one empty connection, so a port that
        nothing listens on there (or a broken hop) raises :class:`ForwardError` now."""
        if check:
            self.check()
        try:
            family = socket.AF_INET6 if ":" in self.bind else socket.AF_INET
            sock = socket.create_server((self.bind, self.local_port), family=family, backlog=128)
        except OSError as exc:
            raise self.error(
                f"cannot listen on {self.bind}:{self.local_port} here: {exc.strerror or exc}"
            ) from exc
        self._listener = sock
        self.local_port = int(sock.getsockname()[1])
        accept = threading.Thread(target=self._accept, name="remotekit-forward", daemon=True)
        accept.start()
        return self

    def check(self) -> None:
        """Connect to the port there once (through every hop) and close again; raise if that fails."""
        here, other = socket.socketpair()
        other.close()  # no bytes to send: the relay connects, sees EOF and exits
        try:
            error = _Link(self, here).run()
        finally:
            here.close()
        if error is not None:
            raise error  # masked as it leaves (the engine's boundary)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<local_port>/`` (what to open in a browser)."""
        host = "127.0.0.1" if self.bind in ("", "0.0.0.0") else self.bind
        return f"http://{_hostport(host, self.local_port)}/"

    @property
    def mapping(self) -> str:
        """Which way it goes, the port here first as in ``ssh -L`` and ``kubectl
        port-forward``: ``127.0.0.1:16007 -> 127.0.0.1:6006 there``."""
        here = _hostport(self.bind or "0.0.0.0", self.local_port)
        return f"{here} -> {_hostport(self.remote_host, self.remote_port)} there"

    @property
    def active(self) -> int:
        """Forwarded connections open right now."""
        with self._lock:
            return len(self._clients)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :meth:`close` (from another thread or a signal); True once closed.

        Waits in short slices: a Ctrl-C the kernel hands to another thread of this process
        only sets Python's flag, and an untimed wait in the main thread would never see it."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_S if end is None else min(SLICE_S, end - time.monotonic())
            if self._closed.wait(max(0.0, left)):
                return True
            if end is not None and time.monotonic() >= end:
                return False

    def close(self) -> None:
        """Stop listening, close every forwarded connection and its channel: each relay there
        sees EOF and exits. Waits (a few seconds at most) for the connection threads."""
        self._closed.set()
        if self._listener is not None:
            _shut(self._listener)
        with self._lock:
            clients, procs, threads = list(self._clients), list(self._procs), list(self._threads)
        for client in clients:
            _shut(client)
        for proc in procs:
            proc.close_stdin()
            proc.terminate()
        end = time.monotonic() + 5.0
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections -------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                if self._closed.is_set():
                    _shut(client)
                    return
                self._clients.add(client)
                self._threads.add(t)
            t.start()

    def _serve(self, client: socket.socket) -> None:
        try:
            error = _Link(self, client).run()
            if error is not None and not self._closed.is_set():
                self._report(self.engine.redacted(error))
        except Exception as exc:  # a thread must not die silently: say what broke
            self._report(self.error(f"forwarding failed: {exc!r}"))
        finally:
            _shut(client)
            with self._lock:
                self._clients.discard(client)
                self._threads.discard(threading.current_thread())

    def _report(self, error: RemotekitError) -> None:
        """Keep ``error``; pass it to ``on_error`` the first time its message is seen (a port
        that refuses every connection is said once, not once per browser request)."""
        text = str(error)
        with self._lock:
            self.errors.append(error)
            del self.errors[:-100]
            if text in self._said:
                return
            self._said.add(text)
        self.on_error(error)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _log(error: RemotekitError) -> None:
    log.error("%s", error)


def _shut(sock: socket.socket) -> None:
    """Close ``sock`` so that a thread blocked in its ``recv``/``accept`` wakes up now."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
