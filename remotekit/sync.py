"""Push a local directory into a target: only what changed travels, in a few steps.

``target.sync("src", "/workspace/code")`` makes DEST hold what SRC holds (the *contents* of
SRC, as ``rsync -a SRC/ DEST`` does), through every layer of the target:

1. **list** (one step): the shipped ``remote/sync.py`` lists DEST (path, kind, size, mtime_ns,
   mode, link target), skipping excluded paths. DEST is created later if it is missing.
2. **hash** (one step, only when needed): files whose size matches but mtime does not are
   hashed (SHA-256) on both sides; equal content only gets its mtime and mode set.
3. **apply** (one step per batch of at most :data:`BATCH_BYTES` of bodies): the changed files
   stream as the runner's shipped files (read here in 1 MiB chunks, written through there,
   so memory stays bounded for any file size); the script there installs each one atomically
   (temp file in the same directory, fsync, chmod, utime, rename), creates directories and
   symlinks, removes what ``delete=True`` asks for, and sets modes.

Rules: regular files, directories and symlinks are synced (symlinks as links, never
followed, on either side); other kinds (FIFOs, sockets, devices) are skipped and named in
:attr:`SyncResult.skipped`. Modes are the source's permission bits (``0o777``; setuid, setgid
and sticky are never set), directory mtimes are not kept. Without ``delete=True`` nothing is
removed there, and a path that is a directory on one side but not on the other is refused.
Excludes are ``.gitignore``-style patterns (see :class:`remotekit.remote.sync.Excludes`), applied to
both trees; excluded paths there are never deleted. No ``.gitignore`` is read implicitly:
pass its lines (``read_patterns(".gitignore")``) or ``--exclude-from .gitignore`` to use one.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from remotekit import shipping
from remotekit.engine import Engine
from remotekit.errors import RemotekitError, quote_tool
from remotekit.remote import sync as wire
from remotekit.result import Shown, clip
from remotekit.step import StepHeader, StepRequest, run_step

__all__ = [
    "BATCH_BYTES",
    "ProgressCallback",
    "SyncResult",
    "host_path",
    "pull",
    "read_patterns",
    "sync",
]

#: ``on_progress(bytes_done, bytes_total)`` of the file bodies being sent.
ProgressCallback = Callable[[int, int], None]
#: File bodies per apply step; a larger single file travels alone in its own step.
BATCH_BYTES = 256 << 20
#: Files per apply step (bounds the step's header).
BATCH_FILES = 20_000
_CHUNK = 1 << 20
#: Bodies smaller than this travel concatenated in one shipped file per apply step.
PACK_BELOW = 1 << 20
SCRIPT = "sync.py"


@dataclass(frozen=True)
class Entry:
    """One path of a tree: kind ``f`` file, ``d`` directory, ``l`` symlink, ``o`` other."""

    kind: str
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    link: str = ""


@dataclass(frozen=True, repr=False)
class SyncResult(Shown):
    """What a sync did (or, with ``dry_run``, would do); paths are relative to DEST."""

    host: str
    src: str
    dest: str
    sent: tuple[str, ...]
    deleted: tuple[str, ...]
    unchanged: int
    bytes_sent: int
    #: Files whose content was equal (hash) or whose mode differed: only mtime/mode set.
    touched: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    dirs_created: tuple[str, ...] = ()
    #: Directories ``delete=True`` would remove that still hold entries not listed there
    #: (excluded, or new since the listing): left in place with those, not in :attr:`deleted`.
    kept: tuple[str, ...] = ()
    #: Local paths not synced: not a file/dir/link, unreadable, or changed while read.
    skipped: tuple[str, ...] = ()
    #: Paths there that could not be listed (``rel: why``).
    unlisted: tuple[str, ...] = ()
    #: With ``delete=True``: why nothing was deleted. A listing with errors (of SRC or of
    #: DEST) is a partial view, and a path missing from it may only be unreadable, so it
    #: never drives a deletion (rsync: "IO error encountered -- skipping file deletion").
    delete_refused: str = ""
    hashed: int = 0
    steps: int = 0
    dry_run: bool = False
    duration_s: float = 0.0
    errors: tuple[str, ...] = field(default=())
    #: The files came from there to here (``src`` is the path there, ``dest`` the local one).
    pulled: bool = False

    @property
    def partial(self) -> tuple[str, ...]:
        """A line for each path there that could not be listed, and one saying why nothing
        was deleted (empty when both listings were whole)."""
        refused = (f"nothing deleted: {self.delete_refused}",) if self.delete_refused else ()
        return (*(f"unlisted there: {u}" for u in self.unlisted), *refused)

    @property
    def findings(self) -> tuple[str, ...]:
        return self.skipped + self.partial

    @property
    def exit_code(self) -> int:
        """0 synced; 1 some paths were skipped or unlisted, or deletion was refused."""
        return 1 if self.findings else 0

    @property
    def changed(self) -> bool:
        return bool(self.sent or self.deleted or self.touched or self.links or self.dirs_created)

    def render(self) -> str:
        """The summary, then each path skipped or unlisted (as ``remotekit sync`` prints)."""
        return "\n".join([self.summary(), *(f"skipped {s}" for s in self.skipped), *self.partial])

    def summary(self) -> str:
        verb = (
            ("would get" if self.dry_run else "got")
            if self.pulled
            else ("would send" if self.dry_run else "sent")
        )
        parts = [
            f"{verb} {len(self.sent)} file(s) ({_size(self.bytes_sent)})",
            f"{len(self.deleted)} deleted" + (" here" if self.pulled else ""),
            f"{self.unchanged} unchanged",
        ]
        if self.touched:
            parts.append(f"{len(self.touched)} metadata-only")
        if self.links:
            parts.append(f"{len(self.links)} link(s)")
        if self.kept:
            parts.append(f"{len(self.kept)} dir(s) kept (still hold unlisted entries)")
        if self.dirs_created:
            parts.append(f"{len(self.dirs_created)} dir(s) created")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        if self.unlisted:
            parts.append(f"{len(self.unlisted)} unlisted there")
        if self.delete_refused:
            parts.append("deletion refused (the listing had errors)")
        return f"{', '.join(parts)} in {self.steps} step(s), {self.duration_s:.2f} s"


def host_path(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``(NAME, PATH)`` when ``path`` is written ``NAME:PATH`` as rsync and scp read it (a
    colon before any slash, after a name); else None: a local path (``./a:b`` is one)."""
    name, colon, rest = os.fspath(path).partition(":")
    return (name, rest) if colon and name and "/" not in name else None


