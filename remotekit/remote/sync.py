"""The far half of ``remotekit sync``: list a destination tree, hash files, apply a plan.

Runs *there* (standard library only, Python >= 3.8); the local half (``remotekit/sync.py``)
also imports this file as a module, so the exclude rules and the path checks are written
once and mean the same on both sides::

    python sync.py stat  PATH     the root record of list only
    python sync.py list  DEST     excludes in $REMOTEKIT_DIR/excludes.json (list of patterns)
    python sync.py hash  DEST     relative paths in $REMOTEKIT_DIR/paths.json
    python sync.py read  SRC      the files {"files": [[rel, size, mtime_ns], ...], "marker": M}
                                  in $REMOTEKIT_DIR/paths.json, sent back raw (a pull): the
                                  line M, then frames, not lines (:func:`do_read`)
    python sync.py apply DEST     the plan in $REMOTEKIT_DIR/plan.json; small file bodies one
                                  after the other in $REMOTEKIT_DIR/pack (plan: offset, size),
                                  large ones each in $REMOTEKIT_DIR/d/<n>; one byte per body in
                                  $REMOTEKIT_DIR/ok ("1": read whole; "0": changed while read)

Every stdout line is one JSON object with a ``"type"``:

    {"type": "root", "exists": bool, "dir": bool, "parent": bool} list: first ("parent":
                                  the directory that holds it exists)
    {"type": "entries", "e": [[rel, kind, size, mtime_ns, mode(, link target)], ...]}
                                  list: kind "f" file, "d" dir, "l" symlink, "o" other
    {"type": "hash", "p": rel, "h": sha256 hex | null}            hash: one per path
    {"type": "read", "n": n, "ok": bool}   read (in a RECORD frame): file n ended; ok: its
                                  listed size was read whole and it did not change while read
    {"type": "kept", "p": rel}    apply: a directory to remove that holds unlisted entries
    {"type": "error", "p": rel, "message": ...}                   a path that could not be done
    {"type": "done", "command": ..., "errors": n}                 last; exit 1 if errors

Path safety: every relative path is checked (no absolute names, no ``..``, no empty or ``.``
parts, no NUL), and every change is made at the moment of use relative to a descriptor held
on DEST, one directory at a time with ``O_NOFOLLOW`` (:class:`Dest`): a directory on the way
that is a symlink, even one swapped in by a process there while the sync runs, is refused and
never followed, so nothing is written, renamed or removed outside DEST. Files are written
atomically: a temp file in the same directory, fsync, chmod, utime, rename; a stop signal
removes the temp file, so an interrupted sync leaves no partial file under its real name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import stat
import struct
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this file runs on Python >= 3.8 with the stdlib
    from typing import Any, Callable, Iterable

CHUNK = 1 << 20
#: Files staged, fsynced (in parallel) and renamed as one group during apply.
GROUP = 256
FSYNC_THREADS = 16
#: A listing line holds entries up to about this many bytes (the caller splits lines at 1 MiB).
LINE_BYTES = 256 << 10
#: The most bytes of a file one frame of ``read`` carries (the caller's bound for it too).
READ_FRAME = 1 << 20
#: The most bytes of one record frame of ``read`` (an error's message is one path's: short).
RECORD_FRAME = 64 << 10
#: The kinds of ``read``'s frames (:func:`frame_head`).
BODY, RECORD = b"B", b"J"
FRAME = struct.Struct("!cII")
#: Temp files of a sync in progress start with this; listings skip them.
TEMP_PREFIX = ".remotekit-sync-"
#: Permission bits a synced file or directory may get (never setuid, setgid or sticky).
MODE_BITS = 0o777


# -- exclude rules (a .gitignore subset) ---------------------------------------------------------


class Excludes(object):
    """``.gitignore``-style rules: globs (``*``, ``?``, ``[...]``, ``**``), ``dir/`` (matches
    directories only), ``!pattern`` (re-includes), ``/x`` or any pattern with a slash inside
    (anchored at the tree's root; otherwise it matches a name at any depth), ``#`` comments.
    The last matching rule wins; an excluded directory is not entered, so nothing below it
    can be re-included (as in git)."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self.rules = []
        for raw in patterns:
            rule = _rule(raw)
            if rule is not None:
                self.rules.append(rule)

    def __bool__(self):
        return bool(self.rules)

    def excluded(self, rel, is_dir):
        verdict = False
        name = rel.rsplit("/", 1)[-1]
        for regex, negate, dir_only, anchored in self.rules:
            if dir_only and not is_dir:
                continue
            if regex.match(rel if anchored else name):
                verdict = not negate
        return verdict


def _rule(raw):
    line = raw.rstrip("\n")
    if not line.strip() or line.startswith("#"):
        return None
    if not line.endswith("\\ "):
        line = line.rstrip(" ")
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    elif line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    if not line:
        return None
    return re.compile(_glob_regex(line) + r"\Z", re.S), negate, dir_only, anchored


def _glob_regex(pattern):
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/"):
            if i + 2 == n:
                out.append(".*")
                i += 2
                continue
            if pattern[i + 2] == "/":
                out.append("(?:.*/)?")
                i += 3
                continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# -- path safety ---------------------------------------------------------------------------------


class Unsafe(ValueError):
    """A relative path that would leave the destination (or reach it through a symlink)."""


def check_rel(rel: str) -> str:
    """``rel`` if it is a safe relative path (``a/b``), else raise :class:`Unsafe`."""
    if not isinstance(rel, str) or not rel:
        raise Unsafe("empty path")
    if "\0" in rel:
        raise Unsafe("NUL in path %r" % rel)
    if rel.startswith("/"):
        raise Unsafe("absolute path %r" % rel)
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            raise Unsafe("path %r has an empty, '.' or '..' part" % rel)
    return rel


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: How a directory on the way to a path is entered: never through a symlink.
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC


class Dest(object):
    """DEST held open by a descriptor; every path below it is reached from that descriptor
    one directory at a time (``openat`` with ``O_NOFOLLOW``) at the moment it is used, and
    is then created, written, renamed or removed relative to its directory's descriptor.

    Checking a path first and using it by name later is not enough: a process there that
    swaps a directory of DEST for a symlink in between would get the write. Resolved this
    way, a swapped directory is an :class:`Unsafe` error naming it, never followed."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def parent(self, rel):
        """``(fd, name)``: an open descriptor on the directory holding ``rel`` (the caller
        closes it) and ``rel``'s last part."""
        check_rel(rel)
        parts = rel.split("/")
        fd = os.dup(self.fd)
        try:
            for n, part in enumerate(parts[:-1]):
                try:
                    down = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    here = os.path.join(self.root, *parts[: n + 1])
                    if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise Unsafe("%s is a symlink; refusing to go through it" % here) from None
                    raise Unsafe("%s is not a directory" % here) from None
                os.close(fd)
                fd = down
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    def open(self, rel, flags):
        """A descriptor on ``rel`` itself, opened with ``flags | O_NOFOLLOW``."""
        fd, name = self.parent(rel)
        try:
            return os.open(name, flags | NOFOLLOW | CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)


# -- records -------------------------------------------------------------------------------------


def emit(record):
    sys.stdout.write(json.dumps(record) + "\n")


class Interrupted(BaseException):
    """A stop signal (the caller was cancelled, timed out or went away)."""


def on_signal(signum, frame):
    raise Interrupted(signum)


# -- list ----------------------------------------------------------------------------------------


def kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    return "l" if stat.S_ISLNK(mode) else "o"


def entry(rel, path, st):
    """``[rel, kind, size, mtime_ns, mode]`` (and the target, for a symlink)."""
    k = kind(st.st_mode)
    row = [rel, k, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode)]
    if k == "l":
        row.append(os.readlink(path))
    return row


