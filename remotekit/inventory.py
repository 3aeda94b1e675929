"""hosts.yaml -> typed host specs. Every error names the file, the line and the key.

Schema (``defaults`` is merged into every host; ``env`` and ``timeouts`` merge key by key)::

    defaults:
      timeouts: {connect: 10, step: 600, kill_grace: 1}
    hosts:
      local: {}                         # this machine, no SSH (also there when not declared)
      kpro6:
        ssh: root@kpro6.lan:22          # [user@]host[:port], or an ~/.ssh/config alias
        identity: ~/.ssh/id_ed25519
        known_hosts: ~/.ssh/known_hosts
        host_key: strict                # strict | accept-new
        jump: root@bastion              # ProxyJump
        sudo: false
        container: 200                  # one container hop (remotekit.layers.HOPS):
        pct: pct                        #   container/pct, lxc, podman/docker + engine,
                                        #   slurm, kubectl
        venv: /root/venv                # interpreter <venv>/bin/python
        python: python3                 # interpreter when there is no venv
        workdir: /workspace
        env: {HF_HOME: /workspace/hf}
        secret_env: [HF_TOKEN]          # names whose values are never printed
        checkpoints: /workspace/checkpoints
    groups:
      gpu: [kpro6]
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, NoReturn

import yaml

from remotekit.errors import InventoryError, UnknownHost
from remotekit.layers import HOPS, Env, Fields, Hop, Interpreter, Layer, Sudo, Venv, Workdir

__all__ = [
    "HostSpec",
    "Inventory",
    "SSHSpec",
    "Timeouts",
    "find_inventory",
    "load_inventory",
    "parse_inventory",
]

HOST_KEY_POLICIES = ("strict", "accept-new")


@dataclass(frozen=True)
class SSHSpec:
    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    host_key: str = "strict"
    jump: SSHSpec | None = None

    @property
    def display(self) -> str:
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port else ""
        return f"{user}{host}{port}"


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    step: float | None = 600.0
    kill_grace: float = 1.0


@dataclass(frozen=True)
class HostSpec:
    """One target as declared. ``layers`` turns it into the launch transforms, innermost first."""

    name: str
    ssh: SSHSpec | None = None
    sudo: bool = False
    hop: Hop | None = None
    venv: str | None = None
    python: str | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()
    checkpoints: str | None = None
    timeouts: Timeouts = Timeouts()
    source: str = "<embedded>"

    @property
    def interpreter(self) -> str:
        """The Python that runs steps there. A plain ``local`` target uses our own."""
        if self.venv:
            return self.venv.rstrip("/") + "/bin/python"
        if self.python:
            return self.python
        if self.ssh is None and self.hop is None:
            return sys.executable
        return "python3"

    def layers(self) -> tuple[Layer, ...]:
        inner: Layer = Venv(self.venv) if self.venv else Interpreter(self.interpreter)
        out: list[Layer] = [inner]
        if self.env:
            out.append(Env(dict(self.env)))
        if self.workdir:
            out.append(Workdir(self.workdir))
        out.extend(reversed(self.hops))
        return tuple(out)

    @property
    def hops(self) -> tuple[Hop, ...]:
        """The hops after the transport, outermost first: ``[sudo] [container hop]``."""
        user = self.ssh.user if self.ssh else None
        return ((Sudo(user=user),) if self.sudo else ()) + ((self.hop,) if self.hop else ())

    def redact(self, text: str) -> str:
        """``text`` with the values of secret env variables replaced by ``***``."""
        for name in self.secret_env:
            value = self.env.get(name)
            if value:
                text = text.replace(value, "***")
        return text


LOCAL = HostSpec(name="local")


# -- YAML with line numbers ------------------------------------------------------------------


class _Doc:
    """The composed YAML plus the line of every key path, for error messages."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.lines: dict[tuple[str, ...], int] = {}
        self._scalars = yaml.SafeLoader("")
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise InventoryError(
                f"invalid YAML: {exc.problem or exc}", path=path, line=line
            ) from exc
        except yaml.YAMLError as exc:
            raise InventoryError(f"invalid YAML: {exc}", path=path) from exc
        self.data = self._value(node, ()) if node is not None else {}

    def _value(self, node: yaml.Node, key: tuple[str, ...]) -> Any:
        self.lines.setdefault(key, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    self.fail(key, "keys must be plain names", line=knode.start_mark.line + 1)
                name = str(knode.value)
                if name in out:
                    self.fail((*key, name), "duplicate key", line=knode.start_mark.line + 1)
                self.lines[(*key, name)] = knode.start_mark.line + 1
                out[name] = self._value(vnode, (*key, name))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._value(v, (*key, str(i))) for i, v in enumerate(node.value)]
        return self._scalars.construct_object(node, deep=True)

    def line(self, key: tuple[str, ...]) -> int | None:
        while key and key not in self.lines:
            key = key[:-1]
        return self.lines.get(key)

    def fail(self, key: tuple[str, ...], message: str, *, line: int | None = None) -> Any:
        raise InventoryError(
            message, path=self.path, line=line or self.line(key), key=".".join(key) or None
        )


