"""A host looked up the one way every front does (`look_up_host`), and a runtime's restart
checked by its start time (`restart_runtime`).

Over SSH each exec pays the host's login shell, so every lookup and the host's clock run as
ONE script (leaseguard.core.one_exec): the commands the lookups ask of a runner that answers
nothing (a pid file gets a placeholder pid), each judged exactly as if run alone. One the
script could not answer (a pid file rewritten meanwhile) runs alone afterwards.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Unpack

from leaseguard.adapters.clock import offset_from_here
from leaseguard.adapters.runtime import Given, Lookups, Runner, resolve
from leaseguard.core.contract import Contract
from leaseguard.core.errors import LookupFailed
from leaseguard.core.fleet import ClockOffset
from leaseguard.core.lookups import Argv, CommandResult, pid_argv
from leaseguard.core.one_exec import Plan, batch_script, split_batch
from leaseguard.core.replicas import shared_variable
from leaseguard.core.restart import (
    RestartSpec,
    checked_restart,
    not_moved_message,
    restart_argv,
    restart_failed_message,
    restart_result,
    restarted_message,
    start_moved,
    start_of,
    would_restart,
)
from leaseguard.core.verdict import RuntimeFacts

POLL_S = 2.0  # how often a restart's new start time is read (the restart role's delay: 2)


@dataclass(frozen=True)
class HostLookup:
    """A host's facts and its clock minus this machine's (None: no start time to compare)."""

    facts: RuntimeFacts
    clock: ClockOffset | None


def look_up_host(
    contract: Contract, runner: Runner, *, one_exec: bool = True, **given: Unpack[Given]
) -> HostLookup:
    """What was not given, looked up (a failure raises, naming host and lookup), and the
    host's clock when a start time makes it matter: with `one_exec` all in one exec (whose
    round trip bounds the clock's uncertainty), except through become, whose tty merges the
    streams that exec's output is split by; else one exec each, the clock read alone."""
    ran: dict[Argv, CommandResult] = {}
    clock = None
    if one_exec and not getattr(runner, "becomes", False):
        timeout_given = given.get("task_timeout_s") is not None
        start_given = given.get("runtime_started_at") is not None
        ran, clock = run_together(runner, planned_commands(contract, timeout_given, start_given))
    facts = resolve(contract, Lookups(runner, ran), given)
    if clock is None and facts.runtime_started_at is not None:
        clock = offset_from_here(runner)
    return HostLookup(facts, clock)


class _Planner:
    """A runner that runs nothing: it notes each command and answers it with nothing, and
    a pid file with a placeholder pid (so that the commands on that pid are noted too)."""

    label = "(planning)"

    def __init__(self) -> None:
        self.plan = Plan()

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.plan.commands.append(tuple(argv))
        if tuple(argv) != pid_argv(argv[-1]):
            return CommandResult(0, "")
        slots = {pid_file: slot for slot, pid_file in self.plan.pid_files.items()}
        slot = slots.get(argv[-1]) or str(918273645546372819 + len(slots))
        self.plan.pid_files[slot] = argv[-1]
        return CommandResult(0, slot)


def planned_commands(contract: Contract, timeout_given: bool, start_given: bool) -> Plan:
    """The commands the lookups will run, each once. One that fails without an answer (a bad
    variable name or filter) is left out: run alone, it fails naming what is wrong."""
    planner = _Planner()
    lookups = Lookups(planner)
    timeout_wanted = not (timeout_given or contract.rows_carry_expiry)
    if timeout_wanted:
        with suppress(LookupFailed):
            lookups.task_timeout(contract.task_timeout)
    if not start_given:
        variable = shared_variable(contract, timeout_looked_up=timeout_wanted)
        with suppress(LookupFailed):
            lookups.runtime_start(contract.runtime, variable)
    planner.plan.commands = list(dict.fromkeys(planner.plan.commands))
    return planner.plan


def run_together(
    runner: Runner, plan: Plan
) -> tuple[dict[Argv, CommandResult], ClockOffset | None]:
    """Each command's result and the host's clock minus this machine's, from one exec."""
    nonce = secrets.token_hex(8)
    before = time.time()
    result = runner.run(["sh", "-c", batch_script(plan, nonce)])
    after = time.time()
    ran, reading = split_batch(plan, nonce, result)
    if reading is None:
        return ran, None
    return ran, ClockOffset(reading - (before + after) / 2, (after - before) / 2)


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
    checked_restart(spec, lookup)
    if check_mode:
        return would_restart(spec)
    argv = restart_argv(spec)
    if spec.verifies and not getattr(runner, "becomes", False):
        plan = planned_commands(contract, timeout_given=True, start_given=False)
        plan.commands.insert(0, argv)  # with the first reading: each exec pays a login shell
        ran, _clock = run_together(runner, plan)
    else:
        ran = {argv: runner.run(list(argv))}
    result = restart_result(spec, argv, ran[argv].exit_code)
    if ran[argv].exit_code != 0:
        return {**result, "failed": True, "msg": restart_failed_message(spec, ran[argv])}
    before = start_of(lookup)
    if not spec.verifies:
        return {**result, "before": before, "msg": restarted_message(spec, before, None)}
    started, error = _read_start(Lookups(runner, ran), contract)
    ends_at = time.monotonic() + spec.verify_timeout_s
    moved = start_moved(before["runtime_started_epoch_s"], started)
    while not moved and (left := ends_at - time.monotonic()) > 0:
        time.sleep(min(POLL_S, left))
        started, error = _read_start(Lookups(runner), contract)
        moved = start_moved(before["runtime_started_epoch_s"], started)
    after = start_of(started)
    result.update(before=before, after=after)
    if moved:
        return {**result, "msg": restarted_message(spec, before, after)}
    return {**result, "failed": True, "msg": not_moved_message(spec, before, started, error)}


def _read_start(
    lookups: Lookups, contract: Contract
) -> tuple[datetime | None, LookupFailed | None]:
    try:
        return lookups.runtime_start(contract.runtime), None
    except LookupFailed as exc:  # e.g. still starting: read again until the deadline
        return None, exc
