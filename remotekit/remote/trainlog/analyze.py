"""The analysis of ``trainlog.py``, in its phases: read the log, prepare the columns, detect
per metric, events, composition, and the records that go back.
"""

from __future__ import annotations

import math
import os
from array import array
from collections import Counter
from itertools import islice
from operator import sub

from ..protocol import EXIT_FINDINGS, EXIT_OK
from .base import (
    CLIFF_DROP,
    CLIFF_SIGMA,
    FMAX,
    MAX_EVENTS,
    MAX_SPIKES,
    PRESETS,
    LogError,
    conclude,
    decimate,
    is_missing,
    median,
    quantile,
    send,
)
from .choose import NoLoss, reward_key
from .composition import bucket_column, composition
from .events import correlate, find_events, nearest_event
from .find import ckpt_dir_of, find_log
from .onset import chance_level, given_chance, never_rose, onset
from .read import read_log
from .resumes import check_resumes
from .source import MAX_LINE
from .spikes import detect
from .steps import drop_bad_steps, epoch_runs, per_batch, reconcile_steps


def analyze_log(opts):
    """Analyse the log ``opts.path`` names (a file or a run directory; ``opts``: the
    :class:`.options.TrainLogOptions`) and write the records; return the exit code (0 nothing
    found, 1 findings). Raises LogError, NoLoss and OSError for a log that cannot be
    analysed (``trainlog.main`` says so in records)."""
    path, chosen, warnings, ckpt_dir = _log_path(opts)
    try:
        ing, fmt, nlines, extra = read_log(path, opts.format, opts.wanted, opts.run_part)
    except NoLoss as exc:
        exc.notes = warnings + exc.notes  # the choice's caveat explains the missing loss
        raise
    warnings.extend(reading_caveats(ing))
    steps, cols, n, derived = prepare_columns(ing, warnings)
    stride, tol = stride_of(steps, n, opts.tolerance)
    _send_source(path, chosen, fmt, nlines, ing, steps, n, stride, tol)
    preset = _send_preset(opts.preset, n)
    incidents, compact, stats = detect_all(ing, cols, steps, n, preset)
    for m in stats:
        send("metric", **m)
    start = _send_onset(path, ing, cols, steps, opts.vocab_size)
    events = find_events(
        ing, steps, cols, extra, warnings, opts.ckpt_steps, ckpt_dir, opts.steps_per_epoch
    )
    counts = _send_events(events)
    comp = _composition(ing, compact, steps, incidents, cols, n, derived)
    place(incidents, events, *bucket_codes(comp, ing, cols, n))
    lost = check_resumes(incidents, ckpt_dir, tol)
    _send_spikes(incidents, warnings)
    for c in correlate(incidents, events, tol, min(steps), max(steps)):
        send("correlation", **c)
    for rtype in ("distribution", "periodicity", "composition", "histogram"):
        if comp.get(rtype):
            send(rtype, **comp[rtype])
    if opts.points > 0:
        _send_series(ing, compact, incidents, steps, opts.points)
    for w in warnings:
        send("warning", message=w)
    findings = _findings(incidents, comp) + (["spike-at-resume"] if lost else [])
    if start is not None and start["unhealthy"]:
        findings.append("unhealthy-start")
    code = EXIT_FINDINGS if findings else EXIT_OK
    return conclude(code, rows=n, spikes=len(incidents), events=dict(counts), findings=findings)


def stride_of(steps, n, tolerance=None):
    """``(stride, tolerance)``: the usual logging stride in steps (the median of the first
    2000 step differences), and the steps that still count as "at" an event (``tolerance``
    when given, else max(5, 2 strides))."""
    strides = sorted(map(sub, islice(steps, 1, min(n, 2001)), steps[: min(n, 2001) - 1]))
    stride = quantile([s for s in strides if s > 0], 0.5) if any(s > 0 for s in strides) else 1.0
    return stride, tolerance if tolerance is not None else max(5.0, 2 * stride)


def _log_path(opts):
    """``(file, why, notes, ckpt_dir)``: the log itself, or the one picked in a run
    directory with the caveats of the pick; and the checkpoint directory whose saves are
    events: the one named, else (no saves named) a run directory's own."""
    if not os.path.isdir(opts.path):
        return opts.path, None, [], opts.ckpt_dir
    path, chosen, notes = find_log(opts.path)
    ckpt_dir = opts.ckpt_dir
    if ckpt_dir is None and not opts.ckpt_steps:
        ckpt_dir = ckpt_dir_of(opts.path)
    return path, chosen, list(notes), ckpt_dir


def reading_caveats(ing):
    """The warnings about how the log was read: its reader's caveats first."""
    out = list(getattr(ing, "caveats", []))
    out.extend(getattr(ing, "guesses", []))
    if getattr(ing, "long", 0):
        out.append("%d lines longer than %d bytes skipped (not read)" % (ing.long, MAX_LINE))
    for name in getattr(ing, "missing", []):
        out.append("metric %r not found in the log" % name)
    return out


