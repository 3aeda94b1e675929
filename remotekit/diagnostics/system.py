"""The ``gpu``, ``env``, ``disk`` and ``procs`` diagnostics: local halves of ``remote/sysinfo.py``.

Each API function runs one ``sysinfo.py`` subcommand on a target (one step) and returns a
frozen report; its ``render_*`` function turns it into text (the ``remotekit`` tasks,
remotekit/cli/, print that, or JSON, and exit with the code). Every report has:

- ``exit_code``: 0 OK, 1 findings, 2 could not run (see :mod:`remotekit.diagnostics.base`);
- ``findings``: one message per warning (hot GPU, ECC errors, low disk ...);
- ``notes``: context that is not a problem (torch not installed, old driver field name);
- ``errors``: why the diagnostic could not run (no nvidia-smi, no driver, script crashed).

The API functions raise the engine's :class:`~remotekit.RemotekitError` s (timeout, connection,
container, interpreter).

>>> report = gpu_status(target)
>>> report.exit_code, [g.temperature_c for g in report.gpus], report.findings
(1, [52, 55, 58, 88, ...], ('GPU 3: temperature 88 C >= 85 C', ...))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

from remotekit.diagnostics import defaults
from remotekit.diagnostics.base import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    DiagnosticRun,
    Record,
    Report,
    run_diagnostic,
)
from remotekit.remote.sysinfo.records import (
    CheckpointSize,
    ContainerInfo,
    Environment,
    FileEntry,
    Filesystem,
    Gpu,
    GpuProcess,
    ProcInfo,
    SmiInfo,
    TorchDevice,
    TorchInfo,
    WalkStats,
)
from remotekit.render import clip, human_bytes, table
from remotekit.result import Shown

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "CheckpointSize",
    "ContainerInfo",
    "DiskReport",
    "EnvReport",
    "FileEntry",
    "Filesystem",
    "Gpu",
    "GpuProcess",
    "GpuReport",
    "ProcInfo",
    "ProcReport",
    "TorchDevice",
    "TorchInfo",
    "WalkStats",
    "disk_usage",
    "environment",
    "gpu_status",
    "processes",
    "render_disk",
    "render_env",
    "render_gpu",
    "render_procs",
]

SCRIPT = "sysinfo.py"
#: ``preload`` of the sysinfo commands that import torch.
TORCH = ("torch",)
DEFAULT_TEMP_THRESHOLD = 85.0
DEFAULT_MIN_FREE_PCT = 10.0
#: The longest a single nvidia-smi call may take there before the script gives up on it.
SMI_TIMEOUT_S = 20.0
#: The longest the disk walk runs before it stops and reports a lower bound.
WALK_SECONDS = 60.0

RecordCallback = Callable[[Record], None]


class _Hosted(Report, Protocol):
    """A report of this module: a :class:`~remotekit.diagnostics.base.Report` of one host."""

    @property
    def host(self) -> str: ...


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, repr=False)
class GpuReport(Shown):
    host: str
    nvidia_smi: str | None  # the path that answered, None when it could not be used
    throttle_field: str | None  # clocks_event_reasons.active, or the pre-535 name
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]
    torch: TorchInfo | None
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]
    exit_code: int

    def render(self) -> str:
        return render_gpu(self)


@dataclass(frozen=True, repr=False)
class EnvReport(Shown, Environment):
    """The interpreter, torch stack and host facts (the ``env`` record,
    :class:`~remotekit.remote.sysinfo.records.Environment`); fields are None if the script
    failed."""

    # mypy takes the record's wire(...) fields for ones with defaults; they have none (and
    # these are required as they always were), hence the ignores.
    findings: tuple[str, ...]  # type: ignore[misc]
    notes: tuple[str, ...]  # type: ignore[misc]
    errors: tuple[str, ...]  # type: ignore[misc]
    exit_code: int  # type: ignore[misc]

    def render(self) -> str:
        return render_env(self)


@dataclass(frozen=True, repr=False)
class DiskReport(Shown):
    host: str
    filesystems: tuple[Filesystem, ...]
    walks: tuple[WalkStats, ...]
    largest_files: tuple[FileEntry, ...]  # biggest first
    checkpoints: tuple[CheckpointSize, ...]
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]
    exit_code: int

    def render(self) -> str:
        return render_disk(self)


@dataclass(frozen=True, repr=False)
class ProcReport(Shown):
    host: str
    processes: tuple[ProcInfo, ...]
    gpu_processes: tuple[GpuProcess, ...]
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]
    exit_code: int

    def render(self) -> str:
        return render_procs(self)


# --------------------------------------------------------------------------- running


def _run(
    target: Target,
    args: Sequence[str],
    *,
    step: str,
    timeout: float | None,
    env: Mapping[str, str] | None,
    on_record: RecordCallback | None,
    preload: Sequence[str] = (),
) -> DiagnosticRun:
    """Run ``sysinfo.py <args>``; a script that stopped before its final record raises
    :class:`~remotekit.DiagnosticError` with the last lines it wrote. ``preload``: ``TORCH``
    for the commands that import torch (gpu, env), so that only those ask the agent for it:
    its first such step imports torch there, seconds on a busy host, which disk and procs
    would pay for nothing."""
    return run_diagnostic(
        target,
        SCRIPT,
        args,
        step=step,
        timeout=timeout,
        env=env,
        on_record=on_record,
        preload=preload,
    )


def _torch(rec: Record | None) -> TorchInfo | None:
    return None if rec is None else TorchInfo.from_dict(rec)


def _smi_timeout(timeout: float | None) -> float:
    # leave room in the step for the retry with the old field name and the compute-apps query
    return SMI_TIMEOUT_S if timeout is None else max(1.0, min(SMI_TIMEOUT_S, timeout / 4))


def _report_fields(run: DiagnosticRun) -> dict[str, Any]:
    """The fields every report of this module takes from its run's messages and exit code."""
    return {
        "findings": run.messages("warning"),
        "notes": run.messages("note"),
        "errors": run.messages("error"),
        "exit_code": run.exit_code,
    }


