"""A diagnostic's options, declared once: the machinery its options dataclass is built on.

A diagnostic's options are one frozen dataclass that both sides import (train-log's in
``trainlog/options.py``, the checkpoint commands' in ``ckpt/options.py``). Each field is an
:func:`option`: its default, its help (the task's flag and the script's), how a value given
loosely (a flag's text, a list for a tuple, a keyword of the API) becomes the field's value
and what is refused (``parse``: raises ValueError or TypeError). :class:`Options` applies
every field's parse in the constructor, so each way in (keywords, the JSON record, flags by
hand) is checked alike and a refusal names its option (:meth:`Options.names_option`: how a
class's messages name it). The options cross as one JSON record (:meth:`Options.to_dict`),
read back there by :func:`read_record` (bounded: it is text from the other side) and
:meth:`Options.from_dict` (an unknown key is refused); :func:`add_flags` gives a script's
parser a flag per field for use by hand, and :meth:`Options.from_command_line` reads that
command line back.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import MISSING, field, fields

from .protocol import encode

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    pass

#: The longest ``--options`` record read (characters): what the local side sends is well
#: under 1 KiB; one argument of a command line is at most 128 KiB on Linux anyway.
MAX_RECORD = 64 * 1024


def option(default, help, parse, task=None, why_not=None, flags=(), choices=None, metavar=None):
    """A field of an options dataclass: its ``default`` (``MISSING``: none), its ``help``,
    ``parse`` (a loose value -> the field's; raises ValueError or TypeError). ``task``: the
    parameter of the task that sets it, or ``why_not``: why no task (nor API keyword) takes
    it. ``flags``: the script's own, when not ``--name``; ``choices``: a callable listing the
    values its help names; ``metavar``: the flag's value as its help shows it."""
    meta = {"help": help, "parse": parse, "task": task, "why_not": why_not}
    meta.update(flags=tuple(flags), choices=choices, metavar=metavar)
    return field(default=default, metadata=meta)


class Options(object):
    """What an options dataclass (``@dataclass(frozen=True)``, fields made by :func:`option`)
    inherits: each field parsed in the constructor, and the record it crosses as."""

    #: How a refused record names these options ("unknown train-log option(s): ...").
    WHAT = "diagnostic"

    def __post_init__(self):
        for f in fields(self):
            try:
                value = f.metadata["parse"](getattr(self, f.name))
            except (TypeError, ValueError) as exc:
                what = str(exc)
                if not self.names_option(f.name, what):
                    what = "%s: %s" % (f.name, what)
                raise ValueError(what) from None
            object.__setattr__(self, f.name, value)

    @staticmethod
    def names_option(name, message):
        """Whether ``message``, a parse's refusal of option ``name``, names it already; if
        not, it is shown as ``name: message``. Here: it starts with ``name`` (or ``unknown
        name``); a class whose messages name their option otherwise says so by its own."""
        return re.match(r"(unknown )?%s\b" % re.escape(name), message) is not None

    def to_dict(self, changed=False):
        """The fields as JSON values (tuples as lists, non-finite floats as the protocol's
        strings); ``changed``: only those that differ from their defaults."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if not changed or f.default is MISSING or value != f.default:
                out[f.name] = encode(list(value) if isinstance(value, tuple) else value)
        return out

    @classmethod
    def from_dict(cls, record):
        """The options from their record (:meth:`to_dict`); not a JSON object, an unknown
        key or a bad value is a ValueError naming it."""
        if not isinstance(record, dict):
            raise ValueError("the %s options are a JSON object, not %s" % (cls.WHAT, _kind(record)))
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in set(record) - known)
        if unknown:
            raise ValueError("unknown %s option(s): %s" % (cls.WHAT, ", ".join(unknown)[:200]))
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in record]
        if missing:
            raise ValueError("missing %s option(s): %s" % (cls.WHAT, ", ".join(missing)))
        return cls(**record)

    @classmethod
    def from_command_line(cls, given, ap):
        """The options of a parsed command line, ``given`` (its namespace as a dict): the
        ``--options`` record (:func:`read_record`) with the flags given on top; a bad record
        or value ends it as a usage error of ``ap``, the parser that named the flags."""
        try:
            record = read_record(given.pop("options", None))
            record.update(given)
            return cls.from_dict(record)
        except ValueError as exc:
            ap.error(str(exc))
            raise  # not reached: error() exits


def read_record(text):
    """The JSON object ``--options`` gives (``{}`` for None): text from the other side, so
    its size and nesting are bounded; ValueError naming ``--options`` otherwise."""
    if text is None:
        return {}
    if len(text) > MAX_RECORD:
        raise ValueError("--options: %d characters, more than %d" % (len(text), MAX_RECORD))
    try:
        record = json.loads(text)
    except RecursionError:
        raise ValueError("--options: nested too deeply") from None
    except ValueError as exc:
        raise ValueError("--options: not JSON (%s)" % exc) from None
    if not isinstance(record, dict):
        raise ValueError("--options takes a JSON object, not %s" % _kind(record))
    return record


def _kind(value):
    return "null" if value is None else type(value).__name__


def add_flags(ap, cls, skip=()):
    """To parser ``ap``: ``--options JSON``, then a flag per field of ``cls`` but ``skip``
    (with the field's help and choices; a repeatable one for a tuple, a switch for a False
    default). A flag not given leaves its field to ``--options`` or the default."""
    ap.add_argument(
        "--options",
        default=None,
        metavar="JSON",
        help="the options as one JSON object (what the local side sends); flags go on top",
    )
    for f in fields(cls):
        if f.name in skip:
            continue
        meta = f.metadata
        names = list(meta["flags"]) or ["--" + f.name.replace("_", "-")]
        kw = {"dest": f.name, "default": argparse.SUPPRESS, "help": meta["help"]}
        if meta["choices"] is not None:
            kw["choices"] = meta["choices"]()
        if meta["metavar"] is not None:
            kw["metavar"] = meta["metavar"]
        if f.default is False:
            kw["action"] = "store_true"
        elif isinstance(f.default, tuple):
            kw["action"] = "append"
        ap.add_argument(*names, **kw)
    return ap


def task_help(cls, own=False):
    """The task's help for the flags that set an option of ``cls``: the fields' help.
    ``own``: only the fields ``cls`` declares itself, not those it inherits."""
    mine = vars(cls).get("__annotations__", {}) if own else None
    return {
        f.metadata["task"]: f.metadata["help"]
        for f in fields(cls)
        if f.metadata["task"] and (mine is None or f.name in mine)
    }
