"""``gpu --layers``: what each level of a target's chain sees of the GPUs, and where they got lost.

The answer to "why does the container (or torch) not see the GPU the node has?". The probe
``remote/gpulayers.py`` runs at each level of the chain in turn, one step each: on the node
(no hop entered), inside each hop of ``target.spec.hops`` (outermost first, however many),
each with ``python3`` found there (:meth:`~remotekit.Target.run_python_at`), and last with the
target's own interpreter, env and venv (torch's view). A level's row holds ``nvidia-smi -L``,
the ``/dev/nvidia*`` nodes, the cgroup's device rules, the kernel module's and the NVML
library's versions, the CUDA and Slurm variables; the level outside an LXC hop also reads that
container's config (:meth:`~remotekit.layers.Hop.config_file`). :func:`layer_findings` (pure)
compares the levels and names the one that lost the GPUs, with what usually fixes it.

>>> report = gpu_layers(target)
>>> [(layer.name, layer.gpu_count) for layer in report.layers]
[('node', 8), ('pct exec 200', 0), ('/opt/venv/bin/python', 0)]
>>> report.problems[0].code, report.problems[0].layer
('no_device_nodes', 'pct exec 200')
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    run_diagnostic,
)
from remotekit.errors import DryRun, RemotekitError, StepCancelled
from remotekit.remote.gpulayers.records import (
    NVIDIA_MAJOR,
    CgroupView,
    DeviceNode,
    DriverView,
    LayerView,
    LxcConfig,
    SmiGpu,
    SmiView,
)
from remotekit.remote.sysinfo.records import TorchInfo
from remotekit.render import clip, table
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "CgroupView",
    "DeviceNode",
    "DriverView",
    "Finding",
    "GpuLayersReport",
    "Layer",
    "LxcConfig",
    "SmiGpu",
    "SmiView",
    "gpu_layers",
    "layer_findings",
    "render_gpu_layers",
]

SCRIPT = "gpulayers.py"
#: The longest each level's probe may take, as a step (nvidia-smi answers within ~1 s when
#: the driver is healthy; a hung one is cut off there after SMI_TIMEOUT_S).
LAYER_TIMEOUT_S = 60.0
SMI_TIMEOUT_S = 10.0
#: What a hop's hosts.yaml key says about how GPUs reach inside it: the fixes differ.
GROUPS = {
    "container": "lxc",  # Proxmox pct: LXC underneath
    "lxc": "lxc",
    "podman": "oci",
    "docker": "oci",
    "slurm": "slurm",
    "kubectl": "kubectl",
    "sudo": "sudo",
}

# --------------------------------------------------------------------------- values


@dataclass(frozen=True, repr=False)
class Layer(Shown, LayerView):
    """What one level of the chain sees (its fields: the ``layer`` record,
    :class:`~remotekit.remote.gpulayers.records.LayerView`). ``kind``: ``node``, the hop's
    hosts.yaml key (``container``, ``lxc``, ``podman``, ``slurm`` ...) or ``python`` (the
    target's own interpreter, with its env and torch); ``hops``: how many hops were entered.
    ``error``: why the probe could not run there (then the rest is empty)."""

    @property
    def gpu_count(self) -> int | None:
        """GPUs nvidia-smi lists here; None when it did not run or could not answer."""
        if self.smi is None or (self.smi.problem and self.smi.problem != "no_devices"):
            return None
        return len(self.smi.gpus)

    @property
    def gpu_nodes(self) -> tuple[DeviceNode, ...]:
        """``/dev/nvidia<N>`` and ``/dev/nvidiactl``: what NVML and CUDA must open."""
        return tuple(d for d in self.devices if re.search(r"/nvidia(\d+|ctl)$", d.path))

    repr_keys = ("name", "kind", "error")

    def render(self) -> str:
        """This level's row of the table ``gpu --layers`` prints."""
        return table(HEADERS, [_row(self)])

    def var(self, name: str) -> str | None:
        """The variable ``name`` at this level (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS ...)."""
        value = self.env.get(name)
        return None if value is None else str(value)


@dataclass(frozen=True, repr=False)
class Finding(Shown):
    """A level that lost (or hides) the GPUs, what it showed, and what usually fixes it."""

    layer: str
    code: str
    message: str
    fix: str

    repr_keys = ("layer", "code")

    @property
    def line(self) -> str:
        """The finding on one line (the report's ``findings``)."""
        return f"{self.layer}: {self.message}; fix: {self.fix}"

    def render(self) -> str:
        """``warning: [LAYER] MESSAGE`` and ``fix: ...``, wrapped, as ``gpu --layers`` prints."""
        head = _wrapped(f"warning: [{self.layer}] {self.message}", "  ")
        return head + "\n" + _wrapped(f"  fix: {self.fix}", "       ")


@dataclass(frozen=True, repr=False)
class GpuLayersReport(Shown):
    """The levels of one target's chain, outermost first, and what :func:`layer_findings`
    says of them (``problems``; ``findings`` are their lines). Exit code: 0 nothing lost,
    1 findings, 2 a level's probe could not run."""

    host: str
    layers: tuple[Layer, ...]
    problems: tuple[Finding, ...]
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]
    exit_code: int

    def render(self) -> str:
        """The table ``remotekit gpu --layers`` prints (:func:`render_gpu_layers`)."""
        return render_gpu_layers(self)


