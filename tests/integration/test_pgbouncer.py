"""The guard, the drain and the intake pauses behind a real PgBouncer 1.18 in transaction mode.

The sandbox's PgBouncer hands its two server connections out in turn, so each transaction of
a client runs in another server session: anything kept across transactions (a prepared
statement, a SET) goes missing, as on a busy pooler: leaseguard never prepares a statement.
"""

import re
import subprocess
import sys
import threading

import psycopg
import pytest

from leaseguard.adapters.db import connect
from leaseguard.core.contract import contract_from_mapping
from leaseguard.orchestration.session import local_session
from sandbox.pgbouncer import pgbouncer
from sandbox.subprocess_env import clean_env
from tests.integration.test_cli_drain import (  # noqa: F401 (claim_job: a fixture)
    FACTS,
    claim_job,
    job_active,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def bouncer(pg_cluster):
    with pgbouncer(pg_cluster) as running:
        yield running


def leaseguard(*args):
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


def server_pids(conninfo, transactions=4):
    with psycopg.connect(conninfo) as conn:
        pids = set()
        for _ in range(transactions):
            with conn.transaction():
                pids.add(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        return pids


def test_the_pooler_really_moves_a_client_between_server_sessions(bouncer, db):
    assert len(server_pids(bouncer.dsn(db.name))) == 2
    assert len(server_pids(db.dsn)) == 1


def test_a_forced_prepare_breaks_behind_the_pooler(bouncer, db):
    """Why leaseguard never prepares: the statement is gone in the next transaction."""
    with psycopg.connect(bouncer.dsn(db.name)) as conn:
        conn.prepare_threshold = 0
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            for _ in range(3):
                with conn.transaction():
                    conn.execute("SELECT %s::int", (1,))


@pytest.mark.parametrize("writable", [False, True])
def test_no_connection_ever_prepares(bouncer, db, writable):
    """Not even psycopg's automatic prepare after 5 executions."""
    with connect(bouncer.dsn(db.name), 5, writable=writable) as conn:
        assert conn.prepare_threshold is None
        for _ in range(8):
            with conn.transaction():
                assert conn.execute("SELECT %s::int", (1,)).fetchone() == (1,)


def test_a_session_behind_the_pooler_never_prepares_however_many_polls(bouncer, busy):
    """More polls than psycopg's prepare threshold (5) on one session: a prepared statement
    would break on the next server session (test_a_forced_prepare_breaks_behind_the_pooler)."""
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, bouncer.dsn(busy.name), task_timeout_s=3600.0) as session:
        verdicts = [session.judge() for _ in range(8)]
    assert {v.decision.value for v in verdicts} == {"defer"}


def test_check_through_the_pooler_defers_on_a_live_claim(bouncer, busy):
    done = leaseguard("check", "--dsn", bouncer.dsn(busy.name), *FACTS)
    assert done.returncode == 75, done.stderr
    assert "decision=defer" in done.stdout


def test_check_through_the_pooler_proceeds_when_only_orphans_are_left(bouncer, busy):
    with busy.connect() as conn:  # claimed before the runtime started: an orphan
        conn.execute("UPDATE execution_runs SET claimed_at = '1999-12-31' WHERE id = 1")
    done = leaseguard("check", "--dsn", bouncer.dsn(busy.name), *FACTS)
    assert done.returncode == 0, done.stderr
    assert "decision=proceed" in done.stdout


def polls_so_far(metrics):
    """The drain's poll counter from its --metrics-file (0 before the first write)."""
    try:
        text = metrics.read_text()
    except FileNotFoundError:
        return 0
    found = re.search(r"^leaseguard_drain_polls_total\{[^}]*\} (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def test_a_drain_through_the_pooler_pauses_waits_and_resumes(
    bouncer,
    busy,
    claim_job,  # noqa: F811
    tmp_path,
):
    metrics = tmp_path / "drain.prom"
    argv = [
        sys.executable,
        "-m",
        "leaseguard",
        "drain",
        "--dsn",
        bouncer.dsn(busy.name),
        *FACTS,
        "--poll-s",
        "0.05",
        "--pause-cron-job",
        claim_job,
        "--cron-database",
        "postgres",
        "--metrics-file",
        str(metrics),
    ]
    drain = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    paused_seen = []
    try:
        watcher = threading.Thread(
            target=lambda: paused_seen.append(
                wait_until(lambda: job_active(busy, claim_job) == "f")
            )
        )
        watcher.start()
        # At least 20 polls through the pooler (each a transaction, on alternating server
        # sessions) while the claim is live, then the claim ends mid-drain.
        assert wait_until(lambda: polls_so_far(metrics) >= 20 or drain.poll() is not None, 60)
        assert drain.poll() is None, drain.communicate()
        watcher.join()
        with busy.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        out, err = drain.communicate(timeout=60)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.communicate()
    assert drain.returncode == 0, err
    assert paused_seen == [True]
    assert job_active(busy, claim_job) == "t"
    assert "live 1 -> 0 ended=1" in err
    assert f"intake resumed pg_cron job={claim_job}" in err
    assert "failed" not in err and "errors_total{" not in metrics.read_text()
    assert "decision=proceed" in out
    assert polls_so_far(metrics) >= 21
