"""The shared part of ``trainlog.py`` (shipped beside it, imported by its sibling modules):
the presets and column names, the number marks (missing, beyond float32), its errors, the
records it writes (through :mod:`protocol`) and the small statistics every stage uses.
"""

from __future__ import annotations

import math
import re
import struct

from ..protocol import EXIT_FAILED, emit, finish

COMMAND = "train-log"  # the command named in the final record

#: The preset a run takes unless told (the script's, the API's and the CLI's default).
DEFAULT_PRESET = "trend"

PRESETS = {
    "trend": {
        "window": 128,
        "sigma": 7.0,
        "ratio": None,
        "trend": True,
        "rule": "value > 7 sigma (and 5%) off a line that follows the trend (through the median "
        "of the last 16 values, with the slope of the last 128; sigma from their noise around "
        "it), back near the line within 64 values; a change that stays is a level shift, not "
        "a spike, unless it doubled; the first 5 values: a doubling that comes back",
    },
    "olmo2": {
        "window": 1000,
        "sigma": 7.0,
        "ratio": None,
        "rule": "OLMo 2: value >= 7 sigma from the rolling baseline of the last 1000 values",
    },
    "olmo-core": {
        "window": 128,
        "sigma": 6.0,
        "ratio": None,
        "rule": "OLMo-core: |x - baseline| / sigma > 6 over the last 128 values",
    },
    "megatron": {
        "window": 1000,
        "sigma": None,
        "ratio": 10.0,
        "rule": "Megatron --check-for-spiky-loss: value > 10x the running max of recent values",
    },
    "zclip": {
        "window": 25,
        "sigma": 2.5,
        "ratio": None,
        "ema": 0.97,
        "rule": "ZClip: z = (value - EMA mean) / EMA std > 2.5 (alpha 0.97, after 25 values; "
        "a flagged value enters the EMA clipped, as ZClip's adaptive clip)",
    },
}
CLIFF_SIGMA = 4.0  # a cliff is >= 4 sigma below the baseline ...
CLIFF_DROP = 0.5  # ... and at most half of it
RECOVER_SIGMA = 3.0  # back to baseline: 3 values in a row within 3 sigma of it
SKETCH = 33  # values kept per block for the rolling quantiles
MAX_SPIKES = 500  # spike records sent (the highest scores); all are counted
MAX_EVENTS = 2000  # event records sent per kind
STABLE_MAX = 50000  # values of the stable window (the log's second half, the latest ones)

# The columns of the loss, the grad norm and the lr are chosen by what their names say and
# their values (ingest.SCORES); the accuracy by these names, or the last part.
ROLES = {
    "acc": (
        "acc",
        "accuracy",
        "train/acc",
        "train/accuracy",
        "train_acc",
        "train_accuracy",
        "train_acc_step",
        "acc/train",
        "accuracy/train",
    ),
}
ROLE_NAMES = {
    "loss": "loss",
    "acc": "acc",
    "accuracy": "acc",
    "lr": "lr",
    "learning_rate": "lr",
    "grad_norm": "grad_norm",
    "val_loss": "val_loss",
}
STEP_KEYS = (
    "step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "train/step",
    "current_steps",
    "current_step",
    "num_updates",
    "iteration",
    "iter",
    "_step",
)
META = {
    "epoch": ("epoch", "train/epoch", "trainer/epoch"),
    "seq_len": ("seq_len", "seqlen", "seq_length", "max_len", "batch/seq_len", "train/seq_len"),
    "tokens": ("tokens", "num_tokens", "ntokens", "batch_tokens", "train/tokens"),
    "time": ("_timestamp", "timestamp", "time", "wall_time", "_runtime"),
    # an optimizer-update counter beside the step key (SB3's ``train/n_updates`` beside
    # ``time/total_timesteps``): one that goes on where the step key starts again says the
    # run continues the one before it
    "updates": ("train/n_updates", "n_updates", "num_updates", "updates"),
}
# A counter within this many of its strides of 0 at its first value starts at its origin: the
# run's start is in view (0, 1, the first stride after a first update or two).
ORIGIN_STRIDES = 3
BUCKET_KEYS = ("bucket", "length_bucket", "bucket_id", "batch/bucket", "train/bucket")
NOT_TRAIN = ("eval", "val", "test")

# Numbers: "nan", "inf", "-inf", "Infinity", "NaN" (any case, quoted or not) and numbers that
# overflow a double ("1e999") are read as the non-finite values they are; a finite value beyond
# float32's range (|v| > FMAX, e.g. 1e308: no fp32/bf16 training computes it) is an overflow
# marker too. Both are reported as "nonfinite" incidents with the value as logged, and left
# out of every baseline, median and distribution, so one of them cannot poison the statistics.
FMAX = 3.4028234663852886e38

