"""``slurm_job: ID``: every node of a running Slurm job, each entered by ``srun -w NODE``.

hosts.yaml (``via``: the declared login node, default ``local``; ``bin``: srun, with squeue
and scontrol beside it; ``ranks_per_node`` (default 1) and ``master_port`` (default 29500)
for the rendezvous variables)::

    groups:
      jobnodes: {slurm_job: 4242, via: login1, venv: /scratch/venv}

On the via host: ``squeue --noheader --jobs=ID --format=%T %N`` prints the job's state and
its node list as Slurm writes it (``RUNNING node[01-04]``; slurm 22.05, squeue(1)), or fails
with ``slurm_load_jobs error: Invalid job id specified`` (exit 1) for a job it does not know;
then ``scontrol show hostnames LIST`` prints one node a line, and ``scontrol -o show node
FIRST`` the first node's ``NodeAddr=`` (where the rendezvous listens). Each member is the
job's allocation on that node (the ``slurm`` hop with ``node``: ``srun --jobid=ID --overlap
-w NODE``), named by the node: ``jobnodes/node01`` (with ``ranks_per_node: K`` > 1, K members
a node: ``jobnodes/node01.0`` ... ``.K-1``).

Each member is a rank, and its steps get torch.distributed's rendezvous variables (env://,
torchrun's names): ``MASTER_ADDR`` (the first node's address), ``MASTER_PORT``,
``WORLD_SIZE`` (nodes x K), ``RANK``, ``NODE_RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``.
A detached run on a member (``run --detach --group jobnodes``: one per rank) is a task of the
running job on its node, which the run's supervisor on the login node holds (``Slurm.held``):
``runs``, ``logs`` and ``stop`` work per rank, and over the group for all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from remotekit.found.core import Ask, Finder, Found, QueryFailed, refused
from remotekit.layers.core import Fields, is_text, is_whole, tool_beside
from remotekit.layers.slurm import Slurm

__all__ = ["SlurmJob"]

#: A node's address as scontrol prints it (a host name or an IPv4/IPv6 address).
ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}")
#: Ranks one node may have.
MAX_RANKS_PER_NODE = 256


@dataclass(frozen=True)
class SlurmJob(Finder):
    """The nodes of running Slurm job ``job``, asked on ``via`` (squeue, scontrol)."""

    job: int
    via: str = "local"
    bin: str = "srun"
    ranks_per_node: int = 1
    master_port: int = 29500

    key: ClassVar[str] = "slurm_job"
    options: ClassVar[tuple[str, ...]] = ("via", "bin", "ranks_per_node", "master_port")
    nobody: ClassVar[str] = "the job has no node"

    @classmethod
    def read(cls, fields: Fields) -> SlurmJob:
        job = fields.get(
            "slurm_job", lambda v: is_whole(v, 1), "a Slurm job id (a positive integer)"
        )
        via = fields.get("via", is_text, "a declared host (the login node)") or "local"
        ranks = fields.get(
            "ranks_per_node",
            lambda v: is_whole(v, 1, MAX_RANKS_PER_NODE),
            f"a count of ranks a node, 1..{MAX_RANKS_PER_NODE}",
        )
        port = fields.get("master_port", lambda v: is_whole(v, 1, 65535), "a port 1-65535")
        srun = fields.text("bin") or "srun"
        return cls(int(job), via, srun, int(ranks or 1), int(port or 29500))

    @property
    def query(self) -> str:
        return f"the nodes of Slurm job {self.job} on {self.via}"

    def find(self, ask: Ask) -> list[Found]:
        nodes = self.nodes(ask)
        if not nodes:
            return []
        k = self.ranks_per_node
        rendezvous = {
            "MASTER_ADDR": self.address(ask, nodes[0]),
            "MASTER_PORT": str(self.master_port),
            "WORLD_SIZE": str(len(nodes) * k),
            "LOCAL_WORLD_SIZE": str(k),
        }
        return [
            Found(
                node if k == 1 else f"{node}.{local}",
                Slurm(job=self.job, node=node, bin=self.bin, in_job=True),
                {
                    **rendezvous,
                    "RANK": str(i * k + local),
                    "NODE_RANK": str(i),
                    "LOCAL_RANK": str(local),
                },
            )
            for i, node in enumerate(nodes)
            for local in range(k)
        ]

    def nodes(self, ask: Ask) -> list[str]:
        """The running job's nodes (squeue, then scontrol show hostnames)."""
        squeue = tool_beside(self.bin, "squeue")
        said = ask((squeue, "--noheader", f"--jobs={self.job}", "--format=%T %N"))
        if said.code != 0:
            if "invalid job id" in said.err.lower():
                raise QueryFailed(
                    f"squeue does not know job {self.job} (it never ran, or ended long "
                    f"ago); it says:\n{said.words}"
                )
            raise refused("squeue", said)
        lines = [line.split() for line in said.out.splitlines() if line.strip()]
        if len(lines) != 1:
            raise QueryFailed(
                f"squeue lists {len(lines)} jobs for {self.job} (an array or a heterogeneous "
                f"job?): name one job id; it says:\n{said.words}"
            )
        state, nodes = lines[0][0], lines[0][1:]
        if state != "RUNNING":
            raise QueryFailed(f"job {self.job} is {state[:40]}, not RUNNING")
        if len(nodes) != 1:
            raise QueryFailed(f"squeue gave job {self.job} no node list; it says:\n{said.words}")
        said = ask((tool_beside(self.bin, "scontrol"), "show", "hostnames", nodes[0]))
        if said.code != 0:
            raise refused("scontrol show hostnames", said)
        return said.out.split()

    def address(self, ask: Ask, node: str) -> str:
        """``node``'s ``NodeAddr`` (``scontrol -o show node``): where rank 0 listens."""
        said = ask((tool_beside(self.bin, "scontrol"), "-o", "show", "node", node))
        if said.code != 0:
            raise refused(f"scontrol show node {node}", said)
        found = re.search(r"(?:^|\s)NodeAddr=(\S+)", said.out)
        if found is None or not ADDRESS.fullmatch(found.group(1)):
            raise QueryFailed(f"scontrol gave node {node!r} no address it can use (NodeAddr=)")
        return found.group(1)
