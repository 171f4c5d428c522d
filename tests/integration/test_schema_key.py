"""`schema`: the table is named schema.table, never found through search_path.

A decoy table of the same name sits on the search_path holding only a queued row, while
the real one, in schema `jobs`, holds a live claim: named with its schema the guard defers;
found through search_path it would read the decoy and proceed, so without `schema` a table
name two schemas hold is refused, naming both.
"""

import pytest

from sandbox.runs_table import create_runs_table
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration

FACTS = ["--task-timeout-s", "3600", "--runtime-started-at", "2026-01-01T00:00:00Z"]


@pytest.fixture
def two_schemas(db):
    with db.connect() as conn:
        conn.execute("CREATE SCHEMA jobs")
        create_runs_table(conn)  # public.execution_runs: the decoy
        conn.execute("INSERT INTO execution_runs (id, status) VALUES (1, 'open')")
        conn.execute("SET search_path = jobs")
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO jobs.execution_runs (id, status, claimed_at) "
            "VALUES (1, 'running', now() - interval '5 minutes')"
        )
    return db


def check(dsn, *args):
    return leaseguard("check", "--dsn", dsn, *FACTS, *args)


def test_the_schema_flag_reads_that_schema_s_table_and_defers_on_its_live_claim(two_schemas):
    done = check(two_schemas.dsn, "--schema", "jobs")
    assert done.returncode == 75, done.stderr
    assert "live=1" in done.stdout


def test_without_the_schema_a_name_two_schemas_hold_is_refused_naming_both(two_schemas):
    done = check(two_schemas.dsn)  # search_path finds the decoy, which would proceed
    assert done.returncode == 1, done.stderr
    assert "is found in schema public along the guard's search_path" in done.stderr
    assert "schema(s) jobs also hold a table of that name" in done.stderr
    assert check(two_schemas.dsn, "--schema", "public").returncode == 0  # named: judged


def test_without_the_schema_a_name_only_one_schema_holds_is_judged(two_schemas):
    with two_schemas.connect() as conn:
        conn.execute("DROP TABLE public.execution_runs")
    dsn = f"{two_schemas.dsn} options='-c search_path=jobs'"
    done = check(dsn)
    assert done.returncode == 75, done.stderr
    assert "live=1" in done.stdout


def test_the_schema_wins_over_a_search_path_that_points_elsewhere(two_schemas, tmp_path):
    """The role's search_path leads to jobs; `schema: public` in a config file still reads
    public's table, and names it schema-qualified."""
    config = tmp_path / "lg.yaml"
    config.write_text("schema: public\n")
    dsn = f"{two_schemas.dsn} options='-c search_path=jobs'"
    assert check(dsn, "--schema", "jobs").returncode == 75
    done = check(dsn, "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert '"table": "public.execution_runs"' in done.stdout


def test_a_missing_schema_qualified_table_is_named_with_its_schema(two_schemas):
    done = check(two_schemas.dsn, "--schema", "nope")
    assert done.returncode == 1
    assert "table nope.execution_runs does not exist" in done.stderr
