"""Slurm: ``srun --jobid=ID --overlap --unbuffered [-w NODE] --export=NONE -- argv`` in a running job.

How users inspect a live training job on a cluster: the step runs inside the job's allocation,
beside the job's own processes. hosts.yaml::

    slurm: {job: 4242, node: node07, bin: /usr/bin/srun}     # node, bin optional
    slurm: {name: train-llama}                               # the RUNNING job of that name

A job given by name is looked up with ``squeue`` (beside srun) when the target opens.
``--export=NONE``: srun passes the caller's whole environment unless told not to; the step's
env comes from the payload. Then the task has no PATH, and slurmstepd only finds a program
by absolute path: a bare interpreter name (``python3``) is run through ``/usr/bin/env``, which
searches the system's default path. ``--unbuffered``: without it slurmstepd holds a task's
output until a newline, so a partial line (a progress bar) is late and the resident agent's
binary frames never arrive; with it the task's stdout is a pty in raw mode (bytes pass
unchanged: 10 MB of every byte value came back equal), stdin and stderr stay pipes. Each
write then goes to srun as a TCP segment of its own, and one behind another waits for its
ACK, which srun's end delays up to 40 ms: a warm agent step took ~45 ms here, ~8 ms through
LXC, until the agent's caller answered each piece of output (``Launch.nudge``); srun
relays that byte to slurmstepd, carrying the ACK. srun's words (slurm 22.05)::

    srun: error: Unable to confirm allocation for job 4242: Invalid job id specified     (exit 1)
    srun: error: Unable to confirm allocation for job 4242: Job is pending execution
    srun: error: Unable to confirm allocation for job 4242: Job/step already completing or completed
    srun: error: Slurm job 4242 has expired                              (finished)
    slurmstepd: error: execve(): python9: No such file or directory     (exit 2, the errno; 13)

Interactive (``remotekit shell``): ``--pty`` (task 0 on a pty; srun passes window size changes).
Detached (``run --detach``): a batch job, ``sbatch --parsable --wait`` from the login node, its
id recorded (:meth:`batch`); for a found group's rank (``in_job``), a task of the running job
that the run's supervisor holds on the login node (:meth:`held`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning
from remotekit.layers.core import (
    Batch,
    Failure,
    Fields,
    Hop,
    Launch,
    is_container_name,
    is_text,
    is_whole,
    tool_beside,
)

__all__ = ["Slurm"]

#: Where a bare interpreter is found when the task has no PATH (``--export=NONE``).
ENV = "/usr/bin/env"
#: The job states (squeue's, sacct's) of a job that has not ended: it waits, runs, is held,
#: suspended or being requeued (slurm 22.05, squeue(1) "JOB STATE CODES").
LIVE = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "STOPPED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
)


@dataclass(frozen=True)
class Slurm(Hop):
    """Run inside Slurm job ``job`` (or the running job named ``job_name``) with ``srun``."""

    job: int | None = None
    job_name: str | None = None
    node: str | None = None
    bin: str = "srun"
    #: A detached run is a task of this job (a found group's rank: :meth:`held`), not a
    #: batch job of its own (:meth:`batch`).
    in_job: bool = False

    key: ClassVar[str] = "slurm"
    kind: ClassVar[str] = "job"
    up: ClassVar[str] = "RUNNING"
    says: ClassVar[str] = "srun says:\n{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure("invalid job id", ContainerNotFound, "there is no {hop.what}; {said}"),
        Failure("pending execution", ContainerNotRunning, "{hop.what} is still pending; {said}"),
        Failure(
            "completing or completed|has expired",
            ContainerNotRunning,
            "{hop.what} has finished; {said}",
        ),
        Failure(
            "unable to confirm allocation|unable to create step",
            ContainerError,
            "srun cannot run in {hop.what}; {said}",
        ),
    )

    @classmethod
    def read(cls, fields: Fields) -> Slurm:
        fields.get("slurm", lambda v: isinstance(v, dict), "a mapping {job: ID | name: NAME}")
        sub = fields.mapping("slurm", ("job", "name", "node", "bin"))
        job = sub.get("job", lambda v: is_whole(v, 1), "a Slurm job id (a positive integer)")
        name = sub.get("name", lambda v: is_text(v) and "\n" not in v, "a job name")
        if (job is None) == (name is None):
            sub.fail("job" if job is not None else "name", "give exactly one of `job:` or `name:`")
        node = sub.get("node", is_container_name, "a node name")
        return cls(int(job) if job is not None else None, name, node, sub.text("bin") or "srun")

    @property
    def name(self) -> str:
        return str(self.job) if self.job is not None else str(self.job_name)

    @property
    def what(self) -> str:
        if self.job is not None and self.job_name:
            return f"job {self.job} ({self.job_name})"
        return f"job {self.job}" if self.job is not None else f"job named {self.job_name!r}"

    @property
    def label(self) -> str:
        job = f"--jobid {self.job}" if self.job is not None else f"--job-name {self.job_name}"
        return f"srun {job}" + (f" -w {self.node}" if self.node else "")

    def apply(self, launch: Launch) -> Launch:
        # output as written (the module doc says why), answered (Launch.nudge)
        return replace(self._srun(launch, "--unbuffered"), nudge=True)

    def interactive(self, launch: Launch) -> Launch:
        # --pty: task 0 gets a pty, and srun passes our window size changes on to it
        return self._srun(launch, "--pty")

    def _srun(self, launch: Launch, *flags: str) -> Launch:
        node = ("-w", self.node) if self.node else ()
        srun = (self.bin, f"--jobid={self.job or self.job_name}", "--overlap", *flags, *node)
        inner = launch
        if inner.argv and not inner.argv[0].startswith("/"):
            inner = replace(inner, argv=(ENV, *inner.argv))
        return self.wrap(inner, (*srun, "--export=NONE", "--"))

    # -- detached runs: batch jobs ----------------------------------------------------------

    def batch(self, argv: Sequence[str], name: str) -> Batch | None:
        """slurmstepd stops every process of a step when it ends, so a detached run is a job
        of its own: ``sbatch --parsable --wait`` from the login node (it prints the job id,
        then exits with the job's exit code), its output appended to the run's log by the
        job; the job is cancelled by its id, and ``squeue``/``sacct`` say its state when the
        run's supervisor is gone."""
        if self.in_job:
            return None
        sbatch, scancel = tool_beside(self.bin, "sbatch"), tool_beside(self.bin, "scancel")
        node = (f"--nodelist={self.node}",) if self.node else ()
        submit = (sbatch, "--parsable", "--wait", "--open-mode=append", f"--job-name={name}")
        return Batch(
            submit=(*submit, *node, "--wrap", shlex.join(argv)),
            log_option="--output=",
            cancel=(scancel,),
            # --states=all: an ended job too, while slurmctld keeps it (MinJobAge, 300 s)
            queue=(
                tool_beside(self.bin, "squeue"),
                "--noheader",
                "--states=all",
                "--Format=State:40,exit_code:20,EndTime:40",
                "--jobs",
            ),
            forgotten="Invalid job id specified",
            accounting=(
                tool_beside(self.bin, "sacct"),
                "--noheader",
                "--parsable2",
                "--allocations",
                "--format=State,ExitCode,End",
                "--jobs",
            ),
            live=LIVE,
            cancelled=("CANCELLED",),
        )

    def held(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """A found group's rank (``in_job``): one task in the running job's allocation on
        this node, ``srun --overlap -w NODE --nodes=1 --ntasks=1``, held by the run's
        supervisor on the login node; killing srun ends the step (slurm 22.05: SIGKILL to the
        task within ~0.5 s). ``--export=ALL``: the task gets the run's environment (the
        rendezvous variables, hosts.yaml's env) as the supervisor sets it for srun."""
        if not self.in_job:
            return None
        node = ("-w", self.node) if self.node else ()
        srun = (self.bin, f"--jobid={self.job or self.job_name}", "--overlap", "--unbuffered")
        return (*srun, *node, "--nodes=1", "--ntasks=1", "--export=ALL", "--", *argv)

    # -- the job by name -------------------------------------------------------------------

    def lookup(self) -> tuple[str, ...] | None:
        if self.job is not None:
            return None
        squeue = tool_beside(self.bin, "squeue")
        return (squeue, "--noheader", f"--name={self.job_name}", "--format=%i %T")

    def resolved(self, code: int | None, text: str, host: str) -> Slurm:
        where: dict[str, Any] = dict(host=host, step="open", container=self.name)
        if code != 0:
            raise ContainerError(
                f"squeue could not look up {self.what} (exit {code}):\n{self.quote(text)}", **where
            )
        jobs = [line.split() for line in text.splitlines() if len(line.split()) == 2]
        running = [int(j) for j, state in jobs if state == "RUNNING" and j.isdigit()]
        if len(running) == 1:
            return replace(self, job=running[0])
        if running:
            ids = ", ".join(map(str, running))
            raise ContainerError(
                f"several running jobs are named {self.job_name!r} ({ids}); "
                f"set `job:` in hosts.yaml",
                **where,
            )
        if jobs:
            states = ", ".join(f"{j} {s}" for j, s in jobs)
            raise ContainerNotRunning(
                f"no RUNNING job named {self.job_name!r}; squeue shows: {states}", **where
            )
        raise ContainerNotFound(f"no job named {self.job_name!r} in squeue", **where)

    # -- ping and failures -----------------------------------------------------------------

    def probe(self) -> tuple[str, ...]:
        squeue = tool_beside(self.bin, "squeue")
        return (squeue, "--noheader", f"--jobs={self.name}", "--format=%T")

    def verdict(self, code: int | None, text: str) -> tuple[bool, str]:
        up, shown = super().verdict(code, text)
        if code == 0 and not text.strip():
            shown = f"{self.what} is not in squeue (finished long ago?)"
        return up, shown

    def exec_failed(self, code: int | None, text: str) -> bool:
        # slurmstepd returns the errno of execve (2 ENOENT, 13 EACCES), not 127/126.
        return code in (2, 13) and "execve" in text
