#!/usr/bin/env python3
"""Checkpoint diagnostics, run *there*: "are my checkpoints corrupt?"

Standalone: the standard library and torch >= 2.1 only, Python >= 3.8. Subcommands::

    ckpt.py scan PATH [--jobs N] [--allow-global NAME]... [--unsafe-pickle] [--max-bad 20]
    ckpt.py inspect PATH [--allow-global NAME]... [--unsafe-pickle]
    ckpt.py diff A B [--top 10] [--allow-global NAME]... [--unsafe-pickle]
    ckpt.py bisect DIR [--linear] [--jobs N] [--allow-global NAME]... [--unsafe-pickle]

PATH is a file, a directory (searched recursively for *.pt, *.pth, *.bin, *.ckpt,
*.safetensors, Hugging Face ``*.index.json`` shard indexes and checkpoint directories) or a
glob (``**`` too; each real directory is entered once, so symlink loops end). Formats:
torch.save files (zip, and legacy pickle files, which cannot be memory-mapped), safetensors
(parsed and validated here: 8-byte little-endian header length, JSON header, raw data; no
safetensors package needed) and HF sharded checkpoints (``weight_map``). Directories that are
ONE checkpoint each: HF Trainer ``checkpoint-N/`` (weights + optimizer.pt + trainer_state.json),
DeepSpeed ``global_stepN/`` (model states + every ZeRO optimizer partition; ``latest`` is
checked), torch.distributed.checkpoint (``.metadata`` + ``__R_N.distcp``, read chunk by chunk
without a process group). Git LFS pointer files are named as such.

Steps: the most specific key in the file (global_step, step, iter_num, iteration, num_updates,
DeepSpeed's global_steps; one level down in train_state/trainer_state/extra_state; fairseq's
optimizer_history), else trainer_state.json beside it, else the name (checkpoint-2000,
step_2000, global_step2000, epoch=1-step=2000); ``step_key`` says which. Top-level scalars
(nanoGPT's best_val_loss, a 0-d tensor) are metadata (``scalars``), never weights.

Output: one JSON object per stdout line, flushed as it is made, each with a ``"type"``:

    plan        {files, bytes, jobs, skipped: [paths],            first record of scan/bisect
                 logs: [{path, bytes, mtime}]}                    (scan: log files met)
    progress    {path, done, total}                               tensor bytes checked in a file
    checkpoint  {path, status, ok, error, format, global_step, step_key, epoch, scalars,
                 params, tensors,
                 skipped_tensors, bytes, nan_weights, posinf_weights, neginf_weights,
                 nan_optimizer, posinf_optimizer, neginf_optimizer, negative_exp_avg_sq,
                 max_abs_weights, max_abs_optimizer, bad_tensors: [{name, section, slot, dtype,
                 numel, nan, posinf, neginf, negative, first_index, shared_with}],
                 bad_tensors_total, needs_globals, notes, seconds}
    meta        {path, global_step, step_key, epoch, error}       (bisect ordering)
    order       {order, checkpoints: [{path, global_step}]}       (bisect)
    bisect      {directory, order, mode, checkpoints, scanned, last_clean, first_bad,
                 unreadable, bad, later_clean, assumption}
    tensor      {name, section, slot, dtype, shape, numel, bytes, shared_with}   (inspect)
    inspect     {path, ok, error, format, bytes, global_step, epoch, top_keys, scalars,
                 optimizers, totals, dtypes, metadata, needs_globals, notes}
    diff        {a, b, ok, error, format_a/b, step_a/b, step_delta, epoch_a/b, lr_a/b,
                 tensors_a/b, compared, identical, only_a/b(_total), changes(_total),
                 top_weights, top_optimizer, flags(_total), rel_change, notes}
    warning     {message}
    error       {message}                                         fatal: only "done" follows
    done        {command, exit_code, seconds, ...}                last record of every command

``status`` is "clean", "bad" (non-finite values, or negative values in a second-moment
optimizer slot such as exp_avg_sq), "error" (could not be read; ``error`` says why) or
"unsupported". Counts are exact. Sections: "optimizer" is everything inside an optimizer state
dict (a dict with "state" and "param_groups", or under a key containing "optim"); "weights" is
every other floating tensor. Tensors that share storage (tied weights) are checked once: totals
count each stored value once, and ``bad_tensors`` lists every key (with ``shared_with``).
Integer and bool tensors are not checked (``skipped_tensors``). Float values that JSON cannot
hold are written as the strings "nan", "inf", "-inf".

Exit status: 0 all clean, 1 findings (non-finite values), 2 something could not be read.

Safety: files are loaded with ``weights_only=True`` (no code from the file runs). When that
refuses a file, the record names the globals it needs; ``--allow-global NAME`` imports NAME's
module and allow-lists it, ``--unsafe-pickle`` loads plain pickle (arbitrary code; a warning
record says so). Memory: zip checkpoints are memory-mapped and each checked chunk's pages are
released again (``madvise(MADV_DONTNEED)``), so resident memory stays far below the file size.
Speed: one ``aminmax`` per chunk of 4M values tells a clean chunk (it propagates NaN and shows
+-Inf as min or max); only chunks with bad values are counted element by element.

Processes: scan and bisect discover files here (no torch) and check them in one worker
process (``_worker``, an internal subcommand) that runs ``--jobs`` threads, one file each at a
time. A file that crashes the worker costs only itself: the files the worker had open are
checked again alone in a fresh one. inspect and diff run in this process.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import importlib
import importlib.util
import io
import json
import math
import mmap
import os
import pickle
import queue
import re
import struct
import subprocess
import sys
import threading
import time
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its shipped sibling modules
from protocol import (  # the record protocol, shared with the local side
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    emit,
    emit_line,
    fail,
    flush,
    is_secret_name,
    mask,
)

torch = None  # type: ignore  # imported by _import_torch(): discovery needs no torch

CKPT_EXTS = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")
INDEX_SUFFIX = ".index.json"
# Files an HF Trainer writes beside the weights that are not model/optimizer state.
AUX_FILES = re.compile(r"^(training_args\.bin|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth)$")
OPTIM_KEY = re.compile(r"optim", re.IGNORECASE)
# Step keys, most specific first: Lightning/HF/Accelerate, torchtitan, nanoGPT, Megatron,
# fairseq, DeepSpeed's model states; "epoch" only when nothing finer is there.
STEP_KEYS = (
    "global_step",
    "step",
    "iter_num",
    "iteration",
    "num_updates",
    "global_steps",
    "train_step",
    "iter",
    "steps",
)
EPOCH_KEYS = ("epoch", "epochs")
# Containers one level down that trainers keep their counters in (torchtitan, fairseq, ...).
STATE_CONTAINERS = ("train_state", "trainer_state", "extra_state", "state", "progress", "meta")
# A step in a checkpoint's own name or its directory's: checkpoint-2000, step_2000,
# global_step2000, iter_2000, Lightning's epoch=3-step=1000.ckpt, torchtitan's step-1000.
NAME_STEP = re.compile(
    r"(?:^|[^a-z])(?:global_step|checkpoint|step|iter|iteration|ckpt)[-_=]?(\d+)(?=$|[^\d])", re.I
)
LFS_POINTER = b"version https://git-lfs"
# Optimizer slots that can never be negative (second moments and accumulators).
NONNEG_SLOTS = frozenset(
    ["exp_avg_sq", "max_exp_avg_sq", "square_avg", "exp_avg_sq_row", "exp_avg_sq_col", "sum"]
)
WEIGHTS, OPTIMIZER = "weights", "optimizer"
SECTIONS = (WEIGHTS, OPTIMIZER)
# The per-section counts of a "checkpoint" record: nan_weights, posinf_weights, ...
NONFINITE_KEYS = tuple("%s_%s" % (w, s) for s in SECTIONS for w in ("nan", "posinf", "neginf"))
DEFAULT_CHUNK = 1 << 22  # elements per checked chunk: 16 MiB of float32
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024
ST_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
    "C128": "complex128",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}
PROGRESS_EVERY_S = 0.5

# ------------------------------------------------------------------------------------ output


class Fatal(Exception):
    """The command cannot go on at all (bad arguments, no torch): one "error" record, exit 2."""


class LoadError(Exception):
    """A checkpoint could not be read; ``reason`` says why and what to do."""

    def __init__(self, reason, needs_globals=(), fmt=None):
        super().__init__(reason)
        self.reason = reason
        self.needs_globals = list(needs_globals)
        self.fmt = fmt


class Unscannable(Exception):
    """This torch cannot check values of this dtype on CPU."""


def _short(exc, limit=300):
    """One readable line out of an exception (torch's messages are long and colored)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    m = re.search(r"WeightsUnpickler error:\s*(.+)", text, re.S)
    if m:
        text = m.group(1)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _euid():
    return os.geteuid() if hasattr(os, "geteuid") else -1


# ------------------------------------------------------------------------------------ torch


def _import_torch():
    global torch
    if torch is not None:
        return torch
    warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")
    # safetensors data is mapped read-only on purpose: nothing here writes to it
    warnings.filterwarnings("ignore", message=".*given buffer is not writable.*")
    warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated.*")
    try:
        import torch as _torch
    except Exception as e:  # ImportError, or a broken install raising anything
        raise Fatal(
            "cannot import torch with %s: %s; install torch >= 2.1 in the environment "
            "that runs this script" % (sys.executable, _short(e))
        ) from e
    version = tuple(int(x) for x in re.findall(r"\d+", _torch.__version__)[:2])
    if version < (2, 1):
        raise Fatal(
            "torch %s is too old: checkpoint diagnostics need torch >= 2.1 (mmap loading)"
            % _torch.__version__
        )
    torch = _torch
    return torch


def _is_scalar_dtype(dtype):
    return not dtype.is_complex and "float8" not in str(dtype)  # .item() gives a number


def _is_checkable(dtype):
    return dtype.is_floating_point or dtype.is_complex


def _as_number(v):
    """An int/float out of a step-like value (python number or 1-element tensor), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if torch is not None and isinstance(v, torch.Tensor) and v.numel() == 1:
        x = v.item()
        if isinstance(x, float) and x.is_integer():
            return int(x)
        return x if isinstance(x, (int, float)) else None
    return None


# ------------------------------------------------------------------------ memory release


RELEASE_MIN = 64 << 20  # files smaller than this keep their checked pages (the OS drops them)


class _Releaser:
    """Hands checked pages of a torch mmap back to the kernel (Linux; a no-op elsewhere).

    Only ranges that /proc/self/maps shows as mapped from ``path`` are released, so heap
    memory (a legacy, non-mmap load) is never touched. The mapping is private and never
    written, so released pages simply read back from the file if they are touched again.
    """

    MADV_DONTNEED = 4

    def __init__(self, path):
        self.ranges = []
        self.madvise = None
        if not sys.platform.startswith("linux"):
            return
        try:
            real = os.path.realpath(path)
            with open("/proc/self/maps") as f:
                for line in f:
                    parts = line.rstrip("\n").split(None, 5)
                    if len(parts) == 6 and parts[5] == real:
                        lo, hi = parts[0].split("-")
                        self.ranges.append((int(lo, 16), int(hi, 16)))
            if self.ranges:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.madvise
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                fn.restype = ctypes.c_int
                self.madvise = fn
                self.page = mmap.PAGESIZE
        except (OSError, AttributeError, ValueError):
            self.madvise = None

    def __call__(self, addr, nbytes):
        if self.madvise is None or nbytes <= 0:
            return
        start = addr - addr % self.page
        end = addr + nbytes
        for lo, hi in self.ranges:
            if lo <= start and end <= hi:
                self.madvise(start, end - start, self.MADV_DONTNEED)
                return


def _advise_dontneed(mm, offset, length):
    """Release pages of a Python mmap (safetensors) after they were checked."""
    if not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = offset - offset % mmap.PAGESIZE
    try:
        mm.madvise(mmap.MADV_DONTNEED, start, offset + length - start)
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------- sources


class Entry(object):
    """One named tensor of a checkpoint; ``chunks(n)`` yields (flat offset, 1-D tensor)."""

    __slots__ = ("_chunks", "dtype", "key", "name", "nbytes", "numel", "section", "shape", "slot")

    def __init__(self, name, section, slot, dtype, shape, numel, nbytes, key, chunks):
        self.name = name
        self.section = section
        self.slot = slot
        self.dtype = dtype
        self.shape = shape
        self.numel = numel
        self.nbytes = nbytes
        self.key = key
        self._chunks = chunks

    def chunks(self, n):
        return self._chunks(n)


class Source(object):
    """An opened checkpoint: its entries (no tensor data read yet) and what it says about itself.

    ``problems`` are partial failures (a truncated tail, a missing shard): the entries that
    could be read are still there, and the checkpoint's verdict becomes "error".
    """

    def __init__(self, path, fmt, nbytes):
        self.path = path
        self.format = fmt
        self.bytes = nbytes
        self.entries = []
        self.meta = {
            "global_step": None,
            "step_key": None,
            "epoch": None,
            "top_keys": [],
            "scalars": {},
        }
        self.optimizers = []
        self.notes = []
        self.problems = []
        self.needs_globals = []
        self._close = []
        self.obj = None

    def close(self):
        self.entries = []
        self.obj = None
        for fn in reversed(self._close):
            try:
                fn()
            except (BufferError, OSError, ValueError):
                pass  # a chunk tensor still refers to it: the mapping goes with the garbage
        self._close = []


def _section_for_name(name):
    return OPTIMIZER if any(OPTIM_KEY.search(p) for p in name.split(".")) else WEIGHTS


def _join(prefix, key):
    return key if not prefix else prefix + "." + key


def _chunk_len(shape, n):
    """Elements per chunk: about ``n``, in whole rows, so equal shapes chunk alike (diff)."""
    if len(shape) <= 1:
        return n
    row = 1
    for s in shape[1:]:
        row *= s
    return max(1, n // row) * row if row else n


def _tensor_chunks(t, n, release):
    numel = t.numel()
    if numel == 0:
        return
    if t.dim() == 0:
        yield 0, t.reshape(1)
        return
    step = _chunk_len(t.shape, n)
    if t.is_contiguous():
        flat = t.view(-1)
        for i in range(0, numel, step):
            c = flat[i : i + step]
            yield i, c
            if release is not None:
                release(c.data_ptr(), c.numel() * c.element_size())
        return
    # Non-contiguous (a saved view): copy bounded row blocks, never the whole tensor.
    row = numel // t.shape[0]
    per = step // row
    for i in range(0, t.shape[0], per):
        yield i * row, t[i : i + per].reshape(-1)


# Names that mark a top-level scalar of a flat state dict as metadata rather than a weight.
META_NAME = re.compile(
    r"(?i)step|epoch|iter|loss|best|^lr$|val_|_val|acc|score|tokens|samples|seed"
)


def top_scalars(obj):
    """The top-level entries of a loaded checkpoint that are metadata, not weights: 0-d tensors
    (nanoGPT's ``best_val_loss``, torchtitan's ``step``) beside nested state, or whose name says
    so in a flat state dict. {key: tensor}."""
    if not isinstance(obj, dict):
        return {}
    nested = any(isinstance(v, (dict, list, tuple)) for v in obj.values())
    return {
        str(k): v
        for k, v in obj.items()
        if isinstance(v, torch.Tensor) and v.dim() == 0 and (nested or META_NAME.search(str(k)))
    }


def _walk(obj, src, release):
    """Collect every tensor in a loaded object as an Entry, with its section and slot.

    Top-level scalars (:func:`top_scalars`) are left out: they are metadata."""
    seen = set()
    meta_keys = set(top_scalars(obj))
    nn = getattr(torch, "nn", None)
    optim = getattr(torch, "optim", None)

    def rec(o, path, section, slot, depth):
        if isinstance(o, torch.Tensor):
            numel = o.numel()
            key = None
            if numel and o.device.type == "cpu":
                key = (o.data_ptr(), tuple(o.shape), tuple(o.stride()), str(o.dtype))
            data = o.detach()  # saved parameters may require grad: nothing here needs it
            src.entries.append(
                Entry(
                    path or "<tensor>",
                    section,
                    slot,
                    o.dtype,
                    tuple(o.shape),
                    numel,
                    numel * o.element_size(),
                    key,
                    lambda n, t=data: _tensor_chunks(t, n, release),
                )
            )
            return
        if depth > 64 or id(o) in seen:
            return
        if nn is not None and isinstance(o, nn.Module):  # only with --unsafe-pickle
            seen.add(id(o))
            rec(o.state_dict(keep_vars=True), path, section, slot, depth + 1)
            return
        if optim is not None and isinstance(o, optim.Optimizer):
            seen.add(id(o))
            rec(o.state_dict(), path, OPTIMIZER, slot, depth + 1)
            return
        if isinstance(o, dict):
            seen.add(id(o))
            is_opt = "state" in o and "param_groups" in o
            if is_opt:
                src.optimizers.append((path, o))
            for k, v in o.items():
                ks = str(k)
                if depth == 0 and ks in meta_keys:
                    continue
                sec = (
                    OPTIMIZER
                    if (section == OPTIMIZER or is_opt or OPTIM_KEY.search(ks))
                    else section
                )
                rec(v, _join(path, ks), sec, ks, depth + 1)
        elif isinstance(o, (list, tuple)):
            seen.add(id(o))
            for i, v in enumerate(o):
                rec(v, _join(path, str(i)), section, slot, depth + 1)
        elif hasattr(o, "__dict__") and not isinstance(o, type) and not callable(o):
            seen.add(id(o))  # an allow-listed or unpickled object (e.g. argparse.Namespace)
            rec(vars(o), path, section, slot, depth + 1)

    rec(obj, "", WEIGHTS, None, 0)


def _first_key(d, keys):
    """(value, key) of the first of ``keys`` in dict ``d`` holding a number, else (None, None)."""
    for k in keys:
        if k in d and _as_number(d[k]) is not None:
            return _as_number(d[k]), k
    return None, None


def find_step(obj):
    """(step, key path, epoch) of a loaded checkpoint: the most specific step key at the top,
    else one level down in a trainer's state container (or fairseq's last optimizer_history
    entry); the epoch alike."""
    if not isinstance(obj, dict):
        return None, None, None
    places = [("", obj)]
    for c in STATE_CONTAINERS:
        if isinstance(obj.get(c), dict):
            places.append((c + ".", obj[c]))
    hist = obj.get("optimizer_history")
    if isinstance(hist, list) and hist and isinstance(hist[-1], dict):
        places.append(("optimizer_history[-1].", hist[-1]))
    step = key = epoch = None
    for prefix, d in places:
        v, k = _first_key(d, STEP_KEYS)
        if v is not None and key is None:
            step, key = v, prefix + k
        e, _ = _first_key(d, EPOCH_KEYS)
        if e is not None and epoch is None:
            epoch = e
    return step, key, epoch


def _fill_meta(src, obj):
    if isinstance(obj, dict):
        keys = [str(k) for k in obj]
        src.meta["top_keys"] = keys[:50]
        step, key, epoch = find_step(obj)
        if step is not None:
            src.meta["global_step"], src.meta["step_key"] = step, key
        src.meta["epoch"] = epoch
        scalars = {}
        meta = top_scalars(obj)
        if meta:
            src.notes.append(
                "top-level scalar%s %s: metadata, not weights"
                % ("s" if len(meta) > 1 else "", ", ".join(sorted(meta)[:8]))
            )
        for k, v in obj.items():
            if str(k) in meta:
                x = meta[str(k)].item() if _is_scalar_dtype(meta[str(k)].dtype) else None
                scalars[str(k)] = x
            elif isinstance(v, (bool, int, float)) or v is None:
                scalars[str(k)] = v
            elif isinstance(v, str):
                v = "***" if is_secret_name(k) else mask(v)  # strings travel back with inspect
                scalars[str(k)] = v if len(v) <= 200 else v[:197] + "..."
            if len(scalars) >= 30:
                break
        src.meta["scalars"] = scalars
        if not src.entries:
            raise LoadError(
                "holds no tensors (top-level keys: %s); expected a state dict or a dict with "
                "model_state_dict / optimizer_state_dict" % (", ".join(keys[:12]) or "none")
            )
    elif not src.entries:
        raise LoadError(
            "holds a %s with no tensors; expected a state dict or a dict with "
            "model_state_dict / optimizer_state_dict" % type(obj).__name__
        )


def _sidecar_step(src, p=None):
    """HF Trainer writes trainer_state.json beside the weights: use its step and epoch."""
    if src.meta["global_step"] is not None:
        return
    p = p or os.path.join(os.path.dirname(os.path.abspath(src.path)), "trainer_state.json")
    try:
        with open(p) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return
    if isinstance(state, dict):
        if _as_number(state.get("global_step")) is not None:
            src.meta["global_step"] = _as_number(state.get("global_step"))
            src.meta["step_key"] = "trainer_state.json:global_step"
        if src.meta["epoch"] is None and _as_number(state.get("epoch")) is not None:
            src.meta["epoch"] = _as_number(state.get("epoch"))


def _unsafe_globals(path, is_zip, exc):
    names = []
    gu = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if is_zip and gu is not None:
        try:
            names = list(gu(path))
        except Exception:  # the listing is a courtesy: fall back to the message
            names = []
    if not names:
        names = re.findall(r"GLOBAL ([\w.]+) was not an allowed global", str(exc))
    return names


def _open_torch(path, size, is_zip, opts):
    try:
        return _open_torch_unchecked(path, size, is_zip, opts)
    except LoadError as e:
        e.fmt = e.fmt or ("torch" if is_zip else "torch-legacy")
        raise


def _open_torch_unchecked(path, size, is_zip, opts):
    src = Source(path, "torch" if is_zip else "torch-legacy", size)
    if is_zip:
        try:
            with zipfile.ZipFile(path) as zf:
                infos = zf.infolist()
                names = [i.filename for i in infos]
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise LoadError(
                "truncated or damaged zip archive: %s; the file is %d bytes: the save was "
                "interrupted or the copy is incomplete"
                % (
                    "its central directory (at the end) is missing"
                    if "not a zip file" in str(e)
                    else _short(e),
                    size,
                )
            ) from e
        if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise LoadError("a zip archive, but not a torch.save checkpoint (no data.pkl inside)")
        packed = [i for i in infos if i.compress_type != zipfile.ZIP_STORED]
        if packed:
            raise LoadError(
                "zip entry %s is compressed (method %d%s); torch.save stores every entry "
                "uncompressed, so this archive was repacked (e.g. by `zip`) and its tensor data "
                "cannot be read in place; re-save it with torch.save, or unpack and re-zip it "
                "with `zip -0`"
                % (
                    packed[0].filename,
                    packed[0].compress_type,
                    ", %d entries in all" % len(packed) if len(packed) > 1 else "",
                )
            )
    else:
        src.notes.append("legacy (non-zip) torch.save format: loaded into memory, not mmap")
    if opts.unsafe_pickle:
        src.notes.append("loaded with --unsafe-pickle (weights_only=False)")
    try:
        obj = torch.load(path, map_location="cpu", mmap=is_zip, weights_only=not opts.unsafe_pickle)
    except pickle.UnpicklingError as e:
        needs = [] if opts.unsafe_pickle else _unsafe_globals(path, is_zip, e)
        if needs and _inert_globals(needs):
            src.notes.append(
                "DeepSpeed objects read as inert placeholders (deepspeed is not imported): %s"
                % ", ".join(n.rsplit(".", 1)[-1] for n in needs)
            )
            return _load_again(path, src, is_zip)
        if needs:
            raise LoadError(
                "weights-only load refused %s: %s. If you trust this file, allow %s with %s "
                "(imports the module only), or load it as plain pickle with --unsafe-pickle "
                "(runs any code the file holds)"
                % (
                    "a global" if len(needs) == 1 else "%d globals" % len(needs),
                    ", ".join(needs),
                    "it" if len(needs) == 1 else "them",
                    " ".join("--allow-global " + n for n in needs),
                ),
                needs_globals=needs,
            ) from e
        raise LoadError(
            "the pickle inside is damaged or not a torch checkpoint (%s)" % _short(e)
        ) from e
    except MemoryError:
        raise LoadError(
            "out of memory while loading (legacy files cannot be memory-mapped)"
        ) from None
    except Exception as e:  # torch raises RuntimeError/EOFError/KeyError... for damage
        raise LoadError("torch.load failed: %s: %s" % (type(e).__name__, _short(e))) from e
    return _adopt_loaded(path, src, obj, is_zip)


def _adopt_loaded(path, src, obj, is_zip):
    src.obj = obj
    # Releasing pages pays off for large files only; finding the mapping reads /proc/self/maps
    # (~0.6 ms with torch loaded), which would dominate a scan of many small files.
    release = _Releaser(path) if is_zip and src.bytes >= RELEASE_MIN else None
    _walk(obj, src, release)
    _fill_meta(src, obj)
    return src


def _load_again(path, src, is_zip):
    try:
        obj = torch.load(path, map_location="cpu", mmap=is_zip, weights_only=True)
    except Exception as e:
        raise LoadError("torch.load failed: %s: %s" % (type(e).__name__, _short(e))) from e
    return _adopt_loaded(path, src, obj, is_zip)


class _Inert(object):
    """Stands in for an object of a training library (DeepSpeed's LossScaler, ZeroStageEnum,
    fragment_address) in its checkpoints: it keeps what was pickled and runs nothing."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


