"""`preset: NAME` against each queue's stock schema, as sandbox/queues creates it.

Both directions per preset: a long, silent, live job defers; a job the system itself would
rescue proceeds; queued-only proceeds; an orphan of a restart proceeds; plus the system's
special case. Rows are written the way the system writes them (Oban: naive UTC).
"""

import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from leaseguard.core.contract import contract_from_mapping, load_contract
from leaseguard.core.errors import SchemaMismatch, UnclassifiedStatus
from leaseguard.core.verdict import Decision
from leaseguard.fabric.tasks import settings_from_config
from leaseguard.orchestration.session import local_session
from sandbox.queues import (
    create_good_job,
    create_graphile_worker,
    create_oban,
    create_pg_boss,
    create_que,
    create_river,
    create_solid_queue,
)
from tests.support.judging import evaluate
from tests.support.leaseguard_cli import leaseguard
from tests.support.pg_fixtures import fresh_database

pytestmark = pytest.mark.integration

RESTART = timedelta(hours=6)  # the worker runtime started this long ago


def judge(dsn, preset, started_ago=RESTART, **keys):
    contract = contract_from_mapping({"preset": preset, **keys})
    started = datetime.now(UTC) - started_ago
    with local_session(contract, dsn, runtime_started_at=started) as session:
        return session.judge()


def queue_schema(create, *args):
    """A fixture: the test database holding the queue's stock schema."""

    @pytest.fixture
    def with_schema(db):
        with db.connect() as conn:
            create(conn, *args)
        return db

    return with_schema


# --- river ---------------------------------------------------------------------------------


river = queue_schema(create_river)


def river_job(db, state, attempted_ago=None):
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO river_job (state, attempted_at, kind, max_attempts, args, "
            "finalized_at) VALUES (%s, now() - %s::interval, 'k', 25, '{}', "
            "CASE WHEN %s IN ('completed','cancelled','discarded') THEN now() END)",
            (state, attempted_ago, state),
        )


def test_river_a_job_running_silently_for_59_minutes_defers(river):
    river_job(river, "running", timedelta(minutes=59))
    verdict = judge(river.dsn, "river")
    assert verdict.decision is Decision.DEFER
    assert verdict.lease_s == 3600.0  # JobRescuerRescueAfterDefault
    assert 50 < verdict.wait_upper_bound_s <= 60


def test_river_a_job_its_rescuer_would_rescue_proceeds(river):
    river_job(river, "running", timedelta(minutes=61))
    verdict = judge(river.dsn, "river")
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


def test_river_queued_and_finished_jobs_only_proceed(river):
    for state in ("available", "scheduled", "retryable", "pending", "completed", "discarded"):
        river_job(river, state, timedelta(minutes=1) if state != "available" else None)
    verdict = judge(river.dsn, "river")
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.queued == 4


def test_river_an_orphan_of_a_restart_proceeds(river):
    river_job(river, "running", timedelta(minutes=20))
    verdict = judge(river.dsn, "river", started_ago=timedelta(minutes=5))
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.orphaned == 1


def test_river_a_rescue_after_set_explicitly_overrides_the_preset(river):
    river_job(river, "running", timedelta(minutes=61))
    verdict = judge(river.dsn, "river", task_timeout={"value_s": 7200})
    assert verdict.decision is Decision.DEFER


# --- oban ----------------------------------------------------------------------------------


oban = queue_schema(create_oban)


def oban_job(db, state, attempted_ago=None):
    """As Oban writes it: attempted_at is naive UTC (utc_datetime_usec)."""
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO oban_jobs (state, worker, attempted_at) "
            "VALUES (%s, 'W', timezone('UTC', now()) - %s)",
            (state, attempted_ago),
        )


def set_database_zone(db, zone):
    with db.connect() as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET TimeZone = {}").format(
                sql.Identifier(db.name), sql.Literal(zone)
            )
        )


ZONES = ["UTC", "Asia/Kolkata", "America/New_York"]


@pytest.mark.parametrize("zone", ZONES)
def test_oban_a_job_executing_10_minutes_defers_whatever_the_database_time_zone(oban, zone):
    set_database_zone(oban, zone)
    oban_job(oban, "executing", timedelta(minutes=10))
    verdict = judge(oban.dsn, "oban")
    assert verdict.decision is Decision.DEFER
    assert verdict.lease_s == 7200.0  # the installer's rescue_after: {2, :hours}
    assert 109 * 60 < verdict.wait_upper_bound_s <= 110 * 60


@pytest.mark.parametrize("zone", ZONES)
def test_oban_a_job_lifeline_would_rescue_proceeds_whatever_the_database_time_zone(oban, zone):
    """3 h old: in New York's zone it would look 'claimed in the future' and defer."""
    set_database_zone(oban, zone)
    oban_job(oban, "executing", timedelta(hours=3))
    verdict = judge(oban.dsn, "oban")
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


def test_oban_a_job_just_past_rescue_after_proceeds_just_before_defers(oban):
    """rescue_after is the installer's 2 h (a job executing 70 minutes is live)."""
    oban_job(oban, "executing", timedelta(minutes=121))
    assert judge(oban.dsn, "oban").decision is Decision.PROCEED
    oban_job(oban, "executing", timedelta(minutes=70))
    oban_job(oban, "executing", timedelta(minutes=118))
    verdict = judge(oban.dsn, "oban")
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 2, 1)


