"""playbooks/drain.yml run by its collection name, against a real host and database."""

import json
import sys
import threading
import time
from datetime import UTC, datetime

import pytest

from leaseguard.adapters.pauses import hold_jobs
from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.ansible_run import FIXED_FACTS, db_vars, run_playbook, write_inventory
from tests.support.busy_intake import active, cron_conn, intake_job

CRON_DB_VAR = "leaseguard_cron_database"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def drain(tmp_path, app_host_pg, app_db, backend):
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", datetime.now(UTC), None), (2, "open", None, None)])
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": app_host_pg.ansible_host_vars()},
        leaseguard_db_name=app_db.name,
        leaseguard_db_user=GUARD_PW_ROLE,
        leaseguard_drain_poll_s=0.5,
    )

    def run(**extra_vars):
        return run_playbook(
            "leaseguard.deploy.drain",
            inventory,
            tmp_path,
            extra_vars=extra_vars,
            env={"PGPASSWORD": GUARD_PW_PASSWORD},
        )

    return run


def finish_claim_once_judged_live(app_db, status_file):
    """End the claim once the drain's status file shows it judged live: the drain holds
    intake from before its first verdict, so the claim must outlive that verdict."""

    def judged_live():
        try:
            return json.loads(status_file.read_text())["counts"]["live"] > 0
        except (OSError, ValueError, KeyError):  # not written yet, or mid-rewrite
            return False

    def finish():
        deadline = time.monotonic() + 120
        while not judged_live():
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        with app_db.connect(socket=True) as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")

    worker = threading.Thread(target=finish)
    worker.start()
    return worker


def test_drain_waits_for_the_claim_to_end_and_pauses_intake_meanwhile(drain, app_db, tmp_path):
    log = tmp_path / "intake.log"
    status_file = tmp_path / "drain-status.json"
    worker = finish_claim_once_judged_live(app_db, status_file)
    run = drain(
        leaseguard_drain_status_file=str(status_file),
        leaseguard_pause_command=["sh", "-c", f"echo paused >> {log}"],
        leaseguard_resume_command=["sh", "-c", f"echo resumed >> {log}"],
    )
    worker.join()
    assert run.returncode == 0, run.stdout[-3000:]
    verdict = run.result("Judge the claims by the system's own lease", "app1")
    assert verdict["drain"]["drained"] is True
    assert verdict["drain"]["counters"]["leases_ended"] == 1
    assert any("drained" in line for line in verdict["drain"]["events"])
    assert log.read_text().split() == ["paused", "resumed"]  # the host shares this filesystem


def test_drain_fails_the_host_when_the_deadline_passes_with_live_claims(drain):
    run = drain(leaseguard_drain_deadline_s=1.5)
    assert run.returncode == 2
    failed = run.result("Fail the hosts where live leases remain", "app1")
    assert "still has 1 live claim(s)" in failed["msg"]
    assert GUARD_PW_PASSWORD not in run.stdout + run.stderr


def test_shared_pg_cron_intake_and_each_hosts_pause_command_are_all_held(db, tmp_path):
    """drain.yml with pg_cron jobs (the fleet's intake) AND a pause command per host: every
    host's own intake is held around the fleet's drain, not only the run_once host's."""
    log = tmp_path / "intake.log"
    hosts = {
        host: {
            "ansible_connection": "local",
            "ansible_python_interpreter": "/usr/bin/python3",
            "leaseguard_pause_command": ["sh", "-c", f"echo paused-{host} >> {log}"],
            "leaseguard_resume_command": ["sh", "-c", f"echo resumed-{host} >> {log}"],
        }
        for host in ("app1", "app2")
    }
    with intake_job(db) as job:
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            hosts,
            **db_vars(db),
            **FIXED_FACTS,
            leaseguard_drain_poll_s=0.2,
            leaseguard_pause_cron_jobs=[job],
            leaseguard_cron_database="postgres",
        )
        run = run_playbook("leaseguard.deploy.drain", inventory, tmp_path)
        assert run.returncode == 0, run.stdout[-4000:]
        assert active(db, job)
    lines = log.read_text().split()
    assert sorted(lines[:2]) == ["paused-app1", "paused-app2"], lines
    assert sorted(lines[2:]) == ["resumed-app1", "resumed-app2"], lines


def test_resume_fails_on_a_mistyped_variable_naming_it_then_resumes_the_recorded_hold(db, tmp_path):
    """resume.yml checks the leaseguard_* variables first, as deploy.yml and drain.yml do: a
    mistyped leaseguard_cron_database failed on a database error that named no variable."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    with intake_job(db) as job, cron_conn(db) as conn:
        hold_jobs(conn, [job], "drain pid 1 on here")
        for typed, cron_database in (("leaseguard_cron_databse", False), (CRON_DB_VAR, True)):
            inventory = write_inventory(
                tmp_path / "inventory.yml", {"app1": local}, **db_vars(db), **{typed: "postgres"}
            )
            run = run_playbook("leaseguard.deploy.resume", inventory, tmp_path)
            if not cron_database:
                assert run.returncode == 2, run.stdout[-3000:]
                refused = run.result("Check the leaseguard variables", "app1")
                assert (
                    "leaseguard_cron_databse (did you mean leaseguard_cron_database?)"
                    in (refused["msg"])
                )
                assert not active(db, job)
            else:
                assert run.returncode == 0, run.stdout[-3000:]
                assert run.result("Resume the recorded pg_cron jobs", "app1")["resumed"] == [job]
                assert active(db, job)
