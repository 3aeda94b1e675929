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
import shutil
import signal
import subprocess
import sys
import tempfile
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

    stop = threading.Event()
    reason = ["exit"]

    def on_signal(signum, frame):
        reason[0] = "signal"
        stop.set()

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    become_subreaper()
    try:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, cwd=cwd or None, env=env, start_new_session=True
        )
    except FileNotFoundError:
        fail("command not found: %s" % argv[0], 127)
    except PermissionError:
        fail("permission denied: %s" % argv[0], 126)
    except OSError as e:
        fail("cannot run %s: %s" % (argv[0], e), 126)
    control(nonce, "started", {"pid": child.pid})

    def watch_stdin():
        try:
            while STDIN.read1(CHUNK):
                pass
        except (OSError, ValueError):
            pass
        if not stop.is_set():
            reason[0] = "eof"
            stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    deadline = None if h.get("timeout") is None else time.monotonic() + h["timeout"]
    while child.poll() is None:
        if stop.wait(0.02):
            break
        if deadline is not None and time.monotonic() >= deadline:
            reason[0] = "deadline"
            break
    if child.returncode is None:
        stop_tree(child, float(h.get("grace", 1.0)))
    else:
        reason[0] = "exit"
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
            tmpdir = tempfile.mkdtemp(prefix="remotekit-")  # 0700, unique
            for name, size, mode in header["files"]:
                path = os.path.join(tmpdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(read_exact(size))
                os.chmod(path, mode)
        return do_exec(header, tmpdir)
    finally:
        if tmpdir is not None:
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