def test_oban_a_declared_zone_other_than_utc_is_honoured(oban):
    """A naive column written in New York time: 10 minutes ago there is live."""
    with oban.connect() as conn:
        conn.execute(
            "INSERT INTO oban_jobs (state, worker, attempted_at) VALUES "
            "('executing', 'W', timezone('America/New_York', now()) - interval '10 minutes')"
        )
    assert judge(oban.dsn, "oban").decision is Decision.PROCEED  # read as UTC: hours ago
    verdict = judge(oban.dsn, "oban", timestamp_zone="America/New_York")
    assert verdict.decision is Decision.DEFER


def test_oban_queued_only_proceeds_and_an_orphan_proceeds(oban):
    for state in ("available", "scheduled", "retryable", "completed", "cancelled"):
        oban_job(oban, state, timedelta(minutes=1))
    assert judge(oban.dsn, "oban").decision is Decision.PROCEED
    oban_job(oban, "executing", timedelta(minutes=20))
    verdict = judge(oban.dsn, "oban", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)


# --- graphile-worker -----------------------------------------------------------------------


graphile = queue_schema(create_graphile_worker)


def graphile_job(db, *, locked_ago=None, attempts=0, max_attempts=25):
    """Through graphile_worker.add_job, then locked the way getJobs does."""
    with db.connect() as conn:
        [job_id] = conn.execute(
            "SELECT id FROM graphile_worker.add_job('task', max_attempts => %s)", (max_attempts,)
        ).fetchone()
        conn.execute(
            "UPDATE graphile_worker._private_jobs "
            "SET attempts = %s, locked_at = now() - %s::interval, "
            "locked_by = CASE WHEN %s::interval IS NULL THEN NULL ELSE 'worker-1' END "
            "WHERE id = %s",
            (attempts, locked_ago, locked_ago, job_id),
        )


def test_graphile_a_job_locked_3_hours_ago_defers(graphile):
    graphile_job(graphile, locked_ago=timedelta(hours=3), attempts=1)
    verdict = judge(graphile.dsn, "graphile_worker")
    assert verdict.decision is Decision.DEFER
    assert 59 * 60 < verdict.wait_upper_bound_s <= 60 * 60


def test_graphile_a_lock_past_its_4_hour_expiry_proceeds(graphile):
    graphile_job(graphile, locked_ago=timedelta(hours=4, minutes=1), attempts=1)
    verdict = judge(graphile.dsn, "graphile_worker", started_ago=timedelta(hours=9))
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def test_graphile_queued_only_proceeds_and_an_exhausted_job_is_finished(graphile):
    graphile_job(graphile)
    graphile_job(graphile, attempts=3, max_attempts=3)  # failed for good: not queued, not live
    verdict = judge(graphile.dsn, "graphile_worker")
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.queued == 1
    assert verdict.counts.live == verdict.counts.stale == 0


def test_graphile_a_job_on_its_last_attempt_while_locked_is_live(graphile):
    graphile_job(graphile, locked_ago=timedelta(minutes=5), attempts=3, max_attempts=3)
    assert judge(graphile.dsn, "graphile_worker").decision is Decision.DEFER


def test_graphile_an_orphan_of_a_restart_proceeds(graphile):
    graphile_job(graphile, locked_ago=timedelta(minutes=30), attempts=1)
    verdict = judge(graphile.dsn, "graphile_worker", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)


def test_graphile_a_read_only_role_under_rls_fails_closed_with_the_fix(graphile):
    """RLS on, no policy: the role would see zero rows and proceed on live work."""
    graphile_job(graphile, locked_ago=timedelta(minutes=5), attempts=1)
    with graphile.connect(user="guard_ro") as conn:  # what the role would see
        assert conn.execute("SELECT count(*) FROM graphile_worker._private_jobs").fetchone() == (0,)
    with pytest.raises(SchemaMismatch, match="row-level security") as caught:
        judge(graphile.dsn_as("guard_ro"), "graphile_worker")
    assert "BYPASSRLS" in str(caught.value)
    with graphile.connect() as conn:
        conn.execute(
            "CREATE POLICY leaseguard_read ON graphile_worker._private_jobs "
            "FOR SELECT TO guard_ro USING (true)"
        )
    assert judge(graphile.dsn_as("guard_ro"), "graphile_worker").decision is Decision.DEFER


def test_rls_forced_on_the_owner_fails_closed_too(graphile):
    with graphile.connect() as conn:
        conn.execute("CREATE ROLE queue_owner LOGIN")
        conn.execute("GRANT USAGE ON SCHEMA graphile_worker TO queue_owner")
        conn.execute("ALTER TABLE graphile_worker._private_jobs OWNER TO queue_owner")
    owner = graphile.dsn_as("queue_owner")
    assert judge(owner, "graphile_worker").decision is Decision.PROCEED  # owner sees all
    with graphile.connect() as conn:
        conn.execute("ALTER TABLE graphile_worker._private_jobs FORCE ROW LEVEL SECURITY")
    with pytest.raises(SchemaMismatch, match="forces row-level security"):
        judge(owner, "graphile_worker")


