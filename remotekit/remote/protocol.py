"""The record protocol of remotekit's diagnostics, written once and imported by both sides.

Shipped *there* in the package every diagnostic runs from (:mod:`remotekit.shipping`), and
imported *here* as :mod:`remotekit.remote.protocol` by the local halves. Standard library
only, Python >= 3.8, no state but an output lock.

The format: one JSON object per stdout line, flushed as it is made, each with a ``"type"``::

    {"type": "<kind>", ...}                       a script's own records (plan, gpu, ...)
    {"type": "warning", "message": ..., ...}      a finding (exit 1)
    {"type": "error", "message": ..., ...}        the command could not (fully) run (exit 2)
    {"type": "note", "message": ..., ...}         context, not a problem
    {"type": "done", "command": ..., "exit_code": 0|1|2, ...}   the ONE final record

Every command ends with exactly one ``done`` record; a run without it stopped early
(crashed, killed) and the local side says so, naming host and step. Floats JSON cannot hold
travel as the strings ``"nan"``, ``"inf"``, ``"-inf"`` (:func:`encode` / :func:`number`).
Anything that may hold a credential (a command line, a string from a checkpoint) passes
:func:`mask` or :func:`mask_argv` before it leaves the host: one set of patterns for all.
"""

from __future__ import annotations

import _thread  # its Lock without threading's import (~0.5 ms of a fresh step)
import json
import math
import os
import re
import sys

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EXIT_OK, EXIT_FINDINGS, EXIT_FAILED = 0, 1, 2
FINAL = "done"  # the type of the one last record of every command

# ------------------------------------------------------------------------------- numbers


def encode(value):
    """``value`` with every non-finite float (also inside dicts and lists) as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): encode(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(x) for x in value]
    return value


_NONFINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


def number(value: object) -> int | float | None:
    """A number from a record field: an int or float as is, ``"nan"``/``"inf"``/``"-inf"`` as
    the float, anything else (None, bool, other text) as None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return _NONFINITE.get(value.strip().lower())
    return None


# ------------------------------------------------------------------------------- records


def dumps(record):
    """One record as its JSON line (no newline): compact, non-finite floats encoded."""
    return json.dumps(encode(record), separators=(",", ":"), allow_nan=False, default=str)


def parse(line: str) -> dict[str, Any] | None:
    """The record on ``line``, or None when the line is not one (any other output)."""
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and "type" in rec else None


_OUT_LOCK = _thread.allocate_lock()


def emit_line(line):
    """Write one ready JSON line and flush (thread-safe). A reader that went away leaves
    nobody to tell: the process ends with exit 2 at once."""
    with _OUT_LOCK:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            os._exit(EXIT_FAILED)


def flush():
    """Flush stdout once every record being written is out (before an ``os._exit``)."""
    with _OUT_LOCK:
        sys.stdout.flush()


def emit(record):
    """Write one record (a dict with ``"type"``) as a JSON line and flush (thread-safe)."""
    emit_line(dumps(record))


def exit_code_for(warnings, errors):
    """The exit code of a command that wrote ``warnings`` findings and ``errors`` errors."""
    return EXIT_FAILED if errors else EXIT_FINDINGS if warnings else EXIT_OK


class Out(object):
    """A command's writer: its records, counted warnings and errors, and its final record.

    >>> out = Out("gpu"); out.warning("hot", "GPU 0 at 91 C"); code = out.done()
    """

    def __init__(self, command):
        self.command = command
        self.warnings = 0
        self.errors = 0
        self.finished = False

    def emit(self, type_, **fields):
        rec = {"type": type_}
        rec.update(fields)
        emit(rec)

    def warning(self, code, message, **fields):
        self.warnings += 1
        self.emit("warning", code=code, message=message, **fields)

    def error(self, code, message, **fields):
        self.errors += 1
        self.emit("error", code=code, message=message, **fields)

    def note(self, code, message, **fields):
        self.emit("note", code=code, message=message, **fields)

    def done(self, exit_code=None, **fields):
        """Write the one final record and return its exit code (from the counts unless given)."""
        if exit_code is None:
            exit_code = exit_code_for(self.warnings, self.errors)
        self.finished = True
        fields.setdefault("warnings", self.warnings)
        fields.setdefault("errors", self.errors)
        return finish(self.command, exit_code, **fields)


def finish(command, exit_code, **fields):
    """Write the one final record of ``command`` and return ``exit_code``."""
    rec = {"type": FINAL, "command": command, "exit_code": exit_code}
    rec.update(fields)
    emit(rec)
    return exit_code


def fail(command, message, **fields):
    """A command that cannot run at all: one ``error`` record, then ``done`` with exit 2."""
    emit({"type": "error", "message": message})
    return finish(command, EXIT_FAILED, **fields)


# ------------------------------------------------------------------------------- secrets

SECRET_WORDS = r"pass(?:word|wd)?|secret|token|api[-_]?key|credential|auth"
# Patterns, compiled where first used (re keeps them): most steps never mask anything.
SECRET_NAME_RE = "(?i)" + SECRET_WORDS  # a key / option / variable name
_ASSIGN_RE = (
    r"(?i)([\w.-]*(?:%s|signature)[\w.-]*\s*[=:]\s*)[^\s&,;]+" % SECRET_WORDS
)  # token=..., "password: ..." inside free text
_URL_QUERY_RE = r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#]+)\?[^\s]+"


def is_secret_name(name):
    """True when a key, option or variable ``name`` looks like it holds a credential."""
    return bool(re.search(SECRET_NAME_RE, str(name)))


def mask(text):
    """``text`` with URL query strings and ``token=...``-style values replaced by ``***``."""
    return re.sub(_ASSIGN_RE, r"\1***", re.sub(_URL_QUERY_RE, r"\1?***", text))


def mask_argv(argv):
    """``argv`` with the values of secret-looking options (``--token x``, ``--token=x``) and
    assignments (``PASSWORD=x``) replaced by ``***``; URL query strings masked too."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        key, eq, _ = arg.partition("=")
        if eq and is_secret_name(key):
            out.append(key + "=***")
        else:
            out.append(re.sub(_URL_QUERY_RE, r"\1?***", arg))
            hide_next = arg.startswith("-") and not eq and is_secret_name(arg)
    return out
