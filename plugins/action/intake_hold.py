# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.intake_hold (documented in plugins/modules/).

`state: held` takes the hold (and waits for runs already in progress), `state: released`
lets go of exactly that hold; a pg_cron job comes back only when its last holder lets go.
"""

from __future__ import annotations

from contextlib import contextmanager

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import (
    intake_hold_role_variables,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._drain_front import (
    RESUME_HINT,
    drain_events,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    AnsibleRunner,
    database_path,
)

try:  # noqa: SIM105 (ansible-test's import check reads this form)
    from leaseguard.api import (
        CommandPause,
        CronJobsPause,
        Hold,
        Intakes,
        connect,
        drain_identity,
        intake_line,
    )
except ImportError:  # reported by require_leaseguard() before act() runs
    pass


class ActionModule(LeaseguardAction):
    module = "intake_hold"
    failure_what = "intake hold"
    role_variables = intake_hold_role_variables()

    def act(self, args, host, task_vars):
        if self._task.check_mode:
            return {"changed": False, "hold": None, "msg": "check mode: intake not held"}
        with drain_events(host) as events:
            held = args["state"] == "held"
            result = self._hold(args, host) if held else self._release(args, host)
        return {**result, "events": events}

    def _hold(self, args, host):
        parts = []
        if args["pause_cron_jobs"]:
            parts.append(self._cron(args, host))
        if args["pause_command"]:
            runner = AnsibleRunner(self, host)
            parts.append(CommandPause(runner, args["pause_command"], args["resume_command"]))
        if not parts:
            return {"changed": False, "hold": None, "msg": intake_line(None)}
        intake = Intakes(parts)
        try:
            intake.pause()
        except BaseException:
            intake.resume()  # what was taken before the failure; then the failure itself
            raise
        cron = parts[0].hold if args["pause_cron_jobs"] else None
        held = intake.paused_intake()
        return {
            "changed": bool(held),
            "hold": {
                "cron": cron.as_dict() if cron else None,
                "command": bool(args["pause_command"]),
                "what": held,
            },
            "paused": list(cron.switched) if cron else [],
            "msg": intake_line(tuple(held)),
        }

    def _release(self, args, host):
        hold = args["hold"] or {}
        parts = []
        if hold.get("cron"):
            cron = self._cron(args, host)
            cron.adopt(Hold.from_dict(hold["cron"]))
            parts.append(cron)
        if hold.get("command") and args["resume_command"]:
            command = CommandPause(AnsibleRunner(self, host), [], args["resume_command"])
            command.adopt()
            parts.append(command)
        intake = Intakes(parts, held=True)
        given_back = intake.paused_intake()
        intake.resume()  # every part attempted, in reverse; the first failure raised
        resumed = list(parts[0].resumed) if hold.get("cron") else []
        return {
            "changed": bool(given_back),
            "released": given_back,
            "resumed": resumed,
            "msg": "intake given back",
        }

    def _cron(self, args, host):
        action = f"{args['action']} ({host})"
        return CronJobsPause(
            lambda: self._cron_connection(args),
            args["pause_cron_jobs"],
            by=drain_identity(f"ansible-playbook {action}"),
            action=action,
            retry_s=args["resume_retry_s"],
            resume_hint=RESUME_HINT,
            quiet_timeout_s=args["quiet_timeout_s"],
        )

    @contextmanager
    def _cron_connection(self, args):
        """A fresh path to cron.job each time (tunnel included), as the intake's own role."""
        cron_args = dict(args)
        if args["cron_user"]:
            cron_args.update(db_user=args["cron_user"], db_password=args["cron_password"])
        with database_path(self, cron_args) as (conninfo, _tunnel):
            timeout = args["connect_timeout_s"]
            with connect(conninfo, timeout, writable=True, dbname=args["cron_database"]) as conn:
                yield conn
