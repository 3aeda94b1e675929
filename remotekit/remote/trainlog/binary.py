"""The binary logs ``trainlog.py`` reads without their libraries: TensorBoard event files
(TFRecord framing with CRC-32C, ``Event`` / ``Summary`` protobufs) and W&B run files
(``.wandb``: LevelDB-style log blocks of ``Record`` protobufs).
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from itertools import chain, islice

from infile import open_regular

from .base import LogError
from .ingest import BLOCK, HEAD_ROWS, MAX_LINE, _ingest_for

# --------------------------------------------------------------------------------------------
# binary logs: TensorBoard event files and W&B run files, read with the standard library


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


def _masked_crc(data):
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h Mask)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(buf, i):
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


def _fields(buf):
    """``(field number, wire type, value)`` of one protobuf message: varints as ints,
    fixed64/fixed32 as raw 8/4 bytes, length-delimited as a memoryview slice."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        wt = key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            ln, i = _varint(buf, i)
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


_F32 = struct.Struct("<f").unpack
_F64 = struct.Struct("<d").unpack


def _tensor_scalar(buf):
    """The value of a scalar TensorProto (tensorflow/core/framework/tensor.proto: dtype 1,
    tensor_shape 2 {dim 2}, tensor_content 4, half_val 13, float_val 5, double_val 6,
    int_val 7, int64_val 10); None for anything that is not one number (a histogram, an
    image, a string): those are not scalar series."""
    dtype = 0
    val = None
    for f, wt, v in _fields(buf):
        if f == 1:
            dtype = v
        elif f == 2:
            if any(sf == 2 for sf, _, _ in _fields(v)):
                dims = 1
                for sf, _, dv in _fields(v):
                    if sf == 2:
                        for df, _, size in _fields(dv):
                            if df == 1:
                                dims *= size
                if dims != 1:
                    return None
        elif f == 4 and dtype in (1, 2):
            if len(v) != (4 if dtype == 1 else 8):
                return None
            val = (_F32 if dtype == 1 else _F64)(bytes(v))[0]
        elif f == 5 and val is None:
            val = _F32(bytes(v[:4]))[0]
        elif f == 6 and val is None:
            val = _F64(bytes(v[:8]))[0]
        elif f in (7, 10) and val is None:
            if wt == 0:
                val = float(v if v < 1 << 63 else v - (1 << 64))
            elif wt == 2 and len(v):
                n, _ = _varint(v, 0)
                val = float(n if n < 1 << 63 else n - (1 << 64))
        elif f == 8:
            return None  # string_val: text, not a number
    return val


def _event_scalars(buf, row):
    """One Event (tensorflow/core/util/event.proto: wall_time 1, step 2, summary 5) into
    ``row``; Summary.Value: tag 1, simple_value 2, tensor 8. Returns the step or None."""
    step = None
    for f, _, v in _fields(buf):
        if f == 2:
            step = v
        elif f == 5:
            for sf, _, sv in _fields(v):
                if sf != 1:
                    continue
                tag, val = None, None
                for vf, _, vv in _fields(sv):
                    if vf == 1:
                        tag = bytes(vv).decode("utf-8", "replace")
                    elif vf == 2:
                        val = _F32(bytes(vv))[0]
                    elif vf == 8:
                        val = _tensor_scalar(vv)
                if tag is not None and val is not None:
                    row[tag] = val
    return step


_TF_HEAD = struct.Struct("<QI")


def tfrecord_data_length(head):
    """The data length a TFRecord's first 12 bytes give (the record is 12 + it + 4 bytes
    long), or None when the length's masked CRC does not match (not a record boundary)."""
    n, crc = _TF_HEAD.unpack(head)
    return n if _masked_crc(head[:8]) == crc else None


def _tfrecords(f, counts=None):
    """Records of a TFRecord file (uint64 length, uint32 masked CRC of it, data, CRC of the
    data) as ``data + CRC`` buffers: :func:`_intact` checks the data. A length whose CRC
    does not match ends the reading (the records after it cannot be found): ``counts[2]``
    is then its offset."""
    read = f.read
    while True:
        head = read(12)
        if len(head) < 12:
            return
        n = tfrecord_data_length(head)
        if n is None:
            if counts is None:
                raise LogError("a corrupt TFRecord length at offset %d" % (f.tell() - 12))
            counts[2] = f.tell() - 12
            return
        if n > MAX_LINE * 64:
            raise LogError("a TFRecord of %d bytes at offset %d: not an event file" % (n, f.tell()))
        data = read(n + 4)
        if len(data) < n + 4:
            return  # the writer was still writing: the last record is partial
        yield data


