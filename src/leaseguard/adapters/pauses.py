"""What a drain paused, recorded beside the pause itself: in pg_cron's own cron.job.

A drain that is SIGKILLed (or whose resume cannot reach the database) leaves intake paused.
So every pause is recorded, in the same transaction that pauses, as one more cron.job row
made with pg_cron's own API (`cron.schedule`, then `cron.alter_job(active := false)`):

- it needs no privilege beyond the pause itself: whoever may alter the job may schedule a
  job of their own in the same database (no table, schema or extension of ours to create);
- it commits or rolls back with the pause, so a pause without its record cannot exist;
- pg_cron's row-level security shows it to exactly the roles that see the paused job;
- it never runs: it is inactive, its schedule (31 February) never fires, and its command
  is `SELECT 1` followed by the record as a comment.

Every later run reads these rows and warns naming the job, when it was paused and by which
drain; `leaseguard resume` (and `fab resume`, the leaseguard.deploy.resume playbook)
reactivates exactly the recorded jobs and deletes the records, in one transaction. A job an
operator disabled deliberately has no record, so nothing here ever touches it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from leaseguard.adapters.cron import ActiveChange, ActivePlan, set_jobs_active
from leaseguard.adapters.db import read_transaction, sent

log = logging.getLogger("leaseguard.pauses")

RECORD_PREFIX = "leaseguard-paused:"
_MARKER = "leaseguard pause record"
_NEVER = "0 0 31 2 *"  # 31 February: a record is a row, never a run
_RECORDS = "SELECT jobname, command FROM cron.job WHERE starts_with(jobname, %s) ORDER BY jobid"
# Whether this role can read cron.job here, asked in a way that cannot fail: where pg_cron
# is not installed (most databases a guard reads), reading cron.job itself would put an
# ERROR in the server's log on every check.
_RECORDS_READABLE = """
SELECT has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'cron' AND c.relname = 'job'
"""
RESUME_HINT = (
    "`leaseguard resume --cron-database <db>` (same connection options as the drain), "
    "`fab -H <host> resume`, or `ansible-playbook leaseguard.deploy.resume`"
)


@dataclass(frozen=True)
class PauseRecord:
    """One job a drain paused and has not given back."""

    job: str
    paused_at: str
    by: str

    def warning(self) -> str:
        return (
            f"pg_cron job {self.job} is still paused: paused at {self.paused_at} by {self.by} "
            f"and never resumed; give it back with {RESUME_HINT}"
        )

    def as_dict(self) -> dict[str, str]:
        return {"job": self.job, "paused_at": self.paused_at, "by": self.by}


def drain_identity(front: str) -> str:
    """Which drain paused: the front, this process and this machine (no secret)."""
    return f"{front} pid {os.getpid()} on {socket.gethostname()}"


def pause_jobs(conn: psycopg.Connection[Any], names: Sequence[str], by: str) -> ActivePlan:
    """Deactivate `names` (all must exist) and record each job switched, atomically."""

    def record(conn: psycopg.Connection[Any], changes: list[ActiveChange]) -> None:
        row = conn.execute("SELECT now()").fetchone()
        paused_at = row[0].isoformat() if row else "unknown"
        for change in changes:
            payload = json.dumps({"job": change.job, "paused_at": paused_at, "by": by})
            created = conn.execute(
                "SELECT cron.schedule(%s, %s, %s)",
                (RECORD_PREFIX + change.job, _NEVER, f"SELECT 1 -- {_MARKER} {payload}"),
            ).fetchone()
            assert created is not None
            conn.execute("SELECT cron.alter_job(%s::bigint, active := false)", (created[0],))

    return set_jobs_active(conn, dict.fromkeys(names, False), require_all=True, also=record)


def resume_recorded(
    conn: psycopg.Connection[Any], jobs: Sequence[str] | None = None
) -> tuple[list[PauseRecord], ActivePlan | None]:
    """Reactivate the recorded jobs (only `jobs` if given) and delete their records.

    A recorded job that is already active (an operator resumed it) just loses its record;
    one that no longer exists is reported missing by the plan. Raises LeaseguardError.
    """
    records = [r for r in read_records(conn) if jobs is None or r.job in jobs]
    if not records:
        return [], None

    def forget(conn: psycopg.Connection[Any], _changes: list[ActiveChange]) -> None:
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = ANY(%s)",
            ([RECORD_PREFIX + r.job for r in records],),
        )

    plan = set_jobs_active(conn, {r.job: True for r in records}, also=forget)
    return records, plan


def read_records(conn: psycopg.Connection[Any]) -> list[PauseRecord]:
    """Every pause record this role can see (raw psycopg errors)."""
    return _records(conn.execute(_RECORDS, (RECORD_PREFIX,)).fetchall())


def _records(rows: list[tuple[Any, ...]]) -> list[PauseRecord]:
    return [_parse(str(name), str(command)) for name, command in rows]


def leftover_warnings(conn: psycopg.Connection[Any], *, exclude_by: str | None = None) -> list[str]:
    """Warnings for pauses nobody gave back; [] when cron.job is not readable here.

    Advisory: a guard role that cannot read cron.job (another database, no USAGE on the
    cron schema) gets no warning rather than a failed check.
    """
    try:
        with read_transaction(conn):
            readable = sent(conn, _RECORDS_READABLE).fetchone()
            if not readable or not readable[0]:
                return []
            cur = sent(conn, _RECORDS, (RECORD_PREFIX,))
        records = _records(cur.fetchall())
    except psycopg.Error as exc:
        log.debug("pause records not readable (%s)", type(exc).__name__)
        return []
    return [r.warning() for r in records if exclude_by is None or r.by != exclude_by]


def scan_leftovers(
    connect: Callable[[], psycopg.Connection[Any]], *, exclude_by: str | None = None
) -> list[str]:
    """leftover_warnings over a connection of its own (closed after); [] if none opens."""
    try:
        conn = connect()
    except Exception as exc:
        log.debug("pause records not readable (%s)", type(exc).__name__)
        return []
    with conn:
        return leftover_warnings(conn, exclude_by=exclude_by)


def _parse(name: str, command: str) -> PauseRecord:
    job = name.removeprefix(RECORD_PREFIX)
    _, _, payload = command.partition(_MARKER)
    try:
        data = json.loads(payload)
        return PauseRecord(str(data["job"]), str(data["paused_at"]), str(data["by"]))
    except (ValueError, KeyError, TypeError):
        return PauseRecord(job, "an unknown time", "an unknown drain")


__all__ = [
    "PauseRecord",
    "drain_identity",
    "leftover_warnings",
    "pause_jobs",
    "read_records",
    "resume_recorded",
    "scan_leftovers",
]
