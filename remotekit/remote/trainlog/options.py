"""train-log's options, declared once: :class:`TrainLogOptions`, one frozen dataclass that
both sides import.

*Here*, :func:`~remotekit.diagnostics.trainlog.analyze_train_log` maps its keywords onto it
and the ``train-log`` task takes its flags' help from it (a test holds every field to a
flag, or to the reason it has none); *there*, ``trainlog.py`` reads it back and the pipeline
takes its values. It crosses as one JSON record (:meth:`TrainLogOptions.argv`: the path,
then ``--options`` and the fields that differ from their defaults; the defaults are this
module's on both sides, shipped in the same package). ``trainlog.py PATH --preset olmo2 ...``
by hand parses flags made from the same fields (:func:`parser`).

Each field is an :func:`~remotekit.remote.options.option` and the class an
:class:`~remotekit.remote.options.Options`, the machinery the checkpoint commands' options
share: what is train-log's own is here. Each field says how a value given loosely (a
comma-separated string, a list, a number as text, ``"inf"``) becomes the field's value, and
what is refused (``ValueError`` naming the option): the constructor applies it, so every way
in (keywords, JSON, flags) is checked alike. Adding an option is one field here, its help
included; the stage that uses it reads ``options.<field>``.

Runs *there*: the standard library only, Python >= 3.8.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
from dataclasses import MISSING, dataclass

from .. import options as generic
from ..options import Options, add_flags, option
from ..protocol import number
from .base import DEFAULT_PRESET, PRESETS

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

# ------------------------------------------------------------------------- values, checked


def _words(value):
    """Names given as ``"a,b"``, ``["a", "b,c"]`` or None: a tuple, stripped, blanks dropped."""
    if value is None:
        return ()
    parts = [value] if isinstance(value, str) else [str(v) for v in value]
    return tuple(w.strip() for p in parts for w in p.split(",") if w.strip())


def _steps(value):
    """Steps given as ``"2000,4001"`` (commas or spaces), numbers, a list of either, or None:
    floats."""
    if value is None:
        return ()
    out = []
    for item in [value] if isinstance(value, str) else list(value):
        for part in re.split(r"[,\s]+", item.strip()) if isinstance(item, str) else [item]:
            if part == "":
                continue
            n = _number(part)
            if n is None:
                raise ValueError("not a step: %r" % (part,))
            out.append(float(n))
    return tuple(out)


def _number(value):
    """A number from a value given as a number, its text, or ``"inf"``/``"nan"``; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return number(value)
    return number(value)


def _float_or_none(value):
    if value is None:
        return None
    n = _number(value)
    if n is None:
        raise ValueError("not a number: %r" % (value,))
    return float(n)


def _positive_or_none(value):
    """None for None or 0 (the task's "not given"), else the number."""
    n = _float_or_none(value)
    return n if n else None


def _count(value):
    """A whole number of points; 0 (or less) sends none."""
    n = _float_or_none(value)
    return max(0, int(n)) if n is not None and n == n and abs(n) != float("inf") else 0


def _outcomes(value):
    """A vocabulary size or class count: a whole number >= 2; 0 or None: not given."""
    n = _float_or_none(value)
    if n is None or n == 0:
        return None
    if n != int(n) or n < 2:
        raise ValueError(
            "not a vocabulary size or class count (a whole number >= 2): %r" % (value,)
        )
    return int(n)


def _seconds(value):
    n = _float_or_none(value)
    return n if n is not None and n > 0 else 0.0


def _part(value):
    """A run part: a whole number, 0 or None for the last."""
    n = _float_or_none(value)
    if n is None or n == 0:
        return None
    if n != int(n):
        raise ValueError("not a run part: %r" % (value,))
    return int(n)


def _preset(value):
    if value not in PRESETS:
        raise ValueError("unknown preset %r; choose one of %s" % (value, ", ".join(PRESETS)))
    return value


def formats():
    """The values ``format`` takes: ``auto`` (sniffed), then each reader's format."""
    # imported when asked, by name: the laptop (and its type checker) imports these options
    # but never the readers, the far side's work
    readers = importlib.import_module(".readers", __package__)
    return ["auto"] + [r.FORMAT for r in readers.READERS]


def _format(value):
    value = str(value)
    if value != "auto" and value not in formats():
        raise ValueError("unknown format %r; choose one of %s" % (value, ", ".join(formats())))
    return value


def _path(value):
    if not isinstance(value, str) or not value:
        raise ValueError("a path is needed, not %r" % (value,))
    return value


def _dir(value):
    return str(value) if value else None


# ------------------------------------------------------------------------------- the options


