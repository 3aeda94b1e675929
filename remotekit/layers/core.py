"""The launch and the layers every target has: interpreter, venv, env, workdir; and ``Hop``.

A step there is started by one argv, the *launch*: the target's interpreter running a constant
loader (``python -c LOADER``), which reads the boot and the runner (or an agent) and then the
step's payload from stdin.
Layers wrap that argv from the inside out::

    Interpreter("/root/venv/bin/python")    ["/root/venv/bin/python", "-c", LOADER]
    Pct(200)                                ["pct", "exec", "200", "--", *argv]
    Sudo()                                  ["sudo", "-n", "--", *argv]

and the SSH transport quotes the result once (:func:`remotekit.quoting.join`). Env, working
directory and the venv's PATH do not touch the argv at all: they are fields of the payload,
which travels as bytes on stdin. So no user value is ever parsed by a shell, and secret env
values never show in a process table (``ps``) on the node.

A :class:`Hop` is a layer that enters somewhere (sudo, a container, a job, a pod). Each hop is
one module that owns everything about it: its hosts.yaml keys (:meth:`Hop.read`), its argv
(:meth:`Hop.apply`), its ping probe (:meth:`Hop.probe`, :meth:`Hop.verdict`) and what its tool's
exit codes and texts mean (:meth:`Hop.explain`). The target asks the hop; it knows no tool.
"""

from __future__ import annotations

import os
import posixpath
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, NoReturn, Protocol

from remotekit.errors import ContainerError, RemotekitError, quote_tool

__all__ = [
    "LOADER",
    "Batch",
    "Env",
    "Failure",
    "Fields",
    "Hop",
    "Interpreter",
    "Launch",
    "Layer",
    "Venv",
    "Workdir",
    "compose",
    "is_env_name",
]

#: The only code that crosses a shell: it reads ``<len>\n<runner source>`` from stdin and runs it.
LOADER = "import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))"


