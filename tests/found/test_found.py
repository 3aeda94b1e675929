"""Groups found at run time (remotekit/found/): the cluster names the members.

On real runtimes: the Proxmox node stand-in behind the real sshd (``pct list`` and ``pct
config`` over real LXC containers), the one-node Slurm cluster (its running job's node, asked
here and through sshd), and the fake kubectl (``get pods -l``). Each member is then entered and
a step runs in it, from the Python API and from the command line (fleet output, ``--json``,
``hosts --resolve``). Then what a finder makes of the tools' words, hostile ones included,
and hosts.yaml's errors for found groups.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.found import Found, KubeSelector, PctList, Said, SlurmJob
from remotekit.found.core import MAX_MEMBERS, QueryFailed, _checked, _member
from remotekit.layers import Kubectl, Pct, Slurm, Sudo
from remotekit.runs import home_of
from tests import runtimes
from tests.conftest import CT, STOPPED, write_inventory
from tests.harness import (
    ROOT,
    FakeNode,
    SSHServer,
    free_port,
    processes_with,
    venv_prefix,
    wait_gone,
)

pytestmark = pytest.mark.timeout(180)

TRAIN, WEB = 202, 203


def rk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remotekit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=150,
    )


@pytest.fixture(scope="module")
def pve_cts(tmp_path_factory: pytest.TempPathFactory, node: FakeNode) -> tuple[FakeNode, str]:
    """A Proxmox node of this module's own (the session's node gains other suites' CTs):
    CTs 200 (ct200), 201 (stopped), 202 (train-a, tags gpu;train) and 203 (web, tag Web),
    the running ones the session's running LXC container; and its `pct`, a wrapper that
    points the stand-in at this node's /etc/pve (sshd's sessions name the session's)."""
    own = FakeNode(tmp_path_factory.mktemp("found-node"), node.running, node.stopped).install()
    own.add(CT)
    own.add(STOPPED, state="stopped")
    own.add(TRAIN, hostname="train-a", tags="gpu;train")
    own.add(WEB, hostname="web", tags="Web")
    pct = own.root / "pct-here"
    pct.write_text(f'#!/bin/sh\nFAKE_PCT_ROOT={own.pve} exec {own.pct} "$@"\n')
    pct.chmod(0o755)
    return own, str(pct)


def _srun() -> str:
    return shutil.which("srun", path="/usr/bin:/usr/sbin:/bin") or "srun"


@pytest.fixture
def cluster_inv(
    tmp_path: Path,
    sshd: SSHServer,
    pve_cts: tuple[FakeNode, str],
    slurm_cluster: runtimes.SlurmCluster,
    kube: runtimes.FakeKube,
    agent: bool | None,
) -> remotekit.Inventory:
    """A hosts.yaml with one found group of each kind, and broken ones; every host and
    member's steps on the agent or not (``agent``: tests/engine/test_per_step.py runs these again)."""
    venv, pct = venv_prefix(), pve_cts[1]
    job = int(slurm_cluster.running)
    pods = {"namespace": kube.namespace, "context": kube.context, "bin": str(kube.bin)}
    groups: dict[str, Any] = {
        "cts": {"pct_list": "pve", "pct": pct, "venv": venv},
        "trains": {"pct_list": "pve", "pct": pct, "name": "train-*", "venv": venv},
        "gpus": {"pct_list": "pve", "pct": pct, "tag": "gpu", "venv": venv},
        "webs": {"pct_list": "pve", "pct": pct, "tag": ["web"], "venv": venv},
        "nocts": {"pct_list": "pve", "pct": pct, "name": "db-*", "venv": venv},
        "nopct": {"pct_list": "pve", "pct": "/opt/no-pct/pct", "venv": venv},
        "down": {"pct_list": "gone", "pct": pct},
        "jobnodes": {"slurm_job": job, "via": "login", "bin": _srun(), "venv": venv},
        "localjob": {"slurm_job": job, "bin": _srun(), "venv": venv},
        "pending": {"slurm_job": int(slurm_cluster.pending), "via": "login", "bin": _srun()},
        "nojob": {"slurm_job": int(slurm_cluster.unknown), "via": "login", "bin": _srun()},
        "trainers": {"kubectl_selector": "app=trainer", "container": "main", **pods},
        "nopods": {"kubectl_selector": "app=nobody", **pods},
        "badsel": {"kubectl_selector": "app in (x", **pods},
    }
    hosts = {
        "pve": sshd.host_yaml(),
        "login": sshd.host_yaml(),
        "gone": {**sshd.host_yaml(), "ssh": "127.0.0.1:1", "timeouts": {"connect": 3}},
    }
    return write_inventory(tmp_path / "hosts.yaml", hosts, groups=groups, agent=agent)


