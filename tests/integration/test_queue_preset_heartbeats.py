"""`preset: procrastinate` and `preset: pgmq` against their stock schemas (sandbox/queues),
both directions at the boundaries: live work defers, stalled/expired/queued work proceeds.

procrastinate 3.x (queries.sql select_stalled_jobs_by_heartbeat): a `doing` job is stalled
when its worker is gone (worker_id NULL) or silent for stalled_worker_timeout (30 s).
pgmq 1.11 (pgmq.read): a read message is hidden until its vt; then any reader takes it again.
"""

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import ConfigError, SchemaMismatch, UnclassifiedStatus
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import local_session
from sandbox.queues import create_pgmq, create_procrastinate
from sandbox.subprocess_env import clean_env

pytestmark = pytest.mark.integration

RESTART = timedelta(hours=6)


def judge(dsn, preset, started_ago=RESTART, **keys):
    contract = contract_from_mapping({"preset": preset, **keys})
    started = datetime.now(UTC) - started_ago
    with local_session(contract, dsn, runtime_started_at=started) as session:
        return session.judge()


def run_cli(*argv):
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", *argv],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


# --- procrastinate -------------------------------------------------------------------------


@pytest.fixture
def procrastinate(db):
    with db.connect() as conn:
        create_procrastinate(conn)
    return db


def worker(db, beat_ago):
    """A worker as procrastinate_register_worker_v1 makes it, its heartbeat `beat_ago` old
    (procrastinate_update_heartbeat_v1 sets it to NOW())."""
    with db.connect() as conn:
        [worker_id] = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) VALUES (now() - %s::interval) "
            "RETURNING id",
            (beat_ago,),
        ).fetchone()
    return worker_id


def job(db, status, worker_id=None, scheduled_ago=None):
    with db.connect() as conn:
        [job_id] = conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, status, worker_id, "
            "scheduled_at) VALUES ('default', 'task', %s, %s, now() - %s::interval) "
            "RETURNING id",
            (status, worker_id, scheduled_ago),
        ).fetchone()
    return job_id


def test_procrastinate_a_job_of_a_beating_worker_defers_whatever_its_scheduled_at(procrastinate):
    """The issue's case: scheduled hours ago, the worker beat 5 s ago: it is running."""
    job(procrastinate, "doing", worker(procrastinate, timedelta(seconds=5)), timedelta(hours=3))
    verdict = judge(procrastinate.dsn, "procrastinate")
    assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)
    assert verdict.lease_s == 30.0  # stalled_worker_timeout
    assert 20 < verdict.wait_upper_bound_s <= 25


def test_procrastinate_a_stalled_worker_s_job_proceeds_just_before_the_threshold_defers(
    procrastinate,
):
    job(procrastinate, "doing", worker(procrastinate, timedelta(seconds=35)))
    verdict = judge(procrastinate.dsn, "procrastinate")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    job(procrastinate, "doing", worker(procrastinate, timedelta(seconds=25)))
    verdict = judge(procrastinate.dsn, "procrastinate")
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 1, 1)


def test_procrastinate_a_job_whose_worker_is_gone_proceeds(procrastinate):
    """procrastinate_unregister_worker_v1 deletes the worker; ON DELETE SET NULL."""
    beating = worker(procrastinate, timedelta(seconds=1))
    job_id = job(procrastinate, "doing", beating)
    assert judge(procrastinate.dsn, "procrastinate").decision is Decision.DEFER
    with procrastinate.connect() as conn:
        conn.execute("DELETE FROM procrastinate_workers WHERE id = %s", (beating,))
        [owner] = conn.execute(
            "SELECT worker_id FROM procrastinate_jobs WHERE id = %s", (job_id,)
        ).fetchone()
    assert owner is None
    verdict = judge(procrastinate.dsn, "procrastinate")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def test_procrastinate_queued_and_finished_jobs_only_proceed(procrastinate):
    for status in ("todo", "todo", "succeeded", "failed", "cancelled", "aborted"):
        job(procrastinate, status)
    verdict = judge(procrastinate.dsn, "procrastinate")
    assert (verdict.decision, verdict.counts.queued) == (Decision.PROCEED, 2)


def test_procrastinate_a_legacy_aborting_row_fails_the_check_naming_it(procrastinate):
    job(procrastinate, "aborting")
    with pytest.raises(UnclassifiedStatus, match="aborting"):
        judge(procrastinate.dsn, "procrastinate")


def test_procrastinate_without_its_workers_table_fails_closed_naming_it(procrastinate):
    with procrastinate.connect() as conn:
        conn.execute("ALTER TABLE procrastinate_jobs DROP COLUMN worker_id")
        conn.execute("DROP TABLE procrastinate_workers")
    with pytest.raises(SchemaMismatch, match="procrastinate_workers"):
        judge(procrastinate.dsn, "procrastinate")


@pytest.mark.parametrize("kind", ["VIEW", "MATERIALIZED VIEW"])
def test_procrastinate_workers_read_through_a_view_fail_closed_naming_it(procrastinate, kind):
    """A beating worker's job defers through the table; behind a view (which may filter the
    workers) or a materialized view (heartbeats frozen at its refresh) the check refuses."""
    job(procrastinate, "doing", worker(procrastinate, "1 second"))
    assert judge(procrastinate.dsn, "procrastinate").decision is Decision.DEFER
    with procrastinate.connect() as conn:
        conn.execute("ALTER TABLE procrastinate_workers RENAME TO workers_base")
        conn.execute(f"CREATE {kind} procrastinate_workers AS SELECT * FROM workers_base")  # noqa: S608
    with pytest.raises(SchemaMismatch, match=f"procrastinate_workers .* is a {kind.lower()}"):
        judge(procrastinate.dsn, "procrastinate")


