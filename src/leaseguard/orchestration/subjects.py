"""Whom a guard session judges, and by which facts: one host, a fleet by the fleet rule
(`leaseguard.core.fleet`), or each host of a fleet by its own facts, all in one query.

The clocks are measured once per session, on its first poll (leaseguard.orchestration.
session_clock): one host's clock minus the database's, or every host's start time moved into
the database clock (its offset from here, chained with this machine's from the database).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import psycopg

from leaseguard.adapters.guard import Subject, lease_seconds
from leaseguard.adapters.runtime import Runner
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError
from leaseguard.core.fleet import FleetFacts
from leaseguard.core.verdict import RuntimeFacts, Verdict
from leaseguard.orchestration.session_clock import FleetClocks, host_minus_database

Conn = psycopg.Connection[tuple[object, ...]]


class Judged:
    """One host's facts (`RuntimeFacts`), a fleet's combined facts (`FleetFacts`: judged by
    the fleet rule, the verdict naming which host supplied each), or every host's facts by
    name (`each`: each host judged by its own). `host_offsets` are the hosts' clocks minus
    this machine's; `host_labels` how each host is named in its verdict."""

    def __init__(
        self,
        contract: Contract,
        facts: RuntimeFacts | FleetFacts | Mapping[str, RuntimeFacts],
        host_offsets: Mapping[str, ClockOffset] | None = None,
        host_minus_here: ClockOffset | None = None,
        host_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.contract = contract
        self.fleet = facts if isinstance(facts, FleetFacts) else None
        self.each = _each_host(contract, facts) if isinstance(facts, Mapping) else None
        if isinstance(facts, FleetFacts):
            facts = facts.facts
        self.facts = RuntimeFacts(None, None) if isinstance(facts, Mapping) else facts
        self.lease_s = None if self.each else lease_seconds(contract, self.facts.task_timeout)
        self.fleet_clocks = FleetClocks(host_offsets)
        # The host's clock minus this machine's, read by the lookups' own exec (look_up_host).
        self.host_minus_here = host_minus_here
        self.host_labels = dict(host_labels or {})
        self.clock_offset: ClockOffset | None = None  # measured once, on the first poll

    def subjects(self, conn: Conn, runner: Runner, host: str) -> list[Subject]:
        """Whom one poll judges: `host` (or the fleet by the fleet rule), or each host."""
        if self.clock_offset is None and self._needs_clock():
            self.clock_offset = self._measure_clock(conn, runner)
        if self.each is None:
            facts = self.facts
            return [
                Subject(
                    host,
                    facts.task_timeout,
                    self.lease_s,
                    facts.runtime_started_at,
                    self.clock_offset,
                    facts.warnings,
                )
            ]
        offsets = self.fleet_clocks.minus_database
        return [
            Subject(
                self.host_labels.get(name, name),
                facts.task_timeout,
                lease_s,
                facts.runtime_started_at,
                offsets.get(name),
                facts.warnings,
            )
            for name, (facts, lease_s) in sorted(self.each.items())
        ]

    def finish(self, verdicts: list[Verdict], advice: tuple[str, ...]) -> list[Verdict]:
        """The verdicts with the session's advice, each host's replicas, the fleet's report."""
        facts = (
            [self.facts] if self.each is None else [f for _, (f, _) in sorted(self.each.items())]
        )
        return [
            self._finished(verdict, advice, f.replicas)
            for verdict, f in zip(verdicts, facts, strict=True)
        ]

    def _finished(
        self, verdict: Verdict, advice: tuple[str, ...], replicas: tuple[str, ...]
    ) -> Verdict:
        if not (advice or self.fleet is not None or replicas):
            return verdict
        return dataclasses.replace(
            verdict,
            warnings=(*verdict.warnings, *advice),
            fleet=self._fleet_report() if self.fleet is not None else None,
            replicas=replicas,
        )

    def _needs_clock(self) -> bool:
        if self.each is not None:
            return any(f.runtime_started_at is not None for f, _ in self.each.values())
        return self.facts.runtime_started_at is not None

    def _measure_clock(self, conn: Conn, runner: Runner) -> ClockOffset:
        """The clock offset that widens the orphan tolerance; a fleet's facts move into the
        database clock on the way."""
        if self.each is not None:
            self.fleet_clocks.measure(conn, {name: f for name, (f, _) in self.each.items()})
            return ClockOffset(0.0, 0.0)  # each host's own offset is in fleet_clocks
        if self.fleet is None:
            return host_minus_database(conn, runner, self.host_minus_here)
        skew_s = self.contract.clock_skew_s
        self.fleet, offset = self.fleet_clocks.into_database_clock(conn, self.fleet, skew_s)
        self.facts = self.fleet.facts
        return offset

    def _fleet_report(self) -> dict[str, Any]:
        assert self.fleet is not None
        report = self.fleet.as_dict()
        if offsets := self.fleet_clocks.report():
            report["clock_offsets_s"] = offsets
        return report


def _each_host(
    contract: Contract, per_host: Mapping[str, RuntimeFacts]
) -> dict[str, tuple[RuntimeFacts, float | None]]:
    """Every host's facts and its own lease (a host without a task timeout is named)."""
    if not per_host:
        raise ConfigError("a fleet judgment needs the facts of at least one host")
    each = {}
    for host, facts in per_host.items():
        try:
            each[host] = (facts, lease_seconds(contract, facts.task_timeout))
        except ConfigError as exc:
            raise ConfigError(f"host {host}: {exc}") from None
    return each
