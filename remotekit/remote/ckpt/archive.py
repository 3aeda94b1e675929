"""Checkpoint diagnostics: a zip archive that holds torch files (a container, not a torch.save).

Part of ``ckpt.py``. stable-baselines3's ``model.save`` writes one: ``policy.pth`` (the
policy's state dict), ``policy.optimizer.pth`` (its optimizer's), ``pytorch_variables.pth``,
each a torch.save zip of its own, stored as a member, and ``data``, a JSON object with the
run's counters (``num_timesteps``, ``_n_updates``) and values that cloudpickle wrote as
base64 text (never decoded here). A torch.save file is a zip too; it is told apart by its
``data.pkl`` record (:func:`.discover.torch_members` is None for it).

Each torch member is loaded as the files are (``weights_only``, no pickle run, memory-mapped):
torch maps a file by its path only, so the member is streamed (:data:`.base.UNPACK_CHUNK`
bytes at a time) into a private temporary file, removed when the checkpoint is closed; a large
member costs its size on disk there, not in memory. Its tensors become the archive's: ``policy.`` +
their names, in the optimizer section when the member's name says ``optim``. The step comes
from a JSON member. Bounds: at most :data:`MAX_MEMBERS` members, each torch member at most
:data:`MAX_MEMBER_BYTES` unpacked and no more than :data:`MAX_RATIO` times its packed size
(a zip bomb is refused before a byte is unpacked), a JSON member at most
:data:`MAX_JSON_BYTES`; a member whose name climbs out (``..``, an absolute path) or holds a
control character is refused, its name shown escaped. The sizes the central directory
declares are checked before a member is read: against its local header, against the end of
the archive, and against the other members' bytes (members that share bytes are a zip bomb's
trick); a member whose data does not unpack to its declared size and CRC is refused.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
import tempfile
import zipfile

from ..infile import load_json, open_regular
from .base import (
    OPTIMIZER,
    RELEASE_MIN,
    STEP_KEYS,
    LoadError,
    Releaser,
    as_number,
    import_torch,
    short,
    unpack_member,
    uses_torch,
)
from .discover import is_torch_name
from .formats import Source, adopt_part, fill_meta, walk_tensors

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())

MAX_MEMBERS = 1000
MAX_MEMBER_BYTES = 4 << 30  # one torch member, unpacked: held in memory to be loaded
MAX_RATIO = 200  # unpacked / packed: deflate reaches ~1000 only on data made to (a bomb)
MAX_JSON_BYTES = 16 << 20
BOMB_FLOOR = 1 << 20  # a smaller member may pack as tightly as it likes
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a member's local file header (APPNOTE 4.3.7)
_DESCRIPTOR = 0x08  # flag bit: the sizes follow the data (the local header says 0)
# The archive's own counters: stable-baselines3 counts environment steps (its logs' x axis,
# ``time/total_timesteps``) in num_timesteps and gradient updates in _n_updates.
ARCHIVE_STEP_KEYS = ("num_timesteps",) + STEP_KEYS + ("_n_updates",)
SCALAR_KEYS = ("num_timesteps", "_n_updates", "_total_timesteps", "n_envs", "n_steps", "seed")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
FORMAT = "zip"


def refused_name(name):
    """Why a member's name is not followed (None when it is fine): it climbs out of the
    archive or holds a control character. The name is shown escaped (``%r``)."""
    if _CONTROL.search(name):
        return "member %r: a control character in its name: refused" % name
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
        return "member %r: a path that leaves the archive: refused" % name
    return None


def bomb(info):
    """Why a member is too large to unpack (None when it is not): its declared size, or its
    unpacked / packed ratio (a zip bomb)."""
    if info.file_size > MAX_MEMBER_BYTES:
        return "member %r unpacks to %d bytes, over the %d this reads: refused" % (
            info.filename,
            info.file_size,
            MAX_MEMBER_BYTES,
        )
    packed = max(info.compress_size, 1)
    if info.file_size > BOMB_FLOOR and info.file_size > MAX_RATIO * packed:
        return "member %r unpacks %d bytes into %d (%dx): a zip bomb, refused" % (
            info.filename,
            packed,
            info.file_size,
            info.file_size // packed,
        )
    return None


def declared(f, info, size, ends):
    """Why the sizes the central directory declares for ``info`` are not to be believed
    (None when they hold): its local header (read from the open archive ``f`` of ``size``
    bytes) says other sizes or another method, its data would run past the archive's end,
    or a stored member's packed and unpacked sizes differ. ``ends``: ``{info: offset}``,
    where each member's data ends, set here."""
    name = info.filename
    f.seek(info.header_offset)
    raw = f.read(_LOCAL.size)
    if len(raw) < _LOCAL.size or raw[:4] != b"PK\x03\x04":
        return "member %r: no local header at offset %d: refused" % (name, info.header_offset)
    _, _, flag, method, _, _, _, packed, unpacked, nlen, xlen = _LOCAL.unpack(raw)
    start = info.header_offset + _LOCAL.size + nlen + xlen
    end = ends[info] = start + info.compress_size
    lied = method != info.compress_type
    if not flag & _DESCRIPTOR and 0xFFFFFFFF not in (packed, unpacked):
        lied = lied or (packed, unpacked) != (info.compress_size, info.file_size)
    if lied:
        return (
            "member %r: its local header says %d bytes packed into %d (method %d), the "
            "central directory %d into %d (method %d): sizes that disagree, refused"
            % (
                name,
                unpacked,
                packed,
                method,
                info.file_size,
                info.compress_size,
                info.compress_type,
            )
        )
    if end > size:
        return (
            "member %r: declares %d packed bytes from offset %d, past the archive's end (%d bytes): refused"
            % (
                name,
                info.compress_size,
                start,
                size,
            )
        )
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        return "member %r: stored, yet declares %d bytes packed and %d unpacked: refused" % (
            name,
            info.compress_size,
            info.file_size,
        )
    return None


