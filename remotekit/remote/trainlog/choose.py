"""Which columns ``trainlog.py`` analyses: the step key, and the loss, grad norm and lr
chosen by a scored rule over names and content (:func:`resolve_columns`, no list of exact
names: every pick says why), the accuracy and the meta columns by name; and for a log with
no loss, the numeric series worth naming (:func:`hint_columns`). The readers never choose:
a table's columns are chosen here from its keys and first rows.
"""

from __future__ import annotations

import math
import re
from itertools import combinations, islice

from .base import (
    BUCKET_KEYS,
    LOSS_WORDS,
    META,
    MISSING,
    NOT_TRAIN,
    ORIGIN_STRIDES,
    ROLE_NAMES,
    ROLES,
    STEP_KEYS,
    median,
    to_float,
)
from .base import lr_score as _lr_score
from .base import name_words as _name_words
from .source import HEAD_ROWS


def _find_key(keys, aliases, bases=None):
    """``(key, exact)``: the first of ``aliases`` among ``keys`` (case-insensitive), else a
    key whose last ``/`` part is one of ``bases`` and that is not an eval/val/test key (a
    guess: ``exact`` is False)."""
    low = {}
    for k in keys:
        low.setdefault(k.lower(), k)
    for a in aliases:
        if a in low:
            return low[a], True
    if bases:
        for lk, k in low.items():
            if lk.startswith(NOT_TRAIN):
                continue
            if lk.rsplit("/", 1)[-1] in bases:
                return k, False
    return None, False


#: A trainer's own short names for its losses: llm.c logs "trl" (train) and "tel" (eval).
SHORT_LOSSES = {"trl": "train", "tel": "eval"}
HELD_OUT = ("val", "valid", "validation", "eval", "test", "dev")
#: How a name part that says "held out" may begin (``validation``, ``evaluation``,
#: ``testset``): a prefix that no train-side word shares. ``val`` and ``dev`` are none: a
#: critic's ``value_loss`` is a train-side part of an actor-critic's objective, and
#: ``device`` or ``deviation`` say nothing held out (``val2``, ``dev1``: numbered sets).
HELD_OUT_STEMS = ("valid", "eval", "test", "heldout")
_NUMBERED_SET = re.compile(r"(?:val|dev)\d+$")
#: Name parts of an AMP loss scale (``loss_scale``, ``loss_scaler``, ``scaler``): the factor
#: the loss is multiplied by before backward (65536, halved on overflow), never a loss.
SCALE_PARTS = ("scale", "scaler", "scaling")


#: Name parts of an error function a model minimises, measured on each side where a loss
#: is not named (a boosting round's ``training's l2`` beside ``valid_1's l2``, xgboost's
#: ``train-rmse``): the loss's stand-in only where no column says loss.
ERROR_PARTS = ("l1", "l2", "mse", "mae", "rmse", "rmsle", "mape", "logloss", "huber", "error")


def error_part(key):
    """The error function a name says (its last part of :data:`ERROR_PARTS`), else None."""
    parts, _ = _name_words(key)
    found = [p for p in parts if p in ERROR_PARTS or p.endswith("logloss")]
    return found[-1] if found else None


def held_out_part(part):
    """Whether a name's part (lower case) says validation, evaluation or test."""
    return part in HELD_OUT or part.startswith(HELD_OUT_STEMS) or bool(_NUMBERED_SET.match(part))


def loss_score(key):
    """How much a column's name says "the training loss", or None if it says no loss at all.

    Needs no list of exact names: a loss word anywhere (``train/CrossEntropyLoss``,
    ``train_loss_local``, ``box_loss``), train-side over held-out (val/eval/test), a loss
    over perplexity (exp of it), per step over per epoch, a total over its parts. An AMP
    loss scale (``loss_scale``) says no loss."""
    parts, words = _name_words(key)
    short = [SHORT_LOSSES[p] for p in parts if p in SHORT_LOSSES]
    if not short and not any(w in LOSS_WORDS or w.endswith("loss") for w in words):
        return None
    if any(p in SCALE_PARTS for p in parts):
        return None
    score = 0
    if "eval" in short or any(held_out_part(p) for p in parts[:2]):
        score -= 10
    if "train" in short or any(p in ("train", "training", "trn") for p in parts):
        score += 3
    if short or "loss" in parts or key.lower().endswith("loss"):
        score += 2
    if "perplexity" in words or "ppl" in parts:
        score -= 1
    if "epoch" in parts:
        score -= 1
    if "total" in parts or (parts[-1:] == ["loss"] and len(parts) <= 2):
        score += 1
    return score


def _grad_norm_score(key):
    """How much a name says "the gradient norm", or None: a grad word with a norm
    (``grad_norm``, ``optim/total grad norm``, ``gradient_norm``, ``gradnorm``), fairseq's
    ``gnorm``, llm.c's bare ``norm``; the total over a per-parameter one, the norm before
    clipping over the clipped one."""
    parts, words = _name_words(key)
    grad = any(p.startswith("grad") for p in parts) and any("norm" in w for w in words)
    if not grad and parts not in (["gnorm"], ["norm"]) and "gnorm" not in parts:
        return None
    if any(p in HELD_OUT for p in parts[:2]):
        return None
    score = 3 - max(0, len(parts) - 3)  # per parameter or layer: a long name
    if "total" in parts or "global" in parts:
        score += 1
    if any(p.startswith("clip") or p in ("max", "mean", "min") for p in parts):
        score -= 2
    return score


