"""The trainer line formats ``trainlog.py`` knows (nanoGPT, llm.c, Megatron-LM, fairseq,
``key=value`` text) and the sniff that tells a file's format from its first lines.
"""

from __future__ import annotations

import json
import re
import struct

from infile import open_regular

from .base import CODE_RE, LogError
from .binary import _masked_crc
from .ingest import MAX_LINE, SNIFF_BYTES, SNIFF_LINES, Lines

# --------------------------------------------------------------------------------------------
# line formats of the trainers that print text: a line is data only if it matches its
# format's data pattern, and an event only if it matches an event pattern of that format.

_F = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
_PIPE_PAIR_RE = re.compile(r"([A-Za-z][\w ./\-]*?)\s*:\s*" + _F + r"\s*(?=\||$)", re.I)
_KV_RE = re.compile(r"([A-Za-z_][\w/.\-]*)=" + _F)


def _groups(rx):
    def parse(line):
        m = rx.search(line)
        if m is None:
            return None
        return {k: v for k, v in m.groupdict().items() if v is not None}

    parse.rx = rx
    return parse


def _megatron(line):
    # megatron/training/training.py training_log(): ' iteration  N/  M | consumed samples: ...
    # | learning rate: 1.5E-04 | global batch size: 512 | lm loss: 7.1E+00 | loss scale: 1.0 |
    # grad norm: 1.23 | number of skipped iterations: 0 | number of nan iterations: 0 |'
    m = _MEGATRON_RE.search(line)
    if m is None:
        return None
    d = dict(_PIPE_PAIR_RE.findall(line[m.end() :]))
    d["iteration"] = m.group(1)
    return d


_MEGATRON_RE = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")


def _fairseq(line):
    # fairseq/logging/progress_bar.py: JsonProgressBar prints '... | train_inner | {"epoch": 1,
    # "update": 0.1, "loss": "9.9", ..., "num_updates": "100", "lr": "5e-05", "gnorm": "1.2"}';
    # SimpleProgressBar prints 'epoch 001:    100 / 1102 loss=9.9, ..., num_updates=100, ...'
    i = line.find("| train_inner | {")
    if i >= 0:
        try:
            d = json.loads(line[i + 16 :])
        except (ValueError, RecursionError):  # nesting too deep
            return None
        return d if isinstance(d, dict) and "num_updates" in d else None
    if _FAIRSEQ_SIMPLE_RE.search(line):
        d = dict(_KV_RE.findall(line))
        return d if "num_updates" in d else None
    return None


_FAIRSEQ_SIMPLE_RE = re.compile(r"\bepoch \d+:\s+\d+ / \d+ ")


# (name, parse(line) -> dict or None, step key, [(event kind, pattern with a step group)],
#  where the format comes from)
LINE_FORMATS = (
    (
        # karpathy/nanoGPT train.py: print(f"iter {iter_num}: loss {lossf:.4f}, time
        # {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%"); "saving checkpoint to {out_dir}"
        # after "step {iter_num}: train loss ..., val loss ..."
        "nanogpt",
        _groups(re.compile(r"^iter (?P<iter>\d+): loss (?P<loss>" + _F[1:-1] + r"), time ")),
        "iter",
        (
            # the eval line before a save names its step (kind None: the step of what follows)
            (None, re.compile(r"^step (\d+): train loss ")),
            ("checkpoint", re.compile(r"^saving checkpoint to ")),
        ),
    ),
    (
        # karpathy/llm.c llmc/logger.h: "s:%d trl:%.4f lr:%.6f norm:%.4f" and "s:%d tel:%.4f"
        "llm.c",
        _groups(
            re.compile(
                r"^s:(?P<s>\d+) trl:(?P<trl>" + _F[1:-1] + r")"
                r"(?: lr:(?P<lr>" + _F[1:-1] + r"))?(?: norm:(?P<norm>" + _F[1:-1] + r"))?"
            )
        ),
        "s",
        (),
    ),
    (
        # karpathy/llm.c train_gpt2.cu: "step %4d/%d | train loss %7.6f | norm %6.4f | lr %.2e |
        # %.2f ms | ..." (train_gpt2.c: "step %d: train loss %f (took %f ms)")
        "llm.c-stdout",
        _groups(
            re.compile(
                r"^step\s+(?P<step>\d+)(?:/\d+)?\s*[|:]\s*(?:train )?loss (?P<loss>"
                + _F[1:-1]
                + r")(?:.*?\bnorm (?P<norm>"
                + _F[1:-1]
                + r"))?(?:.*?\blr (?P<lr>"
                + _F[1:-1]
                + r"))?"
            )
        ),
        "step",
        (("checkpoint", re.compile(r"^[Ww]riting (?:model|state) .*?(?:step|_)(\d+)")),),
    ),
    (
        "megatron",
        _megatron,
        "iteration",
        (
            ("checkpoint", re.compile(r"saving checkpoint at iteration\s+(\d+)")),
            ("resume", re.compile(r"successfully loaded checkpoint from .*? at iteration\s+(\d+)")),
        ),
    ),
    (
        "fairseq",
        _fairseq,
        "num_updates",
        (
            ("checkpoint", re.compile(r"\bsaved checkpoint .*?\(epoch \d+ @ (\d+) updates")),
            ("resume", re.compile(r"\bloaded checkpoint .*?\(epoch \d+ @ (\d+) updates")),
        ),
    ),
)