_SSH_RE = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>\d+))?$"
)


class _HostReader:
    """Validates one host's mapping (defaults merged) into a :class:`HostSpec`."""

    def __init__(self, doc: _Doc, name: str, raw: Mapping[str, Any], key: tuple[str, ...]):
        self.doc, self.name, self.raw, self.key = doc, name, raw, key

    def where(self, k: str) -> tuple[str, ...]:
        # A value inherited from ``defaults`` is reported where it was written.
        own = (*self.key, k)
        return own if own in self.doc.lines else ("defaults", k)

    def get(self, k: str, check: Callable[[Any], bool], what: str) -> Any:
        if k not in self.raw or self.raw[k] is None:
            return None
        value = self.raw[k]
        if not check(value):
            self.doc.fail(self.where(k), f"expected {what}, got {value!r}")
        return value

    def text(self, k: str) -> str | None:
        return self.get(k, lambda v: isinstance(v, str) and v != "", "a non-empty string")

    # -- what a hop reads its keys through (remotekit.layers.Fields) -----------------------

    def has(self, k: str) -> bool:
        return self.raw.get(k) is not None

    def fail(self, k: str, message: str) -> NoReturn:
        self.doc.fail(self.where(k), message)
        raise AssertionError("unreachable")

    def mapping(self, k: str, known: Iterable[str]) -> Fields:
        value = self.raw.get(k)
        if not isinstance(value, dict):
            self.fail(k, "expected a mapping")
        return _Nested(self.doc, value, self.where(k), frozenset(known))

    def hop(self) -> Hop | None:
        """The one container hop this host declares (``remotekit.layers.HOPS``), if any."""
        declared = sorted(
            (k for k in HOPS if self.has(k)), key=lambda k: self.doc.line(self.where(k)) or 0
        )
        if len(declared) > 1:
            first, second = declared[:2]
            self.fail(
                second,
                f"a target has at most one container hop; `{first}:` is already set "
                f"(line {self.doc.line(self.where(first))})",
            )
        hop = HOPS[declared[0]] if declared else None
        for option in _HOP_OPTIONS:  # `pct:` without `container:` is a mistake (not in defaults)
            if (*self.key, option) in self.doc.lines and (hop is None or option not in hop.options):
                owners = " or ".join(f"`{h.key}:`" for h in HOPS.values() if option in h.options)
                self.fail(option, f"`{option}` needs {owners} on this host")
        return hop.read(self) if hop else None

    def ssh(self, value: str, k: str) -> SSHSpec:
        m = _SSH_RE.match(value)
        if not m:
            self.doc.fail(self.where(k), f"expected [user@]host[:port], got {value!r}")
        assert m is not None
        port = int(m["port"]) if m["port"] else self.get("port", _is_port, "a port 1-65535")
        if port is not None and not _is_port(port):
            self.doc.fail(self.where(k), f"port must be 1-65535, got {port}")
        return SSHSpec(
            host=m["v6"] or m["host"],
            user=m["user"] or self.text("user"),
            port=port,
            identity=self.text("identity"),
            known_hosts=self.text("known_hosts"),
            host_key=self.host_key(),
        )

    def host_key(self) -> str:
        policy = self.text("host_key") or "strict"
        if policy not in HOST_KEY_POLICIES:
            self.doc.fail(
                self.where("host_key"),
                f"expected one of {', '.join(HOST_KEY_POLICIES)}, got {policy!r}",
            )
        return policy

    def spec(self) -> HostSpec:
        self.host_key()  # validated even where there is no ssh: yet
        ssh_text = self.text("ssh")
        ssh = self.ssh(ssh_text, "ssh") if ssh_text else None
        jump = self.text("jump")
        if jump:
            if ssh is None:
                self.doc.fail(self.where("jump"), "a jump host needs `ssh:` on the same host")
            assert ssh is not None
            j = self.ssh(jump, "jump")
            ssh = replace(ssh, jump=j)
        env = self.get("env", _is_str_map, "a mapping of NAME: value")
        for var in env or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                self.doc.fail((*self.where("env"), var), "not a valid environment variable name")
        secret = self.get(
            "secret_env",
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "a list of env variable names",
        )
        return HostSpec(
            name=self.name,
            ssh=ssh,
            sudo=Sudo.read(self) is not None,
            hop=self.hop(),
            venv=self.text("venv"),
            python=self.text("python"),
            workdir=self.text("workdir"),
            env={k: _env_text(v) for k, v in (env or {}).items()},
            secret_env=frozenset(secret or ()),
            checkpoints=self.text("checkpoints"),
            timeouts=self.timeouts(),
            source=f"{self.doc.path}:{self.doc.line(self.key)}",
        )

    def timeouts(self) -> Timeouts:
        raw = self.get("timeouts", lambda v: isinstance(v, dict), "a mapping") or {}
        base = Timeouts()
        values: dict[str, Any] = {}
        for k, v in raw.items():
            if k not in Timeouts.__dataclass_fields__:
                self.doc.fail(
                    (*self.where("timeouts"), k),
                    f"unknown timeout; known: {', '.join(Timeouts.__dataclass_fields__)}",
                )
            ok = (v is None and k == "step") or (_is_number(v) and v > 0)
            if not ok:
                self.doc.fail((*self.where("timeouts"), k), f"expected seconds > 0, got {v!r}")
            values[k] = None if v is None else float(v)
        return Timeouts(**{**base.__dict__, **values})


