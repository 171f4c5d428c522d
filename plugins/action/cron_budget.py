# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.cron_budget (documented in plugins/modules/).

Runs on the controller and reaches cron.job through the same tunnel as lease_guard. The
decisions and the all-or-nothing policy are the core's; this front maps the options and
turns refusals into a failure. Check mode computes the same plan and skips the writes.
"""

from __future__ import annotations

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    ConfigError,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    database_conninfo,
)

try:  # noqa: SIM105 (ansible-test's import check reads this form)
    from leaseguard.api import (
        budget_config_from_mapping,
        connect,
        converge_budgets,
        read_records,
        resume_pauses,
        set_jobs_active,
        validate_active,
    )
except ImportError:  # require_leaseguard() reports it
    pass

_DONE = {"create": "created", "update": "updated"}
_TO_DO = {"create": "to create", "update": "to update"}


class ActionModule(LeaseguardAction):
    module = "cron_budget"
    failure_what = "cron_budget"

    def act(self, args, host, task_vars):
        check_mode = bool(self._task.check_mode)
        cron_database = args["cron_database"] or None
        timeout = args["connect_timeout_s"]
        if args["resume_recorded"]:
            with database_conninfo(self, args) as conninfo:
                if check_mode:
                    with connect(conninfo, timeout, writable=True, dbname=cron_database) as conn:
                        records = [r.as_dict() for r in read_records(conn)]
                    return {
                        "changed": bool(records),
                        "host": host,
                        "records": records,
                        "resumed": [],
                    }
                outcome = resume_pauses(
                    conninfo, cron_database=cron_database, connect_timeout_s=timeout
                )
            resumed = outcome["resumed"]
            msg = f"resumed {', '.join(resumed)}" if resumed else "no recorded pause to resume"
            return {"changed": bool(outcome["records"]), "host": host, **outcome, "msg": msg}
        declared = _declared(args)
        active = validate_active(args["active"]) if args["active"] else {}
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
    guidance = (
        "declare the live budget as an override for this environment (overrides, "
        "leaseguard_cron_budget_overrides) if it is deliberate, or converge deliberately "
        "with on_drift=apply"
        if any(not d["applied"] for d in plan.drift)
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
    diff = plan.diff() if plan is not None else {"before": {}, "after": {}}
    parts = []
    if plan is not None:
        counts = {}
        for job in plan.jobs:
            counts[str(job.action)] = counts.get(str(job.action), 0) + 1
        done = _TO_DO if check_mode else _DONE
        parts.append(", ".join(f"{n} {done.get(state, state)}" for state, n in counts.items()))
    if switched is not None:
        for side, values in switched.diff().items():
            for job, flags in values.items():
                diff[side][job] = {**diff[side].get(job, {}), **flags}
        verb = "would " if check_mode else ""
        if switched.paused:
            parts.append(f"{verb}paused {', '.join(switched.paused)}")
        if switched.resumed:
            parts.append(f"{verb}resumed {', '.join(switched.resumed)}")
        if not switched.changed:
            parts.append("active flags unchanged")
    result = {
        "changed": bool((plan and plan.changed) or (switched and switched.changed)),
        "host": host,
        "applied": not check_mode,
        "warnings": [*(plan.warnings if plan else ()), *(switched.warnings if switched else ())],
        "diff": diff,
    }
    if plan is not None:
        result.update(_plan_fields(plan))
    if switched is not None:
        result.update(paused=switched.paused, resumed=switched.resumed, missing=switched.missing)
    result["msg"] = "; ".join(parts)
    return result
