"""What a hosts.yaml says to reach each real runtime's container, job or pod, and the broken
ones beside it (stopped, missing, pending ...) with the words their error must quote: the
runtime suite (tests/engine/test_runtimes.py) and the shell tests (tests/engine/test_shell.py) build their
hosts from it. ``fx(name)`` gives the session fixture ``name`` (the runtime, started on first
use: ``request.getfixturevalue``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from tests.conftest import CT, NESTED_CT, STOPPED, need_program

#: chains of several hops, nested as users have them: a Podman container started in a Slurm
#: job's node; Podman inside a Proxmox CT; and in it, sudo to another user (depth 4 with ssh)
NESTED = ("slurm-podman", "pct-podman", "pct-podman-sudo")


def _tool(name: str) -> str:
    return shutil.which(name, path=f"{os.environ['PATH']}:/usr/sbin:/sbin") or name


def hosts_for(runtime: str, fx: Callable[[str], Any]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(hop settings, what is entered, {broken host: (hop settings, Broken fields)})."""
    if runtime == "pct":
        pct = str(fx("node").pct)
        return (
            {"container": CT, "pct": pct},
            str(CT),
            {
                "stopped": ({"container": STOPPED, "pct": pct}, "ContainerNotRunning",
                            f"container '{STOPPED}' not running!", str(STOPPED)),
                "missing": ({"container": 999, "pct": pct}, "ContainerNotFound",
                            "Configuration file 'nodes/pve/lxc/999.conf' does not exist", "999"),
            },
        )  # fmt: skip
    if runtime == "lxc":
        ct, stopped, attach = fx("lxc_ct"), fx("lxc_stopped"), _tool("lxc-attach")
        gone = "rk-no-such-ct"
        return (
            {"lxc": {"name": ct.name, "bin": attach}},
            ct.name,
            {
                "stopped": ({"lxc": {"name": stopped.name, "bin": attach}}, "ContainerNotRunning",
                            "Failed to get init pid", stopped.name),
                "missing": ({"lxc": {"name": gone, "bin": attach}}, "ContainerNotFound",
                            "Failed to get init pid", gone),
            },
        )  # fmt: skip
    if runtime in ("podman-ro", "lxc-ro"):
        # a run's record (detach=True) goes to runs_dir: its default, ~/.local/state, is read-only
        writable = {"workdir": "/workspace", "runs_dir": "/workspace/.runs"}
        if runtime == "podman-ro":
            name = fx("podman_ctr").read_only_container()
            return {"podman": name, "engine": _tool("podman"), **writable}, name, {}
        name = fx("lxc_ro").name
        return {"lxc": {"name": name, "bin": _tool("lxc-attach")}, **writable}, name, {}
    if runtime in ("podman", "docker"):
        pods, engine = fx("podman_ctr"), _tool("podman")
        gone = "rk-no-such-pod"
        return (
            {runtime: pods.running, "engine": engine},
            pods.running,
            {
                "stopped": ({runtime: pods.stopped, "engine": engine}, "ContainerNotRunning",
                            "container state improper", pods.stopped),
                "missing": ({runtime: gone, "engine": engine}, "ContainerNotFound",
                            "no such container", gone),
            },
        )  # fmt: skip
    if runtime == "slurm":
        c, srun = fx("slurm_cluster"), _tool("srun")

        def job(j: str) -> dict[str, Any]:
            return {"slurm": {"job": int(j), "bin": srun}}

        return (
            job(c.running),
            c.running,
            {
                "pending": (job(c.pending), "ContainerNotRunning", "Job is pending execution",
                            c.pending),
                "finished": (job(c.finished), "ContainerNotRunning", "has expired", c.finished),
                "unknown": (job(c.unknown), "ContainerNotFound", "Invalid job id specified",
                            c.unknown),
            },
        )  # fmt: skip
    if runtime in NESTED:
        return _nested(runtime, fx)
    assert runtime == "kubectl"
    k = fx("kube")

    def pod(name: str, container: str = "main") -> dict[str, Any]:
        return {"kubectl": {"pod": name, "container": container, "namespace": k.namespace,
                            "bin": str(k.bin), "context": k.context}}  # fmt: skip

    return (
        pod("trainer"),
        "trainer",
        {
            "missing": (pod("nope"), "ContainerNotFound", 'pods "nope" not found', "nope"),
            "nocontainer": (pod("trainer", "gpu"), "ContainerNotFound",
                            "container gpu is not valid for pod trainer", "gpu"),
            "completed": (pod("done"), "ContainerNotRunning",
                          "cannot exec into a container in a completed pod", "done"),
            "pending": (pod("queued"), "ContainerNotRunning", "does not have a host assigned",
                        "queued"),
            "crashing": (pod("crashing"), "ContainerNotRunning", 'container not found ("main")',
                         "crashing"),
        },
    )  # fmt: skip


def _nested(runtime: str, fx: Callable[[str], Any]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """``hosts_for`` for a chain of several hops: the outer hop broken, and the inner one (whose
    tool's words the outer hop's patterns may match too: ``no such container``)."""
    gone = "rk-no-such-pod"
    if runtime == "slurm-podman":
        c, pods = fx("slurm_cluster"), fx("podman_ctr")

        def chain(job: str, name: str, engine: str = str(pods.engine)) -> dict[str, Any]:
            # the running job by its name: looked up (squeue) inside the chain, once
            by = {"name": "rk-running"} if job == c.running else {"job": int(job)}
            slurm = {"slurm": {**by, "bin": _tool("srun")}}
            return {"hops": [slurm, {"podman": name, "engine": engine}]}

        return (
            chain(c.running, pods.running),
            pods.running,
            {
                "no-engine": (chain(c.running, pods.running, "/no/such/podman"), "ContainerError",
                              f"podman not found at /no/such/podman on job {c.running}", pods.running),
                "inner-stopped": (chain(c.running, pods.stopped), "ContainerNotRunning",
                                  "container state improper", pods.stopped),
                "inner-missing": (chain(c.running, gone), "ContainerNotFound",
                                  "no such container", gone),
                "outer-pending": (chain(c.pending, pods.running), "ContainerNotRunning",
                                  "Job is pending execution", c.pending),
            },
        )  # fmt: skip
    pct, pods = str(fx("node").pct), fx("nested")
    sudo = []
    if runtime == "pct-podman-sudo":
        need_program("sudo")  # the real one, under the /usr the containers bind
        sudo = [{"sudo": "rk"}]

    def hops(vmid: int, name: str, engine: str = "podman") -> dict[str, Any]:
        inner = {"podman": name, "engine": engine}
        return {"hops": [{"container": vmid, "pct": pct}, inner, *sudo]}

    return (
        hops(NESTED_CT, pods.running),
        pods.running,
        {
            "no-engine": (hops(NESTED_CT, pods.running, "/no/such/podman"), "ContainerError",
                          f"podman not found at /no/such/podman on container {NESTED_CT}", pods.running),
            "inner-stopped": (hops(NESTED_CT, pods.stopped), "ContainerNotRunning",
                              "container state improper", pods.stopped),
            "inner-missing": (hops(NESTED_CT, gone), "ContainerNotFound", "no such container",
                              gone),
            "outer-stopped": (hops(STOPPED, pods.running), "ContainerNotRunning",
                              f"container '{STOPPED}' not running!", str(STOPPED)),
        },
    )  # fmt: skip
