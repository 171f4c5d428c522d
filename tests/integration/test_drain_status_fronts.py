"""The drain's status and metrics files through the other fronts: `fab drain` over real SSH
(sshd in a network namespace, PostgreSQL behind the tunnel) and a real `ansible-playbook
playbooks/drain.yml`, each read mid-drain by `leaseguard status PATH --json` running as its
own process, and the metrics parsed with prometheus_client's text parser.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from sandbox.ansible_env import ansible_env
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.faults.conftest import job_active, terminate, unschedule_with_records
from tests.integration.test_drain_status_files import polls, samples, status
from tests.support.ansible_run import REPO, run_playbook, write_inventory
from tests.support.process_lines import Lines
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def claim(conn, row_id, age="0 seconds"):
    conn.execute(
        "INSERT INTO execution_runs (id, status, claimed_at) "
        "VALUES (%s, 'running', now() - %s::interval)",
        (row_id, age),
    )


def finish(conn, row_id):
    conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = %s", (row_id,))


# --- fab drain ----------------------------------------------------------------------------


@pytest.fixture
def busy_host_db(app_db):
    """app_db with one live claim (id 1) and one queued row, behind app_host_pg's sshd."""
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
        claim(conn, 1)
        conn.execute("INSERT INTO execution_runs (id, status) VALUES (2, 'open')")
    return app_db


def start_fab_drain(host, db, tmp_path, *args, also=None):
    config = tmp_path / "fabric.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leaseguard": {
                    "connection": {
                        "dsn": f"dbname={db.name} user=postgres",
                        "known_hosts": str(host.known_hosts_path),
                    },
                    "task_timeout": {"source": "fixed", "value_s": 3600},
                    "runtime": {"source": "none"},
                }
            }
        )
    )
    argv = [sys.executable, "-m", "fabric", "-f", str(config), "-i", str(host.client_key_path)]
    targets = ",".join([f"root@{host.addr}", *([also] if also else [])])
    return subprocess.Popen(
        [*argv, "-H", targets, "drain", "--poll-s", "0.2", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def test_fab_drain_is_watched_from_another_process_through_both_files(
    app_host_pg, busy_host_db, tmp_path
):
    status_file, metrics_file = tmp_path / "drain.json", tmp_path / "drain.prom"
    proc = start_fab_drain(
        app_host_pg,
        busy_host_db,
        tmp_path,
        "--status-file",
        str(status_file),
        "--metrics-file",
        str(metrics_file),
    )
    host = app_host_pg.addr  # the snapshot names the host, not the SSH user
    label = (("host", host),)
    try:
        assert wait_until(lambda: polls(status_file) >= 2)
        code, first = status(status_file)
        assert code == 0 and first["available"] is True, first
        assert (first["state"], first["scope"], first["hosts"]) == (
            "running",
            "process_lifetime",
            [host],
        )
        assert first["decision"] == "defer"
        assert first["counts"] == {"live": 1, "stale": 0, "orphaned": 0, "queued": 1}
        assert 0 < first["wait_upper_bound_s"] <= first["deadline_s"] <= 7200
        assert wait_until(lambda: polls(status_file) >= first["counters"]["polls"] + 2)
        code, second = status(status_file)
        assert code == 0 and second["state"] == "running"
        assert second["counters"]["idle_polls"] > first["counters"]["idle_polls"]
        assert second["elapsed_s"] > first["elapsed_s"]
        running = samples(metrics_file)
        assert running[("leaseguard_drain_running", label)] == 1
        assert running[("leaseguard_drain_exit_status", label)] == -1
        assert running[("leaseguard_drain_claims", (("class", "live"), *label))] == 1
        assert running[("leaseguard_drain_polls_total", label)] >= 2
        with busy_host_db.connect(socket=True) as conn:
            finish(conn, 1)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        terminate(proc)
    assert proc.returncode == 0, stdout + stderr
    code, final = status(status_file)
    assert code == 0, final
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "proceed", 0)
    assert final["counters"]["leases_ended"] == 1
    assert final["counters"]["polls"] > second["counters"]["polls"]
    done = samples(metrics_file)
    assert done[("leaseguard_drain_running", label)] == 0
    assert done[("leaseguard_drain_exit_status", label)] == 0
    assert done[("leaseguard_drain_leases_ended_total", label)] == 1
    assert done[("leaseguard_drain_polls_total", label)] == final["counters"]["polls"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drain.json", "drain.prom", "fabric.yaml"]


@pytest.mark.parametrize("pause", [(), ("--pause-cron-job", "claim")], ids=["each", "fleet"])
def test_a_fab_drain_with_a_host_that_never_opened_says_finished_failed(
    app_host_pg, busy_host_db, tmp_path, pause
):
    # A host that failed to open was missing from the file: it said finished/proceed/0 while
    # fab exited 1, or (pg_cron intake, judged as one fleet) `running` for ever.
    with busy_host_db.connect(socket=True) as conn:
        finish(conn, 1)
    status_file = tmp_path / "drain.json"
    args = ("--status-file", str(status_file), *pause)
    nowhere = "root@127.0.0.1:1"  # nothing listens on port 1
    proc = start_fab_drain(app_host_pg, busy_host_db, tmp_path, *args, also=nowhere)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stdout + stderr
    code, final = status(status_file)
    assert code == 0, final
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "failed", 1)
    assert "root@127.0.0.1:1" in final["hosts"]


# --- ansible-playbook playbooks/drain.yml -------------------------------------------------


def host_vars(started_ago: timedelta) -> dict:
    started = (datetime.now(UTC) - started_ago).isoformat()
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3",
        "leaseguard_task_timeout": {"source": "fixed", "value_s": 3600},
        "leaseguard_runtime": {"source": "fixed", "started_at": started},
    }


