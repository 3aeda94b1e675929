"""The records of ``gpu --layers``, declared once: the ``layer`` record ``gpulayers.py``
writes at each level of a chain, and those nested in it, as frozen dataclasses on
:class:`~remotekit.remote.records.Record` (the ``torch`` record is sysinfo's
:class:`~remotekit.remote.sysinfo.records.TorchInfo`). The local side
(:mod:`remotekit.diagnostics.gpulayers`) reads them with these classes; its ``Layer`` is
:class:`LayerView` with its text, and :func:`layer_findings` there compares the levels.

Runs *there*: the standard library only, Python >= 3.8 (the probe writes its dicts;
``tests/diagnostics/system/test_gpu_layers_records.py`` holds them to these classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import DICT, INT, STRS, TUPLE, Record, record, records, wire
from ..sysinfo.records import TorchInfo

# typing only for the checker: importing it costs a diagnostic step ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

__all__ = [
    "NVIDIA_MAJOR",
    "CgroupView",
    "DeviceNode",
    "DriverView",
    "LayerView",
    "LxcConfig",
    "SmiGpu",
    "SmiView",
]

#: The character devices' major of /dev/nvidia<N>, /dev/nvidiactl and /dev/nvidia-modeset
#: (the kernel's Documentation/admin-guide/devices.txt, "195 char Nvidia graphics devices");
#: nvidia-uvm and nvidia-caps get a dynamic major (/proc/devices).
NVIDIA_MAJOR = 195


@dataclass(frozen=True)
class SmiGpu(Record):
    """One line of ``nvidia-smi -L`` there (its index is that level's own numbering)."""

    index: int = wire(INT)
    name: str | None = wire()
    uuid: str | None = wire()
    bus_id: str | None = None
    driver: str | None = None


@dataclass(frozen=True)
class SmiView(Record):
    """``nvidia-smi -L`` at one level; ``problem`` names why it listed nothing (``no_nvidia_smi``,
    ``no_driver``, ``nvml_mismatch``, ``nvml_blocked``, ``no_nvml_library``, ``no_devices``,
    ``no_permission``, ``timeout``, ``failed``), ``said`` its words."""

    path: str | None
    exit_code: int | None
    said: str | None
    problem: str | None
    gpus: tuple[SmiGpu, ...] = wire(records(SmiGpu))


@dataclass(frozen=True)
class DeviceNode(Record):
    """A ``/dev/nvidia*`` entry: ``kind`` char (a device node), file (a test's stand-in), dir,
    other or broken; ``access``: this process may open it for reading and writing."""

    path: str
    kind: str
    major: int | None = None
    minor: int | None = None
    mode: str | None = None
    uid: int | None = None
    gid: int | None = None
    access: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class CgroupView(Record):
    """The device rules of the level's cgroup: v1's ``devices.list`` lines (``rules``); v2's
    count of attached device programs (``bpf_programs``); ``note`` says why unknown."""

    version: int | None
    path: str | None = None
    rules: tuple[str, ...] = wire(STRS, default=())
    bpf_programs: int | None = None
    note: str | None = None

    @property
    def allows_gpus(self) -> bool | None:
        """Whether c 195:* may be read and written here: None when it cannot be told."""
        if self.version == 2:
            return True if self.bpf_programs == 0 else None  # no program: nothing filtered
        if self.version != 1 or not self.rules:
            return None
        for rule in self.rules:
            words = rule.split()
            if len(words) != 3 or "r" not in words[2] or "w" not in words[2]:
                continue
            major = words[1].split(":")[0]
            if words[0] == "a" or (words[0] == "c" and major in ("*", str(NVIDIA_MAJOR))):
                return True
        return False


@dataclass(frozen=True)
class DriverView(Record):
    """The kernel module's version and the GPUs it knows (``/proc/driver/nvidia``), and the
    versions of ``libnvidia-ml.so`` installed at this level."""

    kernel: str | None
    kernel_gpus: tuple[str, ...] = wire(STRS)
    nvml: tuple[str, ...] = wire(STRS)

    @property
    def mismatch(self) -> bool:
        """NVML here is not the module's version: "Driver/library version mismatch"."""
        return bool(self.kernel and self.nvml and self.kernel not in self.nvml)


@dataclass(frozen=True)
class LxcConfig(Record):
    """The GPU lines of the config of the LXC container entered next, read from outside."""

    path: str
    readable: bool
    lines: tuple[str, ...] = wire(STRS)
    error: str | None = None


@dataclass(frozen=True)
class LayerView(Record):
    """What one level of the chain sees: the ``layer`` record, and what the local side knows
    of the level (``sent=False``): its ``name``, ``kind`` (``node``, the hop's hosts.yaml key,
    or ``python``: the target's own interpreter), how many ``hops`` were entered, ``error``
    (why the probe could not run there; then the rest is empty) and ``torch`` (the level's
    ``torch`` record, a record of its own on the wire)."""

    TYPE = "layer"

    name: str = wire(sent=False)
    kind: str = wire(sent=False)
    hops: int = wire(sent=False)
    error: str | None = wire(default=None, sent=False)
    uid: int | None = None
    groups: tuple[int, ...] = wire(TUPLE, default=())
    root: str | None = None
    smi: SmiView | None = wire(record(SmiView), default=None)
    devices: tuple[DeviceNode, ...] = wire(records(DeviceNode), default=())
    cgroup: CgroupView | None = wire(record(CgroupView), default=None)
    driver: DriverView | None = wire(record(DriverView), default=None)
    env: Mapping[str, str | None] = wire(DICT, factory=dict)
    slurm_gres: str | None = None
    lxc_config: LxcConfig | None = wire(record(LxcConfig), default=None)
    torch: TorchInfo | None = wire(record(TorchInfo), default=None, sent=False)
