"""GPU, environment, disk and process facts of the host it runs on, as JSON lines.

Runs *there* (standard library, optional torch, Python >= 3.8)::

    python sysinfo.py gpu   [--temp-threshold 85] [--nvidia-smi PATH] [--smi-timeout 20]
    python sysinfo.py env
    python sysinfo.py disk  [--min-free-pct 10] [--top 10] [--max-entries N] PATH [PATH ...]
    python sysinfo.py procs [--all] [--nvidia-smi PATH] [--smi-timeout 20]

Every stdout line is one JSON object with a ``"type"``; nothing else is written to stdout.
Records common to all commands:

    {"type": "warning", "code": ..., "message": ...}   a finding (exit 1)
    {"type": "error",   "code": ..., "message": ...}   the check could not run (exit 2)
    {"type": "note",    "code": ..., "message": ...}   context, not a problem
    {"type": "done", "command": ..., "exit_code": 0|1|2, "warnings": n, "errors": n}   last

gpu:   "smi" (path, throttle_field), "gpu" (one per GPU), "gpu_process" (one per compute app;
       ``visible`` says whether its pid is in this process table), "torch".
env:   "env" (python, host, kernel, CPUs, memory, CUDA_VISIBLE_DEVICES, container), "torch".
disk:  "fs" (one per path), "walk" (one per walked path), "file" (largest files, biggest
       first), "checkpoint" (largest checkpoint per filesystem).
procs: "proc" (Python processes and processes that hold GPU memory or /dev/nvidia*;
       not this script and its ancestors, e.g. remotekit's runner), "gpu_process".

Numbers nvidia-smi reports as ``[N/A]`` (or any other ``[...]``) are ``null``. The exit code
is the ``done`` record's: 0 OK, 1 findings, 2 could not run. Command lines of other processes
have secret-looking values (``--token x``, ``PASSWORD=x``) replaced by ``***`` before they
leave the host.
"""

from __future__ import annotations

import heapq
import os
import re
import stat
import sys
import time

# csv, platform, shutil, socket and subprocess are imported where they are used (gpu, env,
# procs): together ~8 ms a step, which the disk command, needing none, does not pay. The
# command line is read without argparse (parse): its import and parsers cost a step ~4 ms.

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )
from remotekit.remote.protocol import Out, mask_argv

GPU_QUERY = [
    "index",
    "uuid",
    "name",
    "pstate",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
]
EVENT_FIELD = "clocks_event_reasons.active"
THROTTLE_FIELD = "clocks_throttle_reasons.active"  # the name before driver 535
APP_QUERY = ["gpu_uuid", "pid", "process_name", "used_memory"]
NO_DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"

# clocks_event_reasons bits (nvml.h nvmlClocksEventReason*); PROBLEM_BITS are the ones worth a warning.
REASON_BITS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]
PROBLEM_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

# (fixed in, CVE, what it is): torch releases below "fixed in" are affected.
TORCH_CVES = [
    (
        (2, 6, 0),
        "CVE-2025-32434",
        "remote code execution via torch.load even with weights_only=True",
    ),
    ((2, 10, 0), "CVE-2026-24747", "memory corruption in the weights-only unpickler"),
]

CKPT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".distcp", ".pkl")
# A save folder's name: one of these words (any case), an optional - or _, then digits.
CKPT_DIR_WORDS = ("checkpoint", "ckpt", "step", "global_step", "iter", "epoch")
# Patterns, compiled where first used (re keeps them): a step compiles only what its command
# matches, not all of them at import (~0.1 ms each in a fresh step). The checkpoint names
# are told without one: the disk command then compiles none (~0.5 ms of a step).
WHITESPACE_RE = r"\s+"
PYTHON_RE = r"^(python|pypy)[\d.]*(-dbg)?$"

MIB = 1024 * 1024


# --------------------------------------------------------------------------- nvidia-smi


class SmiError(Exception):
    """nvidia-smi could not answer; ``code`` is the record code (no_nvidia_smi, no_driver ...)."""

    def __init__(self, code, message, said=""):
        Exception.__init__(self, message)
        self.code = code
        self.message = message
        self.said = said  # nvidia-smi's own first line, when it said something


