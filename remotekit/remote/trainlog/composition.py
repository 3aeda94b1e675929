"""Batch composition for ``trainlog.py``: the modes of the loss over a stable window (KDE,
bimodality coefficient), periodicity, quantised (rounded) values, and, where the log has a
per-step bucket / seq_len / tokens, whether homogeneous batches in long runs explain it.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from itertools import compress, islice
from operator import mul, ne

from .base import STABLE_MAX, fmt_number, median, quantile

# --------------------------------------------------------------------------------------------
# batch composition


def kde_modes(r, nbins=200):
    """Modes of a sample: a histogram smoothed by a Gaussian kernel (Silverman bandwidth),
    local maxima merged until each stands out. Returns (modes, grid, density)."""
    s = sorted(r)
    n = len(s)
    lo, hi = quantile(s, 0.005), quantile(s, 0.995)
    if not hi > lo:
        return [{"center": s[n // 2], "weight": 1.0, "lo": s[0], "hi": s[-1]}], [], []
    width = (hi - lo) / nbins
    dens = _density(s, lo, width, nbins)
    grid = [lo + (i + 0.5) * width for i in range(nbins)]
    peaks = _peaks(dens)
    # regions between valleys
    bounds = [lo - 1e300]
    for a in range(len(peaks) - 1):
        p, q = peaks[a], peaks[a + 1]
        seg = dens[p : q + 1]
        v = p + seg.index(min(seg))
        bounds.append(grid[v])
    bounds.append(hi + 1e300)
    weights = [0] * len(peaks)
    for x in s:
        weights[max(0, min(len(peaks) - 1, bisect.bisect_right(bounds, x) - 1))] += 1
    modes = []
    for a, p in enumerate(peaks):
        modes.append(
            {
                "center": grid[p],
                "weight": weights[a] / n,
                "lo": max(bounds[a], s[0]),
                "hi": min(bounds[a + 1], s[-1]),
            }
        )
    # tiny modes are noise: fold them away (their mass goes to the neighbour)
    big = [m for m in modes if m["weight"] >= 0.05]
    if big and len(big) < len(modes):
        return kde_modes_fold(modes, big), grid, dens
    return modes, grid, dens


def _density(s, lo, width, nbins):
    """The Gaussian-smoothed histogram of the sorted sample ``s`` (bins of ``width`` from
    ``lo``), the bandwidth by Silverman's rule, at least one bin."""
    n = len(s)
    mean = sum(s) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in s) / max(1, n - 1))
    iqr = (quantile(s, 0.75) - quantile(s, 0.25)) / 1.349
    spread = min(sd, iqr) if iqr > 0 else sd
    h = max(0.9 * spread * n ** (-0.2), width)
    counts = [0] * nbins
    for x in s:
        i = int((x - lo) / width)
        if 0 <= i < nbins:
            counts[i] += 1
    hb = h / width
    half = int(4 * hb) + 1
    kern = [math.exp(-0.5 * (d / hb) ** 2) for d in range(-half, half + 1)]
    dens = [0.0] * nbins
    for i, c in enumerate(counts):
        if not c:
            continue
        for d, w in enumerate(kern):
            j = i + d - half
            if 0 <= j < nbins:
                dens[j] += c * w
    return dens


def _peaks(dens):
    """The local maxima of ``dens``, neighbours merged (the lower one goes) until each
    stands out: its valley to the next is below 85% of the lower peak and >= 3% of the top."""
    nbins = len(dens)
    peaks = [
        i
        for i in range(nbins)
        if dens[i] > 0
        and (i == 0 or dens[i] > dens[i - 1])
        and (i == nbins - 1 or dens[i] >= dens[i + 1])
    ]
    top = max(dens)
    changed = True
    while changed and len(peaks) > 1:
        changed = False
        for a in range(len(peaks) - 1):
            p, q = peaks[a], peaks[a + 1]
            valley = min(dens[p : q + 1])
            low_peak = min(dens[p], dens[q])
            if valley > 0.85 * low_peak or low_peak - valley < 0.03 * top:
                peaks.pop(a + 1 if dens[p] >= dens[q] else a)
                changed = True
                break
    return peaks


def kde_modes_fold(modes, big):
    out = [dict(m) for m in big]
    for m in modes:
        if m in big:
            continue
        j = min(range(len(out)), key=lambda i: abs(out[i]["center"] - m["center"]))
        out[j]["weight"] += m["weight"]
        out[j]["lo"] = min(out[j]["lo"], m["lo"])
        out[j]["hi"] = max(out[j]["hi"], m["hi"])
    return out


