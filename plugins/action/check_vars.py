# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.check_vars (documented in plugins/modules/).

The known names are the collection's own (plugin_utils/_known_vars). With `restart`, the
restart role's settings are checked in the same task: a restart that cannot run must fail
before the guard judges (or drains) anything, and a task of its own costs every host a
worker.
"""

from __future__ import annotations

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._known_vars import (
    checked_variables,
)

# What each restart method cannot run without, by the variable that sets it.
RESTART_NEEDS = {"command": "leaseguard_restart_command", "systemd": "leaseguard_restart_unit"}


class ActionModule(LeaseguardAction):
    module = "check_vars"
    needs_leaseguard = False  # it names variables: it runs before anything else is needed

    def act(self, args, host, task_vars):
        result = checked_variables(task_vars, args["allow"])
        missing = args["restart"] and restart_missing(args["restart"])
        if missing and not result.get("failed"):
            result.update(failed=True, msg=missing)
        return result


def restart_missing(restart):
    """The restart's missing setting, said as the restart role's variable (or None)."""
    method = restart["method"]
    needed = RESTART_NEEDS.get(method)
    given = restart["command"] if method == "command" else restart["unit"]
    if needed is None or given:
        return None
    return f"leaseguard: restart method {method} needs {needed}"
