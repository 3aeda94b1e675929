# remotekit agent: one per open target, shipped over stdin and run THERE by boot.py, which the
# same constant loader as the runner's (``python -c LOADER``) runs first: the boot compiles
# this file through the code cache and calls ``main(cache, cache_folder)``. The agent then takes every step
# of the target as framed messages on that one channel. Standard library only; it runs on every Python the
# runner runs on (MIN_PYTHON; tests run it on real 3.6 and later); on an older one it says hello
# with its version and leaves, and the caller runs each step without it.
#
# Frames, both ways: KIND (1 byte) | step id (u32, big-endian) | length (u32) | payload.
#
#   caller -> agent   R  the runner's source (once, step 0), sent right behind the boot's and
#                        the agent's: the caller does not wait for the hello, so the loader's
#                        buffered read may hold it (and more), which the agent takes first
#                     S  start step N; payload: what a runner reads first on its stdin
#                        (``<length>\n<header JSON>``)
#                     D  more bytes for step N's stdin (its payload)
#                     E  EOF on step N's stdin: the runner takes it as "stop the step"
#                     C  the caller consumed that many bytes of step N's output (decimal)
#                     P  are you there (step 0; any payload): answered at once, in kind
#                     N  nothing (step 0): sent for what carries it (Launch.nudge: srun)
#   agent -> caller   A  the agent runs (step 0): ``{"pid": N, "python": [3, 11, 7]}``, its
#                        first bytes on stdout (what a login shell printed before is not
#                        a frame: the caller looks for this one)
#                     O / e  bytes step N wrote on its stdout / stderr
#                     W  that many bytes of step N's stdin were written to it (decimal),
#                        said once SAY_WRITTEN of them are unsaid
#                     X  step N ended: its exit status (decimal; 128+N for signal N)
#                     P  here I am: the payload of the caller's P
#
# Each end checks what it reads against what the other may send (TO_AGENT, TO_CALLER: the
# kinds, each one's step id, 0 or a step's, and its most payload; a decimal where it says
# one) in the one decoder, ``frames``, as soon as a frame's header is in: what a header
# claims is never waited for, so a reader holds at most one frame's bound beyond a read. A
# frame that fails is a ProtocolError: the caller closes the agent's channel, as for a
# dropped connection (and holds it to the window: MOST_UNACKED); the agent says why on its
# stderr and leaves, as when its channel closes.
#
# Each step is a child forked from the agent that runs the runner unchanged (its ``entry()``:
# the runner's code runs once in the agent, as a module), with the step's own pipes as its
# stdin, stdout and stderr, so the kill semantics are the runner's: its own session, a
# subreaper, TERM then KILL of the step's tree on EOF or its deadline. As it leaves, the child
# closes its stdin, stdout and stderr and says its exit status on a fourth pipe (the runner's
# DONE, which no step's process holds): the agent sends X then, not once the kernel has taken
# the child down and SIGCHLD came (it reaps it after). One killed says nothing: it is reaped
# first. The agent is single-threaded (a poll loop), so forking from it is safe. Output is
# relayed per step; the agent stops reading a step's pipes while WINDOW of its bytes are
# unconsumed by the caller, so a step that floods only blocks itself.
#
# A step's child is forked before its step comes (a Spare): once no step runs, the agent forks
# the next one, its pipes made, and it waits in the runner for its header. When the last step
# ran a script, its runner forks the zygote at once, as a runner of its own does (before the
# header: the next is likely a script too); else once it read that the step runs a script
# (runner.AFTER_HEADER), before it draws the key. A step then costs no fork of a Python while
# the caller waits (it was two for a script: the step's child, then its zygote), but a
# script after a command, one; a command after a script lets the zygote go unused.
#
# A step whose header names ``preload`` modules (torch) is forked instead by a Warm: a fork of
# the agent that imported them once, handed the step's pipes over a socket. What a module reads
# from the environment when it is imported (OMP_NUM_THREADS: torch's thread pool) it reads in
# the Warm, so a Warm imports them under the whole environment its steps run in (the runner's
# step_env) and serves only steps whose environment is that one: one Warm per (modules,
# environment), at most WARMS of them.
#
# A call step (header ``worker``) runs in a Worker: a fork of the agent that keeps an Executor,
# the process its functions run in, between calls. Once that Executor runs from the call's
# package, the next calls that fit go from the agent to the Executor and back (a Call), the
# Worker off their path but for stopping their tree: see "a call the agent runs" below.
#
# The agent dies with its channel: EOF on its stdin (or TERM/HUP/INT) closes every step's
# stdin, so each runner stops its tree; what has not exited after the step's grace and GRACE
# is killed; then the agent exits. A runner whose agent was killed outright sees the same EOF.
#
# A step's child holds a copy of the agent's memory, its own header (and nonce) included:
# harmless, as every control line after ``ready`` carries the key its runner draws after the
# step forked, which is in no other process.
import json
import os
import select
import struct
import sys
import time

try:  # the C module, as the runner: signal's enums cost a forked step ~40 us a call
    import _signal as signal
except ImportError:
    import signal

# socket is imported where a Warm needs it (~2 ms): most agents never start one.
# typing only for the checker (as remote/protocol.py): importing it costs ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator  # noqa: F401 (in a type comment)