#: Name parts of an episode's reward or return: a reinforcement-learning run.
REWARD_PARTS = ("reward", "rewards", "rew", "return", "returns")


def reward_key(keys):
    """The first of ``keys`` whose name says an episode's reward or return (SB3's
    ``rollout/ep_rew_mean``, ``episode_reward``) and no loss, else None: a reinforcement
    learner's loss (its critic's error grows with the returns) says nothing of whether it
    learned; the reward does."""
    for key in keys:
        parts, _ = _name_words(key)
        if any(p in REWARD_PARTS for p in parts) and loss_score(key) is None:
            return key
    return None


#: Name parts of a score a run maximises (an episode's score, a game's): analysed in a
#: loss's place only when the log has no loss at all.
SCORE_PARTS = REWARD_PARTS + ("score", "scores")


def maximised_key(keys, rows):
    """For a log with no loss: the first of ``keys`` whose name says a reward, a return or
    a score (and no loss) and whose values in ``rows`` vary, else None."""
    for key in keys:
        parts, _ = _name_words(key)
        if any(p in SCORE_PARTS for p in parts) and loss_score(key) is None:
            if not rows or _content(rows, key) is None:
                return key
    return None


def _val_loss_score(key):
    """How much a name says "the held-out loss" (``val_loss``, ``eval/loss``,
    ``validation/CrossEntropyLoss``, llm.c's ``tel``), or None: a loss by
    :func:`loss_score`'s words, held out by a part; validation over test (a test loss is
    often computed once), a total over its parts, per step over per epoch."""
    parts, words = _name_words(key)
    short = [SHORT_LOSSES[p] for p in parts if p in SHORT_LOSSES]
    if "eval" not in short:
        if loss_score(key) is None:
            return None
        held = [p for p in parts if held_out_part(p)]
        if not held:
            return None
    score = 3 if "test" not in parts else 1
    if "perplexity" in words or "ppl" in parts:
        score -= 1
    if "epoch" in parts:
        score -= 1
    if "total" in parts or len(parts) <= 2:
        score += 1
    return score


SCORES = {
    "loss": loss_score,
    "grad_norm": _grad_norm_score,
    "lr": _lr_score,
    "val_loss": _val_loss_score,
}
SAYS = {
    "loss": "the train-side loss",
    "grad_norm": "the gradient norm",
    "lr": "the learning rate",
    "val_loss": "the held-out loss",
}
#: Roles analysed when the log has them, never missed when it has not: a run that logs no
#: validation loss is not short of anything.
OPTIONAL = ("val_loss",)


def _content(rows, key):
    """Why a column's values in ``rows`` (the head's dicts) make it no series, else None:
    "set once" (fewer than 3 values in a log with more rows: a config field), "constant X"
    (one value throughout)."""
    need = min(3, len(rows))
    first, n, varies = None, 0, False
    for d in rows:  # to the third value that shows it varies: the choice reads 5000 rows
        v = d.get(key)
        if v is None or v == "":  # an empty CSV cell: missing, without a float() that fails
            continue
        x = to_float(v)
        if x is MISSING:
            continue
        n += 1
        if first is None:
            first = x
        elif x != first:  # NaN too
            varies = True
        if varies and n >= need:
            return None
    if n < need:
        return "set once"
    if n >= 3 and not varies:
        return "constant %s" % _short(first)
    return None


def _short(x):
    return ("%d" % x) if x == x and abs(x) < 1e15 and x == int(x) else "%.4g" % x