# --------------------------------------------------------------------------- API


def gpu_status(
    target: Target,
    *,
    timeout: float | None = None,
    temp_threshold: float = DEFAULT_TEMP_THRESHOLD,
    env: Mapping[str, str] | None = None,
    on_record: RecordCallback | None = None,
    gpu_expected: bool | None = None,
    gpus_declared: int | None = None,
) -> GpuReport:
    """nvidia-smi's and torch's view of the GPUs there, with warnings.

    Warnings: temperature >= ``temp_threshold`` C, uncorrected ECC errors, active throttle
    reasons that cost speed (power cap, HW slowdown, thermal, power brake), GPU memory held
    by pids not visible there, GPUs torch cannot use, fewer GPUs than ``gpus_declared``
    (default: hosts.yaml's ``gpus: N``; a GPU lost from the bus leaves a node that still runs,
    one GPU short). No driver: exit 2. No nvidia-smi: a note "no GPU here" (exit 0), unless
    ``gpu_expected`` (default: hosts.yaml's ``gpus: N`` / ``gpu: true`` for the host), then
    exit 2.
    """
    expected, declared = defaults.gpus(target, gpu_expected, gpus_declared)
    run = _run(
        target,
        [
            "gpu",
            "--temp-threshold",
            f"{temp_threshold:g}",
            "--smi-timeout",
            f"{_smi_timeout(timeout):g}",
            *(["--gpu-expected"] if expected else []),
            *(["--gpus", str(declared)] if declared else []),
        ],
        step="gpu",
        timeout=timeout,
        env=env,
        on_record=on_record,
        preload=TORCH,
    )
    smi = SmiInfo.from_dict(run.first("smi"))
    fields = _report_fields(run)
    lost = {r.get("code") for r in run.records if r.get("type") in ("warning", "error")}
    if lost & LOST_GPU:
        fields["notes"] = (*fields["notes"], LAYERS_HINT)
    return GpuReport(
        host=target.name,
        nvidia_smi=smi.path,
        throttle_field=smi.throttle_field,
        gpus=tuple(Gpu.from_dict(r) for r in run.of("gpu")),
        processes=tuple(GpuProcess.from_dict(r) for r in run.of("gpu_process")),
        torch=_torch(run.first("torch")),
        **fields,
    )


