"""The fleet rule: oldest runtime start, longest lease, whatever order the hosts come in."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest

from leaseguard.core.errors import ConfigError
from leaseguard.core.fleet import combine_facts, in_database_clock
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
    expected_start = per_host[cutoff_from].runtime_started_at if cutoff_from else None
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
    assert in_database_clock(NOW, 5.0) == NOW - timedelta(seconds=5)
    assert in_database_clock(None, 5.0) is None