# --------------------------------------------------------------------------- running


def gpu_layers(
    target: Target,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    python: str = "python3",
    on_layer: Callable[[Layer], None] | None = None,
) -> GpuLayersReport:
    """Each level's view of the GPUs (node, each hop, the interpreter), and the findings.

    ``python`` is the interpreter run at the node and inside each hop (the target's own runs
    the last row); ``env`` is set at every level; ``timeout`` bounds each level's step.
    ``on_layer`` sees each row as it is made. A level where the probe cannot run (no
    ``python`` there) is an error row, and the walk goes on; a cancel is raised.
    """
    hops = target.spec.hops
    limit = timeout or LAYER_TIMEOUT_S
    smi = ["--smi-timeout", f"{min(SMI_TIMEOUT_S, limit / 3):g}"]
    layers: list[Layer] = []
    for n in range(len(hops) + 1):
        name, kind = ("node", "node") if n == 0 else (hops[n - 1].label, hops[n - 1].key)
        config = hops[n].config_file() if n < len(hops) else None
        args = [*smi, *(["--config", config] if config else [])]
        layers.append(
            _layer(target, name, kind, n, args, at=n, python=python, limit=limit, env=env)
        )
        if on_layer is not None:
            on_layer(layers[-1])
    interpreter = target.launch.interpreter or "python"
    layers.append(
        _layer(
            target, interpreter, "python", len(hops), [*smi, "--torch"], None, python, limit, env
        )
    )
    if on_layer is not None:
        on_layer(layers[-1])
    return report_of(target.name, layers)


def _layer(
    target: Target,
    name: str,
    kind: str,
    hops: int,
    args: Sequence[str],
    at: int | None,
    python: str,
    limit: float,
    env: Mapping[str, str] | None,
) -> Layer:
    """One level's row: its probe's records, or the error that kept it from running."""
    try:
        run = run_diagnostic(
            target,
            SCRIPT,
            args,
            step=f"gpu layers: {name}",
            timeout=limit,
            env=env,
            at=at,
            python=python,
        )
    except (StepCancelled, DryRun):  # stop the walk: Ctrl-C, or nothing may run
        raise
    except RemotekitError as exc:
        return Layer(name, kind, hops, error=exc.message)
    rec = run.first("layer")
    if rec is None:
        return Layer(name, kind, hops, error="; ".join(run.errors) or "the probe said nothing")
    return layer_of(name, kind, hops, rec, run.first("torch"))


def layer_of(
    name: str, kind: str, hops: int, rec: Mapping[str, Any], torch: Mapping[str, Any] | None
) -> Layer:
    """A :class:`Layer` from the probe's ``layer`` (and ``torch``) records."""
    layer = Layer.from_dict(rec)
    return replace(
        layer,
        name=name,
        kind=kind,
        hops=hops,
        root=None if layer.root in (None, "/") else str(layer.root),
        driver=layer.driver or DriverView.from_dict(None),  # a probe that read none: empty
        torch=None if torch is None else TorchInfo.from_dict(torch),
    )


def report_of(host: str, layers: Sequence[Layer]) -> GpuLayersReport:
    """The report of ``layers``: their findings, notes, errors and exit code."""
    problems, notes = layer_findings(layers)
    errors = tuple(
        f"{layer.name}: the probe could not run: {layer.error}" for layer in layers if layer.error
    )
    roots = sorted({layer.root for layer in layers if layer.root})
    if roots:
        notes.append(f"files read under REMOTEKIT_GPU_ROOT={', '.join(roots)}, not /")
    code = EXIT_FAILED if errors else EXIT_FINDINGS if problems else EXIT_OK
    return GpuLayersReport(
        host=host,
        layers=tuple(layers),
        problems=tuple(problems),
        findings=tuple(p.line for p in problems),
        notes=tuple(notes),
        errors=errors,
        exit_code=code,
    )