def names(inv: remotekit.Inventory, group: str) -> list[str]:
    return [s.name for s in inv.select(group=group)]


# -- pct list on a Proxmox node, over real LXC --------------------------------------------------


def test_pct_list_finds_the_running_containers_and_each_runs_steps(
    cluster_inv: remotekit.Inventory, agent: bool | None
) -> None:
    members = cluster_inv.select(group="cts")
    assert [m.name for m in members] == [f"cts/{CT}", f"cts/{TRAIN}", f"cts/{WEB}"]  # not 201
    assert {m.agent for m in members} == {agent is not False}  # defaults: reach the members
    with remotekit.fleet(members) as f:
        outcomes = f.run(["cat", "/proc/1/comm"])
    for o, vmid in zip(outcomes, (CT, TRAIN, WEB)):
        assert o.host == f"cts/{vmid}" and o.ok, o.reason
        assert o.value.stdout == "init\n"  # busybox's init: inside the LXC container
        assert f"-> pct exec {vmid} -> " in o.chain and o.chain.startswith("ssh ")


def test_pct_list_filters_by_name_glob_and_by_tag(cluster_inv: remotekit.Inventory) -> None:
    assert names(cluster_inv, "trains") == [f"trains/{TRAIN}"]
    assert names(cluster_inv, "gpus") == [f"gpus/{TRAIN}"]
    assert names(cluster_inv, "webs") == [f"webs/{WEB}"]  # PVE compares tags case-blind


def test_a_group_that_finds_nothing_is_an_error_naming_the_query(
    cluster_inv: remotekit.Inventory,
) -> None:
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="nocts")
    assert e.value.group == "nocts" and e.value.query == "pct list on pve (name 'db-*')"
    assert str(e.value) == (
        "group 'nocts': pct list on pve (name 'db-*'): found no running container"
    )


def test_a_failing_query_names_the_group_the_query_and_the_cause(
    cluster_inv: remotekit.Inventory,
) -> None:
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="nopct")
    assert "group 'nopct': pct list on pve: pct list failed (exit 127)" in str(e.value)
    assert "/opt/no-pct/pct" in str(e.value)
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="down")
    assert str(e.value).startswith("group 'down': pct list on gone: gone could not be asked: ")
    assert isinstance(e.value.__cause__, remotekit.ConnectError)


def test_one_member_by_name_and_a_member_that_is_not_there(
    cluster_inv: remotekit.Inventory,
) -> None:
    assert [s.name for s in cluster_inv.select(hosts=f"pve,cts/{TRAIN}")] == ["pve", "cts/202"]
    with cluster_inv.target(f"cts/{WEB}") as t:
        assert t.run(["cat", "/proc/1/comm"]).stdout == "init\n"
    with pytest.raises(remotekit.UnknownHost, match=r"'cts/201'.*cts/200, cts/202, cts/203"):
        cluster_inv.select(hosts=f"cts/{STOPPED}")
    with pytest.raises(remotekit.UnknownHost, match="'nogroup/1'"):
        cluster_inv.select(hosts="nogroup/1")


# -- the nodes of a running Slurm job -------------------------------------------------------------