# long: one decision list (magic bytes, JSON, CSV, trainer formats, text), read in its order
def sniff(path):
    """``(format, line format or None)``: ``jsonl``, ``json`` (a whole document:
    trainer_state.json), ``csv``, ``tfevents``, ``wandb`` or ``text``; for text, the trainer
    whose line format most lines match. Looks at the first lines only, each bounded."""
    with open_regular(path) as f:
        magic = f.read(16)
        f.seek(0)
        if magic[:3] == b":W&" or magic[:4] == b"W&B\x00":
            return "wandb", None
        if _looks_tfrecord(magic):
            return "tfevents", None
        src = Lines(f, SNIFF_BYTES)
        lines = []
        for block in src:
            for ln in block:
                if CODE_RE.match(ln):
                    continue  # a shell trace or source code before the log: not its format
                ln = ln.strip()
                if ln:
                    lines.append(ln)
                    if len(lines) >= SNIFF_LINES:
                        break
            if len(lines) >= SNIFF_LINES:
                break
    if not lines:
        if src.long and magic.lstrip()[:1] in (b"{", b"["):
            return "json", None  # one compact JSON document (trainer_state.json on one line)
        if src.long:
            raise LogError(
                "no line shorter than %d bytes in the first %d MiB (%d over-long lines skipped)"
                % (MAX_LINE, SNIFF_BYTES >> 20, src.long)
            )
        raise LogError("the log is empty")
    lines = [ln.lstrip("\ufeff") for ln in lines[:SNIFF_LINES]]
    first = lines[0]
    if not first.startswith(("{", "[")) and _mostly_json_objects(lines):
        return "jsonl", None  # a banner or a stray print before the JSON lines
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # nesting too deep
            return "json", None
        if isinstance(obj, dict) and "log_history" not in obj:
            if "_wandb" in obj and len(lines) == 1:
                return "json", None  # wandb-summary.json: one document, one line
            return "jsonl", None
        return "json", None
    best = _line_format(lines)
    if first.startswith("[") and (best is None or first == "["):
        return "json", None  # "[" alone, or no trainer's lines ("[2024-05-01 ...] iteration")
    if best is not None:
        return "text", best
    for delim in (",", "\t"):
        cells = [c.strip().strip('"') for c in first.split(delim)]
        if (
            len(cells) >= 2
            and "=" not in first
            # names as trainers write them: train/box_loss, metrics/mAP50-95(B), lr-AdamW@0
            and all(re.match(r"^[A-Za-z_][\w./\-()\[\]@:%+ ]*$", c) for c in cells if c)
            and (len(lines) < 2 or len(lines[1].split(delim)) == len(first.split(delim)))
        ):
            return "csv", None
    return "text", None


def _line_format(lines):
    """The trainer whose line format most of these lines match, else None."""
    best, hits = None, 0
    for lf in LINE_FORMATS:
        k = sum(1 for ln in lines if lf[1](ln) is not None)
        if k > hits:
            best, hits = lf, k
    return best


def _mostly_json_objects(lines):
    """Most of these lines are JSON objects (``{...}`` that parse)."""
    objs = 0
    for ln in lines:
        if ln[:1] == "{" and ln[-1:] == "}":
            try:
                objs += isinstance(json.loads(ln), dict)
            except ValueError:
                pass
    return objs * 2 > len(lines)


def _looks_tfrecord(head):
    """A TFRecord starts with a little-endian uint64 length and a masked CRC of it."""
    if len(head) < 12:
        return False
    return _masked_crc(head[:8]) == struct.unpack("<I", head[8:12])[0]
