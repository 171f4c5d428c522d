# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: runtime_restart's restart, its check and its messages.

The restart is one command through the task's connection (leaseguard.core.restart builds
it); then the runtime's start time is read again until it moved forward or the verify
timeout passed. The messages are the restart role's, word for word.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# Makes the carried core importable first when no leaseguard package is installed.
from ansible_collections.leaseguard.deploy.plugins.plugin_utils import (  # noqa: F401  # pylint: disable=unused-import
    _core,
)

try:  # noqa: SIM105 (ansible-test's import check reads this form)
    from leaseguard.api import (
        ConfigError,
        LookupFailed,
        Lookups,
        RestartSpec,
        exit_meaning,
        first_stderr_line,
        missing_target,
        planned_commands,
        restart_argv,
        restart_target,
        run_together,
        start_moved,
    )
except ImportError:  # require_leaseguard() fails every task first, naming the install
    pass

POLL_S = 2.0  # as the role's `until` loop did (delay: 2)


@dataclass(frozen=True)
class Restart:
    """One restart of one host: what (`spec`), its stop budget, how long to wait for it."""

    host: str
    spec: object  # leaseguard.core.restart.RestartSpec
    stop_timeout_s: int
    verify_timeout_s: int
    source: str  # the runtime lookup's source, named in the messages

    @property
    def verifies(self):
        """Sources `none` and `fixed` read no start time: nothing to check after a restart."""
        return self.source not in ("none", "fixed")


@dataclass(frozen=True)
class StartReading:
    """One lookup of the runtime's start time: the time, or the lookup's failure."""

    started: object = None  # datetime | None
    error: Exception | None = None


def restart_from(args, host, contract):
    spec = RestartSpec(
        args["method"], args["container"] or "", args["unit"] or "", tuple(args["command"])
    )
    return Restart(
        host, spec, args["stop_timeout_s"], args["verify_timeout_s"], contract.runtime.source
    )


def checked(restart, lookup):
    """Refuse a restart that would restart nothing, or could never be checked (fail closed)."""
    missing = missing_target(restart.spec)
    if missing is not None:
        raise ConfigError(
            f"restart method {restart.spec.method} needs `{missing}` naming one container "
            "or unit (a filter or a glob names replicas, not what to restart)"
        )
    if restart.verifies and "runtime_started_at" not in (lookup or {}):
        raise ConfigError(
            "`lookup` (the registered lookup from before the restart) is needed to check "
            "that the restart moved the runtime's start time"
        )


def would_restart(restart):
    """Check mode: what the real run would do; nothing runs on the host."""
    return {
        "changed": True,
        "restarted": _restarted(restart, None, None),
        "stop_timeout_s": restart.stop_timeout_s,
        "msg": f"leaseguard (check mode): would restart {restart.host}: "
        f"{restart_target(restart.spec)} with a stop budget of {restart.stop_timeout_s} s",
    }


def restart_runtime(runner, restart, contract, lookup):
    """Restart, then wait for the start time to move forward; the task's result."""
    argv = restart_argv(restart.spec, restart.stop_timeout_s)
    if not restart.verifies or runner.becomes:
        # Through become every command runs alone (its tty merges the streams the one
        # exec's output is split by).
        ran, results = runner.run(list(argv)), {}
    else:  # the restart and the first reading in one exec: each exec pays the login shell
        plan = planned_commands(contract, timeout_given=True, start_given=False)
        plan.commands.insert(0, argv)
        results, _clock = run_together(runner, plan)
        ran = results[argv]
    result = {
        "changed": True,
        "restarted": _restarted(restart, argv, ran.exit_code),
        "stop_timeout_s": restart.stop_timeout_s,
    }
    if ran.exit_code != 0:
        return {**result, "failed": True, "msg": restart_failed_message(restart, ran)}
    before = _start_of(lookup)
    if not restart.verifies:
        return {**result, "before": before, "msg": restarted_message(restart, before, None)}
    reading = _read_start(Lookups(runner, results), contract)
    ends_at = time.monotonic() + restart.verify_timeout_s
    while not _moved(before, reading) and (left := ends_at - time.monotonic()) > 0:
        time.sleep(min(POLL_S, left))
        reading = _read_start(Lookups(runner), contract)
    after = _start_of(reading)
    result.update(before=before, after=after)
    if _moved(before, reading):
        return {**result, "msg": restarted_message(restart, before, after)}
    return {**result, "failed": True, "msg": not_moved_message(restart, before, reading)}


def _restarted(restart, argv, rc):
    spec = restart.spec
    return {"method": spec.method, "target": restart_target(spec), "cmd": argv, "rc": rc}


def _read_start(lookups, contract):
    try:
        return StartReading(lookups.runtime_start(contract.runtime))
    except LookupFailed as exc:  # e.g. still starting: read again until the deadline
        return StartReading(error=exc)


def _moved(before, reading):
    started = reading.started
    return start_moved(before["runtime_started_epoch_s"], started and started.timestamp())


def _start_of(source):
    """task_timeout's two keys for a start time, from a registered lookup or a reading."""
    if isinstance(source, StartReading):
        started = source.started
        return {
            "runtime_started_at": started.isoformat() if started else None,
            "runtime_started_epoch_s": started.timestamp() if started else None,
        }
    epoch = (source or {}).get("runtime_started_epoch_s")
    return {
        "runtime_started_at": (source or {}).get("runtime_started_at"),
        "runtime_started_epoch_s": None if epoch is None else float(epoch),
    }


# The restart role's own texts; a missing start time reads `None`, as its templates showed it.


def restarted_message(restart, before, after):
    if after is None:  # not checked: the runtime source reads no start time
        return f"leaseguard: restarted {restart.host} (stop budget {restart.stop_timeout_s} s)"
    return (
        f"leaseguard: restarted {restart.host} "
        f"(runtime started {before['runtime_started_at']} -> "
        f"{after['runtime_started_at']}, stop budget {restart.stop_timeout_s} s)"
    )


def not_moved_message(restart, before, reading):
    after = reading.started.isoformat() if reading.started else None
    said = ""
    if reading.error is not None:  # the lookup failed until the deadline: its words follow
        after, said = "unknown", f" The last lookup failed: {reading.error}"
    return (
        f"leaseguard: restarted {restart.host} with method {restart.spec.method} "
        f"({restart_target(restart.spec)}), but the runtime start time read from "
        f"{restart.source} did not move forward within {restart.verify_timeout_s} s "
        f"(leaseguard_restart_verify_timeout_s): before {before['runtime_started_at']}, "
        f"after {after}. Check that the restart restarts the runtime that "
        f"leaseguard_runtime reads.{said}"
    )


def restart_failed_message(restart, ran):
    """Only an engine's or systemctl's own first line of complaint (masked), never a user
    command's output."""
    spec = restart.spec
    said = "" if spec.method == "command" else first_stderr_line(ran.stderr)
    meaning = exit_meaning(ran.exit_code)
    status = f"rc {ran.exit_code}" + ("" if meaning.startswith("exited") else f", {meaning}")
    return (
        f"leaseguard: restarting {restart.host} with method {spec.method} "
        f"({restart_target(spec)}) failed ({status}){f': {said}' if said else ''}. "
        "The runtime may be stopped; its start time was not checked."
    )
