"""hosts.yaml -> typed host specs (:mod:`remotekit.spec`). Every error names the file, line and key.

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
        jump: root@bastion              # ProxyJump (a list: chained gateways, first first)
        sudo: false
        container: 200                  # one container hop (remotekit.layers.HOPS):
        pct: pct                        #   container/pct, lxc, podman/docker + engine,
                                        #   slurm, kubectl
      trainer:
        ssh: root@pve1
        hops:                           # or a chain of any depth, in order, innermost last;
          - container: 200              #   each item one hop mapping, as the single keys
          - docker: trainer             #   above (not beside them), or `sudo: true | USER`
        venv: /root/venv                # interpreter <venv>/bin/python
        python: python3                 # interpreter when there is no venv
        workdir: /workspace
        env: {HF_HOME: /workspace/hf}
        secret_env: [HF_TOKEN]          # names whose values are never printed
        checkpoints: /workspace/checkpoints
        runs_dir: /workspace/.runs      # run records (default ~/.local/state/remotekit/runs)
        gpus: 8                         # (or gpu: true) no GPU found is then an error, not a note;
                                        # fewer than 8 found, a finding
    groups:
      gpu: [kpro6]
      cts: {pct_list: kpro6, tag: gpu, venv: /opt/venv}   # found at run time (remotekit.found):
      nodes: {slurm_job: 4242, via: login1}             #   running CTs of a Proxmox node, the
      pods: {kubectl_selector: app=trainer, namespace: ml}  # nodes of a job, pods of a selector
    default: gpu                        # what a task runs on without --host/--group/--all
                                        # (a host or a group; without it: local)
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import yaml

from remotekit.engine import mask
from remotekit.errors import InventoryError, UnknownHost
from remotekit.found import FINDERS, MEMBER_KEYS, FoundGroup, Resolved, resolve
from remotekit.layers import HOPS, Fields, Hop, Sudo
from remotekit.layers.core import is_env_name
from remotekit.spec import HOST_KEY_POLICIES, LOCAL, HostSpec, SSHSpec, Timeouts
from remotekit.target import Target

__all__ = [
    "HostSpec",
    "Inventory",
    "Looked",
    "SSHSpec",
    "Timeouts",
    "config_inventory",
    "find_inventory",
    "init_inventory",
    "load_inventory",
    "parse_inventory",
]


# -- YAML with line numbers ------------------------------------------------------------------

# hosts.yaml is a few levels deep; these bounds keep a hostile file from costing more than a
# fraction of a second (alias bombs, deep nesting, recursive aliases).
_MAX_DEPTH = 32  # nested mappings and lists, aliases expanded
_MAX_ALIAS_VALUES = 20_000  # values reached through aliases, all aliases together
_YAML_TAG = "tag:yaml.org,2002:"
_MERGE_TAG = _YAML_TAG + "merge"
_PLAIN_TAGS = frozenset(
    _YAML_TAG + t for t in ("null", "bool", "int", "float", "str", "timestamp", "map", "seq")
)


class _Refused(Exception):
    """Raised by the composer: what is wrong, the line and the key path."""

    def __init__(self, message: str, line: int, key: tuple[str, ...]):
        super().__init__(message)
        self.line, self.key = line, key


class _Alias(yaml.Node):
    """An alias as written (``*name``): the node it names, and the alias's own line."""

    def __init__(self, target: yaml.Node, anchor: str, mark: Any):
        super().__init__(target.tag, target, mark, mark)
        self.anchor = anchor


