"""One orphan cut-off for the same row and clocks, whichever front judges, and a controller
clock that is off is reported.

A host whose clock runs 600 s behind the database reads its runtime's start 600 s early. A
single host's check (`fab guard`, the CLI, Ansible) and a fleet judgment (`fab drain` with
shared intake, the migrate role) both move that start into the database clock: a claim
made after the true restart is live for both, one made before it is an orphan for both.
"""

from contextlib import closing
from datetime import UTC, datetime, timedelta

import pytest

import leaseguard.adapters.guard as guard_module
from leaseguard.adapters.db import connect
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.fleet import ClockOffset
from leaseguard.core.verdict import Decision, RuntimeFacts, TaskTimeout
from leaseguard.orchestration.session import GuardSession
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.judging import evaluate

pytestmark = pytest.mark.integration

TIMEOUT = TaskTimeout(3600.0, "given:task_timeout_s")
BEHIND = ClockOffset(-600.0, 0.01)  # the host's clock minus the database's


@pytest.fixture
def restarted(db):
    """The runtime truly restarted 20 minutes ago (database clock); the host, 600 s behind,
    read its start as 30 minutes ago. Row 1 was claimed 5 minutes before the true restart
    (its worker is gone), row 2 one minute after it (live)."""
    now = datetime.now(UTC)
    true_start = now - timedelta(minutes=20)
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(
            conn,
            [
                (1, "running", true_start - timedelta(minutes=5), None),
                (2, "running", true_start + timedelta(minutes=1), None),
            ],
        )
    return db, true_start - timedelta(seconds=600)


def single_host(db, host_start, offset=BEHIND):
    contract = contract_from_mapping({})
    with connect(db.dsn, contract.connect_timeout_s) as conn:
        return evaluate(
            conn,
            contract,
            task_timeout=TIMEOUT,
            lease_s=7200.0,
            runtime_started_at=host_start,
            host="app1",
            clock_offset=offset,
        )


def fleet(db, host_start, offset=BEHIND):
    contract = contract_from_mapping({})
    facts = {"app1": RuntimeFacts(TIMEOUT, host_start)}
    with closing(GuardSession(contract, db.dsn, facts, host_offsets={"app1": offset})) as session:
        return session.judge()


def test_a_host_clock_behind_gives_one_cut_off_for_a_single_host_and_a_fleet(restarted):
    db, host_start = restarted
    one, many = single_host(db, host_start), fleet(db, host_start)
    for verdict in (one, many):
        assert verdict.decision is Decision.DEFER
        assert [c.id for c in verdict.live] == ["2"]  # live after the restart: protected
        assert verdict.counts.orphaned == 1  # claimed before the true restart: not protected
    assert any("600.000s behind the database clock" in w for w in one.warnings)


def test_without_the_offset_the_early_start_would_protect_the_orphan(restarted):
    """The cut-off the host's own reading gives: the orphan is taken as live."""
    db, host_start = restarted
    verdict = single_host(db, host_start, offset=None)
    assert verdict.counts.live == 2 and verdict.counts.orphaned == 0


class _ClockBehind:
    """This machine's clock, 600 s behind the real one (the database's)."""

    @staticmethod
    def time():
        return datetime.now(UTC).timestamp() - 600.0


def test_a_controller_clock_600_s_behind_is_warned_about_and_changes_no_class(
    restarted, monkeypatch
):
    db, host_start = restarted
    fine = single_host(db, host_start)
    assert not [w for w in fine.warnings if "this machine's clock" in w]
    monkeypatch.setattr(guard_module, "time", _ClockBehind)
    skewed = single_host(db, host_start)
    assert skewed.counts == fine.counts
    [warning] = [w for w in skewed.warnings if "this machine's clock" in w]
    assert warning.startswith("this machine's clock is 600.0s behind the database clock")