def run_tool(argv, timeout):
    """(exit code, stdout, stderr) of ``argv``; a hung child is killed and not waited for long.

    A process stuck in the driver (D state) survives SIGKILL until the driver lets go, so
    after the kill we wait at most 2 s more and then leave it.
    """
    import contextlib
    import subprocess

    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        raise
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def find_smi(explicit):
    if explicit:
        return explicit
    import shutil

    return shutil.which("nvidia-smi")


def smi_query(smi, query_flag, fields, timeout):
    """Rows (lists of strings) of ``nvidia-smi --query-...=fields``; raises SmiError."""
    import csv
    import subprocess

    argv = [smi, "%s=%s" % (query_flag, ",".join(fields)), "--format=csv,noheader,nounits"]
    try:
        code, out, err = run_tool(argv, timeout)
    except subprocess.TimeoutExpired:
        raise SmiError(
            "nvidia_smi_timeout",
            "nvidia-smi did not answer within %g s (a GPU or the driver may be hung)" % timeout,
        ) from None
    except OSError as exc:
        raise SmiError("nvidia_smi_failed", "could not run %s: %s" % (smi, exc)) from exc
    text = (out + "\n" + err).strip()
    if code != 0:
        if NO_DRIVER_TEXT in text or code == 9:
            raise SmiError("no_driver", first_line(text) or "nvidia-smi exited with 9 (no driver)")
        if "No devices were found" in text:
            raise SmiError("no_devices", "nvidia-smi: No devices were found")
        raise SmiError(
            "nvidia_smi_failed",
            "%s exited with %d: %s" % (" ".join(argv[:2]), code, first_line(text)),
            first_line(text),
        )
    rows = []
    for row in csv.reader(out.splitlines(), skipinitialspace=True):
        if row:
            rows.append([c.strip() for c in row])
    return rows


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def value(s, kind=int):
    """A number from an nvidia-smi cell; ``None`` for [N/A], [Not Supported], [Unknown Error] ..."""
    s = (s or "").strip()
    if not s or s.startswith("[") or s.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    s = s.split()[0]  # tolerate units ("71234 MiB") if a format without nounits slips in
    try:
        return kind(float(s)) if kind is int else kind(s)
    except ValueError:
        return None


def text_value(s):
    s = (s or "").strip()
    return None if not s or s.startswith("[") else s


def reasons(mask):
    if mask is None:
        return []
    return [name for bit, name in REASON_BITS if mask & bit]


def query_gpus(out, smi, timeout):
    """Rows of the GPU query as dicts, retrying with the pre-535 throttle field; raises SmiError."""
    fields = list(GPU_QUERY)
    try:
        rows = smi_query(smi, "--query-gpu", fields, timeout)
    except SmiError as exc:
        if exc.said != 'Field "%s" is not a valid field to query.' % EVENT_FIELD:
            raise
        fields[fields.index(EVENT_FIELD)] = THROTTLE_FIELD
        out.note(
            "old_driver_field",
            "this driver does not know %s; using %s" % (EVENT_FIELD, THROTTLE_FIELD),
        )
        rows = smi_query(smi, "--query-gpu", fields, timeout)
    gpus = []
    for row in rows:
        if len(row) != len(fields):
            out.note(
                "smi_parse",
                "skipped an nvidia-smi row with %d fields (expected %d): %s"
                % (len(row), len(fields), ", ".join(row)),
            )
            continue
        cell = dict(zip(fields, row))
        mask_text = text_value(cell.get(EVENT_FIELD, cell.get(THROTTLE_FIELD)))
        try:
            mask = int(mask_text, 16) if mask_text else None
        except ValueError:
            mask = None
        gpus.append(
            {
                "index": value(cell["index"]),
                "uuid": text_value(cell["uuid"]),
                "name": text_value(cell["name"]),
                "pstate": text_value(cell["pstate"]),
                "utilization_pct": value(cell["utilization.gpu"]),
                "memory_used_mib": value(cell["memory.used"]),
                "memory_total_mib": value(cell["memory.total"]),
                "temperature_c": value(cell["temperature.gpu"]),
                "power_draw_w": value(cell["power.draw"], float),
                "power_limit_w": value(cell["power.limit"], float),
                "clocks_sm_mhz": value(cell["clocks.sm"]),
                "throttle_mask": mask,
                "throttle_reasons": reasons(mask),
                "ecc_uncorrected_volatile": value(cell["ecc.errors.uncorrected.volatile.total"]),
                "ecc_uncorrected_aggregate": value(cell["ecc.errors.uncorrected.aggregate.total"]),
            }
        )
    return gpus, (EVENT_FIELD if EVENT_FIELD in fields else THROTTLE_FIELD)