@pytest.mark.parametrize("group", ["jobnodes", "localjob"])
def test_a_slurm_jobs_nodes_are_members_entered_with_srun_w(
    cluster_inv: remotekit.Inventory, slurm_cluster: runtimes.SlurmCluster, group: str
) -> None:
    """Through sshd to the login node, and here (``via`` left out: local)."""
    members = cluster_inv.select(group=group)
    assert [m.name for m in members] == [f"{group}/{slurm_cluster.node}"]
    job, node = int(slurm_cluster.running), slurm_cluster.node
    assert members[0].hop == Slurm(job=job, node=node, bin=_srun(), in_job=True)
    with remotekit.Target(members[0]) as t:
        r = t.run(["printenv", "SLURM_JOB_ID", "SLURMD_NODENAME", "MASTER_ADDR", "RANK"])
        assert r.stdout.split() == [slurm_cluster.running, node, "127.0.0.1", "0"]
        assert f"srun --jobid {slurm_cluster.running} -w {slurm_cluster.node}" in t.chain


def test_a_job_that_is_not_running_or_unknown_is_a_clear_error(
    cluster_inv: remotekit.Inventory, slurm_cluster: runtimes.SlurmCluster
) -> None:
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="pending")
    assert str(e.value) == (
        f"group 'pending': the nodes of Slurm job {slurm_cluster.pending} on login: "
        f"job {slurm_cluster.pending} is PENDING, not RUNNING"
    )
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="nojob")
    assert f"squeue does not know job {slurm_cluster.unknown}" in str(e.value)
    assert "Invalid job id specified" in str(e.value)


def test_diagnostics_run_on_each_node_of_the_job(
    cluster_inv: remotekit.Inventory, slurm_cluster: runtimes.SlurmCluster
) -> None:
    """``gpu`` and ``procs`` over the job's nodes: one host each, named ``GROUP/NODE``."""
    cwd = Path(str(cluster_inv.path)).parent
    for task in ("gpu", "procs"):
        r = rk(task, "--group", "jobnodes", "--json", cwd=cwd)
        doc = json.loads(r.stdout)
        assert [h["host"] for h in doc["hosts"]] == [f"jobnodes/{slurm_cluster.node}"], r.stderr
        assert doc["hosts"][0]["status"] != "failed", doc


# -- a job's ranks: one task each in the running job's allocation ---------------------------------

RENDEZVOUS = """\
import os, torch, torch.distributed as dist
print("in job", os.environ["SLURM_JOB_ID"], "step", os.environ["SLURM_STEP_ID"], flush=True)
dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture
def ranks(
    tmp_path: Path,
    sshd: SSHServer,
    slurm_cluster: runtimes.SlurmCluster,
    agent: bool | None,
) -> list[remotekit.HostSpec]:
    """Group ``ranks``: the running job's one node, three ranks on it (several tasks on one
    node stand in for a multi-node job's ranks), asked through sshd; its runs recorded in a
    folder of this test's own."""
    groups = {
        "ranks": {
            "slurm_job": int(slurm_cluster.running),
            "via": "login",
            "bin": _srun(),
            "ranks_per_node": 3,
            "master_port": free_port(),
            "venv": venv_prefix(),
            "runs_dir": str(tmp_path / "runs"),
        }
    }
    hosts = {"login": sshd.host_yaml()}
    inv = write_inventory(tmp_path / "hosts.yaml", hosts, groups=groups, agent=agent)
    return inv.select(group="ranks")


def test_each_rank_sees_its_rendezvous_variables(
    ranks: list[remotekit.HostSpec], slurm_cluster: runtimes.SlurmCluster
) -> None:
    node = slurm_cluster.node
    assert [m.name for m in ranks] == [f"ranks/{node}.{i}" for i in range(3)]
    names = ["RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_JOB_ID"]
    with remotekit.fleet(ranks) as f:
        outcomes = f.run(["printenv", *names])
    got = [o.value.stdout.split() for o in outcomes]
    assert got == [[str(i), str(i), "0", "3", "127.0.0.1", slurm_cluster.running] for i in range(3)]