INERT_PREFIXES = ("deepspeed.",)
_INERT = {}


def _inert_globals(names):
    """Allow-list inert stand-ins for ``names`` when all belong to a known training library
    whose checkpoint layout is read here (DeepSpeed); False when some do not, or when this
    torch (< 2.5) cannot map a name to a stand-in."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None or not all(n.startswith(INERT_PREFIXES) for n in names):
        return False
    new = [n for n in names if n not in _INERT]
    for n in new:
        _INERT[n] = type(n.rsplit(".", 1)[-1], (_Inert,), {})
    try:
        add([(_INERT[n], n) for n in new])
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def _st_dtype(code):
    name = ST_DTYPES.get(code)
    return getattr(torch, name, None) if name else None


def _st_chunks(mm, start, dtype, itemsize, numel, shape, n):
    n = _chunk_len(shape, n)
    for i in range(0, numel, n):
        cnt = min(n, numel - i)
        off = start + i * itemsize
        t = torch.frombuffer(mm, dtype=torch.uint8, count=cnt * itemsize, offset=off)
        if dtype != torch.uint8:
            t = t.view(dtype)
        yield i, t
        del t
        _advise_dontneed(mm, off, cnt * itemsize)


def _read_safetensors_header(path, size):
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise LoadError("truncated: %d bytes, shorter than a safetensors header" % size)
        (n,) = struct.unpack("<Q", head)
        if n > SAFETENSORS_MAX_HEADER:
            raise LoadError("not a safetensors file: header length %d is implausible" % n)
        if 8 + n > size:
            raise LoadError(
                "truncated: the safetensors header needs %d bytes but the file has %d"
                % (8 + n, size)
            )
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise LoadError("damaged safetensors header (not JSON: %s)" % _short(e)) from e
    if not isinstance(header, dict):
        raise LoadError("damaged safetensors header (not a JSON object)")
    return header, 8 + n


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _st_invalid(info):
    """Why a safetensors header entry is no valid tensor description (None if it is)."""
    if not isinstance(info, dict) or "data_offsets" not in info:
        return "not a tensor description"
    offs, shape = info.get("data_offsets"), info.get("shape", [])
    if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)):
        return "data_offsets %r are not two integers" % (offs,)
    if offs[0] < 0 or offs[1] < offs[0]:
        return "data_offsets %r are negative or end before they begin" % (offs,)
    if not (isinstance(shape, list) and all(_is_int(d) for d in shape)):
        return "shape %r is not a list of integers" % (shape,)
    if any(d < 0 for d in shape):
        return "shape %r has a negative dimension" % (shape,)
    return None


def _st_check_layout(src, items):
    """Tensors must tile the data region: no two share bytes, no hole between them."""
    prev_end, prev = 0, None
    for begin, end, name, _ in items:
        if begin < prev_end:
            src.problems.append(
                "%s [%d, %d) overlaps %s (ends at %d): the header is damaged"
                % (name, begin, end, prev, prev_end)
            )
            return
        if begin > prev_end:
            src.problems.append(
                "%d bytes before %s are not part of any tensor (a hole at %d): the header is "
                "damaged" % (begin - prev_end, name, prev_end)
            )
            return
        prev_end, prev = end, name


def _open_safetensors(path, size, header_only=False):
    src = Source(path, "safetensors", size)
    header, data_start = _read_safetensors_header(path, size)
    meta = header.pop("__metadata__", None)
    if isinstance(meta, dict):
        src.meta["metadata"] = meta
        for k in STEP_KEYS:
            if k in meta:
                try:
                    src.meta["global_step"] = int(meta[k])
                    break
                except (TypeError, ValueError):
                    pass
    mm = None
    if not header_only and size > data_start:
        f = open(path, "rb")
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        finally:
            f.close()
        src._close.append(mm.close)
    items = []
    for name, info in header.items():
        why = _st_invalid(info)
        if why:
            src.problems.append("header entry %r: %s" % (name, why))
            continue
        items.append((info["data_offsets"][0], info["data_offsets"][1], name, info))
    items.sort(key=lambda x: (x[0], x[1]))
    _st_check_layout(src, items)
    missing = []
    need = data_start
    itemsizes = {}
    for begin, end, name, info in items:
        dtype = _st_dtype(info.get("dtype"))
        shape = tuple(info.get("shape", ()))
        need = max(need, data_start + end)
        if dtype is None:
            src.notes.append(
                "%s: dtype %s unknown to this torch: not checked" % (name, info.get("dtype"))
            )
            continue
        numel = 1
        for s in shape:
            numel *= s
        if dtype not in itemsizes:
            itemsizes[dtype] = torch.empty((), dtype=dtype).element_size()
        itemsize = itemsizes[dtype]
        if end - begin != numel * itemsize:
            src.problems.append(
                "%s: header gives %d bytes, but %s %s needs %d"
                % (name, end - begin, info.get("dtype"), list(shape), numel * itemsize)
            )
            continue
        if data_start + end > size:
            missing.append(name)
            continue
        chunks = None
        if mm is not None:

            def chunks(n, s=data_start + begin, d=dtype, i=itemsize, c=numel, sh=shape):
                return _st_chunks(mm, s, d, i, c, sh, n)

        src.entries.append(
            Entry(
                name,
                _section_for_name(name),
                name.rsplit(".", 1)[-1],
                dtype,
                shape,
                numel,
                numel * itemsize,
                None,
                chunks,
            )
        )
    if missing:
        src.problems.append(
            "truncated: %d of %d tensors lie past the end of the file (it has %d bytes, the "
            "header needs %d); first missing: %s"
            % (len(missing), len(items), size, need, missing[0])
        )
    if not items:
        src.problems.append("the safetensors header lists no tensors")
    return src


def _sniff(path):
    """(size, first 16 bytes); LoadError for what cannot be opened."""
    if os.path.isdir(path):
        raise LoadError("is a directory, not a checkpoint file")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(16)
    except PermissionError:
        raise LoadError(
            "permission denied: uid %d cannot read it; fix the file's permissions or scan "
            "as its owner" % _euid()
        ) from None
    except FileNotFoundError:
        raise LoadError("no such file (removed while scanning, or a dangling symlink)") from None
    except OSError as e:
        raise LoadError("cannot read: %s" % (e.strerror or e)) from e
    return size, head


def _looks_like_safetensors(head, size):
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and 0 < n <= SAFETENSORS_MAX_HEADER


def _lfs_pointer(path, size):
    """LoadError for a Git LFS pointer file (a clone without ``git lfs pull``)."""
    try:
        with open(path, "rb") as f:
            text = f.read(1024).decode("utf-8", "replace")
    except OSError:
        text = ""
    if not text.startswith(LFS_POINTER.decode()):
        return LoadError("not a checkpoint: a %d-byte text file" % size, fmt="text")
    m = re.search(r"^size (\d+)", text, re.M)
    real = " (the real file has %s bytes)" % m.group(1) if m else ""
    return LoadError(
        "a Git LFS pointer file (%d bytes), not the checkpoint%s: the repository was cloned "
        "without its LFS content; run `git lfs pull` in the repository (or `git lfs pull "
        "--include=%s`)" % (size, real, os.path.basename(path)),
        fmt="git-lfs-pointer",
    )


def _open_file(path, opts, header_only=False, sidecar=True):
    size, head = _sniff(path)
    if size == 0:
        raise LoadError(
            "empty file (0 bytes): the save was interrupted before any data was written"
        )
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        src = _open_torch(path, size, True, opts)
    elif _looks_like_safetensors(head, size):  # before pickle: a header length may start 0x80
        try:
            src = _open_safetensors(path, size, header_only=header_only)
        except LoadError as e:
            e.fmt = "safetensors"
            raise
    elif head.startswith(b"\x80"):
        src = _open_torch(path, size, False, opts)
    elif head.startswith(LFS_POINTER[:14]) and size < 1024:
        raise _lfs_pointer(path, size)
    else:
        raise LoadError(
            "not a checkpoint: neither a torch.save zip, a legacy torch pickle nor safetensors "
            "(%d bytes, starting %r)" % (size, head[:8])
        )
    if sidecar:
        _sidecar_step(src)
    return src


def _open_index(path, opts, header_only=False):
    try:
        with open(path) as f:
            index = json.load(f)
    except PermissionError:
        raise LoadError("permission denied: uid %d cannot read the index" % _euid()) from None
    except (OSError, ValueError) as e:
        raise LoadError("cannot read the shard index: %s" % _short(e)) from e
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict):
        raise LoadError('not a Hugging Face shard index: no "weight_map" object')
    base = os.path.dirname(path)
    shards = sorted(set(str(v) for v in wmap.values()))
    src = Source(path, "hf-sharded", 0)
    src.notes.append("%d shards" % len(shards))
    for shard in shards:
        p = os.path.join(base, shard)
        expected = [k for k, v in wmap.items() if v == shard]
        if not os.path.exists(p):
            src.problems.append("shard %s is missing (%d tensors)" % (shard, len(expected)))
            continue
        try:
            part = _open_file(p, opts, header_only=header_only)
        except LoadError as e:
            src.problems.append("shard %s: %s" % (shard, e.reason))
            src.needs_globals.extend(e.needs_globals)
            continue
        names = set(e.name for e in part.entries)
        absent = [k for k in expected if k not in names]
        if absent and not part.problems:
            src.problems.append(
                "shard %s lacks %d tensors the index puts there (first: %s)"
                % (shard, len(absent), absent[0])
            )
        _adopt(src, part, "shard " + shard)
    _sidecar_step(src)
    if isinstance(index.get("metadata"), dict):
        src.meta["metadata"] = index["metadata"]
    return src


def _adopt(src, part, label, prefix="", section=None):
    """Make ``part`` (an opened file) a part of the composite checkpoint ``src``."""
    src.bytes += part.bytes
    src._close.append(part.close)
    src.problems.extend("%s: %s" % (label, p) for p in part.problems)
    src.needs_globals.extend(part.needs_globals)
    src.notes.extend("%s: %s" % (label, n) for n in part.notes)
    for e in part.entries:
        e.name = prefix + e.name
        if section is not None:
            e.section = section
        src.entries.append(e)
    src.optimizers.extend((prefix + p, o) for p, o in part.optimizers)
    for k in ("global_step", "step_key", "epoch"):
        if src.meta[k] is None:
            src.meta[k] = part.meta[k]
    for k, v in part.meta["scalars"].items():
        if len(src.meta["scalars"]) < 30:
            src.meta["scalars"].setdefault(prefix + k, v)


def _open_part(src, path, label, opts, header_only, prefix="", section=None):
    """Open one file of a checkpoint directory into ``src``; a failure is a problem of src."""
    if not os.path.exists(path):
        src.problems.append("%s is missing" % label)
        return
    try:
        part = _open_index(path, opts, header_only) if path.endswith(INDEX_SUFFIX) else None
        part = part or _open_file(path, opts, header_only=header_only, sidecar=False)
    except LoadError as e:
        src.problems.append("%s: %s" % (label, e.reason))
        src.needs_globals.extend(e.needs_globals)
        return
    _adopt(src, part, label, prefix, section)


# ------------------------------------------------------------------- checkpoint directories

HF_WEIGHTS = (
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
HF_OPTIMIZER = ("optimizer.pt", "optimizer.bin")
HF_DIR = re.compile(r"^checkpoint-\d+$")
DS_MODEL = re.compile(r"^(?:zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$")
DS_OPTIM = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")
DCP_FILE = re.compile(r"^__\d+_\d+\.distcp$")


def classify_dir(path, names=None):
    """The item for a directory that is ONE checkpoint (DCP, DeepSpeed, HF Trainer), else None.

    ``files`` are the files the checkpoint owns (a scan does not report them on their own).
    """
    if names is None:
        try:
            names = os.listdir(path)
        except OSError:
            return None
    names = sorted(names)
    join = lambda n: os.path.join(path, n)  # noqa: E731
    if ".metadata" in names:
        files = [join(".metadata")] + [join(n) for n in names if DCP_FILE.match(n)]
        fmt = "dcp"
    elif any(DS_MODEL.match(n) or DS_OPTIM.match(n) for n in names):
        files = [join(n) for n in names if DS_MODEL.match(n) or DS_OPTIM.match(n)]
        fmt = "deepspeed"
    elif "trainer_state.json" in names or HF_DIR.match(os.path.basename(path.rstrip("/"))):
        weights = _hf_weights(names)
        if not weights:
            return None
        files = [join(n) for n in weights + [n for n in HF_OPTIMIZER if n in names][:1]]
        for w in weights:
            if w.endswith(INDEX_SUFFIX):
                files += _index_item(join(w))["files"]
        fmt = "hf-trainer"
    else:
        return None
    size = 0
    for p in files:  # tensor files only, as the scan counts them (not .metadata, not an index)
        try:
            if not p.endswith((INDEX_SUFFIX, ".metadata")):
                size += os.path.getsize(p)
        except OSError:
            pass
    return {"kind": "dir", "format": fmt, "path": path, "bytes": size, "files": files}


def _hf_weights(names):
    """The weights files of an HF checkpoint directory: an index and its shards, or one file."""
    for w in HF_WEIGHTS:
        if w in names:
            return [w]
    return [n for n in names if n.endswith(".safetensors")][:1]


def _open_hf_trainer(path, opts, header_only):
    """HF Trainer's checkpoint-N/: weights + optimizer.pt as ONE checkpoint, step from
    trainer_state.json (scheduler.pt, scaler.pt, rng_state*.pth hold no model state)."""
    src = Source(path, "hf-trainer", 0)
    names = sorted(os.listdir(path))
    for w in _hf_weights(names):
        _open_part(src, os.path.join(path, w), w, opts, header_only)
    opt = [n for n in HF_OPTIMIZER if n in names]
    if opt:
        _open_part(
            src, os.path.join(path, opt[0]), opt[0], opts, header_only, "optimizer.", OPTIMIZER
        )
    else:
        src.notes.append("no optimizer.pt: weights only (save_only_model?)")
    src.meta["global_step"] = src.meta["step_key"] = None  # the trainer's own count wins
    _sidecar_step(src, os.path.join(path, "trainer_state.json"))
    return src


def _open_deepspeed(path, opts, header_only):
    """DeepSpeed's global_stepN/: model states (weights) and every ZeRO optimizer partition
    (fp32 master copy and Adam moments) as ONE checkpoint; the step from the model states'
    ``global_steps``, else the directory's name; ``latest`` beside it is checked."""
    src = Source(path, "deepspeed", 0)
    names = sorted(os.listdir(path))
    for n in names:
        if DS_MODEL.match(n):
            _open_part(src, os.path.join(path, n), n, opts, header_only)
    parts = [(int(DS_OPTIM.match(n).group(1)), n) for n in names if DS_OPTIM.match(n)]
    for rank, n in sorted(parts):
        prefix = "rank%d." % rank if len(parts) > 1 else ""
        _open_part(src, os.path.join(path, n), n, opts, header_only, prefix, OPTIMIZER)
    if parts:
        src.notes.append("%d ZeRO optimizer partition(s)" % len(parts))
        if not any(e.section == WEIGHTS and e.numel for e in src.entries):
            src.notes.append(
                "ZeRO-3: the model states hold no weights; the fp32 partitions "
                "(fp32_flat_groups, optimizer section) are the model's values"
            )
    latest = _ds_latest(os.path.dirname(os.path.abspath(path)))
    if latest is not None and latest == os.path.basename(path.rstrip("/")):
        src.notes.append("`latest` names this checkpoint")
    return src