def _intact(data):
    """Whether a record from :func:`_tfrecords` has the data its CRC was made of."""
    return _masked_crc(memoryview(data)[:-4]) == _CRC.unpack_from(data, len(data) - 4)[0]


_CRC = struct.Struct("<I")


def _rows_into(rows_iter, wanted, step_key, need=None):
    """An Ingest from an iterator of row dicts (first rows choose the columns; ``need``, a
    one-item list, then tells the iterator which keys are kept)."""
    head = list(islice(rows_iter, HEAD_ROWS))
    keys = Counter()
    for d in head:
        keys.update(d.keys())
    ing = _ingest_for(keys, wanted, head, step_key)
    if need is not None:
        need[0] = set(ing.keys) | ({ing.bucket_key} if ing.bucket_key else set())
    n = 0
    for d in chain(head, rows_iter):
        ing.add(d)
        n += 1
        if not n % 65536:
            ing.flush()
    ing.flush()
    return ing, n


def _tf_rows(path, counts):
    with open_regular(path) as f:
        for row in _tf_rows_of(f, counts):
            yield row


def tf_lengths(path):
    """``{tag: steps with a value}`` of an event file (for choosing among a run's files)."""
    counts = [0, 0, None]
    out = Counter()
    for row in _tf_rows(path, counts):
        out.update(k for k in row if k != "step")
    return dict(out)


def _tf_rows_of(f, counts):
    """The rows of the event file open as ``f``: the scalars of each step."""
    row, step = {}, None
    for data in _tfrecords(f, counts):
        counts[0] += 1
        cur = {}
        try:
            s = _event_scalars(memoryview(data)[:-4], cur)
        except (ValueError, IndexError, TypeError, struct.error):
            s = cur = None  # not a well-formed Event
        if not cur:
            # Skipped either way: the CRC (pure Python, about 1 us a byte) is computed
            # only for records whose scalars are kept, not for every image or histogram.
            if cur is None:
                counts[1] += 1  # skipped
            continue
        if not _intact(data):
            counts[1] += 1  # a scalar whose bytes changed after writing: skipped
            continue
        if s != step and row:
            yield row
            row = {}
        step = s
        row.update(cur)
        row["step"] = float(s or 0)
    if row:
        yield row


def read_tfevents(f, wanted):
    """Scalars of a TensorBoard event file (open as the binary file ``f``), one row per step."""
    counts = [0, 0, None]
    ing, _ = _rows_into(_tf_rows_of(f, counts), wanted, "step")
    _damage(ing, counts, "event file")
    return ing, "tensorboard", counts[0]


def _damage(ing, counts, what):
    """Corrupt records of a binary log: counted as bad lines and said in a warning."""
    ing.bad += counts[1]
    if counts[1]:
        ing.guesses.append("%d corrupt record(s) in the %s skipped" % (counts[1], what))
    if counts[2] is not None:
        ing.guesses.append(
            "the %s is corrupt at byte %d: nothing after it was read" % (what, counts[2])
        )


# wandb/sdk/internal/datastore.py: a 7-byte file header ":W&B", magic 0xBEE1, version 0;
# then LevelDB-log framing: 32 KiB blocks, each record chunk a 7-byte header (crc32, length,
# type: 1 full, 2 first, 3 middle, 4 last); a block tail under 7 bytes is zero padding.
_WB_BLOCK = 32768


def _wandb_records(f):
    data = f.read(7)
    if data[:4] != b":W&B":
        raise LogError("not a W&B run file (no :W&B header)")
    off = 7
    parts = []
    hdr = struct.Struct("<IHB").unpack
    buf = b""
    pos = 0
    while True:
        if len(buf) - pos < _WB_BLOCK + 7:
            buf = buf[pos:] + f.read(BLOCK)
            pos = 0
        left = _WB_BLOCK - off % _WB_BLOCK
        if left < 7:
            pos += left
            off += left
            continue
        if len(buf) - pos < 7:
            return
        _, ln, typ = hdr(buf[pos : pos + 7])
        if typ == 0 and ln == 0:
            pos += left
            off += left
            continue
        chunk = buf[pos + 7 : pos + 7 + ln]
        if len(chunk) < ln:
            return
        pos += 7 + ln
        off += 7 + ln
        if typ == 1:
            yield chunk
        elif typ == 2:
            parts = [chunk]
        elif typ == 3:
            parts.append(chunk)
        elif typ == 4:
            parts.append(chunk)
            yield b"".join(parts)
            parts = []


