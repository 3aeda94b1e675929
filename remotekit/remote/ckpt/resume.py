"""Checkpoint diagnostics: can a run resume from this checkpoint with nothing lost?

Part of ``ckpt.py``; ``inspect`` writes the answer (its ``resume``), from the files alone and
without reading tensor data. What a resume needs, each said with its evidence:

- optimizer state for every parameter the optimizer holds (its ``param_groups``): a parameter
  without moments restarts them at zero, and the first steps after the resume move it with
  Adam's full, unsmoothed step: the loss jumps. The missing ones are named (by the order of
  the model's parameters, when that order can be matched) or given by index;
- the lr scheduler, its step (``last_epoch``) matching the checkpoint's step (or epoch);
- an AMP grad scaler, where the checkpoint's own config says fp16;
- RNG states; a dataloader / sampler position (only some trainers save one).

``gaps`` are what a resume would lose for sure (optimizer state missing, a scheduler at
another step, a scaler an fp16 run needs); ``not_saved`` what the files do not hold and a
resume may need (the scheduler of a trainer that keeps one, RNG states, the data position):
the trainer decides, the files cannot say.
"""

from __future__ import annotations

import os
import re

from .base import OPTIMIZER, OTHER, RNG, WEIGHTS, as_number, import_torch

SCHEDULER_KEY = re.compile(r"(?i)sched")
SCALER_KEY = re.compile(r"(?i)scaler|amp_scal|^amp$")
# Not "generator": a GAN's generator is a model. Names of state, not of a config's switches.
RNG_KEY = re.compile(r"(?i)rng|random_states?$|^(?:np|torch|cuda|python)_random")
DATA_KEY = re.compile(
    r"(?i)dataloader|data_loader|sampler|consumed_(?:train_)?samples|data_state|loader_state"
)
FP16_WORDS = re.compile(r"(?i)^(?:fp16|float16|16|16-mixed|amp|native_amp|half)$")
FP16_KEYS = ("fp16", "amp", "use_amp", "mixed_precision", "precision", "dtype", "half")
# Buffers of common modules: in a state dict, never in an optimizer's param_groups.
BUFFER_NAME = re.compile(r"(?:^|\.)(?:running_mean|running_var|inv_freq|bias_mask|attn\.bias)$")
HF_FILES = {
    "scheduler": ("scheduler.pt",),
    "scaler": ("scaler.pt",),
    "rng": ("rng_state.pth",),
}
MAX_NAMED = 20
MAX_DEPTH = 3


def check(src, path):
    """The ``resume`` of an ``inspect`` record for the opened checkpoint ``src`` (``path``)."""
    found = _Found(src, path)
    out = {"gaps": [], "not_saved": [], "present": [], "missing_params": []}
    _optimizer(src, out)
    _scheduler(src, found, out)
    _scaler(found, out)
    for what, key, hint in (
        ("RNG states", "rng", "the resumed run draws other random numbers (data order, dropout)"),
        ("dataloader position", "data", "only some trainers save one; others skip by the step"),
    ):
        if found.has(key):
            out["present"].append("%s (%s)" % (what, found.where(key)))
        else:
            out["not_saved"].append("%s: %s" % (what, hint))
    out["ready"] = not out["gaps"]
    return out


