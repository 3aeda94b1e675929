"""Checkpoint diagnostics: checking raw float bytes (safetensors) without torch.

Part of ``ckpt.py``; imports only ``base``. A :class:`Dtype` is a safetensors dtype as the
records name it ("float32", "bfloat16", torch's names) with its bit layout; :func:`check_raw`
folds the values of one tensor, read in bounded chunks out of a memory map, into a
:class:`Stats`, with NumPy where it imports and with the standard library where it does not
(slower, same counts). torch is never imported here: a safetensors scan needs none.

Every float format checked here is sign-magnitude: with the sign bit cleared, the bits of a
value (``a``) order like its magnitude, and the exponent field all ones (``a >= E``) is exactly
NaN or +-Inf. So bf16 and fp8, which NumPy has no type for, are checked as unsigned integers,
exactly; one ``max`` of ``a`` per chunk tells a clean chunk and gives its largest magnitude.
"""

from __future__ import annotations

import array
import math
import struct
import sys
import threading

from .base import advise_dontneed

# ------------------------------------------------------------------------------- dtypes


class Dtype(object):
    """A safetensors dtype: its record name, size, and (floats) the masks :func:`check_raw`
    tests; it compares equal to the torch dtype of that name (diff pairs safetensors with
    torch files)."""

    __slots__ = ("code", "decode", "exp", "has_inf", "is_complex", "is_floating_point")
    __slots__ += ("itemsize", "name", "sign")

    def __init__(self, code, name, itemsize, kind="int", sign=0, exp=0, has_inf=True, decode=None):
        self.code, self.name, self.itemsize = code, name, itemsize
        self.is_floating_point = kind == "float"
        self.is_complex = kind == "complex"
        self.sign, self.exp, self.has_inf, self.decode = sign, exp, has_inf, decode

    def __str__(self):
        return self.name

    def __repr__(self):
        return "Dtype(%s)" % self.name

    def __eq__(self, other):
        return str(other).replace("torch.", "") == self.name

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.name)


def _unpacker(fmt, shift=0):
    """Magnitude bits -> float through a struct format; ``shift`` widens bf16 to float32 and
    fp8 e5m2 to float16 (each is the top half of the wider format)."""
    bits = struct.Struct("<" + {"d": "Q", "f": "I", "e": "H"}[fmt])
    value = struct.Struct("<" + fmt)
    return lambda a: value.unpack(bits.pack(a << shift))[0]


def _e4m3(a):
    exp, man = a >> 3, a & 7
    return man / 8.0 * 2.0**-6 if exp == 0 else (1 + man / 8.0) * 2.0 ** (exp - 7)


# Sign bit, exponent field (all ones: NaN/Inf), whether all-ones with a zero mantissa is Inf
# (e4m3fn and e8m0 have no Inf: all-ones is NaN), and how to read a magnitude back.
DTYPES = {
    d.code: d
    for d in (
        Dtype("F64", "float64", 8, "float", 1 << 63, 0x7FF << 52, True, _unpacker("d")),
        Dtype("F32", "float32", 4, "float", 1 << 31, 0xFF << 23, True, _unpacker("f")),
        Dtype("F16", "float16", 2, "float", 1 << 15, 0x1F << 10, True, _unpacker("e")),
        Dtype("BF16", "bfloat16", 2, "float", 1 << 15, 0xFF << 7, True, _unpacker("f", 16)),
        Dtype("F8_E4M3", "float8_e4m3fn", 1, "float", 0x80, 0x7F, False, _e4m3),
        Dtype("F8_E5M2", "float8_e5m2", 1, "float", 0x80, 0x1F << 2, True, _unpacker("e", 8)),
        Dtype("F8_E8M0", "float8_e8m0fnu", 1, "float", 0, 0xFF, False, lambda a: 2.0 ** (a - 127)),
        Dtype("C64", "complex64", 8, "complex"),
        Dtype("C128", "complex128", 16, "complex"),
        Dtype("I64", "int64", 8),
        Dtype("I32", "int32", 4),
        Dtype("I16", "int16", 2),
        Dtype("I8", "int8", 1),
        Dtype("U64", "uint64", 8),
        Dtype("U32", "uint32", 4),
        Dtype("U16", "uint16", 2),
        Dtype("U8", "uint8", 1),
        Dtype("BOOL", "bool", 1),
    )
}


