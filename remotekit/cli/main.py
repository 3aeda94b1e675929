"""The installed ``remotekit`` command (and ``python -m remotekit``): invoke's ``Program``
over the package's task collection, so it works from any directory, with ``--list``,
``--help TASK``, ``--version`` and ``--print-completion-script bash|zsh|fish``.

What it shows is what it does: the core options are only those that mean something for
remotekit (invoke's ``--dry``, ``--command-timeout``, ``--pty``, ``--warn-only``, ... change
invoke's own ``c.run``, which no task calls, so they are not offered). A usage error exits 2
with a "did you mean" for task and option names; a pipe closed early ends quietly; shell
completion completes host and group names after ``--host`` / ``--group`` (``--host=NAME``
too, and the last name of a comma list).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import shlex
import sys
from typing import Any

from invoke import Argument, Collection, Exit, ParseError, ParserContext, Program

import remotekit
from remotekit import __version__
from remotekit.cli import ns
from remotekit.cli.selection import AFTER_DASHES, words_after_dashes

#: invoke's core options that remotekit offers (its ``core_args`` names).
CORE_OPTIONS = ("complete", "help", "list", "list-format", "print-completion-script", "version")
#: Options invoke's ``Program`` itself reads but remotekit does not offer: their defaults.
UNOFFERED_DEFAULTS: dict[str, Any] = {
    "command-timeout": None,
    "config": None,
    "debug": False,
    "dry": False,
    "echo": False,
    "hide": None,
    "list-depth": 0,
    "prompt-for-sudo-password": False,
    "pty": False,
    "warn-only": False,
    "write-pyc": False,
}
UNKNOWN = re.compile(r"No idea what '(.*)' is!")


class RemotekitProgram(Program):
    """invoke's ``Program`` with remotekit's options only and usage errors that exit 2."""

    def core_args(self) -> list[Argument]:
        return [a for a in super().core_args() if a.name in CORE_OPTIONS]

    def normalize_argv(self, argv: list[str] | None) -> None:
        super().normalize_argv(argv)
        self.argv = self._old_names(self._help_as_a_flag(list(self.argv)))

    def _old_names(self, argv: list[str]) -> list[str]:
        """Each old option name of :data:`OLD_NAMES` typed after its task, as its new name
        (``--path=X`` too), with a note saying the new one; not after ``--``."""
        end = argv.index("--") if "--" in argv else len(argv)
        tasks = {n: n for n in self._tasks()}
        tasks.update({a: n for n, aliases in self._tasks().items() for a in aliases})
        out, renames, said = list(argv), {}, set()
        for i in range(1, end):
            if argv[i] in tasks:
                task = tasks[argv[i]]
                renames = OLD_NAMES.get(task, {})
                continue
            flag, eq, value = argv[i].partition("=")
            if (new := renames.get(flag)) is None:
                continue
            out[i] = new + eq + value
            if (task, flag) not in said:
                said.add((task, flag))
                print(
                    f"remotekit: {task} {flag} is {new} now (one name per meaning across the "
                    f"tasks); {flag} goes after this release",
                    file=sys.stderr,
                    flush=True,
                )
        return out

    def _help_as_a_flag(self, argv: list[str]) -> list[str]:
        """``TASK ... --help`` (or ``-h`` last) as invoke's ``--help TASK``: invoke reads a
        ``--help`` that comes where the task still lacks a positional argument as that
        argument (``py --help`` read a file named --help, ``sync --help`` wanted its dest).
        Not after ``--`` (the command's own words), nor as the value of the option before it
        (``--args --help``)."""
        end = argv.index("--") if "--" in argv else len(argv)
        names = self._tasks()
        tasks = {*names, *(a for aliases in names.values() for a in aliases)}
        at = next((i for i, w in enumerate(argv[1:end], 1) if w in tasks), None)
        if at is None:
            return argv
        context = None  # the task's parser context, built only if a help flag is there
        for i in range(at + 1, end):
            if argv[i] != "--help" and (argv[i] != "-h" or i + 1 < end):
                continue  # -h NAME: the old --host, which _short_flag explains
            context = context or self._task_context(argv[at])
            before = context.flags.get(argv[i - 1]) if context is not None else None
            if before is not None and before.kind is not bool:
                continue  # the value of an option: --args --help
            return [*argv[:at], "--help", argv[at]]
        return argv

    def _task_context(self, name: str) -> ParserContext | None:
        """The parser context of task ``name`` (or of the task it is an alias of), from a
        copy: building a task's parser context consumes its help texts."""
        contexts = copy.deepcopy(self._collection()).to_contexts()
        return next((c for c in contexts if name == c.name or name in c.aliases), None)

    def parse_core_args(self) -> None:
        self._usage(super().parse_core_args)
        for name, default in UNOFFERED_DEFAULTS.items():
            self.core[0].args[name] = Argument(name=name, default=default)

    def parse_tasks(self) -> None:
        self._usage(super().parse_tasks)

    def parse_cleanup(self) -> None:
        if self.args.complete.value:
            names = target_names(self.core.remainder)
            if names is not None:  # after --host / --group: the names hosts.yaml declares
                print("\n".join(names))
                raise Exit
        self._usage(super().parse_cleanup)

    def update_config(self, merge: bool = True) -> None:
        super().update_config(merge)
        section, key = AFTER_DASHES
        self.config.update({section: {key: words_after_dashes(self.argv)}})

    def _usage(self, parse: Any) -> None:
        """``parse()``; its parse error (or a flag value of the wrong kind) ends with exit 2."""
        try:
            parse()
        except ParseError as exc:
            raise Exit(f"remotekit: {exc}{self._did_you_mean(exc)}", code=2) from None
        except ValueError as exc:  # int("x") for an INT flag
            raise Exit(f"remotekit: {exc}", code=2) from None

    def _did_you_mean(self, exc: ParseError) -> str:
        """ " (did you mean ...?)" for an unknown task or option name, or the long flag for a
        short one typed from habit (:meth:`_short_flag`); else ""."""
        found = UNKNOWN.search(str(exc))
        if found is None:
            return ""
        word = found.group(1)
        if habit := self._short_flag(word, exc.context):
            return f" ({habit})"
        if word.startswith("-"):
            names = list(self.initial_context.flags)
            if exc.context is not None:
                names += list(exc.context.flags) + list(exc.context.inverse_flags)
        else:
            names = [*self._tasks(), *(a for aliases in self._tasks().values() for a in aliases)]
        close = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
        return f" (did you mean {' or '.join(close)}?)" if close else ""

    def _collection(self) -> Collection:
        return getattr(self, "collection", None) or self.namespace or Collection()

    def _tasks(self) -> dict[str, list[str]]:
        return self._collection().task_names

    def _short_flag(self, word: str, context: ParserContext | None) -> str:
        """What to type instead of a short flag from before the tasks' automatic ones were
        dropped (``-h HOST``, ``-i FILE``, ``-g GROUP`` ...), else "". ``-h`` is --help now,
        so ``ping -h gpu1`` reads gpu1 as a task name: ``word`` is then that name."""
        pairs = zip(self.argv, self.argv[1:])
        if not word.startswith("-") and ("-h", word) in pairs:
            return f"-h is --help, not --host any more: use --host {word}"
        if not re.fullmatch(r"-[a-zA-Z]", word):
            return ""
        after = ""
        if context is None or not context.name:  # before the task: the task named after it
            named = [w for w in self.argv[self.argv.index(word) :] if w in self._tasks()]
            context, after = (
                (self._task_context(named[0]), " after the task name") if named else (None, "")
            )
        if context is None:
            return ""
        flags = list(context.flags.values())
        usages = dict.fromkeys(
            [
                *(_usage(a) for a in flags if str(a.name).startswith(word[1])),
                *(_usage(a) for a in flags if a.name in HABITS.get(word, ())),
            ]
        )
        if not usages:
            return ""
        return f"{word} is no short flag of {context.name}: use {' or '.join(usages)}{after}"


#: Short flags from other tools' habits, and the options they mean here (beside the options
#: that start with the letter): Fabric's ``-H HOST`` (``fab -H a,b task``) is --host, and
#: its ``-e`` (echo each command) is --verbose; docker's and kubectl's ``-e K=V`` is --env,
#: which the letter finds.
HABITS = {"-H": ("host",), "-e": ("verbose",)}


#: Option names given up for one name per meaning across the tasks (a log is ``--log``, a
#: folder of checkpoints ``--checkpoints``, one checkpoint ``--checkpoint``, a training
#: run's folder ``--run-dir``; ``--run`` is a run's id, ``--path`` disk's path), by task: for
#: this release the old name still works, with a note; --help and the docs show the new one.
OLD_NAMES = {
    "train-log": {"--path": "--log", "--ckpt-dir": "--checkpoints"},
    "diagnose": {"--path": "--checkpoints", "--run": "--run-dir"},
    "ckpt-scan": {"--path": "--checkpoints"},
    "ckpt-inspect": {"--path": "--checkpoint"},
    "ckpt-bisect": {"--path": "--checkpoints"},
}


#: How :func:`_usage` shows a flag's value, where its name upper-cased would not read well.
VALUE_NAMES = {"inventory": "FILE", "env": "NAME=VALUE", "workdir": "DIR"}


def _usage(arg: Argument) -> str:
    """``--jobs N``, ``--inventory FILE``, ``--all``: how a flag is typed."""
    name = str(arg.name)
    flag = f"--{name.replace('_', '-')}"
    if arg.kind is bool:
        return flag
    if arg.kind in (int, float):
        return f"{flag} N"
    return f"{flag} {VALUE_NAMES.get(name, name.upper().replace('-', '_'))}"


#: The options whose value is a name from hosts.yaml, and the names each completes to.
NAME_OPTIONS = {"--host": "hosts", "--group": "groups"}


def target_names(invocation: str) -> list[str] | None:
    """Completion candidates when ``invocation`` (the words typed so far) ends where a
    ``--host`` or ``--group`` value goes: the inventory's host or group names that start with
    the part typed (``--inventory FILE`` if typed, else the usual search), each shaped like the
    word being completed, since the shell keeps only the candidates that start with it
    (:func:`name_place`); None: not a name's place."""
    try:
        words = shlex.split(invocation)
    except ValueError:
        return None
    place = name_place(words)
    if place is None:
        return None
    option, typed, shape = place
    taken: list[str] = []
    if option == "--host":  # a comma list: complete its last name, keep the ones before
        *taken, typed = typed.split(",")
        shape += "".join(f"{name}," for name in taken)
    try:
        inv = remotekit.load_inventory(option_value(words[:-1], "--inventory"))
    except remotekit.RemotekitError:
        return []
    names = inv.hosts if NAME_OPTIONS[option] == "hosts" else [*inv.groups, *inv.found]
    return [shape + n for n in names if n.startswith(typed) and n not in taken]


def name_place(words: list[str]) -> tuple[str, str, str] | None:
    """Where the last word is a name's place: (the option, the value typed so far, what each
    candidate starts with). bash splits ``--host=kp`` into ``--host``, ``=``, ``kp`` (``=``
    is in its COMP_WORDBREAKS) and completes ``kp``; zsh keeps ``--host=kp`` one word and
    completes all of it, so there each candidate starts with ``--host=``."""
    last = words[-1] if words else ""
    for option in NAME_OPTIONS:
        if last.startswith(f"{option}="):
            return option, last[len(option) + 1 :], f"{option}="
    if last in NAME_OPTIONS:  # the value not begun
        return last, "", ""
    before = words[-2] if len(words) > 1 else ""
    if last == "=" and before in NAME_OPTIONS:  # bash: --host= and nothing typed after it
        return before, "", ""
    if before == "=" and len(words) > 2 and words[-3] in NAME_OPTIONS:  # bash: --host=kp
        return words[-3], last, ""
    if before in NAME_OPTIONS and not last.startswith("-"):
        return before, last, ""
    return None


def option_value(words: list[str], option: str) -> str | None:
    """The value of the last ``option VALUE`` or ``option=VALUE`` in ``words`` (also as bash
    splits it: ``option = VALUE``), or None."""
    found = None
    for i, word in enumerate(words):
        if word == option:
            rest = words[i + 1 : i + 3]
            rest = rest[1:] if rest[:1] == ["="] else rest
            found = rest[0] if rest else None
        elif word.startswith(f"{option}="):
            found = word[len(option) + 1 :]
    return found


program = RemotekitProgram(
    namespace=ns,
    name="remotekit",
    binary="remotekit",
    binary_names=["remotekit"],
    version=__version__,
)


def main() -> None:
    """Entry point of the ``remotekit`` console script."""
    try:
        try:
            program.run()
        finally:  # also when run() ends with SystemExit: --list's output may still be buffered
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``remotekit --list | head``): the steps were stopped as the
        # error passed through them; say nothing more, and keep the interpreter's own
        # flush at exit from failing on the closed pipe too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a command a pipe closed