class _Found(object):
    """What the checkpoint's loaded objects (and, for a directory, its files) hold, by key."""

    def __init__(self, src, path):
        self.places = {"scheduler": [], "scaler": [], "rng": [], "data": []}
        self.schedulers = []  # (where, state dict)
        self.fp16 = None  # where the checkpoint's config says fp16
        for prefix, obj in src.trees:
            self._walk(obj, prefix, 0)
        for e in src.entries:
            if e.section == OTHER and e.kind == RNG and not self.places["rng"]:
                self.places["rng"].append(e.name)
        if os.path.isdir(path):
            names = set(os.listdir(path))
            for key, files in HF_FILES.items():
                hits = [n for n in files if n in names]
                if key == "rng":
                    hits = sorted(n for n in names if re.match(r"^rng_state(_\d+)?\.pth$", n))
                self.places[key] += hits
            if "scheduler.pt" in names:
                self.schedulers.append(
                    ("scheduler.pt", _load_small(os.path.join(path, "scheduler.pt")))
                )

    def has(self, key):
        return bool(self.places[key])

    def where(self, key):
        shown = self.places[key][:3]
        return ", ".join(shown) + (", ..." if len(self.places[key]) > 3 else "")

    def _walk(self, obj, prefix, depth):
        items = _items(obj)
        if items is None or depth > MAX_DEPTH:
            return
        for k, v in items:
            name = prefix + k
            if SCHEDULER_KEY.search(k):
                self.places["scheduler"].append(name)
                for i, s in enumerate(v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(s, dict) and "last_epoch" in s:
                        where = name if not isinstance(v, (list, tuple)) else "%s[%d]" % (name, i)
                        self.schedulers.append((where, s))
                continue
            if hasattr(v, "shape") or isinstance(v, str):
                pass  # a weight named so (a GAN's sampler), a config's text: no state
            elif SCALER_KEY.search(k) and isinstance(v, dict):  # not a switch ("amp": true)
                self.places["scaler"].append(name)
                continue
            elif RNG_KEY.search(k) and v is not None and not isinstance(v, bool):
                self.places["rng"].append(name)
                continue
            elif DATA_KEY.search(k) and v is not None and not isinstance(v, bool):
                self.places["data"].append(name)
                continue
            if self.fp16 is None and k.lower() in FP16_KEYS and _says_fp16(v):
                self.fp16 = "%s=%r" % (name, v)
            if k in ("state", "param_groups") and depth > 0:
                continue  # an optimizer's insides
            self._walk(v, name + ".", depth + 1)


def _items(obj):
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    if hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        return [(str(k), v) for k, v in vars(obj).items()]  # an args Namespace
    return None


def _says_fp16(v):
    if v is True:
        return True
    return isinstance(v, (str, int)) and not isinstance(v, bool) and bool(FP16_WORDS.match(str(v)))


def _load_small(path):
    """A small torch file beside the checkpoint (HF's scheduler.pt), weights_only; None if
    it cannot be read."""

    torch = import_torch()
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a damaged or refused side file: no scheduler step to compare
        return None
    return obj if isinstance(obj, dict) else None


# ------------------------------------------------------------------------------- optimizer


def _param_ids(opt):
    ids = []
    for g in opt.get("param_groups") or []:
        if isinstance(g, dict):
            ids.extend(g.get("params") or [])
    return ids


def _has_moments(state):
    """A parameter's state holds what the optimizer keeps between steps (a tensor slot
    besides ``step``: exp_avg, momentum_buffer, ...)."""
    if not isinstance(state, dict):
        return False
    return any(k != "step" and v is not None and hasattr(v, "shape") for k, v in state.items())


def _stateless(opt):
    """SGD without momentum keeps no state: nothing to restore."""
    groups = [g for g in opt.get("param_groups") or [] if isinstance(g, dict)]
    return (
        bool(groups)
        and all(g.get("momentum", None) == 0 and "betas" not in g for g in groups)
        and not opt.get("state")
    )


def _optimizer(src, out):
    if not src.optimizers and any(e.section == OPTIMIZER for e in src.entries):
        # a format that keeps optimizer tensors by name, with no param_groups (DCP)
        n = sum(1 for e in src.entries if e.section == OPTIMIZER)
        out["present"].append(
            "optimizer state (%d tensors; no param_groups, so which parameters it covers is "
            "not checked)" % n
        )
        out["optimizer_params"] = out["optimizer_missing"] = 0
        return
    if not src.optimizers:
        out["gaps"].append(
            "no optimizer state: a resume starts the optimizer afresh (Adam's moments at zero)"
        )
        out["optimizer_params"] = 0
        out["optimizer_missing"] = 0
        return
    total = missing = 0
    named = []
    weights = _trainable(src)
    for where, opt in src.optimizers:
        ids = _param_ids(opt)
        state = opt.get("state") or {}
        if _stateless(opt):
            out["present"].append(
                "optimizer %s: SGD without momentum, no state to keep" % (where or "<root>")
            )
            total += len(ids)
            continue
        lacking = [i for i in ids if not _has_moments(state.get(i, state.get(str(i))))]
        total += len(ids)
        missing += len(lacking)
        names = _names_of(lacking, ids, weights, state)
        named += names
    out["optimizer_params"] = total
    out["optimizer_missing"] = missing
    out["missing_params"] = named[:MAX_NAMED]
    if missing:
        out["gaps"].append(
            "no optimizer state for %d of %d parameters (%s%s): a resume restarts their "
            "moments at zero"
            % (missing, total, ", ".join(named[:5]), ", ..." if missing > 5 else "")
        )
    elif total:
        out["present"].append("optimizer state for all %d parameters" % total)


def _trainable(src):
    """The model's parameters in order (name, shape): weights that are no buffers."""
    return [
        (e.name, e.shape)
        for e in src.entries
        if e.section == WEIGHTS and not BUFFER_NAME.search(e.name)
    ]


def _names_of(lacking, ids, weights, state):
    """The lacking parameters by name where the optimizer's ids are 0..n-1 over exactly the
    model's parameters (their moments' shapes agreeing), else by index ("param 7")."""
    ordered = all(isinstance(i, int) for i in ids) and sorted(ids) == list(range(len(ids)))
    if ordered and len(ids) == len(weights):
        agree = True
        for i in ids:
            s = state.get(i)
            shape = next(
                (
                    tuple(v.shape)
                    for k, v in (s or {}).items()
                    if k != "step" and hasattr(v, "shape")
                ),
                None,
            )
            if shape is not None and shape != tuple(weights[i][1]):
                agree = False
                break
        if agree:
            return [weights[i][0] for i in lacking]
    return ["param %s" % (i,) for i in lacking]


# ------------------------------------------------------------------------------- scheduler


def _scheduler(src, found, out):
    step, epoch = as_number(src.meta.get("global_step")), as_number(src.meta.get("epoch"))
    if not found.schedulers:
        if found.has("scheduler"):
            out["present"].append("lr scheduler (%s)" % found.where("scheduler"))
        else:
            out["not_saved"].append(
                "lr scheduler: needed unless the trainer computes the lr from the step"
            )
        out["scheduler_step"] = None
        return
    where, sched = found.schedulers[0]
    last = as_number((sched or {}).get("last_epoch"))
    out["scheduler_step"] = last
    if last is None:
        out["present"].append("lr scheduler (%s), no step in it" % where)
    elif step is None and epoch is None:
        out["present"].append(
            "lr scheduler (%s) at step %s; the checkpoint gives no step to compare" % (where, last)
        )
    elif last == step:
        out["present"].append("lr scheduler (%s) at step %s, as the checkpoint" % (where, last))
    elif epoch is not None and last == epoch:
        out["present"].append("lr scheduler (%s) at epoch %s, as the checkpoint" % (where, last))
    else:
        out["gaps"].append(
            "lr scheduler (%s) at step %s, the checkpoint at step %s: a resume takes the lr "
            "of step %s" % (where, last, step if step is not None else epoch, last)
        )


def _scaler(found, out):
    if found.has("scaler"):
        out["present"].append("AMP grad scaler (%s)" % found.where("scaler"))
    elif found.fp16:
        out["gaps"].append(
            "no AMP grad scaler, though the checkpoint says fp16 (%s): a resume starts the loss "
            "scale afresh (2^16), and its first steps may overflow and be skipped" % found.fp16
        )
    else:
        out["not_saved"].append("AMP grad scaler: needed only by an fp16 run with GradScaler")