class _Composer(yaml.SafeLoader):
    """SafeLoader's composer, keeping aliases as written and refusing nesting past the bound.

    PyYAML composes recursively: nesting deep enough to matter to us is refused here, before
    it could reach Python's recursion limit. An alias to a collection that is still open
    (``&a [*a]``) is refused too: it would make the document infinite.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self._path: list[str] = []
        self._open: set[str] = set()

    if TYPE_CHECKING:  # PyYAML's stubs leave it untyped: it is the parser's next event

        def peek_event(self) -> yaml.Event: ...

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        label = index.value if isinstance(index, yaml.ScalarNode) else str(index)
        event = self.peek_event()
        assert event.start_mark is not None  # the parser marks every event it makes
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Refused(
                    f"recursive alias *{event.anchor}: it is used inside the value it names",
                    line,
                    (*self._path, label),
                )
            target = super().compose_node(parent, index)  # or "found undefined alias"
            assert target is not None
            return _Alias(target, str(event.anchor), event.start_mark)
        if not isinstance(event, yaml.CollectionStartEvent):
            return super().compose_node(parent, index)
        if len(self._path) >= _MAX_DEPTH:
            # Named by the host-level key that holds it (a path of 32 list indexes says less).
            where = tuple(self._path[:4])
            raise _Refused(f"nested more than {_MAX_DEPTH} levels deep", line, where)
        self._path.append(label)
        anchors = {event.anchor} if event.anchor is not None else set()
        self._open |= anchors
        try:
            return super().compose_node(parent, index)
        finally:
            self._path.pop()
            self._open -= anchors


class _Doc:
    """The composed YAML plus the line of every key path, for error messages.

    Only plain YAML is read: standard scalars, mappings, lists, anchors, aliases and merge
    keys (``<<: *base``). Aliases are expanded up to a bound (see ``_MAX_ALIAS_VALUES``).
    """

    def __init__(self, path: str, text: str):
        self.path = path
        self.lines: dict[tuple[str, ...], int] = {}
        self._scalars = yaml.SafeLoader("")
        self._aliases: list[tuple[_Alias, tuple[str, ...]]] = []  # being expanded, outermost first
        self._lists: set[tuple[str, ...]] = set()  # key paths holding a list
        self._alias_values = 0
        loader = _Composer(text)
        try:
            node = loader.get_single_node()
        except _Refused as exc:
            self.fail(exc.key[1:], str(exc), line=exc.line)  # [1:]: the document's own label
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise InventoryError(
                f"invalid YAML: {exc.problem or exc}", path=path, line=line
            ) from exc
        except yaml.YAMLError as exc:
            raise InventoryError(f"invalid YAML: {exc}", path=path) from exc
        finally:
            loader.dispose()
        self.data = self._value(node, ()) if node is not None else {}

    def _value(self, node: yaml.Node, key: tuple[str, ...]) -> Any:
        if isinstance(node, _Alias):
            return self._alias(node, key)
        if self._aliases:
            self._alias_values += 1
            if self._alias_values > _MAX_ALIAS_VALUES:
                self._fail_at_alias(
                    f"takes the document past {_MAX_ALIAS_VALUES} values reached through "
                    "aliases (an alias bomb?)"
                )
        self.lines.setdefault(key, node.start_mark.line + 1)
        self._check_tag(node, key)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, key)
        if isinstance(node, yaml.SequenceNode):
            self._lists.add(key)
            return [self._value(v, (*key, str(i))) for i, v in enumerate(node.value)]
        return self._scalar(node, key)

    def _alias(self, alias: _Alias, key: tuple[str, ...]) -> Any:
        self._aliases.append((alias, key))
        # Merge keys expand aliases without adding key levels: bound the aliases too.
        if len(key) > _MAX_DEPTH or len(self._aliases) > _MAX_DEPTH:
            self._fail_at_alias(f"nests values more than {_MAX_DEPTH} levels deep")
        try:
            return self._value(alias.value, key)
        finally:
            self._aliases.pop()

    def _fail_at_alias(self, problem: str) -> NoReturn:
        # Reported where the outermost alias is written: that is the line to change.
        alias, key = self._aliases[0]
        self.fail(key, f"alias *{alias.anchor} {problem}", line=alias.start_mark.line + 1)

    def _mapping(self, node: yaml.MappingNode, key: tuple[str, ...]) -> dict[str, Any]:
        own: dict[str, Any] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.tag == _MERGE_TAG:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                self.fail(key, "keys must be plain names", line=knode.start_mark.line + 1)
            self._check_tag(knode, key)
            name = self._text(str(knode.value), key, knode)
            if name in own:
                self.fail((*key, name), "duplicate key", line=knode.start_mark.line + 1)
            self.lines.setdefault((*key, name), knode.start_mark.line + 1)
            own[name] = self._value(vnode, (*key, name))
        # `<<: *base` or `<<: [*a, *b]`: keys written here win, then the earlier source.
        merged: dict[str, Any] = {}
        for vnode in merges:
            self._check_tag(vnode, (*key, "<<"))
            sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
            for src in sources:
                target = src.value if isinstance(src, _Alias) else src
                if not isinstance(target, yaml.MappingNode):
                    self.fail(
                        (*key, "<<"),
                        "`<<` merges a mapping or a list of mappings",
                        line=src.start_mark.line + 1,
                    )
                for k, v in self._value(src, key).items():
                    if k not in own:
                        merged.setdefault(k, v)
        return {**merged, **own} if merged else own

    def _scalar(self, node: yaml.Node, key: tuple[str, ...]) -> Any:
        try:
            value = self._scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            problem = getattr(exc, "problem", None) or str(exc).split(";")[0]
            self.fail(key, f"cannot read {str(node.value)[:40]!r}: {problem}")
        return self._text(value, key, node) if isinstance(value, str) else value

    def _text(self, value: str, key: tuple[str, ...], node: yaml.Node) -> str:
        if "\0" in value:
            self.fail(
                key,
                "contains a NUL character, which no command line, path or environment "
                "variable can carry",
                line=node.start_mark.line + 1,
            )
        return value

    def _check_tag(self, node: yaml.Node, key: tuple[str, ...]) -> None:
        if node.tag not in _PLAIN_TAGS:
            tag = node.tag.replace(_YAML_TAG, "!!", 1)
            self.fail(
                key,
                f"tag {tag} is not supported: hosts.yaml takes plain strings, numbers, "
                "booleans, lists and mappings",
                line=node.start_mark.line + 1,
            )

    def line(self, key: tuple[str, ...]) -> int | None:
        while key and key not in self.lines:
            key = key[:-1]
        return self.lines.get(key)

    def fail(self, key: tuple[str, ...], message: str, *, line: int | None = None) -> NoReturn:
        raise InventoryError(
            message, path=self.path, line=line or self.line(key), key=self.name(key) or None
        )

    def name(self, key: tuple[str, ...]) -> str:
        """A key path as messages write it: ``hosts.trainer.hops[1].docker``; a place in a
        chain (``hops:``, ``jump:``) is an index, other list items are ``.N``."""
        out = ""
        for i, part in enumerate(key):
            chain = key[:i] in self._lists and key[i - 1] in _CHAINS
            out += f"[{part}]" if chain else f".{part}" if out else part
        return out


#: The keys whose lists are chains: errors name an item by its place, ``hops[1]``.
_CHAINS = frozenset({"hops", "jump"})

_SSH_RE = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>\d+))?$"
)


class _HostReader:
    """Validates one host's mapping (defaults merged) into a :class:`HostSpec`."""

    def __init__(self, doc: _Doc, name: str, raw: Mapping[str, Any], key: tuple[str, ...]):
        self.doc, self.name, self.raw, self.key = doc, name, raw, key
        # What this host's messages must not quote: the values of its ``secret_env`` names,
        # read before either key is checked (a malformed value is still masked).
        names = raw.get("secret_env")
        env = raw.get("env")
        names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
        self.secrets = [env.get(n) for n in names] if isinstance(env, dict) else []

    def where(self, k: str) -> tuple[str, ...]:
        # A value inherited from ``defaults`` is reported where it was written.
        own = (*self.key, k)
        return own if own in self.doc.lines else ("defaults", k)

    def get(self, k: str, check: Callable[[Any], bool], what: str) -> Any:
        if k not in self.raw or self.raw[k] is None:
            return None
        value = self.raw[k]
        if not check(value):
            self.fail(k, f"expected {what}, got {value!r}")
        return value

    def text(self, k: str) -> str | None:
        value: str | None = self.get(
            k, lambda v: isinstance(v, str) and v != "", "a non-empty string"
        )
        return value

    # -- what a hop reads its keys through (remotekit.layers.Fields) -----------------------

    def has(self, k: str) -> bool:
        return self.raw.get(k) is not None

    def fail(self, k: str, message: str) -> NoReturn:
        self.fail_at(self.where(k), message)

    def fail_at(self, key: tuple[str, ...], message: str) -> NoReturn:
        """Every error of this host leaves here, its secret values masked."""
        self.doc.fail(key, mask(message, self.secrets))

    def mapping(self, k: str, known: Iterable[str]) -> Fields:
        value = self.raw.get(k)
        if not isinstance(value, dict):
            self.fail(k, "expected a mapping")
        return _Nested(self.doc, value, self.where(k), frozenset(known))

    def hops(self, ssh: SSHSpec | None) -> tuple[Hop, ...]:
        """The chain after the transport: ``hops:`` in order, or the single keys as a chain
        of one or two (``[sudo] [container hop]``); never both."""
        if self.raw.get("hops") is None:
            # another user, or sudo inside a container: an item of `hops:` says where
            self.get(
                "sudo",
                lambda v: isinstance(v, bool),
                "true or false (sudo -u USER "
                "at a depth of the chain: an item `- sudo: USER` of `hops:`)",
            )
            sudo = Sudo.read(self)
            hop = self.hop()
            asker = ssh.user if ssh else None
            return ((replace(sudo, user=asker),) if sudo else ()) + ((hop,) if hop else ())
        single = [k for k in _CHAIN_KEYS if self.raw.get(k) not in (None, False)]
        if single:
            k = min(single, key=lambda k: self.doc.line(self.where(k)) or 0)
            self.fail(
                k,
                f"`{k}:` cannot be set beside `hops:` (line {self.doc.line(self.where('hops'))}): "
                "the list holds the whole chain; move it into the list as an item",
            )
        items = self.raw["hops"]
        if not isinstance(items, list):
            self.fail("hops", "expected a list of hops, each a mapping such as {container: 200}")
        chain = []
        for i, item in enumerate(items):
            hop = self.chain_item(i, item)
            if isinstance(hop, Sudo) and i == 0:
                hop = replace(hop, user=ssh.user if ssh else None)
            chain.append(hop)
        return tuple(chain)

    def hop_sources(self, chain: tuple[Hop, ...]) -> tuple[str, ...]:
        """``path:line`` where each hop of ``chain`` has its executable set (its ``pct:``
        key, else the hop's own key: the default tool was meant)."""

        def own(hop: Hop) -> tuple[str, ...]:  # `pct:` beside `container:`; `lxc: {bin: ...}`
            top = hop.exe_key in hop.options or hop.exe_key == hop.key
            return (hop.exe_key,) if top else (hop.key, hop.exe_key)

        if self.raw.get("hops") is None:
            keys = [
                (*self.where(own(h)[0]), *own(h)[1:]) if self.has(own(h)[0]) else self.where(h.key)
                for h in chain
            ]
        else:
            keys = [(*self.where("hops"), str(i), *own(h)) for i, h in enumerate(chain)]
        return tuple(f"{self.doc.path}:{self.doc.line(k)}" for k in keys)

    def chain_item(self, i: int, item: Any) -> Hop:
        """Item ``i`` of ``hops:``: one hop mapping, read by its hop as a host's keys are."""
        where = (*self.where("hops"), str(i))
        keys = ", ".join(f"`{k}:`" for k in _CHAIN_HOPS)
        if not isinstance(item, dict):
            self.fail_at(where, f"expected a hop mapping with one of {keys}, got {item!r}")
        named = [k for k in item if k in _CHAIN_HOPS]
        if not named:
            unknown = next(iter(item), "")
            hint = _did_you_mean(unknown, _CHAIN_HOPS) if unknown else ""
            self.fail_at(where, f"names no hop{hint}: each item has one of {keys}")
        if len(named) > 1:
            self.fail_at(
                (*where, named[1]),
                f"one hop per item: `{named[0]}:` is already this item's hop; "
                "make the next one an item of its own",
            )
        kind = _CHAIN_HOPS[named[0]]
        hop = kind.read(_Nested(self.doc, item, where, frozenset({kind.key, *kind.options})))
        if hop is None:  # `sudo: false`
            self.fail_at((*where, kind.key), "a hop in the list must be on (leave it out instead)")
        return hop

    def hop(self) -> Hop | None:
        """The one container hop this host declares (``remotekit.layers.HOPS``), if any."""
        declared = sorted(
            (k for k in HOPS if self.has(k)), key=lambda k: self.doc.line(self.where(k)) or 0
        )
        if len(declared) > 1:
            first, second = declared[:2]
            self.fail(
                second,
                f"a target has at most one container hop beside `ssh:`; `{first}:` is already "
                f"set (line {self.doc.line(self.where(first))}); a chain of them is a `hops:` "
                "list, outermost first",
            )
        hop = HOPS[declared[0]] if declared else None
        for option in _HOP_OPTIONS:  # `pct:` without `container:` is a mistake (not in defaults)
            if (*self.key, option) in self.doc.lines and (hop is None or option not in hop.options):
                owners = " or ".join(f"`{h.key}:`" for h in HOPS.values() if option in h.options)
                self.fail(option, f"`{option}` needs {owners} on this host")
        return hop.read(self) if hop else None

    def ssh(self, value: str, where: tuple[str, ...]) -> SSHSpec:
        m = _SSH_RE.match(value) if isinstance(value, str) else None
        if not m:
            self.fail_at(where, f"expected [user@]host[:port], got {value!r}")
        assert m is not None
        port = int(m["port"]) if m["port"] else self.get("port", _is_port, "a port 1-65535")
        if port is not None and not _is_port(port):
            self.fail_at(where, f"port must be 1-65535, got {port}")
        return SSHSpec(
            host=m["v6"] or m["host"],
            user=m["user"] or self.text("user"),
            port=port,
            identity=self.text("identity"),
            known_hosts=self.text("known_hosts"),
            host_key=self.host_key(),
        )

    def jump(self) -> SSHSpec | None:
        """``jump:`` (ProxyJump): one gateway, or a list of them, the first reached first;
        each is reached through the one before (its ``jump``)."""
        raw = self.raw.get("jump")
        if raw is None:
            return None
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            self.fail("jump", "expected [user@]host[:port] or a non-empty list of them")
        gateway = None
        for i, item in enumerate(items):
            where = (*self.where("jump"), str(i)) if isinstance(raw, list) else self.where("jump")
            gateway = replace(self.ssh(item, where), jump=gateway)
        return gateway

    def host_key(self) -> str:
        policy = self.text("host_key") or "strict"
        if policy not in HOST_KEY_POLICIES:
            self.fail_at(
                self.where("host_key"),
                f"expected one of {', '.join(HOST_KEY_POLICIES)}, got {policy!r}",
            )
        return policy

    def spec(self, hops: bool = True) -> HostSpec:
        """The host as declared; ``hops=False``: settings only (a found group's members,
        whose connection and hop are not this mapping's)."""
        self.host_key()  # validated even where there is no ssh: yet
        ssh_text = self.text("ssh")
        ssh = self.ssh(ssh_text, self.where("ssh")) if ssh_text else None
        if ssh is not None:
            ssh = replace(ssh, jump=self.jump())
        elif self.raw.get("jump") is not None:
            self.fail_at(self.where("jump"), "a jump host needs `ssh:` on the same host")
        secret = self.get(
            "secret_env",
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "a list of env variable names",
        )
        env = self.env()
        chain = self.hops(ssh) if hops else ()
        return HostSpec(
            name=self.name,
            ssh=ssh,
            hops=chain,
            hop_sources=self.hop_sources(chain),
            venv=self.text("venv"),
            python=self.text("python"),
            workdir=self.text("workdir"),
            env={k: _env_text(v) for k, v in (env or {}).items()},
            secret_env=frozenset(secret or ()),
            checkpoints=self.text("checkpoints"),
            runs_dir=self.text("runs_dir"),
            has_gpu=self.has_gpu(),
            gpus=self.gpus(),
            timeouts=self.timeouts(),
            agent=self.get("agent", lambda v: isinstance(v, bool), "true or false") is not False,
            source=f"{self.doc.path}:{self.doc.line(self.key)}",
        )

    def gpus(self) -> int:
        """``gpus: N``, the GPUs the host has (0: not said)."""
        gpus = self.get("gpus", lambda v: _is_number(v) and v >= 0 and v == int(v), "a count >= 0")
        return int(gpus or 0)

    def has_gpu(self) -> bool:
        """``gpus: N`` (N > 0) or ``gpu: true``."""
        gpu = self.get("gpu", lambda v: isinstance(v, bool), "true or false")
        return bool(self.gpus()) or bool(gpu)

    def env(self) -> dict[str, Any]:
        """``env:`` checked variable by variable; a message never quotes a secret's value."""
        raw = self.raw.get("env")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.fail("env", f"expected a mapping of NAME: value, got {type(raw).__name__}")
        for var, value in raw.items():
            where = (*self.where("env"), str(var))
            if not is_env_name(var):
                self.fail_at(where, "not a valid environment variable name")
            if not isinstance(value, (str, int, float, bool)):
                got = f"{type(value).__name__} {value!r}"
                self.fail_at(where, f"expected a string, number or boolean, got {got}")
        return raw

    def timeouts(self) -> Timeouts:
        raw = self.get("timeouts", lambda v: isinstance(v, dict), "a mapping") or {}
        base = Timeouts()
        values: dict[str, Any] = {}
        for k, v in raw.items():
            if k not in Timeouts.__dataclass_fields__:
                self.fail_at(
                    (*self.where("timeouts"), k),
                    f"unknown timeout{_did_you_mean(k, Timeouts.__dataclass_fields__)}; "
                    f"known: {', '.join(Timeouts.__dataclass_fields__)}",
                )
            # Finite and bounded: every wait (select, queue, thread join) takes it as is.
            top = _TIMEOUT_MAX_S[k]
            ok = (v is None and k == "step") or (_is_number(v) and 0 < v <= top)
            if not ok:
                none = " (or null for no limit)" if k == "step" else ""
                self.fail_at(
                    (*self.where("timeouts"), k),
                    f"expected seconds > 0 and <= {top:.0f}{none}, got {v!r}",
                )
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
                self.fail(
                    k,
                    f"unknown key{_did_you_mean(k, known)}; known keys: {', '.join(sorted(known))}",
                )

    def has(self, k: str) -> bool:
        return self.raw.get(k) is not None

    def get(self, k: str, check: Callable[[Any], bool], what: str) -> Any:
        value = self.raw.get(k)
        if value is not None and not check(value):
            self.fail(k, f"expected {what}, got {value!r}")
        return value

    def text(self, k: str) -> str | None:
        value: str | None = self.get(
            k, lambda v: isinstance(v, str) and v != "", "a non-empty string"
        )
        return value

    def fail(self, k: str, message: str) -> NoReturn:
        self.doc.fail((*self.key, k), message)
        raise AssertionError("unreachable")

    def mapping(self, k: str, known: Iterable[str]) -> Fields:
        value = self.raw.get(k)
        if not isinstance(value, dict):
            self.fail(k, "expected a mapping")
        return _Nested(self.doc, value, (*self.key, k), frozenset(known))