# A NaN with a payload marks "key missing in this row"; a logged NaN is a plain NaN.
MISSING = struct.unpack("<d", struct.pack("<Q", 0x7FF80000DEADBEEF))[0]
_MISSING_BYTES = struct.pack("<d", MISSING)

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)\b"
PAIR_RE = re.compile(r"""['"]?([A-Za-z_][\w./\-]*)['"]?\s*[=:]\s*['"]?(""" + _NUM + ")", re.I)
# the fast path's looser pairs: any value token; float() decides (else the line goes slow)
FAST_PAIR_RE = re.compile(r"""([A-Za-z_][\w./\-]*)['"]?\s*[=:]\s*['"]?([^\s,|;'"{}()\[\]]+)""")
WORD_RE = re.compile(
    r"\b(step|iter|iteration|epoch|loss|acc|accuracy|lr|grad_norm)\s+(" + _NUM + ")", re.I
)
# A save: a verb of saving beside what a run saves (a checkpoint, its state, the model, its
# weights or policy), in either order ("Saving checkpoint to ...", "checkpoint saved (step
# N)", "saved model at epoch E", "Model weights saved in ..."); or "checkpoint" itself the
# verb, at a count (:data:`CKPT_VERB_RE`: "Checkpoint policy after step N", "checkpointing
# at iteration N"), unless a word before it says the checkpoint was used, not made
# ("Evaluating checkpoint at step N", "best checkpoint at epoch E": :data:`CKPT_USED_RE`).
SAVED_THING = r"(?:checkpoint|ckpt|state|model|weights|policy|snapshot|param(?:eter)?s|network)"
CKPT_RE = re.compile(
    r"\b(?:sav(?:e|es|ed|ing)|wr(?:ite|ites|iting|ote)|dump(?:s|ed|ing)?)\b.{0,40}?\b"
    + SAVED_THING
    + r"|\b"
    + SAVED_THING
    + r"\w*\b.{0,20}?\b(?:saved|written|stored|dumped)\b",
    re.I,
)
CKPT_VERB_RE = re.compile(
    r"\bcheckpoint(?:ed|ing)?\b(?:\W+\w+){0,3}?\W+(?:after|at|@)\W+(?:global[_ ]?)?"
    r"(?:step|iter(?:ation)?|epoch|update)s?\b",
    re.I,
)
CKPT_USED_RE = re.compile(
    r"\b(?:eval\w*|test\w*|valid\w*|best|select\w*|load\w*|us(?:e|es|ed|ing)|from|found|"
    r"latest|last|averag\w*|delet\w*|remov\w*)\W+(?:\w+\W+)?$",
    re.I,
)
# the cheap test before :data:`CKPT_RE` and :data:`RESUME_RE`: a word of either
EVENT_HINT_RE = re.compile(
    r"checkpoint|ckpt|resum|restor|sav(?:e|ed|es|ing)\b|wr(?:it|ot)|dump", re.I
)
RESUME_RE = re.compile(
    r"\bresum(?:e|ed|ing)\b|\brestor(?:e|ed|ing)\b.{0,30}?(?:checkpoint|ckpt|state)|\bload(?:ed|ing)?\b.{0,20}?(?:checkpoint|ckpt)",
    re.I,
)
# A line that says there is nothing to resume from or that no save happened: "no checkpoint
# found, starting from random weights", "not resuming", "training from scratch", "resume:
# None". Neither a save nor a resume comes from it.
NO_EVENT_RE = re.compile(
    r"\b(?:no|not|without|never|skip(?:ping|ped)?|nothing\s+to)\b.{0,30}?"
    r"(?:checkpoint|ckpt|resum|restor|sav(?:e|es|ed|ing)\b)"
    r"|\bfrom\s+scratch\b|\brandom(?:ly)?[\s_-]*(?:init\w*|weights|parameters)\b"
    r"|(?:resum\w*|restor\w*|checkpoint\w*|ckpt\w*)['\"]?\s*[=:]\s*['\"]?(?:none|false|null|no|off|0)\b",
    re.I,
)
# A setting as a printed config holds it (``resume=True`` in an argparse Namespace,
# ``save_checkpoint: true``, ``CHECKPOINT_PERIOD: 1000``): a name that holds an event's word
# and the value given to it. What a run is set to do is no action that happened: the pair
# is no part of the words an event is read from (a line that says more, "Saving checkpoint
# to ..." beside it, still is one).
SETTING_PAIR_RE = re.compile(
    r"""['"]?(?<![\w.\-])(?=[A-Za-z_])[\w.\-]*(?:resum|restor|checkpoint|ckpt)[\w.\-]*['"]?"""
    r"""(?:\s*=(?!=)\s*(?:'[^']*'|"[^"]*"|[^\s,;)\]}]+)"""
    r"""|\s*:\s*(?:true|false|none|null|yes|no|on|off|[-+]?\d[\d.eE+\-]*)(?![\w/.]))""",
    re.I,
)
# A setting printed before the log (``always_save_checkpoint = True # save a checkpoint after
# each eval``, nanoGPT's config): its comment says what the setting does, not what happened.
SETTING_COMMENT_RE = re.compile(r"^(\s*[\w.\-\[\]'\"]+\s*(?::[^=#]*)?=\s*[^#]*?)\s#.*$")
EVENT_STEP_RE = re.compile(
    r"(?:global[_ ]?step|\bstep|\biter(?:ation)?|checkpoint|ckpt)[\s_\-=:#]*(\d+)", re.I
)
# Lines that are no log message, whatever words they hold: a shell trace (``set -x``: "+ cmd",
# "++ cmd"), a Python prompt, source code printed before the log (a statement, a call, a
# decorator, a comment), a command's flag on a line of its own, a model's printed structure
# (a PyTorch module's repr: ``(head): Linear(in_features=4, out_features=512)``). Neither a
# row nor an event comes from them.
CODE_RE = re.compile(
    r"^\s*(?:\++ |>>> |\.\.\. |#|@[A-Za-z_]|"
    # a command's argument on a line of its own (``  --learning_rate=2e-5 \``): what was asked
    r"--[A-Za-z][\w.-]*(?:[= ]|$)|"
    r"(?:def|class|if|elif|for|while|return|import|from|with|try|except|raise|assert|yield|print)"
    r"\b(?!\s*[=:])|(?:\([\w.]+\):\s*)?[A-Za-z_][\w.]*\(|"
    # an annotated assignment (a dataclass field: ``save_every : int = 0``)
    r"[A-Za-z_]\w*\s*:\s*(?:int|float|str|bool|bytes|list|dict|tuple|set|[A-Z]\w*)"
    r"(?:\[[^\]=]*\])?\s+=\s)"
)
# A traceback's frame (``File "x.py", line 246, in <resume in forward>``) names code that ran,
# and a name in angle brackets (``WON'T CONVERT <resume in get_neighbours>``: a code object's,
# a generated function's, ``<lambda>``) names a thing, not an action: no event comes from
# either.
FRAME_RE = re.compile(r"""^\s*File "[^"\n]*", line \d+""")
ANGLED_RE = re.compile(r"<[^<>\n]{1,120}>")
# A logger's source line ("olmo.checkpoint:669", "train.py:88"): a line number, never a step.
SOURCE_LINE_RE = re.compile(r"(?<![\w/.])[A-Za-z_]\w*(?:\.\w+)+:\d+\b")
# A path: where something was saved, not what (data-order indices saved into a checkpoint
# folder are no checkpoint).
PATH_RE = re.compile(r"""['"]?(?:[A-Za-z]+://|\.{0,2}/|[\w.\-]+/)[^\s'"]*['"]?""")


