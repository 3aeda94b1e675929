"""Checkpoint diagnostics: reading one checkpoint file, as tensors in chunks.

Part of ``ckpt.py``. A :class:`Source` is a checkpoint opened for checking: its entries
(:class:`Entry`, one per tensor, read chunk by chunk) and its metadata (step, epoch, top-level
scalars). Readers: torch.save zip files (memory-mapped) and legacy pickles, safetensors (parsed
and validated here, read without torch: its entries carry ``raw`` bytes for
:func:`values.check_raw`), GGUF (its header read by ``gguf``; entries alike), Hugging Face ``*.index.json`` shard indexes, Git LFS pointers.
"""

from __future__ import annotations

import importlib
import importlib.util
import mmap
import os
import pickle
import re
import struct
import tempfile
import zipfile

from ..infile import EscapingName, fd_path, inside, load_json, open_regular
from ..protocol import is_secret_name, mask
from .base import (
    COUNTER,
    EPOCH_KEYS,
    INDEX_SUFFIX,
    INTEGER,
    LFS_POINTER,
    OPTIM_KEY,
    OPTIMIZER,
    OTHER,
    RELEASE_MIN,
    RNG,
    RNG_NAME,
    SAFETENSORS_MAX_HEADER,
    SCORE,
    STATE_CONTAINERS,
    STEP_KEYS,
    TRAINER_STATE,
    WEIGHTS,
    Fatal,
    LoadError,
    Releaser,
    Unscannable,
    advise_dontneed,
    as_number,
    euid,
    import_torch,
    is_checkable,
    is_scalar_dtype,
    looks_like_npz,
    looks_like_safetensors,
    short,
    unpack_member,
    uses_torch,
)
from .gguf import read_gguf
from .npy import npz_members, read_header
from .values import DTYPES

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())


# --------------------------------------------------------------------------- sources


class Entry(object):
    """One named tensor of a checkpoint; ``chunks(n)`` yields (flat offset, 1-D tensor).

    ``section`` is WEIGHTS or OPTIMIZER for a param (a floating tensor of the model or the
    optimizer state) and OTHER for any other tensor, whose ``kind`` says why
    (:func:`non_weight_kind`; None for a param). ``raw`` is (memory map, byte offset) where
    the values lie as the file stores them (safetensors: checked without torch), else None."""

    __slots__ = (
        "_chunks",
        "dtype",
        "key",
        "kind",
        "name",
        "nbytes",
        "numel",
        "raw",
        "section",
        "shape",
        "slot",
    )

    def __init__(self, name, section, slot, dtype, shape, numel, nbytes, key, chunks, raw=None):
        self.raw = raw
        self.name = name
        self.slot = slot
        self.dtype = dtype
        self.shape = shape
        self.numel = numel
        self.nbytes = nbytes
        self.key = key
        self._chunks = chunks
        self.place(section)

    def place(self, section):
        """Put the tensor in ``section`` (WEIGHTS or OPTIMIZER), or in OTHER if it is none."""
        self.kind = non_weight_kind(self.name, section, self.slot, self.dtype, self.numel)
        self.section = OTHER if self.kind else section

    def chunks(self, n):
        return self._chunks(n)


def non_weight_kind(name, section, slot, dtype, numel):
    """Why the tensor ``name`` (in ``section``) is no param: COUNTER, SCORE, RNG or INTEGER;
    None when it is one."""
    if not is_checkable(dtype):
        if RNG_NAME.search(name):
            return RNG
        return COUNTER if numel == 1 else INTEGER
    if numel != 1:
        return None
    if section == OPTIMIZER and slot == "step":
        return COUNTER  # Adam's per-parameter step: a 0-d float32 tensor since torch 2.0
    parts = name.split(".")
    if parts[0] in TRAINER_STATE or (len(parts) == 2 and parts[0] in STATE_CONTAINERS):
        return SCORE
    return None


class Source(object):
    """An opened checkpoint: its entries (no tensor data read yet) and what it says about itself.

    ``problems`` are partial failures (a truncated tail, a missing shard): the entries that
    could be read are still there, and the checkpoint's verdict becomes "error".
    """

    def __init__(self, path, fmt, nbytes):
        self.path = path
        self.format = fmt
        self.bytes = nbytes
        self.entries = []
        self.meta = {
            "global_step": None,
            "step_key": None,
            "epoch": None,
            "top_keys": [],
            "scalars": {},
        }
        self.optimizers = []
        self.notes = []
        self.problems = []
        self.needs_globals = []
        self._close = []
        self.obj = None
        self.trees = []  # (name prefix, loaded object) of every torch file read: resume.py

    def close(self):
        self.entries = []
        self.obj = None
        self.trees = []
        for fn in reversed(self._close):
            try:
                fn()
            except (BufferError, OSError, ValueError):
                pass  # a chunk tensor still refers to it: the mapping goes with the garbage
        self._close = []


