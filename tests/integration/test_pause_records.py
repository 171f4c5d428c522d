"""Every check looks for intake a drain paused and never gave back (pg_cron's cron.job).

Most databases a guard reads have no pg_cron, and some roles cannot read it: there the
look-up finds nothing, fails nothing and leaves the server's log as it was (an ERROR on
every check would wake whoever watches that log).
"""

import contextlib
import threading

import pytest
from psycopg import sql

from leaseguard.adapters import budgets
from leaseguard.adapters.budgets import converge_jobs
from leaseguard.adapters.pauses import (
    RECORD_PREFIX,
    hold_jobs,
    leftover_warnings,
    read_records,
    release_hold,
)
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import local_session
from sandbox.runs_table import create_runs_table

pytestmark = pytest.mark.integration


def _server_errors(cluster, offset: int, database: str) -> list[str]:
    with cluster.logfile.open(errors="replace") as log:
        log.seek(offset)
        return [line for line in log if f"@{database} ERROR" in line]


def test_a_check_on_a_database_without_pg_cron_logs_no_server_error(db):
    with db.connect() as conn:
        create_runs_table(conn)
        assert conn.execute("SELECT to_regclass('cron.job')").fetchone() == (None,)
    offset = db.cluster.logfile.stat().st_size
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
        verdict = session.judge()
    assert verdict.decision is Decision.PROCEED and verdict.warnings == ()
    assert _server_errors(db.cluster, offset, db.name) == []


@pytest.fixture
def cron_job(pg_cluster):
    """A pg_cron job in the postgres database (pg_cron's own), unscheduled after the test."""
    name = f"intake_{id(pg_cluster):x}"
    with pg_cluster.connect("postgres") as conn:
        conn.execute("SELECT cron.schedule(%s, '* * * * *', 'SELECT 1')", (name,))
    yield name
    with pg_cluster.connect("postgres") as conn:
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job "
            "WHERE jobname = %s OR starts_with(jobname, %s)",
            (name, f"{RECORD_PREFIX}{name}@"),
        )


@pytest.fixture
def cron_outsider(pg_cluster):
    """A login role that may connect but has no USAGE on the cron schema."""
    role = "cron_outsider"
    with pg_cluster.connect("postgres") as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    with pg_cluster.connect("postgres") as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_recorded_pause_is_named_to_a_role_that_can_read_it(pg_cluster, cron_job):
    with pg_cluster.connect("postgres") as conn:
        hold_jobs(conn, [cron_job], "test pid 1 on here")
        warnings = leftover_warnings(conn)
    assert [
        w
        for w in warnings
        if f"pg_cron job {cron_job} is still paused: paused at" in w and "by test pid 1" in w
    ]


def test_a_role_that_cannot_read_cron_job_gets_no_warning_no_failure_no_error(
    pg_cluster, cron_job, cron_outsider
):
    with pg_cluster.connect("postgres") as conn:
        hold_jobs(conn, [cron_job], "test pid 1 on here")
    offset = pg_cluster.logfile.stat().st_size
    with pg_cluster.connect("postgres", user=cron_outsider) as conn:
        assert leftover_warnings(conn) == []
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is still usable
    assert _server_errors(pg_cluster, offset, "postgres") == []


def _active(conn, job):
    return conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (job,)).fetchone()[0]


def test_a_record_left_on_a_job_switched_back_on_by_hand_does_not_keep_the_next_hold(
    pg_cluster, cron_job, caplog
):
    """A SIGKILLed run's record, the job reactivated by hand (not `leaseguard resume`): the next
    hold drops the stale record (warning names its holder) and its release gives the job back."""
    with pg_cluster.connect("postgres") as conn:
        hold_jobs(conn, [cron_job], "killed pid 1 on here")  # never released
        conn.execute(
            "SELECT cron.alter_job(jobid, active := true) FROM cron.job WHERE jobname = %s",
            (cron_job,),
        )
        hold = hold_jobs(conn, [cron_job], "next pid 2 on here")
        assert not _active(conn, cron_job)
        assert release_hold(conn, hold) == ((cron_job,), {})
        assert _active(conn, cron_job)
        assert leftover_warnings(conn) == []
    assert any("stale intake hold" in m and "killed pid 1" in m for m in caplog.messages)