def _pick(role, keys, taken, rows, seldom=()):
    """``(key, parts, why)``: the column ``role`` ("loss", "grad_norm", "lr") is read from,
    chosen by what names say (:data:`SCORES`, no list of exact names) and what the values
    are: a constant or set-once series is never chosen (a constant lr is still the lr,
    said so); the loss by its values too (:func:`_loss_evidence`: a total before its parts,
    a maximised or signed part last). ``parts``: for the loss, the others that score as
    well (the parts of a loss with no total, as YOLO's ``box_loss``, ``cls_loss``,
    ``dfl_loss``: each is analysed). ``why`` says it in words, with what else was seen and
    what was passed over, and why. ``seldom``: columns a reader read off lines of their own
    kind (a held-out loss on its validation lines), set once or twice by nature: not passed
    over for it."""
    scored, passed, note = [], [], ""
    for i, k in enumerate(keys):
        if k in taken:
            continue
        s = SCORES[role](k)
        if s is None:
            if role == "loss" and _is_scale(k):
                passed.append("%r (an AMP loss scale)" % k)
            continue
        bad = _content(rows, k) if rows else None
        if bad == "set once" and k in seldom:
            bad = None  # read off lines of its own kind: an evaluation, once an epoch or less
        if bad is not None and not (role == "lr" and bad.startswith("constant")):
            passed.append("%r (%s)" % (k, bad))
            continue
        turns = _turns(_finite(rows, k)) if role == "lr" and bad is None else None
        if turns is not None and turns >= NOISY_TURNS:
            passed.append(
                "%r (noisy: its values turn at %d%% of their changes; an lr is a schedule)"
                % (k, round(100 * turns))
            )
            continue
        scored.append((-s, i, k, bad))
    if not scored and role == "loss":
        key, why = _error_pick(keys, taken, rows, held=False)
        if key is not None:
            return key, [], "loss <- %r: %s" % (key, why)
    if not scored and role == "loss" and rows:
        runs, why = _sweep(keys, taken, rows)
        if runs:
            return runs[0], [], "loss <- %r: %s" % (runs[0], why)
    if not scored:
        return None, [], "" if not passed else "no %s: passed over %s" % (role, ", ".join(passed))
    said = {}
    if role == "loss":
        scored, said = _loss_evidence(scored, rows)
    else:
        scored.sort()
    first = scored[0][2]
    if role == "lr":
        scored = _shared_first(scored, rows)
    best, note = scored[0][2], scored[0][3]
    if best != first:
        note = "the schedule most of the param groups share"
    total = said.get(best, "").startswith("a total")
    parts = []
    if role == "loss" and not total:
        parts = [k for s, _, k, _ in scored[1:] if s == scored[0][0] and k not in said]
    others = [k for s, _, k, _ in scored[1:] if k not in parts]
    what = SAYS[role] + " by name"
    if role == "loss" and -scored[0][0] < -5:
        what = "a held-out loss: no train-side loss found"
    elif role == "loss" and "epoch" in _name_words(best)[0]:
        what = "only the per-epoch column %r was found" % best
    if best in said:
        what += "; " + said[best]
    why = "%s <- %r: %s" % (role, best, what + ("; " + note if note else ""))
    if parts:
        why += "; its parts %s are analysed too (no total found)" % ", ".join(map(repr, parts))
    demoted = [k for k in others if k in said and not said[k].startswith("a total")]
    others = [k for k in others if k not in demoted]
    if others:
        seen = ["%r%s" % (k, " (%s)" % said[k] if k in said else "") for k in others[:6]]
        why += "; also seen: %s (--metric NAME to choose)" % ", ".join(seen)
    if demoted:
        why += "; not the loss: %s" % ", ".join("%r (%s)" % (k, said[k]) for k in demoted[:6])
    if passed:
        why += "; passed over: %s" % ", ".join(passed[:6])
    return best, parts, why


def _error_pick(keys, taken, rows, held, same=None):
    """``(key, why)``: where no column says loss, the first column named by an error
    function (:func:`error_part`; ``same``: that one) on the train side (``held``: the
    held-out side, by its name's part), one that varies; a train-side word before none.
    ``(None, "")`` when there is none."""
    found = []
    for i, k in enumerate(keys):
        err = error_part(k)
        if k in taken or err is None or (same is not None and err != same):
            continue
        parts, _ = _name_words(k)
        if any(held_out_part(p) for p in parts) != held:
            continue
        if rows and _content(rows, k) is not None:
            continue
        train = any(p in ("train", "training", "trn") for p in parts)
        found.append((not train, i, k, err))
    if not found:
        return None, ""
    _, _, key, err = min(found)
    side = "held-out" if held else "train-side"
    return key, (
        "no column says loss: the %s error the model minimises (%r), as the log names it"
        % (side, err)
    )