def read_patterns(path: str | os.PathLike[str]) -> list[str]:
    """The lines of an exclude file (e.g. a ``.gitignore``), for ``exclude=``."""
    return Path(path).read_text(encoding="utf-8").splitlines()


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# -- the two trees -------------------------------------------------------------------------------


def local_tree(
    src: Path, excludes: wire.Excludes, skipped: list[str], unread: list[str]
) -> dict[str, Entry]:
    """Everything below ``src`` that is not excluded (symlinks not followed); paths that
    could not be read go to ``unread`` (and ``skipped``): the tree is then partial."""
    tree: dict[str, Entry] = {}

    def on_entry(rel: str, path: str, st: os.stat_result) -> None:
        k = wire.kind(st.st_mode)
        if k == "o":
            skipped.append(f"{rel}: not a regular file, directory or symlink")
            return
        link = os.readlink(path) if k == "l" else ""
        tree[rel] = Entry(k, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), link)

    def on_error(rel: str, msg: str) -> None:
        unread.append(f"{rel}: {msg}")
        skipped.append(f"{rel}: {msg}")

    wire.walk(str(src), excludes, on_entry, on_error)
    return tree


def _records(
    engine: Engine,
    command: str,
    dest: str,
    files: dict[str, bytes],
    step: str,
    timeout: float | None,
    on_record: Callable[[dict[str, Any]], bool] | None = None,
    frames: _Frames | None = None,
) -> list[dict[str, Any]]:
    """The records of one step of the shipped script (lines; ``frames``, read: its frames);
    those ``on_record`` takes (returns True for) are handed to it as they come and not
    kept. A line that is no record of the script's ends the step with an error naming it."""
    records: list[dict[str, Any]] = []
    stray: list[str] = []

    def take(record: Any) -> None:
        record = record if isinstance(record, dict) else {"type": "?"}
        if on_record is None or not on_record(record):
            records.append(record)

    def sink(stream: str, line: str) -> None:
        if stream == "stdout" and line.startswith("{") and frames is None:
            try:
                record = json.loads(line)
            except ValueError:
                raise RemotekitError(
                    f"sync {command} of {dest}: not a record of sync.py: {clip(line, 80)!r}",
                    host=engine.name,
                    step=step,
                ) from None
            take(record)
        elif stream == "stderr":
            stray.append(line)

    args = [command, dest]
    request = StepRequest.script(
        shipping.script(SCRIPT),
        args,
        files=files,
        display=engine.python_display(SCRIPT, args),
        step=step,
        timeout=timeout,
        check=False,
        on_output=sink,
        capture=False,
    )
    if frames is not None:
        request = frames.attach(request, take)
    result = run_step(engine, request)
    if not records or records[-1].get("type") != "done":
        tail = quote_tool(stray)
        raise RemotekitError(
            f"sync {command} of {dest} did not finish (exit {result.exit_code}):\n{tail}",
            host=engine.name,
            step=step,
        )
    if frames is not None:
        frames.close()
    return records