def test_procrastinate_workers_another_schema_shadows_are_refused_without_schema(procrastinate):
    """With no `schema`, the owners' table was found through the search_path on its own: a
    workers table in a schema ahead of the claims' (no workers in it) made a beating worker's
    job look ownerless (proceed). Refused by name; with `schema` set the job defers."""
    job(procrastinate, "doing", worker(procrastinate, "1 second"))
    with procrastinate.connect() as conn:
        conn.execute("CREATE SCHEMA decoy")
        conn.execute("CREATE TABLE decoy.procrastinate_workers (LIKE procrastinate_workers)")
        path = "ALTER DATABASE {} SET search_path = decoy, public"
        conn.execute(sql.SQL(path).format(sql.Identifier(procrastinate.name)))
    with pytest.raises(SchemaMismatch, match="found in schema decoy, not in public beside"):
        judge(procrastinate.dsn, "procrastinate")
    assert judge(procrastinate.dsn, "procrastinate", schema="public").decision is Decision.DEFER
    with procrastinate.connect() as conn:
        conn.execute("DROP TABLE decoy.procrastinate_workers")
    assert judge(procrastinate.dsn, "procrastinate").decision is Decision.DEFER


def test_procrastinate_index_sql_leads_with_the_status(procrastinate):
    done = run_cli("index-sql", "--preset", "procrastinate")
    assert done.returncode == 0, done.stderr
    statement = done.stdout.splitlines()[-1]
    assert statement.endswith('ON "procrastinate_jobs" ("status");'), statement
    procrastinate.psql(statement)


# --- pgmq ----------------------------------------------------------------------------------


@pytest.fixture
def pgmq(db):
    with db.connect() as conn:
        create_pgmq(conn)
    return db


def send(db, delay=timedelta(0)):
    """As pgmq.send(queue, msg, delay): vt = clock_timestamp() + delay, never read."""
    with db.connect() as conn:
        [msg_id] = conn.execute(
            "INSERT INTO pgmq.q_jobs (vt, message) VALUES (clock_timestamp() + %s, '{}') "
            "RETURNING msg_id",
            (delay,),
        ).fetchone()
    return msg_id


def read(db, msg_id, vt, read_ago=timedelta(0)):
    """What pgmq.read(queue, vt, qty) does to a message it takes, `read_ago` in the past:
    vt = read time + vt seconds, read_ct + 1, last_read_at = read time."""
    with db.connect() as conn:
        conn.execute(
            "UPDATE pgmq.q_jobs SET last_read_at = clock_timestamp() - %(ago)s, "
            "vt = clock_timestamp() - %(ago)s + %(vt)s, read_ct = read_ct + 1 "
            "WHERE msg_id = %(id)s",
            {"ago": read_ago, "vt": vt, "id": msg_id},
        )


def test_pgmq_a_read_message_within_its_visibility_timeout_defers(pgmq):
    read(pgmq, send(pgmq), vt=timedelta(minutes=10))
    verdict = judge(pgmq.dsn, "pgmq", table="q_jobs")
    assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)
    assert verdict.lease_s is None and verdict.task_timeout is None  # each row's own vt
    assert 590 < verdict.wait_upper_bound_s <= 600


def test_pgmq_a_message_past_its_vt_proceeds_just_before_defers(pgmq):
    read(pgmq, send(pgmq), vt=timedelta(seconds=30), read_ago=timedelta(seconds=31))
    verdict = judge(pgmq.dsn, "pgmq", table="q_jobs")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    read(pgmq, send(pgmq), vt=timedelta(seconds=30), read_ago=timedelta(seconds=25))
    verdict = judge(pgmq.dsn, "pgmq", table="q_jobs")
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 1, 1)


def test_pgmq_messages_never_read_are_queued_even_when_delayed(pgmq):
    send(pgmq)
    send(pgmq, delay=timedelta(hours=1))  # vt ahead, but nobody holds it
    verdict = judge(pgmq.dsn, "pgmq", table="q_jobs")
    assert (verdict.decision, verdict.counts.queued) == (Decision.PROCEED, 2)


def test_pgmq_a_message_read_before_the_runtime_started_is_an_orphan(pgmq):
    read(pgmq, send(pgmq), vt=timedelta(hours=1), read_ago=timedelta(minutes=10))
    verdict = judge(pgmq.dsn, "pgmq", started_ago=timedelta(minutes=5), table="q_jobs")
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)
    verdict = judge(pgmq.dsn, "pgmq", started_ago=timedelta(minutes=15), table="q_jobs")
    assert verdict.decision is Decision.DEFER


def test_pgmq_needs_the_queue_s_table():
    with pytest.raises(ConfigError, match="q_<queue>"):
        contract_from_mapping({"preset": "pgmq"})


def test_pgmq_a_queue_that_does_not_exist_fails_closed_naming_it(pgmq):
    with pytest.raises(SchemaMismatch, match=r"pgmq\.q_nope"):
        judge(pgmq.dsn, "pgmq", table="q_nope")


def test_pgmq_index_sql_says_no_index_is_needed(pgmq):
    for flags in ((), ("--dsn", pgmq.dsn)):
        done = run_cli("index-sql", "--preset", "pgmq", "--table", "q_jobs", *flags)
        assert done.returncode == 0, done.stderr
        assert "no index needed" in done.stdout and "CREATE" not in done.stdout
