"""Input files as the diagnostics open them: only regular files, and only names that stay inside
the checkpoint that named them. Standard library only, Python >= 3.8; every reader of a
checkpoint or a log opens through :func:`open_regular`; every follower of a growing log notices
through :func:`moved` that it was truncated or replaced.

Opening a FIFO blocks until a writer comes (forever, under a step timeout); a character device
streams without end. :func:`open_regular` opens without blocking, looks at what it opened
(``fstat``, so a name swapped after a check cannot fool it) and refuses anything but a regular
file with an error naming the path. Symlinks are followed: checkpoint directories (the Hugging
Face cache) are made of them.

A checkpoint names other files (a shard index its shards, DCP ``.metadata`` its storage files,
DeepSpeed ``latest`` a tag directory). :func:`inside` turns such a name into a path that stays
in the checkpoint's directory, or raises naming the name and the file that gave it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys

from .runner import kind_of  # the words a `get` of such a file says too

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_FLAGS |= getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """A path that is a FIFO, a device, a socket: not read."""


class TooDeep(ValueError):
    """A JSON document nested deeper than the parser can follow."""


class EscapingName(ValueError):
    """A name inside a checkpoint that points outside its directory."""


def open_regular(path, mode="rb", encoding=None, errors=None):
    """``path`` opened for reading (``mode`` "rb" or "r"), if it is a regular file: never
    blocks on a FIFO. A directory raises IsADirectoryError, anything else not regular
    :class:`NotRegularFile`; both name the path."""
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = kind_of(st.st_mode)
            why = "%s is %s, not a regular file: not read" % (path, what)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, why, path)
            raise NotRegularFile(errno.EINVAL, why, path)
        if _FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, encoding=encoding, errors=errors)
    except BaseException:
        os.close(fd)
        raise


def identity(f):
    """``(st_dev, st_ino)`` of the open file ``f``: which file it is, whatever its name."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino


def moved(path, f, ident, offset):
    """How the file that a follower of ``path`` reads changed under it, the rule of every
    follow (train-log's, a run's log): ``("replaced", size)`` when ``path`` names another
    file now than ``f`` (identity ``ident``; rotated, or written anew), ``("truncated", size)``
    when ``f`` is shorter than ``offset``, the bytes it read, else None (also while nothing
    is at ``path``: moved away, the open file is read on). ``size``: ``f``'s size. The
    follower reads the old file to its end first, then goes on from the start, and says so."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    size = os.fstat(f.fileno()).st_size
    if (st.st_dev, st.st_ino) != ident:
        return "replaced", size
    if size < offset:
        return "truncated", size
    return None


def read_regular(path, limit=-1):
    """The bytes of the regular file ``path`` (its first ``limit`` bytes when given)."""
    with open_regular(path) as f:
        return f.read(limit)


def fd_path(f, path):
    """A path that opens the very file ``f`` holds (``/proc/self/fd/N`` on Linux; else
    ``path``): for a library that takes a path only (``torch.load(..., mmap=True)``)."""
    proc = "/proc/self/fd/%d" % f.fileno()
    return proc if os.path.exists(proc) else path


def inside(directory, name, named_by):
    """``directory/name`` for a file name read from ``named_by`` (a file in ``directory``),
    if the name stays inside ``directory`` (absolute names and ``..`` that climbs out do not);
    else EscapingName. Symlinks inside the directory are its owner's and stay trusted (the
    Hugging Face cache links each shard to a blob elsewhere)."""
    text = str(name)
    bad = not text or "\x00" in text or os.path.isabs(text)
    if not bad:
        parts = os.path.normpath(text).split(os.sep)
        bad = parts[0] in (os.pardir, os.curdir)
    if bad:
        raise EscapingName(
            "%s names %r, which is not inside %s: not followed" % (named_by, text, directory)
        )
    return os.path.join(directory, text)


def load_json(src, what):
    """The JSON document in ``src`` (an open file, or text or bytes already read). ValueError
    when it is not JSON; TooDeep (a ValueError too) naming ``what`` when it nests deeper than
    the parser can follow (the interpreter's recursion limit), instead of RecursionError."""
    try:
        return json.loads(src.read() if hasattr(src, "read") else src)
    except RecursionError:
        raise TooDeep(
            "%s is nested deeper than %d levels: not read" % (what, sys.getrecursionlimit())
        ) from None
