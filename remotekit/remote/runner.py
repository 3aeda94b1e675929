# remotekit runner: shipped over stdin and run THERE by a constant loader, e.g.
#
#   pct exec 200 -- /root/venv/bin/python -c 'import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))'
#
# behind the boot (remote/boot.py: the loader runs it, and it runs this runner), or in an agent
# the boot started.
#
# Standard library only; Python >= 3.6 syntax. Protocol (all on stdin, after the runner itself):
#
#   <decimal length>\n<header: UTF-8 JSON>         then the bytes of header["files"], in order
#
# header: {"nonce", "op": "exec"|"put"|"get", "argv", "script", "env", "path_prepend", "cwd",
#          "files": [[name, size, mode], ...], "timeout", "grace", "detach", "report",
#          "package", "package_size", "stdin", "value",
#          put: "dest", "name", "size", "mode", "explicit_mode", "parents";  get: "src", "max_bytes";
#          "preload": read by the agent only}
#   Its fields and their defaults are StepHeader below, their one definition: the laptop
#   imports this file as remotekit.remote.runner, and that class as remotekit.step.StepHeader.
#
# "package" names (by hash) the package remotekit.remote a script step runs from ("script" is
# then a path in it): kept in PACKAGES there, sent behind the header ("package_size" bytes,
# before the files: remotekit.shipping says their format) only when this runner said it is
# missing (a control line, below); without it the runner says so and ends (125) before
# anything ran.
#
# With "stdin" (exec, not detached), the step's own stdin follows the payload, in pieces
# "<decimal length>\n<bytes>" (each at most STDIN_PIECE), and "0\n" where it ends (the step
# then reads EOF); without it the step's stdin is /dev/null. The caller never has more than
# STDIN_WINDOW of it sent beyond what this runner said it took (the "stdin" control line), so
# the runner reads its stdin all the time, holds at most that much, and still sees EOF at once.
#
# After the payload, stdin stays open: EOF on it means the caller is gone (timeout, Ctrl-C,
# lost connection) and the step's whole process tree is stopped: TERM, then KILL after
# "grace" seconds. The runner also stops the tree itself at "timeout" (a backstop: the caller
# normally acts first). When the step's main process exits, whatever it left running is
# stopped the same way (a step that wants a process to outlive it asks for "detach").
#
# Control lines on stderr. The first carries the caller's nonce and a key the runner draws
# only after its step-to-be was forked, so no step can know it; every later line carries the
# key, and the caller believes only those:
#
#   <nonce> ready {"key": K}               the runner started (so the interpreter exists)
#   <K> started {"pid": N}                 the step's process runs
#   <K> file {"mode": M, "size": N}        get: the file about to be sent on stdout
#   <K> missing {"cache": B}               the step's package is not there: send it (B: whether
#                                          this runner keeps packages; else every step sends it)
#   <K> package {"cached": B}              the package that came is kept for later steps
#   <K> stdin {"taken": N, "closed": B}    N more bytes of the step's stdin taken (written into
#                                          its pipe, or dropped once the step closed it: B)
#   <K> value "B64"                        a piece (base64) of what the step wrote on its
#                                          $REMOTEKIT_VALUE_FD (header "value": at most that
#                                          many bytes; more is not sent: {"over": N}), before exit
#   <K> exit {"code": N, "reason": R, "stopped": [...], "running": [...], "detached": {...}}
#                                          R: exit | deadline | eof | signal | detached
#
# "detach" starts the command in its own session, output to a log, and returns at once. With
# "report" too, the command gets a pipe's write end as $REMOTEKIT_REPORT_FD and the runner waits
# (up to "timeout") for one JSON object on it: its keys go into "detached" (a run's supervisor
# reports its id, the run's pid and log), and {"error": E, "code": N} fails the step instead.
#
# The step writes to pipes of its own that the runner relays to its stdout and stderr as
# they come (never buffered), so a step cannot read the runner's control lines back through
# /proc/self/fd, and a process that escapes the stop cannot hold the connection open.
# Exit status: the step's, 128+N for signal N; 125 for a runner error
# (message on stderr), 126 / 127 when the command cannot be run / is not found.
import json
import os
import stat
import sys
import time

try:  # the C module: signal's wrapper turns each handler and mask it returns into an enum
    import _signal as signal  # (~40 us a call, and page faults in every forked step)
except ImportError:
    import signal

STDIN = getattr(sys.stdin, "buffer", None)  # None where imported with no stdin (the laptop)
CHUNK = 1 << 20
KEY = [""]
#: The most of the step's stdin one piece carries, and the most the caller has sent beyond
#: what the runner said it took (the "stdin" control line): what the runner holds at most.
STDIN_PIECE = 1 << 16
STDIN_WINDOW = 1 << 20

# The control words of the lines above (remotekit.step reads them by these names).
READY, STARTED, FILE, EXIT, MISSING, PACKAGE, TAKEN, VALUE = (
    "ready",
    "started",
    "file",
    "exit",
    "missing",
    "package",
    "stdin",
    "value",
)
#: A pipe that carries bulk bytes (a bulk step's stdout here; a put's, a get's in the agent,
#: which borrows ``widen``) is made this large (F_SETPIPE_SZ, Linux; where the system
#: refuses, it keeps its size).
BULK_PIPE = 1 << 20
#: Raw bytes of a step's value one "value" control line carries (base64: 4/3 of it, well
#: within the caller's longest line).
VALUE_PIECE = 3 << 16

# The step header's fields, their types (for the laptop's checker) and their defaults, as
# they travel (JSON): their one definition, StepHeader below. The runner reads it as HEADER
# (field -> default); the laptop imports this very class as remotekit.step.StepHeader, a
# frozen dataclass there (record). typing and dataclasses only for the checker and the
# laptop: importing them costs a step here ~3 ms and ~5.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from typing import Literal, Mapping
else:

    def record(frozen):
        """The class as the table HEADER here; as a frozen dataclass where the laptop
        imports this file as its module (remotekit.remote.runner)."""

        def make(cls):
            for name in cls.__annotations__:
                HEADER[name] = getattr(cls, name)
            if __name__ != "remotekit.remote.runner":
                return cls
            import dataclasses

            for name, default in HEADER.items():
                if isinstance(default, dict):  # a dataclass's defaults are immutable
                    setattr(cls, name, dataclasses.field(default_factory=dict))
            return dataclasses.dataclass(frozen=frozen)(cls)

        return make


HEADER = {}  # type: dict[str, object]


@record(frozen=True)
class StepHeader(object):
    """The record a step's runner reads first on its stdin (after the runner itself): what
    to do there. Its JSON is the wire format.

    ``op`` is ``exec`` (run ``argv``; with ``script``, that shipped file with the target's
    Python, ``argv`` its arguments; ``files`` are the ``(name, size, mode)`` of the bytes
    that follow, written into a private temp dir; ``detach`` leaves it running; with
    ``report``, the command gets ``$REMOTEKIT_REPORT_FD`` and the runner waits for the one
    JSON line it writes there, such as a run's id), ``put`` (``size`` bytes follow, landing
    at ``dest``, or ``dest/name`` when ``dest`` is a directory, with ``mode`` under the
    umask there unless ``explicit_mode``; ``parents``: ``mkdir -p`` first) or ``get``
    (stream ``src``, refusing more than ``max_bytes``). The step fills in the rest for every
    op: its ``nonce``, the ``env``, ``path_prepend`` and ``cwd`` of the launch and the step,
    the runner's own deadline ``timeout`` (a backstop) and the ``grace`` between TERM and
    KILL. ``preload`` names modules (``torch``) the step wants to find imported: a resident
    agent forks it from a process that keeps them imported (remotekit.remote.agent); the
    runner itself ignores it. ``package`` names (by hash) the package remotekit.remote that
    ``script`` is a path in (remotekit.shipping); ``package_size`` bytes of it come first
    when it is sent. ``stdin``: the step's stdin comes behind the payload, in pieces (see
    the protocol above), instead of /dev/null. ``value`` (exec, not detached): the step gets
    a pipe's write end as ``$REMOTEKIT_VALUE_FD``, and what it writes there (at most
    ``value`` bytes) comes back on its own control lines, apart from its output (a call's
    returned value, remotekit.call). ``worker``: the step is a call an agent may run in a
    warm worker that stays between calls (remotekit.remote.agent.Worker); a runner of its own
    runs it as any script. ``bulk`` (exec): the step's stdout carries bulk bytes (a pull's
    file bodies, remotekit.sync): relayed as a get's file is, through pipes made BULK_PIPE
    large and read CHUNK at a time.
    """

    op: "Literal['exec', 'put', 'get']" = "exec"
    argv: "tuple[str, ...]" = ()
    script: "str | None" = None
    files: "tuple[tuple[str, int, int], ...]" = ()
    detach: "bool" = False
    report: "bool" = False
    dest: "str | None" = None
    name: "str | None" = None
    size: "int" = 0
    mode: "int | None" = None
    explicit_mode: "bool" = False
    parents: "bool" = False
    src: "str | None" = None
    max_bytes: "int | None" = None
    nonce: "str" = ""
    env: "Mapping[str, str]" = {}  # noqa: RUF012 (a dataclass field there: record)
    path_prepend: "tuple[str, ...]" = ()
    cwd: "str | None" = None
    timeout: "float | None" = None
    grace: "float" = 1.0
    preload: "tuple[str, ...]" = ()
    package: "str | None" = None
    package_size: "int" = 0
    stdin: "bool" = False
    value: "int" = 0
    worker: "bool" = False
    bulk: "bool" = False

    def encode(self):
        # type: () -> bytes
        """The header as the runner reads it: one JSON object. Its fields are read one level
        deep (tuples are JSON arrays as they are): asdict's deep copy of every value, the
        env's included, cost each step ~0.3 ms on the laptop."""
        fields = {name: getattr(self, name) for name in HEADER}
        fields["env"] = dict(self.env)
        return json.dumps(fields).encode()


