"""The seq-scan warning and `leaseguard index-sql`, against a real PostgreSQL.

A "large" table is made by inserting 120,000 rows in one generate_series statement and
running ANALYZE, so pg_class.reltuples crosses the 100,000-row threshold in well under a
second.
"""

import json
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from leaseguard.adapters.guard import Subject
from leaseguard.adapters.indexing import LARGE_TABLE_ROWS, index_name
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.predicate import counts_query, subjects_params
from leaseguard.orchestration.session import local_session
from sandbox.pgcluster import PgClusterError
from sandbox.runs_table import create_runs_table
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration

STARTED = datetime.now(UTC) - timedelta(hours=3)
LARGE = 120_000
SMALL = 5_000


def fill(db, rows, table="execution_runs", status_type=None):
    """`rows` rows, nearly all done; every 1000th running (live), every 1000th+1 open."""
    ident = sql.Identifier(table)
    with db.connect() as conn:
        create_runs_table(conn, table)
        if status_type:
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN status TYPE {} USING status::{}").format(
                    ident, sql.Identifier(status_type), sql.Identifier(status_type)
                )
            )
        conn.execute(
            sql.SQL(
                """
                INSERT INTO {} (id, status, claimed_at)
                SELECT g,
                       (CASE g %% 1000 WHEN 0 THEN 'running' WHEN 1 THEN 'open'
                                      ELSE 'done' END)::text::{},
                       now() - make_interval(secs => g %% 600)
                FROM generate_series(1, %s) AS g
                """
            ).format(ident, sql.Identifier(status_type or "text")),
            (rows,),
        )
        conn.execute(sql.SQL("ANALYZE {}").format(ident))


def index_sql(*flags):
    done = leaseguard("index-sql", *flags)
    if done.returncode != 0:
        raise PgClusterError(f"index-sql failed: {done.stderr}")
    return done.stdout


def judge_twice(db, **keys):
    contract = contract_from_mapping(keys)
    with local_session(contract, db.dsn, task_timeout_s=3600.0, runtime_started_at=STARTED) as s:
        return s.judge(), s.judge()