def test_detached_runs_on_the_ranks_rendezvous_as_one_world(
    ranks: list[remotekit.HostSpec], tmp_path: Path
) -> None:
    """One detached run per rank, each a task of the running job: torch.distributed (gloo)
    finds the others through the rendezvous variables and all-reduces across all three."""
    script = tmp_path / "allreduce.py"
    script.write_text(RENDEZVOUS)
    targets = [remotekit.Target(m) for m in ranks]
    try:
        runs = [t.run([f"{venv_prefix()}/bin/python", str(script)], detach=True) for t in targets]
        for i, run in enumerate(runs):
            info = run.wait(timeout=120)
            log = b"".join(run.logs()).decode()
            assert (info.state, info.exit_code) == ("exited", 0), log
            assert f"rank {i} of 3: sum 3" in log
            # the runs live on the login node, each listed by its own rank only
            assert [r.id for r in targets[i].runs()] == [run.id]
            assert f"in job {ranks[i].hop.job} step " in log  # a task of the running job
            assert run.info().command == (f"{venv_prefix()}/bin/python", str(script))
    finally:
        for t in targets:
            t.close()


def test_stop_one_rank_then_the_rest_over_the_group(
    ranks: list[remotekit.HostSpec], tmp_path: Path
) -> None:
    marker = f"rk-rank-{tmp_path.name}"
    code = (
        f"import os,time; print('rank', os.environ['RANK'], flush=True); time.sleep(300) # {marker}"
    )
    targets = [remotekit.Target(m) for m in ranks]
    try:
        runs = [t.run(["python3", "-c", code], detach=True) for t in targets]
        runtimes.wait_for("three ranks", lambda: len(processes_with(marker)) >= 3, timeout=60)
        assert runs[1].stop(grace=2).state == "stopped"
        assert [r.state() for r in runs] == ["running", "stopped", "running"]
        assert b"rank 1" in b"".join(runs[1].logs())
        cwd = tmp_path
        listed = json.loads(rk("runs", "--group", "ranks", "--json", cwd=cwd).stdout)
        by_host = {h["host"]: [r["id"] for r in h["result"]] for h in listed["hosts"]}
        assert by_host == {m.name: [r.id] for m, r in zip(ranks, runs)}
        for run in (runs[0], runs[2]):
            r = rk("stop", run.id, "--group", "ranks", cwd=cwd)
            assert r.returncode == 0, r.stderr
        assert wait_gone(marker, timeout=15) == []  # the tasks in the job are gone too
    finally:
        for run in runs if "runs" in locals() else ():
            with contextlib.suppress(remotekit.RemotekitError):
                run.stop(grace=1)
        for t in targets:
            t.close()


def test_a_rank_found_through_a_via_host_with_hops_runs_detached_at_the_end_of_them(
    tmp_path: Path, sshd: SSHServer, slurm_cluster: runtimes.SlurmCluster, agent: bool | None
) -> None:
    """The login node entered through sudo (the real one): the job's node is found there, the
    rank's chain is ssh -> sudo -> srun, and a detached run on it is a task of the running job
    whose supervisor holds srun under that sudo, listed and stopped there."""
    sudo = shutil.which("sudo")
    if sudo is None:
        pytest.skip("no sudo here")
    marker = f"rk-sudo-rank-{tmp_path.name}"
    groups = {
        "ranks": {
            "slurm_job": int(slurm_cluster.running),
            "via": "login",
            "bin": _srun(),
            "python": sys.executable,
            "runs_dir": str(tmp_path / "runs"),
            "env": slurm_cluster.env,  # sudo resets the env: the steps say where Slurm is
        }
    }
    hosts = {"login": sshd.host_yaml(hops=[{"sudo": {"bin": sudo}}], env=slurm_cluster.env)}
    inv = write_inventory(tmp_path / "hosts.yaml", hosts, groups=groups, agent=agent)
    (member,) = inv.select(group="ranks")
    assert [type(h) for h in member.hops] == [Sudo, Slurm]
    said = "print(os.environ['SLURM_JOB_ID'], os.environ['RANK'], flush=True)"
    code = f"import os,time; {said}; time.sleep(300) # {marker}"
    with remotekit.Target(member) as t:
        assert " -> sudo -> srun --jobid " in t.chain
        run = t.run(["python3", "-c", code], detach=True)
        try:
            runtimes.wait_for("the rank", lambda: processes_with(marker) != [], timeout=60)
            assert run.info().job is None  # a task of the running job, not a batch job
            assert [r.id for r in t.runs()] == [run.id]
            assert run.stop(grace=2).state == "stopped"
            said = b"".join(run.logs()).decode()  # then srun's words on the cancelled step
            assert said.startswith(f"{slurm_cluster.running} 0\n"), said
            assert wait_gone(marker, timeout=15) == []  # the task in the job is gone too
        finally:
            with contextlib.suppress(remotekit.RemotekitError):
                run.stop(grace=1)