def query_apps(out, smi, timeout, uuid_index):
    """Compute apps as dicts; on failure a note and an empty list (the GPU view still stands)."""
    try:
        rows = smi_query(smi, "--query-compute-apps", APP_QUERY, timeout)
    except SmiError as exc:
        out.note("compute_apps_failed", "could not list GPU processes: %s" % exc.message)
        return []
    apps = []
    for row in rows:
        if len(row) != len(APP_QUERY):
            continue
        cell = dict(zip(APP_QUERY, row))
        pid = value(cell["pid"])
        if pid is None:
            continue
        uuid = text_value(cell["gpu_uuid"])
        apps.append(
            {
                "gpu_uuid": uuid,
                "gpu_index": uuid_index.get(uuid),
                "pid": pid,
                "process_name": cell["process_name"],
                "used_memory_mib": value(cell["used_memory"]),
                "visible": os.path.exists("/proc/%d" % pid),
            }
        )
    return apps


def warn_invisible(out, apps):
    """One warning per pid that holds GPU memory but is not in this process table."""
    by_pid = {}
    for app in apps:
        if not app["visible"]:
            by_pid.setdefault(app["pid"], []).append(app)
    for pid in sorted(by_pid):
        held = by_pid[pid]
        mem = sum(a["used_memory_mib"] or 0 for a in held)
        where = ", ".join(
            str(a["gpu_index"]) if a["gpu_index"] is not None else str(a["gpu_uuid"]) for a in held
        )
        out.warning(
            "stale_gpu_memory",
            "pid %d (%s) holds %d MiB on GPU %s but is not visible here: a process that "
            "ended without freeing its memory, or one in another container / pid namespace"
            % (pid, held[0]["process_name"], mem, where),
            pid=pid,
            gpus=[a["gpu_index"] for a in held],
            memory_mib=mem,
        )


# --------------------------------------------------------------------------- torch


