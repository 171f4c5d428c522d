"""`fab -H app1,app2 guard`: every host judged at once, one exit status.

It exits with the worst status (1 if any check failed, else 75 if any host defers, else 0).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fabric import task
from invoke.context import Context

from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict, failure_result
from leaseguard.fabric.fleet import exit_with, failure_line, fleet, fleet_hosts, worst_status
from leaseguard.fabric.settings import settings_or_exit


@task(
    help={"json_": "print a JSON list (one object per host) instead of timeline lines"},
)
@fleet
def guard(c: Context, json_: bool = False) -> None:
    """Judge every host's live leases: exit 0 proceed, 75 defer, 1 failed.

    The hosts are looked up in parallel, then judged together: one query over one database
    connection (through the first host's tunnel), each host by its own facts.
    """
    from leaseguard.fabric.hosts import judge_opened, opened_hosts

    settings = settings_or_exit(c)
    hosts = fleet_hosts(c)
    with opened_hosts(list(dict.fromkeys(hosts)), c, settings) as opened:
        judged = judge_opened(opened, settings)
    outcomes = [(host, judged[host]) for host in hosts]  # a host named twice: twice
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
