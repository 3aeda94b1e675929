"""Checkpoint diagnostics: directories that are ONE checkpoint, and the one entry point to open any.

Part of ``ckpt.py``. HF Trainer ``checkpoint-N/``, DeepSpeed ``global_stepN/`` (every ZeRO
partition), torch.distributed.checkpoint; :func:`open_source` opens a file, such a directory,
or a zip archive of torch files (:mod:`.archive`).
"""

from __future__ import annotations

import os

from .archive import open_archive
from .base import INDEX_SUFFIX, OPTIMIZER, WEIGHTS, LoadError
from .dcp import open_dcp
from .discover import (
    DS_MODEL,
    DS_OPTIM,
    HF_OPTIMIZER,
    classify_dir,
    ds_latest,
    hf_weights,
    torch_members,
)
from .formats import Source, open_file, open_index, open_part, sidecar_step

# ------------------------------------------------------------------- checkpoint directories


def _open_hf_trainer(path, opts, header_only):
    """HF Trainer's checkpoint-N/: weights + optimizer.pt as ONE checkpoint, step from
    trainer_state.json (scheduler.pt, scaler.pt, rng_state*.pth hold no model state)."""
    src = Source(path, "hf-trainer", 0)
    names = sorted(os.listdir(path))
    for w in hf_weights(names):
        open_part(src, os.path.join(path, w), w, opts, header_only)
    opt = [n for n in HF_OPTIMIZER if n in names]
    if opt:
        open_part(
            src, os.path.join(path, opt[0]), opt[0], opts, header_only, "optimizer.", OPTIMIZER
        )
    else:
        src.notes.append("no optimizer.pt: weights only (save_only_model?)")
    src.meta["global_step"] = src.meta["step_key"] = None  # the trainer's own count wins
    sidecar_step(src, os.path.join(path, "trainer_state.json"))
    return src


def _open_deepspeed(path, opts, header_only):
    """DeepSpeed's global_stepN/: model states (weights) and every ZeRO optimizer partition
    (fp32 master copy and Adam moments) as ONE checkpoint; the step from the model states'
    ``global_steps``, else the directory's name; ``latest`` beside it is checked."""
    src = Source(path, "deepspeed", 0)
    names = sorted(os.listdir(path))
    for n in names:
        if DS_MODEL.match(n):
            open_part(src, os.path.join(path, n), n, opts, header_only)
    parts = [(int(DS_OPTIM.match(n).group(1)), n) for n in names if DS_OPTIM.match(n)]
    for rank, n in sorted(parts):
        prefix = "rank%d." % rank if len(parts) > 1 else ""
        open_part(src, os.path.join(path, n), n, opts, header_only, prefix, OPTIMIZER)
    if parts:
        src.notes.append("%d ZeRO optimizer partition(s)" % len(parts))
        if not any(e.section == WEIGHTS and e.numel for e in src.entries):
            src.notes.append(
                "ZeRO-3: the model states hold no weights; the fp32 partitions "
                "(fp32_flat_groups, optimizer section) are the model's values"
            )
    latest = ds_latest(os.path.dirname(os.path.abspath(path)))
    if latest is not None and latest == os.path.basename(path.rstrip("/")):
        src.notes.append("`latest` names this checkpoint")
    return src


def open_source(path, opts, header_only=False):
    """Open one checkpoint (a file, an HF index, or a checkpoint directory: DCP, DeepSpeed,
    HF Trainer) without reading tensor data; LoadError if it is none of them. torch is
    imported by the readers that need it (torch.save files, DCP), not for safetensors."""
    if not os.path.lexists(path):  # a path typed by hand: never there, not "removed"
        raise LoadError("no such file or directory")
    if os.path.isdir(path):
        item = classify_dir(path)
        if item is None:
            raise LoadError(
                "is a directory, not a checkpoint (no DCP .metadata, DeepSpeed "
                "model/optimizer states, or HF Trainer weights in it)"
            )
        opener = {"dcp": open_dcp, "deepspeed": _open_deepspeed, "hf-trainer": _open_hf_trainer}
        return opener[item["format"]](path, opts, header_only)
    if path.endswith(INDEX_SUFFIX):
        return open_index(path, opts, header_only=header_only)
    try:
        return open_file(path, opts, header_only=header_only)
    except LoadError as e:
        # a zip that is no torch.save: a container of torch files (stable-baselines3's save)?
        if e.fmt != "zip" or torch_members(path) is None:
            raise
    src = open_archive(path, os.path.getsize(path), opts)
    sidecar_step(src)
    return src