class Batched(object):
    """Entries emitted as ``{"type": "entries", "e": [row, ...]}`` lines of at most about
    :data:`LINE_BYTES` (one line per entry costs the caller a callback and a parse each)."""

    def __init__(self):
        self.rows, self.size = [], 0

    def add(self, row):
        self.rows.append(row)
        self.size += len(row[0]) + (len(row[5]) if len(row) > 5 else 0) + 48
        if self.size >= LINE_BYTES:
            self.flush()

    def flush(self):
        if self.rows:
            emit({"type": "entries", "e": self.rows})
        self.rows, self.size = [], 0


def walk(
    root: str,
    excludes: Excludes | None,
    on_entry: Callable[[str, str, os.stat_result], object],
    on_error: Callable[[str, str], object],
) -> None:
    """Call ``on_entry(rel, path, lstat)`` for everything below ``root`` that is not excluded,
    parents before children, never following a symlink; sync temp files are skipped."""
    todo = [""]
    while todo:
        prefix = todo.pop()
        top = os.path.join(root, prefix) if prefix else root
        try:
            with os.scandir(top) as it:
                items = sorted(it, key=lambda e: e.name)
        except OSError as e:
            on_error(prefix or ".", e.strerror or str(e))
            continue
        subdirs = []
        for item in items:
            if item.name.startswith(TEMP_PREFIX):
                continue
            rel = prefix + "/" + item.name if prefix else item.name
            try:
                st = item.stat(follow_symlinks=False)
            except OSError as e:
                on_error(rel, e.strerror or str(e))
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if excludes and excludes.excluded(rel, is_dir):
                continue
            on_entry(rel, item.path, st)
            if is_dir:
                subdirs.append(rel)
        todo.extend(reversed(subdirs))


