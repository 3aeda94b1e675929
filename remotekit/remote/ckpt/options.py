"""The checkpoint commands' options, declared once: one frozen dataclass a command, both
sides import them.

:class:`CkptOptions` holds how every command loads files (``allow_globals``,
``unsafe_pickle``) and what bounds its work (``max_bad``, ``chunk_elems``); each command's
class adds its own fields: :class:`ScanOptions`, :class:`InspectOptions`,
:class:`DiffOptions`, :class:`BisectOptions`, and :class:`WorkerOptions` (the ``_worker``
process the scan starts). One class a command, rather than one class with every field,
because each command's options are then exactly its fields: a record for ``inspect``
cannot carry a ``jobs``, each path has the help of its command, and the pipeline reads
``options.path`` with no "which command is this" in between.

*Here*, the API functions of :mod:`remotekit.diagnostics.checkpoints` map their keywords onto
these (a keyword is a field's name) and the ``ckpt-*`` tasks take their flags' help from the
fields (a test holds every field to a flag and a keyword, or to the reason it has none);
*there*, ``ckpt.py`` reads them back (:func:`from_argv`) and the commands take their values.
They cross as ``COMMAND OPERAND... --options JSON`` (:meth:`CkptOptions.argv`: the fields
that differ from their defaults, which are this module's on both sides). ``ckpt.py scan
PATH --jobs 4 ...`` by hand parses flags made from the same fields (:func:`parser`).

Adding an option is one field here, its help and check included (and, when the task or the
API takes it, its parameter there: the test says which is missing). Safety stays strict:
``unsafe_pickle`` is True only when given as true (never from text such as ``"false"``),
and the ``allow_globals`` names are imported there before any work, as before.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, fields

from .. import options as generic
from ..options import Options, add_flags, option

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _Options = TypeVar("_Options", bound="CkptOptions")

DEFAULT_CHUNK = 1 << 22  # elements per checked chunk: 16 MiB of float32
MAX_JOBS = 1024  # threads of one worker: more only costs memory and switches
MAX_COUNT = (1 << 31) - 1  # any other count

# ------------------------------------------------------------------------- values, checked


def _shown(value, most=80):
    """``value`` as a refusal shows it: its repr, clipped (it may be text from far away)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _path(value):
    if hasattr(value, "__fspath__"):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError("a path is needed, not %s" % _shown(value))
    if "\0" in value:
        raise ValueError("a NUL character in %s" % _shown(value))
    return value


def _whole(low, high=MAX_COUNT):
    """A whole number (or its text) up to ``high``; one below ``low`` counts as ``low``."""

    def parse(value):
        n = value
        if isinstance(value, str) and re.match(r"^\s*[-+]?\d{1,19}\s*$", value):
            n = int(value)
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError("not a whole number: %s" % _shown(value))
        if n > high:
            raise ValueError("%d is more than %d" % (n, high))
        return max(low, n)

    return parse


def _switch(value):
    """True or False as such: a security switch is never read out of text ("false")."""
    if value is True or value is False:
        return value
    raise ValueError("true or false, not %s" % _shown(value))