def event_kind(line):
    """``"resume"``, ``"checkpoint"`` or None: what a log line says happened. Only a line
    that says an action happened is an event: no source code (:data:`CODE_RE`) nor a
    traceback's frame (:data:`FRAME_RE`), no line that says there was none
    (:data:`NO_EVENT_RE`), no name in angle brackets, no setting's comment nor a setting's
    name and value (:data:`SETTING_COMMENT_RE`, :data:`SETTING_PAIR_RE`); a logger's source
    line and a path are no words of it. Every reader of events asks this."""
    if CODE_RE.match(line) or FRAME_RE.match(line) or NO_EVENT_RE.search(line):
        return None
    words = SETTING_COMMENT_RE.sub(r"\1", ANGLED_RE.sub(" ", line))
    words = SETTING_PAIR_RE.sub(" ", SOURCE_LINE_RE.sub(" ", words))
    words = PATH_RE.sub(" ", words)
    if RESUME_RE.search(words):
        return "resume"
    if CKPT_RE.search(words):
        return "checkpoint"
    m = CKPT_VERB_RE.search(words)
    if m and not CKPT_USED_RE.search(words, 0, m.start()):
        return "checkpoint"
    return None


DIR_STEP_RE = re.compile(r"(?:step|iter|checkpoint|ckpt)[\s_\-=]*(\d+)", re.I)


class LogError(Exception):
    """The log cannot be analysed; the message says why and what to do."""


# --------------------------------------------------------------------------------------------
# output


def _num(v):
    """A finite float rounded to 6 significant digits, a whole one as an int: records stay
    small (a series of 2000 points); non-finite floats pass as they are (the protocol
    encodes them as "nan", "inf", "-inf")."""
    if isinstance(v, float) and math.isfinite(v):
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return float("%.6g" % v)
    return v


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _num(obj)


