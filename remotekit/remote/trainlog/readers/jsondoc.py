"""A JSON document read whole: HF ``trainer_state.json`` (its ``log_history`` rows, and the
``save_steps`` / ``max_steps`` it states), W&B's ``wandb-summary.json`` (the last value of
each key: one row, no history), a JSON array of row objects, or any other document that
holds its rows as a list of objects somewhere inside it (a results file's
``{"run_info": ..., "train_info": {"metrics": [...]}}``): the longest such list is the log,
and it is said which. A Jupyter notebook (``cells``, ``nbformat``) is the console its cells
printed: their outputs' text is read as a text log.
"""

from __future__ import annotations

import io
from collections import Counter
from itertools import chain

from ...infile import TooDeep, load_json
from ...protocol import mask
from ..base import LogError
from ..source import HEAD_ROWS, MAX_DOC, NotMine, Source
from . import Reader
from .text import Text

SURE = 0.8  # a document: surer than a trainer's lines, not than a marker only OLMo writes
WEAK = 0.001  # a first line "[...": a JSON array, unless a trainer's lines begin so
MIN_RECORDS = 2  # objects in a list before it can be a document's rows
MAX_NODES = 200_000  # containers looked into for the rows (the document is bounded too)


class JsonDocument(Reader):
    FORMAT = "json"
    WHAT = "JSON document"
    ORDER = 60
    NOT_FOLLOWED = (  # what --follow says it cannot follow
        "a JSON document (trainer_state.json, wandb-summary.json), rewritten whole"
    )
    DOCUMENT = True  # read whole: its start alone does not parse
    NAMES = (
        (r"^trainer_state\.json$", "HF trainer_state.json", 20),
        (
            r"(?:^|/)checkpoint-(\d+)/trainer_state\.json$",
            "HF trainer_state.json of the last checkpoint",
            40,
        ),
    )

    def sniff(self, head):
        lines = head.lines
        if not lines:
            return SURE if head.long and head.magic.lstrip()[:1] in (b"{", b"[") else 0.0
        first = lines[0]
        if first.startswith("{"):
            obj = head.json(first)
            if isinstance(obj, Exception):
                # a document over several lines ("{" then its keys), not a Python dict's repr
                return SURE if first[1:].lstrip()[:1] in ("", '"') else 0.0
            if not isinstance(obj, dict) or "log_history" in obj:
                return SURE
            return SURE if "_wandb" in obj and len(lines) == 1 else 0.0
        if first.startswith("["):
            return SURE if first == "[" else WEAK
        return 0.0

    def read(self, src, out):
        size = src.size()
        if size > MAX_DOC:
            raise LogError(
                "a %d MiB JSON document; over %d MiB is not read whole (is it JSON lines?)"
                % (size >> 20, MAX_DOC >> 20)
            )
        with src.open() as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
            try:
                doc = load_json(f, "the JSON document")
            except TooDeep as exc:
                raise LogError(str(exc)) from None
            except ValueError as exc:
                raise NotMine("not valid JSON (%s)" % exc) from None
        printed = notebook_text(doc)
        if printed is not None:
            # a Jupyter notebook: what its cells printed is the console the user saw
            out.fmt = "notebook"
            out.dialect = "a Jupyter notebook's printed cell outputs"
            out.caveats.append(
                "a Jupyter notebook: its cells' printed outputs (%d lines) were read as a "
                "text log" % printed.count("\n")
            )
            Text().read(Source(src.path, data=printed.encode("utf-8")), out)
            return
        if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
            rows = doc["log_history"]
            out.fmt = "trainer_state"
            out.dialect = "HF Trainer trainer_state.json log_history"
            for k in ("save_steps", "max_steps", "num_train_epochs", "global_step"):
                if isinstance(doc.get(k), (int, float)):
                    out.extra[k] = doc[k]
        elif isinstance(doc, list):
            rows = doc
        elif isinstance(doc, dict) and ("_step" in doc or "_wandb" in doc):
            # wandb-summary.json: the last value of each key, one row (no history)
            rows = [doc]
            out.fmt = "wandb-summary"
            out.caveats.append(
                "a W&B summary holds only the last value of each key, not the history: read "
                "the run's .wandb file (wandb/run-*/run-*.wandb) for spikes"
            )
        else:
            found = records(doc)
            if found is None:
                raise LogError(
                    "a JSON document without log_history (not a trainer_state.json) and "
                    "with no list of row objects in it"
                )
            where, rows = found
            out.dialect = "the rows of %s" % where
            out.caveats.append(
                "a JSON document: its rows are the %d objects of %s, the longest list of "
                "objects with numbers in it" % (len(rows), where)
            )
        rows = [r for r in rows if isinstance(r, dict)]
        head = rows[:HEAD_ROWS]
        ing = out.table(Counter(chain.from_iterable(r.keys() for r in head)), head)
        for r in rows:
            ing.add(r)
        out.lines = len(rows)


def notebook_text(doc):
    """The text a Jupyter notebook's cells printed, in order (``stream`` outputs' ``text``,
    results' and displays' ``text/plain``), or None when ``doc`` is no notebook (nbformat's
    ``cells`` and ``nbformat`` keys; version 3's ``worksheets``)."""
    if not isinstance(doc, dict) or "nbformat" not in doc:
        return None
    cells = doc.get("cells")
    if cells is None and isinstance(doc.get("worksheets"), list):
        cells = [c for w in doc["worksheets"] if isinstance(w, dict) for c in w.get("cells", ())]
    if not isinstance(cells, list):
        return None
    parts = []
    for cell in cells:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for o in outputs if isinstance(outputs, list) else ():
            if not isinstance(o, dict):
                continue
            data = o.get("data")
            text = o.get("text")
            if text is None and isinstance(data, dict):
                text = data.get("text/plain")
            if isinstance(text, list):
                text = "".join(t for t in text if isinstance(t, str))
            if isinstance(text, str) and text:
                parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


def records(doc):
    """``(where, rows)``: the longest list of objects in ``doc`` whose objects hold numbers
    (the rows a results document keeps its metrics in), ``where`` its path in words (keys
    shown escaped); the shallower of two as long. None when there is none."""
    best = None
    todo = [((), doc)]
    looked = 0
    while todo and looked < MAX_NODES:
        path, node = todo.pop()
        looked += 1
        if isinstance(node, dict):
            todo.extend((path + (k,), v) for k, v in node.items() if isinstance(v, (dict, list)))
            continue
        if not isinstance(node, list):
            continue
        rows = [r for r in node if isinstance(r, dict) and any(map(_number, r.values()))]
        if len(rows) >= MIN_RECORDS and len(rows) * 10 >= len(node) * 9:
            if best is None or (len(rows), -len(path)) > (len(best[1]), -len(best[0])):
                best = (path, rows)
            continue
        todo.extend((path + (i,), v) for i, v in enumerate(node) if isinstance(v, (dict, list)))
    if best is None:
        return None
    path, rows = best
    where = "".join("[%d]" % p if isinstance(p, int) else "[%s]" % mask(repr(p))[:60] for p in path)
    return where or "the document", rows


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)