def test_a_live_holders_record_on_an_inactive_job_still_keeps_it_paused(pg_cluster, cron_job):
    with pg_cluster.connect("postgres") as conn:
        first = hold_jobs(conn, [cron_job], "first pid 1 on here")
        second = hold_jobs(conn, [cron_job], "second pid 2 on here")
        assert release_hold(conn, second) == ((), {cron_job: ("first pid 1 on here",)})
        assert not _active(conn, cron_job)
        assert release_hold(conn, first) == ((cron_job,), {})
        assert _active(conn, cron_job)


def test_cron_budget_active_keeps_a_held_job_paused_and_resumes_an_unheld_one(pg_cluster, cron_job):
    """cron_budget's `active: {job: true}` beside a drain or deploy holding the job: switched
    on, it would claim beside that run's restart. It stays paused, named; unheld, it resumes."""
    path = contextlib.nullcontext(pg_cluster.dsn("postgres"))
    with pg_cluster.connect("postgres") as conn:
        hold = hold_jobs(conn, [cron_job], "fab drain pid 42 on ctl", "restart app1")
    _, kept = converge_jobs(path, None, active={cron_job: True}, cron_database="postgres")
    assert kept is not None and kept.resumed == []
    assert any(
        f"pg_cron job {cron_job} not resumed: held by fab drain pid 42 on ctl (for: restart "
        "app1)" in warning
        for warning in kept.warnings
    ), kept.warnings
    with pg_cluster.connect("postgres") as conn:
        assert not _active(conn, cron_job)
        release_hold(conn, hold)
        conn.execute(
            "SELECT cron.alter_job(jobid, active := false) FROM cron.job WHERE jobname = %s",
            (cron_job,),
        )
    _, resumed = converge_jobs(path, None, active={cron_job: True}, cron_database="postgres")
    assert resumed is not None and resumed.resumed == [cron_job] and resumed.warnings == []
    with pg_cluster.connect("postgres") as conn:
        assert _active(conn, cron_job)


def test_cron_budget_active_never_switches_on_a_job_a_drain_holds_while_it_reads(
    pg_cluster, cron_job, monkeypatch
):
    """A drain's hold committed between cron_budget reading the holds and switching the flags
    was switched on at once, beside that drain's restart. Read and switched under the holds'
    lock, the hold waits for the switch and the job ends paused, still held."""
    held, drains = [], []

    def drain_meanwhile(conn):
        records = read_records(conn)

        def drain():
            with pg_cluster.connect("postgres") as other:
                held.append(hold_jobs(other, [cron_job], "fab drain pid 43 on ctl", "restart"))

        drains.append(threading.Thread(target=drain))
        drains[0].start()
        drains[0].join(0.5)  # unblocked, the hold is taken and committed by now
        return records

    monkeypatch.setattr(budgets, "read_records", drain_meanwhile)
    path = contextlib.nullcontext(pg_cluster.dsn("postgres"))
    converge_jobs(path, None, active={cron_job: True}, cron_database="postgres")
    drains[0].join(10)
    assert held and held[0].switched == (cron_job,)
    with pg_cluster.connect("postgres") as conn:
        assert not _active(conn, cron_job)
        release_hold(conn, held[0])
        assert _active(conn, cron_job)


def _active(conn, job):
    return conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (job,)).fetchone()[0]


def test_a_running_holders_hold_is_no_leftover_a_dead_or_remote_ones_is(pg_cluster, cron_job):
    """Every check names holds left behind; a hold whose holder still runs here is not one
    (to give it back would resume intake under its action); one from another machine cannot
    be checked: named, with the --force that a plain resume would need."""
    import os
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    with pg_cluster.connect("postgres") as conn:
        live = hold_jobs(conn, [cron_job], "fab drain pid live on here", "restart", os.getpid())
        assert [w for w in leftover_warnings(conn) if cron_job in w] == []
        dead = hold_jobs(conn, [cron_job], "fab drain pid gone", "deploy", int(gone.stdout))
        warnings = [w for w in leftover_warnings(conn) if cron_job in w]
        assert len(warnings) == 1 and "by fab drain pid gone (for: deploy)" in warnings[0]
        assert "`leaseguard resume --cron-database <db>`" in warnings[0]
        conn.execute(
            'UPDATE cron.job SET command = replace(command, %s, \'"host": "elsewhere"\') '
            "WHERE jobname = %s",
            (f'"host": "{os.uname().nodename}"', f"{RECORD_PREFIX}{cron_job}@{live.token}"),
        )
        remote = [w for w in leftover_warnings(conn) if "pid live" in w]
        assert len(remote) == 1 and "`leaseguard resume --force`" in remote[0]
        assert "its holder runs on elsewhere" in remote[0]
        release_hold(conn, dead)
        release_hold(conn, live)
