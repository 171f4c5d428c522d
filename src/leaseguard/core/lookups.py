"""The pure half of a host lookup: the command each source runs, its output read strictly.

Only the one configured variable is extracted, on the host where the command allows it: the
rest of an environment holds secrets.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from leaseguard.core.contract import TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Argv = tuple[str, ...]
# Plain ASCII decimal notation: float() alone also takes "inf", "nan" and "1_000", and both
# float() and a regex's \d read Arabic-Indic or full-width digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str = ""


def task_timeout_source(spec: TaskTimeoutLookup) -> str:
    """The source reported in verdicts, e.g. docker:backend/APP_TASK_TIMEOUT_S."""
    if spec.source == "command":
        return f"command:{spec.container}"
    where = {"docker": spec.container, "podman": spec.container, "systemd": spec.unit}
    where.update(process=spec.pid_file, env_file=spec.path)
    if spec.source in where:
        return f"{spec.source}:{where[spec.source]}/{spec.variable}"
    return "fixed"


def systemd_argv(unit: str) -> Argv:
    props = "--property=Id,Environment,ActiveEnterTimestamp,ActiveState,LoadState"
    return ("systemctl", "show", unit, "--timestamp=us+utc", props)


def pid_argv(pid_file: str) -> Argv:
    return ("cat", pid_file)


def env_file_argv(path: str, name: str) -> Argv:
    return ("grep", "-m1", "-E", "-e", f"^[[:space:]]*(export[[:space:]]+)?{name}=", path)


def process_env_argv(pid: int, name: str) -> Argv:
    """Filtered on the host: the rest of the environment stays there."""
    return ("grep", "-z", "-m1", "-e", f"^{name}=", f"/proc/{pid}/environ")


def process_start_argv(pid: int) -> Argv:
    return ("sh", "-c", f"getconf CLK_TCK; grep '^btime ' /proc/stat; cat /proc/{pid}/stat")


def checked_env_name(variable: str) -> str:
    if not ENV_NAME.fullmatch(variable):
        raise LookupFailed(f"variable name {variable!r} is not a valid environment variable name")
    return variable


def exit_meaning(code: int) -> str:
    return {127: "command not found", 124: "timed out"}.get(code, f"exited {code}")


# Credentials a tool's message might quote: user:password@ in a URL, key=value secrets.
_URL_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")
_SECRET_PAIR = re.compile(r"(?i)\b((?:password|passwd|secret|token|key)\w*\s*[=:]\s*)\S+")


def first_stderr_line(stderr: str) -> str:
    """A tool's first line of complaint: printable, credentials masked, at most 200 chars."""
    line = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    line = _SECRET_PAIR.sub(r"\1***", _URL_CREDENTIALS.sub(r"\1***@", line))
    return line if len(line) <= 200 else line[:197] + "..."


def env_value(env: Sequence[str], variable: str) -> str | None:
    """The value of one KEY=VALUE entry; the last one wins, as in a process environment."""
    value = None
    for key, sep, rest in (entry.partition("=") for entry in env):
        if sep and key == variable:
            value = rest
    return value


@dataclass(frozen=True)
class SystemdUnit:
    environment: tuple[str, ...]
    active_since: datetime
    name: str = ""


def parse_systemctl_show(text: str, unit: str) -> SystemdUnit:
    """`systemctl show --timestamp=us+utc` output -> Environment= entries and start time."""
    return _systemd_unit(_properties(text), unit)


def parse_systemctl_glob(text: str, pattern: str) -> list[SystemdUnit]:
    """The ACTIVE units of the blocks; none fails, naming the glob (not "nothing runs")."""
    active = [p for p in map(_properties, text.split("\n\n")) if p.get("ActiveState") == "active"]
    if not active:
        raise LookupFailed(f"no active systemd unit matches {pattern}")
    return [_systemd_unit(props, props.get("Id") or pattern) for props in active]


def _properties(text: str) -> dict[str, str]:
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


def _systemd_unit(props: dict[str, str], unit: str) -> SystemdUnit:
    if props.get("LoadState") == "not-found":
        raise LookupFailed(f"systemd unit {unit} not found")
    if props.get("ActiveState") != "active":
        raise LookupFailed(f"systemd unit {unit} is not active ({props.get('ActiveState')})")
    try:
        environment = tuple(shlex.split(props.get("Environment", "")))
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: Environment= is not parsable") from None
    stamp = props.get("ActiveEnterTimestamp", "").strip()  # "Sun 2026-11-29 08:38:08.123456 UTC"
    try:
        active = datetime.strptime(stamp.partition(" ")[2], "%Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: ActiveEnterTimestamp is not parsable") from None
    return SystemdUnit(environment, active.replace(tzinfo=UTC), props.get("Id") or unit)


def parse_process_start(text: str, what: str) -> datetime:
    """CLK_TCK, the `btime` line of /proc/stat and /proc/PID/stat -> the process start."""
    lines = text.splitlines()
    try:
        ticks_per_s, boot = int(lines[0]), int(lines[1].split()[1])
        # comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
        start_ticks = int(lines[2].rpartition(")")[2].split()[19])  # field 22, starttime
    except (IndexError, ValueError):
        raise LookupFailed(f"{what}: /proc does not describe the process") from None
    return datetime.fromtimestamp(boot, UTC) + timedelta(seconds=start_ticks / ticks_per_s)


def parse_env_file_line(line: str, name: str) -> str:
    """The value of `[export ]NAME=value` with optional quotes, as env files write it."""
    value = line.strip().removeprefix("export").strip()[len(name) + 1 :].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def is_decimal_text(text: str) -> bool:
    """Whether `text`, surrounding whitespace aside, is a number in plain ASCII notation."""
    return bool(_DECIMAL.fullmatch(text.strip()))


def parse_timeout_s(value: object, *, what: str = "task timeout") -> float:
    """`value` (text read from a host) as seconds > 0; a message never repeats the value (a
    misnamed variable could point at a secret)."""
    if isinstance(value, bool):
        raise TimeoutValueError(f"{what} is a boolean, not a number of seconds")
    if isinstance(value, str):
        if not value.strip():
            raise TimeoutValueError(f"{what} is empty, expected a number of seconds")
        if not is_decimal_text(value):
            raise TimeoutValueError(f"{what} is not a number of seconds")
        value = float(value)
    if not isinstance(value, int | float):
        raise TimeoutValueError(f"{what} has type {type(value).__name__}, expected a number")
    if not math.isfinite(value):
        raise TimeoutValueError(f"{what} is not finite")
    if value <= 0:
        raise TimeoutValueError(f"{what} must be greater than 0 seconds")
    return float(value)


def parse_timestamp(text: str, *, what: str) -> datetime:
    """An RFC 3339 timestamp with a timezone; nanoseconds are cut to microseconds."""
    cleaned = str(text).strip()
    # Go's zero time (0001-01-01T00:00:00Z): docker's StartedAt of a container never started.
    if not cleaned or cleaned.startswith("0001-01-01"):
        raise LookupFailed(f"{what} is not set (never started?)")
    cleaned = cleaned.replace("Z", "+00:00").replace("z", "+00:00")
    cleaned = re.sub(r"\.(\d+)", lambda m: "." + m[1][:6].ljust(6, "0"), cleaned, count=1)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise LookupFailed(f"{what} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise LookupFailed(f"{what} has no timezone")
    return moment