def remote_tree(
    engine: Engine, dest: str, patterns: Sequence[str], timeout: float | None
) -> tuple[bool, dict[str, Entry], list[str]]:
    """(whether DEST exists, its tree, the paths that could not be listed: ``rel: why``);
    raises if DEST is there but not a directory."""
    step = f"sync list {dest}"
    records = _records(
        engine, "list", dest, {"excludes.json": json.dumps(list(patterns)).encode()}, step, timeout
    )
    root = records[0]
    if root.get("exists") and not root.get("dir"):
        raise RemotekitError(
            f"{dest} exists there and is not a directory", host=engine.name, step=step
        )
    try:
        tree = {
            wire.check_rel(row[0]): _entry(row[1:])
            for r in records
            if r.get("type") == "entries"
            for row in r["e"]
        }
    except (wire.Unsafe, TypeError, ValueError, IndexError, KeyError) as exc:
        raise RemotekitError(
            f"the listing of {dest} there is not one sync.py makes: {clip(str(exc), 200)}",
            host=engine.name,
            step=step,
        ) from None
    unlisted = [f"{r['p']}: {r['message']}" for r in records if r.get("type") == "error"]
    return bool(root.get("exists")), tree, unlisted


def _entry(row: Sequence[Any]) -> Entry:
    """A listed path's :class:`Entry`, its fields checked (a pull writes by them here)."""
    kind, size, mtime_ns, mode, *link = row
    ints = (size, mtime_ns, mode)
    if kind not in ("f", "d", "l", "o") or not all(type(i) is int and i >= 0 for i in ints):
        raise ValueError(f"bad entry {row!r}")
    if link and not (len(link) == 1 and isinstance(link[0], str) and "\0" not in link[0]):
        raise ValueError(f"bad link target in {row!r}")
    return Entry(kind, size, mtime_ns, mode, link[0] if link else "")


def remote_root(engine: Engine, path: str, timeout: float | None) -> dict[str, Any]:
    """What the path there is: ``{"exists", "dir", "parent"}`` (one step)."""
    return _records(engine, "stat", path, {}, f"stat {path}", timeout)[0]


def remote_hashes(
    engine: Engine, dest: str, paths: list[str], timeout: float | None
) -> dict[str, str | None]:
    records = _records(
        engine,
        "hash",
        dest,
        {"paths.json": json.dumps(paths).encode()},
        f"sync hash {dest}",
        timeout,
    )
    return {r["p"]: r["h"] for r in records if r.get("type") == "hash"}


def file_hash(path: Path) -> str | None:
    try:
        return wire.file_hash(str(path))
    except OSError:
        return None


# -- the diff ------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What to do there, in the order the script does it."""

    remove: list[str] = field(default_factory=list)
    mkdir: list[str] = field(default_factory=list)
    send: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    meta: list[str] = field(default_factory=list)
    dirmodes: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # to delete, but still holding other entries
    maybe: list[str] = field(default_factory=list)  # size equal, mtime not: hash decides
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # local paths not synced: "rel: why"
    unlisted: list[str] = field(default_factory=list)  # paths there not listed: "rel: why"
    delete_refused: str = ""  # why delete=True was turned off


def diff(
    here: dict[str, Entry],
    there: dict[str, Entry],
    delete: bool,
    dest: str,
    host: str,
    delete_refused: str = "",
) -> Plan:
    """The plan that makes ``there`` hold ``here`` (``maybe`` still to be hashed);
    ``delete_refused`` says why ``delete`` was asked for and turned off."""
    plan = Plan()
    conflicts: list[str] = []
    replaced: list[str] = []  # of another kind there: removed (delete=True) before the new one
    for rel in sorted(here):
        e, r = here[rel], there.get(rel)
        if r is not None and (r.kind == "d") != (e.kind == "d"):
            if not delete:  # either way round, replacing it removes something there
                side = ("there", "here") if r.kind == "d" else ("here", "there")
                conflicts.append(f"{rel} is a directory {side[0]} but not {side[1]}")
                continue
            replaced.append(rel)
            r = None
        if e.kind == "d":
            if r is None:
                plan.mkdir.append(rel)
                plan.dirmodes.append(rel)
            elif r.mode != e.mode & wire.MODE_BITS:  # setgid, sticky are never set there
                plan.dirmodes.append(rel)
        elif e.kind == "l":
            if r is not None and r.kind == "l" and r.link == e.link:
                plan.unchanged += 1
            else:
                plan.links.append(rel)
        elif r is None or r.kind != "f" or r.size != e.size:
            plan.send.append(rel)
        elif r.mtime_ns != e.mtime_ns:
            plan.maybe.append(rel)
        else:
            plan.unchanged += 1
            if r.mode != e.mode & wire.MODE_BITS:
                plan.meta.append(rel)
    if conflicts:
        _refuse(conflicts, dest, host, delete_refused)
    if delete:
        plan.deleted = sorted(replaced + [rel for rel in there if rel not in here])
        # every path by name, deepest first: a directory goes only once empty (rmdir there),
        # so what the listing did not show (excluded or new entries) is never removed
        plan.remove = sorted(plan.deleted, reverse=True)
    plan.dirmodes.reverse()  # deepest first: a read-only dir is closed after its children
    return plan


