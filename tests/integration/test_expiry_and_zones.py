"""Expiry values and naive time zones, named, against a real PostgreSQL, both directions.

NULL expiry means "no lease known": the row is judged by the task-timeout lease (live
inside it, stale past it) and the output says so; `infinity` never expires (live, the wait
bound is `never`), `-infinity` has expired. A naive `claimed_at` needs its zone declared:
read in the wrong zone a live claim looks hours old.
"""

import json

import pytest
from psycopg import sql

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import SchemaMismatch
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import local_session
from sandbox.runs_table import create_runs_table
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration

LEASE_S = 7200.0  # 2 x 3600 s
EXPIRES = {"lease": {"expires_at_column": "lease_expires_at"}}


@pytest.fixture
def runs(db):
    with db.connect() as conn:
        create_runs_table(conn)
    return db


def claim(db, claimed_ago, expires):
    """One running row, claimed `claimed_ago` before now; `expires` is SQL text (or None)."""
    with db.connect() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO execution_runs (id, status, claimed_at, lease_expires_at) "
                "VALUES (1, 'running', now() - %s::interval, {})"
            ).format(sql.SQL(expires) if expires else sql.NULL),
            (claimed_ago,),
        )


def judged(db, **keys):
    contract = contract_from_mapping({"runtime": {"source": "none"}, **keys})
    with local_session(contract, db.dsn, task_timeout_s=3600.0) as session:
        return session.judge()


# --- NULL expiry: the task-timeout lease --------------------------------------------------------


def test_a_null_expiry_inside_the_task_timeout_lease_defers_with_that_lease_as_the_bound(runs):
    claim(runs, "30 minutes", None)
    verdict = judged(runs, **EXPIRES)
    assert verdict.decision is Decision.DEFER
    [live] = verdict.live
    assert live.expiry_null and not live.never_expires
    # Not 0 (a drain would give up at once): the lease from the claim, 1 h 30 min left.
    assert verdict.wait_upper_bound_s == pytest.approx(LEASE_S - 1800, abs=5)
    assert verdict.wait_upper_bound_known
    assert any("lease_expires_at is NULL on live row(s) 1" in w for w in verdict.warnings)
    assert "claimed_at + 7200s" in " ".join(verdict.warnings)


def test_a_null_expiry_past_the_task_timeout_lease_is_stale_and_proceeds(runs):
    claim(runs, "3 hours", None)
    verdict = judged(runs, **EXPIRES)
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


# --- infinity: never expires; -infinity: expired -----------------------------------------------


def test_an_infinite_expiry_defers_with_the_bound_named_never_not_an_error(runs):
    claim(runs, "3 hours", "'infinity'")
    verdict = judged(runs, **EXPIRES)
    assert verdict.decision is Decision.DEFER
    [live] = verdict.live
    assert live.never_expires and live.remaining_s is None and live.lease_expires_at is None
    assert not verdict.wait_upper_bound_known
    assert "wait_upper_bound_s=never" in verdict.timeline()
    assert any("never expires (expiry 'infinity')" in w for w in verdict.warnings)
    data = verdict.as_dict()
    assert data["wait_upper_bound_known"] is False and data["live"][0]["never_expires"] is True


def test_a_minus_infinite_expiry_has_expired_and_proceeds(runs):
    claim(runs, "1 minute", "'-infinity'")
    verdict = judged(runs, **EXPIRES)
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


def test_the_cli_reports_an_infinite_expiry_in_json_with_exit_75(runs):
    claim(runs, "1 minute", "'infinity'")
    done = leaseguard(
        *("check", "--dsn", runs.dsn, "--lease-expires-column", "lease_expires_at"),
        *("--task-timeout-s", "3600", "--runtime-started-at", "2026-01-01T00:00:00Z", "--json"),
    )
    assert done.returncode == 75, done.stderr
    data = json.loads(done.stdout)
    assert data["live"][0]["never_expires"] is True
    assert data["wait_upper_bound_known"] is False
    assert "never expires" in done.stderr  # the warning line


# --- naive timestamps need their zone -----------------------------------------------------------


@pytest.fixture
def naive(db):
    """A naive claimed_at, in a database whose TimeZone is America/New_York."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE execution_runs (id int, status text, claimed_at timestamp)")
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET timezone = 'America/New_York'").format(
                sql.Identifier(db.name)
            )
        )
    return db


def claim_naive(db, zone, ago):
    """A claim written as an application in `zone` writes it: that zone's wall clock."""
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs VALUES (1, 'running', "
            "(now() - %s::interval) AT TIME ZONE %s)",
            (ago, zone),
        )


def test_a_naive_column_without_a_declared_zone_fails_naming_it_and_the_database_zone(naive):
    claim_naive(naive, "America/New_York", "10 minutes")
    with pytest.raises(SchemaMismatch) as caught:
        judged(naive)
    message = str(caught.value)
    assert "column claimed_at (claimed_at_column)" in message
    assert "no timestamp_zone" in message and "TimeZone is America/New_York" in message


def test_a_naive_claim_written_in_new_york_defers_when_the_zone_is_declared(naive):
    claim_naive(naive, "America/New_York", "10 minutes")
    assert judged(naive, timestamp_zone="America/New_York").decision is Decision.DEFER
    # The old default read it as UTC: 10 minutes old became 5 hours old, past the lease.
    assert judged(naive, timestamp_zone="UTC").decision is Decision.PROCEED


def test_a_naive_claim_past_the_lease_in_its_declared_zone_proceeds(naive):
    claim_naive(naive, "America/New_York", "3 hours")
    assert judged(naive, timestamp_zone="America/New_York").decision is Decision.PROCEED


def test_a_timestamptz_column_needs_no_declared_zone(runs):
    claim(runs, "10 minutes", None)
    assert judged(runs).decision is Decision.DEFER
