"""Checkpoint diagnostics: GGUF files (llama.cpp's), read without torch.

Part of ``ckpt.py``; imports only ``base``: :func:`read_gguf` gives ``formats`` (which makes
the entries) the tensors of a mapped file. The layout (ggml's docs/gguf.md): magic
``GGUF``, version, tensor and metadata counts, the metadata key/value pairs, one info per tensor
(name, dimensions, ggml type, offset from the data start), padding to ``general.alignment``
(default 32), the data. Every length and count is checked against the file's size before it is
used, so a lying header is an error naming the file and the tensor, never a large allocation.

Float tensors (F32, F16, BF16, F64) are checked by :func:`values.check_raw`; integer tensors are
"other"; quantized ones (Q4_K, ...: values scaled per block) are not checked, and a note says so.
"""

from __future__ import annotations

import struct

from .base import LoadError

MAGIC = b"GGUF"
# ggml types: (name, values per block, bytes per block); floats and integers name a Dtype code.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
# Metadata value types: fixed sizes by type id; 8 is a string, 9 an array.
VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
MAX_DIMS = 8  # ggml's GGML_MAX_DIMS is 4; more is a damaged header


class _Reader(object):
    """A cursor over the mapped file; every read is bounds-checked (LoadError past the end)."""

    def __init__(self, mm, size):
        self.mm, self.size, self.pos = mm, size, 0

    def take(self, n, what):
        if n < 0 or self.pos + n > self.size:
            raise LoadError(
                "truncated or damaged GGUF header: %s needs %d bytes at offset %d, the file has "
                "%d" % (what, n, self.pos, self.size)
            )
        start, self.pos = self.pos, self.pos + n
        return start

    def unpack(self, fmt, what):
        start = self.take(struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.mm, start)

    def string(self, what):
        (n,) = self.unpack("<Q", what)
        start = self.take(n, what)
        return self.mm[start : start + n].decode("utf-8", "replace")

    def skip_value(self, vtype, what, depth=0):
        if vtype in VALUE_SIZES:
            self.take(VALUE_SIZES[vtype], what)
        elif vtype == STRING:
            (n,) = self.unpack("<Q", what)
            self.take(n, what)
        elif vtype == ARRAY and depth < 4:
            etype, count = self.unpack("<IQ", what)
            if etype in VALUE_SIZES:
                self.take(count * VALUE_SIZES[etype], what)
            else:
                if count > self.size - self.pos:  # every element takes at least one byte
                    self.take(count, what)
                for _ in range(count):
                    self.skip_value(etype, what, depth + 1)
        else:
            raise LoadError("damaged GGUF header: %s has unknown value type %d" % (what, vtype))


class Header(object):
    """What :func:`read_gguf` found: ``tensors`` as (name, shape, ggml type name, numel,
    nbytes, absolute offset), each inside the file and none overlapping another; ``problems``
    (the header's lies, by tensor) and ``notes``."""

    def __init__(self):
        self.tensors, self.problems, self.notes = [], [], []


def read_gguf(mm, size):
    """The header of the GGUF file mapped as ``mm``; LoadError when it cannot be read."""
    r = _Reader(mm, size)
    r.take(4, "the magic")
    version, n_tensors, n_kv = r.unpack("<IQQ", "the counts")
    if version < 2:
        raise LoadError("GGUF version %d is not read here (2 and later are)" % version)
    alignment = _metadata(r, n_kv)
    infos = _tensor_infos(r, n_tensors)
    head = Header()
    _layout(head, infos, -(-r.pos // alignment) * alignment, alignment, size)
    if not infos:
        head.problems.append("the GGUF header lists no tensors")
    return head


def _metadata(r, n_kv):
    """Skip the metadata pairs (each bounds-checked); returns general.alignment (default 32)."""
    if n_kv > r.size:  # a pair takes more than one byte
        raise LoadError("damaged GGUF header: %d metadata pairs in %d bytes" % (n_kv, r.size))
    alignment = 32
    for i in range(n_kv):
        key = r.string("metadata key %d" % i)
        (vtype,) = r.unpack("<I", "metadata %r" % key)
        if key == "general.alignment" and vtype == 4:
            (alignment,) = r.unpack("<I", "metadata %r" % key)
            if alignment == 0 or alignment & (alignment - 1):
                raise LoadError("damaged GGUF header: general.alignment %d" % alignment)
        else:
            r.skip_value(vtype, "metadata %r" % key)
    return alignment


def _tensor_infos(r, n_tensors):
    """[(name, shape, ggml type, offset)] as the header lists them."""
    if n_tensors > r.size:
        raise LoadError("damaged GGUF header: %d tensors in %d bytes" % (n_tensors, r.size))
    infos = []
    for i in range(n_tensors):
        name = r.string("tensor info %d" % i)
        (n_dims,) = r.unpack("<I", "tensor %r" % name)
        if n_dims > MAX_DIMS:
            raise LoadError("damaged GGUF header: tensor %r has %d dimensions" % (name, n_dims))
        dims = r.unpack("<%dQ" % n_dims, "tensor %r" % name)
        gtype, offset = r.unpack("<IQ", "tensor %r" % name)
        infos.append((name, tuple(reversed(dims)), gtype, offset))  # ggml lists ne[0] first
    return infos


def _layout(head, infos, data_start, alignment, size):
    """The tensors that lie whole inside the file into ``head``; the layout's lies become
    problems naming the tensor."""
    spans, quantized, missing = [], {}, []
    for name, shape, gtype, offset in infos:
        numel = 1
        for d in shape:
            numel *= d
        kind = GGML_TYPES.get(gtype)
        if kind is None:
            head.notes.append(
                "%s: ggml type %d is none this scan reads: not checked" % (name, gtype)
            )
            continue
        code, block, block_bytes = kind
        if numel % block or offset % alignment:
            head.problems.append(
                "%s: %s %s does not fill whole blocks of %d, or its offset %d is not aligned to "
                "%d: the header is damaged" % (name, code, list(shape), block, offset, alignment)
            )
            continue
        nbytes = numel // block * block_bytes
        begin = data_start + offset
        if begin + nbytes > size:
            missing.append(name)
            continue
        spans.append((begin, begin + nbytes, name))
        if block > 1:
            quantized[code] = quantized.get(code, 0) + 1
            continue
        head.tensors.append((name, shape, code, numel, nbytes, begin))
    _check_overlaps(head, spans)
    if missing:
        head.problems.append(
            "truncated: %d of %d tensors lie past the end of the file (%d bytes); first "
            "missing: %s" % (len(missing), len(infos), size, missing[0])
        )
    if quantized:
        head.notes.append(
            "%d quantized tensor(s) (%s) not checked: their values are scaled per block"
            % (sum(quantized.values()), ", ".join(sorted(quantized)))
        )


def _check_overlaps(head, spans):
    spans.sort()
    for (_, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            head.problems.append(
                "%s [%d, %d) overlaps %s (ends at %d): the header is damaged" % (n1, b1, e1, n0, e0)
            )
            return
