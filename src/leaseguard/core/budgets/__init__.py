"""pg_cron statement budgets, pure: `config`, `planning`. `LiveJob` lives here because the
intake holds read cron.job too and must not load either."""

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
