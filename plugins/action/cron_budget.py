"""Action plugin for leaseguard.deploy.cron_budget: `converge_jobs` or `resume_pauses`."""

from collections import Counter

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import api


class ActionModule(_action.LeaseguardAction):
    failure_what = "cron_budget"

    def act(self, args, host, task_vars):
        check_mode = bool(self._task.check_mode)
        common = dict(
            cron_database=args["cron_database"] or None,
            check_mode=check_mode,
            connect_timeout_s=args["connect_timeout_s"],
        )
        if args["resume_recorded"]:
            access = api.IntakeAccess(common.pop("cron_database"))
            with _action.database_conninfo(self, args) as conninfo:
                outcome = api.resume_pauses(conninfo, access, **common)
            result = {"changed": bool(outcome["records"]), "host": host, **outcome}
            jobs = sorted({r["job"] for r in outcome["records"]}) if check_mode else []
            resumed = ", ".join(jobs or outcome["resumed"])
            verb = "would resume" if check_mode else "resumed"
            msg = f"{verb} {resumed}" if resumed else "no recorded pause to resume"
            if outcome.get("kept"):  # a live (or unverifiable) holder's: its action may run
                result["warnings"] = [
                    f"kept the hold on pg_cron job {k['job']} by {k['by']}: {k['reason']}; "
                    "once that run is gone, give it back with `leaseguard resume --force`"
                    for k in outcome["kept"]
                ]
                msg += f"; kept {len(outcome['kept'])} live hold(s)"
            return {**result, "applied": not check_mode, "msg": msg}
        declared = api.task_budgets(args["jobs"], args["overrides"], args["environment"] or None)
        plan, switched = api.converge_jobs(
            _action.database_conninfo(self, args),
            declared,
            active=args["active"],
            on_drift=args["on_drift"],
            **common,
        )
        return _result(plan, switched, check_mode, host)


def _result(plan, switched, check_mode, host):
    """The converge's result: refused (nothing written, what to do), or what changed, diffed."""
    result = {"changed": False, "host": host, "applied": not check_mode, "warnings": []}
    diff, parts = {"before": {}, "after": {}}, []
    if plan is not None:
        fields = plan.as_dict()
        planned = {key: fields[key] for key in ("environment", "on_drift", "jobs", "drift")}
        if plan.refusals:
            guidance = (
                "declare the live budget as an override for this environment (overrides, "
                "leaseguard_cron_budget_overrides) if it is deliberate, or converge deliberately "
                "with on_drift=apply"
                if any(not d["applied"] for d in plan.drift)
                else "fix or remove the job by hand; leaseguard never rewrites a command it does "
                "not fully understand"
            )
            msg = (
                f"leaseguard: cron_budget on {host} ({plan.environment or 'no environment'}) left "
                f"everything untouched: {'; '.join(plan.refusals)}. To go on: {guidance}."
            )
            refused = {"failed": True, "changed": False, "host": host, "msg": msg}
            return {**refused, **planned, "applied": plan.applied}
        diff = plan.diff()
        counts = Counter(str(job.action) for job in plan.jobs)
        said = {s: f"to {s}" if check_mode else f"{s}d" for s in ("create", "update")}
        parts.append(", ".join(f"{n} {said.get(state, state)}" for state, n in counts.items()))
        result.update(planned, changed=plan.changed, warnings=list(plan.warnings))
    if switched is not None:
        for job in (job for job in switched.jobs if job.exists):
            diff["before"].setdefault(job.job, {})["active"] = job.before
            diff["after"].setdefault(job.job, {})["active"] = job.wanted
        verbs = ("would pause", "would resume") if check_mode else ("paused", "resumed")
        switches = zip(verbs, (switched.paused, switched.resumed), strict=True)
        parts += [f"{verb} {', '.join(jobs)}" for verb, jobs in switches if jobs]
        if not switched.changed:
            parts.append("active flags unchanged")
        result.update(paused=switched.paused, resumed=switched.resumed, missing=switched.missing)
        result["changed"] = result["changed"] or switched.changed
        result["warnings"] += switched.warnings
    return {**result, "diff": diff, "msg": "; ".join(parts)}
