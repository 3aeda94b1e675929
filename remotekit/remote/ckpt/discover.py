"""Checkpoint diagnostics: finding checkpoints (and training logs) under a path or glob, no torch.

Part of ``ckpt.py``. Every real directory is entered once (symlink loops end); a directory
that is one checkpoint (:func:`classify_dir`, by file names only: HF Trainer, DeepSpeed, DCP)
is one item; log files met on the way are listed for ``diagnose``.
"""

from __future__ import annotations

import os
import re
import zipfile

from ..infile import inside, load_json, open_regular
from .base import AUX_FILES, CKPT_EXTS, INDEX_SUFFIX, Fatal, euid

# ----------------------------------------------------------------------------- discovery


def is_torch_name(name):
    return name.endswith(CKPT_EXTS) and not name.endswith((".safetensors", ".npy", ".npz"))


def torch_members(path):
    """The names of the torch files in the zip archive ``path``, if it is a container of
    them (no torch needed); None for a torch.save zip (it has a ``data.pkl`` record), for a
    zip with no torch member and for what is no zip."""
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError):
        return None
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return None
    found = [n for n in names if is_torch_name(n)]
    return found or None


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
        with open_regular(path, "r") as f:
            wmap = load_json(f, path).get("weight_map") or {}
        files = sorted(set(inside(base, v, path) for v in wmap.values()))
    except (OSError, ValueError, AttributeError):  # EscapingName too: opening says which
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
    tag = ds_latest(dirpath)
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
                    "permission denied: cannot list this directory as uid %d" % euid(),
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
            if f.endswith(".zip") and p not in taken and torch_members(p):
                items.append(_file_item(p))  # a zip of torch files (stable-baselines3's save)
                continue
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
    """(items, skipped) for a file, directory or glob; Fatal when it holds no checkpoint.
    ``logs``, a list, collects the training-log candidates met in directory walks."""
    if os.path.lexists(arg):
        paths = [arg]
        explicit = True
    elif re.search(r"[*?[]", arg):
        paths = glob_paths(arg)
        explicit = False
        if not paths:
            raise Fatal("no files match %s (as seen by uid %d on this host)" % (arg, euid()))
    else:
        raise Fatal(
            "%s: no such file or directory (as seen by uid %d on this host)" % (arg, euid())
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
        why = (
            "no checkpoints under %s (looked for %s, *%s, checkpoint directories and *.zip "
            "saves of torch files)"
        ) % (
            arg,
            ", ".join("*" + e for e in CKPT_EXTS),
            INDEX_SUFFIX,
        )
        raise Fatal(why)  # a run directory with a log only too: no checkpoints is no "ok"
    return out, skipped


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
        weights = hf_weights(names)
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


def hf_weights(names):
    """The weights files of an HF checkpoint directory: an index and its shards, or one file."""
    for w in HF_WEIGHTS:
        if w in names:
            return [w]
    return [n for n in names if n.endswith(".safetensors")][:1]


def ds_latest(parent):
    """The tag in DeepSpeed's ``latest`` file in ``parent`` (None if there is none)."""
    try:
        with open_regular(os.path.join(parent, "latest"), "r") as f:
            return f.read(256).strip() or None
    except (OSError, UnicodeDecodeError):
        return None
