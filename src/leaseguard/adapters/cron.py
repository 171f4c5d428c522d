"""pg_cron's cron.job: the one time-boxed transaction, and switching active flags."""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors

from leaseguard.adapters.db import Connection, set_local_limits
from leaseguard.core.errors import DatabaseError, DatabaseUnavailable, SchemaMismatch

# Our own session's limits while reading and writing cron.job.
STATEMENT_TIMEOUT_MS = 5000
LOCK_TIMEOUT_MS = 2000


@dataclass
class CronStep:
    doing: str = "reading cron.job"  # what a failure's message names


@contextmanager
def cron_transaction(
    conn: Connection, *, read_only: bool, privilege_hint: str
) -> Iterator[CronStep]:
    """One time-boxed cron.job transaction; a failure rolls back naming step, database, SQLSTATE."""
    db, step = conn.info.dbname, CronStep()
    try:
        with conn.transaction():
            if read_only:
                conn.execute("SET TRANSACTION READ ONLY")
            set_local_limits(
                conn, statement_timeout=STATEMENT_TIMEOUT_MS, lock_timeout=LOCK_TIMEOUT_MS
            )
            yield step
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedFunction):
        raise SchemaMismatch(
            f"pg_cron's cron.job is not usable in database {db}: connect to the database "
            "named by cron.database_name (where CREATE EXTENSION pg_cron ran)"
        ) from None
    except psycopg.Error as exc:
        at = f"{step.doing} in database {db}"
        named = f"({type(exc).__name__}, SQLSTATE {exc.sqlstate or 'none'})"
        if isinstance(exc, pg_errors.QueryCanceled):  # an OperationalError too: first
            why = f"{at} exceeded statement_timeout={STATEMENT_TIMEOUT_MS}ms {named}"
        elif isinstance(exc, pg_errors.LockNotAvailable):
            why = f"{at}: lock not available within {LOCK_TIMEOUT_MS}ms {named}"
        elif isinstance(exc, pg_errors.InsufficientPrivilege):
            why = f"{at}: permission denied {named}; {privilege_hint}"
        elif isinstance(exc, pg_errors.InvalidParameterValue):
            why = (
                f"pg_cron refused {at} {named}, most likely a schedule this pg_cron version "
                "does not accept"
            )
        elif isinstance(exc, psycopg.OperationalError):
            raise DatabaseUnavailable(
                f"connection lost while {at} ({type(exc).__name__}); "
                "the transaction was not committed"
            ) from None
        else:
            why = f"{at} failed {named}"
        raise DatabaseError(f"{why}; nothing was changed") from None


@dataclass(frozen=True)
class ActiveChange:
    """One job's active flag before and after; `before` None: no job of that name."""

    job: str
    wanted: bool
    jobid: int | None = None
    before: bool | None = None

    @property
    def exists(self) -> bool:
        return self.before is not None

    @property
    def changed(self) -> bool:
        return self.exists and self.before != self.wanted


@dataclass(frozen=True)
class ActivePlan:
    """What a switch of active flags found and did; `kept_paused`: why a job stayed paused."""

    jobs: tuple[ActiveChange, ...]
    kept_paused: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return any(job.changed for job in self.jobs)

    @property
    def paused(self) -> list[str]:
        return [job.job for job in self.jobs if job.changed and not job.wanted]

    @property
    def resumed(self) -> list[str]:
        return [job.job for job in self.jobs if job.changed and job.wanted]

    @property
    def missing(self) -> list[str]:
        return [job.job for job in self.jobs if not job.exists]

    @property
    def warnings(self) -> list[str]:
        return [
            f"pg_cron job {j.job} does not exist; nothing to {'resume' if j.wanted else 'pause'}"
            for j in self.jobs
            if not j.exists
        ] + list(self.kept_paused)


def plan_changes(conn: Connection, wanted: Mapping[str, bool]) -> list[ActiveChange]:
    """Each wanted job's change; a name several jobs share is refused (which one to switch?)."""
    live = conn.execute(
        "SELECT jobid, jobname, active FROM cron.job WHERE jobname = ANY(%s) ORDER BY jobid",
        (list(wanted),),
    ).fetchall()
    changes = []
    for name, active in wanted.items():
        rows = [(jobid, on) for jobid, job, on in live if job == name]
        if len(rows) > 1:
            ids = ", ".join(str(jobid) for jobid, _ in rows)
            raise DatabaseError(
                f"{len(rows)} pg_cron jobs share the name {name} (jobids {ids}); "
                "refusing to guess which to switch; nothing was changed"
            )
        jobid, before = rows[0] if rows else (None, None)
        changes.append(ActiveChange(name, active, jobid, before))
    return changes


def apply_changes(conn: Connection, step: CronStep, changes: Sequence[ActiveChange]) -> None:
    """Switch the flags that change (in the caller's cron.job transaction)."""
    alter = "SELECT cron.alter_job(%s::bigint, active := %s::boolean)"
    for change in (c for c in changes if c.changed):
        step.doing = f"{'resuming' if change.wanted else 'pausing'} pg_cron job {change.job}"
        conn.execute(alter, (change.jobid, change.wanted))