def _ds_latest(parent):
    """The tag in DeepSpeed's ``latest`` file in ``parent`` (None if there is none)."""
    try:
        with open(os.path.join(parent, "latest")) as f:
            return f.read(256).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def open_source(path, opts, header_only=False):
    """Open one checkpoint (a file, an HF index, or a checkpoint directory: DCP, DeepSpeed,
    HF Trainer) without reading tensor data; LoadError if it is none of them."""
    _import_torch()
    if os.path.isdir(path):
        item = classify_dir(path)
        if item is None:
            raise LoadError(
                "is a directory, not a checkpoint (no DCP .metadata, DeepSpeed "
                "model/optimizer states, or HF Trainer weights in it)"
            )
        opener = {"dcp": _open_dcp, "deepspeed": _open_deepspeed, "hf-trainer": _open_hf_trainer}
        return opener[item["format"]](path, opts, header_only)
    if path.endswith(INDEX_SUFFIX):
        return _open_index(path, opts, header_only=header_only)
    return _open_file(path, opts, header_only=header_only)


# ----------------------------------------------------------- torch.distributed.checkpoint

# What a DCP .metadata pickle may name: torch's own metadata dataclasses and plain values.
DCP_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.filesystem",
    "torch.distributed.checkpoint.planner",
)


def _path_str(*parts):
    return "/".join(str(p) for p in parts)


