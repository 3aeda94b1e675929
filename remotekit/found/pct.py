"""``pct_list: NODE``: the running containers of a Proxmox node, each entered by ``pct exec``.

hosts.yaml (``name`` and ``tag`` optional; a container must match both)::

    groups:
      cts: {pct_list: pve1, name: "train-*", tag: gpu, pct: /usr/sbin/pct, venv: /opt/venv}

``pct list`` on the node prints (pve-container src/PVE/CLI/pct.pm, ``list``: the format
``%-10s %-10s %-12s %-20s``, rows sorted by VMID, nothing at all when the node has no CT)::

    VMID       Status     Lock         Name
    200        running                 train-0
    201        stopped    backup       web

The name is the CT's hostname (or ``CT<vmid>``) with its whitespace removed; the lock column
is empty for most. A container's tags are its config's ``tags:`` line, which ``pct config
VMID`` prints (``tags: gpu;train``; PVE splits a tag list on ``;``, ``,`` and spaces, and
compares tags without regard to case by default): asked only when ``tag:`` filters, once per
running container whose name matched. Members are named by VMID: ``cts/200``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from remotekit.found.core import Ask, Finder, Found, QueryFailed, refused
from remotekit.layers.core import Fields, is_text, is_whole
from remotekit.layers.pct import VMID_MAX, VMID_MIN, Pct

__all__ = ["PctList"]

#: A Proxmox tag (pve-common PVE::JSONSchema ``$PVE_TAG_RE``).
TAG = re.compile(r"[a-z0-9_][a-z0-9_\-+.]*", re.IGNORECASE)


def _is_tags(v: Any) -> bool:
    tags = v if isinstance(v, list) else [v]
    return bool(tags) and all(isinstance(t, str) and TAG.fullmatch(t) for t in tags)


def _is_glob(v: Any) -> bool:
    return is_text(v) and not re.search(r"[\x00-\x1f\x7f]", v)


@dataclass(frozen=True)
class PctList(Finder):
    """The running containers of Proxmox node ``via`` (``pct list``), by name glob and tags."""

    via: str
    name: str | None = None
    tags: tuple[str, ...] = ()
    pct: str = "pct"

    key: ClassVar[str] = "pct_list"
    options: ClassVar[tuple[str, ...]] = ("name", "tag", "pct")
    via_key: ClassVar[str] = "pct_list"
    nobody: ClassVar[str] = "found no running container"

    @classmethod
    def read(cls, fields: Fields) -> PctList:
        via = fields.get("pct_list", is_text, "the declared host that is the Proxmox node")
        name = fields.get("name", _is_glob, "a name glob (e.g. 'train-*')")
        tag = fields.get("tag", _is_tags, "a Proxmox tag or a list of them (e.g. gpu)")
        tags = tuple(tag if isinstance(tag, list) else [tag]) if tag is not None else ()
        return cls(via, name, tags, fields.text("pct") or "pct")

    @property
    def query(self) -> str:
        only = [f"name {self.name!r}"] if self.name else []
        only += [f"tag {t}" for t in self.tags]
        return f"pct list on {self.via}" + (f" ({', '.join(only)})" if only else "")

    def find(self, ask: Ask) -> list[Found]:
        said = ask((self.pct, "list"))
        if said.code != 0:
            raise refused("pct list", said)
        running = [
            vmid
            for vmid, status, name in rows(said.out)
            if status == "running" and fnmatch.fnmatchcase(name, self.name or "*")
        ]
        if self.tags:
            running = [vmid for vmid in running if self.tagged(ask, vmid)]
        return [Found(str(vmid), Pct(vmid, self.pct)) for vmid in running]

    def tagged(self, ask: Ask, vmid: int) -> bool:
        """Whether CT ``vmid`` has every tag asked for (its config's ``tags:`` line)."""
        said = ask((self.pct, "config", str(vmid)))
        if said.code != 0:
            raise refused(f"pct config {vmid}", said)
        has = set()
        for line in said.out.splitlines():
            if line.startswith("tags:"):
                has = {t.lower() for t in re.split(r"[,;\s]+", line[5:]) if t}
        return {t.lower() for t in self.tags} <= has


def rows(out: str) -> list[tuple[int, str, str]]:
    """``pct list``'s rows as (vmid, status, name); a line it cannot read is refused."""
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        return []  # pct prints nothing, not even the header, when the node has no CT
    if lines[0].split() != ["VMID", "Status", "Lock", "Name"]:
        raise QueryFailed(f"pct list printed no header line; it says:\n  {lines[0][:200]}")
    out_rows = []
    for line in lines[1:]:
        words = line.split()
        if len(words) not in (3, 4) or not is_whole(words[0], VMID_MIN, VMID_MAX):
            raise QueryFailed(f"pct list printed a line that is not a CT:\n  {line[:200]}")
        out_rows.append((int(words[0]), words[1], words[-1]))
    return out_rows
