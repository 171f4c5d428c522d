"""The guard's own session: read-only, time-boxed, named, safe with hostile identifiers."""

import logging
import os
import signal
import threading
import time

import psycopg
import pytest
from psycopg import sql

from leaseguard.adapters.db import connect, guard_transaction
from leaseguard.adapters.guard import lease_seconds
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import (
    DatabaseUnavailable,
    GuardQueryFailed,
    SchemaMismatch,
    UnclassifiedStatus,
)
from leaseguard.core.verdict import TaskTimeout
from leaseguard.orchestration.session import local_session
from sandbox.runs_table import create_runs_table
from tests.support.judging import evaluate, judge_table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TIMEOUT = TaskTimeout(3600.0, "given:task_timeout_s")


def run_check(dsn, **keys):
    contract = contract_from_mapping(keys)
    lease_s = lease_seconds(contract, TIMEOUT)
    with connect(dsn, contract.connect_timeout_s) as conn:
        return evaluate(
            conn, contract, task_timeout=TIMEOUT, lease_s=lease_s, runtime_started_at=None
        )


def test_the_guard_transaction_is_read_only_and_named_leaseguard(db):
    contract = contract_from_mapping({})
    with (
        connect(db.dsn, contract.connect_timeout_s) as conn,
        guard_transaction(conn, contract) as cur,
    ):
        cur.execute("SHOW transaction_read_only")
        assert cur.fetchone()[0] == "on"
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "5s"
        cur.execute("SHOW lock_timeout")
        assert cur.fetchone()[0] == "2s"
        cur.execute("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()")
        assert cur.fetchone()[0] == "leaseguard"
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("CREATE TABLE should_not_exist (x int)")


def test_a_table_name_with_a_space_works(db):
    with db.connect() as conn:
        create_runs_table(conn, "Execution Runs")
        conn.execute(
            """INSERT INTO "Execution Runs" (id, status, claimed_at) VALUES (1, 'running', now())"""
        )
    assert run_check(db.dsn, table="Execution Runs").counts.live == 1


def test_a_hostile_table_name_is_only_ever_a_name(db):
    with db.connect() as conn:
        create_runs_table(conn, "victim")
    with pytest.raises(SchemaMismatch) as caught:
        run_check(db.dsn, table="runs; drop table victim; --")
    assert "runs; drop table victim; --" in str(caught.value)
    with db.connect() as conn:
        create_runs_table(conn, "runs; drop table victim; --")
    assert run_check(db.dsn, table="runs; drop table victim; --").counts.live == 0
    assert db.psql("select count(*) from pg_tables where tablename = 'victim'").strip() == "1"


def test_hostile_column_names_and_statuses_are_bound_not_executed(db):
    with db.connect() as conn:
        create_runs_table(conn)
        create_runs_table(conn, "victim")
    with pytest.raises(SchemaMismatch, match="column"):
        run_check(db.dsn, status_column='status" = status; drop table victim; --')
    verdict = run_check(db.dsn, claimed_statuses=["running'); drop table victim; --"])
    assert verdict.counts.live == 0
    assert db.psql("select count(*) from pg_tables where tablename = 'victim'").strip() == "1"


def test_a_missing_table_is_named(db):
    with pytest.raises(SchemaMismatch, match="table execution_runs does not exist"):
        run_check(db.dsn)


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"claimed_at_column": "taken_at"}, "column taken_at (claimed_at_column)"),
        ({"status_column": "state"}, "column state (status_column)"),
        ({"id_column": "run_id"}, "column run_id (id_column)"),
        ({"lease": {"expires_at_column": "expires"}}, "column expires (lease.expires_at_column)"),
    ],
)
def test_a_missing_column_is_named_with_its_contract_key(db, keys, named):
    with db.connect() as conn:
        create_runs_table(conn)
    with pytest.raises(SchemaMismatch) as caught:
        run_check(db.dsn, **keys)
    assert str(caught.value) == f"{named} does not exist in table execution_runs"


def test_a_claimed_at_column_that_is_not_a_timestamp_is_refused(db):
    with db.connect() as conn:
        create_runs_table(conn)
    with pytest.raises(SchemaMismatch, match="has type text, expected a timestamp"):
        run_check(db.dsn, claimed_at_column="status")