# --------------------------------------------------------------------------- findings

# What usually fixes each finding, by the kind of level that lost the GPUs (None: any).
# Sources: LXC/Proxmox lines as the Proxmox forum and wiki guides write them (a CT's
# /etc/pve/lxc/<vmid>.conf: `lxc.cgroup2.devices.allow: c 195:* rwm`, `lxc.mount.entry:
# /dev/nvidia0 dev/nvidia0 none bind,optional,create=file`); `devN:` passthrough, pve-devel
# "Add a dev[n] argument to the container config" (PVE >= 8.1); the NVIDIA Container
# Toolkit's CDI (`nvidia-ctk cdi generate`, `--device nvidia.com/gpu=all`); lost device rules
# after `systemctl daemon-reload`, NVIDIA/nvidia-docker#1730; CUDA_VISIBLE_DEVICES and
# CUDA_DEVICE_ORDER, the CUDA programming guide's "CUDA Environment Variables" (FASTEST_FIRST
# is the default order; an invalid entry hides every device after it); Slurm's gres.html
# (the gres/gpu plugin sets CUDA_VISIBLE_DEVICES per step; ConstrainDevices in cgroup.conf).
FIXES: Mapping[tuple[str, str | None], str] = {
    ("no_device_nodes", "lxc"): (
        "give the container the device nodes: in its config{config}, "
        "`lxc.cgroup2.devices.allow: c 195:* rwm` (and `c <major>:* rwm` for nvidia-uvm, its "
        "major in the node's /proc/devices) and one `lxc.mount.entry: /dev/nvidia0 dev/nvidia0 "
        "none bind,optional,create=file` for each of nvidia0..N, nvidiactl, nvidia-uvm and "
        "nvidia-uvm-tools (Proxmox VE >= 8.1: `dev0: /dev/nvidia0` ... instead); then restart it"
    ),
    ("no_device_nodes", "oci"): (
        "start the container with the GPUs: `--device nvidia.com/gpu=all` (CDI: `nvidia-ctk "
        "cdi generate`, NVIDIA Container Toolkit) or docker's `--gpus all`; a running "
        "container cannot be given them"
    ),
    ("no_device_nodes", "kubectl"): (
        "request them in the pod: `resources.limits: {{nvidia.com/gpu: N}}` (the NVIDIA device "
        "plugin then mounts the nodes)"
    ),
    ("no_device_nodes", "slurm"): "ask the job for GPUs: `--gres=gpu:N` (or `--gpus=N`)",
    (
        "no_device_nodes",
        None,
    ): "bind the node's /dev/nvidia* (nvidia0..N, nvidiactl, nvidia-uvm) in",
    ("config_not_applied", "lxc"): (
        "restart the container (the lines apply at start); an `optional` bind of a node the "
        "host lacked at start is skipped silently: nvidia-uvm exists only once loaded "
        "(`nvidia-modprobe -u -c=0` on the node at boot)"
    ),
    ("cgroup_denies", "lxc"): (
        "allow the devices in the container's config{config}: `lxc.cgroup2.devices.allow: c "
        "195:* rwm` (`lxc.cgroup.devices.allow` on a cgroup v1 host) and the same for "
        "nvidia-uvm's major; then restart it"
    ),
    ("cgroup_denies", "oci"): (
        "restart the container: its device rules were reset (a `systemctl daemon-reload` "
        "does that to containers whose cgroups systemd manages: NVIDIA/nvidia-docker#1730), "
        "or give it the devices with `--device` / CDI"
    ),
    ("cgroup_denies", "slurm"): (
        "the job holds none of these GPUs (ConstrainDevices): ask for them with --gres=gpu:N"
    ),
    ("cgroup_denies", None): "allow `c 195:* rw` in this level's device cgroup",
    ("cgroup_v1_key", None): (
        "use `lxc.cgroup2.devices.allow` on this cgroup v2 host: `lxc.cgroup.devices.allow` "
        "is the v1 key, which it ignores"
    ),
    ("device_permissions", "lxc"): (
        "map the nodes' group into the container (`lxc.idmap` in an unprivileged CT, or "
        'Proxmox\'s `dev0: /dev/nvidia0,gid=N`) or make them 0666 on the node (udev MODE="0666")'
    ),
    ("device_permissions", None): (
        "let uid {uid} read and write them: add it to their group, or make them 0666 on the "
        'node (udev MODE="0666")'
    ),
    ("nvml_mismatch", "node"): (
        "the driver was upgraded while the old kernel module stayed loaded: reboot (or "
        "unload and reload the nvidia modules)"
    ),
    ("nvml_mismatch", None): (
        "install the user-space driver of exactly the module's version {kernel} in here "
        "(NVIDIA-Linux-x86_64-{kernel}.run --no-kernel-module, or the distribution's package "
        "of that version), or let the NVIDIA Container Toolkit mount the node's libraries"
    ),
    ("no_driver", "node"): (
        "load the driver on the node (`modprobe nvidia`; nvidia-smi must work there): no "
        "level inside sees a GPU the node does not"
    ),
    ("slurm_no_gpus", None): (
        "submit the job with `--gres=gpu:N` (or `--gpus=N`); `ConstrainDevices=yes` in "
        "cgroup.conf keeps each job to its own"
    ),
    ("cuda_visible_overridden", None): (
        "leave CUDA_VISIBLE_DEVICES out of the target's env (hosts.yaml `env:`, the step's "
        "env): Slurm sets it for each step"
    ),
    (
        "cuda_visible_invalid",
        None,
    ): "name GPUs that exist here: indices 0..{last} or UUIDs (nvidia-smi -L)",
    ("cuda_order", None): (
        "set CUDA_DEVICE_ORDER=PCI_BUS_ID (hosts.yaml `env:`) so that CUDA numbers the GPUs "
        "as nvidia-smi does"
    ),
    ("torch_cpu_build", None): (
        "install a CUDA build of torch (pip install torch --index-url "
        "https://download.pytorch.org/whl/cu<version>)"
    ),
    ("torch_no_cuda", None): (
        "check the driver supports torch's CUDA {cuda} (`nvidia-smi` shows the newest it "
        "supports) and the rows above"
    ),
    ("torch_count", None): "compare CUDA_VISIBLE_DEVICES with nvidia-smi -L here",
    ("lost_gpus", None): "compare this row's nvidia-smi words with the row above",
}