FRAME = struct.Struct("!cII")
CHUNK = 1 << 16
#: The most of a step's stdin one frame carries (the caller's pieces of its payload).
PIECE = 1 << 18
#: Bytes of one step's output the caller may leave unconsumed before the agent stops reading.
WINDOW = 1 << 20
#: The most of one step's output the caller may hold that it has not credited: the agent reads
#: a step's pipes while less than WINDOW is, one read from each a turn: of CHUNK, or of PIECE
#: from a get's stdout or a bulk step's (file bytes: large frames, a quarter of the turns).
MOST_UNACKED = WINDOW + PIECE + CHUNK
#: The most one read of the channel takes in (a put's payload comes in PIECE frames).
READ = 1 << 20
#: A pipe that carries a put's or a get's bytes (or a bulk step's stdout) is made large: the
#: runner's ``widen`` (its BULK_PIPE, 1 MiB; F_SETPIPE_SZ, Linux; at most
#: /proc/sys/fs/pipe-max-size, 1 MiB by default): a 64 KiB pipe costs the agent and the
#: runner a turn of their loops per 64 KiB. Only those: a user's pipes share a quota
#: (pipe-user-pages-soft), so an agent that never moves a file widens none.
#: How long a step's output and stdin credits wait for more to go with them in one write
#: (a step's ready, started and exit lines and its X are then one message through the hops:
#: each write is a packet, and a wake of every process and thread on the way to the caller).
#: What ends a step (X), a probe's answer and the hello go at once, with what waits.
HOLD = 0.005
#: The stdin bytes written into a step's runner before the caller is told (W): it waits only
#: once WINDOW of them is unsaid, so a step whose payload is small costs no W frame.
SAY_WRITTEN = PIECE
#: How long, beyond the longest grace of a step, steps get to stop after the channel closed.
GRACE = 3.0
#: The oldest Python the agent runs on: the runner's (older ones fail both alike).
MIN_PYTHON = (3, 6)
#: Warm processes at most (each holds its modules imported: torch is ~0.3 GB): a step whose
#: environment none has gets a new one, in place of the least recently used idle one; with
#: none idle, it is forked from the agent and imports its modules itself.
WARMS = 2
#: Warm workers for calls at most (Worker): a call none idle of its key can take gets a new
#: one, in place of the least recently used idle one; with all busy, it runs as any step.
WORKERS = 4
#: What the agent sends a Worker: the step id, what to do (STEP: run the call step on the
#: pipes attached; STOP: stop the tree of the call the agent ran in its Executor), the grace.
ORDER = struct.Struct("!IBd")
STEP, STOP = 0, 1


def frame(kind, sid, payload=b""):
    # type: (bytes, int, bytes | memoryview) -> bytes
    """One frame (``kind``: a one-byte bytes, ``sid``: the step id; ``payload`` a view of a
    larger buffer, too: the frame is its one copy)."""
    return FRAME.pack(kind, sid, len(payload)) + payload


def hello():
    """The payload of the agent's first frame (``A``, step 0): its pid and Python version."""
    return json.dumps({"pid": os.getpid(), "python": list(sys.version_info[:3])}).encode()


#: What each end may send: kind -> (the most payload one frame of it carries, whether it is
#: for the agent itself (step 0) rather than a step, whether its payload is a decimal).
TO_AGENT = {
    b"R": (1 << 24, True, False),
    b"S": (1 << 24, False, False),
    b"D": (PIECE, False, False),
    b"E": (0, False, False),
    b"C": (20, False, True),
    b"P": (64, True, False),
    b"N": (0, True, False),
}
TO_CALLER = {
    b"A": (1024, True, False),
    b"O": (PIECE, False, False),
    b"e": (CHUNK, False, False),
    b"W": (20, False, True),
    b"X": (20, False, True),
    b"P": (64, True, False),
}


class ProtocolError(ValueError):
    """What came on the channel is not a frame the other end may send; the message says what
    (bytes quoted as ``repr`` quotes them: escaped)."""


def frames(buf, kinds):
    # type: (bytearray, dict[bytes, tuple[int, bool, bool]]) -> Iterator[tuple[bytes, int, bytes]]
    """The complete frames at the start of ``buf`` (a bytearray, consumed as each is taken),
    as (kind, sid, payload); ``kinds``: what the other end may send (TO_AGENT, TO_CALLER).
    Raises ProtocolError at the first that is not one of them, checked from its header alone
    (an unknown kind, a step id its kind cannot have, a length past its kind's bound), or
    whose number is not a decimal."""
    while len(buf) >= FRAME.size:
        kind, sid, n = FRAME.unpack_from(buf)
        rule = kinds.get(kind)
        if rule is None:
            raise ProtocolError("a frame of unknown kind %r" % kind)
        most, own, number = rule
        if n > most:
            raise ProtocolError("a %r frame of %d bytes (at most %d)" % (kind, n, most))
        if (sid == 0) != own:
            raise ProtocolError("a %r frame for step %d" % (kind, sid))
        end = FRAME.size + n
        if len(buf) < end:
            return
        with memoryview(buf) as view:  # one copy of the payload (a slice of buf is another)
            payload = bytes(view[FRAME.size : end])
        del buf[:end]
        if number and not payload.isdigit():
            raise ProtocolError(
                "a %r frame whose payload is not a decimal number: %r" % (kind, payload)
            )
        yield kind, sid, payload


def write_all(fd, data):
    """All of ``data`` to ``fd``, waiting for room when it is non-blocking (a channel whose
    stdin and stdout are one socket shares our stdin's O_NONBLOCK)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)


class Spare(object):
    """A step's child forked before its step (Agent.spare): its pid and our ends of its
    stdin, stdout, stderr and done pipe (non-blocking)."""

    def __init__(self, pid, fds):
        self.pid, self.fds = pid, fds

    def close(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()

    def kill(self):
        """Let it go: our ends closed, its session (runner and zygote) killed."""
        self.close()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


class Step(object):
    """One step's child and its pipes (stdin, stdout, stderr, done), seen from the agent."""

    def __init__(self, sid, pid, stdin, out, err, done=None):
        self.sid, self.pid = sid, pid
        self.done = done  # our end of the pipe its child says its status on (Agent.child)
        self.stdin = stdin  # our write end, non-blocking; None once closed
        self.pending = []  # bytes waiting for room in the stdin pipe
        self.unsaid = 0  # bytes written into the stdin pipe, not yet said (W)
        self.eof = False  # close stdin once pending is written
        self.outputs = {out: b"O", err: b"e"}
        self.reads = {out: CHUNK, err: CHUNK}  # the most one read of each takes
        self.unacked = 0
        self.status = None
        self.warm = None  # the key of the Warm it was forked from (Agent.warm_for)
        self.worker = None  # the Worker that runs it (Agent.to_worker)
        self.call = None  # the Call the agent runs in that Worker's Executor (Agent.direct)
        self.grace = 1.0  # the runner's TERM -> KILL grace

    def close_stdin(self):
        if self.stdin is not None:
            try:
                os.close(self.stdin)
            except OSError:
                pass
            self.stdin = None
        self.pending = []

    def close_done(self):
        if self.done is not None:
            try:
                os.close(self.done)
            except OSError:
                pass
            self.done = None


def freeze():
    """Put every object this process holds out of the cyclic collector's reach (gc.freeze):
    a forked step's collections then never walk the agent's heap (the Warm's: all of
    torch's), which costs a walk and a copy of every page it touches (copy-on-write).
    Python 3.6 has no gc.freeze: there the steps pay for it."""
    import gc

    if hasattr(gc, "freeze"):
        gc.freeze()


