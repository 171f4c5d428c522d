"""The clock offset a guard session judges with, measured once per session (clocks do not
drift measurably during a drain; per poll it would cost an SSH round trip each time).

One host: its clock minus the database's. A fleet: every host's start time is first moved
into the database clock (its offset from here chained with this machine's from the
database), so the oldest start is the oldest in truth; only the uncertainty is left.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import psycopg

from leaseguard.adapters.clock import database_clock, measure_offset, offset_from_here
from leaseguard.adapters.runtime import Runner
from leaseguard.core.clock_offset import ClockOffset, chained
from leaseguard.core.errors import LookupFailed
from leaseguard.core.fleet import FleetFacts, combine_facts, in_database_clocks
from leaseguard.core.verdict import RuntimeFacts

Conn = psycopg.Connection[tuple[object, ...]]


def host_minus_database(
    conn: Conn, runner: Runner, host_minus_here: ClockOffset | None
) -> ClockOffset:
    """One host's clock minus the database's, through this machine's clock; the host's
    offset from here as `look_up_host` read it, else read now."""
    host_minus_here = host_minus_here or offset_from_here(runner)
    return chained(host_minus_here, measure_offset(time.time, database_clock(conn)))


class FleetClocks:
    """A fleet's hosts' clocks minus the database's, from `from_here` (each host's clock
    minus this machine's, as looked up; None: start times read in this machine's clock, a
    CLI given the facts)."""

    def __init__(self, from_here: Mapping[str, ClockOffset] | None) -> None:
        self.from_here = from_here
        self.minus_database: dict[str, ClockOffset] = {}

    def into_database_clock(
        self, conn: Conn, fleet: FleetFacts, clock_skew_s: float
    ) -> tuple[FleetFacts, ClockOffset]:
        """The fleet's facts with every start time in the database clock, and the offset
        left to allow for (the largest uncertainty of the measurements)."""
        self.measure(conn, fleet.per_host)
        moved = combine_facts(in_database_clocks(fleet.per_host, self.minus_database, clock_skew_s))
        return moved, ClockOffset(0.0, max(o.uncertainty_s for o in self.minus_database.values()))

    def measure(self, conn: Conn, per_host: Mapping[str, RuntimeFacts]) -> None:
        """Every host's clock minus the database's (those whose start time matters)."""
        here_minus_db = measure_offset(time.time, database_clock(conn))
        self.minus_database = {
            host: chained(self._from_here(host), here_minus_db)
            for host, facts in sorted(per_host.items())
            if facts.runtime_started_at is not None
        }

    def report(self) -> dict[str, float]:
        """Each host's own offset, for the verdict (none for start times read here)."""
        if self.from_here is None:
            return {}
        return {host: round(offset.offset_s, 3) for host, offset in self.minus_database.items()}

    def _from_here(self, host: str) -> ClockOffset:
        if self.from_here is None:
            return ClockOffset(0.0, 0.0)
        if host not in self.from_here:
            raise LookupFailed(f"host {host}: no clock reading (its start cannot be compared)")
        return self.from_here[host]
