"""Checkpoint diagnostics: NumPy ``.npy`` files and ``.npz`` archives, read without NumPy,
torch or pickle.

Part of ``ckpt.py``; imports only ``base``: :func:`read_header` gives ``formats`` (which makes
the entries) one array's header, :func:`npz_members` the members of an archive. The layout
(NumPy's ``numpy/lib/format.py``, NEP 1): the magic ``\\x93NUMPY``, a version (1.0: a 2-byte
header length; 2.0 and 3.0: 4 bytes), an ASCII (3.0: UTF-8) Python dict literal with ``descr``,
``fortran_order`` and ``shape``, padded so that the data starts aligned, then the values. The
header is bounded (NumPy's own default limit, 10,000 bytes), parsed with
:func:`ast.literal_eval` (literals only: nothing runs) and validated; the data must lie inside
the file. An object array (``|O``: pickled values) is named in a note and never loaded, as
``np.load(allow_pickle=False)`` refuses it; a structured or big-endian dtype is named, not
checked. An ``.npz`` is a zip of ``.npy`` members: stored ones are read in place, compressed
ones (``np.savez_compressed``) are unpacked first, into an unlinked private temporary file,
no further than the member's own header says it holds (header + shape x itemsize) or the
zip declares, whichever is smaller, and only where the temp dir has room for that
(:func:`.base.unpack_member`, shared with the zip archives of torch files): a zip bomb's
member is refused by name past it, the others still read.
"""

from __future__ import annotations

import ast
import struct
import zipfile

from .base import LoadError

MAGIC = b"\x93NUMPY"
MAX_HEADER = 10000  # numpy.lib.format's default max_header_size
# descr -> the safetensors dtype code its values are read as (little-endian or byte-sized).
CODES = {"<f8": "F64", "<f4": "F32", "<f2": "F16", "<i8": "I64", "<i4": "I32", "<i2": "I16"}
CODES.update({"|i1": "I8", "<u8": "U64", "<u4": "U32", "<u2": "U16", "|u1": "U8", "|b1": "BOOL"})
CODES.update({"<c8": "C64", "<c16": "C128"})
NOT_READ = "not checked"


class Header(object):
    """One array: ``code`` (a values.DTYPES key, or None with ``why`` naming the dtype that is
    not read), ``shape``, ``fortran`` and ``data`` (the absolute offset of the values)."""

    def __init__(self, code, why, shape, fortran, data):
        self.code, self.why, self.shape, self.fortran, self.data = code, why, shape, fortran, data


def read_header(buf, start, end, what):
    """The header of the array whose ``.npy`` bytes lie at [start, end) of ``buf``; LoadError
    naming ``what`` when it is damaged or lies about where its values are."""
    if end - start < 10 or bytes(buf[start : start + 6]) != MAGIC:
        raise LoadError("%s: not a .npy array (no \\x93NUMPY magic)" % what)
    major = buf[start + 6]
    if major not in (1, 2, 3):
        raise LoadError("%s: .npy format version %d is not read here (1-3 are)" % (what, major))
    width = 2 if major == 1 else 4
    (n,) = struct.unpack_from("<H" if width == 2 else "<I", buf, start + 8)
    head = start + 8 + width
    if n > MAX_HEADER:
        raise LoadError("%s: .npy header of %d bytes (more than %d)" % (what, n, MAX_HEADER))
    if head + n > end:
        raise LoadError(
            "%s: truncated: the .npy header needs %d bytes, %d are there"
            % (what, head + n - start, end - start)
        )
    text = bytes(buf[head : head + n]).decode("utf-8" if major == 3 else "latin-1", "replace")
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as e:
        raise LoadError("%s: damaged .npy header (%s)" % (what, type(e).__name__)) from None
    return _validated(d, what, head + n)


def _validated(d, what, data):
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise LoadError(
            "%s: damaged .npy header (not a dict of descr, fortran_order and shape)" % what
        )
    shape, fortran, descr = d["shape"], d["fortran_order"], d["descr"]
    if not isinstance(shape, tuple) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        raise LoadError("%s: damaged .npy header (shape %r)" % (what, shape))
    if not isinstance(fortran, bool):
        raise LoadError("%s: damaged .npy header (fortran_order %r)" % (what, fortran))
    if not isinstance(descr, str):  # a list: a structured dtype
        return Header(None, "a structured dtype", shape, fortran, data)
    if descr in ("|O", "<O", ">O", "O"):
        return Header(None, "an object array (pickled values: not loaded)", shape, fortran, data)
    code = CODES.get(descr)
    if code is None:
        return Header(None, "dtype %r" % descr[:40], shape, fortran, data)
    return Header(code, None, shape, fortran, data)


class Member(object):
    """One ``.npy`` member of an ``.npz`` archive: its ``name`` (without ``.npy``), the
    ``size`` of its bytes, and ``start`` (their offset in the file) when stored uncompressed,
    else None (``info`` opens it through :mod:`zipfile`)."""

    def __init__(self, name, info, start):
        self.name, self.info, self.start, self.size = name, info, start, info.file_size


def npz_members(f, size):
    """The members of the zip archive open as ``f`` (``size`` bytes): LoadError when it is no
    archive of ``.npy`` members, or a stored member's bytes lie outside the file."""
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise LoadError("damaged .npz archive (%s)" % e) from None
    infos = zf.infolist()
    if not infos or not all(i.filename.endswith(".npy") for i in infos):
        raise LoadError("a zip archive, but not a NumPy .npz (its members are not all .npy)")
    out = []
    for info in infos:
        start = None
        if info.compress_type == zipfile.ZIP_STORED:
            start = _stored_start(f, info, size)
        out.append(Member(info.filename[:-4], info, start))
    return zf, out


def _stored_start(f, info, size):
    """Where a stored member's bytes begin: after its local header (30 bytes, then its name
    and extra field, whose lengths the local header gives), checked against the file."""
    local = b""
    if 0 <= info.header_offset <= size - 30:
        f.seek(info.header_offset)
        local = f.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise LoadError("damaged .npz archive: no local header for %r" % info.filename)
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > size:
        raise LoadError(
            "truncated .npz archive: member %r needs bytes up to %d, the file has %d"
            % (info.filename, start + info.file_size, size)
        )
    return start
