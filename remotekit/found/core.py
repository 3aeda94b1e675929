"""A found group: its finder, the host that asks, the members' settings; and resolving it.

A :class:`Finder` is one small class per engine, as a hop is: its hosts.yaml keys
(:meth:`Finder.read`), the query it runs on its *via* host and how it reads the answer
(:meth:`Finder.find`, given a function that runs an argv there), and the hop that enters each
member. It does no I/O of its own, so its test hands it the tool's words and checks what it
made of them. :func:`resolve` runs it through a real :class:`~remotekit.target.Target` on the
via host and builds the members.

What the far side answers is hostile input: the answer is bounded (:data:`MAX_ANSWER`), each
member's name checked (:data:`MEMBER_NAME`: it becomes a target name and an argument of the
hop's tool), their number bounded (:data:`MAX_MEMBERS`), and whatever a message quotes is
shown escaped (:class:`~remotekit.errors.GroupError` is a RemotekitError, whose ``str`` is
:func:`~remotekit.result.visible`).
"""

from __future__ import annotations

import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar

from remotekit.errors import GroupError, RemotekitError, quote_tool
from remotekit.layers.core import Fields, Hop
from remotekit.result import Shown
from remotekit.spec import HostSpec
from remotekit.target import Target

__all__ = [
    "MAX_ANSWER",
    "MAX_MEMBERS",
    "MEMBER_NAME",
    "Ask",
    "Finder",
    "Found",
    "FoundGroup",
    "QueryFailed",
    "Resolved",
    "Said",
    "resolve",
]

#: Bytes of a query's output that are read (each stream); more is refused, not cut.
MAX_ANSWER = 4 << 20
#: Members one group may have: more is refused (a selector that matched a whole cluster).
MAX_MEMBERS = 1024
#: A member's name as the far side gives it (a CT id, a node, a pod): it becomes the target
#: name ``GROUP/NAME`` and one argument of the hop's tool. No '/', space, quote or control
#: character, no leading '.' or '-'; 253 characters is Kubernetes' longest pod name.
MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
#: Seconds a query may run there (less when the via host's ``timeouts.step`` says less).
QUERY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Said:
    """What a query's tool answered: its exit code, stdout and stderr."""

    code: int | None
    out: str
    err: str

    @property
    def words(self) -> str:
        """What it said for a message: stderr, else stdout, quoted (the last lines)."""
        return quote_tool(self.err.strip() or self.out)


#: Runs an argv on the via host and returns what it said.
Ask = Callable[[Sequence[str]], Said]


@dataclass(frozen=True)
class Found:
    """One member as a finder found it: its name (as the tool gave it), the hop that enters
    it, and environment variables its steps get (a rank's rendezvous variables)."""

    name: str
    hop: Hop
    env: Mapping[str, str] = field(default_factory=dict)


class QueryFailed(Exception):
    """A finder's query failed, or its answer cannot be used: the cause, in words."""


class Finder(ABC):
    """How one engine names its members (one module each, like a hop).

    Subclasses are frozen dataclasses with a ``via`` field (the declared host that runs the
    query) and set ``key`` (the hosts.yaml key that declares the group), ``options`` (its
    other keys), ``via_key`` (the key naming the via host) and ``nobody`` (the words for an
    answer with no member).
    """

    key: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    via_key: ClassVar[str] = "via"
    nobody: ClassVar[str] = "found no member"
    via: str

    @classmethod
    @abstractmethod
    def read(cls, fields: Fields) -> Finder:
        """The finder as declared (``fields``: the group's keys); raise via ``fields.fail``."""

    @property
    @abstractmethod
    def query(self) -> str:
        """What is asked where, for people: ``pct list on pve1 (name 'web*')``."""

    @abstractmethod
    def find(self, ask: Ask) -> list[Found]:
        """The members, in the tool's order. ``ask`` runs an argv on the via host. Raise
        :class:`QueryFailed` naming the cause when the tool refused or its answer cannot be
        read."""


def refused(tool: str, said: Said) -> QueryFailed:
    """The cause when a query's tool exited non-zero: its exit code and its words."""
    return QueryFailed(f"{tool} failed (exit {said.code}); it says:\n{said.words}")


