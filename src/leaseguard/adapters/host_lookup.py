"""Every lookup of one host in ONE exec, the host's clock read by the same exec.

The commands run as one script (leaseguard.core.one_exec) and are then judged one by one
exactly as if run alone; a command that needs another's output (a pid file's /proc entries,
when the pid file changed meanwhile) runs on its own afterwards.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Unpack

from leaseguard.adapters.runtime import Given, Lookups, Runner, resolve
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract
from leaseguard.core.lookups import Argv, CommandResult
from leaseguard.core.one_exec import Plan, batch_script, planned_commands, split_batch
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