# -- the pods of a label selector (fake kubectl) -----------------------------------------------


def test_a_selectors_running_pods_are_members(cluster_inv: remotekit.Inventory) -> None:
    """``done`` (Succeeded) and ``trainer-old`` (being deleted) match but are not members."""
    members = cluster_inv.select(group="trainers")
    assert [m.name for m in members] == ["trainers/trainer", "trainers/trainer-1"]
    for m in members:
        with remotekit.Target(m) as t:
            r = t.run(["printenv", "HOSTNAME"])
            assert r.stdout.strip() == m.name.split("/")[1]
            assert f"kubectl exec -n ml {m.name.split('/')[1]} -c main" in t.chain


def test_a_selector_kubectl_refuses_or_that_matches_no_one(
    cluster_inv: remotekit.Inventory,
) -> None:
    with pytest.raises(remotekit.GroupError) as e:
        cluster_inv.select(group="badsel")
    assert "kubectl get pods failed (exit 1)" in str(e.value)
    assert "unable to parse requirement" in str(e.value)
    with pytest.raises(remotekit.GroupError, match="no running pod matches"):
        cluster_inv.select(group="nopods")


# -- the command line -----------------------------------------------------------------------------


def test_fleet_output_and_json_name_the_found_members(cluster_inv: remotekit.Inventory) -> None:
    cwd = Path(str(cluster_inv.path)).parent
    r = rk("run", "--group", "trains", "--", "cat", "/proc/1/comm", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert f"trains/{TRAIN}" in r.stdout and "init" in r.stdout
    r = rk("run", "--group", "cts", "--json", "--", "true", cwd=cwd)
    doc = json.loads(r.stdout)
    assert [h["host"] for h in doc["hosts"]] == ["cts/200", "cts/202", "cts/203"]
    r = rk("run", "--group", "nocts", "--", "true", cwd=cwd)
    assert r.returncode == 2
    assert "group 'nocts': pct list on pve (name 'db-*'): found no running container" in r.stderr


def test_hosts_resolve_shows_what_each_group_found_and_when(
    cluster_inv: remotekit.Inventory, tmp_path: Path
) -> None:
    cwd = Path(str(cluster_inv.path)).parent
    r = rk("hosts", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "found groups" in r.stdout and "pct list on pve (name 'train-*')" in r.stdout
    assert "cts/200" not in r.stdout  # nothing asked without --resolve
    r = rk("hosts", "--resolve", "--json", cwd=cwd)
    assert r.returncode == 2  # the broken groups
    assert "group 'nocts'" in r.stderr and "group 'pending'" in r.stderr
    rows = {row["host"]: row for row in json.loads(r.stdout)}
    row = rows[f"trains/{TRAIN}"]
    assert row["groups"] == "trains" and "-> pct exec 202 -> " in row["chain"]
    assert row["found"]["query"] == "pct list on pve (name 'train-*')"
    assert row["found"]["at"][:2] == "20" and row["found"]["duration_s"] > 0
    assert "trainers/trainer-1" in rows and "pve" in rows


# -- what a finder makes of the tool's words -----------------------------------------------------


def answers(*said: tuple[int, str, str]) -> Any:
    """An ``ask`` that answers ``said`` in turn, and records what it was asked."""
    asked: list[tuple[str, ...]] = []
    queue = list(said)

    def ask(argv: Any) -> Said:
        asked.append(tuple(argv))
        code, out, err = queue.pop(0)
        return Said(code, out, err)

    ask.asked = asked  # type: ignore[attr-defined]
    return ask


PCT_LIST = (
    "VMID       Status     Lock         Name                \n"
    "200        running                 train-0             \n"
    "201        stopped                 train-1             \n"
    "1000       running    backup       train-2             \n"
)


def test_pct_list_is_read_as_pct_prints_it() -> None:
    ask = answers((0, PCT_LIST, ""))
    found = PctList("pve1", name="train-*").find(ask)
    assert found == [Found("200", Pct(200)), Found("1000", Pct(1000))]
    assert ask.asked == [("pct", "list")]
    assert PctList("pve1").find(answers((0, "", ""))) == []  # no CT: pct prints nothing


def test_pct_tags_come_from_each_ct_config() -> None:
    conf = "arch: amd64\nhostname: train-0\ntags: GPU;train\n"
    ask = answers((0, PCT_LIST, ""), (0, conf, ""), (0, "hostname: x\n", ""))
    found = PctList("pve1", tags=("gpu",), pct="/usr/sbin/pct").find(ask)
    assert found == [Found("200", Pct(200, "/usr/sbin/pct"))]
    assert ask.asked[1:] == [
        ("/usr/sbin/pct", "config", "200"),
        ("/usr/sbin/pct", "config", "1000"),
    ]


@pytest.mark.parametrize(
    "out",
    [
        "no header here\n200 running x\n",
        "VMID       Status     Lock         Name\n99 running x\n",  # below Proxmox's range
        "VMID       Status     Lock         Name\n200 running a b c\n",
        "VMID       Status     Lock         Name\n-1 running x\n",
    ],
)
def test_a_pct_list_line_that_is_not_a_ct_is_refused(out: str) -> None:
    with pytest.raises(QueryFailed, match="pct list printed"):
        PctList("pve1").find(answers((0, out, "")))


def test_slurm_nodes_come_from_squeue_then_scontrol_with_their_ranks() -> None:
    node = "NodeName=node01 Arch=x86_64 NodeAddr=10.0.0.1 NodeHostName=node01 Version=22.05"
    ask = answers((0, "RUNNING node[01-02]\n", ""), (0, "node01\nnode02\n", ""), (0, node, ""))
    found = SlurmJob(4242, "login1", "/opt/slurm/bin/srun", master_port=1234).find(ask)
    srun = "/opt/slurm/bin/srun"
    assert [(f.name, f.hop) for f in found] == [
        ("node01", Slurm(job=4242, node="node01", bin=srun, in_job=True)),
        ("node02", Slurm(job=4242, node="node02", bin=srun, in_job=True)),
    ]
    assert found[1].env == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "1234",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "RANK": "1",
        "NODE_RANK": "1",
        "LOCAL_RANK": "0",
    }
    assert ask.asked == [
        ("/opt/slurm/bin/squeue", "--noheader", "--jobs=4242", "--format=%T %N"),
        ("/opt/slurm/bin/scontrol", "show", "hostnames", "node[01-02]"),
        ("/opt/slurm/bin/scontrol", "-o", "show", "node", "node01"),
    ]
    many = answers((0, "RUNNING a\nRUNNING b\n", ""))
    with pytest.raises(QueryFailed, match="squeue lists 2 jobs for 4242"):
        SlurmJob(4242).find(many)


def test_several_ranks_a_node_are_members_each() -> None:
    ask = answers((0, "RUNNING n[1-2]\n", ""), (0, "n1\nn2\n", ""), (0, "NodeAddr=n1", ""))
    found = SlurmJob(7, ranks_per_node=2).find(ask)
    ranks = [(f.name, f.env["RANK"], f.env["NODE_RANK"], f.env["LOCAL_RANK"]) for f in found]
    assert ranks == [("n1.0", "0", "0", "0"), ("n1.1", "1", "0", "1"), ("n2.0", "2", "1", "0"),
                     ("n2.1", "3", "1", "1")]  # fmt: skip
    assert {f.env["WORLD_SIZE"] for f in found} == {"4"}
    bad = answers((0, "RUNNING n1\n", ""), (0, "n1\n", ""), (0, "NodeAddr=-x;y", ""))
    with pytest.raises(QueryFailed, match="no address"):
        SlurmJob(7).find(bad)


def test_kubectl_pods_are_read_from_the_json_list() -> None:
    pods = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"metadata": {"name": "a"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Pending"}},
            {"metadata": {"name": "c", "deletionTimestamp": "x"}, "status": {"phase": "Running"}},
        ],
    }
    ask = answers((0, json.dumps(pods), ""))
    found = KubeSelector("app=t", "ml", "main", "prod", "kubectl").find(ask)
    assert found == [Found("a", Kubectl("a", "main", "ml", "prod", "kubectl"))]
    assert ask.asked == [
        ("kubectl", "--context", "prod", "get", "pods", "-n", "ml", "-l", "app=t", "-o", "json")
    ]
    for bad in ("not json", '{"items": 3}', '{"items": [{"metadata": {}, "status": {}}]}'):
        with pytest.raises(QueryFailed):
            KubeSelector("app=t").find(answers((0, bad, "")))


