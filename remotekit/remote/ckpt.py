#!/usr/bin/env python3
"""Checkpoint diagnostics, run *there*: "are my checkpoints corrupt?"

Standalone: the standard library and torch >= 2.1 only, Python >= 3.8; a scan of safetensors
files needs no torch (NumPy is used where it imports, else the standard library). Subcommands::

    ckpt.py scan PATH [--jobs N] [--allow-global NAME]... [--unsafe-pickle] [--max-bad 20]
    ckpt.py inspect PATH [--resume] [--allow-global NAME]... [--unsafe-pickle]
    ckpt.py diff A B [--top 10] [--allow-global NAME]... [--unsafe-pickle]
    ckpt.py bisect DIR [--linear] [--jobs N] [--allow-global NAME]... [--unsafe-pickle]
    ckpt.py scan PATH --options '{"jobs": 4, "allow_globals": ["argparse.Namespace"]}'

The options are one record a command, :mod:`ckpt.options` (``ScanOptions``, ...): the local
side imports the same classes and sends ``COMMAND OPERAND... --options JSON``, the fields
that differ from the defaults; by hand, each field is a flag too.

PATH is a file, a directory (searched recursively for *.pt, *.pth, *.bin, *.ckpt, *.th,
*.safetensors, Hugging Face ``*.index.json`` shard indexes and checkpoint directories) or a
glob (``**`` too; each real directory is entered once, so symlink loops end), and *.gguf,
*.npy, *.npz.
Formats:
torch.save files (zip, and legacy pickle files, which cannot be memory-mapped), safetensors
(parsed and validated here: 8-byte little-endian header length, JSON header, raw data; no
safetensors package needed), GGUF (llama.cpp; float tensors checked, quantized ones named in
a note), NumPy ``.npy`` / ``.npz`` (``np.save``, ``np.savez``, ``np.savez_compressed``: the
header read and validated here, no NumPy, torch or pickle needed; an object array is named in a
note, never unpickled) and HF sharded checkpoints (``weight_map``). Directories that are
ONE checkpoint each: HF Trainer ``checkpoint-N/`` (weights + optimizer.pt + trainer_state.json),
DeepSpeed ``global_stepN/`` (model states + every ZeRO optimizer partition; ``latest`` is
checked), torch.distributed.checkpoint (``.metadata`` + ``__R_N.distcp``, read chunk by chunk
without a process group). A zip of torch files that is no torch.save (stable-baselines3's
``model.save``: ``policy.pth``, ``policy.optimizer.pth``, JSON ``data``) is read member by
member, its step from the JSON (``ckpt/archive.py``: bounded, names that climb out refused);
a directory scan takes a ``*.zip`` only when it is one. Git LFS pointer files are named as such.

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
                 params, tensors, other_tensors, other: {kind: tensors},
                 skipped_tensors, bytes, nan_weights, posinf_weights, neginf_weights,
                 nan_optimizer, posinf_optimizer, neginf_optimizer, negative_exp_avg_sq,
                 max_abs_weights, max_abs_optimizer, bad_tensors: [{name, section, slot, dtype,
                 numel, nan, posinf, neginf, negative, first_index, shared_with}],
                 bad_tensors_total, needs_globals, notes, seconds}
    meta        {path, global_step, step_key, epoch, error}       (bisect ordering)
    order       {order, checkpoints: [{path, global_step}]}       (bisect)
    bisect      {directory, order, mode, checkpoints, scanned, last_clean, first_bad,
                 unreadable, bad, later_clean, assumption}
    tensor      {name, section, slot, kind, dtype, shape, numel, bytes,      (inspect)
                 shared_with}
    inspect     {path, ok, error, format, bytes, global_step, epoch, top_keys, scalars,
                 optimizers, totals, dtypes, other: {kind: tensors}, metadata,
                 needs_globals, notes, resume: {ready, gaps, not_saved, present,
                 optimizer_params, optimizer_missing, missing_params, scheduler_step,
                 asked}}                                          (ckpt/resume.py)
    diff        {a, b, ok, error, format_a/b, step_a/b, step_delta, epoch_a/b, lr_a/b,
                 tensors_a/b, compared, identical, only_a/b(_total), changes(_total),
                 top_weights, top_optimizer, flags(_total), rel_change,
                 counters, other: {compared, changed, by_name: [{name, kind, compared,
                 changed, delta_min, delta_max}]}, notes}
    warning     {message}
    error       {message}                                         fatal: only "done" follows
    done        {command, exit_code, seconds, ...}                last record of every command

``status`` is "clean", "bad" (non-finite values, or negative values in a second-moment
optimizer slot such as exp_avg_sq), "error" (could not be read; ``error`` says why) or
"unsupported". Counts are exact. Sections: the params are "optimizer" (the floating tensors
inside an optimizer state dict: a dict with "state" and "param_groups", or under a key
containing "optim") and "weights" (every other floating tensor); "other" is every tensor that
is no param, with its ``kind``: "counter" (a one-value integer such as BatchNorm's
num_batches_tracked, an optimizer's per-parameter step), "score" (a one-value float in
trainer bookkeeping: Lightning's callbacks and loops, schedulers, one level into a train
state), "rng" (an integer tensor named rng/random/generator), "integer" (any other integer
or bool tensor). Other tensors are never params, never make a checkpoint "bad" (a non-finite
score is a note) and stay out of diff's relative change (``counters`` and ``other`` say what
changed). Tensors that share storage (tied weights) are checked once: totals count each
stored value once, and ``bad_tensors`` lists every key (with ``shared_with``). Integer and
bool tensors are not checked (``skipped_tensors``). Float values that JSON cannot hold are
written as the strings "nan", "inf", "-inf".

Exit status: 0 all clean, 1 findings (non-finite values; for ``inspect --resume``, what a
resume from it would lose), 2 something could not be read.

Safety: files are loaded with ``weights_only=True`` (no code from the file runs). When that
refuses a file, the record names the globals it needs; ``--allow-global NAME`` imports NAME's
module and allow-lists it, ``--unsafe-pickle`` loads plain pickle (arbitrary code; a warning
record says so). Memory: zip checkpoints are memory-mapped and each checked chunk's pages are
released again (``madvise(MADV_DONTNEED)``), so resident memory stays far below the file size.
Speed: one ``aminmax`` per chunk of 4M values tells a clean chunk (it propagates NaN and shows
+-Inf as min or max); only chunks with bad values are counted element by element. safetensors
values are checked without torch (``values``): NumPy's min/max for float32/64, and for bf16,
fp16 and fp8 one max of the sign-cleared bits (NaN/Inf is the exponent field all ones).

Processes: scan and bisect discover files here (no torch) and check them in one worker
process (``_worker``, an internal subcommand) that runs ``--jobs`` threads, one file each at a
time, and imports torch at the first file that needs one (none for safetensors, GGUF or
NumPy files; nor do inspect and diff of them). A
file that crashes the worker costs only itself: the files the worker had open are checked
again alone in a fresh one. inspect and diff run in this process.

Modules of the package this file runs from (:mod:`remotekit.shipping` ships it whole): the
siblings ``protocol`` (the record format, shared with the local side) and ``infile`` (the
safe opener), and the package ``ckpt/``, each of its modules importing only those above it:
``base`` (constants, errors, torch on demand, page release), ``values`` (raw float values
checked without torch: NumPy or the standard library), ``rawdiff`` (diff of those values
without torch), ``gguf`` (a GGUF header, checked), ``npy`` (a ``.npy`` header and the members
of an ``.npz``, checked), ``formats`` (one file: torch, safetensors, GGUF, NumPy, HF index,
LFS; what is a param; the loading
policy), ``dcp``, ``discover`` (no torch), ``archive`` (a zip of torch files), ``layouts``
(directories that are one checkpoint; ``open_source``), ``resume`` (can a run resume from it),
``check`` (values; ``scan_item``), ``workers``, ``commands``; ``options`` (the commands'
options and command line, no torch). This file holds the format description and ``main``.
"""

from __future__ import annotations

import os
import sys

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )

from remotekit.remote.ckpt.base import Fatal
from remotekit.remote.ckpt.commands import cmd_bisect, cmd_diff, cmd_inspect, cmd_scan
from remotekit.remote.ckpt.options import from_argv, parser
from remotekit.remote.ckpt.workers import cmd_worker
from remotekit.remote.protocol import EXIT_FAILED, fail

# ---------------------------------------------------------------------------------- main

DESCRIPTION = "Checkpoint diagnostics (JSON lines)."

COMMANDS = {
    "scan": cmd_scan,
    "inspect": cmd_inspect,
    "diff": cmd_diff,
    "bisect": cmd_bisect,
    "_worker": cmd_worker,
}


def main(argv=None):
    opts = from_argv(argv, description=DESCRIPTION)
    if opts is None:
        parser(description=DESCRIPTION).print_help(sys.stderr)
        return EXIT_FAILED
    try:
        return COMMANDS[opts.COMMAND](opts)
    except Fatal as e:
        return fail(opts.COMMAND, str(e))


if __name__ == "__main__":
    sys.exit(main())
