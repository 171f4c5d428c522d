"""The fleet rule: facts for a judgment that is global to every host of a deploy.

A per-host restart is judged with that host's own facts: a claim older than *this* host's
runtime start cannot be running on it. Anything global (a migration, applying budgets,
pausing shared intake) acts on work that may be running on *any* host, so it is judged once
with facts that protect every host's possible claims:

- the orphan cut-off is the OLDEST runtime start: a claim is an orphan only if it predates
  every host's runtime;
- the lease is the LONGEST task timeout: a claim is stale only once no host's lease can
  still cover it;
- a host whose start time is unknown makes the cut-off unknown, so nothing is classed
  orphaned (the safe direction), exactly as for a single host.

Ties are broken by host name, so the result (and the host it names as the source of each
fact) never depends on the order the hosts were listed or answered in. Start times are
compared as the hosts reported them; callers that measured a host's clock offset convert
its start time to the database clock first (`in_database_clock`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from leaseguard.core.errors import ConfigError
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout


@dataclass(frozen=True)
class FleetFacts:
    """Combined facts, and which host supplied each one."""

    facts: RuntimeFacts
    hosts: tuple[str, ...]
    lease_from: str | None  # host whose task timeout is the longest (None: no timeout needed)
    cutoff_from: str | None  # host whose runtime started first (None: cut-off unknown)

    def as_dict(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "lease_from": self.lease_from,
            "orphan_cutoff_from": self.cutoff_from,
        }


def combine_facts(per_host: Mapping[str, RuntimeFacts]) -> FleetFacts:
    """The fleet rule over every host's facts (see the module docstring)."""
    if not per_host:
        raise ConfigError("a fleet judgment needs the facts of at least one host")
    hosts = tuple(sorted(per_host))
    lease_from = _longest_timeout_host(per_host, hosts)
    cutoff_from = _oldest_start_host(per_host, hosts)
    timeout = _attributed_timeout(per_host, lease_from) if lease_from else None
    started = per_host[cutoff_from].runtime_started_at if cutoff_from else None
    warnings = tuple(
        warning if warning.startswith(f"host {host}") else f"host {host}: {warning}"
        for host in hosts
        for warning in per_host[host].warnings
    )
    return FleetFacts(RuntimeFacts(timeout, started, warnings), hosts, lease_from, cutoff_from)


def in_database_clock(started_at: datetime | None, host_minus_db_s: float) -> datetime | None:
    """A host's start time expressed in the database clock (offset = host minus database)."""
    if started_at is None:
        return None
    return started_at - timedelta(seconds=host_minus_db_s)


def _longest_timeout_host(
    per_host: Mapping[str, RuntimeFacts], hosts: tuple[str, ...]
) -> str | None:
    with_timeout = [h for h in hosts if per_host[h].task_timeout is not None]
    if not with_timeout:
        return None
    if len(with_timeout) != len(hosts):
        missing = ", ".join(h for h in hosts if per_host[h].task_timeout is None)
        raise ConfigError(f"no task timeout is known for host(s) {missing}")
    # max() keeps the first of equal values: hosts are sorted, so the name breaks ties.
    return max(with_timeout, key=lambda h: _seconds(per_host[h].task_timeout))


def _oldest_start_host(per_host: Mapping[str, RuntimeFacts], hosts: tuple[str, ...]) -> str | None:
    starts = {h: per_host[h].runtime_started_at for h in hosts}
    if any(started is None for started in starts.values()):
        return None
    return min(hosts, key=lambda h: starts[h])  # type: ignore[arg-type, return-value]


def _attributed_timeout(per_host: Mapping[str, RuntimeFacts], host: str) -> TaskTimeout:
    timeout = per_host[host].task_timeout
    assert timeout is not None
    return TaskTimeout(timeout.seconds, f"{host}:{timeout.source}", assumed=timeout.assumed)


def _seconds(timeout: TaskTimeout | None) -> float:
    assert timeout is not None
    return timeout.seconds