@pytest.mark.parametrize(
    "name",
    ["../etc", "a b", "-rf", ".hidden", "x\x1b]52;c;ZXZpbA==\x07", "a/b", "", "n" * 254, "é"],
)
def test_a_member_name_from_the_far_side_that_cannot_be_a_target_is_refused(name: str) -> None:
    with pytest.raises(QueryFailed, match="cannot be a target name") as e:
        _checked([Found(name, Pct(200))])
    assert "\x1b" not in str(remotekit.GroupError("g", "q", str(e.value)))  # shown escaped


def test_too_many_members_or_a_member_twice_is_refused() -> None:
    with pytest.raises(QueryFailed, match=f"more than {MAX_MEMBERS}"):
        _checked([Found(f"n{i}", Pct(200)) for i in range(MAX_MEMBERS + 1)])
    with pytest.raises(QueryFailed, match="twice"):
        _checked([Found("n1", Pct(200)), Found("n1", Pct(201))])


# -- hosts.yaml ------------------------------------------------------------------------------------


def test_found_groups_are_read_with_their_members_settings() -> None:
    inv = remotekit.parse_inventory(
        "defaults: {env: {A: '1'}, timeouts: {step: 30}}\n"
        "hosts:\n"
        "  pve1: {ssh: root@pve1, sudo: true, venv: /root/venv, gpus: 8}\n"
        "groups:\n"
        "  cts: {pct_list: pve1, tag: [gpu], venv: /opt/venv, env: {B: '2'}}\n"
        "  pods: {kubectl_selector: 'app=t,tier in (a,b)', namespace: ml}\n"
        "default: cts\n",
        "hosts.yaml",
    )
    cts = inv.found["cts"]
    assert cts.finder == PctList("pve1", tags=("gpu",)) and cts.via is inv.hosts["pve1"]
    m = cts.member
    assert (m.ssh, m.hops, m.venv, m.gpus) == (inv.hosts["pve1"].ssh, (), "/opt/venv", 0)
    member = _member(cts, Found("200", Pct(200)))  # the via host's chain (its sudo), then the hop
    assert member.hops == (Sudo(user="root"), Pct(200)) and member.name == "cts/200"
    assert dict(m.env) == {"A": "1", "B": "2"} and m.timeouts.step == 30
    assert cts.source == "hosts.yaml:5" and inv.default == "cts"
    assert inv.found["pods"].finder.via == "local"
    assert "cts" not in inv.groups


