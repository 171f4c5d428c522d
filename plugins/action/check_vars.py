import math
from contextlib import suppress

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action


class ActionModule(_action.LeaseguardAction):
    needs_leaseguard = False  # it names variables: it runs before anything else is needed

    def act(self, args, host, task_vars):
        result = _action.checked_variables(task_vars, args["allow"], self._templar.template)
        restart = args["restart"]
        missing = restart and (cut_off_refused(restart) or restart_missing(restart))
        if missing and not result.get("failed"):
            result.update(failed=True, msg=missing)
        return result


def cut_off_refused(restart):
    """Why the restart's cut-off is no epoch (or None): Jinja's float reads other text as 0."""
    text = str(restart["if_started_before"] or "").strip()
    with suppress(ValueError):
        if not text or (text.isascii() and math.isfinite(float(text))):
            return None
    return (
        f"leaseguard: leaseguard_restart_if_started_before must be epoch seconds (such as "
        f"1765000000) or empty, not {text[:40]!r} (read as 0, every host would count as "
        "restarted already and none would restart). Nothing was run"
    )


def restart_missing(restart):
    """The restart's missing setting, said as the restart role's variable (or None)."""
    _action.require_leaseguard()
    spec = _action.api.RestartSpec(
        restart["method"], restart["container"], restart["unit"], tuple(restart["command"])
    )
    if (missing := _action.api.missing_target(spec)) is None:
        return None
    said = f"leaseguard: restart method {spec.method} needs leaseguard_restart_{missing}"
    if not getattr(spec, missing):
        return said
    return (
        f"{said} naming one container or unit: a filter or a glob names replicas, not what "
        "to restart (restart each replica by name, or use leaseguard_restart_method: command)"
    )