def section_for_name(name):
    return OPTIMIZER if any(OPTIM_KEY.search(p) for p in name.split(".")) else WEIGHTS


def _join(prefix, key):
    return key if not prefix else prefix + "." + key


def _chunk_len(shape, n):
    """Elements per chunk: about ``n``, in whole rows, so equal shapes chunk alike (diff)."""
    if len(shape) <= 1:
        return n
    row = 1
    for s in shape[1:]:
        row *= s
    return max(1, n // row) * row if row else n


def tensor_chunks(t, n, release):
    numel = t.numel()
    if numel == 0:
        return
    if t.dim() == 0:
        yield 0, t.reshape(1)
        return
    step = _chunk_len(t.shape, n)
    if t.is_contiguous():
        flat = t.view(-1)
        for i in range(0, numel, step):
            c = flat[i : i + step]
            yield i, c
            if release is not None:
                release(c.data_ptr(), c.numel() * c.element_size())
        return
    # Non-contiguous (a saved view): copy bounded row blocks, never the whole tensor.
    row = numel // t.shape[0]
    per = step // row
    for i in range(0, t.shape[0], per):
        yield i * row, t[i : i + per].reshape(-1)


# Names that mark a top-level scalar of a flat state dict as metadata rather than a weight.
META_NAME = re.compile(
    r"(?i)step|epoch|iter|loss|best|^lr$|val_|_val|acc|score|tokens|samples|seed"
)


def top_scalars(obj):
    """The top-level entries of a loaded checkpoint that are metadata, not weights: 0-d tensors
    (nanoGPT's ``best_val_loss``, torchtitan's ``step``) beside nested state, or whose name says
    so in a flat state dict. {key: tensor}."""
    if not isinstance(obj, dict):
        return {}
    nested = any(isinstance(v, (dict, list, tuple)) for v in obj.values())
    return {
        str(k): v
        for k, v in obj.items()
        if isinstance(v, torch.Tensor) and v.dim() == 0 and (nested or META_NAME.search(str(k)))
    }


# A key that names a slot (exp_avg, num_batches_tracked, fc1.weight); the others (a file path
# in Lightning's best_k_models, a callback's repr) leave their tensors the slot above them.
KEY_LIKE = re.compile(r"^[A-Za-z_][\w.]*$")


# long: the nested ``rec`` closure is the walk; it shares seen/meta_keys/src.
def walk_tensors(obj, src, release):
    """Collect every tensor in a loaded object as an Entry, with its section and slot.

    Top-level scalars (:func:`top_scalars`) are left out: they are metadata."""
    seen = set()
    meta_keys = set(top_scalars(obj))
    nn = getattr(torch, "nn", None)
    optim = getattr(torch, "optim", None)

    def rec(o, path, section, slot, depth):
        if isinstance(o, torch.Tensor):
            numel = o.numel()
            key = None
            if numel and o.device.type == "cpu":
                key = (o.data_ptr(), tuple(o.shape), tuple(o.stride()), str(o.dtype))
            data = o.detach()  # saved parameters may require grad: nothing here needs it
            src.entries.append(
                Entry(
                    path or "<tensor>",
                    section,
                    slot,
                    o.dtype,
                    tuple(o.shape),
                    numel,
                    numel * o.element_size(),
                    key,
                    lambda n, t=data: tensor_chunks(t, n, release),
                )
            )
            return
        if depth > 64 or id(o) in seen:
            return
        if nn is not None and isinstance(o, nn.Module):  # only with --unsafe-pickle
            seen.add(id(o))
            rec(o.state_dict(keep_vars=True), path, section, slot, depth + 1)
            return
        if optim is not None and isinstance(o, optim.Optimizer):
            seen.add(id(o))
            rec(o.state_dict(), path, OPTIMIZER, slot, depth + 1)
            return
        if isinstance(o, dict):
            seen.add(id(o))
            is_opt = "state" in o and "param_groups" in o
            if is_opt:
                src.optimizers.append((path, o))
            for k, v in o.items():
                ks = str(k)
                if depth == 0 and ks in meta_keys:
                    continue
                sec = (
                    OPTIMIZER
                    if (section == OPTIMIZER or is_opt or OPTIM_KEY.search(ks))
                    else section
                )
                rec(v, _join(path, ks), sec, ks if KEY_LIKE.match(ks) else slot, depth + 1)
        elif isinstance(o, (list, tuple)):
            seen.add(id(o))
            for i, v in enumerate(o):
                rec(v, _join(path, str(i)), section, slot, depth + 1)
        elif hasattr(o, "__dict__") and not isinstance(o, type) and not callable(o):
            seen.add(id(o))  # an allow-listed or unpickled object (e.g. argparse.Namespace)
            rec(vars(o), path, section, slot, depth + 1)

    rec(obj, "", WEIGHTS, None, 0)


def _first_key(d, keys):
    """(value, key) of the first of ``keys`` in dict ``d`` holding a number, else (None, None)."""
    for k in keys:
        if k in d and as_number(d[k]) is not None:
            return as_number(d[k]), k
    return None, None


def find_step(obj):
    """(step, key path, epoch) of a loaded checkpoint: the most specific step key at the top,
    else one level down in a trainer's state container (or fairseq's last optimizer_history
    entry); the epoch alike."""
    if not isinstance(obj, dict):
        return None, None, None
    places = [("", obj)]
    for c in STATE_CONTAINERS:
        if isinstance(obj.get(c), dict):
            places.append((c + ".", obj[c]))
    hist = obj.get("optimizer_history")
    if isinstance(hist, list) and hist and isinstance(hist[-1], dict):
        places.append(("optimizer_history[-1].", hist[-1]))
    step = key = epoch = None
    for prefix, d in places:
        v, k = _first_key(d, STEP_KEYS)
        if v is not None and key is None:
            step, key = v, prefix + k
        e, _ = _first_key(d, EPOCH_KEYS)
        if e is not None and epoch is None:
            epoch = e
    return step, key, epoch


def fill_meta(src, obj):
    if isinstance(obj, dict):
        keys = [str(k) for k in obj]
        src.meta["top_keys"] = keys[:50]
        step, key, epoch = find_step(obj)
        if step is not None:
            src.meta["global_step"], src.meta["step_key"] = step, key
        src.meta["epoch"] = epoch
        scalars = {}
        meta = top_scalars(obj)
        if meta:
            src.notes.append(
                "top-level scalar%s %s: metadata, not weights"
                % ("s" if len(meta) > 1 else "", ", ".join(sorted(meta)[:8]))
            )
        for k, v in obj.items():
            if str(k) in meta:
                x = meta[str(k)].item() if is_scalar_dtype(meta[str(k)].dtype) else None
                scalars[str(k)] = x
            elif isinstance(v, (bool, int, float)) or v is None:
                scalars[str(k)] = v
            elif isinstance(v, str):
                v = "***" if is_secret_name(k) else mask(v)  # strings travel back with inspect
                scalars[str(k)] = v if len(v) <= 200 else v[:197] + "..."
            if len(scalars) >= 30:
                break
        src.meta["scalars"] = scalars
        if not src.entries:
            raise LoadError(
                "holds no tensors (top-level keys: %s); expected a state dict or a dict with "
                "model_state_dict / optimizer_state_dict" % (", ".join(keys[:12]) or "none")
            )
    elif not src.entries:
        raise LoadError(
            "holds a %s with no tensors; expected a state dict or a dict with "
            "model_state_dict / optimizer_state_dict" % type(obj).__name__
        )


def sidecar_step(src, p=None):
    """HF Trainer writes trainer_state.json beside the weights: use its step and epoch."""
    if src.meta["global_step"] is not None:
        return
    p = p or os.path.join(os.path.dirname(os.path.abspath(src.path)), "trainer_state.json")
    try:
        with open_regular(p, "r") as f:
            state = load_json(f, p)
    except (OSError, ValueError):
        return
    if isinstance(state, dict):
        if as_number(state.get("global_step")) is not None:
            src.meta["global_step"] = as_number(state.get("global_step"))
            src.meta["step_key"] = "trainer_state.json:global_step"
        if src.meta["epoch"] is None and as_number(state.get("epoch")) is not None:
            src.meta["epoch"] = as_number(state.get("epoch"))


def _unsafe_globals(path, is_zip, exc):
    names = []
    gu = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if is_zip and gu is not None:
        try:
            names = list(gu(path))
        except Exception:  # the listing is a courtesy: fall back to the message
            names = []
    if not names:
        names = re.findall(r"GLOBAL ([\w.]+) was not an allowed global", str(exc))
    return names


def _open_torch(path, size, is_zip, opts):
    try:
        return _open_torch_unchecked(path, size, is_zip, opts)
    except LoadError as e:
        e.fmt = e.fmt or ("torch" if is_zip else "torch-legacy")
        raise


def _open_torch_unchecked(path, size, is_zip, opts):
    import_torch()
    src = Source(path, "torch" if is_zip else "torch-legacy", size)
    if is_zip:
        _check_torch_zip(path, size)
    else:
        src.notes.append("legacy (non-zip) torch.save format: loaded into memory, not mmap")
    if opts.unsafe_pickle:
        src.notes.append("loaded with --unsafe-pickle (weights_only=False)")
    try:
        with open_regular(path) as held:  # what was checked is what torch opens
            obj = torch.load(
                fd_path(held, path),
                map_location="cpu",
                mmap=is_zip,
                weights_only=not opts.unsafe_pickle,
            )
    except pickle.UnpicklingError as e:
        needs = [] if opts.unsafe_pickle else _unsafe_globals(path, is_zip, e)
        if needs and _inert_globals(needs):
            src.notes.append(
                "DeepSpeed objects read as inert placeholders (deepspeed is not imported): %s"
                % ", ".join(n.rsplit(".", 1)[-1] for n in needs)
            )
            return _load_again(path, src, is_zip)
        if needs:
            raise LoadError(
                "weights-only load refused %s: %s. If you trust this file, allow %s with %s "
                "(imports the module only), or load it as plain pickle with --unsafe-pickle "
                "(runs any code the file holds)"
                % (
                    "a global" if len(needs) == 1 else "%d globals" % len(needs),
                    ", ".join(needs),
                    "it" if len(needs) == 1 else "them",
                    " ".join("--allow-global " + n for n in needs),
                ),
                needs_globals=needs,
            ) from e
        raise LoadError(
            "the pickle inside is damaged or not a torch checkpoint (%s)" % short(e)
        ) from e
    except MemoryError:
        raise LoadError(
            "out of memory while loading (legacy files cannot be memory-mapped)"
        ) from None
    except Exception as e:  # torch raises RuntimeError/EOFError/KeyError... for damage
        raise LoadError("torch.load failed: %s: %s" % (type(e).__name__, short(e))) from e
    return _adopt_loaded(path, src, obj, is_zip)


def _check_torch_zip(path, size):
    """LoadError unless ``path`` is an intact, uncompressed torch.save zip archive."""
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise LoadError(
            "truncated or damaged zip archive: %s; the file is %d bytes: the save was "
            "interrupted or the copy is incomplete"
            % (
                "its central directory (at the end) is missing"
                if "not a zip file" in str(e)
                else short(e),
                size,
            )
        ) from e
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        raise LoadError(
            "a zip archive, but not a torch.save checkpoint (no data.pkl inside) and no "
            "torch file among its members",
            fmt="zip",
        )
    packed = [i for i in infos if i.compress_type != zipfile.ZIP_STORED]
    if packed:
        raise LoadError(
            "zip entry %s is compressed (method %d%s); torch.save stores every entry "
            "uncompressed, so this archive was repacked (e.g. by `zip`) and its tensor data "
            "cannot be read in place; re-save it with torch.save, or unpack and re-zip it "
            "with `zip -0`"
            % (
                packed[0].filename,
                packed[0].compress_type,
                ", %d entries in all" % len(packed) if len(packed) > 1 else "",
            )
        )


def _adopt_loaded(path, src, obj, is_zip):
    src.obj = obj
    src.trees.append(("", obj))
    # Releasing pages pays off for large files only; finding the mapping reads /proc/self/maps
    # (~0.6 ms with torch loaded), which would dominate a scan of many small files.
    release = Releaser(path) if is_zip and src.bytes >= RELEASE_MIN else None
    walk_tensors(obj, src, release)
    fill_meta(src, obj)
    return src


def _load_again(path, src, is_zip):
    try:
        with open_regular(path) as held:
            obj = torch.load(
                fd_path(held, path), map_location="cpu", mmap=is_zip, weights_only=True
            )
    except Exception as e:
        raise LoadError("torch.load failed: %s: %s" % (type(e).__name__, short(e))) from e
    return _adopt_loaded(path, src, obj, is_zip)


class _Inert(object):
    """Stands in for an object of a training library (DeepSpeed's LossScaler, ZeroStageEnum,
    fragment_address) in its checkpoints: it keeps what was pickled and runs nothing."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


INERT_PREFIXES = ("deepspeed.",)
_INERT = {}


def _inert_globals(names):
    """Allow-list inert stand-ins for ``names`` when all belong to a known training library
    whose checkpoint layout is read here (DeepSpeed); False when some do not, or when this
    torch (< 2.5) cannot map a name to a stand-in."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None or not all(n.startswith(INERT_PREFIXES) for n in names):
        return False
    new = [n for n in names if n not in _INERT]
    for n in new:
        _INERT[n] = type(n.rsplit(".", 1)[-1], (_Inert,), {})
    try:
        add([(_INERT[n], n) for n in new])
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def st_chunks(mm, start, dtype, itemsize, numel, shape, n):
    n = _chunk_len(shape, n)
    for i in range(0, numel, n):
        cnt = min(n, numel - i)
        off = start + i * itemsize
        t = torch.frombuffer(mm, dtype=torch.uint8, count=cnt * itemsize, offset=off)
        if dtype != torch.uint8:
            t = t.view(dtype)
        yield i, t
        del t
        advise_dontneed(mm, off, cnt * itemsize)


def _read_safetensors_header(path, size):
    with open_regular(path) as f:
        head = f.read(8)
        if len(head) < 8:
            raise LoadError("truncated: %d bytes, shorter than a safetensors header" % size)
        (n,) = struct.unpack("<Q", head)
        if n > SAFETENSORS_MAX_HEADER:
            raise LoadError("not a safetensors file: header length %d is implausible" % n)
        if 8 + n > size:
            raise LoadError(
                "truncated: the safetensors header needs %d bytes but the file has %d"
                % (8 + n, size)
            )
        raw = f.read(n)
    try:
        header = load_json(raw.decode("utf-8"), "the safetensors header")
    except (UnicodeDecodeError, ValueError) as e:
        raise LoadError("damaged safetensors header (not JSON: %s)" % short(e)) from e
    if not isinstance(header, dict):
        raise LoadError("damaged safetensors header (not a JSON object)")
    return header, 8 + n


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _st_invalid(info):
    """Why a safetensors header entry is no valid tensor description (None if it is)."""
    if not isinstance(info, dict) or "data_offsets" not in info:
        return "not a tensor description"
    offs, shape = info.get("data_offsets"), info.get("shape", [])
    if not (isinstance(offs, list) and len(offs) == 2 and all(is_int(o) for o in offs)):
        return "data_offsets %r are not two integers" % (offs,)
    if offs[0] < 0 or offs[1] < offs[0]:
        return "data_offsets %r are negative or end before they begin" % (offs,)
    if not (isinstance(shape, list) and all(is_int(d) for d in shape)):
        return "shape %r is not a list of integers" % (shape,)
    if any(d < 0 for d in shape):
        return "shape %r has a negative dimension" % (shape,)
    return None


def _st_check_layout(src, items):
    """Tensors must tile the data region: no two share bytes, no hole between them."""
    prev_end, prev = 0, None
    for begin, end, name, _ in items:
        if begin < prev_end:
            src.problems.append(
                "%s [%d, %d) overlaps %s (ends at %d): the header is damaged"
                % (name, begin, end, prev, prev_end)
            )
            return
        if begin > prev_end:
            src.problems.append(
                "%d bytes before %s are not part of any tensor (a hole at %d): the header is "
                "damaged" % (begin - prev_end, name, prev_end)
            )
            return
        prev_end, prev = end, name


def _open_safetensors(path, size, header_only=False):
    """A safetensors file as a :class:`Source`: one pass over the validated header, each entry
    either an Entry or a problem; the checks read in the order the format defines them."""
    src = Source(path, "safetensors", size)
    header, data_start = _read_safetensors_header(path, size)
    _st_metadata(src, header.pop("__metadata__", None))
    mm = None if header_only else _st_map(src, path, size, data_start)
    items = _st_items(src, header)
    _st_check_layout(src, items)
    missing = [item[2] for item in items if _st_entry(src, mm, data_start, item) == "past the end"]
    if missing:
        need = max(data_start + end for _, end, _, _ in items)
        src.problems.append(
            "truncated: %d of %d tensors lie past the end of the file (it has %d bytes, the "
            "header needs %d); first missing: %s"
            % (len(missing), len(items), size, need, missing[0])
        )
    if not items:
        src.problems.append("the safetensors header lists no tensors")
    return src


def _st_map(src, path, size, data_start):
    """The file memory-mapped (closed with ``src``), or None when it holds no tensor data."""
    if size <= data_start:
        return None
    f = open_regular(path)
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    finally:
        f.close()
    src._close.append(mm.close)
    return mm


def _st_items(src, header):
    """The header's valid entries as (begin, end, name, info) by offset; the others: problems."""
    items = []
    for name, info in header.items():
        why = _st_invalid(info)
        if why:
            src.problems.append("header entry %r: %s" % (name, why))
            continue
        items.append((info["data_offsets"][0], info["data_offsets"][1], name, info))
    items.sort(key=lambda x: (x[0], x[1]))
    return items


def _st_entry(src, mm, data_start, item):
    """One header entry into ``src.entries`` (or a note / problem); "past the end" when its
    bytes lie beyond the end of the file (the caller sums those up in one problem)."""
    begin, end, name, info = item
    dtype = DTYPES.get(info.get("dtype"))
    shape = tuple(info.get("shape", ()))
    if dtype is None:
        src.notes.append(
            "%s: dtype %s is none this scan reads: not checked" % (name, info.get("dtype"))
        )
        return None
    numel = 1
    for s in shape:
        numel *= s
    itemsize = dtype.itemsize
    if end - begin != numel * itemsize:
        src.problems.append(
            "%s: header gives %d bytes, but %s %s needs %d"
            % (name, end - begin, info.get("dtype"), list(shape), numel * itemsize)
        )
        return None
    if data_start + end > src.bytes:
        return "past the end"
    src.entries.append(
        _mapped_entry(mm, data_start + begin, name, dtype, shape, numel, numel * itemsize)
    )
    return None


def _mapped_entry(mm, offset, name, dtype, shape, numel, nbytes):
    """An :class:`Entry` for a tensor whose raw values lie at ``offset`` of the map ``mm``
    (safetensors, GGUF; None: the file is not mapped, its values are not read)."""
    chunks = raw = None
    if mm is not None:
        raw = (mm, offset)

        def chunks(n, s=offset, d=dtype, c=numel, sh=shape):  # diff reads values through torch
            return st_chunks(mm, s, torch_dtype(d), d.itemsize, c, sh, n)

    kind = name.rsplit(".", 1)[-1]
    return Entry(name, section_for_name(name), kind, dtype, shape, numel, nbytes, None, chunks, raw)


def torch_dtype(dtype):
    """The torch dtype of a safetensors :class:`values.Dtype` (diff and complex values read
    through torch; a scan of real floats does not)."""
    found = getattr(import_torch(), dtype.name, None)
    if found is None:
        raise Unscannable("dtype %s is unknown to torch %s" % (dtype, torch.__version__))
    return found


def _open_gguf(path, size):
    """A GGUF file as a :class:`Source`: its float and integer tensors as entries read like
    safetensors' (no torch); quantized ones and the header's lies as :func:`gguf.read_gguf`
    names them."""
    src = Source(path, "gguf", size)
    mm = _st_map(src, path, size, 0)
    head = read_gguf(mm, size)
    src.problems.extend(head.problems)
    src.notes.extend(head.notes)
    for name, shape, code, numel, nbytes, begin in head.tensors:
        src.entries.append(_mapped_entry(mm, begin, name, DTYPES[code], shape, numel, nbytes))
    return src


def _open_npy(path, size):
    """A NumPy ``.npy`` file as a :class:`Source`: one entry named by the file (no NumPy,
    torch or pickle; :mod:`.npy` reads and checks the header)."""
    src = Source(path, "npy", size)
    mm = _st_map(src, path, size, 0)
    name = os.path.basename(path)
    _npy_entry(src, mm, 0, size, name[:-4] if name.endswith(".npy") else name)
    return src


def _open_npz(path, size, header_only):
    """A NumPy ``.npz`` archive as a :class:`Source`, one entry per member (named as
    ``np.load(...).files`` names them): stored members read in place from the mapped file,
    compressed ones (``np.savez_compressed``) unpacked to a temporary file first (none for a
    header only)."""
    src = Source(path, "npz", size)
    f = open_regular(path)
    src._close.append(f.close)
    try:
        zf, members = npz_members(f, size)
    except LoadError:
        src.close()
        raise
    mm = _st_map(src, path, size, 0)
    for m in members:
        if m.start is not None:
            _npy_entry(src, mm, m.start, m.start + m.size, m.name)
            continue
        try:
            buf, end = _unpacked(src, zf, m, header_only)
        except LoadError as e:
            src.problems.append(e.reason)
            continue
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            src.problems.append("member %r cannot be unpacked: %s" % (m.name, short(e)))
            continue
        _npy_entry(src, buf, 0, end, m.name, header_only)
    return src


NPZ_HEAD = 65536  # bytes of a compressed member read for its header alone (inspect)


def _unpacked(src, zf, m, header_only):
    """(buffer, length) of a compressed member: its first bytes for a header (or when its
    values are not read), else the whole member in an unlinked temporary file, memory-mapped
    and closed with ``src``. The member is unpacked no further than its own ``.npy`` header
    says it holds (header + shape x itemsize) or the zip declares, whichever is smaller (a
    zip bomb lies in either): LoadError past that, the file removed at once."""
    with zf.open(m.info) as r:
        head = r.read(NPZ_HEAD)
        if header_only:
            return head, m.size
        limit, basis = _npz_limit(head, m)
        if limit is None:  # a damaged header or a dtype not read: its header alone tells
            return head, len(head)
        folder = tempfile.gettempdir()
        tmp = tempfile.TemporaryFile(prefix="ckpt-npz-", dir=folder)
        try:
            got = unpack_member(r, tmp, m.name, limit, basis, folder, head)
        except BaseException:
            tmp.close()
            raise
        src._close.append(tmp.close)
    if got == 0:
        return b"", 0
    mm = mmap.mmap(tmp.fileno(), 0, access=mmap.ACCESS_READ)
    src._close.append(mm.close)
    return mm, got


def _npz_limit(head, m):
    """(bytes, what says so): how far the member whose first bytes are ``head`` is unpacked;
    (None, None) when its header is damaged or its values are not read."""
    try:
        h = read_header(head, 0, len(head), m.name)
    except LoadError:
        return None, None
    if h.code is None or DTYPES[h.code].is_complex:
        return None, None
    numel = 1
    for d in h.shape:
        numel *= d
    own = h.data + numel * DTYPES[h.code].itemsize
    if own <= m.size:
        return own, "its .npy header says it holds (%s %s)" % (DTYPES[h.code], list(h.shape))
    return m.size, "the zip declares for it"


def _npy_entry(src, buf, start, end, name, header_only=False):
    """One array (its ``.npy`` bytes at [start, end) of ``buf``) into ``src``: an entry, a
    note for a dtype not read here, or a problem naming it."""
    try:
        head = read_header(buf, start, end, name)
    except LoadError as e:
        src.problems.append(e.reason)
        return
    if head.code is None or DTYPES[head.code].is_complex:
        why = head.why or "dtype %s" % DTYPES[head.code]
        src.notes.append("%s: %s %s: not checked" % (name, why, list(head.shape)))
        return
    dtype = DTYPES[head.code]
    numel = 1
    for d in head.shape:
        numel *= d
    nbytes = numel * dtype.itemsize
    if head.data + nbytes > end:
        src.problems.append(
            "%s: truncated: %s %s needs %d bytes of values, %d are there"
            % (name, dtype, list(head.shape), nbytes, max(0, end - head.data))
        )
        return
    if head.fortran:
        src.notes.append("%s: Fortran order: a first_index counts in column-major order" % name)
    mm = None if header_only or isinstance(buf, bytes) else buf
    src.entries.append(_mapped_entry(mm, head.data, name, dtype, head.shape, numel, nbytes))


def _st_metadata(src, meta):
    """The header's ``__metadata__`` (strings only, by the format): kept, and a step key read."""
    if not isinstance(meta, dict):
        return
    src.meta["metadata"] = meta
    for k in STEP_KEYS:
        if k in meta:
            try:
                src.meta["global_step"] = int(meta[k])
                break
            except (TypeError, ValueError):
                pass


def _sniff(path):
    """(size, first 16 bytes); LoadError for what cannot be opened."""
    if os.path.isdir(path):
        raise LoadError("is a directory, not a checkpoint file")
    try:
        size = os.path.getsize(path)
        with open_regular(path) as f:
            head = f.read(16)
    except PermissionError:
        raise LoadError(
            "permission denied: uid %d cannot read it; fix the file's permissions or scan "
            "as its owner" % euid()
        ) from None
    except FileNotFoundError:
        if os.path.islink(path):
            raise LoadError("a dangling symlink (to %r)" % os.readlink(path)) from None
        raise LoadError("no such file (removed while scanning)") from None
    except OSError as e:
        raise LoadError("cannot read: %s" % (e.strerror or e)) from e
    return size, head


def _lfs_pointer(path, size):
    """LoadError for a Git LFS pointer file (a clone without ``git lfs pull``)."""
    try:
        with open_regular(path) as f:
            text = f.read(1024).decode("utf-8", "replace")
    except OSError:
        text = ""
    if not text.startswith(LFS_POINTER.decode()):
        return LoadError("not a checkpoint: a %d-byte text file" % size, fmt="text")
    m = re.search(r"^size (\d+)", text, re.M)
    real = " (the real file has %s bytes)" % m.group(1) if m else ""
    return LoadError(
        "a Git LFS pointer file (%d bytes), not the checkpoint%s: the repository was cloned "
        "without its LFS content; run `git lfs pull` in the repository (or `git lfs pull "
        "--include=%s`)" % (size, real, os.path.basename(path)),
        fmt="git-lfs-pointer",
    )


def open_file(path, opts, header_only=False, sidecar=True):
    size, head = _sniff(path)
    if size == 0:
        raise LoadError(
            "empty file (0 bytes): the save was interrupted before any data was written"
        )
    if head.startswith(b"\x93NUMPY"):
        src = _numpy_format(_open_npy, path, size)
    elif head.startswith((b"PK\x03\x04", b"PK\x05\x06")) and (
        path.endswith(".npz") or looks_like_npz(path)
    ):
        src = _numpy_format(_open_npz, path, size, header_only)
    elif head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        src = _open_torch(path, size, True, opts)
    elif looks_like_safetensors(head):  # before pickle: a header length may start 0x80
        try:
            src = _open_safetensors(path, size, header_only=header_only)
        except LoadError as e:
            e.fmt = "safetensors"
            raise
    elif head.startswith(b"GGUF"):
        try:
            src = _open_gguf(path, size)
        except LoadError as e:
            e.fmt = "gguf"
            raise
    elif head.startswith(b"\x80"):
        src = _open_torch(path, size, False, opts)
    elif head.startswith(LFS_POINTER[:14]) and size < 1024:
        raise _lfs_pointer(path, size)
    else:
        raise LoadError(
            "not a checkpoint: neither a torch.save zip, a legacy torch pickle, safetensors nor GGUF "
            "(%d bytes, starting %r)" % (size, head[:8])
        )
    if sidecar:
        sidecar_step(src)
    return src


def _numpy_format(opener, path, size, *args):
    try:
        return opener(path, size, *args)
    except LoadError as e:
        e.fmt = "npz" if opener is _open_npz else "npy"
        raise


def open_index(path, opts, header_only=False):
    try:
        with open_regular(path, "r") as f:
            index = load_json(f, path)
    except PermissionError:
        raise LoadError("permission denied: uid %d cannot read the index" % euid()) from None
    except (OSError, ValueError) as e:
        raise LoadError("cannot read the shard index: %s" % short(e)) from e
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict):
        raise LoadError('not a Hugging Face shard index: no "weight_map" object')
    base = os.path.dirname(path)
    shards = sorted(set(str(v) for v in wmap.values()))
    try:
        where = {shard: inside(base, shard, path) for shard in shards}
    except EscapingName as e:
        raise LoadError(str(e), fmt="hf-sharded") from None
    src = Source(path, "hf-sharded", 0)
    src.notes.append("%d shards" % len(shards))
    for shard in shards:
        p = where[shard]
        expected = [k for k, v in wmap.items() if v == shard]
        if not os.path.exists(p):
            src.problems.append("shard %s is missing (%d tensors)" % (shard, len(expected)))
            continue
        try:
            part = open_file(p, opts, header_only=header_only)
        except LoadError as e:
            src.problems.append("shard %s: %s" % (shard, e.reason))
            src.needs_globals.extend(e.needs_globals)
            continue
        names = set(e.name for e in part.entries)
        absent = [k for k in expected if k not in names]
        if absent and not part.problems:
            src.problems.append(
                "shard %s lacks %d tensors the index puts there (first: %s)"
                % (shard, len(absent), absent[0])
            )
        adopt_part(src, part, "shard " + shard)
    sidecar_step(src)
    if isinstance(index.get("metadata"), dict):
        src.meta["metadata"] = index["metadata"]
    return src


