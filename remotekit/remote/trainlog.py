#!/usr/bin/env python3
"""train-log: read a training log where it lives and report spikes, events and batch shape.

Runs *there* (inside the container) with only the standard library, on Python >= 3.8.
The log is streamed once into compact ``array`` columns; only findings travel back.

Usage::

    trainlog.py PATH --options '{"preset": "olmo2", "ckpt_steps": [2000, 4001]}'
    trainlog.py PATH [--metric NAME ...] [--preset trend|olmo2|olmo-core|megatron|zclip]
                [--ckpt-steps 2000,4001] [--checkpoints DIR] [--steps-per-epoch 1931]
                [--tolerance STEPS] [--points 2000] [--format auto|jsonl|csv|json|text|...]
                [--follow [--duration S] [--after-step STEP]]

The options are one record, :class:`trainlog.options.TrainLogOptions` (the local side imports
the same class and sends it as ``--options JSON``, the fields that differ from the defaults);
by hand, each field is a flag of the same name too.

Inputs (auto-detected by content): JSON lines (W&B history with ``_step``, LLaMA-Factory /
TRL ``trainer_log.jsonl`` with ``current_steps``, or any ``step`` key), CSV with a header
(Lightning ``metrics.csv``, sparse rows), HF ``trainer_state.json`` (``log_history``), W&B
run files (``run-*.wandb``) and ``wandb-summary.json``, TensorBoard event files
(``simple_value`` and scalar tensors), the text of nanoGPT, llm.c, Megatron-LM and fairseq
(only lines in their format are data), MLflow file stores, OLMo / OLMo-core console logs,
else plain text with ``key=value`` or ``key: value`` pairs: one reader each, in
``trainlog/readers/``, which also says how to add one. Each reader returns series
(``trainlog/series``); of several candidate files or runs one is chosen by
``trainlog/rank``. PATH may be a run directory: the log in it is picked (``chosen_from``
says which and why). Lines that announce checkpoint saves or resumes become events.

Records, one JSON object per stdout line, each with a ``"type"``; non-finite numbers are
sent as the strings ``"nan"``, ``"inf"``, ``"-inf"``. Their fields are declared once, in
``trainlog/records.py`` (the local side reads them with the very classes; a test holds what
this script writes to them): ``source``, ``preset``, ``metric``, ``event``, ``spike``,
``correlation``, ``distribution``, ``periodicity``, ``composition``, ``histogram``,
``series`` and, with ``--follow``, ``status``. Besides them:

``warning``      message (a caveat of the reading: a guessed column, skipped lines; not a
                 finding, the exit code stays)
``error``        message, kind (then only ``summary`` and ``done`` follow; exit 2)
``summary``      rows, spikes, events {kind: count}, findings [names]
``done``         command ("train-log"), exit_code: the one final record (protocol.py)

Exit status (also the ``done`` record's): 0 nothing found, 1 findings, 2 could not run.

Modules, in the package ``trainlog/`` beside this file (:mod:`remotekit.shipping` ships
the whole of remotekit.remote; ``trainlog/__init__.py`` draws them as the pipeline they make: find,
read, choose, analyse, follow), with ``protocol`` (the record format, shared with the local
side) and ``infile`` (the safe opener); this file parses the arguments and turns every
failure into an ``error`` record.
"""

from __future__ import annotations

import os
import sys
import traceback

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )

from remotekit.remote.infile import open_regular
from remotekit.remote.trainlog.analyze import analyze_log
from remotekit.remote.trainlog.base import LogError, failed
from remotekit.remote.trainlog.choose import NoLoss
from remotekit.remote.trainlog.follow import NotFollowed, follow_log
from remotekit.remote.trainlog.options import TrainLogOptions


def main(argv=None):
    opts = TrainLogOptions.from_argv(argv, description=__doc__.split("\n\n")[0])
    try:
        if opts.follow:
            return follow_log(opts)
        return analyze_log(opts)
    except NotFollowed as exc:
        return failed("%s: %s" % (opts.path, exc), kind="not-followed")
    except NoLoss as exc:
        return _no_loss(opts.path, exc)
    except LogError as exc:
        return failed("%s: %s" % (opts.path, exc))
    except OSError as exc:
        return failed("cannot read %s: %s" % (opts.path, exc.strerror or exc))
    except Exception as exc:  # a log that breaks the script still gets an answer, not a traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return failed(
            "%s: the analysis failed (%s: %s, at %s:%d in %s); this is a bug in trainlog.py: "
            "please report it with the log's first lines"
            % (
                opts.path,
                type(exc).__name__,
                str(exc)[:200],
                os.path.basename(where.filename),
                where.lineno,
                where.name,
            ),
            kind="internal",
        )


def _no_loss(path, exc):
    """No loss series: a binary file is named as such, else the numeric columns there are."""
    binary = 0.0 if exc.what else _binary_share(path)
    if binary > 0.1:
        return failed(
            "%s: not a text log: %.0f%% of its first bytes are binary (a checkpoint, "
            "an archive, the wrong file?); no loss series read" % (path, 100 * binary),
            kind="not-text",
        )
    what = (
        "found only %s, no loss series" % ", ".join(exc.found)
        if exc.found
        else "no loss series found"
    )
    if exc.what:
        what = "a %s that parses; %s" % (exc.what, what)
    what = "; ".join(exc.notes + [what])
    left = "; ".join("%s (%s)" % (", ".join(names[:12]), why) for why, names in exc.left_out)
    return failed(
        "%s: %s; numeric series: %s, the most loss-like first; name the one to analyse with "
        "--metric NAME%s"
        % (
            path,
            what,
            ", ".join(exc.numeric[:30]) or "none",
            "; left out: " + left if left else "",
        ),
        kind="no-loss",
        numeric=exc.numeric[:30],
        left_out=[[why, names] for why, names in exc.left_out],
        flag="--metric",
    )


def _binary_share(path, size=1 << 16):
    """Share of the first ``size`` bytes of ``path`` that no text log has: control bytes
    other than tab/newline/CR, and bytes that are not UTF-8 (0 for a directory)."""
    try:
        with open_regular(path) as f:
            head = f.read(size)
    except OSError:
        return 0.0
    if not head:
        return 0.0
    text = head.decode("utf-8", "replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r"))
    return bad / len(text)


if __name__ == "__main__":
    sys.exit(main())