def read_ahead():
    """The bytes the loader's buffered stdin read beyond the agent's source (the runner's
    frame, the first steps), which no poll on fd 0 would announce. fd 0 is non-blocking by
    now: with nothing buffered, read1's one raw read returns what is there, or nothing."""
    try:
        return sys.stdin.buffer.read1(CHUNK) or b""
    except (AttributeError, OSError, ValueError):  # no stdin object; BlockingIOError
        return b""


def send_fds(sock, data, fds):
    """``data`` with ``fds`` attached (SCM_RIGHTS; socket.send_fds is Python >= 3.9)."""
    import array
    import socket

    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def recv_fds(sock, size, n):
    import array
    import socket

    fds = array.array("i")
    data, anc, _, _ = sock.recvmsg(size, socket.CMSG_LEN(n * fds.itemsize))
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(raw[: len(raw) - (len(raw) % fds.itemsize)])
    return data, list(fds)


class Warm(object):
    """A fork of the agent that imported ``modules`` (``torch``) once, with the environment
    ``env`` set while it imported them: a step that asks for them (``preload``) and runs in
    that environment is forked from it, so it finds them imported, and set up as a fresh
    import of its own would have set them up. The agent hands it the step's pipes over a
    socket; it answers ``P sid pid`` and ``X sid status`` lines. It ends when that socket
    closes (the agent is gone, or closed it). ``key``: (modules, env's items, sorted)."""

    def __init__(self, agent, key, env):
        self.key, self.modules = key, key[0]
        self.buf = b""
        import socket

        ours, theirs = socket.socketpair()
        pid = os.fork()
        if not pid:
            ours.close()
            self.serve(agent, theirs, env)
        theirs.close()
        self.pid, self.sock = pid, ours

    def close(self):
        """Let it go: it exits on EOF (the agent reaps it with the rest)."""
        self.sock.close()

    def order(self, sid, fds, zygote):
        send_fds(self.sock, struct.pack("!I?", sid, zygote), fds)

    def serve(self, agent, sock, env):
        code = 0
        try:
            agent.forget()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # never hold the channel open
                os.dup2(null, fd)
            os.close(null)
            own = dict(os.environ)
            agent.set_environ(env)  # what the modules read as they load: the steps' own
            for name in self.modules:
                try:
                    __import__(name)
                except BaseException:
                    pass  # the step imports it again and says why it fails
            agent.set_environ(own)  # a step's runner makes its env from the agent's, as forked
            freeze()
            children = {}
            wake_r, wake_w = os.pipe()
            os.set_blocking(wake_w, False)
            signal.set_wakeup_fd(wake_w)
            signal.signal(signal.SIGCHLD, lambda s, f: None)
            while True:
                self.reap(sock, children)
                ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
                if wake_r in ready:
                    os.read(wake_r, 4096)
                if sock not in ready:
                    continue
                data, fds = recv_fds(sock, 5, 3)
                if not data:
                    break
                sid, zygote = struct.unpack("!I?", data)
                pid = os.fork()
                if not pid:
                    sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    agent.child(fds, zygote)
                for fd in fds:
                    os.close(fd)
                children[pid] = sid
                sock.sendall(b"P %d %d\n" % (sid, pid))
        except BaseException:
            code = 1
        finally:
            os._exit(code)

    @staticmethod
    def reap(sock, children):
        for pid in list(children):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 0
            if got:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                sock.sendall(b"X %d %d\n" % (children.pop(pid), 128 - code if code < 0 else code))


class Worker(object):
    """A warm worker: a fork of the agent, in its own session, that runs the steps of calls
    (header ``worker``) one at a time, each on the pipes the agent hands it over a socket,
    with the runner's code (``worker_step``): their functions run in its Executor, a process
    that stays between calls, so what one call imports or sets the next one finds. A stop
    (the deadline, EOF: timeout, Ctrl-C, cancel) kills the Executor's tree, and the next
    call gets a fresh one. It answers ``X sid status`` when a step ended, and ends when its
    socket closes (the agent gone, or it closed it), its Executor's tree stopped first.
    ``key``: what it was started with (Agent.worker_key): a call of another key never runs
    in it.

    Once a call left its Executor warm, running from the call's package, it says so (``E
    sid [pid, package, base, grace]``, the Executor's order socket attached): the next calls
    that fit (Agent.direct) go from the agent to the Executor and back, and the worker stays
    off their path, woken only to stop the Executor's tree (``STOP``: answered ``S sid code
    {stopped, running}``) or by its socket's EOF. ``fast``: that Executor (Direct), or None."""

    def __init__(self, agent, key):
        self.key, self.buf = key, b""
        self.fast = None
        self.fds = []  # fds that came with its words, not yet taken (an E's socket)
        import socket

        ours, theirs = socket.socketpair()
        pid = os.fork()
        if not pid:
            ours.close()
            self.serve(agent, theirs)
        theirs.close()
        self.pid, self.sock = pid, ours

    def close(self):
        self.drop_fast()
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.sock.close()

    def drop_fast(self):
        if self.fast is not None:
            self.fast.sock.close()
            self.fast = None

    def order(self, sid, fds, grace):
        self.drop_fast()  # it runs this one itself: what it says after is what holds
        send_fds(self.sock, ORDER.pack(sid, STEP, grace), fds)

    def stop(self, sid, grace):
        self.sock.send(ORDER.pack(sid, STOP, grace))

    def serve(self, agent, sock):
        code = 0
        executor = None
        grace = 1.0
        runner = agent.runner
        try:
            agent.forget()
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # never hold the channel open
                os.dup2(null, fd)
            runner["become_subreaper"]()  # what a call leaves behind stays ours to stop
            runner["COMPILE"] = agent.code.compile
            executor = runner["Executor"](send_fds, recv_fds)
            while True:
                data, fds = recv_fds(sock, ORDER.size, 3)
                if len(data) != ORDER.size:
                    break
                sid, op, grace = ORDER.unpack(data)
                if op == STOP:  # a call the agent ran in the Executor: stop its tree
                    sock.sendall(self.stop_call(runner, executor, sid, grace))
                    continue
                if len(fds) != 3:
                    break
                for fd, to in zip(fds, (0, 1, 2)):
                    os.dup2(fd, to)
                    os.close(fd)
                os.set_blocking(0, True)
                status = runner["worker_step"](executor)
                for fd in (0, 1, 2):  # the step's pipes close here: its EOF for the agent
                    os.dup2(null, fd)
                sock.sendall(b"X %d %d\n" % (sid, status & 0xFF))
                if executor.pid is not None and executor.base is not None and not executor.dead:
                    said = [executor.pid, executor.package, executor.base, grace]
                    send_fds(
                        sock,
                        b"E %d %s\n" % (sid, json.dumps(said).encode()),
                        [executor.sock.fileno()],
                    )
        except BaseException:
            code = 1
        finally:
            try:
                if executor is not None and executor.pid is not None:
                    # the agent gone (EOF; SIGKILLed), maybe in a call it ran: its tree
                    executor.relay, executor.returncode, executor.dead = None, None, False
                    runner["stop_tree"](executor, grace)
            finally:
                if executor is not None:
                    executor.forget()
                os._exit(code)

    @staticmethod
    def stop_call(runner, executor, sid, grace):
        """Stop the tree of the call ``sid`` the agent ran in the Executor (its deadline,
        EOF, or what it left running): its ``S sid code {stopped, running}`` line."""
        said = {"stopped": [], "running": []}
        code = 0
        if executor.pid is not None:
            executor.relay, executor.returncode, executor.dead = None, None, False
            executor.poll()  # one that ended already: its status
            said["stopped"], said["running"] = runner["stop_tree"](executor, grace)
            code = executor.returncode if executor.returncode is not None else -9
            executor.forget()
        return b"S %d %d %s\n" % (sid, code, json.dumps(said).encode())


