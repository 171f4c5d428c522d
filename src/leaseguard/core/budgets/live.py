"""A row of pg_cron's cron.job as the planning reads it (`leaseguard.adapters.cron` reads the rows).

A plain value, apart from the code that reads it, so the planning stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LiveJob:
    """A row of pg_cron's cron.job."""

    jobid: int
    name: str
    schedule: str
    command: str
    active: bool = True
    database: str | None = None
    username: str | None = None
