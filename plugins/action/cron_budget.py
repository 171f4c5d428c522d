# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.cron_budget (documented in plugins/modules/).

Runs on the controller and reaches cron.job through the same tunnel as lease_guard. The
decisions (create / update / drift / refuse, lowering warnings) and the all-or-nothing policy
(a run that finds drift or a refused job writes nothing at all) are the core's
(`leaseguard.core.budgets`); this front maps the task's options and turns refusals into a failure.
"""

from __future__ import annotations

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    ConfigError,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    database_conninfo,
)

try:
    from leaseguard.adapters.budgets import converge_budgets
    from leaseguard.adapters.cron import set_jobs_active, validate_active
    from leaseguard.adapters.db import connect
    from leaseguard.adapters.pauses import read_records
    from leaseguard.adapters.resume import resume_pauses
    from leaseguard.core.budgets.config import budget_config_from_mapping
    from leaseguard.core.budgets.planning import Action
except ImportError:  # require_leaseguard() reports it
    pass


class ActionModule(LeaseguardAction):
    module = "cron_budget"
    # Check mode computes the plan the same way; only the writes are skipped.
    failure_what = "cron_budget"

    def act(self, args, host, task_vars):
        return self._converge(args, host)

    def _converge(self, args, host):
        if args["resume_recorded"]:
            return self._resume_recorded(args, host)
        declared = _declared(args)
        active = validate_active(args["active"]) if args["active"] else {}
        check_mode = bool(self._task.check_mode)
        cron_database = args["cron_database"] or None
        timeout = args["connect_timeout_s"]
        plan = switched = None
        with database_conninfo(self, args) as conninfo:
            if declared is not None:
                plan = converge_budgets(
                    conninfo,
                    declared,
                    cron_database=cron_database,
                    on_drift=args["on_drift"],
                    check_mode=check_mode,
                    connect_timeout_s=timeout,
                )
                if plan.refusals:
                    return _refused(plan, host)
            if active:
                with connect(conninfo, timeout, writable=True, dbname=cron_database) as conn:
                    switched = set_jobs_active(conn, active, check_mode=check_mode)
        return _result(plan, switched, check_mode, host)

    def _resume_recorded(self, args, host):
        with database_conninfo(self, args) as conninfo:
            if self._task.check_mode:
                with connect(
                    conninfo,
                    args["connect_timeout_s"],
                    writable=True,
                    dbname=args["cron_database"] or None,
                ) as conn:
                    records = [r.as_dict() for r in read_records(conn)]
                return {"changed": bool(records), "host": host, "records": records, "resumed": []}
            outcome = resume_pauses(
                conninfo,
                cron_database=args["cron_database"] or None,
                connect_timeout_s=args["connect_timeout_s"],
            )
        resumed = outcome["resumed"]
        return {
            "changed": bool(outcome["records"]),
            "host": host,
            **outcome,
            "msg": f"resumed {', '.join(resumed)}" if resumed else "no recorded pause to resume",
        }


def _declared(args):
    """The declared budgets of `environment`, or None when the task declares no jobs."""
    if args["jobs"] is None:
        if args["overrides"]:
            raise ConfigError("overrides without jobs: declare the jobs they override")
        return None
    environment = args["environment"] or None
    if args["overrides"] and environment is None:
        raise ConfigError(
            "overrides need environment: the environment they belong to (e.g. production) "
            "is named in every report and warning"
        )
    section = {"jobs": args["jobs"]}
    if environment is not None:
        section["overrides"] = {environment: args["overrides"] or {}}
    return budget_config_from_mapping(section).declare(environment)


def _refused(plan, host):
    """The core wrote nothing (plan.refusals); the task fails saying why and how to go on."""
    drift = [d for d in plan.drift if not d.applied]
    guidance = (
        "declare the live budget as an override for this environment (overrides, "
        "leaseguard_cron_budget_overrides) if it is deliberate, or converge deliberately "
        "with on_drift=apply"
        if drift
        else "fix or remove the job by hand; leaseguard never rewrites a command it does not "
        "fully understand"
    )
    return {
        "failed": True,
        "changed": False,
        "host": host,
        "msg": (
            f"leaseguard: cron_budget on {host} ({plan.environment or 'no environment'}) left "
            f"everything untouched: {'; '.join(plan.refusals)}. To go on: {guidance}."
        ),
        **_plan_fields(plan),
        "applied": plan.applied,
    }


def _plan_fields(plan):
    fields = plan.as_dict()
    return {key: fields[key] for key in ("environment", "on_drift", "jobs", "drift")}


def _result(plan, switched, check_mode, host):
    result = {
        "changed": bool((plan and plan.changed) or (switched and switched.changed)),
        "host": host,
        "applied": not check_mode,
        "warnings": [*(plan.warnings if plan else ()), *(switched.warnings if switched else ())],
        "diff": _diff(plan, switched),
    }
    if plan is not None:
        result.update(_plan_fields(plan))
    if switched is not None:
        result.update(paused=switched.paused, resumed=switched.resumed, missing=switched.missing)
    result["msg"] = _summary(plan, switched, check_mode)
    return result


def _diff(plan, switched):
    diff = plan.diff() if plan is not None else {"before": {}, "after": {}}
    if switched is not None:
        for side, values in switched.diff().items():
            for job, flags in values.items():
                diff[side][job] = {**diff[side].get(job, {}), **flags}
    return diff


def _summary(plan, switched, check_mode):
    parts = []
    if plan is not None:
        counts = {}
        for job in plan.jobs:
            counts[str(job.action)] = counts.get(str(job.action), 0) + 1
        done = {str(Action.CREATE): "created", str(Action.UPDATE): "updated"}
        if check_mode:
            done = {str(Action.CREATE): "to create", str(Action.UPDATE): "to update"}
        parts.append(", ".join(f"{n} {done.get(state, state)}" for state, n in counts.items()))
    if switched is not None:
        verb = "would " if check_mode else ""
        if switched.paused:
            parts.append(f"{verb}paused {', '.join(switched.paused)}")
        if switched.resumed:
            parts.append(f"{verb}resumed {', '.join(switched.resumed)}")
        if not switched.changed:
            parts.append("active flags unchanged")
    return "; ".join(parts)