def _layout(name):
    layout = getattr(torch, str(name).replace("torch.", "", 1), None)
    if not isinstance(layout, torch.layout):
        raise pickle.UnpicklingError("unknown layout %r" % (name,))
    return layout


class _DcpRecord(object):
    """Stands in for DCP's metadata dataclasses (Metadata, TensorStorageMetadata,
    MetadataIndex, _StorageInfo, ...): holds their fields and runs nothing. Importing the real
    ones would import torch.distributed.checkpoint (~0.5 s), for plain records."""

    def __init__(self, *args):
        self.args = args  # an Enum member: _MEM_FORMAT_ENCODING(0)

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state  # TensorProperties pickles a tuple: (dtype, layout, ...)


_DCP_CLASSES = {}


def _dcp_dtype(props):
    dtype = getattr(props, "dtype", None)
    if dtype is None and isinstance(getattr(props, "state", None), tuple):
        dtype = props.state[0]
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


class _DcpMetaUnpickler(pickle.Unpickler):
    """Reads .metadata without running code from it: only DCP's metadata classes (as inert
    records), torch.Size, dtypes and layouts may be named (torch itself uses pickle.load)."""

    def find_class(self, module, name):
        if module in DCP_MODULES and re.match(r"^_?[A-Z][A-Za-z_]*$", name):
            key = module + "." + name
            if key not in _DCP_CLASSES:
                _DCP_CLASSES[key] = type(name, (_DcpRecord,), {})
            return _DCP_CLASSES[key]
        elif module == "torch":
            obj = getattr(torch, name, None)
            if obj is torch.Size or isinstance(
                obj, (torch.dtype, torch.layout, torch.memory_format)
            ):
                return obj
        elif module == "pathlib" and name.endswith("Path"):
            return _path_str  # storage_meta.checkpoint_id: the path it was saved to
        elif (module, name) == ("torch.serialization", "_get_layout"):
            return _layout  # how torch.layout pickles: a lookup by name
        elif (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise pickle.UnpicklingError(
            "the metadata names %s.%s, which a DCP .metadata file never holds" % (module, name)
        )


class _Window(io.RawIOBase):
    """A read-only view of ``length`` bytes at ``start`` of an open file (one DCP item)."""

    def __init__(self, f, start, length):
        super().__init__()
        self.f, self.start, self.length, self.pos = f, start, length, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, pos, whence=0):
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, base + pos))
        return self.pos

    def readinto(self, b):
        n = min(len(b), self.length - self.pos)
        if n <= 0:
            return 0
        self.f.seek(self.start + self.pos)
        data = self.f.read(n)
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _rebuild_ref(storage, storage_offset, size, stride, *rest):
    return {
        "storage": storage,
        "offset": storage_offset,
        "size": tuple(size),
        "stride": tuple(stride),
    }


class _TensorRefUnpickler(pickle.Unpickler):
    """The data.pkl of a torch.save'd tensor, read as a reference (storage, offset, size,
    stride) to its bytes instead of a tensor: nothing is loaded, no code runs."""

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unexpected persistent id")
        return {"dtype": pid[1], "key": str(pid[2]), "numel": pid[4]}

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_ref
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage") and name != "UntypedStorage":
            dtype = getattr(getattr(torch, name, None), "dtype", None)
            if isinstance(dtype, torch.dtype):
                return dtype
        raise pickle.UnpicklingError("not a plain tensor (%s.%s)" % (module, name))


