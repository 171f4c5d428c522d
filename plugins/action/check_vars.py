# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.check_vars."""

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import (
    LeaseguardAction,
    api,
    checked_variables,
    require_leaseguard,
)


class ActionModule(LeaseguardAction):
    module = "check_vars"
    needs_leaseguard = False  # it names variables: it runs before anything else is needed

    def act(self, args, host, task_vars):
        result = checked_variables(task_vars, args["allow"], self._templar.template)
        missing = args["restart"] and restart_missing(args["restart"])
        if missing and not result.get("failed"):
            result.update(failed=True, msg=missing)
        return result


def restart_missing(restart):
    """The restart's missing setting, said as the restart role's variable (or None)."""
    require_leaseguard()
    spec = api.RestartSpec(
        restart["method"], restart["container"], restart["unit"], tuple(restart["command"])
    )
    missing = api.missing_target(spec)
    if missing is None:
        return None
    said = f"leaseguard: restart method {spec.method} needs leaseguard_restart_{missing}"
    if not getattr(spec, missing):
        return said
    return (
        f"{said} naming one container or unit: a filter or a glob names replicas, not what "
        "to restart (restart each replica by name, or use leaseguard_restart_method: command)"
    )
