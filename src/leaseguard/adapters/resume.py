"""Give back the intake pauses drains recorded and never resumed (`leaseguard resume`).

Shared by the CLI, `fab resume` and the Ansible front: connect to the database holding
cron.job, reactivate exactly the recorded jobs and delete their records, in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from leaseguard.adapters.db import connect
from leaseguard.adapters.pauses import resume_recorded


def resume_pauses(
    conninfo: str,
    *,
    cron_database: str | None = None,
    jobs: Sequence[str] | None = None,
    connect_timeout_s: int = 10,
) -> dict[str, Any]:
    """What was recorded, what was reactivated, and what had vanished meanwhile."""
    with connect(conninfo, connect_timeout_s, writable=True, dbname=cron_database) as conn:
        records, plan = resume_recorded(conn, jobs)
    return {
        "records": [record.as_dict() for record in records],
        "resumed": plan.resumed if plan else [],
        "already_active": [
            job.job for job in (plan.jobs if plan else ()) if job.exists and not job.changed
        ],
        "missing": plan.missing if plan else [],
    }


def resume_lines(outcome: dict[str, Any]) -> str:
    """One timeline line per recorded job: what `resume` did with it."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not outcome["records"]:
        return f"{stamp} leaseguard resume recorded=0 (no drain left intake paused)"
    lines = []
    for record in outcome["records"]:
        job = record["job"]
        state = (
            "resumed"
            if job in outcome["resumed"]
            else "already_active"
            if job in outcome["already_active"]
            else "missing"
        )
        lines.append(
            f"{stamp} leaseguard resume job={job} state={state} "
            f"paused_at={record['paused_at']} by={record['by'].replace(' ', '_')}"
        )
    return "\n".join(lines)
