"""The pure half of a host lookup: the container and unit commands, outputs read strictly.
Only the one configured variable leaves the host (the rest of an environment holds secrets)."""

import json
import math
import re
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from leaseguard.core.contract import TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Argv = tuple[str, ...]
# Plain ASCII decimal notation: float() alone also takes "inf", "nan" and "1_000", and both
# float() and a regex's \d read Arabic-Indic or full-width digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Credentials a tool's message might quote: user:password@ in a URL, key=value secrets.
_URL_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")
_SECRET_PAIR = re.compile(r"(?i)\b((?:password|passwd|secret|token|key)\w*\s*[=:]\s*)\S+")
# A glob's units whose process may hold claims: a unit still stopping (a graceful stop
# finishing its job), reloading or starting counts, or its claims would look orphaned.
RUNNING_UNIT_STATES = ("active", "reloading", "deactivating", "activating")

# Filtered on the host (-vvv prints all output): the variable's Environment= entries, then its
# lines of each EnvironmentFile= (they win), or that file unreadable (unless optional and gone).
_SYSTEMD_AWK = r"""
/^Environment=/ { o = "Environment="; k = split(substr($0, 13), w, " ")
  for (i = 1; i <= k; i++) if (w[i] ~ ("^\"?" n "=")) o = o " " w[i]
  print o; next }
/^EnvironmentFiles=/ { p = substr($0, 18); opt = (p ~ / \(ignore_errors=yes\)$/)
  sub(/ \(ignore_errors=[a-z]+\)$/, "", p)
  if (p ~ /[*?[]/) { print "EnvFileUnreadable=" p; next }
  a = "^[ \t]*(export[ \t]+)?" n "[ \t]*="
  while ((r = (getline l < p)) > 0) if (l ~ a) print "EnvFile=" l
  q = p; gsub(/'/, "'\\''", q)
  if (r < 0 && (!opt || system("test -e '" q "'") == 0)) print "EnvFileUnreadable=" p
  close(p); next }
{ print }
"""
_SYSTEMD_SCRIPT = 'out=$(systemctl show "$1" --timestamp=us+utc --property="$2") || exit\n'
_SYSTEMD_SCRIPT += 'printf "%s\\n" "$out" | awk -v n="$3" "$4"'

# A docker filter (`label=K=V`, `name=REGEX`) or a unit glob may match several replicas, any of
# which may hold claims. `inspect --format` prints the variable: no exec, nothing in the image.
COMPOSE_PROJECT, COMPOSE_SERVICE = "com.docker.compose.project", "com.docker.compose.service"
# A paused container holds its claims (frozen, not gone): podman's `ps` leaves it out unless
# asked, and its inspect says Running false, Paused true (docker's: Running true).
_LIVE = "--filter status=running --filter status=paused"
# $1 engine, $2 the container's name, $3 the template: its line, then with compose labels every
# running compose container's (its siblings); a failed `ps` fails: the warning would be missing.
_NAMED_SCRIPT = f"""\
out=$("$1" inspect --type container --format "$3" "$2") || exit
printf '%s\\n' "$out"
case $out in *'"compose":true'*) ;; *) exit 0;; esac
ids=$("$1" ps -q --no-trunc --filter label={COMPOSE_PROJECT} --filter label={COMPOSE_SERVICE} \
{_LIVE}) || exit
[ -z "$ids" ] || exec "$1" inspect --type container --format "$3" $ids
"""
# $1 engine, $2 the filter, $3 the template: one line per running match, none for no match.
_FILTER_SCRIPT = f"""\
ids=$("$1" ps -q --no-trunc --filter "$2" {_LIVE}) || exit
[ -z "$ids" ] || exec "$1" inspect --type container --format "$3" $ids
"""