#: An lr is a schedule: constant, stepped or smooth, turning direction a few times in a run
#: at most (a warm-up's peak, a cycle's ends). A series whose values turn at this share of
#: their changes or more is noise about a trend: a measurement (a loss), never the lr.
NOISY_TURNS = 0.4
MIN_CHANGES = 20  # changes of value needed before a series is called noisy
SWEEP_START = 0.05  # runs of one sweep start within this share of each other
_NUMBER_PART = re.compile(r"(?<![A-Za-z])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _finite(rows, key):
    """``key``'s finite values in ``rows``, in order."""
    return [x for x in _present(rows, key) if math.isfinite(x)]


def _turns(xs):
    """The share of the changes of value in ``xs`` where it turns direction, or None with
    fewer than :data:`MIN_CHANGES` changes (too few to tell). At :data:`NOISY_TURNS` or
    more it is noise about a trend: no lr schedule turns so often."""
    d = [b - a for a, b in zip(xs, xs[1:]) if b != a]
    if len(d) < MIN_CHANGES:
        return None
    return sum(1 for a, b in zip(d, d[1:]) if (a > 0) != (b > 0)) / (len(d) - 1)


def _sweep(keys, taken, rows):
    """``(keys, why)``: with no column a loss by name, columns that are one quantity of
    several runs side by side (a sweep's CSV: ``learning_rate_0.005``, ``learning_rate_0.1``;
    the number in the name says which run), told by their values: named alike but for a
    number, each noisy (no schedule), each falling, all starting at the same value (the
    runs start from the same untrained level and lower it: a loss or an error, whatever the
    run's label says). ``([], "")`` when no columns are so."""
    groups = {}
    for k in keys:
        if k not in taken and _NUMBER_PART.search(k):
            groups.setdefault(_NUMBER_PART.sub("#", k), []).append(k)
    for ks in groups.values():
        if len(ks) < 2 or any(_grad_norm_score(k) is not None for k in ks):
            continue
        starts = []
        for k in ks:
            xs = _finite(rows, k)
            n = max(1, len(xs) // 5)
            turns = _turns(xs)
            if len(xs) < MIN_CHANGES or turns is None or turns < NOISY_TURNS:
                break
            if not median(xs[-n:]) < 0.95 * median(xs[:n]):
                break
            starts.append(xs[0])
        else:
            lo, hi = min(starts), max(starts)
            if hi - lo > SWEEP_START * max(abs(lo), abs(hi)) or hi <= 0:
                continue
            why = (
                "no name says loss; %d columns named alike but for a number (%s) are one "
                "quantity of %d runs side by side: each noisy, each falling, all starting at "
                "%s, as the runs' loss does (the numbers label the runs); the first is "
                "analysed (--metric NAME for another)"
                % (len(ks), ", ".join(map(repr, ks[:6])), len(ks), _short(median(starts)))
            )
            return ks, why
    return [], ""


#: Name parts of a quantity a trainer maximises, logged as a "loss" term all the same
#: (SB3's ``entropy_loss``: an entropy bonus, negative; a ``reward_loss``).
MAXIMISED_PARTS = ("entropy", "reward", "rewards", "return", "returns", "acc", "accuracy")
MAXIMISED_PARTS += ("bonus", "advantage", "advantages")
#: Name parts that qualify no loss: a loss named with nothing else is the objective itself.
PLAIN_PARTS = ("loss", "total", "train", "training", "trn", "avg", "mean", "batch", "step")
PLAIN_PARTS += ("sum", "overall", "all", "running", "smoothed", "objective", "full")
FIT_ROWS = 200  # head rows a total is fitted on
HOVER = 0.25  # a signed part's median within this share of its range of 0: it hovers there
MAX_FIT_PARTS = 6  # candidate parts tried in sums (2^6 subsets at most)


def _loss_evidence(scored, rows):
    """``(scored, said)``: the loss candidates (``(-score, index, key, note)``) in the
    order the values say, and ``{key: words}`` for each whose values spoke.

    A total comes first: a column that is a weighted sum of two or more of the others in
    every head row (:func:`_sum_of`; SB3's ``loss`` = pg + vf_coef * value + ent_coef *
    entropy). A part that is maximised (an entropy, a reward: its name says which, its
    values are often negative) or signed (values of both signs: a policy-gradient loss
    hovers around 0) comes last while a minimised one exists. Of equals, a loss whose name
    names nothing else (``loss``) before one of a named part (``discriminator loss``)."""
    keys = [k for _, _, k, _ in scored]
    said, tier, bonus = {}, {}, {}
    for k in keys:
        of = _sum_of(k, [c for c in keys if c != k], rows)
        if of:
            said[k] = "a total: a weighted sum of %s in every row" % ", ".join(map(repr, of))
            bonus[k] = 2
    named = {k: [p for p in _name_words(k)[0] if p not in PLAIN_PARTS] for k in keys}
    for k in keys:
        if k in bonus:
            continue  # a total of signed parts may dip below 0: it is the objective still
        if not named[k] and any(named.values()):
            # a loss that names nothing beside others that name a part (SB3's train/loss,
            # logged from the last batch, so no exact sum of the means of its parts)
            said[k] = "the total by its name: the others name parts (%s)" % ", ".join(
                repr(k) for k in keys if named[k]
            )
            continue
        parts = _name_words(k)[0]
        xs = [x for x in _present(rows, k) if math.isfinite(x)]
        lo, hi = (min(xs), max(xs)) if xs else (0.0, 0.0)
        if any(p in MAXIMISED_PARTS for p in parts):
            sign = "; its values negative" if hi < 0 else ""
            said[k], tier[k] = "maximised: an %s term%s" % (_maxword(parts), sign), 2
        elif len(xs) >= 3 and lo < 0 < hi and abs(median(xs)) <= HOVER * (hi - lo):
            # both signs around 0 (a policy-gradient loss); a loss that falls through 0
            # (a continuous NLL) or stays below it is a loss still
            said[k] = "signed: values from %s to %s around 0, a loss no minimum bounds" % (
                _short(lo),
                _short(hi),
            )
            tier[k] = 1
    if len(tier) == len(keys):
        tier = {}  # none is minimised: the name decides, the values still said

    def order(c):
        s, i, k, _ = c
        return (tier.get(k, 0), s - bonus.get(k, 0), bool(named[k]), i)

    ranked = sorted(scored, key=order)
    return [(s - bonus.get(k, 0), i, k, n) for s, i, k, n in ranked], said


def _maxword(parts):
    return next(p for p in parts if p in MAXIMISED_PARTS)


def _sum_of(key, others, rows):
    """The fewest of ``others`` (two at least) whose weighted sum is ``key``'s value in every
    head row where all have one (unexplained variance under 0.1%: values printed with four
    digits still fit), each part weighing in (1% of the total's spread at least), with a
    positive weight unless its name says it is maximised (an entropy bonus is subtracted):
    a part is never a total of the total and the other parts. Else None."""
    others = others[:MAX_FIT_PARTS]
    if len(others) < 2 or not rows:
        return None
    table = []
    for d in rows[:FIT_ROWS]:
        row = [to_float(d.get(c)) for c in [key] + others]
        if all(x is not MISSING and math.isfinite(x) for x in row):
            table.append(row)
    if len(table) < len(others) + 3 or not _fits(
        [r[0] for r in table], [r[1:] for r in table], [True] * len(others), 0.0
    ):
        return None  # not even all of them sum to it: no fewer do (one fit, the usual case)
    for size in range(2, len(others) + 1):
        for combo in combinations(range(len(others)), size):
            y = [r[0] for r in table]
            x = [[r[1 + j] for j in combo] for r in table]
            free = [any(p in MAXIMISED_PARTS for p in _name_words(others[j])[0]) for j in combo]
            if _fits(y, x, free) and not any(
                _fits(y, [[r[j]] for r in x], [True], 0.0, 1e-6) for j in range(size)
            ):  # one part alone is it (to rounding): a copy or a rescale of it, no sum
                return [others[j] for j in combo]
    return None


def _fits(y, x, free, weigh=0.01, tol=1e-3):
    """Whether ``y`` is a linear combination of ``x``'s columns (least squares, no
    intercept) leaving under ``tol`` of its variance unexplained, each column weighing in
    (``weigh`` of ``y``'s spread) with a positive weight, or any weight where ``free``."""
    m = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(m)] for i in range(m)]
    b = [sum(r[i] * t for r, t in zip(x, y)) for i in range(m)]
    ridge = 1e-9 * sum(a[i][i] for i in range(m)) / m  # columns that sum to each other
    for i in range(m):
        a[i][i] += ridge
    w = _solve(a, b)
    if w is None:
        return False
    sd = _spread(y)
    for j in range(m):
        if (w[j] <= 0 and not free[j]) or abs(w[j]) * _spread([r[j] for r in x]) < weigh * sd:
            return False
    res = sum((t - sum(wi * xi for wi, xi in zip(w, r))) ** 2 for r, t in zip(x, y))
    # and within 0.1% of the values themselves: a logged total is a sum to print precision;
    # smooth curves of one shape (losses decaying together) fit one another only roughly
    top = max(abs(t) for t in y)
    return sd > 0 and res <= tol * sd * sd * len(y) and res <= (tol * top) ** 2 * len(y)


