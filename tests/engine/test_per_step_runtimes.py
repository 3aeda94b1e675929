"""The engine's guarantees against every real runtime on the one-process-per-step path
(hosts.yaml ``agent: false``): the runtime suite's tests (tests/engine/test_runtimes.py) that take
a target, or open one with ``agent``, run here again unchanged with ``agent`` False, over
[pct-over-lxc, lxc, podman, docker (engine=podman), slurm, kubectl (fake)] x [local, ssh].
"""

from __future__ import annotations

import pytest

from tests.harness import rerunnable, suite

test_runtimes = suite("test_runtimes")

#: Not re-run here, and why.
NOT_HERE = {
    "test_forward_reaches_a_port_in_the_targets_namespace": "a forward has channels of its own",
    "test_steps_share_one_agent": "about the agent; inside a container "
    "a per-step runner's parent is outside its pid namespace (pid 0), so nothing to compare",
}
globals().update(
    {
        name: fn
        for name, fn in rerunnable(test_runtimes, {"target", "agent"}).items()
        if name not in NOT_HERE
    }
)


@pytest.fixture
def agent() -> bool:
    return False