@pytest.mark.parametrize(
    ("groups", "error"),
    [
        ("g: {pct_list: pve9}", "hosts.yaml:5: groups.g.pct_list: unknown host 'pve9'"),
        ("g: {slurm_job: 1, via: nope}", "hosts.yaml:5: groups.g.via: unknown host 'nope'"),
        (
            "g: {pct_list: pve1, slurm_job: 4}",
            "groups.g.slurm_job: a found group names two queries: one of pct_list",
        ),
        ("g: {venv: /v}", "groups.g: a found group is a mapping, so it needs a query"),
        ("g: {pct_list: pve1, tags: gpu}", "groups.g.tags: unknown key for a pct_list group "),
        ("g: {pct_list: pve1, ssh: x}", "groups.g.ssh: unknown key for a pct_list group"),
        ("g: {pct_list: pve1, tag: 'a b'}", "groups.g.tag: expected a Proxmox tag"),
        ("g: {slurm_job: -4}", "groups.g.slurm_job: expected a Slurm job id"),
        ("g: {kubectl_selector: '-o=x'}", "groups.g.kubectl_selector: expected a label selector"),
        ("g: {kubectl_selector: a, namespace: ML}", "groups.g.namespace: expected a Kubernetes"),
        ("g: {pct_list: pve1, venv: 3}", "groups.g.venv: expected a non-empty string"),
    ],
)
def test_a_found_groups_mistakes_name_file_line_and_key(groups: str, error: str) -> None:
    text = (
        "hosts:\n  pve1: {ssh: root@pve1}\n  ct: {ssh: root@pve1, container: 200}\n"
        f"groups:\n  {groups}\n"
    )
    with pytest.raises(remotekit.InventoryError) as e:
        remotekit.parse_inventory(text, "hosts.yaml")
    assert error in str(e.value)


