"""Checkpoint diagnostics: reading torch.distributed.checkpoint directories without a process group.

Part of ``ckpt.py``. ``.metadata`` is unpickled with an allow-list of torch's own record
classes, every ``__R_N.distcp`` storage is located and its bounds checked like safetensors'
before a chunk is read.
"""

from __future__ import annotations

import collections
import io
import mmap
import os
import pickle
import re
import struct
import zipfile

from ..infile import EscapingName, inside, open_regular
from .base import (
    STATE_CONTAINERS,
    STEP_KEYS,
    WEIGHTS,
    LoadError,
    import_torch,
    is_scalar_dtype,
    short,
    uses_torch,
)
from .formats import (
    META_NAME,
    Entry,
    Source,
    is_int,
    section_for_name,
    st_chunks,
    tensor_chunks,
)

# ----------------------------------------------------------- torch.distributed.checkpoint

# What a DCP .metadata pickle may name: torch's own metadata dataclasses and plain values.
DCP_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.filesystem",
    "torch.distributed.checkpoint.planner",
)

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())


def _path_str(*parts):
    return "/".join(str(p) for p in parts)


def _layout(name):
    layout = getattr(torch, str(name).replace("torch.", "", 1), None)
    if not isinstance(layout, torch.layout):
        raise pickle.UnpicklingError("unknown layout %r" % (name,))
    return layout


class _DcpRecord(object):
    """Stands in for DCP's metadata dataclasses (Metadata, TensorStorageMetadata,
    MetadataIndex, _StorageInfo, ...): holds their fields and runs nothing. Importing the real
    ones would import torch.distributed.checkpoint (~0.5 s), for plain records."""

    def __init__(self, *args):
        self.args = args  # an Enum member: _MEM_FORMAT_ENCODING(0)

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state  # TensorProperties pickles a tuple: (dtype, layout, ...)


_DCP_CLASSES = {}


def _dcp_dtype(props):
    dtype = getattr(props, "dtype", None)
    if dtype is None and isinstance(getattr(props, "state", None), tuple):
        dtype = props.state[0]
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


class _DcpMetaUnpickler(pickle.Unpickler):
    """Reads .metadata without running code from it: only DCP's metadata classes (as inert
    records), torch.Size, dtypes and layouts may be named (torch itself uses pickle.load)."""

    def find_class(self, module, name):
        if module in DCP_MODULES and re.match(r"^_?[A-Z][A-Za-z_]*$", name):
            key = module + "." + name
            if key not in _DCP_CLASSES:
                _DCP_CLASSES[key] = type(name, (_DcpRecord,), {})
            return _DCP_CLASSES[key]
        elif module == "torch":
            obj = getattr(torch, name, None)
            if obj is torch.Size or isinstance(
                obj, (torch.dtype, torch.layout, torch.memory_format)
            ):
                return obj
        elif module == "pathlib" and name.endswith("Path"):
            return _path_str  # storage_meta.checkpoint_id: the path it was saved to
        elif (module, name) == ("torch.serialization", "_get_layout"):
            return _layout  # how torch.layout pickles: a lookup by name
        elif (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise pickle.UnpicklingError(
            "the metadata names %s.%s, which a DCP .metadata file never holds" % (module, name)
        )


class _Window(io.RawIOBase):
    """A read-only view of ``length`` bytes at ``start`` of an open file (one DCP item)."""

    def __init__(self, f, start, length):
        super().__init__()
        self.f, self.start, self.length, self.pos = f, start, length, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, pos, whence=0):
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, base + pos))
        return self.pos

    def readinto(self, b):
        n = min(len(b), self.length - self.pos)
        if n <= 0:
            return 0
        self.f.seek(self.start + self.pos)
        data = self.f.read(n)
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _rebuild_ref(storage, storage_offset, size, stride, *rest):
    return {
        "storage": storage,
        "offset": storage_offset,
        "size": tuple(size),
        "stride": tuple(stride),
    }


class _TensorRefUnpickler(pickle.Unpickler):
    """The data.pkl of a torch.save'd tensor, read as a reference (storage, offset, size,
    stride) to its bytes instead of a tensor: nothing is loaded, no code runs."""

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unexpected persistent id")
        return {"dtype": pid[1], "key": str(pid[2]), "numel": pid[4]}

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_ref
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage") and name != "UntypedStorage":
            dtype = getattr(getattr(torch, name, None), "dtype", None)
            if isinstance(dtype, torch.dtype):
                return dtype
        raise pickle.UnpicklingError("not a plain tensor (%s.%s)" % (module, name))


