"""Checkpoint diagnostics: comparing tensors whose raw bytes are mapped, without torch.

Part of ``ckpt.py``; imports only ``values``. ``diff`` of two safetensors / GGUF / NumPy files
reads values here: :func:`floats` decodes a chunk of any real dtype to float64 (NumPy where it
imports, else the standard library: ``array`` casts, bf16 widened by placing its bytes in the
top half of a float32, fp8 through a 256-entry table); :func:`diff_entry` and
:func:`value_change` give the numbers ``commands`` gives for torch tensors, in float64.
"""

from __future__ import annotations

import array
import math
import struct
import sys

from .base import as_number
from .values import Dtype, numpy_or_none

LITTLE = sys.byteorder == "little"
# The NumPy dtype (and array / struct code) that holds each code's values as they are stored.
NP_CODES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2"}
NP_CODES.update({"I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "u1"})
PY_CODES = {"F64": "d", "F32": "f", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "B"}
PY_CODES.update({"U32": "I", "U16": "H", "I64": "q", "U64": "Q"})
_TABLES = {}


def readable(dtype):
    """True when :func:`floats` decodes ``dtype`` (every real safetensors dtype)."""
    return isinstance(dtype, Dtype) and not dtype.is_complex


def _byte_table(d):
    """The 256 values of a one-byte float ``d`` (fp8), sign, NaN and Inf included."""
    if d.code not in _TABLES:
        out = []
        for b in range(256):
            a = b & ~d.sign & 0xFF
            if a >= d.exp:
                v = math.inf if d.has_inf and a == d.exp else math.nan
            else:
                v = d.decode(a)
            out.append(-v if b & d.sign else v)
        _TABLES[d.code] = out
    return _TABLES[d.code]


def floats(raw, i, cnt, d, np):
    """Values ``i`` to ``i + cnt`` of the tensor whose bytes start at ``raw`` = (map, offset),
    as float64: a NumPy array (``np``), else a sequence of Python floats."""
    mm, start = raw
    off = start + i * d.itemsize
    if np is not None:
        if d.code in NP_CODES:
            return np.frombuffer(mm, NP_CODES[d.code], cnt, off).astype(np.float64)
        u = np.frombuffer(mm, "<u%d" % d.itemsize, cnt, off)
        if d.code == "BF16":
            return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return np.asarray(_byte_table(d), dtype=np.float64)[u]
    data = mm[off : off + cnt * d.itemsize]
    if d.code == "BF16":  # the top half of a float32 whose low half is zero
        wide = bytearray(4 * cnt)
        wide[2::4], wide[3::4] = data[0::2], data[1::2]
        data, code = bytes(wide), "f"
    elif d.code == "F16":
        return struct.unpack("<%de" % cnt, data)
    elif d.itemsize == 1 and d.is_floating_point:
        return [_byte_table(d)[b] for b in data]
    else:
        code = PY_CODES[d.code]
    values = array.array(code)
    values.frombytes(data)
    if not LITTLE:  # pragma: no cover - big-endian hosts
        values.byteswap()
    return values


def diff_entry(ea, eb, chunk, nonneg):
    """The per-tensor comparison ``commands._diff_entry`` makes, of two mapped entries of the
    same shape: norms over the values finite on both sides, in float64."""
    np = numpy_or_none()
    acc = {"ss_a": 0.0, "ss_b": 0.0, "ss_d": 0.0, "dot": 0.0, "max_d": 0.0}
    acc.update(nf_a=0, nf_b=0, new_nf=0, neg_b=0)
    for i in range(0, ea.numel, max(1, chunk)):
        cnt = min(chunk, ea.numel - i)
        a, b = floats(ea.raw, i, cnt, ea.dtype, np), floats(eb.raw, i, cnt, eb.dtype, np)
        (_np_fold if np is not None else _py_fold)(np, a, b, nonneg, acc)
    na, nb, ss_d = math.sqrt(acc["ss_a"]), math.sqrt(acc["ss_b"]), acc["ss_d"]
    return {
        "rel_change": math.sqrt(ss_d) / na if na > 0 else (0.0 if ss_d == 0 else math.inf),
        "max_abs_diff": acc["max_d"],
        "cosine": acc["dot"] / (na * nb) if na > 0 and nb > 0 else None,
        "nonfinite_a": acc["nf_a"],
        "nonfinite_b": acc["nf_b"],
        "new_nonfinite": acc["new_nf"],
        "negative_b": acc["neg_b"],
        "ss_a": acc["ss_a"],
        "ss_d": ss_d,
    }


def _np_fold(np, a, b, nonneg, acc):
    if nonneg:
        acc["neg_b"] += int(np.count_nonzero(b < 0))
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (fa.all() and fb.all()):
        acc["nf_a"] += int(np.count_nonzero(~fa))
        acc["nf_b"] += int(np.count_nonzero(~fb))
        acc["new_nf"] += int(np.count_nonzero(fa & ~fb))
        both = fa & fb
        a, b = a[both], b[both]
    d = b - a
    acc["ss_a"] += float(np.dot(a, a))
    acc["ss_b"] += float(np.dot(b, b))
    acc["ss_d"] += float(np.dot(d, d))
    acc["dot"] += float(np.dot(a, b))
    if d.size:
        acc["max_d"] = max(acc["max_d"], float(np.abs(d).max()))


def _py_fold(np, a, b, nonneg, acc):
    isfinite = math.isfinite
    ss_a = ss_b = ss_d = dot = max_d = 0.0
    for x, y in zip(a, b):
        if nonneg and y < 0:
            acc["neg_b"] += 1
        fx, fy = isfinite(x), isfinite(y)
        if not (fx and fy):
            acc["nf_a"] += not fx
            acc["nf_b"] += not fy
            acc["new_nf"] += fx and not fy
            continue
        d = y - x
        ss_a += x * x
        ss_b += y * y
        ss_d += d * d
        dot += x * y
        max_d = max(max_d, abs(d))
    acc["ss_a"] += ss_a
    acc["ss_b"] += ss_b
    acc["ss_d"] += ss_d
    acc["dot"] += dot
    acc["max_d"] = max(acc["max_d"], max_d)


def value_change(ea, eb, chunk):
    """(1 if any value differs else 0, B - A for a one-value tensor that changed with finite
    values, else None), as ``commands._value_change``; NaN equals NaN, 0.0 equals -0.0."""
    np = numpy_or_none()
    same_bits = ea.dtype == eb.dtype and not ea.dtype.is_floating_point
    changed = False
    for i in range(0, ea.numel, max(1, chunk)):
        cnt = min(chunk, ea.numel - i)
        if same_bits:  # integers and bool of one dtype: equal exactly when their bytes are
            n = cnt * ea.dtype.itemsize
            (ma, sa), (mb, sb) = ea.raw, eb.raw
            oa, ob = sa + i * ea.dtype.itemsize, sb + i * eb.dtype.itemsize
            changed = ma[oa : oa + n] != mb[ob : ob + n]
        else:
            a, b = floats(ea.raw, i, cnt, ea.dtype, np), floats(eb.raw, i, cnt, eb.dtype, np)
            changed = _differ(np, a, b)
        if changed:
            break
    if not changed:
        return 0, None
    if ea.numel != 1:
        return 1, None
    if "bool" in (ea.dtype.name, eb.dtype.name):
        return 1, None
    a = as_number(floats(ea.raw, 0, 1, ea.dtype, None)[0])
    b = as_number(floats(eb.raw, 0, 1, eb.dtype, None)[0])
    if a is None or b is None or not math.isfinite(b - a):
        return 1, None
    return 1, b - a


def _differ(np, a, b):
    if np is not None:
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        return not bool(same.all())
    return any(x != y and not (x != x and y != y) for x, y in zip(a, b))