class _Found:
    """The findings and notes of one walk, in order."""

    def __init__(self) -> None:
        self.problems: list[Finding] = []
        self.notes: list[str] = []

    def add(self, layer: Layer, code: str, message: str, **context: Any) -> None:
        group = GROUPS.get(layer.kind, layer.kind)
        template = FIXES.get((code, group)) or FIXES[(code, None)]
        fix = template.format_map(_Blank({"uid": layer.uid, **context}))
        self.problems.append(Finding(layer.name, code, message, fix))

    def note(self, layer: Layer, message: str) -> None:
        self.notes.append(f"{layer.name}: {message}")


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def layer_findings(layers: Sequence[Layer]) -> tuple[list[Finding], list[str]]:
    """(findings, notes) of a walk's rows, outermost first: each level that lost GPUs the
    level outside it had (why, from its own row, and the fix), and the variables and the
    torch that hide or renumber them. Pure: rows in, words out."""
    found = _Found()
    ran = [layer for layer in layers if layer.error is None]
    for i, layer in enumerate(ran):
        outer = ran[i - 1] if i else None
        if outer is None or outer.hops < layer.hops:  # the interpreter's level was seen already
            _driver(found, layer, outer)
            if outer is not None:
                _lost(found, layer, outer)
        _slurm(found, layer, ran[:i])
        _visible(found, layer)
        if layer.torch is not None:
            _torch(found, layer)
    if ran and not any(layer.gpu_count for layer in ran) and not found.problems:
        found.notes.append("no level of the chain lists a GPU")
    return found.problems, found.notes


def _driver(found: _Found, layer: Layer, outer: Layer | None) -> None:
    """The module vs the NVML library, and a driver not loaded on the outermost level."""
    smi, driver = layer.smi, layer.driver
    said = f" ({smi.said})" if smi and smi.said else ""
    if (smi and smi.problem == "nvml_mismatch") or (driver and driver.mismatch):
        kernel = driver.kernel if driver else None
        nvml = ", ".join(driver.nvml) if driver and driver.nvml else "?"
        found.add(
            layer,
            "nvml_mismatch",
            f"the NVML library here ({nvml}) is not the kernel module's version ({kernel or '?'}): "
            f'nvidia-smi and CUDA fail with "Driver/library version mismatch"{said}',
            kernel=kernel,
        )
    elif outer is None and smi and smi.problem == "no_driver" and not (driver and driver.kernel):
        found.add(layer, "no_driver", f"the NVIDIA driver is not loaded{said}")


