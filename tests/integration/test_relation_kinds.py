"""Only relations that hold the live rows are judged: a table, or a view named on purpose.

Each view case holds one live claim in its base table, and a guard that read what the view
shows would see less: "proceed" over live work. Both directions: a view declared with
`relation_kind: view`, whose base tables hide nothing from its readers, defers on the live
claim and proceeds once only queued rows are left; anything the guard cannot vouch for
(a view not declared, a materialized view, row-level security on a base table for the
guard's role or for the view's owner) is refused by name.
"""

from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import SchemaMismatch
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import local_session
from sandbox.pgcluster import GUARD_RO_ROLE
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration

BASE = "runs_base"
VIEW = "execution_runs"


@pytest.fixture
def base(db):
    """runs_base with one live claim (5 minutes old) and one queued row."""
    now = datetime.now(UTC)
    with db.connect() as conn:
        create_runs_table(conn, BASE)
        insert_runs(conn, [(1, "running", now - timedelta(minutes=5), now)], name=BASE)
        insert_runs(conn, [(2, "open", None, None)], name=BASE)
    return db


@pytest.fixture
def owner(db):
    """A login role that owns the views made with it: neither superuser nor table owner."""
    role = f"viewer_{db.name}"
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    with db.connect() as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def run(db, text, **names):
    idents = {"base": sql.Identifier(BASE), "view": sql.Identifier(VIEW)}
    idents |= {k: sql.Identifier(v) for k, v in names.items()}
    with db.connect() as conn:
        conn.execute(sql.SQL(text).format(**idents))


def judged(dsn, **keys):
    contract = contract_from_mapping({"runtime": {"source": "none"}, **keys})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        return session.judge()


def finish_the_claim(db):
    run(db, "UPDATE {base} SET status = 'done' WHERE id = 1")


def seen_through_view(db, user):
    with db.connect(user=user) as conn:
        query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'running'")
        return conn.execute(query.format(sql.Identifier(VIEW))).fetchone()[0]


# --- a plain view -----------------------------------------------------------------------------


def test_a_view_not_declared_is_refused_by_name(base):
    run(base, "CREATE VIEW {view} AS SELECT * FROM {base}")
    with pytest.raises(SchemaMismatch, match=r"execution_runs is a view.*relation_kind: view"):
        judged(base.dsn)


def test_a_view_declared_on_purpose_defers_on_live_work_and_proceeds_without(base):
    run(base, "CREATE VIEW {view} AS SELECT * FROM {base}")
    assert judged(base.dsn_as(GUARD_RO_ROLE), relation_kind="view").decision is Decision.DEFER
    finish_the_claim(base)
    verdict = judged(base.dsn_as(GUARD_RO_ROLE), relation_kind="view")
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.queued == 1


def test_a_table_declared_as_view_is_judged_as_the_table(base):
    verdict = judged(base.dsn, table=BASE, relation_kind="view")
    assert verdict.decision is Decision.DEFER


# --- materialized views: never ----------------------------------------------------------------


def test_a_materialized_view_is_never_judged_even_declared(base):
    run(base, "CREATE MATERIALIZED VIEW {view} AS SELECT * FROM {base} WHERE false")
    assert seen_through_view(base, "postgres") == 0  # the snapshot misses the live claim
    for keys in ({}, {"relation_kind": "view"}):
        with pytest.raises(SchemaMismatch, match="is a materialized view: a snapshot"):
            judged(base.dsn, **keys)


def test_a_view_over_a_materialized_view_is_refused_naming_it(base):
    run(base, "CREATE MATERIALIZED VIEW snap AS SELECT * FROM {base}")
    run(base, "CREATE VIEW {view} AS SELECT * FROM snap")
    with pytest.raises(SchemaMismatch, match="reads snap, a materialized view"):
        judged(base.dsn, relation_kind="view")


# --- row-level security behind the view ---------------------------------------------------------


