"""A hop states its tool's words as data (``Failure`` rows, ``says``, ``up``); ``Hop`` reads them.

The per-tool rows are tested against the tools' real texts in tests/layers/test_layers.py; this checks
the table's own rules with a hop that has nothing but the table: first row wins, ``code=``
and ``status=`` narrow a row, the message template, the fallback to "command not found".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from remotekit.errors import (
    AuthError,
    ContainerError,
    ContainerNotFound,
    ContainerNotRunning,
)
from remotekit.layers import Launch
from remotekit.layers.core import Failure, Fields, Hop, is_whole


@dataclass(frozen=True)
class Toy(Hop):
    box: str
    tool: str = "/opt/toy"

    key: ClassVar[str] = "toy"
    exe_key: ClassVar[str] = "tool"
    up: ClassVar[str] = "State: up"
    says: ClassVar[str] = "toy says (exit {code}):\n{words}"
    confirm: ClassVar[bool] = True
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure("no box", ContainerNotFound, "no box {hop.name!r}; {said}"),
        Failure(
            "refused", ContainerNotRunning, "{hop.what} is down ({status}); {said}", status="down"
        ),
        Failure("refused", ContainerError, "toy refused {hop.what}; {said}"),
        Failure(r"^denied", AuthError, "toy denies; {said}", code=3),
    )

    @classmethod
    def read(cls, fields: Fields) -> Toy:
        return cls(fields.get("toy", lambda v: isinstance(v, str), "a name"))

    @property
    def name(self) -> str:
        return self.box

    @property
    def label(self) -> str:
        return f"toy {self.box}"

    def apply(self, launch: Launch) -> Launch:
        return self.wrap(launch, (self.tool, "enter", self.box))

    def probe(self) -> tuple[str, ...]:
        return (self.tool, "state", self.box)


def test_the_first_matching_row_names_the_error_and_quotes_the_tool() -> None:
    exc = Toy("b1").explain(1, "Error: NO BOX here\nbye", "h", "s")
    assert type(exc) is ContainerNotFound
    assert (exc.host, exc.step, exc.container) == ("h", "s", "b1")
    assert exc.message == "no box 'b1'; toy says (exit 1):\n  Error: NO BOX here\n  bye"


def test_a_status_row_needs_the_probes_answer() -> None:
    hop = Toy("b1")
    assert type(hop.explain(1, "refused", "h", "s")) is ContainerError  # not asked yet
    exc = hop.explain(1, "refused", "h", "s", status=(0, "State:\n   down"))
    assert type(exc) is ContainerNotRunning and "container b1 is down (State: down)" in str(exc)
    other = hop.explain(1, "refused", "h", "s", status=(0, "State: weird"))
    assert type(other) is ContainerError


def test_a_code_row_needs_that_exit_code_and_non_container_errors_have_no_container() -> None:
    hop = Toy("b1")
    assert hop.explain(1, "denied", "h", "s") is None
    exc = hop.explain(3, "warning\ndenied: ask root", "h", "s")
    assert type(exc) is AuthError and not hasattr(exc, "container")


def test_unknown_words_fall_back_to_command_not_found_then_none() -> None:
    hop = Toy("b1")
    missing = hop.explain(127, "sh: 1: /opt/toy: not found", "h", "s")
    assert type(missing) is ContainerError and "`tool:` in hosts.yaml" in str(missing)
    assert hop.executable == "/opt/toy"
    assert hop.explain(1, "something else", "h", "s") is None


@pytest.mark.parametrize(
    ("code", "text", "up"),
    [(0, "State:    up\n", True), (0, "State: upgrading", False), (1, "State: up", False)],
)
def test_verdict_compares_the_collapsed_answer_with_up(code: int, text: str, up: bool) -> None:
    ok, shown = Toy("b1").verdict(code, text)
    assert ok is up and shown == " ".join(text.split())


def test_is_whole_takes_ints_and_ascii_digits_in_range() -> None:
    assert is_whole(200, 100, 999) and is_whole("200", 100, 999) and is_whole("7", 1)
    assert not any(
        is_whole(v, 100, 999)
        for v in (99, 1000, True, "\uff12\uff10\uff10", "2e2", 200.0, None, "")
    )
