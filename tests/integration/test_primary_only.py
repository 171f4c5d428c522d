"""Only the primary can say what is live now: a real streaming standby is refused by name.

A standby replays the primary's writes late (recovery_min_apply_delay) or not at all while
replay is paused: the claim taken on the primary is not there yet, and a guard reading the
standby would say "proceed" over live work. Both directions: the primary defers on the live
claim and proceeds once it is gone; the standby is refused either way, by every front's
core (the session) and through the CLI (exit 1, the standby named).
"""

from datetime import UTC, datetime, timedelta

import pytest

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import NotPrimary
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import local_session
from sandbox.pgcluster import GUARD_RO_ROLE
from sandbox.runs_table import create_runs_table
from tests.support.leaseguard_cli import leaseguard
from tests.support.standby import primary_with_standby
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DB = "app"


@pytest.fixture(scope="module")
def clusters():
    """(primary, standby) with the app database and its runs table replayed on both."""
    with primary_with_standby() as (primary, standby):
        with primary.connect(socket=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        with primary.connect(DB, socket=True) as conn:
            create_runs_table(conn)
        assert wait_until(lambda: _caught_up(primary, standby), timeout_s=30)
        yield primary, standby


@pytest.fixture
def replay_paused(clusters):
    """The standby stops replaying (as a delayed or paused replica does); resumed after."""
    primary, standby = clusters
    with primary.connect(DB, socket=True) as conn:
        conn.execute("TRUNCATE execution_runs")
    assert wait_until(lambda: _caught_up(primary, standby), timeout_s=30)
    with standby.connect(socket=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    yield primary, standby
    with standby.connect(socket=True) as conn:
        conn.execute("SELECT pg_wal_replay_resume()")


def _caught_up(primary, standby):
    """The standby has replayed everything the primary has written so far."""
    with primary.connect(socket=True) as conn:
        written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    with standby.connect(socket=True) as conn:
        query = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
        return conn.execute(query, (written,)).fetchone()[0]


def _rows(cluster):
    with cluster.connect(DB, socket=True) as conn:
        return conn.execute("SELECT count(*) FROM execution_runs").fetchone()[0]


def judged(cluster):
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, cluster.dsn(DB), task_timeout_s=3600.0) as session:
        return session.judge()


def claim(primary, status, age):
    with primary.connect(DB, socket=True) as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, %s, %s)",
            (status, datetime.now(UTC) - age),
        )


def test_a_live_claim_the_standby_has_not_replayed_defers_on_the_primary_and_refuses_the_standby(
    replay_paused,
):
    primary, standby = replay_paused
    claim(primary, "running", timedelta(minutes=5))
    assert _rows(standby) == 0  # the standby would count nothing: "proceed" on live work
    assert judged(primary).decision is Decision.DEFER
    with pytest.raises(NotPrimary, match=r"connected to a standby \(database app at 127\.0\.0\.1"):
        judged(standby)


def test_with_nothing_live_the_primary_proceeds_and_the_standby_is_still_refused(replay_paused):
    primary, standby = replay_paused
    claim(primary, "open", timedelta(0))
    assert judged(primary).decision is Decision.PROCEED
    with pytest.raises(NotPrimary, match="pg_is_in_recovery"):
        judged(standby)


def test_the_cli_refuses_a_standby_with_exit_1_naming_it(clusters):
    _, standby = clusters
    done = leaseguard(
        *("check", "--dsn", standby.dsn(DB), "--task-timeout-s", "3600", "--json"),
        *("--runtime-started-at", "2026-01-01T00:00:00Z"),
    )
    assert done.returncode == 1, done.stderr
    assert "NotPrimary" in done.stdout and "connected to a standby" in done.stderr
    assert '"decision": "failed"' in done.stdout


def test_a_standby_is_refused_on_a_later_poll_too(clusters):
    """The counts query itself asks: a drain's poll that skips the catalog pre-flight (its
    connection read it already) still refuses a standby."""
    _, standby = clusters
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    from leaseguard.adapters.catalog import StatusColumn
    from leaseguard.adapters.db import connect
    from tests.support.judging import judge_table

    known = StatusColumn(enum_labels=None, not_null=True, index_key=None)
    with connect(standby.dsn(DB), 10) as conn, pytest.raises(NotPrimary, match="standby"):
        judge_table(
            conn,
            contract,
            task_timeout=None,
            lease_s=7200.0,
            runtime_started_at=None,
            status_column=known,
        )


# --- a logical replication subscriber: not in recovery, still a copy ----------------------------