def bimodality_coefficient(r):
    """Sarle's b = (skew^2 + 1) / (excess kurtosis + 3(n-1)^2/((n-2)(n-3))); > 5/9 hints
    at two or more modes."""
    n = len(r)
    if n < 4:
        return None
    m = sum(r) / n
    m2 = sum((x - m) ** 2 for x in r) / n
    if m2 <= 0:
        return None
    m3 = sum((x - m) ** 3 for x in r) / n
    m4 = sum((x - m) ** 4 for x in r) / n
    g = m3 / m2**1.5
    k = m4 / m2**2 - 3
    return (g * g + 1) / (k + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def autocorr(r, max_lag):
    n = len(r)
    m = sum(r) / n
    z = [x - m for x in r]
    var = sum(map(mul, z, z))
    if var <= 0:
        return []
    return [sum(map(mul, z[:-lag], z[lag:])) / var for lag in range(1, max_lag + 1)]


def periodicity(r, stride=1.0, quantised=None):
    """The strongest autocorrelation bump at a lag >= 2 (a period), if any; its multiples
    give way to it (a period of 4 also peaks at 8). Lags are counted in log rows and
    reported in steps (``stride`` steps a row). A ``quantised`` loss (few distinct values)
    is never called periodic: its staircase repeats by itself."""
    r = r[-4096:]
    n = len(r)
    max_lag = min(512, n // 3)
    if max_lag < 4:
        return None
    acf = autocorr(r, max_lag)
    if not acf:
        return None
    peaks = []
    for i in range(1, len(acf) - 1):
        if acf[i] >= acf[i - 1] and acf[i] >= acf[i + 1]:
            peaks.append((i + 1, acf[i], acf[i] - min(acf[:i])))
    out = {
        "lag": None,
        "lag_rows": None,
        "acf": None,
        "max_lag": max_lag * stride,
        "stride": stride,
        "periodic": False,
        "quantised": bool(quantised),
    }
    if not peaks:
        return out
    top = max(p[1] for p in peaks)
    # the first peak within 10% of the top (its multiples give way to it); "10% of the top"
    # as a distance, not 0.9 x top: every peak of a sawtooth longer than the lags looked at
    # (an epoch-long cycle over a few epochs) is below 0, and 0.9 x top is above them all
    lag, a, bump = next(p for p in peaks if p[1] >= top - 0.1 * abs(top))
    periodic = a >= max(0.3, 4.0 / math.sqrt(n)) and bump >= 0.2 and not quantised
    out.update(lag=lag * stride, lag_rows=lag, acf=a, periodic=periodic)
    return out


def quantisation(v, r, logscale):
    """``{"distinct", "quantum"}`` when the values are too coarse to have a shape: a dozen
    distinct values or fewer, or a rounding step (HF logs 4 decimals) that is not small
    against their spread (the residuals ``r``, in the values' units); else None."""
    distinct = sorted(set(v))
    d = len(distinct)
    gaps = [b - a for a, b in zip(distinct, distinct[1:]) if b > a]
    q = min(gaps) if gaps else 0.0
    if d > 12:
        rs = sorted(r)
        spread = (quantile(rs, 0.75) - quantile(rs, 0.25)) / 1.349
        if logscale:
            spread *= quantile(sorted(v), 0.5)
        if not (q > 0 and spread < 3 * q):
            return None
    return {"distinct": d, "quantum": q}


def _row_stride(steps_of_rows):
    """The usual number of steps between consecutive log rows (1 when unknown)."""
    diffs = sorted(b - a for a, b in zip(steps_of_rows, steps_of_rows[1:]) if b > a)
    return quantile(diffs, 0.5) if diffs else 1.0


def bucket_column(ing, cols, n):
    """Bucket codes per row and their names: the ``bucket`` field, else ``seq_len`` or
    ``tokens`` (distinct values, or powers of two when there are many)."""
    if ing.bucket_key is not None and len(ing.codes) == n and len(ing.bnames) >= 1:
        return ing.bucket_key, ing.codes, list(ing.bnames)
    for name in ("seq_len", "tokens"):
        col = cols.get(name)
        if col is None:
            continue
        fin = [v for v in col if v == v]
        if not fin:
            continue
        distinct = sorted(set(fin))
        if len(distinct) <= 16:
            names = [fmt_number(v) for v in distinct]
            cmap = {v: i for i, v in enumerate(distinct)}
            codes = array("i", (cmap.get(v, -1) if v == v else -1 for v in col))
            return name, codes, names
        pw = sorted(set(math.ceil(math.log2(max(v, 1.0))) for v in fin))
        names = ["<=%d" % (2**p) for p in pw]
        cmap = {p: i for i, p in enumerate(pw)}
        codes = array(
            "i",
            (cmap[math.ceil(math.log2(max(v, 1.0)))] if v == v else -1 for v in col),
        )
        return name, codes, names
    return None, None, None


def composition(label, vals, rows, steps, incidents, ing, cols, nrows, derived=None):
    """Shape of ``label`` over a stable window, and how it follows the batch's bucket.
    ``derived``: ``{column: words}`` for batch columns taken from a running total.
    Returns ``{"distribution", "periodicity", "histogram", "composition", "codes"}`` (the
    ones it could make; nothing for a log too short to have a stable window)."""
    keep = _stable_window(label, len(vals), incidents)
    if keep is None:
        return {}
    v = [vals[i] for i in keep]
    r, logscale, slope, unscale = _detrend(v, keep)
    modes, _, _ = kde_modes(r)
    bc = bimodality_coefficient(r)
    quant = quantisation(v, r, logscale)
    shape = "quantised" if quant is not None else _SHAPES.get(len(modes), "multimodal")
    at = (lambda i: rows[i]) if rows is not None else (lambda i: i)
    stride = _row_stride([steps[at(i)] for i in keep])
    key, codes, names = bucket_column(ing, cols, nrows)
    rc = [codes[at(i)] for i in keep] if key is not None else None
    dist = {
        "metric": label,
        "scale": "log" if logscale else "linear",
        "first_step": steps[at(keep[0])],
        "last_step": steps[at(keep[-1])],
        "n": len(r),
        "shape": shape,
        "bimodality": bc,
        "trend_slope": slope,
        "modes": _modes(modes, r, rc, names, unscale),
        "quantised": quant,
    }
    per = periodicity(r, stride, quant)
    out = {"periodicity": per, "distribution": dist}
    hist = _histogram(r, rc, names, unscale, dist, key)
    if hist is not None:
        out["histogram"] = hist
    words = [_coarse_words(label, quant) or "%s is %s" % (label, shape)]
    repeats = _repeat_words(per, stride)
    if key is None:
        out["composition"] = _without_batches(label, modes, bc, quant, dist, words, repeats)
        return out
    out["codes"] = (codes, names)
    out["composition"] = _by_bucket(
        label, key, codes, names, v, r, rc, dist, words, repeats, stride, derived
    )
    return out


_SHAPES = {1: "unimodal", 2: "bimodal", 3: "trimodal"}


def _stable_window(label, n, incidents):
    """The rows of the stable window: the log's second half (at most ``STABLE_MAX`` of the
    latest values) without ``label``'s incidents and the 3 rows after each; None when
    too few are left to have a shape."""
    if n < 40:
        return None
    lo = max(n // 2, n - STABLE_MAX)
    excl = sorted(
        (i["idx"], i["end_idx"] + 3)
        for i in incidents
        if i["metric"] == label and i["idx"] is not None
    )
    keep = []
    e = 0
    for i in range(lo, n):
        while e < len(excl) and excl[e][1] <= i:
            e += 1
        if e < len(excl) and excl[e][0] <= i < excl[e][1]:
            continue
        keep.append(i)
    return keep if len(keep) >= 30 else None


def _detrend(v, keep):
    """``(residuals, logscale, slope, unscale)``: ``v`` (in logs when all positive) less a
    least-squares trend on log(row), so a still-falling loss does not smear the modes;
    ``unscale`` turns a residual back into a value at the window's end."""
    logscale = min(v) > 0
    y = [math.log(x) for x in v] if logscale else list(v)
    x = [math.log(i + 1) for i in keep]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx if sxx > 0 else 0.0
    r = [c - b * (a - mx) - my for a, c in zip(x, y)]
    level = my + b * (x[-1] - mx)  # residual 0 reads as the level at the window's end

    def unscale(t):
        return math.exp(t + level) if logscale else t + level

    return r, logscale, b, unscale


def _modes(modes, r, rc, names, unscale):
    """The KDE modes in the metric's units, each with the bucket that dominates it."""
    out = [
        {
            "center": unscale(m["center"]),
            "weight": m["weight"],
            "lo": unscale(m["lo"]),
            "hi": unscale(m["hi"]),
            "bucket": None,
            "purity": None,
        }
        for m in modes
    ]
    if rc is None:
        return out
    bounds = [m["hi"] for m in modes[:-1]]
    per_mode = [Counter() for _ in modes]
    for t, c in zip(r, rc):
        per_mode[min(len(modes) - 1, bisect.bisect_left(bounds, t))][c] += 1
    for md, cnt in zip(out, per_mode):
        if cnt:
            c, k = cnt.most_common(1)[0]
            md["bucket"] = names[c] if c >= 0 else "-"
            md["purity"] = k / sum(cnt.values())
    return out


def _histogram(r, rc, names, unscale, dist, key):
    """Counts of the residuals per bin on the original scale, by bucket where known (the
    8 commonest, the rest as "other"); None when the values have no spread."""
    hb = 40 if len(r) >= 400 else 20
    rs = sorted(r)
    h_lo, h_hi = quantile(rs, 0.002), quantile(rs, 0.998)
    if not h_hi > h_lo:
        return None
    w = (h_hi - h_lo) / hb
    counts = {}
    top = set(c for c, _ in Counter(rc).most_common(8)) if rc is not None else None
    for i, t in enumerate(r):
        j = int((t - h_lo) / w)
        if j == hb:
            j -= 1
        if not 0 <= j < hb:
            continue
        if rc is None:
            name = "all"
        else:
            c = rc[i]
            name = (names[c] if c >= 0 else "-") if c in top else "other"
        counts.setdefault(name, [0] * hb)[j] += 1
    return {
        "metric": dist["metric"],
        "scale": dist["scale"],
        "key": key,
        "edges": [unscale(h_lo + i * w) for i in range(hb + 1)],
        "counts": counts,
        "modes": [m["center"] for m in dist["modes"]],
        "first_step": dist["first_step"],
        "last_step": dist["last_step"],
    }


def _repeat_words(per, stride):
    """The words for a periodic loss, else None."""
    if not (per and per["periodic"]):
        return None
    words = "it repeats every %s steps (autocorrelation %.2f)" % (
        fmt_number(per["lag"]),
        per["acf"],
    )
    if stride != 1:
        words = words[:-1] + ", every %d log rows)" % per["lag_rows"]
    return words


def _coarse_words(label, quant):
    """The words for a quantised (rounded) loss, else None."""
    if quant is None:
        return None
    return (
        "%s takes only %d distinct values in steps of %s (rounded when logged): too coarse "
        "to judge its shape or periodicity"
        % (label, quant["distinct"], fmt_number(quant["quantum"]))
    )


_NO_BATCH_STATS = {
    "key": None,
    "derived": None,
    "buckets": [],
    "explained": None,
    "max_run": None,
    "max_run_bucket": None,
    "random_max_run": None,
    "interleaved_max_run": None,
    "homogeneous": None,
    "long_runs": None,
    "modes_match": False,
}


def _without_batches(label, modes, bc, quant, dist, words, repeats):
    """The composition record of a log without a per-step batch key: a finding when the
    loss is multimodal by two signs (a flat-topped sample can show a spurious bump) or
    periodic."""
    nm = len(modes)
    multimodal = (
        nm >= 2
        and sum(1 for m in modes if m["weight"] >= 0.1) >= 2
        and (bc or 0) > 5 / 9
        and quant is None
    )
    if nm >= 2 and quant is None:
        words.append(
            "modes %s"
            % ", ".join(
                "%s (%d%%)" % (fmt_number(m["center"]), round(100 * m["weight"]))
                for m in dist["modes"]
            )
        )
    finding = multimodal or repeats is not None
    if repeats:
        words.append(repeats)
    if finding:
        words.append(
            "batches may be homogeneous (e.g. length-bucketed): log each step's bucket or "
            "seq_len to confirm, and interleave buckets"
        )
    verdict = "; ".join(words) + ("" if finding else ": no sign of homogeneous batches")
    return dict(_NO_BATCH_STATS, finding=finding, verdict=verdict)


def _longest_runs(codes):
    """``{code: longest run of consecutive rows with it}``."""
    runs = {}
    nc = len(codes)
    starts = array("l", [0])
    starts.extend(compress(range(1, nc), map(ne, islice(codes, 1, None), codes)))
    starts.append(nc)
    for a, z in zip(starts, islice(starts, 1, None)):
        c = codes[a]
        if z - a > runs.get(c, 0):
            runs[c] = z - a
    return runs


def _bucket_stats(key, codes, names, v, r, rc, derived):
    """Per bucket: its share of all batches, the loss median in the window and its longest
    run; the share of the residual variance the bucket explains; the longest run against
    what a random and an interleaved order would give."""
    allc = Counter(codes)
    total = sum(allc.values())
    runs = _longest_runs(codes)
    by, byr = {}, {}
    for val, t, c in zip(v, r, rc):
        by.setdefault(c, []).append(val)
        byr.setdefault(c, []).append(t)
    mr = sum(r) / len(r)
    ss_tot = sum((t - mr) ** 2 for t in r)
    ss_b = sum(len(g) * (sum(g) / len(g) - mr) ** 2 for g in byr.values())
    buckets = [
        {
            "bucket": names[c] if c >= 0 else "-",
            "batches": cnt,
            "share": cnt / total,
            "loss_median": median(by[c]) if c in by else None,
            "max_run": runs.get(c, 0),
        }
        for c, cnt in allc.most_common()
    ]
    max_run_c = max(runs, key=lambda c: runs[c])
    p = buckets[0]["share"]
    return {
        "key": key,
        "buckets": buckets,
        "explained": ss_b / ss_tot if ss_tot > 0 else 0.0,
        "max_run": runs[max_run_c],
        "max_run_bucket": names[max_run_c] if max_run_c >= 0 else "-",
        "random_max_run": (
            math.log(max(2.0, total * (1 - p))) / math.log(1 / p) if 0 < p < 1 else total
        ),
        "interleaved_max_run": max(1, math.ceil(p / (1 - p))) if p < 1 else total,
        "derived": (derived or {}).get(key),
    }


def _by_bucket(label, key, codes, names, v, r, rc, dist, words, repeats, stride, derived):
    """The composition record of a log with a per-step batch key, and its verdict."""
    stats = _bucket_stats(key, codes, names, v, r, rc, derived)
    buckets, explained, max_run = stats["buckets"], stats["explained"], stats["max_run"]
    stats["buckets"] = buckets[:32]
    real = [bk for bk in buckets if bk["share"] >= 0.02]
    top = buckets[0]
    kname = key.rsplit("/", 1)[-1]  # train/bucket reads as bucket
    if stats["derived"]:
        words.append("batches by %s" % stats["derived"])
    if len(real) < 2:
        words.append(
            "%s is %s in %.0f%% of batches (padded or mixed batches)"
            % (kname, top["bucket"], 100 * top["share"])
        )
        if repeats:
            words.append(repeats)
        verdict = "; ".join(words) + ": no sign of homogeneous batches"
        return dict(
            stats,
            homogeneous=False,
            long_runs=False,
            modes_match=False,
            finding=False,
            verdict=verdict,
        )
    homogeneous = explained >= 0.3
    long_runs = max_run >= max(4, 2 * stats["interleaved_max_run"] + 1)
    match = _modes_match(dist)
    if match:
        words.append(
            "modes match %s" % ("token buckets" if kname == "tokens" else "length buckets")
        )
    elif homogeneous:
        words.append(
            "%s depends on the batch's %s (%.0f%% of its variance)"
            % (label, kname, 100 * explained)
        )
    words.append("%s %s is %.0f%% of batches" % (kname, top["bucket"], 100 * top["share"]))
    unit = "steps" if stride == 1 else "log rows"
    words.append(
        "up to %d consecutive same-%s %s (%s %s)"
        % (max_run, kname, unit, kname, stats["max_run_bucket"])
    )
    if repeats:
        words.append(repeats)
    return dict(
        stats,
        homogeneous=homogeneous,
        long_runs=long_runs,
        modes_match=match,
        # a periodic loss from an interleaved order is expected; it matters with long runs
        finding=bool(homogeneous and long_runs),
        verdict="; ".join(words)
        + ": "
        + _bucket_tail(homogeneous, long_runs, explained, label, dist),
    )


def _modes_match(dist):
    """Each mode (of >= 5% weight, two or more) is mostly (>= 60%) its own bucket; never for
    a quantised loss, whose modes are its rounding steps."""
    big = [m for m in dist["modes"] if m["weight"] >= 0.05]
    buckets = [m["bucket"] for m in big]
    return (
        dist["quantised"] is None
        and len(buckets) >= 2
        and len(set(buckets)) == len(buckets)
        and all((m["purity"] or 0) >= 0.6 for m in big)
    )


def _bucket_tail(homogeneous, long_runs, explained, label, dist):
    if homogeneous and long_runs:
        return "batches look homogeneous, interleave buckets"
    if homogeneous:
        return (
            "batches are homogeneous per bucket but already interleaved; the %s loss is expected"
            % dist["shape"]
        )
    return "batches mix buckets (the bucket explains %.0f%% of the %s variance)" % (
        100 * explained,
        label,
    )
