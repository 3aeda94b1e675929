"""TensorBoard event files (``events.out.tfevents.*``, Keras's ``*.v2``), read without
tensorboard: TFRecord framing with CRC-32C, ``Event`` / ``Summary`` protobufs; the scalars
of each step one row (``simple_value``, and scalar tensors as ``tf.summary.scalar`` in TF2
writes them).
"""

from __future__ import annotations

import struct

from ..base import LogError
from ..source import MAX_LINE, LineTail
from ..wire import F32, F64, fields, masked_crc, varint
from . import Reader


class TensorBoard(Reader):
    FORMAT = "tensorboard"
    WHAT = "TensorBoard event file"
    ORDER = 20
    FOLLOWS = True
    BINARY = True  # a file without a loss is named as this, never read as text
    NAMES = ((r"(?:^|/)events\.out\.tfevents\.[^/]*$", WHAT, 70),)

    def sniff(self, head):
        """Sure when the file starts with a TFRecord: a little-endian uint64 length and the
        masked CRC of it."""
        magic = head.magic
        if len(magic) < 12:
            return 0.0
        return 1.0 if masked_crc(magic[:8]) == struct.unpack("<I", magic[8:12])[0] else 0.0

    def read(self, src, out):
        """The scalars of the event file, one row per step."""
        counts = [0, 0, None]
        own = {}
        with src.open() as f:
            out.stream(_rows_of(f, counts, own), "step")
        out.lines = counts[0]
        out.damage(counts, "event file")
        if own:
            out.notes.append(
                "%s carr%s a step counter of its own (%s, ...: not the global step): each "
                "value is placed at the global step logged before it, no resume"
                % (
                    ", ".join(map(repr, sorted(own))),
                    "ies" if len(own) == 1 else "y",
                    ", ".join("%g" % v for v in sorted(set().union(*own.values()))[:3]),
                )
            )

    def tail(self, f):
        """What ``--follow`` keeps of a growing event file: its latest complete records."""
        return RecordTail()


def _tensor_scalar(buf):
    """The value of a scalar TensorProto (tensorflow/core/framework/tensor.proto: dtype 1,
    tensor_shape 2 {dim 2}, tensor_content 4, half_val 13, float_val 5, double_val 6,
    int_val 7, int64_val 10); None for anything that is not one number (a histogram, an
    image, a string): those are not scalar series."""
    dtype = 0
    val = None
    for f, wt, v in fields(buf):
        if f == 1:
            dtype = v
        elif f == 2:
            if any(sf == 2 for sf, _, _ in fields(v)):
                dims = 1
                for sf, _, dv in fields(v):
                    if sf == 2:
                        for df, _, size in fields(dv):
                            if df == 1:
                                dims *= size
                if dims != 1:
                    return None
        elif f == 4 and dtype in (1, 2):
            if len(v) != (4 if dtype == 1 else 8):
                return None
            val = (F32 if dtype == 1 else F64)(bytes(v))[0]
        elif f == 5 and val is None:
            val = F32(bytes(v[:4]))[0]
        elif f == 6 and val is None:
            val = F64(bytes(v[:8]))[0]
        elif f in (7, 10) and val is None:
            if wt == 0:
                val = float(v if v < 1 << 63 else v - (1 << 64))
            elif wt == 2 and len(v):
                n, _ = varint(v, 0)
                val = float(n if n < 1 << 63 else n - (1 << 64))
        elif f == 8:
            return None  # string_val: text, not a number
    return val


def _event_scalars(buf, row):
    """One Event (tensorflow/core/util/event.proto: wall_time 1, step 2, summary 5) into
    ``row``; Summary.Value: tag 1, simple_value 2, tensor 8. Returns the step or None."""
    step = None
    for f, _, v in fields(buf):
        if f == 2:
            step = v
        elif f == 5:
            for sf, _, sv in fields(v):
                if sf != 1:
                    continue
                tag, val = None, None
                for vf, _, vv in fields(sv):
                    if vf == 1:
                        tag = bytes(vv).decode("utf-8", "replace")
                    elif vf == 2:
                        val = F32(bytes(vv))[0]
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
    return n if masked_crc(head[:8]) == crc else None


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
    return masked_crc(memoryview(data)[:-4]) == _CRC.unpack_from(data, len(data) - 4)[0]


_CRC = struct.Struct("<I")


def _own_counter(cur, s, last, top, own):
    """Whether the scalars ``cur`` logged at step ``s``, below the highest step ``top`` so
    far, carry a counter of their own (a validation loss logged at its epoch 0, 1, 2 ...
    beside a train loss at the global step) rather than a step gone back (a resume): each
    of its tags rises by itself, by 1 from its own last step (or starts at 0 or 1), far
    below the global step; a tag known to have one only rises."""
    if s >= top / 2 and not all(t in own for t in cur):
        return False
    for tag in cur:
        prev = last.get(tag)
        if tag in own:
            if s <= prev:
                return False
        elif not (s - prev == 1 if prev is not None else s <= 1):
            return False
    return True


def _rows_of(f, counts, own=None):
    """The rows of the event file open as ``f``: the scalars of each step. A tag with a
    step counter of its own (:func:`_own_counter`) is placed at the step logged before it
    and named in ``own`` (``{tag: its own steps, the first few}``)."""
    own = {} if own is None else own
    last = {}  # tag -> the step it was last logged at, its own
    row, step, top = {}, None, None
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
        s = float(s or 0)
        if top is not None and s < top and _own_counter(cur, s, last, top, own):
            for tag in cur:
                seen = own.setdefault(tag, [])
                if len(seen) < 3:
                    seen.append(s)
                last[tag] = s
            s = top
        else:
            for tag in cur:
                last[tag] = s
            top = s if top is None else max(top, s)
        if s != step and row:
            yield row
            row = {}
        step = s
        row.update(cur)
        row["step"] = s
    if row:
        yield row


class RecordTail(LineTail):
    """The complete TFRecords of a growing TensorBoard event file (found only from its
    first: the follow reads the file from its start)."""

    from_start = True

    def feed(self, data):
        buf = self.carry + data
        i, records = 0, []
        while len(buf) - i >= 12:
            n = tfrecord_data_length(buf[i : i + 12])
            if n is None:
                raise LogError("a corrupt TFRecord length in the event file: cannot follow it")
            if len(buf) - i < 16 + n:
                break
            records.append(buf[i : i + 16 + n])
            i += 16 + n
        self.carry = buf[i:]
        self._add(records)
        return len(records)
