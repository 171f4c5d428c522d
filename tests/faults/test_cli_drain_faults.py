"""Faults injected into `leaseguard drain`: signals, PostgreSQL down across the resume, SIGKILL.

Each case asserts the exit status, the message naming the cause, and that intake is active
again (for SIGKILL: that the next run names the leftover pause and `leaseguard resume`
gives it back), read with psql independently of the code under test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.faults.conftest import (
    job_active,
    start_server,
    stop_server,
    terminate,
)
from tests.support.process_lines import Lines

pytestmark = [pytest.mark.integration, pytest.mark.faults]

FACTS = ["--task-timeout-s", "3600", "--runtime-started-at", "2000-01-01T00:00:00Z"]
JOB = "claim"


@pytest.fixture
def app(own_cluster):
    """Database `app` with one live claim, and pg_cron job `claim` (the intake) active."""
    own_cluster.psql("CREATE DATABASE app")
    with own_cluster.connect("app") as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    own_cluster.psql(f"SELECT cron.schedule_in_database('{JOB}', '* * * * *', 'SELECT 1', 'app')")
    return own_cluster


def leaseguard(cluster, command, *extra):
    return [
        sys.executable,
        "-m",
        "leaseguard",
        command,
        "--dsn",
        cluster.dsn(dbname="app"),
        *extra,
    ]


def start_drain(cluster, *extra):
    argv = leaseguard(
        cluster,
        "drain",
        *FACTS,
        "--poll-s",
        "0.2",
        "--pause-cron-job",
        JOB,
        "--cron-database",
        "postgres",
        *extra,
    )
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    return proc, Lines(proc.stderr)


def run(cluster, command, *extra):
    return subprocess.run(
        leaseguard(cluster, command, *extra),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
    ids=["sigint", "sigterm", "sighup-terminal-closed"],
)
def test_a_signal_stops_the_drain_and_resumes_intake(app, signum):
    proc, err = start_drain(app)
    try:
        assert err.wait_for("intake paused pg_cron job=claim")
        assert job_active(app, JOB) == "f"
        proc.send_signal(signum)
        proc.wait(timeout=30)
    finally:
        terminate(proc)
    assert proc.returncode == 1
    assert "drain interrupted; intake was resumed" in err.text()
    assert job_active(app, JOB) == "t"
    assert "leaseguard-paused" not in app.psql("SELECT string_agg(jobname, ',') FROM cron.job")


def test_a_second_signal_during_the_resume_is_reported_and_the_resume_still_ends(app, tmp_path):
    """SIGTERM, then SIGINT while the resume retries against a stopped server: the resume
    goes on until the server is back, intake is active again, and the message is true."""
    status_file = tmp_path / "drain.json"
    proc, err = start_drain(app, "--resume-retry-s", "60", "--status-file", str(status_file))
    stopped = False
    try:
        assert err.wait_for("start live=1")  # polling: its failed polls are not its end
        stop_server(app)
        stopped = True
        proc.send_signal(signal.SIGTERM)
        assert err.wait_for("intake resume failed attempt=1")
        proc.send_signal(signal.SIGINT)
        said = err.wait_for("SIGINT again: still resuming intake, then exiting", timeout_s=10)
    finally:
        if stopped:
            start_server(app)
    try:
        proc.wait(timeout=90)
    finally:
        terminate(proc)
    stderr = err.text()
    assert job_active(app, JOB) == "t", stderr
    assert said, stderr
    assert proc.returncode == 1, stderr
    assert "intake resumed pg_cron job=claim" in stderr
    assert "drain interrupted; intake was resumed" in stderr
    status = json.loads(status_file.read_text())
    assert (status["state"], status["exit_status"], status["paused_intake"]) == (
        "interrupted",
        1,
        [],
    )


def test_postgres_back_within_the_retry_window_gets_intake_resumed(app):
    proc, err = start_drain(app, "--resume-retry-s", "60")
    try:
        assert err.wait_for("intake paused pg_cron job=claim")
        stop_server(app)
        # The polls fail, the drain ends, and its resume fails while the server is down.
        assert err.wait_for("intake resume failed attempt=1")
        start_server(app)
        proc.wait(timeout=90)
    finally:
        terminate(proc)
    stderr = err.text()
    assert proc.returncode == 1, stderr  # the drain itself failed: its polls could not run
    assert "error=DatabaseUnavailable" in stderr
    assert "intake resumed pg_cron job=claim" in stderr
    assert job_active(app, JOB) == "t"


def test_postgres_down_past_the_retry_window_is_loud_and_the_next_run_warns(app):
    proc, err = start_drain(app, "--resume-retry-s", "2")
    try:
        assert err.wait_for("intake paused pg_cron job=claim")
        stop_server(app)
        proc.wait(timeout=60)
    finally:
        terminate(proc)
    stderr = err.text()
    assert proc.returncode == 1
    assert "INTAKE STILL PAUSED: cannot resume pg_cron job(s) claim" in stderr
    assert "leaseguard resume" in stderr
    start_server(app)
    assert job_active(app, JOB) == "f"
    assert_next_run_warns_and_resume_restores(app)


def test_sigkill_leaves_a_recorded_pause_that_the_next_run_names_and_resume_gives_back(app):
    app.psql(
        "SELECT cron.schedule_in_database('deliberately_off', '* * * * *', 'SELECT 1', 'app');"
        "SELECT cron.alter_job(jobid, active := false) FROM cron.job "
        "WHERE jobname = 'deliberately_off'"
    )
    proc, err = start_drain(app)
    try:
        assert err.wait_for("intake paused pg_cron job=claim")
        proc.kill()
        proc.wait(timeout=30)
    finally:
        terminate(proc)
    assert job_active(app, JOB) == "f"
    assert_next_run_warns_and_resume_restores(app)
    assert job_active(app, "deliberately_off") == "f"  # no record: never touched


def assert_next_run_warns_and_resume_restores(cluster):
    for command, extra in (
        ("check", [*FACTS, "--cron-database", "postgres"]),
        ("drain", [*FACTS, "--cron-database", "postgres", "--deadline-s", "0.5"]),
    ):
        done = run(cluster, command, *extra)
        assert "warning: pg_cron job claim is still paused: paused at" in done.stderr, command
        assert "by leaseguard drain pid" in done.stderr
        assert "leaseguard resume" in done.stderr
    resumed = run(cluster, "resume", "--cron-database", "postgres")
    assert resumed.returncode == 0, resumed.stderr
    assert "job=claim state=resumed" in resumed.stdout
    assert job_active(cluster, JOB) == "t"
    after = run(cluster, "check", *FACTS, "--cron-database", "postgres")
    assert "still paused" not in after.stderr
    again = run(cluster, "resume", "--cron-database", "postgres")
    assert "recorded=0" in again.stdout
