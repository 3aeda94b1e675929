"""Spike and cliff detection for ``trainlog.py``, by the preset's rule: a line that follows
the series (``trend``, the default: :func:`detect_trend`), the published rules' robust
rolling baseline (median and sigma over a window, kept as sorted block sketches:
:func:`detect`) or ZClip's EMA z-score (:func:`detect_zclip`); each incident with how long
the metric took to get back and the rule that flagged it.
"""

from __future__ import annotations

import math
from itertools import chain, islice
from operator import mul, sub

from .base import (
    CLIFF_DROP,
    CLIFF_SIGMA,
    RECOVER_SIGMA,
    SKETCH,
    quantile,
    robust_sigma,
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
    med = quantile(pool, 0.5)
    sig = robust_sigma(pool)
    cut = m // 100
    core = pool[cut : m - cut] if m - 2 * cut >= 3 else pool
    mean = sum(core) / len(core)
    var = sum(map(mul, core, core)) / len(core) - mean * mean
    if var > 0:
        sig = max(sig, math.sqrt(var))
    return med, sig, quantile(pool, 0.02), pool[-1]


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


TREND_BLOCK = 8  # values per refresh of the trend line (the level: median of the last 2 blocks)
TREND_REL = 0.05  # and at least 5% off the line: a noise-free (rounded) log needs a size too
SHIFT_AFTER = 24  # not back after this many values (or half the window): a level shift
EARLY = 5  # fewer values before it: only a doubling is a spike
BACK_SIGMA = 2.0  # back: 3 values in a row within 2 scales (a quarter of the margin) of the line
BLOWUP = 2.0  # a rise to twice the line (a fall to half of it) that stays is still flagged
# While the window still holds the log's first values (a short log: all of them), its later
# half alone sets the scale too, the smaller one counting: the learning phase (a grad norm
# decaying from 4.5 to 0.5 in 20 steps) is no noise, and it made a 5x step of a grad norm
# settled at 0.5 (2% noise) look like one. At least this many values in that half.
LATER = 12
# Per-batch noise with heavy tails (a near-converged classifier's batch losses: most near
# the level, some batches 10x it) is no spike however far it is in sigmas: a value must
# also be beyond TAIL times the largest excursion the window's own values made off their
# neighbours' mean (:func:`_tail`). Gaussian noise's largest in a window of 100 is ~3
# sigma (a median; sqrt(1.5) sigma each): 1.5 times it is below z's 7 sigma, and the rule
# is z's then. (Twice it halved the false spikes of lognormal noise, but also took the two
# largest values of a real RL loss, 63 and 70 against a median of 1.8, for noise.)
TAIL = 1.5
TAIL_MIN = 2 * TREND_BLOCK  # values a window needs before its own reach is judged
# A loss whose batches scatter by factors (a converged classifier's: most near 0.02, one in
# a hundred 5-7x that, a lone one 10-20x) is noise in its logarithm: a lone value (one
# batch) must also be beyond LOG_Z robust sigmas of the log values before and after it
# (:func:`_lone_in_noise`) where those say the noise is multiplicative (:func:`_log_spread`):
# all values positive, and their top decile as wide as a continuous tail's (at least
# LOG_TAIL of the body's spread). Length buckets or other modes have a tight top (the
# highest mode's own small noise): there the rule stays the linear one, and a 13x step over
# buckets 10x apart is still a spike; so is an excursion that lasts. Lognormal noise
# reaches past 3.7 sigma once in ~10,000 values; a batch 60x the level of sigma-0.8 noise
# is at 5.
LOG_Z = 3.7
LOG_TAIL = 1.0 / 3.0


def _trend_line(cv, ci):
    """``(slope, scale)`` of the clean values ``cv`` at value indices ``ci`` (a window).

    The slope is the median of the slopes between consecutive block medians (blocks of
    :data:`TREND_BLOCK`, fewer values in a short window, 4 blocks at least): a step in the
    series (an epoch boundary, an lr drop) moves one or two of them, not the median; no
    steeper than the latest of them (a falling loss slows down: the line must not run
    ahead of it). It is 0 where it is within twice its own standard error of 0 (the block
    slopes of a noisy or multimodal loss scatter widely: a slope read from them would tilt
    the line by chance), or the latest goes the other way.

    The scale is the largest of: the step-to-step noise (the spread of the differences: a
    trend is no noise); the robust spread of the values (:func:`_halves_sigma`, around the
    slope where that is narrower): a loss that moves between modes (homogeneous batches, a
    cycled order) is wide, not spiking; and the standard deviation of the values around
    their block's median, without the extremes (:func:`_block_std`): noise with heavy
    tails (a share of batches far noisier than the rest) is wider than its quartiles say,
    while a ramp or a step in the window (the first epochs) moves the blocks, not the
    values within them."""
    m = len(cv)
    slope, tails = 0.0, 0.0
    size = max(2, min(TREND_BLOCK, m // 4))
    nb = m // size
    if nb >= 4:
        starts = range(m - nb * size, m, size)
        blocks = [sorted(cv[b : b + size]) for b in starts]
        meds = [_mid(x) for x in blocks]
        mids = [(ci[b] + ci[b + size - 1]) / 2.0 for b in starts]
        slopes = [(b - a) / (y - x) for a, b, x, y in zip(meds, meds[1:], mids, mids[1:])]
        slope = _mid(sorted(slopes))
        err = _mid(sorted(abs(s - slope) for s in slopes)) * 1.4826 / math.sqrt(len(slopes))
        if abs(slope) <= 2 * err or slope * slopes[-1] <= 0:
            slope = 0.0
        elif abs(slopes[-1]) < abs(slope):  # a trend that slows down (a falling loss does)
            slope = slopes[-1]
        tails = _block_std(cv[starts[0] :], blocks, meds) * math.sqrt(size / (size - 1.0))
    noise = 0.0
    if m > 2:  # the differences' interquartile range: a trend only shifts them
        diffs = sorted(map(sub, cv[1:], cv[:-1]))
        noise = (quantile(diffs, 0.75) - quantile(diffs, 0.25)) / 1.349 / math.sqrt(2)
    spread = _halves_sigma(cv)
    if slope:
        spread = min(spread, _halves_sigma([v - slope * i for v, i in zip(cv, ci)]))
    return slope, max(noise, spread, tails)


def _halves_sigma(xs):
    """The robust sigma of the narrower half of ``xs``: a step in the window (an epoch
    boundary, a drop after a spike) widens one half only, modes and cycles widen both."""
    h = len(xs) // 2
    if h < 4:
        return robust_sigma(sorted(xs))
    return min(robust_sigma(sorted(xs[:h])), robust_sigma(sorted(xs[h:])))


def _block_std(flat, blocks, meds):
    """The standard deviation of the values of sorted ``blocks`` (``flat``: the same values
    in one list) around their block's median ``meds``, without the lowest and the highest
    of them (sums, no sort). Times sqrt(size / (size - 1)) it is the noise: a block's own
    median took one value's worth."""
    size = len(blocks[0])
    m = len(flat) - 2
    if m < 3:
        return 0.0
    sums = list(map(sum, blocks))
    lo = min(map(sub, [x[0] for x in blocks], meds))
    hi = max(map(sub, [x[-1] for x in blocks], meds))
    s1 = sum(sums) - size * sum(meds) - lo - hi
    s2 = sum(map(mul, flat, flat)) + size * sum(map(mul, meds, meds))
    s2 -= 2 * sum(map(mul, meds, sums)) + lo * lo + hi * hi
    var = s2 / m - (s1 / m) ** 2
    return math.sqrt(var) if var > 0 else 0.0


def _mid(s):
    """The median of a sorted, non-empty list."""
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2.0


class _Line:
    """The baseline of one block of values: through ``level`` (the median of the last 16
    clean values, at their middle index ``at``) with ``slope``, which is followed at most 2
    blocks past the last clean value and then held: a trend read from a window is no
    forecast, and a falling loss slows down. ``margin`` is how far off it a value starts an
    incident; ``scale`` the noise it was judged with, ``z`` in how many of them; ``near``
    how close to it the metric is back."""

    __slots__ = ("at", "bound", "hold", "level", "margin", "near", "scale", "sign", "slope", "z")

    # ``last``: the last 16 clean values, sorted; ``ci``: the clean values' indices

    def __init__(self, ci, last, slope, sign, margin, scale, z, near):
        self.level = _mid(last)
        self.at = (ci[-len(last)] + ci[-1]) / 2.0
        self.slope = slope
        self.hold = ci[-1] + 2 * TREND_BLOCK
        self.bound = last[0] if sign > 0 else last[-1]
        self.sign = sign
        self.margin = margin
        self.scale = scale
        self.z = z
        self.near = near

    def trend(self, t):
        """The line at value index ``t``: where the metric would be without an incident
        (a return to it ends one)."""
        return self.level + self.slope * (min(t, self.hold) - self.at)

    def value(self, t):
        """The line as a spike is judged against it: never beyond the last 16 clean values
        on the spike's side (their minimum for spikes, their maximum for cliffs), so a
        line taken past what the series has shown does not call its values spikes."""
        x = self.trend(t)
        return max(x, self.bound) if self.sign > 0 else min(x, self.bound)

    def off(self, x, t):
        """How far ``x`` at index ``t`` is off the line, toward spikes (or cliffs)."""
        return self.sign * (x - self.value(t))


def detect_trend(label, vals, rows, steps, direction, preset):
    """Spikes (``up``) or cliffs (``down``) against a line that follows the trend.

    Each block of :data:`TREND_BLOCK` values is judged against a :class:`_Line` through the
    median of the 16 clean values before it, with the slope of the last ``window`` clean
    values (a falling loss, a warm-up, a schedule step move it along) and their scale
    (:func:`_trend_line`). A value more than ``sigma`` scales and :data:`TREND_REL` of the
    line beyond it starts an incident (:func:`_trend_incident`). From the first values on:
    with fewer than :data:`EARLY` before it, twice the level is the rule."""
    n = len(vals)
    if n < 2 or direction == "none":
        return [], 0
    sign = 1.0 if direction == "up" else -1.0
    window = preset["window"]
    # a cliff is the usual cliff (CLIFF_SIGMA scales, and down to half the line at least)
    z, rel = (preset["sigma"], TREND_REL) if sign > 0 else (CLIFF_SIGMA, CLIFF_DROP)
    horizon = max(SHIFT_AFTER, window // 2)
    name = preset["name"]
    cv, ci = [vals[0]], [0]  # the clean values (outside any incident) and their indices
    incidents, flagged = [], 0
    slope, scale, fresh = 0.0, 0.0, 0  # fresh: clean values the line has not seen yet
    tail = 0.0  # the window's largest excursion off its blocks' medians (:func:`_tail`)
    # the spread of the window's log values where the noise is multiplicative, else 0
    # (:func:`_log_spread`); None: no multiplicative noise is read (only spikes of a series
    # that is positive throughout)
    positive = sign > 0 and min(vals) > 0
    logs = 0.0 if positive else None
    every = window  # clean values between refreshes of slope and scale
    quiet = 0  # no onset before this index (a blow-up that stayed: its new level settles)
    i = 1
    while i < n:
        # refreshed every window values, and every block while the log is young (its
        # first values, the learning phase, must not set the scale for long); while
        # refreshes change nothing (no slope, the scale within 10%), less and less often
        if len(cv) >= EARLY and (fresh >= every or len(cv) < 2 * window):
            was = scale
            wv, wi = cv[-window:], ci[-window:]
            slope, scale = _trend_line(wv, wi)
            tail = _tail(wv, sign)
            logs = _log_spread(wv, slope, wi)[1] if positive else None
            if wi[0] == 0 and len(wv) >= 2 * LATER:  # the window holds the log's first values
                h = len(wv) // 2
                scale = min(scale, _trend_line(wv[h:], wi[h:])[1])
                tail = min(tail, _tail(wv[h:], sign))
                logs = min(logs, _log_spread(wv[h:], slope, wi[h:])[1]) if positive else None
            steady = not slope and abs(scale - was) <= 0.1 * scale
            every = min(4 * window, 2 * every) if steady else window
            fresh = 0
        # a block at a time; value by value while the line rests on few values
        end = min(n, i + (TREND_BLOCK if len(cv) >= 2 * TREND_BLOCK else 1))
        seg = vals[i:end]
        worst = max(seg) if sign > 0 else min(seg)
        # the line is never below the last 16 clean values (above, for cliffs), nor its
        # margin below z scales: a block within that of them needs no line (most blocks)
        near = len(cv) >= EARLY and scale > 0 and sign * (worst - _extreme(cv, -sign)) <= z * scale
        line = None
        if not near and end > quiet:
            line = _block_line(cv, ci, slope, scale, sign, z, rel, tail)
        if line is None or max(line.off(worst, i), line.off(worst, end - 1)) <= line.margin:
            cv.extend(seg)  # nothing beyond the line (straight within a block): all clean
            ci.extend(range(i, end))
            fresh += end - i
            i = end
            continue
        j = i
        while j < end:
            v = vals[j]
            if j >= quiet and line.off(v, j) > line.margin:
                every = window  # something happened: back to the usual refreshes
                early = len(cv) < EARLY
                inc, back = _trend_incident(label, vals, rows, steps, j, line, horizon, logs, early)
                if inc is not None:
                    inc["rule"] = _trend_rule(name, len(cv), back)
                    incidents.append(inc)
                    flagged += inc["flagged"]
                    if back is not None:  # a spike: its values stay out of the line
                        j = back
                        break
                    quiet = j + horizon  # a blow-up that stays: once, then the new level
                elif back is not None:  # an excursion like what follows: the series, no spike
                    quiet = back
            cv.append(v)
            ci.append(j)
            fresh += 1
            j += 1
        i = j
        if len(cv) > 4 * window:
            del cv[: len(cv) - 2 * window]
            del ci[: len(ci) - 2 * window]
    return incidents, flagged


def _extreme(cv, sign):
    """The largest (``sign`` > 0) or smallest of the last 16 clean values."""
    last = cv[-2 * TREND_BLOCK :]
    return max(last) if sign > 0 else min(last)


def _trend_rule(name, clean, back):
    """Which clause of the trend rule flagged an incident, in words for its record."""
    if clean < EARLY:
        return name + " (first values: 2x the level)"
    if back is None:
        return name + " (2x the line, not back)"
    return name


def _tail(vals, sign, skip=0):
    """How far the series' own noise reaches toward spikes (``sign`` > 0) or cliffs: the
    largest excursion of a value of ``vals`` off the mean of its two neighbours (a smooth
    trend, a decay, cancels there; a lone high value does not); with ``skip``, the next
    largest after that many (a look ahead may hold the next incident: it is no noise). 0
    for fewer than :data:`TAIL_MIN` values."""
    if len(vals) < TAIL_MIN:
        return 0.0
    top = [0.0] * (skip + 1)
    for a, v, b in zip(vals, islice(vals, 1, None), islice(vals, 2, None)):
        e = sign * (v - (a + b) / 2.0)
        if e > top[0]:
            top[0] = e
            top.sort()
    return top[0]


def _log_spread(vals, slope=0.0, at=None):
    """``(level, sigma)`` of the logarithms of ``vals`` (at value indices ``at``, else
    0, 1, ...) where their noise is multiplicative, else ``(0.0, 0.0)``: the values moved
    along the line's ``slope`` (:func:`_trend_line`) to the first one's index (a falling
    loss is no spread; ``level``: their median there), all positive, at least
    :data:`TAIL_MIN` of them, and their top decile as wide as a continuous tail's (from the
    90th to the 99th percentile at least :data:`LOG_TAIL` of what the robust sigma makes it
    in a normal distribution: modes, length buckets, end in a tight top)."""
    if len(vals) < TAIL_MIN:
        return 0.0, 0.0
    if slope:
        at = range(len(vals)) if at is None else at
        vals = [v - slope * (t - at[0]) for v, t in zip(vals, at)]
    s = sorted(vals)
    if s[0] <= 0:
        return 0.0, 0.0
    sig = (_log_quantile(s, 0.75) - _log_quantile(s, 0.25)) / 1.349
    top = (_log_quantile(s, 0.99) - _log_quantile(s, 0.9)) / 1.0448  # the normal's 99%, 90%
    if sig <= 0 or top < LOG_TAIL * sig:
        return 0.0, 0.0
    return _log_quantile(s, 0.5), sig


def _log_quantile(s, q):
    """The ``q`` quantile of the logarithms of the sorted positive values ``s`` (the log is
    monotonic: two logs a quantile, not one a value)."""
    pos = q * (len(s) - 1)
    lo = int(pos)
    a = math.log(s[lo])
    return a + (math.log(s[min(lo + 1, len(s) - 1)]) - a) * (pos - lo)


def _block_line(cv, ci, slope, scale, sign, z, rel, tail=0.0):
    """The :class:`_Line` a block is judged against: ``z`` scales, ``rel`` of the level and
    :data:`TAIL` times ``tail`` (the noise's own reach) off it; with fewer than
    :data:`EARLY` clean values, twice the level (a loss near 0 needs some size too)."""
    last = sorted(cv[-2 * TREND_BLOCK :])
    level = abs(_mid(last))
    if len(cv) < EARLY:
        big = max(level, 1e-12)
        return _Line(ci, last, 0.0, sign, big, big, z, big / 2)
    scale = max(scale, level * 1e-6, 1e-12)
    margin = max(z * scale, rel * level, TAIL * tail)
    return _Line(ci, last, slope, sign, margin, scale, z, max(BACK_SIGMA * scale, margin / 4))


def _trend_incident(label, vals, rows, steps, j, line, horizon, logs=None, early=False):
    """``(incident or None, back)`` for the excursion that begins at value ``j``.

    Back (:func:`_back_at`) within ``horizon`` values: a spike, ``back`` its index. Not
    back: a level shift (a schedule step, ultralytics' close_mosaic), no incident, unless
    it went to :data:`BLOWUP` times the line (half of it, for cliffs): a blow-up is
    flagged, not back; but not from an ``early`` line (fewer than :data:`EARLY` values
    before it): the first values are no level a series can leave, and one that moves
    from them and stays has its level there (a loss of 5.4e30 at its first epoch and
    3.2e31 from its second on). Either must also stand out of what follows (:func:`_stands_out`);
    a lone value that came back, of the multiplicative noise on both sides too
    (:func:`_lone_in_noise`; ``logs``: the spread of the window before, None for a series
    that is not positive throughout). One that does not is ``(None, back)``."""
    stop = min(len(vals), j + 1 + horizon)
    back, off = None, [line.off(vals[j], j)]
    for t in range(j + 1, stop):
        if _back_at(vals, t, line, max(off)):
            back = t
            break
        off.append(line.off(vals[t], t))
    part = range(j, j + len(off))
    top = [t for t, o in zip(part, off) if o > line.margin]
    ref = line.value(j)
    if back is None:
        needed = (BLOWUP - 1) * ref if line.sign > 0 else ref - ref / BLOWUP
        if early or ref <= 0 or max(off) < needed:
            return None, None
        stop = top[-1] + 1
    # against what follows: a spike's return, as long as it lasted; a blow-up's new level
    a, span = (back, max(4 * TREND_BLOCK, back - j)) if back is not None else (j + 1, horizon)
    if not _stands_out(vals, a, max(off), line.z, span, line.sign):
        return None, back
    lone = back is not None and len(top) == 1 and logs is not None
    if lone and _lone_in_noise(vals, j, back, line, logs, horizon):
        return None, back
    up = line.sign > 0
    inc = _incident(label, vals, rows, steps, j, back, back or stop, up, (ref, line.scale, None))
    inc["flagged"] = len(top)
    return inc, back


def _lone_in_noise(vals, j, back, line, logs, horizon):
    """Whether a lone value (one batch beyond the line, back after it) of a series whose
    noise is multiplicative is within :data:`LOG_Z` log sigmas of the level on either
    side: of the line, by the spread ``logs`` of the window before (0: no such noise
    there), or of the values after it, as many as the window (:func:`_log_spread`, along
    their own slope). Per-batch noise is one batch at a time; an incident lasts."""
    if line.level <= 0:
        return False
    peak = math.log(max(vals[j:back]))
    if logs and peak - math.log(line.level) <= LOG_Z * logs:
        return True
    post = vals[back : back + 2 * horizon]
    if len(post) < TAIL_MIN:
        return False
    mid, spread = _log_spread(post, _trend_line(post, range(back, back + len(post)))[0])
    return bool(spread) and peak - mid <= LOG_Z * spread


def _stands_out(vals, a, excess, z, span, sign=1.0):
    """Whether an excursion of ``excess`` off the line is beyond ``z`` scales of the
    ``span`` values from ``a`` on too (as many as it lasted, 4 blocks at least; fewer than
    2 blocks left: it stands): a plot is read against the noise on both sides. A series
    that turns noisy (batches that start to differ) or repeats a cycle has its first highs
    inside what follows; a much longer look would take in the next incident too. Nor
    within :data:`TAIL` times the reach of what follows (:func:`_tail`, toward ``sign``):
    heavy-tailed noise reaches far in sigmas."""
    post = vals[a : a + span]
    if len(post) < 2 * TREND_BLOCK:
        return True
    _, scale = _trend_line(post, range(a, a + len(post)))
    return excess > max(z * scale, TAIL * _tail(post, sign, skip=1))


def _back_at(vals, t, line, peak):
    """Whether the metric is back near the line's trend at value ``t``: 3 values in a row
    within ``line.near`` of it, or 2 when the next one starts a larger
    incident than this one's ``peak`` (a return to the line ends an incident, so a blip and
    a later spike are two; one value alone is noise around a new level, and a dip on the
    way back is still this incident)."""
    near = line.near
    seen = 0
    for k, x in enumerate(vals[t : t + 3]):
        if seen >= 2 and line.off(x, t + k) > peak:
            break
        if line.sign * (x - line.trend(t + k)) > near:
            return False
        seen += 1
    return seen > 0


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
    if preset.get("ema"):
        return detect_zclip(label, vals, rows, steps, direction, preset)
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
                    inc = _incident(label, vals, rows, steps, j, end, stop, up, base)
                    inc["rule"] = preset["name"]
                    incidents.append(inc)
        clean = _clean_block(seg, lo, spans)
        sketches.append((_sketch(clean), len(clean)))
    return incidents, flagged


ZCLIP_EPS = 1e-6  # ZClip's own: z = (x - mean) / (std + eps)


def detect_zclip(label, vals, rows, steps, direction, preset):
    """Spikes (``up``) or cliffs (``down``) by ZClip's rule (Kumar et al. 2025, "ZClip:
    Adaptive Spike Mitigation for LLM Pre-Training", arXiv:2504.02507; the reference code in
    bluorion-com/ZClip). The mean and variance of the first ``window`` values start an
    exponential moving average (``ema`` is its alpha); a value whose z-score against it is
    beyond ``sigma`` is flagged, and enters the average clipped as ZClip's adaptive scaling
    clips it: ``mean + sigma * std / (z / sigma)``. An incident is a run of flagged values;
    the first value not flagged ends it."""
    n, warm = len(vals), preset["window"]
    if n <= warm or direction == "none":
        return [], 0
    sign, thr, alpha = (1.0 if direction == "up" else -1.0), preset["sigma"], preset["ema"]
    mean = sum(vals[:warm]) / warm
    var = sum((x - mean) ** 2 for x in vals[:warm]) / warm
    incidents, flagged, onset, base = [], 0, None, None
    for j in range(warm, n):
        x = vals[j]
        std = math.sqrt(var)
        z = sign * (x - mean) / (std + ZCLIP_EPS)
        if z > thr:
            flagged += 1
            if onset is None:
                onset, base = j, (mean, std + ZCLIP_EPS, None)
            x = mean + sign * thr * std / (z / thr)
        elif onset is not None:
            incidents.append(_zclip_incident(label, vals, rows, steps, onset, j, sign, base))
            onset = None
        mean = alpha * mean + (1 - alpha) * x
        var = alpha * var + (1 - alpha) * (x - mean) ** 2
    if onset is not None:
        incidents.append(_zclip_incident(label, vals, rows, steps, onset, None, sign, base))
    return incidents, flagged


def _zclip_incident(label, vals, rows, steps, j, end, sign, base):
    inc = _incident(label, vals, rows, steps, j, end, end or len(vals), sign > 0, base)
    inc["flagged"] = (end or len(vals)) - j
    inc["rule"] = "zclip"
    return inc


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