# --- pg-boss --------------------------------------------------------------------------------


pg_boss = queue_schema(create_pg_boss, ("q1", "q2"))


def pg_boss_job(db, state, *, started_ago=None, expire_s=900, beat_ago=None, beat_s=None):
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO pgboss.job (name, state, started_on, expire_seconds, heartbeat_on, "
            "heartbeat_seconds) VALUES ('q1', %s, now() - %s::interval, %s, "
            "now() - %s::interval, %s)",
            (state, started_ago, expire_s, beat_ago, beat_s),
        )


def test_pg_boss_an_active_job_within_its_own_expiry_defers(pg_boss):
    """Its own expire_seconds (2 h here), not any configured task timeout."""
    pg_boss_job(pg_boss, "active", started_ago=timedelta(minutes=90), expire_s=7200)
    verdict = judge(pg_boss.dsn, "pg-boss")
    assert verdict.decision is Decision.DEFER
    assert verdict.lease_s is None and verdict.task_timeout is None
    assert 29 * 60 < verdict.wait_upper_bound_s <= 30 * 60


def test_pg_boss_a_job_past_its_expiry_proceeds(pg_boss):
    pg_boss_job(pg_boss, "active", started_ago=timedelta(minutes=16))  # default 900 s
    verdict = judge(pg_boss.dsn, "pg-boss")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def beating_pg_boss_job(db):
    """An `active` job started 5 minutes ago (expires in 2 h) that beat 10 s ago (every 60 s)."""
    pg_boss_job(
        db,
        "active",
        started_ago=timedelta(minutes=5),
        expire_s=7200,
        beat_ago=timedelta(seconds=10),
        beat_s=60,
    )


def test_pg_boss_a_lost_heartbeat_proceeds_a_beating_one_defers(pg_boss):
    pg_boss_job(
        pg_boss,
        "active",
        started_ago=timedelta(minutes=5),
        expire_s=7200,
        beat_ago=timedelta(seconds=90),
        beat_s=60,
    )
    assert judge(pg_boss.dsn, "pg-boss").decision is Decision.PROCEED
    beating_pg_boss_job(pg_boss)
    verdict = judge(pg_boss.dsn, "pg-boss")
    assert verdict.decision is Decision.DEFER
    assert 45 < verdict.wait_upper_bound_s <= 50  # the heartbeat bounds it, not the expiry


def test_pg_boss_a_naive_heartbeat_needs_its_zone_like_the_other_time_columns(pg_boss):
    """A `timestamp` heartbeat written in New York, read as UTC, is 5 hours old: a job beating
    10 s ago looked lost (proceed). Refused by name until its zone is declared, then defers."""
    with pg_boss.connect() as conn:
        conn.execute("ALTER TABLE pgboss.job ALTER COLUMN heartbeat_on TYPE timestamp")
        zone = "ALTER DATABASE {} SET timezone = 'America/New_York'"
        conn.execute(sql.SQL(zone).format(sql.Identifier(pg_boss.name)))
    beating_pg_boss_job(pg_boss)
    with pytest.raises(SchemaMismatch, match=r"column heartbeat_on \(preset heartbeat_on\)"):
        judge(pg_boss.dsn, "pg-boss")
    verdict = judge(pg_boss.dsn, "pg-boss", timestamp_zone="America/New_York")
    assert verdict.decision is Decision.DEFER


def test_pg_boss_queued_and_finished_only_proceed_and_an_orphan_proceeds(pg_boss):
    for state in ("created", "retry", "completed", "failed", "cancelled"):
        pg_boss_job(pg_boss, state)
    verdict = judge(pg_boss.dsn, "pg-boss")
    assert (verdict.decision, verdict.counts.queued) == (Decision.PROCEED, 2)
    pg_boss_job(pg_boss, "active", started_ago=timedelta(minutes=10))
    verdict = judge(pg_boss.dsn, "pg-boss", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)


def test_pg_boss_index_sql_gives_the_partition_recipe(pg_boss):
    done = run_cli("index-sql", "--preset", "pg-boss", "--dsn", pg_boss.dsn)
    assert done.returncode == 0, done.stderr
    assert 'ON ONLY "pgboss"."job"' in done.stdout
    assert "CONCURRENTLY" in done.stdout and done.stdout.count("ATTACH PARTITION") == 3
    for statement in done.stdout.splitlines():
        if not statement.startswith("--"):
            pg_boss.psql(statement)
    again = run_cli("index-sql", "--preset", "pg-boss", "--dsn", pg_boss.dsn)
    assert "already serve" in again.stdout


# --- solid_queue -----------------------------------------------------------------------------


solid_queue = queue_schema(create_solid_queue)


def solid_queue_process(db, beat_ago):
    """A worker process as SolidQueue::Process.register writes it: naive UTC timestamps."""
    with db.connect() as conn:
        [process_id] = conn.execute(
            "INSERT INTO solid_queue_processes (kind, last_heartbeat_at, pid, name, created_at) "
            "VALUES ('Worker', timezone('UTC', now()) - %s::interval, 4242, "
            "'worker-' || gen_random_uuid(), timezone('UTC', now())) RETURNING id",
            (beat_ago,),
        ).fetchone()
    return process_id