def read_header(raw):
    """The header sent as JSON, every field of HEADER present (its default when not sent)."""
    h = dict(HEADER)
    h.update(json.loads(raw.decode("utf-8")))
    return h


# What a signal must remove if it ends the runner before a step runs (a put's temp file, the
# shipped files' dir). The handler removes them and exits at once: an exception raised from
# a handler can land in a finalizer and be swallowed, leaving the runner blocked on stdin.
TO_REMOVE = []  # type: list[str]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def on_stop_signal(signum, frame):
    for path in TO_REMOVE:
        remove(path)
    try:
        os.write(2, b"remotekit: stopped by signal %d before the step ran; nothing left\n" % signum)
    finally:
        os._exit(128 + signum)


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        remove_tree(path)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_tree(path):
    """``rm -rf path`` of a folder the runner made, errors ignored: as shutil.rmtree, through
    descriptors (os.fwalk) and never following a link the step left there, without shutil's
    import (zlib, bz2, lzma: ~1.5 ms of a step)."""
    if not hasattr(os, "fwalk"):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    for _, dirs, files, fd in os.fwalk(path, topdown=False):
        for name in files:
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:
                pass
        for name in dirs:  # a link to a folder is listed here too: unlinked, not followed
            try:
                os.rmdir(name, dir_fd=fd)
            except NotADirectoryError:
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def created(make, path_of=lambda made: made):
    """``make()`` (which creates a path) with the stop signals held, so that the path is in
    TO_REMOVE before a signal can end us."""
    held = hasattr(signal, "pthread_sigmask")
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        made = make()
        TO_REMOVE.append(path_of(made))
        return made
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def control_line(word, data=None, prefix=None):
    line = (prefix or KEY[0]) + " " + word + ("" if data is None else " " + json.dumps(data))
    return (line + "\n").encode()


def control(word, data=None, prefix=None):
    try:
        os.write(2, control_line(word, data, prefix))
    except OSError:
        pass