def test_timestamp_without_time_zone_columns_are_judged_too(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE execution_runs (id int, status text, claimed_at timestamp)")
        conn.execute(
            "INSERT INTO execution_runs VALUES (1, 'running', localtimestamp - interval '30 min'),"
            " (2, 'running', localtimestamp - interval '3 hours')"
        )
    verdict = run_check(db.dsn, timestamp_zone="UTC")
    assert (verdict.counts.live, verdict.counts.stale) == (1, 1)


def test_a_table_locked_by_a_migration_fails_closed_within_the_lock_budget(db):
    with db.connect() as conn:
        create_runs_table(conn)
    locked = threading.Event()
    release = threading.Event()

    def migration():
        with psycopg.connect(db.dsn) as conn:
            conn.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=migration)
    holder.start()
    try:
        assert locked.wait(10)
        began = time.monotonic()
        with pytest.raises(GuardQueryFailed) as caught:
            run_check(db.dsn, lock_timeout_ms=300, statement_timeout_ms=1000)
        assert time.monotonic() - began < 30  # a hang guard, not a speed claim
        assert "table execution_runs is locked" in str(caught.value)
    finally:
        release.set()
        holder.join()


def test_a_slow_guard_query_is_cancelled_by_its_own_statement_timeout(db):
    with db.connect() as conn:
        create_runs_table(conn, "runs_base")
        conn.execute("CREATE VIEW execution_runs AS SELECT r.* FROM runs_base r, pg_sleep(3) AS s")
    with pytest.raises(GuardQueryFailed, match="exceeded statement_timeout=200ms"):
        run_check(db.dsn, statement_timeout_ms=200, relation_kind="view")


@pytest.fixture
def bare_role(db):
    """A login role with no privileges at all, dropped afterwards."""
    name = f"bare_{db.name}"
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with db.connect() as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_missing_select_privilege_says_what_to_grant(db, bare_role):
    with db.connect() as conn:
        create_runs_table(conn)
    with pytest.raises(GuardQueryFailed, match="permission denied reading table execution_runs"):
        run_check(db.dsn_as(bare_role))


def test_granting_select_is_all_the_guard_needs(db, bare_role):
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            sql.SQL("GRANT SELECT ON execution_runs TO {}").format(sql.Identifier(bare_role))
        )
    assert run_check(db.dsn_as(bare_role)).counts.live == 0


def test_a_wrong_password_fails_without_repeating_it(db):
    dsn = db.dsn_as("guard_pw", password="wrong-secret-pw")
    with pytest.raises(DatabaseUnavailable) as caught:
        run_check(dsn)
    message = str(caught.value)
    assert "authentication failed" in message
    assert "wrong-secret-pw" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


NO_RUNTIME = contract_from_mapping({"runtime": {"source": "none"}})


def leaseguard_backends(db):
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'leaseguard' "
            "AND datname = current_database()"
        ).fetchall()
    return [row[0] for row in rows]


def test_a_drains_polls_share_one_connection_which_closes_with_the_session(db):
    with db.connect() as conn:
        create_runs_table(conn)
    contract = NO_RUNTIME
    with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
        session.judge()
        first = leaseguard_backends(db)
        session.judge()
        session.judge()
        assert leaseguard_backends(db) == first
        assert len(first) == 1
    # The server ends the backend a moment after the client closes: wait for it, bounded.
    assert wait_until(lambda: leaseguard_backends(db) == [], timeout_s=10)


def test_a_connection_the_server_dropped_between_polls_is_replaced_without_a_failed_poll(db):
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    contract = NO_RUNTIME
    with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
        assert session.judge().counts.live == 1
        with db.connect() as conn:
            for pid in leaseguard_backends(db):
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert session.judge().counts.live == 1


def test_a_poll_still_fails_when_a_fresh_connection_fails_too(db):
    with db.connect() as conn:
        create_runs_table(conn)
    contract = NO_RUNTIME
    with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
        session.judge()
        with db.connect() as conn:
            conn.execute("DROP TABLE execution_runs")
        with pytest.raises(SchemaMismatch):
            session.judge()


