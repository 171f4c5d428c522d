"""`leaseguard resume`, `fab resume` and cron_budget's resume_recorded: give back the intake
holds drains recorded and never released (reactivate exactly those jobs, delete the records)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from leaseguard.adapters.cron import cron_transaction
from leaseguard.adapters.db import connect
from leaseguard.adapters.pauses import read_records, resume_recorded
from leaseguard.core.errors import DatabaseError

_SEES_JOBS = """
SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
       OR EXISTS (SELECT 1 FROM cron.job)
"""


def resume_pauses(
    conninfo: str,
    *,
    cron_database: str | None = None,
    jobs: Sequence[str] | None = None,
    connect_timeout_s: int = 10,
    user: str | None = None,
    password: str | None = None,
    check_mode: bool = False,
) -> dict[str, Any]:
    """What was recorded, reactivated, and had vanished meanwhile (`check_mode`: the records
    only). Fails closed when the role sees no pg_cron job and is not a superuser: pg_cron shows
    each role only its own jobs, so "nothing recorded" would be a guess."""
    who: dict[str, Any] = dict(dbname=cron_database, user=user, password=password)
    with connect(conninfo, connect_timeout_s, writable=True, **who) as conn:
        if check_mode:
            return {"records": [r.as_dict() for r in read_records(conn)], "resumed": []}
        records, plan = resume_recorded(conn, jobs)
        if not records:
            with cron_transaction(
                conn, read_only=True, privilege_hint="connect as the jobs' owner"
            ):
                row = conn.execute(_SEES_JOBS).fetchone()
            if not (row and row[0]):
                raise DatabaseError(
                    f"role {conn.info.user} sees no pg_cron job in database {conn.info.dbname} "
                    "(pg_cron shows each role only its own jobs), so it cannot tell whether "
                    "intake is still held: run resume as the jobs' owner (--cron-user, "
                    "drain.cron_user, leaseguard_cron_user)"
                )
    seen = plan.jobs if plan else ()
    return {
        "records": [record.as_dict() for record in records],
        "resumed": plan.resumed if plan else [],
        "already_active": [job.job for job in seen if job.exists and not job.changed],
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
        state = next((k for k in ("resumed", "already_active") if job in outcome[k]), "missing")
        lines.append(
            f"{stamp} leaseguard resume job={job} state={state} "
            f"paused_at={record['paused_at']} by={record['by'].replace(' ', '_')}"
        )
    return "\n".join(lines)
