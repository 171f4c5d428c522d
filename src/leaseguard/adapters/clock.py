"""Host-vs-database clock offset, for the orphan cut-off.

The runtime's start time comes from the host's clock, claimed_at from the database's: if
they disagree by more than clock_skew_s, a claim made just after the restart could look
older than the restart and be called an orphan while alive. So the offset is measured on
every check and the start time moved into the database clock; the measurement's
uncertainty widens the cut-off tolerance (never narrows it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from leaseguard.adapters.db import read_transaction
from leaseguard.adapters.runtime import Runner
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.errors import LookupFailed


def measure_offset(host_clock: Callable[[], float], db_clock: Callable[[], float]) -> ClockOffset:
    """Both clocks against the local one, each reading minus the local midpoint; half of
    each round trip bounds the error."""
    offsets, error = [], 0.0
    for read in (host_clock, db_clock):
        before = time.time()
        reading = read()
        after = time.time()
        offsets.append(reading - (before + after) / 2)
        error += (after - before) / 2
    return ClockOffset(offsets[0] - offsets[1], error)


def offset_from_here(runner: Runner) -> ClockOffset:
    """The host's clock minus this machine's, read with `date +%s.%N` (hosts need no Python)."""

    def read() -> float:
        result = runner.run(["date", "+%s.%N"])
        try:
            if result.exit_code != 0:
                raise ValueError
            return float(result.stdout.strip())
        except ValueError:
            raise LookupFailed(f"host {runner.label}: cannot read its clock (date)") from None

    return measure_offset(read, time.time)


def database_clock(conn: psycopg.Connection[tuple[object, ...]]) -> Callable[[], float]:
    """Read the database's clock (clock_timestamp, not the transaction's now())."""

    def read() -> float:
        with read_transaction(conn):
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])  # type: ignore[arg-type]

    return read
