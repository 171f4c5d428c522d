"""Several lookup commands and a clock reading as ONE shell script, and its output split back.

Over SSH every exec pays the host's login shell (its rc files: ~160 ms with a pyenv
.bashrc), so the lookups a contract needs run as one `sh` script (leaseguard.adapters.
host_lookup runs it). Writing the script and reading its output is pure, and here.

Each command's stdout sits between an `out` and an `end` line (the latter carries its exit
status), its stderr follows an `err` line; a random nonce (the caller's) keeps a command's
own output from passing for a marker.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from leaseguard.core.contract import Contract, RuntimeLookup
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import (
    ENV_NAME,
    Argv,
    CommandResult,
    command_argv,
    env_file_argv,
    pid_argv,
    process_env_argv,
    process_start_argv,
    systemd_argv,
)
from leaseguard.core.replicas import container_argv, container_filter, shared_variable


@dataclass(frozen=True)
class PidCommand:
    """A command on the process a pid file names (its environment, its start time).

    The script reads the pid file itself and runs `argv_for(pid)`; the result is kept under
    the argv of the pid the script read, so a lookup that reads another pid (the file was
    rewritten meanwhile) finds nothing there and runs its command alone.
    """

    pid_file: str
    argv_for: Callable[[int], Argv]


@dataclass(frozen=True)
class Plan:
    """The commands the lookups will run, each once: those known in advance, then those
    on a pid file's process."""

    commands: list[Argv]
    on_pid: list[PidCommand]


def planned_commands(contract: Contract, *, timeout_given: bool, start_given: bool) -> Plan:
    wanted = () if timeout_given else _planned_timeout(contract)
    on_pid = [] if timeout_given else _timeout_on_pid(contract)
    if not start_given:
        looked_up = not (timeout_given or contract.rows_carry_expiry)
        variable = shared_variable(contract, timeout_looked_up=looked_up)
        wanted = (*wanted, *_planned_start(contract.runtime, variable))
        on_pid += _start_on_pid(contract.runtime)
    return Plan(list(dict.fromkeys(wanted)), on_pid)


def _timeout_on_pid(contract: Contract) -> list[PidCommand]:
    spec = contract.task_timeout
    if contract.rows_carry_expiry or spec.source != "process" or spec.pid_file is None:
        return []
    if not ENV_NAME.fullmatch(spec.variable):
        return []
    name = spec.variable
    return [PidCommand(spec.pid_file, lambda pid: process_env_argv(pid, name))]


def _start_on_pid(spec: RuntimeLookup) -> list[PidCommand]:
    if spec.source != "process" or spec.pid_file is None:
        return []
    return [PidCommand(spec.pid_file, process_start_argv)]


def _planned_timeout(contract: Contract) -> tuple[Argv, ...]:
    spec = contract.task_timeout
    if contract.rows_carry_expiry:
        return ()
    match spec.source:
        case "docker" | "podman" if _plannable(spec.container) and ENV_NAME.fullmatch(
            spec.variable
        ):
            return (container_argv(spec.source, spec.container, spec.variable),)
        case "command":
            return (command_argv(spec),)
        case "systemd" if spec.unit is not None:
            return (systemd_argv(spec.unit),)
        case "process" if spec.pid_file is not None:
            return (pid_argv(spec.pid_file),)
        case "env_file" if spec.path is not None and ENV_NAME.fullmatch(spec.variable):
            return (env_file_argv(spec.path, spec.variable),)
        case _:
            return ()


def _planned_start(spec: RuntimeLookup, variable: str | None) -> tuple[Argv, ...]:
    match spec.source:
        case "docker" | "podman" if _plannable(spec.container):
            return (container_argv(spec.source, spec.container, variable),)
        case "systemd" if spec.unit is not None:
            return (systemd_argv(spec.unit),)
        case "process" if spec.pid_file is not None:
            return (pid_argv(spec.pid_file),)
        case _:
            return ()


def _plannable(container: str) -> bool:
    """A filter that names nothing is left to its lookup, which fails naming it."""
    try:
        container_filter(container)
    except LookupFailed:
        return False
    return True


def _marker(nonce: str, what: str) -> str:
    return f"@@leaseguard {nonce} {what}@@"


# Stands for the pid in a PidCommand's argv; the script puts its own reading there.
_PID_SLOT = 918273645546372819


