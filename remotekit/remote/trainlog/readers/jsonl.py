"""JSON lines: one object a line (W&B's history export, LLaMA-Factory / TRL
``trainer_log.jsonl`` with ``current_steps``, any trainer's ``{"step": ..., "loss": ...}``);
lines that are not JSON are events when they say so, else skipped.
"""

from __future__ import annotations

import json
from collections import Counter

from ..source import HEAD_ROWS, Lines, head_lines
from . import Reader


class JsonLines(Reader):
    FORMAT = "jsonl"
    WHAT = "JSON lines"
    ORDER = 50
    FOLLOWS = True
    NAMES = (
        (r"(?:^|/)trainer_log\.jsonl$", "LLaMA-Factory trainer_log.jsonl", 10),
        # a run's own JSON lines at its top level over a checkpoint's copy of the history
        (r"^[^/]*\.jsonl$", WHAT, 30),
        (r"\.jsonl$", WHAT, 80),
    )

    def sniff(self, head):
        """Sure when most of the first lines are JSON objects (a banner or a stray print may
        come first), or the first line is an object that is no document of its own."""
        lines = head.lines
        if not lines:
            return 0.0
        first = lines[0]
        if not first.startswith(("{", "[")) and _mostly_json_objects(lines):
            return 1.0
        if first.startswith("{"):
            obj = head.json(first)
            if isinstance(obj, dict) and "log_history" not in obj:
                # wandb-summary.json: one document, one line (the JSON document reader's)
                return 0.0 if "_wandb" in obj and len(lines) == 1 else 1.0
        return 0.0

    def read(self, src, out):
        with src.open() as f:
            lines = Lines(f)
            _read(lines, out)
            out.long = lines.long


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


def _dialect(keys):
    if "current_steps" in keys:
        return "LLaMA-Factory / TRL trainer_log.jsonl"
    if "_step" in keys or "_runtime" in keys:
        return "W&B history"
    return None


def _parsed(lines):
    """The first lines parsed: a dict per JSON object, None per line that is not valid
    JSON, the text of other non-empty lines (an event, or skipped)."""
    head = []
    for line in lines:
        if line[:1] == "{":
            try:
                head.append(json.loads(line))
            except (ValueError, RecursionError):  # nesting too deep
                head.append(None)
        elif line.strip():
            head.append(line)
    return head


def _read(src, out):
    loads = json.loads
    lines, blocks = head_lines(src, HEAD_ROWS)
    head = _parsed(lines)
    nlines = len(lines)
    keys = Counter()
    for d in head:
        if isinstance(d, dict):
            keys.update(d.keys())
    ing = out.table(keys, head)
    out.dialect = _dialect(keys)
    for d in head:
        if d is None:
            ing.bad += 1
        elif isinstance(d, str):
            if not ing.maybe_event(d):
                ing.skipped += 1
        else:
            ing.add(d)
    # The hot loop: one json.loads and one array.extend per line.
    ext = ing.flat.extend
    getter = ing.getter
    bkey = ing.bucket_key
    codes = ing.codes
    app = codes.append
    cmap = ing.cmap
    slow = ing.slow
    for block in blocks:
        nlines += len(block)
        for line in block:
            if line[:1] != "{":
                if line.strip() and not ing.maybe_event(line):
                    ing.skipped += 1
                continue
            try:
                d = loads(line)
            except (ValueError, RecursionError):  # nesting too deep
                ing.bad += 1
                continue
            try:
                ext(getter(d))
            except KeyError:
                slow(d)
                continue
            except TypeError:
                ing.fix_partial()
                slow(d)
                continue
            if bkey is not None:
                bv = d.get(bkey)
                try:
                    app(cmap[bv])
                except (KeyError, TypeError):
                    app(ing.code(bv))
        ing.flush()
    out.lines = nlines
