# remotekit runner: shipped over stdin and run THERE by a constant loader, e.g.
#
#   pct exec 200 -- /root/venv/bin/python -c 'import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))'
#
# Standard library only; Python >= 3.6 syntax. Protocol (all on stdin, after the runner itself):
#
#   <decimal length>\n<header: UTF-8 JSON>         then the bytes of header["files"], in order
#
# header: {"nonce", "op": "exec"|"put"|"get", "argv", "script", "env", "path_prepend", "cwd",
#          "files": [[name, size, mode], ...], "timeout", "grace", "dest", "src", "size", "mode"}
#
# After the payload, stdin stays open: EOF on it means the caller is gone (timeout, Ctrl-C,
# lost connection) and the step's whole process tree is stopped: TERM, then KILL after
# "grace" seconds. The runner also stops the tree itself at "timeout" (a backstop: the caller
# normally acts first). Control lines on stderr carry the nonce so the caller can strip them:
#
#   <nonce> ready                          the runner started (so the interpreter exists)
#   <nonce> started {"pid": N}             the step's process runs
#   <nonce> exit {"code": N, "reason": R}  R: exit | deadline | eof | signal
#
# The step's own stdout and stderr are the runner's (inherited), so output is never copied
# or buffered here. Exit status: the step's, 128+N for signal N; 125 for a runner error
# (message on stderr), 126 / 127 when the command cannot be run / is not found.
import json
import os
import signal
import sys
import threading
import time

STDIN = sys.stdin.buffer
CHUNK = 1 << 20


def control(nonce, word, data=None):
    line = nonce + " " + word + ("" if data is None else " " + json.dumps(data)) + "\n"
    try:
        os.write(2, line.encode())
    except OSError:
        pass


