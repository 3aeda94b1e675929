"""Step repair for ``trainlog.py``: rows merged per step, resumed runs and per-epoch
counters made one continuous series, glitched steps dropped, and running totals (TRL's
``num_tokens``) turned into per-batch values.
"""

from __future__ import annotations

import math
from array import array
from itertools import compress, islice
from operator import ge, gt, le, lt, sub

from .base import MAX_EVENTS, MISSING, fmt_number, is_missing, quantile


def reconcile_steps(ing, steps, cols, warnings):
    """One row per step, in order. Rows at the same step (sparse loggers: one metric per
    row) are merged; a step counter that goes back (a resumed run appended to the same log)
    is a resume: the later run's rows replace the earlier rows at those steps, never mixed.
    Returns ``(steps, cols, n)``; resumes become events. Lines of several writers
    interleaved (ranks sharing one log) are no resumes: see :func:`merge_interleaved`."""
    n = len(steps)
    if n < 2 or not any(map(ge, steps, islice(steps, 1, None))):
        return steps, cols, n
    steps = per_epoch_steps(ing, steps, cols, warnings)
    if all(map(lt, steps, islice(steps, 1, None))):
        return steps, cols, n
    merged = merge_interleaved(ing, steps, cols, warnings)
    if merged is not None:
        return merged
    steps, cols, n = run_part(ing, steps, cols, warnings)
    if n < 2 or all(map(lt, steps, islice(steps, 1, None))):
        return steps, cols, n
    names = list(cols)
    arrs = [cols[k] for k in names]
    keep, twice = _merge_same_steps(steps, arrs)
    low = math.inf
    dropped = 0
    for i in range(n - 1, -1, -1):
        if not keep[i]:
            continue
        if steps[i] >= low:
            keep[i] = 0
            dropped += 1
        else:
            low = steps[i]
    backs = [i for i in range(1, n) if steps[i] < steps[i - 1]]
    for i in backs[:MAX_EVENTS]:
        j = i - 1
        ing.events.append(
            (
                "resume",
                steps[i],
                "steps",
                "step counter went back from %s to %s at row %d (a resumed run appended to "
                "the same log)" % (fmt_number(steps[j]), fmt_number(steps[i]), i + 1),
            )
        )
    if backs:
        warnings.append(
            "the step counter goes back %d time(s) (a resumed run appended to the same log): "
            "the later rows are used, %d earlier rows at the same steps are set aside"
            % (len(backs), dropped)
        )
    if twice:
        warnings.append("%d steps were logged twice: the later value is used" % twice)
    if len(ing.codes) == n:
        ing.codes = array("i", compress(ing.codes, keep))
    steps = array("d", compress(steps, keep))
    cols = {k: array("d", compress(c, keep)) for k, c in zip(names, arrs)}
    return steps, cols, len(steps)


def run_part(ing, steps, cols, warnings):
    """``(steps, cols, n)`` of one run of a file that holds several: where the counter falls
    to its first value or below and climbs again, a second run (or a restart from scratch)
    was appended; each is said, and the part ``ing.run_part`` names is kept (1 the first,
    -1 the last; None: the last). A counter that falls part of the way is a resume
    (:func:`reconcile_steps`)."""
    n = len(steps)
    cuts = [i for i in range(1, n - 1) if steps[i] < steps[i - 1] and steps[i] <= steps[0]]
    cuts = [i for i in cuts if steps[i + 1] > steps[i]]  # it climbs again
    if not cuts:
        return steps, cols, n
    bounds = [0, *cuts, n]
    goes_on = []
    for p, i in enumerate(cuts, 1):
        fell = "the step counter falls from %s to %s at row %d and climbs again" % (
            fmt_number(steps[i - 1]),
            fmt_number(steps[i]),
            i + 1,
        )
        why = continues(ing, cols, bounds[p - 1], i, bounds[p + 1])
        goes_on.append(why is not None)
        if why is None:
            warnings.append(
                fell + ": a second run (or a restart from scratch) appended to the same file"
            )
        else:
            warnings.append(
                "run part %d continues run part %d from step %s (%s, %s): the trained model "
                "trained again, not a run from scratch"
                % (p + 1, p, fmt_number(steps[i - 1]), fell, why)
            )
    k, part = one_part(ing, steps, cols, bounds, warnings)
    if k > 1:  # part 1 keeps what its own first rows said (:func:`.choose.continued_start`)
        ing.continues = goes_on[k - 2]
    return part


