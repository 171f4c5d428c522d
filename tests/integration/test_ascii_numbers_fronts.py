"""ASCII digits only, through the fronts that read a value themselves: a task timeout
looked up in other digits fails the lookup (the CLI, the env_file source every front
shares), and Ansible's own float() never sees one (lease_guard, run by ansible-playbook).
Both directions: the same value in ASCII digits is judged, and the live claim defers."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from sandbox.runs_table import create_runs_table, insert_runs
from sandbox.subprocess_env import clean_env
from tests.integration.test_ansible_modules import run_direct

pytestmark = pytest.mark.integration

FULL_WIDTH = "\uff13\uff16\uff10\uff10"  # 3600


@pytest.fixture
def live(db):
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", datetime.now(UTC) - timedelta(minutes=10), None)])
    return db


def check_with_env_file(db, tmp_path, value):
    env_file = tmp_path / "app.env"
    env_file.write_text(f"APP_TASK_TIMEOUT_S={value}\n", encoding="utf-8")
    config = tmp_path / "lg.yaml"
    config.write_text(
        f"task_timeout: {{source: env_file, path: {env_file}}}\nruntime: {{source: none}}\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", "check", "--dsn", db.dsn, "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


def test_a_looked_up_timeout_in_other_digits_fails_the_lookup_unechoed(live, tmp_path):
    done = check_with_env_file(live, tmp_path, FULL_WIDTH)
    assert done.returncode == 1, done.stderr
    assert "APP_TASK_TIMEOUT_S is not a number of seconds" in done.stderr
    assert FULL_WIDTH not in done.stdout + done.stderr
    assert check_with_env_file(live, tmp_path, "3600").returncode == 75


@pytest.mark.slow
def test_ansible_refuses_other_digits_before_its_own_float_reads_them(live, tmp_path):
    verdict = run_direct(live, tmp_path, dsn=live.dsn, task_timeout_s=FULL_WIDTH)
    assert verdict.get("failed") and verdict["decision"] == "failed"
    assert "task_timeout_s must be a number written in ASCII digits" in verdict["msg"]
    assert FULL_WIDTH not in str(verdict)
    verdict = run_direct(live, tmp_path, dsn=live.dsn, task_timeout_s="3600")
    assert verdict.get("decision") == "defer", verdict.get("msg")