class _Nested:
    """A hop's nested mapping (``slurm: {job: 4242}``): the same checks, keys one level down."""

    def __init__(
        self, doc: _Doc, raw: Mapping[str, Any], key: tuple[str, ...], known: frozenset[str]
    ):
        self.doc, self.raw, self.key = doc, raw, key
        for k in raw:
            if k not in known:
                self.fail(k, f"unknown key; known keys: {', '.join(sorted(known))}")

    def has(self, k: str) -> bool:
        return self.raw.get(k) is not None

    def get(self, k: str, check: Callable[[Any], bool], what: str) -> Any:
        value = self.raw.get(k)
        if value is not None and not check(value):
            self.fail(k, f"expected {what}, got {value!r}")
        return value

    def text(self, k: str) -> str | None:
        return self.get(k, lambda v: isinstance(v, str) and v != "", "a non-empty string")

    def fail(self, k: str, message: str) -> NoReturn:
        self.doc.fail((*self.key, k), message)
        raise AssertionError("unreachable")

    def mapping(self, k: str, known: Iterable[str]) -> Fields:
        value = self.raw.get(k)
        if not isinstance(value, dict):
            self.fail(k, "expected a mapping")
        return _Nested(self.doc, value, (*self.key, k), frozenset(known))


_HOP_OPTIONS = tuple(sorted({o for h in HOPS.values() for o in h.options}))
HOST_KEYS = frozenset(
    [
        "ssh",
        "user",
        "port",
        "identity",
        "known_hosts",
        "host_key",
        "jump",
        "sudo",
        "venv",
        "python",
        "workdir",
        "env",
        "secret_env",
        "checkpoints",
        "timeouts",
        *HOPS,
        *_HOP_OPTIONS,
    ]
)
TOP_KEYS = frozenset({"defaults", "hosts", "groups"})
SSH_ONLY_KEYS = frozenset({"user", "port", "identity", "known_hosts", "host_key", "jump"})


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_port(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536


def _is_str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, (str, int, float, bool)) for x in v.values())


def _env_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


# -- the inventory ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Inventory:
    """Named hosts and groups. ``target(name)`` opens one; ``select`` resolves a selection."""

    hosts: Mapping[str, HostSpec]
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    path: str | None = None

    def spec(self, name: str) -> HostSpec:
        try:
            return self.hosts[name]
        except KeyError:
            raise UnknownHost(name, list(self.hosts), path=self.path) from None

    def target(self, name: str) -> Any:
        """An open-on-demand :class:`~remotekit.target.Target`; use it as a context manager."""
        from remotekit.target import Target

        return Target(self.spec(name))

    def select(
        self, hosts: str | list[str] | None = None, group: str | None = None, all: bool = False
    ) -> list[HostSpec]:
        """Host specs for ``--host a,b``, ``--group g`` or ``--all``, in inventory order."""
        names: list[str] = []
        if all:
            names = list(self.hosts)
        if group:
            if group not in self.groups:
                raise UnknownHost(
                    f"group:{group}", [f"group:{g}" for g in self.groups], path=self.path
                )
            names += self.groups[group]
        if hosts:
            items = hosts.split(",") if isinstance(hosts, str) else hosts
            names += [h.strip() for h in items if h.strip()]
        order = {n: i for i, n in enumerate(self.hosts)}
        unique = sorted(set(names), key=lambda n: order.get(n, len(order)))
        return [self.spec(n) for n in unique]

    def __iter__(self) -> Iterator[HostSpec]:
        return iter(self.hosts.values())