@dataclass(frozen=True)
class FoundGroup:
    """A group hosts.yaml finds at run time (``groups: {cts: {pct_list: pve1}}``).

    ``via`` is the declared host the query runs on; ``member`` what every member is before
    its name and chain are known: the via host's connection (ssh) with the group's own
    settings (venv, workdir, env ...; ``defaults:`` applied). A member's chain is the via
    host's hops, then the hop that was found (:func:`resolve`).
    """

    name: str
    finder: Finder
    via: HostSpec
    member: HostSpec
    source: str = "<embedded>"

    @property
    def query(self) -> str:
        return self.finder.query


@dataclass(frozen=True, repr=False)
class Resolved(Shown):
    """What a found group resolved to: its members (HostSpecs named ``GROUP/NAME``), and
    when (``at``, seconds since the epoch) and how long the query took."""

    group: str
    query: str
    members: tuple[HostSpec, ...]
    at: float
    duration_s: float

    repr_keys = ("group", "query")

    def render(self) -> str:
        """``group G: QUERY found N at HH:MM:SS (in S s)``, then a member a line."""
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        head = (
            f"group {self.group}: {self.query} found {len(self.members)} at {when} "
            f"(in {self.duration_s:.2f} s)"
        )
        return "\n".join([head, *(f"  {m.name}" for m in self.members)])


def resolve(group: FoundGroup) -> Resolved:
    """Run ``group``'s query on its via host and return its members.

    Raises :class:`~remotekit.errors.GroupError` naming the group, the query and the cause:
    the via host cannot be reached or its tool refused (the job is not running, the node is
    not a Proxmox node), the answer cannot be read, or it names no member.
    """
    started, t0 = time.time(), time.monotonic()
    try:
        with Target(group.via, capture_limit=MAX_ANSWER) as t:
            found = group.finder.find(_asker(t))
        members = tuple(_member(group, f) for f in _checked(found))
    except QueryFailed as exc:
        raise GroupError(group.name, group.query, str(exc)) from None
    except RemotekitError as exc:
        cause = f"{group.via.name} could not be asked: {exc}"
        raise GroupError(group.name, group.query, cause) from exc
    if not members:
        raise GroupError(group.name, group.query, group.finder.nobody)
    return Resolved(group.name, group.query, members, started, time.monotonic() - t0)


def _asker(t: Target) -> Ask:
    limit = t.spec.timeouts.step
    timeout = QUERY_TIMEOUT_S if limit is None else min(limit, QUERY_TIMEOUT_S)

    def ask(argv: Sequence[str]) -> Said:
        step = f"find {os.path.basename(argv[0])}"
        r = t.run(list(argv), check=False, timeout=timeout, step=step)
        if r.stdout_dropped or r.stderr_dropped:
            raise QueryFailed(f"{argv[0]} answered more than {MAX_ANSWER >> 20} MiB; refused")
        return Said(r.exit_code, r.stdout, r.stderr)

    return ask


def _checked(found: list[Found]) -> list[Found]:
    """The members as found, once each name is one remotekit takes, and not too many."""
    if len(found) > MAX_MEMBERS:
        raise QueryFailed(f"found {len(found)} members, more than {MAX_MEMBERS}; refused")
    seen: set[str] = set()
    for name in (f.name for f in found):
        if not isinstance(name, str) or not MEMBER_NAME.fullmatch(name):
            shown = _shown(name)
            raise QueryFailed(
                f"the answer names a member {shown}, which cannot be a target name (1-253 "
                "letters, digits, '_', '.', '-', not starting with '.' or '-'); refused"
            )
        if name in seen:
            raise QueryFailed(f"the answer names member {name!r} twice; refused")
        seen.add(name)
    return found


def _shown(name: Any) -> str:
    text = str(name)
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def _member(group: FoundGroup, found: Found) -> HostSpec:
    """One member: the group's member settings, named ``GROUP/NAME``, its chain the via
    host's own hops (sudo, a container the query ran in) and then the hop that was found,
    innermost; the env the finder gave it, under the group's own ``env:``."""
    env = {**found.env, **group.member.env}
    name, hops = f"{group.name}/{found.name}", (*group.via.hops, found.hop)
    return replace(group.member, name=name, hops=hops, env=env)