def test_a_via_host_with_its_own_chain_gives_its_members_that_chain_then_theirs() -> None:
    """A login node that is itself a container (a CT on a Proxmox node, entered through sudo):
    the query runs where the via host's chain ends, and each member is that chain plus the hop
    that was found, innermost."""
    inv = remotekit.parse_inventory(
        "hosts:\n"
        "  login: {ssh: al@pve1, hops: [{sudo: true}, {container: 200}]}\n"
        "groups:\n"
        "  nodes: {slurm_job: 7, via: login, venv: /opt/venv}\n",
        "hosts.yaml",
    )
    nodes = inv.found["nodes"]
    assert nodes.via.hops == (Sudo(user="al"), Pct(200))
    rank = Slurm(job=7, node="n1", in_job=True)
    node = _member(nodes, Found("n1", rank, {"RANK": "0"}))
    assert node.hops == (Sudo(user="al"), Pct(200), rank) and node.env["RANK"] == "0"
    assert remotekit.Target(node).chain == (
        "ssh al@pve1 -> sudo -> pct exec 200 -> srun --jobid 7 -w n1 -> /opt/venv/bin/python"
    )
    # a detached run's supervisor holds the rank's srun at the end of the via host's chain
    home = home_of(remotekit.Target(node))
    assert home.spec.hops == nodes.via.hops and home.spec.env["RANK"] == "0"


def test_an_unknown_group_lists_the_found_ones_too(tmp_path: Path) -> None:
    inv = write_inventory(
        tmp_path / "hosts.yaml", {"n": {}}, groups={"cts": {"pct_list": "n"}, "g": ["n"]}
    )
    with pytest.raises(remotekit.UnknownHost, match="known targets: group:g, group:cts"):
        inv.select(group="nope")


def test_the_docs_found_groups_are_what_they_say() -> None:
    """docs/hosts-yaml.md's found-groups block loads, and each group asks what it says."""
    text = (ROOT / "docs" / "hosts-yaml.md").read_text()
    block = text.split(
        "<!-- found groups: tests/found/test_found.py loads this block -->\n```yaml\n"
    )
    inv = remotekit.parse_inventory(block[1].split("```", 1)[0], "hosts-yaml.md")
    assert {g: f.query for g, f in inv.found.items()} == {
        "cts": "pct list on pve1 (name 'train-*', tag gpu)",
        "jobnodes": "the nodes of Slurm job 4242 on login1",
        "trainers": "kubectl get pods -n ml -l app=trainer on local",
    }
    assert inv.found["jobnodes"].member.venv == "/scratch/venv"