def send(rtype, **fields):
    """Write one record of ``rtype`` (numbers rounded by ``_num``) with the protocol."""
    rec = {"type": rtype}
    rec.update(_clean(fields))
    emit(rec)


def conclude(code, rows=0, spikes=0, events=None, findings=(), **final):
    """The ``summary`` record (what was found, in counts), then the one final record (with
    the ``final`` fields)."""
    send("summary", rows=rows, spikes=spikes, events=events or {}, findings=list(findings))
    return finish(COMMAND, code, **final)


def failed(message, **fields):
    """The log could not be analysed: one ``error`` record, then the end with exit 2."""
    send("error", message=message, **fields)
    return conclude(EXIT_FAILED)


# --------------------------------------------------------------------------------------------
# reading


def is_missing(x):
    return x != x and struct.pack("<d", x) == _MISSING_BYTES


def to_float(v):
    if v is None:
        return MISSING
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().strip("'\""))
        except ValueError:
            return MISSING
    return MISSING


# --------------------------------------------------------------------------------------------
# arithmetic helpers (no numpy there)


def quantile(sorted_vals, q):
    n = len(sorted_vals)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def median(vals):
    return quantile(sorted(vals), 0.5)


def robust_sigma(s):
    """A sigma from a sorted sample: IQR / 1.349, falling back to wider quantiles."""
    sig = (quantile(s, 0.75) - quantile(s, 0.25)) / 1.349
    if sig <= 0:
        sig = (quantile(s, 0.9) - quantile(s, 0.1)) / 2.563
    if sig <= 0:
        sig = (s[-1] - s[0]) / 6.0
    if sig <= 0:
        sig = max(abs(quantile(s, 0.5)) * 1e-3, 1e-12)
    return sig


def binom_sf(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    # in logs: comb(n, i) of tens of thousands of incidents is an int no float holds
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    total = 0.0
    for i in range(k, n + 1):
        total += math.exp(ln - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
    return min(1.0, total)


def decimate(vals, points, keep=()):
    """Indices that keep each bin's min and max (about ``points`` of them) plus ``keep``."""
    n = len(vals)
    if points <= 0:
        return []
    if n <= points:
        return list(range(n))
    bins = max(1, points // 2)
    size = -(-n // bins)
    out = set(i for i in keep if 0 <= i < n)
    for lo in range(0, n, size):
        seg = vals[lo : lo + size]
        out.add(lo + seg.index(max(seg)))
        out.add(lo + seg.index(min(seg)))
    out.add(0)
    out.add(n - 1)
    return sorted(out)


def fmt_number(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


# -- names: what a column's name says (the read stage's too: a constant lr is kept) --------

#: Name parts that qualify a learning rate as a setting, not the rate of each step.
LR_SETTINGS: tuple[str, ...] = ("min", "max", "base", "init", "initial", "peak", "final")
LR_SETTINGS += ("warmup", "decay", "mult", "multiplier", "scale", "scheduler", "factor")


#: Words that make a column a loss by its name, whatever the trainer calls it.
#: A word may be split by a separator (``cross_entropy``): adjacent parts are tried joined.
LOSS_WORDS = ("loss", "nll", "crossentropy", "perplexity", "ppl")


def loss_name(key):
    """Whether a name says a loss (or its exp): a loss word among its parts."""
    return any(w in LOSS_WORDS or w.endswith("loss") for w in name_words(key)[1])


def name_words(key):
    """A name's lower-case parts (split at ``/ . _ - `` spaces and brackets, and before a
    trailing ``loss``: CrossEntropyLoss), and those with adjacent parts joined."""
    low = key.lower()
    parts = [p for p in re.split(r"[/._\-\s()\[\]:]+|(?<=[a-z])(?=loss$)", low) if p]
    return parts, parts + [a + b for a, b in zip(parts, parts[1:])]


def lr_score(key):
    """How much a name says "the learning rate of each step", or None: ``lr`` as a part
    (``lr``, ``train/lr``, Lightning's ``lr-AdamW``, ultralytics' ``lr/pg0``) or learning
    + rate; a setting (``max_lr``, ``lr_warmup``, ``lr_scheduler``) scores low. Of param
    groups that score alike, :func:`_shared_first` picks."""
    parts, words = name_words(key)
    if "lr" not in parts and "learningrate" not in words:
        return None
    score = 3 - max(0, len(parts) - 2)
    if any(p in LR_SETTINGS for p in parts):
        score -= 3
    return score


def lr_name(key):
    """Whether a name says "the learning rate of each step" (:func:`lr_score`): a
    constant field of a line kind by that name is still kept, as a series (a constant lr
    is the lr: a schedule that never moved is something to say)."""
    score = lr_score(key)
    return score is not None and score > 0