def test_rls_behind_a_security_invoker_view_is_checked_for_the_guard_s_role(base):
    run(base, "CREATE VIEW {view} WITH (security_invoker = true) AS SELECT * FROM {base}")
    run(base, "ALTER TABLE {base} ENABLE ROW LEVEL SECURITY")
    assert seen_through_view(base, GUARD_RO_ROLE) == 0  # the live claim is hidden
    with pytest.raises(SchemaMismatch, match=rf"reads table runs_base.*role {GUARD_RO_ROLE}"):
        judged(base.dsn_as(GUARD_RO_ROLE), relation_kind="view")
    # A policy that shows the guard every row: judged, and the live claim defers.
    shows_all = "CREATE POLICY reader ON {base} FOR SELECT TO {role} USING (true)"
    run(base, shows_all, role=GUARD_RO_ROLE)
    assert judged(base.dsn_as(GUARD_RO_ROLE), relation_kind="view").decision is Decision.DEFER


def test_a_view_owned_by_a_role_rls_limits_is_refused_even_for_a_superuser(base, owner):
    """A view that is not security_invoker reads its base table as its owner: RLS limits
    the owner, so even a superuser guard would see only the owner's rows."""
    run(base, "GRANT SELECT ON {base} TO {owner}", owner=owner)
    run(base, "CREATE VIEW {view} AS SELECT * FROM {base}")
    run(base, "ALTER VIEW {view} OWNER TO {owner}", owner=owner)
    run(base, "ALTER TABLE {base} ENABLE ROW LEVEL SECURITY")
    only_queued = "CREATE POLICY queued ON {base} FOR SELECT TO {owner} USING (status = 'open')"
    run(base, only_queued, owner=owner)
    assert seen_through_view(base, "postgres") == 0  # the superuser sees what the owner sees
    with pytest.raises(SchemaMismatch, match=rf"role {owner} \(the view's owner"):
        judged(base.dsn, relation_kind="view")


def test_a_view_whose_owner_bypasses_rls_is_judged_both_ways(base, owner):
    run(base, "GRANT SELECT ON {base} TO {owner}", owner=owner)
    run(base, "CREATE VIEW {view} AS SELECT * FROM {base}")
    run(base, "ALTER VIEW {view} OWNER TO {owner}", owner=owner)
    run(base, "ALTER TABLE {base} ENABLE ROW LEVEL SECURITY")
    run(base, "ALTER ROLE {owner} BYPASSRLS", owner=owner)
    assert judged(base.dsn, relation_kind="view").decision is Decision.DEFER
    finish_the_claim(base)
    assert judged(base.dsn, relation_kind="view").decision is Decision.PROCEED


def test_a_nested_view_checks_the_base_table_of_the_inner_view(base):
    run(base, "CREATE VIEW inner_runs WITH (security_invoker) AS SELECT * FROM {base}")
    run(base, "CREATE VIEW {view} WITH (security_invoker) AS SELECT * FROM inner_runs")
    run(base, "ALTER TABLE {base} ENABLE ROW LEVEL SECURITY")
    with pytest.raises(SchemaMismatch, match="reads table runs_base"):
        judged(base.dsn_as(GUARD_RO_ROLE), relation_kind="view")


# --- a part of the table: a partition, an inheritance child, foreign rows -----------------------

PARTS = {
    "partition": (
        "CREATE TABLE runs (LIKE {base}) PARTITION BY LIST (status)",
        "CREATE TABLE runs_running PARTITION OF runs FOR VALUES IN ('running')",
        "CREATE TABLE runs_rest PARTITION OF runs DEFAULT",
    ),
    "child": (
        "CREATE TABLE runs (LIKE {base})",
        "CREATE TABLE runs_running () INHERITS (runs)",
        "CREATE TABLE runs_rest () INHERITS (runs)",
    ),
}


@pytest.fixture(params=sorted(PARTS))
def parts(request, base):
    """runs, its live claim in runs_running and a queued row in runs_rest (partitions or
    inheritance children): only runs, read whole, holds them all."""
    for statement in PARTS[request.param]:
        run(base, statement)
    run(base, "INSERT INTO runs_running SELECT * FROM {base} WHERE status = 'running'")
    run(base, "INSERT INTO runs_rest SELECT * FROM {base} WHERE status = 'open'")
    return request.param


