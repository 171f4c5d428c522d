"""`leaseguard budgets`, cron_budget: converge cron.job on a declaration, set active flags."""

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial

import psycopg

from leaseguard.adapters import cron
from leaseguard.adapters.db import Connection, connect
from leaseguard.adapters.pauses import HOLDS_LOCK, RESUME_HINT, read_records
from leaseguard.core.budgets.config import BudgetConfig
from leaseguard.core.budgets.planning import Action, BudgetPlan, LiveJob, plan_budgets
from leaseguard.core.errors import ConfigError, DatabaseUnavailable

_HOLDS_HINT = "connect as the role that owns the jobs (pg_cron shows each role only its own)"
# Serialises concurrent runs between reading cron.job and writing it ("lgcronbg").
_ADVISORY_LOCK_KEY = 0x6C67_6372_6F6E_6267
# Whether cron.job's row security hides other roles' jobs from us, and where we are.
_WHO_WHERE = (
    "SELECT rolsuper OR rolbypassrls, rolname, current_database() "
    "FROM pg_catalog.pg_roles WHERE rolname = current_user"
)


def converge_jobs(
    path: AbstractContextManager[str],
    declared: BudgetConfig | None,
    *,
    active: Mapping[str, bool] | None = None,
    cron_database: str | None = None,
    on_drift: str = "report",
    check_mode: bool = False,
    connect_timeout_s: int = 10,
) -> tuple[BudgetPlan | None, cron.ActivePlan | None]:
    """Converge `declared` all or nothing, then `active`'s flags unless refused (`path`: a DSN)."""
    if active and not isinstance(active, Mapping):
        raise ConfigError("active must map a pg_cron job name to true or false")
    for name, value in (active or {}).items():
        if not isinstance(name, str) or not name:
            raise ConfigError("active: job names must be non-empty strings")
        if not isinstance(value, bool):
            raise ConfigError(f"active.{name} must be true or false")
    wanted, plan = dict(active or {}), None
    with path as conninfo:
        connect_to = partial(connect, conninfo, connect_timeout_s, writable=True)
        if declared is not None:
            plan = _converge(connect_to, declared, cron_database, on_drift, check_mode)
        if not wanted or (plan is not None and plan.refusals):
            return plan, None
        # The flags, but a held job stays paused (it would claim beside a restart or migration);
        # under the holds' lock: a hold taken in between would be switched on.
        with (
            connect_to(dbname=cron_database) as conn,
            cron.cron_transaction(conn, read_only=check_mode, privilege_hint=_HOLDS_HINT) as step,
        ):
            if not check_mode:
                step.doing = "waiting for the intake holds' lock"
                conn.execute(HOLDS_LOCK)
                step.doing = "reading cron.job"
            records = [r for r in read_records(conn) if wanted.get(r.job)]
            held = {r.job for r in records}
            changes = cron.plan_changes(conn, {j: on for j, on in wanted.items() if j not in held})
            if not check_mode:
                cron.apply_changes(conn, step, changes)
    kept = tuple(
        f"pg_cron job {r.job} not resumed: held by {r.by} (for: {r.action}) since {r.paused_at}; "
        f"it comes back when that hold is given back ({RESUME_HINT} if that run is gone)"
        for r in records
    )
    return plan, cron.ActivePlan(tuple(changes), kept_paused=kept)


def _converge(
    connect_to: partial[Connection],
    declared: BudgetConfig,
    cron_db: str | None,
    on_drift: str,
    check: bool,
) -> BudgetPlan:
    if cron_db and declared.database is None:  # the jobs run in conninfo's database
        with connect_to() as conn:
            try:
                [(name,)] = conn.execute("SELECT current_database()")
            except psycopg.Error as exc:
                raise DatabaseUnavailable(
                    f"cannot read the name of the application database ({type(exc).__name__})"
                ) from None
            declared = replace(declared, database=str(name))
    in_database = "/schedule_in_database" if declared.database else ""
    privilege = f"grant the role EXECUTE on cron.schedule/alter_job{in_database}"
    with (
        connect_to(dbname=cron_db) as conn,
        cron.cron_transaction(conn, read_only=check, privilege_hint=privilege) as step,
    ):
        if not check:
            step.doing = "waiting for another leaseguard run on cron.job"
            conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (_ADVISORY_LOCK_KEY,))
            step.doing = "reading cron.job"
        row = conn.execute(_WHO_WHERE).fetchone()
        here = str(row[2]) if row else conn.info.dbname
        target = replace(declared, database=declared.database or here)
        rows = conn.execute(
            "SELECT jobid, jobname, schedule, command, active, database "
            "FROM cron.job WHERE jobname = ANY(%s) ORDER BY jobid",
            ([job.name for job in declared.jobs],),
        )
        plan = plan_budgets(target, [LiveJob(*live) for live in rows], on_drift=on_drift)
        plan = replace(plan, own_jobs_only=None if row is None or row[0] else str(row[1]))
        writing = not check and not plan.refusals
        for job in plan.jobs if writing else ():
            step.doing = f"writing pg_cron job {job.job.name}"
            new = (job.job.name, job.job.schedule, job.job.command)
            if job.action is Action.CREATE and job.database in (None, here):
                conn.execute("SELECT cron.schedule(%s, %s, %s)", new)
            elif job.action is Action.CREATE:
                conn.execute(
                    "SELECT cron.schedule_in_database(%s, %s, %s, %s)", (*new, job.database)
                )
            elif job.action is Action.UPDATE and (before := job.before()) is not None:
                # The plan's row after, but NULL where that is the live value: NULL leaves a field
                # as it is, so an unchanged command keeps its live spelling.
                after = {k: None if v == before[k] else v for k, v in (job.after() or {}).items()}
                conn.execute(
                    "SELECT cron.alter_job(%s::bigint, schedule := %s::text, command := %s::text, "
                    "database := %s::text)",
                    (before["jobid"], after["schedule"], after["command"], after["database"]),
                )
    return replace(plan, applied=writing)
