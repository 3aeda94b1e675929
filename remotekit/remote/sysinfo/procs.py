"""The ``procs`` command: Python processes and those holding GPU memory or /dev/nvidia*
(not this script and its ancestors), with command lines masked; findings: a GPU's memory
held by a stopped process, one not visible here, or several processes on one GPU.
"""

from __future__ import annotations

import os
import re

from ..protocol import mask_argv
from .base import read_text
from .smi import SmiError, find_smi, query_apps, query_gpus, warn_invisible

# Compiled where first used (re keeps them), not at import.
WHITESPACE_RE = r"\s+"
PYTHON_RE = r"^(python|pypy)[\d.]*(-dbg)?$"


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
