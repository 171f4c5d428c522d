"""Action plugin for leaseguard.deploy.intake_hold: `intake_hold` over the task's connection."""

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import api

HOLD_KEYS = (
    *("pause_cron_jobs", "pause_command", "resume_command", "cron_database", "hold"),
    *("connect_timeout_s", "resume_retry_s", "quiet_timeout_s"),
)


class ActionModule(_action.LeaseguardAction):
    failure_what = "intake hold"

    def act(self, args, host, task_vars):
        if self._task.check_mode:
            nothing = {"paused": []} if args["state"] == "held" else {"resumed": [], "released": []}
            msg = "check mode: intake not held"
            return {"changed": False, "hold": None, "events": [], **nothing, "msg": msg}
        cron_args = dict(args)  # pg_cron as the intake's own role
        if args["cron_user"]:
            cron_args.update(db_user=args["cron_user"], db_password=args["cron_password"])
        with _action.drain_events(host) as events:
            result = api.intake_hold(
                args["state"],
                cron_path=lambda: _action.database_conninfo(self, cron_args),
                runner=_action.AnsibleRunner(self, host),
                action=f"{args['action']} ({host})",
                resume_hint=_action.RESUME_HINT,
                **{key: args[key] for key in HOLD_KEYS},
            )
        return {**result, "events": events}
