"""A task run once over every -H host (Fabric would run it once per host, serially): the
executor, the host list, the worst status, the lines every task prints."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from fabric import Connection, Executor
from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.core.errors import EXIT_DEFER, EXIT_FAILED, EXIT_PROCEED, EXIT_USAGE
from leaseguard.core.verdict import failure_timeline

FLEET_HOSTS_KEY = "leaseguard_fleet_hosts"
MAX_PARALLEL_HOSTS = 64
T = TypeVar("T")


class FleetExecutor(Executor):  # type: ignore[misc]
    """Runs tasks marked `fleet` once with every -H host, other tasks as Fabric does."""

    def expand_calls(self, calls: list[Any], apply_hosts: bool = True) -> list[Any]:
        expanded: list[Any] = []
        host_str = self.core[0].args.hosts.value if apply_hosts else None
        for call in calls:
            body = getattr(getattr(call, "task", call), "body", None)
            if getattr(body, "leaseguard_fleet", False):
                hosts = host_str.split(",") if host_str else []
                self.config[FLEET_HOSTS_KEY] = hosts
                expanded.append(call)
            else:
                expanded.extend(super().expand_calls([call], apply_hosts=apply_hosts))
        return expanded


def fleet(body: Callable[..., Any]) -> Callable[..., Any]:
    body.leaseguard_fleet = True  # type: ignore[attr-defined]
    return body


def fleet_hosts(c: Context) -> list[str]:
    if isinstance(c, Connection):  # run by a plain Fabric executor: one host per call
        return [c.original_host]
    hosts = list(c.config.get(FLEET_HOSTS_KEY) or [])
    if not hosts:
        raise Exit("leaseguard: give the hosts to check with -H host1,host2", code=EXIT_USAGE)
    for host in hosts:
        if not host.rpartition("@")[2].partition(":")[0]:  # "root@", ":22", ""
            raise Exit(f"leaseguard: -H {host!r} names no host", code=EXIT_USAGE)
    return hosts


def for_each_host(
    hosts: list[str], work: Callable[[str], T], at_once: int = MAX_PARALLEL_HOSTS
) -> list[T]:
    """`work` on every host, at most `at_once` at a time (a drain, mostly waiting for the
    fleet's shared poll, passes every host)."""
    with ThreadPoolExecutor(max_workers=min(len(hosts), at_once)) as pool:
        return list(pool.map(work, hosts))


def exit_with_worst(statuses: list[int]) -> None:
    """Usage, else failed, else defer, else a --run command's own status, else proceed."""
    worst = next((s for s in (EXIT_USAGE, EXIT_FAILED, EXIT_DEFER) if s in statuses), None)
    worst = worst or next((s for s in statuses if s != EXIT_PROCEED), EXIT_PROCEED)
    if worst != EXIT_PROCEED:
        raise Exit(code=worst)


def say(message: str) -> None:
    print(f"leaseguard: {message}", file=sys.stderr, flush=True)


def failure_line(host: str, error: Exception) -> str:
    """The timeline line of a host whose task failed, with the reason."""
    return f"{failure_timeline(datetime.now(UTC), host, error)} reason={json.dumps(str(error))}"
