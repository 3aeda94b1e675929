"""The wire formats of the binary logs ``trainlog.py`` reads without their libraries:
protobuf fields (varints, length-delimited slices) and TFRecord's masked CRC-32C, shared
by the TensorBoard and W&B readers.
"""

from __future__ import annotations

import struct


def _crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def masked_crc(data):
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h Mask)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    shift, out = 0, 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def fields(buf):
    """``(field number, wire type, value)`` of one protobuf message: varints as ints,
    fixed64/fixed32 as raw 8/4 bytes, length-delimited as a memoryview slice."""
    i, n = 0, len(buf)
    while i < n:
        key, i = varint(buf, i)
        wt = key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            ln, i = varint(buf, i)
            v = buf[i : i + ln]
            i += ln
        elif wt == 1:
            v = buf[i : i + 8]
            i += 8
        elif wt == 5:
            v = buf[i : i + 4]
            i += 4
        else:
            raise ValueError("protobuf wire type %d" % wt)
        if i > n:
            raise ValueError("truncated protobuf field")
        yield key >> 3, wt, v


F32 = struct.Struct("<f").unpack
F64 = struct.Struct("<d").unpack


def pb_varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