def _names(value):
    """Names of globals: one given bare (not its characters), or a list of them."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError("a name or a list of names, not %s" % _shown(value))
    for name in value:
        if not isinstance(name, str) or not name.strip() or "\0" in name:
            raise ValueError("not a global's name: %s" % _shown(name))
    return tuple(name.strip() for name in value)


def _jobs():
    return option(1, "files scanned in parallel there", _whole(1, MAX_JOBS), task="jobs")


# ------------------------------------------------------------------------------- the options


@dataclass(frozen=True)
class CkptOptions(Options):
    """How every checkpoint command loads files, and what bounds its work; the command's
    class adds its own fields. Built with loose values (``allow_globals="a.B"``): each
    field's parse makes them the declared types, or raises ValueError naming the option.
    Built by keyword (its subclasses' operands come after these fields), or by
    :meth:`of`."""

    WHAT = "checkpoint"
    COMMAND = ""  # the subcommand of ckpt.py
    HELP = ""  # its line in ckpt.py's help (none: not listed)
    OPERANDS = ()  # type: tuple[str, ...]  # the fields ckpt.py takes as positional arguments

    allow_globals: tuple[str, ...] = option(
        (),
        "a global a checkpoint may use under weights_only (module.Name; repeatable)",
        _names,
        task="allow_global",
        flags=("--allow-global",),
        metavar="NAME",
    )
    unsafe_pickle: bool = option(
        False,
        "load with weights_only=False: RUNS ARBITRARY CODE from the file; only for files you trust",
        _switch,
        task="unsafe_pickle",
    )
    max_bad: int = option(
        20,
        "bad tensors listed per checkpoint",
        _whole(0),
        why_not="the reports' own bound: the text shows the first few, --json all 20",
    )
    chunk_elems: int = option(
        DEFAULT_CHUNK,
        "values checked at a time (tests make it small to cross chunk boundaries)",
        _whole(1),
        why_not="how the check is cut, not what it finds: ckpt.py's by hand and the tests'",
    )

    @classmethod
    def of(cls: type[_Options], *operands: Any, **given: Any) -> _Options:
        """The options from the command's operands (``path``; ``a, b`` for diff) and
        keywords given loosely (the API's); an unknown keyword is a TypeError, a bad value
        a ValueError naming it."""
        if len(operands) != len(cls.OPERANDS):
            raise TypeError("%s takes %s" % (cls.COMMAND, ", ".join(cls.OPERANDS) or "no operand"))
        return cls(**dict(zip(cls.OPERANDS, operands)), **given)

    def argv(self) -> list[str]:
        """``ckpt.py``'s arguments for these options: the command, its operands, then
        ``--options`` and the record of the fields that differ from the defaults."""
        rest = self.to_dict(changed=True)
        operands = [getattr(self, name) for name in self.OPERANDS]
        for name in self.OPERANDS:
            rest.pop(name, None)
        record = json.dumps(rest, separators=(",", ":"), allow_nan=False)
        return [self.COMMAND, *operands, "--options", record]

    def worker(self, jobs: int, threads: int) -> WorkerOptions:
        """The options of the ``_worker`` that checks files for these: how to load them,
        ``jobs`` at a time, each on ``threads`` torch threads."""
        loading = {f.name: getattr(self, f.name) for f in fields(CkptOptions)}
        return WorkerOptions(jobs=jobs, threads=threads, **loading)


@dataclass(frozen=True)
class ScanOptions(CkptOptions):
    """``ckpt.py scan``: check every checkpoint at ``path`` for non-finite values."""

    COMMAND = "scan"
    HELP = "check checkpoints for non-finite values"
    OPERANDS = ("path",)

    path: str = option(
        "",
        "a checkpoint file, a directory (searched recursively) or a glob (default: the host's "
        "`checkpoints:`)",
        _path,
        task="path",
    )
    jobs: int = _jobs()


@dataclass(frozen=True)
class InspectOptions(CkptOptions):
    """``ckpt.py inspect``: one checkpoint's structure, no tensor data read."""

    COMMAND = "inspect"
    HELP = "keys, dtypes, shapes; no tensor data read"
    OPERANDS = ("path",)

    path: str = option(
        "",
        "a checkpoint file, an HF *.index.json, a checkpoint directory (HF checkpoint-N/, "
        "DeepSpeed global_stepN/, DCP) or a zip of torch files (stable-baselines3's save)",
        _path,
        task="path",
    )
    resume: bool = option(
        False,
        "a resume from it would lose state (optimizer moments missing, scheduler at another "
        "step, no scaler for fp16) is a finding: exit 1",
        _switch,
        task="resume",
    )


@dataclass(frozen=True)
class DiffOptions(CkptOptions):
    """``ckpt.py diff``: checkpoint ``b`` compared with ``a``, tensor by tensor."""

    COMMAND = "diff"
    HELP = "compare two checkpoints tensor by tensor"
    OPERANDS = ("a", "b")

    a: str = option(
        "", "the earlier checkpoint (a file or a checkpoint directory)", _path, task="a"
    )
    b: str = option("", "the later checkpoint (a file or a checkpoint directory)", _path, task="b")
    top: int = option(10, "tensors listed by relative change", _whole(1), task="top")


@dataclass(frozen=True)
class BisectOptions(CkptOptions):
    """``ckpt.py bisect``: the last clean and the first bad checkpoint under ``directory``."""

    COMMAND = "bisect"
    HELP = "find the first bad checkpoint in a directory"
    OPERANDS = ("directory",)

    directory: str = option(
        "", "a directory of checkpoints (default: the host's `checkpoints:`)", _path, task="path"
    )
    linear: bool = option(
        False, "check every checkpoint instead of a binary search", _switch, task="linear"
    )
    jobs: int = _jobs()


@dataclass(frozen=True)
class WorkerOptions(CkptOptions):
    """``ckpt.py _worker``: the process scan and bisect start to check files (items on its
    stdin); made by :meth:`CkptOptions.worker`, never by a person."""

    COMMAND = "_worker"

    jobs: int = option(
        1,
        "files checked at a time, a thread each",
        _whole(1, MAX_JOBS),
        why_not="the scan's: it starts the worker with its own --jobs",
    )
    threads: int = option(
        1,
        "torch threads of each file's check",
        _whole(1),  # the CPUs there: not bounded by MAX_JOBS on a machine with more
        why_not="the scan's: the CPUs there shared among the jobs",
    )


#: ckpt.py's subcommands, in its help's order.
COMMANDS = {
    cls.COMMAND: cls
    for cls in (ScanOptions, InspectOptions, DiffOptions, BisectOptions, WorkerOptions)
}


# ------------------------------------------------------------------------ the command line


def _parsers(description=""):
    ap = argparse.ArgumentParser(prog="ckpt.py", description=description)
    sub = ap.add_subparsers(dest="command")
    parsers = {}
    for name, cls in COMMANDS.items():
        s = sub.add_parser(name, **({"help": cls.HELP} if cls.HELP else {}))
        for operand in cls.OPERANDS:
            s.add_argument(operand, help=cls.__dataclass_fields__[operand].metadata["help"])
        parsers[name] = add_flags(s, cls, skip=cls.OPERANDS)
    return ap, parsers


def parser(description: str = "") -> argparse.ArgumentParser:
    """``ckpt.py``'s command line, made from the fields: a subcommand a class, its operands,
    a flag a field (with the field's help; a repeatable one for a tuple) and ``--options
    JSON``. A flag not given leaves its field to ``--options`` or the default."""
    return _parsers(description)[0]


def from_argv(argv: list[str] | None = None, description: str = "") -> CkptOptions | None:
    """The options of ``ckpt.py``'s command line (:func:`parser`): the command's class made
    from ``--options``' record with the operands and flags given on top; None when no
    command is given. A bad record or value ends it as a usage error naming it."""
    ap, parsers = _parsers(description)
    given = vars(ap.parse_args(argv))
    command = given.pop("command", None)
    if command is None:
        return None
    return COMMANDS[command].from_command_line(given, parsers[command])


def task_help(cls: type = CkptOptions) -> dict[str, str]:
    """The help of the ``ckpt-*`` task's flags that set an option of ``cls``: for
    :class:`CkptOptions` those every task takes, for a command's class its own."""
    return generic.task_help(cls, own=cls is not CkptOptions)