#: The codes of ``gpu``'s records that mean a GPU was not seen where it should be: the
#: report then points at ``gpu --layers`` (:mod:`remotekit.diagnostics.gpulayers`).
LOST_GPU = frozenset(
    {
        "no_nvidia_smi",  # an error only where the host declares GPUs
        "no_driver",
        "nvidia_smi_failed",
        "gpus_missing",
        "torch_no_cuda",
        "torch_device_count",
    }
)
LAYERS_HINT = (
    "`remotekit gpu --layers` shows which level of the chain (node, each container, the "
    "interpreter) lost the GPU, and what usually fixes it"
)


def environment(
    target: Target,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    on_record: RecordCallback | None = None,
) -> EnvReport:
    """Python, torch / CUDA / cuDNN / NCCL versions, host, CPUs, memory and container facts.

    Warnings: a torch version with a known checkpoint-loading CVE (CVE-2025-32434 below 2.6,
    CVE-2026-24747 below 2.10). A missing torch is a note, not a finding.
    """
    run = _run(
        target, ["env"], step="env", timeout=timeout, env=env, on_record=on_record, preload=TORCH
    )
    report = EnvReport.from_dict(run.first("env"))
    fields = _report_fields(run)
    return replace(report, host=target.name, torch=_torch(run.first("torch")), **fields)


def disk_usage(
    target: Target,
    paths: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    min_free_pct: float = DEFAULT_MIN_FREE_PCT,
    top: int = 10,
    max_entries: int = 200_000,
    env: Mapping[str, str] | None = None,
    on_record: RecordCallback | None = None,
) -> DiskReport:
    """Free space and inodes of ``paths`` there, their largest files and checkpoints.

    ``paths`` defaults to the host's ``workdir`` (else ``~``) and its ``checkpoints`` dir.
    The walk stays on each path's filesystem and stops after ``max_entries`` entries (or
    well before ``timeout``). Warnings: less than ``min_free_pct`` % space or inodes free,
    a largest checkpoint bigger than the free space (the next save will not fit), a path
    that does not exist (its nearest existing parent is measured instead).
    """
    if not paths:
        paths = defaults.disk_paths(target)
    walk_s = WALK_SECONDS if timeout is None else max(1.0, min(WALK_SECONDS, timeout * 0.6))
    args = [
        "disk",
        "--min-free-pct",
        f"{min_free_pct:g}",
        "--top",
        str(top),
        "--max-entries",
        str(max_entries),
        "--max-seconds",
        f"{walk_s:g}",
        "--",
        *paths,
    ]
    run = _run(target, args, step="disk", timeout=timeout, env=env, on_record=on_record)
    return DiskReport(
        host=target.name,
        filesystems=tuple(Filesystem.from_dict(r) for r in run.of("fs")),
        walks=tuple(WalkStats.from_dict(r) for r in run.of("walk")),
        largest_files=tuple(FileEntry.from_dict(r) for r in run.of("file")),
        checkpoints=tuple(CheckpointSize.from_dict(r) for r in run.of("checkpoint")),
        **_report_fields(run),
    )


