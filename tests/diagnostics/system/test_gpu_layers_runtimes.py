"""``gpu --layers`` through REAL levels: Proxmox's pct (the stand-in) over a real LXC container,
a real Podman container, and a real Slurm job, locally and through sshd.

No GPU is on this machine, so each level's GPU host is planted (tests/gpuroot.py) at the same
path P, which each level resolves in its own filesystem: the node's P is a folder here; the
LXC container's P is in its private /tmp (written from the node through its init's root); the
Podman container's P is a folder of the node bound there. The fake nvidia-smi planted at each
level answers from its own P, as the real tool answers from its own /dev and /proc. What is
real: the chain (pct exec, lxc-attach --clear-env, podman exec, srun --export=NONE), each
level's own processes and files, Podman's real cgroup device rules, and the variables the
real Slurm gres/gpu plugin sets in a step (the node's GPUs being character devices 195:N).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.diagnostics.gpulayers import GpuLayersReport, gpu_layers
from tests import gpuroot, runtimes
from tests.conftest import need, write_inventory
from tests.harness import FakeNode, SSHServer

VMID = 260  # a CT of the node stand-in for these tests alone, on the session's LXC container
DRIVER = gpuroot.DRIVER


def target(
    tmp_path: Path, hop: dict[str, Any], via: str, request: pytest.FixtureRequest
) -> remotekit.Target:
    """A target whose chain is ``hop`` (with the test venv), locally or through sshd."""
    host: dict[str, Any] = {**hop, "venv": sys.prefix}
    if via == "ssh":
        sshd: SSHServer = request.getfixturevalue("sshd")
        host = sshd.host_yaml(**host)
    inv = write_inventory(tmp_path / "hosts.yaml", {"t": host})
    return inv.target("t")


def walk(t: remotekit.Target, root: Path) -> GpuLayersReport:
    with t:
        return gpu_layers(t, env=gpuroot.env(root), timeout=120)


# -- Proxmox pct over a real LXC container ------------------------------------------------------


@pytest.fixture
def ct(node: FakeNode, tmp_path: Path) -> Iterator[tuple[runtimes.LxcContainer, Path, Path]]:
    """CT ``VMID`` (the running LXC container), the node's planted root P (with /etc/pve) and
    where P is inside the container, seen from the node; removed afterwards."""
    node.add(VMID)
    lxc = node.vmids[VMID]
    root = tmp_path / "gpu"
    inside = lxc.path(str(root))
    try:
        gpuroot.plant(root, gpus=8)
        (root / "etc").mkdir()
        (root / "etc" / "pve").symlink_to(node.pve)  # the node's /etc/pve, where pct reads
        inside.mkdir(parents=True)
        yield lxc, root, inside
    finally:
        (node.pve / "lxc" / f"{VMID}.conf").unlink(missing_ok=True)
        node.vmids.pop(VMID, None)
        shutil.rmtree(lxc.path(str(tmp_path)), ignore_errors=True)


@pytest.mark.parametrize("via", ["local", "ssh"])
def test_a_ct_given_no_device_nodes_is_the_level_that_lost_the_gpus(
    ct: tuple[runtimes.LxcContainer, Path, Path],
    node: FakeNode,
    tmp_path: Path,
    via: str,
    request: pytest.FixtureRequest,
) -> None:
    """The node lists 8 GPUs; the CT has the driver's user space and nvidia-smi but was given
    no /dev/nvidia*: nvidia-smi there cannot reach the driver, and the finding names the CT,
    the config the node holds for it (read there, with no GPU line) and the lines to add."""
    _, root, inside = ct
    gpuroot.plant(inside, nodes=False)
    report = walk(target(tmp_path, {"container": VMID, "pct": str(node.pct)}, via, request), root)
    names = [row.name for row in report.layers]
    assert names == ["node", f"pct exec {VMID}", f"{sys.prefix}/bin/python"]
    assert [row.error for row in report.layers] == [None, None, None]
    node_row, ct_row, py_row = report.layers
    assert node_row.gpu_count == 8 and len(node_row.gpu_nodes) == 9  # nvidia0-7, nvidiactl
    assert ct_row.gpu_count is None and ct_row.smi is not None and ct_row.smi.problem == "no_driver"
    assert ct_row.devices == () and ct_row.driver is not None and ct_row.driver.kernel == DRIVER
    assert ct_row.var("container") is None and ct_row.uid == 0
    config = node_row.lxc_config
    assert config is not None and config.path == f"/etc/pve/lxc/{VMID}.conf"
    assert config.readable and config.lines == ()
    assert [(f.layer, f.code) for f in report.problems] == [(f"pct exec {VMID}", "no_device_nodes")]
    finding = report.problems[0]
    assert f"its config (/etc/pve/lxc/{VMID}.conf on node) has no GPU lines" in finding.message
    assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0" in finding.fix
    assert py_row.torch is not None and py_row.torch.importable  # the venv's torch, in the CT
    text = report.render()
    assert f"warning: [pct exec {VMID}] 8 GPU(s) at node, 0 here" in text
    assert "FAILS: no driver" in text and report.exit_code == 1


def test_a_ct_with_its_own_nvml_of_another_version(
    ct: tuple[runtimes.LxcContainer, Path, Path],
    node: FakeNode,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The config passes the GPUs through (its lines shown), the nodes are there, but the
    driver installed inside is 535 while the node's module is 550: the classic mismatch."""
    _, root, inside = ct
    conf = node.pve / "lxc" / f"{VMID}.conf"
    lines = [
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 511:* rwm",
        *(f"lxc.mount.entry: /dev/nvidia{n} dev/nvidia{n} none bind,optional,create=file"
          for n in ("0", "1", "ctl", "-uvm")),
    ]  # fmt: skip
    conf.write_text(conf.read_text() + "\n".join(lines) + "\n")
    gpuroot.plant(inside, gpus=2, nvml="535.161.07")
    report = walk(
        target(tmp_path, {"container": VMID, "pct": str(node.pct)}, "local", request), root
    )
    assert report.layers[0].lxc_config is not None
    assert report.layers[0].lxc_config.lines == tuple(lines)
    ct_row = report.layers[1]
    assert ct_row.smi is not None and ct_row.smi.problem == "nvml_mismatch"
    assert "NVML library version: 535.161" in (ct_row.smi.said or "")
    assert [(f.layer, f.code) for f in report.problems] == [(f"pct exec {VMID}", "nvml_mismatch")]
    assert f"NVIDIA-Linux-x86_64-{DRIVER}.run --no-kernel-module" in report.problems[0].fix
    text = report.render()
    assert f"config /etc/pve/lxc/{VMID}.conf (read at node): 6 GPU line(s)" in text
    assert f"{DRIVER} / 535.161.07 MISMATCH" in text


