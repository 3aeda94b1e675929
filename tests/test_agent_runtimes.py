"""The engine's guarantees against every real runtime, with the resident agent on: the
runtime suite's own tests (tests/test_runtimes.py), run here unchanged on targets opened with
``agent=True`` over [pct-over-lxc, lxc, podman, docker (engine=podman), slurm, kubectl (fake)]
x [local, ssh]; and the agent's stopped/missing container, job or pod is the hop's own error.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import remotekit
from tests.test_runtimes import (  # noqa: F401
    HOPS,
    RUNTIMES,
    World,
    held,
    test_bad_input_and_exit_codes,
    test_nasty_argv_and_env_round_trip,
    test_run_python_is_byte_exact,
    test_timeout_leaves_no_process_inside,
    worlds,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=[(r, h) for r in RUNTIMES for h in HOPS], ids="-".join)
def target(
    request: pytest.FixtureRequest,
    worlds: Callable[[str], World],  # noqa: F811
    held: dict[tuple[str, ...], remotekit.Target],  # noqa: F811
) -> remotekit.Target:
    """A warm agent target on each runtime (held beside the suite's own, apart by key)."""
    runtime, hop = request.param
    key = (runtime, hop, "agent")
    if key not in held:
        world = worlds(runtime)
        if hop == "ssh":
            world.need_ssh()
        held[key] = world.inv.target(hop, agent=True)
    return held[key]


def test_steps_share_one_agent(target: remotekit.Target) -> None:
    # In a Slurm job too: slurmstepd holds a task's output until a newline unless srun has
    # --unbuffered, and the agent's frames are binary, so its first frame never came back.
    code = "import os; print(open('/proc/%d/stat' % os.getppid()).read().rsplit(')')[1].split()[1])"
    argv = ["python", "-c", code]  # the runner's parent (some images have no awk)
    assert target.run(argv).stdout == target.run(argv).stdout


@pytest.mark.parametrize("rt", RUNTIMES)
def test_stopped_or_missing_is_the_hops_own_error_with_the_agent(
    rt: str,
    worlds: Callable[[str], World],  # noqa: F811
) -> None:
    world = worlds(rt)
    for bad in world.broken:
        if bad.host.endswith("-ssh"):
            world.need_ssh()
        with (
            world.inv.target(bad.host, agent=True) as t,
            pytest.raises(remotekit.RemotekitError) as info,
        ):
            t.run(["true"], timeout=60)
        assert type(info.value).__name__ == bad.error, (bad.host, info.value)
        assert bad.says in str(info.value), (bad.host, str(info.value))