class Direct(object):
    """A worker's Executor, as the agent sees it (Worker ``E``): its pid, the package and
    its folder it runs from, the grace its worker stops it with, and our copy of the socket
    that takes its orders."""

    def __init__(self, pid, package, base, grace, fd):
        import socket

        self.pid, self.package, self.base, self.grace = pid, package, base, grace
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)


class Call(object):
    """A call step the agent runs in a worker's Executor itself (Agent.direct): it gathers
    the call's order from the step's stdin frames, hands it to the Executor with the call's
    pipes, and supervises it: the key's lines, the value, the deadline, EOF; the worker
    stops the tree when it must."""

    def __init__(self, worker, header, first):
        self.worker, self.header, self.first = worker, header, first
        self.fast = worker.fast  # its Executor (Direct)
        self.need = int(header["files"][0][1])
        self.got = []  # the order, as it came
        self.size = 0
        self.key = None
        self.val = self.done = None  # our ends of its value and done pipes
        self.value, self.value_over = bytearray(), 0
        self.said = b""  # what its done pipe said
        self.status = None  # its status, where it said one and was stopped all the same
        self.deadline = None
        self.reason = None  # why it was stopped (the worker stops it)
        self.end = None  # its exit line's data, once known
        self.until = None  # how long its pipes may take to close after that
        self.tail = None  # its value and exit lines, going out as the caller has room


