"""Replicas: docker filters and unit globs judged by the oldest start and the longest timeout."""

import json
import re
from datetime import UTC, datetime

import pytest

from leaseguard.adapters.runtime import resolve_runtime_facts
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import (
    CommandResult,
    container_argv,
    container_filter,
    env_value,
    parse_systemctl_glob,
    read_containers,
)


def line(name, started, timeout="3600", *, running=True, project="", service=""):
    env = [f"APP_TASK_TIMEOUT_S={timeout}"] if timeout is not None else []
    return json.dumps(
        {
            "name": f"/{name}",
            "running": running,
            "started_at": started,
            "project": project,
            "service": service,
            "compose": bool(project and service),
            "env": [*env, None],
        }
    )


class Host:
    """Answers every container command with `out`; records what was run."""

    label = "app1"

    def __init__(self, out, exit_code=0):
        self.result, self.calls = CommandResult(exit_code, out), []

    def run(self, argv):
        self.calls.append(list(argv))
        return self.result


def facts_for(container, out, **keys):
    contract = contract_from_mapping(
        {"task_timeout": {"container": container}, "runtime": {"container": container}, **keys}
    )
    host = Host(out)
    return resolve_runtime_facts(contract, host), host


REPLICAS = "\n".join(
    [
        line("p-worker-1", "2026-09-09T10:00:00Z", "60", project="p", service="worker"),
        line("p-worker-2", "2026-09-09T08:00:00Z", "3600", project="p", service="worker"),
        line("p-worker-3", "2026-09-09T09:00:00Z", "600", project="p", service="worker"),
    ]
)


@pytest.mark.parametrize("container", ["label=com.docker.compose.service=worker", "name=^p-"])
def test_a_filter_takes_the_oldest_start_and_the_longest_timeout_and_lists_every_match(
    container,
):
    facts, host = facts_for(container, REPLICAS)
    assert facts.runtime_started_at == datetime(2026, 9, 9, 8, tzinfo=UTC)
    assert facts.task_timeout.seconds == 3600.0
    assert facts.task_timeout.source == f"docker:{container}/APP_TASK_TIMEOUT_S"
    assert facts.replicas == ("p-worker-1", "p-worker-2", "p-worker-3")
    assert facts.warnings == ()
    assert len(host.calls) == 1  # one command serves both facts


def test_the_order_the_engine_lists_matches_in_does_not_change_the_facts():
    reversed_out = "\n".join(reversed(REPLICAS.splitlines()))
    a, _ = facts_for("name=^p-", REPLICAS)
    b, _ = facts_for("name=^p-", reversed_out)
    assert (a.runtime_started_at, a.task_timeout, a.replicas) == (
        b.runtime_started_at,
        b.task_timeout,
        b.replicas,
    )


def test_a_filter_matching_no_running_container_fails_naming_the_filter():
    stopped = line("p-worker-1", "2026-09-09T10:00:00Z", running=False)
    for out in ("", stopped):
        with pytest.raises(
            LookupFailed, match=re.escape("no running container matches the filter name=^p-")
        ):
            facts_for("name=^p-", out)


def test_a_match_without_the_variable_fails_naming_the_replica():
    out = REPLICAS + "\n" + line("p-worker-4", "2026-09-09T11:00:00Z", None)
    with pytest.raises(LookupFailed, match=r"\(p-worker-4\): variable APP_TASK_TIMEOUT_S"):
        facts_for("name=^p-", out)


@pytest.mark.parametrize("container", ["label=", "name=", "label==x"])
def test_a_filter_naming_nothing_fails_before_asking_the_engine(container):
    with pytest.raises(LookupFailed, match="names no"):
        container_filter(container)
    with pytest.raises(LookupFailed, match="names no"):
        facts_for(container, REPLICAS)


def test_a_named_container_with_running_compose_siblings_warns_naming_them():
    named = line("p-worker-1", "2026-09-09T10:00:00Z", "60", project="p", service="worker")
    others = [
        named,
        line("p-worker-2", "2026-09-09T08:00:00Z", project="p", service="worker"),
        line("p-worker-3", "2026-09-09T08:00:00Z", project="p", service="worker", running=False),
        line("q-worker-1", "2026-09-09T08:00:00Z", project="q", service="worker"),
        line("p-web-1", "2026-09-09T08:00:00Z", project="p", service="web"),
    ]
    facts, _ = facts_for("p-worker-1", "\n".join(others))
    # the named container's own facts: the sibling only warns
    assert facts.runtime_started_at == datetime(2026, 9, 9, 10, tzinfo=UTC)
    assert facts.task_timeout.seconds == 60.0
    assert facts.replicas == ()
    [warning] = facts.warnings
    assert "p-worker-2" in warning and "host app1" in warning
    assert not any(name in warning for name in ("p-worker-3", "q-worker-1", "p-web-1"))
    assert "label=com.docker.compose.service=worker" in warning


def test_a_named_container_outside_compose_has_no_siblings():
    _found, siblings = read_containers(line("backend", "2026-09-09T10:00:00Z"), "backend", "x")
    assert siblings == []


def test_only_the_named_variable_is_asked_for_and_only_its_entries_are_read():
    argv = container_argv("podman", "backend", "APP_TASK_TIMEOUT_S")
    template = argv[-1]
    assert '"APP_TASK_TIMEOUT_S="' in template and "slice . 0 19" in template
    assert "{{json .Config.Env}}" not in template and "{{json .}}" in template
    out = json.dumps(
        {
            "name": "backend",
            "running": True,
            "started_at": "2026-09-09T10:00:00Z",
            "project": None,
            "service": None,
            "env": ["APP_TASK_TIMEOUT_S=60", None],
        }
    )
    [backend], _siblings = read_containers(out, "backend", "x")
    assert env_value(backend.entries, "APP_TASK_TIMEOUT_S") == "60"


