"""The fleet rule: oldest runtime start, longest lease, whatever order the hosts come in."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest

from leaseguard.core.errors import ConfigError, LookupFailed
from leaseguard.core.fleet import (
    ClockOffset,
    combine_facts,
    fleet_facts,
    host_report,
)
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout

NOW = datetime(2026, 9, 9, 12, 0, tzinfo=UTC)


def facts(timeout_s: float | None, started_ago_s: float | None, *warnings: str) -> RuntimeFacts:
    timeout = TaskTimeout(timeout_s, "docker:backend/APP_TASK_TIMEOUT_S") if timeout_s else None
    started = NOW - timedelta(seconds=started_ago_s) if started_ago_s is not None else None
    return RuntimeFacts(timeout, started, warnings)


# (per-host facts, expected lease host, expected timeout, expected cut-off host)
CASES = [
    # the reproduction: app1 restarted 10 min ago, app2 up a day, same timeout
    ({"app1": facts(3600, 600), "app2": facts(3600, 86400)}, "app1", 3600, "app2"),
    # mid-rollout config change: the longer timeout wins, whichever host has it
    ({"app1": facts(60, 600), "app2": facts(3600, 600)}, "app2", 3600, "app1"),
    # one host whose start time is unknown: nothing can be classed orphaned
    ({"app1": facts(3600, 600), "app2": facts(3600, None)}, "app1", 3600, None),
    # a single host is its own fleet
    ({"app1": facts(120, 30)}, "app1", 120, "app1"),
    # a host named "" (a facts file's key) is a host like any other
    ({"": facts(120, 30), "b": facts(60, 10)}, "", 120, ""),
]


@pytest.mark.parametrize(("per_host", "lease_from", "timeout_s", "cutoff_from"), CASES)
def test_combine_takes_the_oldest_start_and_the_longest_lease(
    per_host, lease_from, timeout_s, cutoff_from
):
    fleet = combine_facts(per_host)
    assert fleet.lease_from == lease_from
    assert fleet.cutoff_from == cutoff_from
    assert fleet.facts.task_timeout is not None
    assert fleet.facts.task_timeout.seconds == timeout_s
    assert fleet.facts.task_timeout.source.startswith(f"{lease_from}:")
    expected_start = None if cutoff_from is None else per_host[cutoff_from].runtime_started_at
    assert fleet.facts.runtime_started_at == expected_start


def test_the_result_never_depends_on_host_order():
    hosts = {
        "c": facts(3600, 600),
        "a": facts(3600, 86400),
        "b": facts(3600, 86400),  # ties with a on the start, and with everyone on the lease
    }
    results = {
        combine_facts(dict(order)).as_dict().__repr__()
        for order in itertools.permutations(hosts.items())
    }
    assert len(results) == 1
    fleet = combine_facts(hosts)
    assert (fleet.lease_from, fleet.cutoff_from, fleet.hosts) == ("a", "a", ("a", "b", "c"))


def test_warnings_are_kept_and_name_their_host():
    fleet = combine_facts({"app1": facts(3600, 60, "assumed default_s"), "app2": facts(3600, 60)})
    assert fleet.facts.warnings == ("host app1: assumed default_s",)


def test_expiry_column_contracts_need_no_timeout_from_any_host():
    fleet = combine_facts({"app1": facts(None, 60), "app2": facts(None, 600)})
    assert fleet.facts.task_timeout is None and fleet.lease_from is None
    assert fleet.cutoff_from == "app2"


@pytest.mark.parametrize(
    ("per_host", "message"),
    [
        ({}, "at least one host"),
        (
            {"app1": facts(3600, 60), "app2": facts(None, 60)},
            "no task timeout is known for host(s) app2",
        ),
    ],
)
def test_invalid_fleets_fail_closed(per_host, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        combine_facts(per_host)


def test_start_times_move_into_the_database_clock():
    # a host 5 s ahead of the database reported its start 5 s later than the database saw it
    assert ClockOffset(5.0, 0.0).in_database_clock(NOW) == NOW - timedelta(seconds=5)
    assert ClockOffset(5.0, 0.0).in_database_clock(None) is None


# --- reports: the registered task_timeout results (or a facts file) of every host ----------

GOOD = {"task_timeout_s": 3600.0, "runtime_started_at": "2026-09-09T04:00:00+00:00"}


def test_reports_become_facts_with_their_provenance():
    reports = {
        "app1": {**GOOD, "source": "docker:backend/APP_TASK_TIMEOUT_S", "changed": False},
        "app2": {"task_timeout_s": "60", "runtime_started_at": NOW, "warnings": ["w"]},
    }
    per_host, offsets = fleet_facts(reports, ["app1", "app2"], with_clocks=False)
    assert offsets is None
    assert per_host["app1"].task_timeout == TaskTimeout(3600.0, "docker:backend/APP_TASK_TIMEOUT_S")
    assert per_host["app1"].runtime_started_at == datetime(2026, 9, 9, 4, tzinfo=UTC)
    assert per_host["app2"].task_timeout == TaskTimeout(60.0, "given:task_timeout_s")
    assert per_host["app2"].runtime_started_at == NOW
    assert per_host["app2"].warnings == ("w",)


def test_a_host_without_a_start_time_has_none_and_so_no_cutoff():
    per_host, offsets = fleet_facts({"app1": {"task_timeout_s": 60, "runtime_started_at": None}})
    assert offsets == {}
    assert per_host["app1"].runtime_started_at is None


def test_a_report_carries_the_facts_and_clock_every_front_passes_on():
    """host_report (task_timeout's result, Fabric's sessions) and fleet_facts round-trip."""
    one = RuntimeFacts(TaskTimeout(60.0, "fixed", assumed=True), NOW, ("w",), ("r1",))
    clock = ClockOffset(2.5, 0.01)
    per_host, offsets = fleet_facts({"app1": host_report(one, clock)}, ["app1"])
    assert per_host == {"app1": one} and offsets == {"app1": clock}
    started_unknown = host_report(RuntimeFacts(TaskTimeout(60.0, "fixed"), None), clock)
    assert "clock" not in started_unknown and fleet_facts({"app1": started_unknown})[1] == {}
    without_clock = host_report(one)
    with pytest.raises(LookupFailed, match="host app1: its lookup result has no clock reading"):
        fleet_facts({"app1": without_clock})
    assert fleet_facts({"app1": without_clock}, with_clocks=False)[1] is None


def test_a_usage_error_in_any_report_comes_before_a_missing_clock():
    """A config mistake on a later host is named (exit 2), not an earlier host's clock."""
    without_clock = host_report(RuntimeFacts(TaskTimeout(60.0, "fixed"), NOW))
    reports = {"app1": without_clock, "app2": {"task_timeout_s": 60, "bogus": 1}}
    with pytest.raises(ConfigError, match="host app2: unknown key"):
        fleet_facts(reports)


