"""The recommended partial index, rendered from the contract, and the plan check's failure."""

import logging
from datetime import UTC, datetime

import psycopg
import pytest

from leaseguard.adapters.indexing import (
    advisory_plan_warning,
    index_name,
    offline_advice,
    recommended_index_sql,
)
from leaseguard.cli import main
from leaseguard.core.contract import contract_from_mapping
from tests.support.verdicts import make_verdict

PREFIX = "CREATE INDEX CONCURRENTLY IF NOT EXISTS "

# (contract keys, the exact statement): over every row, so the status check can walk it.
VALID_CASES = [
    (
        {},
        PREFIX + '"execution_runs_leaseguard_status" ON "execution_runs" ("status", "claimed_at");',
    ),
    (
        {"claimed_statuses": ["running", "claimed"], "queued_statuses": ["open", "retry"]},
        PREFIX + '"execution_runs_leaseguard_status" ON "execution_runs" ("status", "claimed_at");',
    ),
    (
        {"schema": "app", "table": "jobs", "status_column": "state", "claimed_at_column": "t0"},
        PREFIX + '"jobs_leaseguard_status" ON "app"."jobs" ("state", "t0");',
    ),
    (
        {"lease": {"expires_at_column": "lease_expires_at"}},
        PREFIX + '"execution_runs_leaseguard_status" ON "execution_runs" '
        '("status", "claimed_at", "lease_expires_at");',
    ),
    (
        {"lease": {"expires_at_column": "claimed_at"}},
        PREFIX + '"execution_runs_leaseguard_status" ON "execution_runs" ("status", "claimed_at");',
    ),  # A queue's enum status column: the plain column, over every row.
    (
        {"preset": "river"},
        PREFIX + '"river_job_leaseguard_status" ON "river_job" ("state", "attempted_at");',
    ),
    # No status column to walk: partial, over the rows the guard reads, in its own terms.
    (
        {"preset": "graphile_worker"},
        PREFIX + '"_private_jobs_leaseguard_status" ON "graphile_worker"."_private_jobs" '
        '("locked_at") WHERE "locked_at" IS NOT NULL OR ("locked_at" IS NULL AND '
        '"attempts" < "max_attempts");',
    ),
]

# Hostile names stay names.
HOSTILE_CASES = [
    (
        {"table": 'runs"; DROP TABLE victim; --'},
        'ON "runs""; DROP TABLE victim; --" ',
    ),
    (
        {"status_column": 'status" = status; --'},
        '("status"" = status; --", "claimed_at");',
    ),
    ({"table": "Execution Runs"}, '"Execution Runs_leaseguard_status" ON "Execution Runs" '),
]


@pytest.mark.parametrize(("keys", "expected"), VALID_CASES)
def test_the_statement_is_derived_from_the_contract(keys, expected):
    assert recommended_index_sql(contract_from_mapping(keys)) == expected


@pytest.mark.parametrize(("keys", "fragment"), HOSTILE_CASES)
def test_hostile_identifiers_are_quoted_and_statuses_are_literals(keys, fragment):
    assert fragment in recommended_index_sql(contract_from_mapping(keys))


NAME_CASES = [
    ("execution_runs", "execution_runs_leaseguard_status"),
    ("x" * 45, "x" * 45 + "_leaseguard_status"),  # exactly 63 bytes: kept
]


@pytest.mark.parametrize(("table", "expected"), NAME_CASES)
def test_index_name_is_table_plus_suffix(table, expected):
    assert index_name(contract_from_mapping({"table": table}).table) == expected


@pytest.mark.parametrize("table", ["x" * 46, "y" * 63, "ä" * 31, "runs_" + "é" * 29])
def test_a_long_table_name_gives_a_hashed_name_of_at_most_63_bytes(table):
    name = index_name(contract_from_mapping({"table": table}).table)
    assert len(name.encode("utf-8")) <= 63
    assert name.endswith("_leaseguard_status")
    assert name.startswith(table[:10])
    # Two tables sharing a long prefix must not share an index name.
    other = index_name(contract_from_mapping({"table": table[:-1] + "z"}).table)
    assert other != name


# --- the CLI --------------------------------------------------------------------------------


def test_index_sql_prints_a_comment_and_the_statement(capsys):
    assert main(["index-sql", "--queued-status", "--claimed-status", "busy"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("-- leaseguard:")
    assert out[1].startswith("-- it supersedes")
    assert out[2] == (
        PREFIX + '"execution_runs_leaseguard_status" ON "execution_runs" ("status", "claimed_at");'
    )


def test_index_sql_reads_the_config_file_and_flags_win(tmp_path, capsys):
    config = tmp_path / "leaseguard.yaml"
    config.write_text("leaseguard:\n  table: jobs\n  claimed_statuses: [working]\n")
    assert main(["index-sql", "--config", str(config), "--status-column", "state"]) == 0
    statement = capsys.readouterr().out.splitlines()[2]
    assert 'ON "jobs" ("state", "claimed_at");' in statement


def test_index_sql_keeps_a_table_name_with_a_newline_out_of_the_comment(capsys):
    assert main(["index-sql", "--table", "runs\nDROP TABLE victim; --"]) == 0
    comment = capsys.readouterr().out.splitlines()[0]
    assert "DROP" not in comment


def test_index_sql_with_an_invalid_contract_is_a_usage_error(capsys):
    assert main(["index-sql", "--claimed-status", "open"]) == 2
    assert "is in both claimed_statuses and queued_statuses" in capsys.readouterr().err


def test_index_sql_needs_no_dsn(capsys, monkeypatch):
    monkeypatch.setenv("LEASEGUARD_DSN", "host=unreachable.invalid")
    assert main(["index-sql"]) == 0
    assert "CREATE INDEX CONCURRENTLY" in capsys.readouterr().out


# --- the plan check ------------------------------------------------------------------------


def verdict():
    return make_verdict(
        at=datetime(2026, 9, 9, tzinfo=UTC), host=None, warnings=("an earlier warning",)
    )


class FailingConnection:
    """Stands in for a connection whose every use fails with driver text."""

    def _fail(self, *args, **kwargs):
        raise psycopg.OperationalError("server closed; password=hunter2 host=db")

    transaction = cursor = pipeline = execute = _fail
    info = property(_fail)


def test_an_error_in_the_plan_check_gives_no_warning_and_leaks_nothing(caplog):
    with caplog.at_level(logging.DEBUG, logger="leaseguard.indexing"):
        warning = advisory_plan_warning(FailingConnection(), contract_from_mapping({}), verdict())
    assert warning is None
    assert "skipped (OperationalError)" in caplog.text
    assert "hunter2" not in caplog.text


@pytest.mark.parametrize(
    ("preset", "index"),
    [("que", "que_poll_idx"), ("good_job", "index_good_jobs_on_scheduled_at"), ("river", None)],
)
def test_lock_presets_need_no_index_of_leaseguard_s(preset, index):
    """Que and good_job read the jobs not done, which the queue's own partial index holds;
    the lock comes from pg_locks, which no index serves."""
    advice = offline_advice(contract_from_mapping({"preset": preset}))
    assert (len(advice) == 1) == (index is not None)
    assert index is None or index in advice[0]