@dataclass(frozen=True)
class Launch:
    """How a step starts there: the argv plus what the runner applies before it spawns."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    path_prepend: tuple[str, ...] = ()
    cwd: str | None = None
    interpreter: str | None = None
    hops: tuple[str, ...] = ()
    #: A hop relays the output in small writes over TCP with Nagle's rule (srun's I/O from
    #: slurmstepd): a write behind another waits for that one's ACK, which the receiving end
    #: delays up to 40 ms unless it sends something back. The resident agent's caller then
    #: answers each piece of output with a byte (an ``N`` frame) to carry the ACK.
    nudge: bool = False

    @property
    def chain(self) -> str:
        """The hops for people: ``sudo -> pct exec 200 -> /root/venv/bin/python``."""
        return " -> ".join(self.hops)


class Layer(Protocol):
    """A pure transform of a :class:`Launch`."""

    def apply(self, launch: Launch) -> Launch: ...


@dataclass(frozen=True)
class Interpreter:
    """The innermost layer: ``python -c LOADER`` with the given interpreter."""

    python: str

    def apply(self, launch: Launch) -> Launch:
        return replace(
            launch,
            argv=(self.python, "-c", LOADER),
            interpreter=self.python,
            hops=(*launch.hops, self.python),
        )


@dataclass(frozen=True)
class Venv:
    """Run with ``<venv>/bin/python``, and put ``<venv>/bin`` first on PATH, like ``activate``."""

    path: str

    def apply(self, launch: Launch) -> Launch:
        bindir = posixpath.join(self.path, "bin")
        launch = Interpreter(posixpath.join(bindir, "python")).apply(launch)
        return replace(
            launch,
            env={**launch.env, "VIRTUAL_ENV": self.path},
            path_prepend=(bindir, *launch.path_prepend),
        )


@dataclass(frozen=True)
class Env:
    """Environment variables for the step (sent in the payload, never on a command line)."""

    values: Mapping[str, str]

    def apply(self, launch: Launch) -> Launch:
        return replace(launch, env={**launch.env, **self.values})


@dataclass(frozen=True)
class Workdir:
    path: str

    def apply(self, launch: Launch) -> Launch:
        return replace(launch, cwd=self.path)


def compose(layers: Iterable[Layer], launch: Launch | None = None) -> Launch:
    """Apply ``layers`` in order (innermost first) to an empty launch."""
    out = launch or Launch()
    for layer in layers:
        out = layer.apply(out)
    return out


# -- hops ------------------------------------------------------------------------------------


class Fields(Protocol):
    """How a hop reads its hosts.yaml keys (the inventory's reader: errors name file:line:key).

    ``key`` is a host-level key (``container``, ``pct``) or, for a reader from :meth:`mapping`,
    a key of that nested mapping (``slurm: {job: 4242}`` -> ``job``).
    """

    def has(self, key: str) -> bool: ...

    def get(self, key: str, check: Callable[[Any], bool], what: str) -> Any: ...

    def text(self, key: str) -> str | None: ...

    def fail(self, key: str, message: str) -> NoReturn: ...

    def mapping(self, key: str, known: Iterable[str]) -> Fields: ...


def is_text(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def is_whole(v: Any, low: int, high: int | None = None) -> bool:
    """An integer ``low..high`` (``high`` None: no bound), or a string of its ASCII digits."""
    if isinstance(v, str) and re.fullmatch(r"[0-9]+", v, flags=re.ASCII):
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        return False
    return low <= v and (high is None or v <= high)


def is_env_name(v: Any) -> bool:
    """A name an environment variable may have (hosts.yaml's ``env:``, ``--env``, LXC's
    ``keep_env``): a letter or ``_``, then letters, digits, ``_``."""
    return isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None


def is_container_name(v: Any) -> bool:
    """A name a container tool takes as one argument: no '/', whitespace, control chars, '-'."""
    return is_text(v) and not re.search(r"[\s/\x00-\x1f\x7f]", v) and not v.startswith("-")


@dataclass(frozen=True)
class Failure:
    """One row of a hop's failure table: when the tool says ``pattern``, raise ``error``.

    ``pattern`` is a regex searched in the tool's words (case-insensitive, ``^`` at each line).
    ``message`` is a :meth:`str.format` template over ``hop`` (the hop), ``code`` (the exit
    code), ``said`` (the tool quoted, :attr:`Hop.says`) and ``status`` (the probe's answer on
    one line). ``code`` limits the row to one exit code; ``status`` (a regex) to a probe answer
    that matches it, for a hop whose words need the probe to tell cases apart (:attr:`Hop.confirm`).
    """

    pattern: str
    error: type[RemotekitError]
    message: str = "{said}"
    code: int | None = None
    status: str | None = None

    def matches(self, code: int | None, text: str, status: tuple[int | None, str] | None) -> bool:
        if self.code is not None and code != self.code:
            return False
        if self.status is not None and (status is None or not _said(self.status, status[1])):
            return False
        return _said(self.pattern, text)


def _said(pattern: str, text: str) -> bool:
    return re.search(pattern, text, flags=re.IGNORECASE | re.MULTILINE) is not None


@dataclass(frozen=True)
class Batch:
    """A detached run as a batch job, started from outside the hop (on the login node).

    ``submit`` prints the job's id as its first line on stdout (``ID`` or ``ID;CLUSTER``),
    then waits for the job and exits with its exit code (``sbatch --parsable --wait``);
    ``log_option`` + the run's log path is added after ``submit[0]``, so the job writes its
    output there itself (appending). The rest take the job's id as their last word, and
    serve when the run's supervisor is gone (a login node rebooted): ``cancel`` ends the job;
    ``queue`` prints ``STATE STATUS END`` while the scheduler still holds the job (STATUS a
    wait status, END its end time ``%Y-%m-%dT%H:%M:%S`` or a word), and ``forgotten`` on
    stderr for a job it does not know (any more); ``accounting`` prints
    ``STATE|CODE:SIGNAL|END`` after that. A job in a ``live`` state has not ended; one in a
    ``cancelled`` state was stopped; any other state has ended by itself.
    """

    submit: tuple[str, ...]
    log_option: str
    cancel: tuple[str, ...]
    queue: tuple[str, ...] = ()
    forgotten: str = ""
    accounting: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


class Hop(ABC):
    """A layer that enters somewhere: one module per hop, registered by its hosts.yaml key.

    Subclasses are frozen dataclasses and set ``key`` (the hosts.yaml key that declares the hop),
    ``options`` (other host-level keys it owns, e.g. ``pct:``), ``kind`` (what it enters, for
    messages: "container", "job", "pod"), ``exe_key`` (the field holding its executable), and
    implement :meth:`read`, :meth:`apply`, :attr:`label`, :attr:`name` and :meth:`probe`. What the tool says is
    data, not code: :attr:`up` (the probe's answer when the hop is up), :attr:`says` (how a
    message quotes the tool) and :attr:`failures` (its words that mean "this hop is broken").
    """

    key: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    kind: ClassVar[str] = "container"
    #: What runs through this hop belongs to what it enters (a container's init and cgroups,
    #: a pod, a job step), not to the process tree of the hop's tool; False for sudo, whose
    #: command stays its child. So a run detached inside such a hop outlives an outer hop's
    #: step (a Slurm step ends every process of its own tree): see :meth:`batch`.
    own_tree: ClassVar[bool] = True
    #: The field (and hosts.yaml key) that holds the hop's executable: :attr:`executable`,
    #: and the "not found" hint.
    exe_key: ClassVar[str] = "bin"

    @classmethod
    @abstractmethod
    def read(cls, fields: Fields) -> Hop | None:
        """The hop as declared (``fields`` holds the host's keys); raise via ``fields.fail``."""

    @property
    def executable(self) -> str:
        """The first word of the argv this hop adds (its tool): the field :attr:`exe_key`."""
        return str(getattr(self, self.exe_key))

    @property
    @abstractmethod
    def name(self) -> str:
        """What the hop enters, as the tool names it (CT id, container, job, pod)."""

    @property
    @abstractmethod
    def label(self) -> str:
        """The hop in a layer chain: ``pct exec 200``, ``srun --jobid 4242 -w node07``."""

    @property
    def what(self) -> str:
        """The thing entered, for messages: ``container 200``, ``job 4242``, ``pod web``."""
        return f"{self.kind} {self.name}"

    @abstractmethod
    def apply(self, launch: Launch) -> Launch:
        """The launch entered through this hop (pure: an argv in, an argv out)."""

    def interactive(self, launch: Launch) -> Launch:
        """The launch entered for a person at a terminal (``remotekit shell``): a pty inside.

        The default is :meth:`apply`, for a tool that gives the command a terminal by itself
        when its own stdin is one (lxc-attach, pct exec, sudo); a tool that must be asked
        (``exec -t``, ``srun --pty``) overrides this.
        """
        return self.apply(launch)

    def wrap(self, launch: Launch, argv: Iterable[str]) -> Launch:
        """``launch`` entered through this hop by ``argv`` (the hop's words before the inner)."""
        return replace(launch, argv=(*argv, *launch.argv), hops=(self.label, *launch.hops))

    def config_file(self) -> str | None:
        """The file on the level outside this hop that configures what it enters (an LXC
        container's config), or None: ``gpu --layers`` reads its GPU lines from there."""
        return None

    def batch(self, argv: Sequence[str], name: str) -> Batch | None:
        """How a detached run goes through this hop when nothing may outlive a step in it (a
        Slurm step): a batch job submitted from outside the hop, or None (the default: the
        run's supervisor starts inside, in its own session, and outlives the step)."""
        return None

    def held(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """How a detached run goes through this hop as a command that the run's supervisor,
        outside the hop, holds for as long as the run lasts (``srun`` into a running job's
        allocation: the step lives while srun does, and stopping the run stops srun, which
        ends the step there); None (the default): not so."""
        return None

    # -- ping ------------------------------------------------------------------------------

    @abstractmethod
    def probe(self) -> tuple[str, ...]:
        """The argv, run on the node (inside the outer hops), that says if the hop is up."""

    #: What the probe prints, whitespace collapsed, when the hop is up (``status: running``).
    up: ClassVar[str] = ""

    def verdict(self, code: int | None, text: str) -> tuple[bool, str]:
        """Read the probe's answer: (up, what to show). Up: exit 0 and the words :attr:`up`."""
        shown = " ".join(text.split())
        return code == 0 and shown == self.up, shown or f"exit {code}"

    # -- failures --------------------------------------------------------------------------

    #: The tool's words that mean "this hop is broken", first match wins (see :class:`Failure`).
    failures: ClassVar[tuple[Failure, ...]] = ()
    #: How a message quotes the tool: a template with ``{hop}``, ``{code}`` and ``{words}``.
    says: ClassVar[str] = "{hop.executable} says:\n{words}"
    #: True when :meth:`explain` may need the probe's answer (``status``) to tell cases apart.
    confirm: ClassVar[bool] = False

    def explain(
        self,
        code: int | None,
        text: str,
        host: str,
        step: str,
        status: tuple[int | None, str] | None = None,
        *,
        where: str = "the node",
        source: str = "",
    ) -> RemotekitError | None:
        """The error for a launch that never started, from the tool's exit code and texts.

        None when the words are not this hop's (the next hop, or the interpreter, is asked).
        ``status`` is the probe's (exit code, output) when the target ran it (``confirm``).
        The first row of :attr:`failures` that matches names the error; then a shell's
        "command not found" for the hop's own tool (:meth:`missing`, ``where`` and
        ``source`` passed on).
        """
        for row in self.failures:
            if row.matches(code, text, status):
                said = self.says.format(hop=self, code=code, words=self.quote(text))
                state = " ".join(status[1].split()) if status else ""
                message = row.message.format(hop=self, code=code, said=said, status=state)
                if issubclass(row.error, ContainerError):
                    return row.error(message, host=host, step=step, container=self.name)
                return row.error(message, host=host, step=step)
        if self.tool_missing(code, text):
            return self.missing(host, step, where, source)
        return None

    def exec_failed(self, code: int | None, text: str) -> bool:
        """The hop ran but could not exec the interpreter (beyond the usual 126/127)."""
        return False

    def tool_missing(self, code: int | None, text: str) -> bool:
        """A shell on the node (bash, dash, zsh) said the hop's own executable does not exist."""
        exe = self.executable
        said = (f"{exe}: command not found", f"{exe}: not found", f"{exe}: No such file or dir")
        return code == 127 and (any(s in text for s in said) or f"command not found: {exe}" in text)

    #: What to check when the hop's tool is not found (a template over ``hop`` and ``name``).
    missing_hint: ClassVar[str] = (
        "is {name} installed there? (`{hop.exe_key}:` in hosts.yaml sets its path)"
    )

    def not_found(self, where: str = "the node", source: str = "") -> str:
        """``pct not found at /usr/sbin/pct on kpro6 (hosts.yaml:7)``: this hop's tool, where
        it was looked for, and where hosts.yaml sets it (``source``, ``path:line``)."""
        exe = self.executable
        at = f"at {exe}" if "/" in exe else "on the PATH"
        said = f"{os.path.basename(exe)} not found {at} on {where}"
        return f"{said} ({source})" if source else said

    def missing(
        self, host: str, step: str, where: str = "the node", source: str = ""
    ) -> RemotekitError:
        """The error for this hop's own tool not found ``where`` (the node, or the outer hop
        it runs in: ``container 200``), set in hosts.yaml at ``source``: one message for
        every hop (:meth:`not_found`, then :attr:`missing_hint`)."""
        hint = self.missing_hint.format(hop=self, name=os.path.basename(self.executable))
        return ContainerError(
            f"{self.not_found(where, source)}, to enter {self.what}: {hint}",
            host=host,
            step=step,
            container=self.name,
        )

    def quote(self, text: str) -> str:
        """The tool's own words, indented, for a message (the last 10 lines)."""
        return quote_tool(text)

    # -- resolution when the target opens ------------------------------------------------

    def lookup(self) -> tuple[str, ...] | None:
        """An argv to run on the node before the first step (e.g. a job name -> its id)."""
        return None

    def resolved(self, code: int | None, text: str, host: str) -> Hop:
        """This hop with what :meth:`lookup` found (raise when it found nothing usable)."""
        return self


def tool_beside(executable: str, tool: str) -> str:
    """``tool`` in the directory of ``executable`` when that is a path (srun -> squeue)."""
    head = posixpath.dirname(executable)
    return posixpath.join(head, tool) if head else tool