def do_stat(root, here):
    """The root record alone: whether the path exists, is a directory, has its parent."""
    return do_list(root, here, walk_too=False)


def do_list(root, here, walk_too=True):
    excludes = None
    if walk_too:
        with open(os.path.join(here, "excludes.json")) as f:
            excludes = Excludes(json.load(f))
    errors = []
    try:
        st = os.stat(root)
    except OSError:
        st = None
    is_dir = st is not None and stat.S_ISDIR(st.st_mode)
    parent = os.path.isdir(os.path.dirname(root))
    emit({"type": "root", "exists": st is not None, "dir": is_dir, "parent": parent})
    if st is None or not walk_too:
        return errors
    if stat.S_ISDIR(st.st_mode):
        out = Batched()
        walk(
            root,
            excludes,
            lambda rel, path, s: out.add(entry(rel, path, s)),
            lambda rel, msg: errors.append(error(rel, msg)),
        )
        out.flush()
    return errors


# -- hash ----------------------------------------------------------------------------------------


def file_hash(path: str) -> str:
    """SHA-256 of the regular file ``path`` (a symlink or a FIFO is an OSError)."""
    return fd_hash(os.open(path, os.O_RDONLY | NOFOLLOW | NONBLOCK | CLOEXEC))


def fd_hash(fd: int) -> str:
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError("not a regular file")
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def do_hash(root, here):
    with open(os.path.join(here, "paths.json")) as f:
        paths = json.load(f)
    dest = Dest(root)
    try:
        for rel in paths:
            try:
                digest = fd_hash(dest.open(rel, os.O_RDONLY | NONBLOCK))
            except (OSError, Unsafe):
                digest = None  # gone or odd: the caller sends it
            emit({"type": "hash", "p": rel, "h": digest})
    finally:
        dest.close()
    return []


# -- read (a pull) ------------------------------------------------------------------------------


def do_read(root, here):
    """Send the bytes of each listed file: exactly its listed size (the caller pads a file
    that came short), each reached from SRC without following a symlink on the way. After
    the caller's marker line, stdout is frames (:func:`frame_head`), no longer lines: the
    bytes go as they are read, in frames of up to READ_FRAME, records (``read``, ``error``,
    ``done``) in frames of their own."""
    with open(os.path.join(here, "paths.json")) as f:
        asked = json.load(f)
    files = asked["files"]
    write_all(1, asked["marker"].encode("ascii") + b"\n")
    src = Dest(root)
    errors = []
    buf = bytearray(READ_FRAME)
    try:
        for n, (rel, size, mtime_ns) in enumerate(files):
            ok = False
            try:
                fd = src.open(rel, os.O_RDONLY | NONBLOCK)
            except (OSError, Unsafe) as e:
                errors.append(error(rel, str(e) if isinstance(e, Unsafe) else e.strerror))
                send_record({"type": "read", "n": n, "ok": False})
                continue
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
                left = size if regular else 0
                with memoryview(buf) as view:
                    while left > 0:
                        got = os.readv(fd, [view[: min(READ_FRAME, left)]])
                        if not got:
                            break
                        left -= got
                        write_all(1, frame_head(BODY, n, got))
                        write_all(1, view[:got])
                st = os.fstat(fd)
                ok = regular and left == 0 and st.st_size == size and st.st_mtime_ns == mtime_ns
            finally:
                os.close(fd)
            send_record({"type": "read", "n": n, "ok": ok})
    finally:
        src.close()
    return errors


def frame_head(kind, n, length):
    """The head of a frame of a pull's bodies: KIND (1 byte: BODY, the next ``length`` bytes
    of file ``n``; RECORD, one JSON record) | n (u32, big-endian) | length (u32)."""
    return FRAME.pack(kind, n, length)


def send_record(record):
    data = json.dumps(record).encode()
    write_all(1, frame_head(RECORD, 0, len(data)) + data)


