"""``gpu --layers`` without a runtime: the findings from rows made by hand (pure), the probe
(remotekit/remote/gpulayers.py) and the fake nvidia-smi on planted roots, the rendering.

The same walk through real LXC, Podman and Slurm levels: tests/diagnostics/system/test_gpu_layers_runtimes.py.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.diagnostics.gpulayers import (
    CgroupView,
    DeviceNode,
    DriverView,
    Layer,
    LxcConfig,
    SmiGpu,
    SmiView,
    gpu_layers,
    layer_findings,
    render_gpu_layers,
    report_of,
)
from remotekit.diagnostics.system import TorchDevice, TorchInfo
from tests import gpuroot
from tests.harness import ROOT

PROBE = Path(remotekit.__file__).parent / "remote" / "gpulayers.py"
UUIDS = [f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}" for i in range(8)]
KERNEL = "550.54.15"
ALL_RULES = CgroupView(version=1, path="/", rules=("a *:* rwm",))


def smi(n: int, first: int = 0, problem: str | None = None, said: str | None = None) -> SmiView:
    gpus = tuple(
        SmiGpu(i, "NVIDIA H100 80GB HBM3", UUIDS[first + i], gpuroot.BUS[first + i])
        for i in range(n)
    )
    return SmiView("/usr/bin/nvidia-smi", 0 if problem is None else 9, said, problem, gpus)


def nodes(n: int, mode: str = "crw-rw-rw-", access: bool = True) -> tuple[DeviceNode, ...]:
    names = [f"/dev/nvidia{i}" for i in range(n)] + ["/dev/nvidiactl"] if n else []
    return tuple(DeviceNode(p, "char", 195, 0, mode, 0, 44, access) for p in names)


def layer(
    name: str = "node",
    kind: str = "node",
    hops: int = 0,
    *,
    gpus: int = 8,
    devices: tuple[DeviceNode, ...] | None = None,
    view: SmiView | None = None,
    cgroup: CgroupView = ALL_RULES,
    nvml: tuple[str, ...] = (KERNEL,),
    env: dict[str, str | None] | None = None,
    config: LxcConfig | None = None,
    torch: TorchInfo | None = None,
) -> Layer:
    return Layer(
        name,
        kind,
        hops,
        uid=0,
        smi=view if view is not None else smi(gpus),
        devices=devices if devices is not None else nodes(gpus),
        cgroup=cgroup,
        driver=DriverView(KERNEL, tuple(gpuroot.BUS), nvml),
        env=env or {},
        lxc_config=config,
        torch=torch,
    )


NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


def codes(layers: list[Layer]) -> list[tuple[str, str]]:
    return [(f.layer, f.code) for f in layer_findings(layers)[0]]


def pct_row(**kw: Any) -> Layer:
    base: dict[str, Any] = dict(gpus=0, view=smi(0, problem="no_driver", said=NO_DRIVER))
    return layer("pct exec 200", "container", 1, **{**base, **kw})


def python_row(hops: int = 1, **kw: Any) -> Layer:
    return layer("/opt/venv/bin/python", "python", hops, **kw)


# -- where the GPUs were lost: the container ---------------------------------------------------


def test_a_container_without_device_nodes_is_named_with_the_lxc_lines_that_fix_it() -> None:
    config = LxcConfig("/etc/pve/lxc/200.conf", True, ())
    node = layer(config=config)
    found, _ = layer_findings([node, pct_row(), python_row(gpus=0, devices=(), view=smi(0))])
    assert [(f.layer, f.code) for f in found] == [("pct exec 200", "no_device_nodes")]
    f = found[0]
    assert "8 GPU(s) at node, 0 here: no /dev/nvidia* device nodes here" in f.message
    assert "/etc/pve/lxc/200.conf on node" in f.message + f.fix
    for words in ("lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.mount.entry: /dev/nvidia0"):
        assert words in f.fix
    assert "dev0: /dev/nvidia0" in f.fix  # Proxmox VE >= 8.1's passthrough


def test_a_config_with_gpu_lines_but_no_nodes_inside_says_restart_and_optional_binds() -> None:
    lines = (
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    )
    node = layer(config=LxcConfig("/etc/pve/lxc/200.conf", True, lines))
    found, _ = layer_findings([node, pct_row()])
    assert [f.code for f in found] == ["config_not_applied"]
    assert "has 2 GPU line(s)" in found[0].message
    assert "restart the container" in found[0].fix and "optional" in found[0].fix


def test_the_cgroup_v1_key_on_a_cgroup_v2_container_is_named() -> None:
    lines = ("lxc.cgroup.devices.allow: c 195:* rwm",)
    node = layer(config=LxcConfig("/etc/pve/lxc/200.conf", True, lines))
    inside = pct_row(cgroup=CgroupView(version=2, path="/", bpf_programs=1))
    found, _ = layer_findings([node, inside])
    assert [f.code for f in found] == ["cgroup_v1_key", "config_not_applied"]
    assert "lxc.cgroup2.devices.allow" in found[0].fix


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("podman", "--device nvidia.com/gpu=all"),
        ("docker", "--gpus all"),
        ("kubectl", "nvidia.com/gpu"),
        ("slurm", "--gres=gpu:N"),
    ],
)
def test_the_fix_for_missing_nodes_is_the_hops_own(kind: str, fix: str) -> None:
    found, _ = layer_findings(
        [layer(), layer(f"{kind} x", kind, 1, gpus=0, view=smi(0, problem="no_driver"))]
    )
    assert [f.code for f in found] == ["no_device_nodes"]
    assert fix in found[0].fix


def test_nodes_present_but_the_cgroup_denies_them() -> None:
    rules = ("c 1:3 rwm", "c 136:* rwm", "c 195:* m")  # after a daemon-reload (nvidia-docker#1730)
    inside = layer(
        "podman exec trainer",
        "podman",
        1,
        gpus=0,
        devices=nodes(8),
        view=smi(0, problem="nvml_blocked", said="Failed to initialize NVML: Unknown Error"),
        cgroup=CgroupView(version=1, path="/", rules=rules),
    )
    found, _ = layer_findings([layer(), inside])
    assert [f.code for f in found] == ["cgroup_denies"]
    assert "c 195:* m" in found[0].message and "nvidia-docker#1730" in found[0].fix


def test_nodes_the_user_may_not_open() -> None:
    inside = replace(
        layer(
            "sudo", "sudo", 1, gpus=0, devices=nodes(8, "crw-rw----", access=False),
            view=smi(0, problem="no_permission", said="Insufficient Permissions"),
        ),
        uid=1000,
    )  # fmt: skip
    found, _ = layer_findings([layer(), inside])
    assert [f.code for f in found] == ["device_permissions"]
    assert "crw-rw----" in found[0].message and "uid 1000" in found[0].fix


def test_nodes_denied_to_root_or_to_mode_666_are_the_cgroups_doing() -> None:
    """access(2) asks the device cgroup too: a denial no file mode explains is the cgroup's,
    even where this level cannot read its rules (an LXC container without /sys/fs/cgroup)."""
    unknown = CgroupView(version=1, path="/", note="devices.list is not readable here")
    for uid, mode in ((0, "crw-rw----"), (1000, "crw-rw-rw-")):
        inside = replace(
            pct_row(
                devices=nodes(8, mode, access=False), cgroup=unknown, view=smi(0, problem="failed")
            ),
            uid=uid,
        )
        found, _ = layer_findings([layer(), inside])
        assert [f.code for f in found] == ["cgroup_denies"], (uid, mode)
        assert "the nodes' modes allow it, the kernel does not" in found[0].message
        assert "lxc.cgroup2.devices.allow: c 195:* rwm" in found[0].fix


# -- the driver --------------------------------------------------------------------------------


def test_an_nvml_library_of_another_version_in_the_container() -> None:
    said = (
        "Failed to initialize NVML: Driver/library version mismatch NVML library version: 535.161"
    )
    inside = pct_row(
        devices=nodes(8), view=smi(0, problem="nvml_mismatch", said=said), nvml=("535.161.07",)
    )
    found, _ = layer_findings([layer(), inside, python_row(gpus=0, view=inside.smi)])
    assert [(f.layer, f.code) for f in found] == [("pct exec 200", "nvml_mismatch")]
    assert "535.161.07" in found[0].message and KERNEL in found[0].message
    assert f"NVIDIA-Linux-x86_64-{KERNEL}.run --no-kernel-module" in found[0].fix


def test_a_mismatch_on_the_node_says_reboot_and_no_driver_says_load_it() -> None:
    node = layer(gpus=0, view=smi(0, problem="nvml_mismatch"), nvml=("560.28.03",))
    found, _ = layer_findings([node])
    assert [f.code for f in found] == ["nvml_mismatch"] and "reboot" in found[0].fix
    bare = replace(
        layer(gpus=0, view=smi(0, problem="no_driver", said=NO_DRIVER)),
        driver=DriverView(None, (), ()),
    )
    found, _ = layer_findings([bare])
    assert [f.code for f in found] == ["no_driver"] and "modprobe nvidia" in found[0].fix


# -- Slurm -------------------------------------------------------------------------------------


def slurm_row(gpus: str | None, cvd: str | None = None) -> Layer:
    env: dict[str, str | None] = {"SLURM_JOB_ID": "4242", "SLURM_STEP_GPUS": gpus}
    env["CUDA_VISIBLE_DEVICES"] = cvd
    return layer("srun --jobid 4242", "slurm", 1, gpus=4, env=env)


def test_a_job_without_gres_on_a_gpu_node() -> None:
    found, _ = layer_findings([layer(gpus=4), slurm_row(None)])
    assert [(f.layer, f.code) for f in found] == [("srun --jobid 4242", "slurm_no_gpus")]
    assert "job 4242 holds no GPU" in found[0].message and "--gres=gpu:N" in found[0].fix


def test_the_interpreters_cuda_visible_devices_is_not_the_one_slurm_set() -> None:
    rows = [layer(gpus=4), slurm_row("0,1", "0,1")]
    mine = python_row(gpus=4, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    found, _ = layer_findings([*rows, mine])
    assert [(f.layer, f.code) for f in found] == [
        ("/opt/venv/bin/python", "cuda_visible_overridden")
    ]
    assert "Slurm set '0,1'" in found[0].message and "SLURM_STEP_GPUS" in found[0].message
    assert layer_findings([*rows, python_row(gpus=4, env={"CUDA_VISIBLE_DEVICES": "0,1"})])[0] == []


# -- CUDA's view -------------------------------------------------------------------------------


def test_cuda_visible_devices_naming_a_gpu_that_is_not_there() -> None:
    found, _ = layer_findings(
        [layer(gpus=2), python_row(0, gpus=2, env={"CUDA_VISIBLE_DEVICES": "0,4,1"})]
    )
    assert [f.code for f in found] == ["cuda_visible_invalid"]
    assert "'4' is not a GPU here" in found[0].message and "0..1" in found[0].fix
    ok = python_row(0, gpus=2, env={"CUDA_VISIBLE_DEVICES": f"{UUIDS[1][:12]},0"})
    assert layer_findings([layer(gpus=2), ok])[0] == []
    hidden = python_row(0, gpus=2, env={"CUDA_VISIBLE_DEVICES": ""})
    found, notes = layer_findings([layer(gpus=2), hidden])
    assert found == [] and any("on purpose" in n for n in notes)


def torch_info(uuids: list[str | None] | None = None, cuda: str | None = "12.4") -> TorchInfo:
    devices = tuple(
        TorchDevice(i, "NVIDIA H100", 81559, "9.0", u) for i, u in enumerate(uuids or [])
    )
    available = bool(cuda) and uuids is not None
    return TorchInfo(True, "2.6.0", cuda, None, None, available, len(devices), devices, None)


def test_a_cpu_torch_where_nvidia_smi_lists_gpus_says_no_cuda_build() -> None:
    found, _ = layer_findings([layer(gpus=2), python_row(0, gpus=2, torch=torch_info(cuda=None))])
    assert [f.code for f in found] == ["torch_cpu_build"]
    assert "no CUDA build" in found[0].message and "download.pytorch.org" in found[0].fix


def test_cuda_order_differs_from_nvidia_smi_unless_pci_bus_id() -> None:
    """FASTEST_FIRST put GPU 1 (say the faster card) first: cuda:0 is nvidia-smi's GPU 1."""
    swapped = torch_info([UUIDS[1], UUIDS[0]])
    found, _ = layer_findings([layer(gpus=2), python_row(0, gpus=2, torch=swapped)])
    assert [f.code for f in found] == ["cuda_order"]
    assert "cuda:0 is nvidia-smi's GPU 1" in found[0].message
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in found[0].fix
    ordered = python_row(0, gpus=2, torch=swapped, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert layer_findings([layer(gpus=2), ordered])[0] == []
    same = python_row(0, gpus=2, torch=torch_info([UUIDS[0], UUIDS[1]]))
    assert layer_findings([layer(gpus=2), same])[0] == []


def test_torch_seeing_fewer_devices_than_nvidia_smi() -> None:
    found, _ = layer_findings([layer(gpus=2), python_row(0, gpus=2, torch=torch_info([UUIDS[0]]))])
    assert [f.code for f in found] == ["torch_count"]


def test_the_interpreter_row_does_not_repeat_its_levels_findings() -> None:
    inside = pct_row()
    found, _ = layer_findings([layer(), inside, python_row(gpus=0, devices=(), view=inside.smi)])
    assert [f.layer for f in found] == ["pct exec 200"]


def test_a_level_whose_probe_could_not_run_is_an_error_and_the_walk_goes_on() -> None:
    broken = Layer("pct exec 200", "container", 1, error="interpreter python3 not found there")
    report = report_of("h", [layer(), broken, python_row(gpus=8)])
    assert report.exit_code == 2
    assert report.errors == (
        "pct exec 200: the probe could not run: interpreter python3 not found there",
    )
    assert "could not run: interpreter python3" in report.render()


# -- rendering: one row a level, the UUID map, hostile text escaped and bounded ----------------


def test_render_shows_each_level_the_uuid_map_and_the_fixes() -> None:
    config = LxcConfig("/etc/pve/lxc/200.conf", True, ("lxc.cgroup2.devices.allow: c 195:* rwm",))
    inside = layer("pct exec 200", "container", 1, gpus=2, view=smi(2, first=3), devices=nodes(2))
    rows = [
        layer(config=config),
        inside,
        python_row(gpus=2, view=smi(2, first=3), torch=torch_info([UUIDS[3], UUIDS[4]])),
    ]
    text = render_gpu_layers(report_of("trainer", rows))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["LAYER", "NVIDIA-SMI", "-L"]
    assert lines[2].startswith("node ") and "8 GPU(s)" in lines[2] and "0-7,ctl" in lines[2]
    row = next(ln for ln in lines if ln.startswith(UUIDS[3]))
    assert row.split()[1:] == ["3", "0", "0", "cuda:0"]  # node's GPU 3 is the container's 0
    assert "config /etc/pve/lxc/200.conf (read at node): 1 GPU line(s)" in text
    assert "warning: [pct exec 200] 8 GPU(s) at node, 2 here" in text and "  fix: " in text
    assert text.endswith("gpu --layers on trainer: 1 finding(s)")


def test_far_side_text_is_escaped_and_bounded() -> None:
    evil = "\x1b]52;c;ZXZpbA==\x07" + "x" * 5000
    config = LxcConfig("/etc/pve/lxc/200.conf", True, (f"lxc.mount.entry: /dev/nvidia0 {evil}",))
    inside = pct_row(view=smi(0, problem="failed", said=evil))
    report = report_of("h\x1b[2J", [layer(config=config), inside])
    for text in (report.render(), str(report)):
        assert "\x1b" not in text and "\x07" not in text
        assert max(len(line) for line in text.splitlines()) < 600
    assert "\\x1b]52" in report.render()


# -- the probe, run here on planted roots ------------------------------------------------------


def probe(
    root: Path | None, *args: str, extra: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    env = {**os.environ, **(gpuroot.env(root) if root else {}), **(extra or {})}
    r = subprocess.run(
        [sys.executable, str(PROBE), *args], capture_output=True, text=True, env=env, timeout=60
    )
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert records[-1]["type"] == "done" and records[-1]["exit_code"] == r.returncode == 0, r.stderr
    return records


def test_the_probe_reads_a_planted_host(tmp_path: Path) -> None:
    root = gpuroot.plant(tmp_path / "root", gpus=4, cgroup=["c 1:3 rwm", "c 195:* rwm"])
    rec = probe(root)[0]
    assert rec["type"] == "layer" and rec["root"] == str(root)
    assert [g["index"] for g in rec["smi"]["gpus"]] == [0, 1, 2, 3] and rec["smi"][
        "problem"
    ] is None
    assert (
        rec["smi"]["gpus"][1]["bus_id"] == gpuroot.BUS[1]
        and rec["smi"]["gpus"][1]["driver"] == KERNEL
    )
    paths = [d["path"] for d in rec["devices"]]
    assert paths == [
        "/dev/nvidia-uvm",
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidiactl",
    ]
    ctl = rec["devices"][-1]
    if os.geteuid() == 0:
        assert (ctl["kind"], ctl["major"], ctl["minor"], ctl["mode"]) == (
            "char",
            195,
            255,
            "crw-rw-rw-",
        )
    assert rec["cgroup"] == {"version": 1, "path": "/", "rules": ["c 1:3 rwm", "c 195:* rwm"]}
    assert rec["driver"] == {"kernel": KERNEL, "kernel_gpus": gpuroot.BUS[:4], "nvml": [KERNEL]}


def test_the_probe_on_cgroup_v2_and_without_a_driver(tmp_path: Path) -> None:
    root = gpuroot.plant(tmp_path / "root", kernel=None, nodes=False)
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text("0::/user.slice\n")
    (root / "sys" / "fs" / "cgroup" / "user.slice").mkdir(parents=True)
    rec = probe(root)[0]
    assert rec["smi"]["problem"] == "no_driver" and "couldn't communicate" in rec["smi"]["said"]
    assert rec["devices"] == [] and rec["driver"]["kernel"] is None
    cgroup = rec["cgroup"]
    assert cgroup["version"] == 2 and cgroup["path"] == "/user.slice"
    assert cgroup["note"].startswith("unknown")  # a planted folder is no cgroup: BPF cannot tell


@pytest.mark.skipif(not Path("/sys/fs/cgroup/unified/cgroup.procs").exists() or os.geteuid() != 0,
                    reason="needs a cgroup v2 hierarchy at /sys/fs/cgroup/unified and root")  # fmt: skip
def test_the_bpf_query_answers_on_a_real_cgroup_v2() -> None:
    # the shipped file, as it runs there (by path: the name gpulayers is its records' package)
    shipped = runpy.run_path(str(PROBE), run_name="shipped_gpulayers")
    assert shipped["bpf_device_programs"]("/sys/fs/cgroup/unified") == (0, None)


def test_the_probe_reads_the_gpu_lines_of_a_config(tmp_path: Path) -> None:
    conf = tmp_path / "root" / "etc" / "pve" / "lxc" / "200.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(
        "arch: amd64\nhostname: trainer\nmemory: 65536\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 511:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry: /data data none bind 0 0\n"
        "dev0: /dev/nvidia1,gid=44\n"
        "dev1: /dev/dri/renderD128\n"
        f"lxc.mount.entry: /dev/nvidiactl {'y' * 1000}\n"
    )
    rec = probe(tmp_path / "root", "--config", "/etc/pve/lxc/200.conf")[0]["lxc_config"]
    assert rec["path"] == "/etc/pve/lxc/200.conf" and rec["readable"] is True
    assert rec["lines"][:4] == [
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 511:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "dev0: /dev/nvidia1,gid=44",
    ]
    assert len(rec["lines"]) == 5 and len(rec["lines"][4]) == 300  # bounded there
    missing = probe(tmp_path / "root", "--config", "/etc/pve/lxc/999.conf")[0]["lxc_config"]
    assert missing["readable"] is False


def test_the_probe_with_torch_reports_no_cuda_build() -> None:
    records = probe(None, "--torch", extra={"PATH": "/usr/bin:/bin"})
    torch = next(r for r in records if r["type"] == "torch")
    assert torch["importable"] and torch["cuda"] is None and torch["devices"] == []


def test_a_bad_option_is_a_usage_error() -> None:
    r = subprocess.run(
        [sys.executable, str(PROBE), "--smi-timeout", "soon"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "--smi-timeout takes seconds, not 'soon'" in r.stderr


# -- the fake nvidia-smi on a planted root: the real tool's words -----------------------------


def fake(root: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, **gpuroot.env(root)}
    r = subprocess.run(
        [str(root / "usr/bin/nvidia-smi"), *args], capture_output=True, text=True, env=env
    )
    return r.returncode, r.stdout + r.stderr


def test_the_fake_answers_from_the_root_it_is_given(tmp_path: Path) -> None:
    root = gpuroot.plant(tmp_path / "r", gpus=8)
    for i in (0, 1, 2, 4, 5, 6, 7):  # a container given only the node's GPU 3
        (root / "dev" / f"nvidia{i}").unlink()
    code, out = fake(root, "-L")
    assert code == 0 and out.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    node = gpuroot.plant(tmp_path / "n", gpus=8)
    assert out.split("UUID: ")[1] == fake(node, "-L")[1].splitlines()[3].split("UUID: ")[1] + "\n"
    (root / "dev" / "nvidiactl").unlink()
    assert fake(root, "-L") == (9, "NVIDIA-SMI has failed because it couldn't communicate with the "
                                   "NVIDIA driver. Make sure that the latest NVIDIA driver is "
                                   "installed and running.\n\n")  # fmt: skip


def test_the_fake_says_mismatch_missing_library_and_blocked(tmp_path: Path) -> None:
    mismatch = gpuroot.plant(tmp_path / "m", nvml="535.161.07")
    assert fake(mismatch, "-L") == (
        18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.161\n"
    )  # fmt: skip
    nolib = gpuroot.plant(tmp_path / "l", nvml=None)
    code, out = fake(nolib, "-L")
    assert code == 12 and "couldn't find libnvidia-ml.so library" in out
    blocked = gpuroot.plant(tmp_path / "b", cgroup=["c 136:* rwm", "c 195:* m"])
    assert fake(blocked, "-L") == (255, "Failed to initialize NVML: Unknown Error\n")


# -- the walk on a local target: node and interpreter -----------------------------------------


def test_gpu_layers_on_a_local_target_walks_node_then_interpreter(tmp_path: Path) -> None:
    root = gpuroot.plant(tmp_path / "root", gpus=2)
    seen: list[str] = []
    with remotekit.local_target() as t:
        report = gpu_layers(t, env=gpuroot.env(root), on_layer=lambda row: seen.append(row.name))
    assert seen == ["node", sys.executable] == [row.name for row in report.layers]
    assert [row.gpu_count for row in report.layers] == [2, 2]
    assert [row.kind for row in report.layers] == ["node", "python"]
    assert report.layers[1].torch is not None and report.layers[0].torch is None
    # the CPU torch of this venv, where nvidia-smi lists 2 GPUs
    assert [f.code for f in report.problems] == ["torch_cpu_build"]
    assert report.exit_code == 1 and "no CUDA build" in report.render()


def test_every_fix_is_a_template_that_formats() -> None:
    from collections import defaultdict

    from remotekit.diagnostics.gpulayers import FIXES

    for key, template in FIXES.items():
        text = template.format_map(defaultdict(lambda: "?"))  # a stray brace would raise
        assert not re.search(r"\{[a-z_]+\}", text), key


# -- docs/diagnostics.md shows this table ------------------------------------------------------

DOCS = ROOT / "docs" / "diagnostics.md"
DOCS_MARK = "<!-- gpu --layers output: tests/diagnostics/system/test_gpu_layers.py::test_the_docs_table_is_what_render_prints -->"


def docs_report() -> Any:
    """The docs' example: a Proxmox node (cgroup v2) with 4 GPUs, CT 200 given none."""
    uvm = DeviceNode("/dev/nvidia-uvm", "char", 511, 0, "crw-rw-rw-", 0, 0, True)
    config = LxcConfig("/etc/pve/lxc/200.conf", True, ())
    node = layer(
        gpus=4, devices=(*nodes(4), uvm), cgroup=CgroupView(2, "/", bpf_programs=0), config=config
    )
    said = f"{NO_DRIVER} Make sure that the latest NVIDIA driver is installed and running."
    ct = pct_row(
        cgroup=CgroupView(2, "/", bpf_programs=1), view=smi(0, problem="no_driver", said=said)
    )
    torch = TorchInfo(True, "2.6.0+cu124", "12.4", None, None, False, 0, (), None)
    py = replace(ct, name="/root/venv/bin/python", kind="python", torch=torch)
    return report_of("kpro6", [node, ct, py])


def test_the_docs_table_is_what_render_prints() -> None:
    text = DOCS.read_text()
    block = text[text.index(DOCS_MARK) :].split("```text\n", 1)[1].split("```", 1)[0]
    assert block == docs_report().render() + "\n"


# -- the task: `remotekit gpu --layers` ----------------------------------------------------------


def test_the_task_prints_the_table_and_its_json(tmp_path: Path) -> None:
    """hosts.yaml's env reaches the interpreter's level only (the target's env is the
    innermost level's): there the planted GPUs, on the node none, and a CPU torch."""
    from tests.conftest import write_inventory
    from tests.harness import cli

    root = gpuroot.plant(tmp_path / "root", gpus=2)
    hosts = tmp_path / "hosts.yaml"
    write_inventory(hosts, {"local": {"python": sys.executable, "env": gpuroot.env(root)}})
    r = cli("gpu", "--layers", "--inventory", str(hosts), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = [
        line
        for line in r.stdout.splitlines()
        if line.startswith(("node ", sys.executable[-37:], "..."))
    ]
    assert len(rows) == 2, r.stdout
    assert "2 GPU(s)" in rows[1] and "2 GPU(s)" not in rows[0]
    assert "torch: 2." in r.stdout and "no CUDA build" in r.stdout
    r = cli("gpu", "--layers", "--json", "--inventory", str(hosts), cwd=tmp_path)
    [host] = json.loads(r.stdout)["hosts"]
    assert host["exit_code"] == r.returncode == 1
    assert [layer["kind"] for layer in host["result"]["layers"]] == ["node", "python"]
    assert [p["code"] for p in host["result"]["problems"]] == ["torch_cpu_build"]