@pytest.fixture
def two_hosts(db, tmp_path):
    """Inventory app1, app2 (local connections, fixed facts) sharing db's work table."""
    with db.connect() as conn:
        create_runs_table(conn)
    return write_inventory(
        tmp_path / "inventory.yml",
        {"app1": host_vars(timedelta(minutes=10)), "app2": host_vars(timedelta(days=1))},
        leaseguard_db_host=db.cluster.host,
        leaseguard_db_port=db.cluster.port,
        leaseguard_db_name=db.name,
        leaseguard_db_user="postgres",
        leaseguard_cron_database="postgres",
        leaseguard_drain_poll_s=0.2,
        leaseguard_drain_status_file=str(tmp_path / "drain-{{ inventory_hostname }}.json"),
        leaseguard_drain_metrics_file=str(tmp_path / "drain-{{ inventory_hostname }}.prom"),
    )


@pytest.fixture
def intake_job(db):
    job = f"claim_{db.name}"
    db.cluster.psql(
        f"SELECT cron.schedule_in_database('{job}', '* * * * *', 'SELECT 1', '{db.name}')"
    )
    yield job
    unschedule_with_records(db.cluster, job)


def start_drain_playbook(inventory, tmp_path, *args):
    proc = subprocess.Popen(
        ["ansible-playbook", "-i", str(inventory), "playbooks/drain.yml", *args],
        cwd=REPO,
        env={**ansible_env(tmp_path), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, Lines(proc.stdout)


def test_drain_yml_every_host_draining_at_once_is_in_one_file(db, two_hosts, tmp_path):
    """One task drains every host (one query per poll): one file, at the path as the first
    host of the play reads it, with a row per host."""
    with db.connect() as conn:
        claim(conn, 1)
    proc, out = start_drain_playbook(two_hosts, tmp_path)
    path = tmp_path / "drain-app1.json"
    try:
        assert wait_until(lambda: polls(path) >= 4), out.lines[-20:]
        code, first = status(path)
        assert code == 0 and first["hosts"] == ["app1", "app2"] and first["state"] == "running"
        assert [row["counts"]["live"] for row in first["drains"]] == [1, 1]
        assert wait_until(lambda: polls(path) > first["counters"]["polls"])
        metrics = samples(tmp_path / "drain-app1.prom")
        assert metrics[("leaseguard_drain_running", (("host", "app2"),))] == 1
        assert not (tmp_path / "drain-app2.json").exists()
        with db.connect() as conn:
            finish(conn, 1)
        proc.wait(timeout=120)
    finally:
        terminate(proc)
    assert proc.returncode == 0, out.text()[-3000:]
    code, final = status(path)
    assert code == 0, final
    assert (final["hosts"], final["state"], final["exit_status"]) == (
        ["app1", "app2"],
        "finished",
        0,
    )
    assert [row["counters"]["leases_ended"] for row in final["drains"]] == [1, 1]


def test_drain_yml_draining_the_fleet_once_writes_one_file_for_the_fleet(
    db, two_hosts, intake_job, tmp_path
):
    """One drain for the fleet: one file, at the path as the first host of the play reads it."""
    with db.connect() as conn:
        claim(conn, 1)
    proc, out = start_drain_playbook(
        two_hosts, tmp_path, "-e", f'{{"leaseguard_pause_cron_jobs": ["{intake_job}"]}}'
    )
    fleet_file, label = tmp_path / "drain-app1.json", (("host", "fleet"),)
    try:
        assert wait_until(lambda: polls(fleet_file) >= 2), out.lines[-20:]
        code, first = status(fleet_file)
        assert code == 0, first
        assert (first["state"], first["hosts"], first["decision"]) == (
            "running",
            ["fleet"],
            "defer",
        )
        assert first["paused_intake"] == [f"pg_cron:{intake_job}"]
        assert wait_until(lambda: polls(fleet_file) >= first["counters"]["polls"] + 2)
        assert status(fleet_file)[1]["counters"]["idle_polls"] > first["counters"]["idle_polls"]
        running = samples(tmp_path / "drain-app1.prom")
        assert running[("leaseguard_drain_running", label)] == 1
        assert running[("leaseguard_drain_paused_intake", label)] == 1
        code, other = status(tmp_path / "drain-app2.json")  # no second drain, no second file
        assert code == 1 and other["available"] is False
        assert job_active(db.cluster, intake_job) == "f"
        with db.connect() as conn:
            finish(conn, 1)
        proc.wait(timeout=120)
    finally:
        terminate(proc)
    assert proc.returncode == 0, out.text()[-3000:]
    code, final = status(fleet_file)
    assert code == 0, final
    assert (final["state"], final["exit_status"], final["paused_intake"]) == ("finished", 0, [])
    assert final["counters"]["leases_ended"] == 1
    assert samples(tmp_path / "drain-app1.prom")[("leaseguard_drain_running", label)] == 0
    assert not (tmp_path / "drain-app2.prom").exists()
    assert job_active(db.cluster, intake_job) == "t"


def test_drain_yml_refuses_to_drain_shared_intake_for_a_limited_fleet(
    db, two_hosts, intake_job, tmp_path
):
    """Shared intake is judged once for the fleet: --limit app1 would judge app2's claim (older
    than app1's start 10 min ago) an orphan. Refused before anything is paused."""
    with db.connect() as conn:
        claim(conn, 1, "1 hour")
    shared = {"leaseguard_pause_cron_jobs": [intake_job]}
    done = run_playbook(
        "playbooks/drain.yml", two_hosts, tmp_path, "--limit", "app1", extra_vars=shared
    )
    assert done.returncode != 0, done.stdout[-3000:]
    assert "--limit app1 leaves hosts out" in done.stdout, done.stdout[-3000:]
    assert job_active(db.cluster, intake_job) == "t"
    assert not (tmp_path / "drain-app1.json").exists()
    # Started past that refusal (--start-at-task), app1 alone would be looked up and judged,
    # and the claim judged an orphan: the fleet judgment itself refuses, nothing paused.
    lookup = "Look up the task timeout and the runtime start time on every host"
    done = run_playbook(
        "playbooks/drain.yml",
        two_hosts,
        tmp_path,
        *("--limit", "app1", "--start-at-task", lookup),
        extra_vars=shared,
    )
    assert done.returncode != 0, done.stdout[-3000:]
    refusal = done.result("Judge the claims by the system's own lease", "app1")
    assert "--limit app1 leaves hosts out (only app1 would be judged" in refusal["msg"]
    assert job_active(db.cluster, intake_job) == "t"
    assert not (tmp_path / "drain-app1.json").exists()
    # The same start over the whole fleet drains: the claim may be app2's, the drain waits for it
    # and, at its deadline, fails the hosts with live leases.
    done = run_playbook(
        "playbooks/drain.yml",
        two_hosts,
        tmp_path,
        "--start-at-task",
        lookup,
        extra_vars={**shared, "leaseguard_drain_deadline_s": 1},
    )
    assert done.returncode != 0, done.stdout[-3000:]
    verdict = done.result("Judge the claims by the system's own lease", "app1")
    assert verdict["decision"] == "defer" and verdict["fleet"]["hosts"] == ["app1", "app2"]
    assert job_active(db.cluster, intake_job) == "t"