def fail(message, code=125):
    try:
        os.write(2, ("remotekit: " + message + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
    sys.exit(code)


class Input(object):
    """Our stdin, read without a thread: first what the loader's buffered read took in
    beyond the runner's source, then raw reads, each after a poll that the signal wake pipe
    also ends. A stop signal is so handled at once: a blocking read entered just after the
    signal landed would wait for input that may never come, with a temp file behind."""

    def __init__(self, wake_r):
        self.wake_r = wake_r
        self.buf = bytearray()
        self.eof = False
        self.poller = None
        os.set_blocking(0, False)  # take what is buffered (read1: that, or one raw read)
        try:
            self.buf += STDIN.read1(CHUNK) or b""
        except (OSError, ValueError):  # BlockingIOError: nothing buffered, nothing there
            pass
        finally:
            os.set_blocking(0, True)

    def fill(self):
        """One more piece from stdin into ``buf``; False at EOF."""
        import select

        poller = select.poll()
        poller.register(0, POLLIN)
        poller.register(self.wake_r, POLLIN)
        while not self.eof:
            ready = [fd for fd, _ in poller.poll()]
            if self.wake_r in ready:  # a signal woke us: its handler ran already
                drain(self.wake_r)
            if 0 in ready:
                try:
                    data = os.read(0, CHUNK)
                except BlockingIOError:  # fd 0 shares a non-blocking description
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.eof = True
                    break
                self.buf += data
                return True
        return False

    def readinto(self, view):
        """Bytes from stdin (not what ``buf`` holds) read straight into ``view``: how many,
        0 at EOF. It waits in a poll that the signal wake pipe also ends."""
        if self.poller is None:
            import select

            self.poller = select.poll()
            self.poller.register(0, POLLIN)
            self.poller.register(self.wake_r, POLLIN)
        while not self.eof:
            ready = [fd for fd, _ in self.poller.poll()]
            if self.wake_r in ready:  # a signal woke us: its handler ran already
                drain(self.wake_r)
            if 0 in ready:
                try:
                    n = os.readv(0, [view])
                except BlockingIOError:  # fd 0 shares a non-blocking description
                    continue
                except OSError:
                    n = 0
                if not n:
                    self.eof = True
                    break
                return n
        return 0

    def take(self, n):
        """Up to ``n`` bytes (at least one unless at EOF)."""
        if not self.buf and not self.fill():
            return b""
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def readline(self):
        while b"\n" not in self.buf and self.fill():
            pass
        line, _, _ = bytes(self.buf).partition(b"\n")
        del self.buf[: len(line) + 1]
        return line

    def read_exact(self, n, what="payload"):
        parts = []
        while n > 0:
            b = self.take(min(n, CHUNK))
            if not b:
                raise EOFError("%s truncated: %d bytes missing" % (what, n))
            parts.append(b)
            n -= len(b)
        return b"".join(parts)

    def copy_to(self, fd, n):
        """Write the next ``n`` bytes to the file ``fd`` as they arrive: what ``buf`` holds,
        then read into one buffer and written from it (no bytes object made a piece)."""
        head = self.buf[:n]
        del self.buf[: len(head)]
        write_all(fd, head)
        n -= len(head)
        view = memoryview(bytearray(min(n, CHUNK)))
        while n > 0:
            got = self.readinto(view[: min(n, len(view))])
            if not got:
                raise EOFError("upload truncated: %d bytes missing" % n)
            write_all(fd, view[:got])
            n -= got


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass


def wake_pipe():
    """A pipe that every signal with a Python handler writes a byte to: a poll on its read
    end (returned) ends when one lands."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    try:
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    except TypeError:  # Python < 3.7
        signal.set_wakeup_fd(wake_w)
    return wake_r


def childless():
    """Whether this process has no child at all, running or a zombie (asked without reaping
    any). A process with no child has no descendant, and then the /proc scan below, one read
    per process on the machine, is not needed: a step that left nothing behind (the common
    end) costs two scans less. False when it cannot tell."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    except (AttributeError, OSError):  # no waitid here: scan
        pass
    return False


def descendants(root):
    """Pids of every process below ``root`` (Linux /proc); empty elsewhere."""
    if root == os.getpid() and childless():
        return []
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                stat_ = f.read()
            ppid = int(stat_[stat_.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def describe(pid):
    """``pid 123: sleep 120`` for reports (the command line, shortened)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read(400).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmd = ""
    cmd = cmd if len(cmd) <= 120 else cmd[:117] + "..."
    return "pid %d: %s" % (pid, cmd or "?")


def reap_others(child):
    """Reap orphans re-parented to us (we are a subreaper), never the step's own process."""
    for pid in descendants(os.getpid()):
        if child is None or pid != child.pid:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass


def alive(child):
    """The step's processes still there: its main process (if running) and every descendant
    of the runner that is not a zombie."""
    pids = []
    for pid in descendants(os.getpid()):
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                st = f.read()
            if st[st.rindex(b")") + 2 :].split()[0] == b"Z":
                continue
        except (OSError, ValueError, IndexError):
            continue
        pids.append(pid)
    return pids


def stop_tree(child, grace, wait=time.sleep):
    """TERM the step's tree, KILL what is left after ``grace``; return (stopped, running):
    descriptions of the processes that were there and are gone, and of those that are not.
    ``wait(seconds)``: how to pass the time meanwhile (the runner relays output)."""
    seen = {}

    def signal_all(sig):
        pids = alive(child)
        for pid in pids:
            seen.setdefault(pid, describe(pid))
        if child is not None and child.returncode is None:
            try:
                os.killpg(child.pid, sig)
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    signal_all(signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if child is not None:
            child.poll()
        reap_others(child)
        if (child is None or child.returncode is not None) and not alive(child):
            break
        wait(0.02)
    else:
        signal_all(signal.SIGKILL)
        if child is not None:
            child.wait()
        end = time.monotonic() + 2.0
        while alive(child) and time.monotonic() < end:
            reap_others(child)
            wait(0.01)
    reap_others(child)
    left = set(alive(child))
    stopped = [d for pid, d in sorted(seen.items()) if pid not in left]
    running = [seen.get(pid) or describe(pid) for pid in sorted(left)]
    return stopped, running


# libc's prctl, looked up once (~0.2 ms a lookup); a forked step inherits it
PRCTL = []  # type: list[object]


def prctl(option, value):
    # Linux only; elsewhere a no-op (the process group is then what we stop).
    try:
        if not PRCTL:
            import ctypes

            PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        PRCTL[0](option, value, 0, 0, 0)
    except Exception:
        pass


def become_subreaper():
    # Orphaned grandchildren (double forks, setsid daemons) re-parent to us, so a stopped
    # step leaves nothing behind.
    prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def kind_of(mode):
    # type: (int) -> str
    """What a file of this ``st_mode`` is, in words, when it is not a regular file (the
    opener of the diagnostics and the laptop's ``get`` say it with these words too)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def do_put(h, stdin):
    dest = h["dest"]
    if h["parents"]:  # create the missing directories first (mkdir -p)
        wanted = dest if dest.endswith("/") else os.path.dirname(os.path.abspath(dest))
        try:
            os.makedirs(wanted, exist_ok=True)
        except OSError as exc:
            fail("cannot create %s: %s" % (wanted, exc.strerror), 1)
    if os.path.isdir(dest):
        dest = os.path.join(dest, h["name"])
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        fail(
            "cannot write %s: directory %s does not exist (put --parents creates it)"
            % (dest, folder),
            1,
        )
    mode = h["mode"]
    if mode is None:
        mode = 0o666
    if not h["explicit_mode"]:
        # The source's mode under our umask, and never wider than the file it replaces.
        mode &= 0o777 & ~current_umask()
        try:
            old = os.stat(dest)
            if stat.S_ISREG(old.st_mode):
                mode &= old.st_mode
        except OSError:
            pass
    import tempfile

    fd, tmp = created(
        lambda: tempfile.mkstemp(prefix=".remotekit-", dir=folder), lambda made: made[1]
    )
    try:
        with os.fdopen(fd, "wb"):  # closes fd; its buffer is never written through
            stdin.copy_to(fd, h["size"])
            os.fsync(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        TO_REMOVE.remove(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return 0


def private_dir():
    """A new directory only we can enter (0700), unique: like tempfile.mkdtemp."""
    base = os.environ.get("TMPDIR") or "/tmp"
    while True:
        path = os.path.join(base, "remotekit-" + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: ``get``'s exit status for a directory (EISDIR's number): the laptop then copies it as a
#: tree (``Target.get`` of a folder), where any other refusal is exit 1.
GET_IS_A_DIRECTORY = 21


def refuse_odd(src, st):
    if not stat.S_ISREG(st.st_mode):
        code = GET_IS_A_DIRECTORY if stat.S_ISDIR(st.st_mode) else 1
        fail("cannot get %s: it is %s, not a regular file" % (src, kind_of(st.st_mode)), code)


def do_get(h):
    src = h["src"]
    limit = h["max_bytes"]
    try:
        # Refuse before opening (a FIFO would block the open; a device streams forever),
        # then check again what was opened, without blocking.
        refuse_odd(src, os.stat(src))
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        fail("cannot read %s: %s" % (src, e.strerror), 1)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        refuse_odd(src, st)
        if limit is not None and st.st_size > limit:
            fail(
                "cannot get %s: it is %d bytes, more than max_bytes=%d" % (src, st.st_size, limit),
                1,
            )
        control(FILE, {"mode": stat.S_IMODE(st.st_mode), "size": st.st_size})
        os.write(1, (h["nonce"] + "\n").encode())  # data starts after this line
        sent = 0
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            sent += len(b)
            if limit is not None and sent > limit:
                fail("cannot get %s: it grew past max_bytes=%d while being read" % (src, limit), 1)
            view = memoryview(b)
            while view:
                n = os.write(1, view)
                view = view[n:]
    return 0


class Forked(object):
    """The Popen surface the runner needs, for a forked child."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def _set(self, status):
        if os.WIFSIGNALED(status):
            self.returncode = -os.WTERMSIG(status)
        else:
            self.returncode = os.WEXITSTATUS(status)

    def poll(self):
        return self._wait(os.WNOHANG)

    def wait(self):
        return self._wait(0)

    def _wait(self, flags):
        while self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped by no one but us: never; say it failed
                self.returncode = 125
                break
            if not pid:
                break
            self._set(status)
        return self.returncode


class Zygote(object):
    """A fork of this interpreter made before the header (with the nonce) is read and before
    the key exists: it runs a shipped script as a fresh ``python -u script`` would, without
    paying for a second interpreter start, and has nothing in its memory to forge control
    lines with. It waits for one order on a pipe; EOF on the pipe means "not needed"."""

    def __init__(self, outputs, fork=True):
        self.pid = None
        if not hasattr(os, "fork") or not fork:
            return
        r, w = os.pipe()
        pid = os.fork()
        if not pid:
            os.close(w)
            if DONE is not None:  # the runner's, never the step's
                os.close(DONE)
            for s in STOP_SIGNALS:  # forked after the header (AFTER_HEADER): the runner's
                signal.signal(s, signal.SIG_DFL)  # handlers and wake pipe are not its own
            signal.set_wakeup_fd(-1)
            os.dup2(outputs.in_r, 0)  # the step's stdin, if it takes one (the order says)
            os.dup2(outputs.out_w, 1)
            os.dup2(outputs.err_w, 2)
            outputs.close(keep=outputs.val_w)
            zygote_main(r, outputs.val_w)
        os.close(r)
        self.pid, self.pipe = pid, w

    def run(self, path, args, cwd, env, stdin=False):
        data = json.dumps([path, list(args), cwd, env, stdin]).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.pipe, view) :]
        os.close(self.pipe)
        child, self.pid = Forked(self.pid), None
        return child

    def discard(self):
        if self.pid is not None:
            os.close(self.pipe)
            try:
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = None


def zygote_main(pipe, value_fd):
    code = 1
    try:
        parts = []
        while True:
            b = os.read(pipe, CHUNK)
            if not b:
                break
            parts.append(b)
        if not parts:
            os._exit(0)
        path, args, cwd, env, stdin = json.loads(b"".join(parts).decode("utf-8"))
        if env.get(VALUE_FD) != str(value_fd):
            os.close(value_fd)  # the step wants no value: nothing of ours stays open in it
        if not stdin:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        code = run_script(path, args, cwd, env)
    finally:
        os._exit(code & 0xFF)


def settle(cwd, env):
    """A script's or a call's process: the step's cwd and env, and text streams over fds 0-2
    (stdout and stderr unbuffered, stderr never failing on what it cannot encode)."""
    if cwd:
        os.chdir(cwd)
    set_environ(env)
    import io

    enc = sys.stdout.encoding if sys.stdout else "utf-8"
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding=enc, write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding=enc,
        errors="backslashreplace",
        write_through=True,
    )


def run_script(path, args, cwd, env):
    """In the zygote: the child's own session, its stdin (/dev/null or the caller's), unbuffered stdout/stderr,
    the step's env and cwd, and the script as ``__main__``. Returns the exit status."""
    code = 1
    try:
        os.setsid()
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        settle(cwd, env)
        sys.argv = [path] + list(args)
        sys.path[0] = os.path.dirname(path)
        run_main(path)
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            sys.stderr.write(str(e.code) + "\n")
            code = 1
    except BaseException:
        etype, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename != path:
            tb = tb.tb_next  # hide the runner's own frames
        if tb is not None:
            value = value.with_traceback(tb)
        sys.excepthook(etype, value, value.__traceback__)
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
    return code


def set_environ(env):
    """os.environ made ``env``: what differs is set, what is not in it unset (clear() and
    update() would unset and set again every variable: ~0.3 ms of a forked step)."""
    environ = os.environ
    for name in [name for name in environ if name not in env]:
        del environ[name]
    for name, value in env.items():
        if environ.get(name) != value:
            environ[name] = value


def run_main(path):
    """Run the file ``path`` as ``__main__`` with the globals runpy.run_path gives it, without
    importing runpy (and pkgutil, typing: ~7 ms a step). What does not compile as source (a
    zip app, a .pyc) goes to runpy, which knows those; so does a syntax error, to be told as
    runpy tells it."""
    try:
        with open(path, "rb") as f:
            code = COMPILE(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        import runpy

        runpy.run_path(path, run_name="__main__")
        return
    main = type(sys)("__main__")
    main.__dict__.update(
        __file__=path, __cached__=None, __loader__=None, __package__="", __spec__=None
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def compile_source(source, path):
    return compile(source, path, "exec", dont_inherit=True)


# How run_main compiles a script: an agent that forks this runner sets COMPILE (its code
# cache) in the runner's globals before running it; a runner of its own compiles.
COMPILE = globals().get("COMPILE", compile_source)


# Whether to fork a zygote: a runner of its own does, before it knows whether the step runs a
# script; an agent that forks this runner has read the header and says (runs_script), or,
# forking it before its step comes (a spare), says AFTER_HEADER: once the header is read, and
# the step runs a script, before the key is drawn (as the agent's child holds the header).
AFTER_HEADER = "after header"
ZYGOTE = globals().get("ZYGOTE", True)


def runs_script(h):
    """Whether the step ``h`` (a header) runs its script in the zygote."""
    return bool(h["script"]) and not h["detach"] and h["op"] == "exec" and fork_safe(h["env"] or {})


def fork_safe(env):
    # A forked interpreter has read its PYTHON* settings already; a step that sets any
    # gets a fresh interpreter instead.
    return not any(k.startswith("PYTHON") and k != "PYTHONUNBUFFERED" for k in env)


class Outputs(object):
    """The step's stdin, stdout and stderr: pipes; the runner writes the caller's stdin into
    the first when the step takes it (StepInput), and relays the others' read ends to its own."""

    def __init__(self):
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        # the step's value (header "value"): made with the others, before the zygote forks
        self.val_r, self.val_w = os.pipe()

    def close(self, keep=None):
        fds = (self.in_r, self.in_w, self.out_r, self.out_w, self.err_r, self.err_w)
        for fd in fds + (self.val_r, self.val_w):
            if fd == keep:
                continue
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class StepInput(object):
    """The caller's stdin for the step (header "stdin"): the pieces that come on ours after
    the payload, written into the step's stdin pipe ``fd`` as the step takes them, and what
    it took said back (``news``: the "stdin" control line), so the caller sends more. At most
    STDIN_WINDOW of it is held here (the caller keeps to it); once the step closed its stdin
    (or ended), what still comes is dropped, and the caller is told to stop sending."""

    def __init__(self, fd):
        os.set_blocking(fd, False)
        self.fd = fd  # None once closed
        self.raw = bytearray()  # come, not yet parsed
        self.data = bytearray()  # parsed, not yet written
        self.left = 0  # bytes of the piece being read still to come
        self.ended = False  # its end ("0\n") came: the step reads EOF once data is written
        self.taken = 0  # taken since last said
        self.closed = False  # the step's stdin is closed: no more is written
        self.told = False  # that it closed was said

    def take(self, chunk):
        self.raw += chunk
        while self.raw and not self.ended:
            if self.left:
                n = min(self.left, len(self.raw))
                self.data += self.raw[:n]
                del self.raw[:n]
                self.left -= n
                continue
            nl = self.raw.find(b"\n", 0, 12)
            if nl < 0 and len(self.raw) < 12:
                break
            head = bytes(self.raw[: max(nl, 0)])
            if nl < 0 or not head.isdigit() or int(head) > STDIN_PIECE:
                self.ended = True  # not a piece: the caller's bug; the step reads EOF
                break
            del self.raw[: nl + 1]
            self.left = int(head)
            self.ended = not self.left
        if self.ended:
            del self.raw[:]
        if len(self.data) > STDIN_WINDOW + STDIN_PIECE:  # past its window: the caller's bug
            self.close()
        self.write()

    def write(self):
        while self.data and self.fd is not None:
            try:
                n = os.write(self.fd, self.data)
            except BlockingIOError:
                return
            except OSError:  # EPIPE: the step closed its stdin
                self.close()
                return
            del self.data[:n]
            self.taken += n
        if self.closed:
            self.taken += len(self.data)
            del self.data[:]
        elif self.ended and not self.data:
            self.close()

    def close(self):
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        self.closed = True
        self.taken += len(self.data)
        del self.data[:]

    def wants_room(self):
        return self.fd is not None and bool(self.data)

    def news(self):
        """The "stdin" control line to send now (bytes), or None: what the step took, once
        a piece of it or all that was here, and that its stdin closed (said once)."""
        closed = self.closed and not self.ended and not self.told
        if not closed and (not self.taken or (self.data and self.taken < STDIN_PIECE)):
            return None
        data = {"taken": self.taken}
        if closed:
            data["closed"] = self.told = True
        self.taken = 0
        return control_line(TAKEN, data)


def widen(fd):
    """Make the pipe ``fd`` BULK_PIPE large, where the system lets us (best effort: anything
    but a Linux pipe, or a user past its pipe quota, keeps its size)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), BULK_PIPE)
    except (ImportError, OSError):
        pass


class Relay(object):
    """One loop, no thread, for what a running step needs watched: its stdout and stderr
    relayed to ours as they come, EOF on our stdin (the caller is gone), and a wake pipe
    that a signal writes to (the step's exit: SIGCHLD; TERM, HUP, INT). A thread costs a
    step forked from the agent ~0.3 ms; the loop costs nothing it was not doing.

    Our stdout and stderr are written non-blocking while it runs: a caller that does not
    read holds back the step (its pipe fills: what is waiting to go out stops the reading
    of that pipe), never the loop, which still sees EOF, the deadline and the stop."""

    def __init__(self, outputs, stdin, takes_stdin=False, value=0, bulk=False):
        import select

        # what one read of the step's stdout takes: a bulk step's (header "bulk") in a pipe
        # made as large, so a relay costs a turn of this loop per CHUNK, not per 64 KiB
        self.out_read = CHUNK if bulk else 1 << 16
        if bulk:
            widen(outputs.out_r)
            widen(1)

        os.close(outputs.out_w)  # the step holds them now: EOF once every writer is gone
        os.close(outputs.err_w)
        os.close(outputs.in_r)
        os.close(outputs.val_w)
        self.input = StepInput(outputs.in_w) if takes_stdin else None
        if self.input is None:
            os.close(outputs.in_w)  # the step's stdin is /dev/null (this pipe unused)
        outputs.in_r = outputs.in_w = outputs.out_w = outputs.err_w = outputs.val_w = None
        self.poll = select.poll
        self.sources = {outputs.out_r: 1, outputs.err_r: 2}
        # the step's value (VALUE_PIPE), kept here up to ``value`` bytes; past it, counted
        self.value, self.value_max, self.value_over = bytearray(), value, 0
        if value:
            self.sources[outputs.val_r] = VALUE_PIPE
        else:
            os.close(outputs.val_r)
        outputs.val_r = None
        self.waiting = {1: b"", 2: b""}  # read, not yet written
        self.finished = bytearray()  # what came on a warm worker's done pipe (DONE_PIPE)
        self.dead = set()  # of ours, the ones a write failed on: drained, never written
        self.eof = stdin.eof
        self.wake_r = stdin.wake_r
        for fd in (1, 2):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler: so it wakes us
        if self.input is not None and stdin.buf:  # what came behind the payload, read already
            self.input.take(bytes(stdin.buf))
            del stdin.buf[:]

    def pump(self, timeout):
        """Wait up to ``timeout`` seconds for something to happen, and do what came."""
        poller = self.poll()
        if not self.eof:
            poller.register(0, POLLIN)
        poller.register(self.wake_r, POLLIN)
        for src, dst in self.sources.items():
            if not self.waiting.get(dst):
                poller.register(src, POLLIN)
        for dst, data in self.waiting.items():
            if data:
                poller.register(dst, POLLOUT)
        step_in = self.input
        if step_in is not None and step_in.wants_room():
            poller.register(step_in.fd, POLLOUT)
        for fd, _ in poller.poll(max(0, int(timeout * 1000))):
            if fd == 0:
                self.read_stdin()
            elif fd == self.wake_r:
                drain(self.wake_r)
            elif fd in self.sources:
                self.read(fd)
            elif step_in is not None and fd == step_in.fd:
                step_in.write()
            elif fd in self.waiting:
                self.write(fd)
        if step_in is not None:
            self.say_taken(step_in)

    def read_stdin(self):
        try:
            data = os.read(0, CHUNK)
        except BlockingIOError:  # its description shared with a non-blocking stdout
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
        elif self.input is not None:
            self.input.take(data)
        # else: nothing is sent after the payload but EOF (or the step's stdin)

    def say_taken(self, step_in):
        """The "stdin" control line, in order with the step's stderr (a line of which it may
        split: the caller's reader takes what came before it as output)."""
        news = step_in.news()
        if news is not None and 2 not in self.dead:
            self.waiting[2] += news
            self.write(2)

    def end_input(self):
        """The step ended: its stdin pipe closes, what still comes on ours is dropped."""
        if self.input is not None:
            self.input.close()
            self.input = None

    def read(self, src):
        try:
            data = os.read(src, self.out_read if self.sources[src] == 1 else 1 << 16)
        except OSError:
            data = b""
        if not data:
            os.close(src)
            del self.sources[src]
            return
        dst = self.sources[src]
        if dst == VALUE_PIPE:
            self.take_value(data)
        elif dst == DONE_PIPE:
            self.finished += data
        elif dst not in self.dead:
            self.waiting[dst] += data  # a "stdin" control line may be waiting before it
            self.write(dst)

    def take_value(self, data):
        if not self.value_over and len(self.value) + len(data) <= self.value_max:
            self.value += data
            return
        self.value_over = (self.value_over or len(self.value)) + len(data)
        del self.value[:]

    def write(self, dst):
        data = self.waiting[dst]
        try:
            self.waiting[dst] = data[os.write(dst, data) :]
        except BlockingIOError:
            pass
        except OSError:  # the caller is gone: drain the step's pipe, so it never blocks
            self.dead.add(dst)
            self.waiting[dst] = b""

    def drain(self, timeout):
        """Relay until every writer of the step's pipes closed its end and all is written
        (or ``timeout``): all output is through, unless a survivor holds a pipe."""
        end = time.monotonic() + timeout
        while self.sources or any(self.waiting.values()):
            left = end - time.monotonic()
            if left <= 0:
                break
            self.pump(left)

    def done(self):
        """Our stdout and stderr as they were (blocking), for the final record."""
        signal.set_wakeup_fd(-1)
        for fd in (1, 2):
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass


VALUE_PIPE = 3  # Relay.sources: the step's value pipe (not relayed: kept for send_value)
VALUE_FD = "REMOTEKIT_VALUE_FD"  # the variable that names its write end to the step
DONE_PIPE = 4  # Relay.sources: a warm worker's call ended (its status: Executor)
POLLIN = 0x001  # select.POLLIN, POLLOUT on Linux and the BSDs (not imported for them)
POLLOUT = 0x004


def spawn(argv, cwd, env, out=None, err=None, pass_fds=(), inp=None):
    """Start ``argv`` in its own session: stdin ``inp`` (None: /dev/null), ``out`` and ``err`` as its stdout
    and stderr (err None: ``out``), in ``cwd``, found on ``env``'s PATH as execvpe would,
    with no fd of ours open in it but ``pass_fds``. A Forked, or a Popen on a Python with
    no ``posix_spawn(setsid=)`` (< 3.8): posix_spawn neither copies this process (vfork)
    nor needs subprocess imported (~2 ms a step forked from the agent)."""
    if cwd:
        os.chdir(cwd)  # ours is no one else's: paths after this point are absolute
    try:
        if sys.version_info < (3, 8) or not hasattr(os, "posix_spawn"):
            return popen(argv, env, out, err, pass_fds, inp)
        return posix_spawned(argv, env, out, err, pass_fds, inp)
    except FileNotFoundError:
        fail("command not found: %s" % argv[0], 127)
    except PermissionError:
        fail("permission denied: %s" % argv[0], 126)
    except OSError as e:
        fail("cannot run %s: %s" % (argv[0], e), 126)


def posix_spawned(argv, env, out, err, pass_fds, inp=None):
    err = out if err is None else err
    if inp is None:
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    else:
        actions = [(os.POSIX_SPAWN_DUP2, inp, 0)]
    for fd, to in ((out, 1), (err, 2)):
        if fd is not None:
            actions.append((os.POSIX_SPAWN_DUP2, fd, to))
    for fd in inherited():
        if fd not in pass_fds and fd not in (out, err, inp):
            actions.append((os.POSIX_SPAWN_CLOSE, fd))
    for fd in pass_fds:
        os.set_inheritable(fd, True)
    try:
        path = find(argv[0], env)
        return Forked(os.posix_spawn(path, argv, env, file_actions=actions, setsid=True))
    finally:
        for fd in pass_fds:
            os.set_inheritable(fd, False)


def inherited():
    """Our fds above 2 that a new program would inherit (what a caller's caller left open)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                fds.append(fd)
        except OSError:  # the listing's own fd, closed by now
            pass
    return fds


def find(name, env):
    """``name`` as execvpe finds it on ``env``'s PATH (a name with a slash as it is)."""
    if "/" in name:
        return name
    denied = None
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return path
            denied = denied or path
    if denied:
        raise PermissionError(13, "Permission denied", denied)
    raise FileNotFoundError(2, "No such file or directory", name)


def popen(argv, env, out, err, pass_fds, inp=None):
    import subprocess

    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL if inp is None else inp,
        stdout=out,
        stderr=err if err is not None else out,
        env=env,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def step_env(h):
    """The environment the step ``h`` (a header) runs in, but for what the runner adds to a
    script's (PYTHONUNBUFFERED, REMOTEKIT_DIR): ours, the header's env over it, its
    path_prepend before PATH. The agent starts a warm process with it (Agent.warm_for)."""
    env = dict(os.environ)
    env.update(h["env"] or {})
    if h["path_prepend"]:
        env["PATH"] = os.pathsep.join(h["path_prepend"] + [env.get("PATH", os.defpath)])
    return env


def step_argv(h, tmpdir, base=None):
    """The step's argv, cwd and env; a script is run from ``base`` (its package's folder) when
    given, else from ``tmpdir``."""
    env = step_env(h)
    argv = list(h["argv"])
    if h["script"]:
        env["PYTHONUNBUFFERED"] = "1"
        if tmpdir is not None:
            env["REMOTEKIT_DIR"] = tmpdir
        argv = [sys.executable, "-u", os.path.join(base or tmpdir, h["script"])] + argv
    cwd = h["cwd"]
    if cwd and not os.path.isdir(cwd):
        fail("cannot change to working directory %s: no such directory" % cwd)
    return argv, cwd, env


def do_detach(h, tmpdir, zygote, base=None):
    """Start the command in its own session with its output in a log file, and return:
    the one way a process outlives its step. Its folder (log, shipped files) stays."""
    zygote.discard()
    argv, cwd, env = step_argv(h, tmpdir, base)
    log = os.path.join(tmpdir, "output.log")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    report_r = report_w = None
    if h["report"]:  # the command tells what it started (a run's id) on a pipe
        report_r, report_w = os.pipe()
        env["REMOTEKIT_REPORT_FD"] = str(report_w)
    # It runs from the package too (a run's supervisor): it holds the package's lock (HELD)
    # for its life, by the descriptor it inherits, which it never needs to know.
    passed = tuple(HELD) + (() if report_w is None else (report_w,))
    child = spawn(argv, cwd, env, out=fd, pass_fds=passed)
    os.close(fd)
    info = {"pid": child.pid, "log": log, "dir": tmpdir}
    if report_r is not None:
        os.close(report_w)
        report = read_report(report_r, h["timeout"] or 60.0)
        if "error" in report:
            fail(report["error"] + tail_of(log), report.get("code", 125))
        info.update(report)
    control(EXIT, {"code": 0, "reason": "detached", "detached": info})
    return 0


def read_report(fd, timeout):
    """The one JSON line a detached command writes on its report pipe (until EOF)."""
    import select

    data, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        b = os.read(fd, CHUNK) if ready else b""
        if not b:
            break
        data += b
    os.close(fd)
    try:
        report = json.loads(data.decode("utf-8"))
    except ValueError:
        report = None
    if not isinstance(report, dict):
        return {"error": "the detached command ended or hung before it reported what it started"}
    return report


def tail_of(log):
    try:
        with open(log, "rb") as f:
            text = f.read()[-2000:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return "; its output:\n" + text if text else ""


def watch(child, relay, timeout, reason):
    """Relay ``child``'s output until it exits, the caller's end closes (EOF) or ``timeout``
    seconds pass (None: none), unless a signal set ``reason[0]`` first; ``reason[0]`` then
    says which ("exit", "eof", "deadline" or the signal's)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while child.poll() is None and reason[0] is None:
        if relay.eof:
            reason[0] = "eof"
            break
        left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
        if left <= 0:
            reason[0] = "deadline"
            break
        relay.pump(left)
    if child.returncode is not None:
        reason[0] = "exit"


def do_exec(h, tmpdir, zygote, outputs, stdin, base=None):
    argv, cwd, env = step_argv(h, tmpdir, base)
    if h["value"]:
        env[VALUE_FD] = str(outputs.val_w)
    reason = [None]

    def on_signal(signum, frame):
        reason[0] = "signal"

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    become_subreaper()
    takes = bool(h["stdin"])
    if runs_script(h) and zygote.pid is not None:
        child = zygote.run(argv[2], argv[3:], cwd, env, takes)
    else:
        zygote.discard()
        inp = outputs.in_r if takes else None
        passed = (outputs.val_w,) if h["value"] else ()
        child = spawn(
            argv, cwd, env, out=outputs.out_w, err=outputs.err_w, pass_fds=passed, inp=inp
        )
    control(STARTED, {"pid": child.pid})
    relay = Relay(outputs, stdin, takes, h["value"], h["bulk"])
    watch(child, relay, h["timeout"], reason)
    relay.end_input()
    reap_others(child)
    data = {"reason": reason[0]}
    if child.returncode is None or alive(child):
        data["stopped"], data["running"] = stop_tree(child, float(h["grace"]), relay.pump)
    relay.drain(2.0)  # all output before the final record (unless a survivor holds a pipe)
    relay.done()
    if h["value"]:
        send_value(relay.value, relay.value_over)
    code = child.returncode
    data["code"] = code = 128 - code if code < 0 else code
    control(EXIT, data)
    return code


def send_value(data, over):
    """The step's value on control lines of its own, in pieces (base64), or that it was
    larger than the header allowed (``over``: the bytes it wrote)."""
    for line in value_lines(data, over):
        write_control(line)


def value_lines(data, over, prefix=None):
    """send_value's control lines (``prefix``: the key, where it is not this runner's own)."""
    import binascii  # a C module: base64's pure-Python wrapper costs a step ~1 ms

    if over:
        return [control_line(VALUE, {"over": over}, prefix)]
    return [
        control_line(
            VALUE,
            binascii.b2a_base64(bytes(data[at : at + VALUE_PIECE]), newline=False).decode("ascii"),
            prefix,
        )
        for at in range(0, len(data), VALUE_PIECE)
    ]


def write_control(data):
    try:
        os.write(2, data)
    except OSError:
        pass


def main():
    outputs = Outputs()
    zygote = Zygote(
        outputs, ZYGOTE is True
    )  # before the header: the nonce and the key never enter it
    prctl(4, 0)  # PR_SET_DUMPABLE 0: other processes of this user cannot read our memory
    for s in STOP_SIGNALS:
        signal.signal(s, on_stop_signal)
    wake_r = wake_pipe()
    stdin = Input(wake_r)
    header = read_header(stdin.read_exact(int(stdin.readline())))
    if ZYGOTE == AFTER_HEADER and runs_script(header):
        zygote = Zygote(outputs)
    KEY[0] = "remotekit-" + os.urandom(16).hex()
    control(READY, {"key": KEY[0]}, prefix=header["nonce"])
    op = header["op"]
    if op in ("put", "get"):
        zygote.discard()
        outputs.close()
        return do_put(header, stdin) if op == "put" else do_get(header)
    tmpdir = None
    keep = False
    try:
        base = None
        if header["package"]:
            base, tmpdir = package_dir(header, stdin)
        if header["files"] and tmpdir is None:
            tmpdir = created(private_dir)
        if header["files"]:
            for name, size, mode in header["files"]:
                path = os.path.join(tmpdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    stdin.copy_to(f.fileno(), size)  # written through as it arrives
                os.chmod(path, mode)
        if header["detach"]:
            tmpdir = tmpdir or private_dir()
            keep = True
            del TO_REMOVE[:]
            return do_detach(header, tmpdir, zygote, base)
        return do_exec(header, tmpdir, zygote, outputs, stdin, base)
    finally:
        zygote.discard()
        if tmpdir is not None and not keep:
            remove_tree(tmpdir)


def package_hash(files):
    # type: (object) -> str
    """The name of the package made of ``files`` ((path, bytes) pairs, in their order): the
    laptop names the package it ships by it, the runner checks what came against it."""
    import hashlib

    h = hashlib.sha256()
    for name, data in files:  # type: ignore[attr-defined]
        h.update(b"%s\0%d\0" % (name.encode(), len(data)))
        h.update(data)
    return h.hexdigest()[:32]


# The rules a cache folder is held to (boot.cache_folder: what is read from it runs), given by
# whoever ran this runner: the boot (one process per step) or the agent the boot started. A
# runner run without them (``python runner.py``) keeps no packages.
cache_folder = globals().get("cache_folder")
HELD = []  # type: list[int]  # the lock's descriptor, while this runner runs from an entry


# The package cache is a class here, not a module of its own: the runner runs from source on
# a loader's stdin (one process per step, or in an agent) with no package on the path, and
# what it would import is the very package this cache installs.
class PackageCache(object):
    """The packages kept in ``root`` (``$XDG_CACHE_HOME/remotekit/pkg``, else under
    ``~/.cache``, when boot.cache_folder trusts it; None: none kept), one entry a package,
    named by its hash: unpacked whole and sealed (SEAL), held by whatever runs from it
    (LOCK), the least recently used pruned past KEEP."""

    DIGITS = "0123456789abcdef"  # a package's name: hex digits of its hash
    KEEP = 8  # packages kept, the most recently used (each ~0.7 MB, and its bytecode)
    # What the runner writes last into a package it unpacked, before the rename that puts it
    # in place: the manifest ([[path, size], ...]). An entry without it, or whose files are
    # not the sizes it says, is not trusted (a copy cut short, a truncated module).
    SEAL = ".manifest.json"
    # A file in each entry that every process running from it holds a shared lock on (flock)
    # for its life: the runner from before it reads the entry until it exits, so its step and
    # the step's tree (stopped before the runner exits) are covered, and a detached step, the
    # run's supervisor, which inherits the lock's descriptor (HELD) and so holds it as long
    # as it lives. Pruning takes it exclusively, without waiting, and skips an entry it
    # cannot lock: an entry in use is never taken from under what runs from it.
    LOCK = ".lock"

    def __init__(self, root):
        self.root = root

    @classmethod
    def here(cls):
        """This host's cache, by the rules this runner was given (none without them)."""
        return cls(None if cache_folder is None else cache_folder("pkg"))

    def take(self, name):
        """The entry of the package ``name``, held (hold) and marked the most recently
        used; None when it is not kept whole (a damaged one is discarded: it comes again)
        or is being discarded as we came."""
        if self.root is None:
            return None
        kept = os.path.join(self.root, name)
        if not os.path.lexists(kept):
            return None
        if not self.sealed(kept):
            self.discard(name)
            return None
        if not self.hold(kept):
            return None
        try:
            os.utime(kept)  # the most recently used are the ones kept
        except OSError:
            pass
        return kept

    def add(self, name, files):
        """``files`` kept as the package ``name``, its entry held; None where they cannot
        be (no cache, a full disk: the step unpacks them into its temp dir)."""
        if self.root is None:
            return None
        kept = os.path.join(self.root, name)
        try:
            self.unpack(files, self.root, kept)
            if not self.hold(kept):
                raise OSError("discarded as it was unpacked")
        except OSError:
            return None
        self.prune()
        return kept

    @classmethod
    def sealed(cls, kept):
        """Whether ``kept`` is a package the runner unpacked whole: its seal, and every
        file it names there, a regular file of the size it names."""
        try:
            with open(os.path.join(kept, cls.SEAL), "rb") as f:
                manifest = json.loads(f.read().decode("utf-8"))
            for rel, size in manifest:
                st = os.lstat(os.path.join(kept, rel))
                if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                    return False
        except (OSError, ValueError, TypeError):
            return False
        return True

    @classmethod
    def unpack(cls, files, where, dest):
        """``files`` into ``dest``, whole: written in a private folder in ``where``, sealed
        (the seal last), then renamed into place (a step that unpacked it first wins)."""
        tmp = os.path.join(where, ".unpack-" + os.urandom(6).hex())
        os.mkdir(tmp, 0o700)
        try:
            seal = json.dumps([[r, len(d)] for r, d in files]).encode()
            for rel, data in files + [(cls.SEAL, seal)]:
                path = os.path.join(tmp, *rel.split("/"))
                os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            try:
                os.rename(tmp, dest)
            except OSError:
                if not os.path.isdir(dest):
                    raise
        finally:
            if os.path.isdir(tmp):
                remove_tree(tmp)

    def lock_of(self, kept):
        """A descriptor of the lock file of the entry ``kept`` (made when an older runner
        left none); None when the entry is not there."""
        try:
            return os.open(
                os.path.join(kept, self.LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
            )
        except OSError:
            return None

    def hold(self, kept):
        """Whether this runner may run from the entry ``kept``, holding its lock shared
        from now until it exits (HELD). False when it is gone or being discarded (locked
        exclusively); True, unlocked, where the filesystem has no locks (as before locks:
        pruning cannot tell then either)."""
        import fcntl

        fd = self.lock_of(kept)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:  # ENOLCK, EOPNOTSUPP: no locks here
            os.close(fd)
            return True
        try:  # still the entry's own lock, not one a discard renamed away
            ours = os.path.samestat(os.fstat(fd), os.lstat(os.path.join(kept, self.LOCK)))
        except OSError:
            ours = False
        if not ours:
            os.close(fd)
            return False
        HELD.append(fd)
        return True

    def discard(self, name, in_use_too=True):
        """Remove the entry ``name``: first out of its name (one rename), so no runner ever
        finds a part of it there. Not one that something runs from (its lock held), unless
        ``in_use_too`` (damaged: what runs from it fails however it goes)."""
        import fcntl

        fd = None if in_use_too else self.lock_of(os.path.join(self.root, name))
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return
                except OSError:  # no locks here: as before locks
                    pass
            gone = os.path.join(self.root, ".gone-" + os.urandom(6).hex())
            try:
                os.rename(os.path.join(self.root, name), gone)
            except OSError:
                return
        finally:
            if fd is not None:
                os.close(fd)
        remove_tree(gone)

    def prune(self):
        """Past KEEP, the least recently used packages go, but those in use (LOCK), and
        unpackings a killed runner left, after an hour."""
        try:
            when = {}
            for name in os.listdir(self.root):
                path = os.path.join(self.root, name)
                st = os.lstat(path)
                if name.startswith(".gone-"):
                    remove_tree(path)  # a removal cut short
                elif name.startswith(".unpack-"):
                    if time.time() - st.st_mtime > 3600:
                        remove_tree(path)
                else:
                    when[name] = st.st_mtime
            for name in sorted(when, key=when.get)[: max(0, len(when) - self.KEEP)]:
                self.discard(name, in_use_too=False)  # one in use stays, past the KEEP
        except OSError:
            pass


def package_dir(h, stdin):
    """(the folder the step's package is in, the step's temp dir or None): the kept one, or
    the one that came behind the header, unpacked into the cache (else into a temp dir of
    the step's). Neither: say ``missing`` and end, before anything ran."""
    name, size = h["package"], h["package_size"]
    if not isinstance(name, str) or not name or name.strip(PackageCache.DIGITS):
        fail("not a package name: %r" % (name,))
    cache = PackageCache.here()
    kept = cache.take(name)
    if kept is not None:
        stdin.read_exact(size, "package")  # sent all the same: not needed
        return kept, None
    if not size:
        control(MISSING, {"cache": cache.root is not None})
        sys.exit(125)
    files = unpacked(stdin.read_exact(size, "package"), name)
    kept = cache.add(name, files)
    if kept is not None:
        control(PACKAGE, {"cached": True})
        return kept, None
    tmpdir = created(private_dir)
    PackageCache.unpack(files, tmpdir, os.path.join(tmpdir, "package"))
    control(PACKAGE, {"cached": False})
    return os.path.join(tmpdir, "package"), tmpdir


def unpacked(blob, name):
    """The files of ``blob`` (remotekit.shipping.Package.blob) as (path, bytes) pairs, when
    they are the package ``name``: else the step ends before anything ran."""
    import zlib

    try:
        data = zlib.decompress(blob)
        head, _, body = data.partition(b"\n")
        files, at = [], 0
        for rel, size in json.loads(head.decode("utf-8")):
            parts = rel.split("/")
            if rel.startswith("/") or any(
                p in ("", ".", "..") or p == PackageCache.SEAL for p in parts
            ):
                raise ValueError("a package file named %r" % rel)
            files.append((rel, body[at : at + size]))
            at += size
        if at != len(body) or package_hash(files) != name:
            raise ValueError("its files hash to another name")
    except (zlib.error, ValueError, TypeError) as exc:
        fail("what came as package %s is not the package: %s" % (name, exc))
    return files


def entry():
    """The runner's life: its step, then its exit (never returns)."""
    try:
        code = main()
    except EOFError as e:
        fail(str(e))
    except SystemExit:
        raise
    except BaseException as e:
        fail("runner error: %s: %s" % (type(e).__name__, e))
    sys.stdout.flush()
    leave(code)


# Where an agent forked this runner (remote/agent.py, Agent.child), the pipe on which it says
# its exit status as it leaves; no step's process holds it (the zygote closes it).
DONE = None


def leave(code):
    """Exit with ``code``. With DONE: stdin, stdout and stderr closed first (EOF), then the
    status said on DONE, so that the agent reports the step's end without waiting for the
    kernel to take this process down (its memory, then SIGCHLD); it reaps it after."""
    if DONE is not None:
        try:
            for fd in (0, 1, 2):
                os.close(fd)
            os.write(DONE, b"%d" % (code & 0xFF))
        except OSError:
            pass
    os._exit(code)


# -- a warm worker's calls ---------------------------------------------------------------
#
# An agent runs a call step (header "worker") in a Worker (remotekit.remote.agent): a process
# of its own session that takes one step at a time on fds 0-2, as a runner does, and runs the
# call in its Executor, a process it forked that stays between calls with what they imported
# and set. The step's supervision is the runner's: the key drawn after the Executor exists,
# the deadline, EOF on stdin (the caller gone), TERM then KILL of the Executor's whole tree.
# A call that is stopped, or that ended its process or left one running, ends the Executor
# with it: the next call gets a fresh one.


#: A call's order (remotekit.remote.call.ORDER: a test holds them equal), and the most bytes
#: of it a worker hands its Executor in memory, with no folder made for it.
CALL_ORDER = "call.json"
ORDER_IN_MEMORY = 16 << 10


class Executor(object):
    """A warm worker's process for calls: forked by ``start`` (before a step's key is
    drawn), in its own session, dying with the worker (PR_SET_PDEATHSIG). Each call is an
    order on a socket with the call's pipes attached (SCM_RIGHTS: ``send``/``recv``, the
    agent's send_fds/recv_fds): it runs ``call.py``'s ``run`` there (the bundle's own copy,
    loaded once) and writes the call's status on the done pipe. The Popen surface for
    ``stop_tree``: ``pid``, ``returncode``, ``poll``, ``wait``, for the call under way."""

    def __init__(self, send, recv):
        self.send, self.recv = send, recv
        self.pid = None
        self.sock = None
        # the package its calls run from, once one ran in it (``package`` names it, ``base``
        # is its folder, ``locks`` the cache's locks on it, held until the Executor ends):
        # the next call of that package takes it without looking in the cache again
        self.package = self.base = None
        self.locks = []
        self.returncode = None
        self.relay = None  # the call under way's Relay: its done pipe says the call ended
        self.dead = False
        self.wake_r, self.wake_w = os.pipe()  # the steps' wake pipe (wake_pipe), kept
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)

    def start(self, env, cwd):
        """The Executor, forked now when there is none: ``env`` and ``cwd`` are the worker's
        key's (remotekit.remote.agent.Agent.worker_key), set once."""
        if self.pid is not None:
            return
        import socket

        ours, theirs = socket.socketpair()
        pid = os.fork()
        if not pid:
            ours.close()
            executor_main(theirs, self.recv, env, cwd)
        theirs.close()
        self.pid, self.sock = pid, ours

    def run(self, base, folder, fds, order=None):
        """Order a call: the bundle in ``base``, its order in ``folder`` (or ``order``, its
        text, when it came small: ORDER_IN_MEMORY); ``fds``: its stdout, stderr, value and
        done pipes' write ends."""
        self.returncode, self.dead = None, False
        self.send(self.sock, json.dumps([base, folder, order]).encode(), fds)
        return self

    def poll(self):
        if self.returncode is None and self.relay is not None and self.relay.finished:
            self.returncode = int(bytes(self.relay.finished).strip() or b"1")
        if self.returncode is None:
            self._wait(os.WNOHANG)
        return self.returncode

    def wait(self):
        if self.returncode is None or not self.dead:
            self._wait(0)
        return self.returncode

    def poll_gone(self):
        """Forget the Executor when it ended between calls (the OOM killer, a kill there):
        the next call forks a fresh one rather than ordering a process that is gone."""
        self._wait(os.WNOHANG)
        if self.dead:
            self.forget()

    def _wait(self, flags):
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            self.returncode = code if self.returncode is None else self.returncode
            self.dead = True

    def left(self):
        """Processes the call left running: the Executor's children and orphans re-parented
        to the worker (a subreaper), zombies aside; read from /proc/PID/task/TID/children,
        or the whole /proc where that is missing."""
        try:
            return children_left((os.getpid(), self.pid), self.pid)
        except (OSError, ValueError):
            return [p for p in alive(None) if p != self.pid]

    def forget(self):
        """The Executor is gone (stopped, or it ended): the next call forks a fresh one."""
        for fd in self.locks:
            os.close(fd)
        self.package = self.base = None
        self.locks = []
        if self.sock is not None:
            self.sock.close()
        if self.pid is not None and not self.dead:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._wait(0)
        self.pid = self.sock = None


def children_left(parents, executor):
    """The running children of ``parents`` (a worker, a subreaper, and its Executor), the
    Executor itself aside, from /proc/PID/task/TID/children: Executor.left, and the agent's
    look at a call it ran there. Raises OSError or ValueError where /proc cannot tell."""
    pids = []
    for pid in parents:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                pids += [int(p) for p in f.read().split() if int(p) != executor]
    return alive_among(pids)


def alive_among(pids):
    """Those of ``pids`` that run (not zombies)."""
    out = []
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                st = f.read()
            if st[st.rindex(b")") + 2 :].split()[0] != b"Z":
                out.append(pid)
        except (OSError, ValueError, IndexError):
            pass
    return out


def executor_main(sock, recv, env, cwd):
    """In the Executor: its own session, nothing of the worker's open but its order socket
    (and the package locks it holds, HELD), then each call as it is ordered."""
    code = 1
    try:
        os.setsid()
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the worker gone, it goes too
        signal.set_wakeup_fd(-1)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the worker's fds 0-2 are the step's: never held here
            os.dup2(null, fd)
        keep = sorted(set([sock.fileno(), null] + HELD))
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)
        settle(cwd, env)
        run = None
        while True:
            data, fds = recv(sock, 1 << 16, 4)
            if not data or len(fds) != 4:
                break
            out, err, val, done = fds
            for fd in fds:  # what the call starts gets none of them (SCM_RIGHTS: inheritable)
                os.set_inheritable(fd, False)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.close(out)
            os.close(err)
            base, folder, order = json.loads(data.decode("utf-8"))
            if folder is None:
                os.environ.pop("REMOTEKIT_DIR", None)
            else:
                os.environ["REMOTEKIT_DIR"] = folder
            if run is None:
                run = load_call(base)
            try:
                status = run(folder, val, order)
            except SystemExit as e:  # the function ended its process: so does the Executor
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                break
            for fd in (1, 2):  # the call's output ends here (its EOF), before its status
                os.dup2(null, fd)
            os.write(done, b"%d" % status)
            os.close(done)
        else:
            code = 0
    finally:
        os._exit(code & 0xFF)


def load_call(base):
    """``call.py``'s ``run``, from the bundle in ``base`` (its entry point, at its root),
    loaded once as the module ``__main__`` (what a call's function finds as a fresh
    process's), with the bundle first on the path."""
    path = os.path.join(base, "__remotekit_call__.py")
    sys.path.insert(0, base)
    with open(path, "rb") as f:
        code = COMPILE(f.read(), path)
    module = type(sys)("__remotekit_call__")
    module.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__="")
    sys.modules["__main__"] = sys.modules[module.__name__] = module
    exec(code, module.__dict__)
    return module.run


def worker_step(executor):
    """In a warm worker: the call step on fds 0-2 (its pipes from the agent), as ``main``
    runs a step, its call run by ``executor``. Returns its exit status (never exits)."""
    global STDIN
    import io

    STDIN = io.BufferedReader(io.FileIO(0, "r", closefd=False))
    held = len(HELD)
    try:
        return call_step(executor)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except EOFError as e:
        return fail_code(str(e))
    except BaseException as e:
        return fail_code("runner error: %s: %s" % (type(e).__name__, e))
    finally:
        del TO_REMOVE[:]
        # the package's lock: the Executor holds the one it was forked with; the one this
        # call took is kept while the Executor runs from its package (Executor.locks)
        if executor.base is not None:
            executor.locks.extend(HELD[held:])
            del HELD[held:]
        for fd in HELD[held:] if executor.pid is not None else HELD[:]:
            os.close(fd)
        del HELD[held if executor.pid is not None else 0 :]
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)


def fail_code(message):
    try:
        fail(message)
    except SystemExit as e:
        return e.code


def call_step(executor):
    for s in STOP_SIGNALS:
        signal.signal(s, on_stop_signal)
    signal.set_wakeup_fd(executor.wake_w)
    stdin = Input(executor.wake_r)
    header = read_header(stdin.read_exact(int(stdin.readline())))
    env = step_env(header)
    env["PYTHONUNBUFFERED"] = "1"
    cwd = header["cwd"]
    bad = cwd and not os.path.isdir(cwd)
    if executor.pid is not None:
        executor.poll_gone()  # one that ended since the last call (killed there): forgotten
    if not bad:
        executor.start(env, cwd)  # before the key: it is in no process but this one
    KEY[0] = "remotekit-" + os.urandom(16).hex()
    ready = [control_line(READY, {"key": KEY[0]}, prefix=header["nonce"])]
    # A call whose Executor runs from its package says ``ready`` with ``started``, in one
    # write (the caller has one message less to read), unless something fails before.
    if bad or executor.base is None or executor.package != header["package"]:
        write_control(ready.pop())
    if bad:
        fail("cannot change to working directory %s: no such directory" % cwd)
    tmpdir = order = None
    try:
        if ready:
            base = executor.base  # its Executor runs from it (and holds its lock)
            stdin.read_exact(header["package_size"], "package")  # sent all the same
        else:
            base, tmpdir = package_dir(header, stdin)
        once = tmpdir is not None  # a package not kept (no cache): its Executor ends with it
        files = header["files"]
        if len(files) == 1 and files[0][0] == CALL_ORDER and files[0][1] <= ORDER_IN_MEMORY:
            order = stdin.read_exact(files[0][1], "call order").decode("utf-8", "replace")
        else:
            tmpdir = tmpdir or created(private_dir)
            for name, size, mode in files:
                path = os.path.join(tmpdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    stdin.copy_to(f, size)
                os.chmod(path, mode)
        code = do_call(header, base, tmpdir, executor, stdin, once, order, ready)
        if not once and executor.pid is not None:
            executor.package, executor.base = header["package"], base
        return code
    except BaseException:
        if ready:  # what failed is said after it: the caller reads it as the step's
            write_control(ready.pop())
        raise
    finally:
        if tmpdir is not None:
            remove_tree(tmpdir)


def do_call(h, base, folder, executor, stdin, once=False, order=None, ready=None):
    """The call of ``h`` in ``executor``, supervised as ``do_exec`` supervises a step's
    process: its output relayed, its value kept, EOF and the deadline stop its tree."""
    reason = [None]

    def on_signal(signum, frame):
        reason[0] = "signal"

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    outputs = Outputs()
    done_r, done_w = os.pipe()
    try:
        fds = (outputs.out_w, outputs.err_w, outputs.val_w, done_w)
        child = executor.run(base, folder, fds, order)
    finally:
        os.close(done_w)
    write_control(b"".join(ready or ()) + control_line(STARTED, {"pid": child.pid}))
    if ready:
        del ready[:]  # said: what fails from now on is the call's
    relay = executor.relay = Relay(outputs, stdin, False, h["value"])
    relay.sources[done_r] = DONE_PIPE
    watch(child, relay, h["timeout"], reason)
    data = {"reason": reason[0]}
    code = child.returncode
    if code is None or child.dead or once or executor.left():
        child.returncode = None if not child.dead else child.returncode
        data["stopped"], data["running"] = stop_tree(child, float(h["grace"]), relay.pump)
        executor.forget()
        code = child.returncode if code is None else code
    relay.drain(2.0)
    relay.done()
    executor.relay = None
    lines = value_lines(relay.value, relay.value_over) if h["value"] else []
    data["code"] = code = 128 - code if code < 0 else code
    lines.append(control_line(EXIT, data))
    if sum(map(len, lines)) <= 1 << 16:  # the value and the end, one message where small
        lines = [b"".join(lines)]
    for line in lines:
        write_control(line)
    return code


if __name__ == "__main__":
    entry()
