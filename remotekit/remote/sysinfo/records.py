"""The sysinfo commands' records, declared once: what ``sysinfo.py`` writes there (and the
``torch`` record that ``gpulayers.py`` writes too) and the local side
(:mod:`remotekit.diagnostics.system`) reads back, as frozen dataclasses on
:class:`~remotekit.remote.records.Record` (``from_dict`` / ``to_dict``; ``TYPE`` is the
record's ``"type"``; each field's kind says how its wire value is read).

A number nvidia-smi said ``[N/A]`` is None; such a field (``int | None``) and every text,
flag and optional count is read as it came (:data:`~remotekit.remote.records.AS_IS`), as
the local side always read them; the local side shows them escaped and clipped.

Records that are no class here: ``warning`` / ``note`` / ``error`` / ``done`` (the
protocol's). The reports that hold these records (with their text) are the local side's;
:class:`Environment` is the ``env`` record with the two fields the local side fills in
(``host``, ``torch``), as the local ``EnvReport`` is it with its findings and text.

Runs *there*: the standard library only, Python >= 3.8 (the far side writes its dicts;
``tests/diagnostics/system/test_sysinfo_records.py`` holds them to these classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import FLOAT, INT, STRS, TUPLE, Kind, Record, record, records, wire

__all__ = [
    "CheckpointSize",
    "ContainerInfo",
    "Environment",
    "FileEntry",
    "Filesystem",
    "Gpu",
    "GpuProcess",
    "ProcInfo",
    "SmiInfo",
    "TorchDevice",
    "TorchInfo",
    "WalkStats",
]


@dataclass(frozen=True)
class SmiInfo(Record):
    """The nvidia-smi that answered (``path``), the name its throttle field had there
    (``clocks_event_reasons.active``, or the pre-535 name) and how many GPUs it listed."""

    TYPE = "smi"

    path: str | None
    throttle_field: str | None
    gpu_count: int = wire(INT)


@dataclass(frozen=True)
class Gpu(Record):
    """One GPU as nvidia-smi reports it; ``None`` where it said ``[N/A]``."""

    TYPE = "gpu"

    index: int = wire(INT)
    uuid: str | None = wire()
    name: str | None = wire()
    pstate: str | None = wire()
    utilization_pct: int | None = wire()
    memory_used_mib: int | None = wire()
    memory_total_mib: int | None = wire()
    temperature_c: int | None = wire()
    power_draw_w: float | None = wire(FLOAT)
    power_limit_w: float | None = wire(FLOAT)
    clocks_sm_mhz: int | None = wire()
    throttle_mask: int | None = wire()
    throttle_reasons: tuple[str, ...] = wire(STRS)
    ecc_uncorrected_volatile: int | None = wire()
    ecc_uncorrected_aggregate: int | None = wire()


@dataclass(frozen=True)
class GpuProcess(Record):
    """A compute app holding GPU memory; ``visible`` is whether its pid is in /proc there.

    Inside a container nvidia-smi may report pids of another pid namespace, so an invisible
    pid is "not visible here", not necessarily dead.
    """

    TYPE = "gpu_process"

    gpu_uuid: str | None
    gpu_index: int | None
    pid: int = wire(INT)
    process_name: str = wire()
    used_memory_mib: int | None = wire()
    visible: bool = wire()


@dataclass(frozen=True)
class TorchDevice(Record):
    """One CUDA device as torch enumerates it; ``uuid`` (as nvidia-smi writes it) and
    ``pci_bus_id`` where this torch says them."""

    index: int = wire(INT)
    name: str = wire()
    total_memory_mib: int | None = wire()
    capability: str | None = wire()
    uuid: str | None = None
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class TorchInfo(Record):
    """What the target's torch is and sees; ``importable`` is False when torch is missing."""

    TYPE = "torch"

    importable: bool
    version: str | None
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    cuda_available: bool | None
    device_count: int | None
    devices: tuple[TorchDevice, ...] = wire(records(TorchDevice))
    error: str | None = wire()