def _dcp_locate(f, start, length):
    """(absolute offset of the data, dtype, shape) of a contiguous tensor torch.save'd at
    ``start`` of file ``f``; None when it is not that simple (then torch.load reads it)."""
    try:
        zf = zipfile.ZipFile(_Window(f, start, length))
        pkl = [i for i in zf.infolist() if i.filename.endswith("/data.pkl")]
        if len(pkl) != 1:
            return None
        ref = _TensorRefUnpickler(io.BytesIO(zf.read(pkl[0]))).load()
        st = ref["storage"]
        info = zf.getinfo(pkl[0].filename[: -len("data.pkl")] + "data/" + st["key"])
    except (
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        KeyError,
        TypeError,
        ValueError,
        EOFError,
        AttributeError,
        IndexError,
    ):
        return None
    size, stride = ref["size"], ref["stride"]
    want, expect = 1, []
    for d in reversed(size):
        expect.insert(0, want)
        want *= d
    if info.compress_type != zipfile.ZIP_STORED or (want > 1 and tuple(expect) != stride):
        return None
    f.seek(start + info.header_offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return None
    n, e = struct.unpack("<HH", head[26:30])
    itemsize = torch.empty((), dtype=st["dtype"]).element_size()
    if (ref["offset"] + want) * itemsize > info.file_size:
        return None
    return start + info.header_offset + 30 + n + e + ref["offset"] * itemsize, st["dtype"], size


# long: .metadata checks, then each storage file in turn; a split passes the same five locals.
def open_dcp(path, opts, header_only):
    """A torch.distributed.checkpoint directory, read shard by shard without a process group:
    .metadata lists every tensor chunk and where it lies (file, offset, length); each chunk is
    a torch.save'd tensor whose bytes are memory-mapped and checked in place."""
    import_torch()
    src = Source(path, "dcp", 0)
    try:
        with open_regular(os.path.join(path, ".metadata")) as f:
            md = _DcpMetaUnpickler(f).load()
        sdm, storage = md.state_dict_metadata, md.storage_data
        sdm.items(), storage.items()
    except (
        OSError,
        EOFError,
        pickle.UnpicklingError,
        AttributeError,
        ImportError,
        TypeError,
        ValueError,
    ) as e:
        raise LoadError("cannot read the DCP .metadata: %s" % short(e), fmt="dcp") from e
    try:
        for info in storage.values():
            inside(path, info.relative_path, os.path.join(path, ".metadata"))
    except EscapingName as e:
        raise LoadError(str(e), fmt="dcp") from None
    files, sizes, chunks_of = {}, {}, {}
    for fqn, m in sdm.items():
        for c in getattr(m, "chunks", None) or ():
            chunks_of[(fqn, tuple(c.offsets))] = tuple(c.sizes)
    skipped_bytes = 0
    for idx, info in sorted(storage.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        m = sdm.get(idx.fqn)
        if not hasattr(m, "chunks"):
            skipped_bytes += 1  # a BytesStorageMetadata item: pickled objects, not tensors
            continue
        rel = info.relative_path
        if rel not in files:
            files[rel] = _dcp_file(src, path, rel, sizes)
        f = files[rel]
        if f is None:
            continue
        if not (is_int(info.offset) and is_int(info.length)) or min(info.offset, info.length) < 0:
            src.problems.append(
                "%s: .metadata gives offset %r, length %r: the metadata is damaged"
                % (idx.fqn, info.offset, info.length)
            )
            continue
        if info.offset + info.length > sizes[rel]:
            src.problems.append(
                "truncated: %s has %d bytes, but %s needs %d"
                % (rel, sizes[rel], idx.fqn, info.offset + info.length)
            )
            continue
        if getattr(info, "transform_descriptors", None):
            src.notes.append(
                "%s: stored with %s: not checked" % (idx.fqn, ", ".join(info.transform_descriptors))
            )
            continue
        offsets = tuple(idx.offset or ())
        shape = chunks_of.get((idx.fqn, offsets), tuple(m.size))
        name = idx.fqn if len(m.chunks) == 1 else "%s@%s" % (idx.fqn, list(offsets))
        _dcp_entry(src, f, name, idx.fqn, _dcp_dtype(m.properties), shape, info, opts)
    if skipped_bytes:
        src.notes.append("%d non-tensor items (pickled objects) not checked" % skipped_bytes)
    src.bytes = sum(sizes.values())
    src.notes.append("%d items in %d files" % (len(sdm), len(files)))
    return src


def _dcp_file(src, path, rel, sizes):
    p = os.path.join(path, rel)
    try:
        f = open_regular(p)
    except OSError as e:
        src.problems.append("%s: %s" % (rel, e.strerror or e))
        return None
    sizes[rel] = os.fstat(f.fileno()).st_size
    src._close.append(f.close)
    return f


def _dcp_entry(src, f, name, fqn, dtype, shape, info, opts):
    numel = 1
    for d in shape:
        numel *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    loc = _dcp_locate(f, info.offset, info.length)
    if loc is not None and (loc[1] != dtype or tuple(loc[2]) != tuple(shape)):
        src.problems.append(
            "%s: the file holds %s %s, .metadata says %s %s"
            % (name, loc[1], list(loc[2]), dtype, list(shape))
        )
        return
    if loc is not None:
        mm = _dcp_map(src, f)
        chunks = lambda n, s=loc[0]: st_chunks(mm, s, dtype, itemsize, numel, shape, n)  # noqa: E731
    else:

        def chunks(n, start=info.offset, length=info.length):
            t = torch.load(_Window(f, start, length), map_location="cpu", weights_only=True)
            return tensor_chunks(t, n, None)

    depth = fqn.count(".")
    section = section_for_name(fqn)
    slot = fqn.rsplit(".", 1)[-1]
    if (
        len(shape) == 0
        and section == WEIGHTS
        and depth <= 1
        and (depth == 0 or fqn.split(".")[0] in STATE_CONTAINERS or META_NAME.search(fqn))
    ):
        value = next(chunks(1))[1]
        x = float(value[0]) if is_scalar_dtype(dtype) and not dtype.is_complex else None
        x = int(x) if x is not None and x.is_integer() else x
        src.meta["scalars"][fqn] = x
        if slot in STEP_KEYS and src.meta["global_step"] is None:
            src.meta["global_step"], src.meta["step_key"] = x, fqn
        return
    src.entries.append(
        Entry(name, section, slot, dtype, tuple(shape), numel, numel * itemsize, None, chunks)
    )


def _dcp_map(src, f):
    mm = getattr(f, "_remotekit_mm", None)
    if mm is None:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        src._close.insert(0, mm.close)
        try:
            f._remotekit_mm = mm
        except AttributeError:
            pass
    return mm
