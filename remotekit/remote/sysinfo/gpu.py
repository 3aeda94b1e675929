"""The ``gpu`` command: each GPU nvidia-smi lists, its compute apps, and what torch sees;
findings: heat, uncorrected ECC errors, throttling, a GPU short, torch without CUDA.
"""

from __future__ import annotations

import os

from .smi import SmiError, find_smi, query_apps, query_gpus, reasons, warn_invisible
from .torchview import torch_view

# The clocks_event_reasons bits (smi.REASON_BITS) that are worth a warning.
PROBLEM_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def cmd_gpu(args, out):
    smi = find_smi(args.nvidia_smi)
    gpus = []
    if smi is None:
        where = os.environ.get("PATH", "")
        if args.gpu_expected:
            out.error(
                "no_nvidia_smi",
                "nvidia-smi is not on PATH (%s): no NVIDIA driver utilities here" % where,
            )
        else:  # a CPU host (a laptop, a login node) is not a broken one
            out.note("no_gpu", "no GPU here (nvidia-smi is not on PATH: %s)" % where)
    else:
        try:
            gpus, field = query_gpus(out, smi, args.smi_timeout)
        except SmiError as exc:
            out.error(exc.code, exc.message, nvidia_smi=smi)
        else:
            out.emit("smi", path=smi, throttle_field=field, gpu_count=len(gpus))
            for g in gpus:
                out.emit("gpu", **g)
            for g in gpus:
                warn_gpu(out, g, args.temp_threshold)
            count_gpus(out, len(gpus), args.gpus)
            uuid_index = {g["uuid"]: g["index"] for g in gpus}
            apps = query_apps(out, smi, args.smi_timeout, uuid_index)
            for app in apps:
                out.emit("gpu_process", **app)
            warn_invisible(out, apps)
    torch = torch_view(full=False)
    out.emit("torch", **torch)
    if not torch["importable"]:
        out.note("no_torch", torch["error"])
    elif gpus and not torch["cuda_available"] and not hidden_on_purpose():
        why = "a CPU-only build" if not torch["cuda"] else "built for CUDA %s" % torch["cuda"]
        out.warning(
            "torch_no_cuda",
            "nvidia-smi sees %d GPU(s) but torch %s (%s) cannot use "
            "CUDA%s"
            % (len(gpus), torch["version"], why, ": " + torch["error"] if torch["error"] else ""),
        )
    elif gpus and torch["cuda_available"] and "CUDA_VISIBLE_DEVICES" not in os.environ:
        if torch["device_count"] != len(gpus):
            out.warning(
                "torch_device_count",
                "torch sees %s CUDA device(s) but nvidia-smi lists %d GPU(s)"
                % (torch["device_count"], len(gpus)),
            )
    return out.done()


def count_gpus(out, seen, declared):
    """Fewer GPUs seen than ``declared`` (0: not said) is a finding: a GPU that fell off the
    bus (Xid 79) or that the driver lost leaves a node that still runs, one GPU short."""
    if declared and seen < declared:
        out.warning(
            "gpus_missing",
            "%d GPU(s) seen where %d are declared (gpus: %d): one fell off the bus or the "
            "driver lost it (look for 'Xid' in dmesg); a job sized for %d will not fit"
            % (seen, declared, declared, declared),
            seen=seen,
            declared=declared,
        )
    elif declared and seen > declared:
        out.note(
            "gpus_more",
            "%d GPU(s) seen where %d are declared (gpus: %d)" % (seen, declared, declared),
            seen=seen,
            declared=declared,
        )


def hidden_on_purpose():
    """CUDA_VISIBLE_DEVICES="" or "-1" hides every GPU from CUDA deliberately."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")


def warn_gpu(out, g, threshold):
    label = "GPU %s" % g["index"]
    temp = g["temperature_c"]
    if temp is not None and temp >= threshold:
        out.warning(
            "high_temperature",
            "%s: temperature %d C >= %g C" % (label, temp, threshold),
            gpu=g["index"],
        )
    vol, agg = g["ecc_uncorrected_volatile"], g["ecc_uncorrected_aggregate"]
    if vol:
        out.warning(
            "ecc_uncorrected",
            "%s: %d uncorrected ECC error(s) since the driver loaded "
            "(%s in its lifetime): drain it and check Xid 48/63/64/94/95 "
            "and remapped rows" % (label, vol, "?" if agg is None else agg),
            gpu=g["index"],
        )
    elif agg:
        out.warning(
            "ecc_uncorrected",
            "%s: %d uncorrected ECC error(s) in its lifetime (none since "
            "the driver loaded): check remapped rows" % (label, agg),
            gpu=g["index"],
        )
    mask = g["throttle_mask"]
    if mask is not None and mask & PROBLEM_BITS:
        names = reasons(mask & PROBLEM_BITS)
        out.warning(
            "throttle",
            "%s: clocks held back by %s (0x%016x, SM %s MHz)"
            % (label, ", ".join(names), mask, g["clocks_sm_mhz"]),
            gpu=g["index"],
            reasons=names,
        )
