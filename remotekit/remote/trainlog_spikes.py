"""Spike and cliff detection for ``trainlog.py``: a robust rolling baseline (median and
MAD over a window, kept as sorted block sketches), the preset's rule, and how long a metric
took to get back.
"""

from __future__ import annotations

import math
from itertools import chain
from operator import mul

from trainlog_base import (
    CLIFF_DROP,
    CLIFF_SIGMA,
    RECOVER_SIGMA,
    SKETCH,
    _median,
    _quantile,
    _robust_sigma,
)

# --------------------------------------------------------------------------------------------
# spikes and cliffs


def _window_stats(pool):
    """Baseline of a sorted sample: (median, sigma, 2nd percentile, max).

    sigma is the larger of IQR / 1.349 and the standard deviation of the values between the
    1st and 99th percentile: robust to the few spike values, yet not fooled into a tiny sigma
    when the values form several modes (a frequent bucket with a higher loss is no spike).
    """
    m = len(pool)
    med = _quantile(pool, 0.5)
    sig = _robust_sigma(pool)
    cut = m // 100
    core = pool[cut : m - cut] if m - 2 * cut >= 3 else pool
    mean = sum(core) / len(core)
    var = sum(map(mul, core, core)) / len(core) - mean * mean
    if var > 0:
        sig = max(sig, math.sqrt(var))
    return med, sig, _quantile(pool, 0.02), pool[-1]