def one_part(ing, steps, cols, bounds, warnings):
    """``(k, (steps, cols, n))``: part ``k`` of the rows cut at ``bounds``, the one
    ``ing.run_part`` names (1 the first, -1 the last; None, or one that does not exist: the
    last), said."""
    parts = len(bounds) - 1
    want = getattr(ing, "run_part", None)
    k = parts if not want else want if want > 0 else parts + 1 + want
    if not 1 <= k <= parts:
        warnings.append("run part %s does not exist: the last is analysed" % want)
        k = parts
    a, b = bounds[k - 1], bounds[k]
    warnings.append(
        "run part %d of %d analysed (rows %d-%d; --run-part chooses another)" % (k, parts, a + 1, b)
    )
    if len(ing.codes) == len(steps):
        ing.codes = ing.codes[a:b]
    return k, (steps[a:b], {name: c[a:b] for name, c in cols.items()}, b - a)


def epoch_runs(ing, steps, cols, warnings):
    """``(steps, cols, n)`` of one run of a log whose rows have no step but state their epoch
    (per-epoch JSON lines, a CSV of epochs): where the epoch falls, a second run (or a restart
    from scratch) was appended; where it comes again with other values on rows that each hold
    a held-out loss (once an epoch, an evaluation each), the epoch was run again: a restart.
    Each is said, and the part ``ing.run_part`` names is kept (None: the last). Rows of
    batches that state only their epoch (the epoch repeats, no held-out loss each) are one
    run."""
    ep = cols.get("epoch")
    n = len(steps)
    if ep is None or n < 2:
        return steps, cols, n
    held = cols.get("val_loss")
    per_epoch = held is not None and not any(map(is_missing, held))
    named = [c for k, c in cols.items() if k != "epoch"]
    cuts, said = [], []
    for i in range(1, n):
        a, b = ep[i - 1], ep[i]
        if is_missing(a) or is_missing(b) or b > a:
            continue
        if b < a:
            said.append(
                "the epoch falls from %s to %s at row %d: a second run (or a restart from "
                "scratch) appended to the same file" % (fmt_number(a), fmt_number(b), i + 1)
            )
        elif per_epoch and any(c[i] != c[i - 1] for c in named):
            said.append(
                "row %d: epoch %s logged again with other values: a restart"
                % (i + 1, fmt_number(b))
            )
        else:
            continue
        cuts.append(i)
    if not cuts:
        return steps, cols, n
    warnings.extend(said)
    return one_part(ing, steps, cols, [0, *cuts, n], warnings)[1]


CONTINUE_HEAD = 5  # values at each end of a part compared


def continues(ing, cols, a, i, b):
    """Why the part of rows ``i:b`` continues the part ``a:i`` (its step counter starts
    again, the run does not), or None: an update counter that goes on across the cut (it
    climbs where the step key fell), or a loss that starts where the part before it ended,
    far from where that part started (it fell by a tenth at least, and the new start is
    within a quarter of that fall of its end)."""
    upd = cols.get("updates")
    if upd is not None and upd[i] == upd[i] and upd[i - 1] == upd[i - 1] and upd[i] > upd[i - 1]:
        return "%r goes on from %s to %s" % (
            dict(ing.meta).get("updates"),
            fmt_number(upd[i - 1]),
            fmt_number(upd[i]),
        )
    loss = cols.get("loss")
    if loss is None:
        return None
    before = [v for v in loss[a:i] if v == v and not is_missing(v) and math.isfinite(v)]
    after = [v for v in loss[i:b] if v == v and not is_missing(v) and math.isfinite(v)]
    if min(len(before), len(after)) < 2 * CONTINUE_HEAD:
        return None
    first = _mid(before[:CONTINUE_HEAD])
    last = _mid(before[-CONTINUE_HEAD:])
    again = _mid(after[:CONTINUE_HEAD])
    fall = first - last
    if fall <= 0.1 * abs(first) or abs(again - last) > 0.25 * fall:
        return None
    return "its loss starts at %s, where the part before ended (%s), not where it started (%s)" % (
        fmt_number(round(again, 4)),
        fmt_number(round(last, 4)),
        fmt_number(round(first, 4)),
    )


def _mid(vals):
    return quantile(sorted(vals), 0.5)


