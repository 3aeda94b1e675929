"""Checkpoint diagnostics, shared ground: constants, the errors, torch on demand, page release.

Part of ``ckpt.py`` (shipped beside it, imported by its sibling modules; see ckpt.py's
docstring for the commands and records). torch is imported only when a command needs it
(discovery needs none): every module that uses torch registers with :func:`uses_torch` and
gets the module once :func:`import_torch` ran.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import shutil
import struct
import sys
import threading
import warnings
import zipfile

from ..infile import open_regular

torch = None  # set by import_torch(): discovery and safetensors need no torch
_TORCH_USERS = []  # the globals of every module that refers to torch
_TORCH_SETUP = []  # what runs once torch is imported (the worker's threads, allowed globals)
_TORCH_LOCK = threading.Lock()  # a worker's threads may meet their first torch file together


def uses_torch(namespace):
    """Give the module whose ``globals()`` is ``namespace`` a ``torch`` global: None until
    :func:`import_torch` ran, torch after (so that discovery runs without torch)."""
    namespace["torch"] = torch
    _TORCH_USERS.append(namespace)


CKPT_EXTS = (
    ".pt",
    ".pth",
    ".bin",
    ".ckpt",
    ".th",
    ".safetensors",
    ".gguf",
    ".npy",
    ".npz",
)  # .th: AllenNLP
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
SECTIONS = (WEIGHTS, OPTIMIZER)  # the params: floating tensors of the model and optimizer state
# Every other tensor: never a param, never checked as one, never in a diff's relative change.
OTHER = "other"
# Why a tensor is "other" (its ``kind``): a one-value integer (BatchNorm's num_batches_tracked)
# or an optimizer's per-parameter step; a trainer's score (Lightning's ModelCheckpoint
# best_model_score / kth_value); an RNG state; any other integer or bool tensor.
COUNTER, SCORE, RNG, INTEGER = "counter", "score", "rng", "integer"
# Top-level keys of trainer bookkeeping (Lightning's callbacks and loops, schedulers): a
# one-value tensor anywhere below is a score or a count; larger ones (an EMA or SWA copy of
# the model) stay weights.
TRAINER_STATE = frozenset(
    ["callbacks", "loops", "lr_schedulers", "lr_scheduler", "scheduler", "schedulers"]
)
RNG_NAME = re.compile(r"(?i)rng|random|generator")
# The per-section counts of a "checkpoint" record: nan_weights, posinf_weights, ...
NONFINITE_KEYS = tuple("%s_%s" % (w, s) for s in SECTIONS for w in ("nan", "posinf", "neginf"))
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024
PROGRESS_EVERY_S = 0.5


def looks_like_safetensors(head):
    """True when ``head`` (a file's first bytes, at least 9) starts a safetensors file: a
    plausible little-endian header length, then the header's JSON object."""
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and 0 < n <= SAFETENSORS_MAX_HEADER


def is_torchless_file(path):
    """True when the file at ``path`` starts like a safetensors, GGUF or NumPy (.npy, .npz)
    file: read without torch."""
    try:
        with open_regular(path) as f:  # never blocks on a FIFO named *.safetensors
            head = f.read(9)
            if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
                return path.endswith(".npz") or looks_like_npz(path)
            return looks_like_safetensors(head) or head.startswith((b"GGUF", b"\x93NUMPY"))
    except OSError:  # NotRegularFile too: opening it later says why
        return False


def looks_like_npz(path):
    """True when ``path`` opens as a zip whose members are all ``.npy`` (NumPy's savez)."""
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError):
        return False
    return bool(names) and all(n.endswith(".npy") for n in names)


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


def short(exc, limit=300):
    """One readable line out of an exception (torch's messages are long and colored)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    m = re.search(r"WeightsUnpickler error:\s*(.+)", text, re.S)
    if m:
        text = m.group(1)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    return first if len(first) <= limit else first[: limit - 3] + "..."


def euid():
    return os.geteuid() if hasattr(os, "geteuid") else -1


# ------------------------------------------------------------------------------------ torch


def on_torch(fn):
    """Run ``fn()`` once torch is imported: now if it is, else right after :func:`import_torch`
    imports it (a Fatal from ``fn`` is that call's)."""
    _TORCH_SETUP.append(fn)
    if torch is not None:
        fn()


def import_torch():
    """torch, imported on the first call (only files that need it call this: torch.save files
    and DCP; safetensors is read without it); Fatal when it cannot be imported."""
    global torch
    if torch is not None:
        return torch
    with _TORCH_LOCK:
        if torch is None:
            _import_torch()
    return torch


def _import_torch():
    global torch
    warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")
    # safetensors data is mapped read-only on purpose: nothing here writes to it
    warnings.filterwarnings("ignore", message=".*given buffer is not writable.*")
    warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated.*")
    try:
        import torch as _torch
    except Exception as e:  # ImportError, or a broken install raising anything
        raise Fatal(
            "cannot import torch with %s: %s; install torch >= 2.1 in the environment "
            "that runs this script" % (sys.executable, short(e))
        ) from e
    version = tuple(int(x) for x in re.findall(r"\d+", _torch.__version__)[:2])
    if version < (2, 1):
        raise Fatal(
            "torch %s is too old: checkpoint diagnostics need torch >= 2.1 (mmap loading)"
            % _torch.__version__
        )
    for namespace in _TORCH_USERS:
        namespace["torch"] = _torch
    for fn in _TORCH_SETUP:
        fn()
    torch = _torch  # last: other threads use it only once it is set up


def is_scalar_dtype(dtype):
    return not dtype.is_complex and "float8" not in str(dtype)  # .item() gives a number


def is_checkable(dtype):
    return dtype.is_floating_point or dtype.is_complex


def as_number(v):
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


class Releaser:
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


def advise_dontneed(mm, offset, length):
    """Release pages of a Python mmap (safetensors) after they were checked."""
    if not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = offset - offset % mmap.PAGESIZE
    try:
        mm.madvise(mmap.MADV_DONTNEED, start, offset + length - start)
    except (OSError, ValueError):
        pass


# ------------------------------------------------------------------------------ zip members

UNPACK_CHUNK = 1 << 20  # a zip member is unpacked this much at a time


def unpack_member(r, out, name, limit, basis, folder, head=b""):
    """Stream the open zip member ``r`` (whose first bytes, ``head``, were read already) into
    the open file ``out`` of ``folder``: the number of bytes written. A member's sizes are the
    archive's word (a zip bomb's lie), so the bytes are counted as they come and never more
    than ``limit`` are written: LoadError naming the member, the limit and its ``basis`` (what
    says it holds that many) once it passes them, or when ``folder`` has no room for
    ``limit`` bytes (checked before a byte is written). The caller removes ``out`` on any
    exception (KeyboardInterrupt too)."""
    if shutil.disk_usage(folder).free < limit + UNPACK_CHUNK:
        raise LoadError(
            "member %r: up to %d bytes to unpack (%s), no room for them in %s: not read"
            % (name, limit, basis, folder)
        )
    got = 0
    block = head or r.read(UNPACK_CHUNK)
    while block:
        if got + len(block) > limit:
            raise LoadError(
                "member %r unpacks to more than the %d bytes %s: a zip bomb, refused"
                % (name, limit, basis)
            )
        out.write(block)
        got += len(block)
        block = r.read(UNPACK_CHUNK)
    out.flush()
    return got