def plan_of_guard_query(db, **keys):
    """The guard query's plan as (node type, relation, index) for each scan node."""
    contract = contract_from_mapping(keys)
    params = subjects_params(contract, [Subject(None, None, 7200.0, STARTED).bound(contract)])
    query = sql.SQL("EXPLAIN (FORMAT JSON) ") + counts_query(contract)
    with db.connect() as conn:
        [plan] = conn.execute(query, params).fetchone()
    found, stack = [], [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if "Relation Name" in node or "Index Name" in node:
                found.append((node["Node Type"], node.get("Relation Name"), node.get("Index Name")))
            stack.extend(v for v in node.values() if isinstance(v, list | dict))
    return found


def uses_only_the_index(scans, name):
    """No sequential scan, and every index the plan reads is `name`."""
    indexes = {index for _, _, index in scans if index}
    return indexes == {name} and not any(kind == "Seq Scan" for kind, _, _ in scans)


def test_the_threshold_is_what_this_file_assumes():
    assert SMALL < LARGE_TABLE_ROWS < LARGE


def test_a_large_table_without_the_index_warns_once_per_session(db):
    fill(db, LARGE)
    first, second = judge_twice(db)
    assert first.counts.live == LARGE // 1000
    [warning] = first.warnings
    assert "table execution_runs" in warning
    assert "sequential scan" in warning
    assert "leaseguard index-sql" in warning
    assert second.warnings == ()
    assert second.counts == first.counts


def test_a_large_table_with_the_index_from_index_sql_does_not_warn(db):
    fill(db, LARGE)
    db.psql(index_sql())
    first, _ = judge_twice(db)
    assert first.warnings == ()
    assert uses_only_the_index(plan_of_guard_query(db), index_name(contract_from_mapping({}).table))


def test_a_small_table_does_not_warn_even_with_a_seq_scan(db):
    fill(db, SMALL)
    assert plan_of_guard_query(db) == [("Seq Scan", "execution_runs", None)]
    first, _ = judge_twice(db)
    assert first.warnings == ()


def test_check_prints_the_warning_once_on_stderr_and_in_json(db):
    fill(db, LARGE)
    done = leaseguard(
        *("check", "--dsn", db.dsn, "--json", "--task-timeout-s", "3600"),
        *("--runtime-started-at", STARTED.isoformat()),
    )
    assert done.returncode == 75, done.stderr
    verdict = json.loads(done.stdout)
    assert len(verdict["warnings"]) == 1
    assert "sequential scan" in verdict["warnings"][0]
    assert done.stderr.count("leaseguard: warning: the guard query reads table") == 1


def test_the_guard_role_sees_the_warning_too(db):
    """The read-only guard role (pg_read_all_data only) can read reltuples and EXPLAIN."""
    fill(db, LARGE)
    contract = contract_from_mapping({})
    with local_session(
        contract, db.dsn_as("guard_ro"), task_timeout_s=3600.0, runtime_started_at=STARTED
    ) as session:
        assert len(session.judge().warnings) == 1


@pytest.mark.parametrize(
    ("table", "claimed", "queued"),
    [
        ("execution_runs", ["running"], ["open"]),
        ('Execution "Runs"; --\'', ["running"], ["open"]),
        ("runs_no_queue", ["running"], []),
        ("runs_two_claimed", ["running", "claimed"], ["open", "retry"]),
    ],
    ids=["default", "hostile-table-name", "no-queued-statuses", "several-statuses"],
)
def test_index_sql_creates_an_index_the_planner_uses_for_the_guard_query(
    db, table, claimed, queued
):
    fill(db, LARGE, table=table)
    keys = {"table": table, "claimed_statuses": claimed, "queued_statuses": queued}
    assert plan_of_guard_query(db, **keys) == [("Seq Scan", table, None)]
    flags = ["--table", table, "--claimed-status", *claimed, "--queued-status", *queued]
    db.psql(index_sql(*flags))  # applied by psql, as a user would
    name = index_name(contract_from_mapping(keys).table)
    with db.connect() as conn:
        found = conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", (name,))
        assert found.fetchone()[0] == 1
    scans = plan_of_guard_query(db, **keys)
    assert uses_only_the_index(scans, name)
    # Claimed and queued rows in one scan of it (the predicate's status IN), not two ORed.
    assert sum(index == name for _, _, index in scans) == 1
    # IF NOT EXISTS: applying it twice is harmless.
    db.psql(index_sql(*flags))


def test_an_enum_status_column_is_compared_natively_and_index_sql_serves_it(db):
    with db.connect() as conn:
        conn.execute("CREATE TYPE run_status AS ENUM ('open', 'running', 'done')")
    fill(db, LARGE, table="runs_enum", status_type="run_status")
    first, _ = judge_twice(db, table="runs_enum")
    [warning] = first.warnings
    assert "table runs_enum" in warning
    assert "leaseguard index-sql" in warning
    db.psql(index_sql("--table", "runs_enum"))
    name = index_name(contract_from_mapping({"table": "runs_enum"}).table)
    assert uses_only_the_index(plan_of_guard_query(db, table="runs_enum"), name)
    first, _ = judge_twice(db, table="runs_enum")
    assert first.warnings == ()
    assert first.counts.live == LARGE // 1000


def test_an_existing_index_leading_with_the_status_serves_the_guard(db):
    """River's and Oban's (state, queue, priority, ...) fetching index, not a new one."""
    with db.connect() as conn:
        conn.execute("CREATE TYPE run_status AS ENUM ('open', 'running', 'done')")
    fill(db, LARGE, table="runs_enum", status_type="run_status")
    with db.connect() as conn:
        conn.execute("CREATE INDEX runs_fetching ON runs_enum (status, updated_at, id)")
        conn.execute("ANALYZE runs_enum")
    advice = index_sql("--table", "runs_enum", "--dsn", db.dsn)
    assert "already serve" in advice and "runs_fetching" in advice
    assert "CREATE INDEX" not in advice
    assert uses_only_the_index(plan_of_guard_query(db, table="runs_enum"), "runs_fetching")
    first, _ = judge_twice(db, table="runs_enum")
    assert first.warnings == ()


def test_without_a_serving_index_index_sql_with_a_dsn_prints_the_statement(db):
    fill(db, SMALL)
    advice = index_sql("--dsn", db.dsn)
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS" in advice
    db.psql(advice)
    again = index_sql("--dsn", db.dsn)
    assert "already serve" in again and "execution_runs_leaseguard_status" in again
    assert "CREATE" not in again


def partitioned_runs(db, partitions=3, rows_each=50_000):
    """A pg-boss-like job table: PARTITION BY LIST (name), one partition a queue."""
    with db.connect() as conn:
        conn.execute(
            "CREATE TABLE jobs (id bigint, name text NOT NULL, status text NOT NULL, "
            "claimed_at timestamptz) PARTITION BY LIST (name)"
        )
        for n in range(partitions):
            conn.execute(f"CREATE TABLE jobs_q{n} PARTITION OF jobs FOR VALUES IN ('q{n}')")
        conn.execute(
            """
            INSERT INTO jobs
            SELECT g, 'q' || (g %% %s), CASE g %% 1000 WHEN 0 THEN 'running' ELSE 'done' END,
                   now() - make_interval(secs => g %% 600)
            FROM generate_series(1, %s) AS g
            """,
            (partitions, partitions * rows_each),
        )
        conn.execute("ANALYZE jobs")


def test_a_partitioned_table_gets_the_per_partition_recipe_not_concurrently(db):
    partitioned_runs(db)
    # The plain statement is what PostgreSQL refuses on a partitioned parent.
    with pytest.raises(PgClusterError, match="partitioned"):
        db.psql(index_sql("--table", "jobs"))
    advice = index_sql("--table", "jobs", "--dsn", db.dsn)
    assert 'ON ONLY "jobs"' in advice
    assert advice.count("ATTACH PARTITION") == 3
    for statement in [line for line in advice.splitlines() if not line.startswith("--")]:
        db.psql(statement)  # each alone, as the comment says
    with db.connect() as conn:
        valid = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'jobs_leaseguard_status'::regclass"
        ).fetchone()
    assert valid == (True,)
    assert "already serve" in index_sql("--table", "jobs", "--dsn", db.dsn)