def processes(
    target: Target,
    *,
    timeout: float | None = None,
    all_processes: bool = False,
    env: Mapping[str, str] | None = None,
    on_record: RecordCallback | None = None,
) -> ProcReport:
    """Python and GPU processes there (pid, command line, age, RSS, GPU memory held).

    Warnings: GPU memory held by a pid not visible there, by a stopped or zombie process,
    or by more than one process on the same GPU (an older run still holding it?). Without
    nvidia-smi the process list still comes back (a note says GPU memory is unknown).
    """
    args = ["procs", "--smi-timeout", f"{_smi_timeout(timeout):g}"]
    if all_processes:
        args.append("--all")
    run = _run(target, args, step="procs", timeout=timeout, env=env, on_record=on_record)
    return ProcReport(
        host=target.name,
        processes=tuple(ProcInfo.from_dict(r) for r in run.of("proc")),
        gpu_processes=tuple(GpuProcess.from_dict(r) for r in run.of("gpu_process")),
        **_report_fields(run),
    )


# --------------------------------------------------------------------------- rendering


def _slash_pair(a: Any, b: Any, fmt: str = "{}") -> str:
    """``a/b`` for a table cell (used/total, draw/limit), ``?`` for a value not known."""

    def shown(x: Any) -> str:
        return "?" if x is None else fmt.format(x)

    return f"{shown(a)}/{shown(b)}"


def _duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _footer(name: str, report: _Hosted) -> list[str]:
    lines = [f"error: {e}" for e in report.errors]
    lines += [f"warning: {f}" for f in report.findings]
    lines += [f"note: {n}" for n in report.notes]
    if report.exit_code == EXIT_FAILED:
        status = "could not run"
    elif report.exit_code == EXIT_FINDINGS:
        status = f"{len(report.findings)} finding(s)"
    else:
        status = "OK"
    lines.append(f"{name} on {report.host}: {status}")
    return lines


def _torch_line(torch: TorchInfo | None) -> str | None:
    if torch is None:
        return None
    if not torch.importable:
        return f"torch: not importable ({torch.error})"
    build = f"CUDA {torch.cuda}" if torch.cuda else "CPU-only build"
    line = f"torch {torch.version} ({build})"
    if torch.cuda_available:
        names = ", ".join(sorted({d.name for d in torch.devices}))
        line += f": {torch.device_count} CUDA device(s) ({names})"
    else:
        line += ": CUDA not available"
    if torch.error:
        line += f"; {torch.error}"
    return line


def render_gpu(report: GpuReport) -> str:
    """The GPU table, the processes holding GPU memory, torch's view and the findings."""
    out: list[str] = []
    if report.gpus:
        rows = []
        for g in report.gpus:
            throttle = "?" if g.throttle_mask is None else ",".join(g.throttle_reasons) or "-"
            rows.append(
                [
                    g.index,
                    g.name,
                    g.pstate,
                    None if g.utilization_pct is None else f"{g.utilization_pct}%",
                    _slash_pair(g.memory_used_mib, g.memory_total_mib),
                    None if g.temperature_c is None else f"{g.temperature_c}C",
                    _slash_pair(g.power_draw_w, g.power_limit_w, "{:.0f}"),
                    g.clocks_sm_mhz,
                    throttle,
                    _slash_pair(g.ecc_uncorrected_volatile, g.ecc_uncorrected_aggregate),
                ]
            )
        headers = ["GPU", "NAME", "PSTATE", "UTIL", "MEM MiB", "TEMP", "POWER W", "SM MHz"]
        out.append(table([*headers, "THROTTLE", "ECC vol/agg"], rows))
    if report.processes:
        rows = [
            [
                p.pid,
                p.gpu_index if p.gpu_index is not None else p.gpu_uuid,
                p.used_memory_mib,
                "yes" if p.visible else "NOT VISIBLE",
                p.process_name,
            ]
            for p in report.processes
        ]
        out.append("")
        out.append(table(["PID", "GPU", "MEM MiB", "HERE", "PROCESS"], rows))
    torch = _torch_line(report.torch)
    if torch:
        out.append("")
        out.append(torch)
    return "\n".join([*out, *_footer("gpu", report)])