_HOP_OPTIONS = tuple(sorted({o for h in HOPS.values() for o in h.options}))
#: What an item of ``hops:`` may name: a container hop, or sudo at that depth.
_CHAIN_HOPS: dict[str, type[Hop]] = {Sudo.key: Sudo, **HOPS}
#: The single keys that ``hops:`` replaces (they may not stand beside it).
_CHAIN_KEYS = (*_CHAIN_HOPS, *_HOP_OPTIONS)
HOST_KEYS = frozenset(
    [
        "ssh",
        "user",
        "port",
        "identity",
        "known_hosts",
        "host_key",
        "jump",
        "hops",
        "sudo",
        *MEMBER_KEYS,  # what a found group may set for its members: declared once, there
        *HOPS,
        *_HOP_OPTIONS,
    ]
)
TOP_KEYS = frozenset({"default", "defaults", "hosts", "groups"})
SSH_ONLY_KEYS = frozenset({"user", "port", "identity", "known_hosts", "host_key", "jump"})


_TIMEOUT_MAX_S = {"connect": 3600.0, "step": 30 * 86400.0, "kill_grace": 3600.0}
# Host and group names are typed in `--host a,b` / `--group g` and shown in tables and
# output prefixes: no separators, spaces, quotes or control characters, no leading `-`.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_port(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536


