"""The engine's guarantees on the one-process-per-step path (hosts.yaml ``agent: false``).

The engine's own suites run on the resident agent, the default. Every test of theirs that
takes a target from a fixture (``local``, ``target``, ``ct``, ``there``) or opens one with
``agent`` runs here again, unchanged, with ``agent`` False: on this machine and through the
real sshd (ssh -> fake pct exec -> a real LXC container -> venv). The runtimes' suite does the
same in tests/test_per_step_runtimes.py.
"""

from __future__ import annotations

import pytest

from tests import test_hostile_steps, test_ssh, test_target_local
from tests.harness import rerunnable
from tests.test_hostile_steps import there  # noqa: F401  (a fixture the re-run tests take)

FIXTURES = {"local", "target", "ct", "there", "agent"}
for _module in (test_hostile_steps, test_target_local, test_ssh):
    globals().update(rerunnable(_module, FIXTURES))


@pytest.fixture
def agent() -> bool:
    return False


def test_the_re_run_covers_each_suite() -> None:
    """A check of the selection itself: it finds tests in every suite, not none."""
    for module in (test_hostile_steps, test_target_local, test_ssh):
        assert len(rerunnable(module, FIXTURES)) >= 10, module.__name__