def raw_checkable(dtype):
    """True when :func:`check_raw` reads ``dtype`` (the floats above; complex goes to torch)."""
    return isinstance(dtype, Dtype) and dtype.is_floating_point


# ------------------------------------------------------------------------------ counting


class Stats(object):
    """Exact counts for one tensor; ``max_abs``/``min`` are over its finite values."""

    __slots__ = ("first_bad", "max_abs", "min", "nan", "negative", "neginf", "numel", "posinf")

    def __init__(self, numel):
        self.numel = numel
        self.nan = self.posinf = self.neginf = self.negative = 0
        self.max_abs = None
        self.min = None
        self.first_bad = None

    @property
    def nonfinite(self):
        return self.nan + self.posinf + self.neginf

    def minmax(self, mn, mx):
        a = max(abs(mn), abs(mx))
        self.max_abs = a if self.max_abs is None else max(self.max_abs, a)
        self.min = mn if self.min is None else min(self.min, mn)

    def fold_abs(self, a):
        self.max_abs = a if self.max_abs is None else max(self.max_abs, a)


def numpy_or_none():
    """NumPy, or None: the standard-library path answers without it."""
    try:
        import numpy
    except Exception:  # ImportError, or a broken install raising anything
        return None
    return numpy


_LOCAL = threading.local()  # per check thread: a scratch array for the magnitude bits


def check_raw(mm, start, dtype, numel, n, nonneg=False, progress=None, use_numpy=True):
    """Exact counts of the ``numel`` values of ``dtype`` at byte ``start`` of the map ``mm``,
    ``n`` values at a time (``nonneg``: a negative value is a finding too, as in exp_avg_sq);
    each checked chunk's pages go back to the kernel. ``use_numpy=False`` takes the standard
    library's path, as a Python without NumPy does."""
    np = numpy_or_none() if use_numpy else None
    st = Stats(numel)
    size = dtype.itemsize
    for i in range(0, numel, n):
        cnt = min(n, numel - i)
        off = start + i * size
        if np is not None:
            _np_chunk(np, mm, off, cnt, dtype, i, st, nonneg)
        else:
            for j in range(0, cnt, PY_BLOCK):
                k = min(PY_BLOCK, cnt - j)
                _py_block(mm[off + j * size : off + (j + k) * size], dtype, i + j, st, nonneg)
        advise_dontneed(mm, off, cnt * size)
        if progress is not None:
            progress.advance(cnt * size)
    return st


def _mask(d):
    return ~d.sign & ((1 << 8 * d.itemsize) - 1)


# float32 / float64: NumPy's own min and max (SIMD, NaN propagates) beat the bit test by
# ~1.8x; its float16 reductions are ~50x slower than the bit test (measured on 16 MiB chunks).
NATIVE = {"float32": "<f4", "float64": "<f8"}


def _np_chunk(np, mm, off, cnt, d, base, st, nonneg):
    """One chunk with NumPy: a min and a max of the floats (float32/64), else one AND and one
    max of the bits, tell a clean chunk; only a chunk with a NaN, Inf or (``nonneg``) negative
    value is counted value by value."""
    ut = np.dtype("<u%d" % d.itemsize)
    if d.name in NATIVE:
        x = np.frombuffer(mm, dtype=NATIVE[d.name], count=cnt, offset=off)
        mn, mx = float(x.min()), float(x.max())
        if math.isfinite(mn) and math.isfinite(mx) and not (nonneg and mn < 0):
            st.fold_abs(max(-mn, mx))
            return
    u = np.frombuffer(mm, dtype=ut, count=cnt, offset=off)
    scratch = getattr(_LOCAL, "scratch", None)
    if scratch is None or scratch.dtype != ut or scratch.size < cnt:
        scratch = _LOCAL.scratch = np.empty(max(cnt, 1 << 16), dtype=ut)
    a = np.bitwise_and(u, ut.type(_mask(d)), out=scratch[:cnt])
    top = int(a.max())
    nonneg = nonneg and d.sign
    if top < d.exp and not (nonneg and int(u.max()) > d.sign):
        st.fold_abs(d.decode(top))
        return
    exp = ut.type(d.exp)
    fin = a < exp
    if d.has_inf:
        st.nan += int(np.count_nonzero(a > exp))
        st.posinf += int(np.count_nonzero(u == exp))
        st.neginf += int(np.count_nonzero(u == ut.type(d.exp | d.sign)))
    else:
        st.nan += int(np.count_nonzero(~fin))
    bad = ~fin
    if nonneg:  # -Inf is negative too; NaN is not
        neg = (u > ut.type(d.sign)) & ((a <= exp) if d.has_inf else fin)
        st.negative += int(np.count_nonzero(neg))
        bad |= neg
    if st.first_bad is None and bad.any():
        st.first_bad = base + int(np.argmax(bad))
    if fin.any():
        st.fold_abs(d.decode(int(a[fin].max())))


