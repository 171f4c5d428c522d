"""A host looked up in ONE exec (each pays a login shell); a restart checked by its start."""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, NamedTuple, Unpack

from leaseguard.adapters import runtime
from leaseguard.adapters.runtime import Given, Runner
from leaseguard.core import restart
from leaseguard.core.contract import Contract
from leaseguard.core.errors import LookupFailed
from leaseguard.core.fleet import ClockOffset
from leaseguard.core.lookups import Argv, CommandResult
from leaseguard.core.restart import RestartSpec
from leaseguard.core.verdict import RuntimeFacts

POLL_S = 2.0  # how often a restart's new start time is read (the restart role's delay: 2)
Answers = dict[Argv, CommandResult]


class HostLookup(NamedTuple):
    """A host's facts and its clock minus this machine's (None: no start time to compare)."""

    facts: RuntimeFacts
    clock: ClockOffset | None


def look_up_host(
    contract: Contract, runner: Runner, *, one_exec: bool = True, **given: Unpack[Given]
) -> HostLookup:
    """The facts not given and the host's clock, in one exec unless through become (its tty)."""
    clock = None
    if one_exec and not getattr(runner, "becomes", False):
        timeout_given = given.get("task_timeout_s") is not None
        start_given = given.get("runtime_started_at") is not None
        ran: Answers = {}
        for _round in range(2):  # a pid file's process is known once the file was read
            if commands := planned_commands(contract, timeout_given, start_given, ran):
                answers, read = run_together(runner, commands)
                ran, clock = ran | answers, read or clock
        runner = _Answered(runner, ran)
    facts = runtime.resolve_runtime_facts(contract, runner, **given)
    if clock is None and facts.runtime_started_at is not None:
        clock = runtime.offset_from_here(runner)
    return HostLookup(facts, clock)


class _Answered:
    """`runner` answering commands already run; without one (planning), noting them in `asked`."""

    def __init__(self, runner: Runner | None, ran: Answers) -> None:
        self.runner, self.ran, self.asked = runner, ran, list[Argv]()
        self.label = runner.label if runner is not None else "(planning)"

    def run(self, argv: Sequence[str]) -> CommandResult:
        if (answer := self.ran.get(tuple(argv))) is not None:
            return answer
        if self.runner is not None:
            return self.runner.run(argv)
        self.asked.append(tuple(argv))
        return CommandResult(0, "")


def planned_commands(
    contract: Contract, timeout_given: bool, start_given: bool, ran: Answers | None = None
) -> list[Argv]:
    """The commands the lookups will run that `ran` has no answer for, each once."""
    planner = _Answered(None, ran or {})
    lookups = runtime.Lookups(planner)
    timeout_wanted = not (timeout_given or contract.rows_carry_expiry)
    if timeout_wanted:
        with suppress(LookupFailed):
            lookups.task_timeout(contract.task_timeout)
    if not start_given:
        with suppress(LookupFailed):
            lookups.runtime_start(contract.runtime)
    return list(dict.fromkeys(planner.asked))


def batch_script(commands: Sequence[Argv], nonce: str) -> str:
    """Each command's output after a `@@leaseguard NONCE@@ I` line, `I rc` its status, then date."""
    mark = f"@@leaseguard {nonce}@@"
    return (
        "".join(
            f"printf '\\n%s\\n' '{mark} {i}'; printf '\\n%s\\n' '{mark} {i}' >&2; "
            f"{shlex.join(argv)} </dev/null; printf '\\n%s\\n%d\\n' '{mark} {i} rc' \"$?\"\n"
            for i, argv in enumerate(commands)
        )
        + f"printf '\\n%s\\n' '{mark} clock'; date +%s.%N"
    )


def run_together(runner: Runner, commands: Sequence[Argv]) -> tuple[Answers, ClockOffset | None]:
    """Each command's result and the host's clock offset, from one exec (a random nonce marks)."""
    nonce = secrets.token_hex(8)
    before = time.time()
    result = runner.run(["sh", "-c", batch_script(commands, nonce)])
    after = time.time()

    def parts(text: str) -> dict[str, str]:
        pieces = ("\n" + text).split(f"\n@@leaseguard {nonce}@@ ")[1:]
        return {key: body for key, _, body in (piece.partition("\n") for piece in pieces)}

    out, err = parts(result.stdout), parts(result.stderr)
    ran = {}
    for i, argv in enumerate(commands):
        status = out.get(f"{i} rc", "").strip()
        if str(i) in out and status.isascii() and status.isdigit():
            ran[argv] = CommandResult(int(status), out[str(i)], err.get(str(i), ""))
        else:  # never finished (the exec timed out): the exec's status, as alone
            ran[argv] = CommandResult(result.exit_code or 1, "", err.get(str(i), ""))
    return ran, runtime.host_clock(out.get("clock", ""), before, after)


def restart_runtime(
    runner: Runner,
    spec: RestartSpec,
    contract: Contract,
    lookup: dict[str, Any] | None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """runtime_restart's result: restart, then read the start time every POLL_S until it moves."""
    restart.checked_restart(spec, lookup)
    if check_mode:
        return restart.would_restart(spec)
    argv = restart.restart_argv(spec)
    reader = runner
    if spec.verifies and not getattr(runner, "becomes", False):
        ran, _clock = run_together(runner, [argv, *planned_commands(contract, True, False)])
        reader = _Answered(runner, ran)
    done = reader.run(list(argv))
    result = restart.restart_result(spec, argv, done.exit_code)
    if done.exit_code != 0:
        return {**result, "failed": True, "msg": restart.restart_failed_message(spec, done)}
    before = restart.start_of(lookup)
    if not spec.verifies:
        return {**result, "before": before, "msg": restart.restarted_message(spec, before, None)}
    ends_at = time.monotonic() + spec.verify_timeout_s
    while True:
        try:
            started, error = runtime.Lookups(reader).runtime_start(contract.runtime), None
        except LookupFailed as exc:  # e.g. still starting: read again until the deadline
            started, error = None, exc
        moved = restart.start_moved(before["runtime_started_epoch_s"], started)
        if moved or (left := ends_at - time.monotonic()) <= 0:
            break
        time.sleep(min(POLL_S, left))
        reader = runner
    result.update(before=before, after=restart.start_of(started))
    if moved:
        return {**result, "msg": restart.restarted_message(spec, before, result["after"])}
    message = restart.not_moved_message(spec, before, started, error)
    return {**result, "failed": True, "msg": message}