def solid_queue_job(db, *, process_id=None, claimed_ago=None):
    """A job, claimed (a claimed execution owned by `process_id`) or ready (queued)."""
    with db.connect() as conn:
        [job_id] = conn.execute(
            "INSERT INTO solid_queue_jobs (queue_name, class_name, created_at, updated_at) "
            "VALUES ('default', 'Job', timezone('UTC', now()), timezone('UTC', now())) "
            "RETURNING id"
        ).fetchone()
        if claimed_ago is None:
            conn.execute(
                "INSERT INTO solid_queue_ready_executions (job_id, queue_name, created_at) "
                "VALUES (%s, 'default', timezone('UTC', now()))",
                (job_id,),
            )
        else:
            conn.execute(
                "INSERT INTO solid_queue_claimed_executions (job_id, process_id, created_at) "
                "VALUES (%s, %s, timezone('UTC', now()) - %s::interval)",
                (job_id, process_id, claimed_ago),
            )


@pytest.mark.parametrize("zone", ZONES)
def test_solid_queue_a_long_silent_job_of_a_beating_process_defers(solid_queue, zone):
    """Claimed 3 h ago, its process beat 30 s ago: alive, whatever the database's zone."""
    set_database_zone(solid_queue, zone)
    worker = solid_queue_process(solid_queue, timedelta(seconds=30))
    solid_queue_job(solid_queue, process_id=worker, claimed_ago=timedelta(hours=3))
    verdict = judge(solid_queue.dsn, "solid_queue")
    assert verdict.decision is Decision.DEFER
    assert verdict.lease_s == 300.0  # process_alive_threshold
    assert 265 < verdict.wait_upper_bound_s <= 270


@pytest.mark.parametrize("zone", ZONES)
def test_solid_queue_a_lost_heartbeat_proceeds_just_before_the_threshold_defers(solid_queue, zone):
    set_database_zone(solid_queue, zone)
    silent = solid_queue_process(solid_queue, timedelta(minutes=5, seconds=5))
    solid_queue_job(solid_queue, process_id=silent, claimed_ago=timedelta(minutes=30))
    verdict = judge(solid_queue.dsn, "solid_queue")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    nearly = solid_queue_process(solid_queue, timedelta(minutes=4, seconds=50))
    solid_queue_job(solid_queue, process_id=nearly, claimed_ago=timedelta(minutes=30))
    verdict = judge(solid_queue.dsn, "solid_queue")
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 1, 1)


def test_solid_queue_a_claim_whose_process_is_gone_proceeds(solid_queue):
    """ClaimedExecution.orphaned: the owner row was deleted (or never named)."""
    gone = solid_queue_process(solid_queue, timedelta(seconds=5))
    solid_queue_job(solid_queue, process_id=gone, claimed_ago=timedelta(minutes=2))
    solid_queue_job(solid_queue, process_id=None, claimed_ago=timedelta(minutes=2))
    assert judge(solid_queue.dsn, "solid_queue").decision is Decision.DEFER
    with solid_queue.connect() as conn:
        conn.execute("DELETE FROM solid_queue_processes WHERE id = %s", (gone,))
    verdict = judge(solid_queue.dsn, "solid_queue")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 2)


def test_solid_queue_ready_jobs_only_proceed_and_an_orphan_of_a_restart_proceeds(solid_queue):
    solid_queue_job(solid_queue)
    verdict = judge(solid_queue.dsn, "solid_queue")
    assert verdict.decision is Decision.PROCEED
    worker = solid_queue_process(solid_queue, timedelta(seconds=10))
    solid_queue_job(solid_queue, process_id=worker, claimed_ago=timedelta(minutes=20))
    verdict = judge(solid_queue.dsn, "solid_queue", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)


def test_solid_queue_index_sql_says_no_index_is_needed(solid_queue):
    for flags in ((), ("--dsn", solid_queue.dsn)):
        done = run_cli("index-sql", "--preset", "solid_queue", *flags)
        assert done.returncode == 0, done.stderr
        assert "no index needed" in done.stdout and "CREATE" not in done.stdout


def test_solid_queue_owners_hidden_by_rls_fail_closed_not_owner_less(solid_queue):
    """A hidden owner row would make its live claim look owner-less (dead): proceed on
    live work. The pre-flight checks the owners' table as it checks the claims table."""
    worker = solid_queue_process(solid_queue, timedelta(seconds=10))
    solid_queue_job(solid_queue, process_id=worker, claimed_ago=timedelta(hours=1))
    with solid_queue.connect() as conn:
        conn.execute("ALTER TABLE solid_queue_processes ENABLE ROW LEVEL SECURITY")
    with pytest.raises(SchemaMismatch, match=r"table public\.solid_queue_processes has row-level"):
        judge(solid_queue.dsn_as("guard_ro"), "solid_queue")
    with solid_queue.connect() as conn:
        conn.execute(
            "CREATE POLICY leaseguard_read ON solid_queue_processes "
            "FOR SELECT TO guard_ro USING (true)"
        )
    assert judge(solid_queue.dsn_as("guard_ro"), "solid_queue").decision is Decision.DEFER


