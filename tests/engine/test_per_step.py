"""The engine's guarantees on the one-process-per-step path (hosts.yaml ``agent: false``).

The engine's own suites run on the resident agent, the default. Every test of theirs that
takes a target from a fixture (``local``, ``target``, ``ct``, ``there``) or opens one with
``agent``, itself or through a fixture of its module's own (``where``, ``fleet_hosts``,
``hosts``, ``notorch``, ``slurm`` ...), runs here again, unchanged, with ``agent`` False: on
this machine and through the real sshd (ssh -> fake pct exec -> a real LXC container -> venv).
NOT_HERE names what is left out, and why. The runtimes' suite does the same in
tests/engine/test_per_step_runtimes.py.
"""

from __future__ import annotations

import pytest

from tests.harness import rerunnable, suite

SUITES = tuple(
    suite(name)
    for name in (
        "test_hostile_steps",
        "test_target_local",
        "test_ssh",
        "test_sync",
        "test_runs",
        "test_fleet",
        "test_watch",
        "test_system_api",
        "test_hostile_secrets",
        "test_hostile_render",
        "test_found",
    )
)
FIXTURES = {"local", "target", "ct", "there", "agent"}
#: Not re-run here, and why (CI time: what they check is not the step path's).
NOT_HERE = {
    "test_on_slurm_a_job_nobody_knows_is_lost_and_a_silent_scheduler_leaves_it_running": (
        "a minute of squeue against a missing slurmctld: the scheduler's answers, read by the "
        "same steps as in the slurm run re-run here"
    ),
    "test_on_slurm_a_run_whose_supervisor_is_gone_is_what_its_job_is": "the scheduler's answers",
    "test_on_slurm_stop_without_the_supervisor_cancels_the_job": "the scheduler's answers",
    "test_on_slurm_stop_cancels_the_job_by_its_id": "the supervisor's scancel",
}

_seen: dict[str, object] = {}
for _module in SUITES:
    for _name, _fn in rerunnable(_module, FIXTURES).items():
        assert _seen.setdefault(_name, _fn) is _fn, f"two suites define {_name}"
globals().update({name: fn for name, fn in _seen.items() if name not in NOT_HERE})


@pytest.fixture
def agent() -> bool:
    return False


def test_the_re_run_covers_each_suite() -> None:
    """A check of the selection itself: it finds tests in every suite, not none."""
    for module in SUITES:
        tests = [name for name in rerunnable(module, FIXTURES) if name.startswith("test_")]
        assert len(tests) >= (7 if module is suite("test_hostile_secrets") else 10), module.__name__
    assert set(NOT_HERE) <= set(_seen), "NOT_HERE names a test no suite has"