def batch_script(commands: Sequence[Argv], nonce: str, on_pid: Sequence[PidCommand] = ()) -> str:
    """A `sh` script running each command in turn, then `date +%s.%N`.

    A PidCommand runs only when its pid file holds digits; `lg_pid` is exported because a
    `sh -c '...'` command reads it inside its own single quotes.
    """
    lines = [_section_line(nonce, i, shlex.join(argv)) for i, argv in enumerate(commands)]
    for i, follow in enumerate(on_pid, start=len(commands)):
        argv = shlex.join(follow.argv_for(_PID_SLOT)).replace(str(_PID_SLOT), "${lg_pid}")
        lines.append(
            f"lg_pid=$(cat {shlex.quote(follow.pid_file)} 2>/dev/null </dev/null); "
            "case $lg_pid in ''|*[!0-9]*) ;; *) export lg_pid; "
            f"{_section_line(nonce, i, argv, pid=True)};; esac"
        )
    lines.append(f"printf '\\n%s\\n' '{_marker(nonce, 'clock')}'; date +%s.%N")
    return "\n".join(lines)


def _section_line(nonce: str, i: int, command: str, *, pid: bool = False) -> str:
    """`command` between its markers; with `pid`, the pid it ran on opens its stdout."""
    out, err, end = (_marker(nonce, f"{part} {i}") for part in ("out", "err", "end"))
    opening = f"printf '\\n%s\\n%s\\n' '{out}' \"$lg_pid\"" if pid else f"printf '\\n%s\\n' '{out}'"
    return (
        f"{opening}; printf '\\n%s\\n' '{err}' >&2; "
        f"{command} </dev/null; printf '\\n%s %d\\n' '{end}' \"$?\""
    )


def split_batch(
    commands: Sequence[Argv],
    nonce: str,
    result: CommandResult,
    on_pid: Sequence[PidCommand] = (),
) -> dict[Argv, CommandResult]:
    """Each command's own CommandResult out of the script's output.

    A command the script never finished (the exec timed out or was cut) gets the exec's
    exit status, so it fails as it would have alone; a PidCommand that did not run is left
    out (its lookup runs it alone). Plain string search, no regex: a
    pattern holding the nonce would be compiled anew for every host (~6 ms each).
    """
    stderr_of = _stderr_sections(result.stderr, nonce)
    split = {}
    for i, argv in enumerate(commands):
        found = _section(result.stdout, _marker(nonce, f"out {i}"), _marker(nonce, f"end {i}"))
        if found is None:
            split[argv] = CommandResult(result.exit_code or 1, "", stderr_of.get(i, ""))
        else:
            split[argv] = CommandResult(found[1], found[0], stderr_of.get(i, ""))
    for i, follow in enumerate(on_pid, start=len(commands)):
        found = _section(result.stdout, _marker(nonce, f"out {i}"), _marker(nonce, f"end {i}"))
        pid, _, stdout = found[0].partition("\n") if found else ("", "", "")
        if found is not None and pid.isascii() and pid.isdigit():
            split[follow.argv_for(int(pid))] = CommandResult(found[1], stdout, stderr_of.get(i, ""))
    return split


def _section(stdout: str, out: str, end: str) -> tuple[str, int] | None:
    """The text between `\n<out>\n` and the last `\n<end> STATUS\n`, and STATUS."""
    start = stdout.find(f"\n{out}\n")
    stop = stdout.rfind(f"\n{end} ")
    if start < 0 or stop < start + len(out) + 1:
        return None
    status, newline, _ = stdout[stop + len(end) + 2 :].partition("\n")
    if not (newline and status.isascii() and status.isdigit()):
        return None
    return stdout[start + len(out) + 2 : stop], int(status)


def _stderr_sections(stderr: str, nonce: str) -> dict[int, str]:
    """Each command's stderr: the text after its `err` line, up to the next one."""
    sections: dict[int, str] = {}
    parts = ("\n" + stderr).split(f"\n@@leaseguard {nonce} err ")
    for part in parts[1:]:
        index, marker_end, text = part.partition("@@\n")
        if marker_end and index.isascii() and index.isdigit():
            sections[int(index)] = text
    return sections


def batch_clock(stdout: str, nonce: str) -> float | None:
    """The script's closing `date +%s.%N` reading; None if it has none."""
    marker = f"\n{_marker(nonce, 'clock')}\n"
    found = stdout.rfind(marker)
    reading = stdout[found + len(marker) :].rstrip() if found >= 0 else ""
    if not reading or any(ch.isspace() for ch in reading):
        return None
    try:
        return float(reading)
    except ValueError:
        return None


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
    """`tty_argv`'s command's own result, CRLF undone, out of the tty's one stream.

    Without both markers the command never ran (become itself failed): the whole output is
    then the complaint, as stderr, and the exit status at least 1.
    """
    text = result.stdout.replace("\r\n", "\n")
    out, err = _marker(nonce, "out") + "\n", "\n" + _marker(nonce, "err") + " "
    start, stop = text.find(out), text.rfind(err)
    found = start >= 0 and stop >= start + len(out)
    status, newline, stderr = text[stop + len(err) :].partition("\n") if found else ("",) * 3
    if not (newline and status.isascii() and status.isdigit()):
        return CommandResult(result.exit_code or 1, "", text)
    return CommandResult(int(status), text[start + len(out) : stop], stderr)