def test_solid_queue_without_its_owners_table_fails_closed_naming_it(solid_queue):
    with solid_queue.connect() as conn:
        conn.execute("ALTER TABLE solid_queue_processes RENAME TO solid_queue_workers")
    with pytest.raises(SchemaMismatch, match=r"table public\.solid_queue_processes \(the owners"):
        judge(solid_queue.dsn, "solid_queue")


# --- que -------------------------------------------------------------------------------------


que = queue_schema(create_que)


def que_job(db, *, run_ago=timedelta(hours=3), done=None, error_count=0):
    """A job as Que::Job.enqueue writes it; `done` is "finished" or "expired"."""
    with db.connect() as conn:
        [job_id] = conn.execute(
            "INSERT INTO que_jobs (job_class, run_at, job_schema_version, error_count, "
            "finished_at, expired_at) VALUES ('Job', now() - %s::interval, 2, %s, "
            "CASE WHEN %s = 'finished' THEN now() END, CASE WHEN %s = 'expired' THEN now() END) "
            "RETURNING id",
            (run_ago, error_count, done, done),
        ).fetchone()
    return job_id


@contextlib.contextmanager
def que_worker(db, *keys):
    """A worker's session holding advisory locks as Que's locker takes them (one bigint each:
    pg_try_advisory_lock(id), lib/que/poller.rb); they go when the session ends."""
    with db.connect() as conn:
        for key in keys:
            assert conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
        yield conn


def test_que_a_job_whose_lock_a_worker_holds_defers_however_long_it_has_run(que):
    job = que_job(que, run_ago=timedelta(hours=30))
    with que_worker(que, job):
        verdict = judge(que.dsn, "que")
        assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)
        assert verdict.live[0].id == str(job) and verdict.live[0].lease_expires_at is None
        # No time lease: the wait is bounded by the preset's task timeout, not by the job.
        assert verdict.lease_s == verdict.wait_upper_bound_s == 3600.0
    verdict = judge(que.dsn, "que")
    assert (verdict.decision, verdict.counts.queued, verdict.counts.live) == (
        Decision.PROCEED,
        1,
        0,
    )


def test_que_queued_jobs_and_done_ones_only_proceed(que):
    que_job(que)  # ready
    que_job(que, run_ago=-timedelta(hours=1))  # scheduled
    que_job(que, run_ago=-timedelta(minutes=5), error_count=3)  # errored, awaiting its retry
    finished = que_job(que, done="finished")
    expired = que_job(que, done="expired", error_count=16)
    verdict = judge(que.dsn, "que")
    assert (verdict.decision, verdict.counts.queued) == (Decision.PROCEED, 3)
    with que_worker(que, finished, expired):  # the moment between finishing and unlocking
        verdict = judge(que.dsn, "que")
    assert (verdict.decision, verdict.counts.live) == (Decision.PROCEED, 0)


def test_que_a_lock_on_an_unrelated_key_protects_nothing(que):
    """Only the one-bigint lock on the job's own id, in this database, is Que's claim."""
    job = que_job(que)
    with que_worker(que, job + 1, -job), que.connect() as two_ints:
        two_ints.execute("SELECT pg_advisory_lock(0, %s)", (job,))  # the two-int4 form
        two_ints.execute("SELECT pg_advisory_lock(%s, 0)", (job,))
        with fresh_database(que.cluster) as elsewhere, que_worker(elsewhere, job):
            verdict = judge(que.dsn, "que")  # the same key, held in another database
    with que_worker(que, job):
        assert judge(que.dsn, "que").decision is Decision.DEFER  # the job's own: a claim
    assert (verdict.decision, verdict.counts.live, verdict.counts.queued) == (
        Decision.PROCEED,
        0,
        1,
    )


def test_que_an_orphan_of_a_restart_vanishes_with_its_session(que):
    """A worker killed mid-job: PostgreSQL ends its session and releases its locks, so the
    job is simply queued again (Que reruns it); no orphan cut-off is involved."""
    job = que_job(que)
    worker = que.connect()
    try:
        assert worker.execute("SELECT pg_try_advisory_lock(%s)", (job,)).fetchone() == (True,)
        assert judge(que.dsn, "que", started_ago=timedelta(seconds=1)).decision is Decision.DEFER
        with que.connect() as admin:
            # The timeout form waits (up to 10 s) for the backend to be gone.
            [ended] = admin.execute(
                "SELECT pg_terminate_backend(%s, 10000)", (worker.info.backend_pid,)
            ).fetchone()
        assert ended
        verdict = judge(que.dsn, "que", started_ago=timedelta(seconds=1))
    finally:
        worker.close()
    assert (verdict.decision, verdict.counts.queued, verdict.counts.orphaned) == (
        Decision.PROCEED,
        1,
        0,
    )


def test_que_the_guard_s_own_lock_is_not_a_claim(que):
    """The guard takes no advisory locks; if its connection held one, it would not be work."""
    job = que_job(que)
    contract = contract_from_mapping({"preset": "que"})
    with que.connect() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (job,))
        verdict = evaluate(
            conn, contract, task_timeout=None, lease_s=3600.0, runtime_started_at=None
        )
    assert (verdict.counts.live, verdict.counts.queued) == (0, 1)


