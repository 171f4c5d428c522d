"""A host's clock and the database's, read against this machine's (error: half a round trip)."""

from __future__ import annotations

import time

import psycopg

from leaseguard.adapters.db import read_transaction
from leaseguard.adapters.runtime import Runner
from leaseguard.core.errors import LookupFailed
from leaseguard.core.fleet import ClockOffset, controller_offset


def offset_from_here(runner: Runner) -> ClockOffset:
    """The host's clock minus this machine's, read with `date +%s.%N` (hosts need no Python)."""
    before = time.time()
    result = runner.run(["date", "+%s.%N"])
    after = time.time()
    try:
        if result.exit_code != 0:
            raise ValueError
        reading = float(result.stdout.strip())
    except ValueError:
        raise LookupFailed(f"host {runner.label}: cannot read its clock (date)") from None
    return ClockOffset(reading - (before + after) / 2, (after - before) / 2)


def here_minus_database(conn: psycopg.Connection[tuple[object, ...]]) -> ClockOffset:
    """This machine's clock minus the database's (clock_timestamp, not the transaction's now())."""
    before = time.time()
    with read_transaction(conn):
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    after = time.time()
    assert row is not None
    return controller_offset(float(row[0]), before, after)  # type: ignore[arg-type]
