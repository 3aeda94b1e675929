"""What one layer of a target's chain sees of the GPUs, as JSON lines.

Runs *there*, at each layer in turn (the node, inside each hop, the target's interpreter):
standard library, optional torch, Python >= 3.8::

    python gpulayers.py [--config PATH] [--torch] [--nvidia-smi PATH] [--smi-timeout 10]

Records (the record protocol of ``protocol.py``), then ``done``:

    {"type": "layer", ...}   nvidia-smi -L and its GPUs, the /dev/nvidia* nodes, the cgroup's
                             device rules, the kernel module's and the NVML library's
                             versions, the CUDA / NVIDIA / Slurm variables, and with
                             ``--config`` the GPU lines of the LXC config of the container
                             entered next (read from outside it, where it lives)
    {"type": "torch", ...}   with ``--torch``: torch's CUDA devices, with their UUIDs

Every file is read under ``$REMOTEKIT_GPU_ROOT`` (default ``/``): a test plants device nodes,
cgroup files and the driver's /proc files in a folder and names it there (the fake
nvidia-smi in tests/fakes reads the same variable). Everything a record carries from the
host (file lines, nvidia-smi's words) is bounded here; the local side shows it escaped.
Findings are the local side's: they compare layers (remotekit/diagnostics/gpulayers.py).
"""

from __future__ import annotations

import os
import re
import stat
import sys

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )
from remotekit.remote.protocol import Out
from remotekit.remote.sysinfo.base import read_text, run_tool
from remotekit.remote.sysinfo.smi import find_smi
from remotekit.remote.sysinfo.torchview import torch_view

ROOT_VAR = "REMOTEKIT_GPU_ROOT"
#: The environment a layer passes on to CUDA: CUDA's own (CUDA programming guide, "CUDA
#: Environment Variables"), the NVIDIA container toolkit's (NVIDIA_VISIBLE_DEVICES, read by
#: its runtime hook when the container starts), and Slurm's gres/gpu plugin's: slurmstepd
#: sets SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES in a step, SLURM_JOB_GPUS in the batch
#: script (slurm.schedmd.com/gres.html; seen on slurm 22.05 here).
ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS_ON_NODE",
)
#: Where a driver install puts libnvidia-ml.so.<version> (Debian/Ubuntu multiarch, RHEL's
#: lib64, the NVIDIA container toolkit's legacy /usr/local/nvidia, WSL).
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)
MAX_LINES = 200  # of a devices.list, of the GPU lines of a config
MAX_TEXT = 300  # characters of one line or of what a tool said
MAX_NODES = 128  # /dev/nvidia* entries

# nvidia-smi's words when it cannot answer, first match wins (its exit code is NVML's
# nvmlReturn_t: 9 driver not loaded, 12 library not found, 18 library/driver mismatch,
# 255 anything else, e.g. "Unknown Error" when a cgroup blocks /dev/nvidia*:
# NVIDIA/nvidia-docker#1730; gputil#55 shows "NVML library version: 535.161" after a
# mismatch, exit 18).
SMI_PROBLEMS = (
    ("Driver/library version mismatch", "nvml_mismatch"),
    ("couldn't communicate with the NVIDIA driver", "no_driver"),
    ("couldn't find libnvidia-ml.so", "no_nvml_library"),
    ("Failed to initialize NVML: Unknown Error", "nvml_blocked"),
    ("Insufficient Permissions", "no_permission"),
    ("No devices were found", "no_devices"),
)
LIST_RE = r"^GPU (\d+): (.*?) \(UUID: ([^)\s]+)\)"


def under(root, path):
    """``path`` (absolute, as the host names it) inside ``root``."""
    return path if root == "/" else os.path.join(root, path.lstrip("/"))


def bounded(text, limit=MAX_TEXT):
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- nvidia-smi


def smi_view(smi, timeout):
    """``nvidia-smi -L`` (and, when it answers, the bus id and driver of each GPU)."""
    import subprocess

    view = {"path": smi, "exit_code": None, "said": None, "problem": None, "gpus": []}
    if smi is None:
        view["problem"] = "no_nvidia_smi"
        return view
    try:
        code, out, err = run_tool([smi, "-L"], timeout)
    except subprocess.TimeoutExpired:
        view["problem"] = "timeout"
        view["said"] = "no answer within %g s" % timeout
        return view
    except OSError as exc:
        view["problem"] = "not_runnable"
        view["said"] = bounded(str(exc))
        return view
    view["exit_code"] = code
    for m in re.finditer(LIST_RE, out, re.M):
        view["gpus"].append(
            {"index": int(m.group(1)), "name": bounded(m.group(2), 100), "uuid": m.group(3)[:80]}
        )
    if code != 0 or not view["gpus"]:
        text = (out + "\n" + err).strip()
        view["said"] = bounded(" ".join(text.split())) if text else None
        view["problem"] = next((p for words, p in SMI_PROBLEMS if words in text), "failed")
        if code == 0 and not text:
            view["problem"] = "no_devices"
        return view
    add_bus_ids(view, smi, timeout)
    return view