def adopt_part(src, part, label, prefix="", section=None):
    """Make ``part`` (an opened file) a part of the composite checkpoint ``src``."""
    src.bytes += part.bytes
    src._close.append(part.close)
    src.problems.extend("%s: %s" % (label, p) for p in part.problems)
    src.needs_globals.extend(part.needs_globals)
    src.notes.extend("%s: %s" % (label, n) for n in part.notes)
    for e in part.entries:
        e.name = prefix + e.name
        if section is not None and e.section != OTHER:
            e.place(section)
        src.entries.append(e)
    src.optimizers.extend((prefix + p, o) for p, o in part.optimizers)
    src.trees.extend((prefix + p, o) for p, o in part.trees)
    for k in ("global_step", "step_key", "epoch"):
        if src.meta[k] is None:
            src.meta[k] = part.meta[k]
    for k, v in part.meta["scalars"].items():
        if len(src.meta["scalars"]) < 30:
            src.meta["scalars"].setdefault(prefix + k, v)


def open_part(src, path, label, opts, header_only, prefix="", section=None):
    """Open one file of a checkpoint directory into ``src``; a failure is a problem of src."""
    if not os.path.exists(path):
        src.problems.append("%s is missing" % label)
        return
    try:
        part = open_index(path, opts, header_only) if path.endswith(INDEX_SUFFIX) else None
        part = part or open_file(path, opts, header_only=header_only, sidecar=False)
    except LoadError as e:
        src.problems.append("%s: %s" % (label, e.reason))
        src.needs_globals.extend(e.needs_globals)
        return
    adopt_part(src, part, label, prefix, section)


def import_global(name):
    parts = name.split(".")
    err = None
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        try:
            obj = importlib.import_module(modname)
        except ImportError as e:
            err = e
            continue
        except Exception as e:
            raise Fatal(
                "--allow-global %s: importing %s failed: %s" % (name, modname, short(e))
            ) from e
        try:
            for a in parts[i:]:
                obj = getattr(obj, a)
        except AttributeError:
            raise Fatal(
                "--allow-global %s: module %s has no %s" % (name, modname, ".".join(parts[i:]))
            ) from None
        return obj
    raise Fatal(
        "--allow-global %s: cannot import it%s; give the full dotted name, e.g. argparse.Namespace"
        % (name, " (%s)" % short(err) if err else "")
    )


def allow_globals(names):
    if not names:
        return
    objs = [import_global(n) for n in names]
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:
        raise Fatal(
            "--allow-global needs torch >= 2.4 (this is %s); use --unsafe-pickle if you trust "
            "the files" % torch.__version__
        )
    add(objs)