# (reports, hosts of the play, every host that must be named)
BAD_FLEETS = [
    ({"app1": GOOD}, ["app1", "app2"], ["host app2: no lookup result"]),
    ({"app1": GOOD, "app2": {}}, [], ["host app2: no lookup result"]),
    ({"app1": GOOD, "app2": None}, [], ["host app2: no lookup result"]),
    (
        {"app1": GOOD, "app2": {"unreachable": True, "msg": "ssh: connect to host"}},
        [],
        ["host app2: unreachable during its lookup"],
    ),
    ({"app1": GOOD, "app2": {"skipped": True}}, [], ["host app2: its lookup was skipped"]),
    (
        {
            "app1": {"failed": True, "error": {"message": "host app1: variable X is not set"}},
            "app2": {"failed": True, "msg": "raw text"},
        },
        ["app3"],
        [
            "host app1: its lookup failed (host app1: variable X is not set)",
            "host app2: its lookup failed",
            "host app3: no lookup result",
        ],
    ),
]


@pytest.mark.parametrize(("reports", "hosts", "named"), BAD_FLEETS)
def test_every_host_without_a_good_lookup_fails_closed_and_is_named(reports, hosts, named):
    with pytest.raises(LookupFailed) as caught:
        fleet_facts(reports, hosts)
    message = str(caught.value)
    for part in named:
        assert part in message
    assert "raw text" not in message and "ssh: connect" not in message


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"task_timeout_s": 0}, "host app1: task_timeout_s must be greater than 0 seconds"),
        ({"task_timeout_s": "abc"}, "host app1: task_timeout_s is not a number of seconds"),
        ({"task_timeout_s": True}, "host app1: task_timeout_s is a boolean"),
        (
            {"task_timeout_s": 60, "runtime_started_at": "yesterday"},
            "host app1: runtime_started_at is not an ISO 8601 timestamp",
        ),
        (
            {"task_timeout_s": 60, "runtime_started_at": datetime(2026, 1, 1)},
            "host app1: runtime_started_at has no timezone",
        ),
        ({"task_timeout": 60}, "host app1: unknown key(s) task_timeout"),
    ],
)
def test_bad_values_are_usage_errors_naming_host_and_key(report, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        fleet_facts({"app1": report}, with_clocks=False)


# --- clocks: every host's offset, chained through this machine's ---------------------------


def test_a_host_offset_is_chained_through_this_machines_clock():
    assert ClockOffset(2.0, 0.01).chained(ClockOffset(-0.5, 0.02)) == ClockOffset(1.5, 0.03)


def test_start_times_move_into_the_database_clock_before_the_oldest_is_chosen():
    # By their own clocks app2 started first; app1's clock is 100 s fast, so in the database
    # clock app1 started first. Only a host off by more than the skew is warned about.
    per_host = {
        "app1": RuntimeFacts(TaskTimeout(60.0, "fixed"), NOW - timedelta(seconds=1750)),
        "app2": RuntimeFacts(TaskTimeout(60.0, "fixed"), NOW - timedelta(seconds=1800)),
    }
    offsets = {"app1": ClockOffset(100.0, 0.01), "app2": ClockOffset(-0.5, 0.01)}
    for order in itertools.permutations(per_host.items()):
        combined = combine_facts(dict(order), offsets, clock_skew_s=1.0)
        assert combined.cutoff_from == "app1"
        assert combined.facts.runtime_started_at == NOW - timedelta(seconds=1850)
        assert [w.split(" clock is")[0] for w in combined.facts.warnings] == ["host app1"]
    app2 = combine_facts({"app2": per_host["app2"]}, offsets, clock_skew_s=1.0).facts
    assert app2.runtime_started_at == NOW - timedelta(seconds=1799.5)