def prepare_columns(ing, warnings):
    """``(steps, {label: column}, rows, derived)``: the ingested columns by label, one row
    per step in order (see ``steps``), meta columns with NaN for a missing value."""
    n = ing.rows()
    if n == 0:
        raise LogError("no rows with %s" % ", ".join(k for _, k in ing.metrics))
    ing.flush()
    steps = ing.cols[0] if ing.step_key else array("d", range(n))
    cols = {}
    for j, (label, _) in enumerate(ing.metrics):
        cols[label] = ing.cols[ing.m0 + j]
    for j, (name, _) in enumerate(ing.meta):
        cols[name] = ing.cols[ing.m1 + j]
    ing.cols = []
    steps, cols = drop_bad_steps(ing, steps, cols, warnings)
    if not len(steps):
        raise LogError("no row with a usable step (%s)" % "; ".join(warnings[-1:]))
    if not ing.step_key:
        steps, cols, n = epoch_runs(ing, steps, cols, warnings)
    steps, cols, n = reconcile_steps(ing, steps, cols, warnings)
    for name in [m for m, _ in ing.meta]:
        col = cols[name]
        if not math.isfinite(sum(col)):
            cols[name] = array("d", (math.nan if is_missing(v) else v for v in col))
    derived = per_batch(ing, steps, cols, warnings)
    return steps, cols, n, derived


def _send_source(path, chosen, fmt, nlines, ing, steps, n, stride, tol):
    bucket = [("bucket", ing.bucket_key)] if ing.bucket_key else []
    send(
        "source",
        path=os.path.abspath(path),
        chosen_from=chosen,
        format=fmt,
        dialect=ing.dialect,
        lines=nlines,
        rows=n,
        skipped=ing.skipped,
        bad_lines=ing.bad,
        step_key=ing.step_key,
        columns=dict(ing.metrics + ing.meta + bucket),
        metrics=[label for label, _ in ing.metrics],
        why=getattr(ing, "why", {}),
        first_step=steps[0],
        last_step=steps[-1],
        stride=stride,
        tolerance=tol,
    )


