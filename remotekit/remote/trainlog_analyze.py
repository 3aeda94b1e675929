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

from protocol import EXIT_FINDINGS, EXIT_OK
from trainlog_base import (
    CLIFF_DROP,
    CLIFF_SIGMA,
    FMAX,
    MAX_EVENTS,
    MAX_SPIKES,
    PRESETS,
    LogError,
    _is_missing,
    _median,
    _quantile,
    conclude,
    decimate,
    send,
)
from trainlog_composition import bucket_column, composition
from trainlog_events import correlate, find_events, nearest_event
from trainlog_ingest import MAX_LINE
from trainlog_read import ckpt_dir_of, dialect_of, find_log, read_log
from trainlog_spikes import detect
from trainlog_steps import drop_bad_steps, per_batch, reconcile_steps


def analyze_log(args, wanted):
    preset = dict(PRESETS[args.preset])
    warnings = []
    path, chosen = args.path, None
    if os.path.isdir(path):
        run_dir = path
        path, chosen = find_log(run_dir)
        if args.ckpt_dir is None and not args.ckpt_steps:
            ck = ckpt_dir_of(run_dir)
            if ck is not None:
                args.ckpt_dir = ck
    ing, fmt, nlines, extra = read_log(path, args.format, wanted)
    if extra.pop("summary_only", False):
        warnings.append(
            "a W&B summary holds only the last value of each key, not the history: read the "
            "run's .wandb file (wandb/run-*/run-*.wandb) for spikes"
        )
    if fmt == "text":
        warnings.append(
            "no known trainer line format (nanoGPT, llm.c, Megatron, fairseq): every line's "
            "key=value / key: value pairs were read as data"
        )
    warnings.extend(getattr(ing, "guesses", []))
    if getattr(ing, "long", 0):
        warnings.append("%d lines longer than %d bytes skipped (not read)" % (ing.long, MAX_LINE))
    for name in getattr(ing, "missing", []):
        warnings.append("metric %r not found in the log" % name)
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
    steps, cols, n = reconcile_steps(ing, steps, cols, warnings)
    for name in [m for m, _ in ing.meta]:
        col = cols[name]
        if not math.isfinite(sum(col)):
            cols[name] = array("d", (math.nan if _is_missing(v) else v for v in col))
    derived = per_batch(ing, steps, cols, warnings)
    strides = sorted(map(sub, islice(steps, 1, min(n, 2001)), steps[: min(n, 2001) - 1]))
    stride = _quantile([s for s in strides if s > 0], 0.5) if any(s > 0 for s in strides) else 1.0
    tol = args.tolerance if args.tolerance is not None else max(5.0, 2 * stride)
    # A log shorter than a few windows would be judged against its own first learning
    # phase: use a quarter of the log (at least 50 rows) as the window instead.
    # (the preset record then says window < preset_window)
    preset["window"] = min(preset["window"], max(50, n // 4))
    send(
        "source",
        path=os.path.abspath(path),
        chosen_from=chosen,
        format=fmt,
        dialect=dialect_of(fmt, ing),
        lines=nlines,
        rows=n,
        skipped=ing.skipped,
        bad_lines=ing.bad,
        step_key=ing.step_key,
        columns=dict(
            ing.metrics + ing.meta + ([("bucket", ing.bucket_key)] if ing.bucket_key else [])
        ),
        metrics=[label for label, _ in ing.metrics],
        first_step=steps[0],
        last_step=steps[-1],
        stride=stride,
        tolerance=tol,
    )
    send(
        "preset",
        name=args.preset,
        window=preset["window"],
        preset_window=PRESETS[args.preset]["window"],
        sigma=preset["sigma"],
        ratio=preset["ratio"],
        cliff_sigma=CLIFF_SIGMA,
        cliff_drop=CLIFF_DROP,
        rule=preset["rule"],
    )
    incidents = []
    compact = {}
    for label, key in ing.metrics:
        col = cols[label]
        direction = "none" if label == "lr" else ("down" if "acc" in label.lower() else "up")
        total = sum(col)
        rows = None
        nonfinite = []
        if (
            not math.isfinite(total)
            or max(col, default=0.0) > FMAX
            or min(col, default=0.0) < -FMAX
        ):
            rows = [i for i, v in enumerate(col) if -FMAX <= v <= FMAX]
            bad = [i for i, v in enumerate(col) if not -FMAX <= v <= FMAX and not _is_missing(v)]
            vals = array("d", (col[i] for i in rows))
            if len(rows) == n:
                rows = None
            for i in bad:
                if nonfinite and nonfinite[-1]["last"] == i - 1:
                    nonfinite[-1]["last"] = i
                    nonfinite[-1]["flagged"] += 1
                    continue
                nonfinite.append({"first": i, "last": i, "flagged": 1, "value": col[i]})
        else:
            vals = col
        compact[label] = (vals, rows)
        found, flagged = detect(label, vals, rows, steps, direction, preset)
        for nf in nonfinite:
            found.append(
                {
                    "metric": label,
                    "kind": "nonfinite",
                    "row": nf["first"],
                    "idx": None,
                    "end_idx": None,
                    "step": steps[nf["first"]],
                    "onset_step": steps[nf["first"]],
                    "peak_step": steps[nf["first"]],
                    "value": nf["value"],
                    "baseline": None,
                    "scale": None,
                    "score": None,
                    "recovery_steps": None,
                    "flagged": nf["flagged"],
                }
            )
        incidents.extend(found)
        send(
            "metric",
            label=label,
            key=key,
            direction=direction,
            n=len(vals),
            flagged=flagged,
            spike_share=(flagged / len(vals)) if len(vals) else 0.0,
            nonfinite=sum(nf["flagged"] for nf in nonfinite),
            median=_median(vals[-min(len(vals), 10000) :]) if len(vals) else None,
        )
    # events
    events = find_events(ing, steps, cols, args, extra, warnings)
    ev_steps = [e[1] for e in events]
    counts = Counter(e[0] for e in events)
    sent = Counter()
    for e in events:
        sent[e[0]] += 1
        if sent[e[0]] <= MAX_EVENTS:
            send("event", kind=e[0], step=e[1], source=e[2], detail=e[3])
    # batch composition on the loss (or the first upward metric)
    main_label = next((lab for lab, _ in ing.metrics if lab == "loss"), None)
    if main_label is None:
        main_label = next((lab for lab, _ in ing.metrics if lab not in ("lr",)), None)
    comp = {}
    if main_label is not None:
        vals, rows = compact[main_label]
        comp = composition(main_label, vals, rows, steps, incidents, ing, cols, n, derived)
    codes, names = comp.get("codes", (None, None))
    if codes is None:
        key, codes, names = bucket_column(ing, cols, n)
    # spikes: nearest event, bucket and run position at the onset
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
    listed = incidents
    if len(listed) > MAX_SPIKES:
        listed = sorted(
            listed, key=lambda i: -(i["score"] if i["score"] is not None else math.inf)
        )[:MAX_SPIKES]
        listed.sort(key=lambda i: (i["step"], i["metric"]))
        warnings.append(
            "%d spikes found; the %d with the highest score are listed"
            % (len(incidents), MAX_SPIKES)
        )
    for inc in listed:
        rec = dict((k, v) for k, v in inc.items() if k not in ("row", "idx", "peak_idx", "end_idx"))
        send("spike", **rec)
    lo_s, hi_s = min(steps), max(steps)
    for c in correlate(incidents, events, tol, lo_s, hi_s):
        send("correlation", **c)
    if "distribution" in comp:
        send("distribution", **comp["distribution"])
    if comp.get("periodicity"):
        send("periodicity", **comp["periodicity"])
    if "composition" in comp:
        send("composition", **comp["composition"])
    if "histogram" in comp:
        send("histogram", **comp["histogram"])
    if args.points > 0:
        for label, _ in ing.metrics:
            vals, rows = compact[label]
            mine = [i for i in incidents if i["metric"] == label and i["idx"] is not None]
            keep = [i["idx"] for i in mine] + [i["peak_idx"] for i in mine]
            keep += [i["peak_idx"] + 1 for i in mine]
            idx = decimate(vals, args.points, keep)
            send(
                "series",
                metric=label,
                steps=[steps[rows[i] if rows is not None else i] for i in idx],
                values=[vals[i] for i in idx],
            )
    for w in warnings:
        send("warning", message=w)
    findings = []
    if any(i["kind"] == "spike" for i in incidents):
        findings.append("spikes")
    if any(i["kind"] == "cliff" for i in incidents):
        findings.append("cliffs")
    if any(i["kind"] == "nonfinite" for i in incidents):
        findings.append("nonfinite")
    if comp.get("composition", {}).get("finding"):
        findings.append("batch-composition")
    code = EXIT_FINDINGS if findings else EXIT_OK
    return conclude(code, rows=n, spikes=len(incidents), events=dict(counts), findings=findings)