def _shared(infos, ends, refused):
    """Members whose bytes overlap another's (one local data read as many members: the
    trick of a zip bomb without nesting): each such pair into ``refused``."""
    spans = sorted(
        (i.header_offset, ends[i], i.filename)
        for i in infos
        if i.filename not in refused and i in ends
    )
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            why = "members %r and %r share bytes (a zip bomb's trick): refused" % (a, b)
            refused.setdefault(a, why)
            refused.setdefault(b, why)


def open_archive(path, size, opts):
    """The zip archive ``path`` of torch files as one :class:`Source` (format "zip"): every
    torch member's tensors, the step from a JSON member; refused and damaged members are
    problems (the verdict is "error"), the others still read."""
    import_torch()  # open_source imports no torch: its members are torch.save files
    src = Source(path, FORMAT, size)
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise LoadError(
                    "a zip archive of %d members, over the %d this reads"
                    % (len(infos), MAX_MEMBERS)
                )
            refused, ends = {}, {}
            for info in infos:
                why = None if info.is_dir() else declared(f, info, size, ends)
                if why:
                    refused[info.filename] = why
            _shared(infos, ends, refused)
            for info in infos:
                _member(src, zf, info, opts, refused.get(info.filename))
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise LoadError("damaged zip archive: %s" % short(e), fmt=FORMAT) from e
    torch_parts = [i.filename for i in infos if is_torch_name(i.filename)]
    src.notes.insert(
        0,
        "a zip archive of %d torch file%s (%s), not a torch.save checkpoint: each member read "
        "on its own"
        % (len(torch_parts), "" if len(torch_parts) == 1 else "s", ", ".join(torch_parts[:6])),
    )
    if not src.entries and not src.problems:
        src.problems.append("no member holds a tensor")
    return src


def _member(src, zf, info, opts, why):
    name = info.filename
    if info.is_dir():
        return
    why = why or refused_name(name)
    if why is None and (is_torch_name(name) or _is_json(name)):
        why = bomb(info)
    if why:
        src.problems.append(why)
        return
    if is_torch_name(name):
        _torch_member(src, zf, info, opts)
    elif _is_json(name) and info.file_size > MAX_JSON_BYTES:
        src.notes.append(
            "%s: %d bytes of JSON, over %d: not read" % (name, info.file_size, MAX_JSON_BYTES)
        )
    elif _is_json(name):
        _json_member(src, zf, info)


def _is_json(name):
    base = name.rsplit("/", 1)[-1]
    return base == "data" or base.endswith(".json")