@pytest.fixture
def subscriber(db):
    """execution_runs as a subscription applies it, the publisher's live claim not applied yet
    (only a queued row). The subscription is made without connecting (the test cluster takes
    no replication connections) and its table recorded in pg_subscription_rel as a refresh
    would record it; the guard reads only that catalog."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute("INSERT INTO execution_runs (id, status) VALUES (2, 'open')")
        conn.execute(
            "CREATE SUBSCRIPTION runs_copy CONNECTION 'dbname=publisher' PUBLICATION runs "
            "WITH (connect = false, slot_name = NONE)"
        )
        conn.execute(
            "INSERT INTO pg_catalog.pg_subscription_rel (srsubid, srrelid, srsubstate) "
            "SELECT s.oid, 'execution_runs'::regclass, 'r' FROM pg_catalog.pg_subscription AS s "
            "WHERE s.subname = 'runs_copy'"
        )
    yield db
    with db.connect() as conn:
        conn.execute("DROP SUBSCRIPTION IF EXISTS runs_copy")


def judged_on(dsn):
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        return session.judge()


def test_a_subscriber_s_copy_is_refused_for_the_guard_s_role_and_through_the_cli(subscriber):
    with pytest.raises(NotPrimary, match=r"subscriber's copy .*point the guard at the publisher"):
        judged_on(subscriber.dsn_as(GUARD_RO_ROLE))
    with subscriber.connect() as conn:  # not through pg_read_all_data: every role reads it
        readable = "SELECT has_table_privilege('public', 'pg_subscription_rel', 'SELECT')"
        assert conn.execute(readable).fetchone()[0] is True
    done = leaseguard(
        *("check", "--dsn", subscriber.dsn, "--task-timeout-s", "3600"),
        *("--runtime-started-at", "2026-01-01T00:00:00Z"),
    )
    assert done.returncode == 1 and "subscriber's copy" in done.stderr, done.stderr


def test_the_same_table_no_longer_subscribed_is_judged(subscriber):
    with subscriber.connect() as conn:
        conn.execute("DROP SUBSCRIPTION runs_copy")
    assert judged_on(subscriber.dsn_as(GUARD_RO_ROLE)).decision is Decision.PROCEED


@pytest.fixture(scope="module")
def two_clusters():
    """Two independent clusters, the first with a live claim, the second with none, and a DSN
    listing both hosts (libpq tries them in turn)."""
    from psycopg.conninfo import make_conninfo

    from sandbox.pgcluster import PG_BASE_DIR, PgCluster

    with PgCluster(PG_BASE_DIR) as first, PgCluster(PG_BASE_DIR) as second:
        for cluster in (first, second):
            with cluster.connect(socket=True) as conn:
                conn.execute(f"CREATE DATABASE {DB}")
            with cluster.connect(DB, socket=True) as conn:
                create_runs_table(conn)
        claim(first, "running", timedelta(minutes=10))
        hosts = dict(host=f"{first.host},{second.host}", port=f"{first.port},{second.port}")
        yield first, second, make_conninfo(first.dsn(DB), **hosts)


def _two_polls(dsn, between):
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        first = session.judge()
        between()
        return first, session.judge()


def test_a_reconnect_to_the_same_database_judges_on(two_clusters):
    """The guard's backend ended between two polls: the new connection reaches the same
    cluster (the first host of the list) and the live claim still defers."""
    first, _, dsn = two_clusters
    end = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
    first_poll, second_poll = _two_polls(
        dsn, lambda: first.connect(socket=True).execute(end, ("leaseguard",))
    )
    assert first_poll.decision == second_poll.decision == Decision.DEFER


def test_a_reconnect_that_lands_on_another_cluster_is_refused(two_clusters):
    """A host list in the DSN: the first cluster goes down mid-drain and libpq's reconnect
    lands on the second, another cluster with an empty table; judging it said "proceed"
    over the first's live claim, and the intake's pg_cron jobs were given back there. The
    session refuses a cluster other than its first, for the judgment and the intake alike."""
    first, _, dsn = two_clusters
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        assert session.judge().decision == Decision.DEFER
        session.connect_writable().close()  # the intake's, on the same cluster: taken
        first.stop()
        with pytest.raises(NotPrimary, match="not the one this session began on"):
            session.connect_writable().close()
        with pytest.raises(NotPrimary) as refused:
            session.judge()
    assert "not the one this session began on" in str(refused.value)
    assert "point the DSN at the primary alone" in str(refused.value)
