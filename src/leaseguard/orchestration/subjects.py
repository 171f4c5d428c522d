"""Whom a guard session judges: one host, a fleet by the fleet rule, or each host by its own.

A start is read on its host's clock, claimed_at on the database's: skewed, a claim made just
after a restart could look orphaned. So each start moves into the database clock on the first
poll, and the measurement's uncertainty only widens the orphan tolerance."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import psycopg

from leaseguard.adapters.db import here_minus_database
from leaseguard.adapters.guard import Subject, lease_seconds
from leaseguard.adapters.runtime import Runner, offset_from_here
from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, LookupFailed
from leaseguard.core.fleet import (
    ClockOffset,
    FleetFacts,
    chained,
    combine_facts,
    in_database_clocks,
)
from leaseguard.core.verdict import RuntimeFacts, Verdict

Conn = psycopg.Connection[tuple[object, ...]]


class Judged:
    """One host's facts, a fleet's (`fleet`) or each host's (`each`); `host_offsets`: the hosts'
    clocks minus this machine's (None: start times read here)."""

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
        one = RuntimeFacts(None, None) if isinstance(facts, Mapping) else facts
        self.facts = one.facts if isinstance(one, FleetFacts) else one
        self.lease_s = None if self.each else lease_seconds(contract, self.facts.task_timeout)
        self.host_offsets, self.host_minus_here = host_offsets, host_minus_here
        self.host_labels = dict(host_labels or {})  # how each host is named in its verdict
        self.clock_offset: ClockOffset | None = None  # measured once, on the first poll
        self.minus_database: dict[str, ClockOffset] = {}  # each host's clock minus the database's

    def subjects(self, conn: Conn, runner: Runner, host: str) -> list[Subject]:
        every = [f for f, _ in self.each.values()] if self.each is not None else [self.facts]
        if self.clock_offset is None and any(f.runtime_started_at is not None for f in every):
            self.clock_offset = self._measure_clock(conn, runner)
        if self.each is None:
            judged = [(host, self.facts, self.lease_s, self.clock_offset)]
        else:
            judged = [
                (self.host_labels.get(name, name), facts, lease_s, self.minus_database.get(name))
                for name, (facts, lease_s) in sorted(self.each.items())
            ]
        return [
            Subject(label, f.task_timeout, lease_s, f.runtime_started_at, offset, f.warnings)
            for label, f, lease_s, offset in judged
        ]

    def finish(self, verdicts: list[Verdict], advice: tuple[str, ...]) -> list[Verdict]:
        each = [] if self.each is None else sorted(self.each.items())
        facts = [f for _, (f, _) in each] if each else [self.facts]
        fleet = self.fleet.as_dict() if self.fleet is not None else None
        if fleet is not None and self.host_offsets is not None and self.minus_database:
            offsets = self.minus_database.items()
            fleet["clock_offsets_s"] = {host: round(o.offset_s, 3) for host, o in offsets}
        return [
            dataclasses.replace(
                v, warnings=(*v.warnings, *advice), fleet=fleet, replicas=f.replicas
            )
            for v, f in zip(verdicts, facts, strict=True)
        ]

    def _measure_clock(self, conn: Conn, runner: Runner) -> ClockOffset:
        if self.fleet is not None:
            per_host = self.fleet.per_host
        elif self.each is not None:
            per_host = {name: facts for name, (facts, _) in self.each.items()}
        else:
            host_minus_here = self.host_minus_here or offset_from_here(runner)
            return chained(host_minus_here, here_minus_database(conn, self.contract))
        here_minus_db = here_minus_database(conn, self.contract)
        self.minus_database = {
            host: chained(self._from_here(host), here_minus_db)
            for host, facts in sorted(per_host.items())
            if facts.runtime_started_at is not None
        }
        if self.fleet is None:
            return ClockOffset(0.0, 0.0)  # each host's own offset is in minus_database
        skew_s = self.contract.clock_skew_s
        self.fleet = combine_facts(in_database_clocks(per_host, self.minus_database, skew_s))
        self.facts = self.fleet.facts
        return ClockOffset(0.0, max(o.uncertainty_s for o in self.minus_database.values()))

    def _from_here(self, host: str) -> ClockOffset:
        if self.host_offsets is None:
            return ClockOffset(0.0, 0.0)
        if host not in self.host_offsets:
            raise LookupFailed(f"host {host}: no clock reading (its start cannot be compared)")
        return self.host_offsets[host]


def _each_host(
    contract: Contract, per_host: Mapping[str, RuntimeFacts]
) -> dict[str, tuple[RuntimeFacts, float | None]]:
    if not per_host:
        raise ConfigError("a fleet judgment needs the facts of at least one host")
    each = {}
    for host, facts in per_host.items():
        try:
            each[host] = (facts, lease_seconds(contract, facts.task_timeout))
        except ConfigError as exc:
            raise ConfigError(f"host {host}: {exc}") from None
    return each
