"""The decision per declared job, the policy every front applies: an override is written; a live
budget differing from a *default* is drift, left unless ``on_drift="apply"`` (it may be a
production fix nobody declared yet); while anything drifts or is refused, nothing is written."""

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leaseguard.core.budgets import config
from leaseguard.core.budgets.config import format_budget, format_optional
from leaseguard.core.errors import ConfigError

ON_DRIFT_CHOICES = ("report", "apply")
# A live command outside the grammar may pass a token or password as an argument.
HIDDEN_COMMAND = "(not shown: leaseguard does not understand this command)"


@dataclass(frozen=True)
class LiveJob:
    """A row of pg_cron's cron.job."""

    jobid: int
    name: str
    schedule: str
    command: str
    active: bool = True
    database: str | None = None


class Action(enum.StrEnum):
    CREATE = "create"  # no live job of that name
    UPDATE = "update"  # schedule, function, database, or a declared override differs
    UNCHANGED = "unchanged"
    DRIFT = "drift"  # live budget differs from a default: reported, left as it is
    UNPARSEABLE = "unparseable"  # live command not understood: refused, left as it is
    AMBIGUOUS = "ambiguous"  # several live jobs share the name: refused, left as they are


@dataclass(frozen=True)
class JobPlan:
    job: config.DeclaredJob
    action: Action
    live: LiveJob | None = None  # None: no live job of this name
    live_budget_ms: int | None = None  # None: none set, no live job, or command refused
    changes: tuple[str, ...] = ()  # of: schedule, function, budget, database
    reason: str = ""
    database: str | None = None  # where the job runs after this plan (None: not known)

    @property
    def writes(self) -> bool:
        return self.action in (Action.CREATE, Action.UPDATE)

    @property
    def refused(self) -> bool:
        return self.action in (Action.UNPARSEABLE, Action.AMBIGUOUS)

    def before(self) -> dict[str, Any] | None:
        if (live := self.live) is None:
            return None
        row = {**vars(live), "budget": format_optional(self.live_budget_ms)}
        try:  # only the grammar's commands are shown: their one literal is the budget
            config.parse_live_command(live.command)
        except config.UnparseableCommand:
            row["command"] = HIDDEN_COMMAND
        return {k: row[k] for k in ("jobid", "schedule", "command", "budget", "database", "active")}

    def after(self) -> dict[str, Any] | None:
        before = self.before()
        if not self.writes:
            return before
        after = dict(before or {"jobid": None, "active": True, "database": self.database})
        create = self.action is Action.CREATE
        if create or "schedule" in self.changes:
            after["schedule"] = self.job.schedule
        if create or {"function", "budget"} & set(self.changes):
            after.update(command=self.job.command, budget=format_budget(self.job.budget_ms))
        if "database" in self.changes:
            after["database"] = self.database
        return after

    def as_dict(self) -> dict[str, Any]:
        job = self.job
        return dict(
            job=job.name,
            state=str(self.action),
            live_budget=format_optional(self.live_budget_ms),
            declared_budget=format_budget(job.budget_ms),
            default_budget=format_budget(job.default_budget_ms),
            source=job.source_label,
            function=str(job.function),
            schedule=job.schedule,
            changes=list(self.changes),
            reason=self.reason,
            before=self.before(),
            after=self.after(),
        )


