"""SSH as a transport: one held connection (Fabric/paramiko), one exec channel per step.

Fabric gives us ``~/.ssh/config`` resolution, ProxyJump gateways and SFTP; the exec channel is
driven here directly, because Fabric's ``run(timeout=)`` leaves the remote process running
and its own ``AutoAddPolicy`` would accept any host key. Host keys are checked against
``known_hosts``: unknown keys are refused (``strict``) or recorded (``accept-new``); a changed
key is always refused. Every paramiko and socket error is translated here, at the boundary.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import paramiko
from fabric import Config, Connection

from remotekit.errors import (
    AuthError,
    ConnectError,
    ConnectionLost,
    HostKeyError,
    Reconnected,
    RemotekitError,
    caller_level,
)
from remotekit.quoting import join, quote
from remotekit.transports.base import Channel, Exit, Lost, Output, Sink, Writer, wait_for_room
from remotekit.transports.known_hosts import (
    AcceptNewPolicy,
    KnownHostsUnusable,
    RevokedHostKey,
    StrictPolicy,
    UnknownHostKey,
    read_known_hosts,
    shell_path,
)

if TYPE_CHECKING:
    from remotekit.spec import SSHSpec

__all__ = ["SSHProcess", "SSHTerminal", "SSHTransport"]

# paramiko logs what it then raises ("Exception (client): Error reading SSH protocol banner",
# "Socket exception: Bad file descriptor") and adds no handler of its own, so with logging
# unconfigured Python's last-resort handler prints those records on stderr next to our error.
# A NullHandler on its logger is the library convention: nothing reaches a terminal unless the
# application configured logging, and then its handlers still get paramiko's records (the
# logger still propagates; its level is left alone), which is what such a user asked for.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_CHUNK = 1 << 16
#: The most one output event of a step takes off its channel (a get's bytes: few events).
_RECV = 1 << 18
_DRAIN_S = 0.5
_DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class _Transport(paramiko.Transport):
    """paramiko's transport, preferring AES-GCM: an AEAD cipher does in one pass what AES-CTR
    plus HMAC-SHA2 (paramiko's first choice) do in two. Measured here (bench_forward.py), it
    about doubles what one channel carries (~230 -> ~470 MB/s); OpenSSH prefers it too."""

    _preferred_ciphers = (
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        # private in paramiko (its stubs leave it out); a tuple of cipher names since 1.x
        *(c for c in paramiko.Transport._preferred_ciphers if "-gcm@" not in c),  # type: ignore[attr-defined]
    )


def _shut(conn: Connection) -> None:
    """Close ``conn`` and every jump host connection under it, innermost first."""
    hop: object = conn
    while isinstance(hop, Connection):
        gateway = hop.gateway
        hop.close()
        hop = gateway


def _hops(conn: Connection) -> list[Connection]:
    """The hops of ``conn``, its gateways first (the order they were connected in)."""
    hops: list[Connection] = []
    hop: object = conn
    while isinstance(hop, Connection):
        hops.insert(0, hop)
        hop = hop.gateway
    return hops


def _bannerless(conn: Connection) -> str | None:
    """``host:port`` of the first hop of ``conn`` (gateway first) whose TCP connection is up
    but whose server never sent its SSH banner, if any."""
    for h in _hops(conn):
        transport = h.client.get_transport()
        if transport is None:
            continue
        if not transport.remote_version:
            return f"{h.host}:{h.port}"
    return None


def _refusing_hop(conn: Connection) -> Connection:
    """The first hop of ``conn`` (gateway first) that is connected but not authenticated:
    the one whose server refused our credentials (``conn`` itself when none is)."""
    for h in _hops(conn):
        transport = h.client.get_transport()
        if transport is not None and not transport.is_authenticated():
            return h
    return conn


def _keys_offered(hop: Connection) -> list[str]:
    """The keys paramiko offers ``hop`` (its ``SSHClient._auth`` order): the identity files
    (ours and ~/.ssh/config's), the ssh-agent's keys, then the default ~/.ssh/id_* files."""
    kwargs = hop.connect_kwargs
    offered = [os.path.expanduser(name) for name in kwargs.get("key_filename") or ()]
    if kwargs.get("allow_agent", True) and os.environ.get("SSH_AUTH_SOCK"):
        try:
            agent_keys = paramiko.Agent().get_keys()
        except (paramiko.SSHException, OSError):
            agent_keys = ()
        offered += [f"agent key {key.fingerprint}" for key in agent_keys]
    if kwargs.get("look_for_keys", True):
        for kind in ("rsa", "dsa", "ecdsa", "ed25519"):
            for folder in ("~/.ssh", "~/ssh"):
                path = os.path.expanduser(f"{folder}/id_{kind}")
                if os.path.isfile(path) and path not in offered:
                    offered.append(path)
    return offered


def _auth_refused(conn: Connection) -> str:
    """Who was refused where, and with which keys, in words for :class:`AuthError`."""
    hop = _refusing_hop(conn)
    keys = _keys_offered(hop)
    tried = ", ".join(keys) if keys else "none (no identity file, no ssh-agent key, no ~/.ssh/id_*)"
    return f"the server {hop.host}:{hop.port} refused user {hop.user!r}; keys tried: {tried}"


def _fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH prints it


def _wake_on_output(chan: paramiko.Channel) -> threading.Event:
    """An event that paramiko sets when output (or the end) comes on ``chan``.

    This is what waits on a channel, instead of ``select`` on ``chan.fileno()``: that creates
    paramiko's pipe, which our thread closes (``chan.close()``) while paramiko's transport
    thread still writes to it as data arrives, and reads from it (``recv``) in the pump. A
    descriptor closed by one thread and then used by another by number is another socket's
    once reused (the next forward's listener, the SSH connection itself); paramiko's thread
    got EBADF ('Socket exception: Bad file descriptor'), and the transport died under every
    channel. An event has no descriptor: ``set`` after close is harmless. paramiko's buffers
    set it on data and on close, and clear it when read empty; the pump checks both streams
    before each wait, so one event serves both.
    """
    wake = threading.Event()
    chan.in_buffer.set_event(wake)
    chan.in_stderr_buffer.set_event(wake)
    return wake


class SSHProcess(Channel):
    """One exec channel. A pump thread turns channel activity into events (to ``sink``, or
    onto the queue); a feed thread writes ``stdin``, or (None) its callers do (:meth:`write`,
    through a :class:`~remotekit.transports.base.Writer`)."""

    def __init__(
        self,
        chan: paramiko.Channel,
        stdin: Iterable[bytes] | None,
        release: Callable[[], None],
        sink: Sink | None = None,
    ):
        super().__init__(sink)
        self._chan = chan
        self._release = release
        self._wake = _wake_on_output(chan)
        # paramiko builds EOF and CLOSE under the channel's lock but sends them after letting
        # it go: an EOF from close_stdin and a close() from another thread could reach sshd as
        # CLOSE then EOF, and sshd drops the whole connection for a message on a channel it
        # has freed ("ieof packet referred to nonexistent channel"). One lock orders them.
        self._ending = threading.Lock()
        self._writer: Writer | None = None
        if stdin is None:
            self._writer = Writer(self._write_now, self._write_all, self.terminate)
        else:
            threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
        threading.Thread(target=self._pump, daemon=True).start()

    def write(self, data: bytes | memoryview) -> None:
        assert self._writer is not None, "a process started with stdin is written by its feed"
        self._writer.write(data)

    def _write_now(self, view: memoryview) -> int:
        """What of ``view`` the channel takes without waiting (its window); -1: it is gone.
        The writer's lock makes this the only sender, so a window seen open stays open."""
        chan, sent = self._chan, 0
        try:
            while sent < len(view) and chan.out_window_size > 0:
                n = chan.send(view[sent:])  # type: ignore[arg-type]
                if n == 0:
                    return -1  # closed, or EOF sent
                sent += n
        except (OSError, EOFError, paramiko.SSHException):
            return -1
        return sent

    def _write_all(self, view: memoryview) -> bool:
        """All of ``view``, waiting for the window; False: the channel is gone."""
        try:
            while view:
                n = self._chan.send(view)  # type: ignore[arg-type]
                if n == 0:
                    return False
                view = view[n:]
        except (OSError, EOFError, paramiko.SSHException):
            return False
        return True

    def _feed(self, chunks: Iterable[bytes]) -> None:
        try:
            for chunk in chunks:
                # paramiko's sendall re-slices what is left after each packet: of a view,
                # which copies nothing (of bytes, the rest: quadratic), and no copy is made
                # of the chunk to slice it (paramiko's stubs say bytes; it takes any buffer).
                self._chan.sendall(memoryview(chunk))  # type: ignore[arg-type]
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the channel is gone; the pump reports why

    def _pump(self) -> None:
        chan = self._chan
        quiet_since: float | None = None  # the step exited and no output came since then
        try:
            while True:
                wait_for_room(self.events, lambda: chan.closed)
                if chan.recv_ready():
                    self.emit(Output("stdout", chan.recv(_RECV)))
                    quiet_since = None
                elif chan.recv_stderr_ready():
                    self.emit(Output("stderr", chan.recv_stderr(_CHUNK)))
                    quiet_since = None
                elif chan.eof_received or chan.closed or chan.exit_status_ready():
                    if not (chan.eof_received or chan.closed):
                        # sshd sends the exit status as soon as the command exits, before
                        # the rest of its pipes (session.c): keep reading until EOF, or
                        # until it stays quiet (a leftover child may hold the pipes open).
                        now = time.monotonic()
                        quiet_since = quiet_since or now
                        if now - quiet_since < _DRAIN_S:
                            self._wake.wait(0.05)
                            continue
                    # Output is done: the exit status follows at once, or the connection died.
                    chan.status_event.wait(_DRAIN_S)
                    if chan.recv_ready() or chan.recv_stderr_ready():
                        continue
                    # paramiko reports -1 when the channel closed without an exit-status
                    # message (a real status is an unsigned 32-bit value).
                    code = chan.exit_status if chan.status_event.is_set() else -1
                    if code >= 0:
                        self.emit(Exit(code))
                    else:
                        transport = chan.get_transport()
                        why = (
                            "dropped"
                            if transport is None or not transport.is_active()
                            else "closed"
                        )
                        self.emit(Lost(f"the SSH connection {why} without an exit status"))
                    return
                else:
                    self._wake.wait(0.2)
                    transport = chan.get_transport()
                    if transport is None or not transport.is_active():
                        self.emit(Lost("the SSH connection dropped"))
                        return
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self.emit(Lost(f"{type(exc).__name__}: {exc}"))
        finally:
            # Close before freeing the slot: sshd handles our CLOSE before the next OPEN on
            # this connection, so a new step never finds all MaxSessions still taken.
            self.terminate()
            self._release()

    def close_stdin(self) -> None:
        if self._writer is not None:
            self._writer.close()  # what was written goes first (within a bound)
        with self._ending, contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._chan.shutdown_write()

    def terminate(self) -> None:
        if self._writer is not None:
            self._writer.close(0)
        with self._ending, contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._chan.close()  # a dead connection has closed it already; the pump says why


class SSHTransport:
    """Holds one SSH connection (opened on first use) for all the steps of a target.

    At most ``max_sessions`` steps run at once on it (OpenSSH's ``MaxSessions`` defaults to
    10 channels per connection); more wait for a free one, within their own timeout.
    """

    max_sessions = 8
    reached = "connected"

    def __init__(self, spec: SSHSpec, *, host: str, connect_timeout: float):
        self.spec = spec
        self.host = host
        self.connect_timeout = connect_timeout
        self.label = f"ssh {spec.display}"
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(self.max_sessions)
        self._hop_ports: dict[str, int] = {}  # each hop's real host -> port, for hints
        #: The held connection dropped and was let go; the next one opened says so.
        self._lost = False
        #: How often a dropped connection was replaced (each time with a Reconnected note).
        self.reconnects = 0

    # -- connection -------------------------------------------------------------------------

    def _connection(self, spec: SSHSpec, gateway: Connection | None) -> Connection:
        kwargs: dict[str, object] = {
            "banner_timeout": self.connect_timeout,
            "auth_timeout": self.connect_timeout,
            "channel_timeout": self.connect_timeout,
            "transport_factory": _Transport,
        }
        if spec.identity:
            kwargs["key_filename"] = [os.path.expanduser(spec.identity)]
        conn = Connection(
            spec.host,
            user=spec.user,
            port=spec.port,
            config=Config(),
            gateway=gateway,
            connect_timeout=max(1, round(self.connect_timeout)),
            connect_kwargs=kwargs,
        )
        # Fabric has added the IdentityFile entries of ~/.ssh/config by now: check them all.
        for key_file in conn.connect_kwargs.get("key_filename") or ():
            self._check_key_file(os.path.expanduser(key_file))
        known = os.path.expanduser(spec.known_hosts or _DEFAULT_KNOWN_HOSTS)
        try:
            known_hosts = read_known_hosts(known)
        except KnownHostsUnusable as exc:
            raise self._translate(exc) from exc
        policy = (AcceptNewPolicy if spec.host_key == "accept-new" else StrictPolicy)(known_hosts)
        # Every hop checks host keys our way, including gateways that Fabric builds itself
        # from a ProxyJump in ~/.ssh/config (it would give them its AutoAddPolicy).
        hop: object = conn
        while isinstance(hop, Connection):
            keys = hop.client.get_host_keys()
            for name, key in known_hosts.entries:
                keys.add(name, key.get_name(), key)
            hop.client.set_missing_host_key_policy(policy)
            self._hop_ports.setdefault(hop.host, hop.port)
            hop = hop.gateway
        return conn

    def _chain(self, spec: SSHSpec) -> Connection:
        """A connection to ``spec`` through its jump hosts (not opened yet)."""
        gateway = self._chain(spec.jump) if spec.jump is not None else None
        return self._connection(spec, gateway)

    def _check_key_file(self, path: str) -> None:
        """Refuse a private key that others can read or write, as OpenSSH does ("UNPROTECTED
        PRIVATE KEY FILE"): by its mode bits, which hold for root too (access() would not)."""
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return  # a missing key is paramiko's to report, with the others it tries
        if mode & 0o077:
            raise AuthError(
                f"{self.spec.display}: UNPROTECTED PRIVATE KEY FILE {path}: mode "
                f"{stat.S_IMODE(mode):04o} lets others read or write it; ssh refuses such a key "
                f"and so does remotekit. Make it yours alone with\n  chmod 600 {quote(path)}",
                host=self.host,
            )

    def connect(self) -> None:
        self._connected()

    def _connected(self) -> Connection:
        """The held connection, opened if need be; steps keep this reference, not ``_conn``,
        which another thread may drop when its channel fails. One that had dropped is
        replaced with a note (:class:`~remotekit.errors.Reconnected`)."""
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            lost = self._lost or self._conn is not None
            if self._conn is not None:  # it went down: close it (its thread), not just forget it
                _shut(self._conn)
                self._conn = None
            self._conn = conn = self._open()
            self._lost = False
            self.reconnects += lost
            n = self.reconnects
        if lost:
            warnings.warn(
                f"{self.host}: the SSH connection to {self.spec.display} had dropped; "
                f"reconnected (reconnect {n})",
                Reconnected,
                stacklevel=caller_level(),
            )
        return conn

    def _open(self) -> Connection:
        """A new connection to the target (through its jump hosts, each reached through the
        one before: ProxyJump a,b), open."""
        conn = self._chain(self.spec)
        try:
            conn.open()
        except BaseException as exc:
            mute = _bannerless(conn)  # asked before close() drops the transports
            if isinstance(exc, paramiko.AuthenticationException):
                refused = _auth_refused(conn)
                _shut(conn)
                said = "" if str(exc).startswith("Authentication failed") else f" ({exc})"
                raise AuthError(
                    f"{self.spec.display}: authentication failed: {refused}{said}. Check "
                    "`ssh:` (user@host) and `identity:` for this host in hosts.yaml, or load "
                    "the key into ssh-agent",
                    host=self.host,
                ) from exc
            _shut(conn)  # and the jump hosts opened so far
            if mute is not None and isinstance(exc, (paramiko.SSHException, EOFError, OSError)):
                raise ConnectError(
                    f"{self.spec.display}: no SSH banner from {mute} within "
                    f"{self.connect_timeout:g} s (timeouts.connect): something accepts TCP "
                    "there but does not speak SSH, or is stuck",
                    host=self.host,
                ) from None
            raise self._translate(exc) from exc
        transport = conn.client.get_transport()
        if transport is not None and isinstance(transport.sock, socket.socket):
            # Small writes (a step's payload, EOF) must not wait on Nagle + delayed ACK.
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _translate(self, exc: BaseException) -> BaseException:
        spec, host = self.spec, self.host
        where = f"{spec.display}"
        known = spec.known_hosts or _DEFAULT_KNOWN_HOSTS
        if isinstance(exc, RevokedHostKey):
            return HostKeyError(
                f"{where}: host key {exc.key.get_name()} {_fingerprint(exc.key)} of "
                f"{exc.hostname} is marked @revoked in {known}. Refusing to connect.",
                host=host,
            )
        if isinstance(exc, UnknownHostKey):
            # paramiko names the hop as known_hosts does: "host" or "[host]:port"; this is
            # the real address even when hosts.yaml used an ~/.ssh/config alias or a jump.
            name, _, port = exc.hostname.removeprefix("[").partition("]:")
            scan = f"ssh-keyscan -p {port} {name}" if port else f"ssh-keyscan {name}"
            return HostKeyError(
                f"{where}: host key {exc.key.get_name()} {_fingerprint(exc.key)} of "
                f"{exc.hostname} is not in {known}. If that fingerprint is right, trust it with\n"
                f"  {scan} >> {shell_path(known)}\n"
                f"or set `host_key: accept-new` for this host in hosts.yaml.",
                host=host,
            )
        if isinstance(exc, paramiko.BadHostKeyException):
            # paramiko names the bare host here; known_hosts says "[host]:port" off port 22,
            # which is a glob to zsh and bash: the hint must quote it.
            hop_port = self._hop_ports.get(exc.hostname, 22)
            name = exc.hostname if hop_port == 22 else f"[{exc.hostname}]:{hop_port}"
            return HostKeyError(
                f"{where}: HOST KEY CHANGED for {name}: expected "
                f"{_fingerprint(exc.expected_key)}, got {_fingerprint(exc.key)}. Refusing to "
                f"connect (this is what a man-in-the-middle looks like). If the server was "
                f"reinstalled, remove the old key:\n"
                f"  ssh-keygen -R {quote(name)} -f {shell_path(known)}",
                host=host,
            )
        if isinstance(exc, KnownHostsUnusable):
            return HostKeyError(
                f"{where}: cannot use known_hosts {exc.where}: {exc.problem}. Host keys are "
                "checked against it: fix or move it (or point `known_hosts:` in hosts.yaml "
                "at a file).",
                host=host,
            )
        if isinstance(exc, socket.gaierror):
            return ConnectError(f"{where}: cannot resolve {spec.host}: {exc.strerror}", host=host)
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return ConnectError(
                f"{where}: no answer within {self.connect_timeout:g} s (timeouts.connect)",
                host=host,
            )
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            return ConnectError(f"{where}: connection refused on port {spec.port}", host=host)
        if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
            return ConnectError(f"{where}: {type(exc).__name__}: {exc}", host=host)
        return exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                _shut(self._conn)
                self._conn = None

    # -- steps ------------------------------------------------------------------------------

    def start(
        self,
        argv: Sequence[str],
        stdin: Iterable[bytes] | None,
        *,
        wait: float | None = None,
        sink: Sink | None = None,
    ) -> SSHProcess:
        return SSHProcess(self._exec(argv, wait), stdin, self._sessions.release, sink)

    def open_terminal(
        self, argv: Sequence[str], *, term: str, columns: int, rows: int
    ) -> SSHTerminal:
        """``argv`` on a pty there (sshd's), ``columns`` x ``rows``; output and errors merged."""
        chan = self._exec(argv, self.connect_timeout, pty=(term, columns, rows))
        return SSHTerminal(chan, self._sessions.release, self.host)

    def _exec(
        self, argv: Sequence[str], wait: float | None, pty: tuple[str, int, int] | None = None
    ) -> paramiko.Channel:
        """A session channel (a slot taken: the caller releases it) running ``argv``."""
        command = join(argv)  # the one quoting point
        if not self._sessions.acquire(timeout=wait):
            raise TimeoutError(f"all {self.max_sessions} sessions busy")
        conn: Connection | None = None
        try:
            conn, chan = self._session()
            transport = chan.get_transport()
            if pty is not None:
                self._get_pty(chan, transport, pty)
            chan.exec_command(command)
        except RemotekitError:
            self._sessions.release()
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._sessions.release()
            if conn is not None:
                self._drop(conn)
            raise ConnectionLost(
                f"{self.spec.display}: could not open a channel: {exc}", host=self.host
            ) from exc
        return chan

    def _session(self) -> tuple[Connection, paramiko.Channel]:
        """A session channel with nothing started on it yet, and its connection.

        A held connection that turns out dead here (the server dropped it while no step ran,
        and paramiko had not seen it yet) is replaced once: nothing was sent on the channel,
        so nothing runs twice. Once ``exec_command`` is sent the step may have started: a
        failure from then on is the caller's ConnectionLost, never retried."""
        held = self._conn
        conn = self._connected()
        try:
            return conn, self._open_session(self._active(conn))
        except (OSError, EOFError, paramiko.SSHException):
            # A refusal on a live connection (MaxSessions) is an answer, and so is any failure
            # of a connection opened just now: only a held one found dead is replaced.
            if conn.is_connected or conn is not held:
                raise
        self._drop(conn)
        conn = self._connected()  # with the note: Reconnected
        return conn, self._open_session(self._active(conn))

    @staticmethod
    def _active(conn: Connection) -> paramiko.Transport:
        transport: paramiko.Transport | None = conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("connection is closed")
        return transport

    def _get_pty(
        self, chan: paramiko.Channel, transport: paramiko.Transport, pty: tuple[str, int, int]
    ) -> None:
        """A pty on ``chan``. A server may refuse one (``PermitTTY no``, ``no-pty`` in
        authorized_keys) on a connection that is fine: that is said, and the connection kept."""
        try:
            chan.get_pty(term=pty[0], width=pty[1], height=pty[2])
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not transport.is_active():
                raise
            chan.close()
            raise RemotekitError(
                f"{self.spec.display}: the SSH server refused a terminal (PermitTTY / no-pty)",
                host=self.host,
                step="shell",
            ) from exc

    def _drop(self, conn: Connection) -> None:
        """Close ``conn`` (it failed) if it is still the held one; the next step opens anew
        (and says so)."""
        with self._lock:
            if self._conn is not conn:
                return
            self._conn, self._lost = None, True
        _shut(conn)

    def _open_session(self, transport: paramiko.Transport) -> paramiko.Channel:
        """A session channel. sshd frees a finished session's slot only once that session's
        process is reaped, a moment after we closed it, so while the connection is up a refused
        open means "busy" and is tried again (for up to ``connect_timeout``), not "lost"."""
        end = time.monotonic() + self.connect_timeout
        pause = 0.02
        while True:
            try:
                return transport.open_session(timeout=self.connect_timeout)
            # paramiko keeps one saved failure per connection: under concurrent opens a refusal
            # may surface as ChannelException or as a bare "Unable to open channel." SSHException.
            except paramiko.SSHException:
                if not transport.is_active() or time.monotonic() + pause > end:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


class SSHTerminal:
    """One exec channel with a pty (:meth:`SSHTransport.open_terminal`)."""

    def __init__(self, chan: paramiko.Channel, release: Callable[[], None], host: str):
        self._chan = chan
        self._release = release
        self._host = host
        self._released = False
        self._ending = threading.Lock()  # a resize never follows our CLOSE (as in SSHProcess)

    def fileno(self) -> int:
        return self._chan.fileno()

    def read(self) -> bytes:
        try:
            return self._chan.recv(_CHUNK)
        except (OSError, EOFError, paramiko.SSHException):
            return b""  # the connection is gone: poll() says there is no exit status

    def write(self, data: bytes) -> None:
        try:
            self._chan.sendall(data)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise ConnectionLost(f"the SSH connection dropped: {exc}", host=self._host) from exc

    def resize(self, columns: int, rows: int) -> None:
        with self._ending, contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._chan.resize_pty(width=columns, height=rows)

    def poll(self) -> int | None:
        chan = self._chan
        if not chan.exit_status_ready():
            return None
        if chan.exit_status >= 0:
            return chan.exit_status
        # Closed without an exit status. On a live connection that is sshd's "exit-signal"
        # (the program was killed by a signal), which paramiko drops: 255, as OpenSSH's ssh.
        transport = chan.get_transport()
        return 255 if transport is not None and transport.is_active() else None

    def wait(self, timeout: float) -> int | None:
        self._chan.status_event.wait(timeout)
        return self.poll()

    def close(self) -> None:
        with self._ending, contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._chan.close()
        if not self._released:
            self._released = True
            self._release()