def _refuse(conflicts: list[str], dest: str, host: str, delete_refused: str = "") -> None:
    shown = "; ".join(conflicts[:5]) + (
        f" (+{len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
    )
    hint = (
        f"not replaced: deletion is off because {delete_refused}"
        if delete_refused
        else "pass delete=True (--delete) to replace it"
    )
    raise RemotekitError(
        f"sync to {dest}: {shown}; {hint}",
        host=host,
        step=f"sync {dest}",
    )


def _decide_hashed(
    plan: Plan, src: Path, theirs: dict[str, str | None], here: dict[str, Entry]
) -> None:
    for rel in plan.maybe:
        h = theirs.get(rel)
        if h is not None and h == file_hash(src / rel):
            plan.meta.append(rel)
            plan.unchanged += 1
        else:
            plan.send.append(rel)


# -- apply ---------------------------------------------------------------------------------------


class _Progress:
    def __init__(self, total: int, callback: ProgressCallback | None):
        self.total = total
        self.done = 0
        self.callback = callback

    def add(self, n: int) -> None:
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)


def _body(path: Path, e: Entry, ok: bytearray, n: int, progress: _Progress) -> Iterator[bytes]:
    """Exactly ``e.size`` bytes of ``path``; zero padding and ``ok[n] = '0'`` if it changed."""
    left = e.size
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        fd = -1
    if fd >= 0:
        with os.fdopen(fd, "rb") as fh:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
                    left -= len(chunk)
                    progress.add(len(chunk))
                    yield chunk
            st = os.fstat(fd)
            if left == 0 and st.st_size == e.size and st.st_mtime_ns == e.mtime_ns:
                ok[n] = ord("1")
    while left > 0:
        pad = min(_CHUNK, left)
        left -= pad
        progress.add(pad)
        yield bytes(pad)


def _batches(send: list[str], here: dict[str, Entry]) -> list[list[str]]:
    batches: list[list[str]] = [[]]
    size = 0
    for rel in send:
        n = here[rel].size
        if batches[-1] and (size + n > BATCH_BYTES or len(batches[-1]) >= BATCH_FILES):
            batches.append([])
            size = 0
        batches[-1].append(rel)
        size += n
    return batches


def _batch_plan(
    batch: list[str], plan: Plan, here: dict[str, Entry], first: bool, last: bool
) -> tuple[list[str], dict[str, Any], int]:
    """(bodies in the order they travel, the step's plan.json, the pack's size).

    Small bodies travel concatenated in one shipped "pack" (one file for the runner to write,
    not thousands); large ones each as their own shipped file (renamed into place there when
    on the same filesystem). The first step also removes, makes dirs, links and sets
    metadata; the last sets directory modes (a read-only dir closes after its children).
    """
    order = [r for r in batch if here[r].size < PACK_BELOW]
    packed = len(order)
    order += [r for r in batch if here[r].size >= PACK_BELOW]
    files: list[list[Any]] = []
    offset = 0
    for n, rel in enumerate(order):
        e = here[rel]
        files.append([rel, n, e.mode, e.mtime_ns] + ([offset, e.size] if n < packed else []))
        offset += e.size if n < packed else 0
    doc: dict[str, Any] = {"files": files}
    if first:
        doc["remove"] = plan.remove
        doc["mkdir"] = [[rel, here[rel].mode] for rel in plan.mkdir]
        doc["links"] = [[rel, here[rel].link] for rel in plan.links]
        doc["meta"] = [[rel, here[rel].mode, here[rel].mtime_ns] for rel in plan.meta]
    if last:
        doc["dirmodes"] = [[rel, here[rel].mode] for rel in plan.dirmodes]
    return order, doc, offset