@dataclass(frozen=True)
class BudgetPlan:
    """`applied` False: nothing written (check mode, or `refusals`)."""

    jobs: tuple[JobPlan, ...]
    environment: str | None = None
    on_drift: str = "report"
    applied: bool = False
    own_jobs_only: str | None = None  # the role, when cron.job shows it only its own jobs

    @property
    def drift(self) -> tuple[dict[str, Any], ...]:
        return tuple(
            dict(
                job=j.job.name,
                live=format_optional(j.live_budget_ms),
                declared=format_budget(j.job.budget_ms),
                source=j.job.source_label,
                applied=j.writes,
            )
            for j in self.jobs
            if "budget" in j.changes and j.job.source_label == "default"
        )

    @property
    def warnings(self) -> tuple[str, ...]:
        out = []
        for j in self.jobs:
            live, name = j.live_budget_ms, j.job.name
            if j.action is Action.UNPARSEABLE:
                out.append(f"job {name}: live command not understood ({j.reason}); left untouched")
            elif j.action is Action.AMBIGUOUS:
                out.append(f"job {name}: {j.reason}; left untouched")
            elif j.writes and "budget" in j.changes and (live is None or j.job.budget_ms < live):
                out.append(
                    f"job {name}: lowering the live statement budget "
                    f"{format_optional(live) or 'none'} -> {format_budget(j.job.budget_ms)} "
                    f"(source {j.job.source_label})"
                )
            if j.action is Action.CREATE and self.own_jobs_only:
                out.append(
                    f"job {name}: no job of this name among role {self.own_jobs_only}'s own; "
                    "pg_cron shows each role only its own jobs, so one of another role would "
                    "run beside this one: check cron.job as a superuser"
                )
        return tuple(out)

    @property
    def changed(self) -> bool:
        return any(job.writes for job in self.jobs)

    @property
    def refusals(self) -> tuple[str, ...]:
        """All or nothing: while any, no job is written, not even a new one."""
        return tuple(
            f"job {j.job.name}: live={format_optional(j.live_budget_ms) or 'none'} "
            f"declared={format_budget(j.job.budget_ms)} ({j.job.source_label})"
            if j.action is Action.DRIFT
            else f"job {j.job.name}: {j.reason}"
            for j in self.jobs
            if j.action is Action.DRIFT or j.refused
        )

    @property
    def converged(self) -> bool:
        return all(j.action is Action.UNCHANGED or (j.writes and self.applied) for j in self.jobs)

    def diff(self) -> dict[str, dict[str, Any]]:  # Ansible's, keyed by job name
        return {
            "before": {job.job.name: job.before() or {} for job in self.jobs},
            "after": {job.job.name: job.after() or {} for job in self.jobs},
        }

    def as_dict(self) -> dict[str, Any]:
        summary = ("environment", "on_drift", "applied", "changed", "converged")
        return {
            **{key: getattr(self, key) for key in summary},
            "jobs": [job.as_dict() for job in self.jobs],
            "drift": list(self.drift),
            "refusals": list(self.refusals),
            "warnings": list(self.warnings),
        }


def plan_budgets(
    declared: config.BudgetConfig, live: Sequence[LiveJob], *, on_drift: str = "report"
) -> BudgetPlan:
    """Decide per declared job; live rows of undeclared names are ignored."""
    if on_drift not in ON_DRIFT_CHOICES:
        raise ConfigError(f"on_drift must be one of {', '.join(ON_DRIFT_CHOICES)}")
    jobs = tuple(_plan_job(job, live, declared.database, on_drift) for job in declared.jobs)
    return BudgetPlan(jobs, declared.environment, on_drift)


def _plan_job(
    job: config.DeclaredJob, live_jobs: Sequence[LiveJob], database: str | None, on_drift: str
) -> JobPlan:
    if not (matches := [row for row in live_jobs if row.name == job.name]):
        return JobPlan(job, Action.CREATE, database=database, reason="no live job of this name")
    live = matches[0]
    if len(matches) > 1:
        ids = ", ".join(str(row.jobid) for row in matches)
        reason = f"{len(matches)} live pg_cron jobs share this name (jobids {ids})"
        return JobPlan(job, Action.AMBIGUOUS, live, database=live.database, reason=reason)
    try:
        budget_ms, function = config.parse_live_command(live.command)
    except config.UnparseableCommand as exc:
        return JobPlan(job, Action.UNPARSEABLE, live, database=live.database, reason=str(exc))
    differs = {
        "schedule": " ".join(live.schedule.split()) != job.schedule,
        "function": function != job.function,
        "budget": budget_ms != job.budget_ms,
        "database": database is not None and live.database != database,
    }
    changes = tuple(change for change, yes in differs.items() if yes)
    target = database if database is not None else live.database
    if not changes:
        return JobPlan(job, Action.UNCHANGED, live, budget_ms, database=target)
    if differs["budget"] and job.source_label == "default" and on_drift == "report":
        others = [c for c in changes if c != "budget"]
        pending = f"; also pending: {', '.join(others)}" if others else ""
        reason = (
            f"live budget {format_optional(budget_ms) or 'none'} differs from the default "
            f"{format_budget(job.budget_ms)} and no override declares it; left untouched{pending}"
        )
        return JobPlan(job, Action.DRIFT, live, budget_ms, changes, reason, live.database)
    reason = f"{', '.join(changes)} differ(s)"
    return JobPlan(job, Action.UPDATE, live, budget_ms, changes, reason, target)
