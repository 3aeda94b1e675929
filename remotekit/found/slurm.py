"""``slurm_job: ID``: every node of a running Slurm job, each entered by ``srun -w NODE``.

hosts.yaml (``via``: the declared login node, default ``local``; ``bin``: srun, with squeue
and scontrol beside it)::

    groups:
      jobnodes: {slurm_job: 4242, via: login1, venv: /scratch/venv}

On the via host: ``squeue --noheader --jobs=ID --format=%T %N`` prints the job's state and
its node list as Slurm writes it (``RUNNING node[01-04]``; slurm 22.05, squeue(1)), or fails
with ``slurm_load_jobs error: Invalid job id specified`` (exit 1) for a job it does not know;
then ``scontrol show hostnames LIST`` prints one node a line. Each member is the job's
allocation on that node (the ``slurm`` hop with ``node``: ``srun --jobid=ID --overlap -w
NODE``), named by the node: ``jobnodes/node01``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from remotekit.found.core import Ask, Finder, QueryFailed, refused
from remotekit.layers.core import Fields, Hop, is_text, is_whole, tool_beside
from remotekit.layers.slurm import Slurm

__all__ = ["SlurmJob"]


@dataclass(frozen=True)
class SlurmJob(Finder):
    """The nodes of running Slurm job ``job``, asked on ``via`` (squeue, scontrol)."""

    job: int
    via: str = "local"
    bin: str = "srun"

    key: ClassVar[str] = "slurm_job"
    options: ClassVar[tuple[str, ...]] = ("via", "bin")
    nobody: ClassVar[str] = "the job has no node"

    @classmethod
    def read(cls, fields: Fields) -> SlurmJob:
        job = fields.get(
            "slurm_job", lambda v: is_whole(v, 1), "a Slurm job id (a positive integer)"
        )
        via = fields.get("via", is_text, "a declared host (the login node)") or "local"
        return cls(int(job), via, fields.text("bin") or "srun")

    @property
    def query(self) -> str:
        return f"the nodes of Slurm job {self.job} on {self.via}"

    def find(self, ask: Ask) -> list[tuple[str, Hop]]:
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
        return [(node, Slurm(job=self.job, node=node, bin=self.bin)) for node in said.out.split()]