def _apply(
    engine: Engine,
    src: Path,
    dest: str,
    plan: Plan,
    here: dict[str, Entry],
    progress: _Progress,
    timeout: float | None,
) -> tuple[list[str], list[str]]:
    """Run the apply steps; return (errors there, paths not sent because they changed here).

    Directories not removed because they still hold other entries move from ``plan.deleted``
    to ``plan.kept``."""
    errors: list[str] = []
    changed: list[str] = []
    batches = _batches(plan.send, here)
    script = shipping.source(SCRIPT)
    for i, batch in enumerate(batches):
        order, doc, pack_size = _batch_plan(batch, plan, here, i == 0, i == len(batches) - 1)
        plan_bytes = json.dumps(doc).encode()
        ok = bytearray(b"0" * len(order))
        manifest = [(SCRIPT, len(script), 0o600), ("plan.json", len(plan_bytes), 0o600)]
        manifest.append(("pack", pack_size, 0o600))
        manifest += [(f"d/{f[1]}", here[f[0]].size, 0o600) for f in doc["files"] if len(f) == 4]
        manifest.append(("ok", len(order), 0o600))

        def payload(
            order: list[str] = order, ok: bytearray = ok, p: bytes = plan_bytes
        ) -> Iterator[bytes]:
            yield script
            yield p
            for n, rel in enumerate(order):
                yield from _body(src / rel, here[rel], ok, n, progress)
            yield bytes(ok)  # read only now: the flags of every body above are final

        records = _stream_step(engine, dest, manifest, payload(), timeout)
        errors += [f"{r['p']}: {r['message']}" for r in records if r.get("type") == "error"]
        changed += [rel for n, rel in enumerate(order) if ok[n] != ord("1")]
        plan.kept += sorted(r["p"] for r in records if r.get("type") == "kept")
    kept = set(plan.kept)
    plan.deleted = [rel for rel in plan.deleted if rel not in kept]
    return errors, changed


def _stream_step(
    engine: Engine,
    dest: str,
    manifest: list[tuple[str, int, int]],
    payload: Iterable[bytes],
    timeout: float | None,
) -> list[dict[str, Any]]:
    """One apply step: the script and its files streamed as the runner's shipped files."""
    records: list[dict[str, Any]] = []
    step = f"sync apply {dest}"

    def sink(stream: str, line: str) -> None:
        if stream == "stdout" and line.startswith("{"):
            records.append(json.loads(line))

    request = StepRequest(
        StepHeader(argv=("apply", dest), script=SCRIPT, files=tuple(manifest)),
        display=engine.python_display(SCRIPT, ["apply", dest]),
        step=step,
        payload=payload,
        timeout=timeout,
        check=False,
        on_output=sink,
    )
    result = run_step(engine, request)
    if not records or records[-1].get("type") != "done":
        raise RemotekitError(
            f"sync apply to {dest} did not finish (exit {result.exit_code}):\n"
            + quote_tool(result.stderr or result.stdout),
            host=engine.name,
            step=step,
        )
    return records


# -- the whole sync ------------------------------------------------------------------------------


def sync(
    engine: Engine,
    src: str | os.PathLike[str],
    dest: str,
    *,
    delete: bool = False,
    exclude: Iterable[str] = (),
    dry_run: bool = False,
    on_progress: ProgressCallback | None = None,
    timeout: float | None = None,
) -> SyncResult:
    """Make ``dest`` there hold the contents of the local directory ``src`` (see the module doc).

    Raises :class:`RemotekitError` when ``src`` is not a directory, when ``dest`` there is
    not a directory, on a directory-vs-file conflict without ``delete``, and when some
    paths could not be written there (the message names each; the others were synced).
    """
    started = time.monotonic()
    root = _checked(engine, src, dest)
    plan, here, exists, steps = _plan(engine, root, dest, list(exclude), delete, timeout)
    progress = _Progress(sum(here[rel].size for rel in plan.send), on_progress)
    errors: list[str] = []
    changed: list[str] = []
    work = (plan.remove, plan.mkdir, plan.send, plan.links, plan.meta, plan.dirmodes)
    if (not exists or any(work)) and not dry_run:
        errors, changed = _apply(engine, root, dest, plan, here, progress, timeout)
        steps += len(_batches(plan.send, here))
    result = _result(
        engine, plan, here, (str(root), dest), changed, errors, steps, dry_run, started
    )
    if errors:
        _unwritten(engine, dest, errors)
    return result


def _result(
    engine: Engine,
    plan: Plan,
    tree: dict[str, Entry],
    sides: tuple[str, str],
    changed: list[str],
    errors: list[str],
    steps: int,
    dry_run: bool,
    started: float,
    pulled: bool = False,
) -> SyncResult:
    """The :class:`SyncResult` of a sync (or a pull: ``pulled``) that carried out ``plan``
    from the source ``tree``; ``changed``: the files not sent as they changed while read."""
    not_sent = set(changed)
    sent = tuple(rel for rel in plan.send if rel not in not_sent)
    where = " there" if pulled else ""
    return SyncResult(
        host=engine.name,
        src=sides[0],
        dest=sides[1],
        sent=sent,
        deleted=tuple(plan.deleted),
        unchanged=plan.unchanged,
        bytes_sent=sum(tree[rel].size for rel in sent),
        touched=tuple(plan.meta),
        links=tuple(plan.links),
        dirs_created=tuple(plan.mkdir),
        kept=tuple(plan.kept),
        skipped=(*plan.skipped, *(f"{rel}: changed while it was read{where}" for rel in changed)),
        unlisted=tuple(plan.unlisted),
        delete_refused=plan.delete_refused,
        hashed=len(plan.maybe),
        steps=steps,
        dry_run=dry_run,
        duration_s=time.monotonic() - started,
        errors=tuple(errors),
        pulled=pulled,
    )