def test_que_without_pg_locks_fails_closed_naming_the_grant(que):
    job = que_job(que)
    with que.connect() as conn:
        conn.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_lock_status() FROM PUBLIC")
    with (
        que_worker(que, job),
        pytest.raises(SchemaMismatch, match=r"cannot read pg_catalog\.pg_locks"),
    ):
        judge(que.dsn_as("guard_ro"), "que")
    with que.connect() as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_lock_status() TO guard_ro")
    with que_worker(que, job):
        assert judge(que.dsn_as("guard_ro"), "que").decision is Decision.DEFER


# --- good_job --------------------------------------------------------------------------------

# GoodJob::AdvisoryLockable#advisory_lock_bigint_sql (its default md5 hash) of '<table>-<id>'.
GOOD_JOB_KEY = "('x' || substr(md5(%s || '-' || %s::text), 1, 16))::bit(64)::bigint"


good_job = queue_schema(create_good_job)


def good_job_process(db, beat_ago, *, advisory=False):
    """A GoodJob::Process row as find_or_create_record writes it: naive UTC timestamps;
    lock_type 0 (advisory) when it is registered with an advisory lock."""
    with db.connect() as conn:
        [process_id] = conn.execute(
            "INSERT INTO good_job_processes (created_at, updated_at, state, lock_type) "
            "VALUES (timezone('UTC', now()), timezone('UTC', now()) - %s::interval, '{}', %s) "
            "RETURNING id",
            (beat_ago, 0 if advisory else None),
        ).fetchone()
    return process_id


def good_job_job(db, *, process_id=None, locked_ago=None, scheduled_in=None, finished=False):
    """A job as GoodJob::Job#perform leaves it while running: locked_by_id = the process,
    locked_at naive UTC; or queued (unlocked), or finished."""
    with db.connect() as conn:
        [job_id] = conn.execute(
            "INSERT INTO good_jobs (queue_name, job_class, active_job_id, created_at, "
            "updated_at, scheduled_at, performed_at, locked_by_id, locked_at, finished_at) "
            "VALUES ('default', 'Job', gen_random_uuid(), timezone('UTC', now()), "
            "timezone('UTC', now()), timezone('UTC', now()) + %s::interval, "
            "timezone('UTC', now()) - %s::interval, %s, timezone('UTC', now()) - %s::interval, "
            "CASE WHEN %s THEN timezone('UTC', now()) END) RETURNING id",
            (scheduled_in, locked_ago, process_id, locked_ago, finished),
        ).fetchone()
    return job_id


@contextlib.contextmanager
def good_job_session(db, table, row_id):
    """A session holding good_job's advisory lock on a row, as its :advisory strategy takes
    it (pg_try_advisory_lock on the md5 key); released when the session ends."""
    with db.connect() as conn:
        locked = conn.execute(
            f"SELECT pg_try_advisory_lock({GOOD_JOB_KEY})", (table, row_id)
        ).fetchone()
        assert locked == (True,)
        yield conn


@pytest.mark.parametrize("zone", ZONES)
def test_good_job_a_long_job_of_a_beating_process_defers_a_lost_heartbeat_proceeds(good_job, zone):
    """The :skiplocked strategy: no lock, only locked_by_id and the owner's updated_at,
    naive UTC, whatever the database's TimeZone. EXPIRED_INTERVAL is 5 minutes."""
    set_database_zone(good_job, zone)
    beating = good_job_process(good_job, timedelta(seconds=30))
    good_job_job(good_job, process_id=beating, locked_ago=timedelta(hours=3))
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.lease_s) == (Decision.DEFER, 300.0)
    assert 265 < verdict.wait_upper_bound_s <= 270
    with good_job.connect() as conn:
        conn.execute(
            "UPDATE good_job_processes SET updated_at = timezone('UTC', now()) - interval "
            "'5 minutes 5 seconds'"
        )
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    nearly = good_job_process(good_job, timedelta(minutes=4, seconds=50))
    good_job_job(good_job, process_id=nearly, locked_ago=timedelta(hours=3))
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 1, 1)


def test_good_job_a_job_whose_advisory_lock_is_held_defers_whatever_its_owner_s_beat(good_job):
    """The default :advisory strategy: the job's own lock proves the work, even when the
    owner row's updated_at is old; when the session ends, the owner's beat decides."""
    silent = good_job_process(good_job, timedelta(minutes=30))
    job = good_job_job(good_job, process_id=silent, locked_ago=timedelta(hours=3))
    with good_job_session(good_job, "good_jobs", job):
        verdict = judge(good_job.dsn, "good_job")
        assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)
        assert verdict.live[0].lease_expires_at is None and verdict.wait_upper_bound_s == 300.0
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def test_good_job_an_advisory_process_lives_exactly_while_its_lock_is_held(good_job):
    """GoodJob::Process.active: lock_type advisory means its lock, not its updated_at."""
    process = good_job_process(good_job, timedelta(hours=1), advisory=True)
    good_job_job(good_job, process_id=process, locked_ago=timedelta(hours=1))
    with good_job_session(good_job, "good_job_processes", process):
        assert judge(good_job.dsn, "good_job").decision is Decision.DEFER
    with good_job.connect() as conn:  # a fresh beat does not revive it without its lock
        conn.execute("UPDATE good_job_processes SET updated_at = timezone('UTC', now())")
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def test_good_job_a_job_whose_process_row_is_gone_proceeds(good_job):
    gone = good_job_process(good_job, timedelta(seconds=5))
    good_job_job(good_job, process_id=gone, locked_ago=timedelta(minutes=2))
    assert judge(good_job.dsn, "good_job").decision is Decision.DEFER
    with good_job.connect() as conn:
        conn.execute("DELETE FROM good_job_processes WHERE id = %s", (gone,))
    verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)


