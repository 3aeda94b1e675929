"""What torch is here and what it sees (the "torch" record of ``gpu`` and ``env``)."""

from __future__ import annotations

import sys

from .base import MIB


def torch_view(full):
    """The "torch" record's fields: what torch is and what it sees (never raises).

    ``full`` adds the cuDNN / NCCL versions (env); device names and memory come from
    ``get_device_properties``, which creates no CUDA context on the GPUs.
    """
    rec = {
        "importable": False,
        "version": None,
        "cuda": None,
        "cudnn": None,
        "nccl": None,
        "cuda_available": None,
        "device_count": None,
        "devices": [],
        "error": None,
    }
    try:
        import torch  # optional: the host may have no torch
    except ImportError as exc:
        rec["error"] = "torch is not installed for %s (%s)" % (sys.executable, exc)
        return rec
    except Exception as exc:  # a broken install: missing libcudart, ABI mismatch ...
        rec["error"] = "import torch failed: %s: %s" % (type(exc).__name__, exc)
        return rec
    rec["importable"] = True
    rec["version"] = str(getattr(torch, "__version__", "unknown"))
    rec["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    if full:
        try:
            cudnn = torch.backends.cudnn.version()
            rec["cudnn"] = str(cudnn) if cudnn is not None else None
        except Exception:
            pass
        try:
            nccl = torch.cuda.nccl.version()
            rec["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            pass
    try:
        rec["cuda_available"] = bool(torch.cuda.is_available())
        rec["device_count"] = int(torch.cuda.device_count()) if rec["cuda_available"] else 0
        for i in range(rec["device_count"]):
            props = torch.cuda.get_device_properties(i)
            rec["devices"].append(
                {
                    "index": i,
                    "name": props.name,
                    "total_memory_mib": int(props.total_memory // MIB),
                    "capability": "%d.%d" % (props.major, props.minor),
                    "uuid": device_uuid(props),
                    "pci_bus_id": device_bus_id(props),
                }
            )
    except Exception as exc:
        rec["error"] = "torch.cuda failed: %s: %s" % (type(exc).__name__, exc)
    return rec


def device_uuid(props):
    """A CUDA device's UUID as nvidia-smi writes it (``GPU-8932f937-...``), or None: torch's
    ``uuid`` property (torch >= 2.0) prints without the ``GPU-`` prefix."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def device_bus_id(props):
    """The PCI bus id as nvidia-smi writes it (``00000000:18:00.0``), where torch has it."""
    try:
        ids = (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
        return "%08X:%02X:%02X.0" % tuple(int(i) for i in ids)
    except (AttributeError, TypeError, ValueError):  # torch before 2.5 has none of them
        return None
