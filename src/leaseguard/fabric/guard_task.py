"""`fab -H app1,app2 guard`: every host judged in parallel, one exit status.

It exits with the worst status (1 if any check failed, else 75 if any host defers, else 0).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fabric import task
from invoke.context import Context

from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict, failure_result
from leaseguard.fabric.fleet import (
    MAX_PARALLEL_HOSTS,
    exit_with,
    failure_line,
    fleet,
    fleet_hosts,
    for_each_host,
    worst_status,
)
from leaseguard.fabric.settings import (
    FabricSettings,
    HostSettings,
    connection_to,
    host_settings_or_exit,
    settings_or_exit,
)
from leaseguard.orchestration.host_start import HostStart, start_host

# The database code (psycopg with it): imported once the hosts started, not with the
# collection, so that its ~150 ms of CPU runs while they work.
JUDGING_CODE = "leaseguard.orchestration.ssh_session"


@task(
    help={"json_": "print a JSON list (one object per host) instead of timeline lines"},
)
@fleet
def guard(c: Context, json_: bool = False) -> None:
    """Judge every host's live leases in parallel: exit 0 proceed, 75 defer, 1 failed."""
    host_settings = host_settings_or_exit(c)
    hosts = fleet_hosts(c)
    with _hosts_started(hosts, c, host_settings) as starts:
        # Read only now: the DSN's validation imports psycopg, and the judging code with
        # it, ~150 ms of CPU that runs while the hosts started above do their part.
        settings = settings_or_exit(c, host_settings)
        importlib.import_module(JUDGING_CODE)
        outcomes = for_each_host(hosts, lambda h: _guard_one(h, c, settings, starts.pop(h, None)))
    if json_:
        print(json.dumps([_outcome_dict(o) for o in outcomes]))
    else:
        for outcome in outcomes:
            print(_outcome_line(outcome))
            if isinstance(outcome[1], Verdict):
                for warning in outcome[1].warnings:
                    print(f"leaseguard: warning: {warning}", file=sys.stderr)
    exit_with(worst_status([_outcome_status(o) for o in outcomes]))


Outcome = tuple[str, Verdict | LeaseguardError]


@contextmanager
def _hosts_started(
    hosts: list[str], c: Context, settings: HostSettings
) -> Iterator[dict[str, HostStart]]:
    """The hosts the fleet runs first (as many as run at once), started in the background.

    Each opens its SSH connection and runs its lookups' exec on a thread of its own; the
    guard takes them over (`_guard_one`). Those it never takes (the rest of the settings
    were refused) have their lookup cancelled and their connection closed.
    """
    starts: dict[str, HostStart] = {}
    try:
        for host in hosts[:MAX_PARALLEL_HOSTS]:
            if host not in starts:
                starts[host] = start_host(connection_to(host, c, settings), settings.contract)
        yield starts
    finally:
        for untaken in starts.values():
            untaken.abandon()


def _guard_one(
    host: str, c: Context, settings: FabricSettings, started: HostStart | None
) -> Outcome:
    # Loaded already by guard (see JUDGING_CODE): this import only looks it up.
    from leaseguard.orchestration.ssh_session import ssh_session

    started = started or start_host(connection_to(host, c, settings), settings.contract)
    connection = started.connection
    try:
        with ssh_session(
            connection,
            settings.contract,
            settings.conninfo,
            settings.address,
            judge_at_once=True,
            started=started,
        ) as s:
            s.cron_database = settings.drain.cron_database
            s.cron_user, s.cron_password = settings.drain.cron_user, settings.drain.cron_password
            return host, s.judge()
    except LeaseguardError as exc:
        return host, exc
    finally:
        connection.close()


def _outcome_status(outcome: Outcome) -> int:
    """The verdict's status, or the error's: 1 failed, 2 usage (e.g. a status an enum lacks)."""
    return outcome[1].exit_status


def _outcome_line(outcome: Outcome) -> str:
    host, result = outcome
    if isinstance(result, Verdict):
        return result.timeline()
    return failure_line(host, result)


def _outcome_dict(outcome: Outcome) -> dict[str, Any]:
    host, result = outcome
    if isinstance(result, Verdict):
        return result.as_dict()
    return failure_result(result, host)