def test_timeout_and_start_from_the_same_container_are_one_command():
    _facts, host = facts_for("label=a=b", REPLICAS)
    [command] = host.calls
    assert command[4:6] == ["docker", "label=a=b"]
    _facts, host = facts_for("label=a=b", REPLICAS, runtime={"container": "label=c=d"})
    assert len(host.calls) == 2  # two containers: one command each


def test_the_command_source_refuses_a_filter():
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "command", "command": ["cat", "/t"], "container": "name=w"},
            "runtime": {"source": "none"},
        }
    )
    with pytest.raises(LookupFailed, match="not in those a filter matches"):
        resolve_runtime_facts(contract, Host(""))


def unit_block(unit, active_since, timeout="1800", state="active"):
    env = f"APP_TASK_TIMEOUT_S={timeout} SECRET=x" if timeout else ""
    return (
        f"Id={unit}\nEnvironment={env}\n"
        f"ActiveEnterTimestamp=Sun 2026-11-29 {active_since}.000000 UTC\n"
        f"ActiveState={state}\nLoadState=loaded\n"
    )


UNITS = "\n".join(
    [
        unit_block("worker@1.service", "10:00:00", "60"),
        unit_block("worker@2.service", "08:00:00", "3600"),
        unit_block("worker@3.service", "07:00:00", "7200", state="inactive"),
    ]
)


def test_a_unit_glob_takes_the_oldest_and_longest_of_the_active_units():
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "systemd", "unit": "worker@*.service"},
            "runtime": {"source": "systemd", "unit": "worker@*.service"},
        }
    )
    for out in (UNITS, "\n\n".join(reversed(UNITS.split("\n\n")))):
        facts = resolve_runtime_facts(contract, Host(out))
        assert facts.runtime_started_at == datetime(2026, 11, 29, 8, tzinfo=UTC)
        assert facts.task_timeout.seconds == 3600.0
        assert facts.replicas == ("worker@1.service", "worker@2.service")


def test_a_unit_glob_over_no_active_unit_fails_naming_the_glob():
    inactive = unit_block("worker@3.service", "07:00:00", state="inactive")
    for out in ("", inactive):
        with pytest.raises(LookupFailed, match=r"no active systemd unit matches worker@\*"):
            parse_systemctl_glob(out, "worker@*.service")


@pytest.mark.parametrize("state", ["deactivating", "reloading", "activating"])
def test_a_unit_glob_keeps_a_unit_still_stopping_or_starting_and_its_older_start(state):
    """A unit finishing a graceful stop still runs the process that claimed: its earlier start
    is the cut-off, or that process's claims would count as orphaned."""
    out = "\n".join(
        [
            unit_block("worker@1.service", "10:00:00", "60"),
            unit_block("worker@2.service", "06:00:00", "3600", state=state),
            unit_block("worker@3.service", "05:00:00", "7200", state="inactive"),
            unit_block("worker@4.service", "04:00:00", "7200", state="failed"),
        ]
    )
    units = parse_systemctl_glob(out, "worker@*.service")
    assert [u.name for u in units] == ["worker@1.service", "worker@2.service"]
    assert min(u.started_at for u in units) == datetime(2026, 11, 29, 6, tzinfo=UTC)
    # Only a stopping, reloading or starting unit: still a match, not "no active unit".
    [alone] = parse_systemctl_glob(out.split("\n\n", 1)[1], "worker@*.service")
    assert alone.name == "worker@2.service"


def test_a_unit_glob_over_a_unit_starting_for_the_first_time_fails_closed():
    block = unit_block("worker@2.service", "06:00:00", state="activating")
    block = block.replace("ActiveEnterTimestamp=Sun 2026-11-29 06:00:00.000000 UTC\n", "")
    out = "\n".join([unit_block("worker@1.service", "10:00:00"), block])
    with pytest.raises(LookupFailed, match=r"worker@2.service is starting \(activating\)"):
        parse_systemctl_glob(out, "worker@*.service")


def test_the_verdict_and_the_fleet_list_every_match():
    from dataclasses import replace

    from leaseguard.core.fleet import combine_facts, fleet_facts
    from leaseguard.core.verdict import Counts, RuntimeFacts, TaskTimeout, Verdict

    now = datetime(2026, 9, 9, 12, tzinfo=UTC)
    verdict = Verdict(Counts(live=1), (), now, 7200.0, None, None, 10.0, "t")
    verdict = replace(verdict, replicas=("p-worker-1", "p-worker-2"))
    assert verdict.as_dict()["replicas"] == ["p-worker-1", "p-worker-2"]
    assert " replicas=p-worker-1,p-worker-2 " in verdict.timeline()
    assert "replicas" not in replace(verdict, replicas=()).as_dict()

    one = RuntimeFacts(TaskTimeout(60, "docker:name=^w/V"), now, (), ("w1", "w2"))
    reported = fleet_facts({"app2": {"task_timeout_s": 60, "replicas": ["w3"]}})[0]["app2"]
    fleet = combine_facts({"app1": one, "app2": reported})
    assert fleet.facts.replicas == ("app1:w1", "app1:w2", "app2:w3")