def test_good_job_queued_and_finished_only_proceed(good_job):
    good_job_job(good_job)
    good_job_job(good_job, scheduled_in=timedelta(hours=1))  # scheduled, or a retry's wait
    finished = good_job_job(good_job, finished=True)
    with good_job_session(good_job, "good_jobs", finished):  # done: no longer worked
        verdict = judge(good_job.dsn, "good_job")
    assert (verdict.decision, verdict.counts.queued, verdict.counts.live) == (
        Decision.PROCEED,
        2,
        0,
    )


def test_good_job_an_orphan_of_a_restart_proceeds_unless_its_lock_is_held(good_job):
    """Locked before the worker runtime started: an orphan, unless a live session still
    holds the job's lock (it runs elsewhere, e.g. in a web process's async executor)."""
    beating = good_job_process(good_job, timedelta(seconds=10))
    job = good_job_job(good_job, process_id=beating, locked_ago=timedelta(minutes=20))
    verdict = judge(good_job.dsn, "good_job", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)
    with good_job_session(good_job, "good_jobs", job):
        verdict = judge(good_job.dsn, "good_job", started_ago=timedelta(minutes=5))
    assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)


def test_good_job_owners_hidden_by_rls_or_missing_fail_closed(good_job):
    process = good_job_process(good_job, timedelta(seconds=10))
    good_job_job(good_job, process_id=process, locked_ago=timedelta(minutes=1))
    with good_job.connect() as conn:
        conn.execute("ALTER TABLE good_job_processes ENABLE ROW LEVEL SECURITY")
    with pytest.raises(SchemaMismatch, match=r"table public\.good_job_processes has row-level"):
        judge(good_job.dsn_as("guard_ro"), "good_job")
    with good_job.connect() as conn:
        conn.execute("ALTER TABLE good_job_processes DROP COLUMN lock_type")
    with pytest.raises(SchemaMismatch, match=r"good_job_processes lacks id, lock_type"):
        judge(good_job.dsn, "good_job")


@pytest.mark.parametrize("preset", ["que", "good_job"])
def test_index_sql_says_the_queue_s_own_partial_index_serves(request, preset):
    db = request.getfixturevalue(preset)
    for flags in ((), ("--dsn", db.dsn)):
        done = run_cli("index-sql", "--preset", preset, *flags)
        assert done.returncode == 0, done.stderr
        assert "no index needed" in done.stdout and "CREATE" not in done.stdout


# --- every status classified ------------------------------------------------------------------

# (preset, fixture, insert one row in a state, the enum type of its status column)
STATUS_SYSTEMS = [
    (
        "river",
        "river",
        lambda db, state: river_job(db, state, timedelta(hours=2)),
        "river_job_state",
    ),
    ("oban", "oban", lambda db, state: oban_job(db, state, timedelta(hours=2)), "oban_job_state"),
    (
        "pg-boss",
        "pg_boss",
        lambda db, state: pg_boss_job(db, state, started_ago=timedelta(hours=2)),
        "pgboss.job_state",
    ),
]


def enum_labels(db, type_name):
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT enumlabel::text FROM pg_enum WHERE enumtypid = %s::regtype", (type_name,)
        ).fetchall()
    return {label for (label,) in rows}


@pytest.mark.parametrize(("preset", "fixture", "insert", "enum"), STATUS_SYSTEMS)
def test_a_stock_schema_with_a_row_in_every_state_has_every_status_classified(
    request, preset, fixture, insert, enum
):
    """The preset's three lists are exactly the enum's labels, and a table holding every
    one of them is judged (no UnclassifiedStatus): the stale claim lets the deploy go."""
    db = request.getfixturevalue(fixture)
    contract = contract_from_mapping({"preset": preset})
    labels = enum_labels(db, enum)
    assert set(contract.classified_statuses) == labels
    for state in sorted(labels):
        insert(db, state)
    verdict = judge(db.dsn, preset)
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1
    assert verdict.counts.queued == len(contract.queued_statuses)


def test_a_state_left_out_of_the_preset_s_lists_fails_the_check_naming_it(river):
    """Walked through River's own index (it leads with state): a discarded job is found
    when finished_statuses leaves it out, and is no obstacle until one exists."""
    narrowed = {"finished_statuses": ["completed", "cancelled"]}
    river_job(river, "completed", timedelta(hours=2))
    assert judge(river.dsn, "river", **narrowed).decision is Decision.PROCEED
    river_job(river, "discarded", timedelta(hours=2))
    with pytest.raises(UnclassifiedStatus, match='"discarded" \\(1 row\\)'):
        judge(river.dsn, "river", **narrowed)
    assert judge(river.dsn, "river").decision is Decision.PROCEED