def _dcp_locate(f, start, length):
    """(absolute offset of the data, dtype, shape) of a contiguous tensor torch.save'd at
    ``start`` of file ``f``; None when it is not that simple (then torch.load reads it)."""
    try:
        zf = zipfile.ZipFile(_Window(f, start, length))
        pkl = [i for i in zf.infolist() if i.filename.endswith("/data.pkl")]
        if len(pkl) != 1:
            return None
        ref = _TensorRefUnpickler(io.BytesIO(zf.read(pkl[0]))).load()
        st = ref["storage"]
        info = zf.getinfo(pkl[0].filename[: -len("data.pkl")] + "data/" + st["key"])
    except (
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        KeyError,
        TypeError,
        ValueError,
        EOFError,
        AttributeError,
        IndexError,
    ):
        return None
    size, stride = ref["size"], ref["stride"]
    want, expect = 1, []
    for d in reversed(size):
        expect.insert(0, want)
        want *= d
    if info.compress_type != zipfile.ZIP_STORED or (want > 1 and tuple(expect) != stride):
        return None
    f.seek(start + info.header_offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return None
    n, e = struct.unpack("<HH", head[26:30])
    itemsize = torch.empty((), dtype=st["dtype"]).element_size()
    if (ref["offset"] + want) * itemsize > info.file_size:
        return None
    return start + info.header_offset + 30 + n + e + ref["offset"] * itemsize, st["dtype"], size


def _open_dcp(path, opts, header_only):
    """A torch.distributed.checkpoint directory, read shard by shard without a process group:
    .metadata lists every tensor chunk and where it lies (file, offset, length); each chunk is
    a torch.save'd tensor whose bytes are memory-mapped and checked in place."""
    src = Source(path, "dcp", 0)
    try:
        with open(os.path.join(path, ".metadata"), "rb") as f:
            md = _DcpMetaUnpickler(f).load()
        sdm, storage = md.state_dict_metadata, md.storage_data
        sdm.items(), storage.items()
    except (
        OSError,
        EOFError,
        pickle.UnpicklingError,
        AttributeError,
        ImportError,
        TypeError,
        ValueError,
    ) as e:
        raise LoadError("cannot read the DCP .metadata: %s" % _short(e), fmt="dcp") from e
    files, sizes, chunks_of = {}, {}, {}
    for fqn, m in sdm.items():
        for c in getattr(m, "chunks", None) or ():
            chunks_of[(fqn, tuple(c.offsets))] = tuple(c.sizes)
    skipped_bytes = 0
    for idx, info in sorted(storage.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        m = sdm.get(idx.fqn)
        if not hasattr(m, "chunks"):
            skipped_bytes += 1  # a BytesStorageMetadata item: pickled objects, not tensors
            continue
        rel = info.relative_path
        if rel not in files:
            files[rel] = _dcp_file(src, path, rel, sizes)
        f = files[rel]
        if f is None:
            continue
        if not (_is_int(info.offset) and _is_int(info.length)) or min(info.offset, info.length) < 0:
            src.problems.append(
                "%s: .metadata gives offset %r, length %r: the metadata is damaged"
                % (idx.fqn, info.offset, info.length)
            )
            continue
        if info.offset + info.length > sizes[rel]:
            src.problems.append(
                "truncated: %s has %d bytes, but %s needs %d"
                % (rel, sizes[rel], idx.fqn, info.offset + info.length)
            )
            continue
        if getattr(info, "transform_descriptors", None):
            src.notes.append(
                "%s: stored with %s: not checked" % (idx.fqn, ", ".join(info.transform_descriptors))
            )
            continue
        offsets = tuple(idx.offset or ())
        shape = chunks_of.get((idx.fqn, offsets), tuple(m.size))
        name = idx.fqn if len(m.chunks) == 1 else "%s@%s" % (idx.fqn, list(offsets))
        _dcp_entry(src, f, name, idx.fqn, _dcp_dtype(m.properties), shape, info, opts)
    if skipped_bytes:
        src.notes.append("%d non-tensor items (pickled objects) not checked" % skipped_bytes)
    src.bytes = sum(sizes.values())
    src.notes.append("%d items in %d files" % (len(sdm), len(files)))
    return src


def _dcp_file(src, path, rel, sizes):
    p = os.path.join(path, rel)
    try:
        f = open(p, "rb")
    except OSError as e:
        src.problems.append("%s: %s" % (rel, e.strerror or e))
        return None
    sizes[rel] = os.fstat(f.fileno()).st_size
    src._close.append(f.close)
    return f


def _dcp_entry(src, f, name, fqn, dtype, shape, info, opts):
    numel = 1
    for d in shape:
        numel *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    loc = _dcp_locate(f, info.offset, info.length)
    if loc is not None and (loc[1] != dtype or tuple(loc[2]) != tuple(shape)):
        src.problems.append(
            "%s: the file holds %s %s, .metadata says %s %s"
            % (name, loc[1], list(loc[2]), dtype, list(shape))
        )
        return
    if loc is not None:
        mm = _dcp_map(src, f)
        chunks = lambda n, s=loc[0]: _st_chunks(mm, s, dtype, itemsize, numel, shape, n)  # noqa: E731
    else:

        def chunks(n, start=info.offset, length=info.length):
            t = torch.load(_Window(f, start, length), map_location="cpu", weights_only=True)
            return _tensor_chunks(t, n, None)

    depth = fqn.count(".")
    section = _section_for_name(fqn)
    slot = fqn.rsplit(".", 1)[-1]
    if (
        len(shape) == 0
        and section == WEIGHTS
        and depth <= 1
        and (depth == 0 or fqn.split(".")[0] in STATE_CONTAINERS or META_NAME.search(fqn))
    ):
        value = next(chunks(1))[1]
        x = float(value[0]) if _is_scalar_dtype(dtype) and not dtype.is_complex else None
        x = int(x) if x is not None and x.is_integer() else x
        src.meta["scalars"][fqn] = x
        if slot in STEP_KEYS and src.meta["global_step"] is None:
            src.meta["global_step"], src.meta["step_key"] = x, fqn
        return
    src.entries.append(
        Entry(name, section, slot, dtype, tuple(shape), numel, numel * itemsize, None, chunks)
    )


def _dcp_map(src, f):
    mm = getattr(f, "_remotekit_mm", None)
    if mm is None:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        src._close.insert(0, mm.close)
        try:
            f._remotekit_mm = mm
        except AttributeError:
            pass
    return mm


# ------------------------------------------------------------------------------ checking


class Stats(object):
    """Exact counts for one tensor; ``max_abs``/``min`` are over its finite values."""

    __slots__ = ("first_bad", "max_abs", "min", "nan", "negative", "neginf", "numel", "posinf")

    def __init__(self, numel):
        self.numel = numel
        self.nan = self.posinf = self.neginf = self.negative = 0
        self.max_abs = None
        self.min = None
        self.first_bad = None

    @property
    def nonfinite(self):
        return self.nan + self.posinf + self.neginf

    def minmax(self, mn, mx):
        a = max(abs(mn), abs(mx))
        self.max_abs = a if self.max_abs is None else max(self.max_abs, a)
        self.min = mn if self.min is None else min(self.min, mn)


_UPCAST = {}  # dtype -> True when this torch cannot reduce it natively (float8, ...)


def _aminmax(c):
    """(x, min, max) of a real chunk, upcasting dtypes torch cannot reduce (float8)."""
    if not _UPCAST.get(c.dtype):
        try:
            mn, mx = torch.aminmax(c)
            return c, float(mn), float(mx)
        except (RuntimeError, NotImplementedError, TypeError):
            if c.dtype in (torch.float32, torch.float64):
                raise
            _UPCAST[c.dtype] = True
    try:
        x = c.float()
    except (RuntimeError, NotImplementedError, TypeError):
        raise Unscannable(
            "dtype %s cannot be checked on CPU by torch %s" % (c.dtype, torch.__version__)
        ) from None
    mn, mx = torch.aminmax(x)
    return x, float(mn), float(mx)


ROW = 1 << 14  # elements per row when a chunk with bad values is narrowed down


def _check_chunk(c, offset, st, nonneg):
    """Fold one 1-D chunk into ``st``.

    The common case is one reduction: ``aminmax`` propagates NaN and shows +-Inf as the min or
    max, so finite min and max mean a clean chunk (and, in a second-moment slot, min >= 0 means
    no negative value). Otherwise a row-wise ``aminmax`` finds the rows holding bad values and
    only those rows are counted exactly: elementwise masks are slow, and bad values are rare.
    """
    if c.dtype.is_complex:
        _check_complex(c, offset, st)
        return
    x, mn, mx = _aminmax(c)
    if math.isfinite(mn) and math.isfinite(mx) and not (nonneg and mn < 0):
        st.minmax(mn, mx)
        return
    n = x.numel()
    full = n - n % ROW
    if full:
        rows = x[:full].view(-1, ROW)
        rmn, rmx = torch.aminmax(rows, dim=1)
        ok = torch.isfinite(rmn) & torch.isfinite(rmx)
        if nonneg:
            ok &= rmn >= 0
        if bool(ok.any()):
            st.minmax(float(rmn[ok].min()), float(rmx[ok].max()))
        bad_rows = (~ok).nonzero().flatten()
        if bad_rows.numel():
            first = int(bad_rows[0])
            _first_bad(rows[first], offset + first * ROW, st, nonneg)
            _count_exact(rows.index_select(0, bad_rows).view(-1), st, nonneg)
    if full < n:
        _first_bad(x[full:], offset + full, st, nonneg)
        _count_exact(x[full:], st, nonneg)


def _count_exact(x, st, nonneg):
    st.nan += int(torch.count_nonzero(torch.isnan(x)))
    st.posinf += int(torch.count_nonzero(x == math.inf))
    st.neginf += int(torch.count_nonzero(x == -math.inf))
    if nonneg:
        st.negative += int(torch.count_nonzero(x < 0))  # -inf counts as negative too
    fin = torch.isfinite(x)
    if bool(fin.any()):
        mn, mx = torch.aminmax(x[fin])
        st.minmax(float(mn), float(mx))


def _first_bad(x, base, st, nonneg):
    if st.first_bad is not None:
        return
    bad = ~torch.isfinite(x)
    if nonneg:
        bad |= x < 0
    if bool(bad.any()):
        st.first_bad = base + int(torch.argmax(bad.to(torch.uint8)))


def _check_complex(c, offset, st):
    try:
        r = torch.view_as_real(c)
    except (RuntimeError, NotImplementedError, TypeError):
        try:
            c = c.to(torch.complex64)
            r = torch.view_as_real(c)
        except (RuntimeError, NotImplementedError, TypeError):
            raise Unscannable(
                "dtype %s cannot be checked on CPU by torch %s" % (c.dtype, torch.__version__)
            ) from None
    _x, mn, mx = _aminmax(r)
    if math.isfinite(mn) and math.isfinite(mx):
        m = float(torch.abs(c).max())
        st.max_abs = m if st.max_abs is None else max(st.max_abs, m)
        return
    re_, im = r[:, 0], r[:, 1]
    nanm = torch.isnan(re_) | torch.isnan(im)
    posm = ((re_ == math.inf) | (im == math.inf)) & ~nanm
    negm = ((re_ == -math.inf) | (im == -math.inf)) & ~nanm & ~posm
    st.nan += int(nanm.sum())
    st.posinf += int(posm.sum())
    st.neginf += int(negm.sum())
    bad = nanm | posm | negm
    if st.first_bad is None:
        st.first_bad = offset + int(torch.argmax(bad.to(torch.uint8)))
    if not bool(bad.all()):
        m = float(torch.abs(c[~bad]).max())
        st.max_abs = m if st.max_abs is None else max(st.max_abs, m)


class _Progress(object):
    def __init__(self, path, total):
        self.path, self.total, self.done = path, total, 0
        self.last = time.time()

    def advance(self, n):
        self.done += n
        now = time.time()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            emit({"type": "progress", "path": self.path, "done": self.done, "total": self.total})


def check_entry(entry, chunk, progress=None):
    """Exact non-finite counts of one entry, reading it once in bounded chunks."""
    st = Stats(entry.numel)
    nonneg = entry.section == OPTIMIZER and entry.slot in NONNEG_SLOTS
    for off, c in entry.chunks(chunk):
        _check_chunk(c, off, st, nonneg)
        if progress is not None:
            progress.advance(c.numel() * c.element_size())
        del c
    return st


def _empty_record(path, fmt=None, nbytes=0):
    rec = {
        "type": "checkpoint",
        "path": path,
        "status": "error",
        "ok": False,
        "error": None,
        "format": fmt,
        "global_step": None,
        "step_key": None,
        "epoch": None,
        "scalars": {},
        "params": 0,
        "tensors": 0,
        "skipped_tensors": 0,
        "bytes": nbytes,
        "negative_exp_avg_sq": 0,
        "bad_tensors": [],
        "bad_tensors_total": 0,
        "needs_globals": [],
        "notes": [],
        "seconds": 0.0,
    }
    for sec in SECTIONS:
        for what in ("nan", "posinf", "neginf"):
            rec["%s_%s" % (what, sec)] = 0
        rec["max_abs_" + sec] = None
    return rec


def scan_source(src, rec, opts):
    """Check every tensor of an opened source and fill the counts of ``rec``."""
    groups = []  # [entry, [names], stats] per distinct stored tensor, in checkpoint order
    keys = set()
    todo = 0
    for e in src.entries:
        if (
            _is_checkable(e.dtype)
            and e._chunks is not None
            and (e.key is None or e.key not in keys)
        ):
            todo += e.nbytes
            keys.add(e.key)
    by_key = {}
    progress = _Progress(src.path, todo)
    rec["tensors"] = len(src.entries)
    for e in src.entries:
        if not _is_checkable(e.dtype):
            rec["skipped_tensors"] += 1
            continue
        if e._chunks is None:
            continue
        if e.key is not None and e.key in by_key:
            by_key[e.key][1].append(e.name)
            continue
        try:
            st = check_entry(e, opts.chunk_elems, progress)
        except Unscannable as exc:
            rec["skipped_tensors"] += 1
            note = "%s: %s" % (e.name, exc)
            if len(rec["notes"]) < 20:
                rec["notes"].append(note)
            continue
        g = [e, [e.name], st]
        groups.append(g)
        if e.key is not None:
            by_key[e.key] = g
        sec = e.section
        if sec == WEIGHTS:
            rec["params"] += e.numel
        rec["nan_" + sec] += st.nan
        rec["posinf_" + sec] += st.posinf
        rec["neginf_" + sec] += st.neginf
        if st.negative:
            rec["negative_exp_avg_sq"] += st.negative
        if st.max_abs is not None and e.slot != "step":  # Adam's step counter is no magnitude
            cur = rec["max_abs_" + sec]
            rec["max_abs_" + sec] = st.max_abs if cur is None else max(cur, st.max_abs)
    bad = []
    for e, names, st in groups:
        if not (st.nonfinite or st.negative):
            continue
        for name in names:
            bad.append(
                {
                    "name": name,
                    "section": e.section,
                    "slot": e.slot if e.section == OPTIMIZER else None,
                    "dtype": str(e.dtype).replace("torch.", ""),
                    "numel": e.numel,
                    "nan": st.nan,
                    "posinf": st.posinf,
                    "neginf": st.neginf,
                    "negative": st.negative,
                    "first_index": st.first_bad,
                    "shared_with": [n for n in names if n != name],
                }
            )
    rec["bad_tensors_total"] = len(bad)
    rec["bad_tensors"] = bad[: opts.max_bad]


# A full gc pass costs ~0.1 s with torch loaded: run one only when memory asks for it.
BIG_FILE = 256 << 20  # a checkpoint this large may leave a mapping behind in a cycle: unmap it
RSS_SLACK = 1 << 30  # resident memory this far above the first file's: collect
_RSS_BASE = []


def _rss():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


def _collect_if_needed(nbytes):
    """gc.collect() after a large checkpoint, or when resident memory grew by RSS_SLACK."""
    rss = _rss()
    if not _RSS_BASE:
        _RSS_BASE.append(rss)
    if nbytes >= BIG_FILE or rss - _RSS_BASE[0] > RSS_SLACK:
        gc.collect()


def scan_item(item, opts):
    """One "checkpoint" record for a discovered item; never raises for a bad file."""
    t0 = time.time()
    rec = _empty_record(item["path"], item.get("format"), item.get("bytes", 0))
    kind = item["kind"]
    if kind == "unsupported":
        rec["status"] = "unsupported"
        rec["error"] = item["reason"]
        return rec
    if kind == "error":
        rec["error"] = item["reason"]
        return rec
    src = None
    try:
        src = open_source(item["path"], opts)
        rec["format"] = src.format
        rec["bytes"] = src.bytes or rec["bytes"]
        _name_step(src)
        rec["global_step"] = src.meta["global_step"]
        rec["step_key"] = src.meta["step_key"]
        rec["epoch"] = src.meta["epoch"]
        rec["scalars"] = src.meta["scalars"]
        rec["notes"].extend(src.notes)
        scan_source(src, rec, opts)
        if src.problems:
            rec["error"] = "; ".join(src.problems[:5])
            rec["needs_globals"] = sorted(set(src.needs_globals))
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
        rec["format"] = rec["format"] or e.fmt
    except Fatal:
        raise
    except Exception as e:  # a bad file must never stop the scan: say what happened
        rec["error"] = "unexpected %s while checking: %s" % (type(e).__name__, _short(e))
    finally:
        if src is not None:
            src.close()
        src = None
        _collect_if_needed(rec["bytes"])
    if rec["error"]:
        rec["status"] = "error"
    elif any(rec[k] for k in NONFINITE_KEYS) or rec["negative_exp_avg_sq"]:
        rec["status"] = "bad"
    else:
        rec["status"] = "clean"
    rec["ok"] = rec["status"] == "clean"
    rec["seconds"] = round(time.time() - t0, 3)
    return rec


def _meta_record(path, error=None):
    return {
        "type": "meta",
        "path": path,
        "global_step": None,
        "step_key": None,
        "epoch": None,
        "error": error,
    }


def step_from_name(path):
    """A step written in the checkpoint's name or in one of its two parent directories'."""
    parts = os.path.abspath(path).split(os.sep)[-3:]
    for part in reversed(parts):
        found = NAME_STEP.findall(os.path.splitext(part)[0] if part == parts[-1] else part)
        if found:
            return int(found[-1])
    return None


def _name_step(src):
    """The file holds no step: take the one in its name (checkpoint-2000/, step_2000.pt),
    else its epoch (the least specific counter; ``step_key`` "epoch" says so)."""
    if src.meta["global_step"] is None:
        step = step_from_name(src.path)
        if step is not None:
            src.meta["global_step"], src.meta["step_key"] = step, "name"
        elif src.meta["epoch"] is not None:
            src.meta["global_step"], src.meta["step_key"] = src.meta["epoch"], "epoch"


def meta_item(item, opts):
    """A "meta" record (step, epoch) for ordering; reads no tensor data."""
    rec = _meta_record(item["path"])
    if item["kind"] not in ("file", "hf-index", "dir"):
        rec["error"] = item.get("reason")
        return rec
    src = None
    try:
        src = open_source(item["path"], opts, header_only=True)
        _name_step(src)
        rec["step_key"] = src.meta["step_key"]
        rec["global_step"] = src.meta["global_step"]
        rec["epoch"] = src.meta["epoch"]
    except LoadError as e:
        rec["error"] = e.reason
    except Fatal:
        raise
    except Exception as e:
        rec["error"] = "unexpected %s: %s" % (type(e).__name__, _short(e))
    finally:
        if src is not None:
            src.close()
        src = None
        _collect_if_needed(0)
    return rec


def exit_code_of(rec):
    return {"clean": EXIT_OK, "bad": EXIT_FINDINGS}.get(rec.get("status"), EXIT_FAILED)


# ----------------------------------------------------------------------------- discovery


def _file_item(path):
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return {"kind": "file", "path": path, "bytes": size}


def _index_item(path):
    base = os.path.dirname(path)
    files = []
    try:
        with open(path) as f:
            wmap = json.load(f).get("weight_map") or {}
        files = sorted(set(os.path.join(base, str(v)) for v in wmap.values()))
    except (OSError, ValueError, AttributeError):
        pass
    size = 0
    for p in files:
        try:
            size += os.path.getsize(p)
        except OSError:
            pass
    return {"kind": "hf-index", "path": path, "bytes": size, "files": files}


def _tree_size(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


def _error_item(path, reason):
    return {"kind": "error", "path": path, "bytes": 0, "reason": reason}


HF_AUX = frozenset(["scheduler.pt", "scaler.pt", "training_args.bin"])


def _check_latest(dirpath, filenames, dirnames, items):
    """DeepSpeed's ``latest`` names the newest save: say so when that directory is missing."""
    if "latest" not in filenames or not any(d.startswith("global_step") for d in dirnames):
        return
    tag = _ds_latest(dirpath)
    if tag and tag not in dirnames:
        items.append(
            _error_item(
                os.path.join(dirpath, "latest"),
                "DeepSpeed's `latest` names %s, which is not in %s: the last save did not "
                "finish or was deleted; a resume would fail" % (tag, dirpath),
            )
        )


# Files a run directory keeps its training log in (the plan's "logs": candidates for
# train-log; what they hold is train-log's to recognise).
LOG_FILE = re.compile(
    r"(\.jsonl|\.log|\.csv|\.txt|^trainer_state\.json|^events\.out\.tfevents\..+|"
    r"^wandb-summary\.json|^run-.+\.wandb)$"
)
MAX_LOGS = 100


def _discover_dir(root, items, skipped, logs=None):
    ext_dirs = [root] if root.rstrip("/").endswith(CKPT_EXTS) else []

    def onerror(e):
        if isinstance(e, PermissionError):
            items.append(
                _error_item(
                    e.filename or root,
                    "permission denied: cannot list this directory as uid %d" % _euid(),
                )
            )
        else:
            items.append(_error_item(getattr(e, "filename", None) or root, "cannot list: %s" % e))

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        dirnames.sort()
        filenames.sort()
        _check_latest(dirpath, filenames, dirnames, items)
        if logs is not None and len(logs) < MAX_LOGS:
            logs.extend(_log_entry(dirpath, f) for f in filenames if LOG_FILE.search(f))
        whole = classify_dir(dirpath, filenames)
        taken = set()
        if whole is not None:
            items.append(whole)
            taken.update(whole["files"])
            if whole["format"] != "hf-trainer":  # HF dirs may hold a DeepSpeed global_stepN/
                dirnames[:] = []
                continue
        ext_dirs.extend(os.path.join(dirpath, d) for d in dirnames if d.endswith(CKPT_EXTS))
        for f in filenames:
            if f.endswith(INDEX_SUFFIX) and os.path.join(dirpath, f) not in taken:
                it = _index_item(os.path.join(dirpath, f))
                items.append(it)
                taken.update(it["files"])
        for f in filenames:
            p = os.path.join(dirpath, f)
            if f.endswith(INDEX_SUFFIX) or p in taken or not f.endswith(CKPT_EXTS):
                continue
            if AUX_FILES.match(f) or (whole is not None and f in HF_AUX):
                skipped.append(p)
                continue
            if os.path.islink(p) and not os.path.exists(p):
                items.append(_error_item(p, "dangling symlink to %s" % os.readlink(p)))
                continue
            items.append(_file_item(p))
    for d in ext_dirs:
        prefix = d.rstrip("/") + os.sep
        if not any(it["path"] == d or it["path"].startswith(prefix) for it in items):
            items.append(_error_item(d, "is a directory, not a checkpoint file (and holds none)"))


def _glob_segment(seg):
    """A regex for one glob path segment (``*``, ``?``, ``[...]`` never cross a ``/``)."""
    out, i = [], 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and seg.find("]", i + 2) > 0:
            j = seg.find("]", i + 2)
            body = seg[i + 1 : j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_paths(pattern):
    """Sorted matches of a glob, ``**`` included, walking real directories once each.

    Python's glob follows directory symlinks without remembering where it has been: a link
    loop repeats every file below it dozens of times, and two loops never end. Here each real
    directory is entered once, and each real file is returned once (under its first path).
    """
    segs = pattern.split("/")
    k = next(i for i, p in enumerate(segs + ["*"]) if re.search(r"[*?[]", p))
    root = "/".join(segs[:k]) or ("/" if pattern.startswith("/") else ".")
    rest = segs[k:]
    if not rest or not os.path.isdir(root):
        return [pattern] if not rest and os.path.lexists(pattern) else []
    rx = []
    for i, seg in enumerate(rest):
        last = i == len(rest) - 1
        if seg == "**":
            rx.append(".*" if last else "(?:[^/]+/)*")
        else:
            rx.append(_glob_segment(seg) + ("" if last else "/"))
    match = re.compile("".join(rx) + r"\Z", re.S).match
    depth = None if "**" in rest else len(rest)
    found, seen_dirs, seen_real = [], set(), set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel + "/"
        level = rel.count("/") + 1
        if depth is not None and level >= depth:
            dirnames[:] = [d for d in dirnames if match(rel + d)]
            filenames = [f for f in filenames if match(rel + f)]
        for name in sorted(dirnames) + sorted(filenames):
            if match(rel + name):
                p = os.path.join(root, rel + name) if root != "." else rel + name
                real = os.path.realpath(p)
                if real not in seen_real:
                    seen_real.add(real)
                    found.append(p)
        if depth is not None and level >= depth:
            dirnames[:] = []
    return sorted(found)


def _log_entry(dirpath, name):
    p = os.path.join(dirpath, name)
    try:
        st = os.stat(p)
    except OSError:
        return {"path": p, "bytes": 0, "mtime": 0}
    return {"path": p, "bytes": st.st_size, "mtime": int(st.st_mtime)}


def discover(arg, logs=None):
    """(items, skipped) for a file, directory or glob; Fatal when nothing is there at all.
    ``logs``, a list, collects the training-log candidates met in directory walks."""
    if os.path.lexists(arg):
        paths = [arg]
        explicit = True
    elif re.search(r"[*?[]", arg):
        paths = glob_paths(arg)
        explicit = False
        if not paths:
            raise Fatal("no files match %s (as seen by uid %d on this host)" % (arg, _euid()))
    else:
        raise Fatal(
            "%s: no such file or directory (as seen by uid %d on this host)" % (arg, _euid())
        )
    items, skipped = [], []
    for p in paths:
        if os.path.islink(p) and not os.path.exists(p):
            items.append(_error_item(p, "dangling symlink to %s" % os.readlink(p)))
        elif os.path.isdir(p):
            _discover_dir(p, items, skipped, logs)
        elif p.endswith(INDEX_SUFFIX):
            items.append(_index_item(p))
        elif explicit:
            items.append(_file_item(p))
        elif p.endswith(CKPT_EXTS):  # a glob match: the same rules as a directory walk
            if AUX_FILES.match(os.path.basename(p)):
                skipped.append(p)
            else:
                items.append(_file_item(p))
    # An index owns its shards: drop them if they were also found on their own (globs).
    shards = set()
    for it in items:
        shards.update(it.get("files", ()))
    out, seen = [], set()
    for it in items:
        if it["kind"] == "file" and it["path"] in shards:
            continue
        real = os.path.realpath(it["path"])
        if real not in seen:  # one checkpoint reached by two paths (a symlink) is one
            seen.add(real)
            out.append(it)
    if not out:
        why = "no checkpoints under %s (looked for %s, *%s and checkpoint directories)" % (
            arg,
            ", ".join("*" + e for e in CKPT_EXTS),
            INDEX_SUFFIX,
        )
        if not logs:
            raise Fatal(why)
        emit({"type": "warning", "message": why})  # a run directory with a log only
    return out, skipped


# ------------------------------------------------------------------------------- workers


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _common_args(opts):
    args = []
    for g in opts.allow_global or ():
        args += ["--allow-global", g]
    if opts.unsafe_pickle:
        args.append("--unsafe-pickle")
    args += ["--max-bad", str(opts.max_bad), "--chunk-elems", str(opts.chunk_elems)]
    return args


class WorkerPool(object):
    """One worker process (this script's ``_worker`` mode) checking up to ``jobs`` files at a
    time on threads: one ``import torch``, and torch kernels and madvise release the GIL.

    Items go to the worker as JSON lines on its stdin; its records come back on stdout and
    are passed on as they arrive ("started" ones are kept: they say which files were open).
    The worker outlives one ``run`` (bisect asks one file at a time). When it dies (a crash in
    torch on a damaged file), each file it had open is checked again alone in a fresh worker,
    so only the file that kills a worker gets the error record; the rest continue.
    """

    DONE_TYPES = ("checkpoint", "meta")

    def __init__(self, jobs, opts):
        self.jobs = max(1, jobs)
        self.opts = opts
        self.proc = None
        self._proc_jobs = None
        self._died = None

    def _spawn(self, jobs):
        threads = max(1, _cpu_count() // jobs)
        argv = [sys.executable, os.path.abspath(__file__), "_worker"]
        argv += ["--jobs", str(jobs), "--threads", str(threads)] + _common_args(self.opts)
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True, bufsize=1
        )

    def run(self, items):
        """Check ``items`` (op "scan" or "meta"); returns their final records, in completion
        order, each passed on (emitted) as it arrives."""
        todo = sorted(items, key=lambda it: -int(it.get("bytes", 0)))  # largest first
        results = []
        while todo:
            done, suspects = self._batch(todo, self.jobs)
            results += done
            finished = set(r["path"] for r in done)
            for it in [it for it in todo if it["path"] in suspects]:
                alone, crashed = self._batch([it], 1)
                if crashed:
                    alone = [self._crash_record(it)]
                    emit(alone[0])
                results += alone
                finished.add(it["path"])
            todo = [it for it in todo if it["path"] not in finished]
        return results

    def _batch(self, items, jobs):
        """Send ``items`` to a worker; (records, paths open when the worker died)."""
        if self.proc is None or self.proc.poll() is not None or jobs != self._proc_jobs:
            self.close()
            self.proc = self._spawn(jobs)
            self._proc_jobs = jobs
        proc = self.proc
        pending = set(it["path"] for it in items)
        payload = "".join(json.dumps(it) + "\n" for it in items)

        def feed():
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # the worker died: the reader below sees it

        writer = threading.Thread(target=feed)
        writer.start()
        records, started = [], set()
        while pending:
            line = proc.stdout.readline()
            if not line:
                break
            line = line.rstrip("\n")
            try:
                rec = json.loads(line)
            except ValueError:
                sys.stderr.write(line + "\n")
                continue
            kind = rec.get("type") if isinstance(rec, dict) else None
            if kind == "started":
                started.add(rec.get("path"))
                continue
            if kind == "error":
                writer.join()
                raise Fatal(rec.get("message", "the worker failed"))
            emit_line(line)
            if kind in self.DONE_TYPES and rec.get("path") in pending:
                pending.discard(rec["path"])
                started.discard(rec["path"])
                records.append(rec)
        writer.join()
        if not pending:
            return records, set()
        self._died = proc.wait()
        self.proc = None
        crashed = started & pending
        if not crashed:
            raise Fatal(
                "the worker process exited (%s) before it checked anything; its stderr says why"
                % self._died
            )
        return records, crashed

    def _crash_record(self, item):
        code = self._died
        sig = " = signal %d" % -code if code is not None and code < 0 else ""
        reason = (
            "the worker process died (exit %s%s) while reading this file: it is damaged in a way "
            "that crashes torch" % (code, sig)
        )
        if item.get("op", "scan") == "scan":
            rec = _empty_record(item["path"], None, item.get("bytes", 0))
            rec["error"] = reason
            return rec
        return _meta_record(item["path"], reason)

    def close(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class InlinePool(object):
    """The same interface as WorkerPool, checking in this process (when no file to re-run)."""

    def __init__(self, opts):
        self.opts = opts
        _import_torch()
        _allow_globals(opts.allow_global or ())

    def run(self, items):
        out = []
        for it in items:
            rec = meta_item(it, self.opts) if it.get("op") == "meta" else scan_item(it, self.opts)
            emit(rec)
            out.append(rec)
        return out

    def close(self):
        pass


def make_pool(jobs, opts):
    me = globals().get("__file__")
    if me and os.path.isfile(me):
        return WorkerPool(jobs, opts)
    if jobs > 1:
        emit(
            {
                "type": "warning",
                "message": "cannot locate this script to start workers: --jobs ignored",
            }
        )
    return InlinePool(opts)


def cmd_worker(opts):
    """Check the items read from stdin on ``--jobs`` threads; "started" then the record."""
    # No PR_SET_PDEATHSIG: it fires when the spawning *thread* ends. A worker whose parent
    # died reads EOF on stdin and exits; the runner stops the whole process group anyway.
    try:
        _import_torch()
        torch.set_num_threads(max(1, opts.threads))
        _allow_globals(opts.allow_global or ())
    except Fatal as e:
        emit({"type": "error", "message": str(e)})
        return EXIT_FAILED
    q = queue.Queue()

    def work():
        while True:
            item = q.get()
            if item is None:
                return
            emit({"type": "started", "path": item["path"]})
            rec = meta_item(item, opts) if item.get("op") == "meta" else scan_item(item, opts)
            emit(rec)

    threads = [threading.Thread(target=work) for _ in range(max(1, opts.jobs))]
    for t in threads:
        t.start()
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        if line.strip():
            q.put(json.loads(line))
    for _ in threads:
        q.put(None)
    for t in threads:
        t.join()
    # Every record is written and flushed: skip interpreter teardown, which with torch
    # loaded and large files mapped takes up to a second for nothing.
    flush()
    os._exit(EXIT_OK)


# ------------------------------------------------------------------------------ commands


def _import_global(name):
    parts = name.split(".")
    err = None
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        try:
            obj = importlib.import_module(modname)
        except ImportError as e:
            err = e
            continue
        except Exception as e:
            raise Fatal(
                "--allow-global %s: importing %s failed: %s" % (name, modname, _short(e))
            ) from e
        try:
            for a in parts[i:]:
                obj = getattr(obj, a)
        except AttributeError:
            raise Fatal(
                "--allow-global %s: module %s has no %s" % (name, modname, ".".join(parts[i:]))
            ) from None
        return obj
    raise Fatal(
        "--allow-global %s: cannot import it%s; give the full dotted name, e.g. argparse.Namespace"
        % (name, " (%s)" % _short(err) if err else "")
    )


def _allow_globals(names):
    if not names:
        return
    objs = [_import_global(n) for n in names]
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:
        raise Fatal(
            "--allow-global needs torch >= 2.4 (this is %s); use --unsafe-pickle if you trust "
            "the files" % torch.__version__
        )
    add(objs)


def _preflight(opts):
    if opts.unsafe_pickle:
        emit(
            {
                "type": "warning",
                "message": "--unsafe-pickle: checkpoints are loaded with weights_only=False; a "
                "malicious file runs arbitrary code here as uid %d" % _euid(),
            }
        )
    for name in opts.allow_global or ():
        _import_global(name)  # fail before any work when a name is wrong
    if importlib.util.find_spec("torch") is None:
        raise Fatal(
            "torch is not installed for %s: install torch >= 2.1 in the environment that runs "
            "this script" % sys.executable
        )


def cmd_scan(opts):
    t0 = time.time()
    _preflight(opts)
    logs = []
    items, skipped = discover(opts.path, logs)
    total = sum(int(it.get("bytes", 0)) for it in items)
    jobs = max(1, min(opts.jobs, len(items)))
    emit(
        {
            "type": "plan",
            "files": len(items),
            "bytes": total,
            "jobs": jobs,
            "skipped": skipped,
            "logs": logs[:MAX_LOGS],
        }
    )
    direct = [it for it in items if it["kind"] in ("unsupported", "error")]
    work = [it for it in items if it["kind"] not in ("unsupported", "error")]
    recs = []
    for it in direct:
        rec = scan_item(it, opts)
        emit(rec)
        recs.append(rec)
    if work:
        pool = make_pool(jobs, opts)
        try:
            recs += pool.run([dict(it, op="scan") for it in work])
        finally:
            pool.close()
    counts = {"clean": 0, "bad": 0, "error": 0, "unsupported": 0}
    for r in recs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    code = max([exit_code_of(r) for r in recs] or [EXIT_OK])
    emit(
        dict(
            {
                "type": "done",
                "command": "scan",
                "exit_code": code,
                "files": len(recs),
                "seconds": round(time.time() - t0, 3),
            },
            **counts,
        )
    )
    return code


def _optimizer_info(src):
    out = []
    for path, opt in src.optimizers:
        groups = []
        for i, g in enumerate(opt.get("param_groups") or []):
            if not isinstance(g, dict):
                continue
            hyper = {}
            for k, v in g.items():
                if k == "params":
                    continue
                if isinstance(v, (bool, int, float, str)) or v is None:
                    hyper[k] = v
                elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
                    hyper[k] = list(v)
                elif _as_number(v) is not None:
                    hyper[k] = _as_number(v)
            lr = hyper.pop("lr", None)
            groups.append(
                {"index": i, "lr": lr, "params": len(g.get("params") or []), "hyper": hyper}
            )
        state = opt.get("state") or {}
        slots = {}
        for s in state.values() if isinstance(state, dict) else ():
            if isinstance(s, dict):
                for k in s:
                    slots[str(k)] = slots.get(str(k), 0) + 1
        step = None
        for s in state.values() if isinstance(state, dict) else ():
            if isinstance(s, dict) and "step" in s:
                step = _as_number(s["step"])
                break
        out.append(
            {
                "path": path,
                "groups": groups,
                "state_params": len(state),
                "slots": slots,
                "step": step,
            }
        )
    return out


def cmd_inspect(opts):
    t0 = time.time()
    _preflight(opts)
    _import_torch()
    _allow_globals(opts.allow_global or ())
    path = opts.path
    rec = {
        "type": "inspect",
        "path": path,
        "ok": False,
        "error": None,
        "format": None,
        "bytes": 0,
        "global_step": None,
        "epoch": None,
        "top_keys": [],
        "scalars": {},
        "optimizers": [],
        "totals": {},
        "dtypes": {},
        "metadata": None,
        "needs_globals": [],
        "notes": [],
    }
    src = None
    try:
        src = open_source(path, opts, header_only=True)
        rec.update(
            format=src.format,
            bytes=src.bytes,
            global_step=src.meta["global_step"],
            epoch=src.meta["epoch"],
            top_keys=src.meta["top_keys"],
            scalars=src.meta["scalars"],
            metadata=src.meta.get("metadata"),
            notes=src.notes,
            optimizers=_optimizer_info(src),
        )
        names_by_key = {}
        for e in src.entries:
            if e.key is not None:
                names_by_key.setdefault(e.key, []).append(e.name)
        totals = {}
        dtypes = {}
        for e in src.entries:
            dt = str(e.dtype).replace("torch.", "")
            shared = (
                [n for n in names_by_key.get(e.key, ()) if n != e.name] if e.key is not None else []
            )
            emit(
                {
                    "type": "tensor",
                    "name": e.name,
                    "section": e.section,
                    "slot": e.slot if e.section == OPTIMIZER else None,
                    "dtype": dt,
                    "shape": list(e.shape),
                    "numel": e.numel,
                    "bytes": e.nbytes,
                    "shared_with": shared,
                }
            )
            t = totals.setdefault(e.section, {"tensors": 0, "numel": 0, "bytes": 0})
            t["tensors"] += 1
            if not shared or names_by_key[e.key][0] == e.name:
                t["numel"] += e.numel
                t["bytes"] += e.nbytes
                dtypes[dt] = dtypes.get(dt, 0) + e.numel
        rec["totals"] = totals
        rec["dtypes"] = dtypes
        if src.problems:
            rec["error"] = "; ".join(src.problems[:5])
        rec["needs_globals"] = sorted(set(src.needs_globals))
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
    finally:
        if src is not None:
            src.close()
    rec["ok"] = rec["error"] is None
    emit(rec)
    code = EXIT_OK if rec["ok"] else EXIT_FAILED
    emit(
        {
            "type": "done",
            "command": "inspect",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code


_WRAPPERS = re.compile(r"(^|\.)(module|_orig_mod)\.")


def _strip_wrappers(name):
    prev = None
    while prev != name:
        prev = name
        name = _WRAPPERS.sub(lambda m: m.group(1), name, count=1)
    return name


def _diff_entry(ea, eb, chunk):
    """Per-tensor comparison over chunks, in float64; non-finite elements are left out of norms."""
    ss_a = ss_b = ss_d = dot = 0.0
    max_d = 0.0
    nf_a = nf_b = new_nf = neg_b = 0
    nonneg = ea.section == OPTIMIZER and ea.slot in NONNEG_SLOTS
    for (_, ca), (_, cb) in zip(ea.chunks(chunk), eb.chunks(chunk)):
        a = _to_f64(ca)
        b = _to_f64(cb)
        if nonneg:
            neg_b += int((b < 0).sum())  # every element of B, before the finite filter
        fa = torch.isfinite(a)
        fb = torch.isfinite(b)
        if not (bool(fa.all()) and bool(fb.all())):
            nf_a += int((~fa).sum())
            nf_b += int((~fb).sum())
            new_nf += int((fa & ~fb).sum())
            both = fa & fb
            a = a[both]
            b = b[both]
        d = b - a
        ss_a += float((a * a).sum())
        ss_b += float((b * b).sum())
        ss_d += float((d * d).sum())
        dot += float((a * b).sum())
        if d.numel():
            max_d = max(max_d, float(d.abs().max()))
    na, nb = math.sqrt(ss_a), math.sqrt(ss_b)
    rel = math.sqrt(ss_d) / na if na > 0 else (0.0 if ss_d == 0 else math.inf)
    cos = dot / (na * nb) if na > 0 and nb > 0 else None
    return {
        "rel_change": rel,
        "max_abs_diff": max_d,
        "cosine": cos,
        "nonfinite_a": nf_a,
        "nonfinite_b": nf_b,
        "new_nonfinite": new_nf,
        "negative_b": neg_b,
        "ss_a": ss_a,
        "ss_d": ss_d,
    }


def _to_f64(c):
    if c.dtype.is_complex:
        return torch.view_as_real(c.to(torch.complex128)).reshape(-1)
    if c.dtype in (torch.float64,):
        return c
    try:
        return c.to(torch.float64)
    except (RuntimeError, NotImplementedError, TypeError):
        return c.float().to(torch.float64)


def _lr_list(src):
    return [[g["lr"] for g in o["groups"]] for o in _optimizer_info(src)]


def cmd_diff(opts):
    t0 = time.time()
    _preflight(opts)
    _import_torch()
    _allow_globals(opts.allow_global or ())
    rec = {"type": "diff", "a": opts.a, "b": opts.b, "ok": False, "error": None}
    srcs = []
    code = EXIT_FAILED
    try:
        for side, p in (("A", opts.a), ("B", opts.b)):
            try:
                srcs.append(open_source(p, opts))
            except LoadError as e:
                raise LoadError("%s (%s): %s" % (side, p, e.reason), e.needs_globals) from e
        a, b = srcs
        code = _diff(a, b, rec, opts)
    except LoadError as e:
        rec["error"] = e.reason
        rec["needs_globals"] = e.needs_globals
    finally:
        for s in srcs:
            s.close()
    rec["ok"] = rec["error"] is None
    emit(rec)
    emit(
        {
            "type": "done",
            "command": "diff",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code


def _diff(a, b, rec, opts):
    ma = dict((e.name, e) for e in a.entries)
    mb = dict((e.name, e) for e in b.entries)
    notes = []
    if set(ma) != set(mb):
        sa = dict((_strip_wrappers(n), e) for n, e in ma.items())
        sb = dict((_strip_wrappers(n), e) for n, e in mb.items())
        if len(set(sa) & set(sb)) > len(set(ma) & set(mb)):
            ma, mb = sa, sb
            notes.append(
                "names matched after removing 'module.' / '_orig_mod.' (DDP, torch.compile)"
            )
    only_a = [n for n in ma if n not in mb]
    only_b = [n for n in mb if n not in ma]
    changes, diffs, flags = [], [], []
    seen_keys = set()
    tot = {WEIGHTS: [0.0, 0.0], OPTIMIZER: [0.0, 0.0]}
    identical = 0
    for name, ea in ma.items():
        eb = mb.get(name)
        if eb is None:
            continue
        if ea.shape != eb.shape or ea.dtype != eb.dtype:
            changes.append(
                {
                    "name": name,
                    "shape_a": list(ea.shape),
                    "shape_b": list(eb.shape),
                    "dtype_a": str(ea.dtype).replace("torch.", ""),
                    "dtype_b": str(eb.dtype).replace("torch.", ""),
                }
            )
        if ea.shape != eb.shape or ea._chunks is None or eb._chunks is None:
            continue
        key = (ea.key, eb.key)
        if ea.key is not None and eb.key is not None and key in seen_keys:
            continue  # tied weights: compared once
        seen_keys.add(key)
        try:
            d = _diff_entry(ea, eb, opts.chunk_elems)
        except (RuntimeError, NotImplementedError, TypeError) as e:
            notes.append("%s: not compared (%s)" % (name, _short(e)))
            continue
        sec = ea.section
        tot[sec][0] += d.pop("ss_a")
        tot[sec][1] += d.pop("ss_d")
        d.update(
            name=name,
            section=sec,
            slot=ea.slot if sec == OPTIMIZER else None,
            numel=ea.numel,
            dtype=str(ea.dtype).replace("torch.", ""),
        )
        if d["max_abs_diff"] == 0 and not d["nonfinite_a"] and not d["nonfinite_b"]:
            identical += 1
        diffs.append(d)
        second_moment = sec == OPTIMIZER and ea.slot in NONNEG_SLOTS
        if d["new_nonfinite"] and not second_moment:
            flags.append(
                {"name": name, "section": sec, "kind": "new_nonfinite", "count": d["new_nonfinite"]}
            )
        if second_moment:
            if d["nonfinite_b"]:
                flags.append(
                    {
                        "name": name,
                        "section": sec,
                        "kind": "nonfinite_exp_avg_sq",
                        "count": d["nonfinite_b"],
                    }
                )
            if d["negative_b"]:
                flags.append(
                    {
                        "name": name,
                        "section": sec,
                        "kind": "negative_exp_avg_sq",
                        "count": d["negative_b"],
                    }
                )

    def rank(section):
        # Step counters change by design: they would crowd out the tensors worth a look.
        pool = [
            d
            for d in diffs
            if d["section"] == section and not (d["slot"] == "step" and d["numel"] == 1)
        ]
        return sorted(pool, key=lambda d: -d["rel_change"])[: opts.top]

    sa, sb = a.meta["global_step"], b.meta["global_step"]
    rec.update(
        format_a=a.format,
        format_b=b.format,
        step_a=sa,
        step_b=sb,
        step_delta=(sb - sa)
        if isinstance(sa, (int, float)) and isinstance(sb, (int, float))
        else None,
        epoch_a=a.meta["epoch"],
        epoch_b=b.meta["epoch"],
        lr_a=_lr_list(a),
        lr_b=_lr_list(b),
        tensors_a=len(ma),
        tensors_b=len(mb),
        compared=len(diffs),
        identical=identical,
        only_a=only_a[:50],
        only_b=only_b[:50],
        only_a_total=len(only_a),
        only_b_total=len(only_b),
        changes=changes[:50],
        changes_total=len(changes),
        top_weights=rank(WEIGHTS),
        top_optimizer=rank(OPTIMIZER),
        flags=flags[:50],
        flags_total=len(flags),
        rel_change={
            s: (math.sqrt(v[1]) / math.sqrt(v[0]) if v[0] > 0 else None) for s, v in tot.items()
        },
        notes=notes + a.notes + b.notes,
    )
    problems = ["A: " + p for p in a.problems] + ["B: " + p for p in b.problems]
    if problems:
        rec["error"] = "; ".join(problems[:5])
        return EXIT_FAILED
    return EXIT_FINDINGS if flags else EXIT_OK


_NUM = re.compile(r"(\d+)")


def _natural(s):
    return [int(p) if p.isdigit() else p for p in _NUM.split(s)]


def cmd_bisect(opts):
    t0 = time.time()
    _preflight(opts)
    if not os.path.isdir(opts.path):
        raise Fatal(
            "%s is not a directory (bisect orders the checkpoints found under one)" % opts.path
        )
    items, skipped = discover(opts.path)
    emit(
        {
            "type": "plan",
            "files": len(items),
            "bytes": sum(int(i.get("bytes", 0)) for i in items),
            "jobs": opts.jobs,
            "skipped": skipped,
        }
    )
    unreadable = []
    for it in items:
        if it["kind"] in ("unsupported", "error"):
            rec = scan_item(it, opts)
            emit(rec)
            unreadable.append(it["path"])
    work = [it for it in items if it["kind"] not in ("unsupported", "error")]
    pool = make_pool(opts.jobs if opts.linear else 1, opts) if work else None
    try:
        metas = {}
        if pool is not None:
            for m in pool.run([dict(it, op="meta") for it in work]):
                metas[m["path"]] = m
        cands = []
        for it in work:
            m = metas.get(it["path"], {})
            if m.get("error"):
                unreadable.append(it["path"])
                emit(dict(scan_item(dict(it, kind="error", reason=m["error"]), opts)))
                continue
            cands.append((it, m.get("global_step")))
        rel = lambda p: os.path.relpath(p, opts.path)  # noqa: E731
        if cands and all(s is not None for _, s in cands):
            order = "global_step"
            cands.sort(key=lambda c: (c[1], _natural(rel(c[0]["path"]))))
        else:
            order = "name"
            cands.sort(key=lambda c: _natural(rel(c[0]["path"])))
        emit(
            {
                "type": "order",
                "order": order,
                "checkpoints": [{"path": it["path"], "global_step": s} for it, s in cands],
            }
        )
        results = {}

        def scan(idx_items):
            todo = [dict(it, op="scan") for it, _ in idx_items if it["path"] not in results]
            for r in pool.run(todo) if todo else []:
                results[r["path"]] = r

        later_clean, bad = [], []
        if opts.linear:
            scan(cands)
            seq = [c for c in cands if results[c[0]["path"]]["status"] in ("clean", "bad")]
            unreadable += [c[0]["path"] for c in cands if c not in seq]
            first = next(
                (i for i, c in enumerate(seq) if results[c[0]["path"]]["status"] == "bad"), None
            )
            bad = [c[0]["path"] for c in seq if results[c[0]["path"]]["status"] == "bad"]
            if first is not None:
                later_clean = [
                    c[0]["path"]
                    for c in seq[first + 1 :]
                    if results[c[0]["path"]]["status"] == "clean"
                ]
            lo = first - 1 if first is not None else len(seq) - 1
            hi = first if first is not None else len(seq)
        else:
            seq = list(cands)
            lo, hi = -1, len(seq)
            while hi - lo > 1:  # invariant: seq[lo] clean (or -1), seq[hi] bad (or len)
                mid = (lo + hi) // 2
                scan([seq[mid]])
                st = results[seq[mid][0]["path"]]["status"]
                if st == "clean":
                    lo = mid
                elif st == "bad":
                    hi = mid
                else:
                    unreadable.append(seq[mid][0]["path"])
                    del seq[mid]
                    hi -= 1
            bad = [p for p, r in results.items() if r["status"] == "bad"]

        def brief(i, with_tensor):
            if i < 0 or i >= len(seq):
                return None
            it, step = seq[i]
            r = results[it["path"]]
            out = {"path": it["path"], "global_step": step, "epoch": r.get("epoch")}
            if with_tensor:
                out["tensor"] = (r.get("bad_tensors") or [None])[0]
                for k in NONFINITE_KEYS + ("negative_exp_avg_sq",):
                    out[k] = r.get(k)
            return out

        first_bad = brief(hi, True)
        code = EXIT_FINDINGS if first_bad else EXIT_OK
        if unreadable:
            code = EXIT_FAILED
        emit(
            {
                "type": "bisect",
                "directory": opts.path,
                "order": order,
                "mode": "linear" if opts.linear else "binary",
                "checkpoints": len(cands),
                "scanned": len(results),
                "last_clean": brief(lo, False),
                "first_bad": first_bad,
                "unreadable": unreadable,
                "bad": bad,
                "later_clean": later_clean,
                "assumption": None
                if opts.linear
                else "binary search: assumes that once a checkpoint is bad, every later one is "
                "too; use --linear to check them all",
            }
        )
    finally:
        if pool is not None:
            pool.close()
    emit(
        {
            "type": "done",
            "command": "bisect",
            "exit_code": code,
            "seconds": round(time.time() - t0, 3),
        }
    )
    return code


# ---------------------------------------------------------------------------------- main


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--allow-global",
        action="append",
        default=[],
        metavar="NAME",
        help="allow-list a global for weights-only loading (imports its module)",
    )
    common.add_argument(
        "--unsafe-pickle",
        action="store_true",
        help="load with weights_only=False: runs any code in the file",
    )
    common.add_argument("--max-bad", type=int, default=20, help="bad tensors listed per checkpoint")
    common.add_argument("--chunk-elems", type=int, default=DEFAULT_CHUNK, help=argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="ckpt.py", description="Checkpoint diagnostics (JSON lines).")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("scan", parents=[common], help="check checkpoints for non-finite values")
    s.add_argument("path")
    s.add_argument("--jobs", type=int, default=1)
    s = sub.add_parser(
        "inspect", parents=[common], help="keys, dtypes, shapes; no tensor data read"
    )
    s.add_argument("path")
    s = sub.add_parser("diff", parents=[common], help="compare two checkpoints tensor by tensor")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--top", type=int, default=10)
    s = sub.add_parser(
        "bisect", parents=[common], help="find the first bad checkpoint in a directory"
    )
    s.add_argument("path")
    s.add_argument(
        "--linear", action="store_true", help="check every checkpoint, not a binary search"
    )
    s.add_argument("--jobs", type=int, default=1)
    s = sub.add_parser("_worker", parents=[common])
    s.add_argument("--jobs", type=int, default=1)
    s.add_argument("--threads", type=int, default=1)
    return p


COMMANDS = {
    "scan": cmd_scan,
    "inspect": cmd_inspect,
    "diff": cmd_diff,
    "bisect": cmd_bisect,
    "_worker": cmd_worker,
}


def main(argv=None):
    opts = build_parser().parse_args(argv)
    if not opts.command:
        build_parser().print_help(sys.stderr)
        return EXIT_FAILED
    opts.chunk_elems = max(1, opts.chunk_elems)
    opts.max_bad = max(0, opts.max_bad)
    if hasattr(opts, "jobs"):
        opts.jobs = max(1, opts.jobs)
    try:
        return COMMANDS[opts.command](opts)
    except Fatal as e:
        return fail(opts.command, str(e))


if __name__ == "__main__":
    sys.exit(main())