def test_the_seq_scan_warning_sees_the_partitions_of_a_partitioned_table(db):
    partitioned_runs(db)
    first, _ = judge_twice(db, table="jobs")
    [warning] = first.warnings
    assert "table jobs" in warning and "sequential scan" in warning
    for statement in index_sql("--table", "jobs", "--dsn", db.dsn).splitlines():
        if not statement.startswith("--"):
            db.psql(statement)
    with db.connect() as conn:
        conn.execute("ANALYZE jobs")
    first, _ = judge_twice(db, table="jobs")
    assert first.warnings == ()


def test_an_earlier_partial_index_serves_the_guard_query_but_not_the_status_check(db):
    """The partial *_leaseguard_claims index cannot show statuses it does not hold."""
    fill(db, LARGE)
    db.psql(
        "CREATE INDEX execution_runs_leaseguard_claims ON execution_runs ((status::text), "
        "claimed_at) WHERE status::text IN ('running', 'open')"
    )
    first, second = judge_twice(db)
    [warning] = first.warnings
    assert "the status check (every status classified) reads table execution_runs" in warning
    assert "no btree index leads with its status column status" in warning
    assert "leaseguard index-sql" in warning
    assert second.warnings == ()
    db.psql(index_sql())
    assert judge_twice(db)[0].warnings == ()
