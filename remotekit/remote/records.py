"""Records that cross the boundary, written once: frozen dataclasses both sides import.

A diagnostic's far side writes records (:mod:`.protocol`: one JSON object a line); its local
half reads them back as values. Each record is declared once, in the diagnostic's package
here (``trainlog/records.py``, ...), as a frozen dataclass deriving from :class:`Record`;
the far side may build its records through it (:meth:`Record.to_dict`), the local side reads
them with :meth:`Record.from_dict`. Each field says in its metadata (:func:`wire`) how a
loose wire value becomes the field's value (a :class:`Kind`)::

    @dataclass(frozen=True)
    class Event(Record):
        TYPE = "event"            # the record's "type" on the wire (None: only nested)
        kind: str
        step: float = wire(FLOAT)
        modes: tuple[Mode, ...] = wire(records(Mode), default=())

:meth:`Record.from_dict` is tolerant as a reader of a hostile or half-finished stream must
be: a field the record lacks (a script that failed early) takes its default, else its kind's
empty value (``()`` for a tuple, None otherwise); a key it does not declare is ignored;
numbers may come as the protocol's ``"nan"``/``"inf"``/``"-inf"``; lists become tuples; a
value of the wrong sort becomes what its kind says (a whole number that is no number: 0; a
float: None; a tuple from what is no list: ``()``), never an exception.
Nested records are converted by their class (:func:`record`, :func:`records`), never by a
name looked up somewhere.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, field, fields

from .protocol import encode, number

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    R = TypeVar("R", bound="Record")


class Kind(object):
    """How a wire value (never None) becomes a field's value: ``parse``; and ``empty``,
    called for the value of a field that the record lacks and that has no default."""

    __slots__ = ("empty", "name", "parse")

    def __init__(
        self, name: str, parse: Callable[[Any], Any], empty: Callable[[], Any] | None = None
    ) -> None:
        self.name = name
        self.parse = parse
        self.empty = empty if empty is not None else _none

    def __repr__(self) -> str:
        return "Kind(%s)" % self.name


def _none() -> None:
    return None


def freeze(value: Any) -> Any:
    """``value`` with every list (also inside lists) as a tuple; anything else as it is."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def whole(value: Any) -> int:
    """A whole number from a wire value: any number, truncated; a non-finite or non-numeric
    value is 0."""
    n = number(value)
    return int(n) if n is not None and n == n and abs(n) != float("inf") else 0


def _float(value: Any) -> float | None:
    n = number(value)
    return None if n is None else float(n)


def items(value: Any) -> Any:
    """The items of a list (or tuple); of anything else, none: a text is no list of texts."""
    return value if isinstance(value, (list, tuple)) else ()


def _floats(value: Any) -> tuple[float, ...]:
    out = []
    for v in items(value):
        n = number(v)
        out.append(float(n) if n is not None else float("nan"))
    return tuple(out)


#: As it came, lists (also nested) as tuples: text, flags, mappings.
AS_IS = Kind("as is", freeze)
#: A whole number: any number, truncated; a non-finite or non-numeric value is 0.
INT = Kind("int", whole)
#: A float, the protocol's ``"nan"``/``"inf"``/``"-inf"`` decoded; None when not a number.
FLOAT = Kind("float", _float)
#: A number as it came (an int stays an int), non-finite strings decoded; else None.
NUMBER = Kind("number", number)
#: A tuple of texts (each item made a ``str``; a value that is not a list: none).
STRS = Kind("strs", lambda value: tuple(str(x) for x in items(value)), tuple)
#: A tuple of floats, non-finite strings decoded, anything not a number as NaN (a value
#: that is not a list: none).
FLOATS = Kind("floats", _floats, tuple)
#: A tuple of whatever it holds (a shape, numbers that may be None), lists inside as tuples;
#: missing: ().
TUPLE = Kind("tuple", freeze, tuple)
#: A mapping, copied as a dict (a value that is not a mapping: an empty one).
DICT = Kind("dict", lambda value: dict(value) if _is_map(value) else {}, dict)


def record(cls: type[Record]) -> Kind:
    """A nested record of ``cls`` (None when the value is not a mapping)."""
    return Kind(cls.__name__, lambda value: cls.from_dict(value) if _is_map(value) else None)


def records(cls: type[Record]) -> Kind:
    """A tuple of nested records of ``cls`` (an item that is not a mapping: an empty one; a
    value that is not a list: none)."""
    return Kind(
        "tuple of " + cls.__name__,
        lambda value: tuple(cls.from_dict(v if _is_map(v) else None) for v in items(value)),
        tuple,
    )


def _is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def wire(
    kind: Kind = AS_IS, default: Any = MISSING, factory: Any = MISSING, sent: bool = True
) -> Any:
    """A field of a :class:`Record`: its ``kind`` (how a wire value becomes it), its
    ``default`` (or ``factory``, a zero-argument callable), and ``sent=False`` for a field
    the local side works out and the far side never writes (the test of the far side's
    records holds every other field to a key it writes)."""
    meta = {"kind": kind, "sent": sent}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


_PLANS: dict[type, list[tuple[str, Kind, Any, Any]]] = {}


def _plan(cls: type) -> list[tuple[str, Kind, Any, Any]]:
    """``(name, kind, default, factory)`` of each field of ``cls``, worked out once a class."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = [
            (f.name, f.metadata.get("kind", AS_IS), f.default, f.default_factory)
            for f in fields(cls)
        ]
        _PLANS[cls] = plan
    return plan


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return encode(value)


class Record(object):
    """The base of a record class (each a frozen dataclass): :meth:`from_dict` and
    :meth:`to_dict`. ``TYPE`` is the record's ``"type"`` on the wire (None for a record that
    only travels inside another)."""

    TYPE = None  # type: str | None
    #: Keys the far side writes that the class does not read (each says why where it is set).
    UNREAD = ()  # type: tuple[str, ...]

    @classmethod
    def from_dict(cls: type[R], rec: Mapping[str, Any] | None) -> R:
        """The record from its wire form (see the module's docstring): a missing or None
        field takes its default, else its kind's empty value; unknown keys are ignored."""
        rec = rec or {}
        kw = {}
        for name, kind, default, factory in _plan(cls):
            value = rec.get(name)
            if value is not None:
                kw[name] = kind.parse(value)
            elif default is not MISSING:
                kw[name] = default
            elif factory is not MISSING:
                kw[name] = factory()
            else:  # a record of a script that failed early lacks fields
                kw[name] = kind.empty()
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values, in their declared order: nested records as dicts,
        tuples as lists, non-finite floats as the protocol's strings."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]