def parse_inventory(text: str, path: str = "<string>") -> Inventory:
    """Parse hosts.yaml text. Raises :class:`InventoryError` naming ``path``, line and key."""
    doc = _Doc(path, text)
    data = doc.data
    if not isinstance(data, dict):
        doc.fail((), "the top level must be a mapping with `hosts:`", line=1)
    for k in data:
        if k not in TOP_KEYS:
            doc.fail((k,), f"unknown top-level key; expected {', '.join(sorted(TOP_KEYS))}")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        doc.fail(("defaults",), "expected a mapping of host keys")
    _check_keys(doc, ("defaults",), defaults)
    raw_hosts = data.get("hosts") or {}
    if not isinstance(raw_hosts, dict):
        doc.fail(("hosts",), "expected a mapping of host names to host settings")
    hosts: dict[str, HostSpec] = {}
    for name, raw in raw_hosts.items():
        key = ("hosts", name)
        raw = raw or {}
        if not isinstance(raw, dict):
            doc.fail(key, "expected a mapping of host settings (or {} for none)")
        _check_keys(doc, key, raw)
        merged = {**defaults, **raw}
        for nested in ("env", "timeouts"):
            if isinstance(defaults.get(nested), dict) and isinstance(raw.get(nested), dict):
                merged[nested] = {**defaults[nested], **raw[nested]}
        spec = _HostReader(doc, name, merged, key).spec()
        if spec.ssh is None:  # SSH settings written on a host without `ssh:` are a mistake
            for k in sorted(SSH_ONLY_KEYS & set(raw), key=lambda k: doc.line((*key, k)) or 0):
                doc.fail((*key, k), f"`{k}` needs `ssh:` on this host (it has no SSH connection)")
        hosts[name] = spec
    if "local" not in hosts:
        hosts = {
            "local": _HostReader(doc, "local", dict(defaults), ("hosts", "local")).spec(),
            **hosts,
        }
    groups: dict[str, tuple[str, ...]] = {}
    raw_groups = data.get("groups") or {}
    if not isinstance(raw_groups, dict):
        doc.fail(("groups",), "expected a mapping of group names to lists of hosts")
    for g, members in raw_groups.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            doc.fail(("groups", g), "expected a list of host names")
        for i, m in enumerate(members):
            if m not in hosts:
                doc.fail(
                    ("groups", g, str(i)),
                    f"unknown host {m!r}; known hosts: {', '.join(hosts)}",
                )
        groups[g] = tuple(members)
    return Inventory(hosts=hosts, groups=groups, path=path)


def _check_keys(doc: _Doc, key: tuple[str, ...], raw: Mapping[str, Any]) -> None:
    for k in raw:
        if k not in HOST_KEYS:
            close = [h for h in sorted(HOST_KEYS) if h[:3] == k[:3]]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            doc.fail((*key, k), f"unknown key{hint}; known keys: {', '.join(sorted(HOST_KEYS))}")


def find_inventory() -> Path | None:
    """$REMOTEKIT_HOSTS, else ./hosts.yaml, else ~/.config/remotekit/hosts.yaml, else None."""
    env = os.environ.get("REMOTEKIT_HOSTS")
    if env:
        return Path(env)
    for p in (Path("hosts.yaml"), Path.home() / ".config" / "remotekit" / "hosts.yaml"):
        if p.is_file():
            return p
    return None


def load_inventory(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Read hosts.yaml (see :func:`find_inventory` when ``path`` is None).

    With no file anywhere, the inventory holds just the embedded ``local`` target.
    """
    p = Path(path) if path is not None else find_inventory()
    if p is None:
        return Inventory(hosts={"local": LOCAL})
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError("file not found", path=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"cannot read: {exc}", path=str(p)) from exc
    return parse_inventory(text, str(p))