class CommandResult(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str = ""


def task_timeout_source(spec: TaskTimeoutLookup) -> str:
    """The source reported in verdicts, e.g. docker:backend/APP_TASK_TIMEOUT_S."""
    if spec.source in ("command", "fixed"):
        return f"command:{spec.container}" if spec.source == "command" else "fixed"
    where = {"systemd": spec.unit, "process": spec.pid_file, "env_file": spec.path}
    return f"{spec.source}:{where.get(spec.source, spec.container)}/{spec.variable}"


def systemd_argv(unit: str, variable: str | None = None) -> Argv:
    """The unit's state and start, and with `variable` only what sets it (nothing else)."""
    props = "Id,ActiveEnterTimestamp,ActiveState,LoadState"
    if variable is None:
        return ("systemctl", "show", unit, "--timestamp=us+utc", f"--property={props}")
    props += ",Environment,EnvironmentFiles"
    return ("sh", "-c", _SYSTEMD_SCRIPT, "sh", unit, props, variable, _SYSTEMD_AWK)


def exit_meaning(code: int) -> str:
    return {127: "command not found", 124: "timed out"}.get(code, f"exited {code}")


def first_stderr_line(stderr: str) -> str:
    """A tool's first line of complaint: printable, credentials masked, at most 200 chars."""
    line = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    line = _SECRET_PAIR.sub(r"\1***", _URL_CREDENTIALS.sub(r"\1***@", line))
    return line if len(line) <= 200 else line[:197] + "..."


def env_value(env: Sequence[str], variable: str) -> str | None:
    """The value of one KEY=VALUE entry; the last one wins, as in a process environment."""
    values = [rest for key, sep, rest in (e.partition("=") for e in env) if sep and key == variable]
    return values[-1] if values else None


class Replica(NamedTuple):  # a container or unit a lookup read
    name: str
    started_at: datetime
    entries: tuple[str, ...]  # KEY=VALUE
    compose: tuple[str, str] = ("", "")  # (project, service) of a compose container
    running: bool = True


def parse_systemctl_glob(text: str, pattern: str) -> list[Replica]:
    """The running units of the blocks (RUNNING_UNIT_STATES); none fails, naming the glob."""
    blocks = [(block, _properties(block)) for block in text.split("\n\n")]
    running = [(b, p) for b, p in blocks if p.get("ActiveState") in RUNNING_UNIT_STATES]
    if not running:
        raise LookupFailed(f"no active systemd unit matches {pattern}")
    return [parse_systemctl_show(b, p.get("Id") or pattern, glob=True) for b, p in running]


def _properties(text: str) -> dict[str, str]:
    """name -> value; an EnvironmentFile's lines (EnvFile*) are joined, one per line."""
    props: dict[str, str] = {}
    for name, _, value in (line.partition("=") for line in text.splitlines() if "=" in line):
        props[name] = f"{props[name]}\n{value}" if name in props and "EnvFile" in name else value
    return props


def parse_systemctl_show(text: str, unit: str, *, glob: bool = False) -> Replica:
    """One unit's `systemctl show` block: active, or for a glob in RUNNING_UNIT_STATES."""
    props = _properties(text)
    if props.get("LoadState") == "not-found":
        raise LookupFailed(f"systemd unit {unit} not found")
    if props.get("ActiveState") not in (RUNNING_UNIT_STATES if glob else ("active",)):
        raise LookupFailed(f"systemd unit {unit} is not active ({props.get('ActiveState')})")
    if unreadable := props.get("EnvFileUnreadable"):
        raise LookupFailed(
            f"systemd unit {unit}: its EnvironmentFile {unreadable.splitlines()[0]} cannot be "
            "read by the lookup (not readable by its user, or a wildcard it does not expand) and "
            "may set the variable: let it read the file, or read the process's own environment "
            "(task_timeout source process)"
        )
    try:
        environment = tuple(shlex.split(props.get("Environment", "")))
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: Environment= is not parsable") from None
    for line in filter(None, props.get("EnvFile", "").splitlines()):  # after: these win
        name = line.strip().removeprefix("export").partition("=")[0].strip()
        environment += (f"{name}={parse_env_file_line(line)}",)
    stamp = props.get("ActiveEnterTimestamp", "").strip()  # "Sun 2026-11-29 08:38:08.123456 UTC"
    if not stamp and props.get("ActiveState") == "activating":
        raise LookupFailed(
            f"systemd unit {unit} is starting (activating) and has no start time yet; "
            "check again once it is active"
        )
    try:
        active = datetime.strptime(stamp.partition(" ")[2], "%Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: ActiveEnterTimestamp is not parsable") from None
    return Replica(props.get("Id") or unit, active.replace(tzinfo=UTC), environment)


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


def parse_env_file_line(line: str) -> str:
    """The LAST `[export ]NAME=value` line's value (optional quotes), as sh and systemd read."""
    line = line.strip().splitlines()[-1] if line.strip() else ""
    value = line.strip().removeprefix("export").partition("=")[2].strip()  # systemd: `N = v`
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def is_decimal_text(text: str) -> bool:
    return bool(_DECIMAL.fullmatch(text.strip()))


def parse_timeout_s(value: object, *, what: str = "task timeout") -> float:
    """`value` as seconds > 0; a message never repeats it (a misnamed variable may be a secret)."""
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


def container_filter(container: str) -> str | None:
    """The docker filter `container` spells (`label=K=V`, `label=K`, `name=REGEX`), else None."""
    if not container.startswith(("label=", "name=")):
        return None
    kind, _, wanted = container.partition("=")
    if not wanted or wanted.startswith("="):
        # docker matches nothing for `label=` and everything for `name=`: neither is meant.
        raise LookupFailed(f"container filter {container!r} names no {kind}")
    return container


def is_unit_glob(unit: str) -> bool:
    return not frozenset("*?[").isdisjoint(unit)


def container_argv(engine: str, container: str, variable: str | None) -> Argv:
    """The one command reading `container` (a name or a filter): a JSON line per container, its
    name, state, start, compose labels and only `variable`'s entries (Go compares `NAME=`)."""
    env = ""
    if variable is not None:
        prefix, n = f"{variable}=", len(variable) + 1
        env = (
            f"{{{{range .Config.Env}}}}{{{{if ge (len .) {n}}}}}"
            f'{{{{if eq (slice . 0 {n}) "{prefix}"}}}}{{{{json .}}}},'
            "{{end}}{{end}}{{end}}"
        )
    template = (
        '{"name":{{json .Name}},"running":{{json .State.Running}},"paused":{{json .State.Paused}},'
        '"started_at":{{json .State.StartedAt}},'
        f'"project":{{{{json (index .Config.Labels "{COMPOSE_PROJECT}")}}}},'
        f'"service":{{{{json (index .Config.Labels "{COMPOSE_SERVICE}")}}}},'
        f'"compose":{{{{if index .Config.Labels "{COMPOSE_PROJECT}"}}}}'
        f'{{{{if index .Config.Labels "{COMPOSE_SERVICE}"}}}}true{{{{else}}}}false{{{{end}}}}'
        "{{else}}false{{end}},"
        f'"env":[{env}null]}}'
    )
    script = _NAMED_SCRIPT if container_filter(container) is None else _FILTER_SCRIPT
    return ("sh", "-c", script, "sh", engine, container, template)


def read_containers(text: str, container: str, what: str) -> tuple[list[Replica], list[str]]:
    """A filter's running matches, or the named container and its running compose siblings."""
    replicas = []
    for line in filter(str.strip, text.splitlines()):
        try:
            data = json.loads(line)
            name = str(data["name"]).lstrip("/")  # docker prints "/name", podman "name"
            running = data["running"] is True or data.get("paused") is True
            raw, compose = data["started_at"], (data["project"] or "", data["service"] or "")
            entries = tuple(e for e in data["env"] if isinstance(e, str))
        except (ValueError, KeyError, TypeError):
            raise LookupFailed(f"{what}: inspect output is not a container description") from None
        started = parse_timestamp(raw, what=f"{what} {name} StartedAt")
        replicas.append(Replica(name, started, entries, compose, running))
    if container_filter(container) is not None:
        if not (live := [r for r in replicas if r.running]):
            raise LookupFailed(f"{what}: no running container matches the filter {container}")
        return live, []
    if not replicas:
        raise LookupFailed(f"{what}: inspect output is not a container description")
    named, others = replicas[0], replicas[1:]
    same_service = [r.name for r in others if r.running and r.compose == named.compose]
    return [named], sorted(set(same_service) - {named.name}) if named.compose[0] else []
