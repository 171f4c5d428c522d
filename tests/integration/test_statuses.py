"""Every status in the table is classified, against a real PostgreSQL, in both directions.

A status in none of claimed_statuses, queued_statuses and finished_statuses fails the check
(exit 1) and is named with its row count; correct lists still proceed or defer as before.
"""

from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from leaseguard.adapters.db import connect
from leaseguard.adapters.guard import COUNT_CAP, MAX_NAMED
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import ConfigError, UnclassifiedStatus
from leaseguard.core.verdict import Decision, TaskTimeout
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.judging import evaluate, judge_table
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)
TIMEOUT = TaskTimeout(3600.0, "given:task_timeout_s")
LIVE = (1, "running", NOW - timedelta(minutes=5), None)


@pytest.fixture
def runs(db):
    with db.connect() as conn:
        create_runs_table(conn)
    return db


def fill(db, rows):
    with db.connect() as conn:
        insert_runs(conn, rows)


def judge(db, **keys):
    contract = contract_from_mapping(keys)
    with connect(db.dsn, contract.connect_timeout_s) as conn:
        return evaluate(
            conn, contract, task_timeout=TIMEOUT, lease_s=7200.0, runtime_started_at=None
        )


def status_index(db, expression="status"):
    with db.connect() as conn:
        conn.execute(f"CREATE INDEX runs_status ON execution_runs ({expression})")


def cli_check(db, *flags):
    facts = ["--task-timeout-s", "3600", "--runtime-started-at", "2000-01-01T00:00:00Z"]
    return leaseguard("check", "--dsn", db.dsn, *facts, *flags)


@pytest.mark.parametrize("typo", ["runing", "Running"])
def test_a_mistyped_claimed_status_fails_naming_the_live_status_and_its_rows(runs, typo):
    fill(runs, [LIVE, (2, "done", None, None)])
    done = cli_check(runs, "--claimed-status", typo)
    assert done.returncode == 1, done.stdout + done.stderr  # was 0, proceed
    assert '"running" (1 row)' in done.stderr
    assert "decision=failed" in done.stdout
    assert "finished_statuses" in done.stderr


def test_the_right_lists_still_defer_and_proceed(runs):
    fill(runs, [LIVE, (2, "open", None, None), (3, "done", None, None), (4, "failed", None, None)])
    assert cli_check(runs).returncode == 75
    with runs.connect() as conn:
        conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
    assert cli_check(runs).returncode == 0


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index-walk"])
def test_finished_rows_never_block(runs, indexed):
    if indexed:
        status_index(runs)
    fill(runs, [(i, "done" if i % 2 else "failed", NOW, NOW) for i in range(1, 50)])
    verdict = judge(runs)
    assert verdict.decision is Decision.PROCEED
    assert vars(verdict.counts) == {"live": 0, "stale": 0, "orphaned": 0, "queued": 0}


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index-walk"])
def test_queued_and_finished_rows_beside_an_unknown_status_fail(runs, indexed):
    if indexed:
        status_index(runs)
    rows = [(1, "open", None, None), (2, "done", None, None), (3, "failed", None, None)]
    rows += [(4, "cancelled", None, None), (5, "cancelled", None, None)]
    fill(runs, rows)
    with pytest.raises(UnclassifiedStatus) as caught:
        judge(runs)
    assert '"cancelled" (2 rows)' in str(caught.value)
    assert '"open"' not in str(caught.value)
    assert caught.value.exit_status == 1
    assert judge(runs, finished_statuses=["done", "failed", "cancelled"]).decision == "proceed"


@pytest.mark.parametrize(
    "expression", ["status", "(status::text)", "status, claimed_at", "(status::text), claimed_at"]
)
def test_an_index_leading_with_the_status_is_walked(runs, expression):
    status_index(runs, expression)
    fill(runs, [LIVE, (2, "zzz", None, None), (3, "aaa", None, None), (4, "done", None, None)])
    contract = contract_from_mapping({})
    with connect(runs.dsn, contract.connect_timeout_s) as conn:
        with pytest.raises(UnclassifiedStatus, match='"aaa" \\(1 row\\), "zzz" \\(1 row\\)'):
            judge_table(
                conn, contract, task_timeout=TIMEOUT, lease_s=7200.0, runtime_started_at=None
            )
        conn.rollback()
        _, column = judge_table(
            conn,
            contract_from_mapping({"finished_statuses": ["done", "aaa", "zzz"]}),
            task_timeout=TIMEOUT,
            lease_s=7200.0,
            runtime_started_at=None,
        )
    assert column.index_key is not None