@dataclass(frozen=True)
class ContainerInfo(Record):
    """Whether the host is a container; ``evidence`` lists what was checked and found."""

    detected: bool | None
    kind: str | None
    evidence: tuple[str, ...] = wire(STRS)


#: The ``container`` of the env record: None when it is missing or empty (said nothing).
CONTAINER = Kind(
    "ContainerInfo", lambda value: record(ContainerInfo).parse(value) if value else None
)


@dataclass(frozen=True)
class Environment(Record):
    """The ``env`` record: the interpreter, host, CPUs, memory, CUDA_VISIBLE_DEVICES and the
    container; ``host`` (the target's name) and ``torch`` (the ``torch`` record) are filled
    in by the local side. Every field is None when the script failed before it."""

    TYPE = "env"

    host: str = wire(sent=False)
    python: str | None = wire()
    python_executable: str | None = wire()
    venv: bool | None = wire()
    hostname: str | None = wire()
    kernel: str | None = wire()
    os: str | None = wire()
    cpu_count: int | None = wire()
    cpu_usable: int | None = wire()
    mem_total_mib: int | None = wire()
    mem_available_mib: int | None = wire()
    cgroup_memory_limit_mib: int | None = wire()
    cuda_visible_devices: str | None = wire()
    container: ContainerInfo | None = wire(CONTAINER)
    torch: TorchInfo | None = wire(record(TorchInfo), sent=False)


@dataclass(frozen=True)
class Filesystem(Record):
    """statvfs of one asked-for path; ``checked`` is the nearest existing path when it is missing.

    ``free_bytes`` is what an unprivileged writer can use (``f_bavail``).
    """

    TYPE = "fs"

    path: str
    exists: bool
    checked: str | None
    mount: str | None = None
    fstype: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    used_bytes: int | None = None
    free_pct: float | None = wire(FLOAT, default=None)
    inodes_total: int | None = None
    inodes_free: int | None = None
    inodes_free_pct: float | None = wire(FLOAT, default=None)
    error: str | None = None


@dataclass(frozen=True)
class WalkStats(Record):
    """The bounded walk of one path; ``inside`` names the walked path that already covers it."""

    TYPE = "walk"

    root: str
    inside: str | None = None
    files: int | None = None
    dirs: int | None = None
    bytes: int | None = None
    truncated: str | None = None  # "max_entries" / "max_seconds": sizes are a lower bound
    errors: int | None = None
    other_filesystems: int | None = None


@dataclass(frozen=True)
class FileEntry(Record):
    """One of the largest files found by the walk (``checkpoint``: its name says it is one)."""

    TYPE = "file"

    path: str
    size_bytes: int = wire(INT)
    mtime: int = wire(INT)
    checkpoint: bool = wire()


@dataclass(frozen=True)
class CheckpointSize(Record):
    """The largest checkpoint found on one filesystem (a file, or a checkpoint directory)."""

    TYPE = "checkpoint"

    path: str
    size_bytes: int = wire(INT)
    kind: str = wire()  # "file" | "dir"
    mount: str | None = wire()


@dataclass(frozen=True)
class ProcInfo(Record):
    """A Python process, or one that holds GPU memory or /dev/nvidia* (``gpu_fds``).

    ``gpu_fds`` is None where /proc/<pid>/fd was not readable; ``gpus`` / ``gpu_memory_mib``
    come from nvidia-smi and are empty / None when it lists no memory for the pid.
    """

    TYPE = "proc"

    pid: int = wire(INT)
    ppid: int = wire(INT)
    uid: int | None = wire()
    state: str = wire()
    comm: str = wire()
    cmdline: str = wire()  # secret-looking option values are *** already there
    age_s: float = wire(FLOAT)
    rss_mib: int | None = wire()
    python: bool = wire()
    gpu_fds: bool | None = wire()
    gpus: tuple[int | None, ...] = wire(TUPLE)
    gpu_memory_mib: int | None = wire()