def _plan(
    engine: Engine,
    root: Path,
    dest: str,
    patterns: list[str],
    delete: bool,
    timeout: float | None,
) -> tuple[Plan, dict[str, Entry], bool, int]:
    """List both trees (and hash where needed): (the plan, the local tree, whether DEST
    exists, the steps run). A listing with errors turns ``delete`` off."""
    skipped: list[str] = []
    unread: list[str] = []
    here = local_tree(root, wire.Excludes(patterns), skipped, unread)
    exists, there, unlisted = remote_tree(engine, dest, patterns, timeout)
    refused = _partial(unread, unlisted) if delete else ""
    plan = diff(here, there, delete and not refused, dest, engine.name, refused)
    plan.skipped, plan.unlisted, plan.delete_refused = skipped, unlisted, refused
    if not plan.maybe:
        return plan, here, exists, 1
    theirs = remote_hashes(engine, dest, plan.maybe, timeout)
    _decide_hashed(plan, root, theirs, here)
    return plan, here, exists, 2


def _partial(
    unread: list[str], unlisted: list[str], sides: tuple[str, str] = ("SRC here", "DEST there")
) -> str:
    """Why a listing is partial ("" if both are whole): the first error of each side."""
    parts = [
        f"{side} could not be read in full ({len(errs)} error(s), first: {errs[0]})"
        for side, errs in zip(sides, (unread, unlisted))
        if errs
    ]
    return " and ".join(parts)


def _checked(engine: Engine, src: str | os.PathLike[str], dest: str) -> Path:
    """``src`` as a Path, once it is known to be a local directory and ``dest`` a path."""
    root = Path(src)
    if not root.is_dir():
        raise RemotekitError(f"sync: {src} is not a local directory", host=engine.name)
    if not isinstance(dest, str) or not dest:
        raise RemotekitError("sync: dest must be a non-empty path there", host=engine.name)
    return root


def _unwritten(engine: Engine, dest: str, errors: list[str], here: bool = False) -> None:
    shown = "\n".join("  " + e for e in errors[:20])
    more = f"\n  (+{len(errors) - 20} more)" if len(errors) > 20 else ""
    side = "here" if here else "there"
    raise RemotekitError(
        f"sync to {dest}: {len(errors)} path(s) could not be written {side}:\n{shown}{more}",
        host=engine.name,
        step=f"sync apply {dest}",
    )


# -- the other way: a pull -----------------------------------------------------------------------


def pull(
    engine: Engine,
    src: str,
    dest: str | os.PathLike[str],
    *,
    delete: bool = False,
    exclude: Iterable[str] = (),
    dry_run: bool = False,
    on_progress: ProgressCallback | None = None,
    timeout: float | None = None,
) -> SyncResult:
    """Make the local directory ``dest`` hold the contents of ``src`` there: a sync the other
    way, by the same rules (module doc), written here by the same code the far side writes
    with (:func:`remotekit.remote.sync.apply_plan`: atomic files, no symlink followed on the
    way, modes without setuid/setgid/sticky). ``dest`` and its missing parents are created.

    The far side is not trusted: its listing is checked entry by entry (paths relative and
    clean, fields of their kind), its bodies must come in the order asked and no longer
    than listed; a file that changed while read there is not installed (in ``skipped``).
    """
    started = time.monotonic()
    root = Path(dest)
    if not isinstance(src, str) or not src:
        raise RemotekitError("sync: the path there must be a non-empty path", host=engine.name)
    if root.exists() and not root.is_dir():
        raise RemotekitError(f"sync: {dest} is not a local directory", host=engine.name)
    plan, there, steps = _pull_plan(engine, src, root, list(exclude), delete, timeout)
    progress = _Progress(sum(there[rel].size for rel in plan.send), on_progress)
    changed: list[str] = []
    errors: list[str] = []
    work = (plan.remove, plan.mkdir, plan.send, plan.links, plan.meta, plan.dirmodes)
    if not dry_run and (not root.is_dir() or any(work)):
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemotekitError(f"cannot create {root}: {exc.strerror}", host=engine.name) from exc
        batches = _batches(plan.send, there)
        for i, batch in enumerate(batches):
            ends = (i == 0, i == len(batches) - 1)
            errors += _fetch_and_apply(
                engine, src, root, plan, there, batch, ends, progress, changed, timeout
            )
        steps += len(batches) if plan.send else 0
    sides = (src, str(root))
    result = _result(engine, plan, there, sides, changed, errors, steps, dry_run, started, True)
    if errors:
        _unwritten(engine, str(root), errors, here=True)
    return result