def _sketch(sorted_vals):
    m = len(sorted_vals)
    if m <= SKETCH:
        return sorted_vals
    return [sorted_vals[(i * (m - 1)) // (SKETCH - 1)] for i in range(SKETCH)]


def _recovery(vals, j, thr, up, cap, onset):
    """First index after ``j`` where the metric is back at its baseline: 3 values in a row
    within ``thr``, or fewer when the next one beyond ``onset`` starts a new incident (a
    return to baseline ends an incident: a blip and a later spike are two)."""
    n = len(vals)
    end = min(n, j + 1 + cap)
    t = j + 1
    while t < end:
        w = vals[t : t + 3]
        for a, v in enumerate(w):
            if (v > onset) if up else (v < onset):
                w = w[:a]
                break
        if w and ((max(w) <= thr) if up else (min(w) >= thr)):
            return t
        t += 1
    return None


TREND_BLOCK = 8  # values per baseline refresh: the level is the median of the last 2 blocks
TREND_REL = 0.10  # and at least 10% above the level: noise-free (rounded) logs need a size
SHIFT_AFTER = 24  # not back after this many values: a level shift (a schedule step), no spike
EARLY = 5  # fewer values before it: only a doubling that comes back is a spike


def detect_trend(label, vals, rows, steps, direction, preset):
    """Spikes (``up``) or cliffs (``down``) against a baseline that follows the trend.

    The level of each block of :data:`TREND_BLOCK` values is the median of the 16 clean
    values before it (a falling loss or a warm-up moves it along); the scale is the robust
    sigma of the step-to-step differences of the last ``window`` clean values, over sqrt 2
    (noise, not trend). A value more than ``sigma`` scales and :data:`TREND_REL` of the level
    beyond it starts an incident that lasts until the metric is back; one that does not come
    back within :data:`SHIFT_AFTER` values is a level shift and flags nothing. From the first
    values on: with fewer than :data:`EARLY` before it, twice the level is the rule."""
    n = len(vals)
    if n < 2 or direction == "none":
        return [], 0
    up = direction == "up"
    sign = 1.0 if up else -1.0
    z, window = preset["sigma"], preset["window"]
    clean = [vals[0]]  # values outside any incident, the latest last
    incidents, flagged = [], 0
    scale, fresh = 0.0, 0  # the noise scale, and the clean values it has not seen yet
    i = 1
    while i < n:
        level = _median(clean[-2 * TREND_BLOCK :])
        if len(clean) >= EARLY:
            if fresh >= window // 4 or len(clean) <= window:  # refreshed every window/4 values
                recent = clean[-window:]
                diffs = sorted(abs(b - a) for a, b in zip(recent, recent[1:]))
                # the larger of the step-to-step noise and the spread of the values: a loss
                # that moves between modes (homogeneous batches) is wide, not spiking
                scale = max(
                    _quantile(diffs, 0.5) * 1.4826 / math.sqrt(2), _robust_sigma(sorted(recent))
                )
                fresh = 0
            scale = max(scale, abs(level) * 1e-6, 1e-12)
            margin = max(z * scale, TREND_REL * abs(level))
        else:
            scale = max(abs(level), 1e-12)
            margin = scale  # twice the level (a loss near 0 needs some size too)
        end = min(n, i + TREND_BLOCK)
        top = level + sign * margin
        j = i
        while j < end:
            v = vals[j]
            if (v > top) if up else (v < top):
                back_thr = level + sign * max(margin / 2, RECOVER_SIGMA * scale)
                back = _recovery(vals, j, back_thr, up, SHIFT_AFTER, top)
                if back is not None:
                    inc = _incident(
                        label, vals, rows, steps, j, back, back, up, (level, scale, None)
                    )
                    inc["flagged"] = sum(1 for t in vals[j:back] if sign * (t - top) > 0)
                    incidents.append(inc)
                    flagged += inc["flagged"]
                    j = back
                    break
                # not back: a new level (or the log ends up there), no spike
            clean.append(v)
            fresh += 1
            j += 1
        i = j
        if len(clean) > 4 * window:
            del clean[: len(clean) - 2 * window]
    return incidents, flagged


def detect(label, vals, rows, steps, direction, preset):
    """Spikes (``up``) or cliffs (``down``) of one metric: ``(incidents, flagged)``.

    The baseline of each value is the median and sigma of the preceding ``window`` values,
    refreshed every ``window // 8`` values from per-block quantile sketches (at most 33
    values each, exact for small blocks). Values inside an incident (onset to recovery)
    never enter a baseline, as OLMo-core skips a spiking step. One incident per onset: the
    flagged values until the metric is back (3 values in a row within 3 sigma) belong to it.
    """
    if preset.get("trend"):
        return detect_trend(label, vals, rows, steps, direction, preset)
    n = len(vals)
    if n == 0 or direction == "none":
        return [], 0
    window = preset["window"]
    b = max(4, window // 8)
    nwin = max(1, window // b)
    minp = min(window, max(20, window // 10))
    ratio = preset["ratio"] if direction == "up" else None
    up = direction == "up"
    cap = 20 * window
    sketches = []  # per block: (sorted sketch, number of values it stands for)
    incidents = []
    flagged = 0
    stop = -1  # end (exclusive) of the current incident
    spans = []  # (start, stop) of every incident, to keep them out of the baselines
    for k in range(-(-n // b)):
        lo = k * b
        seg = vals[lo : lo + b]
        prev = [sk for sk in sketches[max(0, k - nwin) : k] if sk[1]]
        stats = None
        if sum(sk[1] for sk in prev) >= minp:
            pool = sorted(chain.from_iterable(sk[0] for sk in prev))
            stats = _window_stats(pool)
        if stats is not None:
            med, sig, q02, wmax = stats
            if up:
                thr = ratio * wmax if ratio else med + preset["sigma"] * sig
                hit = (ratio is None or wmax > 0) and max(seg) > thr
            else:
                thr = med - CLIFF_SIGMA * sig
                if q02 > 0:
                    thr = min(thr, q02 * (1 - CLIFF_DROP))
                hit = min(seg) < thr
            if hit:
                idx = [lo + j for j, v in enumerate(seg) if (v > thr if up else v < thr)]
                for j in idx:
                    flagged += 1
                    if j < stop:
                        incidents[-1]["flagged"] += 1
                        continue
                    back = med + RECOVER_SIGMA * sig if up else med - RECOVER_SIGMA * sig
                    end = _recovery(vals, j, back, up, cap, thr)
                    stop = end if end is not None else min(n, j + 1 + cap)
                    spans.append((j, stop))
                    base = (med, wmax if ratio else sig, wmax if ratio else None)
                    incidents.append(_incident(label, vals, rows, steps, j, end, stop, up, base))
        clean = _clean_block(seg, lo, spans)
        sketches.append((_sketch(clean), len(clean)))
    return incidents, flagged


def _incident(label, vals, rows, steps, j, end, stop, up, base):
    """The incident that begins at value ``j`` and lasts until ``stop`` (``end``: where the
    metric was back, None if never). ``base``: ``(median, scale, running max or None)``;
    the score is sigmas from the median, or x the running max (megatron's ratio rule)."""
    med, scale, wmax = base
    part = vals[j:stop]
    peak = max(part) if up else min(part)
    pj = j + part.index(peak)
    if wmax is not None:
        score = peak / wmax
    else:
        score = (peak - med) / scale if up else (med - peak) / scale
    row = rows[j] if rows is not None else j
    prow = rows[pj] if rows is not None else pj
    recovery = None
    if end is not None:
        recovery = steps[rows[end] if rows is not None else end] - steps[row]
    return {
        "metric": label,
        "kind": "spike" if up else "cliff",
        "row": prow,
        "idx": j,
        "peak_idx": pj,
        "end_idx": stop,
        # the peak's own step and value; the onset is kept beside it
        "step": steps[prow],
        "onset_step": steps[row],
        "peak_step": steps[prow],
        "value": peak,
        "baseline": med,
        "scale": scale,
        "score": score,
        "recovery_steps": recovery,
        "flagged": 1,
    }


def _clean_block(seg, lo, spans):
    """The block's values (it starts at value ``lo``) without those of any incident, sorted."""
    hi = lo + len(seg)
    inside = [sp for sp in spans[-8:] if sp[0] < hi and sp[1] > lo]
    if not inside:
        return sorted(seg)
    return sorted(v for i, v in enumerate(seg, lo) if not any(a <= i < z for a, z in inside))