def torch_version_tuple(version):
    """(major, minor, patch), and whether it is a pre-release, of a torch version string."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?([^+]*)", version or "")
    if not m:
        return None, False
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    pre = bool(re.search(r"(a|b|rc|dev)\d*", m.group(4) or ""))
    return release, pre


def torch_cve_findings(version):
    """[(cve, message)] for a torch version with a known checkpoint-loading CVE."""
    release, pre = torch_version_tuple(version)
    if release is None:
        return []
    found = []
    for fixed, cve, what in TORCH_CVES:
        fixed_s = "%d.%d" % fixed[:2]
        if release < fixed:
            found.append(
                (
                    cve,
                    "torch %s is affected by %s (%s; fixed in %s): load only "
                    "checkpoints you trust, and upgrade" % (version, cve, what, fixed_s),
                )
            )
        elif pre and release == fixed:
            found.append(
                (
                    cve,
                    "torch %s is a pre-release of %s, which fixed %s (%s): this build "
                    "may predate the fix" % (version, fixed_s, cve, what),
                )
            )
    return found


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


# --------------------------------------------------------------------------- gpu


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


# --------------------------------------------------------------------------- env


def read_text(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def meminfo():
    fields = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[key] = int(parts[0]) * 1024 // MIB  # kB -> MiB
    return fields.get("MemTotal"), fields.get("MemAvailable")


def cgroup_memory_limit_mib():
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (read_text(path) or "").strip()
        if text.isdigit() and int(text) < (1 << 60):
            return int(text) // MIB
    return None


def container_info():
    """{"detected": bool|None, "kind": str|None, "evidence": [str]} from the usual markers."""
    import shutil
    import subprocess

    kind, evidence = None, []
    if os.path.exists("/run/.containerenv"):
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    if os.path.exists("/.dockerenv"):
        kind = kind or "docker"
        evidence.append("/.dockerenv exists")
    environ = read_text("/proc/1/environ")
    if environ is None:
        evidence.append("/proc/1/environ not readable")
    else:
        for item in environ.split("\0"):
            if item.startswith("container="):  # only this key leaves the host, never others
                kind = kind or item.split("=", 1)[1] or None
                evidence.append("pid 1 has %s" % item)
    cgroup = read_text("/proc/1/cgroup") or ""
    for marker in ("docker", "lxc", "kubepods", "libpod", "containerd"):
        if marker in cgroup:
            kind = kind or marker
            evidence.append("/proc/1/cgroup mentions %s" % marker)
            break
    tool = shutil.which("systemd-detect-virt")
    if tool is None:
        evidence.append("systemd-detect-virt not available")
    else:
        try:
            code, text, _ = run_tool([tool, "--container"], 5)
            found = text.strip()
            if code == 0 and found and found != "none":
                kind = kind or found
                evidence.append("systemd-detect-virt --container: %s" % found)
            else:
                evidence.append("systemd-detect-virt --container: none")
        except (OSError, subprocess.TimeoutExpired) as exc:
            evidence.append("systemd-detect-virt failed: %s" % exc)
    detected = kind is not None
    return {"detected": detected, "kind": kind, "evidence": evidence}


def os_release():
    for line in (read_text("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def cmd_env(args, out):
    import platform
    import socket

    mem_total, mem_avail = meminfo()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    out.emit(
        "env",
        python=platform.python_version(),
        python_executable=sys.executable,
        venv=sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        hostname=socket.gethostname(),
        kernel=platform.release(),
        os=os_release(),
        cpu_count=os.cpu_count(),
        cpu_usable=usable,
        mem_total_mib=mem_total,
        mem_available_mib=mem_avail,
        cgroup_memory_limit_mib=cgroup_memory_limit_mib(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        container=container_info(),
    )
    torch = torch_view(full=True)
    out.emit("torch", **torch)
    if not torch["importable"]:
        out.note("no_torch", torch["error"])
    else:
        for cve, message in torch_cve_findings(torch["version"]):
            out.warning("torch_cve", message, cve=cve)
    return out.done()


# --------------------------------------------------------------------------- disk


def is_checkpoint_file(name, folder=""):
    """A checkpoint's file by its name: a torch or safetensors suffix, or a ``.bin`` named
    as HF and DeepSpeed name theirs (``pytorch_model*``, ``*optim*``, ``*model_states*``)."""
    # A .pth in site-packages is Python's path configuration file, not a torch checkpoint.
    if name.endswith(".pth") and os.path.basename(folder) in ("site-packages", "dist-packages"):
        return False
    if name.endswith(CKPT_SUFFIXES):
        return True
    if not name.endswith(".bin"):
        return False
    stem = name[:-4]
    return stem.startswith("pytorch_model") or "optim" in stem or "model_states" in stem


def is_checkpoint_dir(name):
    """A save folder's name: ``checkpoint-500``, ``global_step100``, ``Epoch_3``, ``iter7``."""
    head = name.rstrip("0123456789")
    if head == name:
        return False
    head = head.lower()
    return head in CKPT_DIR_WORDS or (head[-1:] in ("-", "_") and head[:-1] in CKPT_DIR_WORDS)


def mount_of(path, mounts):
    """(mount point, fs type) holding ``path``, from /proc/self/mounts (longest match)."""
    best = ("/", None)
    for mnt, fstype in mounts:
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, fstype)
    return best