def fail(message, code=125):
    try:
        os.write(2, ("remotekit: " + message + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
    sys.exit(code)


def read_exact(n):
    parts = []
    while n > 0:
        b = STDIN.read(min(n, CHUNK))
        if not b:
            raise EOFError("payload truncated")
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def copy_stdin_to(fileobj, n):
    while n > 0:
        b = STDIN.read(min(n, CHUNK))
        if not b:
            raise EOFError("upload truncated: %d bytes missing" % n)
        fileobj.write(b)
        n -= len(b)


def descendants(root):
    """Pids of every process below ``root`` (Linux /proc); empty elsewhere."""
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
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def signal_tree(child, sig):
    """Send ``sig`` to the step's process group and to every descendant of the runner."""
    pids = set(descendants(os.getpid()))
    try:
        os.killpg(child.pid, sig)
    except OSError:
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return pids


def reap_others(child):
    """Reap orphans re-parented to us (we are a subreaper), never the step's own process."""
    for pid in descendants(os.getpid()):
        if pid != child.pid:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass


def stop_tree(child, grace):
    signal_tree(child, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        child.poll()
        reap_others(child)
        if child.returncode is not None and not descendants(os.getpid()):
            return
        time.sleep(0.02)
    signal_tree(child, signal.SIGKILL)
    child.wait()
    end = time.monotonic() + 2.0
    while descendants(os.getpid()) and time.monotonic() < end:
        reap_others(child)
        time.sleep(0.01)


def become_subreaper():
    # Orphaned grandchildren (double forks, setsid daemons) re-parent to us, so a stopped
    # step leaves nothing behind. Linux only; elsewhere the process group is what we stop.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def do_put(h):
    dest = h["dest"]
    if os.path.isdir(dest):
        dest = os.path.join(dest, h["name"])
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        fail("cannot write %s: directory %s does not exist" % (dest, folder), 1)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".remotekit-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            copy_stdin_to(f, h["size"])
            f.flush()
            os.fsync(f.fileno())
        if h.get("mode") is not None:
            os.chmod(tmp, h["mode"])
        else:
            os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, dest)
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


def do_get(h):
    src = h["src"]
    try:
        f = open(src, "rb")
    except OSError as e:
        fail("cannot read %s: %s" % (src, e.strerror), 1)
    with f:
        os.write(1, (h["nonce"] + "\n").encode())  # data starts after this line
        while True:
            b = f.read(CHUNK)
            if not b:
                break
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
            except ChildProcessError:  # reaped by the other thread: it sets returncode
                time.sleep(0.005)
                continue
            if not pid:
                break
            self._set(status)
        return self.returncode


def fork_safe(env):
    # A forked interpreter has read its PYTHON* settings already; a step that sets any
    # gets a fresh interpreter instead.
    return hasattr(os, "fork") and not any(
        k.startswith("PYTHON") and k != "PYTHONUNBUFFERED" for k in env
    )


def fork_script(path, args, cwd, env):
    """Run the shipped script in a forked copy of this interpreter: the same Python as a
    fresh ``python -u script`` would be, without paying for a second interpreter start.
    Forked before any thread exists; the child gets its own session, /dev/null as stdin,
    unbuffered stdout/stderr, the step's env and cwd, and the script as ``__main__``."""
    if cwd and not os.path.isdir(cwd):
        fail("cannot change to working directory %s: no such directory" % cwd)
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:
        os.setsid()
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if cwd:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        import io
        import runpy

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
        sys.argv = [path] + list(args)
        sys.path[0] = os.path.dirname(path)
        runpy.run_path(path, run_name="__main__")
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
        os._exit(code & 0xFF)


def spawn(argv, cwd, env):
    import subprocess

    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, cwd=cwd or None, env=env, start_new_session=True
        )
    except FileNotFoundError:
        fail("command not found: %s" % argv[0], 127)
    except PermissionError:
        fail("permission denied: %s" % argv[0], 126)
    except OSError as e:
        fail("cannot run %s: %s" % (argv[0], e), 126)


def do_exec(h, tmpdir):
    nonce = h["nonce"]
    env = dict(os.environ)
    env.update(h.get("env") or {})
    if h.get("path_prepend"):
        env["PATH"] = os.pathsep.join(h["path_prepend"] + [env.get("PATH", os.defpath)])
    argv = list(h["argv"])
    if h.get("script"):
        env["PYTHONUNBUFFERED"] = "1"
        env["REMOTEKIT_DIR"] = tmpdir
        argv = [sys.executable, "-u", os.path.join(tmpdir, h["script"])] + argv
    cwd = h.get("cwd")
    if cwd and not os.path.isdir(cwd):
        fail("cannot change to working directory %s: no such directory" % cwd)

    # Woken by: the step exiting (waiter thread), stdin EOF (watcher thread), or a signal
    # (flag checked at least every 0.25 s); the deadline is the wait's timeout.
    wake = threading.Event()
    reason = [None]

    def on_signal(signum, frame):
        reason[0] = "signal"

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    become_subreaper()
    if h.get("script") and fork_safe(h.get("env") or {}):
        child = fork_script(argv[2], argv[3:], cwd, env)
    else:
        child = spawn(argv, cwd, env)
    control(nonce, "started", {"pid": child.pid})

    def watch_stdin():
        try:
            while STDIN.read1(CHUNK):
                pass
        except (OSError, ValueError):
            pass
        reason[0] = reason[0] or "eof"
        wake.set()

    def wait_child():
        child.wait()
        wake.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=wait_child, daemon=True).start()
    deadline = None if h.get("timeout") is None else time.monotonic() + h["timeout"]
    while child.returncode is None and reason[0] is None:
        left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
        if left <= 0:
            reason[0] = "deadline"
            break
        wake.wait(left)
    if child.returncode is None:
        stop_tree(child, float(h.get("grace", 1.0)))
    else:
        reason[0] = "exit"
        reap_others(child)
    code = child.returncode
    code = 128 - code if code < 0 else code
    control(nonce, "exit", {"code": code, "reason": reason[0]})
    return code


def main():
    header = json.loads(read_exact(int(STDIN.readline())).decode("utf-8"))
    control(header["nonce"], "ready")
    op = header.get("op", "exec")
    if op == "put":
        return do_put(header)
    if op == "get":
        return do_get(header)
    tmpdir = None
    try:
        if header.get("files"):
            tmpdir = private_dir()
            for name, size, mode in header["files"]:
                path = os.path.join(tmpdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(read_exact(size))
                os.chmod(path, mode)
        return do_exec(header, tmpdir)
    finally:
        if tmpdir is not None:
            import shutil

            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        code = main()
    except EOFError as e:
        fail(str(e))
    except SystemExit:
        raise
    except BaseException as e:
        fail("runner error: %s: %s" % (type(e).__name__, e))
    sys.stdout.flush()
    os._exit(code)
