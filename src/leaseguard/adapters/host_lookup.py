"""Every lookup of one host in ONE exec, the host's clock read by the same exec.

What to run is what the lookups themselves ask of a runner that answers nothing (and a
placeholder pid for a pid file); those commands run as one script (leaseguard.core.one_exec)
and are then judged exactly as if run alone. A command the script could not answer (a pid
file rewritten meanwhile) runs on its own afterwards.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Unpack

from leaseguard.adapters.runtime import Given, Lookups, Runner, resolve
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import Argv, CommandResult, pid_argv
from leaseguard.core.one_exec import Plan, batch_script, split_batch
from leaseguard.core.replicas import shared_variable
from leaseguard.core.verdict import RuntimeFacts


@dataclass(frozen=True)
class HostLookup:
    """A host's facts and its clock minus this machine's, read in the same exec."""

    facts: RuntimeFacts
    clock: ClockOffset | None


def look_up_host(contract: Contract, runner: Runner, **given: Unpack[Given]) -> HostLookup:
    """resolve_runtime_facts in one exec on the host, its clock read by the same exec.

    The exec's round trip bounds the clock reading's uncertainty (the lookups widen it, which
    only widens the orphan tolerance). None when the script could not read the clock: the
    caller then reads it alone (and reports that failure).
    """
    plan = planned_commands(
        contract,
        timeout_given=given.get("task_timeout_s") is not None,
        start_given=given.get("runtime_started_at") is not None,
    )
    ran, clock = run_together(runner, plan)
    return HostLookup(resolve(contract, Lookups(runner, ran), given), clock)


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


def planned_commands(contract: Contract, *, timeout_given: bool, start_given: bool) -> Plan:
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