def render_env(report: EnvReport) -> str:
    """Key/value lines for the interpreter, torch stack, host and container."""
    mem = None
    if report.mem_total_mib is not None:
        mem = f"{report.mem_available_mib} MiB available of {report.mem_total_mib} MiB"
        if report.cgroup_memory_limit_mib is not None:
            mem += f" (cgroup limit {report.cgroup_memory_limit_mib} MiB)"
    c = report.container
    container = None
    if c is not None:
        container = f"yes ({c.kind})" if c.detected else "no"
        container += "; " + "; ".join(c.evidence)
    t = report.torch
    rows: list[list[Any]] = [
        ["python", f"{report.python} ({report.python_executable})" if report.python else None],
        ["torch", _torch_line(t)],
    ]
    if t is not None and t.importable:
        rows += [["cuDNN", t.cudnn], ["NCCL", t.nccl]]
    rows += [
        [
            "CUDA_VISIBLE_DEVICES",
            "(unset)" if report.cuda_visible_devices is None else repr(report.cuda_visible_devices),
        ],
        ["hostname", report.hostname],
        ["kernel", report.kernel],
        ["os", report.os],
        [
            "CPUs",
            None
            if report.cpu_count is None
            else f"{report.cpu_usable} usable of {report.cpu_count}",
        ],
        ["memory", mem],
        ["container", container],
    ]
    body = table(["KEY", "VALUE"], rows) if report.python else ""
    return "\n".join([line for line in [body] if line] + _footer("env", report))


def render_disk(report: DiskReport) -> str:
    """Filesystems of the asked paths, the largest files and checkpoints, and the findings."""
    out: list[str] = []
    if report.filesystems:
        rows = [
            [
                f.path + ("" if f.exists else " (missing)"),
                f.mount,
                f.fstype,
                human_bytes(f.free_bytes),
                human_bytes(f.total_bytes),
                None if f.free_pct is None else f"{f.free_pct:.1f}%",
                None if f.inodes_free_pct is None else f"{f.inodes_free_pct:.1f}%",
            ]
            for f in report.filesystems
        ]
        out.append(table(["PATH", "MOUNT", "FS", "FREE", "SIZE", "FREE%", "INODES FREE%"], rows))
    if report.largest_files:
        rows = [
            [human_bytes(f.size_bytes), "ckpt" if f.checkpoint else "", f.path]
            for f in report.largest_files
        ]
        out += ["", table(["SIZE", "KIND", "LARGEST FILES"], rows)]
    if report.checkpoints:
        rows = [[human_bytes(c.size_bytes), c.kind, c.mount, c.path] for c in report.checkpoints]
        out += ["", table(["SIZE", "KIND", "MOUNT", "LARGEST CHECKPOINT"], rows)]
    return "\n".join([*out, *_footer("disk", report)])


def render_procs(report: ProcReport) -> str:
    """Python / GPU processes with age, RSS and GPU memory, and the findings."""
    out: list[str] = []
    if report.processes:
        rows = [
            [
                p.pid,
                p.state,
                _duration(p.age_s),
                p.rss_mib,
                p.gpu_memory_mib,
                ",".join("?" if i is None else str(i) for i in p.gpus)
                or ("dev" if p.gpu_fds else ""),
                clip(p.cmdline, 100),
            ]
            for p in report.processes
        ]
        out.append(table(["PID", "S", "AGE", "RSS MiB", "GPU MiB", "GPUS", "COMMAND"], rows))
    invisible = [p for p in report.gpu_processes if not p.visible]
    if invisible:
        rows = [[p.pid, p.gpu_index, p.used_memory_mib, p.process_name] for p in invisible]
        out += ["", table(["PID (NOT VISIBLE HERE)", "GPU", "MEM MiB", "PROCESS"], rows)]
    return "\n".join([*out, *_footer("procs", report)])
