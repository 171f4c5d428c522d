"""Host-vs-database clock offset, for the orphan cut-off.

The runtime's start time comes from the host's clock, claimed_at from the database's.
If they disagree by more than clock_skew_s, a claim made just after the restart could
look older than the restart and be called an orphan: alive but unprotected. So the
offset is measured on every check, reported, and the cut-off tolerance is widened to
cover it (never narrowed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from leaseguard.adapters.runtime import Runner
from leaseguard.core.errors import LookupFailed


@dataclass(frozen=True)
class ClockOffset:
    """host clock minus database clock, and how precisely that is known."""

    offset_s: float
    uncertainty_s: float

    def tolerance_s(self, configured_s: float) -> float:
        """The orphan tolerance to use: the configured one, widened to cover the offset."""
        return max(configured_s, abs(self.offset_s) + self.uncertainty_s)

    def exceeds(self, configured_s: float) -> bool:
        """True when the clocks certainly differ by more than the configured tolerance."""
        return abs(self.offset_s) - self.uncertainty_s > configured_s

    def warning(self, host: str, configured_s: float) -> str:
        direction = "ahead of" if self.offset_s > 0 else "behind"
        return (
            f"host {host} clock is {abs(self.offset_s):.3f}s {direction} the database clock "
            f"(clock_skew_s={configured_s:g}); the orphan cut-off tolerance was widened to "
            f"{self.tolerance_s(configured_s):.3f}s"
        )


def _sample(read: Callable[[], float]) -> tuple[float, float]:
    """(reading minus the local midpoint, half the round trip)."""
    before = time.time()
    reading = read()
    after = time.time()
    return reading - (before + after) / 2, (after - before) / 2


def measure_offset(host_clock: Callable[[], float], db_clock: Callable[[], float]) -> ClockOffset:
    """Compare both clocks against the local one; the round trips bound the error."""
    host_rel, host_err = _sample(host_clock)
    db_rel, db_err = _sample(db_clock)
    return ClockOffset(host_rel - db_rel, host_err + db_err)


def host_clock(runner: Runner) -> Callable[[], float]:
    """Read the host's clock with `date +%s.%N` (hosts need no Python)."""

    def read() -> float:
        result = runner.run(["date", "+%s.%N"])
        try:
            if result.exit_code != 0:
                raise ValueError
            return float(result.stdout.strip())
        except ValueError:
            raise LookupFailed(f"host {runner.label}: cannot read its clock (date)") from None

    return read


def database_clock(conn: psycopg.Connection[tuple[object, ...]]) -> Callable[[], float]:
    """Read the database's clock (clock_timestamp, not the transaction's now())."""

    def read() -> float:
        with conn.transaction(), conn.cursor() as cur:
            row = cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])  # type: ignore[arg-type]

    return read