def _spread(v):
    mean = sum(v) / len(v)
    return math.sqrt(sum((t - mean) ** 2 for t in v) / len(v))


def _solve(a, b):
    """``a w = b`` by Gaussian elimination with partial pivoting; None when singular."""
    m = len(b)
    a = [row[:] + [v] for row, v in zip(a, b)]
    for c in range(m):
        piv = max(range(c, m), key=lambda r: abs(a[r][c]))
        if abs(a[piv][c]) < 1e-12 * max(1.0, max(abs(v) for row in a for v in row[:m])):
            return None
        a[c], a[piv] = a[piv], a[c]
        for r in range(m):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [u - f * v for u, v in zip(a[r], a[c])]
    return [a[i][m] / a[i][i] for i in range(m)]


def _shared_first(scored, rows):
    """The lr candidates with the top score (one per param group) reordered: the schedule
    most groups share first, then the first group. ultralytics' pg0 holds the biases, whose
    warm-up falls from 0.1 while the weights' groups pg1 and pg2 rise together: "the" lr is
    theirs."""
    top = [c for c in scored if c[0] == scored[0][0]]
    if len(top) < 3 or not rows:
        return scored
    values = [tuple(to_float(d.get(c[2])) for d in rows[:HEAD_ROWS]) for c in top]
    shared = [sum(v == w for w in values) for v in values]
    order = sorted(range(len(top)), key=lambda i: -shared[i])
    return [top[i] for i in order] + scored[len(top) :]


#: Name words of a step counter: a step, an iteration, an optimizer update.
STEP_WORDS = ("step", "steps", "globalstep", "iter", "iters", "iteration", "iterations")
STEP_WORDS += ("it", "update", "updates", "numupdates")
#: Name parts that make such a name a setting, a rate or a total, not the counter.
STEP_SETTINGS = ("max", "total", "warmup", "per", "interval", "every", "freq", "time", "lr")
STEP_SETTINGS += ("eval", "save", "log", "sec", "s", "rate", "norm", "size")


def _step_score(key):
    """How much a name says "the step counter" (``opt_step``, ``trainer_step``, ``n_iter``,
    ``num_updates``), or None: a step/iteration/update word and no epoch; a setting, a rate
    or a total (``max_steps``, ``steps_per_sec``, ``warmup_steps``) scores low."""
    parts, words = _name_words(key)
    if parts[-1:] == ["timesteps"] and "per" not in parts:
        # the environment steps so far (stable-baselines3's ``time/total_timesteps``,
        # baselines' ``total_timesteps``): an RL run's own axis, its logger's x-axis;
        # ``total`` is the count so far here (the values must rise), no setting: over a
        # count of one environment's steps (baselines' ``serial_timesteps``)
        return 4 if "total" in parts else 3
    if not any(w in STEP_WORDS for w in words) or "epoch" in parts or "epochs" in parts:
        return None
    score = 3 - max(0, len(parts) - 2)
    if any(p in STEP_SETTINGS for p in parts):
        score -= 3
    if "global" in parts or "globalstep" in words:
        score += 1
    return score


def _present(rows, key):
    """``key``'s values in ``rows`` (the head's dicts), as floats, the missing ones left out."""
    return [v for v in (to_float(d.get(key)) for d in rows) if v is not MISSING]


def _rising(vals):
    """Whether at least 90% of ``vals``' steps go up: a counter or a clock (one that
    restarts each epoch too)."""
    return sum(b > a for a, b in zip(vals, vals[1:])) >= 0.9 * (len(vals) - 1)


def _counts_up(rows, key):
    """Whether ``key``'s values in ``rows`` are whole numbers that rise: a counter."""
    vals = _present(rows, key)
    if len(vals) < 3 or any(not math.isfinite(v) or v != int(v) for v in vals):
        return False
    return _rising(vals)


def _scored_step(keys, rows):
    """The step key by what its name says and its values are (:func:`_step_score`,
    :func:`_counts_up`), for a log whose counter has a name no trainer we know uses."""
    scored = []
    for i, k in enumerate(keys):
        s = _step_score(k)
        if s is not None and s > 0 and _counts_up(rows, k):
            scored.append((-s, i, k))
    return min(scored)[2] if scored else None


