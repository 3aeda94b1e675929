"""One exception tree for everything remotekit raises.

::

    RemotekitError                  (host, step: where it happened, when known)
    ├── InventoryError              hosts.yaml is wrong: file, line and key in the message
    ├── UnknownHost                 a target name that the inventory does not have
    ├── GroupError                  a found group's query failed or found no one: group,
    │                               query and cause
    ├── ConnectError                DNS failure, refused, unreachable, connect timeout
    │   ├── AuthError               the server refused our credentials (or sudo wants a password)
    │   └── HostKeyError            unknown host key (strict) or a changed key (always refused)
    ├── ContainerError              a hop (pct, lxc, podman, srun, kubectl) refused; quotes it
    │   ├── ContainerNotFound       no such container, job or pod
    │   └── ContainerNotRunning     it exists but is stopped / pending / finished
    ├── InterpreterNotFound         the venv / python of the target does not exist there
    ├── ConnectionLost              the transport died while a step ran
    ├── ProtocolViolation           the agent there broke its frame protocol: it was closed
    ├── ForwardError                a forwarded port: nothing listens there, or no relay
    ├── DryRun                      a target made with dry_run=True was asked to run a step
    └── StepError                   a step ran and went wrong; carries its Result
        ├── StepTimeout             the step passed its timeout; it was stopped there
        ├── StepCancelled           Target.cancel() (e.g. Ctrl-C on a fleet) stopped it there
        ├── StepFailed              the step exited non-zero (with check=True)
        ├── RemoteError             a function called there (Target.call) raised, or gave a
        │                           value that cannot come back; its type, message, traceback
        └── DiagnosticError         a diagnostic script there could not run, or stopped
                                    before its final record (diagnostics.base)

Notes, not errors (warnings, ``warnings.warn``): ``Reconnected``, the SSH connection a
target held had dropped between steps and the next step opened a new one; ``AgentUnavailable``,
the resident agent cannot run on a target, whose steps then run one process each.

Third-party exceptions (paramiko, socket, subprocess) are translated at the transport
boundary with ``raise ... from exc``; nothing else in the package sees them.

An error's ``str()`` is :func:`~remotekit.result.visible`: a message that quotes the far side
(a path, a tool's words, a step's last output) shows its control characters as escapes
(``\\x1b``), wherever it is printed; ``message`` keeps the text as it came.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from remotekit.result import visible

if TYPE_CHECKING:
    from remotekit.result import Result

__all__ = [
    "AgentUnavailable",
    "AuthError",
    "ConnectError",
    "ConnectionLost",
    "ContainerError",
    "ContainerNotFound",
    "ContainerNotRunning",
    "DiagnosticError",
    "DryRun",
    "ForwardError",
    "GroupError",
    "HostKeyError",
    "InterpreterNotFound",
    "InventoryError",
    "ProtocolViolation",
    "Reconnected",
    "RemoteError",
    "RemotekitError",
    "StepCancelled",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "UnknownHost",
    "interrupted",
]

_TAIL_LINES = 20


def interrupted(host: str) -> KeyboardInterrupt:
    """Ctrl-C (a notebook's stop button) as it leaves a target's public method: a plain
    KeyboardInterrupt, raised after what ran there was stopped, that Jupyter shows as one
    line (IPython's ``_render_traceback_``) instead of a traceback through our waits."""
    said = f"interrupted; what ran on {host} was stopped there, and {host} stays usable"
    exc = KeyboardInterrupt(said)
    exc._render_traceback_ = lambda: [f"KeyboardInterrupt: {visible(said)}"]  # type: ignore[attr-defined]
    return exc


class RemotekitError(Exception):
    """Base of every error remotekit raises; ``host`` and ``step`` say where, when known."""

    def __init__(self, message: str, *, host: str | None = None, step: str | None = None):
        self.message = message
        self.host = host
        self.step = step
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.host:
            where.append(f"host {self.host!r}")
        if self.step:
            where.append(f"step {self.step!r}")
        prefix = f"[{', '.join(where)}] " if where else ""
        return visible(prefix + self.message)


class InventoryError(RemotekitError):
    """hosts.yaml could not be read or is invalid; ``path``, ``line`` and ``key`` locate it."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
        host: str | None = None,
    ):
        self.path = path
        self.line = line
        self.key = key
        loc = path or "<inventory>"
        if line is not None:
            loc += f":{line}"
        if key:
            message = f"{key}: {message}"
        super().__init__(f"{loc}: {message}", host=host)


class UnknownHost(RemotekitError):
    """The inventory has no target of that name; ``known`` lists the ones it has. ``looked``:
    where hosts.yaml was looked for and which one was read (when it was not named)."""

    def __init__(self, name: str, known: list[str], *, path: str | None = None, looked: str = ""):
        self.name = name
        self.known = list(known)
        where = f" in {path}" if path else ""
        after = f"; {looked}" if looked else ""
        super().__init__(
            f"unknown target {name!r}{where}; known targets: "
            f"{', '.join(self.known) or '(none)'}{after}"
        )


class GroupError(RemotekitError):
    """A group hosts.yaml has found at run time (``pct_list``, ``slurm_job``,
    ``kubectl_selector``) could not be resolved: its query failed (the node is down, the job
    is not running, the tool refused) or found no member. ``group`` names the group,
    ``query`` what was asked where (``pct list on pve1``), ``cause`` why it gave no members;
    an error underneath (a ConnectError, a StepTimeout) is its ``__cause__``."""

    def __init__(self, group: str, query: str, cause: str):
        self.group = group
        self.query = query
        self.cause = cause
        super().__init__(f"group {group!r}: {query}: {cause}")


class ConnectError(RemotekitError):
    """The connection to the target could not be made."""


class AuthError(ConnectError):
    """The server (or sudo) refused our credentials."""


class HostKeyError(ConnectError):
    """The server's host key is unknown (and policy is strict) or has changed."""


class ContainerError(RemotekitError):
    """A hop refused to enter its container, job or pod; the message quotes the tool's words.

    ``container`` names what could not be entered (CT id, container, job or pod name).
    """

    def __init__(
        self,
        message: str,
        *,
        host: str | None = None,
        step: str | None = None,
        container: str | None = None,
    ):
        self.container = container
        super().__init__(message, host=host, step=step)


class ContainerNotFound(ContainerError):
    """There is no such container, job or pod."""


class ContainerNotRunning(ContainerError):
    """The container, job or pod exists but is not running (stopped, pending, finished)."""


class InterpreterNotFound(RemotekitError):
    """The target's interpreter (venv or python) does not exist where the step runs."""

    def __init__(
        self, message: str, *, path: str, host: str | None = None, step: str | None = None
    ):
        self.path = path
        super().__init__(message, host=host, step=step)


class ForwardError(RemotekitError):
    """A forwarded port could not be reached there (``port``: the port there). ``refused``:
    the hops worked and nothing accepts connections on that port there (else a hop, the relay
    or the port here failed)."""

    def __init__(
        self,
        message: str,
        *,
        port: int | None = None,
        host: str | None = None,
        step: str | None = None,
        refused: bool = False,
    ):
        self.port = port
        self.refused = refused
        super().__init__(message, host=host, step=step)


class DryRun(RemotekitError):
    """A target made with ``dry_run=True`` was asked to run a step: nothing ran, nothing was
    connected to. ``chain`` is the layer chain the step would have run through, ending in its
    command (a shipped script as ``<shipped NAME>`` with its argv)."""

    def __init__(self, chain: str, *, host: str | None = None, step: str | None = None):
        self.chain = chain
        super().__init__(f"dry run, nothing ran: {chain}", host=host, step=step)


class _Note(UserWarning):
    """A warning of ours: its text is :func:`~remotekit.result.visible` wherever Python
    prints it (a reason may quote the far side's output)."""

    def __str__(self) -> str:
        return visible(super().__str__())


class Reconnected(_Note):
    """A warning: the connection a target held had dropped while no step ran on it, and the
    next step opened a new one (nothing is run again). A step whose connection drops while it
    runs is not retried: it raises :class:`ConnectionLost`."""


class AgentUnavailable(_Note):
    """A warning, once per target: the resident agent cannot run there (a Python older than
    it needs, or a chain that does not pass its output on as it comes), so every step of the
    target runs as a process of its own, as with hosts.yaml ``agent: false``. Nothing is lost:
    the step that found out runs that way too."""


class _Cut(RemotekitError):
    """A step cut off from its far side before it ended: ``result`` holds its output so far."""

    def __init__(
        self,
        message: str,
        *,
        result: Result | None = None,
        host: str | None = None,
        step: str | None = None,
    ):
        self.result = result
        super().__init__(message, host=host, step=step)


class ConnectionLost(_Cut):
    """The transport died mid-step; the remote side stops the step when it sees its stdin close."""


class ProtocolViolation(_Cut):
    """What the resident agent there sent broke its frame protocol (a malformed or oversized
    frame, output past its flow-control window): the agent was closed at once, as for a
    dropped connection (a runner there stops its step when its stdin closes), and the
    target's next step starts a new one. Not retried: a far side that does it once may do it
    again. The message says what was wrong and names the agent; ``result`` holds the step's
    output until then."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_level() -> int:
    """The ``stacklevel`` of our caller's first frame outside remotekit: a warning names the
    user's line (a notebook cell's ``t.run(...)``), not ours (as pandas' find_stack_level)."""
    here = inspect.currentframe()
    frame: FrameType | None = here.f_back if here is not None else None
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def quote_tool(words: str | Sequence[str], n: int = 10) -> str:
    """What a tool said, for a message: its last ``n`` lines, indented (``(no output)``)."""
    lines = words.strip().splitlines() if isinstance(words, str) else list(words)
    return "\n".join("  " + line for line in lines[-n:]) or "  (no output)"


def _tail(text: str, n: int = _TAIL_LINES) -> str:
    lines = text.rstrip("\n").splitlines()
    if not lines:
        return ""
    cut = lines[-n:]
    more = f"  ... ({len(lines) - n} earlier lines)\n" if len(lines) > n else ""
    return more + "\n".join("  " + line for line in cut)


class StepError(RemotekitError):
    """A step ran and went wrong; ``result`` holds the output captured so far."""

    def __init__(self, message: str, *, result: Result):
        self.result = result
        super().__init__(message, host=result.host, step=result.step)


class StepTimeout(StepError):
    """The step ran past ``timeout_s`` and was stopped (TERM, then KILL) where it ran.

    ``started`` is false when it never ran at all (it waited ``timeout_s`` for a free SSH
    session). ``confirmed`` is false when the runner there never reported the stop: the
    message then says it may still run; ``result.still_running`` names what survived.
    """

    def __init__(
        self, result: Result, timeout_s: float, *, started: bool = True, confirmed: bool = True
    ):
        self.timeout_s = timeout_s
        self.started = started
        self.confirmed = confirmed
        if not started:
            msg = (
                f"never started: no SSH session of the connection became free within "
                f"{timeout_s:g} s, so nothing ran there"
            )
        elif not confirmed:
            msg = (
                f"timed out after {timeout_s:g} s; the runner there was told to stop it but "
                f"did not confirm: it may still be running"
            )
        elif result.still_running:
            msg = (
                f"timed out after {timeout_s:g} s; stopping it failed, still running there: "
                + "; ".join(result.still_running)
            )
        else:
            msg = f"timed out after {timeout_s:g} s and was stopped (process tree terminated)"
        tail = _tail(result.stderr) or _tail(result.stdout)
        if tail:
            msg += f"; last output:\n{tail}"
        super().__init__(msg, result=result)


class StepCancelled(StepError):
    """The step was cancelled (``Target.cancel``) and its process tree stopped there."""

    def __init__(self, result: Result, *, started: bool = True, confirmed: bool = True):
        self.started = started
        self.confirmed = confirmed
        if not started:
            msg = "cancelled before it started; nothing ran there"
        elif not confirmed:
            msg = "cancelled; the runner there was told to stop it but did not confirm"
        elif result.still_running:
            msg = "cancelled; stopping it failed, still running there: " + "; ".join(
                result.still_running
            )
        else:
            msg = "cancelled; the step was stopped there"
        super().__init__(msg, result=result)


class StepFailed(StepError):
    """The step exited non-zero and ``check`` was true."""

    def __init__(self, result: Result, *, command: bool = True):
        super().__init__(exit_message(result, command=command), result=result)


class RemoteError(StepError):
    """A function called there (:meth:`Target.call <remotekit.target.Target.call>`) raised,
    or what it gave back cannot come back (not JSON, too large, nested too deep, a pickle
    not asked for). ``remote_type`` (``"builtins.ValueError"``), ``remote_message`` and
    ``remote_traceback`` are the far side's words, bounded (they may be anything: shown
    escaped, as every error's ``str()``); ``result`` is the step's (its output)."""

    def __init__(
        self,
        message: str,
        *,
        result: Result,
        remote_type: str = "",
        remote_message: str = "",
        remote_traceback: str = "",
    ):
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback
        tail = _tail(remote_traceback)
        super().__init__(message + (f"; traceback there:\n{tail}" if tail else ""), result=result)


def exit_message(result: Result, *, command: bool = True) -> str:
    """How a step that exited non-zero reads: a command's exit code (``command``), or for
    remotekit's own operations (``get``, ``put``) that it failed, then the last output."""
    if command:
        msg = f"command {result.display_argv} exited with {result.exit_code}"
    else:
        msg = f"{result.display_argv} failed (exit {result.exit_code})"
    tail = _tail(result.stderr) or _tail(result.stdout)
    return msg + (f"; last output:\n{tail}" if tail else "")


class DiagnosticError(StepError):
    """A diagnostic script there could not run at all (a fatal ``error`` record: no torch, a
    path that does not exist) or stopped before its final ``done`` record (crashed, killed);
    the message says which, with the last lines it wrote. ``result`` is the step's Result."""