def _pull_plan(
    engine: Engine, src: str, root: Path, patterns: list[str], delete: bool, timeout: float | None
) -> tuple[Plan, dict[str, Entry], int]:
    """List both trees (and hash where needed) for a pull: (the plan, the tree there without
    what cannot be copied, the steps run). A listing with errors turns ``delete`` off."""
    exists, listed, unlisted = remote_tree(engine, src, patterns, timeout)
    if not exists:
        raise RemotekitError(f"{src} does not exist there", host=engine.name, step=f"sync {src}")
    there = {rel: e for rel, e in listed.items() if e.kind != "o"}
    skipped = [
        f"{rel}: not a regular file, directory or symlink" for rel in listed if rel not in there
    ]
    unread: list[str] = []
    here = local_tree(root, wire.Excludes(patterns), [], unread) if root.is_dir() else {}
    refused = _partial(unlisted, unread, ("SRC there", "DEST here")) if delete else ""
    plan = diff(there, here, delete and not refused, str(root), engine.name, refused)
    plan.skipped, plan.unlisted, plan.delete_refused = skipped, unlisted, refused
    if not plan.maybe:
        return plan, there, 1
    _decide_hashed(plan, root, remote_hashes(engine, src, plan.maybe, timeout), there)
    return plan, there, 2


class _Bodies:
    """The bodies of one read step, written to the staging directory as :func:`_batch_plan`
    lays them out (small ones one after the other in ``pack``, large ones each in
    ``d/<n>``), checked: in the order asked, never more bytes than listed; a file that came
    short is padded and flagged, as a push flags one (``ok``)."""

    def __init__(
        self,
        staging: Path,
        order: list[str],
        there: dict[str, Entry],
        packed: int,
        progress: _Progress,
    ):
        self.staging, self.order, self.there, self.packed = staging, order, there, packed
        self.progress = progress
        self.ok = bytearray(b"0" * len(order))
        self.n, self.left = 0, there[order[0]].size if order else 0
        (staging / "d").mkdir()
        self.pack = (staging / "pack").open("wb")
        self.out = self.pack if packed else None

    def body(self, n: int, length: int) -> None:
        """A frame of ``length`` bytes of file ``n`` begins: refused unless ``n`` is the
        file whose bytes come now and it has that many left to come."""
        if n != self.n or n >= len(self.order):
            raise ValueError(f"bytes for file {n}, not {self.n}")
        if length > self.left:
            raise ValueError(
                f"more bytes than listed for {self.order[n]!r} ({length} more, {self.left} left)"
            )

    def write(self, data: memoryview | bytes) -> None:
        """Bytes of the file whose bytes come now (checked by :meth:`body`)."""
        self._put(data)
        self.progress.add(len(data))

    def _put(self, data: memoryview | bytes) -> None:
        if self.out is None:
            self._next_file()
        assert self.out is not None
        self.out.write(data)
        self.left -= len(data)

    def record(self, r: dict[str, Any]) -> bool:
        if r.get("type") != "read":
            return False
        if r.get("n") != self.n or self.n >= len(self.order):
            raise ValueError(f"a read record for file {r.get('n')!r}, not {self.n}")
        whole = self.left == 0 and r.get("ok") is True
        self.progress.add(self.left)
        if self.n < self.packed:  # came short: padded (the pack's offsets), never installed
            self._put(bytes(self.left))
        self.ok[self.n] = ord("1") if whole else ord("0")
        self.n += 1
        if self.n < len(self.order):
            self.left = self.there[self.order[self.n]].size
            if self.n >= self.packed:
                self._next_file()
        return True

    def _next_file(self) -> None:
        if self.out is not None and self.out is not self.pack:
            self.out.close()
        self.out = (self.staging / "d" / str(self.n)).open("wb")

    def close(self) -> None:
        if self.out is not None and self.out is not self.pack:
            self.out.close()
        self.pack.close()