def add_bus_ids(view, smi, timeout):
    """Each GPU's PCI bus id and driver version (the order CUDA_DEVICE_ORDER=PCI_BUS_ID uses)."""
    import subprocess

    argv = [smi, "--query-gpu=index,uuid,pci.bus_id,driver_version", "--format=csv,noheader"]
    try:
        code, out, _ = run_tool(argv, timeout)
    except (OSError, subprocess.TimeoutExpired):
        return
    if code != 0:
        return
    by_uuid = {g["uuid"]: g for g in view["gpus"]}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4 and cells[1] in by_uuid:
            by_uuid[cells[1]]["bus_id"] = cells[2][:40]
            by_uuid[cells[1]]["driver"] = cells[3][:40]


# --------------------------------------------------------------------------- files


def device_nodes(root):
    """The /dev/nvidia* entries (and /dev/nvidia-caps/*): kind, numbers, mode, owner, and
    whether this process may open them for reading and writing."""
    dev = under(root, "/dev")
    names = []
    try:
        names = sorted(n for n in os.listdir(dev) if n.startswith("nvidia"))
    except OSError:
        pass
    paths = []
    for name in names:
        path = os.path.join(dev, name)
        if name == "nvidia-caps" and os.path.isdir(path):
            try:
                paths += [os.path.join(path, n) for n in sorted(os.listdir(path))]
            except OSError:
                pass
        else:
            paths.append(path)
    return [node_record(root, p) for p in paths[:MAX_NODES]]


