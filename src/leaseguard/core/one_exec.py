"""A host's lookup commands and a clock reading as ONE `sh` script (over SSH every exec pays
the host's login shell), and its output split back.

Each part of the output opens with a line `@@leaseguard NONCE@@ KEY` (on stdout, and on
stderr for the command's stderr): KEY is the command's index, `I rc` its exit status, `I pid`
the pid it ran on, `clock` the closing `date`. The caller's random nonce keeps a command's
own output from passing for a marker.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from leaseguard.core.lookups import Argv, CommandResult


@dataclass
class Plan:
    """The commands to run. A placeholder pid (a key of `pid_files`) in a command is
    replaced by the pid its file holds when the script runs (no pid: the command is not run)."""

    commands: list[Argv] = field(default_factory=list)
    pid_files: dict[str, str] = field(default_factory=dict)

    def placeholder(self, argv: Argv) -> str | None:
        return next((slot for slot in self.pid_files if any(slot in a for a in argv)), None)


def batch_script(plan: Plan, nonce: str) -> str:
    """Each command in turn (stdin closed), then `date +%s.%N`; `lg_pid` is exported."""

    def part(key: int, command: str) -> str:
        mark = f"'@@leaseguard {nonce}@@ {key}'"
        return (
            f"printf '\\n%s\\n' {mark}; printf '\\n%s\\n' {mark} >&2; {command} </dev/null; "
            f"printf '\\n%s\\n%d\\n' '@@leaseguard {nonce}@@ {key} rc' \"$?\""
        )

    lines = []
    for i, argv in enumerate(plan.commands):
        slot = plan.placeholder(argv)
        if slot is None:
            lines.append(part(i, shlex.join(argv)))
            continue
        lines.append(
            f"lg_pid=$(cat {shlex.quote(plan.pid_files[slot])} 2>/dev/null </dev/null); "
            "case $lg_pid in ''|*[!0-9]*) ;; *) export lg_pid; "
            f"printf '\\n%s\\n%s' '@@leaseguard {nonce}@@ {i} pid' \"$lg_pid\"; "
            f"{part(i, shlex.join(argv).replace(slot, '${lg_pid}'))};; esac"
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

    A command never finished (the exec timed out) gets the exec's exit status, as alone. A
    command on a pid file's process is keyed by the pid the script read: a lookup reading
    another pid (the file rewritten meanwhile) runs its command alone.
    """
    out, err = _parts(result.stdout, nonce), _parts(result.stderr, nonce)
    split = {}
    for i, argv in enumerate(plan.commands):
        status, slot, stderr = (
            _number(out.get(f"{i} rc", "")),
            plan.placeholder(argv),
            err.get(str(i), ""),
        )
        if status is None or str(i) not in out:  # never finished (or never ran, on a pid)
            if slot is None:
                split[argv] = CommandResult(result.exit_code or 1, "", stderr)
        elif slot is None:
            split[argv] = CommandResult(status, out[str(i)], stderr)
        elif (pid := _number(out.get(f"{i} pid", ""))) is not None:
            real = tuple(a.replace(slot, str(pid)) for a in argv)
            split[real] = CommandResult(status, out[str(i)], stderr)
    try:
        clock: float | None = float(out.get("clock", ""))
    except ValueError:
        clock = None
    return split, clock


# Through become, ansible's ssh runs commands on a tty: stderr merged into stdout, CRLF line
# ends. The shell captures the command's stderr and prints it after a marked line instead.
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
    never ran (become failed): the output is the complaint, the status at least 1."""
    text = result.stdout.replace("\r\n", "\n")
    out, err = f"@@leaseguard {nonce} out@@\n", f"\n@@leaseguard {nonce} err@@ "
    start, stop = text.find(out), text.rfind(err)
    if start < 0 or stop < start + len(out):
        return CommandResult(result.exit_code or 1, "", text)
    status, newline, stderr = text[stop + len(err) :].partition("\n")
    if not (newline and _number(status) is not None):
        return CommandResult(result.exit_code or 1, "", text)
    return CommandResult(int(status), text[start + len(out) : stop], stderr)