def test_a_column_dropped_mid_session_fails_the_poll_and_names_the_column(db):
    """Later polls skip the schema pre-flight, but a vanished column still fails closed."""
    with db.connect() as conn:
        create_runs_table(conn)
    with local_session(NO_RUNTIME, db.dsn, task_timeout_s=3600.0) as session:
        session.judge()
        session.judge()
        with db.connect() as conn:
            conn.execute("ALTER TABLE execution_runs DROP COLUMN claimed_at")
        with pytest.raises(SchemaMismatch, match=r"column claimed_at \(claimed_at_column\)"):
            session.judge()


# --- a poll is retried on a fresh connection only when the connection itself broke -------


def _session(db, **keys):
    contract = contract_from_mapping({"runtime": {"source": "none"}, **keys})
    return local_session(contract, db.dsn, task_timeout_s=3600.0)


def guard_backend(db) -> int:
    """The session's one backend, as the server lists it."""
    [pid] = leaseguard_backends(db)
    return pid


def test_a_lock_timeout_on_a_reused_connection_costs_one_budget_not_two(db):
    with db.connect() as conn:
        create_runs_table(conn)
    with _session(db, lock_timeout_ms=1500, statement_timeout_ms=3000) as session:
        session.judge()
        pid = guard_backend(db)
        with psycopg.connect(db.dsn) as holder:
            holder.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
            began = time.monotonic()
            with pytest.raises(GuardQueryFailed, match="is locked"):
                session.judge()
            spent = time.monotonic() - began
            holder.rollback()
        assert spent < 2 * 1.5  # a retry would wait for the lock a second time
        assert leaseguard_backends(db) == [pid]  # not replaced: the connection was fine
        assert session.judge().decision == "proceed"


def test_each_poll_of_a_session_judges_the_table_afresh(db):
    """Both ways, and after a failed poll; the connection closes with the session."""
    with db.connect() as conn:
        create_runs_table(conn)
    with _session(db, lock_timeout_ms=1500) as session:
        assert session.judge().decision == "proceed"
        with db.connect() as conn:
            conn.execute(
                "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
            )
        assert session.judge().decision == "defer"
        with psycopg.connect(db.dsn) as holder:
            holder.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(GuardQueryFailed, match="is locked"):
                session.judge()
            holder.rollback()
        assert session.judge().decision == "defer"
        with db.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        assert session.judge().decision == "proceed"
    assert wait_until(lambda: leaseguard_backends(db) == [], timeout_s=10)


def test_a_schema_error_on_a_reused_connection_is_not_retried(db):
    with db.connect() as conn:
        create_runs_table(conn)
    with _session(db) as session:
        session.judge()
        pid = guard_backend(db)
        with db.connect() as conn:
            conn.execute("DROP TABLE execution_runs")
        with pytest.raises(SchemaMismatch):
            session.judge()
        assert leaseguard_backends(db) == [pid]


def test_a_terminated_backend_is_replaced_once_and_the_poll_succeeds(db):
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    with _session(db) as session:
        assert session.judge().decision == "defer"
        pid = guard_backend(db)
        with db.connect() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert session.judge().decision == "defer"  # retried on a fresh connection
        assert wait_until(lambda: pid not in leaseguard_backends(db), timeout_s=10)
        assert len(leaseguard_backends(db)) == 1


def test_a_terminated_backend_that_cannot_reconnect_fails_closed(db):
    with db.connect() as conn:
        create_runs_table(conn)
    database = sql.Identifier(db.name)
    with _session(db) as session:
        session.judge()
        pid = guard_backend(db)
        with db.cluster.connect("postgres") as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(database))
            try:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                with pytest.raises(DatabaseUnavailable):
                    session.judge()
            finally:
                admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(database))


def _judged(conn, contract, column=None):
    return judge_table(
        conn,
        contract,
        task_timeout=TIMEOUT,
        lease_s=7200.0,
        runtime_started_at=None,
        status_column=column,
    )


