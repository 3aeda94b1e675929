"""nvidia-smi asked and its answers read (the GPU and compute-app queries), for ``gpu`` and
``procs``; its cells that say ``[N/A]`` (or any other ``[...]``) are ``None``.
"""

from __future__ import annotations

import os

from .base import run_tool

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

# clocks_event_reasons bits (nvml.h nvmlClocksEventReason*); gpu.PROBLEM_BITS: those worth a warning.
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


class SmiError(Exception):
    """nvidia-smi could not answer; ``code`` is the record code (no_nvidia_smi, no_driver ...)."""

    def __init__(self, code, message, said=""):
        Exception.__init__(self, message)
        self.code = code
        self.message = message
        self.said = said  # nvidia-smi's own first line, when it said something


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
