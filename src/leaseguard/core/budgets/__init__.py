"""pg_cron statement budgets, pure: `command` (budgets, names, the one command template and
its parser), `config` (the ``cron_budgets`` section), `planning` (the all-or-nothing plan).
The I/O is `leaseguard.adapters.budgets`. Only `LiveJob` is defined here: the drain's
pause code reads cron.job too and must not load the planning.
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
