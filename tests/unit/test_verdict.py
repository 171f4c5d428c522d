import dataclasses
import json
from datetime import UTC, datetime

from leaseguard.core.errors import EXIT_DEFER, EXIT_PROCEED, DatabaseUnavailable
from leaseguard.core.verdict import (
    Counts,
    Decision,
    LiveClaim,
    TaskTimeout,
    failure_result,
    timeline_line,
)
from leaseguard.orchestration.drain import failure_output
from tests.support import verdicts

CHECKED = datetime(2026, 9, 9, 14, 48, 57, tzinfo=UTC)
STARTED = datetime(2026, 9, 9, 4, 0, tzinfo=UTC)


def make_verdict(live=1, queued=3):
    claims = tuple(
        LiveClaim(
            id="42",
            claimed_at=datetime(2026, 9, 9, 13, 18, 57, tzinfo=UTC),
            lease_expires_at=datetime(2026, 9, 9, 15, 18, 57, tzinfo=UTC),
            remaining_s=5400.0,
        )
        for _ in range(live)
    )
    return verdicts.make_verdict(
        counts=Counts(live=live, queued=queued),
        live=claims,
        at=CHECKED,
        task_timeout=TaskTimeout(3600.0, "docker:backend/APP_TASK_TIMEOUT_S"),
        runtime_started_at=STARTED,
        wait_upper_bound_s=5400.0 if live else 0.0,
    )


def test_one_live_row_defers_with_exit_status_75():
    verdict = make_verdict(live=1)
    assert verdict.decision is Decision.DEFER
    assert verdict.exit_status == EXIT_DEFER == 75


def test_no_live_row_proceeds_with_exit_status_0():
    verdict = make_verdict(live=0, queued=50)
    assert verdict.decision is Decision.PROCEED
    assert verdict.exit_status == EXIT_PROCEED == 0


def test_the_json_has_its_documented_keys_and_values():
    data = json.loads(json.dumps(make_verdict().as_dict()))
    assert data["decision"] == "defer"
    assert data["lease_s"] == 7200.0
    assert data["task_timeout_s"] == 3600.0
    assert data["task_timeout_source"] == "docker:backend/APP_TASK_TIMEOUT_S"
    assert data["runtime_started_at"] == "2026-09-09T04:00:00+00:00"
    assert data["checked_at"] == "2026-09-09T14:48:57+00:00"
    assert data["counts"] == {"live": 1, "stale": 0, "orphaned": 0, "queued": 3}
    assert data["live"] == [
        {
            "id": "42",
            "claimed_at": "2026-09-09T13:18:57+00:00",
            "lease_expires_at": "2026-09-09T15:18:57+00:00",
            "remaining_s": 5400.0,
            "never_expires": False,
            "expiry_null": False,
        }
    ]
    assert data["wait_upper_bound_s"] == 5400.0
    assert data["wait_upper_bound_known"] is True


def test_timeline_is_one_line_per_decision():
    line = make_verdict().timeline()
    assert "\n" not in line
    assert line.startswith(
        "2026-09-09T14:48:57Z leaseguard host=app1 decision=defer live=1 stale=0 orphaned=0 "
        "queued=3 lease_s=7200 source=docker:backend/APP_TASK_TIMEOUT_S"
    )


def test_an_assumed_timeout_is_said_so_in_the_timeline():
    verdict = make_verdict(live=0)
    verdict = dataclasses.replace(verdict, task_timeout=TaskTimeout(3600, "default", True))
    assert "timeout_assumed=yes" in verdict.timeline()
    assert verdict.as_dict()["task_timeout_assumed"] is True


def test_a_failed_check_has_its_own_timeline_line_and_never_says_proceed():
    line = timeline_line(CHECKED, "app1", Decision.FAILED, "error=DatabaseUnavailable")
    assert line == (
        "2026-09-09T14:48:57Z leaseguard host=app1 decision=failed error=DatabaseUnavailable"
    )
    # What every front prints for a failure: the error's class, never a proceed.
    for fab in (False, True):
        out = failure_output(DatabaseUnavailable("x"), "app1", as_json=False, fab=fab)
        assert " leaseguard host=app1 decision=failed error=DatabaseUnavailable" in out
        assert "proceed" not in out


def test_a_failure_result_says_failed_and_names_the_error_class():
    error = DatabaseUnavailable("database unreachable")
    assert failure_result(error, "app1") == {
        "decision": "failed",
        "host": "app1",
        "error": {"type": "DatabaseUnavailable", "message": "database unreachable"},
    }
    assert failure_result(error, None, CHECKED)["checked_at"] == CHECKED.isoformat()
    assert json.loads(failure_output(error, "app1", as_json=True, fab=True)) == {
        "decision": "failed",
        "host": "app1",
        "error": {"type": "DatabaseUnavailable", "message": "database unreachable"},
    }
