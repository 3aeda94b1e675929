"""Which of several logs of one run ``trainlog.py`` reads (:func:`choose`): the one with
the longest history of a train-side loss, then the newest; and why, in words, with what
else was there. One rule for every place a choice is made (the runs of an MLflow store,
the event files of a Lightning ``version_0/``), and the one ``diagnose --run`` follows.
"""

from __future__ import annotations

import re

from .choose import HELD_OUT, _loss_score

HELD_OUT_SCORE = -5  # a loss name scoring below this is a held-out (val/test) loss


def train_loss(lengths):
    """``(key, values)``: the train-side loss with the most values among ``lengths``
    (``{series: values logged}``), else ``(None, 0)``."""
    best = (None, 0)
    for key, n in lengths.items():
        score = _loss_score(key)
        if score is None or score < HELD_OUT_SCORE:
            continue
        if n > best[1]:
            best = (key, n)
    return best


def _held_out_path(label):
    """A candidate whose folder says it is held out (Keras: ``logs/validation/``)."""
    parts = re.split(r"[/._\- ]+", label.lower())[:-1]
    return any(p in HELD_OUT for p in parts)


def _held_out(lengths):
    return [k for k in lengths if (_loss_score(k) or 0) < HELD_OUT_SCORE]


def _describe(label, lengths):
    key, n = train_loss(lengths)
    if key is not None and _held_out_path(label):
        return "%s (a held-out folder: %r, %d values)" % (label, key, n)
    if key is not None:
        return "%s (%r: %d values)" % (label, key, n)
    held = _held_out(lengths)
    if held:
        return "%s (held-out only: %s)" % (label, ", ".join(map(repr, held[:3])))
    return "%s (no loss: %s)" % (label, ", ".join(map(repr, sorted(lengths)[:4])) or "no series")


def choose(cands):
    """``(index, why)`` of the log to read among ``cands``, each ``(label, lengths,
    newest)``: ``lengths`` is ``{series: values logged}``, ``newest`` a time (larger is
    newer). A train-side loss beats none, a longer history of it a shorter, then the newest."""

    def key(i):
        name, n = train_loss(cands[i][1])
        return (not _held_out_path(cands[i][0]), name is not None, n, cands[i][2])

    best = max(range(len(cands)), key=key)
    name, n = train_loss(cands[best][1])
    if name is None:
        why = "no candidate has a train-side loss: the newest"
    elif len(cands) > 1:
        why = "the longest history of a train-side loss (%r: %d values)" % (name, n)
    else:
        why = "the only candidate (%r: %d values)" % (name, n)
    others = [_describe(c[0], c[1]) for i, c in enumerate(cands) if i != best]
    if others:
        why += "; also there: %s" % "; ".join(others[:6])
        if len(others) > 6:
            why += "; and %d more" % (len(others) - 6)
    return best, why