def test_a_partition_or_child_named_alone_is_refused_naming_its_parent(base, parts):
    what = "a partition" if parts == "partition" else "an inheritance child"
    with pytest.raises(SchemaMismatch, match=rf"table runs_rest is {what} of runs: .*name runs"):
        judged(base.dsn_as(GUARD_RO_ROLE), table="runs_rest")
    done = leaseguard(
        *("check", "--dsn", base.dsn, "--table", "runs_rest", "--task-timeout-s", "3600"),
        "--runtime-started-at=2026-01-01T00:00:00Z",
    )
    assert done.returncode == 1 and f"is {what} of runs" in done.stderr, done.stderr


def test_the_parent_named_whole_defers_on_the_live_claim_and_proceeds_without(base, parts):
    assert judged(base.dsn_as(GUARD_RO_ROLE), table="runs").decision is Decision.DEFER
    run(base, "DELETE FROM runs WHERE status = 'running'")
    assert judged(base.dsn_as(GUARD_RO_ROLE), table="runs").decision is Decision.PROCEED


def test_a_view_over_one_partition_or_child_is_refused_naming_the_parent(base, parts):
    run(base, "CREATE VIEW {view} AS SELECT * FROM runs_rest")
    with pytest.raises(SchemaMismatch, match=r"reads runs_rest, which is .* of runs"):
        judged(base.dsn, relation_kind="view")


def test_a_view_reading_only_the_parent_is_refused_and_one_reading_it_whole_judged(base, parts):
    run(base, "CREATE VIEW {view} AS SELECT * FROM ONLY runs")
    with pytest.raises(SchemaMismatch, match=r"reads runs, which has partitions .* says ONLY"):
        judged(base.dsn, relation_kind="view")
    run(base, "CREATE OR REPLACE VIEW {view} AS SELECT * FROM runs")
    assert judged(base.dsn, relation_kind="view").decision is Decision.DEFER


def test_a_view_calling_a_user_function_is_refused_naming_it(base):
    run(base, "CREATE MATERIALIZED VIEW snap AS SELECT * FROM {base} WHERE false")
    run(base, "CREATE FUNCTION snap_rows() RETURNS SETOF {base} LANGUAGE sql AS "
        "'SELECT * FROM snap'")  # fmt: skip
    run(base, "CREATE VIEW {view} AS SELECT * FROM snap_rows()")
    with pytest.raises(SchemaMismatch, match=r"execution_runs calls snap_rows\(\)"):
        judged(base.dsn, relation_kind="view")


@pytest.fixture
def foreign(base):
    """runs partitioned, its 'running' partition a foreign table (postgres_fdw) over another
    database's copy, which has not got the live claim: rows the guard cannot vouch for."""
    cluster = base.cluster
    run(base, "CREATE EXTENSION postgres_fdw")
    with base.connect() as conn:
        conn.execute(
            sql.SQL(
                "CREATE SERVER copy FOREIGN DATA WRAPPER postgres_fdw "
                "OPTIONS (host {}, port {}, dbname {})"
            ).format(
                sql.Literal(str(cluster.socket_dir)),
                sql.Literal(str(cluster.port)),
                sql.Literal(base.name),
            )
        )
        conn.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER copy")
    run(base, "CREATE TABLE runs_copy (LIKE {base})")
    run(base, "CREATE TABLE runs (LIKE {base}) PARTITION BY LIST (status)")
    run(base, "CREATE FOREIGN TABLE runs_running PARTITION OF runs FOR VALUES IN ('running') "
        "SERVER copy OPTIONS (table_name 'runs_copy')")  # fmt: skip
    run(base, "CREATE TABLE runs_rest PARTITION OF runs DEFAULT")
    run(base, "INSERT INTO runs_rest SELECT * FROM {base} WHERE status = 'open'")
    return base


def test_a_foreign_partition_is_refused_naming_it(foreign):
    with pytest.raises(SchemaMismatch, match=r"table runs has .* foreign tables \(runs_running\)"):
        judged(foreign.dsn, table="runs")
    run(foreign, "CREATE VIEW {view} AS SELECT * FROM runs")
    with pytest.raises(SchemaMismatch, match=r"reads runs, which has .* \(runs_running\)"):
        judged(foreign.dsn, relation_kind="view")