def _pb_varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _wandb_rows(path, counts, need=None):
    """History rows of a ``.wandb`` file (wandb_internal.proto: Record num 1, history 2;
    HistoryRecord item 1, step 2 {num 1}; HistoryItem key 1, nested_key 2, value_json 16;
    wandb-core writes every key as nested_key parts).

    ``need``: a one-item list that the caller fills with the keys it keeps once the columns
    are chosen; from then on each record is searched for just those items (``bytes.find``)
    instead of walking every field, and a record whose items do not look as expected is
    walked in full."""
    loads = json.loads
    names = {}  # key bytes -> str, decoded once
    pats = None
    with open_regular(path) as f:
        for rec in _wandb_records(f):
            counts[0] += 1
            rec = bytes(rec)
            if pats is None and need is not None and need[0] is not None:
                # a nested key ("a.b": parts ["a", "b"]) is not one encoded key: walk in full
                pats = (
                    []
                    if any("." in k for k in need[0])
                    else [
                        (k, b"\x12" + tail, b"\x0a" + tail)
                        for k in need[0]
                        for tail in [
                            _pb_varint(len(k.encode("utf-8"))) + k.encode("utf-8") + b"\x82\x01"
                        ]
                    ]
                )
            try:
                row = _wandb_record(rec, pats, loads, names)
            except (ValueError, IndexError):
                counts[1] += 1  # not a well-formed Record: skipped
                continue
            if row:
                yield row


def _wandb_record(rec, pats, loads, names):
    """The history row of one Record, or None."""
    row = None
    i, n = 0, len(rec)
    while i < n:
        key, i = _varint(rec, i)
        wt = key & 7
        if wt == 2:
            ln, i = _varint(rec, i)
            if i + ln > n:
                raise ValueError("truncated field")
            if key == 0x12:  # field 2, history
                if pats:
                    row = _wandb_find(rec, i, i + ln, pats, loads)
                if row is None:
                    row = _wandb_history(rec, i, i + ln, loads, names)
            i += ln
        elif wt == 0:
            _, i = _varint(rec, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("protobuf wire type %d" % wt)
    return row


def _wandb_find(rec, start, end, pats, loads):
    """The items named in ``pats`` of one HistoryRecord, found by their encoded key; None
    when an item's header is not the one-byte-length form expected (then walk in full)."""
    row = {}
    find = rec.find
    for name, pat, alt in pats:
        j = find(pat, start, end)
        if j < 0:
            j = find(alt, start, end)  # the older writers' key field
            if j < 0:
                continue
        k = j + len(pat)
        vlen, v = _varint(rec, k)
        if j - start < 2 or rec[j - 2] != 0x0A or rec[j - 1] != v + vlen - j:
            return None
        try:
            row[name] = loads(rec[v : v + vlen])
        except (ValueError, RecursionError):  # nesting too deep
            pass
    return row


def _wandb_history(buf, i, end, loads, names):
    """One HistoryRecord ``buf[i:end]`` as a row dict (values decoded from their JSON)."""
    row = {}
    step = None
    while i < end:
        key, i = _varint(buf, i)
        if key & 7 != 2:
            if key & 7 == 0:
                _, i = _varint(buf, i)
                continue
            return row  # fixed-width fields are not in a HistoryRecord: stop here
        ln, i = _varint(buf, i)
        stop = i + ln
        if key == 0x0A:  # item
            name, val = None, None
            while i < stop:
                k, i = _varint(buf, i)
                if k & 7 != 2:
                    if k & 7 == 0:
                        _, i = _varint(buf, i)
                        continue
                    break
                ln, i = _varint(buf, i)
                if k == 0x82:  # field 16, value_json
                    val = buf[i : i + ln]
                elif k == 0x0A or k == 0x12:  # key, nested_key
                    raw = buf[i : i + ln]
                    part = names.get(raw)
                    if part is None:
                        part = names[raw] = raw.decode("utf-8", "replace")
                    name = part if name is None or k == 0x0A else name + "." + part
                i += ln
            if name is not None and val is not None:
                try:
                    row[name] = loads(val)
                except (ValueError, RecursionError):  # nesting too deep
                    pass
        elif key == 0x12:  # step {num 1}
            if i < stop and buf[i] == 0x08:
                step, _ = _varint(buf, i + 1)
        i = stop
    if row and step is not None:
        row.setdefault("_step", step)
    return row


def read_wandb(path, wanted):
    """History of a W&B run file (``run-*.wandb``), without wandb installed."""
    counts = [0, 0, None]
    # a trainer's own step (HF: train/global_step, Lightning: trainer/global_step) over W&B's
    # row counter _step, which counts log calls, not optimizer steps
    need = [None]
    ing, _ = _rows_into(_wandb_rows(path, counts, need), wanted, None, need)
    _damage(ing, counts, "W&B run file")
    return ing, "wandb", counts[0]
