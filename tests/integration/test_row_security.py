"""Row-level security: a role that would see only some rows fails the check; a role that
sees every row is judged. Both directions, against a real PostgreSQL.

The table always holds one live claim: a guard that missed hidden rows would say
"proceed" over it, and one that refused a role seeing everything would block every deploy.
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

pytestmark = pytest.mark.integration

TABLE = "execution_runs"


@pytest.fixture
def rls_runs(db):
    """execution_runs with one live claim and row-level security on, no policy yet."""
    now = datetime.now(UTC)
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", now - timedelta(minutes=5), now)])
    policy(db, "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    return db


@pytest.fixture
def bypass_role(db):
    """A login role with BYPASSRLS, neither superuser nor owner; dropped after the test."""
    role = f"bypass_{db.name}"
    ident = sql.Identifier(role)
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN BYPASSRLS").format(ident))
        conn.execute(sql.SQL("GRANT pg_read_all_data TO {}").format(ident))
    yield role
    with db.connect() as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def judged(dsn):
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        return session.judge()


def policy(db, text):
    with db.connect() as conn:
        ids = {"table": sql.Identifier(TABLE), "role": sql.Identifier(GUARD_RO_ROLE)}
        conn.execute(sql.SQL(text).format(**ids))


def rows_seen_by_guard_ro(db):
    with db.connect(user=GUARD_RO_ROLE) as conn:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(TABLE))
        return conn.execute(query).fetchone()[0]


def test_a_role_rls_hides_every_row_from_fails_closed_naming_the_fix(rls_runs):
    assert rows_seen_by_guard_ro(rls_runs) == 0  # what it would count
    with pytest.raises(SchemaMismatch, match="has row-level security") as caught:
        judged(rls_runs.dsn_as(GUARD_RO_ROLE))
    assert "BYPASSRLS" in str(caught.value) and "USING (true)" in str(caught.value)


def test_a_superuser_sees_every_row_even_where_rls_is_forced(rls_runs):
    assert judged(rls_runs.dsn).decision is Decision.DEFER
    policy(rls_runs, "ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    assert judged(rls_runs.dsn).decision is Decision.DEFER


def test_a_bypassrls_role_is_judged_and_its_live_claim_defers(rls_runs, bypass_role):
    assert judged(rls_runs.dsn_as(bypass_role)).decision is Decision.DEFER


@pytest.mark.parametrize(
    ("created", "shows_every_row"),
    [
        ("CREATE POLICY everyone ON {table} FOR SELECT USING (true)", True),
        ("CREATE POLICY reader ON {table} FOR SELECT TO {role} USING (true)", True),
        ("CREATE POLICY reader ON {table} FOR ALL TO {role} USING (true)", True),
        ("CREATE POLICY reader ON {table} FOR SELECT TO {role} USING (status = 'open')", False),
        ("CREATE POLICY writer ON {table} FOR UPDATE TO {role} USING (true)", False),
        ("CREATE POLICY other ON {table} FOR SELECT TO pg_monitor USING (true)", False),
    ],
    ids=[
        "public-select",
        "role-select",
        "role-all",
        "filtering-policy",
        "not-for-select",
        "another-role",
    ],
)
def test_only_a_policy_that_shows_the_role_every_row_lets_it_judge(
    rls_runs, created, shows_every_row
):
    policy(rls_runs, created)
    if shows_every_row:
        assert judged(rls_runs.dsn_as(GUARD_RO_ROLE)).decision is Decision.DEFER
    else:
        with pytest.raises(SchemaMismatch, match="has row-level security"):
            judged(rls_runs.dsn_as(GUARD_RO_ROLE))


def test_a_restrictive_policy_beside_a_showing_one_fails_closed(rls_runs):
    policy(rls_runs, "CREATE POLICY reader ON {table} FOR SELECT TO {role} USING (true)")
    assert judged(rls_runs.dsn_as(GUARD_RO_ROLE)).decision is Decision.DEFER
    policy(
        rls_runs,
        "CREATE POLICY no_running ON {table} AS RESTRICTIVE FOR SELECT USING (status <> 'running')",
    )
    assert rows_seen_by_guard_ro(rls_runs) == 0  # the live claim is hidden now
    with pytest.raises(SchemaMismatch, match="has row-level security"):
        judged(rls_runs.dsn_as(GUARD_RO_ROLE))


def test_rls_switched_off_again_is_judged_as_any_table(rls_runs):
    policy(rls_runs, "ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    assert judged(rls_runs.dsn_as(GUARD_RO_ROLE)).decision is Decision.DEFER