def node_record(root, path):
    shown = "/" + os.path.relpath(path, root) if root != "/" else path
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"path": shown, "kind": "broken", "error": bounded(str(exc))}
    if stat.S_ISCHR(st.st_mode):
        kind = "char"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"  # a test's stand-in for a device node
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    char = kind == "char"
    return {
        "path": shown,
        "kind": kind,
        "major": os.major(st.st_rdev) if char else None,
        "minor": os.minor(st.st_rdev) if char else None,
        "mode": stat.filemode(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "access": os.access(path, os.R_OK | os.W_OK),
    }


def cgroup_view(root):
    """The device rules of this process's cgroup: v1 ``devices.list``; v2 has no such file
    (an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE decides: kernel docs,
    admin-guide/cgroup-v2 "Device controller"), so only whether one is attached."""
    text = read_text(under(root, "/proc/self/cgroup"))
    if text is None:
        return {"version": None, "note": "/proc/self/cgroup is not readable"}
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "devices" in parts[1].split(","):
            v1 = parts[2]
        elif len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    if v1 is not None:  # v1, or a hybrid host whose devices controller is v1's
        return devices_list(root, v1)
    if v2 is not None:
        return bpf_view(root, v2)
    return {"version": None, "note": "no devices cgroup in /proc/self/cgroup"}


def devices_list(root, path):
    """cgroup v1's rules; inside a container its own cgroup is often the mount's root."""
    base = under(root, "/sys/fs/cgroup/devices")
    for where in (os.path.join(base, path.lstrip("/")), base):
        text = read_text(os.path.join(where, "devices.list"))
        if text is not None:
            lines = [bounded(x, 80) for x in text.splitlines() if x.strip()][:MAX_LINES]
            return {"version": 1, "path": path, "rules": lines}
    return {
        "version": 1,
        "path": path,
        "note": "devices.list is not readable here (/sys/fs/cgroup/devices not mounted)",
    }


def bpf_view(root, path):
    rec = {"version": 2, "path": path}
    folder = under(root, "/sys/fs/cgroup/" + path.lstrip("/"))
    count, why = bpf_device_programs(folder)
    if count is None:
        rec["note"] = why
    else:
        rec["bpf_programs"] = count
    return rec


# bpf(2): BPF_PROG_QUERY (16) for attach type BPF_CGROUP_DEVICE (6), uapi/linux/bpf.h; the
# syscall's number per architecture (asm/unistd_64.h; asm-generic for aarch64).
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
BPF_PROG_QUERY, BPF_CGROUP_DEVICE = 16, 6


def bpf_device_programs(folder):
    """(how many device programs are attached to the cgroup ``folder``, None) or (None, why
    not known). The query needs CAP_NET_ADMIN (kernel/bpf/syscall.c bpf_prog_query)."""
    import ctypes
    import errno
    import platform

    nr = BPF_SYSCALL.get(platform.machine())
    if nr is None:
        return None, "the BPF query is not known on %s" % platform.machine()
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        return None, "cannot open the cgroup %s: %s" % (folder, exc.strerror)
    try:
        attr = (ctypes.c_uint32 * 30)()  # union bpf_attr, zeroed
        attr[0], attr[1] = fd, BPF_CGROUP_DEVICE  # target_fd, attach_type; prog_cnt = attr[6]
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(nr, BPF_PROG_QUERY, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
            err = ctypes.get_errno()
            if err == errno.EPERM:
                return None, "unknown: the BPF query needs CAP_NET_ADMIN"
            return None, "unknown: the BPF query failed (%s)" % os.strerror(err)
        return int(attr[6]), None
    finally:
        os.close(fd)


def driver_view(root):
    """The kernel module's version, the GPUs it knows (by bus id) and the NVML library
    versions installed here: nvidia-smi fails with "Driver/library version mismatch" when
    the library is not the module's version."""
    text = read_text(under(root, "/proc/driver/nvidia/version")) or ""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    try:
        gpus = sorted(os.listdir(under(root, "/proc/driver/nvidia/gpus")))[:64]
    except OSError:
        gpus = None
    return {
        "kernel": m.group(1) if m else None,
        "kernel_gpus": gpus,
        "nvml": nvml_versions(root),
    }


def nvml_versions(root):
    found = set()
    for folder in LIB_DIRS:
        try:
            names = os.listdir(under(root, folder))
        except OSError:
            continue
        for name in names:
            m = re.match(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", name)
            if m:
                found.add(m.group(1))
    return sorted(found)[:8]


def lxc_config(root, path):
    """The GPU lines of an LXC container's config: device rules, binds of /dev/nvidia*,
    Proxmox's ``devN:`` passthrough (PVE >= 8.1) and the nvidia hook."""
    rec = {"path": path, "readable": False, "lines": []}
    text = read_text(under(root, path))
    if text is None:
        rec["error"] = "not readable here"
        return rec
    rec["readable"] = True
    for raw in text.splitlines():
        line = raw.strip()
        key = re.split(r"\s*[:=]\s*", line, maxsplit=1)[0]
        gpu = "nvidia" in line
        if key.startswith(("lxc.cgroup.devices.", "lxc.cgroup2.devices.")) or (
            gpu and (key in ("lxc.mount.entry", "lxc.hook.mount") or re.match(r"dev\d+$", key))
        ):
            rec["lines"].append(bounded(line))
    rec["lines"] = rec["lines"][:MAX_LINES]
    return rec


def slurm_gres(env):
    """What the job asked for (``TresPerNode=gres:gpu:2``), from scontrol, in a job only."""
    import shutil
    import subprocess

    job = env.get("SLURM_JOB_ID")
    tool = shutil.which("scontrol") or shutil.which("scontrol", path="/usr/bin:/bin")
    if not job or not job.isdigit() or tool is None:
        return None
    try:
        code, out, _ = run_tool([tool, "show", "job", "-o", job], 5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if code != 0:
        return None
    asked = [
        w
        for w in out.split()
        if w.startswith(("TresPerNode=", "TresPerJob=", "TresPerTask=", "Gres="))
    ]
    return bounded(" ".join(asked)) or "none"


# --------------------------------------------------------------------------- main


def main(argv):
    args = parse(argv)
    out = Out("gpulayers")
    try:
        return view(args, out)
    except Exception as exc:  # a bug here must still end in records, not a bare traceback
        import traceback

        traceback.print_exc()
        out.error("internal", "gpulayers.py failed: %s: %s" % (type(exc).__name__, exc))
        return out.done()


def view(args, out):
    root = os.environ.get(ROOT_VAR) or "/"
    env = {k: os.environ.get(k) for k in ENV_KEYS}
    rec = {
        "uid": os.getuid(),
        "groups": sorted(set(os.getgroups())),
        "root": root,
        "smi": smi_view(find_smi(args["nvidia-smi"]), args["smi-timeout"]),
        "devices": device_nodes(root),
        "cgroup": cgroup_view(root),
        "driver": driver_view(root),
        "env": env,
        "slurm_gres": slurm_gres(env),
        "lxc_config": lxc_config(root, args["config"]) if args["config"] else None,
    }
    out.emit("layer", **rec)
    if args["torch"]:
        out.emit("torch", **torch_view(full=False))
    return out.done()


def parse(argv):
    """``[--config PATH] [--torch] [--nvidia-smi PATH] [--smi-timeout S]``, as the local
    side writes them; anything else exits 2 with the usage."""
    args = {"config": None, "torch": False, "nvidia-smi": None, "smi-timeout": 10.0}
    rest = list(argv)
    while rest:
        word = rest.pop(0)
        name = word[2:] if word.startswith("--") else ""
        if name == "torch":
            args["torch"] = True
        elif name in ("config", "nvidia-smi", "smi-timeout") and rest:
            value = rest.pop(0)
            try:
                args[name] = float(value) if name == "smi-timeout" else value
            except ValueError:
                usage("--smi-timeout takes seconds, not %r" % value)
        else:
            usage("unexpected %r" % word)
    return args


def usage(message):
    sys.stderr.write(
        "usage: gpulayers.py [--config PATH] [--torch] [--nvidia-smi PATH] [--smi-timeout S]"
        "\ngpulayers.py: error: %s\n" % message
    )
    sys.exit(2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