def read_mounts():
    mounts = []
    for line in (read_text("/proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append((parts[1].replace("\\040", " "), parts[2]))
    return mounts


class Walk(object):
    """A bounded, one-filesystem walk: top files by size and checkpoint sizes.

    A checkpoint is (a) a directory named like ``checkpoint-500`` / ``global_step100`` /
    ``iter_0001000`` holding checkpoint files anywhere below it (its whole subtree counts: a
    save writes all of it), else (b) a directory with a DCP ``.metadata`` or a
    ``*.index.json`` next to checkpoint files (its files count), else (c) a single checkpoint
    file (``.pt``, ``.safetensors`` ...).
    """

    def __init__(self, top, max_entries, deadline):
        self.top = top
        self.max_entries = max_entries
        self.deadline = deadline
        self.heap = []  # (size, path, mtime, is_ckpt), smallest first
        self.entries = 0
        self.checkpoints = []  # (size, path, kind)

    def walk(self, root, dev):
        """Walk ``root`` on device ``dev`` (depth first, within the entry and time budgets)."""
        stats = {
            "root": root,
            "files": 0,
            "dirs": 0,
            "bytes": 0,
            "truncated": None,
            "errors": 0,
            "other_filesystems": 0,
        }
        named = {}  # named checkpoint dir -> [bytes, ckpt files]
        stack = [(root, None)]
        while stack and not stats["truncated"]:
            path, named_root = stack.pop()
            if time.monotonic() > self.deadline:
                stats["truncated"] = "max_seconds"
                break
            stats["dirs"] += 1
            if named_root is None and is_checkpoint_dir(os.path.basename(path)):
                named_root = path
                named[path] = [0, 0]
            self._directory(path, named_root, named, stats, stack, dev)
        for path, (size, count) in named.items():
            if count:
                self.checkpoints.append((size, path, "dir"))
        return stats

    def _directory(self, path, named_root, named, stats, stack, dev):
        """One directory's entries: subdirectories onto ``stack``, files into the counts.

        The loop runs once per entry (up to --max-entries), so its bookkeeping stays inline
        instead of costing a call per file.
        """
        direct, direct_ckpt, marked = 0, 0, False
        try:
            it = os.scandir(path)
        except OSError:
            stats["errors"] += 1
            return
        with it:
            for entry in it:
                if self.entries >= self.max_entries:
                    stats["truncated"] = "max_entries"
                    break
                self.entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    stats["errors"] += 1
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if st.st_dev != dev:
                        stats["other_filesystems"] += 1
                    else:
                        stack.append((entry.path, named_root))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                size = st.st_size
                stats["files"] += 1
                stats["bytes"] += size
                ckpt = is_checkpoint_file(entry.name, os.path.dirname(entry.path))
                if entry.name == ".metadata" or entry.name.endswith(".index.json"):
                    marked = True
                direct += size
                direct_ckpt += ckpt
                if named_root is not None:
                    named[named_root][0] += size
                    named[named_root][1] += ckpt
                elif ckpt:
                    self.checkpoints.append((size, entry.path, "file"))
                item = (size, entry.path, int(st.st_mtime), ckpt)
                if len(self.heap) < self.top:
                    heapq.heappush(self.heap, item)
                elif self.heap and size > self.heap[0][0]:
                    heapq.heapreplace(self.heap, item)
        if named_root is None and marked and direct_ckpt:
            # a DCP / sharded dir: replace its single files by the directory as one checkpoint
            self.checkpoints = [c for c in self.checkpoints if os.path.dirname(c[1]) != path]
            self.checkpoints.append((direct, path, "dir"))


def statvfs_record(path, mounts):
    rec = {"path": path, "exists": os.path.exists(path), "checked": None}
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    rec["checked"] = probe
    try:
        vfs = os.statvfs(probe)
        dev = os.stat(probe).st_dev
    except OSError as exc:
        rec["error"] = str(exc)
        return rec, None
    total = vfs.f_blocks * vfs.f_frsize
    free = vfs.f_bavail * vfs.f_frsize
    mnt, fstype = mount_of(os.path.realpath(probe), mounts)
    rec.update(
        {
            "mount": mnt,
            "fstype": fstype,
            "total_bytes": total,
            "free_bytes": free,
            "used_bytes": (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize,
            "free_pct": round(100.0 * free / total, 2) if total else None,
            "inodes_total": vfs.f_files or None,
            "inodes_free": vfs.f_favail if vfs.f_files else None,
            "inodes_free_pct": round(100.0 * vfs.f_favail / vfs.f_files, 2)
            if vfs.f_files
            else None,
        }
    )
    return rec, dev


def gib(n):
    return "%.1f GiB" % (n / float(1 << 30))


def cmd_disk(args, out):
    mounts = read_mounts()
    deadline = time.monotonic() + args.max_seconds
    walker = Walk(args.top, args.max_entries, deadline)
    fs = {}  # st_dev -> {"rec": first fs record, "paths": [...], "ckpts": [(size, path, kind)]}
    walked = []
    for raw in args.paths:
        disk_path(out, raw, mounts, walker, fs, walked)
    for size, path, mtime, ckpt in sorted(walker.heap, reverse=True):
        out.emit("file", path=path, size_bytes=size, mtime=mtime, checkpoint=ckpt)
    for entry in fs.values():
        warn_filesystem(out, entry, args.min_free_pct)
    return out.done()


def disk_path(out, raw, mounts, walker, fs, walked):
    """The "fs" record of one path and, unless a walked path holds it, its "walk"."""
    path = os.path.abspath(os.path.expanduser(raw))
    rec, dev = statvfs_record(path, mounts)
    rec["path"] = raw
    out.emit("fs", **rec)
    if dev is None:
        out.error("statvfs_failed", "%s: %s" % (raw, rec.get("error")))
        return
    entry = fs.setdefault(dev, {"rec": rec, "paths": [], "ckpts": []})
    entry["paths"].append(raw)
    if not rec["exists"]:
        out.warning(
            "missing_path",
            "%s does not exist (checked %s, its nearest existing parent)" % (raw, rec["checked"]),
            path=raw,
        )
        return
    if not os.path.isdir(path):
        return
    real = os.path.realpath(path)
    inside = [w for w in walked if real == w or real.startswith(w.rstrip("/") + "/")]
    if inside:
        out.emit("walk", root=raw, inside=inside[0])
        return
    walked.append(real)
    before = len(walker.checkpoints)
    stats = walker.walk(real, dev)
    stats["root"] = raw
    out.emit("walk", inside=None, **stats)
    if stats["truncated"]:
        out.note(
            "walk_truncated",
            "%s: walk stopped at %s after %d entries; sizes are a lower "
            "bound" % (raw, stats["truncated"], walker.entries),
        )
    entry["ckpts"].extend(walker.checkpoints[before:])


def warn_filesystem(out, entry, min_free_pct):
    """Low space, low inodes, and a largest checkpoint that would not fit again."""
    rec, paths = entry["rec"], " ".join(entry["paths"])
    where = "%s (%s)" % (rec["mount"], paths)
    if rec["free_pct"] is not None and rec["free_pct"] < min_free_pct:
        out.warning(
            "low_space",
            "%s: %s free of %s (%.1f%% < %g%%)"
            % (
                where,
                gib(rec["free_bytes"]),
                gib(rec["total_bytes"]),
                rec["free_pct"],
                min_free_pct,
            ),
            mount=rec["mount"],
        )
    ipct = rec["inodes_free_pct"]
    if ipct is not None and ipct < min_free_pct:
        out.warning(
            "low_inodes",
            "%s: %d of %d inodes free (%.1f%% < %g%%)"
            % (where, rec["inodes_free"], rec["inodes_total"], ipct, min_free_pct),
            mount=rec["mount"],
        )
    if entry["ckpts"]:
        size, path, kind = max(entry["ckpts"])
        out.emit("checkpoint", path=path, size_bytes=size, kind=kind, mount=rec["mount"])
        if size > rec["free_bytes"]:
            out.warning(
                "checkpoint_wont_fit",
                "%s: the largest checkpoint %s is %s but only %s is free: the next "
                "save of that size will not fit" % (where, path, gib(size), gib(rec["free_bytes"])),
                mount=rec["mount"],
                path=path,
                size_bytes=size,
            )


# --------------------------------------------------------------------------- procs


def proc_info(pid, clk_tck, uptime):
    """A dict for /proc/<pid>, or None when it is gone (or unreadable)."""
    base = "/proc/%d" % pid
    stat_text = read_text(base + "/stat")
    if stat_text is None:
        return None
    comm = stat_text[stat_text.find("(") + 1 : stat_text.rfind(")")]
    rest = stat_text[stat_text.rfind(")") + 2 :].split()
    raw = read_text(base + "/cmdline") or ""
    argv = [a for a in raw.split("\0") if a]
    rss = None
    uid = None
    for line in (read_text(base + "/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) // 1024
        elif line.startswith("Uid:"):
            uid = int(line.split()[1])
    try:
        fds = os.listdir(base + "/fd")
    except OSError:
        gpu_fds = None
    else:
        gpu_fds = False
        for fd in fds:
            try:
                if os.readlink(base + "/fd/" + fd).startswith("/dev/nvidia"):
                    gpu_fds = True
                    break
            except OSError:
                continue
    exe0 = os.path.basename(argv[0]) if argv else ""
    return {
        "pid": pid,
        "ppid": int(rest[1]),
        "uid": uid,
        "state": rest[0],
        "comm": comm,
        "cmdline": re.sub(WHITESPACE_RE, " ", " ".join(mask_argv(argv)))[:1000]
        if argv
        else "[%s]" % comm,
        "age_s": round(uptime - int(rest[19]) / float(clk_tck), 1),
        "rss_mib": rss,
        "python": bool(re.match(PYTHON_RE, exe0) or re.match(PYTHON_RE, comm)),
        "gpu_fds": gpu_fds,
    }


def ancestry():
    """This process and the ones that started it (remotekit's runner, a shell ...)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        text = read_text("/proc/%d/stat" % pid) or ""
        try:
            pid = int(text[text.rfind(")") + 2 :].split()[1])
        except (IndexError, ValueError):
            break
    return pids


def cmd_procs(args, out):
    try:
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        uptime = float((read_text("/proc/uptime") or "0").split()[0])
    except (OSError, ValueError, IndexError) as exc:
        out.error("no_proc", "cannot read /proc: %s" % exc)
        return out.done()
    apps = gpu_apps(out, args)
    held = {}
    for app in apps:
        held.setdefault(app["pid"], []).append(app)
    procs = {}
    for pid, info in proc_infos(pids, uptime, held):
        if args.all or info["python"] or info["gpu_fds"] or held.get(pid):
            procs[pid] = info
            out.emit("proc", **info)
    for app in apps:
        out.emit("gpu_process", **app)
    warn_invisible(out, apps)
    warn_stopped_holders(out, procs)
    warn_shared_gpus(out, apps)
    return out.done()


def gpu_apps(out, args):
    """The compute apps nvidia-smi lists ([] without it: a note says so)."""
    smi = find_smi(args.nvidia_smi)
    if smi is None:
        out.note("no_nvidia_smi", "nvidia-smi is not on PATH: GPU memory per process unknown")
        return []
    try:
        gpus = query_gpus(out, smi, args.smi_timeout)[0]
        uuid_index = {g["uuid"]: g["index"] for g in gpus}
    except SmiError as exc:
        out.note(exc.code, "GPU memory per process unknown: %s" % exc.message)
        return []
    return query_apps(out, smi, args.smi_timeout, uuid_index)


def proc_infos(pids, uptime, held):
    """(pid, info) of each readable process but this script and its ancestors, with the GPU
    memory it holds (``held``: pid -> compute apps)."""
    clk_tck = os.sysconf("SC_CLK_TCK")
    mine = ancestry()
    for pid in pids:
        if pid in mine:
            continue
        try:
            info = proc_info(pid, clk_tck, uptime)
        except (ValueError, IndexError):  # it exited while we read it
            continue
        if info is None:
            continue
        holding = held.get(pid, [])
        info["gpus"] = [a["gpu_index"] for a in holding]
        info["gpu_memory_mib"] = (
            sum(a["used_memory_mib"] or 0 for a in holding) if holding else None
        )
        yield pid, info


def warn_stopped_holders(out, procs):
    for pid, info in sorted(procs.items()):
        if info["gpu_memory_mib"] and info["state"] in ("T", "t", "Z"):
            what = "stopped" if info["state"] in ("T", "t") else "a zombie"
            out.warning(
                "stopped_gpu_holder",
                "pid %d (%s) holds %d MiB on GPU %s but is %s (%s)"
                % (
                    pid,
                    info["cmdline"][:120],
                    info["gpu_memory_mib"],
                    ", ".join(str(i) for i in info["gpus"]),
                    what,
                    info["state"],
                ),
                pid=pid,
            )


def warn_shared_gpus(out, apps):
    per_gpu = {}
    for app in apps:
        per_gpu.setdefault(app["gpu_index"], {})[app["pid"]] = app
    for index in sorted(per_gpu, key=lambda i: (i is None, i)):
        holders = per_gpu[index]
        if len(holders) > 1:
            parts = [
                "pid %d %s MiB" % (pid, a["used_memory_mib"]) for pid, a in sorted(holders.items())
            ]
            out.warning(
                "shared_gpu",
                "GPU %s memory is held by %d processes (%s): is an older run "
                "still holding it?" % (index, len(holders), ", ".join(parts)),
                gpu=index,
                pids=sorted(holders),
            )


# --------------------------------------------------------------------------- main


#: Each command's options: ``--name`` -> (type, default); type bool is a flag. Only ``disk``
#: takes arguments (its paths, at least one).
OPTIONS = {
    "gpu": {
        "--temp-threshold": (float, 85.0),  # warn at or above (C)
        "--gpu-expected": (bool, False),  # no nvidia-smi is an error, not a note
        "--gpus": (int, 0),  # the GPUs the host has: fewer seen is a finding
        "--nvidia-smi": (str, None),  # path (default: found on PATH)
        "--smi-timeout": (float, 20.0),
    },
    "env": {},
    "disk": {
        "--min-free-pct": (float, 10.0),
        "--top": (int, 10),
        "--max-entries": (int, 200000),
        "--max-seconds": (float, 60.0),
    },
    "procs": {
        "--all": (bool, False),  # every process, not only Python/GPU ones
        "--nvidia-smi": (str, None),
        "--smi-timeout": (float, 20.0),
    },
}
USAGE = "usage: sysinfo.py {gpu,env,disk,procs} [--option VALUE]... [--] [PATH]..."


class Args(object):
    def __init__(self, fields):
        self.__dict__.update(fields)


def parse(argv):
    """``COMMAND [--option VALUE | --option=VALUE | --flag]... [--] [PATH]...``, as the
    local side writes it (OPTIONS), into an object with one attribute an option (``--top``:
    ``top``), ``command`` and ``paths``. A mistake exits 2 with the usage, as argparse's do."""
    if not argv or argv[0] not in OPTIONS:
        usage("the command is one of %s, not %r" % (", ".join(OPTIONS), argv[0] if argv else ""))
    options = OPTIONS[argv[0]]
    fields = {"command": argv[0], "paths": []}
    for name, (_, default) in options.items():
        fields[name[2:].replace("-", "_")] = default
    rest = list(argv[1:])
    while rest:
        word = rest.pop(0)
        if word == "--":
            fields["paths"] += rest
            break
        name, eq, value = word.partition("=")
        if name not in options:
            if word.startswith("-") and word != "-":
                usage("%s: unknown option %s" % (argv[0], word))
            fields["paths"].append(word)
            continue
        kind = options[name][0]
        if kind is bool:
            if eq:
                usage("%s: %s takes no value" % (argv[0], name))
            value = True
        elif not eq:
            if not rest:
                usage("%s: %s needs a value" % (argv[0], name))
            value = rest.pop(0)
        try:
            fields[name[2:].replace("-", "_")] = kind(value)
        except ValueError:
            usage("%s: %s takes a number, not %r" % (argv[0], name, value))
    if (argv[0] == "disk") != bool(fields["paths"]):
        usage("%s: %s" % (argv[0], "a path is needed" if argv[0] == "disk" else "no path is taken"))
    return Args(fields)


def usage(message):
    sys.stderr.write("%s\nsysinfo.py: error: %s\n" % (USAGE, message))
    sys.exit(2)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else list(argv))
    out = Out(args.command)
    command = {"gpu": cmd_gpu, "env": cmd_env, "disk": cmd_disk, "procs": cmd_procs}[args.command]
    try:
        return command(args, out)
    except BrokenPipeError:
        # the reader went away (lost connection, `| head`): there is no one left to tell
        sys.stdout = open(os.devnull, "w")  # lives until exit, on purpose
        return 2
    except Exception as exc:  # a bug here must still end in records, not a bare traceback
        import traceback

        traceback.print_exc()
        out.error(
            "internal", "sysinfo.py %s failed: %s: %s" % (args.command, type(exc).__name__, exc)
        )
        return out.done()


if __name__ == "__main__":
    sys.exit(main())