def test_a_partial_index_is_not_walked(runs):
    status_index(runs, "status) WHERE (status = 'running'")
    contract = contract_from_mapping({})
    with connect(runs.dsn, contract.connect_timeout_s) as conn:
        _, column = judge_table(
            conn, contract, task_timeout=TIMEOUT, lease_s=7200.0, runtime_started_at=None
        )
    assert column.index_key is None


def test_a_null_status_is_unclassified(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE execution_runs (id int, status text, claimed_at timestamptz)")
        conn.execute("INSERT INTO execution_runs VALUES (1, NULL, now()), (2, 'done', now())")
    with pytest.raises(UnclassifiedStatus, match="NULL \\(1 row\\)"):
        judge(db)


def test_many_unknown_statuses_are_capped_and_counts_too(runs):
    status_index(runs)
    with runs.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status) SELECT g, 'x' || (g % 20) "
            "FROM generate_series(1, 2000) g"
        )
        conn.execute(
            "INSERT INTO execution_runs (id, status) SELECT g, 'lots' "
            "FROM generate_series(3000, %s) g",
            (3000 + COUNT_CAP + 5,),
        )
    with pytest.raises(UnclassifiedStatus) as caught:
        judge(runs)
    message = str(caught.value)
    assert f'"lots" (more than {COUNT_CAP:,} rows)' in message
    assert message.count(" rows)") == MAX_NAMED
    assert "and more" in message


ENUM_LABELS = "('open', 'running', 'done', 'paused')"


@pytest.fixture
def enum_runs(db):
    with db.connect() as conn:
        conn.execute(f"CREATE TYPE run_status AS ENUM {ENUM_LABELS}")
        create_runs_table(conn)
        conn.execute(
            "ALTER TABLE execution_runs ALTER COLUMN status TYPE run_status "
            "USING status::run_status"
        )
    return db


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--claimed-status", "runing"], '"runing"'),
        (["--queued-status", "Open"], '"Open"'),
        (["--finished-status", "done", "failed"], '"failed"'),
    ],
)
def test_an_enum_column_refuses_a_configured_status_that_is_not_a_label(enum_runs, flags, named):
    fill(enum_runs, [LIVE])
    done = cli_check(enum_runs, *flags)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr
    assert "not a label of the enum type of column status" in done.stderr


def test_an_enum_column_judges_with_its_labels_and_the_default_finished_statuses(enum_runs):
    fill(enum_runs, [LIVE, (2, "done", None, None)])
    assert cli_check(enum_runs).returncode == 75  # 'failed' is no label: defaults not held to it


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index-walk"])
def test_an_enum_label_in_no_list_fails_only_when_rows_hold_it(enum_runs, indexed):
    if indexed:
        status_index(enum_runs)
    fill(enum_runs, [(2, "done", None, None)])
    assert judge(enum_runs).decision == "proceed"  # 'paused' is a label nobody holds
    fill(enum_runs, [(3, "paused", None, None)])
    with pytest.raises(UnclassifiedStatus, match='"paused" \\(1 row\\)'):
        judge(enum_runs)


def test_a_status_appearing_mid_drain_fails_the_next_poll(runs):
    from leaseguard.orchestration.session import local_session

    fill(runs, [LIVE])
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, runs.dsn, task_timeout_s=3600.0) as session:
        assert session.judge().decision == "defer"
        with runs.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'Running'")
        with pytest.raises(UnclassifiedStatus, match='"Running" \\(1 row\\)'):
            session.judge()


def test_the_three_lists_must_not_overlap():
    with pytest.raises(ConfigError, match="'done' is in both queued_statuses and finished"):
        contract_from_mapping({"queued_statuses": ["done"], "finished_statuses": ["done"]})
    # The default finished statuses give way to an explicit claimed or queued list.
    assert contract_from_mapping({"queued_statuses": ["failed"]}).finished == ("done",)


def test_the_status_walk_uses_the_index(runs):
    """EXPLAIN: no sequential scan of the table in the walk once the index exists."""
    from leaseguard.adapters.guard import status_rows_query, unclassified_walk_query

    status_index(runs)
    with runs.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status) SELECT g, 'done' "
            "FROM generate_series(1, 50000) g"
        )
        conn.execute("ANALYZE execution_runs")
        contract = contract_from_mapping({})
        query = sql.SQL("EXPLAIN (FORMAT JSON) ") + unclassified_walk_query(contract, "column")
        params = {"classified": ["running"], "max_named": 3, "not_null": False}
        [[plan]] = conn.execute(query, params).fetchall()
        assert "Seq Scan" not in str(plan)
        # A rare unclassified status is counted through the index, not a scan for it.
        rows = status_rows_query(contract, "column", "rare")
        [[plan]] = conn.execute(
            sql.SQL("EXPLAIN (FORMAT JSON) ") + rows, {"count_cap": 10001, "status": "rare"}
        ).fetchall()
        assert "Seq Scan" not in str(plan)