def _env_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


# -- the inventory ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Inventory:
    """Named hosts and groups. ``target(name)`` opens one; ``select`` resolves a selection.

    ``groups`` are the listed groups (host names); ``found`` the groups found at run time
    (:mod:`remotekit.found`), whose members ``select`` and :meth:`resolve` ask the cluster for.
    """

    hosts: Mapping[str, HostSpec]
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    path: str | None = None
    #: hosts.yaml's ``default:``, a host or group name; None: ``local``.
    default: str | None = None
    found: Mapping[str, FoundGroup] = field(default_factory=dict)
    #: Where :func:`load_inventory` looked for hosts.yaml, in order (empty: it was named).
    looked: tuple[Looked, ...] = ()

    def spec(self, name: str) -> HostSpec:
        """The declared host ``name``; an :class:`UnknownHost` listing the known ones if none."""
        try:
            return self.hosts[name]
        except KeyError:
            raise self._unknown(name, list(self.hosts)) from None

    def _unknown(self, name: str, known: list[str]) -> UnknownHost:
        """An :class:`UnknownHost` that says which hosts.yaml was read, and where it was
        looked for: a target missing from the file the user edited is most often a file
        that was not read (another folder, or one found before it)."""
        return UnknownHost(name, known, path=self.path, looked=looked_text(self.looked))

    def target(self, name: str, *, agent: bool | None = None) -> Target:
        """An open-on-demand :class:`~remotekit.target.Target`; use it as a context manager.
        ``agent`` overrides hosts.yaml's ``agent:`` (steps through one resident agent).
        ``name`` may be a found group's member, ``GROUP/MEMBER`` (the group is asked)."""
        if "/" in name:
            return Target(self.select(hosts=[name])[0], agent=agent)
        return Target(self.spec(name), agent=agent)

    def resolve(self, group: str) -> Resolved:
        """Ask the cluster for found group ``group``'s members, now (each call asks again).

        Raises :class:`~remotekit.errors.GroupError` naming the group, the query and the
        cause when the query fails or finds no one; :class:`UnknownHost` for a group that is
        not a found one.
        """
        if group not in self.found:
            known = [f"group:{g}" for g in self.found]
            raise self._unknown(f"group:{group}", known)
        return resolve(self.found[group])

    def select(
        self, hosts: str | list[str] | None = None, group: str | None = None, all: bool = False
    ) -> list[HostSpec]:
        """Host specs for ``--host a,b``, ``--group g`` or ``--all``: the declared hosts in
        inventory order, then the members of found groups as found. ``--all`` is every
        declared host; a found group's members are selected by its name (``--group cts``),
        or one by one (``--host cts/200``), and asked for each time."""
        names: list[str] = []
        if all:
            names = list(self.hosts)
        if group:
            if group in self.found:
                names.append(f"{group}/")
            elif group in self.groups:
                names += self.groups[group]
            else:
                known = [f"group:{g}" for g in (*self.groups, *self.found)]
                raise self._unknown(f"group:{group}", known)
        if hosts:
            items = hosts.split(",") if isinstance(hosts, str) else hosts
            names += [h.strip() for h in items if h.strip()]
        order = {n: i for i, n in enumerate(self.hosts)}
        declared = sorted(
            {n for n in names if "/" not in n}, key=lambda n: order.get(n, len(order))
        )
        return [self.spec(n) for n in declared] + self._found_members(n for n in names if "/" in n)

    def _found_members(self, names: Iterable[str]) -> list[HostSpec]:
        """The members named ``GROUP/MEMBER`` (``GROUP/``: all of them), each group asked
        once, in the order the groups are first named and the members found."""
        wanted: dict[str, set[str] | None] = {}
        for name in names:
            group, _, member = name.partition("/")
            if group not in self.found:
                known = [*self.hosts, *(f"{g}/..." for g in self.found)]
                raise self._unknown(name, known)
            have = wanted.setdefault(group, set())
            if have is not None:
                wanted[group] = None if not member else {*have, member}
        out: list[HostSpec] = []
        for group, only in wanted.items():
            members = self.resolve(group).members
            if only is not None:
                missing = sorted(only - {m.name.partition("/")[2] for m in members})
                if missing:
                    raise UnknownHost(f"{group}/{missing[0]}", [m.name for m in members])
                members = tuple(m for m in members if m.name.partition("/")[2] in only)
            out += [m for m in members if m.name not in {o.name for o in out}]
        return out

    def select_default(self) -> list[HostSpec]:
        """What a task runs on when given no selection: ``default:`` (a host, else a group),
        else ``local``."""
        name = self.default or "local"
        if name in self.hosts:
            return [self.spec(name)]
        return self.select(group=name)

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
        _check_name(doc, key, "host")
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
    groups, found = _groups(doc, data.get("groups") or {}, hosts, defaults)
    default = data.get("default")
    every = {*hosts, *groups, *found}
    if default is not None and (not isinstance(default, str) or default not in every):
        known = ", ".join([*hosts, *(f"{g} (group)" for g in (*groups, *found))])
        doc.fail(("default",), f"expected a host or group name; known: {known}")
    return Inventory(hosts=hosts, groups=groups, path=path, default=default, found=found)


