"""playbooks/drain.yml: shared intake paused once for the fleet, and signals to ansible-playbook.

Hosts use a local connection with fixed lookups (each host its own facts), so the fleet rule
is what decides; the database is the session cluster, reached directly.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from sandbox.ansible_env import ansible_env
from sandbox.runs_table import create_runs_table
from tests.faults.conftest import (
    job_active,
    terminate,
    unschedule_with_records,
)
from tests.support.ansible_run import REPO, write_inventory
from tests.support.process_lines import Lines
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]


def host_vars(started_ago: timedelta) -> dict:
    started = (datetime.now(UTC) - started_ago).isoformat()
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3",
        "leaseguard_task_timeout": {"source": "fixed", "value_s": 3600},
        "leaseguard_runtime": {"source": "fixed", "started_at": started},
    }


@pytest.fixture
def fleet(db, tmp_path):
    """app1 restarted 10 minutes ago, app2 up for a day; job claim_<db> is the intake."""
    with db.connect() as conn:
        create_runs_table(conn)
    job = f"claim_{db.name}"
    db.cluster.psql(
        f"SELECT cron.schedule_in_database('{job}', '* * * * *', 'SELECT 1', '{db.name}')"
    )
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": host_vars(timedelta(minutes=10)), "app2": host_vars(timedelta(days=1))},
        leaseguard_db_host=db.cluster.host,
        leaseguard_db_port=db.cluster.port,
        leaseguard_db_name=db.name,
        leaseguard_db_user="postgres",
        leaseguard_cron_database="postgres",
        leaseguard_drain_poll_s=0.2,
        leaseguard_pause_cron_jobs=[job],
    )
    yield inventory, job
    unschedule_with_records(db.cluster, job)


def claim(db, row_id, age):
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) "
            "VALUES (%s, 'running', now() - %s::interval)",
            (row_id, age),
        )


def finish(db, row_id):
    with db.connect() as conn:
        conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = %s", (row_id,))


def active(db, job):
    return job_active(db.cluster, job)


def start_playbook(inventory, tmp_path, **extra_vars):
    argv = ["ansible-playbook", "-i", str(inventory), "leaseguard.deploy.drain"]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**ansible_env(tmp_path), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a suite run under nohup would hand SIGHUP down ignored.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    return proc, Lines(proc.stdout), Lines(proc.stderr)


def test_shared_intake_stays_paused_until_the_claim_live_on_the_older_host_ends(
    db, fleet, tmp_path
):
    inventory, job = fleet
    claim(db, 1, "1 hour")  # older than app1's runtime: can only be running on app2
    claim(db, 2, "0 seconds")
    proc, out, _ = start_playbook(inventory, tmp_path)
    try:
        assert out.wait_for("drain host=fleet start live=2"), "".join(out.lines)[-3000:]
        assert active(db, job) == "f"
        finish(db, 2)
        assert out.wait_for("live 2 -> 1 ended=2"), "".join(out.lines)[-3000:]
        # app1 alone would be drained now; intake is the fleet's, so it stays paused.
        assert active(db, job) == "f"
        finish(db, 1)
        proc.wait(timeout=120)
    finally:
        terminate(proc)
    stdout = out.text()
    assert proc.returncode == 0, stdout[-3000:]
    assert stdout.count(f"intake paused pg_cron job={job}") == 1
    assert stdout.count(f"intake resumed pg_cron job={job}") == 1
    assert active(db, job) == "t"


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
    ids=["sigint", "sigterm", "sighup-terminal-closed"],
)
def test_a_signal_to_ansible_playbook_leaves_intake_active_and_says_so(db, fleet, tmp_path, signum):
    inventory, job = fleet
    claim(db, 1, "0 seconds")
    proc, _, err = start_playbook(inventory, tmp_path)
    try:
        assert wait_until(lambda: active(db, job) == "f")
        proc.send_signal(signum)
        proc.wait(timeout=60)
        assert wait_until(lambda: active(db, job) == "t", timeout_s=60)
    finally:
        terminate(proc)
    assert proc.returncode != 0
    stderr = err.text()
    assert "drain interrupted by a signal; intake was resumed" in stderr, stderr[-3000:]
    assert job in stderr


def test_a_fleet_judgment_that_fails_names_its_cause_once_and_no_host_fails_on_a_template(
    db, fleet, tmp_path
):
    inventory, job = fleet
    claim(db, 1, "0 seconds")
    proc, out, err = start_playbook(inventory, tmp_path, leaseguard_pause_cron_jobs=["no_such"])
    proc.wait(timeout=120)
    stdout, stderr = out.text(), err.text()
    assert proc.returncode == 2, stdout[-3000:]
    assert "pg_cron job(s) not found: no_such" in stdout
    assert "app2 was not judged: the fleet's one judgment failed" in stdout
    assert "HostVarsVars" not in stdout + stderr and "has no attribute" not in stdout + stderr
    assert active(db, job) == "t"