PY_BLOCK = 1 << 20  # values per block on the standard library's path (a copy of 1-8 MiB)
_TABLES = {}
_CASTS = {8: "Q", 4: "I", 2: "H"}  # unsigned, native size; memoryview casts need native order
LITTLE = sys.byteorder == "little"


def _tables(d):
    """bytes.translate tables for the top byte of ``d``: the sign bit cleared, and 1 where
    the sign bit is set (both whole-block operations at C speed)."""
    key = (d.sign, d.itemsize)
    if key not in _TABLES:
        sign_top = d.sign >> 8 * (d.itemsize - 1)
        _TABLES[key] = (
            bytes(b & ~sign_top for b in range(256)),
            bytes(int(bool(b & sign_top)) for b in range(256)),
        )
    return _TABLES[key]


def _py_top(raw, d, clear):
    """The largest magnitude's bits in ``raw`` (little-endian values of ``d``): a copy with
    the top bytes' sign bits cleared by one translate, then one C-level ``max`` over it cast
    to unsigned integers (no struct tuple, no second pass for the negative values)."""
    size = d.itemsize
    if size == 1:  # the magnitudes are the bytes: the largest present, by memchr
        mags = raw.translate(clear)
        return next(v for v in range(255, -1, -1) if bytes((v,)) in mags)
    masked = bytearray(raw)
    masked[size - 1 :: size] = masked[size - 1 :: size].translate(clear)
    if LITTLE:
        return max(memoryview(masked).cast(_CASTS[size]))
    values = array.array(_CASTS[size])  # pragma: no cover - big-endian hosts
    values.frombytes(bytes(masked))
    values.byteswap()
    return max(values)


def _py_block(raw, d, base, st, nonneg):
    """One block with the standard library: the largest magnitude (:func:`_py_top`) tells a
    clean block (below the all-ones exponent: no NaN/Inf) and is its max_abs; with ``nonneg``,
    a translate of the top bytes tells whether any sign bit is set. Only a block with a
    finding (or a -0.0 where negatives matter) is counted value by value."""
    if not raw:
        return
    clear, signs = _tables(d)
    top = _py_top(raw, d, clear)
    negative = nonneg and d.sign and b"\x01" in raw[d.itemsize - 1 :: d.itemsize].translate(signs)
    if top < d.exp and not negative:
        st.fold_abs(d.decode(top))
        return
    _py_exact(raw, d, base, st, nonneg)


def _py_exact(raw, d, base, st, nonneg):
    fmt = {8: "Q", 4: "I", 2: "H", 1: "B"}[d.itemsize]
    mask = _mask(d)
    top = -1
    for i, u in enumerate(struct.unpack("<%d%s" % (len(raw) // d.itemsize, fmt), raw)):
        a = u & mask
        negative = nonneg and d.sign and u > d.sign and (a <= d.exp if d.has_inf else a < d.exp)
        if a < d.exp and not negative:
            top = max(top, a)
            continue
        if negative:
            st.negative += 1
            if a < d.exp:
                top = max(top, a)
        if a >= d.exp:
            if d.has_inf and a == d.exp:
                if u & d.sign:
                    st.neginf += 1
                else:
                    st.posinf += 1
            else:
                st.nan += 1
        if st.first_bad is None:
            st.first_bad = base + i
    if top >= 0:
        st.fold_abs(d.decode(top))
