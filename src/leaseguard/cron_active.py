"""Pause and resume named pg_cron jobs across several steps of a deploy.

`leaseguard.drain.CronJobsPause` pauses intake for the length of one drain, inside one
process. A migration spans several Ansible tasks (pause, migrate, apply budgets, resume), so
here the state is declared (``{job: active}``) and the result says which jobs this run
actually switched: resuming exactly those, and no job an operator had disabled on purpose,
is then the caller's one line.

A job that does not exist is reported and skipped (nothing runs it, so there is nothing to
pause: a first deploy declares it later); several jobs sharing a name are refused, because
switching either could be the wrong one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from leaseguard.budgets import LiveJob, cron_transaction, read_live_jobs
from leaseguard.errors import ConfigError, DatabaseError


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

    @property
    def after(self) -> bool | None:
        return self.wanted if self.exists else None


@dataclass(frozen=True)
class ActivePlan:
    """What `set_jobs_active` found and did; `applied` False: nothing written (check mode)."""

    jobs: tuple[ActiveChange, ...]
    applied: bool = False

    @property
    def changed(self) -> bool:
        return any(job.changed for job in self.jobs)

    @property
    def paused(self) -> list[str]:
        """Jobs this run deactivated (resume exactly these)."""
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
            f"pg_cron job {name} does not exist; nothing to {'resume' if wanted else 'pause'}"
            for name, wanted in ((job.job, job.wanted) for job in self.jobs if not job.exists)
        ]

    def diff(self) -> dict[str, dict[str, Any]]:
        return {
            "before": {job.job: {"active": job.before} for job in self.jobs if job.exists},
            "after": {job.job: {"active": job.after} for job in self.jobs if job.exists},
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "changed": self.changed,
            "paused": self.paused,
            "resumed": self.resumed,
            "missing": self.missing,
            "jobs": [
                {"job": job.job, "jobid": job.jobid, "before": job.before, "after": job.after}
                for job in self.jobs
            ],
        }


def validate_active(wanted: object) -> dict[str, bool]:
    """``{job name: bool}``; ConfigError naming the job otherwise."""
    if not isinstance(wanted, Mapping):
        raise ConfigError("active must map a pg_cron job name to true or false")
    checked: dict[str, bool] = {}
    for name, value in wanted.items():
        if not isinstance(name, str) or not name:
            raise ConfigError("active: job names must be non-empty strings")
        if not isinstance(value, bool):
            raise ConfigError(f"active.{name} must be true or false")
        checked[name] = value
    return checked


def set_jobs_active(
    conn: psycopg.Connection[Any], wanted: Mapping[str, bool], *, check_mode: bool = False
) -> ActivePlan:
    """Set each named job's active flag in one transaction (read-only in check mode).

    `conn` is an autocommit connection to the database holding cron.job
    (`leaseguard.budgets.connect_cron`).
    """
    wanted = validate_active(wanted)
    hint = "the role must own the jobs or be allowed cron.alter_job"
    try:
        with cron_transaction(conn, read_only=check_mode, privilege_hint=hint) as step:
            changes = _changes(read_live_jobs(conn, list(wanted)), wanted)
            if not check_mode:
                for change in changes:
                    if change.changed:
                        verb = "resuming" if change.wanted else "pausing"
                        step.now = f"{verb} pg_cron job {change.job}"
                        conn.execute(
                            "SELECT cron.alter_job(%s::bigint, active := %s::boolean)",
                            (change.jobid, change.wanted),
                        )
    except _Refused as exc:
        raise DatabaseError(str(exc)) from None
    return ActivePlan(tuple(changes), applied=not check_mode)


def _changes(live: list[LiveJob], wanted: Mapping[str, bool]) -> list[ActiveChange]:
    changes = []
    for name, active in wanted.items():
        rows = [row for row in live if row.name == name]
        if len(rows) > 1:
            ids = ", ".join(str(row.jobid) for row in rows)
            raise _Refused(
                f"{len(rows)} pg_cron jobs share the name {name} (jobids {ids}); "
                "refusing to guess which to switch; nothing was changed"
            )
        row = rows[0] if rows else None
        changes.append(
            ActiveChange(name, active, row.jobid if row else None, row.active if row else None)
        )
    return changes


class _Refused(Exception):
    """Leaves the transaction (rolling it back) before becoming a DatabaseError."""


__all__ = ["ActiveChange", "ActivePlan", "set_jobs_active", "validate_active"]