def test_a_state_the_queue_grows_after_the_pre_flight_is_found_on_the_next_check(river):
    """The enum's labels are re-read on every check: a label added since the session's
    pre-flight, once a row holds it, fails the check; the label alone does not."""
    contract = contract_from_mapping({"preset": "river"})
    started = datetime.now(UTC) - RESTART
    with local_session(contract, river.dsn, runtime_started_at=started) as session:
        assert session.judge().decision is Decision.PROCEED
        with river.connect() as conn:
            conn.execute("ALTER TYPE river_job_state ADD VALUE 'paused'")
        assert session.judge().decision is Decision.PROCEED
        river_job(river, "paused", timedelta(minutes=1))
        with pytest.raises(UnclassifiedStatus, match='"paused"'):
            session.judge()


def test_graphile_worker_has_no_status_column_to_classify(graphile):
    """Its rule is locked_at: the status check does not look for a `status` column."""
    contract = contract_from_mapping({"preset": "graphile_worker"})
    assert not contract.has_status_column
    graphile_job(graphile, locked_ago=timedelta(hours=1))
    assert judge(graphile.dsn, "graphile_worker").decision is Decision.DEFER


# --- the preset is a base layer --------------------------------------------------------------


def test_every_explicit_key_overrides_the_preset():
    contract = load_contract({"preset": "oban"}, {"schema": "jobs", "claimed_at_column": "started"})
    assert (contract.schema, contract.table) == ("jobs", "oban_jobs")
    assert contract.claimed_at_column == "started"
    assert contract.task_timeout.value_s == 7200.0  # the installer's rescue_after


# --- every front takes the preset ------------------------------------------------------------


run_cli = leaseguard


def test_cli_check_takes_preset_and_a_yaml_preset_with_flags_over_it(river, tmp_path):
    river_job(river, "running", timedelta(minutes=59))
    started = (datetime.now(UTC) - RESTART).isoformat()
    done = run_cli(
        "check", "--preset", "river", "--dsn", river.dsn, "--json", "--runtime-started-at", started
    )
    assert done.returncode == 75, done.stderr
    assert json.loads(done.stdout)["lease_s"] == 3600.0
    config = tmp_path / "leaseguard.yaml"
    config.write_text("leaseguard:\n  preset: river\n")
    done = run_cli(
        "check",
        "--config",
        str(config),
        "--dsn",
        river.dsn,
        "--json",
        "--runtime-started-at",
        started,
        "--task-timeout-s",
        "600",
    )
    assert done.returncode == 0, done.stderr  # the flag's 10 min lease beats the preset's hour


@pytest.mark.parametrize(
    ("preset", "create", "index"),
    [
        ("river", create_river, "river_job_prioritized_fetching_index"),
        ("oban", create_oban, "oban_jobs_state_queue_priority_scheduled_at_id_index"),
    ],
)
def test_index_sql_preset_names_the_queue_s_own_index(db, preset, create, index):
    with db.connect() as conn:
        create(conn)
    done = run_cli("index-sql", "--preset", preset, "--dsn", db.dsn)
    assert done.returncode == 0, done.stderr
    assert "already serve" in done.stdout and index in done.stdout
    assert "CREATE INDEX" not in done.stdout


def test_fabric_config_takes_preset():
    settings = settings_from_config({"leaseguard": {"preset": "oban", "schema": "jobs"}})
    assert settings.contract.table == "oban_jobs"
    assert settings.contract.schema == "jobs"
    assert settings.contract.timestamp_zone == "UTC"


# --- timestamps of any precision, every contract ---------------------------------------------


@pytest.mark.parametrize(
    ("column_type", "accepted"),
    [
        ("timestamp(6) without time zone", True),
        ("timestamp(0) without time zone", True),
        ("timestamp(3) with time zone", True),
        ("timestamptz", True),
        ("date", False),
        ("text", False),
    ],
)
def test_the_pre_flight_accepts_a_timestamp_of_any_precision_only(db, column_type, accepted):
    with db.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE runs (id int, status text, claimed_at {})").format(
                sql.SQL(column_type)
            )
        )
        conn.execute("INSERT INTO runs VALUES (1, 'running', now()::timestamp::text::date)")
    contract = contract_from_mapping(
        {
            "table": "runs",
            "task_timeout": {"source": "fixed", "value_s": 3600 * 24 * 3},
            "timestamp_zone": "UTC",  # a naive column needs its zone declared
        }
    )
    started = datetime.now(UTC) - timedelta(days=7)
    if accepted:
        with local_session(contract, db.dsn, runtime_started_at=started) as session:
            assert session.judge().decision is Decision.DEFER
    else:
        with (
            pytest.raises(SchemaMismatch, match=r"claimed_at .*expected a timestamp"),
            local_session(contract, db.dsn, runtime_started_at=started) as session,
        ):
            session.judge()