def _groups(
    doc: _Doc, raw_groups: Any, hosts: Mapping[str, HostSpec], defaults: Mapping[str, Any]
) -> tuple[dict[str, tuple[str, ...]], dict[str, FoundGroup]]:
    """``groups:``: the listed groups (host names), and the found ones (a query)."""
    groups: dict[str, tuple[str, ...]] = {}
    found: dict[str, FoundGroup] = {}
    if not isinstance(raw_groups, dict):
        doc.fail(("groups",), "expected a mapping of group names to lists of hosts")
    for g, members in raw_groups.items():
        _check_name(doc, ("groups", g), "group")
        if isinstance(members, dict):
            found[g] = _found_group(doc, g, members, hosts, defaults)
            continue
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            doc.fail(
                ("groups", g),
                f"expected a list of host names, or a query ({', '.join(FINDERS)})",
            )
        for i, m in enumerate(members):
            if m not in hosts:
                doc.fail(
                    ("groups", g, str(i)),
                    f"unknown host {m!r}; known hosts: {', '.join(hosts)}",
                )
        groups[g] = tuple(members)
    return groups, found


def _found_group(
    doc: _Doc,
    g: str,
    raw: Mapping[str, Any],
    hosts: Mapping[str, HostSpec],
    defaults: Mapping[str, Any],
) -> FoundGroup:
    """A group found at run time (``{pct_list: pve1, ...}``): its finder, its via host and
    what its members are (the via host's connection, the group's settings)."""
    key = ("groups", g)
    kinds = sorted(
        (k for k in FINDERS if raw.get(k) is not None), key=lambda k: doc.line((*key, k)) or 0
    )
    if len(kinds) != 1:
        what = "names two queries" if kinds else "is a mapping, so it needs a query"
        doc.fail((*key, *kinds[1:2]), f"a found group {what}: one of {', '.join(FINDERS)}")
    finder_type = FINDERS[kinds[0]]
    own = frozenset({finder_type.key, *finder_type.options})
    for k in raw:
        if k not in own | MEMBER_KEYS:
            hint = _did_you_mean(k, own | MEMBER_KEYS)
            known = ", ".join(sorted(own | MEMBER_KEYS))
            doc.fail((*key, k), f"unknown key for a {finder_type.key} group{hint}; known: {known}")
    finder = finder_type.read(_Nested(doc, {k: v for k, v in raw.items() if k in own}, key, own))
    via = hosts.get(finder.via)
    where = (*key, finder_type.via_key)
    if via is None:
        doc.fail(where, f"unknown host {finder.via!r}; known hosts: {', '.join(hosts)}")
    settings = {k: v for k, v in {**defaults, **raw}.items() if k in MEMBER_KEYS}
    for nested in ("env", "timeouts"):
        if isinstance(defaults.get(nested), dict) and isinstance(raw.get(nested), dict):
            settings[nested] = {**defaults[nested], **raw[nested]}
    member = _HostReader(doc, g, settings, key).spec(hops=False)
    member = replace(member, ssh=via.ssh)  # its chain: via's hops + the found hop
    return FoundGroup(g, finder, via, member, source=f"{doc.path}:{doc.line(key)}")


