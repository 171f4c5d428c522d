"""Every molecule scenario under extensions/molecule, run as a user runs it.

Each scenario creates its own sandbox (sshd in a network namespace, PostgreSQL, a podman
backend), converges the restart role or deploy.yml against it, verifies with docker and psql
themselves, and destroys it.
"""

import subprocess
import time
from pathlib import Path

import pytest

from sandbox.ansible_env import ansible_env
from tests.support.ansible_run import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.molecule]

SCENARIOS = sorted(
    path.parent.name
    for path in (REPO / "extensions" / "molecule").glob("*/molecule.yml")
    if path.parent.name != "resources"
)


def test_the_scenarios_are_found():
    assert {"default", "restart_defer", "restart_wait", "restart_force"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, tmp_path: Path, record_property) -> None:
    started = time.monotonic()
    done = subprocess.run(
        ["molecule", "test", "-s", scenario],
        cwd=REPO,
        env=ansible_env(tmp_path, NO_COLOR="1", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    record_property("wall_s", round(time.monotonic() - started, 1))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