class _Frames:
    """What a read step sends on stdout after its marker line: frames (``remote/sync.py``'s
    ``frame_head``: kind, file, length), decoded as the bytes come, each checked from its
    head before its payload is taken: a body frame's bytes go to :class:`_Bodies` as they
    come (no copy, no decoding), a record frame (at most ``RECORD_FRAME`` bytes) is one JSON
    record for ``take``; any other kind, a body longer than the file has left, or bytes past
    the ``done`` record are a ValueError that stops the step."""

    def __init__(self, bodies: _Bodies):
        self.bodies = bodies
        self.marker = "remotekit-sync-" + secrets.token_hex(8)
        self.take: Callable[[Any], None] = lambda record: None
        self.head = bytearray()
        self.kind: bytes | None = None
        self.left = 0
        self.record = bytearray()
        self.done = False

    def attach(self, request: StepRequest, take: Callable[[Any], None]) -> StepRequest:
        """``request`` (the read step) with its stdout after the marker line fed here, its
        relay there made for bulk bytes, and the records in the frames handed to ``take``."""
        self.take = take
        header = replace(request.header, bulk=True)
        return replace(request, header=header, stdout_sink=self.feed, marker=self.marker)

    def feed(self, data: bytes) -> None:
        view, at = memoryview(data), 0
        while at < len(view):
            if self.kind is None:
                need = wire.FRAME.size - len(self.head)
                self.head += view[at : at + need]
                at += need
                if len(self.head) < wire.FRAME.size:
                    return
                self._begin(*wire.FRAME.unpack(self.head))
                self.head.clear()
            piece = view[at : at + self.left]
            at += len(piece)
            self.left -= len(piece)
            if self.kind == wire.BODY:
                self.bodies.write(piece)
            else:
                self.record += piece
            if self.left == 0:
                self._end()

    def _begin(self, kind: bytes, n: int, length: int) -> None:
        if self.done:
            raise ValueError("bytes after the done record")
        if kind == wire.BODY:
            if not 0 < length <= wire.READ_FRAME:
                raise ValueError(f"a body frame of {length} bytes (1 to {wire.READ_FRAME})")
            self.bodies.body(n, length)
        elif kind == wire.RECORD:
            if length > wire.RECORD_FRAME:
                raise ValueError(f"a record of {length} bytes (at most {wire.RECORD_FRAME})")
        else:
            raise ValueError(f"a frame of unknown kind {kind!r}")
        self.kind, self.left = kind, length

    def _end(self) -> None:
        if self.kind == wire.RECORD:
            try:
                record = json.loads(bytes(self.record).decode("utf-8"))
            except ValueError:
                raise ValueError(f"not a record of sync.py: {bytes(self.record[:80])!r}") from None
            self.record.clear()
            self.done = isinstance(record, dict) and record.get("type") == "done"
            self.take(record)
        self.kind = None

    def close(self) -> None:
        """The step ended: a frame cut off in the middle is an error."""
        if self.kind is not None or self.head:
            raise ValueError("the bodies stopped in the middle of a frame")


def _fetch_and_apply(
    engine: Engine,
    src: str,
    root: Path,
    plan: Plan,
    there: dict[str, Entry],
    batch: list[str],
    first_last: tuple[bool, bool],
    progress: _Progress,
    changed: list[str],
    timeout: float | None,
) -> list[str]:
    """One batch of a pull: its bodies read there (one step) into a staging directory in
    ``root`` (renamed into place: same filesystem), then the batch's plan applied here."""
    order, doc, _ = _batch_plan(batch, plan, there, *first_last)
    packed = sum(1 for f in doc["files"] if len(f) == 6)
    staging = Path(tempfile.mkdtemp(prefix=wire.TEMP_PREFIX, dir=root))
    try:
        bodies = _Bodies(staging, order, there, packed, progress)
        try:
            if order:
                frames = _Frames(bodies)
                files = [[rel, there[rel].size, there[rel].mtime_ns] for rel in order]
                asked = {"files": files, "marker": frames.marker}
                _records(
                    engine,
                    "read",
                    src,
                    {"paths.json": json.dumps(asked).encode()},
                    f"sync read {src}",
                    timeout,
                    on_record=bodies.record,
                    frames=frames,
                )
                if bodies.n != len(order):
                    raise ValueError(f"{len(order) - bodies.n} file(s) never sent")
        except (ValueError, KeyError, TypeError) as exc:
            raise RemotekitError(
                f"sync read of {src}: the bodies sent are not the ones asked ({clip(str(exc), 200)})",
                host=engine.name,
                step=f"sync read {src}",
            ) from None
        finally:
            bodies.close()
        flags = bytes(bodies.ok)
        changed += [rel for n, rel in enumerate(order) if flags[n] != ord("1")]
        doc["files"] = [f for f in doc["files"] if flags[f[1]] == ord("1")]
        kept: list[dict[str, Any]] = []
        dest = wire.Dest(str(root))
        try:
            errors = wire.apply_plan(dest, doc, flags, str(staging), say=kept.append)
        finally:
            dest.close()
        plan.kept += sorted(r["p"] for r in kept)
        gone = set(plan.kept)
        plan.deleted = [rel for rel in plan.deleted if rel not in gone]
        return [f"{r['p']}: {r['message']}" for r in errors]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