def _check_keys(doc: _Doc, key: tuple[str, ...], raw: Mapping[str, Any]) -> None:
    for k in raw:
        if k not in HOST_KEYS:
            hint = _did_you_mean(k, HOST_KEYS)
            doc.fail((*key, k), f"unknown key{hint}; known keys: {', '.join(sorted(HOST_KEYS))}")


def _did_you_mean(key: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a mistyped ``key``, or ""."""
    names = sorted(known)
    text = str(key)
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    close = close or [n for n in names if n[:3] == text[:3]]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_name(doc: _Doc, key: tuple[str, ...], what: str) -> None:
    if not _NAME_RE.fullmatch(key[-1]):
        doc.fail(
            key,
            f"{what} name {key[-1]!r} cannot be used: a name is 1-64 letters, digits, "
            f"'_', '.' or '-', not starting with '.' or '-' (it is typed in --{what} a,b)",
        )


#: The environment variable that names the hosts.yaml to read, before any other.
HOSTS_ENV = "REMOTEKIT_HOSTS"
#: The starting hosts.yaml that ``remotekit hosts --init`` writes (it loads as is).
STARTER = Path(__file__).with_name("hosts_starter.yaml")


@dataclass(frozen=True)
class Looked:
    """One place hosts.yaml is looked for, in :func:`find_inventory`'s order, and what was
    there: ``read``, ``no file``, ``not set`` (the variable), ``also there, not read`` (a
    file after the one read: the first one found wins)."""

    place: str  # $REMOTEKIT_HOSTS or a path (absolute: ./hosts.yaml depends on the folder)
    state: str

    def __str__(self) -> str:
        return f"{self.place} ({self.state})"


def config_inventory() -> Path:
    """The user's own hosts.yaml: ``$XDG_CONFIG_HOME/remotekit/hosts.yaml``, else under
    ``~/.config`` (a relative ``$XDG_CONFIG_HOME`` is ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "remotekit" / "hosts.yaml"


def _places() -> list[Path]:
    """The files looked for after $REMOTEKIT_HOSTS: ./hosts.yaml, the config one, and
    ``~/.config/remotekit/hosts.yaml`` too where $XDG_CONFIG_HOME moves the config one (a file
    written there before remotekit read $XDG_CONFIG_HOME is still read)."""
    places = [Path.cwd() / "hosts.yaml", config_inventory()]
    home = Path.home() / ".config" / "remotekit" / "hosts.yaml"
    return places if home in places else [*places, home]


def search_inventory() -> tuple[Path | None, tuple[Looked, ...]]:
    """The hosts.yaml to read (None: none anywhere) and every place looked at, in order."""
    env = os.environ.get(HOSTS_ENV)
    if env:
        return Path(env), (Looked(f"${HOSTS_ENV}={env}", "read"),)
    looked = [Looked(f"${HOSTS_ENV}", "not set")]
    chosen: Path | None = None
    for p in _places():
        if p.is_file():
            looked.append(Looked(str(p), "also there, not read" if chosen else "read"))
            chosen = chosen or p
        elif chosen is None:
            looked.append(Looked(str(p), "no file"))
    return chosen, tuple(looked)


def find_inventory() -> Path | None:
    """$REMOTEKIT_HOSTS, else ./hosts.yaml, else ``$XDG_CONFIG_HOME/remotekit/hosts.yaml``
    (``~/.config``), else None."""
    return search_inventory()[0]


def looked_text(looked: Iterable[Looked]) -> str:
    """``looked`` as one clause for a message; empty when hosts.yaml was named."""
    looked = tuple(looked)
    if not looked:
        return ""
    if not any(x.state == "read" for x in looked):
        return (
            f"no hosts.yaml found, looked for: {', '.join(map(str, looked))}; "
            f"`remotekit hosts --init` writes a starting one to {config_inventory()}"
        )
    return f"hosts.yaml looked for: {', '.join(map(str, looked))}"


def load_inventory(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Read hosts.yaml (see :func:`find_inventory` when ``path`` is None; the inventory's
    ``looked`` then says where it looked).

    With no file anywhere, the inventory holds just the embedded ``local`` target.
    """
    looked: tuple[Looked, ...] = ()
    p = Path(path) if path is not None else None
    if p is None:
        p, looked = search_inventory()
    if p is None:
        return Inventory(hosts={"local": LOCAL}, looked=looked)
    try:
        with open(p, "rb") as f:
            _check_writers(str(p), os.fstat(f.fileno()))
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        named = f" (named by ${HOSTS_ENV})" if path is None else ""
        raise InventoryError(f"file not found{named}", path=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"cannot read: {exc}", path=str(p)) from exc
    return replace(parse_inventory(text, str(p)), looked=looked)


def init_inventory(path: str | os.PathLike[str] | None = None) -> Path:
    """Write the starting hosts.yaml (:data:`STARTER`: ``local``, and commented examples of
    every hop) to ``path``, else :func:`config_inventory`; its folders are made private
    (0700) and the file too (0600), as ssh keeps ``~/.ssh``. An existing file is never
    overwritten: :class:`InventoryError` says so. Returns the path written."""
    p = Path(path) if path is not None else config_inventory()
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InventoryError(
            "already exists; remotekit leaves it as it is: edit it, or move it away first",
            path=str(p),
        ) from None
    except OSError as exc:
        raise InventoryError(f"cannot write: {exc.strerror or exc}", path=str(p)) from exc
    with os.fdopen(fd, "wb") as f:
        f.write(STARTER.read_bytes())
    return p


def _check_writers(path: str, st: os.stat_result) -> None:
    """Refuse a hosts.yaml that others may write: it decides what runs, and where.

    OpenSSH's rule for ``~/.ssh/config``: no write bit for others, nor for the group, except
    (as Debian's OpenSSH allows) a user-private group whose only member is the file's owner,
    which is what ``umask 002`` gives on such systems. Read bits are fine: the file names
    hosts, and a secret written in it is the owner's choice. By mode bits, so root too.
    """
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o002 and not (mode & 0o020 and not _private_group(st)):
        return
    who = "everyone" if mode & 0o002 else "its group"
    raise InventoryError(
        f"mode {mode:04o} lets {who} write it, and it decides what runs on your hosts; "
        f"remotekit refuses it, as ssh refuses such a ~/.ssh/config. Fix it with\n"
        f"  chmod go-w {shlex.quote(path)}",
        path=path,
    )


def _private_group(st: os.stat_result) -> bool:
    """Whether the file's group is its owner's own: their primary group, with no one else."""
    try:
        import grp
        import pwd

        owner = pwd.getpwuid(st.st_uid)
        group = grp.getgrgid(st.st_gid)
    except (ImportError, KeyError):
        return False
    return owner.pw_gid == st.st_gid and set(group.gr_mem) <= {owner.pw_name}
