"""Which of several logs of one run ``trainlog.py`` reads (:func:`choose`): the one with
the longest history of a train-side loss, then the kind of log preferred for as long a
history (a run's own log over a checkpoint's copy), then the newest; and why, in words,
with what else was there. One rule for every place a choice is made (the logs of a run
directory of any kinds, the runs of an MLflow store, the event files of a Lightning
``version_0/``), and the one ``diagnose --run-dir`` follows.
"""

from __future__ import annotations

import re

from .choose import HELD_OUT, loss_score

HELD_OUT_SCORE = -5  # a loss name scoring below this is a held-out (val/test) loss
SAME = 0.05  # histories estimated from a file's start that differ by less are as long


def train_loss(lengths):
    """``(key, values)``: the train-side loss with the most values among ``lengths``
    (``{series: values logged}``), else ``(None, 0)``."""
    best = (None, 0)
    for key, n in lengths.items():
        score = loss_score(key)
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
    return [k for k in lengths if (loss_score(k) or 0) < HELD_OUT_SCORE]


class Candidate:
    """A log :func:`choose` may pick: ``label`` (its path, or an MLflow run's name), ``what``
    (the kind, in words, or None), ``lengths`` (``{series: values logged}``), ``newest`` (a
    time: larger is newer), ``preference`` (the kind's rank: lower is preferred for as long
    a history), ``exact`` (False: the lengths are estimated from the file's start)."""

    def __init__(self, label, lengths, newest, preference=0, exact=True, what=None):
        self.label = label
        self.lengths = lengths
        self.newest = newest
        self.preference = preference
        self.exact = exact
        self.what = what

    def __str__(self):
        return "%s (%s)" % (self.label, self.what) if self.what else self.label


def _values(n, exact):
    return "%s%d value%s" % ("" if exact else "~", n, "" if n == 1 else "s")


def _describe(cand):
    key, n = train_loss(cand.lengths)
    head = "%s (%s" % (cand.label, cand.what + "; " if cand.what else "")
    if key is not None and _held_out_path(cand.label):
        return "%sa held-out folder: %r, %s)" % (head, key, _values(n, cand.exact))
    if key is not None:
        return "%s%r: %s)" % (head, key, _values(n, cand.exact))
    held = _held_out(cand.lengths)
    if held:
        return "%sheld-out only: %s)" % (head, ", ".join(map(repr, held[:3])))
    names = ", ".join(map(repr, sorted(cand.lengths)[:4])) or "no series"
    return "%sno loss: %s)" % (head, names)


def choose(cands):
    """``(index, why)`` of the log to read among ``cands`` (:class:`Candidate`). A
    train-side loss beats none and a training folder a held-out one, a longer history of it
    a shorter (estimates within :data:`SAME` of the longest are as long), then the
    preferred kind, then the newest."""
    n = len(cands)
    loss = [train_loss(c.lengths) for c in cands]
    rank = [(not _held_out_path(c.label), loss[i][0] is not None) for i, c in enumerate(cands)]
    pool = [i for i in range(n) if rank[i] == max(rank)]
    longest = max(loss[i][1] for i in pool)
    same = 0.0 if all(cands[i].exact for i in pool) else SAME
    pool = [i for i in pool if loss[i][1] >= longest * (1 - same)]
    best = max(pool, key=lambda i: (-cands[i].preference, cands[i].newest))
    name, count = loss[best]
    values = _values(count, cands[best].exact)
    if name is None:
        why = "no candidate has a train-side loss: the preferred kind, then the newest"
    elif n == 1:
        why = "the only candidate (%r: %s)" % (name, values)
    else:
        why = "the longest history of a train-side loss (%r: %s)" % (name, values)
        if len(pool) > 1:
            same_kind = len({cands[i].preference for i in pool}) == 1
            why += ", and of as long ones the %s" % ("newest" if same_kind else "preferred kind")
    others = [_describe(c) for i, c in enumerate(cands) if i != best]
    if others:
        why += "; also there: %s" % "; ".join(others[:6])
        if len(others) > 6:
            why += "; and %d more" % (len(others) - 6)
    return best, why