def _merge_same_steps(steps, arrs):
    """Rows at the same step as the next row merged into it (its missing values filled
    from this one) and marked as not kept: ``(keep, steps logged twice)``, counting the
    steps where a column has two different values (an HF eval row repeats the train row's
    step and epoch: nothing is lost there)."""
    n = len(steps)
    keep = bytearray(b"\x01") * n
    twice = 0
    for i in range(n - 1):
        if steps[i] != steps[i + 1]:
            continue
        both = False
        for c in arrs:
            a, b = c[i], c[i + 1]
            if is_missing(b):
                c[i + 1] = a
            elif not is_missing(a) and a != b:
                both = True
        twice += both
        keep[i] = 0
    return keep, twice


def per_epoch_steps(ing, steps, cols, warnings):
    """``steps`` made continuous when the counter is a per-epoch one (0..499, 0..499, ...),
    else ``steps`` as they are. Such a counter restarts at its first value, again and again
    after the same span (or at each new value of an ``epoch`` field): no resume, and no
    earlier epoch's rows to set aside. Each restart becomes an epoch event."""
    n = len(steps)
    fwd = sorted(d for d in map(sub, islice(steps, 1, None), steps) if d > 0)
    if not fwd:
        return steps
    stride = quantile(fwd, 0.5)
    backs = [i for i in range(1, n) if steps[i] < steps[i - 1]]
    resets = [i for i in backs if steps[i] <= steps[0] + stride]
    if not resets or len(resets) != len(backs):
        return steps
    bounds = [0, *resets, n]
    spans = [steps[b - 1] - steps[a] for a, b in zip(bounds, bounds[1:])]
    full = spans[:-1]  # the last epoch may be cut short
    same = max(full) - min(full) <= 0.1 * max(full) and spans[-1] <= 1.1 * max(full)
    ep = cols.get("epoch")
    by_field = ep is not None and all(
        not is_missing(ep[i]) and not is_missing(ep[i - 1]) and ep[i] > ep[i - 1] for i in resets
    )
    if not (by_field or (same and len(resets) >= 2)):
        return steps
    period = max(full) + stride
    out = array("d", steps)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for i in range(a, b):
            out[i] = steps[i] + k * period
        if k:
            ing.events.append(
                (
                    "epoch",
                    out[a],
                    "steps",
                    "the step counter restarted at %s" % fmt_number(steps[a]),
                )
            )
    warnings.append(
        "the step counter restarts at %s %d times (a per-epoch count, %s steps an epoch): "
        "made continuous, not taken as resumes"
        % (fmt_number(steps[0]), len(resets), fmt_number(period))
    )
    return out


