"""A restart with a stop budget: its argv, whether the start moved, runtime_restart's messages."""

import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leaseguard.core import lookups
from leaseguard.core.errors import ConfigError

# `systemctl restart` takes no TimeoutStopSec: a runtime drop-in (under /run) carries this
# restart's stop budget. The EXIT trap removes it whatever happens (left, it would change every
# later stop), its directory only if made here. $1 unit, $2 budget (s); exit: the first failure's.
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
    method: str
    container: str = ""
    unit: str = ""
    command: tuple[str, ...] = ()
    host: str = ""
    stop_timeout_s: int = 10
    verify_timeout_s: int = 60
    source: str = "docker"  # the runtime lookup's

    @property
    def verifies(self) -> bool:
        """Sources `none` and `fixed` read no start time: nothing to check after a restart."""
        return self.source not in ("none", "fixed")

    @property
    def argv(self) -> lookups.Argv:
        budget = str(int(self.stop_timeout_s))
        if self.method in ("docker", "podman"):
            return (self.method, "restart", "--time", budget, self.container)
        if self.method == "systemd":
            return ("sh", "-c", _SYSTEMD_SCRIPT, "sh", self.unit, budget)
        return ("env", f"LEASEGUARD_STOP_TIMEOUT_S={budget}", *self.command)

    @property
    def target(self) -> str:
        if self.method == "command":
            return f"command {shlex.join(self.command)}"
        if self.method == "systemd":
            return f"unit {self.unit}"
        return f"{self.method} container {self.container}"

    def check(self, lookup: dict[str, Any] | None) -> None:
        """Refuse a restart that would restart nothing, or could never be checked (fail closed)."""
        if (missing := missing_target(self)) is not None:
            raise ConfigError(
                f"restart method {self.method} needs `{missing}` naming one container "
                "or unit (a filter or a glob names replicas, not what to restart)"
            )
        if self.verifies and "runtime_started_at" not in (lookup or {}):
            raise ConfigError(
                "`lookup` (the registered lookup from before the restart) is needed to check "
                "that the restart moved the runtime's start time"
            )

    def result(self, argv: lookups.Argv | None, rc: int | None) -> dict[str, Any]:
        restarted = {"method": self.method, "target": self.target, "cmd": argv, "rc": rc}
        return {"changed": True, "restarted": restarted, "stop_timeout_s": self.stop_timeout_s}

    def would_restart(self) -> dict[str, Any]:
        return {
            **self.result(None, None),
            "msg": f"leaseguard (check mode): would restart {self.host}: "
            f"{self.target} with a stop budget of {self.stop_timeout_s} s",
        }

    def restarted_message(self, before: dict[str, Any], after: dict[str, Any] | None) -> str:
        budget = f"stop budget {self.stop_timeout_s} s"
        if after is None:  # not checked: the runtime source reads no start time
            return f"leaseguard: restarted {self.host} ({budget})"
        moved = f"{before['runtime_started_at']} -> {after['runtime_started_at']}"
        return f"leaseguard: restarted {self.host} (runtime started {moved}, {budget})"

    def not_moved_message(
        self, before: dict[str, Any], after: datetime | None, error: Exception | None
    ) -> str:
        """The start time did not move in time; a lookup failing until then says its words."""
        shown, said = (after.isoformat() if after else None), ""
        if error is not None:
            shown, said = "unknown", f" The last lookup failed: {error}"
        return (
            f"leaseguard: restarted {self.host} with method {self.method} ({self.target}), but "
            f"the runtime start time read from {self.source} did not move forward within "
            f"{self.verify_timeout_s} s (leaseguard_restart_verify_timeout_s): before "
            f"{before['runtime_started_at']}, after {shown}. Check that the restart restarts the "
            f"runtime that leaseguard_runtime reads.{said}"
        )

    def failed_message(self, ran: lookups.CommandResult) -> str:
        """An engine's or systemctl's first line of complaint (masked), never a user command's."""
        said = "" if self.method == "command" else lookups.first_stderr_line(ran.stderr)
        meaning = lookups.exit_meaning(ran.exit_code)
        status = f"rc {ran.exit_code}" + ("" if meaning.startswith("exited") else f", {meaning}")
        return (
            f"leaseguard: restarting {self.host} with method {self.method} "
            f"({self.target}) failed ({status}){f': {said}' if said else ''}. "
            "The runtime may be stopped; its start time was not checked."
        )


def missing_target(spec: RestartSpec) -> str | None:
    """The setting `spec.method` needs and lacks or names only as replicas: `docker restart
    label=...` restarts nothing, a glob's `systemctl restart` all at once, its budget lost."""
    name = dict(docker="container", podman="container", systemd="unit").get(spec.method, "command")
    target = getattr(spec, name)
    if name == "container":
        return name if not target or target.startswith(("label=", "name=")) else None
    return name if not target or (name == "unit" and lookups.is_unit_glob(target)) else None


def start_moved(before_epoch_s: float | None, after: datetime | None) -> bool:
    """A runtime not running before has moved by any start time; an unknown one never has."""
    return after is not None and (before_epoch_s is None or after.timestamp() > before_epoch_s)


def start_of(source: datetime | dict[str, Any] | None) -> dict[str, Any]:
    """task_timeout's two keys for a start time: from a reading, or a registered lookup."""
    if isinstance(source, dict):
        at, epoch = source.get("runtime_started_at"), source.get("runtime_started_epoch_s")
    else:
        at, epoch = (source.isoformat(), source.timestamp()) if source else (None, None)
    epoch = None if epoch is None else float(epoch)
    return {"runtime_started_at": at, "runtime_started_epoch_s": epoch}
