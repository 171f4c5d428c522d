"""Several lookup commands and a clock reading as ONE shell script, and its output split back.

Over SSH every exec pays the host's login shell (its rc files: ~160 ms with a pyenv
.bashrc), so the lookups a contract needs run as one `sh` script (leaseguard.adapters.
host_lookup runs it). Writing the script and reading its output is pure, and here.

Each command's stdout sits between an `out` and an `end` line (the latter carries its exit
status), its stderr follows an `err` line; a random nonce (the caller's) keeps a command's
own output from passing for a marker.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from leaseguard.core.contract import Contract, RuntimeLookup
from leaseguard.core.lookups import (
    ENV_NAME,
    Argv,
    CommandResult,
    command_argv,
    env_file_argv,
    inspect_argv,
    pid_argv,
    systemd_argv,
)


def planned_commands(contract: Contract, *, timeout_given: bool, start_given: bool) -> list[Argv]:
    """The commands the lookups will run first, each once (those known in advance)."""
    wanted = () if timeout_given else _planned_timeout(contract)
    if not start_given:
        wanted = (*wanted, *_planned_start(contract.runtime))
    return list(dict.fromkeys(wanted))


def _planned_timeout(contract: Contract) -> tuple[Argv, ...]:
    spec = contract.task_timeout
    if contract.rows_carry_expiry:
        return ()
    match spec.source:
        case "docker" | "podman":
            return (inspect_argv(spec.source, spec.container),)
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


def _planned_start(spec: RuntimeLookup) -> tuple[Argv, ...]:
    match spec.source:
        case "docker" | "podman":
            return (inspect_argv(spec.source, spec.container),)
        case "systemd" if spec.unit is not None:
            return (systemd_argv(spec.unit),)
        case "process" if spec.pid_file is not None:
            return (pid_argv(spec.pid_file),)
        case _:
            return ()


def _marker(nonce: str, what: str) -> str:
    return f"@@leaseguard {nonce} {what}@@"


def batch_script(commands: Sequence[Argv], nonce: str) -> str:
    """A `sh` script running each command in turn, then `date +%s.%N`."""
    lines = []
    for i, argv in enumerate(commands):
        out, err, end = (_marker(nonce, f"{part} {i}") for part in ("out", "err", "end"))
        lines.append(
            f"printf '\\n%s\\n' '{out}'; printf '\\n%s\\n' '{err}' >&2; "
            f"{shlex.join(argv)} </dev/null; printf '\\n%s %d\\n' '{end}' \"$?\""
        )
    lines.append(f"printf '\\n%s\\n' '{_marker(nonce, 'clock')}'; date +%s.%N")
    return "\n".join(lines)


def split_batch(
    commands: Sequence[Argv], nonce: str, result: CommandResult
) -> dict[Argv, CommandResult]:
    """Each command's own CommandResult out of the script's output.

    A command the script never finished (the exec timed out or was cut) gets the exec's
    exit status, so it fails as it would have alone.
    """
    errs = re.split(rf"\n@@leaseguard {nonce} err (\d+)@@\n", "\n" + result.stderr)
    stderr_of = {int(i): text for i, text in zip(errs[1::2], errs[2::2], strict=True)}
    split = {}
    for i, argv in enumerate(commands):
        out, end = _marker(nonce, f"out {i}"), _marker(nonce, f"end {i}")
        found = re.search(
            rf"\n{re.escape(out)}\n(.*)\n{re.escape(end)} (\d+)\n", result.stdout, flags=re.S
        )
        if found is None:
            split[argv] = CommandResult(result.exit_code or 1, "", stderr_of.get(i, ""))
        else:
            split[argv] = CommandResult(int(found[2]), found[1], stderr_of.get(i, ""))
    return split


def batch_clock(stdout: str, nonce: str) -> float | None:
    """The script's closing `date +%s.%N` reading; None if it has none."""
    found = re.search(rf"\n{re.escape(_marker(nonce, 'clock'))}\n(\S+)\s*\Z", stdout)
    try:
        return float(found[1]) if found else None
    except ValueError:
        return None
