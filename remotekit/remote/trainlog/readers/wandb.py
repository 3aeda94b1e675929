"""W&B run files (``wandb/run-*/run-*.wandb``), read without wandb: LevelDB-style log blocks
of ``Record`` protobufs, of which the history records are the rows.
"""

from __future__ import annotations

import json
import os
import re
import struct
from itertools import islice

from ...infile import TooDeep, load_json, open_regular
from ..base import LogError, fmt_number
from ..source import READ, mtime
from ..wire import pb_varint, varint
from . import Reader
from .text import Text

RUN_DIR_RE = re.compile(r"(?:^|/)(?:offline-)?run-\d{8}_\d{6}-\w+$")
OUTPUT_LOG = "files/output.log"  # the console output W&B captures in a run directory


class Wandb(Reader):
    FORMAT = "wandb"
    WHAT = "W&B run file"
    ORDER = 10
    BINARY = True  # a file without a loss is named as this, never read as text
    NOT_FOLLOWED = "a W&B run file (.wandb)"  # what --follow says it cannot follow
    NAMES = ((r"(?:^|/)run-[^/]*\.wandb$", WHAT, 60),)

    def sniff(self, head):
        """Sure when the file starts with the W&B datastore header."""
        magic = head.magic
        return 1.0 if magic[:3] == b":W&" or magic[:4] == b"W&B\x00" else 0.0

    def read(self, src, out):
        """History of a W&B run file, and a note when its summary says the run went further."""
        counts = [0, 0, None]
        # a trainer's own step (HF: train/global_step, Lightning: trainer/global_step) over W&B's
        # row counter _step, which counts log calls, not optimizer steps
        need = [None]
        out.stream(_rows(src.path, counts, need), None, need)
        out.lines = counts[0]
        out.damage(counts, self.WHAT)
        _cut_short(src.path, out._table, out.notes)

    def sift(self, top, found, notes):
        """W&B run directories seen to. One without its ``run-*.wandb`` file (the only
        history W&B keeps there) has side files only: its own debug logs are no candidates,
        and its ``files/output.log`` (the console output W&B captured: what the script
        printed) is, with a note that says the history is missing. When nothing else is
        left to read, a LogError names what there is."""
        top = top.rstrip("/")
        bare = []
        for root, dirs, _files in os.walk(top):
            if root[len(top) :].count("/") > 2:
                dirs[:] = []
            if not RUN_DIR_RE.search(root):
                continue
            dirs[:] = []
            inside = root + "/"
            if any(f[4] == self.WHAT and f[3].startswith(inside) for f in found):
                continue
            found = [f for f in found if not f[3].startswith(inside)]
            held = _without_history(os.path.relpath(root, top), root)
            out = os.path.join(root, OUTPUT_LOG)
            if not os.path.isfile(out):
                bare.append(held)
                continue
            pref = Text.NAMES[0][2]  # read as a text log is
            found.append((pref, -mtime(out), out[len(top) + 1 :], out, "W&B console"))
            notes[out] = [
                held + ": read %s, the console output W&B captured (what the script printed, "
                "not what it logged), instead; copy the run's .wandb file for its history"
                % OUTPUT_LOG
            ]
        if bare and not found:
            raise LogError(
                bare[0] + "; copy the run's .wandb file too, or name a log of the trainer's own"
            )
        found.sort()
        return found


def _without_history(rel, root):
    """What a W&B run directory without its .wandb file holds, in words."""
    names = (os.path.relpath(os.path.join(r, n), root) for r, _, ns in os.walk(root) for n in ns)
    there = sorted(islice(names, 1000))  # a media-heavy run folder is not listed whole
    return (
        "a W&B run directory without its run-*.wandb file (the run's history): %s holds only %s"
        % (rel, ", ".join(there[:8]) or "nothing")
        + (" and %d more" % (len(there) - 8) if len(there) > 8 else "")
    )


# wandb/sdk/internal/datastore.py: a 7-byte file header ":W&B", magic 0xBEE1, version 0;
# then LevelDB-log framing: 32 KiB blocks, each record chunk a 7-byte header (crc32, length,
# type: 1 full, 2 first, 3 middle, 4 last); a block tail under 7 bytes is zero padding.
_WB_BLOCK = 32768


def _records(f):
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
            buf = buf[pos:] + f.read(READ)
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


def _rows(path, counts, need=None):
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
        for rec in _records(f):
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
                            pb_varint(len(k.encode("utf-8"))) + k.encode("utf-8") + b"\x82\x01"
                        ]
                    ]
                )
            try:
                row = _record(rec, pats, loads, names)
            except (ValueError, IndexError):
                counts[1] += 1  # not a well-formed Record: skipped
                continue
            if row:
                yield row


def _record(rec, pats, loads, names):
    """The history row of one Record, or None."""
    row = None
    i, n = 0, len(rec)
    while i < n:
        key, i = varint(rec, i)
        wt = key & 7
        if wt == 2:
            ln, i = varint(rec, i)
            if i + ln > n:
                raise ValueError("truncated field")
            if key == 0x12:  # field 2, history
                if pats:
                    row = _find(rec, i, i + ln, pats, loads)
                if row is None:
                    row = _history(rec, i, i + ln, loads, names)
            i += ln
        elif wt == 0:
            _, i = varint(rec, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("protobuf wire type %d" % wt)
    return row


def _find(rec, start, end, pats, loads):
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
        vlen, v = varint(rec, k)
        if j - start < 2 or rec[j - 2] != 0x0A or rec[j - 1] != v + vlen - j:
            return None
        try:
            row[name] = loads(rec[v : v + vlen])
        except (ValueError, RecursionError):  # nesting too deep
            pass
    return row


def _history(buf, i, end, loads, names):
    """One HistoryRecord ``buf[i:end]`` as a row dict (values decoded from their JSON)."""
    row = {}
    step = None
    while i < end:
        key, i = varint(buf, i)
        if key & 7 != 2:
            if key & 7 == 0:
                _, i = varint(buf, i)
                continue
            return row  # fixed-width fields are not in a HistoryRecord: stop here
        ln, i = varint(buf, i)
        stop = i + ln
        if key == 0x0A:  # item
            name, val = None, None
            while i < stop:
                k, i = varint(buf, i)
                if k & 7 != 2:
                    if k & 7 == 0:
                        _, i = varint(buf, i)
                        continue
                    break
                ln, i = varint(buf, i)
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
                step, _ = varint(buf, i + 1)
        i = stop
    if row and step is not None:
        row.setdefault("_step", step)
    return row


def _cut_short(path, ing, notes):
    """A note when the run's own summary (``files/wandb-summary.json`` beside the .wandb
    file) names a later step than the history read: the file was cut short."""
    summary = os.path.join(os.path.dirname(path), "files", "wandb-summary.json")
    try:
        with open_regular(summary, "r", encoding="utf-8", errors="replace") as f:
            doc = load_json(f, "wandb-summary.json")
    except (OSError, ValueError, TooDeep):
        return
    key = ing.step_key or "_step"
    said = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(said, (int, float)) or isinstance(said, bool) or not ing.rows():
        return
    last = ing.last_step()
    if said > last:
        notes.append(
            "the W&B summary says the run reached %s %s, but the history in %s stops at %s: "
            "the file is cut short (a copy taken while the run was writing, or damaged); "
            "only the steps read are analysed"
            % (key, fmt_number(said), os.path.basename(path), fmt_number(last))
        )