# -- apply ---------------------------------------------------------------------------------------
#
# Every change below is made relative to the descriptor of the directory that holds it, got
# from Dest.parent at the moment of use: (dir_fd, name) pairs, never paths.


def error(rel, message):
    return {"type": "error", "p": rel, "message": message}


def temp_name(name):
    """A temp name beside ``name`` keeping at most its first 100 *bytes* (a legal 255-byte
    name cut at 100 characters may not fit), whole UTF-8 characters only."""
    part = os.fsencode(name)[:100].decode("utf-8", "ignore")
    return TEMP_PREFIX + os.urandom(6).hex() + "-" + part


def stage_file(body, dir_fd, name, mode, mtime_ns):
    """A temp file beside ``name`` in ``dir_fd`` holding ``body`` (a file in the shipped dir,
    or a ``(pack fd, offset, size)`` slice of the pack), with its mode and mtime set, not yet
    synced to disk: ``(its name, an open fd on it)``. Mode and mtime are set through the fd
    (path lookups are what a container's filesystem makes slow)."""
    tmp = temp_name(name)
    fd = -1
    try:
        if not isinstance(body, tuple) and os.stat(body).st_dev == os.fstat(dir_fd).st_dev:
            os.rename(body, tmp, dst_dir_fd=dir_fd)  # same filesystem: no copy
            fd = os.open(tmp, os.O_RDONLY | NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
            if isinstance(body, tuple):
                copy_slice(*body, out=fd)
            else:
                src = os.open(body, os.O_RDONLY | CLOEXEC)
                try:
                    for block in iter(lambda: os.read(src, CHUNK), b""):
                        write_all(fd, block)
                finally:
                    os.close(src)
        os.chmod(fd, mode & MODE_BITS)
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    except BaseException:
        if fd >= 0:
            os.close(fd)
        discard(dir_fd, tmp)
        raise
    return tmp, fd


def copy_slice(fd, offset, size, out):
    """Write ``size`` bytes of ``fd`` from ``offset`` to the fd ``out``."""
    while size > 0:
        block = os.pread(fd, min(CHUNK, size), offset)
        if not block:
            raise OSError("the shipped body is shorter than its plan")
        write_all(out, block)
        offset += len(block)
        size -= len(block)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def discard(dir_fd, name):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def install_files(dest, items, errors):
    """Install ``(rel, body, mode, mtime_ns)`` items atomically, a group at a time: stage
    each as a temp file beside its path, fsync the group's temp files in parallel (one fsync
    per file costs a journal commit each; parallel ones share commits), then rename each
    over its path, all relative to the directory descriptors resolved for the group. A stop
    signal or an error leaves no temp file behind."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(FSYNC_THREADS) as pool:
        for at in range(0, len(items), GROUP):
            dirs = {}  # directory rel -> its fd, for this group
            staged = []
            try:
                for rel, body, mode, mtime_ns in items[at : at + GROUP]:
                    try:
                        dir_fd, name = dir_of(dest, rel, dirs)
                        staged.append(
                            (rel, dir_fd, name) + stage_file(body, dir_fd, name, mode, mtime_ns)
                        )
                    except Unsafe as e:
                        errors.append(error(rel, "refused: %s" % e))
                    except OSError as e:
                        errors.append(error(rel, e.strerror or str(e)))
                synced = list(pool.map(lambda s: try_os(os.fsync, s[4]), staged))
                while staged:
                    rel, dir_fd, name, tmp, fd = staged.pop()
                    os.close(fd)
                    failed = synced.pop() or try_os(
                        os.replace, tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd
                    )
                    if failed:
                        discard(dir_fd, tmp)
                        errors.append(error(rel, failed))
            finally:
                for _, dir_fd, _, tmp, fd in staged:
                    os.close(fd)
                    discard(dir_fd, tmp)
                for fd in dirs.values():
                    os.close(fd)


def dir_of(dest, rel, dirs):
    """``(fd, name)`` of ``rel``'s directory, opened once per directory into ``dirs``."""
    folder = rel.rpartition("/")[0]
    if folder in dirs:
        return dirs[folder], check_rel(rel).rpartition("/")[2]
    fd, name = dest.parent(rel)
    dirs[folder] = fd
    return fd, name


def try_os(fn, *args, **kw):
    """None if ``fn(*args, **kw)`` worked, else the OSError's text."""
    try:
        fn(*args, **kw)
        return None
    except OSError as e:
        return e.strerror or str(e)


def install_link(dir_fd, name, target):
    tmp = temp_name(name)
    os.symlink(target, tmp, dir_fd=dir_fd)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        discard(dir_fd, tmp)
        raise


def remove(dir_fd, name):
    """Remove one name, never a tree: a directory only once empty (its listed children were
    removed before it, deepest first); True if it was a directory that still holds entries
    the plan did not name (excluded, or new since the listing), which are kept with it."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return False
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return True
    return False


def set_meta(dir_fd, name, mode, mtime_ns=None):
    """Set a file's mode and mtime (``mtime_ns``) or a directory's mode (no ``mtime_ns``)
    through a descriptor opened without following a symlink: a name swapped for a symlink
    since the listing (say ``sub -> /etc``) is an error naming it, never followed."""
    is_dir = mtime_ns is None
    flags = os.O_RDONLY | NOFOLLOW | NONBLOCK | CLOEXEC
    try:
        fd = os.open(name, flags | (getattr(os, "O_DIRECTORY", 0) if is_dir else 0), dir_fd=dir_fd)
    except OSError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError("is a symlink there now; not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) != is_dir or not (is_dir or stat.S_ISREG(st.st_mode)):
            raise OSError("no longer a %s" % ("directory" if is_dir else "regular file"))
        os.chmod(fd, mode & MODE_BITS)
        if not is_dir:
            os.utime(fd, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(fd)


def do_apply(root, here):
    with open(os.path.join(here, "plan.json")) as f:
        plan = json.load(f)
    with open(os.path.join(here, "ok"), "rb") as f:
        ok = f.read()
    os.makedirs(root, exist_ok=True)
    dest = Dest(root)
    try:
        return apply_plan(dest, plan, ok, here)
    finally:
        dest.close()


def apply_plan(
    dest: Dest,
    plan: dict[str, Any],
    ok: bytes,
    here: str,
    say: Callable[[dict[str, Any]], object] = emit,
) -> list[dict[str, Any]]:
    """Carry out ``plan`` in ``dest`` (there for a push, here for a pull: the near side
    calls it with its own ``say``); the error records of the paths that failed."""
    errors = []

    def each(key, fn):
        """``fn(dir_fd, name, *args)`` for each item of the plan's ``key``, its directory
        resolved from DEST just before; the paths for which ``fn`` returned true."""
        true = []
        for item in plan.get(key, ()):
            rel, args = (item[0], item[1:]) if isinstance(item, list) else (item, [])
            try:
                dir_fd, name = dest.parent(rel)
                try:
                    if fn(dir_fd, name, *args):
                        true.append(rel)
                finally:
                    os.close(dir_fd)
            except Unsafe as e:
                errors.append(error(rel, "refused: %s" % e))
            except OSError as e:
                errors.append(error(rel, e.strerror or str(e)))
        return true

    for rel in each("remove", remove):  # a directory that still holds unlisted entries
        say({"type": "kept", "p": rel})
    each("mkdir", lambda dir_fd, name, mode: os.mkdir(name, 0o700, dir_fd=dir_fd))
    bodies = []
    for rel, n, mode, mtime_ns, *slice_ in plan.get("files", ()):
        if ok[n : n + 1] != b"1":
            errors.append(error(rel, "changed while it was read here; not sent (sync again)"))
        else:
            bodies.append((rel, n, mode, mtime_ns, slice_))
    packed = os.path.join(here, "pack")
    pack = os.open(packed, os.O_RDONLY | CLOEXEC) if os.path.exists(packed) else -1
    try:
        items = [
            (rel, (pack, s[0], s[1]) if s else os.path.join(here, "d", str(n)), mode, mtime_ns)
            for rel, n, mode, mtime_ns, s in bodies
        ]
        install_files(dest, items, errors)
    finally:
        if pack >= 0:
            os.close(pack)
    each("links", install_link)
    each("meta", set_meta)
    each("dirmodes", set_meta)
    return errors


def main(argv):
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    command, dest = argv[0], argv[1]
    root = os.path.abspath(os.path.expanduser(dest))
    here = os.environ.get("REMOTEKIT_DIR") or os.path.dirname(os.path.abspath(__file__))
    errors = {
        "stat": do_stat,
        "list": do_list,
        "hash": do_hash,
        "read": do_read,
        "apply": do_apply,
    }[command](root, here)
    say = send_record if command == "read" else emit  # read: its stdout is frames
    for e in errors:
        say(e)
    say({"type": "done", "command": command, "errors": len(errors)})
    sys.stdout.flush()
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Interrupted as stop:
        sys.exit(128 + stop.args[0])
