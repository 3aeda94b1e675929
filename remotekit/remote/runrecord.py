"""A run's record and its checks, written once and imported by both sides.

Shipped *there* beside the supervisor (``supervisor.py`` keeps the records, their format is in
its docstring), and imported *here* as :mod:`remotekit.remote.runrecord` by
:mod:`remotekit.runs`, which reads the ``run`` records the supervisor sends. Standard library
only, Python >= 3.8, no I/O: the supervisor reads the files, this module judges what they hold.

A record's files are the supervisor's, but whoever has the user's rights there can write them
too (by hand, a bug, a disk that filled mid-way, a far side that is not what it seems). So each
one is checked on its own before anything is taken from it: its size (:data:`MAX_BYTES`), its
JSON, every field's type and bounds. One that fails is **corrupt**: listed as such, with what
is wrong; its pids are never signalled and its paths never followed.
"""

from __future__ import annotations

import json
import re

# typing only for the checker: importing it costs the supervisor's steps time there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

    Check = Sequence[tuple[str, Callable[[object], bool], str, bool]]

#: A run's id: what ``new_id`` makes, and all that a folder, an argument or a record may name.
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
#: The logs a run keeps: ``output`` (both, interleaved), ``stdout``, ``stderr``.
STREAMS = ("output", "stdout", "stderr")
#: What a run can be, as the supervisor says; ``corrupt``: its record failed its check.
STATES = ("running", "exited", "stopped", "lost")
CORRUPT = "corrupt"
#: A record file is a few hundred bytes; one larger than this is not read, and is corrupt.
MAX_BYTES = 64 << 10
#: Linux's highest pid (``pid_max`` cannot be set above it).
PID_MAX = 1 << 22
#: Unix times from 1970 to the year 5138: anything else is not a time a run was at.
TIME_MAX = 1e11


def is_id(value: object) -> bool:
    """Whether ``value`` is a run id (text of 1 to 64 letters, digits, ``_`` or ``-``)."""
    return isinstance(value, str) and ID_RE.match(value) is not None


def _int(low: int, high: int) -> Callable[[object], bool]:
    return lambda v: type(v) is int and low <= v <= high


def _time(v: object) -> bool:
    return type(v) in (int, float) and 0 <= v < TIME_MAX  # type: ignore[operator]


def _text(v: object) -> bool:
    return isinstance(v, str)


def _words(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(w, str) for w in v)


def _process(v: object) -> bool:
    return isinstance(v, dict) and _pid(v.get("pid")) and _ticks(v.get("start"))


def _batch(v: object) -> bool:
    return isinstance(v, dict) and all(_text(x) or _words(x) for x in v.values())


def _losses(v: object) -> bool:
    return isinstance(v, dict) and all(k in STREAMS and _count(n) for k, n in v.items())


_pid = _int(2, PID_MAX)  # 0, 1 and negative pids signal groups, init, everyone: never a run's
_ticks = _int(0, (1 << 63) - 1)
_count = _int(0, (1 << 63) - 1)
_code = _int(-(1 << 31), (1 << 31) - 1)

# (key, check, what it must be, may it be missing or null)
#: run.json: what the supervisor records before it starts the command (``pid`` once started).
RUN: Check = (
    ("id", is_id, "a run id", False),
    ("host", _text, "text", False),
    ("command", _words, "a list of words", False),
    ("cwd", _text, "text", False),
    ("started", _time, "a Unix time", False),
    ("supervisor", _process, "a process (its pid > 1 and start time)", False),
    ("pid", _pid, "a pid > 1", True),
    # null with a pid: the command ended before its start time was read (older supervisors
    # recorded it so); such a pid is never signalled (supervisor.is_it wants the start)
    ("pid_start", _ticks, "a process start time", True),
    ("dir", _text, "text", True),
    ("job", is_id, "a batch job's id", True),
    ("batch", _batch, "a batch hop's tools", True),
)
#: exit.json: how it ended (``code`` None for a lost run stopped by hand).
END: Check = (
    ("reason", lambda v: v in ("exit", "stopped"), "exit or stopped", False),
    ("code", _code, "an exit code", True),
    ("ended", _time, "a Unix time", False),
    ("stopped", _words, "a list of processes", True),
    ("lost", lambda v: isinstance(v, bool), "true or false", True),
    ("lost_bytes", _losses, "bytes lost per log", True),
)
#: loss.json: bytes of each log that could not be written (a full disk).
LOSS: Check = tuple((s, _count, "a byte count", True) for s in STREAMS)
#: A ``run`` record as it travels (run.json's fields that leave the host, and the state).
INFO: Check = (
    ("id", is_id, "a run id", False),
    ("host", _text, "text", True),
    ("state", lambda v: v in STATES, "a run's state", False),
    ("exit_code", _code, "an exit code", True),
    ("started", _time, "a Unix time", False),
    ("ended", _time, "a Unix time", True),
    ("command", _words, "a list of words", False),
    ("log", _text, "text", False),
    ("pid", _pid, "a pid > 1", True),
    ("job", is_id, "a batch job's id", True),
    ("lost_bytes", _losses, "bytes lost per log", True),
)


def problem(record: object, fields: Check) -> str | None:
    """What is wrong with ``record`` against ``fields`` (the first thing found), or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key, check, what, optional in fields:
        value = record.get(key)
        if value is None:
            if not optional:
                return "%s is missing" % key
        elif not check(value):
            return "%s is not %s" % (key, what)
    return None


def parse(data: bytes, fields: Check, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)`` from the bytes of the record file ``name``, or ``(None, why)``: too
    large (``data`` holds at most :data:`MAX_BYTES` + 1 bytes), not JSON, or a field wrong."""
    if len(data) > MAX_BYTES:
        return None, "%s is larger than %d KiB" % (name, MAX_BYTES >> 10)
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past the stack
        return None, "%s is not JSON" % name
    why = problem(record, fields)
    if why is not None:
        return None, "%s: %s" % (name, why)
    return record, None