def _lost(found: _Found, layer: Layer, outer: Layer) -> None:
    """``layer`` lists fewer GPUs than ``outer``: say why, from its own row."""
    had, has = outer.gpu_count, layer.gpu_count
    if not had or (has is not None and has >= had) or _mismatched(layer):
        return
    if has is None and _said(layer, "no_nvidia_smi") and layer.gpu_nodes:
        found.note(layer, "nvidia-smi is not installed here; the device nodes are")
        return
    lost = f"{had} GPU(s) at {outer.name}, {has or 0} here"
    if not layer.gpu_nodes:
        _no_nodes(found, layer, outer, lost)
    elif _cgroup_blocks(layer):
        rules = "; ".join(layer.cgroup.rules[:6]) if layer.cgroup and layer.cgroup.rules else ""
        why = (
            f"devices.list: {rules}" if rules else "the nodes' modes allow it, the kernel does not"
        )
        found.add(
            layer,
            "cgroup_denies",
            f"{lost}: /dev/nvidia* are here but the device cgroup does not allow c "
            f"{NVIDIA_MAJOR}:* rw ({why})",
            config=_config_at(outer),
        )
    elif any(d.access is False for d in layer.gpu_nodes):
        shut = [f"{d.path} {d.mode} {d.uid}:{d.gid}" for d in layer.gpu_nodes if d.access is False]
        found.add(
            layer,
            "device_permissions",
            f"{lost}: uid {layer.uid} may not open {', '.join(shut[:4])}",
        )
    elif layer.kind == "slurm" and _slurm_gpus(layer) is not None:
        found.note(layer, f"{lost}: the job was given {_slurm_gpus(layer)}")
    else:
        said = layer.smi.said if layer.smi and layer.smi.said else "no words"
        found.add(layer, "lost_gpus", f"{lost}; nvidia-smi here: {said}")


def _cgroup_blocks(layer: Layer) -> bool:
    """The device cgroup keeps this level from the GPUs: its rules say so, NVML's "Unknown
    Error" does, or a node denied to root or to a mode that grants everybody rw (access(2)
    asks the device cgroup too: devcgroup_inode_permission), which no file mode explains."""
    if _said(layer, "nvml_blocked") or (layer.cgroup and layer.cgroup.allows_gpus is False):
        return True
    shut = [d for d in layer.gpu_nodes if d.access is False]
    return bool(shut) and all(layer.uid == 0 or (d.mode or "")[7:9] == "rw" for d in shut)


def _mismatched(layer: Layer) -> bool:
    return _said(layer, "nvml_mismatch") or bool(layer.driver and layer.driver.mismatch)


def _said(layer: Layer, problem: str) -> bool:
    return layer.smi is not None and layer.smi.problem == problem


def _config_at(outer: Layer) -> str:
    config = outer.lxc_config
    return f" ({config.path} on {outer.name})" if config is not None else ""


def _no_nodes(found: _Found, layer: Layer, outer: Layer, lost: str) -> None:
    """No /dev/nvidia* here: the container's config says whether it was meant to have them."""
    config = outer.lxc_config
    where = _config_at(outer)
    if config is not None and config.readable and config.lines:
        v1 = [ln for ln in config.lines if ln.startswith("lxc.cgroup.devices.")]
        if v1 and layer.cgroup is not None and layer.cgroup.version == 2:
            found.add(
                layer,
                "cgroup_v1_key",
                f"{lost}: its config{where} allows the devices with the cgroup v1 key ({v1[0]})",
            )
        found.add(
            layer,
            "config_not_applied",
            f"{lost}: no /dev/nvidia* here, though its config{where} has {len(config.lines)} "
            "GPU line(s)",
        )
        return
    said = "has no GPU lines" if config is not None and config.readable else ""
    found.add(
        layer,
        "no_device_nodes",
        f"{lost}: no /dev/nvidia* device nodes here"
        + (f"; its config{where} {said}" if said else ""),
        config=where,
    )