# -- Podman ---------------------------------------------------------------------------------------


def test_the_real_cgroup_rules_of_each_level(
    podman_ctr: runtimes.PodmanWorld, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """No planted root: each level's own cgroup v1 device rules, as the kernel keeps them.
    The node's allows everything; the container's (runc's defaults) not the GPUs' major."""
    t = target(
        tmp_path, {"podman": podman_ctr.running, "engine": shutil.which("podman")}, "local", request
    )
    with t:
        report = gpu_layers(t, env={"PATH": "/usr/bin:/bin"}, timeout=120)
    node_row, pod_row, py_row = report.layers
    assert node_row.cgroup is not None and node_row.cgroup.rules == ("a *:* rwm",)
    assert pod_row.name == f"podman exec {podman_ctr.running}"
    cgroup = pod_row.cgroup
    assert cgroup is not None and cgroup.version == 1
    assert cgroup.path is not None and "libpod" in cgroup.path
    assert "c 136:* rwm" in cgroup.rules and cgroup.allows_gpus is False
    assert pod_row.devices == () and pod_row.root is None
    assert py_row.cgroup == cgroup and report.problems == ()  # no GPU anywhere: nothing lost
    assert "v1: c 195 DENIED" in report.render()


def test_a_container_whose_device_rules_were_reset(
    podman_ctr: runtimes.PodmanWorld, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Its nodes are there, its device cgroup allows c 195 only for mknod (as after a
    systemd daemon-reload): NVML there says "Unknown Error"; the fix is the container's."""
    root, bound = tmp_path / "gpu", tmp_path / "container-gpu"
    gpuroot.plant(root, gpus=4)
    gpuroot.plant(bound, gpus=4, cgroup=["c 1:3 rwm", "c 136:* rwm", "c 195:* m"])
    name = podman_ctr.container(extra=("-v", f"{bound}:{root}:rw"))
    try:
        t = target(tmp_path, {"podman": name, "engine": shutil.which("podman")}, "local", request)
        report = walk(t, root)
    finally:
        podman_ctr.podman("rm", "-f", "-t", "0", name)
    pod_row = report.layers[1]
    assert pod_row.smi is not None and pod_row.smi.problem == "nvml_blocked"
    # crw-rw-rw- and root, yet not openable: access(2) asks the device cgroup too, and this
    # container's real one (runc's defaults) denies c 195 as well
    assert len(pod_row.gpu_nodes) == 5 and not any(d.access for d in pod_row.gpu_nodes)
    assert [(f.layer, f.code) for f in report.problems] == [
        (f"podman exec {name}", "cgroup_denies")
    ]
    assert "c 195:* m" in report.problems[0].message
    assert "nvidia-docker#1730" in report.problems[0].fix


# -- Slurm ----------------------------------------------------------------------------------------


def test_a_job_without_gpus_on_a_gpu_node(
    slurm_cluster: runtimes.SlurmCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The node has 4 GPUs; the job asked for none (no --gres), yet inside its step
    nvidia-smi lists the node's 4 (nothing constrains the devices): named, with --gres."""
    root = gpuroot.plant(tmp_path / "gpu", gpus=4)
    job = slurm_cluster.running
    hop = {"slurm": {"job": int(job), "bin": shutil.which("srun")}}
    report = walk(target(tmp_path, hop, "local", request), root)
    slurm_row = report.layers[1]
    assert slurm_row.name == f"srun --jobid {job}" and slurm_row.var("SLURM_JOB_ID") == job
    assert slurm_row.var("SLURM_STEP_GPUS") is None and slurm_row.gpu_count == 4
    codes = [(f.layer, f.code) for f in report.problems]
    assert codes[0] == (f"srun --jobid {job}", "slurm_no_gpus")
    assert f"job {job} holds no GPU" in report.problems[0].message


@pytest.fixture(scope="module")
def gres_cluster(
    world: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[runtimes.SlurmCluster, Path]]:
    """A Slurm cluster whose node has 4 GPUs (gres/gpu, device nodes 195:0-3 in a planted
    root), and that root."""
    need("slurm")
    base = tmp_path_factory.mktemp("gres")
    root = gpuroot.plant(base / "gpu", gpus=4)
    cluster = runtimes.SlurmCluster(base / "slurm", gpus=(root / "dev", 4))
    try:
        yield cluster.start(), root
    finally:
        cluster.stop()


def test_a_step_given_gpus_by_slurm_and_an_env_that_overrides_them(
    gres_cluster: tuple[runtimes.SlurmCluster, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real gres/gpu plugin gives the step GPUs 0,1 (SLURM_STEP_GPUS, and its own
    CUDA_VISIBLE_DEVICES); hosts.yaml's env sets CUDA_VISIBLE_DEVICES=0,1,2,3 for the target,
    which the interpreter's row shows overriding Slurm's. torch here is a CPU build."""
    cluster, root = gres_cluster
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # srun, run here, asks this cluster
    job = cluster.submit("--gres=gpu:2", "--job-name=rk-gres", "--wrap", "sleep 3000")
    hop = {
        "slurm": {"job": int(job), "bin": shutil.which("srun")},
        "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
    }
    t = target(tmp_path, hop, "local", request)
    with t:
        report = gpu_layers(t, env=gpuroot.env(root), timeout=120)
    node_row, slurm_row, py_row = report.layers
    assert node_row.var("SLURM_JOB_ID") is None and node_row.gpu_count == 4
    assert slurm_row.var("SLURM_STEP_GPUS") == "0,1"
    assert slurm_row.var("CUDA_VISIBLE_DEVICES") == "0,1"  # the plugin's
    assert slurm_row.slurm_gres is not None and "gres:gpu:2" in slurm_row.slurm_gres
    assert py_row.var("CUDA_VISIBLE_DEVICES") == "0,1,2,3"
    codes = [(f.layer, f.code) for f in report.problems]
    python = f"{sys.prefix}/bin/python"
    assert codes == [(python, "cuda_visible_overridden"), (python, "torch_cpu_build")]
    assert (
        "Slurm set '0,1' for this step (GPUs 0,1 (SLURM_STEP_GPUS))" in report.problems[0].message
    )
    assert f"job {job}: GPUs 0,1 (SLURM_STEP_GPUS)" in report.render()