def merge_interleaved(ing, steps, cols, warnings):
    """``(steps, cols, n)`` when the log holds several writers' lines interleaved (every
    rank printing its own loss, a step's lines out of order by a step or two), else None.

    Such a log goes back a little, often: many times, by a few strides at most; a resumed
    run goes back rarely, to a checkpoint. Its rows are put in step order and each step's
    values averaged over its lines (as an all-reduced loss would be); a NaN on any line
    stays a NaN."""
    n = len(steps)
    backs = [steps[i - 1] - steps[i] for i in range(1, n) if steps[i] < steps[i - 1]]
    fwd = sorted(d for d in map(sub, islice(steps, 1, None), steps) if d > 0)
    if not fwd:
        return None
    stride = quantile(fwd, 0.5)
    # the same metric again at the same step, on most rows: every rank printing in turn
    # (a sparse logger's rows at one step carry different metrics, and are merged instead)
    again = 0
    first = cols[next(iter(cols))] if cols else ()
    for i in range(n - 1):
        if steps[i] == steps[i + 1] and not (is_missing(first[i]) or is_missing(first[i + 1])):
            again += 1
    shuffled = len(backs) >= max(3, n // 100) and quantile(sorted(backs), 0.5) <= 4 * stride
    if not shuffled and again < max(3, n // 4):
        return None
    order = sorted(range(n), key=steps.__getitem__)
    names = list(cols)
    out_steps = array("d")
    out = {k: array("d") for k in names}
    codes = ing.codes if len(ing.codes) == n else None
    out_codes = array("i")
    most = 1
    a = 0
    while a < n:
        z = a + 1
        while z < n and steps[order[z]] == steps[order[a]]:
            z += 1
        group = order[a:z]
        most = max(most, z - a)
        out_steps.append(steps[group[0]])
        for k in names:
            vals = [cols[k][i] for i in group if not is_missing(cols[k][i])]
            out[k].append(sum(vals) / len(vals) if vals else MISSING)
        if codes is not None:
            out_codes.append(codes[group[0]])
        a = z
    if codes is not None:
        ing.codes = out_codes
    warnings.append(
        "lines of several writers are interleaved (up to %d lines a step; the step counter "
        "went back %d times%s): taken as ranks sharing one log, not as resumes; each step's "
        "values are the mean of its lines (log from rank 0 only to see one rank's own)"
        % (most, len(backs), ", by %s steps at most" % fmt_number(max(backs)) if backs else "")
    )
    return out_steps, out, len(out_steps)


def _glitches(steps, ok):
    """Rows (of the indices ``ok``) whose step is a glitch, not a resume: up to 3 rows far
    behind (> 4 strides) after which the log goes on from where it was (a mis-parsed step
    between 100 and 101), or one row far ahead of two neighbours in line. A resume goes on
    from where it went back to. Many such rows are interleaved writers instead (see
    :func:`merge_interleaved`)."""
    fwd = sorted(steps[b] - steps[a] for a, b in zip(ok, ok[1:]) if steps[b] > steps[a])
    if not fwd:
        return []
    far = 4 * quantile(fwd, 0.5)
    odd = []
    for j in range(1, len(ok) - 1):
        prev, cur = steps[ok[j - 1]], steps[ok[j]]
        if odd and odd[-1] >= ok[j]:
            continue  # inside a run already set aside
        if cur < prev - far:
            run = [ok[j]]
            for k in range(j + 1, min(len(ok), j + 4)):
                if steps[ok[k]] >= prev:
                    odd.extend(run)
                    break
                run.append(ok[k])
        elif prev <= steps[ok[j + 1]] < cur - far:
            odd.append(ok[j])
    return odd


def drop_bad_steps(ing, steps, cols, warnings):
    """Rows whose step is not a step (negative, non-finite, beyond 2**53: a corrupt or
    mis-parsed line) are set aside, with a warning, before they bend the step axis (one
    step of 1e30 would make every spike "at" an event by chance alone)."""
    n = len(steps)
    keep = bytearray(0 <= s <= 2.0**53 for s in steps)
    bad = n - sum(keep)
    if bad:
        first = next(i for i in range(n) if not keep[i])
        warnings.append(
            "%d rows with an impossible step (negative, non-finite or beyond 2**53; the "
            "first: %s at row %d) set aside" % (bad, fmt_number(steps[first]), first + 1)
        )
    odd = _glitches(steps, [i for i in range(n) if keep[i]])
    if odd and len(odd) <= max(3, n // 200):
        for i in odd:
            keep[i] = 0
        warnings.append(
            "%d rows whose step is out of line with the rows around it set aside (the first: "
            "step %s at row %d)" % (len(odd), fmt_number(steps[odd[0]]), odd[0] + 1)
        )
    elif not bad:
        return steps, cols
    if len(ing.codes) == n:
        ing.codes = array("i", compress(ing.codes, keep))
    return array("d", compress(steps, keep)), {
        k: array("d", compress(c, keep)) for k, c in cols.items()
    }


COUNTER_META = ("tokens",)  # meta columns that some trainers log as running totals


def is_running_total(col):
    """A column that counts what was seen so far (tokens, samples, flos): it never goes
    down and grows at (almost) every row, also when a resumed run starts it high. A
    per-batch size in a length-sorted order never goes down either, but repeats its
    values (batches of one bucket), so it grows at few rows."""
    fin = [v for v in col if v == v]
    if len(fin) < 3 or not all(map(le, fin, islice(fin, 1, None))):
        return False
    grows = sum(map(gt, islice(fin, 1, None), fin))
    return grows >= 0.9 * (len(fin) - 1) and fin[-1] > fin[0]


def per_batch(ing, steps, cols, warnings):
    """A running total (TRL's num_tokens: 61440, 122880, ...) is not a batch size: use its
    differences per step instead, and say so. Returns ``{name: words}`` for each column
    so derived (the composition record carries the words)."""
    derived = {}
    for name in COUNTER_META:
        col = cols.get(name)
        if col is None or len(col) < 3:
            continue
        if not is_running_total(col):
            continue
        out = array("d", [math.nan])
        for i in range(1, len(col)):
            ds = steps[i] - steps[i - 1]
            out.append((col[i] - col[i - 1]) / ds if ds > 0 else math.nan)
        cols[name] = out
        key = dict(ing.meta).get(name)
        warnings.append(
            "%r is a running total (it never decreases): per-batch %s are taken from its "
            "differences per step, not its values" % (key, name)
        )
        derived[name] = "%s per step, from the differences of the running total %r" % (
            name,
            key,
        )
    return derived