def _slurm_gpus(layer: Layer) -> str | None:
    """The GPUs Slurm gave this step or job (its gres/gpu plugin's variables), or None."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if layer.var(name):
            return f"GPUs {layer.var(name)} ({name})"
    count = layer.var("SLURM_GPUS_ON_NODE")
    return f"{count} GPU(s) (SLURM_GPUS_ON_NODE)" if count and count != "0" else None


def _slurm(found: _Found, layer: Layer, outside: Sequence[Layer]) -> None:
    """A job that holds no GPU yet sees the node's; a CUDA_VISIBLE_DEVICES that is not Slurm's."""
    job = layer.var("SLURM_JOB_ID")
    if layer.kind == "slurm" and job and _slurm_gpus(layer) is None and layer.gpu_count:
        asked = f" (scontrol: {layer.slurm_gres})" if layer.slurm_gres else ""
        found.add(
            layer,
            "slurm_no_gpus",
            f"job {job} holds no GPU{asked}, yet nvidia-smi here lists {layer.gpu_count}: "
            "they are the node's, and other jobs may be using them",
        )
    if layer.kind != "python":
        return
    given = next((o for o in reversed(outside) if o.kind == "slurm" and _slurm_gpus(o)), None)
    if given is None:
        return
    slurm_set, here = given.var("CUDA_VISIBLE_DEVICES"), layer.var("CUDA_VISIBLE_DEVICES")
    if slurm_set is not None and here != slurm_set:
        found.add(
            layer,
            "cuda_visible_overridden",
            f"CUDA_VISIBLE_DEVICES={here!r} here, but Slurm set {slurm_set!r} for this step "
            f"({_slurm_gpus(given)}): the step may use GPUs another job holds",
        )


def _visible(found: _Found, layer: Layer) -> None:
    """A CUDA_VISIBLE_DEVICES naming GPUs this level does not have."""
    value = layer.var("CUDA_VISIBLE_DEVICES")
    count = layer.gpu_count
    if value is None or not count or layer.smi is None:
        return
    if value.strip() in ("", "-1", "NoDevFiles"):
        found.note(layer, f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA on purpose")
        return
    uuids = [g.uuid or "" for g in layer.smi.gpus]
    for token in (t.strip() for t in value.split(",")):
        known = (token.isdigit() and int(token) < count) or (
            token.startswith(("GPU-", "MIG-")) and any(u.startswith(token[:40]) for u in uuids)
        )
        if not known:
            found.add(
                layer,
                "cuda_visible_invalid",
                f"CUDA_VISIBLE_DEVICES={value!r}: {token!r} is not a GPU here (nvidia-smi lists "
                f"{count}): CUDA ignores it and every entry after it",
                last=count - 1,
            )
            return


def _torch(found: _Found, layer: Layer) -> None:
    """torch at the interpreter: a CPU build, CUDA it cannot use, a count or order that differs."""
    torch, count = layer.torch, layer.gpu_count
    if torch is None or not torch.importable or not count:
        return
    hidden = (layer.var("CUDA_VISIBLE_DEVICES") or "x").strip() in ("", "-1", "NoDevFiles")
    if not torch.cuda:
        found.add(
            layer,
            "torch_cpu_build",
            f"torch {torch.version} is a CPU-only build (no CUDA build): it can use none of the "
            f"{count} GPU(s) nvidia-smi lists here",
        )
    elif not torch.cuda_available and not hidden:
        why = f": {torch.error}" if torch.error else ""
        found.add(
            layer,
            "torch_no_cuda",
            f"torch {torch.version} (CUDA {torch.cuda}) cannot use CUDA here{why}",
            cuda=torch.cuda,
        )
    elif torch.cuda_available:
        _torch_numbers(found, layer)


def _torch_numbers(found: _Found, layer: Layer) -> None:
    """torch's devices vs nvidia-smi's: how many, and in which order (by UUID)."""
    torch, smi = layer.torch, layer.smi
    assert torch is not None and smi is not None
    expected = _cuda_expected(layer)
    if expected is not None and torch.device_count != len(expected):
        found.add(
            layer,
            "torch_count",
            f"torch sees {torch.device_count} CUDA device(s), nvidia-smi {len(expected)} "
            f"(CUDA_VISIBLE_DEVICES={layer.var('CUDA_VISIBLE_DEVICES')!r})",
        )
        return
    uuids = [d.uuid for d in torch.devices]
    if expected is None or None in uuids or uuids == expected:
        return
    if (layer.var("CUDA_DEVICE_ORDER") or "").strip().upper() == "PCI_BUS_ID":
        return
    index = {g.uuid: g.index for g in smi.gpus}
    pairs = [f"cuda:{i} is nvidia-smi's GPU {index.get(u, '?')}" for i, u in enumerate(uuids)]
    differ = [p for i, p in enumerate(pairs) if expected[i] != uuids[i]]
    found.add(
        layer,
        "cuda_order",
        "CUDA numbers the GPUs differently from nvidia-smi (CUDA_DEVICE_ORDER unset: "
        f"FASTEST_FIRST): {', '.join(differ[:4])}",
    )


def _cuda_expected(layer: Layer) -> list[str | None] | None:
    """The UUIDs CUDA shows, in nvidia-smi's (PCI) order, as CUDA_VISIBLE_DEVICES picks them;
    None where that cannot be told (a UUID prefix, an invalid entry)."""
    assert layer.smi is not None
    gpus = {g.index: g.uuid for g in layer.smi.gpus}
    value = layer.var("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [gpus[i] for i in sorted(gpus)]
    out: list[str | None] = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit() and int(token) in gpus:
            out.append(gpus[int(token)])
        elif token in gpus.values():
            out.append(token)
        else:
            return None
    return out


# --------------------------------------------------------------------------- rendering


HEADERS = (
    "LAYER",
    "NVIDIA-SMI -L",
    "/dev/nvidia*",
    "CGROUP DEVICES",
    "DRIVER / NVML",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "SLURM",
)
#: The columns a narrow terminal goes without, the first first (--wide: all); the findings
#: below the table name what they show when it matters.
SPARE_COLUMNS = ("CUDA_DEVICE_ORDER", "SLURM", "CUDA_VISIBLE_DEVICES")


def render_gpu_layers(report: GpuLayersReport) -> str:
    """One row a level, the UUID -> index map, the LXC configs read, the findings with fixes."""
    out = [table(HEADERS, [_row(layer) for layer in report.layers], optional=SPARE_COLUMNS)]
    mapping = _mapping(report.layers)
    if mapping:
        out += ["", mapping]
    out += _configs(report.layers)
    torch = next((layer.torch for layer in report.layers if layer.torch is not None), None)
    if torch is not None:
        out += ["", f"torch: {_torch_words(torch)}"]
    out += [""] if report.problems or report.errors or report.notes else []
    out += [f"error: {e}" for e in report.errors]
    out += [p.render() for p in report.problems]
    out += [f"note: {n}" for n in report.notes]
    status = {EXIT_OK: "OK", EXIT_FINDINGS: f"{len(report.problems)} finding(s)"}
    out.append(f"gpu --layers on {report.host}: {status.get(report.exit_code, 'could not run')}")
    return "\n".join(out)


def _tail(name: str, width: int) -> str:
    """A level's name cut to ``width`` from the left: an interpreter's path ends in what tells."""
    name = clip(name, 10 * width)
    return name if len(name) <= width else "..." + name[-(width - 3) :]


def _wrapped(text: str, indent: str) -> str:
    """A finding's line wrapped at 100 columns (a long path or line stays whole)."""
    return textwrap.fill(
        text, 100, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _row(layer: Layer) -> list[Any]:
    name = _tail(layer.name, 40)
    if layer.error is not None:
        return [
            name,
            f"could not run: {clip(layer.error, 60, '...')}",
            None,
            None,
            None,
            None,
            None,
            None,
        ]
    return [
        name,
        _smi_words(layer.smi),
        _nodes_words(layer.devices),
        _cgroup_words(layer.cgroup),
        _driver_words(layer.driver),
        _var(layer, "CUDA_VISIBLE_DEVICES"),
        _var(layer, "CUDA_DEVICE_ORDER"),
        _slurm_words(layer),
    ]


#: nvidia-smi's problems in a few words (what it said is in the findings).
SMI_WORDS = {
    "no_nvidia_smi": "not installed",
    "no_driver": "FAILS: no driver",
    "nvml_mismatch": "FAILS: NVML mismatch",
    "nvml_blocked": "FAILS: NVML Unknown Error",
    "no_nvml_library": "FAILS: no libnvidia-ml",
    "no_permission": "FAILS: no permission",
    "no_devices": "0 GPUs",
    "timeout": "FAILS: timed out",
}


def _smi_words(smi: SmiView | None) -> str:
    if smi is None:
        return "?"
    if smi.problem:
        return SMI_WORDS.get(smi.problem) or clip(f"FAILS: {smi.said or smi.problem}", 40, "...")
    return f"{len(smi.gpus)} GPU(s)"


def _spans(numbers: Sequence[int]) -> list[str]:
    """``[0, 1, 2, 5]`` as ``["0-2", "5"]``."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return out


def _nodes_words(nodes: Sequence[DeviceNode]) -> str:
    """``0-7,ctl,uvm crw-rw-rw-`` (``files`` when a test planted plain files)."""
    if not nodes:
        return "none"
    numbers = sorted(int(m.group(1)) for d in nodes if (m := re.search(r"/nvidia(\d+)$", d.path)))
    others = [
        re.sub(r"^.*/nvidia-?", "", d.path) for d in nodes if not re.search(r"/nvidia\d+$", d.path)
    ]
    modes = sorted({d.mode or "?" for d in nodes})
    words = ",".join([*_spans(numbers), *others])
    if any(d.kind == "file" for d in nodes):
        words += " (files)"
    if any(d.access is False for d in nodes):
        words += " NO ACCESS"
    return clip(f"{words} {'/'.join(modes)}", 48, "...")


def _cgroup_words(cgroup: CgroupView | None) -> str:
    if cgroup is None or cgroup.version is None:
        return "?"
    allows = cgroup.allows_gpus
    if cgroup.version == 2:
        if cgroup.bpf_programs is None:
            return "v2: ?"
        return f"v2: {cgroup.bpf_programs} device program(s)" if cgroup.bpf_programs else "v2: all"
    if not cgroup.rules:
        return "v1: not readable"
    if "a *:* rwm" in cgroup.rules:
        return "v1: all"
    return f"v1: c {NVIDIA_MAJOR} " + ("allowed" if allows else "DENIED")


def _driver_words(driver: DriverView | None) -> str:
    if driver is None:
        return "?"
    nvml = ",".join(driver.nvml) or "-"
    return f"{driver.kernel or '-'} / {nvml}" + (" MISMATCH" if driver.mismatch else "")


def _var(layer: Layer, name: str) -> str:
    value = layer.var(name)
    return "(unset)" if value is None else clip(repr(value), 40, "...")


def _slurm_words(layer: Layer) -> str | None:
    if not layer.var("SLURM_JOB_ID"):
        return None
    gpus = _slurm_gpus(layer) or "no GPU"
    return clip(f"job {layer.var('SLURM_JOB_ID')}: {gpus}", 48, "...")


def _mapping(layers: Sequence[Layer]) -> str:
    """UUID -> each level's nvidia-smi index, and torch's cuda:N: where numbers move."""
    columns = [layer for layer in layers if layer.smi is not None and layer.smi.gpus]
    torch = next((layer.torch for layer in layers if layer.torch and layer.torch.devices), None)
    uuids: list[str] = []
    for layer in columns:
        uuids += [g.uuid for g in layer.smi.gpus if g.uuid and g.uuid not in uuids]  # type: ignore[union-attr]
    if not uuids:
        return ""
    cuda = {d.uuid: d.index for d in torch.devices} if torch is not None else {}
    rows = []
    for uuid in uuids:
        row: list[Any] = [clip(uuid, 44, "...")]
        for layer in columns:
            index = {g.uuid: g.index for g in layer.smi.gpus}  # type: ignore[union-attr]
            row.append(index.get(uuid))
        if torch is not None:
            row.append(f"cuda:{cuda[uuid]}" if uuid in cuda else None)
        rows.append(row)
    heads = ["GPU UUID", *(_tail(c.name, 24) for c in columns)]
    return table([*heads, *(["torch"] if torch is not None else [])], rows)


def _configs(layers: Sequence[Layer]) -> list[str]:
    """The GPU lines of each LXC config read on the way in."""
    out: list[str] = []
    for layer in layers:
        config = layer.lxc_config
        if config is None:
            continue
        head = f"config {config.path} (read at {layer.name})"
        if not config.readable:
            out += ["", f"{head}: {config.error or 'not readable'}"]
            continue
        out += ["", f"{head}: {len(config.lines)} GPU line(s)"]
        out += [f"  {clip(line, 120, '...')}" for line in config.lines[:20]]
    return out


def _torch_words(torch: TorchInfo) -> str:
    if not torch.importable:
        return f"not importable ({torch.error})"
    if not torch.cuda:
        return f"{torch.version}: no CUDA build (a CPU-only torch)"
    if not torch.cuda_available:
        return f"{torch.version} (CUDA {torch.cuda}): CUDA not available" + (
            f": {torch.error}" if torch.error else ""
        )
    return f"{torch.version} (CUDA {torch.cuda}): {torch.device_count} CUDA device(s)"
