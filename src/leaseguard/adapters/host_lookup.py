"""A host looked up the one way every front does (`look_up_host`), and a runtime's restart
checked by its start time (`restart_runtime`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Unpack

from leaseguard.adapters.clock import offset_from_here
from leaseguard.adapters.runtime import Given, Lookups, Runner, resolve_runtime_facts
from leaseguard.core import restart
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract
from leaseguard.core.errors import LookupFailed
from leaseguard.core.restart import RestartSpec
from leaseguard.core.verdict import RuntimeFacts

POLL_S = 2.0  # how often a restart's new start time is read (the restart role's delay: 2)


@dataclass(frozen=True)
class HostLookup:
    """A host's facts and its clock minus this machine's (None: no start time to compare)."""

    facts: RuntimeFacts
    clock: ClockOffset | None


def look_up_host(contract: Contract, runner: Runner, **given: Unpack[Given]) -> HostLookup:
    """What was not given, looked up (a failure raises, naming host and lookup), and the
    host's clock when a start time makes it matter."""
    facts = resolve_runtime_facts(contract, runner, **given)
    clock = offset_from_here(runner) if facts.runtime_started_at is not None else None
    return HostLookup(facts, clock)


def restart_runtime(
    runner: Runner,
    spec: RestartSpec,
    contract: Contract,
    lookup: dict[str, Any] | None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """runtime_restart's result: the restart through `runner`, then its start time read
    every POLL_S until it moved past `lookup`'s (the registered lookup from before) or
    verify_timeout_s passed, which fails. A restart that cannot be checked is refused."""
    restart.checked_restart(spec, lookup)
    if check_mode:
        return restart.would_restart(spec)
    argv = restart.restart_argv(spec)
    ran = runner.run(list(argv))
    result = restart.restart_result(spec, argv, ran.exit_code)
    if ran.exit_code != 0:
        return {**result, "failed": True, "msg": restart.restart_failed_message(spec, ran)}
    before = restart.start_of(lookup)
    if not spec.verifies:
        return {**result, "before": before, "msg": restart.restarted_message(spec, before, None)}
    ends_at = time.monotonic() + spec.verify_timeout_s
    while True:
        try:
            started, error = Lookups(runner).runtime_start(contract.runtime), None
        except LookupFailed as exc:  # e.g. still starting: read again until the deadline
            started, error = None, exc
        moved = restart.start_moved(before["runtime_started_epoch_s"], started)
        if moved or (left := ends_at - time.monotonic()) <= 0:
            break
        time.sleep(min(POLL_S, left))
    after = restart.start_of(started)
    result.update(before=before, after=after)
    if moved:
        return {**result, "msg": restart.restarted_message(spec, before, after)}
    return {
        **result,
        "failed": True,
        "msg": restart.not_moved_message(spec, before, started, error),
    }
