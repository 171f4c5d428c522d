"""Restarting a runtime with a stop budget (pure): the argv for each kind of runtime, how
messages name it, and whether its start time moved forward."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from leaseguard.core.lookups import Argv
from leaseguard.core.replicas import is_unit_glob

# TimeoutStopSec cannot be passed to `systemctl restart`, so a runtime drop-in (under /run,
# gone at reboot) carries the stop budget for this one restart. It is removed whether or not
# the restart succeeds (the EXIT trap, also on a signal): left behind, it would silently change
# every later stop of the unit. Only a directory this restart created is removed with it.
# Arguments: $1 the unit, $2 the stop budget in seconds. Exit status: the first failure's.
_SYSTEMD_SCRIPT = """\
umask 022
dir="/run/systemd/system/$1.d"; conf="$dir/50-leaseguard-stop.conf"; made=
rc=0
cleanup() {
  rm -f "$conf" || [ "$rc" -ne 0 ] || rc=1
  if [ -n "$made" ]; then rmdir "$dir" || [ "$rc" -ne 0 ] || rc=1; fi
  systemctl daemon-reload || [ "$rc" -ne 0 ] || rc=1
}
trap 'cleanup; exit "$rc"' EXIT
trap 'rc=130; exit' INT TERM HUP
if [ ! -d "$dir" ]; then mkdir -p "$dir" || { rc=$?; exit; }; made=1; fi
printf '[Service]\\nTimeoutStopSec=%s\\n' "$2" > "$conf" || { rc=$?; exit; }
systemctl daemon-reload || { rc=$?; exit; }
systemctl restart "$1" || rc=$?
"""


@dataclass(frozen=True)
class RestartSpec:
    """What to restart: `method` and the container, unit or command it needs."""

    method: str
    container: str = ""
    unit: str = ""
    command: tuple[str, ...] = ()


def restart_argv(spec: RestartSpec, stop_timeout_s: int) -> Argv:
    """The argv that restarts the runtime, giving it `stop_timeout_s` between SIGTERM and KILL."""
    budget = str(int(stop_timeout_s))
    match spec.method:
        case "docker" | "podman":
            return (spec.method, "restart", "--time", budget, spec.container)
        case "systemd":
            return ("sh", "-c", _SYSTEMD_SCRIPT, "sh", spec.unit, budget)
        case _:
            return ("env", f"LEASEGUARD_STOP_TIMEOUT_S={budget}", *spec.command)


def restart_target(spec: RestartSpec) -> str:
    """How messages name what is restarted: `docker container backend`, `unit x.service`."""
    match spec.method:
        case "command":
            return f"command {shlex.join(spec.command)}"
        case "systemd":
            return f"unit {spec.unit}"
        case _:
            return f"{spec.method} container {spec.container}"


def missing_target(spec: RestartSpec) -> str | None:
    """The setting `spec.method` needs and `spec` lacks or names only as replicas, if any:
    `docker restart label=...` restarts nothing, and one `systemctl restart` of a glob
    restarts them all at once, its stop budget lost."""
    name = {"docker": "container", "podman": "container", "systemd": "unit"}.get(
        spec.method, "command"
    )
    target = getattr(spec, name)
    if not target or (name == "container" and target.startswith(("label=", "name="))):
        return name
    return name if name == "unit" and is_unit_glob(target) else None


def start_moved(before_epoch_s: float | None, after_epoch_s: float | None) -> bool:
    """A runtime not running before has moved by any start time; an unknown one never has."""
    if after_epoch_s is None:
        return False
    return before_epoch_s is None or after_epoch_s > before_epoch_s