def preset_for(name, n):
    """The preset for a log of ``n`` rows. A log shorter than a few windows would be judged
    against its own first learning phase: a quarter of the log (at least 50 rows) is the
    window instead."""
    preset = dict(PRESETS[name], name=name)
    preset["window"] = min(preset["window"], max(50, n // 4))
    return preset


def _send_preset(name, n):
    """The preset for a log of ``n`` rows (:func:`preset_for`), sent (the record says
    window < preset_window when it was shortened)."""
    preset = preset_for(name, n)
    send(
        "preset",
        name=name,
        window=preset["window"],
        preset_window=PRESETS[name]["window"],
        sigma=preset["sigma"],
        ratio=preset["ratio"],
        cliff_sigma=CLIFF_SIGMA,
        cliff_drop=CLIFF_DROP,
        rule=preset["rule"],
    )
    return preset


def detect_all(ing, cols, steps, n, preset):
    """``(incidents, {label: (finite values, their rows or None)}, metric stats)``: spikes,
    cliffs and non-finite runs of every metric, and the fields of a ``metric`` record each."""
    incidents = []
    compact = {}
    stats = []
    for label, key in ing.metrics:
        col = cols[label]
        direction = "none" if label == "lr" else ("down" if "acc" in label.lower() else "up")
        vals, rows, nonfinite = _finite(col, n)
        compact[label] = (vals, rows)
        found, flagged = detect(label, vals, rows, steps, direction, preset)
        found.extend(_nonfinite_incident(label, nf, steps) for nf in nonfinite)
        incidents.extend(found)
        stats.append(
            dict(
                label=label,
                key=key,
                direction=direction,
                n=len(vals),
                flagged=flagged,
                spike_share=(flagged / len(vals)) if len(vals) else 0.0,
                nonfinite=sum(nf["flagged"] for nf in nonfinite),
                median=median(vals[-min(len(vals), 10000) :]) if len(vals) else None,
            )
        )
    return incidents, compact, stats


def _finite(col, n):
    """``(values, rows, nonfinite)``: the values within float32's range, their rows (None
    when that is all of them) and the runs of non-finite (not missing) values."""
    if math.isfinite(sum(col)) and max(col, default=0.0) <= FMAX and min(col, default=0.0) >= -FMAX:
        return col, None, []
    rows = [i for i, v in enumerate(col) if -FMAX <= v <= FMAX]
    bad = [i for i, v in enumerate(col) if not -FMAX <= v <= FMAX and not is_missing(v)]
    vals = array("d", (col[i] for i in rows))
    if len(rows) == n:
        rows = None
    nonfinite = []
    for i in bad:
        if nonfinite and nonfinite[-1]["last"] == i - 1:
            nonfinite[-1]["last"] = i
            nonfinite[-1]["flagged"] += 1
            continue
        nonfinite.append({"first": i, "last": i, "flagged": 1, "value": col[i]})
    return vals, rows, nonfinite


def _nonfinite_incident(label, nf, steps):
    step = steps[nf["first"]]
    return {
        "metric": label,
        "kind": "nonfinite",
        "row": nf["first"],
        "idx": None,
        "end_idx": None,
        "step": step,
        "onset_step": step,
        "peak_step": step,
        "value": nf["value"],
        "baseline": None,
        "scale": None,
        "score": None,
        "recovery_steps": None,
        "flagged": nf["flagged"],
        "rule": "non-finite",
    }


def _send_onset(path, ing, cols, steps, vocab_size=None):
    """The ``onset`` record of the loss (:mod:`.onset`), when there is one; its fields.
    The chance level is ``vocab_size``'s when given, else the log's own count."""
    key = dict(ing.metrics).get("loss")
    score = ing.maximised
    if key is None and score is not None:
        rec = never_rose(score, score, cols[score], steps)
        if rec is not None:
            send("onset", **rec)
        return rec
    if key is None:
        return None
    if vocab_size is not None:
        chance, said = given_chance(vocab_size)
    else:
        chance, said = chance_level(path) if not os.path.isdir(path) else (None, None)
    # a reinforcement learner's loss need not fall, nor does a trained model's trained
    # again (a part that continues the one before): no flat-loss verdict on either
    flat = reward_key(getattr(ing, "all_keys", ())) is None and not getattr(ing, "continues", 0)
    rec = onset("loss", key, cols["loss"], steps, chance, said, flat)
    if rec is not None:
        send("onset", **rec)
    return rec


def _send_events(events):
    """One ``event`` record each (at most MAX_EVENTS per kind); the count per kind."""
    counts = Counter(e[0] for e in events)
    sent = Counter()
    for e in events:
        sent[e[0]] += 1
        if sent[e[0]] <= MAX_EVENTS:
            send("event", kind=e[0], step=e[1], source=e[2], detail=e[3])
    return counts


def _composition(ing, compact, steps, incidents, cols, n, derived):
    """Batch composition on the loss (or the first metric that is not the lr)."""
    labels = [lab for lab, _ in ing.metrics]
    main = "loss" if "loss" in labels else next((lab for lab in labels if lab != "lr"), None)
    if main is None:
        return {}
    vals, rows = compact[main]
    return composition(main, vals, rows, steps, incidents, ing, cols, n, derived)


def bucket_codes(comp, ing, cols, n):
    codes, names = comp.get("codes", (None, None))
    if codes is None:
        _, codes, names = bucket_column(ing, cols, n)
    return codes, names


def place(incidents, events, codes, names):
    """Each incident (sorted by step) with its nearest event, and the bucket of its batch
    with how many same-bucket rows in a row led up to it."""
    ev_steps = [e[1] for e in events]
    incidents.sort(key=lambda i: (i["step"], i["metric"]))
    for inc in incidents:
        e = nearest_event(inc["step"], events, ev_steps)
        if e is not None:
            inc["event"], inc["event_step"], inc["distance"] = e[0], e[1], inc["step"] - e[1]
        else:
            inc["event"] = inc["event_step"] = inc["distance"] = None
        inc["bucket"] = inc["run_position"] = None
        if codes is not None:
            row = inc["row"]
            c = codes[row]
            pos = 1
            while row - pos >= 0 and codes[row - pos] == c and pos < 100000:
                pos += 1
            inc["bucket"] = names[c] if c >= 0 else None
            inc["run_position"] = pos


def _send_spikes(incidents, warnings):
    """One ``spike`` record per incident; the MAX_SPIKES highest scores when there are more."""
    listed = incidents
    if len(listed) > MAX_SPIKES:
        listed = sorted(listed, key=lambda i: -(i["score"] if i["score"] is not None else math.inf))
        listed = sorted(listed[:MAX_SPIKES], key=lambda i: (i["step"], i["metric"]))
        warnings.append(
            "%d spikes found; the %d with the highest score are listed"
            % (len(incidents), MAX_SPIKES)
        )
    for inc in listed:
        rec = dict((k, v) for k, v in inc.items() if k not in ("row", "idx", "peak_idx", "end_idx"))
        send("spike", **rec)


def _send_series(ing, compact, incidents, steps, points):
    """A decimated series of each metric, every spike's onset and peak kept."""
    for label, _ in ing.metrics:
        vals, rows = compact[label]
        mine = [i for i in incidents if i["metric"] == label and i["idx"] is not None]
        keep = [i["idx"] for i in mine] + [i["peak_idx"] for i in mine]
        keep += [i["peak_idx"] + 1 for i in mine]
        idx = decimate(vals, points, keep)
        send(
            "series",
            metric=label,
            steps=[steps[rows[i] if rows is not None else i] for i in idx],
            values=[vals[i] for i in idx],
        )


def _findings(incidents, comp):
    kinds = set(i["kind"] for i in incidents)
    findings = [name for kind, name in FINDING_OF if kind in kinds]
    if comp.get("composition", {}).get("finding"):
        findings.append("batch-composition")
    return findings


FINDING_OF = (("spike", "spikes"), ("cliff", "cliffs"), ("nonfinite", "nonfinite"))
