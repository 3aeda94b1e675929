"""A spike at a resume, and the checkpoint the run resumed from: did it hold what a resume
needs? (issue 35: "spike at the resume from step N: the checkpoint has no optimizer state for
37 of 148 parameters").

When the checkpoints are given (``--checkpoints``; ``diagnose --run`` gives the run's), each
incident whose nearest event is a resume (within the log's tolerance) is joined to the save
the run resumed from: the latest one at or before the resume's step. That checkpoint is
opened as ``ckpt.py inspect`` opens it (``weights_only``, no tensor data read) and its
``resume`` check (:mod:`..ckpt.resume`) says what a resume from it lost. Needs torch; without
it (or for a checkpoint that cannot be read) the incident says why it was not checked.
"""

from __future__ import annotations

import importlib.util

from .base import fmt_number
from .events import checkpoint_entries


def check_resumes(incidents, ckpt_dir, tol):
    """Set ``resume_from`` (the step of the checkpoint resumed from) and ``resume_check``
    (what it lacks, or that it holds what a resume needs, or why it was not checked) on
    every incident at a resume; returns whether one of them lost state (a finding)."""
    at = [
        i
        for i in incidents
        if i.get("event") == "resume"
        and i.get("distance") is not None
        and abs(i["distance"]) <= tol
    ]
    if not at or not ckpt_dir:
        return False
    try:
        saves = checkpoint_entries(ckpt_dir)
    except OSError:
        return False
    checked = {}
    lost = False
    for inc in at:
        before = [(s, p) for s, _, p in saves if s <= inc["event_step"] + tol]
        if not before:
            inc["resume_from"] = None
            inc["resume_check"] = "no checkpoint at or before step %s in %s" % (
                fmt_number(inc["event_step"]),
                ckpt_dir,
            )
            continue
        step, path = before[-1]
        if path not in checked:
            checked[path] = _check(path)
        gap, text = checked[path]
        inc["resume_from"], inc["resume_check"] = step, text
        lost = lost or gap
    return lost


def _check(path):
    """``(lost state?, words)`` for the checkpoint at ``path``."""
    if importlib.util.find_spec("torch") is None:
        return False, "%s not checked: no torch here" % path
    from ..ckpt.base import Fatal, LoadError
    from ..ckpt.layouts import open_source
    from ..ckpt.options import InspectOptions
    from ..ckpt.resume import check

    src = None
    try:
        src = open_source(path, InspectOptions(path=path), header_only=True)
        res = check(src, path)
    except (LoadError, Fatal) as e:
        return False, "%s not checked: %s" % (path, getattr(e, "reason", None) or e)
    finally:
        if src is not None:
            src.close()
    if res["gaps"]:
        return True, "%s: %s" % (path, "; ".join(res["gaps"]))
    return False, "%s holds what a resume needs" % path
