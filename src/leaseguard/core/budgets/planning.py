"""The pure decision: per declared job, create / update / unchanged / drift / refuse.

* a budget declared by a per-environment override wins over the default and is written;
* a live budget that differs from a *default* is drift: reported, never overwritten unless
  the caller asks for it (``on_drift="apply"``), because nothing tells us whether the live
  value is an accident or a production fix nobody declared yet;
* lowering a live budget is always reported, also when it is applied;
* a live command this package does not fully understand is refused, never rewritten;
* all or nothing: a plan with unapplied drift or a refused job writes no job at all
  (`BudgetPlan.refusals`), so a declaration is never half applied. The CLI and the Ansible
  module apply this one policy, through `leaseguard.adapters.budgets.apply_budgets`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from leaseguard.core.budgets.command import ParsedCommand, UnparseableCommand, parse_live_command
from leaseguard.core.budgets.config import DeclaredBudgets, DeclaredJob
from leaseguard.core.budgets.live import LiveJob
from leaseguard.core.budgets.names import normalise_schedule
from leaseguard.core.budgets.units import format_budget, format_optional
from leaseguard.core.errors import ConfigError

OnDrift = Literal["report", "apply"]
ON_DRIFT_CHOICES: tuple[OnDrift, ...] = ("report", "apply")


class Action(enum.StrEnum):
    CREATE = "create"  # no live job of that name
    UPDATE = "update"  # schedule, function, database, or a declared override differs
    UNCHANGED = "unchanged"
    DRIFT = "drift"  # live budget differs from a default: reported, left as it is
    UNPARSEABLE = "unparseable"  # live command not understood: refused, left as it is
    AMBIGUOUS = "ambiguous"  # several live jobs share the name: refused, left as they are


_WRITES = (Action.CREATE, Action.UPDATE)
_REFUSED = (Action.UNPARSEABLE, Action.AMBIGUOUS)


@dataclass(frozen=True)
class JobPlan:
    """The decision for one declared job, with what it changes and why."""

    job: DeclaredJob
    action: Action
    live: LiveJob | None = None  # None: no live job of this name
    parsed: ParsedCommand | None = None  # None: no live job, or its command is refused
    changes: tuple[str, ...] = ()  # of: schedule, function, budget, database
    reason: str = ""
    database: str | None = None  # where the job runs after this plan (None: not known)

    @property
    def live_budget_ms(self) -> int | None:
        return self.parsed.budget_ms if self.parsed else None

    @property
    def writes(self) -> bool:
        return self.action in _WRITES

    @property
    def refusal(self) -> str | None:
        """Why this job keeps the whole plan from being written; None when it does not."""
        name = self.job.name
        if self.action is Action.DRIFT:
            return (
                f"job {name}: live={format_optional(self.live_budget_ms) or 'none'} "
                f"declared={format_budget(self.job.budget_ms)} ({self.job.source_label})"
            )
        if self.action in _REFUSED:
            return f"job {name}: {self.reason}"
        return None

    @property
    def new_schedule(self) -> str | None:
        """The schedule to write, None when it stays."""
        if self.action is Action.CREATE or "schedule" in self.changes:
            return self.job.schedule
        return None

    @property
    def new_command(self) -> str | None:
        """The rendered command to write, None when the live one stays."""
        if self.action is Action.CREATE or {"function", "budget"} & set(self.changes):
            return self.job.command
        return None

    @property
    def new_database(self) -> str | None:
        return self.database if "database" in self.changes else None

    def before(self) -> dict[str, Any] | None:
        if self.live is None:
            return None
        return {
            "jobid": self.live.jobid,
            "schedule": self.live.schedule,
            "command": self.live.command,
            "budget": format_optional(self.live_budget_ms),
            "database": self.live.database,
            "active": self.live.active,
        }

    def after(self) -> dict[str, Any] | None:
        before = self.before()
        if not self.writes:
            return before
        after = dict(before or {"jobid": None, "active": True, "database": self.database})
        after["schedule"] = self.new_schedule or after["schedule"]
        after["command"] = self.new_command or after["command"]
        if self.new_command is not None:
            after["budget"] = format_budget(self.job.budget_ms)
        if self.new_database is not None:
            after["database"] = self.new_database
        return after

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "state": str(self.action),
            "live_budget": format_optional(self.live_budget_ms),
            "declared_budget": format_budget(self.job.budget_ms),
            "default_budget": format_budget(self.job.default_budget_ms),
            "source": self.job.source_label,
            "function": str(self.job.function),
            "schedule": self.job.schedule,
            "changes": list(self.changes),
            "reason": self.reason,
            "before": self.before(),
            "after": self.after(),
        }


@dataclass(frozen=True)
class Drift:
    """A live budget that differs from a default-sourced declaration."""

    job: str
    live_budget_ms: int | None  # None: the live command sets no statement_timeout
    declared_budget_ms: int
    source: str
    applied: bool  # True when on_drift="apply" overwrites it

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "live": format_optional(self.live_budget_ms),
            "declared": format_budget(self.declared_budget_ms),
            "source": self.source,
            "applied": self.applied,
        }


@dataclass(frozen=True)
class BudgetPlan:
    """Per-job decisions; `applied` is False for a plan that wrote nothing (check mode, or
    a plan with `refusals`)."""

    jobs: tuple[JobPlan, ...]
    drift: tuple[Drift, ...]
    warnings: tuple[str, ...]
    environment: str | None = None
    on_drift: OnDrift = "report"
    applied: bool = False

    @property
    def changed(self) -> bool:
        """True when the plan creates or updates a job (the same in check mode)."""
        return any(job.writes for job in self.jobs)

    @property
    def refusals(self) -> tuple[str, ...]:
        """The budget policy, decided here once: all or nothing.

        Unapplied drift or a refused live job (unparseable, ambiguous) means the whole plan
        is written by nobody, also the jobs that would be created or updated; a declaration
        is never half applied. Empty: the plan may be written.
        """
        return tuple(refusal for job in self.jobs if (refusal := job.refusal))

    @property
    def converged(self) -> bool:
        """Every job matches its declaration (after this run's writes, when applied)."""
        return all(
            job.action is Action.UNCHANGED or (job.writes and self.applied) for job in self.jobs
        )

    def job(self, name: str) -> JobPlan:
        for job in self.jobs:
            if job.job.name == name:
                return job
        raise KeyError(name)

    def diff(self) -> dict[str, dict[str, Any]]:
        """Ansible's diff: ``before``/``after`` keyed by job name (absent job: empty)."""
        return {
            "before": {job.job.name: job.before() or {} for job in self.jobs},
            "after": {job.job.name: job.after() or {} for job in self.jobs},
        }

    def as_dict(self) -> dict[str, Any]:
        summary = ("environment", "on_drift", "applied", "changed", "converged")
        return {
            **{key: getattr(self, key) for key in summary},
            "jobs": [job.as_dict() for job in self.jobs],
            "drift": [drift.as_dict() for drift in self.drift],
            "refusals": list(self.refusals),
            "warnings": list(self.warnings),
        }


def plan_budgets(
    declared: DeclaredBudgets, live: Sequence[LiveJob], *, on_drift: str = "report"
) -> BudgetPlan:
    """Decide, per declared job, create / update / unchanged / drift / refuse. Pure.

    :param declared: the jobs with the budgets this run would write (`BudgetConfig.declare`).
    :param live: cron.job rows; rows of undeclared names are ignored.
    :param on_drift: ``"report"`` leaves a drifted job untouched; ``"apply"`` overwrites it.
    """
    if on_drift not in ON_DRIFT_CHOICES:
        raise ConfigError(f"on_drift must be one of {', '.join(ON_DRIFT_CHOICES)}")
    policy: OnDrift = "apply" if on_drift == "apply" else "report"
    jobs: list[JobPlan] = []
    drift: list[Drift] = []
    warnings: list[str] = []
    for job in declared.jobs:
        matches = [row for row in live if row.name == job.name]
        plan = _plan_job(job, matches, declared.database, policy)
        jobs.append(plan)
        if "budget" in plan.changes and job.source == "default":
            drift.append(
                Drift(
                    job.name,
                    plan.live_budget_ms,
                    job.budget_ms,
                    job.source_label,
                    applied=plan.writes,
                )
            )
        warnings.extend(_warnings(plan))
    return BudgetPlan(tuple(jobs), tuple(drift), tuple(warnings), declared.environment, policy)


def _plan_job(
    job: DeclaredJob, matches: list[LiveJob], database: str | None, on_drift: OnDrift
) -> JobPlan:
    if not matches:
        return JobPlan(job, Action.CREATE, database=database, reason="no live job of this name")
    live = matches[0]
    if len(matches) > 1:
        ids = ", ".join(str(row.jobid) for row in matches)
        return JobPlan(
            job,
            Action.AMBIGUOUS,
            live,
            database=live.database,
            reason=f"{len(matches)} live pg_cron jobs share this name (jobids {ids})",
        )
    try:
        parsed = parse_live_command(live.command)
    except UnparseableCommand as exc:
        return JobPlan(job, Action.UNPARSEABLE, live, database=live.database, reason=str(exc))
    changes = []
    if normalise_schedule(live.schedule) != job.schedule:
        changes.append("schedule")
    if parsed.function != job.function:
        changes.append("function")
    if parsed.budget_ms != job.budget_ms:
        changes.append("budget")
    if database is not None and live.database != database:
        changes.append("database")
    target = database if database is not None else live.database
    if not changes:
        return JobPlan(job, Action.UNCHANGED, live, parsed, database=target)
    if "budget" in changes and job.source == "default" and on_drift == "report":
        others = [c for c in changes if c != "budget"]
        pending = f"; also pending: {', '.join(others)}" if others else ""
        return JobPlan(
            job,
            Action.DRIFT,
            live,
            parsed,
            tuple(changes),
            reason=f"live budget {format_optional(parsed.budget_ms) or 'none'} differs from "
            f"the default {format_budget(job.budget_ms)} and no override declares it; "
            f"left untouched{pending}",
            database=live.database,
        )
    return JobPlan(
        job,
        Action.UPDATE,
        live,
        parsed,
        tuple(changes),
        reason=f"{', '.join(changes)} differ(s)",
        database=target,
    )


def _warnings(plan: JobPlan) -> list[str]:
    name = plan.job.name
    if plan.action is Action.UNPARSEABLE:
        return [f"job {name}: live command not understood ({plan.reason}); left untouched"]
    if plan.action is Action.AMBIGUOUS:
        return [f"job {name}: {plan.reason}; left untouched"]
    live = plan.live_budget_ms
    if plan.writes and "budget" in plan.changes and (live is None or plan.job.budget_ms < live):
        return [
            f"job {name}: lowering the live statement budget "
            f"{format_optional(live) or 'none'} -> {format_budget(plan.job.budget_ms)} "
            f"(source {plan.job.source_label})"
        ]
    return []
