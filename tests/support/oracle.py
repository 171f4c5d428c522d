"""A plain-Python statement of the judgment table (README.md, "The judgment"), to
cross-check the SQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Row:
    id: int
    status: str
    claimed_at: datetime | None


def classify(
    row: Row,
    *,
    now: datetime,
    lease_s: float,
    claimed: set[str],
    queued: set[str],
    runtime_started_at: datetime | None,
    clock_skew_s: float = 0.0,
) -> str | None:
    """queued / orphaned / stale / live, or None for rows the guard does not look at."""
    if row.status in queued:
        return "queued"
    if row.status not in claimed:
        return None
    if row.claimed_at is None:
        return "live"  # cannot be proven dead
    if runtime_started_at is not None and row.claimed_at < runtime_started_at - timedelta(
        seconds=clock_skew_s
    ):
        return "orphaned"
    if row.claimed_at + timedelta(seconds=lease_s) <= now:
        return "stale"
    return "live"


def unclassified(
    rows: list[Row], *, claimed: set[str], queued: set[str], finished: set[str]
) -> dict[str | None, int]:
    """Rows per status in none of the three lists (None: a NULL status): any fails the check."""
    found: dict[str | None, int] = {}
    for row in rows:
        if row.status not in claimed | queued | finished:
            found[row.status] = found.get(row.status, 0) + 1
    return found


@dataclass(frozen=True)
class Host:
    """One host of a fleet: its lease and when its runtime started (None: unknown)."""

    name: str
    lease_s: float
    runtime_started_at: datetime | None


def classify_for_fleet(
    row: Row,
    *,
    now: datetime,
    hosts: list[Host],
    claimed: set[str],
    queued: set[str],
    clock_skew_s: float = 0.0,
) -> str | None:
    """The fleet rule stated as quantifiers over the hosts, not as min/max.

    A claim may be running on any host. It is an orphan only if it predates EVERY host's
    runtime (and every start is known), and stale only once NO host's lease still covers it.
    """
    if row.status in queued:
        return "queued"
    if row.status not in claimed:
        return None
    if row.claimed_at is None:
        return "live"
    claimed_at = row.claimed_at
    skew = timedelta(seconds=clock_skew_s)
    if all(
        h.runtime_started_at is not None and claimed_at < h.runtime_started_at - skew for h in hosts
    ):
        return "orphaned"
    if all(claimed_at + timedelta(seconds=h.lease_s) <= now for h in hosts):
        return "stale"
    return "live"
