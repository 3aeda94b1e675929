"""OLMo and OLMo-core console logs for ``trainlog.py``: ``[step=N/M]`` blocks of
``key=value`` lines.

The shape, from the writers' source:

- OLMo ``olmo/train.py`` ``Trainer.log_metrics_to_console``: ``log.info(f"{prefix}\\n" +
  "\\n".join(f"    {name}={format_float(value)}" ...))`` with the prefix
  ``[step={global_step}/{max_steps},epoch={epoch}]``; ``format_float`` writes ``1,234`` over
  1000 and ``str(value)`` under 1e-4. An evaluator's block has its label for a prefix and
  follows the step it ran at. Saves: ``Checkpoint saved to {path}`` (and ``Unsharded
  checkpoint saved to``), ``path`` being ``{save_folder}/step{global_step}{suffix}``; a
  resume: ``Loading checkpoint from {load_path}...`` (scripts/train.py).
- OLMo-core ``train/callbacks/console_logger.py``: the same blocks, the prefix
  ``[step={step}/{max_steps or '???'},epoch={epoch},eta={eta}]``, names with spaces
  (``train/CE loss``); ``utils.format_float`` adds ``1.23B`` / ``T`` / ``P`` / ``E`` over
  1e9 and ``1.20E-04`` under 1e-4. Saves: ``Saving checkpoint for step {step} to ...`` and
  ``Checkpoint for step {step} saved successfully`` (``train/trainer.py``); a resume:
  ``Loading checkpoint from '{dir}'...``.

Both log through ``logging`` with ``%(asctime)s\\t%(hostname)s:%(local_rank)s\\t%(name)s:
%(lineno)s\\t%(levelname)s\\t%(message)s``: the ``name:lineno`` there is the logger's source
line, never a step. Only the marker's ``step=`` is a step, and a save's own stated step.
"""

from __future__ import annotations

import re

from ...protocol import mask
from ..source import Lines
from . import Reader

MARKER_RE = re.compile(r"\[step=(\d+)/(?:\d+|\?\?\?)(?:,epoch=(\d+))?(?:,eta=[^\]]*)?\]\s*$")
METRIC_RE = re.compile(r"^ {4}([A-Za-z_][^=\t]*?)=(\S+)\s*$")
_SUFFIX = {"B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_SAVE_RES = (
    re.compile(r"\bSaving checkpoint for step (\d+) to "),
    re.compile(r"\bCheckpoint for step (\d+) saved successfully"),
    re.compile(r"\b[Cc]heckpoint saved to \S*?\bstep(\d+)(?:-\w+)?/?\s*$"),
)
_SAVED_RE = re.compile(r"\b[Cc]heckpoint saved to ")
_LOAD_RE = re.compile(r"\bLoading checkpoint from '?([^'\s]*?)'?(?:\.\.\.)?\s*$")
_STEP_DIR_RE = re.compile(r"\bstep(\d+)(?:-\w+)?/?$")
CLAIM_BYTES = 1 << 22  # a long preamble (the config printed whole) may come first
_CLAIM_RE = re.compile(
    rb"\[step=\d+/(?:\d+|\?\?\?)(?:,epoch=\d+)?(?:,eta=[^\]\n]*)?\]\r?\n {4}[A-Za-z_][^=\n]*=\S"
)
SURE = 0.9  # a marker only OLMo writes: surer than a JSON document, not than JSON lines


class Olmo(Reader):
    FORMAT = "olmo"
    WHAT = "OLMo console log"
    ORDER = 40
    FOLLOWS = True
    NAMES = ()  # whatever the console was sent to: found as a text log

    def sniff(self, head):
        """A step marker followed by a metric line, in the first :data:`CLAIM_BYTES`."""
        return SURE if _CLAIM_RE.search(head.raw(CLAIM_BYTES)) is not None else 0.0

    def read(self, src, out):
        """The series of an OLMo console log and the saves and resumes it states."""
        step = None  # the step of the block being read (None: not in a block with a step)
        block = False
        resume = None  # a resume whose checkpoint path names no step: at the next marker
        metric, marker = METRIC_RE.match, MARKER_RE.search
        series = out.series
        with src.open() as f:
            src_lines = Lines(f)
            for lines in src_lines:
                out.lines += len(lines)
                for line in lines:
                    if block:
                        m = metric(line)
                        if m is not None:
                            name, text = m.groups()
                            try:  # most values: a plain float, of a series already seen
                                v = float(text.replace(",", "") if "," in text else text)
                                s = series[name]
                                s[0].append(step)  # a TypeError before any step: nothing added
                            except (KeyError, ValueError, TypeError):
                                _value(out, step, name, text)
                                continue
                            s[1].append(v)
                            continue
                        block = False
                    m = marker(line)
                    if m is not None:
                        step = float(m.group(1))
                        block = True
                        if m.group(2) is not None:
                            out.add("epoch", step, float(m.group(2)))
                        if resume is not None:
                            out.event("resume", step, resume)
                            resume = None
                        continue
                    kind = _event(out, line, step)
                    if kind == "resume-pending":
                        resume = mask(line.strip())
                    elif kind is None and line.strip():
                        out.skipped += 1
                    # a log record's first line may head a block (an evaluator's, at this step)
                    block = not line.startswith(" ")
            out.long = src_lines.long


def number(text):
    """A value as ``format_float`` printed it: ``1,234``, ``1.23B``, ``1.20E-04``, ``nan``."""
    text = text.replace(",", "")
    mult = _SUFFIX.get(text[-1:])
    if mult is not None and text[-2:-1].isdigit():
        return float(text[:-1]) * mult
    return float(text)


def _value(out, step, name, text):
    if step is None:
        out.skipped += 1  # a block before the first step (OLMo's pre-train system metrics)
        return
    try:
        out.add(name, step, number(text))
    except ValueError:
        out.bad += 1


def _event(out, line, step):
    """A save or resume line of the format: recorded at the step it states; returns the
    kind, ``"resume-pending"`` for a load whose path names no step, or None."""
    for rx in _SAVE_RES:
        m = rx.search(line)
        if m is not None:
            out.event("checkpoint", float(m.group(1)), mask(line.strip()))
            return "checkpoint"
    if _SAVED_RE.search(line) and step is not None:
        out.event("checkpoint", step, mask(line.strip()))  # saved after the step logged
        return "checkpoint"
    m = _LOAD_RE.search(line)
    if m is not None:
        d = _STEP_DIR_RE.search(m.group(1))
        if d is None:
            return "resume-pending"
        out.event("resume", float(d.group(1)), mask(line.strip()))
        return "resume"
    return None