def _counter_step(keys, rows):
    """The step key by its values alone, for a counter whose name says nothing we know
    (``Samples Seen``): whole numbers that rise by one stride (most steps the same; a fall
    and a climb again is a second run, said later), no epoch, no clock, no metric. A
    counter that only repeats an epoch column (pandas' ``index`` of a per-epoch CSV) is not
    one: the epoch column is that axis, by its name."""
    epochs = [_present(rows, e) for e in keys if _meta_rule("epoch", e)]
    for k in keys:
        if not _name_words(k)[0] or any(score(k) is not None for score in SCORES.values()):
            continue
        if any(_meta_rule(m, k) for m in META) or "epoch" in _name_words(k)[0]:
            continue
        if "time" in _name_words(k)[0] or not _counts_up(rows, k):
            continue
        vals = _present(rows, k)
        if vals in epochs:
            continue
        fwd = [b - a for a, b in zip(vals, vals[1:]) if b > a]
        stride = sorted(fwd)[len(fwd) // 2]
        if sum(d == stride for d in fwd) >= 0.8 * len(fwd):
            return k
    return None


#: A counter that starts this many of its strides from 0 or more (while another starts at its
#: origin) counts from earlier training: well past the few a run's own start shows
#: (:data:`.base.ORIGIN_STRIDES`), a tenth of a short earlier run at least.
CONTINUED_STRIDES = 10


def _exact_counter(rows, key):
    """``(first, stride)`` of ``key``'s values in ``rows`` when they are an exact counter:
    whole numbers that rise by the same stride at every step (an update count, a sample
    count: arithmetic, not a clock's jitter), at least 3 of them; else None."""
    vals = _present(rows, key)
    if len(vals) < 3 or any(not math.isfinite(v) or v != int(v) for v in vals):
        return None
    stride = vals[1] - vals[0]
    if stride <= 0 or any(b - a != stride for a, b in zip(vals, vals[1:])):
        return None
    return vals[0], stride


def continued_start(keys, rows, step_key):
    """Why the log's run continues earlier training, from its first rows, or None: of its
    exact counters (:func:`_exact_counter`) that rise together row by row, one starts at
    its origin (within :data:`.base.ORIGIN_STRIDES` strides of 0: this run's count) while
    another starts :data:`CONTINUED_STRIDES` of its strides from 0 or more (a count that
    goes on from runs before: stable-baselines3's ``train/n_updates`` from 1240 while
    ``time/total_timesteps`` starts again at 4096). By the values alone, whatever the
    names; the step key's words come first."""
    rows = [d for d in islice(rows, 200) if isinstance(d, dict)]
    counters = []
    for k in sorted(keys, key=lambda k: k != step_key):
        found = _exact_counter(rows, k)
        if found is not None:
            counters.append((k, found[0], found[1]))
    if len(counters) < 2:
        return None
    at_origin = [c for c in counters if c[1] <= ORIGIN_STRIDES * c[2]]
    far = [c for c in counters if c[1] >= CONTINUED_STRIDES * c[2]]
    for a in at_origin:
        for b in far:
            if _together(rows, a[0], b[0]):
                return (
                    "%r starts at %s, %d of its strides of %s from 0, while %r starts at "
                    "its origin (%s): the run continues earlier training (a trained model "
                    "trained again, or a resume whose %r started again)"
                    % (
                        b[0],
                        _short(b[1]),
                        b[1] // b[2],
                        _short(b[2]),
                        a[0],
                        _short(a[1]),
                        a[0],
                    )
                )
    return None


def _together(rows, a, b):
    """Whether counters ``a`` and ``b`` rise on the same rows (where both are logged)."""
    pairs = [(to_float(d.get(a)), to_float(d.get(b))) for d in rows]
    pairs = [p for p in pairs if p[0] is not MISSING and p[1] is not MISSING]
    moves = [(x1 > x0, y1 > y0) for (x0, y0), (x1, y1) in zip(pairs, pairs[1:])]
    return len(moves) >= 2 and all(x == y for x, y in moves)


def _meta_rule(name, key):
    """Whether ``key``'s name says meta field ``name`` (:data:`META`'s, beyond its names):
    the epoch (``cur_epoch``, ``epoch_idx``), the sequence length of the batch
    (``ctx_len``, ``sequence_length``, ``input_len``), the tokens of the batch
    (``tokens_per_batch``, ``ntok``), a batch's length bucket (``len_bucket``,
    ``bucket_idx``). Clocks (``tokens_seen``, ``total_tokens``) are ruled out by their
    values (:func:`_meta_values`)."""
    parts, words = _name_words(key)
    if name == "epoch":
        measure = ("time", "duration", "sec", "secs", "s", "ms", "rate", "lr", "acc", "avg")
        measure += ("mean", "speed", "throughput", "samples", "tokens")
        return (
            "epoch" in parts
            and len(parts) <= 2
            and not loss_score(key)
            and not any(p in measure for p in parts)
        )
    if name == "seq_len":
        return (
            "seqlen" in words
            or "ctxlen" in words
            or (
                any(p in ("len", "length") for p in parts)
                and any(
                    p in ("seq", "sequence", "ctx", "context", "input", "sample") for p in parts
                )
            )
        )
    if name == "tokens":
        clock = ("seen", "consumed", "total", "cumulative", "sec", "s", "second", "gpu")
        return any(p in ("tokens", "ntokens", "ntok", "toks") for p in parts) and not any(
            p in clock for p in parts
        )
    if name == "bucket":
        return any(p.startswith("bucket") or p.endswith("bucket") for p in parts)
    return False


def _meta_values(name, rows, key):
    """Whether ``key``'s values in ``rows`` can be meta field ``name``: whole numbers (an
    epoch may be fractional: HF's 0.33) that vary; a batch's tokens or length do not only
    rise (that is a clock); a bucket may be anything."""
    if name == "bucket":
        return True
    vals = _present(rows, key)
    if len(vals) < 3 or any(not math.isfinite(v) for v in vals):
        return False
    if name == "epoch":
        return all(b >= a for a, b in zip(vals, vals[1:]))
    if any(v != int(v) or v < 0 for v in vals) or len(set(vals)) < 2:
        return False
    return not _rising(vals)


def _scored_meta(name, keys, used, rows):
    """The first of ``keys`` (not ``used``) whose name and values say meta field ``name``."""
    for k in keys:
        if k not in used and _meta_rule(name, k) and _meta_values(name, rows, k):
            return k
    return None


def _is_scale(key):
    """An AMP loss scale's name: ``loss_scale``, ``train/loss_scaler``, a bare ``scaler``."""
    parts, _ = _name_words(key)
    scale = any(p in SCALE_PARTS for p in parts)
    return scale and (parts == ["scaler"] or any("loss" in p for p in parts))


def resolve_columns(keys, wanted, step_key=None, head=(), seldom=()):
    """Map labels to row keys: ``(step_key, [(label, key)], [(meta, key)], bucket_key,
    missing_labels, guesses, why)``; ``guesses`` says in words which choice was not certain,
    ``why`` ({label: words}) why each metric's column is the one. ``head``: the first rows
    (dicts), whose values rule out a constant or set-once column (``seldom``: columns of
    lines of their own kind, never ruled out as set once: :func:`_pick`)."""
    keys = list(keys)
    rows = [d for d in head if isinstance(d, dict)]
    guesses, why = [], {}
    if step_key is None or step_key not in keys:
        step_key, exact = _find_key(keys, STEP_KEYS, ("step", "global_step"))
        if step_key is None and rows:
            step_key = _scored_step(keys, rows)
            if step_key is not None:
                exact = True  # said here, in its own words
                guesses.append(
                    "step key %r chosen by its name and values (whole numbers that rise)" % step_key
                )
            else:
                step_key = _counter_step(keys, rows)
                exact = True
                if step_key is not None:
                    guesses.append(
                        "step key %r chosen by its values: whole numbers that rise by one "
                        "stride (a counter; no name we know says step)" % step_key
                    )
        if step_key is None:
            guesses.append(
                "no step key found (looked for %s): row numbers are used as steps"
                % ", ".join(STEP_KEYS[:6])
            )
        elif not exact:
            guesses.append("step key %r chosen by its name's last part" % step_key)
    metrics = []
    missing = []
    names = wanted or ["loss", "acc", "lr", "grad_norm", "val_loss"]
    for name in names:
        role = ROLE_NAMES.get(name.lower())
        label = role or name
        taken = {step_key} | {k for _, k in metrics}
        named, _ = _find_key(keys, (name.lower(),))
        if wanted and named is not None and named not in taken:  # --metric NAME: that column
            why[label] = "%s <- %r: named with --metric" % (label, named)
            metrics.append((label, named))
            continue
        if role in SCORES:
            if role in OPTIONAL and not wanted and "held-out" in why.get("loss", ""):
                continue  # the loss is the held-out one already: no second of its kind
            key, parts, said = _pick(role, keys, taken, rows, seldom)
            if key is None and role == "val_loss" and "no column says loss" in why.get("loss", ""):
                # the loss an error function: the held-out side of the same one
                loss_key = dict(metrics).get("loss")
                key, said = _error_pick(keys, taken, rows, True, error_part(loss_key or ""))
                said = "val_loss <- %r: %s" % (key, said) if key is not None else ""
            if key is None:
                if role not in OPTIONAL or wanted:
                    guesses.extend([said] if said else [])
                missing.extend([name] if wanted else [])
                continue
            why[role] = said
            if role == "loss" and ("held-out" in said or "per-epoch" in said or "alike" in said):
                guesses.append(said)  # a held-out or per-epoch loss stands in: a caveat
            # named with --metric loss: that one series; else its parts with no total too
            metrics += [(role, key)] + ([] if wanted else [(k, k) for k in parts])
            continue
        if role is not None:
            key, exact = _find_key(keys, (name.lower(),) + ROLES[role], ROLES[role])
        else:
            key, exact = _find_key(keys, (name.lower(),), (name.lower(),))
        if key is None or key in taken:
            missing.extend([name] if wanted else [])
            continue
        if not exact:
            why[label] = "%s <- %r: chosen by its name's last part" % (label, key)
            guesses.append(why[label])
        elif key.lower().endswith("_epoch"):
            why[label] = "%s <- %r: only the per-epoch column was found" % (label, key)
            guesses.append(why[label])
        else:
            why[label] = "%s <- %r: %s by name" % (label, key, "the accuracy")
        metrics.append((label, key))
    used = {step_key} | {k for _, k in metrics}
    meta = []
    for name, aliases in META.items():
        key, _ = _find_key(keys, aliases)
        if (key is None or key in used) and name != "time" and rows:
            key = _scored_meta(name, keys, used, rows)
            if key is not None:
                guesses.append("%s <- %r: chosen by its name and values" % (name, key))
        if key is not None and key not in used:
            meta.append((name, key))
            used.add(key)
    bucket_key, _ = _find_key(keys, BUCKET_KEYS, ("bucket",))
    if bucket_key is None and rows:
        bucket_key = _scored_meta("bucket", keys, used, rows)
        if bucket_key is not None:
            guesses.append("bucket <- %r: chosen by its name" % bucket_key)
    if bucket_key in used:
        bucket_key = None
    return step_key, metrics, meta, bucket_key, missing, guesses, why


class NoLoss(Exception):
    """No loss series in the log (and none named): the series there are worth naming."""

    def __init__(self, numeric, found, left_out=()):
        Exception.__init__(self, "no loss series found")
        self.numeric = numeric
        self.found = found
        self.left_out = left_out  # [(why, [names])]: numeric keys that are no series to name
        self.what = None  # the binary format that parsed (a TensorBoard or W&B file), if one
        self.notes = []  # caveats of how the log was found (a W&B run without its history)


#: Name parts of a column that is a label of the run rather than a measurement.
ID_PARTS = ("id", "pid", "uid", "uuid", "rank", "seed", "port", "node", "host", "hostname")
#: Name parts of a column that counts or times the run (an axis, not a series).
CLOCK_PARTS = ("time", "timestamp", "runtime", "elapsed", "wall", "clock", "tokens", "samples")
CLOCK_PARTS += ("step", "steps", "epoch", "epochs", "iter", "iteration", "seen", "consumed")
#: Name parts that say "minimised": a loss by another name (``objective``, ``bpb``, ``error``).
MINIMISED = ("objective", "cost", "error", "err", "bpb", "bpc", "bits", "entropy", "mse", "mae")
LEFT_OUT = (
    ("constant", "constant"),
    ("once", "set once: config fields"),
    ("id", "ids or host fields"),
    ("counter", "counters or clocks"),
)


def hint_columns(rows, step_key=None):
    """``(names, left_out)`` for a log with no loss: the numeric keys of ``rows`` (dicts) that
    are series worth naming with ``--metric`` (they vary, have values in several rows),
    most loss-like first (a name that says minimised, a falling trend, fractional values);
    and ``[(why, [names])]`` for the numeric keys that are not: constant, set once (a config
    row), ids and host fields, counters and clocks (they only grow)."""
    vals = {}
    for d in rows:
        if not isinstance(d, dict):
            continue
        for k, v in d.items():
            if k == step_key or isinstance(v, bool):
                continue
            x = v if isinstance(v, (int, float)) else to_float(v) if isinstance(v, str) else None
            if x is None or x is MISSING or x != x or x in (float("inf"), float("-inf")):
                continue
            vals.setdefault(k, []).append(float(x))
    scored = []
    out = {why: [] for why, _ in LEFT_OUT}
    for k, xs in vals.items():
        why, score = _series_kind(k, xs)
        if why is None:
            scored.append((-score, k))
        else:
            out[why].append(k)
    scored.sort()
    left_out = [(text, sorted(out[why])) for why, text in LEFT_OUT if out[why]]
    return [k for _, k in scored], left_out


def _name_parts(key):
    return [p for p in re.split(r"[/._\- ]+|(?<=[a-z])(?=[A-Z])", key) if p]


def _series_kind(key, xs):
    """``(why left out, None)`` or ``(None, loss-likeness)`` of one column's values."""
    if len(xs) < 3:
        return "once", None
    if len(set(xs)) == 1:
        return "constant", None
    parts = [p.lower() for p in _name_parts(key)]
    integral = all(x.is_integer() for x in xs)
    if any(p in ID_PARTS for p in parts) or (
        integral and len(set(xs)) > 0.9 * len(xs) > 20 and not _monotone(xs)
    ):
        return "id", None
    if _monotone(xs) and (integral or any(p in CLOCK_PARTS for p in parts) or xs[0] > 1e8):
        return "counter", None
    n = max(1, len(xs) // 5)
    first, last = sorted(xs[:n])[n // 2], sorted(xs[-n:])[n // 2]
    score = 0
    if any(p in MINIMISED or p.startswith(MINIMISED) for p in parts):
        score += 3
    if last < first - 0.05 * abs(first):
        score += 2
    elif last > first + 0.05 * abs(first):
        score -= 1
    if not integral:
        score += 1
    if min(xs) > 0:
        score += 1
    return None, score


def _monotone(xs):
    """Whether ``xs`` never falls (a counter, a clock)."""
    return all(b >= a for a, b in zip(xs, xs[1:]))


def epoch_axis(cols, head):
    """The epoch key, when a log without a step key has one row per epoch (ultralytics'
    results.csv, Keras's CSVLogger): whole epochs, each one more than the row before."""
    step_key, _, meta, _, _, _, _ = cols
    key = dict(meta).get("epoch")
    if step_key is not None or key is None:
        return None
    vals = [to_float(d.get(key)) for d in head[:HEAD_ROWS] if isinstance(d, dict)]
    if len(vals) < 2 or any(v is MISSING for v in vals):
        return None
    if all(b - a == 1 for a, b in zip(vals, vals[1:])) and vals[0].is_integer():
        return key
    return None