class Agent(object):
    def __init__(self, cache, cache_folder=None):
        self.inbuf = bytearray()
        self.outbox = []  # frames not yet written (flush)
        self.held = None  # when the oldest frame in the outbox came, unless one is urgent
        self.runner = None
        self.code = cache  # the boot's CodeCache: the runner's and the steps' code
        self.cache_folder = cache_folder  # the boot's rules for a cache folder: the runner's
        self.steps = {}
        self.warm = {}  # key -> Warm (warm_for): forks that keep modules imported, oldest first
        self.workers = []  # Worker (worker_for): warm workers for calls, least recently used first
        self.spare = None  # the next step's child, forked while no step runs (prepare)
        self.scripts = False  # whether the last step ran a script: the spare's zygote then
        self.closing = False
        self.watched = {}
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, self.on_stop)
        os.set_blocking(0, False)
        self.inbuf += read_ahead()

    def on_stop(self, signum, frame):
        self.closing = True

    def send(self, kind, sid, payload=b""):
        """A frame to the caller, written with the others of this turn of the loop, or of
        the next ones within HOLD (flush): one write, not one a frame, where a hop relays
        each write as a message of its own (srun to slurmstepd over TCP, where a small write
        behind another waits for its ACK)."""
        self.outbox.append(frame(kind, sid, payload))
        if kind in (b"O", b"e", b"W"):
            if self.held is None:
                self.held = time.monotonic()
        else:
            self.held = 0.0  # due now

    def flush(self):
        if self.outbox:
            data, self.outbox, self.held = b"".join(self.outbox), [], None
            write_all(1, data)

    def flush_due(self):
        """Write the outbox if it is due (a frame that goes at once, HOLD passed, or CHUNK
        of it); how long the loop may wait, in milliseconds, before it is."""
        if self.held is None:
            return 250
        left = self.held + HOLD - time.monotonic()
        if left <= 0 or sum(map(len, self.outbox)) >= CHUNK:
            self.flush()
            return 250
        return left * 1000

    # -- the loop ----------------------------------------------------------------------------

    def run(self):
        self.send(b"A", 0, hello())
        self.flush()
        self.take_orders()  # what came with the agent's source
        poller = select.poll()
        while not self.closing:
            wait = min(self.flush_due(), self.calls_due())
            self.prepare()
            self.watch(poller)
            for fd, ev in poller.poll(wait):
                self.ready(fd, ev)
            self.reap()
        self.flush()
        self.shutdown()
        self.flush()

    def watch(self, poller):
        """Re-register what the loop waits on: the channel, the wake pipe, every step's
        pipes whose caller has room (and stdin with bytes pending)."""
        for fd in self.watched:
            poller.unregister(fd)
        fds = {0: select.POLLIN, self.wake_r: select.POLLIN}
        for warm in list(self.warm.values()) + self.workers:
            fds[warm.sock.fileno()] = select.POLLIN
        for step in self.steps.values():
            if step.unacked < WINDOW:
                for fd in step.outputs:
                    fds[fd] = select.POLLIN
            if step.stdin is not None and step.pending:
                fds[step.stdin] = select.POLLOUT
            if step.done is not None:
                fds[step.done] = select.POLLIN
            if step.call is not None:
                for fd in (step.call.val, step.call.done):
                    if fd is not None:
                        fds[fd] = select.POLLIN
        for fd, mask in fds.items():
            poller.register(fd, mask)
        self.watched = fds

    def ready(self, fd, ev):
        if fd == 0:
            self.read_channel()
        elif fd == self.wake_r:
            try:
                while os.read(self.wake_r, 4096):
                    pass
            except OSError:
                pass
        else:
            for warm in list(self.warm.values()) + self.workers:
                if fd == warm.sock.fileno():
                    self.hear(warm)
            for step in list(self.steps.values()):
                if fd in step.outputs:
                    self.relay(step, fd)
                elif fd == step.stdin:
                    self.feed(step)
                elif fd == step.done:
                    self.said_done(step)
                elif step.call is not None and fd in (step.call.val, step.call.done):
                    self.call_read(step, fd)

    def read_channel(self):
        try:
            data = os.read(0, READ)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.closing = True
            return
        self.inbuf += data
        self.take_orders()

    def take_orders(self):
        try:
            for kind, sid, payload in frames(self.inbuf, TO_AGENT):
                self.order(kind, sid, payload)
        except ProtocolError as e:  # not our caller: leave, as when the channel closes
            write_all(2, ("remotekit agent: protocol violation: %s\n" % e).encode())
            del self.inbuf[:]
            self.closing = True

    def order(self, kind, sid, payload):
        if kind == b"P":
            self.send(b"P", sid, payload)
        elif kind == b"R":
            self.take_runner(payload)
        elif kind == b"S":
            self.start(sid, payload)
        step = self.steps.get(sid)
        if step is None:
            return
        if step.call is not None and kind in (b"D", b"E"):
            self.call_input(step, kind, payload)
        elif kind == b"D" and step.stdin is not None:
            step.pending.append(payload)
            self.feed(step)
        elif kind == b"E":
            step.eof = True
            self.feed(step)
        elif kind == b"C":
            step.unacked = max(0, step.unacked - int(payload))
            if step.call is not None:
                self.finish(step)  # what waited for room

    def take_runner(self, source):
        """Keep the runner's code for the steps, and borrow its process settings (loaded as
        a module, not run): the agent is a subreaper like a runner, and not dumpable."""
        self.code.hook()
        runner = {"__name__": "remotekit_runner", "__builtins__": __builtins__}
        runner["cache_folder"] = self.cache_folder  # its packages' folder is held to them
        exec(self.code.compile(source, "<remotekit runner>"), runner)
        runner["become_subreaper"]()  # a step's orphans stay ours to reap
        runner["prctl"](4, 0)  # PR_SET_DUMPABLE 0: other processes cannot read our memory
        self.read_header = runner["read_header"]  # the header's fields: the runner's table
        self.runs_script = runner["runs_script"]
        self.step_env, self.set_environ = runner["step_env"], runner["set_environ"]
        self.widen = runner["widen"]  # a pipe that carries bulk bytes, made large
        self.runner = runner  # each step's child runs its entry(), defined once here
        freeze()

    def header_of(self, first):
        """The step's header (what its runner reads first: ``<length>\n<JSON>``), read as
        the runner reads it, every field present; the agent reads two of them: ``preload``
        and ``grace``. One it cannot read has the defaults (its runner says what is wrong)."""
        try:
            return self.read_header(first.split(b"\n", 1)[1])
        except (ValueError, IndexError, TypeError, AttributeError):
            return self.read_header(b"{}")

    # -- a step ------------------------------------------------------------------------------

    def start(self, sid, first, direct=True):
        header = self.header_of(first)
        zygote = self.runs_script(header)
        if zygote and header["worker"]:
            if direct and self.direct(sid, header, first):
                return
            if self.to_worker(sid, header, first):
                return
        # A step that starts a new interpreter (no zygote: not a script, or PYTHON* set) has
        # no use for a Warm's imports.
        key = self.warm_key(header) if zygote else None
        try:
            pid, (in_w, out_r, err_r, done) = self.fork(sid, key, zygote)
        except OSError as e:  # no fork, no pipes: this step fails, the agent goes on
            self.send(b"e", sid, ("remotekit agent: cannot start the step: %s\n" % e).encode())
            self.send(b"X", sid, b"125")
            return
        for fd in (in_w, out_r, err_r):
            os.set_blocking(fd, False)
        step = self.steps[sid] = Step(sid, pid, in_w, out_r, err_r, done)
        if header["op"] == "put":  # its bytes: on the channel, then the step's stdin
            self.widen(0)
            self.widen(in_w)
        elif header["op"] == "get" or header["bulk"]:  # on the step's stdout, then the channel
            self.widen(out_r)
            self.widen(1)
            step.reads[out_r] = PIECE
        step.warm = key if pid is None else None
        step.grace = float(header["grace"] or 1.0)
        step.pending.append(first)
        self.feed(step)

    def prepare(self):
        """Fork the next step's child (a Spare) while no step runs and none is ready: its
        fork is then not in the next step's time."""
        if self.spare is not None or self.steps or self.runner is None or self.closing:
            return
        try:
            zygote = True if self.scripts else self.runner["AFTER_HEADER"]
            pid, fds = self.fork(0, None, zygote, spare=False)
        except OSError:
            return  # the step forks its own, and says why if it cannot
        for fd in fds:  # forked here (no Warm): all four pipes are ours
            os.set_blocking(fd, False)
        self.spare = Spare(pid, fds)

    def fork(self, sid, key, zygote, spare=True):
        """The step's child, forked here or by the Warm of ``key`` (warm_key; None: here):
        (its pid, or None when the Warm will say it, and our ends of its stdin, stdout,
        stderr and done pipe, None when the Warm forks it). ``zygote``: whether its runner forks one (it runs a script; the runner's
        ZYGOTE). ``spare``: whether one forked before (prepare) may serve."""
        ready = None
        if spare and not key:  # the next spare's zygote is forked at once if this is a script
            ready, self.spare, self.scripts = self.spare, None, zygote
        if ready is not None:
            return ready.pid, ready.fds
        warm = self.warm_for(key) if key else None  # forked before the pipes exist
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        done_r = done_w = None
        try:
            if warm is not None:
                pid = None
                warm.order(sid, (in_r, out_w, err_w), zygote)
            else:
                done_r, done_w = os.pipe()
                pid = os.fork()
                if not pid:
                    for fd in (in_w, out_r, err_r, done_r):  # ours: EOF on its stdin is ours
                        os.close(fd)
                    self.child((in_r, out_w, err_w), zygote, done_w)
        except OSError:
            for fd in (in_w, out_r, err_r, done_r):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w, done_w):
                if fd is not None:
                    os.close(fd)
        return pid, (in_w, out_r, err_r, done_r)

    def to_worker(self, sid, header, first):
        """Hand the call step ``sid`` to a warm worker of its key (worker_for); False when
        none can take it (all WORKERS busy): it then runs as any step."""
        worker = self.worker_for(self.worker_key(header))
        if worker is None:
            return False
        grace = float(header["grace"] or 1.0)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            worker.order(sid, (in_r, out_w, err_w), grace)
        except OSError:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            return False
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        for fd in (in_w, out_r, err_r):
            os.set_blocking(fd, False)
        step = self.steps[sid] = Step(sid, worker.pid, in_w, out_r, err_r)
        step.worker = worker
        step.grace = grace
        step.pending.append(first)
        self.feed(step)
        return True

    def worker_key(self, header):
        """What a warm worker is started with and serves only: the call's package (its
        modules, as the worker imported them), its cwd and its whole environment (what a
        module reads as it is imported, OMP_NUM_THREADS, is read once there), as warm_key."""
        env = self.step_env(header)
        return (header["package"], header["cwd"], tuple(sorted(env.items())))

    def worker_for(self, key):
        """An idle warm worker of ``key``, started if there is none (in place of the least
        recently used idle one, past WORKERS); None when WORKERS are all busy."""
        busy = set(id(step.worker) for step in self.steps.values())
        idle = [w for w in self.workers if id(w) not in busy]
        worker = next((w for w in idle if w.key == key), None)
        if worker is not None:
            self.workers.remove(worker)
        else:
            if len(self.workers) >= WORKERS:
                if not idle:
                    return None
                self.workers.remove(idle[0])
                idle[0].close()
            worker = Worker(self, key)
        self.workers.append(worker)  # the most recently used last
        return worker

    def forget(self):
        """In a fork: close every fd of the agent's (steps' pipes, wake pipe, warm sockets)
        and drop its handlers, so this process holds nothing that keeps a step or the
        channel open."""
        signal.set_wakeup_fd(-1)
        for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        for step in self.steps.values():
            for fd in [step.stdin, step.done] + list(step.outputs):
                if fd is not None:
                    os.close(fd)
            if step.call is not None:
                for fd in (step.call.val, step.call.done):
                    if fd is not None:
                        os.close(fd)
        for warm in list(self.warm.values()) + self.workers:
            warm.sock.close()
        for worker in self.workers:
            worker.drop_fast()
            for fd in worker.fds:
                os.close(fd)
        if self.spare is not None:
            self.spare.close()
        for fd in (self.wake_r, self.wake_w):
            if fd is not None:
                os.close(fd)
        self.steps, self.warm, self.wake_r, self.wake_w = {}, {}, None, None
        self.workers = []
        self.spare = None
        self.inbuf, self.outbox = bytearray(), []

    def child(self, fds, zygote, done=None):
        """In the forked child: the step's pipes (``fds``) as fds 0-2, nothing of the agent's,
        and the runner's ``entry()`` with what a fresh ``python -c LOADER`` would give it
        (its STDIN), but that it forks a zygote only when ``zygote`` says the step runs a
        script (a runner of its own forks one before it has read the header, and so before
        it knows). The runner's module-level state (KEY, TO_REMOVE) is the agent's untouched
        copy: the agent only reads the runner's tables. sys.stdout and sys.stderr stay the
        agent's objects, on fds 1 and 2, now the step's pipes: the agent writes only with
        os.write, so they hold nothing (three new text files cost a step ~0.25 ms).

        ``done``: a pipe on which it says its exit status, its stdin, stdout and stderr
        closed first, before it exits: the agent then reports the step's end (X) without
        waiting for the kernel to take this process down (its memory, then SIGCHLD), and
        reaps it after; one that dies without saying it is reaped first."""
        stdin, out, err = fds
        code = 125
        try:
            self.forget()
            os.setsid()
            os.dup2(stdin, 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            for fd in set((stdin, out, err)):
                if fd > 2:
                    os.close(fd)
            os.set_blocking(0, True)
            import io

            code = 0
            runner = self.runner  # what a fresh runner reads from its process at start:
            runner["STDIN"] = io.BufferedReader(io.FileIO(0, "r", closefd=False))
            runner["COMPILE"] = self.code.compile  # the runner's scripts through the cache
            runner["ZYGOTE"] = zygote
            runner["DONE"] = done  # where it says its status as it leaves (leave)
            runner["entry"]()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:
            try:
                os.write(2, ("remotekit agent: %s: %s\n" % (type(e).__name__, e)).encode())
            except OSError:
                pass
            code = 125
        finally:
            try:
                self.runner["leave"](code & 0xFF)  # with done: its status said, then exits
            finally:
                os._exit(code & 0xFF)

    def warm_key(self, header):
        """Which Warm serves the step ``header`` (None: none, it preloads nothing): its
        modules and its whole environment, compared whole rather than a list of the
        variables some module reads at import (which those are is each module's business:
        OMP_*, MKL_*, TORCH_*, CUDA_*, LD_*, ... and what a new release adds), as it costs
        microseconds a step. One whose env field is malformed gets none: its runner says why."""
        try:
            modules = tuple(sorted(map(str, header["preload"] or ())))
            env = self.step_env(header) if modules else {}
        except (TypeError, ValueError, AttributeError):
            return None
        return (modules, tuple(sorted(env.items()))) if modules else None

    def warm_for(self, key):
        """The Warm of ``key``, started if there is none (in place of the least recently
        used idle one, past WARMS); None when WARMS are all busy."""
        warm = self.warm.pop(key, None)
        if warm is None:
            if len(self.warm) >= WARMS and not self.close_idle_warm():
                return None
            warm = Warm(self, key, dict(key[1]))
        self.warm[key] = warm  # the most recently used last
        return warm

    def close_idle_warm(self):
        """Close the least recently used Warm that no running step was forked from."""
        busy = set(step.warm for step in self.steps.values())
        for key, warm in list(self.warm.items()):
            if key not in busy:
                del self.warm[key]
                warm.close()
                return True
        return False

    def hear(self, warm):
        """What a Warm says: ``P sid pid`` (forked) and ``X sid status`` (it ended); a
        Worker also ``E`` and ``S`` (its Executor warm; a call's tree stopped: hear_worker)."""
        try:
            if isinstance(warm, Worker):
                data, fds = recv_fds(warm.sock, CHUNK, 1)
                for fd in fds:  # SCM_RIGHTS gives them inheritable: no exec gets them
                    os.set_inheritable(fd, False)
                warm.fds += fds
            else:
                data = warm.sock.recv(CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # it died: its steps' runners see EOF as ours close; report them
            if self.warm.get(warm.key) is warm:
                del self.warm[warm.key]
            if warm in self.workers:
                self.workers.remove(warm)
                warm.close()
            warm.sock.close()
            for step in list(self.steps.values()):
                if step.worker is warm and step.status is None:
                    step.status = 125
                    self.finish(step)
                elif step.warm == warm.key and step.status is None:
                    step.status = 125 if step.pid is None else step.status
                    self.finish(step)
            return
        warm.buf += data
        while b"\n" in warm.buf:
            line, _, rest = warm.buf.partition(b"\n")
            warm.buf = rest
            if line[:2] in (b"E ", b"S "):
                self.hear_worker(warm, line)
                continue
            word, sid, value = line.split()
            step = self.steps.get(int(sid))
            if step is None:
                continue
            if word == b"P":
                step.pid = int(value)
            else:
                step.status = int(value)
                self.finish(step)

    # -- a call the agent runs in a worker's Executor itself ----------------------------------
    #
    # A call whose worker's Executor runs from its package (the worker said so: ``E``), and
    # whose order is small and comes as one file, goes from the agent to the Executor and
    # back: the agent draws the key, says the runner's ``ready`` and ``started`` lines, hands
    # the Executor the order with the call's stdout, stderr, value and done pipes, and
    # writes its value and ``exit`` lines, as the worker's do_call would. The function never
    # runs in a process that holds the key (the Executor was forked before it was drawn, by
    # the worker); what must stop its tree is the worker, its parent and subreaper: asked
    # (STOP) on the deadline, EOF, or what the call left running, and on its socket's EOF
    # when the agent is gone (SIGKILLed too). Any other call goes through the worker.

    def direct(self, sid, header, first):
        """Take the call step ``sid`` to run it in a worker's Executor (a Call); False when
        none fits."""
        files = header["files"]
        if (
            header["package_size"]
            or not header["value"]
            or len(files) != 1
            or files[0][0] != self.runner["CALL_ORDER"]
            or not 0 < files[0][1] <= self.runner["ORDER_IN_MEMORY"]
        ):
            return False
        key = self.worker_key(header)
        busy = set(id(step.worker) for step in self.steps.values())
        for worker in self.workers:
            fast = worker.fast
            if worker.key == key and id(worker) not in busy and fast is not None:
                break
        else:
            return False
        grace = float(header["grace"] or 1.0)
        cwd = header["cwd"]
        if fast.package != header["package"] or fast.grace != grace:
            return False
        if cwd and not os.path.isdir(cwd):
            return False  # the worker says why
        self.workers.remove(worker)
        self.workers.append(worker)  # the most recently used last
        step = self.steps[sid] = Step(sid, worker.pid, None, -1, -2)
        step.outputs, step.reads = {}, {}
        step.worker, step.grace = worker, grace
        step.call = Call(worker, header, first)
        return True

    def call_input(self, step, kind, payload):
        """The call's stdin: its order (D), then nothing but EOF (E: stop it)."""
        call = step.call
        if call.key is None:  # its order, still coming
            if kind == b"E":
                return self.call_slow(step, True)
            call.got.append(payload)
            call.size += len(payload)
            if call.size >= call.need:
                self.call_start(step)
        elif kind == b"E" and call.end is None and call.reason is None:
            self.call_stop(step, "eof")

    def call_slow(self, step, eof=False):
        """Hand the call to its worker after all (the Executor gone, its order cut short)."""
        call = step.call
        del self.steps[step.sid]
        call.worker.drop_fast()
        self.start(step.sid, call.first + b"".join(call.got), direct=False)
        slow = self.steps.get(step.sid)
        if eof and slow is not None:
            slow.eof = True
            self.feed(slow)

    def call_start(self, step):
        call, runner = step.call, self.runner
        fast, header = call.fast, call.header
        order = b"".join(call.got)[: call.need].decode("utf-8", "replace")
        pipes = []
        try:
            for _ in range(4):
                pipes.append(os.pipe())
            ends = [w for r, w in pipes]
            send_fds(fast.sock, json.dumps([fast.base, None, order]).encode(), ends)
        except OSError:  # it ended since (killed there): its worker starts a fresh one
            for pipe in pipes:
                for fd in pipe:
                    os.close(fd)
            return self.call_slow(step)
        for r, w in pipes:
            os.close(w)
            os.set_blocking(r, False)
        (out, _), (err, _), (call.val, _), (call.done, _) = pipes
        step.outputs = {out: b"O", err: b"e"}
        step.reads = {out: CHUNK, err: CHUNK}
        # drawn now: the Executor was forked before, and its worker never sees it
        call.key = "remotekit-" + os.urandom(16).hex()
        line = runner["control_line"]
        ready = line(runner["READY"], {"key": call.key}, prefix=header["nonce"])
        self.send(b"e", step.sid, ready + line(runner["STARTED"], {"pid": fast.pid}, call.key))
        if header["timeout"] is not None:
            call.deadline = time.monotonic() + float(header["timeout"])

    def call_read(self, step, fd):
        call = step.call
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if fd == call.val:
            if not data:
                os.close(fd)
                call.val = None
                self.finish(step)
            elif not call.value_over and len(call.value) + len(data) <= call.header["value"]:
                call.value += data
            else:  # past the header's bound: counted, not kept
                call.value_over = (call.value_over or len(call.value)) + len(data)
                del call.value[:]
            return
        if data and len(call.said) < 32:
            call.said += data
            return
        os.close(fd)
        call.done = None
        said = call.said.strip()
        if call.reason is not None:
            return  # its worker stops it, and says
        if said.isdigit() and not self.call_left(call):
            call.end = {"reason": "exit", "code": int(said)}
            call.until = time.monotonic() + 2.0
            self.finish(step)
        else:  # the Executor died, or the call left processes: its worker stops the tree
            call.status = int(said) if said.isdigit() else None
            self.call_stop(step, "exit")

    def call_left(self, call):
        """Whether the call left processes running: the Executor's children and orphans
        re-parented to its worker (Executor.left, read from here); True when it cannot tell."""
        pid = call.fast.pid
        try:
            return bool(self.runner["children_left"]((call.worker.pid, pid), pid))
        except (OSError, ValueError):
            return True

    def call_stop(self, step, reason):
        """Ask the call's worker to stop its tree (it answers ``S``)."""
        call = step.call
        call.reason = reason
        try:
            call.worker.stop(step.sid, step.grace)
        except OSError:
            pass  # it is gone: hear says so

    def hear_worker(self, worker, line):
        """``E sid [pid, package, base, grace]``: its Executor is warm (its socket came with
        it); ``S sid code {stopped, running}``: the tree of the call ``sid`` is stopped."""
        word, sid, rest = line.split(b" ", 2)
        step = self.steps.get(int(sid))
        if word == b"E":
            fd = worker.fds.pop(0) if worker.fds else None
            if fd is None:
                return
            if any(s.worker is worker and s.sid != int(sid) for s in self.steps.values()):
                os.close(fd)  # it runs another call already: what it says after holds
                return
            worker.drop_fast()
            pid, package, base, grace = json.loads(rest.decode())
            worker.fast = Direct(pid, package, base, grace, fd)
            return
        worker.drop_fast()  # its Executor is gone: the next call starts a fresh one
        if step is None or step.call is None:
            return
        code, said = rest.split(b" ", 1)
        code = int(code) if step.call.status is None else step.call.status
        end = {"reason": step.call.reason}
        end.update(json.loads(said.decode()))
        end["code"] = 128 - code if code < 0 else code
        step.call.end = end
        step.call.until = time.monotonic() + 2.0
        self.finish(step)

    def call_over(self, step):
        """The call's status once it ended and all it wrote is in (its exit line and value
        said then), else None."""
        call = step.call
        if call.end is None or call.val is not None or step.outputs:
            return None
        if call.tail is None:  # the runner's value lines and exit line, with the call's key
            runner = self.runner
            lines = runner["value_lines"](call.value, call.value_over, call.key)
            lines.append(runner["control_line"](runner["EXIT"], call.end, call.key))
            call.tail, call.value = memoryview(b"".join(lines)), None
        while call.tail and step.unacked < WINDOW:  # as relay: the caller's window
            piece, call.tail = call.tail[:CHUNK], call.tail[CHUNK:]
            step.unacked += len(piece)
            self.send(b"e", step.sid, bytes(piece))
        return None if call.tail else call.end["code"]

    def call_close(self, step):
        for fd in list(step.outputs) + [step.call.val, step.call.done]:
            if fd is not None:
                os.close(fd)
        step.outputs = {}
        step.call.val = step.call.done = None

    def calls_due(self):
        """Stop the calls past their deadline, and let go of the pipes of those that ended
        but that something still holds (2 s, as do_call's drain); how long the loop may wait
        before the next is due, in milliseconds."""
        now, wait = time.monotonic(), 250.0
        for step in list(self.steps.values()):
            call = step.call
            if call is None or call.key is None:
                continue
            if call.end is not None:
                if now >= call.until:
                    self.call_close(step)
                    self.finish(step)
                else:
                    wait = min(wait, (call.until - now) * 1000)
            elif call.reason is None and call.deadline is not None:
                if now >= call.deadline:
                    self.call_stop(step, "deadline")
                else:
                    wait = min(wait, (call.deadline - now) * 1000)
        return wait

    def feed(self, step):
        while step.stdin is not None and step.pending:
            data = step.pending[0]
            try:
                n = os.write(step.stdin, data)
            except BlockingIOError:
                return
            except OSError:  # the runner is gone: its exit says why
                step.close_stdin()
                return
            step.pending[0] = memoryview(data)[n:]  # the rest, not a copy of it
            if not step.pending[0]:
                step.pending.pop(0)
            step.unsaid += n
            if step.unsaid >= SAY_WRITTEN:
                self.send(b"W", step.sid, str(step.unsaid).encode())
                step.unsaid = 0
        if step.eof and not step.pending:
            step.close_stdin()

    def relay(self, step, fd):
        try:
            data = os.read(fd, step.reads[fd])
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            os.close(fd)
            del step.outputs[fd]
            self.finish(step)
            return
        step.unacked += len(data)
        self.send(step.outputs[fd], step.sid, data)

    def said_done(self, step):
        """The step's child said its exit status (``child``), or closed the pipe without it
        (killed: its status comes when it is reaped)."""
        try:
            data = os.read(step.done, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        step.close_done()
        if data.isdigit() and step.status is None:
            step.status = int(data)
            self.finish(step)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            if self.spare is not None and self.spare.pid == pid:  # killed while it waited
                self.spare.kill()
                self.spare = None
            for step in list(self.steps.values()):
                if step.pid == pid:
                    code = (
                        -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                    )
                    step.status = 128 - code if code < 0 else code
                    self.finish(step)

    def finish(self, step):
        """Report a step's exit once its process is reaped and its output all relayed."""
        if step.call is not None and step.status is None:
            step.status = self.call_over(step)
        if step.status is None or step.outputs:
            return
        if step.call is not None:
            self.call_close(step)
        step.close_stdin()
        step.close_done()
        del self.steps[step.sid]
        self.send(b"X", step.sid, str(step.status).encode())

    # -- the end -----------------------------------------------------------------------------

    def shutdown(self):
        """The channel closed: every runner sees EOF and stops its tree; kill the rest."""
        end = time.monotonic() + max([s.grace for s in self.steps.values()] + [0.0]) + GRACE
        if self.spare is not None:  # it ran nothing: nothing to stop but itself
            self.spare.kill()
            self.spare = None
        for step in self.steps.values():
            step.close_stdin()
            step.close_done()
            for fd in step.outputs:  # nobody reads them now: a runner's writes fail, never block
                os.close(fd)
            step.outputs = {}
            if step.call is not None:  # its worker sees EOF and stops the call's tree
                self.call_close(step)
                step.worker.sock.close()
        while self.steps and time.monotonic() < end:
            self.reap_quietly()
            time.sleep(0.02)
        for step in list(self.steps.values()):
            if step.pid is not None:
                try:
                    os.killpg(step.pid, signal.SIGKILL)
                except OSError:
                    pass
        for warm in list(self.warm.values()) + self.workers:
            warm.sock.close()
        self.reap_quietly()

    def reap_quietly(self):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.steps.clear()
                return
            if not pid:
                return
            for sid, step in list(self.steps.items()):
                if step.pid == pid:
                    del self.steps[sid]


def main(cache, cache_folder=None):
    """Run the agent (called by boot.py, which loaded it; ``cache``: its CodeCache;
    ``cache_folder``: its rules for a cache folder, which the runner's packages keep to)."""
    if sys.version_info[:2] < MIN_PYTHON:  # say which Python this is, and leave: the caller
        write_all(1, frame(b"A", 0, hello()))  # then runs each step without an agent
        os._exit(0)
    try:
        Agent(cache, cache_folder).run()
    except BrokenPipeError:
        pass  # the caller is gone
    os._exit(0)