def test_a_failed_check_leaves_its_connection_as_it_found_it_and_psycopg_silent(db, caplog):
    """A database error in the middle of a check, an error of the guard's own, and a backend
    that dies under it each end the transaction, give the connection back in its own mode,
    and leave no driver text in the logs (psycopg warns when a rollback fails)."""
    with db.connect() as conn:
        create_runs_table(conn)
    contract = contract_from_mapping({"runtime": {"source": "none"}, "lock_timeout_ms": 300})
    idle = psycopg.pq.TransactionStatus.IDLE
    with caplog.at_level(logging.WARNING, logger="psycopg"), connect(db.dsn, 5) as guard:
        verdict, column = _judged(guard, contract)
        assert verdict.decision == "proceed"
        with psycopg.connect(db.dsn) as holder:
            holder.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(GuardQueryFailed, match="is locked"):
                _judged(guard, contract, column)
        assert guard.info.transaction_status == idle and not guard.autocommit
        with db.connect() as conn:
            conn.execute("INSERT INTO execution_runs (id, status) VALUES (1, 'runing')")
        with pytest.raises(UnclassifiedStatus, match="runing"):
            _judged(guard, contract, column)
        assert guard.info.transaction_status == idle and not guard.autocommit
        with db.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'running', claimed_at = now()")
        assert _judged(guard, contract, column)[0].decision == "defer"
        with db.connect() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (guard.info.backend_pid,))
        with pytest.raises(DatabaseUnavailable, match="connection lost"):
            _judged(guard, contract, column)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


def backend_alive(db, pid: int) -> bool:
    with db.connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        return row.fetchone()[0] == 1


def test_a_reconnect_ends_the_backend_a_lost_connection_left_open(db):
    """A partition loses the client side only: the server (behind the host's sshd) keeps the
    old backend open, idle, for hours; the connection that replaces it ends it."""
    with db.connect() as conn:
        create_runs_table(conn)
    with local_session(NO_RUNTIME, db.dsn, task_timeout_s=3600.0) as session:
        session.judge()
        assert session._conn is not None
        lost, fd = session._conn.info.backend_pid, session._conn.pgconn.socket
        kept = os.dup(fd)  # the socket stays open: the server never hears of the loss
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, fd)  # the client side is gone, as behind a dead link
        os.close(null)
        try:
            assert backend_alive(db, lost)
            # The poll meets the lost connection and replaces it (once, within the poll).
            assert session.judge().decision.value == "proceed"
            assert session._conn.info.backend_pid != lost
            assert wait_until(lambda: not backend_alive(db, lost), timeout_s=10)
        finally:
            os.close(kept)


def test_after_a_poll_cut_by_its_watchdog_intake_can_still_be_given_back(db):
    """A poll past its budget (its backend frozen) fails closed; the resume of intake that
    follows on the same session connects, rather than failing for the poll's spent budget."""
    with db.connect() as conn:
        create_runs_table(conn)
    keys = {"connect_timeout_s": 1, "statement_timeout_ms": 500, "lock_timeout_ms": 400}
    with _session(db, **keys) as session:
        session.judge()
        pid = guard_backend(db)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(DatabaseUnavailable, match="no answer"):
                session.judge()
        finally:
            os.kill(pid, signal.SIGCONT)
        with session.connect_writable() as writable:
            assert writable.execute("SELECT 1").fetchone() == (1,)


def _cutting_proxy(host: str, port: int, trigger: bytes) -> int:
    """A TCP relay to host:port that drops both ends once the client sends `trigger`."""
    import contextlib
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def pump(src: socket.socket, dst: socket.socket, cut: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if cut and trigger in data:
                    break
                dst.sendall(data)
        for end in (src, dst):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection((host, port))
            threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1])


