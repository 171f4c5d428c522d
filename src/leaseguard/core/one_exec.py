"""A host's lookup commands and a clock reading as ONE `sh` script, and its output split back.

Over SSH every exec pays the host's login shell (~160 ms with a pyenv .bashrc), so
leaseguard.adapters.host_lookup runs all of a host's lookups as one script. Every part of
the output opens with a line `@@leaseguard NONCE@@ KEY` (on stdout, and on stderr for a
command's own stderr): KEY is the command's index, `I rc` its exit status, `I pid` the pid
it ran on, `clock` the closing `date`. The caller's random nonce keeps a command's own
output from passing for a marker.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from leaseguard.core.contract import Contract, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import (
    Argv,
    CommandResult,
    checked_env_name,
    command_argv,
    env_file_argv,
    pid_argv,
    process_env_argv,
    process_start_argv,
    systemd_argv,
)
from leaseguard.core.replicas import container_argv, shared_variable


@dataclass(frozen=True)
class PidCommand:
    """A command on the process a pid file names. The script reads the pid file itself; the
    result is kept under the argv for the pid it read, so a lookup that reads another pid
    (the file was rewritten meanwhile) runs its command alone."""

    pid_file: str
    argv_for: Callable[[int], Argv]


@dataclass
class Plan:
    commands: list[Argv] = field(default_factory=list)
    on_pid: list[PidCommand] = field(default_factory=list)


def planned_commands(contract: Contract, *, timeout_given: bool, start_given: bool) -> Plan:
    """What the lookups will run. A lookup that cannot even be spelled (a bad variable name
    or filter) is left out: run alone, it fails naming what is wrong."""
    plan = Plan()
    spec = contract.task_timeout
    timeout_wanted = not (timeout_given or contract.rows_carry_expiry)
    if timeout_wanted:
        with suppress(LookupFailed):
            if spec.source == "command":
                plan.commands.append(command_argv(spec))
            elif spec.source == "env_file" and spec.path:
                plan.commands.append(env_file_argv(spec.path, checked_env_name(spec.variable)))
            else:
                name = checked_env_name(spec.variable)
                _plan_runtime(plan, spec, name, lambda pid: process_env_argv(pid, name))
    if not start_given:
        variable = shared_variable(contract, timeout_looked_up=timeout_wanted)
        with suppress(LookupFailed):
            _plan_runtime(plan, contract.runtime, variable, process_start_argv)
    plan.commands = list(dict.fromkeys(plan.commands))  # one command may serve both lookups
    return plan


def _plan_runtime(
    plan: Plan,
    spec: TaskTimeoutLookup | RuntimeLookup,
    variable: str | None,
    on_pid: Callable[[int], Argv],
) -> None:
    if spec.source in ("docker", "podman"):
        plan.commands.append(container_argv(spec.source, spec.container, variable))
    elif spec.source == "systemd" and spec.unit:
        plan.commands.append(systemd_argv(spec.unit))
    elif spec.source == "process" and spec.pid_file:
        plan.commands.append(pid_argv(spec.pid_file))
        plan.on_pid.append(PidCommand(spec.pid_file, on_pid))


# Stands for the pid in a PidCommand's argv; the script puts the pid it read there.
_PID_SLOT = 918273645546372819


def batch_script(plan: Plan, nonce: str) -> str:
    """Each command in turn (stdin closed), then `date +%s.%N`. A PidCommand runs only when
    its pid file holds digits; `lg_pid` is exported for a `sh -c` script that reads it."""

    def part(key: str, command: str) -> str:
        mark = f"'@@leaseguard {nonce}@@ {key}'"
        return (
            f"printf '\\n%s\\n' {mark}; printf '\\n%s\\n' {mark} >&2; {command} </dev/null; "
            f"printf '\\n%s\\n%d\\n' '@@leaseguard {nonce}@@ {key} rc' \"$?\""
        )

    lines = [part(str(i), shlex.join(argv)) for i, argv in enumerate(plan.commands)]
    for i, follow in enumerate(plan.on_pid, start=len(plan.commands)):
        command = shlex.join(follow.argv_for(_PID_SLOT)).replace(str(_PID_SLOT), "${lg_pid}")
        lines.append(
            f"lg_pid=$(cat {shlex.quote(follow.pid_file)} 2>/dev/null </dev/null); "
            "case $lg_pid in ''|*[!0-9]*) ;; *) export lg_pid; "
            f"printf '\\n%s\\n%s' '@@leaseguard {nonce}@@ {i} pid' \"$lg_pid\"; "
            f"{part(str(i), command)};; esac"
        )
    lines.append(f"printf '\\n%s\\n' '@@leaseguard {nonce}@@ clock'; date +%s.%N")
    return "\n".join(lines)


def _parts(text: str, nonce: str) -> dict[str, str]:
    pieces = ("\n" + text).split(f"\n@@leaseguard {nonce}@@ ")[1:]
    return {key: body for key, _, body in (piece.partition("\n") for piece in pieces)}


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def split_batch(
    plan: Plan, nonce: str, result: CommandResult
) -> tuple[dict[Argv, CommandResult], float | None]:
    """Each command's own result, by argv, and the host's clock reading (None if absent).

    A command the script never finished (the exec timed out or was cut) gets the exec's exit
    status, so it fails as it would have alone; a PidCommand that did not run is left out.
    """
    out, err = _parts(result.stdout, nonce), _parts(result.stderr, nonce)

    def own(i: int) -> CommandResult | None:
        status = _number(out.get(f"{i} rc", ""))
        if str(i) not in out or status is None:
            return None
        return CommandResult(status, out[str(i)], err.get(str(i), ""))

    split = {
        argv: own(i) or CommandResult(result.exit_code or 1, "", err.get(str(i), ""))
        for i, argv in enumerate(plan.commands)
    }
    for i, follow in enumerate(plan.on_pid, start=len(plan.commands)):
        pid, found = _number(out.get(f"{i} pid", "")), own(i)
        if pid is not None and found is not None:
            split[follow.argv_for(pid)] = found
    reading = out.get("clock", "").strip()
    try:
        clock = float(reading) if reading and not any(c.isspace() for c in reading) else None
    except ValueError:
        clock = None
    return split, clock


# Through become, ansible's ssh runs commands on a tty (-tt): stderr arrives merged into
# stdout and every line ends with CRLF, so a tool's warning would be read as part of a value.
# The command's stderr is captured by the shell and printed after a marked line instead.
_TTY_SCRIPT = (
    'm="@@leaseguard $1"; shift; printf "%s\\n" "$m out@@"; '
    '{ e=$("$@" </dev/null 2>&1 1>&3 3>&-); s=$?; } 3>&1; '
    'printf "\\n%s %d\\n%s" "$m err@@" "$s" "$e"; exit "$s"'
)


def tty_argv(argv: Argv, nonce: str) -> Argv:
    """`argv` run so that its stdout, exit status and stderr can be told apart on a tty."""
    return ("sh", "-c", _TTY_SCRIPT, "sh", nonce, *argv)


def split_tty(result: CommandResult, nonce: str) -> CommandResult:
    """`tty_argv`'s command's own result, CRLF undone. Without both markers the command
    never ran (become failed): the whole output is the complaint, the status at least 1."""
    text = result.stdout.replace("\r\n", "\n")
    out, err = f"@@leaseguard {nonce} out@@\n", f"\n@@leaseguard {nonce} err@@ "
    start, stop = text.find(out), text.rfind(err)
    if start < 0 or stop < start + len(out):
        return CommandResult(result.exit_code or 1, "", text)
    status, newline, stderr = text[stop + len(err) :].partition("\n")
    if not (newline and _number(status) is not None):
        return CommandResult(result.exit_code or 1, "", text)
    return CommandResult(int(status), text[start + len(out) : stop], stderr)