@dataclass(frozen=True)
class TrainLogOptions(Options):
    """What ``train-log`` is asked: one log, how to judge it, and (``follow``) whether to
    follow it as it grows. Built with loose values (``metrics="loss,acc"``): each field's
    parse makes them the declared types, or raises ValueError naming the option."""

    WHAT = "train-log"

    path: str = option(
        MISSING,
        "the training log there, or its run directory (JSON lines, CSV, trainer_state.json, "
        "W&B .wandb, TensorBoard events, nanoGPT/llm.c/Megatron/fairseq or key=value text)",
        _path,
        task="log",
    )
    metrics: tuple[str, ...] = option(
        (),
        "a metric to analyse besides loss/acc/lr/grad_norm (repeatable)",
        _words,
        task="metric",
        flags=("--metric", "--metrics"),
    )
    preset: str = option(
        DEFAULT_PRESET,
        "spike rule: trend (the default: 7 sigma off a line that follows the series; a level "
        "shift is no spike), olmo2 (1000 steps, 7 sigma), olmo-core (128, 6), megatron (10x "
        "running max), zclip (EMA z-score > 2.5)",
        _preset,
        task="preset",
        choices=lambda: sorted(PRESETS),
    )
    ckpt_steps: tuple[float, ...] = option(
        (),
        "checkpoint steps, comma-separated (else found in the log or --checkpoints)",
        _steps,
        task="ckpt_steps",
    )
    ckpt_dir: str | None = option(
        None,
        "the run's checkpoint directory there: its saves are checkpoint events (default: the "
        "host's `checkpoints:`)",
        _dir,
        task="checkpoints",
        flags=("--checkpoints", "--ckpt-dir"),
    )
    steps_per_epoch: float | None = option(
        None, "steps per epoch, for epoch boundaries", _positive_or_none, task="steps_per_epoch"
    )
    vocab_size: int | None = option(
        None,
        "the vocabulary size (or the number of classes) the loss is a cross-entropy over, "
        "when the log does not state it: a loss above ln of it from the start is worse than "
        "a uniform guess (default: a count the log states)",
        _outcomes,
        task="vocab_size",
    )
    tolerance: float | None = option(
        None,
        "steps from an event that still count as at it (default: max(5, 2 logging strides))",
        _float_or_none,
        why_not="the API's (analyze_train_log(tolerance=)); the task keeps the default",
    )
    points: int = option(
        0,
        "also send a decimated series of each metric, this many points (0: none)",
        _count,
        why_not="--plot asks for 2000, what a plot draws",
    )
    format: str = option(
        "auto",
        "the log's format (default: sniffed from its content)",
        _format,
        why_not="trainlog.py's by hand: the task always lets the content decide",
        choices=formats,
    )
    run_part: int | None = option(
        None,
        "a file holding several runs (a step counter that falls and climbs again: a second "
        "run or a restart appended): which part to analyse, 1 the first, -1 the last "
        "(default: the last)",
        _part,
        task="run_part",
    )
    follow: bool = option(
        False,
        "follow the log as it grows and report each new incident (spike, cliff, NaN/Inf, "
        "resume) as it is written; Ctrl-C ends it (exit 0). Follows logs that grow by "
        "appending: JSON lines, CSV, text logs, key/value table consoles, TensorBoard event "
        "files; not W&B .wandb files, "
        "trainer_state.json or other JSON documents, MLflow stores",
        bool,
        task="follow",
    )
    duration: float = option(
        0.0,
        "with follow: stop after this many seconds (0: when stopped)",
        _seconds,
        why_not="the follower's: --timeout with --follow bounds the whole follow",
    )
    run_dir: str | None = option(
        None,
        "with follow: the record folder there of the run that writes the log: the follow "
        "ends once that run ended (as `logs --follow` does), after the log's last lines",
        _dir,
        why_not="the API's follow_train_log(run=) and the task's --run: the run's own folder",
    )
    after_step: float | None = option(
        None,
        "with follow: of what the log holds already, report the incidents after this step (a "
        "follow taken up again; default: none of them)",
        _float_or_none,
        why_not="the follower's own, when it follows again after a lost connection",
    )

    @staticmethod
    def names_option(name: str, message: str) -> bool:
        """A refusal names its option when the name is anywhere in it ("a path is
        needed"), not only at its start as :meth:`Options.names_option` asks."""
        return name in message

    @classmethod
    def of(cls, path: str, **given: Any) -> TrainLogOptions:
        """The options from ``path`` and keywords given loosely (the API's); an unknown
        keyword is a TypeError, a bad value a ValueError naming it."""
        return cls(path, **given)

    @property
    def wanted(self) -> list[str] | None:
        """The metrics asked for, or None: the usual ones, found by their names."""
        return list(self.metrics) or None

    def argv(self) -> list[str]:
        """``trainlog.py``'s arguments for these options: the path, then ``--options`` and
        the record of the fields that differ from the defaults."""
        rest = self.to_dict(changed=True)
        path = rest.pop("path")
        return [path, "--options", json.dumps(rest, separators=(",", ":"), allow_nan=False)]

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None, description: str = "") -> TrainLogOptions:
        """The options of ``trainlog.py``'s command line (:func:`parser`): ``--options``'s
        record, then the flags given by hand on top; bad values end it as a usage error."""
        ap = parser(description=description)
        return cls.from_command_line(vars(ap.parse_args(argv)), ap)


def parser(prog: str = "trainlog.py", description: str = "") -> argparse.ArgumentParser:
    """``trainlog.py``'s command line, made from the fields: ``PATH``, a flag each (with the
    field's help and choices; a repeatable one for a tuple), and ``--options JSON``. A flag
    not given leaves its field to ``--options`` or the default."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("path", help=TrainLogOptions.__dataclass_fields__["path"].metadata["help"])
    return add_flags(ap, TrainLogOptions, skip=("path",))


def task_help() -> dict[str, str]:
    """The ``train-log`` task's help for the flags that set an option: the fields' help."""
    return generic.task_help(TrainLogOptions)