def test_a_connection_lost_while_reading_the_database_clock_fails_closed_without_driver_text(db):
    """`leaseguard check` with a runtime start time reads the database's clock after the
    pre-flight: its connection lost right there (a relay that drops it as the clock query
    passes) is DatabaseUnavailable in the failure JSON, no traceback."""
    import json
    from datetime import UTC, datetime, timedelta

    from psycopg.conninfo import make_conninfo

    from tests.support.leaseguard_cli import leaseguard

    with db.connect() as conn:
        create_runs_table(conn)
    port = _cutting_proxy(db.cluster.host, db.cluster.port, b"clock_timestamp")
    dsn = make_conninfo(db.dsn, host="127.0.0.1", port=port, sslmode="disable")
    started = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    done = leaseguard(
        "check", "--dsn", dsn, "--task-timeout-s", "3600", "--runtime-started-at", started, "--json"
    )
    assert done.returncode == 1, done.stderr
    failure = json.loads(done.stdout)
    assert failure["decision"] == "failed"
    assert failure["error"]["type"] == "DatabaseUnavailable"
    for leak in ("Traceback", "terminating connection", "psycopg", "FATAL"):
        assert leak not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "migration",
    [
        ["ALTER TABLE execution_runs ALTER COLUMN status TYPE varchar(40)"],
        [
            "CREATE TEMP TABLE kept AS SELECT * FROM execution_runs",
            "TRUNCATE execution_runs",
            "INSERT INTO execution_runs SELECT * FROM kept",
        ],
        [
            "CREATE TABLE runs_copy (LIKE execution_runs INCLUDING ALL)",
            "INSERT INTO runs_copy SELECT * FROM execution_runs",
            "ALTER TABLE execution_runs RENAME TO runs_old",
            "ALTER TABLE runs_copy RENAME TO execution_runs",
        ],
    ],
    ids=["alter-table-rewrite", "truncate-and-refill", "swapped-for-a-copy"],
)
@pytest.mark.parametrize(("status", "live"), [("running", 1), ("done", 0)])
def test_a_table_rewritten_while_the_guard_waits_for_its_lock_is_read_again(
    db, migration, status, live
):
    """A migration rewrites the table (ALTER TABLE ... TYPE, TRUNCATE and refill) and commits
    while the guard's read waits for its lock: a snapshot taken before a rewrite sees the table
    empty (not MVCC-safe), which said "proceed" over a live claim. The guard reads it again in
    a new snapshot: the live claim defers; a finished one still proceeds."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, %s, now())", (status,)
        )
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with db.connect() as migrating:
        migrating.execute("BEGIN")
        for statement in migration:
            migrating.execute(statement)
        judged = {}

        def guard():
            with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
                judged["verdict"] = session.judge()

        thread = threading.Thread(target=guard)
        thread.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted"
        assert wait_until(lambda: migrating.execute(waiting).fetchone()[0] == 1, timeout_s=10)
        migrating.execute("COMMIT")
        thread.join(timeout=30)
    verdict = judged["verdict"]
    assert verdict.counts.live == live
    assert verdict.decision == ("defer" if live else "proceed")


def test_a_table_rewritten_again_under_the_second_read_fails_closed(db):
    """Two migrations in a row, each committing while the guard waits for its lock: the
    second read is as blind as the first, so the guard names the rewrite and judges nothing."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted"
    with db.connect() as first, db.connect() as second, db.connect() as observer:
        first.execute("BEGIN")
        first.execute("ALTER TABLE execution_runs ALTER COLUMN status TYPE varchar(40)")
        outcome = {}

        def guard():
            try:
                with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
                    outcome["verdict"] = session.judge()
            except GuardQueryFailed as exc:
                outcome["error"] = exc

        judging = threading.Thread(target=guard)
        judging.start()
        assert wait_until(lambda: observer.execute(waiting).fetchone()[0] == 1, timeout_s=10)
        second.execute("BEGIN")
        rewriting = threading.Thread(
            target=second.execute,
            args=(  # USING an expression: rewritten even to the same type
                "ALTER TABLE execution_runs ALTER COLUMN claimed_at TYPE timestamptz "
                "USING claimed_at + interval '0 s'",
            ),
        )
        rewriting.start()
        assert wait_until(lambda: observer.execute(waiting).fetchone()[0] == 2, timeout_s=10)
        first.execute("COMMIT")  # the guard reads first, then the second rewrite runs
        rewriting.join(timeout=10)
        assert wait_until(lambda: observer.execute(waiting).fetchone()[0] == 1, timeout_s=10)
        second.execute("COMMIT")
        judging.join(timeout=30)
    assert "verdict" not in outcome
    assert type(outcome["error"]) is GuardQueryFailed
    assert "table execution_runs was rewritten or replaced" in str(outcome["error"])