def _unpack(zf, info, folder):
    """The member ``info`` streamed into a file of ``folder``: its path, or why not (it
    does not unpack to the size and CRC its central directory declares; no room). A file
    not read to its end is removed at once (an error, an interrupt)."""
    name = info.filename
    path = os.path.join(folder, "member-%d" % len(os.listdir(folder)))
    try:
        with zf.open(info) as m, open(path, "xb") as out:
            got = unpack_member(
                m, out, name, info.file_size, "its central directory declares", folder
            )
        if got != info.file_size:
            raise zipfile.BadZipFile("%d bytes" % got)
    except LoadError as e:
        _remove(path)
        return None, e.reason
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError) as e:
        # zipfile checks the CRC and the unpacked size at the member's end
        _remove(path)
        return None, (
            "member %s: does not unpack to the %d bytes (and CRC) its central directory "
            "declares: %s: refused" % (name, info.file_size, short(e))
        )
    except BaseException:
        _remove(path)
        raise
    return path, None


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _scratch(src):
    """The private folder members are unpacked into, removed with ``src``."""
    if getattr(src, "scratch", None) is None:
        src.scratch = tempfile.mkdtemp(prefix="remotekit-zip-")
        src._close.append(lambda: shutil.rmtree(src.scratch, ignore_errors=True))
    return src.scratch


def _torch_member(src, zf, info, opts):
    name = info.filename
    path, why = _unpack(zf, info, _scratch(src))
    if why:
        src.problems.append(why)
        return
    try:
        try:
            obj = torch.load(
                path, map_location="cpu", mmap=True, weights_only=not opts.unsafe_pickle
            )
        except RuntimeError:  # not a zip torch.save (a legacy one): it loads into memory
            obj = torch.load(path, map_location="cpu", weights_only=not opts.unsafe_pickle)
    except pickle.UnpicklingError as e:
        globs = re.findall(r"GLOBAL ([\w.]+) was not an allowed global", str(e))
        src.needs_globals.extend(globs)
        src.problems.append("member %s: weights-only load refused: %s" % (name, short(e)))
        return
    except Exception as e:  # torch raises RuntimeError/EOFError/KeyError... for damage
        src.problems.append(
            "member %s: torch.load failed: %s: %s" % (name, type(e).__name__, short(e))
        )
        return
    stem = os.path.splitext(name)[0]
    part = Source(name, "torch", 0)  # its bytes are the archive's
    part.trees.append(("", obj))
    release = Releaser(path) if info.file_size >= RELEASE_MIN else None
    walk_tensors(obj, part, release)
    try:
        fill_meta(part, obj)
    except LoadError:
        src.notes.append("%s: no tensors" % name)
        return
    part.notes = [n for n in part.notes if not n.startswith("top-level scalar")]
    section = OPTIMIZER if "optim" in stem.lower() else None
    adopt_part(src, part, name, stem + ".", section)
    if section == OPTIMIZER:
        # the walker names an optimizer found at the top of a member "" (its path there)
        src.optimizers = [(p if p != stem + "." else stem, o) for p, o in src.optimizers]


def _json_member(src, zf, info):
    """A JSON member's counters (``num_timesteps``, ...) as the step and scalars; values
    that cloudpickle wrote (``{":serialized:": ...}``) are counted, never decoded."""
    try:
        doc = load_json(zf.read(info).decode("utf-8"), info.filename)
    except (UnicodeDecodeError, ValueError, RecursionError):
        src.notes.append("%s: not JSON, not read" % info.filename)
        return
    if not isinstance(doc, dict):
        return
    if src.meta["global_step"] is None:
        for k in ARCHIVE_STEP_KEYS:
            v = as_number(doc.get(k))
            if v is not None:
                src.meta["global_step"], src.meta["step_key"] = v, "%s:%s" % (info.filename, k)
                break
    if src.meta["epoch"] is None:
        src.meta["epoch"] = as_number(doc.get("epoch"))
    for k in SCALAR_KEYS:
        v = doc.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            src.meta["scalars"].setdefault(k, v)
    pickled = sorted(str(k) for k, v in doc.items() if isinstance(v, dict) and ":serialized:" in v)
    if pickled:
        src.notes.append(
            "%s: %d value%s pickled by cloudpickle (%s): not decoded (that would run code)"
            % (
                info.filename,
                len(pickled),
                "" if len(pickled) == 1 else "s",
                ", ".join(pickled[:5]) + (", ..." if len(pickled) > 5 else ""),
            )
        )
    src.meta["metadata"] = {
        str(k): v
        for k, v in list(doc.items())[:40]
        if isinstance(v, (int, float, str, bool)) and len(str(v)) <= 200
    }
